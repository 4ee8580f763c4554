/* test_kill.c — checkpoints survive the worst: SIGKILL at random moments of a run that
 * saves a resumable checkpoint after every step (so most kills land inside a save), and
 * a full disk. After every kill the checkpoint on disk must be complete and resumable
 * (the app's own --resume checks every tensor and the training state), and it never
 * goes back in time; a save that cannot be written leaves the old file byte for byte
 * and says why. */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>

static char dir[64], mnt[96];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/scanprop-kill-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void remove_dir(void)
{
    if (mnt[0]) umount(mnt);
    if (!dir[0]) return;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

TestSuite(kill, .init = make_dir, .fini = remove_dir);

static const char *bin(const char *app)
{
    static char path[256];
    const char *b = getenv("BUILD");
    snprintf(path, sizeof path, "%s/%s", b ? b : "build", app);
    return path;
}

/* Starts argv with stdout and stderr to `out`/`err` (files in dir); returns the pid. */
static pid_t spawn(char *const *argv, const char *out, const char *err)
{
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644), e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o < 0 || e < 0) _exit(127);
        dup2(o, 1);
        dup2(e, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

static void slurp(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, len - 1, f) : 0;
    buf[n] = 0;
    if (f) fclose(f);
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Files in d named after the checkpoint ck.st other than ck.st itself: a save's temp
 * files ("ck.st.tmp.<pid>" or any such spelling). Removed if `remove`. */
static int strays(const char *d, bool remove)
{
    DIR *dp = opendir(d);
    cr_assert_not_null(dp);
    int n = 0;
    struct dirent *e;
    char p[512];
    while ((e = readdir(dp)))
        if (strstr(e->d_name, "ck.st") && strcmp(e->d_name, "ck.st")) {
            n++;
            snprintf(p, sizeof p, "%s/%s", d, e->d_name);
            if (remove) unlink(p);
        }
    closedir(dp);
    return n;
}

/* The steps of the checkpoint, as `rnn --resume ck --steps 1` reports them: the resume
 * reads and checks the whole file (weights, optimizer state, loop state) and, having
 * nothing left to do, prints the step count it restored. -1 if it failed. */
#define HIDDEN "256"   /* a 0.8 MB checkpoint: writing it takes a good part of a step */
#define RNN_ARGS "--quiet", "--seq-len", "20", "--samples", "256", "--batch", "16", "--hidden", HIDDEN

static long checkpoint_steps(const char *ck, char *err, size_t errlen)
{
    char out[512], errf[512], json[8192];
    snprintf(out, sizeof out, "%s/out", dir);
    snprintf(errf, sizeof errf, "%s/err", dir);
    char *argv[] = {(char *)bin("rnn"), RNN_ARGS, "--steps", "1", "--resume", (char *)ck, NULL};
    int st;
    waitpid(spawn(argv, out, errf), &st, 0);
    slurp(errf, err, errlen);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return -1;
    slurp(out, json, sizeof json);
    const char *s = strstr(json, "\"steps\": ");
    return s ? strtol(s + 9, NULL, 10) : -1;
}


#define KILLS 60

Test(kill, sigkill_during_saves_keeps_a_complete_checkpoint, .timeout = 240)
{
    char ck[128], out[128], err[128], msg[4096];
    snprintf(ck, sizeof ck, "%s/ck.st", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    snprintf(err, sizeof err, "%s/err", dir);
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    long last = 0;
    int kills = 0, mid_save = 0, checked = 0;
    double t0 = now();
    while (kills < KILLS) {
        bool have = access(ck, F_OK) == 0;
        /* continue from the checkpoint when there is one: each run also proves it resumes */
        char *fresh[] = {(char *)bin("rnn"), RNN_ARGS, "--optim", "adam", "--steps", "100000", "--save-every", "1",
                         "--save", ck, NULL};
        char *resume[] = {(char *)bin("rnn"), RNN_ARGS, "--optim", "adam", "--steps", "100000", "--save-every", "1",
                          "--save", ck, "--resume", ck, NULL};
        pid_t pid = spawn(have ? resume : fresh, out, err);
        usleep((useconds_t)(50000 + rand() % 300000));   /* 50..350 ms: start-up, resume, steps, saves */
        if (kills % 2) {   /* every other kill: the moment a save's temp file is there */
            double until = now() + 2.0;
            while (strays(dir, false) == 0 && now() < until) usleep(100);
        }
        kill(pid, SIGKILL);
        int st;
        waitpid(pid, &st, 0);
        if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)) {
            slurp(err, msg, sizeof msg);
            cr_assert_fail("run %d ended by itself (status 0x%x) before the kill: %s", kills, st, msg);
        }
        kills++;
        if (strays(dir, true) > 0) mid_save++;   /* a temp file: the kill hit a save */
        if (access(ck, F_OK) != 0) {
            cr_assert_eq(last, 0, "the checkpoint disappeared after kill %d", kills);
            continue;   /* killed before its first checkpoint */
        }
        long steps = checkpoint_steps(ck, msg, sizeof msg);
        cr_assert_geq(steps, 1, "kill %d: the checkpoint does not resume: %s", kills, msg);
        cr_assert_geq(steps, last, "kill %d: the checkpoint went back from step %ld to %ld", kills, last, steps);
        last = steps;
        checked++;
    }
    double secs = now() - t0;
    cr_log_info("%d kills (%d inside a save), %d checkpoints checked, %ld steps in all, %.1f s", kills, mid_save,
                checked, last, secs);
    cr_assert_geq(checked, KILLS - 5, "only %d of %d kills left a checkpoint to check", checked, KILLS);
    cr_assert_gt(last, KILLS / 2, "the runs made no progress (%ld steps)", last);
    cr_assert_geq(mid_save, KILLS / 4, "only %d of %d kills landed inside a save", mid_save, KILLS);
    if (getenv("SCANPROP_KILL_REPORT"))
        fprintf(stderr, "kill test: %d kills, %d inside a save, %d checkpoints checked, %ld steps, %.1f s\n", kills,
                mid_save, checked, last, secs);
}

