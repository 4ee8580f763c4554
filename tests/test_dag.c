/* test_dag.c — models beyond chains: the ops of several inputs (add, concat) checked
 * input by input against finite differences, a whole DAG's parameter gradients (fan-in,
 * fan-out, a node read twice by one op, a dead branch) against finite differences of
 * the loss, and every engine on DAG models against linear BP: bppsa within 1e-4
 * (another association order), ooo bitwise (memcmp) in every order on one and two lanes.
 * Models: tests/testutil.c (resmlp, resconv, dense). */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "schedulers/backward/engine.h"
#include "schedulers/backward/engines.h"
#include "schedulers/backward/ooo.h"
#include "core/model.h"
#include "core/io/safetensors.h"
#include "core/io/model_io.h"
#include "core/threads.h"
#include "core/kernels/dnnl.h"
#include "layers/layers.h"
#include "tests/testutil.h"

#define GC_TOL 5e-3
#define BPPSA_TOL 1e-4

/* ---- ops of several inputs ------------------------------------------------------------ */

static void check_n(sp_layer *l, int n, const int *ndims, const int (*shapes)[SP_MAX_DIMS], uint64_t seed)
{
    tu_gc_result r = tu_gradcheck_n(l, n, ndims, shapes, seed, NULL);
    cr_assert_eq(r.ninputs, n);
    for (int i = 0; i < n; i++)
        cr_assert_lt(r.err_in[i], GC_TOL, "%s δ of input %d: err %.2e", l->op->name, i, r.err_in[i]);
    cr_assert_gt(r.max_abs_dx, 0.0, "%s δ is all zeros", l->op->name);
    sp_layer_free(l);
}

Test(gradcheck, add_two_and_three_inputs)
{
    check_n(sp_add(), 2, (int[]){2, 2}, (const int[][SP_MAX_DIMS]){{3, 5}, {3, 5}}, 1);
    check_n(sp_add(), 3, (int[]){4, 4, 4}, (const int[][SP_MAX_DIMS]){{2, 3, 4, 5}, {2, 3, 4, 5}, {2, 3, 4, 5}}, 2);
}

Test(gradcheck, concat_channels)
{
    check_n(sp_concat(), 3, (int[]){4, 4, 4}, (const int[][SP_MAX_DIMS]){{2, 1, 3, 4}, {2, 3, 3, 4}, {2, 2, 3, 4}}, 3);
    check_n(sp_concat(), 2, (int[]){2, 2}, (const int[][SP_MAX_DIMS]){{3, 4}, {3, 7}}, 4);
}

/* y = concat(a, b): known values, and δ_i is input i's slice of dy. */
Test(concat, values_and_slices)
{
    float a[2 * 1 * 2] = {1, 2, 3, 4}, b[2 * 2 * 2] = {5, 6, 7, 8, 9, 10, 11, 12};
    sp_tensor ta = sp_tensor_view(a, 3, (int[]){2, 1, 2}), tb = sp_tensor_view(b, 3, (int[]){2, 2, 2});
    sp_tape t;
    sp_tape_init(&t);
    sp_layer *l = sp_concat();
    sp_node *y = sp_apply2(&t, l, sp_tape_input(&t, &ta), sp_tape_input(&t, &tb));
    const float want[12] = {1, 2, 5, 6, 7, 8, 3, 4, 9, 10, 11, 12};
    cr_assert_eq(y->out.shape[1], 3);
    cr_assert(memcmp(y->out.data, want, sizeof want) == 0);
    float db[8];
    sp_tensor dy = sp_tensor_view((float *)want, 3, y->out.shape), dbt = sp_tensor_view(db, 3, tb.shape);
    y->kern->backward_input(y, 1, &dy, &dbt);
    cr_assert(memcmp(db, b, sizeof db) == 0);
    sp_tape_free(&t);
    sp_layer_free(l);
}

/* A refused op is a status naming it (core/tape.h), no exit. */
static void apply_bad(int which, const char *says)
{
    sp_tensor a = sp_tensor_new(2, (int[]){2, 3}), b = sp_tensor_new(2, (int[]){2, 4});
    sp_tape t;
    sp_tape_init(&t);
    sp_node *na = sp_tape_input(&t, &a), *nb = sp_tape_input(&t, &b);
    sp_layer *l = which == 0 ? sp_add() : sp_relu();
    sp_clear_error();
    tu_refused(!sp_apply2(&t, l, na, which == 0 ? nb : na), says);
    cr_assert_eq(t.n, 2, "the refused node stayed on the tape");
    sp_tape_free(&t);
    sp_layer_free(l);
    sp_tensor_free(&a);
    sp_tensor_free(&b);
}

Test(errors, add_shape_mismatch_is_refused) { apply_bad(0, "add: input 1 is [2, 4], expected input 0's shape [2, 3]"); }
Test(errors, relu_given_two_inputs_is_refused) { apply_bad(1, "op relu: applied to 2 inputs, expected 1"); }
Test(errors, model_reading_a_later_layer_is_refused)
{
    sp_model *m = sp_model_new("m");
    tu_refused(sp_model_add_from(m, sp_add(), 2, (int[]){SP_MODEL_INPUT, 3}) == SP_MODEL_NONE, "reads layer 3");
    sp_model_free(m);
}

/* ---- a whole DAG against finite differences ----------------------------------------- */

typedef struct fixture {
    sp_model *m;
    sp_tensor x;
    int y[8];
} fixture;

static fixture make(const char *name, int B, uint64_t seed)
{
    fixture f = {.m = tu_dag_model(name)};
    int s[4] = {B}, nd = 1 + tu_dag_input_shape(name, s + 1);
    f.x = sp_tensor_new(nd, s);
    tu_fill_uniform(f.x.data, f.x.numel, seed, -1, 1);
    for (int b = 0; b < B; b++) f.y[b] = (int)((seed + 3 * (uint64_t)b) % 5);
    sp_model_init(f.m, seed);
    return f;
}

static void drop(fixture *f)
{
    sp_tensor_free(&f->x);
    sp_model_free(f->m);
}

