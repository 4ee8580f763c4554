/* safetensors.h — checkpoints and tensor files in the safetensors format.
 *
 * Layout: 8-byte little-endian header length N, N bytes of JSON
 *   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {"format": "pt", "scanprop_version": "0.1"}}
 * then the byte buffer (offsets relative to its start). PyTorch names and layouts
 * (DESIGN.md), so weights move to and from torch with safetensors.torch.load_file.
 *
 * Every failure is a user error: one line naming the file and the problem, exit 2.
 * The writer is atomic: the target is replaced by rename(2) only after the whole new
 * file is on disk, so an interrupted or failed save leaves the old file intact. */
#ifndef SP_SAFETENSORS_H
#define SP_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include "core/tensor.h"

#define SP_SCANPROP_VERSION "0.1"
#define SP_ST_MAX_DIMS 8

typedef enum {
    SP_ST_F64, SP_ST_F32, SP_ST_F16, SP_ST_BF16,
    SP_ST_I64, SP_ST_I32, SP_ST_I16, SP_ST_I8, SP_ST_U8, SP_ST_BOOL,
    SP_ST_NDTYPES
} sp_st_dtype;

typedef struct sp_st_tensor {
    const char *name;
    sp_st_dtype dtype;
    int ndim;                         /* 0 for a scalar                        */
    int64_t shape[SP_ST_MAX_DIMS];
    size_t numel, nbytes;
    const unsigned char *data;        /* little-endian, possibly unaligned     */
} sp_st_tensor;

typedef struct sp_st_file sp_st_file;

/* Reads and validates the whole file: header length vs file size, strict JSON, known
 * dtypes, shape × dtype size == data_offsets span, offsets in bounds and disjoint. */
sp_st_file *sp_st_open(const char *path);
void sp_st_close(sp_st_file *f);
const char *sp_st_path(const sp_st_file *f);
int sp_st_count(const sp_st_file *f);
const sp_st_tensor *sp_st_at(const sp_st_file *f, int i);      /* header order      */
const sp_st_tensor *sp_st_find(const sp_st_file *f, const char *name); /* NULL if absent */
const char *sp_st_metadata(const sp_st_file *f, const char *key);     /* NULL if absent */
const char *sp_st_dtype_name(sp_st_dtype dt);
size_t sp_st_dtype_size(sp_st_dtype dt);

/* Copy tensor `name` into dst, which has exactly `shape` (ndim dims). F64/F16/BF16 are
 * converted to float; I64/I32/I16/I8/U8/BOOL to int32 (out-of-range values fail).
 * Missing tensor, wrong dtype family or shape: "file: x has shape [..], expected [..]". */
void sp_st_read_f32(const sp_st_file *f, const char *name, float *dst, int ndim, const int *shape);
void sp_st_read_i32(const sp_st_file *f, const char *name, int32_t *dst, int ndim, const int *shape);

/* One tensor to write: raw little-endian data of `dtype`. */
typedef struct sp_st_entry {
    const char *name;
    sp_st_dtype dtype;
    int ndim;
    const int *shape;
    const void *data;
} sp_st_entry;

/* metadata: NULL or {"key", "value", ..., NULL}; "format": "pt" and
 * "scanprop_version" are always written. Atomic (see above). */
void sp_st_write(const char *path, int n, const sp_st_entry *entries, const char *const *metadata);
/* F32 tensors (on the CPU) under the given names. */
void sp_st_save(const char *path, int n, const char *const *names, const sp_tensor *const *tensors,
                const char *const *metadata);

/* Tensors named "state/..." are a resumable checkpoint's training state
 * (schedulers/checkpoint.h); sp_model_load skips them. */
#define SP_ST_STATE_PREFIX "state/"

/* Every parameter under its PyTorch name. */
struct sp_model;
void sp_model_save(const struct sp_model *m, const char *path);
/* Checks first, writes after: every parameter present with its shape and a float dtype,
 * no unexpected tensors; otherwise one line naming the first problem, exit 2, and the
 * model is untouched. */
void sp_model_load(struct sp_model *m, const char *path);

#endif
