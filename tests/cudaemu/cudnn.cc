/* cudnn.cc — the CUDA emulator's cuDNN: handles, 4-d tensor/filter/convolution
 * descriptors and the 2-d convolution (forward, backward data, backward filter) as
 * naive loops written from the cuDNN API reference, against the toolkit's cudnn.h.
 *
 * Float NCHW only (anything else is CUDNN_STATUS_NOT_SUPPORTED). The algorithm search
 * reports two algorithms per direction: a "fast" one that needs a workspace of
 * C·R·S·4 bytes per output pixel row and the workspace-free one; executing an
 * algorithm with a smaller workspace than it asked for fails with
 * CUDNN_STATUS_BAD_PARAM as cuDNN does, and the workspace is checked against the
 * allocation registry and overwritten with NaN, so a caller cannot rely on its content.
 * Both report CUDNN_DETERMINISTIC. SCANPROP_EMU_CUDNN_NONDET=first lists a third,
 * faster one ahead of them that reports CUDNN_NON_DETERMINISTIC and aborts with a
 * "cudaemu:" line when run (scanprop's gradients must repeat bit for bit, so the
 * algorithm search must skip it); SCANPROP_EMU_CUDNN_NONDET=all marks the two
 * non-deterministic (the search must then fail clearly).
 * Output descriptors must match the convolution's output shape exactly.
 * Grouped convolution (cudnnSetConvolutionGroupCount): x has G·c channels for a filter
 * of [K, c, R, S], K divisible by G; output k reads input channels g·c … g·c + c − 1,
 * g = k / (K/G).
 *
 * The RNN (cudnnRNNForward, cudnnRNNBackwardData_v8, cudnnRNNBackwardWeights_v8): one
 * layer, one direction, CUDNN_RNN_TANH or CUDNN_GRU, two bias vectors, float, x and y in
 * either unpacked layout with every sequence at full length; the equations of the cuDNN
 * API reference (GRU: r and i gates, h' = tanh(W_h x + r ⊙ (R_h h + b_Rh) + b_Wh)). The
 * weight space is [W_0 … W_{G-1}, R_0 … R_{G-1}, b_W…, b_R…] (G = 1 or 3 gates, in
 * cudnnGetRNNWeightParams' order; callers must ask for the addresses); training mode
 * leaves in the reserve space what the backward passes read, and BackwardData leaves
 * the pre-activation gradients there for BackwardWeights — calling them out of order,
 * or with a reserve space smaller than cudnnGetRNNTempSpaceSizes asked for, fails. */
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>
#include <cudnn.h>
#include "emu.h"

struct cudnnContext {
    cudaStream_t stream = nullptr;
};
struct cudnnTensorStruct {
    int n = 0, c = 0, h = 0, w = 0;
    bool set = false;
    int nd = 0, dims[8] = {0};   /* cudnnSetTensorNdDescriptor (the RNN's h and weight blocks) */
};
struct cudnnFilterStruct {
    int k = 0, c = 0, h = 0, w = 0;
    bool set = false;
};
struct cudnnConvolutionStruct {
    int pad_h = 0, pad_w = 0, u = 1, v = 1, dil_h = 1, dil_w = 1;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    bool set = false;
    int groups = 1;
};

