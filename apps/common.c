/* common.c — flag parsing and the JSON summary line shared by the apps. */
#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "apps/common.h"
#include "core/engine.h"
#include "core/error.h"

void sp_app_defaults(sp_app_opts *o)
{
    *o = (sp_app_opts){
        .optim = "sgd", .backward = "linear", .lr_schedule = "constant", .epochs = 1, .batch = 64,
        .threads = 2, .lr = 0.01, .momentum = 0.9f, .seed = 1, .scan_levels = -1, .order = "ooo",
        .k = 2,
    };
}

static const sp_flag *common_flags(sp_app_opts *o)
{
    static sp_flag f[40];
    sp_flag list[] = {
        {"data", SP_FLAG_STR, &o->data, "dataset directory or file"},
        {"data-format", SP_FLAG_STR, &o->data_format, "dataset format (app-specific)"},
        {"epochs", SP_FLAG_INT, &o->epochs, "training epochs"},
        {"steps", SP_FLAG_LONG, &o->steps, "stop after N steps (0 = whole epochs)"},
        {"batch", SP_FLAG_INT, &o->batch, "batch size"},
        {"lr", SP_FLAG_DOUBLE, &o->lr, "learning rate"},
        {"lr-schedule", SP_FLAG_STR, &o->lr_schedule, "constant | step:SIZE:GAMMA | cosine:TMAX[:MIN]"},
        {"momentum", SP_FLAG_DOUBLE, &o->momentum, "SGD momentum"},
        {"weight-decay", SP_FLAG_DOUBLE, &o->weight_decay, "weight decay"},
        {"optim", SP_FLAG_STR, &o->optim, "sgd | adam | adamw"},
        {"seed", SP_FLAG_U64, &o->seed, "random seed (init, shuffling, synthetic data)"},
        {"threads", SP_FLAG_INT, &o->threads, "threads for everything, OpenBLAS included"},
        {"backward", SP_FLAG_STR, &o->backward, "backward engine: linear | bppsa | ooo"},
        {"scan-levels", SP_FLAG_INT, &o->scan_levels, "bppsa: up-sweep levels K | auto | full (default: full)"},
        {"plan", SP_FLAG_BOOL, &o->plan, "bppsa: print the scan plan's summary and exit (--plan=full: every step)"},
        {"plan-svg", SP_FLAG_STR, &o->plan_svg, "bppsa: draw the scan tree (short chains) to FILE.svg and exit"},
        {"order", SP_FLAG_STR, &o->order, "ooo: conventional | ooo | reverse-first-k | list"},
        {"k", SP_FLAG_INT, &o->k, "ooo reverse-first-k: k"},
        {"mem-cap", SP_FLAG_LONG, &o->mem_cap, "ooo reverse-first-k: memory cap in bytes"},
        {"trace", SP_FLAG_STR, &o->trace, "ooo: write a Chrome/Perfetto trace JSON"},
        {"no-shuffle", SP_FLAG_BOOL, &o->no_shuffle, "keep the dataset order"},
        {"load", SP_FLAG_STR, &o->load, "initial weights (safetensors)"},
        {"save", SP_FLAG_STR, &o->save, "save the final weights (safetensors, atomic)"},
        {"log", SP_FLAG_STR, &o->log, "per-step CSV log: step,epoch,loss,lr,seconds"},
        {"eval-every", SP_FLAG_INT, &o->eval_every, "evaluate every N steps (0 = per epoch)"},
        {"quiet", SP_FLAG_BOOL, &o->quiet, "no progress output"},
        {NULL, 0, NULL, NULL},
    };
    memcpy(f, list, sizeof list);
    return f;
}

static void usage(FILE *out, const char *app, const char *summary, const sp_flag *a, const sp_flag *b)
{
    fprintf(out, "usage: %s [flags]\n%s\n\nflags:\n", app, summary);
    for (const sp_flag *set[2] = {b, a}, **s = set; s < set + 2; s++)
        for (const sp_flag *f = *s; f && f->name; f++) {
            const char *arg = f->kind == SP_FLAG_BOOL ? "" : f->kind == SP_FLAG_STR ? " S" : " N";
            fprintf(out, "  --%s%-*s %s\n", f->name, (int)(18 - strlen(f->name) - strlen(arg)), arg, f->help);
        }
    fprintf(out, "  --help               this text\n");
}

static const sp_flag *find(const sp_flag *set, const char *name, size_t len)
{
    for (const sp_flag *f = set; f && f->name; f++)
        if (strlen(f->name) == len && strncmp(f->name, name, len) == 0) return f;
    return NULL;
}

