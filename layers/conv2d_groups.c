/* conv2d_groups.c — grouped 2-D convolution (nn.Conv2d(..., groups=G)), NCHW; groups =
 * channels is the depthwise convolution of MobileNet. The input's C channels and the O
 * outputs are split into G equal groups; output o sees only its group's C/G channels.
 *   W [O, C/G, k, k] (PyTorch's layout), b [O] (optional, as bias=False).
 *   forward: y[b,o,i,j] = b[o] + Σ_{c∈grp(o),u,v} W[o,c−c₀,u,v]·x[b,c,i·s−p+u,j·s−p+v]
 *   δ:       dx[b,c,h,w] = Σ_{o∈grp(c)} Σ_{windows (i,j) ∋ (h,w)} W[o, c−c₀, h+p−i·s, w+p−j·s]·dy[b,o,i,j]
 *   G:       dW[o, c−c₀, u, v] += Σ_{b,i,j} dy[b,o,i,j]·x[b, c, i·s−p+u, j·s−p+v];  db[o] += Σ dy
 *   Jᵀ (per sample): conv2d's pattern restricted to o ∈ grp(c).
 * Direct loops, parallel over samples (forward, δ) and output channels (G): each sum has
 * a fixed order, so the bits do not depend on the thread count. groups = 1 is
 * sp_conv2d's GEMM path (sp_conv2d_groups returns that op). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/kernels/csr_ops.h"
#include "core/error.h"
#include "core/threads.h"
#include "layers/conv2d_internal.h"
#include "layers/im2col.h"
#include "layers/layers.h"
#include "core/guard.h"

#define GL(n) ((const gconv_layer *)(n)->layer)

static sp_conv_geom geom(const sp_node *n)
{
    const sp_tensor *x = sp_node_x(n);
    return (sp_conv_geom){.C = x->shape[1], .H = x->shape[2], .W = x->shape[3], .Ho = n->out.shape[2],
                          .Wo = n->out.shape[3], .k = GL(n)->k, .stride = GL(n)->stride, .pad = GL(n)->pad};
}

static void gconv_infer(sp_node *n, const sp_tensor *x)
{
    const gconv_layer *l = GL(n);
    char buf[64];
    if (x->ndim != 4 || x->shape[1] != l->cin || x->shape[2] + 2 * l->pad < l->k || x->shape[3] + 2 * l->pad < l->k)
        sp_fail("conv2d %s: input %s, expected [B, %d, H, W] with H, W >= %d (kernel %d, padding %d)", l->base.name,
                sp_shape_str(x, buf, sizeof buf), l->cin, l->k - 2 * l->pad, l->k, l->pad);
    n->out = sp_tensor_4d(NULL, x->shape[0], l->cout, sp_conv_out_size(x->shape[2], l->k, l->stride, l->pad),
                          sp_conv_out_size(x->shape[3], l->k, l->stride, l->pad));
}

typedef struct job {
    const sp_node *n;
    const float *dy;
    float *dx;
} job;

static void forward_range(void *ctx, size_t b0, size_t b1)
{
    const sp_node *n = ((const job *)ctx)->n;
    const gconv_layer *l = GL(n);
    sp_conv_geom g = geom(n);
    int Cg = l->cin / l->groups, Og = l->cout / l->groups, k = g.k;
    const float *x = sp_node_x(n)->data, *W = n->layer->params[0]->value.data;
    const float *bias = l->bias ? n->layer->params[1]->value.data : NULL;
    for (size_t b = b0; b < b1; b++)
        for (int o = 0; o < l->cout; o++) {
            int c0 = o / Og * Cg;
            for (int i = 0; i < g.Ho; i++)
                for (int j = 0; j < g.Wo; j++) {
                    float s = bias ? bias[o] : 0.0f;
                    for (int c = 0; c < Cg; c++)
                        for (int u = 0; u < k; u++) {
                            int h = i * g.stride - g.pad + u;
                            if (h < 0 || h >= g.H) continue;
                            for (int v = 0; v < k; v++) {
                                int w = j * g.stride - g.pad + v;
                                if (w < 0 || w >= g.W) continue;
                                s += W[(((size_t)o * Cg + c) * k + u) * k + v] *
                                     x[(((size_t)b * g.C + c0 + c) * g.H + h) * g.W + w];
                            }
                        }
                    n->out.data[(((size_t)b * l->cout + o) * g.Ho + i) * g.Wo + j] = s;
                }
        }
}

static void gconv_forward(sp_node *n)
{
    job J = {.n = n};
    sp_parallel_for((size_t)n->out.shape[0], forward_range, &J);
}

static void delta_range(void *ctx, size_t b0, size_t b1)
{
    const job *J = ctx;
    const sp_node *n = J->n;
    const gconv_layer *l = GL(n);
    sp_conv_geom g = geom(n);
    int Cg = l->cin / l->groups, Og = l->cout / l->groups, k = g.k;
    const float *W = n->layer->params[0]->value.data;
    for (size_t b = b0; b < b1; b++)
        for (int c = 0; c < g.C; c++) {
            int gi = c / Cg, cl = c - gi * Cg;
            for (int h = 0; h < g.H; h++)
                for (int w = 0; w < g.W; w++) {
                    int i_lo, i_hi, j_lo, j_hi;
                    sp_window_range(h, k, g.stride, g.pad, g.Ho, &i_lo, &i_hi);
                    sp_window_range(w, k, g.stride, g.pad, g.Wo, &j_lo, &j_hi);
                    float s = 0;
                    for (int o = gi * Og; o < (gi + 1) * Og; o++)
                        for (int i = i_lo; i < i_hi; i++)
                            for (int j = j_lo; j < j_hi; j++)
                                s += W[(((size_t)o * Cg + cl) * k + (h + g.pad - i * g.stride)) * k +
                                       (w + g.pad - j * g.stride)] *
                                     J->dy[(((size_t)b * l->cout + o) * g.Ho + i) * g.Wo + j];
                    J->dx[(((size_t)b * g.C + c) * g.H + h) * g.W + w] = s;
                }
        }
}

static void gconv_backward_input(sp_node *n, int i0, const sp_tensor *dy, sp_tensor *dx)
{
    job J = {.n = n, .dy = dy->data, .dx = dx->data};
    sp_parallel_for((size_t)dx->shape[0], delta_range, &J);
}

static void grad_range(void *ctx, size_t o0, size_t o1)
{
    const job *J = ctx;
    const sp_node *n = J->n;
    const gconv_layer *l = GL(n);
    sp_conv_geom g = geom(n);
    int B = n->out.shape[0], Cg = l->cin / l->groups, Og = l->cout / l->groups, k = g.k;
    const float *x = sp_node_x(n)->data;
    float *dW = n->layer->params[0]->grad.data;
    for (size_t o = o0; o < o1; o++) {
        int c0 = (int)o / Og * Cg;
        const float *dyo = J->dy + o * (size_t)g.Ho * g.Wo;
        for (int c = 0; c < Cg; c++)
            for (int u = 0; u < k; u++)
                for (int v = 0; v < k; v++) {
                    double s = 0;
                    for (int b = 0; b < B; b++)
                        for (int i = 0; i < g.Ho; i++) {
                            int h = i * g.stride - g.pad + u;
                            if (h < 0 || h >= g.H) continue;
                            for (int j = 0; j < g.Wo; j++) {
                                int w = j * g.stride - g.pad + v;
                                if (w < 0 || w >= g.W) continue;
                                s += (double)dyo[((size_t)b * l->cout * g.Ho + i) * g.Wo + j] *
                                     x[(((size_t)b * g.C + c0 + c) * g.H + h) * g.W + w];
                            }
                        }
                    dW[((o * Cg + c) * k + u) * k + v] += (float)s;
                }
        if (!l->bias) continue;
        double s = 0;
        for (int b = 0; b < B; b++)
            for (int p = 0; p < g.Ho * g.Wo; p++) s += dyo[(size_t)b * l->cout * g.Ho * g.Wo + p];
        n->layer->params[1]->grad.data[o] += (float)s;
    }
}

static void gconv_backward_params(sp_node *n, const sp_tensor *dy)
{
    job J = {.n = n, .dy = dy->data};
    sp_parallel_for((size_t)GL(n)->cout, grad_range, &J);
}

/* Row (c,h,w): for each o of c's group, the windows (i,j) containing (h,w), in column order. */
static void gconv_jt(const sp_node *n, sp_csr *jt, bool values)
{
    const gconv_layer *l = GL(n);
    sp_conv_geom g = geom(n);
    int Cg = l->cin / l->groups, Og = l->cout / l->groups, k = g.k;
    const float *W = n->layer->params[0]->value.data;
    int64_t pos = 0;
    for (int r = 0; r < g.C * g.H * g.W; r++) {
        int c = r / (g.H * g.W), h = r / g.W % g.H, w = r % g.W, gi = c / Cg;
        int i_lo, i_hi, j_lo, j_hi;
        sp_window_range(h, k, g.stride, g.pad, g.Ho, &i_lo, &i_hi);
        sp_window_range(w, k, g.stride, g.pad, g.Wo, &j_lo, &j_hi);
        if (!values) jt->indptr[r] = (int32_t)pos;
        for (int o = gi * Og; o < (gi + 1) * Og; o++)
            for (int i = i_lo; i < i_hi; i++)
                for (int j = j_lo; j < j_hi; j++, pos++) {
                    if (values)
                        jt->data[pos] = W[(((size_t)o * Cg + c - gi * Cg) * k + (h + g.pad - i * g.stride)) * k +
                                          (w + g.pad - j * g.stride)];
                    else
                        jt->indices[pos] = (o * g.Ho + i) * g.Wo + j;
                }
    }
    if (!values) jt->indptr[g.C * g.H * g.W] = (int32_t)pos;
}

