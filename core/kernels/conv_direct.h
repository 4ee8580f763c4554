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
 * same on every call of a shape: bitwise repeatable; not bitwise the GEMM path. */
#ifndef SP_CONV_DIRECT_H
#define SP_CONV_DIRECT_H

#include <stdbool.h>
#include <stddef.h>

typedef struct sp_conv_direct {
    int C, H, W;   /* input planes                      */
    int O, k, pad; /* output channels, kernel, padding  */
    int Ho, Wo;    /* output plane (stride 1)           */
} sp_conv_direct;

/* Whether this process runs the kernel for C input channels, a k×k kernel and stride s. */
bool sp_conv_direct_on(int C, int k, int stride);

/* Floats of one thread's scratch (the zero-padded planes of one sample). */
size_t sp_conv_direct_floats(const sp_conv_direct *d);

/* Zeroes scratch (its padding stays zero: each sample writes only the interior). */
void sp_conv_direct_prepare(const sp_conv_direct *d, float *scratch);

/* One sample: y[O][Ho][Wo] = bias + w ⊛ x (w [O][C][k][k]), then max(y, 0) with relu. */
void sp_conv_direct_forward(const sp_conv_direct *d, const float *x, const float *w, const float *bias, bool relu,
                            float *y, float *scratch);

/* One sample's weight gradient added to dw [O][C][k][k]: dw += dy ⊛ x. */
void sp_conv_direct_grad(const sp_conv_direct *d, const float *x, const float *dy, float *dw, float *scratch);

#endif
