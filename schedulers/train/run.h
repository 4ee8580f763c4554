/* common.h — what every app shares: flags, the progress display, the JSON summary.
 * Apps stay thin: parse flags, build a model from library calls, run sp_train.
 *
 * Flags. Each app declares exactly the flags it uses, one sp_flag line each; a flag
 * that does not apply (to this app, or with the chosen engine/optimizer/data) is refused
 * with one line and exit 2, e.g. "--trace needs --backward ooo". Adding a flag to every
 * training app is one line in common_flags() (schedulers/train/run.c) plus its field in
 * sp_app_opts; an app-only flag is one line in the app's `extra` table:
 *
 *   {"hidden", SP_FLAG_INT, &hidden, "hidden size", .range = "1.."},
 *   {"trace", SP_FLAG_STR, &o->trace, "write a Chrome trace", .needs = "backward=ooo"},
 */
#ifndef SP_APP_COMMON_H
#define SP_APP_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum { SP_FLAG_STR, SP_FLAG_INT, SP_FLAG_LONG, SP_FLAG_DOUBLE, SP_FLAG_BOOL, SP_FLAG_U64 } sp_flag_kind;

/* Which training apps a common flag applies to (sp_app_parse's `scopes`). */
enum {
    SP_SCOPE_RUN = 1,        /* every training app, demo included: steps, batch, lr, optim… */
    SP_SCOPE_ENGINE = 2,     /* --backward and the engines' options                       */
    SP_SCOPE_LOOP = 4,       /* the epoch loop of sp_train: epochs, lr schedule, log, eval */
    SP_SCOPE_CKPT = 8,       /* --load / --save / --save-every / --resume                 */
    SP_SCOPE_IMAGES = 16,    /* --data / --data-format (lenet, vgg11)                     */
    SP_SCOPE_TRAINER = 1 | 2 | 4 | 8,   /* an app that runs sp_app_train                  */
};

typedef struct sp_flag {
    const char *name;      /* without the leading "--"                                      */
    sp_flag_kind kind;
    void *dst;             /* const char **, int *, long *, double *, bool *, uint64_t *    */
    const char *help;
    /* optional (designated initialisers) */
    const char *group;     /* --help heading; NULL: the app's own flags                     */
    const char *choices;   /* STR: the only valid values, "a|b|c"                            */
    const char *range;     /* INT/LONG/U64/DOUBLE: "LO..HI", "LO.." or "..HI", inclusive       */
    const char *needs;     /* conditions, all must hold: "backward=ooo", "order=a|b", "data"
                            * (that flag given), "!layerpipe" (not given); joined by ','       */
    const char *meta;      /* value placeholder in --help (default N, X or S)                */
    const char *def;       /* the default as --help shows it (default: the current value)    */
    unsigned scope;        /* common flags: SP_SCOPE_*; 0 = always                           */
    bool set;              /* given on the command line (filled by the parser)               */
} sp_flag;

/* Generic parser (apps with their own flags, e.g. schedule, jacobian): `flags` ends with
 * name == NULL. --help prints usage (every default, every valid value, flags grouped)
 * and exits 0; an unknown flag ("did you mean --batch?"), a bad value, a value out of
 * range or a flag whose `needs` fail: one line, exit 2. Registers the check of stdout
 * at exit (sp_app_check_output). */
void sp_flags_parse(int argc, char **argv, const char *app, const char *summary, sp_flag *flags);
/* After sp_flags_parse / sp_app_parse: whether --name was given. */
bool sp_flag_given(const char *name);

/* The flags every training app takes (the training issue's list). */
typedef struct sp_app_opts {
    const char *data, *data_format, *optim, *backward, *load, *save, *log, *lr_schedule;
    const char *resume;   /* --resume FILE: continue a --save-every checkpoint */
    long save_every;      /* --save-every N: resumable checkpoint to --save every N steps */
    int epochs, batch, threads, eval_every;   /* epochs 0: as many as --steps needs */
    long steps;
    double lr, momentum, weight_decay;   /* doubles, as PyTorch's Python floats */
    uint64_t seed;
    bool no_shuffle, quiet;
    bool eval_only;                      /* --eval-only: evaluate --load, no training */
    /* engine options */
    int scan_levels, k;                  /* scan_levels -1: the full scan */
    long mem_cap;
    const char *order, *trace;
    bool plan, plan_full;                /* --plan, --plan=full: print the bppsa plan, exit */
    const char *plan_svg;                /* --plan-svg FILE: draw the scan tree and exit   */
    const char *scan_levels_arg;         /* --scan-levels as given: N | full | auto */
    double prune;                        /* --prune AMOUNT: magnitude-prune conv/linear weights */
    const char *prune_scope;             /* --prune-scope layer | global */
    const char *device;                  /* cpu | cuda */
    bool cuda_graph;                     /* --cuda-graph: replay the ooo backward as a CUDA Graph */
    /* parallel training on MPI ranks (schedulers/parallel/exec.h) */
    const char *parallel, *partition, *costs_out, *costs, *exec_order;
    int microbatches, groups;
    double bucket_mb, comm_timeout;
} sp_app_opts;

