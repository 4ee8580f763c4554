/* csr.h — compressed sparse row matrices (int32 indices, float data).
 *
 * A transposed Jacobian Jᵀ of one op for one sample is an (in × out) CSR matrix.
 * Its pattern (indptr, indices) depends only on shapes and hyper-parameters and is
 * built once; its data is refreshed every step. The pattern arrays may be shared
 * between matrices (own_pattern == false). */
#ifndef SP_CSR_H
#define SP_CSR_H

#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sp_csr {
    int rows, cols;
    int64_t nnz;
    int32_t *indptr;   /* rows + 1 */
    int32_t *indices;  /* nnz      */
    float *data;       /* nnz      */
    bool own_pattern;  /* free indptr/indices with the matrix */
    bool own_data;
} sp_csr;

/* Allocate a matrix with room for nnz entries (heap; indptr zeroed). A NULL m, a
 * negative size, nnz above INT32_MAX or no memory is refused with sp_refuse
 * (core/error.h): outside sp_try SP_ERR (m untouched) or, for sp_csr_bytes, 0, with the
 * message in sp_last_error(); inside sp_try the call ends there with SP_ERR. */
int sp_csr_alloc(sp_csr *m, int rows, int cols, int64_t nnz);
void sp_csr_free(sp_csr *m);
size_t sp_csr_bytes(const sp_csr *m);   /* indptr + indices + data */

#ifdef __cplusplus
}
#endif

#endif
