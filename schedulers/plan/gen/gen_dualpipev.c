/* gen_dualpipev.c — dualpipev (gen.h): DeepSeek-AI's DualPipe "cut in half", DualPipeV
 * (the dualpipev.py of the DualPipe repository), on the V placement (gen.h: two chunks
 * per rank).
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
#include "schedulers/plan/gen/gen_v.h"

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
    if (!p || p->ranks < 1) return sp_gen_v_params("dualpipev", p, 1);
    if (sp_gen_v_params("dualpipev", p, 2 * p->ranks) != SP_OK) return SP_ERR;
    int P = p->ranks, m = p->micro;
    sp_actions *a = sp_gen_v_new(P, m);
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
