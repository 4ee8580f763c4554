/* test_bn_parallel — micro-batching and batch norm: the single-process gradient
 * accumulation (--microbatches M without --parallel, train/train_accum.c) and batch norm
 * under the parallel schemes (schedulers/exec/, run under mpirun).
 *
 * Accumulation. A chain without batch norm (the demo MLP) trained with M = 4 micro-batches
 * ends within 1e-6 of the plain step (the loss is a mean: the weighted sum of the
 * micro-batches' mean gradients is the batch's), also with micro-batches of unequal size;
 * a batch-norm chain with M = 1 is the plain step bitwise; with M = 2 its running
 * statistics are those of two forwards on the halves, in order.
 *
 * The executor's walk. A B job makes a layer's δ and G in one call where the op has one
 * (conv2d, batch norm): ResNet-20's gradients equal those of the two calls, bitwise. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include <unistd.h>
#include "core/threads.h"
#include "layers/layers.h"
#include "layers/zoo.h"
#include "optim/optim.h"
#include "schedulers/backward/engine.h"
#include "train/train.h"
#include "schedulers/exec/exec_internal.h"
#include "tests/testutil.h"

/* conv-bn-relu-conv-bn-relu-avgpool-flatten-linear on [B, 2, 8, 8], 5 classes. */
static sp_model *bn_chain(uint64_t seed)
{
    sp_model *m = sp_model_new("bnchain");
    sp_model_set_loss(m, sp_softmax_ce());
    sp_model_add(m, sp_conv2d("conv1", 2, 4, 3, 1, 1));
    sp_model_add(m, sp_batchnorm2d("bn1", 4));
    sp_model_add(m, sp_relu());
    sp_model_add(m, sp_conv2d("conv2", 4, 6, 3, 1, 1));
    sp_model_add(m, sp_batchnorm2d_relu("bn2", 6));
    sp_model_add(m, sp_avgpool2d(2, 2, 0));
    sp_model_add(m, sp_flatten());
    sp_model_add(m, sp_linear("fc", 6 * 4 * 4, 5));
    sp_model_init(m, seed);
    return m;
}

typedef struct batch {
    sp_tensor x;
    int y[64];
} batch;

static void make_batch(batch *b, int B, int ndim, const int *sample, uint64_t seed)
{
    int shape[SP_MAX_DIMS] = {B};
    for (int d = 0; d < ndim; d++) shape[d + 1] = sample[d];
    b->x = sp_tensor_new(ndim + 1, shape);
    tu_fill_uniform(b->x.data, b->x.numel, seed, -1, 1);
    for (int i = 0; i < B; i++) b->y[i] = (int)((seed + 7u * (unsigned)i) % 5);
}

/* Every value of m's state (parameters, then buffers) in one malloc'd array. */
static float *state_of(const sp_model *m, size_t *n)
{
    *n = 0;
    for (int i = 0; i < sp_model_nstate(m); i++) *n += sp_model_state(m, i)->value.numel;
    float *w = malloc(*n * sizeof *w), *q = w;
    for (int i = 0; i < sp_model_nstate(m); i++) {
        memcpy(q, sp_model_state(m, i)->value.data, sp_model_state(m, i)->value.numel * sizeof *q);
        q += sp_model_state(m, i)->value.numel;
    }
    return w;
}

/* `steps` steps of m on b (micro = 0: the plain step), SGD with momentum; returns the
 * state after them. */
static float *train(sp_model *m, const char *engine, const batch *b, int steps, int micro, size_t *n)
{
    sp_engine *e = sp_engine_create(engine, NULL);
    sp_optim *o = sp_sgd_new(m->params, m->nparams, 0.05, 0.9, 0, 1e-4, false);
    sp_tape t;
    sp_tape_init(&t);
    for (int s = 0; s < steps; s++) {
        float l = micro ? sp_train_step_accum(m, e, o, &t, &b->x, b->y, micro, NULL, NULL, NULL)
                        : sp_train_step(m, e, o, &t, &b->x, b->y, NULL, NULL, NULL);
        cr_assert(isfinite(l));
    }
    sp_tape_free(&t);
    sp_optim_free(o);
    sp_engine_destroy(e);
    return state_of(m, n);
}

