/* schedule_costs.c — where job durations come from: unit costs ([U] Table 1), a
 * measured profile (CSV), or the op cost functions of a model (core/op.h). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "core/error.h"
#include "core/io/fileio.h"
#include "core/model.h"
#include "core/tape.h"
#include "schedulers/plan/limits.h"
#include "schedulers/plan/schedule.h"

static sp_costs *costs_alloc(int stages)
{
    sp_costs *c = sp_xcalloc(1, sizeof *c);
    c->stages = stages;
    c->name = sp_xcalloc(stages, sizeof *c->name);
    c->fwd = sp_xcalloc(stages, sizeof(double));
    c->delta = sp_xcalloc(stages, sizeof(double));
    c->grad = sp_xcalloc(stages, sizeof(double));
    c->act_bytes = sp_xcalloc(stages, sizeof(double));
    c->param_bytes = sp_xcalloc(stages, sizeof(double));
    c->movable = sp_xcalloc(stages, sizeof(bool));
    c->opt = sp_xcalloc(stages, sizeof(double));
    for (int s = 0; s < stages; s++) {
        snprintf(c->name[s], SP_STAGE_NAME, "stage%d", s);
        c->act_bytes[s] = 1;
        c->param_bytes[s] = 1;
        c->movable[s] = true;
    }
    strcpy(c->unit, "unit");
    return c;
}

void sp_costs_free(sp_costs *c)
{
    if (!c) return;
    free(c->name);
    free(c->fwd);
    free(c->delta);
    free(c->grad);
    free(c->act_bytes);
    free(c->param_bytes);
    free(c->movable);
    free(c->out_bytes);
    free(c->opt);
    free(c);
}

double sp_costs_bwd(const sp_costs *c, int stage) { return c->delta[stage] + c->grad[stage]; }

/* Every duration and size within the bounds every caller shares (schedulers/plan/limits.h):
 * the simulator adds durations up over micro-batches and the partitioners over stages,
 * and an inf there makes no partition fit (which once wrote before its array). what:
 * where they came from. Returns SP_OK, or SP_ERR with the line (c is the caller's). */
static int costs_check(const sp_costs *c, const char *what)
{
    double total = 0;
    for (int s = 0; s < c->stages; s++) {
        const double d[4] = {c->fwd[s], c->delta[s], c->grad[s], c->opt[s]};
        static const char *col[4] = {"fwd", "bwd_delta", "bwd_grad", "opt"};
        char w[128 + SP_STAGE_NAME];
        for (int k = 0; k < 4; k++)
            if (!sp_limit_time_ok(d[k])) {
                snprintf(w, sizeof w, "%s: stage %s: %s", what, c->name[s], col[k]);
                return sp_limit_time(w, d[k]);
            }
        const double b[3] = {c->act_bytes[s], c->param_bytes[s], c->out_bytes ? c->out_bytes[s] : 0};
        static const char *bcol[3] = {"act_bytes", "param_bytes", "output bytes"};
        for (int k = 0; k < 3; k++)
            if (!sp_limit_bytes_ok(b[k])) {
                snprintf(w, sizeof w, "%s: stage %s: %s", what, c->name[s], bcol[k]);
                return sp_limit_bytes(w, b[k]);
            }
        total += d[0] + d[1] + d[2];
    }
    if (!(total <= SP_COSTS_MAX_TOTAL))
        return sp_error("%s: the stage durations add up to %g (expected at most %g: the schedule's sums would "
                        "overflow)", what, total, SP_COSTS_MAX_TOTAL);
    return SP_OK;
}

/* c, or (refused) an sp_fail with c freed */
static sp_costs *costs_checked(sp_costs *c, const char *what)
{
    if (costs_check(c, what) != SP_OK) {
        sp_costs_free(c);
        sp_fail("%s", sp_last_error());
    }
    return c;
}

