/* test_jt_conv.c — the per-sample transposed Jacobians of conv2d and maxpool2d (BPPSA
 * §3.3–3.4, Appendix D) for random shapes (odd sizes, kernel 1..5, stride 1..3,
 * padding 0..2): a well-formed CSR pattern, nnz equal to an independently derived
 * closed form, values equal to a dense Jᵀ built from the definition, and Jᵀ·dy equal
 * to backward_input (relative 1e-5, float64 products). Maxpool patterns must not
 * depend on the input. VGG-11's first conv and pool reproduce the paper's Table 1. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/rng.h"
#include "core/tape.h"
#include "layers/layers.h"
#include "tests/testutil.h"

#define JT_TOL 1e-5

typedef struct cfg {
    int B, C, H, W, O, k, s, p;
} cfg;

static int out_size(int in, int k, int s, int p) { return (in + 2 * p - k) / s + 1; }

static cfg random_cfg(sp_rng *r, int k, int s, int p)
{
    cfg c = {.B = 2 + (int)sp_rng_below(r, 2), .C = 1 + (int)sp_rng_below(r, 4), .O = 1 + (int)sp_rng_below(r, 4),
             .k = k, .s = s, .p = p};
    int min_hw = k - 2 * p > 1 ? k - 2 * p : 1;
    c.H = min_hw + (int)sp_rng_below(r, (uint32_t)(12 - min_hw));
    c.W = min_hw + (int)sp_rng_below(r, (uint32_t)(12 - min_hw));
    return c;
}

/* Σ over output positions of the kernel taps that land inside the input. */
static long long valid_taps(const cfg *c)
{
    long long n = 0;
    for (int i = 0; i < out_size(c->H, c->k, c->s, c->p); i++)
        for (int j = 0; j < out_size(c->W, c->k, c->s, c->p); j++)
            for (int kh = 0; kh < c->k; kh++)
                for (int kw = 0; kw < c->k; kw++) {
                    int h = i * c->s - c->p + kh, w = j * c->s - c->p + kw;
                    n += h >= 0 && h < c->H && w >= 0 && w < c->W;
                }
    return n;
}

static void assert_well_formed(const sp_csr *m)
{
    cr_assert_eq(m->indptr[0], 0);
    cr_assert_eq(m->indptr[m->rows], m->nnz);
    for (int r = 0; r < m->rows; r++) {
        cr_assert_leq(m->indptr[r], m->indptr[r + 1], "indptr decreases at row %d", r);
        for (int32_t q = m->indptr[r]; q < m->indptr[r + 1]; q++) {
            cr_assert(m->indices[q] >= 0 && m->indices[q] < m->cols, "row %d: column %d out of range", r, m->indices[q]);
            if (q > m->indptr[r]) cr_assert_lt(m->indices[q - 1], m->indices[q], "row %d: columns not sorted", r);
        }
    }
}

static float *densify(const sp_csr *m)
{
    float *d = calloc((size_t)m->rows * m->cols, sizeof *d);
    for (int r = 0; r < m->rows; r++)
        for (int32_t q = m->indptr[r]; q < m->indptr[r + 1]; q++) d[(size_t)r * m->cols + m->indices[q]] = m->data[q];
    return d;
}

/* For every sample b: dense(Jᵀ_b)·dy_b (float64) equals δ_b from backward_input. */
static void assert_jt_matches_delta(sp_node *n, sp_csr *jt, const char *what)
{
    int B = n->out.shape[0];
    size_t in = (size_t)jt->rows, out = (size_t)jt->cols;
    float *dy = malloc((size_t)B * out * sizeof(float)), *dx = malloc((size_t)B * in * sizeof(float));
    float *jdy = malloc(in * sizeof(float));
    tu_fill_uniform(dy, (size_t)B * out, 99, -1, 1);
    sp_tensor dyt = sp_tensor_view(dy, 4, n->out.shape), dxt = sp_tensor_view(dx, 4, n->input->out.shape);
    n->kern->backward_input(n, 0, &dyt, &dxt);
    for (int b = 0; b < B; b++) {
        n->kern->jt_values(n, 0, b, jt);
        float *d = densify(jt);
        for (size_t r = 0; r < in; r++) {
            double acc = 0.0;
            for (size_t q = 0; q < out; q++) acc += (double)d[r * out + q] * dy[(size_t)b * out + q];
            jdy[r] = (float)acc;
        }
        double err = tu_max_rel_diff(jdy, dx + (size_t)b * in, in);
        cr_assert_lt(err, JT_TOL, "%s sample %d: Jᵀ·dy vs δ rel err %.2e", what, b, err);
        free(d);
    }
    free(dy), free(dx), free(jdy);
}

