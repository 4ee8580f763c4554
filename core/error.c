/* error.c — one-line user errors (exit 2) and checked allocation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/tensor.h"

void sp_fail(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fputs("scanprop: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(SP_EXIT_USAGE);
}

void *sp_xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) sp_fail("out of memory allocating %zu bytes", bytes);
    return p;
}

void *sp_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) sp_fail("out of memory allocating %zu x %zu bytes", n, size);
    return p;
}

void *sp_xrealloc(void *p, size_t bytes)
{
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) sp_fail("out of memory reallocating %zu bytes", bytes);
    return q;
}

char *sp_xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(sp_xmalloc(n), s, n);
}

const char *sp_shape_str(const sp_tensor *t, char *buf, size_t len)
{
    size_t k = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < t->ndim && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, i ? ", %d" : "%d", t->shape[i]);
    if (k < len) snprintf(buf + k, len - k, "]");
    return buf;
}
