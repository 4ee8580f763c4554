/* simulate.c — the discrete-event simulator of [U] ("Latency, network, and memory usage
 * from w(s,b,d)").
 *
 * [U]'s recursion, with J the jobs done so far, t(j) their finish times and t(w) the
 * time worker w finishes its latest job:
 *
 *     j* = argmin over ready jobs j of  max[t(w_compute(j)), t(pred(j))] + ε·n(j)
 *     t(j*) = duration(j*) + max[t(w_compute(j*)), t(pred(j*))],   J ← J ∪ {j*}
 *
 * [U] writes it over the frontier and succ() of a chain; here "ready" means all of
 * pred(j) is in J, which is the same for a chain and also covers the DAGs of split
 * backward and 1F1B's in-flight cap. The ε·n term is a lexicographic tie-break: among
 * jobs that can start at the same time, the smallest n goes first.
 *
 * Each worker keeps its ready jobs; its best candidate is cached and recomputed only when
 * its ready set or its free time changes. The statistics that do not need time ([U]:
 * "Some statistics of the schedule can be computed more directly from w(s,b,d)") are
 * counted straight from the schedule. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "schedulers/sim/sim.h"

/* Start times closer than this are the same instant (costs from profiles are decimals). */
static bool same_time(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(1.0, fabs(a)); }

typedef struct candidate {
    int job;        /* −1: none */
    double start;
    long prio;
} candidate;

/* a before b: earlier start, then smaller n, then smaller id (n is unique per job). */
static bool cand_before(candidate a, candidate b)
{
    if (b.job < 0) return a.job >= 0;
    if (a.job < 0) return false;
    if (!same_time(a.start, b.start)) return a.start < b.start;
    if (a.prio != b.prio) return a.prio < b.prio;
    return a.job < b.job;
}

typedef struct sim_state {
    const sp_schedule *s;
    double *dur, *ready_at;     /* per job: duration, max finish of its preds          */
    int *missing;               /* per job: preds not yet finished                     */
    int **ready;                /* per worker: ready job ids                           */
    int *nready;
    double *free_at;            /* per worker: t(w)                                    */
    candidate *best;            /* per worker: cached best candidate                   */
    bool *stale;
} sim_state;

static void state_init(sim_state *st, const sp_schedule *s, const sp_costs *c)
{
    int W = s->workers, J = s->njobs;
    st->s = s;
    st->dur = sp_xmalloc(sizeof(double) * J);
    st->ready_at = sp_xcalloc(J, sizeof(double));
    st->missing = sp_xmalloc(sizeof(int) * J);
    st->ready = sp_xmalloc(sizeof(int *) * W);
    st->nready = sp_xcalloc(W, sizeof(int));
    st->free_at = sp_xcalloc(W, sizeof(double));
    st->best = sp_xmalloc(sizeof(candidate) * W);
    st->stale = sp_xmalloc(sizeof(bool) * W);
    int *per_worker = sp_xcalloc(W, sizeof(int));
    for (int j = 0; j < J; j++) per_worker[s->compute[j]]++;
    for (int w = 0; w < W; w++) {
        st->ready[w] = sp_xmalloc(sizeof(int) * (per_worker[w] + 1));
        st->stale[w] = true;
    }
    free(per_worker);
    for (int j = 0; j < J; j++) {
        st->dur[j] = sp_job_duration(s, c, j);
        st->missing[j] = s->pred_off[j + 1] - s->pred_off[j];
        if (st->missing[j] == 0) st->ready[s->compute[j]][st->nready[s->compute[j]]++] = j;
    }
}

static void state_free(sim_state *st)
{
    for (int w = 0; w < st->s->workers; w++) free(st->ready[w]);
    free(st->ready);
    free(st->dur);
    free(st->ready_at);
    free(st->missing);
    free(st->nready);
    free(st->free_at);
    free(st->best);
    free(st->stale);
}

static candidate worker_best(const sim_state *st, int w)
{
    candidate best = {.job = -1};
    for (int i = 0; i < st->nready[w]; i++) {
        int j = st->ready[w][i];
        candidate c = {j, fmax(st->free_at[w], st->ready_at[j]), st->s->priority[j]};
        if (cand_before(c, best)) best = c;
    }
    return best;
}

