/* sim_comm.c — a step simulated with its communication (sim_comm.h says what is modelled).
 *
 * Each worker runs its jobs in sp_simulate's order (the executor's); a job starts at
 * max(the worker's compute lane, the arrival of every message it receives, its stage's
 * weights broadcast, and — deferred — the previous step's bucket of its stage plus that
 * update). The placement sweeps the workers repeatedly, as simulate.c's fixed orders do:
 * a job whose message has not been sent yet waits for a later sweep. Collectives are
 * placed when their last member issued them, on every member's lane.
 *
 * A message above Open MPI's eager limit (SIM_EAGER_BYTES) moves by rendezvous: the
 * sender posts it, and the bytes cross only once the receiver has posted its receive —
 * over shared memory the receiver copies them itself (vader's CMA single copy), inside
 * its wait. So such a message costs the receiver its transfer time from when both sides
 * are there, max(its send, the receiving job's turn), even when it was sent long before:
 * the transfer overlaps the sender's compute, never the receiver's. A smaller message is
 * copied into the receiver's queue at once and arrives α + bytes/β after its send. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "schedulers/sim/sim_comm.h"

enum { SYNC_NONE, SYNC_ALLREDUCE, SYNC_OWNER };

/* Open MPI's shared-memory transport (btl vader) sends up to 4 KiB eagerly (its
 * btl_vader_eager_limit); a larger message waits for the matching receive. */
#define SIM_EAGER_BYTES 4096.0

const char *sp_msg_kind_name(sp_msg_kind k)
{
    static const char *n[SP_MSG_KINDS] = {"act",  "grad", "allreduce", "broadcast", "reduce",
                                          "loss", "norm", "scan",      "up",        "down", "handoff",
                                          "buffers", "sync-bn"};
    return k >= 0 && k < SP_MSG_KINDS ? n[k] : "?";
}

double sp_opt_us_estimate(double param_bytes) { return 5.0 * param_bytes / 1e4; }

/* µs of op on `bytes` over P ranks; an op the model lacks, from its p2p fit (the textbook
 * step counts); no model: the constant transfer latency x per message, so a collective x
 * per step of the same algorithms (0 with no transfer). */
static double op_us(const sp_comm_model *m, double x, sp_comm_op op, double bytes, int P)
{
    if (!m && !(x > 0)) return 0;
    double t = m ? sp_comm_time(m, op, bytes, P) : NAN;
    if (!isnan(t)) return t;
    if (op != SP_COMM_P2P && P <= 1) return 0;
    double p = m ? sp_comm_time(m, SP_COMM_P2P, bytes, 2) : x;
    if (isnan(p)) return 0;
    switch (op) {
    case SP_COMM_BROADCAST:
    case SP_COMM_REDUCE: return ceil(log2((double)P)) * p;
    case SP_COMM_ALLREDUCE: {
        double q = m ? sp_comm_time(m, SP_COMM_P2P, bytes / P, 2) : x;
        return 2.0 * (P - 1) * (isnan(q) ? p : q);
    }
    case SP_COMM_ALLGATHER: return (P - 1) * p;
    default: return p;
    }
}

typedef struct csim csim;
static double set_us(const csim *cs, sp_comm_op op, double bytes, int set);
static double p2p_us(const csim *cs, double bytes, int from, int to);

typedef struct csim {
    const sp_schedule *s;
    const sp_costs *c;
    const sp_sim *r;
    const sp_sim_comm_cfg *cfg;
    int W, S;
    /* who holds which weights (exec_sync.c's sp_exec_setup_weights) */
    int *sync, *owner, *set_of;   /* [S]                                                */
    char **sets;                  /* [nsets][W]                                         */
    int nsets, *set_min, *set_size;
    int **set_ranks;              /* [nsets]: the members' ranks, ascending (topology)    */
    /* buckets (exec_sync.c's sp_exec_setup_buckets) */
    int nb, *bk_set, *bk_sync, *bk_off, *bk_stages, *stage_bucket;
    double *bk_bytes;
    int *pending0;                /* [nb·W]: gradient jobs of the bucket on w             */
    /* one pass */
    double *lane, *free_at, *send_end, *opt;   /* [W]                                   */
    double *arrival;              /* per pred edge (CSR of s->preds): message arrival, −1 */
    double *sent, *xfer;          /* per pred edge: its send and, rendezvous, its transfer
                                     time (µs; −1 for an eager message)                 */
    double *bcast_end;            /* [S]                                                */
    int *pending;                 /* [nb·W]                                             */
    double *issue;                /* [nb·W]: −1 until issued                            */
    int *next_issue;              /* [nsets·W]: next bucket index to issue               */
    int *next_place;              /* [nsets]                                            */
    double *bk_end;               /* [nb]                                               */
    bool *outstanding;            /* [nb·W] deferred                                     */
    double *prev_end;             /* [nb]: bucket ends of the previous pass               */
    double prev_T;
    /* batch norm's allgathers (cfg->buffers->sync_off): the jobs that meet there */
    bool barrier;                 /* every worker has as many such jobs (else each alone) */
    bool *arrived;                /* [W]: w waits at its next such job, since arrive[w]   */
    double *arrive;
    int *arrive_job;              /* [W]                                                 */
    /* messages */
    sp_sim_msg *msg;
    double *msg_key;              /* issue time                                          */
    int nmsg, cap;
    bool record;
} csim;

