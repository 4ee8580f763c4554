/* test_core.c — arena, tape, RNG, thread pool, error paths, the gradient checker itself. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <sys/wait.h>
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
#include "core/guard.h"
#include "core/kernels/gemm_small.h"
#include "core/model.h"
#include "core/threads.h"
#include "core/rng.h"
#include "core/tape.h"
#include "layers/zoo.h"
#include "layers/layers.h"
#include "core/io/model_io.h"
#include "core/io/safetensors.h"
#include "data/data.h"
#include "schedulers/backward/engine.h"
#include "train/train.h"
#include "tests/testutil.h"
#include "core/io/fileio.h"
#include "scanprop.h"

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

/* Error paths: a user mistake in a step is a status naming it (the apps turn it into one
 * line and exit status 2), and the tape is left as it was before the refused op. */
/* The ranks compare the contents of the files they read: the recording lists inputs, not
 * what the machine says of itself (/proc/meminfo differs between two ranks at any time). */
Test(fileio, recording_lists_inputs_not_the_machines_own_files)
{
    char path[] = "/tmp/scanprop-rec-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, "x", 1), 1);
    close(fd);
    sp_open_record(true);
    FILE *a = sp_open_read("/proc/meminfo", "meminfo"), *b = sp_open_read(path, "input");
    sp_open_record(false);
    cr_assert(a && b, "%s", sp_last_error());
    fclose(a);
    fclose(b);
    const char *const *paths;
    int n = sp_opened_files(&paths);
    cr_assert_eq(n, 1, "recorded %d files (expected the input alone)", n);
    cr_assert_str_eq(paths[0], path);
    unlink(path);
}

Test(errors, shape_mismatch_is_a_status)
{
    sp_model *m = sp_model_new("bad");
    sp_model_add(m, sp_linear("fc1", 8, 4));
    float xs[2 * 7] = {0};
    sp_tensor x = sp_tensor_2d(xs, 2, 7);
    sp_tape t;
    sp_tape_init(&t);
    sp_node *in = sp_tape_input(&t, &x);
    size_t used = t.arena.used_total;
    sp_clear_error();
    cr_assert_null(sp_model_forward(m, &t, in));
    cr_assert(strstr(sp_last_error(), "linear fc1: input [2, 7], expected [B, 8]"), "%s", sp_last_error());
    cr_assert_eq(t.n, 1, "the refused node stayed on the tape");
    cr_assert_eq(t.arena.used_total, used, "the refused node's arena bytes were kept");
    cr_assert_eq(in->nconsumers, 0, "the input was counted as read by the refused node");
    sp_tensor good = sp_tensor_2d(xs, 1, 8);   /* the tape goes on */
    sp_node *y = sp_model_forward(m, &t, sp_tape_input(&t, &good));
    cr_assert_not_null(y, "%s", sp_last_error());
    cr_assert_eq(y->index, 2);
    cr_assert_eq(y->out.shape[1], 4);
    sp_tape_free(&t);
    sp_model_free(m);
}

Test(errors, label_out_of_range_is_a_status)
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
    sp_clear_error();
    cr_assert_null(sp_model_loss(m, &t, &x, ys));
    cr_assert(strstr(sp_last_error(), "softmax_ce: label 3 of sample 1 out of range [0, 3)"), "%s", sp_last_error());
    cr_assert_eq(t.n, 2, "input and fc1 only: the refused loss node stayed on the tape");
    cr_assert_eq(t.nodes[1]->nconsumers, 0, "the logits were counted as read by the refused loss");
    sp_tape_free(&t);
    sp_model_free(m);
}

/* Inside sp_try the same mistake ends there, as before: the library's own callers in a
 * step rely on it. */
typedef struct tape_and_layer {
    sp_tape t;
    sp_layer *fc;
} tape_and_layer;
static void bad_linear_shape(void *arg)
{
    tape_and_layer *c = arg;
    float xs[2 * 7] = {0};
    sp_tensor x = sp_tensor_2d(xs, 2, 7);
    (void)sp_apply(&c->t, c->fc, sp_tape_input(&c->t, &x));
    cr_assert_fail("sp_apply returned inside sp_try");
}
Test(errors, shape_mismatch_inside_sp_try_ends_there)
{
    tape_and_layer c = {.fc = sp_linear("fc1", 8, 4)};
    sp_tape_init(&c.t);
    sp_clear_error();
    cr_assert_eq(sp_try(bad_linear_shape, &c), SP_ERR);
    cr_assert(strstr(sp_last_error(), "linear fc1: input [2, 7], expected [B, 8]"), "%s", sp_last_error());
    cr_assert_eq(c.t.n, 1, "the refused node stayed on the tape");
    sp_tape_free(&c.t);
    sp_layer_free(c.fc);
}

/* In an app (sp_guard_off: sp_flags_parse, sp_run_parse) a core call's refusal outside
 * sp_try is sp_fail: its one line and exit 2, so an app that ignores the status still
 * ends with it; inside sp_try it is still that sp_try's SP_ERR. In a child: the switch
 * is for the whole process. */
static void refused_in_try(void *arg)
{
    (void)arg;
    (void)sp_tensor_new(-1, NULL);
    _exit(4);   /* returned inside sp_try */
}
Test(errors, in_an_app_a_refusal_outside_sp_try_exits_2_with_its_line)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        sp_guard_off();
        if (sp_try(refused_in_try, NULL) != SP_ERR) _exit(3);
        if (!strstr(sp_last_error(), "sp_tensor_new: argument 'ndim' is -1")) _exit(5);
        (void)sp_tensor_new(-1, NULL);
        _exit(0);   /* returned: the refusal was only a status */
    }
    close(fds[1]);
    char err[256] = "";
    ssize_t n, len = 0;
    while ((n = read(fds[0], err + len, sizeof err - 1 - (size_t)len)) > 0) len += n;
    close(fds[0]);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "exit status %d, stderr '%s'", WIFEXITED(st) ? WEXITSTATUS(st) : -1, err);
    /* one line; under the sanitizers their runtime may add its own "==pid==" lines at exit */
    const char *nl = strchr(err, '\n');
    bool one_line = nl && (nl == err + len - 1 || strncmp(nl + 1, "==", 2) == 0);
    cr_assert(strncmp(err, "scanprop: sp_tensor_new: argument 'ndim' is -1", 46) == 0 && one_line,
              "not its one line: '%s'", err);
}

/* sp_model_add is a status (core/error.h): a duplicate parameter name or a layer added
 * twice returns SP_MODEL_NONE naming it, the model as it was (and freeable: no layer twice). */
Test(errors, duplicate_param_name_or_layer_is_a_status)
{
    sp_model *m = sp_model_new("bad");
    cr_assert_eq(sp_model_add(m, sp_linear("fc", 4, 3)), 0);
    int r = sp_model_add(m, sp_relu());
    cr_assert_eq(r, 1);
    sp_layer *relu = m->layers[r];
    sp_clear_error();
    cr_assert_eq(sp_model_add(m, sp_linear("fc", 3, 3)), SP_MODEL_NONE, "a duplicate name was added");
    cr_assert(strstr(sp_last_error(), "model 'bad': duplicate parameter name 'fc.weight'"), "%s", sp_last_error());
    cr_assert_eq(sp_model_add(m, relu), SP_MODEL_NONE, "the same layer was added twice");
    cr_assert(strstr(sp_last_error(), "already in the model as layer 1"), "%s", sp_last_error());
    cr_assert_eq(m->nlayers, 2);
    cr_assert_eq(m->nparams, 2);
    cr_assert_eq(sp_model_add(m, sp_linear("fc2", 3, 3)), 2, "%s", sp_last_error());
    cr_assert_eq(m->nlayers, 3);
    sp_model_free(m);
}

/* A dataset of no classes (or -3) is refused at construction, not at its first label. */
Test(errors, dataset_of_no_classes_is_refused)
{
    float *x;
    int *y;
    for (int k = -3; k <= 0; k++) {
        cr_assert_null(sp_dataset_new_f32("classless", 2, 1, (int[]){3}, k, &x, &y), "nclasses %d accepted", k);
        char want[64];
        snprintf(want, sizeof want, "classless: %d classes (expected >= 1)", k);
        cr_assert(strstr(sp_last_error(), want), "%s", sp_last_error());
        uint8_t *b;
        cr_assert_null(sp_dataset_new_u8("classless", 2, 1, (int[]){3}, k, 255.0f, &b, &y), "nclasses %d accepted", k);
    }
    sp_dataset *d = sp_dataset_new_f32("one", 2, 1, (int[]){3}, 1, &x, &y);
    cr_assert_not_null(d, "%s", sp_last_error());
    sp_dataset_free(d);
}

/* The model's loss is its builder's choice (core/model.c names no op). */
Test(errors, model_without_a_loss_is_a_status)
{
    sp_model *m = sp_model_new("noloss");
    sp_model_add(m, sp_linear("fc1", 4, 3));
    sp_model_init(m, 1);
    float xs[8] = {0};
    int ys[2] = {0, 2};
    sp_tensor x = sp_tensor_2d(xs, 2, 4);
    sp_tape t;
    sp_tape_init(&t);
    tu_refused(!sp_model_loss(m, &t, &x, ys), "model 'noloss': no loss");
    sp_tape_free(&t);
    sp_model_free(m);
}

/* Both calls that add a layer return its index (what sp_model_add_from reads), so
 * `int f = sp_model_add(...)` is the layer f, as from sp_model_add_from. */
Test(model, add_and_add_from_both_return_the_layers_index)
{
    sp_model *m = sp_model_new("idx");
    cr_assert_eq(sp_model_add(m, sp_linear("fc1", 4, 4)), 0);
    int r = sp_model_add(m, sp_relu());
    cr_assert_eq(r, 1);
    cr_assert_eq(r, sp_model_last(m));
    cr_assert_eq(sp_model_add_from(m, sp_add(), 2, (int[]){r, 0}), 2);
    cr_assert_eq(sp_model_add(m, sp_linear("fc2", 4, 2)), 3);
    cr_assert_eq(m->nlayers, 4);
    sp_model_free(m);
}

/* What sp_model_add returns for a NULL layer is no layer: reading it is refused. */
Test(model, reading_a_failed_add_is_refused)
{
    sp_model *m = sp_model_new("none");
    sp_model_add(m, sp_linear("fc1", 4, 4));
    int bad = sp_model_add(m, NULL);
    tu_refused(sp_model_add_from(m, sp_relu(), 1, (int[]){bad}) == SP_MODEL_NONE, "reads layer -2");
    cr_assert_eq(m->nlayers, 1, "the model changed");
    sp_model_free(m);
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

/* An op whose CPU kernels are named in its definition (.cpu, docs/WRITING_MODELS.md's
 * form): the op's CPU table. */
static const sp_opdef op_square = {.name = "square", .infer = sq_infer, .cpu = {.forward = sq_forward}};

Test(op, the_cpu_kernels_of_the_opdef_are_its_cpu_table)
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
    sp_op_linear.cpu.backward_input(n, i, dy, dx);
    for (size_t i = 0; i < dx->numel; i++) dx->data[i] *= 1.01f;
}

Test(gradcheck, detects_a_wrong_gradient)
{
    sp_opdef broken = sp_op_linear;
    broken.cpu.backward_input = wrong_backward_input;
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

/* ---- help between inline threads (core/threads.h) ---- */

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
    cr_assert_eq(sp_model_add(m, NULL), SP_MODEL_NONE);
    cr_assert(strstr(sp_last_error(), "sp_model_add: the layer is NULL"), "%s", sp_last_error());
    sp_train_result r = sp_train(m, NULL, NULL, NULL, NULL, NULL);
    cr_assert_eq(r.status, SP_ERR);
    cr_assert(strstr(sp_last_error(), "sp_train: the engine is NULL"), "%s", sp_last_error());
    sp_model_free(m);
}

