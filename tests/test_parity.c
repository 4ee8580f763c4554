/* test_parity.c — the four training apps against PyTorch (issues 3 and 5).
 *
 * For each case a script in tests/parity/ (run with Debian's /usr/bin/python3 and
 * python3-torch) writes the initial weights, the data where needed, and the weights
 * torch.optim reaches after N steps on the first N·B samples in order; the app then
 * trains from the same init with --no-shuffle and the same hyper-parameters, and every
 * tensor it saves must match: max|scanprop − torch| / max|torch| ≤ 1e-4 (TOL), and the
 * last step's loss too. Two guards keep the check meaningful:
 *   - every tensor must have moved from its init by ≥ 10·TOL (else a wrong gradient
 *     for it would pass unseen; this is why VGG-11 starts from Kaiming-normal weights);
 *   - the script also trains in float64, and PyTorch's own float32 result must be
 *     within TOL/10 of that: a ReLU input or two max-pool candidates within rounding of
 *     each other (LeNet seeds 1 and 4 hit one within 20 steps: torch float32 vs float64
 *     3.9e-5 and 1.3e-4), or an Adam gradient element within a few eps of zero (Adam
 *     divides by |g| + 1e-8; rnn seed 1), makes a case compare roundings, not programs.
 * A test is skipped (a visible warning) when /usr/bin/python3 cannot import torch
 * (the script exits 77) or Fashion-MNIST is not installed. The apps are $BUILD/<app>
 * (default build/); the scripts are found next to this file's source path. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include "core/io/safetensors.h"
#include "tests/testutil.h"

#define TOL 1e-4
#define PY "/usr/bin/python3"
#define FMNIST "/usr/share/datasets/fashion-mnist"
#define SKIP 77 /* the scripts' exit status when torch (or numpy) is missing */

/* One training configuration: the script's --run OPTIM:LR:MOMENTUM:WEIGHT_DECAY. */
typedef struct parity_run {
    const char *optim, *lr, *momentum, *weight_decay;
} parity_run;

static const char *bin(const char *app, char *buf, size_t len)
{
    const char *b = getenv("BUILD");
    snprintf(buf, len, "%s/%s", b && *b ? b : "build", app);
    return buf;
}

/* tests/parity/<script>, from this file's path as the compiler saw it (make runs the
 * tests from the repository root, where it compiled them). */
static const char *script(const char *name, char *buf, size_t len)
{
    const char *src = __FILE__, *slash = strrchr(src, '/');
    snprintf(buf, len, "%.*sparity/%s", slash ? (int)(slash - src + 1) : 0, src, name);
    cr_assert_eq(access(buf, R_OK), 0, "parity script %s not found (run the tests from the repository root)", buf);
    return buf;
}

static void make_workdir(char *dir, size_t len)
{
    snprintf(dir, len, "%s/parity_XXXXXX", tu_tmpdir());   /* tu_tmpdir goes at exit, pass or fail */
    cr_assert_not_null(mkdtemp(dir), "mkdtemp %s", dir);
}

static void remove_workdir(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0, "%s", cmd);
}

/* Runs the PyTorch side; false (after a visible warning) when the test must be skipped. */
static bool torch_side(const char *what, const char *cmd)
{
    if (access(PY, X_OK) != 0) {
        cr_log_warn("skipped: parity %s: %s not found (apt-get install python3-torch)", what, PY);
        return false;
    }
    int st = tu_run_last(cmd, NULL, 0);
    if (st == SKIP) {
        cr_log_warn("skipped: parity %s: %s cannot import torch (apt-get install python3-torch)", what, PY);
        return false;
    }
    cr_assert_eq(st, 0, "parity %s: the PyTorch side failed (exit %d): %s", what, st, cmd);
    return true;
}

static bool have_fashion_mnist(const char *what)
{
    if (access(FMNIST "/train-images-idx3-ubyte.gz", R_OK) == 0 || access(FMNIST "/train-images-idx3-ubyte", R_OK) == 0)
        return true;
    cr_log_warn("skipped: parity %s: %s not installed (apt-get install dataset-fashion-mnist)", what, FMNIST);
    return false;
}

