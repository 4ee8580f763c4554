/* tanh.c — y = tanh(x).
 *   δ:  dx = dy ⊙ (1 − y²)        G: none
 *   Jᵀ = diag(1 − y²), from the saved output (no recomputation). */
#include <math.h>
#include "core/kernels/csr_ops.h"
#include "layers/elementwise.h"
#include "layers/layers.h"

static void tanh_forward(sp_node *n)
{
    const float *x = sp_node_x(n)->data;
    for (size_t i = 0; i < n->out.numel; i++) n->out.data[i] = tanhf(x[i]);
}

static void tanh_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    const float *y = n->out.data;
    for (size_t i = 0; i < dx->numel; i++) dx->data[i] = dy->data[i] * (1.0f - y[i] * y[i]);
}

static void tanh_jt_pattern(const sp_node *n, int i, sp_csr *jt)
{
    sp_csr_identity(jt, (int)sp_tensor_sample_numel(&n->out));
}

static void tanh_jt_values(const sp_node *n, int i, int b, sp_csr *jt)
{
    const float *y = n->out.data + (size_t)b * jt->rows;
    for (int i = 0; i < jt->rows; i++) jt->data[i] = 1.0f - y[i] * y[i];
}

static sp_cost tanh_cost(const sp_node *n) { return sp_elementwise_cost(n, 20, 3); }

const sp_opdef sp_op_tanh = {
    .name = "tanh",
    .infer = sp_elementwise_infer,
    .jt_pattern = tanh_jt_pattern,
    .cost = tanh_cost,
    .cpu = {
        .forward = tanh_forward,
        .backward_input = tanh_backward_input,
        .jt_values = tanh_jt_values,
    },
};

sp_layer *sp_tanh(void) { return sp_elementwise_layer(&sp_op_tanh); }
