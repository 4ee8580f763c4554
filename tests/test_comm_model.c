/* test_comm_model — the α–β communication model (schedulers/sim/comm_cost.h): the
 * fit recovers known latency and bandwidth from noisy synthetic probes (and a model
 * without either term misses them), finds a protocol switch, scales collectives to other
 * rank counts, the profile file round-trips and its refusals name file and line; under
 * mpirun, `build/schedule --calibrate-comm` predicts its own probes. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/rng.h"
#include "schedulers/sim/comm_cost.h"
#include "tests/mpirun.h"

static const char *tmp(const char *name)
{
    static char path[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/%s", tu_tmpdir(), name);
    return path[k];
}

/* Geometric sizes 4 B .. 4^12 B and t = α + n/β with ±3% multiplicative noise. */
static int synth(double alpha, double beta, double *n, double *t, uint64_t seed)
{
    sp_rng r;
    sp_rng_seed(&r, seed);
    int k = 0;
    for (double b = 4; b <= 4.0 * (1 << 24); b *= 4, k++) {
        n[k] = b;
        t[k] = (alpha + b / beta) * (1 + 0.06 * (sp_rng_uniform(&r) - 0.5));
    }
    return k;
}

static double worst_err(const sp_comm_fit *f, const double *n, const double *t, int k)
{
    double e = 0;
    for (int i = 0; i < k; i++) e = fmax(e, fabs(sp_comm_fit_time(f, n[i]) - t[i]) / t[i]);
    return e;
}

Test(comm_model, fit_recovers_latency_and_bandwidth_from_noisy_probes)
{
    double n[32], t[32];
    const double alpha = 5.0, beta = 2000.0;   /* 5 µs, 2 GB/s */
    for (uint64_t seed = 1; seed <= 5; seed++) {
        int k = synth(alpha, beta, n, t, seed);
        sp_comm_fit f = {.ranks = 2};
        cr_assert_eq(sp_comm_fit_ab(n, t, k, 1, &f), SP_OK);
        cr_assert_eq(f.nsegs, 1);
        cr_expect(fabs(f.seg[0].alpha_us - alpha) / alpha < 0.05, "alpha %g (expected %g)", f.seg[0].alpha_us, alpha);
        cr_expect(fabs(f.seg[0].beta - beta) / beta < 0.05, "beta %g (expected %g)", f.seg[0].beta, beta);
        cr_expect(worst_err(&f, n, t, k) < 0.10, "worst error %g", worst_err(&f, n, t, k));
        cr_expect(fabs(f.max_rel_err - worst_err(&f, n, t, k)) < 1e-12);
        /* the same fit without either term misses its probes by far more than 10% */
        sp_comm_fit no_lat = f, no_bw = f;
        no_lat.seg[0].alpha_us = 0;
        no_bw.seg[0].beta = INFINITY;
        cr_expect(worst_err(&no_lat, n, t, k) > 0.5, "latency-free model: %g", worst_err(&no_lat, n, t, k));
        cr_expect(worst_err(&no_bw, n, t, k) > 0.5, "bandwidth-free model: %g", worst_err(&no_bw, n, t, k));
    }
}

Test(comm_model, piecewise_fit_finds_a_protocol_switch)
{
    /* eager below 64 KiB (α 1 µs, β 5000 B/µs), rendezvous above (α 30 µs, β 3000) */
    double n[32], t[32];
    int k = 0;
    for (double b = 4; b <= 4.0 * (1 << 24); b *= 4, k++) {
        n[k] = b;
        t[k] = b < 65536 ? 1 + b / 5000 : 30 + b / 3000;
    }
    sp_comm_fit one = {.ranks = 2}, f = {.ranks = 2};
    cr_assert_eq(sp_comm_fit_ab(n, t, k, 1, &one), SP_OK);
    cr_assert_eq(sp_comm_fit_ab(n, t, k, SP_COMM_MAX_SEGS, &f), SP_OK);
    cr_expect(one.max_rel_err > 0.3, "one segment fits a switch: %g", one.max_rel_err);
    cr_assert_geq(f.nsegs, 2);
    cr_expect(f.max_rel_err < 0.01, "piecewise worst error %g", f.max_rel_err);
    cr_expect_eq(f.seg[0].from_bytes, 0);
    bool at_switch = false;
    for (int s = 1; s < f.nsegs; s++) at_switch |= f.seg[s].from_bytes == 65536;
    cr_expect(at_switch, "a segment starts at the switch (64 KiB)");
}

