/* csr_ops.h — kernels on CSR matrices (core/csr.h) and on the small dense matrices
 * that share the BPPSA scan with them.
 *
 * The scan (BPPSA §3, Algorithm 1) multiplies transposed Jacobians: sparse CSR ones
 * (conv, pooling, pointwise ops), dense ones (linear Wᵀ, the RNN/GRU H×H steps) and the
 * gradient vector. Patterns never depend on the input (§3.3), so a sparse product is
 * split in two phases:
 *   sp_spgemm_symbolic  C's pattern + a work partition, computed ONCE per (A, B) pattern
 *   sp_spgemm_numeric   C's values only, every iteration, no allocation
 * Every kernel gives bitwise identical results for any thread count: each output row is
 * computed by one thread in a fixed order, and only the split of rows varies.
 * Dense matrices are row-major. */
#ifndef SP_CSR_OPS_H
#define SP_CSR_OPS_H

#include <stdbool.h>
#include <stdint.h>
#include "core/csr.h"

/* ---- vectors ---------------------------------------------------------------------- */

/* y[rows] = A·x[cols]. Parallel over rows. */
void sp_csr_spmv(const sp_csr *A, const float *x, float *y);
/* y[cols] = Aᵀ·x[rows]. A scatter over A's rows, serial (no atomics, fixed order). */
void sp_csr_spmv_t(const sp_csr *A, const float *x, float *y);

/* ---- construction, conversions and checks ----------------------------------------- */

/* m = the n×n identity (pattern and data): the Jᵀ of reshapes, and the diagonal pattern
 * of every pointwise op, whose jt_values then overwrite the data. */
void sp_csr_identity(sp_csr *m, int n);

/* m = dense (rows × cols), exact zeros dropped; m is allocated (sp_csr_free it). */
void sp_csr_from_dense(sp_csr *m, int rows, int cols, const float *dense);
/* dense (rows × cols) = m, every element written. */
void sp_csr_to_dense(const sp_csr *m, float *dense);
/* Well-formed: indptr[0] = 0, non-decreasing, ends at nnz; indices in [0, cols),
 * strictly increasing within each row. */
bool sp_csr_valid(const sp_csr *m);
/* Same shape, indptr and indices. */
bool sp_csr_same_pattern(const sp_csr *a, const sp_csr *b);

/* ---- sparse × sparse: C = A·B ----------------------------------------------------- */

typedef struct sp_spgemm_plan {
    int rows, inner, cols;      /* A rows × inner, B inner × cols                   */
    int64_t a_nnz, b_nnz;       /* the patterns this plan was built for (checked)    */
    int64_t nnz;                /* entries of C                                      */
    int32_t *indptr, *indices;  /* C's pattern, owned by the plan, sorted rows       */
    double flops;               /* multiply-adds per numeric call                    */
    int nchunks;                /* row blocks of about equal flops                   */
    int32_t *chunk_rows;        /* nchunks + 1 row bounds                            */
    float *acc;                 /* nchunks × cols accumulators, all zero at rest     */
} sp_spgemm_plan;

/* The pattern of A·B (Gustavson, one marker per column). Splits the rows into
 * sp_get_threads() blocks of equal work; numeric uses that split whatever the thread
 * count later is. sp_fail if C would exceed int32 indexing. */
void sp_spgemm_symbolic(sp_spgemm_plan *p, const sp_csr *A, const sp_csr *B);
/* C with the plan's pattern (shared: own_pattern = false) and its own data array.
 * C must not outlive the plan. */
void sp_spgemm_result(const sp_spgemm_plan *p, sp_csr *C);
/* C.data = values of A·B. A and B must have the patterns the plan was built from;
 * C.data holds p->nnz floats (C from sp_spgemm_result, or any array of that size).
 * Allocates nothing. Not to be called concurrently on one plan (shared accumulators). */
void sp_spgemm_numeric(sp_spgemm_plan *p, const sp_csr *A, const sp_csr *B, sp_csr *C);
void sp_spgemm_plan_free(sp_spgemm_plan *p);

/* ---- sparse × dense and the dense small-matrix path -------------------------------- */

/* C[rows × N] = A(CSR rows × K)·B[K × N]. Parallel over A's rows. */
void sp_csr_dense_mm(const sp_csr *A, const float *B, int N, float *C);
/* C[M × cols] = A[M × rows]·B(CSR rows × cols). Parallel over A's rows. */
void sp_dense_csr_mm(int M, const float *A, const sp_csr *B, float *C);
/* C[M × N] = A[M × K]·B[K × N]. Direct loops while M·N·K is small (the H×H chains of
 * RNN/GRU, where a BLAS call costs more than the work), OpenBLAS beyond. */
void sp_dense_mm(int M, int N, int K, const float *A, const float *B, float *C);

#endif