static double loss_of(fixture *f, sp_tape *t)
{
    sp_tape_reset(t);
    return sp_model_loss(f->m, t, &f->x, f->y)->out.data[0];
}

static void gradients(fixture *f, const char *engine, const sp_engine_opts *o)
{
    sp_engine *e = sp_engine_create(engine, o);
    sp_tape t;
    sp_tape_init(&t);
    sp_model_zero_grad(f->m);
    sp_backward(e, &t, sp_model_loss(f->m, &t, &f->x, f->y));
    sp_tape_free(&t);
    sp_engine_destroy(e);
}

/* resmlp is smooth (tanh, sigmoid): no kink inside a finite-difference step. The ReLU
 * models are covered by their ops' own checks and by the engines' agreement below. */
Test(dag, parameter_gradients_match_finite_differences)
{
    const char *names[] = {"resmlp"};
    for (int k = 0; k < 1; k++) {
        fixture f = make(names[k], 3, 11 + k);
        gradients(&f, "linear", NULL);
        sp_tape t;
        sp_tape_init(&t);
        sp_rng pick;
        sp_rng_seed(&pick, 5);
        int kinks = 0, checked = 0;
        double l0 = loss_of(&f, &t);
        for (int p = 0; p < f.m->nparams; p++) {
            sp_param *P = f.m->params[p];
            double worst = 0, scale = 1e-2;
            for (int c = 0; c < 6; c++) {
                size_t i = sp_rng_below(&pick, (uint32_t)P->value.numel);
                float keep = P->value.data[i];
                const double eps = 1e-2;
                P->value.data[i] = keep + (float)eps;
                double lp = loss_of(&f, &t);
                P->value.data[i] = keep - (float)eps;
                double lm = loss_of(&f, &t);
                P->value.data[i] = keep;
                /* a ReLU or max-pool kink inside [−eps, eps]: the one-sided slopes differ */
                if (fabs((lp - l0) - (l0 - lm)) / eps > 2e-3) {
                    kinks++;
                    continue;
                }
                double fd = (lp - lm) / (2 * eps);
                worst = fmax(worst, fabs(fd - P->grad.data[i]));
                scale = fmax(scale, fabs(fd));
                checked++;
            }
            cr_assert_lt(worst / scale, 5e-3, "%s %s: linear BP vs finite differences, err %.2e", names[k], P->name,
                         worst / scale);
        }
        cr_assert_lt(kinks, checked / 8 + 1, "%s: %d of %d entries at a kink", names[k], kinks, kinks + checked);
        sp_tape_free(&t);
        drop(&f);
    }
}

/* ---- every engine against linear BP -------------------------------------------------- */

static float **snapshot(const sp_model *m)
{
    float **g = malloc((size_t)m->nparams * sizeof *g);
    for (int p = 0; p < m->nparams; p++) {
        g[p] = malloc(m->params[p]->grad.numel * sizeof(float));
        memcpy(g[p], m->params[p]->grad.data, m->params[p]->grad.numel * sizeof(float));
    }
    return g;
}

static void free_snapshot(float **g, int n)
{
    for (int p = 0; p < n; p++) free(g[p]);
    free(g);
}

static void engines_equal_linear(const char *name, int B)
{
    static const char *orders[] = {"conventional", "ooo", "reverse-first-k", "list"};
    for (int threads = 1; threads <= 2; threads++) {
        sp_set_threads(threads);
        fixture f = make(name, B, 21);
        gradients(&f, "linear", NULL);
        float **ref = snapshot(f.m);
        double norm = 0;
        for (int p = 0; p < f.m->nparams; p++)
            for (size_t i = 0; i < f.m->params[p]->grad.numel; i++) norm += fabs(ref[p][i]);
        cr_assert_gt(norm, 0, "%s: every gradient is zero, the comparison would be vacuous", name);
        for (int o = 0; o < 4; o++) {
            gradients(&f, "ooo", &(sp_engine_opts){.own = &(sp_ooo_opts){.order = orders[o]}});
            for (int p = 0; p < f.m->nparams; p++)
                cr_assert(memcmp(ref[p], f.m->params[p]->grad.data, f.m->params[p]->grad.numel * sizeof(float)) == 0,
                          "%s, ooo %s, %d thread(s): grad of %s differs from linear BP", name, orders[o], threads,
                          f.m->params[p]->name);
        }
        for (int levels = -1; levels <= 2; levels++) {
            gradients(&f, "bppsa", &(sp_engine_opts){.own = &(sp_bppsa_opts){.scan_levels = levels}});
            for (int p = 0; p < f.m->nparams; p++) {
                double d = tu_max_rel_diff(f.m->params[p]->grad.data, ref[p], f.m->params[p]->grad.numel);
                cr_assert_lt(d, BPPSA_TOL, "%s, bppsa up_levels %d: grad of %s differs by %.2e", name, levels,
                             f.m->params[p]->name, d);
            }
        }
        free_snapshot(ref, f.m->nparams);
        drop(&f);
    }
}

Test(engines, resmlp) { engines_equal_linear("resmlp", 4); }
Test(engines, resconv) { engines_equal_linear("resconv", 3); }
Test(engines, dense_block) { engines_equal_linear("dense", 3); }

/* The model's forward follows its DAG, and the chain test tells the two apart. */
Test(model, dag_forward_and_chain_test)
{
    sp_model *m = tu_dag_model("resmlp");
    cr_assert_not(sp_model_is_chain(m));
    sp_model *c = sp_model_new("chain");
    sp_model_set_loss(c, sp_softmax_ce());
    sp_model_add(c, sp_linear("fc", 3, 3));
    sp_model_add(c, sp_relu());
    cr_assert(sp_model_is_chain(c));
    sp_model_init(m, 1);
    sp_tensor x = sp_tensor_new(2, (int[]){2, 8});
    tu_fill_uniform(x.data, x.numel, 2, -1, 1);
    sp_tape t;
    sp_tape_init(&t);
    sp_node *y = sp_model_forward(m, &t, sp_tape_input(&t, &x));
    cr_assert_eq(y->layer, m->layers[m->nlayers - 1]);
    cr_assert_eq(y->out.shape[1], 5);
    int adds = 0, fanout = 0;
    for (int i = 0; i < t.n; i++) {
        adds += t.nodes[i]->ninputs == 2;
        fanout += t.nodes[i]->nconsumers > 1;
    }
    cr_assert_eq(adds, 3, "two adds and a concat");
    cr_assert_geq(fanout, 2, "the block input and h are read more than once");
    sp_tape_free(&t);
    sp_tensor_free(&x);
    sp_model_free(m);
    sp_model_free(c);
}

