/* linear.c — classic back-propagation: walk the tape in reverse, Θ(n) sequential steps.
 *
 * The tape order is topological, so in reverse every node has its ∂l/∂y complete (all
 * its consumers have added their δ) when it is reached. It computes its weight gradient
 * G (backward_params) and the gradient δ_i of each input i (backward_input), written
 * into a producer read once, added into one that fans out. Everything else in scanprop
 * is checked against it. */
#include <stdlib.h>
#include "core/device.h"
#include "core/error.h"
#include "schedulers/backward/engines.h"

void sp_node_backward_inputs(sp_node *n)
{
    for (int k = 0; k < n->ninputs; k++) {
        sp_node *in = n->inputs[k];
        if (!in->needs_grad) continue;
        if (in->nconsumers == 1) {   /* the common chain case: write δ in place */
            n->kern->backward_input(n, k, &n->grad, &in->grad);
            continue;
        }
        sp_tensor tmp = sp_tape_tensor_like(n->tape, &in->out);   /* fan-out: accumulate */
        n->kern->backward_input(n, k, &n->grad, &tmp);
        sp_accumulate(&in->grad, &tmp);   /* on the tensors' device */
    }
}

void sp_node_backward(sp_node *n)
{
    bool params = n->kern->backward_params && n->layer->nparams > 0;
    sp_node *in = n->input;
    if (params && n->kern->backward_input_params && n->ninputs == 1 && in->needs_grad) {
        if (in->nconsumers == 1) {   /* δ and G from one pass over dy (batch norm's sums) */
            n->kern->backward_input_params(n, &n->grad, &in->grad);
            return;
        }
        sp_tensor tmp = sp_tape_tensor_like(n->tape, &in->out);
        n->kern->backward_input_params(n, &n->grad, &tmp);
        sp_accumulate(&in->grad, &tmp);
        return;
    }
    if (params) n->kern->backward_params(n, &n->grad);
    sp_node_backward_inputs(n);
}

static void linear_backward(sp_engine *e, sp_tape *t, sp_node *loss)
{
    sp_mark_needs_grad(t);
    sp_alloc_grads(t, loss);
    for (int i = loss->index; i >= 0; i--) {
        sp_node *n = t->nodes[i];
        if (!n->op || !(n->needs_grad || n == loss)) continue;
        /* a node's backward scratch (im2col columns, partial G, fan-out δ) is dead once
         * it returns: the next node reuses it (the δ buffers were allocated above) */
        sp_arena_mark m = sp_arena_mark_get(&t->arena);
        sp_node_backward(n);
        sp_arena_release(&t->arena, m);
    }
}

sp_engine *sp_engine_linear_create(const sp_engine_opts *opts)
{
    sp_engine *e = sp_xcalloc(1, sizeof *e);
    e->name = "linear";
    e->opts = *opts;
    e->backward = linear_backward;
    return e;
}
