/* rng.c — xoshiro128+ (Blackman & Vigna) seeded through splitmix64. */
#include <math.h>
#include "core/error.h"
#include "core/rng.h"

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int sp_rng_seed(sp_rng *r, uint64_t seed)
{
    if (!r) return sp_refuse("sp_rng_seed: argument 'r' is NULL");
    for (int i = 0; i < 4; i += 2) {
        uint64_t v = splitmix64(&seed);
        r->s[i] = (uint32_t)v;
        r->s[i + 1] = (uint32_t)(v >> 32);
    }
    if (!(r->s[0] | r->s[1] | r->s[2] | r->s[3])) r->s[0] = 1;
    return SP_OK;
}

static inline uint32_t rotl(uint32_t x, int k) { return (x << k) | (x >> (32 - k)); }

uint32_t sp_rng_u32(sp_rng *r)
{
    if (!r) {
        sp_refuse("sp_rng_u32: argument 'r' is NULL");
        return 0;
    }
    uint32_t *s = r->s;
    uint32_t result = s[0] + s[3];
    uint32_t t = s[1] << 9;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 11);
    return result;
}

float sp_rng_uniform(sp_rng *r)
{
    if (!r) {
        sp_refuse("sp_rng_uniform: argument 'r' is NULL");
        return NAN;
    }
    return (float)(sp_rng_u32(r) >> 8) * (1.0f / 16777216.0f);
}

float sp_rng_uniform_range(sp_rng *r, float lo, float hi)
{
    if (!r) {
        sp_refuse("sp_rng_uniform_range: argument 'r' is NULL");
        return NAN;
    }
    return lo + (hi - lo) * sp_rng_uniform(r);
}

float sp_rng_normal(sp_rng *r)
{
    if (!r) {
        sp_refuse("sp_rng_normal: argument 'r' is NULL");
        return NAN;
    }
    double u1 = ((double)(sp_rng_u32(r) >> 8) + 1.0) / 16777217.0;
    double u2 = (double)(sp_rng_u32(r) >> 8) / 16777216.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

uint32_t sp_rng_below(sp_rng *r, uint32_t n)
{
    if (!r || n == 0) {
        sp_refuse(!r ? "sp_rng_below: argument 'r' is NULL" : "sp_rng_below: argument 'n' is 0 (expected >= 1)");
        return 0;
    }
    uint32_t limit = (uint32_t)(-n) % n;   /* reject the biased low range */
    for (;;) {
        uint32_t x = sp_rng_u32(r);
        if (x >= limit) return x % n;
    }
}

int sp_rng_shuffle(sp_rng *r, int *idx, int n)
{
    if (n < 0) return sp_refuse("sp_rng_shuffle: argument 'n' is %d (expected >= 0)", n);
    if (!r) return sp_refuse("sp_rng_shuffle: argument 'r' is NULL");
    if (n > 0 && !idx) return sp_refuse("sp_rng_shuffle: argument 'idx' is NULL");
    for (int i = n - 1; i > 0; i--) {
        int j = (int)sp_rng_below(r, (uint32_t)i + 1);
        int t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
    return SP_OK;
}
