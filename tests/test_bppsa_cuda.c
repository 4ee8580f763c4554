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
 * 3. --scan-levels auto on the device: the depth the device cost model picks, the model
 *    re-derived here from the scan plan and the chain's element types (an RNN at
 *    T = 1000, B = 16; a wide MLP; SCANPROP_GPU_MODEL); dense products on cuBLAS.
 * 4. The scan's levels as a CUDA graph: bitwise the live levels' gradients, captured
 *    once per key and replayed, and a replay issues one graph launch for the levels'
 *    kernels (MLP, RNN; LeNet, whose cuSPARSE calls split the graph).
 * Tolerance for gradients: 1e-4 of the largest entry (the scan sums in another order
 * than BPTT; both devices' products use FP32). */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/device.h"
#include "core/kernels/cuda.h"
#include "schedulers/backward/engine.h"
#include "layers/layers.h"
#include "layers/zoo.h"
#include "schedulers/backward/engines.h"
#include "schedulers/backward/bppsa_cuda.h"
#include "schedulers/scan/scan.h"
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
    cr_assert(yg->kern->jt_values_all && yg->kern->jt_values && yg->op->jt_pattern, "%s: no device Jᵀ", name);

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
    yg->kern->jt_values_all(yg, 0, &D, stride);
    float *got = download_floats(dvals, (size_t)B * stride);
    float *ref = malloc((nnz ? nnz : 1) * sizeof *ref);
    for (int b = 0; b < B; b++) {
        P.data = ref;
        yc->kern->jt_values(yc, 0, b, &P);
        double e = rel_err(got + (size_t)b * stride, ref, nnz);
        cr_assert_leq(e, tol, "%s jt_values_all sample %d: err %.2e > %.0e", name, b, e, tol);
    }
    free(got);
    D.data = dvals;   /* one sample, the last: jt_values */
    yg->kern->jt_values(yg, 0, B - 1, &D);
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
    cr_assert(yg->kern->chain_jt_all && yg->kern->chain_jt && yg->op->chain_len, "%s: no device chain Jᵀ", name);
    cr_assert_eq(yg->op->chain_len(yg), T);
    size_t HH = (size_t)H * H, count = (size_t)(T - t_lo + 1) * B;
    float *dev = sp_tape_alloc_on(&tg, SP_CUDA, count * HH * sizeof(float));
    yg->kern->chain_jt_all(yg, t_lo, dev);
    float *got = download_floats(dev, count * HH), *ref = malloc(HH * sizeof *ref);
    for (int t = T; t >= t_lo; t--)
        for (int b = 0; b < B; b++) {
            yc->kern->chain_jt(yc, b, t, ref);
            double e = rel_err(got + ((size_t)(T - t) * B + b) * HH, ref, HH);
            cr_assert_leq(e, GRAD_TOL, "%s chain_jt_all t %d sample %d: err %.2e", name, t, b, e);
        }
    free(got);
    /* the factored form (W_hh once, (gates + zdiag)·H floats per step and sample),
     * expanded here by Σ_g W_g[j][i]·v_g[j] (+ z_j on the diagonal) */
    cr_assert(yg->kern->chain_jt_factors, "%s: no factored Jᵀ", name);
    bool zd;
    const float *W;
    int G = yg->kern->chain_jt_factors(yg, t_lo, dev, &zd, &W);
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
            yc->kern->chain_jt(yc, b, t, ref);
            double e = rel_err(jt, ref, HH);
            cr_assert_leq(e, GRAD_TOL, "%s chain_jt_factors t %d sample %d: err %.2e", name, t, b, e);
        }
    free(v);
    free(w);
    free(jt);
    int b = B - 1, t = t_lo;
    yg->kern->chain_jt(yg, b, t, dev);
    got = download_floats(dev, HH);
    yc->kern->chain_jt(yc, b, t, ref);
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
    sp_engine_opts eo = {.own = strcmp(engine, "bppsa") == 0 ? &(sp_bppsa_opts){.scan_levels = K} : NULL};
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

