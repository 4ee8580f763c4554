/* rules_data_parallel.c — the data-parallel rule sets (rules.h): ddp, fsdp and ddp-ooo.
 * Micro-batch b runs on worker b mod W (the paper's b when W = B, [U] Table 1's default);
 * fsdp keeps the weights of stage s on worker s mod W ([U] w_FSDP); ddp-ooo is ddp with
 * the reverse first-k order of the weight gradients ([O] §5.1, Algorithm 2). */
#include "core/error.h"
#include "schedulers/plan/rules.h"

static int w_micro(const sp_schedule *s, sp_job j) { return j.micro % s->workers; }
static int w_stage_mod(const sp_schedule *s, sp_job j) { return j.stage % s->workers; }

/* ooo's data-parallel order, reverse first-k ([O] Algorithm 2): the stages ≥ K run their
 * backward conventionally from the top (G_s, then δ_s), then the δ of the stages < K,
 * then their G in forward order — so the weights the next forward needs first have
 * their gradients (and their synchronisation) first. Forwards first, as DDP. */
static long prio_reverse_first_k(const sp_schedule *s, sp_job j)
{
    long S = s->stages, K = s->first_k, pos;
    if (j.dir == SP_FWD) return (long)j.micro * 3 * S + j.stage;
    if (j.stage >= K) pos = 2 * (S - 1 - j.stage) + (j.dir == SP_BWD_GRAD ? 0 : 1);
    else if (j.dir == SP_BWD_DELTA) pos = 2 * (S - K) + (K - 1 - j.stage);
    else pos = 2 * (S - K) + K + j.stage;
    return ((long)s->micro + j.micro) * 3 * S + pos;
}

static void setup_data_parallel(sp_schedule *s)
{
    if (s->workers == 0) s->workers = s->micro;   /* [U] Table 1: W = B */
}

static void setup_ddp_ooo(sp_schedule *s)
{
    setup_data_parallel(s);
    if (s->first_k <= 0) s->first_k = s->stages / 2 > 0 ? s->stages / 2 : 1;
    if (s->first_k > s->stages)
        sp_fail("--scheme ddp-ooo: first k = %d stages of %d (expected k <= S)", s->first_k, s->stages);
}

const sp_scheme_rules sp_rules_ddp = {false, SP_PLACE_NONE, setup_data_parallel, w_micro, w_micro,
                                      sp_rules_forward_first, NULL};
const sp_scheme_rules sp_rules_fsdp = {false, SP_PLACE_NONE, setup_data_parallel, w_micro, w_stage_mod,
                                       sp_rules_forward_first, NULL};
const sp_scheme_rules sp_rules_ddp_ooo = {true, SP_PLACE_NONE, setup_ddp_ooo, w_micro, w_micro, prio_reverse_first_k,
                                          NULL};
