/* checkpoint.c — resumable checkpoints: weights + optimizer + loop state in one
 * safetensors file (layout in checkpoint.h). */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/io/safetensors.h"
#include "core/io/model_io.h"
#include "train/checkpoint.h"

/* How many state buffers o saves: each optimizer names its own (sp_optim.state_names). */
static int state_count(const sp_optim *o)
{
    int n = 0;
    while (n < 2 && o->state_names[n]) n++;
    return n;
}

#define NAME_LEN 320

typedef struct names {
    char (*s)[NAME_LEN];
    int n;
} names;

/* fmt with a, b into the next name slot (truncated names are refused by the caller). */
static const char *name_add(names *nm, const char *fmt, const char *a, const char *b, bool *too_long)
{
    char *s = nm->s[nm->n++];
    if ((size_t)snprintf(s, NAME_LEN, fmt, a, b) >= NAME_LEN) *too_long = true;
    return s;
}

static const int scalar_shape[1] = {1};

int sp_checkpoint_save(const char *path, const sp_model *m, const sp_optim *o, const sp_train_state *s,
                       const char *const *run_meta)
{
    if (sp_model_check_finite(m) != SP_OK) return sp_error_prefix("%s", path);   /* not resumable: not written */
    bool too_long = false;
    int nk = state_count(o), np = sp_model_nstate(m);   /* parameters and buffers */
    int cap = np + o->nparams * (1 + nk) + 5;
    sp_st_entry *e = sp_xcalloc((size_t)cap, sizeof *e);
    names nm = {sp_xcalloc((size_t)cap, NAME_LEN), 0};
    int n = 0;
    for (int i = 0; i < np; i++) {
        const sp_param *p = sp_model_state(m, i);
        e[n++] = (sp_st_entry){p->name, SP_ST_F32, p->value.ndim, p->value.shape, p->value.data};
    }
    int64_t *steps = sp_xmalloc((size_t)o->nparams * sizeof *steps);
    for (int i = 0; i < o->nparams; i++) {
        const sp_param *p = o->params[i];
        steps[i] = o->steps[i];
        e[n++] = (sp_st_entry){name_add(&nm, SP_ST_STATE_PREFIX "optim/%s/%s", p->name, "step", &too_long), SP_ST_I64, 0,
                               scalar_shape, &steps[i]};
        for (int k = 0; k < nk; k++)
            e[n++] = (sp_st_entry){name_add(&nm, SP_ST_STATE_PREFIX "optim/%s/%s", p->name, o->state_names[k],
                                            &too_long),
                                   SP_ST_F32, p->value.ndim, p->value.shape, o->state[k] + o->offset[i]};
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
    int rc = too_long ? sp_error("%s: a parameter name is too long for a checkpoint tensor name", path)
                      : sp_st_write(path, n, e, meta);
    free(keys);
    free(meta);
    free(steps);
    free(nm.s);
    free(e);
    return rc;
}

/* The scalar `name` of dtype dt into out (8 bytes), or SP_ERR naming the problem. */
static int scalar(const sp_st_file *f, const char *name, sp_st_dtype dt, void *out)
{
    const sp_st_tensor *t = sp_st_find(f, name);
    if (!t)
        return sp_error("%s: no tensor %s (not a resumable checkpoint: those are written by --save-every)",
                        sp_st_path(f), name);
    if (t->dtype != dt || t->numel != 1)
        return sp_error("%s: %s is %s with %zu elements, expected one %s", sp_st_path(f), name,
                        sp_st_dtype_name(t->dtype), t->numel, sp_st_dtype_name(dt));
    return sp_st_read_raw(f, t, out);
}

/* `name` is F32 with p's shape: the tensor, else NULL naming the problem. */
static const sp_st_tensor *buffer(const sp_st_file *f, const char *name, const sp_param *p)
{
    const sp_st_tensor *t = sp_st_find(f, name);
    if (!t)
        return sp_error("%s: no tensor %s (not a resumable checkpoint of this optimizer: those are written by "
                        "--save-every)", sp_st_path(f), name), NULL;
    bool same = t->dtype == SP_ST_F32 && t->ndim == p->value.ndim;
    for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == p->value.shape[d];
    if (!same) {
        char buf[64];
        return sp_error("%s: %s is not F32 of shape %s like %s", sp_st_path(f), name,
                        sp_shape_str(&p->value, buf, sizeof buf), p->name), NULL;
    }
    return t;
}

static int check_meta(const sp_st_file *f, const char *key, const char *want)
{
    char k[NAME_LEN];
    snprintf(k, sizeof k, "run.%s", key);
    const char *got = sp_st_metadata(f, k);
    if (!got)
        return sp_error("%s: no metadata %s (not a resumable checkpoint: those are written by --save-every)",
                        sp_st_path(f), k);
    if (strcmp(got, want) != 0 && strcmp(key, "dataset") == 0)   /* not a flag: a description */
        return sp_error("%s: saved on the training set %s, this run has %s (a resumed run must use the same data)",
                        sp_st_path(f), got, want);
    if (strcmp(got, want) != 0)
        return sp_error("%s: saved with --%s %s, this run has --%s %s (a resumed run must use the same settings)",
                        sp_st_path(f), key, got, key, want);
    return SP_OK;
}

/* The value of key in run_meta (pairs, NULL-terminated), or NULL. */
static const char *meta_value(const char *const *run_meta, const char *key)
{
    for (int i = 0; run_meta && run_meta[i]; i += 2)
        if (strcmp(run_meta[i], key) == 0) return run_meta[i + 1];
    return NULL;
}

/* Everything checked, nothing changed: SP_OK and the loop state in *t. */
static int check_all(const sp_st_file *f, const sp_model *m, const sp_optim *o, sp_train_state *t,
                     const char *const *run_meta)
{
    const char *path = sp_st_path(f);
    if (sp_model_check_saved_name(f, m) != SP_OK) return SP_ERR;
    if (check_meta(f, "optim", o->name) != SP_OK) return SP_ERR;
    for (int i = 0; run_meta && run_meta[i]; i += 2)
        if (check_meta(f, run_meta[i], run_meta[i + 1]) != SP_OK) return SP_ERR;
    int nk = state_count(o);
    char name[NAME_LEN];
    size_t most = 1;
    for (int i = 0; i < o->nparams; i++)
        if (o->params[i]->value.numel > most) most = o->params[i]->value.numel;
    float *tmp = sp_file_alloc(most * sizeof *tmp, 0, path);   /* each buffer checked finite here */
    if (!tmp) return SP_ERR;
    int rc = SP_OK;
    int64_t most_steps = 0;
    const char *most_name = "";
    for (int i = 0; rc == SP_OK && i < o->nparams; i++) {
        const sp_param *p = o->params[i];
        int64_t st;
        snprintf(name, sizeof name, SP_ST_STATE_PREFIX "optim/%s/step", p->name);
        if ((rc = scalar(f, name, SP_ST_I64, &st)) != SP_OK) break;
        if (st < 0) rc = sp_error("%s: %s = %lld (expected >= 0)", path, name, (long long)st);
        if (st > most_steps) most_steps = st, most_name = p->name;
        for (int k = 0; rc == SP_OK && k < nk; k++) {
            snprintf(name, sizeof name, SP_ST_STATE_PREFIX "optim/%s/%s", p->name, o->state_names[k]);
            const sp_st_tensor *t = buffer(f, name, p);
            rc = t ? sp_st_read_raw(f, t, tmp) : SP_ERR;
            if (rc == SP_OK) rc = sp_check_finite_f32(f, name, tmp, p->value.numel);
        }
    }
    free(tmp);
    if (rc != SP_OK) return SP_ERR;
    int64_t step, epoch, batch;
    if (scalar(f, SP_ST_STATE_PREFIX "train/step", SP_ST_I64, &step) != SP_OK ||
        scalar(f, SP_ST_STATE_PREFIX "train/epoch", SP_ST_I64, &epoch) != SP_OK ||
        scalar(f, SP_ST_STATE_PREFIX "train/batch", SP_ST_I64, &batch) != SP_OK ||
        scalar(f, SP_ST_STATE_PREFIX "train/epoch_loss", SP_ST_F64, &t->epoch_loss) != SP_OK ||
        scalar(f, SP_ST_STATE_PREFIX "train/lr", SP_ST_F64, &t->lr) != SP_OK)
        return SP_ERR;
    if (!isfinite(t->epoch_loss))
        return sp_error("%s: " SP_ST_STATE_PREFIX "train/epoch_loss is %g (expected a finite value)", path,
                        t->epoch_loss);
    /* step = epoch x (batches an epoch, an int) + batch: a step past (epoch + 1) x INT32_MAX
     * (2^62 in a crafted file) is no step of any run */
    if (step < 0 || batch < 0 || batch > step || epoch < 0 || epoch > INT32_MAX || !(t->lr >= 0) ||
        !isfinite(t->lr) || batch > INT32_MAX || step > (epoch + 1) * (int64_t)INT32_MAX)
        return sp_error("%s: inconsistent training state (step %lld, epoch %lld, batch %lld, lr %g)", path,
                        (long long)step, (long long)epoch, (long long)batch, t->lr);
    /* the rate is the schedule's at that epoch (sp_train sets it at each epoch's start):
     * a checkpoint whose rate is another would be resumed with the schedule's, silently */
    const char *lr0 = meta_value(run_meta, "lr"), *spec = meta_value(run_meta, "lr-schedule");
    if (lr0 && spec) {
        sp_lr_schedule sched = sp_lr_parse(spec, strtod(lr0, NULL));
        if (isnan(sched.lr0)) return sp_error_prefix("%s: the run's metadata", path);
        double want = sp_lr_at(&sched, (int)epoch);
        if (!(fabs(t->lr - want) <= 1e-12 * fabs(want)))
            return sp_error("%s: " SP_ST_STATE_PREFIX "train/lr is %g, but --lr %s with --lr-schedule %s gives %.17g "
                            "at epoch %lld (expected the schedule's rate)",
                            path, t->lr, lr0, spec, want, (long long)epoch);
    }
    /* each training step steps a parameter at most once: a count above the run's (INT64_MAX
     * in a crafted file would overflow at the next update) is no state of this run */
    if (most_steps > step)
        return sp_error("%s: " SP_ST_STATE_PREFIX "optim/%s/step = %lld, more than the %lld training steps "
                        "(expected <= the training step)", path, most_name, (long long)most_steps, (long long)step);
    t->step = (long)step;
    t->epoch = (int)epoch;
    t->batch = (long)batch;
    return SP_OK;
}

int sp_checkpoint_load(const char *path, sp_model *m, sp_optim *o, sp_train_state *s,
                       const char *const *run_meta)
{
    sp_st_file *f = sp_st_open(path);
    if (!f) return SP_ERR;
    sp_train_state t = {0};
    if (check_all(f, m, o, &t, run_meta) != SP_OK || sp_model_load(m, path) != SP_OK) {
        sp_st_close(f);
        return SP_ERR;
    }
    int nk = state_count(o);
    char name[NAME_LEN];
    /* checked above: only a read error (the file changed under us) fails now */
    int rc = SP_OK;
    for (int i = 0; rc == SP_OK && i < o->nparams; i++) {
        const sp_param *p = o->params[i];
        int64_t st = 0;
        snprintf(name, sizeof name, SP_ST_STATE_PREFIX "optim/%s/step", p->name);
        rc = scalar(f, name, SP_ST_I64, &st);
        o->steps[i] = (long)st;
        for (int k = 0; rc == SP_OK && k < nk; k++) {
            snprintf(name, sizeof name, SP_ST_STATE_PREFIX "optim/%s/%s", p->name, o->state_names[k]);
            rc = sp_st_read_raw(f, buffer(f, name, p), o->state[k] + o->offset[i]);
        }
    }
    sp_st_close(f);
    if (rc != SP_OK) return SP_ERR;
    sp_optim_set_lr(o, t.lr);
    *s = t;
    return SP_OK;
}
