/* optim.h — optimizers (SGD, Adam, AdamW) and learning-rate schedules.
 *
 * The update rules are PyTorch 1.13's torch.optim single-tensor paths, operation by
 * operation: hyper-parameters are doubles (Python floats), combined in double exactly
 * where PyTorch combines them in Python (1 − β1, lr / bc1, 1 − lr·wd), and rounded to
 * float only where a tensor kernel takes them as a scalar. All tensor arithmetic is
 * float32 in PyTorch's order, so a run matches torch.optim to a few float ulps.
 *
 *   sp_optim *o = sp_optim_create("adamw", m->params, m->nparams, &cfg);
 *   sp_lr_schedule s = sp_lr_parse("cosine:100", cfg.lr);
 *   for (int epoch = 0; ...) {
 *       sp_optim_set_lr(o, sp_lr_at(&s, epoch));
 *       ... forward, backward ...
 *       sp_optim_step(o);          (or sp_optim_step_params as gradients become ready)
 *       sp_optim_zero_grad(o);
 *   }
 *   sp_optim_free(o);
 *
 * All state is per parameter (momentum buffer; Adam moments and step count) and is
 * allocated once at construction, so a step never allocates, and updating the
 * parameters in any grouping or order (sp_optim_step_params, used by the ooo engine
 * as each layer's weight gradient completes) gives bitwise the same result as one
 * sp_optim_step. The element-wise updates are split over the thread pool; every
 * element is independent, so results do not depend on the thread count. */
#ifndef SP_OPTIM_H
#define SP_OPTIM_H

#include <stdbool.h>
#include "core/error.h"
#include "core/kernels/simd.h"
#include "core/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sp_optim sp_optim;

/* ---- optimizers ------------------------------------------------------------------ */

/* torch.optim.SGD: d = g + wd·p; with momentum, buf = d on a parameter's first step,
 * else buf = momentum·buf + (1 − dampening)·d; d = nesterov ? d + momentum·buf : buf;
 * p −= lr·d. Nesterov needs momentum > 0 and dampening = 0 (as PyTorch). */
sp_optim *sp_sgd_new(sp_param **params, int n, double lr, double momentum, double dampening,
                     double weight_decay, bool nesterov);

/* torch.optim.Adam (decoupled = false: g += wd·p) and torch.optim.AdamW (decoupled =
 * true: p *= 1 − lr·wd before the moments). With t the parameter's own step count:
 * m = β1·m + (1 − β1)·g, v = β2·v + (1 − β2)·g², p −= lr/(1 − β1^t) · m / (√v/√(1 − β2^t) + eps). */
sp_optim *sp_adam_new(sp_param **params, int n, double lr, double beta1, double beta2, double eps,
                      double weight_decay, bool decoupled);

/* Hyper-parameters for sp_optim_create; each optimizer reads the fields it uses. */
typedef struct sp_optim_cfg {
    double lr;
    double weight_decay;                  /* L2 for sgd/adam, decoupled for adamw */
    double momentum, dampening;           /* sgd */
    bool nesterov;                        /* sgd */
    double beta1, beta2, eps;             /* adam, adamw */
} sp_optim_cfg;

/* PyTorch's defaults: lr 1e-3, momentum 0, dampening 0, betas (0.9, 0.999), eps 1e-8,
 * weight decay 0 (note: torch.optim.AdamW defaults to 0.01; here it is explicit). */
sp_optim_cfg sp_optim_cfg_default(void);

/* name: "sgd" | "adam" | "adamw". NULL with the one-line message in sp_last_error() for
 * an unknown name, a NULL argument, a negative count or a hyper-parameter the optimizer
 * refuses ("optim sgd: momentum -1 (expected >= 0)"); nothing exits. */
sp_optim *sp_optim_create(const char *name, sp_param **params, int n, const sp_optim_cfg *cfg) SP_MUST_CHECK;

