/* add_cuda.cu — the CUDA twin of layers/add.c: y = x_0 + x_1 + … (same shapes).
 *   forward: y = x_0 + x_1 in one kernel (x_0 alone: a copy kernel), then y += x_i for
 *            i = 2, 3, … left to right, one kernel per input, __fadd_rn: the CPU op's
 *            float sums, so bitwise equal; no device copy (a step's copies are only
 *            host↔device transfers).
 *   δ_i:     dx_i = dy (a copy kernel).
 *   Jᵀ_i:    the identity; its values, 1, for every sample in one launch.
 * add_relu: the same sum, then y = max(y, 0) in place; δ_i = dy ⊙ [y > 0]; Jᵀ_i =
 * diag([y > 0]) — the CPU op's comparisons, so bitwise equal to it. */
#include "core/kernels/cuda.h"
extern "C" {
#include "core/device.h"
#include "core/tape.h"
#include "layers/layers.h"
}

// ----------------------------------------------------------------------------
// CUDA kernels

__global__ void add_into_kernel(float *y, const float *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = __fadd_rn(y[i], x[i]);
}

__global__ void add_two_kernel(float *y, const float *a, const float *b, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = b ? __fadd_rn(a[i], b[i]) : a[i];
}

__global__ void relu_inplace_kernel(float *y, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = y[i] > 0.0f ? y[i] : 0.0f;
}

__global__ void mask_by_kernel(float *dx, const float *dy, const float *y, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

/* Sample b0 + i/rows's diagonal [y > 0]. */
__global__ void add_relu_jt_kernel(float *data, size_t stride, const float *y, size_t rows, int b0, int nb)
{
    size_t n = (size_t)nb * rows;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        data[i / rows * stride + i % rows] = y[(b0 + i / rows) * rows + i % rows] > 0.0f ? 1.0f : 0.0f;
}

__global__ void add_jt_kernel(float *data, size_t stride, size_t rows, int nb)
{
    size_t n = (size_t)nb * rows;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        data[i / rows * stride + i % rows] = 1.0f;
}

// ----------------------------------------------------------------------------
// kernel launchers

static void add_into_cuda(float *y, const float *x, size_t n, cudaStream_t stream)
{
    add_into_kernel<<<sp_cuda_blocks(n, 256), 256, 0, stream>>>(y, x, n);
    sp_cuda_check(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// the op

static void add_cuda_forward(sp_node *n)
{
    cudaStream_t st = sp_cuda_stream();
    size_t len = n->out.numel;
    add_two_kernel<<<sp_cuda_blocks(len, 256), 256, 0, st>>>(n->out.data, sp_node_in(n, 0)->data,
                                                             n->ninputs > 1 ? sp_node_in(n, 1)->data : nullptr, len);
    sp_cuda_check(cudaGetLastError());
    for (int i = 2; i < n->ninputs; i++) add_into_cuda(n->out.data, sp_node_in(n, i)->data, n->out.numel, st);
}

static void add_cuda_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    add_two_kernel<<<sp_cuda_blocks(dx->numel, 256), 256, 0, sp_cuda_stream()>>>(dx->data, dy->data,
                                                                                  (const float *)nullptr, dx->numel);
    sp_cuda_check(cudaGetLastError());
}

static void add_jt_launch(const sp_csr *jt, size_t stride, int nb)
{
    add_jt_kernel<<<sp_cuda_blocks((size_t)nb * jt->rows, 256), 256, 0, sp_cuda_stream()>>>(jt->data, stride,
                                                                                              (size_t)jt->rows, nb);
    sp_cuda_check(cudaGetLastError());
}

static void add_cuda_jt_values(const sp_node *n, int i, int b, sp_csr *jt) { add_jt_launch(jt, 0, 1); }

static void add_cuda_jt_values_all(const sp_node *n, int i, const sp_csr *jt, size_t stride)
{
    add_jt_launch(jt, stride, n->out.shape[0]);
}

static void add_relu_cuda_forward(sp_node *n)
{
    add_cuda_forward(n);
    relu_inplace_kernel<<<sp_cuda_blocks(n->out.numel, 256), 256, 0, sp_cuda_stream()>>>(n->out.data, n->out.numel);
    sp_cuda_check(cudaGetLastError());
}

static void add_relu_cuda_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    mask_by_kernel<<<sp_cuda_blocks(dx->numel, 256), 256, 0, sp_cuda_stream()>>>(dx->data, dy->data, n->out.data,
                                                                                  dx->numel);
    sp_cuda_check(cudaGetLastError());
}

static void add_relu_jt_launch(const sp_node *n, const sp_csr *jt, size_t stride, int b0, int nb)
{
    add_relu_jt_kernel<<<sp_cuda_blocks((size_t)nb * jt->rows, 256), 256, 0, sp_cuda_stream()>>>(
        jt->data, stride, n->out.data, (size_t)jt->rows, b0, nb);
    sp_cuda_check(cudaGetLastError());
}

static void add_relu_cuda_jt_values(const sp_node *n, int i, int b, sp_csr *jt) { add_relu_jt_launch(n, jt, 0, b, 1); }

static void add_relu_cuda_jt_values_all(const sp_node *n, int i, const sp_csr *jt, size_t stride)
{
    add_relu_jt_launch(n, jt, stride, 0, n->out.shape[0]);
}

static sp_kernels add_cuda_kernels, add_relu_cuda_kernels;

extern "C" void sp_add_cuda_register(void)
{
    add_cuda_kernels.forward = add_cuda_forward;
    add_cuda_kernels.backward_input = add_cuda_backward_input;
    add_cuda_kernels.jt_values = add_cuda_jt_values;
    add_cuda_kernels.jt_values_all = add_cuda_jt_values_all;
    sp_op_register_kernels(&sp_op_add, SP_CUDA, &add_cuda_kernels);
    add_relu_cuda_kernels.forward = add_relu_cuda_forward;
    add_relu_cuda_kernels.backward_input = add_relu_cuda_backward_input;
    add_relu_cuda_kernels.jt_values = add_relu_cuda_jt_values;
    add_relu_cuda_kernels.jt_values_all = add_relu_cuda_jt_values_all;
    sp_op_register_kernels(&sp_op_add_relu, SP_CUDA, &add_relu_cuda_kernels);
}
