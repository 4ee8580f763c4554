/* tensor.c — shapes and the few whole-tensor helpers. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include "core/tensor.h"
#include "core/device.h"
#include "core/error.h"

size_t sp_shape_numel(int ndim, const int *shape)
{
    if (ndim < 0) sp_fail("sp_shape_numel: argument 'ndim' is %d (expected >= 0)", ndim);
    if (ndim > 0 && !shape) sp_fail("sp_shape_numel: argument 'shape' is NULL");
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    return n;
}

sp_tensor sp_tensor_view(float *data, int ndim, const int *shape)
{
    if (ndim < 0) sp_fail("sp_tensor_view: argument 'ndim' is %d (expected >= 0)", ndim);
    if (ndim > 0 && !shape) sp_fail("sp_tensor_view: argument 'shape' is NULL");
    assert(ndim >= 1 && ndim <= SP_MAX_DIMS);
    sp_tensor t = {.data = data, .ndim = ndim, .device = SP_CPU};
    for (int i = 0; i < ndim; i++) t.shape[i] = shape[i];
    t.numel = sp_shape_numel(ndim, shape);
    return t;
}

sp_tensor sp_tensor_2d(float *data, int d0, int d1)
{
    return sp_tensor_view(data, 2, (int[]){d0, d1});
}

sp_tensor sp_tensor_4d(float *data, int d0, int d1, int d2, int d3)
{
    return sp_tensor_view(data, 4, (int[]){d0, d1, d2, d3});
}

bool sp_tensor_same_shape(const sp_tensor *a, const sp_tensor *b)
{
    if (!a) sp_fail("sp_tensor_same_shape: argument 'a' is NULL");
    if (!b) sp_fail("sp_tensor_same_shape: argument 'b' is NULL");
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

size_t sp_tensor_sample_numel(const sp_tensor *t)
{
    if (!t) sp_fail("sp_tensor_sample_numel: argument 't' is NULL");
    return t->ndim <= 1 ? 1 : t->numel / (size_t)t->shape[0];
}

sp_tensor sp_tensor_new(int ndim, const int *shape)
{
    if (ndim < 0) sp_fail("sp_tensor_new: argument 'ndim' is %d (expected >= 0)", ndim);
    if (ndim > 0 && !shape) sp_fail("sp_tensor_new: argument 'shape' is NULL");
    sp_tensor t = sp_tensor_view(NULL, ndim, shape);
    t.data = sp_xcalloc(t.numel, sizeof(float));
    return t;
}

void sp_tensor_free(sp_tensor *t)
{
    if (!t) return;
    if (t->device != SP_CPU) sp_backend_allocator(t->device)->free(t->data);   /* sp_model_to_device */
    else free(t->data);
    t->data = NULL;
}

void sp_tensor_zero(sp_tensor *t)
{
    if (!t) sp_fail("sp_tensor_zero: argument 't' is NULL");
    memset(t->data, 0, t->numel * sizeof(float));
}

void sp_tensor_copy(sp_tensor *dst, const sp_tensor *src)
{
    if (!dst) sp_fail("sp_tensor_copy: argument 'dst' is NULL");
    if (!src) sp_fail("sp_tensor_copy: argument 'src' is NULL");
    assert(dst->numel == src->numel);
    memcpy(dst->data, src->data, src->numel * sizeof(float));
}

size_t sp_tensor_offset(const sp_tensor *t, int b, int c, int h, int w)
{
    if (!t) sp_fail("sp_tensor_offset: argument 't' is NULL");
    size_t C = (size_t)t->shape[1], H = (size_t)t->shape[2], W = (size_t)t->shape[3];
    if (!t->blk) return (((size_t)b * C + (size_t)c) * H + (size_t)h) * W + (size_t)w;
    size_t k = (size_t)t->blk;
    return (((size_t)b * (C / k) + (size_t)c / k) * H * W + (size_t)h * W + (size_t)w) * k + (size_t)c % k;
}

/* Plain ↔ blocked, one sample's [C/k][H·W][k] ↔ [C][H·W] at a time. */
static void move_blocks(const sp_tensor *t, const float *src, float *dst, bool to_plain)
{
    size_t k = (size_t)t->blk, C = (size_t)t->shape[1], P = (size_t)t->shape[2] * t->shape[3];
    for (size_t b = 0; b < (size_t)t->shape[0]; b++)
        for (size_t c = 0; c < C; c++)
            for (size_t p = 0; p < P; p++) {
                size_t plain = (b * C + c) * P + p, blocked = ((b * (C / k) + c / k) * P + p) * k + c % k;
                if (to_plain) dst[plain] = src[blocked];
                else dst[blocked] = src[plain];
            }
}

void sp_tensor_to_plain(const sp_tensor *src, float *dst)
{
    if (!src) sp_fail("sp_tensor_to_plain: argument 'src' is NULL");
    if (!dst) sp_fail("sp_tensor_to_plain: argument 'dst' is NULL");
    if (!src->blk) memcpy(dst, src->data, src->numel * sizeof(float));
    else move_blocks(src, src->data, dst, true);
}

void sp_tensor_from_plain(const sp_tensor *t, const float *src, float *dst)
{
    if (!t) sp_fail("sp_tensor_from_plain: argument 't' is NULL");
    if (!src) sp_fail("sp_tensor_from_plain: argument 'src' is NULL");
    if (!dst) sp_fail("sp_tensor_from_plain: argument 'dst' is NULL");
    if (!t->blk) memcpy(dst, src, t->numel * sizeof(float));
    else move_blocks(t, src, dst, false);
}
