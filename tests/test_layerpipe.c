/* test_layerpipe.c — LayerPipe's Algorithm 1 against the paper's sample network, the
 * contiguous (PipeDream) partition, and the profile CSV reader.
 *
 * [L] Unnikrishnan & Parhi, "LayerPipe", §IV-B: four convolution layers (Table I), their
 * FP / BP G / BP δ times in cycles (Table II) and the three-processor balance (Table III):
 *
 *     processor                  1          2          3
 *     PipeDream              4.35e7     3.07e7     2.23e7
 *     LayerPipe assigned     3.22e7     2.09e7     2.23e7
 *     LayerPipe borrowed     0          1.13e7     9.86e6
 *     LayerPipe total        3.22e7     3.22e7     3.22e7
 *
 * The paper prints three significant digits of inputs and outputs, so the numbers agree
 * to 0.5 %. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "schedulers/plan/schedule.h"
#include "tests/testutil.h"

/* Table II: FP, BP G, BP δ per layer (cycles). */
static const double TABLE2[4][3] = {
    {1.20e6, 2.16e6, 4.01e7},
    {5.02e6, 5.63e6, 2.01e7},
    {1.81e6, 2.11e6, 7.23e6},
    {3.63e6, 3.92e6, 3.63e6},
};

static sp_costs *sample_network(void)
{
    sp_costs *c = sp_costs_uniform(4, 0, 0, 0);
    for (int l = 0; l < 4; l++) {
        c->fwd[l] = TABLE2[l][0];
        c->grad[l] = TABLE2[l][1];
        c->delta[l] = TABLE2[l][2];
        snprintf(c->name[l], SP_STAGE_NAME, "conv%d", l + 1);
    }
    return c;
}

static void assert_close(double got, double paper, const char *what)
{
    cr_assert(fabs(got - paper) <= 0.005 * fabs(paper), "%s: %.4g, paper %.3g", what, got, paper);
}

Test(layerpipe, table3_sample_network)
{
    sp_costs *c = sample_network();
    sp_layerpipe lp;
    sp_layerpipe_partition(c, 3, 1.02, &lp);
    static const double pipedream[3] = {4.35e7, 3.07e7, 2.23e7};
    static const double assigned[3] = {3.22e7, 2.09e7, 2.23e7};
    static const double borrowed[3] = {0, 1.13e7, 9.86e6};
    for (int p = 0; p < 3; p++) {
        char what[64];
        snprintf(what, sizeof what, "processor %d PipeDream", p + 1);
        assert_close(lp.contig_load[p], pipedream[p], what);
        snprintf(what, sizeof what, "processor %d assigned", p + 1);
        assert_close(lp.assigned[p], assigned[p], what);
        snprintf(what, sizeof what, "processor %d borrowed", p + 1);
        if (borrowed[p] == 0)
            cr_assert_float_eq(lp.borrowed[p], 0, 1e-9, "processor 1 borrows nothing");
        else
            assert_close(lp.borrowed[p], borrowed[p], what);
        snprintf(what, sizeof what, "processor %d total", p + 1);
        assert_close(lp.total[p], 3.22e7, what);
    }
    cr_assert_eq(lp.relaxations, 0, "Tp = Ttot / Np fits without relaxing");
    cr_assert_eq(lp.used, 3);
    /* "In PipeDream, layers 1 and 2 are mapped to their own processor, while layers 3
     * and 4 are assigned to the third processor." */
    static const int pd_owner[4] = {0, 1, 2, 2};
    for (int l = 0; l < 4; l++) cr_assert_eq(lp.contig_owner[l], pd_owner[l], "layer %d", l + 1);
    /* "a 26% improvement in the system throughput (3.22×10^7 versus 4.35×10^7)" */
    cr_assert(fabs((1 - lp.bottleneck / lp.contig_bottleneck) - 0.26) < 0.005);
    sp_layerpipe_free(&lp);
    sp_costs_free(c);
}

/* Where the work went: layer 1's δ is split, δ″ moves to processor 2; layer 2's δ″ moves
 * to processor 3, which owns layers 3 and 4 whole. Every δ′ + δ″ = δ and nothing is
 * lost: the totals add up to Ttot. */
