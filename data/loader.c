/* loader.c — batches in a seeded order, assembled by a background thread.
 *
 * Two batch buffers (double buffering). Batch j of an epoch always goes to slot j % 2.
 * The caller holds at most one batch, the last one returned; calling sp_loader_next
 * again releases it. With `released` batches given back, the producer may assemble
 * batch j once j < released + 2, i.e. once slot j % 2 is no longer the caller's. What a
 * batch contains depends only on (seed, epoch, j), never on timing, so the prefetching
 * loader and the synchronous one give bitwise identical batches. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/rng.h"
#include "data/data.h"
#include "core/guard.h"

struct sp_loader {
    sp_dataset *d;
    int batch, nbatches;
    bool shuffle, prefetch;
    uint64_t seed;
    size_t sample_numel;
    int *order;               /* this epoch's visiting order            */
    float *x[2];              /* the two slots, allocated once          */
    int *y[2];
    int epoch;
    int taken;                /* batches of this epoch returned so far  */
    unsigned char *need;      /* NULL, or [batch]: the positions to read */
    long samples_read;        /* atomic: the producer thread adds to them */
    long labels_read;
    float *scratch;           /* one sample: a label read through get   */
    /* shared with the producer thread, under mu */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work;      /* producer: something to assemble / stop */
    pthread_cond_t done;      /* consumer: a batch is ready / idle      */
    int produced;             /* batches of this epoch assembled        */
    int released;             /* batches of this epoch given back       */
    bool filling, stop;
    /* a sample that could not be read (sp_dataset_get's status): the batch it belongs to
     * (its index + 1; 0: none; stored after the message) and the message, handed to
     * sp_loader_next's caller when it takes that batch */
    _Atomic int failed;
    int failed_epoch;
    char failure[256];
};

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Epoch e's order depends on (seed, e) only, so a resumed run replays it exactly. */
static void order_of(const sp_loader *l, int epoch, int *order)
{
    for (int i = 0; i < l->d->n; i++) order[i] = i;
    if (!l->shuffle) return;
    sp_rng r;
    sp_rng_seed(&r, mix(l->seed) ^ mix(0xD1B54A32D192ED03ull * ((uint64_t)epoch + 1)));
    sp_rng_shuffle(&r, order, l->d->n);
}

static void make_order(sp_loader *l) { order_of(l, l->epoch, l->order); }

static int batch_size(const sp_loader *l, int j)
{
    int start = j * l->batch, left = l->d->n - start;
    return left < l->batch ? left : l->batch;
}

static void assemble(sp_loader *l, int j)
{
    int slot = j % 2, nb = batch_size(l, j);
    const int *idx = l->order + (size_t)j * l->batch;
    long read = 0, labels = 0;
    for (int s = 0; s < nb; s++) {
        int need = l->need ? l->need[s] : SP_LOADER_X;
        if (need & SP_LOADER_X) {
            if (sp_dataset_get(l->d, idx[s], l->x[slot] + (size_t)s * l->sample_numel, &l->y[slot][s]) != SP_OK &&
                !atomic_load(&l->failed)) {   /* the batch is not what the dataset holds: its reader fails it */
                snprintf(l->failure, sizeof l->failure, "%s", sp_last_error());
                l->failed_epoch = l->epoch;
                atomic_store(&l->failed, j + 1);
            }
            read++;
        } else if (need & SP_LOADER_Y) {   /* the label alone; the input stays zero */
            int r = sp_dataset_label(l->d, idx[s], l->scratch, &l->y[slot][s]);
            if (r > 0) read++;
            else if (r == 0) labels++;
        }   /* else another rank's row: left zero */
    }
    __atomic_fetch_add(&l->samples_read, read, __ATOMIC_RELAXED);
    __atomic_fetch_add(&l->labels_read, labels, __ATOMIC_RELAXED);
}

static void *producer(void *arg)
{
    sp_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->stop && !(l->produced < l->nbatches && l->produced < l->released + 2))
            pthread_cond_wait(&l->work, &l->mu);
        if (l->stop) break;
        int j = l->produced;
        l->filling = true;
        pthread_mutex_unlock(&l->mu);
        assemble(l, j);   /* order[] and slot j % 2 are stable: see set_epoch / next */
        pthread_mutex_lock(&l->mu);
        l->filling = false;
        l->produced++;
        pthread_cond_broadcast(&l->done);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* The checks of a loader's arguments; its batches an epoch in *nbatches. */
