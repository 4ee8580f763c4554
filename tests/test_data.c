/* test_data.c — dataset readers on generated files (IDX raw and gzip, CIFAR, PNG folders,
 * safetensors sequences), the real Fashion-MNIST when installed, the BPPSA bitstream,
 * and the loader: coverage, seeded order, and prefetch == synchronous, bit for bit. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>
#include <stb/stb_image_write.h>
#include "core/rng.h"
#include "core/io/safetensors.h"
#include "data/data.h"
#include "tests/datatest.h"
#include "tests/testutil.h"

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"

/* IDX pixel of image i at (r, c): a pattern that differs per image and position. */
static uint8_t pixel(int i, int r, int c) { return (uint8_t)(37 * i + 11 * r + 3 * c + 1); }

/* n images of rows×cols (magic/labels overridable) written to dir/<images>, dir/<labels>. */
typedef struct idx_spec {
    int n, rows, cols, nlabels;
    uint32_t img_magic, lbl_magic;
    int bad_label;        /* >= 0: label of image 0 */
    int cut_images;       /* bytes removed from the end of the images file */
    bool gz;
} idx_spec;

static void write_idx(const char *images, const char *labels, idx_spec s)
{
    size_t ni = 16 + (size_t)s.n * s.rows * s.cols;
    unsigned char *b = calloc(ni + 8, 1);   /* cut_images < 0 appends zero bytes */
    put_be32(b, s.img_magic ? s.img_magic : 2051);
    put_be32(b + 4, (uint32_t)s.n);
    put_be32(b + 8, (uint32_t)s.rows);
    put_be32(b + 12, (uint32_t)s.cols);
    for (int i = 0; i < s.n; i++)
        for (int r = 0; r < s.rows; r++)
            for (int c = 0; c < s.cols; c++) b[16 + ((size_t)i * s.rows + r) * s.cols + c] = pixel(i, r, c);
    write_file(images, b, ni - (size_t)s.cut_images, s.gz);
    free(b);
    int nl = s.nlabels ? s.nlabels : s.n;
    unsigned char *l = malloc(8 + (size_t)nl);
    put_be32(l, s.lbl_magic ? s.lbl_magic : 2049);
    put_be32(l + 4, (uint32_t)nl);
    for (int i = 0; i < nl; i++) l[8 + i] = (unsigned char)((i * 7) % 10);
    if (s.bad_label >= 0) l[8] = (unsigned char)s.bad_label;
    write_file(labels, l, 8 + (size_t)nl, s.gz);
    free(l);
}

static sp_dataset *open_idx(idx_spec s)
{
    const char *im = tmp_path(s.gz ? "im.gz" : "im"), *lb = tmp_path(s.gz ? "lb.gz" : "lb");
    write_idx(im, lb, s);
    return sp_idx_open(im, lb);
}

static const idx_spec good = {.n = 5, .rows = 3, .cols = 4, .bad_label = -1};

/* ---------------------------------------------------------------- IDX */

static void check_idx_content(sp_dataset *d, int n, int rows, int cols)
{
    cr_assert_eq(d->n, n);
    cr_assert(d->ndim == 3 && d->shape[0] == 1 && d->shape[1] == rows && d->shape[2] == cols);
    cr_assert_eq(d->nclasses, 10);
    float x[64];
    int y;
    for (int i = 0; i < n; i++) {
        sp_dataset_get(d, i, x, &y);
        cr_assert_eq(y, (i * 7) % 10);
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++)
                cr_assert_eq(x[r * cols + c], (float)pixel(i, r, c) / 255.0f, "image %d (%d,%d)", i, r, c);
    }
}

Test(idx, raw_and_gzip_read_the_same)
{
    sp_dataset *raw = open_idx(good);
    idx_spec g = good;
    g.gz = true;
    sp_dataset *gz = open_idx(g);
    check_idx_content(raw, 5, 3, 4);
    check_idx_content(gz, 5, 3, 4);
    sp_dataset_free(raw);
    sp_dataset_free(gz);
}

Test(idx, wrong_magic)
{
    idx_spec s = good;
    s.img_magic = 2049;   /* a labels header where images belong */
    REFUSED(open_idx(s), "bad magic number 2049 (0x00000801), expected 2051 for IDX images (this is a labels file)");
}

Test(idx, truncated_raw)
{
    idx_spec s = good;
    s.cut_images = 3;
    REFUSED(open_idx(s), "truncated: the header announces the pixels of 60 bytes, the file has 57 after the header");
}

Test(idx, truncated_gzip_stream)
{
    idx_spec s = good;
    s.n = 200;
    s.gz = true;
    const char *im = tmp_path("cut.gz"), *lb = tmp_path("cutl.gz");
    write_idx(im, lb, s);
    struct stat st;
    cr_assert_eq(stat(im, &st), 0);
    cr_assert_eq(truncate(im, st.st_size / 2), 0);
    REFUSED(sp_idx_open(im, lb), "truncated");
}

Test(idx, image_label_count_mismatch)
{
    idx_spec s = good;
    s.nlabels = 4;
    REFUSED(open_idx(s), "4 labels but");
}

Test(idx, label_out_of_range)
{
    idx_spec s = good;
    s.bad_label = 10;
    REFUSED(open_idx(s), "label 10 of sample 0 is out of range (expected 0..9)");
}

Test(idx, extra_bytes_after_data)
{
    idx_spec s = good;
    s.cut_images = -2;   /* two bytes more than the header announces */
    REFUSED(open_idx(s), "2 extra bytes from byte 76, after the 60 the header announces");
    s.gz = true;
    REFUSED(open_idx(s), "extra data after the 60 bytes the header announces (decompressed)");
}

