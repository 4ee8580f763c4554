/* concat_cuda.cu — the CUDA twin of layers/concat.c: y = [x_0, x_1, …] along dim 1.
 *   forward: per input i, one kernel copies each sample's C_i·S floats to channel
 *            offset off_i of y's sample (S: elements per channel).
 *   δ_i:     dx_i = dy[:, off_i : off_i + C_i], the inverse copy.
 *   Jᵀ_i:    a selection (the CPU op's pattern); its values, 1, in one launch.
 * Copies only: bitwise equal to the CPU op. */
#include "core/kernels/cuda.h"
extern "C" {
#include "core/device.h"
#include "core/tape.h"
#include "layers/concat.h"
#include "layers/layers.h"
}

// ----------------------------------------------------------------------------
// CUDA kernels

/* B rows of len floats: dst row b at dst + b·dld, src row b at src + b·sld. */
__global__ void concat_copy_kernel(float *dst, size_t dld, const float *src, size_t sld, size_t len, int B)
{
    size_t n = (size_t)B * len;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t b = i / len, e = i % len;
        dst[b * dld + e] = src[b * sld + e];
    }
}

__global__ void concat_jt_kernel(float *data, size_t stride, size_t rows, int nb)
{
    size_t n = (size_t)nb * rows;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        data[i / rows * stride + i % rows] = 1.0f;
}

// ----------------------------------------------------------------------------
// kernel launchers

static void concat_copy_cuda(float *dst, size_t dld, const float *src, size_t sld, size_t len, int B,
                             cudaStream_t stream)
{
    concat_copy_kernel<<<sp_cuda_blocks((size_t)B * len, 256), 256, 0, stream>>>(dst, dld, src, sld, len, B);
    sp_cuda_check(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// the op

static void concat_cuda_forward(sp_node *n)
{
    int B = n->out.shape[0];
    size_t S = sp_concat_per_channel(&n->out), row = (size_t)n->out.shape[1] * S;
    for (int i = 0; i < n->ninputs; i++) {
        const sp_tensor *xi = sp_node_in(n, i);
        size_t len = (size_t)xi->shape[1] * S;
        concat_copy_cuda(n->out.data + (size_t)sp_concat_offset(n, i) * S, row, xi->data, len, len, B,
                         sp_cuda_stream());
    }
}

static void concat_cuda_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    int B = n->out.shape[0];
    size_t S = sp_concat_per_channel(&n->out), row = (size_t)n->out.shape[1] * S, len = (size_t)dx->shape[1] * S;
    concat_copy_cuda(dx->data, len, dy->data + (size_t)sp_concat_offset(n, i) * S, row, len, B, sp_cuda_stream());
}

static void concat_jt_launch(const sp_csr *jt, size_t stride, int nb)
{
    concat_jt_kernel<<<sp_cuda_blocks((size_t)nb * jt->rows, 256), 256, 0, sp_cuda_stream()>>>(jt->data, stride,
                                                                                                 (size_t)jt->rows, nb);
    sp_cuda_check(cudaGetLastError());
}

static void concat_cuda_jt_values(const sp_node *n, int i, int b, sp_csr *jt) { concat_jt_launch(jt, 0, 1); }

static void concat_cuda_jt_values_all(const sp_node *n, int i, const sp_csr *jt, size_t stride)
{
    concat_jt_launch(jt, stride, n->out.shape[0]);
}

static sp_kernels concat_cuda_kernels;

extern "C" void sp_concat_cuda_register(void)
{
    concat_cuda_kernels.forward = concat_cuda_forward;
    concat_cuda_kernels.backward_input = concat_cuda_backward_input;
    concat_cuda_kernels.jt_values = concat_cuda_jt_values;
    concat_cuda_kernels.jt_values_all = concat_cuda_jt_values_all;
    sp_op_register_kernels(&sp_op_concat, SP_CUDA, &concat_cuda_kernels);
}
