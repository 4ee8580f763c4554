/* exec_predict.c — the simulator's step for the schedule this run executed (exec.h:
 * sp_exec_predict_step_ms): the run's measured job costs and optimizer steps (what
 * --costs-out writes), the order the ranks walked (x->sim), the executor's buckets, the
 * message sizes of its stages' shapes, its clip, and the run's communication model,
 * through sim_comm.c; for --parallel scan the scan's program per rank (exec_bppsa.c) with
 * its measured phases, through sim_prog.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/io/fileio.h"
#include "schedulers/exec/exec_internal.h"
#include "schedulers/sim/sim_comm.h"

sp_costs *sp_exec_measured_costs(sp_exec *x)
{
    int S = x->S;
    float *v = sp_xcalloc(8 * (size_t)S, sizeof(float));
    for (int i = 0; i < 6 * S; i++) v[i] = (float)x->meas[i];
    for (int i = 0; i < 2 * S && x->opt_meas; i++) v[6 * S + i] = (float)x->opt_meas[i];
    sp_allreduce(x->world, v, 8 * (size_t)S);
    sp_costs *c = sp_costs_uniform(S, 0, 0, 0);
    double *dst[3] = {c->fwd, c->delta, c->grad}, *plan[3] = {x->costs->fwd, x->costs->delta, x->costs->grad};
    for (int s = 0; s < S; s++) {
        memcpy(c->name[s], x->costs->name[s], SP_STAGE_NAME);
        c->act_bytes[s] = x->costs->act_bytes[s];
        c->param_bytes[s] = x->costs->param_bytes[s];
        for (int p = 0; p < 3; p++) {
            float n = v[6 * s + 3 + p];
            dst[p][s] = n > 0 ? 1e6 * v[6 * s + p] / n : plan[p][s];
        }
        float n = v[6 * S + 2 * s + 1];
        c->has_opt |= n > 0;
        c->opt[s] = n > 0 ? 1e6 * v[6 * S + 2 * s] / n : x->costs->has_opt ? x->costs->opt[s] : 0;
    }
    c->has_opt |= x->costs->has_opt;
    snprintf(c->unit, sizeof c->unit, "us");
    free(v);
    return c;
}

/* The executor's own time per job (µs), mean over the ranks' jobs after the first step:
 * posting sends, tape and bookkeeping, polling the buckets — the part of a job that is
 * neither its ops' compute (the job costs above) nor waiting. Collective. */
double sp_exec_job_us(sp_exec *x)
{
    float v[2] = {(float)x->job_overhead, (float)x->njobs_late};
    sp_allreduce(x->world, v, 2);
    return v[1] > 0 ? 1e6 * (double)v[0] / (double)v[1] : 0;
}

/* Every rank's scan phases ([W·SCAN_PHASES] mean µs over the steps after the first;
 * the first step's where only one ran). Collective. */
static double *scan_phases(sp_exec *x)
{
    float *mine = sp_xmalloc(sizeof(float) * SCAN_PHASES), *all = sp_xmalloc(sizeof(float) * SCAN_PHASES * (size_t)x->W);
    const double *sum = x->scan_steps > 0 ? x->scan_ph : x->scan_ph0;
    double n = x->scan_steps > 0 ? (double)x->scan_steps : 1;
    for (int i = 0; i < SCAN_PHASES; i++) mine[i] = (float)(1e6 * sum[i] / n);
    sp_allgather(x->world, mine, all, SCAN_PHASES);
    double *ph = sp_xmalloc(sizeof(double) * SCAN_PHASES * (size_t)x->W);
    for (int i = 0; i < SCAN_PHASES * x->W; i++) ph[i] = all[i];
    free(mine);
    free(all);
    return ph;
}

double sp_exec_predict_step_ms(sp_exec *x, const sp_comm_model *cm)
{
    sp_costs *c = sp_exec_measured_costs(x);
    double *ob = sp_xcalloc((size_t)x->S + 1, sizeof(double)), *opt = sp_xcalloc((size_t)x->S + 1, sizeof(double));
    int rows = x->batch / x->B;
    for (int s = 0; s < x->S; s++) {
        const stage_info *si = &x->st[s];
        ob[s] = 4.0 * (double)rows * (double)sp_shape_numel(si->out_ndim, si->out_shape);
        /* measured where the stage was stepped after the first step (or the --costs
         * profile's); else the estimate from its parameter bytes */
        opt[s] = c->opt[s] > 0 ? c->opt[s] : sp_opt_us_estimate(c->param_bytes[s]);
    }
    int clip = x->cfg.clip_grad_norm > 0 ? x->cfg.post_validate ? SP_CLIP_POST_VALIDATE : SP_CLIP_PLAIN : SP_CLIP_NONE;
    double job_us = sp_exec_job_us(x);
    sp_sim_comm_cfg cfg = {.model = cm, .out_bytes = ob, .bucket_mb = x->cfg.bucket_mb, .deferred = x->deferred,
                           .opt_us = opt, .clip = clip, .job_us = job_us,
                           .buffers = sp_exec_buffers_sim(x)};
    if (x->pred) sp_sim_comm_free(x->pred);
    else x->pred = sp_xcalloc(1, sizeof *x->pred);
    if (is_scan(x->cfg.scheme)) {   /* the scan: its program, from its plan and its measured phases */
        double *ph = scan_phases(x);
        sp_prog p = {0};
        sp_exec_scan_program(x, ph, c->fwd, opt, &p);
        sp_simulate_prog(&p, &cfg, x->pred);
        sp_prog_free(&p);
        free(ph);
    } else {
        sp_simulate_comm(x->sched, c, &x->sim, &cfg, x->pred);
    }
    free(ob);
    free(opt);
    sp_costs_free(c);
    return x->pred->latency / 1e3;
}