Test(idx, fashion_mnist_layout_and_padding)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/fm", tu_tmpdir());
    mkdir(dir, 0755);
    idx_spec s = {.n = 3, .rows = 28, .cols = 28, .bad_label = -1, .gz = true};
    char im[600], lb[600];
    snprintf(im, sizeof im, "%s/t10k-images-idx3-ubyte.gz", dir);
    snprintf(lb, sizeof lb, "%s/t10k-labels-idx1-ubyte.gz", dir);
    write_idx(im, lb, s);
    sp_dataset *d = sp_fashion_mnist(dir, false, 32);
    cr_assert_not_null(d, "%s", sp_last_error());
    cr_assert(d->shape[0] == 1 && d->shape[1] == 32 && d->shape[2] == 32);
    float x[32 * 32];
    int y;
    sp_dataset_get(d, 2, x, &y);
    cr_assert_eq(y, 4);
    for (int r = 0; r < 32; r++)
        for (int c = 0; c < 32; c++) {
            bool inside = r >= 2 && r < 30 && c >= 2 && c < 30;
            float want = inside ? (float)pixel(2, r - 2, c - 2) / 255.0f : 0.0f;
            cr_assert_eq(x[r * 32 + c], want, "padded (%d,%d)", r, c);
        }
    sp_dataset_free(d);
}

Test(idx, fashion_mnist_missing_files)
{
    REFUSED(sp_fashion_mnist(tu_tmpdir(), true, 0), "no train-images-idx3-ubyte or train-images-idx3-ubyte.gz");
}

Test(idx, real_fashion_mnist)
{
    if (access(FMNIST_DIR, R_OK) != 0) {
        cr_log_warn("SKIPPED: %s not installed (Debian package dataset-fashion-mnist)", FMNIST_DIR);
        return;
    }
    for (int train = 1; train >= 0; train--) {
        sp_dataset *d = sp_fashion_mnist(FMNIST_DIR, train, train ? 0 : 32);
        int want = train ? 60000 : 10000, hist[10] = {0};
        cr_assert_eq(d->n, want);
        cr_assert_eq(d->shape[1], train ? 28 : 32);
        float x[32 * 32], lo = 1, hi = 0;
        for (int i = 0; i < d->n; i++) {
            int y;
            sp_dataset_get(d, i, x, &y);
            hist[y]++;
            if (i % 997 == 0)
                for (int j = 0; j < 28 * 28; j++) lo = fminf(lo, x[j]), hi = fmaxf(hi, x[j]);
        }
        for (int c = 0; c < 10; c++) cr_assert_eq(hist[c], want / 10, "class %d: %d samples", c, hist[c]);
        cr_assert(lo == 0.0f && hi == 1.0f, "pixels in [0,1]: %g..%g", lo, hi);
        sp_dataset_free(d);
    }
}

/* ---------------------------------------------------------------- CIFAR-10 */

static void write_cifar(const char *path, int records, int bad_label, int cut)
{
    size_t n = (size_t)records * 3073;
    unsigned char *b = malloc(n);
    for (int r = 0; r < records; r++) {
        b[(size_t)r * 3073] = (unsigned char)(r == 0 && bad_label >= 0 ? bad_label : (r * 3 + 1) % 10);
        for (int j = 0; j < 3072; j++) b[(size_t)r * 3073 + 1 + j] = (unsigned char)(r * 31 + j);
    }
    write_file(path, b, n - (size_t)cut, false);
    free(b);
}

Test(cifar, two_record_test_batch)
{
    write_cifar(tmp_path("test_batch.bin"), 2, -1, 0);
    sp_dataset *d = sp_cifar10(tu_tmpdir(), false);
    cr_assert_eq(d->n, 2);
    cr_assert(d->ndim == 3 && d->shape[0] == 3 && d->shape[1] == 32 && d->shape[2] == 32);
    static float x[3072];
    int y;
    for (int r = 0; r < 2; r++) {
        sp_dataset_get(d, r, x, &y);
        cr_assert_eq(y, (r * 3 + 1) % 10);
        for (int j = 0; j < 3072; j++) cr_assert_eq(x[j], (float)(uint8_t)(r * 31 + j) / 255.0f);
    }
    sp_dataset_free(d);
}

Test(cifar, train_concatenates_five_batches)
{
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/cifar-10-batches-bin", tu_tmpdir());
    mkdir(dir, 0755);
    for (int f = 1; f <= 5; f++) {
        snprintf(path, sizeof path, "%s/data_batch_%d.bin", dir, f);
        write_cifar(path, f, -1, 0);
    }
    sp_dataset *d = sp_cifar10(tu_tmpdir(), true);
    cr_assert_eq(d->n, 1 + 2 + 3 + 4 + 5);
    static float x[3072];
    int y;
    sp_dataset_get(d, 1 + 2, x, &y);   /* first record of data_batch_3 */
    cr_assert_eq(y, 1);
    cr_assert_eq(x[5], 5.0f / 255.0f);
    sp_dataset_free(d);
}

Test(cifar, size_not_multiple_of_record)
{
    write_cifar(tmp_path("test_batch.bin"), 2, -1, 100);
    REFUSED(sp_cifar10(tu_tmpdir(), false), "is not a positive multiple of 3073");
}

Test(cifar, label_out_of_range)
{
    write_cifar(tmp_path("test_batch.bin"), 2, 10, 0);
    REFUSED(sp_cifar10(tu_tmpdir(), false), "record 0 has label 10 (expected 0..9)");
}

/* ---------------------------------------------------------------- image folders */

static void write_image(const char *dir, const char *cls, const char *name, int w, int h, const uint8_t rgb[3],
                        bool ramp)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, cls);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", dir, cls, name);
    uint8_t *img = malloc((size_t)w * h * 3);
    for (int p = 0; p < w * h; p++)
        for (int c = 0; c < 3; c++) img[p * 3 + c] = ramp ? (uint8_t)(p * 10 + c) : rgb[c];
    bool jpg = strstr(name, ".jpg") != NULL;
    int ok = jpg ? stbi_write_jpg(path, w, h, 3, img, 100) : stbi_write_png(path, w, h, 3, img, w * 3);
    cr_assert(ok, "cannot write %s", path);
    free(img);
}

