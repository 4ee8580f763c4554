/* safetensors.c — strict reader, atomic writer, model checkpoints.
 *
 * The JSON parser accepts exactly what a safetensors header can hold: one object whose
 * values are tensor descriptions {"dtype", "shape", "data_offsets"} or the string map
 * "__metadata__". Anything else is an error naming the byte where it went wrong. */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/error.h"
#include "core/model.h"
#include "core/safetensors.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c copies tensor bytes as is: it needs a little-endian host"
#endif

/* The reference implementation refuses headers above 100 MB; so do we. */
#define ST_MAX_HEADER (100ull * 1000 * 1000)

static const struct { const char *name; size_t size; } dtypes[SP_ST_NDTYPES] = {
    [SP_ST_F64] = {"F64", 8}, [SP_ST_F32] = {"F32", 4}, [SP_ST_F16] = {"F16", 2},
    [SP_ST_BF16] = {"BF16", 2}, [SP_ST_I64] = {"I64", 8}, [SP_ST_I32] = {"I32", 4},
    [SP_ST_I16] = {"I16", 2}, [SP_ST_I8] = {"I8", 1}, [SP_ST_U8] = {"U8", 1},
    [SP_ST_BOOL] = {"BOOL", 1},
};

const char *sp_st_dtype_name(sp_st_dtype dt) { return dtypes[dt].name; }
size_t sp_st_dtype_size(sp_st_dtype dt) { return dtypes[dt].size; }

struct sp_st_file {
    char *path;
    unsigned char *bytes;           /* the whole file                    */
    size_t size, buffer_size;
    const unsigned char *buffer;    /* bytes + 8 + header length         */
    sp_st_tensor *tensors;
    int n, cap;
    char **meta;                    /* key, value, key, value, ...       */
    int nmeta;
};

/* ---------------------------------------------------------------- JSON header */

typedef struct jparser {
    const char *path;
    const char *s;
    size_t len, pos;
} jparser;

__attribute__((noreturn)) static void jfail(const jparser *p, const char *what)
{
    sp_fail("%s: bad safetensors header at byte %zu: %s", p->path, 8 + p->pos, what);
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

/* A JSON string, unescaped into a fresh NUL-terminated buffer. */
static char *jstring(jparser *p)
{
    jexpect(p, '"');
    char *out = sp_xmalloc(p->len - p->pos + 1);   /* unescaping never grows */
    size_t k = 0;
    for (;;) {
        if (p->pos >= p->len) jfail(p, "unterminated string");
        unsigned char c = (unsigned char)p->s[p->pos++];
        if (c == '"') break;
        if (c < 0x20) jfail(p, "control character in string");
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
        k += put_utf8(out + k, cp);
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
                sp_fail("%s: tensor %s has unknown dtype \"%s\" (expected F64, F32, F16, BF16, I64, "
                        "I32, I16, I8, U8 or BOOL)", p->path, name, dt);
            free(dt);
        } else if (strcmp(key, "shape") == 0 && t.ndim < 0) {
            t.ndim = juint_array(p, shape, SP_ST_MAX_DIMS, "shape has more than 8 dimensions");
        } else if (strcmp(key, "data_offsets") == 0 && noff < 0) {
            noff = juint_array(p, off, 2, "data_offsets has more than 2 entries");
            if (noff != 2) jfail(p, "data_offsets needs exactly 2 entries [begin, end]");
        } else {
            jfail(p, "unexpected or repeated key in a tensor entry (expected dtype, shape, data_offsets)");
        }
        free(key);
        if (jpeek(p, '}')) break;
        jexpect(p, ',');
    }
    p->pos++;
    if (t.dtype == SP_ST_NDTYPES || t.ndim < 0 || noff < 0)
        sp_fail("%s: tensor %s lacks dtype, shape or data_offsets", p->path, name);
    size_t numel = 1;
    bool overflow = false;
    for (int i = 0; i < t.ndim; i++) {
        t.shape[i] = (int64_t)shape[i];
        overflow |= __builtin_mul_overflow(numel, (size_t)shape[i], &numel);
    }
    overflow |= __builtin_mul_overflow(numel, dtypes[t.dtype].size, &t.nbytes);
    if (off[1] < off[0])
        sp_fail("%s: tensor %s has data_offsets [%llu, %llu] with end before begin", p->path, name,
                (unsigned long long)off[0], (unsigned long long)off[1]);
    if (overflow || t.nbytes != off[1] - off[0])
        sp_fail("%s: tensor %s: %zu elements of %s need %zu bytes but data_offsets [%llu, %llu] "
                "span %llu", p->path, name, numel, dtypes[t.dtype].name, t.nbytes,
                (unsigned long long)off[0], (unsigned long long)off[1],
                (unsigned long long)(off[1] - off[0]));
    if (off[1] > f->buffer_size)
        sp_fail("%s: tensor %s: data_offsets [%llu, %llu] run past the end of the %zu-byte data "
                "buffer (truncated file?)", p->path, name, (unsigned long long)off[0],
                (unsigned long long)off[1], f->buffer_size);
    t.numel = numel;
    t.data = f->buffer + off[0];
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 16;
        f->tensors = sp_xrealloc(f->tensors, (size_t)f->cap * sizeof *f->tensors);
    }
    f->tensors[f->n++] = t;
}

