/* ooo_exec.c — the two-lane executor of ooo back-propagation and its trace writer.
 *
 * Two lanes, main (the calling thread) and sub (one persistent thread), pull tasks from
 * one priority queue: the ready tasks in the plan's order, the plan's main-lane tasks
 * (the δO chain, and the δW a policy keeps in place) before its sub-lane ones (δW, U);
 * an update that waits may be passed by the tasks behind it (first_ready).
 * So the policies' orders stay, and the executor is work-conserving: a lane never
 * idles while a task is ready, whichever lane the plan gave it to (EuroSys '22 §4.1
 * fixes each task to its stream; on a CPU a fixed lane left a core idle whenever its
 * queue's head waited on the other lane). A task whose predecessors are not done is
 * not ready: one dependency counter per task, decremented by each finished predecessor
 * (on a GPU, cudaEventRecord after a task and cudaStreamWaitEvent before it).
 *
 * Both cores for one task: on two threads each lane runs its ops single-threaded (the
 * engine sets lanes_inline), but when a lane takes the only ready task while the other
 * lane runs nothing (it waits with nothing to do, or its thread has not woken up yet),
 * the task runs on the thread pool, and a waiting lane sleeps instead of spinning, so
 * the two cores go to that task. An op's bits do not
 * depend on which thread runs it nor on whether its parallel_for runs inline (its
 * splits follow sp_get_threads()), and the graph orders every pair of tasks that write
 * the same memory, so every interleaving gives the linear engine's bits.
 *
 * The main lane returns from sp_ooo_exec_begin once the plan's main-lane tasks are done
 * (the async engine then starts the next forward); sp_ooo_exec_finish runs what is left
 * on the calling thread too, beside the sub lane.
 *
 * Memory cap: a plan main-lane task that would take the live bytes of the memory model
 * over the cap waits until every task before it in the plan's order is done; the first
 * task not done is then never held back, and once the earlier ones are done the live
 * bytes are at most what the order run one task at a time holds (ooo_policy.c has
 * checked that fits). The trace of a run is written by ooo_trace.c. */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/threads.h"
#include "schedulers/backward/engines.h"
#include "schedulers/backward/ooo.h"

typedef struct run_ctx {
    sp_tape *tape;
    const sp_ooo_graph *g;
    const sp_ooo_plan *p;
    sp_ooo_exec_cfg cfg;
    sp_ooo_run *run;
    double t0;
    _Atomic int *remaining;   /* [ntasks] unfinished predecessors */
    _Atomic int *done;        /* [ntasks] */
    _Atomic int *left;        /* [nbuf] users of each buffer still to finish */
    _Atomic size_t live, peak;
    _Atomic int *taken;       /* [ntasks] claimed by a lane */
    _Atomic int head[2];      /* per plan queue: every task before this one is taken */
    _Atomic int frontier;     /* plan position of the first task not done */
    _Atomic int main_left;    /* the plan's main-lane tasks not done */
    _Atomic int all_left;     /* executable tasks not done */
    _Atomic int idle[2];      /* the lane runs no task: it waits, or has not started */
    _Atomic int failed;       /* a task ended in sp_fail: both lanes stop, finish reports it */
    _Atomic int wide;         /* a lane runs a task on the thread pool (both cores) */
    bool fuse;                /* one lane: a δO runs with its node's δW as one call */
    int *dw_of;               /* [ntasks] the δW of a δO's node that one call can run with it, or -1 */
    sp_tape *main_scratch;
} run_ctx;

/* Two lanes or one, measured: the step-to-step time of each mode on this backward (keyed
 * by its task count and flops), in a probe window of TUNE_PAIRS pairs of steps, two lanes
 * then one, each pair giving the ratio of its two times; the median ratio decides, two
 * lanes only where they are faster by TUNE_MARGIN, and the pick runs until the next
 * window, TUNE_REPROBE steps later. Adjacent steps share the machine's state (another
 * tenant's load on a shared machine comes and goes over seconds), so their ratio is
 * steadier than two separately kept estimates: a lowest time of each mode favours the
 * one whose time varies more, and an average of one mode against an old figure of the
 * other flips back and forth when the load changes. Both modes give the same bits; only
 * the time differs, and which is faster depends on the machine and the model
 * (docs/OOO.md). */
