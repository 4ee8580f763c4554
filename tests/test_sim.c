/* test_sim.c — the simulator beyond its latency: memory over time (sim_memory.c) and the
 * step simulated with its communication (sim_comm.h), by hand and through build/schedule
 * on a cluster topology. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "layers/zoo.h"
#include "schedulers/exec/exec.h"
#include "schedulers/plan/actions.h"
#include "schedulers/plan/limits.h"
#include "schedulers/plan/schedule.h"
#include "schedulers/sim/sim.h"
#include "schedulers/sim/sim_comm.h"
#include "schedulers/sim/sim_report.h"
#include "tests/scheduletest.h"
#include "tests/testutil.h"

/* ---- memory over time (sim_memory.c) --------------------------------------------------- */

/* Each worker's series starts at 0 at time 0, is a step function in time order, ends
 * with nothing held, and its largest value is the worker's peak; with one byte per
 * activation the byte peak is the count. 1F1B: worker w holds W − w micro-batches. fsdp
 * fetches weights only on the worker that computes away from them, one stage at a time. */
Test(memory, series_and_peaks)
{
    const char *schemes[] = {"1f1b", "fsdp", "gpipe"};
    for (int k = 0; k < 3; k++) {
        sp_costs *c = sp_costs_uniform(4, 1, 1, 1);
        for (int s = 0; s < 4; s++) c->act_bytes[s] = 1, c->param_bytes[s] = 10;
        sp_sched_config sc = {.stages = 4, .micro = 8, .workers = k == 1 ? 2 : 4, .split = 1};
        sp_schedule *s = sp_schedule_new(sp_scheme_find(schemes[k]), &sc, c);
        sp_sim r;
        sp_simulate(s, c, &r);
        for (int w = 0; w < s->workers; w++) {
            const sp_worker_stats *ws = &r.worker[w];
            int a = r.mem_off[w], b = r.mem_off[w + 1];
            cr_assert(b > a + 1, "%s w%d: no series", schemes[k], w);
            cr_assert(r.mem_time[a] == 0 && r.mem_act[b - 1] == 0 && r.mem_wgt[b - 1] == 0, "%s w%d", schemes[k], w);
            double top = 0, topw = 0;
            for (int i = a; i < b; i++) {
                if (i > a) cr_assert(r.mem_time[i] > r.mem_time[i - 1], "%s w%d: series not in time order", schemes[k], w);
                top = fmax(top, r.mem_act[i]);
                topw = fmax(topw, r.mem_act[i] + r.mem_wgt[i]);
            }
            cr_assert_eq(top, ws->peak_act_bytes, "%s w%d: series peak %g, peak %g", schemes[k], w, top, ws->peak_act_bytes);
            cr_assert_eq(topw, ws->peak_mem_bytes, "%s w%d", schemes[k], w);
            cr_assert_eq(ws->peak_act_bytes, ws->peak_act, "%s w%d", schemes[k], w);
            if (k == 0) cr_assert_eq(ws->peak_act, 4 - w, "1f1b w%d: %d in flight", w, ws->peak_act);
            if (k == 1) cr_assert_eq(ws->peak_weight_bytes, ws->weight_recv ? 10 : 0, "fsdp w%d", w);
            else cr_assert_eq(ws->peak_weight_bytes, 0, "%s w%d", schemes[k], w);
        }
        sp_sim_free(&r);
        sp_schedule_free(s);
        sp_costs_free(c);
    }
}

/* --mem-model sail (SP_MEM_SAIL): F takes the activation a, δ frees (1 − g)·a, G the rest.
 * One rank, one stage, m micro-batches in the order F0 I0 F1 I1 ... F(m−1) I(m−1) W0 ...
 * W(m−1): the whole-activation model holds m·a before the first W; sail holds
 * (1 + (m − 1)·g)·a after the last F (each earlier micro-batch keeps only G's share).
 * The count of activations held is m in both (a part still held counts), and both end at 0. */
Test(memory, sail_model_frees_in_parts)
{
    const int m = 5;
    const double a = 10, shares[] = {0, 0.25, 0.5, 1};
    for (int k = 0; k < 4; k++)
        for (int model = SP_MEM_WHOLE; model <= SP_MEM_SAIL; model++) {
            sp_actions *x = sp_actions_new(1, 1, m, 3 * m);
            for (int b = 0; b < m; b++) {
                sp_actions_push(x, 0, (sp_action){0, b, SP_ACT_F});
                sp_actions_push(x, 0, (sp_action){0, b, SP_ACT_I});
            }
            for (int b = 0; b < m; b++) sp_actions_push(x, 0, (sp_action){0, b, SP_ACT_W});
            sp_costs *c = sp_costs_uniform(1, 1, 1, 1);
            c->act_bytes[0] = a;
            sp_sched_config sc = {.stages = 1, .split = -1, .mem_model = (sp_act_model)model,
                                  .mem_grad_share = shares[k]};
            sp_schedule *s = sp_schedule_from_actions(x, &sc, c);
            sp_sim r;
            sp_simulate(s, c, &r);
            double want = model == SP_MEM_SAIL ? (1 + (m - 1) * shares[k]) * a : m * a;
            const sp_worker_stats *ws = &r.worker[0];
            cr_assert_float_eq(ws->peak_act_bytes, want, 1e-9, "model %d g=%g: peak %g bytes (expected %g)", model,
                               shares[k], ws->peak_act_bytes, want);
            cr_assert_eq(ws->peak_act, m, "model %d g=%g: %d activations held", model, shares[k], ws->peak_act);
            cr_assert_float_eq(r.mem_act[r.mem_off[1] - 1], 0, 1e-9, "model %d g=%g: ends holding %g", model,
                               shares[k], r.mem_act[r.mem_off[1] - 1]);
            sp_sim_free(&r);
            sp_schedule_free(s);
            sp_costs_free(c);
            sp_actions_free(x);
        }
}

/* The whole memory per worker in closed form: 4 stages of 10 parameter bytes and 1
 * activation byte. ddp on 2 workers: each holds all 40 bytes of weights, gradients,
 * buckets and k·40 of optimizer state; gpipe on 4: one stage each and no bucket (no
 * replica to sum with); fsdp on 2: the owner holds weights and state, every member a
 * bucket buffer and gradients. */
