/* schedule_actions.c — the master schedule of a per-rank action list (actions.h).
 *
 * An action list names chunks; the master schedule names stages (the model's layers).
 * A chunk is a contiguous range of stages (sp_chunk_partition: balanced by cost, one
 * stage per chunk when their counts agree), placed on the rank that runs it; each action
 * becomes its chunk's layer jobs in order, and each worker's job order is fixed
 * (s->fixed): sp_simulate runs it as given, the executor walks it, so the list, the
 * simulation and the run agree action for action. (The way back, a simulated order read
 * as actions, is the simulator's: sim/sim_actions.c.) */
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "schedulers/plan/actions.h"
#include "schedulers/plan/limits.h"
#include "schedulers/plan/schedule.h"
#include "schedulers/plan/schedule_internal.h"

/* ---- chunks of stages --------------------------------------------------------------------- */

void sp_chunk_partition(const sp_costs *c, int stages, int chunks, int *stage_chunk)
{
    if (chunks < 1 || chunks > stages)
        sp_fail("%d chunks for %d stages (expected 1 <= chunks <= stages: each chunk holds whole layers)", chunks,
                stages);
    double *load = sp_xmalloc(sizeof(double) * (size_t)stages);
    for (int s = 0; s < stages; s++) load[s] = c ? c->fwd[s] + sp_costs_bwd(c, s) : 1.0;
    sp_partition_contiguous(load, stages, chunks, stage_chunk);
    free(load);
    /* The balanced partition may leave a chunk empty (free layers); then split by count. */
    bool empty = stage_chunk[stages - 1] != chunks - 1;
    for (int s = 1; s < stages; s++) empty |= stage_chunk[s] > stage_chunk[s - 1] + 1;
    if (empty || stage_chunk[0] != 0)
        for (int s = 0; s < stages; s++) stage_chunk[s] = (int)((long)s * chunks / stages);
}

void sp_chunk_costs_sum(const sp_costs *c, int stages, int chunks, const int *stage_chunk, double *f, double *i,
                        double *w, double *act)
{
    for (int k = 0; k < chunks; k++) f[k] = i[k] = w[k] = act[k] = 0;
    for (int s = 0; s < stages; s++) {
        int k = stage_chunk[s];
        f[k] += c ? c->fwd[s] : 1.0;
        i[k] += c ? c->delta[s] : 1.0;
        w[k] += c ? c->grad[s] : 1.0;
        act[k] += c ? c->act_bytes[s] : 1.0;
    }
}

int sp_pp_generate_from_costs(const sp_pp_generator *g, const sp_costs *c, int ranks, int micro, int chunks_per_rank,
                              double mem_limit, bool mem_bytes, double transfer, sp_actions **out)
{
    if (!out) return sp_error("sp_pp_generate_from_costs: argument 'out' is NULL");
    *out = NULL;
    if (!g) return sp_error("sp_pp_generate_from_costs: argument 'g' is NULL");
    int v = chunks_per_rank > 0 ? chunks_per_rank : g->default_chunks_per_rank;
    if (ranks < 1 || v < 1 || (long)ranks * v > (c ? c->stages : 1L << 20))
        return sp_error("%s: %d ranks x %d chunks per rank for %d stages (expected ranks x chunks <= stages: each "
                        "chunk holds whole layers)", g->name, ranks, v, c ? c->stages : 0);
    int C = ranks * v;
    /* the work bound (limits.h) of the schedule the list becomes, before it is generated */
    if (micro >= 1 && sp_limit_work(g->name, (double)(c ? c->stages : C) * micro * 3, ranks) != SP_OK) return SP_ERR;
    sp_chunk_costs cc = {.chunks = C};
    double *buf = NULL;
    if (c) {
        int *stage_chunk = sp_xmalloc(sizeof(int) * (size_t)c->stages);
        buf = sp_xmalloc(sizeof(double) * 4 * (size_t)C);
        sp_chunk_partition(c, c->stages, C, stage_chunk);
        sp_chunk_costs_sum(c, c->stages, C, stage_chunk, buf, buf + C, buf + 2 * C, buf + 3 * C);
        free(stage_chunk);
        /* act NULL: one unit per chunk and micro-batch, the unit of --mem-limit N */
        cc = (sp_chunk_costs){.chunks = C, .f = buf, .i = buf + C, .w = buf + 2 * C, .act = mem_bytes ? buf + 3 * C : NULL,
                              .transfer = transfer};
    }
    sp_pp_params p = {.ranks = ranks, .micro = micro, .chunks_per_rank = chunks_per_rank, .costs = c ? &cc : NULL,
                      .mem_limit = mem_limit};
    int rc = g->generate(&p, out);
    free(buf);
    if (rc != SP_OK) *out = NULL;
    return rc;
}

/* ---- list → schedule ---------------------------------------------------------------------- */

static bool list_splits(const sp_actions *a)
{
    for (int k = 0; k < a->off[a->ranks]; k++)
        if (a->act[k].type == SP_ACT_I || a->act[k].type == SP_ACT_W) return true;
    return false;
}

