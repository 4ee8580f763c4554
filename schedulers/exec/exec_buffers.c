/* exec_buffers.c — a model's buffers (batch norm's running statistics) under the
 * executor, and synchronized batch norm (docs/DISTRIBUTED.md, "Batch norm").
 *
 * Statistics. A batch-norm forward normalises with the statistics of the batch it is
 * given: under the executor that is one micro-batch on its tape. The data-parallel
 * schemes (ddp, fsdp, ddp-ooo) give each rank its own micro-batch(es): "per-rank"; the
 * pipelines give each stage one micro-batch at a time: "per-micro-batch" (GPipe,
 * torchgpipe). --sync-bn (data parallel only) installs a reduce on every batch-norm layer
 * (layers/layers.h): the mean and variance over the global batch, PyTorch's
 * SyncBatchNorm, "synchronized".
 *
 * Running statistics. A stage's forwards update its layers' buffers once per micro-batch,
 * on the rank that runs them; setup refuses a schedule whose forwards of a stage with
 * buffers do not run in micro-batch order on a rank. The owner of a layer's buffers is
 * the lowest rank that runs its forward. A layer whose forward runs on several ranks
 * (data parallel, lpp's groups) gets its owner's buffers at the start of every step —
 * PyTorch DDP's broadcast_buffers=True (rank 0's buffers before each forward). The
 * final weights, a checkpoint and an evaluation take every buffer from its owner, as
 * sp_exec_sync_weights does the parameters.
 *
 * The reduce sums doubles with the float collectives of core/comm: each double travels
 * as two floats (its float rounding and the remainder's), gathered from every rank and
 * added in rank order in double — the same sum, bit for bit, on every rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/threads.h"
#include "layers/layers.h"
#include "schedulers/exec/exec_internal.h"

/* The reduce's context on one batch-norm layer: the stage it runs in (its messages). */
struct bn_ctx {
    sp_exec *x;
    int stage;
};

struct exec_buffers {
    int nl;              /* layers with buffers                                     */
    int *layer;          /* [nl]: their indices in the model                         */
    int *owner;          /* [nl]: the lowest rank that runs the layer's forward      */
    bool *replicated;    /* [nl]: its forward runs on more than one rank             */
    bool sync;           /* --sync-bn: the reduce is installed                       */
    sp_comm *comm;       /* sync: a communicator of its own (no ordering with others) */
    float *send, *recv;  /* sync: the reduce's buffers, grown as needed              */
    size_t cap;
    float *kept;         /* the buffers before the costs were measured              */
    double reduce_s;     /* seconds in the reduce                                   */
    long reduces;
    struct bn_ctx *ctx;  /* sync: [model layers]                                     */
    sp_sim_buffers *sim; /* the simulator's view of these messages (sp_exec_buffers_sim) */
};

/* The executor's stage that applies model layer li: the segment whose layers
 * [layer0, layer0 + nlayers) hold it (a chain's stage s is its layer s). */
static int stage_of_layer(const sp_exec *x, int li)
{
    for (int s = 0; s < x->S; s++)
        if (li >= x->st[s].layer0 && li < x->st[s].layer0 + x->st[s].nlayers) return s;
    return -1;
}

static bool is_data_scheme(const sp_exec *x) { return is_data(x->cfg.scheme); }

const char *sp_exec_buffers_refusal(const sp_exec *x, char *buf, size_t len)
{
    if (x->cfg.sync_bn && !is_data_scheme(x)) {
        snprintf(buf, len, "--sync-bn: synchronized batch norm is for the data-parallel schemes (ddp, fsdp, ddp-ooo); "
                           "%s normalises each micro-batch on its own", x->cfg.scheme);
        return buf;
    }
    if (x->cfg.sync_bn && x->m->nbuffers == 0) {
        snprintf(buf, len, "--sync-bn: model %s has no batch norm", x->m->name);
        return buf;
    }
    if (x->m->nbuffers == 0) return NULL;
    if (is_scan(x->cfg.scheme)) {
        snprintf(buf, len, "%s has buffers (batch norm): the scan across ranks needs a per-sample Jacobian, which "
                           "batch norm in training mode has not", x->m->name);
        return buf;
    }
    if (x->cfg.sync_bn && x->B != x->W) {
        snprintf(buf, len, "--sync-bn with %d micro-batches for %d ranks (the statistics are over the ranks' "
                           "micro-batches at once: expected --microbatches %d)", x->B, x->W, x->W);
        return buf;
    }
    return NULL;
}

