/* bppsa_cuda.cu — the bppsa engine's products on the device (see bppsa_cuda.h).
 *
 * Elements are row-major, as on the host. Each launch covers a batch of products that
 * share their operand types: one thread per output entry (or output row where a row is
 * accumulated by scatter), indexing the batch through pointer arrays. Every output
 * entry is summed by one thread in the CPU kernels' order (core/kernels/csr_ops.c): CSR rows
 * in index order. Dense·dense and dense·vector go to cublasSgemmBatched (FP32, the
 * lane's handle); CSR·CSR to cuSPARSE's generic SpGEMM with structure reuse (below):
 * its symbolic phase once per plan, then only cusparseSpGEMMreuse_compute per product
 * (cuSPARSE has no batched SpGEMM: one call per sample).
 *
 * The scan's levels as a CUDA graph (sp_bppsa_cuda_levels_begin/_end): a key seen for
 * the first time runs live; the second time the levels' launches are captured
 * (cudaStreamBeginCapture on the lane's stream) into a graph, instantiated and
 * launched; after that one cudaGraphLaunch replays them and the host copies the
 * elements' final addresses from the capture instead of walking the plan. A graph bakes
 * in every device address and the pointer slots' contents: the key covers the
 * addresses, the slots the graph reads are not written while it lives (a replay skips
 * them), and a new key or a new plan (sp_bppsa_cuda_cache_reset) drops it. The
 * cuSPARSE numeric phase stays out of the graph (not documented as capturable): a
 * CSR·CSR group ends the graph being captured, is recorded and replayed as live calls,
 * and the capture goes on in a next graph. */
#include <stdlib.h>
#include <string.h>
#include "core/kernels/cuda.h"
extern "C" {
#include "core/device.h"
#include "core/error.h"
#include "schedulers/backward/bppsa_cuda.h"
}

/* One CSR·CSR product of a plan on cuSPARSE: descriptors, the buffers compute still
 * needs (4 and 5), and C's pattern as cuSPARSE wrote it. */
typedef struct spgemm_dev {
    const void *key;   /* the host plan (sp_spgemm_plan) */
    cusparseSpMatDescr_t A, B, C;
    cusparseSpGEMMDescr_t d;
    void *buf4, *buf5;
    int32_t *c_ptr, *c_idx;
} spgemm_dev;

/* A launch's device pointer array, kept across steps: the n-th upload of a step lands
 * in the n-th slot, and when its addresses are that slot's last ones (the step's arena
 * hands out the same addresses every step) nothing is copied. */
typedef struct ptr_slot {
    void **host;   /* the addresses on the device now */
    void **dev;
    size_t n, cap;
    cudaStream_t st;   /* the stream that reads them */
} ptr_slot;

/* One piece of a captured scan: a graph, or (exec NULL) a cuSPARSE group run live. */
typedef struct graph_seg {
    cudaGraphExec_t exec;
    spgemm_dev *g;
    const int32_t *ap, *ai, *bp, *bi;   /* A's and B's patterns (device) */
    float **ptrs;                        /* M | X | out, count each (host) */
    int count;
} graph_seg;

enum { GRAPH_NONE, GRAPH_SEEN, GRAPH_CAPTURED };

struct sp_bppsa_cache {
    ptr_slot *ps;
    int nps, pscap, next;   /* next: the slot of the step's next upload */
    struct entry {
        const int32_t *host;
        int32_t *dev;   /* rows + 1 offsets, then nnz indices */
        int64_t rows, nnz;
    } *e;
    int n, cap;
    spgemm_dev *g;
    int ng, gcap;
    /* the levels as a graph */
    uint64_t gkey;
    int gstate;                  /* GRAPH_*: the key seen once (live), or captured */
    bool capturing;
    int cap_work;                /* launches captured since the capture (re)began */
    graph_seg *seg;
    int nseg, segcap;
    void *snap;                  /* the elements' addresses after the levels */
    size_t snap_bytes;
    int next_after;              /* the slot after the levels' */
    long gemm_in_graph, kernels, library_calls;
};

static long g_symbolic;   /* cuSPARSE symbolic phases run (sp_bppsa_cuda_symbolic_calls) */
static long g_gemm;       /* products run by cublasSgemmBatched (sp_bppsa_cuda_gemm_products) */
static sp_bppsa_graph_stats g_graph;   /* sp_bppsa_cuda_graph_stats */

