/* idx.c — IDX files (MNIST, Fashion-MNIST), raw or gzip.
 *
 * Header: magic 0x0000TTDD (TT = 0x08 unsigned byte, DD = number of dimensions), then
 * DD big-endian uint32 sizes, then the bytes. Images 2051 = 0x803, labels 2049 = 0x801.
 *
 * The gzip stream is inflated here (zlib's inflate, not gzread) so that bytes after the
 * end of the compressed stream are seen and refused with their offset, and so that
 * sizes the header announces are checked against the file before anything is
 * allocated: a raw file must hold exactly the announced bytes, a gzip file at least
 * 1/1032 of them (deflate cannot compress better than 1032:1). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include "core/error.h"
#include "core/io/fileio.h"
#include "data/data.h"
#include "data/rowset.h"

#define IDX_IMAGES 2051u
#define IDX_LABELS 2049u
#define IDX_CLASSES 10
#define IN_CHUNK (1u << 17)
#define DEFLATE_MAX_RATIO 1032

typedef struct idx_src {
    const char *path;
    int fd;
    off_t size, pos;          /* file size; bytes taken from the file so far   */
    bool gz, zinit, ended;  /* ended: the current gzip member is complete */
    z_stream z;
    unsigned char *in;        /* gz: compressed input buffer                   */
} idx_src;

static void src_close(idx_src *s)
{
    if (s->zinit) inflateEnd(&s->z);
    free(s->in);
    if (s->fd >= 0) close(s->fd);
    s->fd = -1;
    s->in = NULL;
    s->zinit = false;
}

static int src_open(idx_src *s, const char *path)
{
    *s = (idx_src){.path = path, .fd = -1};
    struct stat st;
    s->fd = sp_open_regular(path, &st);
    if (s->fd < 0) return SP_ERR;
    s->size = st.st_size;
    unsigned char m[2] = {0};
    if (s->size >= 2 && sp_pread_full(s->fd, m, 2, 0, path, "the magic number") != SP_OK) return src_close(s), SP_ERR;
    s->gz = m[0] == 0x1f && m[1] == 0x8b;
    if (s->gz) {
        s->in = sp_xmalloc(IN_CHUNK);
        if (inflateInit2(&s->z, 15 + 16) != Z_OK) {
            src_close(s);
            return sp_error("%s: cannot start gzip decompression (out of memory)", path);
        }
        s->zinit = true;
    }
    return SP_OK;
}

/* Refill the compressed input if it is used up; *eof at the end of the file. */
static int refill(idx_src *s, bool *eof)
{
    *eof = false;
    if (s->z.avail_in) return SP_OK;
    ssize_t r;
    do r = pread(s->fd, s->in, IN_CHUNK, s->pos);
    while (r < 0 && errno == EINTR);
    if (r < 0) return sp_error("%s: read error: %s", s->path, strerror(errno));
    s->z.next_in = s->in;
    s->z.avail_in = (uInt)r;
    s->pos += r;
    *eof = r == 0;
    return SP_OK;
}

/* Offset in the file of the next compressed byte not yet consumed. */
static long long gz_offset(const idx_src *s) { return (long long)(s->pos - s->z.avail_in); }

/* One inflate call into out[0..want); *made bytes produced. SP_ERR on corrupt data or
 * when input is needed and the file has ended (`what` names what was being read). */
static int inflate_step(idx_src *s, unsigned char *out, size_t want, size_t *made, const char *what)
{
    s->z.next_out = out;
    s->z.avail_out = (uInt)want;
    int r = inflate(&s->z, Z_NO_FLUSH);
    *made = want - s->z.avail_out;
    if (r == Z_STREAM_END) {
        s->ended = true;
        return SP_OK;
    }
    if (r != Z_OK && r != Z_BUF_ERROR)
        return sp_error("%s: corrupt gzip data near byte %lld while reading %s (%s)", s->path, gz_offset(s), what,
                        s->z.msg ? s->z.msg : "inflate failed");
    if (*made || s->z.avail_in) return SP_OK;
    bool eof;
    if (refill(s, &eof) != SP_OK) return SP_ERR;
    if (eof) return sp_error("%s: truncated: the compressed stream ends while reading %s", s->path, what);
    return SP_OK;
}

/* After the end of a gzip member: the next member starts (true in *more), the file
 * ends, or the bytes that follow are refused with their offset. */
