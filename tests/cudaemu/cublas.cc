/* cublas.cc — the CUDA emulator's cuBLAS: the routines scanprop calls, written from the
 * cuBLAS documentation as naive loops (column-major, float accumulation in k order),
 * against the toolkit's cublas_v2.h. Each routine validates its arguments as cuBLAS
 * does (CUBLAS_STATUS_INVALID_VALUE for a leading dimension below the row count or a
 * negative size), checks that every matrix's extent — ld·(cols − 1) + rows elements —
 * lies inside one device allocation, and queues the arithmetic on the handle's stream.
 * beta = 0 never reads C (it may hold NaN), as documented. */
#include <cstring>
#include <string>
#include <cublas_v2.h>
#include "emu.h"

struct cublasContext {
    cudaStream_t stream = nullptr;
    cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

namespace {

/* [rows × cols] column-major at p with leading dimension ld, inside one allocation. */
void check_matrix(const char *who, const char *name, const float *p, int rows, int cols, int ld)
{
    if (rows == 0 || cols == 0) return;
    std::string w = std::string(who) + ": matrix " + name + " (" + std::to_string(rows) + "x" +
                    std::to_string(cols) + ", ld " + std::to_string(ld) + ")";
    emu::check_device_range(w.c_str(), p, ((size_t)ld * (cols - 1) + rows) * sizeof(float));
}

void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const float *A, int lda,
          const float *B, int ldb, float beta, float *C, int ldc)
{
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float acc = 0.0f;
            for (int l = 0; l < k; l++) {
                float a = ta == CUBLAS_OP_N ? A[i + (size_t)l * lda] : A[l + (size_t)i * lda];
                float b = tb == CUBLAS_OP_N ? B[l + (size_t)j * ldb] : B[j + (size_t)l * ldb];
                acc += a * b;
            }
            float *c = &C[i + (size_t)j * ldc];
            *c = beta == 0.0f ? alpha * acc : alpha * acc + beta * *c;
        }
}

cublasStatus_t check_gemm(const char *who, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                          const float *A, int lda, const float *B, int ldb, const float *C, int ldc,
                          bool extents = true)
{
    if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
    if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T))
        return CUBLAS_STATUS_INVALID_VALUE;
    int ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
    int br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
    if (lda < (ar > 1 ? ar : 1) || ldb < (br > 1 ? br : 1) || ldc < (m > 1 ? m : 1)) return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0 || !extents) return CUBLAS_STATUS_SUCCESS;
    check_matrix(who, "A", A, ar, ac, lda);
    check_matrix(who, "B", B, br, bc, ldb);
    check_matrix(who, "C", C, m, n, ldc);
    return CUBLAS_STATUS_SUCCESS;
}

}   // namespace

extern "C" {

cublasStatus_t cublasCreate(cublasHandle_t *handle)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return CUBLAS_STATUS_NOT_INITIALIZED;
    *handle = new cublasContext;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle)
{
    cudaStreamSynchronize(handle->stream);
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t streamId)
{
    handle->stream = streamId;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t *streamId)
{
    *streamId = handle->stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode)
{
    handle->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode)
{
    *mode = handle->math;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusName(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    default: return "CUBLAS_STATUS_INTERNAL_ERROR";
    }
}

const char *cublasGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    default: return "an internal operation failed";
    }
}

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                           int k, const float *alpha, const float *A, int lda, const float *B, int ldb,
                           const float *beta, float *C, int ldc)
{
    cublasStatus_t s = check_gemm("cublasSgemm", transa, transb, m, n, k, A, lda, B, ldb, C, ldc);
    if (s != CUBLAS_STATUS_SUCCESS || m == 0 || n == 0) return s;
    float al = *alpha, be = *beta;   /* host pointer mode: read at the call */
    emu::enqueue(handle->stream, "cublasSgemm", [=]() { gemm(transa, transb, m, n, k, al, A, lda, B, ldb, be, C, ldc); });
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float *alpha, const float *A, int lda,
                                         long long int strideA, const float *B, int ldb, long long int strideB,
                                         const float *beta, float *C, int ldc, long long int strideC, int batchCount)
{
    if (batchCount < 0) return CUBLAS_STATUS_INVALID_VALUE;
    for (int b = 0; b < batchCount; b++) {
        cublasStatus_t s = check_gemm("cublasSgemmStridedBatched", transa, transb, m, n, k, A + b * strideA, lda,
                                      B + b * strideB, ldb, C + b * strideC, ldc);
        if (s != CUBLAS_STATUS_SUCCESS) return s;
    }
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    float al = *alpha, be = *beta;
    emu::enqueue(handle->stream, "cublasSgemmStridedBatched", [=]() {
        for (int b = 0; b < batchCount; b++)
            gemm(transa, transb, m, n, k, al, A + b * strideA, lda, B + b * strideB, ldb, be, C + b * strideC, ldc);
    });
    return CUBLAS_STATUS_SUCCESS;
}

/* Pointer arrays live in device memory: their extent is checked at the call, the
 * pointers they hold (and each matrix's extent) when the work runs, as the GPU reads
 * them then. */
cublasStatus_t cublasSgemmBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                  int n, int k, const float *alpha, const float *const Aarray[], int lda,
                                  const float *const Barray[], int ldb, const float *beta, float *const Carray[],
                                  int ldc, int batchCount)
{
    if (batchCount < 0) return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t s = check_gemm("cublasSgemmBatched", transa, transb, m, n, k, nullptr, lda, nullptr, ldb, nullptr,
                                  ldc, false);
    if (s != CUBLAS_STATUS_SUCCESS || m == 0 || n == 0 || batchCount == 0) return s;
    emu::check_device_range("cublasSgemmBatched: Aarray", Aarray, (size_t)batchCount * sizeof(float *));
    emu::check_device_range("cublasSgemmBatched: Barray", Barray, (size_t)batchCount * sizeof(float *));
    emu::check_device_range("cublasSgemmBatched: Carray", Carray, (size_t)batchCount * sizeof(float *));
    float al = *alpha, be = *beta;
    emu::enqueue(handle->stream, "cublasSgemmBatched", [=]() {
        for (int b = 0; b < batchCount; b++) {
            check_gemm("cublasSgemmBatched", transa, transb, m, n, k, Aarray[b], lda, Barray[b], ldb, Carray[b], ldc);
            gemm(transa, transb, m, n, k, al, Aarray[b], lda, Barray[b], ldb, be, Carray[b], ldc);
        }
    });
    return CUBLAS_STATUS_SUCCESS;
}

}   // extern "C"
