/* sim_actions.c — a simulated order read back as per-rank action lists (sim.h:
 * sp_schedule_to_actions), the inverse of sp_schedule_from_actions (plan/schedule.h):
 * wherever each chunk runs on one worker and the jobs of one action are consecutive in
 * its worker's order. */
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "schedulers/plan/actions.h"
#include "schedulers/sim/sim.h"

static sp_act_type type_of(sp_dir d)
{
    return d == SP_FWD ? SP_ACT_F : d == SP_BWD ? SP_ACT_B : d == SP_BWD_DELTA ? SP_ACT_I : SP_ACT_W;
}

/* Whether the chunk's layers have a δ job for micro-batch b (stage 0 may have none). */
static bool chunk_has_delta(const sp_schedule *s, const int *chunk, int c, int b)
{
    for (int st = 0; st < s->stages; st++)
        if (chunk[st] == c && sp_schedule_find(s, st, b, SP_BWD_DELTA) >= 0) return true;
    return false;
}

sp_actions *sp_schedule_to_actions(const sp_schedule *s, const sp_sim *r)
{
    int S = s->stages, B = s->micro, W = s->workers;
    int *worker = sp_xmalloc(sizeof(int) * (size_t)S), *chunk = sp_xmalloc(sizeof(int) * (size_t)S);
    sp_actions *a = NULL;
    char *emitted = NULL;
    for (int st = 0; st < S; st++) worker[st] = -1;
    for (int j = 0; j < s->njobs; j++) {
        int st = s->jobs[j].stage;
        if (worker[st] >= 0 && worker[st] != s->compute[j]) {
            sp_error("--actions-out: --scheme %s runs stage %d on workers %d and %d (an action list gives each chunk one "
                     "rank)", s->scheme->name, st, worker[st], s->compute[j]);
            goto fail;
        }
        worker[st] = s->compute[j];
    }
    int C;
    if (s->stage_chunk) {
        memcpy(chunk, s->stage_chunk, sizeof(int) * (size_t)S);
        C = s->chunks;
    } else {   /* a worker's maximal runs of consecutive stages */
        chunk[0] = 0;
        for (int st = 1; st < S; st++) chunk[st] = chunk[st - 1] + (worker[st] != worker[st - 1]);
        C = chunk[S - 1] + 1;
    }
    a = sp_actions_new(W, C, B, s->njobs + 1);
    emitted = sp_xcalloc((size_t)C * (size_t)B * 4, 1);
    for (int w = 0; w < W; w++) {
        sp_action prev = {-1, -1, SP_ACT_F};
        for (int i = r->order_off[w]; i < r->order_off[w + 1]; i++) {
            sp_job j = s->jobs[r->order[i]];
            sp_action x = {chunk[j.stage], j.micro, type_of(j.dir)};
            if (x.chunk == prev.chunk && x.micro == prev.micro && x.type == prev.type) continue;
            size_t key = ((size_t)x.chunk * (size_t)B + (size_t)x.micro) * 4;
            char buf[32], lab[32];
            if (emitted[key + x.type]) {
                sp_error("--actions-out: --scheme %s: worker %d runs job %s apart from the other jobs of action %s (its "
                         "order is not an action list at chunk granularity)", s->scheme->name, w,
                         sp_job_label(s, r->order[i], lab, sizeof lab), sp_action_str(x, buf));
                goto fail;
            }
            if (x.type == SP_ACT_W && !emitted[key + SP_ACT_I]) {
                if (chunk_has_delta(s, chunk, x.chunk, x.micro)) {
                    sp_error("--actions-out: --scheme %s: worker %d runs %s before its input gradient", s->scheme->name,
                             w, sp_action_str(x, buf));
                    goto fail;
                }
                /* a chunk of stages without δ (the data's stage): its I is empty */
                sp_actions_push(a, w, (sp_action){x.chunk, x.micro, SP_ACT_I});
                emitted[key + SP_ACT_I] = 1;
            }
            sp_actions_push(a, w, x);
            emitted[key + x.type] = 1;
            prev = x;
        }
    }
    if (sp_actions_check(a) != SP_OK) {
        sp_error_prefix("--actions-out: --scheme %s", s->scheme->name);
        goto fail;
    }
    free(emitted);
    free(worker);
    free(chunk);
    return a;
fail:
    sp_actions_free(a);
    free(emitted);
    free(worker);
    free(chunk);
    return NULL;
}
