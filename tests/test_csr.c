/* test_csr.c — the CSR kernels of core/kernels/csr_ops.h against dense float64 references.
 *
 * Random matrices have a controlled density and some empty rows and columns. Errors are
 * max|got − ref| / max|ref| (relative to the largest reference entry); float32 sums of
 * at most a few hundred terms stay below 1e-5 of that. Patterns are checked exactly. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/kernels/csr_ops.h"
#include "core/threads.h"
#include "core/rng.h"
#include "tests/testutil.h"

#define TOL 1e-5

static double rel_err(const float *got, const double *ref, size_t n)
{
    double d = 0.0, s = 1e-30;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)got[i] - ref[i]));
        s = fmax(s, fabs(ref[i]));
    }
    return d / s;
}

/* Dense (rows × cols) with about density·rows·cols non-zeros; row `empty_row` and column
 * `empty_col` (if in range) stay zero. */
static float *random_dense(int rows, int cols, double density, uint64_t seed, int empty_row, int empty_col)
{
    sp_rng r;
    sp_rng_seed(&r, seed);
    float *d = calloc((size_t)rows * cols + 1, sizeof(float));
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++)
            if (i != empty_row && j != empty_col && sp_rng_uniform(&r) < density)
                d[(size_t)i * cols + j] = sp_rng_uniform_range(&r, -1.0f, 1.0f);
    return d;
}

static void random_values(sp_csr *m, uint64_t seed)
{
    sp_rng r;
    sp_rng_seed(&r, seed);
    for (int64_t q = 0; q < m->nnz; q++) m->data[q] = sp_rng_uniform_range(&r, -1.0f, 1.0f);
}

/* ref = A·B in float64 and the structural pattern of the product (any term present). */
static void dense_product(const float *A, const float *B, int M, int K, int N, double *ref, bool *present)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0.0;
            bool p = false;
            for (int k = 0; k < K; k++) {
                float a = A[(size_t)i * K + k], b = B[(size_t)k * N + j];
                s += (double)a * b;
                p |= a != 0.0f && b != 0.0f;
            }
            ref[(size_t)i * N + j] = s;
            if (present) present[(size_t)i * N + j] = p;
        }
}

Test(csr, dense_roundtrip_and_validity)
{
    float *d = random_dense(17, 23, 0.2, 1, 3, 5);
    sp_csr m;
    sp_csr_from_dense(&m, 17, 23, d);
    cr_assert(sp_csr_valid(&m));
    cr_assert_eq(m.indptr[4], m.indptr[3], "row 3 must be empty");
    float back[17 * 23];
    sp_csr_to_dense(&m, back);
    cr_assert_eq(memcmp(back, d, sizeof back), 0, "dense → CSR → dense must be exact");
    cr_assert_gt(m.nnz, 0);
    m.indices[0] = 23;   /* out of range: no longer valid */
    cr_assert(!sp_csr_valid(&m));
    sp_csr_free(&m);
    free(d);
}

Test(csr, identity)
{
    sp_csr I;
    sp_csr_identity(&I, 7);
    float x[7] = {1, -2, 3, -4, 5, -6, 7}, y[7];
    sp_csr_spmv(&I, x, y);
    cr_assert(sp_csr_valid(&I));
    cr_assert_eq(memcmp(x, y, sizeof x), 0);
    sp_csr_free(&I);
}

Test(csr, spmv_and_transpose)
{
    int shapes[][2] = {{1, 1}, {5, 9}, {40, 13}, {300, 700}};
    for (int s = 0; s < 4; s++) {
        int R = shapes[s][0], C = shapes[s][1];
        float *d = random_dense(R, C, 0.1, 10 + s, R / 2, C / 3);
        sp_csr m;
        sp_csr_from_dense(&m, R, C, d);
        float *x = malloc(sizeof(float) * C), *xt = malloc(sizeof(float) * R);
        float *y = malloc(sizeof(float) * R), *yt = malloc(sizeof(float) * C);
        double *ref = malloc(sizeof(double) * R), *reft = malloc(sizeof(double) * C);
        for (int j = 0; j < C; j++) x[j] = (float)((j * 7) % 11) - 5.0f;
        for (int i = 0; i < R; i++) xt[i] = (float)((i * 5) % 13) - 6.0f;
        dense_product(d, x, R, C, 1, ref, NULL);
        for (int j = 0; j < C; j++) {
            reft[j] = 0.0;
            for (int i = 0; i < R; i++) reft[j] += (double)d[(size_t)i * C + j] * xt[i];
        }
        sp_set_threads(2);
        sp_csr_spmv(&m, x, y);
        sp_csr_spmv_t(&m, xt, yt);
        sp_set_threads(1);
        cr_assert_lt(rel_err(y, ref, R), TOL, "A·x %d×%d", R, C);
        cr_assert_lt(rel_err(yt, reft, C), TOL, "Aᵀ·x %d×%d", R, C);
        sp_csr_free(&m);
        free(d), free(x), free(xt), free(y), free(yt), free(ref), free(reft);
    }
}

