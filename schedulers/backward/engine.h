/* engine.h — backward engines, chosen by name at run time ("linear", "bppsa", "ooo").
 *
 * An engine takes a recorded tape and the loss node and accumulates ∂l/∂θ into every
 * parameter's grad. Engines only call op entry points and backend kernels; they never
 * touch raw device memory. The engines live in schedulers/backward/.
 *
 * The training loop and the runner (train/) know engines only through this
 * interface: `backward` and `destroy`, the optional hooks below (an engine fills the
 * ones it has; the sp_engine_* calls supply the default for a NULL one), and the
 * capabilities of the registry (SP_ENGINE_*), which the runner checks flags against. */
#ifndef SP_ENGINE_H
#define SP_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include "core/tape.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --scan-levels by name: the full scan, and a depth chosen from the plan's cost model. */
#define SP_SCAN_LEVELS_FULL (-1)
#define SP_SCAN_LEVELS_AUTO (-2)

typedef struct sp_engine_opts {
    int scan_levels;          /* bppsa: up-sweep levels; SP_SCAN_LEVELS_FULL (any other
                               * value < 0 too), SP_SCAN_LEVELS_AUTO             */
    const char *order;        /* ooo: conventional | ooo | reverse-first-k | list */
    int k;                    /* ooo reverse-first-k                          */
    size_t mem_cap;           /* ooo reverse-first-k memory cap (bytes, 0=none) */
    const char *trace_path;   /* ooo: Chrome trace JSON                       */
    int lanes;                /* ooo: 0 = auto (the executor measures one lane and two,
                               * keeps the faster), 1 = one lane, 2 = two lanes    */
    /* ooo: when set, the optimizer update U_i of layer l runs as a task right after
     * its weight gradient (the sub lane), and the caller skips its own step. */
    void (*update)(void *ctx, sp_layer *l);
    void *update_ctx;
    bool plan;                /* bppsa: print the static plan (summary)       */
    bool plan_full;           /* bppsa: ... with every step of the scan       */
    const char *plan_svg;     /* bppsa: draw the scan tree to this file       */
    bool plan_only;           /* bppsa: make (and print) the plan, compute nothing */
} sp_engine_opts;

/* What an engine can do, known before one is made (the registry's entry; copied into
 * sp_engine.caps by sp_engine_create). */
enum {
    SP_ENGINE_DEVICE = 1 << 0,         /* runs on a device (--device cuda)                     */
    SP_ENGINE_PLAN = 1 << 1,           /* has a static plan to print: the plan hook (--plan)   */
    SP_ENGINE_TRACE = 1 << 2,          /* writes a task trace to opts.trace_path (--trace)     */
    SP_ENGINE_LAYER_UPDATES = 1 << 3,  /* runs each layer's optimizer update as a task of its
                                        * own (opts.update); the caller skips its own step      */
    SP_ENGINE_REORDERS_DW = 1 << 4,    /* weight gradients wait behind the input gradients: the
                                        * parallel executor orders them so too (DDP: ddp-ooo)   */
    SP_ENGINE_OVER_INPUTS = 1 << 5,    /* its host backward reads no output a ReLU overwrote:
                                        * the training forward may run ReLUs over their inputs
                                        * (sp_tape.reuse_inputs, core/tape.h)                    */
};

/* Where an engine writes its figures: keys of a run's JSON line (the runner passes one
 * onto its sp_json, cli/summary.h). */
typedef struct sp_report_writer {
    void *ctx;
    void (*str)(void *ctx, const char *key, const char *value);
    void (*num)(void *ctx, const char *key, double value);      /* a float (%.9g)           */
    void (*integer)(void *ctx, const char *key, long value);
} sp_report_writer;

