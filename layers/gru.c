/* gru.c — gated recurrent unit, PyTorch nn.GRU(batch_first=True), one layer, h_0 = 0.
 *
 * Gate order r, z, n in every [3H, ·] parameter, as PyTorch (BPPSA paper Eq. 10,
 * Appendix E's names):
 *   r = σ(R),  R = W_ir x + b_ir + W_hr h + b_hr
 *   z = σ(Z),  Z = W_iz x + b_iz + W_hz h + b_hz
 *   M = W_hn h + b_hn,  n = tanh(N),  N = W_in x + b_in + r ⊙ M
 *   h' = (1 − z) ⊙ n + z ⊙ h
 * Forward saves r, z, n, M per step ([T, B, 4H]) so backward recomputes nothing.
 * Per step, given g = ∇h_t (the piece gru_step_da, shared by BPTT and the chain):
 *   dN = g(1 − z)(1 − n²), dZ = g(h_{t-1} − n) z(1 − z), dM = dN ⊙ r, dR = dN ⊙ M ⊙ r(1 − r)
 * stored as da = [dR, dZ, dM, dN] (4H): ∂l/∂(W_hh h + b_hh) is the contiguous [dR, dZ, dM],
 * ∂l/∂(W_ih x + b_ih) is [dR, dZ, dN].
 *   BPTT:  g_{t-1} = g ⊙ z + [dR, dZ, dM] W_hh + dy_{t-1}
 *   δ:     dx = [dR, dZ, dN] W_ih                            (per sample, all its steps)
 *   G:     dW_ih += [dR, dZ, dN]ᵀ x, dW_hh += Σ_t [dR, dZ, dM]_tᵀ h_{t-1}, biases likewise
 *   chain: Jᵀ_t = W_hrᵀ diag(a) + W_hzᵀ diag(c) + W_hnᵀ diag(e) + diag(z)   (Eq. 11) with
 *          a = (1 − z)(1 − n²) M r(1 − r), c = (h_{t-1} − n) z(1 − z), e = (1 − z)(1 − n²) r. */
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

/* Pointwise part of one step for one sample: pre = [W_i x + b_i | W_h h + b_h] →
 * saved gates [r, z, n, M] (overwriting gate_row's first 3H) and h. */
__attribute__((always_inline)) static inline void gru_step_forward(float *restrict gate_row, const float *restrict hp, const float *restrict hprev,
                                    float *restrict h, int H)
{
    for (int j = 0; j < H; j++) {   /* branch-free: vectorised (sp_rec_expf) */
        float r = sp_rec_sigmoid(gate_row[j] + hp[j]);
        float z = sp_rec_sigmoid(gate_row[H + j] + hp[H + j]);
        float M = hp[2 * H + j];
        float nn = sp_rec_tanh(gate_row[2 * H + j] + r * M);
        h[j] = (1.0f - z) * nn + z * hprev[j];
        gate_row[j] = r;
        gate_row[H + j] = z;
        gate_row[2 * H + j] = nn;
        gate_row[3 * H + j] = M;
    }
}

/* One step of the whole batch: rows b of gates [B, 4H], hp [B, 3H], hprev and h [B, H]. */
__attribute__((always_inline)) static inline void gru_forward_pointwise_body(float *gates, const float *hp,
                                                                           const float *hprev, float *h, int B, int H)
{
    for (int b = 0; b < B; b++)
        gru_step_forward(gates + (size_t)b * 4 * H, hp + (size_t)b * 3 * H, hprev + (size_t)b * H, h + (size_t)b * H, H);
}
SP_REC_MULTIVERSION(gru_forward_pointwise, (float *gates, const float *hp, const float *hprev, float *h, int B, int H),
                    (gates, hp, hprev, h, B, H))

static void gru_forward(sp_node *n)
{
    sp_recurrent_saved *s = sp_recurrent_save(n);
    int B = s->B, T = s->T, C = SP_REC(n)->input, H = SP_REC(n)->hidden, H3 = 3 * H, H4 = 4 * H;
    size_t BT = (size_t)B * T;
    const float *bih = PV(n, B_IH), *bhh = PV(n, B_HH);
    float *hp = s->fwd_scratch, *h0 = s->g;   /* h_0 = 0; g is BPTT's, free until then */
    memset(h0, 0, (size_t)B * H * sizeof(float));
    for (size_t i = 0; i < BT; i++) memcpy(s->gates + i * H4, bih, (size_t)H3 * sizeof(float));
    sp_gemm(false, true, (int)BT, H3, C, 1.0f, s->x_tm, C, PV(n, W_IH), C, 1.0f, s->gates, H4);
    for (int t = 0; t < T; t++) {
        float *h = s->hs + (size_t)t * B * H, *gates = s->gates + (size_t)t * B * H4;
        for (int b = 0; b < B; b++) memcpy(hp + (size_t)b * H3, bhh, (size_t)H3 * sizeof(float));
        if (t > 0) sp_rec_step_gemm(B, H3, H, 1.0f, h - B * H, H, s->whh_t, H3, 1.0f, hp, H3);
        gru_forward_pointwise(gates, hp, t ? h - B * H : h0, h, B, H);
    }
    sp_recurrent_finish_forward(n);
}

