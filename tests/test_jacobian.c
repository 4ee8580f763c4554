/* test_jacobian.c — every op's analytic Jᵀ (jt_pattern + jt_values) against its own
 * backward_input, generically.
 *
 *   - Jᵀ_b·dy_b == backward_input(dy)_b for random dy, every sample b, relative error
 *     max|a − b| / max|b| ≤ 1e-5 (float32; the two sum the same terms in other orders);
 *   - on small shapes the whole matrix, built column by column from backward_input,
 *     equals the CSR one to 1e-5 and is exactly zero outside the pattern;
 *   - nnz equals its closed form (linear in·out, pointwise/flatten d, conv and pool the
 *     separable count of valid window taps) and patterns are well-formed (sorted);
 *   - patterns do not depend on the input or the weights (the explicit-zero convention,
 *     docs/JACOBIANS.md), so a symbolic SpGEMM of two ops' Jᵀ stays valid across steps;
 *   - the recurrent chains Jᵀ_t = (∂h_t/∂h_{t−1})ᵀ agree with backward_input;
 *   - the per-op table (cli/jacobian_table.h) and its PNG output. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/kernels/csr_ops.h"
#include "core/model.h"
#include "core/threads.h"
#include "core/rng.h"
#include "layers/layers.h"
#include "cli/jacobian_table.h"
#include "tests/testutil.h"

#define TOL 1e-5

static double rel_err(const float *got, const float *ref, size_t n)
{
    double d = 0.0, s = 1e-30;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)got[i] - ref[i]));
        s = fmax(s, fabs((double)ref[i]));
    }
    return d / s;
}

/* A recorded application of layer l to a random x (and its parameters initialised). */
typedef struct run {
    sp_tape t;
    sp_tensor x;
    sp_node *n;
} run;

static void run_op(run *r, sp_layer *l, int ndim, const int *shape, uint64_t seed, const int *labels)
{
    sp_rng g;
    sp_rng_seed(&g, seed);
    if (l->op->init_params) l->op->init_params(l, &g);
    r->x = sp_tensor_new(ndim, shape);
    tu_fill_uniform(r->x.data, r->x.numel, seed + 1, -1.0f, 1.0f);
    sp_tape_init(&r->t);
    sp_node *in = sp_tape_input(&r->t, &r->x);
    r->n = labels ? sp_apply_loss(&r->t, l, in, labels) : sp_apply(&r->t, l, in);
}

static void run_free(run *r)
{
    sp_tape_free(&r->t);
    sp_tensor_free(&r->x);
}

/* Jᵀ·dy against backward_input for every sample; the whole matrix column by column when
 * small; pattern checks; returns sample 0's nnz. */
