/* test_data_rows.c — datasets opened for a subset of their rows (sp_idx_open_rows,
 * sp_fashion_mnist_rows, sp_cifar10_rows): what each of W ranks reads from the files
 * (raw: the headers and its own rows, nothing else; gzip: the stream once, keeping its
 * own rows), what it holds in memory (its rows), that what it holds is bit for bit what
 * the whole-file readers give, that the files are checked as the whole-file readers
 * check them, and that sp_loader_rows names every row a loader reads. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include "data/data.h"
#include "tests/datatest.h"
#include "tests/testutil.h"

static long long file_size(const char *path)
{
    struct stat st;
    cr_assert_eq(stat(path, &st), 0, "%s", path);
    return (long long)st.st_size;
}

enum { N = 60, R = 5, C = 6, ROW = R * C };   /* 60 images of 5×6 */

/* IDX images and labels; extra: bytes appended to the images (< 0: cut), bad: the label
 * of sample `bad_at` (< 0: none). */
static void write_idx(const char *im, const char *lb, bool gz, int extra, int bad, int bad_at)
{
    size_t ni = 16 + (size_t)N * ROW;
    unsigned char *b = calloc(ni + 16, 1);
    put_be32(b, 2051), put_be32(b + 4, N), put_be32(b + 8, R), put_be32(b + 12, C);
    for (size_t j = 16; j < ni; j++) b[j] = (unsigned char)(j * 7 + j / ROW);
    write_file(im, b, (size_t)((long)ni + extra), gz);
    free(b);
    unsigned char l[8 + N];
    put_be32(l, 2049), put_be32(l + 4, N);
    for (int i = 0; i < N; i++) l[8 + i] = (unsigned char)(i % 10);
    if (bad >= 0) l[8 + bad_at] = (unsigned char)bad;
    write_file(lb, l, sizeof l, gz);
}

/* CIFAR test_batch.bin of n records (the pixels of record r differ per r). */
static void write_cifar(const char *path, int n, int bad_at)
{
    unsigned char *b = malloc((size_t)n * 3073);
    for (int r = 0; r < n; r++) {
        b[(size_t)r * 3073] = (unsigned char)(r == bad_at ? 10 : (r * 3 + 1) % 10);
        for (int j = 0; j < 3072; j++) b[(size_t)r * 3073 + 1 + j] = (unsigned char)(r * 31 + j);
    }
    write_file(path, b, (size_t)n * 3073, false);
    free(b);
}

/* Every row of `rows` held bit for bit as in `whole`, and nothing more. */
static void same_rows(sp_dataset *rows, sp_dataset *whole, const unsigned char *keep)
{
    size_t k = sp_dataset_sample_numel(whole);
    cr_assert_eq(sp_dataset_sample_numel(rows), k);
    float *a = malloc(k * sizeof *a), *b = malloc(k * sizeof *b);
    for (int i = 0; i < whole->n; i++) {
        if (!keep[i]) continue;
        int ya, yb;
        sp_dataset_get(whole, i, a, &ya);
        if (keep[i] & SP_LOADER_X) {
            sp_dataset_get(rows, i, b, &yb);
            cr_assert_eq(memcmp(a, b, k * sizeof *a), 0, "sample %d differs", i);
        } else {
            yb = rows->label(rows, i);
        }
        cr_assert_eq(ya, yb, "label %d", i);
    }
    free(a);
    free(b);
}

static void get_row(void *arg)
{
    void **a = arg;
    float x[4096];
    int y;
    sp_dataset_get(a[0], *(int *)a[1], x, &y);
}

/* Rank r of W: the rows whose position in a batch of 12 is in its 12/W block (a data
 * parallel rank's share, file order). */
static void share(unsigned char *keep, int n, int r, int W)
{
    memset(keep, 0, (size_t)n);
    for (int i = 0; i < n; i++)
        if ((i % 12) / (12 / W) == r) keep[i] = SP_LOADER_X;
}

static int count(const unsigned char *keep, int n, int flag)
{
    int c = 0;
    for (int i = 0; i < n; i++) c += (keep[i] & flag) != 0;
    return c;
}

