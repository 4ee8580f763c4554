/* batchnorm2d.c — batch normalisation over (B, H, W) per channel, PyTorch's
 * nn.BatchNorm2d(C, eps=1e-5, momentum=0.1) with affine weight γ and bias β.
 *   training: μ_c, σ²_c = the batch's mean and biased variance over N = B·H·W values,
 *             x̂ = (x − μ)/√(σ² + eps), y = γ·x̂ + β; the running statistics move by
 *             momentum: rm ← (1−m)·rm + m·μ, rv ← (1−m)·rv + m·σ²·N/(N−1) (unbiased),
 *             and num_batches_tracked counts the batches.
 *   eval:     y = γ·(x − rm)/√(rv + eps) + β.
 *   δ (training): dx = γ/(N·√(σ²+eps)) · (N·dy − Σdy − x̂·Σ(dy·x̂))   (sums per channel)
 *   δ (eval):     dx = dy·γ/√(rv + eps)
 *   G: dγ += Σ dy·x̂, dβ += Σ dy.
 *   Jᵀ: in eval mode diagonal, γ_c/√(rv_c + eps); in training mode the batch statistics
 *   couple the samples, so no per-sample Jᵀ exists (jt_exists is false; bppsa then
 *   ends a chain segment here and sends δ as a product).
 * Parameters weight, bias; buffers running_mean, running_var, num_batches_tracked (a
 * float of shape [1] here, an int64 scalar in PyTorch, whose load_state_dict accepts [1]). Init: γ = 1, β = 0,
 * rm = 0, rv = 1. Sums per channel in float64, one channel per task: bits do not
 * depend on the thread count. Each sum runs in SP_BN_LANES float64 partial sums (lane j
 * takes the elements p ≡ j mod SP_BN_LANES of every sample's plane) added up in a fixed
 * tree at the end: independent lanes let the compiler vectorise the loop, which a single
 * running float64 sum (one add's latency per element) does not allow. The order is fixed
 * by the shape alone, so the bits still depend on neither the thread count nor the engine.
 *
 * δ and G share Σdy and Σdy·x̂: backward_input_params computes them once for both (the
 * linear engine's path), with the bits of the two separate calls.
 *
 * batchnorm2d_relu is the same layer followed by ReLU, y = max(γ·x̂ + β, 0), in one op
 * (ResNet's bn → relu): the forward writes the clamped y in its normalise pass, and the
 * backward masks dy by [γ·x̂ + β > 0] as it reads it, recomputed from x̂ and the γ, β the
 * forward used (saved), so neither the unclamped output nor a separate ReLU pass over
 * memory is needed. The floats are those of batchnorm2d then relu (ISO C: no FMA
 * contraction, the mask's γ·x̂ + β rounds as the forward's did): same bits. Eval mode
 * masks by [y > 0]. Jᵀ (eval): diag(γ_c/√(rv_c + eps)·[y > 0]). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "core/device.h"
#include "core/kernels/csr_ops.h"
#include "core/kernels/simd.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/tape.h"
#include "layers/batchnorm2d_internal.h"
#include "layers/layers.h"
#include "core/guard.h"

#define BN(n) ((const bn_layer *)(n)->layer)

static void bn_infer(sp_node *n, const sp_tensor *x)
{
    char buf[64];
    if (x->ndim != 4 || x->shape[1] != BN(n)->C)
        sp_fail("batchnorm2d %s: input %s, expected [B, %d, H, W]", n->layer->name, sp_shape_str(x, buf, sizeof buf),
                BN(n)->C);
    if (!n->layer->eval && x->shape[0] * x->shape[2] * x->shape[3] < 2)
        sp_fail("batchnorm2d %s: input %s has one value per channel; training mode needs more (PyTorch refuses too)",
                n->layer->name, sp_shape_str(x, buf, sizeof buf));
    n->out = sp_tensor_view(NULL, 4, x->shape);
}

#define SP_BN_LANES 8

/* The lanes' total in a fixed tree order. */
static double lanes_total(const double *a)
{
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* The helpers below hold their lanes in named locals while they loop: with arrays GCC
 * vectorised the 8-lane inner loop and kept the lanes in memory (a store and a reload
 * per step); eight independent scalars it keeps in registers and pairs up by SLP. */

/* acc[j] += x[p] for p ≡ j (mod SP_BN_LANES), p < P. */
static void lanes_sum(const float *restrict x, size_t P, double *restrict acc)
{
    double a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3], a4 = acc[4], a5 = acc[5], a6 = acc[6], a7 = acc[7];
    size_t p = 0;
    for (; p + SP_BN_LANES <= P; p += SP_BN_LANES) {
        const float *v = x + p;
        a0 += (double)v[0], a1 += (double)v[1], a2 += (double)v[2], a3 += (double)v[3];
        a4 += (double)v[4], a5 += (double)v[5], a6 += (double)v[6], a7 += (double)v[7];
    }
    acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3, acc[4] = a4, acc[5] = a5, acc[6] = a6, acc[7] = a7;
    for (int j = 0; p < P; p++, j++) acc[j] += (double)x[p];
}

/* acc[j] += (x[p] − mu)² for p ≡ j (mod SP_BN_LANES), p < P. */
static void lanes_sqdev(const float *restrict x, size_t P, double mu, double *restrict acc)
{
    double a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3], a4 = acc[4], a5 = acc[5], a6 = acc[6], a7 = acc[7];
    size_t p = 0;