/* The reduce installed on batch-norm layers: v summed over the ranks in place. */
static void reduce_doubles(void *ctx, double *v, int n)
{
    const struct bn_ctx *bc = ctx;
    sp_exec *x = bc->x;
    struct exec_buffers *B = x->bufs;
    size_t need = 2 * (size_t)n;
    if (need * (size_t)x->W > B->cap) {
        B->cap = need * (size_t)x->W;
        B->send = sp_xrealloc(B->send, sizeof(float) * need);
        B->recv = sp_xrealloc(B->recv, sizeof(float) * B->cap);
    }
    for (int i = 0; i < n; i++) {
        float hi = (float)v[i];
        B->send[2 * i] = hi;
        B->send[2 * i + 1] = (float)(v[i] - (double)hi);
    }
    double t0 = sp_now();
    sp_exec_log_msg(x, -1, SP_MSG_SYNC_BN, bc->stage, sizeof(float) * (double)need);
    sp_comm_set_label("synchronized batch norm");
    sp_allgather(B->comm, B->send, B->recv, need);
    for (int i = 0; i < n; i++) {
        double s = 0;
        for (int r = 0; r < x->W; r++) {
            const float *p = B->recv + (size_t)r * need + 2 * (size_t)i;
            s += (double)p[0] + (double)p[1];
        }
        v[i] = s;
    }
    B->reduce_s += sp_now() - t0;
    B->reduces++;
}

/* Every buffer of m copied to or from buf (to: pack). */
static void copy_buffers(const sp_model *m, float *buf, bool pack)
{
    for (int i = 0; i < m->nbuffers; i++) {
        sp_tensor *v = &m->buffers[i]->value;
        if (pack) memcpy(buf, v->data, sizeof(float) * v->numel);
        else memcpy(v->data, buf, sizeof(float) * v->numel);
        buf += v->numel;
    }
}

void sp_exec_buffers_keep(sp_exec *x)
{
    struct exec_buffers *B = x->bufs = sp_xcalloc(1, sizeof *x->bufs);
    size_t n = 0;
    for (int i = 0; i < x->m->nbuffers; i++) n += x->m->buffers[i]->value.numel;
    B->kept = sp_xmalloc(sizeof(float) * (n + 1));
    copy_buffers(x->m, B->kept, true);
}

/* The floats of layer li's buffers. */
static size_t layer_buffer_floats(const sp_layer *l)
{
    size_t n = 0;
    for (int b = 0; b < l->nbuffers; b++) n += l->buffers[b]->value.numel;
    return n;
}

/* The layers with buffers of m (layer li in stage stage_of[li]) as the simulator reads
 * them (sp_sim_bn_layer): the bytes of its buffers (one broadcast of broadcast_buffers
 * packs them) and, with sync, the allgathers reduce_doubles makes — F: 2C + 1 doubles per
 * batch-norm layer; the walk back: 2C, except a layer reading the model's input (the
 * first layer: no δ is made for it). Each double travels as two floats. */
static sp_sim_buffers *model_buffers_sim(const sp_model *m, const int *stage_of, const sp_schedule *s, bool sync)
{
    sp_sim_bn_layer *l = sp_xcalloc((size_t)m->nlayers + 1, sizeof *l);
    int n = 0;
    for (int li = 0; li < m->nlayers; li++) {
        const sp_layer *ly = m->layers[li];
        if (ly->nbuffers == 0) continue;
        sp_sim_bn_layer *b = &l[n++];
        b->stage = stage_of[li];
        b->buffer_bytes = sizeof(float) * (double)layer_buffer_floats(ly);
        if (sync && sp_layer_is_batchnorm(ly)) {
            double C = (double)ly->buffers[0]->value.numel;
            b->sync_fwd_bytes = 2 * sizeof(float) * (2 * C + 1);
            b->sync_bwd_bytes = li > 0 ? 2 * sizeof(float) * 2 * C : 0;
        }
    }
    sp_sim_buffers *r = sp_sim_buffers_new(s, l, n, sync);
    free(l);
    return r;
}

