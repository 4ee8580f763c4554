/* error.h — how scanprop reports errors.
 *
 * Two kinds of failure:
 *
 *  - Errors a caller can handle (a bad file, a bad shape or value from user input):
 *    the library's fallible entry points return an error status and never print or
 *    exit. A function returning int returns SP_OK (0) on success and SP_ERR (-1) on
 *    failure; a function returning a pointer returns NULL on failure. Either way the
 *    one-line message, "<what>: <problem> (expected ...)", is in sp_last_error() — a
 *    thread-local string valid until the next failing call in the same thread. These
 *    functions are declared SP_MUST_CHECK, so an ignored status is a compiler warning.
 *    Only the apps turn a failure into "scanprop: <message>" on stderr and exit status
 *    2 (sp_check / sp_check_ptr below). A failed call leaves its outputs untouched
 *    unless its header says otherwise, and frees what it allocated.
 *
 *  - Programming errors inside a step (violated invariants, out-of-range sample
 *    indices, an impossible op configuration) may still end the process: assert(), or
 *    sp_fail, which prints one line and exits 2. Out of memory in sp_xmalloc & co.
 *    exits the same way. Allocations whose size comes from a file go through
 *    sp_file_alloc instead, which refuses sizes above a ceiling and returns NULL. */
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
 * programming errors; library entry points use sp_error instead. */
void sp_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* Run fn(arg) so that an sp_fail inside it, in this thread, returns SP_ERR with its
 * message in sp_last_error() instead of exiting. For construction from user input whose
 * checks still use sp_fail — models and their layers (sizes, kernel configurations),
 * engines (sp_engine_create), optimizers, learning-rate schedules — so an embedding
 * program survives a bad configuration. On failure, what fn allocated before the check
 * is not freed (construction checks come before allocation where they can), and fn
 * must not hold locks or other threads' state. Nests; other threads are unaffected. */
int sp_try(void (*fn)(void *arg), void *arg) SP_MUST_CHECK;

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
