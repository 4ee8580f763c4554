/* im2col.h — the sliding-window geometry shared by conv2d and maxpool2d, and the
 * im2col / col2im transforms that turn a convolution into one GEMM.
 *
 * A column buffer for samples [b0, b1) of an NCHW tensor is row-major
 * [C·k·k, (b1−b0)·Ho·Wo]: row (c, kh, kw), column (b − b0, i, j) holds
 * x[b][c][i·s − p + kh][j·s − p + kw], or 0 where that falls in the padding. Folding
 * the batch into the columns makes each layer's GEMM large enough for OpenBLAS to run
 * near peak even when Ho·Wo is tiny (VGG-11's last convs have Ho·Wo = 4). */
#ifndef SP_IM2COL_H
#define SP_IM2COL_H

typedef struct sp_conv_geom {
    int C, H, W;       /* input channels and plane          */
    int Ho, Wo;        /* output plane                      */
    int k, stride, pad;
} sp_conv_geom;

/* floor((in + 2·pad − k) / stride) + 1, or 0 when the window does not fit. */
int sp_conv_out_size(int in, int k, int stride, int pad);

/* The output positions [*lo, *hi) along one dimension whose window covers input
 * position x (empty when *lo >= *hi: a stride larger than k skips inputs). Output i
 * covers inputs i·stride − pad … i·stride − pad + k − 1. */
void sp_window_range(int x, int k, int stride, int pad, int n_out, int *lo, int *hi);

/* col ← im2col of samples [b0, b1) of x (whole NCHW batch). Runs on the thread pool;
 * every entry of col is written (padding as 0). */
void sp_im2col(const sp_conv_geom *g, const float *x, int b0, int b1, float *col);

/* dx[b] ← col2im(col) for samples [b0, b1): each input element receives the sum of
 * every column entry that im2col would have copied from it, in a fixed order, so the
 * result is the same for any thread count. Overwrites those samples of dx. col is
 * scratch: its entries that fall in the padding may be set to 0. */
void sp_col2im(const sp_conv_geom *g, float *col, int b0, int b1, float *dx);

#endif