Test(api, backward_with_a_null_tape_is_a_status)
{
    cr_assert_eq(sp_backward(NULL, NULL, NULL), SP_ERR);   /* nothing allocated: no exit, no crash */
    cr_assert(strstr(sp_last_error(), "sp_backward: the engine is NULL"), "%s", sp_last_error());
}

/* sp_json_end_print on a stdout that cannot take the line (a full disk) returns SP_ERR
 * with the reason, and the process goes on (it exited 2 from inside the library). */
Test(api, json_end_print_reports_a_failed_write)
{
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        if (!freopen("/dev/full", "w", stdout)) _exit(5);
        sp_json j;
        if (sp_json_begin(&j) != SP_OK || sp_json_int(&j, "x", 1) != SP_OK) _exit(6);
        if (sp_json_end_print(&j) != SP_ERR) _exit(3);
        if (!strstr(sp_last_error(), "stdout: write failed: No space left on device")) _exit(4);
        _exit(0);   /* reached: the library did not end the process */
    }
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit %d (3: not SP_ERR, 4: message, 2: the library exited)",
              WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st));
}

/* ---- every public function and its arguments ------------------------------------------ */

/* What a function declared in the headers scanprop.h includes does with a NULL pointer
 * (every pointer argument NULL, counts 1, other values 0) or a count of -1:
 *   K_STATUS  returns SP_ERR, the message naming the argument (no exit, no crash)
 *   K_NULL    returns NULL, the message naming the argument
 *   K_RESULT  sp_train: result.status SP_ERR; sp_train_step: NaN; the message naming
 *             the argument
 *   K_TRY     sp_fail naming the argument: SP_ERR from sp_try, exit 2 with that line
 *             outside it (the construction and step calls error.h lists)
 *   K_NOOP    a free or close of NULL does nothing
 *   K_ACCEPT  NULL is a documented value (a shape-only view, "no notifier", ...)
 *   K_REFUSED sp_refuse (core/): outside sp_try its documented failure value (the case
 *             sets g_status to SP_ERR on seeing it), the message naming the argument, no
 *             exit; inside sp_try the call ends there (SP_ERR from sp_try) */
enum { K_STATUS, K_NULL, K_RESULT, K_TRY, K_NOOP, K_ACCEPT, K_REFUSED };
typedef struct api_case {
    const char *name;
    int kind;
    void (*call)(void);
    const char *says;   /* in sp_last_error() */
} api_case;

static int g_status;
static const void *g_ptr;

/* For K_REFUSED cases: the call gave its failure value. */
#define REFUSED(failed) (g_status = (failed) ? SP_ERR : SP_OK)

static void c0(void) { REFUSED(sp_tensor_view(NULL, 1, NULL).ndim == 0); }
static void c1(void) { REFUSED(sp_tensor_view(NULL, -1, NULL).ndim == 0); }
static void c2(void) { (void)sp_tensor_2d(NULL, 0, 0); }
static void c3(void) { (void)sp_tensor_4d(NULL, 0, 0, 0, 0); }
static void c4(void) { REFUSED(sp_shape_numel(1, NULL) == 0); }
static void c5(void) { REFUSED(sp_shape_numel(-1, NULL) == 0); }
static void c6(void) { REFUSED(!sp_tensor_same_shape(NULL, NULL)); }
static void c7(void) { REFUSED(sp_tensor_sample_numel(NULL) == 0); }
static void c8(void) { REFUSED(sp_tensor_new(1, NULL).data == NULL); }
static void c9(void) { REFUSED(sp_tensor_new(-1, NULL).ndim == 0); }
static void c10(void) { sp_tensor_free(NULL); }
static void c11(void) { g_status = sp_tensor_zero(NULL); }
static void c12(void) { g_status = sp_tensor_copy(NULL, NULL); }
static void c13(void) { g_status = sp_rng_seed(NULL, 0); }
static void c14(void) { REFUSED(sp_rng_u32(NULL) == 0); }
static void c15(void) { REFUSED(isnan(sp_rng_uniform(NULL))); }
static void c16(void) { REFUSED(isnan(sp_rng_uniform_range(NULL, 0, 0))); }
static void c17(void) { REFUSED(isnan(sp_rng_normal(NULL))); }
static void c18(void) { REFUSED(sp_rng_below(NULL, 0) == 0); }
static void c19(void) { g_status = sp_rng_shuffle(NULL, NULL, 1); }
static void c20(void) { g_status = sp_rng_shuffle(NULL, NULL, -1); }
static void c21(void) { sp_fail(NULL); }
static void c22(void) { g_status = sp_try(NULL, NULL); }
static void c23(void) { g_status = sp_error(NULL); }
static void c24(void) { g_status = sp_error_prefix(NULL); }
static void c25(void) { (void)sp_check_ptr(NULL); }
static void c26(void) { (void)sp_xrealloc(NULL, 0); }
static void c27(void) { REFUSED(sp_xstrdup(NULL) == NULL); }
static void c28(void) { g_ptr = (const void *)sp_file_alloc(0, 0, NULL); }
static void c29(void) { REFUSED(sp_shape_str(NULL, NULL, 0) == NULL); }
static void c30(void) { g_status = sp_csr_alloc(NULL, 0, 0, 0); }
static void c31(void) { sp_csr_free(NULL); }
static void c32(void) { REFUSED(sp_csr_bytes(NULL) == 0); }
static void c33(void) { REFUSED(sp_param_new(NULL, NULL, 1, NULL) == NULL); }
static void c34(void) { REFUSED(sp_param_new(NULL, NULL, -1, NULL) == NULL); }
static void c35(void) { REFUSED(sp_buffer_new(NULL, NULL, 1, NULL) == NULL); }
static void c36(void) { REFUSED(sp_buffer_new(NULL, NULL, -1, NULL) == NULL); }
static void c37(void) { sp_layer_free(NULL); }
static void c38(void) { g_status = sp_fill_uniform(NULL, NULL, 0); }
static void c39(void) { g_status = sp_arena_init(NULL, 0); }
static void c40(void) { g_status = sp_arena_init_on(NULL, NULL, 0); }
static void c41(void) { sp_arena_free(NULL); }
static void c42(void) { REFUSED(sp_arena_alloc(NULL, 0) == NULL); }
static void c43(void) { REFUSED(sp_arena_calloc(NULL, 0) == NULL); }
static void c44(void) { g_status = sp_arena_reset(NULL); }
static void c45(void) { REFUSED(sp_arena_base(NULL) == NULL); }
static void c46(void) { g_status = sp_tape_init(NULL); }
static void c47(void) { sp_tape_free(NULL); }
static void c48(void) { g_status = sp_tape_reset(NULL); }
static void c49(void) { REFUSED(sp_tape_input(NULL, NULL) == NULL); }
static void c50(void) { REFUSED(sp_apply(NULL, NULL, NULL) == NULL); }
static void c51(void) { REFUSED(sp_apply_n(NULL, NULL, 1, NULL) == NULL); }
static void c52(void) { REFUSED(sp_apply2(NULL, NULL, NULL, NULL) == NULL); }
static void c53(void) { REFUSED(sp_apply_loss(NULL, NULL, NULL, NULL) == NULL); }
static void c54(void) { REFUSED(sp_node_label(NULL, NULL, 0) == NULL); }
static void c55(void) { REFUSED(sp_tape_alloc(NULL, 0) == NULL); }
static void c56(void) { REFUSED(sp_tape_tensor(NULL, 1, NULL).ndim == 0); }
static void c57(void) { REFUSED(sp_tape_tensor(NULL, -1, NULL).ndim == 0); }
static void c58(void) { REFUSED(sp_tape_tensor_like(NULL, NULL).ndim == 0); }
static void c59(void) { REFUSED(sp_tape_alloc_on(NULL, 0, 0) == NULL); }
static void c60(void) { REFUSED(sp_tape_tensor_on(NULL, 0, 1, NULL).ndim == 0); }
static void c61(void) { REFUSED(sp_tape_tensor_on(NULL, 0, -1, NULL).ndim == 0); }

