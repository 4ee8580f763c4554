/* recurrent_cuda.cu — the CUDA twins of layers/rnn.c and layers/gru.c: one-layer Elman
 * RNN (tanh) and GRU, batch-first x [B, T, C], h_0 = 0, PyTorch equations and gate order
 * (r, z, n) as on the CPU (see those files for the derivations).
 *
 * The forward and the linear backward are cuDNN's RNN, the baseline the BPPSA paper
 * measures against (§5.1):
 *   forward: cudnnRNNForward in training mode, x and y batch-first (every h_t: the
 *            [B, T, H] output itself for SP_SEQ_ALL, the saved hs otherwise; h_T then
 *            comes out as hy, straight into the output). The parameters are packed into
 *            cuDNN's weight space by one kernel per forward (they change every step).
 *   δ:       cudnnRNNBackwardData_v8 (dy of every step; SP_SEQ_LAST: dy zero and dhy the
 *            output's gradient), dx straight into the caller's tensor.
 *   G:       cudnnRNNBackwardWeights_v8 into a dweight space (set, not added), then one
 *            kernel adds its blocks to the parameters' grads. BackwardData must come
 *            first (its results in the reserve space are what BackwardWeights reads):
 *            whichever of δ and G comes first runs it, once per backward pass; when G
 *            does (an ooo order), dx waits in the saved state for δ.
 * A plan per shape (cell, C, H, B, T) holds the descriptors, the sizes, the device array
 * of sequence lengths and the weight blocks' offsets in the weight space, made on first
 * use and kept until the process ends; the spaces themselves come from the tape's device
 * arena, so a steady-state step allocates nothing.
 *
 * The bppsa engine's chain (Jᵀ factors, the δ-free parameter gradients from the scan's
 * ∇h_t) reads h_t and, for the GRU, the gates r, z, n, M of every step: they are
 * recomputed from hs on first use after a forward — two GEMMs over all steps at once and
 * one pointwise kernel, no recurrence.
 * The tanh of the chain's kernels is the CPU's sp_rec_tanh formula (one expf). Sums are
 * cuDNN's and cuBLAS's order: the results match the CPU op to 1e-4 of the largest entry
 * (tests/test_ops_cuda.c). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
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

typedef struct rec_plan rec_plan;

typedef struct rec_saved {
    int B, T;
    const rec_plan *plan;
    float *w;       /* cuDNN's weight space, packed at the forward    */
    float *reserve; /* cuDNN's reserve space (forward → backward)     */
    float *hs;      /* [B, T, H]: every h_t (cuDNN's y)                */
    float *gates;   /* GRU, for the chain: r, z, n, M per step [B, T, 4H], NULL until needed */
    float *da;      /* the chain's [B, T, W], W = H (RNN) or 4H (GRU)  */
    float *dx_wait; /* dx when G ran BackwardData before δ asked        */
    const float *data_dy; /* the dy BackwardData last ran from            */
    int data_lane;        /* and the lane it ran on                        */
    unsigned served;      /* SP_REC_INPUT | SP_REC_PARAMS since that run   */
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

/* dst row r (w floats, pitch dp) ← src row r (pitch sp), r < rows: the outputs taken
 * from hs, and a dx that waited for δ, without a device copy. */
__global__ void rec_rows_kernel(float *dst, size_t dp, const float *src, size_t sp, size_t w, size_t rows)
{
    size_t n = w * rows;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i / w * dp + i % w] = src[i / w * sp + i % w];
}

/* Blocks moved between the parameters and cuDNN's weight space: 2G matrices and 2G
 * biases (G = 1 or 3). */
#define REC_SEGS 12
typedef struct rec_segs {
    int n;
    float *dst[REC_SEGS];
    const float *src[REC_SEGS];
    size_t len[REC_SEGS];
} rec_segs;

/* dst_k = src_k (add = 0: packing the weights) or dst_k += src_k (add = 1: the weight
 * gradients into the parameters' grads), every block k in one launch. */
__global__ void rec_segs_kernel(rec_segs s, size_t total, int add)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t q = i;
        int k = 0;
        while (q >= s.len[k]) q -= s.len[k++];
        s.dst[k][q] = add ? s.dst[k][q] + s.src[k][q] : s.src[k][q];
    }
}

