/* flatten_cuda.cu — the CUDA twin of layers/flatten.c: [B, d1, ...] → [B, d1·…].
 * The forward is a view (the output points at the input's device memory, no copy);
 * δ copies dy into dx on the stream. Bitwise the CPU op. */
#include "core/cuda.h"
extern "C" {
#include "core/backend.h"
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

static sp_opdef flatten_cuda_op;

void sp_flatten_cuda_register(void)
{
    flatten_cuda_op.name = "flatten";
    flatten_cuda_op.infer = sp_op_flatten.infer;
    flatten_cuda_op.forward = flatten_cuda_forward;
    flatten_cuda_op.backward_input = flatten_cuda_backward_input;
    flatten_cuda_op.cost = sp_op_flatten.cost;
    sp_op_register_device(&sp_op_flatten, SP_CUDA, &flatten_cuda_op);
}
