/* conv_direct.h — the project's own direct convolution for a few input channels.
 *
 * LeNet-5's first convolution (1 input channel, 6 outputs, 5×5 on 28×28 with padding 2)
 * is a poor shape for every library path: oneDNN pads the channels to its block, and
 * im2col writes 25 columns per output pixel for a GEMM of 6 rows. This kernel reads a
 * zero-padded copy of the sample's planes and keeps 3 output channels × 32 output
 * columns (forward) or 2 output channels × k taps (the weight gradient) in AVX2
 * registers, one FMA per tap, channel and 8 columns. It is compiled for AVX2 + FMA and
 * runs only where that is the best vector unit the process may use (sp_cpu_isa_level()
 * == 1): on AVX-512 the im2col path, measured faster there, stays.
 *
 * Stride 1, k ∈ {3, 5}, C ≤ 3 (sp_conv_direct_on). The sums run in a fixed order, the
 * same on every call of a shape: bitwise repeatable; not bitwise the GEMM path.
 *
 * A second, wide kernel takes 4 to 16 input channels into 16·n outputs, 5×5, stride 1
 * (LeNet-5's conv2: 6 → 16 on 14×14): its vectors run across 16 output channels, so
 * neither the 6 input channels nor the 10-column rows are padded to a vector; oneDNN
 * pads the 6 channels to its block of 8 and reorders both sides of each call. It has a
 * δ too (sp_conv_direct_delta): 16 columns of dx × up to 6 input channels in 12
 * accumulators, only the kernel rows that reach a row of dy. */
#ifndef SP_CONV_DIRECT_H
#define SP_CONV_DIRECT_H

#include <stdbool.h>
#include <stddef.h>

typedef struct sp_conv_direct {
    int C, H, W;   /* input planes                      */
    int O, k, pad; /* output channels, kernel, padding  */
    int Ho, Wo;    /* output plane (stride 1)           */
} sp_conv_direct;

/* Whether this process runs a kernel for C input channels, O outputs, a k×k kernel and
 * stride s. */
bool sp_conv_direct_on(int C, int O, int k, int pad, int stride);

/* Floats of one thread's scratch (the zero-padded planes of one sample; the wide
 * kernel's packed weights, dyᵀ and output row). */
size_t sp_conv_direct_floats(const sp_conv_direct *d);

/* Zeroes scratch's planes (their padding stays zero: each sample writes only the
 * interior) and, for the wide kernel's forward, packs w [O][C][k][k] into it (w NULL
 * for G, which does not read the weights). */
void sp_conv_direct_prepare(const sp_conv_direct *d, const float *w, float *scratch);

/* One sample: y[O][Ho][Wo] = bias + w ⊛ x (w [O][C][k][k]), then max(y, 0) with relu. */
void sp_conv_direct_forward(const sp_conv_direct *d, const float *x, const float *w, const float *bias, bool relu,
                            float *y, float *scratch);

/* One sample's weight gradient added to dw [O][C][k][k]: dw += dy ⊛ x. */
void sp_conv_direct_grad(const sp_conv_direct *d, const float *x, const float *dy, float *dw, float *scratch);

/* Whether the kernel has a δ for this shape (the wide one); the caller's otherwise. */
bool sp_conv_direct_has_delta(const sp_conv_direct *d);

/* One sample's δ: dx [C][H][W] = (or +=, acc) the transposed convolution of dy [O][Ho][Wo]
 * with w [O][C][k][k]; scratch prepared by sp_conv_direct_prepare (w may be NULL). */
void sp_conv_direct_delta(const sp_conv_direct *d, const float *w, const float *dy, float *dx, bool acc,
                          float *scratch);

#endif
