/* add.c — y = x_0 + x_1 + … (same shapes): the join of a residual connection.
 *   δ_i: dx_i = dy                 G: none (no parameters)
 *   J_iᵀ = I for every input i. Any number (>= 1) of inputs; a node may be added to
 *   itself (add(x, x) = 2x: the engines sum both slots' δ into x's gradient).
 * add_relu, y = max(x_0 + x_1 + …, 0), is add then relu as one op (ResNet's block
 * output): one pass over memory each way instead of two, the same floats.
 *   δ_i: dx_i = dy ⊙ [y > 0]       J_iᵀ = diag([y > 0]) for every input i
 * ([y > 0] is relu's [x > 0] of the sum: max keeps the sign test's outcome). */
#include <string.h>
#include "core/kernels/csr_ops.h"
#include "core/error.h"
#include "core/kernels/simd.h"
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

SP_AVX2_CLONES static void add_forward_range(void *ctx, size_t begin, size_t end)
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

/* The sum as add_forward_range makes it, clamped in the same pass over the chunk. */
SP_AVX2_CLONES static void add_relu_forward_range(void *ctx, size_t begin, size_t end)
{
    const sp_node *n = ctx;
    float *restrict y = n->out.data;
    if (n->ninputs == 2) {   /* ResNet's case: one read of each input, one write */
        const float *restrict x0 = sp_node_in(n, 0)->data, *restrict x1 = sp_node_in(n, 1)->data;
        for (size_t j = begin; j < end; j++) {
            float v = x0[j] + x1[j];
            y[j] = v > 0.0f ? v : 0.0f;
        }
        return;
    }
    add_forward_range(ctx, begin, end);
    for (size_t j = begin; j < end; j++) y[j] = y[j] > 0.0f ? y[j] : 0.0f;
}

static void add_relu_forward(sp_node *n) { sp_elementwise_for(n->out.numel, add_relu_forward_range, n); }

static void add_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    memcpy(dx->data, dy->data, dx->numel * sizeof(float));
}

/* δ of either input: dy where the output is positive (the fused ReLU's mask). */
static void add_relu_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    sp_relu_mask(n->out.data, dy->data, dx->data, dx->numel);
}

typedef struct add_acc {
    const float *dy;
    float *dx;
} add_acc;

SP_AVX2_CLONES static void add_acc_range(void *ctx, size_t begin, size_t end)
{
    const add_acc *J = ctx;
    const float *restrict dy = J->dy;
    float *restrict dx = J->dx;
    for (size_t j = begin; j < end; j++) dx[j] += dy[j];
}

/* dx_i += dy: an input that fans out (ResNet's identity shortcut) takes its δ in one pass. */
static void add_backward_input_acc(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    add_acc J = {.dy = dy->data, .dx = dx->data};
    sp_elementwise_for(dx->numel, add_acc_range, &J);
}

static void add_relu_backward_input_acc(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    sp_relu_mask_acc(n->out.data, dy->data, dx->data, dx->numel);
}

static void add_jt_pattern(const sp_node *n, int i, sp_csr *jt)
{
    sp_csr_identity(jt, (int)sp_tensor_sample_numel(&n->out));
}

static void add_jt_values(const sp_node *n, int i, int b, sp_csr *jt)
{
    for (int r = 0; r < jt->rows; r++) jt->data[r] = 1.0f;
}

static void add_relu_jt_values(const sp_node *n, int i, int b, sp_csr *jt)
{
    const float *y = n->out.data + (size_t)b * jt->rows;
    for (int r = 0; r < jt->rows; r++) jt->data[r] = y[r] > 0.0f ? 1.0f : 0.0f;
}

static sp_cost add_cost(const sp_node *n)
{
    double e = (double)n->out.numel;
    return (sp_cost){.fwd_flops = (n->ninputs - 1) * e, .bwd_input_flops = 0, .out_bytes = 4 * e};
}

/* add's cost plus relu's (one FLOP per element each way, as layers/relu.c). */
static sp_cost add_relu_cost(const sp_node *n)
{
    sp_cost c = add_cost(n);
    c.fwd_flops += (double)n->out.numel, c.bwd_input_flops += (double)n->out.numel;
    return c;
}

/* Element by element: any one layout (sp_tensor.blk), passed on. */
static int add_blocked(const sp_layer *l) { return SP_BLK_PASS; }

const sp_opdef sp_op_add = {
    .out_unread = true,
    .name = "add",
    .blocked = add_blocked,
    .arity = SP_ARITY_ANY,
    .infer = add_infer,
    .jt_pattern = add_jt_pattern,
    .cost = add_cost,
    .cpu = {
        .forward = add_forward,
        .backward_input = add_backward_input,
        .backward_input_acc = add_backward_input_acc,
        .jt_values = add_jt_values,
    },
};

sp_layer *sp_add(void) { return sp_elementwise_layer(&sp_op_add); }

const sp_opdef sp_op_add_relu = {
    .name = "add_relu",
    .blocked = add_blocked,
    .arity = SP_ARITY_ANY,
    .infer = add_infer,
    .jt_pattern = add_jt_pattern,
    .cost = add_relu_cost,
    .cpu = {
        .forward = add_relu_forward,
        .backward_input = add_relu_backward_input,
        .backward_input_acc = add_relu_backward_input_acc,
        .jt_values = add_relu_jt_values,
    },
};

sp_layer *sp_add_relu(void) { return sp_elementwise_layer(&sp_op_add_relu); }
