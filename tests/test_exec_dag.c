/* test_exec_dag — the executor (schedulers/exec/) on models that are not chains, under
 * mpirun -np 2 and -np 4 --oversubscribe. Skipped in a build without MPI.
 *
 * A stage is a segment of the model (sp_tape_segments: cut after each layer that every
 * path goes through), a residual block's body with its add one stage, its layers a DAG
 * of their own. tests/dag_worker.c trains the models of tests/dag_models.h (residual and
 * dense MLPs, a residual CNN; no batch norm) for 3 steps of a 32-sample batch.
 *
 * Equality. Every scheme ends with the weights of the plain single-process run (the
 * whole batch, linear BP) within 1e-4 relative: with no batch norm, a step's gradients
 * are the sum over the micro-batches, whichever ranks computed them — data parallel
 * (each rank the whole DAG), pipelines, zero-bubble schedules (a DAG stage's δ and G
 * apart) and V schedules (two chunks of segments per rank).
 *
 * Stages. The executor's stages are the simulator's (--costs-out's names and count
 * equal sp_costs_from_model's for the same model), and every rank runs the order the
 * simulator computes from those costs.
 *
 * Refusals. A pipeline that needs more stages than the model has segments, and the scan
 * across ranks (BPPSA: a chain of Jacobians) on a DAG, are refused in one line, exit 2,
 * before any work. */
#include <criterion/criterion.h>
#include "core/io/safetensors.h"
#include "schedulers/plan/schedule.h"
#include "schedulers/sim/sim.h"
#include "tests/dag_models.h"
#include "tests/mpirun.h"

/* max |a − b| / max(1, max |b|) over every tensor of two safetensors files. */
static double compare(const char *pa, const char *pb) { return tu_st_max_rel_diff(pa, pb, true, NULL, NULL); }

static int count_lines(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

#define FLAGS "--steps 3 --batch 32 --threads 1 --quiet"

/* The model's reference (one process, whole batch), then the scheme on np ranks with
 * `micro` micro-batches: the same weights within 1e-4. */
static void equal_to_reference(const char *model, const char *scheme, int np, int micro)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    static mpi_result r;
    char cmd[2048], npf[16];
    const char *ref = tu_tmp_path("ref.st"), *par = tu_tmp_path("par.st");
    snprintf(cmd, sizeof cmd, "OPENBLAS_NUM_THREADS=1 %s %s %s --save %s >/dev/null", tu_bin_path("tests/dag_worker"), model,
             FLAGS, ref);
    cr_assert_eq(system(cmd), 0, "%s: the single-process reference failed", model);
    snprintf(cmd, sizeof cmd, "%s %s " FLAGS " --parallel %s --microbatches %d --save %s", tu_bin_path("tests/dag_worker"),
             model, scheme, micro, par);
    snprintf(npf, sizeof npf, "-np %d", np);
    mpi_run("", npf, cmd, &r);
    cr_assert_eq(r.status, 0, "%s --parallel %s -np %d: status %d\n%s", model, scheme, np, r.status, r.err);
    cr_assert(strstr(r.out, "\"parallel\""), "%s --parallel %s: no summary\n%s", model, scheme, r.out);
    double d = compare(par, ref);
    cr_assert_leq(d, 1e-4, "%s --parallel %s -np %d: weights differ from one process by %.3g relative", model, scheme,
                  np, d);
    remove(ref);
    remove(par);
}

#define RES "--model res --blocks 2"      /* 7 segments */
#define RES3 "--model res --blocks 3"     /* 9 segments: 8 chunks of a V on 4 ranks */

