/* test_exec — the master schedule executed on MPI ranks (schedulers/exec/exec.c), under
 * mpirun -np 2 and -np 4 --oversubscribe. Skipped in a build without MPI.
 *
 * Equality. Every scheme trains the demo MLP (4 linear layers, 7 stages) for 4 steps of
 * a 32-sample batch in 4 micro-batches and must end with the weights of
 *   (a) the plain single-process run (no --parallel, whole batch): within 1e-6
 *       relative for every scheme (different summation order: micro-batch partial sums);
 *   (b) the same scheme on ONE rank (all micro-batches accumulated in order): bitwise for
 *       the pipeline schemes (gpipe, 1f1b, ooo-ff, ooo-modulo), where each stage's
 *       gradients are summed over micro-batches in micro-batch order on one rank by
 *       construction; within 1e-6 for ddp, fsdp, lpp, fslpp and dualpipe, whose sums cross ranks
 *       (MPI's reduction order is its own). The scheme table below says which, per row.
 * LeNet does the same for ddp, fsdp, gpipe (also with --partition layerpipe), 1f1b, lpp,
 * dualpipe (also on 4 ranks).
 *
 * Order. The executed job order of every rank (--exec-order) equals the order the
 * simulator computes from the same stage costs (given with --costs: uneven, so that the
 * pipeline placement and the ties matter) — in this process, from schedulers/plan/schedule.h
 * alone. --costs-out writes the costs the run measured, readable by the simulator.
 *
 * Faults. A rank that stops answering makes the others stop with one line naming the
 * rank, the operation and the job, exit 2, within the timeout; a rank that exits
 * mid-step ends the job (mpirun) — nothing hangs. Impossible configurations are refused
 * with one line before any work.
 *
 * Overlap. With small buckets, DDP's gradient allreduce starts while the backward still
 * runs (asserted on the trace's intervals).
 *
 * Like with like. --costs-out's job costs and the JSON's "step_mean_ms" are both means
 * over the steps after the first (a slowed first step reaches neither), and on one rank
 * the prediction from those costs is at most the mean step (bench/distributed.sh). */
#include <criterion/criterion.h>
#include <math.h>
#include <limits.h>
#include <unistd.h>
#include <stb/stb_image_write.h>
#include <sys/stat.h>
#include "core/io/safetensors.h"
#include "layers/zoo.h"
#include "schedulers/plan/actions.h"
#include "schedulers/plan/schedule.h"
#include "schedulers/sim/sim.h"
#include "tests/mpirun.h"

/* max |a − b| / max(1, max |b|) over every tensor; *bitwise when all bytes agree. */
static double compare(const char *pa, const char *pb, bool *bitwise)
{
    return tu_st_max_rel_diff(pa, pb, true, bitwise, NULL);
}

#define DEMO_FLAGS "--layers 4 --steps 4 --batch 32 --threads 1 --quiet"
#define MICRO 4
#define GROUPS 2

/* ---- the schemes: one row each ------------------------------------------------------------
 *
 * Each row is one test, exec/demo_ID: the demo MLP trained under the scheme at -np 2 and
 * -np 4 (demo_run), the runner picked by the row's kind:
 *   JOBS  the master schedule (schedule.h): --layers 4, against one rank and the order
 *         simulated from --costs;
 *   LIST  a per-rank action list of gen_basic.c: --layers 5, bitwise against one rank and
 *         the list's simulated order;
 *   V     an action list of gen_v.c or gen_auto.c: --layers 5 and 2W micro-batches, the
 *         order of the list generated from the --costs (vl_run; no one-rank run).
 * The same rows drive the LeNet runs (lenet column), predicted_messages_match_the_executor
 * and measured_peak_activations_equal_the_simulated_ones, so a new scheme is one row.
 * Columns:
 *   bitwise    JOBS: bitwise equal to the scheme on one rank (each stage's gradients summed
 *              over micro-batches in order on one rank), else within 1e-6 (sums that
 *              cross ranks); LIST rows are always bitwise, V rows have no one-rank run
 *   costs      JOBS: the run is given --costs (ddp refuses it: its order depends on none)
 *   groups     --groups GROUPS (lpp, fslpp); the simulator's groups likewise
 *   mem_limit  --mem-limit N in micro-batches of a chunk per rank (zb-auto), 0: none
 *   chunks     --chunks N (zb-auto on the V: 2), 0: the scheme's; the loops that run every
 *              scheme at its defaults skip such rows (the scheme has its own row)
 *   lenet      LeNet runs the scheme too (lenet_*_match_single_process) */
typedef enum { JOBS, LIST, V } run_kind;

typedef struct scheme_row {
    const char *name;
    run_kind kind;
    bool bitwise, costs, groups;
    int mem_limit, chunks;
    bool lenet;
} scheme_row;

/* zb-auto's --mem-limit: 2 micro-batches of a chunk per rank, below 1F1B's p on rank 0 at -np 4 */
#define VL_LIMIT 2
/* zb-auto --chunks 2's: 3 chunk activations per rank, below zbv's 2p at -np 2 and 4 */
#define VL_LIMIT_V 3

/*  X(id,               name,               kind, bitwise, costs, groups, mem_limit, chunks, lenet) */
#define SCHEMES(X)                                                                      \
    X(ddp,              "ddp",              JOBS, false,   false, false,  0,        0,      true)  \
    X(fsdp,             "fsdp",             JOBS, false,   true,  false,  0,        0,      true)  \
    X(gpipe,            "gpipe",            JOBS, true,    true,  false,  0,        0,      true)  \
    X(1f1b,             "1f1b",             JOBS, true,    true,  false,  0,        0,      true)  \
    X(lpp,              "lpp",              JOBS, false,   true,  true,   0,        0,      true)  \
    X(fslpp,            "fslpp",            JOBS, false,   true,  true,   0,        0,      false) \
    X(ooo_ff,           "ooo-ff",           JOBS, true,    true,  false,  0,        0,      false) \
    X(ooo_modulo,       "ooo-modulo",       JOBS, true,    true,  false,  0,        0,      false) \
    X(dualpipe,         "dualpipe",         JOBS, false,   true,  false,  0,        0,      true)  \
    X(1f1b_strict,      "1f1b-strict",      LIST, true,    true,  false,  0,        0,      true)  \
    X(zb_h1,            "zb-h1",            LIST, true,    true,  false,  0,        0,      true)  \
    X(zb_h2,            "zb-h2",            LIST, true,    true,  false,  0,        0,      true)  \
    X(interleaved_1f1b, "interleaved-1f1b", LIST, true,    true,  false,  0,        0,      true)  \
    X(looped_bfs,       "looped-bfs",       LIST, true,    true,  false,  0,        0,      true)  \
    X(interleaved_zb,   "interleaved-zb",   LIST, true,    true,  false,  0,        0,      true)  \
    X(1f1b_v,           "1f1b-v",           V,    false,   true,  false,  0,        0,      true)  \
    X(zbv,              "zbv",              V,    false,   true,  false,  0,        0,      true)  \
    X(v_half,           "v-half",           V,    false,   true,  false,  0,        0,      true)  \
    X(v_min,            "v-min",            V,    false,   true,  false,  0,        0,      true)  \
    X(dualpipev,        "dualpipev",        V,    false,   true,  false,  0,        0,      true)  \
    X(zb_auto_mem_limit, "zb-auto",         V,    false,   true,  false,  VL_LIMIT, 0,      true)  \
    X(zb_auto_v,        "zb-auto",          V,    false,   true,  false,  VL_LIMIT_V, 2,    true)

#define SCHEME_ROW(id, name, kind, bitwise, costs, groups, mem_limit, chunks, lenet) \
    {name, kind, bitwise, costs, groups, mem_limit, chunks, lenet},
#define SCHEME_ID(id, ...) ROW_##id,
enum { SCHEMES(SCHEME_ID) NROWS };
static const scheme_row schemes[] = {SCHEMES(SCHEME_ROW)};
#define NSCHEMES ((int)(sizeof schemes / sizeof schemes[0]))

/* The row of a scheme, or NULL (ddp-ooo, custom and scan have none). */
static const scheme_row *scheme_find(const char *name)
{
    for (int i = 0; i < NSCHEMES; i++)
        if (!strcmp(schemes[i].name, name)) return &schemes[i];
    return NULL;
}

static void demo_run(const scheme_row *row);

#define DEMO_TEST(id, name, ...) \
    Test(exec, demo_##id, .timeout = 300) { demo_run(&schemes[ROW_##id]); }
SCHEMES(DEMO_TEST)

/* Scheme flags beyond --parallel and --microbatches: --groups, --mem-limit. */
static const char *scheme_flags(const scheme_row *row)
{
    static char f[4][64];
    static int k;
    k = (k + 1) % 4;
    f[k][0] = 0;
    if (row && row->groups) snprintf(f[k], sizeof f[k], "--groups %d", GROUPS);
    if (row && row->mem_limit) snprintf(f[k], sizeof f[k], "--mem-limit %d", row->mem_limit);
    if (row && row->chunks) {
        size_t n = strlen(f[k]);
        snprintf(f[k] + n, sizeof f[k] - n, "%s--chunks %d", n ? " " : "", row->chunks);
    }
    return f[k];
}

/* Line w of the --exec-order file equals rank w's simulated order of s, for every w < W,
 * and the file has no more lines. */
static void check_order_lines(const char *what, sp_schedule *s, const sp_sim *sim, int W, const char *order_path)
{
    FILE *f = fopen(order_path, "r");
    cr_assert_not_null(f, "%s: no --exec-order file", what);
    static char line[65536], want[65536];
    for (int w = 0; w < W; w++) {
        cr_assert_not_null(fgets(line, sizeof line, f), "%s: order file has no line for w%d", what, w);
        line[strcspn(line, "\n")] = 0;
        int n = snprintf(want, sizeof want, "w%d", w);
        char lab[32];
        for (int i = sim->order_off[w]; i < sim->order_off[w + 1]; i++)
            n += snprintf(want + n, sizeof want - (size_t)n, " %s", sp_job_label(s, sim->order[i], lab, sizeof lab));
        cr_assert_str_eq(line, want, "%s: rank %d's executed order differs from the simulated one", what, w);
    }
    cr_assert_null(fgets(line, sizeof line, f), "%s: order file has more than %d ranks", what, W);
    fclose(f);
}

/* The executed order of every rank equals the simulator's, from the same costs. */
static void check_order_k(const char *scheme, int W, int micro, int first_k, const char *order_path,
                          const char *costs_path)
{
    sp_costs *c = sp_costs_read_csv(costs_path);
    sp_sched_config sc = {.stages = c->stages, .micro = micro, .workers = W, .split = -1, .no_input_grad = true,
                          .first_k = first_k};
    const scheme_row *row = scheme_find(scheme);
    if (row && row->groups) sc.groups = GROUPS, sc.per_group = W / GROUPS;
    sp_schedule *s = sp_schedule_new(sp_scheme_find(scheme), &sc, c);
    sp_sim sim;
    sp_simulate(s, c, &sim);
    char what[64];
    snprintf(what, sizeof what, "%s -np %d", scheme, W);
    check_order_lines(what, s, &sim, W, order_path);
    sp_sim_free(&sim);
    sp_schedule_free(s);
    sp_costs_free(c);
    remove(order_path);
}

static void check_order(const char *scheme, int W, const char *order_path, const char *costs_path)
{
    check_order_k(scheme, W, MICRO, 0, order_path, costs_path);
}

/* Uneven costs of the demo's first `stages` stages (fc1 tanh fc2 tanh ...), µs, in a file. */
static const char *stage_costs(const char *name, int stages)
{
    const char *path = tu_tmp_path(name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "layer,fwd,bwd_grad,bwd_delta\n");
    const double fwd[9] = {40, 5, 90, 7, 60, 3, 20, 4, 30};
    cr_assert_leq(stages, 9);
    for (int s = 0; s < stages; s++) fprintf(f, "l%d,%g,%g,%g\n", s, fwd[s], 0.9 * fwd[s], s ? 1.1 * fwd[s] : 0);
    fclose(f);
    return path;
}

/* The 7 stages of DEMO_FLAGS (--layers 4). */
static const char *plan_costs(void)
{
    return stage_costs("plan.csv", 7);
}

#define LIST_FLAGS "--layers 5 --steps 3 --batch 32 --threads 1 --quiet"

/* The 9 stages of LIST_FLAGS (--layers 5). */
static const char *list_costs(void)
{
    return stage_costs("list-plan.csv", 9);
}

static void check_list_order(const char *scheme, int W, int micro, const char *order_path, const char *costs_path);

/* The JSON line of a --parallel run on W ranks names the scheme, the ranks and the
 * executor's keys. */
static void check_json(const char *what, const char *scheme, int W, const char *out)
{
    char key[96];
    snprintf(key, sizeof key, "\"parallel\": \"%s\"", scheme);
    cr_assert(strstr(out, key), "%s: JSON line without %s: %s", what, key, out);
    snprintf(key, sizeof key, "\"workers\": %d", W);
    cr_assert(strstr(out, key), "%s: JSON line without %s: %s", what, key, out);
    cr_assert(strstr(out, "\"comm_ms\": ") && strstr(out, "\"busy_ms\": ["),
              "%s: JSON line without the parallel keys: %s", what, out);
}

/* A JOBS or LIST row: the demo under the scheme on 1, 2 and 4 ranks. -np 2 and 4 end with
 * the single process's weights (1e-6) and the one rank's (bitwise or 1e-6, the row's
 * column) and execute the simulated order; JOBS runs also write --costs-out, read back
 * as a calibrated simulation reads it. */
static void demo_ranks(const scheme_row *row)
{
    const char *scheme = row->name;
    const bool list = row->kind == LIST;
    const char *flags = list ? LIST_FLAGS : DEMO_FLAGS;
    static mpi_result r;
    char cmd[2048], costs_in[600] = "";
    const char *plan = list ? list_costs() : plan_costs();
    const char *ref = tu_tmp_path("ref.safetensors"), *one = tu_tmp_path("one.safetensors"), *par = tu_tmp_path("par.safetensors");
    /* ddp's order does not depend on the costs: --costs is refused there, and the
     * simulator's order from `plan` is the one every cost gives */
    if (row->costs) snprintf(costs_in, sizeof costs_in, "--costs %s", plan);
    snprintf(cmd, sizeof cmd, "%s %s --save %s >/dev/null", tu_bin_path("demo"), flags, ref);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    /* dualpipe pairs ranks (an even count): its one-rank run is gpipe's, the same sums */
    const char *one_scheme = strcmp(scheme, "dualpipe") ? scheme : "gpipe";
    snprintf(cmd, sizeof cmd, "%s %s --parallel %s --microbatches %d %s --save %s", tu_bin_path("demo"), flags, one_scheme,
             MICRO, list ? costs_in : "", one);
    mpi_run("", "-np 1", cmd, &r);
    cr_assert_eq(r.status, 0, "%s -np 1: status %d\n%s", scheme, r.status, r.err);
    for (int W = 2; W <= 4; W += 2) {
        const char *order = tu_tmp_path("order.txt"), *costs = tu_tmp_path("costs.csv");
        char costs_out[600] = "", what[64];
        if (!list) snprintf(costs_out, sizeof costs_out, "--costs-out %s", costs);
        snprintf(what, sizeof what, "%s -np %d", scheme, W);
        snprintf(cmd, sizeof cmd, "%s %s --parallel %s --microbatches %d %s --save %s --exec-order %s %s %s",
                 tu_bin_path("demo"), flags, scheme, MICRO, scheme_flags(row), par, order, costs_in, costs_out);
        char np[16];
        snprintf(np, sizeof np, "-np %d", W);
        mpi_run("", np, cmd, &r);
        cr_assert_eq(r.status, 0, "%s: status %d\n%s", what, r.status, r.err);
        check_json(what, scheme, W, r.out);
        bool bit;
        double d = compare(par, ref, &bit);
        cr_assert(d <= 1e-6, "%s vs single process: max rel diff %.3g > 1e-6", what, d);
        d = compare(par, one, &bit);
        if (row->bitwise) cr_assert(bit, "%s vs one rank: not bitwise (max rel %.3g)", what, d);
        else cr_assert(d <= 1e-6, "%s vs one rank: max rel diff %.3g > 1e-6", what, d);
        if (list) {
            check_list_order(scheme, W, MICRO, order, plan);
        } else {
            check_order(scheme, W, order, plan);
            sp_costs *measured = sp_costs_read_csv(costs);   /* what a calibrated simulation reads */
            cr_assert_eq(measured->stages, 7);
            cr_assert(measured->fwd[2] > 0 && measured->grad[0] > 0, "%s: measured costs are empty", scheme);
            /* the optimizer step measured on the ranks that step each stage (none without weights) */
            cr_assert(measured->has_opt, "%s: --costs-out without the opt column", scheme);
            for (int st = 0; st < 7; st++)
                cr_assert(measured->param_bytes[st] > 0 ? measured->opt[st] > 0 : measured->opt[st] == 0,
                          "%s: stage %d (%.0f parameter bytes): optimizer %g us", scheme, st, measured->param_bytes[st],
                          measured->opt[st]);
            sp_costs_free(measured);
            remove(costs);
        }
        remove(par);
    }
    remove(plan);
    remove(ref);
    remove(one);
}

#define LENET_FLAGS "--steps 3 --batch 32 --threads 1 --quiet"

/* One LeNet run under --parallel: the scheme's row (for its flags; NULL: none), flags
 * beyond them, the rank count, and whether it must equal gpipe on one rank bitwise. */
typedef struct lenet_run {
    const scheme_row *row;
    const char *scheme, *flags;
    int np;
    bool bitwise;
} lenet_run;

/* The rows of the scheme table of `kind` that LeNet runs, at -np 2, into runs. */
static int lenet_rows(run_kind kind, lenet_run *runs)
{
    int n = 0;
    for (int i = 0; i < NSCHEMES; i++)
        if (schemes[i].kind == kind && schemes[i].lenet)
            runs[n++] = (lenet_run){&schemes[i], schemes[i].name, "", 2, schemes[i].bitwise};
    return n;
}

/* LeNet under each run with 4 micro-batches: the single process's weights ref (1e-6),
 * and bitwise the weights `one` where the run says. */
static void lenet_match(const lenet_run *runs, int n, const char *ref, const char *one)
{
    static mpi_result r;
    char cmd[2048], what[128], np[16];
    const char *par = tu_tmp_path("lenet-par.safetensors");
    for (int i = 0; i < n; i++) {
        snprintf(what, sizeof what, "lenet %s %s -np %d", runs[i].scheme, runs[i].flags, runs[i].np);
        snprintf(cmd, sizeof cmd, "%s " LENET_FLAGS " --parallel %s --microbatches 4 %s %s --save %s", tu_bin_path("lenet"),
                 runs[i].scheme, runs[i].row ? scheme_flags(runs[i].row) : "", runs[i].flags, par);
        snprintf(np, sizeof np, "-np %d", runs[i].np);
        mpi_run("", np, cmd, &r);
        cr_assert_eq(r.status, 0, "%s: status %d\n%s", what, r.status, r.err);
        check_json(what, runs[i].scheme, runs[i].np, r.out);
        bool bit;
        double d = compare(par, ref, &bit);
        cr_assert(d <= 1e-6, "%s vs single process: max rel %.3g", what, d);
        if (runs[i].bitwise) {
            d = compare(par, one, &bit);
            cr_assert(bit, "%s vs one rank: not bitwise (max rel %.3g)", what, d);
        }
        remove(par);
    }
}

/* The JOBS rows LeNet runs, and gpipe with --partition layerpipe, on 2 ranks; dualpipe
 * also on 4. */
Test(exec, lenet_schemes_match_single_process, .timeout = 600)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    if (access("/usr/share/datasets/fashion-mnist", R_OK) != 0) cr_skip_test("no Fashion-MNIST");
    static mpi_result r;
    char cmd[2048];
    const char *ref = tu_tmp_path("lenet-ref.safetensors"), *one = tu_tmp_path("lenet-one.safetensors");
    snprintf(cmd, sizeof cmd, "%s " LENET_FLAGS " --save %s >/dev/null", tu_bin_path("lenet"), ref);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "%s " LENET_FLAGS " --parallel gpipe --microbatches 4 --save %s", tu_bin_path("lenet"), one);
    mpi_run("", "-np 1", cmd, &r);
    cr_assert_eq(r.status, 0, "lenet -np 1: %s", r.err);
    lenet_run runs[NSCHEMES + 1];
    int n = lenet_rows(JOBS, runs);
    runs[n++] = (lenet_run){scheme_find("gpipe"), "gpipe", "--partition layerpipe", 2, true};
    /* dualpipe's pairs {0, 3} and {1, 2}: each stage's gradients summed across its pair */
    runs[n++] = (lenet_run){scheme_find("dualpipe"), "dualpipe", "", 4, false};
    lenet_match(runs, n, ref, one);
    remove(ref);
    remove(one);
}

