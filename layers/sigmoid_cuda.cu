/* sigmoid_cuda.cu — the CUDA twin of layers/sigmoid.c: y = 1/(1 + e^−x), dx = dy ⊙ y(1 − y).
 * The products use __fmul_rn/__fadd_rn so nvcc cannot contract them into FMAs: the
 * arithmetic is the CPU op's, rounding for rounding; only expf itself differs between
 * CUDA's libdevice and glibc (a few ulps on a GPU, bitwise under the emulator). */
#include "core/kernels/cuda.h"
extern "C" {
#include "core/device.h"
#include "core/tape.h"
#include "layers/layers.h"
}

// ----------------------------------------------------------------------------
// CUDA kernels

__global__ void sigmoid_forward_kernel(float *y, const float *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x[i])));
}

__global__ void sigmoid_backward_kernel(float *dx, const float *dy, const float *y, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dx[i] = __fmul_rn(__fmul_rn(dy[i], y[i]), __fsub_rn(1.0f, y[i]));
}

// ----------------------------------------------------------------------------
// kernel launchers

static void sigmoid_forward_cuda(float *y, const float *x, size_t n, cudaStream_t stream)
{
    sigmoid_forward_kernel<<<sp_cuda_blocks(n, 256), 256, 0, stream>>>(y, x, n);
    sp_cuda_check(cudaGetLastError());
}

static void sigmoid_backward_cuda(float *dx, const float *dy, const float *y, size_t n, cudaStream_t stream)
{
    sigmoid_backward_kernel<<<sp_cuda_blocks(n, 256), 256, 0, stream>>>(dx, dy, y, n);
    sp_cuda_check(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// the op

static void sigmoid_cuda_forward(sp_node *n)
{
    sigmoid_forward_cuda(n->out.data, sp_node_x(n)->data, n->out.numel, sp_cuda_stream());
}

static void sigmoid_cuda_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    sigmoid_backward_cuda(dx->data, dy->data, n->out.data, dx->numel, sp_cuda_stream());
}

// ----------------------------------------------------------------------------
// Jᵀ (the bppsa engine on the device): diagonal, y(1 − y), the CPU op's arithmetic

__global__ void sigmoid_jt_kernel(float *data, size_t stride, const float *src, int rows, int b0, int nb)
{
    size_t n = (size_t)nb * rows;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t b = i / rows, r = i % rows;
        float v = src[(b0 + b) * rows + r];
        data[b * stride + r] = __fmul_rn(v, __fsub_rn(1.0f, v));
    }
}

static void sigmoid_jt_launch(const sp_node *n, const sp_csr *jt, size_t stride, int b0, int nb)
{
    cudaStream_t st = sp_cuda_stream();
    sigmoid_jt_kernel<<<sp_cuda_blocks((size_t)nb * jt->rows, 256), 256, 0, st>>>(jt->data, stride, n->out.data, jt->rows, b0,
                                                                                nb);
    sp_cuda_check(cudaGetLastError());
}

static void sigmoid_cuda_jt_values(const sp_node *n, int i, int b, sp_csr *jt) { sigmoid_jt_launch(n, jt, 0, b, 1); }

static void sigmoid_cuda_jt_values_all(const sp_node *n, int i, const sp_csr *jt, size_t stride)
{
    sigmoid_jt_launch(n, jt, stride, 0, n->out.shape[0]);
}

static sp_kernels sigmoid_cuda_kernels;

extern "C" void sp_sigmoid_cuda_register(void)
{
    sigmoid_cuda_kernels.forward = sigmoid_cuda_forward;
    sigmoid_cuda_kernels.backward_input = sigmoid_cuda_backward_input;
    sigmoid_cuda_kernels.jt_values = sigmoid_cuda_jt_values;
    sigmoid_cuda_kernels.jt_values_all = sigmoid_cuda_jt_values_all;
    sp_op_register_kernels(&sp_op_sigmoid, SP_CUDA, &sigmoid_cuda_kernels);
}
