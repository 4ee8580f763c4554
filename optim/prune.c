/* prune.c — magnitude pruning, masks on parameters, torch-named checkpoints (prune.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/io/safetensors.h"
#include "core/io/model_io.h"
#include "optim/prune.h"

bool sp_prune_eligible(const sp_param *p)
{
    size_t len = strlen(p->name);
    return p->value.ndim >= 2 && len >= 7 && strcmp(p->name + len - 7, ".weight") == 0;
}

static sp_pruning *pruning_new(sp_model *m)
{
    sp_pruning *p = sp_xcalloc(1, sizeof *p);
    p->m = m;
    p->mask = sp_xcalloc((size_t)(m->nparams ? m->nparams : 1), sizeof *p->mask);
    return p;
}

static float *mask_of(sp_pruning *p, int i)
{
    sp_param *w = p->m->params[i];
    if (!p->mask[i]) {
        p->mask[i] = sp_xmalloc(w->value.numel * sizeof(float));
        for (size_t j = 0; j < w->value.numel; j++) p->mask[i][j] = 1.0f;
        w->mask = p->mask[i];
    }
    return p->mask[i];
}

static void apply(const sp_pruning *p)
{
    for (int i = 0; i < p->m->nparams; i++) {
        sp_param *w = p->m->params[i];
        if (!p->mask[i]) continue;
        w->mask = p->mask[i];
        for (size_t j = 0; j < w->value.numel; j++) w->value.data[j] *= p->mask[i][j];
    }
}

/* An entry of the ranking: |w| (pruned entries rank first, as -1), and where it is. */
typedef struct entry {
    float mag;
    int param;
    int64_t pos;
} entry;

static int cmp_entry(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    if (x->mag != y->mag) return x->mag < y->mag ? -1 : 1;
    if (x->param != y->param) return x->param < y->param ? -1 : 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

/* Prune the k smallest of the given entries. */
static void prune_smallest(sp_pruning *p, entry *e, size_t n, size_t k)
{
    qsort(e, n, sizeof *e, cmp_entry);
    for (size_t j = 0; j < k && j < n; j++) mask_of(p, e[j].param)[e[j].pos] = 0.0f;
}

static size_t fill_entries(sp_pruning *p, int i, entry *e)
{
    const sp_param *w = p->m->params[i];
    for (size_t j = 0; j < w->value.numel; j++) {
        bool gone = p->mask[i] && p->mask[i][j] == 0.0f;
        e[j] = (entry){gone ? -1.0f : fabsf(w->value.data[j]), i, (int64_t)j};
    }
    return w->value.numel;
}

sp_pruning *sp_prune_magnitude(sp_model *m, sp_pruning *p, double amount, sp_prune_scope scope)
{
    if (!(amount >= 0 && amount < 1)) sp_fail("--prune %g: expected a fraction in [0, 1)", amount);
    if (!p) p = pruning_new(m);
    size_t total = 0;
    int eligible = 0;
    for (int i = 0; i < m->nparams; i++)
        if (sp_prune_eligible(m->params[i])) {
            if (m->params[i]->value.device != SP_CPU) sp_fail("pruning: parameter %s is not on the CPU", m->params[i]->name);
            total += m->params[i]->value.numel;
            eligible++;
        }
    if (!eligible) sp_fail("pruning: model %s has no conv or linear weights", m->name);
    if (scope == SP_PRUNE_GLOBAL) {
        entry *e = sp_xmalloc(total * sizeof *e);
        size_t n = 0;
        for (int i = 0; i < m->nparams; i++)
            if (sp_prune_eligible(m->params[i])) n += fill_entries(p, i, e + n);
        prune_smallest(p, e, n, (size_t)llround(amount * (double)n));
        free(e);
    } else {
        for (int i = 0; i < m->nparams; i++) {
            if (!sp_prune_eligible(m->params[i])) continue;
            size_t numel = m->params[i]->value.numel;
            entry *e = sp_xmalloc(numel * sizeof *e);
            fill_entries(p, i, e);
            prune_smallest(p, e, numel, (size_t)llround(amount * (double)numel));
            free(e);
        }
    }
    for (int i = 0; i < m->nparams; i++)
        if (sp_prune_eligible(m->params[i])) mask_of(p, i);   /* every eligible weight gets a mask */
    apply(p);
    return p;
}

int64_t sp_prune_kept(const sp_pruning *p, int i)
{
    const sp_param *w = p->m->params[i];
    if (!p->mask[i]) return (int64_t)w->value.numel;
    int64_t k = 0;
    for (size_t j = 0; j < w->value.numel; j++) k += p->mask[i][j] != 0.0f;
    return k;
}

void sp_prune_free(sp_pruning *p)
{
    if (!p) return;
    for (int i = 0; i < p->m->nparams; i++)
        if (p->mask[i]) {
            if (p->m->params[i]->mask == p->mask[i]) p->m->params[i]->mask = NULL;
            free(p->mask[i]);
        }
    free(p->mask);
    free(p);
}

/* ---- checkpoints ------------------------------------------------------------------------ */

#define NAME_MAX_LEN (2 * SP_NAME_LEN + 8)

int sp_prune_save(const sp_pruning *p, const sp_model *m, const char *path)
{
    if (!p) return sp_model_save(m, path);
    int n = 0;
    for (int i = 0; i < m->nparams; i++) n += p->mask[i] ? 2 : 1;
    const char **names = sp_xcalloc((size_t)n, sizeof *names);
    const sp_tensor **ts = sp_xcalloc((size_t)n, sizeof *ts);
    char (*buf)[NAME_MAX_LEN] = sp_xcalloc((size_t)n, sizeof *buf);
    sp_tensor *masks = sp_xcalloc((size_t)(m->nparams ? m->nparams : 1), sizeof *masks);
    int k = 0;
    for (int i = 0; i < m->nparams; i++) {
        const sp_param *w = m->params[i];
        if (!p->mask[i]) {
            names[k] = w->name;
            ts[k++] = &w->value;
            continue;
        }
        snprintf(buf[k], NAME_MAX_LEN, "%s_orig", w->name);
        names[k] = buf[k];
        ts[k++] = &w->value;
        masks[i] = sp_tensor_view(p->mask[i], w->value.ndim, w->value.shape);
        snprintf(buf[k], NAME_MAX_LEN, "%s_mask", w->name);
        names[k] = buf[k];
        ts[k++] = &masks[i];
    }
    const char *meta[] = {"scanprop_model", m->name, "pruning", "torch.nn.utils.prune (weight_orig, weight_mask)", NULL};
    int st = sp_st_save(path, n, names, ts, meta);
    free(masks);
    free(buf);
    free(ts);
    free(names);
    return st;
}

static bool ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a > b && strcmp(s + a - b, tail) == 0;
}

