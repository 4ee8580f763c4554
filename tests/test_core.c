/* test_core.c — arena, tape, RNG, thread pool, error paths, the gradient checker itself. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include "core/arena.h"
#include "core/device.h"
#include "core/error.h"
#include "core/kernels/gemm_small.h"
#include "core/model.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "core/tape.h"
#include "layers/zoo.h"
#include "layers/layers.h"
#include "core/io/model_io.h"
#include "core/io/safetensors.h"
#include "data/data.h"
#include "schedulers/backward/engine.h"
#include "schedulers/train/train.h"
#include "tests/testutil.h"

Test(arena, alignment_and_growth)
{
    sp_arena a;
    sp_arena_init(&a, 0);
    for (int i = 1; i < 200; i++) {
        void *p = sp_arena_alloc(&a, (size_t)i * 1000);
        cr_assert_eq((uintptr_t)p % 64, 0, "allocation %d not 64-byte aligned", i);
        memset(p, 0xab, (size_t)i * 1000);
    }
    cr_assert_gt(a.nmallocs, 1);
    sp_arena_free(&a);
}

Test(arena, steady_state_does_not_malloc)
{
    sp_arena a;
    sp_arena_init(&a, 0);
    for (int step = 0; step < 50; step++) {
        for (int i = 0; i < 30; i++) sp_arena_alloc(&a, 300000);
        if (step == 1) a.nmallocs = 0;   /* after the first reset the arena has its size */
        sp_arena_reset(&a);
    }
    cr_assert_eq(a.nmallocs, 0, "steady-state steps allocated %zu blocks", a.nmallocs);
    sp_arena_free(&a);
}

/* mark/release hands scratch back: the next request reuses it, blocks opened after the
 * mark are returned, high_water is the live peak and steady steps open no block. */
Test(arena, release_reuses_scratch)
{
    sp_arena a;
    sp_arena_init(&a, 0);
    for (int step = 0; step < 4; step++) {
        void *keep = sp_arena_alloc(&a, 100000);
        memset(keep, 1, 100000);
        size_t live = a.used_total;
        void *first = NULL;
        for (int node = 0; node < 10; node++) {
            sp_arena_mark m = sp_arena_mark_get(&a);
            void *p = sp_arena_alloc(&a, 3u << 20);   /* more than the first block holds */
            memset(p, 2, 3u << 20);
            if (node == 0) first = p;
            if (step > 0) cr_assert_eq(p, first, "step %d node %d: the released scratch was not reused", step, node);
            sp_arena_release(&a, m);
            cr_assert_eq(a.used_total, live);
        }
        cr_assert_eq(((unsigned char *)keep)[99999], 1, "release touched memory allocated before the mark");
        cr_assert_lt(a.high_water, live + (3u << 20) + 4096, "high water %zu counts released scratch", a.high_water);
        if (step == 1) a.nmallocs = 0;
        sp_arena_reset(&a);
    }
    cr_assert_eq(a.nmallocs, 0, "steady-state steps opened %zu blocks", a.nmallocs);
    sp_arena_free(&a);
}

Test(rng, seeded_and_uniform)
{
    sp_rng a, b;
    sp_rng_seed(&a, 42);
    sp_rng_seed(&b, 42);
    double sum = 0;
    for (int i = 0; i < 100000; i++) {
        float u = sp_rng_uniform(&a);
        cr_assert_eq(u, sp_rng_uniform(&b));
        cr_assert(u >= 0.0f && u < 1.0f);
        sum += u;
    }
    cr_assert_float_eq(sum / 100000, 0.5, 0.01);
    sp_rng_seed(&b, 43);
    cr_assert_neq(sp_rng_u32(&a), sp_rng_u32(&b));
}

Test(rng, normal_moments)
{
    sp_rng r;
    sp_rng_seed(&r, 7);
    double s = 0, s2 = 0;
    int n = 200000;
    for (int i = 0; i < n; i++) {
        double v = sp_rng_normal(&r);
        s += v;
        s2 += v * v;
    }
    cr_assert_float_eq(s / n, 0.0, 0.01);
    cr_assert_float_eq(s2 / n, 1.0, 0.02);
}

