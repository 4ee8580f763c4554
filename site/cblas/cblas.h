/* cblas.h — the part of the CBLAS interface the library calls (core/kernels/dense.c,
 * core/threads.c), for the WebAssembly build of the teaching page only (make site puts
 * site/cblas first on emcc's include path; native builds use OpenBLAS's own header).
 * site/wasm_blas.c implements it in portable C. */
#ifndef SP_SITE_CBLAS_H
#define SP_SITE_CBLAS_H

typedef enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 } CBLAS_ORDER;
typedef enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112, CblasConjTrans = 113 } CBLAS_TRANSPOSE;

void cblas_sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int M, int N, int K,
                 float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
/* OpenBLAS's extensions: the core it runs on ("wasm": no core-specific workaround
 * applies) and its thread count (the wasm build has one thread). */
const char *openblas_get_corename(void);
void openblas_set_num_threads(int n);

#endif