Test(memory, whole_memory_per_worker)
{
    struct { const char *scheme; int workers, slots; double weights, grads, buckets; } want[] = {
        {"ddp", 2, 1, 40, 40, 40}, {"ddp", 2, 2, 40, 40, 40}, {"gpipe", 4, 0, 10, 10, 0}, {"gpipe", 4, 2, 10, 10, 0},
    };
    for (size_t k = 0; k < sizeof want / sizeof *want; k++) {
        sp_costs *c = sp_costs_uniform(4, 1, 1, 1);
        for (int s = 0; s < 4; s++) c->act_bytes[s] = 1, c->param_bytes[s] = 10;
        sp_sched_config sc = {.stages = 4, .micro = 4, .workers = want[k].workers, .split = 0};
        sp_schedule *s = sp_schedule_new(sp_scheme_find(want[k].scheme), &sc, c);
        sp_sim r;
        sp_simulate(s, c, &r);
        for (int w = 0; w < s->workers; w++) {
            sp_mem_breakdown b;
            sp_sim_memory_breakdown(s, c, &r, want[k].slots, w, &b);
            cr_expect_eq(b.weights, want[k].weights, "%s w%d", want[k].scheme, w);
            cr_expect_eq(b.grads, want[k].grads, "%s w%d", want[k].scheme, w);
            cr_expect_eq(b.optim, want[k].slots * want[k].weights, "%s w%d", want[k].scheme, w);
            cr_expect_eq(b.buckets, want[k].buckets, "%s w%d", want[k].scheme, w);
            cr_expect_eq(b.activations, r.worker[w].peak_mem_bytes);
            cr_expect_eq(b.total, b.weights + b.grads + b.optim + b.buckets + b.activations);
            /* sp_simulate's own (sgd with momentum, one state float) differs only by the state */
            cr_expect_eq(r.worker[w].mem.total, b.total - b.optim + b.weights);
        }
        sp_sim_free(&r);
        sp_schedule_free(s);
        sp_costs_free(c);
    }
    /* fsdp: the stages' owners split the weights; every member holds a bucket per stage */
    sp_costs *c = sp_costs_uniform(4, 1, 1, 1);
    for (int s = 0; s < 4; s++) c->act_bytes[s] = 1, c->param_bytes[s] = 10;
    sp_sched_config sc = {.stages = 4, .micro = 2, .workers = 2, .split = 0};
    sp_schedule *s = sp_schedule_new(sp_scheme_find("fsdp"), &sc, c);
    sp_sim r;
    sp_simulate(s, c, &r);
    double weights = 0;
    for (int w = 0; w < 2; w++) {
        sp_mem_breakdown b;
        sp_sim_memory_breakdown(s, c, &r, 2, w, &b);
        weights += b.weights;
        cr_expect_eq(b.optim, 2 * b.weights);
        cr_expect_eq(b.grads, 40, "fsdp w%d computes every stage", w);
        cr_expect_eq(b.buckets, 40, "fsdp w%d", w);
        cr_expect(b.weights < 40, "fsdp w%d holds every stage's weights", w);
    }
    cr_expect_eq(weights, 40, "fsdp: each stage has one owner");
    sp_sim_free(&r);
    sp_schedule_free(s);
    sp_costs_free(c);
}


/* ---- the simulation with communication (sim_comm.h) ------------------------------------------- */

/* No model and no optimizer time: every scheme's step is sp_simulate's latency exactly,
 * each job at its compute-only start (the executor's order, nothing added). */
Test(sim_comm, zero_cost_is_the_compute_only_simulation)
{
    const char *schemes[] = {"ddp", "fsdp", "gpipe", "1f1b", "lpp", "fslpp", "ooo-ff", "ooo-modulo", "ddp-ooo"};
    for (int k = 0; k < 9; k++) {
        sp_costs *c = sp_costs_uniform(6, 1, 0.7, 0.9);
        for (int s = 0; s < 6; s++) c->act_bytes[s] = 100, c->param_bytes[s] = s % 3 ? 400 : 0;
        sp_sched_config sc = {.stages = 6, .micro = 4, .workers = 4};
        sp_schedule *s = sp_schedule_new(sp_scheme_find(schemes[k]), &sc, c);
        sp_sim r;
        sp_simulate(s, c, &r);
        sp_sim_comm_cfg cfg = {.bucket_mb = 25, .deferred = k == 0 || k == 8};
        sp_sim_comm m;
        sp_simulate_comm(s, c, &r, &cfg, &m);
        cr_assert_float_eq(m.latency, r.latency, 1e-9, "%s: %g with free messages, %g compute only", schemes[k],
                           m.latency, r.latency);
        for (int j = 0; j < s->njobs; j++) cr_assert_float_eq(m.start[j], r.start[j], 1e-9, "%s job %d", schemes[k], j);
        for (int w = 0; w < 4; w++) cr_assert_eq(m.comm_us[w], 0, "%s w%d", schemes[k], w);
        cr_assert_gt(m.nmsg, 0, "%s: no messages", schemes[k]);
        sp_sim_comm_free(&m);
        sp_sim_free(&r);
        sp_schedule_free(s);
        sp_costs_free(c);
    }
}

/* The executor's measured time per job (exec_predict.c: job_us) lengthens every job by
 * that much: GPipe on one worker with free messages is a chain of 2·S·B jobs, so its
 * step grows by exactly 2·S·B·job_us, and each job lasts its cost plus job_us. */
Test(sim_comm, job_overhead_lengthens_every_job)
{
    sp_costs *c = sp_costs_uniform(3, 2, 1, 1);
    sp_sched_config sc = {.stages = 3, .micro = 4, .workers = 1, .split = 0};
    sp_schedule *s = sp_schedule_new(sp_scheme_find("gpipe"), &sc, c);
    sp_sim r;
    sp_simulate(s, c, &r);
    sp_sim_comm m0, m1;
    sp_sim_comm_cfg cfg = {.bucket_mb = 25};
    sp_simulate_comm(s, c, &r, &cfg, &m0);
    cfg.job_us = 0.25;
    sp_simulate_comm(s, c, &r, &cfg, &m1);
    cr_assert_eq(s->njobs, 2 * 3 * 4);
    cr_assert_float_eq(m1.latency - m0.latency, 0.25 * s->njobs, 1e-9, "%g -> %g over %d jobs", m0.latency,
                       m1.latency, s->njobs);
    for (int j = 0; j < s->njobs; j++)
        cr_assert_float_eq(m1.finish[j] - m1.start[j], m0.finish[j] - m0.start[j] + 0.25, 1e-9, "job %d", j);
    sp_sim_comm_free(&m0);
    sp_sim_comm_free(&m1);
    sp_sim_free(&r);
    sp_schedule_free(s);
    sp_costs_free(c);
}

