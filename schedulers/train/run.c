/* common.c — flag parsing and the JSON summary line shared by the apps. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "schedulers/train/run.h"
#ifdef SP_HAVE_CUDA
#include "core/kernels/cuda.h"
#endif
#include "core/device.h"
#include "core/io/fileio.h"
#include "core/io/safetensors.h"
#include "core/error.h"
#include "optim/optim.h"
#include "schedulers/parallel/exec.h"

void sp_app_defaults(sp_app_opts *o)
{
    *o = (sp_app_opts){
        .optim = "sgd", .backward = "linear", .lr_schedule = "constant", .epochs = 1, .batch = 64,
        .threads = 2, .lr = 0.01, .momentum = 0.9f, .seed = 1, .scan_levels = -1, .order = "ooo",
        .k = 0, .scan_levels_arg = "full", .device = "cpu", .partition = "cost", .bucket_mb = 25, .comm_timeout = 60,
        .prune_scope = "global",
    };
}

#define G_TRAIN "training"
#define G_LOOP "epochs and logs (the epoch loop)"
#define G_CKPT "checkpoints (safetensors)"
#define G_DATA "data"
#define G_ENGINE "backward engine"
#define G_BPPSA "bppsa engine (with --backward bppsa)"
#define G_OOO "ooo engine (with --backward ooo)"
#define G_PAR "parallel training (run under mpirun -np W)"

/* The common flags of the training apps; `scope` says which apps take each one. */
static int common_flags(sp_app_opts *o, sp_flag *f, int cap)
{
    sp_flag list[] = {
        {"data", SP_FLAG_STR, &o->data, "dataset directory (fashion-mnist: Debian's dataset-fashion-mnist if not given)",
         .group = G_DATA, .meta = "DIR", .scope = SP_SCOPE_IMAGES},
        {"data-format", SP_FLAG_STR, &o->data_format, "dataset format; mnist, cifar10 and folder need --data",
         .group = G_DATA, .choices = "fashion-mnist|mnist|idx|cifar10|folder", .scope = SP_SCOPE_IMAGES},
        {"steps", SP_FLAG_LONG, &o->steps, "stop after N steps; with --epochs, whichever limit comes first; "
         "alone, as many epochs as it needs (0 = whole epochs)", .group = G_TRAIN, .range = "0..1000000000",
         .scope = SP_SCOPE_RUN},
        {"batch", SP_FLAG_INT, &o->batch, "batch size (at most the training samples)", .group = G_TRAIN,
         .range = "1..", .scope = SP_SCOPE_RUN},
        {"lr", SP_FLAG_DOUBLE, &o->lr, "learning rate (> 0)", .group = G_TRAIN, .meta = "X", .scope = SP_SCOPE_RUN},
        {"optim", SP_FLAG_STR, &o->optim, "optimizer", .group = G_TRAIN, .choices = "sgd|adam|adamw",
         .scope = SP_SCOPE_RUN},
        {"momentum", SP_FLAG_DOUBLE, &o->momentum, "SGD momentum, in [0, 1)", .group = G_TRAIN, .meta = "X",
         .needs = "optim=sgd", .scope = SP_SCOPE_RUN},
        {"weight-decay", SP_FLAG_DOUBLE, &o->weight_decay, "L2 weight decay (decoupled with adamw)",
         .group = G_TRAIN, .meta = "X", .range = "0..", .scope = SP_SCOPE_RUN},
        {"seed", SP_FLAG_U64, &o->seed, "random seed (init, shuffling, synthetic data)", .group = G_TRAIN,
         .scope = SP_SCOPE_RUN},
        {"threads", SP_FLAG_INT, &o->threads, "threads for everything, OpenBLAS included", .group = G_TRAIN,
         .range = "1..64", .scope = SP_SCOPE_RUN},
        {"quiet", SP_FLAG_BOOL, &o->quiet, "no progress output on stderr", .group = G_TRAIN, .scope = SP_SCOPE_RUN},
        {"device", SP_FLAG_STR, &o->device, "where the step runs; cuda needs a make CUDA=1 build, a GPU and "
         "--backward linear or ooo (docs/CUDA.md)", .group = G_TRAIN, .choices = "cpu|cuda", .scope = SP_SCOPE_RUN},
        {"epochs", SP_FLAG_INT, &o->epochs, "training epochs; with --steps, whichever limit comes first",
         .group = G_LOOP, .range = "1..", .scope = SP_SCOPE_LOOP},
        {"lr-schedule", SP_FLAG_STR, &o->lr_schedule, "per-epoch learning rate: constant | step:SIZE:GAMMA | "
         "cosine:TMAX[:MIN]", .group = G_LOOP, .meta = "SPEC", .scope = SP_SCOPE_LOOP},
        {"no-shuffle", SP_FLAG_BOOL, &o->no_shuffle, "keep the dataset order", .group = G_LOOP,
         .scope = SP_SCOPE_LOOP},
        {"eval-every", SP_FLAG_INT, &o->eval_every, "evaluate on the test set every N steps (0 = after each epoch)",
         .group = G_LOOP, .range = "0..", .scope = SP_SCOPE_LOOP},
        {"log", SP_FLAG_STR, &o->log, "CSV log: step,epoch,loss,lr,seconds,test_loss,test_acc (a row per step; a row per evaluation, loss empty)", .group = G_LOOP,
         .meta = "FILE", .scope = SP_SCOPE_LOOP},
        {"load", SP_FLAG_STR, &o->load, "initial weights (instead of the seeded init)", .group = G_CKPT,
         .meta = "FILE", .scope = SP_SCOPE_CKPT},
        {"save", SP_FLAG_STR, &o->save, "save the final weights (atomic replace)", .group = G_CKPT, .meta = "FILE",
         .scope = SP_SCOPE_CKPT},
        {"eval-only", SP_FLAG_BOOL, &o->eval_only, "evaluate the --load weights on the test set (eval mode), no "
         "training", .group = G_CKPT, .needs = "load,!save", .scope = SP_SCOPE_CKPT},
        {"save-every", SP_FLAG_LONG, &o->save_every, "also write a resumable checkpoint to --save every N steps "
         "(0 = off)", .group = G_CKPT, .meta = "N", .range = "0..", .needs = "save,!parallel", .scope = SP_SCOPE_CKPT},
        {"resume", SP_FLAG_STR, &o->resume, "continue the run of a --save-every checkpoint, bitwise as if "
         "uninterrupted", .group = G_CKPT, .meta = "FILE", .needs = "!load,!parallel", .scope = SP_SCOPE_CKPT},
        {"prune", SP_FLAG_DOUBLE, &o->prune, "magnitude-prune this fraction of the conv/linear weights after "
         "--load or init, then retrain with the masks kept (docs/BPPSA.md)", .group = G_CKPT, .meta = "X",
         .range = "0..", .needs = "!save-every,!resume,!parallel", .scope = SP_SCOPE_CKPT},
        {"prune-scope", SP_FLAG_STR, &o->prune_scope, "rank weights per layer or over all layers together",
         .group = G_CKPT, .choices = "layer|global", .needs = "prune", .scope = SP_SCOPE_CKPT},
        {"backward", SP_FLAG_STR, &o->backward, "backward engine", .group = G_ENGINE,
         .choices = "linear|bppsa|ooo", .scope = SP_SCOPE_ENGINE},
        {"scan-levels", SP_FLAG_STR, &o->scan_levels_arg, "up-sweep levels: 0 (= linear BP) .. the model's "
         "full depth, full, or auto (the plan's cost model picks; docs/BPPSA.md)", .group = G_BPPSA,
         .meta = "N|full|auto", .needs = "backward=bppsa", .scope = SP_SCOPE_ENGINE},
        {"plan", SP_FLAG_BOOL, &o->plan, "print the scan plan's summary and exit without training "
         "(--plan=full: every step; with --parallel scan: the cross-rank levels) [needs --backward bppsa or "
         "--parallel scan]", .group = G_BPPSA, .scope = SP_SCOPE_ENGINE},
        {"plan-svg", SP_FLAG_STR, &o->plan_svg, "draw the scan tree of a short chain to FILE and exit",
         .group = G_BPPSA, .meta = "FILE", .needs = "backward=bppsa", .scope = SP_SCOPE_ENGINE},
        {"order", SP_FLAG_STR, &o->order, "task order of the two lanes", .group = G_OOO,
         .choices = "conventional|ooo|reverse-first-k|list", .needs = "backward=ooo", .scope = SP_SCOPE_ENGINE},
        {"k", SP_FLAG_INT, &o->k, "layers in reverse-first order (0 = half the parameterised layers)",
         .group = G_OOO, .range = "0..", .needs = "backward=ooo,order=reverse-first-k", .scope = SP_SCOPE_ENGINE},
        {"mem-cap", SP_FLAG_LONG, &o->mem_cap, "memory cap of the backward pass in bytes (0 = none)",
         .group = G_OOO, .meta = "BYTES", .range = "0..", .needs = "backward=ooo", .scope = SP_SCOPE_ENGINE},
        {"trace", SP_FLAG_STR, &o->trace, "write a Chrome/Perfetto trace JSON (with --backward ooo or --parallel)",
         .group = G_OOO, .meta = "FILE", .scope = SP_SCOPE_ENGINE},
        {"cuda-graph", SP_FLAG_BOOL, &o->cuda_graph, "capture the steady-state training step (forward, "
         "backward, updates) as a CUDA Graph once per shape, replay it each step (docs/CUDA.md)", .group = G_OOO, .needs = "backward=ooo,device=cuda,!trace",
         .scope = SP_SCOPE_ENGINE},
        {"parallel", SP_FLAG_STR, &o->parallel, "run the master schedule on the MPI ranks", .group = G_PAR,
         .choices = sp_exec_scheme_names(), .needs = "backward=linear|ooo",
         .scope = SP_SCOPE_RUN},
        {"microbatches", SP_FLAG_INT, &o->microbatches, "micro-batches B per step (0 = W, pipelines 2W)",
         .group = G_PAR, .range = "0..", .needs = "parallel", .scope = SP_SCOPE_RUN},
        {"groups", SP_FLAG_INT, &o->groups, "groups G of lpp/fslpp (W = G*R; 0 = 1)", .group = G_PAR,
         .range = "0..", .needs = "parallel=lpp|fslpp", .scope = SP_SCOPE_RUN},
        {"partition", SP_FLAG_STR, &o->partition, "pipeline stages: by measured cost, or LayerPipe's Algorithm 1",
         .group = G_PAR, .choices = "cost|layerpipe", .needs = "parallel", .scope = SP_SCOPE_RUN},
        {"bucket-mb", SP_FLAG_DOUBLE, &o->bucket_mb, "gradient bucket size in MB (as PyTorch DDP)", .group = G_PAR,
         .meta = "X", .range = "0..", .needs = "parallel", .scope = SP_SCOPE_RUN},
        {"comm-timeout", SP_FLAG_DOUBLE, &o->comm_timeout, "seconds a rank waits for a peer before the job stops",
         .group = G_PAR, .meta = "X", .range = "0.001..", .needs = "parallel", .scope = SP_SCOPE_RUN},
        {"costs", SP_FLAG_STR, &o->costs, "stage costs CSV (as --costs-out writes) instead of measuring",
         .group = G_PAR, .meta = "FILE", .needs = "parallel", .scope = SP_SCOPE_RUN},
        {"costs-out", SP_FLAG_STR, &o->costs_out, "write the stage costs this run measured (for build/schedule --profile)",
         .group = G_PAR, .meta = "FILE", .needs = "parallel", .scope = SP_SCOPE_RUN},
        {"exec-order", SP_FLAG_STR, &o->exec_order, "write each rank's executed job order", .group = G_PAR,
         .meta = "FILE", .needs = "parallel", .scope = SP_SCOPE_RUN},
        {0},
    };
    int n = (int)(sizeof list / sizeof list[0]);
    if (n > cap) sp_fail("internal: too many common flags");
    memcpy(f, list, sizeof list);
    return n - 1;
}

