/* recurrent.c — plumbing shared by the RNN and GRU ops (see recurrent.h). */
#include <stdio.h>
#include <string.h>
#include "core/device.h"
#include "core/kernels/dense.h"
#include "core/error.h"
#include "core/tape.h"
#include "layers/recurrent.h"

sp_layer *sp_recurrent_new(const sp_opdef *op, const char *name, int input, int hidden, int gates,
                           sp_seq_output mode)
{
    if (input < 1 || hidden < 1)
        sp_fail("%s %s: input %d, hidden %d (expected positive)", op->name, name, input, hidden);
    if (mode != SP_SEQ_LAST && mode != SP_SEQ_ALL)
        sp_fail("%s %s: output mode %d (expected SP_SEQ_LAST or SP_SEQ_ALL)", op->name, name, (int)mode);
    sp_recurrent_layer *l = sp_xcalloc(1, sizeof *l);
    l->base.op = op;
    snprintf(l->base.name, sizeof l->base.name, "%s", name);
    l->input = input;
    l->hidden = hidden;
    l->gates = gates;
    l->da_width = gates == 1 ? hidden : 4 * hidden;
    l->gate_width = gates == 1 ? 0 : 4 * hidden;
    l->mode = mode;
    int GH = gates * hidden;
    sp_param_new(&l->base, "weight_ih_l0", 2, (int[]){GH, input});
    sp_param_new(&l->base, "weight_hh_l0", 2, (int[]){GH, hidden});
    sp_param_new(&l->base, "bias_ih_l0", 1, (int[]){GH});
    sp_param_new(&l->base, "bias_hh_l0", 1, (int[]){GH});
    return &l->base;
}

void sp_recurrent_infer(sp_node *n, const sp_tensor *x)
{
    const sp_recurrent_layer *l = SP_REC(n);
    char buf[64];
    if (x->ndim != 3 || x->shape[2] != l->input || x->shape[0] < 1 || x->shape[1] < 1)
        sp_fail("%s %s: input %s, expected [B, T, %d] (batch-first)", n->layer->op->name, n->layer->name,
                sp_shape_str(x, buf, sizeof buf), l->input);
    int B = x->shape[0], T = x->shape[1];
    n->out = l->mode == SP_SEQ_ALL ? sp_tensor_view(NULL, 3, (int[]){B, T, l->hidden})
                                   : sp_tensor_2d(NULL, B, l->hidden);
}

void sp_recurrent_init(sp_layer *l, sp_rng *r)
{
    float bound = 1.0f / sqrtf((float)((sp_recurrent_layer *)l)->hidden);
    for (int p = 0; p < l->nparams; p++) sp_fill_uniform(&l->params[p]->value, r, bound);
}

static float *tape_floats(sp_node *n, size_t count)
{
    return count ? sp_tape_alloc(n->tape, count * sizeof(float)) : NULL;
}

sp_recurrent_saved *sp_recurrent_save(sp_node *n)
{
    const sp_recurrent_layer *l = SP_REC(n);
    const sp_tensor *x = sp_node_x(n);
    sp_recurrent_saved *s = sp_tape_alloc(n->tape, sizeof *s);
    memset(s, 0, sizeof *s);
    int B = s->B = x->shape[0], T = s->T = x->shape[1], C = l->input, H = l->hidden, GH = l->gates * H;
    size_t BT = (size_t)B * T;
    s->x_tm = tape_floats(n, BT * C);
    s->whh_t = tape_floats(n, (size_t)GH * H);
    s->hs = tape_floats(n, BT * H);
    s->gates = tape_floats(n, BT * (size_t)l->gate_width);
    s->fwd_scratch = l->gates > 1 ? tape_floats(n, (size_t)B * GH) : NULL;
    s->da = tape_floats(n, BT * (size_t)l->da_width);
    s->g = tape_floats(n, (size_t)B * H);
    s->chain_da = tape_floats(n, BT * (size_t)l->da_width);
    pthread_mutex_init(&s->lock, NULL);
    n->saved = s;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            memcpy(s->x_tm + ((size_t)t * B + b) * C, x->data + ((size_t)b * T + t) * C, (size_t)C * sizeof(float));
    const float *Whh = n->layer->params[1]->value.data;
    for (int i = 0; i < GH; i++)
        for (int k = 0; k < H; k++) s->whh_t[(size_t)k * GH + i] = Whh[(size_t)i * H + k];
    return s;
}

void sp_recurrent_finish_forward(sp_node *n)
{
    const sp_recurrent_saved *s = SP_REC_SAVED(n);
    size_t H = (size_t)SP_REC(n)->hidden;
    if (SP_REC(n)->mode == SP_SEQ_LAST) {
        memcpy(n->out.data, s->hs + (size_t)(s->T - 1) * s->B * H, (size_t)s->B * H * sizeof(float));
        return;
    }
    for (int b = 0; b < s->B; b++)
        for (int t = 0; t < s->T; t++)
            memcpy(n->out.data + ((size_t)b * s->T + t) * H, s->hs + ((size_t)t * s->B + b) * H, H * sizeof(float));
}

