/* schedule.h — the schedule IR of parallel training: jobs, per-stage costs, the model's
 * segments, schemes and their registry, the master schedule, schedules from action lists,
 * and the LayerPipe partitioner. The simulator, memory over time and the diagrams that
 * read a schedule are schedulers/sim/ (sim/sim.h); the MPI executor that runs one is
 * schedulers/exec/.
 *
 * Papers, cited by tag:
 *   [U] Rahimi, "Unifying Parallelization Schemes to Train Deep Nets" (2025): the master
 *       schedule w(s,b,d) = (w_weights, w_compute), pred(), the tie-break n(s,b,d),
 *       Table 1 and the greedy simulator recursion.
 *   [O] Oh et al., "Out-Of-Order BackProp: An Effective Scheduling Technique for Deep
 *       Learning", EuroSys'22, §5.2: gradient fast-forwarding (δ before G) and modulo
 *       layer allocation.
 *   [L] Unnikrishnan & Parhi, "LayerPipe: Accelerating Deep Neural Network Training by
 *       Intra-Layer and Inter-Layer Gradient Pipelining and Multiprocessor Scheduling",
 *       §III and Algorithm 1.
 *
 * The vocabulary of [U]: S stages (layers of a chain), B micro-batches, W workers. A job
 * is one stage of one micro-batch in one direction, j = (s, b, d). A *scheme* says where
 * each job runs (w_compute), which worker holds the source of truth of its weights
 * (w_weights), and how a worker breaks ties between ready jobs (the priority n, smaller
 * first). The backward job may be split in two finer jobs, δ (input gradient, on the
 * critical path) and G (weight gradient, off it) — [U] "additional axes", [O] §3, [L] §III.
 *
 *   sp_schedule *s = sp_schedule_new(sp_scheme_find("lpp"), &cfg, costs);
 *   sp_sim r;  sp_simulate(s, costs, &r);          // sim/sim.h
 *
 * The same sp_schedule is what a real executor runs: each worker (MPI rank) takes its
 * jobs in the simulated order (sp_sim.order), waits for the jobs in sp_schedule_preds,
 * fetches weights from weights[j] when they live elsewhere, and sends its outputs to the
 * workers of sp_schedule_succs. */
#ifndef SP_SCHEDULE_H
#define SP_SCHEDULE_H

#include <stdbool.h>
#include <stdio.h>
#include "core/error.h"
#include "schedulers/memory/memory.h"

/* ------------------------------------------------------------------------------------ */
/* Jobs                                                                                 */

typedef enum sp_dir {
    SP_FWD = 0,      /* F_s: x_{s+1} = F_s x_s                                          */
    SP_BWD = 1,      /* B_s: the whole backward step, δ and G together ([U] z_s = B_s z_{s+1}) */
    SP_BWD_DELTA = 2,/* δ: input gradient ∂l/∂x_s, feeds stage s−1 (critical path)     */
    SP_BWD_GRAD = 3, /* G: weight gradient ∂l/∂w_s (nothing waits for it)              */
} sp_dir;

typedef struct sp_job {
    int stage, micro;
    sp_dir dir;
} sp_job;

/* "f", "b", "d" (δ), "g" (G). */
const char *sp_dir_letter(sp_dir d);

/* ------------------------------------------------------------------------------------ */
/* Per-stage durations and sizes (one micro-batch)                                      */

#define SP_STAGE_NAME 32

typedef struct sp_costs {
    int stages;
    char (*name)[SP_STAGE_NAME];
    double *fwd;          /* time of F_s                                                */
    double *delta;        /* time of δ_s (BP δ in [L] Table II)                          */
    double *grad;         /* time of G_s (BP G)                                          */
    double *act_bytes;    /* activation kept from F_s until its backward (1 = "a unit") */
    double *param_bytes;  /* weights of stage s                                          */
    bool *movable;        /* [L] §III-C: δ_s may be split and moved to the next processor */
    double *out_bytes;    /* F_s's output, the message to stage s + 1 (from a model); NULL:
                             unknown (a profile), act_bytes stands in                      */
    double *opt;          /* the optimizer step of the stage, as a run measured it (the
                             executor's --costs-out column opt); 0: not measured         */
    bool has_opt;         /* opt was measured (the profile has the column)                */
    char unit[16];        /* "unit", "us", or the profile's unit                        */
} sp_costs;

