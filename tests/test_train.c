/* test_train.c — whole training runs: the loss falls, runs are bitwise reproducible, the
 * apps reject bad flags cleanly, LeNet learns Fashion-MNIST, and the BPPSA paper's
 * Figure 6 claim (bppsa and linear BP give the same training curve). */
#include <criterion/criterion.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>
#include <malloc.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include "core/device.h"
#include "layers/layers.h"
#include "layers/zoo.h"
#include "schedulers/backward/engine.h"
#include "core/threads.h"
#include "data/data.h"
#include "optim/optim.h"
#include "train/checkpoint.h"
#include "schedulers/backward/ooo.h"
#include "train/train.h"
#include "tests/testutil.h"

#define FMNIST "/usr/share/datasets/fashion-mnist"

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

Test(train, demo_loss_goes_down)
{
    char out[8192];
    for (int i = 0; i < 2; i++) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "%s --quiet --backward %s", tu_bin("demo"), i ? "bppsa" : "linear");
        cr_assert_eq(tu_run_last(cmd, out, sizeof out), 0);
        double first = tu_json_num(out, "first_loss"), last = tu_json_num(out, "last_loss");
        cr_assert_lt(last, 0.1 * first, "loss %g -> %g did not fall by 10x", first, last);
    }
}

Test(train, same_seed_same_bits_and_other_seed_differs)
{
    char a[8192], b[8192], c[8192], cmd[512];
    snprintf(cmd, sizeof cmd, "%s --quiet --steps 12 --batch 16 --seed 5 --seq-len 50 --samples 256", tu_bin("rnn"));
    cr_assert_eq(tu_run_last(cmd, a, sizeof a), 0);
    cr_assert_eq(tu_run_last(cmd, b, sizeof b), 0);
    tu_strip_timings(a);
    tu_strip_timings(b);
    cr_assert_str_eq(a, b, "two runs with the same seed differ");
    snprintf(cmd, sizeof cmd, "%s --quiet --steps 12 --batch 16 --seed 6 --seq-len 50 --samples 256", tu_bin("rnn"));
    cr_assert_eq(tu_run_last(cmd, c, sizeof c), 0);
    tu_strip_timings(c);
    cr_assert_str_neq(a, c, "a different seed gave the same run");
}

Test(train, lenet_deterministic_json)
{
    if (access(FMNIST, R_OK) != 0) {
        cr_log_warn("skipped: %s not installed (apt-get install dataset-fashion-mnist)", FMNIST);
        return;
    }
    char a[8192], b[8192], cmd[512];
    snprintf(cmd, sizeof cmd, "%s --quiet --steps 15 --threads 2 --seed 11", tu_bin("lenet"));
    cr_assert_eq(tu_run_last(cmd, a, sizeof a), 0);
    cr_assert_eq(tu_run_last(cmd, b, sizeof b), 0);
    tu_strip_timings(a);
    tu_strip_timings(b);
    cr_assert_str_eq(a, b);
}

Test(train, bad_flags_exit_2_with_one_line)
{
    const char *bad[] = {"--epochs abc", "--batch 0", "--lr -1", "--optim rmsprop", "--backward nope",
                         "--frobnicate", "--threads 0", "--data /nonexistent/dir", "--load /nonexistent.safetensors",
                         "--momentum 1.5", "--lr-schedule cosine:x", "--device cuda", "--device tpu"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char cmd[512], err[8192];
        snprintf(cmd, sizeof cmd, "%s %s --steps 1 --quiet 2>&1 >/dev/null | head -c 4000", tu_bin("lenet"), bad[i]);
        FILE *p = popen(cmd, "r");
        size_t n = fread(err, 1, sizeof err - 1, p);
        err[n] = 0;
        pclose(p);
        snprintf(cmd, sizeof cmd, "%s %s --steps 1 --quiet >/dev/null 2>&1", tu_bin("lenet"), bad[i]);
        cr_assert_eq(tu_run_last(cmd, NULL, 0), 2, "'%s' should exit 2", bad[i]);
        cr_assert(strncmp(err, "scanprop: ", 10) == 0, "'%s': message '%s'", bad[i], err);
        cr_assert_eq(strchr(err, '\n'), err + n - 1, "'%s': expected exactly one line, got '%s'", bad[i], err);
    }
}

Test(train, save_is_atomic_and_bad_checkpoint_keeps_the_old_one)
{
    char dir[4200], cmd[20000], out[8192];
    snprintf(dir, sizeof dir, "%s", tu_tmpdir());   /* removed at exit, pass or fail */
    snprintf(cmd, sizeof cmd, "%s --quiet --steps 3 --seq-len 20 --samples 64 --save %s/w.safetensors", tu_bin("rnn"), dir);
    cr_assert_eq(tu_run_last(cmd, out, sizeof out), 0);
    /* a gru checkpoint cannot load into the rnn: exit 2, and --save does not run */
    snprintf(cmd, sizeof cmd, "%s --quiet --steps 1 --shape S --samples 16 --save %s/g.safetensors", tu_bin("gru"), dir);
    cr_assert_eq(tu_run_last(cmd, out, sizeof out), 0);
    snprintf(cmd, sizeof cmd, "cmp -s %s/w.safetensors %s/w.bak || cp %s/w.safetensors %s/w.bak", dir, dir, dir, dir);
    cr_assert_eq(tu_run_last(cmd, NULL, 0), 0);
    snprintf(cmd, sizeof cmd, "%s --quiet --steps 1 --seq-len 20 --samples 64 --load %s/g.safetensors --save %s/w.safetensors 2>/dev/null",
             tu_bin("rnn"), dir, dir);
    cr_assert_eq(tu_run_last(cmd, NULL, 0), 2);
    snprintf(cmd, sizeof cmd, "cmp -s %s/w.safetensors %s/w.bak", dir, dir);
    cr_assert_eq(tu_run_last(cmd, NULL, 0), 0, "the old checkpoint was changed");
    /* and it loads back into the rnn */
    snprintf(cmd, sizeof cmd, "%s --quiet --steps 1 --seq-len 20 --samples 64 --load %s/w.safetensors", tu_bin("rnn"), dir);
    cr_assert_eq(tu_run_last(cmd, out, sizeof out), 0);
}

/* Figure 6 of the BPPSA paper: training LeNet-5 with the scan gives the same curve as
 * linear BP. Same init, same batches; per-step losses within 1e-4 relative. make test
 * runs the first SCANPROP_FIG6_STEPS steps (default 80); make test-long the whole epoch. */
Test(train, fig6_bppsa_and_linear_same_training_curve, .timeout = 1800)
{
    if (access(FMNIST, R_OK) != 0) {
        cr_log_warn("skipped: %s not installed", FMNIST);
        return;
    }
    const char *env = getenv("SCANPROP_FIG6_STEPS");
    long steps = env ? atol(env) : 80;
    sp_set_threads(2);
    sp_dataset *d = sp_fashion_mnist(FMNIST, true, 0);
    float *losses[2];
    long done = 0;
    for (int k = 0; k < 2; k++) {
        sp_model *m = sp_zoo_lenet(1, 28);
        sp_model_init(m, 42);
        sp_engine *e = sp_engine_create(k ? "bppsa" : "linear", NULL);
        sp_optim_cfg cfg = sp_optim_cfg_default();
        cfg.lr = 0.01;
        cfg.momentum = 0.9;
        sp_optim *o = sp_optim_create("sgd", m->params, m->nparams, &cfg);
        sp_loader *l = sp_loader_new(d, 64, true, 42, false);
        sp_tape t;
        sp_tape_init(&t);
        losses[k] = malloc((size_t)sp_loader_nbatches(l) * sizeof(float));
        sp_batch b;
        done = 0;
        while (done < steps && sp_loader_next(l, &b))
            losses[k][done++] = sp_train_step(m, e, o, &t, &b.x, b.y, NULL, NULL, NULL);
        sp_tape_free(&t);
        sp_loader_free(l);
        sp_optim_free(o);
        sp_engine_destroy(e);
        sp_model_free(m);
    }
    double worst = 0;
    for (long s = 0; s < done; s++) {
        double rel = fabs((double)losses[1][s] - losses[0][s]) / fabs((double)losses[0][s]);
        worst = fmax(worst, rel);
        cr_assert_leq(rel, 1e-4, "step %ld: bppsa loss %.8f vs linear %.8f", s, losses[1][s], losses[0][s]);
    }
    double head = 0, tail = 0;
    for (int i = 0; i < 10; i++) head += losses[0][i], tail += losses[0][done - 1 - i];
    cr_assert_lt(tail, head - 0.3, "the loss should fall within %ld steps (%.3f -> %.3f)", done, head / 10, tail / 10);
    cr_log_info("fig6: %ld steps, worst per-step relative loss difference %.2e", done, worst);
    free(losses[0]);
    free(losses[1]);
    sp_dataset_free(d);
}

