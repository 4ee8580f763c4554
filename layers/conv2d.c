/* conv2d.c — 2-D convolution, NCHW, PyTorch semantics (zero padding, no dilation/groups).
 *
 * x [B, C, H, W], W [O, C, k, k] (OIHW), b [O], y [B, O, Ho, Wo], Ho = ⌊(H+2p−k)/s⌋+1.
 * With K = C·k·k, P = Ho·Wo and col = im2col(x), [K, n·P] for n samples side by side:
 *   forward: y  = W·col + b               (O×K)(K×n·P)
 *   δ:       dx = col2im(Wᵀ·dy)            (K×O)(O×n·P)
 *   G:       dW += dy·colᵀ, db += Σ dy     (O×n·P)(n·P×K)
 *   Jᵀ (per sample, C·H·W × O·Ho·Wo): row (c,h,w), column (o,i,j) holds W[o][c][kh][kw]
 *   for the one tap (kh, kw) = (h+p−i·s, w+p−j·s) linking them, when it lies in [0, k)
 *   (BPPSA §3.4, Appendix D.1, which gives only k=3, p=1; this is the general case).
 *
 * Two paths. By default (oneDNN builds) the forward, δ and G run on oneDNN's JIT
 * convolutions (core/kernels/dnnl.h), except for fewer than 4 input channels into output
 * channels that oneDNN's block does not divide (all three; LeNet-5's conv1, on the direct
 * kernel where it runs) and G of tiny output maps (Ho·Wo <= 16) and δ of fewer input channels than oneDNN's block
 * where the padding would cost more (sp_conv_delta_on_dnnl), which run im2col with
 * oneDNN's SGEMM; SCANPROP_CONV=gemm selects the im2col + OpenBLAS path below for all
 * three, which the tests use as the reference. The choice is made at the forward and
 * kept in the saved state, so δ and G follow it.
 *
 * How the work is split. The forward and δ give each pool thread its own contiguous
 * range of samples and run single-threaded GEMMs on it: one sample per GEMM when
 * Ho·Wo >= MIN_GEMM_COLS (the GEMM then reads dy and writes y in NCHW directly), else
 * a few samples side by side so each GEMM keeps enough columns (VGG-11's last convs
 * have Ho·Wo = 4). A thread's im2col, GEMM and layout moves stay in its own cache with
 * no barrier between them, and one thread's im2col traffic overlaps another's GEMM,
 * which a single OpenBLAS-threaded GEMM over the whole batch cannot do. G sums
 * small weight gradients in a private copy per thread; large ones (a copy per thread
 * would cost more to add up than it saves) take one OpenBLAS-threaded GEMM per chunk
 * of samples whose columns stay in the last-level cache. Scratch comes from the
 * tape's arena when each entry point runs; the ooo engine gives its second lane its
 * own arena, so δ and G may run at once. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/device.h"
#include "core/kernels/conv3x3_b8.h"
#include "core/kernels/conv_direct.h"
#include "core/kernels/wino_b8.h"
#include "core/kernels/dense.h"
#include "core/kernels/dnnl.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/tape.h"
#include "layers/conv2d_internal.h"
#include "layers/im2col.h"
#include "layers/layers.h"
#include "core/guard.h"

/* The forward and δ give each GEMM at least this many columns (samples × Ho·Wo). */
#define MIN_GEMM_COLS 256
/* G keeps a private copy per thread of weights up to this many floats (O·K). */
#define G_PRIVATE_MAX_FLOATS 65536
/* oneDNN's G kernels loop over output positions, which leaves them little work at
 * Ho·Wo <= 16 (VGG-11's last four convs): there G is im2col + SGEMM (oneDNN's, see
 * core/kernels/dnnl.h) on the oneDNN path too. */
#define DNNL_G_MIN_P 16
/* With fewer input channels and output channels that oneDNN's block does not divide
 * (LeNet-5's conv1: 6) oneDNN pads them to a vector's width and reorders the output, more
 * work than im2col + oneDNN's SGEMM or the direct kernel, which such convs use instead.
 * Where the block divides them (VGG-11's and ResNet-20's first convs) the output may stay
 * blocked, oneDNN writes it as it is and runs them (measured on AVX2:
 * VGG-11 b32's conv1 forward + G 6.7-9.3 → 3.2-4.8 ms, ResNet-20 b64's stem 4.3-4.8 →
 * 1.7-1.8 ms, against im2col or the direct kernel and a copy into the blocked layout). */
#define DNNL_MIN_C 4
/* oneDNN's δ writes dx in its channel blocks (16 on AVX-512, 8 on AVX2): with fewer input
 * channels than a block it computes the padded ones too. Where they add more than a third
 * to the channels (LeNet-5's conv2 on AVX-512: 6 → 16) that is more work than im2col's
 * GEMM (Wᵀ·dy, no padding) and col2im, which such δ use instead; 6 → 8 on AVX2 is less
 * (measured: LeNet-5 b64's conv2 δ + G 15-35 % faster; sp_conv_delta_on_dnnl). */
#define DNNL_D_MIN_C 16
/* Otherwise its column buffer per chunk: inside the 32 MiB L3 of the target machine. */
#define G_CHUNK_BYTES (8u << 20)

/* The bias values, or zeros for a bias-free conv (params[1] absent). */
static const float *bias_of(const sp_node *n)
{
    return n->layer->nparams > 1 ? n->layer->params[1]->value.data : ((const conv_layer *)n->layer)->zero_bias;
}