/* A message above the 4 KiB eager limit is pulled by its receiver when it reaches the
 * receive (sim_comm.c): GPipe, 2 workers, 2 micro-batches, F of stage 0 1 µs, of stage 1
 * 10 µs, p2p 2048 B/µs without latency. 8 KiB messages (4 µs): a at [1,5], b queued
 * behind it on w0's lane, sent at 5; F1(a) starts at 5, F1(b) when w1 is free (15) plus
 * its copy: 19. At 4 KiB (eager, 2 µs) F1(b) starts when w1 is free: 13. The teaching
 * transfer latency (no model) stays eager: 15. */
Test(sim_comm, rendezvous_messages_cost_the_receiver)
{
    double want[3] = {19, 13, 15}, bytes[3] = {8192, 4096, 8192};
    for (int k = 0; k < 3; k++) {
        sp_costs *c = sp_costs_uniform(2, 1, 0.5, 0.5);
        c->fwd[1] = 10;
        c->act_bytes[0] = bytes[k];
        sp_sched_config sc = {.stages = 2, .micro = 2, .workers = 2};
        sp_schedule *s = sp_schedule_new(sp_scheme_find("gpipe"), &sc, c);
        sp_sim r;
        sp_simulate(s, c, &r);
        sp_comm_model *cm = calloc(1, sizeof *cm);
        cm->fit[SP_COMM_P2P] = (sp_comm_fit){.ranks = 2, .nsegs = 1, .seg = {{0, 0, 2048}}};
        cm->fit[SP_COMM_ALLREDUCE] = (sp_comm_fit){.ranks = 2, .nsegs = 1, .seg = {{0, 0, INFINITY}}};
        sp_sim_comm_cfg cfg = {.model = k < 2 ? cm : NULL, .transfer = k < 2 ? 0 : 4};
        sp_sim_comm m;
        sp_simulate_comm(s, c, &r, &cfg, &m);
        double fa = m.start[sp_schedule_find(s, 1, 0, SP_FWD)], fb = m.start[sp_schedule_find(s, 1, 1, SP_FWD)];
        cr_assert_float_eq(fa, k == 1 ? 3 : 5, 1e-9, "case %d: F1(a) at %g", k, fa);
        cr_assert_float_eq(fb, want[k], 1e-9, "case %d: F1(b) at %g, want %g", k, fb, want[k]);
        sp_sim_comm_free(&m);
        free(cm);
        sp_sim_free(&r);
        sp_schedule_free(s);
        sp_costs_free(c);
    }
}

static sp_comm_model *latency_model(double p2p_us, double allreduce_us)
{
    sp_comm_model *m = calloc(1, sizeof *m);
    m->fit[SP_COMM_P2P] = (sp_comm_fit){.ranks = 2, .nsegs = 1, .seg = {{0, p2p_us, INFINITY}}};
    m->fit[SP_COMM_ALLREDUCE] = (sp_comm_fit){.ranks = 2, .nsegs = 1, .seg = {{0, allreduce_us, INFINITY}}};
    return m;
}

/* GPipe on 2 workers, one micro-batch: F0 [0,1], its activation arrives at 11, F1 [11,12],
 * B1 [12,13], ∂l/∂y_0 arrives at 23, B0 [23,24]; worker 1 starts the loss allreduce after
 * F1 (12, before it sends ∂l/∂y_0), worker 0 at its end (24): it ends at 29. */
Test(sim_comm, gpipe_messages_by_hand)
{
    sp_costs *c = sp_costs_uniform(2, 1, 0.5, 0.5);
    sp_sched_config sc = {.stages = 2, .micro = 1, .workers = 2};
    sp_schedule *s = sp_schedule_new(sp_scheme_find("gpipe"), &sc, c);
    sp_sim r;
    sp_simulate(s, c, &r);
    sp_comm_model *cm = latency_model(10, 5);
    sp_sim_comm_cfg cfg = {.model = cm};
    sp_sim_comm m;
    sp_simulate_comm(s, c, &r, &cfg, &m);
    cr_assert_float_eq(r.latency, 4, 1e-12);
    cr_assert_float_eq(m.latency, 29, 1e-9, "latency %g", m.latency);
    cr_assert_float_eq(m.start[sp_schedule_find(s, 1, 0, SP_FWD)], 11, 1e-9);
    cr_assert_float_eq(m.start[sp_schedule_find(s, 0, 0, SP_BWD)], 23, 1e-9);
    cr_assert_eq(m.nmsg, 4);
    const int kinds[4] = {SP_MSG_ACT, SP_MSG_LOSS, SP_MSG_LOSS, SP_MSG_GRAD}, ranks[4] = {0, 0, 1, 1};
    for (int i = 0; i < 4; i++)
        cr_assert(m.msg[i].kind == kinds[i] && m.msg[i].rank == ranks[i], "message %d: rank %d %s", i, m.msg[i].rank,
                  sp_msg_kind_name(m.msg[i].kind));
    cr_assert_float_eq(m.comm_us[0], 10, 1e-9);
    sp_sim_comm_free(&m);
    free(cm);
    sp_sim_free(&r);
    sp_schedule_free(s);
    sp_costs_free(c);
}

/* DDP's buckets: one per stage with --bucket-mb 0 (an allreduce each per rank), one for
 * both when they fit; the step pays for them (not deferred: after the last backward) and
 * for the optimizer. */
Test(sim_comm, ddp_buckets_and_optimizer)
{
    for (int k = 0; k < 2; k++) {
        sp_costs *c = sp_costs_uniform(2, 1, 0.5, 0.5);
        c->param_bytes[0] = c->param_bytes[1] = 400;
        sp_sched_config sc = {.stages = 2, .micro = 2, .workers = 2};
        sp_schedule *s = sp_schedule_new(sp_scheme_find("ddp"), &sc, c);
        sp_sim r;
        sp_simulate(s, c, &r);
        sp_comm_model *cm = latency_model(10, 5);
        double opt[2] = {2, 3};
        sp_sim_comm_cfg cfg = {.model = cm, .bucket_mb = k ? 25 : 0, .opt_us = opt};
        sp_sim_comm m;
        sp_simulate_comm(s, c, &r, &cfg, &m);
        int ar = 0;
        for (int i = 0; i < m.nmsg; i++) ar += m.msg[i].kind == SP_MSG_ALLREDUCE;
        cr_assert_eq(ar, k ? 2 : 4, "bucket_mb %d: %d allreduces", k ? 25 : 0, ar);
        cr_assert_float_eq(m.opt_us[0], 5, 1e-9);
        /* one micro-batch per worker: F0 F1 B1 B0 end at 4; stage 1's bucket runs 3..8 and
         * stage 0's 8..13 (one bucket: 4..9), then the optimizer (5); the loss (from 2)
         * is long done */
        cr_assert_float_eq(r.latency, 4, 1e-12);
        cr_assert_float_eq(m.latency, k ? 14 : 18, 1e-9, "bucket_mb %d: latency %g", k ? 25 : 0, m.latency);
        sp_sim_comm_free(&m);
        free(cm);
        sp_sim_free(&r);
        sp_schedule_free(s);
        sp_costs_free(c);
    }
}

