/* cudnn_conv.cu — the device convolution of conv2d and conv2d_groups (cudnn_conv.h):
 * plans per shape, the algorithm search, the three cuDNN calls, the bias and Jᵀ kernels. */
#include <pthread.h>
#include "layers/cudnn_conv.h"
extern "C" {
#include "core/error.h"
#include "layers/conv2d_internal.h"
#include "layers/layers.h"
}

#define CONV_MAX_PLANS 256
#define CONV_WS_CAP ((size_t)512 << 20)

/* What a convolution node is beyond its tensors. */
typedef struct conv_cfg {
    const char *op;   /* the op's name, for messages */
    int k, stride, pad, groups;
    bool bias_f64;    /* db's sum in float64 (else in float) */
} conv_cfg;

typedef struct conv_plan {
    int B, C, H, W, O, k, stride, pad, groups, Ho, Wo;
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    size_t ws_fwd, ws_data, ws_filter;
} conv_plan;

static conv_plan plans[CONV_MAX_PLANS];
static int nplans;
static pthread_mutex_t plans_lock = PTHREAD_MUTEX_INITIALIZER;

// ----------------------------------------------------------------------------
// CUDA kernels

__global__ void conv_bias_add_kernel(float *y, const float *b, int O, int P, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = __fadd_rn(y[i], b[i / P % O]);
}

__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }

/* db[o] += Σ_{b,p} dy[b, o, p], summed in Acc in (b, p) order. */
template <typename Acc> __global__ void conv_bias_grad_kernel(float *db, const float *dy, int B, int O, int P)
{
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= O) return;
    Acc acc = 0;
    for (int b = 0; b < B; b++)
        for (int p = 0; p < P; p++) acc = add_rn(acc, (Acc)dy[((size_t)b * O + o) * P + p]);
    db[o] = __fadd_rn(db[o], (float)acc);
}

__device__ void conv_window_range(int x, int k, int s, int p, int out, int *lo, int *hi)
{
    int l = x + p - k + 1;   /* windows i with 0 <= x + p − i·s <= k − 1 */
    *lo = l <= 0 ? 0 : (l + s - 1) / s;
    int h = (x + p) / s + 1;
    *hi = h < out ? h : out;
    if (*hi < *lo) *hi = *lo;
}

__global__ void conv_jt_kernel(float *data, size_t stride, const int32_t *indptr, const float *Wt, int C, int H, int W,
                               int O, int Ho, int Wo, int k, int s, int p, int groups, int nb)
{
    size_t rows = (size_t)C * H * W, n = (size_t)nb * rows;
    int Cg = C / groups, Og = O / groups;
    for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < n; q += (size_t)gridDim.x * blockDim.x) {
        size_t b = q / rows, row = q % rows;
        int c = (int)(row / ((size_t)H * W)), h = (int)(row / W % H), w = (int)(row % W), gi = c / Cg;
        int i_lo, i_hi, j_lo, j_hi;
        conv_window_range(h, k, s, p, Ho, &i_lo, &i_hi);
        conv_window_range(w, k, s, p, Wo, &j_lo, &j_hi);
        float *d = data + b * stride + indptr[row];
        for (int o = gi * Og; o < (gi + 1) * Og; o++)
            for (int i = i_lo; i < i_hi; i++)
                for (int j = j_lo; j < j_hi; j++)
                    *d++ = Wt[(((size_t)o * Cg + c - gi * Cg) * k + (h + p - i * s)) * k + (w + p - j * s)];
    }
}

// ----------------------------------------------------------------------------
// plans: descriptors and algorithms per shape

/* The first result (cuDNN sorts them by time) that succeeded, is deterministic and fits
 * the workspace cap; -1 if none does. */
template <typename Perf> static int pick(const Perf *perf, int n)
{
    for (int i = 0; i < n; i++)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].determinism == CUDNN_DETERMINISTIC &&
            perf[i].memory <= CONV_WS_CAP)
            return i;
    return -1;
}

static void plan_destroy(conv_plan *p)
{
    sp_cudnn_check(cudnnDestroyTensorDescriptor(p->x));
    sp_cudnn_check(cudnnDestroyTensorDescriptor(p->y));
    sp_cudnn_check(cudnnDestroyFilterDescriptor(p->w));
    sp_cudnn_check(cudnnDestroyConvolutionDescriptor(p->conv));
}

/* Descriptors and algorithms of a new plan p whose shape is set. NULL, or the direction
 * whose search found nothing to run (*tried: how many results it had). */