/* The calls below are fallible (core/error.h's first kind): a NULL optimizer or
 * argument, a negative count, a parameter the optimizer does not hold, a refused value
 * returns SP_ERR (the int calls), NULL (pointers) or NaN (the doubles), with the message
 * in sp_last_error(); nothing exits. Inside sp_try an sp_fail goes to that sp_try. */

/* Update every parameter from its .grad. */
int sp_optim_step(sp_optim *o);
/* Update only params[0..k) (each must belong to o, else SP_ERR before any update; each
 * once per step). */
int sp_optim_step_params(sp_optim *o, sp_param **params, int k);
/* Update the parameters no update has read since the last sp_optim_zero_grad, each from
 * its .grad (a zero gradient for one whose gradient lives in the step and was not made:
 * sp_model_step_grads): with an engine that ran the updates of the layers its backward
 * reached (opts.update), the rest, so the step is sp_optim_step's. Refused for an
 * optimizer that clips. */
int sp_optim_step_rest(sp_optim *o);
/* Zero the .grad of every parameter (PyTorch 1.13's zero_grad(set_to_none=False)),
 * except those an update has zeroed already since the last call (below) and those whose
 * gradient lives in the step (sp_param.grad_in_step: made zeroed there). */
int sp_optim_zero_grad(sp_optim *o);
/* On (CPU parameters only; off by default): each update zeroes the gradient it has just
 * read, block by block in the same pass while the block is in cache, and the next
 * sp_optim_zero_grad skips the parameters so zeroed. The trainer's loop (update, then
 * zero_grad, then the next backward) saves the separate pass over every gradient
 * (docs/PERFORMANCE.md). Only for a caller that writes no
 * gradient between an update and the next sp_optim_zero_grad. */
int sp_optim_set_zero_in_step(sp_optim *o, bool on);
int sp_optim_set_lr(sp_optim *o, double lr);
double sp_optim_get_lr(const sp_optim *o);

/* Whole-step CUDA Graphs (docs/CUDA.md, "The whole step as one graph"): a replayed
 * graph repeats its kernels' arguments, so the scalars that change between steps (the
 * learning rate, SGD's first-step flag, Adam's bias corrections) must live in device
 * memory. With device scalars on (device optimizers only), sp_optim_stage_scalars
 * computes every parameter's scalars for the coming step exactly as its update would
 * (same doubles, same roundings), advances the step counts, and queues ONE copy of
 * them to the device on the calling lane; the update kernels then read them there.
 * Call it once per step, before the step's updates are queued (outside a capture). */
int sp_optim_device_scalars(sp_optim *o, bool on);
int sp_optim_stage_scalars(sp_optim *o);
const char *sp_optim_name(const sp_optim *o);
void sp_optim_free(sp_optim *o);

/* ---- gradient clipping (optim/clip.c) ---------------------------------------------- */

/* torch.nn.utils.clip_grad_norm_(params, max_norm) of PyTorch 1.13 (norm type 2): the
 * total norm is the 2-norm of the per-tensor 2-norms (each a float32, as torch's), the
 * coefficient max_norm / (total + 1e-6) in float32, clamped at 1; when it is below 1
 * every gradient is multiplied by it. Returns the total norm (NaN/inf propagate as in
 * torch: error_if_nonfinite=False). CPU gradients. */
double sp_clip_grad_norm(sp_param *const *params, int n, double max_norm);
/* Its pieces, for a norm whose parts live on several ranks: Σ of the squared per-tensor
 * norms, the clamped coefficient of a total norm, and the scaling. */
double sp_grad_sq_norm(sp_param *const *params, int n);
float sp_clip_coef(double total_norm, double max_norm);
int sp_grad_scale(sp_param *const *params, int n, float coef);
/* max_norm > 0: every sp_optim_step clips the gradients of all its parameters first
 * (sp_optim_step_params does not: its caller clips over the whole gradient, e.g. the
 * parallel executor); 0: off. CPU parameters only (sp_fail otherwise). */
int sp_optim_set_clip_grad_norm(sp_optim *o, double max_norm);
double sp_optim_last_grad_norm(const sp_optim *o);   /* the last sp_optim_step's total norm */

