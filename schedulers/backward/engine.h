/* engine.h — backward engines, chosen by name at run time ("linear", "bppsa", "ooo").
 *
 * An engine takes a recorded tape and the loss node and accumulates ∂l/∂θ into every
 * parameter's grad. Engines only call op entry points and backend kernels; they never
 * touch raw device memory. The engines live in schedulers/backward/.
 *
 * The training loop and the runner (train/, cli/) know engines only through this
 * interface: `backward` and `destroy`, the optional hooks below (an engine fills the
 * ones it has; the sp_engine_* calls supply the default for a NULL one), and each
 * engine's descriptor (sp_engine_def): its name, its capabilities (SP_ENGINE_*), which
 * the runner checks flags against, and its own options with the flags that set them,
 * from which the runner builds its command line. Adding an engine is its own file(s),
 * with its descriptor, and one line in engine.c's registry. */
#ifndef SP_ENGINE_H
#define SP_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include "core/error.h"
#include "core/tape.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --scan-levels by name: the full scan, and a depth chosen from the plan's cost model. */
#define SP_SCAN_LEVELS_FULL (-1)
#define SP_SCAN_LEVELS_AUTO (-2)

/* What a caller gives an engine: the engine's own options, and what any engine with the
 * capability (SP_ENGINE_*, below) reads. */
