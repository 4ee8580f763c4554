/* optim_cuda.cu — fused device kernels for optim/sgd.c and optim/adam.c: one launch per
 * parameter, one thread per element, exactly the CPU rule's operations in its order.
 * fmaf where the CPU uses fmaf (exactly rounded on both), and __fmul_rn/__fadd_rn/
 * __fdiv_rn everywhere else so nvcc cannot contract a product and a sum into an FMA the
 * CPU does not do; sqrtf and / are IEEE-rounded under nvcc's defaults. So a device step
 * is bitwise the CPU step (tests/test_ops_cuda.c checks it). */
#include "core/cuda.h"
extern "C" {
#include "core/backend.h"
#include "optim/optim.h"
}

// ----------------------------------------------------------------------------
// CUDA kernels

/* The pointers travel as arguments of their own (the emulator checks each against its
 * allocation registry); the scalars in the struct. */
__global__ void sgd_kernel(float *p, float *buf, const float *g, sp_sgd_args a)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < a.n; j += (size_t)gridDim.x * blockDim.x) {
        float d = a.use_wd ? fmaf(a.wd, p[j], g[j]) : g[j];
        if (a.use_momentum) {
            float b = a.first ? d : fmaf(a.one_minus_damp, d, __fmul_rn(buf[j], a.momentum));
            buf[j] = b;
            d = a.nesterov ? fmaf(a.momentum, b, d) : b;
        }
        p[j] = fmaf(a.neg_lr, d, p[j]);
    }
}

__global__ void adam_kernel(float *pp, float *mm, float *vv, const float *gg_, sp_adam_args a)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < a.n; j += (size_t)gridDim.x * blockDim.x) {
        float p = pp[j];
        float g = a.l2 ? fmaf(a.wd, p, gg_[j]) : gg_[j];
        if (a.decoupled) p = __fmul_rn(p, a.decay_factor);
        float m = __fmul_rn(mm[j], a.beta1);
        m = fmaf(a.one_minus_beta1, g, m);
        float v = __fmul_rn(vv[j], a.beta2);
        float gg = __fmul_rn(__fmul_rn(a.one_minus_beta2, g), g);
        v = __fadd_rn(v, gg);
        float denom = __fadd_rn(__fdiv_rn(sqrtf(v), a.bc2_sqrt), a.eps);
        mm[j] = m;
        vv[j] = v;
        pp[j] = __fadd_rn(p, __fdiv_rn(__fmul_rn(a.neg_step_size, m), denom));
    }
}

// ----------------------------------------------------------------------------
// kernel launchers

static void sgd_cuda(const sp_sgd_args *a)
{
    if (a->n == 0) return;
    sgd_kernel<<<sp_cuda_blocks(a->n, 256), 256, 0, sp_cuda_stream()>>>(a->p, a->buf, a->g, *a);
    sp_cuda_check(cudaGetLastError());
}

static void adam_cuda(const sp_adam_args *a)
{
    if (a->n == 0) return;
    adam_kernel<<<sp_cuda_blocks(a->n, 256), 256, 0, sp_cuda_stream()>>>(a->p, a->m, a->v, a->g, *a);
    sp_cuda_check(cudaGetLastError());
}

static const sp_optim_device_ops cuda_optim_ops = {sgd_cuda, adam_cuda};

void sp_optim_cuda_register(void) { sp_optim_register_device(SP_CUDA, &cuda_optim_ops); }
