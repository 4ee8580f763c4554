/* rnn.c — Elman RNN, PyTorch nn.RNN(tanh, batch_first=True), one layer, h_0 = 0.
 *
 *   h_t = tanh(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh)        (BPPSA paper, Eq. 9)
 *
 * x [B, T, C]; W_ih [H, C], W_hh [H, H], b_ih, b_hh [H]. Output h_T [B, H] or every
 * h_t [B, T, H]. Forward: the input projection of all steps is ONE GEMM, then one small
 * [B, H]×W_hhᵀ GEMM per step (core/kernels/gemm_small.h).
 *   BPTT:  a_t = g_t ⊙ (1 − h_t²),  g_{t-1} = a_t W_hh + dy_{t-1}   (g_T = dy_T)
 *   δ:     dx = a W_ih                           one GEMM per sample over all its steps
 *   G:     dW_ih += aᵀx, dW_hh += Σ_t a_tᵀ h_{t-1}, db_ih = db_hh += Σ a   (Eq. 2)
 *   chain: Jᵀ_t = W_hhᵀ · diag(1 − h_t²)  (H × H, rows index h_{t-1}). */
#include <string.h>
#include "core/device.h"
#include "core/error.h"
#include "core/kernels/dense.h"
#include "core/threads.h"
#include "core/tape.h"
#include "layers/recurrent.h"
#include "core/guard.h"

enum { W_IH, W_HH, B_IH, B_HH };
#define PV(n, i) ((n)->layer->params[i]->value.data)
#define PG(n, i) ((n)->layer->params[i]->grad.data)

__attribute__((always_inline)) static inline void rnn_tanh_inplace_body(float *h, int count)
{
    for (int i = 0; i < count; i++) h[i] = sp_rec_tanh(h[i]);
}
SP_REC_MULTIVERSION(rnn_tanh_inplace, (float *h, int count), (h, count))

static void rnn_forward(sp_node *n)
{
    sp_recurrent_saved *s = sp_recurrent_save(n);
    int B = s->B, T = s->T, C = SP_REC(n)->input, H = SP_REC(n)->hidden, BH = B * H;
    size_t BT = (size_t)B * T;
    const float *bih = PV(n, B_IH), *bhh = PV(n, B_HH);
    float *hs = s->hs;
    for (size_t i = 0; i < BT; i++)
        for (int j = 0; j < H; j++) hs[i * H + j] = bih[j] + bhh[j];
    sp_gemm(false, true, (int)BT, H, C, 1.0f, s->x_tm, C, PV(n, W_IH), C, 1.0f, hs, H);
    for (int t = 0; t < T; t++) {
        float *ht = hs + (size_t)t * BH;
        if (t > 0) sp_rec_step_gemm(B, H, H, 1.0f, ht - BH, H, s->whh_t, H, 1.0f, ht, H);
        rnn_tanh_inplace(ht, BH);
    }
    sp_recurrent_finish_forward(n);
}

/* The per-step pointwise piece shared by BPTT and the chain: a = g ⊙ (1 − h²). */
static inline void rnn_step_da(const float *h, const float *g, float *a, int count)
{
    for (int j = 0; j < count; j++) a[j] = g[j] * (1.0f - h[j] * h[j]);
}

static void rnn_bptt(sp_node *n, const sp_tensor *dy)
{
    sp_recurrent_saved *s = SP_REC_SAVED(n);
    int B = s->B, T = s->T, H = SP_REC(n)->hidden, BH = B * H;
    sp_recurrent_seed_grad(n, dy, T - 1, s->g, false);
    for (int t = T - 1; t >= 0; t--) {
        float *da_t = s->da + (size_t)t * BH;
        rnn_step_da(s->hs + (size_t)t * BH, s->g, da_t, BH);
        if (t == 0) break;
        sp_recurrent_seed_grad(n, dy, t - 1, s->g, false);
        sp_rec_step_gemm(B, H, H, 1.0f, da_t, H, PV(n, W_HH), H, 1.0f, s->g, H);
    }
}

/* G from da of the steps of rows [t0, t1) (da points at row t0). */
static void rnn_params_from_da(sp_node *n, const float *da, int t0, int t1)
{
    const sp_recurrent_saved *s = SP_REC_SAVED(n);
    int H = SP_REC(n)->hidden;
    size_t BT = (size_t)s->B * (size_t)(t1 - t0);
    sp_recurrent_acc_wih(n, da, 0, H, t0, t1, PG(n, W_IH));
    sp_recurrent_acc_whh(n, da, 0, H, t0, t1, PG(n, W_HH));
    float *dbih = PG(n, B_IH), *dbhh = PG(n, B_HH);
    for (size_t i = 0; i < BT; i++)
        for (int j = 0; j < H; j++) {
            float v = da[i * H + j];
            dbih[j] += v;
            dbhh[j] += v;
        }
}

