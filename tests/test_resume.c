/* test_resume.c — --save-every / --resume: a run stopped at a checkpoint and resumed
 * ends bitwise where the uninterrupted run ends (weights, optimizer state, LR-schedule
 * position, data order), for SGD with momentum and for Adam; resuming with other
 * settings or from a file that is not a resumable checkpoint is refused with one line. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include "core/io/safetensors.h"
#include "tests/testutil.h"

#define FMNIST "/usr/share/datasets/fashion-mnist"

static char dir[64];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/scanprop-resume-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void remove_dir(void)
{
    if (!dir[0]) return;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

TestSuite(resume, .init = make_dir, .fini = remove_dir);

/* Runs cmd (stderr into err if given, else discarded); exit status, last stdout line. */
static int run(const char *cmd, char *last, size_t len, char *err, size_t errlen)
{
    char full[4096], errfile[128];
    snprintf(errfile, sizeof errfile, "%s/stderr", dir);
    snprintf(full, sizeof full, "%s 2>%s", cmd, errfile);
    FILE *p = popen(full, "r");
    cr_assert_not_null(p, "popen %s", cmd);
    char line[8192];
    if (last) last[0] = 0;
    while (fgets(line, sizeof line, p))
        if (last) snprintf(last, len, "%s", line);
    int st = pclose(p);
    if (err) {
        FILE *f = fopen(errfile, "r");
        size_t n = f ? fread(err, 1, errlen - 1, f) : 0;
        err[n] = 0;
        if (f) fclose(f);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static bool same_file(const char *a, const char *b)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "cmp -s %s/%s %s/%s", dir, a, dir, b);
    return system(cmd) == 0;
}

/* The uninterrupted run: `total` steps, checkpoints every `every`; the interrupted one:
 * stop after `stop` steps, then --resume to `total`. Final checkpoints and JSON lines
 * (minus timings) must be identical, bit for bit. */
static void check_resume(const char *app, const char *args, int stop, int total, int every)
{
    char cmd[2048], full[8192], resumed[8192], part[8192];
    snprintf(cmd, sizeof cmd, "%s --quiet %s --steps %d --save-every %d --save %s/full.st", tu_bin(app), args, total,
             every, dir);
    cr_assert_eq(run(cmd, full, sizeof full, NULL, 0), 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "%s --quiet %s --steps %d --save-every %d --save %s/part.st", tu_bin(app), args, stop,
             every, dir);
    cr_assert_eq(run(cmd, part, sizeof part, NULL, 0), 0, "%s", cmd);
    cr_assert_not(same_file("full.st", "part.st"), "the stopped run already ended where the full one ends");
    snprintf(cmd, sizeof cmd, "%s --quiet %s --steps %d --resume %s/part.st --save-every %d --save %s/resumed.st",
             tu_bin(app), args, total, dir, every, dir);
    cr_assert_eq(run(cmd, resumed, sizeof resumed, NULL, 0), 0, "%s", cmd);
    cr_assert(same_file("full.st", "resumed.st"), "%s %s: resumed at step %d, the final checkpoint differs from "
              "the uninterrupted run's", app, args, stop);
    tu_strip_timings(full);
    tu_strip_timings(resumed);
    /* ooo's peak_bytes is the memory model as the two lanes happened to interleave; its
     * lanes under --lanes auto is the lane tuner's pick, a measurement (--lanes 1|2: kept) */
    tu_strip_key(full, "peak_bytes");
    tu_strip_key(resumed, "peak_bytes");
    if (!strstr(args, "--lanes ")) {
        tu_strip_key(full, "lanes");
        tu_strip_key(resumed, "lanes");
    }
    cr_assert_str_eq(resumed, full, "%s %s: resumed at step %d", app, args, stop);
}

/* Mid-epoch stops (13 batches per epoch here), a step-decay schedule across epochs. */
Test(resume, sgd_momentum_bitwise)
{
    const char *a = "--seq-len 20 --samples 256 --batch 16 --hidden 24 --optim sgd --momentum 0.9 --lr 0.05 "
                    "--weight-decay 1e-4 --lr-schedule step:1:0.7";
    check_resume("rnn", a, 18, 40, 6);
    check_resume("rnn", a, 13, 40, 13);   /* at an epoch boundary */
}

Test(resume, adam_bitwise)
{
    const char *a = "--seq-len 20 --samples 256 --batch 16 --hidden 24 --optim adam --lr 0.01 "
                    "--lr-schedule cosine:3";
    check_resume("rnn", a, 7, 30, 7);
    check_resume("gru", "--shape S --samples 128 --batch 8 --optim adamw --lr 0.003 --weight-decay 0.01", 9, 20, 3);
}