Test(exec_dag, res_ddp, .timeout = 120) { equal_to_reference(RES, "ddp", 2, 4); }
Test(exec_dag, res_fsdp, .timeout = 120) { equal_to_reference(RES, "fsdp", 2, 4); }
Test(exec_dag, res_ddp_ooo, .timeout = 120) { equal_to_reference(RES, "ddp-ooo", 2, 4); }
Test(exec_dag, res_gpipe, .timeout = 120) { equal_to_reference(RES, "gpipe", 2, 4); }
Test(exec_dag, res_1f1b, .timeout = 120) { equal_to_reference(RES, "1f1b", 2, 4); }
Test(exec_dag, res_zb_h1, .timeout = 120) { equal_to_reference(RES, "zb-h1", 2, 4); }
Test(exec_dag, res_interleaved, .timeout = 120) { equal_to_reference(RES, "interleaved-1f1b", 2, 4); }
Test(exec_dag, res_zbv, .timeout = 120) { equal_to_reference(RES, "zbv", 2, 4); }
Test(exec_dag, res_dualpipev, .timeout = 120) { equal_to_reference(RES, "dualpipev", 2, 4); }
Test(exec_dag, res_ooo_ff, .timeout = 120) { equal_to_reference(RES, "ooo-ff", 2, 4); }
Test(exec_dag, res_zb_h2, .timeout = 120) { equal_to_reference(RES, "zb-h2", 2, 4); }
Test(exec_dag, res_v_half, .timeout = 120) { equal_to_reference(RES, "v-half", 2, 4); }
Test(exec_dag, res_lpp, .timeout = 120) { equal_to_reference(RES, "lpp", 2, 4); }
Test(exec_dag, res_layerpipe, .timeout = 120) { equal_to_reference(RES, "gpipe --partition layerpipe", 2, 4); }
Test(exec_dag, res_clip_1f1b, .timeout = 120) { equal_to_reference(RES " --clip-grad-norm 0.5", "1f1b", 2, 4); }
Test(exec_dag, res4_ddp, .timeout = 120) { equal_to_reference(RES3, "ddp", 4, 8); }
Test(exec_dag, res4_fsdp, .timeout = 120) { equal_to_reference(RES3, "fsdp", 4, 8); }
Test(exec_dag, res4_1f1b, .timeout = 120) { equal_to_reference(RES3, "1f1b", 4, 8); }
Test(exec_dag, res4_zb_h1, .timeout = 120) { equal_to_reference(RES3, "zb-h1", 4, 8); }
Test(exec_dag, res4_zbv, .timeout = 120) { equal_to_reference(RES3, "zbv", 4, 8); }
/* dense blocks (concat) and a residual CNN */
Test(exec_dag, cat_1f1b, .timeout = 120) { equal_to_reference("--model cat --blocks 2", "1f1b", 2, 4); }
Test(exec_dag, cat_zb_h1, .timeout = 120) { equal_to_reference("--model cat --blocks 2", "zb-h1", 2, 4); }
Test(exec_dag, cnn_gpipe, .timeout = 120) { equal_to_reference("--model cnn --blocks 2", "gpipe", 2, 4); }
Test(exec_dag, cnn_zbv, .timeout = 120) { equal_to_reference("--model cnn --blocks 2", "zbv", 2, 4); }
Test(exec_dag, cnn_ddp, .timeout = 120) { equal_to_reference("--model cnn --blocks 2", "ddp", 2, 4); }
/* no cut at all: the data-parallel schemes still run it (one stage) */
Test(exec_dag, nocut_ddp, .timeout = 120) { equal_to_reference("--model nocut", "ddp", 2, 4); }

/* The executor's stage table is the simulator's: --costs-out has sp_costs_from_model's
 * stages (the segments, by name), and each rank's executed order is the one the
 * simulator computes from those costs. */
