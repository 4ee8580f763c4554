/* wino_b8.c — Winograd F(2×2, 3×3) on the 8-channel blocked layout (see wino_b8.h).
 *
 * With Bᵀ = [1 0 −1 0; 0 1 1 0; 0 −1 1 0; 0 1 0 −1], G = [1 0 0; ½ ½ ½; ½ −½ ½; 0 0 1]
 * and Aᵀ = [1 1 1 0; 0 1 −1 −1]: a tile's output Y = Aᵀ [Σ_c (G g Gᵀ) ⊙ (Bᵀ d B)] A for
 * its 4×4 input tile d (rows 2ty−1 … 2ty+2, columns 2tx−1 … 2tx+2, zero outside the plane)
 * and each 3×3 kernel g. V [16][tiles][C]: one vector of 8 channels per tile and point
 * ξ, as the blocked layout holds them; U [16][O][C], so that the weights [O][C][3][3] are
 * read in order; M [16][tiles][O], the GEMMs' output, read back 8 output channels at a
 * time. δ's kernel is g flipped, J g J (J reverses the 3 taps), and G J = P G with P the
 * permutation that swaps rows 0 and 3: its U is the forward's with the indices 0 and 3 of
 * ξ = (a, b) swapped, the same array read at other points, not transposed. */
#include <string.h>
#include "core/kernels/dense.h"
#include "core/kernels/gemm_small.h"
#include "core/kernels/wino_b8.h"

#define B8 8
#define CHUNK_FLOATS (1u << 19) /* V and M of one run: 2 MiB */

static int tiles_of(const sp_wino_b8 *d) { return ((d->H + 1) / 2) * ((d->W + 1) / 2); }

size_t sp_wino_b8_u_floats(const sp_wino_b8 *d) { return (size_t)16 * d->C * d->O; }

int sp_wino_b8_chunk(const sp_wino_b8 *d)
{
    size_t per = (size_t)16 * tiles_of(d) * (d->C + d->O);
    size_t n = CHUNK_FLOATS / per;
    return n < 1 ? 1 : (int)n;
}

