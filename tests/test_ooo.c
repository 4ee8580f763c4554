/* test_ooo.c — the out-of-order engine: its task graph, every order, the two-lane
 * executor, the memory model and cap, the trace, and bitwise identity with the linear
 * engine (same arithmetic in another order: tolerance 0, compared with memcmp). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "layers/zoo.h"
#include "core/kernels/dnnl.h"
#include "schedulers/backward/engine.h"
#include "core/model.h"
#include "core/threads.h"
#include "layers/layers.h"
#include "optim/optim.h"
#include "schedulers/backward/ooo.h"
#include "tests/testutil.h"

static const char *const ORDERS[] = {"conventional", "ooo", "reverse-first-k", "list"};
#define NORDERS 4

/* ---- models ---------------------------------------------------------------------------- */

/* A zoo model, or "branchy": fc1 → tanh → h consumed three times (two dead branches)
 * and one layer applied three times (shared weights), to exercise fan-out sums and the
 * ordering of repeated weight gradients. */
typedef struct tmodel {
    const char *name;
    sp_model *m;
    int ndim, shape[4];
    sp_layer *fc1, *t1, *deadA, *deadB, *shared, *t2, *head;
} tmodel;

static tmodel tm_make(const char *name, int batch)
{
    tmodel tm = {.name = name};
    if (strcmp(name, "branchy") == 0) {
        sp_model *m = tm.m = sp_model_new("branchy");
        sp_model_set_loss(m, sp_softmax_ce());
        tm.fc1 = sp_linear("fc1", 8, 6);
        sp_model_add(m, tm.fc1);
        tm.t1 = sp_tanh();
        sp_model_add(m, tm.t1);
        tm.deadA = sp_linear("dead", 6, 3);
        sp_model_add(m, tm.deadA);
        tm.deadB = sp_sigmoid();
        sp_model_add(m, tm.deadB);
        tm.shared = sp_linear("shared", 6, 6);
        sp_model_add(m, tm.shared);
        tm.t2 = sp_tanh();
        sp_model_add(m, tm.t2);
        tm.head = sp_linear("head", 6, 5);
        sp_model_add(m, tm.head);
        tm.ndim = 2;
        tm.shape[1] = 8;
    } else if (strcmp(name, "resconv") == 0 || strcmp(name, "dense") == 0) {   /* DAGs: tests/testutil.c */
        tm.m = tu_dag_model(name);
        tm.ndim = 1 + tu_dag_input_shape(name, tm.shape + 1);
    } else if (strcmp(name, "rnn") == 0 || strcmp(name, "gru") == 0) {
        int C = name[0] == 'r' ? 1 : 12;
        tm.m = name[0] == 'r' ? sp_zoo_rnn(C, 20, 10) : sp_zoo_gru(C, 20, 10);
        tm.ndim = 3;
        tm.shape[1] = 24;   /* T: short sequences keep the suite fast */
        tm.shape[2] = C;
    } else {
        int s[3];
        tm.m = sp_zoo_model(name);
        tm.ndim = 1 + sp_zoo_input_shape(name, s);
        memcpy(tm.shape + 1, s, sizeof s);
    }
    tm.shape[0] = batch;
    sp_model_init(tm.m, 7);
    return tm;
}

static sp_node *tm_loss(tmodel *tm, sp_tape *t, const sp_tensor *x, const int *y)
{
    if (!tm->fc1) return sp_model_loss(tm->m, t, x, y);
    sp_node *h = sp_apply(t, tm->t1, sp_apply(t, tm->fc1, sp_tape_input(t, x)));
    sp_apply(t, tm->deadA, h);
    sp_apply(t, tm->deadB, h);
    sp_node *z = h;
    for (int i = 0; i < 3; i++) z = sp_apply(t, tm->t2, sp_apply(t, tm->shared, z));
    return sp_apply_loss(t, tm->m->loss, sp_apply(t, tm->head, z), y);
}

typedef struct batch {
    sp_tensor x;
    int y[64];
} batch;

static batch make_batch(const tmodel *tm, uint64_t seed)
{
    batch b = {.x = sp_tensor_new(tm->ndim, tm->shape)};
    tu_fill_uniform(b.x.data, b.x.numel, seed, -1, 1);
    for (int i = 0; i < tm->shape[0]; i++) b.y[i] = (int)((seed * 7 + (uint64_t)i * 3) % 5);
    return b;
}

/* ---- training: the linear engine + a full optimizer step, or ooo + per-layer U ------ */

static void update_layer(void *ctx, sp_layer *l) { sp_optim_step_params(ctx, l->params, l->nparams); }

static sp_optim *make_sgd(sp_model *m)
{
    return sp_sgd_new(m->params, m->nparams, 0.05, 0.9, 0.0, 1e-4, false);
}

typedef struct trained {
    tmodel tm;
    float loss[4];
} trained;

/* steps of SGD with momentum; order NULL: linear engine. lanes: sp_ooo_opts.lanes
 * (0 auto, 1, 2). */
static trained train_lanes(const char *model, int batchsz, const char *order, int lanes, int steps, sp_engine **keep)
{
    trained r = {.tm = tm_make(model, batchsz)};
    sp_optim *o = make_sgd(r.tm.m);
    sp_engine_opts eo = {.own = &(sp_ooo_opts){.order = order, .lanes = lanes}, .update = update_layer, .update_ctx = o};
    sp_engine *e = order ? sp_engine_create("ooo", &eo) : sp_engine_create("linear", NULL);
    sp_tape t;
    sp_tape_init(&t);
    for (int s = 0; s < steps; s++) {
        batch b = make_batch(&r.tm, 100 + (uint64_t)s);
        sp_tape_reset(&t);
        sp_model_zero_grad(r.tm.m);
        sp_node *loss = tm_loss(&r.tm, &t, &b.x, b.y);
        r.loss[s] = loss->out.data[0];
        sp_backward(e, &t, loss);
        if (!order) sp_optim_step(o);
        sp_tensor_free(&b.x);
    }
    sp_tape_free(&t);
    sp_optim_free(o);
    if (keep) *keep = e;
    else sp_engine_destroy(e);
    return r;
}

static trained train(const char *model, int batchsz, const char *order, int steps, sp_engine **keep)
{
    return train_lanes(model, batchsz, order, 0, steps, keep);
}

static void assert_same_model(const trained *a, const trained *b, int steps, const char *what)
{
    for (int s = 0; s < steps; s++)
        cr_assert(memcmp(&a->loss[s], &b->loss[s], sizeof(float)) == 0, "%s: loss of step %d %.9g vs %.9g", what, s,
                  a->loss[s], b->loss[s]);
    for (int p = 0; p < a->tm.m->nparams; p++) {
        const sp_param *pa = a->tm.m->params[p], *pb = b->tm.m->params[p];
        cr_assert(memcmp(pa->grad.data, pb->grad.data, pa->grad.numel * sizeof(float)) == 0,
                  "%s: grad of %s differs (max rel %.3g)", what, pa->name,
                  tu_max_rel_diff(pb->grad.data, pa->grad.data, pa->grad.numel));
        cr_assert(memcmp(pa->value.data, pb->value.data, pa->value.numel * sizeof(float)) == 0,
                  "%s: %s differs after the updates", what, pa->name);
    }
}

