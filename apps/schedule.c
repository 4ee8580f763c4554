/* schedule — simulate a parallel-training schedule and draw it, or balance a pipeline
 * with LayerPipe. Thin main: flags → schedulers/schedule.h → print.
 *
 *   schedule --scheme lpp --stages 8 --microbatches 16 --groups 2 --per-group 4 --svg out.svg
 *   schedule --scheme gpipe --model vgg11 --workers 4
 *   schedule --layerpipe profile.csv --processors 3
 *
 * The last stdout line is one JSON object. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "apps/models.h"
#include "core/error.h"
#include "core/model.h"
#include "schedulers/schedule.h"

typedef struct opts {
    const char *scheme, *model, *profile, *svg, *title, *layerpipe, *costs_out;
    int stages, micro, workers, groups, per_group, batch, processors, max_cols;
    double fwd, bwd, delta, grad, gflops, alpha;
    bool split, no_split, no_input_grad, no_diagram, list;
} opts;

typedef enum { F_STR, F_INT, F_NUM, F_BOOL } flag_kind;
typedef struct flag {
    const char *name;
    flag_kind kind;
    void *dst;
    const char *help;
} flag;

static int flag_table(opts *o, flag *f)
{
    flag list[] = {
        {"scheme", F_STR, &o->scheme, "ddp|fsdp|gpipe|1f1b|lpp|fslpp|ooo-ff|ooo-modulo (default gpipe)"},
        {"stages", F_INT, &o->stages, "S, pipeline stages (default 4; --model/--profile: one per layer)"},
        {"microbatches", F_INT, &o->micro, "B, micro-batches (default 8)"},
        {"workers", F_INT, &o->workers, "W (default: B for ddp/fsdp, S for pipelines, G*R for lpp)"},
        {"groups", F_INT, &o->groups, "lpp/fslpp: G groups"},
        {"per-group", F_INT, &o->per_group, "lpp/fslpp: R workers per group"},
        {"split", F_BOOL, &o->split, "backward as two jobs, delta before G (any scheme)"},
        {"no-split", F_BOOL, &o->no_split, "backward as one job (ooo schemes split by default)"},
        {"no-input-grad", F_BOOL, &o->no_input_grad, "stage 0 computes no delta (its input is data)"},
        {"fwd-cost", F_NUM, &o->fwd, "time of a forward job (default 1)"},
        {"bwd-cost", F_NUM, &o->bwd, "time of a backward job (default 1; delta = G = half)"},
        {"delta-cost", F_NUM, &o->delta, "time of a delta job (default bwd-cost/2)"},
        {"grad-cost", F_NUM, &o->grad, "time of a G job (default bwd-cost/2)"},
        {"model", F_STR, &o->model, "durations from the op costs of a zoo model (lenet|vgg11|rnn|gru|mlp)"},
        {"batch-size", F_INT, &o->batch, "--model: samples per micro-batch (default 32)"},
        {"gflops", F_NUM, &o->gflops, "--model: worker speed in GFLOP/s, times in us (default 1000)"},
        {"profile", F_STR, &o->profile, "durations from a profile CSV (layer,fwd,bwd_grad,bwd_delta)"},
        {"costs-out", F_STR, &o->costs_out, "write the per-stage costs as a profile CSV"},
        {"svg", F_STR, &o->svg, "write the pipeline diagram as SVG"},
        {"title", F_STR, &o->title, "SVG title"},
        {"max-cols", F_INT, &o->max_cols, "text diagram width in time steps (default 160)"},
        {"no-diagram", F_BOOL, &o->no_diagram, "do not print the text diagram"},
        {"layerpipe", F_STR, &o->layerpipe, "LayerPipe Algorithm 1 on a profile CSV"},
        {"processors", F_INT, &o->processors, "--layerpipe: processors (default 3)"},
        {"alpha", F_NUM, &o->alpha, "--layerpipe: relaxation factor of Tp (default 1.01)"},
        {"list", F_BOOL, &o->list, "list the schemes"},
        {NULL, F_BOOL, NULL, NULL},
    };
    memcpy(f, list, sizeof list);
    return (int)(sizeof list / sizeof list[0]) - 1;
}

static void usage(const flag *f)
{
    printf("usage: schedule [flags]\n"
           "Simulate a parallel-training schedule (one master schedule: DDP, FSDP, GPipe, 1F1B,\n"
           "LPP, FSLPP, ooo fast-forwarding and modulo allocation), print its pipeline diagram\n"
           "and statistics, or balance a pipeline with LayerPipe. Last stdout line: JSON.\n\nflags:\n");
    for (; f->name; f++) {
        const char *arg = f->kind == F_BOOL ? "" : f->kind == F_STR ? " S" : " N";
        printf("  --%s%-*s %s\n", f->name, (int)(18 - strlen(f->name) - strlen(arg)), arg, f->help);
    }
    printf("  --help               this text\n");
}

static void set_flag(const flag *f, const char *v)
{
    char *end;
    errno = 0;
    if (f->kind == F_STR) {
        if (!*v) sp_fail("--%s: empty value", f->name);
        *(const char **)f->dst = v;
    } else if (f->kind == F_INT) {
        long x = strtol(v, &end, 10);
        if (!*v || *end || errno || x < -2147483647L || x > 2147483647L)
            sp_fail("--%s %s: expected an integer", f->name, v);
        *(int *)f->dst = (int)x;
    } else {
        double x = strtod(v, &end);
        if (!*v || *end || errno || !isfinite(x)) sp_fail("--%s %s: expected a number", f->name, v);
        *(double *)f->dst = x;
    }
}

static void parse(int argc, char **argv, opts *o)
{
    flag table[40];
    flag_table(o, table);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(table);
            exit(0);
        }
        if (strncmp(a, "--", 2) != 0) sp_fail("schedule: unexpected argument '%s' (see --help)", a);
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const flag *f = NULL;
        for (const flag *t = table; t->name && !f; t++)
            if (strlen(t->name) == len && strncmp(t->name, name, len) == 0) f = t;
        if (!f) sp_fail("schedule: unknown flag '--%.*s' (see --help)", (int)len, name);
        if (f->kind == F_BOOL) {
            if (eq) sp_fail("--%s takes no value", f->name);
            *(bool *)f->dst = true;
            continue;
        }
        if (!eq && i + 1 >= argc) sp_fail("--%s: missing value", f->name);
        set_flag(f, eq ? eq + 1 : argv[++i]);
    }
}

static void check(const opts *o)
{
    if (o->split && o->no_split) sp_fail("--split and --no-split: pick one");
    if (!(o->fwd >= 0) || !(o->bwd >= 0)) sp_fail("--fwd-cost/--bwd-cost: expected >= 0");
    if ((o->delta != -1 && !(o->delta >= 0)) || (o->grad != -1 && !(o->grad >= 0)))
        sp_fail("--delta-cost/--grad-cost: expected >= 0");
    if (o->model && o->profile) sp_fail("--model and --profile: pick one source of durations");
    if (o->max_cols < 0) sp_fail("--max-cols %d: expected >= 1", o->max_cols);
}

/* ------------------------------------------------------------------------------------ */