Test(image_folder, classes_sorted_resized_chw)
{
    char root[512];
    snprintf(root, sizeof root, "%s/imgs", tu_tmpdir());
    mkdir(root, 0755);
    const uint8_t red[3] = {255, 0, 0}, teal[3] = {0, 128, 200}, grey[3] = {90, 90, 90};
    write_image(root, "zebra", "b.png", 10, 6, red, false);
    write_image(root, "zebra", "a.png", 4, 4, NULL, true);     /* already 4×4: bytes exact */
    write_image(root, "ant", "only.PNG", 3, 7, teal, false);
    write_image(root, "cat", "c.jpg", 16, 16, grey, false);
    write_file(tmp_path("imgs/zebra/notes.txt"), "x", 1, false);   /* ignored */
    sp_dataset *d = sp_image_folder(root, 4, 3);
    cr_assert_eq(d->n, 4);
    cr_assert_eq(d->nclasses, 3);
    cr_assert_str_eq(sp_image_folder_class(d, 0), "ant");
    cr_assert_str_eq(sp_image_folder_class(d, 1), "cat");
    cr_assert_str_eq(sp_image_folder_class(d, 2), "zebra");
    cr_assert_null(sp_image_folder_class(d, 3));
    cr_assert(d->shape[0] == 3 && d->shape[1] == 4 && d->shape[2] == 4);
    float x[48];
    int y;
    sp_dataset_get(d, 0, x, &y);   /* ant/only.PNG, constant colour survives resizing */
    cr_assert_eq(y, 0);
    for (int c = 0; c < 3; c++)
        for (int p = 0; p < 16; p++) cr_assert_eq(x[c * 16 + p], (float)teal[c] / 255.0f);
    sp_dataset_get(d, 1, x, &y);   /* cat/c.jpg: lossy, within 2 levels */
    cr_assert_eq(y, 1);
    for (int j = 0; j < 48; j++) cr_assert_float_eq(x[j], 90.0f / 255.0f, 2.5f / 255.0f, "jpeg pixel %d", j);
    sp_dataset_get(d, 2, x, &y);   /* zebra/a.png: CHW of the HWC ramp */
    cr_assert_eq(y, 2);
    for (int c = 0; c < 3; c++)
        for (int p = 0; p < 16; p++) cr_assert_eq(x[c * 16 + p], (float)(uint8_t)(p * 10 + c) / 255.0f);
    sp_dataset_get(d, 3, x, &y);   /* zebra/b.png */
    cr_assert_eq(y, 2);
    for (int p = 0; p < 16; p++) cr_assert(x[p] == 1.0f && x[16 + p] == 0.0f && x[32 + p] == 0.0f);
    sp_dataset_free(d);

    sp_dataset *g = sp_image_folder(root, 2, 1);   /* grayscale: PIL's L = 0.299 R + ... */
    cr_assert_eq(g->shape[0], 1);
    sp_dataset_get(g, 3, x, &y);
    cr_assert_eq(x[0], 76.0f / 255.0f, "red → luma %g", x[0] * 255);
    sp_dataset_free(g);
}

/* Test classes are matched to training classes by name: train {a, b}, test {b} labels
 * test/b as 1 (its own numbering would say 0); a test class train lacks is refused. */
Test(image_folder, test_classes_matched_by_name)
{
    char tr[512], te[512], te2[512];
    snprintf(tr, sizeof tr, "%s/m/train", tu_tmpdir());
    snprintf(te, sizeof te, "%s/m/test", tu_tmpdir());
    snprintf(te2, sizeof te2, "%s/m/test2", tu_tmpdir());
    mkdir(tmp_path("m"), 0755);
    mkdir(tr, 0755);
    mkdir(te, 0755);
    mkdir(te2, 0755);
    const uint8_t grey[3] = {90, 90, 90};
    write_image(tr, "a", "x.png", 2, 2, grey, false);
    write_image(tr, "b", "x.png", 2, 2, grey, false);
    write_image(te, "b", "x.png", 2, 2, grey, false);
    write_image(te2, "b", "x.png", 2, 2, grey, false);
    write_image(te2, "z", "x.png", 2, 2, grey, false);
    sp_dataset *train = sp_image_folder(tr, 2, 1), *test = sp_image_folder(te, 2, 1), *test2 = sp_image_folder(te2, 2, 1);
    cr_assert(train && test && test2);
    cr_assert_eq(sp_image_folder_match_classes(test, train), SP_OK, "%s", sp_last_error());
    float x[4];
    int y;
    sp_dataset_get(test, 0, x, &y);
    cr_assert_eq(y, 1, "test/b must be train's class 1 (b), got %d", y);
    cr_assert_eq(test->nclasses, 2);
    cr_assert_eq(sp_image_folder_match_classes(test2, train), SP_ERR);
    cr_assert(strstr(sp_last_error(), "test class 'z' is not among the 2 training classes"), "%s", sp_last_error());
    sp_dataset_free(train);
    sp_dataset_free(test);
    sp_dataset_free(test2);
}

/* An image that is a symbolic link to nothing is named, not skipped. */
Test(image_folder, dangling_symlink_is_an_error)
{
    char root[512];
    snprintf(root, sizeof root, "%s/dl", tu_tmpdir());
    mkdir(root, 0755);
    const uint8_t grey[3] = {90, 90, 90};
    write_image(root, "k", "x.png", 2, 2, grey, false);
    cr_assert_eq(symlink("/nonexistent/y.png", tmp_path("dl/k/y.png")), 0);
    cr_assert_null(sp_image_folder(root, 2, 1));
    cr_assert(strstr(sp_last_error(), "dl/k/y.png: a symbolic link to nothing"), "%s", sp_last_error());
}

