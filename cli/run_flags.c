/* run_flags.c — the training runner's flags (cli/run.h): sp_run_opts'
 * defaults, the table of the common flags every training app may take (one line a flag;
 * `scope` says which apps) with the engines' own options as their descriptors declare
 * them, the checks that need more than the table (ranges, --plan's engine, the
 * checkpoint paths, before any data is read) and sp_run_parse. The parser itself is
 * flags.c's. */
#include <errno.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/guard.h"
#include "core/io/fileio.h"
#include "core/io/safetensors.h"
#include "schedulers/plan/actions.h"
#include "schedulers/exec/exec.h"
#include "cli/run.h"
#include "cli/run_internal.h"

void sp_run_defaults(sp_run_opts *o)
{
    if (!o) sp_fail("sp_run_defaults: argument 'o' is NULL");
    *o = (sp_run_opts){
        .optim = "sgd", .backward = SP_ENGINE_DEFAULT, .lr_schedule = "constant", .epochs = 1, .batch = 64,
        .threads = 2, .lr = 0.01, .momentum = 0.9f, .seed = 1, .device = "cpu", .partition = "cost",
        .bucket_mb = 25, .comm_timeout = 60, .prune_scope = "global", .step_sync = "post-validate",
    };
    for (int i = 0; sp_engine_def_at(i); i++)   /* each engine's own options: its defaults */
        if (sp_engine_def_at(i)->opts_size)
            memcpy(o->engine_opts[i].bytes, sp_engine_def_at(i)->opts_default, sp_engine_def_at(i)->opts_size);
}

const void *sp_run_engine_own(const sp_run_opts *o, const char *name)
{
    SP_GUARD(NULL);
    if (!o) sp_fail("sp_run_engine_own: argument 'o' is NULL");
    if (!name) sp_fail("sp_run_engine_own: argument 'name' is NULL");
    for (int i = 0; sp_engine_def_at(i); i++)
        if (sp_engine_def_at(i) == sp_engine_def_find(name)) return sp_engine_def_at(i)->opts_size ? &o->engine_opts[i] : NULL;
    return NULL;
}

int sp_run_engine_int(const sp_run_opts *o, const char *flag, int dflt)
{
    SP_GUARD(dflt);
    if (!o) sp_fail("sp_run_engine_int: argument 'o' is NULL");
    if (!flag) sp_fail("sp_run_engine_int: argument 'flag' is NULL");
    const sp_engine_def *d = sp_engine_def_find(o->backward);
    const unsigned char *own = sp_run_engine_own(o, o->backward);
    for (int j = 0; d && own && d->options[j].name; j++)
        if (d->options[j].kind == SP_ENGINE_OPT_INT && strcmp(d->options[j].name, flag) == 0)
            return *(const int *)(own + d->options[j].offset);
    return dflt;
}

/* The engines' own options (their descriptors' tables) as flags, under each engine's
 * heading: each needs --backward NAME, then what the option says; the value goes to o's
 * store of that engine's options struct. */
static int engine_flags(sp_run_opts *o, sp_flag *f, int cap)
{
    static const sp_flag_kind kinds[] = {[SP_ENGINE_OPT_STR] = SP_FLAG_STR, [SP_ENGINE_OPT_INT] = SP_FLAG_INT,
                                         [SP_ENGINE_OPT_LONG] = SP_FLAG_LONG};
    static char needs[SP_ENGINES_MAX][16][200];
    int n = 0;
    for (int i = 0; sp_engine_def_at(i); i++) {
        const sp_engine_def *d = sp_engine_def_at(i);
        for (int j = 0; d->options && d->options[j].name; j++) {
            const sp_engine_option *opt = &d->options[j];
            if (n >= cap || j >= 16) sp_fail("internal: too many engine options");
            snprintf(needs[i][j], sizeof needs[i][j], "backward=%s%s%s", d->name, opt->needs ? "," : "",
                     opt->needs ? opt->needs : "");
            f[n++] = (sp_flag){opt->name, kinds[opt->kind], o->engine_opts[i].bytes + opt->offset, opt->help,
                               .group = d->group, .choices = opt->choices, .range = opt->range, .meta = opt->meta,
                               .needs = needs[i][j], .scope = SP_SCOPE_ENGINE};
        }
    }
    return n;
}

