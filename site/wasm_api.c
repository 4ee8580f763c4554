/* wasm_api.c — the entry points the teaching page (site/app.js) calls in the WebAssembly
 * build of the simulator (make site, docs/TUTORIAL.md). Each returns one JSON object as
 * a string owned here (valid until the next call): the page draws what these return and
 * computes no figure of its own.
 *
 *   site_schemes()            the scheme registry: {"schemes":[{name,summary,split}],"pp":[...]}
 *   site_simulate(...)        a schedule and its simulation: "report" is the JSON line
 *                             `build/schedule` prints for the same flags, then the jobs
 *                             (worker, stage, micro, dir, start, finish), the messages
 *                             between workers, and each worker's activation bytes over time.
 *                             With the action-list schedules built in (SITE_HAVE_ACTIONS:
 *                             schedulers/parallel/actions.h, sched_actions.c), their
 *                             generators (zb-h1, interleaved-1f1b, ...) and "custom", a
 *                             PyTorch-format action CSV, go through the same path as
 *                             build/schedule's --scheme, --chunks, --mem-limit, --actions
 *   site_scan_plan(n, K)      BPPSA's scan plan of a chain of n links with K up-sweep levels
 *
 * A refusal (sp_fail inside the library) comes back as {"ok":false,"error":"..."}: the
 * library's checks run under sp_try, so a bad configuration never ends the module. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "schedulers/backward/scan.h"
#include "schedulers/parallel/schedule.h"
#include "schedulers/parallel/sim_report.h"
#ifdef SITE_HAVE_ACTIONS
#include "schedulers/parallel/actions.h"
#endif

#ifdef __EMSCRIPTEN__
#include <emscripten.h>
#define SITE_API EMSCRIPTEN_KEEPALIVE
#else
#define SITE_API
#endif

static char *result;   /* the last answer */

typedef struct out {
    FILE *f;
    char *buf;
    size_t len;
} out;

static void out_open(out *o) { o->f = open_memstream(&o->buf, &o->len); }

static const char *out_close(out *o)
{
    fclose(o->f);
    free(result);
    result = o->buf;
    return result;
}

/* A JSON string literal of s. */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

static const char *error_answer(void)
{
    out o;
    out_open(&o);
    fprintf(o.f, "{\"ok\":false,\"error\":");
    json_str(o.f, sp_last_error());
    fprintf(o.f, "}");
    return out_close(&o);
}

SITE_API const char *site_schemes(void)
{
    out o;
    out_open(&o);
    fprintf(o.f, "{\"ok\":true,\"schemes\":[");
    for (int i = 0; i < sp_scheme_count(); i++) {
        const sp_scheme *s = sp_scheme_at(i);
        fprintf(o.f, "%s{\"name\":", i ? "," : "");
        json_str(o.f, s->name);
        fprintf(o.f, ",\"summary\":");
        json_str(o.f, s->summary);
        fprintf(o.f, ",\"split\":%s}", s->split_backward ? "true" : "false");
    }
    fprintf(o.f, "],\"pp\":[");
#ifdef SITE_HAVE_ACTIONS
    for (int i = 0; i < sp_pp_count(); i++) {
        fprintf(o.f, "{\"name\":");
        json_str(o.f, sp_pp_at(i)->name);
        fprintf(o.f, ",\"summary\":");
        json_str(o.f, sp_pp_at(i)->summary);
        fprintf(o.f, ",\"chunks\":%d},", sp_pp_at(i)->default_chunks_per_rank);
    }
    fprintf(o.f, "{\"name\":\"custom\",\"summary\":\"per-rank action lists from a CSV\",\"chunks\":1}");
#endif
    fprintf(o.f, "],\"actions\":%s}",
#ifdef SITE_HAVE_ACTIONS
            "true"
#else
            "false"
#endif
    );
    return out_close(&o);
}

/* ---- a schedule and its simulation ---------------------------------------------------- */

