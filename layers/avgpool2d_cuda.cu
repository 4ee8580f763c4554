/* avgpool2d_cuda.cu — the CUDA twins of layers/avgpool2d.c: avgpool2d(k, stride, pad)
 * (padding counts as zeros) and global_avgpool2d ([B, C, H, W] → [B, C]).
 *   avgpool2d forward: one thread per output, the window summed in the CPU op's order
 *             (rows a, then columns b, padding skipped), times 1/k².
 *   avgpool2d δ: one thread per input element, dy summed over the windows containing it
 *             in the CPU op's order (i, then j), times 1/k².
 *   global forward: one thread per (b, c) map, its P = H·W values summed in order, / P.
 *   global δ: one thread per input element, dy[b, c] / P.
 * Every sum in the CPU's order with __fadd_rn/__fmul_rn: bitwise equal to the CPU op.
 * Jᵀ: the CPU op's pattern, every value the constant 1/k² (1/P), one launch. */
#include "core/kernels/cuda.h"
extern "C" {
#include "core/device.h"
#include "core/tape.h"
#include "layers/layers.h"
#include "layers/pool2d.h"
}

typedef struct avg_geom {
    int H, W, Ho, Wo, k, stride, pad;
} avg_geom;

// ----------------------------------------------------------------------------
// CUDA kernels

__global__ void avgpool_forward_kernel(float *y, const float *x, avg_geom g, float inv, size_t n)
{
    for (size_t o = blockIdx.x * (size_t)blockDim.x + threadIdx.x; o < n; o += (size_t)gridDim.x * blockDim.x) {
        int j = (int)(o % g.Wo), i = (int)(o / g.Wo % g.Ho);
        const float *xp = x + o / ((size_t)g.Ho * g.Wo) * g.H * g.W;
        float s = 0.0f;
        for (int a = 0; a < g.k; a++)
            for (int b = 0; b < g.k; b++) {
                int h = i * g.stride - g.pad + a, w = j * g.stride - g.pad + b;
                if (h >= 0 && h < g.H && w >= 0 && w < g.W) s = __fadd_rn(s, xp[h * g.W + w]);
            }
        y[o] = __fmul_rn(s, inv);
    }
}

/* Windows i with i·s ≤ x + p < i·s + k, clipped to [0, out) (sp_window_range's rule). */
__device__ void avgpool_window_range(int x, int k, int s, int p, int out, int *lo, int *hi)
{
    int l = x + p - k + 1;
    *lo = l <= 0 ? 0 : (l + s - 1) / s;
    int h = (x + p) / s + 1;
    *hi = h < out ? h : out;
    if (*hi < *lo) *hi = *lo;
}

__global__ void avgpool_backward_kernel(float *dx, const float *dy, avg_geom g, float inv, size_t n)
{
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        int w = (int)(e % g.W), h = (int)(e / g.W % g.H);
        const float *d = dy + e / ((size_t)g.H * g.W) * g.Ho * g.Wo;
        int i_lo, i_hi, j_lo, j_hi;
        avgpool_window_range(h, g.k, g.stride, g.pad, g.Ho, &i_lo, &i_hi);
        avgpool_window_range(w, g.k, g.stride, g.pad, g.Wo, &j_lo, &j_hi);
        float s = 0.0f;
        for (int i = i_lo; i < i_hi; i++)
            for (int j = j_lo; j < j_hi; j++) s = __fadd_rn(s, d[i * g.Wo + j]);
        dx[e] = __fmul_rn(s, inv);
    }
}

__global__ void gap_forward_kernel(float *y, const float *x, size_t P, size_t n)
{
    for (size_t r = blockIdx.x * (size_t)blockDim.x + threadIdx.x; r < n; r += (size_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (size_t p = 0; p < P; p++) s = __fadd_rn(s, x[r * P + p]);
        y[r] = __fdiv_rn(s, (float)P);
    }
}

__global__ void gap_backward_kernel(float *dx, const float *dy, size_t P, size_t n)
{
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x)
        dx[e] = __fdiv_rn(dy[e / P], (float)P);
}

/* Every stored value of nb samples' Jᵀ (nnz each, sample b at data + b·stride) = v. */
__global__ void avgpool_jt_kernel(float *data, size_t stride, size_t nnz, int nb, float v)
{
    size_t n = (size_t)nb * nnz;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        data[i / nnz * stride + i % nnz] = v;
}

// ----------------------------------------------------------------------------
// kernel launchers

static void avgpool_forward_cuda(float *y, const float *x, avg_geom g, size_t n, cudaStream_t stream)
{
    float inv = 1.0f / (float)(g.k * g.k);
    avgpool_forward_kernel<<<sp_cuda_blocks(n, 256), 256, 0, stream>>>(y, x, g, inv, n);
    sp_cuda_check(cudaGetLastError());
}

