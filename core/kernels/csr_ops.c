/* csr_ops.c — SpMV, conversions, SpGEMM (symbolic + numeric) and the dense small-matrix
 * path. See csr_ops.h for the contracts; BPPSA §3.3 for why the symbolic phase is
 * hoisted out of the training loop. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include "core/device.h"
#include "core/kernels/dense.h"
#include "core/kernels/csr_ops.h"
#include "core/error.h"
#include "core/threads.h"

/* Below this many multiply-adds a kernel runs on the calling thread: waking the pool
 * costs more than the work. */
#define PAR_MIN_WORK 32768.0
/* Dense products up to this many multiply-adds use direct loops instead of OpenBLAS. */
#define SMALL_DENSE_WORK 32768.0

static void run_rows(size_t n, double work, sp_range_fn fn, void *ctx)
{
    if (work < PAR_MIN_WORK || sp_get_threads() == 1) {
        if (n) fn(ctx, 0, n);
        return;
    }
    sp_parallel_for(n, fn, ctx);
}

/* ---- SpMV ------------------------------------------------------------------------- */

typedef struct spmv_ctx {
    const sp_csr *A;
    const float *x;
    float *y;
} spmv_ctx;

static void spmv_rows(void *c, size_t begin, size_t end)
{
    const spmv_ctx *s = c;
    const sp_csr *A = s->A;
    for (size_t i = begin; i < end; i++) {
        float sum = 0.0f;
        for (int32_t q = A->indptr[i]; q < A->indptr[i + 1]; q++) sum += A->data[q] * s->x[A->indices[q]];
        s->y[i] = sum;
    }
}

void sp_csr_spmv(const sp_csr *A, const float *x, float *y)
{
    spmv_ctx s = {A, x, y};
    run_rows((size_t)A->rows, (double)A->nnz, spmv_rows, &s);
}

void sp_csr_spmv_t(const sp_csr *A, const float *x, float *y)
{
    memset(y, 0, (size_t)A->cols * sizeof(float));
    for (int i = 0; i < A->rows; i++) {
        float xi = x[i];
        for (int32_t q = A->indptr[i]; q < A->indptr[i + 1]; q++) y[A->indices[q]] += A->data[q] * xi;
    }
}

/* ---- construction, conversions and checks ----------------------------------------- */

void sp_csr_identity(sp_csr *m, int n)
{
    sp_csr_alloc(m, n, n, n);
    for (int i = 0; i < n; i++) {
        m->indptr[i + 1] = i + 1;
        m->indices[i] = i;
        m->data[i] = 1.0f;
    }
}

void sp_csr_from_dense(sp_csr *m, int rows, int cols, const float *dense)
{
    int64_t nnz = 0;
    for (size_t i = 0; i < (size_t)rows * (size_t)cols; i++) nnz += dense[i] != 0.0f;
    if (nnz > INT32_MAX) sp_fail("csr: %lld non-zeros exceed int32 indexing", (long long)nnz);
    sp_csr_alloc(m, rows, cols, nnz);
    int32_t q = 0;
    for (int i = 0; i < rows; i++) {
        const float *row = dense + (size_t)i * cols;
        for (int j = 0; j < cols; j++)
            if (row[j] != 0.0f) {
                m->indices[q] = j;
                m->data[q++] = row[j];
            }
        m->indptr[i + 1] = q;
    }
}

void sp_csr_to_dense(const sp_csr *m, float *dense)
{
    memset(dense, 0, (size_t)m->rows * (size_t)m->cols * sizeof(float));
    for (int i = 0; i < m->rows; i++)
        for (int32_t q = m->indptr[i]; q < m->indptr[i + 1]; q++)
            dense[(size_t)i * m->cols + m->indices[q]] = m->data[q];
}

