/* test_ooo_cuda.c — the ooo engine on the device (schedulers/backward/ooo_cuda.cu): every order
 * on two prioritised streams gives bitwise the losses, gradients and weights of the
 * device linear engine; a CUDA Graph replay of the backward gives bitwise the same step;
 * the device trace shows both streams; the emulator's capture checks (make test-cuda on
 * a GPU, make test-cuda-emu without one; SCANPROP_EMU_ORDER=shuffle interleaves the
 * streams, so a missing event shows as different bits: tests/cudaemu/planted_bugs.sh). */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/device.h"
#include "core/kernels/cuda.h"
#include "schedulers/backward/engine.h"
#include "layers/layers.h"
#include "optim/optim.h"
#include "layers/zoo.h"
#include "schedulers/backward/bppsa_cuda.h"
#include "schedulers/backward/engines.h"
#include "schedulers/backward/ooo.h"
#include "train/train.h"
#include "tests/testutil.h"
#include "tests/cudatest.h"

static void update_layer(void *ctx, sp_layer *l) { sp_optim_step_params(ctx, l->params, l->nparams); }

enum { MAXP = 64, MAXSTEPS = 16 };

/* What a run leaves: every step's loss, the last step's parameter gradients and the
 * final weights, on the host. */
typedef struct result {
    float loss[MAXSTEPS];
    int np;
    sp_tensor grad[MAXP], value[MAXP];
    sp_ooo_device_stats dev;
} result;

static void result_free(result *r)
{
    for (int p = 0; p < r->np; p++) {
        sp_tensor_free(&r->grad[p]);
        sp_tensor_free(&r->value[p]);
    }
}

typedef struct run_cfg {
    const char *engine, *order, *optim, *trace;
    bool graph;
    int steps;
    int lanes;   /* sp_ooo_opts.lanes: 0 auto, 1, 2 */
} run_cfg;

/* steps training steps on the device, as train/train.c runs them. */
static void run(sp_model *(*make)(void), int ndim, const int *xshape, int classes, const run_cfg *c, result *r)
{
    sp_model *m = make();
    sp_model_init(m, 42);
    sp_model_to_device(m, SP_CUDA);
    sp_tensor x = sp_tensor_new(ndim, xshape);
    int B = xshape[0], *labels = malloc((size_t)B * sizeof *labels);
    for (int b = 0; b < B; b++) labels[b] = (3 * b + 1) % classes;
    sp_optim_cfg cfg = sp_optim_cfg_default();
    bool sgd = strcmp(c->optim, "sgd") == 0;
    cfg.lr = sgd ? 0.05 : 1e-3;
    cfg.momentum = sgd ? 0.9 : 0.0;
    cfg.weight_decay = 1e-4;
    sp_optim *o = sp_optim_create(c->optim, m->params, m->nparams, &cfg);
    bool ooo = strcmp(c->engine, "ooo") == 0;
    sp_engine_opts eo = {.own = &(sp_ooo_opts){.order = c->order, .lanes = c->lanes}, .trace_path = c->trace};
    if (!ooo) eo.own = NULL;
    if (ooo) {
        eo.update = update_layer;
        eo.update_ctx = o;
    }
    sp_engine *e = sp_engine_create(c->engine, &eo);
    if (c->graph) sp_ooo_set_cuda_graph(e, true);
    sp_tape t;
    sp_tape_init(&t);
    for (int s = 0; s < c->steps; s++) {
        tu_fill_uniform(x.data, x.numel, 77 + (uint64_t)s, -1.0f, 1.0f);   /* a new batch each step */
        sp_tape_reset(&t);
        sp_optim_zero_grad(o);
        sp_tensor xin = sp_tape_copy_on(&t, SP_CUDA, &x);
        sp_node *loss = sp_model_loss(m, &t, &xin, labels);
        sp_backward(e, &t, loss);
        if (!ooo) sp_optim_step(o);
        sp_tensor l = download(&loss->out);
        r->loss[s] = l.data[0];
        sp_tensor_free(&l);
    }
    r->np = m->nparams;
    cr_assert_leq(r->np, MAXP);
    for (int p = 0; p < m->nparams; p++) {
        r->grad[p] = download(&m->params[p]->grad);
        r->value[p] = download(&m->params[p]->value);
    }
    if (ooo) r->dev = sp_ooo_device_stats_get(e);
    sp_tape_free(&t);
    sp_engine_destroy(e);
    sp_optim_free(o);
    free(labels);
    sp_tensor_free(&x);
    sp_model_free(m);
}

