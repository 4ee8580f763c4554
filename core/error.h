/* error.h — how scanprop reports errors.
 *
 * Three kinds of call, by what they do with an argument or input they refuse:
 *
 *  - Fallible entry points return an error status and never print or exit: a function
 *    returning int returns SP_OK (0) on success and SP_ERR (-1) on failure; a function
 *    returning a pointer returns NULL on failure; sp_train sets result.status and
 *    sp_train_step returns NaN (having cleared the message at its start). Either
 *    way the one-line message, "<what>: <problem> (expected ...)", is in sp_last_error()
 *    — a thread-local string valid until the next failing call in the same thread. They
 *    are: the safetensors calls (sp_st_*), sp_model_save / sp_model_load /
 *    sp_check_finite_f32 / sp_model_check_saved_name, the dataset readers and
 *    constructors and their checks (sp_idx_open, sp_fashion_mnist, sp_cifar10,
 *    sp_image_folder*, sp_seqset_open, sp_bitstream, sp_synthetic_sequences,
 *    sp_dataset_new_*, sp_dataset_normalize / _pad / _save / _check_*), sp_loader_new
 *    and sp_loader_new_sync, sp_train, sp_train_step, sp_evaluate, sp_model_add,
 *    sp_model_check_finite, the constructors by name sp_optim_create and
 *    sp_engine_create (an unknown name or options the optimizer or engine refuses), the
 *    lookups sp_model_param, sp_st_find / _at / _metadata / _path, sp_file_alloc,
 *    sp_try, sp_error, and, through a guard at the entry (core/guard.h: outside any
 *    sp_try an sp_fail below it returns the call's failure value), models (every
 *    sp_model_*, sp_zoo_*), layer constructors (layers/layers.h), engines (sp_engine_*,
 *    sp_backward*, sp_mark_needs_grad, sp_alloc_grads; an sp_fail on an engine's lane
 *    thread or worker comes back as the call's status), optimizers and schedules
 *    (sp_optim_*, sp_sgd_new, sp_adam_new, sp_grad_*, sp_clip_grad_norm, sp_lr_*), the
 *    loader's iteration (sp_loader_next, _set_epoch, _reset_epoch, _epoch, _nbatches,
 *    _batch), sample access (sp_dataset_get, sp_dataset_label, sp_dataset_sample_numel),
 *    sp_train_step_accum, sp_step_graph_*, the JSON writer (sp_json_*; a failed write
 *    to stdout is a status too), the runner's lookups sp_run_engine_own and
 *    sp_run_engine_int — each header names the failure values (NULL, SP_ERR, NaN, -1,
 *    false, SP_MODEL_NONE). Most are
 *    declared SP_MUST_CHECK, so an ignored status is a compiler warning. A failed call
 *    leaves its outputs untouched unless its header says otherwise, and frees what it
 *    allocated. A NULL pointer or a negative count is such a failure, naming the
 *    argument: "sp_st_read_f32: the file is NULL", "sp_st_write x.st: -1 tensors".
 *    Core's own calls refuse the same way, through sp_refuse (below): tensors and shapes
 *    (sp_tensor_*, sp_shape_*), the RNG (sp_rng_*), tapes and ops (sp_tape_*, sp_apply*,
 *    sp_param_new, sp_buffer_new, sp_node_*, sp_fill_uniform), arenas (sp_arena_*),
 *    sp_csr_alloc and sp_csr_bytes, threads (sp_set_threads, sp_parallel_for,
 *    sp_spin_until), sp_xstrdup, sp_shape_str, sp_refuse. Given a NULL pointer, a
 *    negative count, a bad shape, size, device or configuration, a node of another tape,
 *    or an op whose shape check or forward fails ("linear fc1: input [8, 5], expected
 *    [B, 4]", a label out of range), such a call returns SP_ERR, NULL or the failure
 *    value its header names (a tensor of ndim 0, a count of 0, false, NaN) with the
 *    message, having freed what it allocated (a refused sp_apply* leaves the tape as it
 *    was); their int statuses are not SP_MUST_CHECK, as the library's own calls of them
 *    in a step rely on sp_try (next) instead of checking each one.
 *
 *  - Inside sp_try (below; sp_train's loop, an embedding program's own) a refusal of
 *    either sort ends at that sp_try, not at the call: a guarded call's sp_fail and a
 *    core call's sp_refuse return there with SP_ERR and the message. Never a crash.
 *    sp_train runs its loop under sp_try, so a step that fails comes back as its status.
 *    In an app (sp_flags_parse and sp_run_parse call sp_guard_off) no guard arms and
 *    sp_refuse outside sp_try is sp_fail: the process prints "scanprop: <message>" and
 *    exits 2, so an app that ignores a status still ends with its one line.
 *
 *  - The apps' layer, for main(): sp_run*, sp_run_parse, sp_flags_parse*, sp_check,
 *    sp_check_ptr and sp_fail print "scanprop: <message>" and exit 2 by design (a bad
 *    flag, a refused file, a failed status); under sp_try they return SP_ERR too.
 *
 * Frees and closes (sp_*_free, sp_*_destroy, sp_st_close) do nothing given NULL. In
 * core, sp_fail outside sp_try is left for internal invariants no caller's argument
 * reaches (a device twin registered twice, a backend's tables; core/device.h). Out of
 * memory in sp_xmalloc & co. prints one line and exits 2 (an allocation whose size a
 * file decided goes through sp_file_alloc instead, which refuses sizes above a ceiling
 * and returns NULL). tests/test_core.c (api::every_public_function_checks_its_arguments)
 * calls every function declared in scanprop.h's headers with NULLs and negative counts
 * and checks which of these it is. */
