/* checkpoint.c — resumable checkpoints: weights + optimizer + loop state in one
 * safetensors file (layout in checkpoint.h). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/safetensors.h"
#include "schedulers/checkpoint.h"

/* torch.optim's state keys of o's per-element buffers (state[0], state[1]). */
static int state_kinds(const sp_optim *o, const char *kinds[2])
{
    if (strcmp(o->name, "sgd") == 0) {
        kinds[0] = "momentum_buffer";
        return o->state[0] ? 1 : 0;
    }
    kinds[0] = "exp_avg";
    kinds[1] = "exp_avg_sq";
    return 2;
}

#define NAME_LEN 320

typedef struct names {
    char (*s)[NAME_LEN];
    int n;
} names;

static const char *name_add(names *nm, const char *fmt, const char *a, const char *b)
{
    char *s = nm->s[nm->n++];
    if ((size_t)snprintf(s, NAME_LEN, fmt, a, b) >= NAME_LEN) sp_fail("checkpoint: parameter name %s too long", a);
    return s;
}

static const int scalar_shape[1] = {1};

void sp_checkpoint_save(const char *path, const sp_model *m, const sp_optim *o, const sp_train_state *s,
                        const char *const *run_meta)
{
    const char *kinds[2];
    int nk = state_kinds(o, kinds), np = m->nparams;
    int cap = np + o->nparams * (1 + nk) + 5;
    sp_st_entry *e = sp_xcalloc((size_t)cap, sizeof *e);
    names nm = {sp_xcalloc((size_t)cap, NAME_LEN), 0};
    int n = 0;
    for (int i = 0; i < np; i++) {
        const sp_tensor *v = &m->params[i]->value;
        e[n++] = (sp_st_entry){m->params[i]->name, SP_ST_F32, v->ndim, v->shape, v->data};
    }
    int64_t *steps = sp_xmalloc((size_t)o->nparams * sizeof *steps);
    for (int i = 0; i < o->nparams; i++) {
        const sp_param *p = o->params[i];
        steps[i] = o->steps[i];
        e[n++] = (sp_st_entry){name_add(&nm, SP_ST_STATE_PREFIX "optim/%s/%s", p->name, "step"), SP_ST_I64, 0,
                               scalar_shape, &steps[i]};
        for (int k = 0; k < nk; k++)
            e[n++] = (sp_st_entry){name_add(&nm, SP_ST_STATE_PREFIX "optim/%s/%s", p->name, kinds[k]), SP_ST_F32,
                                   p->value.ndim, p->value.shape, o->state[k] + o->offset[i]};
    }
    int64_t step = s->step, epoch = s->epoch, batch = s->batch;
    double loss = s->epoch_loss, lr = s->lr;
    e[n++] = (sp_st_entry){SP_ST_STATE_PREFIX "train/step", SP_ST_I64, 0, scalar_shape, &step};
    e[n++] = (sp_st_entry){SP_ST_STATE_PREFIX "train/epoch", SP_ST_I64, 0, scalar_shape, &epoch};
    e[n++] = (sp_st_entry){SP_ST_STATE_PREFIX "train/batch", SP_ST_I64, 0, scalar_shape, &batch};
    e[n++] = (sp_st_entry){SP_ST_STATE_PREFIX "train/epoch_loss", SP_ST_F64, 0, scalar_shape, &loss};
    e[n++] = (sp_st_entry){SP_ST_STATE_PREFIX "train/lr", SP_ST_F64, 0, scalar_shape, &lr};

    int nmeta = 0;
    while (run_meta && run_meta[nmeta]) nmeta += 2;
    const char **meta = sp_xcalloc((size_t)nmeta + 5, sizeof *meta);
    char (*keys)[NAME_LEN] = sp_xcalloc((size_t)nmeta / 2 + 1, NAME_LEN);
    int j = 0;
    meta[j++] = "scanprop_model";
    meta[j++] = m->name;
    meta[j++] = "run.optim";
    meta[j++] = o->name;
    for (int i = 0; i < nmeta; i += 2) {
        snprintf(keys[i / 2], NAME_LEN, "run.%s", run_meta[i]);
        meta[j++] = keys[i / 2];
        meta[j++] = run_meta[i + 1];
    }
    sp_st_write(path, n, e, meta);
    free(keys);
    free(meta);
    free(steps);
    free(nm.s);
    free(e);
}

/* The scalar `name` of dtype dt, or one line naming the problem and exit 2. */
static const unsigned char *scalar(const sp_st_file *f, const char *name, sp_st_dtype dt)
{
    const sp_st_tensor *t = sp_st_find(f, name);
    if (!t)
        sp_fail("%s: no tensor %s (not a resumable checkpoint: those are written by --save-every)", sp_st_path(f),
                name);
    if (t->dtype != dt || t->numel != 1)
        sp_fail("%s: %s is %s with %zu elements, expected one %s", sp_st_path(f), name, sp_st_dtype_name(t->dtype),
                t->numel, sp_st_dtype_name(dt));
    return t->data;
}