enum { TUNE_PAIRS = 4, TUNE_WINDOW = 2 * TUNE_PAIRS, TUNE_REPROBE = 64 };
#define TUNE_MARGIN 0.98   /* two lanes: at most this times one lane's step, as the median of the pairs */
typedef struct lane_tuner {
    int nexec;
    double work;
    long steps;              /* steps seen with this key */
    long window;             /* the step the current probe window began at */
    int prev;                /* mode of the previous step: 0 one lane, 1 two lanes, -1 none */
    double prev_begin;       /* when it began */
    double two;              /* the window's pending two-lane time (its pair's first), 0 = none */
    double ratio[TUNE_PAIRS];
    int nratio;
    int pick;                /* 0 one lane, 1 two lanes, -1 not yet decided */
    bool used;               /* the last backward's mode came from this tuner */
} lane_tuner;

struct sp_ooo_exec {
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* every state change: task done, work posted, lane idle */
    _Atomic int waiters;      /* lanes blocked on cv for a task: only then signal     */
    pthread_t sub;
    bool sub_started, quit, sub_busy;
    sp_tape main_scratch;     /* the main lane's arena for op scratch, reset by begin */
    size_t scratch_total;     /* most op scratch either lane has held at once         */
    unsigned generation;
    run_ctx *cur;
    lane_tuner tune;
    char failure[512];        /* the first failed task's message (written by its lane once) */
};

static int exec_join(sp_ooo_exec *x);

/* ---- one task ------------------------------------------------------------------------ */

static void run_task(run_ctx *c, const sp_ooo_task *t, int lane, bool with_dw)
{
    /* The tape's arena is not thread-safe: the op sees a copy of its node whose scratch
     * comes from the running lane's own arena (either lane may take any task). */
    sp_node view;
    sp_tape *lt = NULL;
    sp_arena_mark mark = {0};
    if (t->node) {
        view = *t->node;
        view.tape = lt = lane == SP_OOO_SUB ? c->cfg.sub_tape : c->main_scratch;
        /* the task's scratch goes back to its lane when it returns (the next task's
         * scratch then lands on memory still in cache), unless the op left some for a
         * later call of the step (conv2d's blocked dy: scratch_kept) */
        mark = sp_arena_mark_get(&lt->arena);
        lt->scratch_kept = false;
    }
    switch (t->kind) {
    case SP_OOO_DO:   /* exactly as reverse.c: with its δW, the node's one pass for both */
        if (with_dw) sp_node_backward(&view);
        else sp_node_backward_inputs(&view);
        break;
    case SP_OOO_DW: t->node->kern->backward_params(&view, &t->node->grad); break;
    case SP_OOO_U: c->cfg.update(c->cfg.update_ctx, t->layer); break;
    case SP_OOO_F: break;
    }
    if (lt && !lt->scratch_kept) sp_arena_release(&lt->arena, mark);
}

/* ---- the lanes ---------------------------------------------------------------------- */

static bool mem_blocked(run_ctx *c, int id)
{
    if (!c->cfg.mem_cap || c->p->lane[id] != SP_OOO_MAIN) return false;
    size_t need = atomic_load(&c->live) + c->g->tasks[id].alloc;
    return need > c->cfg.mem_cap && atomic_load(&c->frontier) < c->p->pos[id];
}

/* Moves a queue's head over the tasks already taken at its front. */
static void advance_head(run_ctx *c, int q)
{
    int h = atomic_load(&c->head[q]);
    while (h < c->p->nqueue[q] && atomic_load(&c->taken[c->p->queue[q][h]]))
        if (atomic_compare_exchange_weak(&c->head[q], &h, h + 1)) h++;
}

/* The task a lane takes next: the first ready task of the plan's main-lane queue, else
 * of its sub-lane queue; -1 if none. Each queue is taken in the plan's order, with one
 * exception: an update U_i that is not ready yet (its δW_i runs on the other lane) may
 * be passed by the tasks behind it, so that a δW never waits behind an update that
 * waits for the other lane (a core left idle): the δW keep their order (what the
 * policies decide) and a U runs as soon as it can.
 * Under a memory cap the queues stay strict: the cap's bound relies on it (see the top
 * of this file). */
