/* test_conv.c — conv2d and maxpool2d: gradient checks (δ and G) against float64-
 * accumulated central finite differences (tolerance 5e-3 of the largest entry, as in
 * test_layers.c), forward/δ/G against naive direct-loop references (float64, relative
 * 1e-5) with 1 and 2 threads, shapes and bad-shape errors (exit 2), initialisation,
 * cost, bitwise identical repeats (im2col/col2im: also across thread counts), and the
 * forward with the ReLU folded in (forward_relu) bitwise the two ops, through a step. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/device.h"
#include "core/kernels/dnnl.h"
#include "layers/conv2d_internal.h"
#include "core/kernels/conv3x3_b8.h"
#include "core/kernels/conv_direct.h"
#include "core/kernels/wino_b8.h"
#include "core/kernels/gemm_small.h"
#include "core/threads.h"
#include "core/rng.h"
#include "core/model.h"
#include "core/tape.h"
#include "layers/im2col.h"
#include "layers/layers.h"
#include "schedulers/backward/engines.h"
#include "tests/testutil.h"

#define GC_TOL 5e-3
#define REF_TOL 1e-5

typedef struct conv_cfg {
    int B, C, H, W, O, k, s, p;
} conv_cfg;

static int out_size(int in, int k, int s, int p) { return (in + 2 * p - k) / s + 1; }

/* Some window along a dimension of size n reaches a real (non-padding) input. */
static bool touches_input(int n, int k, int s, int p)
{
    if (n + 2 * p < k) return false;
    for (int i = 0; i < out_size(n, k, s, p); i++)
        if (i * s - p + k > 0 && i * s - p < n) return true;
    return false;
}

/* A random valid configuration: odd sizes allowed, B, C, O >= 2, and some output that
 * depends on the input (so δ is not identically zero). */
static conv_cfg random_cfg(sp_rng *r, int k, int s, int p, int max_hw)
{
    conv_cfg c = {.B = 2 + (int)sp_rng_below(r, 2), .C = 2 + (int)sp_rng_below(r, 3), .O = 2 + (int)sp_rng_below(r, 3),
                  .k = k, .s = s, .p = p};
    do c.H = 1 + (int)sp_rng_below(r, (uint32_t)max_hw);
    while (!touches_input(c.H, k, s, p));
    do c.W = 1 + (int)sp_rng_below(r, (uint32_t)max_hw);
    while (!touches_input(c.W, k, s, p));
    return c;
}

static void gradcheck(sp_layer *l, const int shape[4], uint64_t seed, const tu_gc_opts *o, const char *what)
{
    tu_gc_result r = tu_gradcheck(l, 4, shape, seed, o);
    cr_assert_lt(r.err_dx, GC_TOL, "%s δ: err %.2e", what, r.err_dx);
    cr_assert_gt(r.max_abs_dx, 0.0, "%s δ is all zeros", what);
    for (int p = 0; p < r.nparams; p++)
        cr_assert_lt(r.err_param[p], GC_TOL, "%s G of %s: err %.2e", what, l->params[p]->name, r.err_param[p]);
    sp_layer_free(l);
}

Test(conv_gradcheck, random_shapes_all_kernels_strides_paddings)
{
    static const int kernels[4] = {1, 2, 3, 5};
    sp_rng r;
    sp_rng_seed(&r, 2024);
    for (int t = 0; t < 36; t++) {   /* every (k, s, p) in {1,2,3,5} × {1,2,3} × {0,1,2} */
        int k = kernels[t % 4], s = 1 + t / 4 % 3, p = t / 12;
        conv_cfg c = random_cfg(&r, k, s, p, 9);
        char what[96];
        snprintf(what, sizeof what, "conv B%d C%d %dx%d O%d k%d s%d p%d", c.B, c.C, c.H, c.W, c.O, k, s, p);
        gradcheck(sp_conv2d("conv", c.C, c.O, k, s, p), (int[]){c.B, c.C, c.H, c.W}, 500 + t, NULL, what);
    }
}

Test(maxpool_gradcheck, kernels_2_3_strides_1_3_paddings_0_1)
{
    sp_rng r;
    sp_rng_seed(&r, 77);
    tu_gc_opts o = {.grid = 0.05f};   /* distinct values 0.05 apart, FD step 0.01: never crosses a tie */
    for (int k = 2; k <= 3; k++)
        for (int s = 1; s <= 3; s++)
            for (int p = 0; p <= 1; p++) {
                conv_cfg c = random_cfg(&r, k, s, p, 9);
                char what[96];
                snprintf(what, sizeof what, "maxpool B%d C%d %dx%d k%d s%d p%d", c.B, c.C, c.H, c.W, k, s, p);
                gradcheck(sp_maxpool2d(k, s, p), (int[]){c.B, c.C, c.H, c.W}, 900 + 10 * k + 3 * s + p, &o, what);
            }
}

/* ---- naive references ------------------------------------------------------------- */

#define X4(t, c, a, b, d, e) ((t)[(((size_t)(a) * (c).C + (b)) * (c).H + (d)) * (c).W + (e)])

static void ref_conv_forward(const conv_cfg *c, const float *x, const float *Wt, const float *bias, float *y)
{
    int Ho = out_size(c->H, c->k, c->s, c->p), Wo = out_size(c->W, c->k, c->s, c->p);
    for (int b = 0; b < c->B; b++)
        for (int o = 0; o < c->O; o++)
            for (int i = 0; i < Ho; i++)
                for (int j = 0; j < Wo; j++) {
                    double acc = bias[o];
                    for (int ch = 0; ch < c->C; ch++)
                        for (int kh = 0; kh < c->k; kh++)
                            for (int kw = 0; kw < c->k; kw++) {
                                int h = i * c->s - c->p + kh, w = j * c->s - c->p + kw;
                                if (h < 0 || h >= c->H || w < 0 || w >= c->W) continue;
                                acc += (double)X4(x, *c, b, ch, h, w) *
                                       Wt[(((size_t)o * c->C + ch) * c->k + kh) * c->k + kw];
                            }
                    y[(((size_t)b * c->O + o) * Ho + i) * Wo + j] = (float)acc;
                }
}

/* δ and G by scattering every (output, tap) product, in float64. */
static void ref_conv_backward(const conv_cfg *c, const float *x, const float *Wt, const float *dy, float *dx,
                              float *dW, float *db)
{
    int Ho = out_size(c->H, c->k, c->s, c->p), Wo = out_size(c->W, c->k, c->s, c->p);
    size_t nx = (size_t)c->B * c->C * c->H * c->W, nw = (size_t)c->O * c->C * c->k * c->k;
    double *ddx = calloc(nx, sizeof *ddx), *ddw = calloc(nw, sizeof *ddw), *ddb = calloc((size_t)c->O, sizeof *ddb);
    for (int b = 0; b < c->B; b++)
        for (int o = 0; o < c->O; o++)
            for (int i = 0; i < Ho; i++)
                for (int j = 0; j < Wo; j++) {
                    double g = dy[(((size_t)b * c->O + o) * Ho + i) * Wo + j];
                    ddb[o] += g;
                    for (int ch = 0; ch < c->C; ch++)
                        for (int kh = 0; kh < c->k; kh++)
                            for (int kw = 0; kw < c->k; kw++) {
                                int h = i * c->s - c->p + kh, w = j * c->s - c->p + kw;
                                if (h < 0 || h >= c->H || w < 0 || w >= c->W) continue;
                                size_t wi = (((size_t)o * c->C + ch) * c->k + kh) * c->k + kw;
                                size_t xi = (((size_t)b * c->C + ch) * c->H + h) * c->W + w;
                                ddx[xi] += g * Wt[wi];
                                ddw[wi] += g * x[xi];
                            }
                }
    for (size_t i = 0; i < nx; i++) dx[i] = (float)ddx[i];
    for (size_t i = 0; i < nw; i++) dW[i] = (float)ddw[i];
    for (int o = 0; o < c->O; o++) db[o] = (float)ddb[o];
    free(ddx);
    free(ddw);
    free(ddb);
}

/* Runs forward, δ and G of a fresh conv layer on random x and dy; outputs into y, dx,
 * dW, db (caller-sized). */
typedef struct conv_run {
    float *x, *y, *dy, *dx, *W, *bias, *dW, *db;
    size_t nx, ny, nw;
} conv_run;

static conv_run conv_run_new(const conv_cfg *c)
{
    conv_run R;
    R.nx = (size_t)c->B * c->C * c->H * c->W;
    R.ny = (size_t)c->B * c->O * out_size(c->H, c->k, c->s, c->p) * out_size(c->W, c->k, c->s, c->p);
    R.nw = (size_t)c->O * c->C * c->k * c->k;
    R.x = malloc(R.nx * sizeof(float));
    R.dx = malloc(R.nx * sizeof(float));
    R.y = malloc(R.ny * sizeof(float));
    R.dy = malloc(R.ny * sizeof(float));
    R.W = malloc(R.nw * sizeof(float));
    R.dW = malloc(R.nw * sizeof(float));
    R.bias = malloc((size_t)c->O * sizeof(float));
    R.db = malloc((size_t)c->O * sizeof(float));
    return R;
}

static void conv_run_free(conv_run *R)
{
    free(R->x), free(R->dx), free(R->y), free(R->dy), free(R->W), free(R->dW), free(R->bias), free(R->db);
}

