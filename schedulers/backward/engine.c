/* engine.c — the registry of backward engines and the helpers they share. */
#include <stdlib.h>
#include <string.h>
#include "core/device.h"
#include "schedulers/backward/engine.h"
#include "core/error.h"
#include "schedulers/backward/engines.h"

typedef struct engine_entry {
    const char *name;
    sp_engine *(*create)(const sp_engine_opts *opts);
} engine_entry;

static const engine_entry ENGINES[] = {
    {"linear", sp_engine_linear_create},
    {"bppsa", sp_engine_bppsa_create},
    {"ooo", sp_engine_ooo_create},
};
#define NENGINES (sizeof ENGINES / sizeof ENGINES[0])

const char *sp_engine_names(void)
{
    static char buf[128];
    buf[0] = 0;
    for (size_t i = 0; i < NENGINES; i++) {
        if (i) strcat(buf, "|");
        strcat(buf, ENGINES[i].name);
    }
    return buf;
}

sp_engine *sp_engine_create(const char *name, const sp_engine_opts *opts)
{
    sp_engine_opts defaults = {.scan_levels = -1, .order = "ooo"};
    for (size_t i = 0; i < NENGINES; i++)
        if (strcmp(name, ENGINES[i].name) == 0) return ENGINES[i].create(opts ? opts : &defaults);
    sp_fail("--backward %s: unknown engine (expected one of %s)", name, sp_engine_names());
}

void sp_engine_destroy(sp_engine *e)
{
    if (!e) return;
    if (e->destroy) e->destroy(e);
    free(e);
}

void sp_backward(sp_engine *e, sp_tape *t, sp_node *loss) { e->backward(e, t, loss); }

void sp_mark_needs_grad(sp_tape *t)
{
    for (int i = 0; i < t->n; i++) {
        sp_node *n = t->nodes[i];
        n->needs_grad = n->op && n->layer && n->layer->nparams > 0;
        for (int k = 0; n->op && k < n->ninputs; k++) n->needs_grad |= n->inputs[k]->needs_grad;
    }
}

void sp_alloc_grads(sp_tape *t, sp_node *loss)
{
    /* A node read once (one input slot of one op), which the backward runs (at or before the loss),
     * gets ∂l/∂y overwritten by that op's δ (backward_input's contract): no zeroing.
     * A fan-out accumulates into it, and an output nobody back-propagates keeps 0. */
    int *uses = sp_tape_alloc(t, (size_t)(loss->index + 1) * sizeof *uses);
    memset(uses, 0, (size_t)(loss->index + 1) * sizeof *uses);
    for (int i = 0; i <= loss->index; i++)
        for (int k = 0; k < t->nodes[i]->ninputs; k++) uses[t->nodes[i]->inputs[k]->index]++;
    for (int i = 0; i <= loss->index; i++) {
        sp_node *n = t->nodes[i];
        if (n->needs_grad || n == loss) {
            n->grad = sp_tape_tensor_like(t, &n->out);
            if (n == loss || n->nconsumers != 1 || uses[i] != 1) sp_zero(&n->grad);
        } else {
            n->grad.data = NULL;
        }
    }
    sp_tensor seed = sp_tensor_view(loss->grad.data, 1, (int[]){1});   /* ∂l/∂l, first entry */
    seed.device = loss->grad.device;
    sp_fill(&seed, 1.0f);
}