#define SQ(k) (((double)v[k] - mu) * ((double)v[k] - mu))
    for (; p + SP_BN_LANES <= P; p += SP_BN_LANES) {
        const float *v = x + p;
        a0 += SQ(0), a1 += SQ(1), a2 += SQ(2), a3 += SQ(3), a4 += SQ(4), a5 += SQ(5), a6 += SQ(6), a7 += SQ(7);
    }
#undef SQ
    acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3, acc[4] = a4, acc[5] = a5, acc[6] = a6, acc[7] = a7;
    for (int j = 0; p < P; p++, j++) {
        double d = (double)x[p] - mu;
        acc[j] += d * d;
    }
}

/* The fused op's dy, masked by ReLU's [g·x̂ + be > 0] with x̂ = (x − mean)·inv recomputed
 * in float as the forward rounded it (what relu's δ wrote before batch norm read it),
 * into m: a plain select loop, which GCC turns into vector compares and blends (inside
 * the lane loops it becomes a branch per element, mispredicted on half of them). The
 * passes below go through it in chunks. */
#define BN_CHUNK 512   /* a multiple of SP_BN_LANES: lane p mod 8 is kept across chunks */
static void masked_dy(const float *restrict dy, const float *restrict x, float mean, float inv, size_t n, float g,
                      float be, float *restrict m)
{
    for (size_t p = 0; p < n; p++) {
        float d = dy[p];   /* read unconditionally: a vector blend, as relu.c */
        m[p] = g * ((x[p] - mean) * inv) + be > 0.0f ? d : 0.0f;
    }
}

/* a[j] += dy[p], b[j] += dy[p]·x̂[p] for p ≡ j (mod SP_BN_LANES), p < P, with x̂[p] =
 * (x[p] − mean)·inv recomputed in float exactly as the forward rounded it. */
static void lanes_dot(const float *restrict dy, const float *restrict x, float mean, float inv, size_t P,
                      double *restrict a, double *restrict b)
{
    double a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3], a4 = a[4], a5 = a[5], a6 = a[6], a7 = a[7];
    double b0 = b[0], b1 = b[1], b2 = b[2], b3 = b[3], b4 = b[4], b5 = b[5], b6 = b[6], b7 = b[7];
    size_t p = 0;
#define DX(k) ((double)d[k] * (double)((h[k] - mean) * inv))
    for (; p + SP_BN_LANES <= P; p += SP_BN_LANES) {
        const float *d = dy + p, *h = x + p;
        a0 += (double)d[0], a1 += (double)d[1], a2 += (double)d[2], a3 += (double)d[3];
        a4 += (double)d[4], a5 += (double)d[5], a6 += (double)d[6], a7 += (double)d[7];
        b0 += DX(0), b1 += DX(1), b2 += DX(2), b3 += DX(3), b4 += DX(4), b5 += DX(5), b6 += DX(6), b7 += DX(7);
    }
#undef DX
    a[0] = a0, a[1] = a1, a[2] = a2, a[3] = a3, a[4] = a4, a[5] = a5, a[6] = a6, a[7] = a7;
    b[0] = b0, b[1] = b1, b[2] = b2, b[3] = b3, b[4] = b4, b[5] = b5, b[6] = b6, b[7] = b7;
    for (int j = 0; p < P; p++, j++) {
        a[j] += (double)dy[p];
        b[j] += (double)dy[p] * (double)((x[p] - mean) * inv);
    }
}

/* lanes_dot of the masked dy, chunk by chunk: the same lanes and order as lanes_dot over
 * the masked plane. */
static void lanes_dot_relu(const float *restrict dy, const float *restrict x, float mean, float inv, size_t P,
                           float g, float be, double *restrict a, double *restrict b)
{
    float m[BN_CHUNK];
    for (size_t q = 0; q < P; q += BN_CHUNK) {
        size_t n = P - q < BN_CHUNK ? P - q : BN_CHUNK;
        masked_dy(dy + q, x + q, mean, inv, n, g, be, m);
        lanes_dot(m, x + q, mean, inv, n, a, b);
    }
}

/* One backward over channels [c0, c1): δ into dx (unless NULL) and/or G (params). */
typedef struct bn_job {
    sp_node *n;
    const float *dy;
    float *dx;
    bool params;
    double *sums;   /* synchronized: [2C] per-channel sums (local, then over every process) */
} bn_job;

/* Channel c's statistics from the batch's mean and biased variance over N values: the
 * float mean and 1/σ the backward recomputes x̂ with, γ/σ, the fused op's γ, β, and the
 * running statistics. */
static void set_stats(sp_node *n, size_t c, double mu, double var, size_t N)
{
    const bn_layer *l = BN(n);
    bn_saved *S = n->saved;
    const float *gamma = n->layer->params[0]->value.data, *beta = n->layer->params[1]->value.data;
    float *rm = n->layer->buffers[0]->value.data, *rv = n->layer->buffers[1]->value.data;
    float mean = (float)mu;
    float inv = (float)(1.0 / sqrt(var + (double)l->eps));
    float g = gamma[c], be = beta[c];
    float m = l->momentum;
    rm[c] = (1 - m) * rm[c] + m * mean;
    rv[c] = (1 - m) * rv[c] + m * (float)(var * (double)N / (double)(N - 1));
    S->mean[c] = mean, S->inv[c] = inv;   /* x̂ is recomputed from x by the backward */
    if (S->relu) S->gb[2 * c] = g, S->gb[2 * c + 1] = be;
    S->scale[c] = g * inv;
}

