/* im2col.c — sliding-window geometry, im2col and col2im (see im2col.h). */
#include <string.h>
#include "core/parallel.h"
#include "layers/im2col.h"

static int floor_div(int a, int d) { return a >= 0 ? a / d : -((-a + d - 1) / d); }
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

typedef struct col_job {
    const sp_conv_geom *g;
    const float *src;
    float *dst;
    int b0, nb;
} col_job;

/* One unit = one (row (c, kh, kw), sample) segment of Ho·Wo columns. */
static void im2col_range(void *ctx, size_t begin, size_t end)
{
    const col_job *J = ctx;
    const sp_conv_geom *g = J->g;
    int k = g->k, s = g->stride, p = g->pad, Wo = g->Wo, P = g->Ho * g->Wo;
    size_t ld = (size_t)J->nb * P;
    for (size_t u = begin; u < end; u++) {
        int r = (int)(u / (size_t)J->nb), bb = (int)(u % (size_t)J->nb);
        int c = r / (k * k), kh = r / k % k, kw = r % k;
        const float *xp = J->src + ((size_t)(J->b0 + bb) * g->C + c) * g->H * g->W;
        float *dst = J->dst + (size_t)r * ld + (size_t)bb * P;
        int i_lo, i_hi, j_lo, j_hi;
        tap_outputs(kh, g->H, g->Ho, s, p, &i_lo, &i_hi);
        tap_outputs(kw, g->W, Wo, s, p, &j_lo, &j_hi);
        memset(dst, 0, (size_t)i_lo * Wo * sizeof(float));
        memset(dst + (size_t)i_hi * Wo, 0, (size_t)(g->Ho - i_hi) * Wo * sizeof(float));
        for (int i = i_lo; i < i_hi; i++) {
            float *d = dst + (size_t)i * Wo;
            const float *row = xp + (size_t)(i * s - p + kh) * g->W;
            for (int j = 0; j < j_lo; j++) d[j] = 0.0f;
            if (s == 1)
                memcpy(d + j_lo, row + j_lo - p + kw, (size_t)(j_hi - j_lo) * sizeof(float));
            else
                for (int j = j_lo; j < j_hi; j++) d[j] = row[j * s - p + kw];
            for (int j = j_hi; j < Wo; j++) d[j] = 0.0f;
        }
    }
}

void sp_im2col(const sp_conv_geom *g, const float *x, int b0, int b1, float *col)
{
    col_job J = {.g = g, .src = x, .dst = col, .b0 = b0, .nb = b1 - b0};
    sp_parallel_for((size_t)g->C * g->k * g->k * J.nb, im2col_range, &J);
}

/* One unit = one (sample, channel) plane of dx, owned by one thread: no races, and the
 * taps are summed in the same (kh, kw, i, j) order whatever the partition. */
static void col2im_range(void *ctx, size_t begin, size_t end)
{
    const col_job *J = ctx;
    const sp_conv_geom *g = J->g;
    int k = g->k, s = g->stride, p = g->pad, Wo = g->Wo, P = g->Ho * g->Wo;
    size_t ld = (size_t)J->nb * P;
    for (size_t u = begin; u < end; u++) {
        int bb = (int)(u / (size_t)g->C), c = (int)(u % (size_t)g->C);
        float *plane = J->dst + ((size_t)(J->b0 + bb) * g->C + c) * g->H * g->W;
        memset(plane, 0, (size_t)g->H * g->W * sizeof(float));
        for (int kh = 0; kh < k; kh++) {
            int i_lo, i_hi;
            tap_outputs(kh, g->H, g->Ho, s, p, &i_lo, &i_hi);
            for (int kw = 0; kw < k; kw++) {
                int j_lo, j_hi;
                tap_outputs(kw, g->W, Wo, s, p, &j_lo, &j_hi);
                const float *src = J->src + (size_t)((c * k + kh) * k + kw) * ld + (size_t)bb * P;
                for (int i = i_lo; i < i_hi; i++) {
                    float *restrict d = plane + (size_t)(i * s - p + kh) * g->W;
                    const float *restrict srow = src + (size_t)i * Wo;
                    if (s == 1)
                        for (int j = j_lo; j < j_hi; j++) d[j - p + kw] += srow[j];
                    else
                        for (int j = j_lo; j < j_hi; j++) d[j * s - p + kw] += srow[j];
                }
            }
        }
    }
}

void sp_col2im(const sp_conv_geom *g, const float *col, int b0, int b1, float *dx)
{
    col_job J = {.g = g, .src = col, .dst = dx, .b0 = b0, .nb = b1 - b0};
    sp_parallel_for((size_t)J.nb * g->C, col2im_range, &J);
}