/* A failed decode names what the file is: stb_image's own reason is its last decoder's
 * ("bad png sig" for a truncated JPEG; empty for some GIFs). */
Test(image_folder, decode_failures_name_the_format)
{
    char root[512];
    snprintf(root, sizeof root, "%s/dec", tu_tmpdir());
    mkdir(root, 0755);
    const uint8_t grey[3] = {90, 90, 90};
    write_image(root, "k", "ok.jpg", 8, 8, grey, false);
    FILE *f = fopen(tmp_path("dec/k/ok.jpg"), "rb");
    static unsigned char jpg[1 << 16];
    size_t n = fread(jpg, 1, sizeof jpg, f);
    fclose(f);
    cr_assert_gt(n, 40);
    write_file(tmp_path("dec/k/ok.jpg"), jpg, 20, false);   /* truncated */
    cr_assert_null(sp_image_folder(root, 2, 1));
    cr_assert(strstr(sp_last_error(), "ok.jpg: cannot decode image: corrupt or truncated JPEG ("), "%s", sp_last_error());
    write_file(tmp_path("dec/k/ok.jpg"), "GIF89a\x01", 7, false);   /* a broken GIF named .jpg */
    cr_assert_null(sp_image_folder(root, 2, 1));
    cr_assert(strstr(sp_last_error(), "ok.jpg: cannot decode image: a GIF file (expected PNG or JPEG)"), "%s",
              sp_last_error());
}

Test(image_folder, bilinear_downsampling_averages)
{
    /* A 2×2 checker of 0 and 200 resized to 1×1 by the widened tent: the mean, 100. */
    char root[512];
    snprintf(root, sizeof root, "%s/chk", tu_tmpdir());
    mkdir(root, 0755);
    snprintf(root + strlen(root), sizeof root - strlen(root), "/k");
    mkdir(root, 0755);
    uint8_t px[4] = {0, 200, 200, 0};
    cr_assert(stbi_write_png(tmp_path("chk/k/x.png"), 2, 2, 1, px, 2));
    sp_dataset *d = sp_image_folder(tmp_path("chk"), 1, 1);
    float x;
    int y;
    sp_dataset_get(d, 0, &x, &y);
    cr_assert_eq(x, 100.0f / 255.0f);
    sp_dataset_free(d);
}

/* Expected bytes from Pillow 9.4: Image.fromarray(a).resize((4, 4), Image.BILINEAR),
 * and .convert("L") first for one channel, a[y, x, c] = (37x + 61y + 17c + 13xy) % 256. */
static const uint8_t pil_7x5_rgb[48] = {36, 99, 127, 172, 115, 172, 90, 134, 124, 125, 149, 146, 152, 151, 158, 89,
                                        53, 116, 144, 189, 127, 133, 107, 95, 136, 87, 166, 107, 69, 114, 121, 106,
                                        70, 133, 161, 106, 144, 150, 124, 112, 153, 104, 105, 117, 86, 131, 105, 120};
static const uint8_t pil_7x5_l[16] = {50, 113, 141, 174, 126, 147, 104, 109, 134, 100, 154, 120, 95, 128, 130, 102};
static const uint8_t pil_3x2_rgb[48] = {0, 23, 51, 74, 15, 40, 71, 96, 46, 75, 110, 139, 61, 92, 130, 161,
                                        17, 40, 68, 91, 32, 57, 88, 113, 63, 92, 127, 156, 78, 109, 147, 178,
                                        34, 57, 85, 108, 49, 74, 105, 130, 80, 109, 144, 173, 95, 126, 164, 195};
static const uint8_t pil_3x2_l[16] = {14, 37, 65, 88, 29, 54, 85, 110, 60, 89, 124, 153, 75, 106, 144, 175};

static void check_pil(int w, int h, const uint8_t *rgb, const uint8_t *l)
{
    char dir[64], file[64];
    snprintf(dir, sizeof dir, "pil%dx%d", w, h);
    snprintf(file, sizeof file, "pil%dx%d/k", w, h);
    mkdir(tmp_path(dir), 0755);
    mkdir(tmp_path(file), 0755);
    snprintf(file, sizeof file, "pil%dx%d/k/i.png", w, h);
    uint8_t img[7 * 5 * 3];
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++)
                img[(y * w + x) * 3 + c] = (uint8_t)((37 * x + 61 * y + 17 * c + 13 * x * y) % 256);
    cr_assert(stbi_write_png(tmp_path(file), w, h, 3, img, w * 3));
    for (int ch = 1; ch <= 3; ch += 2) {
        sp_dataset *d = sp_image_folder(tmp_path(dir), 4, ch);
        float x[48];
        int y;
        sp_dataset_get(d, 0, x, &y);
        for (int j = 0; j < 16 * ch; j++)
            cr_assert_eq(x[j], (float)(ch == 3 ? rgb : l)[j] / 255.0f, "%dx%d, %d channel(s), element %d: %g vs %d",
                         w, h, ch, j, x[j] * 255.0f, (ch == 3 ? rgb : l)[j]);
        sp_dataset_free(d);
    }
}

Test(image_folder, resize_matches_pillow_bilinear)
{
    check_pil(7, 5, pil_7x5_rgb, pil_7x5_l);   /* shrinking: antialiased tent */
    check_pil(3, 2, pil_3x2_rgb, pil_3x2_l);   /* enlarging */
}

Test(image_folder, undecodable_image)
{
    char root[512], cls[600];
    snprintf(root, sizeof root, "%s/broken", tu_tmpdir());
    snprintf(cls, sizeof cls, "%s/cat", root);
    mkdir(root, 0755);
    mkdir(cls, 0755);
    write_file(tmp_path("broken/cat/x.png"), "not a png", 9, false);
    REFUSED(sp_image_folder(root, 8, 3), "x.png: cannot decode image");
}