static int first_ready(run_ctx *c, int q, bool claim_it)
{
    int n = c->p->nqueue[q];
    for (int i = atomic_load(&c->head[q]); i < n; i++) {
        int id = c->p->queue[q][i];
        if (atomic_load(&c->taken[id])) continue;
        if (atomic_load(&c->remaining[id]) != 0 || mem_blocked(c, id)) {
            if (c->g->tasks[id].kind == SP_OOO_U && !c->cfg.mem_cap) continue;   /* may be passed */
            return -1;
        }
        if (!claim_it) return id;
        int no = 0;
        if (!atomic_compare_exchange_strong(&c->taken[id], &no, 1)) continue;   /* the other lane took it */
        advance_head(c, q);
        return id;
    }
    return -1;
}

static bool any_ready(run_ctx *c) { return first_ready(c, SP_OOO_MAIN, false) >= 0 || first_ready(c, SP_OOO_SUB, false) >= 0; }

/* Takes the next task (see first_ready); *more: whether another task is ready too. */
static int claim(run_ctx *c, bool *more)
{
    int id = first_ready(c, SP_OOO_MAIN, true);
    if (id < 0) id = first_ready(c, SP_OOO_SUB, true);
    if (id >= 0) *more = any_ready(c);
    return id;
}

static void mem_start(run_ctx *c, const sp_ooo_task *t)
{
    size_t live = atomic_fetch_add(&c->live, t->alloc) + t->alloc;
    size_t peak = atomic_load(&c->peak);
    while (live > peak && !atomic_compare_exchange_weak(&c->peak, &peak, live)) {
    }
}

static void mem_end(run_ctx *c, const sp_ooo_task *t)
{
    size_t freed = t->scratch;
    for (int u = 0; u < t->nuse; u++)
        if (atomic_fetch_sub(&c->left[t->use[u]], 1) == 1) freed += c->g->buf_bytes[t->use[u]];
    atomic_fetch_sub(&c->live, freed);
}

/* Wakes blocked lanes after a task's counters were updated. Every access is seq_cst: a
 * waiter raises `waiters` before re-checking its condition, and we update the counters
 * before reading `waiters`, so either it sees our update or we see it waiting. Skipping
 * the futex when nobody waits keeps a task's hand-off to a few atomics. */
static void signal_done(sp_ooo_exec *x)
{
    if (atomic_load(&x->waiters) == 0) return;
    pthread_mutex_lock(&x->mu);
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
}

/* How long a lane spins for the other lane's event before it sleeps: tasks of a small
 * model are 5–100 µs apart, and a futex wake-up on a VM costs tens of µs. */
#define LANE_SPIN_S 200e-6
/* A task goes wide (both cores) only above this many flops: waking the pool costs µs. */
#define WIDE_MIN_FLOPS 2e5
/* Below this many flops in a whole backward, the sub lane is not woken: the main lane
 * runs the plan alone, with the thread pool, as the linear engine would. A hand-off
 * between threads costs tens of µs on a VM (more under load), and a backward this small
 * (LeNet-5 at batch 16: ~3e7) has too little beside its δ chain to pay for them. */
static double g_min_two_lane_flops = 5e7;

/* Measure which lane mode is faster (lane_tuner); off when a test forces two lanes. */
static bool g_tune_lanes = true;

void sp_ooo_exec_set_min_two_lane_flops(double flops)
{
    g_min_two_lane_flops = flops;
    g_tune_lanes = flops > 0;
}

void sp_ooo_exec_set_lane_tuning(bool on) { g_tune_lanes = on; }

