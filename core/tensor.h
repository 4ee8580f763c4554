/* tensor.h — float32 tensors up to 4-D, row-major (NCHW), tagged with a device.
 *
 * A tensor is a small value: a pointer to data plus a shape. It does not own its
 * storage; the storage belongs either to the per-step arena (activations, gradients
 * of activations) or to a parameter (persistent). */
#ifndef SP_TENSOR_H
#define SP_TENSOR_H

#include <stddef.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SP_MAX_DIMS 4

typedef enum { SP_CPU = 0, SP_CUDA = 1, SP_NDEVICES } sp_device;

typedef struct sp_tensor {
    float *data;
    int ndim;
    int shape[SP_MAX_DIMS];
    size_t numel;
    sp_device device;
    /* The layout of a 4-D activation [B, C, H, W] on the host: 0 NCHW; 8 or 16 oneDNN's
     * blocked nChw8c / nChw16c (element (b, c, h, w) at ((b·C/blk + c/blk)·H·W + h·W +
     * w)·blk + c mod blk), only where blk divides C: numel and each sample's offset are
     * NCHW's. Set by ops that keep activations blocked between convolutions (core/op.h,
     * sp_opdef.takes_blocked); 0 everywhere else. */
    int blk;
} sp_tensor;

/* Every call here refuses a NULL pointer, a negative count or a bad shape with sp_refuse
 * (core/error.h): outside sp_try it returns its failure value with the message in
 * sp_last_error() — a tensor of ndim 0 and no data, 0 for a count, false, SP_ERR —
 * never exiting; inside sp_try it ends there with SP_ERR.
 *
 * A shape is 1..SP_MAX_DIMS dimensions, each >= 0, of at most SIZE_MAX / 4 elements:
 * sp_shape_check tells (SP_OK, the count in *numel unless numel is NULL) or refuses
 * naming `what`. sp_tensor_view does not allocate: data may be NULL. */
int sp_shape_check(const char *what, int ndim, const int *shape, size_t *numel);
sp_tensor sp_tensor_view(float *data, int ndim, const int *shape);
sp_tensor sp_tensor_2d(float *data, int d0, int d1);
sp_tensor sp_tensor_4d(float *data, int d0, int d1, int d2, int d3);
/* Any ndim >= 0 (1 for none). */
size_t sp_shape_numel(int ndim, const int *shape);
bool sp_tensor_same_shape(const sp_tensor *a, const sp_tensor *b);
/* Elements per sample (all dims but the first). */
size_t sp_tensor_sample_numel(const sp_tensor *t);

/* Heap-owned tensors (parameters, test fixtures): free with sp_tensor_free. Zeroed;
 * out of memory is refused like a bad shape. */
sp_tensor sp_tensor_new(int ndim, const int *shape);
/* NULL: nothing; a tensor of a device with no backend is refused (its data left). */
void sp_tensor_free(sp_tensor *t);

/* Host tensors with data (a shape-only view is refused); copy: the same element count. */
int sp_tensor_zero(sp_tensor *t);
int sp_tensor_copy(sp_tensor *dst, const sp_tensor *src);
/* Offset of element (b, c, h, w) of a 4-D tensor in its layout (t->blk); SIZE_MAX
 * when refused. */
size_t sp_tensor_offset(const sp_tensor *t, int b, int c, int h, int w);
/* dst (NCHW, numel floats) = src in NCHW order, whatever src's layout. */
int sp_tensor_to_plain(const sp_tensor *src, float *dst);
/* dst (in t's layout t->blk) = src (NCHW): the inverse of sp_tensor_to_plain. */
int sp_tensor_from_plain(const sp_tensor *t, const float *src, float *dst);

#ifdef __cplusplus
}
#endif

#endif