// ----------------------------------------------------------------------------
// CUDA kernels

/* out[k] = src[k] (len floats each), one thread per float of the batch. */
__global__ void bppsa_copy_kernel(float *const *out, float *const *src, size_t len, int count)
{
    size_t n = len * count;
    for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < n; q += (size_t)gridDim.x * blockDim.x)
        out[q / len][q % len] = src[q / len][q % len];
}

__global__ void bppsa_gather_kernel(float *dst, float *const *src, size_t len, int count)
{
    size_t n = len * count;
    for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < n; q += (size_t)gridDim.x * blockDim.x)
        dst[q] = src[q / len][q % len];
}

/* CSR (rows × K) · X (K × N, N = 1 for a vector): one thread per output entry. */
__global__ void bppsa_csr_dense_kernel(float *const *out, float *const *M, float *const *X, const int32_t *indptr,
                                       const int32_t *indices, int rows, int N, int count)
{
    size_t per = (size_t)rows * N, n = per * count;
    for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < n; q += (size_t)gridDim.x * blockDim.x) {
        size_t k = q / per, e = q % per;
        int i = (int)(e / N), j = (int)(e % N);
        const float *a = M[k], *x = X[k];
        float acc = 0.0f;
        for (int32_t p = indptr[i]; p < indptr[i + 1]; p++) acc += a[p] * x[(size_t)indices[p] * N + j];
        out[k][e] = acc;
    }
}

/* D (Mr × rows) · CSR (rows × cols): one thread per output row, scattering in order. */
__global__ void bppsa_dense_csr_kernel(float *const *out, float *const *M, float *const *X, const int32_t *indptr,
                                       const int32_t *indices, int Mr, int rows, int cols, int count)
{
    size_t n = (size_t)Mr * count;
    for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < n; q += (size_t)gridDim.x * blockDim.x) {
        size_t k = q / Mr, m = q % Mr;
        const float *a = M[k] + m * rows, *b = X[k];
        float *c = out[k] + m * cols;
        for (int j = 0; j < cols; j++) c[j] = 0.0f;
        for (int p = 0; p < rows; p++) {
            float av = a[p];
            for (int32_t e = indptr[p]; e < indptr[p + 1]; e++) c[indices[e]] += av * b[e];
        }
    }
}

/* Entry (i, j) of a factored recurrent Jᵀ: Σ_g W_g[j][i]·v_g[j] (+ z_j on the diagonal),
 * the CPU chain_jt's arithmetic in its order. */
__device__ float bppsa_fact_at(const float *W, const float *v, int G, int zd, int H, int i, int j)
{
    float s = 0.0f;
    for (int g = 0; g < G; g++) s += W[((size_t)g * H + j) * H + i] * v[(size_t)g * H + j];
    return zd && i == j ? s + v[(size_t)G * H + j] : s;
}

/* out (R × N) = M (R × K) · X (K × N) where M and/or X is factored (mG > 0 / xG > 0:
 * entries computed on the fly from W_hh and the sample's vectors), the other dense
 * (row-major; X with N = 1 is a vector). One thread per output entry, j in order. */
__global__ void bppsa_fact_kernel(float *const *out, float *const *M, float *const *X, const float *mW, int mG,
                                  int mZ, const float *xW, int xG, int xZ, int R, int K, int N, int count)
{
    size_t per = (size_t)R * N, n = per * count;
    for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < n; q += (size_t)gridDim.x * blockDim.x) {
        size_t k = q / per, e = q % per;
        int i = (int)(e / N), c = (int)(e % N);
        const float *m = M[k], *x = X[k];
        float acc = 0.0f;
        for (int j = 0; j < K; j++) {
            float a = mG ? bppsa_fact_at(mW, m, mG, mZ, K, i, j) : m[(size_t)i * K + j];
            float b = xG ? bppsa_fact_at(xW, x, xG, xZ, N, j, c) : x[(size_t)j * N + c];
            acc += a * b;
        }
        out[k][e] = acc;
    }
}

