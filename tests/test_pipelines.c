/* test_pipelines.c — pipelines as per-rank action lists through the master schedule: the
 * generators' closed forms (docs/MEASUREMENTS.md derives each), the fixed order, export and
 * re-import, and zb-auto's memory limit and transfer cost, in the library and through
 * build/schedule. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "schedulers/plan/actions.h"
#include "schedulers/plan/schedule.h"
#include "schedulers/sim/sim.h"
#include "tests/scheduletest.h"
#include "tests/testutil.h"

static int imin(int a, int b) { return a < b ? a : b; }

/* ---- pipelines as per-rank action lists (actions.h, the gen_*.c generators, schedule_actions.c) ----
 *
 * Closed forms at unit costs F = I = W = 1 (docs/MEASUREMENTS.md derives each): strict 1F1B
 * (m + p − 1)(F + I + W); ZB-H1 m(F+I+W) + (p−1)(F+I−W); ZB-H2 m(F+I+W) + (p−1)F (the
 * last rank's lower bound); interleaved 1F1B and looped BFS with v chunks per rank, each
 * chunk 1/v of a rank's costs: m(F+I+W) + (p−1)(F+I+W)/v. Each list is also run by the
 * chunk-level simulator of actions.c, which must agree with the layer-level one. */

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

/* One chunk per rank at unit costs F = I = W = 1: the closed latency and per-rank peak. */
static double strict_latency(int p, int m) { return (m + p - 1) * 3.0; }
static int strict_peak(int p, int m, int w) { return p - w; }   /* rank r holds p − r micro-batches at most */
static double h1_latency(int p, int m) { return 3.0 * m + (p - 1) * (1 + 1 - 1); }
static int h1_peak(int p, int m, int w) { return p; }           /* 1F1B's peak, p, on every rank */
static double h2_latency(int p, int m) { return 3.0 * m + (p - 1) * 1; }
static int h2_peak(int p, int m, int w) { return imin(2 * p - 1 - w, m); }   /* 2p − 1 − r, or every micro-batch */

static const struct {
    const char *scheme;
    bool split;
    double (*latency)(int p, int m);
    int (*peak)(int p, int m, int w);
} ONE_CHUNK[] = {
    {"1f1b-strict", false, strict_latency, strict_peak},
    {"zb-h1", true, h1_latency, h1_peak},
    {"zb-h2", true, h2_latency, h2_peak},
};

