/* train.h — the training loop every app runs:
 *   loader → forward on the tape → loss → backward engine → optimizer → arena reset.
 * Progress goes to stderr (a bar on a TTY, plain periodic lines otherwise). */
#ifndef SP_TRAIN_H
#define SP_TRAIN_H

#include <stdbool.h>
#include "schedulers/backward/engine.h"
#include "core/device_counts.h"
#include "core/model.h"
#include "data/data.h"
#include "optim/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Start from sp_train_cfg_default() and set what differs: a zeroed struct has no valid
 * eval_batch, and sp_train refuses it (a status, naming the field). */
typedef struct sp_train_cfg {
    const char *app;           /* for progress lines and messages (default "train") */
    int epochs;                /* 0: as many as `steps` needs (default 1)     */
    long steps;                /* stop after this many steps (0 = whole epochs); with
                                * both limits, whichever comes first (default 0) */
    int eval_every;            /* evaluate every N steps (0 = after each epoch) */
    int eval_batch;            /* evaluation batch size, >= 1 (default 256); the
                                * apps pass their --eval-batch, by default their
                                * training batch, so that the evaluation's arenas
                                * stay within the step's                       */
    const char *log_path;      /* per-step CSV: step,epoch,loss,lr,seconds     */
    const sp_lr_schedule *lr;  /* indexed by epoch; NULL = constant            */
    bool quiet;
    /* Resumable checkpoints (train/checkpoint.h): every save_every steps and after
     * the last step to save_path; resume_path restores one before the first step, and
     * the run continues bitwise as if uninterrupted (steps/epochs count from the start).
     * run_meta: the settings a resume must match, {"key", "value", ..., NULL}. */
    long save_every;
    const char *save_path, *resume_path;
    const char *const *run_meta;
    /* Called after every step with the steps done so far (NULL = none): soak tests. With
     * ooo (update in the engine, two threads or a device) the step's last δW/U may still
     * be running then: the next forward overlaps them. */
    void (*on_step)(void *ctx, long steps);
    void *on_step_ctx;
    /* --parallel: the executor runs each step on the MPI ranks (schedulers/exec/exec.h). Every
     * rank calls sp_train alike; the test set is split over the ranks for evaluation. */
    struct sp_exec *exec;
    /* --cuda-graph: on a device, the whole steady-state step (forward, loss, backward,
     * updates) captured as one graph per batch shape and replayed (sp_step_graph). */
    bool cuda_graph;
    /* --microbatches M without --parallel (> 1; 0 or 1: the plain step): each step by
     * gradient accumulation over M micro-batches (sp_train_step_accum). CPU only. */
    int microbatches;
} sp_train_cfg;

typedef struct sp_train_result {
    long steps;
    int epochs;                /* epochs started                              */
    double train_loss;         /* mean loss over the last epoch's steps       */
    double last_loss;          /* loss of the last step                       */
    double test_loss, test_acc;   /* NaN without a test set                  */
    double images_per_s;       /* training samples per second of step time    */
    double seconds;            /* wall time of the whole loop                 */
    double forward_ms, backward_ms, step_ms;   /* medians per step (backward: engine only) */
    long graph_captures, graph_replays;        /* cfg.cuda_graph: whole steps captured / replayed */
    sp_device_counts device_step;              /* on a device: what the last step issued (launches,
                                                * library calls, host waits, allocations, copies);
                                                * zeros on the CPU */
    size_t arena_bytes, eval_arena_bytes;     /* high water of the step tapes' and the evaluation
                                                * tape's arenas (host memory; --mem-report) */
    bool grads_in_step;        /* the parameters' gradients lived in the steps' arenas
                                * (sp_model_step_grads: an engine that updates in its walk) */
    int status;                /* SP_OK, or SP_ERR with the message in sp_last_error(): a bad
                                * configuration or path refused before any work, or a run
                                * stopped (steps and epochs: how far it got) */
} sp_train_result;

/* The defaults: one epoch, evaluation after each epoch in batches of 256, no log, no
 * checkpoints, constant learning rate, progress on stderr. */
sp_train_cfg sp_train_cfg_default(void);

