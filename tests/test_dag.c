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
#include "core/engine.h"
#include "core/model.h"
#include "core/parallel.h"
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
    y->op->backward_input(y, 1, &dy, &dbt);
    cr_assert(memcmp(db, b, sizeof db) == 0);
    sp_tape_free(&t);
    sp_layer_free(l);
}

static void apply_bad(int which)
{
    sp_tensor a = sp_tensor_new(2, (int[]){2, 3}), b = sp_tensor_new(2, (int[]){2, 4});
    sp_tape t;
    sp_tape_init(&t);
    sp_node *na = sp_tape_input(&t, &a), *nb = sp_tape_input(&t, &b);
    if (which == 0) sp_apply2(&t, sp_add(), na, nb);
    if (which == 1) sp_apply2(&t, sp_relu(), na, na);
    if (which == 2) sp_model_add_from(sp_model_new("m"), sp_add(), 2, (int[]){SP_MODEL_INPUT, 3});
}

Test(errors, add_shape_mismatch_exits_2, .exit_code = 2, .init = cr_redirect_stderr) { apply_bad(0); }
Test(errors, relu_given_two_inputs_exits_2, .exit_code = 2, .init = cr_redirect_stderr) { apply_bad(1); }
Test(errors, model_reading_a_later_layer_exits_2, .exit_code = 2, .init = cr_redirect_stderr) { apply_bad(2); }

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
            gradients(&f, "ooo", &(sp_engine_opts){.order = orders[o]});
            for (int p = 0; p < f.m->nparams; p++)
                cr_assert(memcmp(ref[p], f.m->params[p]->grad.data, f.m->params[p]->grad.numel * sizeof(float)) == 0,
                          "%s, ooo %s, %d thread(s): grad of %s differs from linear BP", name, orders[o], threads,
                          f.m->params[p]->name);
        }
        for (int levels = -1; levels <= 2; levels++) {
            gradients(&f, "bppsa", &(sp_engine_opts){.scan_levels = levels});
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