Test(rows, raw_idx_each_rank_reads_its_rows_only)
{
    const char *im = tmp_path("im"), *lb = tmp_path("lb");
    write_idx(im, lb, false, 0, -1, 0);
    sp_dataset *whole = sp_idx_open(im, lb);
    cr_assert_not_null(whole, "%s", sp_last_error());
    cr_expect_eq(whole->file_bytes_read, file_size(im) + file_size(lb));
    for (int W = 2; W <= 4; W++) {
        long long kept = 0;
        for (int r = 0; r < W; r++) {
            sp_dataset *d = sp_idx_open_rows(im, lb);
            cr_assert_not_null(d, "%s", sp_last_error());
            cr_expect_eq(d->n, N);
            cr_expect_eq(d->file_bytes_read, 16 + 8, "the headers alone at open");
            cr_expect_eq(sp_dataset_bytes(d), (size_t)N * 2 * sizeof(int), "nothing held but the maps");
            unsigned char keep[N];
            share(keep, N, r, W);
            OK(sp_dataset_read_rows(d, keep, true));
            int own = count(keep, N, SP_LOADER_X);
            cr_expect_eq(own, N / W);
            cr_expect_eq(d->file_bytes_read, 16 + 8 + (long long)own * (ROW + 1), "W %d rank %d", W, r);
            cr_expect_lt(d->file_bytes_read, file_size(im) + file_size(lb) - (W - 1) * (N / W) * (ROW + 1) + 1);
            cr_expect_eq(d->file_bytes_kept, (long long)own * (ROW + 1));
            cr_expect_eq(sp_dataset_bytes(d), (size_t)own * ROW + (size_t)N * 2 * sizeof(int), "holds its rows only");
            same_rows(d, whole, keep);
            int other = r == 0 ? 12 / W : 0;   /* another rank's row */
            void *a[2] = {d, &other};
            cr_expect_eq(sp_try(get_row, a), SP_ERR, "row %d is not this rank's", other);
            cr_expect(strstr(sp_last_error(), "was not read by this process"), "%s", sp_last_error());
            kept += d->file_bytes_kept;
            sp_dataset_free(d);
        }
        cr_expect_eq(kept, whole->file_bytes_kept, "the W ranks together read the payload once");
    }
    sp_dataset_free(whole);
}

Test(rows, cifar_each_rank_reads_its_records_only)
{
    write_cifar(tmp_path("test_batch.bin"), N, -1);
    sp_dataset *whole = sp_cifar10(tu_tmpdir(), false);
    cr_assert_not_null(whole, "%s", sp_last_error());
    for (int W = 2; W <= 4; W++)
        for (int r = 0; r < W; r++) {
            sp_dataset *d = sp_cifar10_rows(tu_tmpdir(), false);
            cr_assert_not_null(d, "%s", sp_last_error());
            cr_expect_eq(d->file_bytes_read, 0);
            unsigned char keep[N];
            share(keep, N, r, W);
            int lab = 0;
            while (keep[lab]) lab++;
            keep[lab] = SP_LOADER_Y;   /* another rank's row, its label alone: one byte */
            OK(sp_dataset_read_rows(d, keep, true));
            int own = count(keep, N, SP_LOADER_X), labels = count(keep, N, SP_LOADER_Y);
            cr_expect_eq(d->file_bytes_read, (long long)own * 3073 + labels, "W %d rank %d", W, r);
            cr_expect_eq(sp_dataset_bytes(d), (size_t)own * 3072 + (size_t)N * 2 * sizeof(int));
            same_rows(d, whole, keep);
            sp_dataset_free(d);
        }
    sp_dataset_free(whole);
}

