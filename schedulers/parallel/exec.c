/* exec.c — runs the master schedule on MPI ranks (see exec.h for the contract).
 *
 * Setup (collective, identical on every rank): stage costs (measured on rank 0 and
 * broadcast, or read from a CSV), sp_schedule_new + sp_simulate, then from the job table
 * alone: which ranks compute each stage and which hold its weights → one communicator
 * per distinct set of ranks, gradient buckets, send lists. A step then walks
 * sim.order[rank] — nothing else decides what runs when. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/device.h"
#include "core/kernels/dense.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "core/tape.h"
#include "schedulers/parallel/exec.h"

enum { SYNC_NONE, SYNC_ALLREDUCE, SYNC_OWNER };

typedef struct stage_info {
    sp_layer *layer;
    int sync;                /* SYNC_*                                               */
    int comm;                /* index into x->comms, −1 when this rank is no member  */
    int owner;               /* SYNC_OWNER: world rank of the master copy            */
    int owner_in_comm;
    bool owns;               /* this rank steps the optimizer for the stage          */
    int bucket;              /* −1: no parameters or no sync                         */
    int grad_jobs;           /* local jobs per step that write its gradients (B or G) */
    int out_ndim, out_shape[SP_MAX_DIMS];   /* one sample's output                   */
    sp_req wreq[SP_MAX_PARAMS];
    size_t nfloats;          /* parameters                                           */
} stage_info;

typedef struct bucket {
    int *stages, nstages;
    int comm, sync, root;
    float *buf;
    size_t n;
    int pending;             /* gradient jobs still to run this step                 */
    bool started;
    sp_req req;
    double t_start, t_done;
    bool outstanding;        /* ddp: its sum is not yet applied (the next step's
                                forward of its first stage waits for it)         */
    long step;               /* the step whose gradients it carries              */
} bucket;

typedef struct trace_ev {
    int what;                /* job id, −1 − bucket (a collective in flight), or
                                WAIT_EV − bucket (this rank blocked on it)            */
    int step;
    double t0, t1;
} trace_ev;

#define TRACE_STEPS 10   /* the first steps of a run, in the trace */
#define WAIT_EV (-1000000)
#define WAIT_LOSS (-3000000)

struct sp_exec {
    sp_comm *world;
    int rank, W, S, B, batch;
    sp_model *m;
    sp_optim *opt;
    sp_exec_cfg cfg;
    sp_costs *costs;
    sp_schedule *sched;
    sp_sim sim;
    stage_info *st;
    sp_comm **comms;
    int ncomms;
    int *comm_min;           /* the lowest world rank of each communicator's set         */
    bucket *buckets;
    int nbuckets;
    int *next_bucket;        /* per comm: the next bucket to start (same order everywhere) */
    /* per step */
    sp_tape *tapes;          /* one per micro-batch                                  */
    sp_node **node;          /* [s·B + b]                                            */
    sp_node **loss;          /* [b]                                                  */
    sp_tensor *dy;           /* [s·B + b]: ∂l/∂y_s                                   */
    bool *have_dy;
    sp_tensor *xin;          /* [b]: the micro-batch's input rows                    */
    const int **yin;
    int *rows;               /* [b]: rows of micro-batch b                           */
    sp_req *sends;
    int nsends, cap_sends;
    bool *done;              /* [job]                                                */
    /* accounting */
    long steps;
    double busy, comm_s, wall, fwd_s, bwd_s;
    int *order_rec;          /* the first step's executed job ids                    */
    int norder;
    trace_ev *ev;
    int nev, cap_ev;
    double trace_t0;
    double *meas;            /* [6·S]: Σ F, δ, G compute seconds and their counts      */
    size_t in_numel;         /* one input sample                                       */
    /* --parallel scan over a recurrent first layer: its time steps split over the ranks */
    bool tscan;
    int T, H;                /* the recurrent layer's steps and hidden size            */
    /* ddp: a bucket's update is applied when the next step's forward first needs one of
     * its stages (cross-step overlap), with the learning rate of the step it belongs to */
    bool deferred;
    double pending_lr;
    /* The batch's loss: its allreduce starts as soon as the rank's last loss is computed
     * (it then overlaps the backward) and is waited for at the end of the step. */
    int loss_jobs, loss_left;    /* local F jobs of the last stage per step, still to run */
    float loss_buf;
    sp_req loss_req;
    bool loss_started;
    double loss_t0;
};

/* ---- small helpers ---------------------------------------------------------------------- */

static bool local(const sp_exec *x, int job) { return x->sched->compute[job] == x->rank; }
static int job_of(const sp_exec *x, int s, int b, sp_dir d) { return sp_schedule_find(x->sched, s, b, d); }
static bool is_bwd(sp_dir d) { return d != SP_FWD; }

/* The job that produces ∂l/∂y_s of micro-batch b (δ or whole B of stage s+1). */
static int dy_producer(const sp_exec *x, int s, int b)
{
    return job_of(x, s + 1, b, x->sched->split_backward ? SP_BWD_DELTA : SP_BWD);
}

static int tag_of(const sp_exec *x, int kind, int s, int b) { return (kind * x->S + s) * x->B + b; }

static void label_job(const sp_exec *x, int job, long step)
{
    char lab[32], buf[96];
    sp_job_label(x->sched, job, lab, sizeof lab);
    snprintf(buf, sizeof buf, "step %ld, job %s", step + 1, lab);
    sp_comm_set_label(buf);
}

static void trace_add_step(sp_exec *x, int what, long step, double t0, double t1)
{
    if (!x->cfg.trace_path || step >= TRACE_STEPS) return;
    if (x->nev == x->cap_ev) {
        x->cap_ev = x->cap_ev ? 2 * x->cap_ev : 256;
        x->ev = sp_xrealloc(x->ev, sizeof *x->ev * (size_t)x->cap_ev);
    }
    x->ev[x->nev++] = (trace_ev){what, (int)step, t0, t1};
}

static void trace_add(sp_exec *x, int what, double t0, double t1) { trace_add_step(x, what, x->steps, t0, t1); }

static sp_req *new_send(sp_exec *x)
{
    if (x->nsends == x->cap_sends) {
        /* Only between steps can the array move (requests hold no pointer into it). */
        x->cap_sends = x->cap_sends ? 2 * x->cap_sends : 64;
        x->sends = sp_xrealloc(x->sends, sizeof *x->sends * (size_t)x->cap_sends);
    }
    return &x->sends[x->nsends++];
}

/* ---- setup: costs ------------------------------------------------------------------------ */

/* Per-layer F, δ, G times on one micro-batch, measured on this process (min of 3). */
static sp_costs *measure_costs(sp_exec *x, int ndim, const int *shape, int rows)
{
    sp_costs *c = sp_costs_uniform(x->S, 0, 0, 0);
    int full[SP_MAX_DIMS + 1] = {rows};
    for (int i = 0; i < ndim; i++) full[i + 1] = shape[i];
    sp_tensor in = sp_tensor_new(ndim + 1, full);
    sp_rng r;
    sp_rng_seed(&r, 7);
    for (size_t i = 0; i < in.numel; i++) in.data[i] = sp_rng_uniform(&r) * 2.0f - 1.0f;
    int *labels = sp_xcalloc((size_t)rows, sizeof *labels);
    sp_tape t;
    sp_tape_init(&t);
    for (int s = 0; s < x->S; s++) c->fwd[s] = c->delta[s] = c->grad[s] = INFINITY;
    for (int rep = 0; rep < 3; rep++) {
        sp_tape_reset(&t);
        sp_node *h = sp_tape_input(&t, &in);
        sp_node **nodes = sp_tape_alloc(&t, sizeof *nodes * (size_t)x->S);
        for (int s = 0; s < x->S; s++) {
            double t0 = sp_now();
            h = nodes[s] = sp_apply(&t, x->m->layers[s], h);
            double dt = sp_now() - t0;
            if (dt < c->fwd[s]) c->fwd[s] = dt;
        }
        sp_node *l = sp_apply_loss(&t, x->m->loss, h, labels);
        sp_tensor seed = sp_tape_tensor(&t, 1, (int[]){1});
        seed.data[0] = 1.0f;
        sp_tensor dy = sp_tape_tensor_like(&t, &h->out);
        l->op->backward_input(l, 0, &seed, &dy);
        for (int s = x->S - 1; s >= 0; s--) {
            sp_node *n = nodes[s];
            double t0 = sp_now();
            if (n->op->backward_params && n->layer->nparams > 0) n->op->backward_params(n, &dy);
            double t1 = sp_now();
            sp_tensor dx = sp_tape_tensor_like(&t, &n->input->out);
            if (s > 0) n->op->backward_input(n, 0, &dy, &dx);
            double t2 = sp_now();
            if (t1 - t0 < c->grad[s]) c->grad[s] = t1 - t0;
            if (s > 0 && t2 - t1 < c->delta[s]) c->delta[s] = t2 - t1;
            dy = dx;
        }
    }
    for (int s = 0; s < x->S; s++) {
        if (!isfinite(c->delta[s])) c->delta[s] = 0;
        c->fwd[s] *= 1e6, c->delta[s] *= 1e6, c->grad[s] *= 1e6;   /* µs */
    }
    snprintf(c->unit, sizeof c->unit, "us");
    sp_model_zero_grad(x->m);
    sp_tape_free(&t);
    free(labels);
    sp_tensor_free(&in);
    return c;
}

