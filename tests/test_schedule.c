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
#include <criterion/parameterized.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include "core/model.h"
#include "layers/layers.h"
#include "layers/zoo.h"
#include "schedulers/plan/actions.h"
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
    const struct {
        const char *scheme, *what;
        double latency;
    } fig5[] = {{"gpipe", "conventional", 23}, {"ooo-ff", "fast-forwarding", 19}, {"ooo-modulo", "modulo", 16}};
    for (size_t k = 0; k < sizeof fig5 / sizeof fig5[0]; k++) {
        double l = ffnn_latency(fig5[k].scheme, 1);
        cr_assert_float_eq(l, fig5[k].latency, 1e-12, "%s (%s): %g, Figure 5: %g", fig5[k].what, fig5[k].scheme, l,
                           fig5[k].latency);
    }
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
/* The scheme registry: one table, every list a view of it                              */

Test(registry, every_list_reads_the_one_table)
{
    char all[1024] = "";
    int nrules = 0, nlist = 0;
    for (int i = 0; i < sp_scheme_def_count(); i++) {
        const sp_scheme_def *d = sp_scheme_def_at(i);
        snprintf(all + strlen(all), sizeof all - strlen(all), "%s%s", i ? "|" : "", d->name);
        cr_assert_eq(sp_scheme_def_find(d->name), d, "%s: its name finds another row", d->name);
        cr_assert(d->help && *d->help, "%s: no help", d->name);
        cr_assert_eq(d->rules != NULL, d->kind == SP_SCHEME_RULES, "%s: rules iff RULES", d->name);
        cr_assert_eq(d->generate != NULL, d->kind == SP_SCHEME_LIST, "%s: a generator iff LIST", d->name);
        cr_assert_eq(sp_scheme_is_actions(d->name), d->kind != SP_SCHEME_RULES, "%s", d->name);
        if (d->kind == SP_SCHEME_RULES) {
            cr_assert_eq(nlist, 0, "%s: the RULES rows come first", d->name);
            const sp_scheme *s = sp_scheme_at(nrules++);
            cr_assert_str_eq(s->name, d->name);
            cr_assert_str_eq(s->summary, d->help);
            cr_assert_eq(sp_scheme_find(d->name), s);
        } else if (d->kind == SP_SCHEME_LIST) {
            const sp_pp_generator *g = sp_pp_at(nlist++);
            cr_assert_str_eq(g->name, d->name);
            cr_assert_eq(g->generate, d->generate);
            cr_assert_eq(g->default_chunks_per_rank, d->chunks_per_rank);
            cr_assert_eq(sp_pp_find(d->name), g);
        } else {
            cr_assert_eq(i, sp_scheme_def_count() - 1, "custom is listed last");
        }
    }
    cr_assert_eq(sp_scheme_count(), nrules);
    cr_assert_eq(sp_pp_count(), nlist);
    cr_assert_str_eq(sp_schedule_all_names(), all);
    cr_assert_str_eq(all, "ddp|fsdp|gpipe|1f1b|lpp|fslpp|ooo-ff|ooo-modulo|ddp-ooo|dualpipe|1f1b-strict|zb-h1|zb-h2|"
                          "interleaved-1f1b|interleaved-zb|looped-bfs|1f1b-v|zbv|v-half|v-min|dualpipev|zb-auto|custom");
    cr_assert_null(sp_scheme_def_find("pipedream-2bw"));
    cr_assert_null(sp_pp_find("gpipe"));
    cr_assert_not(sp_scheme_is_actions("gpipe"));
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

/* A configuration the scheme refuses (sp_fail, exit 2): its name, the config and the
 * stage count of the costs given (0: none). No pointers: Criterion copies a row into the
 * test's own process. */
typedef struct bad_config {
    char scheme[16];
    sp_sched_config cfg;
    int cost_stages;
} bad_config;

ParameterizedTestParameters(errors, refused_configs)
{
    static bad_config rows[] = {
        /* a pipeline with more workers than stages */
        {"gpipe", {.stages = 2, .micro = 4, .workers = 3, .split = -1}, 0},
        /* lpp's W must be G·R */
        {"lpp", {.stages = 4, .micro = 4, .workers = 6, .groups = 2, .per_group = 2, .split = -1}, 0},
        /* costs for another stage count */
        {"ddp", {.stages = 4, .micro = 2, .split = -1}, 3},
    };
    return cr_make_param_array(bad_config, rows, sizeof rows / sizeof rows[0]);
}

ParameterizedTest(bad_config *row, errors, refused_configs, .exit_code = 2, .init = tu_capture_stderr)
{
    sp_costs *c = row->cost_stages ? sp_costs_uniform(row->cost_stages, 1, 1, 1) : NULL;
    sp_schedule_new(sp_scheme_find(row->scheme), &row->cfg, c);
}
