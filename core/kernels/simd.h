/* simd.h — a plain-C loop built twice, for the baseline x86-64 (SSE2, the project's
 * compile target) and for a wider instruction set, the loader picking one by the CPU
 * (GCC's target_clones: an ifunc resolved once at start-up). Elsewhere (clang, which the
 * fuzz and wasm builds use, or another target) the macros are empty and the baseline
 * build runs.
 *
 * SP_AVX2_CLONES: for the memory-and-arithmetic passes the compiler vectorises well by
 * itself (batch norm's sums and passes, ReLU, add): twice the vector width, no
 * intrinsics. The bits do not depend on the clone: AVX2 alone adds no fused
 * multiply-add, and ISO C mode (-std=c11) keeps -ffp-contract=off, so both clones round
 * every operation as the source says.
 *
 * SP_FMA_CLONES: for loops that call fmaf (the optimizers' updates, optim/optim.h): one
 * instruction on FMA hardware instead of a libm call, the same exactly rounded result. */
#ifndef SP_SIMD_H
#define SP_SIMD_H

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define SP_AVX2_CLONES __attribute__((target_clones("avx2", "default")))
#define SP_FMA_CLONES __attribute__((target_clones("fma", "default")))
#else
#define SP_AVX2_CLONES
#define SP_FMA_CLONES
#endif

#endif