/* ---- 3. --scan-levels auto on the device: the device cost model ------------------------ */

/* The model of docs/BPPSA.md ("Choosing the depth on the device"), re-derived here from
 * the scan plan (schedulers/scan/scan.c, tested by test_scan.c) and the chain's element types,
 * for chains whose products never meet two CSR operands (dense, factored recurrent and
 * diagonal CSR Jᵀ): per level, launches · 5 µs + B · FLOPs / 67 TFLOP/s + B · bytes /
 * 3.35 TB/s (the H100 SXM5 defaults); a launch per distinct (M, X, result) type of a level;
 * the levels summed. */
static struct {
    double launch, gemm, bw;
} gpu = {5e-6, 67e12, 3.35e12};

typedef enum { T_NONE, T_ID, T_VEC, T_CSR, T_DENSE, T_FACT } tkind;
typedef struct ttype {
    tkind kind;
    int rows, cols;
    long nnz;   /* CSR */
    int tag;    /* a CSR link's own pattern (its position); 0 otherwise */
} ttype;

static bool teq(ttype a, ttype b)
{
    return a.kind == b.kind && a.rows == b.rows && a.cols == b.cols && a.nnz == b.nnz && a.tag == b.tag;
}

static double tfloats(ttype t)
{
    return t.kind == T_VEC ? t.rows : t.kind == T_CSR ? (double)t.nnz : t.kind == T_DENSE ? (double)t.rows * t.cols
                                                     : t.kind == T_FACT ? t.rows : 0;   /* an RNN: 1 gate */
}

static double tentries(ttype t) { return t.kind == T_CSR ? (double)t.nnz : (double)t.rows * t.cols; }

/* M·X: the result's type and its FLOPs per sample. */
static ttype tproduct(ttype M, ttype X, double *flops)
{
    *flops = 0;
    if (X.kind == T_ID) return M;
    if (M.kind == T_ID) return X;
    cr_assert(!(M.kind == T_CSR && X.kind == T_CSR), "this model test covers no CSR·CSR product");
    if (X.kind == T_VEC) {
        *flops = 2 * tentries(M);
        return (ttype){.kind = T_VEC, .rows = M.rows};
    }
    *flops = M.kind == T_CSR ? 2 * tentries(M) * X.cols : 2.0 * M.rows * tentries(X);
    return (ttype){.kind = T_DENSE, .rows = M.rows, .cols = X.cols};
}

typedef struct tstep {
    bool mult;
    ttype m, x, out;
    double flops;
} tstep;

/* The modelled time of depth K for the chain of links a[1..n] (a[0]: a vector of v rows);
 * *gemm (if given): the products per sample with a dense M and a dense or vector X. */
