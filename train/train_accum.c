/* train_accum.c — one training step by gradient accumulation (--microbatches M without
 * --parallel): the batch cut into M micro-batches of consecutive samples (the first
 * n mod M one sample larger), each run forward and backward on the step's tape (reset
 * in between, so the tape holds one micro-batch at a time), their gradients summed with
 * weights b_k/B, then one optimizer update.
 *
 * The loss is a mean over its batch (softmax_ce), so a micro-batch's backward yields the
 * mean gradient g_k of its b_k samples, and the whole batch's gradient is Σ (b_k/B)·g_k.
 * The engines add into the parameters' gradients; the weights are applied by rescaling
 * the running sum: before micro-batch k it is multiplied by b_{k−1}/b_k (1 when the
 * sizes are equal: skipped), after the last by b_M/B, so the sum holds
 * Σ_{j≤k} (b_j/b_k)·g_j after micro-batch k and Σ (b_j/B)·g_j at the end. With M = 1
 * nothing is rescaled: the plain step's bits.
 *
 * Batch norm (and any op with per-batch state) sees each micro-batch as its batch: its
 * statistics are the micro-batch's, its running statistics move once per micro-batch in
 * micro-batch order — what a pipeline's stages do (GPipe, torchgpipe), so a pipeline run
 * equals this reference. An engine that runs the updates itself (ooo's U tasks) is asked
 * not to for the micro-batches; the update comes once, after the last. */
#include <math.h>
#include "core/device.h"
#include "core/error.h"
#include "core/guard.h"
#include "core/threads.h"
#include "train/train.h"
#include "train/train_internal.h"

/* Every parameter gradient of m times s (host memory: the model is on the CPU). */
static void scale_grads(sp_model *m, float s)
{
    for (int i = 0; i < m->nparams; i++) {
        sp_tensor *g = &m->params[i]->grad;
        if (!g->data) continue;
        for (size_t j = 0; j < g->numel; j++) g->data[j] *= s;
    }
}

/* Rows of micro-batch k of a batch of n cut into M (M <= n). */
static int micro_rows(int n, int M, int k) { return n / M + (k < n % M); }

sp_node *train_step_accum(sp_model *m, sp_engine *e, sp_optim *o, sp_tape *t, const sp_tensor *x, const int *y,
                          int micro, float *loss_out, double *fwd_s, double *bwd_s)
{
    if (model_device(m) != SP_CPU)
        sp_fail("--microbatches %d without --parallel: gradient accumulation runs on the cpu (expected --device cpu)",
                micro);
    int n = x->shape[0], M = micro < 1 ? 1 : micro > n ? n : micro;
    size_t per = n ? x->numel / (size_t)n : 0;
    sp_engine_opts saved = e->opts;
    e->opts.update = NULL;   /* one update, after the last micro-batch */
    e->opts.update_ctx = NULL;
    sp_optim_zero_grad(o);
    double fwd = 0, bwd = 0, loss = 0;
    sp_node *last = NULL;
    int row = 0, prev = 0;
    for (int k = 0; k < M; k++) {
        int b = micro_rows(n, M, k);
        sp_tape_reset(t);
        double t0 = sp_now();
        sp_tensor xv = *x;   /* a view of rows [row, row + b) */
        xv.shape[0] = b;
        xv.numel = per * (size_t)b;
        xv.data = x->data + per * (size_t)row;
        t->reuse_inputs = (e->caps & SP_ENGINE_OVER_INPUTS) != 0;   /* as the plain step (tape.h) */
        sp_node *l = sp_model_loss(m, t, &xv, y + row);
        double t1 = sp_now();
        if (k > 0 && b != prev) scale_grads(m, (float)prev / (float)b);
        sp_backward(e, t, l);
        double t2 = sp_now();
        fwd += t1 - t0;
        bwd += t2 - t1;
        loss += (double)b / (double)n * (double)sp_tensor_get(&l->out, 0);
        last = l;
        prev = b;
        row += b;
    }
    if (M > 1) scale_grads(m, (float)prev / (float)n);
    e->opts = saved;
    sp_optim_step(o);
    if (fwd_s) *fwd_s = fwd;
    if (bwd_s) *bwd_s = bwd;
    *loss_out = (float)loss;
    return last;
}

static float step_accum(sp_model *m, sp_engine *e, sp_optim *o, sp_tape *t, const sp_tensor *x, const int *y,
                        int micro, double *fwd_s, double *bwd_s, double *step_s)
{
    if (!m) sp_fail("sp_train_step_accum: argument 'm' is NULL");
    if (!e) sp_fail("sp_train_step_accum: argument 'e' is NULL");
    if (!o) sp_fail("sp_train_step_accum: argument 'o' is NULL");
    if (!t) sp_fail("sp_train_step_accum: argument 't' is NULL");
    if (!x) sp_fail("sp_train_step_accum: argument 'x' is NULL");
    if (!y) sp_fail("sp_train_step_accum: argument 'y' is NULL");
    if (micro < 1) sp_fail("sp_train_step_accum: argument 'micro' is %d (expected >= 1)", micro);
    double t0 = sp_now();
    float l;
    train_step_accum(m, e, o, t, x, y, micro, &l, fwd_s, bwd_s);
    if (step_s) *step_s = sp_now() - t0;
    return l;
}

typedef struct accum_args {
    sp_model *m;
    sp_engine *e;
    sp_optim *o;
    sp_tape *t;
    const sp_tensor *x;
    const int *y;
    int micro;
    double *fwd_s, *bwd_s, *step_s;
    float loss;
} accum_args;

static void accum_run(void *p)
{
    accum_args *a = p;
    a->loss = step_accum(a->m, a->e, a->o, a->t, a->x, a->y, a->micro, a->fwd_s, a->bwd_s, a->step_s);
}

float sp_train_step_accum(sp_model *m, sp_engine *e, sp_optim *o, sp_tape *t, const sp_tensor *x, const int *y,
                          int micro, double *fwd_s, double *bwd_s, double *step_s)
{
    if (sp_try_active()) return step_accum(m, e, o, t, x, y, micro, fwd_s, bwd_s, step_s);   /* its sp_try has it */
    sp_clear_error();
    accum_args a = {m, e, o, t, x, y, micro, fwd_s, bwd_s, step_s, NAN};
    if (sp_try(accum_run, &a) != SP_OK) {
        if (e) sp_engine_sync(e);   /* an engine's lanes still running the step's tail */
        return NAN;
    }
    return a.loss;
}
