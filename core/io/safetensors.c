/* safetensors.c — the safetensors format: strict reader, atomic writer. Model weights
 * in and out (PyTorch names, "scanprop_model") are core/io/model_io.c.
 *
 * The JSON parser accepts exactly what a safetensors header can hold: one object whose
 * values are tensor descriptions {"dtype", "shape", "data_offsets"} or the string map
 * "__metadata__". Anything else is an error naming the byte where it went wrong.
 *
 * Reading never trusts a size before checking it: the 8-byte length against the file
 * size, then only the header is read and parsed, the offsets checked against the data
 * buffer (exactly covered, as the reference library requires), and tensor bytes are
 * read with pread(2) straight into the caller's array when a tensor is asked for. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/error.h"
#include "core/io/fileio.h"
#include "core/io/safetensors.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c copies tensor bytes as is: it needs a little-endian host"
#endif

/* The reference implementation refuses headers above 100 MB; so do we. */
#define ST_MAX_HEADER (100ull * 1000 * 1000)
/* Conversions (F64/F16/BF16, integers) go through a bounce buffer of this size. */
#define ST_CHUNK (1u << 16)

static const struct { const char *name; size_t size; } dtypes[SP_ST_NDTYPES] = {
    [SP_ST_F64] = {"F64", 8}, [SP_ST_F32] = {"F32", 4}, [SP_ST_F16] = {"F16", 2},
    [SP_ST_BF16] = {"BF16", 2}, [SP_ST_I64] = {"I64", 8}, [SP_ST_I32] = {"I32", 4},
    [SP_ST_I16] = {"I16", 2}, [SP_ST_I8] = {"I8", 1}, [SP_ST_U8] = {"U8", 1},
    [SP_ST_BOOL] = {"BOOL", 1},
};

const char *sp_st_dtype_name(sp_st_dtype dt)
{
    if ((unsigned)dt >= SP_ST_NDTYPES)
        return sp_error("sp_st_dtype_name: argument 'dt' is %d (expected 0..%d)", (int)dt, SP_ST_NDTYPES - 1), NULL;
    return dtypes[dt].name;
}

size_t sp_st_dtype_size(sp_st_dtype dt)
{
    if ((unsigned)dt >= SP_ST_NDTYPES)
        return sp_error("sp_st_dtype_size: argument 'dt' is %d (expected 0..%d)", (int)dt, SP_ST_NDTYPES - 1), 0;
    return dtypes[dt].size;
}

struct sp_st_file {
    char *path;
    int fd;                         /* open until sp_st_close            */
    unsigned char *map;             /* the file, mapped read-only (data) */
    bool mapped;                    /* map is an mmap (else malloc)      */
    size_t size, buffer_size;
    uint64_t buffer_off;            /* 8 + header length                 */
    sp_st_tensor *tensors;
    int n, cap;
    char **meta;                    /* key, value, key, value, ...       */
    int nmeta;
    char **strings;                 /* every string the parser made      */
    int nstrings, capstrings;
};

/* ---------------------------------------------------------------- JSON header */

/* A failure anywhere in the parser records the message and jumps back to parse_header;
 * everything allocated on the way is owned by the sp_st_file, which the caller frees. */
typedef struct jparser {
    const char *path;
    const char *s;
    size_t len, pos;
    sp_st_file *f;
    jmp_buf *out;
} jparser;

__attribute__((noreturn, format(printf, 2, 3))) static void pfail(const jparser *p, const char *fmt, ...)
{
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sp_error("%s", msg);
    longjmp(*p->out, 1);
}

__attribute__((noreturn)) static void jfail(const jparser *p, const char *what)
{
    pfail(p, "%s: bad safetensors header at byte %zu: %s", p->path, 8 + p->pos, what);
}

static void jskip(jparser *p)
{
    while (p->pos < p->len && strchr(" \t\n\r", p->s[p->pos]) && p->s[p->pos]) p->pos++;
}

static bool jpeek(jparser *p, char c)
{
    jskip(p);
    return p->pos < p->len && p->s[p->pos] == c;
}

static void jexpect(jparser *p, char c)
{
    char msg[32];
    if (!jpeek(p, c)) {
        snprintf(msg, sizeof msg, "expected '%c'", c);
        jfail(p, msg);
    }
    p->pos++;
}

