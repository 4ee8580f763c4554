/* flags.c — the flag parser (cli/flags.h): values, ranges, choices, needs,
 * "did you mean", and --help written from the table. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/error.h"
#include "core/guard.h"
#include "cli/flags.h"
#include "cli/summary.h"

static sp_flag *g_flags;        /* the table of the last parse, for sp_flag_given and needs */
static const char *g_app;

static sp_flag *find(sp_flag *set, const char *name, size_t len)
{
    for (sp_flag *f = set; f && f->name; f++)
        if (strlen(f->name) == len && strncmp(f->name, name, len) == 0) return f;
    return NULL;
}

bool sp_flag_given(const char *name)
{
    if (!name) sp_fail("sp_flag_given: argument 'name' is NULL");
    sp_flag *f = find(g_flags, name, strlen(name));
    return f && f->set;
}

static const char *kind_meta(const sp_flag *f)
{
    if (f->meta) return f->meta;
    switch (f->kind) {
    case SP_FLAG_STR: return "S";
    case SP_FLAG_DOUBLE: return "X";
    case SP_FLAG_BOOL: return "";
    default: return "N";
    }
}

/* The current value of a flag as text ("" for an unset string or a bool). */
static const char *value_str(const sp_flag *f, char *buf, size_t len)
{
    buf[0] = 0;
    switch (f->kind) {
    case SP_FLAG_STR: snprintf(buf, len, "%s", *(const char **)f->dst ? *(const char **)f->dst : ""); break;
    case SP_FLAG_INT: snprintf(buf, len, "%d", *(int *)f->dst); break;
    case SP_FLAG_LONG: snprintf(buf, len, "%ld", *(long *)f->dst); break;
    case SP_FLAG_U64: snprintf(buf, len, "%llu", (unsigned long long)*(uint64_t *)f->dst); break;
    case SP_FLAG_DOUBLE: snprintf(buf, len, "%g", *(double *)f->dst); break;
    case SP_FLAG_BOOL: break;
    }
    return buf;
}

/* "a|b|c" contains v as a whole alternative */
static bool in_list(const char *list, const char *v, size_t vlen)
{
    for (const char *p = list; *p;) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n == vlen && strncmp(p, v, n) == 0) return true;
        if (!bar) break;
        p = bar + 1;
    }
    return false;
}

/* "a|b|c" -> "a, b or c" */
static const char *alternatives(const char *list, char *buf, size_t len)
{
    size_t k = 0;
    buf[0] = 0;
    int total = 1;
    for (const char *p = list; *p; p++) total += *p == '|';
    int i = 0;
    for (const char *p = list; *p && k + 8 < len;) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        k += (size_t)snprintf(buf + k, len - k, "%s%.*s", i == 0 ? "" : i == total - 1 ? " or " : ", ", (int)n, p);
        i++;
        if (!bar || k >= len) break;
        p = bar + 1;
    }
    return buf;
}

/* Levenshtein distance, for "did you mean". */
static size_t edit_distance(const char *a, size_t la, const char *b)
{
    size_t lb = strlen(b), row[64];
    if (la >= 63 || lb >= 63) return 99;
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[lb];
}

/* The choice of "a|b|c" (or the alias of `aliases`) closest to v, as "; did you mean X?", or
 * "" if none is close: a typo's distance grows with the word's length (1 up to 4
 * characters, 2 up to 8, else 3), and a prefix of 3 or more characters counts as 1. */
static const char *suggest(const char *v, const char *list, const char *const *aliases, char *buf, size_t len)
{
    size_t vl = strlen(v), bd = 99;
    const char *best = NULL;
    size_t bl = 0;
    for (const char *p = list; p && *p;) {
        size_t n = strcspn(p, "|");
        char word[64];
        if (n < sizeof word) {
            memcpy(word, p, n);
            word[n] = 0;
            size_t d = edit_distance(v, vl, word);
            if (vl >= 3 && strncmp(word, v, vl < n ? vl : n) == 0 && d > 1) d = 1;
            if (d < bd) bd = d, best = p, bl = n;
        }
        p += n;
        if (*p) p++;
    }
    for (const char *const *a = aliases; a && a[0] && a[1]; a += 2) {
        size_t d = edit_distance(v, vl, a[0]);
        if (d < bd) bd = d, best = a[0], bl = strlen(a[0]);
    }
    size_t limit = vl <= 4 ? 1 : vl <= 8 ? 2 : 3;
    buf[0] = 0;
    if (best && bd > 0 && bd <= limit) snprintf(buf, len, "; did you mean %.*s?", (int)bl, best);
    return buf;
}

