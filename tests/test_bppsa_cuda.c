/* test_bppsa_cuda.c — the bppsa engine on the device (make test-cuda, or the emulator:
 * make test-cuda-emu).
 *
 * 1. The Jᵀ routines' device twins (jt_values_all / jt_values of linear, conv2d,
 *    maxpool2d, relu, tanh, sigmoid, flatten; chain_jt_all / chain_jt and the factored
 *    chain_jt_factors of rnn and gru)
 *    against the CPU routines, sample by sample: bitwise where the twin does the CPU's
 *    arithmetic on bitwise-equal saved state; tanh/sigmoid 1e-6 (their y comes from
 *    libdevice on a GPU); rnn/gru 1e-4 of the largest entry (h_t from cuBLAS sums).
 * 2. Whole backward passes: bppsa on the device gives the gradients of the linear
 *    engine on the device and on the CPU (MLP, LeNet, RNN up to T = 2000, GRU), at every
 *    scan depth; the sparse path's symbolic phase runs once per shape, not per step.
 * Tolerance for gradients: 1e-4 of the largest entry (the scan sums in another order
 * than BPTT; both devices' products use FP32). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/backend.h"
#include "core/cuda.h"
#include "core/engine.h"
#include "layers/layers.h"
#include "apps/models.h"
#include "schedulers/engines.h"
#include "schedulers/scan.h"
#include "tests/testutil.h"
#include "tests/cudatest.h"

#define GRAD_TOL 1e-4

static float *download_floats(const float *dev, size_t n)
{
    float *h = malloc((n ? n : 1) * sizeof *h);
    sp_cuda_synchronize();   /* the lanes are non-blocking streams: wait for their work */
    sp_cuda_check(cudaMemcpy(h, dev, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}

/* Largest |a − b| over the largest |b|, NaN anywhere in a counting as infinite. */
static double rel_err(const float *a, const float *b, size_t n)
{
    double e = tu_max_rel_diff(a, b, n);
    for (size_t i = 0; i < n; i++)
        if (isnan(a[i]) != isnan(b[i])) return INFINITY;
    return e;
}

/* ---- 1. the Jᵀ routines ---------------------------------------------------------------- */

/* One layer on both devices (same parameters, same x); the device twin's Jᵀ values of
 * every sample (jt_values_all) and of the last (jt_values) against the CPU's. */
static void compare_jt(sp_layer *cpu, sp_layer *gpu, int ndim, const int *xshape, uint64_t seed, double tol)
{
    sp_rng r;
    sp_rng_seed(&r, seed);
    if (cpu->op->init_params) cpu->op->init_params(cpu, &r);
    for (int p = 0; p < cpu->nparams; p++) sp_tensor_copy(&gpu->params[p]->value, &cpu->params[p]->value);
    sp_layer_to_device(gpu, SP_CUDA);
    sp_tape tc, tg;
    sp_tape_init(&tc);
    sp_tape_init(&tg);
    sp_tensor x = sp_tensor_new(ndim, xshape);
    tu_fill_uniform(x.data, x.numel, seed, -1.0f, 1.0f);
    for (size_t i = 0; i < x.numel; i += 7) x.data[i] = 0.0f;   /* relu's kink, pooling ties */
    sp_node *yc = sp_apply(&tc, cpu, sp_tape_input(&tc, &x));
    sp_tensor xd = sp_tape_tensor_on(&tg, SP_CUDA, ndim, xshape);
    sp_tensor_to_device(&xd, &x);
    sp_node *yg = sp_apply(&tg, gpu, sp_tape_input(&tg, &xd));
    const char *name = cpu->op->name;
    cr_assert(yg->op->jt_values_all && yg->op->jt_values && yg->op->jt_pattern, "%s: no device Jᵀ", name);

    sp_csr P;
    yc->op->jt_pattern(yc, 0, &P);
    int B = xshape[0];
    size_t nnz = (size_t)P.nnz, stride = nnz + 3;   /* a gap between samples: the stride is honoured */
    int32_t *dptr, *didx;
    float *dvals;
    sp_cuda_check(cudaMalloc((void **)&dptr, ((size_t)P.rows + 1) * sizeof(int32_t)));
    sp_cuda_check(cudaMalloc((void **)&didx, (nnz ? nnz : 1) * sizeof(int32_t)));
    sp_cuda_check(cudaMalloc((void **)&dvals, (size_t)B * stride * sizeof(float)));
    sp_cuda_check(cudaMemcpy(dptr, P.indptr, ((size_t)P.rows + 1) * sizeof(int32_t), cudaMemcpyHostToDevice));
    sp_cuda_check(cudaMemcpy(didx, P.indices, nnz * sizeof(int32_t), cudaMemcpyHostToDevice));
    sp_csr D = P;
    D.indptr = dptr, D.indices = didx, D.data = dvals;
    yg->op->jt_values_all(yg, 0, &D, stride);
    float *got = download_floats(dvals, (size_t)B * stride);
    float *ref = malloc((nnz ? nnz : 1) * sizeof *ref);
    for (int b = 0; b < B; b++) {
        P.data = ref;
        yc->op->jt_values(yc, 0, b, &P);
        double e = rel_err(got + (size_t)b * stride, ref, nnz);
        cr_assert_leq(e, tol, "%s jt_values_all sample %d: err %.2e > %.0e", name, b, e, tol);
    }
    free(got);
    D.data = dvals;   /* one sample, the last: jt_values */
    yg->op->jt_values(yg, 0, B - 1, &D);
    got = download_floats(dvals, nnz);
    double e = rel_err(got, ref, nnz);
    cr_assert_leq(e, tol, "%s jt_values: err %.2e > %.0e", name, e, tol);
    free(got);
    free(ref);
    P.data = NULL;
    sp_csr_free(&P);
    cudaFree(dptr);
    cudaFree(didx);
    cudaFree(dvals);
    sp_tensor_free(&x);
    sp_tape_free(&tc);
    sp_tape_free(&tg);
    sp_layer_free(cpu);
    sp_layer_free(gpu);
}

Test(bppsa_cuda, jt_values_match_cpu)
{
    need_gpu();
    compare_jt(sp_linear("fc", 13, 7), sp_linear("fc", 13, 7), 2, (int[]){3, 13}, 1, 0);
    compare_jt(sp_conv2d("c", 3, 5, 3, 2, 1), sp_conv2d("c", 3, 5, 3, 2, 1), 4, (int[]){2, 3, 9, 7}, 2, 0);
    compare_jt(sp_conv2d("c", 2, 4, 5, 1, 2), sp_conv2d("c", 2, 4, 5, 1, 2), 4, (int[]){3, 2, 6, 6}, 3, 0);
    compare_jt(sp_maxpool2d(3, 2, 1), sp_maxpool2d(3, 2, 1), 4, (int[]){2, 3, 9, 8}, 4, 0);
    compare_jt(sp_maxpool2d(2, 2, 0), sp_maxpool2d(2, 2, 0), 4, (int[]){3, 2, 6, 6}, 5, 0);
    compare_jt(sp_relu(), sp_relu(), 2, (int[]){4, 33}, 6, 0);
    compare_jt(sp_tanh(), sp_tanh(), 2, (int[]){4, 33}, 7, 1e-6);
    compare_jt(sp_sigmoid(), sp_sigmoid(), 2, (int[]){4, 33}, 8, 1e-6);
    compare_jt(sp_flatten(), sp_flatten(), 4, (int[]){3, 2, 3, 5}, 9, 0);
}

/* Jᵀ_t of every sample and step (chain_jt_all from t_lo) and one (chain_jt) vs the CPU. */
static void compare_chain_jt(sp_layer *cpu, sp_layer *gpu, int B, int T, int C, int H, int t_lo, uint64_t seed)
{
    sp_rng r;
    sp_rng_seed(&r, seed);
    cpu->op->init_params(cpu, &r);
    for (int p = 0; p < cpu->nparams; p++) sp_tensor_copy(&gpu->params[p]->value, &cpu->params[p]->value);
    sp_layer_to_device(gpu, SP_CUDA);
    sp_tape tc, tg;
    sp_tape_init(&tc);
    sp_tape_init(&tg);
    sp_tensor x = sp_tensor_new(3, (int[]){B, T, C});
    tu_fill_uniform(x.data, x.numel, seed, -1.0f, 1.0f);
    sp_node *yc = sp_apply(&tc, cpu, sp_tape_input(&tc, &x));
    sp_tensor xd = sp_tape_tensor_on(&tg, SP_CUDA, 3, x.shape);
    sp_tensor_to_device(&xd, &x);
    sp_node *yg = sp_apply(&tg, gpu, sp_tape_input(&tg, &xd));
    const char *name = cpu->op->name;
    cr_assert(yg->op->chain_jt_all && yg->op->chain_jt && yg->op->chain_len, "%s: no device chain Jᵀ", name);
    cr_assert_eq(yg->op->chain_len(yg), T);
    size_t HH = (size_t)H * H, count = (size_t)(T - t_lo + 1) * B;
    float *dev = sp_tape_alloc_on(&tg, SP_CUDA, count * HH * sizeof(float));
    yg->op->chain_jt_all(yg, t_lo, dev);
    float *got = download_floats(dev, count * HH), *ref = malloc(HH * sizeof *ref);
    for (int t = T; t >= t_lo; t--)
        for (int b = 0; b < B; b++) {
            yc->op->chain_jt(yc, b, t, ref);
            double e = rel_err(got + ((size_t)(T - t) * B + b) * HH, ref, HH);
            cr_assert_leq(e, GRAD_TOL, "%s chain_jt_all t %d sample %d: err %.2e", name, t, b, e);
        }
    free(got);
    /* the factored form (W_hh once, (gates + zdiag)·H floats per step and sample),
     * expanded here by Σ_g W_g[j][i]·v_g[j] (+ z_j on the diagonal) */
    cr_assert(yg->op->chain_jt_factors, "%s: no factored Jᵀ", name);
    bool zd;
    const float *W;
    int G = yg->op->chain_jt_factors(yg, t_lo, dev, &zd, &W);
    cr_assert_eq(G, yg->layer->params[1]->value.shape[0] / H, "%s: %d gates", name, G);
    cr_assert_eq(W, yg->layer->params[1]->value.data, "%s: W is not W_hh itself", name);
    size_t per = (size_t)(G + zd) * H;
    float *v = download_floats(dev, count * per), *w = download_floats(W, (size_t)G * HH), *jt = malloc(HH * sizeof *jt);
    for (int t = T; t >= t_lo; t--)
        for (int b = 0; b < B; b++) {
            const float *vb = v + ((size_t)(T - t) * B + b) * per;
            for (int i = 0; i < H; i++)
                for (int j = 0; j < H; j++) {
                    float e = 0.0f;
                    for (int g = 0; g < G; g++) e += w[((size_t)g * H + j) * H + i] * vb[(size_t)g * H + j];
                    jt[(size_t)i * H + j] = zd && i == j ? e + vb[(size_t)G * H + j] : e;
                }
            yc->op->chain_jt(yc, b, t, ref);
            double e = rel_err(jt, ref, HH);
            cr_assert_leq(e, GRAD_TOL, "%s chain_jt_factors t %d sample %d: err %.2e", name, t, b, e);
        }
    free(v);
    free(w);
    free(jt);
    int b = B - 1, t = t_lo;
    yg->op->chain_jt(yg, b, t, dev);
    got = download_floats(dev, HH);
    yc->op->chain_jt(yc, b, t, ref);
    double e = rel_err(got, ref, HH);
    cr_assert_leq(e, GRAD_TOL, "%s chain_jt t %d sample %d: err %.2e", name, t, b, e);
    free(got);
    free(ref);
    sp_tensor_free(&x);
    sp_tape_free(&tc);
    sp_tape_free(&tg);
    sp_layer_free(cpu);
    sp_layer_free(gpu);
}

Test(bppsa_cuda, chain_jt_matches_cpu)
{
    need_gpu();
    compare_chain_jt(sp_rnn("r", 3, 6, SP_SEQ_LAST), sp_rnn("r", 3, 6, SP_SEQ_LAST), 3, 5, 3, 6, 1, 21);
    compare_chain_jt(sp_rnn("r", 2, 5, SP_SEQ_ALL), sp_rnn("r", 2, 5, SP_SEQ_ALL), 2, 4, 2, 5, 2, 22);
    compare_chain_jt(sp_gru("g", 3, 7, SP_SEQ_LAST), sp_gru("g", 3, 7, SP_SEQ_LAST), 3, 5, 3, 7, 1, 23);
    compare_chain_jt(sp_gru("g", 4, 5, SP_SEQ_LAST), sp_gru("g", 4, 5, SP_SEQ_LAST), 2, 6, 4, 5, 3, 24);
}

/* ---- 2. the engine ---------------------------------------------------------------------- */

/* One backward of `engine` (scan depth K for bppsa) on m for (x, labels), on m's device;
 * every parameter's gradient copied to the host into g (concatenated). */
static void grads_of(sp_model *m, const char *engine, int K, const sp_tensor *x, const int *labels, float *g, int steps)
{
    bool dev = m->params[0]->value.device == SP_CUDA;
    sp_engine_opts eo = {.scan_levels = K};
    sp_engine *e = sp_engine_create(engine, &eo);
    sp_tape t;
    sp_tape_init(&t);
    for (int s = 0; s < steps; s++) {
        sp_tape_reset(&t);
        for (int p = 0; p < m->nparams; p++) sp_zero(&m->params[p]->grad);
        sp_tensor xin = *x;
        if (dev) {
            xin = sp_tape_tensor_on(&t, SP_CUDA, x->ndim, x->shape);
            sp_tensor_to_device(&xin, x);
        }
        sp_backward(e, &t, sp_model_loss(m, &t, &xin, labels));
    }
    size_t off = 0;
    for (int p = 0; p < m->nparams; p++) {
        sp_tensor_read(g + off, &m->params[p]->grad);
        off += m->params[p]->grad.numel;
    }
    sp_tape_free(&t);
    sp_engine_destroy(e);
}

static size_t nparams_total(const sp_model *m)
{
    size_t n = 0;
    for (int p = 0; p < m->nparams; p++) n += m->params[p]->grad.numel;
    return n;
}

/* bppsa on the device at every depth K = 0 .. full (and the full scan) against the
 * linear engine on the device and on the CPU. */
static void compare_engines(sp_model *(*make)(void), int ndim, const int *xshape, int classes, bool every_k)
{
    sp_model *mc = make(), *mg = make();
    sp_model_init(mc, 42);
    sp_model_init(mg, 42);
    sp_model_to_device(mg, SP_CUDA);
    sp_tensor x = sp_tensor_new(ndim, xshape);
    tu_fill_uniform(x.data, x.numel, 77, -1.0f, 1.0f);
    int B = xshape[0], *labels = malloc((size_t)B * sizeof *labels);
    for (int b = 0; b < B; b++) labels[b] = (3 * b + 1) % classes;
    size_t n = nparams_total(mc);
    float *gc = malloc(n * sizeof *gc), *gl = malloc(n * sizeof *gl), *gb = malloc(n * sizeof *gb);
    grads_of(mc, "linear", 0, &x, labels, gc, 1);
    grads_of(mg, "linear", 0, &x, labels, gl, 1);
    double e = rel_err(gl, gc, n);
    cr_assert_leq(e, GRAD_TOL, "%s: linear on the device vs the CPU: err %.2e", mc->name, e);
    int full = sp_bppsa_max_scan_levels(mc, ndim - 1, xshape + 1);
    for (int K = every_k ? 0 : full; K <= full + 1; K++) {
        int k = K > full ? SP_SCAN_LEVELS_FULL : K;
        grads_of(mg, "bppsa", k, &x, labels, gb, 1);
        double ed = rel_err(gb, gl, n), ec = rel_err(gb, gc, n);
        cr_assert_leq(ed, GRAD_TOL, "%s K=%d: bppsa vs linear on the device: err %.2e", mc->name, k, ed);
        cr_assert_leq(ec, GRAD_TOL, "%s K=%d: bppsa on the device vs linear on the CPU: err %.2e", mc->name, k, ec);
    }
    free(gc);
    free(gl);
    free(gb);
    free(labels);
    sp_tensor_free(&x);
    sp_model_free(mc);
    sp_model_free(mg);
}

static sp_model *mlp(void) { return sp_zoo_mlp(12, 16, 5); }
static sp_model *lenet(void) { return sp_zoo_lenet(1, 28); }
static sp_model *rnn(void) { return sp_zoo_rnn(3, 8, 4); }
static sp_model *gru(void) { return sp_zoo_gru(3, 6, 4); }

Test(bppsa_cuda, mlp_every_depth_matches_linear)
{
    need_gpu();
    compare_engines(mlp, 2, (int[]){5, 12}, 5, true);
}

Test(bppsa_cuda, lenet_matches_linear)
{
    need_gpu();
    compare_engines(lenet, 4, (int[]){2, 1, 28, 28}, 10, true);
}

Test(bppsa_cuda, rnn_gru_every_depth_match_linear)
{
    need_gpu();
    compare_engines(rnn, 3, (int[]){3, 13, 3}, 4, true);
    compare_engines(gru, 3, (int[]){3, 11, 3}, 4, true);
}

Test(bppsa_cuda, rnn_long_sequence_matches_linear)
{
    need_gpu();
    compare_engines(rnn, 3, (int[]){2, 2000, 3}, 4, true);
}

/* The sparse path's symbolic phase (the pattern of every CSR·CSR product) runs when the
 * plan is made, once per shape: later steps run the numeric kernels only. */
Test(bppsa_cuda, symbolic_phase_once_per_shape)
{
    need_gpu();
    sp_model *m = lenet();
    sp_model_init(m, 3);
    sp_model_to_device(m, SP_CUDA);
    sp_tensor x = sp_tensor_new(4, (int[]){2, 1, 28, 28});
    tu_fill_uniform(x.data, x.numel, 5, -1.0f, 1.0f);
    int labels[2] = {1, 7};
    float *g = malloc(nparams_total(m) * sizeof *g);
    long before = sp_bppsa_symbolic_calls();
    grads_of(m, "bppsa", SP_SCAN_LEVELS_FULL, &x, labels, g, 1);
    long first = sp_bppsa_symbolic_calls() - before;
    cr_assert_gt(first, 0, "LeNet's scan has CSR·CSR products; no symbolic phase ran");
    before = sp_bppsa_symbolic_calls();
    grads_of(m, "bppsa", SP_SCAN_LEVELS_FULL, &x, labels, g, 1);   /* a fresh engine: plans afresh */
    cr_assert_eq(sp_bppsa_symbolic_calls() - before, first);
    before = sp_bppsa_symbolic_calls();
    grads_of(m, "bppsa", SP_SCAN_LEVELS_FULL, &x, labels, g, 3);   /* one engine, three steps */
    cr_assert_eq(sp_bppsa_symbolic_calls() - before, first, "the symbolic phase ran again in later steps");
    free(g);
    sp_tensor_free(&x);
    sp_model_free(m);
}
