/* relu_cuda.cu — the CUDA twin of layers/relu.c: y = max(x, 0), dx = dy ⊙ [x > 0].
 * Same comparisons as the CPU op, so results are bitwise equal to it. */
#include "core/kernels/cuda.h"
extern "C" {
#include "core/device.h"
#include "core/tape.h"
#include "layers/layers.h"
}

// ----------------------------------------------------------------------------
// CUDA kernels

__global__ void relu_forward_kernel(float *y, const float *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ void relu_backward_kernel(float *dx, const float *dy, const float *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}

// ----------------------------------------------------------------------------
// kernel launchers

static void relu_forward_cuda(float *y, const float *x, size_t n, cudaStream_t stream)
{
    relu_forward_kernel<<<sp_cuda_blocks(n, 256), 256, 0, stream>>>(y, x, n);
    sp_cuda_check(cudaGetLastError());
}

static void relu_backward_cuda(float *dx, const float *dy, const float *x, size_t n, cudaStream_t stream)
{
    relu_backward_kernel<<<sp_cuda_blocks(n, 256), 256, 0, stream>>>(dx, dy, x, n);
    sp_cuda_check(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// the op

static void relu_cuda_forward(sp_node *n)
{
    relu_forward_cuda(n->out.data, sp_node_x(n)->data, n->out.numel, sp_cuda_stream());
}

static void relu_cuda_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    relu_backward_cuda(dx->data, dy->data, sp_node_x(n)->data, dx->numel, sp_cuda_stream());
}

// ----------------------------------------------------------------------------
// Jᵀ (the bppsa engine on the device): diagonal, [x > 0], the CPU op's arithmetic

__global__ void relu_jt_kernel(float *data, size_t stride, const float *src, int rows, int b0, int nb)
{
    size_t n = (size_t)nb * rows;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t b = i / rows, r = i % rows;
        float v = src[(b0 + b) * rows + r];
        data[b * stride + r] = v > 0.0f ? 1.0f : 0.0f;
    }
}

static void relu_jt_launch(const sp_node *n, const sp_csr *jt, size_t stride, int b0, int nb)
{
    cudaStream_t st = sp_cuda_stream();
    relu_jt_kernel<<<sp_cuda_blocks((size_t)nb * jt->rows, 256), 256, 0, st>>>(jt->data, stride, sp_node_x(n)->data, jt->rows, b0,
                                                                                nb);
    sp_cuda_check(cudaGetLastError());
}

static void relu_cuda_jt_values(const sp_node *n, int i, int b, sp_csr *jt) { relu_jt_launch(n, jt, 0, b, 1); }

static void relu_cuda_jt_values_all(const sp_node *n, int i, const sp_csr *jt, size_t stride)
{
    relu_jt_launch(n, jt, stride, 0, n->out.shape[0]);
}

static sp_kernels relu_cuda_kernels;

extern "C" void sp_relu_cuda_register(void)
{
    relu_cuda_kernels.forward = relu_cuda_forward;
    relu_cuda_kernels.backward_input = relu_cuda_backward_input;
    relu_cuda_kernels.jt_values = relu_cuda_jt_values;
    relu_cuda_kernels.jt_values_all = relu_cuda_jt_values_all;
    sp_op_register_kernels(&sp_op_relu, SP_CUDA, &relu_cuda_kernels);
}
