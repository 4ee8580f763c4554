/* model.h — a model is an ordered list of layers with a parameter registry, and for
 * each layer the layers whose outputs it reads.
 *
 *   sp_model *m = sp_model_new("lenet");
 *   sp_model_set_loss(m, sp_softmax_ce());                     the builder's choice
 *   sp_model_add(m, sp_conv2d("conv1", 1, 6, 5, 1, 2));      reads the layer before
 *   sp_model_add(m, sp_relu());
 *   ...
 *   sp_model_init(m, seed);
 *
 * A residual block reads an earlier output a second time:
 *
 *   int x = sp_model_last(m);                                  the block's input
 *   sp_model_add(m, sp_conv2d("b.conv1", 16, 16, 3, 1, 1)); ...
 *   int f = sp_model_add(m, sp_batchnorm2d("b.bn2", 16));      both return an index
 *   sp_model_add_from(m, sp_add(), 2, (int[]){f, x});
 *
 * sp_model_forward applies the layers in order on a tape; the last layer's output is the
 * model's. A model where every layer reads the one before is a chain (what the pipeline
 * schedules need); any other is a DAG, which every backward engine runs. */
#ifndef SP_MODEL_H
#define SP_MODEL_H

#include <stdint.h>
#include <stdio.h>
#include "core/tape.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sp_model {
    char name[SP_NAME_LEN];
    sp_layer **layers;
    int nlayers, cap_layers;
    sp_param **params;
    int nparams, cap_params;
    sp_param **buffers;    /* the layers' buffers (batch norm's running statistics) */
    int nbuffers, cap_buffers;
    bool eval;             /* sp_model_set_training(m, false)                        */
    sp_layer *loss;        /* set by the builder (sp_model_set_loss); NULL: none yet  */
    int *from;             /* layer i reads the outputs of layers from[from_start[i] ..   */
    int *from_start;       /* from_start[i + 1]) (SP_MODEL_INPUT: the model's input)     */
    int cap_from;
    /* Optional whole-model initialisation (e.g. torchvision's VGG scheme); NULL: each
     * op's PyTorch default (init_params). */
    void (*init)(struct sp_model *m, sp_rng *r);
} sp_model;

/* Every call below but sp_model_free is fallible (core/error.h's first kind): a NULL
 * model, layer or tape, a bad index, size or loss returns SP_ERR (the int calls), NULL
 * (pointers), SP_MODEL_NONE (layer indices), false (sp_model_is_chain), -1
 * (sp_model_nstate) or 0 (sp_model_numel), with the message in sp_last_error(); it
 * never ends the process. Inside sp_try an sp_fail goes to that sp_try as before. */

/* An empty model, without a loss: whoever builds it sets one (sp_model_set_loss). */
sp_model *sp_model_new(const char *name);
/* The loss node's layer (owned from now on, replacing and freeing any earlier one): a
 * parameter-free op of one input taking labels, e.g. sp_softmax_ce() (layers/layers.h).
 * A refused loss (one with parameters) is not taken: SP_ERR, the caller still owns it. */
int sp_model_set_loss(sp_model *m, sp_layer *loss);
void sp_model_free(sp_model *m);
#define SP_MODEL_INPUT (-1)
/* What sp_model_add returns for a NULL model or layer: no layer's index, and not the
 * input's, so that a later sp_model_add_from reading it is refused. */
#define SP_MODEL_NONE (-2)

/* Both calls that add a layer return its INDEX (an int), the handle that
 * sp_model_add_from's `from` takes; the layer itself is m->layers[index]. */
/* l (owned from now on) reading the last layer's output. Returns l's index. A NULL m or
 * l, a layer already in m, a parameter or buffer name m already has: SP_MODEL_NONE with
 * sp_last_error() naming it, m unchanged, and l freed unless it is m's already. */
int sp_model_add(sp_model *m, sp_layer *l);
/* l (owned from now on) reading the outputs of layers from[0..ninputs-1], indices of
 * earlier layers or SP_MODEL_INPUT, in l's argument order. Returns l's index. Bad
 * index or arity, a layer added twice, a duplicate name: SP_MODEL_NONE naming the model
 * and layer, m unchanged, and l freed unless it is m's already. */
