/* im2col.c — sliding-window geometry, im2col and col2im (see im2col.h). */
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include "core/threads.h"
#include "layers/im2col.h"

/* Stride 1 is the common case: no division (im2col computes these per row of col). */
static int floor_div(int a, int d) { return d == 1 ? a : a >= 0 ? a / d : -((-a + d - 1) / d); }
static int ceil_div(int a, int d) { return -floor_div(-a, d); }
static int imax(int a, int b) { return a > b ? a : b; }
static int imin(int a, int b) { return a < b ? a : b; }

int sp_conv_out_size(int in, int k, int stride, int pad)
{
    int span = in + 2 * pad - k;
    return span < 0 ? 0 : span / stride + 1;
}

void sp_window_range(int x, int k, int stride, int pad, int n_out, int *lo, int *hi)
{
    /* 0 <= x + pad − i·stride <= k − 1 */
    *lo = imax(0, ceil_div(x + pad - k + 1, stride));
    *hi = imax(*lo, imin(n_out, floor_div(x + pad, stride) + 1));
}

/* The outputs [*lo, *hi) along one dimension whose tap t lands inside the input
 * (0 <= i·stride − pad + t < in). */
static void tap_outputs(int t, int in, int n_out, int stride, int pad, int *lo, int *hi)
{
    *lo = imin(n_out, imax(0, ceil_div(pad - t, stride)));
    *hi = imax(*lo, imin(n_out, floor_div(in - 1 + pad - t, stride) + 1));
}

/* d[j] += s[j]: fixed-width inner blocks so the -O2 vectoriser handles them. */
static void add_floats(float *restrict d, const float *restrict s, size_t n)
{
    size_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int t = 0; t < 8; t++) d[j + t] += s[j + t];
    for (; j < n; j++) d[j] += s[j];
}

typedef struct col_job {
    const sp_conv_geom *g;
    const float *src;
    float *col;   /* im2col: the output; col2im: the input, used as scratch */
    float *dx;
    int b0, nb;
} col_job;

/* One unit = one row (c, kh, kw) of col, over the chunk's samples. */
static void im2col_range(void *ctx, size_t begin, size_t end)
{
    const col_job *J = ctx;
    const sp_conv_geom *g = J->g;
    int k = g->k, s = g->stride, p = g->pad, W = g->W, Wo = g->Wo, P = g->Ho * g->Wo;
    size_t ld = (size_t)J->nb * P, plane = (size_t)g->H * W;
    for (size_t r = begin; r < end; r++) {
        int c = (int)(r / (size_t)(k * k)), kh = (int)(r / (size_t)k % (size_t)k), kw = (int)(r % (size_t)k);
        int i_lo, i_hi, j_lo, j_hi;
        tap_outputs(kh, g->H, g->Ho, s, p, &i_lo, &i_hi);
        tap_outputs(kw, W, Wo, s, p, &j_lo, &j_hi);
        /* Stride 1 with Wo = W ("same" padding): rows of x and of col line up, so the
         * whole band of valid taps is one copy, then the padding columns are re-zeroed. */
        bool band = s == 1 && Wo == W && i_lo < i_hi && j_lo < j_hi;
        size_t first = (size_t)i_lo * W + j_lo, last = (size_t)(i_hi - 1) * W + j_hi;
        ptrdiff_t shift = (ptrdiff_t)(kh - p) * W + (kw - p);   /* col index → x index */
        for (int bb = 0; bb < J->nb; bb++) {
            const float *xp = J->src + ((size_t)(J->b0 + bb) * g->C + c) * plane;
            float *dst = J->col + r * ld + (size_t)bb * P;
            if (i_lo > 0) memset(dst, 0, (size_t)i_lo * Wo * sizeof(float));
            if (i_hi < g->Ho) memset(dst + (size_t)i_hi * Wo, 0, (size_t)(g->Ho - i_hi) * Wo * sizeof(float));
            if (band) {
                memcpy(dst + first, xp + (ptrdiff_t)first + shift, (last - first) * sizeof(float));
                for (int i = i_lo; i < i_hi; i++) {
                    for (int j = 0; j < j_lo; j++) dst[(size_t)i * W + j] = 0.0f;
                    for (int j = j_hi; j < W; j++) dst[(size_t)i * W + j] = 0.0f;
                }
                continue;
            }
            for (int i = i_lo; i < i_hi; i++) {
                float *d = dst + (size_t)i * Wo;
                const float *row = xp + (size_t)(i * s - p + kh) * W;
                for (int j = 0; j < j_lo; j++) d[j] = 0.0f;
                if (s == 1)
                    memcpy(d + j_lo, row + j_lo - p + kw, (size_t)(j_hi - j_lo) * sizeof(float));
                else
                    for (int j = j_lo; j < j_hi; j++) d[j] = row[j * s - p + kw];
                for (int j = j_hi; j < Wo; j++) d[j] = 0.0f;
            }
        }
    }
}

