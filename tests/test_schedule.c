/* test_schedule.c — the master schedule and its simulator against the papers.
 *
 * [U] Rahimi, "Unifying Parallelization Schemes": Table 1, the mechanical formulas of
 *     "Latency, network, and memory usage from w(s,b,d)", the interpolation properties
 *     and the theorem ρ ≤ M/S.
 * [O] Oh et al., "Out-Of-Order BackProp" §5.2.1: the eight-layer, two-GPU example of
 *     Figure 5 (23, 19 and 16 unit times).
 *
 * Table 1's unit: "computing a forward and backward step on any stage takes a unit of
 * time", so the Table tests give a forward ½ and a backward ½ (δ = G = ¼). The closed
 * forms are written out here from the paper, never taken from the code under test. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include "core/model.h"
#include "layers/layers.h"
#include "layers/zoo.h"
#include "schedulers/plan/schedule.h"
#include "schedulers/sim/sim.h"
#include "tests/testutil.h"

typedef struct run {
    sp_schedule *s;
    sp_sim r;
} run;

typedef struct cfg {
    const char *scheme;
    int S, B, W, G, R;
} cfg;

static run simulate_with(cfg c, const sp_costs *costs, int split, bool no_input_grad)
{
    sp_sched_config sc = {.stages = c.S, .micro = c.B, .workers = c.W, .groups = c.G, .per_group = c.R,
                          .split = split, .no_input_grad = no_input_grad};
    run x;
    x.s = sp_schedule_new(sp_scheme_find(c.scheme), &sc, costs);
    sp_simulate(x.s, costs, &x.r);
    return x;
}

/* Table 1's time unit: F = ½, backward = ½. */
static run simulate_table_units(cfg c)
{
    sp_costs *costs = sp_costs_uniform(c.S, 0.5, 0.25, 0.25);
    run x = simulate_with(c, costs, -1, false);
    sp_costs_free(costs);
    return x;
}

static void run_free(run *x)
{
    sp_sim_free(&x->r);
    sp_schedule_free(x->s);
}

#define CFG_FMT "%s S=%d B=%d W=%d G=%d R=%d"
#define CFG_ARGS(c) (c).scheme, (c).S, (c).B, (c).W, (c).G, (c).R

static int imin(int a, int b) { return a < b ? a : b; }

/* ------------------------------------------------------------------------------------ */
/* [U]'s w(s, b, d), written out again from the paper                                   */

static int paper_h(int s, int b, int G, int R) { return (R * b) % (G * R) + s % R; }

static int paper_compute(const char *scheme, int s, int b, int G, int R)
{
    if (!strcmp(scheme, "ddp") || !strcmp(scheme, "fsdp")) return b;   /* w = (·, b) */
    if (!strcmp(scheme, "gpipe") || !strcmp(scheme, "1f1b")) return s; /* w = (s, s) */
    return paper_h(s, b, G, R);                                         /* lpp, fslpp */
}

static int paper_weights(const char *scheme, int s, int b, int G, int R)
{
    if (!strcmp(scheme, "ddp")) return b;
    if (!strcmp(scheme, "fsdp") || !strcmp(scheme, "gpipe") || !strcmp(scheme, "1f1b")) return s;
    if (!strcmp(scheme, "fslpp")) return paper_h(s, s, G, R);
    return paper_h(s, b, G, R);
}

/* ------------------------------------------------------------------------------------ */
/* Table 1                                                                              */

Test(table1, ddp)
{
    for (int S = 1; S <= 8; S++)
        for (int B = 1; B <= 8; B++) {
            cfg c = {"ddp", S, B, B, 0, 0};
            run x = simulate_table_units(c);
            cr_assert_float_eq(x.r.latency, S, 1e-9, CFG_FMT ": latency %g, Table 1: S", CFG_ARGS(c), x.r.latency);
            cr_assert_eq(x.r.act_recv_max, 0, CFG_FMT ": activation xmit", CFG_ARGS(c));
            cr_assert_eq(x.r.weight_recv_max, 0, CFG_FMT ": weight xmit", CFG_ARGS(c));
            for (int w = 0; w < B; w++) {
                cr_assert_eq(x.r.worker[w].peak_act, S, CFG_FMT ": activation storage of w%d", CFG_ARGS(c), w);
                cr_assert_eq(x.r.worker[w].weight_stages, S, CFG_FMT ": weight storage of w%d", CFG_ARGS(c), w);
            }
            run_free(&x);
        }
}

/* FSDP stores stage s's weights on worker s, so Table 1's "S − 1 weight xmit, 1 weight
 * storage" describes every worker that holds a stage (all of them when W = S). */
Test(table1, fsdp)
{
    for (int S = 1; S <= 8; S++)
        for (int B = S; B <= 9; B++) {
            cfg c = {"fsdp", S, B, B, 0, 0};
            run x = simulate_table_units(c);
            cr_assert_float_eq(x.r.latency, S, 1e-9, CFG_FMT ": latency %g, Table 1: S", CFG_ARGS(c), x.r.latency);
            cr_assert_eq(x.r.act_recv_max, 0, CFG_FMT, CFG_ARGS(c));
            for (int w = 0; w < B; w++) {
                const sp_worker_stats *ws = &x.r.worker[w];
                cr_assert_eq(ws->peak_act, S, CFG_FMT ": activation storage of w%d", CFG_ARGS(c), w);
                cr_assert_eq(ws->weight_recv, w < S ? S - 1 : S, CFG_FMT ": weight xmit of w%d = %d", CFG_ARGS(c),
                             w, ws->weight_recv);
                cr_assert_eq(ws->weight_stages, w < S ? 1 : 0, CFG_FMT ": weight storage of w%d", CFG_ARGS(c), w);
            }
            if (B == S) cr_assert_eq(x.r.weight_recv_max, S - 1, CFG_FMT ": Table 1: S - 1", CFG_ARGS(c));
            run_free(&x);
        }
}

/* PP (GPipe, w = (s, s)): latency B + S − 1, activation xmit B, weights 1 per worker.
 * GPipe runs all forwards first, so "each worker must store the activations of all the
 * batches that traverse it" ([U]): B. Table 1's cap min(S, B) is 1F1B's (next test). */
Test(table1, pipeline_gpipe)
{
    for (int S = 1; S <= 8; S++)
        for (int B = 1; B <= 12; B++) {
            cfg c = {"gpipe", S, B, S, 0, 0};
            run x = simulate_table_units(c);
            cr_assert_float_eq(x.r.latency, B + S - 1, 1e-9, CFG_FMT ": latency %g, Table 1: B + S - 1", CFG_ARGS(c),
                               x.r.latency);
            cr_assert_eq(x.r.act_recv_max, S > 1 ? B : 0, CFG_FMT ": Table 1: activation xmit B", CFG_ARGS(c));
            cr_assert_eq(x.r.weight_recv_max, 0, CFG_FMT, CFG_ARGS(c));
            cr_assert_eq(x.r.weight_stages_max, 1, CFG_FMT ": Table 1: weight storage 1", CFG_ARGS(c));
            for (int w = 0; w < S; w++) cr_assert_eq(x.r.worker[w].peak_act, B, CFG_FMT " w%d", CFG_ARGS(c), w);
            run_free(&x);
        }
}

/* 1F1B: the same latency and traffic as PP, and activation storage min(S, B) — Table 1's
 * PP column. Per worker the PipeDream-Flush warm-up gives min(S − w, B). */
Test(table1, pipeline_1f1b)
{
    for (int S = 1; S <= 8; S++)
        for (int B = 1; B <= 12; B++) {
            cfg c = {"1f1b", S, B, S, 0, 0};
            run x = simulate_table_units(c);
            cr_assert_float_eq(x.r.latency, B + S - 1, 1e-9, CFG_FMT ": latency %g, Table 1: B + S - 1", CFG_ARGS(c),
                               x.r.latency);
            cr_assert_eq(x.r.act_recv_max, S > 1 ? B : 0, CFG_FMT, CFG_ARGS(c));
            cr_assert_eq(x.r.peak_act_max, imin(S, B), CFG_FMT ": storage %d, Table 1: min(S, B)", CFG_ARGS(c),
                         x.r.peak_act_max);
            for (int w = 0; w < S; w++)
                cr_assert_eq(x.r.worker[w].peak_act, imin(S - w, B), CFG_FMT " w%d", CFG_ARGS(c), w);
            run_free(&x);
        }
}

/* LPP: latency S + B/G − 1, activation storage (S/R)·min(S, B/G), weight storage S/R, no
 * weight xmit. The latency assumes a worker never has two jobs at once: true when a
 * group's B/G micro-batches fit in its R workers (B/G ≤ R) or every worker has one stage
 * (R = S). Beyond that each worker's own work, 2·(S/R)·(B/G) half-units, exceeds it. */
