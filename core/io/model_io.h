/* model_io.h — a model's weights in and out of a safetensors file (core/io/safetensors.h):
 * every parameter and buffer under its PyTorch name, and the metadata "scanprop_model"
 * naming the model, so torch's safetensors.torch.load_file reads what sp_model_save
 * writes and sp_model_load reads what python/scanprop_torch.py exports.
 *
 * Errors (core/error.h): SP_OK / SP_ERR with one line naming the file and the problem in
 * sp_last_error(); nothing exits. */
#ifndef SP_MODEL_IO_H
#define SP_MODEL_IO_H

#include "core/error.h"
#include "core/io/safetensors.h"
#include "core/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Tensors named "state/..." are a resumable checkpoint's training state
 * (train/checkpoint.h); sp_model_load skips them. */
#define SP_ST_STATE_PREFIX "state/"

/* Every parameter and buffer under its PyTorch name, with "scanprop_model": m->name.
 * Atomic (core/io/fileio.h): a failed save leaves the old file intact. A non-finite
 * value is refused as sp_model_check_finite says, before the file is touched (what
 * sp_model_load would refuse is not written). */
int sp_model_save(const sp_model *m, const char *path) SP_MUST_CHECK;
/* Every value of m's host-resident parameters and buffers is finite, else SP_ERR
 * "model 'NAME': parameter P[i] is nan (expected finite values: the run diverged?)". */
int sp_model_check_finite(const sp_model *m) SP_MUST_CHECK;
/* Checks first, writes after: every parameter present with its shape and a float dtype,
 * no unexpected tensors, every value finite; otherwise SP_ERR with one line naming the first problem (and
 * how many more), and the model is untouched. (Only a read error after the checks —
 * the file truncated under us — can leave some parameters loaded.) When the file does
 * not fit and its "scanprop_model" names another model, the line says that instead:
 * "FILE is a lenet checkpoint, not a vgg11 one". A file that fits loads whatever its
 * metadata says (the name is a label, e.g. of a renamed or exported model). */
int sp_model_load(sp_model *m, const char *path) SP_MUST_CHECK;
/* Every value is finite, else SP_ERR "FILE: NAME[i] is nan (expected finite values ...)".
 * sp_model_load refuses a non-finite parameter or buffer this way before writing any. */
int sp_check_finite_f32(const sp_st_file *f, const char *name, const float *v, size_t n) SP_MUST_CHECK;

/* SP_OK if f's "scanprop_model" is absent or m->name; otherwise SP_ERR with
 * "FILE is a X checkpoint, not a Y one" in sp_last_error(). For loaders that found a
 * problem and want to name its likely cause (sp_model_load, sp_prune_load) and for
 * those that need the same model (a resumed run). */
int sp_model_check_saved_name(const sp_st_file *f, const sp_model *m);

#ifdef __cplusplus
}
#endif

#endif