double sp_sim_msg_us(const sp_sim_comm_cfg *cfg, sp_comm_op op, double bytes, const int *ranks, int n)
{
    const sp_comm_topology *t = cfg->topo;
    if (t && t->nodes > 0) {
        if (op != SP_COMM_P2P && n <= 1) return 0;
        return sp_comm_time_ranks(NULL, op, bytes, ranks, 0, n, t);
    }
    return op_us(cfg->model, cfg->transfer, op, bytes, n);
}

/* A message's cost over a set of ranks (−1: every worker). */
static double set_us(const csim *cs, sp_comm_op op, double bytes, int set)
{
    return sp_sim_msg_us(cs->cfg, op, bytes, set < 0 ? NULL : cs->set_ranks[set], set < 0 ? cs->W : cs->set_size[set]);
}

static double p2p_us(const csim *cs, double bytes, int from, int to)
{
    return sp_sim_msg_us(cs->cfg, SP_COMM_P2P, bytes, (const int[]){from, to}, 2);
}

static bool is_bwd(sp_dir d) { return d != SP_FWD; }
static bool is_grad_job(sp_dir d) { return d == SP_BWD || d == SP_BWD_GRAD; }

static void add_msg(csim *cs, int rank, int peer, int kind, int stage, double bytes, double issue, double t0,
                    double t1)
{
    if (!cs->record) return;
    if (cs->nmsg == cs->cap) {
        cs->cap = cs->cap ? 2 * cs->cap : 64;
        cs->msg = sp_xrealloc(cs->msg, sizeof *cs->msg * (size_t)cs->cap);
        cs->msg_key = sp_xrealloc(cs->msg_key, sizeof *cs->msg_key * (size_t)cs->cap);
    }
    cs->msg_key[cs->nmsg] = issue;
    cs->msg[cs->nmsg++] = (sp_sim_msg){rank, peer, kind, stage, bytes, t0, t1};
}

/* ---- setup: weights and buckets, as the executor derives them ---------------------------- */

static bool stage_has_params(const csim *cs, int st) { return cs->c && cs->c->param_bytes[st] > 0; }

static int find_or_add_set(csim *cs, const char *member)
{
    for (int i = 0; i < cs->nsets; i++)
        if (!memcmp(cs->sets[i], member, (size_t)cs->W)) return i;
    cs->sets[cs->nsets] = sp_xmalloc((size_t)cs->W);
    memcpy(cs->sets[cs->nsets], member, (size_t)cs->W);
    return cs->nsets++;
}

static void setup_weights(csim *cs)
{
    const sp_schedule *s = cs->s;
    int W = cs->W;
    cs->sync = sp_xcalloc((size_t)cs->S, sizeof(int));
    cs->owner = sp_xcalloc((size_t)cs->S, sizeof(int));
    cs->set_of = sp_xmalloc(sizeof(int) * (size_t)cs->S);
    cs->sets = sp_xcalloc((size_t)cs->S + 1, sizeof *cs->sets);
    char *compute = sp_xmalloc((size_t)W), *weights = sp_xmalloc((size_t)W);
    for (int st = 0; st < cs->S; st++) {
        memset(compute, 0, (size_t)W);
        memset(weights, 0, (size_t)W);
        for (int j = 0; j < s->njobs; j++)
            if (s->jobs[j].stage == st) compute[s->compute[j]] = 1, weights[s->weights[j]] = 1;
        int nc = 0, nw = 0, owner = -1;
        for (int w = 0; w < W; w++) nc += compute[w], nw += weights[w], owner = weights[w] && owner < 0 ? w : owner;
        cs->set_of[st] = -1;
        cs->sync[st] = SYNC_NONE;
        cs->owner[st] = -1;
        if (!stage_has_params(cs, st)) continue;
        if (!memcmp(compute, weights, (size_t)W)) {
            for (int w = 0; w < W; w++) weights[w] = compute[w];   /* owners: every replica */
            if (nc > 1) cs->sync[st] = SYNC_ALLREDUCE, cs->set_of[st] = find_or_add_set(cs, compute);
            else cs->owner[st] = owner;
        } else if (nw == 1) {
            cs->sync[st] = SYNC_OWNER;
            cs->owner[st] = owner;
            compute[owner] = 1;
            cs->set_of[st] = find_or_add_set(cs, compute);
        }   /* anything else the executor refuses */
    }
    cs->set_min = sp_xcalloc((size_t)cs->nsets + 1, sizeof(int));
    cs->set_size = sp_xcalloc((size_t)cs->nsets + 1, sizeof(int));
    for (int i = 0; i < cs->nsets; i++) {
        while (!cs->sets[i][cs->set_min[i]]) cs->set_min[i]++;
        for (int w = 0; w < W; w++) cs->set_size[i] += cs->sets[i][w];
    }
    cs->set_ranks = sp_xcalloc((size_t)cs->nsets + 1, sizeof *cs->set_ranks);
    for (int i = 0; i < cs->nsets; i++) {
        cs->set_ranks[i] = sp_xmalloc(sizeof(int) * (size_t)cs->set_size[i]);
        for (int w = 0, k = 0; w < W; w++)
            if (cs->sets[i][w]) cs->set_ranks[i][k++] = w;
    }
    free(compute);
    free(weights);
}

