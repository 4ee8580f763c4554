/* idx.c — IDX files (MNIST, Fashion-MNIST), raw or gzip (zlib reads both).
 *
 * Header: magic 0x0000TTDD (TT = 0x08 unsigned byte, DD = number of dimensions), then
 * DD big-endian uint32 sizes, then the bytes. Images 2051 = 0x803, labels 2049 = 0x801. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include "core/error.h"
#include "data/data.h"

#define IDX_IMAGES 2051u
#define IDX_LABELS 2049u
#define IDX_CLASSES 10

static gzFile idx_open(const char *path)
{
    gzFile g = gzopen(path, "rb");
    if (!g) sp_fail("%s: cannot open: %s", path, errno ? strerror(errno) : "out of memory");
    gzbuffer(g, 1 << 17);
    return g;
}

/* Exactly n bytes, or "truncated" naming what was being read. */
static void idx_read(gzFile g, const char *path, void *buf, size_t n, const char *what)
{
    size_t got = 0;
    while (got < n) {
        size_t want = n - got > (1u << 30) ? (1u << 30) : n - got;
        int r = gzread(g, (char *)buf + got, (unsigned)want);
        int err = Z_OK;
        const char *msg = r <= 0 ? gzerror(g, &err) : "";
        size_t plen = strlen(path);   /* zlib prefixes its message with the path */
        if (strncmp(msg, path, plen) == 0 && msg[plen] == ':') msg += plen + (msg[plen + 1] == ' ' ? 2 : 1);
        if (r < 0 || (r == 0 && err != Z_OK))
            sp_fail("%s: corrupt or truncated while reading %s (%s)", path, what, msg);
        if (r == 0)
            sp_fail("%s: truncated: %s needs %zu bytes, the file ends after %zu", path, what, n, got);
        got += (size_t)r;
    }
}

static uint32_t be32(const unsigned char *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* Magic and the `ndim` sizes. */
static void idx_header(gzFile g, const char *path, uint32_t magic, uint32_t *dims, int ndim)
{
    unsigned char b[16];
    idx_read(g, path, b, 4, "the magic number");
    uint32_t got = be32(b);
    if (got != magic)
        sp_fail("%s: bad magic number %u (0x%08x), expected %u for IDX %s%s", path, got, got, magic,
                magic == IDX_IMAGES ? "images" : "labels",
                got == IDX_IMAGES ? " (this is an images file)" : got == IDX_LABELS ? " (this is a labels file)" : "");
    idx_read(g, path, b, 4 * (size_t)ndim, "the dimension sizes");
    for (int i = 0; i < ndim; i++) dims[i] = be32(b + 4 * i);
}

static void idx_expect_end(gzFile g, const char *path, size_t bytes)
{
    char extra;
    if (gzread(g, &extra, 1) > 0)
        sp_fail("%s: extra bytes after the %zu the header announces", path, bytes);
}

sp_dataset *sp_idx_open(const char *images_path, const char *labels_path)
{
    uint32_t dims[3], nlabels;
    gzFile gi = idx_open(images_path), gl = idx_open(labels_path);
    idx_header(gi, images_path, IDX_IMAGES, dims, 3);
    idx_header(gl, labels_path, IDX_LABELS, &nlabels, 1);
    if (dims[0] == 0 || dims[0] > 1u << 30 || dims[1] == 0 || dims[2] == 0 || dims[1] > 4096 || dims[2] > 4096)
        sp_fail("%s: implausible sizes %u x %u x %u (expected count in 1..2^30, rows and cols in 1..4096)",
                images_path, dims[0], dims[1], dims[2]);
    if (nlabels != dims[0])
        sp_fail("%s: %u labels but %s has %u images (expected the same count)", labels_path, nlabels,
                images_path, dims[0]);
    int n = (int)dims[0], shape[3] = {1, (int)dims[1], (int)dims[2]};
    uint8_t *x;
    int *y;
    sp_dataset *d = sp_dataset_new_u8(images_path, n, 3, shape, IDX_CLASSES, 255.0f, &x, &y);
    size_t bytes = (size_t)n * dims[1] * dims[2];
    idx_read(gi, images_path, x, bytes, "the pixels");
    idx_expect_end(gi, images_path, bytes);
    uint8_t *raw = sp_xmalloc((size_t)n);
    idx_read(gl, labels_path, raw, (size_t)n, "the labels");
    idx_expect_end(gl, labels_path, (size_t)n);
    for (int i = 0; i < n; i++) y[i] = raw[i];
    free(raw);
    gzclose(gi);
    gzclose(gl);
    sp_dataset_check_labels(d, y, labels_path);
    return d;
}

/* dir/<prefix>-<kind>[.gz], also the "train-images.idx3-ubyte" spelling and the
 * torchvision layout dir/FashionMNIST/raw. */
static void find_idx(char *out, size_t len, const char *dir, const char *prefix, const char *kind)
{
    static const char *const subdirs[] = {"", "/FashionMNIST/raw", "/MNIST/raw"};
    static const char *const seps[] = {"-", "."}, *const exts[] = {".gz", ""};
    for (int s = 0; s < 3; s++)
        for (int p = 0; p < 2; p++)
            for (int e = 0; e < 2; e++) {
                const char *dot = strchr(kind, '-');
                snprintf(out, len, "%s%s/%s-%.*s%s%s%s", dir, subdirs[s], prefix, (int)(dot - kind), kind,
                         seps[p], dot + 1, exts[e]);
                if (access(out, R_OK) == 0) return;
            }
    sp_fail("%s: no %s-%s or %s-%s.gz (expected the Fashion-MNIST/MNIST IDX files, e.g. "
            "/usr/share/datasets/fashion-mnist)", dir, prefix, kind, prefix, kind);
}

sp_dataset *sp_fashion_mnist(const char *dir, bool train, int pad_to)
{
    char images[4096], labels[4096];
    const char *prefix = train ? "train" : "t10k";
    find_idx(images, sizeof images, dir, prefix, "images-idx3-ubyte");
    find_idx(labels, sizeof labels, dir, prefix, "labels-idx1-ubyte");
    sp_dataset *d = sp_idx_open(images, labels);
    if (pad_to) sp_dataset_pad(d, pad_to);
    return d;
}
