/* exec_stage.c — one stage's jobs of the executor: F(s, b), B / δ / G (s, b) on micro-batch
 * b's tape, their inputs taken locally or received, their outputs sent to every other
 * rank that runs a successor (non-blocking; the runtime waits for the sends at the end
 * of the step).
 *
 * A stage is a segment of the model (exec_internal.h): one layer of a chain, or in a DAG
 * a run of layers whose only way in is the previous segment's output and whose only way
 * out its last layer's. F applies its layers in order, each reading the stage's input or
 * an earlier layer of the stage; its backward walks them in reverse (the linear engine's
 * walk, confined to the stage): each node's δ from its readers' (added where several
 * read it), the δ of the stage's input the one tensor that crosses back. Split into δ
 * and G, the walk makes every node's δ (kept on the tape) and G then each layer's
 * gradients from them, so a zero-bubble schedule defers a DAG stage's G as a layer's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/device.h"
#include "core/error.h"
#include "core/threads.h"
#include "schedulers/exec/exec_internal.h"

static bool is_bwd(sp_dir d) { return d != SP_FWD; }

/* The job that produces ∂l/∂y_s of micro-batch b (δ or whole B of stage s+1). */
static int dy_producer(const sp_exec *x, int s, int b)
{
    return job_of(x, s + 1, b, x->sched->split_backward ? SP_BWD_DELTA : SP_BWD);
}

/* Names the job a blocking wait belongs to (a hang's report says which). */
void sp_exec_label_job(const sp_exec *x, int job, long step)
{
    char lab[32], buf[96];
    sp_job_label(x->sched, job, lab, sizeof lab);
    snprintf(buf, sizeof buf, "step %ld, job %s", step + 1, lab);
    sp_comm_set_label(buf);
}

static sp_req *new_send(sp_exec *x)
{
    if (x->nsends == x->cap_sends) {
        /* Only between steps can the array move (requests hold no pointer into it). */
        x->cap_sends = x->cap_sends ? 2 * x->cap_sends : 64;
        x->sends = sp_xrealloc(x->sends, sizeof *x->sends * (size_t)x->cap_sends);
    }
    return &x->sends[x->nsends++];
}

/* Send out to every other rank that runs a successor of `job` reading it (once each). */
static void send_to_succs(sp_exec *x, int job, const sp_tensor *out, int tag, bool grads)
{
    int n;
    const int *succ = sp_schedule_succs(x->sched, job, &n);
    int sent[8], nsent = 0;
    for (int i = 0; i < n; i++) {
        int w = x->sched->compute[succ[i]];
        sp_job sj = x->sched->jobs[succ[i]];
        if (w == x->rank || is_bwd(sj.dir) != grads) continue;   /* local, or a cap edge */
        bool dup = false;
        for (int k = 0; k < nsent; k++) dup |= sent[k] == w;
        if (dup || nsent == 8) continue;
        sent[nsent++] = w;
        sp_exec_log_msg(x, w, grads ? SP_MSG_GRAD : SP_MSG_ACT, grads ? sj.stage : x->sched->jobs[job].stage,
                        4.0 * (double)out->numel);
        sp_isend(x->world, out->data, out->numel, w, tag, new_send(x));
    }
}

/* ---- a stage's layers ------------------------------------------------------------------- */

sp_node *sp_exec_stage_forward(const sp_exec *x, int s, sp_tape *t, sp_node *in)
{
    const stage_info *si = &x->st[s];
    if (!x->dag) {
        t->out_blocked = x->blk_make && x->blk_make[si->layer0];
        sp_node *y = sp_apply(t, si->layer, in);
        t->out_blocked = false;
        return y;
    }
    const sp_model *m = x->m;
    sp_node **out = sp_tape_alloc(t, sizeof *out * (size_t)si->nlayers);
    for (int i = 0; i < si->nlayers; i++) {
        int l = si->layer0 + i, k0 = m->from_start[l], nin = m->from_start[l + 1] - k0;
        sp_node **args = sp_tape_alloc(t, sizeof *args * (size_t)nin);
        for (int k = 0; k < nin; k++) {   /* before the stage: its input (the cut, exec_setup.c) */
            int f = m->from[k0 + k];
            args[k] = f < si->layer0 ? in : out[f - si->layer0];
        }
        t->out_blocked = x->blk_make && x->blk_make[l];   /* sp_exec_setup_blocked */
        out[i] = sp_apply_n(t, m->layers[l], nin, args);
    }
    t->out_blocked = false;
    return out[si->nlayers - 1];
}

