/* optim_cuda.cu — fused device kernels for optim/sgd.c and optim/adam.c: one launch per
 * parameter, one thread per element, exactly the CPU rule's operations in its order.
 * fmaf where the CPU uses fmaf (exactly rounded on both), and __fmul_rn/__fadd_rn/
 * __fdiv_rn everywhere else so nvcc cannot contract a product and a sum into an FMA the
 * CPU does not do; sqrtf and / are IEEE-rounded under nvcc's defaults. So a device step
 * is bitwise the CPU step (tests/test_ops_cuda.c checks it). */
#include <cstdlib>
#include <cstring>
#include "core/kernels/cuda.h"
extern "C" {
#include "core/error.h"
#include "core/device.h"
#include "optim/optim.h"
}

// ----------------------------------------------------------------------------
// CUDA kernels

/* The pointers travel as arguments of their own (the emulator checks each against its
 * allocation registry); the scalars in the struct. */
__global__ void sgd_kernel(float *p, float *buf, const float *g, const sp_optim_scalars *sc, sp_sgd_args a)
{
    float neg_lr = sc ? sc->neg_lr : a.neg_lr;   /* device scalars: what a replayed graph must not bake in */
    bool first = sc ? sc->first != 0 : a.first;
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < a.n; j += (size_t)gridDim.x * blockDim.x) {
        float d = a.use_wd ? fmaf(a.wd, p[j], g[j]) : g[j];
        if (a.use_momentum) {
            float b = first ? d : fmaf(a.one_minus_damp, d, __fmul_rn(buf[j], a.momentum));
            buf[j] = b;
            d = a.nesterov ? fmaf(a.momentum, b, d) : b;
        }
        p[j] = fmaf(neg_lr, d, p[j]);
    }
}

__global__ void adam_kernel(float *pp, float *mm, float *vv, const float *gg_, const sp_optim_scalars *sc,
                            sp_adam_args a)
{
    float neg_step_size = sc ? sc->neg_lr : a.neg_step_size;
    float decay_factor = sc ? sc->decay_factor : a.decay_factor;
    float bc2_sqrt = sc ? sc->bc2_sqrt : a.bc2_sqrt;
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < a.n; j += (size_t)gridDim.x * blockDim.x) {
        float p = pp[j];
        float g = a.l2 ? fmaf(a.wd, p, gg_[j]) : gg_[j];
        if (a.decoupled) p = __fmul_rn(p, decay_factor);
        float m = __fmul_rn(mm[j], a.beta1);
        m = fmaf(a.one_minus_beta1, g, m);
        float v = __fmul_rn(vv[j], a.beta2);
        float gg = __fmul_rn(__fmul_rn(a.one_minus_beta2, g), g);
        v = __fadd_rn(v, gg);
        float denom = __fadd_rn(__fdiv_rn(sqrtf(v), bc2_sqrt), a.eps);
        mm[j] = m;
        vv[j] = v;
        pp[j] = __fadd_rn(p, __fdiv_rn(__fmul_rn(neg_step_size, m), denom));
    }
}

// ----------------------------------------------------------------------------
// kernel launchers

static void sgd_cuda(const sp_sgd_args *a)
{
    if (a->n == 0) return;
    sgd_kernel<<<sp_cuda_blocks(a->n, 256), 256, 0, sp_cuda_stream()>>>(a->p, a->buf, a->g, a->dev, *a);
    sp_cuda_check(cudaGetLastError());
}

static void adam_cuda(const sp_adam_args *a)
{
    if (a->n == 0) return;
    adam_kernel<<<sp_cuda_blocks(a->n, 256), 256, 0, sp_cuda_stream()>>>(a->p, a->m, a->v, a->g, a->dev, *a);
    sp_cuda_check(cudaGetLastError());
}

/* Device scalars: a pinned staging copy and the device array; one copy per step on the
 * calling lane. The pinned copy is rewritten only once the previous copy has run. */
typedef struct scalars_buf {
    sp_optim_scalars *host, *dev;
    cudaEvent_t copied;
    bool pending;
} scalars_buf;

static void *scalars_new(int n, const sp_optim_scalars **dev)
{
    scalars_buf *b = (scalars_buf *)sp_xcalloc(1, sizeof *b);
    size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(sp_optim_scalars);
    sp_cuda_check(cudaMallocHost((void **)&b->host, bytes));
    sp_cuda_check(cudaMalloc((void **)&b->dev, bytes));
    sp_cuda_check(cudaMemset(b->dev, 0, bytes));
    sp_cuda_check(cudaEventCreateWithFlags(&b->copied, cudaEventDisableTiming));
    *dev = b->dev;
    return b;
}

static void scalars_upload(void *h, const sp_optim_scalars *src, int n)
{
    scalars_buf *b = (scalars_buf *)h;
    if (b->pending) sp_cuda_wait_event(b->copied);
    memcpy(b->host, src, (size_t)n * sizeof *src);
    cudaStream_t s = sp_cuda_stream();
    sp_cuda_check(cudaMemcpyAsync(b->dev, b->host, (size_t)n * sizeof *src, cudaMemcpyHostToDevice, s));
    sp_cuda_check(cudaEventRecord(b->copied, s));
    b->pending = true;
}

static void scalars_free(void *h)
{
    scalars_buf *b = (scalars_buf *)h;
    sp_cuda_check(cudaDeviceSynchronize());
    sp_cuda_check(cudaEventDestroy(b->copied));
    sp_cuda_check(cudaFreeHost(b->host));
    sp_cuda_check(cudaFree(b->dev));
    free(b);
}

static const sp_optim_device_ops cuda_optim_ops = {sgd_cuda, adam_cuda, scalars_new, scalars_upload, scalars_free};

void sp_optim_cuda_register(void) { sp_optim_register_device(SP_CUDA, &cuda_optim_ops); }
