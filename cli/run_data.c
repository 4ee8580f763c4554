/* run_data.c — the runner's data (cli/run.h): the datasets of the image
 * apps (a format of data/formats.c's table; opened for their rows with --parallel) and the check that a synthetic dataset fits in the memory this run may use,
 * before it is generated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include "core/error.h"
#include "core/io/fileio.h"
#include "cli/run.h"
#include "cli/run_internal.h"

/* The format o names (fashion-mnist by default: data/formats.c's table); refuses one
 * that needs --data DIR when none is given. NULL for an unknown name. */
const sp_data_format *run_data_format(const sp_run_opts *o)
{
    const char *fmt = o->data_format ? o->data_format : "fashion-mnist";
    const sp_data_format *f = sp_data_format_find(fmt);
    if (!o->data && !(f && f->default_dir)) {
        const char *with = "no format";   /* the one with a default directory, for the message */
        for (int i = 0; i < sp_data_format_count(); i++)
            if (sp_data_format_at(i)->default_dir) with = sp_data_format_at(i)->name;
        sp_fail("--data-format %s needs --data DIR (only %s has a default directory)", fmt, with);
    }
    return f;
}

/* The datasets of the image apps: a row of data/formats.c's table. */
void sp_run_open_images(const sp_run_opts *o, int pad_to, sp_dataset **train, sp_dataset **test)
{
    if (!o) sp_fail("sp_run_open_images: argument 'o' is NULL");
    if (!train) sp_fail("sp_run_open_images: argument 'train' is NULL");
    if (!test) sp_fail("sp_run_open_images: argument 'test' is NULL");
    const sp_data_format *f = run_data_format(o);
    char hint[128];
    if (!f)
        sp_fail("--data-format %s: unknown (expected one of %s)%s", o->data_format, sp_data_format_names(),
                sp_flag_suggest(o->data_format, sp_data_format_names(), hint, sizeof hint));
    const char *dir = o->data ? o->data : f->default_dir;
    /* --parallel: opened for their rows (headers checked now); sp_run reads a rank's own */
    bool rows = o->parallel != NULL;
    *train = sp_check_ptr(f->open(dir, true, pad_to, rows));
    *test = sp_check_ptr(f->open(dir, false, pad_to, rows));
    if (f->pair) sp_check(f->pair(*test, *train));   /* e.g. test labels by train's class names */
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