size_t sp_wino_b8_scratch_floats(const sp_wino_b8 *d)
{
    size_t n = (size_t)sp_wino_b8_chunk(d), big = d->C > d->O ? d->C : d->O;
    /* V and M of n samples, and one blocked copy of an NCHW input sample */
    return n * 16 * tiles_of(d) * (d->C + d->O) + big * d->H * d->W;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SP_WINO_X86 1

#define AVX2_FN __attribute__((target("avx2,fma"))) static

/* One NCHW sample of `channels` channels into the blocked layout. */
static void to_blocked(const sp_wino_b8 *d, int channels, const float *x, float *xb)
{
    size_t HW = (size_t)d->H * d->W;
    for (int cb = 0; cb < channels / B8; cb++)
        for (int c = 0; c < B8; c++) {
            const float *src = x + (size_t)(cb * B8 + c) * HW;
            float *dst = xb + (size_t)cb * HW * B8 + c;
            for (size_t p = 0; p < HW; p++) dst[p * B8] = src[p];
        }
}

/* U's entries of output channel k and input channels [c0, c0 + 8): the 3×3 kernels of 8
 * input channels (9 floats apart) gathered into vectors, G g Gᵀ on them lane by lane. */
AVX2_FN void filter8(const sp_wino_b8 *d, const float *w, int k, int c0, float *U)
{
    size_t plane = (size_t)d->O * d->C;
    const float *base = w + ((size_t)k * d->C + c0) * 9;
    __m256i idx = _mm256_setr_epi32(0, 9, 18, 27, 36, 45, 54, 63);
    __m256 half = _mm256_set1_ps(0.5f), g[3][3], t[4][3];
    for (int kh = 0; kh < 3; kh++)
        for (int kw = 0; kw < 3; kw++) g[kh][kw] = _mm256_i32gather_ps(base + kh * 3 + kw, idx, 4);
    for (int kw = 0; kw < 3; kw++) {   /* G g */
        t[0][kw] = g[0][kw];
        t[1][kw] = _mm256_mul_ps(half, _mm256_add_ps(_mm256_add_ps(g[0][kw], g[1][kw]), g[2][kw]));
        t[2][kw] = _mm256_mul_ps(half, _mm256_add_ps(_mm256_sub_ps(g[0][kw], g[1][kw]), g[2][kw]));
        t[3][kw] = g[2][kw];
    }
    for (int a = 0; a < 4; a++) {   /* (G g) Gᵀ */
        __m256 u[4] = {t[a][0], _mm256_mul_ps(half, _mm256_add_ps(_mm256_add_ps(t[a][0], t[a][1]), t[a][2])),
                       _mm256_mul_ps(half, _mm256_add_ps(_mm256_sub_ps(t[a][0], t[a][1]), t[a][2])), t[a][2]};
        for (int b = 0; b < 4; b++) _mm256_storeu_ps(U + (size_t)(a * 4 + b) * plane + (size_t)k * d->C + c0, u[b]);
    }
}

/* Sample s of the run (blocked, Ci channels) into V's rows of its tiles. */
AVX2_FN void input_transform(const sp_wino_b8 *d, int Ci, const float *x, int s, int T, float *V)
{
    int H = d->H, W = d->W, tw = (W + 1) / 2, th = (H + 1) / 2, tps = th * tw;
    size_t HW8 = (size_t)H * W * B8, xi = (size_t)T * Ci;
    __m256 z = _mm256_setzero_ps();
    for (int cb = 0; cb < Ci / B8; cb++) {
        const float *xc = x + (size_t)cb * HW8;
        for (int ty = 0; ty < th; ty++)
            for (int tx = 0; tx < tw; tx++) {
                __m256 v[4][4], t[4][4];
                int r0 = 2 * ty - 1, q0 = 2 * tx - 1;
                for (int i = 0; i < 4; i++)
                    for (int j = 0; j < 4; j++) {
                        int r = r0 + i, q = q0 + j;
                        v[i][j] = r >= 0 && r < H && q >= 0 && q < W ? _mm256_loadu_ps(xc + ((size_t)r * W + q) * B8) : z;
                    }
                for (int j = 0; j < 4; j++) {   /* Bᵀ d */
                    t[0][j] = _mm256_sub_ps(v[0][j], v[2][j]);
                    t[1][j] = _mm256_add_ps(v[1][j], v[2][j]);
                    t[2][j] = _mm256_sub_ps(v[2][j], v[1][j]);
                    t[3][j] = _mm256_sub_ps(v[1][j], v[3][j]);
                }
                float *out = V + ((size_t)s * tps + ty * tw + tx) * Ci + cb * B8;
                for (int i = 0; i < 4; i++) {   /* (Bᵀ d) B */
                    _mm256_storeu_ps(out + (size_t)(i * 4 + 0) * xi, _mm256_sub_ps(t[i][0], t[i][2]));
                    _mm256_storeu_ps(out + (size_t)(i * 4 + 1) * xi, _mm256_add_ps(t[i][1], t[i][2]));
                    _mm256_storeu_ps(out + (size_t)(i * 4 + 2) * xi, _mm256_sub_ps(t[i][2], t[i][1]));
                    _mm256_storeu_ps(out + (size_t)(i * 4 + 3) * xi, _mm256_sub_ps(t[i][1], t[i][3]));
                }
            }
    }
}

/* M's rows of sample s's tiles into its blocked output (Co channels). */
AVX2_FN void output_transform(const sp_wino_b8 *d, int Co, const float *M, int s, int T, const float *bias, bool relu,
                              float *y)
{
    int H = d->H, W = d->W, tw = (W + 1) / 2, th = (H + 1) / 2, tps = th * tw;
    size_t HW8 = (size_t)H * W * B8, mi = (size_t)T * Co;
    __m256 z = _mm256_setzero_ps();
    for (int ob = 0; ob < Co / B8; ob++) {
        __m256 bv = bias ? _mm256_loadu_ps(bias + ob * B8) : z;
        float *yc = y + (size_t)ob * HW8;
        for (int ty = 0; ty < th; ty++)
            for (int tx = 0; tx < tw; tx++) {
                const float *in = M + ((size_t)s * tps + ty * tw + tx) * Co + ob * B8;
                __m256 m[4][4], u[2][4];
                for (int i = 0; i < 4; i++)
                    for (int j = 0; j < 4; j++) m[i][j] = _mm256_loadu_ps(in + (size_t)(i * 4 + j) * mi);
                for (int j = 0; j < 4; j++) {   /* Aᵀ m */
                    u[0][j] = _mm256_add_ps(_mm256_add_ps(m[0][j], m[1][j]), m[2][j]);
                    u[1][j] = _mm256_sub_ps(_mm256_sub_ps(m[1][j], m[2][j]), m[3][j]);
                }
                for (int a = 0; a < 2; a++) {   /* (Aᵀ m) A, the bias, the ReLU */
                    __m256 y0 = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(u[a][0], u[a][1]), u[a][2]), bv);
                    __m256 y1 = _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(u[a][1], u[a][2]), u[a][3]), bv);
                    if (relu) y0 = _mm256_max_ps(y0, z), y1 = _mm256_max_ps(y1, z);
                    int r = 2 * ty + a, q = 2 * tx;
                    if (r >= H) continue;
                    _mm256_storeu_ps(yc + ((size_t)r * W + q) * B8, y0);
                    if (q + 1 < W) _mm256_storeu_ps(yc + ((size_t)r * W + q + 1) * B8, y1);
                }
            }
    }
}
/* Sample s's dy tiles (blocked, O channels) as the kernels of F(3×3, 2×2): A g Aᵀ of each
 * 2×2 tile g (zero outside the plane), A = [1 0; 1 1; 1 −1; 0 −1], into D's rows. */
