/* ooo.c — out-of-order back-propagation: the task graph of one recorded step and the
 * "ooo" engine that plans it (ooo_policy.c) and runs it on two lanes (ooo_exec.c).
 *
 * The graph holds only the true dependencies of §3 (Fig. 3b): a node's δO and δW both
 * wait for its ∂l/∂y, i.e. for the δO of every consumer; nothing waits for a δW except
 * the layer's update. The tape may be a DAG: a node's δO task computes the δ of each of
 * its inputs (add, concat), and a node feeding several others waits for all of them. Two more edges keep the bits of the linear engine: consumers of a
 * fan-out add into the shared ∂l/∂x in the linear engine's order (highest tape index
 * first), and the δW of a layer applied several times accumulate in that order too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/device.h"
#include "core/kernels/dense.h"
#include "core/error.h"
#include "core/io/fileio.h"
#include "core/threads.h"
#include "schedulers/backward/engines.h"
#include "schedulers/backward/ooo.h"
#include "schedulers/memory/memory.h"

/* A task's fixed cost in flop units (a few µs): keeps pointwise tasks from looking free. */
#define OOO_TASK_OVERHEAD 2e4

/* ---- graph construction ----------------------------------------------------------- */

typedef struct edge {
    int src, dst;
} edge;

/* Lists of node indices per node (consumers), in CSR form, from the tape arena. */
typedef struct node_lists {
    int *start, *items;
} node_lists;

/* Input slot k of n is the first slot of n holding that producer (add(x, x) reads x
 * twice but is one consumer of it). */
static bool first_slot(const sp_node *n, int k)
{
    for (int j = 0; j < k; j++)
        if (n->inputs[j] == n->inputs[k]) return false;
    return true;
}

static node_lists consumers(sp_tape *t, int N, const bool *inset, bool only_grad)
{
    node_lists l = {sp_tape_alloc(t, (size_t)(N + 1) * sizeof(int)), NULL};
    memset(l.start, 0, (size_t)(N + 1) * sizeof(int));
    for (int i = 0; i < N; i++) {
        const sp_node *n = t->nodes[i];
        for (int k = 0; inset[i] && k < n->ninputs; k++)
            if (first_slot(n, k) && (!only_grad || n->inputs[k]->needs_grad)) l.start[n->inputs[k]->index + 1]++;
    }
    for (int i = 0; i < N; i++) l.start[i + 1] += l.start[i];
    l.items = sp_tape_alloc(t, (size_t)l.start[N] * sizeof(int) + sizeof(int));
    int *fill = sp_tape_alloc(t, (size_t)N * sizeof(int));
    memcpy(fill, l.start, (size_t)N * sizeof(int));
    for (int i = N - 1; i >= 0; i--) {   /* descending: the linear engine's visiting order */
        const sp_node *n = t->nodes[i];
        for (int k = 0; inset[i] && k < n->ninputs; k++)
            if (first_slot(n, k) && (!only_grad || n->inputs[k]->needs_grad)) l.items[fill[n->inputs[k]->index]++] = i;
    }
    return l;
}

static sp_cost node_cost(const sp_node *n)
{
    if (n->op->cost) return n->op->cost(n);
    return (sp_cost){.fwd_flops = (double)n->out.numel, .bwd_input_flops = (double)n->out.numel,
                     .bwd_params_flops = (double)n->out.numel};
}

static size_t layer_numel(const sp_layer *l)
{
    size_t s = 0;
    for (int p = 0; p < l->nparams; p++) s += l->params[p]->value.numel;
    return s;
}

typedef struct builder {
    sp_tape *t;
    sp_ooo_graph *g;
    edge *edges;
    int nedges;
    int *nuse;   /* per task, then filled */
} builder;

static void add_edge(builder *b, int src, int dst)
{
    if (src >= 0 && dst >= 0) b->edges[b->nedges++] = (edge){src, dst};
}