static void check_lpp_row(cfg c)
{
    run x = simulate_table_units(c);
    int S = c.S, B = c.B, G = c.G, R = c.R, m = B / G;
    cr_assert_float_eq(x.r.latency, S + m - 1, 1e-9, CFG_FMT ": latency %g, Table 1: S + B/G - 1", CFG_ARGS(c),
                       x.r.latency);
    if (m <= S)   /* forward-first fills every stage of every micro-batch before a backward */
        cr_assert_eq(x.r.peak_act_max, S / R * imin(S, m), CFG_FMT ": storage %d, Table 1: S/R min(S, B/G)",
                     CFG_ARGS(c), x.r.peak_act_max);
    cr_assert_eq(x.r.weight_recv_max, 0, CFG_FMT, CFG_ARGS(c));
    cr_assert_eq(x.r.weight_stages_max, S / R, CFG_FMT ": Table 1: weight storage S/R", CFG_ARGS(c));
    /* Table 1's activation xmit B is the W = S case of [U]'s sum: S·B/W when R > 1. */
    cr_assert_eq(x.r.act_recv_max, R > 1 ? S * B / (G * R) : 0, CFG_FMT, CFG_ARGS(c));
    if (G * R == S && R > 1) cr_assert_eq(x.r.act_recv_max, B, CFG_FMT ": Table 1: B", CFG_ARGS(c));
    run_free(&x);
}

Test(table1, looped_pipeline)
{
    int rows = 0;
    for (int S = 1; S <= 8; S++)
        for (int R = 1; R <= S; R++) {
            if (S % R) continue;
            for (int G = 1; G <= 4; G++)
                for (int m = 1; m <= (R == S ? 2 * S + 1 : R); m++) {
                    check_lpp_row((cfg){"lpp", S, G * m, 0, G, R});
                    rows++;
                }
        }
    cr_assert_gt(rows, 150);
}

/* FSLPP: LPP's latency and storage; weights h(s, s). Weight storage 1 whenever h(s, s)
 * hits S different workers (S ≤ lcm(G, R)); weight xmit S − 1 at the FSDP corner
 * (R = 1, G = B = W = S), [U]'s sum formula elsewhere (test mechanical_formulas). */
static int gcd(int a, int b) { return b ? gcd(b, a % b) : a; }

Test(table1, fully_sharded_looped_pipeline)
{
    for (int S = 1; S <= 8; S++)
        for (int R = 1; R <= S; R++) {
            if (S % R) continue;
            for (int G = 1; G <= 4; G++)
                for (int m = 1; m <= R; m++) {
                    cfg c = {"fslpp", S, G * m, 0, G, R};
                    run x = simulate_table_units(c);
                    cr_assert_float_eq(x.r.latency, S + m - 1, 1e-9, CFG_FMT ": latency", CFG_ARGS(c));
                    cr_assert_eq(x.r.peak_act_max, S / R * imin(S, m), CFG_FMT ": storage", CFG_ARGS(c));
                    if (S <= G * R / gcd(G, R))
                        cr_assert_eq(x.r.weight_stages_max, 1, CFG_FMT ": Table 1: weight storage 1", CFG_ARGS(c));
                    run_free(&x);
                }
        }
    for (int S = 1; S <= 8; S++) {
        cfg c = {"fslpp", S, S, 0, S, 1};
        run x = simulate_table_units(c);
        cr_assert_eq(x.r.weight_recv_max, S - 1, CFG_FMT ": Table 1: S - 1", CFG_ARGS(c));
        cr_assert_float_eq(x.r.latency, S, 1e-9, CFG_FMT, CFG_ARGS(c));
        run_free(&x);
    }
}

/* ------------------------------------------------------------------------------------ */
/* [U] "Some statistics of the schedule can be computed more directly from w(s,b,d)"     */

static void check_sums(cfg c)
{
    run x = simulate_table_units(c);
    int W = x.s->workers;
    for (int w = 0; w < W; w++) {
        int act = 0, wgt = 0, items = 0;
        for (int b = 0; b < c.B; b++)
            for (int s = 0; s < c.S; s++) {
                if (paper_compute(c.scheme, s, b, c.G, c.R) != w) continue;
                items++;
                act += s > 0 && paper_compute(c.scheme, s - 1, b, c.G, c.R) != w;
                wgt += paper_weights(c.scheme, s, b, c.G, c.R) != w;
            }
        const sp_worker_stats *ws = &x.r.worker[w];
        cr_assert_eq(ws->act_recv, act, CFG_FMT ": w%d receives %d activations, the sum gives %d", CFG_ARGS(c), w,
                     ws->act_recv, act);
        cr_assert_eq(ws->weight_recv, wgt, CFG_FMT ": w%d receives %d weights, the sum gives %d", CFG_ARGS(c), w,
                     ws->weight_recv, wgt);
        cr_assert_leq(ws->peak_act, items, CFG_FMT ": peak storage above [U]'s bound", CFG_ARGS(c));
    }
    run_free(&x);
}

Test(paper, mechanical_formulas)
{
    for (int S = 1; S <= 6; S++)
        for (int B = 1; B <= 8; B++) {
            check_sums((cfg){"ddp", S, B, B, 0, 0});
            if (S <= B) check_sums((cfg){"fsdp", S, B, B, 0, 0});
            check_sums((cfg){"gpipe", S, B, S, 0, 0});
            check_sums((cfg){"1f1b", S, B, S, 0, 0});
            for (int R = 1; R <= S; R++)
                for (int G = 1; G <= 3; G++) {
                    check_sums((cfg){"lpp", S, B, 0, G, R});
                    check_sums((cfg){"fslpp", S, B, 0, G, R});
                }
        }
}

/* docs/SCHEDULES.md §6: the activations LPP worker w = R·g + r (group g, position r)
 * receives, in closed form: micro-batches of its group × its stages s ≥ 1 (the stage
 * before sits on the neighbouring worker when R > 1; on the same one when R = 1):
 *     act(w) = ⌈(B − g)/G⌉ · (⌈(S − r)/R⌉ − [r = 0])   for R > 1,   0 for R = 1.
 * Workers with r = 0 receive fewer than the others (S = 4, B = 8, G = R = 2:
 * [4, 8, 4, 8]); only the maximum is S·B/W, and only when R | S and G | B. */
static int ceil_pos(int a, int b) { return a > 0 ? (a + b - 1) / b : 0; }

static int lpp_act_closed_form(int S, int B, int G, int R, int w)
{
    int g = w / R, r = w % R;
    if (R == 1) return 0;
    return ceil_pos(B - g, G) * (ceil_pos(S - r, R) - (r == 0 ? 1 : 0));
}

Test(paper, lpp_activation_traffic_per_worker)
{
    int grid = 0;
    for (int S = 1; S <= 9; S++)
        for (int B = 1; B <= 10; B++)
            for (int G = 1; G <= 4; G++)
                for (int R = 1; R <= 5 && R <= S; R++) {   /* the scheme needs R ≤ S */
                    cfg c = {"lpp", S, B, 0, G, R};
                    run x = simulate_table_units(c);
                    cr_assert_eq(x.s->workers, G * R);
                    for (int w = 0; w < G * R; w++)
                        cr_assert_eq(x.r.worker[w].act_recv, lpp_act_closed_form(S, B, G, R, w),
                                     CFG_FMT ": w%d receives %d activations, the closed form says %d", CFG_ARGS(c), w,
                                     x.r.worker[w].act_recv, lpp_act_closed_form(S, B, G, R, w));
                    run_free(&x);
                    grid++;
                }
    cr_assert_eq(grid, (1 + 2 + 3 + 4 + 5 * 5) * 10 * 4);
    /* the issue's example */
    run x = simulate_table_units((cfg){"lpp", 4, 8, 0, 2, 2});
    int want[4] = {4, 8, 4, 8};
    for (int w = 0; w < 4; w++) cr_assert_eq(x.r.worker[w].act_recv, want[w], "w%d", w);
    run_free(&x);
}

/* ------------------------------------------------------------------------------------ */
/* Interpolation: "When G = 1 and R = S, LPP is identical to PP. When G = B and R = 1,    */
/* LPP is identical to DDP."                                                            */

static void assert_same_schedule(cfg a, cfg b)
{
    run x = simulate_table_units(a), y = simulate_table_units(b);
    cr_assert_eq(x.s->njobs, y.s->njobs);
    cr_assert_eq(x.s->workers, y.s->workers, CFG_FMT " vs " CFG_FMT, CFG_ARGS(a), CFG_ARGS(b));
    for (int j = 0; j < x.s->njobs; j++) {
        sp_job jb = x.s->jobs[j];
        int k = sp_schedule_find(y.s, jb.stage, jb.micro, jb.dir);
        cr_assert_eq(x.s->compute[j], y.s->compute[k], CFG_FMT " vs " CFG_FMT ": w_compute", CFG_ARGS(a), CFG_ARGS(b));
        cr_assert_eq(x.s->weights[j], y.s->weights[k], CFG_FMT " vs " CFG_FMT ": w_weights", CFG_ARGS(a), CFG_ARGS(b));
        cr_assert_float_eq(x.r.start[j], y.r.start[k], 1e-12, CFG_FMT " vs " CFG_FMT, CFG_ARGS(a), CFG_ARGS(b));
    }
    cr_assert_float_eq(x.r.latency, y.r.latency, 1e-12);
    cr_assert_eq(x.r.peak_act_max, y.r.peak_act_max);
    cr_assert_eq(x.r.act_recv_max, y.r.act_recv_max);
    cr_assert_eq(x.r.weight_recv_max, y.r.weight_recv_max);
    run_free(&x);
    run_free(&y);
}