Test(exec_dag, stages_are_the_simulators_segments, .timeout = 120)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    static mpi_result r;
    const char *costs = tu_tmp_path("costs.csv"), *order = tu_tmp_path("order.txt");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s " RES " " FLAGS " --parallel 1f1b --microbatches 4 --costs-out %s --exec-order %s",
             tu_bin_path("tests/dag_worker"), costs, order);
    mpi_run("", "-np 2", cmd, &r);
    cr_assert_eq(r.status, 0, "status %d\n%s", r.status, r.err);
    sp_model *m = dag_model("res", 2, 32);
    sp_costs *want = sp_costs_from_model(m, 1, (int[]){DAG_D}, 8, 1.0);
    sp_costs *got = sp_costs_read_csv(costs);
    cr_assert_eq(got->stages, want->stages, "executor: %d stages, simulator: %d segments", got->stages,
                 want->stages);
    cr_assert_eq(want->stages, 7);
    for (int s = 0; s < want->stages; s++) {
        cr_assert_str_eq(got->name[s], want->name[s], "stage %d", s);
        cr_assert_eq(got->act_bytes[s], want->act_bytes[s], "stage %d (%s): act_bytes", s, want->name[s]);
        cr_assert_eq(got->param_bytes[s], want->param_bytes[s], "stage %d (%s): param_bytes", s, want->name[s]);
    }
    /* The order under costs both sides read from one file: measured costs, printed with 6
     * digits and read back, can tie or swap two jobs where the executor's own values did
     * not (seen under ASan), so the run plans with --costs and the test with the same. */
    const char *fixed_path = tu_tmp_path("fixed.csv");
    FILE *cf = fopen(fixed_path, "w");
    cr_assert_not_null(cf);
    sp_costs_write_csv(cf, want);
    fclose(cf);
    sp_costs *fixed = sp_costs_read_csv(fixed_path);
    cr_assert_not_null(fixed, "%s", sp_last_error());
    snprintf(cmd, sizeof cmd, "%s " RES " " FLAGS " --parallel 1f1b --microbatches 4 --costs %s --exec-order %s",
             tu_bin_path("tests/dag_worker"), fixed_path, order);
    mpi_run("", "-np 2", cmd, &r);
    cr_assert_eq(r.status, 0, "status %d\n%s", r.status, r.err);
    sp_sched_config sc = {.stages = fixed->stages, .micro = 4, .workers = 2, .split = -1, .no_input_grad = true};
    sp_schedule *s = sp_schedule_new(sp_scheme_find("1f1b"), &sc, fixed);
    sp_sim sim;
    sp_simulate(s, fixed, &sim);
    FILE *f = fopen(order, "r");
    cr_assert_not_null(f, "no --exec-order file");
    static char line[65536], want_line[65536];
    for (int w = 0; w < 2; w++) {
        cr_assert_not_null(fgets(line, sizeof line, f), "order file has no line for w%d", w);
        line[strcspn(line, "\n")] = 0;
        int n = snprintf(want_line, sizeof want_line, "w%d", w);
        char lab[32];
        for (int i = sim.order_off[w]; i < sim.order_off[w + 1]; i++)
            n += snprintf(want_line + n, sizeof want_line - (size_t)n, " %s",
                          sp_job_label(s, sim.order[i], lab, sizeof lab));
        cr_assert_str_eq(line, want_line, "rank %d: executed order differs from the simulated one", w);
    }
    fclose(f);
    sp_sim_free(&sim);
    sp_schedule_free(s);
    sp_costs_free(fixed);
    sp_costs_free(got);
    sp_costs_free(want);
    sp_model_free(m);
}

/* Refused in one line, exit 2, before any work. */
static void refused(const char *np, const char *flags, const char *want)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    static mpi_result r;
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s " FLAGS " %s", tu_bin_path("tests/dag_worker"), flags);
    mpi_run("", np, cmd, &r);
    cr_assert_eq(r.status, 2, "%s: status %d, want 2\n%s", flags, r.status, r.err);
    cr_assert(strstr(r.err, want), "%s: stderr lacks '%s':\n%s", flags, want, r.err);
    cr_assert_eq(count_lines(r.err, "scanprop: "), 1, "%s: want one line:\n%s", flags, r.err);
    cr_assert(!strstr(r.out, "\"app\""), "%s: work was done: %s", flags, r.out);
}

Test(exec_dag, a_pipeline_beyond_the_cut_points_is_refused, .timeout = 120)
{
    refused("-np 2", "--model nocut --parallel gpipe",
            "2 workers for 1 stages (a pipeline needs workers <= stages: model nocut can be cut only between its 1 "
            "segments, nowhere inside fc1+4 (layers 0-4)");
    refused("-np 4", RES " --parallel interleaved-1f1b --microbatches 8",
            "8 chunks for the model's 7 segments (expected chunks <= segments: model res can be cut only between "
            "segments, nowhere inside b0 (layers 2-5) nor inside b1 (layers 7-10)");
}

Test(exec_dag, scan_over_a_dag_is_refused, .timeout = 120)
{
    refused("-np 2", RES " --parallel scan",
            "--parallel scan: model res has residual or dense connections; the scan across ranks (BPPSA) runs over a "
            "chain of per-layer Jacobians, and a DAG's backward is not one");
}
