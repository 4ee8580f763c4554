/* tape.c — record nodes of one step; all storage comes from the tape's arenas (the host
 * arena, and one per other device that the step touches). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/tape.h"
#include "core/error.h"
#include "core/device.h"

int sp_tape_init(sp_tape *t)
{
    if (!t) return sp_refuse("sp_tape_init: argument 't' is NULL");
    memset(t, 0, sizeof *t);
    return sp_arena_init(&t->arena, 0);   /* no block yet: cannot fail */
}

void sp_tape_free(sp_tape *t)
{
    if (!t) return;
    for (int d = 0; d < SP_NDEVICES; d++)
        if (t->dev_arena[d]) sp_backend_allocator((sp_device)d)->arena_free(t->dev_arena[d]);
    sp_arena_free(&t->arena);
    free(t->nodes);
    memset(t, 0, sizeof *t);
}

int sp_tape_reset(sp_tape *t)
{
    if (!t) return sp_refuse("sp_tape_reset: argument 't' is NULL");
    t->n = 0;
    sp_arena_reset(&t->arena);
    for (int d = 0; d < SP_NDEVICES; d++)
        if (t->dev_arena[d]) sp_backend_allocator((sp_device)d)->arena_reset(t->dev_arena[d]);
    return SP_OK;
}

int sp_tape_trim(sp_tape *t)
{
    if (!t) return sp_refuse("sp_tape_trim: argument 't' is NULL");
    sp_tape_reset(t);
    return sp_arena_trim(&t->arena);
}

void *sp_tape_alloc(sp_tape *t, size_t bytes)
{
    if (!t) return sp_refuse("sp_tape_alloc: argument 't' is NULL"), NULL;
    return sp_arena_alloc(&t->arena, bytes);
}

/* A device of this build with memory for tapes, else sp_refuse naming what. */
static int check_device(const char *what, sp_device dev)
{
    if ((int)dev < 0 || dev >= SP_NDEVICES)
        return sp_refuse("%s: argument 'dev' is %d (expected 0..%d)", what, (int)dev, SP_NDEVICES - 1);
    if (dev != SP_CPU && !sp_backend_has_allocator(dev))
        return sp_refuse("%s: %s memory: no allocator (build with make CUDA=1 and call the backend's init)", what,
                         sp_device_name(dev));
    return SP_OK;
}

static const sp_tensor no_tensor;   /* a refused call's tensor: ndim 0, no data */

/* Device memory from its own arena, opened on first use. Runs under sp_try (a device's
 * allocator ends in sp_fail when its memory runs out). */
typedef struct dev_alloc_call {
    sp_tape *t;
    sp_device dev;
    size_t bytes;
    void *out;
} dev_alloc_call;

static void dev_alloc(void *arg)
{
    dev_alloc_call *c = arg;
    const sp_device_allocator *a = sp_backend_allocator(c->dev);
    if (!c->t->dev_arena[c->dev]) c->t->dev_arena[c->dev] = a->arena_new();   /* first step only */
    c->out = a->arena_alloc(c->t->dev_arena[c->dev], c->bytes);
}

void *sp_tape_alloc_on(sp_tape *t, sp_device dev, size_t bytes)
{
    if (!t) return sp_refuse("sp_tape_alloc_on: argument 't' is NULL"), NULL;
    if (dev == SP_CPU) return sp_tape_alloc(t, bytes);
    if (check_device("sp_tape_alloc_on", dev) != SP_OK) return NULL;
    dev_alloc_call c = {t, dev, bytes, NULL};
    if (sp_try(dev_alloc, &c) != SP_OK) return sp_refuse("%s", sp_last_error()), NULL;
    return c.out;
}

static sp_tensor tensor_on(const char *what, sp_tape *t, sp_device dev, int ndim, const int *shape)
{
    if (ndim < 0) return sp_shape_check(what, ndim, shape, NULL), no_tensor;   /* named first */
    if (!t) return sp_refuse("%s: argument 't' is NULL", what), no_tensor;
    size_t numel;
    if ((dev != SP_CPU && check_device(what, dev) != SP_OK) || sp_shape_check(what, ndim, shape, &numel) != SP_OK)
        return no_tensor;
    sp_tensor x = {.ndim = ndim, .numel = numel, .device = dev};
    memcpy(x.shape, shape, (size_t)ndim * sizeof *shape);
    if (!t->shape_only) {
        x.data = sp_tape_alloc_on(t, dev, x.numel * sizeof(float));
        if (!x.data && x.numel) return no_tensor;   /* refused (a device may give no bytes for none) */
    }
    return x;
}

