/* targets.c — what each fuzz target does with one input, shared by the libFuzzer
 * harnesses (tests/fuzz/fuzz_*.c) and the corpus regression suite (tests/test_fuzz.c).
 *
 * The readers take paths, so an input is written to a scratch directory first. A
 * reader may refuse an input (an error status with a message in sp_last_error()); it
 * must never crash, exit, read or write out of bounds, overflow, hang or leak. Datasets that
 * open are read back sample by sample, so a bad size that got through shows. Each
 * target returns 1 if the input opened, 0 if it was refused with an error status. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "core/error.h"
#include "core/io/safetensors.h"
#include "data/data.h"
#include "layers/zoo.h"
#include "optim/optim.h"
#include "schedulers/plan/actions.h"
#include "schedulers/plan/schedule.h"
#include "schedulers/sim/sim.h"
#include "train/checkpoint.h"

static char fz_dir[64];
static pid_t fz_owner;   /* the process that made fz_dir: children (tests) leave it be */

static void fz_cleanup(void)
{
    if (getpid() != fz_owner) return;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fz_dir);
    if (fz_dir[0] && system(cmd) != 0) fprintf(stderr, "fuzz: could not remove %s\n", fz_dir);
}

/* The scratch directory, made on first use and removed at exit. */
static void fz_scratch(void)
{
    if (fz_dir[0]) return;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(fz_dir, sizeof fz_dir, "%s/scanprop-fuzz-XXXXXX", base);
    if (!mkdtemp(fz_dir)) abort();
    fz_owner = getpid();
    atexit(fz_cleanup);
}