/* da = [dR, dZ, dM, dN] of one step for one sample, from g = ∇h_t. */
static inline void gru_step_da(const float *gate_row, const float *hprev, const float *g, float *da, int H)
{
    for (int j = 0; j < H; j++) {
        float r = gate_row[j], z = gate_row[H + j], nn = gate_row[2 * H + j], M = gate_row[3 * H + j];
        float hj = hprev ? hprev[j] : 0.0f;
        float dN = g[j] * (1.0f - z) * (1.0f - nn * nn);
        da[j] = dN * M * r * (1.0f - r);
        da[H + j] = g[j] * (hj - nn) * z * (1.0f - z);
        da[2 * H + j] = dN * r;
        da[3 * H + j] = dN;
    }
}

static void gru_bptt(sp_node *n, const sp_tensor *dy)
{
    sp_recurrent_saved *s = SP_REC_SAVED(n);
    int B = s->B, T = s->T, H = SP_REC(n)->hidden, H4 = 4 * H;
    sp_recurrent_seed_grad(n, dy, T - 1, s->g, false);
    for (int t = T - 1; t >= 0; t--) {
        const float *gates = s->gates + (size_t)t * B * H4, *h = s->hs + (size_t)t * B * H;
        float *da = s->da + (size_t)t * B * H4;
        for (int b = 0; b < B; b++) {
            float *g = s->g + (size_t)b * H;
            const float *gate_row = gates + (size_t)b * H4;
            gru_step_da(gate_row, t ? h - (B - b) * H : NULL, g, da + (size_t)b * H4, H);
            for (int j = 0; j < H; j++) g[j] *= gate_row[H + j];   /* direct path z ⊙ g */
        }
        if (t == 0) break;
        sp_recurrent_seed_grad(n, dy, t - 1, s->g, true);
        sp_rec_step_gemm(B, H, 3 * H, 1.0f, da, H4, PV(n, W_HH), H, 1.0f, s->g, H);
    }
}

/* G from da of the steps of rows [t0, t1) (da points at row t0). */
static void gru_params_from_da(sp_node *n, const float *da, int t0, int t1)
{
    const sp_recurrent_saved *s = SP_REC_SAVED(n);
    int C = SP_REC(n)->input, H = SP_REC(n)->hidden, H4 = 4 * H;
    size_t BT = (size_t)s->B * (size_t)(t1 - t0);
    float *dWih = PG(n, W_IH), *dbih = PG(n, B_IH), *dbhh = PG(n, B_HH);
    sp_recurrent_acc_wih(n, da, 0, 2 * H, t0, t1, dWih);                        /* r, z from dR, dZ */
    sp_recurrent_acc_wih(n, da, 3 * H, H, t0, t1, dWih + (size_t)2 * H * C);    /* n from dN       */
    sp_recurrent_acc_whh(n, da, 0, 3 * H, t0, t1, PG(n, W_HH));                 /* [dR, dZ, dM]    */
    for (size_t i = 0; i < BT; i++) {
        const float *d = da + i * H4;
        for (int j = 0; j < 2 * H; j++) {
            dbih[j] += d[j];
            dbhh[j] += d[j];
        }
        for (int j = 2 * H; j < 3 * H; j++) {
            dbhh[j] += d[j];       /* dM */
            dbih[j] += d[H + j];   /* dN */
        }
    }
}

static void gru_backward_params(sp_node *n, const sp_tensor *dy)
{
    gru_params_from_da(n, sp_recurrent_bptt_once(n, dy, SP_REC_PARAMS, gru_bptt), 0, SP_REC_SAVED(n)->T);
}

static void gru_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    const float *da = sp_recurrent_bptt_once(n, dy, SP_REC_INPUT, gru_bptt);
    int C = SP_REC(n)->input, H = SP_REC(n)->hidden;
    const float *W = PV(n, W_IH);
    sp_recurrent_input_grad(n, da, 0, 2 * H, W, 0.0f, dx->data);
    sp_recurrent_input_grad(n, da, 3 * H, H, W + (size_t)2 * H * C, 1.0f, dx->data);
}