typedef struct sim_args {
    const char *scheme, *profile, *actions_csv;
    sp_sched_config cfg;
    double fwd, delta, grad, mem_limit;
    int chunks;
    sp_costs *c;
    sp_schedule *s;
    sp_sim r;
    bool have_sim;
} sim_args;

/* The page's text goes to an in-memory file read by the same reader as the flag's. */
static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) sp_fail("%s: cannot write the in-memory file", path);
    fputs(text, f);
    fclose(f);
}

#ifdef SITE_HAVE_ACTIONS
/* build/schedule's make_actions (apps/schedule.c): a generator's list with the per-chunk
 * costs of the balanced partition (ranks: the workers, or the stages over the chunks per
 * rank), or the CSV of "custom". */
static sp_actions *make_actions(sim_args *x)
{
    sp_actions *a = NULL;
    const sp_costs *c = x->c;
    if (!strcmp(x->scheme, "custom")) {
        if (!x->actions_csv || !*x->actions_csv) sp_fail("--scheme custom needs an action CSV (one row per rank)");
        write_file("/actions.csv", x->actions_csv);
        if (sp_actions_read_csv("/actions.csv", &a) != SP_OK) sp_fail("%s", sp_last_error());
        return a;
    }
    const sp_pp_generator *g = sp_pp_find(x->scheme);
    int v = x->chunks > 0 ? x->chunks : g->default_chunks_per_rank;
    int ranks = x->cfg.workers > 0 ? x->cfg.workers : c->stages / v > 0 ? c->stages / v : 1;
    if ((long)ranks * v > c->stages)
        sp_fail("--scheme %s: %d ranks x %d chunks per rank for %d stages (expected ranks x chunks <= stages: each "
                "chunk holds whole layers)", x->scheme, ranks, v, c->stages);
    int C = ranks * v, *stage_chunk = sp_xmalloc(sizeof(int) * (size_t)c->stages);
    double *buf = sp_xmalloc(sizeof(double) * 4 * (size_t)C);
    sp_chunk_partition(c, c->stages, C, stage_chunk);
    sp_chunk_costs_sum(c, c->stages, C, stage_chunk, buf, buf + C, buf + 2 * C, buf + 3 * C);
    sp_chunk_costs cc = {.chunks = C, .f = buf, .i = buf + C, .w = buf + 2 * C, .act = buf + 3 * C};
    sp_pp_params p = {.ranks = ranks, .micro = x->cfg.micro, .chunks_per_rank = x->chunks, .costs = &cc,
                      .mem_limit = x->mem_limit};
    if (g->generate(&p, &a) != SP_OK) sp_fail("--scheme %s", sp_last_error());
    free(buf);
    free(stage_chunk);
    return a;
}
#endif

static void sim_body(void *arg)
{
    sim_args *a = arg;
#ifdef SITE_HAVE_ACTIONS
    bool actions = sp_scheme_is_actions(a->scheme);
    const sp_scheme *scheme = actions ? NULL : sp_scheme_find(a->scheme);
#else
    if (a->chunks || a->mem_limit > 0 || (a->actions_csv && *a->actions_csv))
        sp_fail("--chunks, --mem-limit and --actions: this build has no action-list schedules");
    const sp_scheme *scheme = sp_scheme_find(a->scheme);
#endif
    if (a->profile && *a->profile) {
        write_file("/profile.csv", a->profile);
        if (sp_costs_load_csv("/profile.csv", &a->c) != SP_OK) sp_fail("%s", sp_last_error());
        a->cfg.stages = a->c->stages;
    } else {
        a->c = sp_costs_uniform(a->cfg.stages, a->fwd, a->delta, a->grad);
    }
#ifdef SITE_HAVE_ACTIONS
    if (actions) {   /* as build/schedule's run_schedule */
        if (a->cfg.groups || a->cfg.per_group) sp_fail("--scheme %s: --groups and --per-group are lpp's", a->scheme);
        a->cfg.actions_scheme = a->scheme;
        sp_actions *list = make_actions(a);
        if (!strcmp(a->scheme, "custom")) a->cfg.micro = a->cfg.workers = 0;   /* the file's */
        a->s = sp_schedule_from_actions(list, &a->cfg, a->c);
        sp_actions_free(list);
    } else if (a->chunks) {
        sp_fail("--chunks %d: --scheme %s places its own stages (the action-list schemes take --chunks)", a->chunks,
                a->scheme);
    }
    if (!a->s)
#endif
        a->s = sp_schedule_new(scheme, &a->cfg, a->c);
    sp_simulate(a->s, a->c, &a->r);
    a->have_sim = true;
}

