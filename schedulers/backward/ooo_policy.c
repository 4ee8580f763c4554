/* ooo_policy.c — the orders of out-of-order back-propagation (EuroSys '22 §3–5).
 *
 * Each policy emits a total order D of the δO/δW tasks (a topological order of the
 * graph: what runs one task at a time, and what the memory model is evaluated on);
 * every update U_i is then placed right after the last task it depends on, and the
 * lanes take D restricted to them: δO on main, δW and U on sub. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "schedulers/backward/ooo.h"

static const char *const ORDER_NAMES[] = {"conventional", "ooo", "reverse-first-k", "list"};

sp_ooo_order sp_ooo_order_parse(const char *name)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(name, ORDER_NAMES[i]) == 0) return (sp_ooo_order)i;
    sp_fail("--order %s: unknown ooo order (expected conventional|ooo|reverse-first-k|list)", name);
}

const char *sp_ooo_order_name(sp_ooo_order o) { return ORDER_NAMES[o]; }

static bool is_kind(const sp_ooo_graph *g, int i, sp_ooo_kind k) { return g->tasks[i].kind == k; }

/* ---- the memory model, one task at a time --------------------------------------- */

static size_t memory_peak(const sp_ooo_graph *g, const int *seq, int n, int *left)
{
    for (int b = 0; b < g->nbuf; b++) left[b] = g->buf_users[b];
    size_t live = g->start_bytes, peak = live;
    for (int i = 0; i < n; i++) {
        const sp_ooo_task *k = &g->tasks[seq[i]];
        live += k->alloc;
        if (live > peak) peak = live;
        live -= k->scratch;
        for (int u = 0; u < k->nuse; u++)
            if (--left[k->use[u]] == 0) live -= g->buf_bytes[k->use[u]];
    }
    return peak;
}

size_t sp_ooo_memory_peak(const sp_ooo_graph *g, const int *seq, int n)
{
    int *left = sp_xmalloc((size_t)g->nbuf * sizeof(int) + sizeof(int));
    size_t peak = memory_peak(g, seq, n, left);
    free(left);
    return peak;
}

/* ---- the orders of δO and δW ------------------------------------------------------ */
/* Task ids list each node's δO then δW, nodes from the loss down (ooo.c): that is the
 * conventional order already. */

static int order_conventional(const sp_ooo_graph *g, int *seq)
{
    int n = 0;
    for (int i = 0; i < g->nexec; i++)
        if (!is_kind(g, i, SP_OOO_U)) seq[n++] = i;
    return n;
}

/* §3, Fig. 3b: every δO first (the critical path), the δW after. */
static int order_ooo(const sp_ooo_graph *g, int *seq)
{
    int n = 0;
    for (int i = 0; i < g->nexec; i++)
        if (is_kind(g, i, SP_OOO_DO)) seq[n++] = i;
    for (int i = 0; i < g->nexec; i++)
        if (is_kind(g, i, SP_OOO_DW)) seq[n++] = i;
    return n;
}

/* Algorithm 2, lines 3–6: layers above k as conventional (δW_i, then δO_i), then the
 * δW of layers 1..k in forward order, so U_1 — what the next forward needs first —
 * comes as early as possible. */
static int order_reverse_first_k(const sp_ooo_graph *g, int k, int *seq)
{
    int n = 0;
    for (int i = 0; i < g->nexec; i++) {
        const sp_ooo_task *t = &g->tasks[i];
        if (t->kind == SP_OOO_DW && t->rank > k) seq[n++] = i;
        if (t->kind != SP_OOO_DO) continue;
        bool own_w = i + 1 < g->nexec && is_kind(g, i + 1, SP_OOO_DW) && g->tasks[i + 1].node == t->node &&
                     g->tasks[i + 1].rank > k;
        if (own_w) seq[n++] = i + 1;   /* line 4: δW_i before δO_i */
        seq[n++] = i;
        i += own_w;
    }
    for (int r = 1; r <= k; r++)
        for (int i = 0; i < g->nexec; i++)
            if (is_kind(g, i, SP_OOO_DW) && g->tasks[i].rank == r) seq[n++] = i;
    return n;
}

