/* dataset.c — the dataset interface and the in-memory datasets the readers build. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/io/safetensors.h"
#include "data/data.h"
#include "data/rowset.h"
#include "core/guard.h"

/* Samples as bytes (pixels, divided by `divisor` on the way out) or as floats. A padded
 * byte dataset (sp_dataset_pad) keeps its images as read, src_h × src_w, and zero-pads
 * each sample as get writes it: base.shape is the padded shape. */
typedef struct mem_dataset {
    sp_dataset base;
    uint8_t *u8;
    float *f32;
    float divisor;
    int *labels;
    int src_h, src_w, top, left;   /* the images as held, and where they sit (0: unpadded) */
} mem_dataset;

size_t sp_dataset_sample_numel(const sp_dataset *d)
{
    SP_GUARD(0);
    if (!d) sp_fail("sp_dataset_sample_numel: argument 'd' is NULL");
    return sp_shape_numel(d->ndim, d->shape);
}

static void mem_get(sp_dataset *d, int i, float *x, int *y)
{
    mem_dataset *m = (mem_dataset *)d;
    size_t k = sp_dataset_sample_numel(d);
    if (m->u8 && m->src_h) {   /* padded: zeros, then the held rows in place */
        int C = d->shape[0], H = d->shape[1], W = d->shape[2], h0 = m->src_h, w0 = m->src_w;
        const uint8_t *s = m->u8 + (size_t)i * (size_t)C * (size_t)h0 * (size_t)w0;
        float zero = 0.0f / m->divisor;   /* what a padding byte of 0 gave */
        for (size_t j = 0; j < k; j++) x[j] = zero;
        for (int c = 0; c < C; c++)
            for (int h = 0; h < h0; h++) {
                float *row = x + ((size_t)c * H + (size_t)(m->top + h)) * W + m->left;
                const uint8_t *in = s + ((size_t)c * h0 + h) * w0;
                for (int w = 0; w < w0; w++) row[w] = (float)in[w] / m->divisor;
            }
    } else if (m->u8) {
        const uint8_t *s = m->u8 + (size_t)i * k;
        for (size_t j = 0; j < k; j++) x[j] = (float)s[j] / m->divisor;   /* as ToTensor */
    } else {
        memcpy(x, m->f32 + (size_t)i * k, k * sizeof *x);
    }
    *y = m->labels[i];
}

static int mem_label(sp_dataset *d, int i) { return ((mem_dataset *)d)->labels[i]; }

size_t sp_dataset_bytes(const sp_dataset *d)
{
    if (d && d->read_rows) return sp_rowset_bytes(d);
    if (!d || d->get != mem_get) return 0;
    const mem_dataset *m = (const mem_dataset *)d;
    size_t elem = m->u8 ? 1 : sizeof(float);
    size_t held = m->src_h ? (size_t)d->shape[0] * (size_t)m->src_h * (size_t)m->src_w : sp_dataset_sample_numel(d);
    return (size_t)d->n * (held * elem + sizeof(int));
}

static void mem_free(sp_dataset *d)
{
    mem_dataset *m = (mem_dataset *)d;
    free(m->u8);
    free(m->f32);
    free(m->labels);
    free(m);
}

/* Storage for n samples of `shape`, elem bytes each value; sizes checked for overflow
 * and against the ceiling on file-driven allocations. NULL on failure. */