/* Eq. 11: column j of Jᵀ_t is ∂h_t[j]/∂h_{t-1}, i.e. z_j e_j + W_hhᵀ [dR, dZ, dM] for g = e_j. */
static void gru_chain_jt(const sp_node *n, int b, int t, float *jt)
{
    const sp_recurrent_saved *s = SP_REC_SAVED(n);
    int H = SP_REC(n)->hidden;
    size_t row = (size_t)(t - 1) * s->B + b;
    const float *gr = s->gates + row * 4 * H, *hprev = t > 1 ? s->hs + (row - s->B) * H : NULL;
    const float *Wr = PV(n, W_HH), *Wz = Wr + (size_t)H * H, *Wn = Wz + (size_t)H * H;
    for (int j = 0; j < H; j++) {
        float r = gr[j], z = gr[H + j], nn = gr[2 * H + j], M = gr[3 * H + j];
        float hj = hprev ? hprev[j] : 0.0f;
        float dn = (1.0f - z) * (1.0f - nn * nn);
        float a = dn * M * r * (1.0f - r), c = (hj - nn) * z * (1.0f - z), e = dn * r;
        for (int i = 0; i < H; i++)
            jt[(size_t)i * H + j] = Wr[(size_t)j * H + i] * a + Wz[(size_t)j * H + i] * c +
                                    Wn[(size_t)j * H + i] * e + (i == j ? z : 0.0f);
    }
}

/* dh holds the steps of rows [t0, t0 + len), batch-first: [B, len, H]. */
typedef struct chain_ctx { const sp_recurrent_saved *s; const float *dh; int H, t0, len; } chain_ctx;

/* Rows (t, b) of chain_da from dh (k counts from row t0's first sample). */
static void chain_da_range(void *p, size_t begin, size_t end)
{
    const chain_ctx *c = p;
    const sp_recurrent_saved *s = c->s;
    size_t B = (size_t)s->B, H = (size_t)c->H, off = (size_t)c->t0 * B;
    for (size_t k = begin; k < end; k++) {
        size_t i = off + k, t = i / B, b = i % B;
        const float *hprev = t ? s->hs + (i - B) * H : NULL;
        gru_step_da(s->gates + i * 4 * H, hprev, c->dh + (b * (size_t)c->len + t - (size_t)c->t0) * H,
                    s->chain_da + i * 4 * H, c->H);
    }
}

/* G from the total ∇h_t of the steps t0+1 … t1 (e.g. recovered by the BPPSA scan): no
 * recurrence, so any range of steps is independent of the others. */
static void gru_chain_backward_params_range(sp_node *n, const sp_tensor *dh, int t0, int t1)
{
    const sp_recurrent_saved *s = SP_REC_SAVED(n);
    if (t0 < 0 || t1 > s->T || t0 >= t1 || dh->ndim != 3 || dh->shape[0] != s->B || dh->shape[1] != t1 - t0)
        sp_fail("gru: chain_backward_params_range: steps [%d, %d) of %d, dh [%d, %d, ...] (expected [%d, %d, H])", t0,
                t1, s->T, dh->shape[0], dh->shape[1], s->B, t1 - t0);
    chain_ctx c = {s, dh->data, SP_REC(n)->hidden, t0, t1 - t0};
    sp_parallel_for((size_t)s->B * (size_t)(t1 - t0), chain_da_range, &c);
    gru_params_from_da(n, s->chain_da + (size_t)t0 * s->B * 4 * c.H, t0, t1);
}

static void gru_chain_backward_params(sp_node *n, const sp_tensor *dh)
{
    gru_chain_backward_params_range(n, dh, 0, SP_REC_SAVED(n)->T);
}

static sp_cost gru_cost(const sp_node *n) { return sp_recurrent_cost(n, 60, 20); }

const sp_opdef sp_op_gru = {
    .name = "gru",
    .infer = sp_recurrent_infer,
    .cost = gru_cost,
    .init_params = sp_recurrent_init,
    .chain_len = sp_recurrent_chain_len,
    .cpu = {
        .forward = gru_forward,
        .backward_input = gru_backward_input,
        .backward_params = gru_backward_params,
        .chain_jt = gru_chain_jt,
        .chain_backward_params = gru_chain_backward_params,
        .chain_backward_params_range = gru_chain_backward_params_range,
    },
};

sp_layer *sp_gru(const char *name, int input, int hidden, sp_seq_output mode)
{
    SP_GUARD(NULL);
    if (!name) sp_fail("sp_gru: argument 'name' is NULL");
    return sp_recurrent_new(&sp_op_gru, name, input, hidden, 3, mode);
}
