/* run_internal.h — what the pieces of the training runner share; private to
 * cli/run*.c (the public API is run.h).
 *
 *   run_flags.c     sp_run_defaults, the common flag table, the checks after a parse, sp_run_parse
 *   run_data.c      the datasets of the image apps, the memory check of synthetic data
 *   run_parallel.c  --parallel: the ranks' agreement, the communication model, the executor
 *   run.c           the engine, its plan and the device; the session (sp_run_open … close); sp_run
 */
#ifndef SP_RUN_INTERNAL_H
#define SP_RUN_INTERNAL_H

#include <stdlib.h>
#include <string.h>
#include "cli/run.h"

struct sp_comm_model;

/* ---- run_data.c ------------------------------------------------------------------------ */

/* The --data-format o names (data/formats.c; fashion-mnist by default), NULL if unknown;
 * one that needs --data DIR without it is refused (sp_fail). */
const sp_data_format *run_data_format(const sp_run_opts *o);

/* ---- run_parallel.c ------------------------------------------------------------------- */

/* --parallel: MPI up, the ranks' agreement check, --comm-profile or the probe (*cm), the
 * executor; with --plan (--parallel scan) rank 0 prints the cross-rank levels and every
 * rank exits. NULL without --parallel. */
struct sp_exec *run_exec_new(const char *app, const sp_run_opts *o, sp_model *m, sp_optim *opt,
                             const sp_dataset *train, const sp_dataset *test, int sample_ndim,
                             const int *sample_shape, struct sp_comm_model **cm);
/* The order/trace files, then MPI down (every rank); x NULL: nothing. */
void run_exec_end(struct sp_exec *x);

#endif
