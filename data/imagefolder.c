/* imagefolder.c — root/<class>/<image> like torchvision's ImageFolder + Resize, decoded
 * with stb_image (Debian libstb: link with -lstb) and resized as Pillow does. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stb/stb_image.h>
#include "core/error.h"
#include "core/io/fileio.h"
#include "data/data.h"

typedef struct names { char **v; int n, cap; } names;

static void names_add(names *s, const char *name)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 16;
        s->v = sp_xrealloc(s->v, (size_t)s->cap * sizeof *s->v);
    }
    s->v[s->n++] = sp_xstrdup(name);
}

static void names_free(names *s)
{
    for (int i = 0; i < s->n; i++) free(s->v[i]);
    free(s->v);
    *s = (names){0};
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_image(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot && (!strcasecmp(dot, ".png") || !strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg"));
}

/* Entries of dir (hidden ones skipped) that are directories (want_dirs) or image files,
 * sorted by name so the class numbering and sample order never depend on the file system.
 * An entry named like an image that is not a regular file (a FIFO, a device) is an
 * error, not something to open and block on. */
static int list_dir(const char *dir, bool want_dirs, names *out)
{
    *out = (names){0};
    DIR *dp = opendir(dir);
    if (!dp) return sp_error("cannot open directory %s: %s", dir, strerror(errno));
    struct dirent *e;
    char path[4096];
    while ((e = readdir(dp))) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0) {   /* a dangling link or an unreadable entry is named, not skipped */
            int err = errno;
            struct stat ls;
            bool dangling = lstat(path, &ls) == 0 && S_ISLNK(ls.st_mode);
            closedir(dp);
            names_free(out);
            return dangling ? sp_error("%s: a symbolic link to nothing (%s)", path, strerror(err))
                            : sp_error("%s: cannot stat: %s", path, strerror(err));
        }
        if (want_dirs ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode) && is_image(e->d_name))
            names_add(out, e->d_name);
        else if (!want_dirs && is_image(e->d_name) && !S_ISDIR(st.st_mode)) {
            closedir(dp);
            names_free(out);
            return sp_error("%s: not a regular file (%s)", path, sp_file_kind(st.st_mode));
        }
    }
    closedir(dp);
    if (out->n > 1) qsort(out->v, (size_t)out->n, sizeof *out->v, by_name);
    return SP_OK;
}

/* The in-memory samples plus the class names (label c is classes.v[c]). */
typedef struct folder_dataset {
    sp_dataset base;
    sp_dataset *mem;
    names classes;
    int *remap;   /* own class c → label remap[c] (sp_image_folder_match_classes), or NULL */
} folder_dataset;

static void folder_get(sp_dataset *d, int i, float *x, int *y)
{
    folder_dataset *f = (folder_dataset *)d;
    f->mem->get(f->mem, i, x, y);
    if (f->remap) *y = f->remap[*y];
}

static int folder_label(sp_dataset *d, int i)
{
    folder_dataset *f = (folder_dataset *)d;
    int y = f->mem->label(f->mem, i);
    return f->remap ? f->remap[y] : y;
}

static void folder_free(sp_dataset *d)
{
    folder_dataset *f = (folder_dataset *)d;
    sp_dataset_free(f->mem);
    names_free(&f->classes);
    free(f->remap);
    free(f);
}

int sp_image_folder_match_classes(sp_dataset *test, const sp_dataset *train)
{
    if (!test || !train) return sp_error("sp_image_folder_match_classes: %s is NULL", test ? "train" : "test");
    if (test->get != folder_get || train->get != folder_get)
        return sp_error("%s, %s: class names exist only for image folders", test->name, train->name);
    folder_dataset *te = (folder_dataset *)test;
    const folder_dataset *tr = (const folder_dataset *)train;
    int *remap = sp_xmalloc(sizeof(int) * (size_t)te->classes.n);
    for (int c = 0; c < te->classes.n; c++) {
        remap[c] = -1;
        for (int k = 0; k < tr->classes.n && remap[c] < 0; k++)
            if (strcmp(te->classes.v[c], tr->classes.v[k]) == 0) remap[c] = k;
        if (remap[c] < 0) {
            free(remap);
            return sp_error("%s/%s: test class '%s' is not among the %d training classes of %s", test->name,
                            te->classes.v[c], te->classes.v[c], tr->classes.n, train->name);
        }
    }
    free(te->remap);
    te->remap = remap;
    te->base.nclasses = train->nclasses;
    return SP_OK;
}