/* GRU gates of every step from gi = x·W_ihᵀ and gh = hs·W_hhᵀ (both [B, T, 3H], no
 * biases; step t reads gh's row t − 1, zero at t = 0): r, z, n, M as the CPU op saves them. */
__global__ void gru_gates_kernel(float *gates, const float *gi, const float *gh, const float *bih, const float *bhh,
                                 int B, int T, int H)
{
    size_t n = (size_t)B * T * H;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t row = i / H;
        int j = (int)(i % H), t = (int)(row % T);
        const float *a = gi + row * 3 * H, *h = t > 0 ? gh + (row - 1) * 3 * H : NULL;
        float r = rec_sigmoid(a[j] + bih[j] + ((h ? h[j] : 0.0f) + bhh[j]));
        float z = rec_sigmoid(a[H + j] + bih[H + j] + ((h ? h[H + j] : 0.0f) + bhh[H + j]));
        float M = (h ? h[2 * H + j] : 0.0f) + bhh[2 * H + j];
        float nn = rec_tanh(a[2 * H + j] + bih[2 * H + j] + r * M);
        float *g = gates + row * 4 * H;
        g[j] = r;
        g[H + j] = z;
        g[2 * H + j] = nn;
        g[3 * H + j] = M;
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
 * pointwise part of BPTT with g = dh_t, no recurrence (RNN: da = g ⊙ (1 − h_t²); GRU:
 * [dR, dZ, dM, dN] as the CPU op's bptt). */
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
// cuDNN's RNN: plans

#define GRID(n) sp_cuda_blocks((size_t)(n), 256), 256, 0, st
#define REC_MAX_PLANS 64

struct rec_plan {
    bool gru;
    int C, H, B, T;
    cudnnRNNDescriptor_t rnn;
    cudnnDropoutDescriptor_t drop;
    cudnnRNNDataDescriptor_t xd, yd;
    cudnnTensorDescriptor_t hd;
    int32_t *seq;                 /* [B] = T, on the device (cuDNN reads it asynchronously) */
    size_t w_bytes, work_bytes, reserve_bytes;
    size_t m_off[6], b_off[6];    /* linLayer k's matrix and bias, floats into the weight space */
    cudaEvent_t data_done[SP_CUDA_LANES];   /* recorded after each BackwardData, per lane */
};

static rec_plan plans[REC_MAX_PLANS];
static int nplans;
static pthread_mutex_t plans_lock = PTHREAD_MUTEX_INITIALIZER;

static void plan_init(rec_plan *p)
{
    const sp_cuda_lane *lane = sp_cuda_current();
    int G = p->gru ? 3 : 1;
    sp_cudnn_check(cudnnCreateDropoutDescriptor(&p->drop));
    sp_cudnn_check(cudnnSetDropoutDescriptor(p->drop, lane->cudnn, 0.0f, NULL, 0, 0));
    sp_cudnn_check(cudnnCreateRNNDescriptor(&p->rnn));
    /* FMA math: float32 throughout, no TF32 (the bench compares FP32 with FP32) */
    sp_cudnn_check(cudnnSetRNNDescriptor_v8(p->rnn, CUDNN_RNN_ALGO_STANDARD, p->gru ? CUDNN_GRU : CUDNN_RNN_TANH,
                                            CUDNN_RNN_DOUBLE_BIAS, CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT,
                                            CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH, p->C, p->H, p->H, 1,
                                            p->drop, 0));
    int *lens = (int *)sp_xmalloc((size_t)p->B * sizeof(int));
    for (int b = 0; b < p->B; b++) lens[b] = p->T;
    sp_cudnn_check(cudnnCreateRNNDataDescriptor(&p->xd));
    sp_cudnn_check(cudnnSetRNNDataDescriptor(p->xd, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED, p->T,
                                             p->B, p->C, lens, NULL));
    sp_cudnn_check(cudnnCreateRNNDataDescriptor(&p->yd));
    sp_cudnn_check(cudnnSetRNNDataDescriptor(p->yd, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED, p->T,
                                             p->B, p->H, lens, NULL));
    sp_cuda_check(cudaMalloc((void **)&p->seq, (size_t)p->B * sizeof(int32_t)));
    sp_cuda_check(cudaMemcpy(p->seq, lens, (size_t)p->B * sizeof(int32_t), cudaMemcpyHostToDevice));
    free(lens);
    int dims[3] = {1, p->B, p->H}, strides[3] = {p->B * p->H, p->H, 1};
    sp_cudnn_check(cudnnCreateTensorDescriptor(&p->hd));
    sp_cudnn_check(cudnnSetTensorNdDescriptor(p->hd, CUDNN_DATA_FLOAT, 3, dims, strides));
    sp_cudnn_check(cudnnGetRNNWeightSpaceSize(lane->cudnn, p->rnn, &p->w_bytes));
    sp_cudnn_check(cudnnGetRNNTempSpaceSizes(lane->cudnn, p->rnn, CUDNN_FWD_MODE_TRAINING, p->xd, &p->work_bytes,
                                             &p->reserve_bytes));
    /* The blocks' places: asked once, of a weight space that exists for the question. */
    float *w;
    sp_cuda_check(cudaMalloc((void **)&w, p->w_bytes));
    cudnnTensorDescriptor_t md, bd;
    sp_cudnn_check(cudnnCreateTensorDescriptor(&md));
    sp_cudnn_check(cudnnCreateTensorDescriptor(&bd));
    for (int k = 0; k < 2 * G; k++) {
        void *m, *b;
        sp_cudnn_check(cudnnGetRNNWeightParams(lane->cudnn, p->rnn, 0, p->w_bytes, w, k, md, &m, bd, &b));
        p->m_off[k] = (size_t)((float *)m - w);
        p->b_off[k] = (size_t)((float *)b - w);
    }
    for (int l = 0; l < SP_CUDA_LANES; l++)
        sp_cuda_check(cudaEventCreateWithFlags(&p->data_done[l], cudaEventDisableTiming));
    sp_cudnn_check(cudnnDestroyTensorDescriptor(md));
    sp_cudnn_check(cudnnDestroyTensorDescriptor(bd));
    sp_cuda_check(cudaFree(w));
}

/* The plan of node n's shape, made on first use (under the lock: two lanes may ask). */
static const rec_plan *plan_for(const sp_node *n, int B, int T)
{
    rec_plan key = {SP_REC(n)->gates == 3, SP_REC(n)->input, SP_REC(n)->hidden, B, T};
    pthread_mutex_lock(&plans_lock);
    for (int i = 0; i < nplans; i++) {
        const rec_plan *p = &plans[i];
        if (p->gru == key.gru && p->C == key.C && p->H == key.H && p->B == key.B && p->T == key.T) {
            pthread_mutex_unlock(&plans_lock);
            return p;
        }
    }
    if (nplans == REC_MAX_PLANS) {
        pthread_mutex_unlock(&plans_lock);
        sp_fail("%s: more than %d recurrent shapes on the device", n->layer->name, REC_MAX_PLANS);
    }
    rec_plan *p = &plans[nplans];
    *p = key;
    plan_init(p);
    nplans++;
    pthread_mutex_unlock(&plans_lock);
    return p;
}

/* The parameters' blocks against the weight space's: W_ih, W_hh rows g·H … and the
 * biases' entries g·H … of gate g are linLayers g and G + g. */
static rec_segs segs_of(const sp_node *n, const rec_plan *p, float *space, bool grads)
{
    int G = p->gru ? 3 : 1, H = p->H, C = p->C;
    rec_segs s;
    s.n = 4 * G;
    const sp_layer *l = n->layer;
    for (int g = 0; g < G; g++) {
        size_t off[4] = {p->m_off[g], p->m_off[G + g], p->b_off[g], p->b_off[G + g]};
        size_t len[4] = {(size_t)H * C, (size_t)H * H, (size_t)H, (size_t)H};
        for (int k = 0; k < 4; k++) {   /* k: W_IH, W_HH, B_IH, B_HH */
            int i = 4 * g + k;
            float *param = grads ? l->params[k]->grad.data : l->params[k]->value.data;
            param += (size_t)g * len[k];
            s.len[i] = len[k];
            if (grads) s.dst[i] = param, s.src[i] = space + off[k];
            else s.dst[i] = space + off[k], s.src[i] = param;
        }
    }
    return s;
}

static void segs_launch(const rec_segs &s, int add, cudaStream_t st)
{
    size_t total = 0;
    for (int k = 0; k < s.n; k++) total += s.len[k];
    rec_segs_kernel<<<GRID(total)>>>(s, total, add);
    sp_cuda_check(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// the ops

static bool is_gru(const sp_node *n) { return SP_REC(n)->gates == 3; }

static float *dev_alloc(sp_node *n, size_t bytes) { return bytes ? (float *)sp_tape_alloc_on(n->tape, SP_CUDA, bytes) : NULL; }

static void rec_cuda_forward(sp_node *n)
{
    sp_cuda_require_params(n->layer);
    const sp_tensor *x = sp_node_x(n);
    int B = x->shape[0], T = x->shape[1], H = SP_REC(n)->hidden;
    const rec_plan *p = plan_for(n, B, T);
    const sp_cuda_lane *lane = sp_cuda_current();
    cudaStream_t st = lane->stream;
    rec_saved *s = (rec_saved *)sp_tape_alloc(n->tape, sizeof *s);
    memset(s, 0, sizeof *s);
    s->B = B, s->T = T, s->plan = p;
    n->saved = s;
    s->w = dev_alloc(n, p->w_bytes);
    s->reserve = dev_alloc(n, p->reserve_bytes);
    bool all = SP_REC(n)->mode == SP_SEQ_ALL;
    s->hs = all ? n->out.data : dev_alloc(n, (size_t)B * T * H * sizeof(float));
    segs_launch(segs_of(n, p, s->w, false), 0, st);
    sp_cudnn_check(cudnnRNNForward(lane->cudnn, p->rnn, CUDNN_FWD_MODE_TRAINING, p->seq, p->xd, x->data, p->yd, s->hs,
                                   p->hd, NULL, all ? NULL : n->out.data, NULL, NULL, NULL, p->w_bytes, s->w,
                                   p->work_bytes, dev_alloc(n, p->work_bytes), p->reserve_bytes, s->reserve));
}

static int lane_index(const sp_cuda_lane *lane) { return (int)(lane - sp_cuda()->lanes); }

/* cuDNN's BackwardData for this dy, once per backward pass: dx into dx (δ asked) or into
 * the saved state (G asked first). Returns whether it ran now. When it ran on the other
 * lane (the ooo engine runs δ and G on two streams, and orders them only by dy), this
 * lane waits for it: what the second user reads (the reserve space, the waiting dx) is
 * its output. */
static bool backward_data(sp_node *n, const sp_tensor *dy, unsigned user, float *dx)
{
    rec_saved *s = (rec_saved *)n->saved;
    const rec_plan *p = s->plan;
    const sp_cuda_lane *lane = sp_cuda_current();
    if (s->data_dy == dy->data && !(s->served & user)) {
        s->served |= user;
        if (s->data_lane != lane_index(lane))
            sp_cuda_check(cudaStreamWaitEvent(lane->stream, p->data_done[s->data_lane], 0));
        return false;
    }
    size_t bth = (size_t)s->B * s->T * p->H * sizeof(float);
    const float *dys = dy->data, *dhy = NULL;
    if (SP_REC(n)->mode == SP_SEQ_LAST) {   /* only h_T is an output: dy lands on hy */
        float *z = dev_alloc(n, bth);
        sp_cuda_check(cudaMemsetAsync(z, 0, bth, lane->stream));
        dys = z, dhy = dy->data;
    }
    if (!dx) dx = s->dx_wait = dev_alloc(n, (size_t)s->B * s->T * p->C * sizeof(float));
    sp_cudnn_check(cudnnRNNBackwardData_v8(lane->cudnn, p->rnn, p->seq, p->yd, s->hs, dys, p->xd, dx, p->hd, NULL, dhy,
                                           NULL, NULL, NULL, NULL, NULL, p->w_bytes, s->w, p->work_bytes,
                                           dev_alloc(n, p->work_bytes), p->reserve_bytes, s->reserve));
    s->data_dy = dy->data;
    s->data_lane = lane_index(lane);
    s->served = user;
    sp_cuda_check(cudaEventRecord(p->data_done[s->data_lane], lane->stream));
    return true;
}

static void rec_cuda_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    rec_saved *s = (rec_saved *)n->saved;
    if (backward_data(n, dy, SP_REC_INPUT, dx->data)) return;
    cudaStream_t st = sp_cuda_stream();   /* G ran it: dx waited in the saved state */
    size_t rows = (size_t)s->B * s->T, C = (size_t)s->plan->C;
    rec_rows_kernel<<<GRID(rows * C)>>>(dx->data, C, s->dx_wait, C, C, rows);
    sp_cuda_check(cudaGetLastError());
}

static void rec_cuda_backward_params(sp_node *n, const sp_tensor *dy)
{
    rec_saved *s = (rec_saved *)n->saved;
    backward_data(n, dy, SP_REC_PARAMS, NULL);
    const rec_plan *p = s->plan;
    const sp_cuda_lane *lane = sp_cuda_current();
    float *dw = dev_alloc(n, p->w_bytes);
    sp_cudnn_check(cudnnRNNBackwardWeights_v8(lane->cudnn, p->rnn, CUDNN_WGRAD_MODE_SET, p->seq, p->xd,
                                              sp_node_x(n)->data, p->hd, NULL, p->yd, s->hs, p->w_bytes, dw,
                                              p->work_bytes, dev_alloc(n, p->work_bytes), p->reserve_bytes,
                                              s->reserve));
    segs_launch(segs_of(n, p, dw, true), 1, lane->stream);
}

/* The GRU's gates for the chain, computed once per forward. */
static const float *chain_gates(const sp_node *n)
{
    rec_saved *s = (rec_saved *)n->saved;
    if (!is_gru(n) || s->gates) return s->gates;
    sp_node *mn = (sp_node *)n;
    int B = s->B, T = s->T, C = SP_REC(n)->input, H = SP_REC(n)->hidden, H3 = 3 * H, BT = B * T;
    cudaStream_t st = sp_cuda_stream();
    float *gi = dev_alloc(mn, (size_t)BT * H3 * sizeof(float)), *gh = dev_alloc(mn, (size_t)BT * H3 * sizeof(float));
    s->gates = dev_alloc(mn, (size_t)BT * 4 * H * sizeof(float));
    sp_cuda_gemm(st, false, true, BT, H3, C, 1.0f, sp_node_x(n)->data, C, PV(n, W_IH), C, 0.0f, gi, H3);
    sp_cuda_gemm(st, false, true, BT, H3, H, 1.0f, s->hs, H, PV(n, W_HH), H, 0.0f, gh, H3);
    gru_gates_kernel<<<GRID((size_t)BT * H)>>>(s->gates, gi, gh, PV(n, B_IH), PV(n, B_HH), B, T, H);
    sp_cuda_check(cudaGetLastError());
    return s->gates;
}

/* G from the chain's da: dW_ih, dW_hh, the biases. */
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

// ----------------------------------------------------------------------------
// the chain (the bppsa engine on the device)

static void chain_jt_launch(const sp_node *n, int t_lo, float *jt)
{
    const rec_saved *s = (const rec_saved *)n->saved;
    int H = SP_REC(n)->hidden;
    size_t count = (size_t)(s->T - t_lo + 1) * s->B * H * H;
    cudaStream_t st = sp_cuda_stream();
    if (count == 0) return;
    rec_chain_jt_kernel<<<GRID(count)>>>(jt, s->hs, chain_gates(n), PV(n, W_HH), s->B, s->T, H, t_lo, is_gru(n));
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
            rec_chain_factors_kernel<<<GRID(count)>>>(v, s->hs, chain_gates(n), s->B, s->T, H, t_lo, gru);
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
    const float *gates = chain_gates(n);
    if (!s->da) s->da = dev_alloc(n, (size_t)s->B * s->T * (is_gru(n) ? 4 * H : H) * sizeof(float));
    rec_chain_da_kernel<<<GRID((size_t)s->B * s->T * H)>>>(s->da, dh->data, s->hs, gates, s->B, s->T, H, is_gru(n));
    sp_cuda_check(cudaGetLastError());
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