static void link_edges(builder *b)
{
    sp_ooo_graph *g = b->g;
    for (int e = 0; e < b->nedges; e++) {
        g->tasks[b->edges[e].src].nsucc++;
        g->tasks[b->edges[e].dst].npred++;
    }
    for (int i = 0; i < g->ntasks; i++) {
        sp_ooo_task *k = &g->tasks[i];
        k->pred = sp_tape_alloc(b->t, (size_t)k->npred * sizeof(int) + sizeof(int));
        k->succ = sp_tape_alloc(b->t, (size_t)k->nsucc * sizeof(int) + sizeof(int));
        k->npred = k->nsucc = 0;
    }
    for (int e = 0; e < b->nedges; e++) {
        sp_ooo_task *s = &g->tasks[b->edges[e].src], *d = &g->tasks[b->edges[e].dst];
        s->succ[s->nsucc++] = b->edges[e].dst;
        d->pred[d->npred++] = b->edges[e].src;
    }
}

/* One buffer of the memory model, used by up to four tasks plus a list of δO. */
static int add_buffer(builder *b, size_t bytes, int *ntouch, const int *touch, int ntouched)
{
    sp_ooo_graph *g = b->g;
    int users = 0;
    for (int i = 0; i < ntouched; i++) users += touch[i] >= 0;
    if (users == 0 || bytes == 0) return -1;
    int id = g->nbuf++;
    g->buf_bytes[id] = bytes;
    g->buf_users[id] = users;
    for (int i = 0; i < ntouched; i++)
        if (touch[i] >= 0) {
            sp_ooo_task *k = &g->tasks[touch[i]];
            if (ntouch) ntouch[touch[i]]++;
            else k->use[k->nuse++] = id;
        }
    return id;
}

/* Buffers: node outputs (read by the consumers' δO/δW and the node's own δO), saved
 * state (the node's δO, δW), ∂l/∂y (written by the consumers' δO, read by the node's
 * δO, δW). Run twice: count uses (ntouch != NULL), then fill. */
static void memory_model(builder *b, const bool *inset, const int *idD, const int *idW, const node_lists *readers,
                         const node_lists *writers, int N, sp_node *loss, int *ntouch)
{
    sp_ooo_graph *g = b->g;
    int cap = 2 * (N + 1) + 2;
    int *touch = sp_tape_alloc(b->t, (size_t)cap * sizeof(int));
    g->nbuf = 0;
    g->start_bytes = 0;
    for (int m = 0; m < N; m++) {
        sp_node *n = b->t->nodes[m];
        if (!n->op) continue;
        int nt = 0;   /* the output, as x of every consumer and y of the node itself */
        for (int j = readers->start[m]; j < readers->start[m + 1]; j++) {
            touch[nt++] = idD[readers->items[j]];
            touch[nt++] = idW[readers->items[j]];
        }
        touch[nt++] = inset[m] ? idD[m] : -1;
        if (add_buffer(b, sp_node_out_bytes(n), ntouch, touch, nt) >= 0 && !ntouch)
            g->start_bytes += sp_node_out_bytes(n);
        if (!inset[m]) continue;
        size_t saved = (size_t)sp_node_saved_bytes(n);
        if (add_buffer(b, saved, ntouch, (int[]){idD[m], idW[m]}, 2) >= 0 && !ntouch) g->start_bytes += saved;
        if (!n->needs_grad && n != loss) continue;
        nt = 0;   /* ∂l/∂y: born at its first writer (the highest consumer: memory.h), or at start */
        for (int j = writers->start[m]; j < writers->start[m + 1]; j++) touch[nt++] = idD[writers->items[j]];
        touch[nt++] = idD[m];
        touch[nt++] = idW[m];
        size_t bytes = sp_node_out_bytes(n);
        if (add_buffer(b, bytes, ntouch, touch, nt) < 0 || ntouch) continue;
        if (writers->start[m] < writers->start[m + 1]) g->tasks[idD[writers->items[writers->start[m]]]].alloc += bytes;
        else g->start_bytes += bytes;
    }
}