const char *sp_image_folder_class(const sp_dataset *d, int c)
{
    if (!d) return sp_error("sp_image_folder_class: argument 'd' is NULL"), NULL;
    const folder_dataset *f = (const folder_dataset *)d;
    if (d->get != folder_get || c < 0 || c >= f->classes.n) return NULL;
    return f->classes.v[c];
}

/* ---- PIL-compatible bilinear resampling ----
 * torchvision's Resize on PIL images is Image.resize(BILINEAR): a separable tent filter
 * widened by the scale when shrinking (antialiasing), weights normalised and rounded to
 * 22-bit fixed point, a horizontal pass rounded to bytes, then a vertical pass
 * (Pillow's Resample.c). Doing exactly that keeps the inputs byte-identical to a
 * PyTorch pipeline on the same PNGs. */
#define PIL_PRECISION 22

typedef struct taps {
    int *first, *count;   /* per output: first input index and number of taps */
    int32_t *k;           /* per output: ksize fixed-point weights            */
    int ksize;
} taps;

static taps pil_taps(int in, int out)
{
    double scale = (double)in / out, fscale = scale < 1.0 ? 1.0 : scale, support = fscale, inv = 1.0 / fscale;
    taps t = {.ksize = (int)ceil(support) * 2 + 1};
    t.first = sp_xmalloc((size_t)out * sizeof(int));
    t.count = sp_xmalloc((size_t)out * sizeof(int));
    t.k = sp_xmalloc((size_t)out * (size_t)t.ksize * sizeof(int32_t));
    double *w = sp_xmalloc((size_t)t.ksize * sizeof(double));
    for (int o = 0; o < out; o++) {
        double center = (o + 0.5) * scale, sum = 0.0;
        int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);
        if (lo < 0) lo = 0;
        if (hi > in) hi = in;
        for (int x = 0; x < hi - lo; x++) {
            double d = fabs((x + lo - center + 0.5) * inv);
            w[x] = d < 1.0 ? 1.0 - d : 0.0;
            sum += w[x];
        }
        for (int x = 0; x < hi - lo; x++) {
            double v = (sum != 0.0 ? w[x] / sum : w[x]) * (1 << PIL_PRECISION);
            t.k[(size_t)o * t.ksize + x] = (int32_t)(v < 0 ? v - 0.5 : v + 0.5);
        }
        t.first[o] = lo;
        t.count[o] = hi - lo;
    }
    free(w);
    return t;
}

static void taps_free(taps *t)
{
    free(t->first);
    free(t->count);
    free(t->k);
}

static uint8_t pil_clip8(int32_t v)
{
    if (v >= (1 << PIL_PRECISION << 8)) return 255;
    return v <= 0 ? 0 : (uint8_t)(v >> PIL_PRECISION);
}

/* Resample `n` lines along one axis: element (line, i, c) of src is at
 * line * line_stride + i * step + c, and likewise in dst with out samples per line. */
static void pil_pass(const uint8_t *src, uint8_t *dst, int nlines, int in, int out, int C, size_t src_line,
                     size_t dst_line, size_t src_step, size_t dst_step)
{
    taps t = pil_taps(in, out);
    for (int l = 0; l < nlines; l++)
        for (int o = 0; o < out; o++)
            for (int c = 0; c < C; c++) {
                const int32_t *k = t.k + (size_t)o * t.ksize;
                int32_t acc = 1 << (PIL_PRECISION - 1);
                for (int x = 0; x < t.count[o]; x++)
                    acc += src[l * src_line + (size_t)(t.first[o] + x) * src_step + c] * k[x];
                dst[l * dst_line + o * dst_step + c] = pil_clip8(acc);
            }
    taps_free(&t);
}