static candidate global_best(sim_state *st)
{
    candidate best = {.job = -1};
    for (int w = 0; w < st->s->workers; w++) {
        if (st->stale[w]) {
            st->best[w] = worker_best(st, w);
            st->stale[w] = false;
        }
        if (cand_before(st->best[w], best)) best = st->best[w];
    }
    return best;
}

static void remove_ready(sim_state *st, int w, int job)
{
    for (int i = 0; i < st->nready[w]; i++)
        if (st->ready[w][i] == job) {
            st->ready[w][i] = st->ready[w][--st->nready[w]];
            return;
        }
}

/* Run job c, then release its successors whose preds are now all done. */
static void run_job(sim_state *st, candidate c, sp_sim *r, int *order_fill)
{
    const sp_schedule *s = st->s;
    int w = s->compute[c.job];
    r->start[c.job] = c.start;
    r->finish[c.job] = c.start + st->dur[c.job];
    r->order[r->order_off[w] + order_fill[w]++] = c.job;
    remove_ready(st, w, c.job);
    st->free_at[w] = r->finish[c.job];
    st->stale[w] = true;
    int n;
    const int *succ = sp_schedule_succs(s, c.job, &n);
    for (int i = 0; i < n; i++) {
        int j = succ[i];
        st->ready_at[j] = fmax(st->ready_at[j], r->finish[c.job]);
        if (--st->missing[j] == 0) {
            int v = s->compute[j];
            st->ready[v][st->nready[v]++] = j;
            st->stale[v] = true;
        }
    }
}

static void run_greedy(const sp_schedule *s, const sp_costs *c, sp_sim *r)
{
    sim_state st;
    state_init(&st, s, c);
    int *order_fill = sp_xcalloc(s->workers, sizeof(int));
    for (int done = 0; done < s->njobs; done++) {
        candidate best = global_best(&st);
        if (best.job < 0) {   /* a refusal frees what it built; sp_sim_free frees r */
            free(order_fill);
            state_free(&st);
            sp_fail("--scheme %s: deadlock, %d of %d jobs never became ready (pred() has a cycle)",
                    s->scheme->name, s->njobs - done, s->njobs);
        }
        run_job(&st, best, r, order_fill);
    }
    free(order_fill);
    state_free(&st);
}

/* A fixed order per worker (schedules from action lists): worker w runs its jobs in the
 * order s->fixed gives, each at max(t(w), t(pred(j))). The start times depend only on
 * what comes before, so repeated sweeps over the workers place every job; a sweep that
 * places none is an order that waits on itself (sp_actions_check rules that out first). */
static void run_fixed(const sp_schedule *s, const sp_costs *c, sp_sim *r)
{
    int W = s->workers;
    int *pos = sp_xcalloc((size_t)W, sizeof(int));
    double *free_at = sp_xcalloc((size_t)W, sizeof(double));
    bool *done = sp_xcalloc((size_t)s->njobs, sizeof(bool));
    for (int placed = 0; placed < s->njobs;) {
        int before = placed;
        for (int w = 0; w < W; w++)
            while (s->fixed_off[w] + pos[w] < s->fixed_off[w + 1]) {
                int j = s->fixed[s->fixed_off[w] + pos[w]], n;
                const int *pred = sp_schedule_preds(s, j, &n);
                double t = free_at[w];
                bool ready = true;
                for (int i = 0; i < n && ready; i++) {
                    ready = done[pred[i]];
                    if (ready && r->finish[pred[i]] > t) t = r->finish[pred[i]];
                }
                if (!ready) break;
                r->start[j] = t;
                r->finish[j] = free_at[w] = t + sp_job_duration(s, c, j);
                r->order[r->order_off[w] + pos[w]++] = j;
                done[j] = true;
                placed++;
            }
        if (placed == before) {
            char lab[32];
            int w = 0;
            while (s->fixed_off[w] + pos[w] >= s->fixed_off[w + 1]) w++;
            sp_job_label(s, s->fixed[s->fixed_off[w] + pos[w]], lab, sizeof lab);
            free(pos), free(free_at), free(done);   /* a refusal frees what it built; sp_sim_free frees r */
            sp_fail("--scheme %s: deadlock, worker %d waits forever at job %s (%d of %d jobs never ran)",
                    s->scheme->name, w, lab, s->njobs - placed, s->njobs);
        }
    }
    free(pos);
    free(free_at);
    free(done);
}