sp_ooo_graph *sp_ooo_graph_build(sp_tape *t, sp_node *loss, bool with_updates)
{
    sp_mark_needs_grad(t);
    int N = loss->index + 1;
    sp_ooo_graph *g = sp_tape_alloc(t, sizeof *g);
    memset(g, 0, sizeof *g);
    bool *inset = sp_tape_alloc(t, (size_t)N * sizeof(bool));
    int *idD = sp_tape_alloc(t, (size_t)N * sizeof(int)), *idW = sp_tape_alloc(t, (size_t)N * sizeof(int));
    int *rank = sp_tape_alloc(t, (size_t)N * sizeof(int));
    g->layers = sp_tape_alloc(t, (size_t)N * sizeof(sp_layer *));
    for (int i = 0; i < N; i++) {   /* parameterised layers in forward order */
        sp_node *n = t->nodes[i];
        inset[i] = sp_grad_has(n, loss);   /* the nodes with a δ (memory.h) */
        rank[i] = 0;
        if (!inset[i] || !n->kern->backward_params || n->layer->nparams == 0) continue;
        for (int r = 0; r < g->L && !rank[i]; r++)
            if (g->layers[r] == n->layer) rank[i] = r + 1;
        if (!rank[i]) {
            g->layers[g->L++] = n->layer;
            rank[i] = g->L;
        }
    }
    int nt = 0;   /* task ids: δO and δW in the linear engine's visiting order, then U, F' */
    for (int i = N - 1; i >= 0; i--) {
        sp_node *n = t->nodes[i];
        bool delta = false;   /* one δO task computes δ of every input that needs it */
        for (int k = 0; inset[i] && k < n->ninputs; k++) delta |= n->inputs[k]->needs_grad;
        idD[i] = delta ? nt++ : -1;
        idW[i] = rank[i] ? nt++ : -1;
    }
    int L = g->L, *idU = sp_tape_alloc(t, (size_t)(L + 1) * sizeof(int));
    for (int r = 0; r < L; r++) idU[r] = with_updates ? nt++ : -1;
    g->nexec = nt;
    g->ntasks = nt + L;
    g->tasks = sp_tape_alloc(t, (size_t)(g->ntasks + 1) * sizeof(sp_ooo_task));
    memset(g->tasks, 0, (size_t)(g->ntasks + 1) * sizeof(sp_ooo_task));
    g->u_task = sp_tape_alloc(t, (size_t)(L + 1) * sizeof(int));
    for (int r = 0; r < L; r++) g->u_task[r] = idU[r];

    for (int i = 0; i < N; i++) {
        sp_node *n = t->nodes[i];
        if (!inset[i]) continue;
        sp_cost c = node_cost(n);
        if (idD[i] >= 0)
            g->tasks[idD[i]] = (sp_ooo_task){.kind = SP_OOO_DO, .node = n, .layer = n->layer, .rank = rank[i],
                                             .est = c.bwd_input_flops + OOO_TASK_OVERHEAD};
        if (idW[i] >= 0)
            g->tasks[idW[i]] = (sp_ooo_task){.kind = SP_OOO_DW, .node = n, .layer = n->layer, .rank = rank[i],
                                             .est = c.bwd_params_flops + OOO_TASK_OVERHEAD};
        for (int k = 0; idD[i] >= 0 && k < n->ninputs; k++)   /* fan-out: δ goes through a sum buffer */
            if (n->inputs[k]->needs_grad && n->inputs[k]->nconsumers > 1)
                g->tasks[idD[i]].scratch += sp_node_out_bytes(n->inputs[k]);
        if (idD[i] >= 0) g->tasks[idD[i]].alloc += g->tasks[idD[i]].scratch;
    }
    for (int r = 0; r < L; r++) {   /* U and F' of each layer sit at its first node */
        sp_node *first = NULL;
        double fwd = 0;
        for (int i = 0; i < N; i++)
            if (rank[i] == r + 1) {
                if (!first) first = t->nodes[i];
                fwd += node_cost(t->nodes[i]).fwd_flops;
            }
        double upd = 4.0 * (double)layer_numel(g->layers[r]) + OOO_TASK_OVERHEAD;
        if (idU[r] >= 0)
            g->tasks[idU[r]] = (sp_ooo_task){.kind = SP_OOO_U, .node = first, .layer = g->layers[r], .rank = r + 1,
                                             .est = upd};
        g->tasks[g->nexec + r] = (sp_ooo_task){.kind = SP_OOO_F, .node = first, .layer = g->layers[r],
                                               .rank = r + 1, .est = fwd + OOO_TASK_OVERHEAD};
    }

    node_lists writers = consumers(t, N, inset, true), readers = consumers(t, N, inset, false);
    size_t max_edges = 3 * (size_t)writers.start[N] + 4 * (size_t)N + 2 * (size_t)L + 8;
    builder b = {.t = t, .g = g, .edges = sp_tape_alloc(t, max_edges * sizeof(edge))};
    for (int m = 0; m < N; m++)
        for (int j = writers.start[m]; j < writers.start[m + 1]; j++) {
            int c = writers.items[j];
            add_edge(&b, idD[c], idD[m]);   /* ∂l/∂y complete: δO_{i+1} → δO_i, δW_i */
            add_edge(&b, idD[c], idW[m]);
            if (j + 1 < writers.start[m + 1]) add_edge(&b, idD[c], idD[writers.items[j + 1]]);   /* fan-out sum order */
        }
    for (int r = 0; r < L; r++) {
        int prev_w = -1, last_w = -1;
        for (int i = N - 1; i >= 0; i--) {
            if (rank[i] != r + 1) continue;
            add_edge(&b, prev_w, idW[i]);   /* shared weights: the linear engine's order */
            prev_w = last_w = idW[i];
            add_edge(&b, idW[i], idU[r]);
            add_edge(&b, idD[i], idU[r]);   /* δO_i reads W_i: update only after it */
            if (idU[r] < 0) add_edge(&b, idW[i], g->nexec + r);
        }
        if (idU[r] < 0) g->u_task[r] = last_w;
        add_edge(&b, idU[r], g->nexec + r);
        if (r > 0) add_edge(&b, g->nexec + r - 1, g->nexec + r);
    }
    link_edges(&b);

    int *ntouch = sp_tape_alloc(t, (size_t)g->ntasks * sizeof(int));
    memset(ntouch, 0, (size_t)g->ntasks * sizeof(int));
    size_t maxbuf = 3 * (size_t)N + 1;
    g->buf_bytes = sp_tape_alloc(t, maxbuf * sizeof(size_t));
    g->buf_users = sp_tape_alloc(t, maxbuf * sizeof(int));
    memory_model(&b, inset, idD, idW, &readers, &writers, N, loss, ntouch);
    for (int i = 0; i < g->ntasks; i++) {
        g->tasks[i].use = sp_tape_alloc(t, (size_t)ntouch[i] * sizeof(int) + sizeof(int));
        g->tasks[i].nuse = 0;
    }
    memory_model(&b, inset, idD, idW, &readers, &writers, N, loss, NULL);
    return g;
}

