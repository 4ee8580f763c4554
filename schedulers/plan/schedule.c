/* schedule.c — the master schedule of [U]: a scheme's rules (its w_compute, w_weights,
 * tie-break n and in-flight cap; rules.h for the built-in ones) turned into an explicit
 * job table with predecessors — the one description both the simulator and an executor
 * use. The pipeline schemes' stages are placed here: contiguous blocks balanced by cost
 * (or the caller's placement), or stage s on worker s mod W. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "schedulers/plan/limits.h"
#include "schedulers/plan/schedule.h"
#include "schedulers/plan/schedule_internal.h"

const char *sp_dir_letter(sp_dir d)
{
    static const char *letters[] = {"f", "b", "d", "g"};
    return letters[d];
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
    sp_placement kind = sp_scheme_placement(s->scheme);
    s->stage_worker = sp_xmalloc(sizeof(int) * s->stages);
    for (int st = 0; st < s->stages; st++) s->stage_worker[st] = st % s->workers;
    if (kind == SP_PLACE_CONTIGUOUS && given) {
        for (int st = 0; st < s->stages; st++) {
            if (given[st] < 0 || given[st] >= s->workers || (st > 0 && given[st] < given[st - 1]))
                sp_fail("--scheme %s: placement of stage %d on worker %d (expected non-decreasing workers in [0, %d))",
                        s->scheme->name, st, given[st], s->workers);
            s->stage_worker[st] = given[st];
        }
    } else if (kind == SP_PLACE_CONTIGUOUS) {
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
        .input_grad = !cfg->no_input_grad, .first_k = cfg->first_k, .mem_model = cfg->mem_model,
        .mem_grad_share = cfg->mem_grad_share,
    };
    scheme->setup(&shape);   /* may sp_fail: nothing is allocated yet */
    if (shape.groups == 0) shape.groups = 1;
    if (shape.per_group == 0) shape.per_group = shape.workers;
    /* the work bound (limits.h), before anything is allocated */
    if (sp_limit_work(scheme->name, (double)shape.stages * shape.micro * (shape.split_backward ? 3 : 2),
                      shape.workers) != SP_OK)
        sp_fail("--scheme %s", sp_last_error());
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
int sp_micro_name(int b, char out[16])
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
    if (s->micro > 1) sp_micro_name(j.micro, micro);
    snprintf(buf, (size_t)len, "%s%d%s", sp_dir_letter(j.dir), j.stage, micro);
    return buf;
}