Test(paper, lpp_interpolates_gpipe_and_ddp)
{
    for (int S = 1; S <= 8; S++)
        for (int B = 1; B <= 10; B++) {
            assert_same_schedule((cfg){"lpp", S, B, 0, 1, S}, (cfg){"gpipe", S, B, S, 0, 0});
            assert_same_schedule((cfg){"lpp", S, B, 0, B, 1}, (cfg){"ddp", S, B, B, 0, 0});
            if (S <= B) assert_same_schedule((cfg){"fslpp", S, B, 0, B, 1}, (cfg){"fsdp", S, B, B, 0, 0});
            assert_same_schedule((cfg){"fslpp", S, B, 0, 1, S}, (cfg){"gpipe", S, B, S, 0, 0});
        }
}

/* ------------------------------------------------------------------------------------ */
/* Theorem: ρ ≤ M/S                                                                     */

static void check_theorem(cfg c, const sp_costs *costs, int split)
{
    run x = simulate_with(c, costs, split, false);
    /* ρ ≡ S·B / (L·W) in the proof's unit, one forward or backward step. */
    double steps = x.r.latency / x.r.unit;
    cr_assert_float_eq(x.r.rho, (double)c.S * c.B / (steps * x.s->workers), 1e-9, CFG_FMT, CFG_ARGS(c));
    cr_assert_leq(x.r.rho, (double)x.r.peak_act_max / c.S + 1e-12, CFG_FMT " split=%d: rho %g > M/S = %d/%d",
                  CFG_ARGS(c), split, x.r.rho, x.r.peak_act_max, c.S);
    run_free(&x);
}

Test(paper, throughput_bound_holds_for_every_schedule)
{
    const double fb[][3] = {{1, 0.5, 0.5}, {1, 1, 1}, {1, 0.25, 0.75}, {2, 0.5, 0.5}};
    int checked = 0;
    for (int k = 0; k < 4; k++)
        for (int S = 1; S <= 6; S++) {
            sp_costs *costs = sp_costs_uniform(S, fb[k][0], fb[k][1], fb[k][2]);
            for (int B = 1; B <= 8; B++)
                for (int split = 0; split <= 1; split++) {
                    check_theorem((cfg){"ddp", S, B, B, 0, 0}, costs, split);
                    check_theorem((cfg){"fsdp", S, B, B, 0, 0}, costs, split);
                    for (int W = 1; W <= S; W++) {
                        check_theorem((cfg){"gpipe", S, B, W, 0, 0}, costs, split);
                        check_theorem((cfg){"1f1b", S, B, W, 0, 0}, costs, split);
                        check_theorem((cfg){"ooo-ff", S, B, W, 0, 0}, costs, split);
                        check_theorem((cfg){"ooo-modulo", S, B, W, 0, 0}, costs, split);
                    }
                    for (int R = 1; R <= S; R++)
                        for (int G = 1; G <= 3; G++) {
                            check_theorem((cfg){"lpp", S, B, 0, G, R}, costs, split);
                            check_theorem((cfg){"fslpp", S, B, 0, G, R}, costs, split);
                        }
                    checked++;
                }
            sp_costs_free(costs);
        }
    cr_assert_gt(checked, 300);
}

/* DDP keeps every worker busy: in the proof's unit its latency is 2S, so ρ = 1/2 and
 * M/S = 1. ([U]'s text says ρ = 1 by reading Table 1's latency S, whose unit is a
 * forward plus a backward step.) */
Test(paper, ddp_throughput)
{
    run x = simulate_with((cfg){"ddp", 5, 7, 7, 0, 0}, NULL, -1, false);
    cr_assert_float_eq(x.r.latency, 10, 1e-12);
    cr_assert_float_eq(x.r.rho, 0.5, 1e-12);
    cr_assert_float_eq(x.r.rho_bound, 1, 1e-12);
    cr_assert_float_eq(x.r.utilization, 1, 1e-12);
    run_free(&x);
}

/* Why ρ is measured in the proof's unit. A user scheme for S = 2: stage 0 alternates
 * between workers 0 and 1, stage 1 runs on worker 2, and each worker holds at most one
 * activation (in-flight caps 2 and 1), so M = 1 and M/S = ½. Its throughput tends to 1/3
 * per job unit: within the bound. In Table 1's unit (forward + backward = 1) the same run
 * would be ρ → 2/3 > M/S, so the theorem only holds in the unit its proof counts in. */
static long backward_first(const sp_schedule *s, sp_job j);   /* below */
static int cex_worker(const sp_schedule *s, sp_job j) { return j.stage == 0 ? j.micro % 2 : 2; }
static void cex_setup(sp_schedule *s) { s->workers = 3; }
static int cex_cap(const sp_schedule *s, int stage) { return stage == 0 ? 2 : 1; }

Test(paper, bound_holds_in_the_proofs_unit)
{
    sp_scheme cex = {"two-stage-workers", "", false, cex_setup, cex_worker, cex_worker, backward_first, cex_cap};
    sp_sched_config c = {.stages = 2, .micro = 256, .split = -1};
    sp_schedule *s = sp_schedule_new(&cex, &c, NULL);
    sp_sim r;
    sp_simulate(s, NULL, &r);
    cr_assert_eq(r.peak_act_max, 1);
    cr_assert_float_eq(r.latency, 2 * 256 + 2, 1e-9);
    cr_assert_leq(r.rho, r.rho_bound);
    cr_assert_gt(2 * r.rho, r.rho_bound, "in Table 1's unit the bound would fail");
    sp_sim_free(&r);
    sp_schedule_free(s);
}

/* ------------------------------------------------------------------------------------ */
/* [O] §5.2.1, Figure 5: eight layers on two GPUs, every F, δ and G one unit, no δ for the */
/* first layer. Conventional 23, gradient fast-forwarding 19, modulo allocation 16.      */

static double ffnn_latency(const char *scheme, int micro)
{
    sp_costs *costs = sp_costs_uniform(8, 1, 1, 1);
    run x = simulate_with((cfg){scheme, 8, micro, 2, 0, 0}, costs, -1, true);
    double l = x.r.latency;
    run_free(&x);
    sp_costs_free(costs);
    return l;
}

Test(ooo, ffnn_example_figure5)
{
    cr_assert_float_eq(ffnn_latency("gpipe", 1), 23, 1e-12, "conventional: %g", ffnn_latency("gpipe", 1));
    cr_assert_float_eq(ffnn_latency("ooo-ff", 1), 19, 1e-12, "fast-forwarding: %g", ffnn_latency("ooo-ff", 1));
    cr_assert_float_eq(ffnn_latency("ooo-modulo", 1), 16, 1e-12, "modulo: %g", ffnn_latency("ooo-modulo", 1));
}

/* Figure 6: the same network with micro-batches; each technique shortens the step. */
Test(ooo, micro_batches_figure6)
{
    for (int B = 2; B <= 4; B++) {
        double conv = ffnn_latency("gpipe", B), ff = ffnn_latency("ooo-ff", B), mod = ffnn_latency("ooo-modulo", B);
        cr_assert_lt(ff, conv, "B=%d: fast-forwarding %g vs conventional %g", B, ff, conv);
        cr_assert_lt(mod, ff, "B=%d: modulo %g vs fast-forwarding %g", B, mod, ff);
    }
}

/* Modulo allocation hands each layer's δ to the next GPU and computes G right away, so it
 * holds no more activations than the contiguous allocation ([O] §5.2.1, last paragraph
 * before 5.2.2, on memory). */
Test(ooo, modulo_placement_is_s_mod_w)
{
    run x = simulate_with((cfg){"ooo-modulo", 8, 1, 3, 0, 0}, NULL, -1, false);
    for (int j = 0; j < x.s->njobs; j++) cr_assert_eq(x.s->compute[j], x.s->jobs[j].stage % 3);
    cr_assert(x.s->split_backward);
    run_free(&x);
    x = simulate_with((cfg){"ooo-ff", 8, 1, 2, 0, 0}, NULL, -1, false);
    for (int j = 0; j < x.s->njobs; j++) cr_assert_eq(x.s->compute[j], x.s->jobs[j].stage / 4);
    run_free(&x);
}

/* ------------------------------------------------------------------------------------ */
/* The executor's contract: every job once, on its worker, after its preds, one at a time */