static int jhex4(jparser *p)
{
    int v = 0;
    for (int i = 0; i < 4; i++, p->pos++) {
        char c = p->pos < p->len ? p->s[p->pos] : 0;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) jfail(p, "bad \\u escape");
        v = 16 * v + d;
    }
    return v;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12); o[1] = (char)(0x80 | (cp >> 6 & 63));
        o[2] = (char)(0x80 | (cp & 63)); return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18); o[1] = (char)(0x80 | (cp >> 12 & 63));
    o[2] = (char)(0x80 | (cp >> 6 & 63)); o[3] = (char)(0x80 | (cp & 63)); return 4;
}

/* The length of the valid UTF-8 sequence at s (lead byte >= 0x80, len bytes left), or 0:
 * RFC 3629's table — no overlong forms, no surrogates, nothing above U+10FFFF (what the
 * reference reader, Rust's str, accepts). */
static size_t utf8_len(const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t n = s[0] >= 0xC2 && s[0] <= 0xDF ? 2 : s[0] >= 0xE0 && s[0] <= 0xEF ? 3 : s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : 0;
    if (!n || n > len) return 0;
    unsigned lo = 0x80, hi = 0xBF;   /* the second byte's range */
    if (s[0] == 0xE0) lo = 0xA0;
    if (s[0] == 0xED) hi = 0x9F;
    if (s[0] == 0xF0) lo = 0x90;
    if (s[0] == 0xF4) hi = 0x8F;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return n;
}

/* A buffer of n bytes owned by the file (freed by sp_st_close, also after a failure). */
static char *own(sp_st_file *f, size_t n)
{
    if (f->nstrings == f->capstrings) {
        f->capstrings = f->capstrings ? 2 * f->capstrings : 32;
        f->strings = sp_xrealloc(f->strings, (size_t)f->capstrings * sizeof *f->strings);
    }
    return f->strings[f->nstrings++] = sp_xmalloc(n);
}