static int next_member(idx_src *s, bool *more)
{
    bool eof;
    *more = false;
    if (refill(s, &eof) != SP_OK) return SP_ERR;
    if (eof) return SP_OK;
    if (s->z.next_in[0] != 0x1f)
        return sp_error("%s: %lld trailing bytes from byte %lld, after the end of the gzip stream", s->path,
                        (long long)(s->size - gz_offset(s)), gz_offset(s));
    inflateReset(&s->z);
    s->ended = false;
    *more = true;
    return SP_OK;
}

/* Exactly n bytes, or an error naming what was being read. */
static int src_read(idx_src *s, void *buf, size_t n, const char *what)
{
    if (!s->gz) {
        if (sp_pread_full(s->fd, buf, n, s->pos, s->path, what) != SP_OK) return SP_ERR;
        s->pos += (off_t)n;
        return SP_OK;
    }
    size_t got = 0;
    while (got < n) {
        if (s->ended) {   /* another member may follow, as `cat a.gz b.gz` makes */
            bool more;
            if (next_member(s, &more) != SP_OK) return SP_ERR;
            if (!more)
                return sp_error("%s: truncated: %s needs %zu bytes, the compressed stream ends after %zu",
                                s->path, what, n, got);
        }
        size_t made, want = n - got > (1u << 30) ? (1u << 30) : n - got;
        if (inflate_step(s, (unsigned char *)buf + got, want, &made, what) != SP_OK) return SP_ERR;
        got += made;
    }
    return SP_OK;
}

/* Nothing may follow the announced data: not in a raw file, not in the decompressed
 * stream, not after the end of the gzip stream (further empty members are fine). */
static int src_expect_end(idx_src *s, size_t announced)
{
    if (!s->gz) {
        if (s->pos != s->size)
            return sp_error("%s: %lld extra bytes from byte %lld, after the %zu the header announces", s->path,
                            (long long)(s->size - s->pos), (long long)s->pos, announced);
        return SP_OK;
    }
    for (;;) {
        while (!s->ended) {
            unsigned char extra;
            size_t made;
            if (inflate_step(s, &extra, 1, &made, "the end of the stream") != SP_OK) return SP_ERR;
            if (made)
                return sp_error("%s: extra data after the %zu bytes the header announces (decompressed)",
                                s->path, announced);
        }
        bool more;
        if (next_member(s, &more) != SP_OK) return SP_ERR;
        if (!more) return SP_OK;
    }
}

/* Can the file hold `bytes` bytes after its header? Checked before allocating. */
static int src_can_hold(const idx_src *s, size_t header, size_t bytes, const char *what)
{
    unsigned long long have = (unsigned long long)s->size;
    if (!s->gz) {
        if (have - header < bytes)
            return sp_error("%s: truncated: the header announces %s of %zu bytes, the file has %llu after "
                            "the header", s->path, what, bytes, have - header);
        return SP_OK;
    }
    if (bytes / DEFLATE_MAX_RATIO > have)
        return sp_error("%s: the header announces %s of %zu bytes, more than a %llu-byte gzip file can "
                        "hold (deflate compresses at most %d:1)", s->path, what, bytes, have, DEFLATE_MAX_RATIO);
    return SP_OK;
}