static const char *plan_init(conv_plan *p, int *tried)
{
    cudnnHandle_t h = sp_cuda_current()->cudnn;
    sp_cudnn_check(cudnnCreateTensorDescriptor(&p->x));
    sp_cudnn_check(cudnnCreateTensorDescriptor(&p->y));
    sp_cudnn_check(cudnnCreateFilterDescriptor(&p->w));
    sp_cudnn_check(cudnnCreateConvolutionDescriptor(&p->conv));
    sp_cudnn_check(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, p->B, p->C, p->H, p->W));
    sp_cudnn_check(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, p->B, p->O, p->Ho, p->Wo));
    sp_cudnn_check(
        cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, p->O, p->C / p->groups, p->k, p->k));
    sp_cudnn_check(cudnnSetConvolution2dDescriptor(p->conv, p->pad, p->pad, p->stride, p->stride, 1, 1,
                                                   CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    sp_cudnn_check(cudnnSetConvolutionGroupCount(p->conv, p->groups));
    /* Full FP32 (no TF32 tensor cores): the CPU comparison's 1e-5 must hold. */
    sp_cudnn_check(cudnnSetConvolutionMathType(p->conv, CUDNN_FMA_MATH));
    cudnnConvolutionFwdAlgoPerf_t fperf[8];
    sp_cudnn_check(cudnnFindConvolutionForwardAlgorithm(h, p->x, p->w, p->conv, p->y, 8, tried, fperf));
    int i = pick(fperf, *tried);
    if (i < 0) return "forward";
    p->fwd = fperf[i].algo;
    p->ws_fwd = fperf[i].memory;
    cudnnConvolutionBwdDataAlgoPerf_t dperf[8];
    sp_cudnn_check(cudnnFindConvolutionBackwardDataAlgorithm(h, p->w, p->y, p->conv, p->x, 8, tried, dperf));
    if ((i = pick(dperf, *tried)) < 0) return "backward-data";
    p->bwd_data = dperf[i].algo;
    p->ws_data = dperf[i].memory;
    cudnnConvolutionBwdFilterAlgoPerf_t wperf[8];
    sp_cudnn_check(cudnnFindConvolutionBackwardFilterAlgorithm(h, p->x, p->y, p->conv, p->w, 8, tried, wperf));
    if ((i = pick(wperf, *tried)) < 0) return "backward-filter";
    p->bwd_filter = wperf[i].algo;
    p->ws_filter = wperf[i].memory;
    return NULL;
}

/* The plan of node n's shape, made on first use. Its failures release the lock first,
 * so that sp_try can catch them. */
static const conv_plan *plan_for(const sp_node *n, const conv_cfg *c)
{
    const sp_tensor *x = sp_node_x(n);
    conv_plan key = {x->shape[0], x->shape[1], x->shape[2], x->shape[3], n->out.shape[1], c->k, c->stride, c->pad,
                     c->groups, n->out.shape[2], n->out.shape[3]};
    pthread_mutex_lock(&plans_lock);
    for (int i = 0; i < nplans; i++) {
        const conv_plan *p = &plans[i];
        if (p->B == key.B && p->C == key.C && p->H == key.H && p->W == key.W && p->O == key.O && p->k == key.k &&
            p->stride == key.stride && p->pad == key.pad && p->groups == key.groups) {
            pthread_mutex_unlock(&plans_lock);
            return p;
        }
    }
    if (nplans == CONV_MAX_PLANS) {
        pthread_mutex_unlock(&plans_lock);
        sp_fail("%s: more than %d convolution shapes on the device", c->op, CONV_MAX_PLANS);
    }
    conv_plan *p = &plans[nplans];
    *p = key;
    int tried = 0;
    const char *what = plan_init(p, &tried);
    if (what) {
        plan_destroy(p);
        pthread_mutex_unlock(&plans_lock);
        sp_fail("%s: cuDNN found no deterministic %s algorithm within %zu MiB of workspace among %d (scanprop's "
                "gradients must repeat bit for bit)",
                c->op, what, CONV_WS_CAP >> 20, tried);
    }
    nplans++;
    pthread_mutex_unlock(&plans_lock);
    return p;
}

static void *workspace(sp_node *n, size_t bytes)
{
    return bytes ? sp_tape_alloc_on(n->tape, SP_CUDA, bytes) : NULL;
}

// ----------------------------------------------------------------------------
// the convolution

/* conv2d is one group with the bias gradient summed in float; conv2d_groups sums it in
 * float64, as its CPU op. */
static conv_cfg cfg_of(const sp_node *n)
{
    conv_cfg c = {n->layer->op->name, 0, 0, 0, 1, false};
    if (n->layer->op == &sp_op_conv2d_groups) {
        const gconv_layer *g = (const gconv_layer *)n->layer;
        c.k = g->k, c.stride = g->stride, c.pad = g->pad, c.groups = g->groups;
        c.bias_f64 = true;
    } else if (n->layer->op == &sp_op_conv2d) {
        const conv_layer *l = (const conv_layer *)n->layer;
        c.k = l->k, c.stride = l->stride, c.pad = l->pad;
    } else {
        sp_fail("%s: not a convolution (layers/cudnn_conv.cu runs conv2d and conv2d_groups)", c.op);
    }
    return c;
}

void sp_cudnn_conv_forward(sp_node *n)
{
    sp_cuda_require_params(n->layer);
    conv_cfg c = cfg_of(n);
    const conv_plan *p = plan_for(n, &c);
    float one = 1.0f, zero = 0.0f;
    void *ws = workspace(n, p->ws_fwd);
    sp_cudnn_check(cudnnConvolutionForward(sp_cuda_current()->cudnn, &one, p->x, sp_node_x(n)->data, p->w,
                                           n->layer->params[0]->value.data, p->conv, p->fwd, ws, p->ws_fwd, &zero,
                                           p->y, n->out.data));
    if (n->layer->nparams < 2) return;   /* no bias */
    size_t total = n->out.numel;
    conv_bias_add_kernel<<<sp_cuda_blocks(total, 256), 256, 0, sp_cuda_stream()>>>(
        n->out.data, n->layer->params[1]->value.data, p->O, p->Ho * p->Wo, total);
    sp_cuda_check(cudaGetLastError());
}

void sp_cudnn_conv_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    conv_cfg c = cfg_of(n);
    const conv_plan *p = plan_for(n, &c);
    float one = 1.0f, zero = 0.0f;
    void *ws = workspace(n, p->ws_data);
    sp_cudnn_check(cudnnConvolutionBackwardData(sp_cuda_current()->cudnn, &one, p->w, n->layer->params[0]->value.data,
                                                p->y, dy->data, p->conv, p->bwd_data, ws, p->ws_data, &zero, p->x,
                                                dx->data));
}

