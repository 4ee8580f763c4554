/* dense.c — the CPU GEMM: oneDNN or OpenBLAS, split over the thread pool. */
#include <cblas.h>
#include <string.h>
#include "core/kernels/dense.h"
#include "core/kernels/dnnl.h"
#include "core/parallel.h"

void sp_gemm_serial(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                    const float *B, int ldb, float beta, float *C, int ldc)
{
    if (sp_dnnl_sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)) return;   /* core/kernels/dnnl.h */
    if (beta == 0.0f && M > 0 && N > 0) {
        /* OpenBLAS clears C with a slow scalar pass for beta = 0 (7% of a LeNet step's
         * instructions); memset and accumulate instead. Only a −0 result becomes +0. */
        for (int i = 0; i < M; i++) memset(C + (size_t)i * ldc, 0, (size_t)N * sizeof(float));
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K,
                alpha, A, lda, B, ldb, beta, C, ldc);
}

typedef struct gemm_job {
    bool ta, tb, by_rows;
    int M, N, K, lda, ldb, ldc, nblocks;
    float alpha, beta;
    const float *A, *B;
    float *C;
} gemm_job;

/* Blocks [begin, end) of the split, one OpenBLAS call each (also when run inline). */
static void gemm_blocks(void *ctx, size_t begin, size_t end)
{
    const gemm_job *J = ctx;
    int dim = J->by_rows ? J->M : J->N;
    for (size_t blk = begin; blk < end; blk++) {
        int lo = (int)((long)dim * (long)blk / J->nblocks), hi = (int)((long)dim * (long)(blk + 1) / J->nblocks);
        if (J->by_rows)   /* rows lo..hi of op(A) and of C */
            sp_gemm_serial(J->ta, J->tb, hi - lo, J->N, J->K, J->alpha, J->ta ? J->A + lo : J->A + (size_t)lo * J->lda,
                           J->lda, J->B, J->ldb, J->beta, J->C + (size_t)lo * J->ldc, J->ldc);
        else   /* columns lo..hi of op(B) and of C */
            sp_gemm_serial(J->ta, J->tb, J->M, hi - lo, J->K, J->alpha, J->A, J->lda,
                           J->tb ? J->B + (size_t)lo * J->ldb : J->B + lo, J->ldb, J->beta, J->C + lo, J->ldc);
    }
}

void sp_gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
             const float *B, int ldb, float beta, float *C, int ldc)
{
    enum { MIN_BLOCK = 16 };   /* rows or columns per block: keeps OpenBLAS's tiles full */
    bool by_rows = M > N;
    int dim = by_rows ? M : N, nblocks = sp_get_threads();
    if (nblocks > dim / MIN_BLOCK) nblocks = dim / MIN_BLOCK;
    if (nblocks <= 1 || (long)M * N * K < SP_GEMM_SPLIT_MACS) {
        sp_gemm_serial(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    gemm_job J = {.ta = trans_a, .tb = trans_b, .by_rows = by_rows, .M = M, .N = N, .K = K, .lda = lda,
                  .ldb = ldb, .ldc = ldc, .nblocks = nblocks, .alpha = alpha, .beta = beta, .A = A, .B = B, .C = C};
    sp_parallel_for((size_t)nblocks, gemm_blocks, &J);
}
