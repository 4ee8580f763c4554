/* common.c — flag parsing and the JSON summary line shared by the apps. */
#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "apps/common.h"
#include "core/error.h"

void sp_app_defaults(sp_app_opts *o)
{
    *o = (sp_app_opts){
        .optim = "sgd", .backward = "linear", .lr_schedule = "constant", .epochs = 1, .batch = 64,
        .threads = 2, .lr = 0.01, .momentum = 0.9f, .seed = 1, .scan_levels = -1, .order = "ooo",
        .k = 2, .partition = "cost", .bucket_mb = 25, .comm_timeout = 60,
    };
}

static const sp_flag *common_flags(sp_app_opts *o)
{
    static sp_flag f[48];
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
        {"scan-levels", SP_FLAG_INT, &o->scan_levels, "bppsa: up-sweep levels (default: full scan)"},
        {"plan", SP_FLAG_BOOL, &o->plan, "bppsa: print the static scan plan"},
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
        {"parallel", SP_FLAG_STR, &o->parallel, "under mpirun: ddp | fsdp | gpipe | 1f1b | lpp | fslpp | ooo-ff | ooo-modulo"},
        {"microbatches", SP_FLAG_INT, &o->microbatches, "parallel: micro-batches B per step (default W, pipelines 2W)"},
        {"groups", SP_FLAG_INT, &o->groups, "parallel lpp/fslpp: groups G (W = G*R)"},
        {"partition", SP_FLAG_STR, &o->partition, "parallel pipelines: cost (measured) | layerpipe"},
        {"bucket-mb", SP_FLAG_DOUBLE, &o->bucket_mb, "parallel: gradient bucket size in MB (default 25)"},
        {"comm-timeout", SP_FLAG_DOUBLE, &o->comm_timeout, "parallel: seconds a rank waits for a peer (default 60)"},
        {"costs", SP_FLAG_STR, &o->costs, "parallel: stage costs CSV instead of measuring them"},
        {"costs-out", SP_FLAG_STR, &o->costs_out, "parallel: write the stage costs used (build/schedule --profile)"},
        {"exec-order", SP_FLAG_STR, &o->exec_order, "parallel: write each rank's executed job order"},
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
    if (o->microbatches < 0) sp_fail("--microbatches %d: expected >= 1", o->microbatches);
    if (o->groups < 0) sp_fail("--groups %d: expected >= 1", o->groups);
    if (!(o->comm_timeout > 0)) sp_fail("--comm-timeout %g: expected seconds > 0", o->comm_timeout);
    bool par = o->parallel != NULL;
    if (!par && (o->microbatches || o->groups || o->costs || o->costs_out || o->exec_order))
        sp_fail("--microbatches, --groups, --costs, --costs-out and --exec-order need --parallel");
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
#include "optim/optim.h"
#include "core/comm.h"
#include "schedulers/exec.h"

/* U_i of the ooo engine: the optimizer step of one layer's parameters. */
static void update_layer(void *ctx, sp_layer *l) { sp_optim_step_params(ctx, l->params, l->nparams); }

sp_engine_opts sp_app_engine_opts(const sp_app_opts *o)
{
    return (sp_engine_opts){.scan_levels = o->scan_levels,
                            .order = o->order,
                            .k = o->k,
                            .mem_cap = (size_t)o->mem_cap,
                            .trace_path = o->trace,
                            .plan = o->plan};
}

sp_train_result sp_app_train(const char *app, const sp_app_opts *o, sp_model *m, sp_dataset *train,
                             sp_dataset *test, bool timing_keys)
{
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
                       .log_path = o->log,
                       .lr = &sched,
                       .quiet = o->quiet || !sp_app_prints(ex),
                       .exec = ex};
    sp_train_result r = sp_train(m, e, opt, loader, test, &tc);
    if (ex && o->save) sp_exec_sync_weights(ex);
    if (o->save && sp_app_prints(ex)) sp_model_save(m, o->save);

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
    sp_app_exec_json(ex, o, &j);
    if (sp_app_prints(ex)) sp_json_end_print(&j);
    sp_app_exec_end(ex);

    sp_loader_free(loader);
    sp_optim_free(opt);
    sp_engine_destroy(e);
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
    sp_comm *w = sp_comm_world();
    if (strcmp(o->backward, "linear") != 0)
        sp_comm_fail_all(w, "--parallel %s --backward %s: the executor runs the schedule's own F/B jobs "
                            "(expected --backward linear)", o->parallel, o->backward);
    sp_exec_cfg c = {.scheme = o->parallel,
                     .micro = o->microbatches,
                     .groups = o->groups,
                     .partition = o->partition,
                     .bucket_mb = o->bucket_mb,
                     .costs_in = o->costs,
                     .costs_out = o->costs_out,
                     .order_out = o->exec_order,
                     .trace_path = o->trace};
    return sp_exec_new(w, m, opt, &c, sample_ndim, sample_shape, o->batch);
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
    busy[0] = idle[0] = 0;
    for (int r = 0; r < st.workers; r++) {
        comm += st.comm[r] / st.workers;
        double b = 1e3 * st.busy[r] / steps, i = 1e3 * (st.wall[r] - st.busy[r]) / steps;
        if (nb < sizeof busy - 32) nb += (size_t)snprintf(busy + nb, sizeof busy - nb, "%s%.3f", r ? ", " : "[", b);
        if (ni < sizeof idle - 32) ni += (size_t)snprintf(idle + ni, sizeof idle - ni, "%s%.3f", r ? ", " : "[", i);
    }
    snprintf(busy + nb, sizeof busy - nb, "]");
    snprintf(idle + ni, sizeof idle - ni, "]");
    sp_json_str(j, "parallel", o->parallel);
    sp_json_int(j, "workers", st.workers);
    sp_json_int(j, "microbatches", sp_exec_schedule(x)->micro);
    sp_json_num(j, "comm_ms", 1e3 * comm / steps);
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