const char *sp_flag_suggest(const char *value, const char *choices, char *buf, size_t len)
{
    if (!value) sp_fail("sp_flag_suggest: argument 'value' is NULL");
    if (!choices) sp_fail("sp_flag_suggest: argument 'choices' is NULL");
    if (!buf || len == 0) sp_fail("sp_flag_suggest: argument 'buf' is NULL or empty");
    return suggest(value, choices, NULL, buf, len);
}

static void range_of(const sp_flag *f, double *lo, double *hi)
{
    *lo = -INFINITY;
    *hi = INFINITY;
    if (!f->range) return;
    const char *dots = strstr(f->range, "..");
    if (dots != f->range) *lo = strtod(f->range, NULL);
    if (dots && dots[2]) *hi = strtod(dots + 2, NULL);
}

static void out_of_range(const sp_flag *f, const char *v)
{
    double lo, hi;
    range_of(f, &lo, &hi);
    if (isinf(hi)) sp_fail("--%s %s: expected >= %g", f->name, v, lo);
    if (isinf(lo)) sp_fail("--%s %s: expected <= %g", f->name, v, hi);
    sp_fail("--%s %s: expected %g..%g", f->name, v, lo, hi);
}

static void set_value(sp_flag *f, const char *v)
{
    char *end;
    double lo, hi;
    range_of(f, &lo, &hi);
    errno = 0;
    switch (f->kind) {
    case SP_FLAG_STR:
        if (!*v) sp_fail("--%s: empty value", f->name);
        for (const char *const *a = f->aliases; a && a[0] && a[1]; a += 2)   /* the choice it stands for */
            if (strcmp(v, a[0]) == 0) v = a[1];
        if (f->choices && !in_list(f->choices, v, strlen(v))) {
            char alt[512], hint[128];
            sp_fail("--%s %s: expected %s%s", f->name, v, alternatives(f->choices, alt, sizeof alt),
                    suggest(v, f->choices, f->aliases, hint, sizeof hint));
        }
        *(const char **)f->dst = v;
        return;
    case SP_FLAG_INT: {
        long x = strtol(v, &end, 10);
        if (*end || !*v || errno || x < -2147483647L || x > 2147483647L)
            sp_fail("--%s %s: expected an integer", f->name, v);
        if ((double)x < lo || (double)x > hi) out_of_range(f, v);
        *(int *)f->dst = (int)x;
        return;
    }
    case SP_FLAG_LONG: {
        long x = strtol(v, &end, 10);
        if (*end || !*v || errno) sp_fail("--%s %s: expected an integer", f->name, v);
        if ((double)x < lo || (double)x > hi) out_of_range(f, v);
        *(long *)f->dst = x;
        return;
    }
    case SP_FLAG_U64: {
        if (*v == '-') sp_fail("--%s %s: expected a non-negative integer", f->name, v);
        unsigned long long x = strtoull(v, &end, 10);
        if (*end || !*v || errno) sp_fail("--%s %s: expected a non-negative integer", f->name, v);
        if ((double)x < lo || (double)x > hi) out_of_range(f, v);
        *(uint64_t *)f->dst = x;
        return;
    }
    case SP_FLAG_DOUBLE: {
        double x = strtod(v, &end);
        if (*end || !*v || errno || !isfinite(x)) sp_fail("--%s %s: expected a number", f->name, v);
        if (x < lo || x > hi) out_of_range(f, v);
        *(double *)f->dst = x;
        return;
    }
    case SP_FLAG_BOOL: *(bool *)f->dst = true; return;
    }
}

