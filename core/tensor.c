/* tensor.c — shapes and the few whole-tensor helpers. Each refuses a bad argument with
 * sp_refuse (error.h) and returns the failure value tensor.h names. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "core/tensor.h"
#include "core/device.h"
#include "core/error.h"

static const sp_tensor none;   /* a refused call's tensor: ndim 0, no data */

/* The element count of shape[0..ndim-1] (ndim >= 0), or sp_refuse naming what. */
static inline int count(const char *what, int ndim, const int *shape, size_t *numel)
{
    if (ndim > 0 && !shape) return sp_refuse("%s: argument 'shape' is NULL", what);
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return sp_refuse("%s: dimension %d of the shape is %d (expected >= 0)", what, i, shape[i]);
        if (__builtin_mul_overflow(n, (size_t)shape[i], &n) || n > SIZE_MAX / sizeof(float))
            return sp_refuse("%s: a shape of more elements than memory can hold", what);
    }
    *numel = n;
    return SP_OK;
}

/* sp_shape_check without the check of what (every caller here names itself). */
static inline int shape_ok(const char *what, int ndim, const int *shape, size_t *numel)
{
    if (__builtin_expect(ndim < 1 || ndim > SP_MAX_DIMS, 0))
        return sp_refuse("%s: argument 'ndim' is %d (expected 1..%d)", what, ndim, SP_MAX_DIMS);
    return count(what, ndim, shape, numel);
}

int sp_shape_check(const char *what, int ndim, const int *shape, size_t *numel)
{
    if (!what) return sp_refuse("sp_shape_check: argument 'what' is NULL");
    size_t n = 0;
    if (shape_ok(what, ndim, shape, &n) != SP_OK) return SP_ERR;
    if (numel) *numel = n;
    return SP_OK;
}

size_t sp_shape_numel(int ndim, const int *shape)
{
    size_t n = 0;
    if (ndim < 0) {
        sp_refuse("sp_shape_numel: argument 'ndim' is %d (expected >= 0)", ndim);
        return 0;
    }
    return count("sp_shape_numel", ndim, shape, &n) == SP_OK ? n : 0;
}

sp_tensor sp_tensor_view(float *data, int ndim, const int *shape)
{
    size_t numel = 0;
    if (shape_ok("sp_tensor_view", ndim, shape, &numel) != SP_OK) return none;
    sp_tensor t = {.data = data, .ndim = ndim, .numel = numel, .device = SP_CPU};
    memcpy(t.shape, shape, (size_t)ndim * sizeof *shape);
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

/* t's ndim is one a tensor can have, else sp_refuse naming the call and argument. */
static int check_ndim(const char *what, const char *arg, const sp_tensor *t)
{
    if (t->ndim < 0 || t->ndim > SP_MAX_DIMS)
        return sp_refuse("%s: argument '%s' has ndim %d (expected 0..%d)", what, arg, t->ndim, SP_MAX_DIMS);
    return SP_OK;
}

bool sp_tensor_same_shape(const sp_tensor *a, const sp_tensor *b)
{
    if (!a || !b) {
        sp_refuse("sp_tensor_same_shape: argument '%s' is NULL", !a ? "a" : "b");
        return false;
    }
    if (check_ndim("sp_tensor_same_shape", "a", a) != SP_OK || check_ndim("sp_tensor_same_shape", "b", b) != SP_OK)
        return false;
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

size_t sp_tensor_sample_numel(const sp_tensor *t)
{
    if (!t) {
        sp_refuse("sp_tensor_sample_numel: argument 't' is NULL");
        return 0;
    }
    if (check_ndim("sp_tensor_sample_numel", "t", t) != SP_OK) return 0;
    if (t->ndim <= 1) return 1;
    if (t->shape[0]) return t->numel / (size_t)t->shape[0];
    size_t n = 1;   /* an empty batch: the product of the other dimensions */
    for (int i = 1; i < t->ndim; i++) n *= (size_t)t->shape[i];
    return n;
}

sp_tensor sp_tensor_new(int ndim, const int *shape)
{
    size_t numel = 0;
    if (shape_ok("sp_tensor_new", ndim, shape, &numel) != SP_OK) return none;
    float *data = calloc(numel ? numel : 1, sizeof(float));
    if (!data) {
        sp_refuse("sp_tensor_new: out of memory allocating %zu bytes", numel * sizeof(float));
        return none;
    }
    return sp_tensor_view(data, ndim, shape);
}

void sp_tensor_free(sp_tensor *t)
{
    if (!t) return;
    if (t->device == SP_CPU) {
        free(t->data);
    } else if (sp_backend_has_allocator(t->device)) {
        sp_backend_allocator(t->device)->free(t->data);   /* sp_model_to_device */
    } else {   /* no backend could have made it: the data is left alone */
        sp_refuse("sp_tensor_free: argument 't' is on device %d, which has no allocator", (int)t->device);
        return;
    }
    t->data = NULL;
}

/* t holds the host data its shape says, else sp_refuse naming the call and argument. */
static int check_host_data(const char *what, const char *arg, const sp_tensor *t)
{
    if (check_ndim(what, arg, t) != SP_OK) return SP_ERR;
    if (t->numel && !t->data) return sp_refuse("%s: argument '%s' has no data (a shape-only view)", what, arg);
    return SP_OK;
}

int sp_tensor_zero(sp_tensor *t)
{
    if (!t) return sp_refuse("sp_tensor_zero: argument 't' is NULL");
    if (check_host_data("sp_tensor_zero", "t", t) != SP_OK) return SP_ERR;
    if (t->numel) memset(t->data, 0, t->numel * sizeof(float));
    return SP_OK;
}

int sp_tensor_copy(sp_tensor *dst, const sp_tensor *src)
{
    if (!dst) return sp_refuse("sp_tensor_copy: argument 'dst' is NULL");
    if (!src) return sp_refuse("sp_tensor_copy: argument 'src' is NULL");
    if (check_host_data("sp_tensor_copy", "dst", dst) != SP_OK || check_host_data("sp_tensor_copy", "src", src) != SP_OK)
        return SP_ERR;
    if (dst->numel != src->numel)
        return sp_refuse("sp_tensor_copy: dst has %zu elements, src %zu (expected the same)", dst->numel, src->numel);
    if (src->numel) memcpy(dst->data, src->data, src->numel * sizeof(float));
    return SP_OK;
}

size_t sp_tensor_offset(const sp_tensor *t, int b, int c, int h, int w)
{
    if (!t) return sp_refuse("sp_tensor_offset: argument 't' is NULL"), SIZE_MAX;
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

int sp_tensor_to_plain(const sp_tensor *src, float *dst)
{
    if (!src) return sp_refuse("sp_tensor_to_plain: argument 'src' is NULL");
    if (!dst) return sp_refuse("sp_tensor_to_plain: argument 'dst' is NULL");
    if (!src->blk) memcpy(dst, src->data, src->numel * sizeof(float));
    else move_blocks(src, src->data, dst, true);
    return SP_OK;
}

int sp_tensor_from_plain(const sp_tensor *t, const float *src, float *dst)
{
    if (!t) return sp_refuse("sp_tensor_from_plain: argument 't' is NULL");
    if (!src) return sp_refuse("sp_tensor_from_plain: argument 'src' is NULL");
    if (!dst) return sp_refuse("sp_tensor_from_plain: argument 'dst' is NULL");
    if (!t->blk) memcpy(dst, src, t->numel * sizeof(float));
    else move_blocks(t, src, dst, false);
    return SP_OK;
}