/* The op under test: y, dx, dW, db from the same x, dy and parameters. */
static void conv_run_op(const conv_cfg *c, uint64_t seed, conv_run *R)
{
    sp_layer *l = sp_conv2d("conv", c->C, c->O, c->k, c->s, c->p);
    sp_rng r;
    sp_rng_seed(&r, seed);
    l->op->init_params(l, &r);
    tu_fill_uniform(R->x, R->nx, seed + 1, -1, 1);
    tu_fill_uniform(R->dy, R->ny, seed + 2, -1, 1);
    memcpy(R->W, l->params[0]->value.data, R->nw * sizeof(float));
    memcpy(R->bias, l->params[1]->value.data, (size_t)c->O * sizeof(float));

    sp_tape t;
    sp_tape_init(&t);
    sp_tensor xt = sp_tensor_4d(R->x, c->B, c->C, c->H, c->W);
    sp_node *n = sp_apply(&t, l, sp_tape_input(&t, &xt));
    cr_assert_eq(n->out.numel, R->ny);
    memcpy(R->y, n->out.data, R->ny * sizeof(float));
    sp_tensor dyt = sp_tensor_view(R->dy, 4, n->out.shape), dxt = sp_tensor_4d(R->dx, c->B, c->C, c->H, c->W);
    n->kern->backward_input(n, 0, &dyt, &dxt);
    sp_tensor_zero(&l->params[0]->grad);
    sp_tensor_zero(&l->params[1]->grad);
    n->kern->backward_params(n, &dyt);
    memcpy(R->dW, l->params[0]->grad.data, R->nw * sizeof(float));
    memcpy(R->db, l->params[1]->grad.data, (size_t)c->O * sizeof(float));
    /* δ and G in one call (the linear engine's), overwriting and adding into dx: bitwise
     * the two calls above on every path */
    float *dx2 = malloc(R->nx * sizeof(float)), *pre = malloc(R->nx * sizeof(float));
    tu_fill_uniform(pre, R->nx, seed + 3, -1, 1);
    for (int acc = 0; acc <= 1; acc++) {
        memcpy(dx2, pre, R->nx * sizeof(float));
        sp_tensor dx2t = sp_tensor_4d(dx2, c->B, c->C, c->H, c->W);
        sp_tensor_zero(&l->params[0]->grad);
        sp_tensor_zero(&l->params[1]->grad);
        n->kern->backward_input_params(n, &dyt, &dx2t, acc);
        for (size_t i = 0; i < R->nx && acc; i++) pre[i] += R->dx[i];   /* what dx += δ gives */
        const float *want = acc ? pre : R->dx;
        cr_assert(memcmp(dx2, want, R->nx * sizeof(float)) == 0, "B%d C%d O%d: δ of the one call (acc %d) differs",
                  c->B, c->C, c->O, acc);
        cr_assert(memcmp(l->params[0]->grad.data, R->dW, R->nw * sizeof(float)) == 0 &&
                      memcmp(l->params[1]->grad.data, R->db, (size_t)c->O * sizeof(float)) == 0,
                  "B%d C%d O%d: G of the one call (acc %d) differs", c->B, c->C, c->O, acc);
    }
    free(dx2), free(pre);
    sp_tape_free(&t);
    sp_layer_free(l);
}

static void check_against_reference(const conv_cfg *c, uint64_t seed)
{
    conv_run R = conv_run_new(c);
    conv_run_op(c, seed, &R);
    float *y = malloc(R.ny * sizeof(float)), *dx = malloc(R.nx * sizeof(float)), *dW = malloc(R.nw * sizeof(float)),
          *db = malloc((size_t)c->O * sizeof(float));
    ref_conv_forward(c, R.x, R.W, R.bias, y);
    ref_conv_backward(c, R.x, R.W, R.dy, dx, dW, db);
    double ey = tu_max_rel_diff(R.y, y, R.ny), edx = tu_max_rel_diff(R.dx, dx, R.nx),
           edw = tu_max_rel_diff(R.dW, dW, R.nw), edb = tu_max_rel_diff(R.db, db, (size_t)c->O);
    cr_assert_lt(ey, REF_TOL, "forward B%d C%d %dx%d O%d k%d s%d p%d: rel err %.2e", c->B, c->C, c->H, c->W, c->O,
                 c->k, c->s, c->p, ey);
    cr_assert_lt(edx, REF_TOL, "δ k%d s%d p%d: rel err %.2e", c->k, c->s, c->p, edx);
    cr_assert_lt(edw, REF_TOL, "G weight k%d s%d p%d: rel err %.2e", c->k, c->s, c->p, edw);
    cr_assert_lt(edb, REF_TOL, "G bias k%d s%d p%d: rel err %.2e", c->k, c->s, c->p, edb);
    free(y), free(dx), free(dW), free(db);
    conv_run_free(&R);
}

Test(conv_reference, forward_delta_grad_match_direct_loops)
{
    sp_rng r;
    sp_rng_seed(&r, 31);
    static const int kernels[5] = {1, 2, 3, 4, 5};
    for (int t = 0; t < 45; t++) {   /* every (k, s, p) in 1..5 × 1..3 × 0..2 */
        conv_cfg c = random_cfg(&r, kernels[t % 5], 1 + t / 5 % 3, t / 15, 13);
        check_against_reference(&c, 1000 + t);
    }
}

/* Shapes that take every path, with 1 and 2 threads: one sample per GEMM (Ho·Wo >=
 * 256) and several; G with private per-thread copies (O·K <= 65536) and batched
 * (O·K = 69120 here), the latter over chunks of 3 and 2 samples (2.25 MiB of
 * columns per sample against an 8 MiB budget). */
Test(conv_reference, every_path_1_and_2_threads)
{
    static const conv_cfg cfgs[] = {
        {.B = 11, .C = 16, .H = 32, .W = 32, .O = 8, .k = 3, .s = 1, .p = 1},
        {.B = 6, .C = 9, .H = 33, .W = 31, .O = 5, .k = 5, .s = 2, .p = 2},
        {.B = 5, .C = 64, .H = 32, .W = 32, .O = 120, .k = 3, .s = 1, .p = 1},
        {.B = 7, .C = 40, .H = 5, .W = 6, .O = 24, .k = 3, .s = 1, .p = 1},
    };
    for (int threads = 1; threads <= 2; threads++) {
        sp_set_threads(threads);
        for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) check_against_reference(&cfgs[i], 7 + i);
    }
}

/* Both paths of conv2d, oneDNN (the default) and im2col + OpenBLAS (SCANPROP_CONV=gemm):
 * each matches the direct loops, they match each other, and oneDNN's run is bitwise
 * repeatable for a fixed thread count. The shapes: LeNet-5's and VGG-11's convs at small
 * batches, odd sizes, strides and paddings, a batch of 1, more threads than samples. */
static void compare_paths(const conv_cfg *c, uint64_t seed)
{
    bool was = sp_dnnl_conv_on();
    cr_assert(sp_dnnl_conv_set(false));
    check_against_reference(c, seed);
    conv_run G = conv_run_new(c);
    conv_run_op(c, seed, &G);
    if (!sp_dnnl_conv_set(true)) {   /* make DNNL=0: the gemm path alone */
        cr_log_warn("no oneDNN in this build: only the gemm path checked");
        conv_run_free(&G);
        return;
    }
    check_against_reference(c, seed);
    conv_run D = conv_run_new(c), D2 = conv_run_new(c);
    conv_run_op(c, seed, &D);
    conv_run_op(c, seed, &D2);
    const char *what[4] = {"y", "dx", "dW", "db"};
    const float *g[4] = {G.y, G.dx, G.dW, G.db}, *d[4] = {D.y, D.dx, D.dW, D.db}, *d2[4] = {D2.y, D2.dx, D2.dW, D2.db};
    size_t n[4] = {G.ny, G.nx, G.nw, (size_t)c->O};
    for (int i = 0; i < 4; i++) {
        double e = tu_max_rel_diff(d[i], g[i], n[i]);
        cr_assert_lt(e, REF_TOL, "%s B%d C%d %dx%d O%d k%d s%d p%d: oneDNN vs gemm rel err %.2e", what[i], c->B, c->C,
                     c->H, c->W, c->O, c->k, c->s, c->p, e);
        cr_assert(memcmp(d[i], d2[i], n[i] * sizeof(float)) == 0, "%s B%d C%d O%d: two oneDNN runs differ", what[i],
                  c->B, c->C, c->O);
    }
    conv_run_free(&G), conv_run_free(&D), conv_run_free(&D2);
    sp_dnnl_conv_set(was);
}

Test(conv_paths, dnnl_matches_gemm_and_repeats_bitwise)
{
    static const conv_cfg cfgs[] = {
        {.B = 8, .C = 1, .H = 28, .W = 28, .O = 6, .k = 5, .s = 1, .p = 2},    /* LeNet-5 */
        {.B = 8, .C = 6, .H = 14, .W = 14, .O = 16, .k = 5, .s = 1, .p = 0},
        {.B = 3, .C = 3, .H = 32, .W = 32, .O = 64, .k = 3, .s = 1, .p = 1},   /* VGG-11 */
        {.B = 3, .C = 64, .H = 16, .W = 16, .O = 128, .k = 3, .s = 1, .p = 1},
        {.B = 5, .C = 256, .H = 2, .W = 2, .O = 32, .k = 3, .s = 1, .p = 1},
        {.B = 1, .C = 5, .H = 9, .W = 7, .O = 3, .k = 3, .s = 2, .p = 1},
        {.B = 3, .C = 17, .H = 11, .W = 10, .O = 20, .k = 4, .s = 3, .p = 2},
        {.B = 2, .C = 2, .H = 6, .W = 6, .O = 3, .k = 1, .s = 1, .p = 0},
    };
    for (int threads = 1; threads <= 3; threads++) {
        sp_set_threads(threads);
        for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) compare_paths(&cfgs[i], 70 + i);
    }
    sp_rng r;
    sp_rng_seed(&r, 77);
    for (int t = 0; t < 12; t++) {
        conv_cfg c = random_cfg(&r, 1 + t % 5, 1 + t % 3, t % 3, 12);
        compare_paths(&c, 700 + t);
    }
    sp_set_threads(1);
}

/* Which δ runs on oneDNN: 16 channels and more always; fewer where padding them to the
 * block adds at most a third (LeNet-5's conv2, 6 channels: on AVX2's block of 8, not on
 * AVX-512's 16); never without oneDNN (block 0). */
