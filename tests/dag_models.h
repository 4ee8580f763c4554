/* dag_models.h — the small models that are not chains which tests/dag_worker.c trains and
 * tests/test_exec_dag.c plans (the same builder in both). */
#ifndef SP_TEST_DAG_MODELS_H
#define SP_TEST_DAG_MODELS_H

#include <stdio.h>
#include <string.h>
#include "core/error.h"
#include "core/model.h"
#include "layers/layers.h"

#define DAG_N 256
#define DAG_D 64   /* an MLP sample: 64 features; a CNN sample: 1×8×8 */
#define DAG_K 4

static inline void mlp_block(sp_model *m, int b, int width, bool cat)
{
    char a[32], f[32];
    snprintf(a, sizeof a, "b%d.fc_a", b);
    snprintf(f, sizeof f, "b%d.fc_b", b);
    int x = sp_model_last(m);
    sp_model_add(m, sp_linear(a, width, width));
    sp_model_add(m, sp_tanh());
    if (cat) {
        sp_model_add_from(m, sp_concat(), 2, (int[]){x, sp_model_last(m)});
        sp_model_add(m, sp_linear(f, 2 * width, width));
    } else {
        sp_model_add(m, sp_linear(f, width, width));
        sp_model_add_from(m, sp_add(), 2, (int[]){sp_model_last(m), x});
    }
    sp_model_add(m, sp_tanh());
}

static inline sp_model *dag_model(const char *kind, int blocks, int width)
{
    sp_model *m = sp_model_new(kind);
    sp_model_set_loss(m, sp_softmax_ce());
    if (!strcmp(kind, "res") || !strcmp(kind, "cat")) {
        sp_model_add(m, sp_linear("fc_in", DAG_D, width));
        sp_model_add(m, sp_tanh());
        for (int b = 0; b < blocks; b++) mlp_block(m, b, width, !strcmp(kind, "cat"));
        sp_model_add(m, sp_linear("fc_out", width, DAG_K));
    } else if (!strcmp(kind, "cnn")) {
        sp_model_add(m, sp_conv2d("conv", 1, 4, 3, 1, 1));
        sp_model_add(m, sp_relu());
        for (int b = 0; b < blocks; b++) {
            char c1[32], c2[32];
            snprintf(c1, sizeof c1, "b%d.conv1", b);
            snprintf(c2, sizeof c2, "b%d.conv2", b);
            int x = sp_model_last(m);
            sp_model_add(m, sp_conv2d(c1, 4, 4, 3, 1, 1));
            sp_model_add(m, sp_relu());
            sp_model_add(m, sp_conv2d(c2, 4, 4, 3, 1, 1));
            sp_model_add_from(m, sp_add(), 2, (int[]){sp_model_last(m), x});
            sp_model_add(m, sp_relu());
        }
        sp_model_add(m, sp_flatten());
        sp_model_add(m, sp_linear("fc", 4 * DAG_D, DAG_K));
    } else if (!strcmp(kind, "nocut")) {
        sp_model_add(m, sp_linear("fc1", DAG_D, width));
        sp_model_add(m, sp_tanh());
        int body = sp_model_add_from(m, sp_linear("fc2", width, DAG_K), 1, (int[]){sp_model_last(m)});
        int skip = sp_model_add_from(m, sp_linear("skip", DAG_D, DAG_K), 1, (int[]){SP_MODEL_INPUT});
        sp_model_add_from(m, sp_add(), 2, (int[]){body, skip});
    } else {
        sp_fail("--model %s: expected res | cat | cnn | nocut", kind);
    }
    return m;
}

#endif