static sp_node *apply_random(sp_tape *t, sp_layer *l, const cfg *c, uint64_t seed, float **x)
{
    size_t nx = (size_t)c->B * c->C * c->H * c->W;
    *x = malloc(nx * sizeof(float));
    tu_fill_uniform(*x, nx, seed, -1, 1);
    sp_tensor xt = sp_tensor_4d(*x, c->B, c->C, c->H, c->W);
    return sp_apply(t, l, sp_tape_input(t, &xt));
}

/* ---- conv2d ---------------------------------------------------------------------------- */

/* Jᵀ from the definition: input (c, h, w) → output (o, i, j) through tap (kh, kw). */
static float *conv_dense_reference(const cfg *c, const float *Wt)
{
    int Ho = out_size(c->H, c->k, c->s, c->p), Wo = out_size(c->W, c->k, c->s, c->p);
    size_t cols = (size_t)c->O * Ho * Wo;
    float *d = calloc((size_t)c->C * c->H * c->W * cols, sizeof *d);
    for (int o = 0; o < c->O; o++)
        for (int i = 0; i < Ho; i++)
            for (int j = 0; j < Wo; j++)
                for (int ch = 0; ch < c->C; ch++)
                    for (int kh = 0; kh < c->k; kh++)
                        for (int kw = 0; kw < c->k; kw++) {
                            int h = i * c->s - c->p + kh, w = j * c->s - c->p + kw;
                            if (h < 0 || h >= c->H || w < 0 || w >= c->W) continue;
                            size_t row = ((size_t)ch * c->H + h) * c->W + w, col = ((size_t)o * Ho + i) * Wo + j;
                            d[row * cols + col] = Wt[(((size_t)o * c->C + ch) * c->k + kh) * c->k + kw];
                        }
    return d;
}

Test(jt_conv, random_shapes_pattern_values_and_delta)
{
    sp_rng r;
    sp_rng_seed(&r, 4242);
    for (int t = 0; t < 45; t++) {   /* every (k, s, p) in 1..5 × 1..3 × 0..2 */
        cfg c = random_cfg(&r, 1 + t % 5, 1 + t / 5 % 3, t / 15);
        char what[96];
        snprintf(what, sizeof what, "conv C%d %dx%d O%d k%d s%d p%d", c.C, c.H, c.W, c.O, c.k, c.s, c.p);
        sp_layer *l = sp_conv2d("conv", c.C, c.O, c.k, c.s, c.p);
        sp_rng init;
        sp_rng_seed(&init, 10 + t);
        l->op->init_params(l, &init);
        sp_tape tape;
        sp_tape_init(&tape);
        float *x;
        sp_node *n = apply_random(&tape, l, &c, 20 + t, &x);

        sp_csr jt;
        n->op->jt_pattern(n, 0, &jt);
        int Ho = out_size(c.H, c.k, c.s, c.p), Wo = out_size(c.W, c.k, c.s, c.p);
        cr_assert_eq(jt.rows, c.C * c.H * c.W, "%s rows", what);
        cr_assert_eq(jt.cols, c.O * Ho * Wo, "%s cols", what);
        assert_well_formed(&jt);
        long long want = valid_taps(&c) * c.C * c.O;
        cr_assert_eq(jt.nnz, want, "%s: nnz %lld, closed form %lld", what, (long long)jt.nnz, want);

        n->kern->jt_values(n, 0, 0, &jt);
        float *got = densify(&jt), *ref = conv_dense_reference(&c, l->params[0]->value.data);
        size_t total = (size_t)jt.rows * jt.cols;
        cr_assert_eq(memcmp(got, ref, total * sizeof(float)), 0, "%s: Jᵀ differs from the definition", what);
        free(got), free(ref);

        assert_jt_matches_delta(n, &jt, what);
        sp_csr_free(&jt);
        sp_tape_free(&tape);
        sp_layer_free(l);
        free(x);
    }
}

/* BPPSA Table 1: VGG-11's first conv (3×32×32 → 64, k3 p1) has sparsity 0.99157; its
 * CSR data array is the paper's "6.5 MB" (nnz·4 bytes = 6.47 MiB). */
Test(jt_conv, vgg11_conv1_matches_paper)
{
    cfg c = {.B = 1, .C = 3, .H = 32, .W = 32, .O = 64, .k = 3, .s = 1, .p = 1};
    sp_layer *l = sp_conv2d("conv1", 3, 64, 3, 1, 1);
    sp_tape tape;
    sp_tape_init(&tape);
    tape.shape_only = true;   /* the pattern needs shapes only */
    sp_tensor x = sp_tensor_4d(NULL, 1, 3, 32, 32);
    sp_node *n = sp_apply(&tape, l, sp_tape_input(&tape, &x));
    sp_csr jt;
    n->op->jt_pattern(n, 0, &jt);
    cr_assert_eq(jt.nnz, 3LL * 64 * 94 * 94);   /* per dimension 3·32 − 2 valid taps */
    cr_assert_eq(jt.nnz, valid_taps(&c) * 3 * 64);
    double sparsity = 1.0 - (double)jt.nnz / ((double)jt.rows * jt.cols);
    cr_assert(fabs(sparsity - 0.99157) < 5e-6, "sparsity %.6f, paper 0.99157", sparsity);
    cr_assert(fabs((double)jt.nnz * 4 / (1 << 20) - 6.5) < 0.05, "data %.2f MiB, paper 6.5 MB",
              (double)jt.nnz * 4 / (1 << 20));
    assert_well_formed(&jt);
    sp_csr_free(&jt);
    sp_tape_free(&tape);
    sp_layer_free(l);
}

