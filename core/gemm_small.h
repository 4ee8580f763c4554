/* gemm_small.h — the project's own kernel for tiny matrix products.
 *
 * The recurrent ops make one product per time step whose every dimension is the hidden
 * width or the batch (RNN 16×20×20, GRU 16×60×20 and 16×20×60). At that size a library
 * call costs more than its arithmetic: OpenBLAS's interface and buffer setup, or
 * dnnl_sgemm's packing buffer, take 2–7 µs for under 0.2 µs of multiply-adds
 * (docs/PERFORMANCE.md, "Small products"). This kernel packs op(B) into a zero-padded
 * panel on the stack and keeps a 4-row × 16-column block of C in registers, compiled
 * three times (AVX-512, AVX2+FMA, baseline SSE2) and picked once by the CPU's features.
 * Only the recurrent ops call it (layers/recurrent.h, sp_rec_step_gemm): every other
 * product keeps the libraries' rounding, which the PyTorch parity tests are tuned to.
 *
 * The sum over k runs in order k = 0 … K−1 for every element of C, the same on every
 * call of a shape on one machine: runs stay bitwise repeatable. */
#ifndef SP_GEMM_SMALL_H
#define SP_GEMM_SMALL_H

#include <stdbool.h>

/* Limits of the kernel: N ≤ SP_GEMM_SMALL_MAX_N, K·roundup(N, 16) ≤ SP_GEMM_SMALL_PANEL
 * floats, and M·N·K ≤ SP_GEMM_SMALL_MAX_MACS (larger products go to the libraries). */
#define SP_GEMM_SMALL_MAX_N 64
#define SP_GEMM_SMALL_PANEL 4096
#define SP_GEMM_SMALL_MAX_MACS 32768

/* Row-major C[M×N] = alpha·op(A)·op(B) + beta·C, as cblas_sgemm (beta = 0 ignores C's
 * old contents, NaN included). Returns false, touching nothing, outside the limits. */
bool sp_gemm_small(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc);

/* Which compiled variant runs on this CPU: "avx512", "avx2" or "sse2". */
const char *sp_gemm_small_isa(void);

/* Tests: runs the named variant from now on; false (nothing changed) when the CPU
 * lacks it or the name is unknown. */
bool sp_gemm_small_force(const char *isa);

#endif