/* When stage st's gradients complete in r on the lowest rank of its set (exec_sync.c). */
static double grads_ready_at(const csim *cs, int st)
{
    int w = cs->set_min[cs->set_of[st]];
    double t = -1;
    for (int j = 0; j < cs->s->njobs; j++) {
        sp_job jb = cs->s->jobs[j];
        if (jb.stage == st && cs->s->compute[j] == w && is_grad_job(jb.dir))
            t = cs->r->finish[j] > t ? cs->r->finish[j] : t;
    }
    return t < 0 ? 1e300 : t;
}

static const csim *g_sort;
static int by_ready(const void *pa, const void *pb)
{
    int a = *(const int *)pa, b = *(const int *)pb;
    double ta = grads_ready_at(g_sort, a), tb = grads_ready_at(g_sort, b);
    if (ta != tb) return ta < tb ? -1 : 1;
    return b - a;
}

static void setup_buckets(csim *cs)
{
    int S = cs->S, W = cs->W;
    double cap = cs->cfg->bucket_mb > 0 ? cs->cfg->bucket_mb * 1024 * 1024 : 0;
    int *order = sp_xmalloc(sizeof(int) * (size_t)(S + 1)), n = 0;
    for (int st = S - 1; st >= 0; st--)
        if (cs->set_of[st] >= 0) order[n++] = st;
    g_sort = cs;
    qsort(order, (size_t)n, sizeof *order, by_ready);
    cs->bk_set = sp_xmalloc(sizeof(int) * (size_t)(S + 1));
    cs->bk_sync = sp_xmalloc(sizeof(int) * (size_t)(S + 1));
    cs->bk_off = sp_xcalloc((size_t)S + 2, sizeof(int));
    cs->bk_stages = sp_xmalloc(sizeof(int) * (size_t)(S + 1));
    cs->bk_bytes = sp_xcalloc((size_t)S + 1, sizeof(double));
    cs->stage_bucket = sp_xmalloc(sizeof(int) * (size_t)(S + 1));
    for (int st = 0; st < S; st++) cs->stage_bucket[st] = -1;
    /* per rank set, as every member of it packs them: the set's stages in that order,
     * consecutive ones of the same kind joined until --bucket-mb */
    for (int set = 0, k = 0; set < cs->nsets; set++) {
        int cur = -1;
        for (int i = 0; i < n; i++) {
            int st = order[i];
            if (cs->set_of[st] != set) continue;
            double bytes = cs->c->param_bytes[st];
            bool join = cur >= 0 && cs->bk_sync[cur] == cs->sync[st] && cs->sync[st] == SYNC_ALLREDUCE &&
                        cs->bk_bytes[cur] + bytes <= cap;
            if (!join) {
                cur = cs->nb++;
                cs->bk_set[cur] = set;
                cs->bk_sync[cur] = cs->sync[st];
                cs->bk_off[cur] = k;
            }
            cs->bk_stages[k++] = st;
            cs->bk_off[cur + 1] = k;
            cs->bk_bytes[cur] += bytes;
            cs->stage_bucket[st] = cur;
        }
    }
    free(order);
    cs->pending0 = sp_xcalloc((size_t)(cs->nb + 1) * W, sizeof(int));
    for (int j = 0; j < cs->s->njobs; j++) {
        int bi = cs->stage_bucket[cs->s->jobs[j].stage];
        if (bi >= 0 && is_grad_job(cs->s->jobs[j].dir)) cs->pending0[bi * W + cs->s->compute[j]]++;
    }
}

/* ---- batch norm's messages (sp_sim_buffers) ---------------------------------------------- */

/* The allgathers inside job j: sync_bytes[*lo … *lo + count); F has its stage's forward
 * ones, the first backward job (B or δ) its backward ones, G none. */
static int sync_range(const csim *cs, int j, int *lo)
{
    const sp_sim_buffers *b = cs->cfg->buffers;
    if (!b || !b->sync_off) return 0;
    sp_job jb = cs->s->jobs[j];
    if (jb.dir == SP_BWD_GRAD) return 0;
    int k = 2 * jb.stage + (jb.dir != SP_FWD);
    *lo = b->sync_off[k];
    return b->sync_off[k + 1] - b->sync_off[k];
}

/* Whether every worker runs as many jobs with allgathers (they meet at each in turn). */
static bool sync_barrier(const csim *cs)
{
    int *n = sp_xcalloc((size_t)cs->W, sizeof(int)), lo;
    for (int j = 0; j < cs->s->njobs; j++) n[cs->s->compute[j]] += sync_range(cs, j, &lo) > 0;
    bool same = n[0] > 0;
    for (int w = 1; w < cs->W; w++) same &= n[w] == n[0];
    free(n);
    return same;
}

/* The step's buffer broadcasts, after the owners' weights on every lane; blocking. */
static void broadcast_buffers(csim *cs)
{
    const sp_sim_buffers *b = cs->cfg->buffers;
    for (int i = 0; b && cs->W > 1 && i < b->nbcast; i++) {
        double t0 = 0;
        for (int w = 0; w < cs->W; w++) t0 = fmax(t0, fmax(cs->lane[w], cs->free_at[w]));
        double t1 = t0 + set_us(cs, SP_COMM_BROADCAST, b->bcast_bytes[i], -1);
        for (int w = 0; w < cs->W; w++) {
            cs->lane[w] = cs->free_at[w] = t1;
            add_msg(cs, w, b->bcast_root[i], SP_MSG_BUFFERS, b->bcast_stage[i], b->bcast_bytes[i], 0, t0, t1);
        }
    }
}

