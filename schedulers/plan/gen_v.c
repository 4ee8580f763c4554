/* gen_v.c — the fixed V-shaped schedules: ZB-V and DualPipeV (gen.h).
 *
 * V placement: 2p chunks on p ranks, chunk c on rank c for c < p and on rank 2p − 1 − c
 * otherwise, so rank r holds chunk r (the way down, "chunk 0" of the rank) and chunk
 * 2p − 1 − r (the way back up, "chunk 1"); rank 0 holds the first and the last chunk, and
 * rank p − 1 passes chunk p − 1's output to chunk p without a transfer.
 *
 * [ZB]  Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, §6 (ZB-V).
 * [DS]  DeepSeek-AI, DualPipe, dualpipev.py (the "cut-in-half" DualPipe, DualPipeV).
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
 * DualPipeV follows dualpipev.py's eight steps for rank r (m ≥ 2p micro-batches):
 *   1  2(p − r − 1) × F0                   5  (p − r − 1) × B1, (F1 & B0)
 *   2  (r + 1) × F0, F1                    6  (r + 1) × B1, B0 (the second half split
 *   3  (p − r − 1) × I1, W, F1                into I with its W deferred)
 *   4  (m − 2p + r + 1) × (F0 & B1), (F1 & B0)        7  (p − r − 1) × W, I0
 *                                                      8  (r + 1) × W
 * where "(F & B)" is dualpipev.py's overlapped forward-backward: one chunk's forward and
 * the other chunk's full backward run together on two streams there. scanprop runs one
 * job at a time per rank, so a pair is the two actions back to back (F first), and its
 * overlap gain is not modelled: the simulated latency is an upper bound on DualPipeV's.
 * The deferred W's are taken first in, first out (dualpipev.py's WeightGradStore queue). */
#include <stdlib.h>
#include "core/error.h"
#include "schedulers/plan/actions.h"
#include "schedulers/plan/gen.h"

/* Shared by the V generators: p ≥ 1, m ≥ 1, costs (if any) for 2p chunks. */
static int v_params(const char *name, const sp_pp_params *p, int min_micro)
{
    if (!p) return sp_error("%s: NULL parameters", name);
    if (p->ranks < 1) return sp_error("%s: %d ranks (expected at least 1)", name, p->ranks);
    if (p->micro < min_micro)
        return sp_error("%s: %d micro-batches on %d ranks (expected at least %d)", name, p->micro, p->ranks,
                        min_micro);
    if (p->chunks_per_rank != 0 && p->chunks_per_rank != 2)
        return sp_error("%s: %d chunks per rank (a V holds exactly 2)", name, p->chunks_per_rank);
    if (p->costs && p->costs->chunks != 2 * p->ranks)
        return sp_error("%s: costs for %d chunks (expected 2 × %d ranks = %d)", name, p->costs->chunks, p->ranks,
                        2 * p->ranks);
    return SP_OK;
}

static sp_actions *v_new(int ranks, int micro)
{
    sp_actions *a = sp_actions_new(ranks, 2 * ranks, micro, 6 * ranks * micro);
    for (int c = 0; c < 2 * ranks; c++) a->chunk_rank[c] = c < ranks ? c : 2 * ranks - 1 - c;
    return a;
}

/* One rank's list under construction: its two chunks and the next micro-batch of each
 * kind per chunk (index 0 = the rank's chunk on the way down, 1 = on the way back). */
typedef struct vrank {
    sp_actions *a;
    int rank, chunk[2], f[2], i[2], w[2];
    int *wq, wq_head, wq_tail; /* DualPipeV's deferred W's, pairs (side, micro): ≤ 2p */
} vrank;

static void put(vrank *v, int side, sp_act_type t, int micro)
{
    /* ZB-V pads to 2p − 1 micro-batches; the padding is dropped here. */
    if (micro < v->a->micro) sp_actions_push(v->a, v->rank, (sp_action){v->chunk[side], micro, t});
}

static void F(vrank *v, int s) { put(v, s, SP_ACT_F, v->f[s]++); }
static void I(vrank *v, int s) { put(v, s, SP_ACT_I, v->i[s]++); }
static void W(vrank *v, int s) { put(v, s, SP_ACT_W, v->w[s]++); }

int sp_pp_gen_zbv(const sp_pp_params *p, sp_actions **out)
{
    if (v_params("zbv", p, 1) != SP_OK) return SP_ERR;
    int P = p->ranks, n = p->micro > 2 * P - 1 ? p->micro : 2 * P - 1;
    sp_actions *a = v_new(P, p->micro);
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
    *out = a;
    return SP_OK;
}

/* DualPipeV's backward of one side: the full B, or (zb) I now and W queued. */
static void dp_back(vrank *v, int s, int zb)
{
    if (!zb) {
        put(v, s, SP_ACT_B, v->i[s]++);
        v->w[s]++;
        return;
    }
    v->wq[v->wq_tail++] = s;
    v->wq[v->wq_tail++] = v->i[s];
    I(v, s);
}

static void dp_weight(vrank *v)
{
    int s = v->wq[v->wq_head++], micro = v->wq[v->wq_head++];
    put(v, s, SP_ACT_W, micro);
}

int sp_pp_gen_dualpipev(const sp_pp_params *p, sp_actions **out)
{
    if (!p || p->ranks < 1) return v_params("dualpipev", p, 1);
    if (v_params("dualpipev", p, 2 * p->ranks) != SP_OK) return SP_ERR;
    int P = p->ranks, m = p->micro;
    sp_actions *a = v_new(P, m);
    vrank *v = sp_xmalloc(sizeof *v);
    /* Steps 3, 6 and 7 defer p − r − 1, r + 1 and p − r − 1 W's: fewer than 2p at once. */
    int *wq = sp_xmalloc(sizeof(int) * 2 * (size_t)(2 * P + 1));
    for (int r = 0; r < P; r++) {
        *v = (vrank){.a = a, .rank = r, .chunk = {r, 2 * P - 1 - r}, .wq = wq};
        for (int k = 0; k < 2 * (P - r - 1); k++) F(v, 0);                       /* 1 */
        for (int k = 0; k < r + 1; k++) F(v, 0), F(v, 1);                        /* 2 */
        for (int k = 0; k < P - r - 1; k++) dp_back(v, 1, 1), dp_weight(v), F(v, 1); /* 3 */
        for (int k = 0; k < m - 2 * P + r + 1; k++) {                            /* 4 */
            F(v, 0), dp_back(v, 1, 0);
            F(v, 1), dp_back(v, 0, 0);
        }
        for (int k = 0; k < P - r - 1; k++) dp_back(v, 1, 0), F(v, 1), dp_back(v, 0, 0); /* 5 */
        int zb = 0, half = (r + 1) / 2;                                          /* 6 */
        for (int k = 0; k < r + 1; k++) {
            if (k == half && r % 2 == 1) zb = 1;
            dp_back(v, 1, zb);
            if (k == half && r % 2 == 0) zb = 1;
            dp_back(v, 0, zb);
        }
        for (int k = 0; k < P - r - 1; k++) dp_weight(v), dp_back(v, 0, 1);      /* 7 */
        for (int k = 0; k < r + 1; k++) dp_weight(v);                            /* 8 */
    }
    free(wq);
    free(v);
    *out = a;
    return SP_OK;
}