/* Every constructor refuses (sp_fail, one line) a duration or a size outside the bounds
 * of schedulers/plan/limits.h, or durations whose total exceeds this: the schedule's sums
 * must stay far from overflow. */
#define SP_COSTS_MAX_TOTAL 1e300

/* [U] Table 1 costs: F takes fwd, the backward takes δ + G. */
sp_costs *sp_costs_uniform(int stages, double fwd, double delta, double grad);
/* A profile CSV: a header naming the columns, then one row per stage/layer, e.g.
 *     layer,fwd,bwd_grad,bwd_delta
 *     conv1,1.20e6,2.16e6,4.01e7
 * Column names (case-insensitive, aliases in brackets): layer [name], fwd [fp],
 * bwd_grad [bp_g, grad], bwd_delta [bp_delta, delta]; optional movable (0/1), act_bytes,
 * param_bytes, opt [optimizer] (the stage's optimizer step, measured; sets has_opt). Lines starting with '#' and blank lines are skipped. Bad input: sp_fail
 * naming the file, line and column. The file must be a regular file (sp_open_read). */
sp_costs *sp_costs_read_csv(const char *path);
/* The same as a status: SP_OK with *out set, or SP_ERR with that line in sp_last_error()
 * and nothing allocated. */
int sp_costs_load_csv(const char *path, sp_costs **out) SP_MUST_CHECK;
void sp_costs_write_csv(FILE *out, const sp_costs *c);
void sp_costs_free(sp_costs *c);
double sp_costs_bwd(const sp_costs *c, int stage);   /* δ + G */

struct sp_model;
struct sp_tape;
/* Model-derived durations: one stage per segment of the model (sp_tape_segments: per op
 * node of a chain; a residual block's body, say, in a DAG), from its ops' cost() at
 * micro-batch size `batch`; time = FLOPs / (gflops · 10^3) in µs, summed over the
 * segment, as are param_bytes; act_bytes sp_tape_segment_act_bytes; out_bytes the
 * segment's output. The input is one sample of shape in_shape[0..in_ndim) (batch
 * dimension excluded). A DAG with no cut point but its output (one segment of several
 * layers): sp_fail, one line. */
sp_costs *sp_costs_from_model(struct sp_model *m, int in_ndim, const int *in_shape, int batch,
                              double gflops);
/* The same with measured durations: layer_us[3l], [3l + 1], [3l + 2] the F, δ and G µs of
 * the model's layer l (bench/opprof's OPPROF_COSTS), summed per segment. */
sp_costs *sp_costs_from_model_times(struct sp_model *m, int in_ndim, const int *in_shape, int batch,
                                    const double *layer_us);
/* The cuts of a model's shape-only tape t (sp_model_forward_shapes) into a chain
 * (schedule_segments.c): after each articulation point — an op node every path from the
 * input to the output goes through (every op node of a chain; ResNet-20's stem layers,
 * each block's add and relu, its pooling and fc). Writes last[k], the tape index of
 * segment k's last node (its output the only tensor segment k + 1 reads; segment k
 * spans last[k − 1] + 1 .. last[k], segment 0 from node 1), room for t->n entries, and
 * returns the number of segments (0: no op node). */
int sp_tape_segments(const struct sp_tape *t, int *last);
/* Segment [first, end)'s name (build/schedule's stage names, the executor's): a single
 * node's label ("conv1", "relu_3"); several nodes: the dotted prefix their named layers
 * share ("layer2.0"), else the first node's label and the count ("conv_a+3"). */
void sp_tape_segment_name(const struct sp_tape *t, int first, int end, char name[SP_STAGE_NAME]);
/* What tape nodes [first, end) keep for their backward (sp_tape_segment_act_bytes) and
 * the activation one node keeps (sp_node_act_bytes): schedulers/memory/memory.h. */

/* ------------------------------------------------------------------------------------ */
/* Schemes and the master schedule                                                      */

typedef struct sp_schedule sp_schedule;

/* A scheme as sp_schedule_new takes it: the pair of functions of [U] plus the tie-break n
 * and, optionally, an in-flight cap (an extra pred edge that bounds activation memory,
 * as 1F1B needs). The registry's schemes are views of its rows (sp_scheme_find); a
 * caller may also build its own (placed as SP_PLACE_NONE: by its rules alone). */
