/* softmax_ce.c — softmax + cross-entropy, mean over the batch (nn.CrossEntropyLoss).
 *
 * logits z [B, K], labels c [B] → l = (1/B) Σ_b −log softmax(z_b)[c_b], shape [1].
 *   δ:  dz_b = dl · (softmax(z_b) − onehot(c_b)) / B
 *   Jᵀ (per sample, K × 1) = (p_b − onehot(c_b)) / B: the scan's first element ∇x_n l
 *   comes from here. The probabilities are saved by the forward pass. */
#include <math.h>
#include "core/error.h"
#include "core/tape.h"
#include "layers/layers.h"

static void ce_infer(sp_node *n, const sp_tensor *x)
{
    char buf[64];
    if (x->ndim != 2) sp_fail("softmax_ce: logits %s, expected [B, K]", sp_shape_str(x, buf, sizeof buf));
    n->out = sp_tensor_view(NULL, 1, (int[]){1});
}

static void ce_forward(sp_node *n)
{
    const sp_tensor *z = sp_node_x(n);
    int B = z->shape[0], K = z->shape[1];
    float *p = sp_tape_alloc(n->tape, z->numel * sizeof(float));
    double total = 0.0;
    for (int b = 0; b < B; b++) {
        const float *zb = z->data + (size_t)b * K;
        float *pb = p + (size_t)b * K;
        int c = n->labels[b];
        if (c < 0 || c >= K) sp_fail("softmax_ce: label %d of sample %d out of range [0, %d)", c, b, K);
        float m = zb[0];
        for (int k = 1; k < K; k++) m = zb[k] > m ? zb[k] : m;
        double s = 0.0;
        for (int k = 0; k < K; k++) s += exp((double)(zb[k] - m));
        for (int k = 0; k < K; k++) pb[k] = (float)(exp((double)(zb[k] - m)) / s);
        total += log(s) - (double)(zb[c] - m);
    }
    n->saved = p;
    n->out.data[0] = (float)(total / B);
}

static void ce_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    const float *p = n->saved;
    int B = dx->shape[0], K = dx->shape[1];
    float scale = dy->data[0] / (float)B;
    for (int b = 0; b < B; b++)
        for (int k = 0; k < K; k++) {
            size_t i = (size_t)b * K + k;
            dx->data[i] = scale * (p[i] - (k == n->labels[b] ? 1.0f : 0.0f));
        }
}

static void ce_jt_pattern(const sp_node *n, int i, sp_csr *jt)
{
    int K = sp_node_x(n)->shape[1];
    sp_csr_alloc(jt, K, 1, K);
    for (int k = 0; k < K; k++) {
        jt->indptr[k + 1] = k + 1;
        jt->indices[k] = 0;
    }
}

/* With dl = 1 (the loss is the scan's root), Jᵀ·[1] is exactly backward_input's δ_b. */
static void ce_jt_values(const sp_node *n, int i, int b, sp_csr *jt)
{
    const float *p = (const float *)n->saved + (size_t)b * jt->rows;
    float inv_b = 1.0f / (float)sp_node_x(n)->shape[0];
    for (int k = 0; k < jt->rows; k++) jt->data[k] = (p[k] - (k == n->labels[b] ? 1.0f : 0.0f)) * inv_b;
}

static sp_cost ce_cost(const sp_node *n)
{
    double e = (double)sp_node_x(n)->numel;
    return (sp_cost){.fwd_flops = 25 * e, .bwd_input_flops = 2 * e, .out_bytes = 4, .saved_bytes = 4 * e};
}

const sp_opdef sp_op_softmax_ce = {
    .name = "softmax_ce",
    .infer = ce_infer,
    .jt_pattern = ce_jt_pattern,
    .cost = ce_cost,
    .cpu = {
        .forward = ce_forward,
        .backward_input = ce_backward_input,
        .jt_values = ce_jt_values,
    },
};

sp_layer *sp_softmax_ce(void)
{
    sp_layer *l = sp_xcalloc(1, sizeof *l);
    l->op = &sp_op_softmax_ce;
    return l;
}