/* Mismatched, out-of-range and impossible arguments to core's calls. */
static void m_view_ndim(void) { REFUSED(sp_tensor_view(NULL, 5, (int[]){1, 1, 1, 1, 1}).ndim == 0); }
static void m_view_dim(void) { REFUSED(sp_tensor_2d(NULL, 2, -3).ndim == 0); }
static void m_view_huge(void) { REFUSED(sp_tensor_4d(NULL, 1 << 16, 1 << 16, 1 << 16, 1 << 16).ndim == 0); }
static void m_new_ndim0(void) { REFUSED(sp_tensor_new(0, NULL).ndim == 0); }
static void m_zero_view(void) { REFUSED(sp_tensor_zero(&(sp_tensor){.ndim = 1, .shape = {3}, .numel = 3}) == SP_ERR); }
static void m_copy_sizes(void)
{
    float a[6] = {0}, b[4] = {0};
    REFUSED(sp_tensor_copy(&(sp_tensor){.data = a, .ndim = 1, .shape = {6}, .numel = 6},
                           &(sp_tensor){.data = b, .ndim = 1, .shape = {4}, .numel = 4}) == SP_ERR);
}
static void m_below_0(void)
{
    sp_rng r;
    sp_rng_seed(&r, 1);
    REFUSED(sp_rng_below(&r, 0) == 0);
}
static void m_csr_rows(void)
{
    sp_csr m;
    g_status = sp_csr_alloc(&m, -1, 2, 0);
}
static void m_csr_nnz(void)
{
    sp_csr m;
    g_status = sp_csr_alloc(&m, 2, 2, (int64_t)1 << 40);
}
static void m_param_fifth(void)
{
    sp_layer *l = sp_linear("fc", 2, 2);
    for (int i = 0; i < 2; i++) (void)sp_param_new(l, "extra", 1, (int[]){2});
    REFUSED(sp_param_new(l, "fifth", 1, (int[]){2}) == NULL);
}
static void m_fill_view(void)
{
    sp_rng r;
    sp_rng_seed(&r, 1);
    g_status = sp_fill_uniform(&(sp_tensor){.ndim = 1, .shape = {3}, .numel = 3}, &r, 1.0f);
}
static void m_arena_huge(void)
{
    sp_arena a;
    sp_arena_init(&a, 0);
    REFUSED(sp_arena_alloc(&a, (size_t)-1) == NULL);
}
static void m_arena_mark(void)
{
    sp_arena a, b;
    sp_arena_init(&a, 4096);
    sp_arena_init(&b, 4096);
    (void)sp_arena_alloc(&b, 64);
    g_status = sp_arena_release(&a, sp_arena_mark_get(&b));
}
static void m_arena_source(void)
{
    sp_arena a;
    g_status = sp_arena_init_on(&a, &(sp_arena_source){.align = 48}, 0);
}
static float m_x[14];
static sp_tape m_tape, m_tape2;
static sp_node *m_input(sp_tape *t, int d0, int d1)
{
    sp_tape_init(t);
    return sp_tape_input(t, &(sp_tensor){.data = m_x, .ndim = 2, .shape = {d0, d1}, .numel = (size_t)d0 * d1});
}
static void m_input_ndim(void)
{
    sp_tape_init(&m_tape);
    REFUSED(sp_tape_input(&m_tape, &(sp_tensor){.data = m_x, .ndim = 7}) == NULL);
}
static void m_apply_shape(void) { REFUSED(sp_apply(&m_tape, sp_linear("fc1", 8, 4), m_input(&m_tape, 2, 7)) == NULL); }
static void m_apply_tape(void)
{
    sp_node *x = m_input(&m_tape, 2, 7);
    sp_tape_init(&m_tape2);
    REFUSED(sp_apply(&m_tape2, sp_relu(), x) == NULL);
}
static void m_apply_arity(void)
{
    sp_node *x = m_input(&m_tape, 2, 7);
    REFUSED(sp_apply_n(&m_tape, sp_relu(), 2, (sp_node *[]){x, x}) == NULL);
}
static void m_apply_over(void) { REFUSED(sp_apply_over(&m_tape, sp_linear("fc", 7, 2), m_input(&m_tape, 2, 7)) == NULL); }
static void m_fused_relu(void) { REFUSED(sp_apply_fused_relu(&m_tape, sp_relu(), m_input(&m_tape, 2, 7)) == NULL); }
static void m_fused_next(void)
{
    sp_tape_init(&m_tape2);   /* a conv's forward with a ReLU, then a layer with no forward by samples */
    sp_tensor x = sp_tape_tensor(&m_tape2, 4, (int[]){2, 1, 6, 6});
    sp_node *in = sp_tape_input(&m_tape2, &x);
    int n0 = m_tape2.n;
    REFUSED(sp_apply_fused_relu_next(&m_tape2, sp_conv2d("c", 1, 2, 3, 1, 1), sp_relu(), sp_flatten(), in) == NULL);
    if (m_tape2.n != n0 || in->nconsumers != 0) g_status = SP_OK;   /* not left as it was: the case fails */
}
static void m_fused_next_shape(void)
{
    sp_tape_init(&m_tape2);   /* the pool's shape check fails after the conv and ReLU were recorded */
    sp_tensor x = sp_tape_tensor(&m_tape2, 4, (int[]){2, 1, 6, 6});
    sp_node *in = sp_tape_input(&m_tape2, &x);
    int n0 = m_tape2.n;
    REFUSED(sp_apply_fused_relu_next(&m_tape2, sp_conv2d("c", 1, 2, 3, 1, 1), sp_relu(), sp_maxpool2d(7, 1, 0), in) ==
            NULL);
    if (m_tape2.n != n0 || in->nconsumers != 0) g_status = SP_OK;   /* not left as it was: the case fails */
}
static void m_over_fused(void) { REFUSED(sp_apply_over_fused(&m_tape, sp_linear("fc", 7, 2), m_input(&m_tape, 2, 7)) == NULL); }
static void m_loss_label(void)
{
    sp_node *z = m_input(&m_tape, 2, 7);
    REFUSED(sp_apply_loss(&m_tape, sp_softmax_ce(), z, (int[]){0, 7}) == NULL);
}
static void m_loss_nolabels(void)
{
    sp_node *z = m_input(&m_tape, 2, 7);
    REFUSED(sp_apply_loss(&m_tape, sp_softmax_ce(), z, NULL) == NULL);
}
static void m_tensor_dev(void)
{
    sp_tape_init(&m_tape);
    REFUSED(sp_tape_tensor_on(&m_tape, (sp_device)7, 1, (int[]){2}).ndim == 0);
}
static void m_node_x(void) { REFUSED(sp_node_x(NULL) == NULL); }
static void m_node_in(void) { REFUSED(sp_node_in(m_input(&m_tape, 2, 7), 0) == NULL); }
static void m_node_has_jt(void) { REFUSED(!sp_node_has_jt(NULL)); }
static void m_threads_65(void) { g_status = sp_set_threads(65); }
static void m_refuse(void) { g_status = sp_refuse(NULL); }
static void m_shape_check(void) { g_status = sp_shape_check(NULL, 1, (int[]){1}, NULL); }
static void m_shape_str_ndim(void)
{
    char buf[64];
    REFUSED(sp_shape_str(&(sp_tensor){.ndim = 9}, buf, sizeof buf) == NULL);
}
static void c62(void) { g_ptr = (const void *)sp_model_new(NULL); }
static void c63(void) { g_status = sp_model_set_loss(NULL, NULL); }
static void c64(void) { sp_model_free(NULL); }
static void c65(void) { g_status = sp_model_add(NULL, NULL) == SP_MODEL_NONE ? SP_ERR : SP_OK; }
static void c66(void) { g_status = sp_model_add_from(NULL, NULL, 1, NULL) == SP_MODEL_NONE ? SP_ERR : SP_OK; }
static void c67(void) { g_ptr = (const void *)sp_model_layer_label(NULL, 0, NULL, 0); }
static void c68(void) { g_status = sp_model_last(NULL) == SP_MODEL_NONE ? SP_ERR : SP_OK; }
static void c69(void) { g_status = sp_model_is_chain(NULL) == false ? SP_ERR : SP_OK; }
static void c70(void) { g_status = sp_model_init(NULL, 0); }
static void c71(void) { g_ptr = (const void *)sp_model_forward(NULL, NULL, NULL); }
static void c72(void) { g_ptr = (const void *)sp_model_forward_shapes(NULL, NULL, 1, 1, NULL); }
static void c73(void) { g_ptr = (const void *)sp_model_loss(NULL, NULL, NULL, NULL); }
static void c74(void) { g_ptr = (const void *)sp_model_param(NULL, NULL); }
static void c75(void) { g_status = sp_model_nstate(NULL) == -1 ? SP_ERR : SP_OK; }
static void c76(void) { g_ptr = (const void *)sp_model_state(NULL, 0); }
static void c77(void) { g_status = sp_model_summary(NULL, 1, NULL, NULL); }
static void c78(void) { g_status = sp_model_set_training(NULL, 0); }
static void c79(void) { g_status = sp_model_zero_grad(NULL); }
static void c80(void) { g_status = sp_model_numel(NULL) == 0 ? SP_ERR : SP_OK; }
static void c81(void) { g_ptr = (const void *)sp_engine_create(NULL, NULL); }
static void c82(void) { sp_engine_destroy(NULL); }
static void c83(void) { g_status = sp_backward(NULL, NULL, NULL); }
static void c84(void) { g_status = sp_engine_caps(NULL) == 0 ? SP_ERR : SP_OK; }
static void c85(void) { g_ptr = (const void *)sp_engine_names_with(0, NULL, 0); }
static void c86(void) { g_status = sp_backward_async(NULL, NULL, NULL); }
static void c87(void) { g_status = sp_engine_sync(NULL); }
static void c88(void) { g_status = sp_engine_wait_layer(NULL, NULL); }
static void c89(void) { g_status = sp_engine_set_graph(NULL, 0); }
static void c90(void) { g_status = sp_engine_set_step_capture(NULL, 0); }
static void c91(void) { g_status = sp_engine_check(NULL, NULL, NULL, NULL); }
static void c92(void) { g_status = sp_engine_report(NULL, NULL); }
static void c93(void) { g_status = sp_engine_plan(NULL, NULL, NULL, NULL, NULL) == false ? SP_ERR : SP_OK; }
static void c94(void) { g_status = sp_mark_needs_grad(NULL); }
static void c95(void) { g_status = sp_alloc_grads(NULL, NULL); }
static void c96(void) { g_status = sp_set_threads(-1); }
static void c97(void) { g_status = sp_parallel_for(0, NULL, NULL); }
static void c98(void) { sp_parallel_set_help_notify(NULL, NULL); }
static void c98b(void) { g_ptr = (const void *)sp_data_format_find(NULL); }
static void c99(void) { REFUSED(!sp_spin_until(NULL, NULL, 0)); }
static void c100(void) { g_ptr = (const void *)sp_st_open(NULL); }
static void c101(void) { sp_st_close(NULL); }
static void c102(void) { g_ptr = (const void *)sp_st_path(NULL); }
static void c103(void) { g_status = sp_st_count(NULL) < 0 ? SP_ERR : SP_OK; }
static void c104(void) { g_ptr = (const void *)sp_st_at(NULL, 0); }
static void c105(void) { g_ptr = (const void *)sp_st_find(NULL, NULL); }
static void c106(void) { g_ptr = (const void *)sp_st_metadata(NULL, NULL); }
static void c107(void) { g_status = sp_st_read_f32(NULL, NULL, NULL, 1, NULL); }
static void c108(void) { g_status = sp_st_read_f32(NULL, NULL, NULL, -1, NULL); }
static void c109(void) { g_status = sp_st_read_i32(NULL, NULL, NULL, 1, NULL); }
static void c110(void) { g_status = sp_st_read_i32(NULL, NULL, NULL, -1, NULL); }
static void c111(void) { REFUSED(sp_st_shape_problem(NULL, 1, NULL, NULL, 0)); }
static void c112(void) { REFUSED(sp_st_shape_problem(NULL, -1, NULL, NULL, 0)); }
static void c_dtn(void) { g_ptr = sp_st_dtype_name((sp_st_dtype)99); }
static void c_dtn2(void) { g_ptr = sp_st_dtype_name((sp_st_dtype)-1); }
static void c_dts(void) { REFUSED(sp_st_dtype_size((sp_st_dtype)99) == 0); }
static void c113(void) { g_status = sp_st_read_raw(NULL, NULL, NULL); }
static void c114(void) { g_status = sp_st_write(NULL, 1, NULL, NULL); }
static void c115(void) { g_status = sp_st_save(NULL, 1, NULL, NULL, NULL); }
static void c116(void) { g_status = sp_model_save(NULL, NULL); }
static void c117(void) { g_status = sp_model_load(NULL, NULL); }
static void c118(void) { g_status = sp_check_finite_f32(NULL, NULL, NULL, 0); }
static void c119(void) { g_status = sp_model_check_saved_name(NULL, NULL); }
static void c120(void) { g_ptr = (const void *)sp_linear(NULL, 0, 0); }
static void c121(void) { g_ptr = (const void *)sp_conv2d(NULL, 0, 0, 0, 0, 0); }
static void c122(void) { g_ptr = (const void *)sp_batchnorm2d(NULL, 0); }
static void c123(void) { g_ptr = (const void *)sp_conv2d_groups(NULL, 0, 0, 0, 0, 0, 0, 0); }
static void c124(void) { g_ptr = (const void *)sp_conv2d_nobias(NULL, 0, 0, 0, 0, 0); }
static void c125(void) { g_ptr = (const void *)sp_rnn(NULL, 0, 0, 0); }
static void c126(void) { g_ptr = (const void *)sp_gru(NULL, 0, 0, 0); }
static void c127(void) { g_ptr = (const void *)sp_sgd_new(NULL, 1, 0, 0, 0, 0, 0); }
static void c128(void) { g_ptr = (const void *)sp_sgd_new(NULL, -1, 0, 0, 0, 0, 0); }
static void c129(void) { g_ptr = (const void *)sp_adam_new(NULL, 1, 0, 0, 0, 0, 0, 0); }
static void c130(void) { g_ptr = (const void *)sp_adam_new(NULL, -1, 0, 0, 0, 0, 0, 0); }
static void c131(void) { g_ptr = (const void *)sp_optim_create(NULL, NULL, 1, NULL); }
static void c132(void) { g_ptr = (const void *)sp_optim_create(NULL, NULL, -1, NULL); }
static void c133(void) { g_status = sp_optim_step(NULL); }
static void c134(void) { g_status = sp_optim_step_params(NULL, NULL, 1); }
static void c135(void) { g_status = sp_optim_step_params(NULL, NULL, -1); }
static void c136(void) { g_status = sp_optim_zero_grad(NULL); }
static void c137(void) { g_status = sp_optim_set_zero_in_step(NULL, 0); }
static void c138(void) { g_status = sp_optim_set_lr(NULL, 0); }
static void c139(void) { g_status = isnan(sp_optim_get_lr(NULL)) ? SP_ERR : SP_OK; }
static void c140(void) { g_status = sp_optim_device_scalars(NULL, 0); }
static void c141(void) { g_status = sp_optim_stage_scalars(NULL); }
static void c142(void) { g_ptr = (const void *)sp_optim_name(NULL); }
static void c143(void) { sp_optim_free(NULL); }
static void c144(void) { g_ptr = (const void *)sp_optim_alloc(NULL, NULL, 1, 1, NULL); }
static void c145(void) { g_ptr = (const void *)sp_optim_alloc(NULL, NULL, -1, 1, NULL); }
static void c146(void) { g_ptr = (const void *)sp_optim_alloc(NULL, NULL, 1, -1, NULL); }
static void c147(void) { g_status = sp_optim_for(0, NULL, NULL); }
static void c148(void) { g_status = sp_optim_register_device(0, NULL); }
static void c149(void) { g_status = isnan(sp_lr_parse(NULL, 0).lr0) ? SP_ERR : SP_OK; }
static void c150(void) { g_status = isnan(sp_lr_at(NULL, 0)) ? SP_ERR : SP_OK; }
static void c151(void) { g_status = sp_dataset_sample_numel(NULL) == 0 ? SP_ERR : SP_OK; }
static void c152(void) { g_status = sp_dataset_get(NULL, 0, NULL, NULL); }
static void c153(void) { g_status = sp_dataset_normalize(NULL, 1, NULL, NULL); }
static void c154(void) { g_status = sp_dataset_normalize(NULL, -1, NULL, NULL); }
static void c155(void) { sp_dataset_free(NULL); }
static void c156(void) { g_ptr = (const void *)sp_dataset_new_u8(NULL, 1, 1, NULL, 0, 0, NULL, NULL); }
static void c157(void) { g_ptr = (const void *)sp_dataset_new_u8(NULL, -1, 1, NULL, 0, 0, NULL, NULL); }
static void c158(void) { g_ptr = (const void *)sp_dataset_new_u8(NULL, 1, -1, NULL, 0, 0, NULL, NULL); }
static void c159(void) { g_ptr = (const void *)sp_dataset_new_f32(NULL, 1, 1, NULL, 0, NULL, NULL); }
static void c160(void) { g_ptr = (const void *)sp_dataset_new_f32(NULL, -1, 1, NULL, 0, NULL, NULL); }
static void c161(void) { g_ptr = (const void *)sp_dataset_new_f32(NULL, 1, -1, NULL, 0, NULL, NULL); }
static void c162(void) { g_status = sp_dataset_check_labels(NULL, NULL, NULL); }
static void c163(void) { g_status = sp_dataset_check_finite(NULL, NULL, NULL); }
static void c164(void) { g_status = sp_dataset_pad(NULL, 0); }
static void c165(void) { g_status = sp_dataset_save(NULL, NULL); }
static void c166(void) { g_ptr = (const void *)sp_idx_open(NULL, NULL); }
static void c167(void) { g_ptr = (const void *)sp_fashion_mnist(NULL, 0, 0); }
static void c168(void) { g_ptr = (const void *)sp_cifar10(NULL, 0); }
static void c169(void) { g_ptr = (const void *)sp_image_folder(NULL, 0, 0); }
static void c170(void) { g_ptr = (const void *)sp_image_folder_class(NULL, 0); }
static void c171(void) { g_status = sp_image_folder_match_classes(NULL, NULL); }
static void c172(void) { g_ptr = (const void *)sp_seqset_open(NULL); }
static void c173(void) { g_ptr = (const void *)sp_bitstream(-1, 0, 0); }
static void c174(void) { g_ptr = (const void *)sp_synthetic_sequences(-1, 0, 0, 0, 0); }
static void c_rows0(void) { g_status = sp_dataset_read_rows(NULL, NULL, 0); }
static void c_rows1(void) { g_ptr = (const void *)sp_idx_open_rows(NULL, NULL); }
static void c_rows2(void) { g_ptr = (const void *)sp_fashion_mnist_rows(NULL, 0, 0); }
static void c_rows3(void) { g_ptr = (const void *)sp_cifar10_rows(NULL, 0); }
static void c_rows4(void) { g_status = sp_loader_rows(NULL, 1, 0, 0, 0, NULL, 1, NULL); }
static void c_rows5(void)
{
    sp_dataset *d = sp_bitstream(4, 2, 0);
    unsigned char keep[4];
    g_status = sp_loader_rows(d, 1, 0, 0, 0, NULL, -1, keep);
    sp_dataset_free(d);
}
static void c175(void) { g_ptr = (const void *)sp_loader_new(NULL, 1, 0, 0, 0); }
static void c177(void) { g_ptr = (const void *)sp_loader_new_sync(NULL, 1, 0, 0, 0); }
static void c179(void) { g_status = sp_loader_next(NULL, NULL) == false ? SP_ERR : SP_OK; }
static void c180(void) { g_status = sp_loader_set_epoch(NULL, 0); }
static void c181(void) { g_status = sp_loader_reset_epoch(NULL); }
static void c182(void) { g_status = sp_loader_epoch(NULL) == -1 ? SP_ERR : SP_OK; }
static void c183(void) { g_status = sp_loader_nbatches(NULL) == -1 ? SP_ERR : SP_OK; }
static void c184(void) { g_status = sp_loader_batch(NULL) == -1 ? SP_ERR : SP_OK; }
static void c185(void) { sp_loader_free(NULL); }
static void c186(void) { g_status = sp_train(NULL, NULL, NULL, NULL, NULL, NULL).status; }
static void c187(void) { g_status = sp_evaluate(NULL, NULL, 1, NULL, NULL); }
static void c188(void)
{
    g_status = isnan(sp_train_step(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)) ? SP_ERR : SP_OK;
}
static void c188b(void) { g_status = isnan(sp_train_step_accum(NULL, NULL, NULL, NULL, NULL, NULL, 1, NULL, NULL, NULL)) ? SP_ERR : SP_OK; }
static void c188c(void) { g_status = sp_batchnorm2d_set_reduce(NULL, NULL, NULL); }
static void c188d(void) { g_status = sp_layer_is_batchnorm(NULL); }
static void c189(void) { g_ptr = (const void *)sp_step_graph_new(NULL, NULL, NULL); }
static void c190(void) { g_ptr = (const void *)sp_step_graph_step(NULL, NULL, NULL, NULL, NULL); }
static void c191(void) { g_status = sp_step_graph_counts(NULL, NULL, NULL); }
static void c192(void) { sp_step_graph_free(NULL); }
static void c193(void) { sp_flags_parse(1, NULL, NULL, NULL, NULL); }
static void c194(void) { sp_flags_parse(-1, NULL, NULL, NULL, NULL); }
static void c195(void) { sp_flags_parse_among(1, NULL, NULL, NULL, NULL, NULL); }
static void c196(void) { sp_flags_parse_among(-1, NULL, NULL, NULL, NULL, NULL); }
static void c197(void) { (void)sp_flag_given(NULL); }
static void c198(void) { (void)sp_flags_digest(NULL, 1, NULL); }
static void c199(void) { (void)sp_flags_digest(NULL, -1, NULL); }
static void c200(void) { (void)sp_flag_value_text(NULL, NULL, 0); }
static void c201(void) { g_status = sp_json_begin(NULL); }
static void c202(void) { g_status = sp_json_str(NULL, NULL, NULL); }
static void c203(void) { g_status = sp_json_num(NULL, NULL, 0); }
static void c204(void) { g_status = sp_json_int(NULL, NULL, 0); }
static void c205(void) { g_status = sp_json_raw(NULL, NULL, NULL); }
static void c206(void) { g_status = sp_json_end_print(NULL); }
static void c207(void) { g_ptr = sp_json_writer(NULL).ctx; }
static void c208(void) { sp_output_close(NULL, NULL); }
static void c209(void) { sp_run_defaults(NULL); }
static void c210(void) { sp_run_parse(1, NULL, NULL, NULL, NULL, 0, NULL); }
static void c211(void) { sp_run_parse(-1, NULL, NULL, NULL, NULL, 0, NULL); }
static void c212(void) { (void)sp_run(NULL, NULL, NULL, NULL, NULL); }
static void c213(void) { sp_run_open_images(NULL, 0, NULL, NULL); }
static void c214(void) { sp_run_check_synthetic(NULL, NULL, 0, 0, 0); }
static void c215(void) { sp_run_use_device(NULL, NULL); }
static void c216(void) { sp_run_device_to_host(NULL); }
static void c217(void) { (void)sp_run_engine_opts(NULL); }
static void c218(void) { sp_run_open(NULL, NULL, NULL, NULL, NULL, NULL); }
static void c219(void) { (void)sp_run_plan(NULL, NULL, NULL); }
static void c220(void) { (void)sp_run_step(NULL, NULL, NULL, NULL); }
static void c221(void) { (void)sp_run_prints(NULL); }
static void c222(void) { sp_run_save(NULL); }
static void c223(void) { sp_run_close(NULL, NULL); }
static void c224(void) { sp_run_summary_begin(NULL, NULL); }
static void c225(void) { sp_run_summary_engine(NULL, NULL); }
static void c226(void) { sp_run_summary_train(NULL, NULL, NULL, 1, NULL); }
static void c227(void) { sp_run_summary_exec(NULL, NULL); }
static void c_sumdata(void) { sp_run_summary_data(NULL, NULL, NULL, NULL); }
static void c228(void) { g_ptr = (const void *)sp_zoo_model(NULL); }
static void c229(void) { g_status = sp_zoo_input_shape(NULL, NULL); }
static void c230(void) { g_status = isnan(sp_clip_grad_norm(NULL, 1, 1.0)) ? SP_ERR : SP_OK; }
static void c231(void) { g_status = isnan(sp_clip_grad_norm(NULL, -1, 1.0)) ? SP_ERR : SP_OK; }
static void c232(void) { g_status = isnan(sp_grad_sq_norm(NULL, 1)) ? SP_ERR : SP_OK; }
static void c233(void) { g_status = isnan(sp_grad_sq_norm(NULL, -1)) ? SP_ERR : SP_OK; }
static void c234(void) { g_status = sp_grad_scale(NULL, 1, 1.0f); }
static void c235(void) { g_status = sp_grad_scale(NULL, -1, 1.0f); }
static void c236(void) { g_status = sp_optim_set_clip_grad_norm(NULL, 1.0); }
static void c237(void) { g_status = isnan(sp_optim_last_grad_norm(NULL)) ? SP_ERR : SP_OK; }
static void c238(void) { g_status = sp_optim_undo_save(NULL, NULL, NULL, 1); }
static void c239(void) { g_status = sp_optim_undo_restore(NULL); }
static void c240(void) { sp_optim_undo_clear(NULL); }
static void c241(void) { sp_optim_undo_free(NULL); }
static void c242(void) { g_status = sp_dataset_label(NULL, 0, NULL, NULL); }
static void c243(void) { g_ptr = (const void *)sp_loader_new_rows(NULL, 1, 0, 0, 0, NULL); }
static void c254(void) { g_ptr = (const void *)sp_loader_new_rows_sync(NULL, 1, 0, 0, 0, NULL); }
static void c244(void) { g_status = sp_loader_samples_read(NULL) < 0 ? SP_ERR : SP_OK; }
static void c245(void) { g_status = sp_loader_labels_read(NULL) < 0 ? SP_ERR : SP_OK; }
static void c246(void) { g_status = sp_loader_bytes_read(NULL) < 0 ? SP_ERR : SP_OK; }
static void c247(void) { (void)sp_dataset_bytes(NULL); }
static void c248(void) { sp_run_summary_memory(NULL, NULL, NULL, NULL, NULL, 0); }
static void c249(void) { g_status = sp_arena_trim(NULL); }
static void c250(void) { REFUSED(sp_arena_mark_get(NULL).head == NULL); }
static void c251(void) { g_status = sp_arena_release(NULL, (sp_arena_mark){0}); }
static void c252(void) { g_status = sp_tape_trim(NULL); }
static void c253(void) { REFUSED(sp_apply_over(NULL, NULL, NULL) == NULL); }
static void c253b(void) { g_ptr = (const void *)sp_batchnorm2d_relu(NULL, 0); }
static void c255(void) { g_ptr = (const void *)sp_engine_def_find(NULL); }
static void c256(void) { g_ptr = (const void *)sp_engine_own_opts(NULL, NULL); }
static void c257(void) { g_ptr = sp_run_engine_own(NULL, "ooo"); }
static void c258(void) { REFUSED(sp_run_engine_int(NULL, "k", 7) == 7); }
static void c259(void) { g_status = sp_model_check_finite(NULL); }
static void c261(void) { g_ptr = (const void *)sp_maxpool2d(-1, 1, 0); }
static void c262(void) { g_ptr = (const void *)sp_avgpool2d(2, -1, 0); }
static void c263(void) { g_ptr = (const void *)sp_dropout(-0.5f); }
static void c264(void) { g_ptr = (const void *)sp_zoo_lenet(1, 30); }
static void c265(void) { g_ptr = (const void *)sp_zoo_vgg11(-1, 10); }
static void c266(void) { g_ptr = (const void *)sp_zoo_rnn(1, -1, 10); }
static void c267(void) { g_ptr = (const void *)sp_zoo_gru(1, 20, 0); }
static void c268(void) { g_ptr = (const void *)sp_zoo_mlp(-1, 128, 10); }
static void c269(void) { g_ptr = (const void *)sp_zoo_resnet20(1, -1); }
static void c270(void) { g_ptr = (const void *)sp_optim_device(SP_CPU); }
static void c271(void) { g_status = isnan(sp_lr_at(&(sp_lr_schedule){.lr0 = 1}, -1)) ? SP_ERR : SP_OK; }
static void c272(void) { g_ptr = (const void *)sp_zoo_model("nope"); }
static void c273(void) { REFUSED(sp_apply_fused_relu(NULL, NULL, NULL) == NULL); }
static void c274(void) { REFUSED(sp_apply_over_fused(NULL, NULL, NULL) == NULL); }
static void c275(void) { g_status = sp_tape_arena_like(NULL, NULL); }
static void c277(void) { REFUSED(sp_apply_fused_relu_next(NULL, NULL, NULL, NULL, NULL) == NULL); }
static void c278(void) { g_status = sp_model_fuses_relu_next(NULL, NULL, 0, SP_CPU) == false ? SP_ERR : SP_OK; }
static void c276(void) { g_status = sp_model_fuses_relu(NULL, NULL, 0, SP_CPU) == false ? SP_ERR : SP_OK; }
static void c260(void)
{
    char buf[8];
    (void)sp_flag_suggest(NULL, "a|b", buf, sizeof buf);
}

