/* tape.c — record nodes of one step; all storage comes from the tape's arenas (the host
 * arena, and one per other device that the step touches). */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/tape.h"
#include "core/error.h"
#include "core/device.h"

void sp_tape_init(sp_tape *t)
{
    if (!t) sp_fail("sp_tape_init: argument 't' is NULL");
    memset(t, 0, sizeof *t);
    sp_arena_init(&t->arena, 0);
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

void sp_tape_reset(sp_tape *t)
{
    if (!t) sp_fail("sp_tape_reset: argument 't' is NULL");
    t->n = 0;
    sp_arena_reset(&t->arena);
    for (int d = 0; d < SP_NDEVICES; d++)
        if (t->dev_arena[d]) sp_backend_allocator((sp_device)d)->arena_reset(t->dev_arena[d]);
}

void sp_tape_trim(sp_tape *t)
{
    if (!t) sp_fail("sp_tape_trim: argument 't' is NULL");
    sp_tape_reset(t);
    sp_arena_trim(&t->arena);
}

void *sp_tape_alloc(sp_tape *t, size_t bytes)
{
    if (!t) sp_fail("sp_tape_alloc: argument 't' is NULL");
    return sp_arena_alloc(&t->arena, bytes);
}

sp_tensor sp_tape_tensor(sp_tape *t, int ndim, const int *shape)
{
    if (ndim < 0) sp_fail("sp_tape_tensor: argument 'ndim' is %d (expected >= 0)", ndim);
    if (!t) sp_fail("sp_tape_tensor: argument 't' is NULL");
    if (ndim > 0 && !shape) sp_fail("sp_tape_tensor: argument 'shape' is NULL");
    sp_tensor x = sp_tensor_view(NULL, ndim, shape);
    if (!t->shape_only) x.data = sp_tape_alloc(t, x.numel * sizeof(float));
    return x;
}

sp_tensor sp_tape_tensor_like(sp_tape *t, const sp_tensor *like)
{
    if (!t) sp_fail("sp_tape_tensor_like: argument 't' is NULL");
    if (!like) sp_fail("sp_tape_tensor_like: argument 'like' is NULL");
    sp_tensor r = sp_tape_tensor_on(t, like->device, like->ndim, like->shape);
    r.blk = like->blk;
    return r;
}

void *sp_tape_alloc_on(sp_tape *t, sp_device dev, size_t bytes)
{
    if (!t) sp_fail("sp_tape_alloc_on: argument 't' is NULL");
    if (dev == SP_CPU) return sp_tape_alloc(t, bytes);
    const sp_device_allocator *a = sp_backend_allocator(dev);
    if (!t->dev_arena[dev]) t->dev_arena[dev] = a->arena_new();   /* first step only */
    return a->arena_alloc(t->dev_arena[dev], bytes);
}

void sp_tape_arena_like(sp_tape *t, const sp_tape *like)
{
    if (!t) sp_fail("sp_tape_arena_like: argument 't' is NULL");
    if (!like) sp_fail("sp_tape_arena_like: argument 'like' is NULL");
    for (int d = 0; d < SP_NDEVICES; d++) {
        if (d == SP_CPU || t->dev_arena[d] || !like->dev_arena[d]) continue;
        const sp_device_allocator *a = sp_backend_allocator((sp_device)d);
        if (!a->arena_size_like) continue;
        t->dev_arena[d] = a->arena_new();
        a->arena_size_like(t->dev_arena[d], like->dev_arena[d]);
    }
}

sp_tensor sp_tape_tensor_on(sp_tape *t, sp_device dev, int ndim, const int *shape)
{
    if (ndim < 0) sp_fail("sp_tape_tensor_on: argument 'ndim' is %d (expected >= 0)", ndim);
    if (!t) sp_fail("sp_tape_tensor_on: argument 't' is NULL");
    if (ndim > 0 && !shape) sp_fail("sp_tape_tensor_on: argument 'shape' is NULL");
    if (dev == SP_CPU) return sp_tape_tensor(t, ndim, shape);
    sp_tensor x = sp_tensor_view(NULL, ndim, shape);
    x.device = dev;
    if (!t->shape_only) x.data = sp_tape_alloc_on(t, dev, x.numel * sizeof(float));
    return x;
}

static sp_node *push_node(sp_tape *t)
{
    if (t->n == t->cap) {   /* grows in the first step only */
        t->cap = t->cap ? 2 * t->cap : 64;
        t->nodes = sp_xrealloc(t->nodes, (size_t)t->cap * sizeof *t->nodes);
    }
    sp_node *n = sp_arena_calloc(&t->arena, sizeof *n);
    n->tape = t;
    n->index = t->n;
    t->nodes[t->n++] = n;
    return n;
}

const char *sp_node_label(const sp_node *n, char *buf, size_t len)
{
    if (!n) sp_fail("sp_node_label: argument 'n' is NULL");
    if (!buf) sp_fail("sp_node_label: argument 'buf' is NULL");
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
    if (!t) sp_fail("sp_tape_input: argument 't' is NULL");
    if (!x) sp_fail("sp_tape_input: argument 'x' is NULL");
    sp_node *n = push_node(t);
    n->out = *x;
    return n;
}

/* How apply runs the layer's forward. */
enum { RUN_FORWARD, RUN_FORWARD_RELU, RUN_NOTHING };

/* over: the output's bytes (x's, sp_apply_over), or NULL for new ones in the arena */
static sp_node *apply(sp_tape *t, sp_layer *l, int ninputs, sp_node *const *xs, float *over, int run)
{
    int arity = l->op->arity ? l->op->arity : 1;
    if (arity == SP_ARITY_ANY ? ninputs < 1 : ninputs != arity)
        sp_fail("op %s: applied to %d inputs, expected %s%d", l->op->name, ninputs,
                arity == SP_ARITY_ANY ? "at least " : "", arity == SP_ARITY_ANY ? 1 : arity);
    for (int i = 0; i < ninputs; i++) {
        assert(xs[i] && xs[i]->tape == t);
        if (xs[i]->out.device != xs[0]->out.device)
            sp_fail("op %s: input %d is on another device than input 0", l->op->name, i);
    }
    sp_node *n = push_node(t);
    n->op = l->op;
    n->kern = sp_op_kernels(l->op, xs[0]->out.device);
    n->layer = l;
    n->input = xs[0];
    n->ninputs = ninputs;
    n->inputs = &n->input;
    if (ninputs > 1) {
        n->inputs = sp_tape_alloc(t, (size_t)ninputs * sizeof *n->inputs);
        memcpy(n->inputs, xs, (size_t)ninputs * sizeof *n->inputs);
    }
    for (int i = 0; i < ninputs; i++) xs[i]->nconsumers++;
    n->op->infer(n, &xs[0]->out);
    if (over) {
        if (sp_shape_numel(n->out.ndim, n->out.shape) != xs[0]->out.numel)
            sp_fail("op %s: applied over an input of another size", l->op->name);
        n->out = sp_tensor_view(over, n->out.ndim, n->out.shape);
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
    if (t->shape_only || run == RUN_NOTHING) return n;
    if (run == RUN_FORWARD_RELU) n->kern->forward_relu(n);
    else n->kern->forward(n);
    return n;
}

sp_node *sp_apply_n(sp_tape *t, sp_layer *l, int ninputs, sp_node *const *xs)
{
    if (!t) sp_fail("sp_apply_n: argument 't' is NULL");
    if (!l) sp_fail("sp_apply_n: argument 'l' is NULL");
    if (ninputs > 0 && !xs) sp_fail("sp_apply_n: argument 'xs' is NULL");
    return apply(t, l, ninputs, xs, NULL, RUN_FORWARD);
}

sp_node *sp_apply_over(sp_tape *t, sp_layer *l, sp_node *x)
{
    if (!t) sp_fail("sp_apply_over: argument 't' is NULL");
    if (!l) sp_fail("sp_apply_over: argument 'l' is NULL");
    if (!x) sp_fail("sp_apply_over: argument 'x' is NULL");
    if (!l->op->over_input) sp_fail("op %s: cannot write its output over its input", l->op->name);
    if (x->out.device != SP_CPU) sp_fail("op %s: applied over an input on a device", l->op->name);
    return apply(t, l, 1, &x, t->shape_only ? NULL : x->out.data, RUN_FORWARD);
}

sp_node *sp_apply_fused_relu(sp_tape *t, sp_layer *l, sp_node *x)
{
    if (!t) sp_fail("sp_apply_fused_relu: argument 't' is NULL");
    if (!l) sp_fail("sp_apply_fused_relu: argument 'l' is NULL");
    if (!x) sp_fail("sp_apply_fused_relu: argument 'x' is NULL");
    if (!sp_op_kernels(l->op, x->out.device)->forward_relu)
        sp_fail("op %s: no forward with a ReLU folded in on %s", l->op->name, sp_device_name(x->out.device));
    return apply(t, l, 1, &x, NULL, RUN_FORWARD_RELU);
}

sp_node *sp_apply_over_fused(sp_tape *t, sp_layer *relu, sp_node *x)
{
    if (!t) sp_fail("sp_apply_over_fused: argument 't' is NULL");
    if (!relu) sp_fail("sp_apply_over_fused: argument 'relu' is NULL");
    if (!x) sp_fail("sp_apply_over_fused: argument 'x' is NULL");
    if (!relu->op->relu || !relu->op->over_input) sp_fail("op %s: not a ReLU", relu->op->name);
    if (x->out.device != SP_CPU) sp_fail("op %s: applied over an input on a device", relu->op->name);
    return apply(t, relu, 1, &x, t->shape_only ? NULL : x->out.data, RUN_NOTHING);
}

sp_node *sp_apply(sp_tape *t, sp_layer *l, sp_node *x)
{
    if (!t) sp_fail("sp_apply: argument 't' is NULL");
    if (!l) sp_fail("sp_apply: argument 'l' is NULL");
    if (!x) sp_fail("sp_apply: argument 'x' is NULL");
    return sp_apply_n(t, l, 1, &x);
}

sp_node *sp_apply2(sp_tape *t, sp_layer *l, sp_node *a, sp_node *b)
{
    if (!t) sp_fail("sp_apply2: argument 't' is NULL");
    if (!l) sp_fail("sp_apply2: argument 'l' is NULL");
    if (!a) sp_fail("sp_apply2: argument 'a' is NULL");
    if (!b) sp_fail("sp_apply2: argument 'b' is NULL");
    return sp_apply_n(t, l, 2, (sp_node *[]){a, b});
}

sp_node *sp_apply_loss(sp_tape *t, sp_layer *loss, sp_node *logits, const int *labels)
{
    if (!t) sp_fail("sp_apply_loss: argument 't' is NULL");
    if (!logits) sp_fail("sp_apply_loss: argument 'logits' is NULL");
    assert(logits && logits->tape == t);
    if (!loss) sp_fail("sp_apply_loss: no loss layer (a model's builder sets one: sp_model_set_loss)");
    sp_node *n = push_node(t);
    n->op = loss->op;
    n->kern = sp_op_kernels(loss->op, logits->out.device);
    n->layer = loss;
    n->input = logits;
    n->inputs = &n->input;
    n->ninputs = 1;
    n->labels = labels;
    n->dev_labels = logits->out.device != SP_CPU ? t->dev_labels : NULL;
    logits->nconsumers++;
    n->op->infer(n, &logits->out);
    n->out = sp_tape_tensor_on(t, logits->out.device, n->out.ndim, n->out.shape);
    if (!t->shape_only) n->kern->forward(n);
    return n;
}
