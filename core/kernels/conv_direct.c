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
 * time (dy's columns past Wo loaded as zeros), then each is summed across its lanes.
 *
 * The wide kernel (4..16 input channels, 16·n outputs, 5×5: LeNet-5's conv2) turns the
 * vectors the other way, across 16 output channels: the scratch then also holds the
 * weights packed [O/16][C][5][5][16] (sp_conv_direct_prepare), dy transposed to
 * [P][O] (G) and one output row [⌈Wo/5⌉·5][16] (forward). Forward: 16 outputs × 5
 * columns in 10 accumulators that start at the bias; per input channel and tap, 2
 * weight loads, 5 broadcasts of the padded row and 10 FMAs; the row is then written out
 * channel by channel. G: per output block, input channel and kernel row, 16 outputs × 5
 * taps in 10 accumulators summed over the output plane (2 loads of dyᵀ, 5 broadcasts, 10
 * FMAs per pixel), then added to dw. Rows are ⌈Wo/5⌉·5 + 4 floats rounded up to 8. */
#include <string.h>
#include "core/kernels/conv_direct.h"
#include "core/kernels/gemm_small.h"

#define WIDE_MIN_C 4
#define WIDE_MAX_C 16
#define WK 5   /* the wide kernel's taps per row */
#define WG 5   /* and its columns per group      */

/* The wide kernel's shapes (sp_conv_direct_on admits no others with C >= WIDE_MIN_C). */
static bool wide(const sp_conv_direct *d) { return d->C >= WIDE_MIN_C; }

static int wide_cols(const sp_conv_direct *d) { return (d->Wo + WG - 1) / WG * WG; }

static int row_stride(const sp_conv_direct *d)
{
    if (wide(d)) return (wide_cols(d) + WK - 1 + 7) / 8 * 8;
    int ncw = (d->Wo + 31) / 32;
    return (ncw * 32 + d->k - 1 + 7) / 8 * 8;
}

static int padded_rows(const sp_conv_direct *d) { return d->H + 2 * d->pad; }

static size_t plane_floats(const sp_conv_direct *d) { return (size_t)d->C * padded_rows(d) * row_stride(d); }

/* The wide kernel's parts after the padded planes: packed weights, dyᵀ, one output row. */
static inline float *wide_w(const sp_conv_direct *d, float *scratch) { return scratch + plane_floats(d); }
static inline float *wide_dyt(const sp_conv_direct *d, float *scratch)
{
    return wide_w(d, scratch) + (size_t)d->O * d->C * WK * WK;
}
static inline float *wide_row(const sp_conv_direct *d, float *scratch)
{
    return wide_dyt(d, scratch) + (size_t)d->Ho * d->Wo * d->O;
}

/* δ's copy of dy: rows of delta_stride floats, dy's columns from k − 1 on, zeros around
 * them, so that each 16-column chunk of dx reads its taps' columns without a test. */
static int delta_chunks(const sp_conv_direct *d) { return (d->W + 15) / 16; }
static int delta_stride(const sp_conv_direct *d) { return (WK - 1 + delta_chunks(d) * 16 + d->pad + 7) / 8 * 8; }
static size_t delta_floats(const sp_conv_direct *d) { return (size_t)d->O * d->Ho * delta_stride(d); }
static inline float *wide_dyp(const sp_conv_direct *d, float *scratch)
{
    return wide_row(d, scratch) + (size_t)wide_cols(d) * 16;
}

size_t sp_conv_direct_floats(const sp_conv_direct *d)
{
    if (!wide(d)) return plane_floats(d);
    return plane_floats(d) + (size_t)d->O * d->C * WK * WK + (size_t)d->Ho * d->Wo * d->O + (size_t)wide_cols(d) * 16 +
           delta_floats(d);
}

void sp_conv_direct_prepare(const sp_conv_direct *d, const float *w, float *scratch)
{
    memset(scratch, 0, plane_floats(d) * sizeof(float));
    if (!wide(d)) return;
    memset(wide_dyp(d, scratch), 0, delta_floats(d) * sizeof(float));
    if (!w) return;
    float *wp = wide_w(d, scratch);   /* [O/16][C][k][k][16] from [O][C][k][k] */
    size_t taps = (size_t)d->C * WK * WK;
    for (int o = 0; o < d->O; o++)
        for (size_t t = 0; t < taps; t++) wp[((size_t)(o / 16) * taps + t) * 16 + o % 16] = w[(size_t)o * taps + t];
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

/* One tap of the wide forward: the 5 columns from row[kx], weights w0 (outputs 0-7) and
 * w1 (8-15), into the named accumulators (arrays here let GCC spill them). */
#define WIDE_TAP(J)                                                                                                   \
    do {                                                                                                              \
        __m256 xb_ = _mm256_broadcast_ss(row + kx + (J));                                                             \
        a0##J = _mm256_fmadd_ps(w0, xb_, a0##J);                                                                      \
        a1##J = _mm256_fmadd_ps(w1, xb_, a1##J);                                                                      \
    } while (0)

/* The wide forward of one sample (xp padded, wp packed, T one output row). */
AVX2_FN void fwd_wide(const sp_conv_direct *d, const float *xp, const float *wp, const float *bias, bool relu,
                      float *y, float *T)
{
    int RS = row_stride(d), Hp = padded_rows(d), ng = wide_cols(d) / WG;
    size_t P = (size_t)d->Ho * d->Wo, taps = (size_t)d->C * WK * WK;
    __m256 zero = _mm256_setzero_ps();
    for (int ob = 0; ob < d->O / 16; ob++) {
        const float *wb = wp + (size_t)ob * taps * 16;
        __m256 b0 = _mm256_loadu_ps(bias + ob * 16), b1 = _mm256_loadu_ps(bias + ob * 16 + 8);
        for (int oy = 0; oy < d->Ho; oy++) {
            for (int g = 0; g < ng; g++) {
                __m256 a00 = b0, a01 = b0, a02 = b0, a03 = b0, a04 = b0;
                __m256 a10 = b1, a11 = b1, a12 = b1, a13 = b1, a14 = b1;
                for (int c = 0; c < d->C; c++)
                    for (int ky = 0; ky < WK; ky++) {
                        const float *row = xp + ((size_t)c * Hp + oy + ky) * RS + g * WG;
                        const float *wr = wb + ((size_t)c * WK + ky) * WK * 16;
                        for (int kx = 0; kx < WK; kx++) {
                            __m256 w0 = _mm256_loadu_ps(wr + kx * 16), w1 = _mm256_loadu_ps(wr + kx * 16 + 8);
                            WIDE_TAP(0);
                            WIDE_TAP(1);
                            WIDE_TAP(2);
                            WIDE_TAP(3);
                            WIDE_TAP(4);
                        }
                    }
                if (relu) {
                    a00 = _mm256_max_ps(a00, zero), a01 = _mm256_max_ps(a01, zero), a02 = _mm256_max_ps(a02, zero);
                    a03 = _mm256_max_ps(a03, zero), a04 = _mm256_max_ps(a04, zero);
                    a10 = _mm256_max_ps(a10, zero), a11 = _mm256_max_ps(a11, zero), a12 = _mm256_max_ps(a12, zero);
                    a13 = _mm256_max_ps(a13, zero), a14 = _mm256_max_ps(a14, zero);
                }
                float *t = T + (size_t)g * WG * 16;
                _mm256_storeu_ps(t, a00), _mm256_storeu_ps(t + 8, a10);
                _mm256_storeu_ps(t + 16, a01), _mm256_storeu_ps(t + 24, a11);
                _mm256_storeu_ps(t + 32, a02), _mm256_storeu_ps(t + 40, a12);
                _mm256_storeu_ps(t + 48, a03), _mm256_storeu_ps(t + 56, a13);
                _mm256_storeu_ps(t + 64, a04), _mm256_storeu_ps(t + 72, a14);
            }
            for (int o = 0; o < 16; o++) {
                float *yr = y + (size_t)(ob * 16 + o) * P + (size_t)oy * d->Wo;
                for (int ox = 0; ox < d->Wo; ox++) yr[ox] = T[(size_t)ox * 16 + o];
            }
        }
    }
}

/* The wide δ of one sample, input channels [c0, c0 + CG): dx (or dx +=, acc) from dyp
 * (δ's padded copy of dy) and w [O][C][5][5]; CG is a constant at each call. For each
 * row of dx and 16-column chunk, CG × 2 accumulators take, per output channel, kernel
 * row that reaches a row of dy, and tap, 2 loads of dy's row and CG weight broadcasts. */
/* One channel's tap and one channel's row of the δ below, on named accumulators (arrays
 * there let GCC spill them at 6 channels); J past CG folds away. */
#define DELTA_TAP(J)                                                                                                  \
    if ((J) < CG) {                                                                                                   \
        __m256 wb_ = _mm256_broadcast_ss(wr + (size_t)(J) * WK * WK + kx);                                            \
        a0_##J = _mm256_fmadd_ps(wb_, d0, a0_##J);                                                                    \
        a1_##J = _mm256_fmadd_ps(wb_, d1, a1_##J);                                                                    \
    }
#define DELTA_STORE(J)                                                                                                \
    if ((J) < CG) delta_store(d, dx + ((size_t)(c0 + (J)) * d->H + ih) * d->W + iw0, iw0, acc, a0_##J, a1_##J);

/* 16 columns of one row of dx from a0 and a1, those past W left alone. */
AVX2_INLINE void delta_store(const sp_conv_direct *d, float *xr, int iw0, bool acc, __m256 a0, __m256 a1)
{
    __m256 a[2] = {a0, a1};
#pragma GCC unroll 2
    for (int v = 0; v < 2; v++) {
        int valid = d->W - iw0 - v * 8;
        if (valid >= 8) {
            __m256 r = acc ? _mm256_add_ps(_mm256_loadu_ps(xr + v * 8), a[v]) : a[v];
            _mm256_storeu_ps(xr + v * 8, r);
        } else if (valid > 0) {
            __m256i m = lanes(valid);
            __m256 r = acc ? _mm256_add_ps(_mm256_maskload_ps(xr + v * 8, m), a[v]) : a[v];
            _mm256_maskstore_ps(xr + v * 8, m, r);
        }
    }
}

AVX2_INLINE void delta_group(const sp_conv_direct *d, const float *dyp, const float *w, float *dx, bool acc, int c0,
                             const int CG)
{
    int RSd = delta_stride(d), nch = delta_chunks(d);
    size_t taps = (size_t)d->C * WK * WK;
    for (int ih = 0; ih < d->H; ih++)
        for (int ch = 0; ch < nch; ch++) {
            int iw0 = ch * 16;
            __m256 a0_0 = _mm256_setzero_ps(), a0_1 = a0_0, a0_2 = a0_0, a0_3 = a0_0, a0_4 = a0_0, a0_5 = a0_0;
            __m256 a1_0 = a0_0, a1_1 = a0_0, a1_2 = a0_0, a1_3 = a0_0, a1_4 = a0_0, a1_5 = a0_0;
            for (int o = 0; o < d->O; o++)
                for (int ky = 0; ky < WK; ky++) {
                    int oy = ih + d->pad - ky;
                    if (oy < 0 || oy >= d->Ho) continue;
                    const float *dr = dyp + ((size_t)o * d->Ho + oy) * RSd + (WK - 1) + iw0 + d->pad;
                    const float *wr = w + (size_t)o * taps + ((size_t)c0 * WK + ky) * WK;
                    for (int kx = 0; kx < WK; kx++) {
                        __m256 d0 = _mm256_loadu_ps(dr - kx), d1 = _mm256_loadu_ps(dr - kx + 8);
                        DELTA_TAP(0) DELTA_TAP(1) DELTA_TAP(2) DELTA_TAP(3) DELTA_TAP(4) DELTA_TAP(5)
                    }
                }
            DELTA_STORE(0) DELTA_STORE(1) DELTA_STORE(2) DELTA_STORE(3) DELTA_STORE(4) DELTA_STORE(5)
        }
}

#define DELTA(CG)                                                                                                     \
    AVX2_FN void delta_##CG(const sp_conv_direct *d, const float *dyp, const float *w, float *dx, bool acc, int c0)  \
    {                                                                                                                 \
        delta_group(d, dyp, w, dx, acc, c0, CG);                                                                      \
    }
DELTA(1) DELTA(2) DELTA(3) DELTA(4) DELTA(5) DELTA(6)

/* The wide weight gradient of one sample added to dw (xp padded, dyt = dyᵀ [P][O]). */
AVX2_FN void grad_wide(const sp_conv_direct *d, const float *xp, const float *dyt, float *dw)
{
    int RS = row_stride(d), Hp = padded_rows(d);
    size_t taps = (size_t)d->C * WK * WK;
    for (int ob = 0; ob < d->O / 16; ob++)
        for (int c = 0; c < d->C; c++)
            for (int ky = 0; ky < WK; ky++) {
                __m256 a0[WK], a1[WK];
#pragma GCC unroll 5
                for (int kx = 0; kx < WK; kx++) a0[kx] = a1[kx] = _mm256_setzero_ps();
                for (int oy = 0; oy < d->Ho; oy++) {
                    const float *row = xp + ((size_t)c * Hp + oy + ky) * RS;
                    const float *dr = dyt + (size_t)oy * d->Wo * d->O + ob * 16;
                    for (int ox = 0; ox < d->Wo; ox++) {
                        __m256 d0 = _mm256_loadu_ps(dr + (size_t)ox * d->O), d1 = _mm256_loadu_ps(dr + (size_t)ox * d->O + 8);
#pragma GCC unroll 5
                        for (int kx = 0; kx < WK; kx++) {
                            __m256 xb = _mm256_broadcast_ss(row + ox + kx);
                            a0[kx] = _mm256_fmadd_ps(d0, xb, a0[kx]);
                            a1[kx] = _mm256_fmadd_ps(d1, xb, a1[kx]);
                        }
                    }
                }
                float t[WK][16];
#pragma GCC unroll 5
                for (int kx = 0; kx < WK; kx++) {
                    _mm256_storeu_ps(t[kx], a0[kx]);
                    _mm256_storeu_ps(t[kx] + 8, a1[kx]);
                }
                for (int o = 0; o < 16; o++) {
                    float *dr = dw + (size_t)(ob * 16 + o) * taps + ((size_t)c * WK + ky) * WK;
                    for (int kx = 0; kx < WK; kx++) dr[kx] += t[kx][o];
                }
            }
}
#endif

bool sp_conv_direct_on(int C, int O, int k, int pad, int stride)
{
#ifdef SP_DIRECT_X86
    if (sp_cpu_isa_level() != 1 || stride != 1) return false;
    if (C >= WIDE_MIN_C) return C <= WIDE_MAX_C && O % 16 == 0 && O > 0 && k == WK && pad >= 0 && pad < WK;
    return C >= 1 && (k == 3 || k == 5);
#else
    (void)C, (void)O, (void)k, (void)pad, (void)stride;
    return false;
#endif
}

void sp_conv_direct_forward(const sp_conv_direct *d, const float *x, const float *w, const float *bias, bool relu,
                            float *y, float *scratch)
{
    pad_planes(d, x, scratch);
#ifdef SP_DIRECT_X86
    if (wide(d)) {
        fwd_wide(d, scratch, wide_w(d, scratch), bias, relu, y, wide_row(d, scratch));
        return;
    }
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
    if (wide(d)) {
        float *dyt = wide_dyt(d, scratch);
        size_t P = (size_t)d->Ho * d->Wo;
        for (int o = 0; o < d->O; o++)
            for (size_t p = 0; p < P; p++) dyt[p * d->O + o] = dy[(size_t)o * P + p];
        grad_wide(d, scratch, dyt, dw);
        return;
    }
    for (int o0 = 0; o0 < d->O; o0 += 2) {
        int J = d->O - o0 < 2 ? d->O - o0 : 2;
        if (d->k == 5) (J == 2 ? grad_5_2 : grad_5_1)(d, scratch, dy, dw, o0);
        else (J == 2 ? grad_3_2 : grad_3_1)(d, scratch, dy, dw, o0);
    }
#else
    (void)dy, (void)dw;
#endif
}

bool sp_conv_direct_has_delta(const sp_conv_direct *d) { return wide(d); }

void sp_conv_direct_delta(const sp_conv_direct *d, const float *w, const float *dy, float *dx, bool acc,
                          float *scratch)
{
#ifdef SP_DIRECT_X86
    float *dyp = wide_dyp(d, scratch);
    int RSd = delta_stride(d);
    for (int o = 0; o < d->O; o++)
        for (int oy = 0; oy < d->Ho; oy++)
            memcpy(dyp + ((size_t)o * d->Ho + oy) * RSd + WK - 1, dy + ((size_t)o * d->Ho + oy) * d->Wo,
                   (size_t)d->Wo * sizeof(float));
    for (int c0 = 0; c0 < d->C; c0 += 6) {
        int cg = d->C - c0 < 6 ? d->C - c0 : 6;
        (cg == 6 ? delta_6 : cg == 5 ? delta_5 : cg == 4 ? delta_4 : cg == 3 ? delta_3 : cg == 2 ? delta_2 : delta_1)(
            d, dyp, w, dx, acc, c0);
    }
#else
    (void)d, (void)w, (void)dy, (void)dx, (void)acc, (void)scratch;
#endif
}