/* Trains m. Never ends the process: every failure comes back as result.status == SP_ERR
 * with the message in sp_last_error(), and sp_train has freed what it allocated (tapes,
 * the evaluation loader, the log's buffer; the --log file and the last checkpoint on disk
 * are left as they were before the failed write). Refused before any work, nothing
 * trained: a NULL argument, a configuration that cannot run (no limit, a negative count,
 * eval_batch < 1 with a test set, save_every without save_path), a bad resume_path,
 * save_path or log_path, a resume point past the limits. Stopped during the run: a
 * non-finite loss, a checkpoint or log write that fails, a batch the model refuses (a
 * sample shape a layer does not take, a label outside the model's classes), a test set
 * the model refuses at an evaluation. After a stopped run the model, optimizer and
 * engine hold the failed step's state (the engine's lanes joined): free them or reload
 * a checkpoint; the caller's loader may be freed or reused (sp_loader_set_epoch). */
sp_train_result sp_train(sp_model *m, sp_engine *e, sp_optim *o, sp_loader *train, sp_dataset *test,
                         const sp_train_cfg *cfg);

/* Mean loss and accuracy of m on d (forward only, in eval mode), in batches of `batch`.
 * SP_ERR with the message in sp_last_error() (loss and acc untouched, m back in its
 * mode) for a NULL argument, a batch < 1 or a set the model refuses (a sample shape a
 * layer does not take, a label outside its classes); nothing exits. */
int sp_evaluate(sp_model *m, sp_dataset *d, int batch, double *loss, double *acc) SP_MUST_CHECK;

/* One training step on (x, y): zero grads, forward, backward, optimizer step.
 * Returns the loss; fwd_s/bwd_s/step_s receive the forward, backward (engine only)
 * and whole-step times if not NULL. A NULL argument or a batch the model refuses (a
 * sample shape a layer does not take, a label outside its classes) returns NaN with the
 * message in sp_last_error(), the engine's work joined; nothing exits. The message is
 * cleared at the start, so a NaN with an empty sp_last_error() is a diverged loss. */
float sp_train_step(sp_model *m, sp_engine *e, sp_optim *o, sp_tape *t, const sp_tensor *x, const int *y,
                    double *fwd_s, double *bwd_s, double *step_s);

/* sp_train_step by gradient accumulation: the batch cut into `micro` (>= 1) micro-batches
 * of consecutive samples (the first n mod micro one larger), each forward and backward on
 * its own, the gradients summed with weights b_k/B (the loss is a mean over its batch, so
 * the sum is the whole batch's gradient), then one update. Ops with batch statistics
 * (batch norm) see each micro-batch as a batch: statistics per micro-batch, running
 * statistics moved once per micro-batch in order. micro = 1 is sp_train_step's bits.
 * The model on the CPU. Returns the batch's mean loss; on failure NaN with the message,
 * as sp_train_step (the message cleared at the start, the engine's work joined). */
float sp_train_step_accum(sp_model *m, sp_engine *e, sp_optim *o, sp_tape *t, const sp_tensor *x, const int *y,
                          int micro, double *fwd_s, double *bwd_s, double *step_s);

/* ---- the whole step as one device graph (--cuda-graph, docs/CUDA.md) --------------------
 *
 * A step whose inputs sit in fixed device buffers (the staged batch and labels) and
 * whose update reads its per-step scalars from device memory (sp_optim_device_scalars)
 * repeats the same kernels with the same arguments every time, so it can be captured
 * once and replayed. Each step is keyed by what the captured work depends on: the batch
 * and label buffers, the batch shape, the step arena's base (same base and same shapes:
 * same addresses) and the training mode. A key seen for the first time runs live; the
 * second time it is captured (and launched); after that it is replayed — no host work
 * but the scalars' copy and one launch. A new shape (the last, smaller batch of an
 * epoch) is a new key: live, then captured; a few keys are kept (two input slots).
 * Steps that draw host randomness (dropout) always run live. */
typedef struct sp_step_graph sp_step_graph;

/* Turns on o's device scalars (and tells the engine, through its set_step_capture hook,
 * that the caller captures the step) until sp_step_graph_free. m's parameters must be
 * on a device. The three calls are fallible (core/error.h's first kind): a NULL
 * argument, a model on the cpu, a build without graphs, a label out of range returns
 * NULL (SP_ERR for the counts) with the message; nothing exits. */
sp_step_graph *sp_step_graph_new(sp_model *m, sp_engine *e, sp_optim *o);
/* One training step queued on the device: x (device, fixed buffer) and the labels y
 * (host; y_dev: the same labels staged on the device). Returns the loss tensor on the
 * device, valid until the next step; nothing is waited for. */
const sp_tensor *sp_step_graph_step(sp_step_graph *g, sp_tape *t, const sp_tensor *x, const int *y, const int *y_dev);
int sp_step_graph_counts(const sp_step_graph *g, long *captures, long *replays);
void sp_step_graph_free(sp_step_graph *g);

#ifdef __cplusplus
}
#endif

#endif
