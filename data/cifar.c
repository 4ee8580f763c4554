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

sp_dataset *sp_cifar10(const char *dir, bool train)
{
    if (!dir) return sp_error("sp_cifar10: argument 'dir' is NULL"), NULL;
    char base[4096], paths[5][4200];
    snprintf(base, sizeof base, "%s/cifar-10-batches-bin", dir);
    struct stat st;
    if (stat(base, &st) != 0 || !S_ISDIR(st.st_mode)) snprintf(base, sizeof base, "%s", dir);
    int nfiles = train ? 5 : 1, fds[5];
    size_t total = 0, records[5];
    sp_dataset *d = NULL;
    int opened = 0;
    for (; opened < nfiles; opened++) {
        int f = opened;
        if (train) snprintf(paths[f], sizeof paths[f], "%s/data_batch_%d.bin", base, f + 1);
        else snprintf(paths[f], sizeof paths[f], "%s/test_batch.bin", base);
        fds[f] = cifar_open(paths[f], &records[f]);
        if (fds[f] < 0) goto done;
        total += records[f];
    }
    if (total > 1u << 30) {
        sp_error("%s: implausibly many CIFAR records (%zu)", dir, total);
        goto done;
    }
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
done:
    for (int f = 0; f < opened; f++) close(fds[f]);
    return d;
}