struct sp_model;
typedef struct sp_engine sp_engine;
struct sp_engine {
    const char *name;
    sp_engine_opts opts;
    unsigned caps;             /* SP_ENGINE_*, from the registry                           */
    void (*backward)(sp_engine *e, sp_tape *t, sp_node *loss);
    void (*destroy)(sp_engine *e);
    void *state;
    /* ---- optional hooks (NULL: the engine has nothing to do there) ---------------------
     * Overlapping the next step's forward with the tail of this backward: backward_async
     * returns once the critical path is done while the rest (weight gradients, opts.update)
     * may still run; until sync, the tape and batch stay alive, and each layer is applied
     * only after wait_layer on it (the loop sets it as the tape's before_apply). */
    void (*backward_async)(sp_engine *e, sp_tape *t, sp_node *loss);
    void (*sync)(sp_engine *e);                                   /* join: everything done */
    void (*wait_layer)(sp_engine *e, const sp_layer *l);          /* l's update is done    */
    /* Device graphs: set_graph captures the engine's own backward once per shape and
     * replays it (--cuda-graph with a loop of one's own); set_step_capture tells it that
     * the caller captures the whole step (sp_step_graph): no capture, no timing events. */
    void (*set_graph)(sp_engine *e, bool on);
    void (*set_step_capture)(sp_engine *e, bool on);
    /* The options against a model, before training, on one sample (x1, y1): one line
     * naming the valid range and exit 2 where the engine would clamp silently. */
    void (*check)(sp_engine *e, struct sp_model *m, const sp_tensor *x1, const int *y1);
    /* What the last backward ran, as JSON keys (e.g. ooo's order, bppsa's scan_levels). */
    void (*report)(sp_engine *e, const sp_report_writer *w);
    /* --plan: one forward and backward of m on the batch (x, y) that prints the engine's
     * static plan on stdout (opts.plan, plan_full, plan_svg) and computes nothing else;
     * its figures go to w. false when no plan was made. */
    bool (*plan)(sp_engine *e, struct sp_model *m, const sp_tensor *x, const int *y, const sp_report_writer *w);
};

#define SP_ENGINE_DEFAULT "linear"   /* --backward when not given */

/* NULL opts = defaults. Unknown name: sp_fail listing the known engines. */
sp_engine *sp_engine_create(const char *name, const sp_engine_opts *opts);
void sp_engine_destroy(sp_engine *e);
void sp_backward(sp_engine *e, sp_tape *t, sp_node *loss);
const char *sp_engine_names(void);   /* "linear|bppsa|ooo" as registered */
sp_engine_opts sp_engine_opts_default(void);   /* what NULL opts means */
/* The capabilities of a registered engine (0 for an unknown name), and the engines that
 * have all of `caps`, for messages: "linear, bppsa or ooo" (written to buf). */
unsigned sp_engine_caps(const char *name);
const char *sp_engine_names_with(unsigned caps, char *buf, size_t len);

/* The hooks through their defaults: backward_async runs sp_backward without one; sync,
 * wait_layer, set_step_capture, check and report do nothing; set_graph(e, true) fails
 * with one line (the engine cannot capture its backward); plan returns false. */
void sp_backward_async(sp_engine *e, sp_tape *t, sp_node *loss);
void sp_engine_sync(sp_engine *e);
void sp_engine_wait_layer(sp_engine *e, const sp_layer *l);
void sp_engine_set_graph(sp_engine *e, bool on);
void sp_engine_set_step_capture(sp_engine *e, bool on);
void sp_engine_check(sp_engine *e, struct sp_model *m, const sp_tensor *x1, const int *y1);
void sp_engine_report(sp_engine *e, const sp_report_writer *w);
bool sp_engine_plan(sp_engine *e, struct sp_model *m, const sp_tensor *x, const int *y, const sp_report_writer *w);

/* make CUDA=1: every engine's device parts (schedulers/backward/register_cuda.c), after
 * sp_cuda_init; sp_cuda_start calls it. */
void sp_backward_cuda_register(void);

/* Helpers shared by engines. */
void sp_mark_needs_grad(sp_tape *t);             /* sets needs_grad, nconsumers  */
void sp_alloc_grads(sp_tape *t, sp_node *loss);  /* grad buffers (zeroed where accumulated); seeds loss = 1 */

#ifdef __cplusplus
}
#endif

#endif