/* A JSON string, unescaped into a fresh NUL-terminated buffer owned by the file. */
static char *jstring(jparser *p)
{
    jexpect(p, '"');
    size_t end = p->pos;   /* the raw span bounds the unescaped size (escapes never grow) */
    while (end < p->len && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
    char *out = own(p->f, (end < p->len ? end : p->len) - p->pos + 1);
    size_t k = 0;
    for (;;) {
        if (p->pos >= p->len) jfail(p, "unterminated string");
        unsigned char c = (unsigned char)p->s[p->pos++];
        if (c == '"') break;
        if (c < 0x20) jfail(p, "control character in string");
        if (c >= 0x80) {   /* raw UTF-8: one whole, shortest-form, non-surrogate sequence */
            size_t n = utf8_len(p->s + p->pos - 1, p->len - (p->pos - 1));
            if (!n) jfail(p, "invalid UTF-8 in string");
            memcpy(out + k, p->s + p->pos - 1, n);
            k += n;
            p->pos += n - 1;
            continue;
        }
        if (c != '\\') { out[k++] = (char)c; continue; }
        char e = p->pos < p->len ? p->s[p->pos++] : 0;
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
        if (e && strchr(from, e)) { out[k++] = to[strchr(from, e) - from]; continue; }
        if (e != 'u') jfail(p, "bad escape in string");
        unsigned cp = (unsigned)jhex4(p);
        if (cp >= 0xDC00 && cp < 0xE000) jfail(p, "lone low surrogate in \\u escape");
        if (cp >= 0xD800 && cp < 0xDC00) {
            if (p->pos + 2 > p->len || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
                jfail(p, "high surrogate without its low half");
            p->pos += 2;
            unsigned lo = (unsigned)jhex4(p);
            if (lo < 0xDC00 || lo >= 0xE000) jfail(p, "bad low surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        if (cp == 0) jfail(p, "NUL character in string");
        k += put_utf8(out + k, cp);   /* 6 or 12 escape bytes become at most 4 */
    }
    out[k] = 0;
    return out;
}

/* A non-negative JSON integer (no sign, fraction or exponent: shapes and offsets). */
static uint64_t juint(jparser *p)
{
    jskip(p);
    size_t start = p->pos;
    uint64_t v = 0;
    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        unsigned d = (unsigned)(p->s[p->pos++] - '0');
        if (v > (UINT64_MAX / 2 - d) / 10) jfail(p, "integer too large");
        v = 10 * v + d;
    }
    if (p->pos == start) jfail(p, "expected a non-negative integer");
    if (p->s[start] == '0' && p->pos - start > 1) jfail(p, "integer with a leading zero");
    if (p->pos < p->len && strchr(".eE-+", p->s[p->pos]) && p->s[p->pos])
        jfail(p, "expected an integer, got a fraction or exponent");
    return v;
}

/* [u, u, ...] with at most `max` entries; returns the count. */
static int juint_array(jparser *p, uint64_t *v, int max, const char *what)
{
    int n = 0;
    jexpect(p, '[');
    if (jpeek(p, ']')) { p->pos++; return 0; }
    for (;;) {
        if (n == max) jfail(p, what);
        v[n++] = juint(p);
        if (jpeek(p, ']')) { p->pos++; return n; }
        jexpect(p, ',');
    }
}

static void shape_str64(char *buf, size_t len, int ndim, const int64_t *shape)
{
    size_t k = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (k < len) snprintf(buf + k, len - k, "]");
}

static void parse_tensor(jparser *p, sp_st_file *f, char *name)
{
    sp_st_tensor t = {.name = name, .dtype = SP_ST_NDTYPES, .ndim = -1};
    uint64_t shape[SP_ST_MAX_DIMS], off[2];
    int noff = -1;
    jexpect(p, '{');
    for (;;) {
        char *key = jstring(p);
        jexpect(p, ':');
        if (strcmp(key, "dtype") == 0 && t.dtype == SP_ST_NDTYPES) {
            char *dt = jstring(p);
            for (int i = 0; i < SP_ST_NDTYPES; i++)
                if (strcmp(dt, dtypes[i].name) == 0) t.dtype = (sp_st_dtype)i;
            if (t.dtype == SP_ST_NDTYPES)
                pfail(p, "%s: tensor %s has unknown dtype \"%.40s\" (expected F64, F32, F16, BF16, I64, "
                      "I32, I16, I8, U8 or BOOL)", p->path, name, dt);
        } else if (strcmp(key, "shape") == 0 && t.ndim < 0) {
            t.ndim = juint_array(p, shape, SP_ST_MAX_DIMS, "shape has more than 8 dimensions");
        } else if (strcmp(key, "data_offsets") == 0 && noff < 0) {
            noff = juint_array(p, off, 2, "data_offsets has more than 2 entries");
            if (noff != 2) jfail(p, "data_offsets needs exactly 2 entries [begin, end]");
        } else {
            jfail(p, "unexpected or repeated key in a tensor entry (expected dtype, shape, data_offsets)");
        }
        if (jpeek(p, '}')) break;
        jexpect(p, ',');
    }
    p->pos++;
    if (t.dtype == SP_ST_NDTYPES || t.ndim < 0 || noff < 0)
        pfail(p, "%s: tensor %s lacks dtype, shape or data_offsets", p->path, name);
    /* Overflow checked before anything is sized from these numbers (juint keeps every
     * value below 2^63, so each fits int64_t). */
    size_t numel = 1;
    bool overflow = false;
    for (int i = 0; i < t.ndim; i++) {
        t.shape[i] = (int64_t)shape[i];
        overflow |= __builtin_mul_overflow(numel, (size_t)shape[i], &numel);
    }
    char sh[200];
    shape_str64(sh, sizeof sh, t.ndim, t.shape);
    if (overflow)
        pfail(p, "%s: tensor %s: the element count of shape %s overflows 64 bits", p->path, name, sh);
    if (__builtin_mul_overflow(numel, dtypes[t.dtype].size, &t.nbytes))
        pfail(p, "%s: tensor %s: %zu elements of %s (shape %s) overflow a 64-bit byte count", p->path, name,
              numel, dtypes[t.dtype].name, sh);
    if (off[1] < off[0])
        pfail(p, "%s: tensor %s has data_offsets [%llu, %llu] with end before begin", p->path, name,
              (unsigned long long)off[0], (unsigned long long)off[1]);
    if (t.nbytes != off[1] - off[0])
        pfail(p, "%s: tensor %s: shape %s of %s is %zu elements, %zu bytes, but data_offsets [%llu, %llu] "
              "span %llu", p->path, name, sh, dtypes[t.dtype].name, numel, t.nbytes,
              (unsigned long long)off[0], (unsigned long long)off[1], (unsigned long long)(off[1] - off[0]));
    if (off[1] > f->buffer_size)
        pfail(p, "%s: tensor %s: data_offsets [%llu, %llu] run past the end of the %zu-byte data "
              "buffer (truncated file?)", p->path, name, (unsigned long long)off[0],
              (unsigned long long)off[1], f->buffer_size);
    t.numel = numel;
    t.offset = f->buffer_off + off[0];
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 16;
        f->tensors = sp_xrealloc(f->tensors, (size_t)f->cap * sizeof *f->tensors);
    }
    f->tensors[f->n++] = t;
}

static void parse_metadata(jparser *p, sp_st_file *f)
{
    if (f->meta) jfail(p, "repeated __metadata__");
    f->meta = sp_xcalloc(2, sizeof *f->meta);
    jexpect(p, '{');
    if (jpeek(p, '}')) { p->pos++; return; }
    for (;;) {
        f->meta = sp_xrealloc(f->meta, (size_t)(2 * f->nmeta + 2) * sizeof *f->meta);
        f->meta[2 * f->nmeta] = jstring(p);
        jexpect(p, ':');
        if (!jpeek(p, '"')) jfail(p, "__metadata__ values must be strings");
        f->meta[2 * f->nmeta + 1] = jstring(p);
        f->nmeta++;
        if (jpeek(p, '}')) { p->pos++; return; }
        jexpect(p, ',');
    }
}

static int by_offset(const void *a, const void *b)
{
    const sp_st_tensor *x = *(const sp_st_tensor *const *)a, *y = *(const sp_st_tensor *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

static int parse_header(sp_st_file *f, const char *s, size_t len)
{
    jmp_buf out;
    jparser p = {.path = f->path, .s = s, .len = len, .f = f, .out = &out};
    if (setjmp(out)) return SP_ERR;
    jexpect(&p, '{');
    if (jpeek(&p, '}')) p.pos++;
    else for (;;) {
        char *key = jstring(&p);
        jexpect(&p, ':');
        if (strcmp(key, "__metadata__") == 0) {
            parse_metadata(&p, f);
        } else {
            if (sp_st_find(f, key)) pfail(&p, "%s: tensor %s appears twice in the header", f->path, key);
            parse_tensor(&p, f, key);
        }
        if (jpeek(&p, '}')) { p.pos++; break; }
        jexpect(&p, ',');
    }
    jskip(&p);
    if (p.pos != len) jfail(&p, "trailing characters after the header object");
    return SP_OK;
}

/* The tensors must tile the data buffer exactly, as the reference library requires:
 * sorted by offset, each begins where the previous ended and the last ends at the end
 * of the file. Overlaps, gaps and trailing bytes are refused with the byte offset. */
static int check_coverage(sp_st_file *f)
{
    const sp_st_tensor **sorted = sp_xmalloc((size_t)(f->n ? f->n : 1) * sizeof *sorted);
    for (int i = 0; i < f->n; i++) sorted[i] = &f->tensors[i];
    qsort(sorted, (size_t)f->n, sizeof *sorted, by_offset);
    uint64_t at = f->buffer_off;
    const sp_st_tensor *prev = NULL;
    int rc = SP_OK;
    for (int i = 0; i < f->n && rc == SP_OK; i++) {
        const sp_st_tensor *t = sorted[i];
        if (t->offset < at)
            rc = sp_error("%s: tensors %s and %s overlap in the data buffer", f->path, prev->name, t->name);
        else if (t->offset > at)
            rc = sp_error("%s: bytes %llu..%llu belong to no tensor (a gap before %s; the data_offsets "
                          "must cover the data buffer exactly)", f->path, (unsigned long long)at,
                          (unsigned long long)t->offset - 1, t->name);
        if (t->nbytes) prev = t;
        at = t->offset + t->nbytes;
    }
    free(sorted);
    if (rc == SP_OK && at != f->size)
        rc = sp_error("%s: %llu trailing bytes from byte %llu to the end of the file (the tensors' "
                      "data_offsets end there)", f->path, (unsigned long long)(f->size - at),
                      (unsigned long long)at);
    return rc;
}

/* ---------------------------------------------------------------- reading */

sp_st_file *sp_st_open(const char *path)
{
    if (!path) return sp_error("sp_st_open: the path is NULL"), NULL;
    struct stat st;
    int fd = sp_open_regular(path, &st);
    if (fd < 0) return NULL;
    sp_st_file *f = sp_xcalloc(1, sizeof *f);
    f->path = sp_xstrdup(path);
    f->fd = fd;
    f->size = (size_t)st.st_size;
    char *header = NULL;
    uint64_t hlen;
    if (f->size < 8) {
        sp_error("%s: %zu bytes is too short for a safetensors file (truncated?)", path, f->size);
        goto fail;
    }
    if (sp_pread_full(fd, &hlen, 8, 0, path, "the header length") != SP_OK) goto fail;
    if (hlen > ST_MAX_HEADER) {
        sp_error("%s: header length %llu is above the 100 MB limit (not a safetensors file?)", path,
                 (unsigned long long)hlen);
        goto fail;
    }
    if (hlen > f->size - 8) {
        sp_error("%s: header length %llu exceeds the %zu bytes after it (truncated file?)", path,
                 (unsigned long long)hlen, f->size - 8);
        goto fail;
    }
    {   /* a long header that does not even start as JSON is refused before it is read */
        char head[256];
        size_t k = hlen < sizeof head ? (size_t)hlen : sizeof head, i = 0;
        if (sp_pread_full(fd, head, k, 8, path, "the header") != SP_OK) goto fail;
        while (i < k && strchr(" \t\n\r", head[i]) && head[i]) i++;
        if (i < k && head[i] != '{') {
            sp_error("%s: bad safetensors header at byte %zu: expected '{'", path, 8 + i);
            goto fail;
        }
    }
    header = sp_file_alloc((size_t)hlen + 1, 0, path);
    if (!header || sp_pread_full(fd, header, (size_t)hlen, 8, path, "the header") != SP_OK) goto fail;
    f->buffer_off = 8 + hlen;
    f->buffer_size = f->size - 8 - (size_t)hlen;
    if (parse_header(f, header, (size_t)hlen) != SP_OK || check_coverage(f) != SP_OK) goto fail;
    free(header);
    header = NULL;
    /* Only now, the file valid: map it for sp_st_tensor.data (costs address space,
     * not memory). Where mapping fails, read it (under the file ceiling). */
    void *map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map != MAP_FAILED) {
        f->map = map;
        f->mapped = true;
    } else if (!(f->map = sp_file_alloc(f->size, 0, path)) ||
               sp_pread_full(fd, f->map, f->size, 0, path, "the file") != SP_OK) {
        goto fail;
    }
    for (int i = 0; i < f->n; i++) f->tensors[i].data = f->map + f->tensors[i].offset;
    return f;
fail:
    free(header);
    sp_st_close(f);
    return NULL;
}

void sp_st_close(sp_st_file *f)
{
    if (!f) return;
    for (int i = 0; i < f->nstrings; i++) free(f->strings[i]);
    free(f->strings);
    free(f->meta);
    free(f->tensors);
    if (f->fd >= 0) close(f->fd);
    if (f->mapped) munmap(f->map, f->size);
    else free(f->map);
    free(f->path);
    free(f);
}

const char *sp_st_path(const sp_st_file *f)
{
    if (!f) return sp_error("sp_st_path: argument 'f' is NULL"), NULL;
    return f->path;
}
int sp_st_count(const sp_st_file *f)
{
    if (!f) return sp_error("sp_st_count: argument 'f' is NULL");
    return f->n;
}
const sp_st_tensor *sp_st_at(const sp_st_file *f, int i)
{
    if (!f) return sp_error("sp_st_at: argument 'f' is NULL"), NULL;
    return &f->tensors[i];
}

const sp_st_tensor *sp_st_find(const sp_st_file *f, const char *name)
{
    if (!f) return sp_error("sp_st_find: argument 'f' is NULL"), NULL;
    if (!name) return sp_error("sp_st_find: argument 'name' is NULL"), NULL;
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

const char *sp_st_metadata(const sp_st_file *f, const char *key)
{
    if (!f) return sp_error("sp_st_metadata: argument 'f' is NULL"), NULL;
    if (!key) return sp_error("sp_st_metadata: argument 'key' is NULL"), NULL;
    for (int i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta[2 * i], key) == 0) return f->meta[2 * i + 1];
    return NULL;
}

bool sp_st_shape_problem(const sp_st_tensor *t, int ndim, const int *shape, char *msg, size_t len)
{
    if (ndim < 0) return sp_error("sp_st_shape_problem: argument 'ndim' is %d (expected >= 0)", ndim), true;
    if (!t) return sp_error("sp_st_shape_problem: argument 't' is NULL"), true;
    if (ndim > 0 && !shape) return sp_error("sp_st_shape_problem: argument 'shape' is NULL"), true;
    if (!msg) return sp_error("sp_st_shape_problem: argument 'msg' is NULL"), true;
    bool same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (same) return false;
    int64_t want[SP_ST_MAX_DIMS];
    for (int i = 0; i < ndim && i < SP_ST_MAX_DIMS; i++) want[i] = shape[i];
    char got_s[160], want_s[160];
    shape_str64(got_s, sizeof got_s, t->ndim, t->shape);
    shape_str64(want_s, sizeof want_s, ndim < SP_ST_MAX_DIMS ? ndim : SP_ST_MAX_DIMS, want);
    snprintf(msg, len, "%s has shape %s, expected %s", t->name, got_s, want_s);
    return true;
}

bool sp_st_dtype_is_float(sp_st_dtype dt) { return dt <= SP_ST_BF16; }

static const sp_st_tensor *get_checked(const sp_st_file *f, const char *name, int ndim,
                                       const int *shape, bool want_float)
{
    const sp_st_tensor *t = sp_st_find(f, name);
    if (!t) return sp_error("%s: no tensor named %s", f->path, name), NULL;
    if (sp_st_dtype_is_float(t->dtype) != want_float)
        return sp_error("%s: %s has dtype %s, expected %s", f->path, name, dtypes[t->dtype].name,
                        want_float ? "a float dtype (F32, F64, F16, BF16)" : "an integer dtype (I64, I32, U8, ...)"),
               NULL;
    char msg[400];
    if (sp_st_shape_problem(t, ndim, shape, msg, sizeof msg)) return sp_error("%s: %s", f->path, msg), NULL;
    return t;
}

static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = h >> 10 & 31, man = h & 0x3ff, bits;
    if (exp == 31) bits = sign | 0x7f800000u | man << 13;              /* inf / nan */
    else if (exp) bits = sign | (exp + 112) << 23 | man << 13;          /* normal    */
    else if (!man) bits = sign;                                         /* ±0        */
    else {                                                              /* subnormal */
        int e = -1;
        do { man <<= 1; e++; } while (!(man & 0x400));
        bits = sign | (uint32_t)(112 - e) << 23 | (man & 0x3ff) << 13;
    }
    float v;
    memcpy(&v, &bits, 4);
    return v;
}

static int read_bytes_at(const sp_st_file *f, const sp_st_tensor *t, void *dst, size_t n, uint64_t from)
{
    char what[300];
    snprintf(what, sizeof what, "tensor %s", t->name);
    return sp_pread_full(f->fd, dst, n, (off_t)(t->offset + from), f->path, what);
}

int sp_st_read_raw(const sp_st_file *f, const sp_st_tensor *t, void *dst)
{
    if (!f) return sp_error("sp_st_read_raw: argument 'f' is NULL");
    if (!t) return sp_error("sp_st_read_raw: argument 't' is NULL");
    if (!dst) return sp_error("sp_st_read_raw: argument 'dst' is NULL");
    return read_bytes_at(f, t, dst, t->nbytes, 0);
}

int sp_st_read_f32(const sp_st_file *f, const char *name, float *dst, int ndim, const int *shape)
{
    if (ndim < 0) return sp_error("sp_st_read_f32: argument 'ndim' is %d (expected >= 0)", ndim);
    if (!f || !name || !dst)
        return sp_error("sp_st_read_f32: %s is NULL", !f ? "the file" : !name ? "the name" : "the destination");
    const sp_st_tensor *t = get_checked(f, name, ndim, shape, true);
    if (!t) return SP_ERR;
    if (t->dtype == SP_ST_F32) return read_bytes_at(f, t, dst, t->nbytes, 0);   /* no copy in between */
    size_t w = dtypes[t->dtype].size;
    unsigned char *buf = sp_xmalloc(ST_CHUNK);
    for (size_t i0 = 0; i0 < t->numel; i0 += ST_CHUNK / w) {
        size_t m = t->numel - i0 < ST_CHUNK / w ? t->numel - i0 : ST_CHUNK / w;
        if (read_bytes_at(f, t, buf, m * w, i0 * w) != SP_OK) return free(buf), SP_ERR;
        for (size_t i = 0; i < m; i++) {
            if (t->dtype == SP_ST_F64) {
                double v;
                memcpy(&v, buf + 8 * i, 8);
                dst[i0 + i] = (float)v;
            } else {
                uint16_t h;
                memcpy(&h, buf + 2 * i, 2);
                if (t->dtype == SP_ST_F16) dst[i0 + i] = half_to_float(h);
                else {
                    uint32_t bits = (uint32_t)h << 16;
                    memcpy(&dst[i0 + i], &bits, 4);
                }
            }
        }
    }
    free(buf);
    return SP_OK;
}

/* Element i of an integer tensor in buf. */
static int64_t int_at(sp_st_dtype dt, const unsigned char *s, size_t i)
{
    switch (dt) {
    case SP_ST_I64: { int64_t x; memcpy(&x, s + 8 * i, 8); return x; }
    case SP_ST_I32: { int32_t x; memcpy(&x, s + 4 * i, 4); return x; }
    case SP_ST_I16: { int16_t x; memcpy(&x, s + 2 * i, 2); return x; }
    case SP_ST_I8: return (int8_t)s[i];
    default: return s[i];   /* U8, BOOL */
    }
}

int sp_st_read_i32(const sp_st_file *f, const char *name, int32_t *dst, int ndim, const int *shape)
{
    if (ndim < 0) return sp_error("sp_st_read_i32: argument 'ndim' is %d (expected >= 0)", ndim);
    if (!f) return sp_error("sp_st_read_i32: argument 'f' is NULL");
    if (!name) return sp_error("sp_st_read_i32: argument 'name' is NULL");
    if (!dst) return sp_error("sp_st_read_i32: argument 'dst' is NULL");
    const sp_st_tensor *t = get_checked(f, name, ndim, shape, false);
    if (!t) return SP_ERR;
    size_t w = dtypes[t->dtype].size;
    unsigned char *buf = sp_xmalloc(ST_CHUNK);
    /* Two passes, so a value that does not fit leaves dst untouched. */
    for (int pass = 0; pass < 2; pass++)
        for (size_t i0 = 0; i0 < t->numel; i0 += ST_CHUNK / w) {
            size_t m = t->numel - i0 < ST_CHUNK / w ? t->numel - i0 : ST_CHUNK / w;
            if (read_bytes_at(f, t, buf, m * w, i0 * w) != SP_OK) return free(buf), SP_ERR;
            for (size_t i = 0; i < m; i++) {
                int64_t v = int_at(t->dtype, buf, i);
                if (pass == 1) dst[i0 + i] = (int32_t)v;
                else if (v < INT32_MIN || v > INT32_MAX)
                    return free(buf), sp_error("%s: %s[%zu] = %lld does not fit in int32", f->path, name,
                                               i0 + i, (long long)v);
            }
        }
    free(buf);
    return SP_OK;
}

/* ---------------------------------------------------------------- writing */

typedef struct sbuf { char *s; size_t len, cap; } sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = 2 * (b->len + n + 1);
        b->s = sp_xrealloc(b->s, b->cap);
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    sb_put(b, tmp, (size_t)n);
}

static void sb_jstring(sbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { sb_put(b, "\\", 1); sb_put(b, s, 1); }
        else if (c < 0x20) sb_printf(b, "\\u%04x", c);
        else sb_put(b, s, 1);
    }
    sb_put(b, "\"", 1);
}