static void check_valid(cfg c, const sp_costs *costs, int split)
{
    run x = simulate_with(c, costs, split, false);
    const sp_schedule *s = x.s;
    int *seen = calloc(s->njobs, sizeof(int));
    for (int w = 0; w < s->workers; w++)
        for (int i = x.r.order_off[w]; i < x.r.order_off[w + 1]; i++) {
            int j = x.r.order[i];
            seen[j]++;
            cr_assert_eq(s->compute[j], w, CFG_FMT, CFG_ARGS(c));
            if (i > x.r.order_off[w])
                cr_assert_geq(x.r.start[j] + 1e-9, x.r.finish[x.r.order[i - 1]], CFG_FMT ": overlap on w%d",
                              CFG_ARGS(c), w);
            int n;
            const int *p = sp_schedule_preds(s, j, &n);
            for (int k = 0; k < n; k++)
                cr_assert_geq(x.r.start[j] + 1e-9, x.r.finish[p[k]], CFG_FMT ": job before its pred", CFG_ARGS(c));
            cr_assert_float_eq(x.r.finish[j] - x.r.start[j], sp_job_duration(s, costs, j), 1e-9);
        }
    for (int j = 0; j < s->njobs; j++) cr_assert_eq(seen[j], 1, CFG_FMT ": job %d ran %d times", CFG_ARGS(c), j, seen[j]);
    int per_pair = s->split_backward ? 3 : 2;
    cr_assert_eq(s->njobs, per_pair * c.S * c.B);
    free(seen);
    run_free(&x);
}

Test(simulator, schedules_are_valid)
{
    sp_costs *costs = sp_costs_uniform(6, 1.0, 0.7, 1.3);
    for (int B = 1; B <= 6; B++)
        for (int split = -1; split <= 1; split++) {
            check_valid((cfg){"ddp", 6, B, 0, 0, 0}, costs, split);
            check_valid((cfg){"fsdp", 6, B, 3, 0, 0}, costs, split);
            check_valid((cfg){"gpipe", 6, B, 4, 0, 0}, costs, split);
            check_valid((cfg){"1f1b", 6, B, 3, 0, 0}, costs, split);
            check_valid((cfg){"lpp", 6, B, 0, 2, 3}, costs, split);
            check_valid((cfg){"fslpp", 6, B, 0, 3, 2}, costs, split);
            check_valid((cfg){"ooo-ff", 6, B, 2, 0, 0}, costs, split);
            check_valid((cfg){"ooo-modulo", 6, B, 4, 0, 0}, costs, split);
        }
    sp_costs_free(costs);
}

/* The tie-break n decides between jobs ready at the same instant ([U]: "it suffices to
 * add a term ε·n(s, b, d) to the objective"). On GPipe with S = W = 2, B = 2, the last
 * worker finds F(1, 1) and B(1, 0) both ready at t = 2. A user scheme, GPipe's w with a
 * backward-first n, must run the backward there; GPipe runs the forward. */
static long backward_first(const sp_schedule *s, sp_job j)
{
    return ((long)(j.dir == SP_FWD) * s->micro + j.micro) * s->stages + j.stage;
}

Test(simulator, tie_break_by_priority)
{
    sp_scheme custom = *sp_scheme_find("gpipe");
    custom.name = "gpipe-backward-first";
    custom.priority = backward_first;
    sp_sched_config c = {.stages = 2, .micro = 2, .workers = 2, .split = -1};
    sp_schedule *g = sp_schedule_new(sp_scheme_find("gpipe"), &c, NULL), *o = sp_schedule_new(&custom, &c, NULL);
    sp_sim rg, ro;
    sp_simulate(g, NULL, &rg);
    sp_simulate(o, NULL, &ro);
    int f = sp_schedule_find(g, 1, 1, SP_FWD), b = sp_schedule_find(g, 1, 0, SP_BWD);
    cr_assert_float_eq(rg.start[f], 2, 1e-12);
    cr_assert_float_eq(rg.start[b], 3, 1e-12);
    cr_assert_float_eq(ro.start[b], 2, 1e-12);
    cr_assert_float_eq(ro.start[f], 3, 1e-12);
    /* n only breaks ties: the worker never idles while a job is ready */
    for (int w = 0; w < 2; w++) cr_assert_float_eq(ro.worker[w].busy, 4, 1e-12);
    sp_sim_free(&rg);
    sp_sim_free(&ro);
    sp_schedule_free(g);
    sp_schedule_free(o);
}

/* Split backward: G of a stage waits only for the δ of the stage after it ([L] Eq. 5). */
Test(simulator, split_backward_preds)
{
    run x = simulate_with((cfg){"ooo-ff", 4, 1, 2, 0, 0}, NULL, -1, false);
    int g1 = sp_schedule_find(x.s, 1, 0, SP_BWD_GRAD), d2 = sp_schedule_find(x.s, 2, 0, SP_BWD_DELTA);
    int n;
    const int *p = sp_schedule_preds(x.s, g1, &n);
    cr_assert_eq(n, 1);
    cr_assert_eq(p[0], d2);
    cr_assert_eq(sp_schedule_find(x.s, 1, 0, SP_BWD), -1);
    run_free(&x);
}

/* ------------------------------------------------------------------------------------ */
/* Diagrams                                                                             */

static char *text_diagram(const run *x)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    sp_diagram_text(f, x->s, &x->r, 0);
    fclose(f);
    return buf;
}

/* The row of worker w as its whitespace-separated tokens joined by single spaces. */
static void row_tokens(const char *diagram, int w, char *out, size_t len)
{
    char key[16], line[2048];
    snprintf(key, sizeof key, "\nw%d ", w);
    const char *p = strstr(diagram, key);
    cr_assert_not_null(p, "no row w%d in:\n%s", w, diagram);
    p++;
    size_t n = strcspn(p, "\n");
    cr_assert_lt(n, sizeof line);
    memcpy(line, p, n);
    line[n] = 0;
    out[0] = 0;
    for (char *tok = strtok(line, " "); tok; tok = strtok(NULL, " ")) {
        if (out[0]) strncat(out, " ", len - strlen(out) - 1);
        strncat(out, tok, len - strlen(out) - 1);
    }
}

/* [U]'s DDP diagram (8 workers, 8 batches, 4 stages): f0 f1 f2 f3 ∇3 · ∇2 · ∇1 · ∇0 ·, a
 * backward drawn over two columns. With a backward twice a forward we draw the same. */
Test(diagram, ddp_like_the_paper)
{
    sp_costs *costs = sp_costs_uniform(4, 1, 1, 1);
    run x = simulate_with((cfg){"ddp", 4, 8, 8, 0, 0}, costs, -1, false);
    char *d = text_diagram(&x), row[512];
    row_tokens(d, 0, row, sizeof row);
    cr_assert_str_eq(row, "w0 f0a f1a f2a f3a b3a -- b2a -- b1a -- b0a --");
    row_tokens(d, 7, row, sizeof row);
    cr_assert_str_eq(row, "w7 f0h f1h f2h f3h b3h -- b2h -- b1h -- b0h --");
    free(d);
    run_free(&x);
    sp_costs_free(costs);
}

