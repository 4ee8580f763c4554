/* sim_prog.c — a step given as a program per rank, simulated with its messages (sim_comm.h:
 * sp_prog). The cross-rank scan (--parallel scan) is no job schedule: its ranks exchange
 * factors, vectors and aggregates level by level (exec_bppsa.c, exec_bppsa_blelloch.c), and the
 * executor writes what each rank does as ops (sp_exec_scan_program).
 *
 * Each rank walks its ops in order with a clock t (its compute lane) and a communication
 * lane; the ranks are swept repeatedly, each advancing until an op must wait for another
 * rank (a message not sent yet, a collective not every rank has reached), as sim_comm.c
 * places jobs. A SEND occupies the sender's lane from max(t, lane) for the p2p time and
 * arrives at its end; a RECV takes the oldest unread message of its pair. A blocking
 * ALLREDUCE starts when every rank reached it and every lane is free, and holds each
 * rank until it ends; the NORM allgather likewise but without holding anyone (NORMWAIT
 * does). The LOSS is placed as sim_comm.c places it: from the last rank's issue, off
 * the lanes, and the step ends past it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "schedulers/sim/sim_comm.h"

void sp_prog_add(sp_prog *p, sp_prog_op op)
{
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 64;
        p->ops = sp_xrealloc(p->ops, sizeof *p->ops * (size_t)p->cap);
    }
    p->ops[p->n++] = op;
}

void sp_prog_free(sp_prog *p)
{
    free(p->ops);
    memset(p, 0, sizeof *p);
}

typedef struct psim {
    const sp_prog *p;
    const sp_sim_comm_cfg *cfg;
    int W;
    int **ops, *nops, *pos;       /* per rank: op indices in program order, the next one     */
    double *t, *lane, *send_end;  /* per rank                                                */
    /* messages in flight per (from, to): arrival times, a FIFO */
    double **arr;
    int *narr, *head, *cap;
    /* collectives (ALLREDUCE, NORM) in program order: per rank how many reached, and the
     * issue times and end of each instance */
    int *ncoll;                   /* [W]                                                     */
    double *issue;                /* [maxcoll · W]                                           */
    double *issue_pos;            /* [maxcoll · W]: the op's place in the rank's program      */
    double *coll_end;             /* [maxcoll]: −1 until placed                              */
    int maxcoll;
    double *loss_issue;           /* [W]: −1 until issued                                    */
    sp_sim_comm *out;
    double *msg_key;              /* per message: its op's place in the rank's program       */
    int cap_msg, cap_span;
} psim;

static void add_msg(psim *ps, int rank, const sp_prog_op *o, double key, double t0, double t1)
{
    sp_sim_comm *out = ps->out;
    if (out->nmsg == ps->cap_msg) {
        ps->cap_msg = ps->cap_msg ? 2 * ps->cap_msg : 64;
        out->msg = sp_xrealloc(out->msg, sizeof *out->msg * (size_t)ps->cap_msg);
        ps->msg_key = sp_xrealloc(ps->msg_key, sizeof *ps->msg_key * (size_t)ps->cap_msg);
    }
    ps->msg_key[out->nmsg] = key;
    out->msg[out->nmsg++] = (sp_sim_msg){rank, o->peer, o->kind, o->stage, o->bytes, t0, t1};
}

static void add_span(psim *ps, int rank, const char *name, double t0, double t1)
{
    sp_sim_comm *out = ps->out;
    if (out->nspan == ps->cap_span) {
        ps->cap_span = ps->cap_span ? 2 * ps->cap_span : 32;
        out->span = sp_xrealloc(out->span, sizeof *out->span * (size_t)ps->cap_span);
    }
    out->span[out->nspan++] = (struct sp_sim_span){rank, name, t0, t1};
}

static void push_arrival(psim *ps, int from, int to, double at)
{
    int k = from * ps->W + to;
    if (ps->narr[k] == ps->cap[k]) {
        ps->cap[k] = ps->cap[k] ? 2 * ps->cap[k] : 8;
        ps->arr[k] = sp_xrealloc(ps->arr[k], sizeof(double) * (size_t)ps->cap[k]);
    }
    ps->arr[k][ps->narr[k]++] = at;
}

/* The collective instance k, once every rank reached it: on every lane. */
static void place_collective(psim *ps, int k, const sp_prog_op *o)
{
    int W = ps->W;
    double t0 = 0;
    for (int r = 0; r < W; r++) t0 = fmax(t0, fmax(ps->issue[k * W + r], ps->lane[r]));
    sp_comm_op op = o->op == SP_OP_NORM ? SP_COMM_ALLGATHER : SP_COMM_ALLREDUCE;
    double t1 = t0 + (W > 1 ? sp_sim_msg_us(ps->cfg, op, o->bytes, NULL, W) : 0);
    for (int r = 0; r < W; r++) {
        ps->lane[r] = t1;
        if (W > 1) add_msg(ps, r, o, ps->issue_pos[k * W + r], t0, t1);
    }
    ps->coll_end[k] = t1;
}

