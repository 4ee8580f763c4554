/* cusparse.cc — the CUDA emulator's cuSPARSE: the handle life cycle scanprop uses
 * (create, stream, destroy, status strings), from the cuSPARSE documentation. */
#define DISABLE_CUSPARSE_DEPRECATED
#include <cusparse.h>
#include "emu.h"

struct cusparseContext {
    cudaStream_t stream = nullptr;
};

extern "C" {

cusparseStatus_t cusparseCreate(cusparseHandle_t *handle)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return CUSPARSE_STATUS_NOT_INITIALIZED;
    *handle = new cusparseContext;
    return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseDestroy(cusparseHandle_t handle)
{
    delete handle;
    return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseSetStream(cusparseHandle_t handle, cudaStream_t streamId)
{
    handle->stream = streamId;
    return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseGetStream(cusparseHandle_t handle, cudaStream_t *streamId)
{
    *streamId = handle->stream;
    return CUSPARSE_STATUS_SUCCESS;
}

const char *cusparseGetErrorName(cusparseStatus_t s)
{
    return s == CUSPARSE_STATUS_SUCCESS ? "CUSPARSE_STATUS_SUCCESS" : "CUSPARSE_STATUS_INTERNAL_ERROR";
}

const char *cusparseGetErrorString(cusparseStatus_t s)
{
    return s == CUSPARSE_STATUS_SUCCESS ? "success" : "an internal operation failed";
}

}   // extern "C"
