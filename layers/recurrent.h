/* recurrent.h — what rnn.c and gru.c share: the layer struct, the per-step saved state,
 * shape checks, PyTorch init, the lazily computed BPTT shared by δ and G, and the
 * pointwise nonlinearities of the cells. Each cell's math stays in its own file.
 *
 * Internal layout is time-major, [T, B, ·] (row (t, b) = t·B + b): each step's rows are
 * one contiguous block, so the recurrence streams through memory (batch-first, B strided
 * streams miss the cache at small H), and the input
 * projection and weight gradients are ONE GEMM each over T·B rows (dx, batch-first like
 * x, is one GEMM per sample).
 *   x_tm [T, B, C]  x transposed once per forward (x itself is batch-first [B, T, C])
 *   hs   [T, B, H]  h_1 … h_T (row (t-1, b) holds h_t; h_0 = 0 is never stored)
 *   da   [T, B, W]  ∂l/∂(pre-activations) of every step, W = H (RNN) or 4H (GRU):
 *                   everything G and δ need (Eq. 2 of the BPPSA paper: given every ∇h_t,
 *                   the steps' weight gradients are independent). */
#ifndef SP_RECURRENT_H
#define SP_RECURRENT_H

#include <math.h>
#include <pthread.h>
#include "core/device.h"
#include "core/kernels/dense.h"
#include "core/kernels/gemm_small.h"
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
    float *x_tm;          /* [T, B, C]                                          */
    float *whh_t;         /* W_hhᵀ [H, G·H]: the per-step GEMM runs NN, which     */
                          /* OpenBLAS does in half the time of NT at 16×60×20     */
    float *hs;            /* [T, B, H]                                          */
    float *gates;         /* GRU: [T, B, 4H] = r, z, n, M (M = W_hn h + b_hn)  */
    float *fwd_scratch;   /* GRU forward: W_hh h_{t-1} + b_hh, [B, 3H]         */
    float *da;            /* BPTT result, [T, B, W]                             */
    float *g;             /* BPTT's running ∇h_t, [B, H]                        */
    float *chain_da;      /* chain_backward_params' own [T, B, W]               */
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
/* Start of forward (single-threaded): allocate the saved state, fill x_tm and whh_t. */
sp_recurrent_saved *sp_recurrent_save(sp_node *n);
/* End of forward: h_T (SP_SEQ_LAST) or every h_t, batch-first (SP_SEQ_ALL), into out. */
void sp_recurrent_finish_forward(sp_node *n);
/* The part of dy that lands directly on h_{t+1} (row block t): dy[:, t] for SP_SEQ_ALL,
 * dy at t = T-1 and zero elsewhere for SP_SEQ_LAST; written into g [B, H] or added. */
void sp_recurrent_seed_grad(const sp_node *n, const sp_tensor *dy, int t, float *g, bool add);
int sp_recurrent_chain_len(const sp_node *n);
/* da for this backward pass, running bptt(n, dy) first if it is not current for user
 * (one of SP_REC_INPUT / SP_REC_PARAMS). Thread-safe: concurrent callers share one run.
 * A second call by the same user means a new backward pass and recomputes. */
const float *sp_recurrent_bptt_once(sp_node *n, const sp_tensor *dy, unsigned user,
                                    void (*bptt)(sp_node *n, const sp_tensor *dy));
/* The products over columns [col, col + rows) of da (one gate block), for the steps of
 * rows [t0, t1) (all of them: 0, T); da points at row t0 (its first t1 − t0 rows are read):
 *   acc_wih: dW[rows, C] += daᵀ x                          one GEMM over (t1 − t0)·B rows
 *   acc_whh: dW[rows, H] += Σ_{t≥2} da_tᵀ h_{t-1}          one GEMM (h_0 = 0 drops t = 1)
 *   input_grad: dx[b] = beta·dx[b] + da[:, b]·W_rows      one GEMM per sample (dx is
 *               batch-first), W_rows the matching [rows, C] rows of W_ih */