Test(conv_paths, delta_on_dnnl_rule)
{
    cr_assert(sp_conv_delta_on_dnnl(16, 16) && sp_conv_delta_on_dnnl(64, 8) && sp_conv_delta_on_dnnl(20, 16));
    cr_assert(sp_conv_delta_on_dnnl(6, 8) && sp_conv_delta_on_dnnl(7, 8) && sp_conv_delta_on_dnnl(12, 16));
    cr_assert(!sp_conv_delta_on_dnnl(6, 16) && !sp_conv_delta_on_dnnl(5, 8) && !sp_conv_delta_on_dnnl(3, 8));
    cr_assert(!sp_conv_delta_on_dnnl(11, 16) && !sp_conv_delta_on_dnnl(6, 0));
}

/* The 3×3 kernel on the 8-channel blocked layout (core/kernels/conv3x3_b8.c): runs on
 * AVX2 for stride 1, padding 1, input and output channels in sixteens, widths in fours
 * (conv2d: where G fits per-thread copies); its forward, δ and G (bias included) match
 * the direct loops on ResNet-20's shapes (32 and 64 channels under SCANPROP_CONV_ALGO=direct,
 * which otherwise take the fused Winograd), a plane that is not square, 48 channels (three
 * groups of δ's outputs) and a batch that does not split evenly, at 1 and 2 threads. The
 * layouts' and engines' bits: conv_blocked and test_dag on ResNet-20, whose 3×3
 * stride-1 convolutions take it. */
Test(conv_paths, b8_kernel_3x3)
{
    bool avx2 = sp_cpu_isa_level() == 1;
    cr_assert_eq(sp_conv3_b8_on(16, 16, 32, 32, 3, 1, 1), avx2);
    cr_assert_eq(sp_conv3_b8_on(64, 48, 5, 4, 3, 1, 1), avx2);
    cr_assert(!sp_conv3_b8_on(8, 16, 8, 8, 3, 1, 1) && !sp_conv3_b8_on(16, 8, 8, 8, 3, 1, 1));
    cr_assert(!sp_conv3_b8_on(16, 16, 8, 6, 3, 1, 1) && !sp_conv3_b8_on(16, 32, 32, 32, 3, 2, 1));
    cr_assert(!sp_conv3_b8_on(16, 16, 8, 8, 5, 1, 2) && !sp_conv3_b8_on(16, 16, 8, 8, 3, 1, 0));
    if (!avx2 || !sp_dnnl_conv_on()) cr_skip_test("the blocked kernel runs on AVX2 with oneDNN on; ISA level %d", sp_cpu_isa_level());
    static const conv_cfg cfgs[] = {
        {.B = 5, .C = 16, .H = 32, .W = 32, .O = 16, .k = 3, .s = 1, .p = 1},   /* ResNet-20's stages */
        {.B = 3, .C = 32, .H = 16, .W = 16, .O = 32, .k = 3, .s = 1, .p = 1},
        {.B = 4, .C = 64, .H = 8, .W = 8, .O = 64, .k = 3, .s = 1, .p = 1},
        {.B = 3, .C = 16, .H = 7, .W = 12, .O = 32, .k = 3, .s = 1, .p = 1},
        {.B = 2, .C = 48, .H = 5, .W = 4, .O = 16, .k = 3, .s = 1, .p = 1},
    };
    /* 32 and 64 channels take the fused Winograd unless direct is asked for */
    sp_dnnl_algo was = sp_dnnl_conv_algo();
    sp_dnnl_conv_algo_set(SP_DNNL_DIRECT);
    for (int threads = 1; threads <= 2; threads++) {
        sp_set_threads(threads);
        for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) check_against_reference(&cfgs[i], 270 + i);
    }
    sp_dnnl_conv_algo_set(was);
    sp_set_threads(1);
}

/* Winograd F(2×2, 3×3) on the 8-channel blocked layout (core/kernels/wino_b8.c): taken on
 * AVX2 for stride 1, padding 1, ≥ 64 input and output channels in eights, planes of at
 * least 4×4; its forward, δ and G (F(3×3, 2×2)) match the direct loops on VGG-11's
 * shapes, odd planes (tiles half outside), channels that are not a multiple of 16 and a
 * batch over several runs (of a slot's forward and δ, of G's 16 samples), at 1 and 2
 * threads. */
Test(conv_paths, wino_b8_3x3)
{
    bool avx2 = sp_cpu_isa_level() == 1;
    cr_assert_eq(sp_wino_b8_on(64, 128, 16, 16, 3, 1, 1), avx2);
    cr_assert_eq(sp_wino_b8_on(512, 512, 4, 4, 3, 1, 1), avx2);
    cr_assert_eq(sp_wino_b8_on(72, 64, 5, 7, 3, 1, 1), avx2);
    cr_assert(!sp_wino_b8_on(32, 64, 8, 8, 3, 1, 1) && !sp_wino_b8_on(64, 60, 8, 8, 3, 1, 1));
    cr_assert(!sp_wino_b8_on(512, 512, 2, 2, 3, 1, 1) && !sp_wino_b8_on(64, 64, 8, 8, 3, 2, 1));
    cr_assert(!sp_wino_b8_on(64, 64, 8, 8, 5, 1, 2) && !sp_wino_b8_on(64, 64, 8, 8, 3, 1, 0));
    if (!avx2 || !sp_dnnl_conv_on()) cr_skip_test("Winograd on the blocked layout runs on AVX2 with oneDNN on; ISA level %d", sp_cpu_isa_level());
    static const conv_cfg cfgs[] = {
        {.B = 3, .C = 64, .H = 16, .W = 16, .O = 128, .k = 3, .s = 1, .p = 1},   /* VGG-11's conv2 */
        {.B = 2, .C = 128, .H = 8, .W = 8, .O = 256, .k = 3, .s = 1, .p = 1},    /* conv3 */
        {.B = 2, .C = 256, .H = 4, .W = 4, .O = 512, .k = 3, .s = 1, .p = 1},    /* conv5 */
        {.B = 3, .C = 72, .H = 5, .W = 7, .O = 64, .k = 3, .s = 1, .p = 1},
        {.B = 17, .C = 256, .H = 8, .W = 8, .O = 256, .k = 3, .s = 1, .p = 1},  /* runs of 8 (forward, δ) and 16 (G) */
    };
    for (int threads = 1; threads <= 2; threads++) {
        sp_set_threads(threads);
        for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) check_against_reference(&cfgs[i], 370 + i);
    }
    sp_set_threads(1);
}

/* Winograd F(2×2, 3×3) in its fused form (a sample at a time, in strips of tile rows):
 * taken on AVX2 for stride 1, padding 1, 32 to 64 input and output channels in sixteens,
 * in place of the blocked direct kernel (ResNet-20's second and third stages). Its
 * forward, δ (into dx and added to it) and G match the direct loops on those shapes, a
 * plane with several strips and a last strip shorter than the rest, odd planes (tiles half
 * outside), channels in and out that differ, and a batch that splits unevenly into G's
 * eight groups, at 1 and 2 threads (NCHW in and out: the blocked copies; the blocked
 * layout itself: conv_blocked on ResNet-20). */
Test(conv_paths, wino_b8_fused)
{
    bool avx2 = sp_cpu_isa_level() == 1;
    cr_assert_eq(sp_wino_b8_fused_on(32, 32, 16, 16, 3, 1, 1), avx2);
    cr_assert_eq(sp_wino_b8_fused_on(64, 48, 5, 7, 3, 1, 1), avx2);
    cr_assert(!sp_wino_b8_fused_on(16, 16, 32, 32, 3, 1, 1) && !sp_wino_b8_fused_on(32, 40, 8, 8, 3, 1, 1));
    cr_assert(!sp_wino_b8_fused_on(128, 64, 8, 8, 3, 1, 1) && !sp_wino_b8_fused_on(32, 32, 16, 16, 3, 2, 1));
    cr_assert(!sp_wino_b8_fused_on(32, 32, 2, 2, 3, 1, 1) && !sp_wino_b8_fused_on(32, 32, 8, 8, 3, 1, 0));
    if (!avx2 || !sp_dnnl_conv_on()) cr_skip_test("Winograd on the blocked layout runs on AVX2 with oneDNN on; ISA level %d", sp_cpu_isa_level());
    static const conv_cfg cfgs[] = {
        {.B = 3, .C = 32, .H = 16, .W = 16, .O = 32, .k = 3, .s = 1, .p = 1},   /* ResNet-20's stages */
        {.B = 2, .C = 64, .H = 8, .W = 8, .O = 64, .k = 3, .s = 1, .p = 1},
        {.B = 2, .C = 32, .H = 30, .W = 30, .O = 48, .k = 3, .s = 1, .p = 1},   /* 15 × 15 tiles: 5 strips of 45 */
        {.B = 3, .C = 48, .H = 7, .W = 9, .O = 32, .k = 3, .s = 1, .p = 1},     /* odd plane: one strip of 20 */
        {.B = 11, .C = 32, .H = 8, .W = 12, .O = 64, .k = 3, .s = 1, .p = 1},   /* G: 8 groups of 1-2 samples */
    };
    for (int threads = 1; threads <= 2; threads++) {
        sp_set_threads(threads);
        for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) check_against_reference(&cfgs[i], 470 + i);
    }
    sp_set_threads(1);
}

/* The direct kernel for few input channels (core/kernels/conv_direct.c): taken on AVX2
 * (sp_cpu_isa_level() == 1, e.g. DNNL_MAX_CPU_ISA=AVX2 on an AVX-512 CPU) for C <= 3,
 * stride 1, k 3 or 5; its forward (+ ReLU in the kernel) and G match the direct loops for
 * output channels that are not a multiple of its blocks (3 and 2), rows wider than one
 * 32-column chunk, paddings 0-2, at 1 and 2 threads. */
