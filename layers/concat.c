/* concat.c — y = [x_0, x_1, …] along dim 1 (channels), PyTorch's torch.cat(xs, 1): the
 * join of a dense block. Inputs [B, C_i, …] agree in every other dim; y is [B, ΣC_i, …].
 *   δ_i: dx_i = dy[:, off_i : off_i + C_i]      G: none
 *   J_iᵀ: a selection, (C_i·S × ΣC·S) with one 1 per row, at column (off_i + c)·S + s
 *   for row c·S + s (S: elements per channel). */
#include <string.h>
#include "core/kernels/csr_ops.h"
#include "core/error.h"
#include "layers/concat.h"
#include "layers/elementwise.h"
#include "layers/layers.h"

static void concat_infer(sp_node *n, const sp_tensor *x)
{
    char a[64], b[64];
    if (x->ndim < 2) sp_fail("concat: input 0 is %s, expected at least [B, C]", sp_shape_str(x, a, sizeof a));
    int C = 0;
    for (int i = 0; i < n->ninputs; i++) {
        const sp_tensor *xi = sp_node_in(n, i);
        bool ok = xi->ndim == x->ndim && xi->shape[0] == x->shape[0];
        for (int d = 2; ok && d < x->ndim; d++) ok = xi->shape[d] == x->shape[d];
        if (!ok)
            sp_fail("concat: input %d is %s, expected input 0's shape %s but for dim 1 (channels)", i,
                    sp_shape_str(xi, a, sizeof a), sp_shape_str(x, b, sizeof b));
        C += xi->shape[1];
    }
    n->out = sp_tensor_view(NULL, x->ndim, x->shape);
    n->out.shape[1] = C;
    n->out.numel = sp_shape_numel(x->ndim, n->out.shape);
}

static void concat_forward(sp_node *n)
{
    int B = n->out.shape[0];
    size_t S = sp_concat_per_channel(&n->out), row = (size_t)n->out.shape[1] * S;
    for (int b = 0; b < B; b++)
        for (int i = 0, off = 0; i < n->ninputs; i++) {
            const sp_tensor *xi = sp_node_in(n, i);
            size_t len = (size_t)xi->shape[1] * S;
            memcpy(n->out.data + b * row + (size_t)off * S, xi->data + b * len, len * sizeof(float));
            off += xi->shape[1];
        }
}

static void concat_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    int B = n->out.shape[0];
    size_t S = sp_concat_per_channel(&n->out), row = (size_t)n->out.shape[1] * S, len = (size_t)dx->shape[1] * S;
    size_t off = (size_t)sp_concat_offset(n, i) * S;
    for (int b = 0; b < B; b++) memcpy(dx->data + b * len, dy->data + b * row + off, len * sizeof(float));
}

static void concat_jt_pattern(const sp_node *n, int i, sp_csr *jt)
{
    size_t S = sp_concat_per_channel(&n->out);
    int rows = (int)sp_tensor_sample_numel(sp_node_in(n, i)), off = (int)((size_t)sp_concat_offset(n, i) * S);
    sp_csr_alloc(jt, rows, (int)sp_tensor_sample_numel(&n->out), rows);
    for (int r = 0; r <= rows; r++) jt->indptr[r] = r;
    for (int r = 0; r < rows; r++) jt->indices[r] = off + r;   /* channel c of x_i is off_i + c of y */
}

static void concat_jt_values(const sp_node *n, int i, int b, sp_csr *jt)
{
    for (int r = 0; r < jt->rows; r++) jt->data[r] = 1.0f;
}

static sp_cost concat_cost(const sp_node *n) { return (sp_cost){.out_bytes = 4.0 * (double)n->out.numel}; }

const sp_opdef sp_op_concat = {
    .name = "concat",
    .arity = SP_ARITY_ANY,
    .infer = concat_infer,
    .jt_pattern = concat_jt_pattern,
    .cost = concat_cost,
    .cpu = {
        .forward = concat_forward,
        .backward_input = concat_backward_input,
        .jt_values = concat_jt_values,
    },
};

sp_layer *sp_concat(void) { return sp_elementwise_layer(&sp_op_concat); }