static int64_t check_jt(sp_node *n, uint64_t seed)
{
    int B = sp_node_x(n)->shape[0];
    long in = sp_jt_in_size(n), out = sp_jt_out_size(n);
    bool shared_dy = n->out.numel == (size_t)out;   /* a loss: one dy for all samples */
    sp_tensor dy = n->out, dx = *sp_node_x(n);
    dy.data = malloc(n->out.numel * sizeof(float));
    dx.data = malloc(dx.numel * sizeof(float));
    tu_fill_uniform(dy.data, dy.numel, seed, -1.0f, 1.0f);
    n->kern->backward_input(n, 0, &dy, &dx);

    sp_csr jt;
    int64_t nnz0 = -1;
    float *y = malloc(sizeof(float) * in);
    bool full = (double)in * out <= 300000.0;
    float *cols = NULL, *dense = NULL;
    int *idx = NULL;
    if (full) {
        idx = malloc(sizeof(int) * out);
        for (int j = 0; j < out; j++) idx[j] = j;
        cols = malloc(sizeof(float) * B * in * out);
        dense = malloc(sizeof(float) * in * out);
        sp_jt_columnwise(n, idx, (int)out, cols);
    }
    for (int b = 0; b < B; b++) {
        sp_jt_build(n, b, &jt);
        cr_assert(sp_csr_valid(&jt), "%s: malformed pattern", n->op->name);
        cr_assert_eq(jt.rows, in, "%s: Jᵀ rows %d, expected input size %ld", n->op->name, jt.rows, in);
        cr_assert_eq(jt.cols, out, "%s: Jᵀ cols %d, expected output size %ld", n->op->name, jt.cols, out);
        if (b == 0) nnz0 = jt.nnz;
        sp_csr_spmv(&jt, dy.data + (shared_dy ? 0 : (size_t)b * out), y);
        double e = rel_err(y, dx.data + (size_t)b * in, (size_t)in);
        cr_assert_leq(e, TOL, "%s sample %d: Jᵀ·dy vs backward_input, rel err %.2e", n->op->name, b, e);
        if (full) {
            sp_csr_to_dense(&jt, dense);
            for (long i = 0; i < in; i++)
                for (long j = 0; j < out; j++) {
                    float c = cols[((size_t)j * B + b) * in + i], a = dense[(size_t)i * out + j];
                    cr_assert_leq(fabs((double)a - c), TOL * fmax(1.0, fabs((double)c)),
                                  "%s sample %d: Jᵀ[%ld, %ld] = %g, column by column %g", n->op->name, b, i, j, a,
                                  c);
                }
            /* guaranteed zeros are guaranteed: nothing outside the pattern */
            for (long i = 0; i < in; i++) {
                int32_t q = jt.indptr[i];
                for (long j = 0; j < out; j++) {
                    if (q < jt.indptr[i + 1] && jt.indices[q] == j) {
                        q++;
                        continue;
                    }
                    cr_assert_eq(cols[((size_t)j * B + b) * in + i], 0.0f, "%s: (%ld, %ld) outside the pattern is %g",
                                 n->op->name, i, j, cols[((size_t)j * B + b) * in + i]);
                }
            }
        }
        sp_csr_free(&jt);
    }
    free(y), free(cols), free(dense), free(idx);
    free(dy.data), free(dx.data);
    return nnz0;
}

/* Pattern from a second, different input (and re-drawn weights) equals the first. */
static void check_stable(sp_layer *l, int ndim, const int *shape, const int *labels)
{
    run a, b;
    run_op(&a, l, ndim, shape, 1000, labels);
    sp_csr pa, pb;
    sp_jt_build(a.n, 0, &pa);
    run_op(&b, l, ndim, shape, 2000, labels);
    sp_jt_build(b.n, shape[0] - 1, &pb);
    cr_assert(sp_csr_same_pattern(&pa, &pb), "%s: pattern changed with the input", l->op->name);
    sp_csr_free(&pa), sp_csr_free(&pb);
    run_free(&a), run_free(&b);
}

/* Full check of one op on one shape; expect_nnz < 0 skips the closed form. */
static void check_op(sp_layer *l, int ndim, const int *shape, uint64_t seed, int64_t expect_nnz, const int *labels)
{
    run r;
    run_op(&r, l, ndim, shape, seed, labels);
    cr_assert(sp_jt_supported(r.n), "%s has no Jᵀ entry points", l->op->name);
    int64_t nnz = check_jt(r.n, seed + 7);
    if (expect_nnz >= 0)
        cr_assert_eq(nnz, expect_nnz, "%s: nnz %lld, closed form %lld", l->op->name, (long long)nnz,
                     (long long)expect_nnz);
    run_free(&r);
    check_stable(l, ndim, shape, labels);
    sp_layer_free(l);
}

/* Σ over output positions of the window taps that fall inside the input:
 * Σ_o |[o·s − p, o·s − p + k) ∩ [0, n)|, with the output size of PyTorch. */
static int64_t valid_taps(int n, int k, int s, int p)
{
    int no = (n + 2 * p - k) / s + 1;
    int64_t v = 0;
    for (int o = 0; o < no; o++) {
        int lo = o * s - p, hi = lo + k;
        v += (hi < n ? hi : n) - (lo > 0 ? lo : 0);
    }
    return v;
}

/* ---- pointwise, reshape, dense, loss ----------------------------------------------- */

