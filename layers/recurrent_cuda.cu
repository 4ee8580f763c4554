/* recurrent_cuda.cu — the CUDA twins of layers/rnn.c and layers/gru.c: one-layer Elman
 * RNN (tanh) and GRU, batch-first x [B, T, C], h_0 = 0, PyTorch equations and gate order
 * (r, z, n) as on the CPU (see those files for the derivations).
 *
 * Device layout is batch-first throughout ([B, T, ·], row b·T + t), so the input
 * projection of all steps, dx and dW_ih are ONE cuBLAS GEMM each; a step's rows are
 * the strided rows t, T + t, … (leading dimension T·width), which cuBLAS takes as is.
 *   forward: pre = x·W_ihᵀ + b (one GEMM); per step one GEMM h_{t-1}·W_hhᵀ and one
 *            fused pointwise kernel (RNN: tanh; GRU: the gates r, z, n, M and h_t)
 *   BPTT:    per step one fused kernel (da from g and the saved state) and one GEMM
 *            g_{t-1} += da_t·W_hh; run once per backward pass, by δ or G, whichever
 *            comes first (the dy it was computed from is remembered)
 *   δ:       dx = da·W_ih (GRU: [dR, dZ, dN]), G: dW_ih += daᵀx, dW_hh += Σ_b one GEMM per
 *            sample over its steps, biases by a column-sum kernel.
 * The tanh is the CPU's sp_rec_tanh formula (one expf). Sums are cuBLAS's order: the
 * results match the CPU op to 1e-4 of the largest entry (tests/test_ops_cuda.c). */
#include <math.h>
#include "core/kernels/cuda.h"
extern "C" {
#include "core/device.h"
#include "core/error.h"
#include "core/tape.h"
#include "layers/recurrent.h"
}

enum { W_IH, W_HH, B_IH, B_HH };
#define PV(n, i) ((n)->layer->params[i]->value.data)
#define PG(n, i) ((n)->layer->params[i]->grad.data)

typedef struct rec_saved {
    int B, T;
    float *hs;      /* [B, T, H]                                   */
    float *gi;      /* GRU: x·W_ihᵀ + b_ih, [B, T, 3H]             */
    float *gates;   /* GRU: r, z, n, M per step, [B, T, 4H]        */
    float *gh;      /* GRU: h_{t-1}·W_hhᵀ + b_hh of one step, [B, 3H] */
    float *da;      /* [B, T, W], W = H (RNN) or 4H (GRU)          */
    float *g;       /* the running ∇h_t, [B, H]                    */
    const float *bptt_dy;
} rec_saved;

// ----------------------------------------------------------------------------
// CUDA kernels

__device__ float rec_tanh(float x)
{
    float a = fabsf(x);
    if (a < 0.03125f) {
        float x2 = x * x;
        return x * (1.0f - x2 * (1.0f / 3.0f - x2 * (2.0f / 15.0f)));
    }
    float e = expf(-2.0f * a);
    return copysignf((1.0f - e) / (1.0f + e), x);
}

__device__ float rec_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* y[i, j] = a[j] (+ b[j]) for rows i < rows, width w. */
/* dst row r (w floats, pitch dp) ← src row r (pitch sp), r < rows: the outputs taken
 * from hs without a device copy. */
__global__ void rec_rows_kernel(float *dst, size_t dp, const float *src, size_t sp, size_t w, size_t rows)
{
    size_t n = w * rows;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i / w * dp + i % w] = src[i / w * sp + i % w];
}

__global__ void rec_bias_rows_kernel(float *y, const float *a, const float *b, size_t rows, int w)
{
    size_t n = rows * w;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int j = (int)(i % w);
        y[i] = b ? a[j] + b[j] : a[j];
    }
}

/* RNN step t: h = tanh(h) in place on rows (b, t). */
__global__ void rnn_step_kernel(float *hs, int B, int T, int H, int t)
{
    size_t n = (size_t)B * H;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t b = i / H, j = i % H;
        float *h = hs + (b * T + t) * H + j;
        *h = rec_tanh(*h);
    }
}

