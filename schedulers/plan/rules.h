/* rules.h — the rule sets of the RULES schemes (private to schedulers/plan/; the registry
 * in schemes.c names them): w_compute, w_weights, the tie-break n and the in-flight cap of
 * [U] "Formal definitions of distributed schedules", one family per file:
 *
 *   scheme      w_compute          w_weights          n (ties)            file
 *   ddp         b                  b                  forward first       rules_data_parallel.c
 *   fsdp        b                  s                  forward first       rules_data_parallel.c
 *   ddp-ooo     b                  b                  reverse first-k     rules_data_parallel.c
 *   gpipe       s                  s                  forward first       rules_pipeline.c
 *   1f1b        s                  s                  backward first, cap rules_pipeline.c
 *   ooo-ff      s                  s                  F, δ, then G        rules_pipeline.c
 *   ooo-modulo  s mod W            s mod W            F, δ, then G        rules_pipeline.c
 *   lpp         h(s,b)             h(s,b)             forward first       rules_looped.c
 *   fslpp       h(s,b)             h(s,s)             forward first       rules_looped.c
 *   dualpipe    k or W-1-k (b odd) the same          δ, F, G; cap W      rules_dualpipe.c
 *
 * with h(s,b) = (R·b mod W) + (s mod R) and k = stage_worker[s], s's contiguous block. The papers are cited as in schedule.h ([U], [O]).
 * A new rule-based scheme is a file defining its sp_scheme_rules, its declaration here
 * and one row in schemes.c. */
#ifndef SP_PLAN_RULES_H
#define SP_PLAN_RULES_H

#include "schedulers/plan/schedule.h"

/* n(s, b, d): a unique integer per job, smaller first ([U] "n(s,b,d) ... total order").
 * Jobs are ranked by a class (which direction goes first), then by micro-batch (oldest
 * first), then by stage in the order the pass visits them. */
static inline long sp_rules_rank(const sp_schedule *s, sp_job j, int klass)
{
    int stage_order = j.dir == SP_FWD ? j.stage : s->stages - 1 - j.stage;
    return ((long)klass * s->micro + j.micro) * s->stages + stage_order;
}

/* GPipe's breadth-first order: forwards, then backwards; with split backward the
 * weight gradients G come last ([O] gradient fast-forwarding: δ before G). */
static inline long sp_rules_forward_first(const sp_schedule *s, sp_job j)
{
    static const int klass[] = {[SP_FWD] = 0, [SP_BWD] = 1, [SP_BWD_DELTA] = 1, [SP_BWD_GRAD] = 2};
    return sp_rules_rank(s, j, klass[j.dir]);
}

extern const sp_scheme_rules sp_rules_ddp, sp_rules_fsdp, sp_rules_ddp_ooo;          /* rules_data_parallel.c */
extern const sp_scheme_rules sp_rules_gpipe, sp_rules_1f1b, sp_rules_ooo_ff, sp_rules_ooo_modulo; /* rules_pipeline.c */
extern const sp_scheme_rules sp_rules_lpp, sp_rules_fslpp;                           /* rules_looped.c */
extern const sp_scheme_rules sp_rules_dualpipe;                                      /* rules_dualpipe.c */

#endif