static double model_time_gemm(const ttype *links, int n, int v, int B, int K, long *gemm)
{
    sp_scan_plan p;
    sp_scan_plan_build(&p, n, K);
    ttype *a = calloc((size_t)n + 1, sizeof *a), reg = {.kind = T_ID};
    a[0] = (ttype){.kind = T_VEC, .rows = v};
    for (int i = 1; i < n; i++) a[i] = links[i - 1];
    a[n].kind = T_NONE;
    tstep *st = calloc((size_t)p.nsteps, sizeof *st);
    for (int k = 0; k < p.nsteps; k++) {
        const sp_scan_step *s = &p.steps[k];
        tstep *t = &st[k];
        if (s->kind == SP_SCAN_UP) {
            t->mult = s->r != n;
            t->m = a[s->r], t->x = a[s->l];
            if (t->mult) a[s->r] = t->out = tproduct(a[s->r], a[s->l], &t->flops);
        } else if (s->kind == SP_SCAN_IDENTITY) {
            a[s->r] = (ttype){.kind = T_ID};
        } else if (s->kind == SP_SCAN_CARRY) {
            if (s->l < 0) reg = (ttype){.kind = T_ID};
            ttype old = a[s->r];
            a[s->r] = reg;
            t->mult = s->r != n && s->product;
            t->m = old, t->x = reg;
            if (s->r != n) reg = t->out = tproduct(old, reg, &t->flops);
        } else {
            ttype T = a[s->l];
            t->mult = s->product;
            t->m = T, t->x = a[s->r];
            a[s->l] = a[s->r];
            a[s->r] = t->out = tproduct(T, a[s->r], &t->flops);
        }
    }
    double time = 0;
    for (int k = 0; k < p.nsteps;) {
        int level = p.steps[k].level, start = k, launches = 0;
        double flops = 0, bytes = 0;
        for (; k < p.nsteps && p.steps[k].level == level; k++) {
            if (!st[k].mult) continue;
            if (gemm) *gemm += st[k].m.kind == T_DENSE && (st[k].x.kind == T_DENSE || st[k].x.kind == T_VEC);
            flops += B * st[k].flops;
            bytes += B * 4.0 * (tfloats(st[k].m) + tfloats(st[k].x) + tfloats(st[k].out));
            bool seen = false;
            for (int j = start; j < k; j++)
                seen |= st[j].mult && teq(st[j].m, st[k].m) && teq(st[j].x, st[k].x) && teq(st[j].out, st[k].out);
            launches += !seen;
        }
        time += launches * gpu.launch + flops / gpu.gemm + bytes / gpu.bw;
    }
    free(st);
    free(a);
    sp_scan_plan_free(&p);
    return time;
}

static double model_time(const ttype *links, int n, int v, int B, int K)
{
    return model_time_gemm(links, n, v, B, K, NULL);
}

static int model_choice(const ttype *links, int n, int v, int B, double *best_t)
{
    int F = sp_scan_full_levels(n), best = 0;
    *best_t = INFINITY;
    for (int K = 0; K <= F; K++) {
        double t = model_time(links, n, v, B, K);
        if (t < *best_t) *best_t = t, best = K;
    }
    return best;
}

/* bppsa --scan-levels auto on the device: the depth it chose, its gradients against the
 * device linear engine's. */
static int auto_on_device(sp_model *m, int ndim, const int *xshape, int classes)
{
    sp_model_init(m, 11);
    sp_model_to_device(m, SP_CUDA);
    sp_tensor x = sp_tensor_new(ndim, xshape);
    tu_fill_uniform(x.data, x.numel, 13, -1.0f, 1.0f);
    int B = xshape[0], *labels = malloc((size_t)B * sizeof *labels);
    for (int b = 0; b < B; b++) labels[b] = (5 * b + 2) % classes;
    size_t n = nparams_total(m);
    float *gl = malloc(n * sizeof *gl), *gb = malloc(n * sizeof *gb);
    grads_of(m, "linear", 0, &x, labels, gl, 1);
    sp_engine_opts eo = {.own = &(sp_bppsa_opts){.scan_levels = SP_SCAN_LEVELS_AUTO}};
    sp_engine *e = sp_engine_create("bppsa", &eo);
    sp_tape t;
    sp_tape_init(&t);
    for (int p = 0; p < m->nparams; p++) sp_zero(&m->params[p]->grad);
    sp_tensor xin = sp_tape_tensor_on(&t, SP_CUDA, x.ndim, x.shape);
    sp_tensor_to_device(&xin, &x);
    sp_backward(e, &t, sp_model_loss(m, &t, &xin, labels));
    size_t off = 0;
    for (int p = 0; p < m->nparams; p++) {
        sp_tensor_read(gb + off, &m->params[p]->grad);
        off += m->params[p]->grad.numel;
    }
    sp_bppsa_stats st;
    cr_assert(sp_bppsa_stats_get(e, &st));
    double err = rel_err(gb, gl, n);
    cr_assert_leq(err, GRAD_TOL, "%s auto (K=%d): bppsa vs linear on the device: err %.2e", m->name, st.up_levels,
                  err);
    sp_tape_free(&t);
    sp_engine_destroy(e);
    free(gl);
    free(gb);
    free(labels);
    sp_tensor_free(&x);
    return st.up_levels;
}

