/* test_ops_cuda.c — every CUDA twin against its CPU op (make test-cuda, needs a GPU).
 *
 * Same layers, same inputs, same upstream gradient dy on both devices; the CUDA
 * forward, δ and G are copied back and compared with the CPU ones. Tolerance: 1e-5 of
 * the largest reference entry (tu_max_rel_diff) for cuBLAS GEMMs, whose summation order
 * differs from OpenBLAS; exact equality where the kernel does the CPU's arithmetic in
 * the CPU's order (relu, the bias gradient). Gradients are checked against the CPU's,
 * not finite differences: the CPU ops carry the finite-difference checks
 * (tests/test_layers.c). Without a GPU every test fails with "no CUDA device". */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "core/device.h"
#include "core/error.h"
#include "core/kernels/cuda.h"
#include "schedulers/backward/engine.h"
#include "layers/layers.h"
#include "optim/optim.h"
#include "layers/zoo.h"
#include "schedulers/backward/engines.h"
#include "tests/testutil.h"
#include "tests/cudatest.h"

#define GEMM_TOL 1e-5


/* Device tensor on tape t holding a copy of host tensor h. */
static sp_tensor upload(sp_tape *t, const sp_tensor *h)
{
    sp_tensor d = sp_tape_tensor_on(t, SP_CUDA, h->ndim, h->shape);
    sp_tensor_to_device(&d, h);
    return d;
}

static double diff_vs_host(const sp_tensor *dev, const sp_tensor *ref)
{
    cr_assert_eq(dev->device, SP_CUDA);
    cr_assert_eq(dev->numel, ref->numel);
    sp_tensor h = download(dev);
    double e = tu_max_rel_diff(h.data, ref->data, h.numel);
    /* tu_max_rel_diff's fmax skips NaN; device memory starts as NaN under the emulator,
     * so an entry never written must count as the worst error. */
    for (size_t i = 0; i < h.numel; i++)
        if (isnan(h.data[i]) != isnan(ref->data[i])) e = INFINITY;
    sp_tensor_free(&h);
    return e;
}

static bool equal_vs_host(const sp_tensor *dev, const sp_tensor *ref)
{
    sp_tensor h = download(dev);
    bool eq = memcmp(h.data, ref->data, h.numel * sizeof(float)) == 0;
    sp_tensor_free(&h);
    return eq;
}

/* Two copies of one layer: cpu keeps host parameters, gpu's move to the device. Grads
 * start nonzero so that G's accumulation (+=, beta = 1) is checked too. */
static void twin_layers(sp_layer *cpu, sp_layer *gpu, uint64_t seed)
{
    sp_rng r;
    sp_rng_seed(&r, seed);
    if (cpu->op->init_params) cpu->op->init_params(cpu, &r);
    for (int p = 0; p < cpu->nparams; p++) {
        tu_fill_uniform(cpu->params[p]->grad.data, cpu->params[p]->grad.numel, seed + 1 + p, -0.5f, 0.5f);
        sp_tensor_copy(&gpu->params[p]->value, &cpu->params[p]->value);
        sp_tensor_copy(&gpu->params[p]->grad, &cpu->params[p]->grad);
    }
    sp_layer_to_device(gpu, SP_CUDA);
}

/* Forward, δ and G of one layer on both devices; asserts each within tol (0 = bitwise). */
static void compare_layer(sp_layer *cpu, sp_layer *gpu, int ndim, const int *xshape, uint64_t seed, double tol)
{
    sp_tape tc, tg;
    sp_tape_init(&tc);
    sp_tape_init(&tg);
    sp_tensor x = sp_tensor_new(ndim, xshape);
    tu_fill_uniform(x.data, x.numel, seed, -1.0f, 1.0f);

    sp_node *yc = sp_apply(&tc, cpu, sp_tape_input(&tc, &x));
    sp_tensor xd = upload(&tg, &x);
    sp_node *yg = sp_apply(&tg, gpu, sp_tape_input(&tg, &xd));
    cr_assert(yg->op == cpu->op && yg->kern != &cpu->op->cpu, "%s: sp_apply did not pick the CUDA kernels",
              cpu->op->name);
    cr_assert_eq(yg->out.device, SP_CUDA, "%s: output not on the device", cpu->op->name);

    sp_tensor dy = sp_tensor_new(yc->out.ndim, yc->out.shape);
    tu_fill_uniform(dy.data, dy.numel, seed + 7, -1.0f, 1.0f);
    sp_tensor dxc = sp_tape_tensor_like(&tc, &x);
    yc->kern->backward_input(yc, 0, &dy, &dxc);
    if (yc->kern->backward_params) yc->kern->backward_params(yc, &dy);

    sp_tensor dyd = upload(&tg, &dy);
    sp_tensor dxd = sp_tape_tensor_like(&tg, &xd);
    cr_assert_eq(dxd.device, SP_CUDA, "sp_tape_tensor_like lost the device");
    yg->kern->backward_input(yg, 0, &dyd, &dxd);
    if (yg->kern->backward_params) yg->kern->backward_params(yg, &dyd);

    double ey = diff_vs_host(&yg->out, &yc->out), edx = diff_vs_host(&dxd, &dxc);
    cr_assert_leq(ey, tol, "%s forward: err %.2e > %.0e", cpu->op->name, ey, tol);
    cr_assert_leq(edx, tol, "%s δ: err %.2e > %.0e", cpu->op->name, edx, tol);
    for (int p = 0; p < cpu->nparams; p++) {
        double eg = diff_vs_host(&gpu->params[p]->grad, &cpu->params[p]->grad);
        cr_assert_leq(eg, tol, "%s G of %s: err %.2e > %.0e", cpu->op->name, cpu->params[p]->name, eg, tol);
    }
    sp_tensor_free(&x);
    sp_tensor_free(&dy);
    sp_tape_free(&tc);
    sp_tape_free(&tg);
}

Test(cuda, linear_matches_cpu)
{
    need_gpu();
    int sizes[][3] = {{1, 1, 1}, {3, 7, 5}, {5, 13, 2}, {2, 33, 17}, {37, 257, 65}};
    for (int i = 0; i < 5; i++) {
        sp_layer *c = sp_linear("fc", sizes[i][1], sizes[i][2]), *g = sp_linear("fc", sizes[i][1], sizes[i][2]);
        twin_layers(c, g, 100 + i);
        compare_layer(c, g, 2, (int[]){sizes[i][0], sizes[i][1]}, 200 + i, GEMM_TOL);
        /* db is a column sum in the CPU's order: bitwise equal. */
        cr_assert(equal_vs_host(&g->params[1]->grad, &c->params[1]->grad), "linear %d: db differs from the CPU", i);
        sp_layer_free(c);
        sp_layer_free(g);   /* device parameters: freed through the CUDA allocator */
    }
}