const char *sp_ooo_task_label(const sp_ooo_task *k, char *buf, size_t len)
{
    static const char *const kind[] = {"δ", "G", "U", "F'"};   /* the ooo paper's δO, δW */
    char name[SP_NAME_LEN + 16];
    const sp_layer *l = k->layer;
    if (k->node) sp_node_label(k->node, name, sizeof name);   /* "relu_2", as every output names it */
    else snprintf(name, sizeof name, "%s", l && l->name[0] ? l->name : "?");
    snprintf(buf, len, "%s %s", kind[k->kind], name);
    return buf;
}

/* ---- the engine --------------------------------------------------------------------- */

/* The device executor, registered by sp_ooo_cuda_register (schedulers/backward/ooo_cuda.cu). */
static const sp_ooo_device_exec *g_device_exec;

void sp_ooo_register_device(const sp_ooo_device_exec *x) { g_device_exec = x; }

typedef struct ooo_state {
    sp_ooo_order order;
    void *dev;              /* the device executor's state, made at the first device step */
    bool on_device;         /* the last backward ran on the device                         */
    bool cuda_graph;        /* --cuda-graph: the backward captured by the engine            */
    bool step_capture;      /* the caller captures the whole step (sp_ooo_set_step_capture) */
    sp_ooo_exec *exec;
    sp_tape sub_tape;       /* the sub lane's arena for op scratch */
    sp_ooo_run run;
    sp_ooo_stats stats;
    sp_ooo_trace trace;
    bool in_flight;
    bool timed;             /* the device backward recorded timing events */
    int threads;            /* sp_get_threads() when the lanes started      */
    bool lanes_inline;      /* the lanes keep off the thread pool           */
    char *trace_path;       /* our copy of opts.trace_path                  */
    sp_ooo_opts own;        /* its options (sp_engine.opts.own points here) */
    /* The last run's task times: the list order's estimates for the next step, the
     * "profiling performed as part of the training" of §4.1. */
    double *prof;
    int *prof_key, nprof, cap_prof;
} ooo_state;