Test(diagram, gpipe_text)
{
    run x = simulate_with((cfg){"gpipe", 3, 2, 3, 0, 0}, NULL, -1, false);
    char *d = text_diagram(&x), row[512];
    row_tokens(d, 0, row, sizeof row);
    cr_assert_str_eq(row, "w0 f0a f0b b0a b0b");
    row_tokens(d, 2, row, sizeof row);
    cr_assert_str_eq(row, "w2 f2a f2b b2a b2b");
    cr_assert_not_null(strstr(d, "latency 8"));
    free(d);
    run_free(&x);
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

Test(diagram, svg_one_colour_per_micro_batch)
{
    run x = simulate_with((cfg){"lpp", 4, 4, 0, 2, 2}, NULL, -1, false);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    sp_diagram_svg(f, x.s, &x.r, "LPP <G=2>");
    fclose(f);
    cr_assert(strncmp(buf, "<svg ", 5) == 0);
    cr_assert_str_eq(buf + len - 7, "</svg>\n");
    cr_assert_eq(count(buf, "<title>"), x.s->njobs);
    cr_assert_not_null(strstr(buf, "LPP &lt;G=2&gt;"));
    /* forward boxes: lightness 74%, one hue per micro-batch */
    char hue[64];
    for (int b = 0; b < 4; b++) {
        snprintf(hue, sizeof hue, "fill=\"hsl(%.1f,65%%,74%%)\"", fmod(b * 137.508, 360.0));
        cr_assert_eq(count(buf, hue), 4, "micro-batch %d: %d forward boxes", b, count(buf, hue));
    }
    /* a reader sees what the axes are and the figures schedules are compared by */
    cr_assert_not_null(strstr(buf, ">time (time units)<"), "no time axis title");
    cr_assert_not_null(strstr(buf, ">worker<"), "no worker axis title");
    char figures[128];
    snprintf(figures, sizeof figures, "latency %.4g time units, utilisation %.1f%%, bubble %.1f%%", x.r.latency,
             100 * x.r.utilization, 100 * (1 - x.r.utilization));
    cr_assert_not_null(strstr(buf, figures), "expected '%s' on the figure", figures);
    free(buf);
    run_free(&x);
}

/* Costs in µs: the axis says so, and a box too narrow for "f3c" still names its stage. */
Test(diagram, svg_units_and_sliver_labels)
{
    run x = simulate_with((cfg){"gpipe", 4, 8, 0, 0, 0}, NULL, -1, false);
    for (int j = 0; j < x.s->njobs; j++)   /* stage 0's jobs short: slivers beside the others */
        if (x.s->jobs[j].stage == 0) x.r.finish[j] = x.r.start[j] + x.r.latency / 120;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    sp_diagram_svg_unit(f, x.s, &x.r, NULL, "us");
    fclose(f);
    cr_assert_not_null(strstr(buf, ">time (µs)<"), "no µs on the time axis");
    cr_assert_not_null(strstr(buf, " µs, utilisation"), "no unit beside the latency");
    cr_assert_gt(count(buf, "rotate(-90"), 1, "slivers unlabelled");
    cr_assert_not_null(strstr(buf, ">f0</text>"), "a stage-0 sliver should read f0");
    free(buf);
    run_free(&x);
}

/* ------------------------------------------------------------------------------------ */
/* Errors a user can cause                                                              */

Test(errors, unknown_scheme, .exit_code = 2, .init = tu_capture_stderr) { sp_scheme_find("pipedream-2bw"); }

/* Durations each finite but adding up past DBL_MAX (a costs CSV of 1e308s) once made the
 * contiguous partition write before its array; they are refused when read. */
Test(errors, costs_csv_that_overflows, .exit_code = 2, .init = tu_capture_stderr)
{
    char path[512];
    snprintf(path, sizeof path, "%s/huge.csv", tu_tmpdir());
    FILE *f = fopen(path, "w");
    fprintf(f, "layer,fwd,bwd_grad,bwd_delta\n");
    for (int s = 0; s < 4; s++) fprintf(f, "l%d,1e308,1e308,1e308\n", s);
    fclose(f);
    sp_costs_read_csv(path);
}

Test(errors, pipeline_with_more_workers_than_stages, .exit_code = 2, .init = tu_capture_stderr)
{
    sp_sched_config c = {.stages = 2, .micro = 4, .workers = 3, .split = -1};
    sp_schedule_new(sp_scheme_find("gpipe"), &c, NULL);
}

Test(errors, lpp_workers_must_be_g_times_r, .exit_code = 2, .init = tu_capture_stderr)
{
    sp_sched_config c = {.stages = 4, .micro = 4, .workers = 6, .groups = 2, .per_group = 2, .split = -1};
    sp_schedule_new(sp_scheme_find("lpp"), &c, NULL);
}

Test(errors, costs_for_other_stage_count, .exit_code = 2, .init = tu_capture_stderr)
{
    sp_costs *c = sp_costs_uniform(3, 1, 1, 1);
    sp_sched_config sc = {.stages = 4, .micro = 2, .split = -1};
    sp_schedule_new(sp_scheme_find("ddp"), &sc, c);
}

/* ---- pipelines as per-rank action lists (actions.h, gen_basic.c, schedule_actions.c) ---------
 *
 * Closed forms at unit costs F = I = W = 1 (docs/SCHEDULES.md derives each): strict 1F1B
 * (m + p − 1)(F + I + W); ZB-H1 m(F+I+W) + (p−1)(F+I−W); ZB-H2 m(F+I+W) + (p−1)F (the
 * last rank's lower bound); interleaved 1F1B and looped BFS with v chunks per rank, each
 * chunk 1/v of a rank's costs: m(F+I+W) + (p−1)(F+I+W)/v. Each list is also run by the
 * chunk-level simulator of actions.c, which must agree with the layer-level one. */
#include "schedulers/plan/actions.h"

typedef struct pp_run {
    sp_actions *a;
    sp_schedule *s;
    sp_sim r;
    sp_costs *c;
} pp_run;

/* The generator's list for p ranks, m micro-batches, v chunks per rank on p·v·layers_per
 * stages of costs (f, i, w) each, expanded and simulated. */
static pp_run pp_simulate(const char *name, int p, int m, int v, int layers_per, double f, double i, double w)
{
    const sp_pp_generator *g = sp_pp_find(name);
    cr_assert_not_null(g, "no generator %s", name);
    pp_run x;
    sp_pp_params pp = {.ranks = p, .micro = m, .chunks_per_rank = v};
    cr_assert_eq(g->generate(&pp, &x.a), SP_OK, "%s p=%d m=%d v=%d: %s", name, p, m, v, sp_last_error());
    int S = x.a->chunks * layers_per;
    x.c = sp_costs_uniform(S, f, i, w);
    sp_sched_config sc = {.stages = S, .micro = m, .split = -1, .actions_scheme = name};
    x.s = sp_schedule_from_actions(x.a, &sc, x.c);
    sp_simulate(x.s, x.c, &x.r);
    return x;
}

static void pp_free(pp_run *x)
{
    sp_sim_free(&x->r);
    sp_schedule_free(x->s);
    sp_costs_free(x->c);
    sp_actions_free(x->a);
}

/* The chunk-level simulator on the same list and costs gives the same latency. */
static void check_chunk_level(const pp_run *x, int layers_per, double f, double i, double w)
{
    int C = x->a->chunks;
    double *cf = malloc(sizeof(double) * 3 * (size_t)C);
    for (int k = 0; k < C; k++) cf[k] = f * layers_per, cf[C + k] = i * layers_per, cf[2 * C + k] = w * layers_per;
    sp_chunk_costs cc = {.chunks = C, .f = cf, .i = cf + C, .w = cf + 2 * C};
    sp_actions_sim as;
    cr_assert_eq(sp_actions_simulate(x->a, &cc, &as), SP_OK, "%s", sp_last_error());
    cr_assert(fabs(as.latency - x->r.latency) < 1e-9, "%s: chunk-level latency %g, layer-level %g", x->s->scheme->name,
              as.latency, x->r.latency);
    sp_actions_sim_free(&as);
    free(cf);
}

Test(pipelines, closed_forms_at_unit_costs)
{
    for (int p = 2; p <= 8; p++)
        for (int m = p; m <= 4 * p; m++) {
            pp_run x = pp_simulate("1f1b-strict", p, m, 0, 1, 1, 1, 1);
            cr_assert_eq(x.r.latency, (m + p - 1) * 3.0, "1f1b-strict p=%d m=%d: %g", p, m, x.r.latency);
            cr_assert(!x.s->split_backward);
            for (int w = 0; w < p; w++)   /* rank r holds p − r micro-batches at most */
                cr_assert_eq(x.r.worker[w].peak_act, p - w, "1f1b-strict p=%d m=%d w%d: peak %d", p, m, w,
                             x.r.worker[w].peak_act);
            check_chunk_level(&x, 1, 1, 1, 1);
            pp_free(&x);

            x = pp_simulate("zb-h1", p, m, 0, 1, 1, 1, 1);
            cr_assert_eq(x.r.latency, 3.0 * m + (p - 1) * (1 + 1 - 1), "zb-h1 p=%d m=%d: %g", p, m, x.r.latency);
            cr_assert(x.s->split_backward);
            for (int w = 0; w < p; w++)   /* 1F1B's peak, p, on every rank */
                cr_assert_eq(x.r.worker[w].peak_act, p, "zb-h1 p=%d m=%d w%d: peak %d", p, m, w, x.r.worker[w].peak_act);
            check_chunk_level(&x, 1, 1, 1, 1);
            pp_free(&x);

            x = pp_simulate("zb-h2", p, m, 0, 1, 1, 1, 1);
            cr_assert_eq(x.r.latency, 3.0 * m + (p - 1) * 1, "zb-h2 p=%d m=%d: %g", p, m, x.r.latency);
            for (int w = 0; w < p; w++) {   /* 2p − 1 − r, or every micro-batch */
                int want = 2 * p - 1 - w < m ? 2 * p - 1 - w : m;
                cr_assert_eq(x.r.worker[w].peak_act, want, "zb-h2 p=%d m=%d w%d: peak %d", p, m, w, x.r.worker[w].peak_act);
            }
            check_chunk_level(&x, 1, 1, 1, 1);
            pp_free(&x);

            for (int v = 1; v <= 3; v++) {
                double u = 1.0 / v, want = 3.0 * m + (p - 1) * 3.0 / v;
                x = pp_simulate("looped-bfs", p, m, v, 1, u, u, u);
                cr_assert(fabs(x.r.latency - want) < 1e-9, "looped-bfs p=%d m=%d v=%d: %g, want %g", p, m, v,
                          x.r.latency, want);
                for (int w = 0; w < p; w++) cr_assert_eq(x.r.worker[w].peak_act, v * m);   /* every F first */
                check_chunk_level(&x, 1, u, u, u);
                pp_free(&x);
                if (m % p) continue;
                x = pp_simulate("interleaved-1f1b", p, m, v, 1, u, u, u);
                cr_assert(fabs(x.r.latency - want) < 1e-9, "interleaved-1f1b p=%d m=%d v=%d: %g, want %g", p, m, v,
                          x.r.latency, want);
                check_chunk_level(&x, 1, u, u, u);
                pp_free(&x);
            }
        }
}

/* Away from unit costs: ZB-H1's form for W <= I, ZB-H2 at the lower bound when W = F + I,
 * and chunks of several layers (the costs add up per chunk). */
Test(pipelines, closed_forms_at_other_costs)
{
    const double h1[][3] = {{1, 2, 1}, {2, 1, 1}, {2, 2, 1}, {3, 2, 1}};
    for (int p = 2; p <= 6; p++)
        for (int m = p; m <= 3 * p; m++) {
            for (size_t k = 0; k < sizeof h1 / sizeof h1[0]; k++) {
                double F = h1[k][0], I = h1[k][1], W = h1[k][2];
                pp_run x = pp_simulate("zb-h1", p, m, 0, 1, F, I, W);
                cr_assert_eq(x.r.latency, m * (F + I + W) + (p - 1) * (F + I - W), "zb-h1 (%g,%g,%g) p=%d m=%d: %g", F,
                             I, W, p, m, x.r.latency);
                pp_free(&x);
            }
            pp_run x = pp_simulate("zb-h2", p, m, 0, 1, 1, 1, 2);
            cr_assert_eq(x.r.latency, m * 4.0 + (p - 1) * 1.0, "zb-h2 (1,1,2) p=%d m=%d: %g", p, m, x.r.latency);
            pp_free(&x);
            x = pp_simulate("1f1b-strict", p, m, 0, 3, 1, 1, 1);   /* three layers per chunk */
            cr_assert_eq(x.r.latency, (m + p - 1) * 9.0, "1f1b-strict 3 layers/chunk p=%d m=%d: %g", p, m, x.r.latency);
            check_chunk_level(&x, 3, 1, 1, 1);
            pp_free(&x);
        }
}

/* The fixed order is the simulated order, and a rank with non-adjacent chunks gets the
 * layers of each (interleaved: chunk c on rank c mod p). */
Test(pipelines, fixed_order_is_followed)
{
    pp_run x = pp_simulate("interleaved-1f1b", 4, 8, 2, 2, 1, 1, 1);
    cr_assert_eq(x.s->stages, 16);
    for (int st = 0; st < 16; st++)
        cr_assert_eq(x.s->stage_worker[st], (st / 2) % 4, "stage %d on worker %d", st, x.s->stage_worker[st]);
    for (int w = 0; w < 4; w++) {
        cr_assert_eq(x.r.order_off[w + 1] - x.r.order_off[w], x.s->fixed_off[w + 1] - x.s->fixed_off[w]);
        for (int i = x.s->fixed_off[w]; i < x.s->fixed_off[w + 1]; i++)
            cr_assert_eq(x.r.order[i], x.s->fixed[i], "w%d position %d differs from the list", w, i);
    }
    pp_free(&x);
}

static double latency_of(const sp_schedule *s, const sp_costs *c)
{
    sp_sim r;
    sp_simulate(s, c, &r);
    double l = r.latency;
    sp_sim_free(&r);
    return l;
}

/* Every pipeline scheme's simulated order, exported and re-imported as custom, runs to
 * the same latency (the greedy ones at chunk = a worker's run of stages). */
Test(pipelines, export_and_reimport_keep_the_latency)
{
    const char *greedy[] = {"gpipe", "1f1b", "ooo-ff", "ooo-modulo"};
    for (int split = 0; split <= 1; split++)
        for (size_t k = 0; k < sizeof greedy / sizeof greedy[0]; k++)
            for (int S = 4; S <= 8; S += 4) {
                sp_costs *c = sp_costs_uniform(S, 1, 1, 1);
                sp_sched_config sc = {.stages = S, .micro = 8, .workers = 4, .split = split};
                sp_schedule *s = sp_schedule_new(sp_scheme_find(greedy[k]), &sc, c);
                sp_sim r;
                sp_simulate(s, c, &r);
                sp_actions *a = sp_schedule_to_actions(s, &r);
                cr_assert_not_null(a, "%s S=%d split=%d: %s", greedy[k], S, split, sp_last_error());
                sp_sched_config ic = {.stages = S, .split = split ? -1 : 0};
                sp_schedule *back = sp_schedule_from_actions(a, &ic, c);
                cr_assert_eq(latency_of(back, c), r.latency, "%s S=%d split=%d: re-imported %g, simulated %g",
                             greedy[k], S, split, latency_of(back, c), r.latency);
                sp_schedule_free(back);
                sp_actions_free(a);
                sp_sim_free(&r);
                sp_schedule_free(s);
                sp_costs_free(c);
            }
    const char *lists[] = {"1f1b-strict", "zb-h1", "zb-h2", "interleaved-1f1b", "looped-bfs"};
    for (size_t k = 0; k < sizeof lists / sizeof lists[0]; k++) {
        pp_run x = pp_simulate(lists[k], 4, 8, 2, 1, 1, 2, 1);
        sp_actions *a = sp_schedule_to_actions(x.s, &x.r);
        cr_assert_not_null(a, "%s: %s", lists[k], sp_last_error());
        cr_assert_eq(a->off[a->ranks], x.a->off[x.a->ranks], "%s: %d actions back, %d given", lists[k], a->off[a->ranks],
                     x.a->off[x.a->ranks]);
        for (int i = 0; i < a->off[a->ranks]; i++)
            cr_assert(a->act[i].chunk == x.a->act[i].chunk && a->act[i].micro == x.a->act[i].micro &&
                          a->act[i].type == x.a->act[i].type,
                      "%s: action %d differs", lists[k], i);
        sp_actions_free(a);
        pp_free(&x);
    }
}

/* Data-parallel schemes run a stage on several workers: no action list; say so. */
Test(pipelines, export_refuses_what_is_not_a_list)
{
    sp_sched_config sc = {.stages = 4, .micro = 4, .split = -1};
    sp_schedule *s = sp_schedule_new(sp_scheme_find("ddp"), &sc, NULL);
    sp_sim r;
    sp_simulate(s, NULL, &r);
    cr_assert_null(sp_schedule_to_actions(s, &r));
    cr_assert(strstr(sp_last_error(), "--scheme ddp runs stage 0 on workers 0 and 1"), "%s", sp_last_error());
    sp_sim_free(&r);
    sp_schedule_free(s);
}

Test(pipelines, more_chunks_than_stages_is_refused, .exit_code = 2, .init = tu_capture_stderr)
{
    sp_actions *a;
    sp_pp_params pp = {.ranks = 4, .micro = 4, .chunks_per_rank = 2};
    cr_assert_eq(sp_pp_find("looped-bfs")->generate(&pp, &a), SP_OK);
    sp_sched_config sc = {.stages = 6, .split = -1};
    sp_schedule_from_actions(a, &sc, NULL);   /* 8 chunks, 6 layers */
}

Test(pipelines, interleaved_needs_m_a_multiple_of_p)
{
    sp_actions *a = NULL;
    sp_pp_params pp = {.ranks = 4, .micro = 6, .chunks_per_rank = 2};
    cr_assert_eq(sp_pp_find("interleaved-1f1b")->generate(&pp, &a), SP_ERR);
    cr_assert_null(a);
    cr_assert(strstr(sp_last_error(), "6 micro-batches on 4 ranks (expected a multiple of 4)"), "%s", sp_last_error());
}

/* The issue's numbers from the program itself: zb-h1 27, 1f1b-strict 33 (and the greedy
 * 1f1b --split stays 30), and a list written by --actions-out and read by --scheme custom
 * gives the same latency. */
static double program_key(const char *args, const char *key);
static double program_latency(const char *args) { return program_key(args, "latency"); }

Test(pipelines, program_reports_the_issue_latencies)
{
    const char *unit = "--stages 4 --microbatches 8 --fwd-cost 1 --delta-cost 1 --grad-cost 1";
    char args[1024], csv[600];
    snprintf(args, sizeof args, "--scheme zb-h1 %s", unit);
    cr_assert_eq(program_latency(args), 27);
    snprintf(args, sizeof args, "--scheme 1f1b-strict %s", unit);
    cr_assert_eq(program_latency(args), 33);
    snprintf(args, sizeof args, "--scheme 1f1b --split %s", unit);
    cr_assert_eq(program_latency(args), 30);
    const char *schemes[] = {"zb-h1", "zb-h2", "1f1b-strict", "interleaved-1f1b", "looped-bfs", "gpipe", "1f1b", "ooo-ff"};
    for (size_t k = 0; k < sizeof schemes / sizeof schemes[0]; k++) {
        snprintf(csv, sizeof csv, "%s/list.csv", tu_tmpdir());
        snprintf(args, sizeof args, "--scheme %s --stages 8 --workers 4 --microbatches 8 --delta-cost 2 --actions-out %s",
                 schemes[k], csv);
        double want = program_latency(args);
        snprintf(args, sizeof args, "--scheme custom --actions %s --stages 8 --delta-cost 2", csv);
        cr_assert_eq(program_latency(args), want, "%s: re-imported %g, simulated %g", schemes[k],
                     program_latency(args), want);
        remove(csv);
    }
}

/* ---- zb-auto's --mem-limit in bytes --------------------------------------------------- */

/* The last stdout line of build/schedule ARGS (exit 0 expected), and its exit status. */
static int program_last(const char *args, char *last, size_t len)
{
    char cmd[1024], line[8192];
    const char *b = getenv("BUILD");
    snprintf(cmd, sizeof cmd, "%s/schedule %s --no-diagram 2>&1", b ? b : "build", args);
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f);
    last[0] = 0;
    while (fgets(line, sizeof line, f)) snprintf(last, len, "%s", line);
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The whole file (NUL-terminated; *n its length). */
static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    char *buf = malloc(1 << 16);
    *n = fread(buf, 1, (1 << 16) - 1, f);
    buf[*n] = 0;
    fclose(f);
    return buf;
}