void sp_exec_pred_free(sp_exec *x)
{
    free(x->msgs);
    x->msgs = NULL;
    free(x->opt_meas);
    free(x->opt_step);
    x->opt_meas = NULL;
    x->opt_step = NULL;
    if (!x->pred) return;
    sp_sim_comm_free(x->pred);
    free(x->pred);
    x->pred = NULL;
}

/* ---- the executor's messages, for the tests ------------------------------------------------ */

void sp_exec_log_msg(sp_exec *x, int peer, int kind, int stage, double bytes)
{
    if (!x->log_msgs || x->steps != 0) return;
    if (x->nmsgs == x->cap_msgs) {
        x->cap_msgs = x->cap_msgs ? 2 * x->cap_msgs : 64;
        x->msgs = sp_xrealloc(x->msgs, sizeof *x->msgs * (size_t)x->cap_msgs);
    }
    x->msgs[x->nmsgs++] = (struct exec_msg){peer, kind, stage, bytes};
}

static void write_list(const char *prefix, const char *tail, const sp_exec *x, bool sim)
{
    char path[4096];
    snprintf(path, sizeof path, "%s.%s.csv", prefix, tail);
    sp_out out;
    if (sp_out_open(&out, path, "$SCANPROP_EXEC_MSGS") != SP_OK) sp_fail("%s", sp_last_error());
    fprintf(out.f, "rank,peer,kind,stage,bytes\n");
    int n = sim ? x->pred->nmsg : x->nmsgs;
    for (int i = 0; i < n; i++) {
        if (sim) {
            const sp_sim_msg *m = &x->pred->msg[i];
            fprintf(out.f, "%d,%d,%s,%d,%.0f\n", m->rank, m->peer, sp_msg_kind_name(m->kind), m->stage, m->bytes);
        } else {
            const struct exec_msg *m = &x->msgs[i];
            fprintf(out.f, "%d,%d,%s,%d,%.0f\n", x->rank, m->peer, sp_msg_kind_name(m->kind), m->stage, m->bytes);
        }
    }
    if (sp_out_commit(&out) != SP_OK) sp_fail("%s", sp_last_error());
}

void sp_exec_write_msgs(sp_exec *x)
{
    const char *prefix = getenv("SCANPROP_EXEC_MSGS");
    if (!prefix || !*prefix) return;
    char tail[32];
    snprintf(tail, sizeof tail, "r%d", x->rank);
    write_list(prefix, tail, x, false);
    if (x->rank == 0 && x->pred) write_list(prefix, "sim", x, true);
}

/* ---- the trace's simulated rows ------------------------------------------------------------ */

/* Events as the measured ones are written (the same key order: readers scan them so),
 * with step −1: a reader that picks steps (bench/trace_svg.py) leaves them out. */
void sp_exec_trace_predicted(const sp_exec *x, FILE *f)
{
    const sp_sim_comm *p = x->pred;
    if (!p) return;
    char lab[32];
    for (int r = 0; r < x->W; r++) {
        int pid = x->W + r;
        fprintf(f, ",\n{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"rank %d "
                   "(simulated)\"}}", pid, r);
        fprintf(f, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"args\": {\"name\": "
                   "\"compute\"}}", pid);
        fprintf(f, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 1, \"args\": {\"name\": "
                   "\"communication\"}}", pid);
        for (int j = 0; j < x->sched->njobs; j++)
            if (x->sched->compute[j] == r && (!is_scan(x->cfg.scheme) || x->sched->jobs[j].dir == SP_FWD) &&
                !x->tscan)   /* the scan runs its forward's jobs only (the time scan: none) */
                fprintf(f, ",\n{\"name\": \"%s\", \"cat\": \"simulated\", \"ph\": \"X\", \"pid\": %d, \"tid\": 0, "
                           "\"ts\": %.1f, \"dur\": %.1f, \"args\": {\"step\": -1}}",
                        sp_job_label(x->sched, j, lab, sizeof lab), pid, p->start[j], p->finish[j] - p->start[j]);
        for (int i = 0; i < p->nspan; i++)   /* a program's named compute (the scan's phases) */
            if (p->span[i].rank == r)
                fprintf(f, ",\n{\"name\": \"%s\", \"cat\": \"simulated\", \"ph\": \"X\", \"pid\": %d, \"tid\": 0, "
                           "\"ts\": %.1f, \"dur\": %.1f, \"args\": {\"step\": -1}}",
                        p->span[i].name, pid, p->span[i].start, p->span[i].end - p->span[i].start);
        for (int i = 0; i < p->nmsg; i++) {
            const sp_sim_msg *m = &p->msg[i];
            if (m->rank != r) continue;
            fprintf(f, ",\n{\"name\": \"%s stage %d\", \"cat\": \"simulated\", \"ph\": \"X\", \"pid\": %d, \"tid\": 1, "
                       "\"ts\": %.1f, \"dur\": %.1f, \"args\": {\"step\": -1, \"peer\": %d, \"bytes\": %.0f}}",
                    sp_msg_kind_name(m->kind), m->stage, pid, m->start, m->end - m->start, m->peer, m->bytes);
        }
    }
}