/* Bytes of entry e, or SP_ERR if its shape is invalid or its size overflows. */
static int entry_bytes(const char *path, const sp_st_entry *e, size_t *bytes)
{
    if (e->ndim < 0 || e->ndim > SP_ST_MAX_DIMS)
        return sp_error("%s: tensor %s has %d dimensions (at most 8)", path, e->name, e->ndim);
    if ((unsigned)e->dtype >= SP_ST_NDTYPES) return sp_error("%s: tensor %s has an invalid dtype", path, e->name);
    size_t b = dtypes[e->dtype].size;
    for (int d = 0; d < e->ndim; d++) {
        if (e->shape[d] < 0) return sp_error("%s: tensor %s has a negative dimension", path, e->name);
        if (__builtin_mul_overflow(b, (size_t)e->shape[d], &b))
            return sp_error("%s: tensor %s: its byte count overflows", path, e->name);
    }
    *bytes = b;
    return SP_OK;
}

/* Header JSON padded with spaces to a multiple of 8, so the buffer starts aligned. */
static int build_header(sbuf *b, const char *path, int n, const sp_st_entry *e, const char *const *meta)
{
    *b = (sbuf){0};
    sb_str(b, "{\"__metadata__\":{\"format\":\"pt\",\"scanprop_version\":\"" SP_SCANPROP_VERSION "\"");
    for (int i = 0; meta && meta[i]; i += 2) {
        if (!meta[i + 1]) return sp_error("%s: metadata key %s has no value", path, meta[i]);
        if (strcmp(meta[i], "format") == 0 || strcmp(meta[i], "scanprop_version") == 0) continue;
        sb_put(b, ",", 1);
        sb_jstring(b, meta[i]);
        sb_put(b, ":", 1);
        sb_jstring(b, meta[i + 1]);
    }
    sb_put(b, "}", 1);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        if (!e[i].name[0] || strcmp(e[i].name, "__metadata__") == 0)
            return sp_error("%s: invalid tensor name \"%s\"", path, e[i].name);
        for (int j = 0; j < i; j++)
            if (strcmp(e[i].name, e[j].name) == 0) return sp_error("%s: tensor name %s given twice", path, e[i].name);
        size_t bytes;
        if (entry_bytes(path, &e[i], &bytes) != SP_OK) return SP_ERR;
        sb_put(b, ",", 1);
        sb_jstring(b, e[i].name);
        sb_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", dtypes[e[i].dtype].name);
        for (int d = 0; d < e[i].ndim; d++) sb_printf(b, d ? ",%d" : "%d", e[i].shape[d]);
        sb_printf(b, "],\"data_offsets\":[%zu,%zu]}", off, off + bytes);
        if (__builtin_add_overflow(off, bytes, &off)) return sp_error("%s: the data size overflows", path);
    }
    sb_put(b, "}", 1);
    while (b->len % 8) sb_put(b, " ", 1);
    return SP_OK;
}

