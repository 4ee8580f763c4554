/* vgg11 — train VGG-11 (config A, no batch norm) on 32×32 images: Fashion-MNIST
 * zero-padded to 32×32 by default, CIFAR-10 with --data-format cifar10. */
#include "cli/run.h"
#include "layers/zoo.h"
#include "core/error.h"
#include "core/threads.h"

int main(int argc, char **argv)
{
    sp_run_opts o;
    sp_run_defaults(&o);
    o.batch = 32;
    o.lr = 0.01;
    sp_run_parse(argc, argv, "vgg11", "Train VGG-11 (8 convs 64..512, 5 max-pools, fc 512->10) on 32x32 images.", &o,
                 SP_SCOPE_TRAINER | SP_SCOPE_IMAGES, NULL);
    sp_set_threads(o.threads);
    sp_dataset *train, *test;
    sp_run_open_images(&o, 32, &train, &test);
    if (train->ndim != 3 || train->shape[1] != 32 || train->shape[2] != 32)
        sp_fail("vgg11: samples of %s are %dx%d, expected 32x32", train->name, train->shape[1], train->shape[2]);
    sp_model *m = sp_zoo_vgg11(train->shape[0], train->nclasses);
    sp_run("vgg11", &o, m, train, test);
    sp_model_free(m);
    sp_dataset_free(train);
    sp_dataset_free(test);
    return 0;
}
