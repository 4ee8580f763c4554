/* exec_memory.c — the executor's activation memory per rank, counted as the simulator
 * counts it (sim/sim.h, sp_sim_memory): F(s, b) takes the activation of (s, b) —
 * sp_node_act_bytes of the node it put on micro-batch b's tape: its input x_s plus what
 * its op saved — and holds it until the rank has run the last backward job of (s, b)
 * (G when δ and G are split, B otherwise). Every scheme runs F and the backward of one
 * (s, b) on one rank, so the rank's peak depends on its own job order only, the order
 * the simulator planned: the measured peak equals sp_sim's peak_act_bytes of that rank.
 * (The tape itself keeps everything until the next step resets it; this is the memory a
 * runtime freeing each activation after its last use would need.) --parallel scan runs
 * no backward jobs: its activations stay held to the end of the step.
 *
 * The whole memory (sp_exec_mem_gather): the executor's buffers summed in the terms of
 * sp_mem_breakdown (memory.h) — weights and optimizer state of the stages the rank
 * steps (the optimizer's state buffers as allocated), the gradients it writes, its
 * gradient-bucket buffers, the activation peak — against the simulator's prediction.
 * One term differs by design: weights an owner broadcasts to a computing rank (fsdp,
 * fslpp) stay in the rank's layer for the whole step here, while the simulator holds
 * them only while a job uses them; the measured figure exceeds the predicted one by at
 * most those bytes (mem_measure's `fetched`). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "schedulers/exec/exec_internal.h"
#include "schedulers/memory/memory.h"

void sp_exec_mem_begin_step(sp_exec *x)
{
    int SB = x->S * x->B;
    if (!x->act_held) {
        x->act_held = sp_xcalloc((size_t)SB, sizeof *x->act_held);
        x->bwd_left = sp_xcalloc((size_t)SB, sizeof *x->bwd_left);
    }
    memset(x->act_held, 0, sizeof *x->act_held * (size_t)SB);
    for (int s = 0; s < x->S; s++)
        for (int b = 0; b < x->B; b++) {
            int n = 0;
            for (int d = SP_BWD; d <= SP_BWD_GRAD; d++) n += job_of(x, s, b, (sp_dir)d) >= 0;
            x->bwd_left[s * x->B + b] = n;
        }
    x->act.live = 0;
}

void sp_exec_mem_forward(sp_exec *x, int s, int b, const sp_node *n)
{
    double bytes = sp_exec_stage_act_bytes(x, s, b);   /* a DAG's stage: its segment's */
    x->act_held[s * x->B + b] = bytes;
    sp_mem_take(&x->act, bytes);
}

void sp_exec_mem_backward(sp_exec *x, int s, int b)
{
    int k = s * x->B + b;
    if (--x->bwd_left[k] > 0) return;
    sp_mem_take(&x->act, -x->act_held[k]);
    x->act_held[k] = 0;
}

void sp_exec_mem_free(sp_exec *x)
{
    free(x->act_held);
    free(x->bwd_left);
}

/* This rank's memory in sp_mem_breakdown's terms; *fetched: the owner-broadcast weights. */
static void mem_measure(const sp_exec *x, sp_mem_breakdown *m, double *fetched)
{
    *m = (sp_mem_breakdown){0};
    *fetched = 0;
    int slots = (x->opt && x->opt->state[0] != NULL) + (x->opt && x->opt->state[1] != NULL);
    for (int st = 0; st < x->S; st++) {
        const stage_info *si = &x->st[st];
        double p = (double)si->nfloats * sizeof(float);
        if (!(p > 0)) continue;
        sp_mem_add_params(m, p, slots, si->owns, si->grad_jobs > 0 || si->owns);
        if (si->sync == SYNC_OWNER && !si->owns && si->comm >= 0) *fetched += p;
    }
    for (int i = 0; i < x->nbuckets; i++) m->buckets += (double)x->buckets[i].n * sizeof(float);
    m->activations = x->act.peak + *fetched;
    sp_mem_total(m);
}

void sp_exec_mem_gather(sp_exec *x, sp_exec_stats *st)
{
    sp_mem_breakdown m;
    double fetched;
    mem_measure(x, &m, &fetched);
    /* bytes as two floats of 24 bits each: exact below 2^48 */
    double v = round(m.total), hi = floor(v / 16777216.0);
    float mine[2] = {(float)hi, (float)(v - hi * 16777216.0)};
    float *all = sp_xmalloc(sizeof(float) * 2 * (size_t)x->W);
    sp_allgather(x->world, mine, all, 2);
    st->peak_mem_bytes = sp_xmalloc(sizeof(double) * (size_t)x->W);
    st->pred_peak_mem_bytes = sp_xmalloc(sizeof(double) * (size_t)x->W);
    int slots = x->opt ? sp_optim_slots(x->opt->name, x->opt->cfg.momentum) : 0;
    for (int r = 0; r < x->W; r++) {
        st->peak_mem_bytes[r] = (double)all[2 * r] * 16777216.0 + (double)all[2 * r + 1];
        sp_mem_breakdown p = {0};
        if (r < x->sim.workers) sp_sim_memory_breakdown(x->sched, x->costs, &x->sim, slots < 0 ? 0 : slots, r, &p);
        st->pred_peak_mem_bytes[r] = p.total;
    }
    free(all);
}
