/* flatten_cuda.cu — the CUDA twin of layers/flatten.c: [B, d1, ...] → [B, d1·…].
 * The forward is a view (the output points at the input's device memory, no copy);
 * δ copies dy into dx on the stream. Bitwise the CPU op. */
#include "core/kernels/cuda.h"
extern "C" {
#include "core/device.h"
#include "core/tape.h"
#include "layers/layers.h"
}

// ----------------------------------------------------------------------------
// the op

static void flatten_cuda_forward(sp_node *n) { n->out.data = sp_node_x(n)->data; }

static void flatten_cuda_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    if (dx->data == dy->data) return;
    sp_cuda_check(cudaMemcpyAsync(dx->data, dy->data, dx->numel * sizeof(float), cudaMemcpyDeviceToDevice,
                                  sp_cuda_stream()));
}

// ----------------------------------------------------------------------------
// Jᵀ (the bppsa engine on the device): the identity

__global__ void flatten_jt_kernel(float *data, size_t stride, int rows, int nb)
{
    size_t n = (size_t)nb * rows;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        data[i / rows * stride + i % rows] = 1.0f;
}

static void flatten_jt_launch(const sp_csr *jt, size_t stride, int nb)
{
    cudaStream_t st = sp_cuda_stream();
    flatten_jt_kernel<<<sp_cuda_blocks((size_t)nb * jt->rows, 256), 256, 0, st>>>(jt->data, stride, jt->rows, nb);
    sp_cuda_check(cudaGetLastError());
}

static void flatten_cuda_jt_values(const sp_node *n, int i, int b, sp_csr *jt) { flatten_jt_launch(jt, 0, 1); }

static void flatten_cuda_jt_values_all(const sp_node *n, int i, const sp_csr *jt, size_t stride)
{
    flatten_jt_launch(jt, stride, n->out.shape[0]);
}

static sp_kernels flatten_cuda_kernels;

extern "C" void sp_flatten_cuda_register(void)
{
    flatten_cuda_kernels.forward = flatten_cuda_forward;
    flatten_cuda_kernels.backward_input = flatten_cuda_backward_input;
    flatten_cuda_kernels.jt_values = flatten_cuda_jt_values;
    flatten_cuda_kernels.jt_values_all = flatten_cuda_jt_values_all;
    sp_op_register_kernels(&sp_op_flatten, SP_CUDA, &flatten_cuda_kernels);
}
