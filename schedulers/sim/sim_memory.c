/* sim_memory.c — memory over time of a simulated schedule (sim/sim.h, sp_sim_memory):
 * per worker, the activations each stage's forward keeps until its backward has fully
 * run ([U] Definition: M, in bytes; with SP_MEM_SAIL, schedule.h, δ frees its part and G
 * the rest) and, for the schemes that compute a stage away from
 * its weights (fsdp, fslpp), the fetched weights while a job uses them; and the whole
 * memory of a worker (sp_sim_memory_breakdown): weights, gradients, optimizer state and
 * gradient buckets besides. The counters and the breakdown are schedulers/memory/'s. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "schedulers/memory/memory.h"
#include "schedulers/sim/sim.h"

typedef struct mem_event {
    int worker;
    double time;
    long key;        /* order at one instant: 2·pos on acquire, 2·pos + 1 on release (pos:
                        the job's place in its worker's order); −1: a release by a job of
                        another worker, first */
    int delta;       /* +1 acquire, −1 release */
    int count;       /* the change of the number of activations held: +1, −1 or 0 (a
                        part of one freed) */
    bool weights;    /* fetched weights, else an activation */
    double bytes;    /* the change, signed */
} mem_event;

static bool same_time(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(1.0, fabs(a)); }

static int event_cmp(const void *pa, const void *pb)
{
    const mem_event *a = pa, *b = pb;
    if (a->worker != b->worker) return a->worker - b->worker;
    if (!same_time(a->time, b->time)) return a->time < b->time ? -1 : 1;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    return a->delta - b->delta;
}

/* The last-ending backward job of (stage, b) (at one instant on one worker: the later in
 * its order), or −1 when it has none. */
static int last_backward(const sp_schedule *s, const sp_sim *r, const int *pos, int stage, int b)
{
    int last = -1;
    for (int d = SP_BWD; d <= SP_BWD_GRAD; d++) {
        int j = sp_schedule_find(s, stage, b, (sp_dir)d);
        if (j < 0) continue;
        bool tie = last >= 0 && r->finish[j] == r->finish[last] && s->compute[j] == s->compute[last];
        if (last < 0 || r->finish[j] > r->finish[last] || (tie && pos[j] > pos[last])) last = j;
    }
    return last;
}

static int collect_events(const sp_schedule *s, const sp_costs *c, const sp_sim *r, const int *pos, mem_event *ev)
{
    int n = 0;
    for (int b = 0; b < s->micro; b++)
        for (int st = 0; st < s->stages; st++) {
            int f = sp_schedule_find(s, st, b, SP_FWD), w = s->compute[f], l = last_backward(s, r, pos, st, b);
            double bytes = c ? c->act_bytes[st] : 1.0;
            ev[n++] = (mem_event){w, r->start[f], 2L * pos[f], +1, +1, false, bytes};
            int d = sp_schedule_find(s, st, b, SP_BWD_DELTA), g = sp_schedule_find(s, st, b, SP_BWD_GRAD);
            if (l < 0) {
                ev[n++] = (mem_event){w, r->finish[f], 2L * pos[f] + 1, -1, -1, false, -bytes};
            } else if (s->mem_model == SP_MEM_SAIL && d >= 0 && g >= 0) {
                /* δ frees what only it needs, G the rest; the later of the two ends the count */
                double share = fmin(1, fmax(0, s->mem_grad_share));
                int jobs[2] = {d, g};
                double part[2] = {(1 - share) * bytes, share * bytes};
                for (int k = 0; k < 2; k++) {
                    int j = jobs[k];
                    ev[n++] = (mem_event){w, r->finish[j], s->compute[j] == w ? 2L * pos[j] + 1 : -1, -1,
                                          j == l ? -1 : 0, false, -part[k]};
                }
            } else {
                ev[n++] = (mem_event){w, r->finish[l], s->compute[l] == w ? 2L * pos[l] + 1 : -1, -1, -1, false, -bytes};
            }
        }
    for (int j = 0; j < s->njobs; j++) {
        int st = s->jobs[j].stage, w = s->compute[j];
        double bytes = c ? c->param_bytes[st] : 1.0;
        if (s->weights[j] == w || !(bytes > 0)) continue;
        ev[n++] = (mem_event){w, r->start[j], 2L * pos[j], +1, 0, true, bytes};
        ev[n++] = (mem_event){w, r->finish[j], 2L * pos[j] + 1, -1, 0, true, -bytes};
    }
    return n;
}