/* One sample's output shape per layer, from a shape-only pass. */
static void infer_shapes(sp_exec *x, int ndim, const int *shape)
{
    sp_tape t;
    sp_tape_init(&t);
    t.shape_only = true;
    int full[SP_MAX_DIMS] = {1};
    for (int i = 0; i < ndim; i++) full[i + 1] = shape[i];
    sp_tensor in = sp_tensor_view(NULL, ndim + 1, full);
    sp_node *h = sp_tape_input(&t, &in);
    for (int s = 0; s < x->S; s++) {
        h = sp_apply(&t, x->m->layers[s], h);
        stage_info *si = &x->st[s];
        si->out_ndim = h->out.ndim;
        memcpy(si->out_shape, h->out.shape, sizeof si->out_shape);
        si->out_shape[0] = 1;
    }
    sp_tape_free(&t);
}

static double round6(double v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%.6g", v);
    return strtod(buf, NULL);
}

static void setup_costs(sp_exec *x, int ndim, const int *shape)
{
    int rows = x->batch / x->B;
    if (x->cfg.costs_in) {
        x->costs = sp_costs_read_csv(x->cfg.costs_in);
        if (x->costs->stages != x->S)
            sp_comm_fail_all(x->world, "--costs %s: %d stages, the model has %d layers", x->cfg.costs_in,
                             x->costs->stages, x->S);
    } else {
        x->costs = sp_costs_uniform(x->S, 0, 0, 0);
        float *v = sp_xcalloc((size_t)x->S * 3, sizeof *v);
        if (x->rank == 0) {
            sp_costs *mc = measure_costs(x, ndim, shape, rows);
            for (int s = 0; s < x->S; s++) {
                v[3 * s] = (float)mc->fwd[s], v[3 * s + 1] = (float)mc->delta[s], v[3 * s + 2] = (float)mc->grad[s];
            }
            sp_costs_free(mc);
        }
        sp_broadcast(x->world, v, (size_t)x->S * 3, 0);   /* every rank plans with rank 0's numbers */
        for (int s = 0; s < x->S; s++)
            x->costs->fwd[s] = v[3 * s], x->costs->delta[s] = v[3 * s + 1], x->costs->grad[s] = v[3 * s + 2];
        snprintf(x->costs->unit, sizeof x->costs->unit, "us");
        free(v);
    }
    /* Plan with exactly the numbers --costs-out writes (%.6g), so that build/schedule
     * --profile on that file simulates the very schedule this run executes. */
    for (int s = 0; s < x->S; s++) {
        x->costs->fwd[s] = round6(x->costs->fwd[s]);
        x->costs->delta[s] = round6(x->costs->delta[s]);
        x->costs->grad[s] = round6(x->costs->grad[s]);
    }
    for (int s = 0; s < x->S; s++) {
        char label[SP_NAME_LEN + 16];
        snprintf(x->costs->name[s], SP_STAGE_NAME, "%.31s", sp_model_layer_label(x->m, s, label, sizeof label));
        size_t act = 1;
        for (int i = 1; i < x->st[s].out_ndim; i++) act *= (size_t)x->st[s].out_shape[i];
        x->costs->act_bytes[s] = (double)act * rows * sizeof(float);
        x->costs->param_bytes[s] = (double)x->st[s].nfloats * sizeof(float);
    }
}

/* ---- setup: the schedule and its refusals ------------------------------------------------- */

static bool is_scan(const char *name) { return !strcmp(name, "scan"); }
typedef struct seg {
    int a, b;            /* layers (−1: none)                              */
    int in, out;         /* per-sample sizes of the segment's input/output */
} seg;
static seg segment_of(const sp_exec *x, int r);
static void check_scan(sp_exec *x);
static bool is_pipeline(const char *name)
{
    return !strcmp(name, "gpipe") || !strcmp(name, "1f1b") || !strcmp(name, "ooo-ff") || !strcmp(name, "ooo-modulo") ||
           is_scan(name);
}
static bool is_looped(const char *name) { return !strcmp(name, "lpp") || !strcmp(name, "fslpp"); }
static bool is_data(const char *name) { return !strcmp(name, "ddp") || !strcmp(name, "fsdp"); }

/* Every rank checks the same things and refuses alike, before any work. */
static void check_config(sp_exec *x)
{
    const char *name = x->cfg.scheme;
    sp_comm *w = x->world;
    if (!is_pipeline(name) && !is_looped(name) && !is_data(name))
        sp_comm_fail_all(w, "--parallel %s: unknown scheme (expected ddp | fsdp | gpipe | 1f1b | lpp | fslpp | "
                            "ooo-ff | ooo-modulo | scan)", name);
    if (!sp_model_is_chain(x->m))   /* the stages apply layers one after another */
        sp_comm_fail_all(w, "--parallel %s: model %s has residual or dense connections; the parallel executor "
                            "runs chains of layers", name, x->m->name);
    if (x->cfg.ooo && strcmp(name, "ddp") != 0)
        sp_comm_fail_all(w, "--parallel %s --backward ooo: ooo's data-parallel order is for ddp (the pipelines "
                            "have ooo-ff and ooo-modulo)", name);
    if (is_scan(name)) {
        if (x->B != 1) sp_comm_fail_all(w, "--parallel scan: --microbatches %d (the scan runs the whole batch: 1)", x->B);
        /* A recurrent first layer: the scan runs over its time steps (exec.c, BPPSA across
         * ranks); otherwise over the layers, each of which needs a per-sample Jᵀ. */
        const sp_opdef *op0 = x->S > 0 ? x->m->layers[0]->op : NULL;
        x->tscan = op0 && op0->chain_len && op0->chain_jt && op0->chain_backward_params;
        for (int s = x->tscan ? 1 : 0; s < x->S; s++) {
            const sp_opdef *op = x->m->layers[s]->op;
            if (op->chain_len)
                sp_comm_fail_all(w, "--parallel scan: layer %d (%s) is recurrent; the scan runs over the time steps "
                                    "of a recurrent FIRST layer only", s, op->name);
            if (!x->tscan && !op->jt_pattern)
                sp_comm_fail_all(w, "--parallel scan: layer %d (%s) has no per-sample transposed Jacobian to scan",
                                 s, op->name);
        }
    }
    if (!sp_model_is_chain(x->m))
        sp_comm_fail_all(w, "--parallel %s: %s is not a chain of layers (the executor's stages are a chain's layers)",
                         name, x->m->name);
    if (x->m->nbuffers > 0)
        sp_comm_fail_all(w, "--parallel %s: %s has buffers (batch norm statistics would be per micro-batch and "
                            "per rank; not supported)", name, x->m->name);
    if (x->B < 1) sp_comm_fail_all(w, "--microbatches %d: expected >= 1", x->B);
    if (x->batch % x->B != 0)
        sp_comm_fail_all(w, "--parallel %s: --batch %d does not split into %d micro-batches (expected a multiple)",
                         name, x->batch, x->B);
    if (is_data(name) && x->B < x->W)
        sp_comm_fail_all(w, "--parallel %s: %d micro-batches for %d workers (each rank needs one: expected "
                            "--microbatches >= %d)", name, x->B, x->W, x->W);
    if (is_pipeline(name) && !x->tscan && x->W > x->S)
        sp_comm_fail_all(w, "--parallel %s: %d workers for %d stages (a pipeline needs workers <= stages, the "
                            "model's %d layers)", name, x->W, x->S, x->S);
    if (is_looped(name)) {
        int G = x->cfg.groups > 0 ? x->cfg.groups : 1;
        if (x->W % G != 0)
            sp_comm_fail_all(w, "--parallel %s: %d workers but --groups %d (expected W = G*R, W a multiple of G)",
                             name, x->W, G);
        int R = x->W / G;
        if (R > x->S)
            sp_comm_fail_all(w, "--parallel %s: %d workers per group for %d stages (expected R <= S)", name, R, x->S);
        if (x->B < G)
            sp_comm_fail_all(w, "--parallel %s: %d micro-batches for %d groups (expected --microbatches >= %d)",
                             name, x->B, G, G);
    }
    if (x->cfg.partition && strcmp(x->cfg.partition, "cost") && strcmp(x->cfg.partition, "layerpipe"))
        sp_comm_fail_all(w, "--partition %s: expected cost | layerpipe", x->cfg.partition);
}

static void build_schedule(sp_exec *x)
{
    const char *name = x->cfg.scheme;
    /* A time scan has no pipeline: every rank runs the whole (short) forward, so the
     * schedule is that of one worker (the step does not walk it). */
    sp_sched_config sc = {.stages = x->S, .micro = x->B, .workers = x->tscan ? 1 : x->W, .split = -1,
                          .no_input_grad = true};
    if (x->cfg.ooo) {   /* ddp --backward ooo: reverse first-k over the first k parameterised layers */
        int params = 0, k = x->cfg.k;
        for (int s = 0; s < x->S; s++) params += x->st[s].nfloats > 0;
        if (k <= 0) k = params / 2 > 0 ? params / 2 : 1;
        if (k > params) sp_comm_fail_all(x->world, "--k %d: the model has %d parameterised layers", k, params);
        for (int s = 0, seen = 0; s < x->S && seen < k; s++)
            if (x->st[s].nfloats > 0 && ++seen == k) sc.first_k = s + 1;
        name = "ddp-ooo";
    }
    if (is_looped(name)) {
        sc.groups = x->cfg.groups > 0 ? x->cfg.groups : 1;
        sc.per_group = x->W / sc.groups;
    }
    int *placement = NULL;
    if (x->cfg.partition && !strcmp(x->cfg.partition, "layerpipe") && is_pipeline(name)) {
        /* LayerPipe's Algorithm 1 assigns whole layers to processors in order, balancing
         * with the δ it could move; here each layer's δ stays with its owner. */
        sp_layerpipe lp;
        sp_layerpipe_partition(x->costs, x->W, 1.01, &lp);
        placement = sp_xmalloc(sizeof(int) * (size_t)x->S);
        memcpy(placement, lp.owner, sizeof(int) * (size_t)x->S);
        sp_layerpipe_free(&lp);
        sc.placement = placement;
    }
    /* scan: the forward is GPipe's with one micro-batch on the same contiguous segments */
    x->sched = sp_schedule_new(sp_scheme_find(is_scan(name) ? "gpipe" : name), &sc, x->costs);
    free(placement);
    sp_simulate(x->sched, x->costs, &x->sim);
}

