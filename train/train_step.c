/* train_step.c — one training step (train/train.h): the plain step, the step
 * whose forward overlaps the previous step's last δW/U (an engine with backward_async),
 * and the whole step captured and replayed as one device graph (--cuda-graph). The loop
 * that chooses among them is train.c's. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "core/device.h"
#include "core/error.h"
#include "core/threads.h"
#include "train/train.h"
#include "train/train_internal.h"
#include "core/guard.h"

/* The step after the tape's reset; on a device everything is queued, nothing waited for,
 * and (when bwd_s is asked for) the backward is bracketed by the backend's time marks:
 * the loop reads its device time once the step's loss has been read (train.c). */
static sp_node *step_body(sp_model *m, sp_engine *e, sp_optim *o, sp_tape *t, const sp_tensor *x, const int *y,
                          double *fwd_s, double *bwd_s)
{
    const sp_device_allocator *a = bwd_s && model_device(m) != SP_CPU ? sp_backend_allocator(model_device(m)) : NULL;
    sp_optim_zero_grad(o);
    double t0 = sp_now();
    sp_tensor xin = sp_tape_copy_on(t, model_device(m), x);   /* the batch goes up (--device cuda) */
    t->reuse_inputs = (e->caps & SP_ENGINE_OVER_INPUTS) && model_device(m) == SP_CPU;   /* ReLUs over inputs (tape.h) */
    t->blocked = (e->caps & SP_ENGINE_BLOCKED) && model_device(m) == SP_CPU;   /* blocked activations (tape.h) */
    sp_node *loss = sp_model_loss(m, t, &xin, y);
    double t1 = sp_now();
    if (a) a->time_mark(0);
    sp_backward(e, t, loss);
    if (a) a->time_mark(1);
    double t2 = sp_now();
    if (!e->opts.update) sp_optim_step(o);   /* else the engine ran every layer's update, */
    else if (e->caps & SP_ENGINE_STEP_GRADS) sp_optim_step_rest(o);   /* or those its walk reached */
    if (fwd_s) *fwd_s = t1 - t0;
    if (bwd_s) *bwd_s = t2 - t1;
    return loss;
}

sp_node *train_step_queue(sp_model *m, sp_engine *e, sp_optim *o, sp_tape *t, const sp_tensor *x, const int *y,
                          double *fwd_s, double *bwd_s)
{
    sp_tape_reset(t);
    return step_body(m, e, o, t, x, y, fwd_s, bwd_s);
}

/* ---- the next forward overlaps the last δW/U (an engine with backward_async: ooo's
 * CPU lanes or device streams) ------------------------------------------------------------ */

static void wait_layer(void *e, const sp_layer *l) { sp_engine_wait_layer(e, l); }

/* The step on tape t while the previous step's backward (on the other tape) may still
 * run its last δW and U (ooo: on the sub lane or stream): each layer's forward waits for
 * that layer's update alone (the engine's wait_layer); then the engine is joined (sync),
 * the gradients zeroed and this step's backward started without a join
 * (backward_async). On a device the staged batch of the previous step (slot `release`)
 * is released after the join; on the CPU (release < 0) the batch and labels are copied
 * into the tape, since the loader reuses its buffers while this step's last δW may still
 * read them. */
sp_node *train_step_queue_overlap(sp_model *m, sp_engine *e, sp_optim *o, sp_tape *t, const sp_tensor *x,
                                  const int *y, int release, double *fwd_s, double *bwd_s)
{
    sp_tape_reset(t);   /* the tape of two steps ago: joined, so lane 0 alone is waited for */
    double t0 = sp_now();
    sp_tensor xc;
    if (release < 0) {
        xc = sp_tape_tensor(t, x->ndim, x->shape);
        memcpy(xc.data, x->data, x->numel * sizeof(float));
        int *yc = sp_tape_alloc(t, (size_t)x->shape[0] * sizeof *yc);
        memcpy(yc, y, (size_t)x->shape[0] * sizeof *yc);
        x = &xc;
        y = yc;
    }
    t->blocked = (e->caps & SP_ENGINE_BLOCKED) && model_device(m) == SP_CPU;   /* as the plain step */
    t->before_apply = wait_layer;
    t->before_apply_ctx = e;
    sp_node *loss = sp_model_loss(m, t, x, y);
    t->before_apply = NULL;
    sp_engine_sync(e);   /* the previous backward's tail joined: every update has read its gradient */
    if (release >= 0) sp_backend_allocator(model_device(m))->release_staged(release);
    sp_optim_zero_grad(o);
    double t1 = sp_now();
    sp_backward_async(e, t, loss);
    if (fwd_s) *fwd_s = t1 - t0;
    if (bwd_s) *bwd_s = sp_now() - t1;
    return loss;
}