Test(jt, linear)
{
    int sizes[][3] = {{1, 1, 1}, {3, 7, 5}, {2, 33, 17}, {4, 64, 10}};
    for (int i = 0; i < 4; i++) {
        int B = sizes[i][0], in = sizes[i][1], out = sizes[i][2];
        check_op(sp_linear("fc", in, out), 2, (int[]){B, in}, 10 + i, (int64_t)in * out, NULL);
    }
}

Test(jt, relu_tanh_sigmoid)
{
    check_op(sp_relu(), 4, (int[]){2, 3, 5, 7}, 20, 105, NULL);
    check_op(sp_relu(), 2, (int[]){3, 11}, 21, 11, NULL);
    check_op(sp_tanh(), 4, (int[]){2, 3, 4, 5}, 22, 60, NULL);
    check_op(sp_tanh(), 3, (int[]){3, 2, 9}, 23, 18, NULL);
    check_op(sp_sigmoid(), 3, (int[]){3, 4, 5}, 24, 20, NULL);
    check_op(sp_sigmoid(), 2, (int[]){1, 1}, 25, 1, NULL);
}

Test(jt, flatten)
{
    check_op(sp_flatten(), 4, (int[]){2, 3, 4, 5}, 30, 60, NULL);
    check_op(sp_flatten(), 3, (int[]){3, 7, 2}, 31, 14, NULL);
}

Test(jt, softmax_ce)
{
    int labels[5] = {0, 3, 6, 2, 6};
    check_op(sp_softmax_ce(), 2, (int[]){5, 7}, 40, 7, labels);
    check_op(sp_softmax_ce(), 2, (int[]){1, 10}, 41, 10, labels);
}

/* ReLU's zero slopes are stored, not dropped: nnz = d whatever the signs, and the zeros
 * sit exactly where x ≤ 0. */
Test(jt, relu_keeps_explicit_zeros)
{
    float xv[8] = {-1.0f, 0.0f, 2.0f, -3.0f, 4.0f, 0.5f, -0.0f, -7.0f};
    sp_tensor x = sp_tensor_2d(xv, 1, 8);
    sp_tape t;
    sp_tape_init(&t);
    sp_layer *l = sp_relu();
    sp_node *n = sp_apply(&t, l, sp_tape_input(&t, &x));
    sp_csr jt;
    sp_jt_build(n, 0, &jt);
    cr_assert_eq(jt.nnz, 8);
    for (int i = 0; i < 8; i++) cr_assert_eq(jt.data[i], xv[i] > 0.0f ? 1.0f : 0.0f, "entry %d", i);
    sp_csr_free(&jt);
    sp_tape_free(&t);
    sp_layer_free(l);
}

/* ---- conv2d and maxpool2d: any kernel, stride, padding ----------------------------- */

Test(jt, conv2d_any_geometry)
{
    /* cin, cout, k, stride, pad, H, W */
    int cfg[][7] = {{2, 3, 3, 1, 1, 6, 5}, {1, 2, 5, 1, 2, 7, 7}, {3, 2, 3, 2, 1, 7, 8}, {2, 2, 1, 1, 0, 4, 5},
                    {2, 3, 2, 2, 0, 6, 6}, {1, 1, 4, 3, 2, 9, 7}, {2, 2, 3, 1, 0, 3, 3}, {1, 2, 1, 2, 0, 5, 5}};
    for (int i = 0; i < 8; i++) {
        int ci = cfg[i][0], co = cfg[i][1], k = cfg[i][2], s = cfg[i][3], p = cfg[i][4], H = cfg[i][5], W = cfg[i][6];
        int64_t nnz = (int64_t)ci * co * valid_taps(H, k, s, p) * valid_taps(W, k, s, p);
        check_op(sp_conv2d("conv", ci, co, k, s, p), 4, (int[]){2, ci, H, W}, 50 + i, nnz, NULL);
    }
}

