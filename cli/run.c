/* run.c — the training runner (cli/run.h): the engine, its plan and the
 * device; the pieces of a run (sp_run_session: engine, optimizer, device and executor
 * around sp_train) and sp_run, which reads a rank's rows, trains, saves and prints the
 * JSON line. The flags are run_flags.c's, the image datasets run_data.c's, --parallel's
 * set-up run_parallel.c's (shared through run_internal.h). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__   /* defined by the headers above */
#include <malloc.h>
#endif
#include "cli/run.h"
#ifdef SP_HAVE_CUDA
#include "core/kernels/cuda.h"
#include "cli/cuda_start.h"
#endif
#include "core/device.h"
#include "core/error.h"
#include "core/io/model_io.h"
#include "core/threads.h"
#include "optim/optim.h"
#include "optim/prune.h"
#include "schedulers/sim/comm_cost.h"
#include "schedulers/exec/exec.h"
#include "cli/run_internal.h"

/* ---- the engine, its plan and the device ------------------------------------------------- */

/* U_i of an engine that runs the updates itself (SP_ENGINE_LAYER_UPDATES): the optimizer
 * step of one layer's parameters. */
static void update_layer(void *ctx, sp_layer *l) { sp_optim_step_params(ctx, l->params, l->nparams); }

sp_engine_opts sp_run_engine_opts(const sp_run_opts *o)
{
    if (!o) sp_fail("sp_run_engine_opts: argument 'o' is NULL");
    return (sp_engine_opts){.own = sp_run_engine_own(o, o->backward),
                            .trace_path = o->trace,
                            .plan = o->plan,
                            .plan_full = o->plan_full,
                            .plan_svg = o->plan_svg};
}

/* --plan / --plan-svg: a plan-only engine prints its plan for the first batch (and
 * draws it), then the JSON line carries the plan's figures. Nothing trains. */
static void plan_only(const char *app, const sp_run_opts *o, sp_model *m, const sp_tensor *x, const int *y)
{
    sp_engine_opts eo = sp_run_engine_opts(o);
    eo.plan = o->plan || !o->plan_svg;
    eo.plan_only = true;
    sp_engine *e = sp_check_ptr(sp_engine_create(o->backward, &eo));
    sp_json j;
    sp_json_begin(&j);
    sp_json_str(&j, "app", app);
    sp_json_str(&j, "backward", o->backward);
    sp_json_str(&j, "mode", "plan");
    sp_report_writer w = sp_json_writer(&j);
    if (!sp_engine_plan(e, m, x, y, &w)) sp_fail("%s: --plan: no plan was made", app);
    sp_check(sp_json_end_print(&j));
    sp_engine_destroy(e);
}

void sp_run_use_device(const sp_run_opts *o, sp_model *m)
{
    if (!o) sp_fail("sp_run_use_device: argument 'o' is NULL");
    if (!m) sp_fail("sp_run_use_device: argument 'm' is NULL");
    if (strcmp(o->device, "cuda") != 0) return;
    char names[256];
    if (!(sp_engine_caps(o->backward) & SP_ENGINE_DEVICE))
        sp_fail("--device cuda needs --backward %s (the %s engine runs on the CPU)",
                sp_engine_names_with(SP_ENGINE_DEVICE, names, sizeof names), o->backward);
    if (o->parallel) sp_fail("--device cuda with --parallel %s: the parallel schedules run on the CPU", o->parallel);
    if (o->clip_grad_norm > 0) sp_fail("--device cuda with --clip-grad-norm: the clip reads the gradients on the CPU");
    if (o->resume || o->save_every > 0)
        sp_fail("--device cuda with --%s: resumable checkpoints are written during training from host tensors "
                "(expected --save, which saves at the end)", o->resume ? "resume" : "save-every");
    for (int i = 0; i < m->nparams; i++)
        if (m->params[i]->mask)
            sp_fail("--device cuda: %s is pruned (masks are applied on the host; train pruned models on the CPU)",
                    m->params[i]->name);
#ifdef SP_HAVE_CUDA
    const char *why = NULL;
    if (sp_cuda_device_count(&why) == 0) sp_fail("--device cuda: no CUDA device (%s)", why);
    sp_cuda_start(0);
    sp_model_to_device(m, SP_CUDA);
#else
    (void)m;
    sp_fail("--device cuda: this build has no CUDA backend (rebuild with make CUDA=1)");
#endif
}

