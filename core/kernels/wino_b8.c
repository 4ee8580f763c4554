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

/* U's entries of output channel k and input channels [c0, c0 + 8), u [ξ][8]: the 3×3
 * kernels of 8 input channels (9 floats apart) gathered into vectors, G g Gᵀ on them lane
 * by lane. */
AVX2_FN void filter8(const sp_wino_b8 *d, const float *w, int k, int c0, float u8[16][B8])
{
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
        for (int b = 0; b < 4; b++) _mm256_storeu_ps(u8[a * 4 + b], u[b]);
    }
}

/* Bᵀ over the 4 rows of column q (its 4 vectors, rows zeroed by keep outside the plane)
 * into t0..t3; zeros for a column outside it. */
#define COL_T(q, t0, t1, t2, t3)                                                                        \
    do {                                                                                                \
        if ((q) >= W) {                                                                                 \
            t0 = t1 = t2 = t3 = z;                                                                      \
            break;                                                                                      \
        }                                                                                               \
        size_t o_ = (size_t)(q) * B8;                                                                   \
        __m256 v0 = _mm256_and_ps(_mm256_loadu_ps(row0 + o_), k0), v1 = _mm256_and_ps(_mm256_loadu_ps(row1 + o_), k1); \
        __m256 v2 = _mm256_and_ps(_mm256_loadu_ps(row2 + o_), k2), v3 = _mm256_and_ps(_mm256_loadu_ps(row3 + o_), k3); \
        t0 = _mm256_sub_ps(v0, v2), t1 = _mm256_add_ps(v1, v2), t2 = _mm256_sub_ps(v2, v1), t3 = _mm256_sub_ps(v1, v3); \
    } while (0)

/* (Bᵀ d) B of row i of the transform, from its columns q0 .. q0 + 3 (a, b, c, e) */
#define ROW_B(i, a, b, c, e)                                                          \
    _mm256_storeu_ps(out + (size_t)((i) * 4 + 0) * ld, _mm256_sub_ps(a, c));          \
    _mm256_storeu_ps(out + (size_t)((i) * 4 + 1) * ld, _mm256_add_ps(b, c));          \
    _mm256_storeu_ps(out + (size_t)((i) * 4 + 2) * ld, _mm256_sub_ps(c, b));          \
    _mm256_storeu_ps(out + (size_t)((i) * 4 + 3) * ld, _mm256_sub_ps(b, e));

/* Tile rows [ty0, ty1) of one sample (blocked, Ci channels) into V: tile (ty, tx) at row
 * (ty − ty0)·tw + tx of each point's plane, the planes ld floats apart. Along a row of
 * tiles each column's Bᵀ is computed once: a tile's last two columns are the next one's
 * first two. Rows outside the plane read row 0 and are masked to zeros. */
AVX2_FN void input_transform(const sp_wino_b8 *d, int Ci, const float *x, int ty0, int ty1, size_t ld, float *V)
{
    int H = d->H, W = d->W, tw = (W + 1) / 2;
    size_t HW8 = (size_t)H * W * B8, RW = (size_t)W * B8;
    __m256 z = _mm256_setzero_ps(), one = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    for (int cb = 0; cb < Ci / B8; cb++) {
        const float *xc = x + (size_t)cb * HW8;
        for (int ty = ty0; ty < ty1; ty++) {
            int r = 2 * ty - 1;
            const float *row0 = xc + (size_t)(r >= 0 ? r : 0) * RW, *row1 = xc + (size_t)(r + 1) * RW;
            const float *row2 = xc + (size_t)(r + 2 < H ? r + 2 : 0) * RW, *row3 = xc + (size_t)(r + 3 < H ? r + 3 : 0) * RW;
            __m256 k0 = r >= 0 ? one : z, k1 = one, k2 = r + 2 < H ? one : z, k3 = r + 3 < H ? one : z;
            __m256 a0 = z, a1 = z, a2 = z, a3 = z, b0, b1, b2, b3, c0, c1, c2, c3, e0, e1, e2, e3;
            COL_T(0, b0, b1, b2, b3);   /* column −1 is outside: a = 0 */
            for (int tx = 0; tx < tw; tx++) {
                COL_T(2 * tx + 1, c0, c1, c2, c3);
                COL_T(2 * tx + 2, e0, e1, e2, e3);
                float *out = V + ((size_t)(ty - ty0) * tw + tx) * Ci + cb * B8;
                ROW_B(0, a0, b0, c0, e0)
                ROW_B(1, a1, b1, c1, e1)
                ROW_B(2, a2, b2, c2, e2)
                ROW_B(3, a3, b3, c3, e3)
                a0 = c0, a1 = c1, a2 = c2, a3 = c3, b0 = e0, b1 = e1, b2 = e2, b3 = e3;
            }
        }
    }
}
#undef COL_T
#undef ROW_B