Test(train, lenet_fashion_mnist_one_epoch_accuracy, .timeout = 900)
{
    if (access(FMNIST, R_OK) != 0) {
        cr_log_warn("skipped: %s not installed", FMNIST);
        return;
    }
    char out[8192], cmd[512];
    snprintf(cmd, sizeof cmd, "%s --quiet --epochs 1 --threads 2", tu_bin("lenet"));
    cr_assert_eq(tu_run_last(cmd, out, sizeof out), 0);
    double acc = tu_json_num(out, "test_acc");
    cr_log_info("lenet 1 epoch: test accuracy %.4f", acc);
    cr_assert_geq(acc, 0.78, "test accuracy %.4f after one epoch (PyTorch, same recipe: 0.80)", acc);
}

/* Issue 16's done-when: build/rnn with its defaults (T = 100, hidden 64, 48000 samples,
 * batch 8, Adam 1e-3) reaches well above chance (0.1) in one epoch; ~13 s on 2 cores.
 * One epoch of this task is chaotic in the rounding: on one build seeds 1–4 reached
 * 0.55, 0.67, 0.62 and 0.29; after the recurrent ops' own exp (bitwise-different tanh)
 * 0.24, 0.34, 0.44 and 0.53, and seed 1 gives 0.51 or 0.24 depending only on whether the
 * per-step products use FMA. So the bar is twice chance, not one seed's figure. */
Test(train, rnn_defaults_one_epoch_accuracy, .timeout = 600)
{
    char out[8192], cmd[512];
    snprintf(cmd, sizeof cmd, "%s --quiet --epochs 1 --threads 2", tu_bin("rnn"));
    cr_assert_eq(tu_run_last(cmd, out, sizeof out), 0);
    cr_assert_eq(tu_json_num(out, "steps"), 6000, "the defaults changed: %s", out);
    double acc = tu_json_num(out, "test_acc");
    cr_log_info("rnn 1 epoch, defaults: test accuracy %.4f", acc);
    cr_assert_geq(acc, 0.2, "test accuracy %.4f after one epoch with the defaults (chance: 0.1)", acc);
}

/* Issue 10's done-when, in make test-long only (about 10 minutes on 2 cores): ResNet-20
 * reaches 0.85 test accuracy on Fashion-MNIST in one epoch. */
Test(train, resnet20_fashion_mnist_one_epoch_accuracy, .timeout = 3600)
{
    if (!getenv("SCANPROP_RESNET_EPOCH")) {
        cr_log_info("skipped: the one-epoch ResNet-20 run is in make test-long (SCANPROP_RESNET_EPOCH=1)");
        return;
    }
    if (access(FMNIST, R_OK) != 0) {
        cr_log_warn("skipped: %s not installed", FMNIST);
        return;
    }
    char out[8192], cmd[512];
    snprintf(cmd, sizeof cmd, "%s --quiet --epochs 1 --threads 2", tu_bin("resnet"));
    cr_assert_eq(tu_run_last(cmd, out, sizeof out), 0);
    double acc = tu_json_num(out, "test_acc");
    cr_log_info("resnet20 1 epoch: test accuracy %.4f in %.0f s", acc, tu_json_num(out, "seconds"));
    cr_assert_geq(acc, 0.85, "test accuracy %.4f after one epoch", acc);
}

/* --eval-only --load: the saved weights evaluated without training give the test loss
 * and accuracy the training run reported; the JSON line names optim, lr, seed, dataset. */
Test(train, eval_only_reproduces_the_test_numbers)
{
    if (access(FMNIST, R_OK) != 0) {
        cr_log_warn("skipped: %s not installed (apt-get install dataset-fashion-mnist)", FMNIST);
        return;
    }
    char a[8192], b[8192], cmd[1024], ck[300];
    snprintf(ck, sizeof ck, "%s/eval_only.safetensors", tu_tmpdir());
    snprintf(cmd, sizeof cmd, "%s --quiet --steps 8 --seed 3 --save %s", tu_bin("lenet"), ck);
    cr_assert_eq(tu_run_last(cmd, a, sizeof a), 0);
    cr_assert_eq(tu_json_num(a, "seed"), 3);
    cr_assert_eq(tu_json_num(a, "lr"), 0.01);
    cr_assert_not_null(strstr(a, "\"optim\": \"sgd\""));
    cr_assert_not_null(strstr(a, "\"dataset\": \""));
    snprintf(cmd, sizeof cmd, "%s --eval-only --load %s", tu_bin("lenet"), ck);
    cr_assert_eq(tu_run_last(cmd, b, sizeof b), 0);
    cr_assert_not_null(strstr(b, "\"mode\": \"eval-only\""), "%s", b);
    cr_assert_eq(tu_json_num(a, "test_acc"), tu_json_num(b, "test_acc"));
    cr_assert_eq(tu_json_num(a, "test_loss"), tu_json_num(b, "test_loss"));
    snprintf(cmd, sizeof cmd, "%s --eval-only >/dev/null 2>&1", tu_bin("lenet"));
    cr_assert_eq(tu_run_last(cmd, NULL, 0), 2, "--eval-only without --load");
    remove(ck);
}

/* ---- ooo on the CPU: the next forward overlaps the last δW/U (train.c) -------------- */

/* The per-layer update the apps give ooo, optionally with conv1's (the first layer's: the
 * step's last task) made slow, so that the loop has long queued the next step, written a
 * checkpoint or started an evaluation by the time it lands, unless it joins the lanes. */
typedef struct layer_update {
    sp_optim *o;
    const sp_param *slow;   /* NULL: none is slow */
} layer_update;

static void update_layer(void *ctx, sp_layer *l)
{
    layer_update *u = ctx;
    if (u->slow && l->nparams > 0 && l->params[0] == u->slow) usleep(100000);
    sp_optim_step_params(u->o, l->params, l->nparams);
}

/* n random 1×28×28 samples, labels from a fixed pattern. */
static sp_dataset *rand_images(int n, uint64_t seed)
{
    int shape[3] = {1, 28, 28};
    float *x;
    int *y;
    sp_dataset *d = sp_dataset_new_f32("rand", n, 3, shape, 10, &x, &y);
    cr_assert_not_null(d);
    tu_fill_uniform(x, (size_t)n * 28 * 28, seed, -1, 1);
    for (int i = 0; i < n; i++) y[i] = (i * 7) % 10;
    return d;
}

/* LeNet-5 from seed 3 trained on d in batches of 8 by tc, SGD with momentum; engine:
 * linear BP (order NULL) or ooo with that order and per-layer updates (conv1's slow if
 * asked). Returns every weight after the run (sp_train has joined: every update in). */
static float *train_lenet_on(sp_dataset *d, const char *order, bool slow_conv1, bool shuffle, sp_dataset *test,
                             const sp_train_cfg *tc, sp_train_result *r, size_t *nw)
{
    sp_model *m = sp_zoo_model("lenet");
    sp_model_init(m, 3);
    sp_optim_cfg oc = sp_optim_cfg_default();
    oc.lr = 0.05;
    oc.momentum = 0.9;
    sp_optim *o = sp_optim_create("sgd", m->params, m->nparams, &oc);
    layer_update u = {o, slow_conv1 ? m->params[0] : NULL};
    sp_engine_opts eo = {.own = &(sp_ooo_opts){.order = order}, .update = update_layer, .update_ctx = &u};
    sp_engine *e = sp_engine_create(order ? "ooo" : "linear", order ? &eo : NULL);
    sp_loader *l = sp_loader_new(d, 8, shuffle, 1, false);
    *r = sp_train(m, e, o, l, test, tc);
    float *w = tu_model_weights(m, nw);
    sp_loader_free(l);
    sp_engine_destroy(e);
    sp_optim_free(o);
    sp_model_free(m);
    return w;
}

/* A configuration with only .steps and .log_path set (no eval_batch) is refused as a
 * status naming the field, not by ending the process; the documented default
 * constructor gives one that runs. */
Test(train, zeroed_config_is_a_status_naming_the_field)
{
    sp_dataset *d = rand_images(16, 5), *test = rand_images(8, 6);
    char log[512];
    snprintf(log, sizeof log, "%s/cfg.csv", tu_tmpdir());
    sp_train_cfg tc = {.steps = 2, .log_path = log, .quiet = true};
    sp_train_result r;
    size_t n;
    free(train_lenet_on(d, NULL, false, false, test, &tc, &r, &n));
    cr_assert_eq(r.status, SP_ERR, "a config without eval_batch was accepted");
    cr_assert(strstr(sp_last_error(), "eval_batch"), "the error does not name the field: %s", sp_last_error());
    cr_assert_eq(r.steps, 0);
    tc = sp_train_cfg_default();
    tc.steps = 2;
    tc.log_path = log;
    tc.quiet = true;
    free(train_lenet_on(d, NULL, false, false, test, &tc, &r, &n));
    cr_assert_eq(r.status, SP_OK, "%s", sp_last_error());
    cr_assert_eq(r.steps, 2);
    cr_assert(r.test_acc >= 0 && r.test_acc <= 1, "the default config evaluates: acc %g", r.test_acc);
    tc.epochs = 0;
    tc.steps = 0;
    free(train_lenet_on(d, NULL, false, false, test, &tc, &r, &n));
    cr_assert_eq(r.status, SP_ERR, "no limit was accepted");
    sp_dataset_free(d);
    sp_dataset_free(test);
}

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

