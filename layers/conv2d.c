/* conv2d.c — 2-D convolution, NCHW, PyTorch semantics (zero padding, no dilation/groups).
 *
 * x [B, C, H, W], W [O, C, k, k] (OIHW), b [O], y [B, O, Ho, Wo], Ho = ⌊(H+2p−k)/s⌋+1.
 * With K = C·k·k, P = Ho·Wo, col = im2col(x) [K, B·P] and dyᵀ = dy laid out [O, B·P]:
 *   forward: y  = W·col + b               (O×K)(K×B·P), then back to NCHW
 *   δ:       dx = col2im(Wᵀ·dyᵀ)           (K×O)(O×B·P)
 *   G:       dW += dyᵀ·colᵀ, db += Σ dy   (O×B·P)(B·P×K)
 *   Jᵀ (per sample, C·H·W × O·Ho·Wo): row (c,h,w), column (o,i,j) holds W[o][c][kh][kw]
 *   for the one tap (kh, kw) = (h+p−i·s, w+p−j·s) linking them, when it lies in [0, k)
 *   (BPPSA §3.4, Appendix D.1, which gives only k=3, p=1; this is the general case).
 *
 * The batch is folded into the GEMM's columns: one large GEMM per chunk of samples
 * instead of B small ones keeps OpenBLAS near peak when Ho·Wo is small. Chunks are
 * sized so a chunk's column buffer (K × chunk·P floats) stays in the last-level cache
 * between im2col writing it and the GEMM reading it; G recomputes im2col per chunk
 * rather than keeping the whole col from the forward. All scratch is carved from the
 * tape's arena in the forward, with separate buffers for δ and G, so the two can run
 * at the same time on the ooo engine's two lanes without allocating. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "core/backend.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/tape.h"
#include "layers/im2col.h"
#include "layers/layers.h"

/* Column-buffer budget per chunk: well inside the 32 MiB L3 of the target machine. */
#define CONV_CHUNK_BYTES (4u << 20)

typedef struct conv_layer {
    sp_layer base;
    int cin, cout, k, stride, pad;
} conv_layer;

typedef struct conv_saved {
    sp_conv_geom g;
    int B, O, K, P, chunk;   /* chunk: samples per GEMM                          */
    float *col, *rows;       /* forward and G: im2col [K, chunk·P], [O, chunk·P] */
    float *dcol, *dyt;       /* δ's own pair of the same shapes                  */
} conv_saved;

#define L(n) ((const conv_layer *)(n)->layer)

static sp_conv_geom conv_geom(const sp_node *n)
{
    const sp_tensor *x = sp_node_x(n);
    const conv_layer *l = L(n);
    return (sp_conv_geom){.C = x->shape[1], .H = x->shape[2], .W = x->shape[3], .Ho = n->out.shape[2],
                          .Wo = n->out.shape[3], .k = l->k, .stride = l->stride, .pad = l->pad};
}

static void conv_infer(sp_node *n, const sp_tensor *x)
{
    const conv_layer *l = L(n);
    char buf[64];
    if (x->ndim != 4 || x->shape[1] != l->cin || x->shape[2] + 2 * l->pad < l->k || x->shape[3] + 2 * l->pad < l->k)
        sp_fail("conv2d %s: input %s, expected [B, %d, H, W] with H, W >= %d (kernel %d, padding %d)", l->base.name,
                sp_shape_str(x, buf, sizeof buf), l->cin, l->k - 2 * l->pad, l->k, l->pad);
    n->out = sp_tensor_4d(NULL, x->shape[0], l->cout, sp_conv_out_size(x->shape[2], l->k, l->stride, l->pad),
                          sp_conv_out_size(x->shape[3], l->k, l->stride, l->pad));
}

/* ---- layout moves between NCHW and the GEMM's [O, chunk·P] ------------------------- */

typedef struct move_job {
    const conv_saved *S;
    const float *src, *bias;
    float *dst;
    int b0, nb;
} move_job;

