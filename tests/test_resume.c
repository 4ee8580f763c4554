/* test_resume.c — --save-every / --resume: a run stopped at a checkpoint and resumed
 * ends bitwise where the uninterrupted run ends (weights, optimizer state, LR-schedule
 * position, data order), for SGD with momentum and for Adam; resuming with other
 * settings or from a file that is not a resumable checkpoint is refused with one line. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
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

    snprintf(cmd, sizeof cmd, "%s %s --steps 5 --resume %s/r.st --batch 8", tu_bin("rnn"), a, dir);
    expect_refused(cmd, "saved with --batch 16, this run has --batch 8");
    snprintf(cmd, sizeof cmd, "%s %s --steps 5 --resume %s/r.st --optim sgd", tu_bin("rnn"), a, dir);
    expect_refused(cmd, "saved with --optim adam, this run has --optim sgd");
    snprintf(cmd, sizeof cmd, "%s %s --steps 5 --resume %s/r.st --lr 0.5", tu_bin("rnn"), a, dir);
    expect_refused(cmd, "--lr");
    snprintf(cmd, sizeof cmd, "%s %s --steps 5 --resume %s/r.st --seed 9", tu_bin("rnn"), a, dir);
    expect_refused(cmd, "--seed");
    snprintf(cmd, sizeof cmd, "%s %s --steps 5 --resume %s/plain.st", tu_bin("rnn"), a, dir);
    expect_refused(cmd, "not a resumable checkpoint");
    snprintf(cmd, sizeof cmd, "%s %s --steps 5 --resume %s/r.st --hidden 9", tu_bin("rnn"), a, dir);
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
