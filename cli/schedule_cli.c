/* schedule_cli.c — build/schedule's program (cli/schedule_cli.h): simulate a
 * parallel-training schedule and draw it, or balance a pipeline with LayerPipe.
 * Flags → schedulers/plan/schedule.h → print.
 *
 *   schedule --scheme lpp --stages 8 --microbatches 16 --groups 2 --per-group 4 --svg out.svg
 *   schedule --scheme gpipe --model vgg11 --workers 4
 *   schedule --layerpipe profile.csv --processors 3
 *   schedule --scheme zb-h1 --stages 4 --microbatches 8 --actions-out zb.csv
 *   schedule --scheme custom --actions zb.csv
 *
 * The last stdout line is one JSON object. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/flags.h"
#include "cli/schedule_cli.h"
#include "cli/summary.h"
#include "layers/zoo.h"
#include "core/error.h"
#include "core/io/fileio.h"
#include "core/model.h"
#include "schedulers/exec/exec.h"
#include "schedulers/plan/actions.h"
#include "schedulers/plan/limits.h"
#include "core/comm/comm.h"
#include "schedulers/sim/comm_cost.h"
#include "schedulers/plan/schedule.h"
#include "schedulers/sim/sim.h"
#include "schedulers/sim/sim_comm.h"
#include "schedulers/sim/sim_report.h"
#include "core/tape.h"

typedef struct opts {
    const char *scheme, *model, *profile, *svg, *title, *layerpipe, *costs_out, *actions, *actions_out;
    const char *calibrate_comm, *comm_profile;   /* the communication model (comm_cost.h) */
    const char *optim;       /* memory: the optimizer's state per parameter (sp_optim_slots) */
    const char *mem_limit_arg;   /* --mem-limit as given: N chunk micro-batches | bytes with a unit */
    const char *mem_model;       /* --mem-model: whole | sail (sp_act_model, schedule.h)     */
    double mem_grad_share;       /* --mem-grad-share: sail's share of an activation G needs */
    bool mem_limit_bytes;        /* mem_limit is in bytes (the chunks' act_bytes)            */
    double momentum, bucket_mb, opt_gbs;
    double transfer;         /* --transfer-cost: every message's latency, the costs' unit */
    sp_comm_topology topo;   /* --nodes …: a cluster to predict for (links in GB/s here)   */
    int stages, micro, workers, groups, per_group, batch, processors, max_cols, chunks, cal_reps;
    double fwd, bwd, delta, grad, gflops, alpha, mem_limit, cal_max_mb;
    bool split, no_split, no_input_grad, no_diagram, list, torch;
    bool sync_bn;            /* --sync-bn: the apps' synchronized batch norm (its allgathers) */
    bool stages_given, micro_given, workers_given;   /* custom: flags the list must agree with */
} opts;

#define SIM "!layerpipe,!list,!calibrate-comm"   /* the simulator's flags */
#define UNIFORM SIM ",!model,!profile"  /* durations given by the cost flags */