/* ---- setup: who holds which weights ------------------------------------------------------- */

static int find_or_add_set(sp_exec *x, char **sets, int *nsets, const char *member)
{
    for (int i = 0; i < *nsets; i++)
        if (!memcmp(sets[i], member, (size_t)x->W)) return i;
    sets[*nsets] = sp_xmalloc((size_t)x->W);
    memcpy(sets[*nsets], member, (size_t)x->W);
    return (*nsets)++;
}

static void setup_weights(sp_exec *x)
{
    const sp_schedule *s = x->sched;
    char **sets = sp_xcalloc((size_t)x->S, sizeof *sets);
    int nsets = 0;
    int *set_of = sp_xmalloc(sizeof(int) * (size_t)x->S);
    char *compute = sp_xmalloc((size_t)x->W), *weights = sp_xmalloc((size_t)x->W);
    for (int st = 0; st < x->S; st++) {
        stage_info *si = &x->st[st];
        memset(compute, 0, (size_t)x->W);
        memset(weights, 0, (size_t)x->W);
        for (int j = 0; j < s->njobs; j++) {
            if (s->jobs[j].stage != st) continue;
            compute[s->compute[j]] = 1;
            weights[s->weights[j]] = 1;
            if (local(x, j) && (s->jobs[j].dir == SP_BWD || s->jobs[j].dir == SP_BWD_GRAD)) si->grad_jobs++;
        }
        int nc = 0, nw = 0, owner = -1;
        for (int r = 0; r < x->W; r++) nc += compute[r], nw += weights[r], owner = weights[r] && owner < 0 ? r : owner;
        set_of[st] = -1;
        si->comm = -1;
        si->bucket = -1;
        if (si->nfloats == 0) continue;
        if (!memcmp(compute, weights, (size_t)x->W)) {
            si->sync = nc > 1 ? SYNC_ALLREDUCE : SYNC_NONE;
            si->owns = compute[x->rank];
            if (si->sync == SYNC_ALLREDUCE) set_of[st] = find_or_add_set(x, sets, &nsets, compute);
        } else if (nw == 1) {
            si->sync = SYNC_OWNER;
            si->owner = owner;
            si->owns = x->rank == owner;
            compute[owner] = 1;
            set_of[st] = find_or_add_set(x, sets, &nsets, compute);
            int k = 0;
            for (int r = 0; r < owner; r++) k += compute[r];
            si->owner_in_comm = k;
        } else {
            sp_comm_fail_all(x->world, "--parallel %s: stage %d is computed on %d ranks with weights on %d others "
                             "(the executor supports replicas or one owner)", x->cfg.scheme, st, nc, nw);
        }
    }
    /* One communicator per distinct set (collective on the world, in set order). */
    x->ncomms = nsets;
    x->comms = sp_xcalloc((size_t)(nsets ? nsets : 1), sizeof *x->comms);
    x->comm_min = sp_xcalloc((size_t)(nsets ? nsets : 1), sizeof(int));
    for (int i = 0; i < nsets; i++) {
        x->comms[i] = sp_comm_split(x->world, sets[i][x->rank] ? 0 : -1, x->rank);
        while (!sets[i][x->comm_min[i]]) x->comm_min[i]++;
    }
    for (int st = 0; st < x->S; st++)
        if (set_of[st] >= 0 && sets[set_of[st]][x->rank]) x->st[st].comm = set_of[st];
    for (int i = 0; i < nsets; i++) free(sets[i]);
    free(sets);
    free(set_of);
    free(compute);
    free(weights);
}

/* When the stage's gradients are complete in the simulation, on the lowest rank of its
 * communicator — the same number on every rank, so every member orders alike. */
static double grads_ready_at(const sp_exec *x, int st)
{
    int w = x->comm_min[x->st[st].comm];
    double t = -1;
    for (int j = 0; j < x->sched->njobs; j++) {
        sp_job jb = x->sched->jobs[j];
        if (jb.stage == st && x->sched->compute[j] == w && (jb.dir == SP_BWD || jb.dir == SP_BWD_GRAD))
            t = x->sim.finish[j] > t ? x->sim.finish[j] : t;
    }
    return t < 0 ? 1e300 : t;   /* an owner that computes none of it: last */
}

static const sp_exec *g_sort_exec;
static int by_ready(const void *pa, const void *pb)
{
    int a = *(const int *)pa, b = *(const int *)pb;
    double ta = grads_ready_at(g_sort_exec, a), tb = grads_ready_at(g_sort_exec, b);
    if (ta != tb) return ta < tb ? -1 : 1;
    return b - a;   /* ties: the higher stage first (backward order) */
}

/* Buckets: stages in the order their gradients complete in the schedule (backward
 * order S−1 … 0 for the conventional schemes; ooo's order for ddp-ooo), consecutive
 * stages of the same communicator and kind packed until --bucket-mb; the rank's own
 * stages only. */
static void setup_buckets(sp_exec *x)
{
    double cap = x->cfg.bucket_mb > 0 ? x->cfg.bucket_mb * 1024 * 1024 / sizeof(float) : 0;
    x->buckets = sp_xcalloc((size_t)x->S, sizeof *x->buckets);
    x->nbuckets = 0;
    bucket *cur = NULL;
    int *order = sp_xmalloc(sizeof(int) * (size_t)x->S), n = 0;
    for (int st = x->S - 1; st >= 0; st--)
        if (x->st[st].comm >= 0 && x->st[st].sync != SYNC_NONE) order[n++] = st;
    g_sort_exec = x;
    qsort(order, (size_t)n, sizeof *order, by_ready);
    for (int i = 0; i < n; i++) {
        int st = order[i];
        stage_info *si = &x->st[st];
        if (si->comm < 0 || si->sync == SYNC_NONE) continue;
        bool join = cur && cur->comm == si->comm && cur->sync == si->sync && si->sync == SYNC_ALLREDUCE &&
                    (double)(cur->n + si->nfloats) <= cap;
        if (!join) {
            cur = &x->buckets[x->nbuckets++];
            cur->stages = sp_xmalloc(sizeof(int) * (size_t)x->S);
            cur->comm = si->comm;
            cur->sync = si->sync;
            cur->root = si->owner_in_comm;
        }
        cur->stages[cur->nstages++] = st;
        cur->n += si->nfloats;
        si->bucket = (int)(cur - x->buckets);
    }
    free(order);
    for (int i = 0; i < x->nbuckets; i++) x->buckets[i].buf = sp_xmalloc(sizeof(float) * (x->buckets[i].n + 1));
    x->next_bucket = sp_xcalloc((size_t)(x->ncomms ? x->ncomms : 1), sizeof(int));
}

