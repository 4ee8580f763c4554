/* sigmoid.c — y = 1 / (1 + e^−x).
 *   δ:  dx = dy ⊙ y(1 − y)        G: none
 *   Jᵀ = diag(y(1 − y)), from the saved output (no recomputation). */
#include <math.h>
#include "core/kernels/csr_ops.h"
#include "layers/elementwise.h"
#include "layers/layers.h"

static void sigmoid_forward(sp_node *n)
{
    const float *x = sp_node_x(n)->data;
    for (size_t i = 0; i < n->out.numel; i++) n->out.data[i] = 1.0f / (1.0f + expf(-x[i]));
}

static void sigmoid_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    const float *y = n->out.data;
    for (size_t i = 0; i < dx->numel; i++) dx->data[i] = dy->data[i] * y[i] * (1.0f - y[i]);
}

static void sigmoid_jt_pattern(const sp_node *n, int i, sp_csr *jt)
{
    sp_csr_identity(jt, (int)sp_tensor_sample_numel(&n->out));
}

static void sigmoid_jt_values(const sp_node *n, int i, int b, sp_csr *jt)
{
    const float *y = n->out.data + (size_t)b * jt->rows;
    for (int i = 0; i < jt->rows; i++) jt->data[i] = y[i] * (1.0f - y[i]);
}

static sp_cost sigmoid_cost(const sp_node *n) { return sp_elementwise_cost(n, 20, 3); }

const sp_opdef sp_op_sigmoid = {
    .name = "sigmoid",
    .infer = sp_elementwise_infer,
    .jt_pattern = sigmoid_jt_pattern,
    .cost = sigmoid_cost,
    .cpu = {
        .forward = sigmoid_forward,
        .backward_input = sigmoid_backward_input,
        .jt_values = sigmoid_jt_values,
    },
};

sp_layer *sp_sigmoid(void) { return sp_elementwise_layer(&sp_op_sigmoid); }