/* The undo of an optimizer step (the post-validated step of the parallel executor):
 * save copies the parameters' values, their optimizer state and step counts (call it
 * before their update; several calls append), restore puts them all back, clear forgets
 * them (the buffers stay for the next step). Zero-initialise; CPU only. */
typedef struct sp_optim_undo {
    sp_optim *o;
    float *buf;
    size_t used, cap;
    int *idx, n, cap_idx;
    long *steps;
} sp_optim_undo;
int sp_optim_undo_save(sp_optim_undo *u, sp_optim *o, sp_param *const *params, int k);
int sp_optim_undo_restore(sp_optim_undo *u);
void sp_optim_undo_clear(sp_optim_undo *u);
void sp_optim_undo_free(sp_optim_undo *u);

/* ---- the optimizer object (read-only for users; sgd.c and adam.c fill it) ---------- */

typedef void (*sp_optim_update_fn)(sp_optim *o, int i);   /* update params[i] */

/* One parameter's per-step scalars, as a device update kernel reads them (device
 * scalars on): float exactly as the CPU rule rounds them. */
typedef struct sp_optim_scalars {
    float neg_lr;           /* sgd: −lr; adam/adamw: −lr / (1 − β1^t) */
    float decay_factor;     /* adamw: 1 − lr·wd */
    float bc2_sqrt;         /* adam/adamw: √(1 − β2^t) */
    int first;              /* sgd: the parameter's first step */
} sp_optim_scalars;
typedef void (*sp_optim_scalars_fn)(sp_optim *o, int i, sp_optim_scalars *out);   /* advances steps[i] */

struct sp_optim {
    const char *name;            /* "sgd", "adam", "adamw" */
    sp_param **params;           /* own copy of the array (the params are the model's) */
    int nparams;
    double lr;
    sp_optim_cfg cfg;
    bool decoupled;              /* AdamW */
    long *steps;                 /* [nparams] steps taken by each parameter */
    size_t *offset;              /* [nparams] start of each parameter's state */
    float *state[2];             /* sgd: momentum buffer; adam: m, v (each Σ numel) */
    const char *state_names[2];  /* each state buffer's torch.optim state key, as checkpoints
                                  * save it (set by the optimizer; NULL: no such buffer) */
    sp_device device;            /* where the parameters and the state live */
    sp_optim_update_fn update;
    sp_optim_scalars_fn scalars; /* the coming step's scalars (device scalars) */
    bool zero_in_step;           /* sp_optim_set_zero_in_step */
    bool *zeroed;                /* [nparams] zeroed by its update since the last zero_grad */
    bool *stepped;               /* [nparams] updated since the last zero_grad              */
    /* device scalars (sp_optim_device_scalars): the staged scalars of each parameter */
    void *sc_handle;             /* the backend's pinned + device buffers */
    sp_optim_scalars *sc_host;   /* [nparams] staging (host) */
    const sp_optim_scalars *sc_dev;   /* [nparams] on the device, read by the kernels */
    double clip;                 /* sp_optim_set_clip_grad_norm: max norm, 0 = off     */
    double last_norm;            /* the last clipped step's total gradient norm        */
};

/* Shared constructor: validates params (non-empty, all on one device, no duplicates)
 * and allocates nstate zeroed float buffers of Σ numel on that device. */
sp_optim *sp_optim_alloc(const char *name, sp_param **params, int n, int nstate,
                         sp_optim_update_fn update);

/* PyTorch's AVX2 CPU kernels compute every "x.add_(y, alpha=a)" as one fused
 * multiply-add (vec::fmadd), so the updates use fmaf there to match torch bitwise.
 * fmaf is exactly rounded on every machine; on x86-64 the element loops are also
 * compiled for FMA hardware and picked at load time, else fmaf is a libm call. */
#define SP_OPTIM_KERNEL SP_FMA_CLONES   /* core/kernels/simd.h */

/* Runs an update's element loop fn over [0, numel) on the thread pool when the tensor is
 * large enough; with zero_in_step on, in blocks, each block's gradient zeroed after it. */