/* The value in full: doubles with 17 digits, a bool with the V of --name=V. */
static const char *value_full(const sp_flag *f, char *buf, size_t len)
{
    if (f->kind == SP_FLAG_DOUBLE) snprintf(buf, len, "%.17g", *(double *)f->dst);
    else if (f->kind == SP_FLAG_BOOL)
        snprintf(buf, len, "%s%s%s", *(bool *)f->dst ? "yes" : "no", f->value && *f->value ? "=" : "",
                 f->value && *f->value ? *f->value : "");
    else value_str(f, buf, len);
    return buf;
}

const char *sp_flag_value_text(const char *name, char *buf, size_t len)
{
    if (!name) sp_fail("sp_flag_value_text: argument 'name' is NULL");
    if (!buf) sp_fail("sp_flag_value_text: argument 'buf' is NULL");
    const sp_flag *f = find(g_flags, name, strlen(name));
    if (!f) {
        buf[0] = 0;
        return buf;
    }
    return value_full(f, buf, len);
}

/* FNV-1a, continued from h */
static uint32_t fnv(uint32_t h, const char *s)
{
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return (h ^ 0xff) * 16777619u;   /* a separator, so "ab"+"c" differs from "a"+"bc" */
}

int sp_flags_digest(sp_flag_digest *out, int cap, const char *skip)
{
    if (cap < 0) sp_fail("sp_flags_digest: argument 'cap' is %d (expected >= 0)", cap);
    if (!out) sp_fail("sp_flags_digest: argument 'out' is NULL");
    int n = 0;
    for (const sp_flag *f = g_flags; f && f->name && n < cap; f++) {
        if (skip && in_list(skip, f->name, strlen(f->name))) continue;
        char buf[4096];
        out[n].name = f->name;
        out[n].hash = fnv(fnv(2166136261u, f->name), value_full(f, buf, sizeof buf));
        n++;
    }
    return n;
}

/* The closest flag of `set` to name[0..len), or NULL if none is close. */
static const sp_flag *closest(const sp_flag *set, const char *name, size_t len)
{
    const sp_flag *best = NULL;
    size_t bd = 99;
    for (const sp_flag *f = set; f && f->name; f++) {
        size_t d = edit_distance(name, len, f->name), fl = strlen(f->name);
        if (len >= 3 && (strncmp(f->name, name, len < fl ? len : fl) == 0)) d = d < 1 ? d : 1;   /* a prefix */
        if (d < bd) bd = d, best = f;
    }
    size_t limit = len <= 4 ? 1 : len <= 8 ? 2 : 3;
    return bd <= limit ? best : NULL;
}

/* dash: what the argument started with ("--", or "-" for a single-dash argument, which
 * the message quotes as given: flags start with --) */
static void unknown_flag(const sp_flag *set, const sp_flag *elsewhere, const char *dash, const char *name,
                         size_t len)
{
    const sp_flag *near = closest(set, name, len);
    char hint[128] = "";
    if (near) snprintf(hint, sizeof hint, "; did you mean --%s?", near->name);
    const sp_flag *other = elsewhere ? find((sp_flag *)elsewhere, name, len) : NULL;
    if (other) sp_fail("%s: --%s does not apply to %s%s (see --help)", g_app, other->name, g_app, hint);
    const char *why = strcmp(dash, "--") != 0 ? " (flags start with --)" : "";
    if (near) sp_fail("%s: unknown flag '%s%.*s'%s%s", g_app, dash, (int)len, name, why, hint);
    sp_fail("%s: unknown flag '%s%.*s'%s (see --help)", g_app, dash, (int)len, name, why);
}

/* Whether one condition of `needs` holds; writes what it asks for into why. */
static bool condition(const char *c, size_t n, char *why, size_t wlen)
{
    bool neg = *c == '!';
    if (neg) c++, n--;
    const char *eq = memchr(c, '=', n);
    size_t nl = eq ? (size_t)(eq - c) : n;
    sp_flag *f = find(g_flags, c, nl);
    if (neg) {
        snprintf(why, wlen, "does not apply with --%.*s", (int)nl, c);
        return !(f && f->set);
    }
    if (!eq) {
        snprintf(why, wlen, "needs --%.*s", (int)nl, c);
        return f && f->set;
    }
    char list[256], alt[512];
    snprintf(list, sizeof list, "%.*s", (int)(n - nl - 1), eq + 1);
    snprintf(why, wlen, "needs --%.*s %s", (int)nl, c, alternatives(list, alt, sizeof alt));
    if (!f || f->kind != SP_FLAG_STR) return false;
    const char *v = *(const char **)f->dst;
    return v && in_list(list, v, strlen(v));
}