/* A stage's gradients are summed among the ranks that hold it, bucketed per rank set as
 * every member packs them (exec_sync.c): dualpipe on 4 ranks and 8 stages puts blocks 0
 * and 3 (stages 0, 1, 6, 7) on the pair {0, 3} and blocks 1 and 2 (stages 2 to 5) on
 * {1, 2}. With buckets large enough, each pair sums its four stages in one allreduce,
 * its two members together, although the pairs' gradients complete interleaved. */
Test(sim_comm, dualpipe_buckets_per_pair)
{
    sp_costs *c = sp_costs_uniform(8, 1, 0.5, 0.5);
    for (int st = 0; st < 8; st++) c->param_bytes[st] = 400;
    sp_sched_config sc = {.stages = 8, .micro = 8, .workers = 4, .split = -1};
    sp_schedule *s = sp_schedule_new(sp_scheme_find("dualpipe"), &sc, c);
    cr_assert_eq(s->workers, 4);
    sp_sim r;
    sp_simulate(s, c, &r);
    sp_comm_model *cm = latency_model(10, 5);
    sp_sim_comm_cfg cfg = {.model = cm, .bucket_mb = 25};
    sp_sim_comm m;
    sp_simulate_comm(s, c, &r, &cfg, &m);
    int ar[4] = {0}, pair_stage[4] = {-1, -1, -1, -1};
    double t0[4] = {0}, t1[4] = {0};
    for (int i = 0; i < m.nmsg; i++) {
        const sp_sim_msg *g = &m.msg[i];
        if (g->kind != SP_MSG_ALLREDUCE) continue;
        ar[g->rank]++;
        pair_stage[g->rank] = g->stage;
        t0[g->rank] = g->start, t1[g->rank] = g->end;
        int block = g->stage / 2;
        cr_assert(block == g->rank || block == 3 - g->rank, "rank %d sums stage %d of another pair", g->rank,
                  g->stage);
    }
    for (int w = 0; w < 4; w++) cr_assert_eq(ar[w], 1, "rank %d: %d allreduces (one bucket per pair)", w, ar[w]);
    for (int w = 0; w < 2; w++) {
        int v = 3 - w;
        cr_assert_eq(pair_stage[w], pair_stage[v], "pair %d/%d: different buckets", w, v);
        cr_assert(t0[w] == t0[v] && t1[w] == t1[v], "pair %d/%d: not one collective", w, v);
    }
    sp_sim_comm_free(&m);
    free(cm);
    sp_sim_free(&r);
    sp_schedule_free(s);
    sp_costs_free(c);
}

/* ---- the simulation with communication on a cluster topology (--nodes) --------------- */

/* Zero-latency links of (all but) infinite bandwidth: every message of every scheme costs
 * nothing on a topology of 2 nodes x 2 ranks, so the step is the compute-only one. */
Test(sim_comm, free_topology_links_give_the_compute_only_step)
{
    const char *schemes[] = {"ddp", "fsdp", "gpipe", "1f1b", "lpp", "fslpp", "ooo-ff", "ooo-modulo", "ddp-ooo"};
    sp_comm_topology t = {.nodes = 2, .ranks_per_node = 2, .intra = {0, 1e15}, .inter = {0, 1e15}};
    for (int k = 0; k < 9; k++) {
        sp_costs *c = sp_costs_uniform(6, 1, 0.7, 0.9);
        for (int s = 0; s < 6; s++) c->act_bytes[s] = 100, c->param_bytes[s] = s % 3 ? 400 : 0;
        sp_sched_config sc = {.stages = 6, .micro = 4, .workers = 4};
        sp_schedule *s = sp_schedule_new(sp_scheme_find(schemes[k]), &sc, c);
        sp_sim r;
        sp_simulate(s, c, &r);
        sp_sim_comm_cfg cfg = {.bucket_mb = 25, .deferred = k == 0 || k == 8, .topo = &t};
        sp_sim_comm m;
        sp_simulate_comm(s, c, &r, &cfg, &m);
        cr_assert_float_eq(m.latency, r.latency, 1e-9, "%s: %g on free links, %g compute only", schemes[k], m.latency,
                           r.latency);
        cr_assert_gt(m.nmsg, 0, "%s: no messages", schemes[k]);
        sp_sim_comm_free(&m);
        sp_sim_free(&r);
        sp_schedule_free(s);
        sp_costs_free(c);
    }
}

/* build/schedule --nodes …: the cluster-prediction line's key, or −1 when absent. */
static double cluster_key(const char *args, const char *key)
{
    char cmd[1200], line[8192], want[64];
    const char *b = getenv("BUILD");
    snprintf(cmd, sizeof cmd, "%s/schedule %s --no-diagram 2>&1", b ? b : "build", args);
    snprintf(want, sizeof want, "\"%s\": ", key);
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f);
    double v = -1;
    while (fgets(line, sizeof line, f)) {
        const char *k = strstr(line, want);
        if (strstr(line, "\"cluster-prediction\"") && k) v = atof(k + strlen(want));
    }
    cr_assert_eq(pclose(f), 0, "%s", cmd);
    return v;
}

/* Through the program: zero-latency, (all but) infinite links give step_with_comm equal to
 * the compute-only latency (the optimizer made free too), for a pipeline and ddp. */
