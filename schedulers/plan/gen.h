/* gen.h — the pipeline-schedule generators behind the scheme registry (schemes.c), private
 * to schedulers/plan/.
 *
 * Each builds the per-rank action lists (actions.h) of one named scheme from sp_pp_params
 * and returns SP_OK with *out set, or SP_ERR with one line (sp_last_error) naming the
 * scheme and the parameter that does not fit; nothing is allocated on error. One file per
 * generator, or per family sharing a core:
 *
 *   1f1b-strict          gen_1f1b_strict.c       PipeDream-Flush with a fixed order
 *   zb-h1, zb-h2         gen_zb_h.c              [ZB]'s handcrafted H1 and H2 (one rule)
 *   interleaved-1f1b     gen_interleaved_1f1b.c  Megatron's virtual stages, v chunks per rank
 *   interleaved-zb       gen_interleaved_zb.c    PyTorch ScheduleInterleavedZeroBubble (ZB1P)
 *   looped-bfs           gen_looped_bfs.c        PyTorch ScheduleLoopedBFS
 *   zbv, 1f1b-v          gen_zbv.c               [ZB]'s ZB-V on the V placement (gen_v.h), and
 *                                                1F1B there: its order with I and W as one B
 *   dualpipev            gen_dualpipev.c         DeepSeek's DualPipeV on the V placement
 *   zb-auto, v-half,     gen_greedy.c            [ZB]'s greedy list scheduler, and [CM]'s
 *   v-min                                        V-Half and V-Min built with it
 *   (candidates)         gen_sail.c, gen_sail.h  the papers' own heuristics (zb.py, zbv.py,
 *                                                zbv_greedy.py), which zb-h1, zb-h2, zbv,
 *                                                v-half, v-min and zb-auto keep where shorter
 *
 * gen_common.c holds what they share: the parameter checks below, the interleaved rounds and
 * the V placement.
 * A new generator: its file, its declaration here, its row in schemes.c.
 *
 * [ZB] Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024.
 * [CM] Qi et al., "Pipeline Parallelism with Controllable Memory", NeurIPS 2024. */
#ifndef SP_PP_GEN_H
#define SP_PP_GEN_H

#include "schedulers/plan/actions.h"

int sp_pp_gen_1f1b_strict(const sp_pp_params *p, sp_actions **out) SP_MUST_CHECK;
int sp_pp_gen_zb_h1(const sp_pp_params *p, sp_actions **out) SP_MUST_CHECK;
int sp_pp_gen_zb_h2(const sp_pp_params *p, sp_actions **out) SP_MUST_CHECK;
int sp_pp_gen_interleaved_1f1b(const sp_pp_params *p, sp_actions **out) SP_MUST_CHECK;
int sp_pp_gen_interleaved_zb(const sp_pp_params *p, sp_actions **out) SP_MUST_CHECK;
int sp_pp_gen_1f1b_v(const sp_pp_params *p, sp_actions **out) SP_MUST_CHECK;
int sp_pp_gen_looped_bfs(const sp_pp_params *p, sp_actions **out) SP_MUST_CHECK;
int sp_pp_gen_zbv(const sp_pp_params *p, sp_actions **out) SP_MUST_CHECK;
int sp_pp_gen_dualpipev(const sp_pp_params *p, sp_actions **out) SP_MUST_CHECK;
int sp_pp_gen_v_half(const sp_pp_params *p, sp_actions **out) SP_MUST_CHECK;
int sp_pp_gen_v_min(const sp_pp_params *p, sp_actions **out) SP_MUST_CHECK;
int sp_pp_gen_zb_auto(const sp_pp_params *p, sp_actions **out) SP_MUST_CHECK;

/* What the one-chunk-per-rank and looped generators check (gen_common.c): p ≥ 1, m ≥ 1,
 * p·m bounded; and v = --chunks per rank (0: 2), at most 1000. SP_ERR naming the scheme. */
int sp_gen_check_pm(const char *name, const sp_pp_params *p) SP_MUST_CHECK;
int sp_gen_chunks_per_rank(const char *name, const sp_pp_params *p, int *v) SP_MUST_CHECK;

/* The rounds of the interleaved schedules (interleaved-1f1b, interleaved-zb): m
 * micro-batches in R = max(1, ⌊m/p⌋) rounds, the first m mod R of them one larger
 * (PyTorch's rounds of m/R each when R divides m, which it does whenever p divides m or
 * m < 2p). A rank's forwards run round by round, within a round all of the round's
 * micro-batches through its first chunk, then through the next …; its backwards walk the
 * same rounds with the chunks reversed. */
typedef struct sp_gen_rounds {
    int v, rounds, base, rem; /* chunks per rank; R; round sizes base + 1 (the first rem), base */
} sp_gen_rounds;
sp_gen_rounds sp_gen_rounds_of(int ranks, int micro, int v);
/* The local chunk (0 … v−1) of a rank's k-th forward; the k-th backward's is v − 1 − it. */
int sp_gen_rounds_local(const sp_gen_rounds *r, long k);

/* Action <chunk><type><micro>. */
static inline sp_action sp_gen_act(int chunk, sp_act_type t, int micro) { return (sp_action){chunk, micro, t}; }

#endif