/* The JSON's "peak_activation_bytes":[...] per rank; returns the ranks read. */
static int peak_bytes(const char *json, double *out, int max)
{
    const char *p = strstr(json, "\"peak_activation_bytes\":[");
    cr_assert_not_null(p, "%s", json);
    p += strlen("\"peak_activation_bytes\":[");
    int n = 0;
    while (n < max && *p && *p != ']') {
        char *end;
        out[n++] = strtod(p, &end);
        cr_assert(end != p, "%s", json);
        p = *end == ',' ? end + 1 : end;
    }
    return n;
}

/* Every rank's simulated peak stays within the limit in bytes, for models whose chunks
 * hold unequal activations (mlp: 200704 B on rank 0, 32768 B on rank 1 at 2 ranks), with
 * limits below the unlimited schedule's peak (vgg11 at 4 ranks: 137543680 B on rank 0;
 * lenet at 2: 3104640 B) and above it. */
Test(pipelines, zb_auto_mem_limit_in_bytes_is_respected)
{
    const struct {
        const char *model, *limit;
        int workers;
        double bytes;
    } cases[] = {
        {"mlp", "300KB", 2, 300e3},     {"mlp", "200704B", 2, 200704},    {"mlp", "1MiB", 2, 1048576},
        {"lenet", "3MB", 4, 3e6},       {"lenet", "2.5MB", 2, 2.5e6},     {"vgg11", "100MiB", 4, 100 * 1048576.0},
        {"vgg11", "0.1GB", 2, 0.1e9},   {"vgg11", "0.25GiB", 2, 0.25 * 1073741824.0},
    };
    char args[512], last[8192];
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        snprintf(args, sizeof args, "--scheme zb-auto --model %s --workers %d --microbatches 8 --mem-limit %s",
                 cases[k].model, cases[k].workers, cases[k].limit);
        int rc = program_last(args, last, sizeof last);
        cr_assert_eq(rc, 0, "%s: exit %d: %s", args, rc, last);
        double peak[16];
        int n = peak_bytes(last, peak, 16);
        cr_assert_eq(n, cases[k].workers, "%s: %s", args, last);
        for (int r = 0; r < n; r++)
            cr_assert(peak[r] <= cases[k].bytes, "%s: rank %d holds %g B, limit %g B", args, r, peak[r],
                      cases[k].bytes);
    }
    /* mlp at 2 ranks: chunk 0 holds 200704 B per micro-batch, so 300KB admits exactly one */
    snprintf(args, sizeof args, "--scheme zb-auto --model mlp --workers 2 --microbatches 8 --mem-limit 300KB");
    cr_assert_eq(program_last(args, last, sizeof last), 0, "%s", last);
    double peak[2];
    peak_bytes(last, peak, 2);
    cr_assert_eq(peak[0], 200704, "%s", last);
}

