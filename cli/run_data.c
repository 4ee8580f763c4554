/* run_data.c — the runner's data (cli/run.h): the datasets of the image
 * apps (fashion-mnist / mnist IDX, cifar10, an image folder; opened for their rows with
 * --parallel) and the check that a synthetic dataset fits in the memory this run may use,
 * before it is generated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include "core/error.h"
#include "core/io/fileio.h"
#include "cli/run.h"

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"

/* The datasets of the image apps: fashion-mnist / mnist (IDX), cifar10, folder. */
void sp_run_open_images(const sp_run_opts *o, int pad_to, sp_dataset **train, sp_dataset **test)
{
    if (!o) sp_fail("sp_run_open_images: argument 'o' is NULL");
    if (!train) sp_fail("sp_run_open_images: argument 'train' is NULL");
    if (!test) sp_fail("sp_run_open_images: argument 'test' is NULL");
    const char *fmt = o->data_format ? o->data_format : "fashion-mnist";
    if (!o->data && strcmp(fmt, "fashion-mnist") != 0)
        sp_fail("--data-format %s needs --data DIR (only fashion-mnist has a default directory)", fmt);
    /* --parallel: opened for their rows (headers checked now); sp_run reads a rank's own */
    bool rows = o->parallel != NULL;
    if (strcmp(fmt, "fashion-mnist") == 0 || strcmp(fmt, "mnist") == 0 || strcmp(fmt, "idx") == 0) {
        const char *dir = o->data ? o->data : FMNIST_DIR;
        *train = sp_check_ptr(rows ? sp_fashion_mnist_rows(dir, true, pad_to) : sp_fashion_mnist(dir, true, pad_to));
        *test = sp_check_ptr(rows ? sp_fashion_mnist_rows(dir, false, pad_to) : sp_fashion_mnist(dir, false, pad_to));
    } else if (strcmp(fmt, "cifar10") == 0) {
        if (!o->data) sp_fail("--data-format cifar10 needs --data DIR (the cifar-10-batches-bin directory)");
        *train = sp_check_ptr(rows ? sp_cifar10_rows(o->data, true) : sp_cifar10(o->data, true));
        *test = sp_check_ptr(rows ? sp_cifar10_rows(o->data, false) : sp_cifar10(o->data, false));
    } else if (strcmp(fmt, "folder") == 0) {
        if (!o->data) sp_fail("--data-format folder needs --data DIR (DIR/train/<class>/*, DIR/test/<class>/*)");
        char tr[4096], te[4096];
        snprintf(tr, sizeof tr, "%s/train", o->data);
        snprintf(te, sizeof te, "%s/test", o->data);
        *train = sp_check_ptr(sp_image_folder(tr, pad_to ? pad_to : 28, 1));
        *test = sp_check_ptr(sp_image_folder(te, pad_to ? pad_to : 28, 1));
        sp_check(sp_image_folder_match_classes(*test, *train));   /* test labels by train's class names */
    } else {
        sp_fail("--data-format %s: unknown (expected fashion-mnist | mnist | cifar10 | folder)", fmt);
    }
}

/* The first number in file `path` after `key` (NULL: at the start), times `unit`; 0 when
 * the file or the key is missing or the value is not a number ("max"). */
static double number_in(const char *path, const char *key, double unit)
{
    FILE *f = sp_open_read(path, NULL);
    if (!f) return sp_clear_error(), 0;
    char line[256];
    double v = 0;
    while (v == 0 && fgets(line, sizeof line, f)) {
        const char *at = key ? strstr(line, key) : line;
        if (at) v = strtod(at + (key ? strlen(key) : 0), NULL) * unit;
    }
    fclose(f);
    return v;
}

/* The bytes a run may give its datasets, and which bound set it: half the memory
 * available now (MemAvailable; the physical memory if unknown), the address-space and
 * data-segment limits (ulimit -v, -d), the cgroup's memory limit, SCANPROP_MAX_FILE_ALLOC. */
static double usable_memory(const char **why)
{
    double limit = (double)sp_file_alloc_limit(), v;
    *why = "SCANPROP_MAX_FILE_ALLOC";
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double avail = number_in("/proc/meminfo", "MemAvailable:", 1024);
    if (avail <= 0 && pages > 0 && page > 0) avail = (double)pages * page;
    if (avail > 0 && avail / 2 < limit) limit = avail / 2, *why = "half the available memory";
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (double)rl.rlim_cur < limit)
        limit = (double)rl.rlim_cur, *why = "the address-space limit (ulimit -v)";
    if (getrlimit(RLIMIT_DATA, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (double)rl.rlim_cur < limit)
        limit = (double)rl.rlim_cur, *why = "the data-segment limit (ulimit -d)";
    if ((v = number_in("/sys/fs/cgroup/memory.max", NULL, 1)) > 0 && v < limit)
        limit = v, *why = "the cgroup's memory.max";
    if ((v = number_in("/sys/fs/cgroup/memory/memory.limit_in_bytes", NULL, 1)) > 0 && v < limit)
        limit = v, *why = "the cgroup's memory limit";
    return limit;
}

void sp_run_check_synthetic(const sp_run_opts *o, const char *flag, int samples, int test_samples,
                            size_t sample_bytes)
{
    if (!o) sp_fail("sp_run_check_synthetic: argument 'o' is NULL");
    if (!flag) sp_fail("sp_run_check_synthetic: argument 'flag' is NULL");
    if (!o->eval_only && o->batch > samples)
        sp_fail("--batch %d exceeds the %d training samples (%s %d)", o->batch, samples, flag, samples);
    double need = ((double)samples + test_samples) * ((double)sample_bytes + sizeof(int));
    const char *why;
    double limit = usable_memory(&why);
    if (need > limit)
        sp_fail("%s %d: the training and test sets need %.3g GB, above the %.3g GB this run may use (%s)", flag,
                samples, need / 1e9, limit / 1e9, why);
}
