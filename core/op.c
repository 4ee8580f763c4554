/* op.c — parameters and layer lifetime, shared by every op. */
#include <stdio.h>
#include <stdlib.h>
#include "core/op.h"
#include "core/error.h"

/* A parameter (grad too) or a buffer of owner, named "<layer>.<suffix>"; NULL after
 * sp_refuse, having allocated nothing. */
static sp_param *param_new(const char *what, sp_layer *owner, const char *suffix, int ndim, const int *shape,
                           bool grad)
{
    if (ndim < 0) return sp_shape_check(what, ndim, shape, NULL), NULL;   /* named first */
    if (!owner) return sp_refuse("%s: argument 'owner' is NULL", what), NULL;
    if (!suffix) return sp_refuse("%s: argument 'suffix' is NULL", what), NULL;
    if (sp_shape_check(what, ndim, shape, NULL) != SP_OK) return NULL;
    if ((grad ? owner->nparams : owner->nbuffers) >= SP_MAX_PARAMS)
        return sp_refuse("layer '%s': too many %s (at most %d)", owner->name, grad ? "parameters" : "buffers",
                         SP_MAX_PARAMS), NULL;
    sp_param *p = calloc(1, sizeof *p);
    if (!p) return sp_refuse("%s: out of memory", what), NULL;
    snprintf(p->name, sizeof p->name, "%s.%s", owner->name, suffix);
    p->value = sp_tensor_new(ndim, shape);
    if (grad && p->value.data) p->grad = sp_tensor_new(ndim, shape);
    if (!p->value.data || (grad && !p->grad.data)) {   /* out of memory (sp_tensor_new refused) */
        sp_tensor_free(&p->value);
        free(p);
        return NULL;
    }
    p->owner = owner;
    if (grad) owner->params[owner->nparams++] = p;
    else owner->buffers[owner->nbuffers++] = p;
    return p;
}

sp_param *sp_param_new(sp_layer *owner, const char *suffix, int ndim, const int *shape)
{
    return param_new("sp_param_new", owner, suffix, ndim, shape, true);
}

sp_param *sp_buffer_new(sp_layer *owner, const char *suffix, int ndim, const int *shape)
{
    return param_new("sp_buffer_new", owner, suffix, ndim, shape, false);
}

void sp_layer_free(sp_layer *l)
{
    if (!l) return;
    for (int i = 0; i < l->nbuffers; i++) {
        sp_tensor_free(&l->buffers[i]->value);
        free(l->buffers[i]);
    }
    for (int i = 0; i < l->nparams; i++) {
        sp_tensor_free(&l->params[i]->value);
        if (l->params[i]->grad_in_step) l->params[i]->grad.data = NULL;   /* the step arena's, or none */
        else sp_tensor_free(&l->params[i]->grad);
        free(l->params[i]);
    }
    if (l->op->free_layer) l->op->free_layer(l);
    free(l);
}

int sp_fill_uniform(sp_tensor *t, sp_rng *r, float bound)
{
    if (!t) return sp_refuse("sp_fill_uniform: argument 't' is NULL");
    if (!r) return sp_refuse("sp_fill_uniform: argument 'r' is NULL");
    if (t->numel && !t->data) return sp_refuse("sp_fill_uniform: argument 't' has no data (a shape-only view)");
    for (size_t i = 0; i < t->numel; i++) t->data[i] = sp_rng_uniform_range(r, -bound, bound);
    return SP_OK;
}