/* Equal chunk activations of a bytes each: a limit of k·a bytes is the limit k, the same
 * action list (a profile with act_bytes 1000 per layer, one layer per chunk). */
Test(pipelines, zb_auto_bytes_limit_of_k_chunks_is_the_limit_k)
{
    char prof[600], a[600], b[600], args[2048], last[8192];
    snprintf(prof, sizeof prof, "%s/equal.csv", tu_tmpdir());
    FILE *f = fopen(prof, "w");
    cr_assert_not_null(f);
    fprintf(f, "layer,fwd,bwd_grad,bwd_delta,act_bytes\n");
    const double fwd[6] = {1, 2, 1.5, 1, 3, 1}, grad[6] = {1, 1, 2, 0.5, 1, 2}, delta[6] = {2, 1, 1, 1, 2, 1};
    for (int s = 0; s < 6; s++) fprintf(f, "l%d,%g,%g,%g,1000\n", s, fwd[s], grad[s], delta[s]);
    fclose(f);
    const char *units[][2] = {{"1", "1000B"}, {"2", "2KB"}, {"3", "3000B"}, {"4", "4KB"}, {"6", "0.006MB"}};
    for (size_t k = 0; k < sizeof units / sizeof units[0]; k++) {
        snprintf(a, sizeof a, "%s/k.csv", tu_tmpdir());
        snprintf(b, sizeof b, "%s/bytes.csv", tu_tmpdir());
        snprintf(args, sizeof args, "--scheme zb-auto --profile %s --workers 6 --microbatches 12 --mem-limit %s "
                 "--actions-out %s", prof, units[k][0], a);
        cr_assert_eq(program_last(args, last, sizeof last), 0, "%s: %s", args, last);
        snprintf(args, sizeof args, "--scheme zb-auto --profile %s --workers 6 --microbatches 12 --mem-limit %s "
                 "--actions-out %s", prof, units[k][1], b);
        cr_assert_eq(program_last(args, last, sizeof last), 0, "%s: %s", args, last);
        size_t na, nb;
        char *ta = slurp(a, &na), *tb = slurp(b, &nb);
        cr_assert(na > 0 && na == nb && !memcmp(ta, tb, na), "--mem-limit %s and %s give different lists:\n%s\n%s",
                  units[k][0], units[k][1], ta, tb);
        free(ta);
        free(tb);
    }
    /* and the limit binds: 1 chunk of activations differs from 6 */
    size_t n1, n6;
    snprintf(args, sizeof args, "--scheme zb-auto --profile %s --workers 6 --microbatches 12 --mem-limit 1KB "
             "--actions-out %s", prof, a);
    cr_assert_eq(program_last(args, last, sizeof last), 0, "%s", last);
    char *t1 = slurp(a, &n1), *t6 = slurp(b, &n6);
    cr_assert(n1 != n6 || memcmp(t1, t6, n1), "the limit does not bind");
    free(t1);
    free(t6);
}

/* A limit in bytes needs activation sizes; a malformed value is refused naming it. */
Test(pipelines, zb_auto_mem_limit_refusals)
{
    char last[8192];
    const struct {
        const char *args, *msg;
    } cases[] = {
        {"--scheme zb-auto --mem-limit 1MiB", "--mem-limit 1MiB: a limit in bytes needs activation sizes"},
        {"--scheme zb-auto --model mlp --mem-limit 2XB", "--mem-limit 2XB: unknown unit \"XB\""},
        {"--scheme zb-auto --model mlp --mem-limit MiB", "--mem-limit MiB: expected N"},
        {"--scheme zb-auto --model mlp --mem-limit=-1", "--mem-limit -1: expected N"},
        {"--scheme zb-auto --model mlp --mem-limit inf", "--mem-limit inf: expected N"},
        {"--scheme zb-auto --model mlp --mem-limit 0B", "--mem-limit 0B: a limit in bytes must be at least 1 B"},
        {"--scheme zb-auto --model mlp --workers 2 --mem-limit 150KB", "below one micro-batch's activations"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int rc = program_last(cases[k].args, last, sizeof last);
        cr_assert_eq(rc, 2, "%s: exit %d: %s", cases[k].args, rc, last);
        cr_assert(strstr(last, cases[k].msg), "%s: %s", cases[k].args, last);
    }
}

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

#include "schedulers/sim/sim_comm.h"

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

/* zb-auto weighs --transfer-cost in its search: with transfers its list is never longer,
 * in the simulation with those transfers, than the list it builds without them; on this
 * configuration strictly shorter (53 against 54), so the cost really reaches the search. */
static double program_key(const char *args, const char *key)
{
    char cmd[1024], line[8192] = "", last[8192] = "", k[64];
    const char *b = getenv("BUILD");
    snprintf(cmd, sizeof cmd, "%s/schedule %s --no-diagram 2>&1", b ? b : "build", args);
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f);
    while (fgets(line, sizeof line, f)) snprintf(last, sizeof last, "%s", line);
    cr_assert_eq(pclose(f), 0, "%s: %s", cmd, last);
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *l = strstr(last, k);
    cr_assert_not_null(l, "%s: no %s in %s", cmd, key, last);
    return atof(l + strlen(k));
}

Test(pipelines, zb_auto_searches_with_the_transfer_cost)
{
    char csv[600];
    snprintf(csv, sizeof csv, "%s/za-notransfer.csv", tu_tmpdir());
    const char *base = "--stages 8 --workers 4 --mem-limit 3";
    char args[1024];
    snprintf(args, sizeof args, "--scheme zb-auto %s --actions-out %s", base, csv);
    program_latency(args);
    for (int k = 1; k <= 4; k++) {
        double x = 0.25 * k;
        snprintf(args, sizeof args, "--scheme zb-auto %s --transfer-cost %g", base, x);
        double aware = program_key(args, "latency_with_comm");
        snprintf(args, sizeof args, "--scheme custom --actions %s --stages 8 --transfer-cost %g", csv, x);
        double blind = program_key(args, "latency_with_comm");
        cr_expect_leq(aware, blind, "transfer %g: zb-auto with it %g, without it %g", x, aware, blind);
        if (k == 2) cr_expect_lt(aware, blind, "transfer 0.5: the transfer cost changed nothing (%g)", aware);
    }
    remove(csv);
}