/* M's rows of tile rows [ty0, ty1) (as input_transform's) into one sample's blocked
 * output (Co channels), added to it with acc. */
AVX2_FN void output_transform(const sp_wino_b8 *d, int Co, const float *M, int ty0, int ty1, size_t ld,
                              const float *bias, bool relu, bool acc, float *y)
{
    int H = d->H, W = d->W, tw = (W + 1) / 2;
    size_t HW8 = (size_t)H * W * B8, mi = ld;
    __m256 z = _mm256_setzero_ps();
    for (int ob = 0; ob < Co / B8; ob++) {
        __m256 bv = bias ? _mm256_loadu_ps(bias + ob * B8) : z;
        float *yc = y + (size_t)ob * HW8;
        for (int ty = ty0; ty < ty1; ty++)
            for (int tx = 0; tx < tw; tx++) {
                const float *in = M + ((size_t)(ty - ty0) * tw + tx) * Co + ob * B8;
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
                    float *p0 = yc + ((size_t)r * W + q) * B8, *p1 = p0 + B8;
                    if (acc) y0 = _mm256_add_ps(y0, _mm256_loadu_ps(p0));
                    _mm256_storeu_ps(p0, y0);
                    if (q + 1 >= W) continue;
                    if (acc) y1 = _mm256_add_ps(y1, _mm256_loadu_ps(p1));
                    _mm256_storeu_ps(p1, y1);
                }
            }
    }
}
/* dy's tiles of tile rows [ty0, ty1) of one sample (blocked, O channels) as the kernels
 * of F(3×3, 2×2): A g Aᵀ of each 2×2 tile g (zero outside the plane), A = [1 0; 1 1;
 * 1 −1; 0 −1], into D's rows (as input_transform's). */