/* A bad --resume, --log or --save path comes back as a status naming it, before any work,
 * with nothing left behind: 200 refused calls open no file descriptor for good. (These
 * ended the host process.) */
Test(train, bad_paths_are_a_status)
{
    sp_dataset *d = rand_images(16, 5);
    char bad[512];
    snprintf(bad, sizeof bad, "%s/no-such-dir/x", tu_tmpdir());
    sp_train_result r;
    size_t n;
    int fds = -1;
    for (int rep = 0; rep < 200; rep++)
        for (int which = 0; which < 3; which++) {
            sp_train_cfg tc = sp_train_cfg_default();
            tc.steps = 1, tc.quiet = true;
            if (which == 0) tc.resume_path = bad;
            if (which == 1) tc.log_path = bad;
            if (which == 2) tc.save_path = bad;
            free(train_lenet_on(d, NULL, false, false, NULL, &tc, &r, &n));
            cr_assert_eq(r.status, SP_ERR, "path %d accepted", which);
            cr_assert_eq(r.steps, 0, "path %d: trained before refusing", which);
            cr_assert(strstr(sp_last_error(), "no-such-dir"), "path %d: the error does not name it: %s", which,
                      sp_last_error());
            if (rep == 0 && which == 2) fds = open_fds();
        }
    cr_assert_eq(open_fds(), fds, "200 refused calls left file descriptors open");
    sp_dataset_free(d);
}

/* ---- 1,000 failing runs leave nothing behind ---- */

/* n samples of `width` features, labels i % 2 up to sample `from`, y_from after it. */
static sp_dataset *small_set(int n, int width, int from, int y_from)
{
    float *x;
    int *y;
    sp_dataset *d = sp_dataset_new_f32("small", n, 1, (int[]){width}, 10, &x, &y);
    cr_assert_not_null(d);
    tu_fill_uniform(x, (size_t)n * width, 9, -1, 1);
    for (int i = 0; i < n; i++) y[i] = i >= from ? y_from : i % 2;
    return d;
}

static long proc_status_field(const char *key)   /* "Threads:" of /proc/self/status */
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, strlen(key)) == 0) v = atol(line + strlen(key));
    if (f) fclose(f);
    return v;
}

static int proc_maps(void)   /* mappings: an arena block or a thread stack left mapped shows here */
{
    FILE *f = fopen("/proc/self/maps", "r");
    int n = 0, c;
    while (f && (c = fgetc(f)) != EOF) n += c == '\n';
    if (f) fclose(f);
    return n;
}

typedef struct fail_ctx {
    const char *dir;   /* FAIL_SAVE: removed after step 1, so the save at step 2 fails */
    sp_model *m;       /* FAIL_NAN: fc2's bias made NaN after step 1 */
} fail_ctx;

static void break_after_step_1(void *ctx, long steps)
{
    fail_ctx *f = ctx;
    if (steps != 1) return;
    if (f->dir) rmdir(f->dir);
    if (f->m) f->m->params[f->m->nparams - 1]->value.data[0] = NAN;
}

enum { FAIL_NAN, FAIL_SAVE, FAIL_SHAPE, FAIL_LABEL, FAIL_TEST_SHAPE, FAIL_KINDS };

/* One sp_train call that fails in the given way, on an MLP 4-3-2 with SGD + momentum,
 * a prefetching loader of batch 4 over 8 samples, 4 steps (the NaN, the save and the
 * label fail at step 2, the test set at the evaluation after step 1); FAIL_LABEL runs ooo with per-layer updates on two lanes, so the
 * failing forward overlaps the previous step's tail. Returns sp_train's result. */
static sp_train_result fail_once(int kind, sp_dataset *const *sets, const char *dir, const char *ck)
{
    sp_model *m = sp_zoo_mlp(4, 3, 2);
    sp_model_init(m, 1);
    sp_optim_cfg oc = sp_optim_cfg_default();
    oc.momentum = 0.9;
    sp_optim *o = sp_optim_create("sgd", m->params, m->nparams, &oc);
    layer_update u = {o, NULL};
    sp_engine_opts eo = {.own = &(sp_ooo_opts){.order = "ooo"}, .update = update_layer, .update_ctx = &u};
    sp_engine *e = kind == FAIL_LABEL ? sp_engine_create("ooo", &eo) : sp_engine_create("linear", NULL);
    sp_loader *l = sp_loader_new(sets[kind], 4, false, 1, false);
    sp_train_cfg tc = sp_train_cfg_default();
    tc.app = "leak", tc.steps = 4, tc.quiet = true;
    if (kind == FAIL_SAVE) {
        cr_assert_eq(mkdir(dir, 0755), 0);
        tc.save_every = 2, tc.save_path = ck;
    }
    fail_ctx f = {kind == FAIL_SAVE ? dir : NULL, kind == FAIL_NAN ? m : NULL};
    tc.on_step = break_after_step_1, tc.on_step_ctx = &f;
    if (kind == FAIL_TEST_SHAPE) tc.eval_every = 1;
    sp_train_result r = sp_train(m, e, o, l, kind == FAIL_TEST_SHAPE ? sets[FAIL_KINDS] : NULL, &tc);
    sp_loader_free(l);
    sp_engine_destroy(e);
    sp_optim_free(o);
    sp_model_free(m);
    return r;
}

/* sp_train returns a status, never ends the process, when a run fails on the way — a
 * non-finite loss, a checkpoint save that fails, a batch of another shape, a label past
 * the model's classes, a test set of another shape at an evaluation — and frees what
 * it holds: after 1,000 such calls the threads, descriptors, mappings and heap are
 * where they were (each of these ended the process; under sp_try each leaked the run). */
Test(train, failing_runs_are_a_status_and_leak_nothing, .timeout = 120)
{
    sp_set_threads(2);
    sp_ooo_exec_set_min_two_lane_flops(0);
    /* the training set of each kind; [FAIL_KINDS]: FAIL_TEST_SHAPE's test set */
    sp_dataset *sets[FAIL_KINDS + 1] = {
        [FAIL_NAN] = small_set(8, 4, 8, 0),   [FAIL_SAVE] = small_set(8, 4, 8, 0),
        [FAIL_SHAPE] = small_set(8, 5, 8, 0), [FAIL_LABEL] = small_set(8, 4, 4, 7),
        [FAIL_TEST_SHAPE] = small_set(8, 4, 8, 0), [FAIL_KINDS] = small_set(8, 5, 8, 0),
    };
    static const char *says[FAIL_KINDS] = {"loss became nan at step 1", "ck.st", "fc1", "label 7", "fc1"};
    static const long steps[FAIL_KINDS] = {1, 2, 0, 1, 1};   /* how far each got */
    char dir[4200], ck[4300];
    snprintf(dir, sizeof dir, "%s/leak", tu_tmpdir());
    snprintf(ck, sizeof ck, "%s/ck.st", dir);
    long threads = 0;
    int fds = 0, maps = 0;
    size_t heap = 0;
    long rss = 0;   /* kB: an arena block left mapped is not in the heap's count */
    double t0 = sp_now();
    for (int i = 0; i < 1000 + 5 * FAIL_KINDS; i++) {
        if (i == 5 * FAIL_KINDS) {   /* after a warm-up: lazily made pools, buffers */
            threads = proc_status_field("Threads:");
            fds = open_fds();
            maps = proc_maps();
            heap = mallinfo2().uordblks;
            rss = proc_status_field("VmRSS:");
            t0 = sp_now();
        }
        int kind = i % FAIL_KINDS;
        sp_clear_error();
        sp_train_result r = fail_once(kind, sets, dir, ck);
        cr_assert_eq(r.status, SP_ERR, "call %d (kind %d) did not fail", i, kind);
        cr_assert(strstr(sp_last_error(), says[kind]), "kind %d: the message does not say '%s': %s", kind, says[kind],
                  sp_last_error());
        cr_assert_eq(r.steps, steps[kind], "kind %d: %ld steps", kind, r.steps);
    }
    double secs = sp_now() - t0;
    /* a joined thread leaves the count a moment after pthread_join returns (the kernel
     * wakes the joiner before it releases the task): wait up to a second for it */
    long after = proc_status_field("Threads:");
    for (int w = 0; w < 100 && after != threads; w++) {
        nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
        after = proc_status_field("Threads:");
    }
    cr_expect_eq(after, threads, "threads: %ld before, %ld after", threads, after);
    cr_expect_eq(open_fds(), fds, "file descriptors: %d before, %d after", fds, open_fds());
    cr_expect_leq(proc_maps(), maps + 4, "mappings: %d before, %d after", maps, proc_maps());
    size_t now = mallinfo2().uordblks;
    cr_expect_leq(now, heap + 16384, "heap in use: %zu bytes before, %zu after 1,000 failed runs", heap, now);
    if (!SANITIZED)   /* ASan's quarantine keeps freed memory resident */
        cr_expect_leq(proc_status_field("VmRSS:"), rss + 512, "resident: %ld kB before, %ld kB after 1,000 failed runs",
                      rss, proc_status_field("VmRSS:"));
    cr_expect_lt(secs, 10.0, "1,000 failing runs took %.1f s", secs);
    for (int k = 0; k <= FAIL_KINDS; k++) sp_dataset_free(sets[k]);
}

