/* train_eval.c — evaluation (train/train.h): the forward that keeps each
 * output only until its last reader, the mean loss and accuracy (sp_evaluate), and, with
 * ranks, each rank's share of the test set summed over the ranks. The evaluator's state
 * lives in the training run (train_internal.h), so that evaluating every epoch allocates
 * nothing after the first time. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include "core/comm/comm.h"
#include "core/device.h"
#include "core/error.h"
#include "schedulers/exec/exec.h"
#include "train/train.h"
#include "train/train_internal.h"

static void evaluator_init(evaluator *ev, sp_dataset *d, int batch)
{
    ev->d = d;
    ev->l = sp_loader_new_sync(d, batch, false, 0, false);
    if (!ev->l) sp_fail("%s", sp_last_error());   /* a status under sp_train's sp_try */
    sp_tape_init(&ev->t);
}

void train_evaluator_free(evaluator *ev)
{
    if (!ev->l) return;
    if (ev->in_slot) {   /* a layer failed with a slot's arena in the tape: each back to its place */
        ev->slot[ev->in_slot - 1] = ev->t.arena;
        ev->t.arena = ev->held;
        ev->in_slot = 0;
    }
    sp_tape_free(&ev->t);
    for (int s = 0; s < ev->nslots; s++) sp_arena_free(&ev->slot[s]);
    free(ev->slot);
    free(ev->slot_of);
    free(ev->last_use);
    ev->slot = NULL;
    ev->slot_of = ev->last_use = NULL;
    ev->nslots = 0;
    sp_loader_free(ev->l);
    ev->l = NULL;
}

/* The forward of sp_model_loss, the same kernels on the same inputs (bitwise the same
 * logits and loss), but no output outlives its last reader: nothing goes backward, so
 * layer i's output (with its scratch) lives in an arena of its own, reset once the last
 * layer reading it has run, and the next layer takes the free arena of lowest index. A
 * chain then holds two outputs at a time, not the whole network's: at VGG-11's
 * evaluation batch of 256 that is 0.56 GB less. The host arena only: a device's
 * outputs stay in its arena (a device op may alias its input). */
static sp_node *eval_forward(evaluator *ev, sp_model *m, const sp_tensor *x, const int *labels)
{
    int L = m->nlayers;
    if (!m->loss) sp_fail("model '%s': no loss (its builder sets one, e.g. sp_model_set_loss(m, sp_softmax_ce()))", m->name);
    if (!ev->slot_of) {   /* the first batch: who reads what last */
        ev->slot = sp_xcalloc((size_t)L + 1, sizeof *ev->slot);
        ev->slot_of = sp_xmalloc(((size_t)L + 1) * sizeof *ev->slot_of);
        ev->last_use = sp_xmalloc(((size_t)L + 1) * sizeof *ev->last_use);
        ev->nslots = L + 1;
        for (int i = 0; i < L; i++) ev->last_use[i] = i == L - 1 ? L : i;   /* the logits: the loss reads them */
        for (int i = 0; i < L; i++)
            for (int k = m->from_start[i]; k < m->from_start[i + 1]; k++)
                if (m->from[k] >= 0 && ev->last_use[m->from[k]] < i) ev->last_use[m->from[k]] = i;
    }
    for (int s = 0; s < ev->nslots; s++) sp_arena_reset(&ev->slot[s]);
    bool busy[ev->nslots];
    memset(busy, 0, sizeof busy);
    sp_node *in = sp_tape_input(&ev->t, x), *out = in;
    sp_node **node = sp_tape_alloc(&ev->t, ((size_t)L + 1) * sizeof *node);
    for (int i = 0; i < L; i++) {
        int k0 = m->from_start[i], nin = m->from_start[i + 1] - k0;
        sp_node **a = sp_tape_alloc(&ev->t, (size_t)nin * sizeof *a);
        for (int k = 0; k < nin; k++) a[k] = m->from[k0 + k] == SP_MODEL_INPUT ? in : node[m->from[k0 + k]];
        int s = 0;
        while (busy[s]) s++;   /* at most L outputs are alive: one slot is free */
        ev->held = ev->t.arena;   /* in ev: a layer that fails (sp_fail) returns past this frame */
        ev->t.arena = ev->slot[s];
        ev->in_slot = s + 1;
        out = node[i] = sp_apply_n(&ev->t, m->layers[i], nin, a);
        ev->in_slot = 0;
        ev->slot[s] = ev->t.arena;
        ev->t.arena = ev->held;
        busy[s] = ev->last_use[i] > i;   /* an output nobody reads is dropped at once */
        if (!busy[s]) sp_arena_reset(&ev->slot[s]);
        ev->slot_of[i] = s;
        for (int k = 0; k < nin; k++) {   /* the outputs read for the last time: their slots free */
            int j = m->from[k0 + k];
            if (j >= 0 && ev->last_use[j] == i && busy[ev->slot_of[j]]) {
                busy[ev->slot_of[j]] = false;
                sp_arena_reset(&ev->slot[ev->slot_of[j]]);
            }
        }
    }
    return sp_apply_loss(&ev->t, m->loss, out, labels);
}

