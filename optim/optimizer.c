/* optimizer.c — what every optimizer shares: construction and validation of the
 * parameter list, the per-parameter state block, step / step_params / zero_grad, and
 * the by-name constructor the apps use. The update rules live in sgd.c and adam.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/device.h"
#include "core/error.h"
#include "core/threads.h"
#include "optim/optim.h"
#include "core/guard.h"

/* Below this many elements a tensor is updated inline: waking the pool costs more. */
#define OPTIM_PAR_MIN 32768

sp_optim *sp_optim_alloc(const char *name, sp_param **params, int n, int nstate,
                         sp_optim_update_fn update)
{
    SP_GUARD(NULL);
    if (n < 0) sp_fail("sp_optim_alloc: argument 'n' is %d (expected >= 0)", n);
    if (nstate < 0) sp_fail("sp_optim_alloc: argument 'nstate' is %d (expected >= 0)", nstate);
    if (!name) sp_fail("sp_optim_alloc: argument 'name' is NULL");
    if (!update) sp_fail("sp_optim_alloc: argument 'update' is NULL");
    if (n <= 0 || !params) sp_fail("optim %s: empty parameter list (expected at least one parameter)", name);
    sp_device dev = params[0] ? params[0]->value.device : SP_CPU;
    for (int i = 0; i < n; i++) {
        const sp_param *p = params[i];
        if (!p) sp_fail("optim %s: parameter %d is NULL", name, i);
        if (p->value.device != dev || p->grad.device != dev)
            sp_fail("optim %s: parameter '%s' is on %s (expected %s tensors, as the first parameter)", name, p->name,
                    sp_device_name(p->value.device != dev ? p->value.device : p->grad.device), sp_device_name(dev));
        if (dev != SP_CPU && p->mask)
            sp_fail("optim %s: parameter '%s' is pruned and on %s (expected pruned parameters on the cpu)", name,
                    p->name, sp_device_name(dev));
        if (p->grad.numel != p->value.numel || (!p->grad.data && !p->grad_in_step))
            sp_fail("optim %s: parameter '%s' has no gradient of its shape", name, p->name);
        /* PyTorch warns and would update a repeated parameter twice per step. */
        for (int j = 0; j < i; j++)
            if (params[j] == p) sp_fail("optim %s: parameter '%s' appears twice (expected each once)", name, p->name);
    }
    sp_optim *o = sp_xcalloc(1, sizeof *o);
    o->name = name;
    o->nparams = n;
    o->params = sp_xmalloc((size_t)n * sizeof *o->params);
    memcpy(o->params, params, (size_t)n * sizeof *o->params);
    o->steps = sp_xcalloc((size_t)n, sizeof *o->steps);
    o->zeroed = sp_xcalloc((size_t)n, sizeof *o->zeroed);
    o->stepped = sp_xcalloc((size_t)n, sizeof *o->stepped);
    o->offset = sp_xmalloc((size_t)n * sizeof *o->offset);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        o->offset[i] = total;
        total += params[i]->value.numel;
    }
    o->device = dev;
    for (int s = 0; s < nstate; s++) {
        if (dev == SP_CPU) {
            o->state[s] = sp_xcalloc(total, sizeof(float));
            continue;
        }
        sp_optim_device(dev);   /* fails now, not at the first step, without device updates */
        const sp_device_allocator *a = sp_backend_allocator(dev);
        o->state[s] = a->alloc(total * sizeof(float));
        a->fill(o->state[s], total, 0.0f);
    }
    o->update = update;
    return o;
}

/* Elements per block of an update that zeroes its gradient: 16 KiB of each stream, so
 * the block's gradient is still in L1/L2 when it is zeroed. */
#define ZERO_BLOCK 4096

typedef struct zero_job {
    void (*fn)(void *ctx, size_t begin, size_t end);
    void *ctx;
    float *g;
} zero_job;

static void zero_range(void *vctx, size_t begin, size_t end)
{
    const zero_job *J = vctx;
    for (size_t b = begin; b < end; b += ZERO_BLOCK) {
        size_t e = end - b > ZERO_BLOCK ? b + ZERO_BLOCK : end;
        J->fn(J->ctx, b, e);
        memset(J->g + b, 0, (e - b) * sizeof(float));
    }
}

/* The gradient the update running on this thread zeroes (update_one), or NULL: two ooo
 * lanes may update two layers at once. */
static _Thread_local float *t_zero_g;

int sp_optim_for(size_t numel, void (*fn)(void *ctx, size_t begin, size_t end), void *ctx)
{
    if (!fn) return sp_error("sp_optim_for: argument 'fn' is NULL");
    zero_job J = {fn, ctx, t_zero_g};
    if (t_zero_g) fn = zero_range, ctx = &J;
    if (numel < OPTIM_PAR_MIN) fn(ctx, 0, numel);
    else sp_parallel_for(numel, fn, ctx);
    return SP_OK;
}

