/* ooo.h — out-of-order back-propagation (Oh et al., EuroSys '22, §3–5).
 *
 * A layer's backward is two products: δO (backward_input, the input gradient that the
 * layer below waits for) and δW (backward_params, the weight gradient that only the
 * optimizer update U waits for). Conventional BP runs δO_i, δW_i layer by layer; ooo BP
 * keeps the true dependencies only and reorders:
 *
 *     δO_i needs δO_{i+1}                 (its ∂l/∂y, i.e. every consumer's δO)
 *     δW_i needs δO_{i+1}                 (same ∂l/∂y, plus the saved input x_i)
 *     U_i  needs δW_i and δO_i            (δO_i reads W_i, which U_i overwrites)
 *     F'_i needs U_i and F'_{i-1}         (next step's forward; modelled, see below)
 *
 * and runs them on two lanes: main = the critical path (δO; the next forward), sub =
 * δW and U. Lanes are in-order queues that wait on each other only at cross-lane edges,
 * which is exactly two CUDA streams and events (docs/OOO.md). Every parameter gradient
 * is written by one task (or by several in a fixed order), so every order gives the
 * bits of the linear engine.
 *
 *   sp_engine *e = sp_engine_create("ooo", &(sp_engine_opts){.own = &(sp_ooo_opts){.order = "list"}});
 *   sp_backward(e, tape, loss);                 (δO, δW, and U_i when opts.update is set)
 *   const sp_ooo_stats *s = sp_ooo_last_stats(e);
 *
 * The graph, the orders and the executor are public so that tests, the simulator and
 * students can look at them; apps only need the engine and sp_ooo_last_stats. */
#ifndef SP_OOO_H
#define SP_OOO_H

#include <stdbool.h>
#include <stddef.h>
#include "schedulers/backward/engine.h"

/* ---- the task graph (schedulers/backward/ooo.c) ----------------------------------------- */

typedef enum {
    SP_OOO_DO,    /* δO: backward_input of a node, writes ∂l/∂x into its producer's grad */
    SP_OOO_DW,    /* δW: backward_params of a node, accumulates into its params' grads  */
    SP_OOO_U,     /* U:  opts.update(ctx, layer) once every δW of the layer is done     */
    SP_OOO_F      /* F': the next step's forward of a layer; modelled, never executed   */
} sp_ooo_kind;

enum { SP_OOO_MAIN = 0, SP_OOO_SUB = 1 };

typedef struct sp_ooo_task {
    sp_ooo_kind kind;
    sp_node *node;          /* DO, DW: the node; U, F: the layer's first node on the tape */
    sp_layer *layer;        /* the node's layer                                        */
    int rank;               /* 1..L: which parameterised layer (forward order), 0: none */
    int npred, nsucc;
    int *pred, *succ;       /* task ids; pred are the true dependencies above          */
    double est;             /* cost: flops + a per-task overhead, or the engine's time for  */
                            /* it last step (list order; only ratios matter)            */
    size_t alloc;           /* bytes this task brings to life when it starts           */
    size_t scratch;         /* of which released again when it ends (fan-out sum)      */
    int nuse;
    int *use;               /* memory buffers this task reads or writes                */
} sp_ooo_task;

/* Built from a recorded tape, in that tape's arena (valid until sp_tape_reset). */
typedef struct sp_ooo_graph {
    sp_ooo_task *tasks;
    int ntasks;             /* executable tasks first, then the L modelled F' tasks   */
    int nexec;              /* DO + DW + U                                             */
    int L;                  /* parameterised layers                                    */
    sp_layer **layers;      /* [L], forward order (rank r is layers[r-1])              */
    int *u_task;            /* [L]: U of layer r, or its last δW when there is no U    */
    /* Memory model (§3: δW retains its input and ∂l/∂y until it runs): every node's
     * output while a δO/δW still reads it, every op's saved state until its δO and δW
     * are done, every ∂l/∂y from its first writer until its δO and δW are done, and
     * the transient sum buffer of a fan-out δO. The data batch and parameters are not
     * counted (every order keeps them). */
    int nbuf;
    size_t *buf_bytes;
    int *buf_users;         /* tasks in whose `use` the buffer appears                 */
    size_t start_bytes;     /* retained when backward starts: M_fwd of Algorithm 2     */
} sp_ooo_graph;

/* Marks needs_grad and builds the graph. U tasks only when with_updates. */
sp_ooo_graph *sp_ooo_graph_build(sp_tape *t, sp_node *loss, bool with_updates);
const char *sp_ooo_task_label(const sp_ooo_task *task, char *buf, size_t len);   /* "δW fc1" */

/* ---- the orders (schedulers/backward/ooo_policy.c) -------------------------------------- */