static mem_dataset *mem_new(const char *name, int n, int ndim, const int *shape, int nclasses, size_t elem,
                            void **x)
{
    if (n <= 0) return sp_error("%s: no samples", name), NULL;
    if (ndim < 1 || ndim > 3) return sp_error("%s: samples with %d dimensions (expected 1 to 3)", name, ndim), NULL;
    if (nclasses < 1) return sp_error("%s: %d classes (expected >= 1)", name, nclasses), NULL;
    size_t bytes = elem;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 1) return sp_error("%s: sample dimension %d has size %d (expected >= 1)", name, i, shape[i]), NULL;
        if (__builtin_mul_overflow(bytes, (size_t)shape[i], &bytes)) bytes = SIZE_MAX;
    }
    if (__builtin_mul_overflow(bytes, (size_t)n, &bytes)) bytes = SIZE_MAX;
    char what[320];
    snprintf(what, sizeof what, "%s: %d samples", name, n);
    void *data = sp_file_alloc(bytes, 1, what);
    if (!data) return NULL;
    int *labels = sp_file_alloc((size_t)n * sizeof *labels, 1, what);
    if (!labels) return free(data), NULL;
    mem_dataset *m = sp_xcalloc(1, sizeof *m);
    snprintf(m->base.name, sizeof m->base.name, "%s", name);
    m->base.n = n;
    m->base.ndim = ndim;
    memcpy(m->base.shape, shape, (size_t)ndim * sizeof *shape);
    m->base.nclasses = nclasses;
    m->base.get = mem_get;
    m->base.label = mem_label;
    m->base.free = mem_free;
    m->labels = labels;
    *x = data;
    return m;
}

sp_dataset *sp_dataset_new_u8(const char *name, int n, int ndim, const int *shape, int nclasses,
                              float divisor, uint8_t **x, int **labels)
{
    if (n < 0) return sp_error("sp_dataset_new_u8: argument 'n' is %d (expected >= 0)", n), NULL;
    if (ndim < 0) return sp_error("sp_dataset_new_u8: argument 'ndim' is %d (expected >= 0)", ndim), NULL;
    if (!name) return sp_error("sp_dataset_new_u8: argument 'name' is NULL"), NULL;
    if (ndim > 0 && !shape) return sp_error("sp_dataset_new_u8: argument 'shape' is NULL"), NULL;
    if (!x) return sp_error("sp_dataset_new_u8: argument 'x' is NULL"), NULL;
    if (!labels) return sp_error("sp_dataset_new_u8: argument 'labels' is NULL"), NULL;
    void *data;
    mem_dataset *m = mem_new(name, n, ndim, shape, nclasses, 1, &data);
    if (!m) return NULL;
    m->divisor = divisor;
    m->u8 = data;
    *x = m->u8;
    *labels = m->labels;
    return &m->base;
}

sp_dataset *sp_dataset_new_f32(const char *name, int n, int ndim, const int *shape, int nclasses,
                               float **x, int **labels)
{
    if (n < 0) return sp_error("sp_dataset_new_f32: argument 'n' is %d (expected >= 0)", n), NULL;
    if (ndim < 0) return sp_error("sp_dataset_new_f32: argument 'ndim' is %d (expected >= 0)", ndim), NULL;
    if (!name) return sp_error("sp_dataset_new_f32: argument 'name' is NULL"), NULL;
    if (ndim > 0 && !shape) return sp_error("sp_dataset_new_f32: argument 'shape' is NULL"), NULL;
    if (!x) return sp_error("sp_dataset_new_f32: argument 'x' is NULL"), NULL;
    if (!labels) return sp_error("sp_dataset_new_f32: argument 'labels' is NULL"), NULL;
    void *data;
    mem_dataset *m = mem_new(name, n, ndim, shape, nclasses, sizeof(float), &data);
    if (!m) return NULL;
    m->f32 = data;
    *x = m->f32;
    *labels = m->labels;
    return &m->base;
}

int sp_dataset_check_labels(const sp_dataset *d, const int *labels, const char *what)
{
    if (!d) return sp_error("sp_dataset_check_labels: argument 'd' is NULL");
    if (!labels) return sp_error("sp_dataset_check_labels: argument 'labels' is NULL");
    if (!what) return sp_error("sp_dataset_check_labels: argument 'what' is NULL");
    for (int i = 0; i < d->n; i++)
        if (labels[i] < 0 || labels[i] >= d->nclasses)
            return sp_error("%s: label %d of sample %d is out of range (expected 0..%d)", what, labels[i], i,
                            d->nclasses - 1);
    return SP_OK;
}