static void assert_bitwise(const result *a, const result *b, int steps, const char *what)
{
    for (int s = 0; s < steps; s++)
        cr_assert(memcmp(&a->loss[s], &b->loss[s], sizeof(float)) == 0, "%s: step %d loss %.9g vs linear %.9g", what,
                  s, a->loss[s], b->loss[s]);
    cr_assert_eq(a->np, b->np);
    for (int p = 0; p < a->np; p++) {
        cr_assert(memcmp(a->grad[p].data, b->grad[p].data, a->grad[p].numel * sizeof(float)) == 0,
                  "%s: gradient of parameter %d differs from the device linear engine (not bitwise)", what, p);
        cr_assert(memcmp(a->value[p].data, b->value[p].data, a->value[p].numel * sizeof(float)) == 0,
                  "%s: parameter %d after %d steps differs from the device linear engine (not bitwise)", what, p,
                  steps);
    }
}

static sp_model *lenet(void) { return sp_zoo_lenet(1, 28); }

static sp_model *mlp(void)
{
    sp_model *m = sp_model_new("mlp");
    sp_model_set_loss(m, sp_softmax_ce());
    sp_model_add(m, sp_linear("fc1", 20, 32));
    sp_model_add(m, sp_relu());
    sp_model_add(m, sp_linear("fc2", 32, 32));
    sp_model_add(m, sp_tanh());
    sp_model_add(m, sp_linear("fc3", 32, 10));
    return m;
}

static const char *const orders[] = {"conventional", "ooo", "reverse-first-k", "list"};

static void every_order(sp_model *(*make)(void), int ndim, const int *xshape, const char *optim)
{
    need_gpu();
    enum { STEPS = 3 };
    result lin = {0};
    run(make, ndim, xshape, 10, &(run_cfg){.engine = "linear", .optim = optim, .steps = STEPS}, &lin);
    for (int i = 0; i < 4; i++) {
        result r = {0};
        run(make, ndim, xshape, 10, &(run_cfg){.engine = "ooo", .order = orders[i], .optim = optim, .steps = STEPS},
            &r);
        char what[96];
        snprintf(what, sizeof what, "ooo --order %s (%s)", orders[i], optim);
        assert_bitwise(&r, &lin, STEPS, what);
        result_free(&r);
    }
    result_free(&lin);
}

Test(ooo_cuda, every_order_bitwise_equals_device_linear_lenet)
{
    every_order(lenet, 4, (int[]){4, 1, 28, 28}, "sgd");
}

Test(ooo_cuda, every_order_bitwise_equals_device_linear_mlp)
{
    every_order(mlp, 2, (int[]){8, 20}, "sgd");
    every_order(mlp, 2, (int[]){8, 20}, "adam");
}

/* Two recurrent layers: the GRU's δ and G both run (cuDNN's BackwardData once, by
 * whichever comes first in the order, the other lane waiting for it), the RNN's G alone
 * (its input needs no gradient: G runs BackwardData itself). */
static sp_model *stacked_rnn(void)
{
    sp_model *m = sp_model_new("stacked_rnn");
    sp_model_set_loss(m, sp_softmax_ce());
    sp_model_add(m, sp_rnn("r1", 3, 8, SP_SEQ_ALL));
    sp_model_add(m, sp_gru("r2", 8, 6, SP_SEQ_LAST));
    sp_model_add(m, sp_linear("fc", 6, 10));
    return m;
}

Test(ooo_cuda, every_order_bitwise_equals_device_linear_rnn)
{
    every_order(stacked_rnn, 3, (int[]){4, 5, 3}, "sgd");
}

/* The backward captured once its key repeats and replayed after: every step bitwise the
 * step without a graph (the linear engine's). */
Test(ooo_cuda, graph_replay_bitwise_equals_no_graph)
{
    need_gpu();
    enum { STEPS = 6 };
    const char *optims[] = {"sgd", "adam"};
    for (int k = 0; k < 2; k++) {
        result lin = {0}, g = {0};
        run(mlp, 2, (int[]){8, 20}, 10, &(run_cfg){.engine = "linear", .optim = optims[k], .steps = STEPS}, &lin);
        run(mlp, 2, (int[]){8, 20}, 10,
            &(run_cfg){.engine = "ooo", .order = "ooo", .optim = optims[k], .graph = true, .steps = STEPS}, &g);
        cr_assert_geq(g.dev.graph_captures, 1, "no backward was captured");
        cr_assert_geq(g.dev.graph_replays, 1, "no backward was replayed");
        cr_assert_geq(g.dev.graph_captures + g.dev.graph_replays, STEPS - 2,
                      "captures %ld + replays %ld: expected every step after the first two", g.dev.graph_captures,
                      g.dev.graph_replays);
        assert_bitwise(&g, &lin, STEPS, optims[k]);
        result_free(&lin);
        result_free(&g);
    }
    result lin = {0}, g = {0};   /* LeNet: convolutions, pooling in the graph */
    run(lenet, 4, (int[]){2, 1, 28, 28}, 10, &(run_cfg){.engine = "linear", .optim = "sgd", .steps = 4}, &lin);
    run(lenet, 4, (int[]){2, 1, 28, 28}, 10,
        &(run_cfg){.engine = "ooo", .order = "list", .optim = "sgd", .graph = true, .steps = 4}, &g);
    cr_assert_geq(g.dev.graph_replays + g.dev.graph_captures, 1);
    assert_bitwise(&g, &lin, 4, "lenet graph");
    result_free(&lin);
    result_free(&g);
}