Test(jt, maxpool2d_any_geometry)
{
    /* k, stride, pad, C, H, W */
    int cfg[][6] = {{2, 2, 0, 3, 6, 6}, {3, 2, 1, 2, 7, 7}, {3, 1, 1, 2, 5, 6},
                    {2, 1, 0, 1, 5, 5}, {3, 3, 0, 2, 7, 8}, {1, 2, 0, 2, 5, 4}};
    for (int i = 0; i < 6; i++) {
        int k = cfg[i][0], s = cfg[i][1], p = cfg[i][2], C = cfg[i][3], H = cfg[i][4], W = cfg[i][5];
        int64_t nnz = (int64_t)C * valid_taps(H, k, s, p) * valid_taps(W, k, s, p);
        check_op(sp_maxpool2d(k, s, p), 4, (int[]){3, C, H, W}, 70 + i, nnz, NULL);
    }
}

/* The VGG-11 conv1 numbers of BPPSA §3.3 / Table 1: 3×32×32 → 64×32×32, 3×3, pad 1. */
Test(jt, vgg11_conv1_size_and_sparsity)
{
    run r;
    run_op(&r, sp_conv2d("conv1", 3, 64, 3, 1, 1), 4, (int[]){1, 3, 32, 32}, 90, NULL);
    sp_csr jt;
    sp_jt_build(r.n, 0, &jt);
    cr_assert_eq(jt.nnz, (int64_t)3 * 64 * 94 * 94);   /* (3·32 − 2)² valid taps per channel pair */
    double sparsity = 1.0 - (double)jt.nnz / (3072.0 * 65536.0);
    cr_assert_float_eq(sparsity, 0.99157, 5e-6, "sparsity %.6f (paper: 0.99157)", sparsity);
    cr_assert_lt(sp_csr_bytes(&jt), 14u << 20, "CSR %zu bytes", sp_csr_bytes(&jt));
    sp_csr_free(&jt);
    sp_layer *l = r.n->layer;
    run_free(&r);
    sp_layer_free(l);
}

/* ---- a cached symbolic SpGEMM across steps ----------------------------------------- */

/* x → conv → relu: ∇x = Jᵀ_conv·Jᵀ_relu·dy. The product's pattern is computed once; two
 * forward passes with different inputs (so different ReLU masks) reuse it. */
Test(jt, cached_symbolic_product_across_steps)
{
    sp_layer *conv = sp_conv2d("c", 2, 3, 3, 1, 1), *relu = sp_relu();
    int shape[4] = {1, 2, 5, 6};
    sp_spgemm_plan plan;
    sp_csr A0 = {0}, B0 = {0};   /* step 0's operands: the patterns the plan was built on */
    for (int step = 0; step < 2; step++) {
        sp_rng g;
        sp_rng_seed(&g, 5 + step);
        conv->op->init_params(conv, &g);
        sp_tensor x = sp_tensor_new(4, shape);
        tu_fill_uniform(x.data, x.numel, 300 + step, -1.0f, 1.0f);
        sp_tape t;
        sp_tape_init(&t);
        sp_node *nc = sp_apply(&t, conv, sp_tape_input(&t, &x));
        sp_node *nr = sp_apply(&t, relu, nc);
        sp_csr A, B, C;
        sp_jt_build(nc, 0, &A);
        sp_jt_build(nr, 0, &B);
        if (step == 0) {
            sp_spgemm_symbolic(&plan, &A, &B);
            sp_jt_build(nc, 0, &A0);
            sp_jt_build(nr, 0, &B0);
        } else {
            cr_assert(sp_csr_same_pattern(&A, &A0) && sp_csr_same_pattern(&B, &B0),
                      "new input, new weights: the operands' patterns must not change");
        }
        sp_spgemm_result(&plan, &C);
        sp_spgemm_numeric(&plan, &A, &B, &C);
        /* C·dy must be the chained backward_input */
        sp_tensor dy = sp_tensor_new(nr->out.ndim, nr->out.shape), mid = sp_tensor_new(4, nc->out.shape),
                  dx = sp_tensor_new(4, shape);
        tu_fill_uniform(dy.data, dy.numel, 400 + step, -1.0f, 1.0f);
        nr->kern->backward_input(nr, 0, &dy, &mid);
        nc->kern->backward_input(nc, 0, &mid, &dx);
        float *y = malloc(sizeof(float) * C.rows);
        sp_csr_spmv(&C, dy.data, y);
        double e = rel_err(y, dx.data, dx.numel);
        cr_assert_leq(e, TOL, "step %d: (Jᵀ_conv·Jᵀ_relu)·dy vs backward chain, rel err %.2e", step, e);
        free(y);
        sp_tensor_free(&dy), sp_tensor_free(&mid), sp_tensor_free(&dx);
        sp_csr_free(&C), sp_csr_free(&A), sp_csr_free(&B);
        sp_tape_free(&t);
        sp_tensor_free(&x);
    }
    sp_spgemm_plan_free(&plan);
    sp_csr_free(&A0), sp_csr_free(&B0);
    sp_layer_free(conv);
    sp_layer_free(relu);
}

