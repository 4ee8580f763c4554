/* data.h — datasets and the prefetching DataLoader.
 *
 *   sp_dataset *d = sp_fashion_mnist("/usr/share/datasets/fashion-mnist", true, 32);
 *   if (!d) { fprintf(stderr, "%s\n", sp_last_error()); return; }   // or sp_check_ptr(...)
 *   sp_loader *l = sp_loader_new(d, 64, true, seed, false);
 *   for (int e = 0; e < epochs; e++) {
 *       sp_loader_set_epoch(l, e);
 *       sp_batch b;
 *       while (sp_loader_next(l, &b)) step(&b.x, b.y);   // x [B, 1, 32, 32], y [B]
 *   }
 *   sp_loader_free(l);
 *   sp_dataset_free(d);
 *
 * A dataset is n labelled samples of one fixed shape (at most 3-D: C×H×W images, T×C
 * sequences). The built-in ones hold their samples in memory as bytes or floats (they
 * are small) except the bitstream, which regenerates sample i from (seed, i).
 *
 * Errors (core/error.h): every reader and constructor returns NULL (or SP_ERR) with one
 * line naming the file and the problem in sp_last_error(); nothing exits. Readers
 * refuse a path that is not a regular file (FIFO, device, directory) before it can
 * block, report "cannot open X: Permission denied" as such, check every size the file
 * announces against the bytes it has before allocating (and against the ceiling of
 * sp_file_alloc), refuse bytes after the announced data (raw files and .gz streams,
 * naming the byte offset) and refuse non-finite float inputs naming the sample. */
#ifndef SP_DATA_H
#define SP_DATA_H

#include <stdbool.h>
#include <stdint.h>
#include "core/error.h"
#include "core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SP_DATA_MAX_CH 16

typedef struct sp_dataset sp_dataset;

/* To write your own dataset, embed sp_dataset as the FIRST member of your struct, fill
 * the fields and both hooks. get must be safe to call from the loader's thread. */
struct sp_dataset {
    char name[256];    /* file or directory, for messages                     */
    int n;             /* samples                                             */
    int ndim;          /* per-sample dimensions, 1..3                         */
    int shape[3];
    int nclasses;      /* labels are in [0, nclasses)                         */
    /* x: sample_numel floats; y: the label. i is in [0, n). */
    void (*get)(sp_dataset *d, int i, float *x, int *y);
    void (*free)(sp_dataset *d);          /* frees everything, d included     */
    /* Per-channel x = (x − mean[c]) / std[c] applied by sp_dataset_get after get
     * (torchvision's Normalize); 0 channels = off. See sp_dataset_normalize. */
    int norm_channels;
    float mean[SP_DATA_MAX_CH], std[SP_DATA_MAX_CH];
    /* Optional: the label of sample i alone, without reading its input (a pipeline's last
     * stage needs only labels). NULL: sp_dataset_label reads the sample through get. */
    int (*label)(sp_dataset *d, int i);
    /* Optional: a dataset opened for a subset of its rows (sp_idx_open_rows,
     * sp_fashion_mnist_rows, sp_cifar10_rows) holds only the rows it was asked for;
     * this reads more of them (sp_dataset_read_rows). NULL: it holds every row. */
    int (*read_rows)(sp_dataset *d, const unsigned char *keep, bool last);
    /* What the readers took from the dataset's files so far: bytes read from the files
     * (headers included; a .gz file: its compressed bytes), and of those (decompressed)
     * the sample and label bytes kept in memory. 0 for generated data. */
    long long file_bytes_read, file_bytes_kept;
};

/* Sample access and the loader's iteration below are fallible (core/error.h's first
 * kind): a NULL argument, an index out of range, a sample the source cannot give returns
 * SP_ERR (int calls; -1 for the counts), 0 (sp_dataset_sample_numel) or false
 * (sp_loader_next: check sp_last_error() to tell a failure from an epoch's end), with
 * the message in sp_last_error(); nothing exits. */
size_t sp_dataset_sample_numel(const sp_dataset *d);
/* Bytes an in-memory dataset of sp_dataset_new_u8/_f32 holds (samples and labels), or
 * one opened for a subset of rows (the rows it holds, and its per-row map of 2 ints); 0
 * for one generated on demand or held elsewhere (--mem-report), and for NULL. */