/* Append the jobs of one action (those that exist: stage 0 may have no δ). */
static int expand(const sp_schedule *s, const int *first, const int *last, sp_action x, int *out)
{
    int n = 0, lo = first[x.chunk], hi = last[x.chunk], b = x.micro;
#define PUT(st, d)                                        \
    do {                                                  \
        int j_ = sp_schedule_find(s, (st), b, (d));       \
        if (j_ >= 0) out[n++] = j_;                       \
    } while (0)
    switch (x.type) {
    case SP_ACT_F:
        for (int st = lo; st <= hi; st++) PUT(st, SP_FWD);
        break;
    case SP_ACT_I:
        for (int st = hi; st >= lo; st--) PUT(st, SP_BWD_DELTA);
        break;
    case SP_ACT_W:
        for (int st = hi; st >= lo; st--) PUT(st, SP_BWD_GRAD);
        break;
    case SP_ACT_B:
        for (int st = hi; st >= lo; st--) {
            if (s->split_backward) {
                PUT(st, SP_BWD_DELTA);
                PUT(st, SP_BWD_GRAD);
            } else {
                PUT(st, SP_BWD);
            }
        }
        break;
    }
#undef PUT
    return n;
}

sp_schedule *sp_schedule_from_actions(const sp_actions *a, const sp_sched_config *cfg, const sp_costs *c)
{
    const char *name = cfg->actions_scheme ? cfg->actions_scheme : "custom";
    const sp_scheme *scheme = sp_scheme_actions_view(name);
    if (!scheme) sp_fail("--scheme %s: not an action-list scheme (expected a generator or custom)", name);
    if (!a) sp_fail("--scheme %s: no action list", name);
    if (sp_actions_check(a) != SP_OK) sp_fail("--scheme %s: %s", name, sp_last_error());
    int S = cfg->stages;
    if (S < 1) sp_fail("--stages %d: expected >= 1", S);
    if (c && c->stages != S) sp_fail("--scheme %s: the costs describe %d stages, the schedule %d", name, c->stages, S);
    if (a->chunks > S)
        sp_fail("--scheme %s: the list has %d chunks for %d stages (expected chunks <= stages: each chunk holds whole "
                "layers)", name, a->chunks, S);
    if (cfg->workers > 0 && cfg->workers != a->ranks)
        sp_fail("--scheme %s: --workers %d but the list has %d ranks", name, cfg->workers, a->ranks);
    if (cfg->micro > 0 && cfg->micro != a->micro)
        sp_fail("--scheme %s: --microbatches %d but the list has %d micro-batches", name, cfg->micro, a->micro);
    bool split = list_splits(a);
    if (split && cfg->split == 0)
        sp_fail("--scheme %s: --no-split, but the list splits the backward into I and W", name);
    /* the work bound (limits.h), before the schedule is built */
    if (sp_limit_work(name, (double)S * a->micro * (split || cfg->split > 0 ? 3 : 2), a->ranks) != SP_OK)
        sp_fail("--scheme %s", sp_last_error());
    int *stage_chunk = sp_xmalloc(sizeof(int) * (size_t)S), *stage_worker = sp_xmalloc(sizeof(int) * (size_t)S);
    sp_chunk_partition(c, S, a->chunks, stage_chunk);
    for (int st = 0; st < S; st++) stage_worker[st] = a->chunk_rank[stage_chunk[st]];
    sp_schedule shape = {
        .scheme = scheme, .stages = S, .micro = a->micro, .workers = a->ranks, .groups = 1, .per_group = a->ranks,
        .split_backward = split || cfg->split > 0, .input_grad = !cfg->no_input_grad,
        .mem_model = cfg->mem_model, .mem_grad_share = cfg->mem_grad_share,
    };
    sp_schedule *s = sp_schedule_build(&shape, stage_worker);
    s->chunks = a->chunks;
    s->stage_chunk = stage_chunk;
    int *first = sp_xmalloc(sizeof(int) * (size_t)a->chunks), *last = sp_xmalloc(sizeof(int) * (size_t)a->chunks);
    for (int st = S - 1; st >= 0; st--) first[stage_chunk[st]] = st;
    for (int st = 0; st < S; st++) last[stage_chunk[st]] = st;
    /* Each worker's jobs in its list's order; the position is also the priority n. */
    s->fixed_off = sp_xcalloc((size_t)s->workers + 1, sizeof(int));
    s->fixed = sp_xmalloc(sizeof(int) * (size_t)(s->njobs + 1));
    int n = 0, *buf = sp_xmalloc(sizeof(int) * (size_t)(2 * S + 2));
    for (int r = 0; r < a->ranks; r++) {
        for (int k = a->off[r]; k < a->off[r + 1]; k++) {
            int m = expand(s, first, last, a->act[k], buf);
            for (int i = 0; i < m; i++) {
                if (n >= s->njobs) {   /* a refusal frees what it built (the page's module goes on) */
                    free(buf), free(first), free(last), sp_schedule_free(s);
                    sp_fail("--scheme %s: the list expands to more jobs than the schedule has", name);
                }
                s->priority[buf[i]] = n;
                s->fixed[n++] = buf[i];
            }
        }
        s->fixed_off[r + 1] = n;
    }
    free(buf);
    free(first);
    free(last);
    if (n != s->njobs) {
        int njobs = s->njobs;
        sp_schedule_free(s);
        sp_fail("--scheme %s: the list covers %d of the %d jobs", name, n, njobs);
    }
    return s;
}
