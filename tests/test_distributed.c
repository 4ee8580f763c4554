/* test_distributed — what a run on several machines needs: each rank reads only its own
 * rows of the training set (the loader's row selection, and the apps' per-rank counts under
 * mpirun) and only those from the dataset files (raw IDX and CIFAR at 2, 3, 4 ranks), the same weights over Open MPI's TCP transport as over shared memory, and trace
 * timestamps put on rank 0's clock by the offset measured at the start. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>
#include "core/io/safetensors.h"
#include "data/data.h"
#include "tests/mpirun.h"

/* ---- the loader ------------------------------------------------------------------------- */

/* 40 samples of 3 floats: sample i is (i, i + 0.5, −i), label i % 7. */
static sp_dataset *numbered(void)
{
    float *x;
    int *y;
    sp_dataset *d = sp_dataset_new_f32("numbered", 40, 1, (int[]){3}, 7, &x, &y);
    cr_assert_not_null(d);
    for (int i = 0; i < 40; i++) x[3 * i] = (float)i, x[3 * i + 1] = (float)i + 0.5f, x[3 * i + 2] = (float)-i, y[i] = i % 7;
    return d;
}

/* With the prefetch thread and without it (sp_loader_new_rows_sync, the runner's choice
 * where no core is spare): the same rows, the same counts. */
static void rows_asked_for(bool sync)
{
    sp_dataset *d = numbered();
    const int batch = 8;
    unsigned char need[8] = {SP_LOADER_X, SP_LOADER_X, 0, 0, SP_LOADER_Y, SP_LOADER_Y, 0, SP_LOADER_X | SP_LOADER_Y};
    sp_loader *all = sp_loader_new(d, batch, true, 5, true),
              *mine = (sync ? sp_loader_new_rows_sync : sp_loader_new_rows)(d, batch, true, 5, true, need);
    for (int e = 0; e < 2; e++) {
        sp_loader_set_epoch(all, e);
        sp_loader_set_epoch(mine, e);
        sp_batch a, m;
        int nb = 0;
        while (sp_loader_next(all, &a)) {
            cr_assert(sp_loader_next(mine, &m));
            nb++;
            for (int p = 0; p < batch; p++) {
                bool x = need[p] & SP_LOADER_X, y = need[p] & (SP_LOADER_X | SP_LOADER_Y);
                for (int k = 0; k < 3; k++)
                    cr_expect_eq(m.x.data[3 * p + k], x ? a.x.data[3 * p + k] : 0.0f, "epoch %d batch %d row %d", e,
                                 a.index, p);
                cr_expect_eq(m.y[p], y ? a.y[p] : 0, "epoch %d batch %d row %d label", e, a.index, p);
            }
        }
        cr_expect_not(sp_loader_next(mine, &m));
        cr_expect_eq(nb, 5);
    }
    /* 2 epochs × 5 batches × 3 rows with inputs, 2 labels alone; the full loader read all 80 */
    cr_expect_eq(sp_loader_samples_read(mine), 30);
    cr_expect_eq(sp_loader_labels_read(mine), 20);
    cr_expect_eq(sp_loader_bytes_read(mine), 30.0 * (3 * 4 + 4) + 20.0 * 4);
    cr_expect_eq(sp_loader_samples_read(all), 80);
    cr_expect_eq(sp_loader_labels_read(all), 0);
    sp_loader_free(all);
    sp_loader_free(mine);
    /* a dataset without a label hook reads the sample for a label alone (and counts it) */
    d->label = NULL;
    unsigned char only_y[8] = {SP_LOADER_Y, 0, 0, 0, 0, 0, 0, 0};
    sp_loader *l = sp_loader_new_rows(d, batch, false, 0, true, only_y);
    sp_batch b;
    cr_assert(sp_loader_next(l, &b));
    cr_expect_eq(b.y[0], 0);
    cr_assert(sp_loader_next(l, &b));
    cr_expect_eq(b.y[0], 8 % 7);
    cr_expect_eq(b.x.data[0], 0.0f, "the input of a label-only row stays zero");
    sp_loader_free(l);   /* the producer may have read ahead: at least the two taken */
    sp_dataset_free(d);
}