/* ---- the next forward overlaps the last δW/U (sp_ooo_backward_async on the device) ---- */

static void wait_layer_cb(void *e, const sp_layer *l) { sp_ooo_wait_layer(e, l); }

/* As train/train.c runs ooo on a device: step k+1 on the other tape, each layer's
 * forward waiting only for that layer's U of step k (its event), then the join, the
 * gradient zeroing and step k+1's backward, queued without a join. */
static void run_overlap(sp_model *(*make)(void), int ndim, const int *xshape, const char *order, const char *optim,
                        int steps, result *r)
{
    sp_model *m = make();
    sp_model_init(m, 42);
    sp_model_to_device(m, SP_CUDA);
    sp_tensor x = sp_tensor_new(ndim, xshape);
    int B = xshape[0], *labels = malloc((size_t)B * sizeof *labels);
    for (int b = 0; b < B; b++) labels[b] = (3 * b + 1) % 10;
    sp_optim_cfg cfg = sp_optim_cfg_default();
    bool sgd = strcmp(optim, "sgd") == 0;
    cfg.lr = sgd ? 0.05 : 1e-3;
    cfg.momentum = sgd ? 0.9 : 0.0;
    cfg.weight_decay = 1e-4;
    sp_optim *o = sp_optim_create(optim, m->params, m->nparams, &cfg);
    sp_engine *e = sp_engine_create("ooo", &(sp_engine_opts){.own = &(sp_ooo_opts){.order = order}, .update = update_layer, .update_ctx = o});
    sp_tape tapes[2];
    sp_tape_init(&tapes[0]);
    sp_tape_init(&tapes[1]);
    for (int s = 0; s < steps; s++) {
        sp_tape *t = &tapes[s % 2];
        tu_fill_uniform(x.data, x.numel, 77 + (uint64_t)s, -1.0f, 1.0f);
        sp_tape_reset(t);
        sp_tensor xin = sp_tape_copy_on(t, SP_CUDA, &x);
        t->before_apply = wait_layer_cb;
        t->before_apply_ctx = e;
        sp_node *loss = sp_model_loss(m, t, &xin, labels);
        t->before_apply = NULL;
        sp_ooo_sync(e);   /* gradients are zeroed only once every update has read them */
        sp_optim_zero_grad(o);
        sp_ooo_backward_async(e, t, loss);
        sp_tensor l = download(&loss->out);
        r->loss[s] = l.data[0];
        sp_tensor_free(&l);
    }
    sp_ooo_sync(e);
    r->np = m->nparams;
    for (int p = 0; p < m->nparams; p++) {
        r->grad[p] = download(&m->params[p]->grad);
        r->value[p] = download(&m->params[p]->value);
    }
    r->dev = sp_ooo_device_stats_get(e);
    sp_tape_free(&tapes[0]);
    sp_tape_free(&tapes[1]);
    sp_engine_destroy(e);
    sp_optim_free(o);
    free(labels);
    sp_tensor_free(&x);
    sp_model_free(m);
}

static void overlap_every_order(sp_model *(*make)(void), int ndim, const int *xshape, const char *optim)
{
    need_gpu();
    enum { STEPS = 4 };
    result lin = {0};
    run(make, ndim, xshape, 10, &(run_cfg){.engine = "linear", .optim = optim, .steps = STEPS}, &lin);
    for (int i = 0; i < 4; i++) {
        result r = {0};
        run_overlap(make, ndim, xshape, orders[i], optim, STEPS, &r);
        char what[96];
        snprintf(what, sizeof what, "ooo --order %s, next forward overlapping (%s)", orders[i], optim);
        assert_bitwise(&r, &lin, STEPS, what);
        if (strcmp(orders[i], "conventional") != 0)   /* one stream: nothing to wait for */
            cr_assert_geq(r.dev.layer_waits, STEPS - 1, "%s: %ld per-layer waits (expected every step after the first)",
                          what, r.dev.layer_waits);
        result_free(&r);
    }
    result_free(&lin);
}

/* The forward of step k+1 waits for each layer's U event only: bitwise the device linear
 * engine in every order (tests/cudaemu/planted_bugs.sh drops the wait: stale weights). */
