/* simd.h — SP_AVX2_CLONES: build a plain-C loop twice, for the baseline x86-64 (SSE2, the
 * project's compile target) and for AVX2, and let the loader pick by the CPU (GCC's
 * target_clones: an ifunc resolved once at start-up). For the memory-and-arithmetic
 * passes the compiler vectorises well by itself (batch norm's sums and passes, ReLU,
 * add): twice the vector width, no intrinsics.
 *
 * The bits do not depend on the clone: AVX2 alone adds no fused multiply-add, and ISO C
 * mode (-std=c11) keeps -ffp-contract=off, so both clones round every operation as the
 * source says. Elsewhere (clang, which the fuzz and wasm builds use, or another target)
 * the macro is empty and the baseline build runs. */
#ifndef SP_SIMD_H
#define SP_SIMD_H

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define SP_AVX2_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define SP_AVX2_CLONES
#endif

#endif