static bool has_params(const sp_node *n) { return n->kern->backward_params && n->layer && n->layer->nparams > 0; }

/* The share of a fused δ + G call that is G, by the op's FLOPs (half where it has no cost). */
static double grad_share(const sp_node *v)
{
    if (!v->op || !v->op->cost) return 0.5;
    sp_cost k = v->op->cost(v);
    double all = k.bwd_input_flops + k.bwd_params_flops;
    return all > 0 ? k.bwd_params_flops / all : 0.5;
}

void sp_exec_stage_walk(sp_tape *t, int first, int last, const sp_tensor *dy, sp_tensor *dx, bool params,
                        bool fuse, double *t_grad)
{
    int n = last - first + 1;
    int *uses = sp_xcalloc((size_t)n + 1, sizeof *uses);   /* input slots reading node first + i; [n]: the input */
    for (int i = first; i <= last; i++)
        for (int k = 0; k < t->nodes[i]->ninputs; k++) {
            int u = t->nodes[i]->inputs[k]->index;
            uses[u < first ? n : u - first]++;
        }
    for (int i = first; i < last; i++) {   /* a δ read by several is a sum: zeroed first */
        sp_node *v = t->nodes[i];
        v->grad = sp_tape_tensor_like(t, &v->out);
        if (uses[i - first] != 1) sp_zero(&v->grad);
    }
    t->nodes[last]->grad = *dy;
    if (dx && uses[n] != 1) sp_zero(dx);
    double tg = 0;
    for (int i = last; i >= first; i--) {
        sp_node *v = t->nodes[i];
        sp_arena_mark mk = sp_arena_mark_get(&t->arena);   /* the node's scratch: dead once it returns */
        sp_tensor *g0 = NULL;   /* a one-input layer's δ target: fused with its G (the linear engine's call) */
        if (fuse && params && has_params(v) && v->kern->backward_input_params && v->ninputs == 1)
            g0 = v->inputs[0]->index < first ? dx : &v->inputs[0]->grad;
        if (g0) {
            int u = v->inputs[0]->index;
            double t0 = sp_now();
            v->kern->backward_input_params(v, &v->grad, g0, uses[u < first ? n : u - first] != 1);
            tg += (sp_now() - t0) * grad_share(v);
            sp_arena_release(&t->arena, mk);
            continue;
        }
        if (params && has_params(v)) {
            double t0 = sp_now();
            v->kern->backward_params(v, &v->grad);
            tg += sp_now() - t0;
        }
        for (int k = 0; k < v->ninputs && v->kern->backward_input; k++) {
            sp_node *u = v->inputs[k];
            bool outside = u->index < first;
            sp_tensor *g = outside ? dx : &u->grad;
            if (!g) continue;   /* the model's input */
            if (uses[outside ? n : u->index - first] == 1) {
                v->kern->backward_input(v, k, &v->grad, g);
            } else if (v->kern->backward_input_acc) {
                v->kern->backward_input_acc(v, k, &v->grad, g);
            } else {
                sp_tensor tmp = sp_tape_tensor_like(t, &u->out);
                v->kern->backward_input(v, k, &v->grad, &tmp);
                sp_accumulate(g, &tmp);
            }
        }
        sp_arena_release(&t->arena, mk);
    }
    free(uses);
    if (t_grad) *t_grad = tg;
}

void sp_exec_stage_grads(sp_tape *t, int first, int last)
{
    for (int i = last; i >= first; i--) {
        sp_node *v = t->nodes[i];
        if (!has_params(v)) continue;
        sp_arena_mark mk = sp_arena_mark_get(&t->arena);
        v->kern->backward_params(v, &v->grad);
        sp_arena_release(&t->arena, mk);
    }
}

double sp_exec_stage_act_bytes(const sp_exec *x, int s, int b)
{
    int k = s * x->B + b;
    if (!x->dag) return sp_node_act_bytes(x->node[k]);
    return sp_tape_segment_act_bytes(&x->tapes[b], x->first[k], x->node[k]->index + 1);
}

/* Stage s's output of micro-batch b, shaped, on b's tape (a receive's buffer). */
sp_tensor sp_exec_stage_tensor(sp_exec *x, int s, int b)
{
    int shape[SP_MAX_DIMS];
    memcpy(shape, x->st[s].out_shape, sizeof shape);
    shape[0] = x->rows[b];
    return sp_tape_tensor(&x->tapes[b], x->st[s].out_ndim, shape);
}