/* rows [O, nb·P] (+ bias) → y[b0 + bb][o]; one unit per (bb, o) segment of P floats. */
static void scatter_range(void *ctx, size_t begin, size_t end)
{
    const move_job *J = ctx;
    int O = J->S->O, P = J->S->P;
    size_t ld = (size_t)J->nb * P;
    for (size_t u = begin; u < end; u++) {
        int bb = (int)(u / (size_t)O), o = (int)(u % (size_t)O);
        const float *restrict s = J->src + (size_t)o * ld + (size_t)bb * P;
        float *restrict d = J->dst + ((size_t)(J->b0 + bb) * O + o) * P;
        float bo = J->bias[o];
        for (int p = 0; p < P; p++) d[p] = s[p] + bo;
    }
}

/* dy[b0 + bb][o] → rows [O, nb·P]. */
static void gather_range(void *ctx, size_t begin, size_t end)
{
    const move_job *J = ctx;
    int O = J->S->O, P = J->S->P;
    size_t ld = (size_t)J->nb * P;
    for (size_t u = begin; u < end; u++) {
        int bb = (int)(u / (size_t)O), o = (int)(u % (size_t)O);
        memcpy(J->dst + (size_t)o * ld + (size_t)bb * P, J->src + ((size_t)(J->b0 + bb) * O + o) * P,
               (size_t)P * sizeof(float));
    }
}

static void move(sp_range_fn fn, const conv_saved *S, const float *src, const float *bias, float *dst, int b0, int nb)
{
    move_job J = {.S = S, .src = src, .bias = bias, .dst = dst, .b0 = b0, .nb = nb};
    sp_parallel_for((size_t)nb * S->O, fn, &J);
}

/* ---- forward, δ, G ------------------------------------------------------------------ */

static void conv_forward(sp_node *n)
{
    const sp_tensor *x = sp_node_x(n);
    conv_saved *S = sp_tape_alloc(n->tape, sizeof *S);
    S->g = conv_geom(n);
    S->B = x->shape[0];
    S->O = L(n)->cout;
    S->K = S->g.C * S->g.k * S->g.k;
    S->P = S->g.Ho * S->g.Wo;
    size_t per_sample = (size_t)S->K * S->P * sizeof(float);
    size_t fit = CONV_CHUNK_BYTES / (per_sample ? per_sample : 1);
    S->chunk = fit < 1 ? 1 : fit > (size_t)S->B ? S->B : (int)fit;
    size_t cols = (size_t)S->chunk * S->P;
    S->col = sp_tape_alloc(n->tape, (size_t)S->K * cols * sizeof(float));
    S->dcol = sp_tape_alloc(n->tape, (size_t)S->K * cols * sizeof(float));
    S->rows = sp_tape_alloc(n->tape, (size_t)S->O * cols * sizeof(float));
    S->dyt = sp_tape_alloc(n->tape, (size_t)S->O * cols * sizeof(float));
    n->saved = S;

    const float *W = n->layer->params[0]->value.data, *bias = n->layer->params[1]->value.data;
    for (int b0 = 0; b0 < S->B; b0 += S->chunk) {
        int nb = S->B - b0 < S->chunk ? S->B - b0 : S->chunk, N = nb * S->P;
        sp_im2col(&S->g, x->data, b0, b0 + nb, S->col);
        sp_gemm(false, false, S->O, N, S->K, 1.0f, W, S->K, S->col, N, 0.0f, S->rows, N);
        move(scatter_range, S, S->rows, bias, n->out.data, b0, nb);
    }
}

static void conv_backward_input(sp_node *n, const sp_tensor *dy, sp_tensor *dx)
{
    const conv_saved *S = n->saved;
    const float *W = n->layer->params[0]->value.data;
    for (int b0 = 0; b0 < S->B; b0 += S->chunk) {
        int nb = S->B - b0 < S->chunk ? S->B - b0 : S->chunk, N = nb * S->P;
        move(gather_range, S, dy->data, NULL, S->dyt, b0, nb);
        sp_gemm(true, false, S->K, N, S->O, 1.0f, W, S->K, S->dyt, N, 0.0f, S->dcol, N);
        sp_col2im(&S->g, S->dcol, b0, b0 + nb, dx->data);
    }
}

typedef struct bias_job {
    const conv_saved *S;
    const float *dy;
    float *db;
} bias_job;

