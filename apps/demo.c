/* demo — the whole training loop on one screen: an MLP learns a synthetic 4-class
 * problem (Gaussian blobs in 32 dimensions). Start here to write your own model. */
#include <stdio.h>
#include "schedulers/train/run.h"
#include "schedulers/backward/engine.h"
#include "core/error.h"
#include "core/model.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "core/io/safetensors.h"
#include "core/io/model_io.h"
#include "schedulers/parallel/exec.h"
#include "schedulers/backward/ooo.h"
#include "layers/layers.h"
#include "optim/optim.h"

#define N 512
#define D 32
#define K 4

int main(int argc, char **argv)
{
    sp_app_opts o;
    sp_app_defaults(&o);
    o.steps = 200;
    o.lr = 0.05;
    int layers = 2, width = 64;
    sp_flag extra[] = {
        {"layers", SP_FLAG_INT, &layers, "linear layers (tanh between them): 2L-1 ops in the chain", .range = "1..32"},
        {"width", SP_FLAG_INT, &width, "hidden width", .range = "1.."},
        {"save", SP_FLAG_STR, &o.save, "save the final weights (safetensors)", .meta = "FILE"},
        {0},
    };
    /* demo's loop is the one on this screen: no epochs, data files, checkpoints or logs */
    sp_app_parse(argc, argv, "demo",
                 "Train a small MLP on synthetic data (loss should fall). --steps counts the steps; batches walk\n"
                 "the 512 synthetic samples in order.",
                 &o, SP_SCOPE_RUN | SP_SCOPE_ENGINE, extra);
    if (o.steps < 1) sp_fail("--steps %ld: demo needs at least 1 step", o.steps);
    if (o.batch > N) sp_fail("--batch %d exceeds the %d training samples of demo", o.batch, N);
    sp_set_threads(o.threads);

    /* data: class c is a blob around a random centre */
    static float xs[N * D], centres[K * D];
    static int ys[N];
    sp_rng r;
    sp_rng_seed(&r, o.seed);
    for (int i = 0; i < K * D; i++) centres[i] = sp_rng_normal(&r);
    for (int i = 0; i < N; i++) {
        ys[i] = (int)sp_rng_below(&r, K);
        for (int j = 0; j < D; j++) xs[i * D + j] = centres[ys[i] * D + j] + 0.8f * sp_rng_normal(&r);
    }

    /* model, engine, optimizer */
    sp_model *m = sp_model_new("demo");
    for (int i = 1; i <= layers; i++) {
        char name[16];
        snprintf(name, sizeof name, "fc%d", i);
        sp_model_add(m, sp_linear(name, i == 1 ? D : width, i == layers ? K : width));
        if (i < layers) sp_model_add(m, sp_tanh());
    }
    sp_model_init(m, o.seed);
    sp_tensor x1 = sp_tensor_2d(xs, 1, D);
    sp_app_check_engine(&o, m, &x1, ys);
    sp_app_use_device(&o, m);
    sp_engine_opts eo = sp_app_engine_opts(&o);
    sp_engine *e = sp_engine_create(o.backward, &eo);
    if (o.cuda_graph) sp_ooo_set_cuda_graph(e, true);   /* its loop is sp_train_step: the backward alone */
    sp_optim_cfg cfg = sp_optim_cfg_default();
    cfg.lr = o.lr;
    cfg.momentum = o.momentum;
    cfg.weight_decay = o.weight_decay;
    sp_optim *opt = sp_optim_create(o.optim, m->params, m->nparams, &cfg);
    /* --parallel (under mpirun): the same steps on the ranks, by the master schedule */
    struct sp_exec *ex = sp_app_exec_new(&o, m, opt, 1, (int[]){D});

    int B = o.batch;
    if (o.plan || o.plan_svg) {   /* print (draw) the bppsa plan of one batch, train nothing */
        sp_tensor x = sp_tensor_2d(xs, B, D);
        sp_app_plan_only("demo", &o, m, &x, ys);
        sp_optim_free(opt);
        sp_engine_destroy(e);
        sp_model_free(m);
        return 0;
    }

    /* the loop: forward on a tape, backward, step, reset */
    sp_tape t;
    sp_tape_init(&t);
    float first = 0, loss = 0;
    for (long s = 0; s < o.steps; s++) {
        int start = (int)((s * B) % (N - B + 1));
        sp_tensor x = sp_tensor_2d(xs + start * D, B, D);
        loss = ex ? sp_exec_step(ex, &x, ys + start, NULL, NULL, NULL)
                  : sp_train_step(m, e, opt, &t, &x, ys + start, NULL, NULL, NULL);
        if (s == 0) first = loss;
        if (!o.quiet && sp_app_prints(ex) && (s % 50 == 0 || s == o.steps - 1)) fprintf(stderr, "step %ld loss %.4f\n", s, loss);
    }
    sp_json j;
    sp_json_begin(&j);
    sp_json_str(&j, "app", "demo");
    sp_json_str(&j, "device", o.device);
    sp_json_str(&j, "backward", o.backward);
    sp_json_int(&j, "steps", o.steps);
    sp_json_int(&j, "batch", B);
    sp_json_int(&j, "threads", o.threads);
    sp_app_json_engine(&j, &o, e, o.steps > 0);
    sp_json_num(&j, "first_loss", first);
    sp_json_num(&j, "last_loss", loss);
    if (ex && o.save) sp_exec_sync_weights(ex);
    if (o.save && sp_app_prints(ex)) sp_check(sp_model_save(m, o.save));
    sp_app_exec_json(ex, &o, &j);
    if (sp_app_prints(ex)) sp_json_end_print(&j);
    sp_app_exec_end(ex);

    sp_tape_free(&t);
    sp_optim_free(opt);
    sp_engine_destroy(e);
    sp_model_free(m);
    return 0;
}