/* Algorithm 1 (multi-region joint scheduling), simplified: each main-lane δO is a
 * region; with no profiler, the speedup of running sub job k beside the rest of region
 * R is modelled from the estimates as (rem + T_k) / max(rem, T_k): the overlapped share
 * of two lanes, largest when the two are balanced. Repeatedly the best runnable
 * (region, job) pair is placed (lines 3–11). A job is a δW, with its layer's update
 * when it is the layer's last δW. What fits in no region is list-scheduled after the
 * regions, in forward order (what the next forward needs first), each job on the lane
 * that finishes it first: on a CPU nothing else waits for the main lane then. */
typedef struct list_sim {
    int *main_task, nmain;
    double *rs, *re, *now;   /* region start, end, sub-lane clock within it */
    int *job, njob;
    double *ready, *cost;
    int *region, *slot;      /* placement of each job, -1 = not yet */
} list_sim;

static bool job_runnable(const sp_ooo_graph *g, const list_sim *s, const int *job_of_task, int q, int j)
{
    if (s->ready[q] > s->now[j] * (1 + 1e-12)) return false;
    const sp_ooo_task *t = &g->tasks[s->job[q]];
    for (int p = 0; p < t->npred; p++) {   /* shared weights: the earlier δW placed no later */
        int pj = job_of_task[t->pred[p]];
        if (pj >= 0 && (s->region[pj] < 0 || s->region[pj] > j)) return false;
    }
    return true;
}

/* The U that follows job q's δW, or -1. */
static int job_update(const sp_ooo_graph *g, int w)
{
    const sp_ooo_task *t = &g->tasks[w];
    for (int q = 0; q < t->nsucc; q++) {
        const sp_ooo_task *u = &g->tasks[t->succ[q]];
        if (u->kind != SP_OOO_U) continue;
        for (int p = 0; p < u->npred; p++)   /* the last δW of the layer: no later δW after it */
            if (g->tasks[u->pred[p]].kind == SP_OOO_DW && u->pred[p] > w) return -1;
        return t->succ[q];
    }
    return -1;
}

static void list_setup(sp_tape *tape, const sp_ooo_graph *g, list_sim *s, int *job_of_task)
{
    int n = g->nexec;
    s->main_task = sp_tape_alloc(tape, (size_t)n * sizeof(int));
    s->job = sp_tape_alloc(tape, (size_t)n * sizeof(int));
    double *finish = sp_tape_alloc(tape, (size_t)n * sizeof(double)), clock = 0;
    for (int i = 0; i < n; i++) {   /* step 2: the main lane, back to back */
        job_of_task[i] = -1;
        finish[i] = 0;
        if (is_kind(g, i, SP_OOO_DO)) {
            s->main_task[s->nmain++] = i;
            clock += g->tasks[i].est;
            finish[i] = clock;
        } else if (is_kind(g, i, SP_OOO_DW)) {
            job_of_task[i] = s->njob;
            s->job[s->njob++] = i;
        }
    }
    size_t md = (size_t)(s->nmain + 1) * sizeof(double), jd = (size_t)(s->njob + 1) * sizeof(double);
    s->rs = sp_tape_alloc(tape, md);
    s->re = sp_tape_alloc(tape, md);
    s->now = sp_tape_alloc(tape, md);
    s->ready = sp_tape_alloc(tape, jd);
    s->cost = sp_tape_alloc(tape, jd);
    s->region = sp_tape_alloc(tape, (size_t)(s->njob + 1) * sizeof(int));
    s->slot = sp_tape_alloc(tape, (size_t)(s->njob + 1) * sizeof(int));
    for (int j = 0; j < s->nmain; j++) {
        s->re[j] = finish[s->main_task[j]];
        s->rs[j] = s->now[j] = s->re[j] - g->tasks[s->main_task[j]].est;
    }
    for (int q = 0; q < s->njob; q++) {   /* step 3: when each job becomes runnable */
        const sp_ooo_task *t = &g->tasks[s->job[q]];
        int u = job_update(g, s->job[q]);
        s->ready[q] = 0;
        s->cost[q] = t->est + (u >= 0 ? g->tasks[u].est : 0);
        s->region[q] = s->slot[q] = -1;
        for (int p = 0; p < t->npred; p++)
            if (finish[t->pred[p]] > s->ready[q]) s->ready[q] = finish[t->pred[p]];
    }
}