bool sp_csr_valid(const sp_csr *m)
{
    if (m->rows < 0 || m->cols < 0 || !m->indptr || m->indptr[0] != 0 || m->indptr[m->rows] != m->nnz)
        return false;
    for (int i = 0; i < m->rows; i++) {
        if (m->indptr[i + 1] < m->indptr[i]) return false;
        for (int32_t q = m->indptr[i]; q < m->indptr[i + 1]; q++) {
            if (m->indices[q] < 0 || m->indices[q] >= m->cols) return false;
            if (q > m->indptr[i] && m->indices[q] <= m->indices[q - 1]) return false;
        }
    }
    return true;
}

bool sp_csr_same_pattern(const sp_csr *a, const sp_csr *b)
{
    return a->rows == b->rows && a->cols == b->cols && a->nnz == b->nnz &&
           memcmp(a->indptr, b->indptr, ((size_t)a->rows + 1) * sizeof(int32_t)) == 0 &&
           memcmp(a->indices, b->indices, (size_t)a->nnz * sizeof(int32_t)) == 0;
}

/* ---- SpGEMM: symbolic ------------------------------------------------------------- */

typedef struct spgemm_ctx {
    sp_spgemm_plan *p;
    const sp_csr *A, *B;
    sp_csr *C;
    int32_t *marker;   /* symbolic: nchunks × cols, -1 = not seen in this row */
    int64_t *rownnz;   /* symbolic pass 1 output */
} spgemm_ctx;

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static void sort_i32(int32_t *v, int n)
{
    if (n > 32) {
        qsort(v, (size_t)n, sizeof *v, cmp_i32);
        return;
    }
    for (int i = 1; i < n; i++) {
        int32_t x = v[i];
        int j = i - 1;
        for (; j >= 0 && v[j] > x; j--) v[j + 1] = v[j];
        v[j + 1] = x;
    }
}

/* Columns of C's row i, unsorted, written to out (if not NULL); returns their count. */
static int64_t row_pattern(const sp_csr *A, const sp_csr *B, int i, int32_t *marker, int32_t *out)
{
    int64_t n = 0;
    for (int32_t qa = A->indptr[i]; qa < A->indptr[i + 1]; qa++) {
        int32_t k = A->indices[qa];
        for (int32_t qb = B->indptr[k]; qb < B->indptr[k + 1]; qb++) {
            int32_t j = B->indices[qb];
            if (marker[j] == i) continue;
            marker[j] = i;
            if (out) out[n] = j;
            n++;
        }
    }
    return n;
}

static void symbolic_count(void *c, size_t begin, size_t end)
{
    spgemm_ctx *s = c;
    for (size_t ch = begin; ch < end; ch++) {
        int32_t *marker = s->marker + ch * (size_t)s->p->cols;
        for (int i = s->p->chunk_rows[ch]; i < s->p->chunk_rows[ch + 1]; i++)
            s->rownnz[i] = row_pattern(s->A, s->B, i, marker, NULL);
    }
}

static void symbolic_fill(void *c, size_t begin, size_t end)
{
    spgemm_ctx *s = c;
    sp_spgemm_plan *p = s->p;
    for (size_t ch = begin; ch < end; ch++) {
        int32_t *marker = s->marker + ch * (size_t)p->cols;
        for (int i = p->chunk_rows[ch]; i < p->chunk_rows[ch + 1]; i++) {
            int32_t *row = p->indices + p->indptr[i];
            int64_t n = row_pattern(s->A, s->B, i, marker, row);
            sort_i32(row, (int)n);
        }
    }
}

/* Row blocks of about equal work (multiply-adds, plus one per row for the gather). */
static void split_rows(sp_spgemm_plan *p, const double *rowwork, double total)
{
    int nch = sp_get_threads();
    if (nch > p->rows) nch = p->rows;
    if (nch < 1) nch = 1;
    p->nchunks = nch;
    p->chunk_rows = sp_xmalloc(((size_t)nch + 1) * sizeof(int32_t));
    p->chunk_rows[0] = 0;
    double acc = 0.0;
    int c = 1;
    for (int i = 0; i < p->rows && c < nch; i++) {
        acc += rowwork[i];
        if (acc >= total * c / nch) p->chunk_rows[c++] = i + 1;
    }
    while (c <= nch) p->chunk_rows[c++] = p->rows;
}

