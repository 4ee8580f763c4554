/* train_internal.h — what the pieces of the training loop share; private to
 * train/train*.c (the public API is train.h). sp_train keeps one run's state in
 * a struct of its own (train.c) that embeds an evaluator and a progress display, so their
 * types are here; the functions that cross files are declared here, not in train.h.
 *
 *   train.c           sp_train: the epochs and steps, checkpoints, the result's figures
 *   train_step.c      one step: plain, overlapping the last updates (backward_async), or
 *                     the whole step as one device graph (sp_step_graph)
 *   train_accum.c     one step by gradient accumulation over micro-batches (--microbatches)
 *   train_eval.c      evaluation: the forward that frees each output after its last reader,
 *                     sp_evaluate, the test set split over the ranks
 *   train_progress.c  what a run reports as it goes: progress on stderr, the --log CSV
 */
#ifndef SP_TRAIN_INTERNAL_H
#define SP_TRAIN_INTERNAL_H

#include <stdbool.h>
#include <stdio.h>
#include "core/arena.h"
#include "core/io/fileio.h"
#include "core/tape.h"
#include "train/train.h"

/* Where the model's parameters live (the host for a model without any). */
static inline sp_device model_device(const sp_model *m) { return m->nparams ? m->params[0]->value.device : SP_CPU; }

/* ---- train_step.c: one step ----------------------------------------------------------- */

/* The step on tape t after its reset: zero grads, forward, backward, update; on a device
 * everything is queued, nothing waited for. fwd_s/bwd_s: the forward's and the
 * backward's (queueing) times if not NULL. */
sp_node *train_step_queue(sp_model *m, sp_engine *e, sp_optim *o, sp_tape *t, const sp_tensor *x, const int *y,
                          double *fwd_s, double *bwd_s);
/* The step on tape t while the previous step's last δW and U (on the other tape) may
 * still run; release: the staged device slot to release after the join (< 0: on the
 * CPU, the batch is copied into the tape). */
sp_node *train_step_queue_overlap(sp_model *m, sp_engine *e, sp_optim *o, sp_tape *t, const sp_tensor *x,
                                  const int *y, int release, double *fwd_s, double *bwd_s);

/* ---- train_accum.c: gradient accumulation --------------------------------------------- */

/* The step on tape t as `micro` micro-batches (train_accum.c): each forward and backward
 * after the tape's reset, the gradients summed to the whole batch's, one update; the
 * loss (the batch's mean) in *loss. Returns the last micro-batch's loss node. CPU only. */
sp_node *train_step_accum(sp_model *m, sp_engine *e, sp_optim *o, sp_tape *t, const sp_tensor *x, const int *y,
                          int micro, float *loss, double *fwd_s, double *bwd_s);

/* ---- train_eval.c: evaluation --------------------------------------------------------- */

/* Evaluation state kept across the evaluations of one training run: the loader's batch
 * buffers and the tape's arena are allocated by the first evaluation and reused, so
 * evaluating every epoch (or every N steps) allocates nothing after the first time (a
 * new tape and loader per evaluation fragmented the heap: issue 19, item 15). */
typedef struct slice_ds {
    sp_dataset d;
    sp_dataset *base;
    int off;
} slice_ds;

typedef struct evaluator {
    slice_ds slice;            /* with ranks: this rank's share of the test set */
    sp_dataset *d;             /* what this process evaluates (NULL: nothing)   */
    sp_loader *l;
    sp_tape t;                 /* its arena: the input, the loss; the others:   */
    sp_arena *slot;            /* one arena per output alive at once (eval_forward) */
    int *slot_of, *last_use;   /* per layer: its output's slot, its last reader */
    int nslots;
    sp_arena held;             /* the tape's own arena while a slot's stands in  */
    int in_slot;               /* that slot + 1 (0: none): a failed layer leaves it */
    sp_tape *idle[3];          /* the steps' host tapes, idle while it runs: trimmed */
} evaluator;

/* Sets ev up for the test set d (with ranks: this rank's share of it). */
void train_evaluator_open(evaluator *ev, sp_dataset *d, int batch, const sp_train_cfg *cfg);
/* The mean loss and accuracy on d in eval mode (with ranks: summed over the ranks). */
void train_evaluate(evaluator *ev, sp_model *m, sp_dataset *d, const sp_train_cfg *cfg, double *loss, double *acc);
void train_evaluator_free(evaluator *ev);

/* ---- train_progress.c: progress and the --log CSV ------------------------------------- */

typedef struct progress {
    bool tty, quiet;
    double start, last_print;
    long total_steps;
} progress;

/* The progress bar (a TTY) or a periodic line on stderr; force: print now. */
void train_progress_show(progress *p, const char *app, int epoch, int epochs, long step, double loss, double ips,
                         bool force);
/* One line on stderr (after the bar, on a TTY); nothing with quiet. */
void train_progress_line(progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Opens the --log CSV at path (NULL: none, *log NULL); resumed_step >= 0 keeps the old
 * log's rows up to that step. SP_OK, or SP_ERR with the message. */
int train_log_open(sp_out *out, const char *path, long resumed_step, bool *eval_at_keep, FILE **log);
/* An evaluation's row of the --log CSV (log NULL: nothing). */
void train_log_eval(FILE *log, long step, int epoch, const sp_optim *o, double seconds, double loss, double acc);

#endif