/* Every order, on one lane (--threads 1) and on two (--threads 2), against the linear
 * engine run with the same thread setting. lanes: sp_ooo_opts.lanes (2: not with one
 * thread nor the conventional order, which are refused); two: the lanes expected when
 * the plan has two (auto: the tests' both_lanes_always, or the size rule's one). */
static void bitwise_lanes_threads(const char *model, int batchsz, int steps, int tlo, int thi, int lanes, int two)
{
    for (int threads = tlo; threads <= thi; threads++) {
        sp_set_threads(threads);
        trained ref = train(model, batchsz, NULL, steps, NULL);
        for (int o = 0; o < NORDERS; o++) {
            if (lanes == 2 && (threads < 2 || o == 0)) continue;
            sp_engine *e;
            trained got = train_lanes(model, batchsz, ORDERS[o], lanes, steps, &e);
            char what[96];
            snprintf(what, sizeof what, "%s, %s, %d thread(s), lanes %d", model, ORDERS[o], threads, lanes);
            assert_same_model(&ref, &got, steps, what);
            const sp_ooo_stats *st = sp_ooo_last_stats(e);
            int want = threads >= 2 && o != 0 ? two : 1;
            cr_assert_eq(st->lanes, want, "%s: %d lanes, expected %d", what, st->lanes, want);
            if (want == 1) cr_assert_eq(st->busy_s[SP_OOO_SUB], 0.0, "%s: the sub lane ran a task", what);
            cr_assert_eq(st->steps, steps);
            sp_engine_destroy(e);
            sp_model_free(got.tm.m);
        }
        sp_model_free(ref.tm.m);
    }
}

static void bitwise_orders_threads(const char *model, int batchsz, int steps, int tlo, int thi)
{
    bitwise_lanes_threads(model, batchsz, steps, tlo, thi, 0, 2);
}

static void bitwise_all_orders(const char *model, int batchsz, int steps)
{
    bitwise_orders_threads(model, batchsz, steps, 1, 2);
}

/* --lanes 1 and 2 (sp_ooo_opts.lanes) override the size rule and the tuner: with
 * the default rule (LeNet-5 at batch 4 is below it, so auto keeps one lane) two lanes
 * run when asked; with the tests' "always two lanes", one lane runs when asked. The
 * bits are linear BP's either way. */
static void bitwise_forced_lanes(const char *model, int batchsz, int steps)
{
    sp_ooo_exec_set_min_two_lane_flops(5e7);   /* the default: size rule and tuner on */
    bitwise_lanes_threads(model, batchsz, steps, 2, 2, 2, 2);
    sp_ooo_exec_set_min_two_lane_flops(0);     /* auto would be two lanes */
    bitwise_lanes_threads(model, batchsz, steps, 1, 3, 1, 1);
    bitwise_lanes_threads(model, batchsz, steps, 3, 3, 2, 2);
}

/* Above two threads the lanes share the thread pool (first come) instead of keeping
 * off it: the partition an op sees then varies from run to run, its bits must not. */
/* The tests exercise both lanes on small models: no minimum of work. The default, which
 * keeps a small backward on the main lane alone, is tested in exec/small_backward_alone. */
static void __attribute__((constructor)) both_lanes_always(void) { sp_ooo_exec_set_min_two_lane_flops(0); }

Test(bitwise, lenet_three_threads) { bitwise_orders_threads("lenet", 6, 2, 3, 3); }
Test(bitwise, branchy_fanout_and_shared_weights) { bitwise_all_orders("branchy", 4, 3); }
Test(bitwise, mlp) { bitwise_all_orders("mlp", 8, 3); }
Test(bitwise, lenet) { bitwise_all_orders("lenet", 4, 2); }
Test(bitwise, vgg11) { bitwise_all_orders("vgg11", 2, 2); }
Test(bitwise, rnn) { bitwise_all_orders("rnn", 4, 3); }
Test(bitwise, residual_dag) { bitwise_all_orders("resconv", 4, 3); }
Test(bitwise, dense_block_dag) { bitwise_all_orders("dense", 4, 3); }
Test(bitwise, gru) { bitwise_all_orders("gru", 4, 2); }
Test(bitwise, lenet_forced_lanes) { bitwise_forced_lanes("lenet", 4, 3); }
Test(bitwise, branchy_forced_lanes) { bitwise_forced_lanes("branchy", 4, 3); }
Test(bitwise, vgg11_forced_lanes) { bitwise_forced_lanes("vgg11", 2, 2); }

/* A convolution's δ and G run apart in the ooo engine; the first leaves dy in oneDNN's
 * layout for the second (sp_dnnl_dy_share), so on one lane an ooo step reorders exactly
 * as often as linear BP's one call for both, in every order (VGG-11: biased
 * convolutions, NCHW activations, so each δ + G pair has a dy to reorder). (On two
 * lanes a pair may run at once, and then each reorders for itself.) */
Test(bitwise, vgg11_delta_and_grad_share_the_dy_reorder)
{
    if (!sp_dnnl_conv_on() || !sp_dnnl_block()) cr_skip_test("oneDNN's convolutions are off in this build");
    sp_set_threads(1);
    long r0 = sp_dnnl_reorder_count();
    trained ref = train("vgg11", 2, NULL, 2, NULL);
    long linear = sp_dnnl_reorder_count() - r0;
    cr_assert_gt(linear, 0, "VGG-11's convolutions reorder dy, the weights and dW");
    sp_model_free(ref.tm.m);
    for (int o = 0; o < NORDERS; o++) {
        r0 = sp_dnnl_reorder_count();
        trained got = train("vgg11", 2, ORDERS[o], 2, NULL);
        long ooo = sp_dnnl_reorder_count() - r0;
        cr_assert_eq(ooo, linear, "%s on one lane: %ld reorders, linear BP %ld", ORDERS[o], ooo, linear);
        sp_model_free(got.tm.m);
    }
    sp_set_threads(2);   /* two threads, one lane: each call's slots split the batch in two */
    r0 = sp_dnnl_reorder_count();
    ref = train("vgg11", 2, NULL, 2, NULL);
    linear = sp_dnnl_reorder_count() - r0;
    sp_model_free(ref.tm.m);
    r0 = sp_dnnl_reorder_count();
    trained got = train_lanes("vgg11", 2, "reverse-first-k", 1, 2, NULL);
    long ooo = sp_dnnl_reorder_count() - r0;
    sp_model_free(got.tm.m);
    cr_assert_eq(ooo, linear, "two threads on one lane: %ld reorders, linear BP %ld", ooo, linear);
}

/* ---- the graph -------------------------------------------------------------------------- */

static int find_task(const sp_ooo_graph *g, sp_ooo_kind kind, const char *layer)
{
    for (int i = 0; i < g->ntasks; i++)
        if (g->tasks[i].kind == kind && strcmp(g->tasks[i].layer->name, layer) == 0) return i;
    return -1;
}

