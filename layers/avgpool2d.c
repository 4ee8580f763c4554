/* avgpool2d.c — global average pooling: [B, C, H, W] → [B, C], y = mean over (H, W)
 * (PyTorch: F.adaptive_avg_pool2d(x, 1).flatten(1), or avg_pool2d over the whole map).
 *   δ:  dx[b,c,h,w] = dy[b,c]/(H·W)        G: none
 *   Jᵀ (per sample, C·H·W × C): row (c,h,w) has 1/(H·W) in column c. */
#include <stdio.h>
#include "core/csr_ops.h"
#include "core/error.h"
#include "layers/elementwise.h"
#include "layers/layers.h"

static void gap_infer(sp_node *n, const sp_tensor *x)
{
    char buf[64];
    if (x->ndim != 4) sp_fail("global_avgpool2d: input %s, expected [B, C, H, W]", sp_shape_str(x, buf, sizeof buf));
    n->out = sp_tensor_2d(NULL, x->shape[0], x->shape[1]);
}

static size_t plane(const sp_node *n) { return (size_t)sp_node_x(n)->shape[2] * sp_node_x(n)->shape[3]; }

static void gap_forward(sp_node *n)
{
    const float *x = sp_node_x(n)->data;
    size_t P = plane(n);
    for (size_t r = 0; r < n->out.numel; r++) {
        float s = 0;   /* in order, as a float sum */
        for (size_t p = 0; p < P; p++) s += x[r * P + p];
        n->out.data[r] = s / (float)P;
    }
}

static void gap_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    size_t P = plane(n);
    for (size_t r = 0; r < dy->numel; r++) {
        float g = dy->data[r] / (float)P;
        for (size_t p = 0; p < P; p++) dx->data[r * P + p] = g;
    }
}

static void gap_jt_pattern(const sp_node *n, int i, sp_csr *jt)
{
    size_t P = plane(n);
    int rows = (int)sp_tensor_sample_numel(sp_node_x(n));
    sp_csr_alloc(jt, rows, n->out.shape[1], rows);
    for (int r = 0; r <= rows; r++) jt->indptr[r] = r;
    for (int r = 0; r < rows; r++) jt->indices[r] = (int)((size_t)r / P);
}

static void gap_jt_values(const sp_node *n, int i, int b, sp_csr *jt)
{
    float v = 1.0f / (float)plane(n);
    for (int r = 0; r < jt->rows; r++) jt->data[r] = v;
}

static sp_cost gap_cost(const sp_node *n)
{
    double e = (double)sp_node_x(n)->numel;
    return (sp_cost){.fwd_flops = e, .bwd_input_flops = e, .out_bytes = 4.0 * (double)n->out.numel};
}

const sp_opdef sp_op_global_avgpool2d = {
    .name = "global_avgpool2d",
    .infer = gap_infer,
    .forward = gap_forward,
    .backward_input = gap_backward_input,
    .jt_pattern = gap_jt_pattern,
    .jt_values = gap_jt_values,
    .cost = gap_cost,
};

sp_layer *sp_global_avgpool2d(void) { return sp_elementwise_layer(&sp_op_global_avgpool2d); }