Test(comm_model, collectives_scale_to_other_rank_counts)
{
    sp_comm_model m = {0};
    m.fit[SP_COMM_ALLREDUCE] = (sp_comm_fit){.ranks = 2, .nsegs = 1, .seg = {{0, 10, 1000}}};
    m.fit[SP_COMM_P2P] = (sp_comm_fit){.ranks = 2, .nsegs = 1, .seg = {{0, 2, 4000}}};
    /* at the measured count: the fit itself */
    cr_expect_float_eq(sp_comm_time(&m, SP_COMM_ALLREDUCE, 1e6, 2), 10 + 1000, 1e-9);
    /* ring allreduce: 2(P−1) latencies and 2(P−1)/P of the bytes per link; at P = 2 that is
     * 2α' and n/β', so α' = 5, β' = 1000 → P = 8: 14·5 + 1.75·1e6/1000 */
    cr_expect_float_eq(sp_comm_time(&m, SP_COMM_ALLREDUCE, 1e6, 8), 70 + 1750, 1e-9);
    cr_expect_eq(sp_comm_time(&m, SP_COMM_ALLREDUCE, 1e6, 1), 0);
    cr_expect_float_eq(sp_comm_time(&m, SP_COMM_P2P, 4000, 64), 3, 1e-12);   /* p2p: ranks do not matter */
    cr_expect(isnan(sp_comm_time(&m, SP_COMM_BROADCAST, 100, 2)), "an op not measured is NAN");
}

