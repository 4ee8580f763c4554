/* sgd.c — stochastic gradient descent with momentum, dampening, Nesterov and L2 weight
 * decay, mirroring torch.optim.SGD's _single_tensor_sgd (PyTorch 1.13) op by op:
 *
 *   d_p = d_p.add(param, alpha=weight_decay)              if weight_decay != 0
 *   buf = clone(d_p)                                      first step (momentum != 0)
 *   buf.mul_(momentum).add_(d_p, alpha=1 - dampening)     later steps
 *   d_p = d_p.add(buf, alpha=momentum) if nesterov else buf
 *   param.add_(d_p, alpha=-lr)
 *
 * Each scalar is rounded to float where the kernel takes it (alpha, the mul_ factor);
 * 1 − dampening and −lr are formed in double first, as Python does. Every add with
 * alpha is one fmaf (see SP_OPTIM_KERNEL in optim.h). */
#include <math.h>
#include "core/error.h"
#include "optim/optim.h"
#include "core/guard.h"

typedef struct sgd_ctx {
    float *p, *buf;
    const float *g;
    float wd, momentum, one_minus_damp, neg_lr;
    bool use_wd, use_momentum, first, nesterov;
} sgd_ctx;

/* The loop is written once and inlined with the flags as constants, so each variant
 * is a straight-line, vectorisable loop (-O2 does not unswitch loops by itself). */
static inline void sgd_loop(const sgd_ctx *c, size_t begin, size_t end, bool use_wd, bool use_momentum, bool first,
                            bool nesterov)
{
    float *restrict p = c->p, *restrict buf = c->buf;
    const float *restrict g = c->g;
    for (size_t j = begin; j < end; j++) {
        float d = use_wd ? fmaf(c->wd, p[j], g[j]) : g[j];
        if (use_momentum) {
            float b = first ? d : fmaf(c->one_minus_damp, d, buf[j] * c->momentum);
            buf[j] = b;
            d = nesterov ? fmaf(c->momentum, b, d) : b;
        }
        p[j] = fmaf(c->neg_lr, d, p[j]);
    }
}

SP_OPTIM_KERNEL static void sgd_range(void *vctx, size_t begin, size_t end)
{
    const sgd_ctx *c = vctx;
    if (c->use_momentum && !c->first && !c->nesterov) {   /* the steady state of the apps */
        if (c->use_wd) sgd_loop(c, begin, end, true, true, false, false);
        else sgd_loop(c, begin, end, false, true, false, false);
    } else {
        sgd_loop(c, begin, end, c->use_wd, c->use_momentum, c->first, c->nesterov);
    }
}

static void sgd_update(sp_optim *o, int i)
{
    sp_param *p = o->params[i];
    const sp_optim_cfg *h = &o->cfg;
    sgd_ctx c = {
        .p = p->value.data,
        .g = p->grad.data,
        .buf = o->state[0] ? o->state[0] + o->offset[i] : NULL,
        .wd = (float)h->weight_decay,
        .momentum = (float)h->momentum,
        .one_minus_damp = (float)(1.0 - h->dampening),
        .neg_lr = (float)(-o->lr),
        .use_wd = h->weight_decay != 0,
        .use_momentum = h->momentum != 0,
        .first = o->steps[i] == 0,
        .nesterov = h->nesterov,
    };
    if (o->device != SP_CPU) {
        sp_sgd_args a = {c.p, c.buf, c.g, o->sc_dev ? o->sc_dev + i : NULL, p->value.numel, c.wd, c.momentum,
                         c.one_minus_damp, c.neg_lr, c.use_wd, c.use_momentum, c.first, c.nesterov};
        sp_optim_device(o->device)->sgd(&a);
        if (o->sc_dev) return;   /* sp_optim_stage_scalars counted the step */
    } else {
        sp_optim_for(p->value.numel, sgd_range, &c);
    }
    o->steps[i]++;
}

static void sgd_scalars(sp_optim *o, int i, sp_optim_scalars *out)
{
    *out = (sp_optim_scalars){.neg_lr = (float)(-o->lr), .first = o->steps[i] == 0};
    o->steps[i]++;
}

sp_optim *sp_sgd_new(sp_param **params, int n, double lr, double momentum, double dampening,
                     double weight_decay, bool nesterov)
{
    SP_GUARD(NULL);
    if (n < 0) sp_fail("sp_sgd_new: argument 'n' is %d (expected >= 0)", n);
    if (n > 0 && !params) sp_fail("sp_sgd_new: argument 'params' is NULL");
    /* The same checks, in the same words, as torch.optim.SGD's constructor. */
    if (!(lr >= 0)) sp_fail("optim sgd: learning rate %g (expected >= 0)", lr);
    if (!(momentum >= 0)) sp_fail("optim sgd: momentum %g (expected >= 0)", momentum);
    if (!(weight_decay >= 0)) sp_fail("optim sgd: weight decay %g (expected >= 0)", weight_decay);
    if (nesterov && (momentum <= 0 || dampening != 0))
        sp_fail("optim sgd: nesterov with momentum %g and dampening %g (expected momentum > 0 and dampening 0)",
                momentum, dampening);
    sp_optim *o = sp_optim_alloc("sgd", params, n, momentum != 0 ? 1 : 0, sgd_update);
    o->scalars = sgd_scalars;
    if (o->state[0]) o->state_names[0] = "momentum_buffer";
    o->lr = lr;
    o->cfg = sp_optim_cfg_default();
    o->cfg.lr = lr;
    o->cfg.momentum = momentum;
    o->cfg.dampening = dampening;
    o->cfg.weight_decay = weight_decay;
    o->cfg.nesterov = nesterov;
    return o;
}