void sp_run_device_to_host(sp_model *m)
{
    if (!m) sp_fail("sp_run_device_to_host: argument 'm' is NULL");
#ifdef SP_HAVE_CUDA
    if (m->nparams && m->params[0]->value.device != SP_CPU) sp_model_to_device(m, SP_CPU);
#else
    (void)m;
#endif
}

/* ---- the pieces of a run (sp_run_session) ------------------------------------------------ */

/* sp_run_open, with the datasets the ranks compare (NULL: the samples' shape only). */
static void open_session(sp_run_session *s, const char *app, const sp_run_opts *o, sp_model *m, const sp_tensor *x1,
                         const int *y1, const sp_dataset *train, const sp_dataset *test)
{
    *s = (sp_run_session){.app = app, .o = o, .m = m};
    sp_engine_opts eo = sp_run_engine_opts(o);
    s->engine = sp_check_ptr(sp_engine_create(o->backward, &eo));
    if (o->cuda_graph) sp_engine_set_graph(s->engine, true);   /* sp_train replaces it by the step's */
    if (o->load) sp_check(sp_prune_load(m, o->load, &s->pruning));   /* plain or torch-pruned checkpoints */
    else sp_model_init(m, o->seed);   /* --resume overwrites it in sp_train */
    if (o->prune > 0)
        s->pruning = sp_prune_magnitude(m, s->pruning, o->prune,
                                        strcmp(o->prune_scope, "layer") == 0 ? SP_PRUNE_LAYER : SP_PRUNE_GLOBAL);
    sp_run_use_device(o, m);   /* checkpoints load and save on the host; the step runs on --device */
    sp_engine_check(s->engine, m, x1, y1);   /* what the engine would clamp silently */
    sp_optim_cfg cfg = sp_optim_cfg_default();
    cfg.lr = o->lr;
    cfg.momentum = o->momentum;
    cfg.weight_decay = o->weight_decay;
    s->optim = sp_check_ptr(sp_optim_create(o->optim, m->params, m->nparams, &cfg));
    sp_optim_set_clip_grad_norm(s->optim, o->clip_grad_norm);   /* sp_optim_step clips; the executor its own way */
    s->exec = run_exec_new(app, o, m, s->optim, train, test, x1->ndim - 1, x1->shape + 1, &s->comm);
}

void sp_run_open(sp_run_session *s, const char *app, const sp_run_opts *o, sp_model *m, const sp_tensor *x1,
                 const int *y1)
{
    if (!s) sp_fail("sp_run_open: argument 's' is NULL");
    if (!app) sp_fail("sp_run_open: argument 'app' is NULL");
    if (!o) sp_fail("sp_run_open: argument 'o' is NULL");
    if (!m) sp_fail("sp_run_open: argument 'm' is NULL");
    open_session(s, app, o, m, x1, y1, NULL, NULL);
}

bool sp_run_plan(sp_run_session *s, const sp_tensor *x, const int *y)
{
    if (!s) sp_fail("sp_run_plan: argument 's' is NULL");
    if (!x) sp_fail("sp_run_plan: argument 'x' is NULL");
    if (!(s->o->plan || s->o->plan_svg) || s->o->parallel) return false;   /* --parallel scan: sp_run_open */
    plan_only(s->app, s->o, s->m, x, y);
    return true;
}

float sp_run_step(sp_run_session *s, sp_tape *t, const sp_tensor *x, const int *y)
{
    if (!s) sp_fail("sp_run_step: argument 's' is NULL");
    if (!t) sp_fail("sp_run_step: argument 't' is NULL");
    if (!x) sp_fail("sp_run_step: argument 'x' is NULL");
    if (s->exec) return sp_exec_step(s->exec, x, y, NULL, NULL, NULL);
    if (s->o->microbatches > 1)   /* gradient accumulation (train/train_accum.c) */
        return sp_train_step_accum(s->m, s->engine, s->optim, t, x, y, s->o->microbatches, NULL, NULL, NULL);
    float loss = sp_train_step(s->m, s->engine, s->optim, t, x, y, NULL, NULL, NULL);
    if (isnan(loss) && sp_last_error()[0]) sp_fail("%s", sp_last_error());   /* a refused batch: its line */
    return loss;
}