static void bn_forward_range(void *ctx, size_t c0, size_t c1)
{
    sp_node *n = ((bn_job *)ctx)->n;
    const bn_layer *l = BN(n);
    bn_saved *S = n->saved;
    const sp_tensor *x = sp_node_x(n);
    int B = x->shape[0], C = x->shape[1];
    size_t P = (size_t)x->shape[2] * x->shape[3], N = (size_t)B * P;
    const float *gamma = n->layer->params[0]->value.data, *beta = n->layer->params[1]->value.data;
    float *rm = n->layer->buffers[0]->value.data, *rv = n->layer->buffers[1]->value.data;
    for (size_t c = c0; c < c1; c++) {
        float mean, scale;
        if (S->training) {
            double mu, var;
            if (S->sync) {   /* over every process: E[x] and E[x²] − E[x]² of the summed Σx, Σx² */
                const double *sm = ((bn_job *)ctx)->sums;
                N = (size_t)S->count;
                mu = sm[2 * c] / S->count;
                var = sm[2 * c + 1] / S->count - mu * mu;
                if (var < 0) var = 0;
            } else {
                double acc[SP_BN_LANES] = {0}, acc2[SP_BN_LANES] = {0};
                for (int b = 0; b < B; b++) lanes_sum(x->data + ((size_t)b * C + c) * P, P, acc);
                mu = lanes_total(acc) / (double)N;
                for (int b = 0; b < B; b++) lanes_sqdev(x->data + ((size_t)b * C + c) * P, P, mu, acc2);
                var = lanes_total(acc2) / (double)N;
            }
            set_stats(n, c, mu, var, N);
            mean = S->mean[c], scale = S->scale[c];
            float inv = S->inv[c], g = gamma[c], be = beta[c];
            for (int b = 0; b < B; b++) {
                const float *restrict xc = x->data + ((size_t)b * C + c) * P;
                float *restrict y = n->out.data + ((size_t)b * C + c) * P;
                if (S->relu)
                    for (size_t p = 0; p < P; p++) {
                        float h = (xc[p] - mean) * inv, v = g * h + be;
                        y[p] = v > 0.0f ? v : 0.0f;
                    }
                else
                    for (size_t p = 0; p < P; p++) {
                        float h = (xc[p] - mean) * inv;
                        y[p] = g * h + be;
                    }
            }
        } else {
            mean = rm[c];
            scale = gamma[c] / sqrtf(rv[c] + l->eps);
            float be = beta[c];
            for (int b = 0; b < B; b++) {
                const float *restrict xc = x->data + ((size_t)b * C + c) * P;
                float *restrict y = n->out.data + ((size_t)b * C + c) * P;
                for (size_t p = 0; p < P; p++) {
                    float v = (xc[p] - mean) * scale + be;
                    y[p] = S->relu && !(v > 0.0f) ? 0.0f : v;
                }
            }
        }
        S->scale[c] = scale;
    }
}

/* ---- the blocked layout (sp_tensor.blk): training mode on this process's batch -------
 * Element (b, c, p) at ((b·C/k + c/k)·P + p)·k + c mod k. The sums run over groups of BG
 * channels side by side (one task each), every channel in the lanes and order of the
 * NCHW loops above (lane p mod SP_BN_LANES, samples then positions), so the bits are
 * NCHW's; the passes that write y or dx run over samples. */
#define BG 8

static void channel_params(const sp_node *n, const float *dy, size_t c, double sdy, double sdyx);

typedef struct bn_blk {
    sp_node *n;
    const float *x, *dy;
    float *dx;
    int B, C, k;
    size_t P;
    double *s1, *s2;   /* per channel: Σx, Σ(x − μ)² (forward); Σdy, Σdy·x̂ (backward) */
    float *mdy, *mdyx; /* backward: per channel (float)(Σdy/N), (float)(Σdy·x̂/N)      */
    bool params;
} bn_blk;

static inline size_t blk_at(const bn_blk *J, int b, size_t c)
{
    return (((size_t)b * (size_t)(J->C / J->k) + c / (size_t)J->k) * J->P) * (size_t)J->k + c % (size_t)J->k;
}

static double lane_total(double a[SP_BN_LANES][BG], int k)
{
    double t[SP_BN_LANES];
    for (int j = 0; j < SP_BN_LANES; j++) t[j] = a[j][k];
    return lanes_total(t);
}