static void chain_equal(const char *engine, int B, int micro)
{
    batch b;
    make_batch(&b, B, 1, (int[]){12}, 3);
    sp_model *m1 = sp_zoo_mlp(12, 16, 5), *m2 = sp_zoo_mlp(12, 16, 5);
    sp_model_init(m1, 11);
    sp_model_init(m2, 11);
    size_t n1, n2;
    float *w1 = train(m1, engine, &b, 3, 0, &n1), *w2 = train(m2, engine, &b, 3, micro, &n2);
    cr_assert_eq(n1, n2);
    double d = tu_max_rel_diff(w2, w1, n1);
    cr_assert_leq(d, 1e-6, "%s B=%d M=%d: weights differ from the plain step by %g", engine, B, micro, d);
    cr_assert_gt(d, 0.0, "%s B=%d M=%d: bitwise the plain step (the micro-batches did not run?)", engine, B, micro);
    free(w1);
    free(w2);
    sp_model_free(m1);
    sp_model_free(m2);
    sp_tensor_free(&b.x);
}

Test(bn_accum, chain_without_bn_equals_the_plain_step)
{
    sp_set_threads(1);
    chain_equal("linear", 32, 4);
    chain_equal("ooo", 32, 4);
    chain_equal("linear", 30, 4);   /* micro-batches of 8, 8, 7, 7 */
}

Test(bn_accum, bn_chain_with_one_micro_batch_is_the_plain_step_bitwise)
{
    sp_set_threads(1);
    batch b;
    make_batch(&b, 16, 3, (int[]){2, 8, 8}, 5);
    sp_model *m1 = bn_chain(21), *m2 = bn_chain(21);
    size_t n1, n2;
    float *w1 = train(m1, "linear", &b, 3, 0, &n1), *w2 = train(m2, "linear", &b, 3, 1, &n2);
    cr_assert_eq(n1, n2);
    cr_assert(memcmp(w1, w2, n1 * sizeof *w1) == 0, "M = 1 differs from the plain step");
    free(w1);
    free(w2);
    sp_model_free(m1);
    sp_model_free(m2);
    sp_tensor_free(&b.x);
}

/* M = 2: the running statistics are those of forwards on the two halves in order, and
 * the step's update is the mean of the halves' gradients. */
Test(bn_accum, bn_statistics_per_micro_batch_in_order)
{
    sp_set_threads(1);
    batch b;
    make_batch(&b, 16, 3, (int[]){2, 8, 8}, 9);
    sp_model *m1 = bn_chain(4), *m2 = bn_chain(4);
    size_t n1;
    float *w1 = train(m1, "linear", &b, 1, 2, &n1);
    /* the reference: each half's gradient on its own, averaged, one SGD step (lr 0.05, wd 1e-4) */
    sp_engine *e = sp_engine_create("linear", NULL);
    sp_tape t;
    sp_tape_init(&t);
    size_t np = 0;
    for (int i = 0; i < m2->nparams; i++) np += m2->params[i]->value.numel;
    float *g = calloc(np, sizeof *g);
    for (int h = 0; h < 2; h++) {
        for (int i = 0; i < m2->nparams; i++) sp_tensor_zero(&m2->params[i]->grad);
        sp_tape_reset(&t);
        sp_tensor xv = b.x;
        xv.shape[0] = 8;
        xv.numel = b.x.numel / 2;
        xv.data = b.x.data + h * xv.numel;
        sp_backward(e, &t, sp_model_loss(m2, &t, &xv, b.y + 8 * h));
        float *q = g;
        for (int i = 0; i < m2->nparams; i++)
            for (size_t j = 0; j < m2->params[i]->value.numel; j++) *q++ += 0.5f * m2->params[i]->grad.data[j];
    }
    float *q = g;
    for (int i = 0; i < m2->nparams; i++)
        for (size_t j = 0; j < m2->params[i]->value.numel; j++, q++) {
            float *p = &m2->params[i]->value.data[j];
            *p -= 0.05f * (*q + 1e-4f * *p);
        }
    size_t n2;
    float *w2 = state_of(m2, &n2);
    cr_assert_eq(n1, n2);
    size_t nb = n1 - np;   /* the buffers: bitwise (the same forwards) */
    cr_assert(memcmp(w1 + np, w2 + np, nb * sizeof *w1) == 0, "running statistics differ from two forwards");
    double d = tu_max_rel_diff(w1, w2, np);
    cr_assert_leq(d, 1e-6, "weights differ from the halves' mean gradient by %g", d);
    free(g);
    free(w1);
    free(w2);
    sp_tape_free(&t);
    sp_engine_destroy(e);
    sp_model_free(m1);
    sp_model_free(m2);
    sp_tensor_free(&b.x);
}

