/* engines.h — constructors of the built-in backward engines (see schedulers/backward/engine.h). */
#ifndef SP_ENGINES_H
#define SP_ENGINES_H

#include "schedulers/backward/engine.h"

/* The descriptors (engine.h's sp_engine_def) of the built-in engines, which engine.c's
 * registry lists: linear BP, "reverse" too (schedulers/backward/reverse.c); BP as a
 * parallel scan over transposed Jacobians (bppsa.c); out-of-order BP (ooo.c, ooo.h). */
extern const sp_engine_def sp_engine_def_linear, sp_engine_def_bppsa, sp_engine_def_ooo;

sp_engine *sp_engine_linear_create(const sp_engine_opts *opts);
sp_engine *sp_engine_bppsa_create(const sp_engine_opts *opts);
/* bppsa's own options (sp_engine_opts.own; --scan-levels). */
typedef struct sp_bppsa_opts {
    int scan_levels;              /* up-sweep levels; SP_SCAN_LEVELS_FULL (any other value
                                   * < 0 too), SP_SCAN_LEVELS_AUTO                      */
    const char *scan_levels_arg;  /* --scan-levels as given: N | full | auto, which the
                                   * descriptor's finish turns into scan_levels; NULL:
                                   * scan_levels as set                                 */
} sp_bppsa_opts;
/* Jacobians in the longest chain (segment) bppsa scans for this loss (its n; for checking
 * --scan-levels). */
int sp_bppsa_chain_links(const sp_node *loss);
/* Symbolic SpGEMM phases the bppsa engine has run in this process: once per sparse
 * product of a plan (per shape), never per step (tests count them). */
long sp_bppsa_symbolic_calls(void);
sp_engine *sp_engine_ooo_create(const sp_engine_opts *opts);   /* schedulers/backward/ooo.h */

/* The figures of a bppsa plan (what --plan prints), for the last backward's batch. */
typedef struct sp_bppsa_stats {
    int n;                     /* links of the chain; the scan array has n + 1 elements */
    int up_levels, full_levels;
    int levels;                /* sequential levels that multiply (docs/BPPSA.md)       */
    int linear_levels;         /* linear BP's sequential products: n − 1                */
    int chain_depth;           /* longest chain of products                             */
    int matmat;                /* matrix-matrix products per sample                     */
    int batch;
    double flops, critical_flops, linear_flops;   /* per sample                         */
    double modelled_seconds;   /* the --scan-levels auto cost model's time for the batch */
    double dense_jt_entries;   /* Σ entries of the links' Jᵀ before pruning (per sample) */
    /* Memory, predicted from the plan's element types (arena bytes of one step):
     * peak = forward + grads + scan, the tape arena's high-water mark for the step.   */
    size_t forward_bytes;      /* the tape in use when the backward starts (measured)   */
    size_t grad_bytes;         /* ∂l/∂x buffers of the nodes and bookkeeping            */
    size_t scan_bytes;         /* the scan: Jᵀ values, products, arrays (all samples)   */
    size_t jt_bytes, product_bytes;   /* parts of scan_bytes                            */
    size_t peak_bytes;
} sp_bppsa_stats;

/* The device cost model of --scan-levels auto (docs/BPPSA.md, "Choosing the depth on the
 * device"). Per plan level: launches · launch_s + dense FLOPs / gemm_flops + SpGEMM FLOPs /
 * spgemm_flops + bytes moved / bandwidth; the levels run one after another. The defaults
 * are an H100 SXM5's; SCANPROP_GPU_MODEL="launch_us=5,gemm_tflops=67,spgemm_gflops=20,
 * bw_gbs=3350" (any subset) overrides them for another GPU. */
typedef struct sp_bppsa_gpu_model {
    char name[64];             /* "H100 SXM5 (defaults)" or "SCANPROP_GPU_MODEL"      */
    double launch_s;           /* one launch: a kernel or library call, its pointer upload */
    double gemm_flops;         /* FP32 FLOP/s of dense and own-kernel products          */
    double spgemm_flops;       /* FLOP/s of cuSPARSE SpGEMM's numeric phase             */
    double bandwidth;          /* device memory, bytes/s                                */
} sp_bppsa_gpu_model;
/* The constants in use: the defaults with SCANPROP_GPU_MODEL applied (a bad value stops
 * with one line naming it, exit 2). */
sp_bppsa_gpu_model sp_bppsa_gpu_model_get(void);

/* False unless e is a bppsa engine that has run a backward. */
bool sp_bppsa_stats_get(const sp_engine *e, sp_bppsa_stats *out);
/* FLOP per sample of every plan level (all its steps; its most expensive step), for up
 * to cap levels; returns the plan's level count (0 if e has no plan yet). */
int sp_bppsa_level_flops(const sp_engine *e, double *total, double *critical, int cap);
/* Links of m's chain for samples of the given shape (a recurrent op counts its time
 * steps), from a shape-only forward; and the valid --scan-levels range is
 * 0 .. sp_bppsa_max_scan_levels (larger values are the full scan). */
struct sp_model;
int sp_bppsa_links(struct sp_model *m, int ndim, const int *sample_shape);
int sp_bppsa_max_scan_levels(struct sp_model *m, int ndim, const int *sample_shape);

/* One node's whole backward, as the linear engine does it: G (if the op has params)
 * then, input by input in argument order, δ_i into the producer's grad (accumulating
 * when the producer fans out). sp_node_backward_inputs is the δ part alone. */
void sp_node_backward(sp_node *n);
/* Whether sp_node_backward runs n's δ and G as one pass (backward_input_params). */
bool sp_node_backward_fuses(const sp_node *n);
void sp_node_backward_inputs(sp_node *n);

/* sp_parallel_for for an engine's own workers (bppsa's scan levels): each chunk runs
 * under sp_try on whichever thread takes it, so an sp_fail in an op on a pool thread
 * comes back here, and is raised again on the calling thread once every chunk is out
 * (to the step's sp_try or the public call's guard) instead of ending the process. */
void sp_engine_parallel_for(size_t n, void (*fn)(void *ctx, size_t begin, size_t end), void *ctx);

#endif