Test(image_folder, empty_root) { REFUSED(sp_image_folder(tu_tmpdir(), 8, 3), "no class directories"); }

/* ---------------------------------------------------------------- sequences */

Test(seqset, round_trip_through_safetensors)
{
    float *x;
    int *y;
    sp_dataset *d = sp_dataset_new_f32("mem", 7, 2, (int[]){5, 3}, 4, &x, &y);
    tu_fill_uniform(x, 7 * 15, 11, -2.0f, 2.0f);
    for (int i = 0; i < 7; i++) y[i] = i % 3;   /* class 3 never appears: nclasses via metadata */
    const char *path = tmp_path("seq.safetensors");
    OK(sp_dataset_save(d, path));
    sp_dataset *s = sp_seqset_open(path);
    cr_assert(s->n == 7 && s->ndim == 2 && s->shape[0] == 5 && s->shape[1] == 3);
    cr_assert_eq(s->nclasses, 4);
    float a[15], b[15];
    int ya, yb;
    for (int i = 0; i < 7; i++) {
        sp_dataset_get(d, i, a, &ya);
        sp_dataset_get(s, i, b, &yb);
        cr_assert_eq(memcmp(a, b, sizeof a), 0);
        cr_assert_eq(ya, yb);
    }
    sp_dataset_free(s);
    sp_dataset_free(d);
}

Test(seqset, classes_from_labels_without_metadata)
{
    float x[2 * 3 * 1] = {1, 2, 3, 4, 5, 6};
    int32_t y[2] = {4, 1};
    sp_st_entry e[2] = {{"x", SP_ST_F32, 3, (int[]){2, 3, 1}, x}, {"y", SP_ST_I32, 1, (int[]){2}, y}};
    const char *path = tmp_path("seq2.safetensors");
    OK(sp_st_write(path, 2, e, NULL));
    sp_dataset *s = sp_seqset_open(path);
    cr_assert_eq(s->nclasses, 5);
    float got[3];
    int label;
    sp_dataset_get(s, 1, got, &label);
    cr_assert(label == 1 && got[0] == 4 && got[2] == 6);
    sp_dataset_free(s);
}

/* A class count in the metadata far beyond any classifier (2e9: the model's output layer
 * would need 128e9 floats) is refused naming the file, not as "out of memory". */
Test(seqset, absurd_class_count_refused_naming_the_file)
{
    float x[2 * 3 * 1] = {1, 2, 3, 4, 5, 6};
    int32_t y[2] = {0, 1};
    sp_st_entry e[2] = {{"x", SP_ST_F32, 3, (int[]){2, 3, 1}, x}, {"y", SP_ST_I32, 1, (int[]){2}, y}};
    const char *path = tmp_path("seq_classes.safetensors");
    OK(sp_st_write(path, 2, e, (const char *[]){"nclasses", "2000000000", NULL}));
    cr_assert_null(sp_seqset_open(path), "nclasses 2e9 was accepted");
    cr_assert(strstr(sp_last_error(), path) && strstr(sp_last_error(), "nclasses = 2000000000"), "%s",
              sp_last_error());
    OK(sp_st_write(path, 2, e, (const char *[]){"nclasses", "1000", NULL}));
    sp_dataset *s = sp_seqset_open(path);
    cr_assert_not_null(s, "%s", sp_last_error());
    cr_assert_eq(s->nclasses, 1000);
    sp_dataset_free(s);
}

Test(seqset, x_must_be_3d)
{
    float x[6] = {0};
    int64_t y[2] = {0, 1};
    sp_st_entry e[2] = {{"x", SP_ST_F32, 2, (int[]){2, 3}, x}, {"y", SP_ST_I64, 1, (int[]){2}, y}};
    const char *path = tmp_path("seq3.safetensors");
    OK(sp_st_write(path, 2, e, NULL));
    REFUSED(sp_seqset_open(path), "x has 2 dimensions, expected 3 [N, T, C]");
}

Test(seqset, label_count_must_match)
{
    float x[6] = {0};
    int64_t y[3] = {0, 1, 0};
    sp_st_entry e[2] = {{"x", SP_ST_F32, 3, (int[]){2, 3, 1}, x}, {"y", SP_ST_I64, 1, (int[]){3}, y}};
    const char *path = tmp_path("seq4.safetensors");
    OK(sp_st_write(path, 2, e, NULL));
    REFUSED(sp_seqset_open(path), "y has shape [3], expected [2]");
}

/* ---------------------------------------------------------------- bitstream */

Test(bitstream, class_conditional_means_follow_eq8)
{
    /* 3000 samples × 400 bits: per class ≈ 300 × 400 = 120000 draws, std of the mean
     * ≤ 0.0015; tolerance 0.01. */
    sp_dataset *d = sp_bitstream(3000, 400, 5);
    cr_assert(d->ndim == 2 && d->shape[0] == 400 && d->shape[1] == 1 && d->nclasses == 10);
    static float x[400];
    double ones[10] = {0};
    int count[10] = {0};
    for (int i = 0; i < d->n; i++) {
        int y;
        sp_dataset_get(d, i, x, &y);
        cr_assert(y >= 0 && y < 10);
        count[y]++;
        for (int t = 0; t < 400; t++) {
            cr_assert(x[t] == 0.0f || x[t] == 1.0f);
            ones[y] += x[t];
        }
    }
    for (int c = 0; c < 10; c++) {
        cr_assert(count[c] > 230 && count[c] < 370, "class %d has %d samples (uniform: 300)", c, count[c]);
        double mean = ones[c] / (400.0 * count[c]);
        cr_assert_float_eq(mean, 0.05 + 0.1 * c, 0.01, "class %d: mean %.4f", c, mean);
    }
    sp_dataset_free(d);
}