static void parse(int argc, char **argv, opts *o)
{
    const char *scheme_names = sp_schedule_all_names();
    sp_flag table[] = {
        {"scheme", SP_FLAG_STR, &o->scheme, "the schedule", .choices = scheme_names, .group = "schedule",
         .needs = SIM},
        {"stages", SP_FLAG_INT, &o->stages, "S, pipeline stages (--model/--profile: one per layer)", .range = "1..",
         .group = "schedule", .needs = UNIFORM},
        {"microbatches", SP_FLAG_INT, &o->micro, "B, micro-batches", .range = "1..", .group = "schedule", .needs = SIM},
        {"workers", SP_FLAG_INT, &o->workers, "W workers", .def = "B for ddp/fsdp, S for pipelines, G*R for lpp",
         .range = "1..", .group = "schedule", .needs = SIM},
        {"groups", SP_FLAG_INT, &o->groups, "G groups", .def = "from W", .range = "1..", .group = "schedule",
         .needs = SIM ",scheme=lpp|fslpp"},
        {"per-group", SP_FLAG_INT, &o->per_group, "R workers per group", .def = "from W", .range = "1..", .group = "schedule",
         .needs = SIM ",scheme=lpp|fslpp"},
        {"chunks", SP_FLAG_INT, &o->chunks, "V chunks per rank (interleaved-1f1b, interleaved-zb, looped-bfs; "
         "zb-auto: 1, or 2 for the V)", .def = "the scheme's",
         .range = "1..", .group = "schedule", .needs = SIM ",scheme=interleaved-1f1b|interleaved-zb|looped-bfs|zb-auto"},
        {"actions", SP_FLAG_STR, &o->actions, "per-rank action lists (CSV, PyTorch's form: 0F0,0I0,0W0,...)",
         .meta = "CSV", .group = "schedule", .needs = SIM ",scheme=custom"},
        {"mem-limit", SP_FLAG_STR, &o->mem_limit_arg, "zb-auto: peak activations per rank, N micro-batches of a "
         "chunk or bytes with a unit (512MiB, 1.5GB, 300KB; bytes need --model or --profile)", .meta = "N|BYTES",
         .group = "schedule", .needs = SIM ",scheme=zb-auto"},
        {"mem-model", SP_FLAG_STR, &o->mem_model, "activation memory: whole (held until its backward has fully "
         "run) or sail (F adds it, delta frees its part, G the rest)", .choices = "whole|sail", .def = "whole",
         .group = "schedule", .needs = SIM},
        {"mem-grad-share", SP_FLAG_DOUBLE, &o->mem_grad_share, "--mem-model sail: the share of an activation only "
         "G needs (freed by G; delta frees the rest)", .def = "0.5", .range = "0..1", .group = "schedule",
         .needs = SIM ",mem-model=sail"},
        {"split", SP_FLAG_BOOL, &o->split, "backward as two jobs, delta before G (any scheme)", .group = "schedule",
         .needs = SIM ",!no-split"},
        {"no-split", SP_FLAG_BOOL, &o->no_split, "backward as one job (ooo schemes split by default)",
         .group = "schedule", .needs = SIM},
        {"no-input-grad", SP_FLAG_BOOL, &o->no_input_grad, "stage 0 computes no delta (its input is data)",
         .group = "schedule", .needs = SIM},
        {"fwd-cost", SP_FLAG_DOUBLE, &o->fwd, "time of a forward job", .range = "0..", .group = "uniform durations",
         .needs = UNIFORM},
        {"bwd-cost", SP_FLAG_DOUBLE, &o->bwd, "time of a backward job (delta = G = half)", .range = "0..",
         .group = "uniform durations", .needs = UNIFORM},
        {"delta-cost", SP_FLAG_DOUBLE, &o->delta, "time of a delta job", .def = "bwd-cost/2", .range = "0..",
         .group = "uniform durations", .needs = UNIFORM},
        {"grad-cost", SP_FLAG_DOUBLE, &o->grad, "time of a G job", .def = "bwd-cost/2", .range = "0..",
         .group = "uniform durations", .needs = UNIFORM},
        {"model", SP_FLAG_STR, &o->model, "durations from the op costs of a zoo model", .choices = sp_zoo_names(),
         .group = "durations from a model or a profile", .needs = SIM ",!profile"},
        {"batch-size", SP_FLAG_INT, &o->batch, "samples per micro-batch", .range = "1..",
         .group = "durations from a model or a profile", .needs = SIM ",model"},
        {"gflops", SP_FLAG_DOUBLE, &o->gflops, "worker speed in GFLOP/s, times in us", .meta = "X",
         .group = "durations from a model or a profile", .needs = SIM ",model"},
        {"profile", SP_FLAG_STR, &o->profile, "durations from a profile CSV (layer,fwd,bwd_grad,bwd_delta)",
         .meta = "CSV", .group = "durations from a model or a profile", .needs = SIM},
        {"costs-out", SP_FLAG_STR, &o->costs_out, "write the per-stage costs as a profile CSV", .meta = "CSV",
         .group = "output", .needs = SIM},
        {"actions-out", SP_FLAG_STR, &o->actions_out, "write the simulated order as per-rank action lists (CSV)",
         .meta = "CSV", .group = "output", .needs = SIM},
        {"torch", SP_FLAG_BOOL, &o->torch, "--actions-out in PyTorch's form with communication (SEND_F, RECV_F, "
         "SEND_B, RECV_B, REDUCE_GRAD), what its runtime's _dump_csv writes and _load_csv(path, "
         "format=\"compute_comms\") reads", .group = "output", .needs = SIM ",actions-out"},
        {"svg", SP_FLAG_STR, &o->svg, "write the pipeline diagram as SVG", .meta = "FILE", .group = "output",
         .needs = SIM},
        {"title", SP_FLAG_STR, &o->title, "SVG title", .group = "output", .needs = SIM ",svg"},
        {"max-cols", SP_FLAG_INT, &o->max_cols, "text diagram width in time steps", .range = "1..", .group = "output",
         .needs = SIM ",!no-diagram"},
        {"no-diagram", SP_FLAG_BOOL, &o->no_diagram, "do not print the text diagram", .group = "output", .needs = SIM},
        {"layerpipe", SP_FLAG_STR, &o->layerpipe, "LayerPipe Algorithm 1 on a profile CSV (instead of a schedule)",
         .meta = "CSV", .group = "layerpipe", .needs = "!list"},
        {"processors", SP_FLAG_INT, &o->processors, "processors", .range = "1..", .group = "layerpipe",
         .needs = "layerpipe"},
        {"alpha", SP_FLAG_DOUBLE, &o->alpha, "relaxation factor of Tp", .range = "1..", .group = "layerpipe",
         .needs = "layerpipe"},
        {"list", SP_FLAG_BOOL, &o->list, "list the schemes (and nothing else)", .group = "layerpipe"},
        {"calibrate-comm", SP_FLAG_STR, &o->calibrate_comm, "under mpirun -np W: measure point-to-point and the "
         "collectives, fit latency + bytes/bandwidth, write the profile (and nothing else)", .meta = "FILE",
         .group = "communication", .needs = "!layerpipe,!list,!comm-profile"},
        {"calibrate-max-mb", SP_FLAG_DOUBLE, &o->cal_max_mb, "largest probe message (the largest gradient bucket)",
         .meta = "X", .range = "0.000004..4096", .group = "communication", .needs = "calibrate-comm"},
        {"calibrate-reps", SP_FLAG_INT, &o->cal_reps, "repetitions per size (the median is kept)", .range = "1..1000",
         .group = "communication", .needs = "calibrate-comm"},
        {"optim", SP_FLAG_STR, &o->optim, "the run's optimizer, for its state in peak_memory_bytes",
         .choices = "sgd|adam|adamw", .group = "memory", .needs = SIM},
        {"momentum", SP_FLAG_DOUBLE, &o->momentum, "SGD momentum (0: no momentum buffer)", .meta = "X", .range = "0..",
         .group = "memory", .needs = SIM ",optim=sgd"},
        {"nodes", SP_FLAG_INT, &o->topo.nodes, "predict for a cluster of N nodes (rank r on node r / R)", .meta = "N",
         .range = "1..", .group = "cluster (a prediction)", .needs = SIM},
        {"ranks-per-node", SP_FLAG_INT, &o->topo.ranks_per_node, "R ranks on each node", .meta = "R", .range = "1..",
         .group = "cluster (a prediction)", .needs = SIM ",nodes"},
        {"intra-latency-us", SP_FLAG_DOUBLE, &o->topo.intra.alpha_us, "latency between ranks of one node", .meta = "X",
         .range = "0..", .group = "cluster (a prediction)", .needs = SIM ",nodes"},
        {"intra-bw-gbs", SP_FLAG_DOUBLE, &o->topo.intra.beta, "bandwidth between ranks of one node, GB/s",
         .meta = "X", .group = "cluster (a prediction)", .needs = SIM ",nodes"},
        {"inter-latency-us", SP_FLAG_DOUBLE, &o->topo.inter.alpha_us, "latency between nodes", .meta = "X",
         .range = "0..", .group = "cluster (a prediction)", .needs = SIM ",nodes"},
        {"inter-bw-gbs", SP_FLAG_DOUBLE, &o->topo.inter.beta, "bandwidth of one node to another (all its NICs), GB/s",
         .meta = "X", .group = "cluster (a prediction)", .needs = SIM ",nodes"},
        {"bucket-mb", SP_FLAG_DOUBLE, &o->bucket_mb, "gradient buckets of the simulated allreduces in MB, as the "
         "executor's --bucket-mb (0 = one per stage; with --nodes or --comm-profile)", .meta = "X", .range = "0..",
         .def = "25", .group = "communication", .needs = SIM},
        {"opt-gbs", SP_FLAG_DOUBLE, &o->opt_gbs, "memory bandwidth of the simulated optimizer step in GB/s (it "
         "streams 5x the parameter bytes; with --nodes or --comm-profile)", .meta = "X", .range = "0.000001..",
         .def = "10", .group = "communication", .needs = SIM},
        {"comm-profile", SP_FLAG_STR, &o->comm_profile, "read a communication profile (--calibrate-comm's file) and "
         "print its model and simulate with communication (the JSON's latency_with_comm, comm_ms, messages)",
         .meta = "FILE", .group = "communication", .needs = "!layerpipe,!list"},
        {"sync-bn", SP_FLAG_BOOL, &o->sync_bn, "--model with batch norm: synchronized statistics, as the apps' "
         "--sync-bn (an allgather of each batch-norm layer's per-channel sums in the forward and one in the "
         "backward; without it each rank's own statistics and rank 0's running statistics broadcast at each "
         "step's start)", .group = "communication", .needs = SIM ",model,scheme=ddp|fsdp|ddp-ooo"},
        {"transfer-cost", SP_FLAG_DOUBLE, &o->transfer, "every message between two workers costs X (the costs' "
         "unit; a collective X per step of its algorithm) in a simulation with communication (the JSON's "
         "latency_with_comm, comm_time, messages); 0: none", .meta = "X", .group = "communication",
         .needs = SIM ",!comm-profile,!nodes"},
        {0},
    };
    sp_flags_parse(argc, argv, "schedule",
                   "Simulate a parallel-training schedule (one master schedule: DDP, FSDP, GPipe, 1F1B,\n"
                   "LPP, FSLPP, ooo fast-forwarding and modulo allocation, bidirectional DualPipe, and\n"
                   "the pipelines given as per-rank action lists: strict 1F1B, zero bubble, interleaved,\n"
                   "looped BFS, V shapes, custom), print its pipeline diagram and statistics, or balance\n"
                   "a pipeline with LayerPipe. Last stdout line: JSON.",
                   table);
    o->stages_given = sp_flag_given("stages");
    o->micro_given = sp_flag_given("microbatches");
    o->workers_given = sp_flag_given("workers");
}