/* A long RNN chain (T = 1000, B = 16, the paper's setting): K = 0 is 1000 sequential
 * launches, a full-depth scan Θ(log T) levels of one or two launches; the model picks a
 * depth with the full scan's 18 levels. */
Test(bppsa_cuda, auto_depth_long_rnn_follows_the_device_model)
{
    need_gpu();
    unsetenv("SCANPROP_GPU_MODEL");
    int T = 1000, B = 16, H = 8, C = 4, n = T + 1;
    ttype *links = calloc((size_t)n, sizeof *links);
    links[0] = (ttype){.kind = T_DENSE, .rows = H, .cols = C};   /* fc's Jᵀ */
    for (int i = 1; i < n; i++) links[i] = (ttype){.kind = T_FACT, .rows = H, .cols = H};
    double t_best, t0 = model_time(links, n, C, B, 0);
    int want = model_choice(links, n, C, B, &t_best), F = sp_scan_full_levels(n);
    double t_full = model_time(links, n, C, B, F);
    sp_scan_plan p;
    sp_scan_plan_build(&p, n, want);
    int levels = p.work_levels;
    sp_scan_plan_free(&p);
    sp_scan_plan_build(&p, n, F);
    cr_assert_eq(levels, p.work_levels, "the model's choice K=%d has %d levels, the full scan %d", want, levels,
                 p.work_levels);
    sp_scan_plan_free(&p);
    cr_assert_geq(want, F - 1, "the model's choice K=%d, full %d", want, F);
    cr_assert_lt(t_best * 10, t0, "full-depth scan %.3g ms vs K=0 %.3g ms", 1e3 * t_best, 1e3 * t0);
    cr_assert_leq(t_best, t_full * 1.01);
    free(links);
    int got = auto_on_device(sp_zoo_rnn(3, H, C), 3, (int[]){B, T, 3}, C);
    cr_assert_eq(got, want, "auto chose K=%d, the device model says K=%d", got, want);
}

/* An MLP (fc → tanh → … → fc, width 96): the full scan multiplies dense 96×96 blocks and
 * mixes operand types within a level (more launches per level, not fewer), so the model
 * picks a shallower depth than the full scan. With SCANPROP_GPU_MODEL (another GPU) the
 * choice follows the overridden constants. */
static sp_model *wide_mlp(int L, int W, int in, int C)
{
    sp_model *m = sp_model_new("wide_mlp");
    sp_model_set_loss(m, sp_softmax_ce());
    for (int l = 0; l < L; l++) {
        char name[16];
        snprintf(name, sizeof name, "fc%d", l + 1);
        sp_model_add(m, sp_linear(name, l ? W : in, l + 1 < L ? W : C));
        if (l + 1 < L) sp_model_add(m, sp_tanh());
    }
    return m;
}

Test(bppsa_cuda, auto_depth_mlp_follows_the_device_model)
{
    need_gpu();
    unsetenv("SCANPROP_GPU_MODEL");
    int L = 8, W = 96, in = 10, C = 5, B = 4, n = 2 * L - 1;
    ttype *links = calloc((size_t)n, sizeof *links);
    for (int i = 0; i < n; i++)   /* a[1] = fc8's Jᵀ, a[2] = tanh's, ... a[n] = fc1's (never read) */
        links[i] = i % 2 ? (ttype){.kind = T_CSR, .rows = W, .cols = W, .nnz = W, .tag = i + 1}
                         : (ttype){.kind = T_DENSE, .rows = W, .cols = i ? W : C};
    double t_best;
    int want = model_choice(links, n, C, B, &t_best), F = sp_scan_full_levels(n);
    cr_assert_lt(want, F, "the model picks the full scan (K=%d) for the MLP", want);
    int got = auto_on_device(wide_mlp(L, W, in, C), 2, (int[]){B, in}, C);
    cr_assert_eq(got, want, "auto chose K=%d, the device model says K=%d", got, want);
    free(links);
}