void sp_sim_memory(const sp_schedule *s, const sp_costs *c, sp_sim *r)
{
    int *pos = sp_xmalloc(sizeof(int) * (size_t)(s->njobs + 1));
    for (int w = 0; w < s->workers; w++)
        for (int i = r->order_off[w]; i < r->order_off[w + 1]; i++) pos[r->order[i]] = i - r->order_off[w];
    size_t cap = 3 * (size_t)s->stages * s->micro + 2 * (size_t)s->njobs;
    mem_event *ev = sp_xmalloc(sizeof(mem_event) * (cap + 1));
    int n = collect_events(s, c, r, pos, ev);
    qsort(ev, (size_t)n, sizeof *ev, event_cmp);

    /* The step functions: a point at 0 per worker, then one per instant that changes it. */
    r->mem_off = sp_xcalloc((size_t)s->workers + 1, sizeof(int));
    r->mem_time = sp_xmalloc(sizeof(double) * ((size_t)n + s->workers + 1));
    r->mem_act = sp_xmalloc(sizeof(double) * ((size_t)n + s->workers + 1));
    r->mem_wgt = sp_xmalloc(sizeof(double) * ((size_t)n + s->workers + 1));
    int np = 0;
    for (int w = 0, i = 0; w < s->workers; w++) {
        sp_worker_stats *ws = &r->worker[w];
        /* activations (count and bytes), fetched weights, and the two together */
        sp_mem_peak count = {0}, act = {0}, wgt = {0}, both = {0};
        r->mem_off[w] = np;
        r->mem_time[np] = 0, r->mem_act[np] = 0, r->mem_wgt[np] = 0, np++;
        for (; i < n && ev[i].worker == w; i++) {
            const mem_event *e = &ev[i];
            if (e->weights) sp_mem_take(&wgt, e->bytes);
            else sp_mem_take(&count, e->count), sp_mem_take(&act, e->bytes);
            sp_mem_set(&both, act.live + wgt.live);
            if (i + 1 < n && ev[i + 1].worker == w && same_time(ev[i + 1].time, e->time)) continue;
            /* the end of an instant: a point, unless it holds what the last one held */
            int k = np - 1;
            if (act.live == r->mem_act[k] && wgt.live == r->mem_wgt[k]) continue;
            if (same_time(r->mem_time[k], e->time)) np = k;   /* events at time 0 replace the first point */
            r->mem_time[np] = e->time, r->mem_act[np] = act.live, r->mem_wgt[np] = wgt.live, np++;
        }
        ws->peak_act = (int)count.peak;
        ws->peak_act_bytes = act.peak;
        ws->peak_weight_bytes = wgt.peak;
        ws->peak_mem_bytes = both.peak;
    }
    r->mem_off[s->workers] = np;
    free(ev);
    free(pos);
    /* the whole memory with the apps' default optimizer (sgd, momentum 0.9: one state
     * float per parameter); a caller that knows the optimizer refills it */
    sp_sim_memory_breakdowns(s, c, r, SP_OPTIM_SLOTS_DEFAULT);
}

/* Every worker's breakdown into out[0..workers): the jobs by stage (one pass), then each
 * stage's computing and weight-holding workers from its own jobs, added to those workers
 * (a worker that neither computes a stage nor holds it gets nothing of it), stage by stage
 * in order as a single worker's sum. */
static void breakdowns(const sp_schedule *s, const sp_costs *c, const sp_sim *r, int optim_slots, sp_mem_breakdown *out)
{
    for (int w = 0; w < s->workers; w++) out[w] = (sp_mem_breakdown){.activations = r->worker[w].peak_mem_bytes};
    int *off = sp_xcalloc((size_t)s->stages + 2, sizeof(int)), *idx = sp_xmalloc(sizeof(int) * ((size_t)s->njobs + 1));
    for (int j = 0; j < s->njobs; j++) off[s->jobs[j].stage + 2]++;
    for (int st = 0; st < s->stages; st++) off[st + 2] += off[st + 1];
    for (int j = 0; j < s->njobs; j++) idx[off[s->jobs[j].stage + 1]++] = j;
    unsigned char *mark = sp_xcalloc((size_t)s->workers + 1, 1);   /* 1: computes the stage, 2: holds its weights */
    int *touched = sp_xmalloc(sizeof(int) * (2 * (size_t)s->workers + 1));
    for (int st = 0; st < s->stages; st++) {
        double p = c ? c->param_bytes[st] : 1.0;
        if (!(p > 0)) continue;
        int nc = 0, nw = 0, nt = 0;
        for (int k = off[st]; k < off[st + 1]; k++) {
            int cw = s->compute[idx[k]], ww = s->weights[idx[k]];
            if (!mark[cw]) touched[nt++] = cw;
            if (!(mark[cw] & 1)) mark[cw] |= 1, nc++;
            if (!mark[ww]) touched[nt++] = ww;
            if (!(mark[ww] & 2)) mark[ww] |= 2, nw++;
        }
        bool replicas = true;   /* the same workers compute it and hold its weights */
        for (int t = 0; t < nt; t++)
            if (mark[touched[t]] != 3) replicas = false;
        for (int t = 0; t < nt; t++) {
            int w = touched[t];
            bool here = mark[w] & 1, owns = mark[w] & 2;
            sp_mem_add_params(&out[w], p, optim_slots, owns, here || owns);
            if (replicas ? here && nc > 1 : nw == 1 && (here || owns)) out[w].buckets += p;
        }
        for (int t = 0; t < nt; t++) mark[touched[t]] = 0;
    }
    free(touched);
    free(mark);
    free(idx);
    free(off);
    for (int w = 0; w < s->workers; w++) sp_mem_total(&out[w]);
}

void sp_sim_memory_breakdown(const sp_schedule *s, const sp_costs *c, const sp_sim *r, int optim_slots, int worker,
                             sp_mem_breakdown *out)
{
    sp_mem_breakdown *all = sp_xmalloc(sizeof *all * ((size_t)s->workers + 1));
    breakdowns(s, c, r, optim_slots, all);
    *out = all[worker];
    free(all);
}

void sp_sim_memory_breakdowns(const sp_schedule *s, const sp_costs *c, sp_sim *r, int optim_slots)
{
    sp_mem_breakdown *all = sp_xmalloc(sizeof *all * ((size_t)s->workers + 1));
    breakdowns(s, c, r, optim_slots, all);
    for (int w = 0; w < s->workers; w++) r->worker[w].mem = all[w];
    free(all);
}
