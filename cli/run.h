/* run.h — the training runner: what every training app does after it has built its
 * model and opened its data, as library API, so that an out-of-tree program (pkg-config)
 * trains exactly as the apps do:
 *
 *   sp_run_opts o;
 *   sp_run_defaults(&o);
 *   sp_run_parse(argc, argv, "mymodel", "Train my model.", &o, SP_SCOPE_TRAINER, NULL);
 *   sp_set_threads(o.threads);
 *   sp_run("mymodel", &o, model, train, test);   (engine, optimizer, loop, --save, JSON line)
 *
 * Flags. A program declares exactly the flags it takes: the runner's common flags of the
 * scopes it names (SP_SCOPE_*) plus its own, one sp_flag line each
 * (cli/flags.h); a flag that does not apply (to this program, or with the
 * chosen engine, optimizer or data) is refused with one line and exit 2, e.g. "--trace
 * needs --backward ooo or --parallel". Adding a flag to every training app is one line in
 * common_flags() (cli/run_flags.c) plus its field in sp_run_opts; a program's
 * own flag is one line in its `extra` table:
 *
 *   {"hidden", SP_FLAG_INT, &hidden, "hidden size", .range = "1.."},
 */
#ifndef SP_RUN_H
#define SP_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/model.h"
#include "data/data.h"
#include "cli/flags.h"
#include "cli/summary.h"
#include "train/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which training programs a common flag applies to (sp_run_parse's `scopes`). */
enum {
    SP_SCOPE_RUN = 1,        /* every training app, demo included: steps, batch, lr, optim… */
    SP_SCOPE_ENGINE = 2,     /* --backward and the engines' options                       */
    SP_SCOPE_LOOP = 4,       /* the epoch loop of sp_train: epochs, lr schedule, log, eval */
    SP_SCOPE_CKPT = 8,       /* --load / --save / --save-every / --resume                 */
    SP_SCOPE_IMAGES = 16,    /* --data / --data-format (lenet, vgg11)                     */
    SP_SCOPE_TRAINER = 1 | 2 | 4 | 8,   /* a program that calls sp_run                     */
};

/* The flags every training app takes (the training issue's list). */
typedef struct sp_run_opts {
    const char *data, *data_format, *optim, *backward, *load, *save, *log, *lr_schedule;
    const char *resume;   /* --resume FILE: continue a --save-every checkpoint */
    long save_every;      /* --save-every N: resumable checkpoint to --save every N steps */
    int epochs, batch, threads, eval_every;   /* epochs 0: as many as --steps needs */
    int eval_batch;                      /* --eval-batch N (0: the training batch) */
    long steps;
    double lr, momentum, weight_decay;   /* doubles, as PyTorch's Python floats */
    uint64_t seed;
    bool no_shuffle, quiet;
    bool mem_report;                     /* --mem-report: the memory keys of the JSON line */
    bool eval_only;                      /* --eval-only: evaluate --load, no training */
    /* engine options: each engine's own (its descriptor's struct and flags;
     * sp_run_engine_own), and those of a capability */
    sp_engine_opts_store engine_opts[SP_ENGINES_MAX];   /* in the registry's order */
    const char *trace;
    bool plan, plan_full;                /* --plan, --plan=full: print the engine's plan, exit */
    const char *plan_arg;                /* --plan=summary|full as given (NULL: plain --plan) */
    const char *plan_svg;                /* --plan-svg FILE: draw the scan tree and exit   */
    double prune;                        /* --prune AMOUNT: magnitude-prune conv/linear weights */
    const char *prune_scope;             /* --prune-scope layer | global */
    const char *device;                  /* cpu | cuda */
    bool cuda_graph;                     /* --cuda-graph: replay the step as a CUDA Graph */
    /* parallel training on MPI ranks (schedulers/exec/exec.h) */
    const char *parallel, *partition, *costs_out, *costs, *exec_order;
    const char *actions;                 /* --parallel custom: per-rank action lists (CSV) */
    int microbatches, groups, chunks;    /* chunks: per rank, action-list schemes     */
    bool sync_bn;                        /* --sync-bn: synchronized batch norm         */
    double mem_limit;                    /* --parallel zb-auto: activations per rank  */
    const char *mem_limit_arg;           /* --mem-limit as given: N | bytes with a unit (512MiB) */
    bool mem_limit_bytes;                /* mem_limit is in bytes (from mem_limit_arg) */
    const char *comm_profile;            /* --comm-profile FILE (comm_cost.h); NULL: a short probe */
    double bucket_mb, comm_timeout;
    /* the step's end: gradient-norm clip (0 = off) and, under --parallel, how the ranks
     * agree on the global norm: "post-validate" (step, roll back if it clips) | "plain" */
    double clip_grad_norm;
    const char *step_sync;
} sp_run_opts;