static void check_needs(const sp_flag *f)
{
    for (const char *p = f->needs; p && *p;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        char why[600];
        if (!condition(p, n, why, sizeof why)) sp_fail("--%s %s", f->name, why);
        if (!comma) break;
        p = comma + 1;
    }
}

/* "backward=ooo,!list,!svg" -> "needs --backward ooo; not with --list or --svg" */
static const char *needs_text(const char *needs, char *buf, size_t len)
{
    size_t k = 0;
    char neg[8][64];
    int nneg = 0;
    buf[0] = 0;
    for (const char *p = needs; *p && k < len;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (*p == '!' && nneg < 8) {
            snprintf(neg[nneg++], sizeof neg[0], "--%.*s", (int)n - 1, p + 1);
        } else {
            char why[300];
            condition(p, n, why, sizeof why);
            k += (size_t)snprintf(buf + k, len - k, "%s%s", k ? "; " : "", why);
        }
        if (!comma) break;
        p = comma + 1;
    }
    for (int i = 0; i < nneg && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%s", i == 0 ? (k ? "; not with " : "not with ") : i == nneg - 1 ? " or " : ", ",
                              neg[i]);
    return buf;
}

static void usage(const char *app, const char *summary, const sp_flag *set)
{
    printf("usage: %s [flags]\n%s\n", app, summary);
    const char *groups[32];
    int ng = 0;
    for (const sp_flag *f = set; f->name; f++) {
        const char *g = f->group ? f->group : app;
        bool seen = false;
        for (int i = 0; i < ng; i++) seen |= strcmp(groups[i], g) == 0;
        if (!seen && ng < 32) groups[ng++] = g;
    }
    for (int i = 0; i < ng; i++) {
        printf("\n%s:\n", groups[i]);
        for (const sp_flag *f = set; f->name; f++) {
            if (strcmp(f->group ? f->group : app, groups[i]) != 0) continue;
            char left[64], val[128], alt[1024];
            const char *meta = kind_meta(f);
            snprintf(left, sizeof left, "--%s%s%s", f->name, *meta ? " " : "", meta);
            printf("  %-22s %s", left, f->help);
            value_str(f, val, sizeof val);
            if (f->choices && f->kind != SP_FLAG_BOOL) printf("; one of %s", alternatives(f->choices, alt, sizeof alt));
            for (const char *const *a = f->aliases; a && a[0] && a[1]; a += 2) printf("; %s = %s", a[0], a[1]);
            if (f->range) printf("; range %s", f->range);
            if (f->def) printf(" (default %s)", f->def);
            else if (f->kind != SP_FLAG_BOOL && val[0]) printf(" (default %s)", val);
            if (f->needs) printf(" [%s]", needs_text(f->needs, alt, sizeof alt));
            printf("\n");
        }
    }
    printf("\n  %-22s this text\n", "--help");
}

/* "--plan=x: expected --plan, --plan=summary or --plan=full" */
static void bool_value_refused(const sp_flag *f, const char *v)
{
    char list[512], alt[1024];
    size_t k = (size_t)snprintf(list, sizeof list, "--%s", f->name);
    for (const char *p = f->choices; *p && k < sizeof list;) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        k += (size_t)snprintf(list + k, sizeof list - k, "|--%s=%.*s", f->name, (int)n, p);
        if (!bar) break;
        p = bar + 1;
    }
    char hint[128];
    sp_fail("--%s=%s: expected %s%s", f->name, v, alternatives(list, alt, sizeof alt),
            suggest(v, f->choices, NULL, hint, sizeof hint));
}

static bool g_output_check;

static void check_output_at_exit(void) { sp_stdout_check(); }

static int g_saved_stderr = -1;

bool sp_flags_quiet_rank(void)
{
    const char *np = getenv("OMPI_COMM_WORLD_SIZE"), *rank = getenv("OMPI_COMM_WORLD_RANK");
    return np && rank && atoi(np) > 1 && atoi(rank) != 0;
}

/* A quiet rank that exits on a refusal gives rank 0 time to print it: mpirun ends the
 * job at the first exit, and rank 0 refuses the same command a moment later. */
static void quiet_exit(void)
{
    if (g_saved_stderr >= 0) usleep(500 * 1000);
}

void sp_flags_quiet_begin(void)
{
    static bool registered;
    if (g_saved_stderr >= 0 || !sp_flags_quiet_rank()) return;
    if (!registered) {
        registered = true;
        atexit(quiet_exit);
    }
    fflush(stderr);
    int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null < 0) return;
    g_saved_stderr = dup(2);
    if (g_saved_stderr >= 0) dup2(null, 2);
    close(null);
}

void sp_flags_quiet_end(void)
{
    if (g_saved_stderr < 0) return;
    fflush(stderr);
    dup2(g_saved_stderr, 2);
    close(g_saved_stderr);
    g_saved_stderr = -1;
}

static void parse(int argc, char **argv, const char *app, const char *summary, sp_flag *set, const sp_flag *elsewhere)
{
    sp_guard_off();   /* an app: a refused library call is its one line and exit 2 */
    g_flags = set;
    g_app = app;
    if (!g_output_check) {
        g_output_check = true;
        atexit(check_output_at_exit);
    }
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            if (!sp_flags_quiet_rank()) usage(app, summary, set);   /* under mpirun: rank 0's */
            exit(0);
        }
    for (sp_flag *f = set; f->name; f++) f->set = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) {
            if (a[0] == '-' && a[1]) unknown_flag(set, elsewhere, "-", a + 1, strlen(a + 1));
            sp_fail("%s: unexpected argument '%s' (see --help)", app, a);
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        sp_flag *f = find(set, name, len);
        if (!f) unknown_flag(set, elsewhere, "--", name, len);
        if (f->set) sp_fail("%s: --%s given twice (give each flag once)", app, f->name);
        f->set = true;
        const char *v = eq ? eq + 1 : NULL;
        if (f->kind == SP_FLAG_BOOL) {
            if (v && f->choices) {   /* --plan=full: one of the flag's values */
                if (!in_list(f->choices, v, strlen(v))) bool_value_refused(f, v);
                if (f->value) *f->value = v;
                v = NULL;
            }
            if (v) sp_fail("--%s takes no value", f->name);
            set_value(f, "");
            continue;
        }
        if (!v) {
            if (i + 1 >= argc) sp_fail("--%s: missing value", f->name);
            v = argv[++i];
        }
        set_value(f, v);
    }
    for (const sp_flag *f = set; f->name; f++)
        if (f->set) check_needs(f);
}

void sp_flags_parse(int argc, char **argv, const char *app, const char *summary, sp_flag *flags)
{
    if (argc < 0) sp_fail("sp_flags_parse: argument 'argc' is %d (expected >= 0)", argc);
    if (!argv) sp_fail("sp_flags_parse: argument 'argv' is NULL");
    if (!app) sp_fail("sp_flags_parse: argument 'app' is NULL");
    if (!summary) sp_fail("sp_flags_parse: argument 'summary' is NULL");
    if (!flags) sp_fail("sp_flags_parse: argument 'flags' is NULL");
    sp_flags_quiet_begin();
    parse(argc, argv, app, summary, flags, NULL);
    sp_flags_quiet_end();
}

void sp_flags_parse_among(int argc, char **argv, const char *app, const char *summary, sp_flag *flags,
                          const sp_flag *others)
{
    if (argc < 0) sp_fail("sp_flags_parse_among: argument 'argc' is %d (expected >= 0)", argc);
    if (!argv) sp_fail("sp_flags_parse_among: argument 'argv' is NULL");
    if (!app) sp_fail("sp_flags_parse_among: argument 'app' is NULL");
    if (!summary) sp_fail("sp_flags_parse_among: argument 'summary' is NULL");
    if (!flags) sp_fail("sp_flags_parse_among: argument 'flags' is NULL");
    sp_flags_quiet_begin();
    parse(argc, argv, app, summary, flags, others);
    sp_flags_quiet_end();
}