static int64_t get_i64(const sp_st_file *f, const char *name)
{
    int64_t v;
    memcpy(&v, scalar(f, name, SP_ST_I64), sizeof v);
    return v;
}

static double get_f64(const sp_st_file *f, const char *name)
{
    double v;
    memcpy(&v, scalar(f, name, SP_ST_F64), sizeof v);
    return v;
}

/* `name` is F32 with p's shape: its data, else exit 2. */
static const unsigned char *buffer(const sp_st_file *f, const char *name, const sp_param *p)
{
    const sp_st_tensor *t = sp_st_find(f, name);
    if (!t)
        sp_fail("%s: no tensor %s (not a resumable checkpoint of this optimizer: those are written by "
                "--save-every)", sp_st_path(f), name);
    bool same = t->dtype == SP_ST_F32 && t->ndim == p->value.ndim;
    for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == p->value.shape[d];
    if (!same) {
        char buf[64];
        sp_fail("%s: %s is not F32 of shape %s like %s", sp_st_path(f), name,
                sp_shape_str(&p->value, buf, sizeof buf), p->name);
    }
    return t->data;
}

static void check_meta(const sp_st_file *f, const char *key, const char *want)
{
    char k[NAME_LEN];
    snprintf(k, sizeof k, "run.%s", key);
    const char *got = sp_st_metadata(f, k);
    if (!got)
        sp_fail("%s: no metadata %s (not a resumable checkpoint: those are written by --save-every)", sp_st_path(f),
                k);
    if (strcmp(got, want) != 0)
        sp_fail("%s: saved with --%s %s, this run has --%s %s (a resumed run must use the same settings)",
                sp_st_path(f), key, got, key, want);
}

void sp_checkpoint_load(const char *path, sp_model *m, sp_optim *o, sp_train_state *s,
                        const char *const *run_meta)
{
    sp_st_file *f = sp_st_open(path);
    const char *model = sp_st_metadata(f, "scanprop_model");
    if (model && strcmp(model, m->name) != 0)
        sp_fail("%s: a checkpoint of model %s, this is %s", path, model, m->name);
    check_meta(f, "optim", o->name);
    for (int i = 0; run_meta && run_meta[i]; i += 2) check_meta(f, run_meta[i], run_meta[i + 1]);

    /* every check before any change */
    const char *kinds[2];
    int nk = state_kinds(o, kinds);
    char name[NAME_LEN];
    for (int i = 0; i < o->nparams; i++) {
        const sp_param *p = o->params[i];
        snprintf(name, sizeof name, SP_ST_STATE_PREFIX "optim/%s/step", p->name);
        int64_t st = get_i64(f, name);
        if (st < 0) sp_fail("%s: %s = %lld (expected >= 0)", path, name, (long long)st);
        for (int k = 0; k < nk; k++) {
            snprintf(name, sizeof name, SP_ST_STATE_PREFIX "optim/%s/%s", p->name, kinds[k]);
            buffer(f, name, p);
        }
    }
    sp_train_state t = {
        .step = (long)get_i64(f, SP_ST_STATE_PREFIX "train/step"),
        .epoch = 0,
        .batch = (long)get_i64(f, SP_ST_STATE_PREFIX "train/batch"),
        .epoch_loss = get_f64(f, SP_ST_STATE_PREFIX "train/epoch_loss"),
        .lr = get_f64(f, SP_ST_STATE_PREFIX "train/lr"),
    };
    int64_t epoch = get_i64(f, SP_ST_STATE_PREFIX "train/epoch");
    if (t.step < 0 || t.batch < 0 || t.batch > t.step || epoch < 0 || epoch > INT32_MAX || !(t.lr >= 0))
        sp_fail("%s: inconsistent training state (step %ld, epoch %lld, batch %ld, lr %g)", path, t.step,
                (long long)epoch, t.batch, t.lr);
    t.epoch = (int)epoch;

    sp_model_load(m, path);   /* checks the weights, then reads them */
    for (int i = 0; i < o->nparams; i++) {
        const sp_param *p = o->params[i];
        snprintf(name, sizeof name, SP_ST_STATE_PREFIX "optim/%s/step", p->name);
        o->steps[i] = (long)get_i64(f, name);
        for (int k = 0; k < nk; k++) {
            snprintf(name, sizeof name, SP_ST_STATE_PREFIX "optim/%s/%s", p->name, kinds[k]);
            memcpy(o->state[k] + o->offset[i], buffer(f, name, p), p->value.numel * sizeof(float));
        }
    }
    sp_optim_set_lr(o, t.lr);
    *s = t;
    sp_st_close(f);
}