Test(cuda, relu_matches_cpu_bitwise)
{
    need_gpu();
    int shapes[][4] = {{2, 3, 5, 7}, {3, 11, 0, 0}, {1, 1, 0, 0}, {4, 1000, 0, 0}};
    int ndims[] = {4, 2, 2, 2};
    for (int i = 0; i < 4; i++) {
        sp_layer *c = sp_relu(), *g = sp_relu();
        compare_layer(c, g, ndims[i], shapes[i], 300 + i, 0.0);
        sp_layer_free(c);
        sp_layer_free(g);
    }
}

static sp_model *mlp(int in, int hidden, int out, uint64_t seed)
{
    sp_model *m = sp_model_new("mlp");
    sp_model_set_loss(m, sp_softmax_ce());
    sp_model_add(m, sp_linear("fc1", in, hidden));
    sp_model_add(m, sp_relu());
    sp_model_add(m, sp_linear("fc2", hidden, hidden));
    sp_model_add(m, sp_relu());
    sp_model_add(m, sp_linear("fc3", hidden, out));
    sp_model_init(m, seed);
    return m;
}

/* Whole-chain backward on a tape, seeded with dy at the top node: the linear engine's
 * walk (sp_alloc_grads + sp_node_backward), so the grad buffers, their zeroing and the
 * seed all go through the device seam. Runs `steps` steps on one tape. */
static void chain_backward(sp_model *m, sp_tape *t, const sp_tensor *x, const sp_tensor *dy, int steps)
{
    for (int s = 0; s < steps; s++) {
        sp_tape_reset(t);
        sp_tensor xin = m->params[0]->value.device == SP_CUDA ? upload(t, x) : *x;
        sp_node *top = sp_model_forward(m, t, sp_tape_input(t, &xin));
        sp_mark_needs_grad(t);
        sp_alloc_grads(t, top);
        cr_assert_eq(top->grad.device, xin.device, "grad buffer not on the node's device");
        if (xin.device == SP_CUDA) sp_tensor_to_device(&top->grad, dy);   /* same stream as the ops */
        else sp_tensor_copy(&top->grad, dy);
        for (int i = top->index; i >= 0; i--)
            if (t->nodes[i]->op && t->nodes[i]->needs_grad) sp_node_backward(t->nodes[i]);
    }
}

static void compare_param_grads(sp_model *cpu, sp_model *gpu, const char *what)
{
    for (int p = 0; p < cpu->nparams; p++) {
        double e = diff_vs_host(&gpu->params[p]->grad, &cpu->params[p]->grad);
        cr_assert_leq(e, GEMM_TOL, "%s: G of %s err %.2e > %.0e", what, cpu->params[p]->name, e, GEMM_TOL);
    }
}

Test(cuda, chain_gradients_match_cpu)
{
    need_gpu();
    int B = 9, in = 13, hidden = 32, out = 7;
    sp_model *mc = mlp(in, hidden, out, 5), *mg = mlp(in, hidden, out, 5);
    sp_model_to_device(mg, SP_CUDA);
    sp_tensor x = sp_tensor_new(2, (int[]){B, in}), dy = sp_tensor_new(2, (int[]){B, out});
    tu_fill_uniform(x.data, x.numel, 11, -1.0f, 1.0f);
    tu_fill_uniform(dy.data, dy.numel, 12, -1.0f, 1.0f);

    sp_tape tc, tg;
    sp_tape_init(&tc);
    sp_tape_init(&tg);
    /* Two steps on one tape: the second reuses the device arena after sp_tape_reset,
     * and G accumulates across them on both devices. */
    chain_backward(mc, &tc, &x, &dy, 2);
    chain_backward(mg, &tg, &x, &dy, 2);
    compare_param_grads(mc, mg, "2 steps");
    double ex = diff_vs_host(&tg.nodes[0]->out, &x);
    cr_assert_eq(ex, 0.0, "input on the device changed");

    /* Back on the host, the parameters are the CPU model's (nothing was updated). */
    sp_model_to_device(mg, SP_CPU);
    for (int p = 0; p < mc->nparams; p++) {
        cr_assert_eq(mg->params[p]->value.device, SP_CPU);
        cr_assert(memcmp(mg->params[p]->value.data, mc->params[p]->value.data,
                         mc->params[p]->value.numel * sizeof(float)) == 0,
                  "%s changed by the round trip", mc->params[p]->name);
    }
    sp_tape_free(&tc);
    sp_tape_free(&tg);
    sp_tensor_free(&x);
    sp_tensor_free(&dy);
    sp_model_free(mc);
    sp_model_free(mg);
}

Test(cuda, linear_engine_runs_on_device)
{
    need_gpu();
    /* A scalar output (B = 1, out = 1) is a loss the engine can seed with 1. */
    sp_model *mc = mlp(6, 16, 1, 9), *mg = mlp(6, 16, 1, 9);
    sp_model_to_device(mg, SP_CUDA);
    sp_tensor x = sp_tensor_new(2, (int[]){1, 6});
    tu_fill_uniform(x.data, x.numel, 13, -1.0f, 1.0f);
    sp_engine *e = sp_engine_create("linear", NULL);
    sp_tape tc, tg;
    sp_tape_init(&tc);
    sp_tape_init(&tg);
    sp_backward(e, &tc, sp_model_forward(mc, &tc, sp_tape_input(&tc, &x)));
    sp_tensor xd = upload(&tg, &x);
    sp_backward(e, &tg, sp_model_forward(mg, &tg, sp_tape_input(&tg, &xd)));
    compare_param_grads(mc, mg, "linear engine");
    sp_engine_destroy(e);
    sp_tape_free(&tc);
    sp_tape_free(&tg);
    sp_tensor_free(&x);
    sp_model_free(mc);
    sp_model_free(mg);
}

Test(cuda, fill_zero_and_copies)
{
    need_gpu();
    sp_tensor h = sp_tensor_new(2, (int[]){3, 1000});
    tu_fill_uniform(h.data, h.numel, 21, -5.0f, 5.0f);
    sp_tensor d = sp_cuda_tensor_new(2, h.shape);
    cr_assert_eq(d.device, SP_CUDA);
    sp_tensor_to_device(&d, &h);
    cr_assert(equal_vs_host(&d, &h), "host -> device -> host round trip changed values");

    sp_fill(&d, 2.5f);
    sp_tensor back = download(&d);
    for (size_t i = 0; i < back.numel; i++)
        cr_assert_eq(back.data[i], 2.5f, "sp_fill: entry %zu = %g", i, back.data[i]);
    sp_zero(&d);
    sp_tensor_to_host(&back, &d);
    for (size_t i = 0; i < back.numel; i++)
        cr_assert_eq(back.data[i], 0.0f, "sp_zero: entry %zu = %g", i, back.data[i]);
    sp_tensor_free(&back);
    sp_tensor_free(&d);
    sp_tensor_free(&h);
}

