/* rowset.c — a dataset of byte images holding only the rows it was asked for (see
 * rowset.h); the readers in idx.c and cifar.c fill it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "data/rowset.h"

static void rowset_get(sp_dataset *d, int i, float *x, int *y)
{
    sp_rowset *r = (sp_rowset *)d;
    if (r->slot[i] < 0)
        sp_fail("%s: sample %d was not read by this process (not asked for by sp_dataset_read_rows)", d->name, i);
    const uint8_t *s = sp_rowset_pixels(r, i);
    int H = d->shape[1], W = d->shape[2];
    if (H == r->h && W == r->w) {
        for (size_t j = 0; j < r->row_bytes; j++) x[j] = (float)s[j] / 255.0f;   /* as mem_get */
    } else {   /* zero-padded, centred: as sp_dataset_pad */
        memset(x, 0, (size_t)r->c * (size_t)H * (size_t)W * sizeof *x);
        int top = (H - r->h) / 2, left = (W - r->w) / 2;
        for (int c = 0; c < r->c; c++)
            for (int h = 0; h < r->h; h++)
                for (int w = 0; w < r->w; w++)
                    x[((size_t)c * H + top + h) * W + left + w] = (float)s[((size_t)c * r->h + h) * r->w + w] / 255.0f;
    }
    *y = r->label[i];
}

static int rowset_label(sp_dataset *d, int i)
{
    sp_rowset *r = (sp_rowset *)d;
    if (r->label[i] < 0)
        sp_fail("%s: the label of sample %d was not read by this process (not asked for by sp_dataset_read_rows)",
                d->name, i);
    return r->label[i];
}

static void rowset_free(sp_dataset *d)
{
    sp_rowset *r = (sp_rowset *)d;
    if (!r->done && r->close) r->close(r);
    free(r->slot);
    free(r->label);
    free(r->x);
    free(r);
}

/* The rows of keep not held yet go to the reader: their slots first (in row order, so a
 * run of consecutive rows has consecutive slots and is read in one piece). */
static int rowset_read_rows(sp_dataset *d, const unsigned char *keep, bool last)
{
    sp_rowset *r = (sp_rowset *)d;
    int n = d->n, more = 0, labels = 0;
    unsigned char *add = sp_xcalloc((size_t)n, 1);
    for (int i = 0; i < n; i++) {
        int k = keep ? keep[i] : SP_LOADER_X;
        if ((k & SP_LOADER_X) && r->slot[i] < 0) add[i] = SP_LOADER_X, more++;
        else if ((k & (SP_LOADER_X | SP_LOADER_Y)) && r->label[i] < 0) add[i] = SP_LOADER_Y, labels++;
    }
    if (r->done) {
        free(add);
        if (more + labels == 0) return SP_OK;
        return sp_error("%s: %d more rows asked for after the last read (its files are closed)", d->name,
                        more + labels);
    }
    if (more) {
        size_t bytes = ((size_t)r->held + (size_t)more) * r->row_bytes;   /* held + more <= n: no overflow */
        uint8_t *x = bytes > sp_file_alloc_limit() ? NULL : realloc(r->x, bytes);
        if (!x) {
            free(add);
            return sp_error("%s: %d samples need %zu bytes: %s", d->name, r->held + more, bytes,
                            bytes > sp_file_alloc_limit() ? "above the limit on one allocation from a file "
                                                            "(SCANPROP_MAX_FILE_ALLOC)" : "out of memory");
        }
        r->x = x;
        for (int i = 0; i < n; i++)
            if (add[i] & SP_LOADER_X) r->slot[i] = r->held++;
    }
    int rc = r->fill(r, add, last);
    free(add);
    if (rc == SP_OK && last) {
        r->close(r);
        r->done = true;
    }
    return rc;
}

int sp_rowset_init(sp_rowset *r, const char *name, int n, int c, int h, int w, int nclasses)
{
    snprintf(r->base.name, sizeof r->base.name, "%s", name);
    r->base.n = n;
    r->base.ndim = 3;
    r->base.shape[0] = c;
    r->base.shape[1] = h;
    r->base.shape[2] = w;
    r->base.nclasses = nclasses;
    r->base.get = rowset_get;
    r->base.label = rowset_label;
    r->base.free = rowset_free;
    r->base.read_rows = rowset_read_rows;
    r->c = c, r->h = h, r->w = w;
    r->row_bytes = (size_t)c * (size_t)h * (size_t)w;
    char what[320];
    snprintf(what, sizeof what, "%s: %d samples", name, n);
    r->slot = sp_file_alloc((size_t)n * sizeof *r->slot, 0, what);
    r->label = r->slot ? sp_file_alloc((size_t)n * sizeof *r->label, 0, what) : NULL;
    if (!r->label) return SP_ERR;
    for (int i = 0; i < n; i++) r->slot[i] = r->label[i] = -1;
    return SP_OK;
}

bool sp_is_rowset(const sp_dataset *d) { return d && d->read_rows == rowset_read_rows && d->get == rowset_get; }

size_t sp_rowset_bytes(const sp_dataset *d)
{
    if (!sp_is_rowset(d)) return 0;   /* not a copy either (a slice has its own get) */
    const sp_rowset *r = (const sp_rowset *)d;
    return (size_t)r->held * r->row_bytes + (size_t)d->n * 2 * sizeof(int);
}
