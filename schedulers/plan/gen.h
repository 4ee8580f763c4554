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
 *   looped-bfs           gen_looped_bfs.c        PyTorch ScheduleLoopedBFS
 *   zbv                  gen_zbv.c               [ZB]'s ZB-V on the V placement (gen_v.h)
 *   dualpipev            gen_dualpipev.c         DeepSeek's DualPipeV on the V placement
 *   zb-auto, v-half,     gen_greedy.c            [ZB]'s greedy list scheduler, and [CM]'s
 *   v-min                                        V-Half and V-Min built with it
 *   (candidates)         gen_sail.c, gen_sail.h  the papers' own heuristics (zb.py, zbv.py,
 *                                                zbv_greedy.py), which zb-h1, zb-h2, zbv,
 *                                                v-half, v-min and zb-auto keep where shorter
 *
 * gen_common.c holds what they share: the parameter checks below and the V placement.
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

/* Action <chunk><type><micro>. */
static inline sp_action sp_gen_act(int chunk, sp_act_type t, int micro) { return (sp_action){chunk, micro, t}; }

#endif
