/* wasm_api.c — the entry points the teaching page (site/app.js) calls in the WebAssembly
 * build of the simulator (make site, docs/TUTORIAL.md). Each returns one JSON object as
 * a string owned here (valid until the next call): the page draws what these return and
 * computes no figure of its own.
 *
 *   site_schemes()            the scheme registry: {"schemes":[{name,summary,split}],"pp":[...]}
 *   site_simulate(...)        a schedule and its simulation: "report" is the JSON line
 *                             `build/schedule` prints for the same flags, then the jobs
 *                             (worker, stage, micro, dir, start, finish), the messages
 *                             between workers, and each worker's memory over time (the
 *                             simulator's own series, sim_memory.c). transfer > 0:
 *                             build/schedule --transfer-cost's simulation with every
 *                             message costing `transfer` (sim_comm.c): the report gains
 *                             latency_with_comm, comm_time and messages, and the answer
 *                             "transfers" (each message: lane, peer, start, arrival),
 *                             "comm_jobs" and "comm_memory" (the jobs and memory
 *                             re-timed by the messages). The action-list
 *                             schedules (actions.h: zb-h1, zbv, interleaved-1f1b, ...) and
 *                             "custom", a PyTorch-format action CSV, go through the same
 *                             path as build/schedule's --scheme, --chunks, --mem-limit,
 *                             --actions
 *   site_scan_plan(n, K)      BPPSA's scan plan of a chain of n links with K up-sweep levels
 *
 * The zoo models' ooo task graph and BPPSA plan (site_ooo, site_bppsa_plan) are in
 * site/wasm_models.c; the answer helpers both files share, in site/wasm_api.h.
 * A refusal (sp_fail inside the library) comes back as {"ok":false,"error":"..."}: the
 * library's checks run under sp_try, so a bad configuration never ends the module. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "schedulers/scan/scan.h"
#include "schedulers/plan/schedule.h"
#include "schedulers/sim/sim.h"
#include "schedulers/sim/sim_comm.h"
#include "schedulers/sim/sim_report.h"
#include "schedulers/plan/actions.h"
#include "schedulers/plan/limits.h"
#include "site/wasm_api.h"

static char *result;   /* the last answer */

void site_out_open(site_out *o) { o->f = open_memstream(&o->buf, &o->len); }

const char *site_out_close(site_out *o)
{
    fclose(o->f);
    free(result);
    result = o->buf;
    return result;
}

void site_json_str(FILE *f, const char *s)
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

const char *site_error_answer(void)
{
    site_out o;
    site_out_open(&o);
    fprintf(o.f, "{\"ok\":false,\"error\":");
    site_json_str(o.f, sp_last_error());
    fprintf(o.f, "}");
    return site_out_close(&o);
}

SITE_API const char *site_schemes(void)
{
    site_out o;
    site_out_open(&o);
    fprintf(o.f, "{\"ok\":true,\"schemes\":[");
    for (int i = 0, n = 0; i < sp_scheme_def_count(); i++) {   /* the RULES rows */
        const sp_scheme_def *d = sp_scheme_def_at(i);
        if (d->kind != SP_SCHEME_RULES) continue;
        fprintf(o.f, "%s{\"name\":", n++ ? "," : "");
        site_json_str(o.f, d->name);
        fprintf(o.f, ",\"summary\":");
        site_json_str(o.f, d->help);
        fprintf(o.f, ",\"split\":%s}", d->rules->split_backward ? "true" : "false");
    }
    fprintf(o.f, "],\"pp\":[");
    for (int i = 0, n = 0; i < sp_scheme_def_count(); i++) {   /* the action-list rows, custom last */
        const sp_scheme_def *d = sp_scheme_def_at(i);
        if (d->kind == SP_SCHEME_RULES) continue;
        fprintf(o.f, "%s{\"name\":", n++ ? "," : "");
        site_json_str(o.f, d->name);
        fprintf(o.f, ",\"summary\":");
        site_json_str(o.f, d->help);
        fprintf(o.f, ",\"chunks\":%d}", d->kind == SP_SCHEME_LIST ? d->chunks_per_rank : 1);
    }
    fprintf(o.f, "],\"actions\":true}");
    return site_out_close(&o);
}

