/* reverse.c — classic back-propagation: walk the tape in reverse, Θ(n) sequential steps.
 *
 * The tape order is topological, so in reverse every node has its ∂l/∂y complete (all
 * its consumers have added their δ) when it is reached. It computes its weight gradient
 * G (backward_params) and the gradient δ_i of each input i (backward_input), written
 * into a producer read once, added into one that fans out. Everything else in scanprop
 * is checked against it.
 *
 * Memory: a δ lives only from its first writer to its node's own backward (the δ plan,
 * schedulers/memory/memory.h), and each node's backward scratch is handed back when it
 * returns, so the walk holds the forward's outputs and saved state, a few δ buffers and
 * one node's scratch.
 *
 * Updates in the walk (opts.update): a layer's optimizer update runs right after the
 * backward of its last node in the walk (its lowest tape index), once nothing else will
 * read its parameters or add to their gradients; the updates are element-wise, so the
 * step is bitwise the one with a single update after the walk. A parameter whose
 * gradient lives in the step (sp_model_step_grads) gets it from the arena, zeroed, at its
 * layer's first node in the walk: inside that node's scratch, handed back after the
 * update, when the layer has one node (a chain's or a DAG's layers), else before it, to
 * the step's end (a cell applied at every time step). So the walk holds one layer's
 * gradient at a time instead of the whole model's. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "core/device.h"
#include "core/error.h"
#include "schedulers/backward/engines.h"
#include "schedulers/memory/memory.h"

void sp_node_backward_inputs(sp_node *n)
{
    for (int k = 0; k < n->ninputs; k++) {
        sp_node *in = n->inputs[k];
        if (!in->needs_grad) continue;
        if (in->nconsumers == 1) {   /* the common chain case: write δ in place */
            n->kern->backward_input(n, k, &n->grad, &in->grad);
            continue;
        }
        if (n->kern->backward_input_acc) {   /* fan-out: added into the sum in the op's own pass */
            n->kern->backward_input_acc(n, k, &n->grad, &in->grad);
            continue;
        }
        sp_tensor tmp = sp_tape_tensor_like(n->tape, &in->out);   /* else through a scratch */
        n->kern->backward_input(n, k, &n->grad, &tmp);
        sp_accumulate(&in->grad, &tmp);   /* on the tensors' device */
    }
}

bool sp_node_backward_fuses(const sp_node *n)
{
    return n->kern->backward_params && n->layer->nparams > 0 && n->kern->backward_input_params && n->ninputs == 1 &&
           n->input->needs_grad;
}

void sp_node_backward(sp_node *n)
{
    bool params = n->kern->backward_params && n->layer->nparams > 0;
    sp_node *in = n->input;
    if (sp_node_backward_fuses(n)) {
        /* δ and G from one pass over dy (batch norm's sums, conv2d's blocked dy); into a
         * producer that fans out, added */
        n->kern->backward_input_params(n, &n->grad, &in->grad, in->nconsumers > 1);
        return;
    }
    if (params) n->kern->backward_params(n, &n->grad);
    sp_node_backward_inputs(n);
}

enum { W_UPDATE = 1, W_OPEN = 2, W_ACROSS = 4 };

/* Per node i up to the loss: W_UPDATE on the last node the walk reaches of each layer
 * with parameters, W_OPEN on its first, W_ACROSS there too when those differ. Layers
 * are found by an open-addressed table of their pointers (an RNN's tape: thousands of
 * nodes, a few layers). */
