/* exec_report.c — what the executor tells about a run: trace events (the first steps),
 * the ranks' busy / comm / wall totals, and the files of sp_exec_finish: --exec-order (the
 * first step's executed order), --trace (Chrome/Perfetto JSON) and --costs-out (the
 * measured stage costs, the calibration build/schedule --profile reads). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/io/fileio.h"
#include "core/threads.h"
#include "schedulers/exec/exec_internal.h"

/* ---- trace events ------------------------------------------------------------------------ */

/* One event of a step (the first TRACE_STEPS steps, only with --trace): a job (what >= 0),
 * a bucket's collective in flight (−1 − bucket), or a wait (WAIT_EV − bucket, WAIT_LOSS). */
/* $SCANPROP_TRACE_CLOCK_SKEW = RANK:SECONDS — the tests' skewed clock: that rank's trace
 * timestamps, and its readings in sp_exec_sync_clock, run SECONDS ahead, as a machine's
 * clock may. The offset measured at the start must take it out of the trace again. */
static double clock_skew(const sp_exec *x)
{
    const char *env = getenv("SCANPROP_TRACE_CLOCK_SKEW");
    int rank;
    double s;
    if (env && sscanf(env, "%d:%lf", &rank, &s) == 2 && rank == x->rank) return s;
    return 0;
}

/* A double through two floats (the communicator moves floats): hi + lo. */
static void split(double v, float *hl) { hl[0] = (float)v, hl[1] = (float)(v - (double)hl[0]); }
static double join(const float *hl) { return (double)hl[0] + (double)hl[1]; }

/* Ranks on different machines do not share a clock. Each rank r >= 1 asks rank 0 for its
 * time ROUNDS times (a ping, rank 0's answer is its clock when the ping arrived): with t1
 * the send and t4 the answer's arrival on r's clock and t0 rank 0's time, the offset is
 * t0 − (t1 + t4) / 2 (NTP's estimate, exact when the two directions take as long), taken
 * from the round with the shortest t4 − t1 (the least queueing). Ranks are served one
 * after the other. */
void sp_exec_sync_clock(sp_exec *x)
{
    enum { ROUNDS = 8, TAG = 32001 };   /* no other message is in flight now */
    double skew = clock_skew(x);
    x->clock_offset = 0;
    if (x->W < 2) return;
    sp_comm_set_label("the trace's clock synchronisation");
    float ping[2] = {0, 0}, hl[2];
    sp_req rq;
    if (x->rank == 0) {
        for (int r = 1; r < x->W; r++)
            for (int k = 0; k < ROUNDS; k++) {
                sp_irecv(x->world, ping, 2, r, TAG, &rq), sp_wait(&rq);
                split(sp_now() + skew, hl);
                sp_isend(x->world, hl, 2, r, TAG + 1, &rq), sp_wait(&rq);
            }
        return;
    }
    double best = INFINITY;
    for (int k = 0; k < ROUNDS; k++) {
        double t1 = sp_now() + skew;
        sp_isend(x->world, ping, 2, 0, TAG, &rq), sp_wait(&rq);
        sp_irecv(x->world, hl, 2, 0, TAG + 1, &rq), sp_wait(&rq);
        double t4 = sp_now() + skew;
        if (t4 - t1 < best) best = t4 - t1, x->clock_offset = join(hl) - (t1 + t4) / 2;
    }
}

void sp_exec_trace_add_step(sp_exec *x, int what, long step, double t0, double t1)
{
    if (!x->cfg.trace_path || step >= TRACE_STEPS) return;
    double skew = clock_skew(x);
    t0 += skew, t1 += skew;
    if (x->nev == x->cap_ev) {
        x->cap_ev = x->cap_ev ? 2 * x->cap_ev : 256;
        x->ev = sp_xrealloc(x->ev, sizeof *x->ev * (size_t)x->cap_ev);
    }
    x->ev[x->nev++] = (trace_ev){what, (int)step, t0, t1};
}

void sp_exec_trace_add(sp_exec *x, int what, double t0, double t1)
{
    sp_exec_trace_add_step(x, what, x->steps, t0, t1);
}

/* ---- the rows a rank reads ------------------------------------------------------------------ */

void sp_exec_rows_needed(const sp_exec *x, int n, unsigned char *need)
{
    if (x->tscan || n % x->B != 0) {   /* every rank runs the whole forward (or the step refuses the batch) */
        memset(need, SP_EXEC_ROW_X | SP_EXEC_ROW_Y, (size_t)n);
        return;
    }
    memset(need, 0, (size_t)n);
    int per = n / x->B;
    for (int j = 0; j < x->sched->njobs; j++) {
        sp_job jb = x->sched->jobs[j];
        if (!local(x, j) || jb.dir != SP_FWD) continue;
        unsigned char bit = (jb.stage == 0 ? SP_EXEC_ROW_X : 0) | (jb.stage == x->S - 1 ? SP_EXEC_ROW_Y : 0);
        for (int i = jb.micro * per; i < (jb.micro + 1) * per; i++) need[i] |= bit;
    }
}

