/* dag_worker — the program tests/test_exec_dag.c runs, alone and under mpirun: a small
 * model that is not a chain, written as a user would write one (sp_model_add_from),
 * trained with the runner's flags (--parallel, --microbatches, --save, …) on synthetic
 * data (demo's Gaussian blobs).
 *
 *   --model res     an MLP with residual blocks: fc_in, tanh, then per block fc_a, tanh,
 *                   fc_b, add (with the block's input), tanh; then fc_out. Segments:
 *                   fc_in, tanh, each block's body with its add, its tanh, fc_out
 *   --model cat     the same with dense blocks: fc_a, tanh, concat (the block's input and
 *                   tanh's output), fc_b, tanh
 *   --model cnn     a residual CNN on 1×8×8 images: conv, relu, per block conv, relu,
 *                   conv, add, relu; then flatten and a linear layer
 *   --model nocut   fc1, tanh, fc2 and a linear shortcut from the input, added: no layer
 *                   that every path goes through but the last (one segment) */
#include <stdio.h>
#include <string.h>
#include "cli/run.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/threads.h"
#include "layers/layers.h"
#include "tests/dag_models.h"

int main(int argc, char **argv)
{
    sp_run_opts o;
    sp_run_defaults(&o);
    o.steps = 3;
    o.batch = 32;
    o.lr = 0.05;
    const char *kind = "res";
    int blocks = 2, width = 32;
    sp_flag extra[] = {
        {"model", SP_FLAG_STR, &kind, "res | cat | cnn | nocut", .meta = "NAME"},
        {"blocks", SP_FLAG_INT, &blocks, "residual or dense blocks", .range = "0..16"},
        {"width", SP_FLAG_INT, &width, "hidden width", .range = "1.."},
        {"save", SP_FLAG_STR, &o.save, "save the final weights (safetensors)", .meta = "FILE"},
        {0},
    };
    sp_run_parse(argc, argv, "dag_worker", "Train a small model with residual or dense connections (the tests' DAG).",
                 &o, SP_SCOPE_RUN | SP_SCOPE_ENGINE, extra);
    if (o.batch > DAG_N) sp_fail("--batch %d exceeds the %d samples", o.batch, DAG_N);
    sp_set_threads(o.threads);

    static float xs[DAG_N * DAG_D], centres[DAG_K * DAG_D];
    static int ys[DAG_N];
    sp_rng r;
    sp_rng_seed(&r, o.seed);
    for (int i = 0; i < DAG_K * DAG_D; i++) centres[i] = sp_rng_normal(&r);
    for (int i = 0; i < DAG_N; i++) {
        ys[i] = (int)sp_rng_below(&r, DAG_K);
        for (int j = 0; j < DAG_D; j++) xs[i * DAG_D + j] = centres[ys[i] * DAG_D + j] + 0.8f * sp_rng_normal(&r);
    }
    bool cnn = !strcmp(kind, "cnn");
    sp_model *m = dag_model(kind, blocks, width);
    sp_tensor x1 = cnn ? sp_tensor_view(xs, 4, (int[]){1, 1, 8, 8}) : sp_tensor_2d(xs, 1, DAG_D);
    sp_run_session s;
    sp_run_open(&s, "dag_worker", &o, m, &x1, ys);
    int B = o.batch;
    sp_tape t;
    sp_tape_init(&t);
    float loss = 0;
    for (long step = 0; step < o.steps; step++) {
        int start = (int)((step * B) % (DAG_N - B + 1));
        sp_tensor x = cnn ? sp_tensor_view(xs + start * DAG_D, 4, (int[]){B, 1, 8, 8}) : sp_tensor_2d(xs + start * DAG_D, B, DAG_D);
        loss = sp_run_step(&s, &t, &x, ys + start);
    }
    sp_tape_free(&t);
    sp_json j;
    sp_run_summary_begin(&s, &j);
    sp_json_int(&j, "steps", o.steps);
    sp_run_summary_engine(&s, &j);
    sp_json_num(&j, "last_loss", loss);
    sp_run_save(&s);
    sp_run_close(&s, &j);
    sp_model_free(m);
    return 0;
}
