/* ooo_exec.c — the two-lane executor of ooo back-propagation and its trace writer.
 *
 * A lane is an in-order queue of tasks, like a CUDA stream: main (the calling thread)
 * runs δO, sub (one persistent thread) runs δW and U (EuroSys '22 §4.1, main-stream and
 * sub-stream). A task whose predecessor sits on the other lane waits on that task's
 * completion — an event: one dependency counter per task, decremented by each finished
 * predecessor. So the CUDA version is the same loop with cudaEventRecord after a task
 * and cudaStreamWaitEvent before it; nothing else changes.
 *
 * Memory cap: before a main task would take the live bytes of the memory model over the
 * cap, main waits for the sub tasks that come before it in the plan's order; those only
 * depend on tasks earlier in that order, so they always finish, and once they have, the
 * live bytes are at most what the order run one task at a time holds (ooo_policy.c has
 * checked that fits). The trace of a run is written by ooo_trace.c. */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/parallel.h"
#include "schedulers/engines.h"
#include "schedulers/ooo.h"

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
    _Atomic int sub_next;     /* plan position of the sub lane's next unfinished task */
} run_ctx;

struct sp_ooo_exec {
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* every state change: task done, work posted, lane idle */
    _Atomic int waiters;      /* lanes blocked on cv for a task: only then signal     */
    pthread_t sub;
    bool sub_started, quit, sub_busy;
    unsigned generation;
    run_ctx *cur;
};

/* ---- one task ------------------------------------------------------------------------ */

static void run_task(run_ctx *c, const sp_ooo_task *t, int lane)
{
    switch (t->kind) {
    case SP_OOO_DO: sp_node_backward_inputs(t->node); break;   /* exactly as linear.c */
    case SP_OOO_DW: {
        /* The tape's arena is not thread-safe: on the sub lane the op sees a copy of its
         * node whose scratch comes from the lane's own arena. */
        sp_node view = *t->node;
        if (lane == SP_OOO_SUB) view.tape = c->cfg.sub_tape;
        t->node->op->backward_params(&view, &t->node->grad);
        break;
    }
    case SP_OOO_U: c->cfg.update(c->cfg.update_ctx, t->layer); break;
    case SP_OOO_F: break;
    }
}

/* ---- the lanes ---------------------------------------------------------------------- */

static bool mem_blocked(run_ctx *c, int id)
{
    if (!c->cfg.mem_cap) return false;
    size_t need = atomic_load(&c->live) + c->g->tasks[id].alloc;
    return need > c->cfg.mem_cap && atomic_load(&c->sub_next) < c->p->pos[id];
}

