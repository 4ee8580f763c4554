/* conv_direct.c — direct convolution for a few input channels (see conv_direct.h).
 *
 * The scratch holds the sample's C planes zero-padded, Hp = H + 2·pad rows of RS floats,
 * RS = 32·⌈Wo/32⌉ + k − 1 rounded up to 8: every vector load of a 32-column chunk, tap
 * kx included, stays inside its row, and the columns past the padded plane read zeros.
 *
 * Forward: for each output row and 32-column chunk, 3 output channels × 4 vectors of 8
 * accumulators start at the bias and take, per input channel and tap, 4 loads of the
 * padded row at offset kx, 3 weight broadcasts and 12 FMAs; the last chunk's columns past
 * Wo are computed and not stored.
 * Weight gradient: for each output channel pair, input channel and kernel row ky, 2 × k
 * vector accumulators sum dy[o][oy][ox] · x[oy+ky][ox+kx] over oy and 8 columns at a
 * time (dy's columns past Wo loaded as zeros), then each is summed across its lanes. */
#include <string.h>
#include "core/kernels/conv_direct.h"
#include "core/kernels/gemm_small.h"

static int row_stride(const sp_conv_direct *d)
{
    int ncw = (d->Wo + 31) / 32;
    return (ncw * 32 + d->k - 1 + 7) / 8 * 8;
}

static int padded_rows(const sp_conv_direct *d) { return d->H + 2 * d->pad; }

size_t sp_conv_direct_floats(const sp_conv_direct *d)
{
    return (size_t)d->C * padded_rows(d) * row_stride(d);
}

void sp_conv_direct_prepare(const sp_conv_direct *d, float *scratch)
{
    memset(scratch, 0, sp_conv_direct_floats(d) * sizeof(float));
}

/* The sample's planes into the padded scratch's interior. */
static void pad_planes(const sp_conv_direct *d, const float *x, float *xp)
{
    int RS = row_stride(d), Hp = padded_rows(d);
    for (int c = 0; c < d->C; c++)
        for (int h = 0; h < d->H; h++)
            memcpy(xp + ((size_t)c * Hp + h + d->pad) * RS + d->pad, x + ((size_t)c * d->H + h) * d->W,
                   (size_t)d->W * sizeof(float));
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SP_DIRECT_X86 1

#define AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) static inline
#define AVX2_FN __attribute__((target("avx2,fma"))) static

/* Lanes [0, valid) set. */
AVX2_INLINE __m256i lanes(int valid)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(valid), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

AVX2_INLINE float hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* Output channels [o0, o0 + J) of one sample; K and J are constants at each call. */
AVX2_INLINE void fwd_block(const sp_conv_direct *d, const float *xp, const float *w, const float *bias, bool relu,
                           float *y, int o0, const int K, const int J)
{
    int RS = row_stride(d), Hp = padded_rows(d), ncw = (d->Wo + 31) / 32;
    size_t P = (size_t)d->Ho * d->Wo, wst = (size_t)d->C * K * K;
    for (int oy = 0; oy < d->Ho; oy++)
        for (int cx = 0; cx < ncw; cx++) {
            __m256 acc[3][4];
#pragma GCC unroll 3
            for (int j = 0; j < J; j++)
#pragma GCC unroll 4
                for (int v = 0; v < 4; v++) acc[j][v] = _mm256_set1_ps(bias[o0 + j]);
            for (int c = 0; c < d->C; c++)
                for (int ky = 0; ky < K; ky++) {
                    const float *row = xp + ((size_t)c * Hp + oy + ky) * RS + cx * 32;
                    const float *wr = w + (size_t)o0 * wst + ((size_t)c * K + ky) * K;
#pragma GCC unroll 5
                    for (int kx = 0; kx < K; kx++) {
                        __m256 x0 = _mm256_loadu_ps(row + kx), x1 = _mm256_loadu_ps(row + kx + 8);
                        __m256 x2 = _mm256_loadu_ps(row + kx + 16), x3 = _mm256_loadu_ps(row + kx + 24);
#pragma GCC unroll 3
                        for (int j = 0; j < J; j++) {
                            __m256 wv = _mm256_broadcast_ss(wr + j * wst + kx);
                            acc[j][0] = _mm256_fmadd_ps(wv, x0, acc[j][0]);
                            acc[j][1] = _mm256_fmadd_ps(wv, x1, acc[j][1]);
                            acc[j][2] = _mm256_fmadd_ps(wv, x2, acc[j][2]);
                            acc[j][3] = _mm256_fmadd_ps(wv, x3, acc[j][3]);
                        }
                    }
                }
#pragma GCC unroll 3
            for (int j = 0; j < J; j++) {
                float *yr = y + (size_t)(o0 + j) * P + (size_t)oy * d->Wo + cx * 32;
#pragma GCC unroll 4
                for (int v = 0; v < 4; v++) {
                    int valid = d->Wo - cx * 32 - v * 8;
                    __m256 a = relu ? _mm256_max_ps(acc[j][v], _mm256_setzero_ps()) : acc[j][v];
                    if (valid >= 8) _mm256_storeu_ps(yr + v * 8, a);
                    else if (valid > 0) _mm256_maskstore_ps(yr + v * 8, lanes(valid), a);
                }
            }
        }
}

/* Output channels [o0, o0 + J) of one sample's weight gradient. */
AVX2_INLINE void grad_block(const sp_conv_direct *d, const float *xp, const float *dy, float *dw, int o0, const int K,
                            const int J)
{
    int RS = row_stride(d), Hp = padded_rows(d), ncw = (d->Wo + 31) / 32;
    size_t P = (size_t)d->Ho * d->Wo, wst = (size_t)d->C * K * K;
    for (int c = 0; c < d->C; c++)
        for (int ky = 0; ky < K; ky++) {
            __m256 acc[2][5];
#pragma GCC unroll 2
            for (int j = 0; j < J; j++)
#pragma GCC unroll 5
                for (int kx = 0; kx < K; kx++) acc[j][kx] = _mm256_setzero_ps();
            for (int oy = 0; oy < d->Ho; oy++)
                for (int col = 0; col < ncw * 32; col += 8) {
                    int valid = d->Wo - col;
                    if (valid <= 0) break;
                    __m256i m = lanes(valid);
                    const float *row = xp + ((size_t)c * Hp + oy + ky) * RS + col;
                    __m256 dv[2];
#pragma GCC unroll 2
                    for (int j = 0; j < J; j++)
                        dv[j] = _mm256_maskload_ps(dy + (size_t)(o0 + j) * P + (size_t)oy * d->Wo + col, m);
#pragma GCC unroll 5
                    for (int kx = 0; kx < K; kx++) {
                        __m256 xv = _mm256_loadu_ps(row + kx);
#pragma GCC unroll 2
                        for (int j = 0; j < J; j++) acc[j][kx] = _mm256_fmadd_ps(dv[j], xv, acc[j][kx]);
                    }
                }
#pragma GCC unroll 2
            for (int j = 0; j < J; j++)
#pragma GCC unroll 5
                for (int kx = 0; kx < K; kx++) dw[(size_t)(o0 + j) * wst + ((size_t)c * K + ky) * K + kx] += hsum(acc[j][kx]);
        }
}

#define FWD(K, J)                                                                                                     \
    AVX2_FN void fwd_##K##_##J(const sp_conv_direct *d, const float *xp, const float *w, const float *b, bool relu,    \
                               float *y, int o0)                                                                      \
    {                                                                                                                 \
        fwd_block(d, xp, w, b, relu, y, o0, K, J);                                                                    \
    }