void sp_recurrent_seed_grad(const sp_node *n, const sp_tensor *dy, int t, float *g, bool add)
{
    const sp_recurrent_saved *s = SP_REC_SAVED(n);
    size_t H = (size_t)SP_REC(n)->hidden;
    if (SP_REC(n)->mode == SP_SEQ_LAST && t != s->T - 1) {
        if (!add) memset(g, 0, (size_t)s->B * H * sizeof(float));
        return;
    }
    for (int b = 0; b < s->B; b++) {
        const float *src = SP_REC(n)->mode == SP_SEQ_ALL ? dy->data + ((size_t)b * s->T + t) * H : dy->data + b * H;
        float *gb = g + b * H;
        if (add)
            for (size_t j = 0; j < H; j++) gb[j] += src[j];
        else
            memcpy(gb, src, H * sizeof(float));
    }
}

int sp_recurrent_chain_len(const sp_node *n) { return sp_node_x(n)->shape[1]; }

const float *sp_recurrent_bptt_once(sp_node *n, const sp_tensor *dy, unsigned user,
                                    void (*bptt)(sp_node *n, const sp_tensor *dy))
{
    sp_recurrent_saved *s = SP_REC_SAVED(n);
    pthread_mutex_lock(&s->lock);   /* a concurrent δ / G waits for the one BPTT run */
    if (s->bptt_dy != dy->data || (s->bptt_users & user)) {
        bptt(n, dy);
        s->bptt_dy = dy->data;
        s->bptt_users = 0;
    }
    s->bptt_users |= user;
    pthread_mutex_unlock(&s->lock);
    return s->da;
}

void sp_recurrent_acc_wih(const sp_node *n, const float *da, int col, int rows, int t0, int t1, float *dW)
{
    const sp_recurrent_saved *s = SP_REC_SAVED(n);
    int C = SP_REC(n)->input, W = SP_REC(n)->da_width;
    sp_gemm(true, false, rows, C, (t1 - t0) * s->B, 1.0f, da + col, W, s->x_tm + (size_t)t0 * s->B * C, C, 1.0f, dW,
            C);
}

void sp_recurrent_acc_whh(const sp_node *n, const float *da, int col, int rows, int t0, int t1, float *dW)
{
    const sp_recurrent_saved *s = SP_REC_SAVED(n);
    int H = SP_REC(n)->hidden, W = SP_REC(n)->da_width;
    int lo = t0 > 0 ? t0 : 1;   /* h_0 = 0: row 0 (step 1) has no recurrent term */
    if (t1 <= lo) return;
    /* rows lo..t1-1 of da against h_lo..h_{t1-1} (hs rows lo-1..): both contiguous in the
     * time-major layout */
    sp_gemm(true, false, rows, H, (t1 - lo) * s->B, 1.0f, da + (size_t)(lo - t0) * s->B * W + col, W,
            s->hs + (size_t)(lo - 1) * s->B * H, H, 1.0f, dW, H);
}

void sp_recurrent_input_grad(const sp_node *n, const float *da, int col, int rows, const float *W_rows, float beta,
                             float *dx)
{
    const sp_recurrent_saved *s = SP_REC_SAVED(n);
    int C = SP_REC(n)->input, W = SP_REC(n)->da_width;
    for (int b = 0; b < s->B; b++)
        sp_gemm(false, false, s->T, C, rows, 1.0f, da + (size_t)b * W + col, s->B * W, W_rows, C, beta,
                dx + (size_t)b * s->T * C, C);
}

sp_cost sp_recurrent_cost(const sp_node *n, double fwd_pointwise_per_h, double bwd_pointwise_per_h)
{
    const sp_recurrent_layer *l = SP_REC(n);
    const sp_tensor *x = sp_node_x(n);
    double B = x->shape[0], T = x->shape[1], C = l->input, H = l->hidden, GH = l->gates * H;
    double BT = B * T, in_proj = 2 * BT * C * GH, rec = 2 * BT * H * GH;
    return (sp_cost){
        .fwd_flops = in_proj + rec + BT * H * fwd_pointwise_per_h,
        .bwd_input_flops = in_proj,   /* dx = da·W_ih; the shared BPTT is counted under G */
        .bwd_params_flops = in_proj + 2 * rec + BT * H * bwd_pointwise_per_h + 2 * BT * GH,
        .out_bytes = 4 * (double)n->out.numel,
        .saved_bytes = 4 * (BT * (C + H + l->gate_width + 2.0 * l->da_width) + GH * H + B * H + (l->gates > 1 ? B * GH : 0)),
        .param_bytes = 4 * (GH * (C + H + 2)),
    };
}