static void check(opts *o)
{
    /* the output files refused now, before anything is printed or computed */
    const char *outs[][2] = {{"--svg", o->svg}, {"--costs-out", o->costs_out}, {"--actions-out", o->actions_out}};
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
        if (outs[i][1]) {
            sp_out out;
            sp_check(sp_out_open(&out, outs[i][1], outs[i][0]));
            sp_out_abort(&out);
        }
    if (!(o->gflops > 0)) sp_fail("--gflops %g: expected > 0", o->gflops);
    if (sp_limit_time("--transfer-cost", o->transfer) != SP_OK) sp_fail("%s", sp_last_error());
    if (o->bucket_mb >= 0 && !o->topo.nodes && !o->comm_profile && !(o->transfer > 0))   /* < 0: not given */
        sp_fail("--bucket-mb needs --nodes, --comm-profile or --transfer-cost (the simulations with communication)");
    if (o->bucket_mb < 0) o->bucket_mb = 25;
    if (o->opt_gbs >= 0 && !o->topo.nodes && !o->comm_profile)
        sp_fail("--opt-gbs needs --nodes or --comm-profile (the simulations with communication)");
    if (o->opt_gbs < 0) o->opt_gbs = 10;
    if (o->mem_limit_arg) {
        if (sp_mem_limit_parse("--mem-limit", o->mem_limit_arg, &o->mem_limit, &o->mem_limit_bytes) != SP_OK)
            sp_fail("%s", sp_last_error());
        if (o->mem_limit_bytes && !o->model && !o->profile)
            sp_fail("--mem-limit %s: a limit in bytes needs activation sizes (--model or --profile); unit costs "
                    "count micro-batches of a chunk (--mem-limit N)", o->mem_limit_arg);
    }
    if (o->topo.nodes > 0) {   /* GB/s → B/us; every link figure given */
        if (!(o->topo.ranks_per_node > 0) || !(o->topo.intra.beta > 0) || !(o->topo.inter.beta > 0))
            sp_fail("--nodes %d: expected --ranks-per-node R, --intra-bw-gbs X and --inter-bw-gbs X (> 0) with it",
                    o->topo.nodes);
        o->topo.intra.beta *= 1e3, o->topo.inter.beta *= 1e3;
        if (sp_comm_topology_check(&o->topo, "--nodes") != SP_OK) sp_fail("%s", sp_last_error());
    }
}

