/* conv3x3_b8.c — 3×3 convolution on the 8-channel blocked layout (see conv3x3_b8.h).
 *
 * A padded copy holds a sample's channel blocks, each (H+2) rows of (W+2) pixels of 8
 * channels, its border zero. Packed weights: for each group of 16 output channels, input
 * channel block, tap row, tap column and input channel of the block, the 16 output
 * channels' weights side by side (two vectors).
 *
 * Forward (and δ): per group of 16 output channels, output row and 4 output columns, 8
 * accumulators start at the bias; per input channel block, tap and input channel: two
 * weight loads, then per column one broadcast of the input and two FMAs. The sum over
 * (block, tap row, tap column, channel) runs in that order.
 * G: per group of 16 output channels, pair of input channels and tap row, 12
 * accumulators (2 channels × 3 tap columns × 2 vectors of output channels) are loaded
 * from the part, take per output pixel two dy loads, six broadcasts of the input and 12
 * FMAs, and are stored back: each weight's sum runs over (row, column) in order. */
#include <string.h>
#include "core/kernels/conv3x3_b8.h"
#include "core/kernels/gemm_small.h"

#define B8 8
#define UR 4 /* output columns per forward block */

static int plane_floats(const sp_conv3_b8 *d) { return (d->H + 2) * (d->W + 2) * B8; }

size_t sp_conv3_b8_padded_floats(const sp_conv3_b8 *d, int channels)
{
    return (size_t)(channels / B8) * plane_floats(d);
}

void sp_conv3_b8_clear(const sp_conv3_b8 *d, int channels, float *xp)
{
    memset(xp, 0, sp_conv3_b8_padded_floats(d, channels) * sizeof(float));
}

void sp_conv3_b8_pad(const sp_conv3_b8 *d, int channels, const float *x, int blk, float *xp)
{
    int H = d->H, W = d->W, Wp = W + 2;
    size_t HW = (size_t)H * W;
    for (int cb = 0; cb < channels / B8; cb++)
        for (int h = 0; h < H; h++) {
            float *row = xp + (size_t)cb * plane_floats(d) + ((size_t)(h + 1) * Wp + 1) * B8;
            if (blk) {
                memcpy(row, x + ((size_t)cb * HW + (size_t)h * W) * B8, (size_t)W * B8 * sizeof(float));
                continue;
            }
            for (int c = 0; c < B8; c++) {
                const float *src = x + ((size_t)(cb * B8 + c) * H + h) * W;
                for (int w = 0; w < W; w++) row[(size_t)w * B8 + c] = src[w];
            }
        }
}

size_t sp_conv3_b8_packed_floats(const sp_conv3_b8 *d) { return (size_t)d->C * d->O * 9; }

void sp_conv3_b8_pack(const sp_conv3_b8 *d, const float *w, bool delta, float *wp)
{
    /* the packed convolution's inputs (Ci) and outputs (Co) */
    int Ci = delta ? d->O : d->C, Co = delta ? d->C : d->O;
    for (int g = 0; g < Co / 16; g++)
        for (int cb = 0; cb < Ci / B8; cb++)
            for (int kh = 0; kh < 3; kh++)
                for (int kw = 0; kw < 3; kw++)
                    for (int ci = 0; ci < B8; ci++)
                        for (int j = 0; j < 16; j++) {
                            int i = cb * B8 + ci, o = g * 16 + j;   /* the packed conv's channels */
                            /* forward: w[o][i][kh][kw]; δ: the forward's w[i][o], the tap flipped */
                            float v = delta ? w[(((size_t)i * d->C + o) * 3 + 2 - kh) * 3 + 2 - kw]
                                            : w[(((size_t)o * d->C + i) * 3 + kh) * 3 + kw];
                            *wp++ = v;
                        }
}

void sp_conv3_b8_unpack_add(const sp_conv3_b8 *d, const float *part, float *dw)
{
    for (int c = 0; c < d->C; c++)
        for (int t = 0; t < 9; t++)
            for (int o = 0; o < d->O; o++) dw[((size_t)o * d->C + c) * 9 + t] += part[((size_t)c * 9 + t) * d->O + o];
}