sp_sim_buffers *sp_sim_buffers_new(const sp_schedule *s, const sp_sim_bn_layer *l, int n, bool sync)
{
    if (!s) sp_fail("sp_sim_buffers_new: argument 's' is NULL");
    if (n > 0 && !l) sp_fail("sp_sim_buffers_new: argument 'l' is NULL");
    int W = s->workers, S = s->stages;
    for (int k = 0; k < n; k++)
        if (l[k].stage < 0 || l[k].stage >= S)
            sp_fail("sp_sim_buffers_new: layer %d in stage %d of a schedule of %d stages", k, l[k].stage, S);
    sp_sim_buffers *b = sp_xcalloc(1, sizeof *b);
    int *root = sp_xcalloc((size_t)W + 1, sizeof(int)), *stage = sp_xcalloc((size_t)W + 1, sizeof(int));
    double *bytes = sp_xcalloc((size_t)W + 1, sizeof(double));
    int *owner = sp_xcalloc((size_t)n + 1, sizeof(int));
    bool *replicated = sp_xcalloc((size_t)n + 1, sizeof(bool)), *runs = sp_xcalloc((size_t)W, sizeof(bool));
    for (int k = 0; k < n; k++) {
        memset(runs, 0, sizeof(bool) * (size_t)W);
        int nranks = 0;
        owner[k] = W;
        for (int j = 0; j < s->njobs; j++)
            if (s->jobs[j].stage == l[k].stage && s->jobs[j].dir == SP_FWD && !runs[s->compute[j]]) {
                runs[s->compute[j]] = true;
                nranks++;
                if (s->compute[j] < owner[k]) owner[k] = s->compute[j];
            }
        replicated[k] = nranks > 1;
    }
    for (int r = 0; r < W; r++) {
        double sum = 0;
        int st = -1;
        for (int k = 0; k < n; k++)
            if (owner[k] == r && replicated[k] && l[k].buffer_bytes > 0) {
                sum += l[k].buffer_bytes;
                if (st < 0) st = l[k].stage;
            }
        if (sum <= 0) continue;
        int i = b->nbcast++;
        root[i] = r, stage[i] = st, bytes[i] = sum;
    }
    free(owner), free(replicated), free(runs);
    b->bcast_root = root, b->bcast_stage = stage, b->bcast_bytes = bytes;
    int nsync = 0;
    if (sync) {
        int *off = sp_xcalloc(2 * (size_t)S + 1, sizeof(int));
        double *sb = sp_xcalloc(2 * (size_t)n + 1, sizeof(double));
        for (int st = 0; st < S; st++) {
            for (int k = 0; k < n; k++)
                if (l[k].stage == st && l[k].sync_fwd_bytes > 0) sb[nsync++] = l[k].sync_fwd_bytes;
            off[2 * st + 1] = nsync;
            for (int k = n - 1; k >= 0; k--)
                if (l[k].stage == st && l[k].sync_bwd_bytes > 0) sb[nsync++] = l[k].sync_bwd_bytes;
            off[2 * st + 2] = nsync;
        }
        if (nsync) b->sync_off = off, b->sync_bytes = sb;
        else free(off), free(sb);
    }
    if (!b->nbcast && !nsync) {
        sp_sim_buffers_free(b);
        return NULL;
    }
    return b;
}

void sp_sim_buffers_free(sp_sim_buffers *b)
{
    if (!b) return;
    free((void *)b->bcast_root), free((void *)b->bcast_stage), free((void *)b->bcast_bytes);
    free((void *)b->sync_off), free((void *)b->sync_bytes);
    free(b);
}

/* ---- one pass over the step -------------------------------------------------------------- */

static double stage_opt(const csim *cs, int st)
{
    return cs->cfg->opt_us && stage_has_params(cs, st) ? cs->cfg->opt_us[st] : 0;
}

/* Does w step stage st's optimizer (exec_sync.c: the replicas, or the one owner)? */
static bool owns(const csim *cs, int st, int w)
{
    if (!stage_has_params(cs, st)) return false;
    if (cs->sync[st] == SYNC_ALLREDUCE) return cs->sets[cs->set_of[st]][w];
    return cs->owner[st] == w;
}

static void place_collective(csim *cs, int bi)
{
    int set = cs->bk_set[bi], W = cs->W;
    double t0 = 0;
    for (int w = 0; w < W; w++)
        if (cs->sets[set][w]) t0 = fmax(t0, fmax(cs->issue[bi * W + w], cs->lane[w]));
    bool red = cs->bk_sync[bi] == SYNC_OWNER;
    double t1 = t0 + set_us(cs, red ? SP_COMM_REDUCE : SP_COMM_ALLREDUCE, cs->bk_bytes[bi], set);
    int root = red ? cs->owner[cs->bk_stages[cs->bk_off[bi]]] : -1;
    for (int w = 0; w < W; w++)
        if (cs->sets[set][w]) {
            cs->lane[w] = t1;
            add_msg(cs, w, root, red ? SP_MSG_REDUCE : SP_MSG_ALLREDUCE, cs->bk_stages[cs->bk_off[bi]],
                    cs->bk_bytes[bi], cs->issue[bi * W + w], t0, t1);
        }
    cs->bk_end[bi] = t1;
}