static void cb0(void) { REFUSED(sp_tensor_offset(NULL, 0, 0, 0, 0) == SIZE_MAX); }
static void cb1(void) { g_status = sp_tensor_to_plain(NULL, NULL); }
static void cb2(void) { g_status = sp_tensor_from_plain(NULL, NULL, NULL); }
static void cb3(void) { g_status = sp_model_blocked_plan(NULL, NULL); }
static void cb4(void) { g_status = sp_model_blocked_plan_cut(NULL, NULL, NULL); }
static void cb5(void) { g_status = sp_model_step_grads(NULL, true); }
static void cb6(void) { g_status = sp_optim_step_rest(NULL); }

static const api_case cases[] = {
    {"sp_tensor_view", K_REFUSED, c0, "sp_tensor_view: argument 'shape' is NULL"},
    {"sp_tensor_view", K_REFUSED, c1, "sp_tensor_view: argument 'ndim' is -1"},
    {"sp_tensor_2d", K_ACCEPT, c2, ""},   /* NULL is a documented value */
    {"sp_tensor_4d", K_ACCEPT, c3, ""},   /* NULL is a documented value */
    {"sp_shape_numel", K_REFUSED, c4, "sp_shape_numel: argument 'shape' is NULL"},
    {"sp_shape_numel", K_REFUSED, c5, "sp_shape_numel: argument 'ndim' is -1"},
    {"sp_tensor_same_shape", K_REFUSED, c6, "sp_tensor_same_shape: argument 'a' is NULL"},
    {"sp_tensor_sample_numel", K_REFUSED, c7, "sp_tensor_sample_numel: argument 't' is NULL"},
    {"sp_tensor_new", K_REFUSED, c8, "sp_tensor_new: argument 'shape' is NULL"},
    {"sp_tensor_new", K_REFUSED, c9, "sp_tensor_new: argument 'ndim' is -1"},
    {"sp_tensor_free", K_NOOP, c10, "?"},
    {"sp_tensor_zero", K_REFUSED, c11, "sp_tensor_zero: argument 't' is NULL"},
    {"sp_tensor_copy", K_REFUSED, c12, "sp_tensor_copy: argument 'dst' is NULL"},
    {"sp_tensor_offset", K_REFUSED, cb0, "sp_tensor_offset: argument 't' is NULL"},
    {"sp_tensor_to_plain", K_REFUSED, cb1, "sp_tensor_to_plain: argument 'src' is NULL"},
    {"sp_tensor_from_plain", K_REFUSED, cb2, "sp_tensor_from_plain: argument 't' is NULL"},
    {"sp_model_blocked_plan", K_STATUS, cb3, "sp_model_blocked_plan: argument 'm' is NULL"},
    {"sp_model_blocked_plan_cut", K_STATUS, cb4, "sp_model_blocked_plan_cut: argument 'm' is NULL"},
    {"sp_model_step_grads", K_STATUS, cb5, "sp_model_step_grads: argument 'm' is NULL"},
    {"sp_optim_step_rest", K_STATUS, cb6, "sp_optim_step_rest: argument 'o' is NULL"},
    {"sp_rng_seed", K_REFUSED, c13, "sp_rng_seed: argument 'r' is NULL"},
    {"sp_rng_u32", K_REFUSED, c14, "sp_rng_u32: argument 'r' is NULL"},
    {"sp_rng_uniform", K_REFUSED, c15, "sp_rng_uniform: argument 'r' is NULL"},
    {"sp_rng_uniform_range", K_REFUSED, c16, "sp_rng_uniform_range: argument 'r' is NULL"},
    {"sp_rng_normal", K_REFUSED, c17, "sp_rng_normal: argument 'r' is NULL"},
    {"sp_rng_below", K_REFUSED, c18, "sp_rng_below: argument 'r' is NULL"},
    {"sp_rng_shuffle", K_REFUSED, c19, "sp_rng_shuffle: argument 'r' is NULL"},
    {"sp_rng_shuffle", K_REFUSED, c20, "sp_rng_shuffle: argument 'n' is -1"},
    {"sp_fail", K_TRY, c21, "sp_fail: argument 'fmt' is NULL"},
    {"sp_try", K_STATUS, c22, "sp_try: argument 'fn' is NULL"},
    {"sp_error", K_STATUS, c23, "sp_error: argument 'fmt' is NULL"},
    {"sp_error_prefix", K_STATUS, c24, "sp_error_prefix: argument 'fmt' is NULL"},
    {"sp_check_ptr", K_TRY, c25, ""},
    {"sp_xrealloc", K_ACCEPT, c26, ""},   /* NULL is a documented value */
    {"sp_xstrdup", K_REFUSED, c27, "sp_xstrdup: argument 's' is NULL"},
    {"sp_file_alloc", K_ACCEPT, c28, ""},   /* NULL is a documented value */
    {"sp_shape_str", K_REFUSED, c29, "sp_shape_str: argument 't' is NULL"},
    {"sp_csr_alloc", K_REFUSED, c30, "sp_csr_alloc: argument 'm' is NULL"},
    {"sp_csr_free", K_NOOP, c31, "?"},
    {"sp_csr_bytes", K_REFUSED, c32, "sp_csr_bytes: argument 'm' is NULL"},
    {"sp_param_new", K_REFUSED, c33, "sp_param_new: argument 'owner' is NULL"},
    {"sp_param_new", K_REFUSED, c34, "sp_param_new: argument 'ndim' is -1"},
    {"sp_buffer_new", K_REFUSED, c35, "sp_buffer_new: argument 'owner' is NULL"},
    {"sp_buffer_new", K_REFUSED, c36, "sp_buffer_new: argument 'ndim' is -1"},
    {"sp_layer_free", K_NOOP, c37, "?"},
    {"sp_fill_uniform", K_REFUSED, c38, "sp_fill_uniform: argument 't' is NULL"},
    {"sp_arena_init", K_REFUSED, c39, "sp_arena_init: argument 'a' is NULL"},
    {"sp_arena_init_on", K_REFUSED, c40, "sp_arena_init_on: argument 'a' is NULL"},
    {"sp_arena_free", K_NOOP, c41, "?"},
    {"sp_arena_alloc", K_REFUSED, c42, "sp_arena_alloc: argument 'a' is NULL"},
    {"sp_arena_calloc", K_REFUSED, c43, "sp_arena_calloc: argument 'a' is NULL"},
    {"sp_arena_reset", K_REFUSED, c44, "sp_arena_reset: argument 'a' is NULL"},
    {"sp_arena_base", K_REFUSED, c45, "sp_arena_base: argument 'a' is NULL"},
    {"sp_tape_init", K_REFUSED, c46, "sp_tape_init: argument 't' is NULL"},
    {"sp_tape_free", K_NOOP, c47, "?"},
    {"sp_tape_reset", K_REFUSED, c48, "sp_tape_reset: argument 't' is NULL"},
    {"sp_tape_input", K_REFUSED, c49, "sp_tape_input: argument 't' is NULL"},
    {"sp_apply", K_REFUSED, c50, "sp_apply: argument 't' is NULL"},
    {"sp_apply_n", K_REFUSED, c51, "sp_apply_n: argument 't' is NULL"},
    {"sp_apply2", K_REFUSED, c52, "sp_apply2: argument 't' is NULL"},
    {"sp_apply_loss", K_REFUSED, c53, "sp_apply_loss: argument 't' is NULL"},
    {"sp_node_label", K_REFUSED, c54, "sp_node_label: argument 'n' is NULL"},
    {"sp_tape_alloc", K_REFUSED, c55, "sp_tape_alloc: argument 't' is NULL"},
    {"sp_tape_tensor", K_REFUSED, c56, "sp_tape_tensor: argument 't' is NULL"},
    {"sp_tape_tensor", K_REFUSED, c57, "sp_tape_tensor: argument 'ndim' is -1"},
    {"sp_tape_tensor_like", K_REFUSED, c58, "sp_tape_tensor_like: argument 't' is NULL"},
    {"sp_tape_alloc_on", K_REFUSED, c59, "sp_tape_alloc_on: argument 't' is NULL"},
    {"sp_tape_tensor_on", K_REFUSED, c60, "sp_tape_tensor_on: argument 't' is NULL"},
    {"sp_tape_tensor_on", K_REFUSED, c61, "sp_tape_tensor_on: argument 'ndim' is -1"},
    {"sp_model_new", K_NULL, c62, "sp_model_new: argument 'name' is NULL"},
    {"sp_model_set_loss", K_STATUS, c63, "sp_model_set_loss: argument 'm' is NULL"},
    {"sp_model_free", K_NOOP, c64, "?"},
    {"sp_model_add", K_STATUS, c65, "sp_model_add: the model is NULL"},
    {"sp_model_add_from", K_STATUS, c66, "sp_model_add_from: argument 'm' is NULL"},
    {"sp_model_layer_label", K_NULL, c67, "sp_model_layer_label: argument 'm' is NULL"},
    {"sp_model_last", K_STATUS, c68, "sp_model_last: argument 'm' is NULL"},
    {"sp_model_is_chain", K_STATUS, c69, "sp_model_is_chain: argument 'm' is NULL"},
    {"sp_model_init", K_STATUS, c70, "sp_model_init: argument 'm' is NULL"},
    {"sp_model_forward", K_NULL, c71, "sp_model_forward: argument 'm' is NULL"},
    {"sp_model_forward_shapes", K_NULL, c72, "sp_model_forward_shapes: argument 'm' is NULL"},
    {"sp_model_loss", K_NULL, c73, "sp_model_loss: argument 'm' is NULL"},
    {"sp_model_param", K_NULL, c74, "sp_model_param: argument 'm' is NULL"},
    {"sp_model_nstate", K_STATUS, c75, "sp_model_nstate: argument 'm' is NULL"},
    {"sp_model_state", K_NULL, c76, "sp_model_state: argument 'm' is NULL"},
    {"sp_model_summary", K_STATUS, c77, "sp_model_summary: argument 'm' is NULL"},
    {"sp_model_set_training", K_STATUS, c78, "sp_model_set_training: argument 'm' is NULL"},
    {"sp_model_zero_grad", K_STATUS, c79, "sp_model_zero_grad: argument 'm' is NULL"},
    {"sp_model_numel", K_STATUS, c80, "sp_model_numel: argument 'm' is NULL"},
    {"sp_engine_create", K_NULL, c81, "sp_engine_create: argument 'name' is NULL"},
    {"sp_engine_destroy", K_NOOP, c82, "?"},
    {"sp_backward", K_STATUS, c83, "sp_backward: the engine is NULL"},
    {"sp_engine_caps", K_STATUS, c84, "sp_engine_caps: argument 'name' is NULL"},
    {"sp_engine_names_with", K_NULL, c85, "sp_engine_names_with: argument 'buf' is NULL"},
    {"sp_engine_def_find", K_NULL, c255, "sp_engine_def_find: argument 'name' is NULL"},
    {"sp_engine_own_opts", K_NULL, c256, "sp_engine_own_opts: argument 'd' is NULL"},
    {"sp_run_engine_own", K_NULL, c257, "sp_run_engine_own: argument 'o' is NULL"},
    {"sp_run_engine_int", K_STATUS, c258, "sp_run_engine_int: argument 'o' is NULL"},
    {"sp_backward_async", K_STATUS, c86, "sp_backward_async: argument 'e' is NULL"},
    {"sp_engine_sync", K_STATUS, c87, "sp_engine_sync: argument 'e' is NULL"},
    {"sp_engine_wait_layer", K_STATUS, c88, "sp_engine_wait_layer: argument 'e' is NULL"},
    {"sp_engine_set_graph", K_STATUS, c89, "sp_engine_set_graph: argument 'e' is NULL"},
    {"sp_engine_set_step_capture", K_STATUS, c90, "sp_engine_set_step_capture: argument 'e' is NULL"},
    {"sp_engine_check", K_STATUS, c91, "sp_engine_check: argument 'e' is NULL"},
    {"sp_engine_report", K_STATUS, c92, "sp_engine_report: argument 'e' is NULL"},
    {"sp_engine_plan", K_STATUS, c93, "sp_engine_plan: argument 'e' is NULL"},
    {"sp_mark_needs_grad", K_STATUS, c94, "sp_mark_needs_grad: argument 't' is NULL"},
    {"sp_alloc_grads", K_STATUS, c95, "sp_alloc_grads: argument 't' is NULL"},
    {"sp_set_threads", K_REFUSED, c96, "--threads -1"},
    {"sp_parallel_for", K_REFUSED, c97, "sp_parallel_for: argument 'fn' is NULL"},
    {"sp_parallel_set_help_notify", K_ACCEPT, c98, ""},   /* NULL is a documented value */
    {"sp_data_format_find", K_ACCEPT, c98b, ""},          /* NULL: no such format */
    {"sp_spin_until", K_REFUSED, c99, "sp_spin_until: argument 'done' is NULL"},
    {"sp_st_open", K_NULL, c100, "sp_st_open: the path is NULL"},
    {"sp_st_close", K_NOOP, c101, "?"},
    {"sp_st_path", K_NULL, c102, "sp_st_path: argument 'f' is NULL"},
    {"sp_st_count", K_STATUS, c103, "sp_st_count: argument 'f' is NULL"},
    {"sp_st_at", K_NULL, c104, "sp_st_at: argument 'f' is NULL"},
    {"sp_st_find", K_NULL, c105, "sp_st_find: argument 'f' is NULL"},
    {"sp_st_metadata", K_NULL, c106, "sp_st_metadata: argument 'f' is NULL"},
    {"sp_st_read_f32", K_STATUS, c107, "sp_st_read_f32: the file is NULL"},
    {"sp_st_read_f32", K_STATUS, c108, "sp_st_read_f32: argument 'ndim' is -1"},
    {"sp_st_read_i32", K_STATUS, c109, "sp_st_read_i32: argument 'f' is NULL"},
    {"sp_st_read_i32", K_STATUS, c110, "sp_st_read_i32: argument 'ndim' is -1"},
    {"sp_st_shape_problem", K_STATUS, c111, "sp_st_shape_problem: argument 't' is NULL"},
    {"sp_st_shape_problem", K_STATUS, c112, "sp_st_shape_problem: argument 'ndim' is -1"},
    {"sp_st_dtype_name", K_NULL, c_dtn, "sp_st_dtype_name: argument 'dt' is 99"},
    {"sp_st_dtype_name", K_NULL, c_dtn2, "sp_st_dtype_name: argument 'dt' is -1"},
    {"sp_st_dtype_size", K_STATUS, c_dts, "sp_st_dtype_size: argument 'dt' is 99"},
    {"sp_st_read_raw", K_STATUS, c113, "sp_st_read_raw: argument 'f' is NULL"},
    {"sp_st_write", K_STATUS, c114, "sp_st_write: the path is NULL"},
    {"sp_st_save", K_STATUS, c115, "sp_st_save: the path is NULL"},
    {"sp_model_save", K_STATUS, c116, "sp_model_save: argument 'm' is NULL"},
    {"sp_model_load", K_STATUS, c117, "sp_model_load: the model is NULL"},
    {"sp_check_finite_f32", K_STATUS, c118, "sp_check_finite_f32: argument 'f' is NULL"},
    {"sp_model_check_finite", K_STATUS, c259, "sp_model_check_finite: argument 'm' is NULL"},
    {"sp_model_check_saved_name", K_STATUS, c119, "sp_model_check_saved_name: argument 'f' is NULL"},
    {"sp_maxpool2d", K_NULL, c261, "maxpool2d: kernel -1"},
    {"sp_avgpool2d", K_NULL, c262, "avgpool2d: kernel 2, stride -1"},
    {"sp_dropout", K_NULL, c263, "dropout: p = -0.5"},
    {"sp_zoo_lenet", K_NULL, c264, "lenet: input 30x30"},
    {"sp_zoo_vgg11", K_NULL, c265, "vgg11: in_channels -1 (expected positive)"},
    {"sp_zoo_rnn", K_NULL, c266, "rnn: hidden -1 (expected positive)"},
    {"sp_zoo_gru", K_NULL, c267, "gru: classes 0 (expected positive)"},
    {"sp_zoo_mlp", K_NULL, c268, "mlp: input -1 (expected positive)"},
    {"sp_zoo_resnet20", K_NULL, c269, "resnet20: classes -1 (expected positive)"},
    {"sp_optim_device", K_NULL, c270, "optim: no cpu updates"},
    {"sp_lr_at", K_STATUS, c271, "sp_lr_at: argument 't' is -1"},
    {"sp_zoo_model", K_NULL, c272, "--model nope: unknown model"},
    {"sp_apply_fused_relu", K_REFUSED, c273, "sp_apply_fused_relu: argument 't' is NULL"},
    {"sp_apply_over_fused", K_REFUSED, c274, "sp_apply_over_fused: argument 't' is NULL"},
    {"sp_tape_arena_like", K_REFUSED, c275, "sp_tape_arena_like: argument 't' is NULL"},
    {"sp_model_fuses_relu", K_STATUS, c276, "sp_model_fuses_relu: argument 'm' is NULL"},
    {"sp_apply_fused_relu_next", K_REFUSED, c277, "sp_apply_fused_relu_next: argument 't' is NULL"},
    {"sp_model_fuses_relu_next", K_STATUS, c278, "sp_model_fuses_relu_next: argument 'm' is NULL"},
    {"sp_linear", K_NULL, c120, "sp_linear: argument 'name' is NULL"},
    {"sp_conv2d", K_NULL, c121, "sp_conv2d: argument 'name' is NULL"},
    {"sp_batchnorm2d", K_NULL, c122, "sp_batchnorm2d: argument 'name' is NULL"},
    {"sp_batchnorm2d_relu", K_NULL, c253b, "sp_batchnorm2d_relu: argument 'name' is NULL"},
    {"sp_conv2d_groups", K_NULL, c123, "sp_conv2d_groups: argument 'name' is NULL"},
    {"sp_conv2d_nobias", K_NULL, c124, "sp_conv2d_nobias: argument 'name' is NULL"},
    {"sp_rnn", K_NULL, c125, "sp_rnn: argument 'name' is NULL"},
    {"sp_gru", K_NULL, c126, "sp_gru: argument 'name' is NULL"},
    {"sp_sgd_new", K_NULL, c127, "sp_sgd_new: argument 'params' is NULL"},
    {"sp_sgd_new", K_NULL, c128, "sp_sgd_new: argument 'n' is -1"},
    {"sp_adam_new", K_NULL, c129, "sp_adam_new: argument 'params' is NULL"},
    {"sp_adam_new", K_NULL, c130, "sp_adam_new: argument 'n' is -1"},
    {"sp_optim_create", K_NULL, c131, "sp_optim_create: argument 'name' is NULL"},
    {"sp_optim_create", K_NULL, c132, "sp_optim_create: argument 'n' is -1"},
    {"sp_optim_step", K_STATUS, c133, "sp_optim_step: argument 'o' is NULL"},
    {"sp_optim_step_params", K_STATUS, c134, "sp_optim_step_params: argument 'o' is NULL"},
    {"sp_optim_step_params", K_STATUS, c135, "sp_optim_step_params: argument 'k' is -1"},
    {"sp_optim_zero_grad", K_STATUS, c136, "sp_optim_zero_grad: argument 'o' is NULL"},
    {"sp_optim_set_zero_in_step", K_STATUS, c137, "sp_optim_set_zero_in_step: argument 'o' is NULL"},
    {"sp_optim_set_lr", K_STATUS, c138, "sp_optim_set_lr: argument 'o' is NULL"},
    {"sp_optim_get_lr", K_STATUS, c139, "sp_optim_get_lr: argument 'o' is NULL"},
    {"sp_optim_device_scalars", K_STATUS, c140, "sp_optim_device_scalars: argument 'o' is NULL"},
    {"sp_optim_stage_scalars", K_STATUS, c141, "sp_optim_stage_scalars: argument 'o' is NULL"},
    {"sp_optim_name", K_NULL, c142, "sp_optim_name: argument 'o' is NULL"},
    {"sp_optim_free", K_NOOP, c143, "?"},
    {"sp_optim_alloc", K_NULL, c144, "sp_optim_alloc: argument 'name' is NULL"},
    {"sp_optim_alloc", K_NULL, c145, "sp_optim_alloc: argument 'n' is -1"},
    {"sp_optim_alloc", K_NULL, c146, "sp_optim_alloc: argument 'nstate' is -1"},
    {"sp_optim_for", K_STATUS, c147, "sp_optim_for: argument 'fn' is NULL"},
    {"sp_optim_register_device", K_STATUS, c148, "sp_optim_register_device: argument 'ops' is NULL"},
    {"sp_lr_parse", K_STATUS, c149, "--lr-schedule: missing"},
    {"sp_lr_at", K_STATUS, c150, "sp_lr_at: argument 's' is NULL"},
    {"sp_dataset_sample_numel", K_STATUS, c151, "sp_dataset_sample_numel: argument 'd' is NULL"},
    {"sp_dataset_get", K_STATUS, c152, "sp_dataset_get: argument 'd' is NULL"},
    {"sp_dataset_normalize", K_STATUS, c153, "sp_dataset_normalize: argument 'd' is NULL"},
    {"sp_dataset_normalize", K_STATUS, c154, "sp_dataset_normalize: argument 'nch' is -1"},
    {"sp_dataset_free", K_NOOP, c155, "?"},
    {"sp_dataset_new_u8", K_NULL, c156, "sp_dataset_new_u8: argument 'name' is NULL"},
    {"sp_dataset_new_u8", K_NULL, c157, "sp_dataset_new_u8: argument 'n' is -1"},
    {"sp_dataset_new_u8", K_NULL, c158, "sp_dataset_new_u8: argument 'ndim' is -1"},
    {"sp_dataset_new_f32", K_NULL, c159, "sp_dataset_new_f32: argument 'name' is NULL"},
    {"sp_dataset_new_f32", K_NULL, c160, "sp_dataset_new_f32: argument 'n' is -1"},
    {"sp_dataset_new_f32", K_NULL, c161, "sp_dataset_new_f32: argument 'ndim' is -1"},
    {"sp_dataset_check_labels", K_STATUS, c162, "sp_dataset_check_labels: argument 'd' is NULL"},
    {"sp_dataset_check_finite", K_STATUS, c163, "sp_dataset_check_finite: argument 'd' is NULL"},
    {"sp_dataset_pad", K_STATUS, c164, "sp_dataset_pad: argument 'd' is NULL"},
    {"sp_dataset_save", K_STATUS, c165, "sp_dataset_save: argument 'd' is NULL"},
    {"sp_idx_open", K_NULL, c166, "sp_idx_open: argument 'images_path' is NULL"},
    {"sp_fashion_mnist", K_NULL, c167, "sp_fashion_mnist: argument 'dir' is NULL"},
    {"sp_cifar10", K_NULL, c168, "sp_cifar10: argument 'dir' is NULL"},
    {"sp_dataset_read_rows", K_STATUS, c_rows0, "sp_dataset_read_rows: argument 'd' is NULL"},
    {"sp_idx_open_rows", K_NULL, c_rows1, "sp_idx_open_rows: argument 'images_path' is NULL"},
    {"sp_fashion_mnist_rows", K_NULL, c_rows2, "sp_fashion_mnist_rows: argument 'dir' is NULL"},
    {"sp_cifar10_rows", K_NULL, c_rows3, "sp_cifar10_rows: argument 'dir' is NULL"},
    {"sp_loader_rows", K_STATUS, c_rows4, "sp_loader_rows: argument 'd' is NULL"},
    {"sp_loader_rows", K_STATUS, c_rows5, "sp_loader_rows: argument 'batches' is -1"},
    {"sp_image_folder", K_NULL, c169, "sp_image_folder: the root folder is NULL"},
    {"sp_image_folder_class", K_NULL, c170, "sp_image_folder_class: argument 'd' is NULL"},
    {"sp_image_folder_match_classes", K_STATUS, c171, "sp_image_folder_match_classes: test is NULL"},
    {"sp_seqset_open", K_NULL, c172, "sp_seqset_open: argument 'path' is NULL"},
    {"sp_bitstream", K_NULL, c173, "n = -1"},
    {"sp_synthetic_sequences", K_NULL, c174, "n = -1"},
    {"sp_loader_new", K_NULL, c175, "sp_loader_new: the dataset is NULL"},
    {"sp_loader_new_sync", K_NULL, c177, "sp_loader_new: the dataset is NULL"},
    {"sp_loader_next", K_STATUS, c179, "sp_loader_next: argument 'l' is NULL"},
    {"sp_loader_set_epoch", K_STATUS, c180, "sp_loader_set_epoch: argument 'l' is NULL"},
    {"sp_loader_reset_epoch", K_STATUS, c181, "sp_loader_reset_epoch: argument 'l' is NULL"},
    {"sp_loader_epoch", K_STATUS, c182, "sp_loader_epoch: argument 'l' is NULL"},
    {"sp_loader_nbatches", K_STATUS, c183, "sp_loader_nbatches: argument 'l' is NULL"},
    {"sp_loader_batch", K_STATUS, c184, "sp_loader_batch: argument 'l' is NULL"},
    {"sp_loader_free", K_NOOP, c185, "?"},
    {"sp_train", K_RESULT, c186, "sp_train: the model is NULL"},
    {"sp_evaluate", K_STATUS, c187, "sp_evaluate: argument 'm' is NULL"},
    {"sp_train_step", K_RESULT, c188, "sp_train_step: argument 'm' is NULL"},
    {"sp_train_step_accum", K_STATUS, c188b, "sp_train_step_accum: argument 'm' is NULL"},
    {"sp_batchnorm2d_set_reduce", K_STATUS, c188c, "sp_batchnorm2d_set_reduce: argument 'l' is NULL"},
    {"sp_layer_is_batchnorm", K_ACCEPT, c188d, ""},   /* NULL: not batch norm (false) */
    {"sp_step_graph_new", K_NULL, c189, "sp_step_graph_new: argument 'm' is NULL"},
    {"sp_step_graph_step", K_NULL, c190, "sp_step_graph_step: argument 'g' is NULL"},
    {"sp_step_graph_counts", K_STATUS, c191, "sp_step_graph_counts: argument 'g' is NULL"},
    {"sp_step_graph_free", K_NOOP, c192, "?"},
    {"sp_flags_parse", K_TRY, c193, "sp_flags_parse: argument 'argv' is NULL"},
    {"sp_flags_parse", K_TRY, c194, "sp_flags_parse: argument 'argc' is -1"},
    {"sp_flags_parse_among", K_TRY, c195, "sp_flags_parse_among: argument 'argv' is NULL"},
    {"sp_flags_parse_among", K_TRY, c196, "sp_flags_parse_among: argument 'argc' is -1"},
    {"sp_flag_given", K_TRY, c197, "sp_flag_given: argument 'name' is NULL"},
    {"sp_flag_suggest", K_TRY, c260, "sp_flag_suggest: argument 'value' is NULL"},
    {"sp_flags_digest", K_TRY, c198, "sp_flags_digest: argument 'out' is NULL"},
    {"sp_flags_digest", K_TRY, c199, "sp_flags_digest: argument 'cap' is -1"},
    {"sp_flag_value_text", K_TRY, c200, "sp_flag_value_text: argument 'name' is NULL"},
    {"sp_json_begin", K_STATUS, c201, "sp_json_begin: argument 'j' is NULL"},
    {"sp_json_str", K_STATUS, c202, "sp_json_str: argument 'j' is NULL"},
    {"sp_json_num", K_STATUS, c203, "sp_json_num: argument 'j' is NULL"},
    {"sp_json_int", K_STATUS, c204, "sp_json_int: argument 'j' is NULL"},
    {"sp_json_raw", K_STATUS, c205, "sp_json_raw: argument 'j' is NULL"},
    {"sp_json_end_print", K_STATUS, c206, "sp_json_end_print: argument 'j' is NULL"},
    {"sp_json_writer", K_NULL, c207, "sp_json_writer: argument 'j' is NULL"},
    {"sp_output_close", K_TRY, c208, "sp_output_close: argument 'what' is NULL"},
    {"sp_run_defaults", K_TRY, c209, "sp_run_defaults: argument 'o' is NULL"},
    {"sp_run_parse", K_TRY, c210, "sp_run_parse: argument 'argv' is NULL"},
    {"sp_run_parse", K_TRY, c211, "sp_run_parse: argument 'argc' is -1"},
    {"sp_run", K_TRY, c212, "sp_run: argument 'app' is NULL"},
    {"sp_run_open_images", K_TRY, c213, "sp_run_open_images: argument 'o' is NULL"},
    {"sp_run_check_synthetic", K_TRY, c214, "sp_run_check_synthetic: argument 'o' is NULL"},
    {"sp_run_use_device", K_TRY, c215, "sp_run_use_device: argument 'o' is NULL"},
    {"sp_run_device_to_host", K_TRY, c216, "sp_run_device_to_host: argument 'm' is NULL"},
    {"sp_run_engine_opts", K_TRY, c217, "sp_run_engine_opts: argument 'o' is NULL"},
    {"sp_run_open", K_TRY, c218, "sp_run_open: argument 's' is NULL"},
    {"sp_run_plan", K_TRY, c219, "sp_run_plan: argument 's' is NULL"},
    {"sp_run_step", K_TRY, c220, "sp_run_step: argument 's' is NULL"},
    {"sp_run_prints", K_TRY, c221, "sp_run_prints: argument 's' is NULL"},
    {"sp_run_save", K_TRY, c222, "sp_run_save: argument 's' is NULL"},
    {"sp_run_close", K_TRY, c223, "sp_run_close: argument 's' is NULL"},
    {"sp_run_summary_begin", K_TRY, c224, "sp_run_summary_begin: argument 's' is NULL"},
    {"sp_run_summary_engine", K_TRY, c225, "sp_run_summary_engine: argument 's' is NULL"},
    {"sp_run_summary_train", K_TRY, c226, "sp_run_summary_train: argument 's' is NULL"},
    {"sp_run_summary_exec", K_TRY, c227, "sp_run_summary_exec: argument 's' is NULL"},
    {"sp_run_summary_data", K_TRY, c_sumdata, "sp_run_summary_data: argument 'j' is NULL"},
    {"sp_zoo_model", K_NULL, c228, "sp_zoo_model: argument 'name' is NULL"},
    {"sp_zoo_input_shape", K_STATUS, c229, "sp_zoo_input_shape: argument 'name' is NULL"},
    {"sp_clip_grad_norm", K_STATUS, c230, "sp_clip_grad_norm: argument 'params' is NULL"},
    {"sp_clip_grad_norm", K_STATUS, c231, "sp_clip_grad_norm: argument 'n' is -1"},
    {"sp_grad_sq_norm", K_STATUS, c232, "sp_grad_sq_norm: argument 'params' is NULL"},
    {"sp_grad_sq_norm", K_STATUS, c233, "sp_grad_sq_norm: argument 'n' is -1"},
    {"sp_grad_scale", K_STATUS, c234, "sp_grad_scale: argument 'params' is NULL"},
    {"sp_grad_scale", K_STATUS, c235, "sp_grad_scale: argument 'n' is -1"},
    {"sp_optim_set_clip_grad_norm", K_STATUS, c236, "sp_optim_set_clip_grad_norm: argument 'o' is NULL"},
    {"sp_optim_last_grad_norm", K_STATUS, c237, "sp_optim_last_grad_norm: argument 'o' is NULL"},
    {"sp_optim_undo_save", K_STATUS, c238, "sp_optim_undo_save: argument 'u' is NULL"},
    {"sp_optim_undo_restore", K_STATUS, c239, "sp_optim_undo_restore: argument 'u' is NULL"},
    {"sp_optim_undo_clear", K_NOOP, c240, "?"},
    {"sp_optim_undo_free", K_NOOP, c241, "?"},
    {"sp_dataset_label", K_STATUS, c242, "sp_dataset_label: argument 'd' is NULL"},
    {"sp_loader_new_rows", K_NULL, c243, "sp_loader_new: the dataset is NULL"},
    {"sp_loader_new_rows_sync", K_NULL, c254, "sp_loader_new: the dataset is NULL"},
    {"sp_loader_samples_read", K_STATUS, c244, "sp_loader_samples_read: argument 'l' is NULL"},
    {"sp_loader_labels_read", K_STATUS, c245, "sp_loader_labels_read: argument 'l' is NULL"},
    {"sp_loader_bytes_read", K_STATUS, c246, "sp_loader_bytes_read: argument 'l' is NULL"},
    {"sp_dataset_bytes", K_ACCEPT, c247, ""},   /* NULL is a documented value: 0 bytes */
    {"sp_run_summary_memory", K_TRY, c248, "sp_run_summary_memory: argument 's' is NULL"},
    {"sp_arena_trim", K_REFUSED, c249, "sp_arena_trim: argument 'a' is NULL"},
    {"sp_arena_mark_get", K_REFUSED, c250, "sp_arena_mark_get: argument 'a' is NULL"},
    {"sp_arena_release", K_REFUSED, c251, "sp_arena_release: argument 'a' is NULL"},
    {"sp_tape_trim", K_REFUSED, c252, "sp_tape_trim: argument 't' is NULL"},
    {"sp_apply_over", K_REFUSED, c253, "sp_apply_over: argument 't' is NULL"},
    {"sp_tensor_view", K_REFUSED, m_view_ndim, "sp_tensor_view: argument 'ndim' is 5 (expected 1..4)"},
    {"sp_tensor_2d", K_REFUSED, m_view_dim, "sp_tensor_view: dimension 1 of the shape is -3"},
    {"sp_tensor_4d", K_REFUSED, m_view_huge, "sp_tensor_view: a shape of more elements than memory can hold"},
    {"sp_tensor_new", K_REFUSED, m_new_ndim0, "sp_tensor_new: argument 'ndim' is 0 (expected 1..4)"},
    {"sp_tensor_zero", K_REFUSED, m_zero_view, "sp_tensor_zero: argument 't' has no data"},
    {"sp_tensor_copy", K_REFUSED, m_copy_sizes, "sp_tensor_copy: dst has 6 elements, src 4"},
    {"sp_rng_below", K_REFUSED, m_below_0, "sp_rng_below: argument 'n' is 0"},
    {"sp_csr_alloc", K_REFUSED, m_csr_rows, "sp_csr_alloc: argument 'rows' is -1"},
    {"sp_csr_alloc", K_REFUSED, m_csr_nnz, "sp_csr_alloc: argument 'nnz' is 1099511627776"},
    {"sp_param_new", K_REFUSED, m_param_fifth, "layer 'fc': too many parameters"},
    {"sp_fill_uniform", K_REFUSED, m_fill_view, "sp_fill_uniform: argument 't' has no data"},
    {"sp_arena_alloc", K_REFUSED, m_arena_huge, "sp_arena_alloc: 18446744073709551615 bytes"},
    {"sp_arena_release", K_REFUSED, m_arena_mark, "sp_arena_release: argument 'm' is not a mark of this arena"},
    {"sp_arena_init_on", K_REFUSED, m_arena_source, "sp_arena_init_on: argument 'src' has no block_new"},
    {"sp_tape_input", K_REFUSED, m_input_ndim, "sp_tape_input: argument 'x' has ndim 7"},
    {"sp_apply", K_REFUSED, m_apply_shape, "linear fc1: input [2, 7]"},
    {"sp_apply", K_REFUSED, m_apply_tape, "op relu: input 0 is a node of another tape"},
    {"sp_apply_n", K_REFUSED, m_apply_arity, "op relu: applied to 2 inputs, expected 1"},
    {"sp_apply_over", K_REFUSED, m_apply_over, "op linear: cannot write its output over its input"},
    {"sp_apply_fused_relu", K_REFUSED, m_fused_relu, "op relu: no forward with a ReLU folded in on"},
    {"sp_apply_over_fused", K_REFUSED, m_over_fused, "op linear: not a ReLU"},
    {"sp_apply_fused_relu_next", K_REFUSED, m_fused_next, "op flatten: no forward by ranges of samples on cpu"},
    {"sp_apply_fused_relu_next", K_REFUSED, m_fused_next_shape, "maxpool2d: input [2, 2, 6, 6]"},
    {"sp_apply_loss", K_REFUSED, m_loss_label, "softmax_ce: label 7 of sample 1 out of range [0, 7)"},
    {"sp_apply_loss", K_REFUSED, m_loss_nolabels, "sp_apply_loss: argument 'labels' is NULL"},
    {"sp_tape_tensor_on", K_REFUSED, m_tensor_dev, "sp_tape_tensor_on: argument 'dev' is 7"},
    {"sp_node_x", K_REFUSED, m_node_x, "sp_node_x: argument 'n' is NULL"},
    {"sp_node_in", K_REFUSED, m_node_in, "sp_node_in: argument 'i' is 0 (the node has 0 inputs)"},
    {"sp_node_has_jt", K_REFUSED, m_node_has_jt, "sp_node_has_jt: argument 'n' is NULL"},
    {"sp_set_threads", K_REFUSED, m_threads_65, "--threads 65: expected 1..64"},
    {"sp_refuse", K_REFUSED, m_refuse, "sp_refuse: argument 'fmt' is NULL"},
    {"sp_shape_check", K_REFUSED, m_shape_check, "sp_shape_check: argument 'what' is NULL"},
    {"sp_shape_str", K_REFUSED, m_shape_str_ndim, "sp_shape_str: argument 't' has ndim 9"},
};

