/* linear.c — fully connected layer: y = x·Wᵀ + b.
 *
 * x [B, in], W [out, in] (PyTorch layout), b [out], y [B, out].
 *   δ:  dx = dy·W                  (B×out)(out×in)
 *   G:  dW += dyᵀ·x, db += Σ_b dy  (out×B)(B×in)
 *   Jᵀ (per sample, in × out) = Wᵀ: dense, no guaranteed zeros; every entry stored, row i
 *   holds input i's weights to all outputs. Same for every sample. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "core/device.h"
#include "core/kernels/dense.h"
#include "core/error.h"
#include "core/tape.h"
#include "layers/layers.h"
#include "core/guard.h"

typedef struct linear_layer {
    sp_layer base;
    int in, out;
} linear_layer;

#define L(n) ((const linear_layer *)(n)->layer)

static void linear_infer(sp_node *n, const sp_tensor *x)
{
    char buf[64];
    if (x->ndim != 2 || x->shape[1] != L(n)->in)
        sp_fail("linear %s: input %s, expected [B, %d]", n->layer->name, sp_shape_str(x, buf, sizeof buf),
                L(n)->in);
    n->out = sp_tensor_2d(NULL, x->shape[0], L(n)->out);
}

static void linear_forward(sp_node *n)
{
    const sp_tensor *x = sp_node_x(n);
    const float *W = n->layer->params[0]->value.data, *b = n->layer->params[1]->value.data;
    int B = x->shape[0], in = L(n)->in, out = L(n)->out;
    for (int i = 0; i < B; i++) memcpy(n->out.data + (size_t)i * out, b, (size_t)out * sizeof(float));
    sp_gemm(false, true, B, out, in, 1.0f, x->data, in, W, in, 1.0f, n->out.data, out);
}

static void linear_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    const float *W = n->layer->params[0]->value.data;
    int B = dy->shape[0], in = L(n)->in, out = L(n)->out;
    sp_gemm(false, false, B, in, out, 1.0f, dy->data, out, W, in, 0.0f, dx->data, in);
}

static void linear_backward_params(sp_node *n, const sp_tensor *dy)
{
    const sp_tensor *x = sp_node_x(n);
    float *dW = n->layer->params[0]->grad.data, *db = n->layer->params[1]->grad.data;
    int B = dy->shape[0], in = L(n)->in, out = L(n)->out;
    sp_gemm(true, false, out, in, B, 1.0f, dy->data, out, x->data, in, 1.0f, dW, in);
    for (int i = 0; i < B; i++)
        for (int j = 0; j < out; j++) db[j] += dy->data[(size_t)i * out + j];
}

static void linear_jt_pattern(const sp_node *n, int i, sp_csr *jt)
{
    int in = L(n)->in, out = L(n)->out;
    if ((int64_t)in * out > INT32_MAX)
        sp_fail("linear %s: Jᵀ of %d×%d exceeds int32 CSR indexing", n->layer->name, in, out);
    sp_csr_alloc(jt, in, out, (int64_t)in * out);
    for (int i = 0; i < in; i++) {
        jt->indptr[i + 1] = (i + 1) * out;
        for (int j = 0; j < out; j++) jt->indices[(size_t)i * out + j] = j;
    }
}

static void linear_jt_values(const sp_node *n, int i, int b, sp_csr *jt)
{
    const float *W = n->layer->params[0]->value.data;
    int in = L(n)->in, out = L(n)->out;
    for (int i = 0; i < in; i++)
        for (int j = 0; j < out; j++) jt->data[(size_t)i * out + j] = W[(size_t)j * in + i];
}

static sp_cost linear_cost(const sp_node *n)
{
    double B = n->out.shape[0], in = L(n)->in, out = L(n)->out;
    return (sp_cost){.fwd_flops = 2 * B * in * out,
                     .bwd_input_flops = 2 * B * in * out,
                     .bwd_params_flops = 2 * B * in * out + B * out,
                     .out_bytes = 4 * B * out,
                     .param_bytes = 4 * (in * out + out)};
}

static void linear_init(sp_layer *l, sp_rng *r)
{
    /* PyTorch: kaiming_uniform_(a=√5) on W and U(±1/√in) on b both give bound 1/√in. */
    float bound = 1.0f / sqrtf((float)((linear_layer *)l)->in);
    sp_fill_uniform(&l->params[0]->value, r, bound);
    sp_fill_uniform(&l->params[1]->value, r, bound);
}

const sp_opdef sp_op_linear = {
    .name = "linear",
    .infer = linear_infer,
    .jt_pattern = linear_jt_pattern,
    .cost = linear_cost,
    .init_params = linear_init,
    .cpu = {
        .forward = linear_forward,
        .backward_input = linear_backward_input,
        .backward_params = linear_backward_params,
        .jt_values = linear_jt_values,
    },
};

sp_layer *sp_linear(const char *name, int in, int out)
{
    SP_GUARD(NULL);
    if (!name) sp_fail("sp_linear: argument 'name' is NULL");
    if (in < 1 || out < 1) sp_fail("linear %s: sizes %d -> %d, expected positive", name, in, out);
    linear_layer *l = sp_xcalloc(1, sizeof *l);
    l->base.op = &sp_op_linear;
    snprintf(l->base.name, sizeof l->base.name, "%s", name);
    l->in = in;
    l->out = out;
    sp_param_new(&l->base, "weight", 2, (int[]){out, in});
    sp_param_new(&l->base, "bias", 1, (int[]){out});
    return &l->base;
}