/* The synchronized batch norm's hook on one process: a reduce that sums over one rank
 * (the identity) gives the plain step's numbers (the statistics from Σx, Σx² instead of
 * two passes: within 1e-5), called once per forward (2C + 1 values) and once per δ (2C). */
typedef struct reduce_count {
    int calls, values;
} reduce_count;

static void count_reduce(void *ctx, double *v, int n)
{
    reduce_count *c = ctx;
    c->calls++;
    c->values += n;
}

/* Every parameter gradient of m after the executor's walk over ResNet-20's whole tape
 * (as a B job walks a segment), with δ and G of each layer fused or in two calls. */
static float *walk_grads(sp_model *m, const sp_tensor *x, bool fuse, size_t *n)
{
    sp_tape t;
    sp_tape_init(&t);
    sp_node *in = sp_tape_input(&t, x);
    sp_node **out = sp_tape_alloc(&t, sizeof *out * (size_t)m->nlayers);
    for (int l = 0; l < m->nlayers; l++) {   /* sp_exec_stage_forward's application */
        int k0 = m->from_start[l], nin = m->from_start[l + 1] - k0;
        sp_node **args = sp_tape_alloc(&t, sizeof *args * (size_t)nin);
        for (int k = 0; k < nin; k++) args[k] = m->from[k0 + k] == SP_MODEL_INPUT ? in : out[m->from[k0 + k]];
        out[l] = sp_apply_n(&t, m->layers[l], nin, args);
    }
    sp_node *y = out[m->nlayers - 1];
    sp_tensor dy = sp_tape_tensor_like(&t, &y->out);
    tu_fill_uniform(dy.data, dy.numel, 5, -1, 1);
    sp_model_zero_grad(m);
    sp_exec_stage_walk(&t, in->index + 1, y->index, &dy, NULL, true, fuse, NULL);
    *n = 0;
    for (int l = 0; l < m->nlayers; l++)
        for (int p = 0; p < m->layers[l]->nparams; p++) *n += m->layers[l]->params[p]->grad.numel;
    float *g = malloc(sizeof(float) * *n), *q = g;
    for (int l = 0; l < m->nlayers; l++)
        for (int p = 0; p < m->layers[l]->nparams; p++) {
            const sp_tensor *gr = &m->layers[l]->params[p]->grad;
            memcpy(q, gr->data, sizeof(float) * gr->numel);
            q += gr->numel;
        }
    sp_tape_free(&t);
    return g;
}

/* A B job's walk makes a one-input layer's δ and G in one call (backward_input_params:
 * conv2d, whose block input fans out to conv1 and the shortcut, so its δ is added, and
 * batch norm with and without ReLU): the gradients are the two calls', bitwise. */
Test(exec_walk, fused_delta_and_grad_equal_the_two_calls_bitwise)
{
    sp_set_threads(1);
    sp_model *m = sp_zoo_resnet20(1, 10);
    sp_model_init(m, 3);
    sp_tensor x = sp_tensor_new(4, (int[]){4, 1, 32, 32});
    tu_fill_uniform(x.data, x.numel, 4, -1, 1);
    size_t n0, n1;
    float *apart = walk_grads(m, &x, false, &n0), *fused = walk_grads(m, &x, true, &n1);
    cr_assert_eq(n0, n1);
    double worst = 0;
    for (size_t i = 0; i < n0; i++) worst = fmax(worst, fabs((double)apart[i] - fused[i]));
    cr_assert(!memcmp(apart, fused, sizeof(float) * n0), "fused δ + G differ from the two calls by up to %g", worst);
    free(apart);
    free(fused);
    sp_tensor_free(&x);
    sp_model_free(m);
}

