/* cusparse.cc — the CUDA emulator's cuSPARSE: the handle life cycle scanprop uses
 * (create, stream, destroy, status strings) and the generic SpGEMM with structure reuse
 * that the bppsa engine calls (CSR descriptors; cusparseSpGEMMreuse_workEstimation /
 * _nnz / _copy / _compute), from the cuSPARSE documentation, as naive loops.
 *
 * The reuse API's phases, as documented: workEstimation and nnz each called twice
 * (first for the buffer sizes, then with the buffers), nnz fills C's row offsets and
 * makes C's nnz known (cusparseSpMatGetSize), copy writes C's column indices (sorted
 * within each row), compute fills C's values from A's and B's and may be repeated with
 * new values (cusparseCsrSetPointers). Checked: 32-bit indices, zero base, float
 * values, non-transposed operands, the phases in order, every buffer a device
 * allocation of at least the size this library asked for, every array's extent
 * inside one allocation, and C's pattern unchanged between copy and compute. The
 * arithmetic is queued on the handle's stream; nnz waits for it (C's nnz must reach
 * the host, as in cuSPARSE). */
#define DISABLE_CUSPARSE_DEPRECATED
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>
#include <cusparse.h>
#include "emu.h"

struct cusparseContext {
    cudaStream_t stream = nullptr;
};

struct cusparseSpMatDescr {
    int64_t rows = 0, cols = 0, nnz = 0;
    void *offsets = nullptr, *columns = nullptr, *values = nullptr;
};

struct cusparseSpGEMMDescr {
    int phase = 0;                       /* 1 estimated, 2 counted, 3 copied     */
    size_t size[6] = {0, 0, 0, 0, 0, 0}; /* bufferSize1 .. 5 this library asked  */
    std::vector<int32_t> ptr, idx;       /* C's pattern, found by the nnz phase   */
};

namespace {

const size_t BUF_BYTES = 256;   /* every phase's buffer: small, but it must be real */

bool csr_ok(const cusparseSpMatDescr *m) { return m && m->rows >= 0 && m->cols >= 0 && m->nnz >= 0; }

void check_csr(const char *who, const char *name, const cusparseSpMatDescr *m, bool values)
{
    std::string w = std::string(who) + ": " + name;
    emu::check_device_range((w + " row offsets").c_str(), m->offsets, (size_t)(m->rows + 1) * sizeof(int32_t));
    if (m->nnz == 0) return;
    emu::check_device_range((w + " column indices").c_str(), m->columns, (size_t)m->nnz * sizeof(int32_t));
    if (values) emu::check_device_range((w + " values").c_str(), m->values, (size_t)m->nnz * sizeof(float));
}

/* The size query (buffer NULL) or the check that the buffer is what was asked for. */
bool buffer_step(const char *who, size_t *size, void *buffer, size_t *asked)
{
    if (!size) return false;
    if (!buffer) {
        *size = *asked = BUF_BYTES;
        return false;
    }
    if (*asked == 0) emu::fail("%s: buffer given before its size was asked", who);
    emu::check_device_range(who, buffer, *asked);
    return true;
}

cusparseStatus_t check_ops(cusparseOperation_t a, cusparseOperation_t b, const cusparseSpMatDescr *A,
                           const cusparseSpMatDescr *B, const cusparseSpMatDescr *C)
{
    if (a != CUSPARSE_OPERATION_NON_TRANSPOSE || b != CUSPARSE_OPERATION_NON_TRANSPOSE)
        return CUSPARSE_STATUS_NOT_SUPPORTED;
    if (!csr_ok(A) || !csr_ok(B) || !csr_ok(C) || A->cols != B->rows || C->rows != A->rows || C->cols != B->cols)
        return CUSPARSE_STATUS_INVALID_VALUE;
    return CUSPARSE_STATUS_SUCCESS;
}

}   // namespace

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
    switch (s) {
    case CUSPARSE_STATUS_SUCCESS: return "CUSPARSE_STATUS_SUCCESS";
    case CUSPARSE_STATUS_INVALID_VALUE: return "CUSPARSE_STATUS_INVALID_VALUE";
    case CUSPARSE_STATUS_NOT_SUPPORTED: return "CUSPARSE_STATUS_NOT_SUPPORTED";
    default: return "CUSPARSE_STATUS_INTERNAL_ERROR";
    }
}

