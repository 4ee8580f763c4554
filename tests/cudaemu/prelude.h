/* prelude.h — force-included by nvcc-emu into every .cu it compiles for the host.
 *
 * Gives CUDA C++ a host meaning: __global__/__device__ functions are plain functions,
 * kernel<<<grid, block, shmem, stream>>>(args) (rewritten by nvcc-emu into
 * emu::make_launcher(kernel, ...)(args)) converts the arguments to the kernel's
 * parameter types, checks every pointer among them against the allocation registry
 * and queues the launch on the stream; threadIdx/blockIdx/blockDim/gridDim are
 * globals the executor sets per emulated thread; __shared__ variables live in one
 * linker section that the executor fills with NaN before every block; __syncthreads
 * is a real barrier (a block's threads run as fibers when the kernel synchronises). */
#ifndef SP_CUDAEMU_PRELUDE_H
#define SP_CUDAEMU_PRELUDE_H

#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>
#include <cuda_runtime_api.h>
#include "emu.h"

#undef __shared__
#define __shared__ static __attribute__((section("cudaemu_shared")))
#define __syncthreads() ::emu::syncthreads()
#define __threadfence() ((void)0)
#define __ldg(p) (*(p))
#define __expf expf
#define __logf logf
#define __fdividef(a, b) ((a) / (b))
#define rsqrtf(x) (1.0f / sqrtf(x))
/* Round-to-nearest intrinsics: host float arithmetic is already exactly that (x86-64
 * without -mfma never contracts). */
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }

/* Blocks run one at a time and a block's threads one at a time, so an atomic is a
 * plain read-modify-write; it still returns the old value as CUDA's does. */
template <typename T> static inline T atomicAdd(T *p, T v) { T old = *p; *p = old + v; return old; }
template <typename T> static inline T atomicMax(T *p, T v) { T old = *p; *p = old > v ? old : v; return old; }

namespace emu {

template <typename T> static inline void check_arg(const char *k, const char *f, int l, int i, const T &v)
{
    if constexpr (std::is_pointer_v<T>) check_kernel_ptr(k, f, l, i, (const void *)v);
}

template <typename... P> struct launcher {
    void (*kernel)(P...);
    const char *name, *file;
    int line;
    dim3 grid, block;
    size_t shmem;
    cudaStream_t stream;

    template <typename... A> void operator()(A &&...a) const
    {
        static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong number of arguments");
        std::tuple<std::decay_t<P>...> args(static_cast<std::decay_t<P>>(a)...);
        if (!launch_config_ok(grid, block, shmem)) return;
        std::apply([&](const auto &...v) { int i = 0; (check_arg(name, file, line, i++, v), ...); }, args);
        void (*k)(P...) = kernel;
        launch(name, file, line, reinterpret_cast<const void *>(k), grid, block, shmem, stream,
               [k, args]() { std::apply(k, args); });
    }
};

template <typename... P>
static inline launcher<P...> make_launcher(void (*k)(P...), const char *name, const char *file, int line, dim3 grid,
                                           dim3 block, size_t shmem = 0, cudaStream_t stream = 0)
{
    return launcher<P...>{k, name, file, line, grid, block, shmem, stream};
}

}   // namespace emu

#endif