Test(ooo_cuda, next_forward_overlaps_updates_bitwise_lenet)
{
    overlap_every_order(lenet, 4, (int[]){4, 1, 28, 28}, "sgd");
}

Test(ooo_cuda, next_forward_overlaps_updates_bitwise_mlp)
{
    overlap_every_order(mlp, 2, (int[]){8, 20}, "sgd");
    overlap_every_order(mlp, 2, (int[]){8, 20}, "adam");
}

/* --trace on the device: per-task event times on both streams, same JSON as the CPU's. */
Test(ooo_cuda, trace_shows_both_streams)
{
    need_gpu();
    char path[512];
    snprintf(path, sizeof path, "%s/trace.json", tu_tmpdir());
    result r = {0};
    run(lenet, 4, (int[]){2, 1, 28, 28}, 10,
        &(run_cfg){.engine = "ooo", .order = "ooo", .optim = "sgd", .trace = path, .steps = 2}, &r);
    result_free(&r);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "no trace at %s", path);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cr_assert(strstr(buf, "on cuda (stream times)"), "not a device trace: %.200s", buf);
    cr_assert(strstr(buf, "\"ph\": \"X\", \"pid\": 1, \"tid\": 0"), "no task on stream 0");
    cr_assert(strstr(buf, "\"ph\": \"X\", \"pid\": 1, \"tid\": 1"), "no task on stream 1");
    cr_assert(strstr(buf, "\"ph\": \"s\""), "no cross-stream event arrow");
    cr_assert_eq(remove(path), 0);
    remove(tu_tmpdir());
}

/* --lanes 1 on the device: a plan of one lane, every task on stream 0, no cross-stream
 * event, and the device linear engine's bits; --lanes 2 (as auto) uses both streams. */
Test(ooo_cuda, one_lane_is_one_stream_bitwise)
{
    need_gpu();
    enum { STEPS = 2 };
    const int shape[] = {2, 1, 28, 28};
    result lin = {0};
    run(lenet, 4, shape, 10, &(run_cfg){.engine = "linear", .optim = "sgd", .steps = STEPS}, &lin);
    char path[512];
    snprintf(path, sizeof path, "%s/lanes.json", tu_tmpdir());
    for (int lanes = 1; lanes <= 2; lanes++) {
        result r = {0};
        run(lenet, 4, shape, 10,
            &(run_cfg){.engine = "ooo", .order = "ooo", .optim = "sgd", .trace = path, .steps = STEPS, .lanes = lanes},
            &r);
        char what[32];
        snprintf(what, sizeof what, "ooo --lanes %d", lanes);
        assert_bitwise(&r, &lin, STEPS, what);
        static char buf[1 << 16];
        FILE *f = fopen(path, "r");
        cr_assert_not_null(f, "no trace at %s", path);
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        bool sub = strstr(buf, "\"ph\": \"X\", \"pid\": 1, \"tid\": 1") != NULL;
        cr_assert_eq(sub, lanes == 2, "%s: tasks on stream 1: %d", what, sub);
        if (lanes == 1) cr_assert_eq(r.dev.cross_events, 0, "%s: %d cross-stream events", what, r.dev.cross_events);
        else cr_assert_gt(r.dev.cross_events, 0, "%s", what);
        result_free(&r);
        cr_assert_eq(remove(path), 0);
    }
    result_free(&lin);
    remove(tu_tmpdir());
}

Test(ooo_cuda, lanes_have_priorities)
{
    need_gpu();
    int p0 = 0, p1 = 0, least = 0, greatest = 0;
    cr_assert_eq(cudaDeviceGetStreamPriorityRange(&least, &greatest), cudaSuccess);
    cr_assert_eq(cudaStreamGetPriority(sp_cuda()->lanes[0].stream, &p0), cudaSuccess);
    cr_assert_eq(cudaStreamGetPriority(sp_cuda()->lanes[1].stream, &p1), cudaSuccess);
    cr_assert_eq(p0, greatest, "lane 0 (δ) priority %d, expected the greatest %d", p0, greatest);
    cr_assert_eq(p1, least, "lane 1 (δW) priority %d, expected the least %d", p1, least);
}

/* As on a GPU: a malloc or a sync during a global capture is refused and the capture
 * invalidated; a stream forked from a capture must join it again. */