/* ---- the whole step as one device graph ----------------------------------------------- */

#define STEP_GRAPHS 4   /* two staged input slots, times a full and a smaller last batch */

struct sp_step_graph {
    sp_model *m;
    sp_engine *e;
    sp_optim *o;
    sp_device dev;
    struct {
        uint64_t key;
        long used;            /* 0: empty */
        bool capturable;      /* no host randomness in the step */
        void *graph;          /* captured: replay it */
        sp_tensor loss;       /* the captured step's loss (its arena address) */
        int classes;          /* the logits' width: replayed labels are range-checked */
    } c[STEP_GRAPHS];
    long clock, captures, replays;
};

static uint64_t mix64(uint64_t h, uint64_t v)
{
    for (int b = 0; b < 8; b++) h = (h ^ ((v >> (8 * b)) & 0xff)) * 0x100000001b3ull;
    return h;
}

sp_step_graph *sp_step_graph_new(sp_model *m, sp_engine *e, sp_optim *o)
{
    SP_GUARD(NULL);
    if (!m) sp_fail("sp_step_graph_new: argument 'm' is NULL");
    if (!e) sp_fail("sp_step_graph_new: argument 'e' is NULL");
    if (!o) sp_fail("sp_step_graph_new: argument 'o' is NULL");
    sp_device dev = model_device(m);
    if (dev == SP_CPU) sp_fail("--cuda-graph: the model is on the cpu (expected --device cuda)");
    sp_backend_graph(dev);   /* fails now without graph support */
    if (sp_optim_device_scalars(o, true) != SP_OK) sp_fail("%s", sp_last_error());
    if (sp_engine_set_step_capture(e, true) != SP_OK) sp_fail("%s", sp_last_error());   /* the engine captures nothing of its own */
    sp_step_graph *g = sp_xcalloc(1, sizeof *g);
    *g = (sp_step_graph){.m = m, .e = e, .o = o, .dev = dev};
    return g;
}

/* Ops whose forward draws host randomness each step: a replay would repeat it. */
static bool step_capturable(const sp_tape *t)
{
    for (int i = 0; i < t->n; i++)
        if (t->nodes[i]->op && strcmp(t->nodes[i]->op->name, "dropout") == 0 && !t->nodes[i]->layer->eval) return false;
    return true;
}