static sp_costs *load_costs(opts *o)
{
    if (o->profile) return sp_costs_read_csv(o->profile);
    if (o->model) {
        sp_model *m = sp_zoo_model(o->model);
        int shape[3], ndim = sp_zoo_input_shape(o->model, shape);
        sp_costs *c = sp_costs_from_model(m, ndim, shape, o->batch, o->gflops);
        sp_model_free(m);
        return c;
    }
    double delta = o->delta >= 0 ? o->delta : o->bwd / 2, grad = o->grad >= 0 ? o->grad : o->bwd / 2;
    return sp_costs_uniform(o->stages, o->fwd, delta, grad);
}

static void write_costs(const opts *o, const sp_costs *c)
{
    if (!o->costs_out) return;
    FILE *f = fopen(o->costs_out, "w");
    if (!f) sp_fail("--costs-out %s: cannot write: %s", o->costs_out, strerror(errno));
    sp_costs_write_csv(f, c);
    fclose(f);
}

static void json_array_d(const char *key, const double *v, int n, size_t stride)
{
    printf(",\"%s\":[", key);
    for (int i = 0; i < n; i++) printf("%s%.6g", i ? "," : "", *(const double *)((const char *)v + i * stride));
    printf("]");
}

static void json_array_i(const char *key, const int *v, int n, size_t stride)
{
    printf(",\"%s\":[", key);
    for (int i = 0; i < n; i++) printf("%s%d", i ? "," : "", *(const int *)((const char *)v + i * stride));
    printf("]");
}

static void print_workers(const sp_sim *r)
{
    printf("%-6s %6s %8s %9s %9s %9s %9s %9s\n", "worker", "jobs", "util", "act_recv", "grad_recv", "wgt_recv",
           "wgt_held", "peak_act");
    for (int w = 0; w < r->workers; w++) {
        const sp_worker_stats *s = &r->worker[w];
        printf("w%-5d %6d %8.3f %9d %9d %9d %9d %9d\n", w, s->jobs, s->utilization, s->act_recv, s->grad_recv,
               s->weight_recv, s->weight_stages, s->peak_act);
    }
    printf("latency %g, utilization %.3f, rho %.4f <= M/S = %.4f\n", r->latency, r->utilization, r->rho,
           r->rho_bound);
}

