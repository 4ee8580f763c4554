/* demo — the whole training loop on one screen: an MLP learns a synthetic 4-class
 * problem (Gaussian blobs in 32 dimensions). Start here to write your own model. */
#include <math.h>
#include <stdio.h>
#include "cli/run.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/rng.h"
#include "layers/layers.h"

#define N 512
#define D 32
#define K 4

int main(int argc, char **argv)
{
    sp_run_opts o;
    sp_run_defaults(&o);
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
    sp_run_parse(argc, argv, "demo",
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

    /* the model; the engine, the weights and the optimizer from the flags (--parallel:
     * the same steps on the ranks by the master schedule, under mpirun) */
    sp_model *m = sp_model_new("demo");
    sp_model_set_loss(m, sp_softmax_ce());
    for (int i = 1; i <= layers; i++) {
        char name[16];
        snprintf(name, sizeof name, "fc%d", i);
        sp_model_add(m, sp_linear(name, i == 1 ? D : width, i == layers ? K : width));
        if (i < layers) sp_model_add(m, sp_tanh());
    }
    sp_run_session s;
    sp_tensor x1 = sp_tensor_2d(xs, 1, D);
    sp_run_open(&s, "demo", &o, m, &x1, ys);
    int B = o.batch;
    sp_tensor xb = sp_tensor_2d(xs, B, D);
    if (sp_run_plan(&s, &xb, ys)) {   /* --plan: the bppsa plan of one batch, nothing trained */
        sp_run_close(&s, NULL);
        sp_model_free(m);
        return 0;
    }

    /* the loop: forward on a tape, backward, step, reset */
    sp_tape t;
    sp_tape_init(&t);
    float first = 0, loss = 0;
    for (long step = 0; step < o.steps; step++) {
        int start = (int)((step * B) % (N - B + 1));
        sp_tensor x = sp_tensor_2d(xs + start * D, B, D);
        loss = sp_run_step(&s, &t, &x, ys + start);
        if (!isfinite(loss))   /* as sp_train stops the other apps: nothing saved */
            sp_fail("demo: loss became %g at step %ld (try a smaller --lr)", loss, step);
        if (step == 0) first = loss;
        if (!o.quiet && sp_run_prints(&s) && (step % 50 == 0 || step == o.steps - 1))
            fprintf(stderr, "step %ld loss %.4f\n", step, loss);
    }
    sp_tape_free(&t);
    sp_json j;
    sp_run_summary_begin(&s, &j);
    sp_json_int(&j, "steps", o.steps);
    sp_json_int(&j, "batch", B);
    sp_json_int(&j, "threads", o.threads);
    sp_run_summary_engine(&s, &j);
    sp_json_num(&j, "first_loss", first);
    sp_json_num(&j, "last_loss", loss);
    sp_run_save(&s);
    sp_run_close(&s, &j);
    sp_model_free(m);
    return 0;
}