Test(distributed, loader_reads_only_the_rows_it_is_asked_for)
{
    rows_asked_for(false);
    rows_asked_for(true);
}

/* ---- under mpirun ----------------------------------------------------------------------- */

#define GRU "--samples 64 --batch 16 --epochs 1 --threads 1 --quiet"

/* The JSON array after "key": [a, b, …] into v; returns its length. */
static int json_array(const char *json, const char *key, long *v, int cap)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\": [", key);
    const char *p = strstr(json, k);
    cr_assert_not_null(p, "no %s in %s", key, json);
    p += strlen(k);
    int n = 0;
    while (n < cap && *p && *p != ']') {
        char *end;
        v[n++] = strtol(p, &end, 10);
        p = end + strspn(end, ", ");
    }
    return n;
}

static double compare(const char *pa, const char *pb, bool *bitwise)
{
    sp_st_file *a = sp_st_open(pa), *b = sp_st_open(pb);
    cr_assert(a && b, "cannot open %s or %s", pa, pb);
    cr_assert_eq(sp_st_count(a), sp_st_count(b));
    double worst = 0;
    *bitwise = true;
    for (int i = 0; i < sp_st_count(a); i++) {
        const sp_st_tensor *ta = sp_st_at(a, i), *tb = sp_st_find(b, ta->name);
        cr_assert_not_null(tb);
        int shape[SP_ST_MAX_DIMS];
        for (int d = 0; d < ta->ndim; d++) shape[d] = (int)ta->shape[d];
        float *x = malloc(ta->nbytes + 4), *y = malloc(tb->nbytes + 4);
        cr_assert_eq(sp_st_read_f32(a, ta->name, x, ta->ndim, shape), 0);
        cr_assert_eq(sp_st_read_f32(b, ta->name, y, ta->ndim, shape), 0);
        *bitwise &= memcmp(x, y, ta->nbytes) == 0;
        worst = fmax(worst, tu_max_rel_diff(x, y, ta->numel));
        free(x);
        free(y);
    }
    sp_st_close(a);
    sp_st_close(b);
    return worst;
}

/* gru, 64 samples in 4 batches of 16: a data-parallel rank reads 64/W rows; gpipe's first
 * stage reads the inputs and its last stage only the labels; the weights are those of one
 * process (≤ 1e-6, as tests/test_exec.c's every_scheme_trains_rnn_and_gru). */
Test(distributed, each_rank_reads_only_its_own_rows, .timeout = 240)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    const char *single = tu_tmp_path("single.st");
    char cmd[1024], out[8192];
    snprintf(cmd, sizeof cmd, "%s " GRU " --save %s", tu_bin_path("gru"), single);
    cr_assert_eq(tu_run(cmd, out, sizeof out, NULL, 0), 0, "%s", out);
    static const struct { const char *scheme; int W; long rows[4], labels[4]; } cases[] = {
        {"ddp", 2, {32, 32}, {0, 0}},
        {"fsdp", 2, {32, 32}, {0, 0}},
        {"ddp-ooo", 4, {16, 16, 16, 16}, {0, 0, 0, 0}},
        {"gpipe", 2, {64, 0}, {0, 64}},
    };
    long per = -1;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *saved = tu_tmp_path("par.st");
        char np[16];
        snprintf(np, sizeof np, "-np %d", cases[i].W);
        snprintf(cmd, sizeof cmd, "%s " GRU " --parallel %s --save %s", tu_bin_path("gru"), cases[i].scheme, saved);
        mpi_result r;
        mpi_run("", np, cmd, &r);
        cr_assert_eq(r.status, 0, "%s: %s", cases[i].scheme, r.err);
        long rows[8], labels[8], bytes[8];
        int n = json_array(r.out, "data_rows_read", rows, 8);
        cr_assert_eq(n, cases[i].W);
        cr_assert_eq(json_array(r.out, "data_labels_read", labels, 8), n);
        cr_assert_eq(json_array(r.out, "data_bytes_read", bytes, 8), n);
        for (int k = 0; k < n; k++) {
            cr_expect_eq(rows[k], cases[i].rows[k], "%s rank %d read %ld rows", cases[i].scheme, k, rows[k]);
            cr_expect_eq(labels[k], cases[i].labels[k], "%s rank %d read %ld labels", cases[i].scheme, k, labels[k]);
            /* one sample's bytes, the same in every run: its floats and its label */
            if (per < 0 && rows[k] > 0) per = (bytes[k] - 4 * labels[k]) / rows[k];
            cr_expect_eq(bytes[k], rows[k] * per + labels[k] * 4, "%s rank %d: %ld bytes", cases[i].scheme, k, bytes[k]);
        }
        bool bitwise;
        double d = compare(saved, single, &bitwise);
        cr_expect(d <= 1e-6, "%s at %d ranks: %g from the single process", cases[i].scheme, cases[i].W, d);
    }
    cr_expect(per > 4 && per % 4 == 0, "%ld bytes per sample", per);
}