/* Defaults shared by all apps; each app then overrides what it needs (lr, batch…). */
void sp_run_defaults(sp_run_opts *o);
/* Parses argv against the common flags of `scopes` (SP_SCOPE_*) plus `extra`
 * (NULL-terminated by name == NULL), as sp_flags_parse, then checks what the table
 * cannot say (--lr > 0, --scan-levels N|full|auto, --load readable…). */
void sp_run_parse(int argc, char **argv, const char *app, const char *summary, sp_run_opts *o, unsigned scopes,
                  sp_flag *extra);

/* ---- the runner ------------------------------------------------------------------------ */

/* Everything after the model and the datasets: engine, optimizer, --load (or the seeded
 * init), --prune, --device, --parallel, the training loop (sp_train), --save, and the
 * JSON line on stdout (the app name, what ran, losses, accuracy, timings). --eval-only
 * evaluates the --load weights instead; --plan prints the engine's plan and trains
 * nothing. test may be NULL. Returns what sp_train returned. */
sp_train_result sp_run(const char *app, const sp_run_opts *o, sp_model *m, sp_dataset *train, sp_dataset *test);

/* --data-format fashion-mnist (default, --data defaults to Debian's package dir) |
 * mnist | cifar10 | folder; pad_to = 32 zero-pads 28×28 images (VGG-11). */
void sp_run_open_images(const sp_run_opts *o, int pad_to, sp_dataset **train, sp_dataset **test);

/* Before a synthetic dataset is built: --batch at most `samples` (unless --eval-only), and
 * the memory the run would need for it — `samples` training and `test_samples` test
 * samples of sample_bytes each in memory (0: generated on demand) plus the loaders' 4-byte
 * index per sample — within half the physical memory and the sp_file_alloc ceiling
 * (SCANPROP_MAX_FILE_ALLOC). Otherwise one line naming `flag` and exit 2. */
void sp_run_check_synthetic(const sp_run_opts *o, const char *flag, int samples, int test_samples,
                            size_t sample_bytes);

/* --device cuda: one line and exit 2 on a build without CUDA, without a GPU, or with an
 * engine that runs on the CPU only; else the backend starts and m's parameters move to
 * the GPU. --device cpu: nothing. */
void sp_run_use_device(const sp_run_opts *o, sp_model *m);
/* m's parameters back on the host (before saving a checkpoint). */
void sp_run_device_to_host(sp_model *m);
/* The engine options from the flags. */
sp_engine_opts sp_run_engine_opts(const sp_run_opts *o);
/* The options of engine `name` (or alias) in o: the struct its descriptor declares, its
 * defaults unless flags set them; NULL for an unknown engine or one without options, and
 * for a NULL argument (the message in sp_last_error(); guarded, core/guard.h). */
const void *sp_run_engine_own(const sp_run_opts *o, const char *name);
/* The chosen engine's (--backward) int option --flag; dflt when it has none, and for a
 * NULL argument (the message in sp_last_error(); guarded). */
