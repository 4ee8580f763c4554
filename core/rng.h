/* rng.h — seeded, platform-independent random numbers (xoshiro128+ seeded by splitmix64).
 * The same seed gives the same stream everywhere; nothing reads the clock. */
#ifndef SP_RNG_H
#define SP_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sp_rng { uint32_t s[4]; } sp_rng;

/* A NULL r (or n = 0 for sp_rng_below) is refused with sp_refuse (core/error.h): outside
 * sp_try the call returns SP_ERR, 0 or NaN with the message in sp_last_error(), never
 * exiting; inside sp_try it ends there with SP_ERR. */
int sp_rng_seed(sp_rng *r, uint64_t seed);
uint32_t sp_rng_u32(sp_rng *r);
float sp_rng_uniform(sp_rng *r);              /* [0, 1)            */
float sp_rng_uniform_range(sp_rng *r, float lo, float hi);
float sp_rng_normal(sp_rng *r);               /* N(0, 1), Box-Muller */
uint32_t sp_rng_below(sp_rng *r, uint32_t n); /* [0, n), unbiased  */
int sp_rng_shuffle(sp_rng *r, int *idx, int n);

#ifdef __cplusplus
}
#endif

#endif
