/* op.c — parameters and layer lifetime, shared by every op. */
#include <stdio.h>
#include <stdlib.h>
#include "core/op.h"
#include "core/error.h"

sp_param *sp_param_new(sp_layer *owner, const char *suffix, int ndim, const int *shape)
{
    if (ndim < 0) sp_fail("sp_param_new: argument 'ndim' is %d (expected >= 0)", ndim);
    if (!owner) sp_fail("sp_param_new: argument 'owner' is NULL");
    if (!suffix) sp_fail("sp_param_new: argument 'suffix' is NULL");
    if (ndim > 0 && !shape) sp_fail("sp_param_new: argument 'shape' is NULL");
    if (owner->nparams >= SP_MAX_PARAMS) sp_fail("layer '%s': too many parameters", owner->name);
    sp_param *p = sp_xcalloc(1, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s.%s", owner->name, suffix);
    p->value = sp_tensor_new(ndim, shape);
    p->grad = sp_tensor_new(ndim, shape);
    p->owner = owner;
    owner->params[owner->nparams++] = p;
    return p;
}

sp_param *sp_buffer_new(sp_layer *owner, const char *suffix, int ndim, const int *shape)
{
    if (ndim < 0) sp_fail("sp_buffer_new: argument 'ndim' is %d (expected >= 0)", ndim);
    if (!owner) sp_fail("sp_buffer_new: argument 'owner' is NULL");
    if (!suffix) sp_fail("sp_buffer_new: argument 'suffix' is NULL");
    if (ndim > 0 && !shape) sp_fail("sp_buffer_new: argument 'shape' is NULL");
    if (owner->nbuffers >= SP_MAX_PARAMS) sp_fail("layer '%s': too many buffers", owner->name);
    sp_param *p = sp_xcalloc(1, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s.%s", owner->name, suffix);
    p->value = sp_tensor_new(ndim, shape);
    p->owner = owner;
    owner->buffers[owner->nbuffers++] = p;
    return p;
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
        sp_tensor_free(&l->params[i]->grad);
        free(l->params[i]);
    }
    if (l->op->free_layer) l->op->free_layer(l);
    free(l);
}

void sp_fill_uniform(sp_tensor *t, sp_rng *r, float bound)
{
    if (!t) sp_fail("sp_fill_uniform: argument 't' is NULL");
    if (!r) sp_fail("sp_fill_uniform: argument 'r' is NULL");
    for (size_t i = 0; i < t->numel; i++) t->data[i] = sp_rng_uniform_range(r, -bound, bound);
}