/* Every scheme (ddp, ddp with ooo's order, fsdp, gpipe, 1f1b, lpp, fslpp, ooo-ff,
 * ooo-modulo, scan) on the issue's other apps, a couple of steps each, against the
 * single process (1e-6): rnn and gru, and VGG-11 on eight 8×8 images for three of them
 * (VGG-11 is slow here; the same executor code runs every scheme). */
static void app_schemes(const char *app, const char *flags, const char *only)
{
    static mpi_result r;
    char cmd[2048];
    const char *ref = tu_tmp_path("app-ref.safetensors"), *par = tu_tmp_path("app-par.safetensors");
    snprintf(cmd, sizeof cmd, "%s %s --save %s >/dev/null", tu_bin_path(app), flags, ref);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    const char *runs[][3] = {
        {"ddp", "", "-np 2"},          {"ddp-ooo", "", "-np 2"},
        {"fsdp", "", "-np 2"},         {"gpipe", "", "-np 2"},
        {"1f1b", "", "-np 2"},         {"lpp", "--groups 2 --microbatches 4", "-np 4"},
        {"fslpp", "--groups 2 --microbatches 4", "-np 4"},
        {"ooo-ff", "", "-np 2"},       {"ooo-modulo", "", "-np 2"},
        {"scan", "", "-np 2"},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char name[16];
        snprintf(name, sizeof name, " %s ", runs[i][0]);
        if (only && !strstr(only, name)) continue;
        snprintf(cmd, sizeof cmd, "%s %s --parallel %s %s --save %s", tu_bin_path(app), flags, runs[i][0], runs[i][1], par);
        mpi_run("", runs[i][2], cmd, &r);
        cr_assert_eq(r.status, 0, "%s %s: status %d\n%s", app, runs[i][0], r.status, r.err);
        bool bit;
        double d = compare(par, ref, &bit);
        cr_assert(d <= 1e-6, "%s %s %s vs single process: max rel %.3g", app, runs[i][0], runs[i][2], d);
        remove(par);
    }
    remove(ref);
}

Test(exec, every_scheme_trains_rnn_and_gru, .timeout = 300)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    app_schemes("rnn", "--seq-len 16 --samples 64 --batch 8 --steps 3 --optim sgd --threads 1 --quiet", NULL);
    app_schemes("gru", "--shape S --samples 8 --batch 4 --steps 2 --optim sgd --threads 1 --quiet", NULL);
}

Test(exec, schemes_train_vgg11, .timeout = 300)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    unsigned char px[64];
    char path[1024];
    const char *split[] = {"train", "test"}, *cls[] = {"cat", "dog"};
    for (int s = 0; s < 2; s++)
        for (int c = 0; c < 2; c++)
            for (int i = 0; i < 4; i++) {
                snprintf(path, sizeof path, "%s/img", tu_tmpdir());
                mkdir(path, 0755);
                snprintf(path, sizeof path, "%s/img/%s", tu_tmpdir(), split[s]);
                mkdir(path, 0755);
                snprintf(path, sizeof path, "%s/img/%s/%s", tu_tmpdir(), split[s], cls[c]);
                mkdir(path, 0755);
                for (int j = 0; j < 64; j++) px[j] = (unsigned char)((j * (7 + i) + c * 97 + s * 13) & 255);
                snprintf(path, sizeof path, "%s/img/%s/%s/%d.png", tu_tmpdir(), split[s], cls[c], i);
                cr_assert(stbi_write_png(path, 8, 8, 1, px, 8));
            }
    char flags[1024];
    snprintf(flags, sizeof flags, "--data %s/img --data-format folder --batch 4 --steps 2 --optim sgd --threads 1 --quiet",
             tu_tmpdir());
    app_schemes("vgg11", flags, " ddp-ooo 1f1b fslpp ");
}

/* ---- faults ------------------------------------------------------------------------------ */

static int count_lines(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

/* In the sanitizer build (make test-asan) a --parallel run ends with a clean leak report:
 * what Open MPI keeps past MPI_Finalize is suppressed by library (tests/lsan.supp), ours
 * is not (without the suppressions: ~120 KB in ~3,300 allocations, exit 1). */
Test(exec, parallel_run_leak_check, .timeout = 300)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    static mpi_result r;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s --steps 2 --batch 16 --threads 1 --quiet --parallel ddp", tu_bin_path("lenet"));
    char env[256];
    snprintf(env, sizeof env, "%s", TU_MPI_SAN_ENV);
    /* mpi_run puts detect_leaks=0 first; this test's ASAN_OPTIONS comes after and wins */
    snprintf(env + strlen(env), sizeof env - strlen(env), "ASAN_OPTIONS=detect_leaks=1");
    mpi_run(env, "-np 2", cmd, &r);
    cr_assert_eq(r.status, 0, "status %d:\n%s", r.status, r.err);
    cr_assert_null(strstr(r.err, "LeakSanitizer"), "leak report:\n%s", r.err);
}

Test(exec, impossible_configurations_are_refused_before_work, .timeout = 120)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    static mpi_result r;
    struct {
        const char *np, *flags, *want;
    } cases[] = {
        {"-np 4", "--layers 4 --parallel lpp --groups 3 --microbatches 4", "expected W = G*R"},
        {"-np 4", "--layers 1 --parallel gpipe", "4 workers for 1 stages (a pipeline needs workers <= stages"},
        {"-np 2", "--layers 2 --parallel ddp --microbatches 1", "expected --microbatches >= 2"},
        {"-np 2", "--layers 2 --parallel ddp --microbatches 3 --batch 32", "--batch 32 does not split into 3"},
        /* a default the user never chose is named as such, with the fix */
        {"-np 3", "--layers 3 --parallel gpipe --batch 64",
         "--batch 64 does not split into 6 micro-batches (--parallel gpipe's default, 2W with 3 ranks) (expected a "
         "multiple of 6: --batch 66 or --batch 60, or --microbatches dividing 64)"},
        /* every problem at once, not the second only after the first is fixed */
        {"-np 3", "--layers 3 --parallel lpp --groups 2 --batch 64",
         "2 problems: --batch 64 does not split into 3 micro-batches (--parallel lpp's default, W with 3 ranks)"},
        {"-np 3", "--layers 3 --parallel lpp --groups 2 --batch 64", "; 3 workers but --groups 2 (expected W = G*R"},
        /* dualpipe pairs rank r with W-1-r and sends half the micro-batches from each end */
        {"-np 3", "--layers 3 --parallel dualpipe --batch 30",
         "--parallel dualpipe: 3 ranks (expected an even number: rank r pairs with rank W-1-r)"},
        {"-np 2", "--layers 2 --parallel dualpipe --microbatches 3 --batch 30",
         "3 micro-batches (--microbatches 3) (expected an even number: half enter from each end)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "%s --steps 3 --threads 1 --quiet %s", tu_bin_path("demo"), cases[i].flags);
        mpi_run("", cases[i].np, cmd, &r);
        cr_assert_eq(r.status, 2, "%s: status %d, want 2\n%s", cases[i].flags, r.status, r.err);
        cr_assert(strstr(r.err, cases[i].want), "%s: stderr lacks '%s':\n%s", cases[i].flags, cases[i].want, r.err);
        cr_assert_eq(count_lines(r.err, "scanprop: "), 1, "%s: want one line:\n%s", cases[i].flags, r.err);
        cr_assert(!strstr(r.out, "\"app\""), "%s: work was done: %s", cases[i].flags, r.out);
    }
    /* The time scan needs a step per rank. */
    char rcmd[1024];
    snprintf(rcmd, sizeof rcmd, "%s --seq-len 3 --samples 16 --batch 4 --steps 1 --threads 1 --quiet --parallel scan",
             tu_bin_path("rnn"));
    mpi_run("", "-np 4", rcmd, &r);
    cr_assert_eq(r.status, 2, "rnn scan, 4 ranks, 3 steps: status %d\n%s", r.status, r.err);
    cr_assert(strstr(r.err, "4 ranks for 3 time steps (expected ranks <= steps)"), "%s", r.err);
    cr_assert_eq(count_lines(r.err, "scanprop: "), 1, "want one line:\n%s", r.err);
    cr_assert(!strstr(r.out, "\"app\""), "work was done: %s", r.out);
    /* A bad flag value is refused by the flag parser, before MPI starts (each rank says so). */
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s --steps 3 --quiet --parallel zigzag", tu_bin_path("demo"));
    mpi_run("", "-np 2", cmd, &r);
    cr_assert_eq(r.status, 2, "zigzag: status %d\n%s", r.status, r.err);
    cr_assert(strstr(r.err, "scanprop: --parallel zigzag"), "%s", r.err);
}