static void list_place(const sp_ooo_graph *g, list_sim *s, const int *job_of_task)
{
    for (int placed = 0; placed < s->njob; placed++) {   /* steps 4–5, Algorithm 1 lines 3–11 */
        int bj = -1, bq = -1;
        double bp = 0;
        for (int j = 0; j < s->nmain; j++) {
            double rem = s->re[j] - s->now[j];
            if (rem <= 0) continue;   /* line 11: region full */
            for (int q = 0; q < s->njob; q++) {
                if (s->region[q] >= 0 || !job_runnable(g, s, job_of_task, q, j)) continue;
                double T = s->cost[q], p = (rem + T) / (rem > T ? rem : T);
                if (p > bp * (1 + 1e-12)) bp = p, bj = j, bq = q;
            }
        }
        if (bq < 0) return;
        s->region[bq] = bj;
        s->slot[bq] = placed;
        s->now[bj] += s->cost[bq];
    }
}

static int order_list(sp_tape *tape, const sp_ooo_graph *g, int *seq, int *lane)
{
    list_sim s = {0};
    int *job_of_task = sp_tape_alloc(tape, (size_t)(g->nexec + 1) * sizeof(int));
    list_setup(tape, g, &s, job_of_task);
    list_place(g, &s, job_of_task);
    int m = 0;
    double t_sub = 0, t_main = s.nmain ? s.re[s.nmain - 1] : 0;
    for (int j = 0; j < s.nmain; j++) {
        seq[m++] = s.main_task[j];
        for (int placed = 0; placed < s.njob; placed++)
            for (int q = 0; q < s.njob; q++)
                if (s.region[q] == j && s.slot[q] == placed) {
                    seq[m++] = s.job[q];
                    t_sub = (t_sub > s.ready[q] ? t_sub : s.ready[q]) + s.cost[q];
                }
    }
    for (int r = 1; r <= g->L; r++)   /* the tail: earliest finish of the two lanes */
        for (int q = 0; q < s.njob; q++) {
            if (s.region[q] >= 0 || g->tasks[s.job[q]].rank != r) continue;
            double on_main = (t_main > s.ready[q] ? t_main : s.ready[q]) + s.cost[q];
            double on_sub = (t_sub > s.ready[q] ? t_sub : s.ready[q]) + s.cost[q];
            int w = s.job[q], u = job_update(g, w);
            lane[w] = on_main < on_sub ? SP_OOO_MAIN : SP_OOO_SUB;
            if (u >= 0) lane[u] = lane[w];
            *(on_main < on_sub ? &t_main : &t_sub) = on_main < on_sub ? on_main : on_sub;
            seq[m++] = w;
        }
    return m;
}

/* ---- plans ------------------------------------------------------------------------- */

/* Each U right after the last of its δO/δW predecessors in seq. */
static int place_updates(const sp_ooo_graph *g, const int *base, int nbase, int *pos, int *seq)
{
    for (int i = 0; i < nbase; i++) pos[base[i]] = i;
    int n = 0;
    for (int i = 0; i < nbase; i++) {
        seq[n++] = base[i];
        for (int u = 0; u < g->nexec; u++) {
            if (!is_kind(g, u, SP_OOO_U)) continue;
            int last = -1;
            for (int p = 0; p < g->tasks[u].npred; p++)
                if (pos[g->tasks[u].pred[p]] > last) last = pos[g->tasks[u].pred[p]];
            if (last == i) seq[n++] = u;
        }
    }
    return n;
}

/* lane: the list order's choices; -1 elsewhere (δO on main, δW and U on sub). */
static void build_seq(sp_tape *t, const sp_ooo_graph *g, sp_ooo_order order, int k, sp_ooo_plan *p, int *base,
                      int *lane)
{
    int nbase = 0;
    for (int i = 0; i < g->nexec; i++) lane[i] = -1;
    switch (order) {
    case SP_OOO_CONVENTIONAL: nbase = order_conventional(g, base); break;
    case SP_OOO_OOO: nbase = order_ooo(g, base); break;
    case SP_OOO_REVERSE_FIRST_K: nbase = order_reverse_first_k(g, k, base); break;
    case SP_OOO_LIST: nbase = order_list(t, g, base, lane); break;
    }
    place_updates(g, base, nbase, p->pos, p->seq);
}

