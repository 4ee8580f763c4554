/* csr.c — CSR storage. Kernels (SpMV, SpGEMM, conversions) live in csr_ops.c. */
#include <stdlib.h>
#include <string.h>
#include "core/csr.h"
#include "core/error.h"

void sp_csr_alloc(sp_csr *m, int rows, int cols, int64_t nnz)
{
    if (!m) sp_fail("sp_csr_alloc: argument 'm' is NULL");
    memset(m, 0, sizeof *m);
    m->rows = rows;
    m->cols = cols;
    m->nnz = nnz;
    m->indptr = sp_xcalloc((size_t)rows + 1, sizeof(int32_t));
    m->indices = sp_xmalloc((size_t)nnz * sizeof(int32_t));
    m->data = sp_xmalloc((size_t)nnz * sizeof(float));
    m->own_pattern = m->own_data = true;
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
    if (!m) sp_fail("sp_csr_bytes: argument 'm' is NULL");
    return ((size_t)m->rows + 1) * sizeof(int32_t) + (size_t)m->nnz * (sizeof(int32_t) + sizeof(float));
}