/* GRU step t: gates and h_t from gi (row (b, t)), gh (row b) and h_{t-1} (NULL at t = 0). */
__global__ void gru_step_kernel(float *hs, float *gates, const float *gi, const float *gh, const float *hprev, int B,
                                int T, int H, int t)
{
    size_t n = (size_t)B * H;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t b = i / H, j = i % H, row = b * T + t;
        const float *gir = gi + row * 3 * H, *ghr = gh + b * 3 * H;
        float r = rec_sigmoid(gir[j] + ghr[j]);
        float z = rec_sigmoid(gir[H + j] + ghr[H + j]);
        float M = ghr[2 * H + j];
        float nn = rec_tanh(gir[2 * H + j] + r * M);
        float hj = hprev ? hprev[b * T * H + j] : 0.0f;
        hs[row * H + j] = (1.0f - z) * nn + z * hj;
        float *gr = gates + row * 4 * H;
        gr[j] = r;
        gr[H + j] = z;
        gr[2 * H + j] = nn;
        gr[3 * H + j] = M;
    }
}

/* g (+)= dy at step t: dy [B, T, H] (every step) or [B, H] (last step only). */
__global__ void rec_seed_kernel(float *g, const float *dy, int B, int T, int H, int t, int all, int last, int add)
{
    size_t n = (size_t)B * H;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t b = i / H, j = i % H;
        float v = all ? dy[(b * T + t) * H + j] : last ? dy[b * H + j] : 0.0f;
        g[i] = add ? g[i] + v : v;
    }
}

/* RNN: da_t = g ⊙ (1 − h_t²). */
__global__ void rnn_da_kernel(float *da, const float *g, const float *hs, int B, int T, int H, int t)
{
    size_t n = (size_t)B * H;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t b = i / H, j = i % H, k = (b * T + t) * H + j;
        da[k] = g[i] * (1.0f - hs[k] * hs[k]);
    }
}

/* GRU: da_t = [dR, dZ, dM, dN] from g and the saved gates; then g = g ⊙ z. */
__global__ void gru_da_kernel(float *da, float *g, const float *gates, const float *hs, int B, int T, int H, int t)
{
    size_t n = (size_t)B * H;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t b = i / H, j = i % H, row = b * T + t;
        const float *gr = gates + row * 4 * H;
        float r = gr[j], z = gr[H + j], nn = gr[2 * H + j], M = gr[3 * H + j];
        float hj = t > 0 ? hs[(row - 1) * H + j] : 0.0f;
        float gv = g[i];
        float dN = gv * (1.0f - z) * (1.0f - nn * nn);
        float *d = da + row * 4 * H;
        d[j] = dN * M * r * (1.0f - r);
        d[H + j] = gv * (hj - nn) * z * (1.0f - z);
        d[2 * H + j] = dN * r;
        d[3 * H + j] = dN;
        g[i] = gv * z;
    }
}

/* Bias gradients, one thread per output entry, rows in order:
 * db_ih[j] += Σ_i da[i, col_ih(j)], db_hh[j] += Σ_i da[i, col_hh(j)], width w of da.
 * gru = 0: both read column j (RNN). gru = 1: j < 2H both read j; j in [2H, 3H): db_hh
 * reads dM (column j), db_ih reads dN (column j + H). */
__global__ void rec_bias_grad_kernel(float *dbih, float *dbhh, const float *da, size_t rows, int w, int G, int H,
                                     int gru)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= G) return;
    int cih = gru && j >= 2 * H ? j + H : j;
    float aih = 0.0f, ahh = 0.0f;
    for (size_t i = 0; i < rows; i++) {
        aih += da[i * w + cih];
        ahh += da[i * w + j];
    }
    dbih[j] += aih;
    dbhh[j] += ahh;
}

/* Jᵀ_t = (∂h_t/∂h_{t-1})ᵀ of every sample for t = T .. t_lo (the bppsa chain), rows
 * index h_{t-1}; sample b's at jt + ((T − t)·B + b)·H². RNN: W_hhᵀ diag(1 − h_t²).
 * GRU (Eq. 11): W_hrᵀ diag(a) + W_hzᵀ diag(c) + W_hnᵀ diag(e) + diag(z). The CPU's
 * chain_jt arithmetic, entry for entry. One thread per entry. */
