/* formats.c — the dataset formats an app opens by name (--data-format; data/data.h): one
 * row each, read by the runner's flag (its choices) and by sp_run_open_images. A new
 * format is a row here and, if it needs one, its opener. */
#include <stdio.h>
#include <string.h>
#include "data/data.h"

static sp_dataset *open_idx(const char *dir, bool train, int pad_to, bool rows)
{
    return rows ? sp_fashion_mnist_rows(dir, train, pad_to) : sp_fashion_mnist(dir, train, pad_to);
}

static sp_dataset *open_cifar10(const char *dir, bool train, int pad_to, bool rows)
{
    (void)pad_to;
    return rows ? sp_cifar10_rows(dir, train) : sp_cifar10(dir, train);
}

/* dir/train and dir/test, grey, resized to pad_to (default 28); read whole (no rows) */
static sp_dataset *open_folder(const char *dir, bool train, int pad_to, bool rows)
{
    (void)rows;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, train ? "train" : "test");
    return sp_image_folder(path, pad_to ? pad_to : 28, 1);
}

static const sp_data_format FORMATS[] = {
    {"fashion-mnist", open_idx, NULL, "/usr/share/datasets/fashion-mnist", "IDX files (Debian's dataset-fashion-mnist)"},
    {"mnist", open_idx, NULL, NULL, "IDX files, MNIST's names, in --data DIR"},
    {"idx", open_idx, NULL, NULL, "as mnist"},
    {"cifar10", open_cifar10, NULL, NULL, "CIFAR-10 binary: --data DIR is the cifar-10-batches-bin directory"},
    {"folder", open_folder, sp_image_folder_match_classes, NULL,
     "images in --data DIR/train/<class>/* and DIR/test/<class>/*"},
};
#define NFORMATS (int)(sizeof FORMATS / sizeof FORMATS[0])

int sp_data_format_count(void) { return NFORMATS; }

const sp_data_format *sp_data_format_at(int i) { return i >= 0 && i < NFORMATS ? &FORMATS[i] : NULL; }

const sp_data_format *sp_data_format_find(const char *name)
{
    for (int i = 0; name && i < NFORMATS; i++)
        if (strcmp(name, FORMATS[i].name) == 0) return &FORMATS[i];
    return NULL;
}

const char *sp_data_format_names(void)
{
    static char buf[256];
    buf[0] = 0;
    for (int i = 0; i < NFORMATS; i++) {
        if (i) strcat(buf, "|");
        strcat(buf, FORMATS[i].name);
    }
    return buf;
}