Test(bn_accum, sync_reduce_on_one_process_is_the_plain_step)
{
    sp_set_threads(1);
    batch b;
    make_batch(&b, 16, 3, (int[]){2, 8, 8}, 13);
    sp_model *m1 = bn_chain(8), *m2 = bn_chain(8);
    reduce_count rc = {0};
    for (int i = 0; i < m2->nlayers; i++)
        if (sp_layer_is_batchnorm(m2->layers[i])) sp_batchnorm2d_set_reduce(m2->layers[i], count_reduce, &rc);
    size_t n1, n2;
    float *w1 = train(m1, "linear", &b, 2, 0, &n1), *w2 = train(m2, "linear", &b, 2, 0, &n2);
    cr_assert_eq(n1, n2);
    double d = tu_max_rel_diff(w2, w1, n1);
    cr_assert_leq(d, 1e-5, "the reduce's statistics differ from the plain step by %g", d);
    /* 2 steps x 2 layers: a forward (2C + 1) and a δ (2C), C = 4 and 6 (bn1 is the first
     * layer after conv1, so its δ runs too) */
    cr_assert_eq(rc.calls, 2 * 2 * 2, "%d reduces", rc.calls);
    cr_assert_eq(rc.values, 2 * ((9 + 8) + (13 + 12)), "%d values reduced", rc.values);
    free(w1);
    free(w2);
    sp_model_free(m1);
    sp_model_free(m2);
    sp_tensor_free(&b.x);
}

/* ---- batch norm under the executor (mpirun) ------------------------------------------------
 *
 * tests/bn_worker trains a chain with batch norm (7 layers) on Fashion-MNIST, 3 steps of
 * 32 samples. Each parallel run must end with the weights of its single-process reference
 * within 1e-4 relative:
 *   ddp (per-rank statistics)        the accumulation over W micro-batches (weights; the
 *                                    running statistics follow rank 0, as PyTorch's)
 *   pipelines (per micro-batch)      the accumulation over the same micro-batches, the
 *                                    running statistics too (every pipeline scheme)
 *   ddp/fsdp --sync-bn               the plain step on the whole batch, statistics too */

#include "core/io/safetensors.h"
#include "tests/mpirun.h"

#define BN_FLAGS "--steps 3 --batch 32 --threads 1 --quiet"

static const char *bn_bin(void)
{
    static char path[512];
    const char *b = getenv("BUILD");
    snprintf(path, sizeof path, "%s/tests/bn_worker", b ? b : "build");
    return path;
}

/* max |a − b| / max(1, max |b|) over the tensors (buffers too when `buffers`). */
static double compare_st(const char *pa, const char *pb, bool buffers)
{
    int nbuf = 0;
    double worst = tu_st_max_rel_diff(pa, pb, buffers, NULL, &nbuf);
    cr_assert_eq(nbuf, 6, "expected the 6 buffers of two batch-norm layers, found %d", nbuf);
    return worst;
}

static void bn_reference(const char *extra, const char *path)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s " BN_FLAGS " %s --save %s >/dev/null", bn_bin(), extra, path);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

static void bn_parallel(const char *np, const char *args, const char *path, const char *semantics)
{
    static mpi_result r;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s " BN_FLAGS " %s --save %s", bn_bin(), args, path);
    mpi_run("", np, cmd, &r);
    cr_assert_eq(r.status, 0, "%s %s: status %d\n%s", np, args, r.status, r.err);
    char want[64];
    snprintf(want, sizeof want, "\"batch_norm\": \"%s\"", semantics);
    cr_assert(strstr(r.out, want), "%s: no %s in\n%s", args, want, r.out);
}

static bool have_bn_data(void)
{
    return mpi_available() && access("/usr/share/datasets/fashion-mnist", R_OK) == 0;
}

Test(bn_exec, ddp_per_rank_equals_accumulation_over_w, .timeout = 300)
{
    if (!have_bn_data()) cr_skip_test("no MPI or no Fashion-MNIST");
    const char *ref = tu_tmp_path("acc2.st"), *par = tu_tmp_path("ddp.st");
    bn_reference("--microbatches 2", ref);
    const char *runs[] = {"--parallel ddp", "--parallel fsdp", "--parallel ddp-ooo"};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        bn_parallel("-np 2", runs[i], par, "per-rank");
        double d = compare_st(par, ref, false);
        cr_assert_leq(d, 1e-4, "%s vs --microbatches 2: weights differ by %g", runs[i], d);
    }
    bn_reference("--microbatches 4", ref);
    bn_parallel("-np 4", "--parallel ddp", par, "per-rank");
    double d = compare_st(par, ref, false);
    cr_assert_leq(d, 1e-4, "ddp on 4 ranks vs --microbatches 4: weights differ by %g", d);
}

