/* relu.c — y = max(x, 0).
 *   δ:  dx = dy ⊙ [x > 0]         G: none (no parameters)
 *   Jᵀ = diag([x > 0]) (BPPSA Appendix D, Algorithms 6–7). */
#include "layers/elementwise.h"
#include "layers/layers.h"

static void relu_forward(sp_node *n)
{
    const float *x = sp_node_x(n)->data;
    float *y = n->out.data;
    for (size_t i = 0; i < n->out.numel; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

static void relu_backward_input(sp_node *n, const sp_tensor *dy, sp_tensor *dx)
{
    const float *x = sp_node_x(n)->data;
    for (size_t i = 0; i < dx->numel; i++) dx->data[i] = x[i] > 0.0f ? dy->data[i] : 0.0f;
}

static sp_cost relu_cost(const sp_node *n) { return sp_elementwise_cost(n, 1, 1); }

const sp_opdef sp_op_relu = {
    .name = "relu",
    .infer = sp_elementwise_infer,
    .forward = relu_forward,
    .backward_input = relu_backward_input,
    .cost = relu_cost,
};

sp_layer *sp_relu(void) { return sp_elementwise_layer(&sp_op_relu); }