typedef struct sp_scheme {
    const char *name;
    const char *summary;
    bool split_backward;                        /* δ and G are separate jobs by default */
    void (*setup)(sp_schedule *s);              /* defaults and constraints (sp_fail)   */
    int (*compute)(const sp_schedule *s, sp_job j);    /* w_compute(s, b, d)            */
    int (*weights)(const sp_schedule *s, sp_job j);    /* w_weights(s, b, d)            */
    long (*priority)(const sp_schedule *s, sp_job j);  /* n(s, b, d): smaller runs first */
    /* k > 0: F(s, b) also waits until the backward of (s, b − k) is done (so at most k
     * micro-batches hold activations of stage s). NULL or 0: no cap. */
    int (*inflight)(const sp_schedule *s, int stage);
} sp_scheme;

/* ------------------------------------------------------------------------------------ */
/* The scheme registry (schemes.c): one row per scheme, the one list every list of
 * schemes reads — build/schedule's --scheme choices and --list, the runner's --parallel,
 * the teaching page, the error messages. Adding a scheme is its file (a rule set of
 * rules.h, or a generator of gen.h) plus its row.                                      */

/* How a scheme makes its schedule. */
typedef enum sp_scheme_kind {
    SP_SCHEME_RULES,   /* [U]'s rules (sp_scheme_rules): sp_schedule_new materialises every
                          job, the simulator orders each worker's jobs greedily         */
    SP_SCHEME_LIST,    /* a generator of per-rank action lists (actions.h): the order is
                          fixed by the list (sp_pp_generate_from_costs, then
                          sp_schedule_from_actions)                                     */
    SP_SCHEME_CUSTOM,  /* an action list read from a CSV (sp_actions_read_csv)          */
} sp_scheme_kind;

/* Where a RULES scheme places stages (sp_schedule.stage_worker). */
typedef enum sp_placement {
    SP_PLACE_NONE,        /* its w_compute places every job itself                        */
    SP_PLACE_CONTIGUOUS,  /* blocks of consecutive stages balanced by F + δ + G, or the
                             caller's sp_sched_config.placement                          */
    SP_PLACE_MODULO,      /* stage s on worker s mod W                                    */
} sp_placement;

/* A RULES scheme's rules (its name and help are its registry row's). */
typedef struct sp_scheme_rules {
    bool split_backward;
    sp_placement placement;
    void (*setup)(sp_schedule *s);
    int (*compute)(const sp_schedule *s, sp_job j);
    int (*weights)(const sp_schedule *s, sp_job j);
    long (*priority)(const sp_schedule *s, sp_job j);
    int (*inflight)(const sp_schedule *s, int stage);
} sp_scheme_rules;

struct sp_actions;
struct sp_pp_params;

/* One row of the registry. */
typedef struct sp_scheme_def {
    const char *name;
    sp_scheme_kind kind;
    const char *help;                        /* one line, what --list prints            */
    const sp_scheme_rules *rules;            /* SP_SCHEME_RULES                         */
    /* SP_SCHEME_LIST: SP_OK with *out set, or SP_ERR with one line naming the scheme and
     * the parameter that does not fit (nothing allocated). */
    int (*generate)(const struct sp_pp_params *p, struct sp_actions **out);
    int chunks_per_rank;                     /* SP_SCHEME_LIST: default chunks per rank:
                                                1, or 2 (V shapes; interleaved-1f1b and
                                                looped-bfs take --chunks v)             */
} sp_scheme_def;

/* The rows in listing order: the RULES schemes, the LIST schemes, custom. */
int sp_scheme_def_count(void);
const sp_scheme_def *sp_scheme_def_at(int i);
const sp_scheme_def *sp_scheme_def_find(const char *name);   /* NULL: no such scheme */

/* The activation memory of a (stage, micro-batch), as the simulator counts it:
 *   SP_MEM_WHOLE  F takes the stage's act_bytes; the last of its backward jobs frees it all
 *   SP_MEM_SAIL   the zero-bubble papers' accounting per action: F takes act_bytes, δ frees
 *                 (1 − g)·act_bytes (what only δ needs), G frees g·act_bytes (what G needs:
 *                 the layer inputs its weight gradient reads); with the backward as one
 *                 job (no split), or a stage with no δ, that job frees it all. */
typedef enum sp_act_model { SP_MEM_WHOLE = 0, SP_MEM_SAIL = 1 } sp_act_model;