/* mpirun without --parallel would run W independent trainings: rank 0 refuses, once. */
Test(exec, mpirun_without_parallel_is_refused, .timeout = 60)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    static mpi_result r;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s " DEMO_FLAGS, tu_bin_path("demo"));
    mpi_run("", "-np 2", cmd, &r);
    cr_assert_eq(r.status, 2, "status %d, want 2\n%s", r.status, r.err);
    cr_assert(strstr(r.err, "scanprop: demo: started by mpirun with 2 ranks but without --parallel"), "%s", r.err);
    cr_assert_eq(count_lines(r.err, "scanprop: "), 1, "want one line:\n%s", r.err);
    cr_assert(!strstr(r.out, "\"app\""), "work was done: %s", r.out);
}

/* A refusal of the command line under mpirun is printed once (rank 0's), whether the
 * parser refuses it or the runner's checks after the parse do. */
Test(exec, a_refused_command_line_is_printed_once, .timeout = 60)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    static mpi_result r;
    const char *cases[][2] = {{"--btach 3", "did you mean --batch?"},
                              {"--parallel ddp --lr -1", "--lr -1: expected > 0"},
                              {"--parallel ddp --steps 2 --steps 3", "--steps given twice"},
                              {"--parallel gpip", "did you mean gpipe?"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "%s --layers 3 --quiet %s", tu_bin_path("demo"), cases[i][0]);
        mpi_run("", "-np 3", cmd, &r);
        cr_assert_eq(r.status, 2, "%s: status %d, want 2\n%s", cases[i][0], r.status, r.err);
        cr_assert(strstr(r.err, cases[i][1]), "%s: stderr lacks '%s':\n%s", cases[i][0], cases[i][1], r.err);
        cr_assert_eq(count_lines(r.err, "scanprop: "), 1, "%s: want one line:\n%s", cases[i][0], r.err);
    }
}

/* Ranks started in different directories read different files of one name: the contents
 * are compared (a hash in the start-up agreement), not the paths, and the refusal names
 * the file and the rank; identical copies run. */
Test(exec, ranks_that_read_different_files_are_refused_before_work, .timeout = 120)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    static mpi_result r;
    const char *d0 = tu_tmp_path("files0"), *d1 = tu_tmp_path("files1");
    char cmd[16384], np[600];
    snprintf(cmd, sizeof cmd, "mkdir -p %s %s", d0, d1);
    cr_assert_eq(system(cmd), 0);
    const char *flags = "--layers 4 --steps 2 --batch 32 --threads 1 --quiet --comm-timeout 5 --parallel gpipe "
                        "--microbatches 2 --costs c.csv";
    const char *costs = "layer,fwd,bwd_grad,bwd_delta\nfc1,1,1,1\ntanh_1,1,1,1\nfc2,1,1,1\ntanh_2,1,1,1\n"
                        "fc3,1,1,1\ntanh_3,1,1,1\nfc4,1,1,1\n";
    for (int k = 0; k < 2; k++) {   /* k = 0: identical copies; 1: rank 1's first stage costs 9 */
        for (int d = 0; d < 2; d++) {
            FILE *f = fopen(d ? tu_tmp_path("files1/c.csv") : tu_tmp_path("files0/c.csv"), "w");
            cr_assert_not_null(f);
            fputs(d && k ? "layer,fwd,bwd_grad,bwd_delta\nfc1,9,9,9\ntanh_1,1,1,1\nfc2,1,1,1\ntanh_2,1,1,1\n"
                           "fc3,1,1,1\ntanh_3,1,1,1\nfc4,1,1,1\n"
                         : costs,
                  f);
            fclose(f);
        }
        char demo[PATH_MAX];   /* each rank starts in its directory */
        cr_assert_not_null(realpath(tu_bin_path("demo"), demo));
        snprintf(np, sizeof np, "-np 1 -wdir %s", d0);
        snprintf(cmd, sizeof cmd, "%s %s : -np 1 -wdir %s %s %s", demo, flags, d1, demo, flags);
        mpi_run("", np, cmd, &r);
        if (k == 0) {
            cr_assert_eq(r.status, 0, "identical copies: status %d\n%s", r.status, r.err);
            continue;
        }
        cr_assert_eq(r.status, 2, "different files: status %d, want 2\n%s", r.status, r.err);
        cr_assert(strstr(r.err, "scanprop: --parallel gpipe: the ranks read different files as --costs c.csv: rank 1 "
                                "reads other contents than rank 0"),
                  "stderr:\n%s", r.err);
        cr_assert_eq(count_lines(r.err, "scanprop: "), 1, "want one line:\n%s", r.err);
        cr_assert(r.seconds < 30, "took %.1f s (a hang until the timeout?)", r.seconds);
        cr_assert(!strstr(r.out, "\"app\""), "work was done: %s", r.out);
    }
}

/* IDX images of 28x28 (n samples, labels i % 10; pixel bytes from `seed`) into dir. */
static void write_idx_split(const char *dir, const char *prefix, int n, int seed)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte", dir, prefix);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    unsigned char h[16] = {0, 0, 8, 3, 0, 0, 0, (unsigned char)n, 0, 0, 0, 28, 0, 0, 0, 28};
    fwrite(h, 1, 16, f);
    for (int i = 0; i < n * 28 * 28; i++) fputc((i * 37 + seed) & 255, f);
    fclose(f);
    snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte", dir, prefix);
    f = fopen(path, "wb");
    cr_assert_not_null(f);
    unsigned char l[8] = {0, 0, 8, 1, 0, 0, 0, (unsigned char)n};
    fwrite(l, 1, 8, f);
    for (int i = 0; i < n; i++) fputc(i % 10, f);
    fclose(f);
}

/* The same of the dataset: ranks started in different directories read --data idx from
 * files of one name but other contents (one pixel byte seed apart, same shapes and
 * counts): refused before work, naming the file and the rank (they were compared by
 * shape only and trained on different data); identical copies run. */
Test(exec, ranks_that_read_different_dataset_files_are_refused, .timeout = 120)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    static mpi_result r;
    const char *d0 = tu_tmp_path("data0"), *d1 = tu_tmp_path("data1");
    char cmd[16384], np[600], sub[4200];
    snprintf(cmd, sizeof cmd, "mkdir -p %s/idx %s/idx", d0, d1);
    cr_assert_eq(system(cmd), 0);
    const char *flags = "--data idx --data-format idx --steps 1 --batch 8 --threads 1 --quiet --comm-timeout 5 "
                        "--parallel ddp";
    for (int k = 0; k < 2; k++) {   /* k = 0: identical copies; 1: rank 1's training images differ */
        for (int d = 0; d < 2; d++) {
            snprintf(sub, sizeof sub, "%s/idx", d ? d1 : d0);
            write_idx_split(sub, "train", 16, d && k ? 1 : 0);
            write_idx_split(sub, "t10k", 8, 0);
        }
        char lenet[PATH_MAX];
        cr_assert_not_null(realpath(tu_bin_path("lenet"), lenet));
        snprintf(np, sizeof np, "-np 1 -wdir %s", d0);
        snprintf(cmd, sizeof cmd, "%s %s : -np 1 -wdir %s %s %s", lenet, flags, d1, lenet, flags);
        mpi_run("", np, cmd, &r);
        if (k == 0) {
            cr_assert_eq(r.status, 0, "identical copies: status %d\n%s", r.status, r.err);
            continue;
        }
        cr_assert_eq(r.status, 2, "different files: status %d, want 2\n%s", r.status, r.err);
        cr_assert(strstr(r.err, "scanprop: --parallel ddp: the ranks read different files as "
                                "idx/train-images-idx3-ubyte: rank 1 reads other contents than rank 0"),
                  "stderr:\n%s", r.err);
        cr_assert_eq(count_lines(r.err, "scanprop: "), 1, "want one line:\n%s", r.err);
        cr_assert(!strstr(r.out, "\"app\""), "work was done: %s", r.out);
    }
}

/* More threads than online cores on the node (ranks x --threads): one warning line on
 * rank 0, and the run goes on; none where the threads fit. */
Test(exec, oversubscribed_node_is_warned_once, .timeout = 120)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores > 32) cr_skip_test("%ld cores: 2 ranks of at most 64 threads do not oversubscribe them", cores);
    static mpi_result r;
    char cmd[1024], want[160];
    snprintf(cmd, sizeof cmd, "%s --layers 3 --steps 1 --batch 32 --quiet --threads %ld --parallel ddp",
             tu_bin_path("demo"), cores);
    mpi_run("", "-np 2", cmd, &r);
    cr_assert_eq(r.status, 0, "status %d\n%s", r.status, r.err);
    snprintf(want, sizeof want, "demo: warning: 2 ranks x %ld thread%s on %ld online cores: the node is oversubscribed",
             cores, cores == 1 ? "" : "s", cores);
    cr_assert(strstr(r.err, want), "want '%s' in:\n%s", want, r.err);
    cr_assert_eq(count_lines(r.err, "warning: "), 1, "want one line:\n%s", r.err);
    if (cores >= 2) {
        snprintf(cmd, sizeof cmd, "%s --layers 3 --steps 1 --batch 32 --quiet --threads 1 --parallel ddp",
                 tu_bin_path("demo"));
        mpi_run("", "-np 2", cmd, &r);
        cr_assert_eq(r.status, 0, "status %d\n%s", r.status, r.err);
        cr_assert(!strstr(r.err, "oversubscribed"), "2 ranks x 1 thread on %ld cores:\n%s", cores, r.err);
    }
}

/* Ranks that run another program or other settings refuse before the first collective of
 * the executor (a bucket of another size, a schedule of another length, rank 0's numbers
 * used silently), naming what differs and where; --threads, --quiet and --comm-timeout
 * may differ. */
Test(exec, ranks_that_disagree_are_refused_before_work, .timeout = 120)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    static mpi_result r;
    const char *base = "--steps 3 --batch 32 --threads 1 --quiet --comm-timeout 5 --parallel ddp";
    struct {
        const char *a, *b, *want;
    } cases[] = {
        {"demo --layers 3", "demo --layers 3 --seed 2", "the ranks disagree on --seed (rank 0: 1): rank 1 differs"},
        {"demo --layers 3", "demo --layers 3 --width 32", "the ranks disagree on --width (rank 0: 64): rank 1 differs"},
        {"demo --layers 3", "rnn --samples 64 --seq-len 4", "the ranks disagree on the program (rank 0 runs demo"},
    };
    char cmd[2048];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char a[64], b[64];
        snprintf(a, sizeof a, "%.*s", (int)strcspn(cases[i].a, " "), cases[i].a);
        snprintf(b, sizeof b, "%.*s", (int)strcspn(cases[i].b, " "), cases[i].b);
        snprintf(cmd, sizeof cmd, "%s %s%s : -np 1 %s %s%s", tu_bin_path(a), base, strchr(cases[i].a, ' '), tu_bin_path(b), base,
                 strchr(cases[i].b, ' '));
        mpi_run("", "-np 1", cmd, &r);
        cr_assert_eq(r.status, 2, "%s | %s: status %d, want 2\n%s", cases[i].a, cases[i].b, r.status, r.err);
        cr_assert(strstr(r.err, cases[i].want), "%s | %s: stderr lacks '%s':\n%s", cases[i].a, cases[i].b,
                  cases[i].want, r.err);
        cr_assert_eq(count_lines(r.err, "scanprop: "), 1, "want one line:\n%s", r.err);
        cr_assert(!strstr(r.out, "\"app\""), "work was done: %s", r.out);
    }
    /* what may differ per rank */
    snprintf(cmd, sizeof cmd, "%s --layers 3 %s : -np 1 %s --layers 3 --steps 3 --batch 32 --threads 2 --parallel ddp",
             tu_bin_path("demo"), base, tu_bin_path("demo"));
    mpi_run("", "-np 1", cmd, &r);
    cr_assert_eq(r.status, 0, "--threads, --quiet, --comm-timeout differ: status %d\n%s", r.status, r.err);
    cr_assert_eq(count_lines(r.out, "\"app\""), 1, "%s", r.out);
}

Test(exec, a_rank_that_hangs_mid_step_stops_the_others, .timeout = 120)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    static mpi_result r;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s " DEMO_FLAGS " --parallel gpipe --microbatches 4 --comm-timeout 5", tu_bin_path("tests/fault_demo"));
    mpi_run("SCANPROP_EXEC_FAULT=hang:1:2", "-np 2", cmd, &r);
    cr_assert_eq(r.status, 2, "status %d, want 2\n%s", r.status, r.err);
    cr_assert(r.seconds < 40, "took %.1f s with a 5 s timeout", r.seconds);
    cr_assert(strstr(r.err, "scanprop: rank 0: ") && strstr(r.err, "rank 1") && strstr(r.err, "during step 2, job ") &&
                  strstr(r.err, "no answer within 5 s"),
              "stderr:\n%s", r.err);
    /* 2 ranks x 1 thread: oversubscribed only on a one-core machine */
    if (sysconf(_SC_NPROCESSORS_ONLN) >= 2) cr_assert(!strstr(r.err, "oversubscribed"), "stderr:\n%s", r.err);
    cr_assert(!strstr(r.out, "\"app\""));
}

/* The same hang on a node with more threads (ranks x --threads) than online cores: the
 * line adds that the peer may only be starved of CPU, with the numbers. */
Test(exec, a_timeout_on_an_oversubscribed_node_says_so, .timeout = 120)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores > 64) cr_skip_test("%ld cores: 2 ranks of at most 64 threads do not oversubscribe them", cores);
    static mpi_result r;
    char cmd[1024], want[160];
    int threads = (int)cores;   /* 2 ranks x cores threads > cores */
    snprintf(cmd, sizeof cmd, "%s --layers 4 --steps 4 --batch 32 --quiet --threads %d --parallel gpipe "
             "--microbatches 4 --comm-timeout 2", tu_bin_path("tests/fault_demo"), threads);
    mpi_run("SCANPROP_EXEC_FAULT=hang:1:2", "-np 2", cmd, &r);
    cr_assert_eq(r.status, 2, "status %d, want 2\n%s", r.status, r.err);
    snprintf(want, sizeof want, "oversubscribed, 2 ranks x %d thread%s on %ld online cores", threads,
             threads == 1 ? "" : "s", cores);
    cr_assert(strstr(r.err, "no answer within 2 s (a peer died, hung or runs a different schedule, or, likely here, "
                            "is starved of CPU") && strstr(r.err, want) && strstr(r.err, "raise --comm-timeout"),
              "want '%s' in:\n%s", want, r.err);
    cr_assert_eq(count_lines(r.err, "scanprop: "), 1, "want one line:\n%s", r.err);
}

