/* gen_greedy.c — the greedy list scheduler of the zero-bubble papers, and the schemes built
 * with it: zb-auto, v-half, v-min (gen.h).
 *
 * [ZB]  Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, §3 (automatic
 *       scheduling: a greedy heuristic under a memory limit, run with several settings,
 *       the best kept).
 * [CM]  Qi et al., "Pipeline Parallelism with Controllable Memory", NeurIPS 2024 (V-Half,
 *       V-Min: V placement with half and a third of 1F1B's activation memory).
 *
 * The list scheduler simulates the ranks in time. Whenever a rank is free it takes, among
 * the actions whose predecessors are done (and arrived: + transfer across ranks), by the
 * variant's priority: an I (the critical path back), an F (admitted only within the memory
 * limit), else a deferred W (W fills what would be idle; it also runs when an F waits
 * for memory, since W frees it). A chunk runs its F's and its I's in micro-batch order;
 * the W's of a rank run first in, first out. Memory: F(c, b) holds act(c) until W(c, b).
 * So that a full rank never blocks a micro-batch it has already started, a rank admits a
 * new micro-batch only if the activations of all its chunks for it fit beside what it
 * holds and what its started micro-batches still need; a micro-batch once admitted on
 * every rank then finishes (its backwards need no memory, its W's free it), so every
 * limit ≥ one micro-batch's activations per rank runs to the end.
 *
 * Variants: I or F first; among F's, the rank's later chunk or its earlier chunk first;
 * W into any idle gap, or only gaps at least as long as the W; and limits below the
 * given one (a tighter limit is the heuristic's "fewer warm-up forwards"). Each result
 * is re-simulated in its fixed order (sp_actions_simulate) and the shortest kept, ties to
 * the smaller peak. zb-auto also considers zb-h1 (and for two chunks per rank, the V:
 * zbv, 1f1b-v, v-half and v-min) when their peak fits the limit, so it is never longer
 * than they are at that limit.
 *
 * v-half and v-min are this scheduler on the V placement (gen_v.h) with [CM]'s memory:
 * in units of the largest chunk activation u (a V chunk is half a rank's layers, so 1F1B
 * and ZB-V hold 2p·u per rank), V-Half gets (p + 1)·u — half of 1F1B's plus one chunk —
 * and V-Min ⌈2p/3⌉·u + u — a third plus one. [CM] builds them from a repeated building
 * block instead; the figures they trade (memory against bubble) are what the tests check,
 * not the block's exact order. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "schedulers/plan/actions.h"
#include "schedulers/plan/gen.h"
#include "schedulers/plan/gen/gen_sail.h"
#include "schedulers/plan/limits.h"

typedef struct policy {
    int f_first;      /* F before I when both are ready; 2: only the F of a chunk later
                         than every chunk of the ready I (depth first)      */
    int late_first;   /* among a rank's chunks, the later chunk's F first  */
    int w_fit;        /* W only into gaps at least as long as the W        */
    double limit;     /* activations per rank (units of act); INFINITY = none */
    double margin;    /* room a new micro-batch must leave for started ones */
} policy;

/* The problem: placement and costs (unit costs filled in when the caller gave none). */
typedef struct problem {
    int R, C, M;
    const int *chunk_rank;
    double *f, *i, *w, *act, transfer;
} problem;

typedef struct grank {
    double free_at, held;
    int left;             /* actions still to place          */
    int *wq, wq_head, wq_tail; /* deferred W's: chunk, micro   */
    int n, cap;
    sp_action *list;
} grank;

static void glist_push(grank *g, sp_action x)
{
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 64;
        g->list = sp_xrealloc(g->list, sizeof(sp_action) * (size_t)g->cap);
    }
    g->list[g->n++] = x;
}

