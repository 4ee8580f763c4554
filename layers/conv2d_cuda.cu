/* conv2d_cuda.cu — the CUDA twin of layers/conv2d.c: NCHW float32 convolution on cuDNN,
 * any kernel, stride and padding the CPU op supports (zero padding, no dilation): the
 * shared device convolution (layers/cudnn_conv.h) with one group. Results match the CPU
 * op to 1e-5 of the largest entry, not bitwise. */
#include "layers/cudnn_conv.h"
extern "C" {
#include "core/device.h"
#include "layers/layers.h"
}

/* The shared convolution's functions, which read the geometry from the layer. */
static const auto conv_cuda_forward = sp_cudnn_conv_forward;
static const auto conv_cuda_backward_input = sp_cudnn_conv_backward_input;
static const auto conv_cuda_backward_params = sp_cudnn_conv_backward_params;
static const auto conv_cuda_jt_values = sp_cudnn_conv_jt_values;
static const auto conv_cuda_jt_values_all = sp_cudnn_conv_jt_values_all;

static sp_kernels conv_cuda_kernels;

extern "C" void sp_conv2d_cuda_register(void)
{
    conv_cuda_kernels.forward = conv_cuda_forward;
    conv_cuda_kernels.backward_input = conv_cuda_backward_input;
    conv_cuda_kernels.backward_params = conv_cuda_backward_params;
    conv_cuda_kernels.jt_values = conv_cuda_jt_values;
    conv_cuda_kernels.jt_values_all = conv_cuda_jt_values_all;
    sp_op_register_kernels(&sp_op_conv2d, SP_CUDA, &conv_cuda_kernels);
}