static bool has_pred(const sp_ooo_graph *g, int task, int pred)
{
    for (int q = 0; q < g->tasks[task].npred; q++)
        if (g->tasks[task].pred[q] == pred) return true;
    return false;
}

Test(graph, true_dependencies_of_a_chain)
{
    tmodel tm = tm_make("mlp", 4);   /* flatten, fc1, relu, fc2, loss */
    batch b = make_batch(&tm, 1);
    sp_tape t;
    sp_tape_init(&t);
    sp_node *loss = tm_loss(&tm, &t, &b.x, b.y);
    sp_ooo_graph *g = sp_ooo_graph_build(&t, loss, true);
    cr_assert_eq(g->L, 2);
    cr_assert_eq(g->nexec, 5 + 2, "δO loss, fc2, relu; δW fc2, fc1; U fc1, fc2 (fc1's input needs no δ)");
    int dW1 = find_task(g, SP_OOO_DW, "fc1"), dW2 = find_task(g, SP_OOO_DW, "fc2"), dO2 = find_task(g, SP_OOO_DO, "fc2");
    int U1 = find_task(g, SP_OOO_U, "fc1"), U2 = find_task(g, SP_OOO_U, "fc2"), F1 = find_task(g, SP_OOO_F, "fc1"),
        F2 = find_task(g, SP_OOO_F, "fc2");
    cr_assert(dW1 >= 0 && dW2 >= 0 && dO2 >= 0 && U1 >= 0 && U2 >= 0 && F1 >= 0 && F2 >= 0);
    cr_assert_eq(g->tasks[dW1].npred, 1);
    cr_assert_eq(g->tasks[g->tasks[dW1].pred[0]].kind, SP_OOO_DO, "δW_fc1 waits only for δO of the relu above");
    cr_assert_eq(g->tasks[g->tasks[dW1].pred[0]].node->op, &sp_op_relu);
    cr_assert_eq(g->tasks[dW2].npred, 1);
    cr_assert_eq(g->tasks[g->tasks[dW2].pred[0]].node, loss, "δW_fc2 waits for the loss's δO");
    cr_assert(has_pred(g, dO2, g->tasks[dW2].pred[0]), "δO_fc2 and δW_fc2 share their one dependency");
    cr_assert_eq(g->tasks[dO2].npred, 1, "nothing waits for a δW except U");
    cr_assert(has_pred(g, U2, dW2) && has_pred(g, U2, dO2), "U_fc2 after δW_fc2 and δO_fc2 (which reads W)");
    cr_assert(has_pred(g, U1, dW1) && g->tasks[U1].npred == 1);
    cr_assert(has_pred(g, F1, U1) && has_pred(g, F2, U2) && has_pred(g, F2, F1), "next forward of i needs U_i");
    for (int i = 0; i < g->nexec; i++)
        for (int q = 0; q < g->tasks[i].npred; q++)
            if (g->tasks[i].kind == SP_OOO_DO) cr_assert_eq(g->tasks[g->tasks[i].pred[q]].kind, SP_OOO_DO, "δO waits for δO only");
    sp_tape_free(&t);
    sp_tensor_free(&b.x);
    sp_model_free(tm.m);
}

Test(graph, fanout_and_shared_weight_edges)
{
    tmodel tm = tm_make("branchy", 3);
    batch b = make_batch(&tm, 2);
    sp_tape t;
    sp_tape_init(&t);
    sp_node *loss = tm_loss(&tm, &t, &b.x, b.y);
    sp_ooo_graph *g = sp_ooo_graph_build(&t, loss, true);
    int nW = 0, U = find_task(g, SP_OOO_U, "shared");
    for (int i = 0; i < g->nexec; i++) {
        const sp_ooo_task *k = &g->tasks[i];
        if (k->kind == SP_OOO_DW && k->layer == tm.shared) {
            nW++;
            cr_assert(has_pred(g, U, i), "U after every δW of the shared layer");
        }
        if (k->kind == SP_OOO_DO && k->node->input->nconsumers == 3) cr_assert_gt(k->scratch, 0);
    }
    cr_assert_eq(nW, 3);
    cr_assert_eq(g->tasks[U].npred, 6, "three δW and three δO (each reads the shared W)");
    sp_tape_free(&t);
    sp_tensor_free(&b.x);
    sp_model_free(tm.m);
}

/* ---- every order respects the graph, planned and as run ----------------------------- */

static void check_run_respects_graph(const sp_ooo_run *r, const char *what)
{
    const sp_ooo_graph *g = r->graph;
    for (int i = 0; i < g->nexec; i++) {
        cr_assert_leq(r->start[i], r->end[i], "%s", what);
        for (int q = 0; q < g->tasks[i].npred; q++) {
            int p = g->tasks[i].pred[q];
            char a[64], b[64];
            cr_assert_leq(r->end[p], r->start[i], "%s: %s started before %s ended", what,
                          sp_ooo_task_label(&g->tasks[i], a, sizeof a), sp_ooo_task_label(&g->tasks[p], b, sizeof b));
        }
    }
    /* each plan queue starts its δO/δW tasks in its order on any one lane; only an
     * update U_i that waits may be passed (ooo_exec.c, first_ready). (Two lanes may
     * claim neighbours of one queue at nearly the same moment; their start times, taken
     * after the claim, can then come out in either order, so only same-lane pairs are
     * compared.) */
    for (int l = 0; l < 2; l++) {
        int prev = -1;
        for (int i = 0; i < r->plan->nqueue[l]; i++) {
            int q = r->plan->queue[l][i];
            if (g->tasks[q].kind == SP_OOO_U) continue;
            if (prev >= 0 && r->ran_on[prev] == r->ran_on[q])
                cr_assert_leq(r->start[prev], r->start[q], "%s queue %d", what, l);
            prev = q;
        }
    }
    /* a lane runs one task at a time */
    for (int i = 0; i < g->nexec; i++)
        for (int j = 0; j < g->nexec; j++)
            if (i != j && r->ran_on[i] == r->ran_on[j] && r->start[i] <= r->start[j])
                cr_assert(r->end[i] <= r->start[j] || (i < j && r->start[i] == r->start[j] && r->end[i] == r->start[j]),
                          "%s: two tasks overlap on lane %d", what, r->ran_on[i]);
}

Test(orders, every_order_respects_the_dependency_graph)
{
    const char *models[] = {"branchy", "mlp", "lenet", "rnn"};
    for (int mi = 0; mi < 4; mi++) {
        tmodel tm = tm_make(models[mi], 3);
        batch b = make_batch(&tm, 3);
        sp_tape t;
        sp_tape_init(&t);
        sp_node *loss = tm_loss(&tm, &t, &b.x, b.y);
        for (int u = 0; u < 2; u++) {
            sp_ooo_graph *g = sp_ooo_graph_build(&t, loss, u);
            for (int o = 0; o < NORDERS; o++)
                for (int lanes = 1; lanes <= 2; lanes++)
                    for (int k = 0; k <= g->L; k++) {
                        sp_ooo_plan *p = sp_ooo_plan_make(&t, g, (sp_ooo_order)o, k, 0, lanes == 2);
                        char why[160];
                        cr_assert(sp_ooo_plan_check(g, p, why, sizeof why), "%s %s lanes %d k %d: %s", models[mi],
                                  ORDERS[o], lanes, k, why);
                        cr_assert_eq(p->nqueue[SP_OOO_SUB] > 0, lanes == 2 && o != SP_OOO_CONVENTIONAL);
                    }
        }
        sp_tape_free(&t);
        sp_tensor_free(&b.x);
        sp_model_free(tm.m);
    }
}

