/* test_apps.c — the apps' flags, as a user meets them (issue 15 item 1, issue 19 items
 * 9–13):
 *   - every flag of every app either takes effect or is refused: a walk runs each app
 *     with each flag of its --help and checks the effect (the output changes, a file
 *     appears, the progress goes quiet) or the refusal (exit 2, one line saying why);
 *     a flag in --help without a walk entry fails the test;
 *   - README.md's flag list is the --help of every app;
 *   - one set of scheme names: build/schedule --scheme, every app's --parallel and
 *     docs/DISTRIBUTED.md agree (scan the one --parallel name without a schedule);
 *   - the cases the issues name: flags that do not apply, "did you mean", --k 0,
 *     --batch beyond the dataset (and INT_MAX: no overflow), --steps with --epochs,
 *     --scan-levels out of range, output to a full disk (/dev/full);
 *   - files (issue 25): no flag opens a FIFO, outputs are replaced atomically (a failed
 *     write leaves the old file whole), every open goes through core/io/fileio.c.
 * Every run's stdout and stderr go to files (tu_run); nothing is printed. */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#include <stb/stb_image_write.h>
#include "core/error.h"
#include "core/threads.h"
#include "data/data.h"
#include "schedulers/scan/scan.h"
#include "tests/testutil.h"

#define OUT 65536

static char out[OUT], err[OUT], out0[OUT], err0[OUT];

/* `fmt` with %T replaced by the test's temporary directory */
static const char *expand(const char *fmt)
{
    static char buf[2][16384];
    static int k;
    k ^= 1;
    size_t n = 0;
    for (const char *p = fmt; *p && n + 4300 < sizeof buf[k]; p++) {
        if (p[0] == '%' && p[1] == 'T') {
            n += (size_t)snprintf(buf[k] + n, sizeof buf[k] - n, "%s", tu_tmpdir());
            p++;
        } else {
            buf[k][n++] = *p;
        }
    }
    buf[k][n] = 0;
    return buf[k];
}

static int app(const char *name, const char *args, char *o, char *e)
{
    char cmd[40000];
    /* no leak check under mpirun here (tests/testutil.h: TU_MPI_FAST_ENV) */
    const char *env = strstr(args, "--parallel") ? TU_MPI_FAST_ENV : "";
    snprintf(cmd, sizeof cmd, "%s%s %s", env, tu_bin(name), expand(args));
    return tu_run(cmd, o, OUT, e, OUT);
}

/* Drops what measures time: JSON keys ending in _ms / _s / seconds / images_per_s, and
 * text lines with "ms" columns (jacobian's table). */
static void strip_times(char *s)
{
    static const char *keys[] = {"images_per_s", "seconds", "forward_ms", "backward_ms", "step_ms", "analytic_ms",
                                 "columnwise_ms"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        char pat[64];
        snprintf(pat, sizeof pat, "\"%s\": ", keys[k]);
        for (char *p; (p = strstr(s, pat));) {
            char *end = p + strlen(pat);
            while (*end && *end != ',' && *end != '}') end++;
            memmove(p, end, strlen(end) + 1);
        }
    }
    for (char *line = s; *line;) {   /* lines with timings */
        char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line + 1) : strlen(line);
        char keep = line[len - (nl ? 1 : 0)];
        line[len - (nl ? 1 : 0)] = 0;
        bool timed = strstr(line, " ms ") || strstr(line, " ms\t") || strstr(line, "img/s") || strstr(line, "FLOP");
        line[len - (nl ? 1 : 0)] = keep;
        if (timed && line[0] != '{') memmove(line, line + len, strlen(line + len) + 1);
        else line += len;
    }
}

/* ---- the walk --------------------------------------------------------------------- */

typedef enum {
    EFFECT,        /* stdout (times dropped) differs from the run without `args`        */
    QUIET,         /* stderr empty, but not without `args`                               */
    FILE_MADE,     /* `what` (after %T) exists and is not empty                          */
    STDOUT_HAS,    /* stdout contains `what`                                             */
    STDOUT_LACKS,  /* stdout lacks `what` (present without `args`)                       */
    STDERR_HAS,    /* exit 0 and stderr contains `what`                                  */
    REFUSED,       /* exit 2, one line "scanprop: …" containing `what`                   */
} effect;

typedef struct walk {
    const char *with;   /* added to the app's base for both runs (e.g. "--backward ooo");
                         * "=ARGS": ARGS instead of the base                               */
    const char *args;   /* the flag(s) under test                                         */
    effect expect;
    const char *what;
} walk;

static bool one_line_error(const char *e)
{
    const char *nl = strchr(e, '\n');
    return strncmp(e, "scanprop: ", 10) == 0 && nl && nl[1] == 0;
}

/* `base` without the flags `args` gives (each with its value: the next word unless it
 * starts with --): a flag is given once, so the flag under test replaces the base's. */
static void base_without(char *dst, size_t len, const char *base, const char *args)
{
    size_t k = 0;
    dst[0] = 0;
    for (const char *p = base; *p;) {
        p += strspn(p, " ");
        size_t n = strcspn(p, " ");
        if (!n) break;
        bool drop = false;
        if (strncmp(p, "--", 2) == 0)
            for (const char *q = args; *q && !drop;) {
                q += strspn(q, " ");
                size_t m = strcspn(q, " =");
                drop = m == strcspn(p, " =") && strncmp(p, q, m) == 0 && strncmp(q, "--", 2) == 0;
                q += strcspn(q, " ");
            }
        if (drop) {
            p += n;
            const char *v = p + strspn(p, " ");
            if (*v && strncmp(v, "--", 2) != 0 && !memchr(p - n, '=', n)) p = v + strcspn(v, " ");   /* its value */
            continue;
        }
        if (k + n + 2 < len) k += (size_t)snprintf(dst + k, len - k, "%s%.*s", k ? " " : "", (int)n, p);
        p += n;
    }
}

/* refusals_only: the runs that end before training (the sanitizer build of VGG-11 is too
 * slow to train 60 times; the same flag code trains in the lenet walk) */
static void run_walk_some(const char *name, const char *base, const walk *w, int n, bool refusals_only)
{
    for (int i = 0; i < n; i++) {
        if (refusals_only && w[i].expect != REFUSED) continue;
        char a0[9000], a1[18000];
        char kept[8192];
        if (w[i].with && w[i].with[0] == '=') snprintf(a0, sizeof a0, "%s", w[i].with + 1);   /* instead of base */
        else {
            base_without(kept, sizeof kept, base, w[i].with ? w[i].with : "");
            snprintf(a0, sizeof a0, "%s %s", kept, w[i].with ? w[i].with : "");
        }
        base_without(kept, sizeof kept, a0, w[i].args);
        snprintf(a1, sizeof a1, "%s %s", kept, w[i].args);
        const char *what = w[i].what ? expand(w[i].what) : "";
        char whatc[4400];
        snprintf(whatc, sizeof whatc, "%s", what);
        if (w[i].expect == FILE_MADE) remove(whatc);
        int rc = app(name, a1, out, err);
        if (w[i].expect == REFUSED) {
            cr_expect_eq(rc, 2, "%s %s: exit %d, expected 2 (refused); stderr: %s", name, a1, rc, err);
            cr_expect(one_line_error(err), "%s %s: expected one line 'scanprop: ...', got '%s'", name, a1, err);
            cr_expect(strstr(err, whatc), "%s %s: expected the error to say '%s', got '%s'", name, a1, whatc, err);
            continue;
        }
        cr_expect_eq(rc, 0, "%s %s: exit %d; stderr: %s", name, a1, rc, err);
        if (rc != 0) continue;
        switch (w[i].expect) {
        case FILE_MADE: {
            struct stat st;
            cr_expect(stat(whatc, &st) == 0 && st.st_size > 0, "%s %s: %s not written", name, a1, whatc);
            break;
        }
        case STDOUT_HAS: cr_expect(strstr(out, whatc), "%s %s: stdout lacks '%s'", name, a1, whatc); break;
        case STDERR_HAS: cr_expect(strstr(err, whatc), "%s %s: stderr lacks '%s': %s", name, a1, whatc, err); break;
        default: {
            static char cached[9000];   /* the last base run, reused while `with` stays */
            if (strcmp(cached, a0) != 0 || w[i].expect == QUIET) {
                cr_expect_eq(app(name, a0, out0, err0), 0, "%s %s: exit != 0; stderr: %s", name, a0, err0);
                snprintf(cached, sizeof cached, "%s", a0);
                strip_times(out0);
            }
            if (w[i].expect == QUIET) {
                cr_expect(err[0] == 0 && err0[0] != 0, "%s %s: stderr '%s', without it '%s'", name, a1, err, err0);
            } else if (w[i].expect == STDOUT_LACKS) {
                cr_expect(strstr(out0, whatc) && !strstr(out, whatc), "%s %s: '%s' should go away", name, a1, whatc);
            } else {
                strip_times(out);
                cr_expect_str_neq(out, out0, "%s: %s had no visible effect (stdout %s)", name, w[i].args, out);
            }
        }
        }
    }
}

static void run_walk(const char *name, const char *base, const walk *w, int n)
{
    run_walk_some(name, base, w, n, false);
}

/* The flags of an app's --help ("  --name ..." lines), space-separated, help excluded. */
static void help_flags(const char *name, char *list, size_t len)
{
    cr_assert_eq(app(name, "--help", out, err), 0, "%s --help: %s", name, err);
    cr_assert_eq(err[0], 0, "%s --help wrote to stderr: %s", name, err);
    size_t k = 0;
    list[0] = 0;
    for (char *line = out; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, "  --", 4) != 0) continue;
        size_t n = strspn(line + 4, "abcdefghijklmnopqrstuvwxyz0123456789-");
        if (n == 4 && strncmp(line + 4, "help", 4) == 0) continue;
        k += (size_t)snprintf(list + k, len - k, " %.*s ", (int)n, line + 4);
        cr_assert_lt(k, len);
    }
}

/* Every flag of --help has a walk entry that names it. */
static void check_coverage(const char *name, const walk *w, int n)
{
    char flags[8192];
    help_flags(name, flags, sizeof flags);
    for (char *p = flags; (p = strchr(p, ' ')) && p[1];) {
        char flag[64];
        size_t len = strcspn(p + 1, " ");
        if (len == 0) {
            p++;
            continue;
        }
        snprintf(flag, sizeof flag, "--%.*s", (int)len, p + 1);
        bool found = false;
        for (int i = 0; i < n && !found; i++) {
            const char *a = strstr(w[i].args, flag);
            found = a && (a[strlen(flag)] == ' ' || a[strlen(flag)] == 0);
        }
        cr_expect(found, "%s %s: no entry in the flag walk of tests/test_apps.c (a flag must take effect or be refused)",
                  name, flag);
        p += len + 1;
    }
}