sp_costs *sp_costs_uniform(int stages, double fwd, double delta, double grad)
{
    if (stages < 1) sp_fail("--stages %d: expected >= 1", stages);
    if (!(fwd >= 0) || !(delta >= 0) || !(grad >= 0))
        sp_fail("costs %g/%g/%g: expected forward, delta and G durations >= 0", fwd, delta, grad);
    if (sp_limit_time("--fwd-cost", fwd) != SP_OK || sp_limit_time("--delta-cost", delta) != SP_OK ||
        sp_limit_time("--grad-cost", grad) != SP_OK)
        sp_fail("%s", sp_last_error());
    sp_costs *c = costs_alloc(stages);
    for (int s = 0; s < stages; s++) {
        c->fwd[s] = fwd;
        c->delta[s] = delta;
        c->grad[s] = grad;
    }
    return costs_checked(c, "--fwd-cost/--bwd-cost/--delta-cost/--grad-cost");
}

/* ------------------------------------------------------------------------------------ */
/* Profile CSV                                                                          */

enum { COL_NAME, COL_FWD, COL_GRAD, COL_DELTA, COL_MOVABLE, COL_ACT, COL_PARAM, COL_OPT, NCOLS };

static const char *const COL_ALIASES[NCOLS][4] = {
    [COL_NAME] = {"layer", "name", "stage", NULL},
    [COL_FWD] = {"fwd", "fp", "forward", NULL},
    [COL_GRAD] = {"bwd_grad", "bp_g", "grad", "g"},
    [COL_DELTA] = {"bwd_delta", "bp_delta", "delta", NULL},
    [COL_MOVABLE] = {"movable", NULL},
    [COL_ACT] = {"act_bytes", NULL},
    [COL_PARAM] = {"param_bytes", NULL},
    [COL_OPT] = {"opt", "optimizer", NULL},
};

static char *trim(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

/* Splits line at commas in place; returns the number of fields (at most max). */
static int split_fields(char *line, char **field, int max)
{
    int n = 0;
    for (char *p = line;; ) {
        char *comma = strchr(p, ',');
        if (comma) *comma = 0;
        if (n < max) field[n] = trim(p);
        n++;
        if (!comma) return n;
        p = comma + 1;
    }
}

static int column_kind(const char *name)
{
    for (int k = 0; k < NCOLS; k++)
        for (int a = 0; a < 4 && COL_ALIASES[k][a]; a++)
            if (strcasecmp(name, COL_ALIASES[k][a]) == 0) return k;
    return -1;
}

typedef struct csv_header {
    int col[NCOLS];   /* field index of each kind, −1 when absent */
    int nfields;
} csv_header;

static csv_header parse_header(const char *path, int lineno, char *line)
{
    char *field[64];
    csv_header h;
    for (int k = 0; k < NCOLS; k++) h.col[k] = -1;
    h.nfields = split_fields(line, field, 64);
    if (h.nfields > 64) sp_fail("%s:%d: %d columns (expected at most 64)", path, lineno, h.nfields);
    for (int i = 0; i < h.nfields; i++) {
        int k = column_kind(field[i]);
        if (k < 0)
            sp_fail("%s:%d: unknown column '%s' (expected layer, fwd, bwd_grad, bwd_delta, "
                    "movable, act_bytes, param_bytes, opt)",
                    path, lineno, field[i]);
        if (h.col[k] >= 0) sp_fail("%s:%d: column '%s' given twice", path, lineno, field[i]);
        h.col[k] = i;
    }
    if (h.col[COL_FWD] < 0 || h.col[COL_GRAD] < 0 || h.col[COL_DELTA] < 0)
        sp_fail("%s:%d: header must name the columns fwd, bwd_grad and bwd_delta (e.g. "
                "'layer,fwd,bwd_grad,bwd_delta')",
                path, lineno);
    return h;
}

static double parse_number(const char *path, int lineno, const char *col, const char *text)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (!*text || *end || errno || !isfinite(v) || v < 0)
        sp_fail("%s:%d: column %s: '%s' is not a number >= 0", path, lineno, col, text);
    return v;
}

/* One stage's row, parsed without allocating (so an error leaves nothing behind). */
typedef struct csv_row {
    char name[SP_STAGE_NAME];
    double fwd, grad, delta, act_bytes, param_bytes, opt;
    bool movable, has_name;
} csv_row;