static void gconv_jt_pattern(const sp_node *n, int i0, sp_csr *jt)
{
    const gconv_layer *l = GL(n);
    sp_conv_geom g = geom(n);
    int64_t nnz = 0;
    for (int r = 0; r < g.C * g.H * g.W; r++) {
        int i_lo, i_hi, j_lo, j_hi;
        sp_window_range(r / g.W % g.H, g.k, g.stride, g.pad, g.Ho, &i_lo, &i_hi);
        sp_window_range(r % g.W, g.k, g.stride, g.pad, g.Wo, &j_lo, &j_hi);
        nnz += (int64_t)(l->cout / l->groups) * (i_hi - i_lo) * (j_hi - j_lo);
    }
    if (nnz > INT32_MAX) sp_fail("conv2d %s: Jᵀ has %lld non-zeros, more than int32 CSR indices hold", l->base.name,
                                 (long long)nnz);
    sp_csr_alloc(jt, g.C * g.H * g.W, l->cout * g.Ho * g.Wo, nnz);
    gconv_jt(n, jt, false);
}

static void gconv_jt_values(const sp_node *n, int i0, int b, sp_csr *jt) { gconv_jt(n, jt, true); }

static sp_cost gconv_cost(const sp_node *n)
{
    const gconv_layer *l = GL(n);
    double B = n->out.shape[0], P = (double)n->out.shape[2] * n->out.shape[3];
    double K = (double)l->cin / l->groups * l->k * l->k, O = l->cout, mac = 2 * B * O * K * P;
    return (sp_cost){.fwd_flops = mac, .bwd_input_flops = mac, .bwd_params_flops = mac, .out_bytes = 4 * B * O * P,
                     .param_bytes = 4 * (O * K + (l->bias ? O : 0))};
}