/* Declared with no pointer or count argument: nothing to pass wrong. */
static const char *const no_pointer_or_count[] = {
    "sp_flags_quiet_rank",
    "sp_flags_quiet_begin",
    "sp_flags_quiet_end",
    "sp_rss_kib",
    "sp_clip_coef",
    "sp_last_error",
    "sp_clear_error",
    "sp_check",
    "sp_xmalloc",
    "sp_xcalloc",
    "sp_set_file_alloc_limit",
    "sp_file_alloc_limit",
    "sp_engine_names",
    "sp_engine_aliases",
    "sp_data_format_count",
    "sp_data_format_at",      /* an index: NULL outside [0, count) */
    "sp_data_format_names",
    "sp_engine_def_at",
    "sp_engine_opts_default",
    "sp_backward_cuda_register",
    "sp_get_threads",
    "sp_parallel_set_node_procs",
    "sp_parallel_spare_core",
    "sp_flush_denormals",
    "sp_denormals_flushed",
    "sp_parallel_set_inline",
    "sp_parallel_help",
    "sp_parallel_help_open",
    "sp_cpu_relax",
    "sp_now",
    "sp_st_dtype_is_float",
    "sp_relu",
    "sp_tanh",
    "sp_sigmoid",
    "sp_flatten",
    "sp_global_avgpool2d",
    "sp_add",
    "sp_add_relu",
    "sp_concat",
    "sp_softmax_ce",
    "sp_layers_cuda_register",
    "sp_optim_cfg_default",
    "sp_optim_cuda_register",
    "sp_train_cfg_default",
    "sp_stdout_check",
    "sp_zoo_names",
    "sp_cuda_start",
};