Test(conv_paths, direct_kernel_few_channels)
{
    bool avx2 = sp_cpu_isa_level() == 1;
    cr_assert_eq(sp_conv_direct_on(1, 6, 5, 2, 1), avx2);
    cr_assert_eq(sp_conv_direct_on(3, 7, 3, 1, 1), avx2);
    cr_assert(!sp_conv_direct_on(4, 16, 3, 1, 1) && !sp_conv_direct_on(1, 6, 5, 2, 2) && !sp_conv_direct_on(1, 6, 4, 1, 1));
    if (!avx2 || !sp_dnnl_conv_on()) cr_skip_test("the direct kernel runs on AVX2 with oneDNN on; ISA level %d", sp_cpu_isa_level());
    static const conv_cfg cfgs[] = {
        {.B = 5, .C = 1, .H = 28, .W = 28, .O = 6, .k = 5, .s = 1, .p = 2},   /* LeNet-5's conv1 */
        {.B = 3, .C = 3, .H = 32, .W = 32, .O = 7, .k = 3, .s = 1, .p = 1},   /* VGG-11's, 7 outputs */
        {.B = 4, .C = 2, .H = 9, .W = 45, .O = 5, .k = 5, .s = 1, .p = 0},    /* 41 columns: two chunks */
        {.B = 2, .C = 1, .H = 6, .W = 70, .O = 1, .k = 3, .s = 1, .p = 2},    /* 72 columns, one output */
    };
    for (int threads = 1; threads <= 2; threads++) {
        sp_set_threads(threads);
        for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) check_against_reference(&cfgs[i], 170 + i);
    }
    sp_set_threads(1);
    /* the forward with its ReLU folded in, as LeNet-5 runs it */
    sp_model *m = sp_model_new("c1relu");
    sp_model_add(m, sp_conv2d("c1", 1, 6, 5, 1, 2));
    sp_model_add(m, sp_relu());
    sp_model_init(m, 9);
    float x[3 * 28 * 28];
    tu_fill_uniform(x, sizeof x / sizeof *x, 4, -1, 1);
    sp_tape t;
    sp_tape_init(&t);
    t.reuse_inputs = true;   /* the training step's forward: the ReLU folded into the conv */
    cr_assert(sp_model_fuses_relu(m, &t, 0, SP_CPU));
    sp_tensor xt = sp_tensor_4d(x, 3, 1, 28, 28);
    sp_node *out = sp_model_forward(m, &t, sp_tape_input(&t, &xt));
    const float *w = m->layers[0]->params[0]->value.data, *b = m->layers[0]->params[1]->value.data;
    double worst = 0;
    for (int n = 0; n < 3; n++)
        for (int o = 0; o < 6; o++)
            for (int i = 0; i < 28; i++)
                for (int j = 0; j < 28; j++) {
                    double acc = b[o];
                    for (int u = 0; u < 5; u++)
                        for (int v = 0; v < 5; v++) {
                            int h = i + u - 2, c = j + v - 2;
                            if (h >= 0 && h < 28 && c >= 0 && c < 28) acc += (double)w[o * 25 + u * 5 + v] * x[n * 784 + h * 28 + c];
                        }
                    acc = acc > 0 ? acc : 0;
                    double e = fabs(out->out.data[((n * 6 + o) * 28 + i) * 28 + j] - acc);
                    worst = e > worst ? e : worst;
                }
    cr_assert_lt(worst, 1e-5, "conv + ReLU: max abs err %.2e", worst);
    sp_tape_free(&t);
    sp_model_free(m);
}

/* The wide direct kernel (core/kernels/conv_direct.c): on AVX2 it takes 4 to 16 input
 * channels into 16·n outputs, 5×5, stride 1, padding below 5, in place of oneDNN
 * (LeNet-5's conv2); its forward, δ and G match the direct loops for LeNet-5's shape, two
 * output blocks with rows that are not a multiple of its 5-column groups and padding 2
 * (δ: 13 columns of a 16-column chunk, 4 channels), and 16 input channels with padding 1
 * (δ: groups of 6, 6 and 4 channels), at 1 and 2 threads. */
Test(conv_paths, direct_kernel_wide)
{
    bool avx2 = sp_cpu_isa_level() == 1;
    cr_assert_eq(sp_conv_direct_on(6, 16, 5, 0, 1), avx2);
    cr_assert_eq(sp_conv_direct_on(16, 32, 5, 2, 1), avx2);
    cr_assert(!sp_conv_direct_on(6, 8, 5, 0, 1) && !sp_conv_direct_on(17, 16, 5, 0, 1) &&
              !sp_conv_direct_on(6, 16, 3, 1, 1) && !sp_conv_direct_on(6, 16, 5, 0, 2) && !sp_conv_direct_on(6, 16, 5, 5, 1));
    if (!avx2 || !sp_dnnl_conv_on()) cr_skip_test("the direct kernel runs on AVX2 with oneDNN on; ISA level %d", sp_cpu_isa_level());
    static const conv_cfg cfgs[] = {
        {.B = 5, .C = 6, .H = 14, .W = 14, .O = 16, .k = 5, .s = 1, .p = 0},   /* LeNet-5's conv2 */
        {.B = 3, .C = 4, .H = 9, .W = 13, .O = 32, .k = 5, .s = 1, .p = 2},    /* 13 columns, two blocks */
        {.B = 2, .C = 16, .H = 7, .W = 8, .O = 16, .k = 5, .s = 1, .p = 1},    /* 16 channels, 6 columns */
    };
    for (int threads = 1; threads <= 2; threads++) {
        sp_set_threads(threads);
        for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) check_against_reference(&cfgs[i], 190 + i);
    }
    sp_set_threads(1);
}

/* Winograd (SCANPROP_CONV_ALGO; core/kernels/dnnl.h): the rule asks for it for 3×3
 * stride-1 convolutions of ≥ 32 channels at ≥ 8×8 and direct elsewhere; where oneDNN runs
 * it (AVX-512), it matches the direct loops within the same tolerance as direct, takes
 * other roundings than direct (so the switch is real), repeats bitwise, and under auto
 * stays within its scratch cap. */
Test(conv_paths, winograd_rule_and_results)
{
    sp_dnnl_conv vgg2 = {.B = 16, .C = 64, .H = 16, .W = 16, .O = 128, .k = 3, .stride = 1, .pad = 1, .Ho = 16, .Wo = 16};
    sp_dnnl_conv small = vgg2, thin = vgg2, strided = vgg2, five = vgg2;
    small.H = small.W = small.Ho = small.Wo = 4;   /* VGG-11's conv5: 4×4, direct */
    thin.C = thin.O = 16;                          /* ResNet-20's first stage: direct */
    strided.stride = 2, strided.Ho = strided.Wo = 8;
    five.k = 5;
    sp_dnnl_algo was = sp_dnnl_conv_algo();
    sp_dnnl_conv_algo_set(SP_DNNL_AUTO);
    cr_assert(sp_dnnl_conv_wants_winograd(&vgg2));
    cr_assert(!sp_dnnl_conv_wants_winograd(&small) && !sp_dnnl_conv_wants_winograd(&thin));
    cr_assert(!sp_dnnl_conv_wants_winograd(&strided) && !sp_dnnl_conv_wants_winograd(&five));
    sp_dnnl_conv_algo_set(SP_DNNL_WINOGRAD);
    cr_assert(sp_dnnl_conv_wants_winograd(&small) && sp_dnnl_conv_wants_winograd(&thin));
    cr_assert(!sp_dnnl_conv_wants_winograd(&strided) && !sp_dnnl_conv_wants_winograd(&five));
    sp_dnnl_conv_algo_set(SP_DNNL_DIRECT);
    cr_assert(!sp_dnnl_conv_wants_winograd(&vgg2));

    if (!sp_dnnl_conv_on() || sp_dnnl_block() != 16) {
        sp_dnnl_conv_algo_set(was);
        cr_skip_test("oneDNN's Winograd runs on AVX-512 only; this run has block %d", sp_dnnl_block());
    }
    static const conv_cfg cfgs[] = {
        {.B = 4, .C = 64, .H = 16, .W = 16, .O = 128, .k = 3, .s = 1, .p = 1},   /* VGG-11's conv2 */
        {.B = 5, .C = 64, .H = 8, .W = 8, .O = 64, .k = 3, .s = 1, .p = 1},      /* ResNet-20's stage 3 */
        {.B = 3, .C = 32, .H = 11, .W = 9, .O = 48, .k = 3, .s = 1, .p = 1},     /* odd sizes: partial tiles */
    };
    for (int threads = 1; threads <= 2; threads++) {
        sp_set_threads(threads);
        for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) {
            const conv_cfg *c = &cfgs[i];
            sp_dnnl_conv k = {.B = c->B, .C = c->C, .H = c->H, .W = c->W, .O = c->O, .k = 3, .stride = 1, .pad = 1,
                              .Ho = c->H, .Wo = c->W};
            sp_dnnl_conv_algo_set(SP_DNNL_DIRECT);
            conv_run D = conv_run_new(c);
            conv_run_op(c, 90 + i, &D);
            cr_assert(!sp_dnnl_conv_runs_winograd(&k));
            sp_dnnl_conv_algo_set(SP_DNNL_WINOGRAD);
            cr_assert(sp_dnnl_conv_runs_winograd(&k), "B%d C%d %dx%d: oneDNN has no Winograd for it", c->B, c->C,
                      c->H, c->W);
            check_against_reference(c, 90 + i);
            conv_run W = conv_run_new(c), W2 = conv_run_new(c);
            conv_run_op(c, 90 + i, &W);
            conv_run_op(c, 90 + i, &W2);
            cr_assert(memcmp(W.y, D.y, W.ny * sizeof(float)) != 0, "C%d %dx%d: Winograd's forward has direct's bits",
                      c->C, c->H, c->W);
            cr_assert(memcmp(W.y, W2.y, W.ny * sizeof(float)) == 0 && memcmp(W.dx, W2.dx, W.nx * sizeof(float)) == 0 &&
                          memcmp(W.dW, W2.dW, W.nw * sizeof(float)) == 0,
                      "C%d %dx%d: two Winograd runs differ", c->C, c->H, c->W);
            conv_run_free(&D), conv_run_free(&W), conv_run_free(&W2);
        }
    }
    /* auto's scratch cap: ResNet-20's 64 channels take Winograd, VGG-11's 256 do not */
    sp_set_threads(1);
    sp_dnnl_conv r64 = {.B = 32, .C = 64, .H = 8, .W = 8, .O = 64, .k = 3, .stride = 1, .pad = 1, .Ho = 8, .Wo = 8};
    sp_dnnl_conv v256 = r64;
    v256.B = 16, v256.C = v256.O = 256;
    sp_dnnl_conv_algo_set(SP_DNNL_AUTO);
    cr_assert(sp_dnnl_conv_wants_winograd(&v256) && !sp_dnnl_conv_runs_winograd(&v256),
              "auto took Winograd beyond its scratch cap");
    cr_assert(sp_dnnl_conv_runs_winograd(&r64));
    sp_dnnl_conv_algo_set(SP_DNNL_WINOGRAD);
    cr_assert(sp_dnnl_conv_runs_winograd(&v256));
    sp_dnnl_conv_algo_set(was);
}

