/* gemm_small.h — the project's own kernel for tiny matrix products.
 *
 * The recurrent ops make one product per time step whose every dimension is the hidden
 * width or the batch (RNN 16×20×20, GRU 16×60×20 and 16×20×60): 1000 calls a pass, where
 * a library call's fixed cost is a good part of the time (docs/PERFORMANCE.md). This
 * kernel reads op(B) in
 * place (Bᵀ is copied into a panel on the stack first) and keeps up to 8 rows × 16
 * columns of C in registers, compiled three times (AVX-512, AVX2+FMA, baseline SSE2) and
 * picked once by the CPU's features.
 * Only the recurrent ops call it (layers/recurrent.h, sp_rec_step_gemm): every other
 * product keeps the libraries' rounding, which the PyTorch parity tests are tuned to.
 *
 * The sum over k runs in order k = 0 … K−1 for every element of C, the same on every
 * call of a shape on one machine: runs stay bitwise repeatable. */
#ifndef SP_GEMM_SMALL_H
#define SP_GEMM_SMALL_H

#include <stdbool.h>

/* Limits of the kernel: N ≤ SP_GEMM_SMALL_MAX_N, M·N·K ≤ SP_GEMM_SMALL_MAX_MACS, and
 * with trans_b K·N ≤ SP_GEMM_SMALL_PANEL (op(B) copied); larger products go to the
 * libraries. */
#define SP_GEMM_SMALL_MAX_N 64
#define SP_GEMM_SMALL_PANEL 4096
#define SP_GEMM_SMALL_MAX_MACS 32768

/* Row-major C[M×N] = alpha·op(A)·op(B) + beta·C, as cblas_sgemm (beta = 0 ignores C's
 * old contents, NaN included). Returns false, touching nothing, outside the limits. */
bool sp_gemm_small(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc);

/* What vector code may run: 2 AVX-512, 1 AVX2 + FMA, 0 the baseline; the CPU's own,
 * capped by DNNL_MAX_CPU_ISA as oneDNN caps itself (AVX2… → 1, SSE4.1 and lower → 0),
 * so one variable makes the process compute like an older CPU. Read once. */
int sp_cpu_isa_level(void);

/* Which compiled variant runs on this CPU: "avx512", "avx2" or "sse2". */
const char *sp_gemm_small_isa(void);

/* Tests: runs the named variant from now on; false (nothing changed) when the CPU
 * lacks it or the name is unknown. */
bool sp_gemm_small_force(const char *isa);

#endif