Test(orders, shapes_of_the_orders)
{
    tmodel tm = tm_make("lenet", 2);   /* 5 parameterised layers */
    batch b = make_batch(&tm, 4);
    sp_tape t;
    sp_tape_init(&t);
    sp_node *loss = tm_loss(&tm, &t, &b.x, b.y);
    sp_ooo_graph *g = sp_ooo_graph_build(&t, loss, false);
    cr_assert_eq(g->L, 5);
    sp_ooo_plan *ooo = sp_ooo_plan_make(&t, g, SP_OOO_OOO, 0, 0, true);
    int ndo = 0;
    while (g->tasks[ooo->seq[ndo]].kind == SP_OOO_DO) ndo++;
    for (int i = ndo; i < g->nexec; i++) cr_assert_eq(g->tasks[ooo->seq[i]].kind, SP_OOO_DW, "ooo: all δO first");
    sp_ooo_plan *rfk = sp_ooo_plan_make(&t, g, SP_OOO_REVERSE_FIRST_K, 2, 0, true);
    cr_assert_eq(rfk->k, 2);
    int tail0 = g->nexec - 2;   /* Algorithm 2 line 6: δW_1, δW_2 last, in forward order */
    cr_assert_eq(g->tasks[rfk->seq[tail0]].rank, 1);
    cr_assert_eq(g->tasks[rfk->seq[tail0 + 1]].rank, 2);
    for (int i = 0; i < tail0; i++) {
        const sp_ooo_task *k = &g->tasks[rfk->seq[i]];
        if (k->kind == SP_OOO_DW) cr_assert_gt(k->rank, 2);
    }
    sp_ooo_plan *dflt = sp_ooo_plan_make(&t, g, SP_OOO_REVERSE_FIRST_K, 0, 0, true);
    cr_assert_eq(dflt->k, 3, "k = 0 means ⌈L/2⌉");
    sp_ooo_plan *conv = sp_ooo_plan_make(&t, g, SP_OOO_CONVENTIONAL, 0, 0, true);
    cr_assert_eq(conv->nqueue[SP_OOO_SUB], 0, "conventional: one lane");
    sp_tape_free(&t);
    sp_tensor_free(&b.x);
    sp_model_free(tm.m);
}

Test(exec, two_lanes_overlap_and_respect_dependencies)
{
    sp_set_threads(2);
    double sub_busy = 0;   /* the lanes share the work: tiny models may run on main alone */
    const char *models[] = {"lenet", "branchy", "gru"};
    /* Which lane takes a ready task is a race (the executor is work-conserving): on a
     * loaded machine the main lane can drain a whole pass before the sub lane's thread is
     * scheduled. So the sub lane must run at least once in up to five rounds. */
    for (int round = 0; round < 5 && sub_busy == 0; round++) {
        for (int mi = 0; mi < 3; mi++)
            for (int o = 0; o < NORDERS; o++) {
                sp_engine *e;
                trained r = train(models[mi], 4, ORDERS[o], 2, &e);
                char what[64];
                snprintf(what, sizeof what, "%s %s", models[mi], ORDERS[o]);
                const sp_ooo_stats *st = sp_ooo_last_stats(e);
                cr_assert_gt(st->ntasks, 0);
                if (o != SP_OOO_CONVENTIONAL) sub_busy += st->busy_s[SP_OOO_SUB];
                else cr_assert_eq(st->busy_s[SP_OOO_SUB], 0.0, "%s: one lane", what);
                cr_assert_leq(st->critical_s, st->wall_s + 1e-9);
                sp_engine_destroy(e);
                sp_model_free(r.tm.m);
            }
    }
    cr_assert_gt(sub_busy, 0.0, "the sub lane ran");
}

/* A waiting update may be passed (ooo_exec.c, first_ready): the top layer's δW is made
 * slow, so U_top waits for it at the head of the sub queue while δW of the layer below
 * is ready behind it. That δW must start on the idle lane before the slow one ends; with
 * a strict queue head it could only start after U_top, i.e. after the slow δW. */
static sp_opdef g_slow_linear;
static void slow_backward_params(sp_node *n, const sp_tensor *dy)
{
    sp_op_linear.cpu.backward_params(n, dy);
    double t0 = sp_now();
    while (sp_now() - t0 < 0.2) sp_cpu_relax();   /* 200 ms: far above any hand-off, even under load */
}

Test(exec, a_waiting_update_is_passed)
{
    sp_set_threads(2);
    sp_ooo_exec_set_min_two_lane_flops(0);   /* two lanes, no tuner */
    g_slow_linear = sp_op_linear;
    g_slow_linear.cpu.backward_params = slow_backward_params;
    sp_model *m = sp_model_new("slowtop");
    sp_model_set_loss(m, sp_softmax_ce());
    sp_layer *low = sp_linear("low", 8, 8);
    sp_model_add(m, low);
    sp_model_add(m, sp_tanh());
    sp_layer *top = sp_linear("top", 8, 5);
    sp_model_add(m, top);
    top->op = &g_slow_linear;
    sp_model_init(m, 3);
    tmodel tm = {.name = "slowtop", .m = m, .ndim = 2, .shape = {4, 8}};
    batch b = make_batch(&tm, 1);
    sp_optim *o = make_sgd(m);
    sp_engine *e = sp_engine_create("ooo", &(sp_engine_opts){.own = &(sp_ooo_opts){.order = "ooo"}, .update = update_layer, .update_ctx = o});
    sp_tape t;
    sp_tape_init(&t);
    sp_model_zero_grad(m);
    sp_backward(e, &t, sp_model_loss(m, &t, &b.x, b.y));
    const sp_ooo_run *r = sp_ooo_last_run(e);
    const sp_ooo_graph *g = r->graph;
    int dw_top = -1, dw_low = -1;
    for (int i = 0; i < g->nexec; i++) {
        if (g->tasks[i].kind != SP_OOO_DW) continue;
        if (g->tasks[i].node->layer == top) dw_top = i;
        if (g->tasks[i].node->layer == low) dw_low = i;
    }
    cr_assert(dw_top >= 0 && dw_low >= 0);
    cr_assert_lt(r->start[dw_low], r->end[dw_top], "δW low started at %.1f ms, after the slow δW top ended (%.1f ms)",
                 1e3 * r->start[dw_low], 1e3 * r->end[dw_top]);
    cr_assert_neq(r->ran_on[dw_low], r->ran_on[dw_top]);
    sp_tape_free(&t);
    sp_engine_destroy(e);
    sp_optim_free(o);
    sp_tensor_free(&b.x);
    sp_model_free(m);
    sp_ooo_exec_set_min_two_lane_flops(5e7);
}

