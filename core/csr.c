/* csr.c — CSR storage. Kernels (SpMV, SpGEMM, conversions) live in csr_ops.c. */
#include <stdlib.h>
#include <string.h>
#include "core/csr.h"
#include "core/error.h"

int sp_csr_alloc(sp_csr *m, int rows, int cols, int64_t nnz)
{
    if (!m) return sp_refuse("sp_csr_alloc: argument 'm' is NULL");
    if (rows < 0 || cols < 0)
        return sp_refuse("sp_csr_alloc: argument '%s' is %d (expected >= 0)", rows < 0 ? "rows" : "cols",
                         rows < 0 ? rows : cols);
    if (nnz < 0 || nnz > INT32_MAX)
        return sp_refuse("sp_csr_alloc: argument 'nnz' is %lld (expected 0..%d: int32 indices)", (long long)nnz,
                         INT32_MAX);
    int32_t *indptr = calloc((size_t)rows + 1, sizeof(int32_t));
    int32_t *indices = malloc(nnz ? (size_t)nnz * sizeof(int32_t) : 1);
    float *data = malloc(nnz ? (size_t)nnz * sizeof(float) : 1);
    if (!indptr || !indices || !data) {
        free(indptr);
        free(indices);
        free(data);
        return sp_refuse("sp_csr_alloc: out of memory for a %d x %d matrix of %lld entries", rows, cols,
                         (long long)nnz);
    }
    *m = (sp_csr){.rows = rows, .cols = cols, .nnz = nnz, .indptr = indptr, .indices = indices, .data = data,
                  .own_pattern = true, .own_data = true};
    return SP_OK;
}

void sp_csr_free(sp_csr *m)
{
    if (!m) return;
    if (m->own_pattern) {
        free(m->indptr);
        free(m->indices);
    }
    if (m->own_data) free(m->data);
    memset(m, 0, sizeof *m);
}

size_t sp_csr_bytes(const sp_csr *m)
{
    if (!m) {
        sp_refuse("sp_csr_bytes: argument 'm' is NULL");
        return 0;
    }
    return ((size_t)m->rows + 1) * sizeof(int32_t) + (size_t)m->nnz * (sizeof(int32_t) + sizeof(float));
}
