/* bppsa_elem.c — the element algebra of the bppsa scan (schedulers/backward/bppsa.c).
 *
 * An element of the scan array is a vector (a gradient), the identity, a CSR matrix with
 * a pattern fixed per plan, a dense matrix, or (device only) a factored recurrent Jᵀ.
 * Its type is static, the same for every sample and step (bppsa_internal.h: el_type);
 * the scan's only operation is the product M·X, whose result type the type pass decides
 * once (bppsa_product_type, with the symbolic phase of a CSR·CSR product) and whose
 * value every step computes (bppsa_product on the host, bppsa_cuda.cu on the device). */
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/kernels/dense.h"
#include "schedulers/backward/bppsa_internal.h"
#ifdef SP_HAVE_CUDA
#include "schedulers/backward/bppsa_cuda.h"
#endif

/* Symbolic SpGEMM phases run (once per sparse product of a plan, never per step). */
static long g_symbolic_calls;
long sp_bppsa_symbolic_calls(void)
{
#ifdef SP_HAVE_CUDA
    return g_symbolic_calls + sp_bppsa_cuda_symbolic_calls();
#else
    return g_symbolic_calls;
#endif
}

size_t bppsa_el_floats(const el_type *t)
{
    switch (t->kind) {
    case EL_VEC: return (size_t)t->rows;
    case EL_CSR: return (size_t)t->nnz;
    case EL_DENSE: return (size_t)t->rows * (size_t)t->cols;
    case EL_FACT: return (size_t)(t->gates + t->zdiag) * (size_t)t->rows;
    default: return 0;
    }
}

sp_csr bppsa_csr_view(const el_type *t, float *data)
{
    return (sp_csr){.rows = t->rows, .cols = t->cols, .nnz = t->nnz, .indptr = (int32_t *)t->indptr,
                    .indices = (int32_t *)t->indices, .data = data};
}

const char *bppsa_kind_name(el_kind k)
{
    static const char *names[] = {"none", "I", "vec", "csr", "dense", "fact"};
    return names[k];
}

bool bppsa_same_type(const el_type *a, const el_type *b)
{
    return a->kind == b->kind && a->rows == b->rows && a->cols == b->cols && a->nnz == b->nnz &&
           a->indptr == b->indptr && a->indices == b->indices && a->gates == b->gates && a->zdiag == b->zdiag &&
           a->w == b->w;
}

size_t bppsa_link_floats(const link *L)
{
    size_t f = bppsa_el_floats(&L->type);
    if (L->t == 0 && L->type.kind == EL_DENSE) f += (size_t)L->pattern.nnz;
    if (L->keep) f += (size_t)L->full.nnz;
    return f;
}

el_type bppsa_product_type(const el_type *M, const el_type *X, sp_spgemm_plan **plan, double *flops)
{
    *plan = NULL;
    *flops = 0;
    if (X->kind == EL_ID) return *M;
    if (M->kind == EL_ID) return *X;
    if (M->cols != X->rows)
        sp_fail("bppsa: internal shape mismatch %d×%d · %d×%d", M->rows, M->cols, X->rows, X->cols);
    if ((M->kind == EL_FACT && X->kind == EL_CSR) || (M->kind == EL_CSR && X->kind == EL_FACT))
        sp_fail("bppsa: internal: a factored recurrent Jᵀ meets a CSR operand");
    el_type r = {.rows = M->rows, .cols = X->cols};
    double m_entries = M->kind == EL_CSR ? (double)M->nnz : (double)M->rows * M->cols;
    if (X->kind == EL_VEC) {
        r.kind = EL_VEC;
        *flops = 2 * m_entries;
    } else if (M->kind == EL_CSR && X->kind == EL_CSR) {
        sp_csr A = bppsa_csr_view(M, NULL), B = bppsa_csr_view(X, NULL);
        *plan = sp_xcalloc(1, sizeof **plan);
        sp_spgemm_symbolic(*plan, &A, &B);
        g_symbolic_calls++;
        r.kind = EL_CSR;
        r.nnz = (*plan)->nnz;
        r.indptr = (*plan)->indptr;
        r.indices = (*plan)->indices;
        *flops = 2 * (*plan)->flops;
    } else {
        r.kind = EL_DENSE;
        double x_entries = X->kind == EL_CSR ? (double)X->nnz : (double)X->rows * X->cols;
        *flops = M->kind == EL_CSR ? 2 * m_entries * X->cols : 2 * (double)M->rows * x_entries;
    }
    return r;
}

void bppsa_product(const el_type *Mt, float *M, const el_type *Xt, float *X, sp_spgemm_plan *plan, const el_type *Ot,
                   float *out)
{
    if (Xt->kind == EL_ID || Mt->kind == EL_ID) {
        memcpy(out, Xt->kind == EL_ID ? M : X, bppsa_el_floats(Ot) * sizeof(float));
        return;
    }
    if (Xt->kind == EL_VEC) {
        if (Mt->kind == EL_CSR) {
            sp_csr A = bppsa_csr_view(Mt, M);
            sp_csr_spmv(&A, X, out);
        } else {
            sp_gemm(false, false, Mt->rows, 1, Mt->cols, 1.0f, M, Mt->cols, X, 1, 0.0f, out, 1);
        }
        return;
    }
    if (plan) {
        sp_csr A = bppsa_csr_view(Mt, M), B = bppsa_csr_view(Xt, X), C = bppsa_csr_view(Ot, out);
        sp_spgemm_numeric(plan, &A, &B, &C);
    } else if (Mt->kind == EL_CSR) {
        sp_csr A = bppsa_csr_view(Mt, M);
        sp_csr_dense_mm(&A, X, Xt->cols, out);
    } else if (Xt->kind == EL_CSR) {
        sp_csr B = bppsa_csr_view(Xt, X);
        sp_dense_csr_mm(Mt->rows, M, &B, out);
    } else {
        sp_dense_mm(Mt->rows, Xt->cols, Mt->cols, M, X, out);
    }
}