/* One parameter's update; a pruned parameter (mask set) gets its pruned entries' gradient
 * zeroed before (no momentum or Adam state builds up for them) and its value after. */
static void update_one(sp_optim *o, int i)
{
    sp_param *p = o->params[i];
    const float *mk = p->mask;
    if (!p->grad.data)
        sp_fail("optim %s: parameter '%s' has no gradient now (it lives in the training step's backward: "
                "sp_model_step_grads)", o->name, p->name);
    bool zero = o->zero_in_step && o->device == SP_CPU && !p->grad_in_step;   /* step grads: the arena's */
    if (mk)
        for (size_t j = 0; j < p->grad.numel; j++) p->grad.data[j] *= mk[j];
    t_zero_g = zero ? p->grad.data : NULL;
    o->update(o, i);
    t_zero_g = NULL;
    if (zero) o->zeroed[i] = true;
    o->stepped[i] = true;
    if (mk)
        for (size_t j = 0; j < p->value.numel; j++) p->value.data[j] *= mk[j];
}

int sp_optim_step(sp_optim *o)
{
    SP_GUARD(SP_ERR);
    if (!o) sp_fail("sp_optim_step: argument 'o' is NULL");
    if (o->clip > 0) o->last_norm = sp_clip_grad_norm(o->params, o->nparams, o->clip);
    for (int i = 0; i < o->nparams; i++) update_one(o, i);
    return SP_OK;
}

static int param_index(const sp_optim *o, const sp_param *p)
{
    for (int i = 0; i < o->nparams; i++)
        if (o->params[i] == p) return i;
    sp_fail("optim %s: step_params got parameter '%s', which this optimizer does not manage",
            o->name, p ? p->name : "(null)");
}

int sp_optim_step_params(sp_optim *o, sp_param **params, int k)
{
    SP_GUARD(SP_ERR);
    if (k < 0) sp_fail("sp_optim_step_params: argument 'k' is %d (expected >= 0)", k);
    if (!o) sp_fail("sp_optim_step_params: argument 'o' is NULL");
    if (k > 0 && !params) sp_fail("sp_optim_step_params: argument 'params' is NULL");
    for (int j = 0; j < k; j++) param_index(o, params[j]);   /* every one checked before any update */
    for (int j = 0; j < k; j++) update_one(o, param_index(o, params[j]));
    return SP_OK;
}

int sp_optim_step_rest(sp_optim *o)
{
    SP_GUARD(SP_ERR);
    if (!o) sp_fail("sp_optim_step_rest: argument 'o' is NULL");
    if (o->clip > 0) sp_fail("sp_optim_step_rest: a clipped optimizer (its clip needs the whole gradient first)");
    for (int i = 0; i < o->nparams; i++) {
        if (o->stepped[i]) continue;
        sp_param *p = o->params[i];
        if (p->grad.data || o->device != SP_CPU) {
            update_one(o, i);
            continue;
        }
        p->grad.data = sp_xcalloc(p->grad.numel ? p->grad.numel : 1, sizeof(float));   /* none reached it: zero */
        update_one(o, i);
        free(p->grad.data);
        p->grad.data = NULL;
    }
    return SP_OK;
}

int sp_optim_zero_grad(sp_optim *o)
{
    SP_GUARD(SP_ERR);
    if (!o) sp_fail("sp_optim_zero_grad: argument 'o' is NULL");
    for (int i = 0; i < o->nparams; i++) {
        if (!o->zeroed[i] && !o->params[i]->grad_in_step) sp_zero(&o->params[i]->grad);
        o->zeroed[i] = false;
        o->stepped[i] = false;
    }
    return SP_OK;
}

int sp_optim_set_zero_in_step(sp_optim *o, bool on)
{
    SP_GUARD(SP_ERR);
    if (!o) sp_fail("sp_optim_set_zero_in_step: argument 'o' is NULL");
    o->zero_in_step = on;
    if (!on)
        for (int i = 0; i < o->nparams; i++) o->zeroed[i] = false;
    return SP_OK;
}

int sp_optim_set_lr(sp_optim *o, double lr)
{
    SP_GUARD(SP_ERR);
    if (!o) sp_fail("sp_optim_set_lr: argument 'o' is NULL");
    if (!(lr >= 0)) sp_fail("optim %s: learning rate %g (expected >= 0)", o->name, lr);
    o->lr = lr;
    return SP_OK;
}

double sp_optim_get_lr(const sp_optim *o)
{
    SP_GUARD(NAN);
    if (!o) sp_fail("sp_optim_get_lr: argument 'o' is NULL");
    return o->lr;
}

