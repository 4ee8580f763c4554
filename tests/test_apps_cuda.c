/* test_apps_cuda.c — the apps with --device cuda against --device cpu (make test-cuda on a
 * GPU, make test-cuda-emu through the emulator): same seed, same data, same steps, so the
 * losses must agree to 1e-4 (cuBLAS/cuDNN sum in another order than the CPU ops). The
 * image apps read a tiny IDX dataset written here (the 10k test images would take the
 * emulator minutes). Bad input: --device cuda without a device is one line, exit 2. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include "tests/testutil.h"

#define LOSS_TOL 1e-4

static void put_be32(FILE *f, uint32_t v)
{
    unsigned char b[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16), (unsigned char)(v >> 8),
                          (unsigned char)v};
    fwrite(b, 1, 4, f);
}

/* prefix-images-idx3-ubyte and prefix-labels-idx1-ubyte with n random 28x28 images. */
static void write_idx(const char *dir, const char *prefix, int n, unsigned seed)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte", dir, prefix);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    put_be32(f, 0x803);
    put_be32(f, (uint32_t)n);
    put_be32(f, 28);
    put_be32(f, 28);
    srand(seed);
    for (int i = 0; i < n * 28 * 28; i++) fputc(rand() % 256, f);
    fclose(f);
    snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte", dir, prefix);
    f = fopen(path, "wb");
    cr_assert_not_null(f);
    put_be32(f, 0x801);
    put_be32(f, (uint32_t)n);
    for (int i = 0; i < n; i++) fputc(rand() % 10, f);
    fclose(f);
}

static const char *tiny_idx(int ntrain, int ntest)
{
    static char dir[256];
    snprintf(dir, sizeof dir, "%s/idx-%d-%d", tu_tmpdir(), ntrain, ntest);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    cr_assert_eq(system(cmd), 0);
    write_idx(dir, "train", ntrain, 1);
    write_idx(dir, "t10k", ntest, 2);
    return dir;
}

/* Test files live in this test process's own temporary directory. */
static void cleanup(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tu_tmpdir());
    cr_assert_eq(system(cmd), 0);
}

/* The app on the CPU with args and on the device with args and gpu_args; the JSON keys
 * `keys` must agree. */
static void cpu_vs_cuda(const char *app, const char *args, const char *gpu_args, const char *const *keys, int nkeys)
{
    char cpu[8192], gpu[8192], cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s --device cpu --quiet", tu_bin(app), args);
    cr_assert_eq(tu_run_last(cmd, cpu, sizeof cpu), 0, "%s failed", cmd);
    snprintf(cmd, sizeof cmd, "%s %s %s --device cuda --quiet", tu_bin(app), args, gpu_args);
    cr_assert_eq(tu_run_last(cmd, gpu, sizeof gpu), 0, "%s failed", cmd);
    cr_assert(strstr(gpu, "\"device\": \"cuda\""), "JSON without the device: %s", gpu);
    cr_assert(strstr(cpu, "\"device\": \"cpu\""), "JSON without the device: %s", cpu);
    for (int i = 0; i < nkeys; i++) {
        double c = tu_json_num(cpu, keys[i]), g = tu_json_num(gpu, keys[i]);
        cr_assert(isfinite(g), "%s %s on cuda: %g", app, keys[i], g);
        cr_assert_leq(fabs(c - g), LOSS_TOL * fabs(c), "%s %s: cpu %.8g, cuda %.8g", app, keys[i], c, g);
    }
}

/* The app on both devices with the same arguments. */
static void same_on_both(const char *app, const char *args, const char *const *keys, int nkeys)
{
    cpu_vs_cuda(app, args, "", keys, nkeys);
}

Test(apps_cuda, demo_matches_cpu)
{
    static const char *const keys[] = {"first_loss", "last_loss"};
    same_on_both("demo", "--steps 30", keys, 2);
    same_on_both("demo", "--steps 10 --optim adam --lr 0.01", keys, 2);
}