/* A CUDA input with parameters left on the host: refused with one clear line (a status,
 * core/tape.h). */
Test(cuda, params_on_host_fail_clearly)
{
    need_gpu();
    sp_layer *l = sp_linear("fc", 4, 3);
    sp_tensor x = sp_tensor_new(2, (int[]){2, 4});
    sp_tape t;
    sp_tape_init(&t);
    sp_tensor xd = upload(&t, &x);
    sp_clear_error();
    cr_assert_null(sp_apply(&t, l, sp_tape_input(&t, &xd)), "sp_apply accepted host parameters for a CUDA input");
    cr_assert(sp_last_error()[0] && !strchr(sp_last_error(), '\n'), "%s", sp_last_error());
}

/* An op without a CUDA twin: the dispatch names the op instead of running the CPU op
 * on device memory. A private opdef stands for it (every built-in op has a twin). */
static void fake_infer(sp_node *n, const sp_tensor *x) { n->out = sp_tensor_view(NULL, x->ndim, x->shape); }
static void fake_forward(sp_node *n) { cr_assert_fail("the CPU forward ran on device memory"); }
static const sp_opdef fake_op = {.name = "fake", .infer = fake_infer, .cpu = {.forward = fake_forward}};

Test(cuda, op_without_twin_fails_clearly)
{
    need_gpu();
    sp_layer l = {.op = &fake_op};
    sp_tensor x = sp_tensor_new(2, (int[]){2, 5});
    sp_tape t;
    sp_tape_init(&t);
    sp_tensor xd = upload(&t, &x);
    sp_clear_error();
    cr_assert_null(sp_apply(&t, &l, sp_tape_input(&t, &xd)), "sp_apply ran a CPU op on device memory");
    cr_assert(strstr(sp_last_error(), "op fake: no cuda implementation"), "%s", sp_last_error());
}

/* cuBLAS orders the sums differently, and T steps compound it. */
#define REC_TOL 1e-4

Test(cuda, rnn_gru_match_cpu)
{
    need_gpu();
    /* {B, T, C, H}: T = 1, odd sizes, B = 1 */
    int cases[][4] = {{2, 1, 3, 4}, {3, 5, 7, 6}, {1, 4, 2, 9}, {4, 7, 5, 3}};
    for (int i = 0; i < 4; i++)
        for (int gru = 0; gru < 2; gru++)
            for (int mode = 0; mode < 2; mode++) {
                int *q = cases[i];
                sp_layer *c = gru ? sp_gru("r", q[2], q[3], (sp_seq_output)mode) : sp_rnn("r", q[2], q[3], (sp_seq_output)mode);
                sp_layer *g = gru ? sp_gru("r", q[2], q[3], (sp_seq_output)mode) : sp_rnn("r", q[2], q[3], (sp_seq_output)mode);
                twin_layers(c, g, 1000 + 10 * i + 2 * gru + mode);
                compare_layer(c, g, 3, (int[]){q[0], q[1], q[2]}, 1100 + 10 * i + 2 * gru + mode, REC_TOL);
                sp_layer_free(c);
                sp_layer_free(g);
            }
}

/* tanh/sigmoid: the CPU's arithmetic, but CUDA's tanhf/expf may differ from glibc's by
 * a few ulps on a GPU (bitwise under the emulator). */
#define TRANSCENDENTAL_TOL 1e-6

Test(cuda, tanh_sigmoid_match_cpu)
{
    need_gpu();
    int shapes[][4] = {{2, 3, 5, 7}, {3, 11, 0, 0}, {1, 1, 0, 0}, {4, 1000, 0, 0}};
    int ndims[] = {4, 2, 2, 2};
    for (int i = 0; i < 4; i++) {
        sp_layer *c = sp_tanh(), *g = sp_tanh();
        compare_layer(c, g, ndims[i], shapes[i], 400 + i, TRANSCENDENTAL_TOL);
        sp_layer_free(c);
        sp_layer_free(g);
        c = sp_sigmoid();
        g = sp_sigmoid();
        compare_layer(c, g, ndims[i], shapes[i], 410 + i, TRANSCENDENTAL_TOL);
        sp_layer_free(c);
        sp_layer_free(g);
    }
}

Test(cuda, flatten_is_a_view_and_matches_cpu_bitwise)
{
    need_gpu();
    int shapes[][4] = {{2, 3, 5, 7}, {1, 1, 1, 1}, {5, 2, 3, 1}};
    for (int i = 0; i < 3; i++) {
        sp_layer *c = sp_flatten(), *g = sp_flatten();
        compare_layer(c, g, 4, shapes[i], 500 + i, 0.0);
        sp_layer_free(c);
        sp_layer_free(g);
    }
    sp_layer *f = sp_flatten();
    sp_tape t;
    sp_tape_init(&t);
    sp_tensor x = sp_tensor_new(4, (int[]){2, 3, 4, 5});
    sp_tensor xd = upload(&t, &x);
    sp_node *y = sp_apply(&t, f, sp_tape_input(&t, &xd));
    cr_assert_eq(y->out.data, xd.data, "flatten on the device copied instead of viewing its input");
    cr_assert_eq(y->out.ndim, 2);
    sp_tape_free(&t);
    sp_tensor_free(&x);
    sp_layer_free(f);
}

Test(cuda, maxpool2d_matches_cpu_bitwise)
{
    need_gpu();
    /* {B, C, H, W, k, stride, pad}: the common 2x2/2, odd sizes, overlapping windows
     * (k > stride, so δ adds up), padding > 0, stride 1 */
    int cases[][7] = {{2, 3, 8, 8, 2, 2, 0}, {3, 2, 7, 9, 2, 2, 0}, {2, 3, 9, 7, 3, 2, 1},
                      {1, 4, 5, 5, 3, 1, 1}, {2, 1, 11, 6, 4, 3, 2}};
    for (int i = 0; i < 5; i++) {
        int *q = cases[i];
        sp_layer *c = sp_maxpool2d(q[4], q[5], q[6]), *g = sp_maxpool2d(q[4], q[5], q[6]);
        compare_layer(c, g, 4, q, 600 + i, 0.0);
        sp_layer_free(c);
        sp_layer_free(g);
    }
}

