/* zoo.h — the model zoo: LeNet-5, VGG-11, and the recurrent classifiers of the
 * BPPSA paper, built from library calls with PyTorch parameter names. */
#ifndef SP_MODELS_H
#define SP_MODELS_H

#include "core/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "lenet" (1×28×28 → 10), "vgg11" (3×32×32 → 10, config A, no batch norm),
 * "rnn" (bitstream: T×1 → 10, hidden 20), "gru" (T×12 → 10, hidden 20),
 * "mlp" (1×28×28 → 10, 784-128-10), "resnet20" (1×32×32 → 10). Parameters are left at zero: call sp_model_init.
 * Every builder here is fallible (core/error.h's first kind): an unknown name (the
 * message lists the valid ones), a NULL name or a size below 1 returns NULL, having
 * allocated nothing; sp_zoo_input_shape returns SP_ERR. */
sp_model *sp_zoo_model(const char *name);

sp_model *sp_zoo_lenet(int in_channels, int size);   /* size 28 or 32 */
sp_model *sp_zoo_vgg11(int in_channels, int classes);
sp_model *sp_zoo_rnn(int input, int hidden, int classes);
sp_model *sp_zoo_gru(int input, int hidden, int classes);
sp_model *sp_zoo_mlp(int input, int hidden, int classes);
/* "resnet20": ResNet-20, CIFAR variant, 32×32 inputs, option-B (1×1 conv + bn)
 * shortcuts, batch norm: a DAG (sp_model_add_from). */
sp_model *sp_zoo_resnet20(int in_channels, int classes);

/* The default per-sample input shape of a zoo model (ndim 3: C×H×W, or T×C with
 * ndim 2 for rnn/gru, T taken from the paper's defaults). */
int sp_zoo_input_shape(const char *name, int shape[3]);
const char *sp_zoo_names(void);

#ifdef __cplusplus
}
#endif

#endif
