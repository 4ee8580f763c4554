/* train.h — the training loop every app runs:
 *   loader → forward on the tape → loss → backward engine → optimizer → arena reset.
 * Progress goes to stderr (a bar on a TTY, plain periodic lines otherwise). */
#ifndef SP_TRAIN_H
#define SP_TRAIN_H

#include <stdbool.h>
#include "core/engine.h"
#include "core/model.h"
#include "data/data.h"
#include "optim/optim.h"

typedef struct sp_train_cfg {
    const char *app;           /* for progress lines                          */
    int epochs;                /* 0: as many as `steps` needs                 */
    long steps;                /* stop after this many steps (0 = whole epochs); with
                                * both limits, whichever comes first            */
    int eval_every;            /* evaluate every N steps (0 = after each epoch) */
    int eval_batch;
    const char *log_path;      /* per-step CSV: step,epoch,loss,lr,seconds     */
    const sp_lr_schedule *lr;  /* indexed by epoch; NULL = constant            */
    bool quiet;
    /* Resumable checkpoints (schedulers/checkpoint.h): every save_every steps and after
     * the last step to save_path; resume_path restores one before the first step, and
     * the run continues bitwise as if uninterrupted (steps/epochs count from the start).
     * run_meta: the settings a resume must match, {"key", "value", ..., NULL}. */
    long save_every;
    const char *save_path, *resume_path;
    const char *const *run_meta;
    /* Called after every step with the steps done so far (NULL = none): soak tests. */
    void (*on_step)(void *ctx, long steps);
    void *on_step_ctx;
    /* --parallel: the executor runs each step on the MPI ranks (schedulers/exec.h). Every
     * rank calls sp_train alike; the test set is split over the ranks for evaluation. */
    struct sp_exec *exec;
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
} sp_train_result;

sp_train_result sp_train(sp_model *m, sp_engine *e, sp_optim *o, sp_loader *train, sp_dataset *test,
                         const sp_train_cfg *cfg);

/* Mean loss and accuracy of m on d (forward only), in batches of `batch`. */
void sp_evaluate(sp_model *m, sp_dataset *d, int batch, double *loss, double *acc);

/* One training step on (x, y): zero grads, forward, backward, optimizer step.
 * Returns the loss; fwd_s/bwd_s/step_s receive the forward, backward (engine only)
 * and whole-step times if not NULL. */
float sp_train_step(sp_model *m, sp_engine *e, sp_optim *o, sp_tape *t, const sp_tensor *x, const int *y,
                    double *fwd_s, double *bwd_s, double *step_s);

#endif