/* A conv net on real data with shuffling: the order of the resumed epoch is replayed. */
Test(resume, lenet_bitwise, .timeout = 300)
{
    if (access(FMNIST, R_OK) != 0) {
        cr_log_warn("skipped: %s not installed", FMNIST);
        return;
    }
    check_resume("lenet", "--batch 32 --optim sgd --momentum 0.9 --lr 0.02", 11, 24, 11);
    /* ooo on two threads: the next forward overlaps the last δW/U (checkpoints join the
     * lanes first), the batch is copied into one of two tapes; resuming is bitwise too */
    check_resume("lenet", "--batch 32 --optim sgd --momentum 0.9 --lr 0.02 --backward ooo --threads 2", 11, 24, 11);
    /* two lanes every step (--lanes 2), whatever the tuner would pick */
    check_resume("lenet", "--batch 32 --optim sgd --momentum 0.9 --lr 0.02 --backward ooo --threads 2 --lanes 2", 11,
                 24, 11);
}

/* ResNet-20: batch norm's running statistics are buffers, saved with the weights.
 * Slow (evaluation on the test set): make test-long runs it (SCANPROP_RESUME_SLOW=1). */
Test(resume, resnet_batchnorm_bitwise, .timeout = 1200)
{
    if (!getenv("SCANPROP_RESUME_SLOW")) {
        cr_log_info("skipped: make test-long runs it");
        return;
    }
    if (access(FMNIST, R_OK) != 0) {
        cr_log_warn("skipped: %s not installed", FMNIST);
        return;
    }
    check_resume("resnet", "--batch 8 --optim sgd --momentum 0.9 --lr 0.05", 5, 10, 5);
}

static void expect_refused(const char *cmd, const char *needle)
{
    char err[4096];
    cr_assert_eq(run(cmd, NULL, 0, err, sizeof err), 2, "%s: expected exit 2 (stderr: %s)", cmd, err);
    size_t n = strlen(err);
    cr_assert(n > 0 && strchr(err, '\n') == err + n - 1, "%s: expected one line, got '%s'", cmd, err);
    cr_assert(strstr(err, needle), "%s: '%s' does not say '%s'", cmd, err, needle);
}

Test(resume, refuses_other_settings_and_plain_checkpoints)
{
    char cmd[2048];
    const char *a = "--quiet --seq-len 20 --samples 64 --batch 16 --hidden 8";
    snprintf(cmd, sizeof cmd, "%s %s --steps 3 --save-every 2 --save %s/r.st", tu_bin("rnn"), a, dir);
    cr_assert_eq(run(cmd, NULL, 0, NULL, 0), 0);
    snprintf(cmd, sizeof cmd, "%s %s --steps 3 --save %s/plain.st", tu_bin("rnn"), a, dir);
    cr_assert_eq(run(cmd, NULL, 0, NULL, 0), 0);

    /* a with another --batch, later another --hidden (a flag is given once) */
    const char *a_no_batch = "--quiet --seq-len 20 --samples 64 --hidden 8", *a_no_hidden =
        "--quiet --seq-len 20 --samples 64 --batch 16";
    snprintf(cmd, sizeof cmd, "%s %s --steps 5 --resume %s/r.st --batch 8", tu_bin("rnn"), a_no_batch, dir);
    expect_refused(cmd, "saved with --batch 16, this run has --batch 8");
    snprintf(cmd, sizeof cmd, "%s %s --steps 5 --resume %s/r.st --optim sgd", tu_bin("rnn"), a, dir);
    expect_refused(cmd, "saved with --optim adam, this run has --optim sgd");
    snprintf(cmd, sizeof cmd, "%s %s --steps 5 --resume %s/r.st --lr 0.5", tu_bin("rnn"), a, dir);
    expect_refused(cmd, "--lr");
    snprintf(cmd, sizeof cmd, "%s %s --steps 5 --resume %s/r.st --seed 9", tu_bin("rnn"), a, dir);
    expect_refused(cmd, "--seed");
    snprintf(cmd, sizeof cmd, "%s %s --steps 5 --resume %s/plain.st", tu_bin("rnn"), a, dir);
    expect_refused(cmd, "not a resumable checkpoint");
    snprintf(cmd, sizeof cmd, "%s %s --steps 5 --resume %s/r.st --hidden 9", tu_bin("rnn"), a_no_hidden, dir);
    expect_refused(cmd, "r.st");
    snprintf(cmd, sizeof cmd, "%s %s --steps 5 --save-every 2", tu_bin("rnn"), a);
    expect_refused(cmd, "--save-every needs --save");
    snprintf(cmd, sizeof cmd, "%s %s --steps 5 --resume %s/r.st --load %s/r.st", tu_bin("rnn"), a, dir, dir);
    expect_refused(cmd, "--resume does not apply with --load");
    snprintf(cmd, sizeof cmd, "%s %s --steps 5 --resume %s/missing.st", tu_bin("rnn"), a, dir);
    expect_refused(cmd, "missing.st");

    /* a resumable checkpoint is still an ordinary weights file for --load */
    snprintf(cmd, sizeof cmd, "%s %s --steps 1 --load %s/r.st", tu_bin("rnn"), a, dir);
    cr_assert_eq(run(cmd, NULL, 0, NULL, 0), 0, "--load of a resumable checkpoint failed");
}