int sp_st_write(const char *path, int n, const sp_st_entry *entries, const char *const *metadata)
{
    if (!path) return sp_error("sp_st_write: the path is NULL");
    if (n < 0) return sp_error("sp_st_write %s: %d tensors (expected >= 0)", path, n);
    if (n > 0 && !entries) return sp_error("sp_st_write %s: %d tensors but the entries are NULL", path, n);
    sbuf h;
    if (build_header(&h, path, n, entries, metadata) != SP_OK) {
        free(h.s);
        return SP_ERR;
    }
    sp_atomic_file a;
    if (sp_atomic_begin(&a, path) != SP_OK) {
        free(h.s);
        return SP_ERR;
    }
    uint64_t hlen = h.len;
    int rc = sp_atomic_write(&a, &hlen, 8);
    if (rc == SP_OK) rc = sp_atomic_write(&a, h.s, h.len);
    for (int i = 0; rc == SP_OK && i < n; i++) {
        size_t bytes = 0;
        rc = entry_bytes(path, &entries[i], &bytes);
        if (rc == SP_OK) rc = sp_atomic_write(&a, entries[i].data, bytes);
    }
    free(h.s);
    if (rc != SP_OK) {
        sp_atomic_abort(&a);
        return SP_ERR;
    }
    return sp_atomic_commit(&a);
}