void sp_spgemm_symbolic(sp_spgemm_plan *p, const sp_csr *A, const sp_csr *B)
{
    if (A->cols != B->rows)
        sp_fail("spgemm: A is %d×%d, B is %d×%d (expected A's columns == B's rows)", A->rows, A->cols, B->rows,
                B->cols);
    memset(p, 0, sizeof *p);
    p->rows = A->rows;
    p->inner = A->cols;
    p->cols = B->cols;
    p->a_nnz = A->nnz;
    p->b_nnz = B->nnz;

    double *rowwork = sp_xmalloc(((size_t)p->rows + 1) * sizeof(double)), total = 0.0;
    for (int i = 0; i < p->rows; i++) {
        double f = 0.0;
        for (int32_t q = A->indptr[i]; q < A->indptr[i + 1]; q++)
            f += B->indptr[A->indices[q] + 1] - B->indptr[A->indices[q]];
        p->flops += f;
        rowwork[i] = f + 1.0;
        total += f + 1.0;
    }
    split_rows(p, rowwork, total);
    free(rowwork);

    spgemm_ctx s = {.p = p, .A = A, .B = B};
    size_t markers = (size_t)p->nchunks * (size_t)p->cols;
    s.marker = sp_xmalloc((markers ? markers : 1) * sizeof(int32_t));
    s.rownnz = sp_xmalloc(((size_t)p->rows + 1) * sizeof(int64_t));
    memset(s.marker, 0xff, markers * sizeof(int32_t));
    run_rows((size_t)p->nchunks, p->flops, symbolic_count, &s);

    p->indptr = sp_xmalloc(((size_t)p->rows + 1) * sizeof(int32_t));
    int64_t nnz = 0;
    p->indptr[0] = 0;
    for (int i = 0; i < p->rows; i++) {
        nnz += s.rownnz[i];
        if (nnz > INT32_MAX)
            sp_fail("spgemm: product of %d×%d and %d×%d has more than %d entries (int32 CSR)", A->rows, A->cols,
                    B->rows, B->cols, INT32_MAX);
        p->indptr[i + 1] = (int32_t)nnz;
    }
    p->nnz = nnz;
    p->indices = sp_xmalloc((nnz ? (size_t)nnz : 1) * sizeof(int32_t));
    memset(s.marker, 0xff, markers * sizeof(int32_t));
    run_rows((size_t)p->nchunks, p->flops, symbolic_fill, &s);
    free(s.marker);
    free(s.rownnz);
    p->acc = sp_xcalloc(markers ? markers : 1, sizeof(float));
}

void sp_spgemm_result(const sp_spgemm_plan *p, sp_csr *C)
{
    memset(C, 0, sizeof *C);
    C->rows = p->rows;
    C->cols = p->cols;
    C->nnz = p->nnz;
    C->indptr = p->indptr;
    C->indices = p->indices;
    C->data = sp_xmalloc((p->nnz ? (size_t)p->nnz : 1) * sizeof(float));
    C->own_pattern = false;
    C->own_data = true;
}

/* ---- SpGEMM: numeric (Gustavson with a dense accumulator per row block) ----------- */

static void numeric_chunks(void *c, size_t begin, size_t end)
{
    spgemm_ctx *s = c;
    const sp_spgemm_plan *p = s->p;
    const sp_csr *A = s->A, *B = s->B;
    for (size_t ch = begin; ch < end; ch++) {
        float *acc = p->acc + ch * (size_t)p->cols;
        for (int i = p->chunk_rows[ch]; i < p->chunk_rows[ch + 1]; i++) {
            for (int32_t qa = A->indptr[i]; qa < A->indptr[i + 1]; qa++) {
                float a = A->data[qa];
                int32_t k = A->indices[qa];
                for (int32_t qb = B->indptr[k]; qb < B->indptr[k + 1]; qb++) acc[B->indices[qb]] += a * B->data[qb];
            }
            /* gather into C's fixed pattern and leave the accumulator zero again */
            for (int32_t q = p->indptr[i]; q < p->indptr[i + 1]; q++) {
                s->C->data[q] = acc[p->indices[q]];
                acc[p->indices[q]] = 0.0f;
            }
        }
    }
}