static bool can_start(run_ctx *c, int id, int lane)
{
    return atomic_load(&c->remaining[id]) == 0 && (lane != SP_OOO_MAIN || !mem_blocked(c, id));
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

typedef struct start_wait {
    run_ctx *c;
    int id, lane;
} start_wait;

static bool startable(void *arg)
{
    start_wait *w = arg;
    return can_start(w->c, w->id, w->lane);
}

static void run_lane(sp_ooo_exec *x, run_ctx *c, int lane)
{
    const int *q = c->p->queue[lane];
    int n = c->p->nqueue[lane];
    for (int i = 0; i < n; i++) {
        int id = q[i];
        const sp_ooo_task *t = &c->g->tasks[id];
        if (!sp_spin_until(startable, &(start_wait){c, id, lane}, LANE_SPIN_S)) {   /* cudaStreamWaitEvent */
            pthread_mutex_lock(&x->mu);
            atomic_fetch_add(&x->waiters, 1);   /* before the re-check: see signal_done */
            while (!can_start(c, id, lane)) pthread_cond_wait(&x->cv, &x->mu);
            atomic_fetch_sub(&x->waiters, 1);
            pthread_mutex_unlock(&x->mu);
        }
        mem_start(c, t);
        double a = sp_now();
        run_task(c, t, lane);
        double b = sp_now();
        c->run->start[id] = a - c->t0;
        c->run->end[id] = b - c->t0;
        c->run->busy[lane] += b - a;
        mem_end(c, t);
        for (int s = 0; s < t->nsucc; s++) atomic_fetch_sub(&c->remaining[t->succ[s]], 1);
        if (lane == SP_OOO_SUB) atomic_store(&c->sub_next, i + 1 < n ? c->p->pos[q[i + 1]] : INT_MAX);
        atomic_store(&c->done[id], 1);   /* cudaEventRecord */
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
        run_lane(x, c, SP_OOO_SUB);
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
    return x;
}

void sp_ooo_exec_free(sp_ooo_exec *x)
{
    if (!x) return;
    sp_ooo_exec_finish(x);
    if (x->sub_started) {
        pthread_mutex_lock(&x->mu);
        x->quit = true;
        pthread_cond_broadcast(&x->cv);
        pthread_mutex_unlock(&x->mu);
        pthread_join(x->sub, NULL);
    }
    pthread_cond_destroy(&x->cv);
    pthread_mutex_destroy(&x->mu);
    free(x);
}

void sp_ooo_exec_begin(sp_ooo_exec *x, sp_tape *t, const sp_ooo_graph *g, const sp_ooo_plan *p,
                       const sp_ooo_exec_cfg *cfg, sp_ooo_run *run)
{
    sp_ooo_exec_finish(x);
    run_ctx *c = sp_tape_alloc(t, sizeof *c);
    *c = (run_ctx){.tape = t, .g = g, .p = p, .cfg = *cfg, .run = run};
    c->remaining = sp_tape_alloc(t, (size_t)(g->ntasks + 1) * sizeof(_Atomic int));
    c->done = sp_tape_alloc(t, (size_t)(g->ntasks + 1) * sizeof(_Atomic int));
    c->left = sp_tape_alloc(t, (size_t)(g->nbuf + 1) * sizeof(_Atomic int));
    for (int i = 0; i < g->ntasks; i++) {
        atomic_init(&c->remaining[i], g->tasks[i].npred);
        atomic_init(&c->done[i], 0);
    }
    for (int b = 0; b < g->nbuf; b++) atomic_init(&c->left[b], g->buf_users[b]);
    atomic_init(&c->live, g->start_bytes);
    atomic_init(&c->peak, g->start_bytes);
    atomic_init(&c->sub_next, p->nqueue[SP_OOO_SUB] > 0 ? p->pos[p->queue[SP_OOO_SUB][0]] : INT_MAX);
    memset(run, 0, sizeof *run);
    run->graph = g;
    run->plan = p;
    run->start = sp_tape_alloc(t, (size_t)(g->ntasks + 1) * sizeof(double));
    run->end = sp_tape_alloc(t, (size_t)(g->ntasks + 1) * sizeof(double));
    memset(run->start, 0, (size_t)g->ntasks * sizeof(double));
    memset(run->end, 0, (size_t)g->ntasks * sizeof(double));
    c->t0 = sp_now();
    if (p->nqueue[SP_OOO_SUB] > 0) {
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
    } else {
        x->cur = c;
    }
    run_lane(x, c, SP_OOO_MAIN);
    run->main_done = sp_now() - c->t0;
}

void sp_ooo_exec_wait_task(sp_ooo_exec *x, int task)
{
    run_ctx *c = x->cur;
    if (!c || atomic_load(&c->done[task])) return;
    pthread_mutex_lock(&x->mu);
    atomic_fetch_add(&x->waiters, 1);
    while (!atomic_load(&c->done[task])) pthread_cond_wait(&x->cv, &x->mu);
    atomic_fetch_sub(&x->waiters, 1);
    pthread_mutex_unlock(&x->mu);
}

bool sp_ooo_exec_busy(const sp_ooo_exec *x) { return x->cur != NULL; }

void sp_ooo_exec_finish(sp_ooo_exec *x)
{
    run_ctx *c = x->cur;
    if (!c) return;
    pthread_mutex_lock(&x->mu);
    while (x->sub_busy) pthread_cond_wait(&x->cv, &x->mu);
    pthread_mutex_unlock(&x->mu);
    sp_ooo_run *run = c->run;
    const sp_ooo_graph *g = c->g;
    run->wall = sp_now() - c->t0;
    run->peak_bytes = atomic_load(&c->peak);
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
