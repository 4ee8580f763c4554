/* exec_memory.c — the executor's activation memory per rank, counted as the simulator
 * counts it (schedule.h, sp_sim_memory): F(s, b) takes the activation of (s, b) —
 * sp_node_act_bytes of the node it put on micro-batch b's tape: its input x_s plus what
 * its op saved — and holds it until the rank has run the last backward job of (s, b)
 * (G when δ and G are split, B otherwise). Every scheme runs F and the backward of one
 * (s, b) on one rank, so the rank's peak depends on its own job order only, the order
 * the simulator planned: the measured peak equals sp_sim's peak_act_bytes of that rank.
 * (The tape itself keeps everything until the next step resets it; this is the memory a
 * runtime freeing each activation after its last use would need.) --parallel scan runs
 * no backward jobs: its activations stay held to the end of the step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "schedulers/parallel/exec_internal.h"

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
    x->act_live = 0;
}

void sp_exec_mem_forward(sp_exec *x, int s, int b, const sp_node *n)
{
    double bytes = sp_node_act_bytes(n);
    x->act_held[s * x->B + b] = bytes;
    x->act_live += bytes;
    if (x->act_live > x->act_peak) x->act_peak = x->act_live;
}

void sp_exec_mem_backward(sp_exec *x, int s, int b)
{
    int k = s * x->B + b;
    if (--x->bwd_left[k] > 0) return;
    x->act_live -= x->act_held[k];
    x->act_held[k] = 0;
}

void sp_exec_mem_free(sp_exec *x)
{
    free(x->act_held);
    free(x->bwd_left);
}
