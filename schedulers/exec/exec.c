/* exec.c — runs the master schedule on MPI ranks (see exec.h for the contract): the
 * executor's life cycle and the runtime of a step.
 *
 * Setup (collective, identical on every rank): stage costs (measured on rank 0 and
 * broadcast, or read from a CSV), sp_schedule_new + sp_simulate (exec_setup.c), then from
 * the job table alone: which ranks compute each stage and which hold its weights → one
 * communicator per distinct set of ranks, gradient buckets (exec_sync.c). A step then
 * walks sim.order[rank] — nothing else decides what runs when — running each job
 * (exec_stage.c), or, for --parallel scan, the scan across ranks (exec_bppsa.c). The
 * pieces share exec_internal.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/error.h"
#include "core/threads.h"
#include "schedulers/exec/exec_internal.h"

sp_exec *sp_exec_new(sp_comm *world, sp_model *m, sp_optim *o, const sp_exec_cfg *cfg, int sample_ndim,
                     const int *sample_shape, int batch)
{
    sp_exec *x = sp_xcalloc(1, sizeof *x);
    x->world = world;
    x->rank = sp_comm_rank(world);
    x->W = sp_comm_size(world);
    x->m = m;
    x->opt = o;
    x->cfg = *cfg;
    /* One name per scheme: ddp with ooo's order is "ddp-ooo" (--parallel ddp-ooo, or the
     * apps' older spelling --parallel ddp --backward ooo), as build/schedule names it. */
    if (!strcmp(cfg->scheme, "ddp-ooo")) x->cfg.ooo = true;
    else if (cfg->ooo && !strcmp(cfg->scheme, "ddp")) x->cfg.scheme = "ddp-ooo";
    cfg = &x->cfg;
    x->batch = batch;
    if (!strcmp(cfg->scheme, "custom")) {   /* the list names the micro-batches (B's default) */
        if (!cfg->actions) sp_comm_fail_all(world, "--parallel custom needs --actions FILE.csv (one row of actions per rank)");
        if (sp_actions_read_csv(cfg->actions, &x->actions) != SP_OK)
            sp_comm_fail_all(world, "--parallel custom: %s", sp_last_error());
        if (x->actions->ignored && x->rank == 0)
            fprintf(stderr, "note: %s: %d communication and bookkeeping action%s of PyTorch's form (SEND_F, RECV_B, "
                            "REDUCE_GRAD, ...) not run as such: the executor sends what the chunks' placement needs\n",
                    cfg->actions, x->actions->ignored, x->actions->ignored == 1 ? "" : "s");
    }
    x->B = cfg->micro > 0 ? cfg->micro : x->actions ? x->actions->micro : is_scan(cfg->scheme) ? 1
           : is_pipeline(cfg->scheme) || is_actions(cfg->scheme) ? 2 * x->W : x->W;
    x->in_numel = sp_shape_numel(sample_ndim, sample_shape);
    sp_exec_setup_stages(x, sample_ndim, sample_shape);   /* the model's segments (a chain's layers) */
    sp_exec_check_config(x);
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
    sp_exec_buffers_keep(x);   /* measuring the costs runs forwards: the buffers as they were */
    sp_exec_setup_costs(x, sample_ndim, sample_shape);
    sp_exec_build_schedule(x);
    if (is_scan(cfg->scheme)) sp_exec_check_scan(x);
    if (x->tscan) {   /* every rank holds every weight and steps them all (the same sums everywhere) */
        for (int s = 0; s < x->S; s++) x->st[s].owns = true, x->st[s].comm = x->st[s].bucket = -1;
        x->comms = sp_xcalloc(1, sizeof *x->comms);
        x->comm_min = sp_xcalloc(1, sizeof(int));
        x->buckets = sp_xcalloc(1, sizeof *x->buckets);
        x->next_bucket = sp_xcalloc(1, sizeof(int));
    } else {
        sp_exec_setup_weights(x);
        sp_exec_setup_buckets(x);
        sp_exec_buffers_setup(x);
    }
    sp_exec_setup_blocked(x);
    /* $SCANPROP_EXEC_STEPWISE=1: every update at the end of its own step (the comparison
     * in docs/DISTRIBUTED.md) */
    const char *stepwise = getenv("SCANPROP_EXEC_STEPWISE");
    x->deferred = is_ddp(cfg->scheme) && x->nbuckets > 0 && !(stepwise && !strcmp(stepwise, "1"));
    if (cfg->clip_grad_norm > 0) x->deferred = false;   /* every update waits for the global norm */
    for (int j = 0; j < x->sched->njobs && !x->tscan; j++)
        if (local(x, j) && x->sched->jobs[j].dir == SP_FWD && x->sched->jobs[j].stage == x->S - 1) x->loss_jobs++;
    for (int s = 0; s < x->S; s++)
        if (x->st[s].nfloats && (x->st[s].bucket < 0 || x->st[s].sync != SYNC_ALLREDUCE)) x->deferred = false;
    x->meas = sp_xcalloc((size_t)x->S * 6, sizeof *x->meas);
    int SB = x->S * x->B;
    x->tapes = sp_xcalloc((size_t)x->B, sizeof *x->tapes);
    for (int b = 0; b < x->B; b++) sp_tape_init(&x->tapes[b]);
    x->node = sp_xcalloc((size_t)SB, sizeof *x->node);
    if (x->dag) {
        x->first = sp_xcalloc((size_t)SB, sizeof *x->first);
        x->walked = sp_xcalloc((size_t)SB, sizeof *x->walked);
    }
    x->dy = sp_xcalloc((size_t)SB, sizeof *x->dy);
    x->have_dy = sp_xcalloc((size_t)SB, sizeof *x->have_dy);
    x->loss = sp_xcalloc((size_t)x->B, sizeof *x->loss);
    x->xin = sp_xcalloc((size_t)x->B, sizeof *x->xin);
    x->yin = sp_xcalloc((size_t)x->B, sizeof *x->yin);
    x->rows = sp_xcalloc((size_t)x->B, sizeof *x->rows);
    x->done = sp_xcalloc((size_t)x->sched->njobs, sizeof *x->done);
    x->order_rec = sp_xmalloc(sizeof(int) * (size_t)(x->sched->njobs + 1));
    x->log_msgs = getenv("SCANPROP_EXEC_MSGS") != NULL;
    /* Every rank starts its first step together (the measured costs took rank 0 a while). */
    sp_barrier(world);
    if (cfg->trace_path) sp_exec_sync_clock(x);   /* the trace's timestamps on rank 0's clock */
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
    free(x->first);
    free(x->walked);
    free(x->blk_make);
    free(x->dy);
    free(x->have_dy);
    free(x->loss);
    free(x->xin);
    free(x->yin);
    free(x->rows);
    free(x->done);
    free(x->sends);
    free(x->order_rec);
    free(x->step_wall);
    free(x->ev);
    free(x->meas);
    sp_exec_mem_free(x);
    sp_exec_buffers_free(x);
    sp_exec_clip_free(x);
    sp_exec_pred_free(x);
    for (int s = 0; x->st && s < x->S; s++) free(x->st[s].params), free(x->st[s].wreq);
    free(x->st);
    sp_sim_free(&x->sim);
    sp_schedule_free(x->sched);
    sp_actions_free(x->actions);
    sp_costs_free(x->costs);
    free(x);
}

int sp_exec_rank(const sp_exec *x) { return x->rank; }
int sp_exec_workers(const sp_exec *x) { return x->W; }
const sp_schedule *sp_exec_schedule(const sp_exec *x) { return x->sched; }
const sp_costs *sp_exec_costs(const sp_exec *x) { return x->costs; }
const char *sp_exec_scheme(const sp_exec *x) { return x->cfg.scheme; }

/* The schedules build/schedule simulates (the action-list ones included), and scan (BPPSA across ranks: GPipe's forward,
 * then a scan, no schedule of its own) — the one list --parallel offers. */
const char *sp_exec_scheme_names(void)
{
    static char buf[512];
    snprintf(buf, sizeof buf, "%s|scan", sp_schedule_all_names());
    return buf;
}

bool sp_exec_scheme_known(const char *name)
{
    const char *names = sp_exec_scheme_names();
    size_t n = strlen(name);
    for (const char *p = names; *p; p += strcspn(p, "|"), p += *p == '|')
        if (strcspn(p, "|") == n && !strncmp(p, name, n)) return true;
    return false;
}

/* ---- a step ---------------------------------------------------------------------------- */

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
    if (x->walked) memset(x->walked, 0, sizeof *x->walked * (size_t)SB);
    memset(x->done, 0, sizeof *x->done * (size_t)x->sched->njobs);
    x->nsends = 0;
    x->loss_left = x->loss_jobs;
    x->loss_started = false;
    sp_exec_mem_begin_step(x);
    sp_exec_sync_begin_step(x);
    sp_exec_buffers_begin_step(x);
}

/* The shares of the micro-batches whose last stage ran here, summed over the ranks. */
static void start_loss(sp_exec *x)
{
    float loss = 0;
    for (int b = 0; b < x->B; b++)
        if (x->loss[b] && (!x->tscan || x->rank == 0))   /* the time scan: every rank has the loss */
            loss += (float)x->rows[b] / (float)x->batch * x->loss[b]->out.data[0];
    x->loss_buf = loss;
    if (x->W > 1) sp_exec_log_msg(x, -1, SP_MSG_LOSS, x->S - 1, sizeof(float));
    sp_iallreduce(x->world, &x->loss_buf, 1, &x->loss_req);
    x->loss_started = true;
}

static sp_exec_job_hook g_job_hook;

void sp_exec_set_job_hook(sp_exec_job_hook hook) { g_job_hook = hook; }

/* The hook (sp_exec_set_job_hook), halfway through this rank's jobs of a step: its delay
 * is added to the next job's compute. */
static void job_hook(sp_exec *x, int i, int njobs)
{
    if (!g_job_hook || i != njobs / 2) return;
    double delay = g_job_hook(x->rank, x->steps + 1);
    if (delay > 0) x->delay_s = delay;
}

float sp_exec_step(sp_exec *x, const sp_tensor *in, const int *labels, double *fwd_s, double *bwd_s,
                   double *step_s)
{
    double t0 = sp_now(), c0 = sp_comm_wait_seconds();
    if (x->steps == 0) x->trace_t0 = t0;
    x->fwd_s = x->bwd_s = 0;
    begin_step(x, in, labels);
    if (x->tscan) {
        sp_exec_time_scan_forward(x);
        sp_exec_time_scan_backward(x);
    }
    const int *order = x->tscan ? NULL : x->sim.order + x->sim.order_off[x->rank];
    int njobs = x->tscan ? 0 : x->sim.order_off[x->rank + 1] - x->sim.order_off[x->rank];
    for (int i = 0; i < njobs; i++) {
        int job = order[i];
        sp_job j = x->sched->jobs[job];
        job_hook(x, i, njobs);
        sp_exec_label_job(x, job, x->steps);
        double j0 = sp_now(), w0 = sp_comm_wait_seconds(), b0 = x->fwd_s + x->bwd_s;
        if (j.dir == SP_FWD) {
            sp_exec_run_forward(x, job, j);
            if (j.stage == x->S - 1 && --x->loss_left == 0) start_loss(x);
        }
        else if (is_scan(x->cfg.scheme)) continue;   /* the backward is the scan below */
        else sp_exec_run_backward(x, job, j);
        x->done[job] = true;
        sp_exec_trace_add(x, job, j0, sp_now());
        if (x->steps == 0) x->order_rec[x->norder++] = job;
        sp_exec_poll_buckets(x);
        if (x->steps > 0) {   /* the job's time that was neither its compute (a deferred update
                               * included: finish_bucket counts it in bwd_s) nor waiting */
            x->job_overhead += sp_now() - j0 - (x->fwd_s + x->bwd_s - b0) - (sp_comm_wait_seconds() - w0);
            x->njobs_late++;
        }
    }
    if (is_scan(x->cfg.scheme) && !x->tscan) sp_exec_scan_backward(x);
    /* Gradients: every bucket finished, unpacked where the sum landed, and the owners'
     * updates — or, for ddp, left in flight: the next step's forward of a stage applies
     * its bucket's update first (cross-step overlap). */
    sp_exec_close_buckets(x);
    sp_wait_all(x->sends, x->nsends);
    if (x->cfg.clip_grad_norm > 0) {
        if (!x->loss_started) start_loss(x);   /* the world's collectives start in one order on every rank */
        sp_exec_clip_update(x);
    } else {
        sp_exec_update_owners(x);
    }
    /* The batch's loss (started after the rank's last loss, or now). */
    sp_comm_set_label("loss allreduce");
    if (!x->loss_started) start_loss(x);
    double l0 = sp_now();
    sp_wait(&x->loss_req);
    float loss = x->loss_buf;
    double t1 = sp_now();
    sp_exec_trace_add(x, WAIT_LOSS, l0, t1);
    x->busy += x->fwd_s + x->bwd_s;
    double c1 = sp_comm_wait_seconds();
    x->comm_s += c1 - c0;
    x->wall += t1 - t0;
    if (x->steps == x->cap_step_wall) {
        x->cap_step_wall = x->cap_step_wall ? 2 * x->cap_step_wall : 64;
        x->step_wall = sp_xrealloc(x->step_wall, sizeof(double) * (size_t)x->cap_step_wall);
    }
    x->step_wall[x->steps] = t1 - t0;
    if (x->steps > 0) {   /* the first step warms up (left out as from the measured costs) */
        x->wall_late += t1 - t0;
        x->comm_late += c1 - c0;
    }
    x->steps++;
    if (fwd_s) *fwd_s = x->fwd_s;
    if (bwd_s) *bwd_s = x->bwd_s;
    if (step_s) *step_s = t1 - t0;
    return loss;
}