SP_AVX2_CLONES static void blk_stats_range(void *ctx, size_t g0, size_t g1)
{
    bn_blk *J = ctx;
    size_t N = (size_t)J->B * J->P, ks = (size_t)J->k;
    for (size_t g = g0; g < g1; g++) {
        size_t c0 = g * BG;
        double a[SP_BN_LANES][BG] = {{0}}, a2[SP_BN_LANES][BG] = {{0}}, mu[BG];
        for (int b = 0; b < J->B; b++) {
            const float *restrict x = J->x + blk_at(J, b, c0);
            size_t p = 0;
            for (; p + SP_BN_LANES <= J->P; p += SP_BN_LANES)
                for (int j = 0; j < SP_BN_LANES; j++)
                    for (int k = 0; k < BG; k++) a[j][k] += (double)x[(p + j) * ks + k];
            for (; p < J->P; p++)
                for (int k = 0; k < BG; k++) a[p % SP_BN_LANES][k] += (double)x[p * ks + k];
        }
        for (int k = 0; k < BG; k++) mu[k] = lane_total(a, k) / (double)N;
        for (int b = 0; b < J->B; b++) {
            const float *restrict x = J->x + blk_at(J, b, c0);
#define SQ(q) (((double)x[(q) * ks + k] - mu[k]) * ((double)x[(q) * ks + k] - mu[k]))
            size_t p = 0;
            for (; p + SP_BN_LANES <= J->P; p += SP_BN_LANES)
                for (int j = 0; j < SP_BN_LANES; j++)
                    for (int k = 0; k < BG; k++) a2[j][k] += SQ(p + j);
            for (; p < J->P; p++)
                for (int k = 0; k < BG; k++) a2[p % SP_BN_LANES][k] += SQ(p);
#undef SQ
        }
        for (int k = 0; k < BG; k++) set_stats(J->n, c0 + k, mu[k], lane_total(a2, k) / (double)N, N);
    }
}

/* One sample's channel block [P][KS] (KS a constant at each call: vector code). */
static inline __attribute__((always_inline)) void blk_normalize_block(const float *restrict x, float *restrict y,
                                                                      size_t P, int KS, const float *mean,
                                                                      const float *inv, const float *g,
                                                                      const float *be, bool relu)
{
    for (size_t p = 0; p < P; p++)
        for (int k = 0; k < KS; k++) {
            float h = (x[p * KS + k] - mean[k]) * inv[k], v = g[k] * h + be[k];
            y[p * KS + k] = relu ? (v > 0.0f ? v : 0.0f) : v;
        }
}

SP_AVX2_CLONES static void blk_normalize_range(void *ctx, size_t b0, size_t b1)
{
    const bn_blk *J = ctx;
    const bn_saved *S = J->n->saved;
    const float *gamma = J->n->layer->params[0]->value.data, *beta = J->n->layer->params[1]->value.data;
    size_t ks = (size_t)J->k;
    bool relu = S->relu;
    for (size_t b = b0; b < b1; b++)
        for (size_t c0 = 0; c0 < (size_t)J->C; c0 += ks) {
            const float *x = J->x + blk_at(J, (int)b, c0);
            float *y = J->n->out.data + blk_at(J, (int)b, c0);
            float mean[16], inv[16], g[16], be[16];
            for (size_t k = 0; k < ks; k++)
                mean[k] = S->mean[c0 + k], inv[k] = S->inv[c0 + k], g[k] = gamma[c0 + k], be[k] = beta[c0 + k];
            if (ks == 16 && relu) blk_normalize_block(x, y, J->P, 16, mean, inv, g, be, true);
            else if (ks == 16) blk_normalize_block(x, y, J->P, 16, mean, inv, g, be, false);
            else if (relu) blk_normalize_block(x, y, J->P, 8, mean, inv, g, be, true);
            else blk_normalize_block(x, y, J->P, 8, mean, inv, g, be, false);
        }
}

static void bn_forward_blocked(sp_node *n)
{
    const sp_tensor *x = sp_node_x(n);
    bn_blk J = {.n = n, .x = x->data, .B = x->shape[0], .C = x->shape[1], .k = x->blk,
                .P = (size_t)x->shape[2] * x->shape[3]};
    sp_parallel_for((size_t)(J.C / BG), blk_stats_range, &J);
    sp_parallel_for((size_t)J.B, blk_normalize_range, &J);
}

/* Σdy and Σdy·x̂ per channel (dy masked in the fused op), and G. */
SP_AVX2_CLONES static void blk_sums_range(void *ctx, size_t g0, size_t g1)
{
    bn_blk *J = ctx;
    const bn_saved *S = J->n->saved;
    size_t ks = (size_t)J->k;
    for (size_t g = g0; g < g1; g++) {
        size_t c0 = g * BG;
        double a[SP_BN_LANES][BG] = {{0}}, a2[SP_BN_LANES][BG] = {{0}};
        float mean[BG], inv[BG], gm[BG], be[BG];
        for (int k = 0; k < BG; k++) {
            mean[k] = S->mean[c0 + k], inv[k] = S->inv[c0 + k];
            gm[k] = S->relu ? S->gb[2 * (c0 + k)] : 0.0f, be[k] = S->relu ? S->gb[2 * (c0 + k) + 1] : 0.0f;
        }
        bool relu = S->relu;
        for (int b = 0; b < J->B; b++) {
            size_t o = blk_at(J, b, c0);
            const float *restrict x = J->x + o, *restrict dy = J->dy + o;
            for (size_t p = 0; p < J->P; p++) {
                int j = (int)(p % SP_BN_LANES);
                float m[BG], h[BG];
                for (int k = 0; k < BG; k++) {
                    float d = dy[p * ks + k];
                    h[k] = (x[p * ks + k] - mean[k]) * inv[k];
                    m[k] = !relu || gm[k] * h[k] + be[k] > 0.0f ? d : 0.0f;
                }
                for (int k = 0; k < BG; k++) {
                    a[j][k] += (double)m[k];
                    a2[j][k] += (double)m[k] * (double)h[k];
                }
            }
        }
        for (int k = 0; k < BG; k++) {
            double sdy = lane_total(a, k), sdyx = lane_total(a2, k);
            double N = (double)J->B * (double)J->P;
            J->mdy[c0 + k] = (float)(sdy / N), J->mdyx[c0 + k] = (float)(sdyx / N);
            if (J->params) channel_params(J->n, J->dy, c0 + k, sdy, sdyx);
        }
    }
}