/* ---- batch norm, global average pooling, bias-free conv ----------------------------- */

static void check1(sp_layer *l, int ndim, const int *shape, uint64_t seed)
{
    tu_gc_result r = tu_gradcheck(l, ndim, shape, seed, NULL);
    cr_assert_lt(r.err_dx, GC_TOL, "%s δ: err %.2e", l->op->name, r.err_dx);
    cr_assert_gt(r.max_abs_dx, 0.0, "%s δ is all zeros", l->op->name);
    for (int p = 0; p < r.nparams; p++)
        cr_assert_lt(r.err_param[p], GC_TOL, "%s G of %s: err %.2e", l->op->name, l->params[p]->name,
                     r.err_param[p]);
    sp_layer_free(l);
}

Test(gradcheck, batchnorm2d_training_and_eval)
{
    check1(sp_batchnorm2d("bn", 3), 4, (int[]){4, 3, 3, 2}, 31);
    check1(sp_batchnorm2d("bn", 2), 4, (int[]){2, 2, 1, 1}, 32);   /* N = 2 per channel */
    sp_layer *l = sp_batchnorm2d("bn", 3);
    l->eval = true;   /* the running statistics (the init's 0 and 1): a per-channel affine map */
    tu_gc_result r = tu_gradcheck(l, 4, (int[]){3, 3, 2, 2}, 33, NULL);
    cr_assert_lt(tu_gc_worst(&r), GC_TOL, "eval-mode batch norm: err %.2e", tu_gc_worst(&r));
    sp_layer_free(l);
    l = sp_batchnorm2d("bn", 2);
    l->eval = true;
    sp_rng rr;
    sp_rng_seed(&rr, 4);
    l->op->init_params(l, &rr);
    l->params[0]->value.data[0] = 1.5f, l->params[1]->value.data[1] = -0.5f;
    l->buffers[0]->value.data[0] = 0.3f, l->buffers[1]->value.data[1] = 2.0f;
    sp_tensor x = sp_tensor_new(4, (int[]){1, 2, 1, 1});
    x.data[0] = 1.0f, x.data[1] = 2.0f;
    sp_tape t;
    sp_tape_init(&t);
    sp_node *y = sp_apply(&t, l, sp_tape_input(&t, &x));
    cr_assert_float_eq(y->out.data[0], 1.5f * (1.0f - 0.3f) / sqrtf(1.0f + 1e-5f), 1e-6);
    cr_assert_float_eq(y->out.data[1], 2.0f / sqrtf(2.0f + 1e-5f) - 0.5f, 1e-6);
    sp_tape_free(&t);
    sp_tensor_free(&x);
    sp_layer_free(l);
}

/* Training mode normalises with the batch's statistics and moves the running ones by
 * momentum 0.1 (the variance unbiased), counting batches; eval mode leaves them. */
Test(batchnorm2d, running_statistics_follow_pytorch)
{
    sp_layer *l = sp_batchnorm2d("bn", 1);
    float xs[4] = {1, 2, 4, 9};   /* mean 4, biased var 9.5, unbiased 38/3 */
    sp_tensor x = sp_tensor_view(xs, 4, (int[]){2, 1, 1, 2});
    sp_tape t;
    sp_tape_init(&t);
    sp_node *y = sp_apply(&t, l, sp_tape_input(&t, &x));
    for (int i = 0; i < 4; i++) cr_assert_float_eq(y->out.data[i], (xs[i] - 4.0f) / sqrtf(9.5f + 1e-5f), 1e-6);
    cr_assert_float_eq(l->buffers[0]->value.data[0], 0.4f, 1e-6);
    cr_assert_float_eq(l->buffers[1]->value.data[0], 0.9f + 0.1f * 38.0f / 3.0f, 1e-5);
    cr_assert_eq(l->buffers[2]->value.data[0], 1.0f);
    cr_assert_str_eq(l->buffers[0]->name, "bn.running_mean");
    cr_assert_str_eq(l->buffers[2]->name, "bn.num_batches_tracked");
    l->eval = true;
    sp_tape_reset(&t);
    sp_apply(&t, l, sp_tape_input(&t, &x));
    cr_assert_float_eq(l->buffers[0]->value.data[0], 0.4f, 1e-6, "eval mode must not move the statistics");
    cr_assert_eq(l->buffers[2]->value.data[0], 1.0f);
    sp_tape_free(&t);
    sp_layer_free(l);
}

Test(gradcheck, global_avgpool2d_and_bias_free_conv)
{
    check1(sp_global_avgpool2d(), 4, (int[]){2, 3, 4, 5}, 41);
    sp_layer *c = sp_conv2d_nobias("c", 3, 4, 3, 2, 1);
    cr_assert_eq(c->nparams, 1);
    cr_assert_str_eq(c->params[0]->name, "c.weight");
    check1(c, 4, (int[]){2, 3, 5, 5}, 42);
}

/* ---- ResNet-20 ------------------------------------------------------------------------ */

#include "layers/zoo.h"

