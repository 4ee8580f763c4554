/* gen_1f1b_strict.c — 1f1b-strict (gen.h): PipeDream-Flush's 1F1B as a fixed per-rank
 * action list, one chunk per rank (p ranks, m micro-batches). The rule-based 1f1b of
 * rules_pipeline.c reaches the same order through the greedy simulator; schemes.c says
 * why both exist. docs/SCHEDULES.md draws it. */
#include <stdlib.h>
#include "schedulers/plan/gen.h"

/* Strict 1F1B (PipeDream-Flush): rank r runs min(p−r−1, m) warm-up forwards, then one
 * forward and one whole backward (B) in turn, then the remaining backwards. */
int sp_pp_gen_1f1b_strict(const sp_pp_params *p, sp_actions **out)
{
    if (sp_gen_check_pm("1f1b-strict", p) != SP_OK) return SP_ERR;
    int P = p->ranks, m = p->micro;
    sp_actions *a = sp_actions_new(P, P, m, 2 * P * m);
    for (int r = 0; r < P; r++) {
        int warm = P - r - 1 < m ? P - r - 1 : m, nf = 0, nb = 0;
        while (nf < warm) sp_actions_push(a, r, sp_gen_act(r, SP_ACT_F, nf++));
        while (nf < m) {
            sp_actions_push(a, r, sp_gen_act(r, SP_ACT_F, nf++));
            sp_actions_push(a, r, sp_gen_act(r, SP_ACT_B, nb++));
        }
        while (nb < m) sp_actions_push(a, r, sp_gen_act(r, SP_ACT_B, nb++));
    }
    *out = a;
    return SP_OK;
}