Test(ooo_cuda, capture_refuses_malloc_sync_and_unjoined_forks, .init = cr_redirect_stderr)
{
    need_gpu();
    cudaStream_t a = sp_cuda()->lanes[0].stream, b = sp_cuda()->lanes[1].stream;
    cudaGraph_t g = NULL;
    void *p = NULL;
    cr_assert_eq(cudaStreamBeginCapture(a, cudaStreamCaptureModeGlobal), cudaSuccess);
    cr_assert_eq(cudaMalloc(&p, 64), cudaErrorStreamCaptureUnsupported);
    cr_assert_neq(cudaStreamEndCapture(a, &g), cudaSuccess);
    cr_assert_null(g);
    (void)cudaGetLastError();
    cr_assert_eq(cudaStreamBeginCapture(a, cudaStreamCaptureModeGlobal), cudaSuccess);
    cr_assert_eq(cudaStreamSynchronize(b), cudaErrorStreamCaptureUnsupported);
    cr_assert_neq(cudaStreamEndCapture(a, &g), cudaSuccess);
    (void)cudaGetLastError();
    cudaEvent_t fork;
    cr_assert_eq(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming), cudaSuccess);
    float *d = NULL;
    cr_assert_eq(cudaMalloc((void **)&d, 256), cudaSuccess);
    cr_assert_eq(cudaStreamBeginCapture(a, cudaStreamCaptureModeGlobal), cudaSuccess);
    cr_assert_eq(cudaEventRecord(fork, a), cudaSuccess);
    cr_assert_eq(cudaStreamWaitEvent(b, fork, 0), cudaSuccess);   /* b joins the capture ... */
    cr_assert_eq(cudaMemsetAsync(d, 0, 256, b), cudaSuccess);     /* ... and never rejoins a */
    cr_assert_eq(cudaStreamEndCapture(a, &g), cudaErrorStreamCaptureUnjoined);
    cr_assert_eq(cudaEventDestroy(fork), cudaSuccess);
    cr_assert_eq(cudaFree(d), cudaSuccess);
}

/* ---- the whole step as one graph (train/train_step.c, sp_step_graph) -------------- */

typedef struct step_cfg {
    const char *engine, *optim, *order;
    bool graph;
    int steps;
    const int *batch;   /* [steps] the batch size of each step (a smaller last batch: a new shape) */
} step_cfg;

/* steps as the training loop runs them on a device: the batch and its labels staged in
 * alternating slots, the learning rate changed every step (a cosine schedule), and with
 * graph the step captured and replayed by sp_step_graph. */
static void run_steps(const step_cfg *c, result *r, long *captures, long *replays)
{
    sp_model *m = mlp();
    sp_model_init(m, 42);
    sp_model_to_device(m, SP_CUDA);
    sp_optim_cfg cfg = sp_optim_cfg_default();
    bool sgd = strcmp(c->optim, "sgd") == 0;
    cfg.lr = sgd ? 0.05 : 1e-3;
    cfg.momentum = sgd ? 0.9 : 0.0;
    cfg.weight_decay = 1e-4;
    sp_optim *o = sp_optim_create(c->optim, m->params, m->nparams, &cfg);
    sp_lr_schedule sched = sp_lr_parse("cosine:5", cfg.lr);
    bool ooo = strcmp(c->engine, "ooo") == 0;
    sp_engine_opts eo = {.own = ooo ? &(sp_ooo_opts){.order = c->order} : NULL};
    if (ooo) {
        eo.update = update_layer;
        eo.update_ctx = o;
    }
    sp_engine *e = sp_engine_create(c->engine, &eo);
    sp_step_graph *g = c->graph ? sp_step_graph_new(m, e, o) : NULL;
    const sp_device_allocator *a = sp_backend_allocator(SP_CUDA);
    sp_tape t;
    sp_tape_init(&t);
    int labels[2][8];
    for (int s = 0; s < c->steps; s++) {
        int B = c->batch[s], slot = s % 2;
        cr_assert_leq(B, 8);
        sp_tensor x = sp_tensor_2d(NULL, B, 20);
        x.data = malloc(x.numel * sizeof(float));
        tu_fill_uniform(x.data, x.numel, 77 + (uint64_t)s, -1.0f, 1.0f);
        for (int b = 0; b < B; b++) labels[slot][b] = (3 * b + s) % 10;
        sp_tensor xd = sp_tensor_2d(NULL, B, 20);
        xd.device = SP_CUDA;
        xd.data = a->stage(slot, x.data, x.numel);
        const int *yd = a->stage_labels(slot, labels[slot], (size_t)B);
        a->use_staged(slot);
        sp_optim_set_lr(o, sp_lr_at(&sched, s));   /* a new learning rate every step */
        const sp_tensor *lt;
        if (g) {
            lt = sp_step_graph_step(g, &t, &xd, labels[slot], yd);
        } else {
            sp_tape_reset(&t);
            sp_optim_zero_grad(o);
            sp_node *loss = sp_model_loss(m, &t, &xd, labels[slot]);
            sp_backward(e, &t, loss);
            if (!ooo) sp_optim_step(o);
            lt = &loss->out;
        }
        r->loss[s] = sp_tensor_get(lt, 0);
        free(x.data);
    }
    r->np = m->nparams;
    for (int p = 0; p < m->nparams; p++) {
        r->grad[p] = download(&m->params[p]->grad);
        r->value[p] = download(&m->params[p]->value);
    }
    if (g) {
        sp_step_graph_counts(g, captures, replays);
        sp_step_graph_free(g);
    }
    sp_tape_free(&t);
    sp_engine_destroy(e);
    sp_optim_free(o);
    sp_model_free(m);
}