static void gconv_init(sp_layer *l, sp_rng *r)
{
    /* PyTorch: kaiming_uniform_(a=√5) and U(±1/√fan_in), fan_in = (C/G)·k·k. */
    const gconv_layer *c = (const gconv_layer *)l;
    float bound = 1.0f / sqrtf((float)(c->cin / c->groups * c->k * c->k));
    sp_fill_uniform(&l->params[0]->value, r, bound);
    if (c->bias) sp_fill_uniform(&l->params[1]->value, r, bound);
}

const sp_opdef sp_op_conv2d_groups = {
    .name = "conv2d_groups",
    .infer = gconv_infer,
    .jt_pattern = gconv_jt_pattern,
    .cost = gconv_cost,
    .init_params = gconv_init,
    .cpu = {
        .forward = gconv_forward,
        .backward_input = gconv_backward_input,
        .backward_params = gconv_backward_params,
        .jt_values = gconv_jt_values,
    },
};

sp_layer *sp_conv2d_groups(const char *name, int cin, int cout, int k, int stride, int pad, int groups, bool bias)
{
    SP_GUARD(NULL);
    if (!name) sp_fail("sp_conv2d_groups: argument 'name' is NULL");
    if (groups < 1 || cin % groups || cout % groups)
        sp_fail("conv2d %s: %d groups for %d -> %d channels (expected groups >= 1 dividing both)", name, groups, cin,
                cout);
    if (groups == 1)
        return bias ? sp_conv2d(name, cin, cout, k, stride, pad) : sp_conv2d_nobias(name, cin, cout, k, stride, pad);
    if (k < 1 || stride < 1 || pad < 0)
        sp_fail("conv2d %s: kernel %d, stride %d, padding %d (expected kernel, stride >= 1 and padding >= 0)", name, k,
                stride, pad);
    gconv_layer *l = sp_xcalloc(1, sizeof *l);
    l->base.op = &sp_op_conv2d_groups;
    snprintf(l->base.name, sizeof l->base.name, "%s", name);
    l->cin = cin, l->cout = cout, l->k = k, l->stride = stride, l->pad = pad, l->groups = groups, l->bias = bias;
    sp_param_new(&l->base, "weight", 4, (int[]){cout, cin / groups, k, k});
    if (bias) sp_param_new(&l->base, "bias", 1, (int[]){cout});
    return &l->base;
}