/* δ of one sample's channel block [P][KS], as blk_normalize_block. */
static inline __attribute__((always_inline)) void blk_delta_block(const float *restrict x, const float *restrict dy,
                                                                  float *restrict dx, size_t P, int KS,
                                                                  const float *mean, const float *inv,
                                                                  const float *gm, const float *be, const float *kk,
                                                                  const float *mdy, const float *mdyx, bool relu)
{
    for (size_t p = 0; p < P; p++)
        for (int k = 0; k < KS; k++) {
            float h = (x[p * KS + k] - mean[k]) * inv[k], d = dy[p * KS + k];
            float m = !relu || gm[k] * h + be[k] > 0.0f ? d : 0.0f;
            dx[p * KS + k] = kk[k] * (m - mdy[k] - h * mdyx[k]);
        }
}

SP_AVX2_CLONES static void blk_delta_range(void *ctx, size_t b0, size_t b1)
{
    const bn_blk *J = ctx;
    const bn_saved *S = J->n->saved;
    size_t ks = (size_t)J->k;
    bool relu = S->relu;
    for (size_t b = b0; b < b1; b++)
        for (size_t c0 = 0; c0 < (size_t)J->C; c0 += ks) {
            size_t o = blk_at(J, (int)b, c0);
            const float *restrict x = J->x + o, *restrict dy = J->dy + o;
            float *restrict dx = J->dx + o;
            float mean[16], inv[16], gm[16], be[16], kk[16], mdy[16], mdyx[16];
            for (size_t k = 0; k < ks; k++) {
                size_t c = c0 + k;
                mean[k] = S->mean[c], inv[k] = S->inv[c], kk[k] = S->scale[c], mdy[k] = J->mdy[c], mdyx[k] = J->mdyx[c];
                gm[k] = S->relu ? S->gb[2 * c] : 0.0f, be[k] = S->relu ? S->gb[2 * c + 1] : 0.0f;
            }
            if (ks == 16 && relu) blk_delta_block(x, dy, dx, J->P, 16, mean, inv, gm, be, kk, mdy, mdyx, true);
            else if (ks == 16) blk_delta_block(x, dy, dx, J->P, 16, mean, inv, gm, be, kk, mdy, mdyx, false);
            else if (relu) blk_delta_block(x, dy, dx, J->P, 8, mean, inv, gm, be, kk, mdy, mdyx, true);
            else blk_delta_block(x, dy, dx, J->P, 8, mean, inv, gm, be, kk, mdy, mdyx, false);
        }
}

/* δ into dx (unless NULL) and/or G. */
static void bn_backward_blocked(sp_node *n, const float *dy, float *dx, bool params)
{
    const sp_tensor *x = sp_node_x(n);
    bn_blk J = {.n = n, .x = x->data, .dy = dy, .dx = dx, .B = x->shape[0], .C = x->shape[1], .k = x->blk,
                .P = (size_t)x->shape[2] * x->shape[3], .params = params};
    J.mdy = sp_tape_alloc(n->tape, 2 * (size_t)J.C * sizeof(float));
    J.mdyx = J.mdy + J.C;
    sp_parallel_for((size_t)(J.C / BG), blk_sums_range, &J);
    if (dx) sp_parallel_for((size_t)J.B, blk_delta_range, &J);
}

/* Synchronized: this process's Σx and Σx² of channels [c0, c1) into sums. */
static void bn_local_moments(void *ctx, size_t c0, size_t c1)
{
    bn_job *J = ctx;
    const sp_tensor *x = sp_node_x(J->n);
    int B = x->shape[0], C = x->shape[1];
    size_t P = (size_t)x->shape[2] * x->shape[3];
    for (size_t c = c0; c < c1; c++) {
        double a[SP_BN_LANES] = {0}, a2[SP_BN_LANES] = {0};
        for (int b = 0; b < B; b++) {
            const float *xc = x->data + ((size_t)b * C + c) * P;
            lanes_sum(xc, P, a);
            lanes_sqdev(xc, P, 0.0, a2);
        }
        J->sums[2 * c] = lanes_total(a);
        J->sums[2 * c + 1] = lanes_total(a2);
    }
}