int sp_tape_arena_like(sp_tape *t, const sp_tape *like)
{
    if (!t || !like) return sp_refuse("sp_tape_arena_like: argument '%s' is NULL", !t ? "t" : "like");
    for (int d = 0; d < SP_NDEVICES; d++) {
        if (d == SP_CPU || t->dev_arena[d] || !like->dev_arena[d]) continue;
        const sp_device_allocator *a = sp_backend_allocator((sp_device)d);
        if (!a->arena_size_like) continue;
        t->dev_arena[d] = a->arena_new();
        a->arena_size_like(t->dev_arena[d], like->dev_arena[d]);
    }
    return SP_OK;
}

sp_tensor sp_tape_tensor_on(sp_tape *t, sp_device dev, int ndim, const int *shape)
{
    return tensor_on("sp_tape_tensor_on", t, dev, ndim, shape);
}

sp_tensor sp_tape_tensor(sp_tape *t, int ndim, const int *shape)
{
    return tensor_on("sp_tape_tensor", t, SP_CPU, ndim, shape);
}

sp_tensor sp_tape_tensor_like(sp_tape *t, const sp_tensor *like)
{
    if (!t) return sp_refuse("sp_tape_tensor_like: argument 't' is NULL"), no_tensor;
    if (!like) return sp_refuse("sp_tape_tensor_like: argument 'like' is NULL"), no_tensor;
    sp_tensor r = sp_tape_tensor_on(t, like->device, like->ndim, like->shape);
    if (r.ndim || !like->ndim) r.blk = like->blk;   /* not on a refused one */
    return r;
}

/* A new node at the tape's end, or NULL after sp_refuse (no memory). */
static sp_node *push_node(sp_tape *t)
{
    if (t->n == t->cap) {   /* grows in the first step only */
        int cap = t->cap ? 2 * t->cap : 64;
        sp_node **nodes = realloc(t->nodes, (size_t)cap * sizeof *nodes);
        if (!nodes) return sp_refuse("tape: out of memory for %d nodes", cap), NULL;
        t->nodes = nodes;
        t->cap = cap;
    }
    sp_node *n = sp_arena_calloc(&t->arena, sizeof *n);
    if (!n) return NULL;
    n->tape = t;
    n->index = t->n;
    t->nodes[t->n++] = n;
    return n;
}

const char *sp_node_label(const sp_node *n, char *buf, size_t len)
{
    if (!n) return sp_refuse("sp_node_label: argument 'n' is NULL"), NULL;
    if (!buf) return sp_refuse("sp_node_label: argument 'buf' is NULL"), NULL;
    if (!n->op) {
        snprintf(buf, len, "input");
        return buf;
    }
    if (n->layer && n->layer->name[0]) {
        snprintf(buf, len, "%s", n->layer->name);
        return buf;
    }
    int k = 0;   /* device twins share the op's name */
    for (int i = 0; i <= n->index && i < n->tape->n; i++)
        k += n->tape->nodes[i]->op && strcmp(n->tape->nodes[i]->op->name, n->op->name) == 0;
    snprintf(buf, len, "%s_%d", n->op->name, k);
    return buf;
}

sp_node *sp_tape_input(sp_tape *t, const sp_tensor *x)
{
    if (!t) return sp_refuse("sp_tape_input: argument 't' is NULL"), NULL;
    if (!x) return sp_refuse("sp_tape_input: argument 'x' is NULL"), NULL;
    if (x->ndim < 1 || x->ndim > SP_MAX_DIMS)
        return sp_refuse("sp_tape_input: argument 'x' has ndim %d (expected 1..%d)", x->ndim, SP_MAX_DIMS), NULL;
    sp_node *n = push_node(t);
    if (n) n->out = *x;
    return n;
}

/* How apply runs the layer's forward. */
enum { RUN_FORWARD, RUN_FORWARD_RELU, RUN_NOTHING, RUN_BEGIN };

/* ---- applying an op ------------------------------------------------------------------
 * Each sp_apply* checks its pointers, then records the node under sp_try: an op's shape
 * check (its infer), its forward (a label out of range), a device or memory that fails
 * all end in sp_fail there, and the tape is put back as it was (no node, the host arena's
 * bytes released, no input counted as read) before the call refuses with that message. */

typedef struct apply_call {
    sp_tape *t;
    sp_layer *l;
    int ninputs;
    sp_node *const *xs;
    float *over;         /* sp_apply_over: x's bytes; NULL: new ones in the arena */
    const int *labels;   /* sp_apply_loss */
    int run;             /* RUN_*: how the forward runs */
    sp_node *out;
} apply_call;