/* ---- hostile and edge cases of a resume ------------------------------------------------ */

#define SMALL "--quiet --seq-len 10 --samples 64 --batch 16 --hidden 8"

/* Overwrites element `index` of tensor `name` in the safetensors file at path with the
 * `size` bytes at v (in place: the header stays as it is). */
static void patch(const char *path, const char *name, size_t index, const void *v, size_t size)
{
    sp_st_file *f = sp_st_open(path);
    cr_assert_not_null(f, "%s", sp_last_error());
    const sp_st_tensor *t = sp_st_find(f, name);
    cr_assert_not_null(t, "%s has no %s", path, name);
    cr_assert_eq(sp_st_dtype_size(t->dtype), size);
    uint64_t at = t->offset + index * size;
    sp_st_close(f);
    FILE *fp = fopen(path, "r+b");
    cr_assert_not_null(fp);
    cr_assert_eq(fseek(fp, (long)at, SEEK_SET), 0);
    cr_assert_eq(fwrite(v, 1, size, fp), size);
    fclose(fp);
}

static void copy_file(const char *from, const char *to)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "cp %s/%s %s/%s", dir, from, dir, to);
    cr_assert_eq(system(cmd), 0);
}

/* A step count of 2^62 (UBSan: a pointer overflow in the timing arrays) and a step that
 * does not match epoch x batches + batch are refused; a step past this run's limit is
 * a finished run (nothing left to train: test_kill reads checkpoints this way). */
Test(resume, impossible_step_counts_refused)
{
    char cmd[2048], path[256];
    snprintf(cmd, sizeof cmd, "%s %s --steps 3 --save-every 3 --save %s/s.st", tu_bin("rnn"), SMALL, dir);
    cr_assert_eq(run(cmd, NULL, 0, NULL, 0), 0);
    copy_file("s.st", "huge.st");
    snprintf(path, sizeof path, "%s/huge.st", dir);
    int64_t huge = (int64_t)1 << 62, two = 2;
    patch(path, "state/train/step", 0, &huge, sizeof huge);
    snprintf(cmd, sizeof cmd, "%s %s --steps 5 --resume %s", tu_bin("rnn"), SMALL, path);
    expect_refused(cmd, "inconsistent training state");
    copy_file("s.st", "off.st");
    snprintf(path, sizeof path, "%s/off.st", dir);
    patch(path, "state/train/step", 0, &two, sizeof two);   /* epoch 0, batch 3: step 3 */
    snprintf(cmd, sizeof cmd, "%s %s --steps 5 --resume %s", tu_bin("rnn"), SMALL, path);
    expect_refused(cmd, "inconsistent training state");
    /* Adam's per-parameter step at INT64_MAX (or one below): the next update's ++ would
     * overflow; more steps than the run has taken is refused at load */
    sp_st_file *f = sp_st_open(path);
    cr_assert_not_null(f);
    char step_name[320] = "";
    for (int i = 0; i < sp_st_count(f) && !step_name[0]; i++) {
        const char *n = sp_st_at(f, i)->name;
        size_t len = strlen(n);
        if (strncmp(n, "state/optim/", 12) == 0 && len > 5 && strcmp(n + len - 5, "/step") == 0)
            snprintf(step_name, sizeof step_name, "%s", n);
    }
    sp_st_close(f);
    cr_assert(step_name[0], "no per-parameter step in the checkpoint");
    int64_t steps_max[] = {INT64_MAX, INT64_MAX - 1, 4};
    for (int i = 0; i < 3; i++) {
        copy_file("s.st", "adam.st");
        snprintf(path, sizeof path, "%s/adam.st", dir);
        patch(path, step_name, 0, &steps_max[i], sizeof steps_max[i]);
        snprintf(cmd, sizeof cmd, "%s %s --steps 5 --resume %s", tu_bin("rnn"), SMALL, path);
        expect_refused(cmd, "more than the 3 training steps");
    }
    char last[8192];
    snprintf(cmd, sizeof cmd, "%s %s --steps 2 --resume %s/s.st", tu_bin("rnn"), SMALL, dir);
    cr_assert_eq(run(cmd, last, sizeof last, NULL, 0), 0, "%s", cmd);
    cr_assert(strstr(last, "\"steps\": 3,"), "%s", last);
}