/* Activation bytes held by each worker over time, as steps [time, bytes]: (s, b) holds
 * act_bytes[s] on its forward's worker from F's start to the end of its last backward
 * job — the rule of the simulator's peak (simulate.c), so the curve's maximum is the
 * worker's peak_act_bytes. */
typedef struct ev { double t, bytes; int w, d; } ev;

static int ev_cmp(const void *pa, const void *pb)
{
    const ev *a = pa, *b = pb;
    if (a->w != b->w) return a->w - b->w;
    if (a->t != b->t) return a->t < b->t ? -1 : 1;
    return a->d - b->d;   /* releases first at the same instant */
}

static void memory_lanes(FILE *f, const sp_schedule *s, const sp_costs *c, const sp_sim *r)
{
    int n = 0;
    ev *e = sp_xmalloc(sizeof *e * 2 * (size_t)s->stages * (size_t)s->micro);
    for (int b = 0; b < s->micro; b++)
        for (int st = 0; st < s->stages; st++) {
            int fj = sp_schedule_find(s, st, b, SP_FWD);
            double end = r->finish[fj];
            sp_dir back[3] = {SP_BWD, SP_BWD_DELTA, SP_BWD_GRAD};
            for (int k = 0; k < 3; k++) {
                int j = sp_schedule_find(s, st, b, back[k]);
                if (j >= 0) end = fmax(end, r->finish[j]);
            }
            e[n++] = (ev){r->start[fj], c->act_bytes[st], s->compute[fj], +1};
            e[n++] = (ev){end, c->act_bytes[st], s->compute[fj], -1};
        }
    qsort(e, n, sizeof *e, ev_cmp);
    fprintf(f, ",\"memory\":[");
    for (int w = 0, i = 0; w < s->workers; w++) {
        fprintf(f, "%s[[0,0]", w ? "," : "");
        double live = 0;
        for (; i < n && e[i].w == w; i++) {
            live += e[i].d * e[i].bytes;
            fprintf(f, ",[%.6g,%.6g]", e[i].t, fabs(live) < 1e-9 ? 0.0 : live);
        }
        fprintf(f, "]");
    }
    fprintf(f, "]");
    free(e);
}

static void sim_answer(FILE *f, const sp_schedule *s, const sp_costs *c, const sp_sim *r)
{
    fprintf(f, "{\"ok\":true,\"report\":");
    sp_sim_print_json(f, s, c, r);   /* the line `build/schedule` prints, newline included */
    fprintf(f, ",\"bubble\":%.6g,\"unit\":", 1 - r->utilization);   /* as the SVG diagram states it */
    json_str(f, c->unit);
    fprintf(f, ",\"stage_names\":[");
    for (int i = 0; i < c->stages; i++) {
        if (i) fputc(',', f);
        json_str(f, c->name[i]);
    }
    fprintf(f, "],\"peak_act_bytes\":[");
    for (int w = 0; w < r->workers; w++) fprintf(f, "%s%.6g", w ? "," : "", r->worker[w].peak_act_bytes);
    /* jobs: [worker, stage, micro, dir letter, start, finish] */
    fprintf(f, "],\"jobs\":[");
    for (int j = 0; j < s->njobs; j++)
        fprintf(f, "%s[%d,%d,%d,\"%s\",%.6g,%.6g]", j ? "," : "", s->compute[j], s->jobs[j].stage,
                s->jobs[j].micro, sp_dir_letter(s->jobs[j].dir), r->start[j], r->finish[j]);
    /* messages: an output consumed on another worker, [from, to, sent at, job from, job to] */
    fprintf(f, "],\"messages\":[");
    int m = 0;
    for (int j = 0; j < s->njobs; j++) {
        int ns;
        const int *succ = sp_schedule_succs(s, j, &ns);
        for (int k = 0; k < ns; k++)
            if (s->compute[succ[k]] != s->compute[j])
                fprintf(f, "%s[%d,%d,%.6g,%d,%d]", m++ ? "," : "", s->compute[j], s->compute[succ[k]], r->finish[j],
                        j, succ[k]);
    }
    fprintf(f, "]");
    memory_lanes(f, s, c, r);
    fprintf(f, "}");
}

