/* maxpool2d_cuda.cu — the CUDA twin of layers/maxpool2d.c: NCHW max pooling, padding as
 * −inf, floor mode; the first maximum in window order wins and a NaN wins, as on the CPU.
 *   forward: one thread per output; saves the argmax (h·W + w, int32) on the device.
 *   δ:       one thread per (b, c) plane: zero it, then add dy into dx[argmax] in output
 *            order — the CPU op's scatter order, so overlapping windows add up bit for bit. */
#include <math.h>
#include <stdint.h>
#include "core/kernels/cuda.h"
extern "C" {
#include "core/device.h"
#include "core/tape.h"
#include "layers/layers.h"
#include "layers/pool2d.h"
}

typedef struct pool_geom {
    int H, W, Ho, Wo, k, stride, pad;
} pool_geom;

// ----------------------------------------------------------------------------
// CUDA kernels

__global__ void pool_forward_kernel(float *y, int32_t *arg, const float *x, pool_geom g, size_t n)
{
    for (size_t o = blockIdx.x * (size_t)blockDim.x + threadIdx.x; o < n; o += (size_t)gridDim.x * blockDim.x) {
        int j = (int)(o % g.Wo), i = (int)(o / g.Wo % g.Ho);
        size_t plane = o / ((size_t)g.Ho * g.Wo);
        const float *xp = x + plane * g.H * g.W;
        int h0 = i * g.stride - g.pad, h1 = h0 + g.k, w0 = j * g.stride - g.pad, w1 = w0 + g.k;
        h0 = h0 < 0 ? 0 : h0;
        h1 = h1 > g.H ? g.H : h1;
        w0 = w0 < 0 ? 0 : w0;
        w1 = w1 > g.W ? g.W : w1;
        int best = h0 * g.W + w0;
        float m = -INFINITY;
        for (int h = h0; h < h1; h++)
            for (int w = w0; w < w1; w++) {
                float v = xp[h * g.W + w];
                if (v > m || v != v) {
                    m = v;
                    best = h * g.W + w;
                }
            }
        y[o] = m;
        arg[o] = best;
    }
}

__global__ void pool_backward_kernel(float *dx, const float *dy, const int32_t *arg, pool_geom g, size_t planes)
{
    size_t in_plane = (size_t)g.H * g.W, out_plane = (size_t)g.Ho * g.Wo;
    for (size_t u = blockIdx.x * (size_t)blockDim.x + threadIdx.x; u < planes; u += (size_t)gridDim.x * blockDim.x) {
        float *d = dx + u * in_plane;
        for (size_t i = 0; i < in_plane; i++) d[i] = 0.0f;
        for (size_t o = 0; o < out_plane; o++) d[arg[u * out_plane + o]] += dy[u * out_plane + o];
    }
}

// ----------------------------------------------------------------------------
// kernel launchers

static void pool_forward_cuda(float *y, int32_t *arg, const float *x, pool_geom g, size_t n, cudaStream_t stream)
{
    pool_forward_kernel<<<sp_cuda_blocks(n, 256), 256, 0, stream>>>(y, arg, x, g, n);
    sp_cuda_check(cudaGetLastError());
}

