/* rules_looped.c — the looped rule sets (rules.h): lpp and fslpp. G groups of R workers
 * (W = G·R); micro-batch b and stage s run on h(s, b) = (R·b mod W) + (s mod R), LPP's
 * hash of [U]; fslpp keeps the weights of stage s on h(s, s) ([U] w_FSLPP). */
#include "core/error.h"
#include "schedulers/plan/rules.h"

int sp_lpp_hash(int stage, int b, int groups, int per_group)
{
    int w = groups * per_group;
    return (int)(((long)per_group * b) % w) + stage % per_group;
}

static int w_lpp(const sp_schedule *s, sp_job j)
{
    return sp_lpp_hash(j.stage, j.micro, s->groups, s->per_group);
}
/* FSLPP: the hash with the batch id replaced by the stage id, w_weights = h(s, s). */
static int w_fslpp_weights(const sp_schedule *s, sp_job j)
{
    return sp_lpp_hash(j.stage, j.stage, s->groups, s->per_group);
}

static void setup_looped(sp_schedule *s)
{
    if (s->groups == 0 && s->per_group == 0) {
        s->per_group = s->workers ? s->workers : s->stages;
        s->groups = 1;
    } else if (s->groups == 0) {
        s->groups = s->workers ? s->workers / s->per_group : 1;
    } else if (s->per_group == 0) {
        s->per_group = s->workers ? s->workers / s->groups : s->stages;
    }
    if (s->groups < 1 || s->per_group < 1)
        sp_fail("--scheme %s: --groups %d --per-group %d (expected both >= 1)", s->scheme->name,
                s->groups, s->per_group);
    if (s->per_group > s->stages)
        sp_fail("--scheme %s: --per-group %d exceeds the %d stages (expected R <= S)",
                s->scheme->name, s->per_group, s->stages);
    if (s->workers && s->workers != s->groups * s->per_group)
        sp_fail("--scheme %s: --workers %d but --groups %d x --per-group %d = %d (expected W = G*R)",
                s->scheme->name, s->workers, s->groups, s->per_group, s->groups * s->per_group);
    s->workers = s->groups * s->per_group;
}

const sp_scheme_rules sp_rules_lpp = {false, SP_PLACE_NONE, setup_looped, w_lpp, w_lpp, sp_rules_forward_first, NULL};
const sp_scheme_rules sp_rules_fslpp = {false, SP_PLACE_NONE, setup_looped, w_lpp, w_fslpp_weights,
                                        sp_rules_forward_first, NULL};
