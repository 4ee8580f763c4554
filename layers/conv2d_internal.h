/* conv2d_internal.h — the layer structs of conv2d and conv2d_groups, shared by each op's
 * file and the device convolution of their CUDA twins (layers/cudnn_conv.cu), which
 * reads the geometry from them. Not part of the public API (layers/layers.h). */
#ifndef SP_CONV2D_INTERNAL_H
#define SP_CONV2D_INTERNAL_H

#include <stdbool.h>
#include "core/op.h"

typedef struct conv_layer {
    sp_layer base;
    int cin, cout, k, stride, pad;
    float *zero_bias;   /* [cout] zeros: the bias of a conv built without one */
} conv_layer;

typedef struct gconv_layer {
    sp_layer base;
    int cin, cout, k, stride, pad, groups;
    bool bias;
} gconv_layer;

/* Whether conv2d's δ of C input channels runs on oneDNN, whose channel block is blk
 * (sp_dnnl_block), or on im2col's GEMM and col2im: oneDNN where C >= 16 or its padding
 * to whole blocks adds at most a third to the channels (6 of 8 on AVX2, not 6 of 16). */
bool sp_conv_delta_on_dnnl(int C, int blk);

#endif