static void add_range(void *ctx, size_t b, size_t e)
{
    int *v = ctx;
    for (size_t i = b; i < e; i++) v[i] += (int)i;
}

Test(parallel, covers_every_index_once)
{
    sp_set_threads(3);
    int v[1001] = {0};
    sp_parallel_for(1001, add_range, v);
    for (int i = 0; i < 1001; i++) cr_assert_eq(v[i], i);
    sp_set_threads(1);
    sp_parallel_for(1001, add_range, v);
    for (int i = 0; i < 1001; i++) cr_assert_eq(v[i], 2 * i);
}

Test(tape, reuse_across_steps_keeps_arena_size)
{
    sp_model *m = sp_model_new("mlp");
    sp_model_set_loss(m, sp_softmax_ce());
    sp_model_add(m, sp_linear("fc1", 8, 16));
    sp_model_add(m, sp_relu());
    sp_model_add(m, sp_linear("fc2", 16, 3));
    sp_model_init(m, 1);
    float xs[4 * 8];
    int ys[4] = {0, 1, 2, 1};
    tu_fill_uniform(xs, 32, 3, -1, 1);
    sp_tensor x = sp_tensor_2d(xs, 4, 8);
    sp_tape t;
    sp_tape_init(&t);
    float first = 0;
    size_t mallocs_after_warmup = 0;
    for (int step = 0; step < 100; step++) {
        sp_node *loss = sp_model_loss(m, &t, &x, ys);
        if (step == 0) first = loss->out.data[0];
        cr_assert_eq(loss->out.data[0], first, "same input, same loss at step %d", step);
        cr_assert_eq(t.n, 5);
        if (step == 2) mallocs_after_warmup = t.arena.nmallocs;
        sp_tape_reset(&t);
    }
    cr_assert_eq(t.arena.nmallocs, mallocs_after_warmup);
    sp_tape_free(&t);
    sp_model_free(m);
}

Test(tape, shape_only_records_without_running)
{
    sp_model *m = sp_model_new("mlp");
    sp_model_set_loss(m, sp_softmax_ce());
    sp_model_add(m, sp_linear("fc1", 8, 16));
    sp_model_add(m, sp_relu());
    sp_tape t;
    sp_tape_init(&t);
    t.shape_only = true;
    sp_tensor x = sp_tensor_2d(NULL, 32, 8);
    sp_node *y = sp_model_forward(m, &t, sp_tape_input(&t, &x));
    cr_assert_eq(y->out.shape[0], 32);
    cr_assert_eq(y->out.shape[1], 16);
    cr_assert_null(y->out.data);
    sp_cost c = t.nodes[1]->op->cost(t.nodes[1]);
    cr_assert_float_eq(c.fwd_flops, 2.0 * 32 * 8 * 16, 1e-9);
    sp_tape_free(&t);
    sp_model_free(m);
}

Test(model, registry_has_pytorch_names)
{
    sp_model *m = sp_model_new("mlp");
    sp_model_set_loss(m, sp_softmax_ce());
    sp_model_add(m, sp_linear("fc1", 8, 16));
    sp_model_add(m, sp_linear("fc2", 16, 3));
    cr_assert_eq(m->nparams, 4);
    cr_assert_not_null(sp_model_param(m, "fc1.weight"));
    cr_assert_not_null(sp_model_param(m, "fc2.bias"));
    cr_assert_eq(sp_model_param(m, "fc1.weight")->value.shape[0], 16, "linear weight is [out, in]");
    cr_assert_eq(sp_model_numel(m), (size_t)(8 * 16 + 16 + 16 * 3 + 3));
    sp_model_free(m);
}

static double sample_std(const sp_tensor *t, double *mean)
{
    double s = 0, s2 = 0;
    for (size_t i = 0; i < t->numel; i++) s += t->data[i], s2 += (double)t->data[i] * t->data[i];
    *mean = s / (double)t->numel;
    return sqrt(s2 / (double)t->numel - *mean * *mean);
}