Test(exec, a_rank_that_exits_mid_step_ends_the_job, .timeout = 120)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    static mpi_result r;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s " DEMO_FLAGS " --parallel ddp --microbatches 4 --comm-timeout 20", tu_bin_path("tests/fault_demo"));
    mpi_run("SCANPROP_EXEC_FAULT=exit:1:2", "-np 4", cmd, &r);
    cr_assert_neq(r.status, 0, "the job succeeded although rank 1 died\n%s", r.err);
    cr_assert(r.seconds < 25, "took %.1f s", r.seconds);
    /* mpirun names the dead process: "Process name: [[job,1],1]" (or "process rank 1") */
    cr_assert(strstr(r.err, ",1],1]") || strstr(r.err, "process rank 1"), "stderr:\n%s", r.err);
    cr_assert(!strstr(r.out, "\"app\""));
}

/* The injected faults live in the test program (tests/fault_demo.c), not in the library:
 * the apps ignore $SCANPROP_EXEC_FAULT, and neither the library nor an app holds the name. */
Test(exec, release_programs_ignore_the_fault_variable, .timeout = 60)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    static mpi_result r;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s " DEMO_FLAGS " --parallel gpipe --microbatches 2", tu_bin_path("demo"));
    mpi_run("SCANPROP_EXEC_FAULT=exit:0:1", "-np 1", cmd, &r);
    cr_assert_eq(r.status, 0, "build/demo obeyed the test hook: status %d\n%s", r.status, r.err);
    cr_assert(strstr(r.out, "\"app\""), "no JSON line: %s", r.out);
    snprintf(cmd, sizeof cmd, "grep -l SCANPROP_EXEC_FAULT %s %s >/dev/null 2>&1", tu_bin_path("libscanprop.a"),
             tu_bin_path("demo"));
    cr_assert_neq(system(cmd), 0, "the library or build/demo holds the test hook's variable");
    snprintf(cmd, sizeof cmd, "grep -l SCANPROP_EXEC_FAULT %s >/dev/null 2>&1", tu_bin_path("tests/fault_demo"));
    cr_assert_eq(system(cmd), 0, "tests/fault_demo lacks the hook: the check above proves nothing");
}

/* ---- measured vs predicted: like with like ----------------------------------------------- */

static double json_number(const char *out, const char *key)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\": ", key);
    const char *p = strstr(out, k);
    cr_assert_not_null(p, "no %s in the JSON line: %s", k, out);
    return strtod(p + strlen(k), NULL);
}

/* bench/distributed.sh divides the measured step by the simulated latency of the costs
 * --costs-out wrote. Both sides are means over the steps after the first: here rank 0's
 * first step computes one job 1 s longer (SCANPROP_EXEC_FAULT=slow), which must reach
 * neither "step_mean_ms" nor the costs (it does reach busy_ms, which counts every step).
 * On one rank the step holds every job, so the prediction from the mean job costs is
 * at most the mean step, by construction (a median step broke this: 1f1b at 0.91). */
/* "step_median_ms": the median of each rank's steps after the first 5, mean over the
 * ranks. Rank 0's step 3 computes one job 1 s longer: inside the skipped five, it
 * reaches step_mean_ms (the steps after the first) but not the median; at step 8 of 9
 * it is one of the four steps the median takes, and the median of four with one slow
 * is the mean of the two middle (fast) ones. */
Test(exec, step_median_leaves_out_five_steps_and_stalls, .timeout = 120)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    static mpi_result r;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s --layers 4 --steps 9 --batch 32 --threads 1 --quiet --parallel gpipe --microbatches 2",
             tu_bin_path("tests/fault_demo"));
    for (int k = 0; k < 2; k++) {
        mpi_run(k == 0 ? "SCANPROP_EXEC_FAULT=slow:0:3:1000" : "SCANPROP_EXEC_FAULT=slow:0:8:1000", "-np 2", cmd, &r);
        cr_assert_eq(r.status, 0, "status %d\n%s", r.status, r.err);
        double mean = json_number(r.out, "step_mean_ms"), median = json_number(r.out, "step_median_ms");
        /* the executor's own time per job: what is left of a job after its compute (a
         * deferred update included) and its waiting — counting a part twice made it −14 µs */
        double job = json_number(r.out, "job_overhead_us");
        cr_assert(job >= 0 && job < 1e3, "job_overhead_us %g", job);
        cr_assert(mean > 100, "slowed step %d: step_mean_ms %.3f lacks it", k ? 8 : 3, mean);
        cr_assert(median > 0 && median < 100, "slowed step %d: step_median_ms %.3f holds it", k ? 8 : 3, median);
    }
    snprintf(cmd, sizeof cmd, "%s --layers 4 --steps 5 --batch 32 --threads 1 --quiet --parallel gpipe --microbatches 2",
             tu_bin_path("tests/fault_demo"));
    mpi_run("", "-np 2", cmd, &r);
    cr_assert_eq(r.status, 0, "status %d\n%s", r.status, r.err);
    cr_assert_not_null(strstr(r.out, "\"step_median_ms\": null"), "5 steps leave no step for the median: %s", r.out);
    /* ddp applies the previous step's update inside a forward job (counted as compute) */
    snprintf(cmd, sizeof cmd, "%s --layers 8 --steps 2 --batch 32 --threads 1 --quiet --parallel ddp", tu_bin_path("tests/fault_demo"));
    mpi_run("", "-np 2", cmd, &r);
    cr_assert_eq(r.status, 0, "status %d\n%s", r.status, r.err);
    double job = json_number(r.out, "job_overhead_us");
    cr_assert(job >= 0 && job < 1e3, "ddp: job_overhead_us %g", job);
}

Test(exec, costs_out_and_step_mean_leave_out_the_first_step, .timeout = 120)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    static mpi_result r;
    char cmd[1024];
    const char *costs = tu_tmp_path("mean-costs.csv");
    snprintf(cmd, sizeof cmd, "%s " DEMO_FLAGS " --parallel gpipe --microbatches 2 --costs-out %s", tu_bin_path("tests/fault_demo"),
             costs);
    mpi_run("SCANPROP_EXEC_FAULT=slow:0:1:1000", "-np 1", cmd, &r);
    cr_assert_eq(r.status, 0, "status %d\n%s", r.status, r.err);
    double step_mean = json_number(r.out, "step_mean_ms");
    const char *b = strstr(r.out, "\"busy_ms\": [");
    cr_assert_not_null(b, "%s", r.out);
    double busy = strtod(b + strlen("\"busy_ms\": ["), NULL);
    cr_assert(busy >= 200, "the injected second is not in the first step's compute: busy %.3f ms per step", busy);
    cr_assert(step_mean > 0 && step_mean < 100, "step_mean_ms %.3f: the slowed first step is in it", step_mean);
    sp_costs *c = sp_costs_read_csv(costs);
    sp_sched_config sc = {.stages = c->stages, .micro = 2, .workers = 1, .split = -1, .no_input_grad = true};
    sp_schedule *s = sp_schedule_new(sp_scheme_find("gpipe"), &sc, c);
    sp_sim sim;
    sp_simulate(s, c, &sim);
    double predicted = 1e-3 * sim.latency;   /* µs → ms */
    cr_assert(predicted > 0 && predicted < 100, "predicted %.3f ms: the slowed first step is in the costs",
              predicted);
    cr_assert(predicted <= step_mean * (1 + 1e-3), "one rank: predicted compute %.4f ms > mean step %.4f ms",
              predicted, step_mean);
    sp_sim_free(&sim);
    sp_schedule_free(s);
    sp_costs_free(c);
    remove(costs);
}

/* ---- communication hidden behind the backward ------------------------------------------- */

Test(exec, ddp_allreduce_overlaps_backward, .timeout = 120)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    static mpi_result r;
    const char *trace = tu_tmp_path("trace.json");
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "%s --layers 8 --width 256 --steps 3 --batch 64 --threads 1 --quiet --parallel ddp --microbatches 2 "
             "--bucket-mb 0.2 --trace %s",
             tu_bin_path("demo"), trace);
    mpi_run("", "-np 2", cmd, &r);
    cr_assert_eq(r.status, 0, "status %d\n%s", r.status, r.err);
    FILE *f = fopen(trace, "r");
    cr_assert_not_null(f, "no trace written");
    /* Per rank and step: the end of its last backward job and the start of its first
     * gradient collective. */
    double last_bwd[2][3], first_comm[2][3];
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 3; b++) last_bwd[a][b] = -1, first_comm[a][b] = 1e30;
    int ncomm = 0;
    static char line[1024];
    while (fgets(line, sizeof line, f)) {
        char name[64];
        int pid, tid, step;
        double ts, dur;
        const char *p = strstr(line, "\"ph\": \"X\"");
        if (!p) continue;
        cr_assert_eq(sscanf(line, "{\"name\": \"%63[^\"]\"", name), 1, "%s", line);
        p = strstr(line, "\"pid\": ");
        cr_assert_eq(sscanf(p, "\"pid\": %d, \"tid\": %d, \"ts\": %lf, \"dur\": %lf, \"args\": {\"step\": %d}", &pid,
                            &tid, &ts, &dur, &step),
                     5, "%s", line);
        if (pid > 1 || step > 2) continue;
        if (tid == 1) {
            ncomm++;
            if (ts < first_comm[pid][step]) first_comm[pid][step] = ts;
        } else if (name[0] == 'b') {
            if (ts + dur > last_bwd[pid][step]) last_bwd[pid][step] = ts + dur;
        }
    }
    fclose(f);
    remove(trace);
    cr_assert(ncomm >= 2 * 3 * 2, "only %d collectives traced (want several buckets per rank and step)", ncomm);
    for (int pid = 0; pid < 2; pid++)
        for (int step = 0; step < 3; step++)
            cr_assert(first_comm[pid][step] < last_bwd[pid][step],
                      "rank %d step %d: the first allreduce started at %.0f us, after the backward ended at %.0f us",
                      pid, step, first_comm[pid][step], last_bwd[pid][step]);
}

/* DDP's cross-step overlap: a bucket's update waits until the next step's forward needs
 * one of its stages, so the collectives of step k are still in flight when step k + 1's
 * first job starts; with $SCANPROP_EXEC_STEPWISE=1 every collective ends inside its own
 * step. The weights are bitwise the same either way (the same sums, applied once each). */
static bool comm_crosses_steps(const char *trace)
{
    FILE *f = fopen(trace, "r");
    cr_assert_not_null(f, "no trace written");
    double comm_end[2][3], first_job[2][3];
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 3; b++) comm_end[a][b] = -1, first_job[a][b] = 1e30;
    static char line[1024];
    while (fgets(line, sizeof line, f)) {
        int pid, tid, step;
        double ts, dur;
        const char *p = strstr(line, "\"ph\": \"X\"");
        if (!p || !(p = strstr(line, "\"pid\": "))) continue;
        cr_assert_eq(sscanf(p, "\"pid\": %d, \"tid\": %d, \"ts\": %lf, \"dur\": %lf, \"args\": {\"step\": %d}", &pid,
                            &tid, &ts, &dur, &step),
                     5, "%s", line);
        if (pid > 1 || step > 2) continue;
        if (tid == 1 && ts + dur > comm_end[pid][step]) comm_end[pid][step] = ts + dur;
        if (tid == 0 && ts < first_job[pid][step]) first_job[pid][step] = ts;
    }
    fclose(f);
    remove(trace);
    bool crosses = false;
    for (int pid = 0; pid < 2; pid++)
        for (int step = 0; step < 2; step++) {
            cr_assert(comm_end[pid][step] > 0 && first_job[pid][step + 1] < 1e30, "rank %d step %d: nothing traced",
                      pid, step);
            crosses |= comm_end[pid][step] > first_job[pid][step + 1];
        }
    return crosses;
}

Test(exec, ddp_updates_overlap_the_next_steps_forward, .timeout = 120)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    static mpi_result r;
    const char *trace = tu_tmp_path("xstep.json"), *a = tu_tmp_path("xstep-a.safetensors"), *b = tu_tmp_path("xstep-b.safetensors");
    char cmd[1024];
    const char *flags = "--layers 8 --width 64 --steps 3 --batch 32 --threads 1 --quiet --parallel ddp --microbatches 2 "
                        "--bucket-mb 0.02";
    snprintf(cmd, sizeof cmd, "%s %s --trace %s --save %s", tu_bin_path("demo"), flags, trace, a);
    mpi_run("", "-np 2", cmd, &r);
    cr_assert_eq(r.status, 0, "status %d\n%s", r.status, r.err);
    cr_assert(comm_crosses_steps(trace), "no gradient collective of step k was still in flight in step k + 1");
    snprintf(cmd, sizeof cmd, "%s %s --trace %s --save %s", tu_bin_path("demo"), flags, trace, b);
    mpi_run("SCANPROP_EXEC_STEPWISE=1", "-np 2", cmd, &r);
    cr_assert_eq(r.status, 0, "status %d\n%s", r.status, r.err);
    cr_assert(!comm_crosses_steps(trace), "stepwise: a collective outlived its step");
    bool bit;
    double d = compare(a, b, &bit);
    cr_assert(bit, "deferred and stepwise updates: not bitwise (max rel %.3g)", d);
    remove(a);
    remove(b);
}

/* ---- BPPSA across ranks ------------------------------------------------------------------- */

Test(exec, scan_across_ranks_equals_linear_bp_for_a_16_layer_mlp, .timeout = 300)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    static mpi_result r;
    char cmd[2048];
#define SCAN_FLAGS "--layers 16 --width 16 --steps 4 --batch 16 --threads 1 --quiet"
    const char *ref = tu_tmp_path("scan-ref.safetensors"), *par = tu_tmp_path("scan-par.safetensors");
    snprintf(cmd, sizeof cmd, "%s " SCAN_FLAGS " --save %s >/dev/null", tu_bin_path("demo"), ref);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    for (int W = 2; W <= 4; W += 2) {
        snprintf(cmd, sizeof cmd, "%s " SCAN_FLAGS " --parallel scan --save %s", tu_bin_path("demo"), par);
        char np[16];
        snprintf(np, sizeof np, "-np %d", W);
        mpi_run("", np, cmd, &r);
        cr_assert_eq(r.status, 0, "scan -np %d: status %d\n%s", W, r.status, r.err);
        cr_assert(strstr(r.out, "\"parallel\": \"scan\""), "%s", r.out);
        bool bit;
        double d = compare(par, ref, &bit);
        cr_assert(d <= 1e-6, "scan -np %d vs linear BP: max rel diff %.3g > 1e-6", W, d);
        remove(par);
    }
    remove(ref);
}

/* The JSON line's "wgrad_steps": [n_0, …, n_{W−1}] must be each rank's own time segment,
 * [r·T/W + 1, (r+1)·T/W]: every rank computed the weight gradients of its steps only. */
