/* gen_sail.h — the list heuristics of the zero-bubble papers' own code, rebuilt here as
 * candidates for zb-h1, zb-h2, zb-auto, zbv, v-half and v-min (private to
 * schedulers/plan/; gen_sail.c).
 *
 * Each returns an action list, or NULL when that variant cannot place every action (a
 * memory bound too small for it, a pattern that does not fit the parameters); memory
 * is counted as the simulator counts it (F holds a chunk activation until its W). The
 * callers keep the shortest candidate whose peak fits their bound (sp_gen_pick), so a
 * scheme that takes these is never longer than the heuristic it rebuilds at that bound. */
#ifndef SP_PLAN_GEN_SAIL_H
#define SP_PLAN_GEN_SAIL_H

#include "schedulers/plan/gen.h"

/* [ZB]'s heuristic for one chunk per rank (zb.py's manual order): warm-up forwards
 * sized to the first backward's return, then one F and one I per rank and step, W's
 * into the gaps and whenever memory is short. variant 0..7 (its three switches);
 * max_mem in chunk activations per rank (≤ 0: 3m, i.e. none). */
sp_actions *sp_sail_zb(const sp_pp_params *p, double max_mem, int variant);
#define SP_SAIL_ZB_VARIANTS 8

/* [ZB]'s ZB-V heuristic (zbv.py): the V placement at 2p chunk activations per rank,
 * transfer-aware, the V filled for any m; variant 0..3 (fill before F, before I). */
sp_actions *sp_sail_zbv(const sp_pp_params *p, int variant);
#define SP_SAIL_ZBV_VARIANTS 4

/* [CM]'s V-Half (half = 1) and V-Min (half = 0) (zbv_greedy.py): a repeated building
 * block of period 6 per micro-batch, squeezed, W's into its gaps. */
sp_actions *sp_sail_vpattern(const sp_pp_params *p, int half);

/* The candidate kept so far: shortest within `limit` (peak, chunk activations per rank);
 * equal latencies go to the smaller peak when `ties`, else to the one kept first.
 * sp_gen_pick takes cand (frees it or the loser); a NULL cand, or one that cannot run,
 * is ignored. */
typedef struct sp_gen_best {
    sp_actions *a;
    double latency, peak;
} sp_gen_best;
void sp_gen_pick(sp_gen_best *bs, sp_actions *cand, const sp_chunk_costs *costs, double limit, int ties);

#endif