Test(conv, grad_accumulates)
{
    conv_cfg c = {.B = 3, .C = 2, .H = 6, .W = 5, .O = 3, .k = 3, .s = 1, .p = 1};
    sp_layer *l = sp_conv2d("c", c.C, c.O, c.k, c.s, c.p);
    sp_rng r;
    sp_rng_seed(&r, 5);
    l->op->init_params(l, &r);
    float x[3 * 2 * 6 * 5], dy[3 * 3 * 6 * 5];
    tu_fill_uniform(x, sizeof x / sizeof *x, 1, -1, 1);
    tu_fill_uniform(dy, sizeof dy / sizeof *dy, 2, -1, 1);
    sp_tape t;
    sp_tape_init(&t);
    sp_tensor xt = sp_tensor_4d(x, c.B, c.C, c.H, c.W);
    sp_node *n = sp_apply(&t, l, sp_tape_input(&t, &xt));
    sp_tensor dyt = sp_tensor_view(dy, 4, n->out.shape);
    sp_tensor_zero(&l->params[0]->grad);
    sp_tensor_zero(&l->params[1]->grad);
    n->kern->backward_params(n, &dyt);
    float once_w = l->params[0]->grad.data[7], once_b = l->params[1]->grad.data[1];
    n->kern->backward_params(n, &dyt);
    cr_assert_float_eq(l->params[0]->grad.data[7], 2 * once_w, 1e-5);
    cr_assert_float_eq(l->params[1]->grad.data[1], 2 * once_b, 1e-5);
    cr_assert_neq(once_w, 0.0f);
    sp_tape_free(&t);
    sp_layer_free(l);
}

/* Max pooling: padding as −inf, first maximum in window order. */
static void ref_maxpool(const conv_cfg *c, const float *x, float *y)
{
    int Ho = out_size(c->H, c->k, c->s, c->p), Wo = out_size(c->W, c->k, c->s, c->p);
    for (int b = 0; b < c->B; b++)
        for (int ch = 0; ch < c->C; ch++)
            for (int i = 0; i < Ho; i++)
                for (int j = 0; j < Wo; j++) {
                    float m = -INFINITY;
                    for (int kh = 0; kh < c->k; kh++)
                        for (int kw = 0; kw < c->k; kw++) {
                            int h = i * c->s - c->p + kh, w = j * c->s - c->p + kw;
                            if (h >= 0 && h < c->H && w >= 0 && w < c->W && X4(x, *c, b, ch, h, w) > m)
                                m = X4(x, *c, b, ch, h, w);
                        }
                    y[(((size_t)b * c->C + ch) * Ho + i) * Wo + j] = m;
                }
}

Test(maxpool_reference, forward_matches_direct_loops)
{
    sp_rng r;
    sp_rng_seed(&r, 41);
    for (int t = 0; t < 24; t++) {
        int k = 1 + t % 4, s = 1 + t / 4 % 3, p = t % 2 && k / 2 >= 1 ? k / 2 : 0;
        conv_cfg c = random_cfg(&r, k, s, p, 12);
        size_t nx = (size_t)c.B * c.C * c.H * c.W;
        int Ho = out_size(c.H, k, s, p), Wo = out_size(c.W, k, s, p);
        size_t ny = (size_t)c.B * c.C * Ho * Wo;
        float *x = malloc(nx * sizeof(float)), *ref = malloc(ny * sizeof(float));
        tu_fill_uniform(x, nx, 60 + t, -1, 1);
        for (size_t i = 0; i < nx; i += 5) x[i] = -0.25f;   /* some ties: the value is the same either way */
        ref_maxpool(&c, x, ref);
        sp_layer *l = sp_maxpool2d(k, s, p);
        sp_tape tp;
        sp_tape_init(&tp);
        sp_tensor xt = sp_tensor_4d(x, c.B, c.C, c.H, c.W);
        sp_node *n = sp_apply(&tp, l, sp_tape_input(&tp, &xt));
        cr_assert_eq(n->out.shape[2], Ho);
        cr_assert_eq(n->out.shape[3], Wo);
        cr_assert_eq(memcmp(n->out.data, ref, ny * sizeof(float)), 0, "maxpool k%d s%d p%d %dx%d differs", k, s, p,
                     c.H, c.W);
        sp_tape_free(&tp);
        sp_layer_free(l);
        free(x), free(ref);
    }
}

/* δ of a 1×1×2×3 input under k2 s1 (two windows overlapping in column 1). */
static void pool_delta_2x3(const float x[6], float dx[6])
{
    float dy[2] = {10, 20};
    sp_layer *l = sp_maxpool2d(2, 1, 0);
    sp_tape t;
    sp_tape_init(&t);
    sp_tensor xt = sp_tensor_4d((float *)x, 1, 1, 2, 3);
    sp_node *n = sp_apply(&t, l, sp_tape_input(&t, &xt));
    cr_assert_eq(n->out.numel, 2);
    sp_tensor dyt = sp_tensor_view(dy, 4, n->out.shape), dxt = sp_tensor_4d(dx, 1, 1, 2, 3);
    n->kern->backward_input(n, 0, &dyt, &dxt);
    sp_tape_free(&t);
    sp_layer_free(l);
}

Test(maxpool, ties_pick_first_and_overlaps_accumulate)
{
    float dx[6];
    pool_delta_2x3((float[]){1, 1, 1, 0, 0, 0}, dx);   /* ties: window 0 → x[0], window 1 → x[1] */
    float want_ties[6] = {10, 20, 0, 0, 0, 0};
    for (int i = 0; i < 6; i++) cr_assert_eq(dx[i], want_ties[i], "ties: dx[%d] = %g", i, dx[i]);
    pool_delta_2x3((float[]){0, 5, 0, 0, 0, 0}, dx);   /* both windows pick x[1] */
    float want_overlap[6] = {0, 30, 0, 0, 0, 0};
    for (int i = 0; i < 6; i++) cr_assert_eq(dx[i], want_overlap[i], "overlap: dx[%d] = %g", i, dx[i]);
}

/* ---- shapes, init, cost -------------------------------------------------------------- */

Test(conv, output_shape_init_and_cost)
{
    sp_layer *l = sp_conv2d("conv1", 3, 4, 3, 2, 1);
    cr_assert_str_eq(l->params[0]->name, "conv1.weight");
    cr_assert_str_eq(l->params[1]->name, "conv1.bias");
    cr_assert_eq(l->params[0]->value.shape[0], 4);
    cr_assert_eq(l->params[0]->value.shape[1], 3);
    cr_assert_eq(l->params[0]->value.shape[3], 3);
    sp_rng r;
    sp_rng_seed(&r, 1);
    l->op->init_params(l, &r);
    float bound = 1.0f / sqrtf(27.0f), wmax = 0, bmax = 0;
    for (size_t i = 0; i < l->params[0]->value.numel; i++) wmax = fmaxf(wmax, fabsf(l->params[0]->value.data[i]));
    for (size_t i = 0; i < l->params[1]->value.numel; i++) bmax = fmaxf(bmax, fabsf(l->params[1]->value.data[i]));
    cr_assert(wmax <= bound && wmax > 0.8f * bound, "weight bound %g, max |w| %g", bound, wmax);
    cr_assert(bmax <= bound && bmax > 0.2f * bound, "bias bound %g, max |b| %g", bound, bmax);

    sp_tape t;
    sp_tape_init(&t);
    t.shape_only = true;
    sp_tensor x = sp_tensor_4d(NULL, 5, 3, 7, 9);
    sp_node *n = sp_apply(&t, l, sp_tape_input(&t, &x));
    cr_assert_eq(n->out.ndim, 4);
    cr_assert_eq(n->out.shape[0], 5);
    cr_assert_eq(n->out.shape[1], 4);
    cr_assert_eq(n->out.shape[2], 4);   /* (7 + 2 − 3) / 2 + 1 */
    cr_assert_eq(n->out.shape[3], 5);   /* (9 + 2 − 3) / 2 + 1 */
    sp_cost cost = n->op->cost(n);
    double flops = 2.0 * 5 * 4 * 3 * 9 * 4 * 5;
    cr_assert_float_eq(cost.fwd_flops, flops, 1e-9);
    cr_assert_float_eq(cost.bwd_input_flops, flops, 1e-9);
    cr_assert_float_eq(cost.bwd_params_flops, flops, 1e-9);
    cr_assert_float_eq(cost.out_bytes, 4.0 * 5 * 4 * 4 * 5, 1e-9);
    cr_assert_float_eq(cost.param_bytes, 4.0 * (4 * 27 + 4), 1e-9);
    sp_tape_free(&t);
    sp_layer_free(l);
}