/* Run one variant; NULL when it stalls (a limit too small for the placement). */
static sp_actions *greedy(const problem *pb, const policy *po)
{
    int R = pb->R, C = pb->C, M = pb->M;
    double *fF = sp_xmalloc(sizeof(double) * (size_t)C * M), *fI = sp_xmalloc(sizeof(double) * (size_t)C * M);
    for (int k = 0; k < C * M; k++) fF[k] = fI[k] = -1;
    int *nf = sp_xcalloc((size_t)C, sizeof(int)), *ni = sp_xcalloc((size_t)C, sizeof(int));
    int *fcount = sp_xcalloc((size_t)R * M, sizeof(int)), *nch = sp_xcalloc((size_t)R, sizeof(int));
    double *actsum = sp_xcalloc((size_t)R, sizeof(double));
    grank *g = sp_xcalloc((size_t)R, sizeof(grank));
    for (int c = 0; c < C; c++) {
        nch[pb->chunk_rank[c]]++;
        actsum[pb->chunk_rank[c]] += pb->act[c];
    }
    for (int r = 0; r < R; r++) {
        g[r].left = 3 * M * nch[r];
        g[r].wq = sp_xmalloc(sizeof(int) * 2 * (size_t)(nch[r] * M + 1));
    }
    int ok = 1;
    for (;;) {
        double t = INFINITY;
        for (int r = 0; r < R; r++)
            if (g[r].left > 0 && g[r].free_at < t) t = g[r].free_at;
        if (t == INFINITY) break;
        int *idle = sp_xcalloc((size_t)R, sizeof(int));
        double *next = sp_xmalloc(sizeof(double) * (size_t)R);
        for (int r = 0; r < R; r++) {
            if (g[r].left == 0 || g[r].free_at != t) continue;
            /* The ready F and I with the earliest ready time of the rest. */
            int bestF = -1, bestI = -1, memF = 0;
            double soon = INFINITY;
            for (int j = 0; j < C; j++) {
                int c = po->late_first ? C - 1 - j : j;
                if (pb->chunk_rank[c] != r) continue;
                int b = nf[c];
                if (b < M) {
                    double rt = 0;
                    int deps = 1;
                    if (c > 0) {
                        deps = fF[(c - 1) * M + b] >= 0;
                        rt = fF[(c - 1) * M + b] + (pb->chunk_rank[c - 1] != r ? pb->transfer : 0);
                    }
                    if (deps && rt <= t) {
                        int admit = g[r].held + (fcount[r * M + b] > 0 ? pb->act[c] : actsum[r] + po->margin) <=
                                    po->limit + 1e-9;
                        if (admit && bestF < 0) bestF = c;
                        if (!admit) memF = 1;
                    } else if (deps && rt < soon) soon = rt;
                }
                b = ni[c];
                if (b < nf[c]) {
                    double rt = fF[c * M + b];
                    int deps = 1;
                    if (c + 1 < C) {
                        deps = fI[(c + 1) * M + b] >= 0;
                        rt = fmax(rt, fI[(c + 1) * M + b] + (pb->chunk_rank[c + 1] != r ? pb->transfer : 0));
                    }
                    if (deps && rt <= t) {
                        if (bestI < 0) bestI = c;
                    } else if (deps && rt < soon) soon = rt;
                }
            }
            int pick = -1;
            sp_act_type type = SP_ACT_F;
            int f_wins = po->f_first == 1 || (po->f_first == 2 && bestI >= 0 && bestF > bestI);
            if (bestF >= 0 && (f_wins || bestI < 0)) pick = bestF, type = SP_ACT_F;
            else if (bestI >= 0) pick = bestI, type = SP_ACT_I;
            int haveW = g[r].wq_head < g[r].wq_tail;
            if (pick < 0 && haveW) {
                int c = g[r].wq[g[r].wq_head];
                if (memF || !po->w_fit || soon - t >= pb->w[c] - 1e-12) pick = c, type = SP_ACT_W;
            }
            if (pick < 0) {
                idle[r] = 1;
                next[r] = soon;
                continue;
            }
            int c = pick, b;
            double start = t, dur;
            if (type == SP_ACT_F) {
                b = nf[c]++;
                dur = pb->f[c];
                fcount[r * M + b]++;
                g[r].held += pb->act[c];
                fF[c * M + b] = start + dur;
            } else if (type == SP_ACT_I) {
                b = ni[c]++;
                dur = pb->i[c];
                fI[c * M + b] = start + dur;
                g[r].wq[g[r].wq_tail++] = c;
                g[r].wq[g[r].wq_tail++] = b;
            } else {
                b = g[r].wq[g[r].wq_head + 1];
                g[r].wq_head += 2;
                dur = pb->w[c];
                g[r].held -= pb->act[c];
            }
            glist_push(&g[r], (sp_action){c, b, type});
            g[r].free_at = start + dur;
            g[r].left--;
        }
        /* An idle rank looks again at the next event anywhere: a finish, or an arrival
         * some idle rank is waiting for. */
        double later = INFINITY;
        for (int q = 0; q < R; q++) {
            if (idle[q]) later = fmin(later, next[q]);
            else if (g[q].free_at > t) later = fmin(later, g[q].free_at);
        }
        int any = 0;
        for (int r = 0; r < R; r++) {
            if (!idle[r]) {
                if (g[r].left > 0) any = 1;
                continue;
            }
            g[r].free_at = later;
            if (later < INFINITY) any = 1;
        }
        free(idle);
        free(next);
        if (!any) {
            for (int r = 0; r < R; r++)
                if (g[r].left > 0) ok = 0;
            break;
        }
    }
    for (int r = 0; r < R; r++)
        if (g[r].left > 0) ok = 0;
    sp_actions *a = NULL;
    if (ok) {
        a = sp_actions_new(R, C, M, 3 * C * M);
        for (int c = 0; c < C; c++) a->chunk_rank[c] = pb->chunk_rank[c];
        for (int r = 0; r < R; r++)
            for (int k = 0; k < g[r].n; k++) sp_actions_push(a, r, g[r].list[k]);
    }
    for (int r = 0; r < R; r++) {
        free(g[r].wq);
        free(g[r].list);
    }
    free(g);
    free(fF);
    free(fI);
    free(nf);
    free(ni);
    free(fcount);
    free(nch);
    free(actsum);
    return a;
}

