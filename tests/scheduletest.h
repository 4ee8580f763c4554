/* scheduletest.h — what the schedule suites (test_schedule.c, test_pipelines.c,
 * test_sim.c, test_segments.c) share: build/schedule run as a program and its JSON read. */
#ifndef SP_SCHEDULETEST_H
#define SP_SCHEDULETEST_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* The last stdout line of build/schedule ARGS (exit 0 expected), and its exit status. */
static inline int program_last(const char *args, char *last, size_t len)
{
    char cmd[1024], line[8192];
    const char *b = getenv("BUILD");
    snprintf(cmd, sizeof cmd, "%s/schedule %s --no-diagram 2>&1", b ? b : "build", args);
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f);
    last[0] = 0;
    while (fgets(line, sizeof line, f)) snprintf(last, len, "%s", line);
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The whole file (NUL-terminated; *n its length). */
static inline char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    char *buf = malloc(1 << 16);
    *n = fread(buf, 1, (1 << 16) - 1, f);
    buf[*n] = 0;
    fclose(f);
    return buf;
}

/* The JSON's "peak_activation_bytes":[...] per rank; returns the ranks read. */
static inline int peak_bytes(const char *json, double *out, int max)
{
    const char *p = strstr(json, "\"peak_activation_bytes\":[");
    cr_assert_not_null(p, "%s", json);
    p += strlen("\"peak_activation_bytes\":[");
    int n = 0;
    while (n < max && *p && *p != ']') {
        char *end;
        out[n++] = strtod(p, &end);
        cr_assert(end != p, "%s", json);
        p = *end == ',' ? end + 1 : end;
    }
    return n;
}

/* The value of "key" in the last stdout line (one JSON line) of build/schedule ARGS, which
 * must exit 0. */
static inline double program_key(const char *args, const char *key)
{
    char cmd[1024], line[8192] = "", last[8192] = "", k[64];
    const char *b = getenv("BUILD");
    snprintf(cmd, sizeof cmd, "%s/schedule %s --no-diagram 2>&1", b ? b : "build", args);
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f);
    while (fgets(line, sizeof line, f)) snprintf(last, sizeof last, "%s", line);
    cr_assert_eq(pclose(f), 0, "%s: %s", cmd, last);
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *l = strstr(last, k);
    cr_assert_not_null(l, "%s: no %s in %s", cmd, key, last);
    return atof(l + strlen(k));
}

static inline double program_latency(const char *args) { return program_key(args, "latency"); }

#endif