typedef struct conv_saved {
    sp_conv_geom g;
    int B, O, K, P;
    int slots;   /* forward and δ: one contiguous range of samples per pool thread */
    int cs;      /* forward and δ: samples per GEMM                               */
    int cg;      /* G: samples per GEMM                                           */
    bool dnnl;   /* the forward ran on oneDNN: so do δ and G (core/kernels/dnnl.c)        */
    bool dnnl_d; /* δ on oneDNN too (dnnl and sp_conv_delta_on_dnnl)                     */
    bool direct; /* forward and G on core/kernels/conv_direct.c (few channels, AVX2)     */
    sp_conv_direct dd;
    bool b8;     /* forward, δ and G on core/kernels/conv3x3_b8.c (3×3, 16·n channels, AVX2)  */
    sp_conv3_b8 d8;
    bool wino;   /* forward, δ and G on core/kernels/wino_b8.c (3×3, ≥ 32 channels, AVX2)      */
    bool wf;     /* ... in its fused form (sp_wino_b8_fused_on: 32 to 64 channels)             */
    sp_wino_b8 dw;
    int xblk, yblk;   /* the layouts of x and y (sp_tensor.blk), so of dx and dy        */
    /* δ and G run apart on tapes whose scratch lives the step (the ooo engine's lanes):
     * dy's blocked copy, made by whichever runs first (dy_share) */
    _Atomic(sp_dnnl_dy_share *) share;
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

static int imin(int a, int b) { return a < b ? a : b; }

/* ---- layout moves between NCHW and the GEMM's [O, nb·P] ---------------------------- */

/* d[p] = s[p] + v; fixed-width blocks so the -O2 vectoriser handles them. */
static void add_scalar(float *restrict d, const float *restrict s, float v, int n)
{
    int p = 0;
    for (; p + 8 <= n; p += 8)
        for (int t = 0; t < 8; t++) d[p + t] = s[p + t] + v;
    for (; p < n; p++) d[p] = s[p] + v;
}

/* d[p] = v, likewise. */
static void fill(float *d, float v, int n)
{
    int p = 0;
    for (; p + 8 <= n; p += 8)
        for (int t = 0; t < 8; t++) d[p + t] = v;
    for (; p < n; p++) d[p] = v;
}

/* rows [O, nb·P] (+ bias) → y[b0 + bb][o], one sample after the other. */
static void scatter(const conv_saved *S, const float *rows, const float *bias, float *y, int b0, int nb)
{
    int O = S->O, P = S->P;
    size_t ld = (size_t)nb * P;
    for (int bb = 0; bb < nb; bb++)
        for (int o = 0; o < O; o++)
            add_scalar(y + ((size_t)(b0 + bb) * O + o) * P, rows + (size_t)o * ld + (size_t)bb * P, bias[o], P);
}

/* dy[b0 + bb][o] → rows[o·ld + bb·P], for bb in [0, nb). */
static void gather(const conv_saved *S, const float *dy, float *rows, size_t ld, int b0, int nb)
{
    int O = S->O, P = S->P;
    for (int bb = 0; bb < nb; bb++)
        for (int o = 0; o < O; o++)
            memcpy(rows + (size_t)o * ld + (size_t)bb * P, dy + ((size_t)(b0 + bb) * O + o) * P,
                   (size_t)P * sizeof(float));
}

typedef struct gather_job {
    const conv_saved *S;
    const float *dy;
    float *rows;
    int b0, N;
} gather_job;

static void gather_range(void *ctx, size_t begin, size_t end)
{
    const gather_job *J = ctx;
    gather(J->S, J->dy, J->rows + begin * (size_t)J->S->P, (size_t)J->N, J->b0 + (int)begin, (int)(end - begin));
}

/* Samples [*b0, *b1) of slot s. */
static void slot_samples(const conv_saved *S, size_t s, int *b0, int *b1)
{
    *b0 = (int)((size_t)S->B * s / (size_t)S->slots);
    *b1 = (int)((size_t)S->B * (s + 1) / (size_t)S->slots);
}

/* ---- forward --------------------------------------------------------------------------- */

typedef struct fwd_job {
    const conv_saved *S;
    const float *x, *W, *bias;
    float *y, *col, *rows;   /* per slot: [K, cs·P] and [O, cs·P] */
    float *xp;               /* direct: per slot, sp_conv_direct_floats */
    bool relu;               /* forward_relu: y = max(y, 0) */
    sp_node *next;           /* forward_relu's next: its forward_samples after the ReLU */
} fwd_job;

/* The ReLU's formula (layers/relu.c) over samples [b0, b0 + nb) of y, still in cache. */
static void relu_samples(const conv_saved *S, float *y, int b0, int nb)
{
    float *restrict p = y + (size_t)b0 * S->O * S->P;
    size_t n = (size_t)nb * S->O * S->P;
    for (size_t i = 0; i < n; i++) p[i] = p[i] > 0.0f ? p[i] : 0.0f;
}

static void forward_slots(void *ctx, size_t begin, size_t end)
{
    const fwd_job *J = ctx;
    const conv_saved *S = J->S;
    size_t cols = (size_t)S->cs * S->P;
    for (size_t s = begin; s < end; s++) {
        float *col = J->col + s * S->K * cols, *rows = J->rows + s * S->O * cols;
        int lo, hi;
        slot_samples(S, s, &lo, &hi);
        if (S->direct) {   /* one sample at a time, its ReLU in the kernel */
            float *xp = J->xp + s * sp_conv_direct_floats(&S->dd);
            sp_conv_direct_prepare(&S->dd, J->W, xp);
            size_t xs = (size_t)S->g.C * S->g.H * S->g.W, ys = (size_t)S->O * S->P;
            for (int b = lo; b < hi; b++) {
                sp_conv_direct_forward(&S->dd, J->x + b * xs, J->W, J->bias, J->relu, J->y + b * ys, xp);
                if (J->next) J->next->kern->forward_samples(J->next, b, b + 1);
            }
            continue;
        }
        for (int b0 = lo; b0 < hi; b0 += S->cs) {
            int nb = imin(S->cs, hi - b0), N = nb * S->P;
            sp_im2col(&S->g, J->x, b0, b0 + nb, col);
            if (nb == 1) {   /* one sample: the GEMM writes y[b0] itself, bias preloaded */
                float *y = J->y + (size_t)b0 * S->O * S->P;
                for (int o = 0; o < S->O; o++) fill(y + (size_t)o * S->P, J->bias[o], S->P);
                sp_gemm_serial(false, false, S->O, S->P, S->K, 1.0f, J->W, S->K, col, S->P, 1.0f, y, S->P);
            } else {
                sp_gemm_serial(false, false, S->O, N, S->K, 1.0f, J->W, S->K, col, N, 0.0f, rows, N);
                scatter(S, rows, J->bias, J->y, b0, nb);
            }
            if (J->relu) relu_samples(S, J->y, b0, nb);
            if (J->next) J->next->kern->forward_samples(J->next, b0, b0 + nb);
        }
    }
}

/* ---- the 3×3 kernel on the 8-channel blocked layout (core/kernels/conv3x3_b8.c) ------- */

/* One region over the slots; per sample the forward (y set), δ (dx set) and G (part set)
 * in that order, δ and G on one padded copy of dy. The bits depend on neither the
 * layouts (the kernels read padded blocked copies) nor on which of them run together. */
typedef struct b8_job {
    const conv_saved *S;
    const float *x, *dy, *bias; /* in their layouts (S->xblk, S->yblk)               */
    const float *wf, *wd;       /* the packed weights of the forward and of δ        */
    float *y, *dx, *part;       /* part: per slot [C][3][3][O], with grad            */
    bool grad;                  /* G: the parts, added to dW                         */
    float *scratch;             /* per slot: b8_slot_floats                          */
    bool relu, acc;             /* the forward's ReLU; δ added to dx                 */
    sp_node *next;              /* the forward's next (forward_relu), per sample      */
    const sp_dnnl_side *side;   /* G: the bias gradient, in the same region, or NULL */
} b8_job;

/* A slot's scratch: padded x, padded dy, one blocked sample of the larger side. */
static size_t b8_slot_floats(const conv_saved *S)
{
    const sp_conv3_b8 *d = &S->d8;
    int big = d->C > d->O ? d->C : d->O;
    return sp_conv3_b8_padded_floats(d, d->C) + sp_conv3_b8_padded_floats(d, d->O) + (size_t)big * d->H * d->W;
}

static void b8_slots(void *ctx, size_t begin, size_t end)
{
    const b8_job *J = ctx;
    const conv_saved *S = J->S;
    const sp_conv3_b8 *d = &S->d8;
    size_t xs = (size_t)d->C * S->P, ys = (size_t)d->O * S->P, nw = (size_t)d->O * S->K;
    for (size_t s = begin; s < end; s++) {
        float *xp = J->scratch + s * b8_slot_floats(S), *dyp = xp + sp_conv3_b8_padded_floats(d, d->C);
        float *tmp = dyp + sp_conv3_b8_padded_floats(d, d->O), *part = J->part ? J->part + s * nw : NULL;
        int lo, hi;
        slot_samples(S, s, &lo, &hi);
        if (J->y || part) sp_conv3_b8_clear(d, d->C, xp);
        if (J->dx || part) sp_conv3_b8_clear(d, d->O, dyp);
        if (part) memset(part, 0, nw * sizeof(float));
        for (int b = lo; b < hi; b++) {
            if (J->y || part) sp_conv3_b8_pad(d, d->C, J->x + b * xs, S->xblk, xp);
            if (J->y) {
                float *y = S->yblk ? J->y + b * ys : tmp;
                sp_conv3_b8_forward(d, xp, J->wf, J->bias, J->relu, y);
                if (!S->yblk) sp_conv3_b8_store(d, d->O, tmp, 0, false, J->y + b * ys);
                if (J->next) J->next->kern->forward_samples(J->next, b, b + 1);
            }
            if (!J->dx && !part) continue;
            sp_conv3_b8_pad(d, d->O, J->dy + b * ys, S->yblk, dyp);
            if (part) sp_conv3_b8_grad(d, xp, dyp, part);
            if (J->dx) {
                bool in_place = S->xblk && !J->acc;
                sp_conv3_b8_delta(d, dyp, J->wd, in_place ? J->dx + b * xs : tmp);
                if (!in_place) sp_conv3_b8_store(d, d->C, tmp, S->xblk, J->acc, J->dx + b * xs);
            }
        }
    }
    const sp_dnnl_side *sd = J->side;   /* this chunk's share of the side work, as grad_slots' */
    if (!sd) return;
    size_t ob = sd->n * begin / (size_t)S->slots, oe = sd->n * end / (size_t)S->slots;
    if (ob < oe) sd->fn(sd->ctx, ob, oe);
}

/* The weights packed for the forward or for δ, in the tape's arena. */
static const float *b8_packed(sp_node *n, bool delta)
{
    const conv_saved *S = n->saved;
    float *wp = sp_tape_alloc(n->tape, sp_conv3_b8_packed_floats(&S->d8) * sizeof(float));
    sp_conv3_b8_pack(&S->d8, n->layer->params[0]->value.data, delta, wp);
    return wp;
}

/* Runs J over the slots; with G, the slots' parts are added to dW in slot order. */
static void b8_run(sp_node *n, b8_job *J)
{
    const conv_saved *S = n->saved;
    size_t nw = (size_t)S->O * S->K;
    J->scratch = sp_tape_alloc(n->tape, S->slots * b8_slot_floats(S) * sizeof(float));
    if (J->grad) J->part = sp_tape_alloc(n->tape, S->slots * nw * sizeof(float));
    sp_parallel_for((size_t)S->slots, b8_slots, J);
    if (!J->grad) return;
    for (int s = 0; s < S->slots; s++) sp_conv3_b8_unpack_add(&S->d8, J->part + s * nw, n->layer->params[0]->grad.data);
}

/* δ (into dx, added with acc), G (with grad) or both, and the bias gradient with G. */
static void b8_backward(sp_node *n, const sp_tensor *dy, float *dx, bool acc, bool grad);

/* ---- Winograd F(2×2, 3×3) on the 8-channel blocked layout (core/kernels/wino_b8.c) ---- */

/* The forward (delta false: x → y) or δ (dy → dx) over the slots, each slot's samples in
 * runs of sp_wino_b8_chunk; outputs not wanted blocked or added (acc) go through a
 * blocked copy per run. */
typedef struct wino_job {
    const conv_saved *S;
    bool delta;
    const float *in, *bias, *U;
    int inblk, outblk;
    bool relu, acc;
    float *out, *scratch;   /* scratch: per slot, wino_slot_floats */
    sp_node *next;          /* the forward's next (forward_relu), per sample */
} wino_job;

static size_t wino_out_floats(const conv_saved *S)
{
    int big = S->g.C > S->O ? S->g.C : S->O;
    return (size_t)sp_wino_b8_chunk(&S->dw) * big * S->P;
}

static size_t wino_slot_floats(const conv_saved *S)
{
    if (S->wf) /* and a blocked copy of one sample's output, for an NCHW one */
        return sp_wino_b8_fused_floats(&S->dw) + (size_t)(S->g.C > S->O ? S->g.C : S->O) * S->P;
    return sp_wino_b8_scratch_floats(&S->dw) + wino_out_floats(S);
}

typedef struct wino_filter_job {
    const sp_wino_b8 *d;
    const float *w;
    float *U;
} wino_filter_job;

static void wino_filter_range(void *ctx, size_t begin, size_t end)
{
    const wino_filter_job *J = ctx;
    sp_wino_b8_filter(J->d, J->w, (int)begin, (int)end, J->U);
}

static void wino_filter_fwd_range(void *ctx, size_t begin, size_t end)
{
    const wino_filter_job *J = ctx;
    sp_wino_b8_filter_fwd(J->d, J->w, (int)begin, (int)end, J->U);
}

static void wino_slots(void *ctx, size_t begin, size_t end)
{
    const wino_job *J = ctx;
    const conv_saved *S = J->S;
    int Ci = J->delta ? S->O : S->g.C, Co = J->delta ? S->g.C : S->O, chunk = sp_wino_b8_chunk(&S->dw);
    size_t xs = (size_t)Ci * S->P, ys = (size_t)Co * S->P;
    if (S->wf) {   /* a sample at a time; an NCHW output through a blocked copy */
        for (size_t s = begin; s < end; s++) {
            float *scratch = J->scratch + s * wino_slot_floats(S), *tmp = scratch + sp_wino_b8_fused_floats(&S->dw);
            int lo, hi;
            slot_samples(S, s, &lo, &hi);
            for (int b = lo; b < hi; b++) {
                float *out = J->outblk ? J->out + b * ys : tmp;
                sp_wino_b8_sample(&S->dw, J->delta, J->in + b * xs, J->inblk, J->U, J->bias, J->relu,
                                  J->acc && J->outblk, out, scratch);
                if (!J->outblk) sp_conv3_b8_store(&S->d8, Co, tmp, 0, J->acc, J->out + b * ys);
                if (J->next) J->next->kern->forward_samples(J->next, b, b + 1);
            }
        }
        return;
    }
    for (size_t s = begin; s < end; s++) {
        float *scratch = J->scratch + s * wino_slot_floats(S), *tmp = scratch + sp_wino_b8_scratch_floats(&S->dw);
        int lo, hi;
        slot_samples(S, s, &lo, &hi);
        for (int b = lo; b < hi; b += chunk) {
            int nb = imin(chunk, hi - b);
            bool in_place = J->outblk && !J->acc;
            float *out = in_place ? J->out + b * ys : tmp;
            sp_wino_b8_run(&S->dw, J->delta, J->in + b * xs, J->inblk, nb, J->U, J->bias, J->relu, out, scratch);
            for (int i = 0; i < nb; i++) {   /* the blocked kernel's store: it reads only the plane of d8 */
                if (!in_place) sp_conv3_b8_store(&S->d8, Co, tmp + i * ys, J->outblk, J->acc, J->out + (b + i) * ys);
                if (J->next) J->next->kern->forward_samples(J->next, b + i, b + i + 1);
            }
        }
    }
}

/* The weights' transform (split over output channels), then the slots. */
static void wino_run(sp_node *n, wino_job *J)
{
    const conv_saved *S = n->saved;
    float *U = sp_tape_alloc(n->tape, sp_wino_b8_u_floats(&S->dw) * sizeof(float));
    wino_filter_job F = {.d = &S->dw, .w = n->layer->params[0]->value.data, .U = U};
    sp_parallel_for((size_t)S->O, S->wf && !J->delta ? wino_filter_fwd_range : wino_filter_range, &F);
    J->U = U;
    J->scratch = sp_tape_alloc(n->tape, S->slots * wino_slot_floats(S) * sizeof(float));
    sp_parallel_for((size_t)S->slots, wino_slots, J);
}

/* δ; its scratch (the transformed weights, the runs' tiles) goes back to the arena. */
static void wino_delta(sp_node *n, const sp_tensor *dy, float *dx, bool acc)
{
    const conv_saved *S = n->saved;
    sp_arena_mark mark = sp_arena_mark_get(&n->tape->arena);
    wino_job J = {.S = S, .delta = true, .in = dy->data, .inblk = S->yblk, .out = dx, .outblk = S->xblk, .acc = acc};
    wino_run(n, &J);
    sp_arena_release(&n->tape->arena, mark);
}

/* G by F(3×3, 2×2), in runs of sp_wino_b8_grad_chunk samples: per run one region over
 * the slots for the tiles (slot s: its share of the run's samples, its own blocked copy
 * of an NCHW sample) and one for the blocks of SP_WINO_B8_ROWS output channels (slot s:
 * its share of the blocks, its own block of M), each block's gradient added to dW. The
 * blocks and runs do not depend on the thread count: neither do the bits. Its scratch
 * goes back to the arena when it returns. */
typedef struct wino_grad_job {
    const conv_saved *S;
    const float *x, *dy;
    float *work, *tmp, *block, *dw;   /* tmp, block: per slot */
    int b0, n;                        /* the run: samples [b0, b0 + n) */
} wino_grad_job;

static void wino_grad_tiles(void *ctx, size_t begin, size_t end)
{
    const wino_grad_job *J = ctx;
    const conv_saved *S = J->S;
    size_t xs = (size_t)S->g.C * S->P, ys = (size_t)S->O * S->P;
    for (size_t u = begin; u < end; u++) {
        int lo = (int)((size_t)J->n * u / S->slots), hi = (int)((size_t)J->n * (u + 1) / S->slots);
        float *tmp = J->tmp + u * sp_wino_b8_tmp_floats(&S->dw);
        for (int s = lo; s < hi; s++)
            sp_wino_b8_grad_tiles(&S->dw, J->x + (J->b0 + s) * xs, S->xblk, J->dy + (J->b0 + s) * ys, S->yblk, s, J->n,
                                  J->work, tmp);
    }
}

static void wino_grad_blocks(void *ctx, size_t begin, size_t end)
{
    const wino_grad_job *J = ctx;
    const conv_saved *S = J->S;
    size_t nb = (size_t)(S->O + SP_WINO_B8_ROWS - 1) / SP_WINO_B8_ROWS;
    for (size_t u = begin; u < end; u++)
        for (size_t blk = nb * u / S->slots; blk < nb * (u + 1) / S->slots; blk++) {
            int k0 = (int)blk * SP_WINO_B8_ROWS, k1 = imin(k0 + SP_WINO_B8_ROWS, S->O);
            sp_wino_b8_grad_rows(&S->dw, J->n, k0, k1, J->work, J->block + u * sp_wino_b8_block_floats(&S->dw), J->dw);
        }
}

/* The fused form's G: WF_GROUPS fixed groups of samples, each summing its samples' products
 * in order into its own dU, the groups' dU added in order: the bits do not depend on the
 * thread count. */
#define WF_GROUPS 8

typedef struct wf_grad_job {
    const conv_saved *S;
    const float *x, *dy;
    float *dU, *scratch;   /* per group */
    int groups;
} wf_grad_job;

static void wf_grad_groups(void *ctx, size_t begin, size_t end)
{
    const wf_grad_job *J = ctx;
    const conv_saved *S = J->S;
    size_t xs = (size_t)S->g.C * S->P, ys = (size_t)S->O * S->P, nu = sp_wino_b8_u_floats(&S->dw);
    for (size_t g = begin; g < end; g++) {
        float *dU = J->dU + g * nu, *scratch = J->scratch + g * sp_wino_b8_fused_floats(&S->dw);
        memset(dU, 0, nu * sizeof(float));
        int lo = (int)((size_t)S->B * g / (size_t)J->groups), hi = (int)((size_t)S->B * (g + 1) / (size_t)J->groups);
        for (int b = lo; b < hi; b++)
            sp_wino_b8_grad_sample(&S->dw, J->x + b * xs, S->xblk, J->dy + b * ys, S->yblk, dU, scratch);
    }
}

static void wf_grad(sp_node *n, const sp_tensor *dy)
{
    const conv_saved *S = n->saved;
    size_t nu = sp_wino_b8_u_floats(&S->dw);
    wf_grad_job J = {.S = S, .x = sp_node_x(n)->data, .dy = dy->data, .groups = imin(WF_GROUPS, S->B)};
    J.dU = sp_tape_alloc(n->tape, (size_t)J.groups * nu * sizeof(float));
    J.scratch = sp_tape_alloc(n->tape, (size_t)J.groups * sp_wino_b8_fused_floats(&S->dw) * sizeof(float));
    sp_parallel_for((size_t)J.groups, wf_grad_groups, &J);
    for (int g = 1; g < J.groups; g++)
        for (size_t i = 0; i < nu; i++) J.dU[i] += J.dU[(size_t)g * nu + i];
    sp_wino_b8_grad_finish(&S->dw, J.dU, n->layer->params[0]->grad.data);
}

static void wino_grad(sp_node *n, const sp_tensor *dy)
{
    const conv_saved *S = n->saved;
    sp_arena_mark mark = sp_arena_mark_get(&n->tape->arena);
    if (S->wf) {
        wf_grad(n, dy);
        sp_arena_release(&n->tape->arena, mark);
        return;
    }
    int chunk = sp_wino_b8_grad_chunk(&S->dw);
    wino_grad_job J = {.S = S, .x = sp_node_x(n)->data, .dy = dy->data, .dw = n->layer->params[0]->grad.data};
    J.work = sp_tape_alloc(n->tape, sp_wino_b8_grad_floats(&S->dw) * sizeof(float));
    J.tmp = sp_tape_alloc(n->tape, S->slots * sp_wino_b8_tmp_floats(&S->dw) * sizeof(float));
    J.block = sp_tape_alloc(n->tape, S->slots * sp_wino_b8_block_floats(&S->dw) * sizeof(float));
    for (J.b0 = 0; J.b0 < S->B; J.b0 += chunk) {
        J.n = imin(chunk, S->B - J.b0);
        sp_parallel_for((size_t)S->slots, wino_grad_tiles, &J);
        sp_parallel_for((size_t)S->slots, wino_grad_blocks, &J);
    }
    sp_arena_release(&n->tape->arena, mark);
}

/* How this node's work is split: slots and samples per GEMM (fixed at the forward). */
static conv_saved *conv_plan(sp_node *n)
{
    conv_saved *S = sp_tape_alloc(n->tape, sizeof *S);
    atomic_init(&S->share, NULL);
    S->g = conv_geom(n);
    S->B = n->out.shape[0];
    S->O = L(n)->cout;
    S->K = S->g.C * S->g.k * S->g.k;
    S->P = S->g.Ho * S->g.Wo;
    S->slots = imin(sp_get_threads(), S->B);
    S->cs = imin((MIN_GEMM_COLS + S->P - 1) / S->P, (S->B + S->slots - 1) / S->slots);
    size_t fit = G_CHUNK_BYTES / ((size_t)S->K * S->P * sizeof(float));
    int per_chunk = fit < 1 ? 1 : fit > (size_t)S->B ? S->B : (int)fit;
    int chunks = (S->B + per_chunk - 1) / per_chunk;
    S->cg = (S->B + chunks - 1) / chunks;   /* equal chunks: none left nearly empty */
    return S;
}

bool sp_conv_delta_on_dnnl(int C, int blk)
{
    if (C >= DNNL_D_MIN_C) return true;
    int padded = blk > 0 ? (C + blk - 1) / blk * blk : 0;
    return blk > 0 && 3 * padded <= 4 * C;
}

static sp_dnnl_conv dnnl_shape(const conv_saved *S)
{
    return (sp_dnnl_conv){.B = S->B, .C = S->g.C, .H = S->g.H, .W = S->g.W, .O = S->O, .k = S->g.k,
                          .stride = S->g.stride, .pad = S->g.pad, .Ho = S->g.Ho, .Wo = S->g.Wo,
                          .xblk = S->xblk, .yblk = S->yblk};
}

/* t's values in NCHW: its own data, or a copy in the arena when t is blocked (the im2col
 * path's inputs; oneDNN takes the blocked layouts as they are). */
static const float *plain_of(sp_node *n, const sp_tensor *t)
{
    if (!t->blk) return t->data;
    float *p = sp_tape_alloc(n->tape, t->numel * sizeof(float));
    sp_tensor_to_plain(t, p);
    return p;
}

/* The consumer's forward on samples [b, e) (an sp_dnnl_side over the batch). */
static void next_samples(void *ctx, size_t b, size_t e)
{
    sp_node *next = ctx;
    next->kern->forward_samples(next, (int)b, (int)e);
}

static void conv_forward_with(sp_node *n, bool relu, sp_node *next)
{
    const sp_tensor *x = sp_node_x(n);
    conv_saved *S = conv_plan(n);
    n->saved = S;
    /* the layouts: x's as it comes; y blocked where the model asks (sp_tape.out_blocked)
     * and oneDNN's block divides the channels */
    int blk = n->tape->out_blocked ? sp_dnnl_block() : 0;
    S->xblk = x->blk;
    S->yblk = blk && S->O % blk == 0 ? blk : 0;
    n->out.blk = S->yblk;
    /* few input channels stay off oneDNN only where its block does not divide the output
     * channels (DNNL_MIN_C); where it does, the output may stay blocked, and the choice
     * does not depend on whether it does, so a blocked step keeps the NCHW step's bits */
    int dblk = sp_dnnl_block();
    S->dnnl = sp_dnnl_conv_on() && (S->g.C >= DNNL_MIN_C || (dblk && S->O % dblk == 0));
    S->dnnl_d = S->dnnl && sp_conv_delta_on_dnnl(S->g.C, sp_dnnl_block());
    /* the forward and G on the project's own direct kernels where they run (AVX2) and G
     * takes private per-thread copies, not under SCANPROP_CONV=gemm: up to 3 input
     * channels where oneDNN does not take them; 4 to 16 channels into 16·n outputs, 5×5
     * (LeNet-5's conv2), in place of oneDNN, which pads 6 channels to its block of 8 and
     * reorders both sides of every call (with its δ: direct_delta) */
    S->direct = sp_dnnl_conv_on() && (size_t)S->O * S->K <= G_PRIVATE_MAX_FLOATS &&
                sp_conv_direct_on(S->g.C, S->O, S->g.k, S->g.pad, S->g.stride) && (S->g.C >= DNNL_MIN_C || !S->dnnl);
    if (S->direct) S->dnnl = S->dnnl_d = false;
    S->dd = (sp_conv_direct){.C = S->g.C, .H = S->g.H, .W = S->g.W, .O = S->O, .k = S->g.k, .pad = S->g.pad,
                             .Ho = S->g.Ho, .Wo = S->g.Wo};
    /* 3×3 stride-1 convolutions on the project's AVX2 kernels where they run, in either
     * layout, not under SCANPROP_CONV=gemm: 32 to 64 channels in sixteens on Winograd
     * F(2×2, 3×3) in its fused form (ResNet-20's second and third stages), other 16·n
     * channels on the blocked direct kernel where G takes private per-thread copies (its
     * first stage: 16 channels at 32×32, where the transforms cost what the products
     * save), larger ones of ≥ 64 channels on the chunked Winograd (VGG-11's conv2 to
     * conv6); both Winograd forms off under SCANPROP_CONV_ALGO=direct */
    bool own = S->dnnl && (S->xblk | S->yblk) <= 8;
    S->b8 = own && (size_t)S->O * S->K <= G_PRIVATE_MAX_FLOATS &&
            sp_conv3_b8_on(S->g.C, S->O, S->g.H, S->g.W, S->g.k, S->g.stride, S->g.pad);
    S->wf = own && sp_dnnl_conv_algo() != SP_DNNL_DIRECT &&
            sp_wino_b8_fused_on(S->g.C, S->O, S->g.H, S->g.W, S->g.k, S->g.stride, S->g.pad);
    if (S->wf) S->b8 = false;
    S->wino = S->wf || (own && !S->b8 && sp_dnnl_conv_algo() != SP_DNNL_DIRECT &&
                        sp_wino_b8_on(S->g.C, S->O, S->g.H, S->g.W, S->g.k, S->g.stride, S->g.pad));
    S->dw = (sp_wino_b8){.C = S->g.C, .O = S->O, .H = S->g.H, .W = S->g.W};
    S->d8 = (sp_conv3_b8){.C = S->g.C, .O = S->O, .H = S->g.H, .W = S->g.W};
    if (S->wino || S->b8) S->dnnl = S->dnnl_d = S->direct = false;
    if (next && S->yblk)
        sp_fail("conv2d %s: a blocked output with the next op's forward folded in (expected NCHW)", n->layer->name);
    /* the scratch below (im2col columns; oneDNN's job, scratchpads and blocked copies of
     * the input and output) is dead when the forward returns: handed back to the arena
     * for the next op (ResNet-20 b64: the larger part of a step's arena otherwise) */
    sp_arena_mark mark = sp_arena_mark_get(&n->tape->arena);
    if (S->b8) {
        b8_job J = {.S = S, .x = x->data, .bias = bias_of(n), .y = n->out.data, .relu = relu, .next = next};
        J.wf = b8_packed(n, false);
        b8_run(n, &J);
    } else if (S->wino) {
        wino_job J = {.S = S, .in = x->data, .inblk = S->xblk, .bias = bias_of(n), .relu = relu, .out = n->out.data,
                      .outblk = S->yblk, .next = next};
        wino_run(n, &J);
    } else if (S->dnnl) {
        sp_dnnl_conv c = dnnl_shape(S);
        const float *w = n->layer->params[0]->value.data;
        sp_dnnl_side tail = {.fn = next_samples, .ctx = next, .n = (size_t)S->B};
        if (relu) sp_dnnl_conv_forward_relu(n->tape, &c, x->data, w, bias_of(n), n->out.data, next ? &tail : NULL);
        else sp_dnnl_conv_forward(n->tape, &c, x->data, w, bias_of(n), n->out.data);
    } else {   /* im2col in NCHW; a blocked x or y through a copy */
        size_t cols = (size_t)S->slots * S->cs * S->P;
        fwd_job J = {.S = S, .x = plain_of(n, x), .W = n->layer->params[0]->value.data,
                     .bias = bias_of(n), .y = n->out.data, .relu = relu, .next = next};
        if (S->yblk) J.y = sp_tape_alloc(n->tape, n->out.numel * sizeof(float));
        if (S->direct) J.xp = sp_tape_alloc(n->tape, S->slots * sp_conv_direct_floats(&S->dd) * sizeof(float));
        else {
            J.col = sp_tape_alloc(n->tape, (size_t)S->K * cols * sizeof(float));
            J.rows = sp_tape_alloc(n->tape, (size_t)S->O * cols * sizeof(float));
        }
        sp_parallel_for((size_t)S->slots, forward_slots, &J);
        if (S->yblk) sp_tensor_from_plain(&n->out, J.y, n->out.data);
    }
    sp_arena_release(&n->tape->arena, mark);
}

static void conv_forward(sp_node *n) { conv_forward_with(n, false, NULL); }

/* The forward with the next ReLU folded in (sp_kernels.forward_relu): each slot applies
 * it to its samples right after their GEMM or oneDNN call, while they are in cache, in
 * the same parallel region; then, with next (a max pool after that ReLU), next's forward
 * on the same samples (per GEMM on the im2col path, per thread's slots on oneDNN's). */
static void conv_forward_relu(sp_node *n, sp_node *next) { conv_forward_with(n, true, next); }

/* ---- δ ---------------------------------------------------------------------------------- */

/* Where δ and G of this node share dy's reorder into oneDNN's layout though called apart
 * (sp_dnnl_dy_share): only on a tape whose scratch lives until the step's end
 * (sp_tape.scratch_lives_step), so that the first one's copy outlives its call. Made by
 * the first of the two to ask, from its own lane's tape; NULL elsewhere. */
static sp_dnnl_dy_share *dy_share(const sp_node *n)
{
    if (!n->tape->scratch_lives_step) return NULL;
    conv_saved *S = n->saved;
    sp_dnnl_dy_share *sh = atomic_load(&S->share);
    if (sh) return sh;
    sp_dnnl_dy_share *mine = sp_dnnl_dy_share_new(n->tape);
    n->tape->scratch_kept = true;   /* the share lives in this call's scratch */
    return atomic_compare_exchange_strong(&S->share, &sh, mine) ? mine : sh;
}

typedef struct delta_job {
    const conv_saved *S;
    const float *W, *dy;
    float *dx, *dcol, *rows;
} delta_job;

static void delta_slots(void *ctx, size_t begin, size_t end)
{
    const delta_job *J = ctx;
    const conv_saved *S = J->S;
    size_t cols = (size_t)S->cs * S->P;
    for (size_t s = begin; s < end; s++) {
        float *dcol = J->dcol + s * S->K * cols, *rows = J->rows + s * S->O * cols;
        int lo, hi;
        slot_samples(S, s, &lo, &hi);
        for (int b0 = lo; b0 < hi; b0 += S->cs) {
            int nb = imin(S->cs, hi - b0), N = nb * S->P;
            const float *dyt = J->dy + (size_t)b0 * S->O * S->P;   /* one sample: dy[b0] is [O, P] */
            if (nb > 1) {
                gather(S, J->dy, rows, (size_t)N, b0, nb);
                dyt = rows;
            }
            sp_gemm_serial(true, false, S->K, N, S->O, 1.0f, J->W, S->K, dyt, N, 0.0f, dcol, N);
            sp_col2im(&S->g, dcol, b0, b0 + nb, J->dx);
        }
    }
}

/* δ on the project's own 3×3 kernels, into dx or added to it (acc); false: not theirs. */
static bool own_delta(sp_node *n, const sp_tensor *dy, float *dx, bool acc)
{
    const conv_saved *S = n->saved;
    if (S->b8) b8_backward(n, dy, dx, acc, false);
    else if (S->wino) wino_delta(n, dy, dx, acc);
    return S->b8 || S->wino;
}

/* δ on the direct kernel's wide form (sp_conv_direct_has_delta), one region, each slot's
 * samples on its own scratch; into dx or added to it (acc). */
typedef struct ddelta_job {
    const conv_saved *S;
    const float *W, *dy;
    float *dx, *xp;
    bool acc;
} ddelta_job;

static void direct_delta_slots(void *ctx, size_t begin, size_t end)
{
    const ddelta_job *J = ctx;
    const conv_saved *S = J->S;
    size_t xs = (size_t)S->g.C * S->g.H * S->g.W, ys = (size_t)S->O * S->P;
    for (size_t s = begin; s < end; s++) {
        float *xp = J->xp + s * sp_conv_direct_floats(&S->dd);
        sp_conv_direct_prepare(&S->dd, NULL, xp);
        int lo, hi;
        slot_samples(S, s, &lo, &hi);
        for (int b = lo; b < hi; b++) sp_conv_direct_delta(&S->dd, J->W, J->dy + b * ys, J->dx + b * xs, J->acc, xp);
    }
}

static bool direct_delta(sp_node *n, const sp_tensor *dy, sp_tensor *dx, bool acc)
{
    const conv_saved *S = n->saved;
    if (!S->direct || !sp_conv_direct_has_delta(&S->dd) || (acc && dx->blk)) return false;
    ddelta_job J = {.S = S, .W = n->layer->params[0]->value.data, .dy = plain_of(n, dy), .dx = dx->data, .acc = acc};
    if (dx->blk) J.dx = sp_tape_alloc(n->tape, dx->numel * sizeof(float));
    J.xp = sp_tape_alloc(n->tape, S->slots * sp_conv_direct_floats(&S->dd) * sizeof(float));
    sp_parallel_for((size_t)S->slots, direct_delta_slots, &J);
    if (dx->blk) sp_tensor_from_plain(dx, J.dx, dx->data);
    return true;
}

static void conv_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    const conv_saved *S = n->saved;
    if (own_delta(n, dy, dx->data, false) || direct_delta(n, dy, dx, false)) return;
    if (S->dnnl_d) {
        sp_dnnl_conv c = dnnl_shape(S);
        sp_dnnl_conv_backward_data_shared(n->tape, &c, n->layer->params[0]->value.data, dy->data, dx->data, false,
                                          S->P > DNNL_G_MIN_P ? dy_share(n) : NULL);
        return;
    }
    size_t cols = (size_t)S->slots * S->cs * S->P;
    delta_job J = {.S = S, .W = n->layer->params[0]->value.data, .dy = plain_of(n, dy), .dx = dx->data};
    if (dx->blk) J.dx = sp_tape_alloc(n->tape, dx->numel * sizeof(float));
    J.dcol = sp_tape_alloc(n->tape, (size_t)S->K * cols * sizeof(float));
    J.rows = sp_tape_alloc(n->tape, (size_t)S->O * cols * sizeof(float));
    sp_parallel_for((size_t)S->slots, delta_slots, &J);
    if (dx->blk) sp_tensor_from_plain(dx, J.dx, dx->data);
}