static void avgpool_backward_cuda(float *dx, const float *dy, avg_geom g, size_t n, cudaStream_t stream)
{
    float inv = 1.0f / (float)(g.k * g.k);
    avgpool_backward_kernel<<<sp_cuda_blocks(n, 256), 256, 0, stream>>>(dx, dy, g, inv, n);
    sp_cuda_check(cudaGetLastError());
}

static void gap_forward_cuda(float *y, const float *x, size_t P, size_t n, cudaStream_t stream)
{
    gap_forward_kernel<<<sp_cuda_blocks(n, 128), 128, 0, stream>>>(y, x, P, n);
    sp_cuda_check(cudaGetLastError());
}

static void gap_backward_cuda(float *dx, const float *dy, size_t P, size_t n, cudaStream_t stream)
{
    gap_backward_kernel<<<sp_cuda_blocks(n, 256), 256, 0, stream>>>(dx, dy, P, n);
    sp_cuda_check(cudaGetLastError());
}

static void jt_fill_cuda(const sp_csr *jt, size_t stride, int nb, float v)
{
    size_t nnz = (size_t)jt->nnz;
    if (nnz == 0) return;
    avgpool_jt_kernel<<<sp_cuda_blocks((size_t)nb * nnz, 256), 256, 0, sp_cuda_stream()>>>(jt->data, stride, nnz, nb,
                                                                                             v);
    sp_cuda_check(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// avgpool2d

static avg_geom geom_of(const sp_node *n)
{
    const sp_tensor *x = sp_node_x(n);
    const sp_pool2d_layer *l = SP_POOL2D(n);
    avg_geom g = {x->shape[2], x->shape[3], n->out.shape[2], n->out.shape[3], l->k, l->stride, l->pad};
    return g;
}

static void avg_cuda_forward(sp_node *n)
{
    avgpool_forward_cuda(n->out.data, sp_node_x(n)->data, geom_of(n), n->out.numel, sp_cuda_stream());
}

static void avg_cuda_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    avgpool_backward_cuda(dx->data, dy->data, geom_of(n), dx->numel, sp_cuda_stream());
}

static float avg_jt_value(const sp_node *n)
{
    avg_geom g = geom_of(n);
    return 1.0f / (float)(g.k * g.k);
}

static void avg_cuda_jt_values(const sp_node *n, int i, int b, sp_csr *jt) { jt_fill_cuda(jt, 0, 1, avg_jt_value(n)); }

static void avg_cuda_jt_values_all(const sp_node *n, int i, const sp_csr *jt, size_t stride)
{
    jt_fill_cuda(jt, stride, n->out.shape[0], avg_jt_value(n));
}

// ----------------------------------------------------------------------------
// global_avgpool2d

static size_t plane(const sp_node *n) { return (size_t)sp_node_x(n)->shape[2] * sp_node_x(n)->shape[3]; }

static void gap_cuda_forward(sp_node *n)
{
    gap_forward_cuda(n->out.data, sp_node_x(n)->data, plane(n), n->out.numel, sp_cuda_stream());
}

static void gap_cuda_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    gap_backward_cuda(dx->data, dy->data, plane(n), dx->numel, sp_cuda_stream());
}

static void gap_cuda_jt_values(const sp_node *n, int i, int b, sp_csr *jt)
{
    jt_fill_cuda(jt, 0, 1, 1.0f / (float)plane(n));
}

static void gap_cuda_jt_values_all(const sp_node *n, int i, const sp_csr *jt, size_t stride)
{
    jt_fill_cuda(jt, stride, n->out.shape[0], 1.0f / (float)plane(n));
}

static sp_kernels avg_cuda_kernels, gap_cuda_kernels;

extern "C" void sp_avgpool2d_cuda_register(void)
{
    avg_cuda_kernels.forward = avg_cuda_forward;
    avg_cuda_kernels.backward_input = avg_cuda_backward_input;
    avg_cuda_kernels.jt_values = avg_cuda_jt_values;
    avg_cuda_kernels.jt_values_all = avg_cuda_jt_values_all;
    sp_op_register_kernels(&sp_op_avgpool2d, SP_CUDA, &avg_cuda_kernels);

    gap_cuda_kernels.forward = gap_cuda_forward;
    gap_cuda_kernels.backward_input = gap_cuda_backward_input;
    gap_cuda_kernels.jt_values = gap_cuda_jt_values;
    gap_cuda_kernels.jt_values_all = gap_cuda_jt_values_all;
    sp_op_register_kernels(&sp_op_global_avgpool2d, SP_CUDA, &gap_cuda_kernels);
}