/* ------------------------------------------------------------------------------------ */
/* Statistics straight from w(s, b, d)                                                  */

/* The jobs of (stage, micro) other than the forward: the backward, or δ and G. */
static int backward_jobs(const sp_schedule *s, int stage, int b, int out[2])
{
    int n = 0;
    for (int d = SP_BWD; d <= SP_BWD_GRAD; d++) {
        int j = sp_schedule_find(s, stage, b, (sp_dir)d);
        if (j >= 0) out[n++] = j;
    }
    return n;
}

/* The distinct workers that run a job of (stage, micro), with one job of each. */
static int workers_of(const sp_schedule *s, int stage, int b, int job_of[3])
{
    int jobs[3], n = 0, m = 0;
    jobs[n++] = sp_schedule_find(s, stage, b, SP_FWD);
    n += backward_jobs(s, stage, b, jobs + n);
    for (int i = 0; i < n; i++) {
        bool seen = false;
        for (int k = 0; k < m; k++) seen |= s->compute[job_of[k]] == s->compute[jobs[i]];
        if (!seen) job_of[m++] = jobs[i];
    }
    return m;
}

/* A stage has weights unless its costs say it has none (ReLU, pooling, ...). */
static bool has_weights(const sp_costs *c, int stage) { return !c || c->param_bytes[stage] > 0; }

/* [U]: worker w receives activations Σ_{(s,b) on w} 1[w_compute(s−1, b) ≠ w] — the input
 * x_s of a forward — and, when a backward job runs away from its forward, the stored x_s.
 * Gradients: the iterate z_{s+1} from the worker of δ_{s+1} (or B_{s+1}).
 * Weights: Σ_{(s,b) on w} 1[w_weights(s, b) ≠ w], once per (s, b) and worker. */

static void count_pair_transfers(const sp_schedule *s, const sp_costs *c, int st, int b, sp_sim *r)
{
    int f = sp_schedule_find(s, st, b, SP_FWD), fw = s->compute[f];
    if (st > 0 && s->compute[sp_schedule_find(s, st - 1, b, SP_FWD)] != fw) r->worker[fw].act_recv++;

    int job_of[3], m = workers_of(s, st, b, job_of);
    for (int k = 0; k < m && has_weights(c, st); k++)
        if (s->weights[job_of[k]] != s->compute[job_of[k]]) r->worker[s->compute[job_of[k]]].weight_recv++;

    int next = st + 1 < s->stages ? sp_schedule_find(s, st + 1, b, s->split_backward ? SP_BWD_DELTA : SP_BWD) : -1;
    int bj[2], nb = backward_jobs(s, st, b, bj);
    for (int i = 0; i < nb; i++) {
        int w = s->compute[bj[i]];
        if (i == 1 && w == s->compute[bj[0]]) continue;   /* δ and G on one worker: one fetch */
        if (w != fw) r->worker[w].act_recv++;
        if (next >= 0 && s->compute[next] != w) r->worker[w].grad_recv++;
    }
}

static void count_transfers(const sp_schedule *s, const sp_costs *c, sp_sim *r)
{
    for (int b = 0; b < s->micro; b++)
        for (int st = 0; st < s->stages; st++) count_pair_transfers(s, c, st, b, r);
}

static void count_weight_storage(const sp_schedule *s, const sp_costs *c, sp_sim *r)
{
    char *holds = sp_xcalloc((size_t)s->workers * s->stages, 1);
    for (int j = 0; j < s->njobs; j++)
        if (has_weights(c, s->jobs[j].stage)) holds[(size_t)s->weights[j] * s->stages + s->jobs[j].stage] = 1;
    for (int w = 0; w < s->workers; w++)
        for (int st = 0; st < s->stages; st++) r->worker[w].weight_stages += holds[(size_t)w * s->stages + st];
    free(holds);
}

/* ------------------------------------------------------------------------------------ */
/* Putting it together                                                                  */

