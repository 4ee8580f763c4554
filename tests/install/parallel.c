/* parallel.c — a residual model with batch norm, written out of tree against the
 * installed library only and trained through the apps' runner sp_run, so that it takes
 * their flags: scripts/test_install.sh compiles it with `pkg-config --cflags --libs
 * scanprop` after `make install` into a temporary prefix and runs it on one process
 * (`--microbatches M`: gradient accumulation) and under `mpirun -np 2 … --parallel ddp`
 * and `--parallel 1f1b`, whose checkpoint must equal the one-process run's. The model is
 * the README's: conv → bn → relu, a basic block x + f(x) with two batch norms, global
 * pooling, a classifier, on 8×8 images of 4 classes. It fails when sp_run did not run
 * the steps asked or the loss is not finite. */
#include <scanprop.h>
#include <math.h>
#include <stdio.h>

#define N 256
#define S 8
#define K 4

static sp_model *build(void)
{
    sp_model *m = sp_model_new("small_resnet");
    sp_model_set_loss(m, sp_softmax_ce());
    sp_model_add(m, sp_conv2d_nobias("conv1", 1, 8, 3, 1, 1));
    sp_model_add(m, sp_batchnorm2d("bn1", 8));
    sp_model_add(m, sp_relu());
    int x = sp_model_last(m);                                   /* the block's input */
    sp_model_add(m, sp_conv2d_nobias("block.conv1", 8, 8, 3, 1, 1));
    sp_model_add(m, sp_batchnorm2d("block.bn1", 8));
    sp_model_add(m, sp_relu());
    sp_model_add(m, sp_conv2d_nobias("block.conv2", 8, 8, 3, 1, 1));
    int f = sp_model_add_from(m, sp_batchnorm2d("block.bn2", 8), 1, (int[]){sp_model_last(m)});
    sp_model_add_from(m, sp_add(), 2, (int[]){f, x});           /* x + f(x) */
    sp_model_add(m, sp_relu());
    sp_model_add(m, sp_global_avgpool2d());
    sp_model_add(m, sp_linear("fc", 8, K));
    return m;
}

/* n images of one channel, S×S: class c is a bright square in quadrant c, plus noise. */
static sp_dataset *squares(int n, uint64_t seed)
{
    float *xs;
    int *ys;
    sp_dataset *d = sp_check_ptr(sp_dataset_new_f32("squares", n, 3, (int[]){1, S, S}, K, &xs, &ys));
    sp_rng r;
    sp_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) {
        int c = ys[i] = (int)sp_rng_below(&r, K);
        for (int y = 0; y < S; y++)
            for (int x = 0; x < S; x++) {
                int in = (y < S / 2) == (c < 2) && (x < S / 2) == (c % 2 == 0);
                xs[(size_t)i * S * S + y * S + x] = (float)in + 0.5f * sp_rng_normal(&r);
            }
    }
    return d;
}

int main(int argc, char **argv)
{
    sp_run_opts o;
    sp_run_defaults(&o);
    o.batch = 16;
    o.lr = 0.05;
    sp_run_parse(argc, argv, "parallel", "Train a small residual network with batch norm through sp_run.", &o,
                 SP_SCOPE_TRAINER, NULL);
    sp_set_threads(o.threads);
    sp_dataset *train = squares(N, o.seed);
    sp_dataset *test = squares(64, o.seed + 1);
    sp_model *m = build();
    sp_train_result r = sp_run("parallel", &o, m, train, test);
    int bad = (o.steps > 0 && r.steps != o.steps) || !isfinite(r.last_loss);
    if (bad) fprintf(stderr, "parallel: %ld steps (asked %ld), last loss %g\n", r.steps, o.steps, r.last_loss);
    sp_model_free(m);
    sp_dataset_free(train);
    sp_dataset_free(test);
    return bad;
}
