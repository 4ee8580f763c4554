/* relu.c — y = max(x, 0).
 *   δ:  dx = dy ⊙ [x > 0]         G: none (no parameters)
 *   Jᵀ = diag([x > 0]) (BPPSA Appendix D, Algorithms 5–7). The pattern is the whole
 *   diagonal: slopes of 0 are stored as explicit zeros, so the pattern depends on the
 *   shape only (docs/JACOBIANS.md). */
#include "core/kernels/csr_ops.h"
#include "core/kernels/simd.h"
#include "layers/elementwise.h"
#include "layers/layers.h"

/* Branch-free selects on restrict pointers: they compile to vector max / mask-and
 * (a branch on the sign of a trained activation is mispredicted half the time). */
SP_AVX2_CLONES static void relu_forward_range(void *ctx, size_t begin, size_t end)
{
    const sp_node *n = ctx;
    const float *restrict x = sp_node_x(n)->data;
    float *restrict y = n->out.data;
    for (size_t i = begin; i < end; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

/* The same over x's bytes (sp_apply_over): one pointer, read then written per element. */
SP_AVX2_CLONES static void relu_over_range(void *ctx, size_t begin, size_t end)
{
    float *restrict y = ((const sp_node *)ctx)->out.data;
    for (size_t i = begin; i < end; i++) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
}

static void relu_forward(sp_node *n)
{
    bool over = n->out.data == sp_node_x(n)->data;
    sp_elementwise_for(n->out.numel, over ? relu_over_range : relu_forward_range, n);
}

typedef struct relu_bwd {
    const float *gate, *dy;
    float *dx;
} relu_bwd;

SP_AVX2_CLONES static void relu_backward_range(void *ctx, size_t begin, size_t end)
{
    const relu_bwd *J = ctx;
    const float *restrict gate = J->gate, *restrict dy = J->dy;
    float *restrict dx = J->dx;
    for (size_t i = begin; i < end; i++) {
        float g = dy[i];   /* read unconditionally, so the select is a vector blend */
        dx[i] = gate[i] > 0.0f ? g : 0.0f;
    }
}

/* The same with dx = dy (the δ plan's delta_over): one pointer, so the loop stays a
 * vector blend (two that may alias would get a runtime overlap check and, aliased,
 * the scalar loop). */
SP_AVX2_CLONES static void relu_backward_over_range(void *ctx, size_t begin, size_t end)
{
    const relu_bwd *J = ctx;
    const float *restrict gate = J->gate;
    float *restrict d = J->dx;
    for (size_t i = begin; i < end; i++) {
        float g = d[i];
        d[i] = gate[i] > 0.0f ? g : 0.0f;
    }
}

/* dx += the same: the fan-out's add, one f32 add of the masked value per element. */
SP_AVX2_CLONES static void relu_backward_acc_range(void *ctx, size_t begin, size_t end)
{
    const relu_bwd *J = ctx;
    const float *restrict gate = J->gate, *restrict dy = J->dy;
    float *restrict dx = J->dx;
    for (size_t i = begin; i < end; i++) {
        float g = dy[i];
        dx[i] += gate[i] > 0.0f ? g : 0.0f;
    }
}

void sp_relu_mask(const float *gate, const float *dy, float *dx, size_t n)
{
    relu_bwd J = {.gate = gate, .dy = dy, .dx = dx};
    sp_elementwise_for(n, dx == dy ? relu_backward_over_range : relu_backward_range, &J);
}

void sp_relu_mask_acc(const float *gate, const float *dy, float *dx, size_t n)
{
    relu_bwd J = {.gate = gate, .dy = dy, .dx = dx};
    sp_elementwise_for(n, relu_backward_acc_range, &J);
}

static void relu_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    sp_relu_mask(sp_node_x(n)->data, dy->data, dx->data, dx->numel);
}

static void relu_backward_input_acc(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    sp_relu_mask_acc(sp_node_x(n)->data, dy->data, dx->data, dx->numel);
}

static void relu_jt_pattern(const sp_node *n, int i, sp_csr *jt)
{
    sp_csr_identity(jt, (int)sp_tensor_sample_numel(&n->out));
}

static void relu_jt_values(const sp_node *n, int i, int b, sp_csr *jt)
{
    const float *x = sp_node_x(n)->data + (size_t)b * jt->rows;
    for (int i = 0; i < jt->rows; i++) jt->data[i] = x[i] > 0.0f ? 1.0f : 0.0f;
}

/* Element by element: any layout (sp_tensor.blk), passed on. */
static int relu_blocked(const sp_layer *l) { return SP_BLK_PASS; }

static sp_cost relu_cost(const sp_node *n) { return sp_elementwise_cost(n, 1, 1); }

const sp_opdef sp_op_relu = {
    .name = "relu",
    .blocked = relu_blocked,
    .over_input = true,   /* y > 0 exactly where x > 0: δ and Jᵀ read the same mask from y */
    .delta_over = true,   /* δx = δy where x > 0, else 0: element by element */
    .relu = true,         /* a convolution's forward_relu computes it (sp_model_forward) */
    .infer = sp_elementwise_infer,
    .jt_pattern = relu_jt_pattern,
    .cost = relu_cost,
    .cpu = {
        .forward = relu_forward,
        .backward_input = relu_backward_input,
        .backward_input_acc = relu_backward_input_acc,
        .jt_values = relu_jt_values,
    },
};

sp_layer *sp_relu(void) { return sp_elementwise_layer(&sp_op_relu); }