/* VGG-11 uses torchvision's scheme (a model-level init); LeNet keeps the per-op
 * PyTorch defaults, kaiming_uniform(a = √5): U(±1/√fan_in). */
Test(model, vgg11_init_is_torchvisions_and_lenet_keeps_the_defaults)
{
    sp_model *m = sp_zoo_vgg11(3, 10);
    sp_model_init(m, 3);
    double mean, sd;
    sd = sample_std(&sp_model_param(m, "conv2.weight")->value, &mean);   /* fan_out = 128·9 */
    cr_assert_float_eq(sd, sqrt(2.0 / (128 * 9)), 0.03 * sqrt(2.0 / (128 * 9)), "conv2 std %g", sd);
    cr_assert_lt(fabs(mean), 0.05 * sd);
    sd = sample_std(&sp_model_param(m, "fc.weight")->value, &mean);
    cr_assert_float_eq(sd, 0.01, 0.001, "fc std %g", sd);
    const sp_tensor *b = &sp_model_param(m, "conv5.bias")->value;
    for (size_t i = 0; i < b->numel; i++) cr_assert_eq(b->data[i], 0.0f);
    sp_model_free(m);

    m = sp_zoo_lenet(1, 28);
    sp_model_init(m, 3);
    const sp_tensor *w = &sp_model_param(m, "conv2.weight")->value;   /* fan_in = 6·25 */
    float bound = 1.0f / sqrtf(150.0f), mx = 0;
    for (size_t i = 0; i < w->numel; i++) mx = fmaxf(mx, fabsf(w->data[i]));
    cr_assert_leq(mx, bound);
    cr_assert_gt(mx, 0.95f * bound);
    sp_model_free(m);
}

/* Error paths: a user mistake is one line and exit status 2. */
static void bad_linear_shape(void)
{
    sp_model *m = sp_model_new("bad");
    sp_model_add(m, sp_linear("fc1", 8, 4));
    float xs[2 * 7] = {0};
    sp_tensor x = sp_tensor_2d(xs, 2, 7);
    sp_tape t;
    sp_tape_init(&t);
    sp_model_forward(m, &t, sp_tape_input(&t, &x));
}
Test(errors, shape_mismatch_exits_2, .exit_code = 2, .init = tu_capture_stderr) { bad_linear_shape(); }

Test(errors, label_out_of_range_exits_2, .exit_code = 2, .init = tu_capture_stderr)
{
    sp_model *m = sp_model_new("bad");
    sp_model_set_loss(m, sp_softmax_ce());
    sp_model_add(m, sp_linear("fc1", 4, 3));
    sp_model_init(m, 1);
    float xs[8] = {0};
    int ys[2] = {0, 3};
    sp_tensor x = sp_tensor_2d(xs, 2, 4);
    sp_tape t;
    sp_tape_init(&t);
    sp_model_loss(m, &t, &x, ys);
}

Test(errors, duplicate_param_name_exits_2, .exit_code = 2, .init = tu_capture_stderr)
{
    sp_model *m = sp_model_new("bad");
    sp_model_add(m, sp_linear("fc", 4, 3));
    sp_model_add(m, sp_linear("fc", 3, 3));
}

/* The model's loss is its builder's choice (core/model.c names no op). */
Test(errors, model_without_a_loss_exits_2, .exit_code = 2, .init = tu_capture_stderr)
{
    tu_expect_error("model 'noloss': no loss");
    sp_model *m = sp_model_new("noloss");
    sp_model_add(m, sp_linear("fc1", 4, 3));
    sp_model_init(m, 1);
    float xs[8] = {0};
    int ys[2] = {0, 2};
    sp_tensor x = sp_tensor_2d(xs, 2, 4);
    sp_tape t;
    sp_tape_init(&t);
    sp_model_loss(m, &t, &x, ys);
}