/* ---- recurrent chains --------------------------------------------------------------- */

/* With every step's output exposed (SP_SEQ_ALL), a gradient g at h_t reaches x_{t−1} and
 * earlier exactly as the gradient Jᵀ_t·g placed at h_{t−1} does. With C ≥ H, W_ihᵀ is
 * injective, so equal ∇x_{t−1} pins down Jᵀ_t·g itself. */
static void check_chain(sp_layer *l, int B, int T, int C, int H, uint64_t seed)
{
    run r;
    run_op(&r, l, 3, (int[]){B, T, C}, seed, NULL);
    sp_node *n = r.n;
    cr_assert(n->op->chain_len && n->kern->chain_jt, "%s has no chain entry points", l->op->name);
    cr_assert_eq(n->op->chain_len(n), T);
    sp_tensor dy1 = sp_tensor_new(3, (int[]){B, T, H}), dy2 = sp_tensor_new(3, (int[]){B, T, H});
    sp_tensor dx1 = sp_tensor_new(3, (int[]){B, T, C}), dx2 = sp_tensor_new(3, (int[]){B, T, C});
    float *jt = malloc(sizeof(float) * H * H), *gv = malloc(sizeof(float) * H);
    for (int t = 2; t <= T; t++) {
        sp_tensor_zero(&dy1);
        sp_tensor_zero(&dy2);
        for (int b = 0; b < B; b++) {
            float *g = dy1.data + ((size_t)b * T + t - 1) * H;
            tu_fill_uniform(g, (size_t)H, seed + 31 * t + b, -1.0f, 1.0f);
            n->kern->chain_jt(n, b, t, jt);   /* rows index h_{t−1}: ∇h_{t−1} = Jᵀ_t·∇h_t */
            sp_dense_mm(H, 1, H, jt, g, gv);
            memcpy(dy2.data + ((size_t)b * T + t - 2) * H, gv, sizeof(float) * H);
        }
        n->kern->backward_input(n, 0, &dy1, &dx1);
        n->kern->backward_input(n, 0, &dy2, &dx2);
        for (int b = 0; b < B; b++) {
            size_t len = (size_t)(t - 1) * C;   /* x_1 … x_{t−1} */
            const float *a = dx1.data + (size_t)b * T * C, *c = dx2.data + (size_t)b * T * C;
            double e = rel_err(c, a, len);
            cr_assert_leq(e, TOL, "%s t=%d b=%d: chain Jᵀ_t vs backward_input, rel err %.2e", l->op->name, t, b, e);
        }
    }
    free(jt), free(gv);
    sp_tensor_free(&dy1), sp_tensor_free(&dy2), sp_tensor_free(&dx1), sp_tensor_free(&dx2);
    run_free(&r);
    sp_layer_free(l);
}

Test(jt, rnn_chain) { check_chain(sp_rnn("rnn", 8, 5, SP_SEQ_ALL), 2, 5, 8, 5, 500); }
Test(jt, gru_chain) { check_chain(sp_gru("gru", 7, 6, SP_SEQ_ALL), 2, 5, 7, 6, 600); }

