/* cudnn_conv.h — the device convolution that conv2d (layers/conv2d_cuda.cu) and
 * conv2d_groups (layers/conv2d_groups_cuda.cu) both run: conv2d is the group count 1.
 * NCHW float32, a k×k window, zero padding, no dilation.
 *
 *   forward: y = conv_G(x, W)   (cudnnConvolutionForward, beta 0), then y += b
 *   δ:       dx = conv_Gᵀ(dy, W)                     (cudnnConvolutionBackwardData, beta 0)
 *   G:       dW += dy ⋆_G x                          (cudnnConvolutionBackwardFilter, beta 1)
 *            db += Σ_{b,p} dy  (own kernel, one thread per channel; conv2d sums in float,
 *                               conv2d_groups in float64 in its CPU op's order)
 *   Jᵀ:      the CPU ops' pattern — row (c, h, w) lists, for each o of c's group, the
 *            outputs (i, j) whose window covers (h, w), in column order (o, i, j) —
 *            filled with the weight each entry multiplies; one thread per (sample, row).
 * W is params[0] ([O, C/G, k, k]); a bias, when the layer has one, params[1].
 *
 * A plan per shape (batch, channels, image, kernel, stride, padding, groups) holds the
 * cuDNN descriptors and the three algorithms chosen once with cudnnFind*Algorithm: the
 * fastest that succeeds, is deterministic (CUDNN_DETERMINISTIC: the same inputs give the
 * same bits, which the engines' bitwise comparisons and repeatable runs rely on; on an
 * H200 cuDNN ranked a non-deterministic backward-filter algorithm fastest) and needs at
 * most 512 MiB of workspace, else sp_fail; the workspace itself comes from the tape's
 * device arena at each call. Plans live until the process ends. Sums are cuDNN's order:
 * results match the CPU ops to 1e-5 of the largest entry, not bitwise. */
#ifndef SP_CUDNN_CONV_H
#define SP_CUDNN_CONV_H

#include "core/kernels/cuda.h"
extern "C" {
#include "core/op.h"
#include "core/tape.h"
}

/* The twins' forward, δ, G and Jᵀ (the sp_kernels members of the same names): the
 * window and group count come from the layer (layers/conv2d_internal.h: conv_layer, one
 * group; gconv_layer). */
void sp_cudnn_conv_forward(sp_node *n);
void sp_cudnn_conv_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx);
void sp_cudnn_conv_backward_params(sp_node *n, const sp_tensor *dy);
void sp_cudnn_conv_jt_values(const sp_node *n, int i, int b, sp_csr *jt);
void sp_cudnn_conv_jt_values_all(const sp_node *n, int i, const sp_csr *jt, size_t stride);

/* The five above as one kernel table, which conv2d and conv2d_groups both register. */
const sp_kernels *sp_cudnn_conv_kernels(void);

#endif