static void bn_forward(sp_node *n)
{
    const sp_tensor *x = sp_node_x(n);
    int C = x->shape[1];
    bn_saved *S = sp_tape_alloc(n->tape, sizeof *S);
    S->training = !n->layer->eval;
    S->relu = BN(n)->relu;
    /* x̂ is not kept: the backward recomputes it from the input, which the tape holds
     * anyway, with the forward's float mean and 1/σ (the same bits: one subtraction and
     * one product, rounded alike), instead of a second copy of the activations */
    S->xhat = NULL;
    S->scale = sp_tape_alloc(n->tape, (size_t)C * sizeof(float));
    S->mean = S->training ? sp_tape_alloc(n->tape, (size_t)C * sizeof(float)) : NULL;
    S->inv = S->training ? sp_tape_alloc(n->tape, (size_t)C * sizeof(float)) : NULL;
    S->gb = S->training && S->relu ? sp_tape_alloc(n->tape, 2 * (size_t)C * sizeof(float)) : NULL;
    n->saved = S;
    if (S->training) n->layer->buffers[2]->value.data[0] += 1.0f;
    const bn_layer *l = BN(n);
    S->sync = S->training && l->reduce;
    bn_job J = {.n = n};
    if (S->sync) {   /* one reduction of [Σx, Σx²] per channel and the count */
        J.sums = sp_tape_alloc(n->tape, (2 * (size_t)C + 1) * sizeof(double));
        sp_parallel_for((size_t)C, bn_local_moments, &J);
        J.sums[2 * C] = (double)x->shape[0] * x->shape[2] * x->shape[3];
        l->reduce(l->reduce_ctx, J.sums, 2 * C + 1);
        S->count = J.sums[2 * C];
        if (S->count < 2)
            sp_fail("batchnorm2d %s: %g values per channel over every process; training mode needs more",
                    n->layer->name, S->count);
    }
    if (x->blk) bn_forward_blocked(n);
    else sp_parallel_for((size_t)C, bn_forward_range, &J);
}

/* dy as batch norm's own formulas read it: masked by ReLU's [y > 0] in the fused op.
 * Scalar, for eval mode (training recomputes the mask from x̂ in the vector loops). */
static inline float eval_dy(const sp_node *n, const float *dy, size_t o)
{
    return ((const bn_saved *)n->saved)->relu && !(n->out.data[o] > 0.0f) ? 0.0f : dy[o];
}

/* Σdy and Σdy·x̂ of channel c (float64), dy masked in the fused op. Eval mode (no x̂):
 * Σdy only, Σdy·x̂ = 0. */
static void channel_sums(const sp_node *n, const float *dy, size_t c, double *sdy, double *sdyx)
{
    const bn_saved *S = n->saved;
    const sp_tensor *x = sp_node_x(n);
    int B = x->shape[0], C = x->shape[1];
    size_t P = (size_t)x->shape[2] * x->shape[3];
    double a[SP_BN_LANES] = {0}, b2[SP_BN_LANES] = {0};
    for (int b = 0; b < B; b++) {
        size_t o = ((size_t)b * C + c) * P;
        if (S->training && S->relu)
            lanes_dot_relu(dy + o, x->data + o, S->mean[c], S->inv[c], P, S->gb[2 * c], S->gb[2 * c + 1], a, b2);
        else if (S->training)
            lanes_dot(dy + o, x->data + o, S->mean[c], S->inv[c], P, a, b2);
        else if (!S->relu)
            lanes_sum(dy + o, P, a);
        else   /* lane p mod SP_BN_LANES, as lanes_sum */
            for (size_t p = 0; p < P; p++) a[p % SP_BN_LANES] += (double)eval_dy(n, dy, o + p);
    }
    *sdy = lanes_total(a);
    *sdyx = lanes_total(b2);
}

/* δ of channel c given its sums (training). */
static void channel_delta(const sp_node *n, const float *dy_, float *dx_, size_t c, double sdy, double sdyx)
{
    const bn_saved *S = n->saved;
    const sp_tensor *x = sp_node_x(n);
    int B = x->shape[0], C = x->shape[1];
    size_t P = (size_t)x->shape[2] * x->shape[3];
    float k = S->scale[c];
    if (!S->training) {
        for (int b = 0; b < B; b++) {
            size_t o = ((size_t)b * C + c) * P;
            for (size_t p = 0; p < P; p++) dx_[o + p] = eval_dy(n, dy_, o + p) * k;
        }
        return;
    }
    double N = S->sync ? S->count : (double)B * (double)P;
    float mdy = (float)(sdy / N), mdyx = (float)(sdyx / N), mean = S->mean[c], inv = S->inv[c];
    for (int b = 0; b < B; b++) {
        size_t o = ((size_t)b * C + c) * P;
        const float *restrict dy = dy_ + o, *restrict xc = x->data + o;
        float *restrict dx = dx_ + o;
        if (S->relu) {
            float g = S->gb[2 * c], be = S->gb[2 * c + 1], m[BN_CHUNK];
            for (size_t q = 0; q < P; q += BN_CHUNK) {
                size_t nq = P - q < BN_CHUNK ? P - q : BN_CHUNK;
                masked_dy(dy + q, xc + q, mean, inv, nq, g, be, m);
                for (size_t p = 0; p < nq; p++) dx[q + p] = k * (m[p] - mdy - ((xc[q + p] - mean) * inv) * mdyx);
            }
        } else {
            for (size_t p = 0; p < P; p++) dx[p] = k * (dy[p] - mdy - ((xc[p] - mean) * inv) * mdyx);
        }
    }
}