/* dx += δ, for an input that fans out: on oneDNN the add rides on each slot's reorder out
 * of the blocked layout; the im2col path writes a scratch and adds it. */
static void conv_backward_input_acc(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    const conv_saved *S = n->saved;
    if (own_delta(n, dy, dx->data, true) || direct_delta(n, dy, dx, true)) return;
    if (S->dnnl_d) {
        sp_dnnl_conv c = dnnl_shape(S);
        sp_dnnl_conv_backward_data_shared(n->tape, &c, n->layer->params[0]->value.data, dy->data, dx->data, true,
                                          S->P > DNNL_G_MIN_P ? dy_share(n) : NULL);
        return;
    }
    sp_tensor tmp = sp_tape_tensor_like(n->tape, dx);
    conv_backward_input(n, i, dy, &tmp);
    sp_accumulate(dx, &tmp);
}

/* ---- G ----------------------------------------------------------------------------------- */

typedef struct bias_job {
    const conv_saved *S;
    const float *dy;
    float *db;
} bias_job;

/* A blocked dy (y's layout, S->yblk = k): unit u is the channel block u, its k channels
 * summed side by side in the plain loop's order per channel (eight running sums over
 * p's blocks of eight, the rest, then the eight), so the bits are those of NCHW. */
static void bias_grad_blocks(const bias_job *J, size_t begin, size_t end)
{
    int P = J->S->P, k = J->S->yblk, Ob = J->S->O / k;
    for (size_t u = begin; u < end; u++) {
        double sum[16] = {0};
        for (int b = 0; b < J->S->B; b++) {
            const float *d = J->dy + ((size_t)b * Ob + u) * P * k;
            float lane[8][16] = {{0}};
            int p = 0;
            for (; p + 8 <= P; p += 8)
                for (int t = 0; t < 8; t++)
                    for (int c = 0; c < k; c++) lane[t][c] += d[(size_t)(p + t) * k + c];
            for (; p < P; p++)
                for (int c = 0; c < k; c++) sum[c] += d[(size_t)p * k + c];
            for (int t = 0; t < 8; t++)
                for (int c = 0; c < k; c++) sum[c] += lane[t][c];
        }
        for (int c = 0; c < k; c++) J->db[u * k + c] += (float)sum[c];
    }
}

