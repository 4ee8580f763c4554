/* bppsa_internal.h — what the pieces of the bppsa engine share (not installed, not for
 * callers outside schedulers/backward/bppsa*.c; the engine's public face is engines.h).
 *
 *   bppsa_elem.c    the element algebra: element types, their sizes, M·X's type and value
 *   bppsa_plan.c    what is built once per chain: segments, links, the type pass with the
 *                   symbolic SpGEMMs, the figures, the CPU and device cost models and
 *                   --scan-levels auto
 *   bppsa_report.c  --plan's figures and --plan-svg's scan tree
 *   bppsa.c         the numeric step (host and device) and the engine
 *   bppsa_hooks.c   the engine's check, report and plan hooks, over its public calls
 *   bppsa_cuda.cu   the device's products and gathers (bppsa_cuda.h) */
#ifndef SP_BPPSA_INTERNAL_H
#define SP_BPPSA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/kernels/csr_ops.h"
#include "core/model.h"
#include "core/tape.h"
#include "schedulers/backward/engines.h"
#include "schedulers/scan/scan.h"

/* EL_FACT (device only): a recurrent step's Jᵀ_t = Σ_g W_gᵀ·diag(v_g) (+ diag(z)), its
 * per-sample data the vectors, W_hh shared (op.h: chain_jt_factors). */
typedef enum { EL_NONE, EL_ID, EL_VEC, EL_CSR, EL_DENSE, EL_FACT } el_kind;

/* The static type of a scan element: the same for every sample and every step. */
typedef struct el_type {
    el_kind kind;
    int rows, cols;            /* VEC: rows only                                      */
    int64_t nnz;               /* CSR                                                 */
    const int32_t *indptr, *indices;   /* CSR pattern (owned by a link or a plan)     */
    int gates;                 /* FACT: the W_g blocks; zdiag: a diag(z) term too    */
    bool zdiag;
    const float *w;            /* FACT: W_hh on the device                           */
} el_type;

/* One sample's value of an element: the type's data. */
typedef struct el {
    float *v;
} el;

/* One product of one sample: out = M·X with the types fixed by the type pass. */
typedef struct task {
    el_type Mt, Xt, Ot;
    float *M, *X, *out;
    sp_spgemm_plan *plan;
} task;

typedef struct link {
    sp_node *node;             /* refreshed every step                               */
    int t;                     /* time step for recurrent ops, 0 otherwise           */
    el_type type;
    sp_csr pattern;            /* CSR links and dense links built from CSR           */
    /* A pruned layer (masks on its parameters): `pattern` keeps only the entries that
     * are not pruned; `full` is the op's own pattern, which jt_values fills, and keep[k]
     * the position in `full` of pattern's entry k. */
    sp_csr full;
    int64_t *keep;
} link;

typedef struct step_info {
    el_type out;               /* a[r] after the step (CARRY: the register)           */
    el_type mt, xt;            /* the product's operands M·X (device plan: launches)   */
    sp_spgemm_plan *spgemm;    /* UP with CSR·CSR                                    */
    double flops;              /* per sample                                         */
    bool skip;                 /* UP into a[n]: its value is never read               */
} step_info;

typedef struct bppsa_state {
    /* the cached chain: op and output shape of every node, to detect a new model */
    int nnodes;
    const sp_opdef **sig_ops;
    int (*sig_shapes)[SP_MAX_DIMS + 1];
    size_t *sig_in;            /* per-sample input size (a new T changes only this)    */
    sp_node **nodes;           /* backward order: nodes[0] produces the logits        */
    int n;                     /* links; a has n + 1 elements                          */
    link *links;               /* links[i] sits at a[i + 1]                            */
    int *node_pos;             /* per node: a-position of its (last-time-step) link    */
    sp_scan_plan plan;
    step_info *steps;
    /* per-sample arena bytes of the scan (each allocation rounded as the arena does) */
    size_t link_bytes, prod_bytes;
    sp_bppsa_stats stats;      /* this segment's figures, of the last backward          */
    double *auto_time;         /* --scan-levels auto: modelled time of K = 0 .. F      */
    int *auto_launches;        /* ... on the device: product launches of K = 0 .. F    */
    double *auto_launch_time;  /* ... and the launch latency's share of auto_time       */
    int auto_n;
    bool device;               /* the chain runs on the GPU (schedulers/backward/bppsa_cuda.cu)  */
    void *dev_cache;           /* its CSR patterns on the device (sp_bppsa_cache)      */
} bppsa_state;

/* The engine: one scan state per chain segment of the model, in the order they run. */
typedef struct bppsa_engine {
    bppsa_state *seg;
    int nseg;
    bool plan_printed;
    sp_bppsa_stats stats;      /* the whole backward: segments summed                  */
    int main_seg;              /* the segment with the most links (plans, pictures)    */
    bool have_stats;
    sp_bppsa_opts own;         /* its options (sp_engine.opts.own points here)         */
} bppsa_engine;