Test(comm_model, profile_round_trips_and_refusals_name_file_and_line)
{
    double n[32], t[32];
    int k = synth(3, 1500, n, t, 9);
    sp_comm_model m = {.nprobes = k};
    m.probes = calloc((size_t)k, sizeof *m.probes);
    for (int i = 0; i < k; i++) m.probes[i] = (sp_comm_probe){SP_COMM_ALLREDUCE, 4, n[i], t[i]};
    m.fit[SP_COMM_ALLREDUCE].ranks = 4;
    cr_assert_eq(sp_comm_fit_ab(n, t, k, SP_COMM_MAX_SEGS, &m.fit[SP_COMM_ALLREDUCE]), SP_OK);
    const char *path = tmp("comm.csv");
    cr_assert_eq(sp_comm_model_write(&m, path), SP_OK, "%s", sp_last_error());
    sp_comm_model *r;
    cr_assert_eq(sp_comm_model_load(path, &r), SP_OK, "%s", sp_last_error());
    cr_expect_eq(r->nprobes, k);
    cr_expect_eq(r->fit[SP_COMM_ALLREDUCE].ranks, 4);
    cr_expect_eq(r->fit[SP_COMM_P2P].ranks, 0);
    for (int i = 0; i < k; i++) {
        double a = sp_comm_time(&m, SP_COMM_ALLREDUCE, n[i], 4), b = sp_comm_time(r, SP_COMM_ALLREDUCE, n[i], 4);
        cr_expect(fabs(a - b) / a < 1e-5, "size %g: %g written, %g read", n[i], a, b);
    }
    cr_expect(fabs(r->fit[SP_COMM_ALLREDUCE].max_rel_err - m.fit[SP_COMM_ALLREDUCE].max_rel_err) < 1e-4);
    sp_comm_model_free(r);
    free(m.probes);

    static const struct { const char *text, *says; } bad[] = {
        {"op,ranks\n", ":1: header 'op,ranks'"},
        {"row,op,ranks,bytes,alpha_us,beta_bytes_per_us,us\nfit,alltoall,2,0,1,1,\n", ":2: op 'alltoall'"},
        {"row,op,ranks,bytes,alpha_us,beta_bytes_per_us,us\nfit,p2p,2,0,-1,1,\n", ":2: alpha_us '-1'"},
        {"row,op,ranks,bytes,alpha_us,beta_bytes_per_us,us\nfit,p2p,2,0,1,0,\n", ":2: beta_bytes_per_us '0'"},
        {"row,op,ranks,bytes,alpha_us,beta_bytes_per_us,us\nfit,p2p,2,64,1,1,\n", "the first from 0"},
        {"# c\nrow,op,ranks,bytes,alpha_us,beta_bytes_per_us,us\nfit,p2p,2,0,1,1,\nfit,p2p,2,0,1,1,\n",
         ":4: p2p segment from 0 bytes (expected increasing bytes)"},
        {"row,op,ranks,bytes,alpha_us,beta_bytes_per_us,us\nfit,p2p,2,0,1,1\n", ":2: 6 fields"},
        {"row,op,ranks,bytes,alpha_us,beta_bytes_per_us,us\nprobe,p2p,2,4,,,nan\n", ":2: us 'nan'"},
        {"row,op,ranks,bytes,alpha_us,beta_bytes_per_us,us\n", "no fit rows"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        FILE *f = fopen(path, "w");
        fputs(bad[i].text, f);
        fclose(f);
        sp_comm_model *x = (sp_comm_model *)1;
        cr_expect_eq(sp_comm_model_load(path, &x), SP_ERR, "case %zu accepted", i);
        cr_expect_null(x);
        cr_expect(strstr(sp_last_error(), path) && strstr(sp_last_error(), bad[i].says), "case %zu: %s", i,
                  sp_last_error());
    }
    sp_comm_model *x;
    cr_expect_eq(sp_comm_model_load(tu_tmpdir(), &x), SP_ERR, "a directory is refused");
}

/* Under mpirun: the calibration of point-to-point and allreduce (the short probe's ops,
 * the executor's commonest) on shared memory predicts its own probes — the median of 9
 * repetitions per size — with a median error within 10%, and a model without its latency
 * or without its bandwidth term misses them. The worst probe is reported, not asserted:
 * on a shared 2-core machine one size can catch a descheduled peer, and a whole
 * calibration can: the best of up to 3 is judged. */
Test(comm_model, calibration_predicts_its_own_probes, .timeout = 120)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    const char *path = tmp("cal.csv");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/schedule --calibrate-comm %s --calibrate-max-mb 1 --calibrate-reps 9",
             getenv("BUILD") ? getenv("BUILD") : "build", path);
    /* Up to 3 calibrations, the first whose p2p and allreduce fits both meet the 10% is
     * kept: a probe run while another process holds a core can miss (a fit that ignores
     * latency or bandwidth misses every time, and the checks below see that). */
    mpi_result res;
    sp_comm_model *m = NULL;
    for (int attempt = 0; attempt < 3; attempt++) {
        if (m) sp_comm_model_free(m);
        mpi_run("", "-np 2", cmd, &res);
        cr_assert_eq(res.status, 0, "%s\n%s", res.out, res.err);
        cr_expect(strstr(res.out, "\"mode\": \"calibrate-comm\""), "%s", res.out);
        cr_assert_eq(sp_comm_model_load(path, &m), SP_OK, "%s", sp_last_error());
        if (m->fit[SP_COMM_P2P].median_rel_err <= 0.10 && m->fit[SP_COMM_ALLREDUCE].median_rel_err <= 0.10) break;
    }
    for (int op = 0; op < SP_COMM_NOPS; op++) cr_expect_eq(m->fit[op].ranks, 2, "%s measured", sp_comm_op_name(op));
    int ops[] = {SP_COMM_P2P, SP_COMM_ALLREDUCE};
    for (int o = 0; o < 2; o++) {
        sp_comm_fit f = m->fit[ops[o]], no_lat = f, no_bw = f;
        for (int s = 0; s < f.nsegs; s++) no_lat.seg[s].alpha_us = 0, no_bw.seg[s].beta = INFINITY;
        double e_lat = 0, e_bw = 0, small = INFINITY, large = 0;
        int k = 0;
        for (int i = 0; i < m->nprobes; i++) {
            const sp_comm_probe *p = &m->probes[i];
            if (p->op != ops[o]) continue;
            k++;
            small = fmin(small, p->bytes), large = fmax(large, p->bytes);
            if (p->bytes == small) e_lat = fabs(sp_comm_fit_time(&no_lat, p->bytes) - p->us) / p->us;
            if (p->bytes == large) e_bw = fabs(sp_comm_fit_time(&no_bw, p->bytes) - p->us) / p->us;
        }
        cr_expect_eq(k, 10, "%s: sizes 4 B to 1 MiB by 4", sp_comm_op_name(ops[o]));
        cr_expect_eq(small, 4);
        cr_expect_eq(large, 1 << 20);
        cr_expect(f.median_rel_err <= 0.10, "%s: median error %.1f%% on its own probes (worst %.1f%%)",
                  sp_comm_op_name(ops[o]), 100 * f.median_rel_err, 100 * f.max_rel_err);
        cr_expect(e_lat > 0.5, "%s: without latency the smallest probe is off by only %.0f%%", sp_comm_op_name(ops[o]),
                  100 * e_lat);
        cr_expect(e_bw > 0.5, "%s: without bandwidth the largest probe is off by only %.0f%%", sp_comm_op_name(ops[o]),
                  100 * e_bw);
        cr_log_info("%s: median error %.1f%%, worst %.1f%%", sp_comm_op_name(ops[o]), 100 * f.median_rel_err,
                    100 * f.max_rel_err);
    }
    sp_comm_model_free(m);
    /* build/schedule reads it back; a bad profile is refused naming file and line */
    char out[8192], err[2048];
    snprintf(cmd, sizeof cmd, "%s --comm-profile %s --no-diagram", tu_bin("schedule"), path);
    cr_expect_eq(tu_run(cmd, out, sizeof out, err, sizeof err), 0, "%s", err);
    cr_expect(strstr(out, "communication model (") && strstr(out, "allreduce"), "%s", out);
    FILE *f = fopen(path, "a");
    fputs("fit,p2p,3,0,1,1,\n", f);
    fclose(f);
    cr_expect_eq(tu_run(cmd, out, sizeof out, err, sizeof err), 2);
    cr_expect(strstr(err, path) && strstr(err, "p2p measured with 3 ranks here, 2 above"), "%s", err);
}