int sp_st_save(const char *path, int n, const char *const *names, const sp_tensor *const *tensors,
               const char *const *metadata)
{
    if (!path) return sp_error("sp_st_save: the path is NULL");
    if (n < 0) return sp_error("sp_st_save %s: %d tensors (expected >= 0)", path, n);
    if (n > 0 && (!names || !tensors))
        return sp_error("sp_st_save %s: %d tensors but the %s are NULL", path, n, !names ? "names" : "tensors");
    for (int i = 0; i < n; i++)
        if (!tensors[i] || !names[i])
            return sp_error("sp_st_save %s: %s %d is NULL", path, !tensors[i] ? "tensor" : "name", i);
    sp_st_entry *e = sp_xcalloc((size_t)(n ? n : 1), sizeof *e);
    for (int i = 0; i < n; i++) {
        if (tensors[i]->device != SP_CPU) {
            free(e);
            return sp_error("%s: tensor %s is on the %s; copy it to the CPU before saving", path, names[i],
                            tensors[i]->device == SP_CUDA ? "GPU" : "device");
        }
        e[i] = (sp_st_entry){names[i], SP_ST_F32, tensors[i]->ndim, tensors[i]->shape, tensors[i]->data};
    }
    int rc = sp_st_write(path, n, e, metadata);
    free(e);
    return rc;
}