/* ------------------------------------------------------------------------------------ */

static sp_costs *load_costs(opts *o, sp_model *m)
{
    if (o->profile) return sp_costs_read_csv(o->profile);
    if (m) {
        int shape[3], ndim = sp_zoo_input_shape(o->model, shape);
        return sp_costs_from_model(m, ndim, shape, o->batch, o->gflops);
    }
    double delta = o->delta >= 0 ? o->delta : o->bwd / 2, grad = o->grad >= 0 ? o->grad : o->bwd / 2;
    return sp_costs_uniform(o->stages, o->fwd, delta, grad);
}

static void write_costs(const opts *o, const sp_costs *c)
{
    if (!o->costs_out) return;
    sp_out out;
    sp_check(sp_out_open(&out, o->costs_out, "--costs-out"));
    sp_costs_write_csv(out.f, c);
    sp_check(sp_out_commit(&out));
}

static void write_svg(const opts *o, const sp_schedule *s, const sp_sim *r, const char *unit)
{
    if (!o->svg) return;
    sp_out out;
    sp_check(sp_out_open(&out, o->svg, "--svg"));
    sp_diagram_svg_unit(out.f, s, r, o->title, unit);
    sp_check(sp_out_commit(&out));
}

/* --scheme custom: the list sets the ranks, micro-batches and (with unit costs, unless
 * --stages says more) the stages, one per chunk; a flag that says otherwise is refused. */