Test(apps_cuda, lenet_matches_cpu)
{
    static const char *const keys[] = {"train_loss", "last_loss", "test_loss"};
    char args[512];
    snprintf(args, sizeof args, "--data-format mnist --data %s --steps 5 --batch 8", tiny_idx(64, 8));
    same_on_both("lenet", args, keys, 3);
    cleanup();
}

Test(apps_cuda, vgg11_matches_cpu)
{
    static const char *const keys[] = {"train_loss", "last_loss"};
    char args[512];
    snprintf(args, sizeof args, "--data-format mnist --data %s --steps 1 --batch 2", tiny_idx(4, 1));
    same_on_both("vgg11", args, keys, 2);
    cleanup();
}

Test(apps_cuda, checkpoint_saved_from_the_device_loads_on_the_cpu)
{
    char path[512], cmd[1024], a[8192], b[8192];
    snprintf(path, sizeof path, "%s/demo-dev.safetensors", tu_tmpdir());
    const char *dir = tiny_idx(16, 4);
    snprintf(cmd, sizeof cmd, "%s --data-format mnist --data %s --steps 2 --batch 4 --device cuda --quiet --save %s",
             tu_bin("lenet"), dir, path);
    cr_assert_eq(tu_run_last(cmd, a, sizeof a), 0, "%s", cmd);
    /* the saved weights, loaded on each device, give the same test loss */
    snprintf(cmd, sizeof cmd, "%s --data-format mnist --data %s --steps 1 --batch 4 --lr 1e-30 --device cpu --quiet "
             "--load %s", tu_bin("lenet"), dir, path);
    cr_assert_eq(tu_run_last(cmd, a, sizeof a), 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "%s --data-format mnist --data %s --steps 1 --batch 4 --lr 1e-30 --device cuda --quiet "
             "--load %s", tu_bin("lenet"), dir, path);
    cr_assert_eq(tu_run_last(cmd, b, sizeof b), 0, "%s", cmd);
    double c = tu_json_num(a, "test_loss"), g = tu_json_num(b, "test_loss");
    cr_assert_leq(fabs(c - g), LOSS_TOL * fabs(c), "test loss after load: cpu %.8g, cuda %.8g", c, g);
    cleanup();
}

/* No device: one line naming the problem, exit 2. A machine without a GPU is the
 * emulator's SCANPROP_EMU_NODEVICE=1 and, on a real GPU, CUDA_VISIBLE_DEVICES set empty
 * (the driver then reports no device); the command sets both, so the test means the same
 * on either. */
Test(apps_cuda, no_device_is_one_line_and_exit_2)
{
    char cmd[1024], err[4096];
    snprintf(cmd, sizeof cmd, "SCANPROP_EMU_NODEVICE=1 CUDA_VISIBLE_DEVICES= %s --steps 1 --device cuda --quiet 2>&1 >/dev/null",
             tu_bin("demo"));
    FILE *p = popen(cmd, "r");
    size_t n = fread(err, 1, sizeof err - 1, p);
    err[n] = 0;
    int st = pclose(p);
    cr_assert_eq(WEXITSTATUS(st), 2, "exit %d, message '%s'", WEXITSTATUS(st), err);
    cr_assert(strncmp(err, "scanprop: --device cuda: no CUDA device", 39) == 0, "message '%s'", err);
    cr_assert_eq(strchr(err, '\n'), err + n - 1, "expected one line, got '%s'", err);
    snprintf(cmd, sizeof cmd, "%s --steps 1 --device cuda --parallel ddp --quiet >/dev/null 2>&1", tu_bin("demo"));
    cr_assert_eq(tu_run_last(cmd, NULL, 0), 2, "--device cuda with --parallel should exit 2");
}

