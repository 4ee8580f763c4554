/* batchnorm2d_cuda.cu — the CUDA twin of layers/batchnorm2d.c (nn.BatchNorm2d).
 * One block of BN_THREADS threads per channel c; the per-channel sums (Σx, Σ(x−μ)²,
 * Σdy, Σdy·x̂) are float64 like the CPU op's, each thread summing a strided share and
 * the block adding the shares in a fixed tree: deterministic, within 1e-6 of the CPU's
 * sequential sums (the same float after rounding but for rare ties).
 *   training forward: μ, σ² of the batch; thread 0 moves running_mean/running_var by
 *     the momentum (σ² unbiased) and block 0 counts num_batches_tracked; every thread
 *     writes x̂ = (x − μ)·inv and y = γ·x̂ + β for its share. x̂ and γ·inv are saved.
 *   eval forward: y = (x − rm)·γ/√(rv + eps) + β.
 *   δ: training dx = k·(dy − mean(dy) − x̂·mean(dy·x̂)), k = γ·inv; eval dx = dy·k.
 *   G: dγ += Σdy·x̂ (eval: x̂ recomputed from the running statistics), dβ += Σdy.
 * The float steps use __f*_rn as the CPU writes them, so nvcc contracts no FMA.
 * Jᵀ (eval mode only, as the CPU op: training couples the samples): diag(k_c). The
 * buffers must be on the device with the parameters (sp_layer_to_device moves both).
 * batchnorm2d_relu (the layer's relu set) runs the same kernels: the forwards clamp y at
 * 0, and δ, G and Jᵀ read dy (and the diagonal) masked by [y > 0] — the mask relu's δ
 * applies before batch norm's in the unfused pair, so the floats are the pair's. */
#include <math.h>
#include "core/kernels/cuda.h"
extern "C" {
#include "core/device.h"
#include "core/error.h"
#include "core/tape.h"
#include "layers/batchnorm2d_internal.h"
#include "layers/layers.h"
}

#define BN_THREADS 256

typedef struct bn_dims {
    int B, C;
    size_t P;   /* H·W */
} bn_dims;

// ----------------------------------------------------------------------------
// CUDA kernels

/* The block's total of v (every thread's share), the same on every thread. */
__device__ double bn_block_sum(double v, double *red)
{
    int t = threadIdx.x;
    red[t] = v;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h >>= 1) {
        if (t < h) red[t] = __dadd_rn(red[t], red[t + h]);
        __syncthreads();
    }
    double s = red[0];
    __syncthreads();   /* all have read red[0] before the next sum writes red */
    return s;
}

/* Offset of element e (0 .. B·P) of channel c. */
__device__ size_t bn_at(bn_dims d, int c, size_t e) { return ((size_t)(e / d.P) * d.C + c) * d.P + e % d.P; }

__global__ void bn_train_forward_kernel(float *y, float *xhat, float *scale, float *rm, float *rv, float *nbt,
                                        const float *x, const float *gamma, const float *beta, bn_dims d, float eps,
                                        float momentum, bool relu)
{
    __shared__ double red[BN_THREADS];
    int c = blockIdx.x;
    size_t N = (size_t)d.B * d.P;
    double s = 0;
    for (size_t e = threadIdx.x; e < N; e += blockDim.x) s = __dadd_rn(s, (double)x[bn_at(d, c, e)]);
    double mu = bn_block_sum(s, red) / (double)N;
    double ss = 0;
    for (size_t e = threadIdx.x; e < N; e += blockDim.x) {
        double v = __dadd_rn((double)x[bn_at(d, c, e)], -mu);
        ss = __dadd_rn(ss, __dmul_rn(v, v));
    }
    double var = bn_block_sum(ss, red) / (double)N;
    float mean = (float)mu, inv = (float)(1.0 / sqrt(var + (double)eps));
    if (threadIdx.x == 0) {
        scale[c] = __fmul_rn(gamma[c], inv);
        rm[c] = __fadd_rn(__fmul_rn(1 - momentum, rm[c]), __fmul_rn(momentum, mean));
        rv[c] = __fadd_rn(__fmul_rn(1 - momentum, rv[c]),
                          __fmul_rn(momentum, (float)(var * (double)N / (double)(N - 1))));
        if (c == 0) nbt[0] = __fadd_rn(nbt[0], 1.0f);
    }
    for (size_t e = threadIdx.x; e < N; e += blockDim.x) {
        size_t o = bn_at(d, c, e);
        float xh = __fmul_rn(__fsub_rn(x[o], mean), inv);
        xhat[o] = xh;
        float v = __fadd_rn(__fmul_rn(gamma[c], xh), beta[c]);
        y[o] = relu && !(v > 0.0f) ? 0.0f : v;
    }
}