/* A tiny image folder: 2 classes x `per_class` images, train and test. */
static void make_images(int per_class)
{
    unsigned char px[8 * 8];
    char path[4400];
    const char *split[] = {"train", "test"}, *cls[] = {"cat", "dog"};
    for (int s = 0; s < 2; s++)
        for (int c = 0; c < 2; c++) {
            snprintf(path, sizeof path, "%s/img", tu_tmpdir());
            mkdir(path, 0755);
            snprintf(path, sizeof path, "%s/img/%s", tu_tmpdir(), split[s]);
            mkdir(path, 0755);
            snprintf(path, sizeof path, "%s/img/%s/%s", tu_tmpdir(), split[s], cls[c]);
            mkdir(path, 0755);
            for (int i = 0; i < per_class; i++) {
                for (int j = 0; j < 64; j++) px[j] = (unsigned char)((j * (7 + i) + c * 97 + s * 13) & 255);
                snprintf(path, sizeof path, "%s/img/%s/%s/%d.png", tu_tmpdir(), split[s], cls[c], i);
                cr_assert(stbi_write_png(path, 8, 8, 1, px, 8));
            }
        }
}

#define N(w) ((int)(sizeof w / sizeof w[0]))

/* the flags every trainer shares; OTHER: an optimizer other than the app's default, SGD:
 * `with` that makes it SGD, K: a --k other than the default half of the layers */
#define TRAIN_WALK(OTHER, SGD)                                                                                   \
    {NULL, "--steps 1", EFFECT, NULL}, {NULL, "--batch 2", EFFECT, NULL}, {NULL, "--lr 0.5", EFFECT, NULL},        \
        {NULL, "--optim " OTHER, EFFECT, NULL}, {SGD, "--momentum 0.5", EFFECT, NULL},                            \
        {"--optim adam", "--momentum 0.5", REFUSED, "--momentum needs --optim sgd"},                              \
        {NULL, "--weight-decay 0.5", EFFECT, NULL}, {NULL, "--seed 7", EFFECT, NULL},                            \
        {NULL, "--clip-grad-norm 0.001", EFFECT, NULL},                                                           \
        {NULL, "--threads 2", EFFECT, NULL}, {NULL, "--quiet", QUIET, NULL},                                      \
        {NULL, "--device cuda", REFUSED, "no CUDA backend"}

/* SCOPE: the expectation of --prune-scope (rnn and gru have one prunable layer: no effect) */
#define LOOP_WALK(...)                                                                                       \
    {NULL, "--epochs 2", EFFECT, NULL}, {"--epochs 2", "--lr-schedule step:1:0.1", EFFECT, NULL},            \
        {NULL, "--no-shuffle", EFFECT, NULL}, {NULL, "--eval-every 1", STDERR_HAS, "step 1: test loss"},     \
        {NULL, "--log %T/log.csv", FILE_MADE, "%T/log.csv"}, {NULL, "--save %T/w.st", FILE_MADE, "%T/w.st"}, \
        {NULL, "--mem-report", STDOUT_HAS, "\"mem_arena_mib\": "},                                           \
        {"--mem-report", "--eval-batch 1", EFFECT, NULL},                                                      \
        {NULL, "--eval-batch 0", REFUSED, "--eval-batch 0: expected >= 1"},                                    \
        {NULL, "--load %T/w.st", EFFECT, NULL}, {"--load %T/w.st", "--eval-only", STDOUT_HAS, "eval-only"},     \
        {NULL, "--eval-only", REFUSED, "--eval-only needs --load"},                                            \
        {NULL, "--save-every 3", REFUSED, "--save-every needs --save"},                                        \
        {"--steps 3", "--save-every 2 --save %T/r.st", FILE_MADE, "%T/r.st"},                                  \
        {"--steps 3", "--resume %T/r.st", EFFECT, NULL}, {NULL, "--prune 0.5", STDOUT_HAS, "\"pruned\": 0.5"},       \
        {"--prune 0.5", "--prune-scope layer", __VA_ARGS__},                                                       \
        {NULL, "--prune-scope layer", REFUSED, "--prune-scope needs --prune"}

#define ENGINE_WALK(K)                                                                                         \
    {NULL, "--backward ooo", EFFECT, NULL}, {NULL, "--scan-levels 1", REFUSED, "--scan-levels needs --backward bppsa"}, \
        {NULL, "--plan", REFUSED, "--plan needs --backward bppsa"},                                            \
        {NULL, "--order list", REFUSED, "--order needs --backward ooo"},                                       \
        {"--backward ooo", "--order list", EFFECT, NULL},                                                      \
        {"--backward ooo", "--k 1", REFUSED, "--k needs --order reverse-first-k"},                             \
        {"--backward ooo --order reverse-first-k", "--k " K, EFFECT, NULL},                                    \
        {"--backward ooo --order reverse-first-k", "--k 99", REFUSED, "--k 99: expected 0.."},                 \
        {NULL, "--lanes 2", REFUSED, "--lanes needs --backward ooo"},                                          \
        {"--backward ooo", "--lanes 2", REFUSED, "--lanes 2 with --threads 1"},                                \
        {"--backward ooo --threads 2", "--lanes 2", STDOUT_HAS, "\"lanes\": 2"},                               \
        {"--backward ooo --threads 2 --order conventional", "--lanes 2", REFUSED, "--lanes 2 with --order conventional"}, \
        {"--backward ooo --parallel ddp", "--lanes 1", REFUSED, "--lanes does not apply with --parallel"},    \
        {NULL, "--mem-cap 1000", REFUSED, "--mem-cap needs --backward ooo"},                                   \
        {"--backward ooo", "--mem-cap 1000", REFUSED, "--mem-cap 1000"},                                       \
        {NULL, "--trace %T/t.json", REFUSED, "--trace needs --backward ooo"},                                  \
        {"--backward ooo", "--trace %T/t.json", FILE_MADE, "%T/t.json"},                                      \
        {NULL, "--cuda-graph", REFUSED, "--cuda-graph needs --backward ooo"},                                  \
        {"--backward ooo", "--cuda-graph", REFUSED, "--cuda-graph needs --device cuda"},                       \
        {"--backward ooo --device cuda", "--cuda-graph", REFUSED, "no CUDA backend"},                          \
        {NULL, "--plan-svg %T/p.svg", REFUSED, "--plan-svg needs --backward bppsa"}

/* parallel training on one rank (tests/test_exec.c runs it under mpirun) */
#define PAR_WALK                                                                                               \
    {NULL, "--parallel ddp", EFFECT, NULL}, {"--parallel gpipe --batch 2", "--microbatches 2", EFFECT, NULL},          \
        {NULL, "--microbatches 2", STDOUT_HAS, "\"microbatches\": 2"},                                      \
        {NULL, "--sync-bn", REFUSED, "--sync-bn needs --parallel"},                                          \
        {"--parallel gpipe --batch 2", "--sync-bn", REFUSED, "--sync-bn needs --parallel ddp, fsdp or ddp-ooo"}, \
        {"--parallel ddp", "--sync-bn", REFUSED, "has no batch norm"},                                       \
        {"--parallel ddp", "--groups 2", REFUSED, "--groups needs --parallel lpp or fslpp"},                 \
        {"--parallel ddp", "--chunks 2", REFUSED, "--chunks needs --parallel interleaved-1f1b, interleaved-zb, looped-bfs or zb-auto"}, \
        {NULL, "--mem-limit 2", REFUSED, "--mem-limit needs --parallel zb-auto"},                          \
        {"--parallel zb-auto", "--mem-limit 2XB", REFUSED, "--mem-limit 2XB: unknown unit \"XB\""},        \
        {"--parallel zb-auto", "--mem-limit 1.2.3", REFUSED, "--mem-limit 1.2.3: expected N"},              \
        {"--parallel zb-h1", "--actions %T/a.csv", REFUSED, "--actions needs --parallel custom"},          \
        {NULL, "--partition layerpipe", REFUSED, "--partition needs --parallel"},                            \
        {NULL, "--bucket-mb 1", REFUSED, "--bucket-mb needs --parallel"},                                    \
        {NULL, "--comm-timeout 5", REFUSED, "--comm-timeout needs --parallel"},                              \
        {NULL, "--step-sync plain", REFUSED, "--step-sync needs --parallel"},                                \
        {"--parallel ddp", "--step-sync plain", REFUSED, "--step-sync needs --clip-grad-norm"},              \
        {"--parallel ddp --clip-grad-norm 0.001", "--step-sync plain", STDOUT_HAS, "\"step_sync\": \"plain\""},   \
        {"--parallel gpipe --batch 2", "--costs %T/none.csv", REFUSED, "none.csv"},                                    \
        {"--parallel gpipe --batch 2", "--costs-out %T/costs.csv", FILE_MADE, "%T/costs.csv"},                         \
        {"--parallel ddp", "--exec-order %T/order.txt", FILE_MADE, "%T/order.txt"},                          \
        {"--parallel ddp", "--comm-profile docs/comm-profile.csv", STDERR_HAS, "communication model (docs/"},   \
        {"--parallel ddp", "--comm-profile %T/none.csv", REFUSED, "none.csv"},                                 \
        {NULL, "--comm-profile docs/comm-profile.csv", REFUSED, "--comm-profile needs --parallel"},           \
        {"--parallel ddp", "--backward bppsa", REFUSED, "--parallel needs --backward linear or ooo"}, \
        {"--parallel ddp", "--backward ooo", EFFECT, NULL}, {NULL, "--parallel ddp-ooo", EFFECT, NULL},         \
        /* flags --parallel does not use, and output paths checked before any work */                        \
        {"--parallel ddp --backward ooo", "--mem-cap 1", REFUSED, "--mem-cap does not apply with --parallel"}, \
        {"--parallel ddp", "--partition cost", REFUSED, "--partition needs --parallel gpipe"},                \
        {"--parallel lpp", "--partition layerpipe", REFUSED, "--partition needs --parallel gpipe"},           \
        {"--parallel ddp", "--costs %T/none.csv", REFUSED, "--costs needs --parallel fsdp"},                  \
        {"--parallel gpipe --batch 2", "--costs-out %T/nodir/c.csv", REFUSED, "--costs-out: cannot write"},   \
        {"--parallel ddp", "--trace %T/nodir/t.json", REFUSED, "--trace: cannot write"},                      \
        {"--parallel ddp", "--exec-order %T/nodir/o.txt", REFUSED, "--exec-order: cannot write"}