static csv_row parse_row(const char *path, int lineno, char *line, const csv_header *h)
{
    char *field[64];
    int n = split_fields(line, field, 64);
    if (n != h->nfields)
        sp_fail("%s:%d: %d fields (expected %d, as in the header)", path, lineno, n, h->nfields);
    csv_row r = {.act_bytes = 1, .param_bytes = 1, .movable = true};
    if (h->col[COL_NAME] >= 0) {
        snprintf(r.name, SP_STAGE_NAME, "%s", field[h->col[COL_NAME]]);
        r.has_name = true;
    }
    r.fwd = parse_number(path, lineno, "fwd", field[h->col[COL_FWD]]);
    r.grad = parse_number(path, lineno, "bwd_grad", field[h->col[COL_GRAD]]);
    r.delta = parse_number(path, lineno, "bwd_delta", field[h->col[COL_DELTA]]);
    if (h->col[COL_ACT] >= 0) r.act_bytes = parse_number(path, lineno, "act_bytes", field[h->col[COL_ACT]]);
    if (h->col[COL_PARAM] >= 0) r.param_bytes = parse_number(path, lineno, "param_bytes", field[h->col[COL_PARAM]]);
    if (h->col[COL_OPT] >= 0) r.opt = parse_number(path, lineno, "opt", field[h->col[COL_OPT]]);
    if (h->col[COL_MOVABLE] >= 0) {
        const char *m = field[h->col[COL_MOVABLE]];
        if (strcmp(m, "0") != 0 && strcmp(m, "1") != 0)
            sp_fail("%s:%d: column movable: '%s' (expected 0 or 1)", path, lineno, m);
        r.movable = m[0] == '1';
    }
    return r;
}

static void store_row(sp_costs *c, int s, const csv_row *r)
{
    if (r->has_name) snprintf(c->name[s], SP_STAGE_NAME, "%s", r->name);
    c->fwd[s] = r->fwd;
    c->grad[s] = r->grad;
    c->delta[s] = r->delta;
    c->act_bytes[s] = r->act_bytes;
    c->param_bytes[s] = r->param_bytes;
    c->movable[s] = r->movable;
    c->opt[s] = r->opt;
}

/* A line worth parsing: not blank, not a '#' comment. Strips the newline. */
static bool content_line(char *line)
{
    line[strcspn(line, "\r\n")] = 0;
    char *t = trim(line);
    return *t && *t != '#';
}

/* Reads the file twice: the first pass validates every row and counts them, the second
 * stores them (c == NULL: the first pass). Returns the number of rows. */
static int read_rows(FILE *f, const char *path, sp_costs *c)
{
    char line[4096];
    int lineno = 0, rows = 0;
    csv_header h = {.nfields = 0};
    rewind(f);
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) sp_fail("%s:%d: line longer than %zu bytes", path, lineno, sizeof line - 1);
        if (!content_line(line)) continue;
        if (h.nfields == 0) {
            h = parse_header(path, lineno, line);
            continue;
        }
        csv_row r = parse_row(path, lineno, line, &h);
        if (c) store_row(c, rows, &r), c->has_opt = h.col[COL_OPT] >= 0;
        rows++;
    }
    if (h.nfields == 0 || rows == 0) sp_fail("%s: no stages (expected a header line and one row per stage)", path);
    return rows;
}

typedef struct csv_load {
    const char *path;
    FILE *f;
    sp_costs *c;
} csv_load;

/* The reader proper; its refusals are sp_fail, which sp_costs_load_csv turns into a
 * status (sp_try) after freeing what is held here. */
static void load_body(void *arg)
{
    csv_load *l = arg;
    l->f = sp_open_text(l->path, "profile");
    if (!l->f) sp_fail("%s", sp_last_error());
    int rows = read_rows(l->f, l->path, NULL);
    l->c = costs_alloc(rows);
    strcpy(l->c->unit, "profile");
    read_rows(l->f, l->path, l->c);
    if (costs_check(l->c, l->path) != SP_OK) sp_fail("%s", sp_last_error());   /* the caller frees l->c */
}

int sp_costs_load_csv(const char *path, sp_costs **out)
{
    csv_load l = {.path = path};
    int rc = sp_try(load_body, &l);
    if (l.f) fclose(l.f);
    if (rc != SP_OK) {
        sp_costs_free(l.c);
        return SP_ERR;
    }
    *out = l.c;
    return SP_OK;
}

sp_costs *sp_costs_read_csv(const char *path)
{
    sp_costs *c = NULL;
    sp_check(sp_costs_load_csv(path, &c));
    return c;
}