#define G_TRAIN "training"
#define G_LOOP "epochs and logs (the epoch loop)"
#define G_CKPT "checkpoints (safetensors)"
#define G_DATA "data"
#define G_ENGINE "backward engine"
#define G_BPPSA "bppsa engine (with --backward bppsa)"
#define G_OOO "ooo engine (with --backward ooo)"
#define G_PAR "parallel training (run under mpirun -np W)"

/* --costs: every scheme with a stage placement that costs decide — not ddp / ddp-ooo,
 * whose order every cost gives — the action-list schemes included. */
static const char *costs_needs(void)
{
    static char buf[600];
    const char *names = sp_exec_scheme_names();
    int n = snprintf(buf, sizeof buf, "parallel=");
    for (const char *p = names; *p; p += strcspn(p, "|"), p += *p == '|') {
        int len = (int)strcspn(p, "|");
        if ((len == 3 && !strncmp(p, "ddp", 3)) || (len == 7 && !strncmp(p, "ddp-ooo", 7))) continue;
        n += snprintf(buf + n, sizeof buf - (size_t)n, "%s%.*s", n > 9 ? "|" : "", len, p);
    }
    return buf;
}

/* The common flags of the training apps; `scope` says which apps take each one. */
static int common_flags(sp_run_opts *o, sp_flag *f, int cap)
{
    sp_flag list[] = {
        {"data", SP_FLAG_STR, &o->data, "dataset directory (fashion-mnist: Debian's dataset-fashion-mnist if not given)",
         .group = G_DATA, .meta = "DIR", .scope = SP_SCOPE_IMAGES},
        {"data-format", SP_FLAG_STR, &o->data_format, "dataset format; all but fashion-mnist need --data",
         .group = G_DATA, .choices = sp_data_format_names(), .scope = SP_SCOPE_IMAGES},
        {"steps", SP_FLAG_LONG, &o->steps, "stop after N steps; with --epochs, whichever limit comes first; "
         "alone, as many epochs as it needs (0 = whole epochs)", .group = G_TRAIN, .range = "0..1000000000",
         .needs = "!eval-only", .scope = SP_SCOPE_RUN},
        {"batch", SP_FLAG_INT, &o->batch, "batch size (at most the training samples)", .group = G_TRAIN,
         .range = "1..", .scope = SP_SCOPE_RUN},
        {"lr", SP_FLAG_DOUBLE, &o->lr, "learning rate (> 0)", .group = G_TRAIN, .meta = "X", .needs = "!eval-only",
         .scope = SP_SCOPE_RUN},
        {"optim", SP_FLAG_STR, &o->optim, "optimizer", .group = G_TRAIN, .choices = "sgd|adam|adamw",
         .needs = "!eval-only", .scope = SP_SCOPE_RUN},
        {"momentum", SP_FLAG_DOUBLE, &o->momentum, "SGD momentum, in [0, 1)", .group = G_TRAIN, .meta = "X",
         .needs = "optim=sgd,!eval-only", .scope = SP_SCOPE_RUN},
        {"weight-decay", SP_FLAG_DOUBLE, &o->weight_decay, "L2 weight decay (decoupled with adamw)",
         .group = G_TRAIN, .meta = "X", .range = "0..", .needs = "!eval-only", .scope = SP_SCOPE_RUN},
        {"clip-grad-norm", SP_FLAG_DOUBLE, &o->clip_grad_norm, "clip the gradients' total 2-norm to X before "
         "each update, as torch.nn.utils.clip_grad_norm_ (0 = off; cpu)", .group = G_TRAIN, .meta = "X",
         .range = "0..", .needs = "!eval-only", .scope = SP_SCOPE_RUN},
        {"seed", SP_FLAG_U64, &o->seed, "random seed (init, shuffling, synthetic data)", .group = G_TRAIN,
         .scope = SP_SCOPE_RUN},
        {"threads", SP_FLAG_INT, &o->threads, "threads for everything, OpenBLAS included", .group = G_TRAIN,
         .range = "1..64", .scope = SP_SCOPE_RUN},
        {"quiet", SP_FLAG_BOOL, &o->quiet, "no progress output on stderr", .group = G_TRAIN, .scope = SP_SCOPE_RUN},
        {"device", SP_FLAG_STR, &o->device, "where the step runs; cuda needs a make CUDA=1 build, a GPU and "
         "--backward linear or ooo (docs/CUDA.md)", .group = G_TRAIN, .choices = "cpu|cuda", .needs = "!eval-only",
         .scope = SP_SCOPE_RUN},
        {"epochs", SP_FLAG_INT, &o->epochs, "training epochs; with --steps, whichever limit comes first",
         .group = G_LOOP, .range = "1..", .needs = "!eval-only", .scope = SP_SCOPE_LOOP},
        {"lr-schedule", SP_FLAG_STR, &o->lr_schedule, "per-epoch learning rate: constant | step:SIZE:GAMMA | "
         "cosine:TMAX[:MIN]", .group = G_LOOP, .meta = "SPEC", .needs = "!eval-only", .scope = SP_SCOPE_LOOP},
        {"no-shuffle", SP_FLAG_BOOL, &o->no_shuffle, "keep the dataset order", .group = G_LOOP,
         .needs = "!eval-only", .scope = SP_SCOPE_LOOP},
        {"eval-every", SP_FLAG_INT, &o->eval_every, "evaluate on the test set every N steps (0 = after each epoch)",
         .group = G_LOOP, .range = "0..", .needs = "!eval-only", .scope = SP_SCOPE_LOOP},
        {"eval-batch", SP_FLAG_INT, &o->eval_batch, "samples per evaluation batch; the results do not depend "
         "on it, the evaluation's memory does", .group = G_LOOP, .range = "1..", .def = "--batch",
         .scope = SP_SCOPE_LOOP},
        {"mem-report", SP_FLAG_BOOL, &o->mem_report, "add the run's memory to the JSON line: peak and "
         "steady-state RSS, parameters, gradients, optimizer state, tape arenas, dataset (docs/PERFORMANCE.md)",
         .group = G_LOOP, .needs = "!eval-only", .scope = SP_SCOPE_LOOP},
        {"log", SP_FLAG_STR, &o->log, "CSV log: step,epoch,loss,lr,seconds,test_loss,test_acc (a row per step; a row per evaluation, loss empty)", .group = G_LOOP,
         .meta = "FILE", .needs = "!eval-only", .scope = SP_SCOPE_LOOP},
        {"load", SP_FLAG_STR, &o->load, "initial weights (instead of the seeded init)", .group = G_CKPT,
         .meta = "FILE", .scope = SP_SCOPE_CKPT},
        {"save", SP_FLAG_STR, &o->save, "save the final weights (atomic replace)", .group = G_CKPT, .meta = "FILE",
         .scope = SP_SCOPE_CKPT},
        {"eval-only", SP_FLAG_BOOL, &o->eval_only, "evaluate the --load weights on the test set (eval mode), no "
         "training", .group = G_CKPT, .needs = "load,!save", .scope = SP_SCOPE_CKPT},
        {"save-every", SP_FLAG_LONG, &o->save_every, "also write a resumable checkpoint to --save every N steps "
         "(0 = off)", .group = G_CKPT, .meta = "N", .range = "0..", .needs = "save,!parallel", .scope = SP_SCOPE_CKPT},
        {"resume", SP_FLAG_STR, &o->resume, "continue the run of a --save-every checkpoint, bitwise as if "
         "uninterrupted", .group = G_CKPT, .meta = "FILE", .needs = "!load,!parallel", .scope = SP_SCOPE_CKPT},
        {"prune", SP_FLAG_DOUBLE, &o->prune, "magnitude-prune this fraction of the conv/linear weights after "
         "--load or init, then retrain with the masks kept (docs/BPPSA.md)", .group = G_CKPT, .meta = "X",
         .range = "0..", .needs = "!save-every,!resume,!parallel,!eval-only", .scope = SP_SCOPE_CKPT},
        {"prune-scope", SP_FLAG_STR, &o->prune_scope, "rank weights per layer or over all layers together",
         .group = G_CKPT, .choices = "layer|global", .needs = "prune", .scope = SP_SCOPE_CKPT},
        {"backward", SP_FLAG_STR, &o->backward, "backward engine", .group = G_ENGINE,
         .choices = sp_engine_names(), .aliases = sp_engine_aliases(), .needs = "!eval-only",
         .scope = SP_SCOPE_ENGINE},
        /* here: the engines' own options (engine_flags) */
        {"plan", SP_FLAG_BOOL, &o->plan, "print the scan plan's summary and exit without training "
         "(--plan=full: every step; with --parallel scan: the cross-rank levels) [needs --backward bppsa or "
         "--parallel scan]", .group = G_BPPSA, .choices = "summary|full", .value = &o->plan_arg,
         .needs = "!eval-only", .scope = SP_SCOPE_ENGINE},
        {"plan-svg", SP_FLAG_STR, &o->plan_svg, "draw the scan tree of a short chain to FILE and exit",
         .group = G_BPPSA, .meta = "FILE", .needs = "backward=bppsa", .scope = SP_SCOPE_ENGINE},
        {"trace", SP_FLAG_STR, &o->trace, "write a Chrome/Perfetto trace JSON (with --backward ooo or --parallel)",
         .group = G_OOO, .meta = "FILE", .needs = "!eval-only", .scope = SP_SCOPE_ENGINE},
        {"cuda-graph", SP_FLAG_BOOL, &o->cuda_graph, "capture the steady-state training step (forward, "
         "backward, updates) as a CUDA Graph once per shape, replay it each step (docs/CUDA.md)", .group = G_OOO, .needs = "backward=ooo,device=cuda,!trace",
         .scope = SP_SCOPE_ENGINE},
        {"parallel", SP_FLAG_STR, &o->parallel, "run the master schedule on the MPI ranks", .group = G_PAR,
         .choices = sp_exec_scheme_names(), .needs = "backward=linear|ooo,!eval-only",
         .scope = SP_SCOPE_RUN},
        {"microbatches", SP_FLAG_INT, &o->microbatches, "micro-batches B per step (0 = W, pipelines 2W); "
         "without --parallel: gradient accumulation over B micro-batches, one update (0 = 1)",
         .group = G_PAR, .range = "0..", .needs = "!eval-only", .scope = SP_SCOPE_RUN},
        {"sync-bn", SP_FLAG_BOOL, &o->sync_bn, "synchronized batch norm: mean and variance over the global batch "
         "(PyTorch's SyncBatchNorm; default: each rank's own)", .group = G_PAR,
         .needs = "parallel=ddp|fsdp|ddp-ooo", .scope = SP_SCOPE_RUN},
        {"groups", SP_FLAG_INT, &o->groups, "groups G of lpp/fslpp (W = G*R; 0 = 1)", .group = G_PAR,
         .range = "0..", .needs = "parallel=lpp|fslpp", .scope = SP_SCOPE_RUN},
        {"chunks", SP_FLAG_INT, &o->chunks, "chunks per rank of interleaved-1f1b / interleaved-zb / looped-bfs, "
         "zb-auto: 1, or 2 for the V (0 = the scheme's)",
         .group = G_PAR, .range = "0..", .needs = "parallel=interleaved-1f1b|interleaved-zb|looped-bfs|zb-auto", .scope = SP_SCOPE_RUN},
        {"mem-limit", SP_FLAG_STR, &o->mem_limit_arg, "zb-auto: peak activations per rank, N micro-batches of a "
         "chunk (0 = none) or bytes with a unit (512MiB, 1.5GB, 300KB)", .group = G_PAR, .meta = "N|BYTES",
         .needs = "parallel=zb-auto", .scope = SP_SCOPE_RUN},
        {"actions", SP_FLAG_STR, &o->actions, "per-rank action lists (CSV: 0F0,0I0,0W0,...) for --parallel custom",
         .group = G_PAR, .meta = "FILE", .needs = "parallel=custom", .scope = SP_SCOPE_RUN},
        {"partition", SP_FLAG_STR, &o->partition, "pipeline stages: by measured cost, or LayerPipe's Algorithm 1",
         .group = G_PAR, .choices = "cost|layerpipe", .needs = "parallel=gpipe|1f1b|ooo-ff|ooo-modulo|scan",
         .scope = SP_SCOPE_RUN},
        {"bucket-mb", SP_FLAG_DOUBLE, &o->bucket_mb, "gradient bucket size in MB (as PyTorch DDP)", .group = G_PAR,
         .meta = "X", .range = "0..", .needs = "parallel", .scope = SP_SCOPE_RUN},
        {"comm-timeout", SP_FLAG_DOUBLE, &o->comm_timeout, "seconds a rank waits for a peer before the job stops",
         .group = G_PAR, .meta = "X", .range = "0.001..", .needs = "parallel", .scope = SP_SCOPE_RUN},
        {"costs", SP_FLAG_STR, &o->costs, "stage costs CSV (as --costs-out writes) instead of measuring",
         .group = G_PAR, .meta = "FILE", .needs = costs_needs(), .scope = SP_SCOPE_RUN},
        {"costs-out", SP_FLAG_STR, &o->costs_out, "write the stage costs this run measured (for build/schedule --profile)",
         .group = G_PAR, .meta = "FILE", .needs = "parallel", .scope = SP_SCOPE_RUN},
        {"step-sync", SP_FLAG_STR, &o->step_sync, "the global gradient norm before the update: step eagerly and "
         "roll back when the clip triggers (zero-bubble's post-validation), or wait for it", .group = G_PAR,
         .choices = "post-validate|plain", .needs = "parallel,clip-grad-norm", .scope = SP_SCOPE_RUN},
        {"exec-order", SP_FLAG_STR, &o->exec_order, "write each rank's executed job order", .group = G_PAR,
         .meta = "FILE", .needs = "parallel", .scope = SP_SCOPE_RUN},
        {"comm-profile", SP_FLAG_STR, &o->comm_profile, "communication model (build/schedule --calibrate-comm's file) "
         "instead of the short probe at the start", .group = G_PAR, .meta = "FILE", .needs = "parallel",
         .scope = SP_SCOPE_RUN},
        {0},
    };
    int n = (int)(sizeof list / sizeof list[0]) - 1, at = 0;
    while (strcmp(list[at].name, "backward") != 0) at++;
    at++;   /* the engines' options follow --backward */
    if (n > cap) sp_fail("internal: too many common flags");
    memcpy(f, list, (size_t)at * sizeof *list);
    int ne = engine_flags(o, f + at, cap - n);
    memcpy(f + at + ne, list + at, (size_t)(n + 1 - at) * sizeof *list);
    return n + ne;
}