/* dense[b] ← CSR values of sample b: one thread per (sample, row). */
__global__ void bppsa_csr_to_dense_kernel(float *dense, const float *vals, const int32_t *indptr,
                                          const int32_t *indices, int rows, int cols, size_t stride, int B)
{
    size_t n = (size_t)rows * B;
    for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < n; q += (size_t)gridDim.x * blockDim.x) {
        size_t b = q / rows;
        int i = (int)(q % rows);
        float *d = dense + b * stride + (size_t)i * cols;
        const float *v = vals + b * stride;
        for (int j = 0; j < cols; j++) d[j] = 0.0f;
        for (int32_t p = indptr[i]; p < indptr[i + 1]; p++) d[indices[p]] = v[p];
    }
}

// ----------------------------------------------------------------------------
// kernel launchers

#define GRID(n, block) sp_cuda_blocks((size_t)(n), block), block, 0, st

static size_t floats_of(const sp_bppsa_mat *m)
{
    switch (m->kind) {
    case SP_BD_VEC: return (size_t)m->rows;
    case SP_BD_CSR: return (size_t)m->nnz;
    case SP_BD_DENSE: return (size_t)m->rows * m->cols;
    default: return 0;
    }
}

/* The device copy of the n pointers at host, in the step's next slot: uploaded (on st,
 * ahead of the launch that reads it) only when they differ from the slot's. A slot that
 * grows, or passes to another stream, waits for the device first: a launch of the last
 * step may still read it. */
static void **slot_ptrs(sp_bppsa_cache *c, void *const *host, size_t n, cudaStream_t st)
{
    if (c->next == c->nps) {
        if (c->nps == c->pscap) {
            c->pscap = c->pscap ? 2 * c->pscap : 16;
            c->ps = (ptr_slot *)sp_xrealloc(c->ps, (size_t)c->pscap * sizeof *c->ps);
        }
        memset(&c->ps[c->nps++], 0, sizeof(ptr_slot));
    }
    ptr_slot *p = &c->ps[c->next++];
    size_t bytes = n * sizeof(void *);
    if (p->n == n && p->st == st && memcmp(p->host, host, bytes) == 0) return p->dev;
    if (p->cap < n || (p->dev && p->st != st)) {
        if (p->dev) {
            sp_cuda_check(cudaFree(p->dev));   /* waits for the device */
            p->dev = NULL;
        }
        if (p->cap < n) {
            p->cap = n;
            p->host = (void **)sp_xrealloc(p->host, bytes);
        }
        sp_cuda_check(cudaMalloc((void **)&p->dev, p->cap * sizeof(void *)));
    }
    memcpy(p->host, host, bytes);
    p->n = n;
    p->st = st;
    /* pageable source: staged before the call returns, so p->host may change after */
    sp_cuda_check(cudaMemcpyAsync(p->dev, p->host, bytes, cudaMemcpyHostToDevice, st));
    return p->dev;
}

/* Whether the levels are being captured (and count what goes into the graph). */
static bool c_cap(sp_bppsa_cache *c)
{
    if (!c->capturing) return false;
    c->cap_work++;
    return true;
}

/* The pointer arrays' device copy: [M | X | out], count each. */
static float **upload_ptrs(sp_bppsa_cache *c, sp_tape *t, float *const *M, float *const *X, float *const *out,
                           int count, cudaStream_t st)
{
    size_t bytes = (size_t)count * sizeof(float *);
    float **host = (float **)sp_tape_alloc(t, 3 * bytes);
    memcpy(host, M, bytes);
    memcpy(host + count, X, bytes);
    memcpy(host + 2 * count, out, bytes);
    return (float **)slot_ptrs(c, (void *const *)host, 3 * (size_t)count, st);
}

extern "C" void sp_bppsa_cuda_step_begin(sp_bppsa_cache *c) { c->next = 0; }

