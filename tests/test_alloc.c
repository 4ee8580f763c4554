/* test_alloc.c — no heap allocation in steady state (issue 19, item 15).
 *
 * The training loop's memory must not grow by fragmentation: every per-step tensor comes
 * from the tape's arena (mapped blocks, reused after the first steps), and evaluations
 * reuse one tape and one loader for the whole run. This suite counts every call into the
 * C allocator (malloc, calloc, realloc, posix_memalign, aligned_alloc, memalign) by
 * interposing them in the test binary and forwarding to glibc's __libc_* entry points;
 * OpenBLAS's and the thread pool's calls are counted too.
 *
 * Sanitizer builds (make test-asan) own the allocator: the interposition is compiled out
 * there and the tests only check that they run. */
#include <cblas.h>
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "layers/zoo.h"
#include "core/error.h"
#include "core/kernels/dense.h"
#include "core/kernels/dnnl.h"
#include "schedulers/backward/engine.h"
#include "core/model.h"
#include "core/threads.h"
#include "data/data.h"
#include "optim/optim.h"
#include "train/train.h"

#if defined(__SANITIZE_ADDRESS__)
#define COUNTING 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define COUNTING 0
#endif
#endif
#ifndef COUNTING
#define COUNTING 1
#endif

static atomic_long allocs;

#if COUNTING
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

void *malloc(size_t n)
{
    atomic_fetch_add_explicit(&allocs, 1, memory_order_relaxed);
    return __libc_malloc(n);
}
void *calloc(size_t n, size_t k)
{
    atomic_fetch_add_explicit(&allocs, 1, memory_order_relaxed);
    return __libc_calloc(n, k);
}
void *realloc(void *p, size_t n)
{
    atomic_fetch_add_explicit(&allocs, 1, memory_order_relaxed);
    return __libc_realloc(p, n);
}
void *memalign(size_t align, size_t n)
{
    atomic_fetch_add_explicit(&allocs, 1, memory_order_relaxed);
    return __libc_memalign(align, n);
}
void *aligned_alloc(size_t align, size_t n)
{
    atomic_fetch_add_explicit(&allocs, 1, memory_order_relaxed);
    return __libc_memalign(align, n);
}
int posix_memalign(void **out, size_t align, size_t n)
{
    atomic_fetch_add_explicit(&allocs, 1, memory_order_relaxed);
    void *p = __libc_memalign(align, n);
    if (!p) return 12;   /* ENOMEM */
    *out = p;
    return 0;
}
#endif

static long count(void) { return atomic_load(&allocs); }

#ifdef SP_HAVE_DNNL
#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>

/* dnnl_memory_create, counted: core/kernels/dnnl.c makes its memory objects with each cache
 * entry and rebinds them per call, so a steady-state step creates none. */
static atomic_long dnnl_mems;
typedef dnnl_status_t (*memory_create_fn)(dnnl_memory_t *, const dnnl_memory_desc_t *, dnnl_engine_t, void *);
dnnl_status_t dnnl_memory_create(dnnl_memory_t *m, const dnnl_memory_desc_t *md, dnnl_engine_t e, void *h)
{
    static memory_create_fn real;
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "dnnl_memory_create");
    atomic_fetch_add_explicit(&dnnl_mems, 1, memory_order_relaxed);
    return real(m, md, e, h);
}
#endif

/* The counter sees the allocator at all (so a zero below means something). */
Test(alloc, the_counter_counts)
{
    long before = count();
    void *volatile p = malloc(100);
    free(p);
    if (COUNTING) cr_assert_eq(count() - before, 1);
}

static void steady_state(const char *engine, sp_model *m, const sp_tensor *x, const int *y)
{
    sp_engine *e = sp_engine_create(engine, NULL);   /* the full scan, the ooo order */
    sp_optim_cfg cfg = sp_optim_cfg_default();
    cfg.lr = 0.01;
    cfg.momentum = 0.9f;
    sp_optim *o = sp_optim_create("sgd", m->params, m->nparams, &cfg);
    sp_tape t;
    sp_tape_init(&t);
    for (int s = 0; s < 3; s++) sp_train_step(m, e, o, &t, x, y, NULL, NULL, NULL);   /* warm-up */
    long before = count();
    for (int s = 0; s < 5; s++) sp_train_step(m, e, o, &t, x, y, NULL, NULL, NULL);
    long n = count() - before;
    cr_assert_eq(n, 0, "%s %s: %ld heap allocations in 5 steady-state steps", m->name, engine, n);
    sp_tape_free(&t);
    sp_optim_free(o);
    sp_engine_destroy(e);
}