/* The node of op l on xs (sp_apply_n / sp_apply_over), under sp_try. */
static void apply(void *arg)
{
    apply_call *c = arg;
    sp_tape *t = c->t;
    sp_layer *l = c->l;
    int ninputs = c->ninputs;
    sp_node *const *xs = c->xs;
    if (!l->op) sp_fail("op of layer '%s': none (not a layer a constructor made)", l->name);
    int arity = l->op->arity ? l->op->arity : 1;
    if (arity == SP_ARITY_ANY ? ninputs < 1 : ninputs != arity)
        sp_fail("op %s: applied to %d inputs, expected %s%d", l->op->name, ninputs,
                arity == SP_ARITY_ANY ? "at least " : "", arity == SP_ARITY_ANY ? 1 : arity);
    for (int i = 0; i < ninputs; i++) {
        if (!xs[i]) sp_fail("op %s: input %d is NULL", l->op->name, i);
        if (xs[i]->tape != t) sp_fail("op %s: input %d is a node of another tape", l->op->name, i);
        if (xs[i]->out.device != xs[0]->out.device)
            sp_fail("op %s: input %d is on another device than input 0", l->op->name, i);
    }
    const sp_kernels *kern = sp_op_kernels(l->op, xs[0]->out.device);
    if (c->run == RUN_FORWARD_RELU && !kern->forward_relu)
        sp_fail("op %s: no forward with a ReLU folded in on %s", l->op->name, sp_device_name(xs[0]->out.device));
    sp_node *n = push_node(t);
    n->op = l->op;
    n->kern = kern;
    n->layer = l;
    n->input = xs[0];
    n->ninputs = ninputs;
    n->inputs = &n->input;
    if (ninputs > 1) {
        n->inputs = sp_tape_alloc(t, (size_t)ninputs * sizeof *n->inputs);
        memcpy(n->inputs, xs, (size_t)ninputs * sizeof *n->inputs);
    }
    n->op->infer(n, &xs[0]->out);
    if (c->over) {
        if (sp_shape_numel(n->out.ndim, n->out.shape) != xs[0]->out.numel)
            sp_fail("op %s: applied over an input of another size", l->op->name);
        n->out = sp_tensor_view(c->over, n->out.ndim, n->out.shape);
    } else {
        n->out = sp_tape_tensor_on(t, xs[0]->out.device, n->out.ndim, n->out.shape);
    }
    /* Layouts (sp_tensor.blk): every input in one, which the op must take; the output
     * in it too unless the op's forward says otherwise (a convolution, a pooling). */
    int blk = xs[0]->out.blk;
    for (int i = 1; i < ninputs; i++)
        if (xs[i]->out.blk != blk)
            sp_fail("op %s: input %d in layout %d, input 0 in %d (expected one layout)", l->op->name, i,
                    xs[i]->out.blk, blk);
    if (blk && (!l->op->blocked || !l->op->blocked(l)))
        sp_fail("op %s: input in the blocked layout nChw%dc, which it does not take", l->op->name, blk);
    n->out.blk = blk;
    if (t->before_apply && !t->shape_only) t->before_apply(t->before_apply_ctx, l);
    if (!t->shape_only && c->run == RUN_FORWARD_RELU) n->kern->forward_relu(n, NULL);
    else if (!t->shape_only && c->run == RUN_BEGIN) n->kern->forward_begin(n);
    else if (!t->shape_only && c->run == RUN_FORWARD) n->kern->forward(n);
    for (int i = 0; i < ninputs; i++) xs[i]->nconsumers++;
    c->out = n;
}

/* The loss node of loss on logits (sp_apply_loss), under sp_try. */
static void apply_loss(void *arg)
{
    apply_call *c = arg;
    sp_tape *t = c->t;
    sp_layer *loss = c->l;
    sp_node *logits = c->xs[0];
    if (!loss->op) sp_fail("op of layer '%s': none (not a layer a constructor made)", loss->name);
    if (logits->tape != t) sp_fail("sp_apply_loss: argument 'logits' is a node of another tape");
    bool staged = logits->out.device != SP_CPU && t->dev_labels;
    if (!c->labels && !t->shape_only && !staged) sp_fail("sp_apply_loss: argument 'labels' is NULL");
    sp_node *n = push_node(t);
    n->op = loss->op;
    n->kern = sp_op_kernels(loss->op, logits->out.device);
    n->layer = loss;
    n->input = logits;
    n->inputs = &n->input;
    n->ninputs = 1;
    n->labels = c->labels;
    n->dev_labels = staged ? t->dev_labels : NULL;
    n->op->infer(n, &logits->out);
    n->out = sp_tape_tensor_on(t, logits->out.device, n->out.ndim, n->out.shape);
    if (!t->shape_only) n->kern->forward(n);
    logits->nconsumers++;
    c->out = n;
}