/* ---- a schedule and its simulation ---------------------------------------------------- */

typedef struct sim_args {
    const char *scheme, *profile, *actions_csv;
    sp_sched_config cfg;
    double fwd, delta, grad, mem_limit, transfer;
    int chunks;
    sp_costs *c;
    sp_actions *list;   /* an action-list scheme's list, until it becomes s */
    sp_schedule *s;
    sp_sim r;
    sp_sim_comm sc;   /* transfer > 0: the simulation with its messages */
    bool have_sim, have_comm;
} sim_args;

/* The page's text goes to an in-memory file read by the same reader as the flag's. */
static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) sp_fail("%s: cannot write the in-memory file", path);
    fputs(text, f);
    fclose(f);
}

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
    /* --mem-limit in chunk micro-batches, as build/schedule with unit costs */
    if (sp_pp_generate_from_costs(g, c, ranks, x->cfg.micro, x->chunks, x->mem_limit, false, x->transfer, &a) !=
        SP_OK)
        sp_fail("--scheme %s", sp_last_error());
    return a;
}

/* A cost as build/schedule's --fwd-cost (range "0..") refuses it: the same line. */
static void cost_flag(const char *flag, double v)
{
    if (isnan(v)) sp_fail("%s nan: expected a number", flag);
    if (!(v >= 0)) sp_fail("%s %g: expected >= 0", flag, v);
}

/* What build/schedule's flag table refuses before the library sees it (cli/schedule_cli.c:
 * ranges and "needs"), with its lines: the page passes numbers where the command line
 * passes flags, 0 for a flag not given. */
static void sim_flags(sim_args *a)
{
    if (!a->scheme) sp_fail("--scheme: empty value");
    const char *n = a->scheme;
    bool lpp = !strcmp(n, "lpp") || !strcmp(n, "fslpp");
    if (a->cfg.stages < 1) sp_fail("--stages %d: expected >= 1", a->cfg.stages);
    if (a->cfg.micro < 1) sp_fail("--microbatches %d: expected >= 1", a->cfg.micro);
    if (a->cfg.workers < 0) sp_fail("--workers %d: expected >= 1", a->cfg.workers);
    if (a->cfg.groups < 0) sp_fail("--groups %d: expected >= 1", a->cfg.groups);
    if (a->cfg.per_group < 0) sp_fail("--per-group %d: expected >= 1", a->cfg.per_group);
    if (a->cfg.groups && !lpp) sp_fail("--groups needs --scheme lpp or fslpp");
    if (a->cfg.per_group && !lpp) sp_fail("--per-group needs --scheme lpp or fslpp");
    if (a->chunks < 0) sp_fail("--chunks %d: expected >= 1", a->chunks);
    if (a->chunks && strcmp(n, "interleaved-1f1b") && strcmp(n, "interleaved-zb") && strcmp(n, "looped-bfs") &&
        strcmp(n, "zb-auto"))
        sp_fail("--chunks needs --scheme interleaved-1f1b, interleaved-zb, looped-bfs or zb-auto");
    if (a->cfg.split < -1 || a->cfg.split > 1)
        sp_fail("split %d: expected -1 (the scheme's), 0 (--no-split) or 1 (--split)", a->cfg.split);
    if (a->mem_limit != 0) {   /* --mem-limit N, as its parser reads the text */
        if (strcmp(n, "zb-auto")) sp_fail("--mem-limit needs --scheme zb-auto");
        char text[64];
        snprintf(text, sizeof text, "%.17g", a->mem_limit);
        bool bytes;
        if (sp_mem_limit_parse("--mem-limit", text, &a->mem_limit, &bytes) != SP_OK) sp_fail("%s", sp_last_error());
    }
    if (!a->profile || !*a->profile) {
        cost_flag("--fwd-cost", a->fwd);
        cost_flag("--delta-cost", a->delta);
        cost_flag("--grad-cost", a->grad);
    }
    if (isnan(a->transfer)) sp_fail("--transfer-cost nan: expected a number");
    if (sp_limit_time("--transfer-cost", a->transfer) != SP_OK) sp_fail("%s", sp_last_error());
}

