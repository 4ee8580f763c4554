/* schedule.c — the master schedule of [U] and its built-in schemes.
 *
 * A scheme is two functions, w_compute(s,b,d) and w_weights(s,b,d) ([U] "Formal
 * definitions of distributed schedules"), the tie-break n(s,b,d) and, for 1F1B, a cap
 * on micro-batches in flight. sp_schedule_new turns a scheme into an explicit job
 * table with predecessors — the one description both the simulator and an executor use.
 *
 *   scheme      w_compute          w_weights          n (ties)            [paper]
 *   ddp         b                  b                  forward first       [U] w_DDP
 *   fsdp        b                  s                  forward first       [U] w_FSDP
 *   gpipe       s                  s                  forward first       [U] w_GPipe
 *   1f1b        s                  s                  backward first      [U] n, + cap
 *   lpp         h(s,b)             h(s,b)             forward first       [U] w_LPP
 *   fslpp       h(s,b)             h(s,s)             forward first       [U] w_FSLPP
 *   ooo-ff      s                  s                  F, δ, then G        [O] §5.2.1
 *   ooo-modulo  s mod W            s mod W            F, δ, then G        [O] §5.2.1
 *   ddp-ooo     b                  b                  reverse first-k     [O] §5.1, Alg. 2
 *
 * with h(s,b) = (R·b mod W) + (s mod R). When W < S the pipeline schemes place
 * contiguous blocks of stages on each worker, balanced by cost (the "conventional
 * allocation" of [O]); ooo-modulo places stage s on worker s mod W. The data-parallel
 * schemes map micro-batch b to worker b mod W, the paper's b when W = B. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "schedulers/plan/schedule.h"
#include "schedulers/plan/schedule_internal.h"

const char *sp_dir_letter(sp_dir d)
{
    static const char *letters[] = {"f", "b", "d", "g"};
    return letters[d];
}

int sp_lpp_hash(int stage, int b, int groups, int per_group)
{
    int w = groups * per_group;
    return (int)(((long)per_group * b) % w) + stage % per_group;
}

/* ------------------------------------------------------------------------------------ */
/* w_compute and w_weights                                                              */

static int w_micro(const sp_schedule *s, sp_job j) { return j.micro % s->workers; }
static int w_stage_mod(const sp_schedule *s, sp_job j) { return j.stage % s->workers; }
static int w_placed(const sp_schedule *s, sp_job j) { return s->stage_worker[j.stage]; }
static int w_lpp(const sp_schedule *s, sp_job j)
{
    return sp_lpp_hash(j.stage, j.micro, s->groups, s->per_group);
}
/* FSLPP: the hash with the batch id replaced by the stage id, w_weights = h(s, s). */
static int w_fslpp_weights(const sp_schedule *s, sp_job j)
{
    return sp_lpp_hash(j.stage, j.stage, s->groups, s->per_group);
}

/* ------------------------------------------------------------------------------------ */
/* n(s, b, d): a unique integer per job, smaller first ([U] "n(s,b,d) ... total order")  */

/* Jobs are ranked by a class (which direction goes first), then by micro-batch (oldest
 * first), then by stage in the order the pass visits them. */
static long rank(const sp_schedule *s, sp_job j, int klass)
{
    int stage_order = j.dir == SP_FWD ? j.stage : s->stages - 1 - j.stage;
    return ((long)klass * s->micro + j.micro) * s->stages + stage_order;
}

/* GPipe's breadth-first order: forwards, then backwards; with split backward the
 * weight gradients G come last ([O] gradient fast-forwarding: δ before G). */
static long prio_forward_first(const sp_schedule *s, sp_job j)
{
    static const int klass[] = {[SP_FWD] = 0, [SP_BWD] = 1, [SP_BWD_DELTA] = 1, [SP_BWD_GRAD] = 2};
    return rank(s, j, klass[j.dir]);
}

/* 1F1B: a ready backward goes before a ready forward ([U] "in the 1F1B schedule, a
 * worker processes the backward pass preferentially"); G still last when split. */
static long prio_backward_first(const sp_schedule *s, sp_job j)
{
    static const int klass[] = {[SP_FWD] = 1, [SP_BWD] = 0, [SP_BWD_DELTA] = 0, [SP_BWD_GRAD] = 2};
    return rank(s, j, klass[j.dir]);
}

/* ooo's data-parallel order, reverse first-k ([O] Algorithm 2): the stages ≥ K run their
 * backward conventionally from the top (G_s, then δ_s), then the δ of the stages < K,
 * then their G in forward order — so the weights the next forward needs first have
 * their gradients (and their synchronisation) first. Forwards first, as DDP. */