__global__ void bn_eval_forward_kernel(float *y, float *scale, const float *x, const float *gamma, const float *beta,
                                       const float *rm, const float *rv, bn_dims d, float eps, bool relu)
{
    int c = blockIdx.x;
    size_t N = (size_t)d.B * d.P;
    float mean = rm[c], k = __fdiv_rn(gamma[c], sqrtf(__fadd_rn(rv[c], eps)));
    if (threadIdx.x == 0) scale[c] = k;
    for (size_t e = threadIdx.x; e < N; e += blockDim.x) {
        size_t o = bn_at(d, c, e);
        float v = __fadd_rn(__fmul_rn(__fsub_rn(x[o], mean), k), beta[c]);
        y[o] = relu && !(v > 0.0f) ? 0.0f : v;
    }
}

/* dy masked by the fused ReLU's [y > 0] (relu_y: the op's output, NULL when unfused). */
__device__ float bn_dy(const float *dy, const float *relu_y, size_t o)
{
    return relu_y && !(relu_y[o] > 0.0f) ? 0.0f : dy[o];
}

/* δ: training (xhat set) or eval (xhat NULL). */
__global__ void bn_delta_kernel(float *dx, const float *dy, const float *xhat, const float *scale, bn_dims d,
                                const float *relu_y)
{
    __shared__ double red[BN_THREADS];
    int c = blockIdx.x;
    size_t N = (size_t)d.B * d.P;
    float k = scale[c];
    if (!xhat) {
        for (size_t e = threadIdx.x; e < N; e += blockDim.x) {
            size_t o = bn_at(d, c, e);
            dx[o] = __fmul_rn(bn_dy(dy, relu_y, o), k);
        }
        return;
    }
    double a = 0, b2 = 0;
    for (size_t e = threadIdx.x; e < N; e += blockDim.x) {
        size_t o = bn_at(d, c, e);
        float g = bn_dy(dy, relu_y, o);
        a = __dadd_rn(a, (double)g);
        b2 = __dadd_rn(b2, __dmul_rn((double)g, (double)xhat[o]));
    }
    double sdy = bn_block_sum(a, red), sdyx = bn_block_sum(b2, red);
    float mdy = (float)(sdy / (double)N), mdyx = (float)(sdyx / (double)N);
    for (size_t e = threadIdx.x; e < N; e += blockDim.x) {
        size_t o = bn_at(d, c, e);
        dx[o] = __fmul_rn(k, __fsub_rn(__fsub_rn(bn_dy(dy, relu_y, o), mdy), __fmul_rn(xhat[o], mdyx)));
    }
}

/* G: training from x̂; eval (xhat NULL) from (x − rm)·(1/√(rv + eps)). */
__global__ void bn_params_kernel(float *dg, float *db, const float *dy, const float *xhat, const float *x,
                                 const float *rm, const float *rv, bn_dims d, float eps, const float *relu_y)
{
    __shared__ double red[BN_THREADS];
    int c = blockIdx.x;
    size_t N = (size_t)d.B * d.P;
    float mean = xhat ? 0.0f : rm[c], inv = xhat ? 0.0f : __fdiv_rn(1.0f, sqrtf(__fadd_rn(rv[c], eps)));
    double a = 0, b2 = 0;
    for (size_t e = threadIdx.x; e < N; e += blockDim.x) {
        size_t o = bn_at(d, c, e);
        float xh = xhat ? xhat[o] : __fmul_rn(__fsub_rn(x[o], mean), inv);
        float g = bn_dy(dy, relu_y, o);
        a = __dadd_rn(a, (double)g);
        b2 = __dadd_rn(b2, __dmul_rn((double)g, (double)xh));
    }
    double sdy = bn_block_sum(a, red), sdyx = bn_block_sum(b2, red);
    if (threadIdx.x == 0) {
        dg[c] = __fadd_rn(dg[c], (float)sdyx);
        db[c] = __fadd_rn(db[c], (float)sdy);
    }
}

/* Jᵀ (eval): sample b0 + i/rows's diagonal, k_c for row r of channel r / P (0 where the
 * fused ReLU's y ≤ 0). */
__global__ void bn_jt_kernel(float *data, size_t stride, const float *scale, size_t rows, size_t P, int nb,
                             const float *relu_y, int b0)
{
    size_t n = (size_t)nb * rows;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i % rows;
        bool off = relu_y && !(relu_y[(b0 + i / rows) * rows + r] > 0.0f);
        data[i / rows * stride + r] = off ? 0.0f : scale[r / P];
    }
}

// ----------------------------------------------------------------------------
// the op

static bn_dims dims_of(const sp_node *n)
{
    const sp_tensor *x = sp_node_x(n);
    return bn_dims{x->shape[0], x->shape[1], (size_t)x->shape[2] * x->shape[3]};
}

/* The fused ReLU's output for the masks, or NULL (plain batch norm). */
static const float *relu_y(const sp_node *n) { return ((const bn_layer *)n->layer)->relu ? n->out.data : NULL; }

