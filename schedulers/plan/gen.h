/* gen.h — the pipeline-schedule generators behind the registry of actions.h.
 *
 * Each builds the per-rank action lists of one named scheme from sp_pp_params and returns
 * SP_OK with *out set, or SP_ERR with one line (sp_last_error) naming the scheme and the
 * parameter that does not fit; nothing is allocated on error. The registry
 * (gen_registry.c: sp_pp_find, sp_pp_count, sp_pp_at) lists them under the names below.
 *
 *   1f1b-strict       gen_basic.c   PipeDream-Flush with a fixed order: warm-up, 1F1B, cool-down
 *   zb-h1             gen_basic.c   [ZB] handcrafted H1: 1F1B with W deferred into the bubbles
 *   zb-h2             gen_basic.c   [ZB] handcrafted H2: a longer warm-up, no bubble at the end
 *   interleaved-1f1b  gen_basic.c   Megatron's virtual stages, v chunks per rank
 *   looped-bfs        gen_basic.c   PyTorch ScheduleLoopedBFS: every F of a chunk, then backwards
 *   zbv, v-half, v-min, dualpipev, zb-auto   (the V-shaped schemes and the automatic one)
 *
 * [ZB] Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024. */
#ifndef SP_PP_GEN_H
#define SP_PP_GEN_H

#include "schedulers/plan/actions.h"

int sp_pp_gen_1f1b_strict(const sp_pp_params *p, sp_actions **out) SP_MUST_CHECK;
int sp_pp_gen_zb_h1(const sp_pp_params *p, sp_actions **out) SP_MUST_CHECK;
int sp_pp_gen_zb_h2(const sp_pp_params *p, sp_actions **out) SP_MUST_CHECK;
int sp_pp_gen_interleaved_1f1b(const sp_pp_params *p, sp_actions **out) SP_MUST_CHECK;
int sp_pp_gen_looped_bfs(const sp_pp_params *p, sp_actions **out) SP_MUST_CHECK;
int sp_pp_gen_zbv(const sp_pp_params *p, sp_actions **out) SP_MUST_CHECK;
int sp_pp_gen_v_half(const sp_pp_params *p, sp_actions **out) SP_MUST_CHECK;
int sp_pp_gen_v_min(const sp_pp_params *p, sp_actions **out) SP_MUST_CHECK;
int sp_pp_gen_dualpipev(const sp_pp_params *p, sp_actions **out) SP_MUST_CHECK;
int sp_pp_gen_zb_auto(const sp_pp_params *p, sp_actions **out) SP_MUST_CHECK;

#endif