int sp_prune_load(sp_model *m, const char *path, sp_pruning **out)
{
    *out = NULL;
    sp_st_file *f = sp_st_open(path);
    if (!f) return SP_ERR;
    bool any = false;
    for (int i = 0; i < sp_st_count(f); i++) any |= ends_with(sp_st_at(f, i)->name, "_mask");
    if (!any) {
        sp_st_close(f);
        return sp_model_load(m, path);
    }
    /* checks first */
    int used = 0, st = SP_OK;
    for (int i = 0; i < m->nparams && st == SP_OK; i++) {
        sp_param *w = m->params[i];
        char orig[NAME_MAX_LEN], mask[NAME_MAX_LEN];
        snprintf(orig, sizeof orig, "%s_orig", w->name);
        snprintf(mask, sizeof mask, "%s_mask", w->name);
        bool has_orig = sp_st_find(f, orig) != NULL, has_mask = sp_st_find(f, mask) != NULL, plain = sp_st_find(f, w->name) != NULL;
        if (has_orig != has_mask)
            st = sp_error("%s: %s without %s (a pruned parameter needs both)", path, has_orig ? orig : mask,
                          has_orig ? mask : orig);
        else if (has_orig && plain)
            st = sp_error("%s: both %s and %s (expected one of them)", path, w->name, orig);
        else if (!has_orig && !plain)
            st = sp_error("%s: missing tensor %s (or %s and %s)", path, w->name, orig, mask);
        used += has_orig ? 2 : 1;
    }
    if (st == SP_OK && used != sp_st_count(f))
        for (int i = 0; i < sp_st_count(f) && st == SP_OK; i++) {
            char base[NAME_MAX_LEN];
            snprintf(base, sizeof base, "%s", sp_st_at(f, i)->name);
            if (ends_with(base, "_orig") || ends_with(base, "_mask")) base[strlen(base) - 5] = 0;
            if (!sp_model_param(m, base))
                st = sp_error("%s: unexpected tensor %s (model %s has no such parameter)", path, sp_st_at(f, i)->name,
                              m->name);
        }
    if (st != SP_OK) {
        (void)sp_model_check_saved_name(f, m);   /* another model's checkpoint: say so instead */
        sp_st_close(f);
        return SP_ERR;
    }
    sp_pruning *p = pruning_new(m);
    for (int i = 0; i < m->nparams && st == SP_OK; i++) {
        sp_param *w = m->params[i];
        char orig[NAME_MAX_LEN], mask[NAME_MAX_LEN];
        snprintf(orig, sizeof orig, "%s_orig", w->name);
        snprintf(mask, sizeof mask, "%s_mask", w->name);
        if (!sp_st_find(f, orig)) {
            st = sp_st_read_f32(f, w->name, w->value.data, w->value.ndim, w->value.shape);
            if (st == SP_OK) st = sp_check_finite_f32(f, w->name, w->value.data, w->value.numel);
            continue;
        }
        st = sp_st_read_f32(f, orig, w->value.data, w->value.ndim, w->value.shape);
        if (st == SP_OK) st = sp_check_finite_f32(f, orig, w->value.data, w->value.numel);
        float *mk = mask_of(p, i);
        if (st == SP_OK) st = sp_st_read_f32(f, mask, mk, w->value.ndim, w->value.shape);
        for (size_t j = 0; st == SP_OK && j < w->value.numel; j++)
            if (mk[j] != 0.0f && mk[j] != 1.0f) st = sp_error("%s: %s has a value %g (expected 0 or 1)", path, mask, mk[j]);
    }
    if (st != SP_OK) (void)sp_model_check_saved_name(f, m);
    sp_st_close(f);
    if (st != SP_OK) {
        sp_prune_free(p);
        return SP_ERR;
    }
    apply(p);
    *out = p;
    return SP_OK;
}