int sp_optim_device_scalars(sp_optim *o, bool on)
{
    SP_GUARD(SP_ERR);
    if (!o) sp_fail("sp_optim_device_scalars: argument 'o' is NULL");
    if (on == (o->sc_handle != NULL)) return SP_OK;
    if (o->device == SP_CPU) sp_fail("optim %s: device scalars need parameters on a device (they are on the cpu)", o->name);
    const sp_optim_device_ops *d = sp_optim_device(o->device);
    if (on) {
        if (!o->scalars || !d->scalars_new) sp_fail("optim %s: no device scalars on %s", o->name, sp_device_name(o->device));
        o->sc_handle = d->scalars_new(o->nparams, &o->sc_dev);
        o->sc_host = sp_xcalloc((size_t)o->nparams, sizeof *o->sc_host);
        return SP_OK;
    }
    d->scalars_free(o->sc_handle);
    free(o->sc_host);
    o->sc_handle = NULL;
    o->sc_host = NULL;
    o->sc_dev = NULL;
    return SP_OK;
}

int sp_optim_stage_scalars(sp_optim *o)
{
    SP_GUARD(SP_ERR);
    if (!o) sp_fail("sp_optim_stage_scalars: argument 'o' is NULL");
    if (!o->sc_handle) sp_fail("optim %s: sp_optim_stage_scalars without device scalars (sp_optim_device_scalars)", o->name);
    for (int i = 0; i < o->nparams; i++) o->scalars(o, i, &o->sc_host[i]);
    sp_optim_device(o->device)->scalars_upload(o->sc_handle, o->sc_host, o->nparams);
    return SP_OK;
}

const char *sp_optim_name(const sp_optim *o)
{
    SP_GUARD(NULL);
    if (!o) sp_fail("sp_optim_name: argument 'o' is NULL");
    return o->name;
}

void sp_optim_free(sp_optim *o)
{
    if (!o) return;
    if (o->sc_handle) sp_optim_device_scalars(o, false);
    for (int s = 0; s < 2; s++) {
        if (o->device == SP_CPU) free(o->state[s]);
        else if (o->state[s]) sp_backend_allocator(o->device)->free(o->state[s]);
    }
    free(o->offset);
    free(o->steps);
    free(o->zeroed);
    free(o->stepped);
    free(o->params);
    free(o);
}

static const sp_optim_device_ops *device_ops[SP_NDEVICES];

int sp_optim_register_device(sp_device dev, const sp_optim_device_ops *ops)
{
    SP_GUARD(SP_ERR);
    if (!ops) sp_fail("sp_optim_register_device: argument 'ops' is NULL");
    device_ops[dev] = ops;
    return SP_OK;
}

const sp_optim_device_ops *sp_optim_device(sp_device dev)
{
    SP_GUARD(NULL);
    if (dev == SP_CPU || !device_ops[dev])
        sp_fail("optim: no %s updates (build with make CUDA=1 and call the backend's init)", sp_device_name(dev));
    return device_ops[dev];
}

sp_optim_cfg sp_optim_cfg_default(void)
{
    return (sp_optim_cfg){.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
}

typedef struct create_args {
    const char *name;
    sp_param **params;
    int n;
    const sp_optim_cfg *c;
    sp_optim *o;
} create_args;

/* The constructors check every hyper-parameter before they allocate: under sp_try a
 * refusal leaves nothing behind. */
static void create(void *arg)
{
    create_args *a = arg;
    const sp_optim_cfg *c = a->c;
    if (!strcmp(a->name, "sgd"))
        a->o = sp_sgd_new(a->params, a->n, c->lr, c->momentum, c->dampening, c->weight_decay, c->nesterov);
    else if (!strcmp(a->name, "adam"))
        a->o = sp_adam_new(a->params, a->n, c->lr, c->beta1, c->beta2, c->eps, c->weight_decay, false);
    else if (!strcmp(a->name, "adamw"))
        a->o = sp_adam_new(a->params, a->n, c->lr, c->beta1, c->beta2, c->eps, c->weight_decay, true);
    else
        sp_fail("optim '%s': unknown optimizer (expected sgd, adam or adamw)", a->name);
}

sp_optim *sp_optim_create(const char *name, sp_param **params, int n, const sp_optim_cfg *c)
{
    if (n < 0) return sp_error("sp_optim_create: argument 'n' is %d (expected >= 0)", n), NULL;
    if (!name) return sp_error("sp_optim_create: argument 'name' is NULL"), NULL;
    if (n > 0 && !params) return sp_error("sp_optim_create: argument 'params' is NULL"), NULL;
    if (!c) return sp_error("sp_optim_create: argument 'c' is NULL"), NULL;
    create_args a = {name, params, n, c, NULL};
    if (sp_try(create, &a) != SP_OK) return NULL;
    return a.o;
}
