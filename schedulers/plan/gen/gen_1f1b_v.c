/* gen_1f1b_v.c — 1f1b-v (gen.h): 1F1B on the V placement (gen_v.h: two chunks per rank,
 * rank r holding chunk r on the way down and chunk 2p − 1 − r on the way back), the
 * backward unsplit.
 *
 * The order is zbv's with each I and its W run together as one B, so nothing is
 * deferred: with n = max(m, 2p − 1) micro-batches (those ≥ m dropped) rank r runs
 *   warm-up 1   2(p − r) − 1 forwards of chunk 0
 *   warm-up 2   r pairs F(chunk 1), F(chunk 0)
 *   warm-up 3   p − r pairs F, B of chunk 1
 *   steady      F(0) while any is left, B(0), F(1), B(1), until every F ran
 *   cool-down   r pairs B(0), B(1), then p − r B(0).
 * A B frees its activations at once, so a rank holds at most what zbv holds at its peak
 * (2p chunk activations, 1F1B's p full-rank ones) and needs no split backward; the
 * bubbles zbv fills with deferred W's stay: with chunk costs F and B, m ≥ p takes
 * 2m(F + B) + 2(p − 1)·max(F, B) — interleaved-1f1b's v = 2 latency when F = B, for any m
 * (tests/test_pipelines.c). */
#include <stdlib.h>
#include "core/error.h"
#include "schedulers/plan/gen/gen_v.h"

static void B(vrank *v, int s)
{
    put(v, s, SP_ACT_B, v->i[s]++);
    v->w[s]++;
}

int sp_pp_gen_1f1b_v(const sp_pp_params *p, sp_actions **out)
{
    if (sp_gen_v_params("1f1b-v", p, 1) != SP_OK) return SP_ERR;
    int P = p->ranks, n = p->micro > 2 * P - 1 ? p->micro : 2 * P - 1;
    sp_actions *a = sp_gen_v_new(P, p->micro);
    vrank *v = sp_xmalloc(sizeof *v);
    for (int r = 0; r < P; r++) {
        *v = (vrank){.a = a, .rank = r, .chunk = {r, 2 * P - 1 - r}};
        for (int k = 0; k < 2 * (P - r) - 1; k++) F(v, 0);
        for (int k = 0; k < r; k++) F(v, 1), F(v, 0);
        for (int k = 0; k < P - r; k++) F(v, 1), B(v, 1);
        while (v->f[1] < v->f[0] || v->f[0] < n) {
            if (v->f[0] < n) F(v, 0);
            B(v, 0), F(v, 1), B(v, 1);
        }
        for (int k = 0; k < r; k++) B(v, 0), B(v, 1);
        for (int k = 0; k < P - r; k++) B(v, 0);
    }
    free(v);
    *out = a;
    return SP_OK;
}
