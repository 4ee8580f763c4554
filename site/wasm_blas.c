/* wasm_blas.c — a portable SGEMM behind the CBLAS interface (site/cblas/cblas.h), so the
 * WebAssembly build of the teaching page compiles core/, layers/ and the backward engines
 * unchanged: there is no OpenBLAS (and no oneDNN: conv2d takes its im2col path without
 * SP_HAVE_DNNL). Only the BPPSA plan's forward of one small batch runs it (site/
 * wasm_models.c), whose values no figure reads, so this needs to be right, not fast:
 * plain loops in an order the compiler vectorises (the inner loop runs along a row of C). */
#include <stddef.h>
#include "site/cblas/cblas.h"

/* op(X)[i][k] of a row-major X with leading dimension ld */
#define AT(X, t, ld, i, k) ((t) ? (X)[(size_t)(k) * (ld) + (i)] : (X)[(size_t)(i) * (ld) + (k)])

void cblas_sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int M, int N, int K,
                 float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    if (order == CblasColMajor) {   /* Cᵀ = op(B)ᵀ·op(A)ᵀ, row-major */
        cblas_sgemm(CblasRowMajor, trans_b, trans_a, N, M, K, alpha, B, ldb, A, lda, beta, C, ldc);
        return;
    }
    int ta = trans_a != CblasNoTrans, tb = trans_b != CblasNoTrans;
    for (int i = 0; i < M; i++) {
        float *c = C + (size_t)i * ldc;
        for (int j = 0; j < N; j++) c[j] = beta == 0.0f ? 0.0f : beta * c[j];   /* beta = 0: C is not read */
        if (alpha == 0.0f) continue;
        if (!tb) {   /* c += alpha·op(A)[i][k] · B[k][:] */
            for (int k = 0; k < K; k++) {
                float a = alpha * AT(A, ta, lda, i, k);
                const float *b = B + (size_t)k * ldb;
                for (int j = 0; j < N; j++) c[j] += a * b[j];
            }
        } else {     /* c[j] += alpha·(op(A)[i][:] · B[j][:]) */
            for (int j = 0; j < N; j++) {
                const float *b = B + (size_t)j * ldb;
                float s = 0.0f;
                for (int k = 0; k < K; k++) s += AT(A, ta, lda, i, k) * b[k];
                c[j] += alpha * s;
            }
        }
    }
}

const char *openblas_get_corename(void) { return "wasm"; }

void openblas_set_num_threads(int n) { (void)n; }
