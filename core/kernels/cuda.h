/* cuda.h — the CUDA backend (make CUDA=1): device, stream, library handles, memory.
 *
 *   sp_cuda_start(0);                     sp_cuda_init (stream + cuBLAS/cuSPARSE/cuDNN),
 *                                         then every module's twins (cuda_start.h)
 *   sp_model_to_device(m, SP_CUDA);       parameters and their grads move to the GPU
 *   sp_tensor_to_device(&xd, &x);         a batch goes up (xd from sp_tape_tensor_on)
 *   sp_model_forward(m, &tape, sp_tape_input(&tape, &xd));   ops run their CUDA twins
 *
 * Ops launch on sp_cuda_stream(), the stream the backend carries; every launch and
 * library call is followed by a check that names file:line. Per-step device tensors
 * come from a device arena owned by the tape (core/device.h: sp_device_allocator),
 * so a steady-state step performs no cudaMalloc. Usable from C and from .cu files.
 * How to add an op's twin: docs/CUDA.md. */
#ifndef SP_CUDA_H
#define SP_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <cuda_runtime_api.h>
#include <cublas_v2.h>
/* cusparse.h marks its legacy API (bsrsv2, csric02, ...) deprecated in a way a C compiler
 * reports at every include under -Wall; scanprop uses only the generic API. */
#ifndef DISABLE_CUSPARSE_DEPRECATED
#define DISABLE_CUSPARSE_DEPRECATED
#endif
#include <cusparse.h>
#include <cudnn.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/model.h"

/* One lane of work: a stream and library handles bound to it once, at init. Each host
 * thread issues to its own lane (sp_cuda_set_lane), so two threads never share a handle
 * (a shared handle with SetStream-then-call would race). Lane 0's stream has the
 * device's greatest priority, lane 1's its least (the ooo engine's δ and δW streams). */
#define SP_CUDA_LANES 2
typedef struct sp_cuda_lane {
    cudaStream_t stream;
    cublasHandle_t cublas;
    cusparseHandle_t cusparse;
    cudnnHandle_t cudnn;
} sp_cuda_lane;

typedef struct sp_cuda_ctx {
    int device;
    sp_cuda_lane lanes[SP_CUDA_LANES];
} sp_cuda_ctx;

/* GPUs visible; 0 with *why set to the runtime's reason when there are none. */
int sp_cuda_device_count(const char **why);
/* Select the GPU, create the lanes, register the device allocator and graph support.
 * The modules above core register their twins (op kernels, optimizer updates, the ooo
 * executor) themselves: sp_cuda_start (cli/cuda_start.h) does all of it.
 * Idempotent for the same id; sp_fail when there is no such device. */
void sp_cuda_init(int device_id);
/* The context; sp_fail if sp_cuda_init was not called. */
const sp_cuda_ctx *sp_cuda(void);
/* The calling thread's lane (lane 0 until sp_cuda_set_lane), and its stream. */
const sp_cuda_lane *sp_cuda_current(void);
cudaStream_t sp_cuda_stream(void);
/* Ops issued by this host thread go to lane (0 .. SP_CUDA_LANES-1) from now on. */
void sp_cuda_set_lane(int lane);
/* Wait for everything queued on every lane. */
void sp_cuda_synchronize(void);
/* Waits that first ask (cudaStreamQuery / cudaEventQuery) and block only when the work
 * is not done yet: a stream, an event, every stream (sp_cuda_wait_device: the lanes and
 * the copy stream, or the whole device once a stream the backend does not know of
 * exists — sp_cuda_foreign_stream, called by NCCL's communicators). */
void sp_cuda_wait_stream(cudaStream_t s);
void sp_cuda_wait_event(cudaEvent_t e);
void sp_cuda_wait_device(void);
void sp_cuda_foreign_stream(void);
/* Every lane's work on t's device memory has been joined into lane 0 (the ooo engine's
 * join): t's next reset need only wait for lane 0, not for the whole device — so the
 * other lane may still run another tape's work (the previous backward's tail). */
void sp_cuda_arena_joined(sp_tape *t);

/* Persistent device tensor, zeroed; sp_tensor_free releases it. */
sp_tensor sp_cuda_tensor_new(int ndim, const int *shape);
/* Copies between a host and a device tensor of equal numel; they return once the data
 * has arrived (after the work queued before them on the current stream). */
void sp_tensor_to_device(sp_tensor *dst, const sp_tensor *src);
void sp_tensor_to_host(sp_tensor *dst, const sp_tensor *src);
/* Move parameter values and grads of a layer / of a whole model (loss included) to d. */
void sp_layer_to_device(sp_layer *l, sp_device d);
void sp_model_to_device(sp_model *m, sp_device d);
/* sp_fail naming the layer unless all its parameters live on the GPU (a CUDA twin is
 * about to hand their pointers to a kernel). */
void sp_cuda_require_params(const sp_layer *l);

/* Row-major C[M×N] = alpha·op(A)·op(B) + beta·C on cuBLAS, device pointers, like sp_gemm;
 * stream must be a lane's stream (its handle is used). */
void sp_cuda_gemm(cudaStream_t stream, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                  const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* Blocks for n elements at block threads each, capped for grid-stride kernels. */
static inline unsigned sp_cuda_blocks(size_t n, unsigned block)
{
    size_t g = (n + block - 1) / block;
    return g == 0 ? 1u : g > (1u << 20) ? (1u << 20) : (unsigned)g;
}

/* Check a CUDA runtime / cuBLAS / cuSPARSE / cuDNN status; on failure one line naming
 * the call and file:line, exit 2 (sp_fail). After a kernel launch:
 * sp_cuda_check(cudaGetLastError()). */
#define sp_cuda_check(call) sp_cuda_check_at((call), #call, __FILE__, __LINE__)
#define sp_cublas_check(call) sp_cublas_check_at((call), #call, __FILE__, __LINE__)
#define sp_cusparse_check(call) sp_cusparse_check_at((call), #call, __FILE__, __LINE__)
#define sp_cudnn_check(call) sp_cudnn_check_at((call), #call, __FILE__, __LINE__)
void sp_cuda_check_at(cudaError_t e, const char *call, const char *file, int line);
void sp_cublas_check_at(cublasStatus_t s, const char *call, const char *file, int line);
void sp_cusparse_check_at(cusparseStatus_t s, const char *call, const char *file, int line);
void sp_cudnn_check_at(cudnnStatus_t s, const char *call, const char *file, int line);

#ifdef __cplusplus
}
#endif

#endif