typedef struct api_call {
    void (*call)(void);
} api_call;

static void api_run(void *arg) { ((api_call *)arg)->call(); }

/* In a child process: 0 when the call kept its kind's promise, 3 when it returned
 * something else, 4 when its message does not name the argument, 5 when a K_REFUSED
 * call returned inside sp_try instead of ending there. */
static int api_probe(const api_case *c)
{
    sp_clear_error();
    g_status = SP_OK;
    g_ptr = &g_status;
    api_call a = {c->call};
    switch (c->kind) {
    case K_TRY:
        if (sp_try(api_run, &a) != SP_ERR) return 3;
        break;
    case K_NOOP:
    case K_ACCEPT:
        c->call();
        return 0;
    case K_REFUSED:   /* outside sp_try a failure value, no exit; inside, it ends there */
        c->call();
        if (g_status != SP_ERR) return 3;
        if (!strstr(sp_last_error(), c->says)) return 4;
        sp_clear_error();
        g_status = SP_OK;
        if (sp_try(api_run, &a) != SP_ERR) return 5;
        break;
    default:
        c->call();
        if (c->kind == K_NULL ? g_ptr != NULL : g_status != SP_ERR) return 3;
    }
    return strstr(sp_last_error(), c->says) ? 0 : 4;
}

/* Each case in its own child (a crash, a hang or an exit is that case's finding): every
 * public function given NULLs or a negative count keeps its kind's promise. They
 * crashed (sp_model_load(NULL, p), sp_loader_new(NULL, ...), sp_backward(e, NULL, l),
 * ...) or passed NULL on (sp_st_open(NULL) to stat). */
