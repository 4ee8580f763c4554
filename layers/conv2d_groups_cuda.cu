/* conv2d_groups_cuda.cu — the CUDA twin of layers/conv2d_groups.c: grouped 2-D
 * convolution (nn.Conv2d(..., groups=G)), NCHW float32, on cuDNN's grouped convolution
 * (cudnnSetConvolutionGroupCount; the filter descriptor is W's [O, C/G, k, k]).
 *   forward: y = conv_G(x, W) (beta 0), then y += b (own kernel, when there is a bias)
 *   δ:       dx = conv_Gᵀ(dy, W)          (cudnnConvolutionBackwardData, beta 0)
 *   G:       dW += dy ⋆_G x               (cudnnConvolutionBackwardFilter, beta 1)
 *            db += Σ_{b,p} dy             (own kernel, one thread per channel)
 * Plans per shape and group count as in conv2d_cuda.cu: descriptors and the three
 * algorithms found once (fastest within GCONV_WS_CAP of workspace); workspaces from the
 * step arena. cuDNN sums in its own order: 1e-5 of the CPU op's largest entry.
 * Jᵀ: the CPU op's pattern (row (c, h, w): for each o of c's group, the windows
 * covering (h, w)), filled with the weights, one thread per (sample, row). */
#include <pthread.h>
#include "core/kernels/cuda.h"
extern "C" {
#include "core/device.h"
#include "core/error.h"
#include "core/tape.h"
#include "layers/layers.h"
}

#define GCONV_MAX_PLANS 128
#define GCONV_WS_CAP ((size_t)512 << 20)

typedef struct gconv_plan {
    int B, C, H, W, O, k, stride, pad, groups, Ho, Wo;
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    size_t ws_fwd, ws_data, ws_filter;
} gconv_plan;

static gconv_plan plans[GCONV_MAX_PLANS];
static int nplans;
static pthread_mutex_t plans_lock = PTHREAD_MUTEX_INITIALIZER;

// ----------------------------------------------------------------------------
// CUDA kernels

__global__ void gconv_bias_add_kernel(float *y, const float *b, int O, int P, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = __fadd_rn(y[i], b[i / P % O]);
}

__global__ void gconv_bias_grad_kernel(float *db, const float *dy, int B, int O, int P)
{
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= O) return;
    double acc = 0.0;   /* the CPU op's float64 sum, in its order */
    for (int b = 0; b < B; b++)
        for (int p = 0; p < P; p++) acc = __dadd_rn(acc, (double)dy[((size_t)b * O + o) * P + p]);
    db[o] = __fadd_rn(db[o], (float)acc);
}

__device__ void gconv_window_range(int x, int k, int s, int p, int out, int *lo, int *hi)
{
    int l = x + p - k + 1;   /* windows i with 0 <= x + p − i·s <= k − 1 */
    *lo = l <= 0 ? 0 : (l + s - 1) / s;
    int h = (x + p) / s + 1;
    *hi = h < out ? h : out;
    if (*hi < *lo) *hi = *lo;
}

__global__ void gconv_jt_kernel(float *data, size_t stride, const int32_t *indptr, const float *Wt, int C, int H,
                                int W, int O, int Ho, int Wo, int k, int s, int p, int groups, int nb)
{
    size_t rows = (size_t)C * H * W, n = (size_t)nb * rows;
    int Cg = C / groups, Og = O / groups;
    for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < n; q += (size_t)gridDim.x * blockDim.x) {
        size_t b = q / rows, row = q % rows;
        int c = (int)(row / ((size_t)H * W)), h = (int)(row / W % H), w = (int)(row % W), gi = c / Cg;
        int i_lo, i_hi, j_lo, j_hi;
        gconv_window_range(h, k, s, p, Ho, &i_lo, &i_hi);
        gconv_window_range(w, k, s, p, Wo, &j_lo, &j_hi);
        float *d = data + b * stride + indptr[row];
        for (int o = gi * Og; o < (gi + 1) * Og; o++)
            for (int i = i_lo; i < i_hi; i++)
                for (int j = j_lo; j < j_hi; j++)
                    *d++ = Wt[(((size_t)o * Cg + c - gi * Cg) * k + (h + p - i * s)) * k + (w + p - j * s)];
    }
}

