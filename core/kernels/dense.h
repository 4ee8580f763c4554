/* dense.h — the CPU GEMM every dense op shares. */
#ifndef SP_KERNELS_DENSE_H
#define SP_KERNELS_DENSE_H

#include <stdbool.h>

/* Row-major C[M×N] = alpha·op(A)·op(B) + beta·C on the CPU. A product of at least
 * SP_GEMM_SPLIT_MACS multiply-adds is split into sp_get_threads() blocks of C's rows or
 * columns, each one single-threaded OpenBLAS call on the thread pool; the split
 * depends only on the shape and the thread count, so the bits do too (also when the
 * call runs inline, on a lane of the ooo engine or inside another parallel_for). */
#define SP_GEMM_SPLIT_MACS (1L << 18)
void sp_gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
             const float *B, int ldb, float beta, float *C, int ldc);
/* The same product as one single-threaded call: for code that already runs one
 * product per pool thread (conv2d's per-sample GEMMs). */
void sp_gemm_serial(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                    const float *B, int ldb, float beta, float *C, int ldc);

#endif