/* ---- the flag parser ------------------------------------------------------------------ */

static sp_flag *g_flags;        /* the table of the last parse, for sp_flag_given and needs */
static bool g_plan_full;        /* --plan=full was given */
static const char *g_app;

static sp_flag *find(sp_flag *set, const char *name, size_t len)
{
    for (sp_flag *f = set; f && f->name; f++)
        if (strlen(f->name) == len && strncmp(f->name, name, len) == 0) return f;
    return NULL;
}

bool sp_flag_given(const char *name)
{
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
        if (f->choices && !in_list(f->choices, v, strlen(v))) {
            char alt[512];
            sp_fail("--%s %s: expected %s", f->name, v, alternatives(f->choices, alt, sizeof alt));
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

static void unknown_flag(const sp_flag *set, const sp_flag *elsewhere, const char *name, size_t len)
{
    const sp_flag *near = closest(set, name, len);
    char hint[128] = "";
    if (near) snprintf(hint, sizeof hint, "; did you mean --%s?", near->name);
    const sp_flag *other = elsewhere ? find((sp_flag *)elsewhere, name, len) : NULL;
    if (other) sp_fail("%s: --%s does not apply to %s%s (see --help)", g_app, other->name, g_app, hint);
    if (near) sp_fail("%s: unknown flag '--%.*s'%s", g_app, (int)len, name, hint);
    sp_fail("%s: unknown flag '--%.*s' (see --help)", g_app, (int)len, name);
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
            if (f->choices) printf("; one of %s", alternatives(f->choices, alt, sizeof alt));
            if (f->range) printf("; range %s", f->range);
            if (f->def) printf(" (default %s)", f->def);
            else if (f->kind != SP_FLAG_BOOL && val[0]) printf(" (default %s)", val);
            if (f->needs) printf(" [%s]", needs_text(f->needs, alt, sizeof alt));
            printf("\n");
        }
    }
    printf("\n  %-22s this text\n", "--help");
}