int sp_model_add_from(sp_model *m, sp_layer *l, int ninputs, const int *from);
/* Layer i's name as sp_node_label gives its node: the layer's name, or "<op>_<k>" with k
 * counting that op's layers up to i (the model's forward applies them in this order). */
const char *sp_model_layer_label(const sp_model *m, int i, char *buf, size_t len);
int sp_model_last(const sp_model *m);                  /* index of the last layer; SP_MODEL_INPUT if none */
bool sp_model_is_chain(const sp_model *m);
int sp_model_init(sp_model *m, uint64_t seed);        /* m->init, else PyTorch defaults */
sp_node *sp_model_forward(sp_model *m, sp_tape *t, sp_node *x);
/* Whether sp_model_forward on t, its input x on device dev, runs layer i with the ReLU
 * of layer i + 1 folded into its forward (sp_apply_fused_relu, then
 * sp_apply_over_fused): t->reuse_inputs, layer i + 1 a ReLU that would run over layer
 * i's output (read by it alone), and layer i's kernels on dev with a forward_relu. */
bool sp_model_fuses_relu(const sp_model *m, const sp_tape *t, int i, sp_device dev);
/* Whether it runs layer i + 2's forward in that one too, on each range of samples once
 * their ReLU is done (sp_apply_fused_relu_next): sp_model_fuses_relu, layer i + 2 reading
 * layer i + 1 alone and read alone, and its kernels on dev with forward_begin and
 * forward_samples (a max pool after a conv's ReLU). */
bool sp_model_fuses_relu_next(const sp_model *m, const sp_tape *t, int i, sp_device dev);
/* Which layers write their output in oneDNN's blocked layout when the tape allows it
 * (sp_tape.blocked): make[i] for each of the nlayers layers, from the ops' sp_opdef.blocked
 * alone, so that no op meets a layout it does not take, no op's inputs come in two
 * layouts and the model's output is NCHW. sp_model_forward uses it; exposed for code
 * that applies the layers itself (bench/opprof.c). SP_ERR on a NULL argument. */
int sp_model_blocked_plan(const sp_model *m, bool *make);
/* The same, with the outputs of the layers marked plain[i] NCHW too (plain: nlayers
 * flags, or NULL): the parallel executor's stage outputs that cross to another rank. */
int sp_model_blocked_plan_cut(const sp_model *m, const bool *plain, bool *make);
/* A shape-only pass (nothing is computed) of m on `batch` samples of sample_shape into
 * the freshly initialised tape t: its nodes carry their output shapes and costs. The
 * caller frees t. */
sp_node *sp_model_forward_shapes(sp_model *m, sp_tape *t, int batch, int ndim, const int *sample_shape);
/* forward + the model's loss node; NULL if it has none. */
sp_node *sp_model_loss(sp_model *m, sp_tape *t, const sp_tensor *x, const int *labels);
/* A parameter or buffer by its PyTorch name; NULL if none. */
sp_param *sp_model_param(const sp_model *m, const char *name);
/* Saved state, as in a state_dict: the parameters, then the buffers. */
int sp_model_nstate(const sp_model *m);
sp_param *sp_model_state(const sp_model *m, int i);
/* One line per layer to f: index, name (or op), the layers it reads, output shape,
 * parameters and forward FLOPs per sample; then the totals. The model is recorded on a
 * shape-only tape for one sample of sample_shape (ndim dims, no batch dim): nothing
 * runs. */
int sp_model_summary(sp_model *m, int ndim, const int *sample_shape, FILE *f);
/* Training mode (the default) or eval mode for every layer: batch norm's statistics,
 * dropout. */
int sp_model_set_training(sp_model *m, bool training);
int sp_model_zero_grad(sp_model *m);
/* on: every parameter's gradient buffer is freed and its gradient lives in the training
 * step instead (sp_param.grad_in_step): an engine with SP_ENGINE_STEP_GRADS
 * (schedulers/backward/engine.h) places it in the step's arena for the backward of its
 * layer and the layer's update (opts.update), so a chain or DAG of layers holds one
 * layer's gradient at a time instead of all of them (VGG-11: 35 MiB). off: the buffers
 * again, zeroed. CPU parameters only (else refused). Nothing else may read or write a
 * gradient while it is on: sp_train turns it on for its loop where that holds. */
int sp_model_step_grads(sp_model *m, bool on);
size_t sp_model_numel(const sp_model *m);

#ifdef __cplusplus
}
#endif

#endif
