/* safetensors.h — tensor files in the safetensors format (a model's weights in and out
 * of such a file: core/io/model_io.h).
 *
 * Layout: 8-byte little-endian header length N, N bytes of JSON
 *   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {"format": "pt", "scanprop_version": "0.1"}}
 * then the byte buffer (offsets relative to its start). PyTorch names and layouts
 * (DESIGN.md), so weights move to and from torch with safetensors.torch.load_file.
 *
 * Errors (core/error.h): every function that can fail returns SP_OK / SP_ERR (or NULL)
 * with one line naming the file and the problem in sp_last_error(); nothing exits.
 *
 * Reading checks before it trusts: the file must be a regular file (a FIFO or device
 * is refused without blocking), the 8-byte header length is checked against the file
 * size and only then is the header read; the tensors' data_offsets must tile the data
 * buffer exactly (no overlap, gap or trailing byte: the reference library's rule), and
 * shape products are checked for overflow. Tensor bytes are read only when asked for,
 * with pread straight into the caller's array: a refused file costs no more memory
 * than its header, and loading a checkpoint needs its size once, not twice.
 *
 * The writer is atomic (core/io/fileio.h): the target is replaced by rename(2) only after
 * the whole new file is on disk, so an interrupted or failed save leaves the old file
 * intact; a target that exists and is not a regular file is refused; a symbolic link
 * is followed and the file it points to is replaced; SIGINT/SIGTERM during a save
 * remove the temp file; stale temp files of dead processes are removed. */
#ifndef SP_SAFETENSORS_H
#define SP_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/error.h"
#include "core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

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
    uint64_t offset;                  /* of its first byte in the file        */
    /* Its bytes (little-endian, possibly unaligned) in a read-only mapping of the file:
     * no memory is used until they are touched. sp_st_read_* do not touch them (they
     * pread), so prefer those; a file truncated under a mapping raises SIGBUS. */
    const unsigned char *data;
} sp_st_tensor;

typedef struct sp_st_file sp_st_file;

/* Validates the file (see above: header length vs file size, strict JSON, known dtypes,
 * shape × dtype size == data_offsets span, offsets tiling the data exactly) and keeps
 * it open for the reads. NULL on failure. */
sp_st_file *sp_st_open(const char *path) SP_MUST_CHECK;
void sp_st_close(sp_st_file *f);
const char *sp_st_path(const sp_st_file *f);
/* The number of tensors; SP_ERR (-1) for a NULL f. */
int sp_st_count(const sp_st_file *f);
const sp_st_tensor *sp_st_at(const sp_st_file *f, int i);      /* header order      */
const sp_st_tensor *sp_st_find(const sp_st_file *f, const char *name); /* NULL if absent */
const char *sp_st_metadata(const sp_st_file *f, const char *key);     /* NULL if absent */
/* A dtype's name ("F32") and bytes per element; a value outside the enum: NULL and 0,
 * the message in sp_last_error(). */
const char *sp_st_dtype_name(sp_st_dtype dt);
size_t sp_st_dtype_size(sp_st_dtype dt);
bool sp_st_dtype_is_float(sp_st_dtype dt);   /* F64, F32, F16, BF16 */

/* Copy tensor `name` into dst, which has exactly `shape` (ndim dims). F64/F16/BF16 are
 * converted to float; I64/I32/I16/I8/U8/BOOL to int32 (out-of-range values fail, dst
 * untouched). Missing tensor, wrong dtype family or shape: SP_ERR with
 * "file: x has shape [..], expected [..]". */
int sp_st_read_f32(const sp_st_file *f, const char *name, float *dst, int ndim, const int *shape) SP_MUST_CHECK;
int sp_st_read_i32(const sp_st_file *f, const char *name, int32_t *dst, int ndim, const int *shape) SP_MUST_CHECK;
/* If t's shape is not `shape` (ndim dims): true, with "x has shape [..], expected [..]"
 * in msg. A NULL argument or a negative ndim: true too, msg untouched, the message in
 * sp_last_error(). */
bool sp_st_shape_problem(const sp_st_tensor *t, int ndim, const int *shape, char *msg, size_t len);
/* t's t->nbytes bytes as stored (little-endian, no conversion) into dst. */
int sp_st_read_raw(const sp_st_file *f, const sp_st_tensor *t, void *dst) SP_MUST_CHECK;

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
int sp_st_write(const char *path, int n, const sp_st_entry *entries, const char *const *metadata) SP_MUST_CHECK;
/* F32 tensors (on the CPU) under the given names. */
int sp_st_save(const char *path, int n, const char *const *names, const sp_tensor *const *tensors,
               const char *const *metadata) SP_MUST_CHECK;

#ifdef __cplusplus
}
#endif

#endif
