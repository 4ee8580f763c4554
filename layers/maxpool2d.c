/* maxpool2d.c — 2-D max pooling, NCHW, PyTorch semantics: padding counts as −inf,
 * Ho = ⌊(H+2p−k)/s⌋+1 (floor mode), pad <= k/2, ties and NaNs resolved as PyTorch does
 * (the first maximum in window order wins; a NaN wins and propagates).
 *
 *   forward: y[b,c,i,j] = max over the window; saves the argmax (h·W + w, int32)
 *   Layouts: NCHW, or oneDNN's blocked nChw8c / nChw16c passed on (sp_tensor.blk; the
 *   argmaxes then in y's order, still h·W + w): one unit of work is a (b, c) plane, or a
 *   (b, channel block) plane whose blk channels run side by side, the same comparisons
 *   and sums per channel in the same order, so the same bits as NCHW.
 *   δ:       dx[b,c,argmax] += dy[b,c,i,j] (scatter; overlapping windows add up)
 *   G:       none
 *   Jᵀ (per sample, C·H·W × C·Ho·Wo): the pattern is every (input, window) membership,
 *   fixed by shapes alone — a row (c,h,w) lists the windows (c,i,j) that contain (h,w).
 *   Values are 1 where the input is that window's saved argmax for sample b and explicit
 *   0 elsewhere, so the pattern never depends on the input (BPPSA §3.3: guaranteed zeros
 *   only; Appendix D.3 instead builds an input-dependent pattern of the argmaxes). */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include "core/error.h"
#include "core/threads.h"
#include "core/tape.h"
#include "layers/im2col.h"
#include "layers/layers.h"
#include "layers/pool2d.h"
#include "core/guard.h"

static void pool_infer(sp_node *n, const sp_tensor *x) { sp_pool2d_infer(n, x); }

typedef struct pool_job {
    sp_conv_geom g;
    int blk;   /* the layout (sp_tensor.blk): 0 NCHW, else channels per block */
    const float *x, *dy;
    float *y, *dx;
    int32_t *arg;
} pool_job;

/* One window member: v at index i replaces the running max when it is larger or NaN
 * (PyTorch's rule). Written as selects, not a branch: on trained activations the
 * comparison is a coin flip, and a mispredicted branch per element costs more than
 * the whole window. */
#define POOL_TAKE(v, i)                            \
    do {                                           \
        float v_ = (v);                            \
        int take_ = (v_ > m) | (v_ != v_);         \
        m = take_ ? v_ : m;                        \
        best = take_ ? (i) : best;                 \
    } while (0)

/* The common 2×2, stride 2, no padding window: four loads per output. */
static void pool_plane_2x2(const sp_conv_geom *g, const float *restrict x, float *restrict y,
                           int32_t *restrict arg)
{
    int W = g->W, Wo = g->Wo;
    for (int i = 0; i < g->Ho; i++) {
        const float *restrict r0 = x + (size_t)(2 * i) * W, *restrict r1 = r0 + W;
        float *restrict yr = y + (size_t)i * Wo;
        int32_t *restrict ar = arg + (size_t)i * Wo;
        for (int j = 0; j < Wo; j++) {   /* vectorised over j */
            int i0 = 2 * i * W + 2 * j, best = i0;
            float m = r0[2 * j];
            POOL_TAKE(r0[2 * j + 1], i0 + 1);
            POOL_TAKE(r1[2 * j], i0 + W);
            POOL_TAKE(r1[2 * j + 1], i0 + W + 1);
            yr[j] = m;
            ar[j] = best;
        }
    }
}


/* The blocked layout: a plane of blk channels side by side, element (h, w, t) at
 * (h·W + w)·blk + t; each channel t as pool_plane_2x2 does; pool_block with a block of 1 is NCHW's general window. */