Test(bitstream, seeded_and_order_independent)
{
    sp_dataset *a = sp_bitstream(50, 64, 9), *b = sp_bitstream(50, 64, 9), *c = sp_bitstream(50, 64, 10);
    float xa[64], xb[64], xc[64];
    int ya, yb, yc, differ = 0;
    for (int i = 49; i >= 0; i--) {   /* b read in the opposite order of a */
        sp_dataset_get(b, i, xb, &yb);
        sp_dataset_get(a, 49 - i, xa, &ya);
        sp_dataset_get(a, i, xa, &ya);
        sp_dataset_get(c, i, xc, &yc);
        cr_assert(ya == yb && memcmp(xa, xb, sizeof xa) == 0, "sample %d differs for the same seed", i);
        differ += ya != yc || memcmp(xa, xc, sizeof xa) != 0;
    }
    cr_assert_gt(differ, 40, "another seed gives other data");
    sp_dataset_free(a);
    sp_dataset_free(b);
    sp_dataset_free(c);
}

/* ---------------------------------------------------------------- loader */

/* x = [i, i + 0.5, ...] so a batch row tells which sample it is. */
static sp_dataset *index_dataset(int n, int k)
{
    float *x;
    int *y;
    sp_dataset *d = sp_dataset_new_f32("index", n, 1, (int[]){k}, 10, &x, &y);
    for (int i = 0; i < n; i++) {
        y[i] = i % 10;
        for (int j = 0; j < k; j++) x[(size_t)i * k + j] = (float)i + 0.5f * j;
    }
    return d;
}

/* Order of one epoch, read back from the batches; checks every batch against direct reads. */
static void epoch_order(sp_loader *l, sp_dataset *d, int *order, int *nseen)
{
    sp_batch b;
    int k = (int)sp_dataset_sample_numel(d), at = 0;
    float want[16];
    while (sp_loader_next(l, &b)) {
        cr_assert_eq(b.x.shape[0], b.n);
        for (int s = 0; s < b.n; s++) {
            int i = (int)b.x.data[(size_t)s * k], y;
            sp_dataset_get(d, i, want, &y);
            cr_assert_eq(memcmp(b.x.data + (size_t)s * k, want, (size_t)k * sizeof(float)), 0);
            cr_assert_eq(b.y[s], y);
            order[at++] = i;
        }
    }
    *nseen = at;
}

Test(loader, every_sample_once_and_seeded_order)
{
    sp_dataset *d = index_dataset(103, 3);
    sp_loader *l = sp_loader_new(d, 10, true, 77, false);
    cr_assert_eq(sp_loader_nbatches(l), 11);
    int o0[103], o1[103], again[103], n;
    epoch_order(l, d, o0, &n);
    cr_assert_eq(n, 103);
    int seen[103] = {0};
    for (int i = 0; i < n; i++) seen[o0[i]]++;
    for (int i = 0; i < 103; i++) cr_assert_eq(seen[i], 1, "sample %d seen %d times", i, seen[i]);
    sp_loader_reset_epoch(l);
    epoch_order(l, d, o1, &n);
    cr_assert_neq(memcmp(o0, o1, sizeof o0), 0, "epochs 0 and 1 have the same order");
    sp_loader_set_epoch(l, 0);
    epoch_order(l, d, again, &n);
    cr_assert_eq(memcmp(o0, again, sizeof o0), 0, "epoch 0 replayed differently");
    sp_loader_free(l);

    sp_loader *same = sp_loader_new(d, 7, true, 77, false);   /* batch size does not change the order */
    epoch_order(same, d, again, &n);
    cr_assert_eq(memcmp(o0, again, sizeof o0), 0);
    sp_loader_free(same);
    sp_loader *other = sp_loader_new(d, 10, true, 78, false);
    epoch_order(other, d, again, &n);
    cr_assert_neq(memcmp(o0, again, sizeof o0), 0, "another seed, same order");
    sp_loader_free(other);
    sp_loader *plain = sp_loader_new(d, 10, false, 77, true);
    cr_assert_eq(sp_loader_nbatches(plain), 10);
    epoch_order(plain, d, again, &n);
    cr_assert_eq(n, 100, "drop_last drops the 3 left over");
    for (int i = 0; i < n; i++) cr_assert_eq(again[i], i);
    sp_loader_free(plain);
    sp_dataset_free(d);
}

/* A dataset whose get sometimes sleeps, to shake the prefetch timing. */
typedef struct slow_dataset {
    sp_dataset base;
    sp_dataset *inner;
} slow_dataset;

static void slow_get(sp_dataset *d, int i, float *x, int *y)
{
    if (i % 7 == 0) usleep(200);
    sp_dataset *in = ((slow_dataset *)d)->inner;
    in->get(in, i, x, y);
}

