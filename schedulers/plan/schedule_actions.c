/* schedule_actions.c — the master schedule of a per-rank action list (actions.h) and back.
 *
 * An action list names chunks; the master schedule names stages (the model's layers).
 * A chunk is a contiguous range of stages (sp_chunk_partition: balanced by cost, one
 * stage per chunk when their counts agree), placed on the rank that runs it; each action
 * becomes its chunk's layer jobs in order, and each worker's job order is fixed
 * (s->fixed): sp_simulate runs it as given, the executor walks it, so the list, the
 * simulation and the run agree action for action. The way back (sp_schedule_to_actions)
 * reads a simulated order as actions wherever each chunk runs on one worker and the
 * jobs of one action are consecutive in its order. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "schedulers/plan/actions.h"
#include "schedulers/plan/schedule.h"
#include "schedulers/plan/schedule_internal.h"

/* ---- the action-list schemes: a generator's name or "custom" ------------------------------ */

static int w_placed(const sp_schedule *s, sp_job j) { return s->stage_worker[j.stage]; }
static long prio_later(const sp_schedule *s, sp_job j) { return 0; }   /* the fixed position replaces it */
static void setup_given(sp_schedule *s) { (void)s; }

#define MAX_ACTION_SCHEMES 32
static sp_scheme action_schemes[MAX_ACTION_SCHEMES];
static int n_action_schemes;
static char all_names[1024];
static pthread_once_t schemes_once = PTHREAD_ONCE_INIT;

static void init_schemes(void)
{
    int n = 0;
    for (int i = 0; i < sp_pp_count() && n < MAX_ACTION_SCHEMES - 1; i++) {
        const sp_pp_generator *g = sp_pp_at(i);
        action_schemes[n++] = (sp_scheme){g->name, g->summary, false, setup_given, w_placed, w_placed, prio_later, NULL};
    }
    action_schemes[n++] = (sp_scheme){"custom", "per-rank action lists read from a CSV (--actions FILE)", false,
                                      setup_given, w_placed, w_placed, prio_later, NULL};
    n_action_schemes = n;
    snprintf(all_names, sizeof all_names, "%s", sp_scheme_names());
    for (int i = 0; i < n; i++) {
        size_t len = strlen(all_names);
        snprintf(all_names + len, sizeof all_names - len, "|%s", action_schemes[i].name);
    }
}

static const sp_scheme *action_scheme(const char *name)
{
    pthread_once(&schemes_once, init_schemes);
    for (int i = 0; name && i < n_action_schemes; i++)
        if (!strcmp(action_schemes[i].name, name)) return &action_schemes[i];
    return NULL;
}

const char *sp_schedule_all_names(void)
{
    pthread_once(&schemes_once, init_schemes);
    return all_names;
}

bool sp_scheme_is_actions(const char *name) { return action_scheme(name) != NULL; }

/* ---- chunks of stages --------------------------------------------------------------------- */

void sp_chunk_partition(const sp_costs *c, int stages, int chunks, int *stage_chunk)
{
    if (chunks < 1 || chunks > stages)
        sp_fail("%d chunks for %d stages (expected 1 <= chunks <= stages: each chunk holds whole layers)", chunks,
                stages);
    double *load = sp_xmalloc(sizeof(double) * (size_t)stages);
    for (int s = 0; s < stages; s++) load[s] = c ? c->fwd[s] + sp_costs_bwd(c, s) : 1.0;
    sp_partition_contiguous(load, stages, chunks, stage_chunk);
    free(load);
    /* The balanced partition may leave a chunk empty (free layers); then split by count. */
    bool empty = stage_chunk[stages - 1] != chunks - 1;
    for (int s = 1; s < stages; s++) empty |= stage_chunk[s] > stage_chunk[s - 1] + 1;
    if (empty || stage_chunk[0] != 0)
        for (int s = 0; s < stages; s++) stage_chunk[s] = (int)((long)s * chunks / stages);
}