/* B->sim: the broadcasts broadcast_buffers(x, true) makes (one per owner with replicated
 * layers) and, with --sync-bn, the allgathers reduce_doubles makes per stage. */
static void sim_setup(sp_exec *x)
{
    int *stage_of = sp_xcalloc((size_t)x->m->nlayers + 1, sizeof(int));
    for (int li = 0; li < x->m->nlayers; li++) stage_of[li] = stage_of_layer(x, li);
    x->bufs->sim = model_buffers_sim(x->m, stage_of, x->sched, x->bufs->sync);
    free(stage_of);
}

sp_sim_buffers *sp_model_buffers_sim(sp_model *m, int ndim, const int *shape, const sp_schedule *s, bool sync)
{
    if (!m) sp_fail("sp_model_buffers_sim: argument 'm' is NULL");
    if (!s) sp_fail("sp_model_buffers_sim: argument 's' is NULL");
    if (m->nbuffers == 0) return NULL;
    sp_tape t;
    sp_model_forward_shapes(m, &t, 1, ndim, shape);
    if (t.n != m->nlayers + 1)   /* node l + 1 is layer l (node 0: the input) */
        sp_fail("internal: model %s: %d layers but %d tape nodes", m->name, m->nlayers, t.n - 1);
    int *last = sp_xmalloc(sizeof(int) * (size_t)t.n), S = sp_tape_segments(&t, last);
    sp_tape_free(&t);
    if (S != s->stages)
        sp_fail("sp_model_buffers_sim: model %s has %d segments, the schedule %d stages", m->name, S, s->stages);
    int *stage_of = sp_xcalloc((size_t)m->nlayers + 1, sizeof(int));
    for (int li = 0, st = 0; li < m->nlayers; li++) {
        while (li + 1 > last[st]) st++;   /* layer li is node li + 1; segment st ends at node last[st] */
        stage_of[li] = st;
    }
    sp_sim_buffers *r = model_buffers_sim(m, stage_of, s, sync);
    free(stage_of);
    free(last);
    return r;
}

const sp_sim_buffers *sp_exec_buffers_sim(const sp_exec *x) { return x->bufs ? x->bufs->sim : NULL; }

double sp_exec_buffers_reduce_s(const sp_exec *x) { return x->bufs ? x->bufs->reduce_s : 0; }

void sp_exec_buffers_setup(sp_exec *x)
{
    if (!x->bufs) sp_exec_buffers_keep(x);
    struct exec_buffers *B = x->bufs;
    const sp_model *m = x->m;
    copy_buffers(m, B->kept, false);   /* the measured forwards moved the running statistics */
    free(B->kept);
    B->kept = NULL;
    B->layer = sp_xcalloc((size_t)m->nlayers + 1, sizeof(int));
    B->owner = sp_xcalloc((size_t)m->nlayers + 1, sizeof(int));
    B->replicated = sp_xcalloc((size_t)m->nlayers + 1, sizeof(bool));
    const sp_schedule *s = x->sched;
    for (int li = 0; li < m->nlayers; li++) {
        if (m->layers[li]->nbuffers == 0) continue;
        int st = stage_of_layer(x, li), k = B->nl++, nranks = 0;
        B->layer[k] = li;
        B->owner[k] = x->W;
        bool *runs = sp_xcalloc((size_t)x->W, sizeof(bool));
        for (int j = 0; j < s->njobs; j++)
            if (s->jobs[j].stage == st && s->jobs[j].dir == SP_FWD && !runs[s->compute[j]]) {
                runs[s->compute[j]] = true;
                nranks++;
                if (s->compute[j] < B->owner[k]) B->owner[k] = s->compute[j];
            }
        free(runs);
        B->replicated[k] = nranks > 1;
        /* the running statistics move once per micro-batch, in micro-batch order */
        for (int r = 0; r < x->W; r++) {
            int last = -1;
            for (int i = x->sim.order_off[r]; i < x->sim.order_off[r + 1]; i++) {
                sp_job jb = s->jobs[x->sim.order[i]];
                if (jb.stage != st || jb.dir != SP_FWD) continue;
                if (jb.micro < last)
                    sp_comm_fail_all(x->world, "--parallel %s: rank %d runs the forward of micro-batch %d of stage %d "
                                     "(%s, with buffers) after micro-batch %d; batch norm's running statistics "
                                     "need micro-batch order", x->cfg.scheme, r, jb.micro, st, m->layers[li]->name,
                                     last);
                last = jb.micro;
            }
        }
    }
    if (x->cfg.sync_bn) {
        B->sync = true;
        B->comm = sp_comm_split(x->world, 0, x->rank);
        B->ctx = sp_xcalloc((size_t)m->nlayers + 1, sizeof *B->ctx);
        for (int li = 0; li < m->nlayers; li++)
            if (sp_layer_is_batchnorm(m->layers[li])) {
                B->ctx[li] = (struct bn_ctx){x, stage_of_layer(x, li)};
                sp_batchnorm2d_set_reduce(m->layers[li], reduce_doubles, &B->ctx[li]);
            }
    }
    sim_setup(x);
}