static void require_buffers(const sp_layer *l)
{
    for (int i = 0; i < l->nbuffers; i++)
        if (l->buffers[i]->value.device != SP_CUDA)
            sp_fail("batchnorm2d %s: input on cuda, buffer %s on %s (expected sp_model_to_device(m, SP_CUDA))",
                    l->name, l->buffers[i]->name, sp_device_name(l->buffers[i]->value.device));
}

static void bn_cuda_forward(sp_node *n)
{
    sp_cuda_require_params(n->layer);
    require_buffers(n->layer);
    const sp_tensor *x = sp_node_x(n);
    bn_dims d = dims_of(n);
    const bn_layer *L = (const bn_layer *)n->layer;
    float eps = L->eps, momentum = L->momentum;
    bn_saved *S = (bn_saved *)sp_tape_alloc(n->tape, sizeof *S);
    S->training = !n->layer->eval;
    S->relu = L->relu;
    S->gb = NULL;
    S->xhat = S->training ? (float *)sp_tape_alloc_on(n->tape, SP_CUDA, x->numel * sizeof(float)) : NULL;
    S->scale = (float *)sp_tape_alloc_on(n->tape, SP_CUDA, (size_t)d.C * sizeof(float));
    n->saved = S;
    sp_param *const *buf = n->layer->buffers;
    const float *gamma = n->layer->params[0]->value.data, *beta = n->layer->params[1]->value.data;
    cudaStream_t st = sp_cuda_stream();
    if (S->training)
        bn_train_forward_kernel<<<d.C, BN_THREADS, 0, st>>>(n->out.data, S->xhat, S->scale, buf[0]->value.data,
                                                            buf[1]->value.data, buf[2]->value.data, x->data, gamma,
                                                            beta, d, eps, momentum, L->relu);
    else
        bn_eval_forward_kernel<<<d.C, BN_THREADS, 0, st>>>(n->out.data, S->scale, x->data, gamma, beta,
                                                           buf[0]->value.data, buf[1]->value.data, d, eps, L->relu);
    sp_cuda_check(cudaGetLastError());
}

static void bn_cuda_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    const bn_saved *S = (const bn_saved *)n->saved;
    bn_dims d = dims_of(n);
    bn_delta_kernel<<<d.C, BN_THREADS, 0, sp_cuda_stream()>>>(dx->data, dy->data, S->xhat, S->scale, d, relu_y(n));
    sp_cuda_check(cudaGetLastError());
}

static void bn_cuda_backward_params(sp_node *n, const sp_tensor *dy)
{
    const bn_saved *S = (const bn_saved *)n->saved;
    bn_dims d = dims_of(n);
    float eps = ((const bn_layer *)n->layer)->eps;
    sp_layer *l = n->layer;
    bn_params_kernel<<<d.C, BN_THREADS, 0, sp_cuda_stream()>>>(l->params[0]->grad.data, l->params[1]->grad.data,
                                                               dy->data, S->xhat, sp_node_x(n)->data,
                                                               l->buffers[0]->value.data, l->buffers[1]->value.data,
                                                               d, eps, relu_y(n));
    sp_cuda_check(cudaGetLastError());
}

static void bn_jt_launch(const sp_node *n, const sp_csr *jt, size_t stride, int b0, int nb)
{
    const bn_saved *S = (const bn_saved *)n->saved;
    if (S->training) sp_fail("batchnorm2d %s: no per-sample Jᵀ in training mode", n->layer->name);
    bn_jt_kernel<<<sp_cuda_blocks((size_t)nb * jt->rows, 256), 256, 0, sp_cuda_stream()>>>(
        jt->data, stride, S->scale, (size_t)jt->rows, dims_of(n).P, nb, relu_y(n), b0);
    sp_cuda_check(cudaGetLastError());
}

static void bn_cuda_jt_values(const sp_node *n, int i, int b, sp_csr *jt) { bn_jt_launch(n, jt, 0, b, 1); }

static void bn_cuda_jt_values_all(const sp_node *n, int i, const sp_csr *jt, size_t stride)
{
    bn_jt_launch(n, jt, stride, 0, n->out.shape[0]);
}

static sp_kernels bn_cuda_kernels;

extern "C" void sp_batchnorm2d_cuda_register(void)
{
    bn_cuda_kernels.forward = bn_cuda_forward;
    bn_cuda_kernels.backward_input = bn_cuda_backward_input;
    bn_cuda_kernels.backward_params = bn_cuda_backward_params;
    bn_cuda_kernels.jt_values = bn_cuda_jt_values;
    bn_cuda_kernels.jt_values_all = bn_cuda_jt_values_all;
    sp_op_register_kernels(&sp_op_batchnorm2d, SP_CUDA, &bn_cuda_kernels);
    sp_op_register_kernels(&sp_op_batchnorm2d_relu, SP_CUDA, &bn_cuda_kernels);   /* the layer's relu */
}