/* ---- the per-op table and its pictures ---------------------------------------------- */

static bool is_png(const char *path)
{
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    unsigned char buf[8] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    size_t got = fread(buf, 1, 8, f);
    fclose(f);
    return got == 8 && memcmp(buf, sig, 8) == 0;
}

Test(table, small_cnn_rows_json_and_png)
{
    sp_model *m = sp_model_new("tiny");
    sp_model_set_loss(m, sp_softmax_ce());
    sp_model_add(m, sp_conv2d("c1", 1, 2, 3, 1, 1));
    sp_model_add(m, sp_relu());
    sp_model_add(m, sp_maxpool2d(2, 2, 0));
    sp_model_add(m, sp_flatten());
    sp_model_add(m, sp_linear("fc", 2 * 3 * 3, 3));
    sp_model_init(m, 1);
    sp_tensor x = sp_tensor_new(4, (int[]){2, 1, 6, 6});
    tu_fill_uniform(x.data, x.numel, 9, -1.0f, 1.0f);
    int labels[2] = {0, 2};
    sp_tape t;
    sp_tape_init(&t);
    sp_model_loss(m, &t, &x, labels);

    char dir[512];
    snprintf(dir, sizeof dir, "%s/png", tu_tmpdir());
    sp_jt_opts o;
    sp_jt_opts_default(&o);
    o.max_columns = 16;   /* conv1 has 72 columns: timed on 16, extrapolated */
    o.min_seconds = 0.0;
    o.png_dir = dir;
    sp_jt_table tab;
    sp_jt_table_build(&tab, &t, &o);
    const char *names[6] = {"c1", "relu_1", "maxpool2d_1", "flatten_1", "fc", "softmax_ce_1"};
    const int64_t nnz[6] = {2 * 16 * 16, 72, 72, 18, 54, 3};
    cr_assert_eq(tab.n, 6);
    for (int i = 0; i < 6; i++) {
        const sp_jt_row *r = &tab.rows[i];
        cr_assert_str_eq(r->name, names[i]);
        cr_assert_eq(r->nnz, nnz[i], "%s nnz %lld", r->name, (long long)r->nnz);
        cr_assert_float_eq(r->sparsity, 1.0 - (double)r->nnz / ((double)r->in * r->out), 1e-12);
        cr_assert_float_eq(r->csr_bytes, 4.0 * (r->in + 1) + 8.0 * r->nnz, 0.5);
        cr_assert_float_eq(r->dense_bytes, 4.0 * r->in * r->out, 0.5);
        cr_assert_gt(r->analytic_ms, 0.0);
        cr_assert_geq(r->columnwise_ms, 0.0);
        cr_assert_leq(r->max_err, TOL, "%s: analytic vs column by column %.2e", r->name, r->max_err);
        char path[1024];
        snprintf(path, sizeof path, "%s/%02d_%s.png", dir, i, r->name);
        cr_assert(is_png(path), "%s is not a PNG", path);
    }
    cr_assert_eq(tab.rows[0].columns_timed, 16);
    cr_assert_eq(tab.rows[4].columns_timed, 3);
    char *json = sp_jt_table_json(&tab);
    cr_assert(strstr(json, "{\"name\": \"c1\", \"in\": 36, \"out\": 72, \"nnz\": 512, ") != NULL, "%s", json);
    cr_assert(json[0] == '[' && json[strlen(json) - 1] == ']');
    free(json);
    sp_jt_table_free(&tab);
    sp_tape_free(&t);
    sp_tensor_free(&x);
    sp_model_free(m);
}

/* A recurrent op without a whole-op Jᵀ is listed by its chain of H×H steps, with no
 * column-by-column baseline (null in the JSON). */
