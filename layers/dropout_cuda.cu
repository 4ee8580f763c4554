/* dropout_cuda.cu — the CUDA twin of layers/dropout.c: y = x ⊙ m in training mode, m
 * 0 or 1/(1 − p) per element; y = x in eval mode or for p = 0.
 * The mask is the CPU op's: drawn on the host from the layer's own generator, one
 * draw per element in element order (exactly the CPU forward's draws), then uploaded
 * into the step's device memory. So a run on the device and one on the CPU with the
 * same seed drop the same elements, and the generator advances identically. The upload
 * waits for its copy (a host sync per dropout forward); the products are one kernel.
 *   δ: dx = dy ⊙ m (or dy), one kernel (or a device copy).
 *   Jᵀ: diag(m_b) (or the identity's 1s), one launch for every sample. */
#include "core/kernels/cuda.h"
extern "C" {
#include "core/device.h"
#include "core/rng.h"
#include "core/tape.h"
#include "layers/dropout_internal.h"
#include "layers/layers.h"
}

// ----------------------------------------------------------------------------
// CUDA kernels

__global__ void dropout_mul_kernel(float *y, const float *x, const float *m, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = __fmul_rn(x[i], m[i]);
}

/* Sample b0 + b's diagonal (rows values) to data + b·stride; 1 when m is NULL. */
__global__ void dropout_jt_kernel(float *data, size_t stride, const float *m, size_t rows, int b0, int nb)
{
    size_t n = (size_t)nb * rows;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t b = i / rows, r = i % rows;
        data[b * stride + r] = m ? m[(b0 + b) * rows + r] : 1.0f;
    }
}

// ----------------------------------------------------------------------------
// kernel launchers

static void dropout_mul_cuda(float *y, const float *x, const float *m, size_t n, cudaStream_t stream)
{
    dropout_mul_kernel<<<sp_cuda_blocks(n, 256), 256, 0, stream>>>(y, x, m, n);
    sp_cuda_check(cudaGetLastError());
}

static void copy_cuda(float *dst, const float *src, size_t n, cudaStream_t stream)
{
    sp_cuda_check(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
}

// ----------------------------------------------------------------------------
// the op

static void dropout_cuda_forward(sp_node *n)
{
    const sp_tensor *x = sp_node_x(n);
    dropout_layer *l = (dropout_layer *)n->layer;
    float p = l->p;
    if (n->layer->eval || p == 0.0f) {
        n->saved = NULL;
        copy_cuda(n->out.data, x->data, x->numel, sp_cuda_stream());
        return;
    }
    /* The CPU forward's draws, in its order (layers/dropout.c). */
    sp_rng *rng = &l->rng;
    float *host = (float *)sp_tape_alloc(n->tape, x->numel * sizeof(float)), keep = 1.0f / (1.0f - p);
    for (size_t i = 0; i < x->numel; i++) host[i] = sp_rng_uniform(rng) < p ? 0.0f : keep;
    float *m = (float *)sp_tape_alloc_on(n->tape, SP_CUDA, x->numel * sizeof(float));
    sp_backend_allocator(SP_CUDA)->upload(m, host, x->numel);
    dropout_mul_cuda(n->out.data, x->data, m, x->numel, sp_cuda_stream());
    n->saved = m;
}

static void dropout_cuda_backward_input(sp_node *n, int i0, const sp_tensor *dy, sp_tensor *dx)
{
    const float *m = (const float *)n->saved;
    if (!m) copy_cuda(dx->data, dy->data, dx->numel, sp_cuda_stream());
    else dropout_mul_cuda(dx->data, dy->data, m, dx->numel, sp_cuda_stream());
}

static void dropout_jt_launch(const sp_node *n, const sp_csr *jt, size_t stride, int b0, int nb)
{
    dropout_jt_kernel<<<sp_cuda_blocks((size_t)nb * jt->rows, 256), 256, 0, sp_cuda_stream()>>>(
        jt->data, stride, (const float *)n->saved, (size_t)jt->rows, b0, nb);
    sp_cuda_check(cudaGetLastError());
}

static void dropout_cuda_jt_values(const sp_node *n, int i, int b, sp_csr *jt) { dropout_jt_launch(n, jt, 0, b, 1); }

static void dropout_cuda_jt_values_all(const sp_node *n, int i, const sp_csr *jt, size_t stride)
{
    dropout_jt_launch(n, jt, stride, 0, n->out.shape[0]);
}

static sp_kernels dropout_cuda_kernels;

extern "C" void sp_dropout_cuda_register(void)
{
    dropout_cuda_kernels.forward = dropout_cuda_forward;
    dropout_cuda_kernels.backward_input = dropout_cuda_backward_input;
    dropout_cuda_kernels.jt_values = dropout_cuda_jt_values;
    dropout_cuda_kernels.jt_values_all = dropout_cuda_jt_values_all;
    sp_op_register_kernels(&sp_op_dropout, SP_CUDA, &dropout_cuda_kernels);
}