Test(rows, gzip_streams_once_and_keeps_its_rows)
{
    const char *im = tmp_path("im.gz"), *lb = tmp_path("lb.gz");
    write_idx(im, lb, true, 0, -1, 0);
    sp_dataset *whole = sp_idx_open(im, lb);
    cr_assert_not_null(whole, "%s", sp_last_error());
    long long size = file_size(im) + file_size(lb);
    cr_expect_eq(whole->file_bytes_read, size);
    sp_dataset *d = sp_idx_open_rows(im, lb);
    cr_assert_not_null(d, "%s", sp_last_error());
    unsigned char keep[N] = {SP_LOADER_X};
    OK(sp_dataset_read_rows(d, keep, false));   /* sample 0 first, as sp_run does */
    share(keep, N, 1, 3);
    keep[0] = SP_LOADER_X;
    OK(sp_dataset_read_rows(d, keep, true));   /* then the rest, from where the stream stopped */
    cr_expect_eq(d->file_bytes_read, size, "one pass over the compressed files");
    cr_expect_eq(d->file_bytes_kept, (long long)count(keep, N, SP_LOADER_X) * (ROW + 1));
    cr_expect_eq(sp_dataset_bytes(d), (size_t)count(keep, N, SP_LOADER_X) * ROW + (size_t)N * 2 * sizeof(int));
    same_rows(d, whole, keep);
    keep[1] = SP_LOADER_X;   /* rank 0's */
    REFUSED(sp_dataset_read_rows(d, keep, true) == SP_OK, "1 more rows asked for after the last read");
    sp_dataset_free(d);
    /* a row behind the stream: inflated from the start again */
    d = sp_idx_open_rows(im, lb);
    memset(keep, 0, sizeof keep);
    keep[N - 1] = SP_LOADER_X;
    OK(sp_dataset_read_rows(d, keep, false));
    keep[3] = SP_LOADER_X;
    OK(sp_dataset_read_rows(d, keep, true));
    cr_expect_gt(d->file_bytes_read, size);
    same_rows(d, whole, keep);
    sp_dataset_free(d);
    sp_dataset_free(whole);
}

Test(rows, padding_is_the_whole_readers)
{
    char dir[512], im[600], lb[600];
    snprintf(dir, sizeof dir, "%s/fm", tu_tmpdir());
    mkdir(dir, 0755);
    snprintf(im, sizeof im, "%s/train-images-idx3-ubyte", dir);
    snprintf(lb, sizeof lb, "%s/train-labels-idx1-ubyte", dir);
    write_idx(im, lb, false, 0, -1, 0);
    sp_dataset *whole = sp_fashion_mnist(dir, true, 9), *d = sp_fashion_mnist_rows(dir, true, 9);
    cr_assert(whole && d, "%s", sp_last_error());
    cr_expect(d->shape[1] == 9 && d->shape[2] == 9);
    unsigned char keep[N];
    share(keep, N, 0, 2);
    OK(sp_dataset_read_rows(d, keep, true));
    same_rows(d, whole, keep);
    sp_dataset_free(d);
    sp_dataset_free(whole);
}

/* The rows opener refuses a bad file with the whole-file reader's line. */
static void refused_alike(const char *im, const char *lb, bool read_all)
{
    sp_clear_error();
    sp_dataset *w = sp_idx_open(im, lb);
    cr_assert_null(w, "the whole-file reader accepted it");
    char want[1024];
    snprintf(want, sizeof want, "%s", sp_last_error());
    sp_clear_error();
    sp_dataset *d = sp_idx_open_rows(im, lb);
    if (d && read_all) {
        cr_assert_neq(sp_dataset_read_rows(d, NULL, true), SP_OK, "read every row of a bad file");
        sp_dataset_free(d);
    } else {
        cr_assert_null(d, "opened a bad file");
    }
    cr_expect_str_eq(sp_last_error(), want);
}

Test(rows, bad_files_refused_as_the_whole_reader_refuses_them)
{
    const char *im = tmp_path("im"), *lb = tmp_path("lb"), *gi = tmp_path("im.gz"), *gl = tmp_path("lb.gz");
    write_idx(im, lb, false, -3, -1, 0);   /* truncated */
    refused_alike(im, lb, false);
    write_idx(im, lb, false, 2, -1, 0);    /* 2 bytes too many */
    refused_alike(im, lb, false);
    write_idx(im, lb, false, 0, -1, 0);
    refused_alike(lb, im, false);          /* the files swapped: wrong magic */
    write_idx(im, lb, false, 0, 12, 7);    /* label 12 at sample 7 */
    refused_alike(im, lb, true);
    write_idx(gi, gl, true, 2, -1, 0);     /* gzip: extra decompressed data, seen at the end */
    refused_alike(gi, gl, true);
    write_idx(gi, gl, true, 0, -1, 0);
    cr_assert_eq(truncate(gi, file_size(gi) / 2), 0);
    refused_alike(gi, gl, true);
    /* a bad label in a row nobody asked for is not read, so not seen */
    write_idx(im, lb, false, 0, 12, 7);
    sp_dataset *d = sp_idx_open_rows(im, lb);
    unsigned char keep[N] = {SP_LOADER_X, SP_LOADER_X};
    OK(sp_dataset_read_rows(d, keep, true));
    sp_dataset_free(d);
    write_cifar(tmp_path("test_batch.bin"), N, 30);
    d = sp_cifar10_rows(tu_tmpdir(), false);
    memset(keep, 0, sizeof keep);
    keep[30] = SP_LOADER_Y;
    REFUSED(sp_dataset_read_rows(d, keep, true) == SP_OK, "record 30 has label 10 (expected 0..9)");
    sp_dataset_free(d);
}