static int loader_check(const sp_dataset *d, int batch, bool drop_last, int *nbatches)
{
    if (!d) return sp_error("sp_loader_new: the dataset is NULL");
    if (batch < 1) return sp_error("loader: batch size %d (expected >= 1)", batch);
    if (d->ndim < 1 || d->ndim > 3)
        return sp_error("%s: samples with %d dimensions (expected 1 to 3)", d->name, d->ndim);
    if (d->n < 1) return sp_error("%s: no samples", d->name);
    /* d->n / batch + remainder: no d->n + batch - 1, which overflows for batch near INT_MAX */
    *nbatches = d->n / batch + (!drop_last && d->n % batch != 0);
    if (*nbatches < 1)
        return sp_error("%s: %d samples make no full batch of %d (drop_last); use a smaller batch", d->name, d->n,
                        batch);
    return SP_OK;
}

static sp_loader *loader_new(sp_dataset *d, int batch, bool shuffle, uint64_t seed, bool drop_last, bool prefetch,
                             const unsigned char *need)
{
    int nbatches;
    if (loader_check(d, batch, drop_last, &nbatches) != SP_OK) return NULL;
    sp_loader *l = sp_xcalloc(1, sizeof *l);
    *l = (sp_loader){.d = d, .batch = batch, .nbatches = nbatches, .shuffle = shuffle, .prefetch = prefetch,
                     .seed = seed, .sample_numel = sp_dataset_sample_numel(d)};
    l->order = sp_xmalloc((size_t)d->n * sizeof *l->order);
    int cap = batch < d->n ? batch : d->n;
    for (int s = 0; s < 2; s++) {   /* zeroed: the rows a rank does not read stay 0 */
        l->x[s] = sp_xcalloc((size_t)cap * l->sample_numel, sizeof(float));
        l->y[s] = sp_xcalloc((size_t)cap, sizeof(int));
    }
    if (need) {
        l->need = sp_xmalloc((size_t)batch);
        memcpy(l->need, need, (size_t)batch);
        l->scratch = sp_xmalloc(l->sample_numel * sizeof(float));
    }
    make_order(l);
    if (prefetch) {
        pthread_mutex_init(&l->mu, NULL);
        pthread_cond_init(&l->work, NULL);
        pthread_cond_init(&l->done, NULL);
        if (pthread_create(&l->thread, NULL, producer, l) != 0) {
            l->prefetch = false;   /* nothing to join */
            sp_loader_free(l);
            return sp_error("loader: cannot start the prefetch thread"), NULL;
        }
    }
    return l;
}

sp_loader *sp_loader_new(sp_dataset *d, int batch, bool shuffle, uint64_t seed, bool drop_last)
{
    return loader_new(d, batch, shuffle, seed, drop_last, true, NULL);
}

sp_loader *sp_loader_new_sync(sp_dataset *d, int batch, bool shuffle, uint64_t seed, bool drop_last)
{
    return loader_new(d, batch, shuffle, seed, drop_last, false, NULL);
}

sp_loader *sp_loader_new_rows(sp_dataset *d, int batch, bool shuffle, uint64_t seed, bool drop_last,
                              const unsigned char *need)
{
    return loader_new(d, batch, shuffle, seed, drop_last, true, need);
}

sp_loader *sp_loader_new_rows_sync(sp_dataset *d, int batch, bool shuffle, uint64_t seed, bool drop_last,
                                   const unsigned char *need)
{
    return loader_new(d, batch, shuffle, seed, drop_last, false, need);
}

int sp_loader_rows(sp_dataset *d, int batch, bool shuffle, uint64_t seed, bool drop_last,
                   const unsigned char *need, long batches, unsigned char *keep)
{
    if (!d) return sp_error("sp_loader_rows: argument 'd' is NULL");
    if (!keep) return sp_error("sp_loader_rows: argument 'keep' is NULL");
    if (batches < 0) return sp_error("sp_loader_rows: argument 'batches' is %ld (expected >= 0)", batches);
    sp_loader l = {.d = d, .batch = batch, .shuffle = shuffle, .seed = seed};   /* what order_of and batch_size read */
    if (loader_check(d, batch, drop_last, &l.nbatches) != SP_OK) return SP_ERR;
    /* The producer assembles an epoch's first two batches as soon as the epoch is set
     * (the loader made), then batch k once batch k-1 is taken: after the last batch taken
     * it may assemble the next of the same epoch (never the next epoch's first, which
     * waits for set_epoch). */
    if (batches % l.nbatches != 0) batches++;
    if (batches < (l.nbatches < 2 ? l.nbatches : 2)) batches = l.nbatches < 2 ? l.nbatches : 2;
    int *order = sp_xmalloc((size_t)d->n * sizeof *order);
    for (long e = 0; e * l.nbatches < batches; e++) {
        order_of(&l, (int)e, order);
        long nb = batches - e * l.nbatches < l.nbatches ? batches - e * l.nbatches : l.nbatches;
        for (int j = 0; j < nb; j++)
            for (int s = 0, bs = batch_size(&l, j); s < bs; s++) {
                int want = need ? need[s] : SP_LOADER_X;
                keep[order[(size_t)j * batch + s]] |= (unsigned char)(want & (SP_LOADER_X | SP_LOADER_Y));
            }
    }
    free(order);
    return SP_OK;
}