/* H×W×C bytes → size×size×C bytes; horizontal first, as Pillow. */
static uint8_t *pil_resize(const uint8_t *img, int w, int h, int C, int size)
{
    uint8_t *cur = sp_xmalloc((size_t)w * h * C);
    memcpy(cur, img, (size_t)w * h * C);
    if (w != size) {
        uint8_t *next = sp_xmalloc((size_t)size * h * C);
        pil_pass(cur, next, h, w, size, C, (size_t)w * C, (size_t)size * C, (size_t)C, (size_t)C);
        free(cur);
        cur = next;
    }
    if (h != size) {
        uint8_t *next = sp_xmalloc((size_t)size * size * C);
        pil_pass(cur, next, size, h, size, C, (size_t)C, (size_t)C, (size_t)size * C, (size_t)size * C);
        free(cur);
        cur = next;
    }
    return cur;
}

/* The whole file in memory (regular files only, size under the allocation ceiling). */
static unsigned char *read_file(const char *path, int *len)
{
    struct stat st;
    int fd = sp_open_regular(path, &st);
    if (fd < 0) return NULL;
    if (st.st_size > INT_MAX) {
        close(fd);
        return sp_error("%s: %lld bytes is too large for an image file", path, (long long)st.st_size), NULL;
    }
    unsigned char *buf = sp_file_alloc((size_t)st.st_size, 0, path);
    if (buf && sp_pread_full(fd, buf, (size_t)st.st_size, 0, path, "the image") != SP_OK) {
        free(buf);
        buf = NULL;
    }
    close(fd);
    *len = (int)st.st_size;
    return buf;
}

/* stb_image 2.27 (Debian 12's libstb) builds a JPEG Huffman table without checking
 * that the 16 code counts of a DHT segment add up to at most 256, and a hostile file
 * writes past the table (found by fuzzing, docs/RELIABILITY.md). So a JPEG's segments
 * are walked first, as a decoder meets them (entropy-coded data is skipped to the next
 * marker), and such a table is refused. Returns the byte offset of the bad table, or
 * -1. Not a JPEG: -1 (stb_image's other decoders check their own tables). */
static long jpeg_bad_huffman(const unsigned char *b, long n)
{
    long bad = -1, i = 0;
    while (i < n && b[i] == 0xFF) i++;   /* SOI, after any fill bytes (stb_image allows them) */
    if (i == 0 || i >= n || b[i] != 0xD8) return -1;
    for (i++; i + 1 < n && bad < 0;) {
        if (b[i] != 0xFF || b[i + 1] == 0xFF) {   /* entropy-coded data, fill bytes */
            i++;
            continue;
        }
        unsigned m = b[i + 1];
        if (m == 0x00 || (m >= 0xD0 && m <= 0xD7) || m == 0x01) {   /* stuffing, RSTn, TEM */
            i += 2;
            continue;
        }
        if (m == 0xD9 || i + 3 >= n) break;   /* EOI */
        long len = (long)b[i + 2] << 8 | b[i + 3], end = i + 2 + len;
        if (m == 0xC4)   /* tables (class/id, 16 counts, symbols) while the segment has bytes left,
                          * read as stb_image does, even past the segment's end */
            for (long t = i + 4; t < end && t < n;) {
                long codes = 0;
                for (int k = 1; k <= 16 && t + k < n; k++) codes += b[t + k];   /* past the end: 0 */
                if (codes > 256) bad = t;
                t += 17 + codes;
            }
        i += 2 + len;   /* after SOS's header, entropy-coded data runs to the next marker */
    }
    return bad;
}

/* stb_image 2.27's PNM reader (found by fuzzing): it reads the header's numbers into an
 * int without an overflow check (undefined behaviour past 9 digits), and for a maxval
 * above 255 it allocates 8-bit pixels but converts them as 16-bit ones, reading past
 * the buffer. Returns what is wrong with a P5/P6 header (at byte *at), or NULL. */