static bool g_output_check;

static void check_output_at_exit(void) { sp_app_check_output(); }

static void parse(int argc, char **argv, const char *app, const char *summary, sp_flag *set, const sp_flag *elsewhere)
{
    g_flags = set;
    g_app = app;
    if (!g_output_check) {
        g_output_check = true;
        atexit(check_output_at_exit);
    }
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(app, summary, set);
            exit(0);
        }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) {
            if (a[0] == '-' && a[1]) unknown_flag(set, elsewhere, a + 1, strlen(a + 1));
            sp_fail("%s: unexpected argument '%s' (see --help)", app, a);
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        sp_flag *f = find(set, name, len);
        if (!f) unknown_flag(set, elsewhere, name, len);
        f->set = true;   /* given twice: the last value counts */
        const char *v = eq ? eq + 1 : NULL;
        if (f->kind == SP_FLAG_BOOL) {
            if (v && strcmp(f->name, "plan") == 0) {   /* --plan=full | --plan=summary */
                if (strcmp(v, "full") != 0 && strcmp(v, "summary") != 0)
                    sp_fail("--plan=%s: expected --plan, --plan=summary or --plan=full", v);
                g_plan_full = strcmp(v, "full") == 0;
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
    parse(argc, argv, app, summary, flags, NULL);
}

static void check_ranges(sp_app_opts *o)
{
    if (!(o->lr > 0)) sp_fail("--lr %g: expected > 0", o->lr);
    if (!(o->prune >= 0 && o->prune < 1)) sp_fail("--prune %g: expected a fraction in [0, 1)", o->prune);
    if (o->momentum < 0 || o->momentum >= 1) sp_fail("--momentum %g: expected in [0, 1)", o->momentum);
    if (sp_flag_given("lr-schedule")) sp_lr_parse(o->lr_schedule, o->lr);   /* fail before any data is read */
    const char *fmt = o->data_format ? o->data_format : "fashion-mnist";
    if (!o->data && sp_flag_given("data-format") && strcmp(fmt, "fashion-mnist") != 0)
        sp_fail("--data-format %s needs --data DIR (only fashion-mnist has a default directory)", fmt);
    o->plan_full = g_plan_full;
    if (strcmp(o->scan_levels_arg, "full") == 0) {
        o->scan_levels = SP_SCAN_LEVELS_FULL;
    } else if (strcmp(o->scan_levels_arg, "auto") == 0) {
        o->scan_levels = SP_SCAN_LEVELS_AUTO;
    } else {
        char *end;
        errno = 0;
        long x = strtol(o->scan_levels_arg, &end, 10);
        if (!*o->scan_levels_arg || *end || errno || x < 0 || x > 1000000)
            sp_fail("--scan-levels %s: expected 0 (linear BP) .. the model's full depth, full or auto",
                    o->scan_levels_arg);
        o->scan_levels = (int)x;
    }
    if (o->plan && strcmp(o->backward, "bppsa") != 0 && !(o->parallel && strcmp(o->parallel, "scan") == 0))
        sp_fail("--plan needs --backward bppsa or --parallel scan");
    if (o->trace && strcmp(o->backward, "ooo") != 0 && !o->parallel)
        sp_fail("--trace needs --backward ooo or --parallel");
    /* checkpoint files refused before any data is read or any step is run */
    if (o->load) sp_st_close(sp_check_ptr(sp_st_open(o->load)));
    if (o->save) sp_check(sp_check_save_target(o->save));
    /* --steps alone runs as many epochs as it needs; with --epochs, whichever comes first */
    if (o->steps > 0 && !sp_flag_given("epochs")) o->epochs = 0;
}

void sp_app_parse(int argc, char **argv, const char *app, const char *summary, sp_app_opts *o, unsigned scopes,
                  sp_flag *extra)
{
    static sp_flag common[64], set[128];
    int nc = common_flags(o, common, 64), n = 0;
    for (const sp_flag *f = extra; f && f->name; f++) {
        if (n + 1 >= 128) sp_fail("internal: too many flags");
        set[n++] = *f;
    }
    for (int i = 0; i < nc; i++)
        if (!common[i].scope || (common[i].scope & scopes)) {
            if (n + 1 >= 128) sp_fail("internal: too many flags");
            set[n++] = common[i];
        }
    set[n] = (sp_flag){0};
    parse(argc, argv, app, summary, set, common);
    for (int i = 0; i < n; i++)   /* the app's table learns which of its flags were given */
        for (sp_flag *f = extra; f && f->name; f++)
            if (strcmp(f->name, set[i].name) == 0) f->set = set[i].set;
    check_ranges(o);
}

/* ---- output ------------------------------------------------------------------------- */

void sp_app_check_output(void)
{
    errno = 0;
    bool bad = fflush(stdout) != 0;
    int e = errno;
    if (!bad && !ferror(stdout)) return;
    fprintf(stderr, "scanprop: stdout: write failed: %s\n", bad && e ? strerror(e) : "an earlier write failed");
    _exit(SP_EXIT_USAGE);
}

void sp_app_close_output(FILE *f, const char *what)
{
    errno = 0;
    bool bad = ferror(f) != 0;
    int e = errno;
    if (fclose(f) != 0) bad = true, e = errno;
    if (bad) sp_fail("%s: write failed: %s", what, e ? strerror(e) : "an earlier write failed");
}

/* ---- JSON ---------------------------------------------------------------------------- */

static void put(sp_json *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sp_json *j, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(j->buf + j->len, sizeof j->buf - j->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof j->buf - j->len) sp_fail("internal: JSON summary too long");
    j->len += (size_t)n;
}

static void key(sp_json *j, const char *k)
{
    put(j, "%s\"%s\": ", j->first ? "" : ", ", k);
    j->first = false;
}

void sp_json_begin(sp_json *j)
{
    j->len = 0;
    j->first = true;
    put(j, "{");
}

void sp_json_str(sp_json *j, const char *k, const char *v)
{
    key(j, k);
    put(j, "\"");
    for (const char *c = v ? v : ""; *c; c++) {
        if (*c == '"' || *c == '\\') put(j, "\\%c", *c);
        else if ((unsigned char)*c < 0x20) put(j, "\\u%04x", *c);
        else put(j, "%c", *c);
    }
    put(j, "\"");
}

void sp_json_num(sp_json *j, const char *k, double v)
{
    key(j, k);
    if (isfinite(v)) put(j, "%.9g", v);
    else put(j, "null");
}

void sp_json_int(sp_json *j, const char *k, long v)
{
    key(j, k);
    put(j, "%ld", v);
}

void sp_json_raw(sp_json *j, const char *k, const char *raw)
{
    key(j, k);
    put(j, "%s", raw);
}

void sp_json_end_print(sp_json *j)
{
    put(j, "}");
    printf("%s\n", j->buf);
    sp_app_check_output();
}

/* ---- datasets of the image apps ----------------------------------------------------- */

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"

/* The datasets of the image apps: fashion-mnist / mnist (IDX), cifar10, folder. */
void sp_app_open_images(const sp_app_opts *o, int pad_to, sp_dataset **train, sp_dataset **test)
{
    const char *fmt = o->data_format ? o->data_format : "fashion-mnist";
    if (!o->data && strcmp(fmt, "fashion-mnist") != 0)
        sp_fail("--data-format %s needs --data DIR (only fashion-mnist has a default directory)", fmt);
    if (strcmp(fmt, "fashion-mnist") == 0 || strcmp(fmt, "mnist") == 0 || strcmp(fmt, "idx") == 0) {
        const char *dir = o->data ? o->data : FMNIST_DIR;
        *train = sp_check_ptr(sp_fashion_mnist(dir, true, pad_to));
        *test = sp_check_ptr(sp_fashion_mnist(dir, false, pad_to));
    } else if (strcmp(fmt, "cifar10") == 0) {
        if (!o->data) sp_fail("--data-format cifar10 needs --data DIR (the cifar-10-batches-bin directory)");
        *train = sp_check_ptr(sp_cifar10(o->data, true));
        *test = sp_check_ptr(sp_cifar10(o->data, false));
    } else if (strcmp(fmt, "folder") == 0) {
        if (!o->data) sp_fail("--data-format folder needs --data DIR (DIR/train/<class>/*, DIR/test/<class>/*)");
        char tr[4096], te[4096];
        snprintf(tr, sizeof tr, "%s/train", o->data);
        snprintf(te, sizeof te, "%s/test", o->data);
        *train = sp_check_ptr(sp_image_folder(tr, pad_to ? pad_to : 28, 1));
        *test = sp_check_ptr(sp_image_folder(te, pad_to ? pad_to : 28, 1));
        sp_check(sp_image_folder_match_classes(*test, *train));   /* test labels by train's class names */
    } else {
        sp_fail("--data-format %s: unknown (expected fashion-mnist | mnist | cifar10 | folder)", fmt);
    }
}

/* ---- the training app runner ---------------------------------------------------------- */
#include "core/parallel.h"
#include "core/io/safetensors.h"
#include "core/comm/comm.h"
#include "optim/prune.h"
#include "schedulers/backward/engines.h"
#include "schedulers/parallel/exec.h"
#include "schedulers/backward/ooo.h"
#include "schedulers/backward/scan.h"

/* U_i of the ooo engine: the optimizer step of one layer's parameters. */
static void update_layer(void *ctx, sp_layer *l) { sp_optim_step_params(ctx, l->params, l->nparams); }

sp_engine_opts sp_app_engine_opts(const sp_app_opts *o)
{
    return (sp_engine_opts){.scan_levels = o->scan_levels,
                            .order = o->order,
                            .k = o->k,
                            .mem_cap = (size_t)o->mem_cap,
                            .trace_path = o->trace,
                            .plan = o->plan,
                            .plan_full = o->plan_full,
                            .plan_svg = o->plan_svg};
}

/* --plan / --plan-svg: one forward and one bppsa backward on the first batch print the
 * plan (and draw it), then the JSON line carries the plan's figures. Nothing trains. */
void sp_app_plan_only(const char *app, const sp_app_opts *o, sp_model *m, const sp_tensor *x, const int *y)
{
    sp_engine_opts eo = sp_app_engine_opts(o);
    eo.plan = o->plan || !o->plan_svg;
    eo.plan_only = true;
    sp_engine *e = sp_engine_create("bppsa", &eo);
    sp_tape t;
    sp_tape_init(&t);
    sp_tensor xin = m->nparams ? sp_tape_copy_on(&t, m->params[0]->value.device, x) : *x;   /* --device cuda */
    sp_node *loss = sp_model_loss(m, &t, &xin, y);
    sp_backward(e, &t, loss);
    sp_bppsa_stats st;
    if (!sp_bppsa_stats_get(e, &st)) sp_fail("%s: --plan: no plan was made", app);
    bool pruned = false;
    for (int i = 0; i < m->nparams; i++) pruned |= m->params[i]->mask != NULL;
    /* The dense plan's symbolic phase: VGG-11 at 32x32 (1.1e8 Jt entries per sample) takes
     * 1.3 GB and ~50 s on 2 cores; far larger chains are not attempted. */
    if (pruned && eo.plan && st.dense_jt_entries > 3e8)
        printf("dense plan: not made (its Jt hold %.3g entries per sample; its symbolic products would need "
               "gigabytes)\n", st.dense_jt_entries);
    else if (pruned && eo.plan) {   /* the paper's Figure 10: FLOPs per level, dense next to pruned */
        const float *masks[512];
        int np = m->nparams < 512 ? m->nparams : 512;
        for (int i = 0; i < np; i++) masks[i] = m->params[i]->mask, m->params[i]->mask = NULL;
        sp_engine_opts dq = eo;
        dq.plan = false;
        dq.plan_svg = NULL;
        sp_engine *d = sp_engine_create("bppsa", &dq);
        sp_tape td;
        sp_tape_init(&td);
        sp_backward(d, &td, sp_model_loss(m, &td, x, y));
        for (int i = 0; i < np; i++) m->params[i]->mask = masks[i];
        double dt[256], dc[256], pt[256], pc[256];
        int nl = sp_bppsa_level_flops(d, dt, dc, 256), pl = sp_bppsa_level_flops(e, pt, pc, 256);
        sp_bppsa_stats ds;
        sp_bppsa_stats_get(d, &ds);
        if (nl == pl && nl <= 256) {
            printf("FLOP per sample per level, dense vs pruned (all steps | the critical step):\n");
            printf("%5s %16s %16s %16s %16s\n", "level", "dense", "pruned", "dense crit", "pruned crit");
            for (int l = 0; l < nl; l++)
                printf("%5d %16.0f %16.0f %16.0f %16.0f\n", l, dt[l], pt[l], dc[l], pc[l]);
        }
        printf("dense: bppsa total %.0f, critical path %.0f, linear BP %.0f; pruned: %.0f, %.0f, %.0f "
               "(critical path %.1fx shorter)\n", ds.flops, ds.critical_flops, ds.linear_flops, st.flops,
               st.critical_flops, st.linear_flops, st.critical_flops > 0 ? ds.critical_flops / st.critical_flops : 0.0);
        sp_tape_free(&td);
        sp_engine_destroy(d);
    }
    sp_json j;
    sp_json_begin(&j);
    sp_json_str(&j, "app", app);
    sp_json_str(&j, "backward", "bppsa");
    sp_json_str(&j, "mode", "plan");
    sp_json_int(&j, "links", st.n);
    sp_json_int(&j, "batch", st.batch);
    sp_json_int(&j, "scan_levels", st.up_levels);
    sp_json_int(&j, "full_levels", st.full_levels);
    sp_json_int(&j, "levels", st.levels);
    sp_json_int(&j, "linear_levels", st.linear_levels);
    sp_json_num(&j, "flops_per_sample", st.flops);
    sp_json_num(&j, "critical_flops_per_sample", st.critical_flops);
    sp_json_num(&j, "linear_flops_per_sample", st.linear_flops);
    sp_json_num(&j, "scan_bytes", (double)st.scan_bytes);
    sp_json_num(&j, "peak_bytes", (double)st.peak_bytes);
    sp_json_end_print(&j);
    sp_tape_free(&t);
    sp_engine_destroy(e);
}

void sp_app_check_engine(const sp_app_opts *o, sp_model *m, const sp_tensor *x1, const int *y1)
{
    if (strcmp(o->backward, "ooo") == 0 && o->k > 0) {   /* the engine would clamp k silently */
        int L = 0;
        for (int i = 0; i < m->nlayers; i++) L += m->layers[i]->nparams > 0;
        if (o->k > L)
            sp_fail("--k %d: expected 0..%d for %s (its parameterised layers; 0 = half of them)", o->k, L, m->name);
    }
    if (strcmp(o->backward, "bppsa") != 0 || o->scan_levels < 0) return;
    sp_tape t;
    sp_tape_init(&t);
    sp_tensor xin = m->nparams ? sp_tape_copy_on(&t, m->params[0]->value.device, x1) : *x1;   /* --device cuda */
    sp_node *loss = sp_model_loss(m, &t, &xin, y1);
    int n = sp_bppsa_chain_links(loss), full = sp_scan_full_levels(n);
    sp_tape_free(&t);
    if (o->scan_levels > full)
        sp_fail("--scan-levels %d: expected 0..%d for %s (its longest scanned chain: %d Jacobians), or full",
                o->scan_levels, full,
                m->name, n);
}

void sp_app_json_engine(sp_json *j, const sp_app_opts *o, sp_engine *e, bool ran)
{
    if (strcmp(o->backward, "bppsa") == 0) {
        sp_bppsa_stats bs;
        if (o->scan_levels == SP_SCAN_LEVELS_AUTO && sp_bppsa_stats_get(e, &bs)) sp_json_int(j, "scan_levels", bs.up_levels);
        else if (o->scan_levels < 0) sp_json_str(j, "scan_levels", "full");
        else sp_json_int(j, "scan_levels", o->scan_levels);
    }
    if (strcmp(o->backward, "ooo") == 0 && ran) {   /* what the engine ran (if it ran: not under --parallel) */
        const sp_ooo_stats *st = sp_ooo_last_stats(e);
        if (!st || !st->order || st->steps == 0) return;
        sp_json_str(j, "order", st->order);
        if (strcmp(st->order, "reverse-first-k") == 0) sp_json_int(j, "k", st->k);
        sp_json_num(j, "critical_path_ms", 1e3 * st->critical_s);
        sp_json_int(j, "peak_bytes", (long)st->peak_bytes);
        sp_ooo_device_stats ds = sp_ooo_device_stats_get(e);
        if (o->cuda_graph && ds.graph_captures + ds.graph_replays > 0) {   /* the backward alone (demo) */
            sp_json_str(j, "cuda_graph", "backward");
            sp_json_int(j, "graph_captures", ds.graph_captures);
            sp_json_int(j, "graph_replays", ds.graph_replays);
        }
    }
}

void sp_app_use_device(const sp_app_opts *o, sp_model *m)
{
    if (strcmp(o->device, "cuda") != 0) return;
    if (strcmp(o->backward, "linear") != 0 && strcmp(o->backward, "bppsa") != 0 && strcmp(o->backward, "ooo") != 0)
        sp_fail("--device cuda needs --backward linear, bppsa or ooo (the %s engine runs on the CPU)", o->backward);
    if (o->parallel) sp_fail("--device cuda with --parallel %s: the parallel schedules run on the CPU", o->parallel);
    if (o->resume || o->save_every > 0)
        sp_fail("--device cuda with --%s: resumable checkpoints are written during training from host tensors "
                "(expected --save, which saves at the end)", o->resume ? "resume" : "save-every");
    for (int i = 0; i < m->nparams; i++)
        if (m->params[i]->mask)
            sp_fail("--device cuda: %s is pruned (masks are applied on the host; train pruned models on the CPU)",
                    m->params[i]->name);
#ifdef SP_HAVE_CUDA
    const char *why = NULL;
    if (sp_cuda_device_count(&why) == 0) sp_fail("--device cuda: no CUDA device (%s)", why);
    sp_cuda_init(0);
    sp_model_to_device(m, SP_CUDA);
#else
    (void)m;
    sp_fail("--device cuda: this build has no CUDA backend (rebuild with make CUDA=1)");
#endif
}

void sp_app_device_to_host(sp_model *m)
{
#ifdef SP_HAVE_CUDA
    if (m->nparams && m->params[0]->value.device != SP_CPU) sp_model_to_device(m, SP_CPU);
#else
    (void)m;
#endif
}

/* --eval-only: the loaded weights on d in eval mode; the JSON line says what was run. */
static sp_train_result eval_only(const char *app, const sp_app_opts *o, sp_model *m, sp_dataset *d)
{
    sp_train_result r = {.train_loss = NAN, .last_loss = NAN};
    double t0 = sp_now();
    sp_evaluate(m, d, o->batch > 256 ? o->batch : 256, &r.test_loss, &r.test_acc);
    r.seconds = sp_now() - t0;
    sp_json j;
    sp_json_begin(&j);
    sp_json_str(&j, "app", app);
    sp_json_str(&j, "mode", "eval-only");
    sp_json_str(&j, "load", o->load);
    sp_json_str(&j, "dataset", d->name);
    sp_json_int(&j, "samples", d->n);
    sp_json_int(&j, "threads", o->threads);
    sp_json_num(&j, "test_loss", r.test_loss);
    sp_json_num(&j, "test_acc", r.test_acc);
    sp_json_num(&j, "seconds", r.seconds);
    sp_json_end_print(&j);
    return r;
}

sp_train_result sp_app_train(const char *app, const sp_app_opts *o, sp_model *m, sp_dataset *train,
                             sp_dataset *test, bool timing_keys)
{
    if (o->eval_only) {   /* --load is required by the flags */
        sp_check(sp_model_load(m, o->load));
        return eval_only(app, o, m, test ? test : train);
    }
    if (o->batch > train->n)
        sp_fail("--batch %d exceeds the %d training samples of %s", o->batch, train->n, train->name);
    sp_lr_schedule sched = sp_lr_parse(o->lr_schedule, o->lr);
    sp_engine_opts eo = sp_app_engine_opts(o);
    sp_engine *e = sp_engine_create(o->backward, &eo);
    if (o->cuda_graph) sp_ooo_set_cuda_graph(e, true);
    sp_pruning *pruning = NULL;
    if (o->load) sp_check(sp_prune_load(m, o->load, &pruning));   /* plain or torch-pruned checkpoints */
    else sp_model_init(m, o->seed);   /* --resume overwrites it in sp_train */
    if (o->prune > 0)
        pruning = sp_prune_magnitude(m, pruning, o->prune, strcmp(o->prune_scope, "layer") == 0 ? SP_PRUNE_LAYER : SP_PRUNE_GLOBAL);
    sp_app_use_device(o, m);   /* checkpoints load and save on the host; the step runs on --device */
    {   /* the engine options against the model, on one sample */
        sp_loader *one = sp_loader_new_sync(train, 1, false, 0, false);
        sp_batch b;
        sp_loader_next(one, &b);
        sp_app_check_engine(o, m, &b.x, b.y);
        sp_loader_free(one);
    }
    if ((o->plan || o->plan_svg) && !o->parallel) {   /* the plan of the first batch; nothing trains */
        sp_loader *l = sp_loader_new_sync(train, o->batch, false, o->seed, false);
        sp_batch b;
        if (!sp_loader_next(l, &b)) sp_fail("%s: --plan: the training set is empty", app);
        sp_app_plan_only(app, o, m, &b.x, b.y);
        sp_loader_free(l);
        sp_engine_destroy(e);
        sp_prune_free(pruning);
        return (sp_train_result){0};
    }

    sp_optim_cfg cfg = sp_optim_cfg_default();
    cfg.lr = o->lr;
    cfg.momentum = o->momentum;
    cfg.weight_decay = o->weight_decay;
    sp_optim *opt = sp_optim_create(o->optim, m->params, m->nparams, &cfg);
    struct sp_exec *ex = sp_app_exec_new(o, m, opt, train->ndim, train->shape);
    if (!ex && strcmp(o->backward, "ooo") == 0) {   /* per-layer updates U_i as tasks of the sub lane */
        e->opts.update = update_layer;
        e->opts.update_ctx = opt;
    }
    /* Parallel: every batch splits into the micro-batches (a short last batch is dropped). */
    sp_loader *loader = sp_loader_new(train, o->batch, !o->no_shuffle, o->seed, ex != NULL);
    sp_train_cfg tc = {.app = app,
                       .epochs = o->epochs,
                       .steps = o->steps,
                       .eval_every = o->eval_every,
                       .eval_batch = o->batch > 256 ? o->batch : 256,
                       .log_path = sp_app_prints(ex) ? o->log : NULL,   /* rank 0 writes the log */
                       .lr = &sched,
                       .quiet = o->quiet || !sp_app_prints(ex),
                       .exec = ex,
                       .save_every = o->save_every,
                       .save_path = o->save,
                       .resume_path = o->resume,
                       .cuda_graph = o->cuda_graph};
    /* What decides a run's numbers: a resume must match (schedulers/train/checkpoint.h). */
    char lr[32], mom[32], wd[32], batch[16], seed[24];
    snprintf(lr, sizeof lr, "%.17g", o->lr);
    snprintf(mom, sizeof mom, "%.17g", o->momentum);
    snprintf(wd, sizeof wd, "%.17g", o->weight_decay);
    snprintf(batch, sizeof batch, "%d", o->batch);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)o->seed);
    const char *run_meta[] = {"lr", lr, "lr-schedule", o->lr_schedule, "momentum", mom, "weight-decay", wd,
                              "batch", batch, "seed", seed, "no-shuffle", o->no_shuffle ? "yes" : "no", NULL};
    tc.run_meta = run_meta;
    sp_train_result r = sp_train(m, e, opt, loader, test, &tc);
    sp_app_device_to_host(m);
    if (ex && o->save) sp_exec_sync_weights(ex);
    if (o->save && o->save_every == 0 && sp_app_prints(ex)) {   /* else sp_train saved */
        if (pruning) sp_check(sp_prune_save(pruning, m, o->save));
        else sp_check(sp_model_save(m, o->save));
    }

    sp_json j;
    sp_json_begin(&j);
    sp_json_str(&j, "app", app);
    sp_json_str(&j, "device", o->device);
    sp_json_str(&j, "backward", o->backward);
    sp_json_int(&j, "epochs", r.epochs);
    sp_json_int(&j, "steps", r.steps);
    sp_json_int(&j, "batch", sp_loader_batch(loader));   /* what ran */
    sp_json_int(&j, "threads", o->threads);
    sp_json_str(&j, "optim", o->optim);
    sp_json_num(&j, "lr", o->lr);
    sp_json_int(&j, "seed", (long)o->seed);
    sp_json_str(&j, "dataset", train->name);
    sp_app_json_engine(&j, o, e, r.steps > 0);
    if (o->cuda_graph && r.graph_captures + r.graph_replays > 0) {   /* the whole step (sp_train) */
        sp_json_str(&j, "cuda_graph", "step");
        sp_json_int(&j, "graph_captures", r.graph_captures);
        sp_json_int(&j, "graph_replays", r.graph_replays);
    }
    if (pruning) {   /* the fraction of the prunable weights that are pruned */
        int64_t kept = 0, all = 0;
        for (int i = 0; i < m->nparams; i++)
            if (pruning->mask[i]) kept += sp_prune_kept(pruning, i), all += (int64_t)m->params[i]->value.numel;
        sp_json_num(&j, "pruned", all ? 1.0 - (double)kept / (double)all : 0.0);
    }
    sp_json_num(&j, "train_loss", r.train_loss);
    sp_json_num(&j, "test_loss", r.test_loss);
    sp_json_num(&j, "test_acc", r.test_acc);
    sp_json_num(&j, "images_per_s", r.images_per_s);
    sp_json_num(&j, "seconds", r.seconds);
    if (timing_keys) {
        sp_json_num(&j, "forward_ms", r.forward_ms);
        sp_json_num(&j, "backward_ms", r.backward_ms);
    }
    sp_json_num(&j, "step_ms", r.step_ms);
    sp_json_num(&j, "last_loss", r.last_loss);
    sp_app_exec_json(ex, o, &j);
    if (sp_app_prints(ex)) sp_json_end_print(&j);
    sp_app_exec_end(ex);

    sp_loader_free(loader);
    sp_optim_free(opt);
    sp_engine_destroy(e);
    sp_prune_free(pruning);
    return r;
}