static unsigned char *walk_plan(sp_tape *t, const sp_grad_plan *p, int L)
{
    unsigned char *f = sp_tape_alloc(t, (size_t)L + 1);
    memset(f, 0, (size_t)L + 1);
    int bits = 4;
    while ((1 << bits) < 2 * (L + 1)) bits++;
    size_t cap = (size_t)1 << bits;
    const sp_layer **key = sp_tape_alloc(t, cap * sizeof *key);
    int *lo = sp_tape_alloc(t, cap * sizeof *lo), *hi = sp_tape_alloc(t, cap * sizeof *hi);
    memset(key, 0, cap * sizeof *key);
    for (int i = 0; i <= L; i++) {
        const sp_layer *l = t->nodes[i]->layer;
        if (!sp_grad_plan_has(p, i) || !l || l->nparams == 0) continue;
        size_t h = (size_t)(((uint64_t)(uintptr_t)l * 0x9e3779b97f4a7c15ull) >> (64 - bits));
        while (key[h] && key[h] != l) h = (h + 1) & (cap - 1);
        if (!key[h]) key[h] = l, lo[h] = i;
        hi[h] = i;   /* i rises */
    }
    for (size_t h = 0; h < cap; h++) {
        if (!key[h]) continue;
        f[lo[h]] |= W_UPDATE;
        f[hi[h]] |= W_OPEN | (lo[h] != hi[h] ? W_ACROSS : 0);
    }
    return f;
}

/* l's step gradients, zeroed, from t's arena (parameters whose gradient lives in the step). */
static void step_grads_open(sp_tape *t, sp_layer *l)
{
    for (int k = 0; k < l->nparams; k++) {
        sp_param *q = l->params[k];
        if (!q->grad_in_step) continue;
        q->grad.data = sp_tape_alloc(t, q->grad.numel * sizeof(float));
        memset(q->grad.data, 0, q->grad.numel * sizeof(float));
    }
}

static void step_grads_close(sp_layer *l)
{
    for (int k = 0; k < l->nparams; k++)
        if (l->params[k]->grad_in_step) l->params[k]->grad.data = NULL;
}

static void linear_backward(sp_engine *e, sp_tape *t, sp_node *loss)
{
    sp_mark_needs_grad(t);
    sp_grad_plan p;
    sp_grad_plan_make(&p, t, loss);   /* every δ placed by its lifetime (schedulers/memory/) */
    const unsigned char *w = e->opts.update ? walk_plan(t, &p, loss->index) : NULL;
    for (int i = loss->index; i >= 0; i--) {
        sp_node *n = t->nodes[i];
        if (!sp_grad_plan_has(&p, i)) continue;   /* a leaf, or nothing to back-propagate */
        sp_grad_plan_begin(&p, t, i);
        if (n == loss) {
            sp_tensor seed = sp_tensor_view(loss->grad.data, 1, (int[]){1});   /* ∂l/∂l, first entry */
            seed.device = loss->grad.device;
            sp_fill(&seed, 1.0f);
        }
        /* a node's backward scratch (im2col columns, partial G, fan-out δ) is dead once
         * it returns: the next node reuses it (the δ region was allocated above) */
        unsigned f = w ? w[i] : 0;
        if ((f & W_OPEN) && (f & W_ACROSS)) step_grads_open(t, n->layer);   /* to the step's end */
        sp_arena_mark m = sp_arena_mark_get(&t->arena);
        if ((f & W_OPEN) && !(f & W_ACROSS)) step_grads_open(t, n->layer);   /* with the node's scratch */
        sp_node_backward(n);
        if (f & W_UPDATE) {
            e->opts.update(e->opts.update_ctx, n->layer);
            step_grads_close(n->layer);
        }
        sp_arena_release(&t->arena, m);
        sp_grad_plan_end(&p, n);   /* read for the last time */
    }
    sp_grad_plan_finish(&p);   /* the arena's bytes again (the next step's) */
}

sp_engine *sp_engine_linear_create(const sp_engine_opts *opts)
{
    sp_engine *e = sp_xcalloc(1, sizeof *e);
    e->name = "linear";
    e->opts = *opts;
    e->backward = linear_backward;
    return e;
}

/* No options of its own; "reverse" (this file's name) is another name for it. Updates in
 * its walk with opts.update (SP_ENGINE_LAYER_UPDATES, SP_ENGINE_STEP_GRADS). */
const sp_engine_def sp_engine_def_linear = {
    .name = "linear",
    .alias = "reverse",
    .caps = SP_ENGINE_DEVICE | SP_ENGINE_OVER_INPUTS | SP_ENGINE_BLOCKED | SP_ENGINE_LAYER_UPDATES | SP_ENGINE_STEP_GRADS,
    .create = sp_engine_linear_create,
};