static sp_actions *read_custom(opts *o)
{
    if (!o->actions) sp_fail("--scheme custom needs --actions FILE.csv (one row of actions per rank)");
    sp_actions *a = NULL;
    sp_check(sp_actions_read_csv(o->actions, &a));
    if (o->micro_given && o->micro != a->micro)
        sp_fail("--scheme custom: --microbatches %d but %s names %d micro-batches (the list sets them: drop "
                "--microbatches)", o->micro, o->actions, a->micro);
    if (o->workers_given && o->workers != a->ranks)
        sp_fail("--scheme custom: --workers %d but %s has %d rank%s, one line each (the list sets them: drop "
                "--workers)", o->workers, o->actions, a->ranks, a->ranks == 1 ? "" : "s");
    if (!o->model && !o->profile) {
        if (!o->stages_given) o->stages = a->chunks;
        else if (o->stages < a->chunks)
            sp_fail("--scheme custom: --stages %d but %s has %d chunks (expected --stages >= %d: each chunk holds "
                    "whole stages; or drop --stages: one stage per chunk)", o->stages, o->actions, a->chunks,
                    a->chunks);
    }
    o->micro = a->micro;
    o->workers = a->ranks;
    if (a->ignored)
        fprintf(stderr, "schedule: note: %s: %d communication and bookkeeping action%s of PyTorch's form (SEND_F, "
                        "RECV_F, SEND_B, RECV_B, UNSHARD, RESHARD, REDUCE_GRAD) not run: the simulation derives the "
                        "messages from where the chunks are\n", o->actions, a->ignored, a->ignored == 1 ? "" : "s");
    return a;
}

/* The action list of a generator (ranks: --workers, or the stages over the chunks per
 * rank) with the per-chunk costs of the balanced partition. */
static sp_actions *make_actions(const opts *o, const sp_costs *c)
{
    sp_actions *a = NULL;
    const sp_pp_generator *g = sp_pp_find(o->scheme);
    int v = o->chunks > 0 ? o->chunks : g->default_chunks_per_rank;
    int ranks = o->workers > 0 ? o->workers : c->stages / v > 0 ? c->stages / v : 1;
    if (sp_pp_generate_from_costs(g, c, ranks, o->micro, o->chunks, o->mem_limit, o->mem_limit_bytes, o->transfer,
                                  &a) != SP_OK)
        sp_fail("--scheme %s", sp_last_error());
    return a;
}

static void write_actions(const opts *o, const sp_actions *given, const sp_schedule *s, const sp_sim *r)
{
    if (!o->actions_out) return;
    sp_actions *a = given ? NULL : sp_schedule_to_actions(s, r);
    if (!given && !a) sp_fail("%s", sp_last_error());
    sp_out out;
    sp_check(sp_out_open(&out, o->actions_out, "--actions-out"));
    if (o->torch) sp_actions_write_torch(out.f, given ? given : a);
    else sp_actions_write_csv(out.f, given ? given : a);
    sp_check(sp_out_commit(&out));
    sp_actions_free(a);
}

/* The fit of each measured op, one line each, and its worst error on its probes. */
static void print_comm(const sp_comm_model *m)
{
    printf("communication model (%s): t = alpha + bytes / beta per segment\n", m->source);
    for (int op = 0; op < SP_COMM_NOPS; op++) {
        const sp_comm_fit *g = &m->fit[op];
        for (int s = 0; s < g->nsegs; s++)
            printf("  %-9s %3d ranks  from %10.0f B  alpha %9.3f us  beta %10.1f B/us\n", sp_comm_op_name(op),
                   g->ranks, g->seg[s].from_bytes, g->seg[s].alpha_us, g->seg[s].beta);
        if (g->nsegs)
            printf("  %-9s error on its probes: median %.1f%%, worst %.1f%%\n", sp_comm_op_name(op),
                   100 * g->median_rel_err, 100 * g->max_rel_err);
    }
}

/* Bytes of each stage's output of one micro-batch (the executor's act/grad messages):
 * --model: the segments' outputs at --batch (sp_costs.out_bytes); otherwise the profile's
 * act_bytes. */
static double *stage_out_bytes(const sp_costs *c)
{
    double *ob = sp_xcalloc((size_t)c->stages + 1, sizeof(double));
    for (int s = 0; s < c->stages; s++) ob[s] = c->out_bytes ? c->out_bytes[s] : c->act_bytes[s];
    return ob;
}

/* --comm-profile (cm) or --nodes (topo): the step with every message and the optimizer
 * (sim_comm.h). */