Test(apps_cuda, rnn_gru_match_cpu)
{
    static const char *const keys[] = {"train_loss", "last_loss"};
    same_on_both("rnn", "--steps 5 --batch 8 --seq-len 20", keys, 2);
    same_on_both("gru", "--steps 5 --batch 8 --shape S --samples 64", keys, 2);
}

/* --backward bppsa on the device (schedulers/backward/bppsa_cuda.cu) against the CPU's linear
 * engine: the scan's gradients are BPTT's up to summation order. */
Test(apps_cuda, rnn_gru_bppsa_on_the_device_match_cpu_linear)
{
    static const char *const keys[] = {"train_loss", "last_loss"};
    cpu_vs_cuda("rnn", "--steps 5 --batch 8 --seq-len 20", "--backward bppsa", keys, 2);
    cpu_vs_cuda("rnn", "--steps 5 --batch 8 --seq-len 20", "--backward bppsa --scan-levels 2", keys, 2);
    cpu_vs_cuda("gru", "--steps 5 --batch 8 --shape S --samples 64", "--backward bppsa", keys, 2);
}

/* The ooo engine on the device (issue 12): two prioritised streams with events, and the
 * backward replayed as a CUDA Graph; the losses of the CPU's linear engine to 1e-4. */
static void ooo_vs_cpu_linear(const char *app, const char *args, const char *ooo_args)
{
    static const char *const keys[] = {"train_loss", "last_loss"};
    char cpu[8192], gpu[8192], cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s --device cpu --quiet", tu_bin(app), args);
    cr_assert_eq(tu_run_last(cmd, cpu, sizeof cpu), 0, "%s failed", cmd);
    snprintf(cmd, sizeof cmd, "%s %s --device cuda --backward ooo %s --quiet", tu_bin(app), args, ooo_args);
    cr_assert_eq(tu_run_last(cmd, gpu, sizeof gpu), 0, "%s failed", cmd);
    cr_assert(strstr(gpu, "\"backward\": \"ooo\"") && strstr(gpu, "\"device\": \"cuda\""), "%s", gpu);
    for (int i = 0; i < 2; i++) {
        double c = tu_json_num(cpu, keys[i]), g = tu_json_num(gpu, keys[i]);
        cr_assert(isfinite(g), "%s %s on cuda: %g", app, keys[i], g);
        cr_assert_leq(fabs(c - g), LOSS_TOL * fabs(c), "%s %s: cpu linear %.8g, cuda ooo %.8g", app, keys[i], c, g);
    }
    if (strstr(ooo_args, "--cuda-graph")) {
        cr_assert_geq(tu_json_num(gpu, "graph_captures"), 1, "no step captured: %s", gpu);
        cr_assert_geq(tu_json_num(gpu, "graph_replays"), 1, "no step replayed: %s", gpu);
    }
}

Test(apps_cuda, lenet_ooo_list_matches_cpu_linear)
{
    char args[512];
    snprintf(args, sizeof args, "--data-format mnist --data %s --steps 4 --batch 8", tiny_idx(32, 4));
    ooo_vs_cpu_linear("lenet", args, "--order list");
    cleanup();
}

/* The next forward overlapping the last δW/U, over two epochs with a smaller last batch:
 * the epoch's last backward is joined before the next epoch's uploads and evaluation. */
Test(apps_cuda, lenet_ooo_overlap_two_epochs_matches_cpu_linear)
{
    char args[512];
    snprintf(args, sizeof args, "--data-format mnist --data %s --epochs 2 --batch 8", tiny_idx(20, 4));
    ooo_vs_cpu_linear("lenet", args, "--order reverse-first-k");
    cleanup();
}

Test(apps_cuda, vgg11_ooo_cuda_graph_matches_cpu_linear)
{
    char args[512];
    /* the whole step: steps 1-3 live (the first before the arena exists, then two staged
     * input slots), 4-5 captured, 6 replayed */
    snprintf(args, sizeof args, "--data-format mnist --data %s --steps 6 --batch 1", tiny_idx(16, 1));
    ooo_vs_cpu_linear("vgg11", args, "--cuda-graph");
    cleanup();
}