sp_ooo_plan *sp_ooo_plan_make(sp_tape *t, const sp_ooo_graph *g, sp_ooo_order order, int k, size_t mem_cap,
                              bool two_lanes)
{
    int n = g->nexec;
    size_t ib = (size_t)(n + 1) * sizeof(int);
    sp_ooo_plan *p = sp_tape_alloc(t, sizeof *p);
    memset(p, 0, sizeof *p);
    p->order = order;
    p->seq = sp_tape_alloc(t, ib);
    p->pos = sp_tape_alloc(t, ib);
    p->lane = sp_tape_alloc(t, ib);
    p->queue[0] = sp_tape_alloc(t, ib);
    p->queue[1] = sp_tape_alloc(t, ib);
    int *base = sp_tape_alloc(t, ib), *hint = sp_tape_alloc(t, ib);
    int *left = sp_tape_alloc(t, (size_t)(g->nbuf + 1) * sizeof(int));
    if (order == SP_OOO_REVERSE_FIRST_K) {
        p->k = k <= 0 ? (g->L + 1) / 2 : (k < g->L ? k : g->L);
        for (;; p->k--) {   /* Algorithm 2, lines 1–2: the largest k within the cap */
            build_seq(t, g, order, p->k, p, base, hint);
            p->peak_bytes = memory_peak(g, p->seq, n, left);
            if (!mem_cap || p->peak_bytes <= mem_cap) break;
            if (p->k == 0)
                sp_fail("--mem-cap %zu: even k = 0 retains %zu bytes (expected a cap of at least that)", mem_cap,
                        p->peak_bytes);
        }
    } else {
        build_seq(t, g, order, 0, p, base, hint);
        p->peak_bytes = memory_peak(g, p->seq, n, left);
        if (mem_cap && p->peak_bytes > mem_cap)
            sp_fail("--mem-cap %zu: order %s retains %zu bytes at its peak (expected a cap of at least that, "
                    "or --order reverse-first-k, which lowers k to fit)",
                    mem_cap, sp_ooo_order_name(order), p->peak_bytes);
    }
    bool split = two_lanes && order != SP_OOO_CONVENTIONAL;
    for (int i = 0; i < n; i++) {
        int id = p->seq[i], lane = !split ? SP_OOO_MAIN : hint[id] >= 0 ? hint[id]
                                         : is_kind(g, id, SP_OOO_DO) ? SP_OOO_MAIN : SP_OOO_SUB;
        p->pos[id] = i;
        p->lane[id] = lane;
        p->queue[lane][p->nqueue[lane]++] = id;
    }
    return p;
}

bool sp_ooo_plan_check(const sp_ooo_graph *g, const sp_ooo_plan *p, char *why, size_t len)
{
    int n = g->nexec;
    int *seen = sp_xmalloc((size_t)(n + 1) * sizeof(int));
    bool ok = true;
    for (int i = 0; i < n; i++) seen[i] = -1;
    for (int i = 0; i < n && ok; i++) {
        int id = p->seq[i];
        if (id < 0 || id >= n || seen[id] >= 0) {
            snprintf(why, len, "seq[%d] = %d is not a new executable task", i, id);
            ok = false;
        } else {
            seen[id] = i;
        }
    }
    for (int i = 0; i < n && ok; i++) {
        const sp_ooo_task *t = &g->tasks[p->seq[i]];
        for (int q = 0; q < t->npred && ok; q++) {
            if (t->pred[q] < n && seen[t->pred[q]] > i) {
                char a[64], b[64];
                snprintf(why, len, "%s runs before its dependency %s", sp_ooo_task_label(t, a, sizeof a),
                         sp_ooo_task_label(&g->tasks[t->pred[q]], b, sizeof b));
                ok = false;
            }
        }
    }
    int at[2] = {0, 0};
    for (int i = 0; i < n && ok; i++) {
        int id = p->seq[i], lane = p->lane[id];
        if (at[lane] >= p->nqueue[lane] || p->queue[lane][at[lane]] != id) {
            snprintf(why, len, "lane %d queue is not seq restricted to the lane at task %d", lane, id);
            ok = false;
        }
        at[lane]++;
    }
    if (ok && at[0] + at[1] != p->nqueue[0] + p->nqueue[1]) {
        snprintf(why, len, "lane queues hold %d tasks, seq %d", p->nqueue[0] + p->nqueue[1], n);
        ok = false;
    }
    free(seen);
    return ok;
}