/* Forward, loss, backward and updates captured as one graph per shape and replayed:
 * every step bitwise the device linear engine's without a graph, with SGD + momentum,
 * Adam and AdamW (three orders), the learning rate changing every step, and a smaller
 * last batch (a new shape: live, captured, replayed, then the full batch's graph
 * replayed again). */
Test(ooo_cuda, whole_step_graph_bitwise_equals_no_graph)
{
    need_gpu();
    enum { STEPS = 13 };
    static const int batch[STEPS] = {8, 8, 8, 8, 8, 8, 5, 5, 5, 5, 5, 8, 8};
    const char *optims[] = {"sgd", "adam", "adamw"}, *ords[] = {"ooo", "list", "reverse-first-k"};
    for (int k = 0; k < 3; k++) {
        result lin = {0}, g = {0};
        long captures = 0, replays = 0;
        run_steps(&(step_cfg){.engine = "linear", .optim = optims[k], .steps = STEPS, .batch = batch}, &lin, NULL,
                  NULL);
        run_steps(&(step_cfg){.engine = "ooo", .optim = optims[k], .order = ords[k], .graph = true, .steps = STEPS,
                              .batch = batch},
                  &g, &captures, &replays);
        /* keys (slot, shape): 8 → live ×3 (the first without an arena), captured ×2, replayed;
         * 5 → live ×2, captured ×2, replayed; 8 again → replayed ×2 */
        cr_assert_eq(captures, 4, "%s: %ld whole steps captured, expected 4 (two slots × two shapes)", optims[k],
                     captures);
        cr_assert_eq(replays, 4, "%s: %ld whole steps replayed, expected 4", optims[k], replays);
        char what[64];
        snprintf(what, sizeof what, "whole-step graph (%s)", optims[k]);
        assert_bitwise(&g, &lin, STEPS, what);
        result_free(&lin);
        result_free(&g);
    }
}

/* ---- what a steady-state step issues (sp_device_counts; docs/CUDA.md "Counting") ---- */

/* The emulator's own counts (tests/cudaemu/cudart.cc); absent on a GPU. */
void cudaemu_counts(long long *launches, long long *syncs, long long *allocs, long long *copies)
    __attribute__((weak));

typedef struct step_counts {
    int n;
    sp_device_counts own[8];
    long long emu[8][4];
    sp_bppsa_graph_stats scan[8];   /* bppsa's scan graphs (bppsa_cuda.h) */
} step_counts;

static void read_counts(void *ctx, long step)
{
    step_counts *c = ctx;
    if (c->n >= 8) return;
    sp_device_counts_get(SP_CUDA, &c->own[c->n]);
    if (cudaemu_counts) cudaemu_counts(&c->emu[c->n][0], &c->emu[c->n][1], &c->emu[c->n][2], &c->emu[c->n][3]);
    sp_bppsa_cuda_graph_stats(&c->scan[c->n]);
    c->n++;
    (void)step;
}

/* LeNet on the device through sp_train, linear BP and ooo on two lanes: from the third
 * step on a step allocates nothing, waits for the device once (the loss) and copies
 * only the batch, its labels and the loss; scanprop's counts equal the emulator's
 * between any two steps (nothing issued escapes them), and the JSON's figures
 * (result.device_step) are the steady state's. */