static void sim_body(void *arg)
{
    sim_args *a = arg;
    sim_flags(a);
    bool actions = sp_scheme_is_actions(a->scheme);
    const sp_scheme *scheme = actions ? NULL : sp_scheme_find(a->scheme);
    if (a->profile && *a->profile) {
        write_file("/profile.csv", a->profile);
        if (sp_costs_load_csv("/profile.csv", &a->c) != SP_OK) sp_fail("%s", sp_last_error());
        a->cfg.stages = a->c->stages;
    } else {
        a->c = sp_costs_uniform(a->cfg.stages, a->fwd, a->delta, a->grad);
    }
    if (actions) {   /* as build/schedule's run_schedule */
        if (a->cfg.groups || a->cfg.per_group) sp_fail("--scheme %s: --groups and --per-group are lpp's", a->scheme);
        a->cfg.actions_scheme = a->scheme;
        a->list = make_actions(a);
        if (!strcmp(a->scheme, "custom")) a->cfg.micro = a->cfg.workers = 0;   /* the file's */
        a->s = sp_schedule_from_actions(a->list, &a->cfg, a->c);
        sp_actions_free(a->list);
        a->list = NULL;
    } else if (a->chunks) {
        sp_fail("--chunks %d: --scheme %s places its own stages (the action-list schemes take --chunks)", a->chunks,
                a->scheme);
    }
    if (!a->s) a->s = sp_schedule_new(scheme, &a->cfg, a->c);
    sp_simulate(a->s, a->c, &a->r);
    a->have_sim = true;
    if (a->transfer > 0) {   /* build/schedule's simulate_comm without a model: --bucket-mb's default */
        const char *n = a->s->scheme->name;
        sp_sim_comm_cfg cfg = {.bucket_mb = 25, .deferred = !strcmp(n, "ddp") || !strcmp(n, "ddp-ooo"),
                               .transfer = a->transfer};
        sp_simulate_comm(a->s, a->c, &a->r, &cfg, &a->sc);
        a->have_comm = true;
    }
}

/* Each worker's memory over time, as the simulator tracks it (sim_memory.c: sp_sim's
 * mem_off/mem_time/mem_act/mem_wgt): steps [time, activation bytes, fetched-weight bytes],
 * each held from its time until the next step's (the first at 0). The same series draws
 * build/schedule --svg's memory lanes. The JSON's peak_activation_bytes per worker is the
 * series' maximum, or above it when an acquire and a release at one instant peak within it. */
static void memory_lanes(FILE *f, const char *key, const sp_sim *r)
{
    fprintf(f, ",\"%s\":[", key);
    for (int w = 0; w < r->workers; w++) {
        fprintf(f, "%s[", w ? "," : "");
        for (int i = r->mem_off[w]; i < r->mem_off[w + 1]; i++)
            fprintf(f, "%s[%.17g,%.17g,%.17g]", i > r->mem_off[w] ? "," : "", r->mem_time[i], r->mem_act[i],
                    r->mem_wgt[i]);   /* every digit: the lane's top is compared with the peak */
        fprintf(f, "]");
    }
    fprintf(f, "]");
}

/* With a transfer cost, the step as build/schedule --transfer-cost times it (sim_comm.c),
 * for the page to draw instead of sp_simulate's:
 *   "transfers": each message, [rank (its lane: the sender, or a member of a collective),
 *                peer (the receiver; a collective's root; −1: none), kind, stage, start on
 *                the rank's lane, end (a p2p message's arrival at the peer)];
 *   "comm_jobs": [start, finish] of each job of "jobs", re-timed by its messages;
 *   "comm_memory": each worker's memory over the re-timed jobs (sim_memory.c run on
 *                sc's times, in the same per-worker order), as "memory". */