/* ResNet-20 (the DAG ops' twins: batch norm, add with its fan-out, global average
 * pooling) with --device cuda, --backward linear, ooo and bppsa (batch norm in training
 * mode ends its segments), against the CPU's linear engine: the losses to 1e-4. */
Test(apps_cuda, resnet_matches_cpu_linear)
{
    static const char *const keys[] = {"train_loss", "last_loss"};
    char args[512];
    snprintf(args, sizeof args, "--data-format mnist --data %s --steps 2 --batch 2", tiny_idx(8, 2));
    same_on_both("resnet", args, keys, 2);
    ooo_vs_cpu_linear("resnet", args, "");
    cpu_vs_cuda("resnet", args, "--backward bppsa", keys, 2);
    cleanup();
}

/* --cuda-graph captures the whole step (forward, loss, backward, updates) once per shape:
 * an epoch of 20 samples in batches of 8 ends with a batch of 4 (a second shape, captured
 * too), and the step learning-rate schedule changes the rate every epoch (a device scalar
 * of the replayed update). Slots restart each epoch: epoch 1 runs live (the arena settles),
 * epoch 2 captures two keys, epoch 3 captures one and replays two. */
Test(apps_cuda, lenet_whole_step_graph_last_batch_matches_cpu_linear)
{
    char args[512], cpu[8192], gpu[8192], cmd[1024];
    snprintf(args, sizeof args, "--data-format mnist --data %s --epochs 3 --batch 8 --lr-schedule step:1:0.5",
             tiny_idx(20, 4));
    snprintf(cmd, sizeof cmd, "%s %s --device cpu --quiet", tu_bin("lenet"), args);
    cr_assert_eq(tu_run_last(cmd, cpu, sizeof cpu), 0, "%s failed", cmd);
    snprintf(cmd, sizeof cmd, "%s %s --device cuda --backward ooo --cuda-graph --quiet", tu_bin("lenet"), args);
    cr_assert_eq(tu_run_last(cmd, gpu, sizeof gpu), 0, "%s failed", cmd);
    cr_assert(strstr(gpu, "\"cuda_graph\": \"step\""), "not a whole-step graph: %s", gpu);
    cr_assert_eq(tu_json_num(gpu, "graph_captures"), 3, "%s", gpu);
    cr_assert_eq(tu_json_num(gpu, "graph_replays"), 2, "%s", gpu);
    static const char *const keys[] = {"train_loss", "last_loss", "test_loss"};
    for (int i = 0; i < 3; i++) {
        double c = tu_json_num(cpu, keys[i]), g = tu_json_num(gpu, keys[i]);
        cr_assert_leq(fabs(c - g), LOSS_TOL * fabs(c), "lenet %s: cpu linear %.8g, cuda ooo whole-step graph %.8g",
                      keys[i], c, g);
    }
    cleanup();
}

/* The demo's loop is sp_train_step (no staged labels): --cuda-graph captures the ooo
 * backward alone there (sp_ooo_set_cuda_graph), and says so. */
Test(apps_cuda, demo_ooo_backward_graph_matches_cpu)
{
    static const char *const keys[] = {"first_loss", "last_loss"};
    char gpu[8192], cmd[1024];
    cpu_vs_cuda("demo", "--steps 8 --backward ooo", "--cuda-graph", keys, 2);
    snprintf(cmd, sizeof cmd, "%s --steps 8 --backward ooo --device cuda --cuda-graph --quiet", tu_bin("demo"));
    cr_assert_eq(tu_run_last(cmd, gpu, sizeof gpu), 0, "%s failed", cmd);
    cr_assert(strstr(gpu, "\"cuda_graph\": \"backward\""), "%s", gpu);
    cr_assert_geq(tu_json_num(gpu, "graph_replays"), 1, "%s", gpu);
}