Test(ooo_cuda, steady_state_step_counts)
{
    need_gpu();
    const char *orders[] = {NULL, "ooo"};
    for (int k = 0; k < 2; k++) {
        int shape[3] = {1, 28, 28}, n = 48;
        float *x;
        int *y;
        sp_dataset *d = sp_dataset_new_f32("rand", n, 3, shape, 10, &x, &y);
        cr_assert_not_null(d);
        tu_fill_uniform(x, (size_t)n * 28 * 28, 5, -1, 1);
        for (int i = 0; i < n; i++) y[i] = (i * 7) % 10;
        sp_model *m = sp_zoo_model("lenet");
        sp_model_init(m, 3);
        sp_model_to_device(m, SP_CUDA);
        sp_optim_cfg oc = sp_optim_cfg_default();
        oc.lr = 0.05;
        sp_optim *o = sp_optim_create("sgd", m->params, m->nparams, &oc);
        sp_engine_opts eo = {.own = &(sp_ooo_opts){.order = orders[k]}, .update = update_layer, .update_ctx = o};
        sp_engine *e = sp_engine_create(orders[k] ? "ooo" : "linear", orders[k] ? &eo : NULL);
        sp_loader *l = sp_loader_new_sync(d, 8, false, 1, false);
        step_counts c = {0};
        sp_train_cfg tc = sp_train_cfg_default();
        tc.quiet = true;
        tc.on_step = read_counts;
        tc.on_step_ctx = &c;
        sp_train_result r = sp_train(m, e, o, l, NULL, &tc);
        cr_assert_eq(r.status, SP_OK, "%s", sp_last_error());
        cr_assert_eq(c.n, 6);
        const char *what = orders[k] ? "ooo" : "linear";
        for (int s = 2; s + 1 < c.n; s++) {
            sp_device_counts dc = sp_device_counts_diff(&c.own[s + 1], &c.own[s]);
            cr_expect_eq(dc.allocs, 0, "%s: step %d allocated %lld times", what, s + 2, dc.allocs);
            cr_expect_gt(dc.launches, 0, "%s: step %d launched nothing", what, s + 2);
            if (cudaemu_counts) {
                long long want[4] = {dc.launches, dc.syncs, dc.allocs, dc.copies};
                const char *names[4] = {"launches", "syncs", "allocs", "copies"};
                for (int f = 0; f < 4; f++)
                    cr_expect_eq(c.emu[s + 1][f] - c.emu[s][f], want[f],
                                 "%s: step %d: the emulator counted %lld %s, scanprop %lld", what, s + 2,
                                 c.emu[s + 1][f] - c.emu[s][f], names[f], want[f]);
            }
        }
        const sp_device_counts *st = &r.device_step;
        cr_expect_eq(st->allocs, 0, "%s: %lld allocations in a steady-state step", what, st->allocs);
        cr_expect_eq(st->syncs, 1, "%s: %lld host waits in a steady-state step (the loss's only)", what, st->syncs);
        cr_expect_leq(st->copies, 3, "%s: %lld copies in a steady-state step (batch, labels, loss)", what,
                      st->copies);
        cr_expect_gt(st->launches, 0);
        cr_expect_gt(st->library_calls, 0, "%s: LeNet's convolutions and GEMMs are library calls", what);
        sp_loader_free(l);
        sp_dataset_free(d);
        sp_engine_destroy(e);
        sp_optim_free(o);
        sp_model_free(m);
    }
}

/* A demo-like MLP (linear, tanh, linear, tanh, linear). */
static sp_model *tiny_mlp(void)
{
    sp_model *m = sp_model_new("tiny_mlp");
    sp_model_set_loss(m, sp_softmax_ce());
    sp_model_add(m, sp_linear("fc1", 6, 8));
    sp_model_add(m, sp_tanh());
    sp_model_add(m, sp_linear("fc2", 8, 8));
    sp_model_add(m, sp_tanh());
    sp_model_add(m, sp_linear("fc3", 8, 10));
    return m;
}

/* The steady state of model m (init seed 3, SGD) trained through sp_train on the
 * device by engine `engine` (ooo: two lanes; bppsa: automatic levels), n random
 * samples of the given shape in 6 batches: from the third step on a step allocates
 * nothing, waits once (the loss) and copies only the batch, its labels and the loss,
 * under bppsa replays its scan's levels as one graph launch, and the emulator counts
 * what scanprop counts. */