long sp_loader_samples_read(const sp_loader *l)
{
    if (!l) return sp_error("sp_loader_samples_read: argument 'l' is NULL");
    return __atomic_load_n(&l->samples_read, __ATOMIC_RELAXED);
}
long sp_loader_labels_read(const sp_loader *l)
{
    if (!l) return sp_error("sp_loader_labels_read: argument 'l' is NULL");
    return __atomic_load_n(&l->labels_read, __ATOMIC_RELAXED);
}
double sp_loader_bytes_read(const sp_loader *l)
{
    if (!l) return sp_error("sp_loader_bytes_read: argument 'l' is NULL");
    return (double)sp_loader_samples_read(l) * ((double)l->sample_numel * sizeof(float) + sizeof(int)) +
           (double)sp_loader_labels_read(l) * sizeof(int);
}

bool sp_loader_next(sp_loader *l, sp_batch *out)
{
    SP_GUARD(false);
    if (!l) sp_fail("sp_loader_next: argument 'l' is NULL");
    if (!out) sp_fail("sp_loader_next: argument 'out' is NULL");
    if (l->taken >= l->nbatches) return false;
    int j = l->taken++;
    if (l->prefetch) {
        pthread_mutex_lock(&l->mu);
        l->released = j;   /* the caller is done with batch j - 1 */
        pthread_cond_broadcast(&l->work);
        while (l->produced <= j) pthread_cond_wait(&l->done, &l->mu);
        pthread_mutex_unlock(&l->mu);
    } else {
        assemble(l, j);
    }
    int failed = atomic_load(&l->failed);
    if (failed && (l->failed_epoch < l->epoch || failed - 1 <= j))
        sp_fail("loader, epoch %d, batch %d: %s", l->failed_epoch, failed - 1, l->failure);
    int nb = batch_size(l, j), shape[SP_MAX_DIMS] = {nb};
    memcpy(shape + 1, l->d->shape, (size_t)l->d->ndim * sizeof *shape);
    *out = (sp_batch){.x = sp_tensor_view(l->x[j % 2], 1 + l->d->ndim, shape), .y = l->y[j % 2], .n = nb,
                      .index = j, .epoch = l->epoch};
    return true;
}

int sp_loader_set_epoch(sp_loader *l, int epoch)
{
    SP_GUARD(SP_ERR);
    if (!l) sp_fail("sp_loader_set_epoch: argument 'l' is NULL");
    if (epoch < 0) sp_fail("loader: epoch %d (expected >= 0)", epoch);
    if (epoch == l->epoch && l->taken == 0) return SP_OK;
    if (l->prefetch) {
        /* Wait out a batch being assembled: it reads order[] and writes a slot. */
        pthread_mutex_lock(&l->mu);
        while (l->filling) pthread_cond_wait(&l->done, &l->mu);
    }
    l->epoch = epoch;
    l->taken = 0;
    make_order(l);
    if (l->prefetch) {
        l->produced = l->released = 0;
        pthread_cond_broadcast(&l->work);
        pthread_mutex_unlock(&l->mu);
    }
    return SP_OK;
}

int sp_loader_reset_epoch(sp_loader *l)
{
    SP_GUARD(SP_ERR);
    if (!l) sp_fail("sp_loader_reset_epoch: argument 'l' is NULL");
    sp_loader_set_epoch(l, l->epoch + 1);
    return SP_OK;
}
int sp_loader_epoch(const sp_loader *l)
{
    SP_GUARD(-1);
    if (!l) sp_fail("sp_loader_epoch: argument 'l' is NULL");
    return l->epoch;
}
int sp_loader_nbatches(const sp_loader *l)
{
    SP_GUARD(-1);
    if (!l) sp_fail("sp_loader_nbatches: argument 'l' is NULL");
    return l->nbatches;
}
int sp_loader_batch(const sp_loader *l)
{
    SP_GUARD(-1);
    if (!l) sp_fail("sp_loader_batch: argument 'l' is NULL");
    return l->batch < l->d->n ? l->batch : l->d->n;
}

void sp_loader_free(sp_loader *l)
{
    if (!l) return;
    if (l->prefetch) {
        pthread_mutex_lock(&l->mu);
        l->stop = true;
        pthread_cond_broadcast(&l->work);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->thread, NULL);
        pthread_mutex_destroy(&l->mu);
        pthread_cond_destroy(&l->work);
        pthread_cond_destroy(&l->done);
    }
    for (int s = 0; s < 2; s++) {
        free(l->x[s]);
        free(l->y[s]);
    }
    free(l->order);
    free(l->need);
    free(l->scratch);
    free(l);
}
