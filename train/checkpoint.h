/* checkpoint.h — resumable training checkpoints (--save-every N, --resume FILE).
 *
 * One safetensors file holds the weights and buffers (batch norm's running statistics)
 * under their PyTorch names (exactly what sp_model_save writes, so torch and --load
 * read them) and, under names that start
 * with SP_ST_STATE_PREFIX ("state/"), everything else a run needs to continue bitwise
 * as if it had never stopped:
 *
 *   state/optim/<param>/step             I64 []      updates this parameter has had
 *   state/optim/<param>/momentum_buffer  F32 [..]    sgd with momentum
 *   state/optim/<param>/exp_avg          F32 [..]    adam, adamw (m)
 *   state/optim/<param>/exp_avg_sq       F32 [..]    adam, adamw (v)
 *   state/train/step                     I64 []      steps done
 *   state/train/epoch                    I64 []      epoch of those steps (0-based)
 *   state/train/batch                    I64 []      batches of that epoch done
 *   state/train/epoch_loss               F64 []      Σ loss over them (the epoch's mean)
 *   state/train/lr                       F64 []      learning rate in use
 *
 * The optimizer's tensor names are torch.optim's state keys. The learning-rate schedule
 * is a closed form of the epoch, and the data order a function of (seed, epoch) only
 * (data/loader.c), so (epoch, batch) and the seed restore both: the run's settings that
 * decide the result (optimizer and its hyper-parameters, schedule, batch, seed,
 * shuffling, and the training set: "run.dataset" = its name, sample count, sample shape,
 * classes and a hash of three samples) are stored as metadata "run.<key>" and a resume
 * with different ones is refused, naming the first difference. Loading also refuses a
 * step that is not epoch x batches + batch (checked by sp_train, which knows the
 * batches) and any non-finite weight, buffer, optimizer state or loop value. Not saved: a dropout layer's own generator
 * (no app model has dropout; a model with it resumes, but not bitwise). With torch:
 *   sd = {k: v for k, v in load_file(f).items() if not k.startswith("state/")}
 * Saves are atomic (sp_st_write): a kill or a failed write leaves the previous
 * checkpoint complete. */
#ifndef SP_CHECKPOINT_H
#define SP_CHECKPOINT_H

#include "core/error.h"
#include "core/model.h"
#include "optim/optim.h"

typedef struct sp_train_state {
    long step;          /* steps done                      */
    int epoch;          /* epoch those steps end in        */
    long batch;         /* batches of that epoch done      */
    double epoch_loss;  /* Σ loss of those batches         */
    double lr;          /* the optimizer's rate            */
} sp_train_state;

/* run_meta: NULL or {"key", "value", ..., NULL}, stored as "run.<key>". SP_OK, or
 * SP_ERR with the message in sp_last_error() and the old file intact. */
int sp_checkpoint_save(const char *path, const sp_model *m, const sp_optim *o, const sp_train_state *s,
                       const char *const *run_meta) SP_MUST_CHECK;
/* Checks everything first (a resumable checkpoint of this model and optimizer, the same
 * run settings), then restores weights, optimizer state and *s. SP_OK, or SP_ERR with
 * one line naming the file in sp_last_error() and nothing changed. */
int sp_checkpoint_load(const char *path, sp_model *m, sp_optim *o, sp_train_state *s,
                       const char *const *run_meta) SP_MUST_CHECK;

#endif