static int task_key(const sp_ooo_task *t) { return 4 * (t->node ? t->node->index : 0) + (int)t->kind; }

static bool profile_matches(const ooo_state *s, const sp_ooo_graph *g)
{
    if (s->nprof != g->nexec) return false;
    for (int i = 0; i < g->nexec; i++)
        if (s->prof_key[i] != task_key(&g->tasks[i])) return false;
    return true;
}

/* A moving average, each sample clamped to twice the estimate: one step slowed by
 * another process on the machine must not reorder the next. */
static void profile_save(ooo_state *s, const sp_ooo_run *r)
{
    const sp_ooo_graph *g = r->graph;
    bool same = profile_matches(s, g);
    if (s->cap_prof < g->nexec) {   /* first step only */
        s->cap_prof = g->nexec;
        s->prof = sp_xrealloc(s->prof, (size_t)s->cap_prof * sizeof *s->prof);
        s->prof_key = sp_xrealloc(s->prof_key, (size_t)s->cap_prof * sizeof *s->prof_key);
    }
    s->nprof = g->nexec;
    for (int i = 0; i < g->nexec; i++) {
        double t = r->end[i] - r->start[i];
        if (r->with && r->with[i] >= 0) {   /* a δO and δW in one call: half each, or as before */
            if (same) continue;
            t = 0.5 * (r->end[i] - r->start[i] + r->end[r->with[i]] - r->start[r->with[i]]);
        }
        s->prof[i] = same ? 0.7 * s->prof[i] + 0.3 * (t < 2 * s->prof[i] ? t : 2 * s->prof[i]) : t;
        s->prof_key[i] = task_key(&g->tasks[i]);
    }
}

/* Measured seconds replace the flop estimates when the step has the same tasks. */
static void profile_apply(const ooo_state *s, sp_ooo_graph *g)
{
    if (!profile_matches(s, g)) return;
    for (int i = 0; i < g->nexec; i++) g->tasks[i].est = s->prof[i];
}

static ooo_state *state_of(sp_engine *e)
{
    if (!e || strcmp(e->name, "ooo") != 0)
        sp_fail("ooo: engine '%s' given (expected the ooo engine, --backward ooo)", e ? e->name : "(null)");
    return e->state;
}

static void ooo_begin(sp_engine *e, sp_tape *t, sp_node *loss);

void sp_ooo_sync(sp_engine *e)
{
    ooo_state *s = state_of(e);
    if (!s->in_flight) return;
    if (s->on_device) g_device_exec->finish(s->dev, &s->run);
    else sp_ooo_exec_finish(s->exec);
    s->in_flight = false;
    if (s->lanes_inline) sp_parallel_set_inline(false);
    const sp_ooo_run *r = &s->run;
    sp_ooo_stats *st = &s->stats;
    st->wall_s = r->wall;
    st->critical_s = r->main_done;
    st->busy_s[0] = r->busy[0];
    st->busy_s[1] = r->busy[1];
    /* forced lanes: what ran; auto: the tuner's pick once it has measured both modes */
    int tuned = !s->on_device && s->own.lanes == 0 ? sp_ooo_exec_tuned_lanes(s->exec) : 0;
    st->lanes = tuned ? tuned : r->lanes;
    st->peak_bytes = r->peak_bytes;
    st->scratch_live_bytes = r->scratch_live_bytes;
    st->fused = 0;
    for (int i = 0; r->with && i < r->graph->nexec; i++) st->fused += r->with[i] >= 0 && r->graph->tasks[i].kind == SP_OOO_DO;
    st->first_ready_s = r->graph->L > 0 ? r->end[r->graph->nexec] : r->wall;
    st->steps++;
    if (s->on_device && !s->timed) return;   /* no event times this step (--cuda-graph, or not asked) */
    char title[96];
    snprintf(title, sizeof title, "scanprop ooo backward%s, order %s", s->on_device ? " on cuda (stream times)" : "",
             st->order);
    sp_ooo_trace_capture(&s->trace, r, title);
    profile_save(s, r);
}