int sp_ooo_exec_tuned_lanes(const sp_ooo_exec *x)
{
    const lane_tuner *u = &x->tune;
    if (!u->used || u->pick < 0) return 0;
    return u->pick ? 2 : 1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The window's pick: two lanes where the median of its ratios (two lanes' time over one
 * lane's) is at most TUNE_MARGIN; one lane where it is not, or where outliers left fewer
 * than two pairs. */
static int window_pick(lane_tuner *u)
{
    if (u->nratio < 2) return 0;
    double r[TUNE_PAIRS];
    memcpy(r, u->ratio, (size_t)u->nratio * sizeof *r);
    qsort(r, (size_t)u->nratio, sizeof *r, cmp_double);
    int n = u->nratio;
    double med = n % 2 ? r[n / 2] : 0.5 * (r[n / 2 - 1] + r[n / 2]);
    return med <= TUNE_MARGIN;
}

static bool tuner_step(lane_tuner *u, int nexec, double work, double now);

/* Whether this step runs on two lanes: the caller's choice (lanes 1 or 2, --lanes),
 * else the size rule, then the measured choice. A forced step is not timed: the tuner
 * starts over from its next tuned step's begin. */
static bool choose_two_lanes(lane_tuner *u, int lanes, int nexec, double work, double now)
{
    u->used = false;
    if (lanes == 1 || lanes == 2 || work < g_min_two_lane_flops) {
        u->prev = -1;
        return lanes == 2;
    }
    if (!g_tune_lanes) return true;
    u->used = true;
    return tuner_step(u, nexec, work, now);
}

/* The tuner's step: this step's mode (true: two lanes), from the times so far. */
static bool tuner_step(lane_tuner *u, int nexec, double work, double now)
{
    if (u->nexec != nexec || u->work != work)   /* another backward: start over */
        *u = (lane_tuner){.nexec = nexec, .work = work, .prev = -1, .pick = -1};
    long k = u->steps++, at = k - u->window;
    bool probing = at <= TUNE_WINDOW;   /* the window's steps, and the begin after its last */
    if (probing && u->prev >= 0) {   /* the previous step's time: the first or second of a pair */
        double dt = now - u->prev_begin;
        if (u->prev == 1) u->two = dt;
        else if (u->two > 0) {
            /* an evaluation or a checkpoint between two steps is no step: not a pair */
            if (u->two < 3 * dt && dt < 3 * u->two && u->nratio < TUNE_PAIRS) u->ratio[u->nratio++] = u->two / dt;
            u->two = 0;
        }
    }
    if (at == TUNE_WINDOW) {   /* the window's last time is in: decide */
        u->pick = window_pick(u);
        u->nratio = 0;
        u->two = 0;
    }
    if (at >= TUNE_REPROBE && u->pick >= 0) {   /* a new window */
        u->window = k;
        at = 0;
    }
    int mode = at < TUNE_WINDOW ? (int)(at % 2 == 0) : u->pick;   /* two, one, two, … then the pick */
    u->prev = mode;
    u->prev_begin = now;
    return mode == 1;
}

int sp_ooo_lane_tuner_replay(double (*dur)(long step, int mode, void *ctx), void *ctx, long n, int *modes)
{
    lane_tuner u = {.prev = -1};
    double now = 0;
    for (long k = 0; k < n; k++) {
        int mode = tuner_step(&u, 1, 1.0, now);   /* one backward */
        modes[k] = mode;
        now += dur(k, mode, ctx);
    }
    (void)tuner_step(&u, 1, 1.0, now);   /* the last step's time is in */
    return u.pick;
}

/* A task's arithmetic from its op's cost model (est may hold last step's seconds). */
static double task_flops(const sp_ooo_task *t)
{
    if ((t->kind != SP_OOO_DO && t->kind != SP_OOO_DW) || !t->node->op->cost) return 0;
    sp_cost k = t->node->op->cost(t->node);
    return t->kind == SP_OOO_DO ? k.bwd_input_flops : k.bwd_params_flops;
}

typedef struct lane_wait {
    run_ctx *c;
    int lane;
    bool all;   /* main: stay until every task is done, not only the plan's main-lane ones */
} lane_wait;

static bool lane_finished(const lane_wait *w)
{
    return atomic_load(&w->c->all_left) == 0 || atomic_load(&w->c->failed) ||
           (w->lane == SP_OOO_MAIN && !w->all && atomic_load(&w->c->main_left) == 0);
}

static bool lane_may_go(void *arg)
{
    lane_wait *w = arg;
    return lane_finished(w) || any_ready(w->c) || atomic_load(&w->c->wide) || sp_parallel_help_open();
}

static bool lane_may_go_now(void *arg)
{
    lane_wait *w = arg;
    return lane_finished(w) || any_ready(w->c) || sp_parallel_help_open();
}

/* The other lane offers chunks of its op (core/threads.h): wake this one if it sleeps. */
static void help_wake(void *arg) { signal_done(arg); }

static void advance_frontier(run_ctx *c)
{
    int f = atomic_load(&c->frontier);
    while (f < c->g->nexec && atomic_load(&c->done[c->p->seq[f]]))
        if (atomic_compare_exchange_weak(&c->frontier, &f, f + 1)) f++;
}

/* A task under sp_try, so that an sp_fail in its op comes back to the lane (the sub lane
 * has no caller to return to): the step then stops and sp_ooo_exec_finish reports it. */
typedef struct task_call {
    run_ctx *c;
    const sp_ooo_task *t;
    int lane;
    bool with_dw;
} task_call;

static void task_call_run(void *arg)
{
    task_call *a = arg;
    run_task(a->c, a->t, a->lane, a->with_dw);
}

/* Task id has run on lane from a to b (with: the task that ran in the same call, or -1). */
static void task_done(run_ctx *c, int id, int lane, double a, double b, int with)
{
    const sp_ooo_task *t = &c->g->tasks[id];
    c->run->start[id] = a - c->t0;
    c->run->end[id] = b - c->t0;
    c->run->ran_on[id] = lane;
    c->run->with[id] = with;
    mem_end(c, t);
    for (int s = 0; s < t->nsucc; s++) atomic_fetch_sub(&c->remaining[t->succ[s]], 1);
    atomic_store(&c->done[id], 1);   /* cudaEventRecord */
    advance_frontier(c);
    if (c->p->lane[id] == SP_OOO_MAIN) atomic_fetch_sub(&c->main_left, 1);
    atomic_fetch_sub(&c->all_left, 1);
}

static void run_lane(sp_ooo_exec *x, run_ctx *c, int lane, bool all)
{
    lane_wait w = {c, lane, all};
    int other = 1 - lane;
    for (;;) {
        bool more = false;
        int id = -1;
        while (!lane_finished(&w) && (id = claim(c, &more)) < 0) {
            if (sp_parallel_help()) continue;   /* ran chunks of the other lane's op */
            atomic_store(&c->idle[lane], 1);
            if (atomic_load(&c->wide) || !sp_spin_until(lane_may_go, &w, LANE_SPIN_S) || atomic_load(&c->wide)) {
                pthread_mutex_lock(&x->mu);
                atomic_fetch_add(&x->waiters, 1);   /* before the re-check: see signal_done */
                while (!lane_may_go_now(&w)) pthread_cond_wait(&x->cv, &x->mu);
                atomic_fetch_sub(&x->waiters, 1);
                pthread_mutex_unlock(&x->mu);
            }
        }
        /* running a task, or gone: the main lane may be running the next forward on
         * the pool after it returns (the async engine) */
        atomic_store(&c->idle[lane], 0);
        if (id < 0) return;
        const sp_ooo_task *t = &c->g->tasks[id];
        /* the other lane waits and nothing else is ready: this task gets both cores */
        bool wide = c->cfg.lanes_inline && !more && atomic_load(&c->idle[other]) && task_flops(t) >= WIDE_MIN_FLOPS;
        if (wide) {
            atomic_store(&c->wide, 1);
            sp_parallel_set_inline(false);
        }
        /* one lane: a δO whose node's δW is ready too runs with it as one call, the op's
         * one pass for both (the linear engine's: conv2d's padded dy, batch norm's sums)
         * instead of two passes, the second long after the first's data left the cache */
        int dw = c->fuse && t->kind == SP_OOO_DO ? c->dw_of[id] : -1;
        if (dw >= 0) {
            int no = 0;
            if (atomic_load(&c->remaining[dw]) != 0 || !atomic_compare_exchange_strong(&c->taken[dw], &no, 1)) dw = -1;
            else advance_head(c, c->p->lane[dw]);
        }
        mem_start(c, t);
        if (dw >= 0) mem_start(c, &c->g->tasks[dw]);
        double a = sp_now();
        task_call call = {c, t, lane, dw >= 0};
        if (sp_try(task_call_run, &call) != SP_OK) {   /* an sp_fail in the op, on either lane */
            if (!atomic_exchange(&c->failed, 1)) snprintf(x->failure, sizeof x->failure, "%s", sp_last_error());
            if (wide) {
                sp_parallel_set_inline(true);
                atomic_store(&c->wide, 0);
            }
            atomic_store(&c->idle[lane], 1);
            signal_done(x);   /* the other lane stops waiting: lane_finished */
            return;
        }
        double b = sp_now();
        if (wide) {
            sp_parallel_set_inline(true);
            atomic_store(&c->wide, 0);
        }
        c->run->busy[lane] += b - a;
        task_done(c, id, lane, a, b, dw);
        if (dw >= 0) task_done(c, dw, lane, b, b, id);   /* its time is in the δO's span */
        signal_done(x);
    }
}

static void *sub_main(void *arg)
{
    sp_ooo_exec *x = arg;
    unsigned seen = 0;
    pthread_mutex_lock(&x->mu);
    for (;;) {
        while (x->generation == seen && !x->quit) pthread_cond_wait(&x->cv, &x->mu);
        if (x->quit) break;
        seen = x->generation;
        run_ctx *c = x->cur;
        pthread_mutex_unlock(&x->mu);
        sp_parallel_set_inline(c->cfg.lanes_inline);   /* as the main lane (ooo.c) */
        run_lane(x, c, SP_OOO_SUB, true);
        pthread_mutex_lock(&x->mu);
        x->sub_busy = false;
        pthread_cond_broadcast(&x->cv);
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

sp_ooo_exec *sp_ooo_exec_new(void)
{
    sp_ooo_exec *x = sp_xcalloc(1, sizeof *x);
    pthread_mutex_init(&x->mu, NULL);
    pthread_cond_init(&x->cv, NULL);
    sp_tape_init(&x->main_scratch);
    return x;
}

void sp_ooo_exec_free(sp_ooo_exec *x)
{
    if (!x) return;
    if (x->cur) (void)exec_join(x);   /* a failed step's message was reported at its sync */
    sp_parallel_set_help_notify(NULL, NULL);
    if (x->sub_started) {
        pthread_mutex_lock(&x->mu);
        x->quit = true;
        pthread_cond_broadcast(&x->cv);
        pthread_mutex_unlock(&x->mu);
        pthread_join(x->sub, NULL);
    }
    pthread_cond_destroy(&x->cv);
    pthread_mutex_destroy(&x->mu);
    sp_tape_free(&x->main_scratch);
    free(x);
}

void sp_ooo_exec_begin(sp_ooo_exec *x, sp_tape *t, const sp_ooo_graph *g, const sp_ooo_plan *p,
                       const sp_ooo_exec_cfg *cfg, sp_ooo_run *run)
{
    sp_ooo_exec_finish(x);
    /* Either lane may take any task: each lane's arena is kept one block of at least the
     * most scratch either lane has held at once (an allocation that size, then a reset,
     * which merges the blocks), so a task that moves to the other lane rarely mallocs.
     * A task's scratch goes back when it returns (run_task), so a lane holds the scratch
     * kept for later calls (conv2d's blocked dy) and one task's. */
    sp_tape *lanes[2] = {&x->main_scratch, cfg->sub_tape};
    for (int l = 0; l < 2; l++) {
        if (!lanes[l]) continue;
        sp_tape_reset(lanes[l]);
        lanes[l]->scratch_lives_step = true;   /* reset here only: conv2d's δ and G share dy's reorder */
        lanes[l]->scratch_kept = false;
        if (x->scratch_total) {
            sp_tape_alloc(lanes[l], x->scratch_total);
            sp_tape_reset(lanes[l]);
        }
    }
    run_ctx *c = sp_tape_alloc(t, sizeof *c);
    *c = (run_ctx){.tape = t, .g = g, .p = p, .cfg = *cfg, .run = run, .main_scratch = &x->main_scratch};
    c->remaining = sp_tape_alloc(t, (size_t)(g->ntasks + 1) * sizeof(_Atomic int));
    c->done = sp_tape_alloc(t, (size_t)(g->ntasks + 1) * sizeof(_Atomic int));
    c->taken = sp_tape_alloc(t, (size_t)(g->ntasks + 1) * sizeof(_Atomic int));
    c->left = sp_tape_alloc(t, (size_t)(g->nbuf + 1) * sizeof(_Atomic int));
    for (int i = 0; i < g->ntasks; i++) {
        atomic_init(&c->remaining[i], g->tasks[i].npred);
        atomic_init(&c->done[i], 0);
        atomic_init(&c->taken[i], 0);
    }
    atomic_init(&c->frontier, 0);
    atomic_init(&c->head[0], 0);
    atomic_init(&c->head[1], 0);
    atomic_init(&c->main_left, p->nqueue[SP_OOO_MAIN]);
    atomic_init(&c->all_left, g->nexec);
    /* No lane runs a task yet: the sub lane's thread may take tens of µs to wake on a
     * VM (more under load), and a descheduled main thread as long; until a lane claims
     * a task, the other lane's tasks may take both cores. */
    atomic_init(&c->idle[SP_OOO_MAIN], 1);
    atomic_init(&c->idle[SP_OOO_SUB], 1);
    atomic_init(&c->wide, 0);
    for (int b = 0; b < g->nbuf; b++) atomic_init(&c->left[b], g->buf_users[b]);
    atomic_init(&c->live, g->start_bytes);
    atomic_init(&c->peak, g->start_bytes);
    memset(run, 0, sizeof *run);
    run->graph = g;
    run->plan = p;
    run->start = sp_tape_alloc(t, (size_t)(g->ntasks + 1) * sizeof(double));
    run->end = sp_tape_alloc(t, (size_t)(g->ntasks + 1) * sizeof(double));
    memset(run->start, 0, (size_t)g->ntasks * sizeof(double));
    memset(run->end, 0, (size_t)g->ntasks * sizeof(double));
    run->ran_on = sp_tape_alloc(t, (size_t)(g->ntasks + 1) * sizeof(int));
    memset(run->ran_on, 0, (size_t)g->ntasks * sizeof(int));
    run->with = sp_tape_alloc(t, (size_t)(g->ntasks + 1) * sizeof(int));
    for (int i = 0; i < g->ntasks; i++) run->with[i] = -1;
    /* δO and δW of one node that one call can run (sp_node_backward's one pass), for a
     * step on one lane; not under a memory cap, whose bound holds for the plan's order */
    c->dw_of = sp_tape_alloc(t, (size_t)(g->ntasks + 1) * sizeof(int));
    int *dw_at = sp_tape_alloc(t, (size_t)(t->n + 1) * sizeof(int));
    for (int i = 0; i < t->n; i++) dw_at[i] = -1;
    for (int i = 0; i < g->nexec; i++)
        if (g->tasks[i].kind == SP_OOO_DW) dw_at[g->tasks[i].node->index] = i;
    for (int i = 0; i < g->ntasks; i++) {
        const sp_ooo_task *k = &g->tasks[i];
        c->dw_of[i] = i < g->nexec && k->kind == SP_OOO_DO && sp_node_backward_fuses(k->node) ? dw_at[k->node->index] : -1;
    }
    c->t0 = sp_now();
    double work = 0;
    for (int i = 0; i < g->nexec; i++) work += task_flops(&g->tasks[i]);
    run->lanes = p->nqueue[SP_OOO_SUB] > 0 ? 2 : 1;
    x->tune.used = false;   /* until choose_two_lanes tunes this backward */
    if (p->nqueue[SP_OOO_SUB] > 0 && !choose_two_lanes(&x->tune, cfg->lanes, g->nexec, work, c->t0)) {   /* one lane */
        run->lanes = 1;
        c->fuse = !cfg->mem_cap;
        x->cur = c;
        atomic_store(&c->idle[SP_OOO_SUB], 0);   /* the pool is this lane's already: no wide hand-off */
        if (cfg->lanes_inline) sp_parallel_set_inline(false);
        run_lane(x, c, SP_OOO_MAIN, true);
        if (cfg->lanes_inline) sp_parallel_set_inline(true);
        run->main_done = sp_now() - c->t0;
        return;
    }
    if (p->nqueue[SP_OOO_SUB] > 0) {
        if (cfg->lanes_inline) sp_parallel_set_help_notify(help_wake, x);   /* until finish */
        if (!x->sub_started) {   /* first two-lane step only */
            if (pthread_create(&x->sub, NULL, sub_main, x)) sp_fail("ooo: cannot start the sub-lane thread");
            x->sub_started = true;
        }
        pthread_mutex_lock(&x->mu);
        x->cur = c;
        x->sub_busy = true;
        x->generation++;
        pthread_cond_broadcast(&x->cv);
        pthread_mutex_unlock(&x->mu);
    } else {   /* a plan of one lane (the conventional order, or two threads short) */
        c->fuse = !cfg->mem_cap;
        x->cur = c;
    }
    run_lane(x, c, SP_OOO_MAIN, false);
    run->main_done = sp_now() - c->t0;
}

void sp_ooo_exec_wait_task(sp_ooo_exec *x, int task)
{
    run_ctx *c = x->cur;
    if (!c || atomic_load(&c->done[task])) return;
    pthread_mutex_lock(&x->mu);
    atomic_fetch_add(&x->waiters, 1);
    while (!atomic_load(&c->done[task]) && !atomic_load(&c->failed)) pthread_cond_wait(&x->cv, &x->mu);
    atomic_fetch_sub(&x->waiters, 1);
    pthread_mutex_unlock(&x->mu);
    if (atomic_load(&c->failed)) sp_ooo_exec_finish(x);   /* the task never ran: report the failure */
}

bool sp_ooo_exec_busy(const sp_ooo_exec *x) { return x->cur != NULL; }

bool sp_ooo_exec_all_done(const sp_ooo_exec *x) { return x->cur && atomic_load(&x->cur->all_left) == 0; }

/* Both lanes out of the step; SP_ERR (the failed task's message in x->failure) when a
 * task failed, the step left unfinished. */
static int exec_join(sp_ooo_exec *x)
{
    run_ctx *c = x->cur;
    run_lane(x, c, SP_OOO_MAIN, true);   /* what is left, beside the sub lane */
    pthread_mutex_lock(&x->mu);
    while (x->sub_busy) pthread_cond_wait(&x->cv, &x->mu);
    pthread_mutex_unlock(&x->mu);
    sp_parallel_set_help_notify(NULL, NULL);   /* both lanes are out: nobody to help */
    if (!atomic_load(&c->failed)) return SP_OK;
    x->cur = NULL;
    return SP_ERR;
}

void sp_ooo_exec_finish(sp_ooo_exec *x)
{
    run_ctx *c = x->cur;
    if (!c) return;
    if (exec_join(x) != SP_OK) sp_fail("%s", x->failure);   /* to the caller's sp_try or guard */
    size_t scratch = x->main_scratch.arena.high_water;
    if (c->cfg.sub_tape && c->cfg.sub_tape->arena.high_water > scratch) scratch = c->cfg.sub_tape->arena.high_water;
    if (scratch > x->scratch_total) x->scratch_total = scratch;
    sp_ooo_run *run = c->run;
    const sp_ooo_graph *g = c->g;
    run->wall = sp_now() - c->t0;
    run->peak_bytes = atomic_load(&c->peak);
    run->scratch_live_bytes = x->main_scratch.arena.used_total + (c->cfg.sub_tape ? c->cfg.sub_tape->arena.used_total : 0);
    for (int i = g->nexec; i < g->ntasks; i++) {   /* F': when the next forward could start */
        double at = 0;
        for (int q = 0; q < g->tasks[i].npred; q++) {
            int pr = g->tasks[i].pred[q];
            if (run->end[pr] > at) at = run->end[pr];
        }
        run->start[i] = run->end[i] = at;
    }
    x->cur = NULL;
}