bool sp_run_prints(const sp_run_session *s)
{
    if (!s) sp_fail("sp_run_prints: argument 's' is NULL");
    return !s->exec || sp_exec_rank(s->exec) == 0;
}

void sp_run_save(sp_run_session *s)
{
    if (!s) sp_fail("sp_run_save: argument 's' is NULL");
    sp_run_device_to_host(s->m);
    const sp_run_opts *o = s->o;
    if (s->exec && o->save) sp_exec_sync_weights(s->exec);
    if (o->save && o->save_every == 0 && sp_run_prints(s)) {   /* else sp_train saved */
        if (s->pruning) sp_check(sp_prune_save(s->pruning, s->m, o->save));
        else sp_check(sp_model_save(s->m, o->save));
    }
}

void sp_run_close(sp_run_session *s, sp_json *j)
{
    if (!s) sp_fail("sp_run_close: argument 's' is NULL");
    if (j) {
        sp_run_summary_exec(s, j);
        if (sp_run_prints(s)) sp_check(sp_json_end_print(j));
    }
    run_exec_end(s->exec);
    sp_comm_model_free(s->comm);
    sp_optim_free(s->optim);
    sp_engine_destroy(s->engine);
    sp_prune_free(s->pruning);
    *s = (sp_run_session){0};
}

/* ---- the runner --------------------------------------------------------------------------- */

/* A dataset opened for rows (else nothing happens): read the rows flagged in keep (NULL:
 * all); last: the files are checked to their end and closed. */
static void read_rows(sp_dataset *d, const unsigned char *keep, bool last)
{
    if (d && d->read_rows) sp_check(sp_dataset_read_rows(d, keep, last));
}

/* --eval-only: the loaded weights on d in eval mode; the JSON line says what was run. */
static sp_train_result eval_only(const char *app, const sp_run_opts *o, sp_model *m, sp_dataset *d)
{
    sp_train_result r = {.train_loss = NAN, .last_loss = NAN};
    double t0 = sp_now();
    sp_check(sp_evaluate(m, d, o->eval_batch ? o->eval_batch : o->batch, &r.test_loss, &r.test_acc));
    r.seconds = sp_now() - t0;
    sp_json j;
    sp_json_begin(&j);
    sp_json_str(&j, "app", app);
    sp_json_str(&j, "mode", "eval-only");
    sp_json_str(&j, "load", o->load);
    sp_json_str(&j, "dataset", d->name);
    sp_json_int(&j, "samples", d->n);
    sp_json_int(&j, "threads", o->threads);
    sp_json_num(&j, "test_loss", r.test_loss);
    sp_json_num(&j, "test_acc", r.test_acc);
    sp_json_num(&j, "seconds", r.seconds);
    sp_check(sp_json_end_print(&j));
    return r;
}

/* A dataset's sample shape as "28x28". */
static const char *dims(const sp_dataset *d, char *out, size_t len)
{
    out[0] = 0;
    for (int i = 0, n = 0; i < d->ndim && n < (int)len; i++)
        n += snprintf(out + n, len - (size_t)n, i ? "x%d" : "%d", d->shape[i]);
    return out;
}

/* The training set's identity for a resume's check: its name (path or synthetic recipe),
 * sample count, sample shape, classes and a hash of three samples (first, middle, last;
 * cheap for any size) with their labels. */
static void data_identity(sp_dataset *d, char *out, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    float *x = sp_xmalloc(sp_dataset_sample_numel(d) * sizeof *x);
    int at[3] = {0, d->n / 2, d->n - 1};
    for (int k = 0; k < 3 && d->n > 0; k++) {
        int y;
        sp_dataset_get(d, at[k], x, &y);
        const unsigned char *b = (const unsigned char *)x;
        for (size_t i = 0; i < sp_dataset_sample_numel(d) * sizeof *x; i++) h = (h ^ b[i]) * 0x100000001b3ull;
        h = (h ^ (uint64_t)(uint32_t)y) * 0x100000001b3ull;
    }
    free(x);
    char shape[64];
    snprintf(out, len, "%s (%d samples of %s, %d classes, hash %016llx)", d->name, d->n, dims(d, shape, sizeof shape),
             d->nclasses, (unsigned long long)h);
}