/* ---- the files: each rank reads its own rows of them ------------------------------------ */

static void put_be32(unsigned char *b, uint32_t v)
{
    for (int i = 0; i < 4; i++) b[i] = (unsigned char)(v >> (24 - 8 * i));
}

static void write_bytes(const char *path, const unsigned char *b, size_t n, bool gz)
{
    if (gz) {
        gzFile g = gzopen(path, "wb");
        cr_assert(g && gzwrite(g, b, (unsigned)n) == (int)n, "cannot write %s", path);
        gzclose(g);
        return;
    }
    FILE *f = fopen(path, "wb");
    cr_assert(f && fwrite(b, 1, n, f) == n, "cannot write %s", path);
    fclose(f);
}

static long long size_of(const char *path)
{
    struct stat st;
    cr_assert_eq(stat(path, &st), 0, "%s", path);
    return (long long)st.st_size;
}

/* dir/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]: n 28×28 images; the bytes of
 * both files in *bytes. */
static void write_idx_pair(const char *dir, const char *prefix, int n, bool gz, long long *bytes)
{
    char im[600], lb[600];
    snprintf(im, sizeof im, "%s/%s-images-idx3-ubyte%s", dir, prefix, gz ? ".gz" : "");
    snprintf(lb, sizeof lb, "%s/%s-labels-idx1-ubyte%s", dir, prefix, gz ? ".gz" : "");
    size_t ni = 16 + (size_t)n * 784;
    unsigned char *b = malloc(ni);
    put_be32(b, 2051), put_be32(b + 4, (uint32_t)n), put_be32(b + 8, 28), put_be32(b + 12, 28);
    for (size_t j = 16; j < ni; j++) b[j] = (unsigned char)((j * 2654435761u) >> 13);
    write_bytes(im, b, ni, gz);
    for (int i = 0; i < n; i++) b[8 + i] = (unsigned char)(i * 7 % 10);
    put_be32(b, 2049), put_be32(b + 4, (uint32_t)n);
    write_bytes(lb, b, 8 + (size_t)n, gz);
    free(b);
    *bytes = size_of(im) + size_of(lb);
}

/* dir/data_batch_1..5.bin (n/5 records each) and dir/test_batch.bin (nt records). */
static void write_cifar_dir(const char *dir, int n, int nt)
{
    for (int f = 0; f <= 5; f++) {
        char p[600];
        int m = f < 5 ? n / 5 : nt;
        if (f < 5) snprintf(p, sizeof p, "%s/data_batch_%d.bin", dir, f + 1);
        else snprintf(p, sizeof p, "%s/test_batch.bin", dir);
        unsigned char *b = malloc((size_t)m * 3073);
        for (size_t j = 0; j < (size_t)m * 3073; j++) b[j] = (unsigned char)((j * 2654435761u) >> 13);
        for (int r = 0; r < m; r++) b[(size_t)r * 3073] = (unsigned char)((r + f) % 10);
        write_bytes(p, b, (size_t)m * 3073, false);
        free(b);
    }
}

