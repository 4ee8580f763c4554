/* memory.c — what a node holds and the whole memory (memory.h). */
#include <string.h>
#include "core/error.h"
#include "core/model.h"
#include "schedulers/memory/memory.h"

/* ---- what a node holds ------------------------------------------------------------- */

size_t sp_node_out_bytes(const sp_node *n) { return n->out.numel * sizeof(float); }

double sp_node_saved_bytes(const sp_node *n) { return n->op && n->op->cost ? n->op->cost(n).saved_bytes : 0; }

/* The stage keeps its input x_s (and whatever its op saved) until its backward. */
double sp_node_act_bytes(const sp_node *n)
{
    double saved = sp_node_saved_bytes(n);
    return 4.0 * (double)n->input->out.numel + saved;
}

double sp_tape_segment_act_bytes(const sp_tape *t, int first, int end)
{
    if (!t) sp_fail("sp_tape_segment_act_bytes: argument 't' is NULL");
    if (first < 1 || end > t->n || first >= end)
        sp_fail("sp_tape_segment_act_bytes: nodes [%d, %d) of a tape of %d (expected 1 <= first < end <= n)", first,
                end, t->n);
    double bytes = 0;
    for (int i = first; i < end; i++) {
        const sp_node *n = t->nodes[i];
        if (!n->op) continue;
        bytes += sp_node_act_bytes(n);
        for (int j = first; j < i; j++)   /* x already kept by an earlier node of the segment */
            if (t->nodes[j]->op && t->nodes[j]->input == n->input) {
                bytes -= 4.0 * (double)n->input->out.numel;
                break;
            }
    }
    return bytes;
}

/* ---- δ ----------------------------------------------------------------------------------- */

bool sp_grad_has(const sp_node *n, const sp_node *loss) { return n->op && (n->needs_grad || n == loss); }

size_t sp_grad_bytes(const sp_node *n)
{
    return (sp_node_out_bytes(n) + SP_GRAD_ALIGN - 1) & ~(size_t)(SP_GRAD_ALIGN - 1);
}

/* ---- the whole memory ------------------------------------------------------------------ */

void sp_mem_add_params(sp_mem_breakdown *m, double p, int optim_slots, bool owns, bool grads)
{
    if (owns) m->weights += p, m->optim += optim_slots * p;
    if (grads) m->grads += p;
}

void sp_mem_total(sp_mem_breakdown *m) { m->total = m->weights + m->grads + m->optim + m->buckets + m->activations; }

void sp_mem_model(const struct sp_model *m, sp_mem_breakdown *out)
{
    if (!m) sp_fail("sp_mem_model: argument 'm' is NULL");
    if (!out) sp_fail("sp_mem_model: argument 'out' is NULL");
    size_t values = 0, grads = 0;
    for (int i = 0; i < sp_model_nstate(m); i++) values += sp_model_state(m, i)->value.numel;
    for (int i = 0; i < m->nparams; i++) grads += m->params[i]->grad.data ? m->params[i]->grad.numel : 0;
    *out = (sp_mem_breakdown){.weights = (double)values * sizeof(float), .grads = (double)grads * sizeof(float)};
    sp_mem_total(out);
}

int sp_optim_slots(const char *name, double momentum)
{
    if (!strcmp(name, "sgd")) return momentum != 0 ? 1 : 0;
    if (!strcmp(name, "adam") || !strcmp(name, "adamw")) return 2;
    return -1;
}