static float *read_tensor(const sp_st_file *f, const sp_st_tensor *t, int shape[SP_ST_MAX_DIMS])
{
    for (int d = 0; d < t->ndim; d++) shape[d] = (int)t->shape[d];
    float *v = malloc((t->numel ? t->numel : 1) * sizeof *v);
    cr_assert_not_null(v);
    cr_assert_eq(sp_st_read_f32(f, t->name, v, t->ndim, shape), SP_OK, "%s", sp_last_error());
    return v;
}

/* A comparison with the tolerance: a failed expectation when `strict`, else only counted. */
#define WITHIN(strict, ok, cond, ...)                                                                                  \
    do {                                                                                                               \
        bool c_ = (cond);                                                                                              \
        if (!c_ && (strict)) cr_expect(c_, __VA_ARGS__);                                                              \
        if (!c_) (ok) = false;                                                                                         \
    } while (0)

/* Every tensor of `expected` against the same-named one in `got` (which must hold
 * exactly those tensors with the same shapes); `json` is the app's last stdout line.
 * Returns whether every tensor and the loss are within TOL; when `strict`, each one that
 * is not fails the test (the movement guard fails it either way; the conditioning guard
 * only when a comparison missed). */
static bool compare(const char *what, const char *got_path, const char *exp_path, const char *init_path,
                    const char *json, bool strict)
{
    bool ok = true;
    sp_st_file *got = sp_st_open(got_path), *exp = sp_st_open(exp_path), *init = sp_st_open(init_path);
    cr_assert(got && exp && init, "%s", sp_last_error());
    cr_expect_eq(sp_st_count(got), sp_st_count(exp), "%s: %d tensors saved, PyTorch has %d", what, sp_st_count(got),
                 sp_st_count(exp));
    double worst = 0.0, least_moved = INFINITY;
    const char *worst_name = "", *least_name = "";
    for (int i = 0; i < sp_st_count(exp); i++) {
        const sp_st_tensor *te = sp_st_at(exp, i), *tg = sp_st_find(got, te->name), *ti = sp_st_find(init, te->name);
        cr_assert_not_null(tg, "%s: tensor %s missing from %s", what, te->name, got_path);
        cr_assert_not_null(ti, "%s: tensor %s missing from %s", what, te->name, init_path);
        cr_assert_eq(tg->ndim, te->ndim, "%s: %s has %d dims, PyTorch %d", what, te->name, tg->ndim, te->ndim);
        for (int d = 0; d < te->ndim; d++)
            cr_assert_eq(tg->shape[d], te->shape[d], "%s: %s dim %d is %lld, PyTorch %lld", what, te->name, d,
                         (long long)tg->shape[d], (long long)te->shape[d]);
        int shape[SP_ST_MAX_DIMS];
        float *e = read_tensor(exp, te, shape), *g = read_tensor(got, tg, shape), *w0 = read_tensor(init, ti, shape);
        double diff = 0.0, moved = 0.0, scale = 0.0;
        for (size_t j = 0; j < te->numel; j++) {
            diff = fmax(diff, fabs((double)g[j] - e[j]));
            moved = fmax(moved, fabs((double)w0[j] - e[j]));
            scale = fmax(scale, fabs((double)e[j]));
        }
        double rel = scale > 0 ? diff / scale : diff, rel_moved = scale > 0 ? moved / scale : moved;
        cr_log_info("%s: %-18s rel err %.2e, moved %.2e", what, te->name, rel, rel_moved);
        WITHIN(strict, ok, rel <= TOL, "%s: %s max|scanprop - torch| / max|torch| = %.3g > %g", what, te->name, rel,
               TOL);
        cr_expect_geq(rel_moved, 10 * TOL,
                      "%s: %s moved only %.3g from its init, too little for a %g check to see a wrong gradient", what,
                      te->name, rel_moved, TOL);
        if (rel >= worst) worst = rel, worst_name = te->name;
        if (rel_moved < least_moved) least_moved = rel_moved, least_name = te->name;
        free(e);
        free(g);
        free(w0);
    }
    const char *loss_s = sp_st_metadata(exp, "last_loss"), *cond_s = sp_st_metadata(exp, "f32_vs_f64");
    cr_assert_not_null(loss_s, "%s: no last_loss in %s", what, exp_path);
    double loss_t = strtod(loss_s, NULL), loss = tu_json_num(json, "last_loss");
    WITHIN(strict, ok, fabs(loss - loss_t) <= TOL * fabs(loss_t), "%s: last loss %.9g, PyTorch %.9g", what, loss,
           loss_t);
    /* The conditioning guard explains a miss; it does not fail a match. When scanprop's
     * float32 run meets the float64 reference within TOL the check has passed whatever
     * PyTorch's own float32 orders do (rounding does not make a wrong gradient land on
     * float64); on some kernel choices they miss it (tests/parity/resnet.py, the ReLU
     * inputs near zero), which is then only reported. */
    if (cond_s && !ok)
        cr_expect_leq(strtod(cond_s, NULL), TOL / 10,
                      "%s: PyTorch's own float32 and float64 runs differ by %s: an ill-conditioned case, not a test of "
                      "scanprop (change the seed)",
                      what, cond_s);
    fprintf(stderr, "parity %-26s worst rel err %.2e (%s), least moved %.2e (%s), loss %.7g (torch %.7g)%s%s\n",
            what, worst, worst_name, least_moved, least_name, loss, loss_t, cond_s ? ", torch f32 vs f64 " : "",
            cond_s ? cond_s : "");
    sp_st_close(got);
    sp_st_close(exp);
    sp_st_close(init);
    return ok;
}