static void pool_backward_cuda(float *dx, const float *dy, const int32_t *arg, pool_geom g, size_t planes,
                               cudaStream_t stream)
{
    pool_backward_kernel<<<sp_cuda_blocks(planes, 64), 64, 0, stream>>>(dx, dy, arg, g, planes);
    sp_cuda_check(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// the op

static pool_geom geom_of(const sp_node *n)
{
    const sp_tensor *x = sp_node_x(n);
    const sp_pool2d_layer *l = SP_POOL2D(n);
    pool_geom g = {x->shape[2], x->shape[3], n->out.shape[2], n->out.shape[3], l->k, l->stride, l->pad};
    return g;
}

static void pool_cuda_forward(sp_node *n)
{
    int32_t *arg = (int32_t *)sp_tape_alloc_on(n->tape, SP_CUDA, n->out.numel * sizeof(int32_t));
    n->saved = arg;
    pool_forward_cuda(n->out.data, arg, sp_node_x(n)->data, geom_of(n), n->out.numel, sp_cuda_stream());
}

static void pool_cuda_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    size_t planes = (size_t)dx->shape[0] * dx->shape[1];
    pool_backward_cuda(dx->data, dy->data, (const int32_t *)n->saved, geom_of(n), planes, sp_cuda_stream());
}

/* Jᵀ (the bppsa engine on the device): the CPU op's window pattern (row (c, h, w) lists
 * the windows (i, j) that cover it, in order), 1 where (h, w) is the window's argmax.
 * One thread per input row: it zeroes its row, then sets the entries whose window
 * chose it — every entry written by one thread, no atomics. */
__device__ void pool_window_range(int x, int k, int s, int p, int out, int *lo, int *hi)
{
    int l = x + p - k + 1;   /* windows i with i·s ≤ x + p < i·s + k */
    *lo = l <= 0 ? 0 : (l + s - 1) / s;
    int h = (x + p) / s + 1;
    *hi = h < out ? h : out;
    if (*hi < *lo) *hi = *lo;
}

__global__ void pool_jt_kernel(float *data, size_t stride, const int32_t *indptr, const int32_t *arg, pool_geom g,
                               int C, int b0, int nb)
{
    size_t rows = (size_t)C * g.H * g.W, n = (size_t)nb * rows;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n; k += (size_t)gridDim.x * blockDim.x) {
        size_t b = k / rows, row = k % rows;
        int c = (int)(row / ((size_t)g.H * g.W)), h = (int)(row / g.W % g.H), w = (int)(row % g.W);
        int i_lo, i_hi, j_lo, j_hi;
        pool_window_range(h, g.k, g.stride, g.pad, g.Ho, &i_lo, &i_hi);
        pool_window_range(w, g.k, g.stride, g.pad, g.Wo, &j_lo, &j_hi);
        float *d = data + b * stride + indptr[row];
        const int32_t *a = arg + ((size_t)(b0 + b) * C + c) * g.Ho * g.Wo;
        for (int i = i_lo; i < i_hi; i++)
            for (int j = j_lo; j < j_hi; j++)
                d[(i - i_lo) * (j_hi - j_lo) + (j - j_lo)] = a[i * g.Wo + j] == h * g.W + w ? 1.0f : 0.0f;
    }
}

static void pool_jt_launch(const sp_node *n, const sp_csr *jt, size_t stride, int b0, int nb)
{
    pool_geom g = geom_of(n);
    int C = sp_node_x(n)->shape[1];
    cudaStream_t st = sp_cuda_stream();
    pool_jt_kernel<<<sp_cuda_blocks((size_t)nb * jt->rows, 128), 128, 0, st>>>(jt->data, stride, jt->indptr,
                                                                                (const int32_t *)n->saved, g, C, b0, nb);
    sp_cuda_check(cudaGetLastError());
}

static void pool_cuda_jt_values(const sp_node *n, int i, int b, sp_csr *jt) { pool_jt_launch(n, jt, 0, b, 1); }

static void pool_cuda_jt_values_all(const sp_node *n, int i, const sp_csr *jt, size_t stride)
{
    pool_jt_launch(n, jt, stride, 0, n->out.shape[0]);
}

static sp_kernels pool_cuda_kernels;

extern "C" void sp_maxpool2d_cuda_register(void)
{
    pool_cuda_kernels.forward = pool_cuda_forward;
    pool_cuda_kernels.backward_input = pool_cuda_backward_input;
    pool_cuda_kernels.jt_values = pool_cuda_jt_values;
    pool_cuda_kernels.jt_values_all = pool_cuda_jt_values_all;
    sp_op_register_kernels(&sp_op_maxpool2d, SP_CUDA, &pool_cuda_kernels);
}