/* Units of the bias gradient's work: output channels, or channel blocks of a blocked dy. */
static size_t bias_units(const conv_saved *S) { return (size_t)(S->yblk ? S->O / S->yblk : S->O); }

static void bias_grad_range(void *ctx, size_t begin, size_t end)
{
    const bias_job *J = ctx;
    int O = J->S->O, P = J->S->P;
    if (J->S->yblk) {
        bias_grad_blocks(J, begin, end);
        return;
    }
    for (size_t o = begin; o < end; o++) {
        double sum = 0.0;   /* fixed order over (b, p): independent of the partition */
        for (int b = 0; b < J->S->B; b++) {
            const float *d = J->dy + ((size_t)b * O + o) * P;
            float lane[8] = {0};   /* eight running sums: vectorised at -O2 */
            int p = 0;
            for (; p + 8 <= P; p += 8)
                for (int t = 0; t < 8; t++) lane[t] += d[p + t];
            for (; p < P; p++) sum += d[p];
            for (int t = 0; t < 8; t++) sum += lane[t];
        }
        J->db[o] += (float)sum;
    }
}

/* δ (into dx, added with acc), G (with grad) or both, and the bias gradient with G. */
static void b8_backward(sp_node *n, const sp_tensor *dy, float *dx, bool acc, bool grad)
{
    const conv_saved *S = n->saved;
    bias_job B = {.S = S, .dy = dy->data, .db = grad && n->layer->nparams > 1 ? n->layer->params[1]->grad.data : NULL};
    sp_dnnl_side side = {.fn = bias_grad_range, .ctx = &B, .n = bias_units(S)};
    b8_job J = {.S = S, .x = sp_node_x(n)->data, .dy = dy->data, .dx = dx, .acc = acc, .side = B.db ? &side : NULL};
    if (dx) J.wd = b8_packed(n, true);
    J.grad = grad;
    b8_run(n, &J);
}

/* Small weights: each thread sums G over its own samples into a private copy, then
 * the copies are added in slot order. Larger ones: one OpenBLAS-threaded GEMM per
 * chunk of samples, as private copies would cost more to add up than they save. */
typedef struct grad_job {
    const conv_saved *S;
    const float *x, *dy;
    float *col, *rows, *part;   /* per slot: [K, cs·P], [O, cs·P], [O, K] */
    float *xp;                  /* direct: per slot, sp_conv_direct_floats  */
    const sp_dnnl_side *side;   /* the bias gradient, in the same region, or NULL */
} grad_job;

static void grad_slots(void *ctx, size_t begin, size_t end)
{
    const grad_job *J = ctx;
    const conv_saved *S = J->S;
    size_t cols = (size_t)S->cs * S->P;
    for (size_t s = begin; s < end; s++) {
        float *col = J->col + s * S->K * cols, *rows = J->rows + s * S->O * cols;
        float *part = J->part + s * (size_t)S->O * S->K;
        memset(part, 0, (size_t)S->O * S->K * sizeof(float));
        int lo, hi;
        slot_samples(S, s, &lo, &hi);
        if (S->direct) {
            float *xp = J->xp + s * sp_conv_direct_floats(&S->dd);
            sp_conv_direct_prepare(&S->dd, NULL, xp);
            size_t xs = (size_t)S->g.C * S->g.H * S->g.W, ys = (size_t)S->O * S->P;
            for (int b = lo; b < hi; b++) sp_conv_direct_grad(&S->dd, J->x + b * xs, J->dy + b * ys, part, xp);
            continue;
        }
        for (int b0 = lo; b0 < hi; b0 += S->cs) {
            int nb = imin(S->cs, hi - b0), N = nb * S->P;
            sp_im2col(&S->g, J->x, b0, b0 + nb, col);
            const float *dyt = J->dy + (size_t)b0 * S->O * S->P;
            if (nb > 1) {
                gather(S, J->dy, rows, (size_t)N, b0, nb);
                dyt = rows;
            }
            sp_gemm_serial(false, true, S->O, S->K, N, 1.0f, dyt, N, col, N, 1.0f, part, S->K);
        }
    }
    const sp_dnnl_side *d = J->side;   /* this chunk's share of the side work, as dnnl.c's */
    if (!d) return;
    size_t ob = d->n * begin / (size_t)S->slots, oe = d->n * end / (size_t)S->slots;
    if (ob < oe) d->fn(d->ctx, ob, oe);
}