typedef enum {
    SP_OOO_CONVENTIONAL,    /* δO_i, δW_i, U_i layer by layer, one lane (Fig. 3a)      */
    SP_OOO_OOO,             /* every δO first on main, δW_i on sub as soon as ready   */
    SP_OOO_REVERSE_FIRST_K, /* Algorithm 2: δW of layers > k in place, then δW_1..δW_k */
    SP_OOO_LIST             /* Algorithm 1 with cost estimates instead of profiling   */
} sp_ooo_order;

/* "conventional" | "ooo" | "reverse-first-k" | "list"; anything else exits 2. */
sp_ooo_order sp_ooo_order_parse(const char *name);
const char *sp_ooo_order_name(sp_ooo_order o);

typedef struct sp_ooo_plan {
    sp_ooo_order order;
    int *seq;               /* [nexec] the total order D: a topological order of the graph */
    int *pos;               /* [nexec] position of each task in seq                    */
    int *lane;              /* [nexec] SP_OOO_MAIN or SP_OOO_SUB                       */
    int *queue[2];          /* seq restricted to each lane                             */
    int nqueue[2];
    int k;                  /* reverse-first-k: the k used after the memory cap; else 0 */
    size_t peak_bytes;      /* memory model run over seq one task at a time            */
} sp_ooo_plan;

/* k <= 0 means ⌈L/2⌉. mem_cap > 0: reverse-first-k lowers k until seq fits (Algorithm 2,
 * lines 1–2); any order whose seq does not fit exits 2 naming the bytes it needs.
 * two_lanes = false puts every task on the main lane (the --threads 1 executor). */
sp_ooo_plan *sp_ooo_plan_make(sp_tape *t, const sp_ooo_graph *g, sp_ooo_order order, int k, size_t mem_cap,
                              bool two_lanes);
/* Peak bytes of the memory model when the tasks run one at a time in the order given. */
size_t sp_ooo_memory_peak(const sp_ooo_graph *g, const int *seq, int n);
/* Checks seq is a permutation of the executable tasks, topologically ordered, and the
 * lane queues are seq split by lane. false with the reason in why. */
bool sp_ooo_plan_check(const sp_ooo_graph *g, const sp_ooo_plan *p, char *why, size_t len);

/* ---- the two-lane executor (schedulers/backward/ooo_exec.c) ----------------------------- */

typedef struct sp_ooo_exec sp_ooo_exec;

typedef struct sp_ooo_exec_cfg {
    void (*update)(void *ctx, sp_layer *l);
    void *update_ctx;
    size_t mem_cap;         /* main waits for earlier sub tasks rather than exceed it */
    sp_tape *sub_tape;      /* the sub lane's own arena for op scratch (arenas are not thread-safe) */
    bool lanes_inline;      /* lanes run sp_parallel_for inline (one core each)        */
    int lanes;              /* a plan with a sub queue: 0 = auto (the size rule, then the
                             * lane tuner), 1 = every task on the main lane with the thread
                             * pool, 2 = both lanes (opts.lanes, --lanes)               */
} sp_ooo_exec_cfg;

/* What one run measured; times in seconds from the start of the backward. */
typedef struct sp_ooo_run {
    const sp_ooo_graph *graph;
    const sp_ooo_plan *plan;
    double *start, *end;    /* [ntasks]; F' tasks: start = end = when they could start */
    int *ran_on;            /* [ntasks] the lane that ran the task (F': SP_OOO_MAIN)   */
    int *with;              /* [ntasks] the task that ran in the same call (one lane: a
                             * δO and its node's δW, sp_node_backward), or -1; the δW's
                             * start = end = the call's end, its time in the δO's span */
    double busy[2];         /* per-lane time inside tasks                               */
    double main_done, wall; /* main lane finished; everything finished                 */
    int lanes;              /* 2: the sub lane was started for this backward; 1: not   */
    size_t peak_bytes;      /* memory model, live, as the lanes actually interleaved  */
    size_t scratch_live_bytes;   /* the lanes' op scratch still held at the end: what ops
                                  * kept for a later call (conv2d's blocked dy)         */
} sp_ooo_run;

sp_ooo_exec *sp_ooo_exec_new(void);
void sp_ooo_exec_free(sp_ooo_exec *x);
/* Starts the sub lane on its thread (when the plan uses it) and runs the main lane on
 * the calling thread; returns when the main queue is done. run is filled by finish. */
void sp_ooo_exec_begin(sp_ooo_exec *x, sp_tape *t, const sp_ooo_graph *g, const sp_ooo_plan *p,
                       const sp_ooo_exec_cfg *cfg, sp_ooo_run *run);
void sp_ooo_exec_wait_task(sp_ooo_exec *x, int task);
/* A backward of fewer flops (ops' cost models) runs on the main lane alone, with the
 * thread pool (default 5e7); tests set 0 to exercise both lanes on small models. */