/* ---- 1,000 guarded refusals leave nothing behind ---- */

static long statm_resident_bytes(void)   /* /proc/self/statm's second field, in pages */
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, resident = -1;
    if (f && fscanf(f, "%ld %ld", &size, &resident) != 2) resident = -1;
    if (f) fclose(f);
    return resident < 0 ? -1 : resident * sysconf(_SC_PAGESIZE);
}

static int task_count(void)   /* the process's threads: /proc/self/task */
{
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

enum { REF_OPTIM, REF_TEST_SET, REF_ADD_NAME, REF_ADD_TWICE, REF_LAYER_SHAPE, REF_CONSTRUCTORS, REF_KINDS };

/* One refused call of the given kind, on what it built itself (freed after). Returns the
 * message, for the caller to check. */
static const char *refuse_once(int kind, sp_dataset *train, sp_dataset *test)
{
    sp_clear_error();
    switch (kind) {
    case REF_OPTIM:      /* sp_train given an optimizer of another model's parameters */
    case REF_TEST_SET: { /* a test set of another sample shape, refused at the first evaluation */
        sp_model *m = sp_zoo_mlp(4, 3, 2), *other = sp_zoo_mlp(4, 3, 2);
        sp_model_init(m, 1);
        sp_optim_cfg oc = sp_optim_cfg_default();
        oc.momentum = 0.9;
        sp_model *owner = kind == REF_OPTIM ? other : m;
        sp_optim *o = sp_optim_create("sgd", owner->params, owner->nparams, &oc);
        sp_engine *e = sp_engine_create("linear", NULL);
        sp_loader *l = sp_loader_new(train, 4, false, 1, false);
        cr_assert(o && e && l, "%s", sp_last_error());
        sp_train_cfg tc = sp_train_cfg_default();
        tc.app = "leak", tc.steps = 2, tc.quiet = true, tc.eval_every = 1;
        sp_train_result r = sp_train(m, e, o, l, kind == REF_TEST_SET ? test : NULL, &tc);
        cr_assert_eq(r.status, SP_ERR, "kind %d: sp_train accepted", kind);
        sp_loader_free(l);
        sp_engine_destroy(e);
        sp_optim_free(o);
        sp_model_free(m);
        sp_model_free(other);
        break;
    }
    case REF_ADD_NAME:   /* a parameter name the model has */
    case REF_ADD_TWICE: { /* a layer the model holds already */
        sp_model *m = sp_zoo_mlp(4, 3, 2);
        sp_layer *l = kind == REF_ADD_NAME ? sp_linear("fc1", 2, 2) : m->layers[0];
        cr_assert_eq(sp_model_add(m, l), SP_MODEL_NONE, "kind %d: sp_model_add accepted", kind);
        sp_model_free(m);
        break;
    }
    case REF_LAYER_SHAPE:   /* guarded layer constructors given a bad shape */
        cr_assert_null(sp_linear("fc", 0, 3));
        cr_assert_null(sp_conv2d("conv", 1, 6, 0, 1, 0));
        break;
    case REF_CONSTRUCTORS: {   /* constructors by name: an unknown optimizer or engine */
        sp_model *m = sp_zoo_mlp(4, 3, 2);
        sp_optim_cfg oc = sp_optim_cfg_default();
        cr_assert_null(sp_engine_create("no-such-engine", NULL));
        cr_assert_null(sp_optim_create("no-such-optimizer", m->params, m->nparams, &oc));
        sp_model_free(m);
        break;
    }
    }
    return sp_last_error();
}

/* Guarded refusals free what they built: after 1,000 of them — sp_train refusing an
 * optimizer of other parameters and a test set at an evaluation, sp_model_add refusing a
 * duplicate name and a layer added twice, layer constructors refusing a bad shape, the
 * constructors by name refusing an unknown name — the resident set has grown by less
 * than 1 MB, the heap by less than 16 kB, and the threads, descriptors and mappings are
 * where they were. */
Test(train, guarded_refusals_leak_nothing, .timeout = 120)
{
    sp_set_threads(2);
    sp_dataset *train = small_set(8, 4, 8, 0), *test = small_set(8, 5, 8, 0);
    static const char *says[REF_KINDS] = {"optimizer does not hold", "fc1",           "fc1.weight",
                                          "already",                 "kernel 0",      "no-such-optimizer"};
    long rss = 0;
    int threads = 0, fds = 0, maps = 0;
    size_t heap = 0;
    for (int i = 0; i < 1000 + 4 * REF_KINDS; i++) {
        if (i == 4 * REF_KINDS) {   /* after a warm-up: the pool's threads, lazily made buffers */
            rss = statm_resident_bytes();
            threads = task_count();
            fds = open_fds();
            maps = proc_maps();
            heap = mallinfo2().uordblks;
        }
        int kind = i % REF_KINDS;
        const char *msg = refuse_once(kind, train, test);
        cr_assert(strstr(msg, says[kind]), "kind %d: the message does not say '%s': '%s'", kind, says[kind], msg);
    }
    long grew = statm_resident_bytes() - rss;
    cr_log_info("1,000 refusals: resident %+ld kB, heap %+ld bytes, mappings %+d, threads %d -> %d, descriptors %d -> %d",
                grew / 1024, (long)mallinfo2().uordblks - (long)heap, proc_maps() - maps, threads, task_count(), fds,
                open_fds());
    cr_expect_eq(task_count(), threads, "threads: %d before, %d after 1,000 refusals", threads, task_count());
    cr_expect_eq(open_fds(), fds, "file descriptors: %d before, %d after 1,000 refusals", fds, open_fds());
    cr_expect_leq(proc_maps(), maps + 4, "mappings: %d before, %d after 1,000 refusals", maps, proc_maps());
    size_t now = mallinfo2().uordblks;
    cr_expect_leq(now, heap + 16384, "heap in use: %zu bytes before, %zu after 1,000 refusals", heap, now);
    if (!SANITIZED)   /* ASan's quarantine keeps freed memory resident; a leaked evaluation arena: +1.3 MB */
        cr_expect_lt(grew, 1L << 20, "resident set grew by %ld kB over 1,000 refusals", grew / 1024);
    sp_dataset_free(train);
    sp_dataset_free(test);
}

/* A diverged demo stops as the other apps do: one line "loss became ...", exit 2, and
 * no checkpoint of NaN weights (alone and under --parallel zb-h1). */
Test(train, diverged_demo_stops_and_saves_nothing)
{
    const char *extra[] = {"", "--parallel zb-h1"};
    const char *env[] = {"", TU_MPI_FAST_ENV};   /* Open MPI keeps what MPI_Init allocated */
    for (int i = 0; i < 2; i++) {
        char path[4200], cmd[8800], err[4096];
        snprintf(path, sizeof path, "%s/nan%d.st", tu_tmpdir(), i);
        snprintf(cmd, sizeof cmd, "%s%s --quiet --steps 30 --lr 3e38 --save %s %s", env[i], tu_bin("demo"), path,
                 extra[i]);
        int rc = tu_run(cmd, NULL, 0, err, sizeof err);
        cr_assert_eq(rc, 2, "%s: exit %d (%s)", cmd, rc, err);
        cr_assert(strstr(err, "loss became"), "%s: '%s'", cmd, err);
        const char *first = strstr(err, "scanprop: ");   /* one error line (after zb-h1's one-worker note) */
        cr_assert(first && !strstr(first + 1, "scanprop: ") && strchr(first, '\n') == err + strlen(err) - 1,
                  "%s: not one error line: '%s'", cmd, err);
        cr_assert_neq(access(path, F_OK), 0, "%s: wrote %s", cmd, path);
    }
}

/* One NaN input under ReLU: the loss stays finite (relu(nan) is 0 here), fc1's weights
 * become NaN; sp_train stops with a status naming them, and saves no checkpoint of them. */
Test(train, non_finite_weights_under_a_finite_loss_are_a_status)
{
    float *x;
    int *y;
    sp_dataset *d = sp_dataset_new_f32("nan-input", 8, 1, (int[]){4}, 2, &x, &y);
    cr_assert_not_null(d);
    tu_fill_uniform(x, 32, 3, -1, 1);
    for (int i = 0; i < 8; i++) y[i] = i % 2;
    x[5] = NAN;
    char ck[4200];
    snprintf(ck, sizeof ck, "%s/nan-weights.st", tu_tmpdir());
    for (int save = 0; save < 2; save++) {
        sp_model *m = sp_zoo_mlp(4, 3, 2);
        sp_model_init(m, 1);
        sp_optim_cfg oc = sp_optim_cfg_default();
        sp_optim *o = sp_optim_create("sgd", m->params, m->nparams, &oc);
        sp_engine *e = sp_engine_create("linear", NULL);
        sp_loader *l = sp_loader_new(d, 4, false, 1, false);
        sp_train_cfg tc = sp_train_cfg_default();
        tc.steps = 2, tc.quiet = true;
        if (save) tc.save_every = 1, tc.save_path = ck;
        sp_train_result r = sp_train(m, e, o, l, NULL, &tc);
        cr_assert(isfinite(r.last_loss) || r.status == SP_ERR, "the loss went non-finite: not this case");
        cr_assert_eq(r.status, SP_ERR, "save %d: NaN weights reported as success", save);
        cr_assert(strstr(sp_last_error(), "fc1.weight") && strstr(sp_last_error(), "nan"), "save %d: %s", save,
                  sp_last_error());
        cr_assert_neq(access(ck, F_OK), 0, "save %d: a checkpoint of NaN weights was written", save);
        sp_loader_free(l);
        sp_engine_destroy(e);
        sp_optim_free(o);
        sp_model_free(m);
    }
    sp_dataset_free(d);
}

/* An optimizer that does not step this model's parameters — built on another model, or
 * before a layer was added — is refused before any step, naming the parameter. */
Test(train, an_optimizer_of_other_parameters_is_refused)
{
    sp_dataset *d = small_set(8, 4, 8, 0);
    for (int how = 0; how < 2; how++) {
        sp_model *m = sp_zoo_mlp(4, 3, 2), *other = sp_zoo_mlp(4, 3, 2);
        sp_optim_cfg oc = sp_optim_cfg_default();
        sp_optim *o;
        if (how == 0) {
            o = sp_optim_create("sgd", other->params, other->nparams, &oc);
        } else {
            o = sp_optim_create("sgd", m->params, m->nparams, &oc);
            cr_assert_geq(sp_model_add(m, sp_linear("fc3", 2, 2)), 0, "%s", sp_last_error());
        }
        sp_model_init(m, 1);
        sp_engine *e = sp_engine_create("linear", NULL);
        sp_loader *l = sp_loader_new(d, 4, false, 1, false);
        sp_train_cfg tc = sp_train_cfg_default();
        tc.steps = 2, tc.quiet = true;
        sp_train_result r = sp_train(m, e, o, l, NULL, &tc);
        cr_assert_eq(r.status, SP_ERR, "case %d: trained with an optimizer of other parameters", how);
        cr_assert_eq(r.steps, 0);
        cr_assert(strstr(sp_last_error(), how ? "fc3.weight" : "fc1.weight") &&
                  strstr(sp_last_error(), "optimizer does not hold"), "case %d: %s", how, sp_last_error());
        sp_loader_free(l);
        sp_engine_destroy(e);
        sp_optim_free(o);
        sp_model_free(m);
        sp_model_free(other);
    }
    sp_dataset_free(d);
}

/* The --log is on disk before the checkpoint that claims its steps: a run stopped
 * between the two (here: the save at step 2 fails) leaves the log holding step 2's row,
 * never a checkpoint of steps the log lost. */
Test(train, log_is_on_disk_before_the_checkpoint_claiming_its_steps)
{
    sp_dataset *d = small_set(8, 4, 8, 0);
    char dir[4200], ck[4300], log[4300];
    snprintf(dir, sizeof dir, "%s/order", tu_tmpdir());
    snprintf(ck, sizeof ck, "%s/ck.st", dir);
    snprintf(log, sizeof log, "%s/order.csv", tu_tmpdir());
    cr_assert_eq(mkdir(dir, 0755), 0);
    sp_model *m = sp_zoo_mlp(4, 3, 2);
    sp_model_init(m, 1);
    sp_optim_cfg oc = sp_optim_cfg_default();
    sp_optim *o = sp_optim_create("sgd", m->params, m->nparams, &oc);
    sp_engine *e = sp_engine_create("linear", NULL);
    sp_loader *l = sp_loader_new(d, 4, false, 1, false);
    sp_train_cfg tc = sp_train_cfg_default();
    tc.steps = 4, tc.quiet = true, tc.save_every = 2, tc.save_path = ck, tc.log_path = log;
    fail_ctx f = {dir, NULL};   /* the checkpoint's folder removed after step 1 */
    tc.on_step = break_after_step_1, tc.on_step_ctx = &f;
    sp_train_result r = sp_train(m, e, o, l, NULL, &tc);
    cr_assert_eq(r.status, SP_ERR, "the save at step 2 did not fail");
    cr_assert(strstr(sp_last_error(), "ck.st"), "%s", sp_last_error());
    FILE *fp = fopen(log, "r");
    cr_assert_not_null(fp, "no --log on disk when the checkpoint of step 2 was being written");
    char line[256];
    bool step2 = false;
    while (fgets(line, sizeof line, fp)) step2 |= strncmp(line, "2,0,", 4) == 0;
    fclose(fp);
    cr_assert(step2, "the --log on disk lacks step 2's row while its checkpoint was being written");
    sp_loader_free(l);
    sp_engine_destroy(e);
    sp_optim_free(o);
    sp_model_free(m);
    sp_dataset_free(d);
}

/* 96 samples, 12 steps an epoch, shuffled (the loader reuses its buffers while a step's
 * last δW may still read the batch): every weight after two epochs, and the train loss. */
static float *train_lenet(const char *order, size_t *nw, double *train_loss)
{
    sp_dataset *d = rand_images(96, 11);
    sp_train_cfg tc = {.app = "overlap", .epochs = 2, .quiet = true};
    sp_train_result r;
    float *w = train_lenet_on(d, order, false, true, NULL, &tc, &r, nw);
    cr_assert_eq(r.steps, 24);
    *train_loss = r.train_loss;
    sp_dataset_free(d);
    return w;
}

Test(train, ooo_overlapping_the_next_forward_is_bitwise_linear)
{
    sp_set_threads(2);
    sp_ooo_exec_set_min_two_lane_flops(0);   /* two lanes on this small model, no tuner */
    size_t n, n2;
    double l0, l1;
    float *ref = train_lenet(NULL, &n, &l0);
    static const char *orders[] = {"ooo", "reverse-first-k", "list", "conventional"};
    for (int k = 0; k < 4; k++) {
        float *w = train_lenet(orders[k], &n2, &l1);
        cr_assert_eq(n2, n);
        cr_assert_eq(memcmp(w, ref, (size_t)n * sizeof *w), 0, "order %s: weights differ from linear BP's", orders[k]);
        cr_assert_eq(l1, l0, "order %s: train loss %.9g vs %.9g", orders[k], l1, l0);
        free(w);
    }
    free(ref);
}

/* The next forward overlaps the last δW/U, so a checkpoint must join the lanes first to
 * hold every update of its step. The last one is written before the loop's end-of-run
 * join: without its own join it holds conv1's weights from before their last update. */
Test(train, ooo_checkpoint_holds_every_update_of_its_step)
{
    sp_set_threads(2);
    sp_ooo_exec_set_min_two_lane_flops(0);
    char path[4200];
    snprintf(path, sizeof path, "%s/overlap.st", tu_tmpdir());
    sp_dataset *d = rand_images(24, 5);
    sp_train_cfg tc = {.app = "overlap", .steps = 3, .quiet = true, .save_every = 1, .save_path = path};
    sp_train_result r;
    size_t n, n2;
    float *w = train_lenet_on(d, "ooo", true, false, NULL, &tc, &r, &n);
    cr_assert_eq(r.steps, 3);
    sp_model *m2 = sp_zoo_model("lenet");
    sp_model_init(m2, 4);
    sp_optim_cfg oc = sp_optim_cfg_default();
    oc.momentum = 0.9;
    sp_optim *o2 = sp_optim_create("sgd", m2->params, m2->nparams, &oc);
    sp_train_state st;
    cr_assert_eq(sp_checkpoint_load(path, m2, o2, &st, NULL), SP_OK, "%s", sp_last_error());
    cr_assert_eq(st.step, 3);
    float *w2 = tu_model_weights(m2, &n2);
    cr_assert_eq(n2, n);
    cr_assert_eq(memcmp(w2, w, n * sizeof *w), 0, "the step-3 checkpoint differs from the weights after step 3");
    free(w);
    free(w2);
    remove(path);
    sp_optim_free(o2);
    sp_model_free(m2);
    sp_dataset_free(d);
}

/* ... and an evaluation must join them to see every update of its step. */
Test(train, ooo_evaluation_sees_every_update_of_its_step)
{
    sp_set_threads(2);
    sp_ooo_exec_set_min_two_lane_flops(0);
    sp_dataset *d = rand_images(24, 5);
    sp_train_cfg tc = {.app = "overlap", .steps = 3, .quiet = true, .eval_every = 3, .eval_batch = 8};
    sp_train_result r;
    size_t n;
    float *w = train_lenet_on(d, "ooo", true, false, d, &tc, &r, &n);
    cr_assert_eq(r.steps, 3);
    sp_model *m = sp_zoo_model("lenet");
    size_t k = 0;
    for (int i = 0; i < m->nparams; i++) {
        memcpy(m->params[i]->value.data, w + k, m->params[i]->value.numel * sizeof *w);
        k += m->params[i]->value.numel;
    }
    cr_assert_eq(k, n);
    double loss, acc;
    cr_assert_eq(sp_evaluate(m, d, 8, &loss, &acc), SP_OK, "%s", sp_last_error());
    cr_assert_eq(r.test_loss, loss, "the step-3 evaluation's loss %.9g, the weights after step 3 give %.9g",
                 r.test_loss, loss);
    free(w);
    sp_model_free(m);
    sp_dataset_free(d);
}

/* sp_evaluate is a status: a set the model refuses (another sample shape, a label past
 * its classes) or a batch of 0 is SP_ERR naming it, the outputs untouched, the model in
 * its mode; 200 such calls leave the resident memory where it was. */
Test(train, evaluate_refusals_are_a_status)
{
    sp_dataset *wide = small_set(8, 5, 8, 0), *label = small_set(8, 4, 4, 7);
    sp_model *m = sp_zoo_mlp(4, 3, 2);
    sp_model_init(m, 1);
    double loss = -1, acc = -1;
    long rss = 0;
    for (int i = 0; i < 210; i++) {
        if (i == 10) rss = proc_status_field("VmRSS:");
        cr_assert_eq(sp_evaluate(m, wide, 4, &loss, &acc), SP_ERR, "a set of another shape was evaluated");
        cr_assert(strstr(sp_last_error(), "fc1"), "%s", sp_last_error());
        cr_assert_eq(sp_evaluate(m, label, 4, &loss, &acc), SP_ERR, "a label past the classes was evaluated");
        cr_assert(strstr(sp_last_error(), "label 7"), "%s", sp_last_error());
    }
    if (!SANITIZED)   /* ASan's quarantine keeps freed memory resident */
        cr_expect_leq(proc_status_field("VmRSS:"), rss + 512, "resident: %ld kB, then %ld kB", rss,
                      proc_status_field("VmRSS:"));
    cr_assert_eq(sp_evaluate(m, wide, 0, &loss, &acc), SP_ERR);
    cr_assert(strstr(sp_last_error(), "'batch' is 0"), "%s", sp_last_error());
    cr_assert(loss == -1 && acc == -1, "a refused evaluation wrote its outputs");
    cr_assert_not(m->eval, "the model was left in eval mode");
    sp_model_free(m);
    sp_dataset_free(wide);
    sp_dataset_free(label);
}

/* sp_train_step is a status too: a batch of another shape or a label past the classes
 * returns NaN with the message (cleared on a good step), and the next good step trains. */
Test(train, train_step_refusals_are_a_status)
{
    sp_model *m = sp_zoo_mlp(4, 3, 2);
    sp_model_init(m, 1);
    sp_optim_cfg oc = sp_optim_cfg_default();
    sp_optim *o = sp_optim_create("sgd", m->params, m->nparams, &oc);
    sp_engine *e = sp_engine_create("linear", NULL);
    cr_assert(o && e, "%s", sp_last_error());
    sp_tape t;
    sp_tape_init(&t);
    float xs[2 * 5] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, -0.1f, -0.2f, -0.3f, -0.4f, -0.5f};
    sp_tensor wide = sp_tensor_2d(xs, 2, 5), good = sp_tensor_2d(xs, 2, 4);
    for (int i = 0; i < 100; i++) {
        sp_tape_reset(&t);
        cr_assert(isnan(sp_train_step(m, e, o, &t, &wide, (int[]){0, 1}, NULL, NULL, NULL)), "a wide batch trained");
        cr_assert(strstr(sp_last_error(), "fc1"), "%s", sp_last_error());
        sp_tape_reset(&t);
        cr_assert(isnan(sp_train_step(m, e, o, &t, &good, (int[]){0, 7}, NULL, NULL, NULL)), "label 7 trained");
        cr_assert(strstr(sp_last_error(), "label 7"), "%s", sp_last_error());
        sp_tape_reset(&t);
        float loss = sp_train_step(m, e, o, &t, &good, (int[]){0, 1}, NULL, NULL, NULL);
        cr_assert(isfinite(loss) && sp_last_error()[0] == 0, "a good step after refusals: %g '%s'", loss,
                  sp_last_error());
    }
    sp_tape_free(&t);
    sp_engine_destroy(e);
    sp_optim_free(o);
    sp_model_free(m);
}

/* The evaluation frees each output after its last reader (train/train_eval.c,
 * eval_forward): its loss and accuracy are bitwise those of the whole forward on one
 * tape, on a chain (LeNet-5) and on a DAG with residual adds (ResNet-20). */
static void whole_tape_eval(sp_model *m, sp_dataset *d, int batch, double *loss, double *acc)
{
    sp_model_set_training(m, false);
    sp_loader *l = sp_loader_new_sync(d, batch, false, 0, false);
    sp_tape t;
    sp_tape_init(&t);
    double sum = 0;
    long correct = 0, seen = 0;
    sp_batch b;
    while (sp_loader_next(l, &b)) {
        sp_tape_reset(&t);
        sp_node *ln = sp_model_loss(m, &t, &b.x, b.y);
        const sp_tensor *z = &ln->input->out;
        int K = z->shape[1];
        for (int i = 0; i < b.n; i++) {
            const float *zi = (const float *)z->data + (size_t)i * K;
            int best = 0;
            for (int k = 1; k < K; k++) best = zi[k] > zi[best] ? k : best;
            correct += best == b.y[i];
        }
        sum += (double)sp_tensor_get(&ln->out, 0) * b.n;
        seen += b.n;
    }
    sp_tape_free(&t);
    sp_loader_free(l);
    sp_model_set_training(m, true);
    *loss = sum / (double)seen;
    *acc = (double)correct / (double)seen;
}