__global__ void rec_chain_jt_kernel(float *jt, const float *hs, const float *gates, const float *Whh, int B, int T,
                                    int H, int t_lo, int gru)
{
    size_t HH = (size_t)H * H, n = (size_t)(T - t_lo + 1) * B * HH;
    for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < n; q += (size_t)gridDim.x * blockDim.x) {
        size_t e = q % HH, lb = q / HH, b = lb % B;
        int t = T - (int)(lb / B), i = (int)(e / H), j = (int)(e % H);
        size_t row = b * T + (t - 1);
        if (!gru) {
            float h = hs[row * H + j];
            jt[q] = Whh[(size_t)j * H + i] * (1.0f - h * h);
            continue;
        }
        const float *gr = gates + row * 4 * H;
        const float *Wr = Whh, *Wz = Wr + HH, *Wn = Wz + HH;
        float r = gr[j], z = gr[H + j], nn = gr[2 * H + j], M = gr[3 * H + j];
        float hj = t > 1 ? hs[(row - 1) * H + j] : 0.0f;
        float dn = (1.0f - z) * (1.0f - nn * nn);
        float a = dn * M * r * (1.0f - r), c = (hj - nn) * z * (1.0f - z), ee = dn * r;
        jt[q] = Wr[(size_t)j * H + i] * a + Wz[(size_t)j * H + i] * c + Wn[(size_t)j * H + i] * ee + (i == j ? z : 0.0f);
    }
}

/* The factors of Jᵀ_t (the same t and sample layout, (gates + zdiag)·H floats each):
 * RNN v = 1 − h_t²; GRU [a, c, e, z] of Eq. 11, as rec_chain_jt_kernel computes them. */
__global__ void rec_chain_factors_kernel(float *v, const float *hs, const float *gates, int B, int T, int H, int t_lo,
                                         int gru)
{
    size_t n = (size_t)(T - t_lo + 1) * B * H;
    for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < n; q += (size_t)gridDim.x * blockDim.x) {
        size_t lb = q / H, b = lb % B;
        int t = T - (int)(lb / B), j = (int)(q % H);
        size_t row = b * T + (t - 1);
        if (!gru) {
            float h = hs[row * H + j];
            v[q] = 1.0f - h * h;
            continue;
        }
        const float *gr = gates + row * 4 * H;
        float r = gr[j], z = gr[H + j], nn = gr[2 * H + j], M = gr[3 * H + j];
        float hj = t > 1 ? hs[(row - 1) * H + j] : 0.0f;
        float dn = (1.0f - z) * (1.0f - nn * nn);
        float *o = v + lb * 4 * H;
        o[j] = dn * M * r * (1.0f - r);
        o[H + j] = (hj - nn) * z * (1.0f - z);
        o[2 * H + j] = dn * r;
        o[3 * H + j] = z;
    }
}

/* da of every step from its total ∇h_t (dh [B, T, H], recovered by the scan): the
 * pointwise parts of rnn_da_kernel / gru_da_kernel with g = dh_t, no recurrence. */
__global__ void rec_chain_da_kernel(float *da, const float *dh, const float *hs, const float *gates, int B, int T,
                                    int H, int gru)
{
    size_t n = (size_t)B * T * H;
    for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < n; q += (size_t)gridDim.x * blockDim.x) {
        size_t row = q / H, j = q % H;
        float gv = dh[q];
        if (!gru) {
            da[q] = gv * (1.0f - hs[q] * hs[q]);
            continue;
        }
        int t = (int)(row % T);
        const float *gr = gates + row * 4 * H;
        float r = gr[j], z = gr[H + j], nn = gr[2 * H + j], M = gr[3 * H + j];
        float hj = t > 0 ? hs[(row - 1) * H + j] : 0.0f;
        float dN = gv * (1.0f - z) * (1.0f - nn * nn);
        float *d = da + row * 4 * H;
        d[j] = dN * M * r * (1.0f - r);
        d[H + j] = gv * (hj - nn) * z * (1.0f - z);
        d[2 * H + j] = dN * r;
        d[3 * H + j] = dN;
    }
}

// ----------------------------------------------------------------------------
// kernel launchers

#define GRID(n) sp_cuda_blocks((size_t)(n), 256), 256, 0, st