typedef struct sp_sched_config {
    int stages, micro;       /* S, B                                                    */
    int workers;             /* W; 0 = the scheme's default                             */
    int groups, per_group;   /* lpp/fslpp: G and R (W = G·R); 0 = default                */
    int split;               /* -1 scheme default, 0 whole backward, 1 δ and G apart     */
    bool no_input_grad;      /* stage 0 computes no δ (its input is data) — [O] Fig. 5   */
    int first_k;             /* ddp-ooo: stages 0..first_k−1 are ooo's "first k" (0: S/2) */
    const int *placement;    /* pipeline schemes: the worker of each stage, non-decreasing
                                (e.g. LayerPipe's partition); NULL: balanced by cost    */
    const char *actions_scheme; /* sp_schedule_from_actions: the name the schedule reports
                                ("zb-h1", …); NULL: "custom"                            */
    sp_act_model mem_model;  /* how the simulator counts activations (sim_memory.c)     */
    double mem_grad_share;   /* SP_MEM_SAIL: the share of a stage's activation that only G
                                needs (0..1); δ frees the rest                          */
} sp_sched_config;

struct sp_schedule {
    const sp_scheme *scheme;
    int stages, micro, workers;
    int groups, per_group;   /* G, R for the looped schemes (1 and W otherwise)         */
    bool split_backward, input_grad;
    int first_k;             /* ddp-ooo                                                 */
    sp_act_model mem_model;  /* sp_sched_config's                                       */
    double mem_grad_share;
    int *stage_worker;       /* pipeline schemes: the worker of each stage              */
    int njobs;
    sp_job *jobs;            /* job ids 0..njobs−1                                      */
    int *compute, *weights;  /* w_compute(j), w_weights(j)                              */
    long *priority;          /* n(j)                                                    */
    int *pred_off, *preds;   /* CSR: preds of j are preds[pred_off[j] .. pred_off[j+1]) */
    int *succ_off, *succs;
    int *index;              /* (dir, micro, stage) → job id, −1 where no such job      */
    /* Schedules from action lists (sp_schedule_from_actions); NULL / 0 otherwise. */
    int *fixed_off, *fixed;  /* CSR: worker w runs fixed[fixed_off[w] .. +1) in this order */
    int chunks;              /* the list's chunks: contiguous ranges of stages          */
    int *stage_chunk;        /* [stages]: the chunk of each stage                       */
};

/* The RULES rows as schemes: ddp, fsdp, gpipe, 1f1b, lpp, fslpp, ooo-ff, ooo-modulo,
 * ddp-ooo. */
const sp_scheme *sp_scheme_find(const char *name);   /* unknown: sp_fail listing names */
int sp_scheme_count(void);
const sp_scheme *sp_scheme_at(int i);
const char *sp_scheme_names(void);                   /* "ddp|fsdp|..." */

/* Materialise every job, its workers, priority and predecessors. costs may be NULL
 * (unit costs); it only balances the contiguous placement when W < S. */
sp_schedule *sp_schedule_new(const sp_scheme *scheme, const sp_sched_config *cfg,
                             const sp_costs *costs);
void sp_schedule_free(sp_schedule *s);

int sp_schedule_find(const sp_schedule *s, int stage, int micro, sp_dir dir);  /* −1: none */
const int *sp_schedule_preds(const sp_schedule *s, int job, int *n);
const int *sp_schedule_succs(const sp_schedule *s, int job, int *n);
double sp_job_duration(const sp_schedule *s, const sp_costs *c, int job);
/* "f3", "b0", "d2", "g2" followed by the micro-batch as letters (a = 0, …, z, ba, …)
 * when B > 1: "f3c". */
const char *sp_job_label(const sp_schedule *s, int job, char *buf, int len);
/* Micro-batch b's name in every output (diagrams, SVG legend, the page): letters, base 26
 * (0 → "a", 25 → "z", 26 → "ba"); returns its length. */
int sp_micro_name(int b, char out[16]);

/* LPP's hash [U]: h(s, b) = (R·b mod W) + (s mod R) (rules_looped.c). */
int sp_lpp_hash(int stage, int b, int groups, int per_group);

/* ------------------------------------------------------------------------------------ */
/* Schedules given as per-rank action lists (actions.h; schedule_actions.c)                 */

/* Every scheme name build/schedule and the executor take, the registry's rows in order:
 * the RULES schemes, the action-list generators (actions.h sp_pp_at), and "custom" (a
 * list read from a CSV); '|'-separated. */
const char *sp_schedule_all_names(void);
/* A generator's name or "custom". */
bool sp_scheme_is_actions(const char *name);

