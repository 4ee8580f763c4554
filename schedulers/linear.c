/* linear.c — classic back-propagation: walk the tape in reverse, Θ(n) sequential steps.
 *
 * Each node with ∂l/∂y in hand computes its weight gradient G (backward_params) and its
 * input gradient δ (backward_input). Everything else in scanprop is checked against it. */
#include <stdlib.h>
#include "core/error.h"
#include "schedulers/engines.h"

void sp_node_backward(sp_node *n)
{
    if (n->op->backward_params && n->layer->nparams > 0) n->op->backward_params(n, &n->grad);
    sp_node *in = n->input;
    if (!in || !in->needs_grad) return;
    if (in->nconsumers == 1) {   /* the common chain case: write δ in place */
        n->op->backward_input(n, &n->grad, &in->grad);
        return;
    }
    sp_tensor tmp = sp_tape_tensor_like(n->tape, &in->out);   /* fan-out: accumulate */
    n->op->backward_input(n, &n->grad, &tmp);
    for (size_t i = 0; i < tmp.numel; i++) in->grad.data[i] += tmp.data[i];
}

static void linear_backward(sp_engine *e, sp_tape *t, sp_node *loss)
{
    sp_mark_needs_grad(t);
    sp_alloc_grads(t, loss);
    for (int i = loss->index; i >= 0; i--) {
        sp_node *n = t->nodes[i];
        if (n->op && (n->needs_grad || n == loss)) sp_node_backward(n);
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