Test(cuda, conv2d_matches_cpu)
{
    need_gpu();
    /* {B, cin, H, W, cout, k, stride, pad}: odd sizes, stride > 1, padding > 0, 1x1 */
    int cases[][8] = {{2, 3, 8, 8, 4, 3, 1, 1}, {3, 2, 7, 9, 5, 3, 2, 1}, {1, 1, 5, 5, 1, 1, 1, 0},
                      {2, 4, 11, 6, 3, 5, 2, 2}, {4, 3, 6, 6, 6, 2, 2, 0}};
    for (int i = 0; i < 5; i++) {
        int *q = cases[i];
        sp_layer *c = sp_conv2d("conv", q[1], q[4], q[5], q[6], q[7]);
        sp_layer *g = sp_conv2d("conv", q[1], q[4], q[5], q[6], q[7]);
        twin_layers(c, g, 700 + i);
        compare_layer(c, g, 4, q, 710 + i, GEMM_TOL);
        sp_layer_free(c);
        sp_layer_free(g);
    }
}

Test(cuda, softmax_ce_matches_cpu)
{
    need_gpu();
    int sizes[][2] = {{1, 1}, {3, 7}, {130, 10}, {5, 33}};
    for (int i = 0; i < 4; i++) {
        int B = sizes[i][0], K = sizes[i][1];
        int *labels = malloc((size_t)B * sizeof *labels);
        for (int b = 0; b < B; b++) labels[b] = (b * 7 + i) % K;
        sp_layer *ce = sp_softmax_ce();
        sp_tape tc, tg;
        sp_tape_init(&tc);
        sp_tape_init(&tg);
        sp_tensor z = sp_tensor_new(2, (int[]){B, K});
        tu_fill_uniform(z.data, z.numel, 800 + i, -4.0f, 4.0f);
        sp_node *lc = sp_apply_loss(&tc, ce, sp_tape_input(&tc, &z), labels);
        sp_tensor zd = upload(&tg, &z);
        sp_node *lg = sp_apply_loss(&tg, ce, sp_tape_input(&tg, &zd), labels);
        cr_assert(lg->op == ce->op && lg->kern != &ce->op->cpu, "softmax_ce: sp_apply_loss did not pick the CUDA kernels");
        double el = diff_vs_host(&lg->out, &lc->out);
        cr_assert_leq(el, TRANSCENDENTAL_TOL, "softmax_ce loss (B %d, K %d): err %.2e", B, K, el);

        sp_tensor dl = sp_tensor_new(1, (int[]){1});
        dl.data[0] = 0.75f;
        sp_tensor dzc = sp_tape_tensor_like(&tc, &z);
        lc->kern->backward_input(lc, 0, &dl, &dzc);
        sp_tensor dld = upload(&tg, &dl);
        sp_tensor dzg = sp_tape_tensor_like(&tg, &zd);
        lg->kern->backward_input(lg, 0, &dld, &dzg);
        double ed = diff_vs_host(&dzg, &dzc);
        cr_assert_leq(ed, TRANSCENDENTAL_TOL, "softmax_ce δ (B %d, K %d): err %.2e", B, K, ed);
        sp_tensor_free(&dl);
        sp_tensor_free(&z);
        sp_tape_free(&tc);
        sp_tape_free(&tg);
        sp_layer_free(ce);
        free(labels);
    }
}

/* A label outside [0, K) on the device: the CPU op's one line, refused (a status). */
Test(cuda, softmax_ce_bad_label_fails_clearly)
{
    need_gpu();
    static const int labels[2] = {0, 3};
    sp_layer *ce = sp_softmax_ce();
    sp_tensor x = sp_tensor_new(2, (int[]){2, 3});
    sp_tape t;
    sp_tape_init(&t);
    sp_tensor xd = upload(&t, &x);
    sp_clear_error();
    cr_assert_null(sp_apply_loss(&t, ce, sp_tape_input(&t, &xd), labels), "softmax_ce accepted label 3 of 3 classes");
    cr_assert(strstr(sp_last_error(), "label 3"), "%s", sp_last_error());
}

/* ---- optimizers and whole training steps ------------------------------------------ */

/* The fused device updates do the CPU rule's operations in its order (optim_cuda.cu):
 * parameters after three steps must be bitwise the CPU's. */
Test(cuda, optimizers_match_cpu_bitwise)
{
    need_gpu();
    const char *names[] = {"sgd", "sgd", "sgd", "adam", "adam", "adamw"};
    sp_optim_cfg cfgs[6];
    for (int i = 0; i < 6; i++) cfgs[i] = sp_optim_cfg_default();
    cfgs[0].lr = 0.1;
    cfgs[1] = (sp_optim_cfg){.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-3};
    cfgs[2] = (sp_optim_cfg){.lr = 0.05, .momentum = 0.9, .nesterov = true, .weight_decay = 5e-4};
    cfgs[4].weight_decay = 1e-2;
    cfgs[5].weight_decay = 1e-2;
    for (int c = 0; c < 6; c++) {
        sp_layer *lc = sp_linear("fc", 37, 5), *lg = sp_linear("fc", 37, 5);
        twin_layers(lc, lg, 900 + c);
        sp_optim *oc = sp_optim_create(names[c], lc->params, lc->nparams, &cfgs[c]);
        sp_optim *og = sp_optim_create(names[c], lg->params, lg->nparams, &cfgs[c]);
        for (int s = 0; s < 3; s++) {
            for (int p = 0; p < lc->nparams; p++) {   /* a fresh gradient per step */
                tu_fill_uniform(lc->params[p]->grad.data, lc->params[p]->grad.numel, 950 + 10 * c + s, -1, 1);
                sp_tensor_to_device(&lg->params[p]->grad, &lc->params[p]->grad);
            }
            sp_optim_step(oc);
            sp_optim_step(og);
        }
        for (int p = 0; p < lc->nparams; p++)
            cr_assert(equal_vs_host(&lg->params[p]->value, &lc->params[p]->value), "%s (config %d): %s differs",
                      names[c], c, lc->params[p]->name);
        sp_optim_zero_grad(og);
        sp_tensor z = download(&lg->params[0]->grad);
        for (size_t i = 0; i < z.numel; i++) cr_assert_eq(z.data[i], 0.0f, "zero_grad left %g", z.data[i]);
        sp_tensor_free(&z);
        sp_optim_free(oc);
        sp_optim_free(og);
        sp_layer_free(lc);
        sp_layer_free(lg);
    }
}

/* steps training steps (forward, loss, linear-engine backward, update); the losses. */
static void train(sp_model *m, const char *optim, const sp_tensor *x, const int *labels, int steps, float *losses)
{
    bool dev = m->params[0]->value.device == SP_CUDA;
    sp_optim_cfg cfg = sp_optim_cfg_default();
    cfg.lr = strcmp(optim, "sgd") == 0 ? 0.05 : 1e-3;
    cfg.momentum = strcmp(optim, "sgd") == 0 ? 0.9 : 0.0;
    sp_optim *o = sp_optim_create(optim, m->params, m->nparams, &cfg);
    sp_engine *e = sp_engine_create("linear", NULL);
    sp_tape t;
    sp_tape_init(&t);
    for (int s = 0; s < steps; s++) {
        sp_tape_reset(&t);
        sp_tensor xin = dev ? upload(&t, x) : *x;
        sp_node *loss = sp_model_loss(m, &t, &xin, labels);
        sp_backward(e, &t, loss);
        sp_optim_step(o);
        sp_optim_zero_grad(o);
        if (dev) {
            sp_tensor l = download(&loss->out);
            losses[s] = l.data[0];
            sp_tensor_free(&l);
        } else {
            losses[s] = loss->out.data[0];
        }
    }
    sp_tape_free(&t);
    sp_engine_destroy(e);
    sp_optim_free(o);
}