static const char *pnm_problem(const unsigned char *b, long n, long *at)
{
    if (n < 2 || b[0] != 'P' || (b[1] != '5' && b[1] != '6')) return NULL;
    long i = 2, value = 0, dims[2] = {0, 0};
    for (int field = 0; field < 3 && i < n; field++) {   /* width, height, maxval */
        for (;;) {   /* white space and comments, as stb_image skips them */
            while (i < n && (b[i] == ' ' || (b[i] >= '\t' && b[i] <= '\r'))) i++;
            if (i >= n || b[i] != '#') break;
            while (i < n && b[i] != '\n' && b[i] != '\r') i++;
        }
        long start = i;
        for (value = 0; i < n && b[i] >= '0' && b[i] <= '9'; i++)
            if (i - start < 10) value = value * 10 + (b[i] - '0');
        *at = start;
        if (i - start > 9) return "a number with more than 9 digits";
        /* no digits: stb_image reads 0 and goes on */
        if (field == 2 && value > 255) return "16-bit samples (maxval above 255), which are not supported";
        if (field < 2) dims[field] = value;
        if (field == 2) {   /* one white-space byte, then the samples: all of them there? */
            long need = dims[0] * dims[1] * (b[1] == '6' ? 3 : 1), have = n - i - 1;
            *at = i + 1;
            if (need > have) return "the header claims more samples than the file holds";
        }
    }
    return NULL;
}

/* stb_image 2.27's PNG reader grows its IDAT buffer to whatever length a chunk header
 * claims (found by fuzzing: a 68-byte file made it allocate 1.1 GB). A chunk cannot be
 * longer than the file, so the chunks are walked first and one whose length runs past
 * the end is refused. Returns the chunk's byte offset, or -1 (also when not a PNG). */
static long png_bad_chunk(const unsigned char *b, long n)
{
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    if (n < 8 || memcmp(b, sig, 8) != 0) return -1;
    for (long i = 8; i + 8 <= n;) {
        unsigned long len = (unsigned long)b[i] << 24 | (unsigned long)b[i + 1] << 16 |
                            (unsigned long)b[i + 2] << 8 | b[i + 3];
        if (len > (unsigned long)(n - i - 8)) return i;   /* data (then a CRC) past the end */
        if (memcmp(b + i + 4, "IEND", 4) == 0) break;
        i += 12 + (long)len;
    }
    return -1;
}

/* One image as C×size×size bytes: decode as RGB, to luminance with PIL's
 * convert("L") weights (ITU-R 601-2) when one channel is wanted, resize. The decoded
 * size is checked against the ceiling before stb_image allocates it. */
/* What the file's first bytes say it is, for a message when decoding fails: stb_image's
 * own reason is that of the last decoder it tried ("bad png sig" for a broken JPEG). */
static const char *magic_kind(const unsigned char *b, int len)
{
    if (len >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return "JPEG";
    if (len >= 8 && memcmp(b, "\x89PNG\r\n\x1a\n", 8) == 0) return "PNG";
    if (len >= 4 && memcmp(b, "GIF8", 4) == 0) return "GIF";
    if (len >= 2 && b[0] == 'B' && b[1] == 'M') return "BMP";
    if (len >= 2 && b[0] == 'P' && b[1] >= '1' && b[1] <= '6') return "PNM";
    return NULL;
}

static int decode_error(const char *path, const unsigned char *file, int len)
{
    const char *kind = magic_kind(file, len), *why = stbi_failure_reason();
    if (!kind) return sp_error("%s: cannot decode image: not a PNG or JPEG file (unrecognised first bytes)", path);
    if (strcmp(kind, "JPEG") != 0 && strcmp(kind, "PNG") != 0)
        return sp_error("%s: cannot decode image: a %s file (expected PNG or JPEG)", path, kind);
    return sp_error("%s: cannot decode image: corrupt or truncated %s (%s)", path, kind, why && *why ? why : "no reason given");
}

static int load_image(const char *path, int size, int channels, uint8_t *chw)
{
    int len, w, h, comp;
    unsigned char *file = read_file(path, &len);
    if (!file) return SP_ERR;
    long bad = jpeg_bad_huffman(file, len);   /* before stb_image parses anything */
    if (bad >= 0) {
        free(file);
        return sp_error("%s: corrupt JPEG: a Huffman table at byte %ld has more than 256 codes", path, bad);
    }
    if ((bad = png_bad_chunk(file, len)) >= 0) {
        free(file);
        return sp_error("%s: corrupt PNG: the chunk at byte %ld claims more bytes than the file holds", path, bad);
    }
    const char *pnm = pnm_problem(file, len, &bad);
    if (pnm) {
        free(file);
        return sp_error("%s: PNM header: %s (at byte %ld)", path, pnm, bad);
    }
    if (!stbi_info_from_memory(file, len, &w, &h, &comp)) {
        decode_error(path, file, len);
        free(file);
        return SP_ERR;
    }
    size_t decoded = (size_t)w * (size_t)h * 3;   /* stb_image keeps w, h below 2^24 */
    if (decoded > sp_file_alloc_limit()) {
        free(file);
        return sp_error("%s: a %dx%d image needs %zu bytes decoded, above the %zu-byte limit on one allocation "
                        "from a file (SCANPROP_MAX_FILE_ALLOC)", path, w, h, decoded, sp_file_alloc_limit());
    }
    uint8_t *img = stbi_load_from_memory(file, len, &w, &h, &comp, 3);
    if (!img) decode_error(path, file, len);
    free(file);
    if (!img) return SP_ERR;
    if (channels == 1)
        for (size_t p = 0; p < (size_t)w * h; p++)
            img[p] = (uint8_t)((img[3 * p] * 19595 + img[3 * p + 1] * 38470 + img[3 * p + 2] * 7471 + 0x8000) >> 16);
    uint8_t *hwc = pil_resize(img, w, h, channels, size);
    stbi_image_free(img);
    for (int c = 0; c < channels; c++)
        for (int p = 0; p < size * size; p++) chw[(size_t)c * size * size + p] = hwc[(size_t)p * channels + c];
    free(hwc);
    return SP_OK;
}

sp_dataset *sp_image_folder(const char *root, int size, int channels)
{
    if (!root) return sp_error("sp_image_folder: the root folder is NULL"), NULL;
    if (channels != 1 && channels != 3)
        return sp_error("%s: %d channels requested (expected 1 or 3)", root, channels), NULL;
    if (size < 1 || size > 4096) return sp_error("%s: image size %d (expected 1..4096)", root, size), NULL;
    names classes;
    if (list_dir(root, true, &classes) != SP_OK) return NULL;
    if (classes.n == 0) {
        names_free(&classes);
        return sp_error("%s: no class directories (expected root/<class>/<image>.png|jpg)", root), NULL;
    }
    names *files = sp_xcalloc((size_t)classes.n, sizeof *files);
    sp_dataset *d = NULL;
    long total = 0;
    char path[8192];
    for (int c = 0; c < classes.n; c++) {
        snprintf(path, sizeof path, "%s/%s", root, classes.v[c]);
        if (list_dir(path, false, &files[c]) != SP_OK) goto fail;
        if (files[c].n == 0) {
            sp_error("%s: class directory has no .png/.jpg/.jpeg images", path);
            goto fail;
        }
        total += files[c].n;
    }
    if (total > 1L << 30) {
        sp_error("%s: too many images (%ld)", root, total);
        goto fail;
    }
    uint8_t *x;
    int *y;
    d = sp_dataset_new_u8(root, (int)total, 3, (int[]){channels, size, size}, classes.n, 255.0f, &x, &y);
    if (!d) goto fail;
    size_t numel = (size_t)channels * size * size;
    int i = 0;
    for (int c = 0; c < classes.n; c++)
        for (int k = 0; k < files[c].n; k++, i++) {
            snprintf(path, sizeof path, "%s/%s/%s", root, classes.v[c], files[c].v[k]);
            if (load_image(path, size, channels, x + (size_t)i * numel) != SP_OK) goto fail;
            y[i] = c;
        }
    for (int c = 0; c < classes.n; c++) names_free(&files[c]);
    free(files);
    folder_dataset *f = sp_xcalloc(1, sizeof *f);
    f->base = *d;
    f->base.get = folder_get;
    f->base.label = folder_label;
    f->base.free = folder_free;
    f->mem = d;
    f->classes = classes;
    return &f->base;
fail:
    sp_dataset_free(d);
    for (int c = 0; c < classes.n; c++) names_free(&files[c]);
    free(files);
    names_free(&classes);
    return NULL;
}