/* SCANPROP_GPU_MODEL, another GPU's constants: with a slow GEMM rate (1 µs launches,
 * 2 GFLOP/s, 100 GB/s) the RNN's H×H products outweigh the launches they save and the
 * model picks a shallow scan; the engine follows the overridden constants. A bad value
 * stops with one line naming it. */
Test(bppsa_cuda, auto_depth_follows_scanprop_gpu_model)
{
    need_gpu();
    setenv("SCANPROP_GPU_MODEL", "launch_us=1,gemm_tflops=0.002,bw_gbs=100", 1);
    gpu.launch = 1e-6, gpu.gemm = 2e9, gpu.bw = 100e9;
    int T = 200, B = 4, H = 8, C = 4, n = T + 1;
    ttype *links = calloc((size_t)n, sizeof *links);
    links[0] = (ttype){.kind = T_DENSE, .rows = H, .cols = C};
    for (int i = 1; i < n; i++) links[i] = (ttype){.kind = T_FACT, .rows = H, .cols = H};
    double t_best;
    int want = model_choice(links, n, C, B, &t_best), F = sp_scan_full_levels(n);
    free(links);
    gpu.launch = 5e-6, gpu.gemm = 67e12, gpu.bw = 3.35e12;
    cr_assert_lt(want, F - 1, "the slow-GEMM model picks K=%d of %d", want, F);
    int got = auto_on_device(sp_zoo_rnn(3, H, C), 3, (int[]){B, T, 3}, C);
    cr_assert_eq(got, want, "auto chose K=%d, the overridden device model says K=%d", got, want);
    sp_bppsa_gpu_model g = sp_bppsa_gpu_model_get();
    cr_assert(g.launch_s == 1e-6 && g.gemm_flops == 2e9 && g.bandwidth == 100e9 && g.spgemm_flops == 20e9,
              "SCANPROP_GPU_MODEL read as %g s, %g, %g, %g", g.launch_s, g.gemm_flops, g.spgemm_flops, g.bandwidth);
    unsetenv("SCANPROP_GPU_MODEL");
}

/* A bad SCANPROP_GPU_MODEL stops with one line (sp_fail: exit 2) when auto reads it. */
Test(bppsa_cuda, bad_scanprop_gpu_model_exits_2, .exit_code = 2, .init = cr_redirect_stderr)
{
    need_gpu();
    setenv("SCANPROP_GPU_MODEL", "launch_us=1,gemm_tflops=fast", 1);
    sp_bppsa_gpu_model_get();
}

/* Products that turn dense go to cuBLAS, as on the CPU (BLAS there): at every depth the
 * products cublasSgemmBatched runs are exactly the plan's dense·dense and dense·vector
 * products × B (the MLP chain of the model tests: a CSR·dense product turns dense in the
 * own kernel, every later product of it is a GEMM). */
Test(bppsa_cuda, dense_products_run_on_cublas)
{
    need_gpu();
    int L = 4, W = 24, in = 6, C = 5, B = 3, n = 2 * L - 1;
    ttype *links = calloc((size_t)n, sizeof *links);
    for (int i = 0; i < n; i++)
        links[i] = i % 2 ? (ttype){.kind = T_CSR, .rows = W, .cols = W, .nnz = W, .tag = i + 1}
                         : (ttype){.kind = T_DENSE, .rows = W, .cols = i ? W : C};
    sp_model *m = wide_mlp(L, W, in, C);
    sp_model_init(m, 5);
    sp_model_to_device(m, SP_CUDA);
    sp_tensor x = sp_tensor_new(2, (int[]){B, in});
    tu_fill_uniform(x.data, x.numel, 9, -1.0f, 1.0f);
    int labels[3] = {0, 3, 4};
    float *g = malloc(nparams_total(m) * sizeof *g);
    int F = sp_scan_full_levels(n);
    long deeper = 0;
    for (int K = 0; K <= F; K++) {
        long want = 0;
        model_time_gemm(links, n, C, B, K, &want);
        long before = sp_bppsa_cuda_gemm_products();
        grads_of(m, "bppsa", K, &x, labels, g, 1);
        long got = sp_bppsa_cuda_gemm_products() - before;
        cr_assert_eq(got, want * B, "K=%d: %ld products on cuBLAS, the plan has %ld dense ones", K, got, want * B);
        if (K == F) deeper = want;
    }
    cr_assert_gt(deeper, 0, "the full scan has no dense product");
    free(g);
    free(links);
    sp_tensor_free(&x);
    sp_model_free(m);
}

