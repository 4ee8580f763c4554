/* gen_interleaved_1f1b.c — interleaved-1f1b (gen.h): Megatron's interleaved 1F1B ("virtual
 * stages") in PyTorch's ScheduleInterleaved1F1B form, v chunks per rank (--chunks,
 * default 2): rank r holds chunks r, r + p, …, r + (v−1)p of p ranks; any m ≥ 1
 * micro-batches, in the rounds of gen.h (sp_gen_rounds). */
#include <stdlib.h>
#include "schedulers/plan/gen.h"

/* Rank r's k-th forward is local chunk sp_gen_rounds_local(k), its k-th backward the
 * mirror; each chunk takes its micro-batches in order. Warm-up: (v − 1)·g₀ + 2(p − r − 1)
 * forwards (g₀ the first round's size; at most v·m), then one forward one backward, then
 * the remaining backwards. With p dividing m the rounds are p micro-batches each:
 * Megatron's order. */
int sp_pp_gen_interleaved_1f1b(const sp_pp_params *p, sp_actions **out)
{
    int v;
    if (sp_gen_check_pm("interleaved-1f1b", p) != SP_OK || sp_gen_chunks_per_rank("interleaved-1f1b", p, &v) != SP_OK)
        return SP_ERR;
    int P = p->ranks, m = p->micro;
    long total = (long)v * m;
    if ((long)P * total * 2 > 100000000L)
        return sp_error("interleaved-1f1b: %d ranks x %d chunks x %d micro-batches is too large", P, v, m);
    sp_gen_rounds R = sp_gen_rounds_of(P, m, v);
    sp_actions *a = sp_actions_new(P, P * v, m, (int)(2 * P * total));
    int *nf = calloc((size_t)v, sizeof *nf), *nb = calloc((size_t)v, sizeof *nb);
    if (!nf || !nb) sp_fail("interleaved-1f1b: out of memory");
    for (int r = 0; r < P; r++) {
        long warm = (long)(v - 1) * (R.base + (R.rem > 0)) + 2L * (P - r - 1), kf = 0, kb = 0;
        if (warm > total) warm = total;
        for (int j = 0; j < v; j++) nf[j] = nb[j] = 0;
        while (kb < total) {
            if (kf < total && (kf < warm || kf - warm <= kb)) {
                int j = sp_gen_rounds_local(&R, kf++);
                sp_actions_push(a, r, sp_gen_act(j * P + r, SP_ACT_F, nf[j]++));
                if (kf <= warm) continue;
            }
            int j = v - 1 - sp_gen_rounds_local(&R, kb++);
            sp_actions_push(a, r, sp_gen_act(j * P + r, SP_ACT_B, nb[j]++));
        }
    }
    free(nf);
    free(nb);
    *out = a;
    return SP_OK;
}