/* ---- topology: two link classes (sp_comm_time_ranks) ----------------------------------- */

/* 2 nodes × 4 ranks; intra 1 µs, 100 B/µs; inter 10 µs, 10 B/µs. */
static const sp_comm_topology TOPO = {.nodes = 2, .ranks_per_node = 4, .intra = {1, 100}, .inter = {10, 10}};

Test(topology, point_to_point_takes_the_link_between_the_two_ranks)
{
    int same[2] = {1, 3}, cross[2] = {3, 4};
    cr_expect_float_eq(sp_comm_time_ranks(NULL, SP_COMM_P2P, 1000, same, 0, 2, &TOPO), 1 + 10.0, 1e-9);
    cr_expect_float_eq(sp_comm_time_ranks(NULL, SP_COMM_P2P, 1000, cross, 0, 2, &TOPO), 10 + 100.0, 1e-9);
    /* (first, count): ranks 3 and 4 */
    cr_expect_float_eq(sp_comm_time_ranks(NULL, SP_COMM_P2P, 1000, NULL, 3, 2, &TOPO), 110.0, 1e-9);
    cr_expect(isnan(sp_comm_time_ranks(NULL, SP_COMM_P2P, 1000, NULL, 0, 3, &TOPO)), "p2p of 3 ranks");
    cr_expect(isnan(sp_comm_time_ranks(NULL, SP_COMM_P2P, 1000, NULL, 7, 2, &TOPO)), "rank 8 is outside 2 x 4");
}