Test(train, evaluation_freeing_outputs_is_bitwise_the_whole_forward)
{
    sp_set_threads(2);
    for (int which = 0; which < 2; which++) {
        int side = which ? 32 : 28, n = 20, shape[3] = {1, side, side};
        float *x;
        int *y;
        sp_dataset *d = sp_dataset_new_f32("rand", n, 3, shape, 10, &x, &y);
        cr_assert_not_null(d);
        tu_fill_uniform(x, (size_t)n * side * side, 11 + which, -1, 1);
        for (int i = 0; i < n; i++) y[i] = (i * 3) % 10;
        sp_model *m = which ? sp_zoo_resnet20(1, 10) : sp_zoo_model("lenet");
        sp_model_init(m, 5);
        double l0, a0, l1, a1;
        whole_tape_eval(m, d, 8, &l0, &a0);
        cr_assert_eq(sp_evaluate(m, d, 8, &l1, &a1), SP_OK, "%s", sp_last_error());
        cr_assert_eq(l0, l1, "%s: loss %.17g evaluated, %.17g on the whole tape", m->name, l1, l0);
        cr_assert_eq(a0, a1, "%s: accuracy %g evaluated, %g on the whole tape", m->name, a1, a0);
        cr_assert(isfinite(l1));
        sp_model_free(m);
        sp_dataset_free(d);
    }
}

/* The evaluation batch changes the evaluation's memory, not its results: the same
 * accuracy, the loss within 1e-6 (each batch's mean loss is a float sum over the batch);
 * at the training batch (the apps' default) the evaluation's arenas stay within the
 * step's, and they are trimmed after each evaluation (the steps after it map their own). */