int sp_dataset_check_finite(const sp_dataset *d, const float *x, const char *what)
{
    if (!d) return sp_error("sp_dataset_check_finite: argument 'd' is NULL");
    if (!x) return sp_error("sp_dataset_check_finite: argument 'x' is NULL");
    if (!what) return sp_error("sp_dataset_check_finite: argument 'what' is NULL");
    size_t k = sp_dataset_sample_numel(d), total = (size_t)d->n * k;
    for (size_t j = 0; j < total; j++)
        if (!isfinite(x[j])) {
            size_t e = j % k;
            char where[64] = "";
            if (d->ndim == 2) snprintf(where, sizeof where, " (t = %zu, c = %zu)", e / (size_t)d->shape[1],
                                       e % (size_t)d->shape[1]);
            return sp_error("%s: sample %zu has a non-finite input %s at element %zu%s (inputs must be finite)",
                            what, j / k, isnan(x[j]) ? "NaN" : x[j] > 0 ? "+inf" : "-inf", e, where);
        }
    return SP_OK;
}

static int channel_dim(const sp_dataset *d) { return d->ndim == 3 ? 0 : d->ndim - 1; }

int sp_dataset_normalize(sp_dataset *d, int nch, const float *mean, const float *std)
{
    if (nch < 0) return sp_error("sp_dataset_normalize: argument 'nch' is %d (expected >= 0)", nch);
    if (!d) return sp_error("sp_dataset_normalize: argument 'd' is NULL");
    if (!mean) return sp_error("sp_dataset_normalize: argument 'mean' is NULL");
    if (!std) return sp_error("sp_dataset_normalize: argument 'std' is NULL");
    int want = d->shape[channel_dim(d)];
    if (nch != 1 && nch != want)
        return sp_error("%s: normalisation with %d channels, expected %d (or 1)", d->name, nch, want);
    if (nch > SP_DATA_MAX_CH) return sp_error("%s: normalisation of more than %d channels", d->name, SP_DATA_MAX_CH);
    for (int c = 0; c < nch; c++) {
        if (!(std[c] > 0.0f) || !isfinite(std[c]) || !isfinite(mean[c]))
            return sp_error("%s: normalisation mean[%d] = %g, std[%d] = %g (expected finite, std > 0)", d->name, c,
                            mean[c], c, std[c]);
    }
    for (int c = 0; c < nch; c++) {
        d->mean[c] = mean[c];
        d->std[c] = std[c];
    }
    d->norm_channels = nch;
    return SP_OK;
}

int sp_dataset_label(sp_dataset *d, int i, float *scratch, int *y)
{
    SP_GUARD(SP_ERR);
    if (!d) sp_fail("sp_dataset_label: argument 'd' is NULL");
    if (!y) sp_fail("sp_dataset_label: argument 'y' is NULL");
    if (i < 0 || i >= d->n) sp_fail("%s: sample %d out of range (dataset has %d)", d->name, i, d->n);
    if (d->label) {
        *y = d->label(d, i);
        return 0;
    }
    if (!scratch) sp_fail("sp_dataset_label: argument 'scratch' is NULL (%s has no label reader)", d->name);
    d->get(d, i, scratch, y);
    return 1;
}

