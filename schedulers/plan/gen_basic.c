/* gen_basic.c — the pipeline generators with one fixed rule each (gen.h): strict 1F1B,
 * the zero-bubble handcrafted schedules ZB-H1 and ZB-H2 ([ZB] Qi et al., ICLR 2024),
 * Megatron's interleaved 1F1B and PyTorch's looped BFS. Each returns per-rank action
 * lists (actions.h) that the simulator and the MPI executor run in exactly this order;
 * docs/SCHEDULES.md draws them and derives their latencies.
 *
 * Notation: p ranks, m micro-batches, v chunks per rank; rank r holds chunk r (one chunk
 * per rank) or chunks r, r + p, …, r + (v−1)p (interleaved, looped). */
#include "schedulers/plan/gen.h"
#include <stdbool.h>
#include <stdlib.h>

static sp_action act(int chunk, sp_act_type t, int micro) { return (sp_action){chunk, micro, t}; }

static int check_pm(const char *name, const sp_pp_params *p)
{
    if (!p) return sp_error("%s: NULL parameters", name);
    if (p->ranks < 1) return sp_error("%s: %d ranks (expected >= 1)", name, p->ranks);
    if (p->micro < 1) return sp_error("%s: %d micro-batches (expected >= 1)", name, p->micro);
    if ((long)p->ranks * p->micro > 10000000L)
        return sp_error("%s: %d ranks x %d micro-batches is too large", name, p->ranks, p->micro);
    return SP_OK;
}

static int chunks_per_rank(const char *name, const sp_pp_params *p, int *v)
{
    *v = p->chunks_per_rank > 0 ? p->chunks_per_rank : 2;
    if (*v > 1000) return sp_error("%s: --chunks %d per rank (expected <= 1000)", name, *v);
    return SP_OK;
}

/* Strict 1F1B (PipeDream-Flush): rank r runs min(p−r−1, m) warm-up forwards, then one
 * forward and one whole backward (B) in turn, then the remaining backwards. */
int sp_pp_gen_1f1b_strict(const sp_pp_params *p, sp_actions **out)
{
    if (check_pm("1f1b-strict", p) != SP_OK) return SP_ERR;
    int P = p->ranks, m = p->micro;
    sp_actions *a = sp_actions_new(P, P, m, 2 * P * m);
    for (int r = 0; r < P; r++) {
        int warm = P - r - 1 < m ? P - r - 1 : m, nf = 0, nb = 0;
        while (nf < warm) sp_actions_push(a, r, act(r, SP_ACT_F, nf++));
        while (nf < m) {
            sp_actions_push(a, r, act(r, SP_ACT_F, nf++));
            sp_actions_push(a, r, act(r, SP_ACT_B, nb++));
        }
        while (nb < m) sp_actions_push(a, r, act(r, SP_ACT_B, nb++));
    }
    *out = a;
    return SP_OK;
}

/* The zero-bubble handcrafted schedules share one rule: rank r runs `warm` forwards,
 * then for i = 0 … m−1: I(i), W(i − r) once i ≥ r, and the next forward if one is
 * left; the r deferred W close the list. Deferring r weight gradients on rank r is what
 * lets each I leave for rank r−1 one W earlier than 1F1B's B would: the backward wave
 * climbs the pipeline at I per rank instead of I + W. ZB-H1 keeps 1F1B's warm-up
 * (p − r), so rank r holds at most p − r + r = p activations, 1F1B's peak; ZB-H2 warms
 * up with 2(p − r) − 1 forwards (2p − 1 on rank 0), which fills the start of the last
 * ranks' bubbles with forwards (docs/SCHEDULES.md: when W ≥ I it reaches the lower
 * bound (p−1)F + m(F+I+W)). */
static int zero_bubble(const char *name, const sp_pp_params *p, bool h2, sp_actions **out)
{
    if (check_pm(name, p) != SP_OK) return SP_ERR;
    int P = p->ranks, m = p->micro;
    sp_actions *a = sp_actions_new(P, P, m, 3 * P * m);
    for (int r = 0; r < P; r++) {
        int warm = h2 ? 2 * (P - r) - 1 : P - r, nf = 0, nw = 0;
        if (warm > m) warm = m;
        while (nf < warm) sp_actions_push(a, r, act(r, SP_ACT_F, nf++));
        for (int i = 0; i < m; i++) {
            sp_actions_push(a, r, act(r, SP_ACT_I, i));
            if (i >= r) sp_actions_push(a, r, act(r, SP_ACT_W, nw++));
            if (nf < m) sp_actions_push(a, r, act(r, SP_ACT_F, nf++));
        }
        while (nw < m) sp_actions_push(a, r, act(r, SP_ACT_W, nw++));
    }
    *out = a;
    return SP_OK;
}