static void bias_grad_range(void *ctx, size_t begin, size_t end)
{
    const bias_job *J = ctx;
    int O = J->S->O, P = J->S->P;
    for (size_t o = begin; o < end; o++) {
        double sum = 0.0;   /* fixed order over (b, p): independent of the partition */
        for (int b = 0; b < J->S->B; b++) {
            const float *d = J->dy + ((size_t)b * O + o) * P;
            for (int p = 0; p < P; p++) sum += d[p];
        }
        J->db[o] += (float)sum;
    }
}

static void conv_backward_params(sp_node *n, const sp_tensor *dy)
{
    const conv_saved *S = n->saved;
    const float *x = sp_node_x(n)->data;
    float *dW = n->layer->params[0]->grad.data, *db = n->layer->params[1]->grad.data;
    for (int b0 = 0; b0 < S->B; b0 += S->chunk) {
        int nb = S->B - b0 < S->chunk ? S->B - b0 : S->chunk, N = nb * S->P;
        sp_im2col(&S->g, x, b0, b0 + nb, S->col);
        move(gather_range, S, dy->data, NULL, S->rows, b0, nb);
        sp_gemm(false, true, S->O, S->K, N, 1.0f, S->rows, N, S->col, N, 1.0f, dW, S->K);
    }
    bias_job J = {.S = S, .dy = dy->data, .db = db};
    sp_parallel_for((size_t)S->O, bias_grad_range, &J);
}

/* ---- Jᵀ ----------------------------------------------------------------------------- */

typedef struct jt_job {
    const sp_node *n;
    sp_conv_geom g;
    int O;
    sp_csr *jt;
} jt_job;

/* Row (c, h, w) lists, for each o, the outputs (i, j) whose window covers (h, w):
 * i ∈ [i_lo, i_hi), j ∈ [j_lo, j_hi), in increasing column order (o, i, j). */
static void jt_rows_range(void *ctx, size_t begin, size_t end, bool values)
{
    const jt_job *J = ctx;
    const sp_conv_geom *g = &J->g;
    int k = g->k, s = g->stride, p = g->pad;
    const float *W = values ? J->n->layer->params[0]->value.data : NULL;
    for (size_t row = begin; row < end; row++) {
        int c = (int)(row / ((size_t)g->H * g->W)), h = (int)(row / g->W % g->H), w = (int)(row % g->W);
        int i_lo, i_hi, j_lo, j_hi;
        sp_window_range(h, k, s, p, g->Ho, &i_lo, &i_hi);
        sp_window_range(w, k, s, p, g->Wo, &j_lo, &j_hi);
        int64_t pos = J->jt->indptr[row];
        for (int o = 0; o < J->O; o++)
            for (int i = i_lo; i < i_hi; i++)
                for (int j = j_lo; j < j_hi; j++, pos++) {
                    if (values)
                        J->jt->data[pos] = W[(((size_t)o * g->C + c) * k + (h + p - i * s)) * k + (w + p - j * s)];
                    else
                        J->jt->indices[pos] = (o * g->Ho + i) * g->Wo + j;
                }
    }
}

static void jt_indices_range(void *ctx, size_t b, size_t e) { jt_rows_range(ctx, b, e, false); }
static void jt_data_range(void *ctx, size_t b, size_t e) { jt_rows_range(ctx, b, e, true); }

