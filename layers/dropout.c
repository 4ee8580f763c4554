/* dropout.c — nn.Dropout(p): in training mode each element is kept with probability
 * 1 − p and scaled by 1/(1 − p), else zeroed; in eval mode (or p = 0) y = x.
 *   δ:  dx = dy ⊙ m, with m the forward's mask (0 or 1/(1−p))       G: none
 *   Jᵀ = diag(m_b) for sample b (the pattern is the whole diagonal, dropped elements
 *   stored as explicit zeros, as relu does).
 * Seeded: the layer draws its masks from its own generator, seeded from the model's
 * seed at sp_model_init (init_params) and advanced one draw per element per training
 * forward, so the same seed gives the same masks (the bits of PyTorch's generator are
 * not reproduced; its distribution is). */
#include <stdio.h>
#include <string.h>
#include "core/kernels/csr_ops.h"
#include "core/error.h"
#include "core/tape.h"
#include "layers/dropout_internal.h"
#include "layers/elementwise.h"
#include "layers/layers.h"
#include "core/guard.h"

#define DL(n) ((dropout_layer *)(n)->layer)

/* The mask of this node's forward: NULL when it passed x through. */
static const float *mask_of(const sp_node *n) { return n->saved; }

static void dropout_forward(sp_node *n)
{
    dropout_layer *l = DL(n);
    const sp_tensor *x = sp_node_x(n);
    if (n->layer->eval || l->p == 0.0f) {
        n->saved = NULL;
        memcpy(n->out.data, x->data, x->numel * sizeof(float));
        return;
    }
    float *m = sp_tape_alloc(n->tape, x->numel * sizeof(float)), keep = 1.0f / (1.0f - l->p);
    for (size_t i = 0; i < x->numel; i++) {
        m[i] = sp_rng_uniform(&l->rng) < l->p ? 0.0f : keep;
        n->out.data[i] = x->data[i] * m[i];
    }
    n->saved = m;
}

static void dropout_backward_input(sp_node *n, int i0, const sp_tensor *dy, sp_tensor *dx)
{
    const float *m = mask_of(n);
    if (!m) {
        memcpy(dx->data, dy->data, dx->numel * sizeof(float));
        return;
    }
    for (size_t i = 0; i < dx->numel; i++) dx->data[i] = dy->data[i] * m[i];
}

static void dropout_jt_pattern(const sp_node *n, int i0, sp_csr *jt)
{
    sp_csr_identity(jt, (int)sp_tensor_sample_numel(&n->out));
}

static void dropout_jt_values(const sp_node *n, int i0, int b, sp_csr *jt)
{
    const float *m = mask_of(n);
    for (int r = 0; r < jt->rows; r++) jt->data[r] = m ? m[(size_t)b * jt->rows + r] : 1.0f;
}

static sp_cost dropout_cost(const sp_node *n)
{
    double e = (double)n->out.numel;
    return (sp_cost){.fwd_flops = 2 * e, .bwd_input_flops = e, .out_bytes = 4 * e, .saved_bytes = 4 * e};
}

static void dropout_init(sp_layer *l, sp_rng *r)
{
    uint64_t seed = (uint64_t)sp_rng_u32(r) << 32 | sp_rng_u32(r);
    sp_rng_seed(&((dropout_layer *)l)->rng, seed);
}

const sp_opdef sp_op_dropout = {
    .name = "dropout",
    .infer = sp_elementwise_infer,
    .jt_pattern = dropout_jt_pattern,
    .cost = dropout_cost,
    .init_params = dropout_init,
    .cpu = {
        .forward = dropout_forward,
        .backward_input = dropout_backward_input,
        .jt_values = dropout_jt_values,
    },
};

sp_layer *sp_dropout(float p)
{
    SP_GUARD(NULL);
    if (!(p >= 0.0f && p < 1.0f)) sp_fail("dropout: p = %g, expected 0 <= p < 1", (double)p);
    dropout_layer *l = sp_xcalloc(1, sizeof *l);
    l->base.op = &sp_op_dropout;
    l->p = p;
    sp_rng_seed(&l->rng, 0);
    return &l->base;
}