static void dataset_get(sp_dataset *d, int i, float *x, int *y)
{
    if (!d) sp_fail("sp_dataset_get: argument 'd' is NULL");
    if (!x) sp_fail("sp_dataset_get: argument 'x' is NULL");
    if (!y) sp_fail("sp_dataset_get: argument 'y' is NULL");
    if (i < 0 || i >= d->n) sp_fail("%s: sample %d out of range (dataset has %d)", d->name, i, d->n);
    d->get(d, i, x, y);
    if (!d->norm_channels) return;
    size_t k = sp_dataset_sample_numel(d);
    int nch = d->norm_channels;
    /* channel of element j: C×H×W → j / (H·W); T×C → j % C */
    size_t plane = d->ndim == 3 ? (size_t)d->shape[1] * (size_t)d->shape[2] : 1;
    size_t cdim = (size_t)d->shape[channel_dim(d)];
    for (size_t j = 0; j < k; j++) {
        int c = nch == 1 ? 0 : d->ndim == 3 ? (int)(j / plane) : (int)(j % cdim);
        x[j] = (x[j] - d->mean[c]) / d->std[c];
    }
}

int sp_dataset_get(sp_dataset *d, int i, float *x, int *y)
{
    SP_GUARD(SP_ERR);
    dataset_get(d, i, x, y);
    return SP_OK;
}

int sp_dataset_read_rows(sp_dataset *d, const unsigned char *keep, bool last)
{
    if (!d) return sp_error("sp_dataset_read_rows: argument 'd' is NULL");
    return d->read_rows ? d->read_rows(d, keep, last) : SP_OK;
}

void sp_dataset_free(sp_dataset *d)
{
    if (!d) return;
    if (d) d->free(d);
}

int sp_dataset_pad(sp_dataset *d, int size)
{
    if (!d) return sp_error("sp_dataset_pad: argument 'd' is NULL");
    mem_dataset *m = (mem_dataset *)d;
    bool rows = sp_is_rowset(d);
    if (!rows && (d->get != mem_get || !m->u8 || d->ndim != 3))
        return sp_error("%s: padding needs an in-memory image dataset of C×H×W bytes", d->name);
    int H = d->shape[1], W = d->shape[2];
    if (size < H || size < W || size > 65536)
        return sp_error("%s: cannot pad %dx%d images to %dx%d (expected a size in %d..65536)", d->name, H, W, size,
                        size, H > W ? H : W);
    if (size == H && size == W) return SP_OK;
    if (rows) {   /* its get pads each sample as it is read, the same way */
        d->shape[1] = d->shape[2] = size;
        return SP_OK;
    }
    /* nothing is copied: get pads each sample as it writes it (the bytes stay as read,
     * 47 MB of Fashion-MNIST's training images instead of 61 MB at 32×32) */
    if (!m->src_h) m->src_h = H, m->src_w = W;
    m->top += (size - H) / 2;   /* padding a padded set: the offsets add, as copies did */
    m->left += (size - W) / 2;
    d->shape[1] = d->shape[2] = size;
    return SP_OK;
}

int sp_dataset_save(sp_dataset *d, const char *path)
{
    if (!d) return sp_error("sp_dataset_save: argument 'd' is NULL");
    if (!path) return sp_error("sp_dataset_save: argument 'path' is NULL");
    size_t k = sp_dataset_sample_numel(d), bytes;
    if (__builtin_mul_overflow((size_t)d->n * k, sizeof(float), &bytes)) bytes = SIZE_MAX;
    float *x = sp_file_alloc(bytes, 0, path);
    if (!x) return SP_ERR;
    int64_t *y = sp_xmalloc((size_t)d->n * sizeof *y);
    for (int i = 0; i < d->n; i++) {
        int label;
        sp_dataset_get(d, i, x + (size_t)i * k, &label);
        y[i] = label;
    }
    int xshape[4] = {d->n, d->shape[0], d->shape[1], d->shape[2]}, yshape[1] = {d->n};
    sp_st_entry e[2] = {{"x", SP_ST_F32, 1 + d->ndim, xshape, x}, {"y", SP_ST_I64, 1, yshape, y}};
    char nclasses[16];
    snprintf(nclasses, sizeof nclasses, "%d", d->nclasses);
    const char *meta[] = {"nclasses", nclasses, NULL};
    int rc = sp_st_write(path, 2, e, meta);
    free(x);
    free(y);
    return rc;
}
