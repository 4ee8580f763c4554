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
 * g = k / (K/G). */
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <cudnn.h>
#include "emu.h"

struct cudnnContext {
    cudaStream_t stream = nullptr;
};
struct cudnnTensorStruct {
    int n = 0, c = 0, h = 0, w = 0;
    bool set = false;
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

}   // extern "C"