/* ---- 4. the scan's levels as a CUDA graph ------------------------------------------- */

/* One backward of m by engine e on tape t, the batch from seed; the gradients into g
 * (n floats) and what the step issued into d. */
static void graph_step(sp_model *m, sp_engine *e, sp_tape *t, int ndim, const int *xshape, int classes,
                       uint64_t seed, float *g, sp_device_counts *d)
{
    sp_tensor x = sp_tensor_new(ndim, xshape);
    tu_fill_uniform(x.data, x.numel, seed, -1.0f, 1.0f);
    int B = xshape[0], labels[64];
    for (int b = 0; b < B; b++) labels[b] = (int)((seed + 3 * (uint64_t)b) % (uint64_t)classes);
    sp_tape_reset(t);
    for (int p = 0; p < m->nparams; p++) sp_zero(&m->params[p]->grad);
    sp_tensor xin = sp_tape_tensor_on(t, SP_CUDA, ndim, xshape);
    sp_tensor_to_device(&xin, &x);
    sp_device_counts before, after;
    sp_device_counts_get(SP_CUDA, &before);
    sp_backward(e, t, sp_model_loss(m, t, &xin, labels));
    sp_device_counts_get(SP_CUDA, &after);
    *d = sp_device_counts_diff(&after, &before);
    size_t off = 0;
    for (int p = 0; p < m->nparams; p++) {
        sp_tensor_read(g + off, &m->params[p]->grad);
        off += m->params[p]->grad.numel;
    }
    sp_tensor_free(&x);
}

/* Two copies of a model, bppsa at depth K on each: one with the levels' graph (the
 * default), one live (SCANPROP_BPPSA_GRAPH=off). Batches of B0 ×4, B1 ×3, B0 ×2, each
 * step new data: every step's gradients bitwise equal; a key runs live, is captured,
 * then replayed (3 captures, 3 replays); a replayed step issues what the live one does
 * less the graph's kernels and cuBLAS calls, plus its graph launches (one per graph:
 * one where no cuSPARSE call splits it). */