static void pool_block_2x2(const sp_conv_geom *g, int blk, const float *restrict x, float *restrict y,
                           int32_t *restrict arg)
{
    int W = g->W, Wo = g->Wo;
    for (int i = 0; i < g->Ho; i++)
        for (int j = 0; j < Wo; j++) {
            int i0 = 2 * i * W + 2 * j;
            const float *restrict p0 = x + (size_t)i0 * blk, *restrict p1 = p0 + blk;
            const float *restrict p2 = p0 + (size_t)W * blk, *restrict p3 = p2 + blk;
            float *restrict yo = y + ((size_t)i * Wo + j) * blk;
            int32_t *restrict ao = arg + ((size_t)i * Wo + j) * blk;
            for (int t = 0; t < blk; t++) {
                int best = i0;
                float m = p0[t];
                POOL_TAKE(p1[t], i0 + 1);
                POOL_TAKE(p2[t], i0 + W);
                POOL_TAKE(p3[t], i0 + W + 1);
                yo[t] = m;
                ao[t] = best;
            }
        }
}

/* Any kernel, stride and padding (pad <= k/2 guarantees every window holds an input). */
static void pool_block(const sp_conv_geom *g, int blk, const float *x, float *y, int32_t *arg)
{
    for (int i = 0; i < g->Ho; i++) {
        int h0 = i * g->stride - g->pad, h1 = h0 + g->k;
        h0 = h0 < 0 ? 0 : h0;
        h1 = h1 > g->H ? g->H : h1;
        for (int j = 0; j < g->Wo; j++) {
            int w0 = j * g->stride - g->pad, w1 = w0 + g->k;
            w0 = w0 < 0 ? 0 : w0;
            w1 = w1 > g->W ? g->W : w1;
            for (int t = 0; t < blk; t++) {
                int best = h0 * g->W + w0;
                float m = -INFINITY;
                for (int h = h0; h < h1; h++)
                    for (int w = w0; w < w1; w++) POOL_TAKE(x[((size_t)h * g->W + w) * blk + t], h * g->W + w);
                y[((size_t)i * g->Wo + j) * blk + t] = m;
                arg[((size_t)i * g->Wo + j) * blk + t] = best;
            }
        }
    }
}

/* One unit = one (b, c) plane, or one (b, channel block) plane of a blocked x. */
static void pool_forward_range(void *ctx, size_t begin, size_t end)
{
    const pool_job *J = ctx;
    const sp_conv_geom *g = &J->g;
    size_t k = J->blk ? (size_t)J->blk : 1, in_plane = (size_t)g->H * g->W * k, out_plane = (size_t)g->Ho * g->Wo * k;
    bool two = g->k == 2 && g->stride == 2 && g->pad == 0;
    for (size_t u = begin; u < end; u++) {
        const float *x = J->x + u * in_plane;
        float *y = J->y + u * out_plane;
        int32_t *arg = J->arg + u * out_plane;
        if (J->blk) (two ? pool_block_2x2 : pool_block)(g, J->blk, x, y, arg);
        else if (two) pool_plane_2x2(g, x, y, arg);
        else pool_block(g, 1, x, y, arg);   /* NCHW: a block of one channel */
    }
}

/* Units of work per sample: its planes, or its channel blocks. */
static size_t units_per_sample(const pool_job *J) { return (size_t)(J->blk ? J->g.C / J->blk : J->g.C); }

/* The argmaxes (the saved state), before any sample (sp_kernels.forward_begin). */
static void pool_forward_begin(sp_node *n) { n->saved = sp_tape_alloc(n->tape, n->out.numel * sizeof(int32_t)); }

static pool_job forward_job(const sp_node *n)
{
    return (pool_job){.g = sp_pool2d_geom(n), .blk = sp_node_x(n)->blk, .x = sp_node_x(n)->data, .y = n->out.data,
                      .arg = n->saved};
}

static void pool_forward(sp_node *n)
{
    pool_forward_begin(n);
    pool_job J = forward_job(n);
    sp_parallel_for((size_t)n->out.shape[0] * units_per_sample(&J), pool_forward_range, &J);
}

