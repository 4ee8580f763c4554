/* model.h — a model is an ordered list of layers with a parameter registry.
 *
 *   sp_model *m = sp_model_new("lenet");
 *   sp_model_add(m, sp_conv2d("conv1", 1, 6, 5, 1, 2));
 *   sp_model_add(m, sp_relu());
 *   ...
 *   sp_model_init(m, seed);
 *
 * sp_model_forward applies the layers in order on a tape (a chain, which is what the
 * BPPSA scan and the pipeline schedules need). Models that are not chains call
 * sp_apply directly. */
#ifndef SP_MODEL_H
#define SP_MODEL_H

#include <stdint.h>
#include "core/tape.h"

typedef struct sp_model {
    char name[SP_NAME_LEN];
    sp_layer **layers;
    int nlayers, cap_layers;
    sp_param **params;
    int nparams, cap_params;
    sp_layer *loss;        /* softmax + cross-entropy */
    /* Optional whole-model initialisation (e.g. torchvision's VGG scheme); NULL: each
     * op's PyTorch default (init_params). */
    void (*init)(struct sp_model *m, sp_rng *r);
} sp_model;

sp_model *sp_model_new(const char *name);
void sp_model_free(sp_model *m);
sp_layer *sp_model_add(sp_model *m, sp_layer *l);     /* takes ownership */
void sp_model_init(sp_model *m, uint64_t seed);        /* m->init, else PyTorch defaults */
sp_node *sp_model_forward(sp_model *m, sp_tape *t, sp_node *x);
/* forward + softmax-cross-entropy loss node. */
sp_node *sp_model_loss(sp_model *m, sp_tape *t, const sp_tensor *x, const int *labels);
sp_param *sp_model_param(const sp_model *m, const char *name);
void sp_model_zero_grad(sp_model *m);
size_t sp_model_numel(const sp_model *m);

#endif
