/* error.h — how scanprop reports errors.
 *
 * Errors a user can cause (bad file, bad shape, bad flag) print ONE line on stderr,
 * "scanprop: <what>: <problem> (expected ...)", and exit with status 2. Internal
 * invariants use assert(). Library code never prints anything else on failure. */
#ifndef SP_ERROR_H
#define SP_ERROR_H

#include <stdarg.h>
#include <stddef.h>

#define SP_EXIT_USAGE 2

/* Print "scanprop: " + message and exit(2). Never returns. */
void sp_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* Checked allocation: exits with a clear line if memory runs out. */
void *sp_xmalloc(size_t bytes);
void *sp_xcalloc(size_t n, size_t size);
void *sp_xrealloc(void *p, size_t bytes);
char *sp_xstrdup(const char *s);

/* Format a shape as "[2, 3, 4]" into buf (at least 64 bytes); returns buf. */
struct sp_tensor;
const char *sp_shape_str(const struct sp_tensor *t, char *buf, size_t len);

#endif
