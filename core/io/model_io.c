/* model_io.c — a model's weights in and out of a safetensors file: the walk over its
 * parameters and buffers, their PyTorch names, the "scanprop_model" metadata, and the
 * checks that refuse a file that does not fit the model before anything is overwritten.
 * The file format itself is core/io/safetensors.c. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/io/model_io.h"
#include "core/io/safetensors.h"
#include "core/model.h"

int sp_model_save(const sp_model *m, const char *path)
{
    if (!m) return sp_error("sp_model_save: argument 'm' is NULL");
    if (!path) return sp_error("sp_model_save: argument 'path' is NULL");
    if (sp_model_check_finite(m) != SP_OK) return sp_error_prefix("%s", path);
    int n = sp_model_nstate(m);   /* parameters and buffers */
    const char **names = sp_xcalloc((size_t)(n ? n : 1), sizeof *names);
    const sp_tensor **ts = sp_xcalloc((size_t)(n ? n : 1), sizeof *ts);
    for (int i = 0; i < n; i++) {
        names[i] = sp_model_state(m, i)->name;
        ts[i] = &sp_model_state(m, i)->value;
    }
    const char *meta[] = {"scanprop_model", m->name, NULL};
    int rc = sp_st_save(path, n, names, ts, meta);
    free(names);
    free(ts);
    return rc;
}

int sp_model_check_finite(const sp_model *m)
{
    if (!m) return sp_error("sp_model_check_finite: argument 'm' is NULL");
    for (int i = 0; i < sp_model_nstate(m); i++) {
        const sp_param *p = sp_model_state(m, i);
        if (p->value.device != SP_CPU || !p->value.data) continue;
        for (size_t k = 0; k < p->value.numel; k++)
            if (!isfinite(p->value.data[k]))
                return sp_error("model '%s': %s %s[%zu] is %g (expected finite values: the run diverged?)", m->name,
                                i < m->nparams ? "parameter" : "buffer", p->name, k, (double)p->value.data[k]);
    }
    return SP_OK;
}

int sp_model_check_saved_name(const sp_st_file *f, const sp_model *m)
{
    if (!f) return sp_error("sp_model_check_saved_name: argument 'f' is NULL");
    if (!m) return sp_error("sp_model_check_saved_name: argument 'm' is NULL");
    const char *saved = sp_st_metadata(f, "scanprop_model");
    if (saved && strcmp(saved, m->name) != 0)
        return sp_error("%s is a %s checkpoint, not a %s one", sp_st_path(f), saved, m->name);
    return SP_OK;
}

static void note_problem(char *first, size_t len, int *count, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void note_problem(char *first, size_t len, int *count, const char *fmt, ...)
{
    if ((*count)++) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(first, len, fmt, ap);
    va_end(ap);
}

int sp_check_finite_f32(const sp_st_file *f, const char *name, const float *v, size_t n)
{
    if (!f) return sp_error("sp_check_finite_f32: argument 'f' is NULL");
    if (!name) return sp_error("sp_check_finite_f32: argument 'name' is NULL");
    if (!v) return sp_error("sp_check_finite_f32: argument 'v' is NULL");
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return sp_error("%s: %s[%zu] is %g (expected finite values: a diverged run's checkpoint?)", sp_st_path(f),
                            name, i, (double)v[i]);
    return SP_OK;
}

/* Every parameter and buffer the file holds for m read into scratch and checked finite,
 * before any is overwritten. */
static int check_finite(const sp_st_file *f, const sp_model *m)
{
    size_t most = 1;
    for (int i = 0; i < sp_model_nstate(m); i++)
        if (sp_model_state(m, i)->value.numel > most) most = sp_model_state(m, i)->value.numel;
    float *tmp = sp_file_alloc(most * sizeof *tmp, 0, sp_st_path(f));
    if (!tmp) return SP_ERR;
    int rc = SP_OK;
    for (int i = 0; rc == SP_OK && i < sp_model_nstate(m); i++) {
        const sp_param *p = sp_model_state(m, i);
        rc = sp_st_read_f32(f, p->name, tmp, p->value.ndim, p->value.shape);
        if (rc == SP_OK) rc = sp_check_finite_f32(f, p->name, tmp, p->value.numel);
    }
    free(tmp);
    return rc;
}

int sp_model_load(sp_model *m, const char *path)
{
    if (!m || !path) return sp_error("sp_model_load: %s is NULL", !m ? "the model" : "the path");
    for (int i = 0; i < m->nparams; i++)
        if (m->params[i]->value.device != SP_CPU)
            return sp_error("%s: parameter %s is not on the CPU; load before moving the model", path,
                            m->params[i]->name);
    sp_st_file *f = sp_st_open(path);
    if (!f) return SP_ERR;
    char first[512] = "", shape_buf[64];
    int problems = 0;
    for (int i = 0; i < sp_model_nstate(m); i++) {
        const sp_param *p = sp_model_state(m, i);
        const sp_st_tensor *t = sp_st_find(f, p->name);
        if (!t) {
            note_problem(first, sizeof first, &problems, "missing tensor %s (expected shape %s)",
                         p->name, sp_shape_str(&p->value, shape_buf, sizeof shape_buf));
        } else if (!sp_st_dtype_is_float(t->dtype)) {
            note_problem(first, sizeof first, &problems, "%s has dtype %s, expected a float dtype",
                         p->name, sp_st_dtype_name(t->dtype));
        } else {
            char msg[400];
            if (sp_st_shape_problem(t, p->value.ndim, p->value.shape, msg, sizeof msg))
                note_problem(first, sizeof first, &problems, "%s", msg);
        }
    }
    for (int i = 0; i < sp_st_count(f); i++) {
        const char *name = sp_st_at(f, i)->name;
        if (strncmp(name, SP_ST_STATE_PREFIX, strlen(SP_ST_STATE_PREFIX)) != 0 && !sp_model_param(m, name))
            note_problem(first, sizeof first, &problems, "unexpected tensor %s (model %s has no such "
                         "parameter)", name, m->name);
    }
    int rc = SP_OK;
    if (!problems) rc = check_finite(f, m);   /* a NaN weight would train to NaN, silently */
    /* another model's checkpoint: its 20 mismatches say less than its name */
    if (problems && sp_model_check_saved_name(f, m) != SP_OK)
        rc = SP_ERR;
    else if (problems > 1)
        rc = sp_error("%s: %s; and %d more problem%s", path, first, problems - 1, problems > 2 ? "s" : "");
    else if (problems)
        rc = sp_error("%s: %s", path, first);
    /* Every check passed: only a read error (the file changed under us) can fail now,
     * and then some parameters may already hold the new values. */
    for (int i = 0; rc == SP_OK && i < sp_model_nstate(m); i++) {
        sp_param *p = sp_model_state(m, i);
        rc = sp_st_read_f32(f, p->name, p->value.data, p->value.ndim, p->value.shape);
    }
    sp_st_close(f);
    return rc;
}
