/* conv2d_groups_cuda.cu — the CUDA twin of layers/conv2d_groups.c: grouped 2-D
 * convolution (nn.Conv2d(..., groups=G)), NCHW float32, on cuDNN's grouped convolution:
 * the shared device convolution (layers/cudnn_conv.h) with G groups. Results match the
 * CPU op to 1e-5 of its largest entry; Jᵀ (the weights themselves) bitwise. */
#include "layers/cudnn_conv.h"
extern "C" {
#include "core/device.h"
#include "layers/layers.h"
}

/* The shared convolution's functions, which read the geometry from the layer. */
static const auto gconv_cuda_forward = sp_cudnn_conv_forward;
static const auto gconv_cuda_backward_input = sp_cudnn_conv_backward_input;
static const auto gconv_cuda_backward_params = sp_cudnn_conv_backward_params;
static const auto gconv_cuda_jt_values = sp_cudnn_conv_jt_values;
static const auto gconv_cuda_jt_values_all = sp_cudnn_conv_jt_values_all;

static sp_kernels gconv_cuda_kernels;

extern "C" void sp_conv2d_groups_cuda_register(void)
{
    gconv_cuda_kernels.forward = gconv_cuda_forward;
    gconv_cuda_kernels.backward_input = gconv_cuda_backward_input;
    gconv_cuda_kernels.backward_params = gconv_cuda_backward_params;
    gconv_cuda_kernels.jt_values = gconv_cuda_jt_values;
    gconv_cuda_kernels.jt_values_all = gconv_cuda_jt_values_all;
    sp_op_register_kernels(&sp_op_conv2d_groups, SP_CUDA, &gconv_cuda_kernels);
}