/* A dataset that records which samples and labels were read. */
typedef struct seen_ds {
    sp_dataset base;
    unsigned char seen[200];
} seen_ds;

static void seen_get(sp_dataset *d, int i, float *x, int *y)
{
    __atomic_or_fetch(&((seen_ds *)d)->seen[i], SP_LOADER_X, __ATOMIC_RELAXED);
    x[0] = (float)i;
    *y = i % 3;
}

static int seen_label(sp_dataset *d, int i)
{
    __atomic_or_fetch(&((seen_ds *)d)->seen[i], SP_LOADER_Y, __ATOMIC_RELAXED);
    return i % 3;
}

Test(rows, loader_rows_name_every_row_the_loader_reads)
{
    unsigned char need[10] = {0, 0, SP_LOADER_X, SP_LOADER_X, 0, 0, 0, 0, SP_LOADER_Y, SP_LOADER_Y};
    for (long batches = 0; batches <= 45; batches += 3)
        for (int rep = 0; rep < 3; rep++) {
            seen_ds s = {.base = {.name = "seen", .n = 200, .ndim = 1, .shape = {1}, .nclasses = 3,
                                  .get = seen_get, .label = seen_label}};
            unsigned char keep[200] = {0};
            OK(sp_loader_rows(&s.base, 10, true, 9, true, need, batches, keep));
            sp_loader *l = sp_loader_new_rows(&s.base, 10, true, 9, true, need);
            sp_batch b;
            for (long k = 0; k < batches; k++) {
                if (sp_loader_next(l, &b)) continue;
                sp_loader_reset_epoch(l);
                cr_assert(sp_loader_next(l, &b));
            }
            sp_loader_free(l);   /* joins the producer: what it assembled ahead is in seen */
            int wanted = 0;
            for (int i = 0; i < 200; i++) {
                cr_assert_eq(s.seen[i] & ~keep[i], 0, "%ld batches: row %d read (%d), not named (%d)", batches, i,
                             s.seen[i], keep[i]);
                wanted += keep[i] != 0;
            }
            /* and no more than the taken batches and the one prefetched: 4 rows a batch */
            long most = 4 * (batches + 2);
            cr_expect_leq(wanted, most < 200 ? most : 200, "%ld batches: %d rows named", batches, wanted);
        }
}

/* A sample the dataset cannot give (here a row this process never read) fails the batch
 * it belongs to: sp_loader_next returns false with the reader's message (the prefetching
 * loader's names the batch its thread was assembling), where the prefetching loader used
 * to hand out the batch with that sample left as it was. */
Test(rows, a_sample_that_cannot_be_read_fails_its_batch)
{
    const char *im = tmp_path("imf"), *lb = tmp_path("lbf");
    write_idx(im, lb, false, 0, -1, 0);
    for (int sync = 0; sync < 2; sync++) {
        sp_dataset *d = sp_idx_open_rows(im, lb);
        cr_assert_not_null(d, "%s", sp_last_error());
        unsigned char keep[N] = {0};
        for (int i = 0; i < 4; i++) keep[i] = SP_LOADER_X;   /* the first batch only */
        OK(sp_dataset_read_rows(d, keep, true));
        sp_loader *l = (sync ? sp_loader_new_sync : sp_loader_new)(d, 4, false, 1, true);
        cr_assert_not_null(l, "%s", sp_last_error());
        sp_batch b;
        cr_assert(sp_loader_next(l, &b), "batch 0: its rows were read (%s)", sp_last_error());
        cr_assert_not(sp_loader_next(l, &b), "batch 1 has rows this process did not read");
        cr_expect(strstr(sp_last_error(), "sample 4 was not read") &&
                      (sync || strstr(sp_last_error(), "loader, epoch 0, batch 1: ")),
                  "%s loader, the message: %s", sync ? "synchronous" : "prefetching", sp_last_error());
        sp_loader_free(l);
        sp_dataset_free(d);
    }
}
