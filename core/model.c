/* model.c — ordered layers + parameter registry with PyTorch names. */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include "core/model.h"
#include "core/backend.h"
#include "core/error.h"
#include "layers/layers.h"

sp_model *sp_model_new(const char *name)
{
    sp_model *m = sp_xcalloc(1, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name);
    m->loss = sp_softmax_ce();
    return m;
}

void sp_model_free(sp_model *m)
{
    if (!m) return;
    for (int i = 0; i < m->nlayers; i++) sp_layer_free(m->layers[i]);
    sp_layer_free(m->loss);
    free(m->layers);
    free(m->params);
    free(m);
}

sp_layer *sp_model_add(sp_model *m, sp_layer *l)
{
    for (int i = 0; i < l->nparams; i++)
        if (sp_model_param(m, l->params[i]->name))
            sp_fail("model '%s': duplicate parameter name '%s'", m->name, l->params[i]->name);
    if (m->nlayers == m->cap_layers) {
        m->cap_layers = m->cap_layers ? 2 * m->cap_layers : 16;
        m->layers = sp_xrealloc(m->layers, (size_t)m->cap_layers * sizeof *m->layers);
    }
    m->layers[m->nlayers++] = l;
    for (int i = 0; i < l->nparams; i++) {
        if (m->nparams == m->cap_params) {
            m->cap_params = m->cap_params ? 2 * m->cap_params : 16;
            m->params = sp_xrealloc(m->params, (size_t)m->cap_params * sizeof *m->params);
        }
        m->params[m->nparams++] = l->params[i];
    }
    return l;
}

void sp_model_init(sp_model *m, uint64_t seed)
{
    sp_rng r;
    sp_rng_seed(&r, seed);
    if (m->init) {
        m->init(m, &r);
        return;
    }
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i]->op->init_params) m->layers[i]->op->init_params(m->layers[i], &r);
}

sp_node *sp_model_forward(sp_model *m, sp_tape *t, sp_node *x)
{
    for (int i = 0; i < m->nlayers; i++) x = sp_apply(t, m->layers[i], x);
    return x;
}

sp_node *sp_model_loss(sp_model *m, sp_tape *t, const sp_tensor *x, const int *labels)
{
    sp_node *logits = sp_model_forward(m, t, sp_tape_input(t, x));
    return sp_apply_loss(t, m->loss, logits, labels);
}

sp_param *sp_model_param(const sp_model *m, const char *name)
{
    for (int i = 0; i < m->nparams; i++)
        if (strcmp(m->params[i]->name, name) == 0) return m->params[i];
    return NULL;
}

void sp_model_zero_grad(sp_model *m)
{
    for (int i = 0; i < m->nparams; i++) sp_zero(&m->params[i]->grad);
}

size_t sp_model_numel(const sp_model *m)
{
    size_t n = 0;
    for (int i = 0; i < m->nparams; i++) n += m->params[i]->value.numel;
    return n;
}