static long prio_reverse_first_k(const sp_schedule *s, sp_job j)
{
    long S = s->stages, K = s->first_k, pos;
    if (j.dir == SP_FWD) return (long)j.micro * 3 * S + j.stage;
    if (j.stage >= K) pos = 2 * (S - 1 - j.stage) + (j.dir == SP_BWD_GRAD ? 0 : 1);
    else if (j.dir == SP_BWD_DELTA) pos = 2 * (S - K) + (K - 1 - j.stage);
    else pos = 2 * (S - K) + K + j.stage;
    return ((long)s->micro + j.micro) * 3 * S + pos;
}

/* 1F1B's warm-up (PipeDream-Flush): worker w keeps at most W − w micro-batches in flight.
 * Under the greedy recursion n alone cannot bound memory — worker 0 would run forwards
 * until the first backward arrives — so the cap is an extra pred edge. */
static int inflight_1f1b(const sp_schedule *s, int stage) { return s->workers - s->stage_worker[stage]; }

/* ------------------------------------------------------------------------------------ */
/* setup: defaults and constraints                                                      */

static void setup_data_parallel(sp_schedule *s)
{
    if (s->workers == 0) s->workers = s->micro;   /* [U] Table 1: W = B */
}

static void setup_ddp_ooo(sp_schedule *s)
{
    setup_data_parallel(s);
    if (s->first_k <= 0) s->first_k = s->stages / 2 > 0 ? s->stages / 2 : 1;
    if (s->first_k > s->stages)
        sp_fail("--scheme ddp-ooo: first k = %d stages of %d (expected k <= S)", s->first_k, s->stages);
}

static void setup_pipeline(sp_schedule *s)
{
    if (s->workers == 0) s->workers = s->stages;  /* [U] Table 1: W = S */
    if (s->workers > s->stages)
        sp_fail("--scheme %s: %d workers for %d stages (a pipeline needs workers <= stages)",
                s->scheme->name, s->workers, s->stages);
}

static void setup_looped(sp_schedule *s)
{
    if (s->groups == 0 && s->per_group == 0) {
        s->per_group = s->workers ? s->workers : s->stages;
        s->groups = 1;
    } else if (s->groups == 0) {
        s->groups = s->workers ? s->workers / s->per_group : 1;
    } else if (s->per_group == 0) {
        s->per_group = s->workers ? s->workers / s->groups : s->stages;
    }
    if (s->groups < 1 || s->per_group < 1)
        sp_fail("--scheme %s: --groups %d --per-group %d (expected both >= 1)", s->scheme->name,
                s->groups, s->per_group);
    if (s->per_group > s->stages)
        sp_fail("--scheme %s: --per-group %d exceeds the %d stages (expected R <= S)",
                s->scheme->name, s->per_group, s->stages);
    if (s->workers && s->workers != s->groups * s->per_group)
        sp_fail("--scheme %s: --workers %d but --groups %d x --per-group %d = %d (expected W = G*R)",
                s->scheme->name, s->workers, s->groups, s->per_group, s->groups * s->per_group);
    s->workers = s->groups * s->per_group;
}

/* ------------------------------------------------------------------------------------ */
/* The built-in schemes                                                                 */

enum { PLACE_NONE, PLACE_CONTIGUOUS, PLACE_MODULO };

typedef struct builtin {
    sp_scheme scheme;
    int placement;
} builtin;

static const builtin BUILTINS[] = {
    {{"ddp", "Distributed Data Parallel: w = (b, b)", false, setup_data_parallel, w_micro,
      w_micro, prio_forward_first, NULL},
     PLACE_NONE},
    {{"fsdp", "Fully Sharded DDP: w = (s, b), weights of stage s on worker s", false,
      setup_data_parallel, w_micro, w_stage_mod, prio_forward_first, NULL},
     PLACE_NONE},
    {{"gpipe", "GPipe: w = (s, s), all forwards before backwards", false, setup_pipeline,
      w_placed, w_placed, prio_forward_first, NULL},
     PLACE_CONTIGUOUS},
    {{"1f1b", "1F1B (PipeDream-Flush): GPipe placement, backward first, W-w micro-batches in flight",
      false, setup_pipeline, w_placed, w_placed, prio_backward_first, inflight_1f1b},
     PLACE_CONTIGUOUS},
    {{"lpp", "Looped PP: w = (h(s,b), h(s,b)), h = (Rb mod W) + (s mod R)", false, setup_looped,
      w_lpp, w_lpp, prio_forward_first, NULL},
     PLACE_NONE},
    {{"fslpp", "Fully Sharded LPP: w = (h(s,s), h(s,b))", false, setup_looped, w_lpp,
      w_fslpp_weights, prio_forward_first, NULL},
     PLACE_NONE},
    {{"ooo-ff", "GPipe + gradient fast-forwarding: delta before G (ooo §5.2.1)", true,
      setup_pipeline, w_placed, w_placed, prio_forward_first, NULL},
     PLACE_CONTIGUOUS},
    {{"ooo-modulo", "modulo layer allocation s mod W + fast-forwarding (ooo §5.2.1)", true,
      setup_pipeline, w_placed, w_placed, prio_forward_first, NULL},
     PLACE_MODULO},
    {{"ddp-ooo", "DDP with ooo's reverse first-k weight-gradient order (ooo §5.1, Algorithm 2)", true,
      setup_ddp_ooo, w_micro, w_micro, prio_reverse_first_k, NULL},
     PLACE_NONE},
};
#define NBUILTINS ((int)(sizeof BUILTINS / sizeof BUILTINS[0]))

