/* test_fuzz.c — the fuzzers' corpus as regression tests: every file of
 * tests/fuzz/corpus/<target>/ goes through the same code as the fuzzer
 * (tests/fuzz/targets.c) in a child process, which must end normally: the input opened
 * (exit 0), or the reader refused it with an error status and a one-line message
 * (exit 3). An exit from inside a reader, a signal, a sanitizer report (make
 * test-asan) or any other status fails. Files named crash-* are inputs that once
 * crashed a reader (docs/RELIABILITY.md) and must now be refused. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include "tests/fuzz/targets.c"

#define CORPUS "tests/fuzz/corpus"

/* Runs target on the file in a child; its exit status (or -signal), stderr into err. */
static int run_one(const fz_target *t, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *data = malloc(n > 0 ? (size_t)n : 1);
    cr_assert_eq(fread(data, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    fz_scratch();   /* made here, so the children share it and it is removed once */
    int pipefd[2];
    cr_assert_eq(pipe(pipefd), 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pipefd[1], 2);
        close(pipefd[0]);
        int opened = t->run(data, (size_t)n);
        if (!opened) fprintf(stderr, "%s\n", sp_last_error());
        fflush(NULL);
        _exit(opened ? 0 : 3);
    }
    close(pipefd[1]);
    size_t got = 0;
    ssize_t r;
    while ((r = read(pipefd[0], err + got, errlen - 1 - got)) > 0) got += (size_t)r;
    err[got] = 0;
    close(pipefd[0]);
    int st;
    waitpid(pid, &st, 0);
    free(data);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
}

static void run_corpus(const char *name)
{
    const fz_target *t = NULL;
    for (size_t i = 0; i < sizeof fz_targets / sizeof fz_targets[0]; i++)
        if (strcmp(fz_targets[i].name, name) == 0) t = &fz_targets[i];
    cr_assert_not_null(t);
    char dir[256], path[512], err[4096];
    snprintf(dir, sizeof dir, "%s/%s", CORPUS, name);
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "no corpus %s (run from the repository root)", dir);
    int files = 0, opened = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        int st = run_one(t, path, err, sizeof err);
        files++;
        opened += st == 0;
        cr_expect(st == 0 || st == 3, "%s: the reader did not return (status %d): %s", path, st, err);
        if (strncmp(e->d_name, "crash-", 6) == 0)
            cr_expect(st == 3, "%s: a once-crashing input was not refused (status %d)", path, st);
        if (st == 3)
            cr_expect(strlen(err) > 1 && strchr(err, '\n') == err + strlen(err) - 1,
                      "%s: a refusal is one line, got '%s'", path, err);
    }
    closedir(d);
    fz_cleanup();
    fz_dir[0] = 0;
    cr_assert_gt(files, 0, "empty corpus %s", dir);
    cr_assert_gt(opened, 0, "%s: no valid seed opened", dir);
    cr_assert_lt(opened, files, "%s: no broken seed was refused", dir);
}

Test(fuzz_corpus, safetensors) { run_corpus("safetensors"); }
Test(fuzz_corpus, idx) { run_corpus("idx"); }
Test(fuzz_corpus, cifar) { run_corpus("cifar"); }
Test(fuzz_corpus, seqset) { run_corpus("seqset"); }
Test(fuzz_corpus, image) { run_corpus("image"); }
Test(fuzz_corpus, costs) { run_corpus("costs"); }
Test(fuzz_corpus, state) { run_corpus("state"); }
Test(fuzz_corpus, actions) { run_corpus("actions"); }

/* The readers added to the fuzzers (issue 25): what each seed must do, and that a bad
 * costs CSV comes back as a status (the reader's checks are sp_fail inside). */
Test(fuzz_corpus, costs_and_state_seeds)
{
    static const struct { const char *target, *file; int status; const char *says; } cases[] = {
        {"costs", "valid", 0, NULL},
        {"costs", "valid-every-column", 0, NULL},
        {"costs", "no-stages", 3, "no stages"},
        {"costs", "inf-total", 3, "fwd 1e+308: expected a finite time in 0..1e+12"},
        {"costs", "long-line", 3, "line longer than"},
        {"costs", "not-a-number", 3, "'three' is not a number"},
        {"state", "valid-sgd", 0, NULL},
        {"state", "valid-adam", 0, NULL},
        {"state", "other-seed", 3, "seed"},
        {"state", "transposed-weight", 3, "fc1.weight"},
        {"state", "truncated", 3, "state.st"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const fz_target *t = NULL;
        for (size_t k = 0; k < sizeof fz_targets / sizeof fz_targets[0]; k++)
            if (strcmp(fz_targets[k].name, cases[i].target) == 0) t = &fz_targets[k];
        cr_assert_not_null(t);
        char path[256], err[4096];
        snprintf(path, sizeof path, CORPUS "/%s/%s", cases[i].target, cases[i].file);
        int st = run_one(t, path, err, sizeof err);
        cr_expect_eq(st, cases[i].status, "%s: status %d: %s", path, st, err);
        if (cases[i].says) cr_expect(strstr(err, cases[i].says), "%s: '%s' does not say '%s'", path, err, cases[i].says);
    }
    fz_cleanup();
    fz_dir[0] = 0;
}

/* Inputs fuzz_image found that broke stb_image 2.27 (Debian 12's libstb), now refused
 * before it reads them (data/imagefolder.c), and what the refusal says. */
Test(fuzz_corpus, stb_image_crashes_refused_with_the_reason)
{
    static const struct { const char *file, *says; } cases[] = {
        {"crash-jpeg-dht-over-256-codes.jpg", "more than 256 codes"},    /* writes past the table */
        {"crash-jpeg-dht-after-fill-bytes.jpg", "more than 256 codes"},  /* FF fill before SOI  */
        {"crash-jpeg-dht-past-segment.jpg", "more than 256 codes"},      /* table past the segment */
        {"crash-pnm-number-overflow.ppm", "more than 9 digits"},         /* int overflow (UB)   */
        {"crash-pnm-16bit-overflow.pgm", "16-bit samples"},              /* heap read overflow  */
        {"crash-pnm-claims-2414152-rows.pgm", "claims more samples"},    /* 21 bytes, 2.4 Mpixel */
        {"crash-png-idat-length-past-end.png", "claims more bytes than the file holds"},   /* 68 bytes, 1.1 GB */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[256], err[4096];
        snprintf(path, sizeof path, CORPUS "/image/%s", cases[i].file);
        int st = run_one(&fz_targets[4], path, err, sizeof err);
        cr_expect_eq(st, 3, "%s: status %d: %s", cases[i].file, st, err);
        cr_expect(strstr(err, cases[i].says), "%s: '%s' does not say '%s'", cases[i].file, err, cases[i].says);
    }
    fz_cleanup();
    fz_dir[0] = 0;
}