sp_exec *sp_exec_new(sp_comm *world, sp_model *m, sp_optim *o, const sp_exec_cfg *cfg, int sample_ndim,
                     const int *sample_shape, int batch)
{
    sp_exec *x = sp_xcalloc(1, sizeof *x);
    x->world = world;
    x->rank = sp_comm_rank(world);
    x->W = sp_comm_size(world);
    x->S = m->nlayers;
    x->m = m;
    x->opt = o;
    x->cfg = *cfg;
    x->batch = batch;
    x->B = cfg->micro > 0 ? cfg->micro : is_scan(cfg->scheme) ? 1 : is_pipeline(cfg->scheme) ? 2 * x->W : x->W;
    x->in_numel = sp_shape_numel(sample_ndim, sample_shape);
    check_config(x);
    x->st = sp_xcalloc((size_t)x->S, sizeof *x->st);
    for (int s = 0; s < x->S; s++) {
        stage_info *si = &x->st[s];
        si->layer = m->layers[s];
        for (int p = 0; p < si->layer->nparams; p++) si->nfloats += si->layer->params[p]->value.numel;
    }
    infer_shapes(x, sample_ndim, sample_shape);
    if (x->tscan) {
        const stage_info *r0 = &x->st[0];
        if (r0->out_ndim != 2)
            sp_comm_fail_all(world, "--parallel scan: %s returns every step's hidden state; the time scan needs the "
                                    "last step's only", x->m->layers[0]->op->name);
        x->T = sample_ndim >= 1 ? sample_shape[0] : 1;
        x->H = r0->out_shape[1];
        if (x->W > x->T)
            sp_comm_fail_all(world, "--parallel scan: %d ranks for %d time steps (expected ranks <= steps)", x->W, x->T);
    }
    setup_costs(x, sample_ndim, sample_shape);
    build_schedule(x);
    if (is_scan(cfg->scheme)) check_scan(x);
    if (x->tscan) {   /* every rank holds every weight and steps them all (the same sums everywhere) */
        for (int s = 0; s < x->S; s++) x->st[s].owns = true, x->st[s].comm = x->st[s].bucket = -1;
        x->comms = sp_xcalloc(1, sizeof *x->comms);
        x->comm_min = sp_xcalloc(1, sizeof(int));
        x->buckets = sp_xcalloc(1, sizeof *x->buckets);
        x->next_bucket = sp_xcalloc(1, sizeof(int));
    } else {
        setup_weights(x);
        setup_buckets(x);
    }
    /* $SCANPROP_EXEC_STEPWISE=1: every update at the end of its own step (the comparison
     * in docs/DISTRIBUTED.md) */
    const char *stepwise = getenv("SCANPROP_EXEC_STEPWISE");
    x->deferred = !strcmp(cfg->scheme, "ddp") && x->nbuckets > 0 && !(stepwise && !strcmp(stepwise, "1"));
    for (int j = 0; j < x->sched->njobs && !x->tscan; j++)
        if (local(x, j) && x->sched->jobs[j].dir == SP_FWD && x->sched->jobs[j].stage == x->S - 1) x->loss_jobs++;
    for (int s = 0; s < x->S; s++)
        if (x->st[s].nfloats && (x->st[s].bucket < 0 || x->st[s].sync != SYNC_ALLREDUCE)) x->deferred = false;
    x->meas = sp_xcalloc((size_t)x->S * 6, sizeof *x->meas);
    int SB = x->S * x->B;
    x->tapes = sp_xcalloc((size_t)x->B, sizeof *x->tapes);
    for (int b = 0; b < x->B; b++) sp_tape_init(&x->tapes[b]);
    x->node = sp_xcalloc((size_t)SB, sizeof *x->node);
    x->dy = sp_xcalloc((size_t)SB, sizeof *x->dy);
    x->have_dy = sp_xcalloc((size_t)SB, sizeof *x->have_dy);
    x->loss = sp_xcalloc((size_t)x->B, sizeof *x->loss);
    x->xin = sp_xcalloc((size_t)x->B, sizeof *x->xin);
    x->yin = sp_xcalloc((size_t)x->B, sizeof *x->yin);
    x->rows = sp_xcalloc((size_t)x->B, sizeof *x->rows);
    x->done = sp_xcalloc((size_t)x->sched->njobs, sizeof *x->done);
    x->order_rec = sp_xmalloc(sizeof(int) * (size_t)(x->sched->njobs + 1));
    /* Every rank starts its first step together (the measured costs took rank 0 a while). */
    sp_barrier(world);
    return x;
}

void sp_exec_free(sp_exec *x)
{
    if (!x) return;
    for (int b = 0; b < x->B; b++) sp_tape_free(&x->tapes[b]);
    for (int i = 0; i < x->nbuckets; i++) free(x->buckets[i].stages), free(x->buckets[i].buf);
    for (int i = 0; i < x->ncomms; i++) sp_comm_free(x->comms[i]);
    free(x->comms);
    free(x->comm_min);
    free(x->buckets);
    free(x->next_bucket);
    free(x->tapes);
    free(x->node);
    free(x->dy);
    free(x->have_dy);
    free(x->loss);
    free(x->xin);
    free(x->yin);
    free(x->rows);
    free(x->done);
    free(x->sends);
    free(x->order_rec);
    free(x->ev);
    free(x->meas);
    free(x->st);
    sp_sim_free(&x->sim);
    sp_schedule_free(x->sched);
    sp_costs_free(x->costs);
    free(x);
}

int sp_exec_rank(const sp_exec *x) { return x->rank; }
int sp_exec_workers(const sp_exec *x) { return x->W; }
const sp_schedule *sp_exec_schedule(const sp_exec *x) { return x->sched; }
const sp_costs *sp_exec_costs(const sp_exec *x) { return x->costs; }

/* ---- a step ---------------------------------------------------------------------------- */

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
        sp_isend(x->world, out->data, out->numel, w, tag, new_send(x));
    }
}

static sp_tensor stage_tensor(sp_exec *x, int s, int b)
{
    int shape[SP_MAX_DIMS];
    memcpy(shape, x->st[s].out_shape, sizeof shape);
    shape[0] = x->rows[b];
    return sp_tape_tensor(&x->tapes[b], x->st[s].out_ndim, shape);
}

static void wait_weights(sp_exec *x, int s)
{
    stage_info *si = &x->st[s];
    if (si->sync == SYNC_OWNER && si->comm >= 0) sp_wait_all(si->wreq, si->layer->nparams);
}

/* ∂l/∂y_s of micro-batch b, from the local tape, the loss, or the rank that made it. */
static sp_tensor *ensure_dy(sp_exec *x, int s, int b)
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
        l->op->backward_input(l, 0, &seed, &x->dy[k]);
    } else {
        int p = dy_producer(x, s, b);
        if (local(x, p)) sp_comm_die(x->world, "internal: job order: ∂l/∂y_%d of micro-batch %d not ready", s, b);
        x->dy[k] = stage_tensor(x, s, b);
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

static void finish_bucket(sp_exec *x, int i, bool update);

static void run_forward(sp_exec *x, int job, sp_job j)
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
        sp_tensor a = stage_tensor(x, s - 1, b);
        sp_req r;
        sp_irecv(x->world, a.data, a.numel, x->sched->compute[p], tag_of(x, 0, s - 1, b), &r);
        sp_wait(&r);
        in = sp_tape_input(t, &a);
    }
    int bi = x->st[s].bucket;
    if (x->deferred && bi >= 0 && x->buckets[bi].outstanding) {   /* the previous step's update of this stage */
        sp_comm_set_label("the previous step's gradient allreduce");
        finish_bucket(x, bi, true);
        label_job(x, job, x->steps);
    }
    wait_weights(x, s);
    double t0 = sp_now();
    sp_node *n = x->node[s * x->B + b] = sp_apply(t, x->st[s].layer, in);
    if (s == x->S - 1) x->loss[b] = sp_apply_loss(t, x->m->loss, n, x->yin[b]);
    double dt = sp_now() - t0;
    x->fwd_s += dt;
    measured(x, s, 0, dt);
    send_to_succs(x, job, &n->out, tag_of(x, 0, s, b), false);
}

static void start_buckets(sp_exec *x, int comm);

static void grad_done(sp_exec *x, int s)
{
    stage_info *si = &x->st[s];
    if (si->bucket < 0) return;
    bucket *bk = &x->buckets[si->bucket];
    if (--bk->pending == 0) start_buckets(x, bk->comm);
}

static void run_backward(sp_exec *x, int job, sp_job j)
{
    int s = j.stage, b = j.micro;
    sp_node *n = x->node[s * x->B + b];
    if (!n) sp_comm_die(x->world, "internal: backward of stage %d, micro-batch %d without its forward here", s, b);
    sp_tensor *dy = ensure_dy(x, s, b);
    wait_weights(x, s);
    double t0 = sp_now();
    bool params = j.dir != SP_BWD_DELTA && n->op->backward_params && n->layer->nparams > 0;
    if (params) n->op->backward_params(n, dy);
    double t1 = sp_now();
    bool delta = j.dir != SP_BWD_GRAD && s > 0;
    if (delta) {
        int k = (s - 1) * x->B + b;
        x->dy[k] = sp_tape_tensor_like(&x->tapes[b], &n->input->out);
        n->op->backward_input(n, 0, dy, &x->dy[k]);
        x->have_dy[k] = true;
    }
    double t2 = sp_now();
    x->bwd_s += t2 - t0;
    if (j.dir != SP_BWD_DELTA) measured(x, s, 2, t1 - t0);
    if (j.dir != SP_BWD_GRAD) measured(x, s, 1, t2 - t1);
    if (delta) send_to_succs(x, job, &x->dy[(s - 1) * x->B + b], tag_of(x, 1, s - 1, b), true);
    if (j.dir != SP_BWD_DELTA) grad_done(x, s);
}

static void pack(sp_exec *x, bucket *bk, bool in)
{
    size_t off = 0;
    for (int i = 0; i < bk->nstages; i++) {
        sp_layer *l = x->st[bk->stages[i]].layer;
        for (int p = 0; p < l->nparams; p++) {
            sp_tensor *g = &l->params[p]->grad;
            if (in) memcpy(bk->buf + off, g->data, g->numel * sizeof(float));
            else memcpy(g->data, bk->buf + off, g->numel * sizeof(float));
            off += g->numel;
        }
    }
}

/* Start the ready buckets of one communicator, strictly in bucket order (the order in
 * which collectives are issued must be the same on every member). */
static void start_buckets(sp_exec *x, int comm)
{
    for (;;) {
        int i = x->next_bucket[comm];
        while (i < x->nbuckets && x->buckets[i].comm != comm) i++;
        if (i >= x->nbuckets || x->buckets[i].pending > 0) {
            x->next_bucket[comm] = i;
            return;
        }
        bucket *bk = &x->buckets[i];
        pack(x, bk, true);
        sp_comm *c = x->comms[comm];
        if (bk->sync == SYNC_ALLREDUCE) sp_iallreduce(c, bk->buf, bk->n, &bk->req);
        else sp_ireduce(c, bk->buf, bk->n, bk->root, &bk->req);
        bk->started = true;
        bk->t_start = sp_now();
        bk->t_done = 0;
        x->next_bucket[comm] = i + 1;
    }
}