void sp_chunk_costs_sum(const sp_costs *c, int stages, int chunks, const int *stage_chunk, double *f, double *i,
                        double *w, double *act)
{
    for (int k = 0; k < chunks; k++) f[k] = i[k] = w[k] = act[k] = 0;
    for (int s = 0; s < stages; s++) {
        int k = stage_chunk[s];
        f[k] += c ? c->fwd[s] : 1.0;
        i[k] += c ? c->delta[s] : 1.0;
        w[k] += c ? c->grad[s] : 1.0;
        act[k] += c ? c->act_bytes[s] : 1.0;
    }
}

int sp_pp_generate_from_costs(const sp_pp_generator *g, const sp_costs *c, int ranks, int micro, int chunks_per_rank,
                              double mem_limit, bool mem_bytes, double transfer, sp_actions **out)
{
    if (!out) return sp_error("sp_pp_generate_from_costs: argument 'out' is NULL");
    *out = NULL;
    if (!g) return sp_error("sp_pp_generate_from_costs: argument 'g' is NULL");
    int v = chunks_per_rank > 0 ? chunks_per_rank : g->default_chunks_per_rank;
    if (ranks < 1 || v < 1 || (long)ranks * v > (c ? c->stages : 1L << 20))
        return sp_error("%s: %d ranks x %d chunks per rank for %d stages (expected ranks x chunks <= stages: each "
                        "chunk holds whole layers)", g->name, ranks, v, c ? c->stages : 0);
    int C = ranks * v;
    sp_chunk_costs cc = {.chunks = C};
    double *buf = NULL;
    if (c) {
        int *stage_chunk = sp_xmalloc(sizeof(int) * (size_t)c->stages);
        buf = sp_xmalloc(sizeof(double) * 4 * (size_t)C);
        sp_chunk_partition(c, c->stages, C, stage_chunk);
        sp_chunk_costs_sum(c, c->stages, C, stage_chunk, buf, buf + C, buf + 2 * C, buf + 3 * C);
        free(stage_chunk);
        /* act NULL: one unit per chunk and micro-batch, the unit of --mem-limit N */
        cc = (sp_chunk_costs){.chunks = C, .f = buf, .i = buf + C, .w = buf + 2 * C, .act = mem_bytes ? buf + 3 * C : NULL,
                              .transfer = transfer};
    }
    sp_pp_params p = {.ranks = ranks, .micro = micro, .chunks_per_rank = chunks_per_rank, .costs = c ? &cc : NULL,
                      .mem_limit = mem_limit};
    int rc = g->generate(&p, out);
    free(buf);
    if (rc != SP_OK) *out = NULL;
    return rc;
}

/* ---- list → schedule ---------------------------------------------------------------------- */

static bool list_splits(const sp_actions *a)
{
    for (int k = 0; k < a->off[a->ranks]; k++)
        if (a->act[k].type == SP_ACT_I || a->act[k].type == SP_ACT_W) return true;
    return false;
}

/* Append the jobs of one action (those that exist: stage 0 may have no δ). */
static int expand(const sp_schedule *s, const int *first, const int *last, sp_action x, int *out)
{
    int n = 0, lo = first[x.chunk], hi = last[x.chunk], b = x.micro;
#define PUT(st, d)                                        \
    do {                                                  \
        int j_ = sp_schedule_find(s, (st), b, (d));       \
        if (j_ >= 0) out[n++] = j_;                       \
    } while (0)
    switch (x.type) {
    case SP_ACT_F:
        for (int st = lo; st <= hi; st++) PUT(st, SP_FWD);
        break;
    case SP_ACT_I:
        for (int st = hi; st >= lo; st--) PUT(st, SP_BWD_DELTA);
        break;
    case SP_ACT_W:
        for (int st = hi; st >= lo; st--) PUT(st, SP_BWD_GRAD);
        break;
    case SP_ACT_B:
        for (int st = hi; st >= lo; st--) {
            if (s->split_backward) {
                PUT(st, SP_BWD_DELTA);
                PUT(st, SP_BWD_GRAD);
            } else {
                PUT(st, SP_BWD);
            }
        }
        break;
    }
#undef PUT
    return n;
}