int sp_scheme_count(void) { return NBUILTINS; }
const sp_scheme *sp_scheme_at(int i) { return &BUILTINS[i].scheme; }

const char *sp_scheme_names(void)
{
    static char buf[256];
    buf[0] = 0;
    for (int i = 0; i < NBUILTINS; i++) {
        if (i) strcat(buf, "|");
        strcat(buf, BUILTINS[i].scheme.name);
    }
    return buf;
}

const sp_scheme *sp_scheme_find(const char *name)
{
    for (int i = 0; i < NBUILTINS; i++)
        if (strcmp(BUILTINS[i].scheme.name, name) == 0) return &BUILTINS[i].scheme;
    sp_fail("--scheme %s: unknown scheme (expected one of %s)", name, sp_scheme_names());
}

static int placement_of(const sp_scheme *scheme)
{
    for (int i = 0; i < NBUILTINS; i++)
        if (&BUILTINS[i].scheme == scheme) return BUILTINS[i].placement;
    return PLACE_NONE;   /* a user scheme places stages itself */
}

/* ------------------------------------------------------------------------------------ */
/* Stage placement for the pipeline schemes                                             */

static void place_contiguous(sp_schedule *s, const sp_costs *c)
{
    double *load = sp_xmalloc(sizeof(double) * s->stages);
    for (int st = 0; st < s->stages; st++)
        load[st] = c ? c->fwd[st] + sp_costs_bwd(c, st) : 1.0;
    sp_partition_contiguous(load, s->stages, s->workers, s->stage_worker);
    free(load);
}

static void place_stages(sp_schedule *s, const sp_costs *c, const int *given)
{
    int kind = placement_of(s->scheme);
    s->stage_worker = sp_xmalloc(sizeof(int) * s->stages);
    for (int st = 0; st < s->stages; st++) s->stage_worker[st] = st % s->workers;
    if (kind == PLACE_CONTIGUOUS && given) {
        for (int st = 0; st < s->stages; st++) {
            if (given[st] < 0 || given[st] >= s->workers || (st > 0 && given[st] < given[st - 1]))
                sp_fail("--scheme %s: placement of stage %d on worker %d (expected non-decreasing workers in [0, %d))",
                        s->scheme->name, st, given[st], s->workers);
            s->stage_worker[st] = given[st];
        }
    } else if (kind == PLACE_CONTIGUOUS) {
        place_contiguous(s, c);
    }
}

/* ------------------------------------------------------------------------------------ */
/* Materialising the jobs                                                               */

static int ndirs(const sp_schedule *s) { return s->split_backward ? 3 : 2; }
static sp_dir dir_at(const sp_schedule *s, int k)
{
    if (k == 0) return SP_FWD;
    return s->split_backward ? (k == 1 ? SP_BWD_DELTA : SP_BWD_GRAD) : SP_BWD;
}
static int dir_slot(sp_dir d) { return d == SP_FWD ? 0 : d == SP_BWD_GRAD ? 2 : 1; }

int sp_schedule_find(const sp_schedule *s, int stage, int micro, sp_dir dir)
{
    if (stage < 0 || stage >= s->stages || micro < 0 || micro >= s->micro) return -1;
    if ((dir == SP_BWD) == s->split_backward && dir != SP_FWD) return -1;
    return s->index[((long)dir_slot(dir) * s->micro + micro) * s->stages + stage];
}

static bool job_exists(const sp_schedule *s, int stage, sp_dir d)
{
    return !(d == SP_BWD_DELTA && stage == 0 && !s->input_grad);
}

