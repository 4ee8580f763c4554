/* gemm_shapes.c — one-thread SGEMM time of OpenBLAS (as linked, under the caller's
 * OPENBLAS_CORETYPE) and of oneDNN's dnnl_sgemm on the product shapes scanprop's models
 * make (docs/PERFORMANCE.md, issue 14): why sp_gemm_serial hands products of >= 8192
 * multiply-adds to oneDNN.
 *
 *   cc -O2 -fopenmp -I/usr/include/x86_64-linux-gnu/openblas-pthread bench/gemm_shapes.c \
 *      -lopenblas -ldnnl -o build/gemm_shapes && build/gemm_shapes
 * Prints one line per shape: C[M×N] += A[M×K]·B[N×K]ᵀ, best of 5 timed batches. */
#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

extern char *openblas_get_corename(void);

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(void)
{
    static const int shapes[][3] = {
        {16, 20, 20},    {16, 60, 20},    {64, 120, 400},   {64, 84, 120},    {400, 120, 64},
        {32, 10, 512},   {128, 256, 1152}, {512, 512, 512}, {64, 1024, 256},
    };
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    size_t n = (size_t)1 << 22;
    float *A = malloc(n * sizeof *A), *B = malloc(n * sizeof *B), *C = malloc(n * sizeof *C);
    if (!A || !B || !C) return 2;
    for (size_t i = 0; i < n; i++) A[i] = B[i] = C[i] = 0.001f * (float)(i % 1000);
    printf("OpenBLAS core %s vs oneDNN, one thread\n", openblas_get_corename());
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        double flop = 2.0 * M * N * K, best[2] = {1e9, 1e9};
        int reps = (int)(2e8 / flop) + 1;
        if (reps > 20000) reps = 20000;
        for (int r = 0; r < 5; r++)
            for (int lib = 0; lib < 2; lib++) {
                double t0 = now();
                for (int i = 0; i < reps; i++)
                    if (lib == 0) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1, A, K, B, K, 1, C, N);
                    else dnnl_sgemm('N', 'T', M, N, K, 1, A, K, B, K, 1, C, N);
                double t = (now() - t0) / reps;
                if (t < best[lib]) best[lib] = t;
            }
        printf("M %4d N %4d K %4d   OpenBLAS %9.2f us %6.1f GFLOP/s   oneDNN %9.2f us %6.1f GFLOP/s\n", M, N, K,
               best[0] * 1e6, flop / best[0] * 1e-9, best[1] * 1e6, flop / best[1] * 1e-9);
    }
    free(A), free(B), free(C);
    return 0;
}