/* G of channel c: dγ += Σdy·x̂, dβ += Σdy; eval mode recomputes x̂ = (x − rm)/√(rv + eps). */
static void channel_params(const sp_node *n, const float *dy, size_t c, double sdy, double sdyx)
{
    const bn_saved *S = n->saved;
    float *dg = n->layer->params[0]->grad.data, *db = n->layer->params[1]->grad.data;
    if (!S->training) {
        const sp_tensor *x = sp_node_x(n);
        int B = x->shape[0], C = x->shape[1];
        size_t P = (size_t)x->shape[2] * x->shape[3];
        float rm = n->layer->buffers[0]->value.data[c];
        float inv = 1.0f / sqrtf(n->layer->buffers[1]->value.data[c] + BN(n)->eps);
        sdyx = 0;
        for (int b = 0; b < B; b++)
            for (size_t p = 0; p < P; p++) {
                size_t o = ((size_t)b * C + c) * P + p;
                sdyx += (double)eval_dy(n, dy, o) * ((x->data[o] - rm) * inv);
            }
    }
    dg[c] += (float)sdyx;
    db[c] += (float)sdy;
}

static void bn_backward_range(void *ctx, size_t c0, size_t c1)
{
    const bn_job *J = ctx;
    const bn_saved *S = J->n->saved;
    for (size_t c = c0; c < c1; c++) {
        double sdy = 0, sdyx = 0;
        if (S->training || J->params) channel_sums(J->n, J->dy, c, &sdy, &sdyx);
        if (J->params) channel_params(J->n, J->dy, c, sdy, sdyx);
        if (J->dx) channel_delta(J->n, J->dy, J->dx, c, sdy, sdyx);
    }
}

/* Synchronized: this process's Σdy, Σdy·x̂ of channels [c0, c1) into sums, and G (local
 * sums: the gradients are summed over the processes later) when params. */
static void bn_sync_sums(void *ctx, size_t c0, size_t c1)
{
    bn_job *J = ctx;
    for (size_t c = c0; c < c1; c++) {
        channel_sums(J->n, J->dy, c, &J->sums[2 * c], &J->sums[2 * c + 1]);
        if (J->params) channel_params(J->n, J->dy, c, J->sums[2 * c], J->sums[2 * c + 1]);
    }
}

/* Synchronized: δ of channels [c0, c1) from the sums over every process. */
static void bn_sync_delta(void *ctx, size_t c0, size_t c1)
{
    bn_job *J = ctx;
    for (size_t c = c0; c < c1; c++) channel_delta(J->n, J->dy, J->dx, c, J->sums[2 * c], J->sums[2 * c + 1]);
}

/* The synchronized backward: local sums (and G), one reduction of [Σdy, Σdy·x̂] per
 * channel, then δ (dx NULL: G alone, no reduction). */
static void bn_backward_sync(sp_node *n, const float *dy, float *dx, bool params, int C)
{
    const bn_layer *l = BN(n);
    bn_job J = {.n = n, .dy = dy, .dx = dx, .params = params};
    J.sums = sp_tape_alloc(n->tape, 2 * (size_t)C * sizeof(double));
    sp_parallel_for((size_t)C, bn_sync_sums, &J);
    if (!dx) return;
    l->reduce(l->reduce_ctx, J.sums, 2 * C);
    sp_parallel_for((size_t)C, bn_sync_delta, &J);
}

static void bn_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    if (dx->blk) {
        bn_backward_blocked(n, dy->data, dx->data, false);
        return;
    }
    if (((const bn_saved *)n->saved)->sync) {
        bn_backward_sync(n, dy->data, dx->data, false, dx->shape[1]);
        return;
    }
    bn_job J = {.n = n, .dy = dy->data, .dx = dx->data};
    sp_parallel_for((size_t)dx->shape[1], bn_backward_range, &J);
}

static void bn_backward_params(sp_node *n, const sp_tensor *dy)
{
    if (dy->blk) {
        bn_backward_blocked(n, dy->data, NULL, true);
        return;
    }
    bn_job J = {.n = n, .dy = dy->data, .params = true};
    sp_parallel_for((size_t)dy->shape[1], bn_backward_range, &J);
}

/* δ and G in one pass: the channel sums once for both (training mode reads dy and x̂
 * once less); each channel's bits are those of the two calls above. */
static void bn_backward_input_params(sp_node *n, const sp_tensor *dy, sp_tensor *dx, bool acc)
{
    sp_tensor tmp = acc ? sp_tape_tensor_like(n->tape, dx) : *dx;   /* acc: δ, then added */
    bn_job J = {.n = n, .dy = dy->data, .dx = tmp.data, .params = true};
    if (dx->blk)
        bn_backward_blocked(n, dy->data, tmp.data, true);
    else if (((const bn_saved *)n->saved)->sync)
        bn_backward_sync(n, dy->data, tmp.data, true, dx->shape[1]);
    else
        sp_parallel_for((size_t)dx->shape[1], bn_backward_range, &J);
    if (acc) sp_accumulate(dx, &tmp);
}

static bool bn_jt_exists(const sp_node *n) { return !((const bn_saved *)n->saved)->training; }

static void bn_jt_pattern(const sp_node *n, int i, sp_csr *jt)
{
    sp_csr_identity(jt, (int)sp_tensor_sample_numel(&n->out));
}

static void bn_jt_values(const sp_node *n, int i, int b, sp_csr *jt)
{
    const bn_saved *S = n->saved;
    size_t P = (size_t)n->out.shape[2] * n->out.shape[3];
    for (int r = 0; r < jt->rows; r++) jt->data[r] = S->scale[(size_t)r / P];
    if (!S->relu) return;
    const float *y = n->out.data + (size_t)b * jt->rows;   /* the fused ReLU's diag([y > 0]) */
    for (int r = 0; r < jt->rows; r++)
        if (!(y[r] > 0.0f)) jt->data[r] = 0.0f;
}