static void check_ranges(sp_run_opts *o)
{
    if (!(o->lr > 0)) sp_fail("--lr %g: expected > 0", o->lr);
    if (!(o->prune >= 0 && o->prune < 1)) sp_fail("--prune %g: expected a fraction in [0, 1)", o->prune);
    if (o->momentum < 0 || o->momentum >= 1) sp_fail("--momentum %g: expected in [0, 1)", o->momentum);
    if (sp_flag_given("step-sync") && !(o->clip_grad_norm > 0))
        sp_fail("--step-sync %s needs --clip-grad-norm > 0 (with no clip there is no norm to wait for)", o->step_sync);
    if (sp_flag_given("lr-schedule") && isnan(sp_lr_parse(o->lr_schedule, o->lr).lr0))
        sp_fail("%s", sp_last_error());   /* before any data is read */
    if (!o->data && sp_flag_given("data-format")) run_data_format(o);   /* one that needs --data */
    o->plan_full = o->plan_arg && strcmp(o->plan_arg, "full") == 0;
    if (o->mem_limit_arg && sp_mem_limit_parse("--mem-limit", o->mem_limit_arg, &o->mem_limit,
                                               &o->mem_limit_bytes) != SP_OK)
        sp_fail("%s", sp_last_error());
    /* what the engine can do (its registry entry), or what the executor does instead */
    unsigned caps = sp_engine_caps(o->backward);
    char names[256];
    if (o->plan && !(caps & SP_ENGINE_PLAN) && !(o->parallel && strcmp(o->parallel, "scan") == 0))
        sp_fail("--plan needs --backward %s or --parallel scan", sp_engine_names_with(SP_ENGINE_PLAN, names, sizeof names));
    for (int i = 0; sp_engine_def_at(i); i++)   /* each engine's options: what its flags set, checked */
        if (sp_engine_def_at(i)->finish)
            sp_engine_def_at(i)->finish(o->engine_opts[i].bytes, o->threads, strcmp(o->device, "cpu") != 0);
    if (o->trace && !(caps & SP_ENGINE_TRACE) && !o->parallel)
        sp_fail("--trace needs --backward %s or --parallel", sp_engine_names_with(SP_ENGINE_TRACE, names, sizeof names));
    /* checkpoint files refused before any data is read or any step is run */
    if (o->load) sp_st_close(sp_check_ptr(sp_st_open(o->load)));
    if (o->save) sp_check(sp_check_save_target(o->save));
    if (o->parallel) {   /* rank 0 writes these after training: refuse a path it cannot write now */
        const char *outs[][2] = {{"log", o->log}, {"trace", o->trace}, {"costs-out", o->costs_out},
                                 {"exec-order", o->exec_order}};
        for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
            if (outs[i][1] && sp_check_save_target(outs[i][1]) != SP_OK)
                sp_fail("--%s: %s", outs[i][0], sp_last_error());
    }
    /* --steps alone runs as many epochs as it needs; with --epochs, whichever comes first */
    if (o->steps > 0 && !sp_flag_given("epochs")) o->epochs = 0;
}