/* Samples [b0, b1) on the calling thread (sp_kernels.forward_samples): the planes of
 * those samples, as pool_forward's region computes them. A convolution's forward_relu
 * runs it on the samples it has just written, still in cache. */
static void pool_forward_samples(sp_node *n, int b0, int b1)
{
    pool_job J = forward_job(n);
    pool_forward_range(&J, (size_t)b0 * units_per_sample(&J), (size_t)b1 * units_per_sample(&J));
}

/* 2×2, stride 2, no padding: each input lies in at most one window, so every dx is
 * written once, with no memset and no scatter. 0 + g is what the scatter onto zeros
 * computes (it turns −0 into +0). */
static void unpool_plane_2x2(const sp_conv_geom *g, const float *restrict dy, const int32_t *restrict arg,
                             float *restrict dx)
{
    int W = g->W, Wo = g->Wo;
    for (int i = 0; i < g->Ho; i++) {
        float *restrict r0 = dx + (size_t)(2 * i) * W, *restrict r1 = r0 + W;
        const float *restrict dyr = dy + (size_t)i * Wo;
        const int32_t *restrict ar = arg + (size_t)i * Wo;
        for (int j = 0; j < Wo; j++) {
            int i0 = 2 * i * W + 2 * j, b = ar[j];
            float v = 0.0f + dyr[j];
            r0[2 * j] = b == i0 ? v : 0.0f;
            r0[2 * j + 1] = b == i0 + 1 ? v : 0.0f;
            r1[2 * j] = b == i0 + W ? v : 0.0f;
            r1[2 * j + 1] = b == i0 + W + 1 ? v : 0.0f;
        }
        if (W > 2 * Wo) r0[W - 1] = r1[W - 1] = 0.0f;   /* odd width: the last column */
    }
    if (g->H > 2 * g->Ho) memset(dx + (size_t)(2 * g->Ho) * W, 0, (size_t)W * sizeof(float));
}

/* unpool_plane_2x2 for a plane of blk channels side by side. */
static void unpool_block_2x2(const sp_conv_geom *g, int blk, const float *restrict dy, const int32_t *restrict arg,
                             float *restrict dx)
{
    int W = g->W, Wo = g->Wo;
    size_t row = (size_t)W * blk;
    for (int i = 0; i < g->Ho; i++) {
        for (int j = 0; j < Wo; j++) {
            int i0 = 2 * i * W + 2 * j;
            float *restrict p0 = dx + (size_t)i0 * blk, *restrict p1 = p0 + blk;
            float *restrict p2 = p0 + row, *restrict p3 = p2 + blk;
            const float *restrict d = dy + ((size_t)i * Wo + j) * blk;
            const int32_t *restrict a = arg + ((size_t)i * Wo + j) * blk;
            for (int t = 0; t < blk; t++) {
                float v = 0.0f + d[t];
                p0[t] = a[t] == i0 ? v : 0.0f;
                p1[t] = a[t] == i0 + 1 ? v : 0.0f;
                p2[t] = a[t] == i0 + W ? v : 0.0f;
                p3[t] = a[t] == i0 + W + 1 ? v : 0.0f;
            }
        }
        if (W > 2 * Wo) {   /* odd width: the last column of both rows */
            memset(dx + (size_t)(2 * i) * row + (size_t)(W - 1) * blk, 0, (size_t)blk * sizeof(float));
            memset(dx + (size_t)(2 * i + 1) * row + (size_t)(W - 1) * blk, 0, (size_t)blk * sizeof(float));
        }
    }
    if (g->H > 2 * g->Ho) memset(dx + (size_t)(2 * g->Ho) * row, 0, row * sizeof(float));
}