static void expect_steady(const char *what, sp_model *m, const char *engine, int batch, int ndim, const int *shape)
{
    int n = 6 * batch;
    float *x;
    int *y;
    sp_dataset *d = sp_dataset_new_f32("rand", n, ndim, shape, 10, &x, &y);
    cr_assert_not_null(d);
    size_t per = 1;
    for (int i = 0; i < ndim; i++) per *= (size_t)shape[i];
    tu_fill_uniform(x, (size_t)n * per, 5, -1, 1);
    for (int i = 0; i < n; i++) y[i] = (i * 7) % 10;
    sp_model_init(m, 3);
    sp_model_to_device(m, SP_CUDA);
    sp_optim_cfg oc = sp_optim_cfg_default();
    oc.lr = 0.01;
    sp_optim *o = sp_optim_create("sgd", m->params, m->nparams, &oc);
    sp_ooo_opts oo = {.order = "ooo"};
    sp_bppsa_opts bo = {.scan_levels = SP_SCAN_LEVELS_AUTO};
    sp_engine_opts eo = {0};
    if (strcmp(engine, "ooo") == 0) eo = (sp_engine_opts){.own = &oo, .update = update_layer, .update_ctx = o};
    else if (strcmp(engine, "bppsa") == 0) eo = (sp_engine_opts){.own = &bo};
    sp_engine *e = sp_engine_create(engine, strcmp(engine, "linear") ? &eo : NULL);
    sp_loader *l = sp_loader_new_sync(d, batch, false, 1, false);
    step_counts c = {0};
    sp_train_cfg tc = sp_train_cfg_default();
    tc.quiet = true;
    tc.on_step = read_counts;
    tc.on_step_ctx = &c;
    sp_train_result r = sp_train(m, e, o, l, NULL, &tc);
    cr_assert_eq(r.status, SP_OK, "%s: %s", what, sp_last_error());
    cr_assert_eq(c.n, 6);
    for (int s = 2; s + 1 < c.n; s++) {
        sp_device_counts dc = sp_device_counts_diff(&c.own[s + 1], &c.own[s]);
        cr_expect_eq(dc.allocs, 0, "%s: step %d allocated %lld times", what, s + 2, dc.allocs);
        cr_expect_eq(dc.syncs, 1, "%s: step %d waited %lld times (the loss's only)", what, s + 2, dc.syncs);
        cr_expect_leq(dc.copies, 3, "%s: step %d copied %lld times (batch, labels, loss)", what, s + 2, dc.copies);
        if (strcmp(engine, "bppsa") == 0) {   /* the scan's levels: one graph, replayed */
            cr_expect_eq(c.scan[s + 1].replays - c.scan[s].replays, 1, "%s: step %d replayed the scan %ld times",
                         what, s + 2, c.scan[s + 1].replays - c.scan[s].replays);
            cr_expect_eq(c.scan[s + 1].captures, c.scan[s].captures, "%s: step %d captured the scan", what, s + 2);
            cr_expect_eq(c.scan[s + 1].launches, 1, "%s: %ld graph launches for the scan", what,
                         c.scan[s + 1].launches);
        }
        if (cudaemu_counts) {
            long long want[4] = {dc.launches, dc.syncs, dc.allocs, dc.copies};
            const char *names[4] = {"launches", "syncs", "allocs", "copies"};
            for (int f = 0; f < 4; f++)
                cr_expect_eq(c.emu[s + 1][f] - c.emu[s][f], want[f],
                             "%s: step %d: the emulator counted %lld %s, scanprop %lld", what, s + 2,
                             c.emu[s + 1][f] - c.emu[s][f], names[f], want[f]);
        }
    }
    cr_expect_leq(r.device_step.copies, 3, "%s: %lld copies in the JSON's step", what, r.device_step.copies);
    cr_expect(r.backward_ms >= 0, "%s: backward_ms %g", what, r.backward_ms);
    sp_loader_free(l);
    sp_dataset_free(d);
    sp_engine_destroy(e);
    sp_optim_free(o);
    sp_model_free(m);
}

/* The other models at tiny sizes: the RNN and the GRU scanned by bppsa (the scan's
 * pointer arrays stay on the device, its levels one graph), ResNet-20 on 8×8 images
 * (batch norm and the residual adds, no device copy) and under ooo on 16×16 (two tapes
 * taking turns, each needing more than the arena's first block), and a demo-like MLP. */
Test(ooo_cuda, steady_state_step_counts_models, .timeout = 600)
{
    need_gpu();
    /* What a step issues does not depend on the emulator's block order or page
     * protection: the default and ASan runs of make test-cuda-emu count it (a minute each) */
    if (getenv("SCANPROP_EMU_ORDER") || getenv("SCANPROP_EMU_PROTECT"))
        cr_skip_test("counted in the emulator's default mode");
    const int seq[2] = {8, 1}, gseq[2] = {6, 4}, img[3] = {1, 8, 8}, img16[3] = {1, 16, 16}, vec[1] = {6};
    expect_steady("rnn bppsa", sp_zoo_rnn(1, 8, 10), "bppsa", 4, 2, seq);
    expect_steady("rnn linear", sp_zoo_rnn(1, 8, 10), "linear", 4, 2, seq);
    expect_steady("gru bppsa", sp_zoo_gru(4, 8, 10), "bppsa", 4, 2, gseq);
    expect_steady("resnet20 linear", sp_zoo_resnet20(1, 10), "linear", 2, 3, img);
    /* two tapes taking turns, each outgrowing the arena's first block on its first step */
    expect_steady("resnet20 ooo", sp_zoo_resnet20(1, 10), "ooo", 2, 3, img16);
    expect_steady("mlp bppsa", tiny_mlp(), "bppsa", 4, 1, vec);
    expect_steady("mlp linear", tiny_mlp(), "linear", 4, 1, vec);
}