/* The shares of the micro-batches whose last stage ran here, summed over the ranks. */
static void start_loss(sp_exec *x)
{
    float loss = 0;
    for (int b = 0; b < x->B; b++)
        if (x->loss[b] && (!x->tscan || x->rank == 0))   /* the time scan: every rank has the loss */
            loss += (float)x->rows[b] / (float)x->batch * x->loss[b]->out.data[0];
    x->loss_buf = loss;
    sp_iallreduce(x->world, &x->loss_buf, 1, &x->loss_req);
    x->loss_started = true;
}

/* Wait for bucket i's collective and unpack its sum; with update (ddp's deferred
 * updates), also step its stages with the learning rate of the step it belongs to and
 * zero their gradients for the step that runs now. */
static void finish_bucket(sp_exec *x, int i, bool update)
{
    bucket *bk = &x->buckets[i];
    double w0 = sp_now();
    sp_wait(&bk->req);
    double w1 = sp_now();
    if (bk->t_done == 0) bk->t_done = w1;
    trace_add_step(x, -1 - i, bk->step, bk->t_start, bk->t_done);
    if (w1 - w0 > 1e-6) trace_add(x, WAIT_EV - i, w0, w1);
    if (bk->sync == SYNC_ALLREDUCE || x->comms[bk->comm]->rank == bk->root) pack(x, bk, false);
    bk->outstanding = false;
    if (!update) return;
    double u0 = sp_now(), lr = sp_optim_get_lr(x->opt);
    sp_optim_set_lr(x->opt, x->pending_lr);
    for (int k = 0; k < bk->nstages; k++) {
        sp_layer *l = x->st[bk->stages[k]].layer;
        if (x->st[bk->stages[k]].owns) sp_optim_step_params(x->opt, l->params, l->nparams);
        for (int p = 0; p < l->nparams; p++) sp_zero(&l->params[p]->grad);
    }
    sp_optim_set_lr(x->opt, lr);
    x->bwd_s += sp_now() - u0;
}

/* Every update still outstanding (before the weights are read: evaluation, saving). */
static void flush_updates(sp_exec *x)
{
    sp_comm_set_label("the last step's gradient allreduce");
    for (int i = 0; i < x->nbuckets; i++)
        if (x->buckets[i].outstanding) finish_bucket(x, i, true);
}

/* Notice finished collectives early (the trace shows when each one ended). */
static void poll_buckets(sp_exec *x)
{
    for (int i = 0; i < x->nbuckets; i++) {
        bucket *bk = &x->buckets[i];
        if ((bk->started || bk->outstanding) && bk->t_done == 0 && sp_test(&bk->req)) bk->t_done = sp_now();
    }
}

static void begin_step(sp_exec *x, const sp_tensor *in, const int *labels)
{
    int n = in->shape[0];
    if (n % x->B != 0)
        sp_comm_die(x->world, "a batch of %d samples does not split into %d micro-batches", n, x->B);
    size_t per = sp_tensor_sample_numel(in);
    for (int b = 0; b < x->B; b++) {
        sp_tape_reset(&x->tapes[b]);
        x->rows[b] = n / x->B;
        sp_tensor v = *in;
        v.shape[0] = x->rows[b];
        v.numel = per * (size_t)x->rows[b];
        v.data = in->data + per * (size_t)(b * x->rows[b]);
        x->xin[b] = v;
        x->yin[b] = labels + b * x->rows[b];
        x->loss[b] = NULL;
    }
    int SB = x->S * x->B;
    memset(x->node, 0, sizeof *x->node * (size_t)SB);
    memset(x->have_dy, 0, sizeof *x->have_dy * (size_t)SB);
    memset(x->done, 0, sizeof *x->done * (size_t)x->sched->njobs);
    x->nsends = 0;
    for (int i = 0; i < x->nbuckets; i++) {
        bucket *bk = &x->buckets[i];
        bk->pending = 0;
        bk->started = false;
        for (int k = 0; k < bk->nstages; k++) bk->pending += x->st[bk->stages[k]].grad_jobs;
    }
    for (int c = 0; c < x->ncomms; c++) x->next_bucket[c] = 0;
    /* deferred: each bucket's stages are zeroed after their update (finish_bucket) */
    if (!x->deferred || x->steps == 0) sp_optim_zero_grad(x->opt);
    x->loss_left = x->loss_jobs;
    x->loss_started = false;
    /* Weights whose master copy lives elsewhere: fetch them all now, wait per stage. */
    for (int s = 0; s < x->S; s++) {
        stage_info *si = &x->st[s];
        if (si->sync != SYNC_OWNER || si->comm < 0) continue;
        for (int p = 0; p < si->layer->nparams; p++)
            sp_ibroadcast(x->comms[si->comm], si->layer->params[p]->value.data, si->layer->params[p]->value.numel,
                          si->owner_in_comm, &si->wreq[p]);
    }
    /* Buckets with no local gradient job (a rank that computes none of the stage but
     * owns it) start at once. */
    for (int c = 0; c < x->ncomms; c++) start_buckets(x, c);
}


/* ---- BPPSA across ranks (--parallel scan) ------------------------------------------------ */

/* Over layers: rank r holds the layers [a_r, b_r] (GPipe's contiguous placement). Its
 * element of the scan is the product of its transposed Jacobians, per sample,
 *     P_r = Jᵀ_{a_r} · … · Jᵀ_{b_r}        (in_{a_r} × out_{b_r}),
 * and the last rank's is the vector v = P_{W−1}·∇y l. The ranks run an inclusive suffix
 * scan (Hillis–Steele: at level k, rank r receives T_{r+2^k} and forms T_r·T_{r+2^k}),
 * ⌈log₂ W⌉ levels of send/recv, after which T_r is ∂l/∂(input of segment r); one more
 * exchange hands T_{r+1} to rank r as ∂l/∂(output of its segment), and each rank
 * back-propagates its own segment linearly from there (its δ and G). Rank 0's element
 * is never needed (nobody reads T_0), so rank 0 does not form it.
 *
 * Over time (a recurrent first layer, SEQ_LAST: rnn, gru): every rank runs the whole
 * forward (the recurrence is sequential; a pipeline over time would take as long) and
 * the backward of the layers after the recurrent one, which gives ∇h_T. The time steps
 * 1..T are split into W contiguous segments [a_r, b_r]; the chain ∇h_{t−1} = Jᵀ_t·∇h_t
 * (the op's chain_jt, H × H) is scanned exactly as above with P_r = Jᵀ_{a_r} ⋯ Jᵀ_{b_r}
 * and v = ∇h_{a_{W−1}−1}; after the hand-off each rank recovers ∇h_t of its own steps
 * with T/W matrix–vector products. The ranks then allgather the segments of ∇h and each
 * computes the weight gradients from the whole [B, T, H] (the op's
 * chain_backward_params, Eq. 2 of [B]) — the same sums on every rank, so no gradient
 * collective is needed and every rank steps the optimizer. */

static seg segment_of(const sp_exec *x, int r)
{
    seg g = {-1, -1, 0, 0};
    if (x->tscan) {
        g.a = (int)((long)r * x->T / x->W) + 1;
        g.b = (int)((long)(r + 1) * x->T / x->W);
        g.in = g.out = x->H;
        return g;
    }
    for (int s = 0; s < x->S; s++)
        if (x->sched->stage_worker[s] == r) {
            if (g.a < 0) g.a = s;
            g.b = s;
        }
    if (g.a < 0) return g;
    const stage_info *lo = g.a > 0 ? &x->st[g.a - 1] : NULL, *hi = &x->st[g.b];
    size_t in = 1, out = 1;
    if (lo)
        for (int i = 1; i < lo->out_ndim; i++) in *= (size_t)lo->out_shape[i];
    else
        in = x->in_numel;
    for (int i = 1; i < hi->out_ndim; i++) out *= (size_t)hi->out_shape[i];
    g.in = (int)in, g.out = (int)out;
    return g;
}

/* Every rank holds a segment, and no element is out of reach (dense per sample). */
static void check_scan(sp_exec *x)
{
    for (int r = 0; r < x->W; r++) {
        seg g = segment_of(x, r);
        if (g.a < 0)
            sp_comm_fail_all(x->world, "--parallel scan: the cost partition left rank %d without layers (use fewer "
                                       "ranks)", r);
        double bytes = 4.0 * x->batch * g.in * g.out;
        if (r > 0 && r < x->W - 1 && bytes > 1024.0 * 1024 * 1024)
            sp_comm_fail_all(x->world, "--parallel scan: rank %d's element is %d x %d per sample (%.1f GB for a batch "
                                       "of %d); the scan suits chains with narrow segment boundaries (use fewer ranks)",
                             r, g.in, g.out, bytes / 1e9, x->batch);
    }
}

/* dst (rows × c) = Jᵀ (rows × m, CSR) · M (m × c), one sample. */
static void csr_times_dense(const sp_csr *jt, const float *M, int c, float *dst)
{
    for (int i = 0; i < jt->rows; i++) {
        float *d = dst + (size_t)i * c;
        memset(d, 0, sizeof(float) * (size_t)c);
        for (int32_t e = jt->indptr[i]; e < jt->indptr[i + 1]; e++) {
            float v = jt->data[e];
            const float *mrow = M + (size_t)jt->indices[e] * c;
            for (int k = 0; k < c; k++) d[k] += v * mrow[k];
        }
    }
}