static void parse_metadata(jparser *p, sp_st_file *f)
{
    if (f->meta) jfail(p, "repeated __metadata__");
    f->meta = sp_xcalloc(1, sizeof *f->meta);
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
    return x->data < y->data ? -1 : x->data > y->data;
}

static void parse_header(sp_st_file *f, const char *s, size_t len)
{
    jparser p = {.path = f->path, .s = s, .len = len};
    jexpect(&p, '{');
    if (jpeek(&p, '}')) p.pos++;
    else for (;;) {
        char *key = jstring(&p);
        jexpect(&p, ':');
        if (strcmp(key, "__metadata__") == 0) {
            parse_metadata(&p, f);
            free(key);
        } else {
            if (sp_st_find(f, key)) sp_fail("%s: tensor %s appears twice in the header", f->path, key);
            parse_tensor(&p, f, key);
        }
        if (jpeek(&p, '}')) { p.pos++; break; }
        jexpect(&p, ',');
    }
    jskip(&p);
    if (p.pos != len) jfail(&p, "trailing characters after the header object");

    /* Disjointness: sort by begin, each must end before the next begins. Zero-size
     * tensors occupy no bytes and cannot overlap. */
    const sp_st_tensor **sorted = sp_xmalloc((size_t)(f->n ? f->n : 1) * sizeof *sorted);
    int m = 0;
    for (int i = 0; i < f->n; i++)
        if (f->tensors[i].nbytes) sorted[m++] = &f->tensors[i];
    qsort(sorted, (size_t)m, sizeof *sorted, by_offset);
    for (int i = 1; i < m; i++)
        if (sorted[i - 1]->data + sorted[i - 1]->nbytes > sorted[i]->data)
            sp_fail("%s: tensors %s and %s overlap in the data buffer", f->path, sorted[i - 1]->name,
                    sorted[i]->name);
    free(sorted);
}

/* ---------------------------------------------------------------- reading */

sp_st_file *sp_st_open(const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) sp_fail("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(fp), &st) != 0 || !S_ISREG(st.st_mode))
        sp_fail("%s: not a regular file", path);
    sp_st_file *f = sp_xcalloc(1, sizeof *f);
    f->path = sp_xstrdup(path);
    f->size = (size_t)st.st_size;
    f->bytes = sp_xmalloc(f->size + 1);
    if (fread(f->bytes, 1, f->size, fp) != f->size) sp_fail("%s: read error: %s", path, strerror(errno));
    fclose(fp);
    if (f->size < 8)
        sp_fail("%s: %zu bytes is too short for a safetensors file (truncated?)", path, f->size);
    uint64_t hlen;
    memcpy(&hlen, f->bytes, 8);
    if (hlen > ST_MAX_HEADER)
        sp_fail("%s: header length %llu is above the 100 MB limit (not a safetensors file?)", path,
                (unsigned long long)hlen);
    if (hlen > f->size - 8)
        sp_fail("%s: header length %llu exceeds the %zu bytes after it (truncated file?)", path,
                (unsigned long long)hlen, f->size - 8);
    f->buffer = f->bytes + 8 + hlen;
    f->buffer_size = f->size - 8 - (size_t)hlen;
    parse_header(f, (const char *)f->bytes + 8, (size_t)hlen);
    return f;
}