const sp_tensor *sp_step_graph_step(sp_step_graph *g, sp_tape *t, const sp_tensor *x, const int *y, const int *y_dev)
{
    SP_GUARD(NULL);
    if (!g) sp_fail("sp_step_graph_step: argument 'g' is NULL");
    if (!t) sp_fail("sp_step_graph_step: argument 't' is NULL");
    if (!x) sp_fail("sp_step_graph_step: argument 'x' is NULL");
    if (!y) sp_fail("sp_step_graph_step: argument 'y' is NULL");
    const sp_device_allocator *a = sp_backend_allocator(g->dev);
    sp_tape_reset(t);   /* waits for the previous step: outside any capture */
    const void *base = t->dev_arena[g->dev] ? a->arena_base(t->dev_arena[g->dev]) : NULL;
    uint64_t key = 0xcbf29ce484222325ull;
    key = mix64(key, (uint64_t)(uintptr_t)x->data);
    key = mix64(key, (uint64_t)(uintptr_t)y_dev);
    key = mix64(key, (uint64_t)(uintptr_t)base);
    key = mix64(key, (uint64_t)g->m->eval);
    key = mix64(key, (uint64_t)x->ndim);
    for (int d = 0; d < x->ndim; d++) key = mix64(key, (uint64_t)x->shape[d]);
    int slot = -1, lru = 0;
    for (int i = 0; i < STEP_GRAPHS; i++) {
        if (g->c[i].used && g->c[i].key == key) slot = i;
        if (g->c[i].used < g->c[lru].used) lru = i;
    }
    g->clock++;
    sp_optim_stage_scalars(g->o);   /* this step's lr, step counts, bias corrections: one copy */
    if (slot >= 0 && g->c[slot].graph) {   /* replay */
        int K = g->c[slot].classes, B = x->shape[0];
        for (int b = 0; b < B; b++)   /* the live op's check, in its words */
            if (y[b] < 0 || y[b] >= K) sp_fail("softmax_ce: label %d of sample %d out of range [0, %d)", y[b], b, K);
        g->c[slot].used = g->clock;
        sp_backend_graph(g->dev)->launch(g->c[slot].graph);
        g->replays++;
        return &g->c[slot].loss;
    }
    bool capture = slot >= 0 && g->c[slot].capturable && base;
    if (slot < 0) {   /* a new key: live now, captured when it comes again */
        slot = lru;
        sp_backend_graph(g->dev)->free(g->c[slot].graph);
        g->c[slot].graph = NULL;
        g->c[slot].key = key;
    }
    g->c[slot].used = g->clock;
    if (capture) sp_backend_graph(g->dev)->capture_begin();
    t->dev_labels = y_dev;
    sp_node *loss = step_body(g->m, g->e, g->o, t, x, y, NULL, NULL);
    t->dev_labels = NULL;
    if (capture) {
        g->c[slot].graph = sp_backend_graph(g->dev)->capture_end();
        sp_backend_graph(g->dev)->launch(g->c[slot].graph);
        g->captures++;
    }
    g->c[slot].capturable = base && y_dev && step_capturable(t);
    g->c[slot].loss = loss->out;
    g->c[slot].classes = sp_node_x(loss)->shape[1];
    return &g->c[slot].loss;
}

int sp_step_graph_counts(const sp_step_graph *g, long *captures, long *replays)
{
    SP_GUARD(SP_ERR);
    if (!g) sp_fail("sp_step_graph_counts: argument 'g' is NULL");
    if (!captures) sp_fail("sp_step_graph_counts: argument 'captures' is NULL");
    if (!replays) sp_fail("sp_step_graph_counts: argument 'replays' is NULL");
    *captures = g->captures;
    *replays = g->replays;
    return SP_OK;
}

void sp_step_graph_free(sp_step_graph *g)
{
    if (!g) return;
    for (int i = 0; i < STEP_GRAPHS; i++) sp_backend_graph(g->dev)->free(g->c[i].graph);
    sp_optim_device_scalars(g->o, false);
    sp_engine_set_step_capture(g->e, false);
    free(g);
}

typedef struct step_args {
    sp_model *m;
    sp_engine *e;
    sp_optim *o;
    sp_tape *t;
    const sp_tensor *x;
    const int *y;
    double *fwd_s, *bwd_s;
    float loss;
} step_args;

static void checked_step(void *arg)
{
    step_args *a = arg;
    sp_node *loss = train_step_queue(a->m, a->e, a->o, a->t, a->x, a->y, a->fwd_s, a->bwd_s);
    a->loss = sp_tensor_get(&loss->out, 0);   /* waits for the step on a device */
}

float sp_train_step(sp_model *m, sp_engine *e, sp_optim *o, sp_tape *t, const sp_tensor *x, const int *y,
                    double *fwd_s, double *bwd_s, double *step_s)
{
    sp_clear_error();
    const char *null = !m ? "m" : !e ? "e" : !o ? "o" : !t ? "t" : !x ? "x" : !y ? "y" : NULL;
    if (null) return sp_error("sp_train_step: argument '%s' is NULL", null), NAN;
    double t0 = sp_now();
    step_args a = {m, e, o, t, x, y, fwd_s, bwd_s, NAN};
    if (sp_try(checked_step, &a) != SP_OK) {
        sp_engine_sync(e);   /* an engine's lanes still running the step's tail */
        return NAN;
    }
    if (step_s) *step_s = sp_now() - t0;
    return a.loss;
}