void sp_im2col(const sp_conv_geom *g, const float *x, int b0, int b1, float *col)
{
    col_job J = {.g = g, .src = x, .col = col, .b0 = b0, .nb = b1 - b0};
    sp_parallel_for((size_t)g->C * g->k * g->k, im2col_range, &J);
}

/* One unit = one (sample, channel) plane of dx, owned by one thread: no races, and the
 * taps are summed in the same (kh, kw, i, j) order whatever the partition. */
static void col2im_range(void *ctx, size_t begin, size_t end)
{
    const col_job *J = ctx;
    const sp_conv_geom *g = J->g;
    int k = g->k, s = g->stride, p = g->pad, W = g->W, Wo = g->Wo, P = g->Ho * g->Wo;
    size_t ld = (size_t)J->nb * P;
    for (size_t u = begin; u < end; u++) {
        int bb = (int)(u / (size_t)g->C), c = (int)(u % (size_t)g->C);
        float *plane = J->dx + ((size_t)(J->b0 + bb) * g->C + c) * g->H * W;
        memset(plane, 0, (size_t)g->H * W * sizeof(float));
        for (int kh = 0; kh < k; kh++) {
            int i_lo, i_hi;
            tap_outputs(kh, g->H, g->Ho, s, p, &i_lo, &i_hi);
            for (int kw = 0; kw < k; kw++) {
                int j_lo, j_hi;
                tap_outputs(kw, W, Wo, s, p, &j_lo, &j_hi);
                if (i_lo >= i_hi || j_lo >= j_hi) continue;
                float *src = J->col + (size_t)((c * k + kh) * k + kw) * ld + (size_t)bb * P;
                if (s == 1 && Wo == W) {
                    /* as in im2col: zero the padding taps of this col segment (scratch),
                     * then the band of rows is one contiguous add */
                    for (int i = i_lo; i < i_hi; i++) {
                        for (int j = 0; j < j_lo; j++) src[(size_t)i * W + j] = 0.0f;
                        for (int j = j_hi; j < W; j++) src[(size_t)i * W + j] = 0.0f;
                    }
                    size_t first = (size_t)i_lo * W + j_lo, last = (size_t)(i_hi - 1) * W + j_hi;
                    ptrdiff_t shift = (ptrdiff_t)(kh - p) * W + (kw - p);
                    add_floats(plane + (ptrdiff_t)first + shift, src + first, last - first);
                    continue;
                }
                for (int i = i_lo; i < i_hi; i++) {
                    float *restrict d = plane + (size_t)(i * s - p + kh) * W;
                    const float *restrict srow = src + (size_t)i * Wo;
                    if (s == 1)
                        add_floats(d + j_lo - p + kw, srow + j_lo, (size_t)(j_hi - j_lo));
                    else
                        for (int j = j_lo; j < j_hi; j++) d[j * s - p + kw] += srow[j];
                }
            }
        }
    }
}

void sp_col2im(const sp_conv_geom *g, float *col, int b0, int b1, float *dx)
{
    col_job J = {.g = g, .col = col, .dx = dx, .b0 = b0, .nb = b1 - b0};
    sp_parallel_for((size_t)J.nb * g->C, col2im_range, &J);
}