/* dir/name (directories in name are created), holding data. */
static const char *fz_file(const char *name, const uint8_t *data, size_t size)
{
    static char path[4][256];
    static int k;
    fz_scratch();
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/%s", fz_dir, name);
    for (const char *slash = strchr(name, '/'); slash; slash = strchr(slash + 1, '/')) {
        char sub[256];
        snprintf(sub, sizeof sub, "%s/%.*s", fz_dir, (int)(slash - name), name);
        mkdir(sub, 0755);
    }
    FILE *f = fopen(path[k], "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) abort();
    return path[k];
}

/* Every sample, through the checked accessor. 1 if d opened, 0 if it was refused. */
static int fz_walk(sp_dataset *d)
{
    if (!d) {
        if (!*sp_last_error()) abort();   /* a refusal always says why */
        return 0;
    }
    size_t numel = sp_dataset_sample_numel(d);
    float *x = malloc(numel ? numel * sizeof *x : 1);
    for (int i = 0; i < d->n; i++) {
        int y;
        sp_dataset_get(d, i, x, &y);
        if (y < 0 || y >= d->nclasses) abort();
    }
    free(x);
    sp_dataset_free(d);
    return 1;
}

/* safetensors: open (validates the header), then convert every tensor the readers can. */
static int fz_safetensors(const uint8_t *data, size_t size)
{
    sp_st_file *f = sp_st_open(fz_file("t.safetensors", data, size));
    if (!f) {
        if (!*sp_last_error()) abort();
        return 0;
    }
    for (int i = 0; i < sp_st_count(f); i++) {
        const sp_st_tensor *t = sp_st_at(f, i);
        int shape[SP_ST_MAX_DIMS];
        size_t n = 1;
        for (int d = 0; d < t->ndim; d++) {
            shape[d] = t->shape[d] > 1 << 20 ? 0 : (int)t->shape[d];
            n *= (size_t)shape[d];
        }
        if (n != t->numel || n > 1 << 24) continue;
        void *buf = malloc(n ? n * 4 : 4);
        int rc = t->dtype <= SP_ST_BF16 ? sp_st_read_f32(f, t->name, buf, t->ndim, shape)
                                        : sp_st_read_i32(f, t->name, buf, t->ndim, shape);
        if (rc != SP_OK && !*sp_last_error()) abort();   /* a failure always says why */
        free(buf);
    }
    sp_st_metadata(f, "format");
    sp_st_close(f);
    return 1;
}

/* IDX, raw or gzip: the input is [u32 little-endian length L][L bytes: images file]
 * [the rest: labels file]; each part may itself be gzip. */
static int fz_idx(const uint8_t *data, size_t size)
{
    if (size < 4) return 0;
    uint32_t len = (uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 | (uint32_t)data[3] << 24;
    data += 4;
    size -= 4;
    if (len > size) len = (uint32_t)size;
    const char *img = fz_file("images-idx3-ubyte", data, len);
    const char *lab = fz_file("labels-idx1-ubyte", data + len, size - len);
    return fz_walk(sp_idx_open(img, lab));
}

/* CIFAR-10 binary: the input is test_batch.bin. */
static int fz_cifar(const uint8_t *data, size_t size)
{
    fz_file("test_batch.bin", data, size);
    return fz_walk(sp_cifar10(fz_dir, false));
}

/* A sequence set (safetensors x [N, T, C], y [N]). */
static int fz_seqset(const uint8_t *data, size_t size)
{
    return fz_walk(sp_seqset_open(fz_file("s.safetensors", data, size)));
}

/* The image folder with one image (PNG, JPEG, or whatever stb_image makes of it),
 * decoded to RGB and grey, resized to 12×12. */
static int fz_image(const uint8_t *data, size_t size)
{
    fz_file("folder/a/img.png", data, size);
    char root[128];
    snprintf(root, sizeof root, "%s/folder", fz_dir);
    return fz_walk(sp_image_folder(root, 12, size && (data[size - 1] & 1) ? 1 : 3));
}

/* A costs/profile CSV (--costs, --profile, --layerpipe): read as a status (its checks
 * are sp_fail inside, turned into SP_ERR by sp_costs_load_csv with nothing held), then
 * every stage's durations are summed, which must be finite (the reader promises it). */
static int fz_costs(const uint8_t *data, size_t size)
{
    sp_costs *c = NULL;
    if (sp_costs_load_csv(fz_file("costs.csv", data, size), &c) != SP_OK) {
        if (!*sp_last_error() || c) abort();
        return 0;
    }
    if (c->stages < 1) abort();
    double total = 0;
    for (int s = 0; s < c->stages; s++) total += c->fwd[s] + sp_costs_bwd(c, s) + c->act_bytes[s] + c->param_bytes[s];
    if (total != total) abort();
    sp_costs_free(c);
    return 1;
}

/* A resumable checkpoint (--resume) of a small MLP (4 -> 3 -> 2) trained with SGD and
 * momentum, or with Adam when the input names an "exp_avg" (the seeds: make_corpus.py).
 * A refusal must leave the model untouched. */
static int fz_state(const uint8_t *data, size_t size)
{
    bool adam = memmem(data, size, "exp_avg", 7) != NULL;
    sp_model *m = sp_zoo_mlp(4, 3, 2);
    sp_model_init(m, 1);
    sp_optim_cfg oc = sp_optim_cfg_default();
    oc.momentum = 0.9;
    sp_optim *o = sp_optim_create(adam ? "adam" : "sgd", m->params, m->nparams, &oc);
    static const char *const meta[] = {"seed", "1", NULL};
    float before = m->params[0]->value.data[0];
    sp_train_state st;
    int rc = sp_checkpoint_load(fz_file("state.st", data, size), m, o, &st, meta);
    if (rc != SP_OK && (!*sp_last_error() || m->params[0]->value.data[0] != before)) abort();
    if (rc == SP_OK && (st.step < 0 || st.epoch < 0 || st.batch < 0)) abort();
    sp_optim_free(o);
    sp_model_free(m);
    return rc == SP_OK;
}

/* An action list (--scheme custom --actions, PyTorch's forms too): a refusal is a status
 * with a message; a list the reader accepts must simulate, at unit costs and at unequal
 * ones with a transfer, to a finite latency, and (small lists) expand into the master
 * schedule build/schedule simulates, one stage per chunk. */
static int fz_actions(const uint8_t *data, size_t size)
{
    sp_actions *a = NULL;
    if (sp_actions_read_csv(fz_file("actions.csv", data, size), &a) != SP_OK) {
        if (!*sp_last_error() || a) abort();
        return 0;
    }
    sp_actions_sim r;
    if (sp_actions_simulate(a, NULL, &r) != SP_OK || !(r.latency >= 0) || r.latency > 1e12) abort();
    sp_actions_sim_free(&r);
    double *cost = malloc(sizeof(double) * 3 * (size_t)a->chunks);
    for (int c = 0; c < 3 * a->chunks; c++) cost[c] = 0.5 + (c % 7) * 0.25;
    sp_chunk_costs cc = {a->chunks, cost, cost + a->chunks, cost + 2 * a->chunks, NULL, 0.5};
    if (sp_actions_simulate(a, &cc, &r) != SP_OK || !(r.latency >= 0)) abort();
    sp_actions_sim_free(&r);
    free(cost);
    if ((long)a->chunks * a->micro <= 4096) {
        sp_sched_config cfg = {.stages = a->chunks, .micro = a->micro, .workers = a->ranks, .split = -1,
                               .actions_scheme = "custom"};
        sp_schedule *s = sp_schedule_from_actions(a, &cfg, NULL);
        sp_sim sr;
        sp_simulate(s, NULL, &sr);
        if (!(sr.latency >= 0)) abort();
        sp_sim_free(&sr);
        sp_schedule_free(s);
    }
    sp_actions_free(a);
    return 1;
}

typedef struct fz_target {
    const char *name;
    int (*run)(const uint8_t *data, size_t size);
} fz_target;

__attribute__((unused)) static const fz_target fz_targets[] = {
    {"safetensors", fz_safetensors}, {"idx", fz_idx}, {"cifar", fz_cifar},
    {"seqset", fz_seqset},           {"image", fz_image},     {"costs", fz_costs},
    {"state", fz_state},             {"actions", fz_actions},
};
