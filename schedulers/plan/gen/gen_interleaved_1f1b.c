/* gen_interleaved_1f1b.c — interleaved-1f1b (gen.h): Megatron's interleaved 1F1B ("virtual
 * stages"), v chunks per rank (--chunks, default 2): rank r holds chunks r, r + p, …,
 * r + (v−1)p of p ranks; m micro-batches, a multiple of p. */
#include <stdbool.h>
#include <stdlib.h>
#include "schedulers/plan/gen.h"

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
    if (sp_gen_check_pm("interleaved-1f1b", p) != SP_OK || sp_gen_chunks_per_rank("interleaved-1f1b", p, &v) != SP_OK)
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
            sp_actions_push(a, r, sp_gen_act(c, SP_ACT_F, b));
        }
        for (long i = 0; i < total - warm; i++) {
            interleaved_pos(P, v, r, (int)(warm + i), false, &c, &b);
            sp_actions_push(a, r, sp_gen_act(c, SP_ACT_F, b));
            interleaved_pos(P, v, r, (int)i, true, &c, &b);
            sp_actions_push(a, r, sp_gen_act(c, SP_ACT_B, b));
        }
        for (k = total - warm; k < total; k++) {
            interleaved_pos(P, v, r, (int)k, true, &c, &b);
            sp_actions_push(a, r, sp_gen_act(c, SP_ACT_B, b));
        }
    }
    *out = a;
    return SP_OK;
}