/* Symbolic + numeric against the dense product: pattern = structural product, values
 * within TOL; then new values through the cached plan. */
static void check_spgemm(int M, int K, int N, double da, double db, uint64_t seed, int threads)
{
    float *Ad = random_dense(M, K, da, seed, M > 2 ? 1 : -1, K > 3 ? 2 : -1);
    float *Bd = random_dense(K, N, db, seed + 1, K > 4 ? 4 : -1, N > 1 ? 0 : -1);
    sp_csr A, B, C;
    sp_csr_from_dense(&A, M, K, Ad);
    sp_csr_from_dense(&B, K, N, Bd);
    sp_set_threads(threads);
    sp_spgemm_plan p;
    sp_spgemm_symbolic(&p, &A, &B);
    sp_spgemm_result(&p, &C);
    sp_spgemm_numeric(&p, &A, &B, &C);
    cr_assert(sp_csr_valid(&C), "C's pattern must be sorted and in range");

    double *ref = malloc(sizeof(double) * M * N + 8);
    bool *present = malloc((size_t)M * N + 1);
    dense_product(Ad, Bd, M, K, N, ref, present);
    int64_t expect_nnz = 0;
    for (size_t e = 0; e < (size_t)M * N; e++) expect_nnz += present[e];
    cr_assert_eq(C.nnz, expect_nnz, "%d×%d·%d×%d: nnz %lld, structural %lld", M, K, K, N, (long long)C.nnz,
                 (long long)expect_nnz);
    for (int i = 0; i < M; i++)
        for (int32_t q = C.indptr[i]; q < C.indptr[i + 1]; q++)
            cr_assert(present[(size_t)i * N + C.indices[q]], "entry (%d, %d) not in the product", i, C.indices[q]);
    float *Cd = malloc(sizeof(float) * M * N + 8);
    sp_csr_to_dense(&C, Cd);
    cr_assert_lt(rel_err(Cd, ref, (size_t)M * N), TOL, "values %d×%d·%d×%d", M, K, K, N);

    /* new values, same patterns: the cached plan must still be right */
    for (int round = 0; round < 2; round++) {
        random_values(&A, seed + 100 + round);
        random_values(&B, seed + 200 + round);
        sp_csr_to_dense(&A, Ad);
        sp_csr_to_dense(&B, Bd);
        sp_spgemm_numeric(&p, &A, &B, &C);
        dense_product(Ad, Bd, M, K, N, ref, NULL);
        sp_csr_to_dense(&C, Cd);
        cr_assert_lt(rel_err(Cd, ref, (size_t)M * N), TOL, "cached plan, round %d, %d×%d·%d×%d", round, M, K, K, N);
    }
    sp_set_threads(1);
    sp_csr_free(&C);
    sp_spgemm_plan_free(&p);
    sp_csr_free(&A);
    sp_csr_free(&B);
    free(Ad), free(Bd), free(ref), free(present), free(Cd);
}

Test(spgemm, matches_dense_reference)
{
    check_spgemm(1, 1, 1, 1.0, 1.0, 1, 1);
    check_spgemm(7, 5, 9, 0.4, 0.3, 2, 1);
    check_spgemm(64, 80, 50, 0.05, 0.1, 3, 2);
    check_spgemm(120, 30, 200, 0.2, 0.02, 4, 2);
    check_spgemm(33, 1, 17, 1.0, 1.0, 5, 2);   /* outer product */
    check_spgemm(3, 40, 2, 0.0, 0.5, 6, 2);    /* A all zero: empty product */
}