/* Every engine against linear BP on ResNet-20 (batch norm in training mode), batch 2. */
Test(engines, resnet20, .timeout = 900)
{
    static const char *orders[] = {"conventional", "ooo", "reverse-first-k", "list"};
    sp_set_threads(2);
    sp_model *m = sp_zoo_resnet20(1, 10);
    cr_assert_not(sp_model_is_chain(m));
    sp_model_init(m, 3);
    fixture f = {.m = m, .x = sp_tensor_new(4, (int[]){2, 1, 32, 32}), .y = {3, 7}};
    tu_fill_uniform(f.x.data, f.x.numel, 5, 0, 1);
    gradients(&f, "linear", NULL);
    float **ref = snapshot(m);
    for (int o = 0; o < 4; o++) {
        gradients(&f, "ooo", &(sp_engine_opts){.own = &(sp_ooo_opts){.order = orders[o]}});
        for (int p = 0; p < m->nparams; p++)
            cr_assert(memcmp(ref[p], m->params[p]->grad.data, m->params[p]->grad.numel * sizeof(float)) == 0,
                      "resnet20, ooo %s: grad of %s differs from linear BP", orders[o], m->params[p]->name);
    }
    for (int levels = -1; levels <= 1; levels++) {   /* full scan, K = 0, K = 1 */
        gradients(&f, "bppsa", &(sp_engine_opts){.own = &(sp_bppsa_opts){.scan_levels = levels}});
        for (int p = 0; p < m->nparams; p++) {
            double d = tu_max_rel_diff(m->params[p]->grad.data, ref[p], m->params[p]->grad.numel);
            cr_assert_lt(d, BPPSA_TOL, "resnet20, bppsa up_levels %d: grad of %s differs by %.2e", levels,
                         m->params[p]->name, d);
        }
    }
    free_snapshot(ref, m->nparams);
    drop(&f);
}

/* Names as the CIFAR ResNet code has them, buffers included, and the parameter count
 * of ResNet-20 with option-B shortcuts (0.27 M + the two 1×1 shortcut convs). */
