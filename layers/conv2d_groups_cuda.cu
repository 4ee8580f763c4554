/* conv2d_groups_cuda.cu — the CUDA twin of layers/conv2d_groups.c: grouped 2-D
 * convolution (nn.Conv2d(..., groups=G)), NCHW float32, on cuDNN's grouped convolution:
 * the shared device convolution (layers/cudnn_conv.h) with G groups. Results match the
 * CPU op to 1e-5 of its largest entry; Jᵀ (the weights themselves) bitwise. */
#include "layers/cudnn_conv.h"
extern "C" {
#include "core/device.h"
#include "layers/layers.h"
}

extern "C" void sp_conv2d_groups_cuda_register(void)
{
    sp_op_register_kernels(&sp_op_conv2d_groups, SP_CUDA, sp_cudnn_conv_kernels());
}
