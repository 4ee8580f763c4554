/* add.c — y = x_0 + x_1 + … (same shapes): the join of a residual connection.
 *   δ_i: dx_i = dy                 G: none (no parameters)
 *   J_iᵀ = I for every input i. Any number (>= 1) of inputs; a node may be added to
 *   itself (add(x, x) = 2x: the engines sum both slots' δ into x's gradient). */
#include <string.h>
#include "core/kernels/csr_ops.h"
#include "core/error.h"
#include "layers/elementwise.h"
#include "layers/layers.h"

static void add_infer(sp_node *n, const sp_tensor *x)
{
    for (int i = 1; i < n->ninputs; i++)
        if (!sp_tensor_same_shape(sp_node_in(n, i), x)) {
            char a[64], b[64];
            sp_fail("add: input %d is %s, expected input 0's shape %s", i, sp_shape_str(sp_node_in(n, i), a, sizeof a),
                    sp_shape_str(x, b, sizeof b));
        }
    n->out = sp_tensor_view(NULL, x->ndim, x->shape);
}

static void add_forward_range(void *ctx, size_t begin, size_t end)
{
    const sp_node *n = ctx;
    float *restrict y = n->out.data;
    const float *restrict x0 = sp_node_in(n, 0)->data;
    for (size_t j = begin; j < end; j++) y[j] = x0[j];
    for (int i = 1; i < n->ninputs; i++) {   /* left to right, as x_0 + x_1 + … in PyTorch */
        const float *restrict x = sp_node_in(n, i)->data;
        for (size_t j = begin; j < end; j++) y[j] += x[j];
    }
}

static void add_forward(sp_node *n) { sp_elementwise_for(n->out.numel, add_forward_range, n); }

static void add_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    memcpy(dx->data, dy->data, dx->numel * sizeof(float));
}

static void add_jt_pattern(const sp_node *n, int i, sp_csr *jt)
{
    sp_csr_identity(jt, (int)sp_tensor_sample_numel(&n->out));
}

static void add_jt_values(const sp_node *n, int i, int b, sp_csr *jt)
{
    for (int r = 0; r < jt->rows; r++) jt->data[r] = 1.0f;
}

static sp_cost add_cost(const sp_node *n)
{
    double e = (double)n->out.numel;
    return (sp_cost){.fwd_flops = (n->ninputs - 1) * e, .bwd_input_flops = 0, .out_bytes = 4 * e};
}

const sp_opdef sp_op_add = {
    .out_unread = true,
    .name = "add",
    .arity = SP_ARITY_ANY,
    .infer = add_infer,
    .forward = add_forward,
    .backward_input = add_backward_input,
    .jt_pattern = add_jt_pattern,
    .jt_values = add_jt_values,
    .cost = add_cost,
};

sp_layer *sp_add(void) { return sp_elementwise_layer(&sp_op_add); }