static void make_jobs(sp_schedule *s)
{
    long slots = (long)ndirs(s) * s->micro * s->stages;
    s->index = sp_xmalloc(sizeof(int) * slots);
    s->jobs = sp_xmalloc(sizeof(sp_job) * slots);
    s->njobs = 0;
    for (int k = 0; k < ndirs(s); k++)
        for (int b = 0; b < s->micro; b++)
            for (int st = 0; st < s->stages; st++) {
                sp_dir d = dir_at(s, k);
                long slot = ((long)k * s->micro + b) * s->stages + st;
                s->index[slot] = -1;
                if (!job_exists(s, st, d)) continue;
                s->index[slot] = s->njobs;
                s->jobs[s->njobs++] = (sp_job){st, b, d};
            }
}

static void check_worker(const sp_schedule *s, int w, const char *what, sp_job j)
{
    if (w < 0 || w >= s->workers)
        sp_fail("--scheme %s: %s(%d, %d, %s) = %d is not a worker in [0, %d)", s->scheme->name, what,
                j.stage, j.micro, sp_dir_letter(j.dir), w, s->workers);
}

static void assign_workers(sp_schedule *s)
{
    s->compute = sp_xmalloc(sizeof(int) * s->njobs);
    s->weights = sp_xmalloc(sizeof(int) * s->njobs);
    s->priority = sp_xmalloc(sizeof(long) * s->njobs);
    for (int i = 0; i < s->njobs; i++) {
        sp_job j = s->jobs[i];
        s->compute[i] = s->scheme->compute(s, j);
        s->weights[i] = s->scheme->weights(s, j);
        s->priority[i] = s->scheme->priority(s, j);
        check_worker(s, s->compute[i], "w_compute", j);
        check_worker(s, s->weights[i], "w_weights", j);
    }
}

/* pred() of [U]:  pred(s, b, F) = {(s−1, b, F)},  pred(S−1, b, B) = {(S−1, b, F)},
 * pred(s, b, B) = {(s+1, b, B)}. Split backward: δ_s and G_s both wait for the iterate
 * z_{s+1} that δ_{s+1} produced ([L] Eq. 4–5: G_l needs δ_l and a_{l−1}). The in-flight
 * cap adds: F(s, b) waits for every backward job of (s, b − k). Returns the count. */
static int collect_preds(const sp_schedule *s, sp_job j, int *out)
{
    int n = 0;
    if (j.dir == SP_FWD) {
        if (j.stage > 0) out[n++] = sp_schedule_find(s, j.stage - 1, j.micro, SP_FWD);
        int k = s->scheme->inflight ? s->scheme->inflight(s, j.stage) : 0;
        if (k > 0 && j.micro - k >= 0)
            for (int d = SP_BWD; d <= SP_BWD_GRAD; d++) {
                int p = sp_schedule_find(s, j.stage, j.micro - k, (sp_dir)d);
                if (p >= 0) out[n++] = p;
            }
        return n;
    }
    if (j.stage == s->stages - 1)
        out[n++] = sp_schedule_find(s, j.stage, j.micro, SP_FWD);
    else
        out[n++] = sp_schedule_find(s, j.stage + 1, j.micro, s->split_backward ? SP_BWD_DELTA : SP_BWD);
    return n;
}

static void build_edges(sp_schedule *s)
{
    int buf[4];
    s->pred_off = sp_xmalloc(sizeof(int) * (s->njobs + 1));
    s->pred_off[0] = 0;
    for (int i = 0; i < s->njobs; i++) s->pred_off[i + 1] = s->pred_off[i] + collect_preds(s, s->jobs[i], buf);
    s->preds = sp_xmalloc(sizeof(int) * (s->pred_off[s->njobs] + 1));
    for (int i = 0; i < s->njobs; i++) collect_preds(s, s->jobs[i], s->preds + s->pred_off[i]);

    /* succ is the inverse of pred ([U]); with split backward and the cap it is a DAG. */
    s->succ_off = sp_xcalloc(s->njobs + 1, sizeof(int));
    for (int e = 0; e < s->pred_off[s->njobs]; e++) s->succ_off[s->preds[e] + 1]++;
    for (int i = 0; i < s->njobs; i++) s->succ_off[i + 1] += s->succ_off[i];
    s->succs = sp_xmalloc(sizeof(int) * (s->succ_off[s->njobs] + 1));
    int *fill = sp_xcalloc(s->njobs, sizeof(int));
    for (int i = 0; i < s->njobs; i++)
        for (int e = s->pred_off[i]; e < s->pred_off[i + 1]; e++) {
            int p = s->preds[e];
            s->succs[s->succ_off[p] + fill[p]++] = i;
        }
    free(fill);
}

