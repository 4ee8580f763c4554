/* gemm_small.c — tiny row-major SGEMM for the recurrent ops (see gemm_small.h).
 *
 * op(B) [K×N] is read in place (op(B) = Bᵀ is first copied into a panel of K rows).
 * C is computed in blocks of up to 8 (AVX-512) or 4 rows × 16 columns: each block's
 * accumulators live in registers while k runs 0 … K−1, with one masked load of a row of
 * op(B) and one broadcast of op(A)[i][k] per row and k. The block's last columns are
 * loaded and stored under a mask, so nothing outside op(B) and C[M×N] is touched. */
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "core/kernels/gemm_small.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SP_SMALL_X86 1
#endif

typedef struct small_args {
    bool ta;
    int M, N, K, lda, ldc, ldp;   /* ldp: row stride of panel */
    float alpha, beta;
    const float *A;
    const float *panel;
    float *C;
} small_args;

#define A_AT(g, ta, i, k) ((ta) ? (g)->A[(size_t)(k) * (g)->lda + (i)] : (g)->A[(size_t)(i) * (g)->lda + (k)])

/* Baseline: the same blocks and order of summation in plain C. */
static void small_generic(const small_args *g)
{
    for (int i = 0; i < g->M; i++)
        for (int j = 0; j < g->N; j++) {
            float acc = 0.0f;
            for (int k = 0; k < g->K; k++) acc += A_AT(g, g->ta, i, k) * g->panel[(size_t)k * g->ldp + j];
            float *c = g->C + (size_t)i * g->ldc + j;
            *c = g->beta == 0.0f ? g->alpha * acc : g->alpha * acc + g->beta * *c;
        }
}

#ifdef SP_SMALL_X86

/* ---- AVX-512: blocks of 8 rows, one zmm per row, masked stores for the last columns.
 * Eight independent accumulators hide the FMA latency (4 cycles, 2 per cycle). */

__attribute__((target("avx512f"), always_inline)) static inline void block512(const small_args *g, bool TA, int i0, int MR,
                                                                             int j0)
{
    __m512 acc[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) acc[r] = _mm512_setzero_ps();
    int left = g->N - j0;
    __mmask16 m = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
    for (int k = 0; k < g->K; k++) {
        __m512 b = _mm512_maskz_loadu_ps(m, g->panel + (size_t)k * g->ldp + j0);
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(A_AT(g, TA, i0 + r, k)), b, acc[r]);
    }
    __m512 alpha = _mm512_set1_ps(g->alpha), beta = _mm512_set1_ps(g->beta);
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
        float *c = g->C + (size_t)(i0 + r) * g->ldc + j0;
        __m512 v = _mm512_mul_ps(alpha, acc[r]);
        if (g->beta != 0.0f) v = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(m, c), v);
        _mm512_mask_storeu_ps(c, m, v);
    }
}

__attribute__((target("avx512f"), always_inline)) static inline void sweep512(const small_args *g, bool TA)
{
    for (int j0 = 0; j0 < g->N; j0 += 16) {
        int i0 = 0;
        for (; i0 + 8 <= g->M; i0 += 8) block512(g, TA, i0, 8, j0);
        switch (g->M - i0) {   /* constant row counts and TA: every loop over r unrolls */
        case 7: block512(g, TA, i0, 7, j0); break;
        case 6: block512(g, TA, i0, 6, j0); break;
        case 5: block512(g, TA, i0, 5, j0); break;
        case 4: block512(g, TA, i0, 4, j0); break;
        case 3: block512(g, TA, i0, 3, j0); break;
        case 2: block512(g, TA, i0, 2, j0); break;
        case 1: block512(g, TA, i0, 1, j0); break;
        default: break;
        }
    }
}

__attribute__((target("avx512f"))) static void small_avx512(const small_args *g)
{
    if (g->ta)
        sweep512(g, true);
    else
        sweep512(g, false);
}

/* ---- AVX2 + FMA: two ymm per row of the block ------------------------------------ */

__attribute__((target("avx2,fma"), always_inline)) static inline void block256(const small_args *g, bool TA, int i0, int MR,
                                                                              int j0)
{
    __m256 lo[4], hi[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) lo[r] = hi[r] = _mm256_setzero_ps();
    int left = g->N - j0;
    __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(left), lane);
    __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(left - 8), lane);
    for (int k = 0; k < g->K; k++) {
        const float *p = g->panel + (size_t)k * g->ldp + j0;
        __m256 b0 = _mm256_maskload_ps(p, m0), b1 = _mm256_maskload_ps(p + 8, m1);
#pragma GCC unroll 4
        for (int r = 0; r < MR; r++) {
            __m256 a = _mm256_set1_ps(A_AT(g, TA, i0 + r, k));
            lo[r] = _mm256_fmadd_ps(a, b0, lo[r]);
            hi[r] = _mm256_fmadd_ps(a, b1, hi[r]);
        }
    }
    __m256 alpha = _mm256_set1_ps(g->alpha), beta = _mm256_set1_ps(g->beta);
