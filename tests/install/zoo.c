/* zoo.c — the built-in models from an installed library: scripts/test_install.sh builds
 * it with `pkg-config --cflags --libs scanprop` and runs it. ResNet-20 (layers/zoo.h, a
 * DAG with batch norm) trains two steps on random 32×32 images and its checkpoint is
 * written to argv[1], which the script then loads into scanprop_torch's ResNet-20 (the
 * installed python module) to check that both sides name and shape every tensor alike. */
#include <math.h>
#include <scanprop.h>
#include <layers/zoo.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    const char *ckpt = argc > 1 ? argv[1] : "resnet20.safetensors";
    if (!strstr(sp_zoo_names(), "resnet20")) {
        fprintf(stderr, "zoo: sp_zoo_names() = %s lacks resnet20\n", sp_zoo_names());
        return 1;
    }
    int shape[3];
    if (sp_zoo_input_shape("resnet20", shape) != 3 || shape[0] != 1 || shape[1] != 32 || shape[2] != 32) {
        fprintf(stderr, "zoo: resnet20's input shape is not 1x32x32\n");
        return 1;
    }
    sp_model *m = sp_zoo_resnet20(1, 10);
    sp_model_init(m, 3);
    float *xs;
    int *ys;
    sp_dataset *d = sp_dataset_new_f32("noise", 8, 3, shape, 10, &xs, &ys);
    if (!d) return 2;
    sp_rng r;
    sp_rng_seed(&r, 4);
    for (int i = 0; i < 8 * 32 * 32; i++) xs[i] = sp_rng_normal(&r);
    for (int i = 0; i < 8; i++) ys[i] = i % 10;
    sp_optim_cfg cfg = sp_optim_cfg_default();
    sp_optim *o = sp_optim_create("sgd", m->params, m->nparams, &cfg);
    sp_engine *e = sp_engine_create("linear", NULL);
    if (!o || !e) return fprintf(stderr, "%s\n", sp_last_error()), 2;
    sp_loader *l = sp_loader_new(d, 4, false, 1, false);
    sp_tape t;
    sp_tape_init(&t);
    sp_batch b;
    while (sp_loader_next(l, &b)) {
        float loss = sp_train_step(m, e, o, &t, &b.x, b.y, NULL, NULL, NULL);
        printf("resnet20: loss %.4f\n", loss);
        if (!isfinite(loss)) return 1;
    }
    if (sp_model_save(m, ckpt) != SP_OK) {
        fprintf(stderr, "zoo: %s\n", sp_last_error());
        return 2;
    }
    sp_tape_free(&t);
    sp_loader_free(l);
    sp_engine_destroy(e);
    sp_optim_free(o);
    sp_dataset_free(d);
    sp_model_free(m);
    return 0;
}