static void simulate_comm(const opts *o, const sp_comm_model *cm, const sp_comm_topology *topo, const sp_schedule *s,
                          const sp_costs *c, const sp_sim *r, const sp_sim_buffers *bufs, sp_sim_comm *sc)
{
    double *ob = stage_out_bytes(c), *opt = sp_xcalloc((size_t)c->stages + 1, sizeof(double));
    /* a profile with the executor's measured optimizer steps (--costs-out's opt column)
     * gives them; elsewhere the estimate at --opt-gbs */
    for (int st = 0; st < c->stages; st++)
        opt[st] = c->has_opt && c->opt[st] > 0 ? c->opt[st] : sp_opt_us_estimate(c->param_bytes[st]) * 10 / o->opt_gbs;
    bool ddp = !strcmp(s->scheme->name, "ddp") || !strcmp(s->scheme->name, "ddp-ooo");
    sp_sim_comm_cfg cfg = {.model = cm, .out_bytes = ob, .bucket_mb = o->bucket_mb, .deferred = ddp, .opt_us = opt,
                           .topo = topo, .buffers = bufs};
    if (!cm && o->transfer > 0)   /* --transfer-cost: a constant latency per message (sim_comm.h) */
        cfg = (sp_sim_comm_cfg){.bucket_mb = o->bucket_mb, .deferred = ddp, .transfer = o->transfer, .topo = topo,
                                .buffers = bufs};
    sp_simulate_comm(s, c, r, &cfg, sc);
    free(ob);
    free(opt);
}

/* --nodes: the step simulated with its communication on that cluster (sim_comm.c, every
 * message costed by sp_comm_time_ranks on the ranks it spans: step_with_comm), beside the
 * communication added up per worker without a timeline (comm_cost_account.c) and the bracket
 * that sum gives (in the costs' unit: µs with --model or a profile in µs). */
static void print_cluster(const opts *o, const sp_schedule *s, const sp_costs *c, const sp_sim *r,
                          const sp_sim_buffers *bufs)
{
    if (o->topo.nodes < 1) return;
    double *comm = sp_xmalloc(sizeof(double) * (size_t)s->workers), most = 0;
    sp_comm_step_account(s, c, NULL, &o->topo, o->bucket_mb * 1024 * 1024, comm);
    sp_sim_comm sc;
    simulate_comm(o, NULL, &o->topo, s, c, r, bufs, &sc);
    for (int i = 0; i < sc.nmsg; i++)   /* batch norm's messages, each as the timeline costs it */
        if (sc.msg[i].kind == SP_MSG_BUFFERS || sc.msg[i].kind == SP_MSG_SYNC_BN)
            comm[sc.msg[i].rank] += sc.msg[i].end - sc.msg[i].start;
    for (int w = 0; w < s->workers; w++) most = fmax(most, comm[w]);
    double lane = 0, opt = 0;
    for (int w = 0; w < sc.workers; w++) lane = fmax(lane, sc.comm_us[w]), opt = fmax(opt, sc.opt_us[w]);
    printf("cluster (prediction): %d nodes x %d ranks; simulated step with communication %.6g %s (compute only "
           "%.6g; busiest communication lane %.6g, optimizer %.6g); communication added up per worker %.6g, "
           "between %.6g (full overlap) and %.6g (none)\n", o->topo.nodes, o->topo.ranks_per_node, sc.latency,
           c->unit, r->latency, lane, opt, most, fmax(r->latency, most), r->latency + most);
    sp_json j;
    sp_json_begin(&j);
    sp_json_str(&j, "mode", "cluster-prediction");
    sp_json_int(&j, "nodes", o->topo.nodes);
    sp_json_int(&j, "ranks_per_node", o->topo.ranks_per_node);
    sp_json_num(&j, "compute_latency", r->latency);
    sp_json_num(&j, "step_with_comm", sc.latency);
    sp_json_num(&j, "comm_lane_max", lane);
    sp_json_num(&j, "opt_max", opt);
    sp_json_num(&j, "comm_max", most);
    sp_json_num(&j, "step_full_overlap", fmax(r->latency, most));
    sp_json_num(&j, "step_no_overlap", r->latency + most);
    sp_json_num(&j, "utilization", r->utilization);
    double peak = 0;
    for (int w = 0; w < s->workers; w++) peak = fmax(peak, r->worker[w].mem.total);
    sp_json_num(&j, "peak_memory_bytes_max", peak);
    sp_check(sp_json_end_print(&j));
    sp_sim_comm_free(&sc);
    free(comm);
}

/* A line on batch norm's semantics and its messages per step, as the simulation with
 * communication adds them (sp_model_buffers_sim): the broadcasts, and --sync-bn's
 * allgathers of every stage's forward and backward (bytes: one rank's share). */