static void conv_jt_pattern(const sp_node *n, sp_csr *jt)
{
    sp_conv_geom g = conv_geom(n);
    int O = L(n)->cout, rows = g.C * g.H * g.W, cols = O * g.Ho * g.Wo;
    int64_t nnz = 0;
    for (int r = 0; r < rows; r++) {
        int i_lo, i_hi, j_lo, j_hi;
        sp_window_range(r / g.W % g.H, g.k, g.stride, g.pad, g.Ho, &i_lo, &i_hi);
        sp_window_range(r % g.W, g.k, g.stride, g.pad, g.Wo, &j_lo, &j_hi);
        nnz += (int64_t)O * (i_hi - i_lo) * (j_hi - j_lo);
    }
    if (nnz > INT32_MAX)
        sp_fail("conv2d %s: Jᵀ has %lld non-zeros, more than int32 CSR indices hold (expected <= %d)",
                n->layer->name, (long long)nnz, INT32_MAX);
    sp_csr_alloc(jt, rows, cols, nnz);
    int64_t acc = 0;
    for (int r = 0; r < rows; r++) {
        int i_lo, i_hi, j_lo, j_hi;
        sp_window_range(r / g.W % g.H, g.k, g.stride, g.pad, g.Ho, &i_lo, &i_hi);
        sp_window_range(r % g.W, g.k, g.stride, g.pad, g.Wo, &j_lo, &j_hi);
        jt->indptr[r] = (int32_t)acc;
        acc += (int64_t)O * (i_hi - i_lo) * (j_hi - j_lo);
    }
    jt->indptr[rows] = (int32_t)acc;
    jt_job J = {.n = n, .g = g, .O = O, .jt = jt};
    sp_parallel_for((size_t)rows, jt_indices_range, &J);
}

/* The weights do not depend on the sample: b is unused. */
static void conv_jt_values(const sp_node *n, int b, sp_csr *jt)
{
    jt_job J = {.n = n, .g = conv_geom(n), .O = L(n)->cout, .jt = jt};
    sp_parallel_for((size_t)jt->rows, jt_data_range, &J);
}

/* ---- cost, init, constructor -------------------------------------------------------- */

static sp_cost conv_cost(const sp_node *n)
{
    const conv_layer *l = L(n);
    double B = n->out.shape[0], P = (double)n->out.shape[2] * n->out.shape[3];
    double K = (double)l->cin * l->k * l->k, O = l->cout;
    double gemm = 2 * B * O * K * P;   /* bias adds (B·O·P) are below 1/K of this: left out */
    /* scratch carved in the forward: two column buffers, two [O, chunk·P] buffers */
    double chunk = floor((double)CONV_CHUNK_BYTES / (4 * K * P));
    chunk = chunk < 1 ? 1 : chunk > B ? B : chunk;
    return (sp_cost){.fwd_flops = gemm,
                     .bwd_input_flops = gemm,
                     .bwd_params_flops = gemm,
                     .out_bytes = 4 * B * O * P,
                     .saved_bytes = 4 * 2 * (K + O) * chunk * P,
                     .param_bytes = 4 * (O * K + O)};
}

static void conv_init(sp_layer *l, sp_rng *r)
{
    /* PyTorch: kaiming_uniform_(a=√5) on W and U(±1/√fan_in) on b, fan_in = C·k·k. */
    const conv_layer *c = (const conv_layer *)l;
    float bound = 1.0f / sqrtf((float)(c->cin * c->k * c->k));
    sp_fill_uniform(&l->params[0]->value, r, bound);
    sp_fill_uniform(&l->params[1]->value, r, bound);
}

const sp_opdef sp_op_conv2d = {
    .name = "conv2d",
    .infer = conv_infer,
    .forward = conv_forward,
    .backward_input = conv_backward_input,
    .backward_params = conv_backward_params,
    .jt_pattern = conv_jt_pattern,
    .jt_values = conv_jt_values,
    .cost = conv_cost,
    .init_params = conv_init,
};

sp_layer *sp_conv2d(const char *name, int cin, int cout, int k, int stride, int pad)
{
    if (cin < 1 || cout < 1 || k < 1 || stride < 1 || pad < 0)
        sp_fail("conv2d %s: channels %d -> %d, kernel %d, stride %d, padding %d (expected channels, kernel, "
                "stride >= 1 and padding >= 0)",
                name, cin, cout, k, stride, pad);
    conv_layer *l = sp_xcalloc(1, sizeof *l);
    l->base.op = &sp_op_conv2d;
    snprintf(l->base.name, sizeof l->base.name, "%s", name);
    l->cin = cin;
    l->cout = cout;
    l->k = k;
    l->stride = stride;
    l->pad = pad;
    sp_param_new(&l->base, "weight", 4, (int[]){cout, cin, k, k});
    sp_param_new(&l->base, "bias", 1, (int[]){cout});
    return &l->base;
}