void sp_ooo_exec_set_min_two_lane_flops(double flops);   /* 0: always two lanes, no tuning */
/* Off: every backward above the size rule runs on two lanes (tests that time the
 * lanes); on (default): the executor measures both modes and keeps the faster. */
void sp_ooo_exec_set_lane_tuning(bool on);
/* The lane tuner on its own (tests): n steps of one backward, step k's time given by
 * dur(k, mode, ctx) (mode 1: two lanes, 0: one); writes each step's mode into modes[k]
 * and returns the pick after them (1 two lanes, 0 one, -1 not yet decided). */
int sp_ooo_lane_tuner_replay(double (*dur)(long step, int mode, void *ctx), void *ctx, long n, int *modes);
/* The lane mode the tuner picked (1 or 2) by its last probe window's paired step times,
 * for the backward it last ran; 0 when the last backward was not tuned (forced lanes,
 * the size rule, a one-lane plan) or no window has decided yet. */
int sp_ooo_exec_tuned_lanes(const sp_ooo_exec *x);
void sp_ooo_exec_finish(sp_ooo_exec *x);
bool sp_ooo_exec_busy(const sp_ooo_exec *x);
/* Every task of the running backward is done (only the join is left). */
bool sp_ooo_exec_all_done(const sp_ooo_exec *x);

/* A copy of one run's timeline that outlives the tape (the engine keeps the last one). */
typedef struct sp_ooo_trace_rec {
    char name[48];
    int kind, lane, node;
    double start, end;      /* seconds from the backward's start                       */
} sp_ooo_trace_rec;

typedef struct sp_ooo_trace {
    sp_ooo_trace_rec *rec;
    int n, cap;
    int (*flow)[2];         /* cross-lane dependencies, as rec indices (the CUDA events) */
    int nflow, fcap;
    char title[96];
} sp_ooo_trace;

/* schedulers/backward/ooo_trace.c */
void sp_ooo_trace_capture(sp_ooo_trace *tr, const sp_ooo_run *run, const char *title);
/* A path ending in ".svg": a picture. Anything else: Chrome trace event JSON
 * (ui.perfetto.dev, chrome://tracing). Both show one box per task on its lane, arrows
 * for cross-lane edges, and "F' <layer> may start" where the next forward of a layer
 * becomes possible. Unwritable path: exit 2. */
void sp_ooo_trace_write(const sp_ooo_trace *tr, const char *path);
void sp_ooo_trace_free(sp_ooo_trace *tr);

/* ---- the device executor (schedulers/backward/ooo_cuda.cu, docs/OOO.md "On the GPU") -------- */

/* Two prioritised streams: the main-lane tasks on lane 0 (high priority), the sub-lane
 * ones on lane 1 (low priority), each task after cudaStreamWaitEvent on the end event of
 * every predecessor queued on the other stream. Registered by sp_ooo_cuda_register; the
 * engine uses it when the loss lives on the device. */
typedef struct sp_ooo_device_stats {
    long graph_captures;    /* --cuda-graph: backwards captured (a new shape, or the first) */
    long graph_replays;     /* ... and replayed                                          */
    int cross_events;       /* cudaStreamWaitEvent per backward (cross-stream edges)     */
    long layer_waits;       /* next forwards' waits for one layer's U (sp_ooo_wait_layer) */
} sp_ooo_device_stats;

typedef struct sp_ooo_device_exec {
    void *(*create)(void);
    void (*destroy)(void *x);
    /* Queues the plan; returns at once. timing: per-task events whose times fill run at
     * finish (the trace, the list order's profile); graph: --cuda-graph. */
    void (*begin)(void *x, sp_tape *t, const sp_ooo_graph *g, const sp_ooo_plan *p, const sp_ooo_exec_cfg *cfg,
                  sp_ooo_run *run, bool timing, bool graph);
    /* Joins the streams (the caller's stream waits for the sub stream's last task);
     * when the backward was timed, waits for it and fills run's times (seconds). */
    void (*finish)(void *x, sp_ooo_run *run);
    void (*stats)(void *x, sp_ooo_device_stats *out);
    /* Before the join: the calling lane's stream waits for task (a U) on its stream. */
    void (*wait_task)(void *x, int task);
} sp_ooo_device_exec;

void sp_ooo_register_device(const sp_ooo_device_exec *x);
/* make CUDA=1: register the CUDA executor (schedulers/backward/ooo_cuda.cu), called by
 * sp_cuda_start (cli/cuda_start.h) once the backend is up. */