/* The saved learning rate is the schedule's at the saved epoch: 0, 1e300 and -0.5 are
 * refused alike (a resume would run the schedule's rate and ignore it); the saved rate
 * resumes. */
Test(resume, a_learning_rate_the_schedule_does_not_give_is_refused)
{
    char cmd[2048], path[256];
    snprintf(cmd, sizeof cmd, "%s %s --steps 3 --save-every 3 --save %s/lr.st", tu_bin("rnn"), SMALL, dir);
    cr_assert_eq(run(cmd, NULL, 0, NULL, 0), 0);
    const double bad[] = {0, 1e300, -0.5, 0.02};
    const char *says[] = {"train/lr is 0, but --lr", "train/lr is 1e+300, but --lr", "lr -0.5", "train/lr is 0.02"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        copy_file("lr.st", "badlr.st");
        snprintf(path, sizeof path, "%s/badlr.st", dir);
        patch(path, "state/train/lr", 0, &bad[i], sizeof bad[i]);
        snprintf(cmd, sizeof cmd, "%s %s --steps 5 --resume %s", tu_bin("rnn"), SMALL, path);
        expect_refused(cmd, says[i]);
    }
    snprintf(cmd, sizeof cmd, "%s %s --steps 5 --resume %s/lr.st", tu_bin("rnn"), SMALL, dir);
    cr_assert_eq(run(cmd, NULL, 0, NULL, 0), 0, "%s", cmd);
}

/* NaN in a weight, in the optimizer's state or in the epoch's loss sum is refused at
 * load, naming the tensor (and the element); nothing trains on it. */
Test(resume, non_finite_state_refused)
{
    char cmd[2048], path[256];
    snprintf(cmd, sizeof cmd, "%s %s --steps 2 --save-every 2 --save %s/n.st", tu_bin("rnn"), SMALL, dir);
    cr_assert_eq(run(cmd, NULL, 0, NULL, 0), 0);
    sp_st_file *f = sp_st_open(strcat(strcpy(path, dir), "/n.st"));
    cr_assert_not_null(f);
    char weight[256], exp_avg[320];
    snprintf(weight, sizeof weight, "%s", sp_st_at(f, 0)->name);
    for (int i = 0; i < sp_st_count(f); i++)   /* a parameter's name: no state/ prefix */
        if (strncmp(sp_st_at(f, i)->name, "state/", 6) != 0) snprintf(weight, sizeof weight, "%s", sp_st_at(f, i)->name);
    sp_st_close(f);
    snprintf(exp_avg, sizeof exp_avg, "state/optim/%s/exp_avg", weight);
    float nan = NAN;
    double dnan = NAN;
    struct { const char *name; size_t index; const void *v; size_t size; const char *says; } cases[] = {
        {weight, 1, &nan, sizeof nan, "[1] is nan"},
        {exp_avg, 0, &nan, sizeof nan, "exp_avg[0] is nan"},
        {"state/train/epoch_loss", 0, &dnan, sizeof dnan, "epoch_loss is nan"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        copy_file("n.st", "bad.st");
        snprintf(path, sizeof path, "%s/bad.st", dir);
        patch(path, cases[i].name, cases[i].index, cases[i].v, cases[i].size);
        snprintf(cmd, sizeof cmd, "%s %s --steps 4 --resume %s", tu_bin("rnn"), SMALL, path);
        expect_refused(cmd, cases[i].says);
        if (i == 0) {   /* the weight's name is in the line; --load refuses it too */
            expect_refused(cmd, weight);
            snprintf(cmd, sizeof cmd, "%s %s --steps 1 --load %s", tu_bin("rnn"), SMALL, path);
            expect_refused(cmd, cases[i].says);
        }
    }
}

/* A value of the JSON line (as printed), "" if absent. */
static void json_value(const char *line, const char *key, char *out, size_t len)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\": ", key);
    const char *p = strstr(line, k);
    out[0] = 0;
    if (!p) return;
    p += strlen(k);
    size_t n = strcspn(p, ",}");
    snprintf(out, len, "%.*s", (int)(n < len ? n : len - 1), p);
}

