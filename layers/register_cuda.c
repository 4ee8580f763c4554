/* register_cuda.c — the layers' CUDA twins, registered at once (make CUDA=1 only).
 * Each twin file layers/<op>_cuda.cu registers its kernel tables with
 * sp_op_register_kernels (core/device.h); a new twin adds its function to both lists. */
#include "layers/layers.h"

void sp_linear_cuda_register(void);
void sp_conv2d_cuda_register(void);
void sp_conv2d_groups_cuda_register(void);
void sp_relu_cuda_register(void);
void sp_tanh_cuda_register(void);
void sp_sigmoid_cuda_register(void);
void sp_maxpool2d_cuda_register(void);
void sp_avgpool2d_cuda_register(void);   /* avgpool2d and global_avgpool2d */
void sp_flatten_cuda_register(void);
void sp_batchnorm2d_cuda_register(void);
void sp_dropout_cuda_register(void);
void sp_add_cuda_register(void);
void sp_concat_cuda_register(void);
void sp_recurrent_cuda_register(void);   /* rnn and gru */
void sp_softmax_ce_cuda_register(void);

void sp_layers_cuda_register(void)
{
    sp_linear_cuda_register();
    sp_conv2d_cuda_register();
    sp_conv2d_groups_cuda_register();
    sp_relu_cuda_register();
    sp_tanh_cuda_register();
    sp_sigmoid_cuda_register();
    sp_maxpool2d_cuda_register();
    sp_avgpool2d_cuda_register();
    sp_flatten_cuda_register();
    sp_batchnorm2d_cuda_register();
    sp_dropout_cuda_register();
    sp_add_cuda_register();
    sp_concat_cuda_register();
    sp_recurrent_cuda_register();
    sp_softmax_ce_cuda_register();
}
