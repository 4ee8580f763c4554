/* recurrent.h — what rnn.c and gru.c share: the layer struct, the per-step saved state,
 * shape checks, PyTorch init, the lazily computed BPTT shared by δ and G, and the
 * pointwise nonlinearities of the cells. Each cell's math stays in its own file.
 *
 * Layout (batch-first, like x [B, T, C] and PyTorch's output [B, T, H]):
 *   hs  [B, T, H]   h_1 … h_T (row (b, t-1) holds h_t; h_0 = 0 is never stored)
 *   da  [B, T, W]   ∂l/∂(pre-activations) of every step, W = H (RNN) or 4H (GRU):
 *                   everything G and δ need, so each is a few big GEMMs over all steps
 *                   (Eq. 2 of the BPPSA paper: given ∇h_t, the steps are independent). */
#ifndef SP_RECURRENT_H
#define SP_RECURRENT_H

#include <math.h>
#include <pthread.h>
#include "core/op.h"
#include "layers/layers.h"

typedef struct sp_recurrent_layer {
    sp_layer base;
    int input, hidden;
    int gates;            /* 1 (RNN) or 3 (GRU): rows of W_ih / W_hh per H */
    int da_width;         /* W above: H (RNN) or 4H (GRU)                  */
    int gate_width;       /* saved gates per step: 0 (RNN) or 4H (GRU)     */
    sp_seq_output mode;
} sp_recurrent_layer;

/* Per-step state of one node, in the tape's arena. Everything backward touches is
 * allocated by forward: the arena is not thread-safe, and δ and G may run on two
 * threads at once. */
typedef struct sp_recurrent_saved {
    int B, T;
    float *hs;            /* [B, T, H]; the output itself for SP_SEQ_ALL        */
    float *gates;         /* GRU: [B, T, 4H] = r, z, n, M (M = W_hn h + b_hn)  */
    float *fwd_scratch;   /* GRU forward: W_hh h_{t-1} + b_hh, [B, 3H]         */
    float *da;            /* BPTT result, [B, T, W]                             */
    float *g;             /* BPTT's running ∇h_t, [B, H]                        */
    float *chain_da;      /* chain_backward_params' own [B, T, W]               */
    /* The BPTT is run once per backward pass, by whichever of δ / G comes first. */
    pthread_mutex_t lock;
    const float *bptt_dy; /* the dy that da was computed from          */
    unsigned bptt_users;  /* SP_REC_INPUT | SP_REC_PARAMS already served */
} sp_recurrent_saved;

enum { SP_REC_INPUT = 1u, SP_REC_PARAMS = 2u };

#define SP_REC(n) ((const sp_recurrent_layer *)(n)->layer)
#define SP_REC_SAVED(n) ((sp_recurrent_saved *)(n)->saved)

/* Parameters weight_ih_l0 [G·H, C], weight_hh_l0 [G·H, H], bias_ih_l0, bias_hh_l0 [G·H]. */
sp_layer *sp_recurrent_new(const sp_opdef *op, const char *name, int input, int hidden, int gates,
                           sp_seq_output mode);
/* x must be [B, T, C]; out is [B, H] or [B, T, H]. */
void sp_recurrent_infer(sp_node *n, const sp_tensor *x);
/* PyTorch: every parameter ~ U(±1/√H), in the order ih, hh, b_ih, b_hh. */
void sp_recurrent_init(sp_layer *l, sp_rng *r);
/* Allocate the saved state (forward, single-threaded) and point hs at the output for
 * SP_SEQ_ALL. */
sp_recurrent_saved *sp_recurrent_save(sp_node *n);
/* After the recurrence: SP_SEQ_LAST copies h_T into the output. */
void sp_recurrent_finish_forward(sp_node *n);
/* ∇h_T (or every step's dy for SP_SEQ_ALL) into g / added to g for step t. */
void sp_recurrent_seed_grad(const sp_node *n, const sp_tensor *dy, int t, float *g, bool add);
int sp_recurrent_chain_len(const sp_node *n);
/* da for this backward pass, running bptt(n, dy) first if it is not current for user
 * (one of SP_REC_INPUT / SP_REC_PARAMS). Thread-safe: concurrent callers share one run.
 * A second call by the same user means a new backward pass and recomputes. */
const float *sp_recurrent_bptt_once(sp_node *n, const sp_tensor *dy, unsigned user,
                                    void (*bptt)(sp_node *n, const sp_tensor *dy));
/* dW += Σ_b Σ_{t≥2} da_tᵀ h_{t-1} for columns [col, col+rows) of da, into dW rows
 * [0, rows) of a [rows, H] block: the recurrent weight gradient, h_0 = 0 dropping t = 1. */
void sp_recurrent_acc_whh(const sp_node *n, const float *da, int col, int rows, float *dW);
sp_cost sp_recurrent_cost(const sp_node *n, double fwd_pointwise_per_h, double bwd_pointwise_per_h);

/* tanh through one expf: glibc's tanhf costs ~4× an expf and is the forward's hot spot
 * at H = 20. Absolute error ≤ 1e-7; below |x| < 2⁻⁵ a Taylor series keeps the relative
 * error ≤ 3e-6 where (1 − e)/(1 + e) would cancel. */
static inline float sp_rec_tanh(float x)
{
    float a = fabsf(x);
    if (a < 0.03125f) {
        float x2 = x * x;
        return x * (1.0f - x2 * (1.0f / 3.0f - x2 * (2.0f / 15.0f)));
    }
    float e = expf(-2.0f * a);
    return copysignf((1.0f - e) / (1.0f + e), x);
}

static inline float sp_rec_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

#endif