static void rnn_backward_params(sp_node *n, const sp_tensor *dy)
{
    rnn_params_from_da(n, sp_recurrent_bptt_once(n, dy, SP_REC_PARAMS, rnn_bptt), 0, SP_REC_SAVED(n)->T);
}

static void rnn_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    const float *da = sp_recurrent_bptt_once(n, dy, SP_REC_INPUT, rnn_bptt);
    sp_recurrent_input_grad(n, da, 0, SP_REC(n)->hidden, PV(n, W_IH), 0.0f, dx->data);
}

static void rnn_chain_jt(const sp_node *n, int b, int t, float *jt)
{
    const sp_recurrent_saved *s = SP_REC_SAVED(n);
    int H = SP_REC(n)->hidden;
    const float *h = s->hs + ((size_t)(t - 1) * s->B + b) * H, *W = PV(n, W_HH);
    for (int i = 0; i < H; i++)
        for (int j = 0; j < H; j++) jt[(size_t)i * H + j] = W[(size_t)j * H + i] * (1.0f - h[j] * h[j]);
}

/* dh holds the steps of rows [t0, t0 + len), batch-first: [B, len, H]. */
typedef struct chain_ctx { const sp_recurrent_saved *s; const float *dh; int H, t0, len; } chain_ctx;

/* Rows (t, b) of chain_da from dh (i counts from row t0's first sample). */
static void chain_da_range(void *p, size_t begin, size_t end)
{
    const chain_ctx *c = p;
    const sp_recurrent_saved *s = c->s;
    size_t off = (size_t)c->t0 * s->B;
    for (size_t k = begin; k < end; k++) {
        size_t i = off + k, t = i / (size_t)s->B, b = i % (size_t)s->B;
        rnn_step_da(s->hs + i * c->H, c->dh + (b * c->len + t - c->t0) * c->H, s->chain_da + i * c->H, c->H);
    }
}

/* G from the total ∇h_t of the steps t0+1 … t1 (e.g. recovered by the BPPSA scan): no
 * recurrence, so any range of steps is independent of the others. */
static void rnn_chain_backward_params_range(sp_node *n, const sp_tensor *dh, int t0, int t1)
{
    const sp_recurrent_saved *s = SP_REC_SAVED(n);
    if (t0 < 0 || t1 > s->T || t0 >= t1 || dh->ndim != 3 || dh->shape[0] != s->B || dh->shape[1] != t1 - t0)
        sp_fail("rnn: chain_backward_params_range: steps [%d, %d) of %d, dh [%d, %d, ...] (expected [%d, %d, H])", t0,
                t1, s->T, dh->shape[0], dh->shape[1], s->B, t1 - t0);
    chain_ctx c = {s, dh->data, SP_REC(n)->hidden, t0, t1 - t0};
    sp_parallel_for((size_t)s->B * (size_t)(t1 - t0), chain_da_range, &c);
    rnn_params_from_da(n, s->chain_da + (size_t)t0 * s->B * c.H, t0, t1);
}

static void rnn_chain_backward_params(sp_node *n, const sp_tensor *dh)
{
    rnn_chain_backward_params_range(n, dh, 0, SP_REC_SAVED(n)->T);
}

static sp_cost rnn_cost(const sp_node *n) { return sp_recurrent_cost(n, 20, 4); }

const sp_opdef sp_op_rnn = {
    .name = "rnn",
    .infer = sp_recurrent_infer,
    .cost = rnn_cost,
    .init_params = sp_recurrent_init,
    .chain_len = sp_recurrent_chain_len,
    .cpu = {
        .forward = rnn_forward,
        .backward_input = rnn_backward_input,
        .backward_params = rnn_backward_params,
        .chain_jt = rnn_chain_jt,
        .chain_backward_params = rnn_chain_backward_params,
        .chain_backward_params_range = rnn_chain_backward_params_range,
    },
};

sp_layer *sp_rnn(const char *name, int input, int hidden, sp_seq_output mode)
{
    SP_GUARD(NULL);
    if (!name) sp_fail("sp_rnn: argument 'name' is NULL");
    return sp_recurrent_new(&sp_op_rnn, name, input, hidden, 1, mode);
}
