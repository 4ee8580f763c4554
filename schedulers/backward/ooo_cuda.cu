/* ooo_cuda.cu — the ooo engine's device executor: the plan of ooo_policy.c on two CUDA
 * streams of different priority, cross-stream dependencies as events, optionally one
 * captured CUDA Graph per steady-state backward (docs/OOO.md "On the GPU").
 *
 * Mirrors ooo_exec.c, the CPU's two-lane executor, with the mapping docs/OOO.md gives:
 *   main queue (δO, and the δW a policy keeps in place) -> lane 0, the high-priority stream
 *   sub queue (deferred δW, the updates U)              -> lane 1, the low-priority stream
 *   a task's counter of unfinished predecessors         -> cudaStreamWaitEvent(stream,
 *        done[pred]) for each predecessor queued on the other stream (a predecessor on
 *        the same stream is ordered by the stream itself)
 *   "task done"                                          -> cudaEventRecord(done[task])
 * The host queues the tasks in the plan's total order D, a topological order, so every
 * event is recorded before a stream is told to wait for it. Each lane has its own
 * cuBLAS/cuDNN/cuSPARSE handles bound to its stream (core/kernels/cuda_backend.cu): a task runs
 * its op with the lane set (sp_cuda_set_lane), and the op issues to sp_cuda_stream().
 * Every task runs the same kernels on the same buffers as the device linear engine and
 * every pair of tasks writing one buffer is ordered by the graph, so the gradients are
 * the linear engine's bits whatever the streams' interleaving.
 *
 * The backward forks from lane 0 (lane 1 waits for an event recorded after the forward,
 * the gradient zeroing and the seed) and joins it in finish (sp_ooo_sync: lane 0 waits
 * for lane 1's last event). Between the two, the next step's forward may be queued on
 * lane 0 (sp_ooo_backward_async): each layer's forward waits only for that layer's U
 * event (sp_ooo_wait_layer → wait_task), so it overlaps the last δW/U on lane 1 — F'_i
 * after U_i, as on the CPU. At the join the tape's arena is marked joined: its reset
 * then waits for lane 0 alone, not for the whole device (core/kernels/cuda_backend.cu).
 *
 * Timing (--trace, the list order's profile): a timing event before and after each task;
 * finish waits for the backward and turns them into seconds from the fork.
 *
 * The backward as a graph (sp_ooo_set_cuda_graph: the demo's --cuda-graph; the training
 * loop captures the whole step instead, train/train.c, and the engine then runs live
 * inside that capture): the backward's δO and δW tasks (both streams, their events) are captured
 * with cudaStreamBeginCapture on lane 0 the second time a key is seen (the key hashes
 * every task's node, op, shapes and device pointers: the same model on the same shapes
 * reuses the same arena addresses from the second step on), instantiated, and replayed
 * whenever the key comes again; a new key (a new shape) runs live, then is captured.
 * The updates U run live after the replay: their scalars (the learning rate of a
 * schedule, Adam's bias corrections) are kernel arguments that change between steps. */
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include "core/kernels/cuda.h"
extern "C" {
#include "core/error.h"
#include "schedulers/backward/engines.h"
#include "schedulers/backward/ooo.h"
}

