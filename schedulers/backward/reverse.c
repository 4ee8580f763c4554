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
 * one node's scratch. */
#include <stdlib.h>
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

void sp_node_backward(sp_node *n)
{
    bool params = n->kern->backward_params && n->layer->nparams > 0;
    sp_node *in = n->input;
    if (params && n->kern->backward_input_params && n->ninputs == 1 && in->needs_grad) {
        /* δ and G from one pass over dy (batch norm's sums, conv2d's blocked dy); into a
         * producer that fans out, added */
        n->kern->backward_input_params(n, &n->grad, &in->grad, in->nconsumers > 1);
        return;
    }
    if (params) n->kern->backward_params(n, &n->grad);
    sp_node_backward_inputs(n);
}

static void linear_backward(sp_engine *e, sp_tape *t, sp_node *loss)
{
    sp_mark_needs_grad(t);
    sp_grad_plan p;
    sp_grad_plan_make(&p, t, loss);   /* every δ placed by its lifetime (schedulers/memory/) */
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
        sp_arena_mark m = sp_arena_mark_get(&t->arena);
        sp_node_backward(n);
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

/* No options of its own; "reverse" (this file's name) is another name for it. */
const sp_engine_def sp_engine_def_linear = {
    .name = "linear",
    .alias = "reverse",
    .caps = SP_ENGINE_DEVICE | SP_ENGINE_OVER_INPUTS | SP_ENGINE_BLOCKED,
    .create = sp_engine_linear_create,
};