/* ---- parallel runs ------------------------------------------------------------------------ */

struct sp_exec *sp_app_exec_new(const sp_app_opts *o, sp_model *m, struct sp_optim *opt, int sample_ndim,
                                const int *sample_shape)
{
    if (!o->parallel) return NULL;
    if (!sp_comm_have_mpi() && getenv("OMPI_COMM_WORLD_SIZE"))
        sp_fail("--parallel %s: this build has no MPI (rebuild with make MPI=1)", o->parallel);
    sp_comm_set_timeout(o->comm_timeout);
    sp_comm_init(NULL, NULL);
    sp_exec_cfg c = {.scheme = o->parallel,
                     .micro = o->microbatches,
                     .groups = o->groups,
                     .partition = o->partition,
                     .bucket_mb = o->bucket_mb,
                     .costs_in = o->costs,
                     .costs_out = o->costs_out,
                     .order_out = o->exec_order,
                     .trace_path = o->trace,
                     .ooo = strcmp(o->backward, "ooo") == 0,
                     .k = o->k};
    struct sp_exec *x = sp_exec_new(sp_comm_world(), m, opt, &c, sample_ndim, sample_shape, o->batch);
    if (o->plan) {   /* --parallel scan --plan: the cross-rank levels; nothing trains */
        if (sp_exec_rank(x) == 0) {
            int levels = sp_exec_print_plan(x, stdout);
            sp_json j;
            sp_json_begin(&j);
            sp_json_str(&j, "mode", "plan");
            sp_json_str(&j, "parallel", o->parallel);
            sp_json_int(&j, "workers", sp_exec_workers(x));
            sp_json_int(&j, "levels", levels);
            sp_json_end_print(&j);
        }
        sp_app_exec_end(x);
        exit(0);
    }
    return x;
}

bool sp_app_prints(const struct sp_exec *x) { return !x || sp_exec_rank(x) == 0; }

void sp_app_exec_json(struct sp_exec *x, const sp_app_opts *o, sp_json *j)
{
    if (!x) return;
    sp_exec_stats st;
    sp_exec_gather_stats(x, &st);
    double steps = st.steps > 0 ? (double)st.steps : 1.0, comm = 0;
    char busy[2048], idle[2048];
    size_t nb = 0, ni = 0;
    for (int r = 0; r < st.workers; r++) {
        comm += st.comm[r] / st.workers;
        double b = 1e3 * st.busy[r] / steps, i = 1e3 * (st.wall[r] - st.busy[r]) / steps;
        if (nb < sizeof busy - 32) nb += (size_t)snprintf(busy + nb, sizeof busy - nb, "%s%.3f", r ? ", " : "[", b);
        if (ni < sizeof idle - 32) ni += (size_t)snprintf(idle + ni, sizeof idle - ni, "%s%.3f", r ? ", " : "[", i);
    }
    snprintf(busy + nb, sizeof busy - nb, "]");
    snprintf(idle + ni, sizeof idle - ni, "]");
    sp_json_str(j, "parallel", sp_exec_scheme(x));   /* ddp --backward ooo: "ddp-ooo" */
    sp_json_int(j, "workers", st.workers);
    sp_json_int(j, "microbatches", sp_exec_schedule(x)->micro);
    sp_json_num(j, "comm_ms", 1e3 * comm / steps);
    /* the steps after the first, as --costs-out's job costs (bench/distributed.sh) */
    sp_json_num(j, "step_mean_ms", 1e3 * st.step_mean);
    sp_json_num(j, "comm_mean_ms", 1e3 * st.comm_mean);
    sp_json_raw(j, "busy_ms", busy);
    sp_json_raw(j, "idle_ms", idle);
    sp_exec_stats_free(&st);
}

void sp_app_exec_end(struct sp_exec *x)
{
    if (!x) return;
    sp_exec_finish(x);
    sp_exec_free(x);
    sp_comm_finalize();
}