static void grad_private(sp_node *n, const sp_tensor *dy, const sp_dnnl_side *side)
{
    const conv_saved *S = n->saved;
    size_t cols = (size_t)S->slots * S->cs * S->P, nw = (size_t)S->O * S->K;
    grad_job J = {.S = S, .x = plain_of(n, sp_node_x(n)), .dy = plain_of(n, dy), .side = side};
    if (S->direct) J.xp = sp_tape_alloc(n->tape, S->slots * sp_conv_direct_floats(&S->dd) * sizeof(float));
    else {
        J.col = sp_tape_alloc(n->tape, (size_t)S->K * cols * sizeof(float));
        J.rows = sp_tape_alloc(n->tape, (size_t)S->O * cols * sizeof(float));
    }
    J.part = sp_tape_alloc(n->tape, (size_t)S->slots * nw * sizeof(float));
    sp_parallel_for((size_t)S->slots, grad_slots, &J);
    float *dW = n->layer->params[0]->grad.data;
    for (int s = 0; s < S->slots; s++)
        for (size_t i = 0; i < nw; i++) dW[i] += J.part[(size_t)s * nw + i];
}

static void grad_batched(sp_node *n, const sp_tensor *dy)
{
    const conv_saved *S = n->saved;
    size_t cols = (size_t)S->cg * S->P;
    float *col = sp_tape_alloc(n->tape, (size_t)S->K * cols * sizeof(float));
    float *rows = sp_tape_alloc(n->tape, (size_t)S->O * cols * sizeof(float));
    const float *x = plain_of(n, sp_node_x(n)), *dyp = plain_of(n, dy);
    for (int b0 = 0; b0 < S->B; b0 += S->cg) {
        int nb = imin(S->cg, S->B - b0), N = nb * S->P;
        sp_im2col(&S->g, x, b0, b0 + nb, col);
        gather_job gj = {.S = S, .dy = dyp, .rows = rows, .b0 = b0, .N = N};
        sp_parallel_for((size_t)nb, gather_range, &gj);
        sp_gemm(false, true, S->O, S->K, N, 1.0f, rows, N, col, N, 1.0f, n->layer->params[0]->grad.data, S->K);
    }
}