/* A save that cannot be written: exit 2, one line with the reason, the old checkpoint
 * byte for byte, no temp file left. */
static void check_failed_save(const char *d, const char *how, const char *reason)
{
    char cmd[2048], old[256], bak[256], msg[4096], errf[256];
    snprintf(old, sizeof old, "%s/ck.st", d);
    snprintf(bak, sizeof bak, "%s/backup", dir);
    snprintf(errf, sizeof errf, "%s/err", dir);
    snprintf(cmd, sizeof cmd, "cp %s %s", old, bak);
    cr_assert_eq(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s %s --quiet --seq-len 20 --samples 256 --batch 16 --hidden " HIDDEN " --steps 30 "
             "--save-every 10 --save %s --resume %s >/dev/null 2>%s", how, bin("rnn"), old, old, errf);
    int st = system(cmd);
    slurp(errf, msg, sizeof msg);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "%s: expected exit 2, got 0x%x (%s)", how, st, msg);
    size_t n = strlen(msg);
    cr_assert(n && strchr(msg, '\n') == msg + n - 1, "expected one line, got '%s'", msg);
    cr_assert(strstr(msg, reason) && strstr(msg, "ck.st"), "'%s' does not name the file and '%s'", msg, reason);
    snprintf(cmd, sizeof cmd, "cmp -s %s %s", old, bak);
    cr_assert_eq(system(cmd), 0, "%s: the old checkpoint changed", how);
    cr_assert_eq(strays(d, false), 0, "%s: a temp file was left behind", how);
    long steps = checkpoint_steps(old, msg, sizeof msg);
    cr_assert_eq(steps, 10, "the old checkpoint no longer resumes at step 10: %s", msg);
}

static void first_checkpoint(const char *d)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s --quiet --seq-len 20 --samples 256 --batch 16 --hidden " HIDDEN " --steps 10 "
             "--save-every 10 --save %s/ck.st >/dev/null", bin("rnn"), d);
    cr_assert_eq(system(cmd), 0);
}

/* Without privileges: a file-size limit makes the write fail (EFBIG) part-way. */
Test(kill, write_failure_keeps_the_old_checkpoint)
{
    first_checkpoint(dir);
    char how[64];
    /* the shell ignores SIGXFSZ so the write returns EFBIG instead of killing the app */
    snprintf(how, sizeof how, "trap '' XFSZ; ulimit -f 100;");   /* 100 KiB < one checkpoint */
    check_failed_save(dir, how, "File too large");
}

/* A real full disk: a small tmpfs, filled up (needs CAP_SYS_ADMIN, else skipped). */
Test(kill, full_disk_keeps_the_old_checkpoint)
{
    snprintf(mnt, sizeof mnt, "%s/mnt", dir);
    cr_assert_eq(mkdir(mnt, 0755), 0);
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=4m") != 0) {
        cr_log_warn("skipped: cannot mount a tmpfs (%s); the write-failure test covers the path", strerror(errno));
        mnt[0] = 0;
        return;
    }
    first_checkpoint(mnt);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "dd if=/dev/zero of=%s/fill bs=4k status=none 2>/dev/null; true", mnt);
    cr_assert_eq(system(cmd), 0);   /* fills the tmpfs */
    check_failed_save(mnt, "", "No space left on device");
    cr_assert_eq(umount(mnt), 0);
    mnt[0] = 0;
}
