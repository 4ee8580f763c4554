/* gen_zbv.c — zbv and 1f1b-v (gen.h): [ZB] Qi et al., "Zero Bubble Pipeline Parallelism"
 * (ICLR 2024) §6, ZB-V, and 1F1B on the same V placement (gen_v.h: two chunks per rank,
 * rank r holding chunk r on the way down and chunk 2p − 1 − r on the way back).
 *
 * ZB-V follows the phases PyTorch's ScheduleZBVZeroBubble gives rank r (its counts, with
 * n = max(m, 2p − 1) micro-batches, the ones ≥ m dropped at the end):
 *   warm-up 1   2(p − r) − 1 forwards of chunk 0
 *   warm-up 2   r pairs F(chunk 1), F(chunk 0)
 *   warm-up 3   p − r triples F, I, W of chunk 1
 *   steady      F(0) while any is left, I(0), W(0), F(1), I(1), W(1), until every F ran
 *   cool-down   r pairs I(0), I(1); p − r pairs I(0), W(0); then the deferred W of
 *               chunk 1, then those of chunk 0.
 * Rank r holds 2(p − r) − 1 + 2r + 1 = 2p chunk activations when its first W runs, and
 * from then each F is followed by a W before the next F: a peak of 2p chunk activations,
 * p full-rank ones, 1F1B's (m ≥ 2p − 1; tests/test_actions.c has the closed forms).
 *
 * 1f1b-v is the same order with each I and its W run together as one B (the cool-down's
 * lone I's too), so nothing is deferred and the backward is unsplit. A B frees its
 * activations at once, so a rank holds at most what zbv holds at its peak (2p chunk
 * activations) and needs no split backward; the bubbles zbv fills with deferred W's stay:
 * with chunk costs F and B, m ≥ p takes 2m(F + B) + 2(p − 1)·max(F, B) — interleaved-1f1b's
 * v = 2 latency when F = B, for any m (tests/test_pipelines.c). */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include "core/error.h"
#include "schedulers/plan/gen/gen_sail.h"
#include "schedulers/plan/gen/gen_v.h"

/* The backward of chunk side s: I alone (zbv), or I and W together as B (1f1b-v). */
static void back(vrank *v, int s, bool merged)
{
    if (!merged) {
        I(v, s);
        return;
    }
    put(v, s, SP_ACT_B, v->i[s]++);
    v->w[s]++;
}
/* I then its W at once: I, W (zbv) or B (1f1b-v). */
static void back_w(vrank *v, int s, bool merged)
{
    back(v, s, merged);
    if (!merged) W(v, s);
}

/* The phases above for p->ranks ranks; merged: 1f1b-v's B in place of I and W. */
static sp_actions *v_order(const sp_pp_params *p, bool merged)
{
    int P = p->ranks, n = p->micro > 2 * P - 1 ? p->micro : 2 * P - 1;
    sp_actions *a = sp_gen_v_new(P, p->micro);
    vrank *v = sp_xmalloc(sizeof *v);
    for (int r = 0; r < P; r++) {
        *v = (vrank){.a = a, .rank = r, .chunk = {r, 2 * P - 1 - r}};
        for (int k = 0; k < 2 * (P - r) - 1; k++) F(v, 0);
        for (int k = 0; k < r; k++) F(v, 1), F(v, 0);
        for (int k = 0; k < P - r; k++) F(v, 1), back_w(v, 1, merged);
        while (v->f[1] < v->f[0] || v->f[0] < n) {
            if (v->f[0] < n) F(v, 0);
            back_w(v, 0, merged), F(v, 1), back_w(v, 1, merged);
        }
        for (int k = 0; k < r; k++) back(v, 0, merged), back(v, 1, merged);
        for (int k = 0; k < P - r; k++) back_w(v, 0, merged);
        while (v->w[1] < v->i[1]) W(v, 1);   /* the deferred W's (none when merged) */
        while (v->w[0] < v->i[0]) W(v, 0);
    }
    free(v);
    return a;
}

int sp_pp_gen_1f1b_v(const sp_pp_params *p, sp_actions **out)
{
    if (sp_gen_v_params("1f1b-v", p, 1) != SP_OK) return SP_ERR;
    *out = v_order(p, true);
    return SP_OK;
}

int sp_pp_gen_zbv(const sp_pp_params *p, sp_actions **out)
{
    if (sp_gen_v_params("zbv", p, 1) != SP_OK) return SP_ERR;
    int P = p->ranks;
    sp_actions *a = v_order(p, false);
    /* [ZB]'s own ZB-V heuristic (gen_sail.h) at 2p chunk activations replaces the order
     * above where it is strictly shorter: it fills the V for m < 2p − 1 and weighs the
     * transfer cost. */
    double u = 1;
    for (int c = 0; p->costs && p->costs->act && c < 2 * P; c++) u = c ? fmax(u, p->costs->act[c]) : p->costs->act[c];
    sp_gen_best bs = {0};
    sp_gen_pick(&bs, a, p->costs, INFINITY, 0);
    if (!bs.a) return sp_error("zbv: the list cannot run");
    double limit = fmax(bs.peak, 2 * P * u);
    for (int k = 0; k < SP_SAIL_ZBV_VARIANTS; k++) sp_gen_pick(&bs, sp_sail_zbv(p, k), p->costs, limit, 0);
    *out = bs.a;
    return SP_OK;
}