typedef struct sp_engine_opts {
    /* The engine's own options: a struct of the type its descriptor declares
     * (sp_bppsa_opts, sp_ooo_opts in engines.h / ooo.h); NULL: its defaults. The engine
     * keeps a copy (sp_engine.opts.own then points at it). */
    const void *own;
    const char *trace_path;   /* SP_ENGINE_TRACE: a Chrome trace JSON             */
    /* SP_ENGINE_LAYER_UPDATES: when set, the optimizer update U_i of layer l runs as a
     * task right after its weight gradient (the sub lane; the linear engine: in its walk,
     * after the backward of l's last node), and the caller skips its own step. */
    void (*update)(void *ctx, sp_layer *l);
    void *update_ctx;
    /* SP_ENGINE_PLAN */
    bool plan;                /* print the static plan (summary)                   */
    bool plan_full;           /* ... with every step                               */
    const char *plan_svg;     /* draw the plan to this file                        */
    bool plan_only;           /* make (and print) the plan, compute nothing        */
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
    SP_ENGINE_BLOCKED = 1 << 6,        /* its host backward reads activations and δ only through
                                        * the ops' kernels: the training forward may keep them in
                                        * oneDNN's blocked layout (sp_tape.blocked, core/tape.h)  */
    SP_ENGINE_STEP_GRADS = 1 << 7,     /* with opts.update: runs each layer's update in its walk
                                        * (the caller then updates the layers it did not reach:
                                        * sp_optim_step_rest), and makes the gradient of a
                                        * parameter that lives in the step (sp_model_step_grads)
                                        * in its arena, zeroed, for its layer's backward and
                                        * update only                                            */
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

/* ---- an engine's descriptor: what it is and what it takes ---------------------------- */

/* One of an engine's own options, as the flag --name that sets the member at `offset`
 * of its options struct (a const char *, an int or a long); the runner makes it a flag of
 * cli/flags.h with the same help, choices, range and meta, needing --backward NAME and
 * then `needs`. */
typedef enum { SP_ENGINE_OPT_STR, SP_ENGINE_OPT_INT, SP_ENGINE_OPT_LONG } sp_engine_opt_kind;
typedef struct sp_engine_option {
    const char *name;
    sp_engine_opt_kind kind;
    size_t offset;
    const char *help;
    const char *choices, *range, *meta;   /* optional, as sp_flag's               */
    const char *needs;                    /* optional: after "backward=NAME,"      */
} sp_engine_option;

/* Bytes an engine's own options struct may take (a caller keeps one per engine, e.g.
 * sp_run_opts), and how many engines the registry may hold. */
#define SP_ENGINE_OPTS_BYTES 64
#define SP_ENGINES_MAX 8
typedef union sp_engine_opts_store {
    long long ll_;
    double d_;
    void *p_;
    unsigned char bytes[SP_ENGINE_OPTS_BYTES];
} sp_engine_opts_store;

typedef struct sp_engine_def {
    const char *name;          /* --backward NAME, and sp_engine.name              */
    const char *alias;         /* another name users may type for it, or NULL      */
    unsigned caps;             /* SP_ENGINE_*                                      */
    sp_engine *(*create)(const sp_engine_opts *opts);
    /* Its own options: a struct of opts_size bytes (at most SP_ENGINE_OPTS_BYTES), its
     * defaults, the flags that set its members (ends with name == NULL) under the --help
     * heading `group`, and finish: after the flags are parsed, what they set turned into
     * the struct's final values (--scan-levels N|full|auto), a bad combination, also with
     * the run's threads and device (on_device), refused with one line and exit 2. All
     * NULL / 0 for an engine without options. */
    size_t opts_size;
    const void *opts_default;
    const sp_engine_option *options;
    const char *group;
    void (*finish)(void *own, int threads, bool on_device);
} sp_engine_def;

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

/* The registry: the i-th engine's descriptor (NULL past the last), and the one named
 * `name` or with that alias (NULL: none). */
const sp_engine_def *sp_engine_def_at(int i);
const sp_engine_def *sp_engine_def_find(const char *name);
/* The engine's own options from an opts: opts->own, or its defaults where NULL. */
const void *sp_engine_own_opts(const sp_engine_def *d, const sp_engine_opts *opts);

/* NULL opts = defaults. name may be an alias. An unknown name (the line lists the known
 * engines), a NULL name or options the engine refuses: NULL with the one-line message in
 * sp_last_error(); nothing exits. */
sp_engine *sp_engine_create(const char *name, const sp_engine_opts *opts) SP_MUST_CHECK;
void sp_engine_destroy(sp_engine *e);
int sp_backward(sp_engine *e, sp_tape *t, sp_node *loss);
const char *sp_engine_names(void);   /* "linear|bppsa|ooo" as registered */
/* The aliases as pairs {"reverse", "linear", …, NULL} (sp_flag.aliases). */
const char *const *sp_engine_aliases(void);
sp_engine_opts sp_engine_opts_default(void);   /* what NULL opts means */
/* The capabilities of a registered engine (0 for an unknown name; an alias names its
 * engine), and the engines that have all of `caps`, for messages: "linear, bppsa or ooo"
 * (written to buf). */
unsigned sp_engine_caps(const char *name);
const char *sp_engine_names_with(unsigned caps, char *buf, size_t len);

/* The hooks through their defaults: backward_async runs sp_backward without one; sync,
 * wait_layer, set_step_capture, check and report do nothing; set_graph(e, true) fails
 * with one line (the engine cannot capture its backward); plan returns false. */
int sp_backward_async(sp_engine *e, sp_tape *t, sp_node *loss);
int sp_engine_sync(sp_engine *e);
int sp_engine_wait_layer(sp_engine *e, const sp_layer *l);
int sp_engine_set_graph(sp_engine *e, bool on);
int sp_engine_set_step_capture(sp_engine *e, bool on);
int sp_engine_check(sp_engine *e, struct sp_model *m, const sp_tensor *x1, const int *y1);
int sp_engine_report(sp_engine *e, const sp_report_writer *w);
bool sp_engine_plan(sp_engine *e, struct sp_model *m, const sp_tensor *x, const int *y, const sp_report_writer *w);

/* make CUDA=1: every engine's device parts (schedulers/backward/register_cuda.c), after
 * sp_cuda_init; sp_cuda_start calls it. */
void sp_backward_cuda_register(void);

/* Helpers shared by engines. */
int sp_mark_needs_grad(sp_tape *t);             /* sets needs_grad, nconsumers  */
int sp_alloc_grads(sp_tape *t, sp_node *loss);  /* grad buffers (zeroed where accumulated); seeds loss = 1 */

#ifdef __cplusplus
}
#endif

#endif