/* The candidate kept so far. */
typedef struct best {
    sp_actions *a;
    double latency, peak;
} best;

/* Keep cand if it is within the limit and shorter (ties: smaller peak); frees the loser. */
static void consider(best *bs, sp_actions *cand, const sp_chunk_costs *costs, double limit)
{
    if (!cand) return;
    sp_actions_sim s;
    if (sp_actions_simulate(cand, costs, &s) != SP_OK) {
        sp_actions_free(cand);
        return;
    }
    double peak = 0;
    for (int r = 0; r < cand->ranks; r++) peak = fmax(peak, s.peak_act[r]);
    double lat = s.latency;
    sp_actions_sim_free(&s);
    if (peak > limit + 1e-9 ||
        (bs->a && (lat > bs->latency + 1e-9 || (fabs(lat - bs->latency) <= 1e-9 && peak >= bs->peak)))) {
        sp_actions_free(cand);
        return;
    }
    sp_actions_free(bs->a);
    *bs = (best){cand, lat, peak};
}

static int search_steps(double limit, double floor_, double u)
{
    return limit == INFINITY ? 1 : 1 + (int)fmin(8, floor((limit - floor_) / u + 1e-9));
}

/* The work bound (limits.h) of a search that simulates `runs` candidate lists: each is a
 * simulation of 3·M·C jobs on R ranks. */
static int search_bound(const char *name, const problem *pb, int runs)
{
    char what[96];
    snprintf(what, sizeof what, "%s (a search over %d candidate lists)", name, runs);
    return sp_limit_work(what, (double)runs * 3 * pb->M * pb->C, pb->R);
}

/* Run every variant at limits limit, limit − u, ... (down to the smallest that can run). */
static void search(best *bs, const problem *pb, const sp_chunk_costs *costs, double limit, double floor_, double u)
{
    int steps = search_steps(limit, floor_, u);
    for (int s = 0; s < steps; s++)
        for (int v = 0; v < 24; v++) {
            /* s steps off the limit for every F, or only for a new micro-batch's. */
            policy po = {v % 3, (v / 3) & 1, (v / 6) & 1, limit - (v < 12) * s * u, (v >= 12) * s * u};
            if (s == 0 && v >= 12) continue;
            consider(bs, greedy(pb, &po), costs, limit);
        }
}