Test(model, set_loss_owns_and_replaces_the_loss)
{
    sp_model *m = sp_model_new("m");
    cr_assert_null(m->loss, "a new model has no loss");
    sp_model_set_loss(m, sp_softmax_ce());
    sp_layer *second = sp_softmax_ce();
    sp_model_set_loss(m, second);   /* frees the first (the ASan suites see a leak otherwise) */
    cr_assert_eq(m->loss, second);
    sp_model_add(m, sp_linear("fc1", 4, 3));   /* not initialised: zero weights and bias */
    float xs[8] = {0};
    int ys[2] = {0, 2};
    sp_tensor x = sp_tensor_2d(xs, 2, 4);
    sp_tape t;
    sp_tape_init(&t);
    sp_node *l = sp_model_loss(m, &t, &x, ys);
    cr_assert(l->layer == second && l->op == &sp_op_softmax_ce);
    cr_assert_float_eq(l->out.data[0], logf(3.0f), 1e-6, "zero logits over 3 classes: loss ln 3");
    sp_tape_free(&t);
    sp_model_free(m);
}

/* ---- the op interface (core/op.h): what an op is, and its kernels per device ---- */

static void sq_infer(sp_node *n, const sp_tensor *x) { n->out = sp_tensor_view(NULL, x->ndim, x->shape); }
static void sq_forward(sp_node *n)
{
    for (size_t i = 0; i < n->out.numel; i++) n->out.data[i] = sp_node_x(n)->data[i] * sp_node_x(n)->data[i];
}
static void sq_other_forward(sp_node *n) { cr_assert_fail("a device's kernel ran on the CPU"); }

/* An op defined as before the split into sp_opdef and sp_kernels: CPU kernels named
 * directly (docs/WRITING_MODELS.md's form). They are the op's CPU table. */
static const sp_opdef op_square = {.name = "square", .infer = sq_infer, .forward = sq_forward};

Test(op, kernels_named_in_the_opdef_are_its_cpu_table)
{
    cr_assert_eq(op_square.cpu.forward, sq_forward);
    cr_assert_eq(sp_op_kernels(&op_square, SP_CPU), &op_square.cpu);
    static sp_kernels other = {.forward = sq_other_forward};
    sp_op_register_kernels(&op_square, SP_CUDA, &other);   /* another device's: not used here */
    sp_layer l = {.op = &op_square};
    float xs[3] = {1, -2, 3};
    sp_tensor x = sp_tensor_2d(xs, 1, 3);
    sp_tape t;
    sp_tape_init(&t);
    sp_node *y = sp_apply(&t, &l, sp_tape_input(&t, &x));
    cr_assert(y->op == &op_square && y->kern == &op_square.cpu, "a host tensor takes the CPU kernels");
    cr_assert_float_eq(y->out.data[1], 4.0f, 0.0f);
    sp_tape_free(&t);
}

Test(op, device_kernels_are_registered_per_op_and_device)
{
    static sp_kernels a = {.forward = sq_other_forward}, b = {.forward = sq_other_forward};
    sp_op_register_kernels(&op_square, SP_CUDA, &a);
    cr_assert_eq(sp_op_kernels(&op_square, SP_CUDA), &a);
    sp_op_register_kernels(&op_square, SP_CUDA, &b);   /* a second registration replaces */
    cr_assert_eq(sp_op_kernels(&op_square, SP_CUDA), &b);
    cr_assert_eq(sp_op_kernels(&op_square, SP_CPU), &op_square.cpu);
}

Test(op, a_device_without_kernels_exits_2, .exit_code = 2, .init = tu_capture_stderr)
{
    tu_expect_error("op square: no cuda implementation");
    sp_op_kernels(&op_square, SP_CUDA);
}

/* The checker must be able to fail: a layer whose δ is deliberately off by 1%. */
static void wrong_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    sp_op_linear.backward_input(n, i, dy, dx);
    for (size_t i = 0; i < dx->numel; i++) dx->data[i] *= 1.01f;
}

