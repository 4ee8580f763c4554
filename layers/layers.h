/* layers.h — constructors of every built-in op. Each op lives in its own file,
 * layers/<op>.c, holding the whole truth about it: shapes, forward, δ, G, Jᵀ pattern,
 * Jᵀ values and cost. Names give PyTorch parameter names ("conv1" → conv1.weight).
 *
 * The constructors are fallible (core/error.h's first kind): a NULL name or a size,
 * kernel, stride, padding, group count or probability out of range returns NULL with the
 * message in sp_last_error(), having allocated nothing (sp_batchnorm2d_set_reduce:
 * SP_ERR). A bad input shape at forward time is an sp_fail of the calling step (the
 * model's and the engine's calls return it as their status). */
#ifndef SP_LAYERS_H
#define SP_LAYERS_H

#include "core/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y = x Wᵀ + b; x [B, in] → [B, out]; W [out, in], b [out]. */
sp_layer *sp_linear(const char *name, int in, int out);
/* NCHW, W [cout, cin, k, k] (OIHW), b [cout]; any kernel, stride, padding. */
sp_layer *sp_conv2d(const char *name, int cin, int cout, int k, int stride, int pad);
sp_layer *sp_relu(void);
sp_layer *sp_tanh(void);
sp_layer *sp_sigmoid(void);
/* Max pooling, padding counts as -inf (PyTorch semantics). */
sp_layer *sp_maxpool2d(int k, int stride, int pad);
/* [B, ...] → [B, prod(...)] */
sp_layer *sp_flatten(void);
/* nn.BatchNorm2d(C) (eps 1e-5, momentum 0.1): <name>.weight, bias and the buffers
 * running_mean, running_var, num_batches_tracked; batch statistics in training mode,
 * running ones in eval mode (sp_model_set_training). */
sp_layer *sp_batchnorm2d(const char *name, int channels);
/* sp_batchnorm2d followed by ReLU as one op, y = max(BN(x), 0), bitwise the two ops
 * (ResNet's bn → relu without the pass over memory between them); same parameters,
 * buffers and names as sp_batchnorm2d. */
sp_layer *sp_batchnorm2d_relu(const char *name, int channels);
/* Synchronized batch norm (PyTorch's SyncBatchNorm): with a reduce installed, a training
 * forward of l (sp_batchnorm2d or _relu, on the CPU) takes its mean and variance over
 * every process's batch — reduce(ctx, v, n) must sum the n doubles v over the processes
 * in place, every process calling it at the same point: once in the forward (Σx, Σx²
 * per channel and the count), once in δ (Σdy, Σdy·x̂ per channel); G stays local (the
 * gradients are summed later like any other). NULL: this process's batch (the default).
 * sp_layer_is_batchnorm: whether l is one of the two. */
typedef void (*sp_bn_reduce_fn)(void *ctx, double *v, int n);
int sp_batchnorm2d_set_reduce(sp_layer *l, sp_bn_reduce_fn reduce, void *ctx);
bool sp_layer_is_batchnorm(const sp_layer *l);
/* nn.Conv2d(cin, cout, k, stride, pad, groups=G, bias=bias): W [cout, cin/G, k, k];
 * G = cin = cout is the depthwise convolution. G = 1 gives sp_conv2d(_nobias). */
sp_layer *sp_conv2d_groups(const char *name, int cin, int cout, int k, int stride, int pad, int groups, bool bias);
/* nn.AvgPool2d(k, stride, pad) with count_include_pad (padding counts as zeros). */
sp_layer *sp_avgpool2d(int k, int stride, int pad);
/* nn.Dropout(p): zero with probability p and scale by 1/(1−p) in training mode, the
 * identity in eval mode; masks from the layer's generator, seeded by sp_model_init. */
sp_layer *sp_dropout(float p);
/* [B, C, H, W] → [B, C], the mean over each map (adaptive_avg_pool2d(x, 1).flatten(1)). */
sp_layer *sp_global_avgpool2d(void);
/* conv2d without a bias (nn.Conv2d(..., bias=False): <name>.weight only). */
sp_layer *sp_conv2d_nobias(const char *name, int cin, int cout, int k, int stride, int pad);
/* Ops of several inputs (sp_apply2 / sp_apply_n): the sum of same-shaped inputs, and
 * the concatenation along dim 1 (channels) of inputs that agree in every other dim. */
sp_layer *sp_add(void);
/* ReLU of the sum, max(x_0 + x_1 + …, 0), as one op, bitwise sp_add then sp_relu (the
 * join of a residual block). */
sp_layer *sp_add_relu(void);
sp_layer *sp_concat(void);
/* Softmax + cross-entropy, mean over the batch: logits [B, K], labels [B] → [1]. */
sp_layer *sp_softmax_ce(void);

/* Recurrent layers, batch-first x [B, T, C], h_0 = 0, PyTorch nn.RNN / nn.GRU
 * equations and names (<name>.weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0;
 * GRU gate order r, z, n). SP_SEQ_LAST outputs h_T [B, H]; SP_SEQ_ALL outputs
 * every h_t [B, T, H] (PyTorch's `output`). */
typedef enum { SP_SEQ_LAST = 0, SP_SEQ_ALL = 1 } sp_seq_output;
sp_layer *sp_rnn(const char *name, int input, int hidden, sp_seq_output mode);
sp_layer *sp_gru(const char *name, int input, int hidden, sp_seq_output mode);

/* make CUDA=1: register every layer's CUDA twin (layers/register_cuda.c), called by
 * sp_cuda_start (cli/cuda_start.h) once the backend is up. */
void sp_layers_cuda_register(void);

/* The opdefs, for code that needs to recognise an op. */
extern const sp_opdef sp_op_linear, sp_op_conv2d, sp_op_relu, sp_op_tanh, sp_op_sigmoid,
    sp_op_maxpool2d, sp_op_flatten, sp_op_softmax_ce, sp_op_rnn, sp_op_gru, sp_op_add, sp_op_concat,
    sp_op_batchnorm2d, sp_op_global_avgpool2d, sp_op_avgpool2d, sp_op_dropout, sp_op_conv2d_groups,
    sp_op_batchnorm2d_relu, sp_op_add_relu;

#ifdef __cplusplus
}
#endif

#endif
