/* imagefolder.c — root/<class>/<image> like torchvision's ImageFolder, decoded with
 * stb_image and resized with stb_image_resize (Debian libstb: link with -lstb). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <stb/stb_image.h>
#include <stb/stb_image_resize.h>
#include "core/error.h"
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
 * sorted by name so the class numbering and sample order never depend on the file system. */
static names list_dir(const char *dir, bool want_dirs)
{
    names out = {0};
    DIR *dp = opendir(dir);
    if (!dp) sp_fail("%s: cannot open directory: %s", dir, strerror(errno));
    struct dirent *e;
    char path[4096];
    while ((e = readdir(dp))) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0) continue;
        if (want_dirs ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode) && is_image(e->d_name))
            names_add(&out, e->d_name);
    }
    closedir(dp);
    qsort(out.v, (size_t)out.n, sizeof *out.v, by_name);
    return out;
}

/* The in-memory samples plus the class names (label c is classes.v[c]). */
typedef struct folder_dataset {
    sp_dataset base;
    sp_dataset *mem;
    names classes;
} folder_dataset;

static void folder_get(sp_dataset *d, int i, float *x, int *y)
{
    sp_dataset *mem = ((folder_dataset *)d)->mem;
    mem->get(mem, i, x, y);
}

static void folder_free(sp_dataset *d)
{
    folder_dataset *f = (folder_dataset *)d;
    sp_dataset_free(f->mem);
    names_free(&f->classes);
    free(f);
}

const char *sp_image_folder_class(const sp_dataset *d, int c)
{
    const folder_dataset *f = (const folder_dataset *)d;
    if (d->get != folder_get || c < 0 || c >= f->classes.n) return NULL;
    return f->classes.v[c];
}

/* One image as C×size×size bytes. */
static void load_image(const char *path, int size, int channels, uint8_t *chw, uint8_t *hwc)
{
    int w, h, comp;
    uint8_t *img = stbi_load(path, &w, &h, &comp, channels);
    if (!img) sp_fail("%s: cannot decode image: %s", path, stbi_failure_reason());
    if (w == size && h == size) memcpy(hwc, img, (size_t)size * size * channels);
    else if (!stbir_resize_uint8_generic(img, w, h, 0, hwc, size, size, 0, channels, STBIR_ALPHA_CHANNEL_NONE, 0,
                                         STBIR_EDGE_CLAMP, STBIR_FILTER_TRIANGLE, STBIR_COLORSPACE_LINEAR, NULL))
        sp_fail("%s: cannot resize %dx%d to %dx%d", path, w, h, size, size);
    stbi_image_free(img);
    for (int c = 0; c < channels; c++)
        for (int p = 0; p < size * size; p++) chw[(size_t)c * size * size + p] = hwc[(size_t)p * channels + c];
}

sp_dataset *sp_image_folder(const char *root, int size, int channels)
{
    if (channels != 1 && channels != 3) sp_fail("%s: %d channels requested (expected 1 or 3)", root, channels);
    if (size < 1 || size > 4096) sp_fail("%s: image size %d (expected 1..4096)", root, size);
    names classes = list_dir(root, true);
    if (classes.n == 0) sp_fail("%s: no class directories (expected root/<class>/<image>.png|jpg)", root);
    names *files = sp_xcalloc((size_t)classes.n, sizeof *files);
    long total = 0;
    char path[8192];
    for (int c = 0; c < classes.n; c++) {
        snprintf(path, sizeof path, "%s/%s", root, classes.v[c]);
        files[c] = list_dir(path, false);
        if (files[c].n == 0) sp_fail("%s: class directory has no .png/.jpg/.jpeg images", path);
        total += files[c].n;
    }
    if (total > 1L << 30) sp_fail("%s: too many images (%ld)", root, total);
    uint8_t *x;
    int *y;
    sp_dataset *d = sp_dataset_new_u8(root, (int)total, 3, (int[]){channels, size, size}, classes.n, 255.0f, &x, &y);
    size_t numel = (size_t)channels * size * size;
    uint8_t *hwc = sp_xmalloc(numel);
    int i = 0;
    for (int c = 0; c < classes.n; c++) {
        for (int k = 0; k < files[c].n; k++, i++) {
            snprintf(path, sizeof path, "%s/%s/%s", root, classes.v[c], files[c].v[k]);
            load_image(path, size, channels, x + (size_t)i * numel, hwc);
            y[i] = c;
        }
        names_free(&files[c]);
    }
    free(hwc);
    free(files);
    folder_dataset *f = sp_xcalloc(1, sizeof *f);
    f->base = *d;
    f->base.get = folder_get;
    f->base.free = folder_free;
    f->mem = d;
    f->classes = classes;
    return &f->base;
}