/* A job killed after its last save resumes to its own results: the steps, epochs, the
 * epoch's train loss and the final evaluation of the uninterrupted run; exit 0. */
Test(resume, finished_checkpoint_reports_its_results)
{
    char cmd[2048], full[8192], again[8192], a[64], b[64];
    snprintf(cmd, sizeof cmd, "%s %s --steps 4 --save-every 2 --save %s/f.st", tu_bin("rnn"), SMALL, dir);
    cr_assert_eq(run(cmd, full, sizeof full, NULL, 0), 0);
    snprintf(cmd, sizeof cmd, "%s %s --steps 4 --save-every 2 --save %s/f.st --resume %s/f.st", tu_bin("rnn"), SMALL,
             dir, dir);
    cr_assert_eq(run(cmd, again, sizeof again, NULL, 0), 0, "%s", cmd);
    const char *keys[] = {"steps", "epochs", "train_loss", "test_loss", "test_acc"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        json_value(full, keys[i], a, sizeof a);
        json_value(again, keys[i], b, sizeof b);
        cr_assert_str_eq(b, a, "resuming the finished checkpoint reports %s %s, the run had %s", keys[i], b, a);
    }
}

/* The step,loss pairs of a --log file's training rows, one "step,loss" a line. */
static void log_losses(const char *name, char *out, size_t len)
{
    char path[256], line[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    size_t k = 0;
    out[0] = 0;
    while (fgets(line, sizeof line, f)) {
        long step;
        int epoch;
        char loss[64];
        if (sscanf(line, "%ld,%d,%63[^,],", &step, &epoch, loss) == 3 && k < len)
            k += (size_t)snprintf(out + k, len - k, "%ld,%s\n", step, loss);
    }
    fclose(f);
}

/* --resume with the same --log continues it from the checkpoint's step: the rows before
 * it are kept, rows past it (a killed run's) are dropped; the training rows are those of
 * the uninterrupted run. */
Test(resume, log_continues_from_the_checkpoint)
{
    char cmd[2048], want[4096], got[4096];
    snprintf(cmd, sizeof cmd, "%s %s --steps 4 --save-every 2 --save %s/a.st --log %s/full.csv", tu_bin("rnn"), SMALL,
             dir, dir);
    cr_assert_eq(run(cmd, NULL, 0, NULL, 0), 0);
    snprintf(cmd, sizeof cmd, "%s %s --steps 2 --save-every 2 --save %s/b.st --log %s/part.csv", tu_bin("rnn"), SMALL,
             dir, dir);
    cr_assert_eq(run(cmd, NULL, 0, NULL, 0), 0);
    char path[256];
    snprintf(path, sizeof path, "%s/part.csv", dir);
    FILE *f = fopen(path, "a");   /* what a run killed after step 3, before its save, leaves */
    cr_assert_not_null(f);
    fprintf(f, "3,0,99,0.001,0.5,,\n4,0,9");
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s %s --steps 4 --save-every 2 --save %s/b.st --resume %s/b.st --log %s/part.csv",
             tu_bin("rnn"), SMALL, dir, dir, dir);
    cr_assert_eq(run(cmd, NULL, 0, NULL, 0), 0, "%s", cmd);
    log_losses("full.csv", want, sizeof want);
    log_losses("part.csv", got, sizeof got);
    cr_assert_str_eq(got, want, "the resumed log's training rows differ from the uninterrupted run's");
}

/* The training set is among the settings a resume must match: another sample count or
 * sequence length is refused, naming both. */
Test(resume, other_dataset_refused)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s --steps 2 --save-every 1 --save %s/d.st", tu_bin("rnn"), SMALL, dir);
    cr_assert_eq(run(cmd, NULL, 0, NULL, 0), 0);
    /* SMALL with another --samples, then another --seq-len (a flag is given once) */
    snprintf(cmd, sizeof cmd, "%s --quiet --seq-len 10 --batch 16 --hidden 8 --steps 4 --resume %s/d.st --samples 640",
             tu_bin("rnn"), dir);
    expect_refused(cmd, "saved on the training set bitstream(n=64");
    snprintf(cmd, sizeof cmd, "%s --quiet --samples 64 --batch 16 --hidden 8 --steps 4 --resume %s/d.st --seq-len 50",
             tu_bin("rnn"), dir);
    expect_refused(cmd, "T=50");
}
