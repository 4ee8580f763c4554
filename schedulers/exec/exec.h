/* exec.h — the master schedule executed for real, one MPI rank per worker.
 *
 * The executor builds the SAME sp_schedule the simulator draws (schedulers/plan/schedule.h)
 * from the model's segments as stages (sp_tape_segments, the simulator's stage table: a
 * chain's layers one each; in a model with residual or dense connections the runs of
 * layers between two layers that every path goes through, one tensor crossing each
 * boundary; the loss rides with the last one), the scheme, B micro-batches and W = the
 * communicator's size workers, simulates it with the stage costs, and then every rank
 * runs its own jobs in the simulated order sp_sim.order:
 *
 *   F(s, b)       stage s's layers applied on micro-batch b (its own tape), the input
 *                 taken from the local tape or received from the rank that ran F(s−1, b)
 *   B / δ (s, b)  its layers' backward_input in reverse (and, for B, backward_params),
 *                 from ∂l/∂y_s taken from the local tape or received from the rank that
 *                 ran δ(s+1, b); δ keeps each layer's δ for G
 *   G (s, b)      its layers' backward_params
 *
 * A job's output goes, non-blocking, to every other rank that runs one of its
 * successors. Weights follow w_weights: a stage computed by several ranks that all hold
 * it (ddp, lpp) has its gradients summed by a non-blocking allreduce over those ranks,
 * started as soon as the rank's last gradient job of the bucket is done (buckets of
 * --bucket-mb, consecutive stages); a stage whose master copy lives on one rank (fsdp,
 * fslpp) is broadcast from it at the start of the step and its gradients are reduced to
 * it. The owner(s) then run the optimizer on their stages — for ddp, a bucket's update
 * waits until the next step's forward first needs one of its stages, so the collectives
 * overlap that forward too (cross-step overlap; sp_exec_sync_weights and sp_exec_finish
 * apply what is outstanding; $SCANPROP_EXEC_STEPWISE=1 turns it off). Every rank sees the same
 * global batch; micro-batch b is rows [b·n/B, (b+1)·n/B), and its loss gradient is
 * scaled by its share of the batch, so every scheme computes the gradient of the mean
 * loss over the whole batch — the single-process step.
 *
 * Configurations the schedule cannot run (W ≠ G·R, more pipeline workers or chunks than
 * stages — naming where the model cannot be cut —, fewer micro-batches than
 * data-parallel workers, a batch that B does not divide, scan over a model that is not a
 * chain) are refused with one line before any rank starts work.
 *
 * The action-list schemes (a generator of actions.h, or custom with cfg.actions: a CSV)
 * give each rank a fixed list of chunk actions; sp_schedule_from_actions expands it to the
 * stages' jobs, chunks of contiguous stages on the ranks the list names (a rank may hold
 * several non-adjacent chunks), and every rank runs exactly that order. A list that
 * cannot run, or does not fit the ranks, the micro-batches or the stages, is refused
 * before any work.
 *
 * The schemes are build/schedule's (sp_schedule_all_names) and "scan" (sp_exec_scheme_names):
 * "ddp-ooo" is ddp in ooo's reverse first-k order of δ and G (cfg.ooo with "ddp" is the
 * same run, the apps' --parallel ddp --backward ooo); "scan" is BPPSA across ranks — GPipe's forward with one
 * micro-batch, then a scan over the ranks' products of transposed Jacobians (exec_bppsa.c),
 * or, when the first layer is recurrent (rnn, gru), a scan over its time steps split
 * into one segment per rank (the forward then runs whole on every rank). */
#ifndef SP_EXEC_H
#define SP_EXEC_H

#include <stdbool.h>
#include <stdio.h>
#include "core/comm/comm.h"
#include "core/model.h"
#include "optim/optim.h"
#include "schedulers/plan/schedule.h"
#include "schedulers/sim/sim.h"