#define STEP_TOL 1e-4

static void compare_training(sp_model *(*make)(void), int ndim, const int *xshape, int classes, const char *optim)
{
    sp_model *mc = make(), *mg = make();
    sp_model_init(mc, 42);
    sp_model_init(mg, 42);
    sp_model_to_device(mg, SP_CUDA);
    sp_tensor x = sp_tensor_new(ndim, xshape);
    tu_fill_uniform(x.data, x.numel, 77, -1.0f, 1.0f);
    int B = xshape[0], *labels = malloc((size_t)B * sizeof *labels);
    for (int b = 0; b < B; b++) labels[b] = (3 * b + 1) % classes;
    enum { STEPS = 2 };
    float lc[STEPS], lg[STEPS];
    train(mc, optim, &x, labels, STEPS, lc);
    train(mg, optim, &x, labels, STEPS, lg);
    for (int s = 0; s < STEPS; s++)
        cr_assert_leq(fabs(lc[s] - lg[s]), STEP_TOL * fabs(lc[s]), "%s/%s step %d: loss cpu %.7g cuda %.7g",
                      mc->name, optim, s, lc[s], lg[s]);
    for (int p = 0; p < mc->nparams; p++) {
        double e = diff_vs_host(&mg->params[p]->value, &mc->params[p]->value);
        cr_assert_leq(e, STEP_TOL, "%s/%s: %s after %d steps: err %.2e", mc->name, optim, mc->params[p]->name, STEPS, e);
    }
    free(labels);
    sp_tensor_free(&x);
    sp_model_free(mc);
    sp_model_free(mg);
}

static sp_model *lenet(void) { return sp_zoo_lenet(1, 28); }
static sp_model *vgg11(void) { return sp_zoo_vgg11(3, 10); }

Test(cuda, lenet_training_step_matches_cpu)
{
    need_gpu();
    compare_training(lenet, 4, (int[]){3, 1, 28, 28}, 10, "sgd");
    compare_training(lenet, 4, (int[]){3, 1, 28, 28}, 10, "adam");
}

Test(cuda, vgg11_training_step_matches_cpu)
{
    need_gpu();
    compare_training(vgg11, 4, (int[]){2, 3, 32, 32}, 10, "sgd");
}

/* ---- lanes and the arena ------------------------------------------------------------ */

typedef struct lane_job {
    int lane;
    sp_model *m;
    const sp_tensor *x, *dy;
} lane_job;

static void *lane_main(void *arg)
{
    lane_job *j = arg;
    sp_cuda_set_lane(j->lane);
    sp_tape t;
    sp_tape_init(&t);
    chain_backward(j->m, &t, j->x, j->dy, 2);
    sp_cuda_synchronize();
    sp_tape_free(&t);
    return NULL;
}

/* Two host threads, each on its own lane (stream + handles), train two models at once:
 * each ends where the CPU does. */
Test(cuda, two_lanes_from_two_threads)
{
    need_gpu();
    int B = 5, in = 9, hidden = 16, out = 4;
    sp_model *mc = mlp(in, hidden, out, 3), *ga = mlp(in, hidden, out, 3), *gb = mlp(in, hidden, out, 3);
    sp_model_to_device(ga, SP_CUDA);
    sp_model_to_device(gb, SP_CUDA);
    sp_tensor x = sp_tensor_new(2, (int[]){B, in}), dy = sp_tensor_new(2, (int[]){B, out});
    tu_fill_uniform(x.data, x.numel, 31, -1.0f, 1.0f);
    tu_fill_uniform(dy.data, dy.numel, 32, -1.0f, 1.0f);
    sp_tape tc;
    sp_tape_init(&tc);
    chain_backward(mc, &tc, &x, &dy, 2);
    lane_job ja = {0, ga, &x, &dy}, jb = {1, gb, &x, &dy};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, lane_main, &ja);
    pthread_create(&tb, NULL, lane_main, &jb);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    compare_param_grads(mc, ga, "lane 0");
    compare_param_grads(mc, gb, "lane 1");
    cr_assert_neq(sp_cuda()->lanes[0].stream, sp_cuda()->lanes[1].stream);
    cr_assert_neq((void *)sp_cuda()->lanes[0].cublas, (void *)sp_cuda()->lanes[1].cublas);
    sp_tape_free(&tc);
    sp_tensor_free(&x);
    sp_tensor_free(&dy);
    sp_model_free(mc);
    sp_model_free(ga);
    sp_model_free(gb);
}

/* SCANPROP_CUDA_ARENA=off: every step tensor is its own cudaMalloc; same results. */
Test(cuda, arena_off_gives_the_same_step)
{
    setenv("SCANPROP_CUDA_ARENA", "off", 1);
    need_gpu();
    compare_training(lenet, 4, (int[]){2, 1, 28, 28}, 10, "sgd");
}

Test(cuda, arena_bad_setting_fails_clearly)
{
    setenv("SCANPROP_CUDA_ARENA", "maybe", 1);
    need_gpu();
    sp_tape t;
    sp_tape_init(&t);
    sp_clear_error();
    cr_assert_eq(sp_tape_tensor_on(&t, SP_CUDA, 1, (int[]){4}).ndim, 0, "SCANPROP_CUDA_ARENA=maybe accepted");
    cr_assert(strstr(sp_last_error(), "SCANPROP_CUDA_ARENA=maybe (expected on or off)"), "%s", sp_last_error());
}

static sp_model *rnn(void) { return sp_zoo_rnn(3, 10, 4); }
static sp_model *gru(void) { return sp_zoo_gru(3, 10, 4); }

Test(cuda, rnn_gru_training_steps_match_cpu)
{
    need_gpu();
    compare_training(rnn, 3, (int[]){5, 12, 3}, 4, "sgd");
    compare_training(rnn, 3, (int[]){5, 12, 3}, 4, "adam");
    compare_training(gru, 3, (int[]){5, 12, 3}, 4, "sgd");
    compare_training(gru, 3, (int[]){5, 12, 3}, 4, "adam");
}

/* ---- the DAG models' ops: add, concat, batchnorm2d, avgpool2d, global_avgpool2d,
 * dropout, grouped conv2d --------------------------------------------------------------- */

