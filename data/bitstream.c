/* bitstream.c — the synthetic task of the BPPSA paper (§4.1, Eq. 8): sample k has a
 * class c ~ U{0..9} and bits x_t ~ Bernoulli(0.05 + 0.1·c), t = 0..T-1. The class is
 * recoverable only by counting ones over the whole stream, which is what makes long T
 * a test of back-propagation through time.
 *
 * Sample i is regenerated from its own RNG stream seeded by (seed, i): nothing is
 * stored (32000 × 30000 bits would not be small), any access order gives the same
 * data, and the loader's thread can call get concurrently with nothing else. */
#include <stdio.h>
#include <stdlib.h>
#include "core/error.h"
#include "core/rng.h"
#include "data/data.h"

#define BITSTREAM_CLASSES 10

typedef struct bitstream {
    sp_dataset base;
    uint64_t seed;
} bitstream;

/* Distinct, well-mixed seeds for (seed, i) (splitmix64 finaliser on both parts). */
static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void bitstream_get(sp_dataset *d, int i, float *x, int *y)
{
    sp_rng r;
    sp_rng_seed(&r, mix(((bitstream *)d)->seed) ^ mix(0x9E3779B97F4A7C15ull * ((uint64_t)i + 1)));
    int c = (int)sp_rng_below(&r, BITSTREAM_CLASSES);
    float p = 0.05f + 0.1f * (float)c;
    for (int t = 0; t < d->shape[0]; t++) x[t] = sp_rng_uniform(&r) < p ? 1.0f : 0.0f;
    *y = c;
}

/* The class is the generator's first draw: no need to draw the bits. */
static int bitstream_label(sp_dataset *d, int i)
{
    sp_rng r;
    sp_rng_seed(&r, mix(((bitstream *)d)->seed) ^ mix(0x9E3779B97F4A7C15ull * ((uint64_t)i + 1)));
    return (int)sp_rng_below(&r, BITSTREAM_CLASSES);
}

static void bitstream_free(sp_dataset *d) { free(d); }

sp_dataset *sp_bitstream(int n, int T, uint64_t seed)
{
    if (n < 1 || T < 1) return sp_error("bitstream: n = %d and T = %d must both be positive", n, T), NULL;
    bitstream *b = sp_xcalloc(1, sizeof *b);
    snprintf(b->base.name, sizeof b->base.name, "bitstream(n=%d, T=%d, seed=%llu)", n, T, (unsigned long long)seed);
    b->base.n = n;
    b->base.ndim = 2;
    b->base.shape[0] = T;
    b->base.shape[1] = 1;
    b->base.nclasses = BITSTREAM_CLASSES;
    b->base.get = bitstream_get;
    b->base.label = bitstream_label;
    b->base.free = bitstream_free;
    b->seed = seed;
    return &b->base;
}