typedef struct sp_exec_cfg {
    const char *scheme;        /* one of sp_exec_scheme_names(): ddp | fsdp | gpipe | 1f1b | lpp |
                                  fslpp | ooo-ff | ooo-modulo | ddp-ooo, the action-list
                                  schemes (1f1b-strict, zb-h1, …, custom) | scan          */
    int micro;                 /* B; 0: W (data parallel), 2·W (pipelines)              */
    int groups;                /* lpp/fslpp: G (R = W / G); 0: 1                         */
    const char *partition;     /* "cost" (default: measured stage costs) | "layerpipe"  */
    double bucket_mb;          /* gradient buckets (MB); <= 0: one bucket per stage      */
    const char *costs_in;      /* a profile CSV instead of measuring (sp_costs_read_csv) */
    const char *costs_out;     /* write the stage costs this run measured (rank 0, at
                                  sp_exec_finish): the calibration for build/schedule    */
    const char *order_out;     /* write "rank job-label ..." lines: the executed order   */
    const char *trace_path;    /* Chrome/Perfetto trace of every rank's jobs and waits   */
    bool ooo;                  /* with "ddp": the scheme "ddp-ooo" (an error elsewhere)   */
    int k;                     /* ddp-ooo: ooo's reverse first-k order of the weight
                                  gradients over the first k parameterised layers; k <= 0:
                                  half of them                                           */
    double clip_grad_norm;     /* > 0: clip the global gradient norm before the updates
                                  (torch.nn.utils.clip_grad_norm_ over every stage)       */
    bool post_validate;        /* with a clip: each rank updates before the global norm
                                  arrives and rolls the update back when the clip scales
                                  it (exec_clip.c); false: the updates wait for the norm  */
    int chunks;                /* action-list generators: chunks per rank; 0: the scheme's */
    const char *actions;       /* --parallel custom: the per-rank action lists (CSV)      */
    double mem_limit;          /* zb-auto: peak activations per rank (chunk micro-batches,
                                  or bytes with mem_limit_bytes); 0: none                */
    bool mem_limit_bytes;      /* mem_limit in bytes: each chunk weighs the act_bytes of
                                  its layers (sp_node_act_bytes at the micro-batch)      */
    bool sync_bn;              /* ddp, fsdp, ddp-ooo: synchronized batch norm, the
                                  statistics over the global batch (exec_buffers.c)      */
} sp_exec_cfg;

typedef struct sp_exec sp_exec;

/* Collective over `world`. sample_shape: one sample (no batch dimension); batch: the
 * global batch every step gets (shorter batches must split into B parts too). */
sp_exec *sp_exec_new(sp_comm *world, sp_model *m, sp_optim *o, const sp_exec_cfg *cfg, int sample_ndim,
                     const int *sample_shape, int batch);
void sp_exec_free(sp_exec *x);

/* One training step on the global batch (identical on every rank): zero grads, the
 * rank's jobs, gradient synchronisation, the owners' optimizer steps. Returns the batch's
 * mean loss (every rank). Optional times as sp_train_step. */
float sp_exec_step(sp_exec *x, const sp_tensor *in, const int *labels, double *fwd_s, double *bwd_s,
                   double *step_s);

/* Which rows of a global batch of n samples this rank reads: need[i] = SP_EXEC_ROW_X when
 * it runs the first stage's forward of row i's micro-batch (the input), | SP_EXEC_ROW_Y
 * when it runs the last stage's (the label: the loss). 0: another rank's row — a data
 * parallel rank reads 1/W of each batch; a pipeline's first and last stages read the
 * inputs and the labels, the middle stages nothing; the time scan reads every row. The
 * rows of a micro-batch are those sp_exec_step takes, [b·n/B, (b+1)·n/B). */
enum { SP_EXEC_ROW_X = 1, SP_EXEC_ROW_Y = 2 };
void sp_exec_rows_needed(const sp_exec *x, int n, unsigned char *need);

/* Every rank gets every stage's current weights (before evaluation or --save), and every
 * buffer (batch norm's running statistics) from the rank that owns it. */
void sp_exec_sync_weights(sp_exec *x);
/* The batch-norm semantics of the run (docs/DISTRIBUTED.md): "per-rank" (ddp, fsdp,
 * ddp-ooo), "synchronized" (--sync-bn) or "per-micro-batch" (the pipelines); NULL for a
 * model without buffers. */
const char *sp_exec_batch_norm(const sp_exec *x);
/* The semantics a run of scheme `scheme` gives a model with buffers: as above. */
const char *sp_exec_batch_norm_of(const char *scheme, bool sync_bn);

/* Batch norm's messages (sim_comm.h's sp_sim_buffers) that the executor sends for model m
 * (input shape ndim/shape, one sample) under schedule s, whose stages are m's segments
 * (sp_tape_segments, as sp_costs_from_model cuts it: build/schedule --model): the
 * running statistics' broadcast at each step's start and, with sync_bn, --sync-bn's
 * allgathers. NULL when m has no buffers or sends none; free with sp_sim_buffers_free. */
struct sp_sim_buffers *sp_model_buffers_sim(sp_model *m, int ndim, const int *shape, const sp_schedule *s,
                                            bool sync_bn);

/* A function every rank's executor calls halfway through its jobs of each step (rank,
 * step counted from 1), for programs that inject a fault to test the ranks' timeouts
 * (tests/fault_demo.c: a rank that exits, stops answering or computes slower); it may
 * return seconds added to the next job's compute. None is set in the library or the apps:
 * no release program has a fault to inject. NULL: none (the default). */
