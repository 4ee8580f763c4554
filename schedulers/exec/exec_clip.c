/* exec_clip.c — the step's end under --clip-grad-norm: the global gradient norm over
 * every stage (torch.nn.utils.clip_grad_norm_ of the single process), which no rank
 * knows alone, and the owners' updates.
 *
 * Each stage's summed gradient is counted once, on the lowest rank that steps it: every
 * rank contributes the squared per-tensor norms of its counted stages (a double as two
 * floats), one allgather gives every rank every part, and each rank adds them in rank
 * order — the same total, bit for bit, everywhere.
 *
 *   plain          the updates wait for the allgather, scale the gradients when the clip
 *                  triggers, then step.
 *   post-validate  the zero-bubble paper's post-validation (Qi et al., ICLR 2024, §4):
 *                  start the allgather, save the owned stages' weights and optimizer
 *                  state, step at once with the unscaled gradients, and only then wait
 *                  for the norm. When the clip triggers (or the norm is not finite) the
 *                  step is rolled back — weights, state and step counts restored — and
 *                  redone with the scaled gradients: the weights of the plain run. When
 *                  it does not (the usual case once training settles) the update has
 *                  overlapped the collective.
 *
 * The updates of a clipped step keep their gradients (the optimizer's zero-in-step is
 * off around them) so that a rolled-back step can be redone; the next step zeroes them. */
#include <math.h>
#include <stdlib.h>
#include "core/error.h"
#include "core/threads.h"
#include "schedulers/exec/exec_internal.h"

/* counted[s]: this rank is the lowest that steps stage s (one allgather, once). */
static void setup_counted(sp_exec *x)
{
    float *mine = sp_xcalloc((size_t)x->S + 1, sizeof *mine), *all = sp_xcalloc((size_t)x->W * (x->S + 1), sizeof *all);
    for (int s = 0; s < x->S; s++) mine[s] = x->st[s].owns && x->st[s].nfloats ? 1.0f : 0.0f;
    sp_allgather(x->world, mine, all, (size_t)x->S + 1);
    x->counted = sp_xcalloc((size_t)x->S + 1, sizeof *x->counted);
    for (int s = 0; s < x->S; s++) {
        int lowest = -1;
        for (int r = 0; r < x->W && lowest < 0; r++)
            if (all[(size_t)r * (x->S + 1) + s] != 0) lowest = r;
        x->counted[s] = lowest == x->rank;
    }
    free(mine);
    free(all);
}

static void update_owned(sp_exec *x)
{
    for (int s = 0; s < x->S; s++) {
        stage_info *si = &x->st[s];
        if (si->owns && si->nfloats) sp_exec_step_stage(x, s, x->steps);
    }
}

static void scale_owned(sp_exec *x, float coef)
{
    for (int s = 0; s < x->S; s++) {
        stage_info *si = &x->st[s];
        if (si->owns && si->nfloats) sp_grad_scale(si->params, si->nparams, coef);
    }
}

void sp_exec_clip_update(sp_exec *x)
{
    if (!x->counted) setup_counted(x);
    double u0 = sp_now(), sum = 0;
    for (int s = 0; s < x->S; s++)
        if (x->counted[s]) sum += sp_grad_sq_norm(x->st[s].params, x->st[s].nparams);
    float part[2] = {(float)sum, 0}, *all = sp_xmalloc(sizeof(float) * 2 * (size_t)x->W);
    part[1] = (float)(sum - (double)part[0]);
    sp_req req;
    if (x->W > 1) sp_exec_log_msg(x, -1, SP_MSG_NORM, -1, sizeof part);
    sp_iallgather(x->world, part, all, 2, &req);
    bool zero = x->opt->zero_in_step;
    sp_optim_set_zero_in_step(x->opt, false);   /* a redo reads the gradients again */
    if (x->cfg.post_validate) {
        sp_optim_undo_clear(&x->undo);
        for (int s = 0; s < x->S; s++) {
            stage_info *si = &x->st[s];
            if (si->owns && si->nfloats) sp_optim_undo_save(&x->undo, x->opt, si->params, si->nparams);
        }
        update_owned(x);   /* eagerly, before the norm is known */
    }
    sp_comm_set_label("the global gradient norm (--clip-grad-norm)");
    double w0 = sp_now();
    sp_wait(&req);
    x->clip_wait_s += sp_now() - w0;
    double total = 0;
    for (int r = 0; r < x->W; r++) total += (double)all[2 * r] + (double)all[2 * r + 1];
    free(all);
    double norm = (float)sqrt(total);
    float coef = sp_clip_coef(norm, x->cfg.clip_grad_norm);
    bool clips = !(coef >= 1.0f);
    if (clips) scale_owned(x, coef);
    if (x->cfg.post_validate && clips) {
        sp_optim_undo_restore(&x->undo);
        x->rollbacks++;
    }
    if (!x->cfg.post_validate || clips) update_owned(x);
    sp_optim_set_zero_in_step(x->opt, zero);
    x->clips += clips;
    x->last_norm = norm;
    x->bwd_s += sp_now() - u0;
}

void sp_exec_clip_stats(const sp_exec *x, sp_exec_clip *out)
{
    *out = (sp_exec_clip){.steps_clipped = x->clips, .rollbacks = x->rollbacks, .last_norm = x->last_norm,
                          .wait_s = x->clip_wait_s};
}

void sp_exec_clip_free(sp_exec *x)
{
    free(x->counted);
    sp_optim_undo_free(&x->undo);
}