/* ---- statistics, order, trace --------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double u = *(const double *)a, v = *(const double *)b;
    return (u > v) - (u < v);
}

/* The median of this rank's step walls after the first SP_EXEC_MEDIAN_SKIP (NaN without). */
static double median_step(const sp_exec *x)
{
    long n = x->steps - SP_EXEC_MEDIAN_SKIP;
    if (n < 1) return NAN;
    double *v = sp_xmalloc(sizeof(double) * (size_t)n);
    memcpy(v, x->step_wall + SP_EXEC_MEDIAN_SKIP, sizeof(double) * (size_t)n);
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    double m = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    free(v);
    return m;
}

void sp_exec_gather_stats(sp_exec *x, sp_exec_stats *st)
{
    st->workers = x->W;
    st->steps = x->steps;
    enum { K = 9 };
    /* the peak in bytes as two floats of 24 bits each: exact below 2^48 */
    double peak = round(x->act.peak), hi = floor(peak / 16777216.0);
    float mine[K] = {(float)x->busy, (float)x->comm_s,      (float)x->wall, (float)x->wall_late, (float)x->comm_late,
                     (float)hi,      (float)(peak - hi * 16777216.0), (float)x->wgrad_steps, (float)median_step(x)};
    float *all = sp_xmalloc(sizeof(float) * K * (size_t)x->W);
    sp_allgather(x->world, mine, all, K);
    st->busy = sp_xmalloc(sizeof(double) * (size_t)x->W);
    st->comm = sp_xmalloc(sizeof(double) * (size_t)x->W);
    st->wall = sp_xmalloc(sizeof(double) * (size_t)x->W);
    st->peak_act_bytes = sp_xmalloc(sizeof(double) * (size_t)x->W);
    st->sim_peak_act_bytes = sp_xmalloc(sizeof(double) * (size_t)x->W);
    st->wgrad_steps = x->tscan ? sp_xmalloc(sizeof(int) * (size_t)x->W) : NULL;
    st->scan_algo = !is_scan(x->cfg.scheme) ? NULL : sp_exec_scan_blelloch(x) ? "blelloch" : "hillis-steele";
    double wall = 0, comm = 0, median = 0;
    for (int r = 0; r < x->W; r++) {
        const float *a = all + K * r;
        st->busy[r] = a[0], st->comm[r] = a[1], st->wall[r] = a[2];
        st->peak_act_bytes[r] = (double)a[5] * 16777216.0 + (double)a[6];
        st->sim_peak_act_bytes[r] = r < x->sim.workers ? x->sim.worker[r].peak_act_bytes : 0;
        if (st->wgrad_steps) st->wgrad_steps[r] = (int)a[7];
        wall += a[3];
        comm += a[4];
        median += a[8] / x->W;
    }
    st->job_us = sp_exec_job_us(x);
    st->step_median = median;
    double n = x->steps > 1 ? (double)x->W * (double)(x->steps - 1) : NAN;
    st->step_mean = wall / n;
    st->comm_mean = comm / n;
    free(all);
    sp_exec_mem_gather(x, st);   /* exec_memory.c */
}

void sp_exec_stats_free(sp_exec_stats *st)
{
    free(st->busy);
    free(st->comm);
    free(st->wall);
    free(st->peak_act_bytes);
    free(st->sim_peak_act_bytes);
    free(st->wgrad_steps);
    free(st->peak_mem_bytes);
    free(st->pred_peak_mem_bytes);
}

/* An output of rank 0, written atomically (core/io/fileio.h). */
static FILE *open_out(sp_exec *x, sp_out *out, const char *flag, const char *path)
{
    if (sp_out_open(out, path, flag) != SP_OK) sp_comm_die(x->world, "%s", sp_last_error());
    return out->f;
}

static void close_out(sp_exec *x, sp_out *out)
{
    if (sp_out_commit(out) != SP_OK) sp_comm_die(x->world, "%s", sp_last_error());
}

static void write_order(sp_exec *x)
{
    int n = x->sched->njobs;
    float *mine = sp_xmalloc(sizeof(float) * (size_t)n), *all = sp_xmalloc(sizeof(float) * (size_t)n * (size_t)x->W);
    for (int i = 0; i < n; i++) mine[i] = i < x->norder ? (float)x->order_rec[i] : -1.0f;
    sp_allgather(x->world, mine, all, (size_t)n);
    if (x->rank == 0) {
        sp_out out;
        FILE *f = open_out(x, &out, "--exec-order", x->cfg.order_out);
        char lab[32];
        for (int r = 0; r < x->W; r++) {
            fprintf(f, "w%d", r);
            for (int i = 0; i < n && all[(size_t)r * n + i] >= 0; i++)
                fprintf(f, " %s", sp_job_label(x->sched, (int)all[(size_t)r * n + i], lab, sizeof lab));
            fputc('\n', f);
        }
        close_out(x, &out);
    }
    free(mine);
    free(all);
}