Test(topology, collectives_within_a_node_and_across_nodes)
{
    double n = 8000;
    /* one node, 4 ranks: ring 2·3·(1 + n/(4·100)) */
    cr_expect_float_eq(sp_comm_time_ranks(NULL, SP_COMM_ALLREDUCE, n, NULL, 0, 4, &TOPO), 6 * (1 + n / 400), 1e-9);
    /* 8 ranks over 2 nodes: flat 14·(10 + n/80) = 1540; hierarchical
     * 6·(1 + n/400) + 2·(10 + n/20) = 126 + 820 = 946 — the cheaper */
    double hier = 6 * (1 + n / 400) + 2 * (10 + n / 20), flat = 14 * (10 + n / 80);
    cr_expect(hier < flat);
    cr_expect_float_eq(sp_comm_time_ranks(NULL, SP_COMM_ALLREDUCE, n, NULL, 0, 8, &TOPO), hier, 1e-9);
    /* spanning nodes costs more than the same count inside one (a 4-rank set 2 + 2) */
    int split[4] = {2, 3, 4, 5};
    double within = sp_comm_time_ranks(NULL, SP_COMM_ALLREDUCE, n, NULL, 0, 4, &TOPO),
           across = sp_comm_time_ranks(NULL, SP_COMM_ALLREDUCE, n, split, 0, 4, &TOPO);
    cr_expect(across > 5 * within, "allreduce over 2 nodes %.1f us, within one %.1f us", across, within);
    cr_expect_float_eq(across, fmin(6 * (10 + n / 40), 2 * (1 + n / 200) + 2 * (10 + n / 20)), 1e-9);
    /* broadcast: ⌈log₂ 2⌉ inter steps + ⌈log₂ 4⌉ intra steps */
    cr_expect_float_eq(sp_comm_time_ranks(NULL, SP_COMM_BROADCAST, n, NULL, 0, 8, &TOPO),
                       (10 + n / 10) + 2 * (1 + n / 100), 1e-9);
    /* allgather over nodes: ring bounded by the inter link */
    cr_expect_float_eq(sp_comm_time_ranks(NULL, SP_COMM_ALLGATHER, n, NULL, 0, 8, &TOPO), 7 * (10 + n / 10), 1e-9);
    cr_expect_eq(sp_comm_time_ranks(NULL, SP_COMM_ALLREDUCE, n, NULL, 5, 1, &TOPO), 0, "one rank");
    /* without a topology: the measured model */
    sp_comm_model m = {0};
    m.fit[SP_COMM_ALLREDUCE] = (sp_comm_fit){.ranks = 2, .nsegs = 1, .seg = {{0, 3, 50}}};
    cr_expect_float_eq(sp_comm_time_ranks(&m, SP_COMM_ALLREDUCE, n, NULL, 0, 2, NULL),
                       sp_comm_time(&m, SP_COMM_ALLREDUCE, n, 2), 1e-12);
}

Test(topology, bad_topologies_are_refused)
{
    sp_comm_topology t = TOPO;
    cr_expect_eq(sp_comm_topology_check(&t, "x"), SP_OK);
    t.inter.beta = 0;
    cr_expect_eq(sp_comm_topology_check(&t, "--nodes"), SP_ERR);
    cr_expect(strstr(sp_last_error(), "--nodes: inter-node bandwidth 0"), "%s", sp_last_error());
    t = TOPO, t.intra.alpha_us = -1;
    cr_expect_eq(sp_comm_topology_check(&t, "x"), SP_ERR);
    t = TOPO, t.ranks_per_node = 0;
    cr_expect_eq(sp_comm_topology_check(&t, "x"), SP_ERR);
    /* the program: one line on stderr, exit 2 */
    const char *bad[] = {
        "--nodes 2 --ranks-per-node 2 --intra-bw-gbs 100 --inter-bw-gbs -1",
        "--nodes 2 --intra-bw-gbs 100 --inter-bw-gbs 10",
        "--nodes 1 --ranks-per-node 2 --intra-bw-gbs 100 --inter-bw-gbs 10 --workers 4",
        "--ranks-per-node 2",
        "--nodes 2 --ranks-per-node 2 --intra-bw-gbs 100 --inter-bw-gbs 10 --inter-latency-us -3",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char cmd[1024], out[8192], err[2048];
        snprintf(cmd, sizeof cmd, "%s --no-diagram %s", tu_bin("schedule"), bad[i]);
        cr_expect_eq(tu_run(cmd, out, sizeof out, err, sizeof err), 2, "%s", bad[i]);
        cr_expect(strchr(err, '\n') == strrchr(err, '\n') && strlen(err) > 0, "%s: one line: %s", bad[i], err);
    }
}

