/* backend.c — device twins of ops, and the CPU GEMM. */
#include <cblas.h>
#include <string.h>
#include "core/backend.h"
#include "core/dnnl.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/tape.h"

#define MAX_TWINS 64

static struct { const sp_opdef *cpu; sp_device dev; const sp_opdef *impl; } twins[MAX_TWINS];
static int ntwins;

void sp_op_register_device(const sp_opdef *cpu_op, sp_device dev, const sp_opdef *impl)
{
    for (int i = 0; i < ntwins; i++)
        if (twins[i].cpu == cpu_op && twins[i].dev == dev) {
            twins[i].impl = impl;
            return;
        }
    if (ntwins == MAX_TWINS) sp_fail("too many device ops registered");
    twins[ntwins].cpu = cpu_op;
    twins[ntwins].dev = dev;
    twins[ntwins].impl = impl;
    ntwins++;
}

static const sp_device_allocator *allocators[SP_NDEVICES];

void sp_backend_register_allocator(sp_device dev, const sp_device_allocator *a) { allocators[dev] = a; }

const sp_device_allocator *sp_backend_allocator(sp_device dev)
{
    if (dev == SP_CPU || !allocators[dev])
        sp_fail("%s memory: no allocator (build with make CUDA=1 and call the backend's init)",
                sp_device_name(dev));
    return allocators[dev];
}

static const sp_device_graph *graphs[SP_NDEVICES];

void sp_backend_register_graph(sp_device dev, const sp_device_graph *g) { graphs[dev] = g; }

const sp_device_graph *sp_backend_graph(sp_device dev)
{
    if (dev == SP_CPU || !graphs[dev])
        sp_fail("%s graphs: not supported (build with make CUDA=1 and call the backend's init)", sp_device_name(dev));
    return graphs[dev];
}

void sp_fill(sp_tensor *t, float value)
{
    if (t->device != SP_CPU) {
        sp_backend_allocator(t->device)->fill(t->data, t->numel, value);
        return;
    }
    for (size_t i = 0; i < t->numel; i++) t->data[i] = value;
}

void sp_zero(sp_tensor *t)
{
    if (t->device != SP_CPU) sp_fill(t, 0.0f);
    else memset(t->data, 0, t->numel * sizeof(float));
}

void sp_accumulate(sp_tensor *dst, const sp_tensor *src)
{
    if (dst->device != src->device || dst->numel != src->numel)
        sp_fail("sp_accumulate: %s tensor of %zu into %s tensor of %zu (expected one device, equal sizes)",
                sp_device_name(src->device), src->numel, sp_device_name(dst->device), dst->numel);
    if (dst->device != SP_CPU) {
        sp_backend_allocator(dst->device)->add(dst->data, src->data, dst->numel);
        return;
    }
    for (size_t i = 0; i < dst->numel; i++) dst->data[i] += src->data[i];
}

float sp_tensor_get(const sp_tensor *t, size_t i)
{
    if (t->device == SP_CPU) return t->data[i];
    float v;
    sp_backend_allocator(t->device)->download(&v, t->data + i, 1);
    return v;
}

void sp_tensor_read(float *dst, const sp_tensor *t)
{
    if (t->device == SP_CPU) memcpy(dst, t->data, t->numel * sizeof(float));
    else sp_backend_allocator(t->device)->download(dst, t->data, t->numel);
}

sp_tensor sp_tape_copy_on(sp_tape *t, sp_device dev, const sp_tensor *x)
{
    if (x->device == dev) return *x;
    if (x->device != SP_CPU) sp_fail("sp_tape_copy_on: %s tensor to %s (expected a host tensor)",
                                     sp_device_name(x->device), sp_device_name(dev));
    sp_tensor d = sp_tape_tensor_on(t, dev, x->ndim, x->shape);
    sp_backend_allocator(dev)->upload(d.data, x->data, x->numel);
    return d;
}

const char *sp_device_name(sp_device dev) { return dev == SP_CUDA ? "cuda" : "cpu"; }

const sp_opdef *sp_op_for_device(const sp_opdef *op, sp_device dev)
{
    if (dev == SP_CPU) return op;
    for (int i = 0; i < ntwins; i++)
        if (twins[i].cpu == op && twins[i].dev == dev) return twins[i].impl;
    sp_fail("op %s: no %s implementation (build with make CUDA=1 and call the backend's init)", op->name,
            sp_device_name(dev));
}

/* ---- GEMM ------------------------------------------------------------------------- */

void sp_gemm_serial(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                    const float *B, int ldb, float beta, float *C, int ldc)
{
    if (sp_dnnl_sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)) return;   /* core/dnnl.h */
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