/* Fill pb from params with the placement chunk_rank; unit costs when none. */
static int setup(const char *name, const sp_pp_params *p, int C, const int *chunk_rank, problem *pb)
{
    if (p->costs && p->costs->chunks != C)
        return sp_error("%s: costs for %d chunks (expected %d)", name, p->costs->chunks, C);
    *pb = (problem){p->ranks, C, p->micro, chunk_rank, NULL, NULL, NULL, NULL, p->costs ? p->costs->transfer : 0};
    pb->f = sp_xmalloc(sizeof(double) * 4 * (size_t)C);
    pb->i = pb->f + C;
    pb->w = pb->i + C;
    pb->act = pb->w + C;
    for (int c = 0; c < C; c++) {
        const sp_chunk_costs *k = p->costs;
        pb->f[c] = k ? k->f[c] : 1;
        pb->i[c] = k ? k->i[c] : 1;
        pb->w[c] = k ? k->w[c] : 1;
        pb->act[c] = k && k->act ? k->act[c] : 1;
    }
    return SP_OK;
}

static int base_params(const char *name, const sp_pp_params *p)
{
    if (!p) return sp_error("%s: NULL parameters", name);
    if (p->ranks < 1) return sp_error("%s: %d ranks (expected at least 1)", name, p->ranks);
    if (p->micro < 1) return sp_error("%s: %d micro-batches (expected at least 1)", name, p->micro);
    if (!(p->mem_limit >= 0) || isinf(p->mem_limit))
        return sp_error("%s: memory limit %g (expected a finite value ≥ 0; 0 = none)", name, p->mem_limit);
    return SP_OK;
}

/* V-Half and V-Min: the V placement under (k·u) activations per rank. */
static int gen_v_limited(const char *name, const sp_pp_params *p, int units, int half, sp_actions **out)
{
    if (base_params(name, p) != SP_OK) return SP_ERR;
    if (p->chunks_per_rank != 0 && p->chunks_per_rank != 2)
        return sp_error("%s: %d chunks per rank (a V holds exactly 2)", name, p->chunks_per_rank);
    int P = p->ranks, C = 2 * P;
    int *cr = sp_xmalloc(sizeof(int) * (size_t)C);
    for (int c = 0; c < C; c++) cr[c] = c < P ? c : C - 1 - c;
    problem pb;
    if (setup(name, p, C, cr, &pb) != SP_OK) {
        free(cr);
        return SP_ERR;
    }
    double u = 0, need = 0;
    for (int c = 0; c < C; c++) u = fmax(u, pb.act[c]);
    for (int r = 0; r < P; r++) need = fmax(need, pb.act[r] + pb.act[C - 1 - r]);
    if (u <= 0) u = 1;
    double limit = fmax(units * u, need);
    if (search_bound(name, &pb, 24 + 12 * (search_steps(limit, need, u) - 1)) != SP_OK) {
        free(pb.f);
        free(cr);
        return SP_ERR;
    }
    best bs = {0};
    /* [CM]'s own building block (gen_sail.h) first: its peak is the bound the search keeps. */
    sp_actions *block = sp_sail_vpattern(p, half);
    if (block) {
        consider(&bs, block, p->costs, INFINITY);
        if (bs.a) limit = fmax(bs.peak, need);
    }
    search(&bs, &pb, p->costs, limit, need, u);
    free(pb.f);
    free(cr);
    if (!bs.a) return sp_error("%s: no schedule within %g activations per rank", name, limit);
    *out = bs.a;
    return SP_OK;
}

int sp_pp_gen_v_half(const sp_pp_params *p, sp_actions **out)
{
    return gen_v_limited("v-half", p, p && p->ranks > 0 ? p->ranks + 2 : 0, 1, out);
}

int sp_pp_gen_v_min(const sp_pp_params *p, sp_actions **out)
{
    return gen_v_limited("v-min", p, p && p->ranks > 0 ? (2 * p->ranks + 2) / 3 + 2 : 0, 0, out);
}