Test(sim_comm, program_free_cluster_is_compute_only)
{
    char csv[600], args[1200];
    snprintf(csv, sizeof csv, "%s/free.csv", tu_tmpdir());
    FILE *f = fopen(csv, "w");
    cr_assert_not_null(f);
    fprintf(f, "layer,fwd,bwd_grad,bwd_delta,movable,act_bytes,param_bytes\n");
    for (int s = 0; s < 4; s++) fprintf(f, "%d,%d,3,4,1,1000000,40000\n", s, 5 + s);
    fclose(f);
    const char *schemes[] = {"gpipe --workers 4", "1f1b --workers 4", "ddp --workers 4"};
    for (int k = 0; k < 3; k++) {
        snprintf(args, sizeof args, "--scheme %s --microbatches 4 --profile %s --nodes 2 --ranks-per-node 2 "
                 "--intra-latency-us 0 --intra-bw-gbs 1e12 --inter-latency-us 0 --inter-bw-gbs 1e12 --opt-gbs 1e12",
                 schemes[k], csv);
        double lat = cluster_key(args, "compute_latency"), step = cluster_key(args, "step_with_comm");
        cr_assert_gt(lat, 0, "%s", args);
        cr_assert_float_eq(step, lat, 1e-6 * lat, "%s: step_with_comm %g, compute only %g", args, step, lat);
    }
}

/* A slow link between nodes: 2-stage gpipe, one micro-batch, one rank per node. F0 (10) →
 * act across the nodes → F1 (10) → B1 (10) → ∂l/∂y across → B0 (10) → the loss allreduce
 * of 4 bytes over both: each crossing costs what sp_comm_time_ranks says for the two ranks
 * (100 us + 1 MB at 1 GB/s = 1100 us here), and with both ranks on one node the fast intra
 * link is used instead. */
Test(sim_comm, program_cross_node_message_costs_the_topology)
{
    char csv[600], args[1200];
    snprintf(csv, sizeof csv, "%s/two.csv", tu_tmpdir());
    FILE *f = fopen(csv, "w");
    cr_assert_not_null(f);
    fprintf(f, "layer,fwd,bwd_grad,bwd_delta,movable,act_bytes,param_bytes\n0,10,5,5,1,1000000,0\n"
               "1,10,5,5,1,1000000,0\n");
    fclose(f);
    sp_comm_topology t = {.nodes = 2, .ranks_per_node = 1, .intra = {1, 1e4}, .inter = {100, 1e3}};
    const int pair[2] = {0, 1};
    double p2p = sp_comm_time_ranks(NULL, SP_COMM_P2P, 1e6, pair, 0, 2, &t);
    double loss = sp_comm_time_ranks(NULL, SP_COMM_ALLREDUCE, 4, pair, 0, 2, &t);
    cr_assert_float_eq(p2p, 1100, 1e-9);
    snprintf(args, sizeof args, "--scheme gpipe --microbatches 1 --profile %s --nodes 2 --ranks-per-node 1 "
             "--intra-latency-us 1 --intra-bw-gbs 10 --inter-latency-us 100 --inter-bw-gbs 1", csv);
    cr_assert_float_eq(cluster_key(args, "compute_latency"), 40, 1e-9);
    double step = cluster_key(args, "step_with_comm");
    cr_assert_float_eq(step, 40 + 2 * p2p + loss, 1e-6, "%s: %g, expected 40 + 2 x %g + %g", args, step, p2p, loss);
    t.nodes = 1, t.ranks_per_node = 2;   /* one node: the intra link */
    double near = sp_comm_time_ranks(NULL, SP_COMM_P2P, 1e6, pair, 0, 2, &t) * 2 +
                  sp_comm_time_ranks(NULL, SP_COMM_ALLREDUCE, 4, pair, 0, 2, &t) + 40;
    snprintf(args, sizeof args, "--scheme gpipe --microbatches 1 --profile %s --nodes 1 --ranks-per-node 2 "
             "--intra-latency-us 1 --intra-bw-gbs 10 --inter-latency-us 100 --inter-bw-gbs 1", csv);
    step = cluster_key(args, "step_with_comm");
    cr_assert_float_eq(step, near, 1e-6, "%s: %g, expected %g", args, step, near);
}


/* The constant transfer latency (build/schedule --transfer-cost 1): GPipe, 2 stages, 2
 * micro-batches, F = B = 1. Worker 0: F0a [0,1], F0b [1,2]; their activations leave on its
 * lane [1,2] and [2,3]. Worker 1: F1a [2,3], F1b [3,4], B1a [4,5], B1b [5,6]; their
 * ∂l/∂y_0 leave [5,6] and [6,7]. Worker 0: B0a [6,7], B0b [7,8]. The loss's scalar is
 * free: the step is 8 (6 compute only), each lane busy 2, 3 messages each (2 + the loss).
 * Transfer 0 is the compute-only simulation. */
Test(sim_comm, transfer_cost_gpipe_by_hand)
{
    sp_costs *c = sp_costs_uniform(2, 1, 0.5, 0.5);
    sp_sched_config sc = {.stages = 2, .micro = 2, .workers = 2};
    sp_schedule *s = sp_schedule_new(sp_scheme_find("gpipe"), &sc, c);
    sp_sim r;
    sp_simulate(s, c, &r);
    cr_assert_float_eq(r.latency, 6, 1e-12);
    for (int k = 0; k < 2; k++) {
        sp_sim_comm_cfg cfg = {.bucket_mb = 25, .transfer = k};
        sp_sim_comm m;
        sp_simulate_comm(s, c, &r, &cfg, &m);
        cr_assert_float_eq(m.transfer, k, 0);
        cr_assert_float_eq(m.latency, k ? 8 : 6, 1e-9, "transfer %d: latency %g", k, m.latency);
        cr_assert_float_eq(m.start[sp_schedule_find(s, 1, 0, SP_FWD)], k ? 2 : 1, 1e-9);
        cr_assert_float_eq(m.start[sp_schedule_find(s, 1, 1, SP_FWD)], k ? 3 : 2, 1e-9);
        cr_assert_float_eq(m.finish[sp_schedule_find(s, 0, 1, SP_BWD)], k ? 8 : 6, 1e-9);
        for (int w = 0; w < 2; w++) {
            cr_assert_float_eq(m.comm_us[w], 2.0 * k, 1e-9, "transfer %d: w%d busy %g", k, w, m.comm_us[w]);
            cr_assert_eq(m.messages[w], 3, "w%d: %d messages", w, m.messages[w]);
        }
        sp_sim_comm_free(&m);
    }
    sp_sim_free(&r);
    sp_schedule_free(s);
    sp_costs_free(c);
}