// ----------------------------------------------------------------------------
// plans: descriptors and algorithms per shape

template <typename Perf> static int pick(const Perf *perf, int n, const char *what)
{
    for (int i = 0; i < n; i++)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= GCONV_WS_CAP) return i;
    sp_fail("conv2d_groups: cuDNN found no %s algorithm within %zu MiB of workspace", what, GCONV_WS_CAP >> 20);
}

static const gconv_plan *plan_for(const sp_node *n)
{
    const sp_tensor *x = sp_node_x(n);
    int k, stride, pad, groups;
    sp_conv2d_groups_geometry(n->layer, &k, &stride, &pad, &groups);
    int B = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3], O = n->out.shape[1];
    pthread_mutex_lock(&plans_lock);
    for (int i = 0; i < nplans; i++) {
        const gconv_plan *p = &plans[i];
        if (p->B == B && p->C == C && p->H == H && p->W == W && p->O == O && p->k == k && p->stride == stride &&
            p->pad == pad && p->groups == groups) {
            pthread_mutex_unlock(&plans_lock);
            return p;
        }
    }
    if (nplans == GCONV_MAX_PLANS) sp_fail("conv2d_groups: more than %d shapes on the device", GCONV_MAX_PLANS);
    gconv_plan *p = &plans[nplans];
    *p = gconv_plan{B, C, H, W, O, k, stride, pad, groups, n->out.shape[2], n->out.shape[3]};
    cudnnHandle_t h = sp_cuda_current()->cudnn;
    sp_cudnn_check(cudnnCreateTensorDescriptor(&p->x));
    sp_cudnn_check(cudnnCreateTensorDescriptor(&p->y));
    sp_cudnn_check(cudnnCreateFilterDescriptor(&p->w));
    sp_cudnn_check(cudnnCreateConvolutionDescriptor(&p->conv));
    sp_cudnn_check(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, B, C, H, W));
    sp_cudnn_check(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, B, O, p->Ho, p->Wo));
    sp_cudnn_check(cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, O, C / groups, k, k));
    sp_cudnn_check(cudnnSetConvolution2dDescriptor(p->conv, pad, pad, stride, stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                                   CUDNN_DATA_FLOAT));
    sp_cudnn_check(cudnnSetConvolutionGroupCount(p->conv, groups));
    /* Full FP32 (no TF32 tensor cores): the CPU comparison's 1e-5 must hold. */
    sp_cudnn_check(cudnnSetConvolutionMathType(p->conv, CUDNN_FMA_MATH));
    int got = 0;
    cudnnConvolutionFwdAlgoPerf_t fperf[8];
    sp_cudnn_check(cudnnFindConvolutionForwardAlgorithm(h, p->x, p->w, p->conv, p->y, 8, &got, fperf));
    int i = pick(fperf, got, "forward");
    p->fwd = fperf[i].algo;
    p->ws_fwd = fperf[i].memory;
    cudnnConvolutionBwdDataAlgoPerf_t dperf[8];
    sp_cudnn_check(cudnnFindConvolutionBackwardDataAlgorithm(h, p->w, p->y, p->conv, p->x, 8, &got, dperf));
    i = pick(dperf, got, "backward-data");
    p->bwd_data = dperf[i].algo;
    p->ws_data = dperf[i].memory;
    cudnnConvolutionBwdFilterAlgoPerf_t wperf[8];
    sp_cudnn_check(cudnnFindConvolutionBackwardFilterAlgorithm(h, p->x, p->y, p->conv, p->w, 8, &got, wperf));
    i = pick(wperf, got, "backward-filter");
    p->bwd_filter = wperf[i].algo;
    p->ws_filter = wperf[i].memory;
    nplans++;
    pthread_mutex_unlock(&plans_lock);
    return p;
}

static void *workspace(sp_node *n, size_t bytes)
{
    return bytes ? sp_tape_alloc_on(n->tape, SP_CUDA, bytes) : NULL;
}

// ----------------------------------------------------------------------------
// the op