Test(pipelines, closed_forms_at_unit_costs)
{
    for (int p = 2; p <= 8; p++)
        for (int m = p; m <= 4 * p; m++) {
            for (size_t k = 0; k < sizeof ONE_CHUNK / sizeof ONE_CHUNK[0]; k++) {
                const char *name = ONE_CHUNK[k].scheme;
                pp_run x = pp_simulate(name, p, m, 0, 1, 1, 1, 1);
                cr_assert_eq(x.r.latency, ONE_CHUNK[k].latency(p, m), "%s p=%d m=%d: %g", name, p, m, x.r.latency);
                cr_assert_eq(x.s->split_backward, ONE_CHUNK[k].split, "%s: split %d", name, x.s->split_backward);
                for (int w = 0; w < p; w++)
                    cr_assert_eq(x.r.worker[w].peak_act, ONE_CHUNK[k].peak(p, m, w), "%s p=%d m=%d w%d: peak %d", name,
                                 p, m, w, x.r.worker[w].peak_act);
                check_chunk_level(&x, 1, 1, 1, 1);
                pp_free(&x);
            }
            for (int v = 1; v <= 3; v++) {
                double u = 1.0 / v, want = 3.0 * m + (p - 1) * 3.0 / v;
                pp_run x = pp_simulate("looped-bfs", p, m, v, 1, u, u, u);
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
    /* ZB-H1's rule for any costs: m(F + I + W) + (p − 1)·max(F + I − W, F, I), which is
     * (p − 1)(F + I − W) for W ≤ min(F, I) and (p − 1)·max(F, I) for W ≥ I. */
    const double h1[][3] = {{1, 2, 1}, {2, 1, 1}, {2, 2, 1}, {3, 2, 1}, {1, 1, 2}, {2, 1, 3}, {0.5, 2, 1}, {1, 2, 3}};
    for (int p = 2; p <= 6; p++)
        for (int m = p; m <= 3 * p; m++) {
            for (size_t k = 0; k < sizeof h1 / sizeof h1[0]; k++) {
                double F = h1[k][0], I = h1[k][1], W = h1[k][2];
                pp_run x = pp_simulate("zb-h1", p, m, 0, 1, F, I, W);
                double bub = fmax(F + I - W, fmax(F, I));
                cr_assert_eq(x.r.latency, m * (F + I + W) + (p - 1) * bub, "zb-h1 (%g,%g,%g) p=%d m=%d: %g", F, I, W,
                             p, m, x.r.latency);
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
    const char *lists[] = {"1f1b-strict", "zb-h1", "zb-h2", "interleaved-1f1b", "looped-bfs", "interleaved-zb", "1f1b-v"};
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

/* The rows of a list as CSV text ("0F0,0F1,...\n1F0,..."), in buf. */
static const char *list_csv(const sp_actions *a, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = 0;
    for (int r = 0; r < a->ranks; r++) {
        for (int i = a->off[r]; i < a->off[r + 1]; i++) {
            char t[32];
            n += (size_t)snprintf(buf + n, len - n, "%s%s", i > a->off[r] ? "," : "", sp_action_str(a->act[i], t));
        }
        n += (size_t)snprintf(buf + n, len - n, "\n");
    }
    return buf;
}

/* Interleaving takes any m: p4 m6 (one round of 6) is PyTorch's ScheduleInterleaved1F1B
 * and ScheduleInterleavedZeroBubble list action for action (their pipeline_order without
 * the idle slots), and for every p ≤ 8, m ≤ 5p, v ≤ 4 — rounds of unequal size where
 * PyTorch refuses m — the lists are complete and run to the end; so do 1f1b-v's. */
Test(pipelines, interleaving_takes_any_m)
{
    static const char *TORCH_1F1B =
        "0F0,0F1,0F2,0F3,0F4,0F5,4F0,4F1,4F2,4F3,4F4,4F5,4B0,4B1,4B2,4B3,4B4,4B5,0B0,0B1,0B2,0B3,0B4,0B5\n"
        "1F0,1F1,1F2,1F3,1F4,1F5,5F0,5F1,5F2,5F3,5F4,5B0,5F5,5B1,5B2,5B3,5B4,5B5,1B0,1B1,1B2,1B3,1B4,1B5\n"
        "2F0,2F1,2F2,2F3,2F4,2F5,6F0,6F1,6F2,6B0,6F3,6B1,6F4,6B2,6F5,6B3,6B4,6B5,2B0,2B1,2B2,2B3,2B4,2B5\n"
        "3F0,3F1,3F2,3F3,3F4,3F5,7F0,7B0,7F1,7B1,7F2,7B2,7F3,7B3,7F4,7B4,7F5,7B5,3B0,3B1,3B2,3B3,3B4,3B5\n";
    static const char *TORCH_ZB =
        "0F0,0F1,0F2,0F3,0F4,0F5,4F0,4F1,4F2,4F3,4I0,4W0,4F4,4I1,4W1,4F5,4I2,4W2,4I3,4W3,4I4,4W4,4I5,4W5,0I0,0W0,0I1,"
        "0W1,0I2,0W2,0I3,0W3,0I4,0W4,0I5,0W5\n"
        "1F0,1F1,1F2,1F3,1F4,1F5,5F0,5F1,5F2,5I0,5F3,5I1,5W0,5F4,5I2,5W1,5F5,5I3,5W2,5I4,5W3,5I5,5W4,1I0,5W5,1I1,1W0,"
        "1I2,1W1,1I3,1W2,1I4,1W3,1I5,1W4,1W5\n"
        "2F0,2F1,2F2,2F3,2F4,2F5,6F0,6F1,6I0,6F2,6I1,6F3,6I2,6W0,6F4,6I3,6W1,6F5,6I4,6W2,6I5,6W3,2I0,6W4,2I1,6W5,2I2,"
        "2W0,2I3,2W1,2I4,2W2,2I5,2W3,2W4,2W5\n"
        "3F0,3F1,3F2,3F3,3F4,3F5,7F0,7I0,7F1,7I1,7F2,7I2,7F3,7I3,7W0,7F4,7I4,7W1,7F5,7I5,7W2,3I0,7W3,3I1,7W4,3I2,7W5,"
        "3I3,3W0,3I4,3W1,3I5,3W2,3W3,3W4,3W5\n";
    static char buf[1 << 16];
    const struct {
        const char *scheme, *want;
    } torch[] = {{"interleaved-1f1b", TORCH_1F1B}, {"interleaved-zb", TORCH_ZB}};
    for (size_t k = 0; k < 2; k++) {
        sp_actions *a = NULL;
        sp_pp_params pp = {.ranks = 4, .micro = 6, .chunks_per_rank = 2};
        cr_assert_eq(sp_pp_find(torch[k].scheme)->generate(&pp, &a), SP_OK, "%s", sp_last_error());
        cr_assert_str_eq(list_csv(a, buf, sizeof buf), torch[k].want, "%s p4 m6", torch[k].scheme);
        sp_actions_free(a);
    }
    const char *names[] = {"interleaved-1f1b", "interleaved-zb", "1f1b-v"};
    for (int p = 1; p <= 8; p++)
        for (int m = 1; m <= 5 * p; m++)
            for (int v = 1; v <= 4; v++)
                for (size_t k = 0; k < 3; k++) {
                    if (k == 2 && v != 2) continue;   /* a V holds two chunks */
                    sp_actions *a = NULL;
                    sp_pp_params pp = {.ranks = p, .micro = m, .chunks_per_rank = v};
                    cr_assert_eq(sp_pp_find(names[k])->generate(&pp, &a), SP_OK, "%s p%d m%d v%d: %s", names[k], p, m,
                                 v, sp_last_error());
                    cr_assert_eq(sp_actions_check(a), SP_OK, "%s p%d m%d v%d: %s", names[k], p, m, v, sp_last_error());
                    cr_assert_eq(sp_actions_simulate(a, NULL, NULL), SP_OK, "%s p%d m%d v%d: %s", names[k], p, m, v,
                                 sp_last_error());
                    sp_actions_free(a);
                }
}

/* interleaved-zb at unit costs, one layer per chunk: at least p − 1 shorter than
 * interleaved-1f1b on the same placement and rounds (p = 2..8, v = 1..3, m = p..4p, every m),
 * and min((v − 1)·g + p, v·m) chunk activations on every rank (g the first round's size,
 * ZB1P's "1F1B's memory"), no more than interleaved-1f1b's rank 0. */
Test(pipelines, interleaved_zb_is_shorter_at_no_higher_peak)
{
    for (int p = 2; p <= 8; p++)
        for (int v = 1; v <= 3; v++)
            for (int m = p; m <= 4 * p; m++) {
                pp_run z = pp_simulate("interleaved-zb", p, m, v, 1, 1, 1, 1),
                       x = pp_simulate("interleaved-1f1b", p, m, v, 1, 1, 1, 1);
                cr_assert_leq(z.r.latency, x.r.latency - (p - 1), "interleaved-zb p=%d v=%d m=%d: %g, interleaved %g", p,
                              v, m, z.r.latency, x.r.latency);
                int rounds = m / p, g = m / rounds + (m % rounds > 0), want = imin((v - 1) * g + p, v * m);
                for (int w = 0; w < p; w++) {
                    cr_assert_eq(z.r.worker[w].peak_act, want, "interleaved-zb p=%d v=%d m=%d w%d: peak %d, want %d", p, v,
                                 m, w, z.r.worker[w].peak_act, want);
                    cr_assert_leq(want, x.r.worker[0].peak_act);
                }
                check_chunk_level(&z, 1, 1, 1, 1);
                pp_free(&z);
                pp_free(&x);
            }
}

/* 1f1b-v with chunk costs F and B = I + W: for m ≥ p, 2m(F + B) + 2(p − 1)·max(F, B) —
 * interleaved-1f1b's v = 2 latency when F = B, for every such m where interleaving has it
 * only for p | m — and below p the first micro-batch's walk down and up the V, 2p(F + B),
 * plus 2(m − 1)·max(F, B); holding at most zbv's activations on every rank, 2p chunk
 * activations at most. */
Test(pipelines, one_f_one_b_v_closed_form)
{
    const double cost[][3] = {{1, 1, 1}, {1, 0.5, 0.5}, {0.5, 0.5, 0.5}, {2, 0.5, 0.5}};
    for (size_t k = 0; k < sizeof cost / sizeof cost[0]; k++)
        for (int p = 2; p <= 8; p++)
            for (int m = 1; m <= 4 * p; m++) {
                double f = cost[k][0], b = cost[k][1] + cost[k][2], mx = f > b ? f : b;
                double want = m >= p ? 2 * m * (f + b) + 2 * (p - 1) * mx : 2 * p * (f + b) + 2 * (m - 1) * mx;
                pp_run x = pp_simulate("1f1b-v", p, m, 2, 1, f, cost[k][1], cost[k][2]),
                       z = pp_simulate("zbv", p, m, 2, 1, f, cost[k][1], cost[k][2]);
                cr_assert(fabs(x.r.latency - want) < 1e-9, "1f1b-v p=%d m=%d: %g, want %g", p, m, x.r.latency, want);
                cr_assert(!x.s->split_backward, "1f1b-v runs B unsplit");
                for (int w = 0; w < p; w++)
                    cr_assert(x.r.worker[w].peak_act <= z.r.worker[w].peak_act && x.r.worker[w].peak_act <= 2 * p,
                              "1f1b-v p=%d m=%d w%d: peak %d, zbv %d", p, m, w, x.r.worker[w].peak_act,
                              z.r.worker[w].peak_act);
                check_chunk_level(&x, 1, f, cost[k][1], cost[k][2]);
                pp_free(&x);
                pp_free(&z);
            }
}

/* dualpipe (rules_dualpipe.c) at unit costs F = I = W = 1, each rank running 3m of work:
 * at p = 4 the greedy order leaves one unit of bubble, 3m + 1 for every even m ≥ 2p (25 at
 * m = 8, where DualPipe's own bubble (p/2 − 1)(F&B + B − 3W) gives 26 with F&B = F + B,
 * and DualPipeV on twice the stages 51), and every rank holds at most W stage activations
 * (the in-flight cap: W/2 of each direction per stage) — 4 at p = 4, below DualPipe's
 * p + 1. Through build/schedule, the figure of docs/SCHEDULES.md. */
Test(pipelines, dualpipe_at_unit_costs)
{
    for (int p = 2; p <= 8; p += 2)
        for (int m = 2; m <= 4 * p; m += 2) {
            sp_costs *cp = sp_costs_uniform(p, 1, 1, 1);
            sp_sched_config sc = {.stages = p, .micro = m, .split = -1};
            sp_schedule *s = sp_schedule_new(sp_scheme_find("dualpipe"), &sc, cp);
            sp_sim r;
            sp_simulate(s, cp, &r);
            cr_assert(s->split_backward, "dualpipe splits the backward by default");
            if (p == 4 && m >= 2 * p)   /* DualPipe's own condition, m ≥ 2p */
                cr_assert_float_eq(r.latency, 3 * m + 1, 1e-9, "dualpipe p=4 m=%d: %g", m, r.latency);
            cr_assert_geq(r.latency, 3 * m, "dualpipe p=%d m=%d: %g below the work of a rank", p, m, r.latency);
            for (int w = 0; w < p; w++) {
                cr_assert_leq(r.worker[w].peak_act, p, "dualpipe p=%d m=%d w%d: peak %d", p, m, w, r.worker[w].peak_act);
                if (p == 4 && m >= 2 * p) cr_assert_eq(r.worker[w].peak_act, 4, "p=4 m=%d w%d", m, w);
            }
            /* rank r runs stage r of the even micro-batches and stage p−1−r of the odd ones */
            for (int j = 0; j < s->njobs; j++) {
                sp_job jb = s->jobs[j];
                cr_assert_eq(s->compute[j], jb.micro % 2 ? p - 1 - jb.stage : jb.stage);
            }
            sp_sim_free(&r);
            sp_schedule_free(s);
            sp_costs_free(cp);
        }
    const char *u = "--fwd-cost 1 --delta-cost 1 --grad-cost 1";
    char args[256];
    snprintf(args, sizeof args, "--scheme dualpipe --stages 4 --microbatches 8 %s", u);
    cr_assert_float_eq(program_key(args, "latency"), 25, 1e-9);
    cr_assert_float_eq(program_key(args, "peak_activations_max"), 4, 1e-9);
    snprintf(args, sizeof args, "--scheme dualpipev --stages 8 --workers 4 --microbatches 8 %s", u);
    cr_assert_float_eq(program_key(args, "latency"), 51, 1e-9);
}

/* The issue's numbers from the program itself: zb-h1 27, 1f1b-strict 33 (and the greedy
 * 1f1b --split stays 30), and a list written by --actions-out and read by --scheme custom
 * gives the same latency. */

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

/* --scheme custom takes the ranks, micro-batches and stages (one per chunk) from the list:
 * --stages is not needed, and a flag that says otherwise is refused in one line naming the
 * flag, the file and what the list says; blank lines at the end are no ranks. */
static void refused_by_program(const char *args, const char *want)
{
    char cmd[1200], err[2048];
    const char *b = getenv("BUILD");
    snprintf(cmd, sizeof cmd, "%s/schedule %s --no-diagram", b ? b : "build", args);
    int rc = tu_run(cmd, NULL, 0, err, sizeof err);
    cr_assert_eq(rc, 2, "%s: exit %d: %s", cmd, rc, err);
    cr_assert(strstr(err, want), "%s: \"%s\" not in: %s", cmd, want, err);
    cr_assert(!strchr(err, '\n') || strchr(err, '\n') == err + strlen(err) - 1, "%s: one line: %s", cmd, err);
}

Test(pipelines, custom_takes_its_shape_from_the_list)
{
    char csv[600], args[1024];
    snprintf(csv, sizeof csv, "%s/zbv.csv", tu_tmpdir());
    snprintf(args, sizeof args, "--scheme zbv --stages 8 --microbatches 8 --actions-out %s", csv);
    double want = program_latency(args);
    snprintf(args, sizeof args, "--scheme custom --actions %s", csv);   /* 8 chunks: no --stages */
    cr_assert_eq(program_latency(args), want);
    cr_assert_eq(program_key(args, "workers"), 4);
    snprintf(args, sizeof args, "--scheme custom --actions %s --microbatches 8 --workers 4 --stages 16", csv);
    cr_assert_eq(program_key(args, "workers"), 4);
    snprintf(args, sizeof args, "--scheme custom --actions %s --microbatches 4", csv);
    refused_by_program(args, "--microbatches 4 but");
    refused_by_program(args, "names 8 micro-batches");
    snprintf(args, sizeof args, "--scheme custom --actions %s --workers 3", csv);
    refused_by_program(args, "--workers 3 but");
    snprintf(args, sizeof args, "--scheme custom --actions %s --stages 4", csv);
    refused_by_program(args, "--stages 4 but");
    /* The issue's two trailing blank lines: 4 workers, utilisation 0.727 (not 6 and 0.48). */
    snprintf(csv, sizeof csv, "%s/h1.csv", tu_tmpdir());
    snprintf(args, sizeof args, "--scheme 1f1b-strict --stages 4 --microbatches 8 --actions-out %s", csv);
    double util = program_key(args, "utilization");
    FILE *f = fopen(csv, "a");
    fputs("\n\n", f);
    fclose(f);
    snprintf(args, sizeof args, "--scheme custom --actions %s", csv);
    cr_assert_eq(program_key(args, "workers"), 4);
    cr_assert_eq(program_key(args, "utilization"), util);
}

/* ---- zb-auto's --mem-limit in bytes --------------------------------------------------- */

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

/* zb-auto weighs --transfer-cost in its search: with transfers its list is never longer,
 * in the simulation with those transfers, than the list it builds without them; on this
 * configuration strictly shorter (53 against 54), so the cost really reaches the search. */
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

/* ---- against the reference schedulers ---------------------------------------------------
 *
 * docs/schedule-references.csv holds, case by case, the makespan and the peak of the list
 * each reference scheduler builds (zb.py, zbv.py, zbv_greedy.py of the zero-bubble papers'
 * code; the file names the commit and the settings): p ∈ {4, 8}, m ∈ {8, 16, 32}, unit
 * costs and F = 1, I = 1.2, W = 0.8, transfer 0 and 0.5. The scheme on each row must be at
 * least as short at no higher peak. */
Test(pipelines, generators_match_or_beat_the_references, .timeout = 300)
{
    FILE *f = fopen("docs/schedule-references.csv", "r");
    cr_assert_not_null(f, "docs/schedule-references.csv");
    char line[512];
    int rows = 0, header = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        if (!header++) continue;
        char scheme[32], ref[64];
        int p, m;
        double lim, fc, ic, wc, tc, want, peak;
        cr_assert_eq(sscanf(line, "%31[^,],%lf,%d,%d,%lf,%lf,%lf,%lf,%lf,%lf,%63[^,]", scheme, &lim, &p, &m, &fc, &ic,
                            &wc, &tc, &want, &peak, ref), 11, "bad row: %s", line);
        const sp_pp_generator *g = sp_pp_find(scheme);
        cr_assert_not_null(g, "no scheme %s", scheme);
        int C = strcmp(scheme, "zbv") && strcmp(scheme, "v-half") && strcmp(scheme, "v-min") ? p : 2 * p;
        double fv[16], iv[16], wv[16];
        for (int c = 0; c < C; c++) fv[c] = fc, iv[c] = ic, wv[c] = wc;
        sp_chunk_costs k = {C, fv, iv, wv, NULL, tc};
        sp_pp_params pp = {.ranks = p, .micro = m, .costs = &k, .mem_limit = lim};
        sp_actions *a = NULL;
        cr_assert_eq(g->generate(&pp, &a), SP_OK, "%s: %s", scheme, sp_last_error());
        sp_actions_sim s;
        cr_assert_eq(sp_actions_simulate(a, &k, &s), SP_OK, "%s", sp_last_error());
        double most = 0;
        for (int r = 0; r < p; r++) most = fmax(most, s.peak_act[r]);
        cr_assert(s.latency <= want + 1e-9 && most <= peak + 1e-9,
                  "%s p=%d m=%d F=%g I=%g W=%g transfer %g: %g at peak %g against %s's %g at peak %g", scheme, p, m,
                  fc, ic, wc, tc, s.latency, most, ref, want, peak);
        sp_actions_sim_free(&s);
        sp_actions_free(a);
        rows++;
    }
    fclose(f);
    cr_assert_eq(rows, 168, "docs/schedule-references.csv: %d cases (expected 168)", rows);
}

/* ---- zb-auto on the V placement (--chunks 2) ---------------------------------------------
 *
 * Given the peak of zbv, 1f1b-v, v-half or v-min as its --mem-limit, zb-auto --chunks 2
 * is at least as short at no higher peak (p ∈ {4, 8}, m < p and m ≥ p, unit costs and
 * F = 1, I = 1.2, W = 0.8, transfer 0 and 0.5); build/schedule takes --chunks 2. */

/* The latency and peak (chunk activations, the most of any rank) of scheme's list. */
static sp_actions *v_list(const char *scheme, int p, int m, double lim, const sp_chunk_costs *k, double *lat,
                          double *peak)
{
    sp_pp_params pp = {.ranks = p, .micro = m, .chunks_per_rank = 2, .costs = k, .mem_limit = lim};
    sp_actions *a = NULL;
    cr_assert_eq(sp_pp_find(scheme)->generate(&pp, &a), SP_OK, "%s p=%d m=%d: %s", scheme, p, m, sp_last_error());
    cr_assert_eq(a->chunks, 2 * p, "%s: %d chunks (expected the V's %d)", scheme, a->chunks, 2 * p);
    sp_actions_sim s;
    cr_assert_eq(sp_actions_simulate(a, k, &s), SP_OK, "%s", sp_last_error());
    *peak = 0;
    for (int r = 0; r < p; r++) *peak = fmax(*peak, s.peak_act[r]);
    *lat = s.latency;
    sp_actions_sim_free(&s);
    return a;
}

Test(pipelines, zb_auto_v_placement_is_never_longer_than_the_v_schemes, .timeout = 300)
{
    static const char *const vs[] = {"zbv", "1f1b-v", "v-half", "v-min"};
    static const int ps[] = {4, 8}, ms[] = {3, 8, 16};
    static const double costs[2][3] = {{1, 1, 1}, {1, 1.2, 0.8}};
    int cases = 0;
    for (int pi = 0; pi < 2; pi++)
        for (int mi = 0; mi < 3; mi++)
            for (int ci = 0; ci < 2; ci++)
                for (int ti = 0; ti < 2; ti++)
                    for (int si = 0; si < 4; si++) {
                        int p = ps[pi], m = ms[mi], C = 2 * p;
                        double fv[16], iv[16], wv[16];
                        for (int c = 0; c < C; c++) fv[c] = costs[ci][0], iv[c] = costs[ci][1], wv[c] = costs[ci][2];
                        sp_chunk_costs k = {C, fv, iv, wv, NULL, 0.5 * ti};
                        sp_pp_params probe = {.ranks = p, .micro = m, .chunks_per_rank = 2, .costs = &k};
                        sp_actions *a = NULL;
                        if (sp_pp_find(vs[si])->generate(&probe, &a) != SP_OK) {   /* dualpipev-like limits on m */
                            sp_clear_error();
                            continue;
                        }
                        sp_actions_free(a);
                        double lat, peak, alat, apeak;
                        sp_actions_free(v_list(vs[si], p, m, 0, &k, &lat, &peak));
                        sp_actions_free(v_list("zb-auto", p, m, peak, &k, &alat, &apeak));
                        cr_expect(alat <= lat + 1e-9 && apeak <= peak + 1e-9,
                                  "p=%d m=%d F/I/W %g/%g/%g transfer %g: zb-auto --chunks 2 --mem-limit %g: %g at peak "
                                  "%g against %s's %g",
                                  p, m, costs[ci][0], costs[ci][1], costs[ci][2], 0.5 * ti, peak, alat, apeak, vs[si],
                                  lat);
                        cases++;
                    }
    cr_assert_geq(cases, 90, "%d cases", cases);
    /* m < p at a tight limit, and through build/schedule */
    double fv[16], iv[16], wv[16];
    for (int c = 0; c < 16; c++) fv[c] = iv[c] = wv[c] = 1;
    sp_chunk_costs k = {16, fv, iv, wv, NULL, 0};
    double lat, peak;
    sp_actions_free(v_list("zb-auto", 8, 4, 2, &k, &lat, &peak));
    cr_expect(peak <= 2 + 1e-9 && lat >= 6 * 4 + 8 - 1 - 1e-9, "p=8 m=4 --mem-limit 2: %g at peak %g", lat, peak);
    static char cmd[512], out[1 << 14], err[1024];
    snprintf(cmd, sizeof cmd, "%s --scheme zb-auto --chunks 2 --mem-limit 6 --stages 8 --workers 4 --microbatches 8 "
             "--fwd-cost 1 --delta-cost 1 --grad-cost 1 --no-diagram", tu_bin_path("schedule"));
    cr_assert_eq(tu_run(cmd, out, sizeof out, err, sizeof err), 0, "%s: %s", cmd, err);
    cr_expect(strstr(out, "\"latency\":53,") && strstr(out, "\"peak_activations_max\":6,"),
              "zb-auto --chunks 2 --mem-limit 6 at p=4 m=8 (v-half's 53 at 6): %s", out);
}