/* The collectives under a transfer latency x: a ring allreduce over P ranks is 2(P − 1)
 * steps of x. DDP on 4 workers, 2 stages (one micro-batch each: compute ends at 4): one
 * bucket for both stages runs [4, 10]; one per stage (bucket_mb 0): stage 1's [3, 9] and
 * stage 0's [9, 15]. */
Test(sim_comm, transfer_cost_allreduce_steps)
{
    for (int k = 0; k < 2; k++) {
        sp_costs *c = sp_costs_uniform(2, 1, 0.5, 0.5);
        sp_sched_config sc = {.stages = 2, .micro = 4, .workers = 4};
        sp_schedule *s = sp_schedule_new(sp_scheme_find("ddp"), &sc, c);
        sp_sim r;
        sp_simulate(s, c, &r);
        sp_sim_comm_cfg cfg = {.bucket_mb = k ? 25 : 0, .transfer = 1};
        sp_sim_comm m;
        sp_simulate_comm(s, c, &r, &cfg, &m);
        cr_assert_float_eq(r.latency, 4, 1e-12);
        cr_assert_float_eq(m.latency, k ? 10 : 15, 1e-9, "bucket_mb %d: latency %g", k ? 25 : 0, m.latency);
        for (int w = 0; w < 4; w++) cr_assert_float_eq(m.comm_us[w], k ? 6 : 12, 1e-9, "w%d", w);
        sp_sim_comm_free(&m);
        sp_sim_free(&r);
        sp_schedule_free(s);
        sp_costs_free(c);
    }
}

/* ---- batch norm's messages (sp_model_buffers_sim, sim_comm.h's sp_sim_buffers) ----------- */

/* ResNet-20's batch-norm layers: bn1 (16 channels), two per residual block — 3 blocks of
 * 16, 3 of 32, 3 of 64 — and the option-B shortcuts' of layer2.0 (32) and layer3.0 (64). */
static void refused(const char *args, const char *want, int seconds);

#define R20_BN 21
#define R20_BN_CHANNELS (16 + 6 * 16 + 7 * 32 + 7 * 64)   /* ΣC = 784 */

/* The sums of rank w's messages of one kind. */
static void msg_sums(const sp_sim_comm *m, int w, int kind, int *n, double *bytes, double *us)
{
    *n = 0, *bytes = 0, *us = 0;
    for (int i = 0; i < m->nmsg; i++)
        if (m->msg[i].rank == w && m->msg[i].kind == kind)
            (*n)++, *bytes += m->msg[i].bytes, *us += m->msg[i].end - m->msg[i].start;
}

/* ResNet-20 under ddp on 2 workers (one micro-batch each), with a transfer latency of 1 a
 * message (an allgather over 2 ranks: 1 step): per-rank batch norm sends one broadcast of
 * every layer's running mean, running variance and num_batches_tracked — 4(2C + 1) bytes a
 * layer — before the first job (with --sync-bn too, as PyTorch DDP's broadcast_buffers);
 * --sync-bn adds an allgather per layer in the forward,
 * of 2C + 1 doubles as two floats each (8(2C + 1) bytes a rank), and one in the backward,
 * 2C doubles (16C bytes), each inside its job on the critical path: the step is 2·21
 * steps longer than with no batch-norm message (plus at most the broadcast's 1). A
 * pipeline (1f1b) sends none. */
Test(sim_comm, resnet20_batch_norm_messages_closed_form)
{
    sp_model *mdl = sp_zoo_model("resnet20");
    int shape[3], ndim = sp_zoo_input_shape("resnet20", shape);
    sp_costs *c = sp_costs_from_model(mdl, ndim, shape, 32, 1000);
    const char *schemes[] = {"ddp", "ddp", "fsdp", "ddp-ooo", "1f1b"};
    const bool sync[] = {false, true, true, true, false};
    for (int k = 0; k < 5; k++) {
        sp_sched_config sc = {.stages = c->stages, .micro = 2, .workers = 2};
        sp_schedule *s = sp_schedule_new(sp_scheme_find(schemes[k]), &sc, c);
        sp_sim r;
        sp_simulate(s, c, &r);
        sp_sim_buffers *b = sp_model_buffers_sim(mdl, ndim, shape, s, sync[k]);
        bool ddp = !strcmp(schemes[k], "ddp") || !strcmp(schemes[k], "ddp-ooo");
        sp_sim_comm_cfg cfg = {.bucket_mb = 25, .transfer = 1, .deferred = ddp, .buffers = b}, none = cfg;
        none.buffers = NULL;
        sp_sim_comm m, m0;
        sp_simulate_comm(s, c, &r, &cfg, &m);
        sp_simulate_comm(s, c, &r, &none, &m0);
        const char *what = sync[k] ? "--sync-bn" : "per-rank";
        for (int w = 0; w < 2; w++) {
            int n;
            double bytes, us, fwd = 0, bwd = 0;
            int nf = 0, nb = 0;
            msg_sums(&m, w, SP_MSG_BUFFERS, &n, &bytes, &us);
            if (!strcmp(schemes[k], "1f1b")) {
                cr_assert_null(b, "1f1b: batch-norm messages");
                cr_assert_eq(n, 0);
                continue;
            }
            cr_assert_eq(n, 1, "%s %s w%d: %d broadcasts", schemes[k], what, w, n);   /* with --sync-bn too, as DDP */
            cr_assert_float_eq(bytes, 4.0 * (2 * R20_BN_CHANNELS + R20_BN), 0, "%s %s w%d: broadcast of %g B",
                               schemes[k], what, w, bytes);
            for (int i = 0; i < m.nmsg; i++) {
                if (m.msg[i].rank != w || m.msg[i].kind != SP_MSG_SYNC_BN) continue;
                int j = -1;   /* the job the allgather is inside */
                for (int q = 0; q < s->njobs; q++)
                    if (s->compute[q] == w && m.start[q] <= m.msg[i].start && m.msg[i].end <= m.finish[q]) j = q;
                cr_assert_geq(j, 0, "%s w%d: an allgather outside every job", schemes[k], w);
                if (s->jobs[j].dir == SP_FWD) nf++, fwd += m.msg[i].bytes;
                else nb++, bwd += m.msg[i].bytes;
            }
            cr_assert_eq(nf, sync[k] ? R20_BN : 0, "%s %s w%d: %d forward allgathers", schemes[k], what, w, nf);
            cr_assert_eq(nb, sync[k] ? R20_BN : 0, "%s %s w%d: %d backward allgathers", schemes[k], what, w, nb);
            cr_assert_float_eq(fwd, sync[k] ? 8.0 * (2 * R20_BN_CHANNELS + R20_BN) : 0, 0, "%s: forward %g B",
                               schemes[k], fwd);
            cr_assert_float_eq(bwd, sync[k] ? 16.0 * R20_BN_CHANNELS : 0, 0, "%s: backward %g B", schemes[k], bwd);
        }
        /* every allgather on the critical path; the broadcast (1) may hide behind ddp's wait
         * for the previous step's last bucket, and waits for fsdp's weight broadcasts (one
         * lane a rank: the first forward then waits for all of them, not only stage 0's) */
        int nw;
        double bw, uw;
        msg_sums(&m, 0, SP_MSG_BROADCAST, &nw, &bw, &uw);
        double extra = m.latency - m0.latency, least = sync[k] ? 2 * R20_BN : 0, most = least + 1 + uw;
        if (b)
            cr_assert(extra >= least - 1e-6 && extra <= most + 1e-6, "%s %s: step %g, %g without batch norm's "
                      "messages (expected %g to %g more)", schemes[k], sync[k] ? "--sync-bn" : "per-rank", m.latency,
                      m0.latency, least, most);
        sp_sim_comm_free(&m);
        sp_sim_comm_free(&m0);
        sp_sim_buffers_free(b);
        sp_sim_free(&r);
        sp_schedule_free(s);
    }
    sp_costs_free(c);
    sp_model_free(mdl);
}