size_t sp_dataset_bytes(const sp_dataset *d);
/* d->get, bounds-checked, then normalisation if set. */
int sp_dataset_get(sp_dataset *d, int i, float *x, int *y);
/* The label of sample i: d->label, or (without one) get into scratch (sample_numel
 * floats). Returns 1 when the sample's input had to be read for it, 0 when not, SP_ERR
 * on a NULL argument or an index out of range. */
int sp_dataset_label(sp_dataset *d, int i, float *scratch, int *y);
/* The channel is dim 0 of a C×H×W sample and the last dim of a T×C sample; nch is
 * that dim's size, or 1 to use one mean/std for every element. */
int sp_dataset_normalize(sp_dataset *d, int nch, const float *mean, const float *std) SP_MUST_CHECK;
void sp_dataset_free(sp_dataset *d);

/* The rows a dataset holds in memory, for one opened for a subset (else SP_OK: it holds
 * every row). keep: d->n flags, SP_LOADER_X for a sample (its input and label),
 * SP_LOADER_Y for its label alone, 0 for a row not wanted; NULL: every sample. Rows
 * already held are not read again. A raw file is read by row ranges (pread); a gzip
 * stream cannot seek, so it is inflated from where the last call stopped (from the start
 * again if a row before that is asked for), keeping the rows asked for and dropping the
 * others. last: no more rows will be asked for — the files are then checked to their
 * end as a whole-file open checks them (a truncated or over-long .gz) and closed; a
 * later call refuses. Labels are checked as they are read: a bad label in a row no call
 * asked for is not seen. Reading a row that was not read with get or label is a
 * programming error (sp_fail naming the row). */
int sp_dataset_read_rows(sp_dataset *d, const unsigned char *keep, bool last) SP_MUST_CHECK;

/* In-memory datasets for readers: storage for n samples of `shape`, returned through x
 * (bytes, x = byte / divisor, e.g. 255 for pixels) or x (floats), and labels in
 * [0, nclasses) (nclasses >= 1, else NULL naming it). */
sp_dataset *sp_dataset_new_u8(const char *name, int n, int ndim, const int *shape, int nclasses,
                              float divisor, uint8_t **x, int **labels) SP_MUST_CHECK;
sp_dataset *sp_dataset_new_f32(const char *name, int n, int ndim, const int *shape, int nclasses,
                               float **x, int **labels) SP_MUST_CHECK;
/* Every label in [0, d->nclasses), else SP_ERR "<what>: label L of sample i ...". */
int sp_dataset_check_labels(const sp_dataset *d, const int *labels, const char *what) SP_MUST_CHECK;
/* Every one of the n samples' floats (x as laid out by sp_dataset_new_f32) finite, else
 * SP_ERR "<what>: sample i has a NaN/inf input at element j (...)". */
int sp_dataset_check_finite(const sp_dataset *d, const float *x, const char *what) SP_MUST_CHECK;
/* Zero-pads the H×W images of an in-memory byte dataset (C×H×W) to size×size, centred
 * (28×28 → 32×32 for VGG-11 on Fashion-MNIST: two zero rows/columns on each side). A
 * dataset opened for rows (sp_idx_open_rows) pads each sample as it is got, alike. */
int sp_dataset_pad(sp_dataset *d, int size) SP_MUST_CHECK;
/* Writes every sample as safetensors x [N, shape...] F32 and y [N] I64 (readable by
 * sp_seqset_open when the samples are 2-D, and by torch). Atomic. */
int sp_dataset_save(sp_dataset *d, const char *path) SP_MUST_CHECK;

/* ---- the datasets ---- */

/* IDX files (MNIST family), raw or gzip: images magic 2051 (ubyte, 3 dims), labels
 * magic 2049 (ubyte, 1 dim); 10 classes; pixels / 255. Samples are 1×rows×cols. */
sp_dataset *sp_idx_open(const char *images_path, const char *labels_path) SP_MUST_CHECK;
/* dir holds {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] (Debian's
 * dataset-fashion-mnist: /usr/share/datasets/fashion-mnist; also MNIST). pad_to = 0
 * keeps 28×28, else the images are zero-padded to pad_to×pad_to. */