Test(exec, small_backward_alone)
{
    sp_ooo_exec_set_min_two_lane_flops(5e7);   /* the default */
    bitwise_lanes_threads("lenet", 4, 2, 2, 2, 0, 1);   /* auto: one lane below the size rule */
    sp_set_threads(2);
    sp_engine *e;
    trained r = train("lenet", 4, "ooo", 2, &e);
    const sp_ooo_stats *st = sp_ooo_last_stats(e);
    cr_assert_eq(st->busy_s[SP_OOO_SUB], 0.0, "LeNet-5 at batch 4 stays on the main lane");
    cr_assert_gt(st->busy_s[SP_OOO_MAIN], 0.0);
    sp_engine_destroy(e);
    sp_model_free(r.tm.m);
}

/* The lane tuner (ooo_exec.c) probes two lanes, one, two, … on its first steps: every
 * mode gives the linear engine's bits, and a one-lane step leaves the sub lane idle. */
Test(exec, lane_tuning_probes_both_modes_bitwise)
{
    sp_ooo_exec_set_min_two_lane_flops(1);   /* above the size rule, tuning on */
    sp_set_threads(2);
    for (int steps = 1; steps <= 4; steps++) {
        trained ref = train("lenet", 8, NULL, steps, NULL);
        sp_engine *e;
        trained got = train("lenet", 8, "ooo", steps, &e);
        char what[64];
        snprintf(what, sizeof what, "tuned lanes, %d steps", steps);
        assert_same_model(&ref, &got, steps, what);
        const sp_ooo_stats *st = sp_ooo_last_stats(e);
        /* lanes: the last backward's mode until the probe window (eight steps) decides,
         * then the tuner's pick */
        if (steps <= 2) cr_assert_eq(st->lanes, steps == 1 ? 2 : 1, "%s: lanes %d", what, st->lanes);
        else cr_assert(st->lanes == 1 || st->lanes == 2, "%s: lanes %d", what, st->lanes);
        if (steps % 2 == 0) {   /* the one-lane probe: the main lane ran every task */
            cr_assert_eq(st->busy_s[SP_OOO_SUB], 0.0, "%s: the probe of one lane used two", what);
            cr_assert_gt(st->busy_s[SP_OOO_MAIN], 0.0, "%s", what);
        } else {   /* two lanes: which one takes a task is a race (a descheduled main lane may run none) */
            cr_assert_gt(st->busy_s[SP_OOO_MAIN] + st->busy_s[SP_OOO_SUB], 0.0, "%s", what);
        }
        sp_engine_destroy(e);
        sp_model_free(got.tm.m);
        sp_model_free(ref.tm.m);
    }
    sp_ooo_exec_set_min_two_lane_flops(0);
}

/* The tuner on made-up step times: two lanes take `two` times one lane's step, each
 * step scaled by a load that jumps between two levels (1 and 1.4, as another tenant's
 * comes and goes) and by ±3% of jitter. */
typedef struct tune_case {
    double two;
    long slow_from, slow_to;   /* steps under the higher load */
    long outlier;              /* a step 10× long (an evaluation between steps), or -1 */
} tune_case;

static double tune_dur(long k, int mode, void *ctx)
{
    const tune_case *c = ctx;
    double jitter = 1.0 + 0.03 * (double)((k * 7919) % 13 - 6) / 6.0;
    double load = k >= c->slow_from && k < c->slow_to ? 1.4 : 1.0;
    return 0.05 * (mode ? c->two : 1.0) * jitter * load * (k == c->outlier ? 10.0 : 1.0);
}

/* The lane tuner picks by the median of paired ratios (ooo_exec.c): the faster mode,
 * and keeps it through a change of load (the lowest time of each mode, or an average of
 * one against an old figure of the other, flipped there); two lanes need a margin. */
Test(exec, lane_tuner_picks_the_faster_mode_through_load_changes)
{
    int modes[130];
    struct {
        tune_case c;
        int pick;
    } cases[] = {
        {{1.04, 9, 40, -1}, 0},   /* two lanes 4% slower, the load rising after the window */
        {{1.04, 3, 6, -1}, 0},    /* … and changing inside it */
        {{0.94, 9, 40, -1}, 1},   /* two lanes 6% faster */
        {{0.92, 0, 5, 2}, 1},     /* 8% faster, an outlier and a load change inside the window */
        {{0.995, 9, 40, -1}, 0},  /* within the margin: one lane */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int pick = sp_ooo_lane_tuner_replay(tune_dur, &cases[i].c, 130, modes);
        cr_assert_eq(pick, cases[i].pick, "case %zu: pick %d, expected %d", i, pick, cases[i].pick);
        for (int k = 0; k < 8; k++) cr_assert_eq(modes[k], k % 2 == 0, "case %zu: probe step %d", i, k);
        for (int k = 8; k < 64; k++)
            cr_assert_eq(modes[k], cases[i].pick, "case %zu: step %d runs mode %d, not the pick", i, k, modes[k]);
        cr_assert(modes[64] == 1 && modes[65] == 0, "case %zu: a new probe window at step 64", i);
        for (int k = 72; k < 128; k++) cr_assert_eq(modes[k], cases[i].pick, "case %zu: step %d after the second window", i, k);
    }
}

/* On one lane a δO whose node's δW is ready runs with it as one call (the linear
 * engine's one pass: LeNet-5's conv2 — conv1's input needs no δ); on two lanes never:
 * the plan puts the δW on the other lane. Bitwise either way (the forced-lanes tests of the bitwise suite). */
Test(exec, one_lane_runs_a_delta_with_its_weight_gradient)
{
    sp_set_threads(2);
    for (int lanes = 1; lanes <= 2; lanes++) {
        sp_engine *e;
        trained ref = train("lenet", 4, NULL, 2, NULL);
        trained got = train_lanes("lenet", 4, "ooo", lanes, 2, &e);
        assert_same_model(&ref, &got, 2, lanes == 1 ? "one lane, fused" : "two lanes");
        const sp_ooo_stats *st = sp_ooo_last_stats(e);
        if (lanes == 1) cr_assert_eq(st->fused, 1, "one lane: δ and G of conv2 in one call, %d pairs", st->fused);
        else cr_assert_eq(st->fused, 0, "two lanes: %d pairs fused", st->fused);
        sp_engine_destroy(e);
        sp_model_free(got.tm.m);
        sp_model_free(ref.tm.m);
    }
}

/* A task's op scratch goes back to its lane when it returns (ooo_exec.c run_task), so
 * at the end of a backward the lanes hold only what an op kept for a later call
 * (conv2d's blocked dy, where oneDNN runs a δ and its G apart): LeNet-5 and VGG-11 at
 * batch 2 keep none. Without the hand-back every task's scratch would still be held. */