extern "C" int sp_bppsa_cuda_products(sp_bppsa_cache *c, sp_tape *t, const sp_bppsa_mat *Mt, const sp_bppsa_mat *Xt,
                                      const sp_bppsa_mat *Ot, float *const *M, float *const *X, float *const *out,
                                      int count)
{
    if (count == 0) return 0;
    const sp_cuda_lane *lane = sp_cuda_current();
    cudaStream_t st = lane->stream;
    if (Mt->kind == SP_BD_DENSE && (Xt->kind == SP_BD_DENSE || Xt->kind == SP_BD_VEC)) {
        /* row-major out (r × c) = M (r × k) · X (k × c) is column-major outᵀ = Xᵀ·Mᵀ */
        float **dev = upload_ptrs(c, t, M, X, out, count, st);
        if (c_cap(c)) c->library_calls++;
        int r = Mt->rows, k = Mt->cols, c = Xt->kind == SP_BD_VEC ? 1 : Xt->cols;
        float one = 1.0f, zero = 0.0f;
        sp_cublas_check(cublasSgemmBatched(lane->cublas, CUBLAS_OP_N, CUBLAS_OP_N, c, r, k, &one, dev + count, c, dev,
                                           k, &zero, dev + 2 * count, c, count));
        g_gemm += count;
        return 1;
    }
    float **dev = upload_ptrs(c, t, M, X, out, count, st);
    float **dM = dev, **dX = dev + count, **dO = dev + 2 * count;
    if (Mt->kind == SP_BD_ID || Xt->kind == SP_BD_ID) {
        size_t len = floats_of(Ot);
        bppsa_copy_kernel<<<GRID(len * count, 256)>>>(dO, Xt->kind == SP_BD_ID ? dM : dX, len, count);
    } else if (Mt->kind == SP_BD_FACT || Xt->kind == SP_BD_FACT) {
        if (Mt->kind == SP_BD_CSR || Xt->kind == SP_BD_CSR)
            sp_fail("bppsa (cuda): internal: a factored Jᵀ times a CSR operand");
        int N = Xt->kind == SP_BD_VEC ? 1 : Xt->cols;
        bool mf = Mt->kind == SP_BD_FACT, xf = Xt->kind == SP_BD_FACT;
        bppsa_fact_kernel<<<GRID((size_t)Mt->rows * N * count, 256)>>>(
            dO, dM, dX, mf ? Mt->w : NULL, mf ? Mt->gates : 0, mf && Mt->zdiag, xf ? Xt->w : NULL,
            xf ? Xt->gates : 0, xf && Xt->zdiag, Mt->rows, Mt->cols, N, count);
    } else if (Mt->kind == SP_BD_CSR) {   /* · vector or · dense */
        int N = Xt->kind == SP_BD_VEC ? 1 : Xt->cols;
        bppsa_csr_dense_kernel<<<GRID((size_t)Mt->rows * N * count, 256)>>>(dO, dM, dX, Mt->indptr, Mt->indices,
                                                                            Mt->rows, N, count);
    } else if (Mt->kind == SP_BD_DENSE && Xt->kind == SP_BD_CSR) {
        bppsa_dense_csr_kernel<<<GRID((size_t)Mt->rows * count, 128)>>>(dO, dM, dX, Xt->indptr, Xt->indices,
                                                                        Mt->rows, Xt->rows, Xt->cols, count);
    } else {
        sp_fail("bppsa (cuda): internal: no product for kinds %d · %d", Mt->kind, Xt->kind);
    }
    sp_cuda_check(cudaGetLastError());
    if (c_cap(c)) c->kernels++;
    return 1;
}

extern "C" void sp_bppsa_cuda_gather(sp_bppsa_cache *c, float *dst, float *const *src, int count, size_t len)
{
    if (count == 0 || len == 0) return;
    cudaStream_t st = sp_cuda_stream();
    float **dev = (float **)slot_ptrs(c, (void *const *)src, (size_t)count, st);
    bppsa_gather_kernel<<<GRID(len * count, 256)>>>(dst, dev, len, count);
    sp_cuda_check(cudaGetLastError());
}

