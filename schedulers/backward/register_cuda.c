/* register_cuda.c — the backward engines' device parts (make CUDA=1 only): today the ooo
 * engine's two-stream executor (ooo_cuda.cu); bppsa's device products need no
 * registration. sp_cuda_start (cli/cuda_start.h) calls it. */
#include "schedulers/backward/engine.h"
#include "schedulers/backward/ooo.h"

void sp_backward_cuda_register(void) { sp_ooo_cuda_register(); }