/* Chunks as contiguous ranges of the stages (the model's layers), balanced by each
 * stage's F + δ + G (costs NULL: unit), every chunk non-empty: stage_chunk[s] ∈ [0, chunks),
 * non-decreasing. sp_fail when chunks > stages. */
void sp_chunk_partition(const sp_costs *c, int stages, int chunks, int *stage_chunk);
/* The per-chunk costs of that partition (sums of F, δ, G and activations; transfer 0), for
 * the generators: fills arrays of `chunks` doubles each. */
void sp_chunk_costs_sum(const sp_costs *c, int stages, int chunks, const int *stage_chunk, double *f, double *i,
                        double *w, double *act);
/* The list of generator g for `ranks` ranks and `micro` micro-batches, from the layer costs
 * c split into ranks · v chunks (v = chunks_per_rank, 0: the generator's default) with the
 * costs summed per chunk; c NULL: unit chunk costs. mem_limit as sp_pp_params: counted in
 * chunk micro-batches, or with mem_bytes in bytes (each chunk weighs its layers'
 * act_bytes). transfer: the time of a message between two ranks, in the costs' unit (the
 * generators that search, zb-auto, weigh it; with c only). What build/schedule, the
 * executor and the teaching page all call. SP_ERR
 * with one line (naming the scheme) when the chunks do not fit the layers or the
 * generator refuses the parameters; *out NULL then. */
struct sp_pp_generator;
int sp_pp_generate_from_costs(const struct sp_pp_generator *g, const sp_costs *c, int ranks, int micro,
                              int chunks_per_rank, double mem_limit, bool mem_bytes, double transfer,
                              struct sp_actions **out) SP_MUST_CHECK;

/* The master schedule of an action list: the stages are cfg->stages layers grouped into
 * the list's chunks (sp_chunk_partition), chunk c on rank chunk_rank[c]; each action
 * expands to its chunk's layer jobs — F in forward order, I (δ), W (G) and B in reverse
 * layer order — and each worker's job order is fixed to its list's order, which
 * sp_simulate and the executor follow. Any I or W (or cfg->split = 1) splits the
 * backward (a B is then δ and G per layer). The list must pass sp_actions_check; a
 * mismatch (more chunks than stages, cfg->workers or cfg->micro other than the list's)
 * is an sp_fail naming it. */
sp_schedule *sp_schedule_from_actions(const struct sp_actions *a, const sp_sched_config *cfg,
                                      const sp_costs *layer_costs);

/* ------------------------------------------------------------------------------------ */
/* LayerPipe ([L] §III, Algorithm 1) and the contiguous PipeDream-style partition       */

typedef struct sp_layerpipe {
    int layers, processors;     /* L, Np requested                                     */
    int used;                   /* processors that received work                       */
    double target;              /* the final Tp (maximum processor time)               */
    int relaxations;            /* times Tp was multiplied by α (line 34)               */
    /* per processor, in layer order (processor 0 runs the first layers): */
    double *assigned;           /* F, G and δ′ of the layers it owns                    */
    double *borrowed;           /* δ″ taken over from the layer before its first layer  */
    double *total;
    /* per layer: */
    int *owner;                 /* processor of F, G and δ′                             */
    double *delta_keep;         /* δ′                                                   */
    double *delta_moved;        /* δ″, computed on processor owner[l + 1]               */
    int *moved_to;              /* −1 when nothing moved                                */
    /* the contiguous partition (PipeDream): whole layers, bottleneck minimised */
    int *contig_owner;
    double *contig_load;
    double bottleneck, contig_bottleneck;
} sp_layerpipe;

/* Algorithm 1 on per-layer FP/G/δ times. alpha > 1 relaxes Tp when Np processors do not
 * suffice (the paper leaves α open; the app uses 1.01). */
void sp_layerpipe_partition(const sp_costs *c, int processors, double alpha, sp_layerpipe *lp);
void sp_layerpipe_free(sp_layerpipe *lp);
void sp_layerpipe_print(FILE *out, const sp_costs *c, const sp_layerpipe *lp);

/* Contiguous partition of n loads into at most `parts` blocks minimising the largest
 * block, ties broken by the smallest sum of squared block loads (the most even one).
 * owner[i] ∈ [0, parts), non-decreasing. Returns the bottleneck. */
double sp_partition_contiguous(const double *load, int n, int parts, int *owner);

#endif