static uint32_t be32(const unsigned char *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* Magic and the `ndim` sizes. */
static int idx_header(idx_src *s, uint32_t magic, uint32_t *dims, int ndim)
{
    unsigned char b[16];
    if (src_read(s, b, 4, "the magic number") != SP_OK) return SP_ERR;
    uint32_t got = be32(b);
    if (got != magic)
        return sp_error("%s: bad magic number %u (0x%08x), expected %u for IDX %s%s", s->path, got, got, magic,
                        magic == IDX_IMAGES ? "images" : "labels",
                        got == IDX_IMAGES ? " (this is an images file)"
                        : got == IDX_LABELS ? " (this is a labels file)" : "");
    if (src_read(s, b, 4 * (size_t)ndim, "the dimension sizes") != SP_OK) return SP_ERR;
    for (int i = 0; i < ndim; i++) dims[i] = be32(b + 4 * i);
    return SP_OK;
}

/* Both headers read and checked against each other and against the files' sizes, before
 * anything is allocated; dims: count, rows, cols. */
static int idx_check(idx_src *gi, idx_src *gl, uint32_t *dims)
{
    uint32_t nlabels;
    if (idx_header(gi, IDX_IMAGES, dims, 3) != SP_OK || idx_header(gl, IDX_LABELS, &nlabels, 1) != SP_OK)
        return SP_ERR;
    if (dims[0] == 0 || dims[0] > 1u << 30 || dims[1] == 0 || dims[2] == 0 || dims[1] > 4096 || dims[2] > 4096)
        return sp_error("%s: implausible sizes %u x %u x %u (expected count in 1..2^30, rows and cols in "
                        "1..4096)", gi->path, dims[0], dims[1], dims[2]);
    if (nlabels != dims[0])
        return sp_error("%s: %u labels but %s has %u images (expected the same count)", gl->path, nlabels,
                        gi->path, dims[0]);
    size_t bytes = (size_t)dims[0] * dims[1] * dims[2];   /* < 2^54: no overflow */
    if (src_can_hold(gi, 16, bytes, "the pixels") != SP_OK || src_can_hold(gl, 8, dims[0], "the labels") != SP_OK)
        return SP_ERR;
    return SP_OK;
}

static sp_dataset *idx_load(idx_src *gi, idx_src *gl)
{
    uint32_t dims[3];
    if (idx_check(gi, gl, dims) != SP_OK) return NULL;
    size_t bytes = (size_t)dims[0] * dims[1] * dims[2];
    int n = (int)dims[0], shape[3] = {1, (int)dims[1], (int)dims[2]};
    uint8_t *x;
    int *y;
    sp_dataset *d = sp_dataset_new_u8(gi->path, n, 3, shape, IDX_CLASSES, 255.0f, &x, &y);
    if (!d) return NULL;
    uint8_t *raw = sp_xmalloc((size_t)n);
    bool ok = src_read(gi, x, bytes, "the pixels") == SP_OK && src_expect_end(gi, bytes) == SP_OK &&
              src_read(gl, raw, (size_t)n, "the labels") == SP_OK && src_expect_end(gl, (size_t)n) == SP_OK;
    for (int i = 0; ok && i < n; i++) y[i] = raw[i];
    free(raw);
    if (!ok || sp_dataset_check_labels(d, y, gl->path) != SP_OK) {
        sp_dataset_free(d);
        return NULL;
    }
    d->file_bytes_read = (long long)(gi->pos + gl->pos);   /* raw: the file; gz: the compressed bytes */
    d->file_bytes_kept = (long long)(bytes + (size_t)n);
    return d;
}

sp_dataset *sp_idx_open(const char *images_path, const char *labels_path)
{
    if (!images_path) return sp_error("sp_idx_open: argument 'images_path' is NULL"), NULL;
    if (!labels_path) return sp_error("sp_idx_open: argument 'labels_path' is NULL"), NULL;
    idx_src gi, gl = {.fd = -1};
    if (src_open(&gi, images_path) != SP_OK) return NULL;
    if (src_open(&gl, labels_path) != SP_OK) return src_close(&gi), NULL;
    sp_dataset *d = idx_load(&gi, &gl);
    src_close(&gi);
    src_close(&gl);
    return d;
}

/* ---- opened for a subset of rows (sp_idx_open_rows) ---------------------------------- */

typedef struct idx_rows {
    sp_rowset rs;
    char paths[2][4096];      /* images, labels (the sources point here)        */
    idx_src src[2];
    size_t hdr[2], row[2];    /* header bytes, bytes a row: images, labels      */
    int next[2];              /* gz: the row the stream gives next              */
    long long past;           /* bytes read by streams closed for a restart     */
    unsigned char *scratch;   /* gz: rows inflated and dropped                  */
} idx_rows;

#define SCRATCH (1u << 16)

static void rows_close(sp_rowset *r)
{
    idx_rows *ir = (idx_rows *)r;
    for (int k = 0; k < 2; k++) src_close(&ir->src[k]);
    free(ir->scratch);
    ir->scratch = NULL;
}

static void rows_count(idx_rows *ir) { ir->rs.base.file_bytes_read = ir->past + ir->src[0].pos + ir->src[1].pos; }

/* Rows [i, j) of file k into dst (NULL: dropped). A raw file is read at the rows' offset;
 * a gzip stream cannot seek, so it is at row i already (the caller inflated up to it). */
static int rows_take(idx_rows *ir, int k, int i, int j, unsigned char *dst, const char *what)
{
    idx_src *s = &ir->src[k];
    size_t len = (size_t)(j - i) * ir->row[k];
    if (!s->gz) {   /* dst: nothing is read for dropped rows */
        if (!dst) return SP_OK;
        if (sp_pread_full(s->fd, dst, len, (off_t)(ir->hdr[k] + (size_t)i * ir->row[k]), s->path, what) != SP_OK)
            return SP_ERR;
        s->pos += (off_t)len;
        return SP_OK;
    }
    while (len) {
        size_t m = dst ? len : len < SCRATCH ? len : SCRATCH;
        if (src_read(s, dst ? dst : ir->scratch, m, what) != SP_OK) return SP_ERR;
        if (dst) dst += m;
        len -= m;
    }
    ir->next[k] = j;
    return SP_OK;
}

/* Labels of rows [i, j) (every one asked for): read, checked as sp_dataset_check_labels. */
static int rows_labels(idx_rows *ir, int i, int j)
{
    unsigned char *b = ir->scratch;
    for (int a = i; a < j; a += SCRATCH) {
        int e = j - a < (int)SCRATCH ? j : a + (int)SCRATCH;
        if (rows_take(ir, 1, a, e, b, "the labels") != SP_OK) return SP_ERR;
        for (int t = a; t < e; t++) {
            if (b[t - a] >= IDX_CLASSES)
                return sp_error("%s: label %d of sample %d is out of range (expected 0..%d)", ir->paths[1],
                                b[t - a], t, IDX_CLASSES - 1);
            ir->rs.label[t] = b[t - a];
        }
    }
    return SP_OK;
}

/* File k's rows flagged (mask) in add; last: through to the end of the file. */
static int rows_file(idx_rows *ir, int k, const unsigned char *add, int mask, bool last)
{
    idx_src *s = &ir->src[k];
    const char *what = k ? "the labels" : "the pixels";
    int n = ir->rs.base.n, first = -1, end = 0;
    for (int i = 0; i < n; i++)
        if (add[i] & mask) end = i + 1, first = first < 0 ? i : first;
    if (s->gz && first >= 0 && first < ir->next[k]) {   /* behind the stream: inflate from the start again */
        ir->past += s->pos;
        src_close(s);
        uint32_t dims[3];
        if (src_open(s, ir->paths[k]) != SP_OK || idx_header(s, k ? IDX_LABELS : IDX_IMAGES, dims, k ? 1 : 3) != SP_OK)
            return SP_ERR;
        ir->next[k] = 0;
    }
    if (last && s->gz) end = n;
    for (int i = s->gz ? ir->next[k] : 0; i < end;) {
        bool want = add[i] & mask;
        int j = i + 1;
        while (j < end && (bool)(add[j] & mask) == want) j++;
        int rc = !want ? rows_take(ir, k, i, j, NULL, what)
                 : k ? rows_labels(ir, i, j) : rows_take(ir, k, i, j, sp_rowset_pixels(&ir->rs, i), what);
        if (rc != SP_OK) return SP_ERR;
        if (want && !k) ir->rs.base.file_bytes_kept += (long long)((size_t)(j - i) * ir->row[k]);
        if (want && k) ir->rs.base.file_bytes_kept += j - i;
        i = j;
    }
    if (last && s->gz) return src_expect_end(s, (size_t)n * ir->row[k]);
    return SP_OK;
}

static int rows_fill(sp_rowset *r, const unsigned char *add, bool last)
{
    idx_rows *ir = (idx_rows *)r;
    int rc = rows_file(ir, 0, add, SP_LOADER_X, last);
    if (rc == SP_OK) rc = rows_file(ir, 1, add, SP_LOADER_X | SP_LOADER_Y, last);
    rows_count(ir);
    return rc;
}

/* A raw file holds exactly its header and the announced bytes (checked now, not after
 * reading them, with src_expect_end's message). */
static int rows_exact(const idx_src *s, size_t header, size_t announced)
{
    if (s->gz || (unsigned long long)s->size == header + announced) return SP_OK;
    return sp_error("%s: %lld extra bytes from byte %lld, after the %zu the header announces", s->path,
                    (long long)s->size - (long long)(header + announced), (long long)(header + announced),
                    announced);
}

sp_dataset *sp_idx_open_rows(const char *images_path, const char *labels_path)
{
    if (!images_path) return sp_error("sp_idx_open_rows: argument 'images_path' is NULL"), NULL;
    if (!labels_path) return sp_error("sp_idx_open_rows: argument 'labels_path' is NULL"), NULL;
    idx_rows *ir = sp_xcalloc(1, sizeof *ir);
    ir->src[0].fd = ir->src[1].fd = -1;
    ir->rs.close = rows_close;
    ir->rs.fill = rows_fill;
    snprintf(ir->paths[0], sizeof ir->paths[0], "%s", images_path);
    snprintf(ir->paths[1], sizeof ir->paths[1], "%s", labels_path);
    uint32_t dims[3];
    bool ok = src_open(&ir->src[0], ir->paths[0]) == SP_OK && src_open(&ir->src[1], ir->paths[1]) == SP_OK &&
              idx_check(&ir->src[0], &ir->src[1], dims) == SP_OK;
    ir->hdr[0] = 16, ir->hdr[1] = 8;
    ok = ok && rows_exact(&ir->src[0], 16, (size_t)dims[0] * dims[1] * dims[2]) == SP_OK &&
         rows_exact(&ir->src[1], 8, dims[0]) == SP_OK &&
         sp_rowset_init(&ir->rs, images_path, (int)dims[0], 1, (int)dims[1], (int)dims[2], IDX_CLASSES) == SP_OK;
    if (!ok) {
        rows_close(&ir->rs);
        if (ir->rs.base.free) sp_dataset_free(&ir->rs.base);   /* the maps, if sp_rowset_init ran */
        else free(ir);
        return NULL;
    }
    ir->row[0] = (size_t)dims[1] * dims[2], ir->row[1] = 1;
    ir->next[0] = ir->next[1] = 0;
    ir->scratch = sp_xmalloc(SCRATCH);
    rows_count(ir);
    return &ir->rs.base;
}

/* dir/<prefix>-<kind>[.gz], also the "train-images.idx3-ubyte" spelling and the
 * torchvision layout dir/FashionMNIST/raw. The first name that exists is taken (a file
 * that exists but cannot be read is reported as such when it is opened, not skipped). */
static int find_idx(char *out, size_t len, const char *dir, const char *prefix, const char *kind)
{
    static const char *const subdirs[] = {"", "/FashionMNIST/raw", "/MNIST/raw"};
    static const char *const seps[] = {"-", "."}, *const exts[] = {".gz", ""};
    for (int s = 0; s < 3; s++)
        for (int p = 0; p < 2; p++)
            for (int e = 0; e < 2; e++) {
                const char *dot = strchr(kind, '-');
                snprintf(out, len, "%s%s/%s-%.*s%s%s%s", dir, subdirs[s], prefix, (int)(dot - kind), kind,
                         seps[p], dot + 1, exts[e]);
                struct stat st;
                if (stat(out, &st) == 0 || (errno != ENOENT && errno != ENOTDIR)) return SP_OK;
            }
    return sp_error("%s: no %s-%s or %s-%s.gz (expected the Fashion-MNIST/MNIST IDX files, e.g. "
                    "/usr/share/datasets/fashion-mnist)", dir, prefix, kind, prefix, kind);
}

/* The dir's train or test IDX pair, opened by `opener` (whole, or for rows), padded. */
static sp_dataset *fashion_mnist_open(const char *fn, const char *dir, bool train, int pad_to,
                                      sp_dataset *(*opener)(const char *, const char *))
{
    if (!dir) return sp_error("%s: argument 'dir' is NULL", fn), NULL;
    char images[4096], labels[4096];
    const char *prefix = train ? "train" : "t10k";
    if (find_idx(images, sizeof images, dir, prefix, "images-idx3-ubyte") != SP_OK ||
        find_idx(labels, sizeof labels, dir, prefix, "labels-idx1-ubyte") != SP_OK)
        return NULL;
    sp_dataset *d = opener(images, labels);
    if (d && pad_to && sp_dataset_pad(d, pad_to) != SP_OK) {   /* a row set pads each sample as it is got */
        sp_dataset_free(d);
        return NULL;
    }
    return d;
}

sp_dataset *sp_fashion_mnist(const char *dir, bool train, int pad_to)
{
    return fashion_mnist_open("sp_fashion_mnist", dir, train, pad_to, sp_idx_open);
}

sp_dataset *sp_fashion_mnist_rows(const char *dir, bool train, int pad_to)
{
    return fashion_mnist_open("sp_fashion_mnist_rows", dir, train, pad_to, sp_idx_open_rows);
}