/* P_r for every sample: [n, in, out]. */
static float *segment_product(sp_exec *x, seg g, int n)
{
    size_t maxdim = (size_t)g.out;
    for (int s = g.a; s <= g.b; s++) {
        size_t in = sp_tensor_sample_numel(sp_node_x(x->node[s * x->B]));
        maxdim = in > maxdim ? in : maxdim;
    }
    float *P = sp_xmalloc(sizeof(float) * (size_t)n * g.in * g.out);
    float *cur = sp_xmalloc(sizeof(float) * maxdim * g.out), *nxt = sp_xmalloc(sizeof(float) * maxdim * g.out);
    sp_csr *jt = sp_xcalloc((size_t)(g.b - g.a + 1), sizeof *jt);
    for (int s = g.a; s <= g.b; s++) {
        sp_node *nd = x->node[s * x->B];
        nd->op->jt_pattern(nd, 0, &jt[s - g.a]);
    }
    for (int smp = 0; smp < n; smp++) {
        /* cur = I (out × out), then cur = Jᵀ_s · cur from the last layer down */
        memset(cur, 0, sizeof(float) * (size_t)g.out * g.out);
        for (int i = 0; i < g.out; i++) cur[(size_t)i * g.out + i] = 1.0f;
        for (int s = g.b; s >= g.a; s--) {
            sp_node *nd = x->node[s * x->B];
            nd->op->jt_values(nd, 0, smp, &jt[s - g.a]);
            csr_times_dense(&jt[s - g.a], cur, g.out, nxt);
            float *t = cur;
            cur = nxt, nxt = t;
        }
        memcpy(P + (size_t)smp * g.in * g.out, cur, sizeof(float) * (size_t)g.in * g.out);
    }
    for (int s = g.a; s <= g.b; s++) sp_csr_free(&jt[s - g.a]);
    free(jt);
    free(cur);
    free(nxt);
    return P;
}

/* The time segment's P_r = Jᵀ_a ⋯ Jᵀ_b per sample: [n, H, H]. */
static float *time_product(sp_exec *x, seg g, int n)
{
    int H = x->H;
    size_t HH = (size_t)H * H;
    const sp_node *nd = x->node[0];
    float *P = sp_xmalloc(sizeof(float) * (size_t)n * HH), *jt = sp_xmalloc(sizeof(float) * HH);
    float *cur = sp_xcalloc(HH, sizeof(float)), *nxt = sp_xcalloc(HH, sizeof(float));
    for (int smp = 0; smp < n; smp++) {
        nd->op->chain_jt(nd, smp, g.b, cur);   /* Jᵀ_b, then Jᵀ_t · (…) down to t = a */
        for (int t = g.b - 1; t >= g.a; t--) {
            nd->op->chain_jt(nd, smp, t, jt);
            sp_gemm(false, false, H, H, H, 1.0f, jt, H, cur, H, 0.0f, nxt, H);
            float *tmp = cur;
            cur = nxt, nxt = tmp;
        }
        memcpy(P + (size_t)smp * HH, cur, sizeof(float) * HH);
    }
    free(jt);
    free(cur);
    free(nxt);
    return P;
}

/* ∇h_t for t = b … a of the time segment from ∇h_b (dhb, [n, H]) into mine ([n, len, H],
 * step a first); below ([n, H]) receives ∇h_{a−1} when given. */
static void time_sweep(sp_exec *x, seg g, int n, const float *dhb, float *mine, float *below)
{
    int H = x->H, len = g.b - g.a + 1;
    const sp_node *nd = x->node[0];
    float *jt = sp_xmalloc(sizeof(float) * (size_t)H * H), *v = sp_xmalloc(sizeof(float) * (size_t)H);
    float *tmp = sp_xmalloc(sizeof(float) * (size_t)H);
    for (int smp = 0; smp < n; smp++) {
        memcpy(v, dhb + (size_t)smp * H, sizeof(float) * (size_t)H);
        for (int t = g.b; t >= g.a; t--) {
            memcpy(mine + ((size_t)smp * len + (size_t)(t - g.a)) * H, v, sizeof(float) * (size_t)H);
            if (t == g.a && !below) break;
            nd->op->chain_jt(nd, smp, t, jt);   /* v ← Jᵀ_t · v */
            float *dst = t == g.a ? below + (size_t)smp * H : v;
            for (int i = 0; i < H; i++) {
                float acc = 0;
                for (int j = 0; j < H; j++) acc += jt[(size_t)i * H + j] * v[j];
                tmp[i] = acc;
            }
            memcpy(dst, tmp, sizeof(float) * (size_t)H);
        }
    }
    free(jt);
    free(v);
    free(tmp);
}

/* Back-propagate the rank's own segment from ∂l/∂(its output) in x->dy[b]. */
static void segment_backward(sp_exec *x, seg g)
{
    for (int s = g.b; s >= g.a; s--) {
        sp_node *nd = x->node[s * x->B];
        sp_tensor *dy = &x->dy[s * x->B];
        if (nd->op->backward_params && nd->layer->nparams > 0) nd->op->backward_params(nd, dy);
        if (s > 0) {
            x->dy[(s - 1) * x->B] = sp_tape_tensor_like(&x->tapes[0], &nd->input->out);
            nd->op->backward_input(nd, 0, dy, &x->dy[(s - 1) * x->B]);
        }
    }
}

/* Columns of T_r after the levels that cover ranks r .. r + span − 1. */
static int scan_cols(const sp_exec *x, int r, int span)
{
    int last = r + span - 1;
    return last >= x->W - 1 ? 1 : segment_of(x, last).out;
}

/* The ⌈log₂ W⌉ levels: T ([n, in_r, *cols]) becomes T_r = ∂l/∂(input of segment r). */
static float *scan_levels(sp_exec *x, float *T, int *cols, int n)
{
    int W = x->W, r = x->rank;
    seg me = segment_of(x, r);
    for (int span = 1; span < W; span *= 2) {
        sp_req sreq = {0}, rreq = {0};
        if (r > 0 && r - span > 0)   /* rank 0 never needs anyone's T; nor do we send to it here */
            sp_isend(x->world, T, (size_t)n * me.in * *cols, r - span, tag_of(x, 2, span, 0), &sreq);
        float *Tn = NULL;
        int ncols = 0;
        if (r > 0 && r + span < W) {
            seg o = segment_of(x, r + span);
            ncols = scan_cols(x, r + span, span);
            Tn = sp_xmalloc(sizeof(float) * (size_t)n * o.in * ncols);
            sp_irecv(x->world, Tn, (size_t)n * o.in * ncols, r + span, tag_of(x, 2, span, 0), &rreq);
        }
        sp_wait(&rreq);
        sp_wait(&sreq);
        if (Tn) {   /* T_r ← T_r · T_{r+span}, per sample: (in × cols)·(cols × ncols) */
            float *R = sp_xcalloc((size_t)n * me.in * ncols, sizeof(float));
            for (int smp = 0; smp < n; smp++) {
                const float *A = T + (size_t)smp * me.in * *cols, *Bm = Tn + (size_t)smp * *cols * ncols;
                float *C = R + (size_t)smp * me.in * ncols;
                for (int i = 0; i < me.in; i++)
                    for (int k = 0; k < *cols; k++) {
                        float a = A[(size_t)i * *cols + k];
                        for (int j = 0; j < ncols; j++) C[(size_t)i * ncols + j] += a * Bm[(size_t)k * ncols + j];
                    }
            }
            free(T);
            free(Tn);
            T = R;
            *cols = ncols;
        }
    }
    return T;
}

static void scan_backward(sp_exec *x)
{
    double t0 = sp_now();
    int W = x->W, r = x->rank, n = x->rows[0];
    seg me = segment_of(x, r);
    float *T = NULL;
    int cols = 0;
    sp_comm_set_label("bppsa scan across ranks");
    if (r == W - 1) {   /* v = the segment's δ chain applied to ∇y l (and its G on the way) */
        x->dy[me.b * x->B] = *ensure_dy(x, me.b, 0);
        segment_backward(x, me);
        cols = 1;
        T = sp_xmalloc(sizeof(float) * (size_t)n * me.in);
        if (me.a > 0) memcpy(T, x->dy[(me.a - 1) * x->B].data, sizeof(float) * (size_t)n * me.in);
    } else if (r > 0) {
        T = segment_product(x, me, n);
        cols = me.out;
    }
    T = scan_levels(x, T, &cols, n);
    /* T_r is now ∂l/∂(input of segment r), [n, in]. Hand it to rank r − 1. */
    sp_req sreq = {0}, rreq = {0};
    if (r > 0) sp_isend(x->world, T, (size_t)n * me.in, r - 1, tag_of(x, 3, 0, 0), &sreq);
    if (r < W - 1) {
        sp_tensor y = stage_tensor(x, me.b, 0);
        sp_irecv(x->world, y.data, y.numel, r + 1, tag_of(x, 3, 0, 0), &rreq);
        sp_wait(&rreq);
        x->dy[me.b * x->B] = y;
        segment_backward(x, me);
    }
    sp_wait(&sreq);
    free(T);
    x->bwd_s += sp_now() - t0;
}

/* The time scan's backward (see above): ∇h_T from the layers after the recurrent one,
 * the scan over the ranks' time segments, the allgather of ∇h, the weight gradients. */