/* Chrome trace: one process per rank, thread 0 = compute jobs, thread 1 = collectives. */
static void write_trace(sp_exec *x)
{
    float cnt = (float)x->nev, *counts = sp_xmalloc(sizeof(float) * (size_t)x->W);
    sp_allgather(x->world, &cnt, counts, 1);
    int maxn = 0;
    for (int r = 0; r < x->W; r++) maxn = (int)counts[r] > maxn ? (int)counts[r] : maxn;
    size_t per = 4 * (size_t)maxn + 1;
    float *mine = sp_xcalloc(per, sizeof(float)), *all = sp_xmalloc(sizeof(float) * per * (size_t)x->W);
    /* Every rank's times on rank 0's clock (its offset, measured at the start), from rank
     * 0's first step: ranks on other machines line up as on one. */
    float o[2], *offs = sp_xmalloc(sizeof(float) * 2 * (size_t)x->W);
    split(x->trace_t0 + clock_skew(x), o);
    sp_broadcast(x->world, o, 2, 0);
    double origin = join(o) - x->clock_offset;   /* rank 0's first step, on this rank's clock */
    split(x->clock_offset, o);
    sp_allgather(x->world, o, offs, 2);
    for (int i = 0; i < x->nev; i++) {
        trace_ev *e = &x->ev[i];
        mine[4 * i] = (float)e->what;
        mine[4 * i + 1] = (float)e->step;
        mine[4 * i + 2] = (float)((e->t0 - origin) * 1e6);
        mine[4 * i + 3] = (float)((e->t1 - origin) * 1e6);
    }
    sp_allgather(x->world, mine, all, per);
    if (x->rank == 0) {
        sp_out out;
        FILE *f = open_out(x, &out, "--trace", x->cfg.trace_path);
        fprintf(f, "{\"traceEvents\": [\n");
        bool first = true;
        char lab[32];
        for (int r = 0; r < x->W; r++) {
            fprintf(f, "%s{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"rank %d\", "
                       "\"clock_offset_us\": %.3f}}",
                    first ? "" : ",\n", r, r, 1e6 * join(offs + 2 * r));
            first = false;
            fprintf(f, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"args\": {\"name\": "
                       "\"compute\"}}", r);
            fprintf(f, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 1, \"args\": {\"name\": "
                       "\"communication\"}}", r);
            fprintf(f, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 2, \"args\": {\"name\": "
                       "\"blocked on a gradient collective\"}}", r);
            for (int i = 0; i < (int)counts[r]; i++) {
                const float *e = all + (size_t)r * per + 4 * (size_t)i;
                int what = (int)e[0];
                bool wait = what <= WAIT_EV / 2;
                const char *name = what >= 0 ? sp_job_label(x->sched, what, lab, sizeof lab) : lab;
                if (what == WAIT_LOSS) snprintf(lab, sizeof lab, "loss allreduce");
                else if (wait) snprintf(lab, sizeof lab, "wait for bucket %d", WAIT_EV - what);
                else if (what < 0) snprintf(lab, sizeof lab, "gradient bucket %d", -1 - what);
                fprintf(f, ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, "
                           "\"ts\": %.1f, \"dur\": %.1f, \"args\": {\"step\": %d}}",
                        name, what >= 0 ? "job" : wait ? "wait" : "allreduce", r, what >= 0 ? 0 : wait ? 2 : 1, e[2],
                        e[3] - e[2], (int)e[1]);
            }
        }
        sp_exec_trace_predicted(x, f);
        fprintf(f, "\n]}\n");
        close_out(x, &out);
    }
    free(counts);
    free(mine);
    free(all);
    free(offs);
}

/* --costs-out: the stage costs this run measured (mean compute µs of each stage's F, δ
 * and G jobs over every rank and every step but the first), the calibration that
 * build/schedule --profile reads. Falls back to the planning costs after one step.
 * The mean, not the median: a step is a sum (and max) of jobs along the schedule's
 * critical path, and a mean of sums is the sum of the means, so the simulated latency
 * from mean job costs predicts the MEAN step (the JSON's "step_mean_ms", over the same
 * steps). Medians do not add: a median step leaves out the slow steps whose slow jobs
 * still raise the mean job costs (the bench once showed 1f1b at 0.91 of its compute-only
 * bound that way). The first step is left out of both: it warms the tapes and caches up,
 * and rank 0 has just measured the planning costs. The optimizer step of each stage is
 * measured likewise (the column opt, µs; 0 where no rank stepped the stage after the
 * first step; no column when nothing was measured, e.g. one step). */
static void write_costs(sp_exec *x)
{
    sp_costs *c = sp_exec_measured_costs(x);
    if (x->rank == 0) {
        sp_out out;
        FILE *f = open_out(x, &out, "--costs-out", x->cfg.costs_out);
        sp_costs_write_csv(f, c);
        close_out(x, &out);
    }
    sp_costs_free(c);
}

void sp_exec_finish(sp_exec *x)
{
    sp_exec_flush_updates(x);
    if (x->cfg.costs_out) write_costs(x);
    if (x->cfg.order_out) write_order(x);
    if (x->cfg.trace_path) write_trace(x);
    sp_exec_write_msgs(x);
}

