/* dense.c — the CPU GEMM: oneDNN or OpenBLAS, split over the thread pool. */
#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "core/kernels/dense.h"
#include "core/kernels/dnnl.h"
#include "core/error.h"
#include "core/threads.h"

/* ---- OpenBLAS's allocating small-matrix kernel -----------------------------------------
 * OpenBLAS 0.3.21's small-matrix SGEMM on its AVX-512 cores (SkylakeX and Cooperlake,
 * what it picks on AVX-512 CPUs, Intel and AMD Zen 4/5) computes a row-major A·B (no
 * transposes) with M·N·K ≤ 10⁶ and K ≥ 32 whose N leaves 1 to 8 columns past a multiple
 * of 16 by copying B's last columns into a buffer it mallocs and frees per call (5 calls
 * per LeNet step at batch 8). Measured over every NN, NT, TN and TT shape from 1 to 200:
 * those NN shapes allocate, nothing else does, and no other core allocates.
 * The same bits without the allocation: the multiple-of-16 columns as one A·B call and
 * the last columns as A·(Bᵀ)ᵀ calls on a transposed copy of them, whose small kernel
 * computes what the allocating branch computes on its copy (identical results over
 * 6,600 random shapes, M ≤ 400, N ≤ 100, K ≤ 431, both cores; tests/test_alloc.c checks
 * a grid against OpenBLAS's own call). The copy lives in a per-thread scratch that only
 * grows. */
enum { SMALL_MAX_MACS = 1000000, SMALL_MIN_K = 32, SMALL_TAIL_MAX = 8, SMALL_BLOCK = 16, SMALL_NT_MAX_C = 1200 };

static atomic_int g_small_allocates = -1;   /* -1 not asked yet */

static bool small_kernel_allocates(void)
{
    int v = atomic_load_explicit(&g_small_allocates, memory_order_relaxed);
    if (v < 0) {   /* racing threads compute the same answer */
        const char *core = openblas_get_corename();
        v = core && (!strcmp(core, "SkylakeX") || !strcmp(core, "Cooperlake"));
        atomic_store_explicit(&g_small_allocates, v, memory_order_relaxed);
    }
    return v;
}

typedef struct scratch {
    size_t cap;   /* floats */
    float data[];
} scratch;

static pthread_key_t g_scratch_key;
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;
static _Thread_local scratch *t_scratch;   /* also keeps it reachable for LeakSanitizer */

static void scratch_key_make(void)
{
    if (pthread_key_create(&g_scratch_key, free)) sp_fail("gemm: cannot create the scratch key");
}

/* This thread's scratch of at least n floats (allocates only when it must grow). */
static float *thread_scratch(size_t n)
{
    if (!t_scratch || t_scratch->cap < n) {
        pthread_once(&g_scratch_once, scratch_key_make);
        free(t_scratch);
        t_scratch = sp_xmalloc(sizeof(scratch) + n * sizeof(float));
        t_scratch->cap = n;
        pthread_setspecific(g_scratch_key, t_scratch);   /* freed when the thread ends */
    }
    return t_scratch->data;
}

/* C = alpha·A·B + beta·C as OpenBLAS's small kernel would compute it, without its malloc. */
static void gemm_nn_tail_split(int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                               float beta, float *C, int ldc)
{
    int tail = N % SMALL_BLOCK, N0 = N - tail;
    if (N0 > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N0, K, alpha, A, lda, B, ldb, beta, C, ldc);
    float *bt = thread_scratch((size_t)tail * K);   /* B's last columns as rows: tail × K */
    for (int k = 0; k < K; k++)
        for (int j = 0; j < tail; j++) bt[(size_t)j * K + k] = B[(size_t)k * ldb + N0 + j];
    /* OpenBLAS takes that call's small kernel only for rows × tail ≤ SMALL_NT_MAX_C: row
     * blocks of a multiple of 4 (its block of rows there) */
    int rows = (SMALL_NT_MAX_C / tail) & ~3;
    for (int i0 = 0; i0 < M; i0 += rows)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M - i0 < rows ? M - i0 : rows, tail, K, alpha,
                    A + (size_t)i0 * lda, lda, bt, K, beta, C + (size_t)i0 * ldc + N0, ldc);
}

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
    int tail = N % SMALL_BLOCK;
    if (!trans_a && !trans_b && tail >= 1 && tail <= SMALL_TAIL_MAX && K >= SMALL_MIN_K &&
        (double)M * N * K <= SMALL_MAX_MACS && M > 0 && small_kernel_allocates()) {
        gemm_nn_tail_split(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
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