SITE_API const char *site_simulate(const char *scheme, int stages, int micro, int workers, int groups, int per_group,
                                   int split, int no_input_grad, double fwd, double delta, double grad,
                                   const char *profile, int chunks, double mem_limit, const char *actions_csv)
{
    sim_args a = {.scheme = scheme, .profile = profile, .fwd = fwd, .delta = delta, .grad = grad, .chunks = chunks,
                  .mem_limit = mem_limit, .actions_csv = actions_csv,
                  .cfg = {.stages = stages, .micro = micro, .workers = workers, .groups = groups,
                          .per_group = per_group, .split = split, .no_input_grad = no_input_grad != 0}};
    const char *answer;
    if (sp_try(sim_body, &a) != SP_OK) {
        answer = error_answer();
    } else {
        out o;
        out_open(&o);
        sim_answer(o.f, a.s, a.c, &a.r);
        answer = out_close(&o);
    }
    /* what a refusal left half-built is not freed (sp_try's contract); a finished run is */
    if (a.have_sim) {
        sp_sim_free(&a.r);
        sp_schedule_free(a.s);
        sp_costs_free(a.c);
    }
    return answer;
}

/* ---- BPPSA's scan plan ----------------------------------------------------------------- */

typedef struct scan_args {
    int n, levels;
    sp_scan_plan p;
} scan_args;

static void scan_body(void *arg)
{
    scan_args *a = arg;
    if (a->n < 1 || a->n > 4096) sp_fail("chain of %d links: expected 1 .. 4096", a->n);
    sp_scan_plan_build(&a->p, a->n, a->levels);
}

SITE_API const char *site_scan_plan(int n, int levels)
{
    scan_args a = {.n = n, .levels = levels};
    if (sp_try(scan_body, &a) != SP_OK) return error_answer();
    const sp_scan_plan *p = &a.p;
    static const char *kind[] = {"up", "identity", "carry", "down"};
    int products = 0;
    for (int i = 0; i < p->nsteps; i++) products += p->steps[i].product;
    out o;
    out_open(&o);
    fprintf(o.f,
            "{\"ok\":true,\"links\":%d,\"scan_levels\":%d,\"full_levels\":%d,\"nlevels\":%d,\"levels\":%d,"
            "\"linear_levels\":%d,\"chain_depth\":%d,\"products\":%d,\"linear_products\":%d,\"steps\":[",
            p->n, p->up_levels, sp_scan_full_levels(p->n), p->nlevels, p->work_levels, p->n - 1, p->chain_depth,
            products, p->n - 1);
    for (int i = 0; i < p->nsteps; i++) {
        const sp_scan_step *s = &p->steps[i];
        fprintf(o.f, "%s[\"%s\",%d,%d,%d,%d]", i ? "," : "", kind[s->kind], s->level, s->l, s->r, s->product ? 1 : 0);
    }
    fprintf(o.f, "]}");
    sp_scan_plan_free(&a.p);
    return out_close(&o);
}