Test(bn_exec, pipelines_per_micro_batch_equal_accumulation, .timeout = 300)
{
    if (!have_bn_data()) cr_skip_test("no MPI or no Fashion-MNIST");
    const char *ref = tu_tmp_path("acc4.st"), *par = tu_tmp_path("pipe.st");
    bn_reference("--microbatches 4", ref);
    /* every pipeline scheme: each checks at setup that a stage's forwards run in
     * micro-batch order on its rank */
    const char *schemes[] = {"gpipe", "1f1b", "lpp", "fslpp", "ooo-ff", "ooo-modulo", "1f1b-strict", "zb-h1",
                             "zb-h2", "interleaved-1f1b", "interleaved-zb", "looped-bfs", "1f1b-v", "zbv", "v-half",
                             "v-min", "dualpipev", "zb-auto"};
    char runs[sizeof schemes / sizeof schemes[0]][96];
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
        snprintf(runs[i], sizeof runs[i], "--parallel %s --microbatches 4", schemes[i]);
        bn_parallel("-np 2", runs[i], par, "per-micro-batch");
        double d = compare_st(par, ref, true);
        cr_assert_leq(d, 1e-4, "%s vs --microbatches 4: weights or running statistics differ by %g", runs[i], d);
    }
    bn_reference("--microbatches 8", ref);
    bn_parallel("-np 4", "--parallel 1f1b --microbatches 8", par, "per-micro-batch");
    double d = compare_st(par, ref, true);
    cr_assert_leq(d, 1e-4, "1f1b on 4 ranks vs --microbatches 8: weights or running statistics differ by %g", d);
}

Test(bn_exec, sync_bn_equals_the_whole_batch, .timeout = 300)
{
    if (!have_bn_data()) cr_skip_test("no MPI or no Fashion-MNIST");
    const char *ref = tu_tmp_path("whole.st"), *par = tu_tmp_path("sync.st");
    bn_reference("", ref);
    const char *runs[] = {"--parallel ddp --sync-bn", "--parallel fsdp --sync-bn"};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        bn_parallel("-np 2", runs[i], par, "synchronized");
        double d = compare_st(par, ref, true);
        cr_assert_leq(d, 1e-4, "%s vs the whole batch: weights or running statistics differ by %g", runs[i], d);
    }
    bn_parallel("-np 4", "--parallel ddp --sync-bn", par, "synchronized");
    double d = compare_st(par, ref, true);
    cr_assert_leq(d, 1e-4, "ddp --sync-bn on 4 ranks vs the whole batch: weights or running statistics differ by %g", d);
}

Test(bn_exec, sync_bn_elsewhere_and_scan_refused_in_one_line, .timeout = 120)
{
    if (!have_bn_data()) cr_skip_test("no MPI or no Fashion-MNIST");
    static mpi_result r;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s " BN_FLAGS " --parallel gpipe --sync-bn", bn_bin());
    mpi_run("", "-np 2", cmd, &r);
    cr_assert_eq(r.status, 2, "gpipe --sync-bn: status %d\n%s", r.status, r.err);
    cr_assert(strstr(r.err, "sync-bn"), "%s", r.err);
    snprintf(cmd, sizeof cmd, "%s " BN_FLAGS " --parallel scan", bn_bin());
    mpi_run("", "-np 2", cmd, &r);
    cr_assert_eq(r.status, 2, "scan with batch norm: status %d\n%s", r.status, r.err);
    cr_assert(strstr(r.err, "batch norm"), "%s", r.err);
    /* an action list whose ranks run micro-batch 1's forward before micro-batch 0's: the
     * running statistics would move out of order (the same list in order runs). Both
     * ranks out of order: which chunk holds a batch-norm layer follows the measured
     * stage costs (the chunks are balanced by cost), so either may. */
    const char *lists[2] = {"0F0,0F1,0I0,0W0,0I1,0W1\n1F0,1I0,1W0,1F1,1I1,1W1\n",
                            "0F1,0F0,0I0,0W0,0I1,0W1\n1F1,1F0,1I0,1W0,1I1,1W1\n"};
    for (int i = 0; i < 2; i++) {
        const char *csv = tu_tmp_path("order.csv");
        tu_write_file(csv, lists[i], strlen(lists[i]), false);
        snprintf(cmd, sizeof cmd, "%s " BN_FLAGS " --parallel custom --actions %s", bn_bin(), csv);
        mpi_run("", "-np 2", cmd, &r);
        cr_assert_eq(r.status, i ? 2 : 0, "custom list %d: status %d\n%s", i, r.status, r.err);
        if (i) cr_assert(strstr(r.err, "after micro-batch 1; batch norm's running statistics need micro-batch order"),
                         "%s", r.err);
    }
}