void sp_ooo_cuda_register(void);
/* --cuda-graph: on the device, capture the backward (δO and δW on both streams, their
 * events) once its shapes are steady, replay it each step, re-capture when they change.
 * The per-layer updates U run after the replay on the sub stream (their scalars, e.g.
 * Adam's step count, change every step). Not with a trace (no event times in a graph). */
void sp_ooo_set_cuda_graph(sp_engine *e, bool on);
/* The caller captures the whole step as one graph (train/train.h, sp_step_graph):
 * no capture of the engine's own, no event timing (a graph has none), and the list
 * order keeps its flop estimates (a captured plan must not change between replays). */
void sp_ooo_set_step_capture(sp_engine *e, bool on);
/* Zeroes when the engine has not run on the device. */
sp_ooo_device_stats sp_ooo_device_stats_get(sp_engine *e);

/* ---- the engine (schedulers/backward/ooo.c) ---------------------------------------------- */

typedef struct sp_ooo_stats {
    const char *order;
    int k;                  /* reverse-first-k: k after the cap; 0 otherwise           */
    int lanes;              /* lanes the backwards ran on: opts.lanes when 1 or 2; auto:
                             * 1 with --threads 1, the conventional order or below the
                             * size rule, else the tuner's pick (sp_ooo_exec_tuned_lanes),
                             * or the last backward's until a probe window decides  */
    int ntasks;             /* δO + δW + U executed                                    */
    long steps;             /* backward passes run by this engine                      */
    double wall_s;          /* backward + updates                                      */
    double critical_s;      /* main lane done: what sp_ooo_backward_async waits for    */
    double busy_s[2];       /* per lane                                                */
    double first_ready_s;   /* U_1 done: the next forward could begin                  */
    size_t start_bytes;     /* retained when backward starts (M_fwd)                   */
    size_t peak_bytes;      /* model, as run                                           */
    size_t plan_peak_bytes; /* model, the order run one task at a time                 */
    size_t conventional_peak_bytes;   /* model, conventional order: overhead reference */
    size_t mem_cap;
    size_t scratch_live_bytes;   /* op scratch the lanes held at the backward's end (run) */
    int fused;              /* δO + δW pairs run as one call (one lane: sp_node_backward) */
} sp_ooo_stats;

/* The engine's own options (sp_engine_opts.own; --order, --k, --lanes, --mem-cap). */
typedef struct sp_ooo_opts {
    const char *order;      /* conventional | ooo | reverse-first-k | list; NULL: ooo       */
    int k;                  /* reverse-first-k: layers in reverse-first order (0: half)    */
    long mem_cap;           /* reverse-first-k memory cap (bytes, 0 = none)                */
    int lanes;              /* 0 = auto (the executor measures one lane and two, keeps the
                             * faster), 1 = one lane, 2 = two lanes                        */
    const char *lanes_arg;  /* --lanes as given: 1 | 2 | auto, which the descriptor's
                             * finish turns into lanes; NULL: lanes as set                 */
} sp_ooo_opts;

/* The constructor, sp_engine_ooo_create, is registered in schedulers/backward/engines.h;
 * it fills the engine's hooks with sp_ooo_backward_async, sp_ooo_sync, sp_ooo_wait_layer,
 * sp_ooo_set_cuda_graph, sp_ooo_set_step_capture and these two (ooo_hooks.c): --k
 * against m's parameterised layers; the last backward's order, k, critical path, peak
 * bytes and graph counts as JSON keys. */
struct sp_model;
void sp_ooo_check(sp_engine *e, struct sp_model *m, const sp_tensor *x1, const int *y1);
void sp_ooo_report(sp_engine *e, const sp_report_writer *w);
/* The last backward's numbers; e must be an "ooo" engine (exit 2 otherwise). */
const sp_ooo_stats *sp_ooo_last_stats(sp_engine *e);
/* The last backward's graph, plan and timings; valid until its tape is reset. */
const sp_ooo_run *sp_ooo_last_run(sp_engine *e);
/* Writes the last backward's trace now (also done at destroy when opts.trace_path). */
void sp_ooo_write_trace(sp_engine *e, const char *path);

/* Overlapping the next forward with the tail of this backward (F'_i after U_i):
 * backward_async returns when the critical path is done while δW and U continue on the
 * sub lane. Until sp_ooo_sync: keep this tape and the batch alive (record the next step
 * on another tape), and apply a layer only after sp_ooo_wait_layer on it. On a device
 * nothing blocks the host: backward_async returns once the tasks are queued, wait_layer
 * makes the calling lane's stream wait for the layer's U event, and sync makes it wait
 * for the sub stream's last task (zero the gradients only after it). */
void sp_ooo_backward_async(sp_engine *e, sp_tape *t, sp_node *loss);
void sp_ooo_wait_layer(sp_engine *e, const sp_layer *l);
void sp_ooo_sync(sp_engine *e);

#endif