Test(topology, schedule_predicts_a_cluster_step)
{
    char cmd[1024], out[16384], err[2048];
    /* ddp of vgg11 over 16 ranks: 2 nodes of 8 vs 16 nodes of 1 — crossing more nodes
     * costs more communication */
    double comm[2];
    const char *shapes[2] = {"--nodes 2 --ranks-per-node 8", "--nodes 16 --ranks-per-node 1"};
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "%s --scheme ddp --model vgg11 --workers 16 --microbatches 16 --batch-size 8 "
                 "--gflops 10000 --no-diagram %s --intra-latency-us 3 --intra-bw-gbs 300 --inter-latency-us 5 "
                 "--inter-bw-gbs 25", tu_bin("schedule"), shapes[k]);
        cr_assert_eq(tu_run(cmd, out, sizeof out, err, sizeof err), 0, "%s", err);
        const char *p = strstr(out, "\"comm_max\": ");
        cr_assert_not_null(p, "%s", out);
        comm[k] = atof(p + 12);
        cr_expect(strstr(out, "\"step_no_overlap\"") && strstr(out, "\"peak_memory_bytes\""), "%s", out);
    }
    cr_expect(comm[0] > 0 && comm[1] > 1.5 * comm[0], "2x8: %.1f us, 16x1: %.1f us", comm[0], comm[1]);
}

/* The step's communication of ddp on LeNet at 2 ranks of one node: one bucket (the
 * parameterless layers between the weights do not split it) of all 246 824 parameter
 * bytes, one ring allreduce 2·(α + bytes/(2β)). */
Test(topology, ddp_sends_one_bucket_per_step)
{
    char cmd[1024], out[16384], err[2048];
    snprintf(cmd, sizeof cmd, "%s --scheme ddp --model lenet --workers 2 --microbatches 2 --no-diagram --nodes 1 "
             "--ranks-per-node 2 --intra-latency-us 3 --intra-bw-gbs 300 --inter-latency-us 5 --inter-bw-gbs 100",
             tu_bin("schedule"));
    cr_assert_eq(tu_run(cmd, out, sizeof out, err, sizeof err), 0, "%s", err);
    const char *p = strstr(out, "\"comm_max\": ");
    cr_assert_not_null(p, "%s", out);
    cr_expect_float_eq(atof(p + 12), 2 * (3 + 246824 / 2.0 / 300e3), 1e-4, "%s", out);
}

/* ---- a program per rank (sim_prog.c) and the clip's allgather (sim_comm.c) --------------- */

#include "schedulers/sim/sim_comm.h"

static void op(sp_prog *p, int o, int r, int peer, int kind, double bytes, double us)
{
    sp_prog_add(p, (sp_prog_op){.op = o, .rank = r, .peer = peer, .kind = kind, .stage = 0, .job = -1, .bytes = bytes,
                                .us = us});
}

/* Two ranks, a constant transfer of 1 per message (a ring allreduce of 2 ranks: 2 steps,
 * the loss free), by hand: rank 0 computes 2, sends (lane 2–3), computes to 3, waits
 * for rank 1's reply; rank 1 receives at 3, computes to 6, replies (6–7); rank 0 goes on
 * at 7 to 8; the allreduce starts when both reached it (8) and lasts 2: the step is 10,
 * 11 with an optimizer step of 1 after it. Each rank's messages in its program's order. */