Test(api, every_public_function_checks_its_arguments, .timeout = 300)
{
    static const char *kinds[] = {"status", "NULL", "result", "sp_try", "no-op", "accepts NULL", "refused"};
    char bad[16384] = "";
    size_t len = 0;
    int nbad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        fflush(NULL);
        pid_t pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
            alarm(20);
            if (!freopen("/dev/null", "w", stderr)) _exit(5);
            _exit(api_probe(&cases[i]));
        }
        int st;
        cr_assert_eq(waitpid(pid, &st, 0), pid);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) continue;
        nbad++;
        if (len < sizeof bad - 200)
            len += (size_t)snprintf(bad + len, sizeof bad - len, "  case %zu %s (%s, \"%s\"): %s %d\n", i,
                                    cases[i].name, kinds[cases[i].kind], cases[i].says,
                                    WIFSIGNALED(st) ? "signal" : "exit", WIFSIGNALED(st) ? WTERMSIG(st)
                                                                                          : WEXITSTATUS(st));
    }
    cr_assert_eq(nbad, 0, "%d of %zu cases broke their promise (exit 3: wrong result, 4: message, 5: returned inside sp_try, "
                 "2: exited):\n%s",
                 nbad, sizeof cases / sizeof *cases, bad);
}

/* Names of the functions declared at file level in the header `path` and, recursively,
 * in the repository headers it includes (each header once). */