/* The script's --run list for `runs`. */
static void run_flags(char *buf, size_t len, const parity_run *runs, int n)
{
    size_t at = 0;
    buf[0] = 0;
    for (int k = 0; k < n; k++)
        at += (size_t)snprintf(buf + at, len - at, " --run %s:%s:%s:%s", runs[k].optim, runs[k].lr, runs[k].momentum,
                               runs[k].weight_decay);
    cr_assert_lt(at, len);
}

/* Trains `app` for each run × engine from dir/init.safetensors and compares with
 * dir/expected-K.safetensors. `common` holds the app's data and size flags, `env` what
 * goes before the command ("" for nothing; it is also in the report's name). Returns
 * whether every comparison was within TOL (see compare for `strict`). */
static bool check_app(const char *app, const char *dir, const char *common, const parity_run *runs, int nruns,
                      const char *const *engines, int nengines, const char *env, bool strict)
{
    bool ok = true;
    for (int k = 0; k < nruns; k++)
        for (int e = 0; e < nengines; e++) {
            char exe[256], cmd[2048], got[512], exp[512], init[512], what[128], json[8192];
            snprintf(got, sizeof got, "%s/got-%d-%s.safetensors", dir, k, engines[e]);
            snprintf(exp, sizeof exp, "%s/expected-%d.safetensors", dir, k);
            snprintf(init, sizeof init, "%s/init.safetensors", dir);
            bool wd = strcmp(runs[k].weight_decay, "0") != 0;
            snprintf(what, sizeof what, "%s %s%s%s %s%s%s", app, runs[k].optim, wd ? " wd " : "",
                     wd ? runs[k].weight_decay : "", engines[e], *env ? " " : "", env);
            /* --momentum applies to SGD only (the apps refuse it with Adam). */
            char mom[64] = "";
            if (strcmp(runs[k].optim, "sgd") == 0)
                snprintf(mom, sizeof mom, " --momentum %s", runs[k].momentum);
            snprintf(cmd, sizeof cmd,
                     "%s%s%s --quiet --no-shuffle --threads 2 %s --load %s --save %s --optim %s --lr %s%s "
                     "--weight-decay %s --backward %s",
                     env, *env ? " " : "", bin(app, exe, sizeof exe), common, init, got, runs[k].optim, runs[k].lr,
                     mom, runs[k].weight_decay, engines[e]);
            cr_assert_eq(tu_run_last(cmd, json, sizeof json), 0, "%s failed: %s", what, cmd);
            if (!compare(what, got, exp, init, json, strict)) ok = false;
        }
    return ok;
}

