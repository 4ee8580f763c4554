/* run.c — the training runner (schedulers/train/run.h): the common flags, the datasets of the
 * image apps, the engine, optimizer, device and executor around sp_train, the plan. */
#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include "schedulers/train/run.h"
#ifdef SP_HAVE_CUDA
#include "core/kernels/cuda.h"
#include "schedulers/train/cuda_start.h"
#endif
#include "core/comm/comm.h"
#include "core/device.h"
#include "core/error.h"
#include "core/io/fileio.h"
#include "core/io/safetensors.h"
#include "core/io/model_io.h"
#include "core/parallel.h"
#include "optim/optim.h"
#include "optim/prune.h"
#include "schedulers/parallel/actions.h"
#include "schedulers/parallel/comm_model.h"
#include "schedulers/parallel/exec.h"

void sp_run_defaults(sp_run_opts *o)
{
    if (!o) sp_fail("sp_run_defaults: argument 'o' is NULL");
    sp_engine_opts eo = sp_engine_opts_default();
    *o = (sp_run_opts){
        .optim = "sgd", .backward = SP_ENGINE_DEFAULT, .lr_schedule = "constant", .epochs = 1, .batch = 64,
        .threads = 2, .lr = 0.01, .momentum = 0.9f, .seed = 1, .scan_levels = eo.scan_levels, .order = eo.order,
        .k = eo.k, .scan_levels_arg = "full", .device = "cpu", .partition = "cost", .bucket_mb = 25, .comm_timeout = 60,
        .prune_scope = "global", .lanes = "auto", .step_sync = "post-validate",
    };
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
        {"data-format", SP_FLAG_STR, &o->data_format, "dataset format; mnist, cifar10 and folder need --data",
         .group = G_DATA, .choices = "fashion-mnist|mnist|idx|cifar10|folder", .scope = SP_SCOPE_IMAGES},
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
         .choices = sp_engine_names(), .needs = "!eval-only", .scope = SP_SCOPE_ENGINE},
        {"scan-levels", SP_FLAG_STR, &o->scan_levels_arg, "up-sweep levels: 0 (= linear BP) .. the model's "
         "full depth, full, or auto (the plan's cost model picks; docs/BPPSA.md)", .group = G_BPPSA,
         .meta = "N|full|auto", .needs = "backward=bppsa", .scope = SP_SCOPE_ENGINE},
        {"plan", SP_FLAG_BOOL, &o->plan, "print the scan plan's summary and exit without training "
         "(--plan=full: every step; with --parallel scan: the cross-rank levels) [needs --backward bppsa or "
         "--parallel scan]", .group = G_BPPSA, .choices = "summary|full", .value = &o->plan_arg,
         .needs = "!eval-only", .scope = SP_SCOPE_ENGINE},
        {"plan-svg", SP_FLAG_STR, &o->plan_svg, "draw the scan tree of a short chain to FILE and exit",
         .group = G_BPPSA, .meta = "FILE", .needs = "backward=bppsa", .scope = SP_SCOPE_ENGINE},
        {"order", SP_FLAG_STR, &o->order, "task order of the two lanes", .group = G_OOO,
         .choices = "conventional|ooo|reverse-first-k|list", .needs = "backward=ooo,!eval-only",
         .scope = SP_SCOPE_ENGINE},
        {"k", SP_FLAG_INT, &o->k, "layers in reverse-first order (0 = half the parameterised layers)",
         .group = G_OOO, .range = "0..", .needs = "backward=ooo,order=reverse-first-k,!eval-only",
         .scope = SP_SCOPE_ENGINE},
        {"lanes", SP_FLAG_STR, &o->lanes, "lanes the backward runs on (auto: one or two, whichever "
         "the executor measures faster; 2 needs --threads 2 or more; docs/OOO.md)", .group = G_OOO,
         .choices = "1|2|auto", .needs = "backward=ooo,!parallel,!eval-only", .scope = SP_SCOPE_ENGINE},
        {"mem-cap", SP_FLAG_LONG, &o->mem_cap, "memory cap of the backward pass in bytes (0 = none)",
         .group = G_OOO, .meta = "BYTES", .range = "0..", .needs = "backward=ooo,!parallel,!eval-only", .scope = SP_SCOPE_ENGINE},
        {"trace", SP_FLAG_STR, &o->trace, "write a Chrome/Perfetto trace JSON (with --backward ooo or --parallel)",
         .group = G_OOO, .meta = "FILE", .needs = "!eval-only", .scope = SP_SCOPE_ENGINE},
        {"cuda-graph", SP_FLAG_BOOL, &o->cuda_graph, "capture the steady-state training step (forward, "
         "backward, updates) as a CUDA Graph once per shape, replay it each step (docs/CUDA.md)", .group = G_OOO, .needs = "backward=ooo,device=cuda,!trace",
         .scope = SP_SCOPE_ENGINE},
        {"parallel", SP_FLAG_STR, &o->parallel, "run the master schedule on the MPI ranks", .group = G_PAR,
         .choices = sp_exec_scheme_names(), .needs = "backward=linear|ooo",
         .scope = SP_SCOPE_RUN},
        {"microbatches", SP_FLAG_INT, &o->microbatches, "micro-batches B per step (0 = W, pipelines 2W)",
         .group = G_PAR, .range = "0..", .needs = "parallel", .scope = SP_SCOPE_RUN},
        {"groups", SP_FLAG_INT, &o->groups, "groups G of lpp/fslpp (W = G*R; 0 = 1)", .group = G_PAR,
         .range = "0..", .needs = "parallel=lpp|fslpp", .scope = SP_SCOPE_RUN},
        {"chunks", SP_FLAG_INT, &o->chunks, "chunks per rank of interleaved-1f1b / looped-bfs (0 = the scheme's)",
         .group = G_PAR, .range = "0..", .needs = "parallel=interleaved-1f1b|looped-bfs", .scope = SP_SCOPE_RUN},
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
    int n = (int)(sizeof list / sizeof list[0]);
    if (n > cap) sp_fail("internal: too many common flags");
    memcpy(f, list, sizeof list);
    return n - 1;
}

/* --lanes as sp_engine_opts.lanes: 1 or 2, 0 for auto (or unset) */
static int lanes_of(const sp_run_opts *o)
{
    return o->lanes && strcmp(o->lanes, "auto") != 0 ? atoi(o->lanes) : 0;
}

static void check_ranges(sp_run_opts *o)
{
    if (!(o->lr > 0)) sp_fail("--lr %g: expected > 0", o->lr);
    if (!(o->prune >= 0 && o->prune < 1)) sp_fail("--prune %g: expected a fraction in [0, 1)", o->prune);
    if (o->momentum < 0 || o->momentum >= 1) sp_fail("--momentum %g: expected in [0, 1)", o->momentum);
    if (sp_flag_given("lr-schedule")) sp_lr_parse(o->lr_schedule, o->lr);   /* fail before any data is read */
    const char *fmt = o->data_format ? o->data_format : "fashion-mnist";
    if (!o->data && sp_flag_given("data-format") && strcmp(fmt, "fashion-mnist") != 0)
        sp_fail("--data-format %s needs --data DIR (only fashion-mnist has a default directory)", fmt);
    o->plan_full = o->plan_arg && strcmp(o->plan_arg, "full") == 0;
    if (o->mem_limit_arg && sp_mem_limit_parse("--mem-limit", o->mem_limit_arg, &o->mem_limit,
                                               &o->mem_limit_bytes) != SP_OK)
        sp_fail("%s", sp_last_error());
    if (strcmp(o->scan_levels_arg, "full") == 0) {
        o->scan_levels = SP_SCAN_LEVELS_FULL;
    } else if (strcmp(o->scan_levels_arg, "auto") == 0) {
        o->scan_levels = SP_SCAN_LEVELS_AUTO;
    } else {
        char *end;
        errno = 0;
        long x = strtol(o->scan_levels_arg, &end, 10);
        if (!*o->scan_levels_arg || *end || errno || x < 0 || x > 1000000)
            sp_fail("--scan-levels %s: expected 0 (linear BP) .. the model's full depth, full or auto",
                    o->scan_levels_arg);
        o->scan_levels = (int)x;
    }
    /* what the engine can do (its registry entry), or what the executor does instead */
    unsigned caps = sp_engine_caps(o->backward);
    char names[256];
    if (o->plan && !(caps & SP_ENGINE_PLAN) && !(o->parallel && strcmp(o->parallel, "scan") == 0))
        sp_fail("--plan needs --backward %s or --parallel scan", sp_engine_names_with(SP_ENGINE_PLAN, names, sizeof names));
    if (lanes_of(o) == 2 && o->order && strcmp(o->order, "conventional") == 0)
        sp_fail("--lanes 2 with --order conventional: that order runs on one lane (expected another --order, "
                "or --lanes 1 or auto)");
    if (lanes_of(o) == 2 && o->threads < 2 && strcmp(o->device, "cpu") == 0)
        sp_fail("--lanes 2 with --threads %d: each lane runs on a thread of its own (expected --threads 2 or more)",
                o->threads);
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
    check_ranges(o);
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


/* ---- datasets of the image apps ----------------------------------------------------- */

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"

/* The datasets of the image apps: fashion-mnist / mnist (IDX), cifar10, folder. */
void sp_run_open_images(const sp_run_opts *o, int pad_to, sp_dataset **train, sp_dataset **test)
{
    if (!o) sp_fail("sp_run_open_images: argument 'o' is NULL");
    if (!train) sp_fail("sp_run_open_images: argument 'train' is NULL");
    if (!test) sp_fail("sp_run_open_images: argument 'test' is NULL");
    const char *fmt = o->data_format ? o->data_format : "fashion-mnist";
    if (!o->data && strcmp(fmt, "fashion-mnist") != 0)
        sp_fail("--data-format %s needs --data DIR (only fashion-mnist has a default directory)", fmt);
    /* --parallel: opened for their rows (headers checked now); sp_run reads a rank's own */
    bool rows = o->parallel != NULL;
    if (strcmp(fmt, "fashion-mnist") == 0 || strcmp(fmt, "mnist") == 0 || strcmp(fmt, "idx") == 0) {
        const char *dir = o->data ? o->data : FMNIST_DIR;
        *train = sp_check_ptr(rows ? sp_fashion_mnist_rows(dir, true, pad_to) : sp_fashion_mnist(dir, true, pad_to));
        *test = sp_check_ptr(rows ? sp_fashion_mnist_rows(dir, false, pad_to) : sp_fashion_mnist(dir, false, pad_to));
    } else if (strcmp(fmt, "cifar10") == 0) {
        if (!o->data) sp_fail("--data-format cifar10 needs --data DIR (the cifar-10-batches-bin directory)");
        *train = sp_check_ptr(rows ? sp_cifar10_rows(o->data, true) : sp_cifar10(o->data, true));
        *test = sp_check_ptr(rows ? sp_cifar10_rows(o->data, false) : sp_cifar10(o->data, false));
    } else if (strcmp(fmt, "folder") == 0) {
        if (!o->data) sp_fail("--data-format folder needs --data DIR (DIR/train/<class>/*, DIR/test/<class>/*)");
        char tr[4096], te[4096];
        snprintf(tr, sizeof tr, "%s/train", o->data);
        snprintf(te, sizeof te, "%s/test", o->data);
        *train = sp_check_ptr(sp_image_folder(tr, pad_to ? pad_to : 28, 1));
        *test = sp_check_ptr(sp_image_folder(te, pad_to ? pad_to : 28, 1));
        sp_check(sp_image_folder_match_classes(*test, *train));   /* test labels by train's class names */
    } else {
        sp_fail("--data-format %s: unknown (expected fashion-mnist | mnist | cifar10 | folder)", fmt);
    }
}

/* The first number in file `path` after `key` (NULL: at the start), times `unit`; 0 when
 * the file or the key is missing or the value is not a number ("max"). */
static double number_in(const char *path, const char *key, double unit)
{
    FILE *f = sp_open_read(path, NULL);
    if (!f) return sp_clear_error(), 0;
    char line[256];
    double v = 0;
    while (v == 0 && fgets(line, sizeof line, f)) {
        const char *at = key ? strstr(line, key) : line;
        if (at) v = strtod(at + (key ? strlen(key) : 0), NULL) * unit;
    }
    fclose(f);
    return v;
}

/* The bytes a run may give its datasets, and which bound set it: half the memory
 * available now (MemAvailable; the physical memory if unknown), the address-space and
 * data-segment limits (ulimit -v, -d), the cgroup's memory limit, SCANPROP_MAX_FILE_ALLOC. */
static double usable_memory(const char **why)
{
    double limit = (double)sp_file_alloc_limit(), v;
    *why = "SCANPROP_MAX_FILE_ALLOC";
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double avail = number_in("/proc/meminfo", "MemAvailable:", 1024);
    if (avail <= 0 && pages > 0 && page > 0) avail = (double)pages * page;
    if (avail > 0 && avail / 2 < limit) limit = avail / 2, *why = "half the available memory";
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (double)rl.rlim_cur < limit)
        limit = (double)rl.rlim_cur, *why = "the address-space limit (ulimit -v)";
    if (getrlimit(RLIMIT_DATA, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (double)rl.rlim_cur < limit)
        limit = (double)rl.rlim_cur, *why = "the data-segment limit (ulimit -d)";
    if ((v = number_in("/sys/fs/cgroup/memory.max", NULL, 1)) > 0 && v < limit)
        limit = v, *why = "the cgroup's memory.max";
    if ((v = number_in("/sys/fs/cgroup/memory/memory.limit_in_bytes", NULL, 1)) > 0 && v < limit)
        limit = v, *why = "the cgroup's memory limit";
    return limit;
}

void sp_run_check_synthetic(const sp_run_opts *o, const char *flag, int samples, int test_samples,
                            size_t sample_bytes)
{
    if (!o) sp_fail("sp_run_check_synthetic: argument 'o' is NULL");
    if (!flag) sp_fail("sp_run_check_synthetic: argument 'flag' is NULL");
    if (!o->eval_only && o->batch > samples)
        sp_fail("--batch %d exceeds the %d training samples (%s %d)", o->batch, samples, flag, samples);
    double need = ((double)samples + test_samples) * ((double)sample_bytes + sizeof(int));
    const char *why;
    double limit = usable_memory(&why);
    if (need > limit)
        sp_fail("%s %d: the training and test sets need %.3g GB, above the %.3g GB this run may use (%s)", flag,
                samples, need / 1e9, limit / 1e9, why);
}

/* ---- the engine, its plan and the device ------------------------------------------------- */

/* U_i of an engine that runs the updates itself (SP_ENGINE_LAYER_UPDATES): the optimizer
 * step of one layer's parameters. */
static void update_layer(void *ctx, sp_layer *l) { sp_optim_step_params(ctx, l->params, l->nparams); }

sp_engine_opts sp_run_engine_opts(const sp_run_opts *o)
{
    if (!o) sp_fail("sp_run_engine_opts: argument 'o' is NULL");
    return (sp_engine_opts){.scan_levels = o->scan_levels,
                            .order = o->order,
                            .k = o->k,
                            .mem_cap = (size_t)o->mem_cap,
                            .trace_path = o->trace,
                            .lanes = lanes_of(o),
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
    sp_engine *e = sp_engine_create(o->backward, &eo);
    sp_json j;
    sp_json_begin(&j);
    sp_json_str(&j, "app", app);
    sp_json_str(&j, "backward", o->backward);
    sp_json_str(&j, "mode", "plan");
    sp_report_writer w = sp_json_writer(&j);
    if (!sp_engine_plan(e, m, x, y, &w)) sp_fail("%s: --plan: no plan was made", app);
    sp_json_end_print(&j);
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

/* ---- parallel runs ------------------------------------------------------------------------ */

/* The order/trace files, then MPI down (every rank). */
static void exec_end(struct sp_exec *x)
{
    if (!x) return;
    sp_exec_finish(x);
    sp_exec_free(x);
    sp_comm_finalize();
}

/* Flags that may differ between ranks: they change neither the schedule, the data nor the
 * numbers (docs/DISTRIBUTED.md). */
#define RANK_LOCAL_FLAGS "threads|quiet|comm-timeout"
#define MAX_DIGEST 160

static uint32_t hash_text(uint32_t h, const char *s)
{
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return (h ^ 0xff) * 16777619u;
}

static uint32_t hash_ints(uint32_t h, int n, const int *v)
{
    char buf[32];
    for (int i = 0; i < n; i++) {
        snprintf(buf, sizeof buf, "%d", v[i]);
        h = hash_text(h, buf);
    }
    return h;
}

/* Before the first collective of the executor: every rank must run the same program and
 * model on the same data with the same settings, or a rank would read a gradient bucket
 * of another size, wait for a message that never comes or silently train with rank 0's
 * numbers. One allgather of a hash per flag (and of the program, the model's parameter
 * shapes and the dataset's identity); on a difference every rank refuses alike, naming
 * the first flag that differs and the ranks. */
static void ranks_agree(const char *app, const sp_run_opts *o, const sp_model *m, const sp_dataset *train,
                        const sp_dataset *test, int sample_ndim, const int *sample_shape)
{
    sp_comm *w = sp_comm_world();
    int W = sp_comm_size(w);
    if (W < 2) return;
    sp_flag_digest d[MAX_DIGEST];
    int nf = sp_flags_digest(d, MAX_DIGEST, RANK_LOCAL_FLAGS);
    enum { E_APP, E_FLAGS, E = E_FLAGS + MAX_DIGEST + 2 };   /* then the model, the data */
    uint32_t h[E] = {0};
    h[E_APP] = hash_text(hash_text(2166136261u, app), m->name);
    for (int i = 0; i < nf; i++) h[E_FLAGS + i] = d[i].hash;
    uint32_t hm = 2166136261u;
    for (int i = 0; i < m->nparams; i++)
        hm = hash_ints(hash_text(hm, m->params[i]->name), m->params[i]->value.ndim, m->params[i]->value.shape);
    h[E_FLAGS + nf] = hm;
    uint32_t hd = hash_ints(2166136261u, sample_ndim, sample_shape);
    for (const sp_dataset *ds = train; ds; ds = ds == train ? test : NULL)
        hd = hash_ints(hash_text(hd, ds->name), 2, (int[]){ds->n, ds->nclasses});
    h[E_FLAGS + nf + 1] = hd;
    /* 16 bits per float: exact in any float and in any MPI implementation */
    float *mine = sp_xcalloc(2 * E, sizeof *mine), *all = sp_xcalloc((size_t)W * 2 * E, sizeof *all);
    for (int e = 0; e < E; e++) mine[2 * e] = (float)(h[e] >> 16), mine[2 * e + 1] = (float)(h[e] & 0xffff);
    sp_allgather(w, mine, all, 2 * E);
    for (int e = 0; e < E_FLAGS + nf + 2; e++) {
        char ranks[256] = "";
        size_t k = 0;
        int nd = 0;
        for (int r = 1; r < W; r++)
            if (all[(size_t)r * 2 * E + 2 * e] != all[2 * e] || all[(size_t)r * 2 * E + 2 * e + 1] != all[2 * e + 1]) {
                if (k + 16 < sizeof ranks) k += (size_t)snprintf(ranks + k, sizeof ranks - k, "%s%d", nd ? ", " : "", r);
                nd++;
            }
        if (!nd) continue;
        char what[768], val[256];
        if (e == E_APP)
            snprintf(what, sizeof what, "the program (rank 0 runs %s, model %s)", app, m->name);
        else if (e == E_FLAGS + nf)
            snprintf(what, sizeof what, "the model's parameter shapes (%s)", m->name);
        else if (e == E_FLAGS + nf + 1)
            snprintf(what, sizeof what, "the dataset (rank 0: %s, %d samples)", train ? train->name : "synthetic",
                     train ? train->n : 0);
        else
            snprintf(what, sizeof what, "--%s (rank 0: %s)", d[e - E_FLAGS].name,
                     *sp_flag_value_text(d[e - E_FLAGS].name, val, sizeof val) ? val : "not given");
        sp_comm_fail_all(w, "--parallel %s: the ranks disagree on %s: rank%s %s differ%s from rank 0 (every rank must "
                            "run the same command; only --threads, --quiet and --comm-timeout may differ)",
                         o->parallel, what, nd > 1 ? "s" : "", ranks, nd > 1 ? "" : "s");
    }
    free(mine);
    free(all);
}

/* The communication model of a run: --comm-profile, read by every rank before any work
 * (cm given NULL), or else, on >= 2 ranks, the short probe (collective, a few ms). Rank 0
 * prints its figures on stderr, one line (not with --quiet). NULL on one rank without a
 * profile. */
static struct sp_comm_model *comm_model(const char *app, const sp_run_opts *o, sp_comm *w, sp_comm_model *cm)
{
    if (!cm && sp_comm_size(w) < 2) return NULL;
    if (!cm) cm = sp_comm_model_quick(w);
    if (sp_comm_rank(w) == 0 && !o->quiet) {
        char line[1024];
        sp_comm_model_summary(cm, line, sizeof line);
        if (o->comm_profile) fprintf(stderr, "%s: communication model (%s): %s\n", app, cm->source, line);
        else fprintf(stderr, "%s: communication probe (%.0f ms): %s\n", app, cm->probe_ms, line);
    }
    return cm;
}

static struct sp_exec *exec_new(const char *app, const sp_run_opts *o, sp_model *m, sp_optim *opt,
                                const sp_dataset *train, const sp_dataset *test, int sample_ndim,
                                const int *sample_shape, struct sp_comm_model **cm)
{
    if (!o->parallel) return NULL;
    if (!sp_comm_have_mpi() && getenv("OMPI_COMM_WORLD_SIZE"))
        sp_fail("--parallel %s: this build has no MPI (rebuild with make MPI=1)", o->parallel);
    sp_comm_set_timeout(o->comm_timeout);
    sp_comm_init(NULL, NULL);
    ranks_agree(app, o, m, train, test, sample_ndim, sample_shape);
    sp_comm_model *profile = NULL;   /* a bad --comm-profile is refused before any work */
    if (o->comm_profile && sp_comm_model_load(o->comm_profile, &profile) != SP_OK)
        sp_comm_fail_all(sp_comm_world(), "%s", sp_last_error());
    sp_exec_cfg c = {.scheme = o->parallel,
                     .micro = o->microbatches,
                     .groups = o->groups,
                     .partition = o->partition,
                     .bucket_mb = o->bucket_mb,
                     .costs_in = o->costs,
                     .costs_out = o->costs_out,
                     .order_out = o->exec_order,
                     .trace_path = o->trace,
                     .ooo = (sp_engine_caps(o->backward) & SP_ENGINE_REORDERS_DW) != 0,
                     .k = o->k,
                     .clip_grad_norm = o->clip_grad_norm,
                     .post_validate = strcmp(o->step_sync, "plain") != 0,
                     .chunks = o->chunks,
                     .actions = o->actions,
                     .mem_limit = o->mem_limit,
                     .mem_limit_bytes = o->mem_limit_bytes};
    struct sp_exec *x = sp_exec_new(sp_comm_world(), m, opt, &c, sample_ndim, sample_shape, o->batch);
    /* Not started by mpirun: one process is the only rank. It runs (a schedule's numbers
     * and files on one worker are worth having), but says so. */
    if (sp_exec_workers(x) == 1 && !getenv("OMPI_COMM_WORLD_SIZE"))
        fprintf(stderr, "%s: note: --parallel %s runs 1 worker (not started by mpirun; for W workers: mpirun -np W "
                        "%s ...)\n", app, o->parallel, app);
    if (o->plan) {   /* --parallel scan --plan: the cross-rank levels; nothing trains */
        if (sp_exec_rank(x) == 0) {
            int levels = sp_exec_print_plan(x, stdout);
            sp_json j;
            sp_json_begin(&j);
            sp_json_str(&j, "mode", "plan");
            sp_json_str(&j, "parallel", o->parallel);
            sp_json_int(&j, "workers", sp_exec_workers(x));
            sp_json_int(&j, "levels", levels);
            sp_json_end_print(&j);
        }
        sp_comm_model_free(profile);
        exec_end(x);
        exit(0);
    }
    *cm = comm_model(app, o, sp_comm_world(), profile);
    return x;
}


/* ---- the pieces of a run (sp_run_session) ------------------------------------------------ */

/* sp_run_open, with the datasets the ranks compare (NULL: the samples' shape only). */
static void open_session(sp_run_session *s, const char *app, const sp_run_opts *o, sp_model *m, const sp_tensor *x1,
                         const int *y1, const sp_dataset *train, const sp_dataset *test)
{
    *s = (sp_run_session){.app = app, .o = o, .m = m};
    sp_engine_opts eo = sp_run_engine_opts(o);
    s->engine = sp_engine_create(o->backward, &eo);
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
    s->optim = sp_optim_create(o->optim, m->params, m->nparams, &cfg);
    sp_optim_set_clip_grad_norm(s->optim, o->clip_grad_norm);   /* sp_optim_step clips; the executor its own way */
    s->exec = exec_new(app, o, m, s->optim, train, test, x1->ndim - 1, x1->shape + 1, &s->comm);
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
    return sp_train_step(s->m, s->engine, s->optim, t, x, y, NULL, NULL, NULL);
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
        if (sp_run_prints(s)) sp_json_end_print(j);
    }
    exec_end(s->exec);
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
    sp_evaluate(m, d, o->batch > 256 ? o->batch : 256, &r.test_loss, &r.test_acc);
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
    sp_json_end_print(&j);
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
    /* (not with a clip: every update waits for the whole gradient's norm) */
    if (!s.exec && (s.engine->caps & SP_ENGINE_LAYER_UPDATES) && !(o->clip_grad_norm > 0)) {   /* U_i as the engine's tasks (ooo: sub lane) */
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
    if (test && test->read_rows) {   /* with ranks, rank r evaluates [r·n/W, (r+1)·n/W) (train.c's evaluator_open) */
        unsigned char *tk = sp_xcalloc((size_t)test->n, 1);
        int W = s.exec ? sp_exec_workers(s.exec) : 1, r = s.exec ? sp_exec_rank(s.exec) : 0;
        for (int i = (int)((long)test->n * r / W); i < (int)((long)test->n * (r + 1) / W); i++) tk[i] = SP_LOADER_X;
        read_rows(test, tk, true);
        free(tk);
    }
    sp_loader *loader = sp_check_ptr(sp_loader_new_rows(train, o->batch, !o->no_shuffle, o->seed, s.exec != NULL, need));
    free(need);
    sp_train_cfg tc = {.app = app,
                       .epochs = o->epochs,
                       .steps = o->steps,
                       .eval_every = o->eval_every,
                       .eval_batch = o->batch > 256 ? o->batch : 256,
                       .log_path = sp_run_prints(&s) ? o->log : NULL,   /* rank 0 writes the log */
                       .lr = &sched,
                       .quiet = o->quiet || !sp_run_prints(&s),
                       .exec = s.exec,
                       .save_every = o->save_every,
                       .save_path = o->save,
                       .resume_path = o->resume,
                       .cuda_graph = o->cuda_graph};
    /* What decides a run's numbers: a resume must match (schedulers/train/checkpoint.h). */
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
