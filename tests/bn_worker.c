/* bn_worker — the program tests/test_bn_parallel.c runs (alone and under mpirun): a chain
 * with batch norm, conv-bn+relu-conv-bn-relu-flatten-linear, trained on Fashion-MNIST with
 * the runner's flags (--parallel, --microbatches, --sync-bn, --save, ...). */
#include "cli/run.h"
#include "core/error.h"
#include "core/threads.h"
#include "layers/layers.h"

int main(int argc, char **argv)
{
    sp_run_opts o;
    sp_run_defaults(&o);
    sp_run_parse(argc, argv, "bn_worker", "A chain with batch norm on 28x28 images (tests).", &o,
                 SP_SCOPE_TRAINER | SP_SCOPE_IMAGES, NULL);
    sp_set_threads(o.threads);
    sp_dataset *train, *test;
    sp_run_open_images(&o, 0, &train, &test);
    if (train->ndim != 3 || train->shape[1] != 28 || train->shape[2] != 28)
        sp_fail("bn_worker: expected 28x28 images, got %s", train->name);
    sp_model *m = sp_model_new("bnchain");
    sp_model_set_loss(m, sp_softmax_ce());
    sp_model_add(m, sp_conv2d("conv1", train->shape[0], 4, 3, 2, 1));
    sp_model_add(m, sp_batchnorm2d_relu("bn1", 4));
    sp_model_add(m, sp_conv2d("conv2", 4, 8, 3, 2, 1));
    sp_model_add(m, sp_batchnorm2d("bn2", 8));
    sp_model_add(m, sp_relu());
    sp_model_add(m, sp_flatten());
    sp_model_add(m, sp_linear("fc", 8 * 7 * 7, 10));
    sp_model_init(m, o.seed);
    sp_run("bn_worker", &o, m, train, test);
    sp_model_free(m);
    sp_dataset_free(train);
    sp_dataset_free(test);
    return 0;
}