int sp_pp_gen_zb_h1(const sp_pp_params *p, sp_actions **out) { return zero_bubble("zb-h1", p, false, out); }
int sp_pp_gen_zb_h2(const sp_pp_params *p, sp_actions **out) { return zero_bubble("zb-h2", p, true, out); }

/* Megatron's interleaved 1F1B: the k-th forward of rank r (k = 0 … v·m−1) is local chunk
 * (k mod pv) / p on micro-batch (k / pv)·p + k mod p — p micro-batches through one
 * chunk, then the same p through the next; the k-th backward walks the chunks in
 * reverse. Warm-up: 2(p − r − 1) + (v − 1)p forwards, then one forward one backward. */
static void interleaved_pos(int P, int v, int r, int k, bool backward, int *chunk, int *micro)
{
    int g = k % (P * v), local = g / P;
    if (backward) local = v - 1 - local;
    *chunk = local * P + r;
    *micro = (k / (P * v)) * P + k % P;
}

int sp_pp_gen_interleaved_1f1b(const sp_pp_params *p, sp_actions **out)
{
    int v;
    if (check_pm("interleaved-1f1b", p) != SP_OK || chunks_per_rank("interleaved-1f1b", p, &v) != SP_OK)
        return SP_ERR;
    int P = p->ranks, m = p->micro;
    if (m % P != 0)
        return sp_error("interleaved-1f1b: %d micro-batches on %d ranks (expected a multiple of %d)", m, P, P);
    long total = (long)v * m;
    if ((long)P * total * 2 > 100000000L)
        return sp_error("interleaved-1f1b: %d ranks x %d chunks x %d micro-batches is too large", P, v, m);
    sp_actions *a = sp_actions_new(P, P * v, m, (int)(2 * P * total));
    for (int r = 0; r < P; r++) {
        long warm = 2L * (P - r - 1) + (long)(v - 1) * P, k;
        if (warm > total) warm = total;
        int c, b;
        for (k = 0; k < warm; k++) {
            interleaved_pos(P, v, r, (int)k, false, &c, &b);
            sp_actions_push(a, r, act(c, SP_ACT_F, b));
        }
        for (long i = 0; i < total - warm; i++) {
            interleaved_pos(P, v, r, (int)(warm + i), false, &c, &b);
            sp_actions_push(a, r, act(c, SP_ACT_F, b));
            interleaved_pos(P, v, r, (int)i, true, &c, &b);
            sp_actions_push(a, r, act(c, SP_ACT_B, b));
        }
        for (k = total - warm; k < total; k++) {
            interleaved_pos(P, v, r, (int)k, true, &c, &b);
            sp_actions_push(a, r, act(c, SP_ACT_B, b));
        }
    }
    *out = a;
    return SP_OK;
}

/* PyTorch's ScheduleLoopedBFS: rank r's chunks r, r + p, …; every forward of a chunk,
 * chunk after chunk, then the backwards, chunks in reverse and the micro-batches last
 * to first (the last forward's backward is the first ready). */
int sp_pp_gen_looped_bfs(const sp_pp_params *p, sp_actions **out)
{
    int v;
    if (check_pm("looped-bfs", p) != SP_OK || chunks_per_rank("looped-bfs", p, &v) != SP_OK) return SP_ERR;
    int P = p->ranks, m = p->micro;
    if ((long)P * v * m * 2 > 100000000L)
        return sp_error("looped-bfs: %d ranks x %d chunks x %d micro-batches is too large", P, v, m);
    sp_actions *a = sp_actions_new(P, P * v, m, 2 * P * v * m);
    for (int r = 0; r < P; r++) {
        for (int j = 0; j < v; j++)
            for (int b = 0; b < m; b++) sp_actions_push(a, r, act(j * P + r, SP_ACT_F, b));
        for (int j = v - 1; j >= 0; j--)
            for (int b = m - 1; b >= 0; b--) sp_actions_push(a, r, act(j * P + r, SP_ACT_B, b));
    }
    *out = a;
    return SP_OK;
}