static void print_batch_norm(const char *bn, const sp_sim_buffers *b, int stages)
{
    int nf = 0, nk = 0;
    double bb = 0, fb = 0, kb = 0;
    for (int i = 0; b && i < b->nbcast; i++) bb += b->bcast_bytes[i];
    for (int st = 0; b && b->sync_off && st < stages; st++) {
        for (int i = b->sync_off[2 * st]; i < b->sync_off[2 * st + 1]; i++) nf++, fb += b->sync_bytes[i];
        for (int i = b->sync_off[2 * st + 1]; i < b->sync_off[2 * st + 2]; i++) nk++, kb += b->sync_bytes[i];
    }
    printf("batch norm: %s", bn);
    if (b && b->nbcast)
        printf("; running statistics broadcast from their owner at the step's start: %d broadcast%s, %.15g B",
               b->nbcast, b->nbcast == 1 ? "" : "s", bb);
    if (nf + nk)
        printf("; allgathers of the per-channel sums a step: %d in the forwards (%.15g B a rank), %d in the "
               "backwards (%.15g B a rank)", nf, fb, nk, kb);
    if (!(b && b->nbcast) && !(nf + nk)) printf("; no message");
    printf("\n");
}

static int run_schedule(opts *o)
{
    sp_comm_model *cm = NULL;
    sp_model *m = o->model ? sp_zoo_model(o->model) : NULL;
    if (o->sync_bn && m->nbuffers == 0) sp_fail("--sync-bn: model %s has no batch norm", m->name);
    if (o->sync_bn && o->workers_given && o->workers != o->micro)
        sp_fail("--sync-bn with %d micro-batches for %d workers (the statistics are over the workers' micro-batches "
                "at once: expected --microbatches %d)", o->micro, o->workers, o->workers);
    if (o->comm_profile) {   /* print the model; the simulation then adds the messages */
        sp_check(sp_comm_model_load(o->comm_profile, &cm));
        print_comm(cm);
    }
    sp_actions *a = !strcmp(o->scheme, "custom") ? read_custom(o) : NULL;
    sp_costs *c = load_costs(o, m);
    write_costs(o, c);
    sp_sched_config cfg = {
        .stages = c->stages, .micro = o->micro, .workers = o->workers, .groups = o->groups,
        .per_group = o->per_group, .split = o->split ? 1 : o->no_split ? 0 : -1, .no_input_grad = o->no_input_grad,
        .actions_scheme = o->scheme, .mem_model = strcmp(o->mem_model, "sail") ? SP_MEM_WHOLE : SP_MEM_SAIL,
        .mem_grad_share = o->mem_grad_share,
    };
    if (sp_scheme_is_actions(o->scheme)) {
        if (o->groups || o->per_group) sp_fail("--scheme %s: --groups and --per-group are lpp's", o->scheme);
        if (!a) a = make_actions(o, c);
    } else if (o->chunks) {
        sp_fail("--chunks %d: --scheme %s places its own stages (the action-list schemes take --chunks)", o->chunks,
                o->scheme);
    }
    sp_schedule *s = a ? sp_schedule_from_actions(a, &cfg, c) : sp_schedule_new(sp_scheme_find(o->scheme), &cfg, c);
    if (o->topo.nodes > 0 && (long)o->topo.nodes * o->topo.ranks_per_node < s->workers)
        sp_fail("--nodes %d --ranks-per-node %d: %d ranks for %d workers (expected nodes x ranks-per-node >= workers)",
                o->topo.nodes, o->topo.ranks_per_node, o->topo.nodes * o->topo.ranks_per_node, s->workers);
    /* batch norm: the apps' semantics for this scheme and the messages the executor sends */
    const char *bn = m && m->nbuffers ? sp_exec_batch_norm_of(s->scheme->name, o->sync_bn) : NULL;
    sp_sim_buffers *bufs = NULL;
    if (bn) {
        int shape[3], ndim = sp_zoo_input_shape(o->model, shape);
        bufs = sp_model_buffers_sim(m, ndim, shape, s, o->sync_bn);
    }
    sp_sim r;
    sp_simulate(s, c, &r);
    int slots = sp_optim_slots(o->optim, o->momentum);
    sp_sim_memory_breakdowns(s, c, &r, slots);
    write_actions(o, a, s, &r);
    sp_actions_free(a);
    if (!o->no_diagram) sp_diagram_text(stdout, s, &r, o->max_cols);
    sp_sim_print_workers(stdout, &r);
    write_svg(o, s, &r, c->unit);
    if (bn) print_batch_norm(bn, bufs, s->stages);
    if (o->topo.nodes > 0) print_cluster(o, s, c, &r, bufs);
    if (cm && strcmp(c->unit, "us") != 0) {   /* messages are µs: nothing to add them to */
        printf("with communication: not simulated (durations in %s; --model or a --profile in us)\n", c->unit);
        sp_sim_print_json_bn(stdout, s, c, &r, NULL, bn);
        sp_comm_model_free(cm);
    } else if (o->transfer > 0) {   /* the constant transfer latency in the costs' unit */
        sp_sim_comm sc;
        simulate_comm(o, NULL, NULL, s, c, &r, bufs, &sc);
        printf("with transfers (%g %s per message): latency %g, comm per worker", o->transfer, c->unit, sc.latency);
        for (int w = 0; w < sc.workers; w++) printf(" %.4g", sc.comm_us[w]);
        printf(" %s\n", c->unit);
        sp_sim_print_json_bn(stdout, s, c, &r, &sc, bn);
        sp_sim_comm_free(&sc);
    } else if (cm) {
        sp_sim_comm sc;
        simulate_comm(o, cm, NULL, s, c, &r, bufs, &sc);
        printf("with communication (%s): latency %g, comm per worker", cm->source, sc.latency);
        for (int w = 0; w < sc.workers; w++) printf(" %.4g", sc.comm_us[w]);
        printf(" us\n");
        sp_sim_print_json_bn(stdout, s, c, &r, &sc, bn);
        sp_sim_comm_free(&sc);
        sp_comm_model_free(cm);
    } else {
        sp_sim_print_json_bn(stdout, s, c, &r, NULL, bn);
    }
    sp_sim_buffers_free(bufs);
    sp_model_free(m);
    sp_sim_free(&r);
    sp_schedule_free(s);
    sp_costs_free(c);
    return 0;
}