void sp_st_close(sp_st_file *f)
{
    if (!f) return;
    for (int i = 0; i < f->n; i++) free((char *)f->tensors[i].name);
    for (int i = 0; i < 2 * f->nmeta; i++) free(f->meta[i]);
    free(f->meta);
    free(f->tensors);
    free(f->bytes);
    free(f->path);
    free(f);
}

const char *sp_st_path(const sp_st_file *f) { return f->path; }
int sp_st_count(const sp_st_file *f) { return f->n; }
const sp_st_tensor *sp_st_at(const sp_st_file *f, int i) { return &f->tensors[i]; }

const sp_st_tensor *sp_st_find(const sp_st_file *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

const char *sp_st_metadata(const sp_st_file *f, const char *key)
{
    for (int i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta[2 * i], key) == 0) return f->meta[2 * i + 1];
    return NULL;
}

static void shape_str64(char *buf, size_t len, int ndim, const int64_t *shape)
{
    size_t k = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (k < len) snprintf(buf + k, len - k, "]");
}

/* Writes "problem" for tensor `name` against the wanted shape into msg; false if fine. */
static bool shape_problem(const sp_st_tensor *t, int ndim, const int *shape, char *msg, size_t len)
{
    bool same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (same) return false;
    int64_t want[SP_ST_MAX_DIMS];
    for (int i = 0; i < ndim; i++) want[i] = shape[i];
    char got_s[160], want_s[160];
    shape_str64(got_s, sizeof got_s, t->ndim, t->shape);
    shape_str64(want_s, sizeof want_s, ndim, want);
    snprintf(msg, len, "%s has shape %s, expected %s", t->name, got_s, want_s);
    return true;
}

static bool is_float(sp_st_dtype dt) { return dt <= SP_ST_BF16; }

