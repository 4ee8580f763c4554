/* seqset.c — sequence classification sets stored as safetensors: x [N, T, C] and y [N]
 * (what the RNN/GRU apps train on; torch writes them with safetensors.torch.save_file). */
#include <limits.h>
#include <stdlib.h>
#include "core/error.h"
#include "core/io/safetensors.h"
#include "data/data.h"

static sp_dataset *seqset_load(sp_st_file *f, const char *path)
{
    const sp_st_tensor *tx = sp_st_find(f, "x"), *ty = sp_st_find(f, "y");
    if (!tx || !ty) return sp_error("%s: no tensor %s (expected x [N, T, C] and y [N])", path, tx ? "y" : "x"), NULL;
    if (tx->ndim != 3) return sp_error("%s: x has %d dimensions, expected 3 [N, T, C]", path, tx->ndim), NULL;
    for (int i = 0; i < 3; i++)
        if (tx->shape[i] < 1 || tx->shape[i] > INT_MAX)
            return sp_error("%s: x has dimension %d of size %lld (expected 1..%d)", path, i,
                            (long long)tx->shape[i], INT_MAX), NULL;
    int n = (int)tx->shape[0], sample[2] = {(int)tx->shape[1], (int)tx->shape[2]};
    float *x;
    int *y;
    sp_dataset *d = sp_dataset_new_f32(path, n, 2, sample, 1, &x, &y);   /* classes: below */
    if (!d) return NULL;
    if (sp_st_read_f32(f, "x", x, 3, (int[]){n, sample[0], sample[1]}) != SP_OK ||
        sp_st_read_i32(f, "y", y, 1, &n) != SP_OK || sp_dataset_check_finite(d, x, path) != SP_OK)
        goto fail;
    const char *meta = sp_st_metadata(f, "nclasses");
    if (meta) {
        char *end;
        long v = strtol(meta, &end, 10);
        if (*end || end == meta || v < 1 || v > INT_MAX) {
            sp_error("%s: metadata nclasses = \"%.40s\" is not a positive integer", path, meta);
            goto fail;
        }
        if (v > SP_SEQSET_MAX_CLASSES) {   /* the model's output layer would be hidden x v floats */
            sp_error("%s: metadata nclasses = %ld, above the %d classes a sequence set may have", path, v,
                     SP_SEQSET_MAX_CLASSES);
            goto fail;
        }
        d->nclasses = (int)v;
    } else {
        for (int i = 0; i < n; i++)
            if (y[i] >= d->nclasses && y[i] < INT_MAX) d->nclasses = y[i] + 1;
    }
    if (sp_dataset_check_labels(d, y, path) != SP_OK) goto fail;
    return d;
fail:
    sp_dataset_free(d);
    return NULL;
}

sp_dataset *sp_seqset_open(const char *path)
{
    if (!path) return sp_error("sp_seqset_open: argument 'path' is NULL"), NULL;
    sp_st_file *f = sp_st_open(path);
    if (!f) return NULL;
    sp_dataset *d = seqset_load(f, path);
    sp_st_close(f);
    return d;
}