/* --mem-report: the resident set after each step (the last one is kept: after warm-up,
 * before the final evaluation); about 20 µs a step, only when asked. */
static void rss_probe(void *ctx, long steps)
{
    (void)steps;
    *(long *)ctx = sp_rss_kib();
}

/* glibc serves a block of >= 128 KiB by mmap until one such block is freed; then it raises
 * that bound to the freed block's size (up to 32 MiB) and later blocks of that size come from
 * the heap, where they fragment: oneDNN's buffers of 1.5 and 2.6 MiB, taken and freed in each
 * step, grew VGG-11 b32's resident set by 18-31 MiB over six steps (issue 29). A fixed bound
 * of 1 MiB keeps them mmapped (returned whole when freed); a step allocates nothing of ours. */
static void heap_bound(void)
{
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
#endif
}

sp_train_result sp_run(const char *app, const sp_run_opts *o, sp_model *m, sp_dataset *train, sp_dataset *test)
{
    heap_bound();
    if (!app) sp_fail("sp_run: argument 'app' is NULL");
    if (!o) sp_fail("sp_run: argument 'o' is NULL");
    if (!m) sp_fail("sp_run: argument 'm' is NULL");
    if (!train) sp_fail("sp_run: argument 'train' is NULL");
    if (o->eval_only) {   /* --load is required by the flags */
        sp_check(sp_model_load(m, o->load));
        read_rows(test ? test : train, NULL, true);
        return eval_only(app, o, m, test ? test : train);
    }
    if (o->batch > train->n)
        sp_fail("--batch %d exceeds the %d training samples of %s", o->batch, train->n, train->name);
    if (test) {   /* found now, not at the first evaluation after training */
        bool same = test->ndim == train->ndim;
        for (int i = 0; same && i < train->ndim; i++) same = test->shape[i] == train->shape[i];
        char a[64], b[64];
        if (!same)
            sp_fail("the test set %s has samples of %s, the training set %s has %s (expected the same shape)",
                    test->name, dims(test, a, sizeof a), train->name, dims(train, b, sizeof b));
    }
    sp_lr_schedule sched = sp_lr_parse(o->lr_schedule, o->lr);
    if (isnan(sched.lr0)) sp_fail("%s", sp_last_error());
    sp_run_session s;
    /* A dataset opened for rows (--parallel) holds no row yet; which rows this rank reads
     * is known once the session is: sample 0 now (the session is checked on it), the
     * others below, in one more pass (a .gz is inflated once, from where this stopped). */
    unsigned char *keep = train->read_rows ? sp_xcalloc((size_t)train->n, 1) : NULL;
    if (keep) {
        keep[0] = SP_LOADER_X;
        read_rows(train, keep, false);
    }
    {   /* the engine options are checked against the model on one sample */
        sp_loader *one = sp_check_ptr(sp_loader_new_sync(train, 1, false, 0, false));
        sp_batch b;
        sp_loader_next(one, &b);
        open_session(&s, app, o, m, &b.x, b.y, train, test);
        sp_loader_free(one);
    }
    if ((o->plan || o->plan_svg) && !o->parallel) {   /* the plan of the first batch; nothing trains */
        if (keep) {   /* the first batch, in file order */
            sp_check(sp_loader_rows(train, o->batch, false, o->seed, false, NULL, 1, keep));
            read_rows(train, keep, true);
        }
        sp_loader *l = sp_check_ptr(sp_loader_new_sync(train, o->batch, false, o->seed, false));
        sp_batch b;
        if (!sp_loader_next(l, &b)) sp_fail("%s: --plan: the training set is empty", app);
        sp_run_plan(&s, &b.x, b.y);
        sp_loader_free(l);
        sp_run_close(&s, NULL);
        free(keep);
        return (sp_train_result){0};
    }
    /* (not with a clip: every update waits for the whole gradient's norm; the linear
     * engine's walk updates on the cpu: its gradients then live in the step, sp_train) */
    bool on_cpu = m->nparams == 0 || m->params[0]->value.device == SP_CPU;
    if (!s.exec && (s.engine->caps & SP_ENGINE_LAYER_UPDATES) && !(o->clip_grad_norm > 0) &&
        (on_cpu || !(s.engine->caps & SP_ENGINE_STEP_GRADS))) {   /* U_i as the engine's tasks (ooo: sub lane; linear: its walk) */
        s.engine->opts.update = update_layer;
        s.engine->opts.update_ctx = s.optim;
    }
    /* Parallel: every batch splits into the micro-batches (a short last batch is dropped). */
    unsigned char *need = NULL;   /* parallel: the rows of each batch this rank reads */
    if (s.exec) {
        need = sp_xmalloc((size_t)o->batch);
        sp_exec_rows_needed(s.exec, o->batch, need);
    }
    if (keep) {   /* the rows the loader will read over the run, and data_identity's three */
        long per_epoch = train->n / o->batch + (s.exec == NULL && train->n % o->batch != 0);
        long total = o->epochs > 0 ? per_epoch * o->epochs : o->steps;   /* as sp_train counts them */
        if (o->steps > 0 && o->steps < total) total = o->steps;
        sp_check(sp_loader_rows(train, o->batch, !o->no_shuffle, o->seed, s.exec != NULL, need, total, keep));
        keep[train->n / 2] |= SP_LOADER_X;
        keep[train->n - 1] |= SP_LOADER_X;
        read_rows(train, keep, true);
        free(keep);
    }
    if (test && test->read_rows) {   /* with ranks, rank r evaluates [r·n/W, (r+1)·n/W) (train_eval.c) */
        unsigned char *tk = sp_xcalloc((size_t)test->n, 1);
        int W = s.exec ? sp_exec_workers(s.exec) : 1, r = s.exec ? sp_exec_rank(s.exec) : 0;
        for (int i = (int)((long)test->n * r / W); i < (int)((long)test->n * (r + 1) / W); i++) tk[i] = SP_LOADER_X;
        read_rows(test, tk, true);
        free(tk);
    }
    /* the next batch in a thread of its own only where a core is free for it; else in
     * the stepping thread (the same batches either way) */
    sp_loader *loader = sp_check_ptr((sp_parallel_spare_core() ? sp_loader_new_rows : sp_loader_new_rows_sync)(
        train, o->batch, !o->no_shuffle, o->seed, s.exec != NULL, need));
    free(need);
    sp_train_cfg tc = {.app = app,
                       .epochs = o->epochs,
                       .steps = o->steps,
                       .eval_every = o->eval_every,
                       .eval_batch = o->eval_batch ? o->eval_batch : o->batch,   /* the step's memory bounds the evaluation's */
                       .log_path = sp_run_prints(&s) ? o->log : NULL,   /* rank 0 writes the log */
                       .lr = &sched,
                       .quiet = o->quiet || !sp_run_prints(&s),
                       .exec = s.exec,
                       .save_every = o->save_every,
                       .save_path = o->save,
                       .resume_path = o->resume,
                       .cuda_graph = o->cuda_graph,
                       .microbatches = s.exec ? 0 : o->microbatches};
    /* What decides a run's numbers: a resume must match (train/checkpoint.h). */
    char lr[32], mom[32], wd[32], batch[16], seed[24];
    snprintf(lr, sizeof lr, "%.17g", o->lr);
    snprintf(mom, sizeof mom, "%.17g", o->momentum);
    snprintf(wd, sizeof wd, "%.17g", o->weight_decay);
    snprintf(batch, sizeof batch, "%d", o->batch);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)o->seed);
    char data[512];
    data_identity(train, data, sizeof data);
    const char *run_meta[] = {"lr", lr, "lr-schedule", o->lr_schedule, "momentum", mom, "weight-decay", wd,
                              "batch", batch, "seed", seed, "no-shuffle", o->no_shuffle ? "yes" : "no",
                              "dataset", data, NULL};
    tc.run_meta = run_meta;
    long rss_steady = -1;
    if (o->mem_report) tc.on_step = rss_probe, tc.on_step_ctx = &rss_steady;
    sp_train_result r = sp_train(m, s.engine, s.optim, loader, test, &tc);
    sp_check(r.status);
    sp_run_save(&s);
    sp_json j;
    sp_run_summary_train(&s, &j, &r, sp_loader_batch(loader), train);
    if (s.exec) sp_run_summary_data(&j, loader, train, test);
    if (o->mem_report) sp_run_summary_memory(&s, &j, &r, train, test, rss_steady);
    sp_run_close(&s, &j);
    sp_loader_free(loader);
    return r;
}
