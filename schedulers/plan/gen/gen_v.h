/* gen_v.h — the V placement that zbv, dualpipev (and v-half, v-min, zb-auto's two-chunk
 * form) share (private to schedulers/plan/).
 *
 * V placement: 2p chunks on p ranks, chunk c on rank c for c < p and on rank 2p − 1 − c
 * otherwise, so rank r holds chunk r (the way down, "chunk 0" of the rank) and chunk
 * 2p − 1 − r (the way back up, "chunk 1"); rank 0 holds the first and the last chunk, and
 * rank p − 1 passes chunk p − 1's output to chunk p without a transfer. */
#ifndef SP_PLAN_GEN_V_H
#define SP_PLAN_GEN_V_H

#include "schedulers/plan/gen.h"

/* p ≥ 1, m ≥ min_micro, at most 2 chunks per rank, costs (if any) for 2p chunks; SP_ERR
 * naming the scheme otherwise (gen_common.c). */
int sp_gen_v_params(const char *name, const sp_pp_params *p, int min_micro) SP_MUST_CHECK;
/* An empty list of 2p chunks on p ranks in the V (gen_common.c). */
sp_actions *sp_gen_v_new(int ranks, int micro);

/* One rank's list under construction: its two chunks and the next micro-batch of each
 * kind per chunk (index 0 = the rank's chunk on the way down, 1 = on the way back). */
typedef struct vrank {
    sp_actions *a;
    int rank, chunk[2], f[2], i[2], w[2];
    int *wq, wq_head, wq_tail; /* DualPipeV's deferred W's, pairs (side, micro): ≤ 2p */
} vrank;

static inline void put(vrank *v, int side, sp_act_type t, int micro)
{
    /* ZB-V pads to 2p − 1 micro-batches; the padding is dropped here. */
    if (micro < v->a->micro) sp_actions_push(v->a, v->rank, (sp_action){v->chunk[side], micro, t});
}

static inline void F(vrank *v, int s) { put(v, s, SP_ACT_F, v->f[s]++); }
static inline void I(vrank *v, int s) { put(v, s, SP_ACT_I, v->i[s]++); }
static inline void W(vrank *v, int s) { put(v, s, SP_ACT_W, v->w[s]++); }

#endif