sp_dataset *sp_fashion_mnist(const char *dir, bool train, int pad_to) SP_MUST_CHECK;
/* The same files opened for a subset of their rows: the headers and sizes are read and
 * checked as the whole-file open does, and no row is read until sp_dataset_read_rows
 * asks for it (a data-parallel rank reads only its own rows). */
sp_dataset *sp_idx_open_rows(const char *images_path, const char *labels_path) SP_MUST_CHECK;
sp_dataset *sp_fashion_mnist_rows(const char *dir, bool train, int pad_to) SP_MUST_CHECK;
/* CIFAR-10 binary: data_batch_1..5.bin or test_batch.bin in dir (or in
 * dir/cifar-10-batches-bin); records of 1 label byte + 3072 bytes CHW; 3×32×32. */
sp_dataset *sp_cifar10(const char *dir, bool train) SP_MUST_CHECK;
/* The same files opened for a subset of their records (see sp_idx_open_rows). */
sp_dataset *sp_cifar10_rows(const char *dir, bool train) SP_MUST_CHECK;
/* root/<class>/<image>.png, .jpg or .jpeg; classes in strcmp order of their names,
 * images in name order. Decoded as RGB (alpha dropped), to luminance with PIL's
 * convert("L") weights if channels = 1, resized to size×size exactly as Pillow's
 * BILINEAR (torchvision Resize on PIL images); pixels / 255. channels: 1 or 3. */
sp_dataset *sp_image_folder(const char *root, int size, int channels) SP_MUST_CHECK;
/* The directory name of class c of an image folder (NULL for other datasets). */
const char *sp_image_folder_class(const sp_dataset *d, int c);
/* Label test's samples by the class numbering of train (both image folders), matching
 * class directories by name: a test class that train lacks is an error naming it. A
 * training class with no test images is fine. */
int sp_image_folder_match_classes(sp_dataset *test, const sp_dataset *train) SP_MUST_CHECK;
/* The formats an app opens by name (the runner's --data-format), one row each in
 * data/formats.c: a new format is a row there. */
typedef struct sp_data_format {
    const char *name;
    /* The training (train) or test split under dir. pad_to: 0, or the size of the square
     * images the model takes (IDX zero-pads to it, a folder resizes to it); rows: opened
     * for a subset of rows (sp_dataset_read_rows) where the format can. NULL with the
     * message. */
    sp_dataset *(*open)(const char *dir, bool train, int pad_to, bool rows);
    /* Optional: fits the test split to the training split once both are open. */
    int (*pair)(sp_dataset *test, const sp_dataset *train);
    const char *default_dir;   /* read without a directory given (NULL: one must be) */
    const char *help;          /* what the directory holds */
} sp_data_format;
int sp_data_format_count(void);
const sp_data_format *sp_data_format_at(int i);               /* NULL outside [0, count) */
const sp_data_format *sp_data_format_find(const char *name);  /* NULL: no such format */
const char *sp_data_format_names(void);                       /* "a|b|c", in table order */
/* safetensors with x [N, T, C] (float dtype) and y [N] (integer dtype); samples T×C.
 * nclasses from metadata "nclasses" if present (at most SP_SEQSET_MAX_CLASSES: a model's
 * output layer has one row per class), else max(y) + 1. */
#define SP_SEQSET_MAX_CLASSES (1 << 20)
sp_dataset *sp_seqset_open(const char *path) SP_MUST_CHECK;
/* BPPSA bitstream classification (paper Eq. 8, §4.1): class c uniform in 0..9 and
 * x_t ~ Bernoulli(0.05 + 0.1·c), t = 0..T-1; samples T×1. Sample i depends only on
 * (seed, i), so nothing is stored and T can be 30000. */
sp_dataset *sp_bitstream(int n, int T, uint64_t seed) SP_MUST_CHECK;
/* Class-dependent noisy sequences T×C (data/synthetic_seq.c): the GRU app's default. */
sp_dataset *sp_synthetic_sequences(int n, int T, int C, int nclasses, uint64_t seed) SP_MUST_CHECK;

/* ---- the loader ---- */

typedef struct sp_batch {
    sp_tensor x;       /* [n, sample shape...], owned by the loader            */
    int *y;            /* [n]                                                  */
    int n;             /* samples; < batch only for a last partial batch       */
    int index;         /* batch number within the epoch                        */
    int epoch;
} sp_batch;

typedef struct sp_loader sp_loader;