void sp_recurrent_acc_wih(const sp_node *n, const float *da, int col, int rows, int t0, int t1, float *dW);
void sp_recurrent_acc_whh(const sp_node *n, const float *da, int col, int rows, int t0, int t1, float *dW);
void sp_recurrent_input_grad(const sp_node *n, const float *da, int col, int rows, const float *W_rows, float beta,
                             float *dx);
sp_cost sp_recurrent_cost(const sp_node *n, double fwd_pointwise_per_h, double bwd_pointwise_per_h);

/* One recurrent step's product, C = alpha·A·B + beta·C with A, B, C row-major and not
 * transposed: the project's small kernel when it covers the shape (core/kernels/gemm_small.h:
 * no library call's fixed cost per step), sp_gemm else. Only the per-step products use
 * it; every other product rounds as sp_gemm does. */
static inline void sp_rec_step_gemm(int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                                    float beta, float *C, int ldc)
{
    if (!sp_gemm_small(false, false, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
        sp_gemm(false, false, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* The pointwise loops of the recurrent ops, compiled for AVX-512, AVX2 and the baseline;
 * SP_REC_MULTIVERSION(name, (params), (args)) defines name() calling the variant of
 * name_body() that sp_cpu_isa_level() (core/kernels/gemm_small.h: the CPU, capped by
 * DNNL_MAX_CPU_ISA) allows. No contraction under -std=c11: every variant, same bits. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SP_REC_MULTIVERSION(name, params, args)                                                            \
    __attribute__((target("avx512f"))) static void name##_avx512 params { name##_body args; }            \
    __attribute__((target("avx2"))) static void name##_avx2 params { name##_body args; }                 \
    static void name params                                                                               \
    {                                                                                                     \
        int level = sp_cpu_isa_level();                                                                   \
        if (level >= 2) name##_avx512 args;                                                               \
        else if (level >= 1) name##_avx2 args;                                                            \
        else name##_body args;                                                                            \
    }
#else
#define SP_REC_MULTIVERSION(name, params, args)                                                            \
    static void name params { name##_body args; }
#endif

/* e^x for the recurrent ops' gates, in plain arithmetic so GCC vectorises the loops that
 * call it (glibc's expf is a call per element: 2 sigmoids and a tanh per GRU unit made
 * the GRU forward 2/3 expf). x = n·ln 2 + r with n = round(x·log₂e) (the 1.5·2²³ trick)
 * and |r| ≤ ln 2 / 2 (ln 2 in two parts), e^r by its Taylor series to r⁶ (truncation
 * ≤ 1.2e-7 relative), 2ⁿ built in the exponent bits. Relative error ≤ 3e-7 (≈ 3 ulp,
 * tests/test_rnn.c, suite pointwise); x is clamped to [−87.3, 88.3], where e^x stays a
 * normal float, and a NaN stays NaN. */
__attribute__((always_inline)) static inline float sp_rec_expf(float x)
{
    x = x < -87.3f ? -87.3f : x;
    x = x > 88.3f ? 88.3f : x;
    float n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693145751953125f;   /* ln 2's high part: exact in n·hi */
    r = r - n * 1.42860677e-06f;             /* and its low part */
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
    int e = (int)(n == n ? n : 0.0f) + 127;   /* NaN: p is NaN already */
    union { unsigned u; float f; } scale = {.u = (unsigned)e << 23};
    return p * scale.f;
}

/* tanh through one exp: glibc's tanhf costs ~4× an expf. Absolute error ≤ 2e-7; below
 * |x| < 2⁻⁵ a Taylor series keeps the relative error ≤ 3e-6 where (1 − e)/(1 + e)
 * would cancel. Both sides are computed and one selected, so loops vectorise. */
__attribute__((always_inline)) static inline float sp_rec_tanh(float x)
{
    float a = fabsf(x), x2 = x * x;
    float small = x * (1.0f - x2 * (1.0f / 3.0f - x2 * (2.0f / 15.0f)));
    float e = sp_rec_expf(-2.0f * a);
    float big = copysignf((1.0f - e) / (1.0f + e), x);
    return a < 0.03125f ? small : big;
}

__attribute__((always_inline)) static inline float sp_rec_sigmoid(float x) { return 1.0f / (1.0f + sp_rec_expf(-x)); }

#endif