FWD(3, 1) FWD(3, 2) FWD(3, 3) FWD(5, 1) FWD(5, 2) FWD(5, 3)

#define GRAD(K, J)                                                                                                    \
    AVX2_FN void grad_##K##_##J(const sp_conv_direct *d, const float *xp, const float *dy, float *dw, int o0)         \
    {                                                                                                                 \
        grad_block(d, xp, dy, dw, o0, K, J);                                                                          \
    }
GRAD(3, 1) GRAD(3, 2) GRAD(5, 1) GRAD(5, 2)
#endif

bool sp_conv_direct_on(int C, int k, int stride)
{
#ifdef SP_DIRECT_X86
    return sp_cpu_isa_level() == 1 && C >= 1 && C <= 3 && stride == 1 && (k == 3 || k == 5);
#else
    (void)C, (void)k, (void)stride;
    return false;
#endif
}

void sp_conv_direct_forward(const sp_conv_direct *d, const float *x, const float *w, const float *bias, bool relu,
                            float *y, float *scratch)
{
    pad_planes(d, x, scratch);
#ifdef SP_DIRECT_X86
    for (int o0 = 0; o0 < d->O; o0 += 3) {
        int J = d->O - o0 < 3 ? d->O - o0 : 3;
        if (d->k == 5) (J == 3 ? fwd_5_3 : J == 2 ? fwd_5_2 : fwd_5_1)(d, scratch, w, bias, relu, y, o0);
        else (J == 3 ? fwd_3_3 : J == 2 ? fwd_3_2 : fwd_3_1)(d, scratch, w, bias, relu, y, o0);
    }
#else
    (void)w, (void)bias, (void)relu, (void)y;
#endif
}

void sp_conv_direct_grad(const sp_conv_direct *d, const float *x, const float *dy, float *dw, float *scratch)
{
    pad_planes(d, x, scratch);
#ifdef SP_DIRECT_X86
    for (int o0 = 0; o0 < d->O; o0 += 2) {
        int J = d->O - o0 < 2 ? d->O - o0 : 2;
        if (d->k == 5) (J == 2 ? grad_5_2 : grad_5_1)(d, scratch, dy, dw, o0);
        else (J == 2 ? grad_3_2 : grad_3_1)(d, scratch, dy, dw, o0);
    }
#else
    (void)dy, (void)dw;
#endif
}
