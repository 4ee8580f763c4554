/* train.c — sp_train (train/train.h): the epochs and steps with the prefetching
 * loader, resumable checkpoints, evaluations when due, and the result's figures. One step
 * is train_step.c's, an evaluation train_eval.c's, the progress and the --log CSV
 * train_progress.c's (shared through train_internal.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "core/device.h"
#include "core/error.h"
#include "core/io/fileio.h"
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

/* One sp_train call: what it holds, so that a failure anywhere in the run (an sp_fail
 * inside a step, caught by sp_try) frees all of it. */
typedef struct train_run {
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
    bool overlap, zero_in_step, was_training;
} train_run;

/* The run itself, under sp_try: a failure (a non-finite loss, a failed save or log
 * write, a shape or label a layer refuses) is an sp_fail, which returns to sp_train. */
static void train_body(void *arg)
{
    train_run *s = arg;
    sp_model *m = s->m;
    sp_engine *e = s->e;
    sp_optim *o = s->o;
    sp_loader *train = s->train;
    sp_dataset *test = s->test;
    const sp_train_cfg *cfg = s->cfg;
    sp_train_result *r = &s->r;
    const sp_train_state resumed = s->resumed;
    long total = s->total, first = s->first;
    int epochs = s->epochs;
    double *fwd = s->fwd, *bwd = s->bwd, *all = s->all;
    FILE *log = s->log;
    if (test) train_evaluator_open(&s->ev, test, cfg->eval_batch, cfg);
    double busy = 0.0;
    long images = 0;
    sp_step_graph *sg = s->sg = cfg->cuda_graph && model_device(m) != SP_CPU ? sp_step_graph_new(m, e, o) : NULL;
    /* An engine that runs its backward asynchronously and the updates itself (ooo), without
     * the graph: step k+1's forward overlaps step k's last δW/U (on the CPU with two
     * threads or more: its lanes; docs/OOO.md) */
    bool overlap = s->overlap = !sg && !cfg->exec && cfg->microbatches <= 1 && e->backward_async && e->opts.update &&
                                (model_device(m) != SP_CPU || sp_get_threads() >= 2);
    /* On the CPU each update zeroes the gradient it read (in cache, same pass) and the
     * next step's zero_grad skips it: nothing writes a gradient in between here. */
    s->zero_in_step = model_device(m) == SP_CPU;
    if (s->zero_in_step) sp_optim_set_zero_in_step(o, true);
    if (!s->sg && model_device(m) == SP_CPU) {   /* every step joined before an evaluation (overlap: sync) */
        s->ev.idle[0] = &s->t;
        s->ev.idle[1] = &s->tapes[0];
        s->ev.idle[2] = &s->tapes[1];
    }

    for (int epoch = resumed.epoch; epoch < epochs && r->steps < total; epoch++) {
        sp_loader_set_epoch(train, epoch);
        if (cfg->lr) sp_optim_set_lr(o, sp_lr_at(cfg->lr, epoch));
        double epoch_loss = 0.0;
        long epoch_steps = 0;
        sp_batch b, nb = {0};
        if (cfg->resume_path && epoch == resumed.epoch) {   /* the epoch's order; skip what was done */
            for (; epoch_steps < resumed.batch; epoch_steps++)
                if (!sp_loader_next(train, &b)) break;
            epoch_loss = resumed.epoch_loss;
        }
        r->epochs = epoch + 1;
        /* On a device, batch k+1 goes up (pinned slot, copy stream) while step k runs:
         * step k is queued, the next batch fetched and staged, then step k's loss read. */
        sp_device dev = model_device(m);
        int slot = 0;
        bool have = r->steps < total && sp_loader_next(train, &b);
        sp_tensor xd = have && dev != SP_CPU ? stage_batch(dev, &b.x, slot) : b.x;
        const int *yd = have && sg ? sp_backend_allocator(dev)->stage_labels(slot, b.y, (size_t)b.n) : NULL;
        while (have) {
            double f, bw, st;
            float loss;
            bool next = false;
            if (dev == SP_CPU && overlap) {
                double t0 = sp_now();
                sp_tape *tp = &s->tapes[r->steps % 2];
                loss = sp_tensor_get(&train_step_queue_overlap(m, e, o, tp, &b.x, b.y, -1, &f, &bw)->out, 0);
                st = sp_now() - t0;
            } else if (dev == SP_CPU) {
                loss = cfg->exec                ? sp_exec_step(cfg->exec, &b.x, b.y, &f, &bw, &st)
                       : cfg->microbatches > 1 ? sp_train_step_accum(m, e, o, &s->t, &b.x, b.y, cfg->microbatches,
                                                                     &f, &bw, &st)
                                               : sp_train_step(m, e, o, &s->t, &b.x, b.y, &f, &bw, &st);
            } else {
                double t0 = sp_now();
                sp_backend_allocator(dev)->use_staged(slot);
                const sp_tensor *lt;
                if (sg) {
                    lt = sp_step_graph_step(sg, &s->t, &xd, b.y, yd);
                    f = sp_now() - t0;   /* queueing (or one launch); the backward inside */
                    bw = 0;
                } else if (overlap) {
                    lt = &train_step_queue_overlap(m, e, o, &s->tapes[r->steps % 2], &xd, b.y, slot ^ 1, &f, &bw)->out;
                } else {
                    lt = &train_step_queue(m, e, o, &s->t, &xd, b.y, &f, &bw)->out;
                }
                next = r->steps + 1 < total && sp_loader_next(train, &nb);   /* b.y stays valid: copied up */
                if (next) xd = stage_batch(dev, &nb.x, slot ^ 1);
                if (next && sg) yd = sp_backend_allocator(dev)->stage_labels(slot ^ 1, nb.y, (size_t)nb.n);
                loss = sp_tensor_get(lt, 0);
                st = sp_now() - t0;
            }
            if (!isfinite(loss))
                sp_fail("%s: loss became %g at step %ld (try a smaller --lr)", cfg->app ? cfg->app : "sp_train", loss,
                        r->steps);
            fwd[r->steps] = f;
            bwd[r->steps] = bw;
            all[r->steps] = st;
            busy += st;
            images += b.n;
            r->steps++;
            epoch_loss += loss;
            epoch_steps++;
            r->last_loss = loss;
            if (log)
                fprintf(log, "%ld,%d,%.9g,%.9g,%.6f,,\n", r->steps, epoch, loss, sp_optim_get_lr(o),
                        sp_now() - s->p.start);
            /* a checkpoint holds every update of the step: join the lanes first */
            if (overlap && cfg->save_every > 0 && (r->steps % cfg->save_every == 0 || r->steps == total))
                sp_engine_sync(e);
            if (cfg->save_every > 0 && (r->steps % cfg->save_every == 0 || r->steps == total) &&
                sp_checkpoint_save(cfg->save_path, m, o,
                                   &(sp_train_state){r->steps, epoch, epoch_steps, epoch_loss, sp_optim_get_lr(o)},
                                   cfg->run_meta) != SP_OK)
                sp_fail("%s", sp_last_error());
            if (log && cfg->save_every > 0 && (r->steps % cfg->save_every == 0 || r->steps == total))
                sp_check(sp_out_flush(&s->logout));
            if (cfg->on_step) cfg->on_step(cfg->on_step_ctx, r->steps);
            train_progress_show(&s->p, cfg->app, epoch, epochs, r->steps, loss, busy > 0 ? images / busy : 0, false);
            if (test && cfg->eval_every > 0 && r->steps % cfg->eval_every == 0) {
                if (overlap) sp_engine_sync(e);   /* every update in */
                train_evaluate(&s->ev, m, test, cfg, &r->test_loss, &r->test_acc);
                train_log_eval(log, r->steps, epoch, o, sp_now() - s->p.start, r->test_loss, r->test_acc);
                train_progress_line(&s->p, "%s step %ld: test loss %.4f acc %.4f", cfg->app, r->steps, r->test_loss,
                              r->test_acc);
            }
            if (dev == SP_CPU) {
                have = r->steps < total && sp_loader_next(train, &b);
            } else {
                have = next;
                b = nb;
                slot ^= 1;
            }
        }
        if (overlap) {   /* every update in (evaluation, the end of training); the next epoch's */
            sp_engine_sync(e);   /* first uploads wait for the join (its last step's δW read a slot) */
            if (dev != SP_CPU) {
                sp_backend_allocator(dev)->release_staged(0);
                sp_backend_allocator(dev)->release_staged(1);
            }
        }
        r->train_loss = epoch_steps ? epoch_loss / (double)epoch_steps : NAN;
        train_progress_show(&s->p, cfg->app, epoch, epochs, r->steps, r->last_loss, busy > 0 ? images / busy : 0, true);
        if (test && cfg->eval_every == 0) {
            train_evaluate(&s->ev, m, test, cfg, &r->test_loss, &r->test_acc);
            train_log_eval(log, r->steps, epoch, o, sp_now() - s->p.start, r->test_loss, r->test_acc);
            train_progress_line(&s->p, "%s epoch %d: train loss %.4f, test loss %.4f acc %.4f", cfg->app, epoch + 1,
                          r->train_loss, r->test_loss, r->test_acc);
        } else {
            train_progress_line(&s->p, "%s epoch %d: train loss %.4f", cfg->app, epoch + 1, r->train_loss);
        }
    }
    if (cfg->resume_path && first >= total) {
        /* a checkpoint of the run's last step (a job killed after its last save) or past it:
         * nothing is left to train; the result is the checkpoint's — its steps, its epoch's
         * mean loss, and the final evaluation the run ends with */
        train_progress_line(&s->p, "%s: --resume %s: saved after step %ld, this run has %ld: nothing left to train",
                      cfg->app, cfg->resume_path, first, total);
        r->epochs = resumed.epoch + 1;
        r->train_loss = resumed.batch ? resumed.epoch_loss / (double)resumed.batch : NAN;
        r->last_loss = NAN;
        if (test) {
            train_evaluate(&s->ev, m, test, cfg, &r->test_loss, &r->test_acc);
            if (!s->logged_eval)
                train_log_eval(log, r->steps, resumed.epoch, o, sp_now() - s->p.start, r->test_loss, r->test_acc);
        }
    } else if (test && cfg->eval_every > 0 && r->steps % cfg->eval_every != 0) {
        train_evaluate(&s->ev, m, test, cfg, &r->test_loss, &r->test_acc);
        train_log_eval(log, r->steps, r->epochs - 1, o, sp_now() - s->p.start, r->test_loss, r->test_acc);
    }
    r->seconds = sp_now() - s->p.start;
    r->images_per_s = busy > 0 ? (double)images / busy : 0.0;
    bool ran = r->steps > first;   /* a resume past the limit ran nothing: no index past the arrays */
    r->forward_ms = ran ? median_ms(fwd + first, r->steps - first) : NAN;
    r->backward_ms = ran ? median_ms(bwd + first, r->steps - first) : NAN;
    r->step_ms = ran ? median_ms(all + first, r->steps - first) : NAN;
    if (log) {
        s->log = NULL;   /* ended, whatever the outcome */
        if (sp_out_commit(&s->logout) != SP_OK) sp_fail("%s", sp_last_error());
    }
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
}

sp_train_result sp_train(sp_model *m, sp_engine *e, sp_optim *o, sp_loader *train, sp_dataset *test,
                         const sp_train_cfg *cfg)
{
    if (!m || !e || !o || !train || !cfg)
        return sp_error("sp_train: %s is NULL", !m ? "the model" : !e ? "the engine" : !o ? "the optimizer" :
                                                 !train ? "the loader" : "the configuration"), refused();
    if (check_cfg(cfg, test) != SP_OK) return refused();
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