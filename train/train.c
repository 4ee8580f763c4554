/* train.c — sp_train (train/train.h): the epochs and steps with the prefetching
 * loader, resumable checkpoints, evaluations when due, and the result's figures. The loop
 * (train_body) calls one step variant, chosen before it from the run's configuration
 * (choose_step: plain, accumulating, overlapping, --parallel, the device's, --cuda-graph); a step
 * is train_step.c's, an evaluation train_eval.c's, the progress and the --log CSV
 * train_progress.c's (shared through train_internal.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "core/device.h"
#include "core/error.h"
#include "core/io/fileio.h"
#include "core/io/model_io.h"
#include "core/threads.h"
#include "train/checkpoint.h"
#include "schedulers/exec/exec.h"
#include "train/train.h"
#include "train/train_internal.h"

/* A batch's x in device slot `slot`, its upload started (sp_device_allocator.stage). */
static sp_tensor stage_batch(sp_device dev, const sp_tensor *x, int slot)
{
    sp_tensor d = sp_tensor_view(NULL, x->ndim, x->shape);
    d.device = dev;
    d.data = sp_backend_allocator(dev)->stage(slot, x->data, x->numel);
    return d;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_ms(double *v, long n)
{
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return 1e3 * (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

sp_train_cfg sp_train_cfg_default(void)
{
    return (sp_train_cfg){.app = "train", .epochs = 1, .eval_batch = 256};
}

/* The configuration's own checks, before anything is allocated or read. */
static int check_cfg(const sp_train_cfg *cfg, const sp_dataset *test)
{
    const char *app = cfg->app ? cfg->app : "sp_train";
    if (cfg->epochs < 0 || cfg->steps < 0 || (cfg->epochs == 0 && cfg->steps == 0))
        return sp_error("%s: %d epochs and %ld steps: give at least one limit (sp_train_cfg.epochs or .steps)", app,
                        cfg->epochs, cfg->steps);
    if (test && cfg->eval_batch < 1)
        return sp_error("%s: sp_train_cfg.eval_batch is %d (expected >= 1; start from sp_train_cfg_default())", app,
                        cfg->eval_batch);
    if (cfg->eval_every < 0)
        return sp_error("%s: sp_train_cfg.eval_every is %d (expected >= 0)", app, cfg->eval_every);
    if (cfg->microbatches < 0 || (cfg->microbatches > 1 && (cfg->exec || cfg->cuda_graph)))
        return sp_error("%s: sp_train_cfg.microbatches is %d (expected >= 0; > 1 without exec and cuda_graph)", app,
                        cfg->microbatches);
    if (cfg->save_every < 0 || (cfg->save_every > 0 && !cfg->save_path))
        return sp_error("%s: sp_train_cfg.save_every is %ld (expected >= 0, and a save_path with it)", app,
                        cfg->save_every);
    return SP_OK;
}

/* What sp_train returns when it refuses before any work: the message is in sp_last_error(). */
static sp_train_result refused(void) { return (sp_train_result){.test_loss = NAN, .test_acc = NAN, .status = SP_ERR}; }

typedef struct train_run train_run;

/* One step on batch b, the loss waited for; f, bw, st: the forward's, the backward's
 * (engine only) and the whole step's seconds. The variant is chosen once (choose_step). */
typedef float (*step_fn)(train_run *s, const sp_batch *b, double *f, double *bw, double *st);

/* One sp_train call: what it holds, so that a failure anywhere in the run (an sp_fail
 * inside a step, caught by sp_try) frees all of it. */
struct train_run {
    sp_model *m;
    sp_engine *e;
    sp_optim *o;
    sp_loader *train;
    sp_dataset *test;
    const sp_train_cfg *cfg;
    sp_train_result r;
    sp_train_state resumed;
    long per_epoch, total, first;
    int epochs;
    bool logged_eval;   /* the kept log already has the evaluation at the resumed step */
    sp_out logout;
    FILE *log;
    double *fwd, *bwd, *all;   /* per-step times, indexed by step */
    progress p;
    sp_tape t, tapes[2];
    evaluator ev;
    sp_step_graph *sg;
    bool overlap, zero_in_step, step_grads, was_training;
    sp_device dev;             /* where the model lives */
    double busy;               /* seconds of step time so far, and the samples they trained */
    long images;
    double epoch_loss;         /* the epoch's loss summed over its steps so far */
    long epoch_steps;
    /* on a device: the step's staged batch (slot), and the next one fetched while it runs */
    int slot;
    sp_tensor xd;
    const int *yd;
    sp_batch nb;
    bool next;
};

/* ---- the step variants ----------------------------------------------------------------- */

static float step_cpu(train_run *s, const sp_batch *b, double *f, double *bw, double *st)
{
    float loss = sp_train_step(s->m, s->e, s->o, &s->t, &b->x, b->y, f, bw, st);
    if (isnan(loss) && sp_last_error()[0]) sp_fail("%s", sp_last_error());   /* a refused batch: its message */
    return loss;
}

/* --microbatches M without --parallel: gradient accumulation (train_accum.c) */
static float step_cpu_accum(train_run *s, const sp_batch *b, double *f, double *bw, double *st)
{
    return sp_train_step_accum(s->m, s->e, s->o, &s->t, &b->x, b->y, s->cfg->microbatches, f, bw, st);
}

/* --parallel: the executor runs the step on the ranks */
static float step_exec(train_run *s, const sp_batch *b, double *f, double *bw, double *st)
{
    return sp_exec_step(s->cfg->exec, &b->x, b->y, f, bw, st);
}

/* the forward overlaps the previous step's last δW/U (the tapes alternate) */
static float step_cpu_overlap(train_run *s, const sp_batch *b, double *f, double *bw, double *st)
{
    double t0 = sp_now();
    sp_tape *tp = &s->tapes[s->r.steps % 2];
    float loss = sp_tensor_get(&train_step_queue_overlap(s->m, s->e, s->o, tp, &b->x, b->y, -1, f, bw)->out, 0);
    *st = sp_now() - t0;
    return loss;
}

/* On a device, batch k+1 goes up (pinned slot, copy stream) while step k runs: step k is
 * queued (the variants below), the next batch fetched and staged, then step k's loss read. */
static double device_begin(train_run *s)
{
    double t0 = sp_now();
    sp_backend_allocator(s->dev)->use_staged(s->slot);
    return t0;
}

static float device_end(train_run *s, const sp_tensor *lt, double t0, double *st)
{
    s->next = s->r.steps + 1 < s->total && sp_loader_next(s->train, &s->nb);   /* b.y stays valid: copied up */
    if (s->next) s->xd = stage_batch(s->dev, &s->nb.x, s->slot ^ 1);
    if (s->next && s->sg) s->yd = sp_backend_allocator(s->dev)->stage_labels(s->slot ^ 1, s->nb.y, (size_t)s->nb.n);
    float loss = sp_tensor_get(lt, 0);
    *st = sp_now() - t0;
    return loss;
}

static float step_device(train_run *s, const sp_batch *b, double *f, double *bw, double *st)
{
    double t0 = device_begin(s);
    return device_end(s, &train_step_queue(s->m, s->e, s->o, &s->t, &s->xd, b->y, f, bw)->out, t0, st);
}

static float step_device_overlap(train_run *s, const sp_batch *b, double *f, double *bw, double *st)
{
    double t0 = device_begin(s);
    sp_tape *tp = &s->tapes[s->r.steps % 2];
    sp_tape_arena_like(tp, &s->tapes[(s->r.steps + 1) % 2]);   /* the second tape: one block from the start */
    return device_end(s, &train_step_queue_overlap(s->m, s->e, s->o, tp, &s->xd, b->y, s->slot ^ 1, f, bw)->out, t0,
                      st);
}

/* --cuda-graph: the whole step replayed (or captured) */
static float step_device_graph(train_run *s, const sp_batch *b, double *f, double *bw, double *st)
{
    double t0 = device_begin(s);
    const sp_tensor *lt = sp_step_graph_step(s->sg, &s->t, &s->xd, b->y, s->yd);
    *f = sp_now() - t0;   /* queueing (or one launch); the backward inside */
    *bw = 0;
    return device_end(s, lt, t0, st);
}

static step_fn choose_step(const train_run *s)
{
    if (s->dev != SP_CPU) return s->sg ? step_device_graph : s->overlap ? step_device_overlap : step_device;
    if (s->overlap) return step_cpu_overlap;
    return s->cfg->exec ? step_exec : s->cfg->microbatches > 1 ? step_cpu_accum : step_cpu;
}

/* The epoch's first batch (on a device staged in slot 0) and each next one (on a device
 * the one step_device fetched). */
static bool first_batch(train_run *s, sp_batch *b)
{
    s->slot = 0;
    s->nb = (sp_batch){0};
    bool have = s->r.steps < s->total && sp_loader_next(s->train, b);
    if (have && s->dev != SP_CPU) s->xd = stage_batch(s->dev, &b->x, s->slot);
    s->yd = have && s->sg ? sp_backend_allocator(s->dev)->stage_labels(s->slot, b->y, (size_t)b->n) : NULL;
    return have;
}

static bool next_batch(train_run *s, sp_batch *b)
{
    if (s->dev == SP_CPU) return s->r.steps < s->total && sp_loader_next(s->train, b);
    *b = s->nb;
    s->slot ^= 1;
    return s->next;
}

/* ---- around the steps ------------------------------------------------------------------ */

/* The run's set-up: the evaluator, the step graph, whether steps overlap, the update's zeroing. */
static void train_setup(train_run *s)
{
    sp_model *m = s->m;
    const sp_train_cfg *cfg = s->cfg;
    if (s->test) train_evaluator_open(&s->ev, s->test, cfg->eval_batch, cfg);
    s->dev = model_device(m);
    s->sg = cfg->cuda_graph && s->dev != SP_CPU ? sp_step_graph_new(m, s->e, s->o) : NULL;
    /* An engine that runs its backward asynchronously and the updates itself (ooo), without
     * the graph: step k+1's forward overlaps step k's last δW/U (on the CPU with two
     * threads or more: its lanes; docs/OOO.md) */
    s->overlap = !s->sg && !cfg->exec && cfg->microbatches <= 1 && s->e->backward_async && s->e->opts.update &&
                 (s->dev != SP_CPU || sp_get_threads() >= 2);
    /* On the CPU each update zeroes the gradient it read (in cache, same pass) and the
     * next step's zero_grad skips it: nothing writes a gradient in between here. */
    s->zero_in_step = s->dev == SP_CPU;
    if (s->zero_in_step) sp_optim_set_zero_in_step(s->o, true);
    /* An engine that updates in its walk (linear) makes each layer's gradient in the step
     * for that layer's backward and update: the gradient buffers are not held (VGG-11: 35
     * MiB). Not where anything else reads them: a clip, accumulation, the executor. */
    s->step_grads = s->dev == SP_CPU && !s->sg && !cfg->exec && cfg->microbatches <= 1 && s->e->opts.update &&
                    (s->e->caps & SP_ENGINE_STEP_GRADS) && !(s->o->clip > 0);
    if (s->step_grads) sp_check(sp_model_step_grads(m, true));
    s->r.grads_in_step = s->step_grads;
    if (!s->sg && s->dev == SP_CPU) {   /* every step joined before an evaluation (overlap: sync) */
        s->ev.idle[0] = &s->t;
        s->ev.idle[1] = &s->tapes[0];
        s->ev.idle[2] = &s->tapes[1];
    }
}

/* The weights are finite, else the run stops as on a non-finite loss (a NaN input can
 * make NaN weights under a finite loss, ReLU dropping it): before each checkpoint, each
 * evaluation, at each epoch's end and the run's. Every update is in (callers join). */
static void check_weights(train_run *s)
{
    if (sp_model_check_finite(s->m) != SP_OK)
        sp_fail("%s: weights became non-finite by step %ld: %s (try a smaller --lr, check the data)",
                s->cfg->app ? s->cfg->app : "sp_train", s->r.steps, sp_last_error());
}

/* A checkpoint after this step when one is due (every save_every steps and the last). */
static void save_if_due(train_run *s, int epoch)
{
    const sp_train_cfg *cfg = s->cfg;
    sp_train_result *r = &s->r;
    if (!(cfg->save_every > 0 && (r->steps % cfg->save_every == 0 || r->steps == s->total))) return;
    if (s->overlap) sp_engine_sync(s->e);   /* a checkpoint holds every update of the step: join the lanes first */
    check_weights(s);
    /* the log first, on disk as the checkpoint is: a kill between the two leaves the log
     * ahead of the checkpoint (a resume keeps its rows up to the checkpoint's step), never
     * behind it (the rows of the steps it claims would be lost) */
    if (s->log) sp_check(sp_out_flush(&s->logout));
    if (sp_checkpoint_save(cfg->save_path, s->m, s->o,
                           &(sp_train_state){r->steps, epoch, s->epoch_steps, s->epoch_loss, sp_optim_get_lr(s->o)},
                           cfg->run_meta) != SP_OK)
        sp_fail("%s", sp_last_error());
}

/* An evaluation, its --log row and its progress line. */
static void evaluate(train_run *s, int epoch)
{
    sp_train_result *r = &s->r;
    check_weights(s);
    train_evaluate(&s->ev, s->m, s->test, s->cfg, &r->test_loss, &r->test_acc);
    train_log_eval(s->log, r->steps, epoch, s->o, sp_now() - s->p.start, r->test_loss, r->test_acc);
}

/* The epoch's end: every update in, its mean loss, the evaluation after each epoch. */
static void end_epoch(train_run *s, int epoch)
{
    const sp_train_cfg *cfg = s->cfg;
    sp_train_result *r = &s->r;
    if (s->overlap) {   /* every update in (evaluation, the end of training); the next epoch's */
        sp_engine_sync(s->e);   /* first uploads wait for the join (its last step's δW read a slot) */
        if (s->dev != SP_CPU) {
            sp_backend_allocator(s->dev)->release_staged(0);
            sp_backend_allocator(s->dev)->release_staged(1);
        }
    }
    check_weights(s);
    r->train_loss = s->epoch_steps ? s->epoch_loss / (double)s->epoch_steps : NAN;
    train_progress_show(&s->p, cfg->app, epoch, s->epochs, r->steps, r->last_loss,
                        s->busy > 0 ? s->images / s->busy : 0, true);
    if (s->test && cfg->eval_every == 0) {
        evaluate(s, epoch);
        train_progress_line(&s->p, "%s epoch %d: train loss %.4f, test loss %.4f acc %.4f", cfg->app, epoch + 1,
                            r->train_loss, r->test_loss, r->test_acc);
    } else {
        train_progress_line(&s->p, "%s epoch %d: train loss %.4f", cfg->app, epoch + 1, r->train_loss);
    }
}

/* After the last epoch: the final evaluation when due, the result's figures, the log closed. */
static void train_finish(train_run *s)
{
    const sp_train_cfg *cfg = s->cfg;
    sp_train_result *r = &s->r;
    long first = s->first;
    if (cfg->resume_path && first >= s->total) {
        /* a checkpoint of the run's last step (a job killed after its last save) or past it:
         * nothing is left to train; the result is the checkpoint's — its steps, its epoch's
         * mean loss, and the final evaluation the run ends with */
        train_progress_line(&s->p, "%s: --resume %s: saved after step %ld, this run has %ld: nothing left to train",
                            cfg->app, cfg->resume_path, first, s->total);
        r->epochs = s->resumed.epoch + 1;
        r->train_loss = s->resumed.batch ? s->resumed.epoch_loss / (double)s->resumed.batch : NAN;
        r->last_loss = NAN;
        if (s->test) {
            train_evaluate(&s->ev, s->m, s->test, cfg, &r->test_loss, &r->test_acc);
            if (!s->logged_eval)
                train_log_eval(s->log, r->steps, s->resumed.epoch, s->o, sp_now() - s->p.start, r->test_loss,
                               r->test_acc);
        }
    } else if (s->test && cfg->eval_every > 0 && r->steps % cfg->eval_every != 0) {
        evaluate(s, r->epochs - 1);
    }
    r->seconds = sp_now() - s->p.start;
    r->images_per_s = s->busy > 0 ? (double)s->images / s->busy : 0.0;
    bool ran = r->steps > first;   /* a resume past the limit ran nothing: no index past the arrays */
    r->forward_ms = ran ? median_ms(s->fwd + first, r->steps - first) : NAN;
    r->backward_ms = ran ? median_ms(s->bwd + first, r->steps - first) : NAN;
    r->step_ms = ran ? median_ms(s->all + first, r->steps - first) : NAN;
    if (s->log) {
        s->log = NULL;   /* ended, whatever the outcome */
        if (sp_out_commit(&s->logout) != SP_OK) sp_fail("%s", sp_last_error());
    }
}

/* The run itself, under sp_try: a failure (a non-finite loss, a failed save or log
 * write, a shape or label a layer refuses) is an sp_fail, which returns to sp_train. */
static void train_body(void *arg)
{
    train_run *s = arg;
    const sp_train_cfg *cfg = s->cfg;
    sp_train_result *r = &s->r;
    train_setup(s);
    step_fn step = choose_step(s);
    for (int epoch = s->resumed.epoch; epoch < s->epochs && r->steps < s->total; epoch++) {
        sp_loader_set_epoch(s->train, epoch);
        if (cfg->lr) sp_optim_set_lr(s->o, sp_lr_at(cfg->lr, epoch));
        s->epoch_loss = 0.0;
        s->epoch_steps = 0;
        sp_batch b;
        if (cfg->resume_path && epoch == s->resumed.epoch) {   /* the epoch's order; skip what was done */
            for (; s->epoch_steps < s->resumed.batch; s->epoch_steps++)
                if (!sp_loader_next(s->train, &b)) break;
            s->epoch_loss = s->resumed.epoch_loss;
        }
        r->epochs = epoch + 1;
        for (bool have = first_batch(s, &b); have; have = next_batch(s, &b)) {
            double f, bw, st;
            sp_device_counts before, after;
            sp_device_counts_get(s->dev, &before);
            float loss = step(s, &b, &f, &bw, &st);
            if (s->dev != SP_CPU) {   /* the backward's device time, where the step marked it */
                double ms = sp_backend_allocator(s->dev)->time_ms();
                if (ms >= 0) bw = ms / 1e3;
            }
            sp_device_counts_get(s->dev, &after);
            r->device_step = sp_device_counts_diff(&after, &before);
            if (!isfinite(loss))
                sp_fail("%s: loss became %g at step %ld (try a smaller --lr)", cfg->app ? cfg->app : "sp_train", loss,
                        r->steps);
            s->fwd[r->steps] = f;
            s->bwd[r->steps] = bw;
            s->all[r->steps] = st;
            s->busy += st;
            s->images += b.n;
            r->steps++;
            s->epoch_loss += loss;
            s->epoch_steps++;
            r->last_loss = loss;
            if (s->log)
                fprintf(s->log, "%ld,%d,%.9g,%.9g,%.6f,,\n", r->steps, epoch, loss, sp_optim_get_lr(s->o),
                        sp_now() - s->p.start);
            save_if_due(s, epoch);
            if (cfg->on_step) cfg->on_step(cfg->on_step_ctx, r->steps);
            train_progress_show(&s->p, cfg->app, epoch, s->epochs, r->steps, loss,
                                s->busy > 0 ? s->images / s->busy : 0, false);
            if (s->test && cfg->eval_every > 0 && r->steps % cfg->eval_every == 0) {
                if (s->overlap) sp_engine_sync(s->e);   /* every update in */
                evaluate(s, epoch);
                train_progress_line(&s->p, "%s step %ld: test loss %.4f acc %.4f", cfg->app, r->steps, r->test_loss,
                                    r->test_acc);
            }
        }
        end_epoch(s, epoch);
    }
    train_finish(s);
}

/* Frees what the run holds; after a failure also joins an engine's lanes still running
 * the failed step's tail and puts the model back in its mode. */
static void train_end(train_run *s, bool failed)
{
    if (failed) {
        if (s->overlap) sp_engine_sync(s->e);
        s->tapes[0].before_apply = s->tapes[1].before_apply = NULL;
        sp_model_set_training(s->m, s->was_training);
        if (s->log) sp_out_abort(&s->logout);   /* the file on disk stays as it was */
    }
    if (s->sg) {
        sp_step_graph_counts(s->sg, &s->r.graph_captures, &s->r.graph_replays);
        sp_step_graph_free(s->sg);
    }
    s->r.arena_bytes = s->t.arena.high_water + s->tapes[0].arena.high_water + s->tapes[1].arena.high_water;
    /* the evaluation tape's arena and one per output alive at once (eval_forward) */
    s->r.eval_arena_bytes = s->ev.l ? s->ev.t.arena.high_water : 0;
    for (int k = 0; s->ev.l && k < s->ev.nslots; k++) s->r.eval_arena_bytes += s->ev.slot[k].high_water;
    sp_tape_free(&s->t);
    sp_tape_free(&s->tapes[0]);
    sp_tape_free(&s->tapes[1]);
    train_evaluator_free(&s->ev);
    free(s->fwd);
    free(s->bwd);
    free(s->all);
    if (s->zero_in_step) sp_optim_set_zero_in_step(s->o, false);
    if (s->step_grads) sp_model_step_grads(s->m, false);   /* the buffers again, zeroed */
}

sp_train_result sp_train(sp_model *m, sp_engine *e, sp_optim *o, sp_loader *train, sp_dataset *test,
                         const sp_train_cfg *cfg)
{
    if (!m || !e || !o || !train || !cfg)
        return sp_error("sp_train: %s is NULL", !m ? "the model" : !e ? "the engine" : !o ? "the optimizer" :
                                                 !train ? "the loader" : "the configuration"), refused();
    if (check_cfg(cfg, test) != SP_OK) return refused();
    /* the optimizer steps the model's parameters: one built on another model, or before a
     * layer was added, would train nothing (or another model) and report success */
    for (int i = 0; i < m->nparams; i++) {
        bool held = false;
        for (int k = 0; k < o->nparams && !held; k++) held = o->params[k] == m->params[i];
        if (!held)
            return sp_error("%s: the optimizer does not hold parameter %s of model '%s' (expected an optimizer "
                            "built on this model's parameters, after its last layer was added)",
                            cfg->app ? cfg->app : "sp_train", m->params[i]->name, m->name), refused();
    }
    if (cfg->microbatches > 1 && model_device(m) != SP_CPU)
        return sp_error("%s: --microbatches %d without --parallel: gradient accumulation runs on the cpu (expected "
                        "--device cpu)", cfg->app ? cfg->app : "sp_train", cfg->microbatches), refused();
    /* The files first, before anything is allocated or trained: a bad path is a status. */
    if (cfg->save_path && sp_check_save_target(cfg->save_path) != SP_OK) return refused();
    /* sp_try's frame is below this one: s stays intact when a failure returns through it */
    train_run s = {.m = m, .e = e, .o = o, .train = train, .test = test, .cfg = cfg, .was_training = !m->eval,
                   .r = {.test_loss = NAN, .test_acc = NAN}};
    long per_epoch = sp_loader_nbatches(train);
    /* both limits: whichever comes first; steps alone: as many epochs as they need */
    long total = cfg->epochs > 0 ? per_epoch * cfg->epochs : cfg->steps;
    if (cfg->steps > 0 && cfg->steps < total) total = cfg->steps;
    s.per_epoch = per_epoch;
    s.total = total;
    s.epochs = (int)((total + per_epoch - 1) / per_epoch);
    sp_train_state *resumed = &s.resumed;
    if (cfg->resume_path) {
        if (sp_checkpoint_load(cfg->resume_path, m, o, resumed, cfg->run_meta) != SP_OK) return refused();
        if (resumed->batch > per_epoch)
            return sp_error("--resume %s: saved after batch %ld of an epoch of %ld batches (a different dataset?)",
                            cfg->resume_path, resumed->batch, per_epoch), refused();
        /* steps count from the start: epoch·(batches an epoch) + batch (a crafted 2^62 is not) */
        if (resumed->step != (long)resumed->epoch * per_epoch + resumed->batch)
            return sp_error("--resume %s: inconsistent training state: step %ld is not epoch %d x %ld batches + "
                            "batch %ld", cfg->resume_path, resumed->step, resumed->epoch, per_epoch, resumed->batch),
                   refused();
        s.r.steps = resumed->step;
    }
    if (train_log_open(&s.logout, cfg->log_path, cfg->resume_path ? resumed->step : -1, &s.logged_eval,
                       &s.log) != SP_OK)
        return refused();
    s.fwd = sp_xmalloc((size_t)(total + 1) * sizeof *s.fwd);   /* before the loop: no malloc per step */
    s.bwd = sp_xmalloc((size_t)(total + 1) * sizeof *s.bwd);
    s.all = sp_xmalloc((size_t)(total + 1) * sizeof *s.all);
    s.p = (progress){.tty = isatty(2), .quiet = cfg->quiet, .start = sp_now(), .total_steps = total};
    sp_tape_init(&s.t);
    sp_tape_init(&s.tapes[0]);
    sp_tape_init(&s.tapes[1]);
    s.first = s.r.steps;   /* the timing arrays are indexed by step */
    int status = sp_try(train_body, &s);
    train_end(&s, status != SP_OK);
    if (status != SP_OK) {   /* the steps done are reported; the message says what stopped the run */
        sp_train_result r = refused();
        r.steps = s.r.steps;
        r.epochs = s.r.epochs;
        return r;
    }
    return s.r;
}