/* Defaults shared by all apps; each app then overrides what it needs (lr, batch…). */
void sp_app_defaults(sp_app_opts *o);
/* Parses argv against the common flags of `scopes` (SP_SCOPE_*) plus `extra`
 * (NULL-terminated by name == NULL), as sp_flags_parse. */
void sp_app_parse(int argc, char **argv, const char *app, const char *summary, sp_app_opts *o, unsigned scopes,
                  sp_flag *extra);

/* Flushes stdout and checks every write to it succeeded; on failure "write failed: …"
 * and exit 2. Runs at exit by itself once flags are parsed; call it to fail earlier. */
void sp_app_check_output(void);
/* fclose(f) and check that every write to it succeeded ("what": --svg PATH …): one line,
 * exit 2 otherwise. */
void sp_app_close_output(FILE *f, const char *what);

/* A tiny JSON writer for the last stdout line. */
typedef struct sp_json {
    char buf[8192];
    size_t len;
    bool first;
} sp_json;
void sp_json_begin(sp_json *j);
void sp_json_str(sp_json *j, const char *key, const char *v);
void sp_json_num(sp_json *j, const char *key, double v);
void sp_json_int(sp_json *j, const char *key, long v);
void sp_json_raw(sp_json *j, const char *key, const char *raw);
void sp_json_end_print(sp_json *j);   /* prints {...}\n on stdout and checks the write */

/* ---- the training app runner ---------------------------------------------------------- */
#include "core/model.h"
#include "data/data.h"
#include "schedulers/train/train.h"

/* Everything after the model and the datasets: threads, engine, optimizer, --load,
 * training, --save, and the JSON line (with `extra_json` keys appended if not NULL,
 * e.g. "\"forward_ms\": 1.2"). Returns the result. */
sp_train_result sp_app_train(const char *app, const sp_app_opts *o, sp_model *m, sp_dataset *train,
                             sp_dataset *test, bool timing_keys);
/* --data-format fashion-mnist (default, --data defaults to Debian's package dir) |
 * mnist | cifar10 | folder; pad_to = 32 zero-pads 28×28 images (VGG-11). */
void sp_app_open_images(const sp_app_opts *o, int pad_to, sp_dataset **train, sp_dataset **test);
/* --device cuda: one line and exit 2 on a build without CUDA, without a GPU, or with an
 * engine other than linear; else the backend starts and m's parameters move to the GPU.
 * --device cpu: nothing. */
void sp_app_use_device(const sp_app_opts *o, sp_model *m);
/* m's parameters back on the host (before saving a checkpoint). */
void sp_app_device_to_host(sp_model *m);
/* --plan / --plan-svg: print (and draw) the bppsa plan for the batch (x, y) and the
 * JSON line of its figures; trains nothing. sp_app_train calls it on the first batch. */
void sp_app_plan_only(const char *app, const sp_app_opts *o, sp_model *m, const sp_tensor *x, const int *y);
/* The engine options from the app flags. */
sp_engine_opts sp_app_engine_opts(const sp_app_opts *o);
/* The engine's keys of the JSON line: scan_levels (bppsa); order and k as run (ooo,
 * once a step `ran`). */
void sp_app_json_engine(sp_json *j, const sp_app_opts *o, sp_engine *e, bool ran);
/* The engine options against the model, which the engines would clamp silently:
 * --scan-levels above sp_scan_full_levels(n) of the chain (one forward of (x1, y1) gives
 * n), --k above the parameterised layers. One line with the valid range, exit 2. */
void sp_app_check_engine(const sp_app_opts *o, sp_model *m, const sp_tensor *x1, const int *y1);

/* --parallel: MPI up, the executor for model m (one sample of sample_shape, global batch
 * o->batch). NULL without --parallel. */
struct sp_exec;
struct sp_optim;
struct sp_exec *sp_app_exec_new(const sp_app_opts *o, sp_model *m, struct sp_optim *opt, int sample_ndim,
                                const int *sample_shape);
/* The JSON keys of a parallel run ("parallel", "workers", "microbatches", "comm_ms",
 * "busy_ms", "idle_ms": per rank, per step). Collective; only rank 0 prints the line. */
void sp_app_exec_json(struct sp_exec *x, const sp_app_opts *o, sp_json *j);
/* The order/trace files, then MPI down (every rank). */
void sp_app_exec_end(struct sp_exec *x);
/* Whether this process prints (rank 0, or no --parallel). */
bool sp_app_prints(const struct sp_exec *x);

#endif
