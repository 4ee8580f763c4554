/* synthetic_seq.c — class-dependent random sequences for the GRU app's default data
 * (the BPPSA paper's S/M/L shapes without its speech features): sample i of class c has
 * x_t[f] = 0.5·cos(1.3·c·(f + 1)) + 0.5·sin(0.05·(c + 1)·t) + N(0, 0.5²), seeded. */
#include <math.h>
#include "core/error.h"
#include "core/rng.h"
#include "data/data.h"

sp_dataset *sp_synthetic_sequences(int n, int T, int C, int nclasses, uint64_t seed)
{
    if (n < 1 || T < 1 || C < 1 || nclasses < 1)
        return sp_error("synthetic sequences: n = %d, T = %d, C = %d and classes = %d must all be positive", n, T,
                        C, nclasses), NULL;
    float *x;
    int *y;
    sp_dataset *d = sp_dataset_new_f32("synthetic sequences", n, 2, (int[]){T, C}, nclasses, &x, &y);
    if (!d) return NULL;
    sp_rng r;
    sp_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) {
        int c = (int)sp_rng_below(&r, (uint32_t)nclasses);
        y[i] = c;
        float *xi = x + (size_t)i * T * C;
        for (int t = 0; t < T; t++)
            for (int f = 0; f < C; f++)
                /* the products in double: exact (so the same floats as the int products
                 * whenever those did not overflow) for any int class count */
                xi[(size_t)t * C + f] = 0.5f * cosf(1.3f * (float)((double)c * (f + 1))) +
                                        0.5f * sinf(0.05f * (float)(((double)c + 1) * t)) + 0.5f * sp_rng_normal(&r);
    }
    return d;
}