/* The im2col/GEMM convolution path. On the oneDNN path (core/kernels/dnnl.c, the default when
 * built with oneDNN) scanprop's own code allocates nothing per step either (its memory
 * objects are cached, see oneDNN_steps_create_no_memory_objects), but oneDNN itself
 * does: dnnl_primitive_execute builds its argument map on the heap (~2 allocations per
 * execution) and dnnl_sgemm takes a packing buffer per call, ~165 allocator calls per
 * LeNet b64 step in all, the same sizes every step. */
Test(alloc, training_steps_do_not_allocate)
{
    sp_set_threads(2);
    bool was = sp_dnnl_conv_on();
    sp_dnnl_conv_set(false);
    sp_model *m = sp_zoo_lenet(1, 28);
    sp_model_init(m, 1);
    sp_tensor x = sp_tensor_new(4, (int[]){8, 1, 28, 28});
    for (size_t i = 0; i < x.numel; i++) x.data[i] = (float)((i * 2654435761u) % 1000) / 1000.0f;
    int y[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const char *engines[] = {"linear", "bppsa", "ooo"};
    for (int i = 0; i < 3; i++) steady_state(engines[i], m, &x, y);
    sp_dnnl_conv_set(was);
    sp_tensor_free(&x);
    sp_model_free(m);
}

/* sp_gemm_serial on the GEMM path allocates nothing once warm, on every OpenBLAS core,
 * and gives OpenBLAS's own bits: on SkylakeX and Cooperlake (OPENBLAS_CORETYPE, the
 * cores OpenBLAS picks on AVX-512 CPUs) its small-matrix kernel mallocs per call for an
 * A·B whose N leaves 1 to 8 columns past a multiple of 16 (K ≥ 32, M·N·K ≤ 10⁶), which
 * core/kernels/dense.c computes another way; .ci/run runs this under every core. */
Test(alloc, gemm_shapes_do_not_allocate)
{
    sp_set_threads(2);   /* also holds OpenBLAS to one thread: its threaded path allocates */
    bool was = sp_dnnl_conv_on();
    sp_dnnl_conv_set(false);   /* OpenBLAS for every size */
    static const int sizes[] = {1, 3, 8, 9, 16, 17, 24, 31, 32, 33, 40, 57, 84, 100, 150, 200};
    enum { NS = sizeof sizes / sizeof sizes[0], MAXD = 210 };
    float *A = sp_xmalloc(sizeof(float) * MAXD * MAXD), *B = sp_xmalloc(sizeof(float) * MAXD * MAXD);
    float *C = sp_xmalloc(sizeof(float) * MAXD * MAXD), *R = sp_xmalloc(sizeof(float) * MAXD * MAXD);
    for (int i = 0; i < MAXD * MAXD; i++) {
        A[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
        B[i] = (float)((i * 40503u + 7) % 997) / 997.0f - 0.5f;
    }
    long shapes = 0, allocating = 0;
    for (int pass = 0; pass < 2; pass++)   /* pass 0 warms the scratch, pass 1 counts */
        for (int t = 0; t < 4; t++)
            for (int a = 0; a < NS; a++)
                for (int b = 0; b < NS; b++)
                    for (int c = 0; c < NS; c++) {
                        bool ta = t & 1, tb = t >> 1;
                        int M = sizes[a], N = sizes[b], K = sizes[c], ldc = N + 3;
                        int lda = (ta ? M : K) + 1, ldb = (tb ? K : N) + 2;
                        float alpha = (a + b) % 2 ? 1.0f : 0.75f, beta = c % 2 ? 0.0f : 0.5f;
                        for (int i = 0; i < M * ldc; i++) C[i] = R[i] = (float)(i % 13) / 13.0f;
                        long before = count();
                        sp_gemm_serial(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
                        long n = count() - before;
                        if (pass == 0) continue;
                        shapes++;
                        if (n) {
                            if (!allocating++)
                                cr_log_error("ta %d tb %d M %d N %d K %d: %ld heap allocations", ta, tb, M, N, K, n);
                        }
                        /* dense.c's beta = 0: C cleared, then accumulated (beta = 1) */
                        if (beta == 0.0f)
                            for (int i = 0; i < M; i++) memset(R + (size_t)i * ldc, 0, sizeof(float) * N);
                        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                                    M, N, K, alpha, A, lda, B, ldb, beta == 0.0f ? 1.0f : beta, R, ldc);
                        for (int i = 0; i < M; i++)
                            cr_assert(!memcmp(C + (size_t)i * ldc, R + (size_t)i * ldc, sizeof(float) * N),
                                      "ta %d tb %d M %d N %d K %d: row %d differs from OpenBLAS's own call (core %s)",
                                      ta, tb, M, N, K, i, openblas_get_corename());
                    }
    if (COUNTING)
        cr_assert_eq(allocating, 0, "%ld of %ld GEMM shapes allocate per call (OpenBLAS core %s)", allocating, shapes,
                     openblas_get_corename());
    free(A);
    free(B);
    free(C);
    free(R);
    sp_dnnl_conv_set(was);
}

/* Heap allocations of a whole sp_train run with an evaluation after every epoch. */
static long train_allocs(int epochs)
{
    sp_dataset *train = sp_bitstream(64, 12, 3), *test = sp_bitstream(200, 12, 4);
    sp_model *m = sp_zoo_rnn(1, 8, train->nclasses);
    sp_model_init(m, 2);
    sp_engine *e = sp_engine_create("linear", NULL);
    sp_optim_cfg cfg = sp_optim_cfg_default();
    cfg.lr = 0.01;
    sp_optim *o = sp_optim_create("adam", m->params, m->nparams, &cfg);
    sp_loader *l = sp_loader_new_sync(train, 16, true, 5, false);
    sp_train_cfg tc = {.app = "test", .epochs = epochs, .eval_batch = 32, .quiet = true};
    long before = count();
    sp_train_result r = sp_train(m, e, o, l, test, &tc);
    long n = count() - before;
    cr_assert_eq(r.epochs, epochs);
    sp_loader_free(l);
    sp_optim_free(o);
    sp_engine_destroy(e);
    sp_model_free(m);
    sp_dataset_free(train);
    sp_dataset_free(test);
    return n;
}

/* With oneDNN on, dnnl_sgemm takes a packing buffer per call (posix_memalign) for the
 * larger products: the same sizes at every call, so glibc reuses them, but they are
 * allocator calls; this test checks scanprop's own paths, on the GEMM path. */
Test(alloc, epochs_and_evaluations_do_not_allocate)
{
    sp_set_threads(2);
    bool was = sp_dnnl_conv_on();
    sp_dnnl_conv_set(false);
    (void)train_allocs(1);   /* one-time initialisation (libraries, caches) out of the way */
    long two = train_allocs(2), ten = train_allocs(10);
    sp_dnnl_conv_set(was);
    cr_assert_eq(ten, two, "10 epochs made %ld heap allocations, 2 epochs %ld: each epoch or evaluation allocates",
                 ten, two);
}

/* The oneDNN convolution path creates its dnnl_memory objects with its primitives in
 * the first step (threads + 1 sets each), then rebinds them: none in later steps. */
Test(alloc, oneDNN_steps_create_no_memory_objects)
{
#ifdef SP_HAVE_DNNL
    sp_set_threads(2);
    bool was = sp_dnnl_conv_on();
    cr_assert(sp_dnnl_conv_set(true));
    sp_model *m = sp_zoo_lenet(1, 28);
    sp_model_init(m, 1);
    sp_tensor x = sp_tensor_new(4, (int[]){8, 1, 28, 28});
    for (size_t i = 0; i < x.numel; i++) x.data[i] = (float)((i * 2654435761u) % 1000) / 1000.0f;
    int y[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    sp_engine *e = sp_engine_create("linear", NULL);
    sp_optim_cfg cfg = sp_optim_cfg_default();
    cfg.lr = 0.01;
    sp_optim *o = sp_optim_create("sgd", m->params, m->nparams, &cfg);
    sp_tape t;
    sp_tape_init(&t);
    long first = atomic_load(&dnnl_mems);
    sp_train_step(m, e, o, &t, &x, y, NULL, NULL, NULL);
    long warm = atomic_load(&dnnl_mems);
    cr_assert_gt(warm - first, 0, "the first step made no oneDNN memory object: is conv2 on oneDNN?");
    for (int s = 0; s < 5; s++) sp_train_step(m, e, o, &t, &x, y, NULL, NULL, NULL);
    long n = atomic_load(&dnnl_mems) - warm;
    cr_assert_eq(n, 0, "5 steady-state steps created %ld oneDNN memory objects (the first step %ld)", n,
                 warm - first);
    sp_tape_free(&t);
    sp_optim_free(o);
    sp_engine_destroy(e);
    sp_dnnl_conv_set(was);
    sp_tensor_free(&x);
    sp_model_free(m);
#endif
}