sp_schedule *sp_schedule_from_actions(const sp_actions *a, const sp_sched_config *cfg, const sp_costs *c)
{
    const char *name = cfg->actions_scheme ? cfg->actions_scheme : "custom";
    const sp_scheme *scheme = action_scheme(name);
    if (!scheme) sp_fail("--scheme %s: not an action-list scheme (expected a generator or custom)", name);
    if (!a) sp_fail("--scheme %s: no action list", name);
    if (sp_actions_check(a) != SP_OK) sp_fail("--scheme %s: %s", name, sp_last_error());
    int S = cfg->stages;
    if (S < 1) sp_fail("--stages %d: expected >= 1", S);
    if (c && c->stages != S) sp_fail("--scheme %s: the costs describe %d stages, the schedule %d", name, c->stages, S);
    if (a->chunks > S)
        sp_fail("--scheme %s: the list has %d chunks for %d stages (expected chunks <= stages: each chunk holds whole "
                "layers)", name, a->chunks, S);
    if (cfg->workers > 0 && cfg->workers != a->ranks)
        sp_fail("--scheme %s: --workers %d but the list has %d ranks", name, cfg->workers, a->ranks);
    if (cfg->micro > 0 && cfg->micro != a->micro)
        sp_fail("--scheme %s: --microbatches %d but the list has %d micro-batches", name, cfg->micro, a->micro);
    bool split = list_splits(a);
    if (split && cfg->split == 0)
        sp_fail("--scheme %s: --no-split, but the list splits the backward into I and W", name);
    int *stage_chunk = sp_xmalloc(sizeof(int) * (size_t)S), *stage_worker = sp_xmalloc(sizeof(int) * (size_t)S);
    sp_chunk_partition(c, S, a->chunks, stage_chunk);
    for (int st = 0; st < S; st++) stage_worker[st] = a->chunk_rank[stage_chunk[st]];
    sp_schedule shape = {
        .scheme = scheme, .stages = S, .micro = a->micro, .workers = a->ranks, .groups = 1, .per_group = a->ranks,
        .split_backward = split || cfg->split > 0, .input_grad = !cfg->no_input_grad,
    };
    sp_schedule *s = sp_schedule_build(&shape, stage_worker);
    s->chunks = a->chunks;
    s->stage_chunk = stage_chunk;
    int *first = sp_xmalloc(sizeof(int) * (size_t)a->chunks), *last = sp_xmalloc(sizeof(int) * (size_t)a->chunks);
    for (int st = S - 1; st >= 0; st--) first[stage_chunk[st]] = st;
    for (int st = 0; st < S; st++) last[stage_chunk[st]] = st;
    /* Each worker's jobs in its list's order; the position is also the priority n. */
    s->fixed_off = sp_xcalloc((size_t)s->workers + 1, sizeof(int));
    s->fixed = sp_xmalloc(sizeof(int) * (size_t)(s->njobs + 1));
    int n = 0, *buf = sp_xmalloc(sizeof(int) * (size_t)(2 * S + 2));
    for (int r = 0; r < a->ranks; r++) {
        for (int k = a->off[r]; k < a->off[r + 1]; k++) {
            int m = expand(s, first, last, a->act[k], buf);
            for (int i = 0; i < m; i++) {
                if (n >= s->njobs) sp_fail("--scheme %s: the list expands to more jobs than the schedule has", name);
                s->priority[buf[i]] = n;
                s->fixed[n++] = buf[i];
            }
        }
        s->fixed_off[r + 1] = n;
    }
    if (n != s->njobs) sp_fail("--scheme %s: the list covers %d of the %d jobs", name, n, s->njobs);
    free(buf);
    free(first);
    free(last);
    return s;
}

/* ---- schedule → list ---------------------------------------------------------------------- */

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