Test(gradcheck, detects_a_wrong_gradient)
{
    sp_opdef broken = sp_op_linear;
    broken.backward_input = wrong_backward_input;
    sp_layer *l = sp_linear("fc", 7, 5);
    l->op = &broken;
    tu_gc_result r = tu_gradcheck(l, 2, (int[]){3, 7}, 11, NULL);
    cr_assert_gt(r.err_dx, 1e-3, "a 1%% error in δ went unnoticed (err %.2e)", r.err_dx);
    cr_assert_lt(r.err_param[0], 1e-3, "G is still right (err %.2e)", r.err_param[0]);
    l->op = &sp_op_linear;
    sp_layer_free(l);
}

/* ---- the small-product kernel (core/kernels/gemm_small.h) against a double-precision loop ---- */

static double ref_at(const float *X, int ld, bool trans, int r, int c)
{
    return trans ? X[(size_t)c * ld + r] : X[(size_t)r * ld + c];
}

/* One shape on the current variant: C inside [M×N] checked against Σ in double, the
 * guard columns and rows around it untouched, beta = 0 ignoring a NaN in C. */
static void check_small(bool ta, bool tb, int M, int N, int K, float alpha, float beta, sp_rng *r)
{
    int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 5;
    int arows = ta ? K : M, brows = tb ? N : K;
    float *A = malloc(sizeof(float) * (size_t)arows * lda), *B = malloc(sizeof(float) * (size_t)brows * ldb);
    float *C = malloc(sizeof(float) * (size_t)(M + 1) * ldc), *C0 = malloc(sizeof(float) * (size_t)(M + 1) * ldc);
    for (int i = 0; i < arows * lda; i++) A[i] = 2.0f * sp_rng_uniform(r) - 1.0f;
    for (int i = 0; i < brows * ldb; i++) B[i] = 2.0f * sp_rng_uniform(r) - 1.0f;
    for (int i = 0; i < (M + 1) * ldc; i++) C[i] = C0[i] = 2.0f * sp_rng_uniform(r) - 1.0f;
    if (beta == 0.0f) C[0] = C0[0] = NAN;
    cr_assert(sp_gemm_small(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), "%dx%dx%d refused", M, N, K);
    for (int i = 0; i <= M; i++)
        for (int j = 0; j < ldc; j++) {
            float got = C[(size_t)i * ldc + j];
            if (i == M || j >= N) {
                cr_assert(memcmp(&got, &C0[(size_t)i * ldc + j], sizeof got) == 0,
                          "%s ta%d tb%d %dx%dx%d: C[%d][%d] outside the product was written", sp_gemm_small_isa(), ta,
                          tb, M, N, K, i, j);
                continue;
            }
            double want = 0.0, mag = 0.0;
            for (int k = 0; k < K; k++) {
                double p = ref_at(A, lda, ta, i, k) * ref_at(B, ldb, tb, k, j);
                want += p;
                mag += fabs(p);
            }
            want *= alpha;
            if (beta != 0.0f) want += beta * (double)C0[(size_t)i * ldc + j];
            cr_assert(fabs(got - want) <= 1e-6 * (fabs(alpha) * mag + fabs(beta) + 1.0),
                      "%s ta%d tb%d %dx%dx%d alpha %g beta %g: C[%d][%d] = %.9g, want %.9g", sp_gemm_small_isa(), ta,
                      tb, M, N, K, alpha, beta, i, j, got, want);
        }
    free(A), free(B), free(C), free(C0);
}

Test(gemm_small, every_variant_matches_a_double_loop)
{
    static const char *isas[] = {"avx512", "avx2", "sse2"};
    static const int shapes[][3] = {{1, 1, 1},  {16, 20, 20}, {16, 60, 20}, {16, 20, 60}, {9, 17, 3},
                                    {7, 64, 5}, {3, 33, 64},  {20, 20, 80}, {13, 1, 31},  {5, 16, 16}};
    sp_rng r;
    sp_rng_seed(&r, 11);
    int ran = 0;
    for (size_t v = 0; v < sizeof isas / sizeof *isas; v++) {
        if (!sp_gemm_small_force(isas[v])) continue;
        ran++;
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (int t = 0; t < 4; t++) {
                check_small(t & 1, t & 2, shapes[s][0], shapes[s][1], shapes[s][2], 1.0f, 1.0f, &r);
                check_small(t & 1, t & 2, shapes[s][0], shapes[s][1], shapes[s][2], -0.5f, 0.0f, &r);
                check_small(t & 1, t & 2, shapes[s][0], shapes[s][1], shapes[s][2], 2.0f, 0.25f, &r);
            }
    }
    cr_assert_geq(ran, 1, "no variant of the small kernel ran");
    cr_assert(!sp_gemm_small_force("avx9000"), "an unknown variant was accepted");
}