static void time_scan_backward(sp_exec *x)
{
    double t0 = sp_now();
    int W = x->W, r = x->rank, n = x->rows[0], H = x->H, Tn = x->T;
    sp_comm_set_label("bppsa scan across ranks over time");
    for (int s = x->S - 1; s >= 1; s--) {   /* the layers above the recurrent one, on every rank */
        sp_node *nd = x->node[s * x->B];
        sp_tensor *dy = ensure_dy(x, s, 0);
        if (nd->op->backward_params && nd->layer->nparams > 0) nd->op->backward_params(nd, dy);
        x->dy[(s - 1) * x->B] = sp_tape_tensor_like(&x->tapes[0], &nd->input->out);
        nd->op->backward_input(nd, 0, dy, &x->dy[(s - 1) * x->B]);
        x->have_dy[(s - 1) * x->B] = true;
    }
    const float *dhT = ensure_dy(x, 0, 0)->data;   /* ∇h_T, [n, H] */
    seg me = segment_of(x, r);
    int len = me.b - me.a + 1, maxlen = (Tn + W - 1) / W;
    float *mine = sp_xcalloc((size_t)n * maxlen * H, sizeof(float));
    float *T = NULL;
    int cols = 0;
    if (r == W - 1) {
        T = sp_xmalloc(sizeof(float) * (size_t)n * H);
        time_sweep(x, me, n, dhT, mine, W > 1 ? T : NULL);
        cols = 1;
    } else if (r > 0) {
        T = time_product(x, me, n);
        cols = H;
    }
    T = scan_levels(x, T, &cols, n);
    sp_req sreq = {0}, rreq = {0};
    if (r > 0) sp_isend(x->world, T, (size_t)n * H, r - 1, tag_of(x, 3, 0, 0), &sreq);
    if (r < W - 1) {   /* ∇h_{b_r} from rank r + 1, then this segment's steps */
        float *dhb = sp_xmalloc(sizeof(float) * (size_t)n * H);
        sp_irecv(x->world, dhb, (size_t)n * H, r + 1, tag_of(x, 3, 0, 0), &rreq);
        sp_wait(&rreq);
        time_sweep(x, me, n, dhb, mine, NULL);
        free(dhb);
    }
    sp_wait(&sreq);
    free(T);
    /* Every rank's segment of ∇h ([n, len, H], padded to maxlen), then G from all of it. */
    if (len < maxlen) {   /* compact per sample [n, len, H] → [n, maxlen, H] (in place, backwards) */
        for (int smp = n - 1; smp >= 0; smp--) {
            memmove(mine + (size_t)smp * maxlen * H, mine + (size_t)smp * len * H, sizeof(float) * (size_t)len * H);
            memset(mine + ((size_t)smp * maxlen + (size_t)len) * H, 0, sizeof(float) * (size_t)(maxlen - len) * H);
        }
    }
    size_t per = (size_t)n * maxlen * H;
    float *all = sp_xmalloc(sizeof(float) * per * (size_t)W);
    sp_comm_set_label("allgather of the recovered hidden-state gradients");
    sp_allgather(x->world, mine, all, per);
    sp_tensor dh = sp_tape_tensor(&x->tapes[0], 3, (int[]){n, Tn, H});
    for (int q = 0; q < W; q++) {
        seg g = segment_of(x, q);
        int lq = g.b - g.a + 1;
        for (int smp = 0; smp < n; smp++)
            memcpy(dh.data + ((size_t)smp * Tn + (size_t)(g.a - 1)) * H, all + per * q + (size_t)smp * maxlen * H,
                   sizeof(float) * (size_t)lq * H);
    }
    sp_node *rec = x->node[0];
    rec->op->chain_backward_params(rec, &dh);
    free(all);
    free(mine);
    x->bwd_s += sp_now() - t0;
}

/* The time scan's forward: the whole model on the whole batch, on every rank. */
static void time_scan_forward(sp_exec *x)
{
    double t0 = sp_now();
    sp_tape *t = &x->tapes[0];
    sp_node *h = sp_tape_input(t, &x->xin[0]);
    for (int s = 0; s < x->S; s++) h = x->node[s * x->B] = sp_apply(t, x->st[s].layer, h);
    x->loss[0] = sp_apply_loss(t, x->m->loss, h, x->yin[0]);
    x->fwd_s += sp_now() - t0;
}

/* $SCANPROP_EXEC_FAULT = exit:RANK:STEP | hang:RANK:STEP — the tests' injected fault:
 * that rank exits (without MPI_Finalize) or stops answering halfway through its jobs of
 * that step (counted from 1). */
static void maybe_fault(sp_exec *x, int i, int njobs)
{
    const char *f = getenv("SCANPROP_EXEC_FAULT");
    if (!f || i != njobs / 2) return;
    char kind[8] = "";
    int rank = -1;
    long step = -1;
    if (sscanf(f, "%7[a-z]:%d:%ld", kind, &rank, &step) != 3 || rank != x->rank || step != x->steps + 1) return;
    if (!strcmp(kind, "exit")) _exit(3);
    if (!strcmp(kind, "hang"))
        for (;;) pause();
}

float sp_exec_step(sp_exec *x, const sp_tensor *in, const int *labels, double *fwd_s, double *bwd_s,
                   double *step_s)
{
    double t0 = sp_now(), c0 = sp_comm_wait_seconds();
    if (x->steps == 0) x->trace_t0 = t0;
    x->fwd_s = x->bwd_s = 0;
    begin_step(x, in, labels);
    if (x->tscan) {
        time_scan_forward(x);
        time_scan_backward(x);
    }
    const int *order = x->tscan ? NULL : x->sim.order + x->sim.order_off[x->rank];
    int njobs = x->tscan ? 0 : x->sim.order_off[x->rank + 1] - x->sim.order_off[x->rank];
    for (int i = 0; i < njobs; i++) {
        int job = order[i];
        sp_job j = x->sched->jobs[job];
        maybe_fault(x, i, njobs);
        label_job(x, job, x->steps);
        double j0 = sp_now();
        if (j.dir == SP_FWD) {
            run_forward(x, job, j);
            if (j.stage == x->S - 1 && --x->loss_left == 0) start_loss(x);
        }
        else if (is_scan(x->cfg.scheme)) continue;   /* the backward is the scan below */
        else run_backward(x, job, j);
        x->done[job] = true;
        trace_add(x, job, j0, sp_now());
        if (x->steps == 0) x->order_rec[x->norder++] = job;
        poll_buckets(x);
    }
    if (is_scan(x->cfg.scheme) && !x->tscan) scan_backward(x);
    /* Gradients: every bucket finished, unpacked where the sum landed, and the owners'
     * updates — or, for ddp, left in flight: the next step's forward of a stage applies
     * its bucket's update first (cross-step overlap). */
    sp_comm_set_label("gradient synchronisation");
    for (int i = 0; i < x->nbuckets; i++) {
        bucket *bk = &x->buckets[i];
        if (!bk->started) sp_comm_die(x->world, "internal: gradient bucket %d never started", i);
        bk->step = x->steps;
        if (x->deferred) bk->outstanding = true;
        else finish_bucket(x, i, false);
    }
    x->pending_lr = sp_optim_get_lr(x->opt);
    sp_wait_all(x->sends, x->nsends);
    double u0 = sp_now();
    for (int s = 0; s < x->S && !x->deferred; s++) {
        stage_info *si = &x->st[s];
        if (si->owns && si->nfloats) sp_optim_step_params(x->opt, si->layer->params, si->layer->nparams);
    }
    x->bwd_s += sp_now() - u0;
    /* The batch's loss (started after the rank's last loss, or now). */
    sp_comm_set_label("loss allreduce");
    if (!x->loss_started) start_loss(x);
    double l0 = sp_now();
    sp_wait(&x->loss_req);
    float loss = x->loss_buf;
    double t1 = sp_now();
    trace_add(x, WAIT_LOSS, l0, t1);
    x->busy += x->fwd_s + x->bwd_s;
    x->comm_s += sp_comm_wait_seconds() - c0;
    x->wall += t1 - t0;
    x->steps++;
    if (fwd_s) *fwd_s = x->fwd_s;
    if (bwd_s) *bwd_s = x->bwd_s;
    if (step_s) *step_s = t1 - t0;
    return loss;
}

void sp_exec_sync_weights(sp_exec *x)
{
    flush_updates(x);
    sp_comm_set_label("weight synchronisation");
    for (int s = 0; s < x->S; s++) {
        stage_info *si = &x->st[s];
        if (!si->nfloats) continue;
        /* The lowest rank that steps the stage is its source of truth. */
        int mine = si->owns ? x->rank : x->W;
        float f = (float)mine;
        float all[1024];
        float *buf = x->W <= 1024 ? all : sp_xmalloc(sizeof(float) * (size_t)x->W);
        sp_allgather(x->world, &f, buf, 1);
        int root = x->W;
        for (int r = 0; r < x->W; r++) root = (int)buf[r] < root ? (int)buf[r] : root;
        if (buf != all) free(buf);
        for (int p = 0; p < si->layer->nparams; p++)
            sp_broadcast(x->world, si->layer->params[p]->value.data, si->layer->params[p]->value.numel, root);
    }
}

/* ---- statistics, order, trace --------------------------------------------------------------- */

void sp_exec_gather_stats(sp_exec *x, sp_exec_stats *st)
{
    st->workers = x->W;
    st->steps = x->steps;
    float mine[3] = {(float)x->busy, (float)x->comm_s, (float)x->wall};
    float *all = sp_xmalloc(sizeof(float) * 3 * (size_t)x->W);
    sp_allgather(x->world, mine, all, 3);
    st->busy = sp_xmalloc(sizeof(double) * (size_t)x->W);
    st->comm = sp_xmalloc(sizeof(double) * (size_t)x->W);
    st->wall = sp_xmalloc(sizeof(double) * (size_t)x->W);
    for (int r = 0; r < x->W; r++) st->busy[r] = all[3 * r], st->comm[r] = all[3 * r + 1], st->wall[r] = all[3 * r + 2];
    free(all);
}

