/* exec_sync.c — weights and gradients across the executor's ranks. From the job table
 * alone: which ranks compute each stage and which hold its weights → one communicator per
 * distinct set of ranks (replicas: an allreduce of the gradients; one owner: a broadcast
 * of the weights at the start of the step and a reduce of the gradients to it), and
 * gradient buckets started in the same order on every member. The owners step the
 * optimizer; ddp's updates wait for the next step's forward (cross-step overlap). */
#include <stdlib.h>
#include <string.h>
#include "core/device.h"
#include "core/error.h"
#include "core/threads.h"
#include "schedulers/exec/exec_internal.h"

/* ---- setup: who holds which weights ------------------------------------------------------- */

static int find_or_add_set(sp_exec *x, char **sets, int *nsets, const char *member)
{
    for (int i = 0; i < *nsets; i++)
        if (!memcmp(sets[i], member, (size_t)x->W)) return i;
    sets[*nsets] = sp_xmalloc((size_t)x->W);
    memcpy(sets[*nsets], member, (size_t)x->W);
    return (*nsets)++;
}

void sp_exec_setup_weights(sp_exec *x)
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
 * order S−1 … 0 for the conventional schemes; ooo's order for ddp-ooo), per communicator
 * (rank set): its consecutive stages of the same kind packed until --bucket-mb, so every
 * member packs alike whatever other sets it is in (sim_comm.c's setup_buckets the same);
 * the rank's own communicators only. */
void sp_exec_setup_buckets(sp_exec *x)
{
    double cap = x->cfg.bucket_mb > 0 ? x->cfg.bucket_mb * 1024 * 1024 / sizeof(float) : 0;
    x->buckets = sp_xcalloc((size_t)x->S, sizeof *x->buckets);
    x->nbuckets = 0;
    bucket **last = sp_xcalloc((size_t)(x->ncomms ? x->ncomms : 1), sizeof *last);   /* per communicator */
    int *order = sp_xmalloc(sizeof(int) * (size_t)x->S), n = 0;
    for (int st = x->S - 1; st >= 0; st--)
        if (x->st[st].comm >= 0 && x->st[st].sync != SYNC_NONE) order[n++] = st;
    g_sort_exec = x;
    qsort(order, (size_t)n, sizeof *order, by_ready);
    for (int i = 0; i < n; i++) {
        int st = order[i];
        stage_info *si = &x->st[st];
        if (si->comm < 0 || si->sync == SYNC_NONE) continue;
        bucket *cur = last[si->comm];
        bool join = cur && cur->sync == si->sync && si->sync == SYNC_ALLREDUCE && (double)(cur->n + si->nfloats) <= cap;
        if (!join) {
            cur = &x->buckets[x->nbuckets++];
            cur->stages = sp_xmalloc(sizeof(int) * (size_t)x->S);
            cur->comm = si->comm;
            cur->sync = si->sync;
            cur->root = si->owner_in_comm;
            last[si->comm] = cur;
        }
        cur->stages[cur->nstages++] = st;
        cur->n += si->nfloats;
        si->bucket = (int)(cur - x->buckets);
    }
    free(order);
    free(last);
    for (int i = 0; i < x->nbuckets; i++) x->buckets[i].buf = sp_xmalloc(sizeof(float) * (x->buckets[i].n + 1));
    x->next_bucket = sp_xcalloc((size_t)(x->ncomms ? x->ncomms : 1), sizeof(int));
}

/* ---- a step ----------------------------------------------------------------------------- */

/* The gradients of the bucket's stages into its buffer (in), or the buffer back into them. */
static void pack(sp_exec *x, bucket *bk, bool in)
{
    size_t off = 0;
    for (int i = 0; i < bk->nstages; i++) {
        const stage_info *si = &x->st[bk->stages[i]];
        for (int p = 0; p < si->nparams; p++) {
            sp_tensor *g = &si->params[p]->grad;
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
        sp_exec_log_msg(x, bk->sync == SYNC_ALLREDUCE ? -1 : x->st[bk->stages[0]].owner,
                        bk->sync == SYNC_ALLREDUCE ? SP_MSG_ALLREDUCE : SP_MSG_REDUCE, bk->stages[0],
                        4.0 * (double)bk->n);
        if (bk->sync == SYNC_ALLREDUCE) sp_iallreduce(c, bk->buf, bk->n, &bk->req);
        else sp_ireduce(c, bk->buf, bk->n, bk->root, &bk->req);
        bk->started = true;
        bk->t_start = sp_now();
        bk->t_done = 0;
        x->next_bucket[comm] = i + 1;
    }
}

/* Start of a step, after the runtime has reset the micro-batches. */
void sp_exec_sync_begin_step(sp_exec *x)
{
    for (int i = 0; i < x->nbuckets; i++) {
        bucket *bk = &x->buckets[i];
        bk->pending = 0;
        bk->started = false;
        for (int k = 0; k < bk->nstages; k++) bk->pending += x->st[bk->stages[k]].grad_jobs;
    }
    for (int c = 0; c < x->ncomms; c++) x->next_bucket[c] = 0;
    /* deferred: each bucket's stages are zeroed after their update (finish_bucket) */
    if (!x->deferred || x->steps == 0) sp_optim_zero_grad(x->opt);
    /* Weights whose master copy lives elsewhere: fetch them all now, wait per stage. */
    for (int s = 0; s < x->S; s++) {
        stage_info *si = &x->st[s];
        if (si->sync != SYNC_OWNER || si->comm < 0) continue;
        sp_exec_log_msg(x, si->owner, SP_MSG_BROADCAST, s, 4.0 * (double)si->nfloats);
        for (int p = 0; p < si->nparams; p++)
            sp_ibroadcast(x->comms[si->comm], si->params[p]->value.data, si->params[p]->value.numel,
                          si->owner_in_comm, &si->wreq[p]);
    }
    /* Buckets with no local gradient job (a rank that computes none of the stage but
     * owns it) start at once. */
    for (int c = 0; c < x->ncomms; c++) start_buckets(x, c);
}

void sp_exec_grad_done(sp_exec *x, int s)
{
    stage_info *si = &x->st[s];
    if (si->bucket < 0) return;
    bucket *bk = &x->buckets[si->bucket];
    if (--bk->pending == 0) start_buckets(x, bk->comm);
}

/* Wait for bucket i's collective and unpack its sum; with update (ddp's deferred
 * updates), also step its stages with the learning rate of the step it belongs to and
 * zero their gradients for the step that runs now. */
void sp_exec_finish_bucket(sp_exec *x, int i, bool update)
{
    bucket *bk = &x->buckets[i];
    double w0 = sp_now();
    sp_wait(&bk->req);
    double w1 = sp_now();
    if (bk->t_done == 0) bk->t_done = w1;
    sp_exec_trace_add_step(x, -1 - i, bk->step, bk->t_start, bk->t_done);
    if (w1 - w0 > 1e-6) sp_exec_trace_add(x, WAIT_EV - i, w0, w1);
    if (bk->sync == SYNC_ALLREDUCE || x->comms[bk->comm]->rank == bk->root) pack(x, bk, false);
    bk->outstanding = false;
    if (!update) return;
    double u0 = sp_now(), lr = sp_optim_get_lr(x->opt);
    sp_optim_set_lr(x->opt, x->pending_lr);
    for (int k = 0; k < bk->nstages; k++) {
        const stage_info *si = &x->st[bk->stages[k]];
        if (si->owns) sp_exec_step_stage(x, bk->stages[k], bk->step);
        for (int p = 0; p < si->nparams; p++) sp_zero(&si->params[p]->grad);
    }
    sp_optim_set_lr(x->opt, lr);
    x->bwd_s += sp_now() - u0;
}

/* Every update still outstanding (before the weights are read: evaluation, saving). */
void sp_exec_flush_updates(sp_exec *x)
{
    sp_comm_set_label("the last step's gradient allreduce");
    for (int i = 0; i < x->nbuckets; i++)
        if (x->buckets[i].outstanding) sp_exec_finish_bucket(x, i, true);
}

/* Notice finished collectives early (the trace shows when each one ended). */
void sp_exec_poll_buckets(sp_exec *x)
{
    for (int i = 0; i < x->nbuckets; i++) {
        bucket *bk = &x->buckets[i];
        if ((bk->started || bk->outstanding) && bk->t_done == 0 && sp_test(&bk->req)) bk->t_done = sp_now();
    }
}

/* After the step's jobs: every bucket has started; each is waited for and unpacked where
 * the sum landed — or, for ddp (deferred), left in flight for the next step's forward. */
void sp_exec_close_buckets(sp_exec *x)
{
    sp_comm_set_label("gradient synchronisation");
    for (int i = 0; i < x->nbuckets; i++) {
        bucket *bk = &x->buckets[i];
        if (!bk->started) sp_comm_die(x->world, "internal: gradient bucket %d never started", i);
        bk->step = x->steps;
        if (x->deferred) bk->outstanding = true;
        else sp_exec_finish_bucket(x, i, false);
    }
    x->pending_lr = sp_optim_get_lr(x->opt);
}

/* The owners step their stages (deferred: finish_bucket does, in the next step). */
void sp_exec_update_owners(sp_exec *x)
{
    double u0 = sp_now();
    for (int s = 0; s < x->S && !x->deferred; s++) {
        stage_info *si = &x->st[s];
        if (si->owns && si->nfloats) sp_exec_step_stage(x, s, x->steps);
    }
    x->bwd_s += sp_now() - u0;
}

void sp_exec_step_stage(sp_exec *x, int s, long step)
{
    const stage_info *si = &x->st[s];
    double t0 = sp_now();
    sp_optim_step_params(x->opt, si->params, si->nparams);
    if (step == 0) return;   /* the first update warms up (its state is allocated) */
    if (!x->opt_meas) {
        x->opt_meas = sp_xcalloc(2 * (size_t)x->S, sizeof *x->opt_meas);
        x->opt_step = sp_xmalloc(sizeof *x->opt_step * (size_t)x->S);
        for (int k = 0; k < x->S; k++) x->opt_step[k] = -1;
    }
    x->opt_meas[2 * s] += sp_now() - t0;
    if (x->opt_step[s] != step) x->opt_meas[2 * s + 1] += 1, x->opt_step[s] = step;   /* a redone step: one */
}

/* ---- weights for evaluation and saving --------------------------------------------------- */

/* Every rank gets every stage's weights from the lowest rank that steps it. */
void sp_exec_sync_weights(sp_exec *x)
{
    sp_exec_flush_updates(x);
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
        for (int p = 0; p < si->nparams; p++)
            sp_broadcast(x->world, si->params[p]->value.data, si->params[p]->value.numel, root);
    }
    sp_exec_buffers_sync(x);
}