/* ---- maxpool2d -------------------------------------------------------------------------- */

Test(jt_maxpool, random_shapes_fixed_pattern_and_delta)
{
    sp_rng r;
    sp_rng_seed(&r, 777);
    for (int t = 0; t < 30; t++) {
        int k = 1 + t % 5, s = 1 + t / 5 % 3, p = t / 15 ? k / 2 : 0;
        cfg c = random_cfg(&r, k, s, p);
        c.O = c.C;
        char what[96];
        snprintf(what, sizeof what, "maxpool C%d %dx%d k%d s%d p%d", c.C, c.H, c.W, k, s, p);
        sp_layer *l = sp_maxpool2d(k, s, p);
        sp_tape t1, t2;
        sp_tape_init(&t1);
        sp_tape_init(&t2);
        float *x1, *x2;
        sp_node *n1 = apply_random(&t1, l, &c, 300 + t, &x1), *n2 = apply_random(&t2, l, &c, 600 + t, &x2);

        sp_csr a, b;
        n1->op->jt_pattern(n1, 0, &a);
        n2->op->jt_pattern(n2, 0, &b);
        int Ho = out_size(c.H, k, s, p), Wo = out_size(c.W, k, s, p);
        cr_assert_eq(a.rows, c.C * c.H * c.W);
        cr_assert_eq(a.cols, c.C * Ho * Wo);
        assert_well_formed(&a);
        cr_assert_eq(a.nnz, valid_taps(&c) * c.C, "%s: nnz %lld, closed form %lld", what, (long long)a.nnz,
                     valid_taps(&c) * c.C);
        cr_assert_eq(b.nnz, a.nnz);
        cr_assert_eq(memcmp(a.indptr, b.indptr, ((size_t)a.rows + 1) * sizeof(int32_t)), 0, "%s: indptr", what);
        cr_assert_eq(memcmp(a.indices, b.indices, (size_t)a.nnz * sizeof(int32_t)), 0, "%s: indices", what);

        /* values: 0/1, exactly one 1 per window (column), at that window's maximum */
        for (int bb = 0; bb < c.B; bb++) {
            n1->kern->jt_values(n1, 0, bb, &a);
            float *d = densify(&a);
            for (int col = 0; col < a.cols; col++) {
                int ones = 0;
                for (int row = 0; row < a.rows; row++) {
                    float v = d[(size_t)row * a.cols + col];
                    cr_assert(v == 0.0f || v == 1.0f, "%s: value %g", what, v);
                    if (v == 1.0f) {
                        ones++;
                        cr_assert_eq(x1[(size_t)bb * a.rows + row], n1->out.data[(size_t)bb * a.cols + col],
                                     "%s: the 1 is not at the window's maximum", what);
                    }
                }
                cr_assert_eq(ones, 1, "%s: window %d has %d ones", what, col, ones);
            }
            free(d);
        }
        assert_jt_matches_delta(n1, &a, what);
        sp_csr_free(&a);
        sp_csr_free(&b);
        sp_tape_free(&t1);
        sp_tape_free(&t2);
        sp_layer_free(l);
        free(x1), free(x2);
    }
}

/* BPPSA Table 1: VGG-11's first max-pool (64×32×32, k2 s2) has sparsity 0.99994 —
 * the count of guaranteed zeros, i.e. of the fixed membership pattern used here. */
Test(jt_maxpool, vgg11_pool1_matches_paper)
{
    sp_layer *l = sp_maxpool2d(2, 2, 0);
    sp_tape tape;
    sp_tape_init(&tape);
    tape.shape_only = true;
    sp_tensor x = sp_tensor_4d(NULL, 1, 64, 32, 32);
    sp_node *n = sp_apply(&tape, l, sp_tape_input(&tape, &x));
    sp_csr jt;
    n->op->jt_pattern(n, 0, &jt);
    cr_assert_eq(jt.nnz, 64 * 32 * 32);   /* non-overlapping windows: one per input */
    double sparsity = 1.0 - (double)jt.nnz / ((double)jt.rows * jt.cols);
    cr_assert(fabs(sparsity - 0.99994) < 5e-6, "sparsity %.6f, paper 0.99994", sparsity);
    sp_csr_free(&jt);
    sp_tape_free(&tape);
    sp_layer_free(l);
}
