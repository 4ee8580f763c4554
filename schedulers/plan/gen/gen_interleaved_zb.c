/* gen_interleaved_zb.c — interleaved-zb (gen.h): PyTorch's ScheduleInterleavedZeroBubble,
 * the ZB1P schedule of [ZB] on interleaved-1f1b's placement: v chunks per rank (--chunks,
 * default 2), rank r holding chunks r, r + p, …; any m ≥ 1 micro-batches in the rounds
 * of gen.h (sp_gen_rounds). */
#include <stdlib.h>
#include "schedulers/plan/gen.h"

/* interleaved-1f1b's order with the backward split: warm-up (v − 1)·g₀ + (p − r − 1)
 * forwards (one per hop, not two: the I's come back sooner than B's), then one forward
 * one I; from rank r's (r + 1)-th I on each I is followed by the W of the oldest I still
 * without one, so r W's are held back to fill the cool-down; they run after the last I. */
int sp_pp_gen_interleaved_zb(const sp_pp_params *p, sp_actions **out)
{
    int v;
    if (sp_gen_check_pm("interleaved-zb", p) != SP_OK || sp_gen_chunks_per_rank("interleaved-zb", p, &v) != SP_OK)
        return SP_ERR;
    int P = p->ranks, m = p->micro;
    long total = (long)v * m;
    if ((long)P * total * 3 > 100000000L)
        return sp_error("interleaved-zb: %d ranks x %d chunks x %d micro-batches is too large", P, v, m);
    sp_gen_rounds R = sp_gen_rounds_of(P, m, v);
    sp_actions *a = sp_actions_new(P, P * v, m, (int)(3 * P * total));
    int *nf = calloc((size_t)v, sizeof *nf), *ni = calloc((size_t)v, sizeof *ni), *nw = calloc((size_t)v, sizeof *nw);
    int *iq = malloc(sizeof *iq * (size_t)total);   /* the local chunk of each I, in order */
    if (!nf || !ni || !nw || !iq) sp_fail("interleaved-zb: out of memory");
    for (int r = 0; r < P; r++) {
        long warm = (long)(v - 1) * (R.base + (R.rem > 0)) + (P - r - 1), kf = 0, kb = 0, kw = 0;
        if (warm > total) warm = total;
        for (int j = 0; j < v; j++) nf[j] = ni[j] = nw[j] = 0;
        while (kb < total) {
            if (kf < total && (kf < warm || kf - warm <= kb)) {
                int j = sp_gen_rounds_local(&R, kf++);
                sp_actions_push(a, r, sp_gen_act(j * P + r, SP_ACT_F, nf[j]++));
                if (kf <= warm) continue;
            }
            int j = v - 1 - sp_gen_rounds_local(&R, kb);
            iq[kb++] = j;
            sp_actions_push(a, r, sp_gen_act(j * P + r, SP_ACT_I, ni[j]++));
            if (kb > r) {
                j = iq[kw++];
                sp_actions_push(a, r, sp_gen_act(j * P + r, SP_ACT_W, nw[j]++));
            }
        }
        while (kw < total) {
            int j = iq[kw++];
            sp_actions_push(a, r, sp_gen_act(j * P + r, SP_ACT_W, nw[j]++));
        }
    }
    free(nf);
    free(ni);
    free(nw);
    free(iq);
    *out = a;
    return SP_OK;
}