Test(loader, prefetch_equals_synchronous_bitwise)
{
    sp_dataset *inner = sp_bitstream(90, 33, 4);
    slow_dataset slow = {.base = *inner, .inner = inner};
    slow.base.get = slow_get;
    float mean = 0.3f, std = 0.45f;
    OK(sp_dataset_normalize(&slow.base, 1, &mean, &std));
    sp_loader *p = sp_loader_new(&slow.base, 8, true, 5, false), *s = sp_loader_new_sync(&slow.base, 8, true, 5, false);
    sp_rng r;
    sp_rng_seed(&r, 1);
    int batches = 0;
    for (int e = 0; e < 3; e++) {
        sp_loader_set_epoch(p, e);
        sp_loader_set_epoch(s, e);
        sp_batch bp, bs;
        for (;;) {
            bool more = sp_loader_next(p, &bp);
            cr_assert_eq(more, sp_loader_next(s, &bs));
            if (!more) break;
            cr_assert(bp.n == bs.n && bp.index == bs.index && bp.epoch == e && bs.epoch == e);
            cr_assert_eq(memcmp(bp.x.data, bs.x.data, bp.x.numel * sizeof(float)), 0, "epoch %d batch %d", e, bp.index);
            cr_assert_eq(memcmp(bp.y, bs.y, (size_t)bp.n * sizeof(int)), 0);
            if (sp_rng_below(&r, 3) == 0) usleep(sp_rng_below(&r, 400));   /* a "training step" */
            batches++;
        }
        if (e == 1) {   /* abandon an epoch half way through: the next one must be clean */
            sp_loader_set_epoch(p, 7);
            sp_loader_next(p, &bp);
        }
    }
    cr_assert_eq(batches, 3 * 12);
    /* Normalisation applied once: values are (0 − 0.3)/0.45 or (1 − 0.3)/0.45. */
    sp_batch b;
    sp_loader_set_epoch(s, 9);
    sp_loader_next(s, &b);
    for (size_t j = 0; j < b.x.numel; j++)
        cr_assert(b.x.data[j] == (0.0f - mean) / std || b.x.data[j] == (1.0f - mean) / std, "x = %g", b.x.data[j]);
    sp_loader_free(p);
    sp_loader_free(s);
    sp_dataset_free(inner);
}

Test(loader, partial_last_batch_and_shape)
{
    sp_dataset *d = sp_bitstream(10, 6, 1);
    sp_loader *l = sp_loader_new(d, 4, false, 0, false);
    sp_batch b;
    int sizes[3], k = 0;
    while (sp_loader_next(l, &b)) {
        cr_assert(b.x.ndim == 3 && b.x.shape[1] == 6 && b.x.shape[2] == 1 && b.x.numel == (size_t)b.n * 6);
        sizes[k++] = b.n;
    }
    cr_assert(k == 3 && sizes[0] == 4 && sizes[1] == 4 && sizes[2] == 2);
    cr_assert(!sp_loader_next(l, &b), "stays at the end until a new epoch");
    sp_loader_reset_epoch(l);
    cr_assert_eq(sp_loader_epoch(l), 1);
    cr_assert(sp_loader_next(l, &b) && b.index == 0 && b.epoch == 1);
    sp_loader_free(l);
    sp_dataset_free(d);
}

/* A batch larger than the dataset with drop_last makes no batch: sp_loader_new returns
 * NULL with the reason (it ended the process). */
Test(loader, batch_larger_than_dataset_with_drop_last)
{
    sp_dataset *d = sp_bitstream(3, 4, 1);
    cr_assert_null(sp_loader_new(d, 8, true, 0, true), "refused no batch");
    cr_assert(strstr(sp_last_error(), "no full batch of 8"), "%s", sp_last_error());
    cr_assert_null(sp_loader_new_sync(d, 0, true, 0, false), "accepted batch 0");
    cr_assert(strstr(sp_last_error(), "batch size 0"), "%s", sp_last_error());
    sp_dataset_free(d);
}

/* ------------------------------------------------ issue 19: files and devices */

/* Item 1: a FIFO in place of any dataset file is refused at once ("not a regular
 * file"); the old readers blocked in fopen/gzopen forever (the timeout fails them). */
Test(files, fifo_dataset_files_refused_fast, .timeout = 10)
{
    idx_spec s = good;
    const char *im = tmp_path("fim"), *lb = tmp_path("flb");
    write_idx(im, lb, s);
    unlink(im);
    cr_assert_eq(mkfifo(im, 0600), 0);
    REFUSED(sp_idx_open(im, lb), "not a regular file (a FIFO)");

    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s/fm", tu_tmpdir());
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte.gz", dir);
    write_file(path, "x", 1, false);
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", dir);
    cr_assert_eq(mkfifo(path, 0600), 0);
    REFUSED(sp_fashion_mnist(dir, true, 0), "train-images-idx3-ubyte.gz: not a regular file (a FIFO)");

    cr_assert_eq(mkfifo(tmp_path("test_batch.bin"), 0600), 0);
    REFUSED(sp_cifar10(tu_tmpdir(), false), "test_batch.bin: not a regular file (a FIFO)");

    cr_assert_eq(mkfifo(tmp_path("seq.st"), 0600), 0);
    REFUSED(sp_seqset_open(tmp_path("seq.st")), "not a regular file (a FIFO)");
    REFUSED(sp_seqset_open(tu_tmpdir()), "not a regular file (a directory)");

    char root[600];
    snprintf(root, sizeof root, "%s/ff", tu_tmpdir());
    mkdir(root, 0755);
    write_image(root, "cat", "a.png", 2, 2, (const uint8_t[3]){1, 2, 3}, false);
    cr_assert_eq(mkfifo(tmp_path("ff/cat/b.png"), 0600), 0);
    REFUSED(sp_image_folder(root, 2, 3), "b.png: not a regular file (a FIFO)");
}

/* Item 5: garbage after the end of a .gz stream is refused with its offset; a file
 * of two gzip members (cat a.gz b.gz) is still read whole. */
