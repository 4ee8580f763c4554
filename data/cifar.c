/* cifar.c — CIFAR-10 binary version: records of 1 label byte + 3072 pixel bytes, the
 * 32×32 red plane, then green, then blue (already C×H×W). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/error.h"
#include "data/data.h"

#define CIFAR_PIXELS 3072
#define CIFAR_RECORD (1 + CIFAR_PIXELS)
#define CIFAR_CLASSES 10

/* Size of a readable CIFAR batch file, checked to be whole records. */
static size_t cifar_file_records(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) sp_fail("%s: cannot open: %s", path, strerror(errno));
    if (st.st_size == 0 || st.st_size % CIFAR_RECORD)
        sp_fail("%s: size %lld is not a positive multiple of %d (1 label byte + 3072 pixels per "
                "record; truncated?)", path, (long long)st.st_size, CIFAR_RECORD);
    return (size_t)st.st_size / CIFAR_RECORD;
}

static void cifar_read(const char *path, size_t records, uint8_t *x, int *y)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) sp_fail("%s: cannot open: %s", path, strerror(errno));
    unsigned char rec[CIFAR_RECORD];
    for (size_t r = 0; r < records; r++) {
        if (fread(rec, 1, CIFAR_RECORD, fp) != CIFAR_RECORD)
            sp_fail("%s: truncated at record %zu (the file changed while reading?)", path, r);
        if (rec[0] >= CIFAR_CLASSES)
            sp_fail("%s: record %zu has label %d (expected 0..9)", path, r, rec[0]);
        y[r] = rec[0];
        memcpy(x + r * CIFAR_PIXELS, rec + 1, CIFAR_PIXELS);
    }
    fclose(fp);
}

sp_dataset *sp_cifar10(const char *dir, bool train)
{
    char base[4096], paths[5][4200];
    snprintf(base, sizeof base, "%s/cifar-10-batches-bin", dir);
    struct stat st;
    if (stat(base, &st) != 0 || !S_ISDIR(st.st_mode)) snprintf(base, sizeof base, "%s", dir);
    int nfiles = train ? 5 : 1;
    size_t total = 0, records[5];
    for (int f = 0; f < nfiles; f++) {
        if (train) snprintf(paths[f], sizeof paths[f], "%s/data_batch_%d.bin", base, f + 1);
        else snprintf(paths[f], sizeof paths[f], "%s/test_batch.bin", base);
        records[f] = cifar_file_records(paths[f]);
        total += records[f];
    }
    if (total > 1u << 30) sp_fail("%s: implausibly many CIFAR records (%zu)", dir, total);
    uint8_t *x;
    int *y;
    sp_dataset *d = sp_dataset_new_u8(base, (int)total, 3, (int[]){3, 32, 32}, CIFAR_CLASSES, 255.0f, &x, &y);
    size_t at = 0;
    for (int f = 0; f < nfiles; f++) {
        cifar_read(paths[f], records[f], x + at * CIFAR_PIXELS, y + at);
        at += records[f];
    }
    return d;
}