/* LeNet-5, SGD with momentum, with and without weight decay: 20 steps of 64. */
Test(parity, lenet)
{
    if (!have_fashion_mnist("lenet")) return;
    static const parity_run runs[] = {{"sgd", "0.01", "0.9", "0"}, {"sgd", "0.01", "0.9", "5e-4"}};
    static const char *const engines[] = {"linear"};
    char dir[4200], py[256], flags[256], cmd[16384];
    make_workdir(dir, sizeof dir);
    run_flags(flags, sizeof flags, runs, 2);
    snprintf(cmd, sizeof cmd, PY " -B %s lenet %s --steps 20 --batch 64 --seed 2 --f64%s",
             script("cnn.py", py, sizeof py), dir, flags);
    if (torch_side("lenet", cmd)) check_app("lenet", dir, "--steps 20 --batch 64", runs, 2, engines, 1, "", true);
    remove_workdir(dir);
}

/* VGG-11 on Fashion-MNIST padded to 32×32: 3 SGD steps of 8 from Kaiming-normal weights.
 * The app reads a copy of the images used (cnn.py --subset) so that its end-of-run
 * evaluation covers 8 test images, not 10000. */
Test(parity, vgg11)
{
    if (!have_fashion_mnist("vgg11")) return;
    static const parity_run runs[] = {{"sgd", "0.01", "0.9", "0"}};
    static const char *const engines[] = {"linear"};
    char dir[4200], py[256], flags[256], cmd[16384], common[4400];
    make_workdir(dir, sizeof dir);
    run_flags(flags, sizeof flags, runs, 1);
    snprintf(cmd, sizeof cmd, PY " -B %s vgg11 %s --steps 3 --batch 8 --init kaiming --f64 --subset 8%s",
             script("cnn.py", py, sizeof py), dir, flags);
    snprintf(common, sizeof common, "--steps 3 --batch 8 --data %s/data", dir);
    if (torch_side("vgg11", cmd)) check_app("vgg11", dir, common, runs, 1, engines, 1, "", true);
    remove_workdir(dir);
}

/* The recurrent apps on a safetensors sequence set, Adam (the case) and SGD with
 * momentum (Adam normalises each element's step, so it would hide a gradient that is
 * wrong by a scale factor), with both backward engines. */
static const parity_run SEQ_RUNS[] = {{"adam", "0.001", "0", "0"}, {"sgd", "0.05", "0.9", "0"}};
static const char *const SEQ_ENGINES[] = {"linear", "bppsa"};

static void check_seq(const char *app, int T, int C)
{
    char dir[4200], py[256], flags[256], cmd[16384], common[4400];
    make_workdir(dir, sizeof dir);
    run_flags(flags, sizeof flags, SEQ_RUNS, 2);
    snprintf(cmd, sizeof cmd,
             PY " -B %s %s %s --samples 64 --seq-len %d --input %d --hidden 20 --steps 4 --batch 16 --seed 2%s",
             script("rnn.py", py, sizeof py), app, dir, T, C, flags);
    snprintf(common, sizeof common, "--steps 4 --batch 16 --hidden 20 --dataset %s/data.safetensors", dir);
    if (torch_side(app, cmd)) check_app(app, dir, common, SEQ_RUNS, 2, SEQ_ENGINES, 2, "", true);
    remove_workdir(dir);
}

/* nn.RNN(1, 20) + fc on 64 bitstreams of 50 bits (paper Eq. 8), 4 steps of 16. */
Test(parity, rnn) { check_seq("rnn", 50, 1); }