/* bppsa runs: light models only */
#define BPPSA_WALK                                                                         \
    {NULL, "--backward bppsa", EFFECT, NULL}, {"--backward bppsa", "--scan-levels 1", EFFECT, NULL}, \
        {"--backward bppsa", "--plan", STDOUT_HAS, "bppsa plan"},                           \
        {"--backward bppsa", "--plan-svg %T/p.svg", FILE_MADE, "%T/p.svg"},                  \
        {"--backward bppsa", "--scan-levels 99", REFUSED, "expected 0.."}

Test(walk, lenet)
{
    make_images(4);
    walk w[] = {
        TRAIN_WALK("adam", NULL),
        LOOP_WALK(EFFECT, NULL),
        ENGINE_WALK("1"),
        BPPSA_WALK,
        PAR_WALK,
        {"--parallel ddp", "--log %T/nodir/l.csv", REFUSED, "--log: cannot write"},
        /* one process without mpirun: it runs, and says that one worker runs */
        {NULL, "--parallel gpipe", STDERR_HAS, "lenet: note: --parallel gpipe runs 1 worker (not started by mpirun"},
        /* a limit in bytes weighs the model's activations: 368832 B per micro-batch of 2 images */
        {"--parallel zb-auto", "--mem-limit 368832B", STDOUT_HAS, "\"simulated_peak_activation_bytes\": [368832]"},
        {"--parallel zb-auto", "--mem-limit 368831B", REFUSED, "memory limit 368831 is below one micro-batch's "
                                                               "activations on a rank (368832)"},
        {NULL, "--data %T/nowhere", REFUSED, "nowhere"},
        {NULL, "--data-format mnist", REFUSED, "train-images-idx3-ubyte"},
    };
    run_walk("lenet", "--data %T/img --data-format folder --batch 4 --threads 1", w, N(w));
    check_coverage("lenet", w, N(w));
}

Test(walk, vgg11)   /* VGG-11 is slow: 4 images, batch 1 */
{
    make_images(2);
    walk w[] = {
        TRAIN_WALK("adam", NULL),
        LOOP_WALK(EFFECT, NULL),
        ENGINE_WALK("1"),
        PAR_WALK,
        {NULL, "--backward bppsa --scan-levels 99", REFUSED, "expected 0.."},
        {NULL, "--backward bppsa --plan --scan-levels 99", REFUSED, "expected 0.."},
        {NULL, "--data %T/nowhere", REFUSED, "nowhere"},
        {NULL, "--data-format cifar10", REFUSED, "data_batch"},
    };
#if defined(__SANITIZE_ADDRESS__)
    bool sanitized = true;
#else
    bool sanitized = false;
#endif
    run_walk_some("vgg11", "--data %T/img --data-format folder --batch 1 --threads 1", w, N(w), sanitized);
    check_coverage("vgg11", w, N(w));
}

/* a small sequence file: x [N, T, C], y [N] */
static void make_sequences(void)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/seq.safetensors", tu_tmpdir());
    sp_dataset *d = sp_bitstream(8, 6, 3);
    cr_assert_eq(sp_dataset_save(d, path), SP_OK, "%s", sp_last_error());
    sp_dataset_free(d);
}

Test(walk, rnn)
{
    make_sequences();
    walk w[] = {
        TRAIN_WALK("sgd", "--optim sgd"),
        LOOP_WALK(STDOUT_HAS, "\"pruned\": 0.5"),
        ENGINE_WALK("2"),
        BPPSA_WALK,
        PAR_WALK,
        {NULL, "--seq-len 9", EFFECT, NULL},
        {NULL, "--paper-defaults", EFFECT, NULL},
        {NULL, "--samples 24", EFFECT, NULL},
        {NULL, "--hidden 5", EFFECT, NULL},
        {"--parallel scan", "--plan", STDOUT_HAS, "cross-rank scan plan: 1 ranks"},
        {"--parallel ddp", "--plan", REFUSED, "--plan needs --backward bppsa or --parallel scan"},
        {"=--batch 4 --steps 2", "--dataset %T/seq.safetensors", STDOUT_HAS, "\"test_loss\": null"},
        {"=--steps 1", "--dataset %T/seq.safetensors --seq-len 9", REFUSED, "--seq-len needs --dataset bitstream"},
        {NULL, "--data %T", REFUSED, "--data does not apply to rnn"},
        {NULL, "--data-format cifar10", REFUSED, "--data-format does not apply to rnn"},
    };
    run_walk("rnn", "--seq-len 8 --samples 32 --batch 4 --threads 1", w, N(w));
    check_coverage("rnn", w, N(w));
}

Test(walk, gru)
{
    make_sequences();
    walk w[] = {
        TRAIN_WALK("sgd", "--optim sgd"),
        LOOP_WALK(STDOUT_HAS, "\"pruned\": 0.5"),
        ENGINE_WALK("2"),
        PAR_WALK,
        {NULL, "--backward bppsa --scan-levels 99", REFUSED, "expected 0.."},
        {NULL, "--backward bppsa --plan --scan-levels 99", REFUSED, "expected 0.."},
        {NULL, "--shape M", EFFECT, NULL},
        {NULL, "--samples 12", EFFECT, NULL},
        {NULL, "--classes 3", EFFECT, NULL},
        {NULL, "--hidden 5", EFFECT, NULL},
        {"--parallel scan", "--plan", STDOUT_HAS, "cross-rank scan plan: 1 ranks"},
        {"--parallel ddp", "--plan", REFUSED, "--plan needs --backward bppsa or --parallel scan"},
        {"=--batch 4 --steps 2", "--dataset %T/seq.safetensors", STDOUT_HAS, "\"test_loss\": null"},
        {"=--steps 1", "--dataset %T/seq.safetensors --classes 3", REFUSED, "--classes needs --dataset synthetic"},
        {NULL, "--data-format cifar10", REFUSED, "--data-format does not apply to gru"},
    };
    run_walk("gru", "--shape S --samples 8 --batch 4 --threads 1", w, N(w));
    check_coverage("gru", w, N(w));
}

Test(walk, demo)
{
    walk w[] = {
        {NULL, "--steps 2", EFFECT, NULL},
        {NULL, "--batch 8", EFFECT, NULL},
        {NULL, "--lr 0.5", EFFECT, NULL},
        {NULL, "--optim adam", EFFECT, NULL},
        {NULL, "--momentum 0.5", EFFECT, NULL},
        {"--optim adam", "--momentum 0.5", REFUSED, "--momentum needs --optim sgd"},
        {NULL, "--weight-decay 0.5", EFFECT, NULL},
        {NULL, "--clip-grad-norm 0.001", EFFECT, NULL},
        {NULL, "--seed 7", EFFECT, NULL},
        {NULL, "--threads 2", EFFECT, NULL},
        {NULL, "--quiet", QUIET, NULL},
        {NULL, "--device cuda", REFUSED, "no CUDA backend"},
        {NULL, "--layers 3", EFFECT, NULL},
        {NULL, "--width 9", EFFECT, NULL},
        BPPSA_WALK,
        ENGINE_WALK("2"),
        PAR_WALK,
        {NULL, "--save %T/x.st", FILE_MADE, "%T/x.st"},
        /* what demo's one-screen loop does not do is refused, not ignored (issue 15) */
        {NULL, "--load %T/x.st", REFUSED, "--load does not apply to demo"},
        {NULL, "--log %T/x.csv", REFUSED, "--log does not apply to demo"},
        {NULL, "--epochs 2", REFUSED, "--epochs does not apply to demo"},
        {NULL, "--lr-schedule cosine:5", REFUSED, "--lr-schedule does not apply to demo"},
        {NULL, "--data %T", REFUSED, "--data does not apply to demo"},
        {NULL, "--batch 513", REFUSED, "--batch 513 exceeds the 512 training samples"},
    };
    run_walk("demo", "--steps 3 --threads 1", w, N(w));
    check_coverage("demo", w, N(w));
}

Test(walk, jacobian)
{
    walk w[] = {
        {NULL, "--model lenet", EFFECT, NULL},
        {NULL, "--model resnet", REFUSED, "--model resnet: expected lenet, vgg11, rnn, gru, mlp"},
        {"--model rnn", "--input 7x1", EFFECT, NULL},
        {NULL, "--input 20x20", REFUSED, "--input 20x20"},
        {NULL, "--batch 2", EFFECT, NULL},
        {NULL, "--batch 0", REFUSED, "--batch 0: expected 1..4096"},
        {NULL, "--png %T/png", FILE_MADE, "%T/png/01_fc1.png"},
        {NULL, "--columns 100000", STDOUT_LACKS, "~ columnwise extrapolated"},
        {NULL, "--threads 1", EFFECT, NULL},
        {NULL, "--seed 7", EFFECT, NULL},
    };
    run_walk("jacobian", "--model mlp --columns 4", w, N(w));
    check_coverage("jacobian", w, N(w));
}

