/* bppsa_cuda.h — the bppsa engine's device work (schedulers/backward/bppsa_cuda.cu, make CUDA=1).
 *
 * schedulers/backward/bppsa.c keeps the whole plan on the host (chain, scan plan, type pass with
 * the symbolic phase of every sparse product, pointer bookkeeping); on the device it
 * only asks for batched products: every product of one plan level that has the same
 * operand types (every sample, every step of the level) is ONE launch — one
 * cublasSgemmBatched for dense·dense and dense·vector, one own kernel for CSR·vector,
 * CSR·dense, dense·CSR and the moves by the identity. CSR·CSR products go to cuSPARSE's
 * generic SpGEMM with structure reuse, one call per sample (sp_bppsa_cuda_spgemm). Operands are
 * addressed through pointer arrays kept on the device across steps (the cache's slots,
 * one per launch of a step, in order): a slot is copied up, on the lane's stream ahead
 * of its launch, only when its addresses change, so a steady-state step whose arena
 * gives the same addresses copies nothing. CSR patterns are copied to the device once
 * per plan (sp_bppsa_cuda_pattern's cache). */
#ifndef SP_BPPSA_CUDA_H
#define SP_BPPSA_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/tape.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The element kinds of bppsa.c (el_kind): none, identity, vector, CSR, dense. */
enum { SP_BD_NONE, SP_BD_ID, SP_BD_VEC, SP_BD_CSR, SP_BD_DENSE, SP_BD_FACT };

/* An operand's type with its CSR pattern on the device. */
typedef struct sp_bppsa_mat {
    int kind, rows, cols;
    int64_t nnz;
    const int32_t *indptr, *indices;   /* device */
    int gates;                         /* FACT: Σ_g W_gᵀ·diag(v_g) (+ diag(z) if zdiag) */
    bool zdiag;
    const float *w;                    /* FACT: W_hh, the W_g stacked (device)     */
} sp_bppsa_mat;

typedef struct sp_bppsa_cache sp_bppsa_cache;

sp_bppsa_cache *sp_bppsa_cuda_cache_new(void);
/* Forget (and free) every device pattern and pointer slot: the host patterns they
 * mirror may go. */
void sp_bppsa_cuda_cache_reset(sp_bppsa_cache *c);
void sp_bppsa_cuda_cache_free(sp_bppsa_cache *c);
/* The device copy of a host pattern (rows + 1 offsets, nnz indices), uploaded on first
 * use and kept until the reset. */
void sp_bppsa_cuda_pattern(sp_bppsa_cache *c, int rows, int64_t nnz, const int32_t *indptr, const int32_t *indices,
                           const int32_t **d_indptr, const int32_t **d_indices);

/* A step starts: its launches take the cache's pointer slots from the first on. */
void sp_bppsa_cuda_step_begin(sp_bppsa_cache *c);
/* out[k] = M[k]·X[k] for k < count, all of types Mt, Xt → Ot, in one launch on the
 * calling lane's stream (an identity operand: a copy of the other). The pointer arrays
 * are host memory (t's arena holds a scratch copy); their device copy is the step's
 * next slot of c. Returns the number of launches (1). */
int sp_bppsa_cuda_products(sp_bppsa_cache *c, sp_tape *t, const sp_bppsa_mat *Mt, const sp_bppsa_mat *Xt,
                           const sp_bppsa_mat *Ot, float *const *M, float *const *X, float *const *out, int count);
/* CSR·CSR through cuSPARSE's generic SpGEMM with structure reuse: the symbolic phase
 * (work estimation, nnz, copy) runs once per key (the host's sp_spgemm_plan) and its
 * pattern is checked against the host's (h_ptr, h_idx, h_nnz); every call runs the
 * numeric phase (cusparseSpGEMMreuse_compute) for each of the count products. Returns
 * the launches. */
int sp_bppsa_cuda_spgemm(sp_bppsa_cache *c, const void *key, const sp_bppsa_mat *Mt, const sp_bppsa_mat *Xt,
                         const int32_t *h_ptr, const int32_t *h_idx, int64_t h_nnz, float *const *M, float *const *X,
                         float *const *out, int count);
/* cuSPARSE symbolic phases run in this process. */
long sp_bppsa_cuda_symbolic_calls(void);
/* Products (one per sample and step) run by cublasSgemmBatched in this process: every
 * dense·dense and dense·vector product, i.e. every product after one turned dense. */
long sp_bppsa_cuda_gemm_products(void);
/* dst + k·len ← src[k] (len floats each) for k < count: one launch, the addresses in
 * the step's next slot of c. */
void sp_bppsa_cuda_gather(sp_bppsa_cache *c, float *dst, float *const *src, int count, size_t len);
/* dense[b] (rows × cols, every entry written) ← the CSR values vals + b·stride with
 * pattern P, for b < B, the dense blocks at dense + b·stride: one launch. */
void sp_bppsa_cuda_csr_to_dense(const sp_bppsa_mat *P, const float *vals, float *dense, size_t stride, int B);

/* The scan's levels as a CUDA graph, once per plan (docs/CUDA.md, "bppsa's scan as a
 * graph"). Around the levels of a step: begin with the step's key (a hash of every
 * device address the levels read or write: the elements' before the levels, the
 * products' memory, the batch) and the host array of the elements' addresses (bytes);
 * LIVE: run the levels as ever; CAPTURE: run them too (their launches are captured,
 * not run, and end runs them); REPLAYED: the levels ran as one cudaGraphLaunch and
 * elems holds the addresses they end at — skip them. A key runs live the first time,
 * is captured the second, replayed from then on; a new key, a new plan
 * (sp_bppsa_cuda_cache_reset) or SCANPROP_BPPSA_GRAPH=off drops the graph. */
enum { SP_BPPSA_LEVELS_LIVE, SP_BPPSA_LEVELS_CAPTURE, SP_BPPSA_LEVELS_REPLAYED };
int sp_bppsa_cuda_levels_begin(sp_bppsa_cache *c, uint64_t key, void *elems, size_t bytes);
void sp_bppsa_cuda_levels_end(sp_bppsa_cache *c, const void *elems, size_t bytes);

/* Process-wide: graphs captured and replays; of the graph captured last, the own kernels
 * and cuBLAS calls inside it, its graph launches per replay (one, or more where cuSPARSE
 * calls split it) and its pieces (graphs and live cuSPARSE groups). */
typedef struct sp_bppsa_graph_stats {
    long captures, replays;
    long kernels, library_calls, launches, pieces;
} sp_bppsa_graph_stats;
void sp_bppsa_cuda_graph_stats(sp_bppsa_graph_stats *out);

#ifdef __cplusplus
}
#endif

#endif