/* build/schedule with args: the first line of its stdout starting with `prefix` into line
 * ("" if none), its last line (the JSON) into json. */
static void schedule_lines(const char *args, const char *prefix, char *line, size_t n, char *json, size_t jn)
{
    char cmd[1200], buf[65536];
    const char *b = getenv("BUILD");
    snprintf(cmd, sizeof cmd, "%s/schedule %s --no-diagram 2>&1", b ? b : "build", args);
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f);
    line[0] = json[0] = 0;
    while (fgets(buf, sizeof buf, f)) {
        size_t k = strlen(buf);
        if (!line[0] && !strncmp(buf, prefix, strlen(prefix))) {
            memcpy(line, buf, k < n ? k : n - 1);
            line[k < n ? k : n - 1] = 0;
        }
        memcpy(json, buf, k < jn ? k : jn - 1);
        json[k < jn ? k : jn - 1] = 0;
    }
    cr_assert_eq(pclose(f), 0, "%s", cmd);
}

/* build/schedule --model resnet20: the JSON's "batch_norm" and the messages it adds (the
 * same closed form as above); --sync-bn with a pipeline, on a model without batch norm or
 * without --model is refused in one line. */
Test(sim_comm, schedule_models_batch_norm)
{
    char line[2048], json[65536], want[512];
    const char *base = "--model resnet20 --microbatches 2 --transfer-cost 1";
    char args[600];
    snprintf(args, sizeof args, "--scheme ddp %s", base);
    schedule_lines(args, "batch norm:", line, sizeof line, json, sizeof json);
    cr_assert(strstr(json, "\"batch_norm\":\"per-rank\""), "%s: %s", args, json);
    snprintf(want, sizeof want, "1 broadcast, %d B", 4 * (2 * R20_BN_CHANNELS + R20_BN));
    cr_assert(strstr(line, want), "%s: '%s' (expected '%s')", args, line, want);
    snprintf(args, sizeof args, "--scheme ddp %s --sync-bn", base);
    schedule_lines(args, "batch norm:", line, sizeof line, json, sizeof json);
    cr_assert(strstr(json, "\"batch_norm\":\"synchronized\""), "%s: %s", args, json);
    snprintf(want, sizeof want, "%d in the forwards (%d B a rank), %d in the backwards (%d B a rank)", R20_BN,
             8 * (2 * R20_BN_CHANNELS + R20_BN), R20_BN, 16 * R20_BN_CHANNELS);
    cr_assert(strstr(line, want), "%s: '%s' (expected '%s')", args, line, want);
    snprintf(args, sizeof args, "--scheme 1f1b %s", base);
    schedule_lines(args, "batch norm:", line, sizeof line, json, sizeof json);
    cr_assert(strstr(json, "\"batch_norm\":\"per-micro-batch\""), "%s: %s", args, json);
    cr_assert(strstr(line, "no message"), "%s: %s", args, line);
    snprintf(args, sizeof args, "--scheme ddp --model lenet --microbatches 2");
    schedule_lines(args, "batch norm:", line, sizeof line, json, sizeof json);
    cr_assert(!strstr(json, "batch_norm") && !line[0], "%s: %s", args, json);
    refused("--scheme gpipe --model resnet20 --sync-bn", "--sync-bn", 20);
    refused("--scheme ddp --model lenet --sync-bn", "--sync-bn: model lenet has no batch norm", 20);
    refused("--scheme ddp --sync-bn", "--sync-bn", 20);
    refused("--scheme ddp --model resnet20 --microbatches 4 --workers 2 --sync-bn",
            "--sync-bn with 4 micro-batches for 2 workers", 20);
}

/* ---- the bounds on the simulator's inputs (schedulers/plan/limits.h) -------------------- */

/* One refusal of build/schedule: exit 2 within `seconds` (timeout's 124 otherwise), one
 * stderr line naming `want`, and no inf, nan or null on stdout. */
static void refused(const char *args, const char *want, int seconds)
{
    char cmd[2000], out[8192], err[2048];
    const char *b = getenv("BUILD");
    snprintf(cmd, sizeof cmd, "timeout %d %s/schedule %s", seconds, b ? b : "build", args);
    int st = tu_run(cmd, out, sizeof out, err, sizeof err);
    cr_assert_eq(st, 2, "%s: exit %d (expected 2, refused)\nstdout: %.300s\nstderr: %s", cmd, st, out, err);
    cr_assert(strstr(err, want) != NULL, "%s: stderr '%s' (expected '%s')", cmd, err, want);
    cr_assert(strchr(err, '\n') == err + strlen(err) - 1, "%s: more than one line: %s", cmd, err);
    cr_assert(!strstr(out, "inf") && !strstr(out, "nan") && !strstr(out, "null"), "%s: %s", cmd, out);
}

/* Finite inputs whose sums or products overflow: each refused with one line, before a
 * JSON line with inf, NaN or null is printed. */
