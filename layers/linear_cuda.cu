/* linear_cuda.cu — the CUDA twin of layers/linear.c: y = x·Wᵀ + b, GEMMs on cuBLAS.
 *
 * x [B, in], W [out, in], b [out], y [B, out], all device memory, row-major.
 *   forward:  y = b (broadcast), then y += x·Wᵀ      — as the CPU op, beta = 1
 *   δ:        dx = dy·W
 *   G:        dW += dyᵀ·x (beta = 1), db += Σ_b dy    — column sums in row order,
 *             the CPU op's summation order, so db matches it bit for bit.
 * Shapes, cost and initialisation are the CPU op's (device-independent). */
#include "core/kernels/cuda.h"
extern "C" {
#include "core/device.h"
#include "core/tape.h"
#include "layers/layers.h"
}

// ----------------------------------------------------------------------------
// CUDA kernels

__global__ void linear_bias_broadcast_kernel(float *y, const float *b, int B, int out)
{
    size_t n = (size_t)B * out;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = b[i % out];
}

/* One thread per output column j: neighbouring threads read neighbouring dy entries. */
__global__ void linear_bias_grad_kernel(float *db, const float *dy, int B, int out)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= out) return;
    float acc = db[j];
    for (int i = 0; i < B; i++) acc += dy[(size_t)i * out + j];
    db[j] = acc;
}

// ----------------------------------------------------------------------------
// kernel launchers

static void linear_forward_cuda(float *y, const float *x, const float *W, const float *b, int B, int in, int out,
                                cudaStream_t stream)
{
    linear_bias_broadcast_kernel<<<sp_cuda_blocks((size_t)B * out, 256), 256, 0, stream>>>(y, b, B, out);
    sp_cuda_check(cudaGetLastError());
    sp_cuda_gemm(stream, false, true, B, out, in, 1.0f, x, in, W, in, 1.0f, y, out);
}

static void linear_backward_input_cuda(float *dx, const float *dy, const float *W, int B, int in, int out,
                                       cudaStream_t stream)
{
    sp_cuda_gemm(stream, false, false, B, in, out, 1.0f, dy, out, W, in, 0.0f, dx, in);
}

static void linear_backward_params_cuda(float *dW, float *db, const float *dy, const float *x, int B, int in,
                                        int out, cudaStream_t stream)
{
    sp_cuda_gemm(stream, true, false, out, in, B, 1.0f, dy, out, x, in, 1.0f, dW, in);
    linear_bias_grad_kernel<<<sp_cuda_blocks((size_t)out, 128), 128, 0, stream>>>(db, dy, B, out);
    sp_cuda_check(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// the op

/* W is [out, in]: the sizes come from the parameter, the CPU layer struct stays private. */
#define W_OF(n) (&(n)->layer->params[0]->value)

static void linear_cuda_forward(sp_node *n)
{
    sp_cuda_require_params(n->layer);
    const sp_tensor *x = sp_node_x(n);
    int out = W_OF(n)->shape[0], in = W_OF(n)->shape[1];
    linear_forward_cuda(n->out.data, x->data, W_OF(n)->data, n->layer->params[1]->value.data, x->shape[0], in, out,
                        sp_cuda_stream());
}

static void linear_cuda_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    int out = W_OF(n)->shape[0], in = W_OF(n)->shape[1];
    linear_backward_input_cuda(dx->data, dy->data, W_OF(n)->data, dy->shape[0], in, out, sp_cuda_stream());
}

static void linear_cuda_backward_params(sp_node *n, const sp_tensor *dy)
{
    int out = W_OF(n)->shape[0], in = W_OF(n)->shape[1];
    linear_backward_params_cuda(n->layer->params[0]->grad.data, n->layer->params[1]->grad.data, dy->data,
                                sp_node_x(n)->data, dy->shape[0], in, out, sp_cuda_stream());
}

/* Jᵀ (the bppsa engine on the device): Wᵀ in the CPU op's full row-major pattern, the
 * same for every sample. */
__global__ void linear_jt_kernel(float *data, size_t stride, const float *W, int in, int out, int nb)
{
    size_t per = (size_t)in * out, n = (size_t)nb * per;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n; k += (size_t)gridDim.x * blockDim.x) {
        size_t b = k / per, e = k % per, i = e / out, j = e % out;
        data[b * stride + e] = W[j * in + i];
    }
}

static void linear_jt_launch(const sp_node *n, const sp_csr *jt, size_t stride, int nb)
{
    int out = W_OF(n)->shape[0], in = W_OF(n)->shape[1];
    cudaStream_t st = sp_cuda_stream();
    linear_jt_kernel<<<sp_cuda_blocks((size_t)nb * in * out, 256), 256, 0, st>>>(jt->data, stride, W_OF(n)->data, in,
                                                                                 out, nb);
    sp_cuda_check(cudaGetLastError());
}

static void linear_cuda_jt_values(const sp_node *n, int i, int b, sp_csr *jt) { linear_jt_launch(n, jt, 0, 1); }

static void linear_cuda_jt_values_all(const sp_node *n, int i, const sp_csr *jt, size_t stride)
{
    linear_jt_launch(n, jt, stride, n->out.shape[0]);
}

static sp_kernels linear_cuda_kernels;

extern "C" void sp_linear_cuda_register(void)
{
    linear_cuda_kernels.forward = linear_cuda_forward;
    linear_cuda_kernels.backward_input = linear_cuda_backward_input;
    linear_cuda_kernels.backward_params = linear_cuda_backward_params;
    linear_cuda_kernels.jt_values = linear_cuda_jt_values;
    linear_cuda_kernels.jt_values_all = linear_cuda_jt_values_all;
    sp_op_register_kernels(&sp_op_linear, SP_CUDA, &linear_cuda_kernels);
}