extern "C" void sp_bppsa_cuda_csr_to_dense(const sp_bppsa_mat *P, const float *vals, float *dense, size_t stride,
                                           int B)
{
    cudaStream_t st = sp_cuda_stream();
    bppsa_csr_to_dense_kernel<<<GRID((size_t)P->rows * B, 128)>>>(dense, vals, P->indptr, P->indices, P->rows,
                                                                  P->cols, stride, B);
    sp_cuda_check(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// the pattern cache

extern "C" sp_bppsa_cache *sp_bppsa_cuda_cache_new(void)
{
    return (sp_bppsa_cache *)sp_xcalloc(1, sizeof(sp_bppsa_cache));
}

static void graph_drop(sp_bppsa_cache *c);

extern "C" void sp_bppsa_cuda_cache_reset(sp_bppsa_cache *c)
{
    if (!c) return;
    graph_drop(c);   /* it bakes in the plan's patterns, slots and products */
    for (int i = 0; i < c->n; i++) sp_cuda_check(cudaFree(c->e[i].dev));   /* waits for the device */
    c->n = 0;
    for (int i = 0; i < c->ng; i++) {
        spgemm_dev *g = &c->g[i];
        sp_cusparse_check(cusparseDestroySpMat(g->A));
        sp_cusparse_check(cusparseDestroySpMat(g->B));
        sp_cusparse_check(cusparseDestroySpMat(g->C));
        sp_cusparse_check(cusparseSpGEMM_destroyDescr(g->d));
        sp_cuda_check(cudaFree(g->buf4));
        sp_cuda_check(cudaFree(g->buf5));
        sp_cuda_check(cudaFree(g->c_ptr));
        sp_cuda_check(cudaFree(g->c_idx));
    }
    c->ng = 0;
    for (int i = 0; i < c->nps; i++) {
        sp_cuda_check(cudaFree(c->ps[i].dev));
        free(c->ps[i].host);
    }
    c->nps = c->next = 0;
}

extern "C" void sp_bppsa_cuda_cache_free(sp_bppsa_cache *c)
{
    if (!c) return;
    sp_bppsa_cuda_cache_reset(c);
    free(c->e);
    free(c->g);
    free(c->ps);
    free(c->seg);
    free(c);
}

extern "C" void sp_bppsa_cuda_pattern(sp_bppsa_cache *c, int rows, int64_t nnz, const int32_t *indptr,
                                      const int32_t *indices, const int32_t **d_indptr, const int32_t **d_indices)
{
    for (int i = 0; i < c->n; i++)
        if (c->e[i].host == indptr && c->e[i].rows == rows && c->e[i].nnz == nnz) {
            *d_indptr = c->e[i].dev;
            *d_indices = c->e[i].dev + rows + 1;
            return;
        }
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 16;
        c->e = (sp_bppsa_cache::entry *)sp_xrealloc(c->e, (size_t)c->cap * sizeof *c->e);
    }
    sp_bppsa_cache::entry *e = &c->e[c->n++];
    e->host = indptr;
    e->rows = rows;
    e->nnz = nnz;
    size_t count = (size_t)rows + 1 + (size_t)nnz;
    sp_cuda_check(cudaMalloc((void **)&e->dev, count * sizeof(int32_t)));
    /* on the lane's stream, ahead of the kernels that read it (the host pattern lives
     * until the plan changes, and the reset that precedes that waits for the device) */
    cudaStream_t st = sp_cuda_stream();
    sp_cuda_check(cudaMemcpyAsync(e->dev, indptr, ((size_t)rows + 1) * sizeof(int32_t), cudaMemcpyHostToDevice, st));
    if (nnz)
        sp_cuda_check(cudaMemcpyAsync(e->dev + rows + 1, indices, (size_t)nnz * sizeof(int32_t),
                                      cudaMemcpyHostToDevice, st));
    *d_indptr = e->dev;
    *d_indices = e->dev + rows + 1;
}

// ----------------------------------------------------------------------------
// CSR·CSR on cuSPARSE: the generic SpGEMM with structure reuse

extern "C" long sp_bppsa_cuda_symbolic_calls(void) { return g_symbolic; }
extern "C" long sp_bppsa_cuda_gemm_products(void) { return g_gemm; }

static void *dev_buffer(size_t bytes)
{
    void *p = NULL;
    sp_cuda_check(cudaMalloc(&p, bytes ? bytes : 1));
    return p;
}

static cusparseSpMatDescr_t csr_descr(int64_t rows, int64_t cols, int64_t nnz, const int32_t *ptr, const int32_t *idx)
{
    cusparseSpMatDescr_t m;
    sp_cusparse_check(cusparseCreateCsr(&m, rows, cols, nnz, (void *)ptr, (void *)idx, NULL, CUSPARSE_INDEX_32I,
                                        CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
    return m;
}

/* The symbolic phase of one product, once per plan: work estimation, C's nnz and row
 * offsets, C's column indices, checked against the host's pattern (the rest of the
 * plan's types were derived from it). */
static spgemm_dev *spgemm_symbolic(sp_bppsa_cache *c, const void *key, const sp_bppsa_mat *Mt,
                                   const sp_bppsa_mat *Xt, const int32_t *h_ptr, const int32_t *h_idx, int64_t h_nnz)
{
    for (int i = 0; i < c->ng; i++)
        if (c->g[i].key == key) return &c->g[i];
    if (c->ng == c->gcap) {
        c->gcap = c->gcap ? 2 * c->gcap : 8;
        c->g = (spgemm_dev *)sp_xrealloc(c->g, (size_t)c->gcap * sizeof *c->g);
    }
    spgemm_dev *g = &c->g[c->ng++];
    memset(g, 0, sizeof *g);
    g->key = key;
    cusparseHandle_t h = sp_cuda_current()->cusparse;
    cusparseOperation_t N = CUSPARSE_OPERATION_NON_TRANSPOSE;
    cusparseSpGEMMAlg_t alg = CUSPARSE_SPGEMM_DEFAULT;
    int64_t rows = Mt->rows, cols = Xt->cols;
    g->A = csr_descr(Mt->rows, Mt->cols, Mt->nnz, Mt->indptr, Mt->indices);
    g->B = csr_descr(Xt->rows, Xt->cols, Xt->nnz, Xt->indptr, Xt->indices);
    g->c_ptr = (int32_t *)dev_buffer(((size_t)rows + 1) * sizeof(int32_t));
    g->C = csr_descr(rows, cols, 0, g->c_ptr, NULL);
    sp_cusparse_check(cusparseSpGEMM_createDescr(&g->d));
    size_t s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0;
    sp_cusparse_check(cusparseSpGEMMreuse_workEstimation(h, N, N, g->A, g->B, g->C, alg, g->d, &s1, NULL));
    void *b1 = dev_buffer(s1);
    sp_cusparse_check(cusparseSpGEMMreuse_workEstimation(h, N, N, g->A, g->B, g->C, alg, g->d, &s1, b1));
    sp_cusparse_check(cusparseSpGEMMreuse_nnz(h, N, N, g->A, g->B, g->C, alg, g->d, &s2, NULL, &s3, NULL, &s4, NULL));
    void *b2 = dev_buffer(s2), *b3 = dev_buffer(s3);
    g->buf4 = dev_buffer(s4);
    sp_cusparse_check(cusparseSpGEMMreuse_nnz(h, N, N, g->A, g->B, g->C, alg, g->d, &s2, b2, &s3, b3, &s4, g->buf4));
    int64_t r, cc, nnz;
    sp_cusparse_check(cusparseSpMatGetSize(g->C, &r, &cc, &nnz));
    if (nnz != h_nnz)
        sp_fail("bppsa (cuda): cuSPARSE finds %lld entries in a product, the host's symbolic phase %lld",
                (long long)nnz, (long long)h_nnz);
    g->c_idx = (int32_t *)dev_buffer((size_t)nnz * sizeof(int32_t));
    float *vals = (float *)dev_buffer((size_t)nnz * sizeof(float));   /* copy wants C complete */
    sp_cusparse_check(cusparseCsrSetPointers(g->C, g->c_ptr, g->c_idx, vals));
    sp_cusparse_check(cusparseSpGEMMreuse_copy(h, N, N, g->A, g->B, g->C, alg, g->d, &s5, NULL));
    g->buf5 = dev_buffer(s5);
    sp_cusparse_check(cusparseSpGEMMreuse_copy(h, N, N, g->A, g->B, g->C, alg, g->d, &s5, g->buf5));
    /* C's pattern against the host's: downstream products use the host's */
    int32_t *ptr = (int32_t *)sp_xmalloc(((size_t)rows + 1 + (size_t)nnz) * sizeof(int32_t)), *idx = ptr + rows + 1;
    sp_cuda_check(cudaStreamSynchronize(sp_cuda_stream()));
    sp_cuda_check(cudaMemcpy(ptr, g->c_ptr, ((size_t)rows + 1) * sizeof(int32_t), cudaMemcpyDeviceToHost));
    if (nnz) sp_cuda_check(cudaMemcpy(idx, g->c_idx, (size_t)nnz * sizeof(int32_t), cudaMemcpyDeviceToHost));
    bool same = memcmp(ptr, h_ptr, ((size_t)rows + 1) * sizeof(int32_t)) == 0 &&
                memcmp(idx, h_idx, (size_t)nnz * sizeof(int32_t)) == 0;
    free(ptr);
    if (!same) sp_fail("bppsa (cuda): cuSPARSE's pattern of a product differs from the host's symbolic phase");
    sp_cuda_check(cudaFree(b1));
    sp_cuda_check(cudaFree(b2));
    sp_cuda_check(cudaFree(b3));
    sp_cuda_check(cudaFree(vals));
    g_symbolic++;
    return g;
}

/* The numeric phase of count products of g (patterns ap/ai, bp/bi on the device). */
static void spgemm_run(spgemm_dev *g, const int32_t *ap, const int32_t *ai, const int32_t *bp, const int32_t *bi,
                       float *const *M, float *const *X, float *const *out, int count)
{
    cusparseHandle_t h = sp_cuda_current()->cusparse;
    cusparseOperation_t N = CUSPARSE_OPERATION_NON_TRANSPOSE;
    float one = 1.0f, zero = 0.0f;
    for (int k = 0; k < count; k++) {
        sp_cusparse_check(cusparseCsrSetPointers(g->A, (void *)ap, (void *)ai, M[k]));
        sp_cusparse_check(cusparseCsrSetPointers(g->B, (void *)bp, (void *)bi, X[k]));
        sp_cusparse_check(cusparseCsrSetPointers(g->C, g->c_ptr, g->c_idx, out[k]));
        sp_cusparse_check(cusparseSpGEMMreuse_compute(h, N, N, &one, g->A, g->B, &zero, g->C, CUDA_R_32F,
                                                      CUSPARSE_SPGEMM_DEFAULT, g->d));
    }
}

static void capture_begin(sp_bppsa_cache *c);
static void capture_end(sp_bppsa_cache *c);
static graph_seg *seg_push(sp_bppsa_cache *c);

extern "C" int sp_bppsa_cuda_spgemm(sp_bppsa_cache *c, const void *key, const sp_bppsa_mat *Mt,
                                    const sp_bppsa_mat *Xt, const int32_t *h_ptr, const int32_t *h_idx,
                                    int64_t h_nnz, float *const *M, float *const *X, float *const *out, int count)
{
    spgemm_dev *g = spgemm_symbolic(c, key, Mt, Xt, h_ptr, h_idx, h_nnz);
    if (c->capturing) {   /* outside the graphs: recorded, run in order with them */
        capture_end(c);
        graph_seg *q = seg_push(c);
        *q = (graph_seg){.g = g, .ap = Mt->indptr, .ai = Mt->indices, .bp = Xt->indptr, .bi = Xt->indices,
                         .count = count};
        q->ptrs = (float **)sp_xmalloc(3 * (size_t)count * sizeof(float *));
        memcpy(q->ptrs, M, (size_t)count * sizeof(float *));
        memcpy(q->ptrs + count, X, (size_t)count * sizeof(float *));
        memcpy(q->ptrs + 2 * count, out, (size_t)count * sizeof(float *));
        capture_begin(c);
        return count;
    }
    spgemm_run(g, Mt->indptr, Mt->indices, Xt->indptr, Xt->indices, M, X, out, count);
    return count;
}

// ----------------------------------------------------------------------------
// the levels as a CUDA graph

static graph_seg *seg_push(sp_bppsa_cache *c)
{
    if (c->nseg == c->segcap) {
        c->segcap = c->segcap ? 2 * c->segcap : 4;
        c->seg = (graph_seg *)sp_xrealloc(c->seg, (size_t)c->segcap * sizeof *c->seg);
    }
    graph_seg *q = &c->seg[c->nseg++];
    memset(q, 0, sizeof *q);
    return q;
}

static void graph_drop(sp_bppsa_cache *c)
{
    if (c->capturing) sp_fail("bppsa (cuda): internal: the plan changed during a capture");
    for (int i = 0; i < c->nseg; i++) {
        if (c->seg[i].exec) sp_cuda_check(cudaGraphExecDestroy(c->seg[i].exec));
        free(c->seg[i].ptrs);
    }
    c->nseg = 0;
    free(c->snap);
    c->snap = NULL;
    c->snap_bytes = 0;
    c->gstate = GRAPH_NONE;
}

static void capture_begin(sp_bppsa_cache *c)
{
    sp_cuda_check(cudaStreamBeginCapture(sp_cuda_stream(), cudaStreamCaptureModeGlobal));
    c->capturing = true;
    c->cap_work = 0;
}

/* The graph captured since capture_begin, instantiated, as the next piece (none if
 * nothing was captured). */
static void capture_end(sp_bppsa_cache *c)
{
    cudaGraph_t gr = NULL;
    sp_cuda_check(cudaStreamEndCapture(sp_cuda_stream(), &gr));
    c->capturing = false;
    if (c->cap_work) {
        graph_seg *q = seg_push(c);
        sp_cuda_check(cudaGraphInstantiate(&q->exec, gr, 0));
    }
    sp_cuda_check(cudaGraphDestroy(gr));
}

/* The captured levels, in order, on the lane's stream. */
static void graph_run(sp_bppsa_cache *c)
{
    for (int i = 0; i < c->nseg; i++) {
        graph_seg *q = &c->seg[i];
        if (q->exec) sp_cuda_check(cudaGraphLaunch(q->exec, sp_cuda_stream()));
        else spgemm_run(q->g, q->ap, q->ai, q->bp, q->bi, q->ptrs, q->ptrs + q->count, q->ptrs + 2 * q->count,
                        q->count);
    }
}

static bool graphs_on(void)
{
    const char *e = getenv("SCANPROP_BPPSA_GRAPH");
    if (!e || !*e || strcmp(e, "on") == 0) return true;
    if (strcmp(e, "off") == 0) return false;
    sp_fail("SCANPROP_BPPSA_GRAPH=%s (expected on or off)", e);
}

extern "C" int sp_bppsa_cuda_levels_begin(sp_bppsa_cache *c, uint64_t key, void *elems, size_t bytes)
{
    if (!graphs_on()) {
        graph_drop(c);
        return SP_BPPSA_LEVELS_LIVE;
    }
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    sp_cuda_check(cudaStreamIsCapturing(sp_cuda_stream(), &cs));
    if (cs != cudaStreamCaptureStatusNone) return SP_BPPSA_LEVELS_LIVE;   /* inside a capture of the whole step */
    if (c->gstate == GRAPH_CAPTURED && c->gkey == key && c->snap_bytes == bytes) {
        graph_run(c);
        memcpy(elems, c->snap, bytes);
        c->next = c->next_after;   /* the slots the graph reads stay as they are */
        g_gemm += c->gemm_in_graph;
        g_graph.replays++;
        return SP_BPPSA_LEVELS_REPLAYED;
    }
    if (c->gstate == GRAPH_SEEN && c->gkey == key) {   /* seen before: capture this time */
        c->gemm_in_graph = g_gemm;
        c->kernels = c->library_calls = 0;
        capture_begin(c);
        return SP_BPPSA_LEVELS_CAPTURE;
    }
    graph_drop(c);   /* a new key: live, captured when it comes again */
    c->gkey = key;
    c->gstate = GRAPH_SEEN;
    return SP_BPPSA_LEVELS_LIVE;
}

extern "C" void sp_bppsa_cuda_levels_end(sp_bppsa_cache *c, const void *elems, size_t bytes)
{
    if (!c->capturing) return;
    capture_end(c);
    c->snap = sp_xmalloc(bytes ? bytes : 1);
    memcpy(c->snap, elems, bytes);
    c->snap_bytes = bytes;
    c->next_after = c->next;
    c->gemm_in_graph = g_gemm - c->gemm_in_graph;
    c->gstate = GRAPH_CAPTURED;
    g_graph.captures++;
    g_graph.kernels = c->kernels;
    g_graph.library_calls = c->library_calls;
    g_graph.pieces = c->nseg;
    g_graph.launches = 0;
    for (int i = 0; i < c->nseg; i++) g_graph.launches += c->seg[i].exec != NULL;
    graph_run(c);   /* the captured levels run now */
}

extern "C" void sp_bppsa_cuda_graph_stats(sp_bppsa_graph_stats *out) { *out = g_graph; }