#ifndef SP_ERROR_H
#define SP_ERROR_H

#include <stdarg.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SP_EXIT_USAGE 2
#define SP_OK 0
#define SP_ERR (-1)
#define SP_MUST_CHECK __attribute__((warn_unused_result))

/* Print "scanprop: " + message and exit(2). Never returns. For apps and for
 * programming errors; library entry points use sp_error or sp_refuse instead. */
void sp_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* Run fn(arg) so that an sp_fail or sp_refuse inside it, in this thread, returns SP_ERR
 * with its message in sp_last_error() instead of exiting or returning from the call
 * that refused (above: guarded calls, core's calls, and the apps' layer), so an
 * embedding program survives a bad configuration or argument in a step. On failure,
 * what fn allocated before the check is not freed (construction checks come before
 * allocation where they can), and fn must not hold locks or other threads' state.
 * Nests; other threads are unaffected. */
int sp_try(void (*fn)(void *arg), void *arg) SP_MUST_CHECK;

/* How a fallible entry point in core refuses a caller's argument: records the message
 * as sp_error does and returns SP_ERR, for the caller to return its failure value;
 * inside sp_try or a guard (core/guard.h) it ends there instead, as sp_fail (the
 * library's own callers in a step rely on that). In an app (sp_guard_off) and outside
 * sp_try it is sp_fail: "scanprop: <message>" and exit 2. Otherwise it never prints
 * and never exits. */
int sp_refuse(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Record a one-line error message for this thread; returns SP_ERR, so a fallible
 * function can `return sp_error("%s: not a regular file", path);`. */
int sp_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prepend "prefix: " to this thread's message (context added on the way out). */
int sp_error_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The message of this thread's last failure ("" if none). */
const char *sp_last_error(void);
void sp_clear_error(void);

/* For apps: a failed status (SP_ERR / NULL) prints "scanprop: <sp_last_error()>" and
 * exits 2; sp_check_ptr otherwise returns p. */
void sp_check(int status);
void *sp_check_ptr(void *p);

/* Checked allocation: exits with a clear line if memory runs out. */
void *sp_xmalloc(size_t bytes);
void *sp_xcalloc(size_t n, size_t size);
void *sp_xrealloc(void *p, size_t bytes);
char *sp_xstrdup(const char *s);

/* An allocation whose size a file decided: refused (NULL, sp_last_error set to
 * "<what>: needs N bytes, above the M-byte limit on one allocation from a file") above
 * the ceiling, and NULL with "<what>: out of memory ..." if malloc fails. zero: calloc.
 * The ceiling defaults to 16 GiB, or SCANPROP_MAX_FILE_ALLOC (bytes) from the
 * environment, read once; sp_set_file_alloc_limit overrides it (0 = back to default). */
void *sp_file_alloc(size_t bytes, int zero, const char *what) SP_MUST_CHECK;
void sp_set_file_alloc_limit(size_t bytes);
size_t sp_file_alloc_limit(void);

/* Format a shape as "[2, 3, 4]" into buf (at least 64 bytes); returns buf. */
struct sp_tensor;
const char *sp_shape_str(const struct sp_tensor *t, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif
