/* cifar.c — CIFAR-10 binary version: records of 1 label byte + 3072 pixel bytes, the
 * 32×32 red plane, then green, then blue (already C×H×W). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/error.h"
#include "core/io/fileio.h"
#include "data/data.h"
#include "data/rowset.h"

#define CIFAR_PIXELS 3072
#define CIFAR_RECORD (1 + CIFAR_PIXELS)
#define CIFAR_CLASSES 10

/* A CIFAR batch file opened (regular file only), its size checked to be whole records. */
static int cifar_open(const char *path, size_t *records)
{
    struct stat st;
    int fd = sp_open_regular(path, &st);
    if (fd < 0) return -1;
    if (st.st_size == 0 || st.st_size % CIFAR_RECORD) {
        close(fd);
        return sp_error("%s: size %lld is not a positive multiple of %d (1 label byte + 3072 pixels per "
                        "record; truncated?)", path, (long long)st.st_size, CIFAR_RECORD);
    }
    *records = (size_t)st.st_size / CIFAR_RECORD;
    return fd;
}

static int cifar_read(int fd, const char *path, size_t records, uint8_t *x, int *y)
{
    unsigned char *buf = sp_xmalloc(256 * CIFAR_RECORD);
    for (size_t r0 = 0; r0 < records; r0 += 256) {
        size_t m = records - r0 < 256 ? records - r0 : 256;
        if (sp_pread_full(fd, buf, m * CIFAR_RECORD, (off_t)(r0 * CIFAR_RECORD), path, "the records") != SP_OK)
            return free(buf), SP_ERR;
        for (size_t k = 0; k < m; k++) {
            const unsigned char *rec = buf + k * CIFAR_RECORD;
            if (rec[0] >= CIFAR_CLASSES) {
                int label = rec[0];
                free(buf);
                return sp_error("%s: record %zu has label %d (expected 0..9)", path, r0 + k, label);
            }
            y[r0 + k] = rec[0];
            memcpy(x + (r0 + k) * CIFAR_PIXELS, rec + 1, CIFAR_PIXELS);
        }
    }
    free(buf);
    return SP_OK;
}

/* The batch files of dir (train: data_batch_1..5.bin, else test_batch.bin), opened and
 * their sizes checked; *opened of them open (close those on failure too). */
typedef struct cifar_files {
    char base[4096], paths[5][4200];
    int nfiles, opened, fds[5];
    size_t records[5], total;
} cifar_files;

static int cifar_files_open(cifar_files *cf, const char *dir, bool train)
{
    char base[sizeof cf->base];
    snprintf(base, sizeof base, "%s/cifar-10-batches-bin", dir);
    struct stat st;
    if (stat(base, &st) != 0 || !S_ISDIR(st.st_mode)) snprintf(base, sizeof base, "%s", dir);
    memcpy(cf->base, base, sizeof base);
    cf->nfiles = train ? 5 : 1;
    cf->total = 0;
    for (cf->opened = 0; cf->opened < cf->nfiles; cf->opened++) {
        int f = cf->opened;
        if (train) snprintf(cf->paths[f], sizeof cf->paths[f], "%s/data_batch_%d.bin", base, f + 1);
        else snprintf(cf->paths[f], sizeof cf->paths[f], "%s/test_batch.bin", base);
        cf->fds[f] = cifar_open(cf->paths[f], &cf->records[f]);
        if (cf->fds[f] < 0) return SP_ERR;
        cf->total += cf->records[f];
    }
    if (cf->total > 1u << 30) return sp_error("%s: implausibly many CIFAR records (%zu)", dir, cf->total);
    return SP_OK;
}

static void cifar_files_close(cifar_files *cf)
{
    for (int f = 0; f < cf->opened; f++) close(cf->fds[f]);
    cf->opened = 0;
}

sp_dataset *sp_cifar10(const char *dir, bool train)
{
    if (!dir) return sp_error("sp_cifar10: argument 'dir' is NULL"), NULL;
    cifar_files cf;
    sp_dataset *d = NULL;
    if (cifar_files_open(&cf, dir, train) != SP_OK) goto done;
    char *base = cf.base, (*paths)[4200] = cf.paths;
    int nfiles = cf.nfiles, *fds = cf.fds;
    size_t total = cf.total, *records = cf.records;
    uint8_t *x;
    int *y;
    d = sp_dataset_new_u8(base, (int)total, 3, (int[]){3, 32, 32}, CIFAR_CLASSES, 255.0f, &x, &y);
    if (!d) goto done;
    size_t at = 0;
    for (int f = 0; f < nfiles; f++) {
        if (cifar_read(fds[f], paths[f], records[f], x + at * CIFAR_PIXELS, y + at) != SP_OK) {
            sp_dataset_free(d);
            d = NULL;
            goto done;
        }
        at += records[f];
    }
    d->file_bytes_read = d->file_bytes_kept = (long long)(total * CIFAR_RECORD);
done:
    cifar_files_close(&cf);
    return d;
}

/* ---- opened for a subset of records (sp_cifar10_rows) ------------------------------ */

typedef struct cifar_rows {
    sp_rowset rs;
    cifar_files cf;
    unsigned char *buf;       /* 256 records                                     */
} cifar_rows;

static void crows_close(sp_rowset *r)
{
    cifar_rows *cr = (cifar_rows *)r;
    cifar_files_close(&cr->cf);
    free(cr->buf);
    cr->buf = NULL;
}

/* Record i's label byte checked (the message of the whole-file read: the file and the
 * record's index in it). */
static int crows_label(cifar_rows *cr, int f, size_t local, int i, unsigned char label)
{
    if (label >= CIFAR_CLASSES) return sp_error("%s: record %zu has label %d (expected 0..9)", cr->cf.paths[f], local, label);
    cr->rs.label[i] = label;
    return SP_OK;
}

/* Records flagged in add: a run of whole records (SP_LOADER_X) read 256 at a time, a
 * label alone (SP_LOADER_Y) as its one byte. The sizes were checked at open: last has
 * nothing left to check. */
static int crows_fill(sp_rowset *r, const unsigned char *add, bool last)
{
    (void)last;
    cifar_rows *cr = (cifar_rows *)r;
    int n = r->base.n;
    size_t first = 0;
    for (int f = 0; f < cr->cf.nfiles; first += cr->cf.records[f], f++) {
        int lo = (int)first, hi = (int)(first + cr->cf.records[f]);
        for (int i = lo; i < hi && i < n;) {
            if (!add[i]) {
                i++;
                continue;
            }
            if (add[i] & SP_LOADER_Y) {
                unsigned char label;
                if (sp_pread_full(cr->cf.fds[f], &label, 1, (off_t)((size_t)(i - lo) * CIFAR_RECORD), cr->cf.paths[f],
                                  "a label") != SP_OK ||
                    crows_label(cr, f, (size_t)(i - lo), i, label) != SP_OK)
                    return SP_ERR;
                r->base.file_bytes_read += 1;
                r->base.file_bytes_kept += 1;
                i++;
                continue;
            }
            int j = i + 1;
            while (j < hi && j - i < 256 && (add[j] & SP_LOADER_X)) j++;
            size_t m = (size_t)(j - i);
            if (sp_pread_full(cr->cf.fds[f], cr->buf, m * CIFAR_RECORD, (off_t)((size_t)(i - lo) * CIFAR_RECORD),
                              cr->cf.paths[f], "the records") != SP_OK)
                return SP_ERR;
            for (size_t k = 0; k < m; k++) {
                const unsigned char *rec = cr->buf + k * CIFAR_RECORD;
                if (crows_label(cr, f, (size_t)(i - lo) + k, i + (int)k, rec[0]) != SP_OK) return SP_ERR;
                memcpy(sp_rowset_pixels(r, i + (int)k), rec + 1, CIFAR_PIXELS);
            }
            r->base.file_bytes_read += (long long)(m * CIFAR_RECORD);
            r->base.file_bytes_kept += (long long)(m * CIFAR_RECORD);
            i = j;
        }
    }
    return SP_OK;
}

sp_dataset *sp_cifar10_rows(const char *dir, bool train)
{
    if (!dir) return sp_error("sp_cifar10_rows: argument 'dir' is NULL"), NULL;
    cifar_rows *cr = sp_xcalloc(1, sizeof *cr);
    cr->rs.fill = crows_fill;
    cr->rs.close = crows_close;
    if (cifar_files_open(&cr->cf, dir, train) != SP_OK ||
        sp_rowset_init(&cr->rs, cr->cf.base, (int)cr->cf.total, 3, 32, 32, CIFAR_CLASSES) != SP_OK) {
        crows_close(&cr->rs);
        if (cr->rs.base.free) sp_dataset_free(&cr->rs.base);
        else free(cr);
        return NULL;
    }
    cr->buf = sp_xmalloc(256 * CIFAR_RECORD);
    return &cr->rs.base;
}