int sp_run_engine_int(const sp_run_opts *o, const char *flag, int dflt);

/* ---- a program that runs its own steps (apps/demo.c) ------------------------------------- */

/* What sp_run builds around a model, for a program with a loop of its own: the engine,
 * the optimizer and, with --parallel, the executor. sp_run is these calls around sp_train. */
struct sp_exec;
struct sp_pruning;
typedef struct sp_run_session {
    const char *app;
    const sp_run_opts *o;
    sp_model *m;
    sp_engine *engine;
    sp_optim *optim;
    struct sp_exec *exec;           /* --parallel: the executor on the MPI ranks; NULL otherwise */
    struct sp_comm_model *comm;     /* --parallel on >= 2 ranks: --comm-profile, or the start's probe */
    struct sp_pruning *pruning;     /* the masks of --prune or of a pruned --load; NULL otherwise */
} sp_run_session;

/* The engine (--backward and its options), the weights (--load or the seeded init, then
 * --prune), the device (--device), the engine options checked against m on one sample
 * (x1, y1: "--scan-levels 9: expected 0..3 for lenet"), the optimizer and, with
 * --parallel, MPI and the executor for samples shaped as x1's (--parallel scan --plan
 * prints the cross-rank plan and exits). */
void sp_run_open(sp_run_session *s, const char *app, const sp_run_opts *o, sp_model *m, const sp_tensor *x1,
                 const int *y1);
/* --plan / --plan-svg (without --parallel): prints the engine's plan for the batch (x, y)
 * and its JSON line, and returns true: train nothing. Otherwise false. */
bool sp_run_plan(sp_run_session *s, const sp_tensor *x, const int *y);
/* One training step on (x, y) (on the ranks with --parallel); returns the loss. */
float sp_run_step(sp_run_session *s, sp_tape *t, const sp_tensor *x, const int *y);
/* Whether this process prints (rank 0, or no --parallel). */
bool sp_run_prints(const sp_run_session *s);
/* --save (and no --save-every, which sp_train writes): the weights back on the host,
 * synchronised over the ranks, saved by rank 0 (with the pruning masks if any). */
void sp_run_save(sp_run_session *s);
/* The end: j (if not NULL) gets the executor's keys (--parallel) and is printed by rank
 * 0; then the executor's files, MPI down, and everything but the model freed. */
void sp_run_close(sp_run_session *s, sp_json *j);

/* The JSON line (cli/summary.c). begin: "app", "device", "backward";
 * engine: the engine's keys (what it ran, e.g. ooo's order, bppsa's scan_levels); train:
 * begin, then the keys of a finished sp_train run (batch: as run; train: its dataset),
 * engine's among them; exec: the keys of a parallel run ("parallel", "workers",
 * "microbatches", "comm_ms", "busy_ms", "idle_ms": per rank, per step; collective). */
void sp_run_summary_begin(const sp_run_session *s, sp_json *j);
void sp_run_summary_engine(const sp_run_session *s, sp_json *j);
void sp_run_summary_train(const sp_run_session *s, sp_json *j, const sp_train_result *r, int batch,
                          const sp_dataset *train);
void sp_run_summary_exec(const sp_run_session *s, sp_json *j);
/* --mem-report: the run's memory in MiB — "rss_peak_mib" (the process's peak resident
 * set), "rss_steady_mib" (resident at the last training step: after warm-up, before the
 * final evaluation; rss_steady_kib from the caller), and what scanprop itself holds:
 * parameters with buffers, gradients, optimizer state, the step and evaluation tapes'
 * arena high water (workspaces and scratch are carved from them), the datasets' samples. */
void sp_run_summary_memory(const sp_run_session *s, sp_json *j, const sp_train_result *r, const sp_dataset *train,
                           const sp_dataset *test, long rss_steady_kib);

#ifdef __cplusplus
}
#endif

#endif
