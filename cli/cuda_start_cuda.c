/* cuda_start_cuda.c — the backend, then each module's device twins (cuda_start.h). */
#include "core/kernels/cuda.h"
#include "layers/layers.h"
#include "optim/optim.h"
#include "schedulers/backward/engine.h"
#include "cli/cuda_start.h"

void sp_cuda_start(int device_id)
{
    sp_cuda_init(device_id);
    sp_layers_cuda_register();
    sp_optim_cuda_register();
    sp_backward_cuda_register();
}