static void transfers(FILE *f, const sp_schedule *s, const sp_costs *c, const sp_sim *r, const sp_sim_comm *sc)
{
    fprintf(f, ",\"transfers\":[");
    for (int i = 0; i < sc->nmsg; i++) {
        const sp_sim_msg *m = &sc->msg[i];
        fprintf(f, "%s[%d,%d,\"%s\",%d,%.6g,%.6g]", i ? "," : "", m->rank, m->peer, sp_msg_kind_name(m->kind),
                m->stage, m->start, m->end);
    }
    fprintf(f, "],\"comm_jobs\":[");
    for (int j = 0; j < s->njobs; j++) fprintf(f, "%s[%.6g,%.6g]", j ? "," : "", sc->start[j], sc->finish[j]);
    fprintf(f, "]");
    sp_sim t = *r;   /* r's order and counts, sc's times, memory series of its own */
    t.start = sc->start, t.finish = sc->finish;
    t.worker = sp_xcalloc((size_t)r->workers, sizeof *t.worker);
    t.mem_off = NULL, t.mem_time = t.mem_act = t.mem_wgt = NULL;
    sp_sim_memory(s, c, &t);
    memory_lanes(f, "comm_memory", &t);
    free(t.worker);
    free(t.mem_off);
    free(t.mem_time);
    free(t.mem_act);
    free(t.mem_wgt);
}

static void sim_answer(FILE *f, const sp_schedule *s, const sp_costs *c, const sp_sim *r, const sp_sim_comm *sc)
{
    fprintf(f, "{\"ok\":true,\"report\":");
    sp_sim_print_json_comm(f, s, c, r, sc);   /* the line `build/schedule` prints, newline included */
    fprintf(f, ",\"bubble\":%.6g,\"unit\":", 1 - r->utilization);   /* as the SVG diagram states it */
    site_json_str(f, c->unit);
    fprintf(f, ",\"stage_names\":[");
    for (int i = 0; i < c->stages; i++) {
        if (i) fputc(',', f);
        site_json_str(f, c->name[i]);
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
    if (sc) transfers(f, s, c, r, sc);
    memory_lanes(f, "memory", r);
    fprintf(f, "}");
}

SITE_API const char *site_simulate(const char *scheme, int stages, int micro, int workers, int groups, int per_group,
                                   int split, int no_input_grad, double fwd, double delta, double grad,
                                   const char *profile, int chunks, double mem_limit, const char *actions_csv,
                                   double transfer)
{
    sim_args a = {.scheme = scheme, .profile = profile, .fwd = fwd, .delta = delta, .grad = grad, .chunks = chunks,
                  .mem_limit = mem_limit, .actions_csv = actions_csv, .transfer = transfer,
                  .cfg = {.stages = stages, .micro = micro, .workers = workers, .groups = groups,
                          .per_group = per_group, .split = split, .no_input_grad = no_input_grad != 0}};
    const char *answer;
    if (sp_try(sim_body, &a) != SP_OK) {
        answer = site_error_answer();
    } else {
        site_out o;
        site_out_open(&o);
        sim_answer(o.f, a.s, a.c, &a.r, a.have_comm ? &a.sc : NULL);
        answer = site_out_close(&o);
    }
    /* everything built, a refusal's included: the library's constructors free their own
     * half-built parts when they refuse, so a refused call leaves nothing behind */
    if (a.have_comm) sp_sim_comm_free(&a.sc);
    sp_sim_free(&a.r);
    sp_actions_free(a.list);
    sp_schedule_free(a.s);
    sp_costs_free(a.c);
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
    int full = sp_scan_full_levels(a->n);
    if (a->levels < -1 || a->levels > full)
        sp_fail("--scan-levels %d: expected 0..%d for a chain of %d links, or -1 (full)", a->levels, full, a->n);
    sp_scan_plan_build(&a->p, a->n, a->levels);
}

SITE_API const char *site_scan_plan(int n, int levels)
{
    scan_args a = {.n = n, .levels = levels};
    if (sp_try(scan_body, &a) != SP_OK) return site_error_answer();
    const sp_scan_plan *p = &a.p;
    static const char *kind[] = {"up", "identity", "carry", "down"};
    int products = 0;
    for (int i = 0; i < p->nsteps; i++) products += p->steps[i].product;
    site_out o;
    site_out_open(&o);
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
    return site_out_close(&o);
}