Test(gemm_small, refuses_what_it_does_not_cover)
{
    float a[4] = {0}, c[4] = {0};
    cr_assert(!sp_gemm_small(false, false, 4, SP_GEMM_SMALL_MAX_N + 1, 1, 1.0f, a, 1, a, 1, 0.0f, c, 1));
    cr_assert(!sp_gemm_small(false, false, 64, 64, 64, 1.0f, a, 1, a, 1, 0.0f, c, 1));   /* > MAX_MACS */
    cr_assert(!sp_gemm_small(false, false, 0, 4, 4, 1.0f, a, 1, a, 1, 0.0f, c, 1));
}

/* ---- subnormals are flushed on the caller and in every pool thread ---- */

static volatile float g_tiny = 1e-39f;   /* subnormal: below FLT_MIN ≈ 1.18e-38 */

static void tiny_products(void *ctx, size_t begin, size_t end)
{
    float *out = ctx;
    for (size_t i = begin; i < end; i++) {
        volatile float x = g_tiny;
        out[i] = x * 1.0f + (sp_denormals_flushed() ? 0.0f : 1.0f);
    }
}

Test(parallel, subnormals_flush_to_zero_in_every_thread)
{
    volatile float before = g_tiny * 1.0f;
    cr_assert_neq(before, 0.0f, "subnormals already flushed before sp_set_threads: the test proves nothing");
    sp_set_threads(2);
    cr_assert(sp_denormals_flushed());
    enum { N = 4096 };
    float out[N];
    sp_parallel_for(N, tiny_products, out);
    for (int i = 0; i < N; i++) cr_assert_eq(out[i], 0.0f, "index %d: %g (a thread kept subnormals)", i, out[i]);
    volatile float small = 2e-38f;
    cr_assert_eq(small * 0.25f, 0.0f, "a subnormal result was not flushed to zero");
}

/* DNNL_MAX_CPU_ISA caps the small kernel as it caps oneDNN (the bench's AVX2 runs). */
Test(gemm_small, dnnl_max_cpu_isa_caps_the_variant)
{
    setenv("DNNL_MAX_CPU_ISA", "AVX2", 1);
    const char *isa = sp_gemm_small_isa();   /* first use in this test's process */
#if defined(__x86_64__)
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    cr_assert_str_eq(isa, avx2 ? "avx2" : "sse2", "DNNL_MAX_CPU_ISA=AVX2 ran %s", isa);
#else
    cr_assert_str_eq(isa, "sse2");
#endif
}

/* ---- help between inline threads (core/parallel.h) ---- */

typedef struct help_rec {
    _Atomic int owner_started;
    pthread_t who[2];
    size_t b[2], e[2];
    _Atomic int nran;
} help_rec;

static void help_chunk(void *ctx, size_t begin, size_t end)
{
    help_rec *r = ctx;
    int k = begin == 0 ? 0 : 1;
    r->who[k] = pthread_self();
    r->b[k] = begin;
    r->e[k] = end;
    if (k == 0) {   /* the owner's first chunk: long enough for the helper to take the second */
        atomic_store(&r->owner_started, 1);
        for (int i = 0; i < 2000 && atomic_load(&r->nran) == 0; i++) usleep(500);
    }
    atomic_fetch_add(&r->nran, 1);
}

static void no_op_notify(void *ctx) { (void)ctx; }

static void *inline_owner(void *arg)
{
    sp_parallel_set_inline(true);
    sp_parallel_for(101, help_chunk, arg);
    return NULL;
}

