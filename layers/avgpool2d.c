/* avgpool2d.c — average pooling, NCHW, PyTorch semantics.
 *
 * avgpool2d(k, stride, pad): nn.AvgPool2d with count_include_pad=True (the default):
 *   y[b,c,i,j] = (1/k²)·Σ x over the k×k window, padding counting as zeros.
 *   δ:  dx[b,c,h,w] = (1/k²)·Σ dy over the windows containing (h, w)     G: none
 *   Jᵀ (per sample, C·H·W × C·Ho·Wo): row (c,h,w) holds 1/k² at each window (c,i,j)
 *   containing (h,w) — the max-pool pattern with constant values.
 * global_avgpool2d: [B, C, H, W] → [B, C], the mean of each map (PyTorch:
 *   F.adaptive_avg_pool2d(x, 1).flatten(1), or avg_pool2d over the whole map).
 *   δ:  dx[b,c,h,w] = dy[b,c]/(H·W)        G: none
 *   Jᵀ (per sample, C·H·W × C): row (c,h,w) has 1/(H·W) in column c. */
#include <stdio.h>
#include <string.h>
#include "core/kernels/csr_ops.h"
#include "core/error.h"
#include "layers/elementwise.h"
#include "layers/im2col.h"
#include "layers/layers.h"
#include "layers/pool2d.h"
#include "core/guard.h"

/* ---- avgpool2d(k, stride, pad) --------------------------------------------------------- */

static void avg_infer(sp_node *n, const sp_tensor *x) { sp_pool2d_infer(n, x); }

static void avg_forward(sp_node *n)
{
    sp_conv_geom g = sp_pool2d_geom(n);
    const float *x = sp_node_x(n)->data;
    float inv = 1.0f / (float)(g.k * g.k);
    size_t planes = (size_t)n->out.shape[0] * g.C;
    for (size_t pl = 0; pl < planes; pl++)
        for (int i = 0; i < g.Ho; i++)
            for (int j = 0; j < g.Wo; j++) {
                float s = 0;
                for (int a = 0; a < g.k; a++)
                    for (int b = 0; b < g.k; b++) {
                        int h = i * g.stride - g.pad + a, w = j * g.stride - g.pad + b;
                        if (h >= 0 && h < g.H && w >= 0 && w < g.W) s += x[(pl * g.H + h) * g.W + w];
                    }
                n->out.data[(pl * g.Ho + i) * g.Wo + j] = s * inv;
            }
}

static void avg_backward_input(sp_node *n, int i0, const sp_tensor *dy, sp_tensor *dx)
{
    sp_conv_geom g = sp_pool2d_geom(n);
    float inv = 1.0f / (float)(g.k * g.k);
    size_t planes = (size_t)dy->shape[0] * g.C;
    for (size_t pl = 0; pl < planes; pl++)
        for (int h = 0; h < g.H; h++)
            for (int w = 0; w < g.W; w++) {
                int i_lo, i_hi, j_lo, j_hi;
                sp_window_range(h, g.k, g.stride, g.pad, g.Ho, &i_lo, &i_hi);
                sp_window_range(w, g.k, g.stride, g.pad, g.Wo, &j_lo, &j_hi);
                float s = 0;
                for (int i = i_lo; i < i_hi; i++)
                    for (int j = j_lo; j < j_hi; j++) s += dy->data[(pl * g.Ho + i) * g.Wo + j];
                dx->data[(pl * g.H + h) * g.W + w] = s * inv;
            }
}

static void avg_jt_pattern(const sp_node *n, int i0, sp_csr *jt) { sp_pool2d_jt_pattern(n, i0, jt); }

static void avg_jt_values(const sp_node *n, int i0, int b, sp_csr *jt)
{
    float v = 1.0f / (float)(SP_POOL2D(n)->k * SP_POOL2D(n)->k);
    for (int64_t e = 0; e < jt->nnz; e++) jt->data[e] = v;
}

static sp_cost avg_cost(const sp_node *n)
{
    double out = (double)n->out.numel, k = SP_POOL2D(n)->k;
    return (sp_cost){.fwd_flops = out * k * k, .bwd_input_flops = out * k * k, .out_bytes = 4 * out};
}

const sp_opdef sp_op_avgpool2d = {
    .name = "avgpool2d",
    .infer = avg_infer,
    .jt_pattern = avg_jt_pattern,
    .cost = avg_cost,
    .cpu = {
        .forward = avg_forward,
        .backward_input = avg_backward_input,
        .jt_values = avg_jt_values,
    },
};

sp_layer *sp_avgpool2d(int k, int stride, int pad)
{
    SP_GUARD(NULL);
    return sp_pool2d_layer_new(&sp_op_avgpool2d, k, stride, pad);
}

/* ---- global average pooling -------------------------------------------------------- */

static void gap_infer(sp_node *n, const sp_tensor *x)
{
    char buf[64];
    if (x->ndim != 4) sp_fail("global_avgpool2d: input %s, expected [B, C, H, W]", sp_shape_str(x, buf, sizeof buf));
    n->out = sp_tensor_2d(NULL, x->shape[0], x->shape[1]);
}

static size_t plane(const sp_node *n) { return (size_t)sp_node_x(n)->shape[2] * sp_node_x(n)->shape[3]; }

/* Map r = (b, c) of x starts at offset *o and steps by *step (a blocked x: sp_tensor.blk). */
static void map_at(const sp_tensor *x, size_t r, size_t P, size_t *o, size_t *step)
{
    size_t C = (size_t)x->shape[1], k = (size_t)x->blk;
    *step = k ? k : 1;
    *o = k ? ((r / C * (C / k) + r % C / k) * P) * k + r % C % k : r * P;
}

static void gap_forward(sp_node *n)
{
    const sp_tensor *xt = sp_node_x(n);
    const float *x = xt->data;
    size_t P = plane(n), o, st;
    n->out.blk = 0;   /* [B, C]: NCHW's order whatever x's layout */
    for (size_t r = 0; r < n->out.numel; r++) {
        map_at(xt, r, P, &o, &st);
        float s = 0;   /* in order, as a float sum */
        for (size_t p = 0; p < P; p++) s += x[o + p * st];
        n->out.data[r] = s / (float)P;
    }
}

static void gap_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    size_t P = plane(n), o, st;
    for (size_t r = 0; r < dy->numel; r++) {
        float g = dy->data[r] / (float)P;
        map_at(dx, r, P, &o, &st);
        for (size_t p = 0; p < P; p++) dx->data[o + p * st] = g;
    }
}

static int gap_blocked(const sp_layer *l) { return SP_BLK_PLAIN; }

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
    .jt_pattern = gap_jt_pattern,
    .cost = gap_cost,
    .blocked = gap_blocked,
    .cpu = {
        .forward = gap_forward,
        .backward_input = gap_backward_input,
        .jt_values = gap_jt_values,
    },
};

sp_layer *sp_global_avgpool2d(void) { return sp_elementwise_layer(&sp_op_global_avgpool2d); }