static void print_json(const sp_schedule *s, const sp_costs *c, const sp_sim *r)
{
    const sp_worker_stats *w0 = r->worker;
    printf("{\"scheme\":\"%s\",\"stages\":%d,\"microbatches\":%d,\"workers\":%d,\"groups\":%d,\"per_group\":%d,"
           "\"split_backward\":%s,\"time_unit\":\"%s\",\"latency\":%.6g,\"utilization\":%.6g,"
           "\"activation_transfers_max\":%d,\"gradient_transfers_max\":%d,\"weight_transfers_max\":%d,"
           "\"weight_storage_max\":%d,\"peak_activations_max\":%d,\"peak_activation_bytes_max\":%.6g,"
           "\"rho\":%.6g,\"rho_bound\":%.6g",
           s->scheme->name, s->stages, s->micro, s->workers, s->groups, s->per_group,
           s->split_backward ? "true" : "false", c->unit, r->latency, r->utilization, r->act_recv_max,
           r->grad_recv_max, r->weight_recv_max, r->weight_stages_max, r->peak_act_max, r->peak_act_bytes_max,
           r->rho, r->rho_bound);
    size_t st = sizeof *w0;
    json_array_d("utilization_per_worker", &w0->utilization, r->workers, st);
    json_array_i("activation_transfers", &w0->act_recv, r->workers, st);
    json_array_i("weight_transfers", &w0->weight_recv, r->workers, st);
    json_array_i("peak_activations", &w0->peak_act, r->workers, st);
    printf("}\n");
}

static void write_svg(const opts *o, const sp_schedule *s, const sp_sim *r)
{
    if (!o->svg) return;
    FILE *f = fopen(o->svg, "w");
    if (!f) sp_fail("--svg %s: cannot write: %s", o->svg, strerror(errno));
    sp_diagram_svg(f, s, r, o->title);
    if (fclose(f) != 0) sp_fail("--svg %s: write failed", o->svg);
}

static int run_schedule(opts *o)
{
    sp_costs *c = load_costs(o);
    write_costs(o, c);
    sp_sched_config cfg = {
        .stages = c->stages, .micro = o->micro, .workers = o->workers, .groups = o->groups,
        .per_group = o->per_group, .split = o->split ? 1 : o->no_split ? 0 : -1, .no_input_grad = o->no_input_grad,
    };
    sp_schedule *s = sp_schedule_new(sp_scheme_find(o->scheme), &cfg, c);
    sp_sim r;
    sp_simulate(s, c, &r);
    if (!o->no_diagram) sp_diagram_text(stdout, s, &r, o->max_cols);
    print_workers(&r);
    write_svg(o, s, &r);
    print_json(s, c, &r);
    sp_sim_free(&r);
    sp_schedule_free(s);
    sp_costs_free(c);
    return 0;
}

static int run_layerpipe(const opts *o)
{
    sp_costs *c = sp_costs_read_csv(o->layerpipe);
    sp_layerpipe lp;
    sp_layerpipe_partition(c, o->processors, o->alpha, &lp);
    sp_layerpipe_print(stdout, c, &lp);
    printf("{\"mode\":\"layerpipe\",\"layers\":%d,\"processors\":%d,\"used\":%d,\"target\":%.6g,"
           "\"bottleneck\":%.6g,\"pipedream_bottleneck\":%.6g,\"relaxations\":%d",
           lp.layers, lp.processors, lp.used, lp.target, lp.bottleneck, lp.contig_bottleneck, lp.relaxations);
    json_array_d("assigned", lp.assigned, lp.processors, sizeof(double));
    json_array_d("borrowed", lp.borrowed, lp.processors, sizeof(double));
    json_array_d("total", lp.total, lp.processors, sizeof(double));
    json_array_d("pipedream", lp.contig_load, lp.processors, sizeof(double));
    printf("}\n");
    sp_layerpipe_free(&lp);
    sp_costs_free(c);
    return 0;
}

static int list_schemes(void)
{
    printf("{\"schemes\":[");
    for (int i = 0; i < sp_scheme_count(); i++) printf("%s\"%s\"", i ? "," : "", sp_scheme_at(i)->name);
    printf("]}\n");
    return 0;
}

int main(int argc, char **argv)
{
    opts o = {.scheme = "gpipe", .stages = 4, .micro = 8, .batch = 32, .processors = 3, .fwd = 1, .bwd = 1,
              .delta = -1, .grad = -1, .gflops = 1000, .alpha = 1.01};
    parse(argc, argv, &o);
    check(&o);
    if (o.list) {
        for (int i = 0; i < sp_scheme_count(); i++)
            printf("%-11s %s\n", sp_scheme_at(i)->name, sp_scheme_at(i)->summary);
        return list_schemes();
    }
    if (o.layerpipe) return run_layerpipe(&o);
    return run_schedule(&o);
}