Test(parallel, an_idle_thread_runs_the_pools_chunks_of_an_inline_loop)
{
    sp_set_threads(2);
    sp_parallel_set_help_notify(no_op_notify, NULL);
    help_rec r = {0};
    pthread_t owner;
    cr_assert_eq(pthread_create(&owner, NULL, inline_owner, &r), 0);
    while (!atomic_load(&r.owner_started)) sched_yield();
    bool helped = false;
    for (int i = 0; i < 100000 && !helped; i++) helped = sp_parallel_help();
    pthread_join(owner, NULL);
    cr_assert(helped, "the offered chunk was never taken");
    cr_assert_eq(atomic_load(&r.nran), 2, "chunks run: %d", atomic_load(&r.nran));
    cr_assert(pthread_equal(r.who[0], owner) && pthread_equal(r.who[1], pthread_self()), "who ran which chunk");
    /* the pool's split of 101 over 2 threads */
    cr_assert(r.b[0] == 0 && r.e[0] == 50 && r.b[1] == 50 && r.e[1] == 101, "chunks [%zu,%zu) [%zu,%zu)", r.b[0], r.e[0],
              r.b[1], r.e[1]);
    cr_assert(!sp_parallel_help_open());
    sp_parallel_set_help_notify(NULL, NULL);
}

/* Public entry points given NULL or a negative count return an error naming the
 * argument (they crashed, or sp_st_write(p, -1, NULL, NULL) returned SP_OK). */
Test(api, null_arguments_are_errors_naming_them)
{
    char path[512];
    snprintf(path, sizeof path, "%s/null.safetensors", tu_tmpdir());
    sp_model *m = sp_zoo_model("mlp");
    cr_assert_eq(sp_model_load(NULL, path), SP_ERR);
    cr_assert(strstr(sp_last_error(), "sp_model_load: the model is NULL"), "%s", sp_last_error());
    cr_assert_eq(sp_model_load(m, NULL), SP_ERR);
    cr_assert(strstr(sp_last_error(), "the path is NULL"), "%s", sp_last_error());
    cr_assert_null(sp_st_open(NULL));
    cr_assert(strstr(sp_last_error(), "sp_st_open: the path is NULL"), "%s", sp_last_error());
    cr_assert_eq(sp_st_read_f32(NULL, "x", (float[1]){0}, 1, (int[]){1}), SP_ERR);
    cr_assert(strstr(sp_last_error(), "sp_st_read_f32: the file is NULL"), "%s", sp_last_error());
    cr_assert_eq(sp_st_write(path, -1, NULL, NULL), SP_ERR, "a negative count was written");
    cr_assert(strstr(sp_last_error(), "-1 tensors (expected >= 0)"), "%s", sp_last_error());
    cr_assert_eq(sp_st_write(path, 2, NULL, NULL), SP_ERR);
    const char *names[1] = {"w"};
    const sp_tensor *tensors[1] = {NULL};
    cr_assert_eq(sp_st_save(path, 1, names, tensors, NULL), SP_ERR);
    cr_assert(strstr(sp_last_error(), "tensor 0 is NULL"), "%s", sp_last_error());
    cr_assert_null(sp_image_folder(NULL, 8, 1));
    cr_assert(strstr(sp_last_error(), "the root folder is NULL"), "%s", sp_last_error());
    cr_assert_null(sp_loader_new(NULL, 4, false, 1, false));
    cr_assert(strstr(sp_last_error(), "sp_loader_new: the dataset is NULL"), "%s", sp_last_error());
    cr_assert_null(sp_model_add(m, NULL));
    cr_assert(strstr(sp_last_error(), "sp_model_add: the layer is NULL"), "%s", sp_last_error());
    sp_train_result r = sp_train(m, NULL, NULL, NULL, NULL, NULL);
    cr_assert_eq(r.status, SP_ERR);
    cr_assert(strstr(sp_last_error(), "sp_train: the engine is NULL"), "%s", sp_last_error());
    sp_model_free(m);
}

Test(api, backward_with_a_null_tape_is_one_line, .exit_code = 2, .init = tu_capture_stderr)
{
    sp_backward(NULL, NULL, NULL);   /* nothing allocated: exits 2 with one line, no crash */
}
