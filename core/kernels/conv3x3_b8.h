/* conv3x3_b8.h — the project's own 3×3 convolution on oneDNN's 8-channel blocked layout.
 *
 * On an AVX2-only CPU oneDNN 2.6 has no f32 Winograd and its direct AVX2 kernels reach
 * 26–30 % of the FMA peak on ResNet-20's 16-channel convolutions (forward, δ and G of
 * 3×3, stride 1, 32×32) and about 60 % on its 32- and 64-channel ones. This kernel keeps
 * 16 output channels × 4 output columns in 8 AVX2 accumulators and takes, per input
 * channel and tap, 2 weight loads, 4 input broadcasts and 8 FMAs; δ is the same kernel on
 * dy with the weights transposed and flipped, and G keeps 2 input channels × 3 taps × 16
 * output channels in 12 accumulators along each output row.
 *
 * Shapes: k = 3, stride 1, padding 1, C and O multiples of 16 (δ groups C), W a multiple
 * of 4 (sp_conv3_b8_on); it runs only where AVX2 is the widest vector unit the process may
 * use (sp_cpu_isa_level() == 1). Per sample; the caller splits samples over threads.
 * Activations in nChw8c (a sample: [C/8][H][W][8]) or NCHW; the kernels themselves read
 * a zero-padded blocked copy, so the bits do not depend on the layout. Each sum runs in a
 * fixed order, the same on every call of a shape: bitwise repeatable, not bitwise
 * oneDNN's or the GEMM path's. */
#ifndef SP_CONV3X3_B8_H
#define SP_CONV3X3_B8_H

#include <stdbool.h>
#include <stddef.h>

typedef struct sp_conv3_b8 {
    int C, O, H, W;   /* input channels, output channels, plane (the output's too) */
} sp_conv3_b8;

/* Whether this process runs the kernel for this convolution. */
bool sp_conv3_b8_on(int C, int O, int H, int W, int k, int stride, int pad);

/* Floats of a zero-padded blocked copy of one sample's planes of `channels` channels. */
size_t sp_conv3_b8_padded_floats(const sp_conv3_b8 *d, int channels);

/* Zeroes a padded copy (its border stays zero: sp_conv3_b8_pad writes the interior). */
void sp_conv3_b8_clear(const sp_conv3_b8 *d, int channels, float *xp);

/* One sample of `channels` channels (NCHW with blk 0, else nChw8c with blk 8) into the
 * interior of its padded copy. */
void sp_conv3_b8_pad(const sp_conv3_b8 *d, int channels, const float *x, int blk, float *xp);

/* The packed weights: C·O·9 floats. delta: those of δ's convolution (dy → dx: O input
 * channels, C outputs, each tap flipped). w: [O][C][3][3]. */
size_t sp_conv3_b8_packed_floats(const sp_conv3_b8 *d);
void sp_conv3_b8_pack(const sp_conv3_b8 *d, const float *w, bool delta, float *wp);

/* One sample's forward: y (nChw8c, [O/8][H][W][8]) = bias + w ⊛ x, then max(y, 0) with
 * relu; xp the padded input, wp packed for the forward, bias NULL for none. */
void sp_conv3_b8_forward(const sp_conv3_b8 *d, const float *xp, const float *wp, const float *bias, bool relu,
                         float *y);

/* One sample's δ: dx (nChw8c, [C/8][H][W][8]) = the transposed convolution of dy; dyp
 * the padded dy (O channels), wp packed for δ. */
void sp_conv3_b8_delta(const sp_conv3_b8 *d, const float *dyp, const float *wp, float *dx);

/* One sample's weight gradient added to part ([C][3][3][O], output channels innermost):
 * xp and dyp padded. sp_conv3_b8_unpack_add adds such a part to dw [O][C][3][3]. */
void sp_conv3_b8_grad(const sp_conv3_b8 *d, const float *xp, const float *dyp, float *part);
void sp_conv3_b8_unpack_add(const sp_conv3_b8 *d, const float *part, float *dw);

/* A blocked sample y (channels, [channels/8][H][W][8]) into dst in layout blk (0: NCHW,
 * 8: nChw8c), added to what dst holds with acc. */
void sp_conv3_b8_store(const sp_conv3_b8 *d, int channels, const float *y, int blk, bool acc, float *dst);

#endif