Test(limits, huge_finite_inputs_are_refused_with_one_line)
{
    const char *expect = "expected a finite time in 0..1e+12";
    refused("--scheme zb-h1 --transfer-cost 1e308", "--transfer-cost 1e+308: ", 20);
    refused("--scheme gpipe --transfer-cost 1e13", expect, 20);
    const char *cluster = "--scheme gpipe --nodes 2 --ranks-per-node 2 --intra-bw-gbs 1 --inter-bw-gbs 1";
    char args[1200], path[1024];
    snprintf(args, sizeof args, "%s --inter-latency-us 1e308", cluster);
    refused(args, "--inter-latency-us 1e+308: expected a finite time", 20);
    snprintf(args, sizeof args, "%s --intra-latency-us 1e308", cluster);
    refused(args, "--intra-latency-us 1e+308: expected a finite time", 20);
    refused("--scheme gpipe --nodes 2 --ranks-per-node 2 --intra-bw-gbs 1e-300 --inter-bw-gbs 1",
            "intra-node bandwidth 1e-297 B/us: expected a finite bandwidth", 20);
    refused("--scheme gpipe --fwd-cost 1e300", "--fwd-cost 1e+300: ", 20);
    refused("--scheme gpipe --bwd-cost 1e300", "--delta-cost 5e+299: ", 20);
    /* a profile with one stage far too slow: the same line for 1e200 and 1e150, in the
     * simulator and in LayerPipe */
    const char *big[] = {"1e200", "1e150"};
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/big%d.csv", tu_tmpdir(), k);
        FILE *f = fopen(path, "w");
        cr_assert_not_null(f);
        fprintf(f, "layer,fwd,bwd_grad,bwd_delta\na,1,1,1\nb,%s,1,1\nc,1,1,1\n", big[k]);
        fclose(f);
        char want[1200];
        snprintf(want, sizeof want, "%s: stage b: fwd %s: %s", path, k ? "1e+150" : "1e+200", expect);
        snprintf(args, sizeof args, "--scheme 1f1b --profile %s", path);
        refused(args, want, 20);
        snprintf(args, sizeof args, "--layerpipe %s --processors 2", path);
        refused(args, want, 20);
    }
    /* a communication profile with α 1e308 or β 1e-308 (and --model lenet's costs in µs) */
    const char *rows[] = {"fit,p2p,2,0,1e308,24633.3,", "fit,p2p,2,0,6.4,1e-308,"};
    const char *wants[] = {"alpha_us 1e+308: expected a finite time", "beta_bytes_per_us 1e-308 B/us: expected a "
                           "finite bandwidth"};
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/comm%d.csv", tu_tmpdir(), k);
        FILE *f = fopen(path, "w");
        cr_assert_not_null(f);
        fprintf(f, "row,op,ranks,bytes,alpha_us,beta_bytes_per_us,us\n%s\nfit,allreduce,2,0,10,1000,\n", rows[k]);
        fclose(f);
        snprintf(args, sizeof args, "--scheme gpipe --model lenet --comm-profile %s", path);
        refused(args, wants[k], 20);
    }
}

/* The work bound: refused at once, before anything is allocated (without it gpipe with
 * 1000 stages and 1e5 micro-batches held 12.7 GB and ran for minutes); below it, 1f1b
 * with 300 stages and 300 micro-batches runs in well under the timeout. */
Test(limits, simulated_work_is_bounded)
{
    const char *want = "is too large to simulate (expected jobs x workers <= 134217728)";
    refused("--scheme gpipe --stages 1000 --microbatches 100000", "--scheme gpipe: 200000000 jobs on 1000 workers", 10);
    refused("--scheme 1f1b --stages 1000 --microbatches 1000", want, 10);
    refused("--scheme zb-h1 --stages 1000 --microbatches 1000", want, 10);
    refused("--scheme zb-auto --stages 128 --microbatches 256", "--scheme zb-auto (a search over", 10);
    refused("--scheme ddp --stages 100 --microbatches 10000", want, 10);
    char cmd[600], out[8192];
    const char *b = getenv("BUILD");
    snprintf(cmd, sizeof cmd, "timeout 60 %s/schedule --scheme 1f1b --stages 300 --microbatches 300 --no-diagram",
             b ? b : "build");
    cr_assert_eq(tu_run(cmd, out, sizeof out, NULL, 0), 0, "%s: did not finish within 60 s", cmd);
    /* the library's entry points refuse it too, under sp_try, and the bound's own checks */
    cr_assert_eq(sp_limit_work("x", 134217728.0, 1), SP_OK);
    cr_assert_eq(sp_limit_work("x", 134217728.0, 2), SP_ERR);
    cr_assert_eq(sp_limit_time("x", NAN), SP_ERR);
    cr_assert_eq(sp_limit_time("x", -1), SP_ERR);
    cr_assert_eq(sp_limit_time("x", 1e12), SP_OK);
    cr_assert_eq(sp_limit_bandwidth("x", INFINITY), SP_ERR);
    cr_assert_eq(sp_limit_bytes("x", 9007199254740993.0 * 2), SP_ERR);
}

typedef struct print_args {
    sp_schedule *s;
    sp_costs *c;
    sp_sim *r;
    FILE *f;
} print_args;

static void print_body(void *arg)
{
    print_args *a = arg;
    sp_sim_print_json(a->f, a->s, a->c, a->r);
}

/* JSON has no inf or NaN: the report refuses a figure that is not finite before it
 * writes a byte. */
Test(limits, the_json_line_never_holds_inf_or_nan)
{
    sp_costs *c = sp_costs_uniform(4, 1, 0.5, 0.5);
    sp_sched_config sc = {.stages = 4, .micro = 4};
    sp_schedule *s = sp_schedule_new(sp_scheme_find("gpipe"), &sc, c);
    sp_sim r;
    sp_simulate(s, c, &r);
    const double bad[] = {INFINITY, NAN};
    for (int k = 0; k < 2; k++) {
        char *buf = NULL;
        size_t len = 0;
        print_args a = {s, c, &r, open_memstream(&buf, &len)};
        double keep = r.worker[1].utilization;
        r.worker[1].utilization = bad[k];
        cr_assert_eq(sp_try(print_body, &a), SP_ERR, "printed %g", bad[k]);
        fclose(a.f);
        cr_assert_eq(len, 0, "wrote %s", buf);
        cr_assert(strstr(sp_last_error(), "expected a finite figure") != NULL, "%s", sp_last_error());
        free(buf);
        r.worker[1].utilization = keep;
    }
    sp_sim_free(&r);
    sp_schedule_free(s);
    sp_costs_free(c);
}