static void gconv_cuda_forward(sp_node *n)
{
    sp_cuda_require_params(n->layer);
    const gconv_plan *p = plan_for(n);
    const sp_cuda_lane *c = sp_cuda_current();
    float one = 1.0f, zero = 0.0f;
    void *ws = workspace(n, p->ws_fwd);
    sp_cudnn_check(cudnnConvolutionForward(c->cudnn, &one, p->x, sp_node_x(n)->data, p->w,
                                           n->layer->params[0]->value.data, p->conv, p->fwd, ws, p->ws_fwd, &zero,
                                           p->y, n->out.data));
    if (n->layer->nparams < 2) return;   /* bias=False */
    size_t total = n->out.numel;
    gconv_bias_add_kernel<<<sp_cuda_blocks(total, 256), 256, 0, sp_cuda_stream()>>>(
        n->out.data, n->layer->params[1]->value.data, p->O, p->Ho * p->Wo, total);
    sp_cuda_check(cudaGetLastError());
}

static void gconv_cuda_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    const gconv_plan *p = plan_for(n);
    const sp_cuda_lane *c = sp_cuda_current();
    float one = 1.0f, zero = 0.0f;
    void *ws = workspace(n, p->ws_data);
    sp_cudnn_check(cudnnConvolutionBackwardData(c->cudnn, &one, p->w, n->layer->params[0]->value.data, p->y,
                                                dy->data, p->conv, p->bwd_data, ws, p->ws_data, &zero, p->x,
                                                dx->data));
}

static void gconv_cuda_backward_params(sp_node *n, const sp_tensor *dy)
{
    const gconv_plan *p = plan_for(n);
    const sp_cuda_lane *c = sp_cuda_current();
    float one = 1.0f;
    void *ws = workspace(n, p->ws_filter);
    sp_cudnn_check(cudnnConvolutionBackwardFilter(c->cudnn, &one, p->x, sp_node_x(n)->data, p->y, dy->data, p->conv,
                                                  p->bwd_filter, ws, p->ws_filter, &one, p->w,
                                                  n->layer->params[0]->grad.data));
    if (n->layer->nparams < 2) return;
    gconv_bias_grad_kernel<<<sp_cuda_blocks((size_t)p->O, 128), 128, 0, sp_cuda_stream()>>>(
        n->layer->params[1]->grad.data, dy->data, p->B, p->O, p->Ho * p->Wo);
    sp_cuda_check(cudaGetLastError());
}

static void gconv_jt_launch(const sp_node *n, const sp_csr *jt, size_t stride, int nb)
{
    const sp_tensor *x = sp_node_x(n);
    int k, s, p, groups;
    sp_conv2d_groups_geometry(n->layer, &k, &s, &p, &groups);
    gconv_jt_kernel<<<sp_cuda_blocks((size_t)nb * jt->rows, 128), 128, 0, sp_cuda_stream()>>>(
        jt->data, stride, jt->indptr, n->layer->params[0]->value.data, x->shape[1], x->shape[2], x->shape[3],
        n->out.shape[1], n->out.shape[2], n->out.shape[3], k, s, p, groups, nb);
    sp_cuda_check(cudaGetLastError());
}

static void gconv_cuda_jt_values(const sp_node *n, int i, int b, sp_csr *jt) { gconv_jt_launch(n, jt, 0, 1); }

static void gconv_cuda_jt_values_all(const sp_node *n, int i, const sp_csr *jt, size_t stride)
{
    gconv_jt_launch(n, jt, stride, n->out.shape[0]);
}

static sp_opdef gconv_cuda_op;

void sp_conv2d_groups_cuda_register(void)
{
    gconv_cuda_op.name = "conv2d_groups";
    gconv_cuda_op.infer = sp_op_conv2d_groups.infer;
    gconv_cuda_op.forward = gconv_cuda_forward;
    gconv_cuda_op.backward_input = gconv_cuda_backward_input;
    gconv_cuda_op.backward_params = gconv_cuda_backward_params;
    gconv_cuda_op.cost = sp_op_conv2d_groups.cost;
    gconv_cuda_op.init_params = sp_op_conv2d_groups.init_params;
    gconv_cuda_op.jt_pattern = sp_op_conv2d_groups.jt_pattern;
    gconv_cuda_op.jt_values = gconv_cuda_jt_values;
    gconv_cuda_op.jt_values_all = gconv_cuda_jt_values_all;
    sp_op_register_device(&sp_op_conv2d_groups, SP_CUDA, &gconv_cuda_op);
}