static void ooo_begin(sp_engine *e, sp_tape *t, sp_node *loss)
{
    ooo_state *s = state_of(e);
    sp_ooo_sync(e);
    s->threads = sp_get_threads();
    sp_ooo_graph *g = sp_ooo_graph_build(t, loss, e->opts.update != NULL);
    sp_alloc_grads(t, loss);
    s->on_device = loss->out.device != SP_CPU;
    if (s->on_device && !g_device_exec)
        sp_fail("ooo: the loss is on %s but no device executor is registered (expected sp_cuda_start first)",
                sp_device_name(loss->out.device));
    bool graphed = s->cuda_graph || s->step_capture;
    if (!s->on_device || !graphed) profile_apply(s, g);   /* a captured backward keeps its plan */
    /* On a device the two lanes are streams: the host thread count does not matter, and
     * one lane (--lanes 1) is a one-lane plan, on one stream. On the CPU --lanes 1 keeps
     * the plan's two queues and the executor runs both on the main lane, as the lane
     * tuner's one-lane mode does (ooo_exec.c). */
    if (!s->on_device && s->own.lanes == 2 && s->threads < 2)
        sp_fail("ooo: lanes = 2 with %d thread (expected 2 threads or more: each lane runs on a thread of its own)",
                s->threads);
    bool two = (s->on_device ? s->own.lanes != 1 : s->threads >= 2) && s->order != SP_OOO_CONVENTIONAL;
    sp_ooo_plan *p = sp_ooo_plan_make(t, g, s->order, s->own.k, (size_t)s->own.mem_cap, two);
    sp_ooo_plan *conv = sp_ooo_plan_make(t, g, SP_OOO_CONVENTIONAL, 0, 0, false);
    sp_ooo_stats *st = &s->stats;
    st->order = sp_ooo_order_name(s->order);
    st->k = p->k;
    bool plan_two = p->nqueue[SP_OOO_SUB] > 0;
    /* On two cores the lanes keep off the thread pool: a pool worker would be a third
     * thread on two cores, and a static partition waits for its slowest chunk. Ops give
     * the same bits whichever way sp_parallel_for splits them (their own splits, and
     * sp_gemm's, follow the thread count, not the pool), so nothing else changes. */
    s->lanes_inline = !s->on_device && plan_two && s->threads <= 2;
    if (s->lanes_inline) sp_parallel_set_inline(true);
    st->ntasks = g->nexec;
    st->start_bytes = g->start_bytes;
    st->plan_peak_bytes = p->peak_bytes;
    st->conventional_peak_bytes = conv->peak_bytes;
    st->mem_cap = (size_t)s->own.mem_cap;
    sp_tape_reset(&s->sub_tape);
    sp_ooo_exec_cfg cfg = {.update = e->opts.update, .update_ctx = e->opts.update_ctx,
                           .mem_cap = (size_t)s->own.mem_cap, .sub_tape = &s->sub_tape,
                           .lanes_inline = s->lanes_inline, .lanes = s->own.lanes};
    s->in_flight = true;
    if (s->on_device) {
        if (!s->dev) s->dev = g_device_exec->create();
        sp_ooo_run *r = &s->run;   /* the CPU executor's bookkeeping, filled by finish */
        memset(r, 0, sizeof *r);
        r->graph = g;
        r->plan = p;
        r->start = sp_tape_alloc(t, (size_t)(g->ntasks + 1) * sizeof(double));
        r->end = sp_tape_alloc(t, (size_t)(g->ntasks + 1) * sizeof(double));
        r->ran_on = sp_tape_alloc(t, (size_t)(g->ntasks + 1) * sizeof(int));
        memset(r->start, 0, (size_t)(g->ntasks + 1) * sizeof(double));
        memset(r->end, 0, (size_t)(g->ntasks + 1) * sizeof(double));
        memset(r->ran_on, 0, (size_t)(g->ntasks + 1) * sizeof(int));
        r->peak_bytes = p->peak_bytes;   /* the model: the streams' interleaving is not observed */
        r->lanes = plan_two ? 2 : 1;     /* the plan's queues are the streams */
        /* Event times when someone reads them: the trace, the list order's profile. */
        s->timed = !graphed && (e->opts.trace_path || s->order == SP_OOO_LIST);
        g_device_exec->begin(s->dev, t, g, p, &cfg, r, s->timed, s->cuda_graph && !s->step_capture);
        return;
    }
    sp_ooo_exec_begin(s->exec, t, g, p, &cfg, &s->run);
}