/* nn.GRU(12, 20) + fc on 64 sequences of 40 frames × 12 features, 4 steps of 16. */
Test(parity, gru) { check_seq("gru", 40, 12); }

/* ResNet-20 (batch norm in training mode, then the app's eval-mode pass over 8 test
 * images) through the project's Python module (python/scanprop_torch.py): 2 SGD steps
 * of 8 with momentum and weight decay, linear and ooo, against PyTorch in float64; the
 * weights, the running statistics and num_batches_tracked, the last loss and the
 * eval-mode test loss.
 * Float32 meets float64 to ~1e-5 here only while no ReLU input lies within rounding of
 * zero: at batch 8 about one per step comes within 1e-6 of it, and an order that puts it
 * on the other side moves the batch-norm biases (sums that cancel almost to zero) by
 * 1e-3 to 1e-1 of their size, PyTorch's own float32 orders included (numbers in
 * tests/parity/resnet.py). Hence: 2 steps of seed 3, where every float32 order measured
 * stays within 3.3e-6; the better of the script's two float32 orders must stay within
 * TOL/10 (f32_vs_f64: the case lets float32 meet float64); and when the app's convolution
 * path still misses by more than TOL (a ReLU input this CPU's kernels round across), the
 * other path (SCANPROP_CONV=gemm, or dnnl when gemm was set: an independent order) must
 * match instead. A wrong gradient moves every order alike: δ of one batch norm
 * (layer2.1.bn2) scaled by 1.001 misses by 3.1e-2 on both paths, by 1.0001 still 2.3e-2.
 * bppsa is held to linear BP instead (tests/test_dag.c): its other association order is
 * one more float32 order. */
Test(parity, resnet20, .timeout = 900)
{
    if (!have_fashion_mnist("resnet20")) return;
    static const parity_run runs[] = {{"sgd", "0.05", "0.9", "5e-4"}};
    static const char *const engines[] = {"linear", "ooo"};
    char dir[4200], py[256], flags[256], cmd[16384], common[4400];
    make_workdir(dir, sizeof dir);
    run_flags(flags, sizeof flags, runs, 1);
    snprintf(cmd, sizeof cmd, PY " -B %s %s --steps 2 --batch 8 --subset 8 --seed 3%s",
             script("resnet.py", py, sizeof py), dir, flags);
    snprintf(common, sizeof common, "--steps 2 --batch 8 --data %s/data", dir);
    if (torch_side("resnet20", cmd)) {
        const char *env = "", *conv = getenv("SCANPROP_CONV");
        if (!check_app("resnet", dir, common, runs, 1, engines, 2, env, false)) {
            env = conv && !strcmp(conv, "gemm") ? "SCANPROP_CONV=dnnl" : "SCANPROP_CONV=gemm";
            cr_log_warn("parity resnet20: the default convolution path misses PyTorch float64 by more than %g (lines "
                        "above); checking the %s path, an independent float32 order",
                        TOL, env);
            check_app("resnet", dir, common, runs, 1, engines, 2, env, true);
        }
        char exp[4300], exe[256], json[8192];
        snprintf(exp, sizeof exp, "%s/expected-0.safetensors", dir);
        sp_st_file *f = sp_st_open(exp);
        cr_assert_not_null(f, "%s", sp_last_error());
        double want = strtod(sp_st_metadata(f, "test_loss"), NULL);
        sp_st_close(f);
        snprintf(cmd, sizeof cmd, "%s%s%s --data %s/data --eval-only --load %s/got-0-linear.safetensors", env,
                 *env ? " " : "", bin("resnet", exe, sizeof exe), dir, dir);
        cr_assert_eq(tu_run_last(cmd, json, sizeof json), 0, "%s", cmd);
        double got = tu_json_num(json, "test_loss");
        cr_expect_leq(fabs(got - want), TOL * fabs(want), "resnet20%s%s eval-mode test loss %.9g, PyTorch %.9g",
                      *env ? " " : "", env, got, want);
    }
    remove_workdir(dir);
}