int sp_optim_for(size_t numel, void (*fn)(void *ctx, size_t begin, size_t end), void *ctx);

/* ---- device updates ---------------------------------------------------------------- */

/* One parameter's update with every scalar already rounded as the CPU rule rounds it;
 * a device backend registers kernels doing exactly the CPU arithmetic (optim_cuda.cu). */
typedef struct sp_sgd_args {
    float *p, *buf;
    const float *g;
    const sp_optim_scalars *dev;   /* device scalars: neg_lr and first read there (else NULL) */
    size_t n;
    float wd, momentum, one_minus_damp, neg_lr;
    bool use_wd, use_momentum, first, nesterov;
} sp_sgd_args;

typedef struct sp_adam_args {
    float *p, *m, *v;
    const float *g;
    const sp_optim_scalars *dev;   /* device scalars: neg_step_size, decay_factor, bc2_sqrt read there */
    size_t n;
    float wd, decay_factor, beta1, one_minus_beta1, beta2, one_minus_beta2, bc2_sqrt, eps, neg_step_size;
    bool l2, decoupled;
} sp_adam_args;

typedef struct sp_optim_device_ops {
    void (*sgd)(const sp_sgd_args *a);
    void (*adam)(const sp_adam_args *a);
    /* Device scalars: n structs in device memory (and a pinned staging copy); upload
     * queues one copy of src on the calling lane (src is copied first: it may change). */
    void *(*scalars_new)(int n, const sp_optim_scalars **dev);
    void (*scalars_upload)(void *h, const sp_optim_scalars *src, int n);
    void (*scalars_free)(void *h);
} sp_optim_device_ops;

int sp_optim_register_device(sp_device dev, const sp_optim_device_ops *ops);
/* make CUDA=1: register the fused CUDA updates (optim/optim_cuda.cu), called by
 * sp_cuda_start (cli/cuda_start.h) once the backend is up. */
void sp_optim_cuda_register(void);
/* The updates of dev; sp_fail if its backend registered none. */
const sp_optim_device_ops *sp_optim_device(sp_device dev);

/* ---- learning-rate schedules ------------------------------------------------------- */

typedef enum { SP_LR_CONSTANT, SP_LR_STEP, SP_LR_COSINE } sp_lr_kind;

/* The closed forms of torch.optim.lr_scheduler, as a function of the step (or epoch)
 * index t — the caller decides which it counts:
 *   constant  lr0
 *   step      lr0 · γ^floor(t / step_size)                               (StepLR)
 *   cosine    eta_min + (lr0 − eta_min)(1 + cos(π t / t_max)) / 2        (CosineAnnealingLR;
 *             like PyTorch it is periodic, so past t_max the rate rises again)
 * With warmup W > 0 the first W indices ramp linearly from warmup_start·lr0 towards lr0
 * (LinearLR(start_factor, total_iters=W)) and the schedule above then runs on t − W,
 * which is SequentialLR([LinearLR, schedule], milestones=[W]). */
typedef struct sp_lr_schedule {
    sp_lr_kind kind;
    double lr0;
    int step_size;          /* step   */
    double gamma;           /* step   */
    int t_max;              /* cosine */
    double eta_min;         /* cosine */
    int warmup;             /* 0: none */
    double warmup_start;    /* start factor in (0, 1] */
} sp_lr_schedule;

/* spec: "constant" | "step:STEP_SIZE:GAMMA" | "cosine:T_MAX[:ETA_MIN]", optionally
 * followed by ",warmup:STEPS[:START_FACTOR]" (START_FACTOR defaults to 1/3, LinearLR's
 * default). A malformed spec or lr0: a schedule whose lr0 is NaN, the one-line message
 * naming the spec in sp_last_error() (the apps then exit 2 with it). */
sp_lr_schedule sp_lr_parse(const char *spec, double lr0);
/* The learning rate at index t >= 0; NaN for a NULL s or a negative t. */
double sp_lr_at(const sp_lr_schedule *s, int t);

#ifdef __cplusplus
}
#endif

#endif