/* Jᵀ of input i on both devices: the twin's jt_values_all (every sample, a stride with
 * a gap) and jt_values (the last sample) against the CPU op's jt_values, within tol. */
static void compare_node_jt(sp_node *yc, sp_node *yg, int i, double tol)
{
    const char *name = yc->op->name;
    cr_assert(yg->kern->jt_values_all && yg->kern->jt_values && yg->op->jt_pattern, "%s: no device Jᵀ", name);
    sp_csr P;
    yc->op->jt_pattern(yc, i, &P);
    int B = yc->out.shape[0];
    size_t nnz = (size_t)P.nnz, stride = nnz + 3;
    int32_t *dptr, *didx;
    float *dvals;
    sp_cuda_check(cudaMalloc((void **)&dptr, ((size_t)P.rows + 1) * sizeof(int32_t)));
    sp_cuda_check(cudaMalloc((void **)&didx, (nnz ? nnz : 1) * sizeof(int32_t)));
    sp_cuda_check(cudaMalloc((void **)&dvals, (size_t)B * stride * sizeof(float)));
    sp_cuda_check(cudaMemcpy(dptr, P.indptr, ((size_t)P.rows + 1) * sizeof(int32_t), cudaMemcpyHostToDevice));
    sp_cuda_check(cudaMemcpy(didx, P.indices, nnz * sizeof(int32_t), cudaMemcpyHostToDevice));
    sp_csr D = P;
    D.indptr = dptr, D.indices = didx, D.data = dvals;
    yg->kern->jt_values_all(yg, i, &D, stride);
    float *got = malloc((size_t)B * stride * sizeof *got), *ref = malloc((nnz ? nnz : 1) * sizeof *ref);
    sp_cuda_synchronize();   /* the twin queued on its lane, a non-blocking stream */
    sp_cuda_check(cudaMemcpy(got, dvals, (size_t)B * stride * sizeof(float), cudaMemcpyDeviceToHost));
    for (int b = 0; b < B; b++) {
        P.data = ref;
        yc->kern->jt_values(yc, i, b, &P);
        double e = tu_max_rel_diff(got + (size_t)b * stride, ref, nnz);
        for (size_t k = 0; k < nnz; k++)
            if (isnan(got[(size_t)b * stride + k])) e = INFINITY;
        cr_assert_leq(e, tol, "%s Jᵀ of input %d, sample %d (jt_values_all): err %.2e > %.0e", name, i, b, e, tol);
    }
    yg->kern->jt_values(yg, i, B - 1, &D);
    sp_cuda_synchronize();
    sp_cuda_check(cudaMemcpy(got, dvals, nnz * sizeof(float), cudaMemcpyDeviceToHost));
    double e = tu_max_rel_diff(got, ref, nnz);
    for (size_t k = 0; k < nnz; k++)
        if (isnan(got[k])) e = INFINITY;
    cr_assert_leq(e, tol, "%s Jᵀ of input %d (jt_values): err %.2e > %.0e", name, i, e, tol);
    free(got);
    free(ref);
    P.data = NULL;
    sp_csr_free(&P);
    cudaFree(dptr);
    cudaFree(didx);
    cudaFree(dvals);
}

/* One layer of n inputs (shapes[i], ndim dims each; input k may repeat an earlier one:
 * same[k] = its index, or -1) on both devices: forward, every δ_i and Jᵀ_i bitwise. */
static void compare_multi(sp_layer *cpu, sp_layer *gpu, int n, int ndim, const int (*shapes)[4], const int *same,
                          uint64_t seed)
{
    sp_tape tc, tg;
    sp_tape_init(&tc);
    sp_tape_init(&tg);
    sp_node *xc[8], *xg[8];
    sp_tensor x[8];
    for (int i = 0; i < n; i++) {
        if (same[i] >= 0) {
            xc[i] = xc[same[i]], xg[i] = xg[same[i]], x[i] = (sp_tensor){0};
            continue;
        }
        x[i] = sp_tensor_new(ndim, shapes[i]);
        tu_fill_uniform(x[i].data, x[i].numel, seed + (uint64_t)i, -1.0f, 1.0f);
        xc[i] = sp_tape_input(&tc, &x[i]);
        sp_tensor xd = upload(&tg, &x[i]);
        xg[i] = sp_tape_input(&tg, &xd);
    }
    sp_node *yc = sp_apply_n(&tc, cpu, n, xc), *yg = sp_apply_n(&tg, gpu, n, xg);
    const char *name = cpu->op->name;
    cr_assert(yg->op == cpu->op && yg->kern != &cpu->op->cpu, "%s: sp_apply_n did not pick the CUDA kernels", name);
    cr_assert(equal_vs_host(&yg->out, &yc->out), "%s forward differs from the CPU", name);
    sp_tensor dy = sp_tensor_new(yc->out.ndim, yc->out.shape);
    tu_fill_uniform(dy.data, dy.numel, seed + 50, -1.0f, 1.0f);
    sp_tensor dyd = upload(&tg, &dy);
    for (int i = 0; i < n; i++) {
        sp_tensor dxc = sp_tape_tensor_like(&tc, &xc[i]->out), dxd = sp_tape_tensor_like(&tg, &xg[i]->out);
        yc->kern->backward_input(yc, i, &dy, &dxc);
        yg->kern->backward_input(yg, i, &dyd, &dxd);
        cr_assert(equal_vs_host(&dxd, &dxc), "%s δ of input %d differs from the CPU", name, i);
        compare_node_jt(yc, yg, i, 0.0);
    }
    for (int i = 0; i < n; i++) sp_tensor_free(&x[i]);
    sp_tensor_free(&dy);
    sp_tape_free(&tc);
    sp_tape_free(&tg);
}

Test(cuda, add_concat_match_cpu_bitwise)
{
    need_gpu();
    static const int s4[3][4] = {{2, 3, 4, 5}, {2, 3, 4, 5}, {2, 3, 4, 5}};
    for (int relu = 0; relu < 2; relu++) {   /* add, add_relu */
        sp_layer *c = relu ? sp_add_relu() : sp_add(), *g = relu ? sp_add_relu() : sp_add();
        compare_multi(c, g, 3, 4, s4, (int[]){-1, -1, -1}, 1);
        compare_multi(c, g, 2, 4, s4, (int[]){-1, 0}, 2);   /* add(x, x) */
        compare_multi(c, g, 1, 4, s4, (int[]){-1}, 3);
        compare_multi(c, g, 2, 4, s4, (int[]){-1, -1}, 7);
        sp_layer_free(c);
        sp_layer_free(g);
    }
    sp_layer *c, *g;
    static const int cc[3][4] = {{2, 1, 3, 3}, {2, 4, 3, 3}, {2, 2, 3, 3}}, c2[2][4] = {{3, 2}, {3, 5}};
    c = sp_concat(), g = sp_concat();
    compare_multi(c, g, 3, 4, cc, (int[]){-1, -1, -1}, 4);
    compare_multi(c, g, 2, 2, c2, (int[]){-1, -1}, 5);
    compare_multi(c, g, 2, 4, cc, (int[]){-1, 0}, 6);   /* concat(x, x) */
    sp_layer_free(c);
    sp_layer_free(g);
}

