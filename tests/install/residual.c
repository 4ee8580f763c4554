/* residual.c — a model written out of tree, against the installed library only:
 * scripts/test_install.sh compiles it with `pkg-config --cflags --libs scanprop` after
 * `make install` into a temporary prefix and runs it. A small residual network (a
 * residual block: x + f(x), f = fc → tanh → fc) learns Gaussian blobs; it trains with
 * every backward engine, checks the loss falls, saves a checkpoint and loads it back. */
#include <scanprop.h>
#include <stdio.h>
#include <string.h>

#define N 256
#define D 16
#define K 4

static sp_model *build(void)
{
    sp_model *m = sp_model_new("resmlp");
    sp_model_set_loss(m, sp_softmax_ce());
    sp_model_add(m, sp_linear("fc_in", D, 32));
    sp_model_add(m, sp_tanh());
    int x = sp_model_last(m);                          /* the block's input */
    sp_model_add(m, sp_linear("block.fc1", 32, 32));
    sp_model_add(m, sp_tanh());
    int f = sp_model_add_from(m, sp_linear("block.fc2", 32, 32), 1, (int[]){sp_model_last(m)});
    sp_model_add_from(m, sp_add(), 2, (int[]){f, x});   /* x + f(x) */
    sp_model_add(m, sp_tanh());
    sp_model_add(m, sp_linear("fc_out", 32, K));
    return m;
}

int main(int argc, char **argv)
{
    const char *ckpt = argc > 1 ? argv[1] : "residual.safetensors";
    float *xs;
    int *ys;
    sp_dataset *d = sp_dataset_new_f32("blobs", N, 1, (int[]){D}, K, &xs, &ys);
    if (!d) return 2;
    sp_rng r;
    sp_rng_seed(&r, 1);
    float centres[K * D];
    for (int i = 0; i < K * D; i++) centres[i] = sp_rng_normal(&r);
    for (int i = 0; i < N; i++) {
        ys[i] = (int)sp_rng_below(&r, K);
        for (int j = 0; j < D; j++) xs[i * D + j] = centres[ys[i] * D + j] + 0.8f * sp_rng_normal(&r);
    }
    const char *engines[] = {"linear", "bppsa", "ooo"};
    float final[3];
    for (int e = 0; e < 3; e++) {
        sp_model *m = build();
        sp_model_init(m, 7);
        sp_optim_cfg cfg = sp_optim_cfg_default();
        cfg.lr = 0.1;
        cfg.momentum = 0.9;
        sp_optim *o = sp_optim_create("sgd", m->params, m->nparams, &cfg);
        sp_engine *eng = sp_engine_create(engines[e], NULL);
        if (!o || !eng) return fprintf(stderr, "%s\n", sp_last_error()), 2;
        sp_loader *l = sp_loader_new(d, 32, true, 3, false);
        sp_tape t;
        sp_tape_init(&t);
        float first = 0, last = 0;
        for (int epoch = 0; epoch < 5; epoch++) {
            sp_loader_set_epoch(l, epoch);
            sp_batch b;
            while (sp_loader_next(l, &b)) {
                last = sp_train_step(m, eng, o, &t, &b.x, b.y, NULL, NULL, NULL);
                if (first == 0) first = last;
            }
        }
        printf("%s: loss %.4f -> %.4f\n", engines[e], first, last);
        final[e] = last;
        if (!(last < 0.5f * first)) {
            fprintf(stderr, "%s: the loss did not fall\n", engines[e]);
            return 1;
        }
        if (e == 0) {
            if (sp_model_save(m, ckpt) != 0) return 2;
            sp_model *m2 = build();
            if (sp_model_load(m2, ckpt) != 0) return 2;
            for (int p = 0; p < m->nparams; p++)
                if (memcmp(m->params[p]->value.data, m2->params[p]->value.data,
                           m->params[p]->value.numel * sizeof(float)) != 0) {
                    fprintf(stderr, "%s differs after the round trip\n", m->params[p]->name);
                    return 1;
                }
            sp_model_free(m2);
        }
        sp_tape_free(&t);
        sp_loader_free(l);
        sp_engine_destroy(eng);
        sp_optim_free(o);
        sp_model_free(m);
    }
    printf("final losses: linear %.5f bppsa %.5f ooo %.5f\n", final[0], final[1], final[2]);
    sp_dataset_free(d);
    return 0;
}