/* ---- a DAG model as a chain of segments (schedule_segments.c) ------------------------- */

/* Σ over a shape-only tape of m at `batch` of each op node's F + δ + G FLOPs, its forward
 * FLOPs alone, and its sp_node_act_bytes: the whole model's, for the sums of its stages. */
static void whole_model(sp_model *m, int batch, double *flops, double *fwd, double *act)
{
    int shape[3], nd = sp_zoo_input_shape(m->name, shape);
    sp_tape t;
    sp_model_forward_shapes(m, &t, batch, nd, shape);
    *flops = *fwd = *act = 0;
    for (int i = 0; i < t.n; i++) {
        if (!t.nodes[i]->op) continue;
        sp_cost k = t.nodes[i]->op->cost(t.nodes[i]);
        *flops += k.fwd_flops + k.bwd_input_flops + k.bwd_params_flops;
        *fwd += k.fwd_flops;
        *act += sp_node_act_bytes(t.nodes[i]);
    }
    sp_tape_free(&t);
}

/* ResNet-20 (one input channel, as the zoo's) is cut after each node every path goes
 * through: conv1 | bn1 (batch norm with the ReLU fused: the stem), then each residual
 * block up to its add with the block's ReLU fused (9), then the pooling and the fc:
 * 2 + 9 + 2 = 13 stages.
 * Their F, δ, G and parameter bytes add up to the whole model's; their activations too,
 * less the input of the two downsampling blocks, which both the block's conv1 and its
 * shortcut conv read (counted once: 4 B × 32 × 16×32×32 and 4 B × 32 × 32×16×16). */
Test(segments, resnet20_is_cut_at_its_articulation_points)
{
    sp_model *m = sp_zoo_model("resnet20");
    int shape[3], nd = sp_zoo_input_shape("resnet20", shape);
    sp_costs *c = sp_costs_from_model(m, nd, shape, 32, 1000);
    cr_assert_eq(c->stages, 13);   /* conv1 | bn1 (+ReLU) | the 9 blocks (each ending in add+ReLU) | pool | fc */
    const char *names[][2] = {{"0", "conv1"}, {"1", "bn1"}, {"2", "layer1.0"}, {"5", "layer2.0"},
                              {"8", "layer3.0"}, {"10", "layer3.2"}, {"11", "global_avgpool2d_1"}, {"12", "fc"}};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        cr_assert_str_eq(c->name[atoi(names[k][0])], names[k][1], "stage %s", names[k][0]);
    double flops, fwd, act, sf = 0, sfwd = 0, sact = 0, sparam = 0;
    whole_model(m, 32, &flops, &fwd, &act);
    for (int s = 0; s < c->stages; s++) {
        sf += c->fwd[s] + c->delta[s] + c->grad[s];
        sfwd += c->fwd[s];
        sact += c->act_bytes[s];
        sparam += c->param_bytes[s];
    }
    cr_assert_float_eq(sf, flops / 1e6, 1e-9 * sf, "F+δ+G %g us, the ops' %g", sf, flops / 1e6);
    cr_assert_float_eq(sfwd, fwd / 1e6, 1e-9 * sfwd);
    cr_assert_float_eq(sparam, 4.0 * (double)sp_model_numel(m), 0.5, "param bytes %g", sparam);
    cr_assert_float_eq(sact, act - 4.0 * 32 * (16 * 32 * 32 + 32 * 16 * 16), 0.5, "act %g, ops %g", sact, act);
    /* what crosses a stage boundary: the segment's output, not what it keeps */
    cr_assert_float_eq(c->out_bytes[2], 4.0 * 32 * 16 * 32 * 32, 0.5);
    cr_assert_float_eq(c->out_bytes[5], 4.0 * 32 * 32 * 16 * 16, 0.5);
    cr_assert_float_eq(c->out_bytes[12], 4.0 * 32 * 10, 0.5);
    cr_assert_gt(c->act_bytes[2], c->out_bytes[2]);
    sp_costs_free(c);
    sp_model_free(m);
}

/* A chain is every op node a cut: one stage per layer, its costs the node's, as before. */
Test(segments, a_chain_keeps_one_stage_per_layer)
{
    sp_model *m = sp_zoo_model("vgg11");
    int shape[3], nd = sp_zoo_input_shape("vgg11", shape);
    sp_costs *c = sp_costs_from_model(m, nd, shape, 4, 500);
    cr_assert_eq(c->stages, m->nlayers);
    sp_tape t;
    sp_model_forward_shapes(m, &t, 4, nd, shape);
    for (int s = 0; s < c->stages; s++) {
        const sp_node *n = t.nodes[s + 1];
        cr_assert_eq(c->fwd[s], n->op->cost(n).fwd_flops / 5e5, "stage %d", s);
        cr_assert_eq(c->act_bytes[s], sp_node_act_bytes(n), "stage %d", s);
        cr_assert_eq(c->out_bytes[s], 4.0 * (double)n->out.numel, "stage %d", s);
    }
    sp_tape_free(&t);
    sp_costs_free(c);
    sp_model_free(m);
}

/* Two branches from the input joined at the output: no node but the last is on every
 * path, nothing to cut; refused with one line naming the model. */
static void branches_only(void *arg)
{
    sp_model *m = arg;
    int shape[1] = {4};
    sp_costs_free(sp_costs_from_model(m, 1, shape, 2, 1));
}

Test(segments, a_dag_without_cut_points_is_refused)
{
    sp_model *m = sp_model_new("branches");
    sp_model_set_loss(m, sp_softmax_ce());
    sp_model_add_from(m, sp_linear("a", 4, 3), 1, (int[]){SP_MODEL_INPUT});
    sp_model_add_from(m, sp_linear("b", 4, 3), 1, (int[]){SP_MODEL_INPUT});
    sp_model_add_from(m, sp_add(), 2, (int[]){0, 1});
    cr_assert_eq(sp_try(branches_only, m), SP_ERR);
    cr_assert(strstr(sp_last_error(), "--model branches: no layer that every path from the input to the output "
                                      "goes through but the last"), "%s", sp_last_error());
    /* one cut after a: a | b-and-add is two stages */
    sp_model *m2 = sp_model_new("two");
    sp_model_set_loss(m2, sp_softmax_ce());
    sp_model_add(m2, sp_linear("a", 4, 4));
    sp_model_add(m2, sp_linear("b", 4, 4));
    sp_model_add_from(m2, sp_add(), 2, (int[]){0, 1});
    int shape[1] = {4};
    sp_costs *c = sp_costs_from_model(m2, 1, shape, 2, 1);
    cr_assert_eq(c->stages, 2);
    cr_assert_str_eq(c->name[0], "a");
    cr_assert_str_eq(c->name[1], "b+1");
    sp_costs_free(c);
    sp_model_free(m2);
    sp_model_free(m);
}

/* build/schedule --model resnet20 for two schemes, against the sum worked here: at
 * --gflops 1 (10^3 FLOPs per us) DDP with one micro-batch per worker and GPipe with one
 * micro-batch both take every job one after another, the whole model's F + δ + G; DDP's
 * worker keeps the whole micro-batch's activations (the ops' act bytes less the two
 * downsampling blocks' inputs counted twice, at 8 samples) and weights, gradients, SGD
 * momentum and buckets of 4 bytes per parameter each. */
Test(segments, program_resnet20_by_hand)
{
    sp_model *m = sp_zoo_model("resnet20");
    double flops, fwd, act;
    whole_model(m, 8, &flops, &fwd, &act);
    double want = flops / 1e3, acts = act - 4.0 * 8 * (16 * 32 * 32 + 32 * 16 * 16), p = 4.0 * (double)sp_model_numel(m);
    sp_model_free(m);
    char last[8192];
    const char *runs[] = {"--scheme ddp --workers 2 --microbatches 2", "--scheme gpipe --workers 4 --microbatches 1"};
    for (int k = 0; k < 2; k++) {
        char args[400];
        snprintf(args, sizeof args, "%s --model resnet20 --batch-size 8 --gflops 1", runs[k]);
        cr_assert_eq(program_last(args, last, sizeof last), 0, "%s: %s", args, last);
        cr_assert(strstr(last, "\"stages\":13,"), "%s", last);
        double lat = atof(strstr(last, "\"latency\":") + strlen("\"latency\":"));
        cr_assert_float_eq(lat, want, 1e-5 * want, "%s: latency %g, expected %g", args, lat, want);
    }
    cr_assert_eq(program_last("--scheme ddp --workers 2 --microbatches 2 --model resnet20 --batch-size 8", last,
                              sizeof last), 0, "%s", last);
    double peak[2];
    cr_assert_eq(peak_bytes(last, peak, 2), 2);
    cr_assert_float_eq(peak[0], acts, 0.5, "activations %g, expected %g", peak[0], acts);
    const char *tot = strstr(last, "\"peak_memory_bytes\":[");
    cr_assert_not_null(tot, "%s", last);
    double total = atof(tot + strlen("\"peak_memory_bytes\":["));
    cr_assert_float_eq(total, acts + 4 * p, 0.5, "memory %g, expected %g", total, acts + 4 * p);
}