static void eval_pass(evaluator *ev, sp_model *m, double *loss_out, double *acc_out)
{
    bool was_training = !m->eval;
    sp_model_set_training(m, false);   /* batch norm: running statistics; no dropout */
    sp_loader_set_epoch(ev->l, 0);     /* rewinds (no shuffle: the same order every time) */
    double loss = 0.0;
    long correct = 0, seen = 0;
    sp_batch b;
    while (sp_loader_next(ev->l, &b)) {
        sp_tape_reset(&ev->t);
        sp_tensor xin = sp_tape_copy_on(&ev->t, model_device(m), &b.x);
        sp_node *ln = eval_forward(ev, m, &xin, b.y);
        const sp_tensor *z = sp_node_x(ln);   /* logits */
        int K = z->shape[1];
        const float *zh = z->data;
        if (z->device != SP_CPU) {   /* the logits come down */
            float *h = sp_tape_alloc(&ev->t, z->numel * sizeof(float));
            sp_tensor_read(h, z);
            zh = h;
        }
        for (int i = 0; i < b.n; i++) {
            const float *zi = zh + (size_t)i * K;
            int best = 0;
            for (int k = 1; k < K; k++) best = zi[k] > zi[best] ? k : best;
            correct += best == b.y[i];
        }
        loss += (double)sp_tensor_get(&ln->out, 0) * b.n;
        seen += b.n;
    }
    sp_model_set_training(m, was_training);
    *loss_out = seen ? loss / (double)seen : NAN;
    *acc_out = seen ? (double)correct / (double)seen : NAN;
}

typedef struct evaluate_args {
    evaluator ev;
    sp_model *m;
    sp_dataset *d;
    int batch;
    double loss, acc;
} evaluate_args;

static void evaluate_body(void *arg)
{
    evaluate_args *a = arg;
    evaluator_init(&a->ev, a->d, a->batch);
    eval_pass(&a->ev, a->m, &a->loss, &a->acc);
}

int sp_evaluate(sp_model *m, sp_dataset *d, int batch, double *loss_out, double *acc_out)
{
    if (!m) return sp_error("sp_evaluate: argument 'm' is NULL");
    if (!d) return sp_error("sp_evaluate: argument 'd' is NULL");
    if (!loss_out) return sp_error("sp_evaluate: argument 'loss_out' is NULL");
    if (!acc_out) return sp_error("sp_evaluate: argument 'acc_out' is NULL");
    if (batch < 1) return sp_error("sp_evaluate: argument 'batch' is %d (expected >= 1)", batch);
    bool was_training = !m->eval;
    /* in sp_try's caller frame: intact when a layer's refusal returns through sp_try */
    evaluate_args a = {.m = m, .d = d, .batch = batch};
    int rc = sp_try(evaluate_body, &a);
    train_evaluator_free(&a.ev);   /* also after a failure (the arena swap undone there) */
    sp_model_set_training(m, was_training);
    if (rc != SP_OK) return SP_ERR;
    *loss_out = a.loss;
    *acc_out = a.acc;
    return SP_OK;
}

/* ---- evaluation across ranks --------------------------------------------------------- */

/* Rank r of W evaluates the samples [r·n/W, (r+1)·n/W) of d; the sums meet by allreduce. */
static void slice_get(sp_dataset *d, int i, float *x, int *y)
{
    slice_ds *s = (slice_ds *)d;
    sp_dataset_get(s->base, s->off + i, x, y);
}

void train_evaluator_open(evaluator *ev, sp_dataset *d, int batch, const sp_train_cfg *cfg)
{
    *ev = (evaluator){0};
    if (!cfg->exec) {
        evaluator_init(ev, d, batch);
        return;
    }
    int W = sp_exec_workers(cfg->exec), r = sp_exec_rank(cfg->exec);
    int lo = (int)((long)d->n * r / W), hi = (int)((long)d->n * (r + 1) / W);
    ev->slice = (slice_ds){.d = *d, .base = d, .off = lo};
    ev->slice.d.n = hi - lo;
    ev->slice.d.get = slice_get;
    ev->slice.d.label = NULL;   /* the base's would read the slice as the base */
    ev->slice.d.free = NULL;
    ev->slice.d.norm_channels = 0;   /* the base normalises */
    if (ev->slice.d.n > 0) evaluator_init(ev, &ev->slice.d, batch);
}

/* The evaluation's arenas between evaluations: their blocks go back, their sizes stay
 * (the next evaluation opens one block each, as the first did). */
static void evaluator_trim(evaluator *ev)
{
    if (!ev->l) return;
    sp_tape_trim(&ev->t);
    for (int s = 0; s < ev->nslots; s++) sp_arena_trim(&ev->slot[s]);
}

void train_evaluate(evaluator *ev, sp_model *m, sp_dataset *d, const sp_train_cfg *cfg, double *loss, double *acc)
{
    /* the step's arenas and the evaluation's are never needed at once: each side's are
     * trimmed while the other runs, so a run's peak is the larger of the two, not their
     * sum (at an evaluation batch no larger than the step's: the step's) */
    for (int k = 0; k < 3; k++)
        if (ev->idle[k]) sp_tape_trim(ev->idle[k]);
    if (!cfg->exec) {
        eval_pass(ev, m, loss, acc);
        evaluator_trim(ev);
        return;
    }
    sp_exec_sync_weights(cfg->exec);
    int n = ev->l ? ev->d->n : 0;
    double l = 0, a = 0;
    if (n > 0) eval_pass(ev, m, &l, &a);
    evaluator_trim(ev);
    float sums[2] = {(float)(l * n), (float)floor(a * n + 0.5)};   /* rounded per rank, then summed */
    sp_comm_set_label("evaluation");
    sp_allreduce(sp_comm_world(), sums, 2);
    *loss = d->n ? (double)sums[0] / d->n : NAN;
    *acc = d->n ? floor((double)sums[1]) / d->n : NAN;
}