/* compare_layer, then Jᵀ on fresh tapes (the forward's saved state kept). */
static void compare_layer_jt(sp_layer *cpu, sp_layer *gpu, int ndim, const int *xshape, uint64_t seed, double tol)
{
    compare_layer(cpu, gpu, ndim, xshape, seed, tol);
    sp_tape tc, tg;
    sp_tape_init(&tc);
    sp_tape_init(&tg);
    sp_tensor x = sp_tensor_new(ndim, xshape);
    tu_fill_uniform(x.data, x.numel, seed + 3, -1.0f, 1.0f);
    sp_node *yc = sp_apply(&tc, cpu, sp_tape_input(&tc, &x));
    sp_tensor xd = upload(&tg, &x);
    sp_node *yg = sp_apply(&tg, gpu, sp_tape_input(&tg, &xd));
    compare_node_jt(yc, yg, 0, tol);
    sp_tensor_free(&x);
    sp_tape_free(&tc);
    sp_tape_free(&tg);
}

Test(cuda, avgpool2d_matches_cpu_bitwise)
{
    need_gpu();
    int geo[][3] = {{2, 2, 0}, {3, 2, 1}, {3, 1, 1}, {1, 1, 0}, {4, 3, 2}};
    int shapes[][4] = {{2, 3, 8, 8}, {2, 2, 9, 7}, {1, 3, 5, 6}, {2, 2, 3, 3}, {2, 1, 7, 9}};
    for (int i = 0; i < 5; i++) {
        sp_layer *c = sp_avgpool2d(geo[i][0], geo[i][1], geo[i][2]), *g = sp_avgpool2d(geo[i][0], geo[i][1], geo[i][2]);
        compare_layer_jt(c, g, 4, shapes[i], 400 + i, 0.0);
        sp_layer_free(c);
        sp_layer_free(g);
    }
    for (int i = 0; i < 3; i++) {
        sp_layer *c = sp_global_avgpool2d(), *g = sp_global_avgpool2d();
        compare_layer_jt(c, g, 4, shapes[i], 420 + i, 0.0);
        sp_layer_free(c);
        sp_layer_free(g);
    }
}

#define BN_TOL 1e-5

static void compare_bn_buffers(const sp_layer *c, const sp_layer *g, const char *what)
{
    for (int i = 0; i < c->nbuffers; i++) {
        double e = diff_vs_host(&g->buffers[i]->value, &c->buffers[i]->value);
        cr_assert_leq(e, BN_TOL, "batchnorm2d %s: buffer %s err %.2e", what, c->buffers[i]->name, e);
    }
}

/* batchnorm2d, and batchnorm2d_relu (the same layer clamped: its δ, G and Jᵀ masked). */
Test(cuda, batchnorm2d_matches_cpu)
{
    need_gpu();
    int shapes[][4] = {{4, 3, 5, 6}, {2, 16, 8, 8}, {3, 2, 1, 1}, {1, 5, 17, 19}};
    for (int k = 0; k < 8; k++) {
        int i = k % 4, C = shapes[i][1];
        sp_layer *(*make)(const char *, int) = k < 4 ? sp_batchnorm2d : sp_batchnorm2d_relu;
        sp_layer *c = make("bn", C), *g = make("bn", C);
        twin_layers(c, g, 500 + i);
        /* γ, β away from 1, 0 so that they matter */
        sp_layer_to_device(g, SP_CPU);
        tu_fill_uniform(c->params[0]->value.data, (size_t)C, 510 + i, 0.5f, 1.5f);
        tu_fill_uniform(c->params[1]->value.data, (size_t)C, 520 + i, -0.5f, 0.5f);
        sp_tensor_copy(&g->params[0]->value, &c->params[0]->value);
        sp_tensor_copy(&g->params[1]->value, &c->params[1]->value);
        sp_layer_to_device(g, SP_CUDA);
        compare_layer(c, g, 4, shapes[i], 530 + i, BN_TOL);   /* training mode */
        compare_bn_buffers(c, g, "training");
        compare_layer(c, g, 4, shapes[i], 540 + i, BN_TOL);   /* running stats move again */
        compare_bn_buffers(c, g, "second step");
        c->eval = g->eval = true;   /* eval mode: the running statistics, and a Jᵀ */
        compare_layer_jt(c, g, 4, shapes[i], 550 + i, BN_TOL);
        compare_bn_buffers(c, g, "eval");
        sp_layer_free(c);
        sp_layer_free(g);
    }
}

Test(cuda, dropout_masks_match_cpu_bitwise)
{
    need_gpu();
    float ps[] = {0.5f, 0.1f, 0.0f};
    for (int i = 0; i < 3; i++) {
        sp_layer *c = sp_dropout(ps[i]), *g = sp_dropout(ps[i]);
        sp_rng rc, rg;
        sp_rng_seed(&rc, 600 + i);
        sp_rng_seed(&rg, 600 + i);
        c->op->init_params(c, &rc);
        g->op->init_params(g, &rg);
        /* Twice: the generator advances the same on both devices. */
        compare_layer_jt(c, g, 4, (int[]){3, 2, 5, 7}, 610 + i, 0.0);
        compare_layer(c, g, 2, (int[]){5, 301}, 620 + i, 0.0);
        c->eval = g->eval = true;
        compare_layer_jt(c, g, 2, (int[]){4, 9}, 630 + i, 0.0);
        sp_layer_free(c);
        sp_layer_free(g);
    }
}

