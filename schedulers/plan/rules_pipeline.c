/* rules_pipeline.c — the pipeline rule sets (rules.h): gpipe, 1f1b, ooo-ff and
 * ooo-modulo. Stage s runs on worker stage_worker[s] with its weights there: contiguous
 * blocks of stages balanced by cost when W < S (the "conventional allocation" of [O]),
 * or the caller's placement (LayerPipe's partition); ooo-modulo places stage s on worker
 * s mod W ([O] §5.2.1 modulo layer allocation). */
#include "core/error.h"
#include "schedulers/plan/rules.h"

static int w_placed(const sp_schedule *s, sp_job j) { return s->stage_worker[j.stage]; }

/* 1F1B: a ready backward goes before a ready forward ([U] "in the 1F1B schedule, a
 * worker processes the backward pass preferentially"); G still last when split. */
static long prio_backward_first(const sp_schedule *s, sp_job j)
{
    static const int klass[] = {[SP_FWD] = 1, [SP_BWD] = 0, [SP_BWD_DELTA] = 0, [SP_BWD_GRAD] = 2};
    return sp_rules_rank(s, j, klass[j.dir]);
}

/* 1F1B's warm-up (PipeDream-Flush): worker w keeps at most W − w micro-batches in flight.
 * Under the greedy recursion n alone cannot bound memory — worker 0 would run forwards
 * until the first backward arrives — so the cap is an extra pred edge. */
static int inflight_1f1b(const sp_schedule *s, int stage) { return s->workers - s->stage_worker[stage]; }

static void setup_pipeline(sp_schedule *s)
{
    if (s->workers == 0) s->workers = s->stages;  /* [U] Table 1: W = S */
    if (s->workers > s->stages)
        sp_fail("--scheme %s: %d workers for %d stages (a pipeline needs workers <= stages)",
                s->scheme->name, s->workers, s->stages);
}

const sp_scheme_rules sp_rules_gpipe = {false, SP_PLACE_CONTIGUOUS, setup_pipeline, w_placed, w_placed,
                                        sp_rules_forward_first, NULL};
const sp_scheme_rules sp_rules_1f1b = {false, SP_PLACE_CONTIGUOUS, setup_pipeline, w_placed, w_placed,
                                       prio_backward_first, inflight_1f1b};
const sp_scheme_rules sp_rules_ooo_ff = {true, SP_PLACE_CONTIGUOUS, setup_pipeline, w_placed, w_placed,
                                         sp_rules_forward_first, NULL};
const sp_scheme_rules sp_rules_ooo_modulo = {true, SP_PLACE_MODULO, setup_pipeline, w_placed, w_placed,
                                             sp_rules_forward_first, NULL};
