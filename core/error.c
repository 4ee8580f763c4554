/* error.c — returnable errors (thread-local message), one-line exits for apps, checked
 * allocation, the ceiling on file-driven allocations. */
#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/guard.h"
#include "core/tensor.h"

#define ERR_LEN 1024
static _Thread_local char last_error[ERR_LEN];
static _Thread_local jmp_buf *try_frame;   /* innermost sp_try or armed guard of this thread */
static bool guards_off;   /* set once by the apps' layer (sp_guard_off), before any thread starts */

/* This thread's message from fmt and its arguments (which may include sp_last_error()
 * itself: formatted aside first). */
static void set_error(const char *fmt, va_list ap)
{
    char buf[ERR_LEN];
    vsnprintf(buf, sizeof buf, fmt, ap);
    memcpy(last_error, buf, sizeof buf);
}

void sp_fail(const char *fmt, ...)
{
    va_list ap;
    if (!fmt) sp_fail("sp_fail: argument 'fmt' is NULL");
    if (try_frame) {   /* inside sp_try: the caller gets the message and SP_ERR */
        va_start(ap, fmt);
        set_error(fmt, ap);
        va_end(ap);
        longjmp(*try_frame, 1);
    }
    fflush(stdout);
    fputs("scanprop: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(SP_EXIT_USAGE);
}

int sp_refuse(const char *fmt, ...)
{
    if (!fmt) return sp_refuse("sp_refuse: argument 'fmt' is NULL");
    va_list ap;
    va_start(ap, fmt);
    set_error(fmt, ap);
    va_end(ap);
    if (try_frame) longjmp(*try_frame, 1);         /* as sp_fail inside sp_try or a guard */
    if (guards_off) sp_fail("%s", last_error);     /* an app: its one line and exit 2, as sp_fail */
    return SP_ERR;
}

int sp_try(void (*fn)(void *arg), void *arg)
{
    if (!fn) return sp_error("sp_try: argument 'fn' is NULL");
    jmp_buf frame;
    jmp_buf *volatile outer = try_frame;
    if (setjmp(frame)) {
        try_frame = outer;
        return SP_ERR;
    }
    try_frame = &frame;
    fn(arg);
    try_frame = outer;
    return SP_OK;
}

int sp_error(const char *fmt, ...)
{
    if (!fmt) return sp_error("sp_error: argument 'fmt' is NULL");
    va_list ap;
    va_start(ap, fmt);
    set_error(fmt, ap);
    va_end(ap);
    return SP_ERR;
}

int sp_error_prefix(const char *fmt, ...)
{
    if (!fmt) return sp_error("sp_error_prefix: argument 'fmt' is NULL");
    char buf[ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n + 3 < sizeof buf) {   /* the old message, truncated to fit */
        size_t k = (size_t)n, room = sizeof buf - k - 3, len = strlen(last_error);
        memcpy(buf + k, ": ", 2);
        memcpy(buf + k + 2, last_error, len < room ? len : room);
        buf[k + 2 + (len < room ? len : room)] = 0;
    }
    memcpy(last_error, buf, sizeof buf);
    return SP_ERR;
}

const char *sp_last_error(void) { return last_error; }
void sp_clear_error(void) { last_error[0] = 0; }

void sp_check(int status)
{
    if (status != SP_OK) sp_fail("%s", last_error[0] ? last_error : "unknown error");
}

void *sp_check_ptr(void *p)
{
    if (!p) sp_fail("%s", last_error[0] ? last_error : "unknown error");
    return p;
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
    if (!s) {
        sp_refuse("sp_xstrdup: argument 's' is NULL");
        return NULL;
    }
    size_t n = strlen(s) + 1;
    return memcpy(sp_xmalloc(n), s, n);
}

/* ---- the ceiling on allocations sized by file contents ---- */

#define DEFAULT_FILE_ALLOC (16ull << 30)
static size_t file_alloc_override;   /* 0: default / environment */

size_t sp_file_alloc_limit(void)
{
    if (file_alloc_override) return file_alloc_override;
    static size_t from_env;   /* read once; a benign race writes the same value */
    if (!from_env) {
        const char *s = getenv("SCANPROP_MAX_FILE_ALLOC");
        char *end;
        unsigned long long v = s ? strtoull(s, &end, 10) : 0;
        from_env = s && *s && !*end && v ? (size_t)v : (size_t)DEFAULT_FILE_ALLOC;
    }
    return from_env;
}

void sp_set_file_alloc_limit(size_t bytes) { file_alloc_override = bytes; }

void *sp_file_alloc(size_t bytes, int zero, const char *what)
{
    size_t limit = sp_file_alloc_limit();
    if (bytes > limit) {
        sp_error("%s: needs %zu bytes, above the %zu-byte limit on one allocation from a file "
                 "(SCANPROP_MAX_FILE_ALLOC)", what, bytes, limit);
        return NULL;
    }
    void *p = zero ? calloc(bytes ? bytes : 1, 1) : malloc(bytes ? bytes : 1);
    if (!p) sp_error("%s: out of memory allocating %zu bytes", what, bytes);
    return p;
}

const char *sp_shape_str(const sp_tensor *t, char *buf, size_t len)
{
    if (!t) {
        sp_refuse("sp_shape_str: argument 't' is NULL");
        return NULL;
    }
    if (!buf) {
        sp_refuse("sp_shape_str: argument 'buf' is NULL");
        return NULL;
    }
    if (t->ndim < 0 || t->ndim > SP_MAX_DIMS) {
        sp_refuse("sp_shape_str: argument 't' has ndim %d (expected 0..%d)", t->ndim, SP_MAX_DIMS);
        return NULL;
    }
    size_t k = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < t->ndim && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, i ? ", %d" : "%d", t->shape[i]);
    if (k < len) snprintf(buf + k, len - k, "]");
    return buf;
}

/* ---- guards at the public entry points (core/guard.h) ---- */


int sp_try_active(void) { return try_frame != NULL; }

void sp_guard_off(void) { guards_off = true; }

int sp_guard_enter(sp_guard *g)
{
    g->outer = try_frame;
    g->armed = try_frame == NULL && !guards_off;
    if (g->armed) try_frame = &g->frame;
    return g->armed;
}

void sp_guard_leave(sp_guard *g)
{
    if (g->armed) try_frame = g->outer;
    g->armed = 0;
}