static void check_wgrad_steps(const char *out, int W, int T)
{
    const char *p = strstr(out, "\"wgrad_steps\": [");
    cr_assert(p, "no wgrad_steps in the JSON line\n%s", out);
    p += strlen("\"wgrad_steps\": [");
    int sum = 0;
    for (int r = 0; r < W; r++) {
        int n = -1, used = 0;
        cr_assert_eq(sscanf(p, "%d%n", &n, &used), 1, "wgrad_steps: rank %d missing in %s", r, out);
        int want = (int)((long)(r + 1) * T / W) - (int)((long)r * T / W);
        cr_assert_eq(n, want, "-np %d: rank %d computed the weight gradients of %d steps (expected its segment: %d of %d)",
                     W, r, n, want, T);
        sum += n;
        p += used;
        if (*p == ',') p++;
        while (*p == ' ') p++;
    }
    cr_assert_eq(*p, ']', "wgrad_steps has more than %d entries: %s", W, out);
    cr_assert_eq(sum, T, "the ranks' segments cover %d of %d steps", sum, T);
}

/* The recurrent chain: rnn's (and gru's) time steps split over the ranks, each rank's
 * segment of chain_jt products scanned across ranks and each rank's weight gradients over
 * its own steps only (chain_backward_params_range, then an allreduce), against linear BP
 * (BPTT) at W = 2 … maxW. SGD with momentum, so a wrong gradient shows at once in the
 * weights. The sums over the ranks group the steps differently from BPTT's one GEMM over
 * all T·B rows, so the match is within 1e-6, not bitwise. */
static void rnn_scan(const char *app, const char *flags, int maxW, int T)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    static mpi_result r;
    char cmd[2048];
    const char *ref = tu_tmp_path("rscan-ref.safetensors"), *par = tu_tmp_path("rscan-par.safetensors");
    snprintf(cmd, sizeof cmd, "%s %s --save %s >/dev/null", tu_bin_path(app), flags, ref);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    for (int W = 2; W <= maxW; W++) {
        snprintf(cmd, sizeof cmd, "%s %s --parallel scan --save %s", tu_bin_path(app), flags, par);
        char np[16];
        snprintf(np, sizeof np, "-np %d", W);
        mpi_run("", np, cmd, &r);
        cr_assert_eq(r.status, 0, "%s scan -np %d: status %d\n%s", app, W, r.status, r.err);
        cr_assert(strstr(r.out, "\"parallel\": \"scan\"") && strstr(r.out, "\"workers\": ") , "%s", r.out);
        bool bit;
        double d = compare(par, ref, &bit);
        cr_assert(d <= 1e-6, "%s scan -np %d vs linear BP: max rel diff %.3g > 1e-6", app, W, d);
        check_wgrad_steps(r.out, W, T);
        remove(par);
    }
    remove(ref);
}

Test(exec, scan_across_ranks_equals_linear_bp_for_an_rnn_chain, .timeout = 300)
{
    rnn_scan("rnn", "--seq-len 16 --samples 64 --hidden 16 --batch 8 --steps 4 --optim sgd --lr 0.1 --threads 1 --quiet",
             4, 16);
}

Test(exec, scan_across_ranks_equals_linear_bp_for_a_gru_chain, .timeout = 300)
{
    rnn_scan("gru", "--shape S --samples 8 --batch 4 --steps 2 --optim sgd --lr 0.1 --threads 1 --quiet", 4, 259);
}

/* --parallel scan --plan: ⌈log₂ W⌉ levels; at the level of span k, rank r + k sends its T
 * to rank r for every r >= 1 with r + k < W (rank 0 reads no T_0), nothing else. */
static void check_plan(const char *app, const char *flags, int W)
{
    static mpi_result r;
    char cmd[1024], np[16];
    snprintf(cmd, sizeof cmd, "%s %s --parallel scan --plan", tu_bin_path(app), flags);
    snprintf(np, sizeof np, "-np %d", W);
    mpi_run("", np, cmd, &r);
    cr_assert_eq(r.status, 0, "%s plan -np %d: status %d\n%s", app, W, r.status, r.err);
    int want_levels = 0;
    while ((1 << want_levels) < W) want_levels++;
    char key[64];
    snprintf(key, sizeof key, "\"levels\": %d", want_levels);
    cr_assert(strstr(r.out, key), "%s -np %d: want %s:\n%s", app, W, key, r.out);
    int levels = 0;
    for (const char *line = r.out; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        int lv, span;
        if (sscanf(line, "level %d (span %d):", &lv, &span) != 2) continue;
        levels++;
        cr_assert_eq(lv, levels, "%s -np %d: levels out of order:\n%s", app, W, r.out);
        cr_assert_eq(span, 1 << (lv - 1), "%s -np %d: level %d has span %d", app, W, lv, span);
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        bool seen[64][64] = {{false}};
        int pairs = 0;
        for (const char *p = strstr(line, "rank "); p && p < line + len; p = strstr(p + 1, "rank ")) {
            int a, b;
            if (sscanf(p, "rank %d -> rank %d", &a, &b) != 2) continue;
            cr_assert(a >= 0 && a < W && b >= 0 && b < W && !seen[a][b], "%s -np %d: bad pair %d -> %d", app, W, a, b);
            seen[a][b] = true;
            pairs++;
            cr_assert(a == b + span && b >= 1, "%s -np %d level %d: rank %d -> rank %d is not in the closed form", app,
                      W, lv, a, b);
        }
        int want = 0;
        for (int b = 1; b + span < W; b++) {
            want++;
            cr_assert(seen[b + span][b], "%s -np %d level %d: no %d -> %d", app, W, lv, b + span, b);
        }
        cr_assert_eq(pairs, want, "%s -np %d level %d: %d pairs, want %d", app, W, lv, pairs, want);
    }
    cr_assert_eq(levels, want_levels, "%s -np %d: %d level lines, want %d:\n%s", app, W, levels, want_levels, r.out);
    cr_assert(!strstr(r.out, "\"train_loss\""), "--plan trained:\n%s", r.out);
}

Test(exec, scan_plan_prints_ceil_log2_w_levels, .timeout = 300)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    for (int W = 1; W <= 4; W++) check_plan("demo", "--layers 16 --width 16 --batch 16 --threads 1", W);
    check_plan("rnn", "--seq-len 16 --samples 64 --batch 8 --threads 1", 4);
}

/* LeNet's stage costs (docs/distributed-lenet-costs.csv): at 4 ranks and a batch of 48 they
 * place layers 1-2 (4704 -> 1176 per sample) on rank 1 and conv2 (1176 -> 1600) on rank 2. */
static const char *lenet_scan_costs(void)
{
    const char *path = tu_tmp_path("lenet-costs.csv");
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "layer,fwd,bwd_grad,bwd_delta\n");
    const double c[12][3] = {{624.7, 1023.8, 0.1}, {119.4, 0.16, 253.9}, {58.6, 0.53, 127.9}, {310.9, 1642.0, 1600.9},
                             {105.1, 0.06, 56.4},  {102.2, 0.08, 76.6},  {3.3, 0.1, 39.3},    {247.5, 140.1, 184.8},
                             {1.4, 0.07, 1.8},     {37.4, 58.8, 72.1},   {0.87, 0.12, 1.63},  {13.65, 5.76, 3.24}};
    for (int s = 0; s < 12; s++) fprintf(f, "l%d,%g,%g,%g\n", s, c[s][0], c[s][1], c[s][2]);
    fclose(f);
    return path;
}

/* Every T the scan ends with is a vector, so no product it forms may be a matrix–matrix
 * one: each FLOPs figure of a level is at most 2·n·Σ in_r·out_r (every element applied
 * to a vector once). Forming T_1·T_2 as matrices, (4704 x 1176)·(1176 x 1600) per sample,
 * is 8.5e11 FLOPs at a batch of 48 — the minutes per step of 4 LeNet ranks. */
Test(exec, scan_levels_form_matrix_vector_products_only, .timeout = 120)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    if (access("/usr/share/datasets/fashion-mnist", R_OK) != 0) cr_skip_test("no Fashion-MNIST");
    static mpi_result r;
    char cmd[1024];
    const char *costs = lenet_scan_costs();
    const int n = 48;
    snprintf(cmd, sizeof cmd, "%s --batch %d --threads 1 --parallel scan --plan --costs %s", tu_bin_path("lenet"), n, costs);
    mpi_run("", "-np 4", cmd, &r);
    cr_assert_eq(r.status, 0, "plan: status %d\n%s", r.status, r.err);
    double elements = 0;
    int segments = 0, products = 0;
    for (const char *line = r.out; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        int rank, in, out;
        const char *bracket = strchr(line, '[');
        if (sscanf(line, "segment: rank %d", &rank) == 1 && bracket && sscanf(bracket, "[%d -> %d", &in, &out) == 2) {
            elements += (double)in * out;
            segments++;
        }
    }
    cr_assert_eq(segments, 4, "want 4 segment lines:\n%s", r.out);
    double bound = 2.0 * n * elements;
    for (const char *line = r.out; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, "level ", 6) != 0) continue;
        const char *end = strchr(line, '\n');
        for (const char *p = strstr(line, " FLOPs"); p && (!end || p < end); p = strstr(p + 1, " FLOPs")) {
            const char *num = p;
            while (num > line && num[-1] != ' ') num--;
            double flops = strtod(num, NULL);
            products++;
            cr_assert(flops <= bound, "a level forms a %.4g-FLOP product, more than the %.4g of matrix-vector "
                      "products:\n%s", flops, bound, r.out);
        }
    }
    cr_assert(products >= 1, "no product on the level lines:\n%s", r.out);
    remove(costs);
}

/* The run itself: one LeNet step on 4 ranks (2 cores in CI: oversubscribed) ends within
 * the default 60 s --comm-timeout, where it took minutes, and matches linear BP. */
Test(exec, lenet_scan_on_4_ranks_matches_linear_bp_within_the_timeout, .timeout = 300)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    if (access("/usr/share/datasets/fashion-mnist", R_OK) != 0) cr_skip_test("no Fashion-MNIST");
    static mpi_result r;
    char cmd[2048];
#define LENET_SCAN_FLAGS "--steps 1 --batch 48 --threads 1 --quiet"
    const char *costs = lenet_scan_costs(), *ref = tu_tmp_path("lscan-ref.safetensors"), *par = tu_tmp_path("lscan-par.safetensors");
    snprintf(cmd, sizeof cmd, "%s " LENET_SCAN_FLAGS " --save %s >/dev/null", tu_bin_path("lenet"), ref);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "%s " LENET_SCAN_FLAGS " --parallel scan --costs %s --save %s", tu_bin_path("lenet"), costs,
             par);
    mpi_run("", "-np 4", cmd, &r);
    cr_assert_eq(r.status, 0, "lenet scan -np 4: status %d after %.1f s\n%s", r.status, r.seconds, r.err);
    cr_assert(strstr(r.out, "\"workers\": 4"), "%s", r.out);
    bool bit;
    double d = compare(par, ref, &bit);
    cr_assert(d <= 1e-6, "lenet scan -np 4 vs linear BP: max rel diff %.3g > 1e-6", d);
    remove(par);
    remove(ref);
    remove(costs);
}

/* ---- ooo's data-parallel order ------------------------------------------------------------ */

Test(exec, ddp_with_ooo_order_gives_the_same_weights, .timeout = 300)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    static mpi_result r;
    char cmd[2048];
    const char *plan = plan_costs(), *a = tu_tmp_path("ddp.safetensors"), *b = tu_tmp_path("ddp-ooo.safetensors"),
               *order = tu_tmp_path("ooo-order.txt");
    snprintf(cmd, sizeof cmd, "%s " DEMO_FLAGS " --parallel ddp --microbatches 2 --bucket-mb 0.001 --save %s",
             tu_bin_path("demo"), a);
    mpi_run("", "-np 2", cmd, &r);
    cr_assert_eq(r.status, 0, "ddp: %s", r.err);
    snprintf(cmd, sizeof cmd,
             "%s " DEMO_FLAGS " --parallel ddp --backward ooo --microbatches 2 --bucket-mb 0.001 --exec-order %s "
             "--save %s",
             tu_bin_path("demo"), order, b);
    mpi_run("", "-np 2", cmd, &r);
    cr_assert_eq(r.status, 0, "ddp --backward ooo: %s", r.err);
    bool bit;
    double d = compare(b, a, &bit);
    cr_assert(bit, "ddp with and without ooo's order: not bitwise (max rel %.3g)", d);
    /* 4 parameterised layers (stages 0, 2, 4, 6), k = half = 2: the first k stages are 0..2 */
    check_order_k("ddp-ooo", 2, 2, 3, order, plan);
    remove(a);
    remove(b);
    remove(plan);
}

/* ---- pipelines as per-rank action lists ---------------------------------------------------
 *
 * Each generator of gen_basic.c trains the demo MLP (--layers 5: 9 stages, room for two
 * chunks on each of 4 ranks) under -np 2 and -np 4 to the single-process weights (1e-6)
 * and bitwise to the same scheme on one rank (each chunk sums its micro-batches'
 * gradients in the list's order whatever the rank count); the executed order per rank is
 * the simulated one — the list expanded to the layers, from schedule.h and actions.h alone
 * (demo_ranks runs the LIST rows of the scheme table). */

static void check_list_order(const char *scheme, int W, int micro, const char *order_path, const char *costs_path)
{
    sp_costs *c = sp_costs_read_csv(costs_path);
    sp_actions *a;
    /* the list as the executor builds it (exec_setup.c): from the same costs, since a
     * generator may pick another list for other costs (zb-h1 and zb-h2 keep the papers'
     * heuristic where it is shorter) */
    const sp_pp_generator *g = sp_pp_find(scheme);
    const sp_costs *gc = (long)W * g->default_chunks_per_rank <= c->stages ? c : NULL;
    cr_assert_eq(sp_pp_generate_from_costs(g, gc, W, micro, 0, 0, false, 0, &a), SP_OK, "%s", sp_last_error());
    sp_sched_config sc = {.stages = c->stages, .split = -1, .no_input_grad = true, .actions_scheme = scheme};
    sp_schedule *s = sp_schedule_from_actions(a, &sc, c);
    sp_sim sim;
    sp_simulate(s, c, &sim);
    char what[64];
    snprintf(what, sizeof what, "%s -np %d", scheme, W);
    check_order_lines(what, s, &sim, W, order_path);
    sp_sim_free(&sim);
    sp_schedule_free(s);
    sp_actions_free(a);
    sp_costs_free(c);
    remove(order_path);
}

/* LeNet (12 stages) under the LIST rows LeNet runs on 2 ranks, zb-h1 and interleaved-1f1b
 * (two chunks on each of 4 ranks) on 4, and a list exported by build/schedule
 * --actions-out run as --parallel custom: the single-process weights. */
Test(exec, lenet_action_lists_match_single_process, .timeout = 600)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    if (access("/usr/share/datasets/fashion-mnist", R_OK) != 0) cr_skip_test("no Fashion-MNIST");
    char cmd[2048];
    const char *ref = tu_tmp_path("ll-ref.safetensors"), *csv = tu_tmp_path("ll-list.csv");
    snprintf(cmd, sizeof cmd, "%s " LENET_FLAGS " --save %s >/dev/null", tu_bin_path("lenet"), ref);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "%s --scheme zb-h1 --stages 12 --workers 2 --microbatches 4 --no-diagram --actions-out %s "
             ">/dev/null", tu_bin_path("schedule"), csv);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    char custom[700];
    snprintf(custom, sizeof custom, "--actions %s", csv);
    lenet_run runs[NSCHEMES + 3];
    int n = lenet_rows(LIST, runs);
    runs[n++] = (lenet_run){scheme_find("zb-h1"), "zb-h1", "", 4, false};
    runs[n++] = (lenet_run){scheme_find("interleaved-1f1b"), "interleaved-1f1b", "--chunks 2", 4, false};
    runs[n++] = (lenet_run){NULL, "custom", custom, 2, false};
    for (int i = 0; i < n; i++) runs[i].bitwise = false;   /* no one-rank run here */
    lenet_match(runs, n, ref, NULL);
    remove(csv);
    remove(ref);
}

/* Interleaving with m not a multiple of p: interleaved-1f1b and interleaved-zb on 4 ranks
 * with 6 micro-batches (one round of 6, as PyTorch builds it) and 9 (rounds of 5 and 4,
 * which PyTorch refuses), two chunks each, end with the single process's weights. */
Test(exec, interleaving_any_m_matches_single_process, .timeout = 300)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    static mpi_result r;
    char cmd[2048];
    const char *ref = tu_tmp_path("im-ref.safetensors"), *par = tu_tmp_path("im-par.safetensors");
    const char *flags = "--layers 5 --steps 3 --batch 36 --threads 1 --quiet";
    snprintf(cmd, sizeof cmd, "%s %s --save %s >/dev/null", tu_bin_path("demo"), flags, ref);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    const char *schemes[] = {"interleaved-1f1b", "interleaved-zb"};
    const int micro[] = {6, 9};
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 2; j++) {
            snprintf(cmd, sizeof cmd, "%s %s --parallel %s --chunks 2 --microbatches %d --save %s", tu_bin_path("demo"),
                     flags, schemes[k], micro[j], par);
            mpi_run("", "-np 4", cmd, &r);
            cr_assert_eq(r.status, 0, "%s m%d: status %d\n%s", schemes[k], micro[j], r.status, r.err);
            check_json(schemes[k], schemes[k], 4, r.out);
            bool bit;
            double d = compare(par, ref, &bit);
            cr_assert(d <= 1e-6, "%s m%d -np 4 vs single process: max rel diff %.3g > 1e-6", schemes[k], micro[j], d);
            remove(par);
        }
    remove(ref);
}

/* Lists that cannot run or do not fit are refused before any work, in one line, exit 2. */
Test(exec, action_lists_that_cannot_run_are_refused_before_work, .timeout = 120)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    static mpi_result r;
    const char *cyc = tu_tmp_path("cycle.csv"), *two = tu_tmp_path("tworanks.csv");
    FILE *f = fopen(cyc, "w");   /* rank 0 waits for 0I0 before its own 0F0 can exist */
    cr_assert_not_null(f);
    fprintf(f, "0I0,0F0,0W0\n1F0,1I0,1W0\n");
    fclose(f);
    f = fopen(two, "w");
    cr_assert_not_null(f);
    fprintf(f, "0F0,0F1,0I0,0W0,0I1,0W1\n1F0,1I0,1W0,1F1,1I1,1W1\n");
    fclose(f);
    char a1[600], a2[600], a3[600];
    snprintf(a1, sizeof a1, "--layers 4 --parallel custom --actions %s", cyc);
    snprintf(a2, sizeof a2, "--layers 4 --parallel custom --actions %s", two);
    snprintf(a3, sizeof a3, "--layers 4 --parallel custom --actions %s --microbatches 4 --batch 32", two);
    struct {
        const char *np, *flags, *want;
    } cases[] = {
        {"-np 2", a1, "rank 0: action 0I0 (line 1, cell 1) waits for 0F0"},
        {"-np 4", a2, "has 2 ranks, mpirun started 4 (expected mpirun -np 2)"},
        {"-np 2", a3, "--microbatches 4 but"},   /* as build/schedule --scheme custom refuses it */
        {"-np 4", "--layers 2 --parallel looped-bfs", "8 chunks for the model's 3 layers"},
        {"-np 2", "--layers 4 --parallel custom", "--parallel custom needs --actions FILE.csv"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "%s --steps 3 --threads 1 --quiet %s", tu_bin_path("demo"), cases[i].flags);
        mpi_run("", cases[i].np, cmd, &r);
        cr_assert_eq(r.status, 2, "%s: status %d, want 2\n%s", cases[i].flags, r.status, r.err);
        cr_assert(strstr(r.err, cases[i].want), "%s: stderr lacks '%s':\n%s", cases[i].flags, cases[i].want, r.err);
        cr_assert_eq(count_lines(r.err, "scanprop: "), 1, "%s: want one line:\n%s", cases[i].flags, r.err);
        cr_assert(!strstr(r.out, "\"app\""), "%s: work was done: %s", cases[i].flags, r.out);
    }
    remove(cyc);
    remove(two);
}

/* ---- activation memory: what the executor measures is what the simulator predicts -------- */

/* "key": [a, b, ...] of the JSON line into v[0..n). */
static void json_array(const char *out, const char *key, double *v, int n)
{
    char k[96];
    snprintf(k, sizeof k, "\"%s\": [", key);
    const char *p = strstr(out, k);
    cr_assert_not_null(p, "no %s in the JSON line: %s", key, out);
    p += strlen(k);
    for (int i = 0; i < n; i++) {
        char *end;
        v[i] = strtod(p, &end);
        cr_assert(end != p, "%s has fewer than %d values: %s", key, n, out);
        for (p = end; *p == ',' || *p == ' ';) p++;
    }
    cr_assert_eq(*p, ']', "%s has more than %d values: %s", key, n, out);
}

/* Every scheme at p = 2 on LeNet: each rank's measured peak of activation bytes (the
 * JSON's peak_activation_bytes) equals the peak this process simulates, independently,
 * for the same schedule — costs from the model as build/schedule --model derives them,
 * the executor planning with the same durations (--costs) — byte for byte. */
Test(exec, measured_peak_activations_equal_the_simulated_ones, .timeout = 600)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    if (access("/usr/share/datasets/fashion-mnist", R_OK) != 0) cr_skip_test("no Fashion-MNIST");
    enum { W = 2, BATCH = 16, NMICRO = 4 };
    sp_set_threads(1);   /* conv keeps one scratch slot per thread: the ranks run --threads 1 */
    sp_model *m = sp_zoo_model("lenet");
    int shape[3], nd = sp_zoo_input_shape("lenet", shape);
    sp_costs *model = sp_costs_from_model(m, nd, shape, BATCH / NMICRO, 1.0);
    const char *plan = tu_tmp_path("lenet-plan.csv");
    FILE *f = fopen(plan, "w");
    cr_assert_not_null(f);
    sp_costs_write_csv(f, model);
    fclose(f);
    sp_costs *c = sp_costs_read_csv(plan);   /* the durations the executor plans with */
    for (int s = 0; s < c->stages; s++) cr_assert_eq(c->act_bytes[s], model->act_bytes[s], "stage %d", s);
    /* ddp-ooo: the executor's default first k, half the parameterised layers */
    int params = 0, first_k = 0;
    for (int s = 0; s < m->nlayers; s++) params += m->layers[s]->nparams > 0;
    for (int s = 0, seen = 0; s < m->nlayers && seen < params / 2; s++)
        if (m->layers[s]->nparams > 0 && ++seen == params / 2) first_k = s + 1;
    static mpi_result r;
    char cmd[2048], costs[600];
    for (int i = 0; i <= NSCHEMES; i++) {   /* every row, and ddp with ooo's order */
        if (i < NSCHEMES && schemes[i].chunks) continue;   /* run at its defaults by its own row */
        const char *name = i < NSCHEMES ? schemes[i].name : "ddp-ooo";
        bool data = !strncmp(name, "ddp", 3);   /* the order of ddp does not depend on costs (refused there) */
        snprintf(costs, sizeof costs, "%s%s", data ? "" : "--costs ", data ? "" : plan);
        snprintf(cmd, sizeof cmd, "%s --steps 2 --batch %d --threads 1 --quiet --parallel %s --microbatches %d %s",
                 tu_bin_path("lenet"), BATCH, name, NMICRO, costs);
        mpi_run("", "-np 2", cmd, &r);
        cr_assert_eq(r.status, 0, "lenet %s: status %d\n%s", name, r.status, r.err);
        sp_sched_config sc = {.stages = c->stages, .micro = NMICRO, .workers = W, .split = -1, .no_input_grad = true,
                              .first_k = !strcmp(name, "ddp-ooo") ? first_k : 0};
        if (scheme_find(name) && scheme_find(name)->groups) sc.groups = 1, sc.per_group = W;
        /* the action-list schemes: the generator's list with the chunks' summed costs, as the
         * executor builds it (--chunks and --mem-limit left at their defaults) */
        const sp_pp_generator *g = sp_pp_find(name);
        sp_actions *a = NULL;
        if (g) {
            cr_assert_eq(sp_pp_generate_from_costs(g, c, W, NMICRO, 0, 0, false, 0, &a), SP_OK, "lenet %s: %s", name,
                         sp_last_error());
            sc.actions_scheme = name;
        }
        sp_schedule *s = a ? sp_schedule_from_actions(a, &sc, c) : sp_schedule_new(sp_scheme_find(name), &sc, c);
        sp_sim sim;
        sp_simulate(s, c, &sim);
        cr_assert_eq(sim.workers, W, "lenet %s: %d workers simulated", name, sim.workers);
        double measured[W], simulated[W];
        json_array(r.out, "peak_activation_bytes", measured, W);
        json_array(r.out, "simulated_peak_activation_bytes", simulated, W);
        for (int w = 0; w < W; w++) {
            cr_assert(measured[w] > 0, "lenet %s: rank %d measured no activations", name, w);
            cr_assert_eq(measured[w], sim.worker[w].peak_act_bytes, "lenet %s rank %d: measured %.0f bytes, simulated %.0f",
                         name, w, measured[w], sim.worker[w].peak_act_bytes);
            cr_assert_eq(simulated[w], measured[w], "lenet %s rank %d: the run's own simulation %.0f, measured %.0f", name,
                         w, simulated[w], measured[w]);
        }
        sp_sim_free(&sim);
        sp_schedule_free(s);
        if (a) sp_actions_free(a);
    }
    sp_costs_free(c);
    sp_costs_free(model);
    sp_model_free(m);
    remove(plan);
}

/* ---- the step's end: --clip-grad-norm across ranks ---------------------------------------- */

/* ddp and gpipe at -np 2 with a clip that triggers every step end with the weights of
 * the clipped single process (1e-6); post-validation and the plain synchronisation give
 * bitwise the same weights, post-validation by rolling every step back (the JSON counts
 * it); a clip that never triggers rolls nothing back and leaves the unclipped weights. */
Test(exec, clip_grad_norm_across_ranks, .timeout = 300)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    static mpi_result r;
    char cmd[2048];
    const char *ref = tu_tmp_path("clip-ref.safetensors"), *plain = tu_tmp_path("clip-plain.safetensors"),
               *post = tu_tmp_path("clip-post.safetensors");
    snprintf(cmd, sizeof cmd, "%s " DEMO_FLAGS " --clip-grad-norm 0.001 --save %s >/dev/null", tu_bin_path("demo"), ref);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    const char *schemes[] = {"ddp", "gpipe"};
    for (int i = 0; i < 2; i++) {
        for (int pv = 0; pv < 2; pv++) {
            snprintf(cmd, sizeof cmd, "%s " DEMO_FLAGS " --parallel %s --microbatches %d --clip-grad-norm 0.001 "
                     "--step-sync %s --save %s", tu_bin_path("demo"), schemes[i], MICRO, pv ? "post-validate" : "plain",
                     pv ? post : plain);
            mpi_run("", "-np 2", cmd, &r);
            cr_assert_eq(r.status, 0, "%s: status %d\n%s", cmd, r.status, r.err);
            cr_assert_eq(json_number(r.out, "steps_clipped"), 4, "%s: the clip did not trigger every step: %s", cmd, r.out);
            cr_assert_eq(json_number(r.out, "clip_rollbacks"), pv ? 4 : 0, "%s: %s", cmd, r.out);
            bool bit;
            double d = compare(pv ? post : plain, ref, &bit);
            cr_assert(d <= 1e-6, "%s vs the clipped single process: max rel %.3g", cmd, d);
        }
        bool bit;
        compare(post, plain, &bit);
        cr_assert(bit, "%s: post-validated and plain weights differ", schemes[i]);
    }
    /* a clip far above the norm: no rollback, the weights of the run without a clip */
    snprintf(cmd, sizeof cmd, "%s " DEMO_FLAGS " --parallel ddp --microbatches %d --save %s", tu_bin_path("demo"), MICRO, plain);
    mpi_run("", "-np 2", cmd, &r);
    cr_assert_eq(r.status, 0, "%s\n%s", cmd, r.err);
    snprintf(cmd, sizeof cmd, "%s " DEMO_FLAGS " --parallel ddp --microbatches %d --clip-grad-norm 1e9 --save %s",
             tu_bin_path("demo"), MICRO, post);
    mpi_run("", "-np 2", cmd, &r);
    cr_assert_eq(r.status, 0, "%s\n%s", cmd, r.err);
    cr_assert_eq(json_number(r.out, "steps_clipped"), 0, "%s", r.out);
    cr_assert_eq(json_number(r.out, "clip_rollbacks"), 0, "%s", r.out);
    bool bit;
    compare(post, plain, &bit);
    cr_assert(bit, "ddp with a clip that never triggers: weights differ from the run without one");
    remove(ref);
    remove(plain);
    remove(post);
}

/* ---- issue 26: the V-shaped and automatic schemes (gen_v.c, gen_auto.c) run, and every
 * action-list scheme survives export and re-import ----------------------------------------
 *
 * zbv, v-half, v-min, dualpipev and zb-auto (under a --mem-limit that binds) train the demo
 * MLP (--layers 5: 9 stages, enough for 2 chunks on each of 4 ranks) and LeNet (12 stages)
 * under mpirun -np 2 and -np 4 to the single-process weights (max rel diff 1e-6, the rule
 * of the gen_basic.c schemes above), and each rank's executed order (--exec-order) is the
 * order this process simulates for the generator's list — built as the executor builds it:
 * the chunks' summed costs of the same --costs file, the default chunks per rank, the same
 * --mem-limit. Micro-batches 2W: dualpipev needs m >= 2p. */

/* The scheme's flags beyond --parallel: zb-auto's memory limit (its row's column). */
static const char *vl_extra(const char *scheme)
{
    return scheme_flags(scheme_find(scheme));
}

/* The generator's list of a row for W ranks and `micro` micro-batches with the chunk
 * costs of c (the row's --mem-limit and --chunks). */
static sp_actions *vl_generate(const scheme_row *row, int W, int micro, const sp_costs *c)
{
    const sp_pp_generator *g = sp_pp_find(row->name);
    cr_assert_not_null(g, "%s: not an action-list scheme", row->name);
    sp_actions *a = NULL;
    cr_assert_eq(sp_pp_generate_from_costs(g, c, W, micro, row->chunks, row->mem_limit, false, 0, &a), SP_OK, "%s: %s",
                 row->name, sp_last_error());
    return a;
}

/* Each line "wR job job ..." of order_path equals rank R's simulated order of list a. */
static void vl_check_order(const char *what, const char *scheme, sp_actions *a, const sp_costs *c,
                           const char *order_path)
{
    sp_sched_config sc = {.stages = c->stages, .split = -1, .no_input_grad = true, .actions_scheme = scheme};
    sp_schedule *s = sp_schedule_from_actions(a, &sc, c);
    cr_assert_not_null(s, "%s: %s", what, sp_last_error());
    sp_sim sim;
    sp_simulate(s, c, &sim);
    check_order_lines(what, s, &sim, a->ranks, order_path);
    sp_sim_free(&sim);
    sp_schedule_free(s);
}

/* app ("demo" with app_flags, or "lenet") under scheme at -np 2 and -np 4 against the
 * single-process weights ref, with the executed order checked; plan is the --costs file. */
static void vl_run(const char *app, const char *app_flags, const scheme_row *row, const char *plan, const char *ref)
{
    const char *scheme = row->name;
    static mpi_result r;
    char cmd[2048], par[512], order[512], what[128];
    snprintf(par, sizeof par, "%s/vl-par.safetensors", tu_tmpdir());
    snprintf(order, sizeof order, "%s/vl-order.txt", tu_tmpdir());
    sp_costs *c = sp_costs_read_csv(plan);
    cr_assert_not_null(c, "%s", plan);
    for (int W = 2; W <= 4; W += 2) {
        snprintf(what, sizeof what, "%s %s %s -np %d", app, scheme, scheme_flags(row), W);
        snprintf(cmd, sizeof cmd, "%s %s --parallel %s %s --microbatches %d --costs %s --save %s --exec-order %s",
                 tu_bin_path(app), app_flags, scheme, scheme_flags(row), 2 * W, plan, par, order);
        char np[16];
        snprintf(np, sizeof np, "-np %d", W);
        mpi_run("", np, cmd, &r);
        cr_assert_eq(r.status, 0, "%s: status %d\n%s", what, r.status, r.err);
        check_json(what, scheme, W, r.out);
        bool bit;
        double d = compare(par, ref, &bit);
        cr_assert(d <= 1e-6, "%s vs single process: max rel diff %.3g > 1e-6", what, d);
        sp_actions *a = vl_generate(row, W, 2 * W, c);
        vl_check_order(what, scheme, a, c, order);
        sp_actions_free(a);
        remove(par);
        remove(order);
    }
    sp_costs_free(c);
}

#define VL_DEMO LIST_FLAGS

/* A V row: the demo under the scheme at -np 2 and -np 4 (vl_run). */
static void vl_demo(const scheme_row *row)
{
    char ref[512], cmd[2048];
    const char *plan = list_costs();   /* uneven costs of the 9 stages */
    snprintf(ref, sizeof ref, "%s/vl-demo-ref.safetensors", tu_tmpdir());
    snprintf(cmd, sizeof cmd, "%s " VL_DEMO " --save %s >/dev/null", tu_bin_path("demo"), ref);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    vl_run("demo", VL_DEMO, row, plan, ref);
    remove(plan);
    remove(ref);
}

/* The runner of a row of the scheme table (the tests exec/demo_ID). */
static void demo_run(const scheme_row *row)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    cr_assert_not_null(row);
    if (row->kind == V) vl_demo(row);
    else demo_ranks(row);
}

/* LeNet under the V rows LeNet runs, the costs those of build/schedule --model lenet. */
Test(exec, lenet_v_and_auto_lists_match_single_process, .timeout = 900)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    if (access("/usr/share/datasets/fashion-mnist", R_OK) != 0) cr_skip_test("no Fashion-MNIST");
    char ref[512], plan[512], cmd[2048];
    snprintf(ref, sizeof ref, "%s/vl-lenet-ref.safetensors", tu_tmpdir());
    snprintf(plan, sizeof plan, "%s/vl-lenet-plan.csv", tu_tmpdir());
    snprintf(cmd, sizeof cmd, "%s --model lenet --batch-size 4 --scheme gpipe --microbatches 4 --no-diagram "
             "--costs-out %s >/dev/null", tu_bin_path("schedule"), plan);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "%s " LENET_FLAGS " --save %s >/dev/null", tu_bin_path("lenet"), ref);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    for (int i = 0; i < NSCHEMES; i++)
        if (schemes[i].kind == V && schemes[i].lenet) vl_run("lenet", LENET_FLAGS, &schemes[i], plan, ref);
    remove(plan);
    remove(ref);
}

/* The simulated latency of build/schedule's JSON line ("latency":X) for cmd. */
static double vl_latency(const char *cmd)
{
    static char out[1 << 16];
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f, "%s", cmd);
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    cr_assert_eq(pclose(f), 0, "%s", cmd);
    const char *p = strstr(out, "\"latency\":");
    cr_assert_not_null(p, "%s: no latency in: %s", cmd, out);
    return strtod(p + strlen("\"latency\":"), NULL);
}

/* Export and re-import: every scheme of the registry (gen_basic.c, gen_v.c, gen_auto.c; zb-auto
 * with its --mem-limit), its list written by build/schedule --actions-out from the same
 * --costs file and run as --parallel custom --actions on the demo at -np 2, executes the
 * scheme's own order on every rank and ends with bitwise the scheme's own weights; build/schedule
 * simulates the re-imported list to the scheme's own latency. */
Test(exec, every_action_list_scheme_round_trips_through_custom, .timeout = 600)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    enum { W = 2, M = 4 };
    static mpi_result r;
    static char o1[65536], o2[65536];
    char cmd[2048], csv[512], own[512], cus[512], ord1[512], ord2[512];
    const char *plan = list_costs();
    snprintf(csv, sizeof csv, "%s/rt-list.csv", tu_tmpdir());
    snprintf(own, sizeof own, "%s/rt-own.safetensors", tu_tmpdir());
    snprintf(cus, sizeof cus, "%s/rt-custom.safetensors", tu_tmpdir());
    snprintf(ord1, sizeof ord1, "%s/rt-own-order.txt", tu_tmpdir());
    snprintf(ord2, sizeof ord2, "%s/rt-custom-order.txt", tu_tmpdir());
    cr_assert_geq(sp_pp_count(), 10, "the registry lists %d schemes", sp_pp_count());
    for (int i = 0; i < sp_pp_count(); i++) {
        const char *scheme = sp_pp_at(i)->name;
        snprintf(cmd, sizeof cmd, "%s --scheme %s %s --profile %s --workers %d --microbatches %d --no-input-grad "
                 "--no-diagram --actions-out %s", tu_bin_path("schedule"), scheme, vl_extra(scheme), plan, W, M, csv);
        double lat = vl_latency(cmd);
        snprintf(cmd, sizeof cmd, "%s --scheme custom --actions %s --profile %s --no-input-grad --no-diagram",
                 tu_bin_path("schedule"), csv, plan);
        double lat2 = vl_latency(cmd);
        cr_assert(lat > 0 && lat2 == lat, "%s: simulated latency %g, re-imported %g", scheme, lat, lat2);
        snprintf(cmd, sizeof cmd, "%s " VL_DEMO " --parallel %s %s --microbatches %d --costs %s --save %s --exec-order %s",
                 tu_bin_path("demo"), scheme, vl_extra(scheme), M, plan, own, ord1);
        mpi_run("", "-np 2", cmd, &r);
        cr_assert_eq(r.status, 0, "%s: status %d\n%s", scheme, r.status, r.err);
        snprintf(cmd, sizeof cmd, "%s " VL_DEMO " --parallel custom --actions %s --microbatches %d --costs %s --save %s "
                 "--exec-order %s", tu_bin_path("demo"), csv, M, plan, cus, ord2);
        mpi_run("", "-np 2", cmd, &r);
        cr_assert_eq(r.status, 0, "%s re-imported: status %d\n%s", scheme, r.status, r.err);
        cr_assert(strstr(r.out, "\"parallel\": \"custom\""), "%s re-imported: JSON line: %s", scheme, r.out);
        FILE *f1 = fopen(ord1, "r"), *f2 = fopen(ord2, "r");
        cr_assert(f1 && f2, "%s: no --exec-order files", scheme);
        size_t n1 = fread(o1, 1, sizeof o1 - 1, f1), n2 = fread(o2, 1, sizeof o2 - 1, f2);
        o1[n1] = o2[n2] = 0;
        fclose(f1);
        fclose(f2);
        cr_assert(n1 > 0, "%s: empty --exec-order file", scheme);
        cr_assert_str_eq(o2, o1, "%s: the re-imported list executes another order", scheme);
        bool bit;
        double d = compare(cus, own, &bit);
        cr_assert(bit, "%s: the re-imported list's weights differ from the scheme's (max rel %.3g)", scheme, d);
        remove(csv);
        remove(own);
        remove(cus);
        remove(ord1);
        remove(ord2);
    }
    remove(plan);
}

/* ---- the time scan's levels: Blelloch against Hillis–Steele ---------------------------------- */

/* $SCANPROP_SCAN_ALGO forces the levels. Both against BPTT within 1e-6, and against each
 * other within 1e-6: Blelloch multiplies segment products into each other (H × H × H)
 * where Hillis–Steele applies them one by one to the vector, so the sums round in a
 * different order and the weights after the SGD steps are not bitwise equal. The JSON
 * line names the levels that ran. */
static void blelloch_vs_hs(const char *app, const char *flags, int W)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    static mpi_result r;
    char cmd[2048], np[16];
    const char *ref = tu_tmp_path("bl-ref.safetensors"), *bl = tu_tmp_path("bl-bl.safetensors"), *hs = tu_tmp_path("bl-hs.safetensors");
    snprintf(cmd, sizeof cmd, "%s %s --save %s >/dev/null", tu_bin_path(app), flags, ref);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    snprintf(np, sizeof np, "-np %d", W);
    const char *algo[2] = {"blelloch", "hillis-steele"}, *out[2] = {bl, hs};
    for (int k = 0; k < 2; k++) {
        char env[64], want[64];
        snprintf(env, sizeof env, "SCANPROP_SCAN_ALGO=%s", algo[k]);
        snprintf(cmd, sizeof cmd, "%s %s --parallel scan --save %s", tu_bin_path(app), flags, out[k]);
        mpi_run(env, np, cmd, &r);
        cr_assert_eq(r.status, 0, "%s %s -np %d: status %d\n%s", app, algo[k], W, r.status, r.err);
        snprintf(want, sizeof want, "\"scan_algo\": \"%s\"", algo[k]);
        cr_assert(strstr(r.out, want), "%s -np %d: want %s in\n%s", app, W, want, r.out);
        bool bit;
        double d = compare(out[k], ref, &bit);
        cr_assert(d <= 1e-6, "%s %s -np %d vs linear BP: max rel diff %.3g > 1e-6", app, algo[k], W, d);
    }
    bool bit;
    double d = compare(bl, hs, &bit);
    cr_assert(d <= 1e-6, "%s -np %d: blelloch vs hillis-steele: max rel diff %.3g > 1e-6", app, W, d);
    remove(ref);
    remove(bl);
    remove(hs);
}

Test(exec, time_scan_blelloch_equals_hillis_steele_and_bptt_for_an_rnn_chain, .timeout = 300)
{
    const char *f = "--seq-len 16 --samples 64 --hidden 16 --batch 8 --steps 4 --optim sgd --lr 0.1 --threads 1 --quiet";
    blelloch_vs_hs("rnn", f, 4);
    blelloch_vs_hs("rnn", f, 5);
}

Test(exec, time_scan_blelloch_equals_hillis_steele_and_bptt_for_a_gru_chain, .timeout = 300)
{
    blelloch_vs_hs("gru", "--shape S --samples 8 --batch 4 --steps 2 --optim sgd --lr 0.1 --threads 1 --quiet", 4);
}

/* The Blelloch plan: 2⌈log₂(W−1)⌉ levels, each rank in at most one message a level, at
 * most W − 2 messages in each sweep (O(W), against Hillis–Steele's O(W log W)). */
Test(exec, time_scan_blelloch_plan_has_two_log_levels_and_linear_messages, .timeout = 120)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    static mpi_result r;
    for (int W = 3; W <= 6; W++) {
        char cmd[512], np[16];
        snprintf(cmd, sizeof cmd, "%s --seq-len 12 --samples 16 --hidden 8 --batch 4 --parallel scan --plan",
                 tu_bin_path("rnn"));
        snprintf(np, sizeof np, "-np %d", W);
        mpi_run("SCANPROP_SCAN_ALGO=blelloch", np, cmd, &r);
        cr_assert_eq(r.status, 0, "-np %d: status %d\n%s", W, r.status, r.err);
        int depth = 0;
        while ((1 << depth) < W - 1) depth++;
        char key[64];
        snprintf(key, sizeof key, "\"levels\": %d", 2 * depth);
        cr_assert(strstr(r.out, key), "-np %d: want %s:\n%s", W, key, r.out);
        int lines = 0, msgs[2] = {0, 0};
        for (const char *line = r.out; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
            int down = !strncmp(line, "down-sweep level", 16);
            if (strncmp(line, "up-sweep level", 14) != 0 && !down) continue;
            lines++;
            const char *end = strchr(line, '\n');
            bool busy[64] = {false};
            for (const char *p = strstr(line, "rank "); p && (!end || p < end); p = strstr(p + 1, "rank ")) {
                int a, b;
                if (sscanf(p, "rank %d -> rank %d", &a, &b) != 2) continue;
                cr_assert(a >= 1 && b >= 1 && a < W && b < W && !busy[a] && !busy[b],
                          "-np %d: rank 0 or a rank twice in one level: %.*s", W, (int)(end ? end - line : 80), line);
                busy[a] = busy[b] = true;
                msgs[down]++;
            }
        }
        cr_assert_eq(lines, 2 * depth, "-np %d: %d level lines, want %d:\n%s", W, lines, 2 * depth, r.out);
        cr_assert(msgs[0] == W - 2 && msgs[1] <= W - 2, "-np %d: %d up-sweep and %d down-sweep messages (want %d, <= %d)",
                  W, msgs[0], msgs[1], W - 2, W - 2);
    }
}

/* ---- the whole memory per rank: predicted == measured --------------------------------------- */