/* G: dW, and db in the same parallel region where dW takes one (its sums per output
 * channel do not depend on the split, so the bits are those of a region of its own). */
static void conv_backward_params(sp_node *n, const sp_tensor *dy)
{
    const conv_saved *S = n->saved;
    if (S->b8) {
        b8_backward(n, dy, NULL, false, true);
        return;
    }
    bias_job B = {.S = S, .dy = dy->data, .db = n->layer->nparams > 1 ? n->layer->params[1]->grad.data : NULL};
    if (S->wino) {
        wino_grad(n, dy);
        if (B.db) sp_parallel_for(bias_units(S), bias_grad_range, &B);
        return;
    }
    sp_dnnl_side side = {.fn = bias_grad_range, .ctx = &B, .n = bias_units(S)}, *bias = B.db ? &side : NULL;
    if (S->dnnl && S->P > DNNL_G_MIN_P) {
        sp_dnnl_conv c = dnnl_shape(S);
        sp_dnnl_conv_backward_weights_shared(n->tape, &c, sp_node_x(n)->data, dy->data,
                                             n->layer->params[0]->grad.data, bias, S->dnnl_d ? dy_share(n) : NULL);
        return;
    }
    if ((size_t)S->O * S->K <= G_PRIVATE_MAX_FLOATS) {
        grad_private(n, dy, bias);
        return;
    }
    grad_batched(n, dy);
    if (bias) sp_parallel_for(bias_units(S), bias_grad_range, &B);
}