Test(cuda, conv2d_groups_matches_cpu)
{
    need_gpu();
    /* cin, cout, k, stride, pad, groups, bias; input H, W */
    int cfg[][9] = {{4, 6, 3, 1, 1, 2, 1, 7, 6},
                    {6, 6, 3, 2, 1, 6, 0, 9, 8},   /* depthwise, no bias */
                    {6, 9, 1, 1, 0, 3, 1, 5, 5},
                    {8, 4, 5, 2, 2, 4, 0, 11, 10}};
    for (int i = 0; i < 4; i++) {
        int *q = cfg[i];
        sp_layer *c = sp_conv2d_groups("g", q[0], q[1], q[2], q[3], q[4], q[5], q[6]);
        sp_layer *g = sp_conv2d_groups("g", q[0], q[1], q[2], q[3], q[4], q[5], q[6]);
        cr_assert_eq(c->op, &sp_op_conv2d_groups);
        twin_layers(c, g, 700 + i);
        compare_layer(c, g, 4, (int[]){3, q[0], q[7], q[8]}, 710 + i, GEMM_TOL);
        /* Jᵀ: the weights themselves, bitwise */
        sp_tape tc, tg;
        sp_tape_init(&tc);
        sp_tape_init(&tg);
        sp_tensor x = sp_tensor_new(4, (int[]){2, q[0], q[7], q[8]});
        tu_fill_uniform(x.data, x.numel, 720 + i, -1.0f, 1.0f);
        sp_node *yc = sp_apply(&tc, c, sp_tape_input(&tc, &x));
        sp_tensor xd = upload(&tg, &x);
        compare_node_jt(yc, sp_apply(&tg, g, sp_tape_input(&tg, &xd)), 0, 0.0);
        sp_tensor_free(&x);
        sp_tape_free(&tc);
        sp_tape_free(&tg);
        sp_layer_free(c);
        sp_layer_free(g);
    }
}

/* ---- the algorithm search of the shared cuDNN convolution (layers/cudnn_conv.cu) ---------- */

static bool emulated(void)
{
    struct cudaDeviceProp p;
    return cudaGetDeviceProperties(&p, 0) == cudaSuccess && strcmp(p.name, "scanprop CUDA emulator") == 0;
}

/* cuDNN may rank a non-deterministic algorithm fastest (backward-filter on an H200 did,
 * and the ooo engine's gradients then differed from the linear engine's): the search must
 * skip it. Under the emulator, SCANPROP_EMU_CUDNN_NONDET=first lists such an algorithm
 * first in every direction and aborts the test if it runs; on a GPU the variable does
 * nothing and these are two more comparisons. */
Test(cuda, conv_skips_nondeterministic_algorithms)
{
    setenv("SCANPROP_EMU_CUDNN_NONDET", "first", 1);
    need_gpu();
    sp_layer *c = sp_conv2d("conv", 3, 4, 3, 1, 1), *g = sp_conv2d("conv", 3, 4, 3, 1, 1);
    twin_layers(c, g, 730);
    compare_layer(c, g, 4, (int[]){2, 3, 6, 5}, 731, GEMM_TOL);
    sp_layer_free(c);
    sp_layer_free(g);
    c = sp_conv2d_groups("g", 4, 6, 3, 2, 1, 2, true);
    g = sp_conv2d_groups("g", 4, 6, 3, 2, 1, 2, true);
    twin_layers(c, g, 732);
    compare_layer(c, g, 4, (int[]){2, 4, 7, 6}, 733, GEMM_TOL);
    sp_layer_free(c);
    sp_layer_free(g);
}

typedef struct apply_args {
    sp_tape *t;
    sp_layer *l;
    sp_node *x;
} apply_args;

static void apply_layer(void *arg)
{
    apply_args *a = arg;
    sp_apply(a->t, a->l, a->x);
}

/* No deterministic algorithm at all (SCANPROP_EMU_CUDNN_NONDET=all, emulator only): a
 * clear failure naming the op and the direction, not a silent non-deterministic pick. */
Test(cuda, conv_without_deterministic_algorithm_fails_clearly)
{
    setenv("SCANPROP_EMU_CUDNN_NONDET", "all", 1);
    need_gpu();
    if (!emulated()) cr_skip_test("needs the CUDA emulator's SCANPROP_EMU_CUDNN_NONDET");
    const char *names[] = {"conv2d", "conv2d_groups"};
    for (int k = 0; k < 2; k++) {
        sp_layer *l = k == 0 ? sp_conv2d("conv", 2, 3, 3, 1, 1) : sp_conv2d_groups("g", 2, 4, 3, 1, 1, 2, false);
        sp_layer_to_device(l, SP_CUDA);
        sp_tape t;
        sp_tape_init(&t);
        sp_tensor x = sp_tensor_new(4, (int[]){1, 2, 5, 5});
        tu_fill_uniform(x.data, x.numel, 740 + k, -1.0f, 1.0f);
        sp_tensor xd = upload(&t, &x);
        apply_args a = {&t, l, sp_tape_input(&t, &xd)};
        cr_assert_eq(sp_try(apply_layer, &a), SP_ERR, "%s: ran with only non-deterministic algorithms", names[k]);
        char want[96];
        snprintf(want, sizeof want, "%s: cuDNN found no deterministic forward algorithm", names[k]);
        cr_assert(strstr(sp_last_error(), want), "message: %s", sp_last_error());
        sp_tensor_free(&x);
        sp_tape_free(&t);
        sp_layer_free(l);
    }
}

/* A DAG with every new op and two fan-outs (the engines' δ sums on the device):
 *   x → conv → bn → relu ─┬→ gconv → bn → add ─→ avgpool ─┬→ concat → dropout → gap → fc
 *                         └────────────────────┘           └→ dwconv ┘                     */
static sp_model *dagnet(void)
{
    sp_model *m = sp_model_new("dagnet");
    sp_model_set_loss(m, sp_softmax_ce());
    sp_model_add(m, sp_conv2d_nobias("c1", 2, 8, 3, 1, 1));
    sp_model_add(m, sp_batchnorm2d("bn1", 8));
    int r = sp_model_add_from(m, sp_relu(), 1, (int[]){sp_model_last(m)});
    sp_model_add(m, sp_conv2d_groups("g1", 8, 8, 3, 1, 1, 4, false));
    int b = sp_model_add_from(m, sp_batchnorm2d("bn2", 8), 1, (int[]){sp_model_last(m)});
    sp_model_add_from(m, sp_add(), 2, (int[]){b, r});
    int p = sp_model_add_from(m, sp_avgpool2d(2, 2, 0), 1, (int[]){sp_model_last(m)});
    int d = sp_model_add_from(m, sp_conv2d_groups("dw", 8, 8, 3, 1, 1, 8, true), 1, (int[]){p});
    sp_model_add_from(m, sp_concat(), 2, (int[]){p, d});
    sp_model_add(m, sp_dropout(0.25f));
    sp_model_add(m, sp_global_avgpool2d());
    sp_model_add(m, sp_linear("fc", 16, 5));
    return m;
}

static sp_model *resnet20(void) { return sp_zoo_resnet20(1, 10); }

Test(cuda, dag_training_steps_match_cpu)
{
    need_gpu();
    compare_training(dagnet, 4, (int[]){3, 2, 8, 8}, 5, "sgd");
    compare_training(dagnet, 4, (int[]){3, 2, 8, 8}, 5, "adam");
}

Test(cuda, resnet20_training_step_matches_cpu)
{
    need_gpu();
    compare_training(resnet20, 4, (int[]){2, 1, 32, 32}, 10, "sgd");
}