static void per_worker_time(const sp_schedule *s, sp_sim *r)
{
    for (int j = 0; j < s->njobs; j++) {
        sp_worker_stats *ws = &r->worker[s->compute[j]];
        ws->jobs++;
        ws->busy += r->finish[j] - r->start[j];
        r->latency = fmax(r->latency, r->finish[j]);
    }
    double sum = 0;
    for (int w = 0; w < s->workers; w++) {
        sp_worker_stats *ws = &r->worker[w];
        ws->utilization = r->latency > 0 ? ws->busy / r->latency : 0;
        sum += ws->utilization;
    }
    r->utilization = sum / s->workers;
}

static void maxima(const sp_schedule *s, sp_sim *r)
{
    for (int w = 0; w < s->workers; w++) {
        const sp_worker_stats *ws = &r->worker[w];
        if (ws->act_recv > r->act_recv_max) r->act_recv_max = ws->act_recv;
        if (ws->grad_recv > r->grad_recv_max) r->grad_recv_max = ws->grad_recv;
        if (ws->weight_recv > r->weight_recv_max) r->weight_recv_max = ws->weight_recv;
        if (ws->weight_stages > r->weight_stages_max) r->weight_stages_max = ws->weight_stages;
        if (ws->peak_act > r->peak_act_max) r->peak_act_max = ws->peak_act;
        if (ws->peak_act_bytes > r->peak_act_bytes_max) r->peak_act_bytes_max = ws->peak_act_bytes;
    }
}

/* [U] Definition: ρ ≡ S·B / (L·W), jobs per worker per unit time. The unit of the
 * theorem's proof is one job: "x_s^b must remain live for at least 2(S−s)+1 time steps"
 * counts every forward and every backward step as one. For general costs the unit τ is
 * the mean time of one forward or one whole backward step. Theorem: ρ ≤ M/S. */
static void throughput(const sp_schedule *s, const sp_costs *c, sp_sim *r)
{
    double work = 0;
    for (int st = 0; st < s->stages; st++) {
        int f = sp_schedule_find(s, st, 0, SP_FWD), bj[2];
        work += sp_job_duration(s, c, f);
        int nb = backward_jobs(s, st, 0, bj);
        for (int i = 0; i < nb; i++) work += sp_job_duration(s, c, bj[i]);
    }
    r->unit = work / (2.0 * s->stages);
    double steps = r->unit > 0 ? r->latency / r->unit : 0;
    r->rho = steps > 0 ? (double)s->stages * s->micro / (steps * s->workers) : 0;
    r->rho_bound = (double)r->peak_act_max / s->stages;
}

void sp_simulate(const sp_schedule *s, const sp_costs *c, sp_sim *r)
{
    if (c && c->stages != s->stages)
        sp_fail("simulate: costs for %d stages, schedule has %d", c->stages, s->stages);
    memset(r, 0, sizeof *r);
    r->njobs = s->njobs;
    r->workers = s->workers;
    r->start = sp_xcalloc(s->njobs, sizeof(double));
    r->finish = sp_xcalloc(s->njobs, sizeof(double));
    r->worker = sp_xcalloc(s->workers, sizeof(sp_worker_stats));
    r->order_off = sp_xcalloc(s->workers + 1, sizeof(int));
    r->order = sp_xmalloc(sizeof(int) * (s->njobs + 1));
    for (int j = 0; j < s->njobs; j++) r->order_off[s->compute[j] + 1]++;
    for (int w = 0; w < s->workers; w++) r->order_off[w + 1] += r->order_off[w];

    if (s->fixed) run_fixed(s, c, r);
    else run_greedy(s, c, r);
    per_worker_time(s, r);
    count_transfers(s, c, r);
    count_weight_storage(s, c, r);
    sp_sim_memory(s, c, r);   /* sim_memory.c */
    maxima(s, r);
    throughput(s, c, r);
}

void sp_sim_free(sp_sim *r)
{
    free(r->start);
    free(r->finish);
    free(r->order_off);
    free(r->order);
    free(r->worker);
    free(r->mem_off);
    free(r->mem_time);
    free(r->mem_act);
    free(r->mem_wgt);
    memset(r, 0, sizeof *r);
}