/* w issues the ready buckets of set `set` strictly in bucket order (start_buckets); a
 * bucket every member has issued is placed. */
static void issue_buckets(csim *cs, int w, int set, double t)
{
    int W = cs->W;
    for (int *i = &cs->next_issue[set * W + w]; *i < cs->nb; (*i)++) {
        if (cs->bk_set[*i] != set) continue;
        if (cs->pending[*i * W + w] > 0) return;
        cs->issue[*i * W + w] = t;
    }
    for (int *k = &cs->next_place[set]; *k < cs->nb; (*k)++) {
        if (cs->bk_set[*k] != set) continue;
        for (int v = 0; v < W; v++)
            if (cs->sets[set][v] && cs->issue[*k * W + v] < 0) return;
        place_collective(cs, *k);
    }
}

/* A p2p message of real bytes (a calibrated model or a topology, not the teaching
 * --transfer-cost's abstract latency) above the eager limit. */
static bool rendezvous(const csim *cs, double bytes)
{
    bool topo = cs->cfg->topo && cs->cfg->topo->nodes > 0;
    return (cs->cfg->model || topo) && bytes > SIM_EAGER_BYTES;
}

/* Messages of job j (on w, finished at t): F's output, or δ/B's ∂l/∂y_{s−1}, to every
 * other worker with a successor of that direction (exec_stage.c's send_to_succs). */
static void send_outputs(csim *cs, int j, int w, double t)
{
    const sp_schedule *s = cs->s;
    sp_job jb = s->jobs[j];
    bool grads = is_bwd(jb.dir);
    if (jb.dir == SP_BWD_GRAD || (grads && jb.stage == 0)) return;
    int ms = grads ? jb.stage - 1 : jb.stage;
    double bytes = cs->cfg->out_bytes ? cs->cfg->out_bytes[ms] : cs->c ? cs->c->act_bytes[ms] : 0;
    int n;
    const int *succ = sp_schedule_succs(s, j, &n);
    for (int i = 0; i < n; i++) {
        int v = s->compute[succ[i]];
        if (v == w || is_bwd(s->jobs[succ[i]].dir) != grads) continue;
        bool dup = false;
        for (int k = 0; k < i; k++)
            dup |= s->compute[succ[k]] == v && is_bwd(s->jobs[succ[k]].dir) == grads;
        double t0 = fmax(t, cs->lane[w]), t1 = t0 + p2p_us(cs, bytes, w, v);
        if (!dup) {
            cs->lane[w] = cs->send_end[w] = t1;
            add_msg(cs, w, v, grads ? SP_MSG_GRAD : SP_MSG_ACT, ms, bytes, t, t0, t1);
        } else {
            t1 = -1;   /* the arrival already set for this worker */
        }
        /* every successor on v reading this output: the arrival of the one message */
        for (int k = 0; k < n; k++) {
            int q = succ[k];
            if (s->compute[q] != v || is_bwd(s->jobs[q].dir) != grads) continue;
            for (int e = s->pred_off[q]; e < s->pred_off[q + 1]; e++)
                if (s->preds[e] == j && cs->arrival[e] < 0 && t1 >= 0) {
                    cs->arrival[e] = t1;
                    cs->sent[e] = t0;
                    cs->xfer[e] = rendezvous(cs, bytes) ? t1 - t0 : -1;
                }
        }
    }
}

/* A pred edge p → j the executor turns into a message (a receive j waits for). */
static bool is_message(const sp_schedule *s, int p, int j)
{
    return s->compute[p] != s->compute[j] && is_bwd(s->jobs[p].dir) == is_bwd(s->jobs[j].dir) &&
           s->jobs[p].dir != SP_BWD_GRAD;
}

static void reset_pass(csim *cs)
{
    int W = cs->W, E = cs->s->pred_off[cs->s->njobs];
    for (int w = 0; w < W; w++) cs->lane[w] = cs->free_at[w] = cs->send_end[w] = cs->opt[w] = 0;
    for (int e = 0; e < E; e++) cs->arrival[e] = -1;
    memcpy(cs->pending, cs->pending0, sizeof(int) * (size_t)(cs->nb + 1) * W);
    for (int i = 0; i < cs->nb * W; i++) cs->issue[i] = -1, cs->outstanding[i] = true;
    memset(cs->next_issue, 0, sizeof(int) * (size_t)(cs->nsets + 1) * W);
    memset(cs->next_place, 0, sizeof(int) * (size_t)(cs->nsets + 1));
    for (int i = 0; i < cs->nb; i++) cs->bk_end[i] = 0;
    for (int w = 0; w < W; w++) cs->arrived[w] = false;
    cs->nmsg = 0;
}