void sp_run_parse(int argc, char **argv, const char *app, const char *summary, sp_run_opts *o, unsigned scopes,
                  sp_flag *extra)
{
    if (argc < 0) sp_fail("sp_run_parse: argument 'argc' is %d (expected >= 0)", argc);
    if (!argv) sp_fail("sp_run_parse: argument 'argv' is NULL");
    if (!app) sp_fail("sp_run_parse: argument 'app' is NULL");
    if (!summary) sp_fail("sp_run_parse: argument 'summary' is NULL");
    if (!o) sp_fail("sp_run_parse: argument 'o' is NULL");
    static sp_flag common[64], set[128];
    int nc = common_flags(o, common, 64), n = 0;
    for (const sp_flag *f = extra; f && f->name; f++) {
        if (n + 1 >= 128) sp_fail("internal: too many flags");
        set[n++] = *f;
    }
    for (int i = 0; i < nc; i++)
        if (!common[i].scope || (common[i].scope & scopes)) {
            if (n + 1 >= 128) sp_fail("internal: too many flags");
            set[n++] = common[i];
        }
    set[n] = (sp_flag){0};
    sp_flags_parse_among(argc, argv, app, summary, set, common);
    for (int i = 0; i < n; i++)   /* the app's table learns which of its flags were given */
        for (sp_flag *f = extra; f && f->name; f++)
            if (strcmp(f->name, set[i].name) == 0) f->set = set[i].set;
    sp_flags_quiet_begin();   /* under mpirun a refusal is rank 0's line */
    check_ranges(o);
    sp_flags_quiet_end();
    if (o->parallel) sp_open_record(true);   /* the files read before the ranks agree (run_parallel.c) */
    /* Started by mpirun (Open MPI's environment; MPI itself starts only with --parallel):
     * without --parallel every rank would train alone and print its own JSON line. Rank 0
     * says so; the others leave quietly, so that the line is printed once and mpirun's
     * status is rank 0's. */
    const char *np = getenv("OMPI_COMM_WORLD_SIZE"), *rank = getenv("OMPI_COMM_WORLD_RANK");
    if (!o->parallel && np && atoi(np) > 1) {
        if (rank && atoi(rank) != 0) exit(0);
        sp_fail("%s: started by mpirun with %s ranks but without --parallel: each rank would train alone (add "
                "--parallel ddp or another scheme, or run without mpirun)", app, np);
    }
}