const char *cusparseGetErrorString(cusparseStatus_t s)
{
    switch (s) {
    case CUSPARSE_STATUS_SUCCESS: return "success";
    case CUSPARSE_STATUS_INVALID_VALUE: return "invalid value";
    case CUSPARSE_STATUS_NOT_SUPPORTED: return "operation not supported";
    default: return "an internal operation failed";
    }
}

cusparseStatus_t cusparseCreateCsr(cusparseSpMatDescr_t *spMatDescr, int64_t rows, int64_t cols, int64_t nnz,
                                   void *csrRowOffsets, void *csrColInd, void *csrValues,
                                   cusparseIndexType_t csrRowOffsetsType, cusparseIndexType_t csrColIndType,
                                   cusparseIndexBase_t idxBase, cudaDataType valueType)
{
    if (rows < 0 || cols < 0 || nnz < 0 || !spMatDescr) return CUSPARSE_STATUS_INVALID_VALUE;
    if (csrRowOffsetsType != CUSPARSE_INDEX_32I || csrColIndType != CUSPARSE_INDEX_32I ||
        idxBase != CUSPARSE_INDEX_BASE_ZERO || valueType != CUDA_R_32F)
        return CUSPARSE_STATUS_NOT_SUPPORTED;   /* what scanprop uses, and all this emulates */
    auto *m = new cusparseSpMatDescr;
    m->rows = rows, m->cols = cols, m->nnz = nnz;
    m->offsets = csrRowOffsets, m->columns = csrColInd, m->values = csrValues;
    *spMatDescr = m;
    return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseDestroySpMat(cusparseConstSpMatDescr_t spMatDescr)
{
    delete spMatDescr;
    return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseSpMatGetSize(cusparseConstSpMatDescr_t spMatDescr, int64_t *rows, int64_t *cols,
                                      int64_t *nnz)
{
    if (!spMatDescr) return CUSPARSE_STATUS_INVALID_VALUE;
    *rows = spMatDescr->rows, *cols = spMatDescr->cols, *nnz = spMatDescr->nnz;
    return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseCsrSetPointers(cusparseSpMatDescr_t spMatDescr, void *csrRowOffsets, void *csrColInd,
                                        void *csrValues)
{
    if (!spMatDescr) return CUSPARSE_STATUS_INVALID_VALUE;
    spMatDescr->offsets = csrRowOffsets, spMatDescr->columns = csrColInd, spMatDescr->values = csrValues;
    return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseSpGEMM_createDescr(cusparseSpGEMMDescr_t *descr)
{
    *descr = new cusparseSpGEMMDescr;
    return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseSpGEMM_destroyDescr(cusparseSpGEMMDescr_t descr)
{
    delete descr;
    return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseSpGEMMreuse_workEstimation(cusparseHandle_t handle, cusparseOperation_t opA,
                                                    cusparseOperation_t opB, cusparseConstSpMatDescr_t matA,
                                                    cusparseConstSpMatDescr_t matB, cusparseSpMatDescr_t matC,
                                                    cusparseSpGEMMAlg_t alg, cusparseSpGEMMDescr_t spgemmDescr,
                                                    size_t *bufferSize1, void *externalBuffer1)
{
    cusparseStatus_t st = check_ops(opA, opB, matA, matB, matC);
    if (st != CUSPARSE_STATUS_SUCCESS || !spgemmDescr) return st ? st : CUSPARSE_STATUS_INVALID_VALUE;
    if (!buffer_step("cusparseSpGEMMreuse_workEstimation: externalBuffer1", bufferSize1, externalBuffer1,
                     &spgemmDescr->size[1]))
        return bufferSize1 ? CUSPARSE_STATUS_SUCCESS : CUSPARSE_STATUS_INVALID_VALUE;
    check_csr("cusparseSpGEMMreuse_workEstimation", "A", matA, false);
    check_csr("cusparseSpGEMMreuse_workEstimation", "B", matB, false);
    spgemmDescr->phase = 1;
    return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseSpGEMMreuse_nnz(cusparseHandle_t handle, cusparseOperation_t opA, cusparseOperation_t opB,
                                         cusparseConstSpMatDescr_t matA, cusparseConstSpMatDescr_t matB,
                                         cusparseSpMatDescr_t matC, cusparseSpGEMMAlg_t alg,
                                         cusparseSpGEMMDescr_t spgemmDescr, size_t *bufferSize2,
                                         void *externalBuffer2, size_t *bufferSize3, void *externalBuffer3,
                                         size_t *bufferSize4, void *externalBuffer4)
{
    cusparseStatus_t st = check_ops(opA, opB, matA, matB, matC);
    if (st != CUSPARSE_STATUS_SUCCESS || !spgemmDescr) return st ? st : CUSPARSE_STATUS_INVALID_VALUE;
    if (spgemmDescr->phase < 1) emu::fail("cusparseSpGEMMreuse_nnz before cusparseSpGEMMreuse_workEstimation");
    const char *who = "cusparseSpGEMMreuse_nnz: externalBuffer2..4";
    bool b2 = buffer_step(who, bufferSize2, externalBuffer2, &spgemmDescr->size[2]);
    bool b3 = buffer_step(who, bufferSize3, externalBuffer3, &spgemmDescr->size[3]);
    bool b4 = buffer_step(who, bufferSize4, externalBuffer4, &spgemmDescr->size[4]);
    if (!bufferSize2 || !bufferSize3 || !bufferSize4) return CUSPARSE_STATUS_INVALID_VALUE;
    if (!(b2 && b3 && b4)) return CUSPARSE_STATUS_SUCCESS;   /* the size query */
    check_csr("cusparseSpGEMMreuse_nnz", "A", matA, false);
    check_csr("cusparseSpGEMMreuse_nnz", "B", matB, false);
    emu::check_device_range("cusparseSpGEMMreuse_nnz: C row offsets", matC->offsets,
                            (size_t)(matC->rows + 1) * sizeof(int32_t));
    /* Gustavson's symbolic pass, one marker per column, rows sorted afterwards */
    cusparseSpGEMMDescr *d = spgemmDescr;
    const int32_t *ap = (const int32_t *)matA->offsets, *ai = (const int32_t *)matA->columns;
    const int32_t *bp = (const int32_t *)matB->offsets, *bi = (const int32_t *)matB->columns;
    int32_t *cp = (int32_t *)matC->offsets;
    int64_t rows = matA->rows, cols = matB->cols;
    emu::enqueue(handle->stream, "cusparseSpGEMMreuse_nnz", [=]() {
        std::vector<int64_t> mark((size_t)cols, -1);
        d->ptr.assign((size_t)rows + 1, 0);
        d->idx.clear();
        for (int64_t i = 0; i < rows; i++) {
            size_t row_start = d->idx.size();
            for (int32_t p = ap[i]; p < ap[i + 1]; p++)
                for (int32_t e = bp[ai[p]]; e < bp[ai[p] + 1]; e++)
                    if (mark[(size_t)bi[e]] != i) {
                        mark[(size_t)bi[e]] = i;
                        d->idx.push_back(bi[e]);
                    }
            std::sort(d->idx.begin() + (long)row_start, d->idx.end());
            d->ptr[(size_t)i + 1] = (int32_t)d->idx.size();
        }
        memcpy(cp, d->ptr.data(), d->ptr.size() * sizeof(int32_t));
    });
    cudaStreamSynchronize(handle->stream);   /* C's nnz reaches the host */
    matC->nnz = (int64_t)d->idx.size();
    d->phase = 2;
    return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseSpGEMMreuse_copy(cusparseHandle_t handle, cusparseOperation_t opA, cusparseOperation_t opB,
                                          cusparseConstSpMatDescr_t matA, cusparseConstSpMatDescr_t matB,
                                          cusparseSpMatDescr_t matC, cusparseSpGEMMAlg_t alg,
                                          cusparseSpGEMMDescr_t spgemmDescr, size_t *bufferSize5,
                                          void *externalBuffer5)
{
    cusparseStatus_t st = check_ops(opA, opB, matA, matB, matC);
    if (st != CUSPARSE_STATUS_SUCCESS || !spgemmDescr) return st ? st : CUSPARSE_STATUS_INVALID_VALUE;
    if (spgemmDescr->phase < 2) emu::fail("cusparseSpGEMMreuse_copy before cusparseSpGEMMreuse_nnz");
    if (!buffer_step("cusparseSpGEMMreuse_copy: externalBuffer5", bufferSize5, externalBuffer5,
                     &spgemmDescr->size[5]))
        return bufferSize5 ? CUSPARSE_STATUS_SUCCESS : CUSPARSE_STATUS_INVALID_VALUE;
    if (matC->nnz != (int64_t)spgemmDescr->idx.size())
        emu::fail("cusparseSpGEMMreuse_copy: C holds nnz %lld, the product has %zu", (long long)matC->nnz,
                  spgemmDescr->idx.size());
    check_csr("cusparseSpGEMMreuse_copy", "C", matC, true);
    cusparseSpGEMMDescr *d = spgemmDescr;
    int32_t *ci = (int32_t *)matC->columns;
    emu::enqueue(handle->stream, "cusparseSpGEMMreuse_copy",
                 [=]() { memcpy(ci, d->idx.data(), d->idx.size() * sizeof(int32_t)); });
    d->phase = 3;
    return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseSpGEMMreuse_compute(cusparseHandle_t handle, cusparseOperation_t opA,
                                             cusparseOperation_t opB, const void *alpha,
                                             cusparseConstSpMatDescr_t matA, cusparseConstSpMatDescr_t matB,
                                             const void *beta, cusparseSpMatDescr_t matC, cudaDataType computeType,
                                             cusparseSpGEMMAlg_t alg, cusparseSpGEMMDescr_t spgemmDescr)
{
    cusparseStatus_t st = check_ops(opA, opB, matA, matB, matC);
    if (st != CUSPARSE_STATUS_SUCCESS || !spgemmDescr) return st ? st : CUSPARSE_STATUS_INVALID_VALUE;
    if (computeType != CUDA_R_32F) return CUSPARSE_STATUS_NOT_SUPPORTED;
    if (spgemmDescr->phase < 3) emu::fail("cusparseSpGEMMreuse_compute before cusparseSpGEMMreuse_copy");
    for (int k = 4; k <= 5; k++)   /* buffers 4 and 5 must still be alive */
        if (!spgemmDescr->size[k]) emu::fail("cusparseSpGEMMreuse_compute: buffer %d never given", k);
    check_csr("cusparseSpGEMMreuse_compute", "A", matA, true);
    check_csr("cusparseSpGEMMreuse_compute", "B", matB, true);
    check_csr("cusparseSpGEMMreuse_compute", "C", matC, true);
    float al = *(const float *)alpha, be = *(const float *)beta;   /* host pointer mode */
    const int32_t *ap = (const int32_t *)matA->offsets, *ai = (const int32_t *)matA->columns;
    const int32_t *bp = (const int32_t *)matB->offsets, *bi = (const int32_t *)matB->columns;
    const int32_t *cp = (const int32_t *)matC->offsets, *ci = (const int32_t *)matC->columns;
    const float *av = (const float *)matA->values, *bv = (const float *)matB->values;
    float *cv = (float *)matC->values;
    int64_t rows = matA->rows, cols = matB->cols;
    cusparseSpGEMMDescr *d = spgemmDescr;
    emu::enqueue(handle->stream, "cusparseSpGEMMreuse_compute", [=]() {
        if (memcmp(cp, d->ptr.data(), d->ptr.size() * sizeof(int32_t)) != 0 ||
            memcmp(ci, d->idx.data(), d->idx.size() * sizeof(int32_t)) != 0)
            emu::fail("cusparseSpGEMMreuse_compute: C's pattern is not the one cusparseSpGEMMreuse_copy wrote");
        std::vector<float> acc((size_t)cols, 0.0f);
        for (int64_t i = 0; i < rows; i++) {
            for (int32_t p = ap[i]; p < ap[i + 1]; p++)
                for (int32_t e = bp[ai[p]]; e < bp[ai[p] + 1]; e++) acc[(size_t)bi[e]] += av[p] * bv[e];
            for (int32_t e = cp[i]; e < cp[i + 1]; e++) {
                float v = al * acc[(size_t)ci[e]];
                cv[e] = be == 0.0f ? v : v + be * cv[e];
                acc[(size_t)ci[e]] = 0.0f;
            }
        }
    });
    return CUSPARSE_STATUS_SUCCESS;
}

}   // extern "C"