/* The step's start: owners' broadcasts in stage order, then buckets with nothing to wait for. */
static void begin_step(csim *cs)
{
    for (int st = 0; st < cs->S; st++) {
        cs->bcast_end[st] = 0;
        if (cs->sync[st] != SYNC_OWNER) continue;
        const char *set = cs->sets[cs->set_of[st]];
        double t0 = 0;
        for (int w = 0; w < cs->W; w++)
            if (set[w]) t0 = fmax(t0, cs->lane[w]);
        double t1 = t0 + set_us(cs, SP_COMM_BROADCAST, cs->c->param_bytes[st], cs->set_of[st]);
        for (int w = 0; w < cs->W; w++)
            if (set[w]) {
                cs->lane[w] = t1;
                add_msg(cs, w, cs->owner[st], SP_MSG_BROADCAST, st, cs->c->param_bytes[st], 0, t0, t1);
            }
        cs->bcast_end[st] = t1;
    }
    broadcast_buffers(cs);
    for (int set = 0; set < cs->nsets; set++)
        for (int w = 0; w < cs->W; w++)
            if (cs->sets[set][w]) issue_buckets(cs, w, set, 0);
}

/* Start of job j on w: its messages, its weights, and (deferred) its bucket's update. */
static double job_start(csim *cs, int j, int w, bool *ready)
{
    const sp_schedule *s = cs->s;
    double t = cs->free_at[w];
    for (int e = s->pred_off[j]; e < s->pred_off[j + 1]; e++)
        if (is_message(s, s->preds[e], j) && cs->arrival[e] < 0) {
            *ready = false;
            return 0;
        }
    /* eager messages wait in the queue; rendezvous ones are pulled in turn (above) */
    for (int e = s->pred_off[j]; e < s->pred_off[j + 1]; e++)
        if (is_message(s, s->preds[e], j))
            t = cs->xfer[e] < 0 ? fmax(t, cs->arrival[e]) : fmax(t, cs->sent[e]) + cs->xfer[e];
    int st = s->jobs[j].stage, bi = cs->stage_bucket[st];
    if (cs->sync[st] == SYNC_OWNER && cs->sets[cs->set_of[st]][w]) t = fmax(t, cs->bcast_end[st]);
    if (cs->cfg->deferred && s->jobs[j].dir == SP_FWD && bi >= 0 && cs->outstanding[bi * cs->W + w]) {
        cs->outstanding[bi * cs->W + w] = false;
        if (cs->prev_end) t = fmax(t, cs->prev_end[bi] - cs->prev_T);
        double u = 0;
        for (int k = cs->bk_off[bi]; k < cs->bk_off[bi + 1]; k++)
            if (owns(cs, cs->bk_stages[k], w)) u += stage_opt(cs, cs->bk_stages[k]);
        t += u;
        cs->opt[w] += u;
    }
    *ready = true;
    return t;
}

/* Job j on w runs [t, t1]: its messages out, the loss and its buckets issued. */
static void job_done(csim *cs, sp_sim_comm *out, int j, int w, double t, double t1, int *loss_left, double *loss_issue)
{
    const sp_schedule *s = cs->s;
    out->start[j] = t;
    out->finish[j] = cs->free_at[w] = t1;
    sp_job jb = s->jobs[j];
    send_outputs(cs, j, w, t1);
    if (jb.dir == SP_FWD && jb.stage == cs->S - 1 && --loss_left[w] == 0) loss_issue[w] = t1;
    int bi = cs->stage_bucket[jb.stage];
    if (bi >= 0 && is_grad_job(jb.dir) && --cs->pending[bi * cs->W + w] == 0) issue_buckets(cs, w, cs->bk_set[bi], t1);
}

/* Jobs with batch norm's allgathers, worker w's job j arriving at t: with a barrier, the
 * workers' matching jobs once all have arrived (false: w waits); else j alone. Each
 * allgather follows an even share of the job's compute; every job ends past the last. */
static bool place_sync_job(csim *cs, sp_sim_comm *out, int j, int w, double t, int *pos, int *placed, int *loss_left,
                           double *loss_issue)
{
    int W = cs->W, lo, k = sync_range(cs, j, &lo);
    cs->arrived[w] = true;
    cs->arrive[w] = t;
    cs->arrive_job[w] = j;
    for (int v = 0; v < W && cs->barrier; v++)
        if (!cs->arrived[v]) return false;
    const double *bytes = cs->cfg->buffers->sync_bytes + lo;
    double t0 = t, dur = sp_job_duration(cs->s, cs->c, j) + cs->cfg->job_us, part = dur / (k + 1);
    for (int v = 0; v < W && cs->barrier; v++) t0 = fmax(t0, cs->arrive[v]);
    double at = t0;
    for (int i = 0; i < k; i++) {
        double a0 = at + part, a1 = a0 + (W > 1 ? set_us(cs, SP_COMM_ALLGATHER, bytes[i], -1) : 0);
        for (int v = 0; v < W; v++)
            if (v == w || cs->barrier)
                add_msg(cs, v, -1, SP_MSG_SYNC_BN, cs->s->jobs[cs->arrive_job[v]].stage, bytes[i], a0, a0, a1);
        at = a1;
    }
    at += part;
    for (int v = 0; v < W; v++)
        if (v == w || cs->barrier) {
            cs->arrived[v] = false;
            job_done(cs, out, cs->arrive_job[v], v, cs->arrive[v], at, loss_left, loss_issue);
            pos[v]++;
            (*placed)++;
        }
    return true;
}

