/* softmax_ce_cuda.cu — the CUDA twin of layers/softmax_ce.c: softmax + cross-entropy,
 * mean over the batch, logits z [B, K] on the device, labels [B] on the host.
 *
 *   forward: labels are range-checked on the host (the CPU op's message) and copied up
 *            (or read where the caller staged them: sp_tape.dev_labels);
 *            one block of threads, each thread one row (max, Σ exp in double, p saved,
 *            the row's loss in double) into shared memory; after a barrier thread 0
 *            adds the rows' losses in row order — the CPU op's order, so the loss is
 *            the CPU's bit for bit wherever exp/log are (the emulator: always).
 *   δ:       dz = dl/B · (p − onehot), dl read from the device.
 * Per-step state on the device: p [B, K] and the labels. */
#include "core/kernels/cuda.h"
extern "C" {
#include "core/device.h"
#include "core/error.h"
#include "core/tape.h"
#include "layers/layers.h"
}

#define CE_THREADS 128

typedef struct ce_saved {
    float *p;
    int *labels;
} ce_saved;

// ----------------------------------------------------------------------------
// CUDA kernels

__global__ void ce_forward_kernel(float *loss, float *p, const float *z, const int *labels, int B, int K)
{
    __shared__ double row_loss[CE_THREADS];
    double total = 0.0;
    for (int b0 = 0; b0 < B; b0 += CE_THREADS) {
        int b = b0 + (int)threadIdx.x;
        if (b < B) {
            const float *zb = z + (size_t)b * K;
            float *pb = p + (size_t)b * K;
            float m = zb[0];
            for (int k = 1; k < K; k++) m = zb[k] > m ? zb[k] : m;
            double s = 0.0;
            for (int k = 0; k < K; k++) s += exp((double)(zb[k] - m));
            for (int k = 0; k < K; k++) pb[k] = (float)(exp((double)(zb[k] - m)) / s);
            row_loss[threadIdx.x] = log(s) - (double)(zb[labels[b]] - m);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int rows = B - b0 < CE_THREADS ? B - b0 : CE_THREADS;
            for (int r = 0; r < rows; r++) total += row_loss[r];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) loss[0] = (float)(total / B);
}

__global__ void ce_backward_kernel(float *dz, const float *dl, const float *p, const int *labels, int B, int K)
{
    size_t n = (size_t)B * K;
    float scale = dl[0] / (float)B;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int k = (int)(i % K), b = (int)(i / K);
        dz[i] = __fmul_rn(scale, __fsub_rn(p[i], k == labels[b] ? 1.0f : 0.0f));
    }
}

// ----------------------------------------------------------------------------
// kernel launchers

static void ce_forward_cuda(float *loss, float *p, const float *z, const int *labels, int B, int K,
                            cudaStream_t stream)
{
    ce_forward_kernel<<<1, CE_THREADS, 0, stream>>>(loss, p, z, labels, B, K);
    sp_cuda_check(cudaGetLastError());
}

static void ce_backward_cuda(float *dz, const float *dl, const float *p, const int *labels, int B, int K,
                             cudaStream_t stream)
{
    ce_backward_kernel<<<sp_cuda_blocks((size_t)B * K, 256), 256, 0, stream>>>(dz, dl, p, labels, B, K);
    sp_cuda_check(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// the op

static void ce_cuda_forward(sp_node *n)
{
    const sp_tensor *z = sp_node_x(n);
    int B = z->shape[0], K = z->shape[1];
    for (int b = 0; b < B; b++)
        if (n->labels[b] < 0 || n->labels[b] >= K)
            sp_fail("softmax_ce: label %d of sample %d out of range [0, %d)", n->labels[b], b, K);
    ce_saved *s = (ce_saved *)sp_tape_alloc(n->tape, sizeof *s);
    s->p = (float *)sp_tape_alloc_on(n->tape, SP_CUDA, z->numel * sizeof(float));
    n->saved = s;
    cudaStream_t st = sp_cuda_stream();
    if (n->dev_labels) {   /* staged by the caller (a whole-step graph must not copy pageable memory) */
        s->labels = (int *)n->dev_labels;
    } else {   /* labels outlive the step (sp_apply_loss's contract), so the copy may stay queued */
        s->labels = (int *)sp_tape_alloc_on(n->tape, SP_CUDA, (size_t)B * sizeof(int));
        sp_cuda_check(cudaMemcpyAsync(s->labels, n->labels, (size_t)B * sizeof(int), cudaMemcpyHostToDevice, st));
    }
    ce_forward_cuda(n->out.data, s->p, z->data, s->labels, B, K, st);
}

static void ce_cuda_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    const ce_saved *s = (const ce_saved *)n->saved;
    ce_backward_cuda(dx->data, dy->data, s->p, s->labels, dx->shape[0], dx->shape[1], sp_cuda_stream());
}

static sp_kernels ce_cuda_kernels;

extern "C" void sp_softmax_ce_cuda_register(void)
{
    ce_cuda_kernels.forward = ce_cuda_forward;
    ce_cuda_kernels.backward_input = ce_cuda_backward_input;
    sp_op_register_kernels(&sp_op_softmax_ce, SP_CUDA, &ce_cuda_kernels);
}