Test(walk, schedule)
{
    walk w[] = {
        {NULL, "--scheme 1f1b", EFFECT, NULL},
        {NULL, "--stages 3", EFFECT, NULL},
        {NULL, "--microbatches 3", EFFECT, NULL},
        {"--scheme ddp", "--workers 2", EFFECT, NULL},
        {"--scheme zb-h1", "--chunks 2", REFUSED, "--chunks needs --scheme interleaved-1f1b, interleaved-zb, looped-bfs or zb-auto"},
        {"--scheme interleaved-1f1b --stages 8 --workers 4", "--chunks 1", EFFECT, NULL},
        {"--scheme zb-auto --stages 8 --workers 4", "--chunks 2", EFFECT, NULL},
        {NULL, "--mem-limit 2", REFUSED, "--mem-limit needs --scheme zb-auto"},
        {"--scheme zb-h1", "--mem-model sail", EFFECT, NULL},
        {"--scheme zb-h1 --mem-model sail", "--mem-grad-share 0.25", EFFECT, NULL},
        {NULL, "--mem-grad-share 0.25", REFUSED, "--mem-grad-share needs --mem-model sail"},
        {"--mem-model sail", "--mem-grad-share 2", REFUSED, "--mem-grad-share"},
        {"--scheme zb-auto --model mlp --workers 2", "--mem-limit 300KB", EFFECT, NULL},
        {"--scheme zb-auto --stages 4 --workers 4", "--mem-limit 2", EFFECT, NULL},
        {"--scheme zb-auto", "--mem-limit 1MiB", REFUSED, "--mem-limit 1MiB: a limit in bytes needs activation sizes"},
        {"--scheme zb-auto --model mlp", "--mem-limit 5GiBs", REFUSED, "--mem-limit 5GiBs: unknown unit \"GiBs\""},
        {NULL, "--actions %T/a.csv", REFUSED, "--actions needs --scheme custom"},
        {NULL, "--actions-out %T/a.csv", FILE_MADE, "%T/a.csv"},
        {"--actions-out %T/t.csv", "--torch", FILE_MADE, "%T/t.csv"},
        {NULL, "--torch", REFUSED, "--torch needs --actions-out"},
        {NULL, "--workers 0", REFUSED, "--workers 0: expected >= 1"},
        {"--scheme lpp --stages 4 --workers 4", "--groups 2 --per-group 2", EFFECT, NULL},
        {NULL, "--groups 2", REFUSED, "--groups needs --scheme lpp or fslpp"},
        {NULL, "--per-group 2", REFUSED, "--per-group needs --scheme lpp or fslpp"},
        {NULL, "--split", EFFECT, NULL},
        {"--scheme ooo-ff", "--no-split", EFFECT, NULL},
        {NULL, "--split --no-split", REFUSED, "--split does not apply with --no-split"},
        {NULL, "--no-input-grad", EFFECT, NULL},
        {NULL, "--fwd-cost 2", EFFECT, NULL},
        {NULL, "--bwd-cost 3", EFFECT, NULL},
        {NULL, "--delta-cost 2", EFFECT, NULL},
        {NULL, "--grad-cost 2", EFFECT, NULL},
        {NULL, "--model mlp", EFFECT, NULL},
        {NULL, "--model mlp --stages 3", REFUSED, "--stages does not apply with --model"},
        {NULL, "--model mlp --fwd-cost 2", REFUSED, "--fwd-cost does not apply with --model"},
        {"--model mlp", "--batch-size 4", EFFECT, NULL},
        {"--model mlp", "--gflops 10", EFFECT, NULL},
        {NULL, "--fwd-cost 1e308 --bwd-cost 1e308", REFUSED, "--fwd-cost 1e+308: expected a finite time in 0..1e+12"},
        {"--model mlp", "--gflops 1e-300", REFUSED, "--gflops 1e-300: stage "},
        {NULL, "--gflops 10", REFUSED, "--gflops needs --model"},
        {NULL, "--profile %T/none.csv", REFUSED, "none.csv"},
        {NULL, "--costs-out %T/c.csv", FILE_MADE, "%T/c.csv"},
        {NULL, "--svg %T/d.svg", FILE_MADE, "%T/d.svg"},
        {NULL, "--title x", REFUSED, "--title needs --svg"},
        {NULL, "--max-cols 5", EFFECT, NULL},
        {NULL, "--no-diagram", EFFECT, NULL},
        {"=", "--layerpipe docs/layerpipe-table2.csv", EFFECT, NULL},
        {"=--layerpipe docs/layerpipe-table2.csv", "--processors 2", EFFECT, NULL},
        {"=--layerpipe docs/layerpipe-table2.csv --processors 2", "--alpha 1.5", EFFECT, NULL},
        {NULL, "--alpha 1.5", REFUSED, "--alpha needs --layerpipe"},
        {NULL, "--layerpipe docs/layerpipe-table2.csv", REFUSED, "--microbatches does not apply with --layerpipe"},
        {"=", "--list", EFFECT, NULL},
        {NULL, "--list", REFUSED, "--microbatches does not apply with --list"},
        {"=", "--calibrate-comm %T/comm.csv", REFUSED, "--calibrate-comm"},   /* 1 rank: needs mpirun */
        {NULL, "--calibrate-comm %T/comm.csv", REFUSED, "--microbatches does not apply with --calibrate-comm"},
        {"=", "--calibrate-max-mb 1", REFUSED, "--calibrate-max-mb needs --calibrate-comm"},
        {"=", "--calibrate-reps 3", REFUSED, "--calibrate-reps needs --calibrate-comm"},
        {NULL, "--comm-profile docs/comm-profile.csv", STDOUT_HAS, "communication model (docs/comm-profile.csv)"},
        {NULL, "--comm-profile %T/none.csv", REFUSED, "none.csv"},
        {"=--scheme ddp --model lenet --workers 2 --comm-profile docs/comm-profile.csv", "--bucket-mb 0", EFFECT, NULL},
        {NULL, "--bucket-mb 1", REFUSED, "--bucket-mb needs --nodes, --comm-profile or --transfer-cost"},
        {NULL, "--transfer-cost 1", STDOUT_HAS, "\"latency_with_comm\":"},
        {NULL, "--transfer-cost -1", REFUSED, "--transfer-cost -1: expected a finite time in 0..1e+12"},
        {NULL, "--transfer-cost nan", REFUSED, "--transfer-cost"},
        {NULL, "--transfer-cost 1 --comm-profile docs/comm-profile.csv", REFUSED,
         "--transfer-cost does not apply with --comm-profile"},
        {"=--scheme ddp --workers 4 --transfer-cost 1", "--bucket-mb 0", EFFECT, NULL},
        {NULL, "--optim adam", EFFECT, NULL},
        {NULL, "--momentum 0", EFFECT, NULL},
        {NULL, "--nodes 2", REFUSED, "--nodes 2: expected --ranks-per-node R"},
        {"=--scheme ddp --workers 4 --nodes 2 --ranks-per-node 2 --intra-bw-gbs 100 --inter-bw-gbs 10",
         "--intra-latency-us 3", EFFECT, NULL},
        {NULL, "--ranks-per-node 2", REFUSED, "--ranks-per-node needs --nodes"},
        {NULL, "--intra-latency-us 1", REFUSED, "--intra-latency-us needs --nodes"},
        {NULL, "--intra-bw-gbs 1", REFUSED, "--intra-bw-gbs needs --nodes"},
        {NULL, "--inter-latency-us 1", REFUSED, "--inter-latency-us needs --nodes"},
        {NULL, "--inter-bw-gbs 1", REFUSED, "--inter-bw-gbs needs --nodes"},
        {"=--scheme ddp --workers 4 --nodes 2 --ranks-per-node 2 --intra-bw-gbs 100 --inter-bw-gbs 10",
         "--opt-gbs 1000", EFFECT, NULL},
        {NULL, "--opt-gbs 1", REFUSED, "--opt-gbs needs --nodes or --comm-profile"},
        {"=--scheme ddp --model resnet20 --microbatches 2 --transfer-cost 1", "--sync-bn", EFFECT, NULL},
        {"=--scheme gpipe --model resnet20", "--sync-bn", REFUSED, "--sync-bn needs --scheme ddp, fsdp or ddp-ooo"},
        {"=--scheme ddp --model lenet", "--sync-bn", REFUSED, "--sync-bn: model lenet has no batch norm"},
        {NULL, "--sync-bn", REFUSED, "--sync-bn needs --model"},
    };
    run_walk("schedule", "--microbatches 4", w, N(w));
    check_coverage("schedule", w, N(w));
}

/* ---- README.md's flag list is the code's -------------------------------------------- */

Test(readme, flag_list_matches_help)
{
    FILE *f = fopen("README.md", "r");
    cr_assert_not_null(f, "README.md not found (run from the repository root)");
    static char text[1 << 17];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    const char *begin = strstr(text, "<!-- flags:begin"), *end = strstr(text, "<!-- flags:end");
    cr_assert(begin && end && begin < end, "README.md: no <!-- flags:begin --> ... <!-- flags:end --> section");
    const char *apps[] = {"lenet", "vgg11", "resnet", "rnn", "gru", "demo", "jacobian", "schedule"};
    for (size_t a = 0; a < sizeof apps / sizeof apps[0]; a++) {
        char readme[8192] = "", help[8192];
        size_t k = 0;
        char tag[64];
        snprintf(tag, sizeof tag, "`build/%s`", apps[a]);
        for (const char *line = begin; line < end; line = strchr(line, '\n') + 1) {
            const char *eol = strchr(line, '\n');
            char row[4096];
            snprintf(row, sizeof row, "%.*s", (int)(eol - line), line);
            if (!strstr(row, tag)) continue;
            for (const char *p = row; (p = strstr(p, "`--"));) {   /* `--flag ...` */
                size_t len = strspn(p + 3, "abcdefghijklmnopqrstuvwxyz0123456789-");
                k += (size_t)snprintf(readme + k, sizeof readme - k, " %.*s ", (int)len, p + 3);
                p += 3 + len;
            }
        }
        help_flags(apps[a], help, sizeof help);
        /* each list within the other: same sets */
        for (int pass = 0; pass < 2; pass++) {
            const char *x = pass ? readme : help, *y = pass ? help : readme;
            for (const char *p = x; (p = strchr(p, ' ')) && p[1];) {
                size_t len = strcspn(p + 1, " ");
                if (len) {
                    char needle[80];
                    snprintf(needle, sizeof needle, " %.*s ", (int)len, p + 1);
                    cr_expect(strstr(y, needle), "build/%s --%.*s: in %s but not in %s", apps[a], (int)len, p + 1,
                              pass ? "README.md's flag list" : "--help", pass ? "--help" : "README.md's flag list");
                }
                p += len + 1;
            }
        }
    }
}

/* The README's list of --parallel schemes (before the mpirun example) is the app's. */
Test(readme, parallel_schemes_match_help)
{
    FILE *f = fopen("README.md", "r");
    cr_assert_not_null(f, "README.md not found (run from the repository root)");
    static char text[1 << 17];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    const char *list = strstr(text, "docs/SCHEDULES.md: `");
    cr_assert_not_null(list, "README.md: no scheme list 'docs/SCHEDULES.md: `...`'");
    list += strlen("docs/SCHEDULES.md: `");
    char readme[512];
    snprintf(readme, sizeof readme, " %.*s ", (int)strcspn(list, "`"), list);
    cr_assert_eq(app("lenet", "--help", out, err), 0);
    const char *p = strstr(out, "--parallel S");
    cr_assert_not_null(p);
    p = strstr(p, "one of ");
    cr_assert_not_null(p);
    p += strlen("one of ");
    int seen = 0;
    for (;;) {   /* "ddp, fsdp, ... or scan [needs" */
        size_t len = strcspn(p, ", []");
        char word[64];
        snprintf(word, sizeof word, " %.*s ", (int)len, p);
        if (strcmp(word, " or ") != 0 && len > 0) {
            cr_expect(strstr(readme, word), "--parallel%s: in --help but not in README.md's scheme list", word);
            seen++;
        }
        p += len;
        if (*p == '[' || *p == '\n' || !*p) break;
        p += strspn(p, ", ");
        if (strncmp(p, "or ", 3) == 0) p += 3;
        if (*p == '[') break;
    }
    cr_assert_geq(seen, 9, "read only %d schemes from --help", seen);
}