/* The opt column only when measured (has_opt); a profile without it reads alike. */
void sp_costs_write_csv(FILE *out, const sp_costs *c)
{
    fprintf(out, "layer,fwd,bwd_grad,bwd_delta,movable,act_bytes,param_bytes%s\n", c->has_opt ? ",opt" : "");
    for (int s = 0; s < c->stages; s++) {
        fprintf(out, "%s,%.6g,%.6g,%.6g,%d,%.15g,%.15g", c->name[s], c->fwd[s], c->grad[s], c->delta[s],
                c->movable[s] ? 1 : 0, c->act_bytes[s], c->param_bytes[s]);
        if (c->has_opt) fprintf(out, ",%.6g", c->opt[s]);
        fprintf(out, "\n");
    }
}

/* ------------------------------------------------------------------------------------ */
/* Model-derived costs                                                                  */

/* Record the model on a shape-only tape (nothing runs) and read each node's cost; one
 * stage per segment (sp_tape_segments: per op node for a chain). */
static sp_costs *model_costs(struct sp_model *m, int in_ndim, const int *in_shape, int batch, double gflops,
                             const double *layer_us)
{
    if (batch < 1) sp_fail("--batch-size %d: expected >= 1", batch);
    if (!layer_us && !(gflops > 0)) sp_fail("--gflops %g: expected > 0", gflops);
    sp_tape t;
    sp_model_forward_shapes(m, &t, batch, in_ndim, in_shape);
    int *last = sp_xmalloc(sizeof(int) * (size_t)t.n), stages = sp_tape_segments(&t, last);
    if (stages == 0) {
        free(last);
        sp_tape_free(&t);
        sp_fail("--model %s: no layers", m->name);
    }
    if (stages == 1 && m->nlayers > 1 && !sp_model_is_chain(m)) {
        free(last);
        sp_tape_free(&t);
        sp_fail("--model %s: no layer that every path from the input to the output goes through but the last (its "
                "connections leave nothing to cut it at); the pipeline schedules need a chain of stages", m->name);
    }
    sp_costs *c = costs_alloc(stages);
    c->out_bytes = sp_xcalloc((size_t)stages, sizeof(double));
    strcpy(c->unit, "us");
    double per_us = gflops * 1e3;   /* FLOPs per microsecond */
    for (int s = 0, first = 1; s < stages; first = last[s++] + 1) {
        sp_tape_segment_name(&t, first, last[s] + 1, c->name[s]);
        c->param_bytes[s] = 0;
        for (int i = first; i <= last[s]; i++) {
            sp_node *n = t.nodes[i];
            if (!n->op) continue;
            sp_cost k = n->op->cost(n);
            if (layer_us) {   /* node i is layer i − 1 (node 0: the input) */
                c->fwd[s] += layer_us[3 * (i - 1)];
                c->delta[s] += layer_us[3 * (i - 1) + 1];
                c->grad[s] += layer_us[3 * (i - 1) + 2];
            } else {
                c->fwd[s] += k.fwd_flops / per_us;
                c->delta[s] += k.bwd_input_flops / per_us;
                c->grad[s] += k.bwd_params_flops / per_us;
            }
            c->param_bytes[s] += k.param_bytes;
        }
        c->act_bytes[s] = sp_tape_segment_act_bytes(&t, first, last[s] + 1);
        c->out_bytes[s] = 4.0 * (double)t.nodes[last[s]]->out.numel;
    }
    free(last);
    sp_tape_free(&t);
    char what[96];
    snprintf(what, sizeof what, "--model %s --gflops %g", m->name, gflops);
    return costs_checked(c, layer_us ? m->name : what);
}

sp_costs *sp_costs_from_model(struct sp_model *m, int in_ndim, const int *in_shape, int batch, double gflops)
{
    return model_costs(m, in_ndim, in_shape, batch, gflops, NULL);
}

sp_costs *sp_costs_from_model_times(struct sp_model *m, int in_ndim, const int *in_shape, int batch,
                                    const double *layer_us)
{
    if (!m) sp_fail("sp_costs_from_model_times: argument 'm' is NULL");
    if (!layer_us) sp_fail("sp_costs_from_model_times: argument 'layer_us' is NULL");
    return model_costs(m, in_ndim, in_shape, batch, 0, layer_us);
}