/* What sp_arena_alloc hands out for a request of `bytes` (core/arena.c: 64-byte units). */
static inline size_t bppsa_arena_bytes(size_t bytes) { return bytes ? (bytes + 63) & ~(size_t)63 : 64; }

/* A recurrent op that outputs its last hidden state scans over its time steps. */
static inline bool bppsa_scans_time(const sp_node *n) { return n->op->chain_len && n->out.ndim == 2; }

/* ---- the element algebra (bppsa_elem.c) ------------------------------------------------ */

/* Floats one sample's element of type t takes. */
size_t bppsa_el_floats(const el_type *t);
/* Floats one sample's element of a link takes: the element, then scratch for the op's
 * values (a pruned layer's full pattern; a dense link's CSR values before expansion). */
size_t bppsa_link_floats(const link *L);
/* A CSR element's values as an sp_csr with the type's pattern. */
sp_csr bppsa_csr_view(const el_type *t, float *data);
const char *bppsa_kind_name(el_kind k);   /* "none", "I", "vec", "csr", "dense", "fact" */
bool bppsa_same_type(const el_type *a, const el_type *b);
/* The type of M·X (M a matrix, X a vector or a matrix): the scan's only product. A
 * CSR·CSR product runs its symbolic phase here (*plan, owned by the caller); *flops is
 * per sample. */
el_type bppsa_product_type(const el_type *M, const el_type *X, sp_spgemm_plan **plan, double *flops);
/* out = M·X for one sample on the host, with the types the type pass decided. */
void bppsa_product(const el_type *Mt, float *M, const el_type *Xt, float *X, sp_spgemm_plan *plan, const el_type *Ot,
                   float *out);

/* ---- the plan (bppsa_plan.c) ----------------------------------------------------------- */

/* Free the scan plan and its step types (and the device copies of their patterns). */
void bppsa_plan_clear(bppsa_state *s);
/* Free everything of a segment and zero it. */
void bppsa_state_clear(bppsa_state *s);
/* The chain segments of the tape below the loss, in the tape's arena: segment k is
 * (*out)[(*start)[k] .. (*start)[k+1]), head first; returns their count. */
int bppsa_collect_segments(sp_tape *t, sp_node *loss, sp_node ***out, int **out_start);
/* Whether s was built for these nodes (ops, sample shapes, device): the plan holds. */
bool bppsa_same_chain(const bppsa_state *s, sp_node **nodes, int count, bool device);
/* The links of a new chain with their Jᵀ patterns (no plan yet). */
void bppsa_build_chain(bppsa_state *s, sp_node **nodes, int count, bool device);
/* Every step's types and the symbolic SpGEMMs, for s->plan (once per chain). */
void bppsa_type_pass(bppsa_state *s);
/* --scan-levels auto: the depth K the cost model (host or device) ranks fastest. */
int bppsa_auto_levels(bppsa_state *s, int B);
/* One segment's figures for a batch of B (memory: the scan's own arena bytes). */
void bppsa_compute_stats(bppsa_state *s, int B);
/* The whole backward's figures: the scanned segments summed, plus gradients and forward. */
void bppsa_engine_stats(bppsa_engine *E, const bool *scanned, sp_tape *t, sp_node *loss, int B,
                        size_t forward_bytes);
/* Whether plan step k multiplies (run_level makes a task of it for every sample). */
bool bppsa_step_multiplies(const bppsa_state *s, int k);

/* The device figures of one plan level for a batch of B. */
typedef struct dev_level {
    int launches;
    size_t written;            /* bytes of the products' results                       */
    double moved;              /* bytes read and written                                */
    double flops, sp_flops;    /* dense and own-kernel products; CSR·CSR (cuSPARSE)     */
    double seconds;            /* the model's time                                      */
} dev_level;
/* The device plan of the level starting at step k; returns the next level's first step. */
int bppsa_device_level(const bppsa_state *s, int k, int B, const sp_bppsa_gpu_model *g, dev_level *d);

/* ---- the report (bppsa_report.c) ------------------------------------------------------- */

void bppsa_print_plan(const bppsa_state *s, bool full);      /* --plan (--plan-full: steps) */
void bppsa_print_device_plan(const bppsa_state *s);          /* --plan on the device         */
void bppsa_print_memory(const sp_bppsa_stats *st);
void bppsa_draw_plan_svg(const bppsa_state *s, const char *path);   /* --plan-svg */

/* ---- the engine's hooks (bppsa_hooks.c; engine.h's check, report, plan) ----------------- */

void sp_bppsa_check(sp_engine *e, sp_model *m, const sp_tensor *x1, const int *y1);
void sp_bppsa_report(sp_engine *e, const sp_report_writer *w);
bool sp_bppsa_plan(sp_engine *e, sp_model *m, const sp_tensor *x, const int *y, const sp_report_writer *w);

#endif
