/* emu.h — the CUDA emulator's internal interface (tests/cudaemu/, make test-cuda-emu).
 *
 * Shared by the kernel prelude (prelude.h, force-included into every .cu compiled by
 * nvcc-emu) and the replacement libraries (cudart.cc, cublas.cc, cudnn.cc,
 * cusparse.cc). Everything the emulator does to device work goes through a stream
 * queue: a kernel launch, a copy, a memset or a library routine is queued as a closure
 * and runs only when the program synchronises (cudaStreamSynchronize, a blocking
 * cudaMemcpy, cudaDeviceSynchronize, cudaFree, an event wait), in stream order and
 * honouring cudaStreamWaitEvent. Misuse the real driver would let pass silently
 * (a host pointer handed to a kernel, a copy past an allocation, a GEMM whose extents
 * leave its matrix) aborts with one line starting "cudaemu:". */
#ifndef SP_CUDAEMU_H
#define SP_CUDAEMU_H

#include <cstddef>
#include <functional>
#include <cuda_runtime_api.h>

namespace emu {

/* One line on stderr, then abort (a crash in a Criterion worker, never exit 2). */
[[noreturn]] void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Kernel pointer argument: NULL, or inside (or one past) a live device allocation. */
void check_kernel_ptr(const char *kernel, const char *file, int line, int arg, const void *p);
/* [p, p + bytes) lies inside one live device allocation; who names the caller. */
void check_device_range(const char *who, const void *p, size_t bytes);

/* Queue a kernel launch (config already validated by launch_config_ok). body runs one
 * thread with threadIdx/blockIdx set; key identifies the kernel (sync detection). */
bool launch_config_ok(dim3 grid, dim3 block, size_t shmem);
void launch(const char *kernel, const char *file, int line, const void *key, dim3 grid, dim3 block,
            size_t shmem, cudaStream_t s, std::function<void()> body);
/* Queue library work (cuBLAS/cuDNN/cuSPARSE routines) on stream s. */
void enqueue(cudaStream_t s, const char *what, std::function<void()> fn);
/* Dynamic shared memory of the running block (extern __shared__). */
void *dynamic_shared();
void syncthreads();
void set_error(cudaError_t e);

}   // namespace emu

/* The builtins, set by the executor before each emulated thread runs. */
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

#endif