Test(maxpool, output_shape_and_cost)
{
    sp_layer *l = sp_maxpool2d(3, 2, 1);
    sp_tape t;
    sp_tape_init(&t);
    t.shape_only = true;
    sp_tensor x = sp_tensor_4d(NULL, 2, 5, 7, 8);
    sp_node *n = sp_apply(&t, l, sp_tape_input(&t, &x));
    cr_assert_eq(n->out.shape[1], 5);
    cr_assert_eq(n->out.shape[2], 4);   /* (7 + 2 − 3) / 2 + 1 */
    cr_assert_eq(n->out.shape[3], 4);   /* (8 + 2 − 3) / 2 + 1 = 4 (floor) */
    sp_cost cost = n->op->cost(n);
    cr_assert_float_eq(cost.fwd_flops, 2.0 * 5 * 4 * 4 * 9, 1e-9);
    cr_assert_float_eq(cost.saved_bytes, 4.0 * 2 * 5 * 4 * 4, 1e-9);
    sp_tape_free(&t);
    sp_layer_free(l);
}

/* ---- bad shapes and arguments are refused --------------------------------------------- */

/* A shape the layer refuses: sp_apply returns NULL naming it (core/tape.h), no exit. */
static void apply_shape(sp_layer *l, int ndim, const int *shape, const char *says)
{
    sp_tape t;
    sp_tape_init(&t);
    t.shape_only = true;
    sp_tensor x = sp_tensor_view(NULL, ndim, shape);
    sp_clear_error();
    tu_refused(!sp_apply(&t, l, sp_tape_input(&t, &x)), says);
    sp_tape_free(&t);
    sp_layer_free(l);
}

Test(conv_errors, wrong_channels)
{
    apply_shape(sp_conv2d("c", 3, 4, 3, 1, 1), 4, (int[]){2, 4, 8, 8}, "conv2d c: input [2, 4, 8, 8], expected [B, 3, H, W]");
}
Test(conv_errors, not_4d) { apply_shape(sp_conv2d("c", 3, 4, 3, 1, 1), 3, (int[]){3, 8, 8}, "conv2d c: input [3, 8, 8]"); }
Test(conv_errors, input_smaller_than_kernel)
{
    apply_shape(sp_conv2d("c", 1, 1, 5, 1, 1), 4, (int[]){1, 1, 2, 9}, "with H, W >= 3 (kernel 5, padding 1)");
}
Test(conv_errors, zero_stride) { tu_refused(!sp_conv2d("c", 1, 1, 3, 0, 0), "conv2d c: channels 1 -> 1, kernel 3, stride 0"); }
Test(conv_errors, negative_padding) { tu_refused(!sp_conv2d("c", 1, 1, 3, 1, -1), "padding -1"); }
Test(maxpool_errors, padding_over_half_kernel) { tu_refused(!sp_maxpool2d(2, 2, 2), "maxpool2d: kernel 2, stride 2, padding 2"); }
Test(maxpool_errors, zero_kernel) { tu_refused(!sp_maxpool2d(0, 1, 0), "maxpool2d: kernel 0"); }
Test(maxpool_errors, not_4d) { apply_shape(sp_maxpool2d(2, 2, 0), 2, (int[]){4, 16}, "maxpool2d: input [4, 16], expected [B, C, H, W]"); }
Test(maxpool_errors, input_smaller_than_kernel)
{
    apply_shape(sp_maxpool2d(3, 1, 0), 4, (int[]){1, 1, 5, 2}, "maxpool2d: input [1, 1, 5, 2]");
}

/* ---- determinism ----------------------------------------------------------------------- */

/* The same thread count gives the same bits (DESIGN.md). Across thread counts the
 * samples are grouped differently into GEMMs and G's per-thread partial sums differ,
 * so only the repeat is asserted for the whole op (both G paths, both GEMM widths). */
Test(conv, same_bits_on_repeat_with_2_threads)
{
    static const conv_cfg cfgs[] = {
        {.B = 9, .C = 32, .H = 17, .W = 15, .O = 48, .k = 3, .s = 1, .p = 1},
        {.B = 5, .C = 64, .H = 16, .W = 16, .O = 128, .k = 3, .s = 1, .p = 1},
    };
    sp_set_threads(2);
    for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) {
        const conv_cfg *c = &cfgs[i];
        conv_run a = conv_run_new(c), b = conv_run_new(c);
        conv_run_op(c, 3, &a);
        conv_run_op(c, 3, &b);
        cr_assert_eq(memcmp(a.y, b.y, a.ny * sizeof(float)), 0, "forward differs");
        cr_assert_eq(memcmp(a.dx, b.dx, a.nx * sizeof(float)), 0, "δ differs");
        cr_assert_eq(memcmp(a.dW, b.dW, a.nw * sizeof(float)), 0, "G weight differs");
        cr_assert_eq(memcmp(a.db, b.db, (size_t)c->O * sizeof(float)), 0, "G bias differs");
        conv_run_free(&a);
        conv_run_free(&b);
    }
}

/* im2col and col2im themselves fix their summation order: 1 and 2 threads agree. */
Test(im2col, same_bits_with_1_and_2_threads)
{
    sp_conv_geom g = {.C = 5, .H = 13, .W = 11, .k = 3, .stride = 2, .pad = 1};
    g.Ho = sp_conv_out_size(g.H, g.k, g.stride, g.pad);
    g.Wo = sp_conv_out_size(g.W, g.k, g.stride, g.pad);
    int B = 4;
    size_t nx = (size_t)B * g.C * g.H * g.W, ncol = (size_t)g.C * g.k * g.k * B * g.Ho * g.Wo;
    float *x = malloc(nx * sizeof(float)), *col[2], *dx[2];
    tu_fill_uniform(x, nx, 9, -1, 1);
    for (int t = 0; t < 2; t++) {
        col[t] = malloc(ncol * sizeof(float));
        dx[t] = malloc(nx * sizeof(float));
        sp_set_threads(t + 1);
        sp_im2col(&g, x, 0, B, col[t]);
        sp_col2im(&g, col[t], 0, B, dx[t]);
    }
    cr_assert_eq(memcmp(col[0], col[1], ncol * sizeof(float)), 0, "im2col differs");
    cr_assert_eq(memcmp(dx[0], dx[1], nx * sizeof(float)), 0, "col2im differs");
    /* col2im(im2col(x)) = x times the number of windows covering each input */
    for (int h = 0; h < g.H; h++)
        for (int w = 0; w < g.W; w++) {
            int i_lo, i_hi, j_lo, j_hi;
            sp_window_range(h, g.k, g.stride, g.pad, g.Ho, &i_lo, &i_hi);
            sp_window_range(w, g.k, g.stride, g.pad, g.Wo, &j_lo, &j_hi);
            size_t at = ((size_t)(3 * g.C + 4) * g.H + h) * g.W + w;   /* sample 3, channel 4 */
            cr_assert_float_eq(dx[0][at], x[at] * (float)((i_hi - i_lo) * (j_hi - j_lo)), 1e-6);
        }
    for (int t = 0; t < 2; t++) free(col[t]), free(dx[t]);
    free(x);
}

/* ---- a convolution with its ReLU folded in (sp_kernels.forward_relu) -------------------- */

typedef struct fused_run {
    float *logits, **grads, loss;
    bool fused, next;   /* layer 0 runs with its ReLU; and with the pool after it */
} fused_run;

/* One step of conv → ReLU → 2×2 max pool → fc on a fresh tape, backward by engine
 * (linear or ooo): with reuse (the training step's forward) the conv runs with the ReLU
 * and the pool folded in. */
static fused_run fused_step(sp_model *m, const sp_tensor *x, const int *y, bool reuse, const char *engine)
{
    for (int p = 0; p < m->nparams; p++) sp_zero(&m->params[p]->grad);
    sp_tape t;
    sp_tape_init(&t);
    t.reuse_inputs = reuse;
    fused_run r = {.fused = sp_model_fuses_relu(m, &t, 0, SP_CPU), .next = sp_model_fuses_relu_next(m, &t, 0, SP_CPU)};
    sp_node *loss = sp_model_loss(m, &t, x, y);
    const sp_tensor *lg = &loss->input->out;
    r.logits = malloc(lg->numel * sizeof(float));
    memcpy(r.logits, lg->data, lg->numel * sizeof(float));
    r.loss = loss->out.data[0];
    sp_engine *e = sp_engine_create(engine, NULL);
    cr_assert(e, "engine %s", engine);
    sp_backward(e, &t, loss);
    sp_engine_sync(e);
    sp_engine_destroy(e);
    r.grads = calloc((size_t)m->nparams, sizeof *r.grads);
    for (int p = 0; p < m->nparams; p++) {
        r.grads[p] = malloc(m->params[p]->grad.numel * sizeof(float));
        memcpy(r.grads[p], m->params[p]->grad.data, m->params[p]->grad.numel * sizeof(float));
    }
    sp_tape_free(&t);
    return r;
}

static void fused_free(fused_run *r, int nparams)
{
    for (int p = 0; p < nparams; p++) free(r->grads[p]);
    free(r->grads);
    free(r->logits);
}

static void compare_fused(const conv_cfg *c, uint64_t seed, const char *engine)
{
    sp_model *m = sp_model_new("fused");
    sp_model_set_loss(m, sp_softmax_ce());
    sp_model_add(m, sp_conv2d("conv", c->C, c->O, c->k, c->s, c->p));
    sp_model_add(m, sp_relu());
    sp_model_add(m, sp_maxpool2d(2, 2, 0));
    sp_model_add(m, sp_flatten());
    int ho = out_size(c->H, c->k, c->s, c->p) / 2, wo = out_size(c->W, c->k, c->s, c->p) / 2;
    sp_model_add(m, sp_linear("fc", c->O * ho * wo, 10));
    sp_model_init(m, seed);
    sp_tensor x = sp_tensor_new(4, (int[]){c->B, c->C, c->H, c->W});
    tu_fill_uniform(x.data, x.numel, seed + 1, -1, 1);
    int y[16];
    for (int b = 0; b < c->B; b++) y[b] = (int)((seed + 3 * (uint64_t)b) % 10);
    fused_run a = fused_step(m, &x, y, false, engine), f = fused_step(m, &x, y, true, engine);
    cr_assert(!a.fused && f.fused && !a.next && f.next,
              "the training step's forward folds the ReLU and the pool into the conv (and only it)");
    cr_assert(memcmp(&a.loss, &f.loss, sizeof a.loss) == 0 &&
                  memcmp(a.logits, f.logits, (size_t)c->B * 10 * sizeof(float)) == 0,
              "conv %dx%dx%d → %d, k %d, %s: loss or logits differ with the ReLU and pool folded into the conv", c->C,
              c->H, c->W, c->O, c->k, engine);
    for (int p = 0; p < m->nparams; p++)
        cr_assert(memcmp(a.grads[p], f.grads[p], m->params[p]->grad.numel * sizeof(float)) == 0,
                  "conv %dx%dx%d → %d, k %d, %s: grad of %s differs with the ReLU and pool folded into the conv",
                  c->C, c->H, c->W, c->O, c->k, engine, m->params[p]->name);
    fused_free(&a, m->nparams), fused_free(&f, m->nparams);
    sp_tensor_free(&x);
    sp_model_free(m);
}

