/* parallel.c — a small persistent thread pool with static partitioning.
 *
 * Static contiguous chunks (not work stealing) keep results bitwise reproducible for
 * a given thread count. The pool serves one parallel_for at a time; a call made while
 * it is busy (a nested call, or a second lane of the ooo executor) runs inline. */
#include <pthread.h>
#include <stdbool.h>
#include <time.h>
#include <cblas.h>
#include "core/parallel.h"
#include "core/error.h"

#define SP_MAX_THREADS 64

typedef struct pool {
    pthread_mutex_t busy;          /* held by the caller of an active parallel_for */
    pthread_mutex_t lock;
    pthread_cond_t start, done;
    pthread_t workers[SP_MAX_THREADS];
    int nworkers;                  /* threads besides the caller */
    unsigned generation;
    int pending;
    sp_range_fn fn;
    void *ctx;
    size_t n;
    int nchunks;
} pool;

static pool P = {.busy = PTHREAD_MUTEX_INITIALIZER, .lock = PTHREAD_MUTEX_INITIALIZER,
                 .start = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};
static int g_threads = 1;
static _Thread_local bool t_inline;   /* sp_parallel_set_inline */

static void chunk_bounds(size_t n, int nchunks, int c, size_t *b, size_t *e)
{
    *b = n * (size_t)c / (size_t)nchunks;
    *e = n * (size_t)(c + 1) / (size_t)nchunks;
}

static void *worker_main(void *arg)
{
    int id = (int)(size_t)arg;   /* chunk id = id + 1; the caller runs chunk 0 */
    unsigned seen = 0;
    for (;;) {
        pthread_mutex_lock(&P.lock);
        while (P.generation == seen) pthread_cond_wait(&P.start, &P.lock);
        seen = P.generation;
        sp_range_fn fn = P.fn;
        void *ctx = P.ctx;
        size_t n = P.n;
        int nchunks = P.nchunks;
        pthread_mutex_unlock(&P.lock);
        if (id + 1 < nchunks) {
            size_t b, e;
            chunk_bounds(n, nchunks, id + 1, &b, &e);
            if (b < e) fn(ctx, b, e);
        }
        pthread_mutex_lock(&P.lock);
        if (--P.pending == 0) pthread_cond_signal(&P.done);
        pthread_mutex_unlock(&P.lock);
    }
    return NULL;
}

void sp_set_threads(int n)
{
    if (n < 1 || n > SP_MAX_THREADS) sp_fail("--threads %d: expected 1..%d", n, SP_MAX_THREADS);
    pthread_mutex_lock(&P.busy);
    while (P.nworkers < n - 1) {   /* workers are never torn down, only left idle */
        if (pthread_create(&P.workers[P.nworkers], NULL, worker_main, (void *)(size_t)P.nworkers))
            sp_fail("cannot start thread pool worker");
        P.nworkers++;
    }
    g_threads = n;
    pthread_mutex_unlock(&P.busy);
    openblas_set_num_threads(n);
}

int sp_get_threads(void) { return g_threads; }

void sp_blas_set_threads(int n) { openblas_set_num_threads(n); }

int sp_blas_get_threads(void) { return openblas_get_num_threads(); }

void sp_parallel_set_inline(bool on) { t_inline = on; }

void sp_parallel_for(size_t n, sp_range_fn fn, void *ctx)
{
    int nchunks = g_threads < (int)n ? g_threads : (int)n;
    if (nchunks <= 1 || t_inline || pthread_mutex_trylock(&P.busy) != 0) {
        if (n) fn(ctx, 0, n);
        return;
    }
    pthread_mutex_lock(&P.lock);
    P.fn = fn;
    P.ctx = ctx;
    P.n = n;
    P.nchunks = nchunks;
    P.pending = P.nworkers;
    P.generation++;
    pthread_cond_broadcast(&P.start);
    pthread_mutex_unlock(&P.lock);

    size_t b, e;
    chunk_bounds(n, nchunks, 0, &b, &e);
    fn(ctx, b, e);

    pthread_mutex_lock(&P.lock);
    while (P.pending > 0) pthread_cond_wait(&P.done, &P.lock);
    pthread_mutex_unlock(&P.lock);
    pthread_mutex_unlock(&P.busy);
}

double sp_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
