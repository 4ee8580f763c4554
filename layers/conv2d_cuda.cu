/* conv2d_cuda.cu — the CUDA twin of layers/conv2d.c: NCHW float32 convolution on cuDNN,
 * any kernel, stride and padding the CPU op supports (zero padding, no dilation): the
 * shared device convolution (layers/cudnn_conv.h) with one group. Results match the CPU
 * op to 1e-5 of the largest entry, not bitwise. */
#include "layers/cudnn_conv.h"
extern "C" {
#include "core/device.h"
#include "layers/layers.h"
}

extern "C" void sp_conv2d_cuda_register(void)
{
    sp_op_register_kernels(&sp_op_conv2d, SP_CUDA, sp_cudnn_conv_kernels());
}
