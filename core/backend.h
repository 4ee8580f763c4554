/* backend.h — device dispatch and the dense kernels ops share.
 *
 * Ops are written once per device: the CPU opdef in layers/<op>.c, a device twin in
 * layers/<op>_cuda.cu registered with sp_op_register_device by that backend's init.
 * sp_apply picks the twin matching the input tensor's device, so no op logic carries
 * #ifdefs. */
#ifndef SP_BACKEND_H
#define SP_BACKEND_H

#include <stdbool.h>
#include "core/op.h"

void sp_op_register_device(const sp_opdef *cpu_op, sp_device dev, const sp_opdef *impl);
/* The implementation of op for dev; sp_fail if that device has none. */
const sp_opdef *sp_op_for_device(const sp_opdef *op, sp_device dev);
const char *sp_device_name(sp_device dev);

/* Row-major C[M×N] = alpha·op(A)·op(B) + beta·C (CPU: OpenBLAS cblas_sgemm). */
void sp_gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
             const float *B, int ldb, float beta, float *C, int ldc);

#endif