/* conv + ReLU (+ the max pool after it) in one region is bitwise the ops one by one, on
 * both paths (oneDNN and im2col) and both of oneDNN's (a conv of 1 input channel runs
 * im2col there too), 1–3 threads, the linear and ooo engines' backward. */
Test(conv_relu, fused_forward_matches_conv_then_relu_bitwise)
{
    static const conv_cfg cfgs[] = {
        {.B = 8, .C = 1, .H = 28, .W = 28, .O = 6, .k = 5, .s = 1, .p = 2},   /* LeNet-5's conv1 */
        {.B = 8, .C = 6, .H = 14, .W = 14, .O = 16, .k = 5, .s = 1, .p = 0},  /* and conv2 */
        {.B = 3, .C = 17, .H = 11, .W = 10, .O = 20, .k = 3, .s = 1, .p = 1},
        {.B = 5, .C = 3, .H = 9, .W = 9, .O = 4, .k = 3, .s = 2, .p = 1},
    };
    bool was = sp_dnnl_conv_on();
    for (int dnnl = 0; dnnl <= 1; dnnl++) {
        if (!sp_dnnl_conv_set(dnnl)) continue;
        for (int threads = 1; threads <= 3; threads++) {
            sp_set_threads(threads);
            for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) {
                compare_fused(&cfgs[i], 90 + i, "linear");
                compare_fused(&cfgs[i], 90 + i, "ooo");
            }
        }
    }
    sp_dnnl_conv_set(was);
    sp_set_threads(1);
}
/* ---- activations in oneDNN's blocked layout (sp_tensor.blk, sp_tape.blocked) ---------- */

#include "core/model.h"
#include "layers/zoo.h"
#include "schedulers/backward/engine.h"

/* One training step of m on tape t (blocked or not): the loss, every parameter's grad
 * and every buffer, copied out in that order; *nblocked: nodes whose output was blocked.
 * reuse: the training loop's forward (a conv's ReLU folded in, sp_tape.reuse_inputs). */
static float *model_step(sp_model *m, const char *engine, bool blocked, bool reuse, const sp_tensor *x, const int *y,
                         size_t *len, int *nblocked)
{
    sp_tape t;
    sp_tape_init(&t);
    t.blocked = blocked;
    t.reuse_inputs = reuse;
    sp_model_zero_grad(m);
    sp_node *loss = sp_model_loss(m, &t, x, y);
    sp_engine *e = sp_engine_create(engine, NULL);
    cr_assert(e);
    sp_backward(e, &t, loss);
    sp_engine_sync(e);
    *nblocked = 0;
    for (int i = 0; i < t.n; i++) *nblocked += t.nodes[i]->out.blk != 0;
    size_t n = 1;
    for (int i = 0; i < sp_model_nstate(m); i++) n += sp_model_state(m, i)->value.numel;
    for (int i = 0; i < m->nparams; i++) n += m->params[i]->grad.numel;
    float *out = malloc(n * sizeof *out), *o = out;
    *o++ = loss->out.data[0];
    for (int i = 0; i < m->nparams; i++, o += m->params[i - 1]->grad.numel)
        memcpy(o, m->params[i]->grad.data, m->params[i]->grad.numel * sizeof *o);
    for (int i = 0; i < sp_model_nstate(m); i++, o += sp_model_state(m, i - 1)->value.numel)
        memcpy(o, sp_model_state(m, i)->value.data, sp_model_state(m, i)->value.numel * sizeof *o);
    *len = n;
    sp_engine_destroy(e);
    sp_tape_free(&t);
    return out;
}

/* ResNet-20's step with its activations blocked between the convolutions gives the bits
 * of the NCHW step: loss, gradients, updated running statistics; with 1 and 2 threads,
 * on the linear engine and on ooo (δ and G apart, each reading the blocked dy). */
Test(conv_blocked, resnet20_step_bitwise_as_nchw, .timeout = 120)
{
    sp_dnnl_conv_set(true);
    int blk = sp_dnnl_block();
    if (!blk) {
        cr_log_warn("conv_blocked: oneDNN off or picks no channel block here: nothing to compare");
        return;
    }
    for (int threads = 1; threads <= 2; threads++) {
        sp_set_threads(threads);
        sp_tensor x = sp_tensor_new(4, (int[]){5, 1, 16, 16});
        sp_rng r;
        sp_rng_seed(&r, 7);
        for (size_t i = 0; i < x.numel; i++) x.data[i] = sp_rng_normal(&r);
        int y[5] = {1, 3, 0, 9, 3};
        float *got[3];
        size_t len[3];
        int nb[3];
        const char *engine[3] = {"linear", "linear", "ooo"};
        for (int b = 0; b < 3; b++) {   /* the same initial state for each */
            sp_model *m = sp_zoo_resnet20(1, 10);
            sp_model_init(m, 3);
            got[b] = model_step(m, engine[b], b > 0, false, &x, y, &len[b], &nb[b]);
            sp_model_free(m);
        }
        cr_assert_eq(nb[0], 0, "NCHW step: %d blocked outputs", nb[0]);
        for (int b = 1; b < 3; b++) {
            /* every conv, bn and add_relu output: all nodes but the input, the pool, fc, loss */
            cr_assert_gt(nb[b], 40, "%s blocked step (nChw%dc): only %d blocked outputs", engine[b], blk, nb[b]);
            cr_assert_eq(len[0], len[b]);
            for (size_t i = 0; i < len[0]; i++)
                cr_assert(memcmp(&got[0][i], &got[b][i], sizeof(float)) == 0,
                          "%s, %d threads: value %zu (0: the loss, then grads, then state): NCHW %.9g, blocked %.9g",
                          engine[b], threads, i, got[0][i], got[b][i]);
        }
        for (int b = 0; b < 3; b++) free(got[b]);
        sp_tensor_free(&x);
    }
    sp_set_threads(1);
}

/* VGG-11's step with its activations blocked from the first convolution to the last
 * pool's input (biased convs, their ReLU folded in, max pools) gives the bits of the
 * NCHW step, linear and ooo, 1 and 2 threads. */
Test(conv_blocked, vgg11_step_bitwise_as_nchw, .timeout = 120)
{
    sp_dnnl_conv_set(true);
    int blk = sp_dnnl_block();
    if (!blk) {
        cr_log_warn("conv_blocked: oneDNN off or picks no channel block here: nothing to compare");
        return;
    }
    sp_model *probe = sp_zoo_vgg11(1, 10);
    bool make[64] = {0};
    cr_assert_lt(probe->nlayers, 64);
    sp_model_blocked_plan(probe, make);
    int nmake = 0, last = -1;
    for (int i = 0; i < probe->nlayers; i++)
        if (make[i]) nmake++, last = i;
    cr_assert_eq(nmake, 7, "VGG-11: conv1-conv7 write blocked outputs (%d do)", nmake);
    cr_assert(!make[last + 2] && strcmp(probe->layers[last + 2]->op->name, "conv2d") == 0,
              "conv8 writes NCHW: its pool's output reaches the flatten");
    sp_model_free(probe);
    for (int threads = 1; threads <= 2; threads++) {
        sp_set_threads(threads);
        sp_tensor x = sp_tensor_new(4, (int[]){3, 1, 32, 32});
        sp_rng r;
        sp_rng_seed(&r, 17);
        for (size_t i = 0; i < x.numel; i++) x.data[i] = sp_rng_normal(&r);
        int y[3] = {4, 0, 7};
        float *got[3];
        size_t len[3];
        int nb[3];
        const char *engine[3] = {"linear", "linear", "ooo"};
        for (int b = 0; b < 3; b++) {
            sp_model *m = sp_zoo_vgg11(1, 10);
            sp_model_init(m, 5);
            got[b] = model_step(m, engine[b], b > 0, true, &x, y, &len[b], &nb[b]);
            sp_model_free(m);
        }
        cr_assert_eq(nb[0], 0, "NCHW step: %d blocked outputs", nb[0]);
        for (int b = 1; b < 3; b++) {
            /* conv1-conv7 with their ReLU and pools (the last conv, its pool, the classifier NCHW) */
            cr_assert_geq(nb[b], 7 * 2 + 4, "%s blocked step (nChw%dc): only %d blocked outputs", engine[b], blk, nb[b]);
            cr_assert_eq(len[0], len[b]);
            for (size_t i = 0; i < len[0]; i++)
                cr_assert(memcmp(&got[0][i], &got[b][i], sizeof(float)) == 0,
                          "%s, %d threads: value %zu (0: the loss, then grads): NCHW %.9g, blocked %.9g", engine[b],
                          threads, i, got[0][i], got[b][i]);
        }
        for (int b = 0; b < 3; b++) free(got[b]);
        sp_tensor_free(&x);
    }
    sp_set_threads(1);
}

/* Max pooling on a blocked input: the NCHW bits (outputs, argmax ties, δ with windows
 * that overlap or leave inputs out), for both blocks, 2×2 windows on odd sizes and
 * strided 3×3 windows with padding. */