void sp_spgemm_numeric(sp_spgemm_plan *p, const sp_csr *A, const sp_csr *B, sp_csr *C)
{
    assert(A->rows == p->rows && A->cols == p->inner && B->cols == p->cols);
    assert(A->nnz == p->a_nnz && B->nnz == p->b_nnz);
    assert(C->nnz == p->nnz);
    spgemm_ctx s = {.p = p, .A = A, .B = B, .C = C};
    run_rows((size_t)p->nchunks, p->flops, numeric_chunks, &s);
}

void sp_spgemm_plan_free(sp_spgemm_plan *p)
{
    free(p->indptr);
    free(p->indices);
    free(p->chunk_rows);
    free(p->acc);
    memset(p, 0, sizeof *p);
}

/* ---- sparse × dense, dense × sparse ------------------------------------------------ */

typedef struct mm_ctx {
    const sp_csr *S;
    const float *D;
    float *C;
    int n;   /* csr_dense: N; dense_csr: the dense operand's columns (= S->rows) */
} mm_ctx;

static void csr_dense_rows(void *c, size_t begin, size_t end)
{
    const mm_ctx *s = c;
    const sp_csr *A = s->S;
    int N = s->n;
    for (size_t i = begin; i < end; i++) {
        float *ci = s->C + i * (size_t)N;
        memset(ci, 0, (size_t)N * sizeof(float));
        for (int32_t q = A->indptr[i]; q < A->indptr[i + 1]; q++) {
            float a = A->data[q];
            const float *bk = s->D + (size_t)A->indices[q] * N;
            for (int j = 0; j < N; j++) ci[j] += a * bk[j];
        }
    }
}

void sp_csr_dense_mm(const sp_csr *A, const float *B, int N, float *C)
{
    mm_ctx s = {A, B, C, N};
    run_rows((size_t)A->rows, (double)A->nnz * N, csr_dense_rows, &s);
}

static void dense_csr_rows(void *c, size_t begin, size_t end)
{
    const mm_ctx *s = c;
    const sp_csr *B = s->S;
    for (size_t m = begin; m < end; m++) {
        const float *am = s->D + m * (size_t)s->n;
        float *cm = s->C + m * (size_t)B->cols;
        memset(cm, 0, (size_t)B->cols * sizeof(float));
        for (int k = 0; k < B->rows; k++) {
            float a = am[k];
            for (int32_t q = B->indptr[k]; q < B->indptr[k + 1]; q++) cm[B->indices[q]] += a * B->data[q];
        }
    }
}

void sp_dense_csr_mm(int M, const float *A, const sp_csr *B, float *C)
{
    mm_ctx s = {B, A, C, B->rows};
    run_rows((size_t)M, (double)M * (double)B->nnz, dense_csr_rows, &s);
}

/* ---- dense × dense ---------------------------------------------------------------- */

void sp_dense_mm(int M, int N, int K, const float *A, const float *B, float *C)
{
    if ((double)M * N * K > SMALL_DENSE_WORK) {
        sp_gemm(false, false, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
        return;
    }
    for (int i = 0; i < M; i++) {
        float *ci = C + (size_t)i * N;
        memset(ci, 0, (size_t)N * sizeof(float));
        for (int k = 0; k < K; k++) {
            float a = A[(size_t)i * K + k];
            const float *bk = B + (size_t)k * N;
            for (int j = 0; j < N; j++) ci[j] += a * bk[j];
        }
    }
}
