/* cuda_start.h — the CUDA device for the whole library (make CUDA=1 only).
 *
 * core/kernels/cuda.h's sp_cuda_init starts the backend alone: device, lanes, library
 * handles, allocator, graphs. Each module above core registers its own device twins:
 * layers/ its ops' kernels, optim/ its fused updates, schedulers/backward/ the ooo
 * executor. sp_cuda_start does both, in that order; the runner (--device cuda) and the
 * CUDA test suites call it, as should a program that moves a model to the GPU itself. */
#ifndef SP_CUDA_START_H
#define SP_CUDA_START_H

#ifdef __cplusplus
extern "C" {
#endif

/* sp_cuda_init(device_id), then every module's twins. Idempotent for the same id;
 * sp_fail when there is no such device. */
void sp_cuda_start(int device_id);

#ifdef __cplusplus
}
#endif

#endif