namespace {

/* Backwards whose graphs are kept: the training loop alternates two staged input
 * buffers (core/kernels/cuda_backend.cu), so a steady state has two keys; four leave room. */
#define GRAPH_CACHE 4

struct dev_exec {
    int cap;                        /* events allocated per array */
    cudaEvent_t *done;              /* [cap] cross-stream completion (no timing) */
    cudaEvent_t *t_start, *t_end;   /* [cap] timing */
    cudaEvent_t t0, fork, join, after_graph;
    bool timed;                     /* the last begin recorded timing events */
    bool need_join;                 /* lane 1 still runs the last backward's tail: finish joins it */
    bool *u_recorded;               /* [cap] done[task] recorded for this U (the next forward waits on it) */
    sp_tape *tape;                  /* the last backward's tape (its arena is marked joined at the join) */
    int ntimed;
    const sp_ooo_plan *plan;
    /* --cuda-graph: the backwards seen lately, by key; a graph for those seen twice */
    struct {
        uint64_t key;
        cudaGraphExec_t exec;
        long used;
    } seen[GRAPH_CACHE];
    long clock;
    sp_ooo_device_stats st;
};

void grow(dev_exec *x, int n)
{
    if (n <= x->cap) return;
    int cap = x->cap ? x->cap : 64;
    while (cap < n) cap *= 2;
    x->done = (cudaEvent_t *)sp_xrealloc(x->done, (size_t)cap * sizeof(cudaEvent_t));
    x->t_start = (cudaEvent_t *)sp_xrealloc(x->t_start, (size_t)cap * sizeof(cudaEvent_t));
    x->t_end = (cudaEvent_t *)sp_xrealloc(x->t_end, (size_t)cap * sizeof(cudaEvent_t));
    x->u_recorded = (bool *)sp_xrealloc(x->u_recorded, (size_t)cap * sizeof(bool));
    for (int i = x->cap; i < cap; i++) {
        sp_cuda_check(cudaEventCreateWithFlags(&x->done[i], cudaEventDisableTiming));
        sp_cuda_check(cudaEventCreate(&x->t_start[i]));
        sp_cuda_check(cudaEventCreate(&x->t_end[i]));
    }
    x->cap = cap;
}

void *dev_create(void)
{
    dev_exec *x = (dev_exec *)sp_xcalloc(1, sizeof(dev_exec));
    sp_cuda_check(cudaEventCreate(&x->t0));
    sp_cuda_check(cudaEventCreateWithFlags(&x->fork, cudaEventDisableTiming));
    sp_cuda_check(cudaEventCreateWithFlags(&x->join, cudaEventDisableTiming));
    sp_cuda_check(cudaEventCreateWithFlags(&x->after_graph, cudaEventDisableTiming));
    return x;
}

void dev_destroy(void *p)
{
    dev_exec *x = (dev_exec *)p;
    if (!x) return;
    sp_cuda_check(cudaDeviceSynchronize());
    for (int i = 0; i < GRAPH_CACHE; i++)
        if (x->seen[i].exec) sp_cuda_check(cudaGraphExecDestroy(x->seen[i].exec));
    for (int i = 0; i < x->cap; i++) {
        sp_cuda_check(cudaEventDestroy(x->done[i]));
        sp_cuda_check(cudaEventDestroy(x->t_start[i]));
        sp_cuda_check(cudaEventDestroy(x->t_end[i]));
    }
    sp_cuda_check(cudaEventDestroy(x->t0));
    sp_cuda_check(cudaEventDestroy(x->fork));
    sp_cuda_check(cudaEventDestroy(x->join));
    sp_cuda_check(cudaEventDestroy(x->after_graph));
    free(x->done);
    free(x->t_start);
    free(x->t_end);
    free(x->u_recorded);
    free(x);
}

cudaStream_t lane_stream(int lane) { return sp_cuda()->lanes[lane].stream; }

/* The task, on the calling thread's lane (set by the caller): the CPU executor's run_task. */
void run_task(const sp_ooo_exec_cfg *cfg, const sp_ooo_task *t)
{
    switch (t->kind) {
    case SP_OOO_DO: sp_node_backward_inputs(t->node); break;   /* exactly as reverse.c */
    case SP_OOO_DW: t->node->kern->backward_params(t->node, &t->node->grad); break;
    case SP_OOO_U: cfg->update(cfg->update_ctx, t->layer); break;
    case SP_OOO_F: break;
    }
}

bool cross_succ(const sp_ooo_graph *g, const sp_ooo_plan *p, int id)
{
    const sp_ooo_task *t = &g->tasks[id];
    for (int s = 0; s < t->nsucc; s++)
        if (t->succ[s] < g->nexec && p->lane[t->succ[s]] != p->lane[id]) return true;
    return false;
}

/* Queues the tasks of D that `want` selects on their lanes' streams, each after the
 * events of its predecessors on the other stream; events for the successors. */
void queue_tasks(dev_exec *x, const sp_ooo_graph *g, const sp_ooo_plan *p, const sp_ooo_exec_cfg *cfg,
                 sp_ooo_run *run, bool timing, bool (*want)(const sp_ooo_task *))
{
    for (int k = 0; k < g->nexec; k++) {
        int id = p->seq[k];
        const sp_ooo_task *t = &g->tasks[id];
        if (!want(t)) continue;
        int lane = p->lane[id];
        cudaStream_t s = lane_stream(lane);
        for (int q = 0; q < t->npred; q++) {
            int pr = t->pred[q];
            if (pr < g->nexec && p->lane[pr] != lane && want(&g->tasks[pr])) {
                sp_cuda_check(cudaStreamWaitEvent(s, x->done[pr], 0));
                x->st.cross_events++;
            }
        }
        sp_cuda_set_lane(lane);
        if (timing) sp_cuda_check(cudaEventRecord(x->t_start[id], s));
        run_task(cfg, t);
        if (timing) sp_cuda_check(cudaEventRecord(x->t_end[id], s));
        /* done: for successors on the other stream, and after every U for the next step's
         * forward of that layer (sp_ooo_wait_layer), which may start before the join */
        if (cross_succ(g, p, id) || t->kind == SP_OOO_U) sp_cuda_check(cudaEventRecord(x->done[id], s));
        x->u_recorded[id] = t->kind == SP_OOO_U;
        sp_cuda_set_lane(0);
        run->ran_on[id] = lane;
    }
}

bool all_tasks(const sp_ooo_task *) { return true; }
bool grad_tasks(const sp_ooo_task *t) { return t->kind != SP_OOO_U; }

void fork_lanes(dev_exec *x, bool two)
{
    if (!two) return;
    sp_cuda_check(cudaEventRecord(x->fork, lane_stream(0)));
    sp_cuda_check(cudaStreamWaitEvent(lane_stream(1), x->fork, 0));
}

void join_lanes(dev_exec *x, bool two)
{
    if (!two) return;
    sp_cuda_check(cudaEventRecord(x->join, lane_stream(1)));
    sp_cuda_check(cudaStreamWaitEvent(lane_stream(0), x->join, 0));
}

/* FNV-1a over what a captured backward bakes in: the tasks, their lanes and order, the
 * ops, the shapes and every device pointer a task reads or writes. */
uint64_t mix(uint64_t h, uint64_t v)
{
    for (int b = 0; b < 8; b++) h = (h ^ ((v >> (8 * b)) & 0xff)) * 0x100000001b3ull;
    return h;
}

uint64_t tensor_key(uint64_t h, const sp_tensor *t)
{
    h = mix(h, (uint64_t)(uintptr_t)t->data);
    h = mix(h, (uint64_t)t->ndim);
    for (int d = 0; d < t->ndim; d++) h = mix(h, (uint64_t)t->shape[d]);
    return h;
}

uint64_t backward_key(const sp_ooo_graph *g, const sp_ooo_plan *p)
{
    uint64_t h = 0xcbf29ce484222325ull;
    h = mix(h, (uint64_t)g->nexec);
    for (int k = 0; k < g->nexec; k++) {
        int id = p->seq[k];
        const sp_ooo_task *t = &g->tasks[id];
        h = mix(h, (uint64_t)id);
        h = mix(h, (uint64_t)t->kind);
        h = mix(h, (uint64_t)p->lane[id]);
        if (!t->node) continue;
        const sp_node *n = t->node;
        h = mix(h, (uint64_t)(uintptr_t)n->op);
        h = mix(h, (uint64_t)(uintptr_t)n->saved);
        h = tensor_key(h, &n->out);
        h = tensor_key(h, &n->grad);
        for (int i = 0; i < n->ninputs; i++) {
            h = tensor_key(h, &n->inputs[i]->out);
            h = tensor_key(h, &n->inputs[i]->grad);
        }
        for (int i = 0; n->layer && i < n->layer->nparams; i++) {
            h = tensor_key(h, &n->layer->params[i]->value);
            h = tensor_key(h, &n->layer->params[i]->grad);
        }
    }
    return h;
}

void dev_begin(void *px, sp_tape *tape, const sp_ooo_graph *g, const sp_ooo_plan *p, const sp_ooo_exec_cfg *cfg,
               sp_ooo_run *run, bool timing, bool graph)
{
    dev_exec *x = (dev_exec *)px;
    if (sp_cuda_current() != &sp_cuda()->lanes[0])
        sp_fail("ooo on cuda: the backward is queued from lane %d (expected lane 0: the engine owns both lanes)",
                (int)(sp_cuda_current() - sp_cuda()->lanes));
    grow(x, g->ntasks + 1);
    memset(x->u_recorded, 0, (size_t)x->cap * sizeof(bool));
    x->plan = p;
    x->tape = tape;
    x->st.cross_events = 0;
    bool two = p->nqueue[SP_OOO_SUB] > 0;
    timing = timing && !graph;
    x->timed = timing;
    x->need_join = false;
    if (timing) sp_cuda_check(cudaEventRecord(x->t0, lane_stream(0)));
    if (!graph) {   /* the join waits for finish (sp_ooo_sync): the next forward may come first */
        fork_lanes(x, two);
        queue_tasks(x, g, p, cfg, run, timing, all_tasks);
        x->need_join = two;
        return;
    }
    uint64_t key = backward_key(g, p);
    int slot = -1, lru = 0;
    for (int i = 0; i < GRAPH_CACHE; i++) {
        if (x->seen[i].used && x->seen[i].key == key) slot = i;
        if (x->seen[i].used < x->seen[lru].used) lru = i;
    }
    x->clock++;
    if (slot < 0) {   /* a new key (a new shape, the first steps): live, captured when seen again */
        if (x->seen[lru].exec) sp_cuda_check(cudaGraphExecDestroy(x->seen[lru].exec));
        x->seen[lru].key = key;
        x->seen[lru].exec = NULL;
        x->seen[lru].used = x->clock;
        fork_lanes(x, two);
        queue_tasks(x, g, p, cfg, run, false, all_tasks);
        join_lanes(x, two);
        return;
    }
    x->seen[slot].used = x->clock;
    if (!x->seen[slot].exec) {   /* seen before: capture the δO/δW of both streams */
        cudaGraph_t gr;
        sp_cuda_check(cudaStreamBeginCapture(lane_stream(0), cudaStreamCaptureModeGlobal));
        fork_lanes(x, two);
        queue_tasks(x, g, p, cfg, run, false, grad_tasks);
        join_lanes(x, two);
        sp_cuda_check(cudaStreamEndCapture(lane_stream(0), &gr));
        sp_cuda_check(cudaGraphInstantiate(&x->seen[slot].exec, gr, 0));
        sp_cuda_check(cudaGraphDestroy(gr));
        x->st.graph_captures++;
    } else {
        for (int i = 0; i < g->nexec; i++) run->ran_on[i] = p->lane[i];
        x->st.graph_replays++;
    }
    sp_cuda_check(cudaGraphLaunch(x->seen[slot].exec, lane_stream(0)));
    bool sub_u = false;   /* the updates, live, after the replayed backward */
    for (int i = 0; i < g->nexec; i++) sub_u |= g->tasks[i].kind == SP_OOO_U && p->lane[i] == SP_OOO_SUB;
    if (sub_u) {
        sp_cuda_check(cudaEventRecord(x->after_graph, lane_stream(0)));
        sp_cuda_check(cudaStreamWaitEvent(lane_stream(1), x->after_graph, 0));
    }
    for (int k = 0; k < g->nexec; k++) {
        int id = p->seq[k];
        if (g->tasks[id].kind != SP_OOO_U) continue;
        sp_cuda_set_lane(p->lane[id]);
        run_task(cfg, &g->tasks[id]);
        sp_cuda_set_lane(0);
        run->ran_on[id] = p->lane[id];
    }
    join_lanes(x, sub_u);
}

double elapsed_s(cudaEvent_t a, cudaEvent_t b)
{
    float ms = 0;
    sp_cuda_check(cudaEventElapsedTime(&ms, a, b));
    return 1e-3 * (double)ms;
}

/* The next step's forward of a layer: the calling lane's stream waits for that layer's
 * update U (recorded on its stream by the last backward), not for the whole backward. */
void dev_wait_task(void *px, int task)
{
    dev_exec *x = (dev_exec *)px;
    if (!x->need_join || task < 0 || task >= x->cap || !x->u_recorded[task]) return;   /* joined already */
    sp_cuda_check(cudaStreamWaitEvent(sp_cuda_stream(), x->done[task], 0));
    x->st.layer_waits++;
}

/* The join (lane 0 waits for lane 1's last task; the tape's arena may then be reset
 * after lane 0 alone), then the timing events when the backward was timed. */
void dev_finish(void *px, sp_ooo_run *run)
{
    dev_exec *x = (dev_exec *)px;
    if (x->need_join) {
        join_lanes(x, true);
        x->need_join = false;
        sp_cuda_arena_joined(x->tape);
    }
    if (!x->timed) return;
    const sp_ooo_graph *g = run->graph;
    sp_cuda_check(cudaStreamSynchronize(lane_stream(0)));   /* lane 0 waited for lane 1's last task */
    for (int i = 0; i < g->nexec; i++) {
        run->start[i] = elapsed_s(x->t0, x->t_start[i]);
        run->end[i] = elapsed_s(x->t0, x->t_end[i]);
        run->busy[run->ran_on[i]] += run->end[i] - run->start[i];
        if (run->end[i] > run->wall) run->wall = run->end[i];
        if (x->plan->lane[i] == SP_OOO_MAIN && run->end[i] > run->main_done) run->main_done = run->end[i];
    }
    for (int i = g->nexec; i < g->ntasks; i++) {   /* F': when the next forward of a layer could start */
        double at = 0;
        for (int q = 0; q < g->tasks[i].npred; q++)
            if (run->end[g->tasks[i].pred[q]] > at) at = run->end[g->tasks[i].pred[q]];
        run->start[i] = run->end[i] = at;
    }
    x->timed = false;
}

void dev_stats(void *px, sp_ooo_device_stats *out) { *out = ((dev_exec *)px)->st; }

const sp_ooo_device_exec cuda_ooo_exec = {dev_create, dev_destroy, dev_begin, dev_finish, dev_stats, dev_wait_task};

}   // namespace

void sp_ooo_cuda_register(void) { sp_ooo_register_device(&cuda_ooo_exec); }