static sp_node *apply_guarded(void (*run)(void *), apply_call *c)
{
    sp_tape *t = c->t;
    int n0 = t->n;
    sp_arena_mark m = {t->arena.head, t->arena.head ? t->arena.head->used : 0, t->arena.used_total};   /* mark_get */
    if (sp_try(run, c) == SP_OK) return c->out;
    t->n = n0;
    sp_arena_release(&t->arena, m);
    sp_refuse("%s", sp_last_error());   /* inside sp_try: ends there */
    return NULL;
}

sp_node *sp_apply_n(sp_tape *t, sp_layer *l, int ninputs, sp_node *const *xs)
{
    if (!t) return sp_refuse("sp_apply_n: argument 't' is NULL"), NULL;
    if (!l) return sp_refuse("sp_apply_n: argument 'l' is NULL"), NULL;
    if (ninputs > 0 && !xs) return sp_refuse("sp_apply_n: argument 'xs' is NULL"), NULL;
    return apply_guarded(apply, &(apply_call){.t = t, .l = l, .ninputs = ninputs, .xs = xs});
}

sp_node *sp_apply_over(sp_tape *t, sp_layer *l, sp_node *x)
{
    if (!t) return sp_refuse("sp_apply_over: argument 't' is NULL"), NULL;
    if (!l) return sp_refuse("sp_apply_over: argument 'l' is NULL"), NULL;
    if (!x) return sp_refuse("sp_apply_over: argument 'x' is NULL"), NULL;
    if (l->op && !l->op->over_input)
        return sp_refuse("op %s: cannot write its output over its input", l->op->name), NULL;
    if (l->op && x->out.device != SP_CPU)
        return sp_refuse("op %s: applied over an input on a device", l->op->name), NULL;
    float *over = t->shape_only ? NULL : x->out.data;
    return apply_guarded(apply, &(apply_call){.t = t, .l = l, .ninputs = 1, .xs = &x, .over = over});
}

sp_node *sp_apply_fused_relu(sp_tape *t, sp_layer *l, sp_node *x)
{
    if (!t) return sp_refuse("sp_apply_fused_relu: argument 't' is NULL"), NULL;
    if (!l) return sp_refuse("sp_apply_fused_relu: argument 'l' is NULL"), NULL;
    if (!x) return sp_refuse("sp_apply_fused_relu: argument 'x' is NULL"), NULL;
    return apply_guarded(apply, &(apply_call){.t = t, .l = l, .ninputs = 1, .xs = &x, .run = RUN_FORWARD_RELU});
}

sp_node *sp_apply_over_fused(sp_tape *t, sp_layer *relu, sp_node *x)
{
    if (!t) return sp_refuse("sp_apply_over_fused: argument 't' is NULL"), NULL;
    if (!relu) return sp_refuse("sp_apply_over_fused: argument 'relu' is NULL"), NULL;
    if (!x) return sp_refuse("sp_apply_over_fused: argument 'x' is NULL"), NULL;
    if (relu->op && (!relu->op->relu || !relu->op->over_input))
        return sp_refuse("op %s: not a ReLU", relu->op->name), NULL;
    if (relu->op && x->out.device != SP_CPU)
        return sp_refuse("op %s: applied over an input on a device", relu->op->name), NULL;
    float *over = t->shape_only ? NULL : x->out.data;
    return apply_guarded(apply, &(apply_call){.t = t, .l = relu, .ninputs = 1, .xs = &x, .over = over, .run = RUN_NOTHING});
}

typedef struct fused_next_call {
    sp_tape *t;
    sp_layer *l, *relu, *next;
    sp_node *x, *out;
    int done;   /* nodes recorded whole (their inputs counted as read) */
} fused_next_call;

/* The three nodes of sp_apply_fused_relu_next, under sp_try: l's forward waits until
 * next's node (and its saved state) exists, then computes all three. */
