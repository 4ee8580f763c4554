/* rules_dualpipe.c — DualPipe, bidirectional ([DS] DeepSeek-AI, DualPipe): W ranks, an
 * even number, and two pipelines over the same model in opposite directions. The stages
 * are placed in W contiguous blocks balanced by cost (block k = stage_worker); the "down"
 * pipeline runs block k on rank k, the "up" pipeline on rank W − 1 − k, so rank r holds
 * blocks r and W − 1 − r — two copies of the parameters, each block's weights on the pair
 * {k, W − 1 − k}, whose gradients are summed across the pair before the update (the
 * executor's allreduce of a replicated stage; the simulator's bucket of that rank set).
 * Micro-batch b goes down when b is even and up when odd, so half enter at each end and
 * the two directions fill each other's warm-up and cool-down. The backward is split (δ
 * and G): the order on a rank is the greedy simulator's under δ first, then F, then G (the
 * weight gradients fill the bubbles, as DualPipe's zero-bubble steps do), oldest first,
 * with at most W/2 micro-batches of one direction in flight per stage (F(s, b) waits for
 * the backward of (s, b − W), the same direction) — at most W stage activations a rank. */
#include "core/error.h"
#include "schedulers/plan/rules.h"

static bool goes_up(sp_job j) { return j.micro % 2 == 1; }

static int w_dual(const sp_schedule *s, sp_job j)
{
    int k = s->stage_worker[j.stage];
    return goes_up(j) ? s->workers - 1 - k : k;
}

static long prio_dual(const sp_schedule *s, sp_job j)
{
    static const int klass[] = {[SP_FWD] = 1, [SP_BWD] = 0, [SP_BWD_DELTA] = 0, [SP_BWD_GRAD] = 2};
    return sp_rules_rank(s, j, klass[j.dir]);
}

static int inflight_dual(const sp_schedule *s, int stage) { return s->workers; }

static void setup_dualpipe(sp_schedule *s)
{
    if (s->workers == 0) s->workers = s->stages;
    if (s->workers < 2 || s->workers % 2)
        sp_fail("--scheme dualpipe: %d workers (expected an even number >= 2: rank r pairs with rank W-1-r)",
                s->workers);
    if (s->workers > s->stages)
        sp_fail("--scheme dualpipe: %d workers for %d stages (a pipeline needs workers <= stages)", s->workers,
                s->stages);
    if (s->micro % 2)
        sp_fail("--scheme dualpipe: %d micro-batches (expected an even number: half enter from each end)",
                s->micro);
}

const sp_scheme_rules sp_rules_dualpipe = {true, SP_PLACE_CONTIGUOUS, setup_dualpipe, w_dual, w_dual, prio_dual,
                                           inflight_dual};