/* A stage whose master copy lives elsewhere: its weights broadcast at the step's start. */
static void wait_weights(sp_exec *x, int s)
{
    stage_info *si = &x->st[s];
    if (si->sync == SYNC_OWNER && si->comm >= 0) sp_wait_all(si->wreq, si->nparams);
}

/* ∂l/∂y_s of micro-batch b, from the local tape, the loss, or the rank that made it. */
sp_tensor *sp_exec_ensure_dy(sp_exec *x, int s, int b)
{
    int k = s * x->B + b;
    if (x->have_dy[k]) return &x->dy[k];
    sp_tape *t = &x->tapes[b];
    if (s == x->S - 1) {
        sp_node *l = x->loss[b];
        if (!l) sp_comm_die(x->world, "internal: the loss of micro-batch %d is on another rank", b);
        sp_tensor seed = sp_tape_tensor(t, 1, (int[]){1});
        seed.data[0] = (float)x->rows[b] / (float)x->batch;   /* the micro-batch's share of the mean */
        x->dy[k] = sp_tape_tensor_like(t, &l->input->out);
        l->kern->backward_input(l, 0, &seed, &x->dy[k]);
    } else {
        int p = dy_producer(x, s, b);
        if (local(x, p)) sp_comm_die(x->world, "internal: job order: ∂l/∂y_%d of micro-batch %d not ready", s, b);
        x->dy[k] = sp_exec_stage_tensor(x, s, b);
        sp_req r;
        sp_irecv(x->world, x->dy[k].data, x->dy[k].numel, x->sched->compute[p], tag_of(x, 1, s, b), &r);
        sp_wait(&r);
    }
    x->have_dy[k] = true;
    return &x->dy[k];
}

/* Compute seconds of one job part (0 F, 1 δ, 2 G) of stage s; the first step warms up. */
static void measured(sp_exec *x, int s, int part, double seconds)
{
    if (x->steps == 0) return;
    x->meas[6 * s + part] += seconds;
    x->meas[6 * s + 3 + part] += 1;
}

/* The job hook's delay (sp_exec_set_job_hook): this job computes that much longer,
 * inside its measured time, as a cold first step would. */
static void injected_delay(sp_exec *x)
{
    if (x->delay_s <= 0) return;
    for (double t0 = sp_now(); sp_now() - t0 < x->delay_s;) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    x->delay_s = 0;
}

/* F(s, b): its input from the local tape or the rank that ran F(s−1, b); the loss rides
 * with the last stage. */
void sp_exec_run_forward(sp_exec *x, int job, sp_job j)
{
    int s = j.stage, b = j.micro;
    sp_tape *t = &x->tapes[b];
    sp_node *in;
    if (s == 0) {
        in = sp_tape_input(t, &x->xin[b]);
    } else if (x->node[(s - 1) * x->B + b]) {
        in = x->node[(s - 1) * x->B + b];
    } else {
        int p = job_of(x, s - 1, b, SP_FWD);
        sp_tensor a = sp_exec_stage_tensor(x, s - 1, b);
        sp_req r;
        sp_irecv(x->world, a.data, a.numel, x->sched->compute[p], tag_of(x, 0, s - 1, b), &r);
        sp_wait(&r);
        in = sp_tape_input(t, &a);
    }
    int bi = x->st[s].bucket;
    if (x->deferred && bi >= 0 && x->buckets[bi].outstanding) {   /* the previous step's update of this stage */
        sp_comm_set_label("the previous step's gradient allreduce");
        sp_exec_finish_bucket(x, bi, true);
        sp_exec_label_job(x, job, x->steps);
    }
    wait_weights(x, s);
    double t0 = sp_now(), r0 = sp_exec_buffers_reduce_s(x);
    injected_delay(x);
    if (x->dag) x->first[s * x->B + b] = t->n;
    sp_node *n = x->node[s * x->B + b] = sp_exec_stage_forward(x, s, t, in);
    if (s == x->S - 1) x->loss[b] = sp_apply_loss(t, x->m->loss, n, x->yin[b]);
    double dt = sp_now() - t0 - (sp_exec_buffers_reduce_s(x) - r0);   /* --sync-bn's allgathers: messages */
    sp_exec_mem_forward(x, s, b, n);
    x->fwd_s += dt;
    measured(x, s, 0, dt);
    send_to_succs(x, job, &n->out, tag_of(x, 0, s, b), false);
}