/* Every scheme at p = 2 on LeNet: each rank's whole memory as the executor measures it
 * from its buffers (the JSON's peak_memory_bytes: weights, gradients, optimizer state,
 * bucket buffers, activations) equals the prediction (predicted_peak_memory_bytes) and
 * what this process predicts for the same schedule; sgd with momentum holds one state
 * float per parameter, adam two. fsdp and fslpp: the executor keeps an owner's
 * broadcast weights for the whole step where the simulator holds them per job, so
 * measured − predicted lies in [0, the weights this rank computes but does not own]. */
Test(exec, measured_memory_equals_the_predicted_memory, .timeout = 600)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    if (access("/usr/share/datasets/fashion-mnist", R_OK) != 0) cr_skip_test("no Fashion-MNIST");
    enum { W = 2, BATCH = 16, NMICRO = 4 };
    sp_set_threads(1);
    sp_model *m = sp_zoo_model("lenet");
    int shape[3], nd = sp_zoo_input_shape("lenet", shape);
    sp_costs *model = sp_costs_from_model(m, nd, shape, BATCH / NMICRO, 1.0);
    const char *plan = tu_tmp_path("lenet-mem-plan.csv");
    FILE *f = fopen(plan, "w");
    cr_assert_not_null(f);
    sp_costs_write_csv(f, model);
    fclose(f);
    sp_costs *c = sp_costs_read_csv(plan);
    int params = 0, first_k = 0;
    for (int s = 0; s < m->nlayers; s++) params += m->layers[s]->nparams > 0;
    for (int s = 0, seen = 0; s < m->nlayers && seen < params / 2; s++)
        if (m->layers[s]->nparams > 0 && ++seen == params / 2) first_k = s + 1;
    struct { const char *scheme, *optim; int slots; } runs[] = {
        {"ddp", "--optim sgd", 1}, {"ddp-ooo", "", 1}, {"fsdp", "", 1}, {"gpipe", "", 1}, {"1f1b", "", 1},
        {"lpp", "", 1}, {"fslpp", "", 1}, {"ooo-ff", "", 1}, {"ooo-modulo", "", 1},
        {"ddp", "--optim adam", 2}, {"gpipe", "--optim sgd --momentum 0", 0},
    };
    static mpi_result r;
    char cmd[2048], costs[600];
    double first_ddp = 0;
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        const char *name = runs[i].scheme;
        bool data = !strncmp(name, "ddp", 3);
        snprintf(costs, sizeof costs, "%s%s", data ? "" : "--costs ", data ? "" : plan);
        snprintf(cmd, sizeof cmd, "%s --steps 2 --batch %d --threads 1 --quiet --parallel %s --microbatches %d %s %s",
                 tu_bin_path("lenet"), BATCH, name, NMICRO, costs, runs[i].optim);
        mpi_run("", "-np 2", cmd, &r);
        cr_assert_eq(r.status, 0, "lenet %s: status %d\n%s", name, r.status, r.err);
        sp_sched_config sc = {.stages = c->stages, .micro = NMICRO, .workers = W, .split = -1, .no_input_grad = true,
                              .first_k = !strcmp(name, "ddp-ooo") ? first_k : 0};
        if (scheme_find(name) && scheme_find(name)->groups) sc.groups = 1, sc.per_group = W;
        sp_schedule *s = sp_schedule_new(sp_scheme_find(name), &sc, c);
        sp_sim sim;
        sp_simulate(s, c, &sim);
        double measured[W], predicted[W];
        json_array(r.out, "peak_memory_bytes", measured, W);
        json_array(r.out, "predicted_peak_memory_bytes", predicted, W);
        bool owners = !strcmp(name, "fsdp") || !strcmp(name, "fslpp");
        for (int w = 0; w < W; w++) {
            sp_mem_breakdown b;
            sp_sim_memory_breakdown(s, c, &sim, runs[i].slots, w, &b);
            cr_assert_eq(predicted[w], b.total, "lenet %s %s rank %d: the run predicts %.0f, this process %.0f", name,
                         runs[i].optim, w, predicted[w], b.total);
            cr_assert(b.weights > 0 || b.grads > 0, "lenet %s rank %d: no parameters", name, w);
            cr_assert_eq(b.optim, runs[i].slots * b.weights);
            if (!owners) {
                cr_assert_eq(measured[w], predicted[w], "lenet %s %s rank %d: measured %.0f bytes, predicted %.0f", name,
                             runs[i].optim, w, measured[w], predicted[w]);
                continue;
            }
            double fetched = 0;   /* stages computed here with weights elsewhere */
            for (int st = 0; st < s->stages; st++) {
                bool here = false, own = false;
                for (int j = 0; j < s->njobs; j++)
                    if (s->jobs[j].stage == st) here |= s->compute[j] == w, own |= s->weights[j] == w;
                if (here && !own) fetched += c->param_bytes[st];
            }
            cr_assert(measured[w] >= predicted[w] && measured[w] - predicted[w] <= fetched,
                      "lenet %s rank %d: measured %.0f, predicted %.0f, fetched weights %.0f", name, w, measured[w],
                      predicted[w], fetched);
        }
        if (i == 0) first_ddp = measured[0];
        if (i == 9) {   /* adam: one more state float per parameter than sgd's momentum (ddp: all of them) */
            double all = 0;
            for (int st = 0; st < c->stages; st++) all += c->param_bytes[st];
            cr_assert_eq(measured[0] - first_ddp, all, "adam %.0f, sgd %.0f, parameters %.0f bytes", measured[0],
                         first_ddp, all);
        }
        sp_sim_free(&sim);
        sp_schedule_free(s);
    }
    sp_costs_free(c);
    sp_costs_free(model);
    sp_model_free(m);
    remove(plan);
}


/* ---- the prediction: every simulated message is one the executor sent ------------------- */

/* The lines of a file after its header (NULL-terminated list in buf). */
static int read_lines(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = 0;
    fclose(f);
    char *p = strchr(buf, '\n');
    if (p) memmove(buf, p + 1, strlen(p + 1) + 1);   /* drop the header */
    int lines = 0;
    for (char *q = buf; *q; q++) lines += *q == '\n';
    return lines;
}

/* One run with $SCANPROP_EXEC_MSGS: each rank logs the first step's messages it issued
 * (rank, peer, kind, stage, bytes) and rank 0 the prediction's; per rank, in order, they
 * must be the same list, and predicted_step_ms is in the JSON line, positive. */
static void messages_match(const char *app, const char *flags, const char *env_extra, int W)
{
    static mpi_result r;
    static char ex[1 << 17], sim[1 << 17], one[1 << 16];
    const char *prefix = tu_tmp_path("msgs");
    char cmd[1024], env[900], np[16], path[700];
    snprintf(cmd, sizeof cmd, "%s %s", tu_bin_path(app), flags);
    snprintf(env, sizeof env, "SCANPROP_EXEC_MSGS=%s %s", prefix, env_extra);
    snprintf(np, sizeof np, "-np %d", W);
    mpi_run(env, np, cmd, &r);
    cr_assert_eq(r.status, 0, "%s %s -np %d: status %d\n%s", env_extra, cmd, W, r.status, r.err);
    const char *p = strstr(r.out, "\"predicted_step_ms\": ");
    cr_assert(p && atof(p + 21) > 0, "%s -np %d: no positive predicted_step_ms: %s", cmd, W, r.out);
    ex[0] = 0;
    for (int rank = 0; rank < W; rank++) {
        snprintf(path, sizeof path, "%s.r%d.csv", prefix, rank);
        cr_assert_geq(read_lines(path, one, sizeof one), 1, "%s -np %d: rank %d logged nothing", cmd, W, rank);
        strncat(ex, one, sizeof ex - strlen(ex) - 1);
        remove(path);
    }
    snprintf(path, sizeof path, "%s.sim.csv", prefix);
    int n = read_lines(path, sim, sizeof sim);
    remove(path);
    cr_assert_gt(n, 0, "%s -np %d: no predicted messages", cmd, W);
    cr_assert_str_eq(ex, sim, "%s %s -np %d: the executor's messages\n%s\nthe simulated ones\n%s", env_extra, cmd, W, ex,
                     sim);
}

/* Every scheme of build/schedule --list that --parallel runs (custom aside: a list of
 * the user's) at W = 2 and 4, on the demo MLP of 8 layers (15 stages: the V schemes and
 * interleaved-1f1b place two chunks per rank). */
Test(exec, predicted_messages_match_the_executor, .timeout = 900)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    for (int k = 0; k <= NSCHEMES; k++)   /* every row, and ddp with ooo's order */
        for (int W = 2; W <= 4; W += 2) {
            if (k < NSCHEMES && schemes[k].chunks) continue;   /* run at its defaults by its own row */
            const char *scheme = k < NSCHEMES ? schemes[k].name : "ddp-ooo";
            bool groups = k < NSCHEMES && schemes[k].groups && W == 4;
            char flags[512];
            snprintf(flags, sizeof flags, "--layers 8 --steps 2 --batch 32 --threads 1 --quiet --parallel %s %s",
                     scheme, groups ? "--groups 2" : "");
            messages_match("demo", flags, "", W);
        }
}

/* The cross-rank scan's messages (--parallel scan has no job schedule: its prediction is
 * the program of exec_bppsa.c): over layers (Hillis–Steele) at W = 2, 3, 4, and over the
 * time steps of rnn and gru at W = 2, 3, 4 with both algorithms. */
Test(exec, predicted_scan_messages_match_the_executor, .timeout = 600)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
#define RNN_SCAN "--seq-len 16 --samples 64 --hidden 16 --batch 8 --steps 2 --threads 1 --quiet --parallel scan"
#define GRU_SCAN "--shape S --samples 8 --batch 4 --steps 2 --threads 1 --quiet --parallel scan"
    const struct { const char *app, *flags, *env; } runs[] = {
        {"demo", "--layers 16 --width 16 --steps 2 --batch 16 --threads 1 --quiet --parallel scan", ""},
        {"rnn", RNN_SCAN, "SCANPROP_SCAN_ALGO=hillis-steele"}, {"gru", GRU_SCAN, "SCANPROP_SCAN_ALGO=hillis-steele"},
        {"rnn", RNN_SCAN, "SCANPROP_SCAN_ALGO=blelloch"},      {"gru", GRU_SCAN, "SCANPROP_SCAN_ALGO=blelloch"},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++)
        for (int W = 2; W <= 4; W++) messages_match(runs[i].app, runs[i].flags, runs[i].env, W);
#undef RNN_SCAN
#undef GRU_SCAN
}

/* --clip-grad-norm's norm allgather in the prediction: plain and post-validated, on a
 * data-parallel, a pipeline and a scan run. */
Test(exec, predicted_clip_messages_match_the_executor, .timeout = 300)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    const char *sync[] = {"plain", "post-validate"};
    const struct { const char *app, *flags; int W; } runs[] = {
        {"demo", "--layers 4 --steps 2 --batch 32 --threads 1 --quiet --parallel ddp", 2},
        {"demo", "--layers 4 --steps 2 --batch 32 --threads 1 --quiet --parallel 1f1b", 4},
        {"rnn", "--seq-len 16 --samples 64 --hidden 16 --batch 8 --steps 2 --threads 1 --quiet --parallel scan", 3},
    };
    for (int v = 0; v < 2; v++)
        for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
            char flags[512];
            snprintf(flags, sizeof flags, "%s --clip-grad-norm 0.001 --step-sync %s", runs[i].flags, sync[v]);
            messages_match(runs[i].app, flags, "", runs[i].W);
        }
}

/* Batch norm's messages in the prediction (tests/bn_worker: two batch-norm layers in
 * stages 1 and 3): per-rank statistics broadcast rank 0's buffers at each step's start
 * (ddp, fsdp, ddp-ooo); --sync-bn adds an allgather per layer in its forward and in its
 * δ; pipelines hold their buffers on one rank each (none moves). */
Test(exec, predicted_bn_messages_match_the_executor, .timeout = 600)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    if (access("/usr/share/datasets/fashion-mnist", R_OK) != 0) cr_skip_test("no Fashion-MNIST");
    const struct { const char *flags; int W; } runs[] = {
        {"--parallel ddp", 2},           {"--parallel ddp --sync-bn", 2}, {"--parallel ddp --sync-bn", 4},
        {"--parallel fsdp --sync-bn", 2}, {"--parallel ddp-ooo --sync-bn", 2},
        {"--parallel 1f1b", 2},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char flags[512];
        snprintf(flags, sizeof flags, "--steps 2 --batch 32 --threads 1 --quiet %s", runs[i].flags);
        messages_match("tests/bn_worker", flags, "", runs[i].W);
    }
}

/* --costs-out's measured optimizer column in build/schedule's simulation with
 * communication: the busiest rank's optimizer time (ddp: every stage on every rank) is
 * the column's sum; the same profile without the column (an old CSV: it still reads) gives
 * the estimate, 5 · param_bytes / 10 GB/s per stage. */
Test(exec, measured_optimizer_steps_reach_the_simulator, .timeout = 300)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    static mpi_result r;
    char cmd[2048], out[16384], err[4096];
    const char *costs = tu_tmp_path("opt-costs.csv"), *old = tu_tmp_path("opt-old.csv");
    snprintf(cmd, sizeof cmd, "%s " DEMO_FLAGS " --parallel ddp --costs-out %s", tu_bin_path("demo"), costs);
    mpi_run("", "-np 2", cmd, &r);
    cr_assert_eq(r.status, 0, "%s\n%s", cmd, r.err);
    sp_costs *c = sp_costs_read_csv(costs);
    cr_assert(c->has_opt, "no opt column in %s", costs);
    double sum = 0, est = 0;
    for (int s = 0; s < c->stages; s++) sum += c->opt[s], est += 5.0 * c->param_bytes[s] / 1e4;
    cr_assert_gt(sum, 0);
    FILE *f = fopen(old, "w");
    cr_assert_not_null(f);
    c->has_opt = false;   /* the columns of a profile written before the optimizer was measured */
    sp_costs_write_csv(f, c);
    fclose(f);
    sp_costs_free(c);
    sp_costs *o = sp_costs_read_csv(old);
    cr_assert(!o->has_opt && o->opt[0] == 0, "a profile without the column: has_opt %d", o->has_opt);
    sp_costs_free(o);
    const char *files[2] = {costs, old};
    double want[2] = {sum, est};
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "%s --scheme ddp --profile %s --workers 2 --microbatches 2 --no-diagram --nodes 1 "
                 "--ranks-per-node 2 --intra-latency-us 3 --intra-bw-gbs 300 --inter-latency-us 5 --inter-bw-gbs 100",
                 tu_bin_path("schedule"), files[k]);
        cr_assert_eq(tu_run(cmd, out, sizeof out, err, sizeof err), 0, "%s\n%s", cmd, err);
        const char *p = strstr(out, "\"opt_max\": ");
        cr_assert_not_null(p, "%s", out);
        cr_assert_float_eq(atof(p + 11), want[k], 1e-6 * want[k], "%s: opt_max %s, want %g", files[k], p + 11, want[k]);
    }
    remove(costs);
    remove(old);
}