static void place_jobs(csim *cs, sp_sim_comm *out, double *loss_issue)
{
    const sp_schedule *s = cs->s;
    const sp_sim *r = cs->r;
    int W = cs->W;
    int *pos = sp_xcalloc((size_t)W, sizeof(int)), *loss_left = sp_xcalloc((size_t)W, sizeof(int));
    for (int j = 0; j < s->njobs; j++)
        if (s->jobs[j].dir == SP_FWD && s->jobs[j].stage == cs->S - 1) loss_left[s->compute[j]]++;
    for (int w = 0; w < W; w++) loss_issue[w] = -1;
    for (int placed = 0; placed < s->njobs;) {
        int before = placed;
        for (int w = 0; w < W; w++)
            while (r->order_off[w] + pos[w] < r->order_off[w + 1]) {
                int j = r->order[r->order_off[w] + pos[w]], lo;
                if (cs->arrived[w]) break;   /* at a barrier: the last worker to arrive places it */
                bool ready;
                double t = job_start(cs, j, w, &ready);
                if (!ready) break;
                if (sync_range(cs, j, &lo) > 0) {
                    if (!place_sync_job(cs, out, j, w, t, pos, &placed, loss_left, loss_issue)) break;
                    continue;
                }
                job_done(cs, out, j, w, t, t + sp_job_duration(s, cs->c, j) + cs->cfg->job_us, loss_left, loss_issue);
                pos[w]++;
                placed++;
            }
        if (placed == before) sp_fail("simulate with communication: %s's order waits on itself", s->scheme->name);
    }
    free(pos);
    free(loss_left);
}

/* One step; returns its time. */
static double one_pass(csim *cs, sp_sim_comm *out)
{
    int W = cs->W;
    reset_pass(cs);
    begin_step(cs);
    double *loss_issue = sp_xmalloc(sizeof(double) * (size_t)W), *end = sp_xmalloc(sizeof(double) * (size_t)W);
    place_jobs(cs, out, loss_issue);
    double loss_t0 = 0, *upd = sp_xcalloc((size_t)W, sizeof(double));
    for (int w = 0; w < W; w++) {
        double e = fmax(cs->free_at[w], cs->send_end[w]);
        if (!cs->cfg->deferred) {   /* close_buckets, then the owners' updates */
            for (int bi = 0; bi < cs->nb; bi++)
                if (cs->sets[cs->bk_set[bi]][w]) e = fmax(e, cs->bk_end[bi]);
            for (int st = 0; st < cs->S; st++)
                if (owns(cs, st, w)) upd[w] += stage_opt(cs, st);
            cs->opt[w] += upd[w];
        }
        /* without a clip the loss starts after the updates, with one before the norm */
        end[w] = cs->cfg->clip ? e : e + upd[w];
        if (loss_issue[w] < 0) loss_issue[w] = end[w];
        loss_t0 = fmax(loss_t0, loss_issue[w]);
    }
    /* the transfer model leaves the loss's scalar free (sim_comm.h) */
    double loss_t1 = loss_t0 + (!cs->cfg->model && cs->cfg->transfer > 0 ? 0 : set_us(cs, SP_COMM_ALLREDUCE, 4, -1)), T = 0;
    for (int w = 0; w < W && W > 1; w++) add_msg(cs, w, -1, SP_MSG_LOSS, cs->S - 1, 4, loss_issue[w], loss_t0, loss_t1);
    if (cs->cfg->clip) {   /* exec_clip.c: the norm's allgather (every rank), then or beside the updates */
        double t0 = 0;
        for (int w = 0; w < W; w++) t0 = fmax(t0, fmax(end[w], cs->lane[w]));
        double t1 = W > 1 ? t0 + set_us(cs, SP_COMM_ALLGATHER, 8, -1) : 0;
        for (int w = 0; w < W; w++) {
            if (W > 1) add_msg(cs, w, -1, SP_MSG_NORM, -1, 8, end[w], t0, t1), cs->lane[w] = t1;
            end[w] = cs->cfg->clip == SP_CLIP_PLAIN ? fmax(end[w], t1) + upd[w] : fmax(end[w] + upd[w], t1);
        }
    }
    for (int w = 0; w < W; w++) T = fmax(T, fmax(end[w], W > 1 ? loss_t1 : 0));
    free(upd);
    free(loss_issue);
    free(end);
    return T;
}

/* Messages per rank in issue order (stable: equal issue times keep their placement order). */
static void sort_messages(csim *cs)
{
    int n = cs->nmsg;
    int *idx = sp_xmalloc(sizeof(int) * (size_t)(n + 1));
    for (int i = 0; i < n; i++) idx[i] = i;
    for (int i = 1; i < n; i++) {   /* insertion sort: stable, n is small (messages of a step) */
        int v = idx[i], k = i;
        while (k > 0) {
            const sp_sim_msg *a = &cs->msg[idx[k - 1]], *b = &cs->msg[v];
            double ka = cs->msg_key[idx[k - 1]], kb = cs->msg_key[v];
            if (a->rank < b->rank || (a->rank == b->rank && ka <= kb)) break;
            idx[k] = idx[k - 1];
            k--;
        }
        idx[k] = v;
    }
    sp_sim_msg *m = sp_xmalloc(sizeof *m * (size_t)(n + 1));
    for (int i = 0; i < n; i++) m[i] = cs->msg[idx[i]];
    free(cs->msg);
    cs->msg = m;
    free(idx);
}