/* Advance rank r while it can; returns whether it moved. */
static bool advance(psim *ps, int r)
{
    bool moved = false;
    int W = ps->W;
    while (ps->pos[r] < ps->nops[r]) {
        const sp_prog_op *o = &ps->p->ops[ps->ops[r][ps->pos[r]]];
        double *t = &ps->t[r];
        switch (o->op) {
        case SP_OP_COMPUTE:
        case SP_OP_OPT:
            if (o->job >= 0 && o->job < ps->out->njobs) ps->out->start[o->job] = *t;
            *t += o->us;
            if (o->job >= 0 && o->job < ps->out->njobs) ps->out->finish[o->job] = *t;
            if (o->op == SP_OP_OPT) ps->out->opt_us[r] += o->us;
            if (o->job < 0 && o->name && o->us > 0) add_span(ps, r, o->name, *t - o->us, *t);
            break;
        case SP_OP_SEND: {
            double t0 = fmax(*t, ps->lane[r]);
            double t1 = t0 + sp_sim_msg_us(ps->cfg, SP_COMM_P2P, o->bytes, (const int[]){r, o->peer}, 2);
            ps->lane[r] = t1;
            ps->send_end[r] = fmax(ps->send_end[r], t1);
            push_arrival(ps, r, o->peer, t1);
            add_msg(ps, r, o, ps->pos[r], t0, t1);
            break;
        }
        case SP_OP_RECV: {
            int k = o->peer * W + r;
            if (ps->head[k] >= ps->narr[k]) return moved;
            *t = fmax(*t, ps->arr[k][ps->head[k]++]);
            break;
        }
        case SP_OP_WAITSENDS: *t = fmax(*t, ps->send_end[r]); break;
        case SP_OP_LOSS:
            ps->loss_issue[r] = *t;
            if (W > 1) add_msg(ps, r, o, ps->pos[r], 0, 0);   /* start and end: set when the step ends */
            break;
        case SP_OP_ALLREDUCE:
        case SP_OP_NORM: {
            int k = ps->ncoll[r];
            if (ps->issue[k * W + r] < 0) {   /* reached now */
                ps->issue[k * W + r] = *t;
                ps->issue_pos[k * W + r] = ps->pos[r];
                bool all = true;
                for (int v = 0; v < W; v++) all &= ps->issue[k * W + v] >= 0;
                if (all) place_collective(ps, k, o);
            }
            if (o->op == SP_OP_ALLREDUCE) {   /* blocking */
                if (ps->coll_end[k] < 0) return moved;
                *t = fmax(*t, ps->coll_end[k]);
            }
            ps->ncoll[r]++;
            break;
        }
        case SP_OP_NORMWAIT: {
            int k = ps->ncoll[r] - 1;   /* the last NORM this rank issued */
            if (k < 0) sp_fail("simulate a program: rank %d waits for a norm it never issued", r);
            if (ps->coll_end[k] < 0) return moved;
            *t = fmax(*t, ps->coll_end[k]);
            break;
        }
        default: sp_fail("simulate a program: op %d", o->op);
        }
        ps->pos[r]++;
        moved = true;
    }
    return moved;
}

/* Messages per rank in program order (each keyed by its op's place in the rank's program). */
static void sort_messages(psim *ps)
{
    sp_sim_comm *out = ps->out;
    int n = out->nmsg;
    int *idx = sp_xmalloc(sizeof(int) * (size_t)(n + 1));
    for (int i = 0; i < n; i++) idx[i] = i;
    for (int i = 1; i < n; i++) {   /* insertion sort: stable, a step's messages are few */
        int v = idx[i], k = i;
        while (k > 0) {
            const sp_sim_msg *a = &out->msg[idx[k - 1]], *b = &out->msg[v];
            if (a->rank < b->rank || (a->rank == b->rank && ps->msg_key[idx[k - 1]] <= ps->msg_key[v])) break;
            idx[k] = idx[k - 1];
            k--;
        }
        idx[k] = v;
    }
    sp_sim_msg *m = sp_xmalloc(sizeof *m * (size_t)(n + 1));
    for (int i = 0; i < n; i++) m[i] = out->msg[idx[i]];
    free(out->msg);
    out->msg = m;
    free(idx);
}

