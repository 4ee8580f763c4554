/* memory.h — memory planning and accounting, one module for the backward engines
 * (schedulers/backward/), the simulator's memory model and the executor's measurement
 * (schedulers/sim/, schedulers/exec/), the pipeline costs (schedulers/plan/) and the run
 * summary (cli/). It includes core/ only.
 *
 *   What a node holds   its output, what its op saves, the activation a stage keeps
 *                       for its backward, its δ (memory.c)
 *   The δ plan          the reverse walk's ∂l/∂y buffers, placed by lifetime in one
 *                       region per device (grad_plan.c)
 *   Live and peak       bytes held now and the most held at once (sp_mem_peak)
 *   The whole memory    weights, gradients, optimizer state, gradient buckets and
 *                       activations of a worker or a process (memory.c) */
#ifndef SP_MEMORY_H
#define SP_MEMORY_H

#include <stdbool.h>
#include <stddef.h>
#include "core/tape.h"

struct sp_model;

/* ---- what a node holds ------------------------------------------------------------- */

/* Its output in float32. */
size_t sp_node_out_bytes(const sp_node *n);
/* What its op keeps for the backward besides the input (sp_cost.saved_bytes at the
 * node's batch; 0 for an op without a cost). */
double sp_node_saved_bytes(const sp_node *n);
/* The activation a stage's forward keeps for its backward — act_bytes of the node n of a
 * tape (shape-only or real): its input x_s in float32 plus what its op saves besides.
 * sp_costs_from_model and the executor (its costs and its measured peak, exec.h) both
 * count this. */
double sp_node_act_bytes(const sp_node *n);
/* What tape nodes [first, end) keep for their backward: the sum of sp_node_act_bytes, a
 * tensor two of them read counted once (a residual block's input, read by its first
 * conv and by its shortcut conv). One node: sp_node_act_bytes itself. */
double sp_tape_segment_act_bytes(const sp_tape *t, int first, int end);

/* ---- δ (∂l/∂y of a node) --------------------------------------------------------------- */

#define SP_GRAD_ALIGN 256   /* a δ's unit in its region: the device arena's, a multiple of the host's 64 */

/* Whether the backward to loss computes a δ for n: an op node that needs a gradient
 * (sp_mark_needs_grad), or the loss. Exactly the nodes a reverse walk visits. */
bool sp_grad_has(const sp_node *n, const sp_node *loss);
/* A δ's bytes in its region: its output's, rounded up to SP_GRAD_ALIGN. */
size_t sp_grad_bytes(const sp_node *n);

/* ---- the δ plan ---------------------------------------------------------------------- */

/* The reverse walk reaches node j at time L − j (L: the loss's index). δ_i is written
 * first by the consumer of i of highest index (its writer w_i; i itself when no node up
 * to the loss reads i, and for the loss) and read last by node i's own backward: it lives
 * from the start of w_i's backward to the end of i's. Two δ whose lifetimes do not
 * overlap may share bytes. sp_grad_plan_make simulates the walk once over byte offsets
 * (best fit in a sorted list of free ranges, freed ranges merged) and allocates one
 * region per device of the simulated high water from the tape, so every δ has the same
 * offset in every step of the same tape. The region is about the largest live set of δ
 * (two for a chain, a few more across a residual block) instead of their sum. A δ that
 * is accumulated into (a fan-out, a node no op up to the loss reads, the loss itself) is
 * zeroed when its life begins, just before w_i's backward (sp_grad_plan_begin), since
 * its bytes were another δ's until then. A node j whose op writes δx over δy
 * (sp_opdef.delta_over: ReLU) hands its δ's bytes on to its one input i when j is i's
 * writer and i's δ is not accumulated: δ_i's life begins where δ_j's ends, in the same
 * bytes (over[j]).
 *
 * Under AddressSanitizer a host δ is poisoned outside its life (sp_grad_plan_begin
 * unpoisons, sp_grad_plan_end poisons, sp_grad_plan_finish hands the region back), so an
 * op that reads a δ after its node's backward stops the run at the read. */
typedef struct sp_grad_plan {
    int L;
    int *writer;             /* w_i; −1: no δ (a leaf, or no parameter upstream)        */
    size_t *off;             /* δ_i's offset in its device's region                     */
    bool *zero;              /* zeroed when its life begins                             */
    bool *over;              /* its bytes go on as its one input's δ (sp_opdef.delta_over) */
    unsigned char *host;     /* the host region (NULL: none), host_bytes long           */
    size_t host_bytes;
    size_t *fr_off, *fr_len; /* the simulation's free ranges, sorted by offset          */
    int nfree;
} sp_grad_plan;

/* Plans and places every δ of the backward of t to loss: n->grad of each node with a δ
 * is a view into its device's region (data NULL on a shape-only tape), the others' data
 * NULL. Everything is allocated from the tape. */
void sp_grad_plan_make(sp_grad_plan *p, sp_tape *t, sp_node *loss);
/* Whether node i has a δ (the walk visits it). */
static inline bool sp_grad_plan_has(const sp_grad_plan *p, int i) { return p->writer[i] >= 0; }
/* Before node j's backward: the δ whose life begins there are live, zeroed where
 * accumulated. */
void sp_grad_plan_begin(const sp_grad_plan *p, sp_tape *t, int j);
/* After node n's backward: its δ is dead (read for the last time). */
void sp_grad_plan_end(const sp_grad_plan *p, const sp_node *n);
/* After the walk: the host region is the arena's bytes again (the next step's). */
void sp_grad_plan_finish(const sp_grad_plan *p);

/* ---- live and peak ------------------------------------------------------------------- */

/* Bytes held now and the most held at once since the counter was zeroed. */
typedef struct sp_mem_peak {
    double live, peak;
} sp_mem_peak;

/* Holds live bytes now. */
static inline void sp_mem_set(sp_mem_peak *m, double live)
{
    m->live = live;
    if (live > m->peak) m->peak = live;
}
/* Takes (bytes > 0) or gives back (bytes < 0) bytes. */
static inline void sp_mem_take(sp_mem_peak *m, double bytes) { sp_mem_set(m, m->live + bytes); }

/* ---- the whole memory ------------------------------------------------------------------ */

/* A worker's whole memory in one step, in bytes: what it holds for the step besides the
 * activations, plus the peak over time of activations (and, in a simulated schedule,
 * fetched weights). The simulator predicts it per worker (sp_sim_memory_breakdown,
 * sim/sim.h), the executor measures it per rank (exec.h), the summary reports a
 * process's (cli/summary.c). */
typedef struct sp_mem_breakdown {
    double weights, grads, optim, buckets;
    double activations;      /* sp_worker_stats.peak_mem_bytes: activations + fetched weights */
    double total;
} sp_mem_breakdown;

/* One stage's (or one model's) parameters of p bytes: an owner holds the weights and
 * optim_slots floats of optimizer state per parameter; grads: it holds their gradients. */
void sp_mem_add_params(sp_mem_breakdown *m, double p, int optim_slots, bool owns, bool grads);
/* total = the sum of the terms. */
void sp_mem_total(sp_mem_breakdown *m);
/* A model's own bytes: weights its parameters and buffers (sp_model_state), grads the
 * gradients allocated; the other terms 0. */
void sp_mem_model(const struct sp_model *m, sp_mem_breakdown *out);

/* Floats of optimizer state per parameter: sgd 0 (1 with momentum ≠ 0), adam and adamw
 * 2; −1 for another name. */
int sp_optim_slots(const char *name, double momentum);
#define SP_OPTIM_SLOTS_DEFAULT 1   /* the apps' default: sgd with momentum 0.9 */

#endif