Test(train, eval_batch_changes_memory_not_results)
{
    sp_set_threads(2);
    sp_dataset *d = rand_images(24, 7), *test = rand_images(21, 8);   /* 21: a short last batch */
    const int batches[] = {8, 1, 5, 21, 256};   /* first: the training batch */
    double loss0 = 0, acc0 = 0;
    for (size_t i = 0; i < sizeof batches / sizeof batches[0]; i++) {
        sp_train_cfg tc = sp_train_cfg_default();
        tc.quiet = true;
        tc.steps = 3;
        tc.eval_batch = batches[i];
        sp_train_result r;
        size_t n;
        free(train_lenet_on(d, NULL, false, false, test, &tc, &r, &n));
        cr_assert_eq(r.status, SP_OK, "%s", sp_last_error());
        cr_assert(isfinite(r.test_loss) && r.eval_arena_bytes > 0);
        if (i == 0) {
            loss0 = r.test_loss, acc0 = r.test_acc;
            cr_expect_leq(r.eval_arena_bytes, r.arena_bytes,
                          "at the training batch the evaluation's arenas (%zu bytes) outgrow the step's (%zu)",
                          r.eval_arena_bytes, r.arena_bytes);
            continue;
        }
        cr_expect_eq(r.test_acc, acc0, "eval_batch %d: accuracy %g, %g at the training batch", batches[i],
                     r.test_acc, acc0);
        cr_expect_leq(fabs(r.test_loss - loss0), 1e-6 * fmax(1.0, fabs(loss0)),
                      "eval_batch %d: loss %.9g, %.9g at the training batch", batches[i], r.test_loss, loss0);
    }
    sp_dataset_free(d);
    sp_dataset_free(test);
}

/* ---- the engine seam: train/ knows engines only through engine.h -------------- */

/* A toy engine made through the interface alone, as an out-of-tree engine would be: linear
 * BP underneath, and ooo's contract for the updates kept on one thread. backward_async
 * holds each layer's update U_l (opts.update) back; the next forward's wait_layer on l
 * runs it, sync runs what is left. The hooks count their calls. */
typedef struct toy_engine {
    sp_engine *linear;
    sp_layer *pending[64];   /* updates not yet run, in layer order */
    int npending;
    long asyncs, syncs, waits, updates_in_forward;
} toy_engine;

static void toy_run(sp_engine *e, int i)
{
    toy_engine *s = e->state;
    if (!s->pending[i]) return;
    e->opts.update(e->opts.update_ctx, s->pending[i]);
    s->pending[i] = NULL;
}

static void toy_sync(sp_engine *e)
{
    toy_engine *s = e->state;
    s->syncs++;
    for (int i = 0; i < s->npending; i++) toy_run(e, i);
    s->npending = 0;
}

static void toy_wait_layer(sp_engine *e, const sp_layer *l)
{
    toy_engine *s = e->state;
    s->waits++;
    for (int i = 0; i < s->npending; i++)
        if (s->pending[i] == l) toy_run(e, i), s->updates_in_forward++;
}

static void toy_backward_async(sp_engine *e, sp_tape *t, sp_node *loss)
{
    toy_engine *s = e->state;
    cr_assert_eq(s->npending, 0, "backward_async before the last backward was joined");
    s->asyncs++;
    sp_backward(s->linear, t, loss);
    for (int i = 0; i <= loss->index; i++) {   /* each parameterised layer once */
        sp_layer *l = t->nodes[i]->layer;
        bool seen = false;
        for (int k = 0; k < s->npending; k++) seen |= s->pending[k] == l;
        if (l && l->nparams > 0 && !seen && s->npending < 64) s->pending[s->npending++] = l;
    }
}

static void toy_backward(sp_engine *e, sp_tape *t, sp_node *loss)
{
    toy_backward_async(e, t, loss);
    toy_sync(e);
}

static void toy_destroy(sp_engine *e)
{
    toy_engine *s = e->state;
    sp_engine_destroy(s->linear);
    free(s);
}

static sp_engine *toy_create(const sp_engine_opts *opts)
{
    sp_engine *e = calloc(1, sizeof *e);
    toy_engine *s = calloc(1, sizeof *s);
    cr_assert(e && s);
    s->linear = sp_engine_create("linear", NULL);
    *e = (sp_engine){.name = "toy", .opts = *opts, .caps = SP_ENGINE_LAYER_UPDATES, .backward = toy_backward,
                     .destroy = toy_destroy, .state = s, .backward_async = toy_backward_async, .sync = toy_sync,
                     .wait_layer = toy_wait_layer};
    return e;
}

/* sp_train drives an engine it has never heard of through its hooks: every step's next
 * forward overlaps the held-back updates (waits and updates inside the forward), the run
 * gives linear BP's bits, and no step starts a backward before the last one was joined. */
Test(train, a_toy_engine_through_the_interface_overlaps_and_matches_linear)
{
    sp_set_threads(2);   /* the overlap needs two threads on the CPU */
    size_t n, n2;
    double l0;
    float *ref = train_lenet(NULL, &n, &l0);
    sp_dataset *d = rand_images(96, 11);
    sp_model *m = sp_zoo_model("lenet");
    sp_model_init(m, 3);
    sp_optim_cfg oc = sp_optim_cfg_default();
    oc.lr = 0.05;
    oc.momentum = 0.9;
    sp_optim *o = sp_optim_create("sgd", m->params, m->nparams, &oc);
    layer_update u = {o, NULL};
    sp_engine *e = toy_create(&(sp_engine_opts){.update = update_layer, .update_ctx = &u});
    sp_loader *l = sp_loader_new(d, 8, true, 1, false);
    sp_train_cfg tc = {.app = "toy", .epochs = 2, .quiet = true};
    sp_train_result r = sp_train(m, e, o, l, NULL, &tc);
    cr_assert_eq(r.steps, 24);
    const toy_engine *s = e->state;
    cr_assert_eq(s->asyncs, 24, "backward_async ran %ld times in 24 steps", s->asyncs);
    cr_assert_geq(s->syncs, 24, "sync ran %ld times in 24 steps", s->syncs);
    cr_assert_eq(s->npending, 0, "sp_train returned with updates not joined");
    /* the loop joins at the end of each epoch: 11 forwards an epoch follow an unjoined
     * backward, and each waits on lenet's 5 parameterised layers */
    cr_assert_geq(s->waits, 2 * 11 * 5, "wait_layer ran %ld times", s->waits);
    cr_assert_eq(s->updates_in_forward, 2 * 11 * 5, "%ld updates ran inside a forward", s->updates_in_forward);
    float *w = tu_model_weights(m, &n2);
    cr_assert_eq(n2, n);
    cr_assert_eq(memcmp(w, ref, n * sizeof *w), 0, "the toy engine's weights differ from linear BP's");
    cr_assert_eq(r.train_loss, l0, "train loss %.9g vs linear's %.9g", r.train_loss, l0);
    free(w);
    free(ref);
    sp_loader_free(l);
    sp_engine_destroy(e);
    sp_optim_free(o);
    sp_model_free(m);
    sp_dataset_free(d);
}

/* Where line names word as a whole token (not the tail of a longer name: a scheme's
 * s->scheme->name is no e->name), or NULL. */
static const char *names_token(const char *line, const char *word)
{
    for (const char *p = line; (p = strstr(p, word)); p++)
        if (p == line || !(isalnum((unsigned char)p[-1]) || p[-1] == '_')) return p;
    return NULL;
}

/* The loop and the runner name no engine: what they need of one is in engine.h (hooks,
 * SP_ENGINE_* capabilities). Flags' help and `needs` data may name engines; code may not
 * call an engine's own functions, include its headers or compare its name. */
Test(train, train_and_cli_name_no_engine)
{
    static const char *forbidden[] = {"sp_ooo_", "sp_bppsa_", "sp_engine_ooo", "sp_engine_bppsa",
                                      "sp_engine_linear", "backward/ooo.h", "backward/bppsa", "backward/engines.h",
                                      "\"ooo\"", "\"bppsa\"", "\"linear\"", "e->name"};
    int checked = 0;
    static const char *folders[] = {"train", "cli"};
    for (size_t f = 0; f < sizeof folders / sizeof *folders; f++) {
    DIR *dir = opendir(folders[f]);
    cr_assert_not_null(dir, "%s not found (run from the repository root)", folders[f]);
    for (struct dirent *de; (de = readdir(dir));) {
        size_t len = strlen(de->d_name);
        if (len < 3 || (strcmp(de->d_name + len - 2, ".c") != 0 && strcmp(de->d_name + len - 2, ".h") != 0)) continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", folders[f], de->d_name);
        FILE *fp = fopen(path, "r");
        cr_assert_not_null(fp, "%s: cannot read", path);
        char line[4096];
        for (int no = 1; fgets(line, sizeof line, fp); no++)
            for (size_t k = 0; k < sizeof forbidden / sizeof *forbidden; k++)
                cr_expect_null(names_token(line, forbidden[k]), "%s:%d names an engine (%s): %s", path, no, forbidden[k],
                               line);
        fclose(fp);
        checked++;
    }
    closedir(dir);
    }
    cr_assert_geq(checked, 12, "only %d sources in train/ and cli/", checked);
}