void sp_simulate_prog(const sp_prog *p, const sp_sim_comm_cfg *cfg, sp_sim_comm *out)
{
    int W = p->workers;
    memset(out, 0, sizeof *out);
    out->njobs = p->njobs;
    out->workers = W;
    out->start = sp_xcalloc((size_t)p->njobs + 1, sizeof(double));
    out->finish = sp_xcalloc((size_t)p->njobs + 1, sizeof(double));
    out->comm_us = sp_xcalloc((size_t)W, sizeof(double));
    out->opt_us = sp_xcalloc((size_t)W, sizeof(double));
    out->messages = sp_xcalloc((size_t)W, sizeof(int));
    psim ps = {.p = p, .cfg = cfg, .W = W, .out = out};
    ps.ops = sp_xcalloc((size_t)W, sizeof *ps.ops);
    ps.nops = sp_xcalloc((size_t)W, sizeof(int));
    ps.pos = sp_xcalloc((size_t)W, sizeof(int));
    for (int i = 0; i < p->n; i++) {
        int r = p->ops[i].rank;
        if (r < 0 || r >= W) sp_fail("simulate a program: op %d on rank %d of %d", i, r, W);
        ps.nops[r]++;
    }
    int most = 0;
    for (int r = 0; r < W; r++) {
        ps.ops[r] = sp_xmalloc(sizeof(int) * (size_t)(ps.nops[r] + 1));
        most = ps.nops[r] > most ? ps.nops[r] : most;
        ps.nops[r] = 0;
    }
    for (int i = 0; i < p->n; i++) ps.ops[p->ops[i].rank][ps.nops[p->ops[i].rank]++] = i;
    ps.maxcoll = most + 1;
    ps.t = sp_xcalloc((size_t)W, sizeof(double));
    ps.lane = sp_xcalloc((size_t)W, sizeof(double));
    ps.send_end = sp_xcalloc((size_t)W, sizeof(double));
    ps.arr = sp_xcalloc((size_t)W * W, sizeof *ps.arr);
    ps.narr = sp_xcalloc((size_t)W * W, sizeof(int));
    ps.head = sp_xcalloc((size_t)W * W, sizeof(int));
    ps.cap = sp_xcalloc((size_t)W * W, sizeof(int));
    ps.ncoll = sp_xcalloc((size_t)W, sizeof(int));
    ps.issue = sp_xmalloc(sizeof(double) * (size_t)ps.maxcoll * W);
    ps.issue_pos = sp_xcalloc((size_t)ps.maxcoll * W, sizeof(double));
    ps.coll_end = sp_xmalloc(sizeof(double) * (size_t)ps.maxcoll);
    ps.loss_issue = sp_xmalloc(sizeof(double) * (size_t)W);
    for (int i = 0; i < ps.maxcoll * W; i++) ps.issue[i] = -1;
    for (int i = 0; i < ps.maxcoll; i++) ps.coll_end[i] = -1;
    for (int r = 0; r < W; r++) ps.loss_issue[r] = -1;
    for (;;) {
        bool moved = false, done = true;
        for (int r = 0; r < W; r++) moved |= advance(&ps, r);
        for (int r = 0; r < W; r++) done &= ps.pos[r] == ps.nops[r];
        if (done) break;
        if (!moved) sp_fail("simulate a program: the ranks wait on each other (a receive without its send, or a "
                            "collective some rank never reaches)");
    }
    /* the loss: from its last issue, off the lanes (sim_comm.c); the step ends past it */
    double loss_t0 = 0, T = 0;
    bool loss = false;
    for (int r = 0; r < W; r++) loss |= ps.loss_issue[r] >= 0, loss_t0 = fmax(loss_t0, ps.loss_issue[r]);
    double loss_t1 = loss_t0 + (!cfg->model && cfg->transfer > 0 ? 0 : sp_sim_msg_us(cfg, SP_COMM_ALLREDUCE, 4, NULL, W));
    for (int i = 0; i < out->nmsg; i++)
        if (out->msg[i].kind == SP_MSG_LOSS) out->msg[i].start = loss_t0, out->msg[i].end = loss_t1;
    for (int r = 0; r < W; r++) T = fmax(T, fmax(ps.t[r], loss && W > 1 ? loss_t1 : 0));
    out->latency = T;
    sort_messages(&ps);
    for (int i = 0; i < out->nmsg; i++) {
        out->messages[out->msg[i].rank]++;
        if (out->msg[i].kind != SP_MSG_LOSS) out->comm_us[out->msg[i].rank] += out->msg[i].end - out->msg[i].start;
    }
    out->transfer = cfg->model ? 0 : cfg->transfer;
    for (int r = 0; r < W; r++) free(ps.ops[r]);
    for (int k = 0; k < W * W; k++) free(ps.arr[k]);
    free(ps.ops), free(ps.nops), free(ps.pos), free(ps.t), free(ps.lane), free(ps.send_end);
    free(ps.arr), free(ps.narr), free(ps.head), free(ps.cap), free(ps.ncoll), free(ps.issue), free(ps.coll_end);
    free(ps.issue_pos);
    free(ps.loss_issue), free(ps.msg_key);
}
