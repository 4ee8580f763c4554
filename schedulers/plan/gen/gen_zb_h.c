/* gen_zb_h.c — zb-h1 and zb-h2 (gen.h): the handcrafted schedules of [ZB] Qi et al.,
 * "Zero Bubble Pipeline Parallelism" (ICLR 2024), one rule with two warm-ups; one chunk
 * per rank (p ranks, m micro-batches). docs/SCHEDULES.md gives their latencies,
 * docs/MEASUREMENTS.md derives them. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include "schedulers/plan/gen.h"
#include "schedulers/plan/gen/gen_sail.h"

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
    if (sp_gen_check_pm(name, p) != SP_OK) return SP_ERR;
    int P = p->ranks, m = p->micro;
    sp_actions *a = sp_actions_new(P, P, m, 3 * P * m);
    for (int r = 0; r < P; r++) {
        int warm = h2 ? 2 * (P - r) - 1 : P - r, nf = 0, nw = 0;
        if (warm > m) warm = m;
        while (nf < warm) sp_actions_push(a, r, sp_gen_act(r, SP_ACT_F, nf++));
        for (int i = 0; i < m; i++) {
            sp_actions_push(a, r, sp_gen_act(r, SP_ACT_I, i));
            if (i >= r) sp_actions_push(a, r, sp_gen_act(r, SP_ACT_W, nw++));
            if (nf < m) sp_actions_push(a, r, sp_gen_act(r, SP_ACT_F, nf++));
        }
        while (nw < m) sp_actions_push(a, r, sp_gen_act(r, SP_ACT_W, nw++));
    }
    /* The rule ignores the costs; [ZB]'s own heuristic (gen_sail.h) replaces it where
     * that is strictly shorter (uneven costs, a transfer cost) within the rule's peak for
     * H1, within 2p chunk activations ([ZB]'s memory for H2) for H2. */
    sp_gen_best bs = {0};
    sp_gen_pick(&bs, a, p->costs, INFINITY, 0);
    if (!bs.a) return sp_error("%s: the list cannot run", name);
    double u = 1;
    for (int c = 0; p->costs && p->costs->act && c < P; c++) u = c ? fmax(u, p->costs->act[c]) : p->costs->act[c];
    double limit = h2 ? fmax(bs.peak, 2 * P * u) : bs.peak;
    for (int v = 0; v < SP_SAIL_ZB_VARIANTS; v++) sp_gen_pick(&bs, sp_sail_zb(p, limit, v), p->costs, limit, 0);
    *out = bs.a;
    return SP_OK;
}

int sp_pp_gen_zb_h1(const sp_pp_params *p, sp_actions **out) { return zero_bubble("zb-h1", p, false, out); }
int sp_pp_gen_zb_h2(const sp_pp_params *p, sp_actions **out) { return zero_bubble("zb-h2", p, true, out); }