/* B, δ or G (s, b) of a stage of a DAG (the module comment): the first of its backward
 * jobs walks the stage's nodes (B: with their gradients), G then makes the gradients
 * from the δ the walk left; δ and B send the δ of the stage's input on. */
static void dag_backward(sp_exec *x, int job, sp_job j, const sp_tensor *dy, double t0, double r0)
{
    int s = j.stage, b = j.micro, k = s * x->B + b;
    sp_tape *t = &x->tapes[b];
    int first = x->first[k], last = x->node[k]->index;
    double tg = 0;
    if (!x->walked[k]) {
        sp_tensor *dx = NULL;
        if (s > 0) {   /* in the layout of the stage's input (blocked where it stayed on this rank) */
            const sp_node *in = x->node[k - x->B];
            x->dy[k - x->B] = in ? sp_tape_tensor_like(t, &in->out) : sp_exec_stage_tensor(x, s - 1, b);
            dx = &x->dy[k - x->B];
        }
        sp_exec_stage_walk(t, first, last, dy, dx, j.dir == SP_BWD, true, &tg);
        if (dx) x->have_dy[k - x->B] = true;
        x->walked[k] = true;
    }
    if (j.dir == SP_BWD_GRAD) sp_exec_stage_grads(t, first, last);
    double t2 = sp_now() - (sp_exec_buffers_reduce_s(x) - r0);   /* --sync-bn's allgathers: messages */
    x->bwd_s += t2 - t0;
    if (j.dir == SP_BWD) {
        measured(x, s, 2, tg);
        measured(x, s, 1, t2 - t0 - tg);
    } else {
        measured(x, s, j.dir == SP_BWD_GRAD ? 2 : 1, t2 - t0);
    }
    if (j.dir != SP_BWD_GRAD && s > 0) send_to_succs(x, job, &x->dy[k - x->B], tag_of(x, 1, s - 1, b), true);
    if (j.dir != SP_BWD_DELTA) sp_exec_grad_done(x, s);
    sp_exec_mem_backward(x, s, b);
}

/* B, δ or G (s, b): δ writes ∂l/∂y_{s−1} (sent on where another rank reads it), B and
 * G accumulate the stage's gradients (its bucket starts when the last one is done). */
void sp_exec_run_backward(sp_exec *x, int job, sp_job j)
{
    int s = j.stage, b = j.micro;
    sp_node *n = x->node[s * x->B + b];
    if (!n) sp_comm_die(x->world, "internal: backward of stage %d, micro-batch %d without its forward here", s, b);
    sp_tensor *dy = sp_exec_ensure_dy(x, s, b);
    wait_weights(x, s);
    double t0 = sp_now(), r0 = sp_exec_buffers_reduce_s(x);
    injected_delay(x);
    if (x->dag) {
        dag_backward(x, job, j, dy, t0, r0);
        return;
    }
    bool params = j.dir != SP_BWD_DELTA && n->kern->backward_params && n->layer->nparams > 0;
    bool delta = j.dir != SP_BWD_GRAD && s > 0;
    int k = (s - 1) * x->B + b;
    if (delta) x->dy[k] = sp_tape_tensor_like(&x->tapes[b], &n->input->out);
    double t1;
    if (params && delta && n->kern->backward_input_params) {   /* one call, as the linear engine */
        double f0 = sp_now();
        n->kern->backward_input_params(n, dy, &x->dy[k], false);
        t1 = f0 + (sp_now() - f0) * grad_share(n);
    } else {
        if (params) n->kern->backward_params(n, dy);
        t1 = sp_now();
        if (delta) n->kern->backward_input(n, 0, dy, &x->dy[k]);
    }
    if (delta) x->have_dy[k] = true;
    double t2 = sp_now() - (sp_exec_buffers_reduce_s(x) - r0);   /* --sync-bn's allgathers: messages */
    x->bwd_s += t2 - t0;
    if (j.dir != SP_BWD_DELTA) measured(x, s, 2, t1 - t0);
    if (j.dir != SP_BWD_GRAD) measured(x, s, 1, t2 - t1);
    if (delta) send_to_succs(x, job, &x->dy[k], tag_of(x, 1, s - 1, b), true);
    if (j.dir != SP_BWD_DELTA) sp_exec_grad_done(x, s);
    sp_exec_mem_backward(x, s, b);
}