AVX2_FN void dy_transform(const sp_wino_b8 *d, const float *dy, int s, int T, float *D)
{
    int H = d->H, W = d->W, tw = (W + 1) / 2, th = (H + 1) / 2, tps = th * tw, O = d->O;
    size_t HW8 = (size_t)H * W * B8, di = (size_t)T * O;
    __m256 z = _mm256_setzero_ps();
    for (int ob = 0; ob < O / B8; ob++) {
        const float *yc = dy + (size_t)ob * HW8;
        for (int ty = 0; ty < th; ty++)
            for (int tx = 0; tx < tw; tx++) {
                __m256 g[2][2], t[4][2];
                for (int a = 0; a < 2; a++)
                    for (int b = 0; b < 2; b++) {
                        int r = 2 * ty + a, q = 2 * tx + b;
                        g[a][b] = r < H && q < W ? _mm256_loadu_ps(yc + ((size_t)r * W + q) * B8) : z;
                    }
                for (int b = 0; b < 2; b++) {   /* A g */
                    t[0][b] = g[0][b];
                    t[1][b] = _mm256_add_ps(g[0][b], g[1][b]);
                    t[2][b] = _mm256_sub_ps(g[0][b], g[1][b]);
                    t[3][b] = _mm256_sub_ps(z, g[1][b]);
                }
                float *out = D + ((size_t)s * tps + ty * tw + tx) * O + ob * B8;
                for (int i = 0; i < 4; i++) {   /* (A g) Aᵀ */
                    _mm256_storeu_ps(out + (size_t)(i * 4 + 0) * di, t[i][0]);
                    _mm256_storeu_ps(out + (size_t)(i * 4 + 1) * di, _mm256_add_ps(t[i][0], t[i][1]));
                    _mm256_storeu_ps(out + (size_t)(i * 4 + 2) * di, _mm256_sub_ps(t[i][0], t[i][1]));
                    _mm256_storeu_ps(out + (size_t)(i * 4 + 3) * di, _mm256_sub_ps(z, t[i][1]));
                }
            }
    }
}