/* Every buffer of the layers k with pick(k), from owner r, for each r with any: one
 * broadcast per owner, the buffers packed. */
static void broadcast_buffers(sp_exec *x, bool replicated_only)
{
    struct exec_buffers *B = x->bufs;
    const sp_model *m = x->m;
    for (int r = 0; r < x->W; r++) {
        size_t n = 0;
        for (int k = 0; k < B->nl; k++)
            if (B->owner[k] == r && (B->replicated[k] || !replicated_only))
                for (int b = 0; b < m->layers[B->layer[k]]->nbuffers; b++)
                    n += m->layers[B->layer[k]]->buffers[b]->value.numel;
        if (!n) continue;
        if (replicated_only)
            for (int k = 0; k < B->nl; k++)
                if (B->owner[k] == r && B->replicated[k]) {
                    sp_exec_log_msg(x, r, SP_MSG_BUFFERS, stage_of_layer(x, B->layer[k]), sizeof(float) * (double)n);
                    break;
                }
        float *buf = sp_xmalloc(sizeof(float) * n), *q = buf;
        for (int pass = 0; pass < 2; pass++) {   /* 0: pack, 1: unpack */
            q = buf;
            for (int k = 0; k < B->nl; k++) {
                if (B->owner[k] != r || !(B->replicated[k] || !replicated_only)) continue;
                const sp_layer *l = m->layers[B->layer[k]];
                for (int b = 0; b < l->nbuffers; b++) {
                    sp_tensor *v = &l->buffers[b]->value;
                    if (pass == 0) memcpy(q, v->data, sizeof(float) * v->numel);
                    else memcpy(v->data, q, sizeof(float) * v->numel);
                    q += v->numel;
                }
            }
            if (pass == 0) sp_broadcast(x->world, buf, n, r);
        }
        free(buf);
    }
}

void sp_exec_buffers_begin_step(sp_exec *x)
{
    if (!x->bufs || !x->bufs->nl) return;
    sp_comm_set_label("buffer broadcast (broadcast_buffers)");
    broadcast_buffers(x, true);
}

void sp_exec_buffers_sync(sp_exec *x)
{
    if (!x->bufs || !x->bufs->nl) return;
    sp_comm_set_label("buffer synchronisation");
    broadcast_buffers(x, false);
}

const char *sp_exec_batch_norm_of(const char *scheme, bool sync_bn)
{
    return sync_bn ? "synchronized" : is_data(scheme) ? "per-rank" : "per-micro-batch";
}

const char *sp_exec_batch_norm(const sp_exec *x)
{
    if (!x->bufs || !x->bufs->nl) return NULL;
    return sp_exec_batch_norm_of(x->cfg.scheme, x->bufs->sync);
}

void sp_exec_buffers_free(sp_exec *x)
{
    struct exec_buffers *B = x->bufs;
    if (!B) return;
    if (B->sync)
        for (int li = 0; li < x->m->nlayers; li++)
            if (sp_layer_is_batchnorm(x->m->layers[li])) sp_batchnorm2d_set_reduce(x->m->layers[li], NULL, NULL);
    if (B->comm) sp_comm_free(B->comm);
    free(B->layer);
    free(B->owner);
    free(B->replicated);
    free(B->send);
    free(B->recv);
    free(B->kept);
    free(B->ctx);
    sp_sim_buffers_free(B->sim);
    free(B);
    x->bufs = NULL;
}
