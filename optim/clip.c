/* clip.c — gradient-norm clipping (torch.nn.utils.clip_grad_norm_) and the undo of an
 * optimizer step (optim.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/device.h"
#include "core/error.h"
#include "optim/optim.h"
#include "core/guard.h"

double sp_grad_sq_norm(sp_param *const *params, int n)
{
    SP_GUARD(NAN);
    if (n < 0) sp_fail("sp_grad_sq_norm: argument 'n' is %d", n);
    if (!params && n) sp_fail("sp_grad_sq_norm: argument 'params' is NULL");
    double sum = 0;
    for (int i = 0; i < n; i++) {
        const sp_tensor *g = &params[i]->grad;
        double s = 0;
        for (size_t k = 0; k < g->numel; k++) s += (double)g->data[k] * g->data[k];
        /* torch: the norm of the stack of per-tensor norms, each a float32 */
        float norm = (float)sqrt(s);
        sum += (double)norm * norm;
    }
    return sum;
}

float sp_clip_coef(double total_norm, double max_norm)
{
    float coef = (float)max_norm / ((float)total_norm + 1e-6f);   /* float32 tensors, as torch */
    return coef < 1.0f ? coef : isnan(coef) ? coef : 1.0f;
}

int sp_grad_scale(sp_param *const *params, int n, float coef)
{
    SP_GUARD(SP_ERR);
    if (n < 0) sp_fail("sp_grad_scale: argument 'n' is %d", n);
    if (!params && n) sp_fail("sp_grad_scale: argument 'params' is NULL");
    for (int i = 0; i < n; i++) {
        sp_tensor *g = &params[i]->grad;
        for (size_t k = 0; k < g->numel; k++) g->data[k] *= coef;
    }
    return SP_OK;
}

double sp_clip_grad_norm(sp_param *const *params, int n, double max_norm)
{
    SP_GUARD(NAN);
    if (n < 0) sp_fail("sp_clip_grad_norm: argument 'n' is %d", n);
    if (!params && n) sp_fail("sp_clip_grad_norm: argument 'params' is NULL");
    double norm = (float)sqrt(sp_grad_sq_norm(params, n));
    float coef = sp_clip_coef(norm, max_norm);
    if (!(coef >= 1.0f)) sp_grad_scale(params, n, coef);
    return norm;
}

int sp_optim_set_clip_grad_norm(sp_optim *o, double max_norm)
{
    SP_GUARD(SP_ERR);
    if (!o) sp_fail("sp_optim_set_clip_grad_norm: argument 'o' is NULL");
    if (!(max_norm >= 0) || !isfinite(max_norm))
        sp_fail("optim %s: --clip-grad-norm %g (expected a finite value >= 0; 0 = off)", o->name, max_norm);
    if (max_norm > 0 && o->device != SP_CPU)
        sp_fail("optim %s: --clip-grad-norm on %s (the clip reads the gradients on the cpu)", o->name,
                sp_device_name(o->device));
    o->clip = max_norm;
    return SP_OK;
}

double sp_optim_last_grad_norm(const sp_optim *o)
{
    SP_GUARD(NAN);
    if (!o) sp_fail("sp_optim_last_grad_norm: argument 'o' is NULL");
    return o->last_norm;
}

/* ---- the undo of a step ---------------------------------------------------------------- */

static int index_of(const sp_optim *o, const sp_param *p)
{
    for (int i = 0; i < o->nparams; i++)
        if (o->params[i] == p) return i;
    sp_fail("optim %s: undo of parameter '%s', which this optimizer does not manage", o->name, p->name);
}

static int nstate(const sp_optim *o) { return o->state[1] ? 2 : o->state[0] ? 1 : 0; }

int sp_optim_undo_save(sp_optim_undo *u, sp_optim *o, sp_param *const *params, int k)
{
    SP_GUARD(SP_ERR);
    if (!u) sp_fail("sp_optim_undo_save: argument 'u' is NULL");
    if (!o) sp_fail("sp_optim_undo_save: argument 'o' is NULL");
    if (k < 0) sp_fail("sp_optim_undo_save: argument 'k' is %d", k);
    if (!params && k) sp_fail("sp_optim_undo_save: argument 'params' is NULL");
    if (o->device != SP_CPU) sp_fail("optim %s: the undo of a step needs cpu parameters", o->name);
    u->o = o;
    size_t need = u->used;
    for (int j = 0; j < k; j++) need += params[j]->value.numel * (size_t)(1 + nstate(o));
    if (need > u->cap) {
        u->cap = need + need / 2;
        u->buf = sp_xrealloc(u->buf, u->cap * sizeof *u->buf);
    }
    if (u->n + k > u->cap_idx) {
        u->cap_idx = 2 * (u->n + k);
        u->idx = sp_xrealloc(u->idx, (size_t)u->cap_idx * sizeof *u->idx);
        u->steps = sp_xrealloc(u->steps, (size_t)u->cap_idx * sizeof *u->steps);
    }
    for (int j = 0; j < k; j++) {
        int i = index_of(o, params[j]);
        size_t n = params[j]->value.numel;
        u->idx[u->n] = i;
        u->steps[u->n++] = o->steps[i];
        memcpy(u->buf + u->used, params[j]->value.data, n * sizeof(float));
        u->used += n;
        for (int s = 0; s < nstate(o); s++, u->used += n) memcpy(u->buf + u->used, o->state[s] + o->offset[i], n * sizeof(float));
    }
    return SP_OK;
}

int sp_optim_undo_restore(sp_optim_undo *u)
{
    SP_GUARD(SP_ERR);
    if (!u) sp_fail("sp_optim_undo_restore: argument 'u' is NULL");
    const sp_optim *o = u->o;
    size_t at = 0;
    for (int j = 0; j < u->n; j++) {
        int i = u->idx[j];
        size_t n = o->params[i]->value.numel;
        o->steps[i] = u->steps[j];
        memcpy(o->params[i]->value.data, u->buf + at, n * sizeof(float));
        at += n;
        for (int s = 0; s < nstate(o); s++, at += n) memcpy(o->state[s] + o->offset[i], u->buf + at, n * sizeof(float));
    }
    return SP_OK;
}

void sp_optim_undo_clear(sp_optim_undo *u)
{
    if (!u) return;
    u->n = 0;
    u->used = 0;
}

void sp_optim_undo_free(sp_optim_undo *u)
{
    if (!u) return;
    free(u->buf);
    free(u->idx);
    free(u->steps);
    *u = (sp_optim_undo){0};
}