/* dw's rows [k0, k1) += Gᵀ M G, 8 input channels at a time: Gᵀ = [1 ½ ½ 0; 0 ½ −½ 0; 0 ½ ½ 1];
 * M: the block [16][k1 − k0][C]. */
AVX2_FN void grad_out_rows(const sp_wino_b8 *d, int k0, int k1, const float *M, float *dw)
{
    size_t plane = (size_t)(k1 - k0) * d->C;
    __m256 half = _mm256_set1_ps(0.5f);
    for (int k = k0; k < k1; k++)
        for (int c0 = 0; c0 < d->C; c0 += B8) {
            __m256 m[4][4], r[3][4];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) m[i][j] = _mm256_loadu_ps(M + (size_t)(i * 4 + j) * plane + (size_t)(k - k0) * d->C + c0);
            for (int j = 0; j < 4; j++) {   /* Gᵀ m */
                __m256 p = _mm256_mul_ps(half, _mm256_add_ps(m[1][j], m[2][j]));
                r[0][j] = _mm256_add_ps(m[0][j], p);
                r[1][j] = _mm256_mul_ps(half, _mm256_sub_ps(m[1][j], m[2][j]));
                r[2][j] = _mm256_add_ps(p, m[3][j]);
            }
            float v[9][B8];
            for (int i = 0; i < 3; i++) {   /* (Gᵀ m) G */
                __m256 p = _mm256_mul_ps(half, _mm256_add_ps(r[i][1], r[i][2]));
                _mm256_storeu_ps(v[i * 3 + 0], _mm256_add_ps(r[i][0], p));
                _mm256_storeu_ps(v[i * 3 + 1], _mm256_mul_ps(half, _mm256_sub_ps(r[i][1], r[i][2])));
                _mm256_storeu_ps(v[i * 3 + 2], _mm256_add_ps(p, r[i][3]));
            }
            float *row = dw + ((size_t)k * d->C + c0) * 9;
            for (int l = 0; l < B8; l++)
                for (int t = 0; t < 9; t++) row[(size_t)l * 9 + t] += v[t][l];
        }
}
#endif

#define GRAD_CHUNK_FLOATS (1u << 20) /* X and D of one run of G: 4 MiB */

int sp_wino_b8_grad_chunk(const sp_wino_b8 *d)
{
    size_t n = GRAD_CHUNK_FLOATS / ((size_t)16 * tiles_of(d) * (d->C + d->O));
    return n < 1 ? 1 : (int)n;
}

/* X [16][tiles][C] and D [16][tiles][O] of one run */
size_t sp_wino_b8_grad_floats(const sp_wino_b8 *d)
{
    return (size_t)sp_wino_b8_grad_chunk(d) * 16 * tiles_of(d) * (d->C + d->O);
}

size_t sp_wino_b8_block_floats(const sp_wino_b8 *d) { return (size_t)16 * SP_WINO_B8_ROWS * d->C; }

size_t sp_wino_b8_tmp_floats(const sp_wino_b8 *d) { return (size_t)(d->C > d->O ? d->C : d->O) * d->H * d->W; }

void sp_wino_b8_filter(const sp_wino_b8 *d, const float *w, int k0, int k1, float *U)
{
#ifdef SP_WINO_X86
    for (int k = k0; k < k1; k++)
        for (int c = 0; c < d->C; c += B8) filter8(d, w, k, c, U);   /* C: a multiple of 8 */
#else
    (void)d, (void)w, (void)k0, (void)k1, (void)U;
#endif
}

bool sp_wino_b8_on(int C, int O, int H, int W, int k, int stride, int pad)
{
#ifdef SP_WINO_X86
    return sp_cpu_isa_level() == 1 && k == 3 && stride == 1 && pad == 1 && C % B8 == 0 && O % B8 == 0 &&
           C >= SP_WINO_B8_MIN_C && O >= SP_WINO_B8_MIN_C && H >= SP_WINO_B8_MIN_HW && W >= SP_WINO_B8_MIN_HW;
#else
    (void)C, (void)O, (void)H, (void)W, (void)k, (void)stride, (void)pad;
    return false;
#endif
}

