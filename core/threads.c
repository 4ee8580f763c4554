/* threads.c — a small persistent thread pool with static partitioning.
 *
 * Static contiguous chunks (not work stealing) keep results bitwise reproducible for
 * a given thread count. The pool serves one parallel_for at a time; a call made while
 * it is busy (a nested call, or a second lane of the ooo executor) runs inline.
 *
 * Hand-off. A training step is a string of parallel_fors a few tens of µs apart
 * (LeNet-5's ReLU over a batch of 64 takes ~40 µs), so a futex wake-up per call (tens
 * of µs on a VM) would cost as much as the work. Workers and the caller therefore spin
 * on an atomic for up to SPIN_S before they sleep on a condition variable; the sleeper
 * count tells the other side whether it must signal (see wait_for / wake). When the
 * machine is oversubscribed (sp_parallel_set_node_procs: processes × threads > online
 * cores) they sleep at once: a spinning thread then only takes the core from the thread
 * it waits for. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cblas.h>
#include "core/threads.h"
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif
#include "core/error.h"

#define SP_MAX_THREADS 64
#define SPIN_S 100e-6   /* how long a waiting thread spins before it sleeps */

typedef struct pool {
    pthread_mutex_t busy;          /* held by the caller of an active parallel_for */
    pthread_mutex_t lock;          /* guards the sleeps only                       */
    pthread_cond_t cv;
    _Atomic int sleepers;          /* threads blocked (or about to block) on cv    */
    pthread_t workers[SP_MAX_THREADS];
    int nworkers;                  /* threads besides the caller */
    _Atomic unsigned generation;   /* bumped to post work                          */
    _Atomic int pending;           /* workers not done with the current job        */
    sp_range_fn fn;                /* the job: written before generation is bumped */
    void *ctx;
    size_t n;
    int nchunks;
} pool;