static const sp_st_tensor *get_checked(const sp_st_file *f, const char *name, int ndim,
                                       const int *shape, bool want_float)
{
    const sp_st_tensor *t = sp_st_find(f, name);
    if (!t) sp_fail("%s: no tensor named %s", f->path, name);
    if (is_float(t->dtype) != want_float)
        sp_fail("%s: %s has dtype %s, expected %s", f->path, name, dtypes[t->dtype].name,
                want_float ? "a float dtype (F32, F64, F16, BF16)" : "an integer dtype (I64, I32, U8, ...)");
    char msg[400];
    if (shape_problem(t, ndim, shape, msg, sizeof msg)) sp_fail("%s: %s", f->path, msg);
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

void sp_st_read_f32(const sp_st_file *f, const char *name, float *dst, int ndim, const int *shape)
{
    const sp_st_tensor *t = get_checked(f, name, ndim, shape, true);
    const unsigned char *s = t->data;
    if (t->dtype == SP_ST_F32) {
        memcpy(dst, s, t->nbytes);
        return;
    }
    for (size_t i = 0; i < t->numel; i++) {
        if (t->dtype == SP_ST_F64) {
            double v;
            memcpy(&v, s + 8 * i, 8);
            dst[i] = (float)v;
        } else {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            if (t->dtype == SP_ST_F16) dst[i] = half_to_float(h);
            else {
                uint32_t bits = (uint32_t)h << 16;
                memcpy(&dst[i], &bits, 4);
            }
        }
    }
}

void sp_st_read_i32(const sp_st_file *f, const char *name, int32_t *dst, int ndim, const int *shape)
{
    const sp_st_tensor *t = get_checked(f, name, ndim, shape, false);
    const unsigned char *s = t->data;
    size_t w = dtypes[t->dtype].size;
    for (size_t i = 0; i < t->numel; i++) {
        int64_t v;
        switch (t->dtype) {
        case SP_ST_I64: memcpy(&v, s + w * i, 8); break;
        case SP_ST_I32: { int32_t x; memcpy(&x, s + w * i, 4); v = x; break; }
        case SP_ST_I16: { int16_t x; memcpy(&x, s + w * i, 2); v = x; break; }
        case SP_ST_I8: v = (int8_t)s[i]; break;
        default: v = s[i]; break;   /* U8, BOOL */
        }
        if (v < INT32_MIN || v > INT32_MAX)
            sp_fail("%s: %s[%zu] = %lld does not fit in int32", f->path, name, i, (long long)v);
        dst[i] = (int32_t)v;
    }
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

/* Header JSON padded with spaces to a multiple of 8, so the buffer starts aligned. */
static sbuf build_header(const char *path, int n, const sp_st_entry *e, const char *const *meta)
{
    sbuf b = {0};
    sb_str(&b, "{\"__metadata__\":{\"format\":\"pt\",\"scanprop_version\":\"" SP_SCANPROP_VERSION "\"");
    for (int i = 0; meta && meta[i]; i += 2) {
        if (!meta[i + 1]) sp_fail("%s: metadata key %s has no value", path, meta[i]);
        if (strcmp(meta[i], "format") == 0 || strcmp(meta[i], "scanprop_version") == 0) continue;
        sb_put(&b, ",", 1);
        sb_jstring(&b, meta[i]);
        sb_put(&b, ":", 1);
        sb_jstring(&b, meta[i + 1]);
    }
    sb_put(&b, "}", 1);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        if (!e[i].name[0] || strcmp(e[i].name, "__metadata__") == 0)
            sp_fail("%s: invalid tensor name \"%s\"", path, e[i].name);
        for (int j = 0; j < i; j++)
            if (strcmp(e[i].name, e[j].name) == 0) sp_fail("%s: tensor name %s given twice", path, e[i].name);
        if (e[i].ndim < 0 || e[i].ndim > SP_ST_MAX_DIMS)
            sp_fail("%s: tensor %s has %d dimensions (at most 8)", path, e[i].name, e[i].ndim);
        size_t bytes = dtypes[e[i].dtype].size;
        sb_put(&b, ",", 1);
        sb_jstring(&b, e[i].name);
        sb_printf(&b, ":{\"dtype\":\"%s\",\"shape\":[", dtypes[e[i].dtype].name);
        for (int d = 0; d < e[i].ndim; d++) {
            if (e[i].shape[d] < 0) sp_fail("%s: tensor %s has a negative dimension", path, e[i].name);
            sb_printf(&b, d ? ",%d" : "%d", e[i].shape[d]);
            bytes *= (size_t)e[i].shape[d];
        }
        sb_printf(&b, "],\"data_offsets\":[%zu,%zu]}", off, off + bytes);
        off += bytes;
    }
    sb_put(&b, "}", 1);
    while (b.len % 8) sb_put(&b, " ", 1);
    return b;
}

static size_t entry_bytes(const sp_st_entry *e)
{
    return sp_shape_numel(e->ndim, e->shape) * dtypes[e->dtype].size;
}

/* Make the rename durable. Best effort: the new file is already complete and in place,
 * and some file systems refuse fsync on directories. */
static void fsync_parent_dir(const char *path)
{
    char *dir = sp_xstrdup(path);
    char *slash = strrchr(dir, '/');
    if (!slash) strcpy(dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

void sp_st_write(const char *path, int n, const sp_st_entry *entries, const char *const *metadata)
{
    sbuf h = build_header(path, n, entries, metadata);
    char tmp[PATH_MAX];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= sizeof tmp)
        sp_fail("%s: path too long", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) sp_fail("%s: cannot create %s: %s (nothing written)", path, tmp, strerror(errno));
    FILE *fp = fdopen(fd, "wb");
    if (!fp) {
        close(fd);
        unlink(tmp);
        sp_fail("%s: cannot write: %s (nothing written)", path, strerror(errno));
    }
    uint64_t hlen = h.len;
    errno = 0;
    bool ok = fwrite(&hlen, 8, 1, fp) == 1 && fwrite(h.s, 1, h.len, fp) == h.len;
    for (int i = 0; ok && i < n; i++) {
        size_t bytes = entry_bytes(&entries[i]);
        ok = fwrite(entries[i].data, 1, bytes, fp) == bytes;
    }
    ok = ok && fflush(fp) == 0 && fsync(fd) == 0;
    int err = ok ? 0 : errno ? errno : EIO;
    if (fclose(fp) != 0 && ok) {
        ok = false;
        err = errno;
    }
    if (ok && rename(tmp, path) != 0) {
        ok = false;
        err = errno;
    }
    free(h.s);
    if (!ok) {
        unlink(tmp);
        sp_fail("%s: cannot write: %s (the existing file, if any, is unchanged)", path, strerror(err));
    }
    fsync_parent_dir(path);
}

void sp_st_save(const char *path, int n, const char *const *names, const sp_tensor *const *tensors,
                const char *const *metadata)
{
    sp_st_entry *e = sp_xcalloc((size_t)(n ? n : 1), sizeof *e);
    for (int i = 0; i < n; i++) {
        if (tensors[i]->device != SP_CPU)
            sp_fail("%s: tensor %s is on the %s; copy it to the CPU before saving", path, names[i],
                    tensors[i]->device == SP_CUDA ? "GPU" : "device");
        e[i] = (sp_st_entry){names[i], SP_ST_F32, tensors[i]->ndim, tensors[i]->shape, tensors[i]->data};
    }
    sp_st_write(path, n, e, metadata);
    free(e);
}

/* ---------------------------------------------------------------- models */

void sp_model_save(const sp_model *m, const char *path)
{
    int n = m->nparams;
    const char **names = sp_xcalloc((size_t)(n ? n : 1), sizeof *names);
    const sp_tensor **ts = sp_xcalloc((size_t)(n ? n : 1), sizeof *ts);
    for (int i = 0; i < n; i++) {
        names[i] = m->params[i]->name;
        ts[i] = &m->params[i]->value;
    }
    const char *meta[] = {"scanprop_model", m->name, NULL};
    sp_st_save(path, n, names, ts, meta);
    free(names);
    free(ts);
}

static void note_problem(char *first, size_t len, int *count, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void note_problem(char *first, size_t len, int *count, const char *fmt, ...)
{
    if ((*count)++) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(first, len, fmt, ap);
    va_end(ap);
}

void sp_model_load(sp_model *m, const char *path)
{
    sp_st_file *f = sp_st_open(path);
    char first[512] = "", shape_buf[64];
    int problems = 0;
    for (int i = 0; i < m->nparams; i++) {
        const sp_param *p = m->params[i];
        const sp_st_tensor *t = sp_st_find(f, p->name);
        if (!t) {
            note_problem(first, sizeof first, &problems, "missing tensor %s (expected shape %s)",
                         p->name, sp_shape_str(&p->value, shape_buf, sizeof shape_buf));
        } else if (!is_float(t->dtype)) {
            note_problem(first, sizeof first, &problems, "%s has dtype %s, expected a float dtype",
                         p->name, dtypes[t->dtype].name);
        } else {
            char msg[400];
            if (shape_problem(t, p->value.ndim, p->value.shape, msg, sizeof msg))
                note_problem(first, sizeof first, &problems, "%s", msg);
        }
        if (p->value.device != SP_CPU)
            sp_fail("%s: parameter %s is not on the CPU; load before moving the model", path, p->name);
    }
    for (int i = 0; i < f->n; i++)
        if (strncmp(f->tensors[i].name, SP_ST_STATE_PREFIX, strlen(SP_ST_STATE_PREFIX)) != 0 &&
            !sp_model_param(m, f->tensors[i].name))
            note_problem(first, sizeof first, &problems, "unexpected tensor %s (model %s has no such "
                         "parameter)", f->tensors[i].name, m->name);
    if (problems > 1)
        sp_fail("%s: %s; and %d more problem%s", path, first, problems - 1,
                problems > 2 ? "s" : "");
    if (problems) sp_fail("%s: %s", path, first);
    for (int i = 0; i < m->nparams; i++) {
        sp_param *p = m->params[i];
        sp_st_read_f32(f, p->name, p->value.data, p->value.ndim, p->value.shape);
    }
    sp_st_close(f);
}
