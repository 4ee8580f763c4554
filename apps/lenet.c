/* lenet — train LeNet-5 on Fashion-MNIST (default), MNIST-style IDX files, CIFAR-10 or
 * an image folder. */
#include "cli/run.h"
#include "layers/zoo.h"
#include "core/error.h"
#include "core/threads.h"

int main(int argc, char **argv)
{
    sp_run_opts o;
    sp_run_defaults(&o);
    sp_run_parse(argc, argv, "lenet", "Train LeNet-5 (conv 6, conv 16, fc 120, 84, 10) on 28x28 or 32x32 images.", &o,
                 SP_SCOPE_TRAINER | SP_SCOPE_IMAGES, NULL);
    sp_set_threads(o.threads);
    sp_dataset *train, *test;
    sp_run_open_images(&o, 0, &train, &test);
    if (train->ndim != 3 || train->shape[1] != train->shape[2])
        sp_fail("lenet: samples of %s are not square images", train->name);
    sp_model *m = sp_zoo_lenet(train->shape[0], train->shape[1]);
    sp_run("lenet", &o, m, train, test);
    sp_model_free(m);
    sp_dataset_free(train);
    sp_dataset_free(test);
    return 0;
}