/* Batches of `batch` samples. With shuffle, epoch e visits the samples in the order of
 * sp_rng_shuffle seeded from (seed, e) alone, so any epoch can be replayed. A background
 * thread assembles the next batch while the caller works on the current one (double
 * buffering); the buffers are allocated here once. The batch returned by sp_loader_next
 * stays valid until the next call to sp_loader_next / set_epoch / reset_epoch / free.
 * Results are bitwise identical to sp_loader_new_sync, whatever the timing. NULL with
 * the reason in sp_last_error() for a NULL dataset, batch < 1, a dataset without samples
 * or of samples outside 1 to 3 dimensions, drop_last with no full batch, or a thread that
 * cannot start. */
sp_loader *sp_loader_new(sp_dataset *d, int batch, bool shuffle, uint64_t seed, bool drop_last) SP_MUST_CHECK;
/* The same batches, assembled in the calling thread (no prefetch). */
sp_loader *sp_loader_new_sync(sp_dataset *d, int batch, bool shuffle, uint64_t seed, bool drop_last) SP_MUST_CHECK;
/* As sp_loader_new, but position p of each batch is read from the dataset only as
 * need[p] says (need: `batch` flags, copied): SP_LOADER_X the sample (and its label),
 * SP_LOADER_Y its label alone (sp_dataset_label), 0 nothing — what is not read stays
 * zero (label 0). One rank of a parallel run reads only its own micro-batches' rows this
 * way, in the same global order as every other rank, so what it reads is what
 * sp_loader_new would give at those positions. need NULL: every row. */
enum { SP_LOADER_X = 1, SP_LOADER_Y = 2 };
sp_loader *sp_loader_new_rows(sp_dataset *d, int batch, bool shuffle, uint64_t seed, bool drop_last,
                              const unsigned char *need) SP_MUST_CHECK;
/* The same batches, assembled in the calling thread (no prefetch): the runner's choice
 * when no core is spare (sp_parallel_spare_core), where a prefetch thread would share a
 * core with a pool thread (LeNet-5 b64 on 2 cores and 2 threads: 9% more images/s). */
sp_loader *sp_loader_new_rows_sync(sp_dataset *d, int batch, bool shuffle, uint64_t seed, bool drop_last,
                                   const unsigned char *need) SP_MUST_CHECK;
/* Samples whose input was read from the dataset so far (prefetched batches included),
 * labels read alone, and the bytes delivered: samples × (sample floats × 4 + 4) + labels
 * alone × 4. */
/* ORs into keep[0..d->n) (as sp_dataset_read_rows takes it) the rows that the loader
 * sp_loader_new_rows(d, batch, shuffle, seed, drop_last, need) reads over its first
 * `batches` batches — epoch 0 from its first batch on, then epoch 1, ... (a resumed run
 * skips batches by reading them) — and those its prefetch thread may assemble beyond
 * them: the rows one rank will ever read. SP_ERR as sp_loader_new_rows refuses, or for
 * batches < 0 or keep NULL. */
int sp_loader_rows(sp_dataset *d, int batch, bool shuffle, uint64_t seed, bool drop_last,
                   const unsigned char *need, long batches, unsigned char *keep) SP_MUST_CHECK;
/* What the loader has read so far: samples, labels alone, and their bytes; -1 (SP_ERR)
 * for a NULL l. */
long sp_loader_samples_read(const sp_loader *l);
long sp_loader_labels_read(const sp_loader *l);
double sp_loader_bytes_read(const sp_loader *l);
/* The next batch of the current epoch; false at its end (then start another epoch). */
bool sp_loader_next(sp_loader *l, sp_batch *out);
/* Start epoch `epoch` from its first batch (a no-op if it is the current epoch and no
 * batch of it was taken yet). Epoch 0 is current after sp_loader_new. */
int sp_loader_set_epoch(sp_loader *l, int epoch);
/* Start the next epoch: sp_loader_set_epoch(l, current + 1). */
int sp_loader_reset_epoch(sp_loader *l);
int sp_loader_epoch(const sp_loader *l);
int sp_loader_nbatches(const sp_loader *l);
/* The size of a full batch as run: the batch size, or the dataset's size if smaller. */
int sp_loader_batch(const sp_loader *l);
void sp_loader_free(sp_loader *l);

#ifdef __cplusplus
}
#endif

#endif