static void ooo_backward(sp_engine *e, sp_tape *t, sp_node *loss)
{
    ooo_begin(e, t, loss);
    sp_ooo_sync(e);
}

void sp_ooo_backward_async(sp_engine *e, sp_tape *t, sp_node *loss) { ooo_begin(e, t, loss); }

void sp_ooo_wait_layer(sp_engine *e, const sp_layer *l)
{
    ooo_state *s = state_of(e);
    if (!s->in_flight) return;
    const sp_ooo_graph *g = s->run.graph;
    for (int r = 0; r < g->L; r++) {
        if (g->layers[r] != l || g->u_task[r] < 0) continue;
        if (s->on_device) g_device_exec->wait_task(s->dev, g->u_task[r]);
        else sp_ooo_exec_wait_task(s->exec, g->u_task[r]);
    }
    /* On the CPU the overlapping forward runs its loops inline on the main lane (the sub
     * lane takes chunks of them while it has nothing else to do); once every task is
     * done, join, so the rest of the forward has the thread pool again. */
    if (!s->on_device && sp_ooo_exec_all_done(s->exec)) sp_ooo_sync(e);
}

const sp_ooo_stats *sp_ooo_last_stats(sp_engine *e) { return &state_of(e)->stats; }

void sp_ooo_set_cuda_graph(sp_engine *e, bool on)
{
    ooo_state *s = state_of(e);
    if (on && e->opts.trace_path)
        sp_fail("--cuda-graph with --trace %s: a replayed graph has no per-task event times (expected one of them)",
                e->opts.trace_path);
    s->cuda_graph = on;
}

void sp_ooo_set_step_capture(sp_engine *e, bool on)
{
    ooo_state *s = state_of(e);
    if (on && e->opts.trace_path)
        sp_fail("--cuda-graph with --trace %s: a replayed graph has no per-task event times (expected one of them)",
                e->opts.trace_path);
    s->step_capture = on;
}

sp_ooo_device_stats sp_ooo_device_stats_get(sp_engine *e)
{
    ooo_state *s = state_of(e);
    sp_ooo_device_stats d = {0};
    if (s->dev) g_device_exec->stats(s->dev, &d);
    return d;
}
const sp_ooo_run *sp_ooo_last_run(sp_engine *e) { return &state_of(e)->run; }

void sp_ooo_write_trace(sp_engine *e, const char *path)
{
    ooo_state *s = state_of(e);
    sp_ooo_sync(e);
    if (s->trace.n == 0) sp_fail("--trace %s: no ooo backward has run yet (expected at least one step)", path);
    sp_ooo_trace_write(&s->trace, path);
}

static void ooo_destroy(sp_engine *e)
{
    ooo_state *s = e->state;
    sp_ooo_sync(e);
    if (e->opts.trace_path && s->trace.n > 0) sp_ooo_trace_write(&s->trace, e->opts.trace_path);
    sp_ooo_exec_free(s->exec);
    if (s->dev) g_device_exec->destroy(s->dev);
    sp_ooo_trace_free(&s->trace);
    sp_tape_free(&s->sub_tape);
    free(s->trace_path);
    free(s->prof);
    free(s->prof_key);
    free(s);
}