/* ---- one set of scheme names ---------------------------------------------------------- */

/* " a b c " from --help's "--parallel S ... one of a, b, ... or z [needs ...]" */
static void parallel_choices(const char *name, char *list, size_t len)
{
    cr_assert_eq(app(name, "--help", out, err), 0, "%s --help: %s", name, err);
    const char *p = strstr(out, "--parallel S");
    cr_assert_not_null(p, "%s --help: no --parallel", name);
    p = strstr(p, "one of ");
    cr_assert_not_null(p, "%s --help: --parallel lists no choices", name);
    p += strlen("one of ");
    size_t k = (size_t)snprintf(list, len, " ");
    while (*p && *p != '[' && *p != '\n') {
        size_t n = strcspn(p, ", [\n");
        if (n && !(n == 2 && !strncmp(p, "or", 2))) k += (size_t)snprintf(list + k, len - k, "%.*s ", (int)n, p);
        cr_assert_lt(k, len);
        p += n;
        p += strspn(p, ", ");
    }
}

/* Issue 24 E.18: a scheme has one name in build/schedule --scheme, --parallel (every
 * app), bench/distributed.sh (which reads build/schedule --list) and docs/DISTRIBUTED.md:
 * every schedule build/schedule simulates runs under --parallel by that name (ddp-ooo,
 * not only as ddp --backward ooo), and --parallel adds only scan (BPPSA across ranks: a
 * scan over the ranks, not a schedule). */
Test(schemes, one_set_of_names_for_schedule_and_parallel)
{
    cr_assert_eq(app("schedule", "--list", out, err), 0, "schedule --list: %s", err);
    const char *j = strstr(out, "{\"schemes\":[");
    cr_assert_not_null(j, "schedule --list: no JSON line: %s", out);
    char sched[512] = " ";
    size_t k = 1;
    for (const char *p = j + strlen("{\"schemes\":["); *p == '"';) {
        size_t n = strcspn(p + 1, "\"");
        k += (size_t)snprintf(sched + k, sizeof sched - k, "%.*s ", (int)n, p + 1);
        p += n + 2;
        p += *p == ',';
    }
    cr_assert_geq(k, 40, "read too few schemes from schedule --list: '%s'", sched);
    static const char *apps[] = {"lenet", "vgg11", "resnet", "rnn", "gru", "demo"};
    char par[512], docs[512] = "", word[64];
    for (size_t a = 0; a < sizeof apps / sizeof apps[0]; a++) {
        parallel_choices(apps[a], par, sizeof par);
        for (const char *p = sched + 1; *p; p += strcspn(p, " ") + 1) {
            snprintf(word, sizeof word, " %.*s ", (int)strcspn(p, " "), p);
            cr_expect(strstr(par, word), "build/schedule --scheme%s is no build/%s --parallel scheme (%s)", word,
                      apps[a], par);
        }
        for (const char *p = par + 1; *p; p += strcspn(p, " ") + 1) {
            snprintf(word, sizeof word, " %.*s ", (int)strcspn(p, " "), p);
            cr_expect(strstr(sched, word) || !strcmp(word, " scan "),
                      "build/%s --parallel%s is no build/schedule --scheme (%s)", apps[a], word, sched);
        }
    }
    /* docs/DISTRIBUTED.md's flag table: | `--parallel S` | `ddp fsdp ...` | */
    FILE *f = fopen("docs/DISTRIBUTED.md", "r");
    cr_assert_not_null(f, "docs/DISTRIBUTED.md not found (run from the repository root)");
    static char text[1 << 17];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    const char *row = strstr(text, "| `--parallel S` | `");
    cr_assert_not_null(row, "docs/DISTRIBUTED.md: no row | `--parallel S` | `...` |");
    row += strlen("| `--parallel S` | `");
    snprintf(docs, sizeof docs, " %.*s ", (int)strcspn(row, "`"), row);
    cr_expect_str_eq(docs, par, "docs/DISTRIBUTED.md's --parallel list '%s' is not --help's '%s'", docs, par);
}

/* ---- the cases issue 15 names ------------------------------------------------------- */

Test(flags, refused_with_the_reason)
{
    static const struct {
        const char *app, *args, *says;
    } cases[] = {
        {"lenet", "--trace %T/t.json", "--trace needs --backward ooo"},
        {"lenet", "--plan", "--plan needs --backward bppsa"},
        {"lenet", "--order list", "--order needs --backward ooo"},
        {"lenet", "--lanes 2", "--lanes needs --backward ooo"},
        {"vgg11", "--lanes 2 --batch 4", "--lanes needs --backward ooo"},
        {"lenet", "--backward ooo --lanes 3", "--lanes 3: expected 1, 2 or auto"},
        {"lenet", "--data-format mnist", "--data-format mnist needs --data DIR"},
        {"lenet", "--eval-batch 0", "--eval-batch 0: expected >= 1"},
        {"lenet", "--btach 4", "did you mean --batch?"},
        {"lenet", "--epoch 2", "did you mean --epochs?"},
        {"lenet", "-batch 4", "did you mean --batch?"},
        {"lenet", "--optim rmsprop", "expected sgd, adam or adamw"},
        {"lenet", "--backward nope", "expected linear, bppsa or ooo"},
        {"rnn", "--data /nonexistent", "--data does not apply to rnn"},
        {"gru", "--data-format cifar10", "--data-format does not apply to gru"},
        {"demo", "--load %T/w.st", "--load does not apply to demo"},
        {"demo", "--weight-decay -1", "--weight-decay -1: expected >= 0"},
        {"schedule", "--scheme gpipe --groups 2", "--groups needs --scheme lpp or fslpp"},
        {"schedule", "--alpha 2", "--alpha needs --layerpipe"},
        {"schedule", "--workers 0", "--workers 0: expected >= 1"},
        {"jacobian", "--colums 3", "did you mean --columns?"},
        /* a value of a list: the closest one */
        {"schedule", "--scheme gpip", "--scheme gpip: expected ddp, fsdp, gpipe"},
        {"schedule", "--scheme gpip", "; did you mean gpipe?"},
        {"schedule", "--model lenet5", "did you mean lenet?"},
        {"lenet", "--backward oo", "did you mean ooo?"},
        {"lenet", "--optim adm", "did you mean adam?"},
        {"lenet", "--data-format cifar", "did you mean cifar10?"},
        {"lenet", "--backward ooo --order reverse-first", "did you mean reverse-first-k?"},
        {"jacobian", "--model vgg", "did you mean vgg11?"},
        {"demo", "--parallel 1f1", "did you mean 1f1b?"},
        /* a flag given twice */
        {"demo", "--steps 2 --steps 3", "demo: --steps given twice"},
        {"schedule", "--stages 2 --stages 2", "schedule: --stages given twice"},
        {"lenet", "--quiet --quiet", "lenet: --quiet given twice"},
        /* a step sync with no clip to sync */
        {"demo", "--parallel ddp --step-sync plain --clip-grad-norm 0", "--step-sync plain needs --clip-grad-norm > 0"},
        /* an output refused before the diagram is printed (stdout stays empty) */
        {"schedule", "--scheme gpipe --svg /dev/full", "--svg /dev/full: cannot open for writing"},
        {"schedule", "--scheme gpipe --actions-out /dev/full", "--actions-out /dev/full: cannot open for writing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = app(cases[i].app, cases[i].args, out, err);
        cr_expect_eq(rc, 2, "%s %s: exit %d", cases[i].app, cases[i].args, rc);
        cr_expect(one_line_error(err) && strstr(err, cases[i].says), "%s %s: expected one line with '%s', got '%s'",
                  cases[i].app, cases[i].args, cases[i].says, err);
        cr_expect_eq(out[0], 0, "%s %s: wrote to stdout: %s", cases[i].app, cases[i].args, out);
    }
}

Test(flags, help_shows_defaults_and_values)
{
    cr_assert_eq(app("lenet", "--help", out, err), 0);
    const char *must[] = {"fashion-mnist, mnist, idx, cifar10 or folder", "linear, bppsa or ooo",
                          "conventional, ooo, reverse-first-k or list", "sgd, adam or adamw", "(default 64)",
                          "(default 0.01)", "needs --backward ooo", "bppsa engine", "ooo engine", "whichever limit comes first"};
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++)
        cr_expect(strstr(out, must[i]), "lenet --help lacks '%s'", must[i]);
}

/* --lanes (docs/OOO.md): 2 puts tasks on the sub lane, 1 none, and the JSON line says how
 * many lanes ran. LeNet-5 on Fashion-MNIST at batch 16 is below the executor's size rule,
 * so auto keeps one lane: the runs of docs/OOO.md's figures that showed one lane. Which
 * lane takes a ready task is a race; in the last step (the one the trace shows) a sub
 * thread that a loaded machine does not schedule may take none, so a two-lane run is
 * tried up to three times. */