Test(sim_prog, a_hand_computed_two_rank_program)
{
    sp_prog p = {.workers = 2};
    op(&p, SP_OP_COMPUTE, 0, -1, 0, 0, 2);
    op(&p, SP_OP_SEND, 0, 1, SP_MSG_SCAN, 100, 0);
    op(&p, SP_OP_COMPUTE, 0, -1, 0, 0, 1);
    op(&p, SP_OP_WAITSENDS, 0, -1, 0, 0, 0);
    op(&p, SP_OP_RECV, 1, 0, 0, 0, 0);   /* the ranks' ops may interleave in the list */
    op(&p, SP_OP_RECV, 0, 1, 0, 0, 0);
    op(&p, SP_OP_COMPUTE, 0, -1, 0, 0, 1);
    op(&p, SP_OP_COMPUTE, 1, -1, 0, 0, 3);
    op(&p, SP_OP_SEND, 1, 0, SP_MSG_HANDOFF, 40, 0);
    for (int r = 0; r < 2; r++) {
        op(&p, SP_OP_ALLREDUCE, r, -1, SP_MSG_ALLREDUCE, 64, 0);
        op(&p, SP_OP_OPT, r, -1, 0, 0, 1);
        op(&p, SP_OP_LOSS, r, -1, SP_MSG_LOSS, 4, 0);
    }
    sp_sim_comm_cfg cfg = {.transfer = 1};
    sp_sim_comm m;
    sp_simulate_prog(&p, &cfg, &m);
    cr_assert_float_eq(m.latency, 11, 1e-12, "step %g, by hand 11", m.latency);
    cr_assert_eq(m.nmsg, 6);
    const int kinds[6] = {SP_MSG_SCAN, SP_MSG_ALLREDUCE, SP_MSG_LOSS, SP_MSG_HANDOFF, SP_MSG_ALLREDUCE, SP_MSG_LOSS};
    for (int i = 0; i < 6; i++) {
        cr_assert_eq(m.msg[i].rank, i / 3, "message %d on rank %d", i, m.msg[i].rank);
        cr_assert_eq(m.msg[i].kind, kinds[i], "message %d: %s", i, sp_msg_kind_name(m.msg[i].kind));
    }
    cr_assert_float_eq(m.msg[0].start, 2, 1e-12);
    cr_assert_float_eq(m.msg[3].start, 6, 1e-12);
    cr_assert_float_eq(m.msg[1].start, 8, 1e-12);
    cr_assert_float_eq(m.msg[1].end, 10, 1e-12);
    cr_assert_float_eq(m.comm_us[0], 3, 1e-12, "rank 0's lane: its send and the allreduce");
    cr_assert_float_eq(m.opt_us[1], 1, 1e-12);
    cr_assert_eq(m.messages[1], 3);
    sp_sim_comm_free(&m);
    sp_prog_free(&p);
}

/* --clip-grad-norm in the simulation: ddp at 2 ranks, transfer 1 a message (the norm's
 * allgather of 2 ranks: one step), an optimizer step of 5 per stage. Plain: the updates
 * wait for the norm, one more than without a clip; post-validate: the updates overlap
 * it, the step without a clip; each rank's norm is its last message (after its loss). */
Test(sim_comm, clip_norm_allgather_plain_and_post_validated)
{
    sp_costs *c = sp_costs_uniform(4, 1, 0.7, 0.9);
    for (int s = 0; s < 4; s++) c->act_bytes[s] = 100, c->param_bytes[s] = 400;
    sp_sched_config sc = {.stages = 4, .micro = 2, .workers = 2};
    sp_schedule *s = sp_schedule_new(sp_scheme_find("ddp"), &sc, c);
    sp_sim r;
    sp_simulate(s, c, &r);
    double opt[4] = {5, 5, 5, 5}, T[3];
    for (int clip = 0; clip < 3; clip++) {
        sp_sim_comm_cfg cfg = {.bucket_mb = 25, .transfer = 1, .opt_us = opt, .clip = clip};
        sp_sim_comm m;
        sp_simulate_comm(s, c, &r, &cfg, &m);
        T[clip] = m.latency;
        int norms = 0;
        for (int i = 0; i < m.nmsg; i++) {
            if (m.msg[i].kind != SP_MSG_NORM) continue;
            norms++;
            cr_assert(i + 1 == m.nmsg || m.msg[i + 1].rank != m.msg[i].rank, "clip %d: rank %d's norm is not its last "
                      "message", clip, m.msg[i].rank);
            cr_assert_float_eq(m.msg[i].end - m.msg[i].start, 1, 1e-12);
        }
        cr_assert_eq(norms, clip ? 2 : 0, "clip %d: %d norm messages", clip, norms);
        sp_sim_comm_free(&m);
    }
    cr_assert_float_eq(T[SP_CLIP_PLAIN], T[SP_CLIP_NONE] + 1, 1e-9, "plain %g, no clip %g", T[1], T[0]);
    cr_assert_float_eq(T[SP_CLIP_POST_VALIDATE], T[SP_CLIP_NONE], 1e-9, "post-validate %g, no clip %g", T[2], T[0]);
    sp_sim_free(&r);
    sp_schedule_free(s);
    sp_costs_free(c);
}
