/* sim.h — the simulator of a master schedule (plan/schedule.h): the greedy recursion of
 * [U], memory over time, the simulated order as an action list, and diagrams.
 *
 *   sp_schedule *s = sp_schedule_new(sp_scheme_find("lpp"), &cfg, costs);
 *   sp_sim r;  sp_simulate(s, costs, &r);        // latency, transfers, storage, ρ
 *   sp_diagram_text(stdout, s, &r, 0);             // rows = workers, columns = time
 *
 * [U] Rahimi, "Unifying Parallelization Schemes to Train Deep Nets" (2025): the greedy
 *     simulator recursion and its latency, network and memory figures. */
#ifndef SP_SIM_H
#define SP_SIM_H

#include <stdbool.h>
#include <stdio.h>
#include "schedulers/plan/actions.h"
#include "schedulers/plan/schedule.h"
#include "schedulers/memory/memory.h"

/* ------------------------------------------------------------------------------------ */
/* The simulator ([U] "Latency, network, and memory usage from w(s,b,d)")               */

typedef struct sp_worker_stats {
    int jobs;
    double busy, utilization;
    int act_recv;       /* activations fetched from another worker ([U]'s Σ 1[w(s−1,b) ≠ w]) */
    int grad_recv;      /* backward iterates z_{s+1} fetched from another worker         */
    int weight_recv;    /* (s, b) computed here with weights elsewhere ([U] Σ 1[w_w ≠ w]) */
    int weight_stages;  /* stages whose source-of-truth weights live here               */
    int peak_act;       /* peak number of stage activations held at once                */
    double peak_act_bytes;    /* the same in bytes (sp_costs.act_bytes; units without costs) */
    double peak_weight_bytes; /* fetched weights (w_weights ≠ w) held at once, bytes        */
    double peak_mem_bytes;    /* activations + fetched weights held at once, bytes          */
    sp_mem_breakdown mem;     /* the whole memory (sp_sim_memory_breakdown; optimizer state
                                 SP_OPTIM_SLOTS_DEFAULT unless the caller refills it)   */
} sp_worker_stats;

typedef struct sp_sim {
    int njobs, workers;
    double *start, *finish;     /* per job                                             */
    int *order_off, *order;     /* CSR: worker w runs order[order_off[w] .. +1) in order */
    sp_worker_stats *worker;
    double latency;             /* max_j t(j)                                          */
    double utilization;         /* mean over workers                                   */
    double unit;                /* τ: mean time of one F or one whole backward step     */
    double rho;                 /* ρ = S·B / ((latency/τ)·W)                             */
    double rho_bound;           /* M / S, M = peak activations (max over workers)       */
    int act_recv_max, grad_recv_max, weight_recv_max, weight_stages_max, peak_act_max;
    double peak_act_bytes_max;
    /* Memory over time (sim_memory.c), per worker w: points mem_off[w] .. mem_off[w+1);
     * from mem_time[i] until the next point, w holds mem_act[i] bytes of activations and
     * mem_wgt[i] bytes of fetched weights (a step function; the first point is at 0). */
    int *mem_off;
    double *mem_time, *mem_act, *mem_wgt;
} sp_sim;

/* The greedy recursion of [U]: repeatedly start the ready job that can start soonest,
 * ties broken by n. costs may be NULL (F = 1, backward = 1, δ = G = 1/2). A schedule
 * with a fixed order (s->fixed, from an action list) runs each worker's jobs in that
 * order instead, each starting at max(worker free, preds done). */
void sp_simulate(const sp_schedule *s, const sp_costs *costs, sp_sim *r);
void sp_sim_free(sp_sim *r);

/* The memory pass sp_simulate ends with (sim_memory.c). On worker w = w_compute(F(s, b))
 * the activation of (s, b) — act_bytes[s], what F_s keeps for its backward — is held
 * from the start of F(s, b) until the last of its backward jobs ends (G when δ and G are
 * split, B otherwise); a job run with weights from another worker (fsdp, fslpp) holds
 * param_bytes[s] of fetched weights from its start to its finish. Events at one instant
 * on one worker follow that worker's job order (a release at the end of a job before
 * the acquisitions of the jobs after it), so a worker's peak depends only on its own
 * order: the quantity the executor measures (exec.h). Fills peak_act, peak_act_bytes,
 * peak_weight_bytes, peak_mem_bytes and the mem_* series. */
void sp_sim_memory(const sp_schedule *s, const sp_costs *c, sp_sim *r);

/* A worker's whole memory in one step, in bytes (sp_mem_breakdown, memory.h): what it
 * holds for the step besides the activations, plus the peak over time of activations and
 * fetched weights. Per stage s with weights (param_bytes[s] = p > 0), C the workers
 * computing any job of s and O those holding its weights (w_weights):
 *   C = O (replicas): each member holds weights p, gradients p, optimizer state k·p,
 *       and, when |C| > 1, a gradient-bucket buffer p (the allreduce's);
 *   O = {o}, C ≠ O (fsdp, fslpp): o holds weights p, gradients p, state k·p; every
 *       member of C ∪ {o} a bucket buffer p (the reduce's), every member of C gradients p
 *       (fetched weights are counted over time, sp_sim peak_weight_bytes).
 * k: optimizer state per parameter, sp_optim_slots (memory.h). What the executor
 * measures (exec.h, exec_memory.c: sp_exec_mem_gather) is the same sum from its own
 * buffers. */
void sp_sim_memory_breakdown(const sp_schedule *s, const sp_costs *c, const sp_sim *r, int optim_slots, int worker,
                             sp_mem_breakdown *out);
/* The same for every worker at once, into r->worker[w].mem: time in the jobs, where a
 * call per worker takes jobs × workers. */
void sp_sim_memory_breakdowns(const sp_schedule *s, const sp_costs *c, sp_sim *r, int optim_slots);

/* ------------------------------------------------------------------------------------ */
/* Diagrams                                                                             */

/* Pipeline diagram as text, like [U]'s tables: a header of time steps, one row per
 * worker, a cell per time step holding the job label ("--" continues a longer job,
 * blank = idle). max_cols ≤ 0: 160. Longer runs are drawn at a coarser time step. */
void sp_diagram_text(FILE *out, const sp_schedule *s, const sp_sim *r, int max_cols);
/* The same as SVG, one colour per micro-batch (forward light, backward dark, G pale),
 * with axis titles, the latency, utilisation and bubble fraction (1 − utilisation), and
 * a box too narrow for its label labelled upright with direction and stage. unit: the
 * costs' unit (sp_costs.unit: "us" is drawn as µs; NULL or "unit" as time units). */
void sp_diagram_svg(FILE *out, const sp_schedule *s, const sp_sim *r, const char *title);
void sp_diagram_svg_unit(FILE *out, const sp_schedule *s, const sp_sim *r, const char *title, const char *unit);

/* ------------------------------------------------------------------------------------ */
/* Back to an action list (sim_actions.c)                                               */

/* The simulated order as an action list: chunk = a worker's maximal run of consecutive
 * stages (or the list's chunks), one action per run of the worker's jobs of one chunk,
 * direction and micro-batch. NULL with sp_error naming why where that is not an action
 * list: a stage computed on several workers (ddp, fsdp, lpp, …), or a worker whose order
 * interleaves the layers of one action with other jobs. */
struct sp_actions *sp_schedule_to_actions(const sp_schedule *s, const struct sp_sim *r);


#endif
