/* adam.c — Adam (Kingma & Ba, 2015) and AdamW (Loshchilov & Hutter, 2019), mirroring
 * PyTorch 1.13's _single_tensor_adam / _single_tensor_adamw op by op:
 *
 *   step_t += 1
 *   Adam:  grad = grad.add(param, alpha=weight_decay)      if weight_decay != 0
 *   AdamW: param.mul_(1 - lr * weight_decay)
 *   exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
 *   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
 *   bias_correction1 = 1 - beta1 ** step;  bias_correction2 = 1 - beta2 ** step   (double)
 *   step_size = lr / bias_correction1;  bias_correction2_sqrt = math.sqrt(bias_correction2)
 *   denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
 *   param.addcdiv_(exp_avg, denom, value=-step_size)
 *
 * The step count is per parameter (PyTorch keeps state['step'] per parameter too), so
 * the ooo engine may update layers one at a time. The CPU kernels compute add with
 * alpha as one fused multiply-add (fmaf here, see SP_OPTIM_KERNEL in optim.h), addcmul
 * as self + (value·t1)·t2 and addcdiv as self + (value·t1)/t2 (unfused); we keep that. */
#include <math.h>
#include "core/error.h"
#include "optim/optim.h"
#include "core/guard.h"

typedef struct adam_ctx {
    float *p, *m, *v;
    const float *g;
    float wd, decay_factor, beta1, one_minus_beta1, beta2, one_minus_beta2;
    float bc2_sqrt, eps, neg_step_size;
    bool l2, decoupled;
} adam_ctx;

SP_OPTIM_KERNEL static void adam_range(void *vctx, size_t begin, size_t end)
{
    const adam_ctx *c = vctx;
    for (size_t j = begin; j < end; j++) {
        float p = c->p[j];
        float g = c->l2 ? fmaf(c->wd, p, c->g[j]) : c->g[j];
        if (c->decoupled) p = p * c->decay_factor;
        float m = c->m[j] * c->beta1;
        m = fmaf(c->one_minus_beta1, g, m);
        float v = c->v[j] * c->beta2;
        float gg = c->one_minus_beta2 * g;   /* one rounding per op, unfused like addcmul */
        gg = gg * g;
        v = v + gg;
        float denom = sqrtf(v) / c->bc2_sqrt + c->eps;
        c->m[j] = m;
        c->v[j] = v;
        c->p[j] = p + c->neg_step_size * m / denom;
    }
}

static void adam_update(sp_optim *o, int i)
{
    sp_param *prm = o->params[i];
    const sp_optim_cfg *h = &o->cfg;
    double step = (double)(o->sc_dev ? o->steps[i] : ++o->steps[i]);   /* device scalars: staged and counted */
    double bc1 = 1 - pow(h->beta1, step);
    double bc2 = 1 - pow(h->beta2, step);
    double step_size = o->lr / bc1;
    adam_ctx c = {
        .p = prm->value.data,
        .g = prm->grad.data,
        .m = o->state[0] + o->offset[i],
        .v = o->state[1] + o->offset[i],
        .wd = (float)h->weight_decay,
        .decay_factor = (float)(1 - o->lr * h->weight_decay),
        .beta1 = (float)h->beta1,
        .one_minus_beta1 = (float)(1 - h->beta1),
        .beta2 = (float)h->beta2,
        .one_minus_beta2 = (float)(1 - h->beta2),
        .bc2_sqrt = (float)sqrt(bc2),
        .eps = (float)h->eps,
        .neg_step_size = (float)(-step_size),
        .l2 = !o->decoupled && h->weight_decay != 0,
        .decoupled = o->decoupled,
    };
    if (o->device != SP_CPU) {
        sp_adam_args a = {c.p, c.m, c.v, c.g, o->sc_dev ? o->sc_dev + i : NULL, prm->value.numel, c.wd, c.decay_factor, c.beta1, c.one_minus_beta1,
                          c.beta2, c.one_minus_beta2, c.bc2_sqrt, c.eps, c.neg_step_size, c.l2, c.decoupled};
        sp_optim_device(o->device)->adam(&a);
        return;
    }
    sp_optim_for(prm->value.numel, adam_range, &c);
}

/* The scalars adam_update computes, for the coming step (device scalars). */
static void adam_scalars(sp_optim *o, int i, sp_optim_scalars *out)
{
    const sp_optim_cfg *h = &o->cfg;
    double step = (double)++o->steps[i];
    double bc1 = 1 - pow(h->beta1, step);
    double bc2 = 1 - pow(h->beta2, step);
    *out = (sp_optim_scalars){.neg_lr = (float)(-(o->lr / bc1)), .decay_factor = (float)(1 - o->lr * h->weight_decay),
                              .bc2_sqrt = (float)sqrt(bc2)};
}

sp_optim *sp_adam_new(sp_param **params, int n, double lr, double beta1, double beta2, double eps,
                      double weight_decay, bool decoupled)
{
    SP_GUARD(NULL);
    if (n < 0) sp_fail("sp_adam_new: argument 'n' is %d (expected >= 0)", n);
    if (n > 0 && !params) sp_fail("sp_adam_new: argument 'params' is NULL");
    const char *name = decoupled ? "adamw" : "adam";
    /* The same checks as torch.optim.Adam / AdamW's constructors. */
    if (!(lr >= 0)) sp_fail("optim %s: learning rate %g (expected >= 0)", name, lr);
    if (!(eps >= 0)) sp_fail("optim %s: eps %g (expected >= 0)", name, eps);
    if (!(beta1 >= 0 && beta1 < 1)) sp_fail("optim %s: beta1 %g (expected in [0, 1))", name, beta1);
    if (!(beta2 >= 0 && beta2 < 1)) sp_fail("optim %s: beta2 %g (expected in [0, 1))", name, beta2);
    if (!(weight_decay >= 0)) sp_fail("optim %s: weight decay %g (expected >= 0)", name, weight_decay);
    sp_optim *o = sp_optim_alloc(name, params, n, 2, adam_update);
    o->scalars = adam_scalars;
    o->state_names[0] = "exp_avg";
    o->state_names[1] = "exp_avg_sq";
    o->lr = lr;
    o->decoupled = decoupled;
    o->cfg = sp_optim_cfg_default();
    o->cfg.lr = lr;
    o->cfg.beta1 = beta1;
    o->cfg.beta2 = beta2;
    o->cfg.eps = eps;
    o->cfg.weight_decay = weight_decay;
    return o;
}