static sp_cost bn_cost(const sp_node *n)
{
    double e = (double)n->out.numel, C = BN(n)->C;
    return (sp_cost){.fwd_flops = 7 * e, .bwd_input_flops = 6 * e, .bwd_params_flops = 3 * e, .out_bytes = 4 * e,
                     .saved_bytes = 4 * (e + C), .param_bytes = 4 * 2 * C};
}

/* batch norm's cost plus relu's (one FLOP per element each way, as layers/relu.c). */
static sp_cost bn_relu_cost(const sp_node *n)
{
    sp_cost c = bn_cost(n);
    double e = (double)n->out.numel;
    c.fwd_flops += e, c.bwd_input_flops += e, c.saved_bytes += 4 * 2 * BN(n)->C;
    return c;
}

/* Blocked inputs in training mode on this process's batch (eval mode and the
 * synchronized statistics read NCHW), channels in whole groups of the sums. */
static int bn_blocked(const sp_layer *l)
{
    const bn_layer *b = (const bn_layer *)l;
    return !l->eval && !b->reduce && b->C % BG == 0 ? SP_BLK_PASS : SP_BLK_NONE;
}

static void bn_init(sp_layer *l, sp_rng *r)
{
    sp_tensor *g = &l->params[0]->value;
    for (size_t i = 0; i < g->numel; i++) g->data[i] = 1.0f;
    sp_tensor_zero(&l->params[1]->value);
    sp_tensor_zero(&l->buffers[0]->value);
    for (size_t i = 0; i < l->buffers[1]->value.numel; i++) l->buffers[1]->value.data[i] = 1.0f;
    sp_tensor_zero(&l->buffers[2]->value);
}

const sp_opdef sp_op_batchnorm2d = {
    .out_unread = true,   /* δ and G read the input (x̂ recomputed) and per-channel state */
    .name = "batchnorm2d",
    .infer = bn_infer,
    .jt_pattern = bn_jt_pattern,
    .jt_exists = bn_jt_exists,
    .cost = bn_cost,
    .init_params = bn_init,
    .blocked = bn_blocked,
    .cpu = {
        .forward = bn_forward,
        .backward_input = bn_backward_input,
        .backward_params = bn_backward_params,
        .backward_input_params = bn_backward_input_params,
        .jt_values = bn_jt_values,
    },
};

const sp_opdef sp_op_batchnorm2d_relu = {
    .name = "batchnorm2d_relu",
    .infer = bn_infer,
    .jt_pattern = bn_jt_pattern,
    .jt_exists = bn_jt_exists,
    .cost = bn_relu_cost,
    .init_params = bn_init,
    .blocked = bn_blocked,
    .cpu = {
        .forward = bn_forward,
        .backward_input = bn_backward_input,
        .backward_params = bn_backward_params,
        .backward_input_params = bn_backward_input_params,
        .jt_values = bn_jt_values,
    },
};

static sp_layer *bn_new(const char *name, int channels, bool relu)
{
    if (channels < 1) sp_fail("batchnorm2d %s: %d channels, expected >= 1", name, channels);
    bn_layer *l = sp_xcalloc(1, sizeof *l);
    l->base.op = relu ? &sp_op_batchnorm2d_relu : &sp_op_batchnorm2d;
    l->relu = relu;
    snprintf(l->base.name, sizeof l->base.name, "%s", name);
    l->C = channels;
    l->eps = 1e-5f;
    l->momentum = 0.1f;
    sp_param_new(&l->base, "weight", 1, (int[]){channels});
    sp_param_new(&l->base, "bias", 1, (int[]){channels});
    sp_buffer_new(&l->base, "running_mean", 1, (int[]){channels});
    sp_buffer_new(&l->base, "running_var", 1, (int[]){channels});
    sp_buffer_new(&l->base, "num_batches_tracked", 1, (int[]){1});   /* PyTorch: a scalar; [1] loads into it */
    bn_init(&l->base, NULL);
    return &l->base;
}

sp_layer *sp_batchnorm2d(const char *name, int channels)
{
    SP_GUARD(NULL);
    if (!name) sp_fail("sp_batchnorm2d: argument 'name' is NULL");
    return bn_new(name, channels, false);
}

sp_layer *sp_batchnorm2d_relu(const char *name, int channels)
{
    SP_GUARD(NULL);
    if (!name) sp_fail("sp_batchnorm2d_relu: argument 'name' is NULL");
    return bn_new(name, channels, true);
}

bool sp_layer_is_batchnorm(const sp_layer *l)
{
    return l && (l->op == &sp_op_batchnorm2d || l->op == &sp_op_batchnorm2d_relu);
}

int sp_batchnorm2d_set_reduce(sp_layer *l, sp_bn_reduce_fn reduce, void *ctx)
{
    SP_GUARD(SP_ERR);
    if (!l) sp_fail("sp_batchnorm2d_set_reduce: argument 'l' is NULL");
    if (!sp_layer_is_batchnorm(l)) sp_fail("sp_batchnorm2d_set_reduce: layer %s is not batch norm", l->name);
    bn_layer *b = (bn_layer *)l;
    b->reduce = reduce;
    b->reduce_ctx = ctx;
    return SP_OK;
}