static void set_value(const sp_flag *f, const char *v)
{
    char *end;
    errno = 0;
    switch (f->kind) {
    case SP_FLAG_STR:
        if (!*v) sp_fail("--%s: empty value", f->name);
        *(const char **)f->dst = v;
        return;
    case SP_FLAG_INT: {
        long x = strtol(v, &end, 10);
        if (*end || !*v || errno || x < -2147483647L || x > 2147483647L)
            sp_fail("--%s %s: expected an integer", f->name, v);
        *(int *)f->dst = (int)x;
        return;
    }
    case SP_FLAG_LONG: {
        long x = strtol(v, &end, 10);
        if (*end || !*v || errno) sp_fail("--%s %s: expected an integer", f->name, v);
        *(long *)f->dst = x;
        return;
    }
    case SP_FLAG_U64: {
        if (*v == '-') sp_fail("--%s %s: expected a non-negative integer", f->name, v);
        unsigned long long x = strtoull(v, &end, 10);
        if (*end || !*v || errno) sp_fail("--%s %s: expected a non-negative integer", f->name, v);
        *(uint64_t *)f->dst = x;
        return;
    }
    case SP_FLAG_DOUBLE: {
        double x = strtod(v, &end);
        if (*end || !*v || errno || !isfinite(x)) sp_fail("--%s %s: expected a number", f->name, v);
        *(double *)f->dst = x;
        return;
    }
    case SP_FLAG_BOOL: *(bool *)f->dst = true; return;
    }
}

static void check_ranges(const sp_app_opts *o)
{
    if (o->epochs < 1) sp_fail("--epochs %d: expected >= 1", o->epochs);
    if (o->steps < 0) sp_fail("--steps %ld: expected >= 0", o->steps);
    if (o->batch < 1) sp_fail("--batch %d: expected >= 1", o->batch);
    if (o->threads < 1 || o->threads > 64) sp_fail("--threads %d: expected 1..64", o->threads);
    if (!(o->lr > 0)) sp_fail("--lr %g: expected > 0", o->lr);
    if (o->momentum < 0 || o->momentum >= 1) sp_fail("--momentum %g: expected in [0, 1)", o->momentum);
    if (o->weight_decay < 0) sp_fail("--weight-decay %g: expected >= 0", o->weight_decay);
    if (o->eval_every < 0) sp_fail("--eval-every %d: expected >= 0", o->eval_every);
    if (o->k < 1) sp_fail("--k %d: expected >= 1", o->k);
    if (o->mem_cap < 0) sp_fail("--mem-cap %ld: expected >= 0", o->mem_cap);
}

void sp_app_parse(int argc, char **argv, const char *app, const char *summary, sp_app_opts *o,
                  const sp_flag *extra)
{
    const sp_flag *common = common_flags(o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout, app, summary, common, extra);
            exit(0);
        }
        if (strncmp(a, "--", 2) != 0) sp_fail("%s: unexpected argument '%s' (see --help)", app, a);
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const sp_flag *f = find(extra, name, len);
        if (!f) f = find(common, name, len);
        if (!f) sp_fail("%s: unknown flag '--%.*s' (see --help)", app, (int)len, name);
        const char *v = eq ? eq + 1 : NULL;
        if (f->dst == &o->plan && v) {   /* --plan=full | --plan=summary */
            if (strcmp(v, "full") != 0 && strcmp(v, "summary") != 0)
                sp_fail("--plan=%s: expected --plan, --plan=summary or --plan=full", v);
            o->plan = true;
            o->plan_full = strcmp(v, "full") == 0;
            continue;
        }
        if (f->dst == &o->scan_levels) {   /* names for the two special depths */
            const char *w = v ? v : i + 1 < argc ? argv[i + 1] : "";
            int named = strcmp(w, "auto") == 0 ? SP_SCAN_LEVELS_AUTO : strcmp(w, "full") == 0 ? SP_SCAN_LEVELS_FULL : 0;
            if (named) {
                o->scan_levels = named;
                if (!v) i++;
                continue;
            }
        }
        if (f->kind == SP_FLAG_BOOL) {
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
    check_ranges(o);
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
    fflush(stdout);
}

/* ---- datasets of the image apps ----------------------------------------------------- */

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"

/* The datasets of the image apps: fashion-mnist / mnist (IDX), cifar10, folder. */
void sp_app_open_images(const sp_app_opts *o, int pad_to, sp_dataset **train, sp_dataset **test)
{
    const char *fmt = o->data_format ? o->data_format : "fashion-mnist";
    if (strcmp(fmt, "fashion-mnist") == 0 || strcmp(fmt, "mnist") == 0 || strcmp(fmt, "idx") == 0) {
        const char *dir = o->data ? o->data : FMNIST_DIR;
        *train = sp_fashion_mnist(dir, true, pad_to);
        *test = sp_fashion_mnist(dir, false, pad_to);
    } else if (strcmp(fmt, "cifar10") == 0) {
        if (!o->data) sp_fail("--data-format cifar10 needs --data DIR (the cifar-10-batches-bin directory)");
        *train = sp_cifar10(o->data, true);
        *test = sp_cifar10(o->data, false);
    } else if (strcmp(fmt, "folder") == 0) {
        if (!o->data) sp_fail("--data-format folder needs --data DIR (DIR/train/<class>/*, DIR/test/<class>/*)");
        char tr[4096], te[4096];
        snprintf(tr, sizeof tr, "%s/train", o->data);
        snprintf(te, sizeof te, "%s/test", o->data);
        *train = sp_image_folder(tr, pad_to ? pad_to : 28, 1);
        *test = sp_image_folder(te, pad_to ? pad_to : 28, 1);
    } else {
        sp_fail("--data-format %s: unknown (expected fashion-mnist | mnist | cifar10 | folder)", fmt);
    }
}