void sp_wino_b8_run(const sp_wino_b8 *d, bool delta, const float *in, int inblk, int n, const float *U,
                    const float *bias, bool relu, float *out, float *scratch)
{
#ifdef SP_WINO_X86
    int Ci = delta ? d->O : d->C, Co = delta ? d->C : d->O, T = n * tiles_of(d);
    size_t xs = (size_t)Ci * d->H * d->W, ys = (size_t)Co * d->H * d->W;
    float *V = scratch, *M = V + (size_t)16 * T * Ci, *xb = M + (size_t)16 * T * Co;
    for (int s = 0; s < n; s++) {
        const float *x = in + s * xs;
        if (!inblk) {
            to_blocked(d, Ci, x, xb);
            x = xb;
        }
        input_transform(d, Ci, x, s, T, V);
    }
    static const int swap03[4] = {3, 1, 2, 0};
    size_t plane = (size_t)d->O * d->C;
    for (int xi = 0; xi < 16; xi++) {
        const float *A = V + (size_t)xi * T * Ci;
        float *Mx = M + (size_t)xi * T * Co;
        if (!delta)   /* M_ξ [T × O] = V_ξ [T × C] · U_ξᵀ */
            sp_gemm_serial(false, true, T, Co, Ci, 1.0f, A, Ci, U + xi * plane, Ci, 0.0f, Mx, Co);
        else   /* M_ξ [T × C] = V_ξ [T × O] · U_ξ', ξ' = ξ with indices 0 and 3 swapped */
            sp_gemm_serial(false, false, T, Co, Ci, 1.0f, A, Ci, U + (size_t)(swap03[xi / 4] * 4 + swap03[xi % 4]) * plane,
                           Co, 0.0f, Mx, Co);
    }
    for (int s = 0; s < n; s++) output_transform(d, Co, M, s, T, bias, relu, out + s * ys);
#else
    (void)d, (void)delta, (void)in, (void)inblk, (void)n, (void)U, (void)bias, (void)relu, (void)out, (void)scratch;
#endif
}

void sp_wino_b8_grad_tiles(const sp_wino_b8 *d, const float *x, int xblk, const float *dy, int dyblk, int s, int n,
                           float *work, float *tmp)
{
#ifdef SP_WINO_X86
    int T = n * tiles_of(d);
    float *X = work, *D = X + (size_t)16 * T * d->C;
    if (!xblk) to_blocked(d, d->C, x, tmp), x = tmp;
    input_transform(d, d->C, x, s, T, X);
    if (!dyblk) to_blocked(d, d->O, dy, tmp), dy = tmp;
    dy_transform(d, dy, s, T, D);
#else
    (void)d, (void)x, (void)xblk, (void)dy, (void)dyblk, (void)s, (void)n, (void)work, (void)tmp;
#endif
}

void sp_wino_b8_grad_rows(const sp_wino_b8 *d, int n, int k0, int k1, const float *work, float *block, float *dw)
{
#ifdef SP_WINO_X86
    int T = n * tiles_of(d), C = d->C, O = d->O, R = k1 - k0;
    const float *X = work, *D = X + (size_t)16 * T * C;
    for (int xi = 0; xi < 16; xi++)   /* M_ξ's rows [k0, k1) = D_ξᵀ · X_ξ */
        sp_gemm_serial(true, false, R, C, T, 1.0f, D + (size_t)xi * T * O + k0, O, X + (size_t)xi * T * C, C, 0.0f,
                       block + (size_t)xi * R * C, C);
    grad_out_rows(d, k0, k1, block, dw);
#else
    (void)d, (void)n, (void)k0, (void)k1, (void)work, (void)block, (void)dw;
#endif
}