static void api_declared(const char *path, char (*seen)[128], int *nseen, char (*names)[64], int *n, int cap)
{
    for (int i = 0; i < *nseen; i++)
        if (strcmp(seen[i], path) == 0) return;
    snprintf(seen[(*nseen)++], 128, "%s", path);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s not found (run from the repository root)", path);
    char line[1024];
    bool comment = false;
    while (fgets(line, sizeof line, f)) {
        char inc[128];
        if (sscanf(line, "#include \"%127[^\"]\"", inc) == 1) {
            api_declared(inc, seen, nseen, names, n, cap);
            continue;
        }
        if (comment) {
            comment = !strstr(line, "*/");
            continue;
        }
        if (strncmp(line, "/*", 2) == 0) {
            comment = !strstr(line, "*/");
            continue;
        }
        if (line[0] == ' ' || line[0] == '#' || line[0] == '}' || strncmp(line, "typedef", 7) == 0) continue;
        char *paren = strchr(line, '(');
        if (!paren) continue;
        char *end = paren;
        while (end > line && end[-1] == ' ') end--;
        char *start = end;
        while (start > line && (isalnum((unsigned char)start[-1]) || start[-1] == '_')) start--;
        if (end - start < 4 || strncmp(start, "sp_", 3) != 0 || end - start >= 64) continue;
        cr_assert_lt(*n, cap);
        memcpy(names[*n], start, (size_t)(end - start));
        names[(*n)++][end - start] = 0;
    }
    fclose(f);
}

/* The table above names every function the public headers declare: a function added
 * later without a case fails here. */
Test(api, the_cases_cover_every_public_function)
{
    static char names[512][64], seen[64][128];
    int n = 0, nseen = 0;
    api_declared("scanprop.h", seen, &nseen, names, &n, 512);
    cr_assert_gt(n, 200, "only %d functions found in scanprop.h's headers", n);
    char missing[4096] = "";
    for (int i = 0; i < n; i++) {
        bool found = false;
        for (size_t k = 0; k < sizeof cases / sizeof *cases && !found; k++) found = strcmp(cases[k].name, names[i]) == 0;
        for (size_t k = 0; k < sizeof no_pointer_or_count / sizeof *no_pointer_or_count && !found; k++)
            found = strcmp(no_pointer_or_count[k], names[i]) == 0;
        if (!found && strlen(missing) + 70 < sizeof missing) strcat(strcat(missing, " "), names[i]);
    }
    cr_assert_eq(missing[0], 0, "declared in scanprop.h's headers with no case:%s", missing);
}
