/* seqset.c — sequence classification sets stored as safetensors: x [N, T, C] and y [N]
 * (what the RNN/GRU apps train on; torch writes them with safetensors.torch.save_file). */
#include <limits.h>
#include <stdlib.h>
#include "core/error.h"
#include "core/safetensors.h"
#include "data/data.h"

sp_dataset *sp_seqset_open(const char *path)
{
    sp_st_file *f = sp_st_open(path);
    const sp_st_tensor *tx = sp_st_find(f, "x"), *ty = sp_st_find(f, "y");
    if (!tx || !ty) sp_fail("%s: no tensor %s (expected x [N, T, C] and y [N])", path, tx ? "y" : "x");
    if (tx->ndim != 3) sp_fail("%s: x has %d dimensions, expected 3 [N, T, C]", path, tx->ndim);
    for (int i = 0; i < 3; i++)
        if (tx->shape[i] < 1 || tx->shape[i] > INT_MAX)
            sp_fail("%s: x has dimension %d of size %lld (expected 1..%d)", path, i, (long long)tx->shape[i], INT_MAX);
    int n = (int)tx->shape[0], sample[2] = {(int)tx->shape[1], (int)tx->shape[2]};
    float *x;
    int *y;
    sp_dataset *d = sp_dataset_new_f32(path, n, 2, sample, 0, &x, &y);
    sp_st_read_f32(f, "x", x, 3, (int[]){n, sample[0], sample[1]});
    sp_st_read_i32(f, "y", y, 1, &n);
    const char *meta = sp_st_metadata(f, "nclasses");
    if (meta) {
        char *end;
        long v = strtol(meta, &end, 10);
        if (*end || end == meta || v < 1 || v > INT_MAX)
            sp_fail("%s: metadata nclasses = \"%s\" is not a positive integer", path, meta);
        d->nclasses = (int)v;
    } else {
        for (int i = 0; i < n; i++)
            if (y[i] >= d->nclasses) d->nclasses = y[i] + 1;
    }
    sp_dataset_check_labels(d, y, path);
    sp_st_close(f);
    return d;
}