/* ---- the training app runner ---------------------------------------------------------- */
#include "core/parallel.h"
#include "core/safetensors.h"
#include "schedulers/engines.h"
#include "optim/optim.h"

/* U_i of the ooo engine: the optimizer step of one layer's parameters. */
static void update_layer(void *ctx, sp_layer *l) { sp_optim_step_params(ctx, l->params, l->nparams); }

sp_engine_opts sp_app_engine_opts(const sp_app_opts *o)
{
    return (sp_engine_opts){.scan_levels = o->scan_levels,
                            .order = o->order,
                            .k = o->k,
                            .mem_cap = (size_t)o->mem_cap,
                            .trace_path = o->trace,
                            .plan = o->plan || o->plan_full,
                            .plan_full = o->plan_full,
                            .plan_svg = o->plan_svg};
}

/* --plan / --plan-svg: one forward and one bppsa backward on the first batch print the
 * plan (and draw it), then the JSON line carries the plan's figures. Nothing trains. */
void sp_app_plan_only(const char *app, const sp_app_opts *o, sp_model *m, const sp_tensor *x, const int *y)
{
    sp_engine_opts eo = sp_app_engine_opts(o);
    eo.plan = o->plan || o->plan_full || !o->plan_svg;
    sp_engine *e = sp_engine_create("bppsa", &eo);
    sp_tape t;
    sp_tape_init(&t);
    sp_node *loss = sp_model_loss(m, &t, x, y);
    sp_backward(e, &t, loss);
    sp_bppsa_stats st;
    if (!sp_bppsa_stats_get(e, &st)) sp_fail("%s: --plan: no plan was made", app);
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

sp_train_result sp_app_train(const char *app, const sp_app_opts *o, sp_model *m, sp_dataset *train,
                             sp_dataset *test, bool timing_keys)
{
    if (o->plan || o->plan_full || o->plan_svg) {
        if (o->load) sp_model_load(m, o->load);
        else sp_model_init(m, o->seed);
        sp_loader *l = sp_loader_new_sync(train, o->batch, false, o->seed, false);
        sp_batch b;
        if (!sp_loader_next(l, &b)) sp_fail("%s: --plan: the training set is empty", app);
        sp_app_plan_only(app, o, m, &b.x, b.y);
        sp_loader_free(l);
        return (sp_train_result){0};
    }
    sp_lr_schedule sched = sp_lr_parse(o->lr_schedule, o->lr);
    sp_engine_opts eo = sp_app_engine_opts(o);
    sp_engine *e = sp_engine_create(o->backward, &eo);
    if (o->load) sp_model_load(m, o->load);
    else sp_model_init(m, o->seed);

    sp_optim_cfg cfg = sp_optim_cfg_default();
    cfg.lr = o->lr;
    cfg.momentum = o->momentum;
    cfg.weight_decay = o->weight_decay;
    sp_optim *opt = sp_optim_create(o->optim, m->params, m->nparams, &cfg);
    if (strcmp(o->backward, "ooo") == 0) {   /* per-layer updates U_i as tasks of the sub lane */
        e->opts.update = update_layer;
        e->opts.update_ctx = opt;
    }
    sp_loader *loader = sp_loader_new(train, o->batch, !o->no_shuffle, o->seed, false);
    sp_train_cfg tc = {.app = app,
                       .epochs = o->epochs,
                       .steps = o->steps,
                       .eval_every = o->eval_every,
                       .eval_batch = o->batch > 256 ? o->batch : 256,
                       .log_path = o->log,
                       .lr = &sched,
                       .quiet = o->quiet};
    sp_train_result r = sp_train(m, e, opt, loader, test, &tc);
    if (o->save) sp_model_save(m, o->save);

    sp_json j;
    sp_json_begin(&j);
    sp_json_str(&j, "app", app);
    sp_json_str(&j, "backward", o->backward);
    sp_json_int(&j, "epochs", r.epochs);
    sp_json_int(&j, "steps", r.steps);
    sp_json_int(&j, "batch", o->batch);
    sp_json_int(&j, "threads", o->threads);
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
    sp_json_end_print(&j);

    sp_loader_free(loader);
    sp_optim_free(opt);
    sp_engine_destroy(e);
    return r;
}