static void bias_rows(float *y, const float *a, const float *b, size_t rows, int w, cudaStream_t st)
{
    rec_bias_rows_kernel<<<GRID(rows * w)>>>(y, a, b, rows, w);
    sp_cuda_check(cudaGetLastError());
}

static void seed(float *g, const float *dy, int B, int T, int H, int t, sp_seq_output mode, bool add, cudaStream_t st)
{
    rec_seed_kernel<<<GRID((size_t)B * H)>>>(g, dy, B, T, H, t, mode == SP_SEQ_ALL, t == T - 1, add);
    sp_cuda_check(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// the ops

static bool is_gru(const sp_node *n) { return SP_REC(n)->gates == 3; }

static void rec_cuda_forward(sp_node *n)
{
    sp_cuda_require_params(n->layer);
    const sp_tensor *x = sp_node_x(n);
    int B = x->shape[0], T = x->shape[1], C = SP_REC(n)->input, H = SP_REC(n)->hidden;
    size_t BT = (size_t)B * T;
    bool gru = is_gru(n);
    cudaStream_t st = sp_cuda_stream();
    rec_saved *s = (rec_saved *)sp_tape_alloc(n->tape, sizeof *s);
    *s = rec_saved{B, T, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    s->hs = (float *)sp_tape_alloc_on(n->tape, SP_CUDA, BT * H * sizeof(float));
    s->da = (float *)sp_tape_alloc_on(n->tape, SP_CUDA, BT * (gru ? 4 * H : H) * sizeof(float));
    s->g = (float *)sp_tape_alloc_on(n->tape, SP_CUDA, (size_t)B * H * sizeof(float));
    n->saved = s;
    if (!gru) {
        bias_rows(s->hs, PV(n, B_IH), PV(n, B_HH), BT, H, st);
        sp_cuda_gemm(st, false, true, (int)BT, H, C, 1.0f, x->data, C, PV(n, W_IH), C, 1.0f, s->hs, H);
        for (int t = 0; t < T; t++) {
            if (t > 0)
                sp_cuda_gemm(st, false, true, B, H, H, 1.0f, s->hs + (size_t)(t - 1) * H, T * H, PV(n, W_HH), H, 1.0f,
                             s->hs + (size_t)t * H, T * H);
            rnn_step_kernel<<<GRID((size_t)B * H)>>>(s->hs, B, T, H, t);
            sp_cuda_check(cudaGetLastError());
        }
    } else {
        int H3 = 3 * H;
        s->gi = (float *)sp_tape_alloc_on(n->tape, SP_CUDA, BT * H3 * sizeof(float));
        s->gates = (float *)sp_tape_alloc_on(n->tape, SP_CUDA, BT * 4 * H * sizeof(float));
        s->gh = (float *)sp_tape_alloc_on(n->tape, SP_CUDA, (size_t)B * H3 * sizeof(float));
        bias_rows(s->gi, PV(n, B_IH), NULL, BT, H3, st);
        sp_cuda_gemm(st, false, true, (int)BT, H3, C, 1.0f, x->data, C, PV(n, W_IH), C, 1.0f, s->gi, H3);
        for (int t = 0; t < T; t++) {
            bias_rows(s->gh, PV(n, B_HH), NULL, (size_t)B, H3, st);
            const float *hprev = t > 0 ? s->hs + (size_t)(t - 1) * H : NULL;
            if (t > 0) sp_cuda_gemm(st, false, true, B, H3, H, 1.0f, hprev, T * H, PV(n, W_HH), H, 1.0f, s->gh, H3);
            gru_step_kernel<<<GRID((size_t)B * H)>>>(s->hs, s->gates, s->gi, s->gh, hprev, B, T, H, t);
            sp_cuda_check(cudaGetLastError());
        }
    }
    if (SP_REC(n)->mode == SP_SEQ_ALL)
        rec_rows_kernel<<<GRID(BT * H)>>>(n->out.data, (size_t)H, s->hs, (size_t)H, (size_t)H, BT);
    else   /* h_T of every sample: rows (b, T − 1) */
        rec_rows_kernel<<<GRID((size_t)B * H)>>>(n->out.data, (size_t)H, s->hs + (size_t)(T - 1) * H, (size_t)T * H,
                                                  (size_t)H, (size_t)B);
    sp_cuda_check(cudaGetLastError());
}

/* da for this dy, computed once per backward pass. */
static const float *rec_bptt(sp_node *n, const sp_tensor *dy)
{
    rec_saved *s = (rec_saved *)n->saved;
    if (s->bptt_dy == dy->data) return s->da;
    int B = s->B, T = s->T, H = SP_REC(n)->hidden;
    bool gru = is_gru(n);
    sp_seq_output mode = SP_REC(n)->mode;
    cudaStream_t st = sp_cuda_stream();
    seed(s->g, dy->data, B, T, H, T - 1, mode, false, st);
    for (int t = T - 1; t >= 0; t--) {
        if (!gru) rnn_da_kernel<<<GRID((size_t)B * H)>>>(s->da, s->g, s->hs, B, T, H, t);
        else gru_da_kernel<<<GRID((size_t)B * H)>>>(s->da, s->g, s->gates, s->hs, B, T, H, t);
        sp_cuda_check(cudaGetLastError());
        if (t == 0) break;
        seed(s->g, dy->data, B, T, H, t - 1, mode, gru, st);   /* RNN: g is replaced; GRU: z ⊙ g stays */
        int w = gru ? 4 * H : H;
        sp_cuda_gemm(st, false, false, B, H, gru ? 3 * H : H, 1.0f, s->da + (size_t)t * w, T * w, PV(n, W_HH), H, 1.0f,
                     s->g, H);
    }
    s->bptt_dy = dy->data;
    return s->da;
}

static void rec_cuda_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    const float *da = rec_bptt(n, dy);
    const rec_saved *s = (const rec_saved *)n->saved;
    int C = SP_REC(n)->input, H = SP_REC(n)->hidden, BT = s->B * s->T;
    cudaStream_t st = sp_cuda_stream();
    if (!is_gru(n)) {
        sp_cuda_gemm(st, false, false, BT, C, H, 1.0f, da, H, PV(n, W_IH), C, 0.0f, dx->data, C);
        return;
    }
    int H4 = 4 * H;   /* dx = [dR, dZ]·W_ih[0:2H] + dN·W_ih[2H:3H] */
    sp_cuda_gemm(st, false, false, BT, C, 2 * H, 1.0f, da, H4, PV(n, W_IH), C, 0.0f, dx->data, C);
    sp_cuda_gemm(st, false, false, BT, C, H, 1.0f, da + 3 * H, H4, PV(n, W_IH) + (size_t)2 * H * C, C, 1.0f, dx->data,
                 C);
}

/* G from da: dW_ih, dW_hh, the biases (BPTT's and the chain's). */
static void rec_params_from_da(sp_node *n, const float *da)
{
    const rec_saved *s = (const rec_saved *)n->saved;
    int C = SP_REC(n)->input, H = SP_REC(n)->hidden, B = s->B, T = s->T, BT = B * T;
    const float *x = sp_node_x(n)->data;
    bool gru = is_gru(n);
    int w = gru ? 4 * H : H, G = gru ? 3 * H : H;
    cudaStream_t st = sp_cuda_stream();
    if (!gru) {
        sp_cuda_gemm(st, true, false, H, C, BT, 1.0f, da, H, x, C, 1.0f, PG(n, W_IH), C);
    } else {
        sp_cuda_gemm(st, true, false, 2 * H, C, BT, 1.0f, da, w, x, C, 1.0f, PG(n, W_IH), C);
        sp_cuda_gemm(st, true, false, H, C, BT, 1.0f, da + 3 * H, w, x, C, 1.0f, PG(n, W_IH) + (size_t)2 * H * C, C);
    }
    if (T > 1)   /* dW_hh += Σ_{t ≥ 1} da_tᵀ h_{t-1}, one GEMM per sample over its steps */
        for (int b = 0; b < B; b++)
            sp_cuda_gemm(st, true, false, G, H, T - 1, 1.0f, da + ((size_t)b * T + 1) * w, w, s->hs + (size_t)b * T * H,
                         H, 1.0f, PG(n, W_HH), H);
    rec_bias_grad_kernel<<<sp_cuda_blocks((size_t)G, 128), 128, 0, st>>>(PG(n, B_IH), PG(n, B_HH), da, (size_t)BT, w,
                                                                           G, H, gru);
    sp_cuda_check(cudaGetLastError());
}

static void rec_cuda_backward_params(sp_node *n, const sp_tensor *dy) { rec_params_from_da(n, rec_bptt(n, dy)); }

// ----------------------------------------------------------------------------
// the chain (the bppsa engine on the device)

static void chain_jt_launch(const sp_node *n, int t_lo, float *jt)
{
    const rec_saved *s = (const rec_saved *)n->saved;
    int H = SP_REC(n)->hidden;
    size_t count = (size_t)(s->T - t_lo + 1) * s->B * H * H;
    cudaStream_t st = sp_cuda_stream();
    if (count == 0) return;
    rec_chain_jt_kernel<<<GRID(count)>>>(jt, s->hs, s->gates, PV(n, W_HH), s->B, s->T, H, t_lo, is_gru(n));
    sp_cuda_check(cudaGetLastError());
}

static void rec_cuda_chain_jt_all(const sp_node *n, int t_lo, float *jt) { chain_jt_launch(n, t_lo, jt); }

/* One sample, one step (the CPU interface; tests): Jᵀ_t of sample b copied out of a
 * scratch batch of all samples at t. */
static void rec_cuda_chain_jt(const sp_node *n, int b, int t, float *jt)
{
    const rec_saved *s = (const rec_saved *)n->saved;
    int H = SP_REC(n)->hidden;
    size_t HH = (size_t)H * H;
    float *all = (float *)sp_tape_alloc_on(n->tape, SP_CUDA, (size_t)(s->T - t + 1) * s->B * HH * sizeof(float));
    chain_jt_launch(n, t, all);
    sp_cuda_check(cudaMemcpyAsync(jt, all + ((size_t)(s->T - t) * s->B + b) * HH, HH * sizeof(float),
                                  cudaMemcpyDeviceToDevice, sp_cuda_stream()));
}

static int rec_cuda_chain_jt_factors(const sp_node *n, int t_lo, float *v, bool *zdiag, const float **W)
{
    bool gru = is_gru(n);
    *zdiag = gru;
    *W = PV(n, W_HH);
    if (v) {
        const rec_saved *s = (const rec_saved *)n->saved;
        int H = SP_REC(n)->hidden;
        size_t count = (size_t)(s->T - t_lo + 1) * s->B * H;
        cudaStream_t st = sp_cuda_stream();
        if (count) {
            rec_chain_factors_kernel<<<GRID(count)>>>(v, s->hs, s->gates, s->B, s->T, H, t_lo, gru);
            sp_cuda_check(cudaGetLastError());
        }
    }
    return gru ? 3 : 1;
}

static void rec_cuda_chain_backward_params(sp_node *n, const sp_tensor *dh)
{
    rec_saved *s = (rec_saved *)n->saved;
    int H = SP_REC(n)->hidden;
    cudaStream_t st = sp_cuda_stream();
    rec_chain_da_kernel<<<GRID((size_t)s->B * s->T * H)>>>(s->da, dh->data, s->hs, s->gates, s->B, s->T, H, is_gru(n));
    sp_cuda_check(cudaGetLastError());
    s->bptt_dy = NULL;   /* da is the chain's now: a later δ or G runs its BPTT afresh */
    rec_params_from_da(n, s->da);
}

/* One table for both cells: every kernel asks is_gru(n). */
static sp_kernels rec_cuda_kernels;

extern "C" void sp_recurrent_cuda_register(void)
{
    rec_cuda_kernels.forward = rec_cuda_forward;
    rec_cuda_kernels.backward_input = rec_cuda_backward_input;
    rec_cuda_kernels.backward_params = rec_cuda_backward_params;
    rec_cuda_kernels.chain_jt = rec_cuda_chain_jt;
    rec_cuda_kernels.chain_jt_all = rec_cuda_chain_jt_all;
    rec_cuda_kernels.chain_jt_factors = rec_cuda_chain_jt_factors;
    rec_cuda_kernels.chain_backward_params = rec_cuda_chain_backward_params;
    sp_op_register_kernels(&sp_op_rnn, SP_CUDA, &rec_cuda_kernels);
    sp_op_register_kernels(&sp_op_gru, SP_CUDA, &rec_cuda_kernels);
}