#pragma GCC unroll 4
    for (int r = 0; r < MR; r++) {
        float *c = g->C + (size_t)(i0 + r) * g->ldc + j0;
        __m256 v0 = _mm256_mul_ps(alpha, lo[r]), v1 = _mm256_mul_ps(alpha, hi[r]);
        if (g->beta != 0.0f) {
            v0 = _mm256_fmadd_ps(beta, _mm256_maskload_ps(c, m0), v0);
            v1 = _mm256_fmadd_ps(beta, _mm256_maskload_ps(c + 8, m1), v1);
        }
        _mm256_maskstore_ps(c, m0, v0);
        _mm256_maskstore_ps(c + 8, m1, v1);
    }
}

__attribute__((target("avx2,fma"), always_inline)) static inline void sweep256(const small_args *g, bool TA)
{
    for (int j0 = 0; j0 < g->N; j0 += 16) {
        int i0 = 0;
        for (; i0 + 4 <= g->M; i0 += 4) block256(g, TA, i0, 4, j0);
        switch (g->M - i0) {   /* constant row counts and TA: every loop over r unrolls */
        case 3: block256(g, TA, i0, 3, j0); break;
        case 2: block256(g, TA, i0, 2, j0); break;
        case 1: block256(g, TA, i0, 1, j0); break;
        default: break;
        }
    }
}

__attribute__((target("avx2,fma"))) static void small_avx2(const small_args *g)
{
    if (g->ta)
        sweep256(g, true);
    else
        sweep256(g, false);
}

#endif /* SP_SMALL_X86 */

typedef void (*small_fn)(const small_args *);

/* oneDNN's DNNL_MAX_CPU_ISA caps this kernel's variant too, so one variable makes the
 * whole process compute like an older CPU (bench/run.sh's AVX2 runs): "AVX2"… keeps the
 * AVX2 variant at most, "SSE41" and lower the baseline; unset, ALL or AVX512…: any. */
static int isa_cap(void)
{
    const char *v = getenv("DNNL_MAX_CPU_ISA");
    if (!v || !*v || !strncasecmp(v, "ALL", 3) || !strncasecmp(v, "AVX512", 6) || !strncasecmp(v, "AVX10", 5))
        return 2;
    return !strncasecmp(v, "AVX2", 4) ? 1 : 0;
}

int sp_cpu_isa_level(void)
{
    static _Atomic int level = -1;
    int l = atomic_load(&level);
    if (l < 0) {   /* racing first calls store the same value */
        l = 0;
#ifdef SP_SMALL_X86
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) l = 1;
        if (__builtin_cpu_supports("avx512f")) l = 2;
#endif
        int cap = isa_cap();
        l = l < cap ? l : cap;
        atomic_store(&level, l);
    }
    return l;
}

static small_fn pick(const char **isa)
{
#ifdef SP_SMALL_X86
    int cap = sp_cpu_isa_level();
    __builtin_cpu_init();
    if (cap >= 2 && __builtin_cpu_supports("avx512f")) {
        *isa = "avx512";
        return small_avx512;
    }
    if (cap >= 1 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        *isa = "avx2";
        return small_avx2;
    }
#endif
    *isa = "sse2";
    return small_generic;
}

static small_fn kernel;
static const char *kernel_isa;

static small_fn get_kernel(void)
{
    /* Racing first calls pick the same function: a benign, idempotent store. */
    small_fn f = __atomic_load_n(&kernel, __ATOMIC_ACQUIRE);
    if (!f) {
        const char *isa;
        f = pick(&isa);
        __atomic_store_n(&kernel_isa, isa, __ATOMIC_RELAXED);
        __atomic_store_n(&kernel, f, __ATOMIC_RELEASE);
    }
    return f;
}

bool sp_gemm_small_force(const char *isa)
{
    small_fn f = NULL;
#ifdef SP_SMALL_X86
    __builtin_cpu_init();
    if (!strcmp(isa, "avx512") && __builtin_cpu_supports("avx512f")) f = small_avx512;
    if (!strcmp(isa, "avx2") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) f = small_avx2;
#endif
    if (!strcmp(isa, "sse2")) f = small_generic;
    if (!f) return false;
    __atomic_store_n(&kernel_isa, isa, __ATOMIC_RELAXED);   /* only names from this file's own list */
    __atomic_store_n(&kernel, f, __ATOMIC_RELEASE);
    return true;
}

const char *sp_gemm_small_isa(void)
{
    get_kernel();
    return __atomic_load_n(&kernel_isa, __ATOMIC_RELAXED);
}

bool sp_gemm_small(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0 || K <= 0 || N > SP_GEMM_SMALL_MAX_N) return false;
    if ((long)M * N * K > SP_GEMM_SMALL_MAX_MACS) return false;
    small_args g = {.ta = trans_a, .M = M, .N = N, .K = K, .lda = lda, .ldc = ldc, .ldp = ldb, .alpha = alpha,
                    .beta = beta, .A = A, .panel = B, .C = C};
    _Alignas(64) float panel[SP_GEMM_SMALL_PANEL];
    if (trans_b) {   /* op(B) = Bᵀ: its rows are B's columns, copied into a panel */
        if ((long)K * N > SP_GEMM_SMALL_PANEL) return false;
        for (int k = 0; k < K; k++)
            for (int j = 0; j < N; j++) panel[(size_t)k * N + j] = B[(size_t)j * ldb + k];
        g.panel = panel;
        g.ldp = N;
    }
    get_kernel()(&g);
    return true;
}