typedef double (*sp_exec_job_hook)(int rank, long step);
void sp_exec_set_job_hook(sp_exec_job_hook hook);

int sp_exec_rank(const sp_exec *x);
int sp_exec_workers(const sp_exec *x);
const sp_schedule *sp_exec_schedule(const sp_exec *x);
const sp_costs *sp_exec_costs(const sp_exec *x);
const char *sp_exec_scheme(const sp_exec *x);   /* the scheme that runs: "ddp-ooo" for ddp + ooo */

/* The names --parallel takes, '|'-separated: build/schedule's schemes, then "scan". */
const char *sp_exec_scheme_names(void);
bool sp_exec_scheme_known(const char *name);

/* Totals since sp_exec_new, gathered over the ranks (collective): per rank busy seconds
 * (inside jobs), comm seconds (waiting on communication) and wall seconds of steps;
 * step_mean / comm_mean: seconds per step after the first, wall / waiting on
 * communication, mean over the ranks (NaN before step 2) — the statistic of the job costs
 * --costs-out writes, so a prediction from those compares like with like. */
enum { SP_EXEC_MEDIAN_SKIP = 5 };
typedef struct sp_exec_stats {
    int workers;
    long steps;
    double *busy, *comm, *wall;   /* [workers] */
    double step_mean, comm_mean;
    /* the median step after the first SP_EXEC_MEDIAN_SKIP, each rank's, mean over the
     * ranks (NaN with fewer steps): the steady state, cold starts and rare stalls left out */
    double step_median;
    /* µs of a job, mean over the ranks and the jobs after the first step, that was neither
     * its ops' compute nor waiting on a message: the executor's own time (exec_predict.c) */
    double job_us;
    /* [workers]: the largest activation bytes the rank held at once (measured: each
     * F(s, b) holds sp_node_act_bytes of its node until the rank's last backward job of
     * (s, b) ends), and the same from the schedule's simulation (sp_sim peak_act_bytes);
     * the two are equal (exec_memory.c says why). */
    double *peak_act_bytes, *sim_peak_act_bytes;
    /* [workers], or NULL when the run is not the time scan: the time steps whose weight
     * gradients each rank computed in the last step (its own segment, about T/W). */
    int *wgrad_steps;
    /* --parallel scan: which levels ran, "hillis-steele" or "blelloch"; NULL otherwise. */
    const char *scan_algo;
    /* [workers]: the rank's whole memory (sp_mem_breakdown's terms, memory.h): measured
     * from the executor's own buffers — the weights and optimizer state of the stages it
     * steps, the gradients it writes, its gradient-bucket buffers, the activation peak,
     * and weights broadcast to it from an owner (held for the whole step) — and predicted
     * by sp_sim_memory_breakdown from the schedule and the run's optimizer (exec_memory.c). */
    double *peak_mem_bytes, *pred_peak_mem_bytes;
} sp_exec_stats;
void sp_exec_gather_stats(sp_exec *x, sp_exec_stats *st);
void sp_exec_stats_free(sp_exec_stats *st);

/* --clip-grad-norm (exec_clip.c): steps whose global norm clipped, post-validated updates
 * rolled back and redone, the last step's global norm, seconds waited for the norm. */
typedef struct sp_exec_clip {
    long steps_clipped, rollbacks;
    double last_norm, wait_s;
} sp_exec_clip;
void sp_exec_clip_stats(const sp_exec *x, sp_exec_clip *out);

/* --parallel scan --plan: the cross-rank scan's segments, its ⌈log₂ W⌉ levels (which
 * rank sends which T to which, sizes and FLOPs per level) and the hand-off. Returns the
 * number of levels. Not collective; rank 0 prints. */
int sp_exec_print_plan(const sp_exec *x, FILE *f);

/* The simulator's step time (ms) for the schedule this run executed: its order, this
 * run's measured job costs and optimizer steps (what --costs-out writes: the means over
 * the steps after the first; the optimizer step estimated from the parameter bytes,
 * sim_comm.h sp_opt_us_estimate, only for a stage never stepped after the first step),
 * message sizes from the stages' shapes, the executor's buckets, --clip-grad-norm's
 * allgather and cm (NULL: communication costs nothing) — through sp_simulate_comm. For
 * --parallel scan (over layers or time steps, either algorithm) the scan's own program
 * per rank (exec_bppsa.c) with the phases each rank measured, through sp_simulate_prog.
 * Collective. Kept for the trace's simulated rows. */
struct sp_comm_model;
double sp_exec_predict_step_ms(sp_exec *x, const struct sp_comm_model *cm);

/* Writes the finished trace / order files (collective). */
void sp_exec_finish(sp_exec *x);

#endif