Test(table, rnn_chain_row)
{
    sp_model *m = sp_model_new("tiny_rnn");
    sp_model_set_loss(m, sp_softmax_ce());
    sp_model_add(m, sp_rnn("rnn", 2, 4, SP_SEQ_LAST));
    sp_model_add(m, sp_linear("fc", 4, 3));
    sp_model_init(m, 2);
    sp_tensor x = sp_tensor_new(3, (int[]){1, 6, 2});
    tu_fill_uniform(x.data, x.numel, 10, -1.0f, 1.0f);
    int labels[1] = {1};
    sp_tape t;
    sp_tape_init(&t);
    sp_model_loss(m, &t, &x, labels);
    sp_jt_opts o;
    sp_jt_opts_default(&o);
    o.min_seconds = 0.0;
    sp_jt_table tab;
    sp_jt_table_build(&tab, &t, &o);
    cr_assert_eq(tab.n, 3);
    const sp_jt_row *r = &tab.rows[0];
    cr_assert_str_eq(r->name, "rnn.step");
    cr_assert(r->chain);
    cr_assert_eq(r->steps, 6);
    cr_assert_eq(r->in, 4);
    cr_assert_eq(r->nnz, 16);
    cr_assert_lt(r->columnwise_ms, 0.0);
    char *json = sp_jt_table_json(&tab);
    cr_assert(strstr(json, "\"columnwise_ms\": null") != NULL, "%s", json);
    free(json);
    sp_jt_table_free(&tab);
    sp_tape_free(&t);
    sp_tensor_free(&x);
    sp_model_free(m);
}

/* ---- the ops of models beyond chains (issue 10) ---------------------------------- */

Test(jt, avgpool2d_global_avgpool2d_dropout)
{
    int cfg[][6] = {{2, 2, 0, 3, 6, 6}, {3, 1, 1, 2, 5, 6}, {3, 2, 1, 2, 7, 7}};
    for (int i = 0; i < 3; i++) {
        int k = cfg[i][0], s = cfg[i][1], p = cfg[i][2], C = cfg[i][3], H = cfg[i][4], W = cfg[i][5];
        int64_t nnz = (int64_t)C * valid_taps(H, k, s, p) * valid_taps(W, k, s, p);
        check_op(sp_avgpool2d(k, s, p), 4, (int[]){2, C, H, W}, 90 + i, nnz, NULL);
    }
    check_op(sp_global_avgpool2d(), 4, (int[]){2, 3, 4, 5}, 95, 60, NULL);
    check_op(sp_dropout(0.4f), 4, (int[]){3, 2, 3, 3}, 96, 18, NULL);
}

Test(jt, grouped_conv_and_eval_batchnorm)
{
    /* cin, cout, k, stride, pad, groups */
    int cfg[][6] = {{4, 6, 3, 1, 1, 2}, {3, 3, 3, 2, 1, 3}, {4, 8, 1, 1, 0, 4}};
    for (int i = 0; i < 3; i++) {
        int ci = cfg[i][0], co = cfg[i][1], k = cfg[i][2], s = cfg[i][3], p = cfg[i][4], G = cfg[i][5];
        int64_t nnz = (int64_t)ci * (co / G) * valid_taps(6, k, s, p) * valid_taps(5, k, s, p);
        check_op(sp_conv2d_groups("g", ci, co, k, s, p, G, i != 1), 4, (int[]){2, ci, 6, 5}, 97 + i, nnz, NULL);
    }
    sp_layer *bn = sp_batchnorm2d("bn", 3);
    bn->eval = true;   /* per-channel affine: a diagonal Jᵀ (none per sample in training mode) */
    check_op(bn, 4, (int[]){2, 3, 2, 2}, 100, 12, NULL);
}

/* The fused ops: diagonal Jᵀ with the ReLU's zeros stored (the pattern is the shape's). */
Test(jt, eval_batchnorm2d_relu_and_add_relu)
{
    sp_layer *bn = sp_batchnorm2d_relu("bn", 3);
    bn->eval = true;   /* init's statistics: y = max(x/√(1 + eps), 0), about half cut */
    check_op(bn, 4, (int[]){2, 3, 2, 4}, 101, 24, NULL);
    check_op(sp_add_relu(), 4, (int[]){2, 3, 5, 7}, 102, 105, NULL);   /* one input: relu */
}