Test(exec, lanes_hand_each_tasks_scratch_back)
{
    sp_set_threads(2);
    for (int lanes = 1; lanes <= 2; lanes++) {
        const char *models[] = {"lenet", "vgg11"};
        for (int m = 0; m < 2; m++) {
            sp_engine *e;
            trained got = train_lanes(models[m], 2, "ooo", lanes, 2, &e);
            const sp_ooo_stats *st = sp_ooo_last_stats(e);
            cr_assert_eq(st->scratch_live_bytes, 0, "%s, %d lane(s): %zu bytes of op scratch held after the backward",
                         models[m], lanes, st->scratch_live_bytes);
            sp_engine_destroy(e);
            sp_model_free(got.tm.m);
        }
    }
}

/* --lanes 2 puts tasks on the sub lane, --lanes 1 none. Which lane takes a ready task is
 * a race, except here: the backward returns once the main lane's δO chain is done, and
 * the caller then blocks on U of the first layer (sp_ooo_wait_layer), so only the sub
 * lane can run it. LeNet-5 at batch 4 is below the size rule: auto would run one lane. */
Test(exec, forced_lanes_put_tasks_on_the_sub_lane_or_none)
{
    sp_set_threads(2);
    sp_ooo_exec_set_min_two_lane_flops(5e7);   /* the default: auto keeps this backward on one lane */
    for (int lanes = 0; lanes <= 2; lanes++) {
        tmodel tm = tm_make("lenet", 4);
        sp_optim *o = make_sgd(tm.m);
        sp_engine *e = sp_engine_create("ooo", &(sp_engine_opts){.own = &(sp_ooo_opts){.order = "ooo", .lanes = lanes},
                                                                  .update = update_layer, .update_ctx = o});
        sp_tape t;
        sp_tape_init(&t);
        for (int s = 0; s < 2; s++) {
            batch b = make_batch(&tm, 40 + (uint64_t)s);
            sp_tape_reset(&t);
            sp_model_zero_grad(tm.m);
            sp_ooo_backward_async(e, &t, sp_model_loss(tm.m, &t, &b.x, b.y));
            sp_ooo_wait_layer(e, sp_ooo_last_run(e)->graph->layers[0]);   /* conv1: its U is the last task */
            sp_ooo_sync(e);
            const sp_ooo_run *r = sp_ooo_last_run(e);
            const sp_ooo_graph *g = r->graph;
            int u1 = g->u_task[0], on_sub = 0;
            for (int i = 0; i < g->nexec; i++) on_sub += r->ran_on[i] == SP_OOO_SUB;
            const sp_ooo_stats *st = sp_ooo_last_stats(e);
            if (lanes == 2) {
                cr_assert_eq(g->tasks[u1].kind, SP_OOO_U);
                cr_assert_eq(r->ran_on[u1], SP_OOO_SUB, "lanes 2, step %d: U conv1 ran on the main lane", s);
                cr_assert_gt(st->busy_s[SP_OOO_SUB], 0.0);
                cr_assert_eq(st->lanes, 2);
            } else {
                cr_assert_eq(on_sub, 0, "lanes %d, step %d: %d tasks on the sub lane", lanes, s, on_sub);
                cr_assert_eq(st->busy_s[SP_OOO_SUB], 0.0);
                cr_assert_eq(st->lanes, 1, "lanes %d: %d reported", lanes, st->lanes);
            }
            sp_tensor_free(&b.x);
        }
        sp_tape_free(&t);
        sp_engine_destroy(e);
        sp_optim_free(o);
        sp_model_free(tm.m);
    }
    sp_ooo_exec_set_min_two_lane_flops(0);
}

/* An sp_fail on the sub lane — here in the update of conv1, which only the sub lane can
 * run (above) — comes back to the caller of the public call as its status: no exit (it
 * ended the process), no hang; the engine then runs the next step as usual. */
static void update_or_fail(void *ctx, sp_layer *l)
{
    if (*(bool *)ctx && strcmp(l->name, "conv1") == 0) sp_fail("update of %s refused", l->name);
}

Test(exec, a_failure_on_the_sub_lane_is_the_callers_status, .timeout = 60)
{
    sp_set_threads(2);
    sp_ooo_exec_set_min_two_lane_flops(5e7);
    tmodel tm = tm_make("lenet", 4);
    bool fail = true;
    sp_engine *e = sp_engine_create("ooo", &(sp_engine_opts){.own = &(sp_ooo_opts){.order = "ooo", .lanes = 2},
                                                              .update = update_or_fail, .update_ctx = &fail});
    cr_assert_not_null(e, "%s", sp_last_error());
    sp_tape t;
    sp_tape_init(&t);
    for (int s = 0; s < 3; s++) {
        fail = s < 2;
        batch b = make_batch(&tm, 40 + (uint64_t)s);
        sp_tape_reset(&t);
        sp_model_zero_grad(tm.m);
        cr_assert_eq(sp_backward_async(e, &t, sp_model_loss(tm.m, &t, &b.x, b.y)), SP_OK, "%s", sp_last_error());
        sp_clear_error();
        int waited = sp_engine_wait_layer(e, sp_ooo_last_run(e)->graph->layers[0]);
        if (fail) tu_refused(waited == SP_ERR, "update of conv1 refused");
        else cr_assert_eq(waited, SP_OK, "step %d: %s", s, sp_last_error());
        cr_assert_eq(sp_engine_sync(e), SP_OK, "step %d: %s", s, sp_last_error());
        sp_tensor_free(&b.x);
    }
    sp_tape_free(&t);
    sp_engine_destroy(e);
    sp_model_free(tm.m);
    sp_ooo_exec_set_min_two_lane_flops(0);
}

/* LeNet-5 on the ooo engine with per-layer SGD updates, and a tape of its own. */
typedef struct lane_rig {
    tmodel tm;
    sp_optim *opt;
    sp_engine *e;
    sp_tape t;
} lane_rig;

static lane_rig rig_make(const char *order)
{
    lane_rig r = {.tm = tm_make("lenet", 4)};
    r.opt = make_sgd(r.tm.m);
    r.e = sp_engine_create("ooo", &(sp_engine_opts){.own = &(sp_ooo_opts){.order = order}, .update = update_layer, .update_ctx = r.opt});
    sp_tape_init(&r.t);
    return r;
}

static void rig_free(lane_rig *r)
{
    sp_tape_free(&r->t);
    sp_engine_destroy(r->e);
    sp_optim_free(r->opt);
    sp_model_free(r->tm.m);
}

/* The run records survive until the tape is reset: check them inside one step. */
Test(exec, timeline_respects_every_edge)
{
    sp_set_threads(2);
    for (int o = 0; o < NORDERS; o++) {
        lane_rig r = rig_make(ORDERS[o]);
        for (int s = 0; s < 3; s++) {
            batch b = make_batch(&r.tm, (uint64_t)s);
            sp_tape_reset(&r.t);
            sp_node *loss = tm_loss(&r.tm, &r.t, &b.x, b.y);
            sp_backward(r.e, &r.t, loss);
            check_run_respects_graph(sp_ooo_last_run(r.e), ORDERS[o]);
            sp_tensor_free(&b.x);
        }
        rig_free(&r);
    }
}