/* --calibrate-comm: every rank probes, rank 0 writes the profile and prints the fit. */
static int run_calibrate(const opts *o, int *argc, char ***argv)
{
    /* Refused before MPI_Init when mpirun did not start W >= 2 ranks (Open MPI's
     * OMPI_COMM_WORLD_SIZE, as the apps read it): nothing of MPI is left behind then. */
    const char *np = getenv("OMPI_COMM_WORLD_SIZE");
    if (!np || atoi(np) < 2)
        sp_fail("--calibrate-comm %s: %s rank%s (expected mpirun -np W build/schedule --calibrate-comm FILE, W >= 2)",
                o->calibrate_comm, np ? np : "1", np && atoi(np) != 1 ? "s" : "");
    sp_comm_init(argc, argv);
    sp_comm *w = sp_comm_world();
    if (sp_comm_size(w) < 2)
        sp_fail("--calibrate-comm %s: 1 rank (expected mpirun -np W build/schedule --calibrate-comm FILE, W >= 2)",
                o->calibrate_comm);
    sp_comm_model *m = sp_comm_model_measure(w, &(sp_comm_probe_cfg){.max_bytes = o->cal_max_mb * 1024 * 1024,
                                                                     .reps = o->cal_reps});
    if (sp_comm_rank(w) == 0) {
        sp_check(sp_comm_model_write(m, o->calibrate_comm));
        print_comm(m);
        sp_json j;
        sp_json_begin(&j);
        sp_json_str(&j, "mode", "calibrate-comm");
        sp_json_str(&j, "file", o->calibrate_comm);
        sp_json_int(&j, "ranks", sp_comm_size(w));
        sp_json_int(&j, "probes", m->nprobes);
        sp_json_num(&j, "probe_ms", m->probe_ms);
        sp_check(sp_json_end_print(&j));
    }
    sp_comm_model_free(m);
    sp_comm_finalize();
    return 0;
}

static int run_layerpipe(const opts *o)
{
    sp_costs *c = sp_costs_read_csv(o->layerpipe);
    sp_layerpipe lp;
    sp_layerpipe_partition(c, o->processors, o->alpha, &lp);
    sp_layerpipe_print(stdout, c, &lp);
    sp_layerpipe_print_json(stdout, &lp);
    sp_layerpipe_free(&lp);
    sp_costs_free(c);
    return 0;
}

int sp_schedule_main(int argc, char **argv)
{
    opts o = {.scheme = "gpipe", .mem_model = "whole", .mem_grad_share = 0.5, .stages = 4, .micro = 8, .batch = 32, .processors = 3, .fwd = 1, .bwd = 1,
              .delta = -1, .grad = -1, .gflops = 1000, .alpha = 1.01, .cal_max_mb = 25, .cal_reps = 7, .optim = "sgd",
              .momentum = 0.9, .bucket_mb = -1, .opt_gbs = -1};
    parse(argc, argv, &o);
    check(&o);
    if (o.list) {
        for (int i = 0; i < sp_scheme_def_count(); i++) {
            const sp_scheme_def *d = sp_scheme_def_at(i);
            printf("%-16s %s%s\n", d->name, d->help, d->kind == SP_SCHEME_CUSTOM ? " (--actions FILE)" : "");
        }
        sp_schemes_print_json(stdout);
        return 0;
    }
    if (o.layerpipe) return run_layerpipe(&o);
    if (o.calibrate_comm) return run_calibrate(&o, &argc, &argv);
    return run_schedule(&o);
}