Test(layerpipe, delta_split_conserves_work)
{
    sp_costs *c = sample_network();
    sp_layerpipe lp;
    sp_layerpipe_partition(c, 3, 1.02, &lp);
    static const int owner[4] = {0, 1, 2, 2};
    static const int moved_to[4] = {1, 2, -1, -1};
    double ttot = 0, sum = 0;
    for (int l = 0; l < 4; l++) {
        cr_assert_eq(lp.owner[l], owner[l], "layer %d on %d", l + 1, lp.owner[l] + 1);
        cr_assert_eq(lp.moved_to[l], moved_to[l], "layer %d delta'' to %d", l + 1, lp.moved_to[l] + 1);
        cr_assert_float_eq(lp.delta_keep[l] + lp.delta_moved[l], c->delta[l], 1e-3);
        cr_assert_geq(lp.delta_keep[l], 0);
        cr_assert_geq(lp.delta_moved[l], 0);
        ttot += c->fwd[l] + c->grad[l] + c->delta[l];
    }
    for (int p = 0; p < 3; p++) sum += lp.total[p];
    cr_assert_float_eq(sum, ttot, 1e-3);
    cr_assert_float_eq(lp.target, ttot / 3, 1e-3);
    sp_layerpipe_free(&lp);
    sp_costs_free(c);
}

/* With a δ that may not move, the layer's whole δ counts as fixed work. */
Test(layerpipe, immovable_delta_stays)
{
    sp_costs *c = sample_network();
    c->movable[0] = false;
    sp_layerpipe lp;
    sp_layerpipe_partition(c, 3, 1.02, &lp);
    cr_assert_float_eq(lp.delta_moved[0], 0, 1e-9);
    cr_assert_gt(lp.relaxations, 0, "layer 1 alone (4.35e7) exceeds Ttot/3, so Tp must relax");
    cr_assert_geq(lp.target + 1e-6, 4.346e7);
    cr_assert_leq(lp.used, 3);
    for (int p = 0; p < 3; p++) cr_assert_leq(lp.total[p], lp.target * (1 + 1e-9));
    sp_layerpipe_free(&lp);
    sp_costs_free(c);
}

/* One processor takes everything; more processors than layers still terminates. */
Test(layerpipe, edge_processor_counts)
{
    sp_costs *c = sample_network();
    sp_layerpipe lp;
    sp_layerpipe_partition(c, 1, 1.02, &lp);
    cr_assert_eq(lp.used, 1);
    cr_assert_float_eq(lp.borrowed[0], 0, 1e-9);
    sp_layerpipe_free(&lp);
    sp_layerpipe_partition(c, 8, 1.02, &lp);
    cr_assert_leq(lp.used, 8);
    double sum = 0;
    for (int p = 0; p < 8; p++) sum += lp.total[p];
    cr_assert_float_eq(sum, 9.654e7, 1e3);
    sp_layerpipe_free(&lp);
    sp_costs_free(c);
}

/* ------------------------------------------------------------------------------------ */
/* The contiguous partition is optimal: compare with every way of cutting.               */

static double brute_bottleneck(const double *load, int n, int parts)
{
    double best = INFINITY;
    for (unsigned mask = 0; mask < 1u << (n - 1); mask++) {   /* bit i: cut after item i */
        if (__builtin_popcount(mask) != parts - 1) continue;
        double block = 0, worst = 0;
        for (int i = 0; i < n; i++) {
            block += load[i];
            if (i == n - 1 || (mask >> i & 1)) {
                worst = fmax(worst, block);
                block = 0;
            }
        }
        best = fmin(best, worst);
    }
    return best;
}