#define ROWS_N 120    /* training samples: 10 batches of 12 */
#define ROWS_NT 30    /* test samples */
#define LENET_ROWS "--batch 12 --epochs 1 --no-shuffle --threads 1 --quiet --parallel ddp"

/* ddp with W ranks, file order (--no-shuffle): rank r reads positions [r·12/W, (r+1)·12/W)
 * of every batch of 12 (its micro-batch) */
static int owner(int i, int W) { return (i % 12) / (12 / W); }

/* Rows rank r holds of the training set: its own, and the three samples every rank reads
 * for the run's identity in a checkpoint (0, n/2, n-1). */
static long held_rows(int r, int W)
{
    long c = 0;
    for (int i = 0; i < ROWS_N; i++) c += owner(i, W) == r || i == 0 || i == ROWS_N / 2 || i == ROWS_N - 1;
    return c;
}

/* One run at W ranks: per rank, the file bytes read and kept of the training set and the
 * test set against header + its rows × (bytes a row); gz_train > 0: the compressed files
 * are read whole (gzip cannot seek), that many bytes. */
static void file_rows_run(const char *args, int W, long hdr, long row, long hdr_test, long long gz_train)
{
    char cmd[2048], np[16];
    snprintf(cmd, sizeof cmd, "%s " LENET_ROWS " %s", tu_bin_path("lenet"), args);
    snprintf(np, sizeof np, "-np %d", W);
    mpi_result r;
    mpi_run("", np, cmd, &r);
    cr_assert_eq(r.status, 0, "%s at %d ranks: %s", args, W, r.err);
    long rows[8], read[8], kept[8], tread[8], tkept[8];
    cr_assert_eq(json_array(r.out, "data_rows_read", rows, 8), W);
    cr_assert_eq(json_array(r.out, "data_file_bytes_read", read, 8), W);
    cr_assert_eq(json_array(r.out, "data_file_bytes_kept", kept, 8), W);
    cr_assert_eq(json_array(r.out, "test_file_bytes_read", tread, 8), W);
    cr_assert_eq(json_array(r.out, "test_file_bytes_kept", tkept, 8), W);
    long payload = ROWS_N * row;
    for (int k = 0; k < W; k++) {
        cr_expect_eq(rows[k], ROWS_N / W, "W %d rank %d: %ld rows", W, k, rows[k]);
        long want = held_rows(k, W) * row;
        cr_expect_eq(kept[k], want, "%s W %d rank %d kept %ld bytes, expected %ld", args, W, k, kept[k], want);
        if (gz_train) cr_expect_eq(read[k], gz_train, "W %d rank %d: the .gz files once", W, k);
        else cr_expect_eq(read[k], hdr + want, "%s W %d rank %d read %ld bytes, expected %ld", args, W, k, read[k], hdr + want);
        cr_expect_lt(kept[k], payload / W + 3 * row + 1, "about 1/W of the payload, not all of it");
        /* the test set: rank k evaluates [k·nt/W, (k+1)·nt/W) and reads only those */
        long nt = (long)ROWS_NT * (k + 1) / W - (long)ROWS_NT * k / W;
        if (!gz_train) cr_expect_eq(tread[k], hdr_test + nt * row, "W %d rank %d test bytes %ld", W, k, tread[k]);
        cr_expect_eq(tkept[k], nt * row, "W %d rank %d test bytes kept %ld", W, k, tkept[k]);
    }
}