static void graph_vs_live(sp_model *(*make)(void), int ndim, const int *xshape, int classes, int K, int B1,
                          int want_launches)
{
    sp_model *ma = make(), *mb = make();
    sp_model_init(ma, 42);
    sp_model_init(mb, 42);
    sp_model_to_device(ma, SP_CUDA);
    sp_model_to_device(mb, SP_CUDA);
    sp_engine_opts eo = {.own = &(sp_bppsa_opts){.scan_levels = K}};
    sp_engine *ea = sp_engine_create("bppsa", &eo), *eb = sp_engine_create("bppsa", &eo);
    sp_tape ta, tb;
    sp_tape_init(&ta);
    sp_tape_init(&tb);
    /* one arena block from the start: the first steps do not move the arena's addresses */
    sp_tape_alloc_on(&ta, SP_CUDA, (size_t)16 << 20);
    sp_tape_alloc_on(&tb, SP_CUDA, (size_t)16 << 20);
    size_t n = nparams_total(ma);
    float *ga = malloc(n * sizeof *ga), *gb = malloc(n * sizeof *gb);
    const int B0 = xshape[0], seq[9] = {B0, B0, B0, B0, B1, B1, B1, B0, B0};
    const bool replayed[9] = {0, 0, 1, 1, 0, 0, 1, 0, 0};
    sp_bppsa_graph_stats s0, s1;
    sp_bppsa_cuda_graph_stats(&s0);
    for (int s = 0; s < 9; s++) {
        int shape[SP_MAX_DIMS];
        memcpy(shape, xshape, (size_t)ndim * sizeof *shape);
        shape[0] = seq[s];
        sp_device_counts da, db;
        sp_bppsa_graph_stats before, after;
        sp_bppsa_cuda_graph_stats(&before);
        cr_assert_eq(setenv("SCANPROP_BPPSA_GRAPH", "on", 1), 0);
        graph_step(ma, ea, &ta, ndim, shape, classes, 100 + (uint64_t)s, ga, &da);
        sp_bppsa_cuda_graph_stats(&after);
        cr_assert_eq(setenv("SCANPROP_BPPSA_GRAPH", "off", 1), 0);
        graph_step(mb, eb, &tb, ndim, shape, classes, 100 + (uint64_t)s, gb, &db);
        cr_assert_eq(unsetenv("SCANPROP_BPPSA_GRAPH"), 0);
        cr_assert(memcmp(ga, gb, n * sizeof *ga) == 0, "%s K=%d step %d (batch %d): gradients with the graph differ",
                  ma->name, K, s + 1, seq[s]);
        cr_assert_eq(after.replays - before.replays, replayed[s], "%s step %d: %ld replays", ma->name, s + 1,
                     after.replays - before.replays);
        if (!replayed[s]) continue;
        if (want_launches > 0)
            cr_assert_eq(after.launches, want_launches, "%s: %ld graph launches per replay", ma->name, after.launches);
        else   /* cuSPARSE's groups split the levels into several graphs */
            cr_assert(after.launches > 1 && after.pieces > after.launches, "%s: %ld graph launches, %ld pieces",
                      ma->name, after.launches, after.pieces);
        cr_assert_gt(after.kernels + after.library_calls, 0, "%s: an empty graph", ma->name);
        cr_assert_eq(da.launches, db.launches - after.kernels + after.launches,
                     "%s step %d: %lld launches with the graph, %lld live, %ld kernels in it", ma->name, s + 1,
                     da.launches, db.launches, after.kernels);
        cr_assert_eq(da.library_calls, db.library_calls - after.library_calls,
                     "%s step %d: %lld library calls with the graph, %lld live, %ld in it", ma->name, s + 1,
                     da.library_calls, db.library_calls, after.library_calls);
        cr_assert_eq(da.allocs + da.copies, db.allocs + db.copies,
                     "%s step %d: %lld allocations and copies with the graph, %lld live", ma->name, s + 1,
                     da.allocs + da.copies, db.allocs + db.copies);
    }
    sp_bppsa_cuda_graph_stats(&s1);
    cr_assert_eq(s1.captures - s0.captures, 3, "%s: %ld captures", ma->name, s1.captures - s0.captures);
    free(ga);
    free(gb);
    sp_tape_free(&ta);
    sp_tape_free(&tb);
    sp_engine_destroy(ea);
    sp_engine_destroy(eb);
    sp_model_free(ma);
    sp_model_free(mb);
}

Test(bppsa_cuda, scan_graph_bitwise_equals_live)
{
    need_gpu();
    graph_vs_live(mlp, 2, (int[]){5, 12}, 5, SP_SCAN_LEVELS_FULL, 3, 1);
    graph_vs_live(rnn, 3, (int[]){3, 13, 3}, 4, SP_SCAN_LEVELS_FULL, 2, 1);
    graph_vs_live(lenet, 4, (int[]){2, 1, 28, 28}, 10, SP_SCAN_LEVELS_FULL, 1, -1);
}