Test(model, resnet20_names_and_size)
{
    sp_model *m = sp_zoo_resnet20(3, 10);
    const char *want[] = {"conv1.weight", "bn1.weight", "bn1.running_var", "layer1.0.conv1.weight",
                          "layer2.0.shortcut.0.weight", "layer2.0.shortcut.1.num_batches_tracked",
                          "layer3.2.bn2.bias", "fc.weight", "fc.bias"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert_not_null(sp_model_param(m, want[i]), "missing %s", want[i]);
    cr_assert_null(sp_model_param(m, "layer1.0.shortcut.0.weight"), "stage 1 has identity shortcuts");
    cr_assert_null(sp_model_param(m, "conv1.bias"), "convs before batch norm have no bias");
    size_t convs = 3 * 16 * 9 + 6 * 16 * 16 * 9 + (16 * 32 * 9 + 5 * 32 * 32 * 9) + (32 * 64 * 9 + 5 * 64 * 64 * 9);
    size_t shortcuts = 16 * 32 + 32 * 64, bn = 2 * (16 + 6 * 16 + 6 * 32 + 6 * 64 + 32 + 64), fc = 64 * 10 + 10;
    cr_assert_eq(sp_model_numel(m), convs + shortcuts + bn + fc);
    sp_model_free(m);
}

/* ---- per-input Jᵀ blocks of add and concat ------------------------------------------ */

/* For each input i and sample b: dense(J_iᵀ)·dy_b == backward_input(n, i, dy)_b. */
static void check_jt_blocks(sp_layer *l, int n, const int (*shapes)[SP_MAX_DIMS], int ndim)
{
    sp_tape t;
    sp_tape_init(&t);
    sp_tensor xs[4];
    sp_node *in[4];
    for (int i = 0; i < n; i++) {
        xs[i] = sp_tensor_new(ndim, shapes[i]);
        tu_fill_uniform(xs[i].data, xs[i].numel, 70 + (uint64_t)i, -1, 1);
        in[i] = sp_tape_input(&t, &xs[i]);
    }
    sp_node *y = sp_apply_n(&t, l, n, in);
    sp_tensor dy = sp_tensor_new(y->out.ndim, y->out.shape);
    tu_fill_uniform(dy.data, dy.numel, 80, -1, 1);
    int B = y->out.shape[0];
    size_t out = sp_tensor_sample_numel(&y->out);
    for (int i = 0; i < n; i++) {
        sp_tensor dx = sp_tensor_new(ndim, shapes[i]);
        y->kern->backward_input(y, i, &dy, &dx);
        size_t rows = sp_tensor_sample_numel(&xs[i]);
        sp_csr jt;
        y->op->jt_pattern(y, i, &jt);
        cr_assert_eq((size_t)jt.rows, rows, "%s J_%dᵀ rows", l->op->name, i);
        cr_assert_eq((size_t)jt.cols, out, "%s J_%dᵀ cols", l->op->name, i);
        for (int b = 0; b < B; b++) {
            y->kern->jt_values(y, i, b, &jt);
            for (size_t r = 0; r < rows; r++) {
                double acc = 0;
                for (int32_t q = jt.indptr[r]; q < jt.indptr[r + 1]; q++)
                    acc += (double)jt.data[q] * dy.data[(size_t)b * out + (size_t)jt.indices[q]];
                cr_assert_float_eq(acc, dx.data[(size_t)b * rows + r], 1e-6, "%s J_%dᵀ·dy, sample %d row %zu",
                                   l->op->name, i, b, r);
            }
        }
        sp_csr_free(&jt);
        sp_tensor_free(&dx);
    }
    for (int i = 0; i < n; i++) sp_tensor_free(&xs[i]);
    sp_tensor_free(&dy);
    sp_tape_free(&t);
    sp_layer_free(l);
}

Test(jt, add_and_concat_per_input)
{
    check_jt_blocks(sp_add(), 2, (const int[][SP_MAX_DIMS]){{2, 3, 2, 2}, {2, 3, 2, 2}}, 4);
    check_jt_blocks(sp_concat(), 3, (const int[][SP_MAX_DIMS]){{2, 1, 2, 3}, {2, 3, 2, 3}, {2, 2, 2, 3}}, 4);
}

/* ---- grouped conv, avgpool2d, dropout ---------------------------------------------------- */

Test(gradcheck, grouped_and_depthwise_conv)
{
    check1(sp_conv2d_groups("g", 4, 6, 3, 1, 1, 2, true), 4, (int[]){2, 4, 5, 5}, 51);
    check1(sp_conv2d_groups("dw", 3, 3, 3, 2, 1, 3, false), 4, (int[]){2, 3, 6, 5}, 52);
    sp_layer *l = sp_conv2d_groups("one", 2, 3, 3, 1, 1, 1, true);
    cr_assert_eq(l->op, &sp_op_conv2d, "groups = 1 is the GEMM conv");
    sp_layer_free(l);
    l = sp_conv2d_groups("dw", 4, 4, 3, 1, 1, 4, false);
    cr_assert_eq(l->params[0]->value.shape[1], 1, "depthwise weight is [C, 1, k, k]");
    sp_layer_free(l);
}

Test(gradcheck, avgpool2d)
{
    check1(sp_avgpool2d(2, 2, 0), 4, (int[]){2, 3, 4, 6}, 61);
    check1(sp_avgpool2d(3, 1, 1), 4, (int[]){2, 2, 5, 4}, 62);
}

/* Dropout: with its mask fixed the map is linear and diagonal, y = m ⊙ x, so δ must be
 * m ⊙ dy with the same m; about p of the elements are dropped and the rest scaled by
 * 1/(1−p); eval mode is the identity; the same seed gives the same masks. */
Test(dropout, mask_delta_eval_and_seed)
{
    float masks[2][1000];
    for (int run = 0; run < 2; run++) {
        sp_model *m = sp_model_new("d");
        sp_model_set_loss(m, sp_softmax_ce());
        sp_layer *l = sp_dropout(0.25f);
        sp_model_add(m, l);
        sp_model_init(m, 9);
        sp_tensor x = sp_tensor_new(2, (int[]){10, 100}), dy = sp_tensor_new(2, (int[]){10, 100}),
                  dx = sp_tensor_new(2, (int[]){10, 100});
        tu_fill_uniform(x.data, x.numel, 1, 0.5f, 1.5f);
        tu_fill_uniform(dy.data, dy.numel, 2, -1, 1);
        sp_tape t;
        sp_tape_init(&t);
        sp_node *y = sp_apply(&t, l, sp_tape_input(&t, &x));
        y->kern->backward_input(y, 0, &dy, &dx);
        int dropped = 0;
        for (size_t i = 0; i < x.numel; i++) {
            float k = y->out.data[i] / x.data[i];
            masks[run][i] = k;
            cr_assert(k == 0.0f || fabsf(k - 1.0f / 0.75f) < 1e-6f, "element %zu scaled by %g", i, k);
            cr_assert_float_eq(dx.data[i], k * dy.data[i], 1e-6);
            dropped += k == 0.0f;
        }
        cr_assert(dropped > 200 && dropped < 300, "%d of 1000 dropped at p = 0.25", dropped);
        sp_model_set_training(m, false);
        sp_tape_reset(&t);
        y = sp_apply(&t, l, sp_tape_input(&t, &x));
        cr_assert(memcmp(y->out.data, x.data, x.numel * sizeof(float)) == 0, "eval mode is the identity");
        sp_tape_free(&t);
        sp_tensor_free(&x), sp_tensor_free(&dy), sp_tensor_free(&dx);
        sp_model_free(m);
    }
    cr_assert(memcmp(masks[0], masks[1], sizeof masks[0]) == 0, "same seed, same mask");
}

/* A checkpoint holds the buffers too: running statistics survive save → load. */
Test(model, resnet20_checkpoint_round_trip_with_buffers)
{
    sp_model *a = sp_zoo_resnet20(1, 10), *b = sp_zoo_resnet20(1, 10);
    sp_model_init(a, 1);
    sp_model_init(b, 2);
    sp_param *rv = sp_model_param(a, "layer2.1.bn1.running_var");
    cr_assert_not_null(rv);
    rv->value.data[3] = 7.5f;
    sp_model_param(a, "bn1.num_batches_tracked")->value.data[0] = 12;
    char path[300];
    snprintf(path, sizeof path, "%s/resnet20.safetensors", tu_tmpdir());
    cr_assert_eq(sp_model_save(a, path), 0);
    cr_assert_eq(sp_model_load(b, path), 0);
    for (int i = 0; i < sp_model_nstate(a); i++) {
        const sp_param *p = sp_model_state(a, i), *q = sp_model_state(b, i);
        cr_assert(memcmp(p->value.data, q->value.data, p->value.numel * sizeof(float)) == 0, "%s differs", p->name);
    }
    cr_assert_eq(sp_model_param(b, "layer2.1.bn1.running_var")->value.data[3], 7.5f);
    remove(path);
    sp_model_free(a), sp_model_free(b);
}

/* sp_model_summary: one line per layer with what it reads, the output shape, parameters
 * and FLOPs; the totals (ResNet-20: 272,186 parameters, ~41 M multiply-adds). */
Test(model, summary_of_resnet20)
{
    sp_model *m = sp_zoo_resnet20(1, 10);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    sp_model_summary(m, 3, (int[]){1, 32, 32}, f);
    fclose(f);
    /* 53 layers: bn → relu and add → relu are the fused ops (19 ReLUs folded in) */
    cr_assert_not_null(strstr(buf, "total: 53 layers, 272186 parameters, 82720000 forward FLOPs per sample (a DAG)"),
                       "%s", buf);
    char want[128];
    snprintf(want, sizeof want, "%-36s %-12s %s", "add_relu_1 (add_relu)", "5,1", "16x32x32");   /* relu(x + f(x)) */
    cr_assert_not_null(strstr(buf, want), "%s", buf);
    cr_assert_not_null(strstr(buf, "add_relu_9 (add_relu)"), "%s", buf);
    cr_assert_not_null(strstr(buf, "layer1.0.bn1 (batchnorm2d_relu)"), "%s", buf);
    cr_assert_null(strstr(buf, "(relu)"), "%s", buf);
    cr_assert_not_null(strstr(buf, "layer2.0.shortcut.0 (conv2d)"), "%s", buf);
    free(buf);
    sp_model_free(m);
}

/* backward_input_params (δ and G from one pass over dy, the linear engine's path) gives
 * bit for bit what backward_input and backward_params give, in training and eval mode. */
Test(batchnorm2d, one_pass_delta_and_g_are_the_two_calls_bitwise)
{
    const int shape[4] = {3, 4, 5, 7}, C = 4;
    for (int mode = 0; mode < 2; mode++) {
        sp_layer *l = sp_batchnorm2d("bn", C);
        tu_fill_uniform(l->params[0]->value.data, (size_t)C, 260, 0.5f, 1.5f);
        tu_fill_uniform(l->params[1]->value.data, (size_t)C, 261, -0.5f, 0.5f);
        l->eval = mode == 1;
        sp_tensor x = sp_tensor_new(4, shape), dy = sp_tensor_new(4, shape), dx2 = sp_tensor_new(4, shape),
                  dx1 = sp_tensor_new(4, shape), g2[2];
        tu_fill_uniform(x.data, x.numel, 262, -2, 2);
        tu_fill_uniform(dy.data, dy.numel, 263, -1, 1);
        sp_tape t;
        sp_tape_init(&t);
        sp_node *y = sp_apply(&t, l, sp_tape_input(&t, &x));
        cr_assert_not_null(y->kern->backward_input_params);
        y->kern->backward_params(y, &dy);
        y->kern->backward_input(y, 0, &dy, &dx2);
        for (int i = 0; i < 2; i++) {
            g2[i] = sp_tensor_new(1, (int[]){C});
            sp_tensor_copy(&g2[i], &l->params[i]->grad);
            sp_tensor_zero(&l->params[i]->grad);
        }
        y->kern->backward_input_params(y, &dy, &dx1, false);
        cr_assert(memcmp(dx1.data, dx2.data, x.numel * sizeof(float)) == 0, "δ differs (mode %d)", mode);
        for (int i = 0; i < 2; i++) {
            cr_assert_neq(g2[i].data[0], 0.0f);
            cr_assert(memcmp(l->params[i]->grad.data, g2[i].data, (size_t)C * sizeof(float)) == 0,
                      "G of %s differs (mode %d)", l->params[i]->name, mode);
            sp_tensor_free(&g2[i]);
        }
        sp_tensor_free(&x), sp_tensor_free(&dy), sp_tensor_free(&dx1), sp_tensor_free(&dx2);
        sp_tape_free(&t);
        sp_layer_free(l);
    }
}

/* backward_input_acc (an input that fans out takes its δ added in the op's own pass) is
 * bit for bit dx + what backward_input writes, and conv2d's backward_input_params (δ and
 * G sharing its blocked dy) what backward_input and backward_params give, for every op
 * that has them: conv2d on
 * oneDNN (the add in the reorder out of the blocked layout, or from scratch where
 * there is no reorder) and on im2col, add, add_relu, relu; on 1 and 2 threads. */
static void acc_is_delta_then_add(sp_layer *l, int nin, const int shape[][4], uint64_t seed, const char *what)
{
    sp_tensor x[4], dy, dx_acc, dx_ref, d;
    sp_tape t;
    sp_tape_init(&t);
    sp_node *in[4];
    for (int k = 0; k < nin; k++) {
        x[k] = sp_tensor_new(4, shape[k]);
        tu_fill_uniform(x[k].data, x[k].numel, seed + (uint64_t)k, -2, 2);
        in[k] = sp_tape_input(&t, &x[k]);
    }
    sp_node *y = sp_apply_n(&t, l, nin, in);
    cr_assert_not_null(y->kern->backward_input_acc, "%s has no backward_input_acc", what);
    dy = sp_tensor_new(y->out.ndim, y->out.shape);
    tu_fill_uniform(dy.data, dy.numel, seed + 10, -1, 1);
    for (int k = 0; k < nin; k++) {
        dx_acc = sp_tensor_new(4, shape[k]), dx_ref = sp_tensor_new(4, shape[k]), d = sp_tensor_new(4, shape[k]);
        tu_fill_uniform(dx_acc.data, dx_acc.numel, seed + 20 + (uint64_t)k, -1, 1);
        sp_tensor_copy(&dx_ref, &dx_acc);
        y->kern->backward_input(y, k, &dy, &d);
        for (size_t i = 0; i < d.numel; i++) dx_ref.data[i] += d.data[i];
        y->kern->backward_input_acc(y, k, &dy, &dx_acc);
        size_t changed = 0;
        for (size_t i = 0; i < d.numel; i++) changed += d.data[i] != 0.0f;
        cr_assert_gt(changed, d.numel / 8, "%s: δ of input %d is mostly zero", what, k);
        cr_assert(memcmp(dx_acc.data, dx_ref.data, d.numel * sizeof(float)) == 0,
                  "%s: backward_input_acc of input %d differs from δ then add", what, k);
        sp_tensor_free(&dx_acc), sp_tensor_free(&dx_ref), sp_tensor_free(&d);
    }
    if (l->nparams > 0) {   /* δ and G in one call, overwriting and adding: the two calls' bits */
        cr_assert_not_null(y->kern->backward_input_params, "%s has no backward_input_params", what);
        sp_tensor *g = &l->params[0]->grad, g_ref = sp_tensor_new(g->ndim, g->shape), g_two = sp_tensor_new(g->ndim, g->shape);
        for (int acc = 0; acc < 2; acc++) {
            dx_acc = sp_tensor_new(4, shape[0]), dx_ref = sp_tensor_new(4, shape[0]), d = sp_tensor_new(4, shape[0]);
            tu_fill_uniform(dx_acc.data, dx_acc.numel, seed + 30, -1, 1);
            sp_tensor_copy(&dx_ref, &dx_acc);
            tu_fill_uniform(g->data, g->numel, seed + 31, -1, 1);
            sp_tensor_copy(&g_ref, g);
            y->kern->backward_params(y, &dy);
            y->kern->backward_input(y, 0, &dy, &d);
            for (size_t i = 0; i < d.numel; i++) dx_ref.data[i] = acc ? dx_ref.data[i] + d.data[i] : d.data[i];
            sp_tensor_copy(&g_two, g);   /* the two calls' G */
            sp_tensor_copy(g, &g_ref);
            y->kern->backward_input_params(y, &dy, &dx_acc, acc);
            cr_assert(memcmp(dx_acc.data, dx_ref.data, dx_ref.numel * sizeof(float)) == 0,
                      "%s: backward_input_params δ (acc %d) differs from backward_input", what, acc);
            cr_assert(memcmp(g->data, g_two.data, g->numel * sizeof(float)) == 0,
                      "%s: backward_input_params G (acc %d) differs from backward_params", what, acc);
            cr_assert(memcmp(g->data, g_ref.data, g->numel * sizeof(float)) != 0, "%s: G unchanged", what);
            sp_tensor_free(&dx_acc), sp_tensor_free(&dx_ref), sp_tensor_free(&d);
        }
        sp_tensor_free(&g_ref), sp_tensor_free(&g_two);
    }
    for (int k = 0; k < nin; k++) sp_tensor_free(&x[k]);
    sp_tensor_free(&dy);
    sp_tape_free(&t);
    sp_layer_free(l);
}

Test(fanout, backward_input_acc_is_delta_then_add_bitwise)
{
    int threads = sp_get_threads();
    bool was = sp_dnnl_conv_on();
    for (int th = 1; th <= 2; th++) {
        sp_set_threads(th);
        for (int dnnl = 0; dnnl < 2; dnnl++) {
            if (dnnl && !sp_dnnl_conv_set(true)) continue;   /* a build without oneDNN */
            if (!dnnl) sp_dnnl_conv_set(false);
            /* 16 channels: oneDNN's blocked layout, the add on the reorder; a 1×1
             * stride-2 shortcut; 4 channels: whatever layout oneDNN picks there */
            sp_layer *c1 = sp_conv2d("c", 16, 16, 3, 1, 1), *c2 = sp_conv2d("s", 16, 32, 1, 2, 0),
                     *c3 = sp_conv2d("c4", 4, 4, 3, 1, 1);
            tu_fill_uniform(c1->params[0]->value.data, c1->params[0]->value.numel, 270, -0.3f, 0.3f);
            tu_fill_uniform(c2->params[0]->value.data, c2->params[0]->value.numel, 271, -0.3f, 0.3f);
            tu_fill_uniform(c3->params[0]->value.data, c3->params[0]->value.numel, 272, -0.3f, 0.3f);
            acc_is_delta_then_add(c1, 1, (const int[][4]){{5, 16, 8, 8}}, 280, dnnl ? "conv2d (oneDNN)" : "conv2d (im2col)");
            acc_is_delta_then_add(c2, 1, (const int[][4]){{5, 16, 8, 8}}, 281, "conv2d 1x1 stride 2");
            acc_is_delta_then_add(c3, 1, (const int[][4]){{3, 4, 6, 6}}, 282, "conv2d 4 channels");
        }
        sp_dnnl_conv_set(was);
        const int sh[3][4] = {{64, 16, 32, 32}, {64, 16, 32, 32}, {64, 16, 32, 32}};   /* above the pool's threshold */
        acc_is_delta_then_add(sp_add(), 2, sh, 283, "add");
        acc_is_delta_then_add(sp_add_relu(), 2, sh, 284, "add_relu");
        acc_is_delta_then_add(sp_add_relu(), 3, (const int[][4]){{2, 3, 4, 5}, {2, 3, 4, 5}, {2, 3, 4, 5}}, 285, "add_relu x3");
        acc_is_delta_then_add(sp_relu(), 1, sh, 286, "relu");
    }
    sp_set_threads(threads);
}

/* ---- the fused ops: batchnorm2d_relu, add_relu ------------------------------------- */

Test(gradcheck, batchnorm2d_relu_and_add_relu)
{
    /* FD steps of 1e-3: a step of the default 1e-2 across ReLU's kink at y = 0 would be
     * the finite difference's error, not the op's */
    tu_gc_opts o = {.eps = 1e-3};
    for (int eval = 0; eval < 2; eval++) {
        sp_layer *l = sp_batchnorm2d_relu("bn", 3);
        l->eval = eval;
        tu_gc_result r = tu_gradcheck(l, 4, (int[]){4, 3, 3, 2}, 34 + (uint64_t)eval, &o);
        cr_assert_lt(tu_gc_worst(&r), GC_TOL, "batchnorm2d_relu (eval %d): err %.2e", eval, tu_gc_worst(&r));
        cr_assert_gt(r.max_abs_dx, 0.0);
        sp_layer_free(l);
    }
    tu_gc_result r = tu_gradcheck_n(sp_add_relu(), 2, (int[]){4, 4}, (const int[][SP_MAX_DIMS]){{2, 3, 4, 5}, {2, 3, 4, 5}},
                                    36, &o);
    cr_assert_lt(tu_gc_worst(&r), GC_TOL, "add_relu: err %.2e", tu_gc_worst(&r));
    cr_assert_gt(r.max_abs_dx, 0.0);
}

Test(jt, add_relu_per_input)
{
    check_jt_blocks(sp_add_relu(), 2, (const int[][SP_MAX_DIMS]){{2, 3, 2, 2}, {2, 3, 2, 2}}, 4);
    check_jt_blocks(sp_add_relu(), 3, (const int[][SP_MAX_DIMS]){{2, 2, 3, 2}, {2, 2, 3, 2}, {2, 2, 3, 2}}, 4);
}

static void same_bits(const sp_tensor *a, const sp_tensor *b, const char *what, int mode)
{
    cr_assert_eq(a->numel, b->numel, "%s", what);
    cr_assert(memcmp(a->data, b->data, a->numel * sizeof(float)) == 0, "%s differs (mode %d)", what, mode);
}

/* batchnorm2d_relu against batchnorm2d then relu, in training and eval mode: y, the
 * running statistics, δ and G bit for bit, and its backward_input_params (δ and G in
 * one pass) bit for bit its two separate calls. γ, β random so that the mask cuts
 * inside the channels. */
Test(fused, batchnorm2d_relu_is_bitwise_batchnorm2d_then_relu)
{
    const int shape[4] = {3, 4, 5, 7}, C = 4;
    for (int mode = 0; mode < 2; mode++) {
        sp_layer *f = sp_batchnorm2d_relu("bn", C), *b = sp_batchnorm2d("bn", C), *r = sp_relu();
        cr_assert_eq(f->op, &sp_op_batchnorm2d_relu);
        cr_assert_str_eq(f->params[0]->name, "bn.weight");
        cr_assert_str_eq(f->buffers[1]->name, "bn.running_var");
        for (int i = 0; i < 2; i++) {
            tu_fill_uniform(f->params[i]->value.data, (size_t)C, 200 + (uint64_t)i, -1, 1);
            tu_fill_uniform(f->buffers[i]->value.data, (size_t)C, 210 + (uint64_t)i, 0.5f, 1.5f);
            sp_tensor_copy(&b->params[i]->value, &f->params[i]->value);
            sp_tensor_copy(&b->buffers[i]->value, &f->buffers[i]->value);
        }
        f->eval = b->eval = mode == 1;
        sp_tensor x = sp_tensor_new(4, shape), dy = sp_tensor_new(4, shape);
        tu_fill_uniform(x.data, x.numel, 220 + (uint64_t)mode, -2, 2);
        tu_fill_uniform(dy.data, dy.numel, 230 + (uint64_t)mode, -1, 1);
        sp_tape tf, tb;
        sp_tape_init(&tf);
        sp_tape_init(&tb);
        sp_node *yf = sp_apply(&tf, f, sp_tape_input(&tf, &x));
        sp_node *yb = sp_apply(&tb, b, sp_tape_input(&tb, &x));
        sp_node *yr = sp_apply(&tb, r, yb);
        same_bits(&yf->out, &yr->out, "forward", mode);
        size_t zeros = 0;
        for (size_t i = 0; i < x.numel; i++) zeros += yf->out.data[i] == 0.0f;
        cr_assert(zeros > x.numel / 5 && zeros < x.numel * 4 / 5, "ReLU cut %zu of %zu", zeros, x.numel);
        for (int i = 0; i < 2; i++) same_bits(&f->buffers[i]->value, &b->buffers[i]->value, "running statistics", mode);
        /* the pair: relu's δ is batch norm's dy */
        sp_tensor dyb = sp_tensor_new(4, shape), dxb = sp_tensor_new(4, shape), dxf = sp_tensor_new(4, shape);
        yr->kern->backward_input(yr, 0, &dy, &dyb);
        yb->kern->backward_params(yb, &dyb);
        yb->kern->backward_input(yb, 0, &dyb, &dxb);
        yf->kern->backward_params(yf, &dy);
        yf->kern->backward_input(yf, 0, &dy, &dxf);
        same_bits(&dxf, &dxb, "δ", mode);
        for (int i = 0; i < 2; i++) same_bits(&f->params[i]->grad, &b->params[i]->grad, "G", mode);
        /* one pass for both, from zeroed grads: the bits of the two calls */
        sp_tensor g1[2], dx1 = sp_tensor_new(4, shape);
        for (int i = 0; i < 2; i++) {
            g1[i] = sp_tensor_new(1, (int[]){C});
            sp_tensor_copy(&g1[i], &f->params[i]->grad);
            sp_tensor_zero(&f->params[i]->grad);
        }
        yf->kern->backward_input_params(yf, &dy, &dx1, false);
        same_bits(&dx1, &dxf, "batchnorm2d_relu backward_input_params δ", mode);
        for (int i = 0; i < 2; i++) {
            same_bits(&f->params[i]->grad, &g1[i], "batchnorm2d_relu backward_input_params G", mode);
            sp_tensor_free(&g1[i]);
        }
        sp_tensor_free(&x), sp_tensor_free(&dy), sp_tensor_free(&dyb), sp_tensor_free(&dxb), sp_tensor_free(&dxf);
        sp_tensor_free(&dx1);
        sp_tape_free(&tf), sp_tape_free(&tb);
        sp_layer_free(f), sp_layer_free(b), sp_layer_free(r);
    }
}

/* add_relu against add then relu, with two and three inputs: y and every δ_i bitwise. */
Test(fused, add_relu_is_bitwise_add_then_relu)
{
    const int shape[4] = {2, 3, 5, 4};
    for (int n = 2; n <= 3; n++) {
        sp_layer *f = sp_add_relu(), *a = sp_add(), *r = sp_relu();
        sp_tensor xs[3];
        sp_node *inf[3], *inb[3];
        sp_tape tf, tb;
        sp_tape_init(&tf);
        sp_tape_init(&tb);
        for (int i = 0; i < n; i++) {
            xs[i] = sp_tensor_new(4, shape);
            tu_fill_uniform(xs[i].data, xs[i].numel, 240 + (uint64_t)i, -1, 1);
            inf[i] = sp_tape_input(&tf, &xs[i]);
            inb[i] = sp_tape_input(&tb, &xs[i]);
        }
        sp_node *yf = sp_apply_n(&tf, f, n, inf), *ya = sp_apply_n(&tb, a, n, inb), *yr = sp_apply(&tb, r, ya);
        same_bits(&yf->out, &yr->out, "add_relu forward", n);
        sp_tensor dy = sp_tensor_new(4, shape), dya = sp_tensor_new(4, shape), dxa = sp_tensor_new(4, shape),
                  dxf = sp_tensor_new(4, shape);
        tu_fill_uniform(dy.data, dy.numel, 250, -1, 1);
        yr->kern->backward_input(yr, 0, &dy, &dya);
        size_t zeros = 0;
        for (int i = 0; i < n; i++) {
            ya->kern->backward_input(ya, i, &dya, &dxa);
            yf->kern->backward_input(yf, i, &dy, &dxf);
            same_bits(&dxf, &dxa, "add_relu δ", n);
        }
        for (size_t i = 0; i < dxf.numel; i++) zeros += dxf.data[i] == 0.0f;
        cr_assert(zeros > 0 && zeros < dxf.numel, "the mask cut %zu of %zu", zeros, dxf.numel);
        for (int i = 0; i < n; i++) sp_tensor_free(&xs[i]);
        sp_tensor_free(&dy), sp_tensor_free(&dya), sp_tensor_free(&dxa), sp_tensor_free(&dxf);
        sp_tape_free(&tf), sp_tape_free(&tb);
        sp_layer_free(f), sp_layer_free(a), sp_layer_free(r);
    }
}