static void apply_fused_next(void *arg)
{
    fused_next_call *f = arg;
    sp_layer *ls[3] = {f->l, f->relu, f->next};
    for (int i = 0; i < 3; i++)
        if (!ls[i]->op) sp_fail("op of layer '%s': none (not a layer a constructor made)", ls[i]->name);
    sp_device dev = f->x->out.device;
    const sp_kernels *kn = sp_op_kernels(f->next->op, dev);
    if (!sp_op_kernels(f->l->op, dev)->forward_relu)
        sp_fail("op %s: no forward with a ReLU folded in on %s", f->l->op->name, sp_device_name(dev));
    if (!f->relu->op->relu || !f->relu->op->over_input) sp_fail("op %s: not a ReLU", f->relu->op->name);
    if (!kn->forward_begin || !kn->forward_samples)
        sp_fail("op %s: no forward by ranges of samples on %s", f->next->op->name, sp_device_name(dev));
    if (dev != SP_CPU) sp_fail("op %s: applied over an input on a device", f->relu->op->name);
    apply_call c = {.t = f->t, .l = f->l, .ninputs = 1, .xs = &f->x, .run = RUN_NOTHING};
    apply(&c);
    sp_node *y = c.out;
    f->done++;
    c = (apply_call){.t = f->t, .l = f->relu, .ninputs = 1, .xs = &y, .over = y->out.data, .run = RUN_NOTHING};
    apply(&c);
    sp_node *r = c.out;
    f->done++;
    c = (apply_call){.t = f->t, .l = f->next, .ninputs = 1, .xs = &r, .run = RUN_BEGIN};
    apply(&c);
    f->done++;
    if (!f->t->shape_only) y->kern->forward_relu(y, c.out);
    f->out = c.out;
}

sp_node *sp_apply_fused_relu_next(sp_tape *t, sp_layer *l, sp_layer *relu, sp_layer *next, sp_node *x)
{
    if (!t) return sp_refuse("sp_apply_fused_relu_next: argument 't' is NULL"), NULL;
    if (!l) return sp_refuse("sp_apply_fused_relu_next: argument 'l' is NULL"), NULL;
    if (!relu) return sp_refuse("sp_apply_fused_relu_next: argument 'relu' is NULL"), NULL;
    if (!next) return sp_refuse("sp_apply_fused_relu_next: argument 'next' is NULL"), NULL;
    if (!x) return sp_refuse("sp_apply_fused_relu_next: argument 'x' is NULL"), NULL;
    fused_next_call f = {.t = t, .l = l, .relu = relu, .next = next, .x = x};
    int n0 = t->n;
    sp_arena_mark m = {t->arena.head, t->arena.head ? t->arena.head->used : 0, t->arena.used_total};   /* mark_get */
    if (sp_try(apply_fused_next, &f) == SP_OK) return f.out;
    for (int i = n0; i < n0 + f.done; i++)   /* the inputs the recorded nodes counted as read */
        for (int k = 0; k < t->nodes[i]->ninputs; k++) t->nodes[i]->inputs[k]->nconsumers--;
    t->n = n0;
    sp_arena_release(&t->arena, m);
    sp_refuse("%s", sp_last_error());   /* inside sp_try: ends there */
    return NULL;
}

sp_node *sp_apply(sp_tape *t, sp_layer *l, sp_node *x)
{
    if (!t) return sp_refuse("sp_apply: argument 't' is NULL"), NULL;
    if (!l) return sp_refuse("sp_apply: argument 'l' is NULL"), NULL;
    if (!x) return sp_refuse("sp_apply: argument 'x' is NULL"), NULL;
    return apply_guarded(apply, &(apply_call){.t = t, .l = l, .ninputs = 1, .xs = &x});
}

sp_node *sp_apply2(sp_tape *t, sp_layer *l, sp_node *a, sp_node *b)
{
    if (!t) return sp_refuse("sp_apply2: argument 't' is NULL"), NULL;
    if (!l) return sp_refuse("sp_apply2: argument 'l' is NULL"), NULL;
    if (!a) return sp_refuse("sp_apply2: argument 'a' is NULL"), NULL;
    if (!b) return sp_refuse("sp_apply2: argument 'b' is NULL"), NULL;
    return apply_guarded(apply, &(apply_call){.t = t, .l = l, .ninputs = 2, .xs = (sp_node *[]){a, b}});
}

sp_node *sp_apply_loss(sp_tape *t, sp_layer *loss, sp_node *logits, const int *labels)
{
    if (!t) return sp_refuse("sp_apply_loss: argument 't' is NULL"), NULL;
    if (!logits) return sp_refuse("sp_apply_loss: argument 'logits' is NULL"), NULL;
    if (!loss) return sp_refuse("sp_apply_loss: no loss layer (a model's builder sets one: sp_model_set_loss)"), NULL;
    return apply_guarded(apply_loss, &(apply_call){.t = t, .l = loss, .ninputs = 1, .xs = &logits, .labels = labels});
}