/* Graph, plan and run state come from the tape's arena: after the first steps have
 * sized it, a step allocates nothing (the arena would add a block). */
Test(exec, steady_state_steps_do_not_grow_the_arena)
{
    sp_set_threads(2);
    for (int o = 0; o < NORDERS; o++) {
        lane_rig r = rig_make(ORDERS[o]);
        batch b = make_batch(&r.tm, 9);
        size_t warm = 0;
        for (int s = 0; s < 6; s++) {
            if (s == 3) warm = r.t.arena.nmallocs;
            sp_tape_reset(&r.t);
            sp_backward(r.e, &r.t, tm_loss(&r.tm, &r.t, &b.x, b.y));
        }
        cr_assert_eq(r.t.arena.nmallocs, warm, "%s: the arena grew in steady state", ORDERS[o]);
        sp_tensor_free(&b.x);
        rig_free(&r);
    }
}

/* ---- memory -------------------------------------------------------------------------- */

Test(memory, deferring_weight_gradients_costs_memory)
{
    tmodel tm = tm_make("vgg11", 2);
    batch b = make_batch(&tm, 5);
    sp_tape t;
    sp_tape_init(&t);
    sp_node *loss = tm_loss(&tm, &t, &b.x, b.y);
    sp_ooo_graph *g = sp_ooo_graph_build(&t, loss, false);
    size_t conv = sp_ooo_plan_make(&t, g, SP_OOO_CONVENTIONAL, 0, 0, true)->peak_bytes;
    size_t ooo = sp_ooo_plan_make(&t, g, SP_OOO_OOO, 0, 0, true)->peak_bytes;
    cr_assert_geq(conv, g->start_bytes);
    cr_assert_gt(ooo, conv, "§3: deferred δW retain their inputs and ∂l/∂y (%zu vs %zu)", ooo, conv);
    size_t prev = 0;
    for (int k = 1; k <= g->L; k++) {   /* deferring more layers never needs less */
        size_t pk = sp_ooo_plan_make(&t, g, SP_OOO_REVERSE_FIRST_K, k, 0, true)->peak_bytes;
        cr_assert_geq(pk, prev, "k %d", k);
        prev = pk;
    }
    sp_tape_free(&t);
    sp_tensor_free(&b.x);
    sp_model_free(tm.m);
}

/* Algorithm 2 lines 1–2: the cap lowers k; and the two lanes, racing, stay under it. */
Test(memory, reverse_first_k_honours_its_cap)
{
    sp_set_threads(2);
    tmodel tm = tm_make("vgg11", 2);
    batch b = make_batch(&tm, 6);
    sp_tape t;
    sp_tape_init(&t);
    sp_node *loss = tm_loss(&tm, &t, &b.x, b.y);
    sp_ooo_graph *g = sp_ooo_graph_build(&t, loss, false);
    int L = g->L;
    size_t full = sp_ooo_plan_make(&t, g, SP_OOO_REVERSE_FIRST_K, L, 0, true)->peak_bytes;
    size_t conv = sp_ooo_plan_make(&t, g, SP_OOO_REVERSE_FIRST_K, 1, 0, true)->peak_bytes;
    cr_assert_gt(full, conv);
    size_t cap = conv + (full - conv) / 2;
    sp_ooo_plan *p = sp_ooo_plan_make(&t, g, SP_OOO_REVERSE_FIRST_K, L, cap, true);
    cr_assert_lt(p->k, L, "the cap lowered k");
    cr_assert_geq(p->k, 1);
    cr_assert_leq(p->peak_bytes, cap);
    size_t above = sp_ooo_plan_make(&t, g, SP_OOO_REVERSE_FIRST_K, p->k + 1, 0, true)->peak_bytes;
    cr_assert_gt(above, cap, "k is the largest that fits");
    int k = p->k;
    sp_tape_free(&t);

    /* the live peak as the two lanes interleave, over a few steps */
    sp_engine *e = sp_engine_create("ooo", &(sp_engine_opts){.own = &(sp_ooo_opts){.order = "reverse-first-k", .k = L, .mem_cap = (long)cap}});
    sp_engine *free_run = sp_engine_create("ooo", &(sp_engine_opts){.own = &(sp_ooo_opts){.order = "reverse-first-k", .k = L}});
    sp_tape_init(&t);
    for (int s = 0; s < 3; s++) {
        sp_tape_reset(&t);
        sp_model_zero_grad(tm.m);
        sp_backward(e, &t, tm_loss(&tm, &t, &b.x, b.y));
        const sp_ooo_stats *st = sp_ooo_last_stats(e);
        cr_assert_leq(st->peak_bytes, cap, "step %d: live peak %zu over the cap %zu", s, st->peak_bytes, cap);
        cr_assert_eq(st->k, k);
        sp_tape_reset(&t);
        sp_backward(free_run, &t, tm_loss(&tm, &t, &b.x, b.y));
        cr_assert_gt(sp_ooo_last_stats(free_run)->peak_bytes, cap, "without the cap the run goes above it");
    }
    sp_tape_free(&t);
    sp_engine_destroy(e);
    sp_engine_destroy(free_run);
    sp_tensor_free(&b.x);
    sp_model_free(tm.m);
}

/* A cap the order cannot keep: sp_backward's status, naming the cap (it exited 2). */
static void run_with_cap(const char *order, size_t cap)
{
    tmodel tm = tm_make("mlp", 2);
    batch b = make_batch(&tm, 1);
    sp_engine *e = sp_engine_create("ooo", &(sp_engine_opts){.own = &(sp_ooo_opts){.order = order, .mem_cap = (long)cap}});
    sp_tape t;
    sp_tape_init(&t);
    tu_refused(sp_backward(e, &t, tm_loss(&tm, &t, &b.x, b.y)) == SP_ERR, "--mem-cap 1000");
    sp_tape_free(&t);
    sp_engine_destroy(e);
    sp_tensor_free(&b.x);
    sp_model_free(tm.m);
}

Test(memory, cap_below_conventional_is_refused) { run_with_cap("reverse-first-k", 1000); }
Test(memory, cap_too_small_for_ooo_is_refused) { run_with_cap("ooo", 1000); }

/* ---- errors, trace, async ------------------------------------------------------------------ */

/* sp_engine_create is a status: options the engine refuses are NULL naming them. */
Test(errors, refused_engine_options_are_a_status)
{
    struct { sp_ooo_opts o; const char *says; } cases[] = {
        {{.order = "fastest"}, "fastest"},
        {{.k = -1}, "-1"},
        {{.order = "conventional", .lanes = 2}, "conventional"},
        {{.lanes = 3}, "3"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sp_clear_error();
        cr_assert_null(sp_engine_create("ooo", &(sp_engine_opts){.own = &cases[i].o}), "case %zu was accepted", i);
        cr_assert(strstr(sp_last_error(), cases[i].says), "case %zu: '%s'", i, sp_last_error());
    }
}
Test(errors, two_lanes_on_one_thread_is_refused)
{
    sp_set_threads(1);
    tmodel tm = tm_make("mlp", 4);
    batch b = make_batch(&tm, 1);
    sp_engine *e = sp_engine_create("ooo", &(sp_engine_opts){.own = &(sp_ooo_opts){.order = "ooo", .lanes = 2}});
    sp_tape t;
    sp_tape_init(&t);
    tu_refused(sp_backward(e, &t, tm_loss(&tm, &t, &b.x, b.y)) == SP_ERR, "lanes = 2 with 1 thread");
    sp_tape_free(&t);
    sp_engine_destroy(e);
    sp_tensor_free(&b.x);
    sp_model_free(tm.m);
}
Test(errors, stats_of_another_engine_exit_2, .exit_code = 2, .init = tu_capture_stderr) { sp_ooo_last_stats(sp_engine_create("linear", NULL)); }

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "%s not written", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    cr_assert_eq(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = 0;
    fclose(f);
    return s;
}

static int count(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = strstr(s, what); p; p = strstr(p + 1, what)) n++;
    return n;
}