Test(files, bytes_after_the_gzip_stream_refused)
{
    idx_spec s = good;
    s.gz = true;
    const char *im = tmp_path("g.gz"), *lb = tmp_path("gl.gz");
    write_idx(im, lb, s);
    struct stat st;
    cr_assert_eq(stat(im, &st), 0);
    FILE *fp = fopen(im, "ab");
    cr_assert_eq(fwrite("garbage!", 1, 8, fp), 8);
    fclose(fp);
    char want[700];
    snprintf(want, sizeof want, "%s: 8 trailing bytes from byte %lld, after the end of the gzip stream", im,
             (long long)st.st_size);
    REFUSED(sp_idx_open(im, lb), want);

    /* two members: the header and the first pixels, then the rest */
    unsigned char raw[16 + 60];
    idx_spec r = good;
    const char *rim = tmp_path("r"), *rlb = tmp_path("rl");
    write_idx(rim, rlb, r);
    fp = fopen(rim, "rb");
    cr_assert_eq(fread(raw, 1, sizeof raw, fp), sizeof raw);
    fclose(fp);
    gzFile g = gzopen(im, "wb");
    gzwrite(g, raw, 30);
    gzclose(g);
    g = gzopen(tmp_path("part2.gz"), "wb");
    gzwrite(g, raw + 30, sizeof raw - 30);
    gzclose(g);
    fp = fopen(im, "ab");
    FILE *p2 = fopen(tmp_path("part2.gz"), "rb");
    char buf[512];
    size_t n = fread(buf, 1, sizeof buf, p2);
    cr_assert_eq(fwrite(buf, 1, n, fp), n);
    fclose(p2);
    fclose(fp);
    sp_dataset *d = sp_idx_open(im, lb);
    cr_assert_not_null(d, "%s", sp_last_error());
    check_idx_content(d, 5, 3, 4);
    sp_dataset_free(d);
}

/* Item 6: an unreadable file is reported as such, not as missing. Run as an ordinary
 * user: root reads anything, so a root test run drops to nobody in a child. */
Test(files, permission_denied_is_reported)
{
    char dir[600], path[900];
    snprintf(dir, sizeof dir, "%s/perm", tu_tmpdir());
    cr_assert_eq(mkdir(dir, 0755), 0);
    cr_assert_eq(chmod(tu_tmpdir(), 0711), 0);   /* nobody may pass through, not list */
    idx_spec s = good;
    s.gz = true;
    char im[700], lb[700];
    snprintf(im, sizeof im, "%s/train-images-idx3-ubyte.gz", dir);
    snprintf(lb, sizeof lb, "%s/train-labels-idx1-ubyte.gz", dir);
    write_idx(im, lb, s);
    cr_assert_eq(chmod(im, 0), 0);
    snprintf(path, sizeof path, "cannot open %s: Permission denied", im);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(77);
        if (access(im, R_OK) == 0) _exit(78);   /* still allowed: cannot test here */
        sp_dataset *d = sp_fashion_mnist(dir, true, 0);
        _exit(!d && strcmp(sp_last_error(), path) == 0 ? 0 : 1);
    }
    int status;
    waitpid(pid, &status, 0);
    chmod(tu_tmpdir(), 0700);
    cr_assert(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77 || WEXITSTATUS(status) == 78)
        cr_skip_test("cannot run as a user without read permission here (setuid to nobody failed)");
    cr_assert_eq(WEXITSTATUS(status), 0, "expected \"%s\"", path);
}

/* Item 8: a NaN or inf in a sequence set's inputs is refused at load, naming the sample. */
Test(files, non_finite_inputs_refused_with_the_sample)
{
    float x[3 * 4 * 2] = {0};
    int64_t y[3] = {0, 1, 2};
    x[1 * 8 + 2 * 2 + 1] = NAN;   /* sample 1, t = 2, c = 1 */
    sp_st_entry e[2] = {{"x", SP_ST_F32, 3, (int[]){3, 4, 2}, x}, {"y", SP_ST_I64, 1, (int[]){3}, y}};
    const char *path = tmp_path("nan.st");
    OK(sp_st_write(path, 2, e, NULL));
    REFUSED(sp_seqset_open(path), "sample 1 has a non-finite input NaN at element 5 (t = 2, c = 1)");
    x[1 * 8 + 2 * 2 + 1] = 0.0f;
    x[2 * 8] = -INFINITY;
    OK(sp_st_write(path, 2, e, NULL));
    REFUSED(sp_seqset_open(path), "sample 2 has a non-finite input -inf at element 0");
}

/* Issue 15 item 4: sizes a header announces are checked against the file before any
 * allocation, and against the ceiling on one file-driven allocation. */
Test(files, announced_sizes_checked_before_allocating)
{
    unsigned char h[16 + 4];
    put_be32(h, 2051);
    put_be32(h + 4, 60000);
    put_be32(h + 8, 28);
    put_be32(h + 12, 28);
    const char *im = tmp_path("claims"), *lb = tmp_path("claims_l");
    unsigned char l[8];
    put_be32(l, 2049);
    put_be32(l + 4, 60000);
    write_file(lb, l, sizeof l, false);
    write_file(im, h, sizeof h, false);
    REFUSED(sp_idx_open(im, lb), "truncated: the header announces the pixels of 47040000 bytes, the file has 4");
    write_file(tmp_path("claims.gz"), h, sizeof h, true);   /* ~40 bytes of gzip claiming 47 MB */
    REFUSED(sp_idx_open(tmp_path("claims.gz"), lb), "more than a");

    sp_set_file_alloc_limit(50);
    REFUSED(open_idx(good), "needs 60 bytes, above the 50-byte limit on one allocation from a file");
    sp_set_file_alloc_limit(0);
    sp_dataset *d = open_idx(good);
    cr_assert_not_null(d, "%s", sp_last_error());
    sp_dataset_free(d);
}

/* The GRU app's synthetic sequences for any positive class count: c·(f + 1) overflowed
 * int for classes near INT_MAX (UBSan in make test-asan). The values stay those of the
 * formula, computed exactly. */
Test(synthetic, huge_class_count_no_overflow)
{
    sp_dataset *d = sp_synthetic_sequences(8, 3, 4, 2147483647, 7);
    cr_assert_not_null(d);
    float x[12];
    for (int i = 0; i < 8; i++) {
        int c;
        sp_dataset_get(d, i, x, &c);
        cr_assert(c >= 0, "label %d", c);
        for (int k = 0; k < 12; k++) cr_assert(isfinite(x[k]) && fabsf(x[k]) < 10, "x[%d] = %g", k, x[k]);
    }
    sp_dataset_free(d);
}