void sp_conv3_b8_store(const sp_conv3_b8 *d, int channels, const float *y, int blk, bool acc, float *dst)
{
    size_t n = (size_t)channels * d->H * d->W, HW = (size_t)d->H * d->W;
    if (blk) {
        if (!acc) memcpy(dst, y, n * sizeof(float));
        else
            for (size_t i = 0; i < n; i++) dst[i] += y[i];
        return;
    }
    for (int cb = 0; cb < channels / B8; cb++)
        for (int c = 0; c < B8; c++) {
            float *out = dst + (size_t)(cb * B8 + c) * HW;
            const float *src = y + (size_t)cb * HW * B8 + c;
            for (size_t p = 0; p < HW; p++) out[p] = acc ? out[p] + src[p * B8] : src[p * B8];
        }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SP_B8_X86 1

#define AVX2_FN __attribute__((target("avx2,fma"))) static

/* out (Co channels, blocked) = bias + the packed convolution of the padded in (Ci channels). */
AVX2_FN void conv_run(const sp_conv3_b8 *d, int Ci, int Co, const float *in, const float *wp, const float *bias,
                      bool relu, float *out)
{
    int H = d->H, W = d->W, Wp = W + 2, PF = plane_floats(d);
    size_t HW8 = (size_t)H * W * B8, gw = (size_t)Ci * 9 * 16;
    __m256 zero = _mm256_setzero_ps();
    for (int g = 0; g < Co / 16; g++) {
        const float *wg = wp + g * gw;
        __m256 b0 = bias ? _mm256_loadu_ps(bias + g * 16) : zero, b1 = bias ? _mm256_loadu_ps(bias + g * 16 + 8) : zero;
        float *o0 = out + (size_t)(2 * g) * HW8, *o1 = o0 + HW8;
        for (int oh = 0; oh < H; oh++)
            for (int ow = 0; ow < W; ow += UR) {
                __m256 a0[UR], a1[UR];
                for (int u = 0; u < UR; u++) a0[u] = b0, a1[u] = b1;
                for (int cb = 0; cb < Ci / B8; cb++)
                    for (int kh = 0; kh < 3; kh++) {
                        const float *row = in + (size_t)cb * PF + ((size_t)(oh + kh) * Wp + ow) * B8;
                        const float *wk = wg + (size_t)(cb * 3 + kh) * 3 * B8 * 16;
                        for (int kw = 0; kw < 3; kw++)
#pragma GCC unroll 8
                            for (int ci = 0; ci < B8; ci++) {
                                const float *wv = wk + (kw * B8 + ci) * 16;
                                __m256 w0 = _mm256_loadu_ps(wv), w1 = _mm256_loadu_ps(wv + 8);
#pragma GCC unroll 4
                                for (int u = 0; u < UR; u++) {
                                    __m256 xv = _mm256_broadcast_ss(row + (u + kw) * B8 + ci);
                                    a0[u] = _mm256_fmadd_ps(xv, w0, a0[u]);
                                    a1[u] = _mm256_fmadd_ps(xv, w1, a1[u]);
                                }
                            }
                    }
                float *p0 = o0 + ((size_t)oh * W + ow) * B8, *p1 = o1 + ((size_t)oh * W + ow) * B8;
                for (int u = 0; u < UR; u++) {
                    if (relu) a0[u] = _mm256_max_ps(a0[u], zero), a1[u] = _mm256_max_ps(a1[u], zero);
                    _mm256_storeu_ps(p0 + u * B8, a0[u]);
                    _mm256_storeu_ps(p1 + u * B8, a1[u]);
                }
            }
    }
}

/* The 4 accumulators of tap column kw (channels c and c + 1) take x · dy; one broadcast
 * register at a time: 12 accumulators, 2 dy vectors and it fill 15 of the 16. */
#define G_FMA(kw)                                                                                  \
    do {                                                                                          \
        __m256 x = _mm256_broadcast_ss(xv + (kw) * B8);                                             \
        a##kw##0 = _mm256_fmadd_ps(x, y0, a##kw##0), a##kw##1 = _mm256_fmadd_ps(x, y1, a##kw##1);   \
        x = _mm256_broadcast_ss(xv + (kw) * B8 + 1);                                                \
        b##kw##0 = _mm256_fmadd_ps(x, y0, b##kw##0), b##kw##1 = _mm256_fmadd_ps(x, y1, b##kw##1);   \
    } while (0)

AVX2_FN void grad_run(const sp_conv3_b8 *d, const float *xp, const float *dyp, float *part)
{
    int H = d->H, W = d->W, Wp = W + 2, PF = plane_floats(d), O = d->O;
    for (int g = 0; g < O / 16; g++)
        for (int c = 0; c < d->C; c += 2) {
            int cb = c / B8, ci = c % B8;
            for (int kh = 0; kh < 3; kh++) {
                /* part's rows of channels c (a) and c + 1 (b), taps (kh, 0..2), the group's 16 */
                float *pa = part + ((size_t)c * 9 + kh * 3) * O + g * 16, *pb = pa + (size_t)9 * O;
                __m256 a00 = _mm256_loadu_ps(pa), a01 = _mm256_loadu_ps(pa + 8);
                __m256 a10 = _mm256_loadu_ps(pa + O), a11 = _mm256_loadu_ps(pa + O + 8);
                __m256 a20 = _mm256_loadu_ps(pa + 2 * O), a21 = _mm256_loadu_ps(pa + 2 * O + 8);
                __m256 b00 = _mm256_loadu_ps(pb), b01 = _mm256_loadu_ps(pb + 8);
                __m256 b10 = _mm256_loadu_ps(pb + O), b11 = _mm256_loadu_ps(pb + O + 8);
                __m256 b20 = _mm256_loadu_ps(pb + 2 * O), b21 = _mm256_loadu_ps(pb + 2 * O + 8);
                for (int oh = 0; oh < H; oh++) {
                    /* dy's row oh of the group's two channel blocks (the padded copy's interior) */
                    const float *d0 = dyp + (size_t)(2 * g) * PF + ((size_t)(oh + 1) * Wp + 1) * B8, *d1 = d0 + PF;
                    const float *xr = xp + (size_t)cb * PF + (size_t)(oh + kh) * Wp * B8 + ci;
                    for (int ow = 0; ow < W; ow++) {
                        __m256 y0 = _mm256_loadu_ps(d0 + (size_t)ow * B8), y1 = _mm256_loadu_ps(d1 + (size_t)ow * B8);
                        const float *xv = xr + (size_t)ow * B8;
                        G_FMA(0);
                        G_FMA(1);
                        G_FMA(2);
                    }
                }
                _mm256_storeu_ps(pa, a00), _mm256_storeu_ps(pa + 8, a01);
                _mm256_storeu_ps(pa + O, a10), _mm256_storeu_ps(pa + O + 8, a11);
                _mm256_storeu_ps(pa + 2 * O, a20), _mm256_storeu_ps(pa + 2 * O + 8, a21);
                _mm256_storeu_ps(pb, b00), _mm256_storeu_ps(pb + 8, b01);
                _mm256_storeu_ps(pb + O, b10), _mm256_storeu_ps(pb + O + 8, b11);
                _mm256_storeu_ps(pb + 2 * O, b20), _mm256_storeu_ps(pb + 2 * O + 8, b21);
            }
        }
}
#endif

bool sp_conv3_b8_on(int C, int O, int H, int W, int k, int stride, int pad)
{
#ifdef SP_B8_X86
    return sp_cpu_isa_level() == 1 && k == 3 && stride == 1 && pad == 1 && C > 0 && C % 16 == 0 && O > 0 &&
           O % 16 == 0 && H > 0 && W > 0 && W % UR == 0;
#else
    (void)C, (void)O, (void)H, (void)W, (void)k, (void)stride, (void)pad;
    return false;
#endif
}

void sp_conv3_b8_forward(const sp_conv3_b8 *d, const float *xp, const float *wp, const float *bias, bool relu,
                         float *y)
{
#ifdef SP_B8_X86
    conv_run(d, d->C, d->O, xp, wp, bias, relu, y);
#else
    (void)d, (void)xp, (void)wp, (void)bias, (void)relu, (void)y;
#endif
}

void sp_conv3_b8_delta(const sp_conv3_b8 *d, const float *dyp, const float *wp, float *dx)
{
#ifdef SP_B8_X86
    conv_run(d, d->O, d->C, dyp, wp, NULL, false, dx);
#else
    (void)d, (void)dyp, (void)wp, (void)dx;
#endif
}

void sp_conv3_b8_grad(const sp_conv3_b8 *d, const float *xp, const float *dyp, float *part)
{
#ifdef SP_B8_X86
    grad_run(d, xp, dyp, part);
#else
    (void)d, (void)xp, (void)dyp, (void)part;
#endif
}
