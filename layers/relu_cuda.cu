/* relu_cuda.cu — the CUDA twin of layers/relu.c: y = max(x, 0), dx = dy ⊙ [x > 0].
 * Same comparisons as the CPU op, so results are bitwise equal to it. */
#include "core/cuda.h"
extern "C" {
#include "core/backend.h"
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

static sp_opdef relu_cuda_op;

void sp_relu_cuda_register(void)
{
    relu_cuda_op.name = "relu";
    relu_cuda_op.infer = sp_op_relu.infer;
    relu_cuda_op.forward = relu_cuda_forward;
    relu_cuda_op.backward_input = relu_cuda_backward_input;
    relu_cuda_op.cost = sp_op_relu.cost;
    sp_op_register_device(&sp_op_relu, SP_CUDA, &relu_cuda_op);
}