AVX2_FN void dy_transform(const sp_wino_b8 *d, const float *dy, int ty0, int ty1, size_t ld, float *D)
{
    int H = d->H, W = d->W, tw = (W + 1) / 2, O = d->O;
    size_t HW8 = (size_t)H * W * B8, di = ld;
    __m256 z = _mm256_setzero_ps();
    for (int ob = 0; ob < O / B8; ob++) {
        const float *yc = dy + (size_t)ob * HW8;
        for (int ty = ty0; ty < ty1; ty++)
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
                float *out = D + ((size_t)(ty - ty0) * tw + tx) * O + ob * B8;
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

/* ---- the fused form: one sample, a strip of tile rows at a time, in cache -------------- */

/* M [6 tiles][16 outputs] (rows ldm apart) = V [6][Ci] (rows Ci apart) · U [Ci][16] (rows
 * ldu apart): twelve named accumulators, one broadcast of V at a time. */
#define FW_ACC(i) __m256 a##i##0 = _mm256_setzero_ps(), a##i##1 = _mm256_setzero_ps();
#define FW_FMA(i)                                                                  \
    {                                                                              \
        __m256 b = _mm256_broadcast_ss(v + (size_t)(i) * Ci + c);                  \
        a##i##0 = _mm256_fmadd_ps(b, u0, a##i##0), a##i##1 = _mm256_fmadd_ps(b, u1, a##i##1); \
    }
#define FW_ST(i) _mm256_storeu_ps(m + (size_t)(i) * ldm, a##i##0), _mm256_storeu_ps(m + (size_t)(i) * ldm + 8, a##i##1);
AVX2_FN void gemm6x16(int Ci, const float *restrict v, const float *restrict u, size_t ldu, float *restrict m,
                      size_t ldm)
{
    FW_ACC(0) FW_ACC(1) FW_ACC(2) FW_ACC(3) FW_ACC(4) FW_ACC(5)
    for (int c = 0; c < Ci; c++) {
        __m256 u0 = _mm256_loadu_ps(u + (size_t)c * ldu), u1 = _mm256_loadu_ps(u + (size_t)c * ldu + 8);
        FW_FMA(0) FW_FMA(1) FW_FMA(2) FW_FMA(3) FW_FMA(4) FW_FMA(5)
    }
    FW_ST(0) FW_ST(1) FW_ST(2) FW_ST(3) FW_ST(4) FW_ST(5)
}

/* dU [4 outputs][16 inputs] (rows ldu apart) += Σ_t D [t][4] (rows ldd apart) · V [t][16]
 * (rows ldv apart), t < T: eight named accumulators. */
#define GW_LD(i) __m256 g##i##0 = _mm256_loadu_ps(du + (size_t)(i) * ldu), g##i##1 = _mm256_loadu_ps(du + (size_t)(i) * ldu + 8);
#define GW_FMA(i)                                                                  \
    {                                                                              \
        __m256 b = _mm256_broadcast_ss(dd + (i));                                  \
        g##i##0 = _mm256_fmadd_ps(b, v0, g##i##0), g##i##1 = _mm256_fmadd_ps(b, v1, g##i##1); \
    }
#define GW_ST(i) _mm256_storeu_ps(du + (size_t)(i) * ldu, g##i##0), _mm256_storeu_ps(du + (size_t)(i) * ldu + 8, g##i##1);
AVX2_FN void gemm4x16_acc(int T, const float *restrict D, size_t ldd, const float *restrict V, size_t ldv,
                          float *restrict du, size_t ldu)
{
    GW_LD(0) GW_LD(1) GW_LD(2) GW_LD(3)
    for (int t = 0; t < T; t++) {
        const float *dd = D + (size_t)t * ldd, *vv = V + (size_t)t * ldv;
        __m256 v0 = _mm256_loadu_ps(vv), v1 = _mm256_loadu_ps(vv + 8);
        GW_FMA(0) GW_FMA(1) GW_FMA(2) GW_FMA(3)
    }
    GW_ST(0) GW_ST(1) GW_ST(2) GW_ST(3)
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
    size_t plane = (size_t)d->O * d->C;
    float u8[16][B8];
    for (int k = k0; k < k1; k++)
        for (int c = 0; c < d->C; c += B8) {   /* C: a multiple of 8 */
            filter8(d, w, k, c, u8);
            for (int xi = 0; xi < 16; xi++) memcpy(U + xi * plane + (size_t)k * d->C + c, u8[xi], sizeof u8[xi]);
        }
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
        input_transform(d, Ci, x, 0, (d->H + 1) / 2, (size_t)T * Ci, V + (size_t)s * tiles_of(d) * Ci);
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
    for (int s = 0; s < n; s++)
        output_transform(d, Co, M + (size_t)s * tiles_of(d) * Co, 0, (d->H + 1) / 2, (size_t)T * Co, bias, relu, false,
                         out + s * ys);
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
    input_transform(d, d->C, x, 0, (d->H + 1) / 2, (size_t)T * d->C, X + (size_t)s * tiles_of(d) * d->C);
    if (!dyblk) to_blocked(d, d->O, dy, tmp), dy = tmp;
    dy_transform(d, dy, 0, (d->H + 1) / 2, (size_t)T * d->O, D + (size_t)s * tiles_of(d) * d->O);
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

/* ---- the fused form ---- */

#define STRIP_TILES 48 /* tiles per strip: its V and M (48·16·(C + O) floats) stay in L2 */

static int strip_rows(const sp_wino_b8 *d)
{
    int tw = (d->W + 1) / 2, th = (d->H + 1) / 2, r = STRIP_TILES / tw;
    return r < 1 ? 1 : r > th ? th : r;
}

/* A strip's rows in V and M: its tiles rounded up to the GEMM's 6 */
static int strip_pad(const sp_wino_b8 *d) { return (strip_rows(d) * ((d->W + 1) / 2) + 5) / 6 * 6; }

bool sp_wino_b8_fused_on(int C, int O, int H, int W, int k, int stride, int pad)
{
#ifdef SP_WINO_X86
    return sp_cpu_isa_level() == 1 && k == 3 && stride == 1 && pad == 1 && C % 16 == 0 && O % 16 == 0 &&
           C >= SP_WINO_B8_FUSED_MIN_C && O >= SP_WINO_B8_FUSED_MIN_C && C <= SP_WINO_B8_FUSED_MAX_C &&
           O <= SP_WINO_B8_FUSED_MAX_C && H >= SP_WINO_B8_MIN_HW && W >= SP_WINO_B8_MIN_HW;
#else
    (void)C, (void)O, (void)H, (void)W, (void)k, (void)stride, (void)pad;
    return false;
#endif
}

/* V and M (or X and D) of a strip, then blocked copies of NCHW inputs (x and dy for G) */
size_t sp_wino_b8_fused_floats(const sp_wino_b8 *d)
{
    return (size_t)(16 * strip_pad(d) + d->H * d->W) * (d->C + d->O);
}

void sp_wino_b8_filter_fwd(const sp_wino_b8 *d, const float *w, int k0, int k1, float *U)
{
#ifdef SP_WINO_X86
    size_t plane = (size_t)d->O * d->C;
    float u8[16][B8];
    for (int k = k0; k < k1; k++)
        for (int c = 0; c < d->C; c += B8) {
            filter8(d, w, k, c, u8);
            for (int xi = 0; xi < 16; xi++)
                for (int l = 0; l < B8; l++) U[xi * plane + (size_t)(c + l) * d->O + k] = u8[xi][l];
        }
#else
    (void)d, (void)w, (void)k0, (void)k1, (void)U;
#endif
}

void sp_wino_b8_sample(const sp_wino_b8 *d, bool delta, const float *in, int inblk, const float *U, const float *bias,
                       bool relu, bool acc, float *out, float *scratch)
{
#ifdef SP_WINO_X86
    static const int swap03[4] = {3, 1, 2, 0};
    int Ci = delta ? d->O : d->C, Co = delta ? d->C : d->O, tw = (d->W + 1) / 2, th = (d->H + 1) / 2;
    int rows = strip_rows(d), Tp = strip_pad(d);
    size_t plane = (size_t)d->O * d->C, lv = (size_t)Tp * Ci, lm = (size_t)Tp * Co;
    float *V = scratch, *M = V + 16 * lv;
    if (!inblk) {
        float *xb = M + 16 * lm;
        to_blocked(d, Ci, in, xb);
        in = xb;
    }
    for (int ty0 = 0; ty0 < th; ty0 += rows) {
        int ty1 = ty0 + rows < th ? ty0 + rows : th, T = (ty1 - ty0) * tw, T6 = (T + 5) / 6 * 6;
        input_transform(d, Ci, in, ty0, ty1, lv, V);
        for (int xi = 0; xi < 16; xi++) {
            float *v = V + xi * lv;
            /* the GEMM's padding rows: zeros, their products unread */
            memset(v + (size_t)T * Ci, 0, (size_t)(T6 - T) * Ci * sizeof(float));
            /* forward: U [16][C][O]; δ: U [16][O][C] at ξ with indices 0 and 3 swapped;
             * either way its rows are the input channels, Co floats apart */
            const float *u = U + (delta ? (size_t)(swap03[xi / 4] * 4 + swap03[xi % 4]) : (size_t)xi) * plane;
            for (int t = 0; t < T6; t += 6)
                for (int o = 0; o < Co; o += 16) gemm6x16(Ci, v + (size_t)t * Ci, u + o, (size_t)Co, M + xi * lm + (size_t)t * Co + o, (size_t)Co);
        }
        output_transform(d, Co, M, ty0, ty1, lm, bias, relu, acc, out);
    }
#else
    (void)d, (void)delta, (void)in, (void)inblk, (void)U, (void)bias, (void)relu, (void)acc, (void)out, (void)scratch;
#endif
}

void sp_wino_b8_grad_sample(const sp_wino_b8 *d, const float *x, int xblk, const float *dy, int dyblk, float *dU,
                            float *scratch)
{
#ifdef SP_WINO_X86
    int C = d->C, O = d->O, tw = (d->W + 1) / 2, th = (d->H + 1) / 2, rows = strip_rows(d), Tp = strip_pad(d);
    size_t plane = (size_t)O * C, lx = (size_t)Tp * C, ld = (size_t)Tp * O;
    float *X = scratch, *D = X + 16 * lx, *xb = D + 16 * ld, *yb = xb + (size_t)C * d->H * d->W;
    if (!xblk) to_blocked(d, C, x, xb), x = xb;
    if (!dyblk) to_blocked(d, O, dy, yb), dy = yb;
    for (int ty0 = 0; ty0 < th; ty0 += rows) {
        int ty1 = ty0 + rows < th ? ty0 + rows : th, T = (ty1 - ty0) * tw;
        input_transform(d, C, x, ty0, ty1, lx, X);
        dy_transform(d, dy, ty0, ty1, ld, D);
        for (int xi = 0; xi < 16; xi++)   /* dU_ξ [O × C] += D_ξᵀ · X_ξ */
            for (int k = 0; k < O; k += 4)
                for (int c = 0; c < C; c += 16)
                    gemm4x16_acc(T, D + xi * ld + k, (size_t)O, X + xi * lx + c, (size_t)C, dU + xi * plane + (size_t)k * C + c, (size_t)C);
    }
#else
    (void)d, (void)x, (void)xblk, (void)dy, (void)dyblk, (void)dU, (void)scratch;
#endif
}

void sp_wino_b8_grad_finish(const sp_wino_b8 *d, const float *dU, float *dw)
{
#ifdef SP_WINO_X86
    grad_out_rows(d, 0, d->O, dU, dw);
#else
    (void)d, (void)dU, (void)dw;
#endif
}
