/* flatten.c — [B, d1, d2, ...] → [B, d1·d2·…]: a reshape.
 *   δ:  dx = dy (reshaped)        G: none
 *   Jᵀ = I (in = out). */
#include <string.h>
#include "core/kernels/csr_ops.h"
#include "core/error.h"
#include "layers/layers.h"

static void flatten_infer(sp_node *n, const sp_tensor *x)
{
    n->out = sp_tensor_2d(NULL, x->shape[0], (int)sp_tensor_sample_numel(x));
}

static void flatten_forward(sp_node *n)
{
    memcpy(n->out.data, sp_node_x(n)->data, n->out.numel * sizeof(float));
}

static void flatten_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    memcpy(dx->data, dy->data, dx->numel * sizeof(float));
}

static void flatten_jt_pattern(const sp_node *n, int i, sp_csr *jt)
{
    sp_csr_identity(jt, (int)sp_tensor_sample_numel(&n->out));
}

/* The identity's data is set with the pattern and never changes. */
static void flatten_jt_values(const sp_node *n, int i, int b, sp_csr *jt)
{
    for (int i = 0; i < jt->rows; i++) jt->data[i] = 1.0f;
}

static sp_cost flatten_cost(const sp_node *n) { return (sp_cost){.out_bytes = 4.0 * (double)n->out.numel}; }

const sp_opdef sp_op_flatten = {
    .name = "flatten",
    .infer = flatten_infer,
    .jt_pattern = flatten_jt_pattern,
    .cost = flatten_cost,
    .cpu = {
        .forward = flatten_forward,
        .backward_input = flatten_backward_input,
        .jt_values = flatten_jt_values,
    },
};

sp_layer *sp_flatten(void)
{
    sp_layer *l = sp_xcalloc(1, sizeof *l);
    l->op = &sp_op_flatten;
    return l;
}