void sp_cudnn_conv_backward_params(sp_node *n, const sp_tensor *dy)
{
    conv_cfg c = cfg_of(n);
    const conv_plan *p = plan_for(n, &c);
    float one = 1.0f;
    void *ws = workspace(n, p->ws_filter);
    sp_cudnn_check(cudnnConvolutionBackwardFilter(sp_cuda_current()->cudnn, &one, p->x, sp_node_x(n)->data, p->y,
                                                  dy->data, p->conv, p->bwd_filter, ws, p->ws_filter, &one, p->w,
                                                  n->layer->params[0]->grad.data));
    if (n->layer->nparams < 2) return;   /* no bias */
    unsigned blocks = sp_cuda_blocks((size_t)p->O, 128);
    float *db = n->layer->params[1]->grad.data;
    if (c.bias_f64)
        conv_bias_grad_kernel<double><<<blocks, 128, 0, sp_cuda_stream()>>>(db, dy->data, p->B, p->O, p->Ho * p->Wo);
    else
        conv_bias_grad_kernel<float><<<blocks, 128, 0, sp_cuda_stream()>>>(db, dy->data, p->B, p->O, p->Ho * p->Wo);
    sp_cuda_check(cudaGetLastError());
}

static void jt_launch(const sp_node *n, const sp_csr *jt, size_t stride, int nb)
{
    conv_cfg c = cfg_of(n);
    const sp_tensor *x = sp_node_x(n);
    conv_jt_kernel<<<sp_cuda_blocks((size_t)nb * jt->rows, 128), 128, 0, sp_cuda_stream()>>>(
        jt->data, stride, jt->indptr, n->layer->params[0]->value.data, x->shape[1], x->shape[2], x->shape[3],
        n->out.shape[1], n->out.shape[2], n->out.shape[3], c.k, c.stride, c.pad, c.groups, nb);
    sp_cuda_check(cudaGetLastError());
}

void sp_cudnn_conv_jt_values(const sp_node *n, int i, int b, sp_csr *jt) { jt_launch(n, jt, 0, 1); }

void sp_cudnn_conv_jt_values_all(const sp_node *n, int i, const sp_csr *jt, size_t stride)
{
    jt_launch(n, jt, stride, n->out.shape[0]);
}

const sp_kernels *sp_cudnn_conv_kernels(void)
{
    static sp_kernels k;   /* filled at registration, before any step runs */
    k.forward = sp_cudnn_conv_forward;
    k.backward_input = sp_cudnn_conv_backward_input;
    k.backward_params = sp_cudnn_conv_backward_params;
    k.jt_values = sp_cudnn_conv_jt_values;
    k.jt_values_all = sp_cudnn_conv_jt_values_all;
    return &k;
}