sp_engine *sp_engine_ooo_create(const sp_engine_opts *opts)
{
    const sp_ooo_opts *own = sp_engine_own_opts(&sp_engine_def_ooo, opts);
    if (own->k < 0) sp_fail("--k %d: expected >= 0 (0 = half the parameterised layers)", own->k);
    sp_ooo_order order = sp_ooo_order_parse(own->order ? own->order : "ooo");
    if (own->lanes < 0 || own->lanes > 2) sp_fail("ooo: lanes %d (expected 0 = auto, 1 or 2)", own->lanes);
    if (own->lanes == 2 && order == SP_OOO_CONVENTIONAL)
        sp_fail("--lanes 2 with --order conventional: that order runs on one lane (expected another order, "
                "or --lanes 1 or auto)");
    if (opts->trace_path) {   /* fail now, not after training (nothing is written yet) */
        sp_out out;
        sp_check(sp_out_open(&out, opts->trace_path, "--trace"));
        sp_out_abort(&out);
    }
    sp_engine *e = sp_xcalloc(1, sizeof *e);
    ooo_state *s = sp_xcalloc(1, sizeof *s);
    e->name = "ooo";
    e->opts = *opts;
    s->own = *own;
    e->opts.own = &s->own;
    e->backward = ooo_backward;
    e->destroy = ooo_destroy;
    e->state = s;
    e->backward_async = sp_ooo_backward_async;
    e->sync = sp_ooo_sync;
    e->wait_layer = sp_ooo_wait_layer;
    e->set_graph = sp_ooo_set_cuda_graph;
    e->set_step_capture = sp_ooo_set_step_capture;
    e->check = sp_ooo_check;
    e->report = sp_ooo_report;
    s->order = order;
    if (opts->trace_path) {   /* written at destroy: the caller's string may be gone */
        s->trace_path = sp_xmalloc(strlen(opts->trace_path) + 1);
        strcpy(s->trace_path, opts->trace_path);
        e->opts.trace_path = s->trace_path;
    }
    s->exec = sp_ooo_exec_new();
    sp_tape_init(&s->sub_tape);
    return e;
}

/* --lanes 1 | 2 | auto into lanes; --lanes 2 with --order conventional, or with one
 * thread on the CPU, refused before any data is read */
static void ooo_opts_finish(void *p, int threads, bool on_device)
{
    sp_ooo_opts *o = p;
    if (o->lanes_arg) o->lanes = strcmp(o->lanes_arg, "auto") != 0 ? atoi(o->lanes_arg) : 0;
    if (o->lanes == 2 && o->order && strcmp(o->order, "conventional") == 0)
        sp_fail("--lanes 2 with --order conventional: that order runs on one lane (expected another --order, "
                "or --lanes 1 or auto)");
    if (o->lanes == 2 && threads < 2 && !on_device)
        sp_fail("--lanes 2 with --threads %d: each lane runs on a thread of its own (expected --threads 2 or more)",
                threads);
}

static const sp_ooo_opts OOO_DEFAULTS = {.order = "ooo", .lanes_arg = "auto"};
static const sp_engine_option OOO_OPTIONS[] = {
    {"order", SP_ENGINE_OPT_STR, offsetof(sp_ooo_opts, order), "task order of the two lanes",
     .choices = "conventional|ooo|reverse-first-k|list", .needs = "!eval-only"},
    {"k", SP_ENGINE_OPT_INT, offsetof(sp_ooo_opts, k), "layers in reverse-first order (0 = half the parameterised "
     "layers)", .range = "0..", .needs = "order=reverse-first-k,!eval-only"},
    {"lanes", SP_ENGINE_OPT_STR, offsetof(sp_ooo_opts, lanes_arg), "lanes the backward runs on (auto: one or two, "
     "whichever the executor measures faster; 2 needs --threads 2 or more; docs/OOO.md)", .choices = "1|2|auto",
     .needs = "!parallel,!eval-only"},
    {"mem-cap", SP_ENGINE_OPT_LONG, offsetof(sp_ooo_opts, mem_cap), "memory cap of the backward pass in bytes "
     "(0 = none)", .range = "0..", .meta = "BYTES", .needs = "!parallel,!eval-only"},
    {0},
};
_Static_assert(sizeof(sp_ooo_opts) <= SP_ENGINE_OPTS_BYTES, "sp_ooo_opts: too large");

const sp_engine_def sp_engine_def_ooo = {
    .name = "ooo",
    .caps = SP_ENGINE_DEVICE | SP_ENGINE_TRACE | SP_ENGINE_LAYER_UPDATES | SP_ENGINE_REORDERS_DW | SP_ENGINE_BLOCKED,
    .create = sp_engine_ooo_create,
    .opts_size = sizeof(sp_ooo_opts),
    .opts_default = &OOO_DEFAULTS,
    .options = OOO_OPTIONS,
    .group = "ooo engine (with --backward ooo)",
    .finish = ooo_opts_finish,
};
