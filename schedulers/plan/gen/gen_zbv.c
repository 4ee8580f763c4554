/* gen_zbv.c — zbv (gen.h): [ZB] Qi et al., "Zero Bubble Pipeline Parallelism" (ICLR
 * 2024) §6, ZB-V, on the V placement (gen.h: two chunks per rank).
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
 * p full-rank ones, 1F1B's (m ≥ 2p − 1; tests/test_actions.c has the closed forms). */
#include <math.h>
#include <stdlib.h>
#include "core/error.h"
#include "schedulers/plan/gen/gen_sail.h"
#include "schedulers/plan/gen/gen_v.h"

int sp_pp_gen_zbv(const sp_pp_params *p, sp_actions **out)
{
    if (sp_gen_v_params("zbv", p, 1) != SP_OK) return SP_ERR;
    int P = p->ranks, n = p->micro > 2 * P - 1 ? p->micro : 2 * P - 1;
    sp_actions *a = sp_gen_v_new(P, p->micro);
    vrank *v = sp_xmalloc(sizeof *v);
    for (int r = 0; r < P; r++) {
        *v = (vrank){.a = a, .rank = r, .chunk = {r, 2 * P - 1 - r}};
        for (int k = 0; k < 2 * (P - r) - 1; k++) F(v, 0);
        for (int k = 0; k < r; k++) F(v, 1), F(v, 0);
        for (int k = 0; k < P - r; k++) F(v, 1), I(v, 1), W(v, 1);
        while (v->f[1] < v->f[0] || v->f[0] < n) {
            if (v->f[0] < n) F(v, 0);
            I(v, 0), W(v, 0), F(v, 1), I(v, 1), W(v, 1);
        }
        for (int k = 0; k < r; k++) I(v, 0), I(v, 1);
        for (int k = 0; k < P - r; k++) I(v, 0), W(v, 0);
        while (v->w[1] < v->i[1]) W(v, 1);
        while (v->w[0] < v->i[0]) W(v, 0);
    }
    free(v);
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