Test(partition, contiguous_is_optimal)
{
    double load[9];
    int owner[9];
    for (int trial = 0; trial < 200; trial++) {
        int n = 1 + trial % 9, parts = 1 + (trial / 9) % n;
        for (int i = 0; i < n; i++) load[i] = 1 + (double)((trial * 7919 + i * 104729) % 97);
        double got = sp_partition_contiguous(load, n, parts, owner);
        cr_assert_float_eq(got, brute_bottleneck(load, n, parts), 1e-9, "n=%d parts=%d", n, parts);
        double block[9] = {0};
        for (int i = 0; i < n; i++) {
            cr_assert(i == 0 || owner[i] == owner[i - 1] || owner[i] == owner[i - 1] + 1);
            block[owner[i]] += load[i];
        }
        cr_assert_eq(owner[0], 0);
        cr_assert_eq(owner[n - 1], parts - 1, "every block non-empty");
        for (int p = 0; p < parts; p++) cr_assert_leq(block[p], got + 1e-9);
    }
}

Test(partition, equal_loads_give_equal_blocks)
{
    double load[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    int owner[8];
    cr_assert_float_eq(sp_partition_contiguous(load, 8, 4, owner), 2, 1e-12);
    for (int i = 0; i < 8; i++) cr_assert_eq(owner[i], i / 2);
}

/* ------------------------------------------------------------------------------------ */
/* Profile CSV                                                                          */

static const char *write_file(const char *name, const char *text)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tu_tmpdir(), name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

Test(profile, reads_the_papers_columns)
{
    const char *path = write_file("table2.csv", "# LayerPipe Table II (cycles)\n"
                                                "Layer, FP, BP_G, BP_delta\n"
                                                "conv1, 1.20e6, 2.16e6, 4.01e7\n"
                                                "\n"
                                                "conv2,5.02e6,5.63e6,2.01e7\r\n"
                                                "conv3,1.81e6,2.11e6,7.23e6\n"
                                                "conv4,3.63e6,3.92e6,3.63e6\n");
    sp_costs *c = sp_costs_read_csv(path);
    cr_assert_eq(c->stages, 4);
    for (int l = 0; l < 4; l++) {
        cr_assert_float_eq(c->fwd[l], TABLE2[l][0], 1e-3);
        cr_assert_float_eq(c->grad[l], TABLE2[l][1], 1e-3);
        cr_assert_float_eq(c->delta[l], TABLE2[l][2], 1e-3);
        cr_assert(c->movable[l]);
    }
    cr_assert_str_eq(c->name[1], "conv2");
    sp_costs_free(c);
}

Test(profile, round_trip)
{
    sp_costs *a = sample_network();
    a->movable[2] = false;
    a->act_bytes[3] = 4096;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    sp_costs_write_csv(f, a);
    fclose(f);
    sp_costs *b = sp_costs_read_csv(write_file("round.csv", buf));
    cr_assert_eq(b->stages, 4);
    for (int l = 0; l < 4; l++) {
        cr_assert_float_eq(b->fwd[l], a->fwd[l], 1e-3);
        cr_assert_float_eq(b->delta[l], a->delta[l], 1e-3);
        cr_assert_eq(b->movable[l], a->movable[l]);
        cr_assert_float_eq(b->act_bytes[l], a->act_bytes[l], 1e-9);
    }
    free(buf);
    sp_costs_free(a);
    sp_costs_free(b);
}

Test(profile, missing_column, .exit_code = 2, .init = tu_capture_stderr)
{
    sp_costs_read_csv(write_file("bad1.csv", "layer,fwd,bwd_grad\nl1,1,2\n"));
}

Test(profile, not_a_number, .exit_code = 2, .init = tu_capture_stderr)
{
    sp_costs_read_csv(write_file("bad2.csv", "fwd,bwd_grad,bwd_delta\n1,2,three\n"));
}

Test(profile, ragged_row, .exit_code = 2, .init = tu_capture_stderr)
{
    sp_costs_read_csv(write_file("bad3.csv", "fwd,bwd_grad,bwd_delta\n1,2,3\n1,2\n"));
}

Test(profile, missing_file, .exit_code = 2, .init = tu_capture_stderr) { sp_costs_read_csv("/nonexistent/profile.csv"); }

Test(profile, bad_processor_count, .exit_code = 2, .init = tu_capture_stderr)
{
    sp_costs *c = sample_network();
    sp_layerpipe lp;
    sp_layerpipe_partition(c, 0, 1.02, &lp);
}
