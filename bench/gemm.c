/* gemm.c — SGEMM GFLOP/s of the OpenBLAS that scanprop links, for context in
 * docs/PERFORMANCE.md (issue 3): every conv and linear layer ends in sp_gemm, so this is
 * the ceiling the apps work under. bench/run.sh compiles it and runs it twice, with
 * OPENBLAS_CORETYPE=Haswell and with the variable unset; the core OpenBLAS picked is in
 * the output because the variable only takes effect at library load.
 *
 *   gemm [n] [threads] [reps] [openblas|dnnl]     (defaults 2048 2 5 openblas)
 * Prints one JSON line: n, threads, core, median/best GFLOP/s over reps after a warm-up.
 * dnnl: oneDNN's dnnl_sgemm (what scanprop's products use, core/kernels/dnnl.h) on `threads`
 * OpenMP threads; core is then "oneDNN". */
#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Declared by OpenBLAS's cblas.h; repeated here so other BLAS headers still compile. */
extern char *openblas_get_corename(void);
extern void openblas_set_num_threads(int);

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 2048;
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    const char *lib = argc > 4 ? argv[4] : "openblas";
    int dnnl = !strcmp(lib, "dnnl");
    if (n < 1 || threads < 1 || reps < 1 || reps > 100 || (!dnnl && strcmp(lib, "openblas"))) {
        fprintf(stderr, "gemm: usage: gemm [n >= 1] [threads >= 1] [reps 1..100] [openblas|dnnl]\n");
        return 2;
    }
    openblas_set_num_threads(threads);
    omp_set_num_threads(threads);
    size_t nn = (size_t)n * (size_t)n;
    float *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b), *c = malloc(nn * sizeof *c);
    if (!a || !b || !c) {
        fprintf(stderr, "gemm: out of memory for n = %d\n", n);
        return 2;
    }
    /* Values in [-1, 1): no denormals, no overflow. */
    unsigned s = 12345;
    for (size_t i = 0; i < nn; i++) {
        s = s * 1664525u + 1013904223u;
        a[i] = (float)(s >> 8) / (float)(1u << 23) - 1.0f;
        s = s * 1664525u + 1013904223u;
        b[i] = (float)(s >> 8) / (float)(1u << 23) - 1.0f;
    }
    double flop = 2.0 * n * (double)n * n, gf[100];
    for (int r = -1; r < reps; r++) {   /* r = -1: warm-up */
        double t0 = now();
        if (dnnl) dnnl_sgemm('N', 'N', n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        else cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        if (r >= 0) gf[r] = flop / (now() - t0) / 1e9;
    }
    qsort(gf, (size_t)reps, sizeof gf[0], cmp);
    const char *ct = getenv("OPENBLAS_CORETYPE");
    printf("{\"app\": \"sgemm\", \"n\": %d, \"threads\": %d, \"reps\": %d, \"coretype_env\": \"%s\", "
           "\"core\": \"%s\", \"gflops_median\": %.2f, \"gflops_best\": %.2f, \"checksum\": %.6g}\n",
           n, threads, reps, ct ? ct : "unset", dnnl ? "oneDNN" : openblas_get_corename(), gf[reps / 2], gf[reps - 1],
           (double)c[0] + c[nn - 1]);
    free(a);
    free(b);
    free(c);
    return 0;
}
