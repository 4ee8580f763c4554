/* tanh_cuda.cu — the CUDA twin of layers/tanh.c: y = tanh(x), dx = dy ⊙ (1 − y²).
 * The products use __fmul_rn/__fadd_rn so nvcc cannot contract them into FMAs: the
 * arithmetic is the CPU op's, rounding for rounding; only tanhf itself differs between
 * CUDA's libdevice and glibc (a few ulps on a GPU, bitwise under the emulator). */
#include "core/kernels/cuda.h"
extern "C" {
#include "core/device.h"
#include "core/tape.h"
#include "layers/layers.h"
}

// ----------------------------------------------------------------------------
// CUDA kernels

__global__ void tanh_forward_kernel(float *y, const float *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = tanhf(x[i]);
}

__global__ void tanh_backward_kernel(float *dx, const float *dy, const float *y, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dx[i] = __fmul_rn(dy[i], __fsub_rn(1.0f, __fmul_rn(y[i], y[i])));
}

// ----------------------------------------------------------------------------
// kernel launchers

static void tanh_forward_cuda(float *y, const float *x, size_t n, cudaStream_t stream)
{
    tanh_forward_kernel<<<sp_cuda_blocks(n, 256), 256, 0, stream>>>(y, x, n);
    sp_cuda_check(cudaGetLastError());
}

static void tanh_backward_cuda(float *dx, const float *dy, const float *y, size_t n, cudaStream_t stream)
{
    tanh_backward_kernel<<<sp_cuda_blocks(n, 256), 256, 0, stream>>>(dx, dy, y, n);
    sp_cuda_check(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// the op

static void tanh_cuda_forward(sp_node *n)
{
    tanh_forward_cuda(n->out.data, sp_node_x(n)->data, n->out.numel, sp_cuda_stream());
}

static void tanh_cuda_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    tanh_backward_cuda(dx->data, dy->data, n->out.data, dx->numel, sp_cuda_stream());
}

// ----------------------------------------------------------------------------
// Jᵀ (the bppsa engine on the device): diagonal, 1 − y², the CPU op's arithmetic

__global__ void tanh_jt_kernel(float *data, size_t stride, const float *src, int rows, int b0, int nb)
{
    size_t n = (size_t)nb * rows;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t b = i / rows, r = i % rows;
        float v = src[(b0 + b) * rows + r];
        data[b * stride + r] = __fsub_rn(1.0f, __fmul_rn(v, v));
    }
}

static void tanh_jt_launch(const sp_node *n, const sp_csr *jt, size_t stride, int b0, int nb)
{
    cudaStream_t st = sp_cuda_stream();
    tanh_jt_kernel<<<sp_cuda_blocks((size_t)nb * jt->rows, 256), 256, 0, st>>>(jt->data, stride, n->out.data, jt->rows, b0,
                                                                                nb);
    sp_cuda_check(cudaGetLastError());
}

static void tanh_cuda_jt_values(const sp_node *n, int i, int b, sp_csr *jt) { tanh_jt_launch(n, jt, 0, b, 1); }

static void tanh_cuda_jt_values_all(const sp_node *n, int i, const sp_csr *jt, size_t stride)
{
    tanh_jt_launch(n, jt, stride, 0, n->out.shape[0]);
}

static sp_kernels tanh_cuda_kernels;

extern "C" void sp_tanh_cuda_register(void)
{
    tanh_cuda_kernels.forward = tanh_cuda_forward;
    tanh_cuda_kernels.backward_input = tanh_cuda_backward_input;
    tanh_cuda_kernels.jt_values = tanh_cuda_jt_values;
    tanh_cuda_kernels.jt_values_all = tanh_cuda_jt_values_all;
    sp_op_register_kernels(&sp_op_tanh, SP_CUDA, &tanh_cuda_kernels);
}