int sp_pp_gen_zb_auto(const sp_pp_params *p, sp_actions **out)
{
    if (base_params("zb-auto", p) != SP_OK) return SP_ERR;
    int v = p->chunks_per_rank ? p->chunks_per_rank : 1, P = p->ranks;
    if (v != 1 && v != 2)
        return sp_error("zb-auto: %d chunks per rank (expected 1, a chunk per rank, or 2, the V)", v);
    int C = v * P;
    int *cr = sp_xmalloc(sizeof(int) * (size_t)C);
    for (int c = 0; c < C; c++) cr[c] = v == 1 ? c : c < P ? c : C - 1 - c;
    problem pb;
    if (setup("zb-auto", p, C, cr, &pb) != SP_OK) {
        free(cr);
        return SP_ERR;
    }
    double u = 0, need = 0;
    for (int c = 0; c < C; c++) u = fmax(u, pb.act[c]);
    for (int r = 0; r < P; r++) need = fmax(need, v == 1 ? pb.act[r] : pb.act[r] + pb.act[C - 1 - r]);
    if (u <= 0) u = 1;
    double limit = p->mem_limit > 0 ? p->mem_limit : INFINITY;
    if (limit < need - 1e-9) {
        free(pb.f);
        free(cr);
        return sp_error("zb-auto: memory limit %g is below one micro-batch's activations on a rank (%g)", limit,
                        need);
    }
    if (search_bound("zb-auto", &pb, 24 + 12 * (search_steps(limit, need, u) - 1) + (limit == INFINITY) * 24 * P) !=
        SP_OK) {
        free(pb.f);
        free(cr);
        return SP_ERR;
    }
    best bs = {0};
    /* The handcrafted schedules of the same placement, where they fit. */
    sp_pp_params q = *p;
    q.mem_limit = 0;
    sp_actions *hand = NULL;
    if ((v == 1 ? sp_pp_gen_zb_h1(&q, &hand) : sp_pp_gen_zbv(&q, &hand)) == SP_OK) consider(&bs, hand, p->costs, limit);
    else sp_clear_error();
    /* [ZB]'s own heuristics (gen_sail.h) at the limit, and without one at the limits below. */
    for (int k = 0; k <= 2 * P; k++) {
        double lim = k == 0 ? limit : k * u * v;
        if (k > 0 && lim > limit) break;
        if (v == 1)
            for (int var = 0; var < SP_SAIL_ZB_VARIANTS; var++)
                consider(&bs, sp_sail_zb(p, lim == INFINITY ? 0 : lim, var), p->costs, limit);
    }
    if (v == 2) {
        for (int var = 0; var < SP_SAIL_ZBV_VARIANTS; var++) consider(&bs, sp_sail_zbv(p, var), p->costs, limit);
        /* The other V schemes, where their peak fits: zb-auto --chunks 2 is never longer
         * than 1f1b-v, v-half or v-min given their peak as the limit. */
        int (*const vgen[])(const sp_pp_params *, sp_actions **) = {sp_pp_gen_1f1b_v, sp_pp_gen_v_half,
                                                                     sp_pp_gen_v_min};
        for (int k = 0; k < 3; k++) {
            hand = NULL;
            if (vgen[k](&q, &hand) == SP_OK) consider(&bs, hand, p->costs, limit);
            else sp_clear_error();
        }
    }
    search(&bs, &pb, p->costs, limit, need, u);
    /* Without a limit, also the limits of 1F1B (p in flight) and ZB-H2 (2p − 1). */
    if (limit == INFINITY)
        for (int k = 1; k <= 2 * P; k++) {
            double lim = fmax(k * u * v, need);
            for (int var = 0; var < 12; var++) {
                policy po = {var % 3, (var / 3) & 1, (var / 6) & 1, lim, 0};
                consider(&bs, greedy(&pb, &po), p->costs, limit);
            }
        }
    free(pb.f);
    free(cr);
    if (!bs.a) return sp_error("zb-auto: no schedule within %g activations per rank", limit);
    *out = bs.a;
    return SP_OK;
}