static pool P = {.busy = PTHREAD_MUTEX_INITIALIZER, .lock = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
static int g_threads = 1;
static int g_node_procs = 1;            /* sp_parallel_set_node_procs                   */
static _Atomic bool g_no_spin;          /* oversubscribed: waiting threads sleep at once */
static _Thread_local bool t_inline;   /* sp_parallel_set_inline */

static void chunk_bounds(size_t n, int nchunks, int c, size_t *b, size_t *e)
{
    *b = n * (size_t)c / (size_t)nchunks;
    *e = n * (size_t)(c + 1) / (size_t)nchunks;
}

bool sp_spin_until(bool (*done)(void *), void *arg, double seconds)
{
    if (!done) return sp_refuse("sp_spin_until: argument 'done' is NULL"), false;
    double t0 = 0;
    for (unsigned i = 0; !done(arg); i++) {
        sp_cpu_relax();
        if ((i & 63) != 63) continue;
        if (t0 == 0) t0 = sp_now();
        else if (sp_now() - t0 > seconds) return done(arg);
    }
    return true;
}

/* Waits until done(arg) holds: spins for SPIN_S, then sleeps on the pool's cv. Every
 * atomic is seq_cst: a sleeper raises `sleepers` before its last check, and wake()
 * is called after the state change, so either the sleeper sees the change or wake()
 * sees the sleeper. */
static void wait_for(bool (*done)(void *), void *arg)
{
    if (sp_spin_until(done, arg, atomic_load_explicit(&g_no_spin, memory_order_relaxed) ? 0 : SPIN_S)) return;
    pthread_mutex_lock(&P.lock);
    atomic_fetch_add(&P.sleepers, 1);
    while (!done(arg)) pthread_cond_wait(&P.cv, &P.lock);
    atomic_fetch_sub(&P.sleepers, 1);
    pthread_mutex_unlock(&P.lock);
}

static void wake(void)
{
    if (atomic_load(&P.sleepers) == 0) return;
    pthread_mutex_lock(&P.lock);
    pthread_cond_broadcast(&P.cv);
    pthread_mutex_unlock(&P.lock);
}

static bool new_job(void *seen) { return atomic_load(&P.generation) != *(unsigned *)seen; }
static bool all_done(void *unused) { return atomic_load(&P.pending) == 0; }

static void *worker_main(void *arg)
{
    int id = (int)(size_t)arg;   /* chunk id = id + 1; the caller runs chunk 0 */
    sp_flush_denormals();        /* inherited from the creator already; said again for clarity */
    unsigned seen = 0;
    for (;;) {
        wait_for(new_job, &seen);
        seen = atomic_load(&P.generation);
        if (id + 1 < P.nchunks) {
            size_t b, e;
            chunk_bounds(P.n, P.nchunks, id + 1, &b, &e);
            if (b < e) P.fn(P.ctx, b, e);
        }
        if (atomic_fetch_sub(&P.pending, 1) == 1) wake();
    }
    return NULL;
}

void sp_flush_denormals(void)
{
#if defined(__x86_64__) || defined(__i386__)
    _mm_setcsr(_mm_getcsr() | 0x8040u);   /* FTZ (bit 15) and DAZ (bit 6) */
#endif
}

bool sp_denormals_flushed(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return (_mm_getcsr() & 0x8040u) == 0x8040u;
#else
    return false;
#endif
}

static void update_spin(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    atomic_store(&g_no_spin, cores > 0 && (long)g_node_procs * g_threads > cores);
}

int sp_set_threads(int n)
{
    if (n < 1 || n > SP_MAX_THREADS) return sp_refuse("--threads %d: expected 1..%d", n, SP_MAX_THREADS);
    sp_flush_denormals();   /* before any worker starts: threads inherit the MXCSR */
    pthread_mutex_lock(&P.busy);
    while (P.nworkers < n - 1) {   /* workers are never torn down, only left idle */
        int err = pthread_create(&P.workers[P.nworkers], NULL, worker_main, (void *)(size_t)P.nworkers);
        if (err) {   /* the workers started so far stay idle; the count is unchanged */
            pthread_mutex_unlock(&P.busy);
            return sp_refuse("sp_set_threads: cannot start thread pool worker %d of %d (%s)", P.nworkers + 1,
                             n - 1, strerror(err));
        }
        P.nworkers++;
    }
    g_threads = n;
    update_spin();
    pthread_mutex_unlock(&P.busy);
    /* OpenBLAS never starts threads of its own: large GEMMs are split over this pool
     * (sp_gemm), so two pools never compete for the cores. */
    openblas_set_num_threads(1);
    return SP_OK;
}

int sp_get_threads(void) { return g_threads; }

bool sp_parallel_spare_core(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return cores > 0 && (long)g_node_procs * g_threads < cores;
}

void sp_parallel_set_node_procs(int procs)
{
    g_node_procs = procs > 1 ? procs : 1;
    update_spin();
}

void sp_parallel_set_inline(bool on) { t_inline = on; }

/* ---- help between inline threads ------------------------------------------------------
 * A thread that runs its loops inline (an ooo lane) still splits each loop into the
 * pool's chunks, [n·c/k, n·(c+1)/k) for k = min(threads, n), and offers them in the
 * one help slot while it works through them itself; an idle thread (the other lane,
 * waiting for a task) takes chunks from there. Every chunk is the one the pool would
 * run, so the bits stay the pool's whoever runs it. States: 0 free, 1 being filled,
 * 2 open, 3 closing (the owner waits until no helper is inside, then frees it). */
static struct {
    _Atomic int state, next, active;
    sp_range_fn fn;
    void *ctx;
    size_t n;
    int nchunks;
} H;
static void (*_Atomic g_help_notify)(void *);
static void *_Atomic g_help_notify_ctx;
static _Thread_local bool t_helping;

void sp_parallel_set_help_notify(void (*notify)(void *), void *ctx)
{
    atomic_store(&g_help_notify, NULL);
    atomic_store(&g_help_notify_ctx, ctx);
    atomic_store(&g_help_notify, notify);
}

bool sp_parallel_help_open(void) { return atomic_load(&H.state) == 2; }

static void run_chunks(void)
{
    int c;
    while ((c = atomic_fetch_add(&H.next, 1)) < H.nchunks) {
        size_t b, e;
        chunk_bounds(H.n, H.nchunks, c, &b, &e);
        if (b < e) H.fn(H.ctx, b, e);
    }
}

bool sp_parallel_help(void)
{
    if (atomic_load(&H.state) != 2) return false;
    atomic_fetch_add(&H.active, 1);
    bool open = atomic_load(&H.state) == 2;   /* re-checked inside: the owner waits for us now */
    if (open) {
        bool was = t_helping;
        t_helping = true;   /* loops nested in a chunk run inline, offered to nobody */
        run_chunks();
        t_helping = was;
    }
    atomic_fetch_sub(&H.active, 1);
    return open;
}

/* Runs the loop as chunks offered for help; false (nothing run) when the slot is taken. */
static bool offer(size_t n, int nchunks, sp_range_fn fn, void *ctx)
{
    void (*notify)(void *) = atomic_load(&g_help_notify);
    int free_state = 0;
    if (!notify || t_helping || !atomic_compare_exchange_strong(&H.state, &free_state, 1)) return false;
    H.fn = fn;
    H.ctx = ctx;
    H.n = n;
    H.nchunks = nchunks;
    atomic_store(&H.next, 0);
    atomic_store(&H.state, 2);
    notify(atomic_load(&g_help_notify_ctx));
    run_chunks();
    atomic_store(&H.state, 3);
    while (atomic_load(&H.active) != 0) sp_cpu_relax();   /* a helper finishing its chunk */
    atomic_store(&H.state, 0);
    return true;
}

int sp_parallel_for(size_t n, sp_range_fn fn, void *ctx)
{
    if (!fn) return sp_refuse("sp_parallel_for: argument 'fn' is NULL");
    int nchunks = g_threads < (int)n ? g_threads : (int)n;
    if (nchunks > 1 && t_inline && offer(n, nchunks, fn, ctx)) return SP_OK;
    if (nchunks <= 1 || t_inline || pthread_mutex_trylock(&P.busy) != 0) {
        if (n) fn(ctx, 0, n);
        return SP_OK;
    }
    P.fn = fn;
    P.ctx = ctx;
    P.n = n;
    P.nchunks = nchunks;
    atomic_store(&P.pending, P.nworkers);
    atomic_fetch_add(&P.generation, 1);   /* publishes the job */
    wake();

    size_t b, e;
    chunk_bounds(n, nchunks, 0, &b, &e);
    fn(ctx, b, e);

    wait_for(all_done, NULL);
    pthread_mutex_unlock(&P.busy);
    return SP_OK;
}

double sp_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