/* Each output row is computed by one thread in a fixed order: any thread count and any
 * plan-time split give the same bits. */
Test(spgemm, bitwise_identical_across_threads)
{
    float *Ad = random_dense(90, 70, 0.1, 7, 5, 6), *Bd = random_dense(70, 110, 0.1, 8, 9, 10);
    sp_csr A, B, C1, C2;
    sp_csr_from_dense(&A, 90, 70, Ad);
    sp_csr_from_dense(&B, 70, 110, Bd);
    sp_spgemm_plan p1, p2;
    sp_set_threads(1);
    sp_spgemm_symbolic(&p1, &A, &B);
    sp_set_threads(2);
    sp_spgemm_symbolic(&p2, &A, &B);
    cr_assert_eq(p2.nchunks, 2);
    sp_spgemm_result(&p1, &C1);
    sp_spgemm_result(&p2, &C2);
    sp_spgemm_numeric(&p1, &A, &B, &C1);
    sp_spgemm_numeric(&p2, &A, &B, &C2);
    sp_set_threads(1);
    cr_assert(sp_csr_same_pattern(&C1, &C2));
    cr_assert_eq(memcmp(C1.data, C2.data, (size_t)C1.nnz * sizeof(float)), 0);
    sp_csr_free(&C1), sp_csr_free(&C2), sp_csr_free(&A), sp_csr_free(&B);
    sp_spgemm_plan_free(&p1), sp_spgemm_plan_free(&p2);
    free(Ad), free(Bd);
}

static void mismatched_spgemm(void)
{
    sp_csr A, B;
    sp_csr_identity(&A, 3);
    sp_csr_identity(&B, 4);
    sp_spgemm_plan p;
    sp_spgemm_symbolic(&p, &A, &B);
}
Test(spgemm, shape_mismatch_exits_2, .exit_code = 2, .init = tu_capture_stderr) { mismatched_spgemm(); }

Test(mixed, csr_dense_and_dense_csr)
{
    int M = 37, K = 29, N = 23;
    float *Sd = random_dense(M, K, 0.15, 11, 4, 7), *D = random_dense(K, N, 1.0, 12, -1, -1);
    float *D2 = random_dense(N, M, 1.0, 13, -1, -1);
    sp_csr S;
    sp_csr_from_dense(&S, M, K, Sd);
    float *C = malloc(sizeof(float) * M * N), *C2 = malloc(sizeof(float) * N * K);
    double *ref = malloc(sizeof(double) * M * N), *ref2 = malloc(sizeof(double) * N * K);
    sp_set_threads(2);
    sp_csr_dense_mm(&S, D, N, C);      /* (M×K sparse)(K×N dense) */
    sp_dense_csr_mm(N, D2, &S, C2);    /* (N×M dense)(M×K sparse) */
    sp_set_threads(1);
    dense_product(Sd, D, M, K, N, ref, NULL);
    dense_product(D2, Sd, N, M, K, ref2, NULL);
    cr_assert_lt(rel_err(C, ref, (size_t)M * N), TOL);
    cr_assert_lt(rel_err(C2, ref2, (size_t)N * K), TOL);
    sp_csr_free(&S);
    free(Sd), free(D), free(D2), free(C), free(C2), free(ref), free(ref2);
}

Test(mixed, dense_small_and_blas_paths)
{
    int sizes[][3] = {{20, 20, 20}, {1, 20, 20}, {64, 48, 80}, {3, 1, 5}};   /* small, small, BLAS, tiny */
    for (int s = 0; s < 4; s++) {
        int M = sizes[s][0], N = sizes[s][1], K = sizes[s][2];
        float *A = random_dense(M, K, 1.0, 20 + s, -1, -1), *B = random_dense(K, N, 1.0, 30 + s, -1, -1);
        float *C = malloc(sizeof(float) * M * N);
        double *ref = malloc(sizeof(double) * M * N);
        sp_dense_mm(M, N, K, A, B, C);
        dense_product(A, B, M, K, N, ref, NULL);
        cr_assert_lt(rel_err(C, ref, (size_t)M * N), TOL, "%d×%d·%d×%d", M, K, K, N);
        free(A), free(B), free(C), free(ref);
    }
}