Test(distributed, each_rank_reads_its_own_rows_of_the_files, .timeout = 300)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    char idx[512], gz[512], cifar[512], args[700];
    snprintf(idx, sizeof idx, "%s/idx", tu_tmpdir());
    snprintf(gz, sizeof gz, "%s/gz", tu_tmpdir());
    snprintf(cifar, sizeof cifar, "%s/cifar", tu_tmpdir());
    cr_assert(mkdir(idx, 0755) == 0 && mkdir(gz, 0755) == 0 && mkdir(cifar, 0755) == 0);
    long long bytes, gz_bytes, unused;
    write_idx_pair(idx, "train", ROWS_N, false, &bytes);
    write_idx_pair(idx, "t10k", ROWS_NT, false, &unused);
    write_idx_pair(gz, "train", ROWS_N, true, &gz_bytes);
    write_idx_pair(gz, "t10k", ROWS_NT, true, &unused);
    write_cifar_dir(cifar, ROWS_N, ROWS_NT);
    cr_assert_eq(bytes, 24 + ROWS_N * 785);
    for (int W = 2; W <= 4; W++) {
        snprintf(args, sizeof args, "--data %s --data-format idx", idx);
        file_rows_run(args, W, 24, 785, 24, 0);
        snprintf(args, sizeof args, "--data %s --data-format cifar10", cifar);
        file_rows_run(args, W, 0, 3073, 0, 0);
    }
    snprintf(args, sizeof args, "--data %s --data-format idx", gz);
    file_rows_run(args, 2, 24, 785, 24, gz_bytes);
}

/* The network path: with Open MPI's ob1 over TCP only (loopback), not shared memory, the
 * same run gives the same weights, bit for bit. */
Test(distributed, tcp_transport_gives_the_shared_memory_weights, .timeout = 120)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    const char *shm = tu_tmp_path("shm.st"), *tcp = tu_tmp_path("tcp.st");
    char cmd[1024];
    mpi_result r;
    snprintf(cmd, sizeof cmd, "%s " GRU " --parallel fsdp --save %s", tu_bin_path("gru"), shm);
    mpi_run("", "-np 2", cmd, &r);
    cr_assert_eq(r.status, 0, "%s", r.err);
    snprintf(cmd, sizeof cmd, "%s " GRU " --parallel fsdp --save %s", tu_bin_path("gru"), tcp);
    mpi_run("", "-np 2 --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo --mca btl_base_verbose 30", cmd,
            &r);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.err, "btl:tcp: using ipv4 interface lo") || strstr(r.err, "btl: tcp: Using interface"),
              "TCP not selected: %.2000s", r.err);
    bool bitwise;
    double d = compare(tcp, shm, &bitwise);
    cr_expect(bitwise, "TCP and shared memory differ by %g", d);
}

/* A rank whose clock runs 5.25 s ahead (the tests' skew): the offset measured at the start
 * says so, and its trace events still start within the run's first second on rank 0's
 * clock, as rank 0's do. */
Test(distributed, trace_timestamps_are_on_rank_0s_clock, .timeout = 120)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    const char *trace = tu_tmp_path("trace.json");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s --steps 3 --threads 1 --quiet --parallel ddp --trace %s", tu_bin_path("demo"), trace);
    mpi_result r;
    mpi_run("SCANPROP_TRACE_CLOCK_SKEW=1:5.25", "-np 2", cmd, &r);
    cr_assert_eq(r.status, 0, "%s", r.err);
    FILE *f = fopen(trace, "r");
    cr_assert_not_null(f);
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    double offset[2] = {NAN, NAN}, first[2] = {INFINITY, INFINITY};
    for (const char *p = text; (p = strstr(p, "{\"name\"")); p++) {
        int pid;
        const char *q = strstr(p, "\"pid\": ");
        if (!q || sscanf(q, "\"pid\": %d", &pid) != 1 || pid < 0 || pid > 1) continue;
        const char *o = strstr(p, "\"clock_offset_us\": "), *end = strchr(p, '}');
        if (o && o < end) offset[pid] = strtod(o + strlen("\"clock_offset_us\": "), NULL);
        const char *ts = strstr(p, "\"ts\": ");
        if (ts && ts < end) first[pid] = fmin(first[pid], strtod(ts + 6, NULL));
    }
    cr_expect_eq(offset[0], 0);
    cr_expect(fabs(offset[1] + 5.25e6) < 2000, "rank 1's offset %g us (expected -5.25 s)", offset[1]);
    for (int k = 0; k < 2; k++)
        cr_expect(first[k] >= -1e5 && first[k] < 1e6, "rank %d's first event at %g us", k, first[k]);
}