void sp_simulate_comm(const sp_schedule *s, const sp_costs *c, const sp_sim *r, const sp_sim_comm_cfg *cfg,
                      sp_sim_comm *out)
{
    int W = s->workers, S = s->stages;
    memset(out, 0, sizeof *out);
    out->njobs = s->njobs;
    out->workers = W;
    out->start = sp_xcalloc((size_t)s->njobs + 1, sizeof(double));
    out->finish = sp_xcalloc((size_t)s->njobs + 1, sizeof(double));
    csim cs = {.s = s, .c = c, .r = r, .cfg = cfg, .W = W, .S = S};
    setup_weights(&cs);
    setup_buckets(&cs);
    int nb1 = cs.nb + 1;
    cs.lane = sp_xcalloc((size_t)W, sizeof(double));
    cs.free_at = sp_xcalloc((size_t)W, sizeof(double));
    cs.send_end = sp_xcalloc((size_t)W, sizeof(double));
    cs.opt = sp_xcalloc((size_t)W, sizeof(double));
    cs.arrival = sp_xcalloc((size_t)s->pred_off[s->njobs] + 1, sizeof(double));
    cs.sent = sp_xcalloc((size_t)s->pred_off[s->njobs] + 1, sizeof(double));
    cs.xfer = sp_xcalloc((size_t)s->pred_off[s->njobs] + 1, sizeof(double));
    cs.bcast_end = sp_xcalloc((size_t)S + 1, sizeof(double));
    cs.pending = sp_xcalloc((size_t)nb1 * W, sizeof(int));
    cs.issue = sp_xcalloc((size_t)nb1 * W, sizeof(double));
    cs.outstanding = sp_xcalloc((size_t)nb1 * W, sizeof(bool));
    cs.next_issue = sp_xcalloc((size_t)(cs.nsets + 1) * W, sizeof(int));
    cs.next_place = sp_xcalloc((size_t)cs.nsets + 1, sizeof(int));
    cs.bk_end = sp_xcalloc((size_t)nb1, sizeof(double));
    cs.arrived = sp_xcalloc((size_t)W, sizeof(bool));
    cs.arrive = sp_xcalloc((size_t)W, sizeof(double));
    cs.arrive_job = sp_xcalloc((size_t)W, sizeof(int));
    cs.barrier = sync_barrier(&cs);
    double T = one_pass(&cs, out);
    /* deferred: the steady state, each step's forwards waiting for the previous step's
     * buckets (their ends one step time earlier) — iterated to a fixed point */
    if (cfg->deferred && cs.nb > 0) {
        cs.prev_end = sp_xcalloc((size_t)nb1, sizeof(double));
        for (int it = 0; it < 20; it++) {
            memcpy(cs.prev_end, cs.bk_end, sizeof(double) * (size_t)cs.nb);
            cs.prev_T = T;
            double T2 = one_pass(&cs, out);
            bool same = fabs(T2 - T) <= 1e-9 * fmax(1.0, T);
            T = T2;
            if (same) break;
        }
    }
    cs.record = true;   /* the last pass again, its messages kept */
    if (cs.prev_end) memcpy(cs.prev_end, cs.bk_end, sizeof(double) * (size_t)cs.nb), cs.prev_T = T;
    out->latency = one_pass(&cs, out);
    sort_messages(&cs);
    out->msg = cs.msg;
    out->nmsg = cs.nmsg;
    out->comm_us = sp_xcalloc((size_t)W, sizeof(double));
    out->opt_us = sp_xcalloc((size_t)W, sizeof(double));
    out->messages = sp_xcalloc((size_t)W, sizeof(int));
    for (int i = 0; i < out->nmsg; i++) {
        out->messages[out->msg[i].rank]++;
        if (out->msg[i].kind != SP_MSG_LOSS) out->comm_us[out->msg[i].rank] += out->msg[i].end - out->msg[i].start;
    }
    memcpy(out->opt_us, cs.opt, sizeof(double) * (size_t)W);
    out->transfer = cfg->model ? 0 : cfg->transfer;
    for (int i = 0; i < cs.nsets; i++) free(cs.sets[i]), free(cs.set_ranks[i]);
    free(cs.set_ranks);
    free(cs.sets), free(cs.sync), free(cs.owner), free(cs.set_of), free(cs.set_min), free(cs.set_size);
    free(cs.bk_set), free(cs.bk_sync), free(cs.bk_off), free(cs.bk_stages), free(cs.bk_bytes);
    free(cs.stage_bucket), free(cs.pending0), free(cs.lane), free(cs.free_at), free(cs.send_end), free(cs.opt);
    free(cs.arrival), free(cs.sent), free(cs.xfer), free(cs.bcast_end), free(cs.pending), free(cs.issue), free(cs.outstanding);
    free(cs.next_issue), free(cs.next_place), free(cs.bk_end), free(cs.prev_end), free(cs.msg_key);
    free(cs.arrived), free(cs.arrive), free(cs.arrive_job);
}

void sp_sim_comm_free(sp_sim_comm *c)
{
    free(c->start);
    free(c->finish);
    free(c->comm_us);
    free(c->opt_us);
    free(c->messages);
    free(c->msg);
    free(c->span);
    memset(c, 0, sizeof *c);
}