/* G on oneDNN with δ on im2col (few input channels): the thread that runs G's slots
 * [b, e) then runs δ's same slots and its share of the bias sums, one region for all. */
typedef struct split_job {
    delta_job *D;
    bias_job *B;
} split_job;

static void split_side(void *ctx, size_t begin, size_t end)
{
    const split_job *J = ctx;
    const conv_saved *S = J->D->S;
    delta_slots(J->D, begin, end);
    if (!J->B->db) return;
    size_t ob = (size_t)S->O * begin / (size_t)S->slots, oe = (size_t)S->O * end / (size_t)S->slots;
    if (ob < oe) bias_grad_range(J->B, ob, oe);
}

/* G and δ in one call (the linear engine's path): on oneDNN each slot's dy goes into the
 * blocked layout once for both primitives instead of once for each, or, where δ runs
 * im2col, each slot's δ follows its G in the same region; bitwise the two calls.
 * Elsewhere the two calls. */
static void conv_backward_input_params(sp_node *n, const sp_tensor *dy, sp_tensor *dx, bool acc)
{
    const conv_saved *S = n->saved;
    if (S->b8) {   /* one region, δ and G on one padded copy of each sample's dy */
        b8_backward(n, dy, dx->data, acc, true);
        return;
    }
    if (S->wino) {   /* G, then δ */
        conv_backward_params(n, dy);
        wino_delta(n, dy, dx->data, acc);
        return;
    }
    if (S->dnnl && !S->dnnl_d && S->P > DNNL_G_MIN_P && !acc && !S->xblk && !S->yblk) {
        size_t cols = (size_t)S->slots * S->cs * S->P;
        delta_job D = {.S = S, .W = n->layer->params[0]->value.data, .dy = dy->data, .dx = dx->data};
        D.dcol = sp_tape_alloc(n->tape, (size_t)S->K * cols * sizeof(float));
        D.rows = sp_tape_alloc(n->tape, (size_t)S->O * cols * sizeof(float));
        bias_job B = {.S = S, .dy = dy->data, .db = n->layer->nparams > 1 ? n->layer->params[1]->grad.data : NULL};
        split_job J = {.D = &D, .B = &B};
        sp_dnnl_side side = {.fn = split_side, .ctx = &J, .n = (size_t)S->slots};
        sp_dnnl_conv c = dnnl_shape(S);
        sp_dnnl_conv_backward_weights(n->tape, &c, sp_node_x(n)->data, dy->data, n->layer->params[0]->grad.data,
                                      &side);
        return;
    }
    if (!(S->dnnl_d && S->P > DNNL_G_MIN_P)) {
        conv_backward_params(n, dy);
        (acc ? conv_backward_input_acc : conv_backward_input)(n, 0, dy, dx);
        return;
    }
    sp_dnnl_conv c = dnnl_shape(S);
    bias_job B = {.S = S, .dy = dy->data, .db = n->layer->nparams > 1 ? n->layer->params[1]->grad.data : NULL};
    sp_dnnl_side side = {.fn = bias_grad_range, .ctx = &B, .n = bias_units(S)};
    sp_dnnl_conv_backward(n->tape, &c, sp_node_x(n)->data, n->layer->params[0]->value.data, dy->data, dx->data, acc,
                          n->layer->params[0]->grad.data, B.db ? &side : NULL);
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

static void conv_jt_pattern(const sp_node *n, int i, sp_csr *jt)
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
static void conv_jt_values(const sp_node *n, int i, int b, sp_csr *jt)
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
    /* the forward's scratch (one column and one row buffer per thread), counted as
     * saved although conv_forward hands it back: an upper bound that the plans and
     * schedules built on this cost rely on */
    double slots = fmin(sp_get_threads(), B), cs = fmin(ceil(MIN_GEMM_COLS / P), ceil(B / slots));
    return (sp_cost){.fwd_flops = gemm,
                     .bwd_input_flops = gemm,
                     .bwd_params_flops = gemm,
                     .out_bytes = 4 * B * O * P,
                     .saved_bytes = 4 * (K + O) * slots * cs * P,
                     .param_bytes = 4 * (O * K + (n->layer->nparams > 1 ? O : 0))};   /* bias-free: none */
}

static void conv_init(sp_layer *l, sp_rng *r)
{
    /* PyTorch: kaiming_uniform_(a=√5) on W and U(±1/√fan_in) on b, fan_in = C·k·k. */
    const conv_layer *c = (const conv_layer *)l;
    float bound = 1.0f / sqrtf((float)(c->cin * c->k * c->k));
    sp_fill_uniform(&l->params[0]->value, r, bound);
    if (l->nparams > 1) sp_fill_uniform(&l->params[1]->value, r, bound);
}

static void conv_free(sp_layer *l) { free(((conv_layer *)l)->zero_bias); }

/* Any input layout; a blocked output where asked (the bias's G reads a blocked dy as it
 * is: bias_grad_blocks). */
static int conv_blocked(const sp_layer *l) { return SP_BLK_MAKES; }

const sp_opdef sp_op_conv2d = {
    .out_unread = true,
    .name = "conv2d",
    .infer = conv_infer,
    .jt_pattern = conv_jt_pattern,
    .cost = conv_cost,
    .init_params = conv_init,
    .free_layer = conv_free,
    .blocked = conv_blocked,
    .cpu = {
        .forward = conv_forward,
        .forward_relu = conv_forward_relu,
        .backward_input = conv_backward_input,
        .backward_input_acc = conv_backward_input_acc,
        .backward_params = conv_backward_params,
        .backward_input_params = conv_backward_input_params,
        .jt_values = conv_jt_values,
    },
};

static sp_layer *conv_new(const char *name, int cin, int cout, int k, int stride, int pad, bool bias)
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
    if (bias) sp_param_new(&l->base, "bias", 1, (int[]){cout});
    else l->zero_bias = sp_xcalloc((size_t)cout, sizeof(float));
    return &l->base;
}

sp_layer *sp_conv2d(const char *name, int cin, int cout, int k, int stride, int pad)
{
    SP_GUARD(NULL);
    if (!name) sp_fail("sp_conv2d: argument 'name' is NULL");
    return conv_new(name, cin, cout, k, stride, pad, true);
}

sp_layer *sp_conv2d_nobias(const char *name, int cin, int cout, int k, int stride, int pad)
{
    SP_GUARD(NULL);
    if (!name) sp_fail("sp_conv2d_nobias: argument 'name' is NULL");
    return conv_new(name, cin, cout, k, stride, pad, false);
}