#define FMNIST_TRAIN "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"
Test(lanes, two_lanes_on_the_sub_lane_one_lane_none_and_the_json_says_so)
{
    if (access(FMNIST_TRAIN, R_OK) != 0) {
        cr_log_warn("skipped: %s not installed", FMNIST_TRAIN);
        return;
    }
    static char trace[1 << 20];
    const char *sub_slice = "\"ph\": \"X\", \"pid\": 1, \"tid\": 1,";
    const struct {
        const char *lanes;
        int want;
    } cases[] = {{"auto", 1}, {"1", 1}, {"2", 2}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        bool on_sub = false;
        for (int attempt = 0; attempt < (cases[c].want == 2 ? 3 : 1) && !on_sub; attempt++) {
            char args[256], path[4400], key[32];
            snprintf(args, sizeof args, "--backward ooo --threads 2 --batch 16 --steps 3 --quiet --lanes %s "
                     "--trace %%T/lanes.json", cases[c].lanes);
            cr_assert_eq(app("lenet", args, out, err), 0, "lenet %s: %s", args, err);
            snprintf(key, sizeof key, "\"lanes\": %d,", cases[c].want);
            cr_assert(strstr(out, key), "lenet %s: expected %s in %s", args, key, out);
            snprintf(path, sizeof path, "%s/lanes.json", tu_tmpdir());
            FILE *f = fopen(path, "r");
            cr_assert_not_null(f, "%s not written", path);
            size_t n = fread(trace, 1, sizeof trace - 1, f);
            trace[n] = 0;
            fclose(f);
            on_sub = strstr(trace, sub_slice) != NULL;
        }
        if (cases[c].want == 2) cr_expect(on_sub, "--lanes 2: no task on the sub lane in three runs' traces");
        else cr_expect(!on_sub, "--lanes %s: a task ran on the sub lane", cases[c].lanes);
    }
    /* one thread: one lane, whatever the order */
    cr_assert_eq(app("lenet", "--backward ooo --threads 1 --batch 16 --steps 1 --quiet --order list", out, err), 0, "%s",
                 err);
    cr_expect(strstr(out, "\"lanes\": 1,"), "--threads 1: expected one lane in %s", out);
}

/* docs/OOO.md: "--k 0 means that default" (half the parameterised layers) */
/* --mem-report: the keys are there and agree with what the model and the data hold */
static double json_num(const char *s, const char *key)
{
    char k[80];
    snprintf(k, sizeof k, "\"%s\": ", key);
    const char *p = strstr(s, k);
    cr_assert_not_null(p, "no %s in %s", key, s);
    return strtod(p + strlen(k), NULL);
}

Test(memory, mem_report_keys_agree_with_the_model_and_data)
{
    make_images(4);   /* 2 classes x 4 images, train and test */
    int rc = app("lenet", "--data %T/img --data-format folder --batch 4 --steps 3 --threads 1 --quiet --mem-report",
                 out, err);
    cr_assert_eq(rc, 0, "%s", err);
    double params = json_num(out, "params"), peak = json_num(out, "rss_peak_mib");
    double steady = json_num(out, "rss_steady_mib"), mib = 1024.0 * 1024.0;
    cr_expect_eq(params, 61706, "LeNet-5 (10 outputs whatever the data): got %g parameters", params);
    cr_expect(steady > 1 && steady <= peak + 1, "steady %g MiB, peak %g MiB", steady, peak);
    /* the linear engine updates each layer in its walk: the gradients live in the step's arena */
    cr_expect_eq(json_num(out, "mem_grads_mib"), 0.0, "gradients held outside the step");
    cr_expect(fabs(json_num(out, "mem_optim_mib") - params * 4 / mib) < 1e-6, "sgd momentum: one buffer");
    cr_expect(json_num(out, "mem_arena_mib") > 0 && json_num(out, "mem_eval_arena_mib") > 0);
    cr_expect(json_num(out, "mem_arena_mib") + json_num(out, "mem_params_mib") < peak);
    /* the image folder holds its samples elsewhere: not counted, 0 */
    cr_expect_eq(json_num(out, "mem_dataset_mib"), 0.0);
    /* a clip needs the whole gradient before any update, ooo runs its updates itself: held */
    static const char *held[] = {"--clip-grad-norm 1", "--backward ooo"};
    for (int k = 0; k < 2; k++) {
        char args[256];
        snprintf(args, sizeof args, "--data %%T/img --data-format folder --batch 4 --steps 3 --threads 1 --quiet "
                 "--mem-report %s", held[k]);
        rc = app("lenet", args, out, err);
        cr_assert_eq(rc, 0, "%s", err);
        cr_expect(fabs(json_num(out, "mem_grads_mib") - params * 4 / mib) < 1e-6, "%s: gradients not held", held[k]);
    }
    cr_assert_eq(app("lenet", "--data %T/img --data-format folder --batch 4 --steps 3 --threads 1 --quiet", out, err), 0);
    cr_expect_null(strstr(out, "rss_peak_mib"), "memory keys only with --mem-report");
}

Test(flags, k_zero_is_half_the_layers)
{
    cr_assert_eq(app("demo", "--steps 1 --layers 4 --backward ooo --order reverse-first-k --k 0 --quiet", out, err), 0,
                 "%s", err);
    cr_expect(strstr(out, "\"k\": 2"), "4 linear layers, --k 0: expected k 2 in %s", out);
}

/* --backward reverse is the linear engine's other name (its file, reverse.c): the run and
 * its JSON line say linear, --parallel takes it as linear, and --help names it. */
Test(flags, backward_reverse_is_linear)
{
    cr_assert_eq(app("demo", "--steps 1 --backward reverse --quiet", out, err), 0, "%s", err);
    cr_expect(strstr(out, "\"backward\": \"linear\""), "%s", out);
    cr_assert_eq(app("lenet", "--backward reverse --order list", out, err), 2);
    cr_expect(strstr(err, "--order needs --backward ooo"), "%s", err);
    cr_assert_eq(app("lenet", "--help", out, err), 0);
    cr_expect(strstr(out, "reverse = linear"), "lenet --help does not name the alias");
}

/* ---- issue 19 items 9–13 -------------------------------------------------------------- */

/* item 9: (n + batch - 1) / batch overflowed for batch near INT_MAX (UBSan aborts) */
Test(numbers, loader_batch_int_max_does_not_overflow)
{
    float *x;
    int *y, shape[1] = {1};
    sp_dataset *d = sp_dataset_new_f32("three", 3, 1, shape, 2, &x, &y);
    for (int i = 0; i < 3; i++) x[i] = (float)i, y[i] = i % 2;
    sp_loader *l = sp_loader_new_sync(d, INT_MAX, false, 1, false);
    cr_expect_eq(sp_loader_nbatches(l), 1);
    cr_expect_eq(sp_loader_batch(l), 3, "the batch as run is the dataset's 3 samples");
    sp_batch b;
    cr_assert(sp_loader_next(l, &b));
    cr_expect_eq(b.n, 3);
    cr_expect(!sp_loader_next(l, &b));
    sp_loader_free(l);
    l = sp_loader_new_sync(d, INT_MAX - 1, false, 1, false);
    cr_expect_eq(sp_loader_nbatches(l), 1);
    sp_loader_free(l);
    sp_dataset_free(d);
}

/* items 9 and 10: a batch beyond the dataset is refused, not run as another size */
Test(numbers, batch_beyond_the_dataset_is_refused)
{
    const char *args[] = {"--batch 2147483647", "--batch 99999999", "--batch 33"};
    for (int i = 0; i < 3; i++) {
        char a[256];
        snprintf(a, sizeof a, "--seq-len 4 --samples 32 --quiet %s", args[i]);
        cr_expect_eq(app("rnn", a, out, err), 2, "rnn %s", a);
        cr_expect(one_line_error(err) && strstr(err, "exceeds the 32 training samples"), "rnn %s: '%s'", a, err);
    }
    /* the JSON reports the batch that ran */
    cr_assert_eq(app("rnn", "--seq-len 4 --samples 32 --quiet --batch 32", out, err), 0, "%s", err);
    cr_expect(strstr(out, "\"batch\": 32,"), "%s", out);
}