Test(trace, chrome_trace_has_every_task_on_its_lane)
{
    sp_set_threads(2);
    char path[512];
    snprintf(path, sizeof path, "%s/ooo.json", tu_tmpdir());
    sp_engine *e;
    trained r = train("lenet", 4, "list", 2, &e);
    const sp_ooo_stats *st = sp_ooo_last_stats(e);
    int ntasks = st->ntasks, L = 0;
    for (int i = 0; i < r.tm.m->nlayers; i++) L += r.tm.m->layers[i]->nparams > 0;
    sp_ooo_write_trace(e, path);
    char *json = slurp(path);
    cr_assert(strstr(json, "\"traceEvents\"") != NULL);
    cr_assert_eq(count(json, "\"ph\": \"X\""), ntasks, "one complete event per task");
    cr_assert_eq(count(json, "\"ph\": \"i\""), L, "one F' marker per layer");
    /* the lanes share the tasks as they become ready: a small step may run on one alone */
    if (st->busy_s[SP_OOO_MAIN] > 0 && st->busy_s[SP_OOO_SUB] > 0) {
        cr_assert_gt(count(json, "\"ph\": \"s\""), 0, "cross-lane arrows");
        cr_assert(strstr(json, "\"tid\": 1, \"name\": \"") != NULL, "tasks on the sub lane");
    } else {
        cr_assert_eq(count(json, "\"ph\": \"s\""), 0, "no cross-lane arrows when one lane ran every task");
    }
    cr_assert_eq(count(json, "\"ph\": \"s\""), count(json, "\"ph\": \"f\""));
    cr_assert_eq(json[strlen(json) - 2], '}');
    free(json);
    sp_engine_destroy(e);
    sp_model_free(r.tm.m);
}

/* F'_i after U_i for real: the next step's forward runs on a second tape while the sub
 * lane still computes δW and updates; each layer waits for its own update. */
Test(async, next_forward_overlaps_the_updates_bitwise)
{
    sp_set_threads(2);
    const int steps = 4;
    trained ref = train("lenet", 4, NULL, steps, NULL);
    tmodel tm = tm_make("lenet", 4);
    sp_optim *o = make_sgd(tm.m);
    sp_engine *e = sp_engine_create("ooo", &(sp_engine_opts){.own = &(sp_ooo_opts){.order = "reverse-first-k", .k = 5},
                                                              .update = update_layer, .update_ctx = o});
    sp_tape tapes[2];
    batch bs[2];
    sp_tape_init(&tapes[0]);
    sp_tape_init(&tapes[1]);
    float loss[4];
    for (int s = 0; s < steps; s++) {
        sp_tape *t = &tapes[s % 2];
        bs[s % 2] = make_batch(&tm, 100 + (uint64_t)s);
        sp_tape_reset(t);
        sp_node *x = sp_tape_input(t, &bs[s % 2].x);
        for (int i = 0; i < tm.m->nlayers; i++) {
            sp_ooo_wait_layer(e, tm.m->layers[i]);   /* U_i of the previous step */
            x = sp_apply(t, tm.m->layers[i], x);
        }
        sp_ooo_sync(e);   /* grads are zeroed only once every update has read them */
        sp_model_zero_grad(tm.m);
        sp_node *l = sp_apply_loss(t, tm.m->loss, x, bs[s % 2].y);
        loss[s] = l->out.data[0];
        sp_ooo_backward_async(e, t, l);
        if (s > 0) sp_tensor_free(&bs[(s + 1) % 2].x);
    }
    sp_ooo_sync(e);
    sp_tensor_free(&bs[(steps - 1) % 2].x);
    trained got = {.tm = tm};
    memcpy(got.loss, loss, sizeof loss);
    assert_same_model(&ref, &got, steps, "async lenet");
    cr_assert_lt(sp_ooo_last_stats(e)->critical_s, sp_ooo_last_stats(e)->wall_s, "returned before the sub lane");
    sp_engine_destroy(e);
    sp_optim_free(o);
    sp_tape_free(&tapes[0]);
    sp_tape_free(&tapes[1]);
    sp_model_free(tm.m);
    sp_model_free(ref.tm.m);
}

/* The trace picture: a colour legend, each lane labelled with the kinds it ran (here G
 * ran on the main lane too), and an F′ label at the right edge that ends at its marker. */
Test(ooo_trace, svg_legend_lane_labels_and_edge_labels)
{
    sp_ooo_trace_rec rec[] = {
        {"δ fc2", SP_OOO_DO, SP_OOO_MAIN, 0, 0.0, 1e-3},
        {"G fc2", SP_OOO_DW, SP_OOO_MAIN, 0, 1e-3, 2e-3},
        {"G fc1", SP_OOO_DW, SP_OOO_SUB, 1, 1e-3, 3e-3},
        {"U fc1", SP_OOO_U, SP_OOO_SUB, 1, 3e-3, 4e-3},
        {"F' a-layer-name", SP_OOO_F, 2, 1, 4e-3, 4e-3},
    };
    sp_ooo_trace tr = {.rec = rec, .n = 5, .cap = 5};
    snprintf(tr.title, sizeof tr.title, "probe");
    char path[512];
    snprintf(path, sizeof path, "%s/trace.svg", tu_tmpdir());
    sp_ooo_trace_write(&tr, path);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    static char svg[1 << 16];
    size_t n = fread(svg, 1, sizeof svg - 1, f);
    svg[n] = 0;
    fclose(f);
    cr_assert_not_null(strstr(svg, ">main lane: δ, G<"), "main lane label should list δ and G");
    cr_assert_not_null(strstr(svg, ">sub lane: G, U<"));
    for (const char *k = "δ input gradient\0G weight gradient\0U update\0F′ next forward may start\0"; *k;
         k += strlen(k) + 1)
        cr_assert_not_null(strstr(svg, k), "legend lacks '%s'", k);
    const char *label = strstr(svg, ">a-layer-name<");
    cr_assert_not_null(label);
    const char *open = label;
    while (open > svg && *open != '<') open--;
    cr_assert(strstr(open, "text-anchor=\"end\"") && strstr(open, "text-anchor=\"end\"") < label,
              "the F′ label at the right edge must end at its marker");
}