static void pool_backward_range(void *ctx, size_t begin, size_t end)
{
    const pool_job *J = ctx;
    size_t k = J->blk ? (size_t)J->blk : 1, in_plane = (size_t)J->g.H * J->g.W * k,
           out_plane = (size_t)J->g.Ho * J->g.Wo * k;
    bool two = J->g.k == 2 && J->g.stride == 2 && J->g.pad == 0;
    for (size_t u = begin; u < end; u++) {
        float *dx = J->dx + u * in_plane;
        const float *dy = J->dy + u * out_plane;
        const int32_t *arg = J->arg + u * out_plane;
        if (two) {
            if (J->blk) unpool_block_2x2(&J->g, J->blk, dy, arg, dx);
            else unpool_plane_2x2(&J->g, dy, arg, dx);
            continue;
        }
        memset(dx, 0, in_plane * sizeof(float));
        if (!J->blk)
            for (size_t o = 0; o < out_plane; o++) dx[arg[o]] += dy[o];
        else   /* each channel's windows in the same order as NCHW's */
            for (size_t o = 0; o < out_plane; o += k)
                for (size_t t = 0; t < k; t++) dx[(size_t)arg[o + t] * k + t] += dy[o + t];
    }
}

static void pool_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    pool_job J = {.g = sp_pool2d_geom(n), .blk = dy->blk, .dy = dy->data, .dx = dx->data, .arg = n->saved};
    if (dx->blk != dy->blk) sp_fail("maxpool2d: δ in layout %d, its input's in %d (expected one)", dy->blk, dx->blk);
    sp_parallel_for((size_t)dy->shape[0] * units_per_sample(&J), pool_backward_range, &J);
}

/* ---- Jᵀ: fixed membership pattern, 0/1 values --------------------------------------- */

static void pool_jt_pattern(const sp_node *n, int i, sp_csr *jt) { sp_pool2d_jt_pattern(n, i, jt); }

static void pool_jt_values(const sp_node *n, int i, int b, sp_csr *jt)
{
    sp_conv_geom g = sp_pool2d_geom(n);
    if (n->out.blk) sp_fail("maxpool2d: Jᵀ of a blocked node (the engines that build Jᵀ run NCHW tapes)");
    const int32_t *arg = (const int32_t *)n->saved + (size_t)b * g.C * g.Ho * g.Wo;
    memset(jt->data, 0, (size_t)jt->nnz * sizeof(float));
    for (int c = 0; c < g.C; c++)
        for (int i = 0; i < g.Ho; i++)
            for (int j = 0; j < g.Wo; j++) {
                int a = arg[(c * g.Ho + i) * g.Wo + j], h = a / g.W, w = a % g.W;
                int i_lo, i_hi, j_lo, j_hi;   /* the row lists windows (i', j') in order */
                sp_window_range(h, g.k, g.stride, g.pad, g.Ho, &i_lo, &i_hi);
                sp_window_range(w, g.k, g.stride, g.pad, g.Wo, &j_lo, &j_hi);
                int row = (c * g.H + h) * g.W + w;
                jt->data[jt->indptr[row] + (i - i_lo) * (j_hi - j_lo) + (j - j_lo)] = 1.0f;
            }
}

static sp_cost pool_cost(const sp_node *n)
{
    double out = (double)n->out.numel, k = SP_POOL2D(n)->k;
    return (sp_cost){.fwd_flops = out * k * k, .bwd_input_flops = out, .out_bytes = 4 * out, .saved_bytes = 4 * out};
}

/* Any one layout, passed on. */
static int pool_blocked(const sp_layer *l) { return SP_BLK_PASS; }

const sp_opdef sp_op_maxpool2d = {
    .name = "maxpool2d",
    .blocked = pool_blocked,
    .infer = pool_infer,
    .jt_pattern = pool_jt_pattern,
    .cost = pool_cost,
    .cpu = {
        .forward = pool_forward,
        .forward_begin = pool_forward_begin,
        .forward_samples = pool_forward_samples,
        .backward_input = pool_backward_input,
        .jt_values = pool_jt_values,
    },
};

sp_layer *sp_maxpool2d(int k, int stride, int pad)
{
    SP_GUARD(NULL);
    return sp_pool2d_layer_new(&sp_op_maxpool2d, k, stride, pad);
}