/* item 11: --steps with --epochs stops at whichever comes first; --steps alone runs on */
Test(numbers, steps_and_epochs)
{
    static const struct {
        const char *args;
        const char *steps, *epochs;
    } cases[] = {
        {"--epochs 1 --steps 20", "\"steps\": 8,", "\"epochs\": 1,"},   /* 8 batches per epoch */
        {"--epochs 3 --steps 10", "\"steps\": 10,", "\"epochs\": 2,"},
        {"--steps 20", "\"steps\": 20,", "\"epochs\": 3,"},
        {"--epochs 2", "\"steps\": 16,", "\"epochs\": 2,"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char a[256];
        snprintf(a, sizeof a, "--seq-len 4 --samples 32 --batch 4 --quiet %s", cases[i].args);
        cr_assert_eq(app("rnn", a, out, err), 0, "rnn %s: %s", a, err);
        cr_expect(strstr(out, cases[i].steps) && strstr(out, cases[i].epochs), "rnn %s: expected %s %s in %s", a,
                  cases[i].steps, cases[i].epochs, out);
    }
}

/* item 12: --scan-levels outside 0..full refused with the model's range; full by name */
Test(numbers, scan_levels_range)
{
    int full = sp_scan_full_levels(7);   /* demo --layers 4: 4 linear + 3 tanh */
    char range[64], a[256], too_many[16];
    snprintf(range, sizeof range, "expected 0..%d for demo", full);
    snprintf(too_many, sizeof too_many, "%d", full + 1);
    const char *bad[] = {"-5", "999", too_many, "x", ""};
    for (int i = 0; i < 5; i++) {
        snprintf(a, sizeof a, "--steps 1 --layers 4 --quiet --backward bppsa --scan-levels '%s'", bad[i]);
        cr_expect_eq(app("demo", a, out, err), 2, "demo %s", a);
        cr_expect(one_line_error(err) && strstr(err, "--scan-levels"), "demo %s: '%s'", a, err);
        if (i == 1 || i == 2) cr_expect(strstr(err, range), "demo %s: expected '%s' in '%s'", a, range, err);
    }
    cr_expect_eq(app("demo", "--steps 1 --layers 4 --quiet --backward bppsa --scan-levels full", out, err), 0, "%s", err);
    cr_expect(strstr(out, "\"scan_levels\": \"full\""), "%s", out);
    snprintf(a, sizeof a, "--steps 1 --layers 4 --quiet --backward bppsa --scan-levels %d", full);
    cr_expect_eq(app("demo", a, out, err), 0, "%s", err);
}

/* item 13: a write error on any output is an error, stdout included */
Test(output, full_disk_is_an_error)
{
    if (access("/dev/full", W_OK) != 0) {
        cr_log_warn("skipped: no /dev/full");
        return;
    }
    static const struct {
        const char *app, *args;
    } cases[] = {
        {"demo", "--steps 1 --quiet > /dev/full"},
        {"rnn", "--seq-len 4 --samples 16 --steps 1 --quiet > /dev/full"},
        {"schedule", "> /dev/full"},
        {"jacobian", "--model mlp --columns 2 > /dev/full"},
        {"lenet", "--help > /dev/full"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = app(cases[i].app, cases[i].args, out, err);
        cr_expect_eq(rc, 2, "%s %s: exit %d (stderr %s)", cases[i].app, cases[i].args, rc, err);
        cr_expect(one_line_error(err) && strstr(err, "write failed"), "%s %s: '%s'", cases[i].app, cases[i].args, err);
    }
    /* output files are replaced atomically, so a device is refused before anything is
     * written (a full disk under an output file: files.full_disk_leaves_the_old_file_whole) */
    static const struct {
        const char *app, *args;
    } devs[] = {
        {"rnn", "--seq-len 4 --samples 16 --steps 1 --quiet --log /dev/full"},
        {"schedule", "--model lenet --no-diagram --costs-out /dev/full"},
        {"schedule", "--no-diagram --svg /dev/full"},
        {"demo", "--steps 1 --quiet --backward ooo --trace /dev/full"},
    };
    for (size_t i = 0; i < sizeof devs / sizeof devs[0]; i++) {
        int rc = app(devs[i].app, devs[i].args, out, err);
        cr_expect_eq(rc, 2, "%s %s: exit %d (stderr %s)", devs[i].app, devs[i].args, rc, err);
        cr_expect(one_line_error(err) && strstr(err, "cannot open for writing: it is a character device"), "%s %s: '%s'",
                  devs[i].app, devs[i].args, err);
    }
    /* jacobian --png: the picture files; a link to a device is refused as the device */
    char dir[4400];
    snprintf(dir, sizeof dir, "%s/pngfull", tu_tmpdir());
    cr_assert_eq(mkdir(dir, 0755), 0);
    snprintf(dir, sizeof dir, "%s/pngfull/00_flatten_1.png", tu_tmpdir());
    cr_assert_eq(symlink("/dev/full", dir), 0);
    cr_expect_eq(app("jacobian", "--model mlp --columns 2 --png %T/pngfull", out, err), 2);
    cr_expect(strstr(err, "it is a character device, not a regular file"), "jacobian --png: '%s'", err);
    /* the message names the reason when the failing write is the last one */
    cr_assert_eq(app("demo", "--steps 1 --quiet > /dev/full", out, err), 2);
    cr_expect(strstr(err, "write failed: No space left on device"), "%s", err);
}

/* ---- files: no flag opens a FIFO, every output is replaced atomically (issue 25) ----- */

/* Item 9: each flag that names a file refuses a FIFO at once, naming it, instead of
 * blocking until someone opens the other end (`timeout`: a hang fails, not stalls). */
Test(files, fifo_is_refused_by_every_flag)
{
    char fifo[4400], png[4400];
    snprintf(fifo, sizeof fifo, "%s/fifo", tu_tmpdir());
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    snprintf(png, sizeof png, "%s/pngdir", tu_tmpdir());
    cr_assert_eq(mkdir(png, 0755), 0);
    snprintf(png, sizeof png, "%s/pngdir/00_flatten_1.png", tu_tmpdir());
    cr_assert_eq(mkfifo(png, 0644), 0);
    static const struct {
        const char *app, *args;
    } cases[] = {
        {"lenet", "--steps 2 --quiet --log %T/fifo"},
        {"lenet", "--steps 2 --quiet --backward ooo --trace %T/fifo"},
        {"rnn", "--steps 2 --quiet --backward bppsa --plan-svg %T/fifo"},
        {"lenet", "--steps 2 --quiet --parallel gpipe --costs %T/fifo"},
        {"lenet", "--steps 2 --quiet --parallel gpipe --costs-out %T/fifo"},
        {"lenet", "--steps 2 --quiet --parallel gpipe --exec-order %T/fifo"},
        {"lenet", "--steps 2 --quiet --parallel gpipe --trace %T/fifo"},
        {"schedule", "--no-diagram --svg %T/fifo"},
        {"schedule", "--no-diagram --model lenet --costs-out %T/fifo"},
        {"schedule", "--no-diagram --profile %T/fifo"},
        {"schedule", "--layerpipe %T/fifo"},
        {"jacobian", "--model mlp --columns 2 --png %T/pngdir"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[512];
        snprintf(args, sizeof args, "%s < /dev/null", cases[i].args);
        const char *env = strstr(args, "--parallel") ? TU_MPI_FAST_ENV : "";
        char cmd[16384];
        snprintf(cmd, sizeof cmd, "%stimeout 60 %s %s", env, tu_bin(cases[i].app), expand(args));
        int rc = tu_run(cmd, out, OUT, err, OUT);
        cr_expect_eq(rc, 2, "%s %s: exit %d (124: it blocked on the FIFO); stderr '%s'", cases[i].app, cases[i].args, rc,
                     err);
        cr_expect(strstr(err, "a FIFO"), "%s %s: '%s' does not say 'a FIFO'", cases[i].app, cases[i].args, err);
        if (!strstr(args, "--parallel"))
            cr_expect(one_line_error(err), "%s %s: not one line: '%s'", cases[i].app, cases[i].args, err);
    }
}

/* Item 14: a directory given as a profile is named as one (it used to say "no stages"). */
Test(files, costs_directory_is_named)
{
    cr_expect_eq(app("lenet", "--steps 2 --quiet --parallel gpipe --costs %T", out, err), 2);
    cr_expect(strstr(err, "not a regular file (a directory)"), "--costs DIR: '%s'", err);
    cr_expect_eq(app("schedule", "--no-diagram --profile %T", out, err), 2);
    cr_expect(one_line_error(err) && strstr(err, "not a regular file (a directory)"), "--profile DIR: '%s'", err);
}

static void put_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
}

static bool file_is(const char *path, const char *text)
{
    char buf[4096];
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strcmp(buf, text) == 0;
}

/* The outputs written by each flag, each larger than 1 KiB; %O is the file. */
static const struct {
    const char *app, *args, *file;
} outputs[] = {
    {"lenet", "--steps 40 --quiet --log %O", "old.csv"},
    {"lenet", "--steps 2 --quiet --backward ooo --trace %O", "old.json"},
    {"rnn", "--steps 2 --quiet --backward bppsa --plan-svg %O", "old.svg"},
    {"schedule", "--no-diagram --svg %O", "old.svg"},
    {"schedule", "--no-diagram --stages 64 --costs-out %O", "old.csv"},
    {"jacobian", "--model mlp --columns 2 --png %D", "00_flatten_1.png"},
};

/* Item 10: a write that fails half-way (here: past RLIMIT_FSIZE, "File too large", with
 * SIGXFSZ ignored) leaves the previous file whole, and the message carries errno's text. */
Test(files, failed_write_leaves_the_old_file_whole)
{
    static const char old[] = "step,epoch,loss\n1,0,2.30\nthe previous run's file, 174 bytes or so\n";
    for (size_t i = 0; i < sizeof outputs / sizeof outputs[0]; i++) {
        char dir[4400], path[4500], args[5000], cmd[16384];
        snprintf(dir, sizeof dir, "%s/fsize%zu", tu_tmpdir(), i);
        cr_assert_eq(mkdir(dir, 0755), 0);
        snprintf(path, sizeof path, "%s/%s", dir, outputs[i].file);
        put_file(path, old);
        const char *o = strstr(outputs[i].args, "%");
        snprintf(args, sizeof args, "%.*s%s", (int)(o - outputs[i].args), outputs[i].args, o[1] == 'D' ? dir : path);
        /* stdout to /dev/null: only the output file grows past the limit */
        snprintf(cmd, sizeof cmd, "trap '' XFSZ; ulimit -f 1; exec %s %s > /dev/null", tu_bin(outputs[i].app), args);
        int rc = tu_run(cmd, out, OUT, err, OUT);
        cr_expect_eq(rc, 2, "%s %s: exit %d, '%s'", outputs[i].app, args, rc, err);
        cr_expect(one_line_error(err) && strstr(err, "write failed: File too large"), "%s %s: '%s'", outputs[i].app, args,
                  err);
        cr_expect(file_is(path, old), "%s %s: the old %s was not left whole", outputs[i].app, args, outputs[i].file);
    }
}

/* Item 10 on a real full file system (a 200 KiB tmpfs; needs root to mount it, skipped
 * otherwise): "No space left on device", the old log whole, no temp file left. */
Test(files, full_disk_leaves_the_old_file_whole)
{
    char dir[4400], path[4500], fill[4500], cmd[16384];
    snprintf(dir, sizeof dir, "%s/tmpfs", tu_tmpdir());
    cr_assert_eq(mkdir(dir, 0755), 0);
    snprintf(cmd, sizeof cmd, "mount -t tmpfs -o size=200k tmpfs %s", dir);
    if (geteuid() != 0 || tu_run(cmd, out, OUT, err, OUT) != 0) {
        cr_log_warn("skipped: cannot mount a tmpfs (%s)", err);
        return;
    }
    static const char old[] = "step,epoch,loss\n1,0,2.30\n";
    snprintf(path, sizeof path, "%s/old.csv", dir);
    put_file(path, old);
    snprintf(fill, sizeof fill, "%s/filler", dir);
    snprintf(cmd, sizeof cmd, "dd if=/dev/zero of=%s bs=1k 2>/dev/null; true", fill);   /* until ENOSPC */
    tu_run(cmd, out, OUT, err, OUT);
    for (size_t i = 0; i < sizeof outputs / sizeof outputs[0]; i++) {
        char args[5000];
        const char *o = strstr(outputs[i].args, "%");
        if (o[1] == 'D') continue;   /* the PNG: the same path as the others */
        snprintf(args, sizeof args, "%.*s%s", (int)(o - outputs[i].args), outputs[i].args, path);
        snprintf(cmd, sizeof cmd, "%s %s", tu_bin(outputs[i].app), args);
        int rc = tu_run(cmd, out, OUT, err, OUT);
        cr_expect_eq(rc, 2, "%s %s: exit %d, '%s'", outputs[i].app, args, rc, err);
        cr_expect(one_line_error(err) && strstr(err, "write failed: No space left on device"), "%s %s: '%s'",
                  outputs[i].app, args, err);
        cr_expect(file_is(path, old), "%s %s: the old file was not left whole", outputs[i].app, args);
    }
    snprintf(cmd, sizeof cmd, "ls %s | grep -c tmp; umount %s", dir, dir);
    tu_run(cmd, out, OUT, err, OUT);
    cr_expect_eq(atoi(out), 0, "temp files left: %s", out);
}

/* Item 9's guard: every file the library and the apps open goes through core/io/fileio.c
 * (sp_open_regular, sp_open_read, sp_out_*, sp_atomic_*), so a new flag cannot open a
 * FIFO or write in place. Allowed elsewhere, with the reason:
 *   data/imagefolder.c opendir: lists a directory (opendir of a FIFO fails, never blocks;
 *   every file it lists is opened with sp_open_regular);
 *   cli/summary.c open of /proc/self/status: sp_rss_kib reads the kernel's own
 *   file into a stack buffer after every step (--mem-report), where a step allocates nothing. */
Test(files, every_open_goes_through_fileio)
{
    int rc = tu_run("grep -rnE '\\b(fopen|freopen|fdopen|open|openat|creat|gzopen|opendir|popen)\\(' "
                    "--include='*.c' --include='*.cu' --include='*.h' core layers optim schedulers data apps "
                    "| grep -v '^core/io/fileio\\.c:' | grep -v '^data/imagefolder\\.c:[0-9]*: *DIR \\*dp = opendir(dir);'"
                    " | grep -v '^cli/summary\\.c:[0-9]*: *int fd = open(\"/proc/self/status\"'",
                    out, OUT, err, OUT);
    cr_expect_eq(rc, 1, "files opened outside core/io/fileio.c (use sp_open_read / sp_out_open):\n%s%s", out, err);
}

/* ---- make bench-cuda without a GPU: one line, exit 2 (issue 12) ---------------------- */

Test(bench, cuda_without_gpu_is_one_line_and_exit_2)
{
    /* NVIDIA_SMI points nowhere, so this holds on a GPU machine too */
    FILE *p = popen("NVIDIA_SMI=/nonexistent/nvidia-smi ./bench/cuda.sh 2>&1; echo \"rc=$?\"", "r");
    cr_assert_not_null(p);
    char out[2048];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    pclose(p);
    cr_assert(strncmp(out, "bench-cuda: no GPU: ", 20) == 0, "first line: %s", out);
    const char *nl = strchr(out, '\n');
    cr_assert(nl && strcmp(nl + 1, "rc=2\n") == 0, "expected one line then exit 2, got: %s", out);
}

/* ---- flags --eval-only does not use, sizes checked before work, seeds, shapes -------- */

/* --eval-only evaluates the --load weights and trains nothing: every training, loop,
 * engine and output flag is refused instead of ignored (--log and --trace wrote no file). */
Test(flags, eval_only_refuses_the_flags_it_does_not_use)
{
    cr_assert_eq(app("rnn", "--seq-len 4 --samples 32 --hidden 4 --steps 1 --quiet --save %T/e.st", out, err), 0, "%s",
                 err);
    const char *flags[] = {"--log %T/l.csv", "--backward ooo", "--trace %T/t.json", "--prune 0.5", "--steps 5",
                           "--epochs 2", "--lr 0.1", "--lr-schedule cosine:2", "--optim sgd", "--no-shuffle",
                           "--eval-every 2", "--mem-cap 1", "--plan", "--momentum 0.5", "--weight-decay 0.1",
                           "--parallel ddp", "--parallel custom --actions %T/missing.csv",
                           "--parallel ddp --comm-profile %T/missing", "--parallel ddp --exec-order %T/o.txt"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        char a[512], name[64];
        snprintf(a, sizeof a, "--seq-len 4 --samples 32 --hidden 4 --quiet --load %%T/e.st --eval-only %s", flags[i]);
        snprintf(name, sizeof name, "%.*s", (int)strcspn(flags[i], " "), flags[i]);
        int rc = app("rnn", a, out, err);
        cr_expect_eq(rc, 2, "rnn %s: exit %d (ignored?)", a, rc);
        cr_expect(one_line_error(err) && strstr(err, name), "rnn %s: expected one line naming %s, got '%s'", a, name,
                  err);
    }
    cr_assert_eq(app("rnn", "--seq-len 4 --samples 32 --hidden 4 --quiet --load %T/e.st --eval-only --batch 8", out, err),
                 0, "%s", err);
}

/* --eval-batch: by default the training batch (the evaluation's arenas then within the
 * step's); any other size gives the same accuracy and the loss within 1e-6, in a
 * training run and under --eval-only. */
Test(flags, eval_batch_defaults_to_the_batch_and_keeps_the_results)
{
    const char *base = "--seq-len 20 --samples 200 --hidden 8 --batch 8 --steps 2 --quiet --mem-report";
    char a[512];
    snprintf(a, sizeof a, "%s --save %%T/eb.st", base);
    cr_assert_eq(app("rnn", a, out, err), 0, "%s", err);
    double loss = json_num(out, "test_loss"), acc = json_num(out, "test_acc");
    cr_expect_leq(json_num(out, "mem_eval_arena_mib"), json_num(out, "mem_arena_mib"),
                  "the default evaluation's arenas outgrow the step's: %s", out);
    const char *other[] = {"--eval-batch 3", "--eval-batch 8", "--eval-batch 1000"};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
        for (int only = 0; only < 2; only++) {
            if (only)
                snprintf(a, sizeof a, "--seq-len 20 --samples 200 --hidden 8 --batch 8 --quiet --load %%T/eb.st "
                         "--eval-only %s", other[i]);
            else snprintf(a, sizeof a, "%s %s", base, other[i]);
            cr_assert_eq(app("rnn", a, out, err), 0, "rnn %s: %s", a, err);
            cr_expect_eq(json_num(out, "test_acc"), acc, "rnn %s: accuracy differs", a);
            cr_expect_leq(fabs(json_num(out, "test_loss") - loss), 1e-6 * fmax(1.0, fabs(loss)),
                          "rnn %s: loss %.9g, %.9g at the default", a, json_num(out, "test_loss"), loss);
        }
}

/* --seed takes the whole unsigned 64-bit range, and the JSON line says what was given. */
Test(flags, seed_reported_as_given)
{
    cr_assert_eq(app("rnn", "--seq-len 4 --samples 32 --hidden 4 --steps 1 --quiet --seed 18446744073709551615", out,
                     err), 0, "%s", err);
    cr_expect(strstr(out, "\"seed\": 18446744073709551615,"), "%s", out);
}

/* A single-dash argument is quoted as typed, not as a --flag. */
Test(flags, single_dash_quoted_as_given)
{
    cr_assert_eq(app("lenet", "-x", out, err), 2);
    cr_expect(one_line_error(err) && strstr(err, "unknown flag '-x'") && !strstr(err, "'--x'"), "%s", err);
}

/* Sizes checked before anything is built: a batch beyond the synthetic samples is
 * refused before the test set (as large as the batch) is made, and a sample count whose
 * sets the run cannot hold is refused before any allocation. */
Test(numbers, synthetic_sizes_checked_before_building, .timeout = 20)
{
    double t0 = sp_now();
    cr_assert_eq(app("gru", "--shape S --samples 64 --batch 100000 --quiet", out, err), 2);
    cr_expect(one_line_error(err) && strstr(err, "--batch 100000 exceeds the 64 training samples"), "%s", err);
    cr_expect_lt(sp_now() - t0, 5.0, "the refusal took %.1f s: the sets were built first", sp_now() - t0);
    /* the ceiling (SCANPROP_MAX_FILE_ALLOC here, half the memory at most) bounds every size */
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "SCANPROP_MAX_FILE_ALLOC=1000000000 %s --samples 2147483647 --quiet", tu_bin("rnn"));
    cr_assert_eq(tu_run(cmd, out, OUT, err, OUT), 2);
    cr_expect(one_line_error(err) && strstr(err, "--samples 2147483647") && strstr(err, "GB"), "%s", err);
    snprintf(cmd, sizeof cmd, "SCANPROP_MAX_FILE_ALLOC=1000000000 %s --shape S --samples 100000 --quiet",
             tu_bin("gru"));
    cr_assert_eq(tu_run(cmd, out, OUT, err, OUT), 2);
    cr_expect(one_line_error(err) && strstr(err, "--samples 100000"), "%s", err);
#if !defined(__SANITIZE_ADDRESS__)   /* ASan's shadow memory needs more address space than that */
    /* an address-space limit (ulimit -v 4 GB) is what this run may use: refused before
     * anything is built, naming it, without SCANPROP_MAX_FILE_ALLOC */
    snprintf(cmd, sizeof cmd, "ulimit -v 4000000; %s --samples 2147483647 --quiet", tu_bin("rnn"));
    t0 = sp_now();
    cr_assert_eq(tu_run(cmd, out, OUT, err, OUT), 2);
    cr_expect(one_line_error(err) && strstr(err, "--samples 2147483647") && strstr(err, "ulimit -v"), "%s", err);
    cr_expect_lt(sp_now() - t0, 5.0, "the refusal took %.1f s", sp_now() - t0);
#endif
}

/* IDX images of size×size, n samples, labels i % 10, into dir with the given prefix. */
static void write_idx(const char *dir, const char *prefix, int n, int size)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte", dir, prefix);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    unsigned char h[16] = {0, 0, 8, 3, 0, 0, (unsigned char)(n >> 8), (unsigned char)n, 0, 0, 0, (unsigned char)size,
                           0, 0, 0, (unsigned char)size};
    fwrite(h, 1, 16, f);
    for (int i = 0; i < n * size * size; i++) fputc((i * 37) & 255, f);
    fclose(f);
    snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte", dir, prefix);
    f = fopen(path, "wb");
    cr_assert_not_null(f);
    unsigned char l[8] = {0, 0, 8, 1, 0, 0, (unsigned char)(n >> 8), (unsigned char)n};
    fwrite(l, 1, 8, f);
    for (int i = 0; i < n; i++) fputc(i % 10, f);
    fclose(f);
}

/* Train 28x28 and test 32x32 IDX files: refused before training, naming both files and
 * shapes (it was found at the first evaluation, after training, as a layer's shape). */
Test(numbers, train_test_shape_mismatch_refused_before_training)
{
    char d[4096];
    snprintf(d, sizeof d, "%s/idx", tu_tmpdir());
    cr_assert_eq(mkdir(d, 0755), 0);
    write_idx(d, "train", 16, 28);
    write_idx(d, "t10k", 8, 32);
    cr_assert_eq(app("lenet", "--data %T/idx --data-format idx --batch 8 --steps 1 --quiet", out, err), 2);
    cr_expect(one_line_error(err) && strstr(err, "t10k-images") && strstr(err, "32x32") && strstr(err, "train-images") &&
              strstr(err, "28x28"), "%s", err);
    cr_expect_eq(out[0], 0, "it trained first: %s", out);
}
