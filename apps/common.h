/* common.h — what every app shares: flags, the progress display, the JSON summary.
 * Apps stay thin: parse flags, build a model from library calls, run sp_train. */
#ifndef SP_APP_COMMON_H
#define SP_APP_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { SP_FLAG_STR, SP_FLAG_INT, SP_FLAG_LONG, SP_FLAG_DOUBLE, SP_FLAG_BOOL, SP_FLAG_U64 } sp_flag_kind;

typedef struct sp_flag {
    const char *name;    /* without the leading "--"                         */
    sp_flag_kind kind;
    void *dst;           /* const char **, int *, long *, double *, bool *, uint64_t * */
    const char *help;
} sp_flag;

/* The flags every training app takes (the training issue's list). */
typedef struct sp_app_opts {
    const char *data, *data_format, *optim, *backward, *load, *save, *log, *lr_schedule;
    int epochs, batch, threads, eval_every;
    long steps;
    double lr, momentum, weight_decay;   /* doubles, as PyTorch's Python floats */
    uint64_t seed;
    bool no_shuffle, quiet;
    /* engine options */
    int scan_levels, k;
    long mem_cap;
    const char *order, *trace;
    bool plan, plan_full;      /* --plan, --plan=full: print the bppsa plan and exit     */
    const char *plan_svg;      /* --plan-svg FILE: draw the scan tree and exit           */
} sp_app_opts;

/* Defaults shared by all apps; each app then overrides what it needs (lr, batch…). */
void sp_app_defaults(sp_app_opts *o);
/* Parses argv against the common flags plus `extra` (NULL-terminated by name == NULL).
 * --help prints usage and exits 0; unknown flags or bad values: one line, exit 2. */
void sp_app_parse(int argc, char **argv, const char *app, const char *summary, sp_app_opts *o,
                  const sp_flag *extra);

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
void sp_json_end_print(sp_json *j);   /* prints {...}\n on stdout */

#endif

/* ---- the training app runner ---------------------------------------------------------- */
#include "core/model.h"
#include "data/data.h"
#include "schedulers/train.h"

/* Everything after the model and the datasets: threads, engine, optimizer, --load,
 * training, --save, and the JSON line (with `extra_json` keys appended if not NULL,
 * e.g. "\"forward_ms\": 1.2"). Returns the result. */
sp_train_result sp_app_train(const char *app, const sp_app_opts *o, sp_model *m, sp_dataset *train,
                             sp_dataset *test, bool timing_keys);
/* --data-format fashion-mnist (default, --data defaults to Debian's package dir) |
 * mnist | cifar10 | folder; pad_to = 32 zero-pads 28×28 images (VGG-11). */
void sp_app_open_images(const sp_app_opts *o, int pad_to, sp_dataset **train, sp_dataset **test);
/* --plan / --plan-svg: print (and draw) the bppsa plan for the batch (x, y) and the
 * JSON line of its figures; trains nothing. sp_app_train calls it on the first batch. */
void sp_app_plan_only(const char *app, const sp_app_opts *o, sp_model *m, const sp_tensor *x, const int *y);
/* The engine options from the app flags. */
sp_engine_opts sp_app_engine_opts(const sp_app_opts *o);