static void check_config(const sp_scheme *scheme, const sp_sched_config *cfg, const sp_costs *c)
{
    if (cfg->stages < 1) sp_fail("--stages %d: expected >= 1", cfg->stages);
    if (cfg->micro < 1) sp_fail("--microbatches %d: expected >= 1", cfg->micro);
    if (cfg->workers < 0) sp_fail("--workers %d: expected >= 1", cfg->workers);
    if (cfg->groups < 0 || cfg->per_group < 0)
        sp_fail("--groups %d --per-group %d: expected >= 1", cfg->groups, cfg->per_group);
    if (c && c->stages != cfg->stages)
        sp_fail("--scheme %s: the costs describe %d stages, the schedule %d", scheme->name, c->stages,
                cfg->stages);
}

sp_schedule *sp_schedule_new(const sp_scheme *scheme, const sp_sched_config *cfg, const sp_costs *costs)
{
    check_config(scheme, cfg, costs);
    sp_schedule shape = {
        .scheme = scheme, .stages = cfg->stages, .micro = cfg->micro, .workers = cfg->workers,
        .groups = cfg->groups, .per_group = cfg->per_group,
        .split_backward = cfg->split < 0 ? scheme->split_backward : cfg->split > 0,
        .input_grad = !cfg->no_input_grad, .first_k = cfg->first_k,
    };
    scheme->setup(&shape);   /* may sp_fail: nothing is allocated yet */
    if (shape.groups == 0) shape.groups = 1;
    if (shape.per_group == 0) shape.per_group = shape.workers;
    sp_schedule *s = sp_xmalloc(sizeof *s);
    *s = shape;
    place_stages(s, costs, cfg->placement);
    make_jobs(s);
    assign_workers(s);
    build_edges(s);
    return s;
}

/* A schedule of a given shape whose stages are already placed (schedule_actions.c): the
 * same jobs, workers and edges as sp_schedule_new. stage_worker is taken over. */
sp_schedule *sp_schedule_build(const sp_schedule *shape, int *stage_worker)
{
    sp_schedule *s = sp_xmalloc(sizeof *s);
    *s = *shape;
    s->stage_worker = stage_worker;
    make_jobs(s);
    assign_workers(s);
    build_edges(s);
    return s;
}

void sp_schedule_free(sp_schedule *s)
{
    if (!s) return;
    free(s->fixed_off);
    free(s->fixed);
    free(s->stage_chunk);
    free(s->stage_worker);
    free(s->jobs);
    free(s->compute);
    free(s->weights);
    free(s->priority);
    free(s->pred_off);
    free(s->preds);
    free(s->succ_off);
    free(s->succs);
    free(s->index);
    free(s);
}

const int *sp_schedule_preds(const sp_schedule *s, int job, int *n)
{
    *n = s->pred_off[job + 1] - s->pred_off[job];
    return s->preds + s->pred_off[job];
}

const int *sp_schedule_succs(const sp_schedule *s, int job, int *n)
{
    *n = s->succ_off[job + 1] - s->succ_off[job];
    return s->succs + s->succ_off[job];
}

double sp_job_duration(const sp_schedule *s, const sp_costs *c, int job)
{
    sp_job j = s->jobs[job];
    bool delta = s->input_grad || j.stage > 0;
    switch (j.dir) {
    case SP_FWD: return c ? c->fwd[j.stage] : 1.0;
    case SP_BWD_DELTA: return c ? c->delta[j.stage] : 0.5;
    case SP_BWD_GRAD: return c ? c->grad[j.stage] : 0.5;
    case SP_BWD: break;
    }
    if (!c) return delta ? 1.0 : 0.5;
    return (delta ? c->delta[j.stage] : 0.0) + c->grad[j.stage];
}

/* Micro-batch b in base 26 with letters: 0 → a, 25 → z, 26 → ba, … */
static int micro_letters(int b, char *out)
{
    char tmp[16];
    int n = 0;
    do {
        tmp[n++] = (char)('a' + b % 26);
        b /= 26;
    } while (b > 0 && n < 15);
    for (int i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
    out[n] = 0;
    return n;
}

const char *sp_job_label(const sp_schedule *s, int job, char *buf, int len)
{
    sp_job j = s->jobs[job];
    char micro[16] = "";
    if (s->micro > 1) micro_letters(j.micro, micro);
    snprintf(buf, (size_t)len, "%s%d%s", sp_dir_letter(j.dir), j.stage, micro);
    return buf;
}