/* ---- the linear engine's updates in its walk, gradients in the step ------------------- */

/* model (from seed 3) trained on d in batches of 4 for 3 steps by the linear engine, with
 * its updates in the walk (walk) or one sp_optim_step after it; every weight, the loss,
 * whether the gradients lived in the step; afterwards every gradient buffer is back. */
static float *train_walk(const char *model, sp_dataset *d, const char *optim, bool walk, size_t *nw, double *loss,
                         bool *in_step)
{
    sp_model *m = sp_zoo_model(model);
    sp_model_init(m, 3);
    sp_optim_cfg oc = sp_optim_cfg_default();
    oc.lr = 0.02;
    oc.momentum = 0.9;
    oc.weight_decay = 1e-3;
    sp_optim *o = sp_optim_create(optim, m->params, m->nparams, &oc);
    cr_assert_not_null(o);
    layer_update u = {o, NULL};
    sp_engine_opts eo = {.update = update_layer, .update_ctx = &u};
    sp_engine *e = sp_engine_create("linear", walk ? &eo : NULL);
    cr_assert(e->caps & SP_ENGINE_STEP_GRADS);
    sp_loader *l = sp_loader_new(d, 4, true, 1, false);
    sp_train_cfg tc = {.app = "walk", .steps = 3, .quiet = true};
    sp_train_result r = sp_train(m, e, o, l, NULL, &tc);
    cr_assert_eq(r.status, SP_OK, "%s", sp_last_error());
    cr_assert_eq(r.steps, 3);
    *loss = r.train_loss;
    *in_step = r.grads_in_step;
    for (int i = 0; i < m->nparams; i++)
        cr_assert(!m->params[i]->grad_in_step && m->params[i]->grad.data,
                  "%s: %s's gradient buffer is not back after sp_train", model, m->params[i]->name);
    float *w = tu_model_weights(m, nw);
    sp_loader_free(l);
    sp_engine_destroy(e);
    sp_optim_free(o);
    sp_model_free(m);
    return w;
}

/* The linear engine with opts.update runs each layer's update after the backward of its
 * last node and makes the gradients in the step's arena: bitwise the step with all the
 * gradients held and one update after the walk, on a chain (LeNet-5) and a DAG with batch
 * norm (ResNet-20), with SGD (momentum, weight decay) and Adam. */
Test(train, linear_walk_updates_with_step_gradients_are_bitwise_one_update, .timeout = 300)
{
    sp_set_threads(2);
    static const char *models[] = {"lenet", "resnet20"}, *optims[] = {"sgd", "adam"};
    for (int k = 0; k < 2; k++) {
        int side = k ? 32 : 28, shape[3] = {1, side, side};
        float *x;
        int *y;
        sp_dataset *d = sp_dataset_new_f32("rand", 12, 3, shape, 10, &x, &y);
        tu_fill_uniform(x, (size_t)12 * side * side, 7, -1, 1);
        for (int i = 0; i < 12; i++) y[i] = (i * 3) % 10;
        for (int q = 0; q < 2; q++) {
            size_t n0, n1;
            double l0, l1;
            bool s0, s1;
            float *ref = train_walk(models[k], d, optims[q], false, &n0, &l0, &s0);
            float *w = train_walk(models[k], d, optims[q], true, &n1, &l1, &s1);
            cr_assert(!s0, "%s: gradients in the step without updates in the walk", models[k]);
            cr_assert(s1, "%s %s: the walk's updates did not put the gradients in the step", models[k], optims[q]);
            cr_assert_eq(n1, n0);
            cr_assert_eq(memcmp(w, ref, n0 * sizeof *w), 0, "%s %s: the walk's updates change the weights (max rel %g)",
                         models[k], optims[q], tu_max_rel_diff(w, ref, n0));
            cr_assert_eq(l1, l0, "%s %s: train loss %.9g vs %.9g", models[k], optims[q], l1, l0);
            free(ref);
            free(w);
        }
        sp_dataset_free(d);
    }
}

/* One layer applied twice (its gradient summed over both nodes: updated only after the
 * second, held from the first to the step's end) and one layer the walk never reaches
 * (updated from a zero gradient by sp_optim_step_rest, as sp_optim_step would): three
 * steps by hand, bitwise the steps with the gradients held and one sp_optim_step. */
Test(train, linear_walk_updates_a_shared_layer_after_its_last_node)
{
    sp_set_threads(2);
    float ref[2][6 * 6 + 6], got[2][6 * 6 + 6], idle0[6 * 6 + 6];
    for (int walk = 0; walk < 2; walk++) {
        sp_layer *fc = sp_linear("fc", 6, 6), *relu = sp_relu(), *ce = sp_softmax_ce(), *idle = sp_linear("idle", 6, 6);
        sp_rng r;
        sp_rng_seed(&r, 5);
        sp_fill_uniform(&fc->params[0]->value, &r, 0.5f);
        sp_fill_uniform(&fc->params[1]->value, &r, 0.5f);
        sp_fill_uniform(&idle->params[0]->value, &r, 0.5f);
        sp_fill_uniform(&idle->params[1]->value, &r, 0.5f);
        memcpy(idle0, idle->params[0]->value.data, 36 * sizeof(float));
        memcpy(idle0 + 36, idle->params[1]->value.data, 6 * sizeof(float));
        sp_param *ps[4] = {fc->params[0], fc->params[1], idle->params[0], idle->params[1]};
        sp_optim *o = sp_sgd_new(ps, 4, 0.1, 0.9, 0, 0.01, false);
        layer_update u = {o, NULL};
        sp_engine_opts eo = {.update = update_layer, .update_ctx = &u};
        sp_engine *e = sp_engine_create("linear", walk ? &eo : NULL);
        if (walk)
            for (int i = 0; i < 4; i++) {
                sp_tensor_free(&ps[i]->grad);
                ps[i]->grad_in_step = true;
            }
        float xs[4 * 6];
        tu_fill_uniform(xs, 4 * 6, 9, -1, 1);
        int ys[4] = {1, 5, 0, 3};
        sp_tensor x = sp_tensor_view(xs, 2, (int[]){4, 6});
        sp_tape t;
        sp_tape_init(&t);
        for (int step = 0; step < 3; step++) {
            sp_tape_reset(&t);
            sp_optim_zero_grad(o);
            sp_node *h = sp_apply(&t, fc, sp_tape_input(&t, &x));
            h = sp_apply(&t, fc, sp_apply(&t, relu, h));
            sp_node *loss = sp_apply_loss(&t, ce, h, ys);
            sp_backward(e, &t, loss);
            if (walk) {
                for (int i = 0; i < 4; i++)
                    cr_assert_null(ps[i]->grad.data, "step %d: %s's gradient outlives its update", step, ps[i]->name);
                cr_assert_eq(sp_optim_step_rest(o), SP_OK, "%s", sp_last_error());
            } else {
                cr_assert_eq(sp_optim_step(o), SP_OK);
            }
        }
        if (walk) {   /* an update outside the walk has no gradient to read: refused, naming it */
            cr_assert_eq(sp_optim_step(o), SP_ERR);
            cr_assert(strstr(sp_last_error(), "fc.weight") && strstr(sp_last_error(), "no gradient"), "%s",
                      sp_last_error());
        }
        float *dst = walk ? got[0] : ref[0], *dst2 = walk ? got[1] : ref[1];
        memcpy(dst, fc->params[0]->value.data, 36 * sizeof(float));
        memcpy(dst + 36, fc->params[1]->value.data, 6 * sizeof(float));
        memcpy(dst2, idle->params[0]->value.data, 36 * sizeof(float));
        memcpy(dst2 + 36, idle->params[1]->value.data, 6 * sizeof(float));
        sp_tape_free(&t);
        sp_engine_destroy(e);
        sp_optim_free(o);
        sp_layer_free(fc);
        sp_layer_free(relu);
        sp_layer_free(ce);
        sp_layer_free(idle);
    }
    cr_assert_eq(memcmp(got[0], ref[0], sizeof ref[0]), 0, "the shared layer's weights differ from one update's");
    cr_assert_eq(memcmp(got[1], ref[1], sizeof ref[1]), 0, "the unreached layer's weights differ from one update's");
    cr_assert(memcmp(ref[1], idle0, sizeof idle0) != 0, "the unreached layer was not updated (weight decay)");
}