namespace {

/* C: the filter's channels (per group); the input has G·C. */
struct conv_shape {
    int N, C, H, W, K, R, S, P, Q;
    cudnnConvolutionStruct cv;
    int G;
};

/* The algorithm SCANPROP_EMU_CUDNN_NONDET=first lists: never to be run. */
const int NONDET_ALGO = 2;

size_t fast_workspace(const conv_shape &s) { return (size_t)s.C * s.R * s.S * s.Q * sizeof(float); }

/* Input channel of filter channel c for output k. */
inline int in_channel(const conv_shape &s, int k, int c) { return k / (s.K / s.G) * s.C + c; }

cudnnStatus_t shape_of(cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t cv,
                       cudnnTensorDescriptor_t y, conv_shape *s)
{
    if (!x || !w || !cv || !y || !x->set || !w->set || !cv->set || !y->set) return CUDNN_STATUS_BAD_PARAM;
    if (cv->groups < 1 || x->c != w->c * cv->groups || w->k % cv->groups) return CUDNN_STATUS_BAD_PARAM;
    int eh = (w->h - 1) * cv->dil_h + 1, ew = (w->w - 1) * cv->dil_w + 1;
    int P = (x->h + 2 * cv->pad_h - eh) / cv->u + 1, Q = (x->w + 2 * cv->pad_w - ew) / cv->v + 1;
    if (P <= 0 || Q <= 0) return CUDNN_STATUS_BAD_PARAM;
    if (y->n != x->n || y->c != w->k || y->h != P || y->w != Q) return CUDNN_STATUS_BAD_PARAM;
    *s = conv_shape{x->n, w->c, x->h, x->w, w->k, w->h, w->w, P, Q, *cv, cv->groups};
    return CUDNN_STATUS_SUCCESS;
}

/* Input row/column of output (p, q) under filter tap (r, t); false in the padding. */
inline bool tap(const conv_shape &s, int p, int q, int r, int t, int *ih, int *iw)
{
    int rr = s.cv.mode == CUDNN_CONVOLUTION ? s.R - 1 - r : r, tt = s.cv.mode == CUDNN_CONVOLUTION ? s.S - 1 - t : t;
    *ih = p * s.cv.u - s.cv.pad_h + rr * s.cv.dil_h;
    *iw = q * s.cv.v - s.cv.pad_w + tt * s.cv.dil_w;
    return *ih >= 0 && *ih < s.H && *iw >= 0 && *iw < s.W;
}

void check(const char *who, const char *what, const void *p, size_t n)
{
    std::string w = std::string(who) + ": " + what;
    emu::check_device_range(w.c_str(), p, n * sizeof(float));
}

cudnnStatus_t prepare(const char *who, const conv_shape &s, int algo, void *ws, size_t ws_size)
{
    if (algo == NONDET_ALGO)
        emu::fail("%s: algorithm %d is the non-deterministic one SCANPROP_EMU_CUDNN_NONDET=first lists; scanprop "
                  "must pick a deterministic one",
                  who, NONDET_ALGO);
    size_t need = algo == 1 ? fast_workspace(s) : 0;
    if (algo != 0 && algo != 1) return CUDNN_STATUS_NOT_SUPPORTED;
    if (ws_size < need) return CUDNN_STATUS_BAD_PARAM;
    if (need) {
        if (!ws) return CUDNN_STATUS_BAD_PARAM;
        emu::check_device_range((std::string(who) + ": workspace").c_str(), ws, need);
    }
    return CUDNN_STATUS_SUCCESS;
}

void scribble(void *ws, size_t n)
{
    float *f = (float *)ws;
    for (size_t i = 0; i < n / sizeof(float); i++) f[i] = NAN;
}

/* SCANPROP_EMU_CUDNN_NONDET: unset, the two algorithms are deterministic; "first", the
 * search lists ahead of them a faster non-deterministic one (NONDET_ALGO); "all", both
 * report CUDNN_NON_DETERMINISTIC (they still run). */
enum nondet_mode { NONDET_NONE, NONDET_FIRST, NONDET_ALL };

nondet_mode nondet(void)
{
    const char *e = getenv("SCANPROP_EMU_CUDNN_NONDET");
    if (!e || !*e) return NONDET_NONE;
    if (strcmp(e, "first") == 0) return NONDET_FIRST;
    if (strcmp(e, "all") == 0) return NONDET_ALL;
    emu::fail("SCANPROP_EMU_CUDNN_NONDET=%s (expected first or all)", e);
}

template <typename Perf, typename Algo> void fill_perf(const conv_shape &s, int requested, int *returned, Perf *perf)
{
    nondet_mode mode = nondet();
    int lead = mode == NONDET_FIRST ? 1 : 0, n = requested < 2 + lead ? requested : 2 + lead;
    for (int i = 0; i < n; i++) {
        int k = i - lead;   /* -1: the non-deterministic one; 0: the fast one; 1: the workspace-free one */
        memset(&perf[i], 0, sizeof perf[i]);
        perf[i].algo = (Algo)(k < 0 ? NONDET_ALGO : k == 0 ? 1 : 0);
        perf[i].status = CUDNN_STATUS_SUCCESS;
        perf[i].time = k < 0 ? 0.5f : k == 0 ? 1.0f : 2.0f;
        perf[i].memory = k == 0 ? fast_workspace(s) : 0;
        perf[i].determinism = k < 0 || mode == NONDET_ALL ? CUDNN_NON_DETERMINISTIC : CUDNN_DETERMINISTIC;
        perf[i].mathType = CUDNN_DEFAULT_MATH;
    }
    *returned = n;
}

}   // namespace

extern "C" {

cudnnStatus_t cudnnCreate(cudnnHandle_t *handle)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return CUDNN_STATUS_NOT_INITIALIZED;
    *handle = new cudnnContext;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle)
{
    delete handle;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId)
{
    handle->stream = streamId;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t *streamId)
{
    *streamId = handle->stream;
    return CUDNN_STATUS_SUCCESS;
}

const char *cudnnGetErrorString(cudnnStatus_t s)
{
    switch (s) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    default: return "CUDNN_STATUS_INTERNAL_ERROR";
    }
}