void sp_exec_stats_free(sp_exec_stats *st)
{
    free(st->busy);
    free(st->comm);
    free(st->wall);
}

static FILE *open_out(sp_exec *x, const char *flag, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) sp_comm_die(x->world, "%s %s: cannot open for writing", flag, path);
    return f;
}

static void write_order(sp_exec *x)
{
    int n = x->sched->njobs;
    float *mine = sp_xmalloc(sizeof(float) * (size_t)n), *all = sp_xmalloc(sizeof(float) * (size_t)n * (size_t)x->W);
    for (int i = 0; i < n; i++) mine[i] = i < x->norder ? (float)x->order_rec[i] : -1.0f;
    sp_allgather(x->world, mine, all, (size_t)n);
    if (x->rank == 0) {
        FILE *f = open_out(x, "--exec-order", x->cfg.order_out);
        char lab[32];
        for (int r = 0; r < x->W; r++) {
            fprintf(f, "w%d", r);
            for (int i = 0; i < n && all[(size_t)r * n + i] >= 0; i++)
                fprintf(f, " %s", sp_job_label(x->sched, (int)all[(size_t)r * n + i], lab, sizeof lab));
            fputc('\n', f);
        }
        if (fclose(f) != 0) sp_comm_die(x->world, "--exec-order %s: write failed", x->cfg.order_out);
    }
    free(mine);
    free(all);
}

/* Chrome trace: one process per rank, thread 0 = compute jobs, thread 1 = collectives. */
static void write_trace(sp_exec *x)
{
    float cnt = (float)x->nev, *counts = sp_xmalloc(sizeof(float) * (size_t)x->W);
    sp_allgather(x->world, &cnt, counts, 1);
    int maxn = 0;
    for (int r = 0; r < x->W; r++) maxn = (int)counts[r] > maxn ? (int)counts[r] : maxn;
    size_t per = 4 * (size_t)maxn + 1;
    float *mine = sp_xcalloc(per, sizeof(float)), *all = sp_xmalloc(sizeof(float) * per * (size_t)x->W);
    for (int i = 0; i < x->nev; i++) {
        trace_ev *e = &x->ev[i];
        mine[4 * i] = (float)e->what;
        mine[4 * i + 1] = (float)e->step;
        mine[4 * i + 2] = (float)((e->t0 - x->trace_t0) * 1e6);
        mine[4 * i + 3] = (float)((e->t1 - x->trace_t0) * 1e6);
    }
    /* Ranks share the machine's monotonic clock; on a cluster they would need an offset. */
    sp_allgather(x->world, mine, all, per);
    if (x->rank == 0) {
        FILE *f = open_out(x, "--trace", x->cfg.trace_path);
        fprintf(f, "{\"traceEvents\": [\n");
        bool first = true;
        char lab[32];
        for (int r = 0; r < x->W; r++) {
            fprintf(f, "%s{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"rank %d\"}}",
                    first ? "" : ",\n", r, r);
            first = false;
            fprintf(f, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"args\": {\"name\": "
                       "\"compute\"}}", r);
            fprintf(f, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 1, \"args\": {\"name\": "
                       "\"communication\"}}", r);
            fprintf(f, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 2, \"args\": {\"name\": "
                       "\"blocked on a gradient collective\"}}", r);
            for (int i = 0; i < (int)counts[r]; i++) {
                const float *e = all + (size_t)r * per + 4 * (size_t)i;
                int what = (int)e[0];
                bool wait = what <= WAIT_EV / 2;
                const char *name = what >= 0 ? sp_job_label(x->sched, what, lab, sizeof lab) : lab;
                if (what == WAIT_LOSS) snprintf(lab, sizeof lab, "loss allreduce");
                else if (wait) snprintf(lab, sizeof lab, "wait for bucket %d", WAIT_EV - what);
                else if (what < 0) snprintf(lab, sizeof lab, "gradient bucket %d", -1 - what);
                fprintf(f, ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, "
                           "\"ts\": %.1f, \"dur\": %.1f, \"args\": {\"step\": %d}}",
                        name, what >= 0 ? "job" : wait ? "wait" : "allreduce", r, what >= 0 ? 0 : wait ? 2 : 1, e[2],
                        e[3] - e[2], (int)e[1]);
            }
        }
        fprintf(f, "\n]}\n");
        if (fclose(f) != 0) sp_comm_die(x->world, "--trace %s: write failed", x->cfg.trace_path);
    }
    free(counts);
    free(mine);
    free(all);
}

/* --costs-out: the stage costs this run measured (mean compute µs of each stage's F, δ
 * and G jobs over every rank and every step but the first), the calibration that
 * build/schedule --profile reads. Falls back to the planning costs after one step. */
static void write_costs(sp_exec *x)
{
    float *v = sp_xmalloc(sizeof(float) * 6 * (size_t)x->S);
    for (int i = 0; i < 6 * x->S; i++) v[i] = (float)x->meas[i];
    sp_allreduce(x->world, v, 6 * (size_t)x->S);
    if (x->rank == 0) {
        sp_costs *c = sp_costs_uniform(x->S, 0, 0, 0);
        double *dst[3] = {c->fwd, c->delta, c->grad}, *plan[3] = {x->costs->fwd, x->costs->delta, x->costs->grad};
        for (int s = 0; s < x->S; s++) {
            memcpy(c->name[s], x->costs->name[s], SP_STAGE_NAME);
            c->act_bytes[s] = x->costs->act_bytes[s];
            c->param_bytes[s] = x->costs->param_bytes[s];
            for (int p = 0; p < 3; p++) {
                float n = v[6 * s + 3 + p];
                dst[p][s] = n > 0 ? 1e6 * v[6 * s + p] / n : plan[p][s];
            }
        }
        FILE *f = open_out(x, "--costs-out", x->cfg.costs_out);
        sp_costs_write_csv(f, c);
        if (fclose(f) != 0) sp_comm_die(x->world, "--costs-out %s: write failed", x->cfg.costs_out);
        sp_costs_free(c);
    }
    free(v);
}

void sp_exec_finish(sp_exec *x)
{
    flush_updates(x);
    if (x->cfg.costs_out) write_costs(x);
    if (x->cfg.order_out) write_order(x);
    if (x->cfg.trace_path) write_trace(x);
}

/* ---- the cross-rank scan's plan (--parallel scan --plan) --------------------------------- */

int sp_exec_print_plan(const sp_exec *x, FILE *f)
{
    int W = x->W, n = x->batch, levels = 0;
    for (int span = 1; span < W; span *= 2) levels++;
    fprintf(f, "cross-rank scan plan: %d ranks, batch %d, over the %s; %d levels (ceil(log2 %d))\n", W, n,
            x->tscan ? "time steps of the recurrent first layer" : "layers", levels, W);
    for (int r = 0; r < W; r++) {
        seg g = segment_of(x, r);
        fprintf(f, "segment: rank %d %s %d-%d [%d -> %d per sample]", r, x->tscan ? "steps" : "layers", g.a, g.b, g.in,
                g.out);
        if (W > 1 && r == 0) fprintf(f, ": no element (nobody reads T_0)\n");
        else if (r == W - 1)
            fprintf(f, ": element v = P_%d * grad (%d floats per sample), by back-propagating the segment\n", r, g.in);
        else if (x->tscan)
            fprintf(f, ": element P_%d, %d x %d per sample, %.4g FLOPs (%d products of chain_jt)\n", r, g.in, g.out,
                    2.0 * n * g.in * g.in * g.out * (g.b - g.a), g.b - g.a);
        else
            fprintf(f, ": element P_%d, %d x %d per sample, %.4g floats (a product of %d Jt)\n", r, g.in, g.out,
                    (double)n * g.in * g.out, g.b - g.a + 1);
    }
    int level = 0;
    for (int span = 1; span < W; span *= 2) {
        fprintf(f, "level %d (span %d):", ++level, span);
        int pairs = 0;
        for (int r = 1; r + span < W; r++) {   /* rank r receives T_{r+span} (rank 0 takes no part) */
            seg me = segment_of(x, r), o = segment_of(x, r + span);
            int cols = scan_cols(x, r, span), ncols = scan_cols(x, r + span, span);
            fprintf(f, "%s rank %d -> rank %d (%d x %d per sample, %.4g floats; rank %d forms T_%d*T_%d, %.4g FLOPs)",
                    pairs++ ? ";" : "", r + span, r, o.in, ncols, (double)n * o.in * ncols, r, r, r + span,
                    2.0 * n * me.in * cols * ncols);
        }
        fprintf(f, "%s\n", pairs ? "" : " none (rank 0 needs no T_0)");
    }
    fprintf(f, "hand-off:");
    for (int r = 1; r < W; r++)
        fprintf(f, "%s rank %d -> rank %d (%d floats per sample)", r > 1 ? ";" : "", r, r - 1, segment_of(x, r).in);
    if (W == 1) fprintf(f, " none");
    fprintf(f, "\n");
    if (x->tscan) {
        int maxlen = (x->T + W - 1) / W;
        fprintf(f, "allgather: every rank's %d x %d steps of grad h per sample (%.4g floats), then every rank's weight "
                   "gradients from all %d steps\n", maxlen, x->H, (double)n * maxlen * x->H * W, x->T);
    }
    return levels;
}