Test(conv_blocked, maxpool_bitwise_as_nchw)
{
    static const int geo[3][5] = {{7, 9, 2, 2, 0}, {8, 8, 3, 2, 1}, {5, 6, 3, 1, 1}};   /* H W k s p */
    for (int k = 8; k <= 16; k += 8)
        for (int gi = 0; gi < 3; gi++) {
            const int *G = geo[gi];
            sp_tensor xp = sp_tensor_new(4, (int[]){2, 32, G[0], G[1]});
            tu_fill_uniform(xp.data, xp.numel, 40 + gi, -1, 1);
            for (size_t i = 0; i < xp.numel; i += 7) xp.data[i] = 0.5f;   /* ties */
            sp_tensor xb = sp_tensor_new(4, xp.shape);
            xb.blk = k;
            sp_tensor_from_plain(&xb, xp.data, xb.data);
            float *out[2], *dxs[2];
            size_t ny = 0;
            for (int v = 0; v < 2; v++) {
                sp_tape t;
                sp_tape_init(&t);
                sp_layer *pool = sp_maxpool2d(G[2], G[3], G[4]);
                sp_node *n = sp_apply(&t, pool, sp_tape_input(&t, v ? &xb : &xp));
                cr_assert(n, "%s", sp_last_error());
                cr_assert_eq(n->out.blk, v ? k : 0, "the output in the input's layout");
                ny = n->out.numel;
                sp_tensor dy = sp_tape_tensor_like(&t, &n->out), dx = sp_tape_tensor_like(&t, v ? &xb : &xp);
                float *dyp = malloc(ny * sizeof *dyp);
                tu_fill_uniform(dyp, ny, 50 + gi, -1, 1);
                if (v) sp_tensor_from_plain(&dy, dyp, dy.data);
                else memcpy(dy.data, dyp, ny * sizeof *dyp);
                n->kern->backward_input(n, 0, &dy, &dx);
                out[v] = malloc(ny * sizeof(float));
                dxs[v] = malloc(xp.numel * sizeof(float));
                if (v) {
                    sp_tensor_to_plain(&n->out, out[v]);
                    sp_tensor_to_plain(&dx, dxs[v]);
                } else {
                    memcpy(out[v], n->out.data, ny * sizeof(float));
                    memcpy(dxs[v], dx.data, xp.numel * sizeof(float));
                }
                free(dyp);
                sp_tape_free(&t);
                sp_layer_free(pool);
            }
            cr_assert(memcmp(out[0], out[1], ny * sizeof(float)) == 0, "nChw%dc, geometry %d: y differs", k, gi);
            cr_assert(memcmp(dxs[0], dxs[1], xp.numel * sizeof(float)) == 0, "nChw%dc, geometry %d: dx differs", k, gi);
            for (int v = 0; v < 2; v++) free(out[v]), free(dxs[v]);
            sp_tensor_free(&xp), sp_tensor_free(&xb);
        }
}

/* The layouts' index and the two conversions. */
Test(conv_blocked, offsets_and_conversions_round_trip)
{
    for (int k = 8; k <= 16; k += 8) {
        sp_tensor t = sp_tensor_new(4, (int[]){3, 32, 5, 7});
        t.blk = k;
        float *plain = malloc(t.numel * sizeof *plain), *back = malloc(t.numel * sizeof *back);
        for (size_t i = 0; i < t.numel; i++) plain[i] = (float)i;
        sp_tensor_from_plain(&t, plain, t.data);
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 32; c++)
                for (int h = 0; h < 5; h++)
                    for (int w = 0; w < 7; w++)
                        cr_assert_eq(t.data[sp_tensor_offset(&t, b, c, h, w)], (float)(((b * 32 + c) * 5 + h) * 7 + w));
        cr_assert_eq(t.data[1], 5.0f * 7.0f, "channel 1 of the first block follows channel 0");
        sp_tensor_to_plain(&t, back);
        cr_assert(memcmp(plain, back, t.numel * sizeof *back) == 0);
        free(plain), free(back);
        sp_tensor_free(&t);
    }
}

/* Which convolutions write blocked outputs: none whose output reaches an op that does
 * not take the layout, an add with an NCHW input, or the model's output; a max pool and
 * a bias pass it on. */
Test(conv_blocked, plan_stops_at_ops_without_the_layout)
{
    sp_model *m = sp_model_new("plan");
    int c1 = sp_model_add(m, sp_conv2d_nobias("c1", 3, 16, 3, 1, 1));     /* → bn → relu → c2: blocked */
    sp_model_add(m, sp_batchnorm2d("bn", 16));
    sp_model_add(m, sp_relu());
    int c2 = sp_model_add(m, sp_conv2d_nobias("c2", 16, 16, 3, 1, 1));    /* → avgpool: NCHW */
    sp_model_add(m, sp_avgpool2d(2, 2, 0));
    int c3 = sp_model_add(m, sp_conv2d_nobias("c3", 16, 16, 3, 1, 1));    /* → add with the pool's NCHW */
    int p = c3 - 1;
    int a = sp_model_add_from(m, sp_add(), 2, (int[]){c3, p});
    int c4 = sp_model_add(m, sp_conv2d_nobias("c4", 16, 16, 3, 1, 1));   /* → c5: blocked */
    int c5 = sp_model_add(m, sp_conv2d("c5", 16, 16, 1, 1, 0));          /* biased → c6: blocked */
    int c6 = sp_model_add(m, sp_conv2d_nobias("c6", 16, 16, 3, 1, 1));   /* → maxpool → gap: blocked */
    sp_model_add(m, sp_maxpool2d(2, 2, 0));
    sp_model_add(m, sp_global_avgpool2d());
    (void)a;
    bool make[16] = {0};
    sp_model_blocked_plan(m, make);
    cr_expect(make[c1], "conv → bn → relu → conv");
    cr_expect(!make[c2], "conv → avgpool");
    cr_expect(!make[c3], "conv → add with an NCHW input");
    cr_expect(make[c4], "conv → conv");
    cr_expect(make[c5], "a biased conv → conv");
    cr_expect(make[c6], "conv → max pool → global average pooling");
    /* an output another rank reads (the executor's cut after bn's ReLU) stays NCHW: c1,
     * which made it blocked through bn and relu, writes NCHW; the rest as before */
    bool plain[16] = {0}, cut[16] = {0};
    plain[c1 + 2] = true;
    sp_model_blocked_plan_cut(m, plain, cut);
    cr_expect(!cut[c1], "conv → bn → relu, read by another rank");
    for (int i = c1 + 1; i < c6 + 3; i++) cr_expect_eq(cut[i], make[i], "layer %d: as without the cut", i);
    sp_model_free(m);
    sp_model *last = sp_model_new("last");   /* the model's output stays NCHW */
    sp_model_add(last, sp_conv2d_nobias("c", 3, 16, 3, 1, 1));
    sp_model_add(last, sp_relu());
    sp_model_blocked_plan(last, make);
    cr_expect(!make[0], "conv → relu, the model's output");
    sp_model_free(last);
}

/* An op meeting a layout it does not take: refused naming it (core/tape.h), the tape as
 * it was. */
Test(conv_blocked, op_without_the_layout_refuses_it)
{
    sp_tape t;
    sp_tape_init(&t);
    sp_tensor x = sp_tensor_new(4, (int[]){2, 16, 4, 4});
    x.blk = 16;
    sp_layer *pool = sp_avgpool2d(2, 2, 0);
    sp_clear_error();
    tu_refused(!sp_apply(&t, pool, sp_tape_input(&t, &x)), "op avgpool2d: input in the blocked layout nChw16c");
    cr_assert_eq(t.n, 1, "the refused node stayed on the tape");
    sp_tape_free(&t);
    sp_layer_free(pool);
    sp_tensor_free(&x);
}

/* LeNet-5's training step with both convs' ReLU and pool folded in (conv1 on im2col,
 * conv2 on oneDNN where built) is bitwise its step with every op on its own: loss,
 * logits and every gradient, linear and ooo engines, 1 and 2 threads. */
Test(conv_relu, lenet_step_with_pools_folded_in_bitwise)
{
    sp_model *m = sp_zoo_lenet(1, 28);
    sp_model_init(m, 7);
    sp_tape probe;
    sp_tape_init(&probe);
    probe.reuse_inputs = true;
    cr_assert(sp_model_fuses_relu_next(m, &probe, 0, SP_CPU) && sp_model_fuses_relu_next(m, &probe, 3, SP_CPU) &&
                  !sp_model_fuses_relu_next(m, &probe, 7, SP_CPU),
              "LeNet-5: conv1 and conv2 run their ReLU and pool in their region; fc1's ReLU has no pool");
    sp_tape_free(&probe);
    enum { B = 12 };
    sp_tensor x = sp_tensor_new(4, (int[]){B, 1, 28, 28});
    tu_fill_uniform(x.data, x.numel, 11, -1, 1);
    int y[B];
    for (int b = 0; b < B; b++) y[b] = (3 * b + 1) % 10;
    const char *engines[] = {"linear", "ooo"};
    for (int threads = 1; threads <= 2; threads++) {
        sp_set_threads(threads);
        for (int e = 0; e < 2; e++) {
            fused_run a = fused_step(m, &x, y, false, engines[e]), f = fused_step(m, &x, y, true, engines[e]);
            cr_assert(!a.next && f.next);
            cr_assert(memcmp(&a.loss, &f.loss, sizeof a.loss) == 0 &&
                          memcmp(a.logits, f.logits, (size_t)B * 10 * sizeof(float)) == 0,
                      "LeNet-5, %s, %d threads: loss or logits differ with the pools folded in", engines[e], threads);
            for (int p = 0; p < m->nparams; p++)
                cr_assert(memcmp(a.grads[p], f.grads[p], m->params[p]->grad.numel * sizeof(float)) == 0,
                          "LeNet-5, %s, %d threads: grad of %s differs with the pools folded in", engines[e], threads,
                          m->params[p]->name);
            fused_free(&a, m->nparams), fused_free(&f, m->nparams);
        }
    }
    sp_set_threads(1);
    sp_tensor_free(&x);
    sp_model_free(m);
}