size_t cudnnGetVersion(void) { return CUDNN_VERSION; }

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d)
{
    *d = new cudnnTensorStruct;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d)
{
    delete d;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format,
                                         cudnnDataType_t dataType, int n, int c, int h, int w)
{
    if (format != CUDNN_TENSOR_NCHW || dataType != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED;
    if (n <= 0 || c <= 0 || h <= 0 || w <= 0) return CUDNN_STATUS_BAD_PARAM;
    *d = cudnnTensorStruct{n, c, h, w, true};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d)
{
    *d = new cudnnFilterStruct;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d)
{
    delete d;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t dataType,
                                         cudnnTensorFormat_t format, int k, int c, int h, int w)
{
    if (format != CUDNN_TENSOR_NCHW || dataType != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED;
    if (k <= 0 || c <= 0 || h <= 0 || w <= 0) return CUDNN_STATUS_BAD_PARAM;
    *d = cudnnFilterStruct{k, c, h, w, true};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d)
{
    *d = new cudnnConvolutionStruct;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d)
{
    delete d;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h, int pad_w, int u, int v,
                                              int dilation_h, int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t computeType)
{
    if (computeType != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED;
    if (pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dilation_h <= 0 || dilation_w <= 0) return CUDNN_STATUS_BAD_PARAM;
    *d = cudnnConvolutionStruct{pad_h, pad_w, u, v, dilation_h, dilation_w, mode, true, d->groups};   /* keeps the group count */
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int groupCount)
{
    if (!d || groupCount < 1) return CUDNN_STATUS_BAD_PARAM;
    d->groups = groupCount;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int *groupCount)
{
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    *groupCount = d->groups;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t, cudnnMathType_t) { return CUDNN_STATUS_SUCCESS; }

cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t cv,
                                                    const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
                                                    int *n, int *c, int *h, int *wo)
{
    if (!cv->set || !x->set || !w->set || x->c != w->c * cv->groups) return CUDNN_STATUS_BAD_PARAM;
    *n = x->n;
    *c = w->k;
    *h = (x->h + 2 * cv->pad_h - ((w->h - 1) * cv->dil_h + 1)) / cv->u + 1;
    *wo = (x->w + 2 * cv->pad_w - ((w->w - 1) * cv->dil_w + 1)) / cv->v + 1;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnFindConvolutionForwardAlgorithm(cudnnHandle_t, const cudnnTensorDescriptor_t x,
                                                   const cudnnFilterDescriptor_t w,
                                                   const cudnnConvolutionDescriptor_t cv,
                                                   const cudnnTensorDescriptor_t y, const int requested, int *returned,
                                                   cudnnConvolutionFwdAlgoPerf_t *perf)
{
    conv_shape s;
    cudnnStatus_t st = shape_of(x, w, cv, y, &s);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    fill_perf<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(s, requested, returned, perf);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithm(cudnnHandle_t, const cudnnFilterDescriptor_t w,
                                                        const cudnnTensorDescriptor_t dy,
                                                        const cudnnConvolutionDescriptor_t cv,
                                                        const cudnnTensorDescriptor_t dx, const int requested,
                                                        int *returned, cudnnConvolutionBwdDataAlgoPerf_t *perf)
{
    conv_shape s;
    cudnnStatus_t st = shape_of(dx, w, cv, dy, &s);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    fill_perf<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(s, requested, returned, perf);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithm(cudnnHandle_t, const cudnnTensorDescriptor_t x,
                                                          const cudnnTensorDescriptor_t dy,
                                                          const cudnnConvolutionDescriptor_t cv,
                                                          const cudnnFilterDescriptor_t dw, const int requested,
                                                          int *returned, cudnnConvolutionBwdFilterAlgoPerf_t *perf)
{
    conv_shape s;
    cudnnStatus_t st = shape_of(x, dw, cv, dy, &s);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    fill_perf<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(s, requested, returned, perf);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t, const cudnnTensorDescriptor_t x,
                                                      const cudnnFilterDescriptor_t w,
                                                      const cudnnConvolutionDescriptor_t cv,
                                                      const cudnnTensorDescriptor_t y, cudnnConvolutionFwdAlgo_t algo,
                                                      size_t *bytes)
{
    conv_shape s;
    cudnnStatus_t st = shape_of(x, w, cv, y, &s);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    *bytes = algo == 1 ? fast_workspace(s) : 0;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t, const cudnnFilterDescriptor_t w,
                                                           const cudnnTensorDescriptor_t dy,
                                                           const cudnnConvolutionDescriptor_t cv,
                                                           const cudnnTensorDescriptor_t dx,
                                                           cudnnConvolutionBwdDataAlgo_t algo, size_t *bytes)
{
    conv_shape s;
    cudnnStatus_t st = shape_of(dx, w, cv, dy, &s);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    *bytes = algo == 1 ? fast_workspace(s) : 0;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t, const cudnnTensorDescriptor_t x,
                                                             const cudnnTensorDescriptor_t dy,
                                                             const cudnnConvolutionDescriptor_t cv,
                                                             const cudnnFilterDescriptor_t dw,
                                                             cudnnConvolutionBwdFilterAlgo_t algo, size_t *bytes)
{
    conv_shape s;
    cudnnStatus_t st = shape_of(x, dw, cv, dy, &s);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    *bytes = algo == 1 ? fast_workspace(s) : 0;
    return CUDNN_STATUS_SUCCESS;
}

/* y = alpha·conv(x, w) + beta·y (beta = 0: y is not read). */
cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t xd,
                                      const void *xv, const cudnnFilterDescriptor_t wd, const void *wv,
                                      const cudnnConvolutionDescriptor_t cv, cudnnConvolutionFwdAlgo_t algo, void *ws,
                                      size_t ws_size, const void *beta, const cudnnTensorDescriptor_t yd, void *yv)
{
    conv_shape s;
    cudnnStatus_t st = shape_of(xd, wd, cv, yd, &s);
    if (st == CUDNN_STATUS_SUCCESS) st = prepare("cudnnConvolutionForward", s, algo, ws, ws_size);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    const float *x = (const float *)xv, *w = (const float *)wv;
    float *y = (float *)yv;
    check("cudnnConvolutionForward", "x", x, (size_t)s.N * s.G * s.C * s.H * s.W);
    check("cudnnConvolutionForward", "w", w, (size_t)s.K * s.C * s.R * s.S);
    check("cudnnConvolutionForward", "y", y, (size_t)s.N * s.K * s.P * s.Q);
    float al = *(const float *)alpha, be = *(const float *)beta;
    size_t need = algo == 1 ? fast_workspace(s) : 0;
    emu::enqueue(h->stream, "cudnnConvolutionForward", [=]() {
        if (need) scribble(ws, need);
        for (int n = 0; n < s.N; n++)
            for (int k = 0; k < s.K; k++)
                for (int p = 0; p < s.P; p++)
                    for (int q = 0; q < s.Q; q++) {
                        float acc = 0.0f;
                        for (int c = 0; c < s.C; c++)
                            for (int r = 0; r < s.R; r++)
                                for (int t = 0; t < s.S; t++) {
                                    int ih, iw;
                                    if (!tap(s, p, q, r, t, &ih, &iw)) continue;
                                    acc += x[(((size_t)n * s.G * s.C + in_channel(s, k, c)) * s.H + ih) * s.W + iw] *
                                           w[(((size_t)k * s.C + c) * s.R + r) * s.S + t];
                                }
                        float *o = &y[(((size_t)n * s.K + k) * s.P + p) * s.Q + q];
                        *o = be == 0.0f ? al * acc : al * acc + be * *o;
                    }
    });
    return CUDNN_STATUS_SUCCESS;
}

/* dx = alpha·convᵀ(dy, w) + beta·dx. */
cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void *alpha, const cudnnFilterDescriptor_t wd,
                                           const void *wv, const cudnnTensorDescriptor_t dyd, const void *dyv,
                                           const cudnnConvolutionDescriptor_t cv, cudnnConvolutionBwdDataAlgo_t algo,
                                           void *ws, size_t ws_size, const void *beta,
                                           const cudnnTensorDescriptor_t dxd, void *dxv)
{
    conv_shape s;
    cudnnStatus_t st = shape_of(dxd, wd, cv, dyd, &s);
    if (st == CUDNN_STATUS_SUCCESS) st = prepare("cudnnConvolutionBackwardData", s, algo, ws, ws_size);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    const float *w = (const float *)wv, *dy = (const float *)dyv;
    float *dx = (float *)dxv;
    check("cudnnConvolutionBackwardData", "w", w, (size_t)s.K * s.C * s.R * s.S);
    check("cudnnConvolutionBackwardData", "dy", dy, (size_t)s.N * s.K * s.P * s.Q);
    check("cudnnConvolutionBackwardData", "dx", dx, (size_t)s.N * s.G * s.C * s.H * s.W);
    float al = *(const float *)alpha, be = *(const float *)beta;
    size_t need = algo == 1 ? fast_workspace(s) : 0;
    emu::enqueue(h->stream, "cudnnConvolutionBackwardData", [=]() {
        if (need) scribble(ws, need);
        size_t nx = (size_t)s.N * s.G * s.C * s.H * s.W;
        float *acc = new float[nx]();
        for (int n = 0; n < s.N; n++)
            for (int k = 0; k < s.K; k++)
                for (int p = 0; p < s.P; p++)
                    for (int q = 0; q < s.Q; q++) {
                        float g = dy[(((size_t)n * s.K + k) * s.P + p) * s.Q + q];
                        for (int c = 0; c < s.C; c++)
                            for (int r = 0; r < s.R; r++)
                                for (int t = 0; t < s.S; t++) {
                                    int ih, iw;
                                    if (!tap(s, p, q, r, t, &ih, &iw)) continue;
                                    acc[(((size_t)n * s.G * s.C + in_channel(s, k, c)) * s.H + ih) * s.W + iw] +=
                                        g * w[(((size_t)k * s.C + c) * s.R + r) * s.S + t];
                                }
                    }
        for (size_t i = 0; i < nx; i++) dx[i] = be == 0.0f ? al * acc[i] : al * acc[i] + be * dx[i];
        delete[] acc;
    });
    return CUDNN_STATUS_SUCCESS;
}

/* dw = alpha·Σ_n dy ⋆ x + beta·dw. */
cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t xd,
                                             const void *xv, const cudnnTensorDescriptor_t dyd, const void *dyv,
                                             const cudnnConvolutionDescriptor_t cv,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void *ws, size_t ws_size,
                                             const void *beta, const cudnnFilterDescriptor_t dwd, void *dwv)
{
    conv_shape s;
    cudnnStatus_t st = shape_of(xd, dwd, cv, dyd, &s);
    if (st == CUDNN_STATUS_SUCCESS) st = prepare("cudnnConvolutionBackwardFilter", s, algo, ws, ws_size);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    const float *x = (const float *)xv, *dy = (const float *)dyv;
    float *dw = (float *)dwv;
    check("cudnnConvolutionBackwardFilter", "x", x, (size_t)s.N * s.G * s.C * s.H * s.W);
    check("cudnnConvolutionBackwardFilter", "dy", dy, (size_t)s.N * s.K * s.P * s.Q);
    check("cudnnConvolutionBackwardFilter", "dw", dw, (size_t)s.K * s.C * s.R * s.S);
    float al = *(const float *)alpha, be = *(const float *)beta;
    size_t need = algo == 1 ? fast_workspace(s) : 0;
    emu::enqueue(h->stream, "cudnnConvolutionBackwardFilter", [=]() {
        if (need) scribble(ws, need);
        for (int k = 0; k < s.K; k++)
            for (int c = 0; c < s.C; c++)
                for (int r = 0; r < s.R; r++)
                    for (int t = 0; t < s.S; t++) {
                        float acc = 0.0f;
                        for (int n = 0; n < s.N; n++)
                            for (int p = 0; p < s.P; p++)
                                for (int q = 0; q < s.Q; q++) {
                                    int ih, iw;
                                    if (!tap(s, p, q, r, t, &ih, &iw)) continue;
                                    acc += dy[(((size_t)n * s.K + k) * s.P + p) * s.Q + q] *
                                           x[(((size_t)n * s.G * s.C + in_channel(s, k, c)) * s.H + ih) * s.W + iw];
                                }
                        float *o = &dw[(((size_t)k * s.C + c) * s.R + r) * s.S + t];
                        *o = be == 0.0f ? al * acc : al * acc + be * *o;
                    }
    });
    return CUDNN_STATUS_SUCCESS;
}


// ----------------------------------------------------------------------------
// RNN

cudnnStatus_t cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t d, cudnnDataType_t dataType, int nbDims,
                                         const int dimA[], const int strideA[])
{
    if (dataType != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED;
    if (nbDims < 1 || nbDims > 8) return CUDNN_STATUS_BAD_PARAM;
    size_t stride = 1;   /* packed, row-major only */
    for (int i = nbDims - 1; i >= 0; i--) {
        if (dimA[i] <= 0 || strideA[i] != (int)stride) return CUDNN_STATUS_NOT_SUPPORTED;
        stride *= (size_t)dimA[i];
    }
    *d = cudnnTensorStruct{};
    d->nd = nbDims;
    for (int i = 0; i < nbDims; i++) d->dims[i] = dimA[i];
    d->set = true;
    return CUDNN_STATUS_SUCCESS;
}

}   // extern "C"

struct cudnnDropoutStruct {
    bool set = false;
};
struct cudnnRNNStruct {
    cudnnRNNMode_t mode = CUDNN_RNN_TANH;
    int input = 0, hidden = 0;
    bool set = false;
};
struct cudnnRNNDataStruct {
    cudnnRNNDataLayout_t layout = CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED;
    int T = 0, B = 0, V = 0;
    bool set = false;
};

namespace {

struct rnn_shape {
    int G, C, H, B, T;
    bool gru;
    cudnnRNNDataLayout_t xl, yl;
};

size_t rnn_weight_floats(const cudnnRNNStruct *r)
{
    int G = r->mode == CUDNN_GRU ? 3 : 1;
    return (size_t)G * r->hidden * (r->input + r->hidden + 2);
}

/* Per step and sample: GRU r, i, h', R_h h + b_Rh (4H), then the backward's 4H
 * (dr, di, dh' pre-activation, d(R_h h + b_Rh)); RNN: the backward's H. */
size_t rnn_reserve_floats(const rnn_shape &s) { return (size_t)s.T * s.B * (s.gru ? 8 * s.H : s.H); }

/* Element (b, t, j) of a sequence tensor of width V in layout l. */
inline size_t at(cudnnRNNDataLayout_t l, int B, int T, int V, int b, int t, int j)
{
    return l == CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED ? ((size_t)b * T + t) * V + j : ((size_t)t * B + b) * V + j;
}

cudnnStatus_t rnn_shape_of(const cudnnRNNStruct *r, const cudnnRNNDataStruct *x, const cudnnRNNDataStruct *y,
                           rnn_shape *s)
{
    if (!r || !r->set || !x || !x->set || !y || !y->set) return CUDNN_STATUS_BAD_PARAM;
    if (x->V != r->input || y->V != r->hidden || x->T != y->T || x->B != y->B || x->layout != y->layout)
        return CUDNN_STATUS_BAD_PARAM;
    bool gru = r->mode == CUDNN_GRU;
    *s = rnn_shape{gru ? 3 : 1, r->input, r->hidden, x->B, x->T, gru, x->layout, y->layout};
    return CUDNN_STATUS_SUCCESS;
}

/* The weight space's blocks: W_g [H, C], R_g [H, H], b_Wg, b_Rg [H]. */
struct rnn_weights {
    const float *W, *R, *bW, *bR;
};
rnn_weights rnn_split(const rnn_shape &s, const float *w)
{
    size_t GH = (size_t)s.G * s.H;
    return rnn_weights{w, w + GH * s.C, w + GH * (s.C + s.H), w + GH * (s.C + s.H) + GH};
}

float rnn_sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

/* What a reserve space holds, by its address, as the queued work runs: a training
 * forward's state (1), then BackwardData's gradients too (2). BackwardData needs 1 or 2,
 * BackwardWeights 2. */
std::mutex reserve_lock;
std::map<const void *, int> reserve_state;

void reserve_mark(const void *r, int state)
{
    std::lock_guard<std::mutex> g(reserve_lock);
    reserve_state[r] = state;
}

void reserve_need(const char *who, const void *r, int state)
{
    std::lock_guard<std::mutex> g(reserve_lock);
    auto it = reserve_state.find(r);
    if (it == reserve_state.end() || it->second < state)
        emu::fail("%s: the reserve space %p holds no %s", who, r,
                  state == 1 ? "training forward (cudnnRNNForward in CUDNN_FWD_MODE_TRAINING)"
                             : "cudnnRNNBackwardData_v8 results: call it first");
}

void rnn_check_seq(const char *who, const int32_t *dev_seq, const rnn_shape &s)
{
    emu::check_device_range((std::string(who) + ": devSeqLengths").c_str(), dev_seq, (size_t)s.B * sizeof(int32_t));
}

}   // namespace

extern "C" {

cudnnStatus_t cudnnCreateDropoutDescriptor(cudnnDropoutDescriptor_t *d)
{
    *d = new cudnnDropoutStruct;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyDropoutDescriptor(cudnnDropoutDescriptor_t d)
{
    delete d;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetDropoutDescriptor(cudnnDropoutDescriptor_t d, cudnnHandle_t, float dropout, void *states,
                                        size_t stateSizeInBytes, unsigned long long)
{
    if (dropout != 0.0f) return CUDNN_STATUS_NOT_SUPPORTED;   /* the emulator has no RNG states */
    d->set = true;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateRNNDescriptor(cudnnRNNDescriptor_t *d)
{
    *d = new cudnnRNNStruct;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyRNNDescriptor(cudnnRNNDescriptor_t d)
{
    delete d;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetRNNDescriptor_v8(cudnnRNNDescriptor_t d, cudnnRNNAlgo_t algo, cudnnRNNMode_t cellMode,
                                       cudnnRNNBiasMode_t biasMode, cudnnDirectionMode_t dirMode,
                                       cudnnRNNInputMode_t inputMode, cudnnDataType_t dataType,
                                       cudnnDataType_t mathPrec, cudnnMathType_t, int32_t inputSize,
                                       int32_t hiddenSize, int32_t projSize, int32_t numLayers,
                                       cudnnDropoutDescriptor_t dropoutDesc, uint32_t auxFlags)
{
    if (algo != CUDNN_RNN_ALGO_STANDARD || (cellMode != CUDNN_RNN_TANH && cellMode != CUDNN_GRU) ||
        biasMode != CUDNN_RNN_DOUBLE_BIAS || dirMode != CUDNN_UNIDIRECTIONAL || inputMode != CUDNN_LINEAR_INPUT ||
        dataType != CUDNN_DATA_FLOAT || mathPrec != CUDNN_DATA_FLOAT || numLayers != 1 || auxFlags != 0)
        return CUDNN_STATUS_NOT_SUPPORTED;
    if (inputSize <= 0 || hiddenSize <= 0 || projSize != hiddenSize || !dropoutDesc || !dropoutDesc->set)
        return CUDNN_STATUS_BAD_PARAM;
    *d = cudnnRNNStruct{cellMode, inputSize, hiddenSize, true};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateRNNDataDescriptor(cudnnRNNDataDescriptor_t *d)
{
    *d = new cudnnRNNDataStruct;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyRNNDataDescriptor(cudnnRNNDataDescriptor_t d)
{
    delete d;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetRNNDataDescriptor(cudnnRNNDataDescriptor_t d, cudnnDataType_t dataType,
                                        cudnnRNNDataLayout_t layout, int maxSeqLength, int batchSize, int vectorSize,
                                        const int seqLengthArray[], void *)
{
    if (dataType != CUDNN_DATA_FLOAT ||
        (layout != CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED && layout != CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED))
        return CUDNN_STATUS_NOT_SUPPORTED;
    if (maxSeqLength <= 0 || batchSize <= 0 || vectorSize <= 0 || !seqLengthArray) return CUDNN_STATUS_BAD_PARAM;
    for (int b = 0; b < batchSize; b++)
        if (seqLengthArray[b] != maxSeqLength) return CUDNN_STATUS_NOT_SUPPORTED;   /* full length only */
    *d = cudnnRNNDataStruct{layout, maxSeqLength, batchSize, vectorSize, true};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetRNNWeightSpaceSize(cudnnHandle_t, cudnnRNNDescriptor_t d, size_t *weightSpaceSize)
{
    if (!d || !d->set) return CUDNN_STATUS_BAD_PARAM;
    *weightSpaceSize = rnn_weight_floats(d) * sizeof(float);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetRNNTempSpaceSizes(cudnnHandle_t, cudnnRNNDescriptor_t d, cudnnForwardMode_t fwdMode,
                                        cudnnRNNDataDescriptor_t xd, size_t *workSpaceSize, size_t *reserveSpaceSize)
{
    if (!d || !d->set || !xd || !xd->set || xd->V != d->input) return CUDNN_STATUS_BAD_PARAM;
    rnn_shape s{d->mode == CUDNN_GRU ? 3 : 1, d->input, d->hidden, xd->B, xd->T, d->mode == CUDNN_GRU, xd->layout,
                xd->layout};
    if (workSpaceSize) *workSpaceSize = (size_t)s.B * s.H * sizeof(float);
    if (reserveSpaceSize) *reserveSpaceSize = fwdMode == CUDNN_FWD_MODE_TRAINING ? rnn_reserve_floats(s) * sizeof(float) : 0;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetRNNWeightParams(cudnnHandle_t, cudnnRNNDescriptor_t d, int32_t pseudoLayer,
                                      size_t weightSpaceSize, const void *weightSpace, int32_t linLayerID,
                                      cudnnTensorDescriptor_t mDesc, void **mAddr, cudnnTensorDescriptor_t bDesc,
                                      void **bAddr)
{
    if (!d || !d->set || pseudoLayer != 0 || weightSpaceSize < rnn_weight_floats(d) * sizeof(float))
        return CUDNN_STATUS_BAD_PARAM;
    int G = d->mode == CUDNN_GRU ? 3 : 1, H = d->hidden, C = d->input;
    if (linLayerID < 0 || linLayerID >= 2 * G) return CUDNN_STATUS_BAD_PARAM;
    bool rec = linLayerID >= G;
    int g = linLayerID % G;
    size_t GH = (size_t)G * H;
    size_t m = rec ? GH * C + (size_t)g * H * H : (size_t)g * H * C;
    size_t b = GH * (C + H) + (rec ? GH : 0) + (size_t)g * H;
    float *w = (float *)weightSpace;
    if (mAddr) *mAddr = w ? w + m : NULL;
    if (bAddr) *bAddr = w ? w + b : NULL;
    int md[3] = {1, H, rec ? H : C}, ms[3] = {H * md[2], md[2], 1}, bd[3] = {1, H, 1}, bs[3] = {H, 1, 1};
    if (mDesc) cudnnSetTensorNdDescriptor(mDesc, CUDNN_DATA_FLOAT, 3, md, ms);
    if (bDesc) cudnnSetTensorNdDescriptor(bDesc, CUDNN_DATA_FLOAT, 3, bd, bs);
    return CUDNN_STATUS_SUCCESS;
}

/* y = every h_t; hy = h_T; training mode keeps the GRU's gates in the reserve space. */
cudnnStatus_t cudnnRNNForward(cudnnHandle_t h, cudnnRNNDescriptor_t d, cudnnForwardMode_t fwdMode,
                              const int32_t devSeqLengths[], cudnnRNNDataDescriptor_t xd, const void *xv,
                              cudnnRNNDataDescriptor_t yd, void *yv, cudnnTensorDescriptor_t hd, const void *hxv,
                              void *hyv, cudnnTensorDescriptor_t, const void *, void *, size_t weightSpaceSize,
                              const void *weightSpace, size_t workSpaceSize, void *workSpace,
                              size_t reserveSpaceSize, void *reserveSpace)
{
    rnn_shape s;
    cudnnStatus_t st = rnn_shape_of(d, xd, yd, &s);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    bool train = fwdMode == CUDNN_FWD_MODE_TRAINING;
    if (weightSpaceSize < rnn_weight_floats(d) * sizeof(float) || workSpaceSize < (size_t)s.B * s.H * sizeof(float) ||
        (train && reserveSpaceSize < rnn_reserve_floats(s) * sizeof(float)))
        return CUDNN_STATUS_BAD_PARAM;
    const char *who = "cudnnRNNForward";
    rnn_check_seq(who, devSeqLengths, s);
    check(who, "x", xv, (size_t)s.B * s.T * s.C);
    check(who, "y", yv, (size_t)s.B * s.T * s.H);
    check(who, "weightSpace", weightSpace, rnn_weight_floats(d));
    if (hxv) check(who, "hx", hxv, (size_t)s.B * s.H);
    if (hyv) check(who, "hy", hyv, (size_t)s.B * s.H);
    if (train) check(who, "reserveSpace", reserveSpace, rnn_reserve_floats(s));
    const float *x = (const float *)xv, *hx = (const float *)hxv;
    float *y = (float *)yv, *hy = (float *)hyv, *res = (float *)reserveSpace;
    rnn_weights w = rnn_split(s, (const float *)weightSpace);
    emu::enqueue(h->stream, who, [=]() {
        int C = s.C, H = s.H;
        std::vector<float> pre((size_t)3 * H), rec((size_t)3 * H);
        for (int b = 0; b < s.B; b++)
            for (int t = 0; t < s.T; t++) {
                const float *xt = x + at(s.xl, s.B, s.T, C, b, t, 0);
                const float *hp = t > 0 ? y + at(s.yl, s.B, s.T, H, b, t - 1, 0) : hx ? hx + (size_t)b * H : NULL;
                float *ht = y + at(s.yl, s.B, s.T, H, b, t, 0);
                for (int q = 0; q < s.G * H; q++) {
                    float a = w.bW[q], r = w.bR[q];
                    for (int c = 0; c < C; c++) a += w.W[(size_t)q * C + c] * xt[c];
                    if (hp)
                        for (int k = 0; k < H; k++) r += w.R[(size_t)q * H + k] * hp[k];
                    pre[q] = a;
                    rec[q] = r;
                }
                float *g = train && s.gru ? res + ((size_t)t * s.B + b) * 8 * H : NULL;
                for (int j = 0; j < H; j++) {
                    float hj = hp ? hp[j] : 0.0f;
                    if (!s.gru) {
                        ht[j] = std::tanh(pre[j] + rec[j]);
                        continue;
                    }
                    float r = rnn_sigmoid(pre[j] + rec[j]), i = rnn_sigmoid(pre[H + j] + rec[H + j]);
                    float n = std::tanh(pre[2 * H + j] + r * rec[2 * H + j]);
                    ht[j] = (1.0f - i) * n + i * hj;
                    if (g) g[j] = r, g[H + j] = i, g[2 * H + j] = n, g[3 * H + j] = rec[2 * H + j];
                }
                if (hy && t == s.T - 1)
                    for (int j = 0; j < H; j++) hy[(size_t)b * H + j] = ht[j];
            }
        if (train) reserve_mark(res, 1);
    });
    return CUDNN_STATUS_SUCCESS;
}

/* dx from dy (every step) and dhy (the last), back through time; leaves each step's
 * pre-activation gradients in the reserve space for BackwardWeights. */
cudnnStatus_t cudnnRNNBackwardData_v8(cudnnHandle_t h, cudnnRNNDescriptor_t d, const int32_t devSeqLengths[],
                                      cudnnRNNDataDescriptor_t yd, const void *yv, const void *dyv,
                                      cudnnRNNDataDescriptor_t xd, void *dxv, cudnnTensorDescriptor_t hd,
                                      const void *hxv, const void *dhyv, void *dhxv, cudnnTensorDescriptor_t,
                                      const void *, const void *, void *, size_t weightSpaceSize,
                                      const void *weightSpace, size_t workSpaceSize, void *workSpace,
                                      size_t reserveSpaceSize, void *reserveSpace)
{
    rnn_shape s;
    cudnnStatus_t st = rnn_shape_of(d, xd, yd, &s);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    if (weightSpaceSize < rnn_weight_floats(d) * sizeof(float) || workSpaceSize < (size_t)s.B * s.H * sizeof(float) ||
        reserveSpaceSize < rnn_reserve_floats(s) * sizeof(float))
        return CUDNN_STATUS_BAD_PARAM;
    const char *who = "cudnnRNNBackwardData_v8";
    rnn_check_seq(who, devSeqLengths, s);
    check(who, "y", yv, (size_t)s.B * s.T * s.H);
    check(who, "dy", dyv, (size_t)s.B * s.T * s.H);
    check(who, "dx", dxv, (size_t)s.B * s.T * s.C);
    check(who, "reserveSpace", reserveSpace, rnn_reserve_floats(s));
    if (hxv) check(who, "hx", hxv, (size_t)s.B * s.H);
    if (dhyv) check(who, "dhy", dhyv, (size_t)s.B * s.H);
    if (dhxv) check(who, "dhx", dhxv, (size_t)s.B * s.H);
    const float *y = (const float *)yv, *dy = (const float *)dyv, *hx = (const float *)hxv,
                *dhy = (const float *)dhyv;
    float *dx = (float *)dxv, *dhx = (float *)dhxv, *res = (float *)reserveSpace;
    rnn_weights w = rnn_split(s, (const float *)weightSpace);
    emu::enqueue(h->stream, who, [=]() {
        reserve_need(who, res, 1);
        int C = s.C, H = s.H;
        std::vector<float> g(H), carry(H), da((size_t)3 * H);
        for (int b = 0; b < s.B; b++) {
            for (int j = 0; j < H; j++) carry[j] = dhy ? dhy[(size_t)b * H + j] : 0.0f;
            for (int t = s.T - 1; t >= 0; t--) {
                const float *ht = y + at(s.yl, s.B, s.T, H, b, t, 0);
                const float *hp = t > 0 ? y + at(s.yl, s.B, s.T, H, b, t - 1, 0) : hx ? hx + (size_t)b * H : NULL;
                const float *dyt = dy + at(s.yl, s.B, s.T, H, b, t, 0);
                for (int j = 0; j < H; j++) g[j] = carry[j] + dyt[j];
                float *keep = s.gru ? res + ((size_t)t * s.B + b) * 8 * H : res + ((size_t)t * s.B + b) * H;
                /* da: the gradient of each gate's input sum (W x + b_W part); for GRU's
                 * new gate the recurrent part differs (r ⊙): keep[7H..8H) = d(R_h h + b_Rh) */
                for (int j = 0; j < H; j++) {
                    if (!s.gru) {
                        da[j] = g[j] * (1.0f - ht[j] * ht[j]);
                        keep[j] = da[j];
                        carry[j] = 0.0f;
                        continue;
                    }
                    const float *gt = keep;
                    float r = gt[j], i = gt[H + j], n = gt[2 * H + j], M = gt[3 * H + j];
                    float hj = hp ? hp[j] : 0.0f;
                    float dn = g[j] * (1.0f - i) * (1.0f - n * n);
                    float dr = dn * M * r * (1.0f - r);
                    float di = g[j] * (hj - n) * i * (1.0f - i);
                    da[j] = dr, da[H + j] = di, da[2 * H + j] = dn;
                    keep[4 * H + j] = dr, keep[5 * H + j] = di, keep[6 * H + j] = dn, keep[7 * H + j] = dn * r;
                    carry[j] = g[j] * i;
                }
                /* carry += Σ_q (recurrent pre-activation gradient)_q R[q, ·] */
                for (int q = 0; q < s.G * H; q++) {
                    float v = !s.gru ? da[q] : q < 2 * H ? keep[4 * H + q] : keep[7 * H + (q - 2 * H)];
                    if (t > 0 || dhx)
                        for (int k = 0; k < H; k++) carry[k] += v * w.R[(size_t)q * H + k];
                }
                float *dxt = dx + at(s.xl, s.B, s.T, C, b, t, 0);
                for (int c = 0; c < C; c++) {
                    float a = 0.0f;
                    for (int q = 0; q < s.G * H; q++) a += da[q] * w.W[(size_t)q * C + c];
                    dxt[c] = a;
                }
            }
            if (dhx)
                for (int j = 0; j < H; j++) dhx[(size_t)b * H + j] = carry[j];
        }
        reserve_mark(res, 2);
    });
    return CUDNN_STATUS_SUCCESS;
}

/* dw (+)= the weight gradients from the pre-activation gradients BackwardData left. */
cudnnStatus_t cudnnRNNBackwardWeights_v8(cudnnHandle_t h, cudnnRNNDescriptor_t d, cudnnWgradMode_t addGrad,
                                         const int32_t devSeqLengths[], cudnnRNNDataDescriptor_t xd, const void *xv,
                                         cudnnTensorDescriptor_t hd, const void *hxv, cudnnRNNDataDescriptor_t yd,
                                         const void *yv, size_t weightSpaceSize, void *dweightSpace,
                                         size_t workSpaceSize, void *workSpace, size_t reserveSpaceSize,
                                         void *reserveSpace)
{
    rnn_shape s;
    cudnnStatus_t st = rnn_shape_of(d, xd, yd, &s);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    if (weightSpaceSize < rnn_weight_floats(d) * sizeof(float) || reserveSpaceSize < rnn_reserve_floats(s) * sizeof(float))
        return CUDNN_STATUS_BAD_PARAM;
    const char *who = "cudnnRNNBackwardWeights_v8";
    rnn_check_seq(who, devSeqLengths, s);
    check(who, "x", xv, (size_t)s.B * s.T * s.C);
    check(who, "y", yv, (size_t)s.B * s.T * s.H);
    check(who, "dweightSpace", dweightSpace, rnn_weight_floats(d));
    check(who, "reserveSpace", reserveSpace, rnn_reserve_floats(s));
    if (hxv) check(who, "hx", hxv, (size_t)s.B * s.H);
    const float *x = (const float *)xv, *y = (const float *)yv, *hx = (const float *)hxv,
                *res = (const float *)reserveSpace;
    float *dw = (float *)dweightSpace;
    size_t nw = rnn_weight_floats(d);
    emu::enqueue(h->stream, who, [=]() {
        reserve_need(who, res, 2);
        int C = s.C, H = s.H, GH = s.G * H;
        std::vector<float> acc(nw, 0.0f);
        float *dW = acc.data(), *dR = dW + (size_t)GH * C, *dbW = dR + (size_t)GH * H, *dbR = dbW + GH;
        for (int b = 0; b < s.B; b++)
            for (int t = 0; t < s.T; t++) {
                const float *keep = s.gru ? res + ((size_t)t * s.B + b) * 8 * H : res + ((size_t)t * s.B + b) * H;
                const float *xt = x + at(s.xl, s.B, s.T, C, b, t, 0);
                const float *hp = t > 0 ? y + at(s.yl, s.B, s.T, H, b, t - 1, 0) : hx ? hx + (size_t)b * H : NULL;
                for (int q = 0; q < GH; q++) {
                    float aW = s.gru ? keep[4 * H + q] : keep[q];                 /* dr, di, dn */
                    float aR = s.gru && q >= 2 * H ? keep[7 * H + (q - 2 * H)] : aW;   /* dn ⊙ r */
                    for (int c = 0; c < C; c++) dW[(size_t)q * C + c] += aW * xt[c];
                    if (hp)
                        for (int k = 0; k < H; k++) dR[(size_t)q * H + k] += aR * hp[k];
                    dbW[q] += aW;
                    dbR[q] += aR;
                }
            }
        for (size_t i = 0; i < nw; i++) dw[i] = addGrad == CUDNN_WGRAD_MODE_ADD ? dw[i] + acc[i] : acc[i];
    });
    return CUDNN_STATUS_SUCCESS;
}

}   // extern "C"
