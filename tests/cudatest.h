/* cudatest.h — helpers shared by the CUDA suites (tests/test_*_cuda.c), which build only
 * with make CUDA=1 (a GPU: make test-cuda; the emulator: make test-cuda-emu). */
#ifndef SP_CUDATEST_H
#define SP_CUDATEST_H

#include <criterion/criterion.h>
#include "core/kernels/cuda.h"
#include "core/tensor.h"
#include "cli/cuda_start.h"

/* First statement of every test: without a GPU the test fails with this line (an
 * assertion in a .init fixture would be reported as a crash). */
static inline void need_gpu(void)
{
    const char *why = NULL;
    int n = sp_cuda_device_count(&why);
    cr_assert_gt(n, 0, "no CUDA device: %s (make test-cuda must run on a GPU machine)", why);
    sp_cuda_start(0);
}

/* A host copy of device tensor d (heap; free with sp_tensor_free). */
static inline sp_tensor download(const sp_tensor *d)
{
    sp_tensor h = sp_tensor_new(d->ndim, d->shape);
    sp_tensor_to_host(&h, d);
    return h;
}

#endif
