/* comm_cost_account.c — the communication of one simulated step added up per worker
 * (comm_cost.h, sp_comm_step_account): what the executor sends for a schedule, costed
 * with sp_comm_time_ranks. It does not place the messages on a timeline (sim_comm.c does,
 * with the same topology: build/schedule --nodes' step_with_comm); the step time it
 * supports is bracketed (no overlap: compute latency + the busiest worker's
 * communication; full overlap: the larger of the two). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "schedulers/sim/comm_cost.h"
#include "schedulers/plan/schedule.h"

/* The members of stage st's compute set (comp) and weight holders (wgt). */
static void stage_sets(const sp_schedule *s, int st, bool *comp, bool *wgt)
{
    memset(comp, 0, sizeof(bool) * (size_t)s->workers);
    memset(wgt, 0, sizeof(bool) * (size_t)s->workers);
    for (int j = 0; j < s->njobs; j++)
        if (s->jobs[j].stage == st) comp[s->compute[j]] = wgt[s->weights[j]] = true;
}

static int members(const bool *in, int W, int *out)
{
    int n = 0;
    for (int w = 0; w < W; w++)
        if (in[w]) out[n++] = w;
    return n;
}

static void charge(double *per, const int *set, int n, double us)
{
    for (int i = 0; i < n; i++) per[set[i]] += us;
}

void sp_comm_step_account(const sp_schedule *s, const sp_costs *c, const sp_comm_model *m, const sp_comm_topology *t,
                          double bucket_bytes, double *per_worker)
{
    int W = s->workers;
    memset(per_worker, 0, sizeof(double) * (size_t)W);
    bool *comp = sp_xmalloc(sizeof(bool) * 2 * (size_t)W), *wgt = comp + W;
    int *set = sp_xmalloc(sizeof(int) * 2 * (size_t)W), *bset = set + W;
    /* gradients: replicas' allreduce, packed in backward order into buckets of one set;
     * an owner's broadcast of the weights and reduce of the gradients, stage by stage */
    int bn = 0;
    double bbytes = 0;
    for (int st = s->stages - 1; st >= -1; st--) {
        int n = 0;
        bool replicas = false;
        double p = st >= 0 ? c->param_bytes[st] : 0;
        if (st >= 0 && !(p > 0)) continue;   /* no parameters: not in any bucket */
        if (st >= 0) {
            stage_sets(s, st, comp, wgt);
            replicas = !memcmp(comp, wgt, sizeof(bool) * (size_t)W);
            if (!replicas) {
                int nw = 0, o = -1;
                for (int w = 0; w < W; w++) nw += wgt[w], o = wgt[w] && o < 0 ? w : o;
                if (nw == 1) {
                    comp[o] = true;
                    n = members(comp, W, set);
                    double us = sp_comm_time_ranks(m, SP_COMM_BROADCAST, p, set, 0, n, t) +
                                sp_comm_time_ranks(m, SP_COMM_REDUCE, p, set, 0, n, t);
                    charge(per_worker, set, n, us);
                }
                n = 0;
            } else {
                n = members(comp, W, set);
            }
        }
        bool join = n > 1 && bn == n && !memcmp(set, bset, sizeof(int) * (size_t)n) &&
                    (bucket_bytes <= 0 || bbytes + p <= bucket_bytes);
        if (bn > 1 && !join) {   /* the open bucket is complete */
            charge(per_worker, bset, bn, sp_comm_time_ranks(m, SP_COMM_ALLREDUCE, bbytes, bset, 0, bn, t));
            bn = 0, bbytes = 0;
        }
        if (n > 1) {
            if (!join) memcpy(bset, set, sizeof(int) * (size_t)n), bn = n, bbytes = 0;
            bbytes += p;
        }
    }
    /* point to point: an activation into F(s, b) from F(s−1, b) on another worker, and
     * ∂l/∂y_s into the backward of (s, b) from that of (s+1, b) — the receiving stage's
     * act_bytes each (its input plus what its op saves: an upper bound on the message) */
    for (int b = 0; b < s->micro; b++)
        for (int st = 1; st < s->stages; st++) {
            int f0 = sp_schedule_find(s, st - 1, b, SP_FWD), f1 = sp_schedule_find(s, st, b, SP_FWD);
            if (f0 < 0 || f1 < 0 || s->compute[f0] == s->compute[f1]) continue;
            int pair[2] = {s->compute[f0], s->compute[f1]};
            double us = sp_comm_time_ranks(m, SP_COMM_P2P, c->act_bytes[st], pair, 0, 2, t);
            charge(per_worker, pair, 2, 2 * us);   /* forward and backward */
        }
    free(comp);
    free(set);
}
