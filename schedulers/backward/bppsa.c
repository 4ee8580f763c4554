/* bppsa.c — back-propagation as a parallel scan (BPPSA, Wang et al., MLSys 2020).
 *
 * For a chain x_0 → f_1 → x_1 → … → f_n → x_n → loss, the gradients of every x_i are
 * the exclusive scan (Eq. 5) of
 *     a = [∇x_n l, Jᵀ_n, Jᵀ_{n−1}, …, Jᵀ_1]        with  A ⋄ B = B·A,
 * i.e. ∇x_{i−1} l = Jᵀ_i · ∇x_i l, computed in Θ(log n) levels by the modified Blelloch
 * scan of Algorithm 1 (schedulers/backward/scan.c makes the plan). The weight gradients then
 * follow independently from the recovered ∇x_i (Eq. 2).
 *
 * Links of the chain are the ops of the tape; a recurrent op contributes its T time
 * steps (Jᵀ_t = ∂h_t/∂h_{t−1}ᵀ, dense H×H), so an RNN scans over time (§4.1). Every
 * sample of the batch is an independent scan.
 *
 * A model that is not a chain (residual and dense connections) is cut into its chain
 * segments: maximal runs of single-input ops each read by exactly one op. Segments are
 * scanned one after another in reverse tape order, and joined by plain products: the
 * last (lowest) op of a segment sends δ_i = J_iᵀ·∇y into each of its inputs with
 * backward_input, adding into a producer that fans out, exactly as linear BP does. A
 * segment's head thus starts with its ∇y complete. (docs/BPPSA.md: why not I + J_f.)
 *
 * What is computed once and cached across steps (patterns never depend on the input,
 * §3.3–3.4): the chain, the plan, each link's Jᵀ pattern, and a *type pass* over the plan
 * that decides what every element is after every step (vector, CSR with a known
 * pattern, dense, identity) and runs the symbolic phase of every sparse×sparse product.
 * Each training step then only fills Jᵀ values and runs numeric products. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/device.h"
#include "core/kernels/dense.h"
#include "core/kernels/csr_ops.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/model.h"
#include "schedulers/backward/engines.h"
#include "schedulers/backward/scan.h"
#ifdef SP_HAVE_CUDA
#include "schedulers/backward/bppsa_cuda.h"
#endif

/* A link's Jᵀ is stored dense when at least this fraction of it is non-zero. */
#define DENSE_FILL 0.25

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

static size_t el_floats(const el_type *t);

/* Floats one sample's element of a link takes: the element, then scratch for the op's
 * values (a pruned layer's full pattern; a dense link's CSR values before expansion). */
static size_t link_floats(const link *L)
{
    size_t f = el_floats(&L->type);
    if (L->t == 0 && L->type.kind == EL_DENSE) f += (size_t)L->pattern.nnz;
    if (L->keep) f += (size_t)L->full.nnz;
    return f;
}

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

/* What sp_arena_alloc hands out for a request of `bytes` (core/arena.c: 64-byte units). */
static size_t arena_bytes(size_t bytes) { return bytes ? (bytes + 63) & ~(size_t)63 : 64; }

/* The engine: one scan state per chain segment of the model, in the order they run. */
typedef struct bppsa_engine {
    bppsa_state *seg;
    int nseg;
    bool plan_printed;
    sp_bppsa_stats stats;      /* the whole backward: segments summed                  */
    int main_seg;              /* the segment with the most links (plans, pictures)    */
    bool have_stats;
} bppsa_engine;

/* ---- element arithmetic ------------------------------------------------------------- */

static size_t el_floats(const el_type *t)
{
    switch (t->kind) {
    case EL_VEC: return (size_t)t->rows;
    case EL_CSR: return (size_t)t->nnz;
    case EL_DENSE: return (size_t)t->rows * (size_t)t->cols;
    case EL_FACT: return (size_t)(t->gates + t->zdiag) * (size_t)t->rows;
    default: return 0;
    }
}

static sp_csr csr_view(const el_type *t, float *data)
{
    return (sp_csr){.rows = t->rows, .cols = t->cols, .nnz = t->nnz, .indptr = (int32_t *)t->indptr,
                    .indices = (int32_t *)t->indices, .data = data};
}

static const char *kind_name(el_kind k)
{
    static const char *names[] = {"none", "I", "vec", "csr", "dense", "fact"};
    return names[k];
}

/* The type of M·X (M a matrix, X a vector or a matrix): the scan's only product. */
static el_type product_type(const el_type *M, const el_type *X, sp_spgemm_plan **plan, double *flops)
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
        sp_csr A = csr_view(M, NULL), B = csr_view(X, NULL);
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

/* out = M·X for one sample, with the types the type pass decided. */
static void product(const el_type *Mt, float *M, const el_type *Xt, float *X, sp_spgemm_plan *plan,
                    const el_type *Ot, float *out)
{
    if (Xt->kind == EL_ID || Mt->kind == EL_ID) {
        memcpy(out, Xt->kind == EL_ID ? M : X, el_floats(Ot) * sizeof(float));
        return;
    }
    if (Xt->kind == EL_VEC) {
        if (Mt->kind == EL_CSR) {
            sp_csr A = csr_view(Mt, M);
            sp_csr_spmv(&A, X, out);
        } else {
            sp_gemm(false, false, Mt->rows, 1, Mt->cols, 1.0f, M, Mt->cols, X, 1, 0.0f, out, 1);
        }
        return;
    }
    if (plan) {
        sp_csr A = csr_view(Mt, M), B = csr_view(Xt, X), C = csr_view(Ot, out);
        sp_spgemm_numeric(plan, &A, &B, &C);
    } else if (Mt->kind == EL_CSR) {
        sp_csr A = csr_view(Mt, M);
        sp_csr_dense_mm(&A, X, Xt->cols, out);
    } else if (Xt->kind == EL_CSR) {
        sp_csr B = csr_view(Xt, X);
        sp_dense_csr_mm(Mt->rows, M, &B, out);
    } else {
        sp_dense_mm(Mt->rows, Xt->cols, Mt->cols, M, X, out);
    }
}

/* ---- the chain ---------------------------------------------------------------------- */

static void plan_clear(bppsa_state *s)
{
#ifdef SP_HAVE_CUDA
    sp_bppsa_cuda_cache_reset(s->dev_cache);   /* device copies of patterns about to go */
#endif
    if (s->steps)
        for (int i = 0; i < s->plan.nsteps; i++)
            if (s->steps[i].spgemm) {
                sp_spgemm_plan_free(s->steps[i].spgemm);
                free(s->steps[i].spgemm);
            }
    sp_scan_plan_free(&s->plan);
    free(s->steps);
    s->steps = NULL;
}

static void state_clear(bppsa_state *s)
{
    for (int i = 0; i < s->n; i++) {
        sp_csr_free(&s->links[i].pattern);
        sp_csr_free(&s->links[i].full);
        free(s->links[i].keep);
    }
    plan_clear(s);
#ifdef SP_HAVE_CUDA
    sp_bppsa_cuda_cache_free(s->dev_cache);
#endif
    free(s->auto_time);
    free(s->auto_launches);
    free(s->auto_launch_time);
    free(s->links);
    free(s->node_pos);
    free(s->nodes);
    free(s->sig_ops);
    free(s->sig_shapes);
    free(s->sig_in);
    memset(s, 0, sizeof *s);
}

/* A recurrent op that outputs its last hidden state scans over its time steps. */
static bool scans_time(const sp_node *n) { return n->op->chain_len && n->out.ndim == 2; }

/* The chain segments of the tape below the loss, in the tape's arena (a step allocates
 * nothing, and an error exit leaves nothing behind). Segment k is nodes[start[k] ..
 * start[k+1]): its head (highest on the tape, whose ∇y is complete when the segment
 * runs) first, then each op's single input down to the tail. A node x extends the
 * segment below it to its input p when x has one input, a Jᵀ and no time steps, and p is
 * an op that needs a gradient and is read by x alone. Heads descend, so every consumer
 * of a head belongs to an earlier segment: segments run in this order. */
static int collect_segments(sp_tape *t, sp_node *loss, sp_node ***out, int **out_start)
{
    int N = loss->index;
    sp_node **nodes = sp_tape_alloc(t, (size_t)(N + 1) * sizeof *nodes);
    int *start = sp_tape_alloc(t, (size_t)(N + 2) * sizeof *start);
    bool *taken = sp_tape_alloc(t, (size_t)(N + 1) * sizeof *taken);
    memset(taken, 0, (size_t)(N + 1) * sizeof *taken);
    int nseg = 0, count = 0;
    for (int i = N - 1; i >= 0; i--) {
        sp_node *x = t->nodes[i];
        if (!x->op || !x->needs_grad || taken[i]) continue;
        start[nseg++] = count;
        for (;;) {
            taken[x->index] = true;
            nodes[count++] = x;
            sp_node *p = x->input;
            if (x->ninputs != 1 || !sp_node_has_jt(x) || x->op->chain_len || !p->op || !p->needs_grad ||
                p->nconsumers != 1)
                break;
            x = p;
        }
    }
    start[nseg] = count;
    *out = nodes;
    *out_start = start;
    return nseg;
}

static bool same_chain(const bppsa_state *s, sp_node **nodes, int count, bool device)
{
    if (!s->sig_ops || s->nnodes != count || s->device != device) return false;
    for (int i = 0; i < count; i++) {
        if (s->sig_ops[i] != nodes[i]->op || s->sig_shapes[i][0] != nodes[i]->out.ndim ||
            s->sig_in[i] != sp_tensor_sample_numel(sp_node_x(nodes[i])))
            return false;
        for (int d = 1; d < nodes[i]->out.ndim; d++)   /* dim 0 is the batch: patterns ignore it */
            if (s->sig_shapes[i][d + 1] != nodes[i]->out.shape[d]) return false;
    }
    return true;
}

/* A layer with pruned parameters: its Jᵀ entries that come from pruned weights are 0 at
 * every step (the optimizer keeps them 0), so they leave the pattern and the symbolic
 * phase sees the real sparsity. Which entries: the op's values with every masked weight
 * replaced by its mask (Jᵀ entries of conv and linear are single weights, so an entry is
 * 0 exactly where its weight is pruned). */
static void drop_pruned(link *L, sp_node *node)
{
    sp_layer *l = node->layer;
    bool masked = false;
    for (int i = 0; l && i < l->nparams; i++) masked |= l->params[i]->mask != NULL;
    if (!masked) return;
    if (node->out.device != SP_CPU)
        sp_fail("bppsa: layer %s has pruned parameters; on the device bppsa takes unpruned layers only", l->name);
    float *saved[SP_MAX_PARAMS];
    for (int i = 0; i < l->nparams; i++) {
        saved[i] = l->params[i]->value.data;
        if (l->params[i]->mask) l->params[i]->value.data = (float *)l->params[i]->mask;   /* read only */
    }
    sp_csr full = L->pattern;
    full.data = sp_xmalloc((size_t)(full.nnz ? full.nnz : 1) * sizeof(float));
    node->op->jt_values(node, 0, 0, &full);
    for (int i = 0; i < l->nparams; i++) l->params[i]->value.data = saved[i];
    int64_t kept = 0;
    for (int64_t k = 0; k < full.nnz; k++) kept += full.data[k] != 0.0f;
    sp_csr p;
    sp_csr_alloc(&p, full.rows, full.cols, kept);
    L->keep = sp_xmalloc((size_t)(kept ? kept : 1) * sizeof *L->keep);
    int64_t j = 0;
    for (int r = 0; r < full.rows; r++) {
        for (int64_t k = full.indptr[r]; k < full.indptr[r + 1]; k++)
            if (full.data[k] != 0.0f) {
                p.indices[j] = full.indices[k];
                L->keep[j++] = k;
            }
        p.indptr[r + 1] = (int32_t)j;
    }
    free(full.data);
    p.own_data = false;
    free(p.data);
    p.data = NULL;
    if (L->pattern.own_data) free(L->pattern.data);   /* values live in the arena, per step */
    L->full = L->pattern;   /* the op's pattern: jt_values fills it */
    L->full.data = NULL;
    L->full.own_data = false;
    L->pattern = p;
}

static void build_link(link *L, sp_node *node, int t, bool needed, bool device)
{
    L->node = node;
    L->t = t;
    if (scans_time(node)) {
        int H = node->out.shape[node->out.ndim - 1];
        L->type = (el_type){.kind = EL_DENSE, .rows = H, .cols = H};
        if (device && node->op->chain_jt_factors) {   /* W_hh once, the diagonals as vectors */
            L->type.kind = EL_FACT;
            L->type.gates = node->op->chain_jt_factors(node, 1, NULL, &L->type.zdiag, &L->type.w);
        }
        return;
    }
    int in = (int)sp_tensor_sample_numel(sp_node_x(node)), out = (int)sp_tensor_sample_numel(&node->out);
    L->type = (el_type){.kind = EL_CSR, .rows = in, .cols = out};
    if (!needed) return;   /* a[n]: Jᵀ_1 is never read (its product is replaced by I) */
    node->op->jt_pattern(node, 0, &L->pattern);
    drop_pruned(L, node);
    if ((double)L->pattern.nnz >= DENSE_FILL * (double)in * (double)out) {
        L->type.kind = EL_DENSE;
    } else {
        L->type.nnz = L->pattern.nnz;
        L->type.indptr = L->pattern.indptr;
        L->type.indices = L->pattern.indices;
    }
}

static void build_chain(bppsa_state *s, sp_node **nodes, int count, bool device)
{
    state_clear(s);
    s->device = device;
    s->nnodes = count;
    s->nodes = sp_xrealloc(s->nodes, (size_t)count * sizeof *s->nodes);
    memcpy(s->nodes, nodes, (size_t)count * sizeof *nodes);
    s->sig_ops = sp_xmalloc((size_t)count * sizeof *s->sig_ops);
    s->sig_shapes = sp_xmalloc((size_t)count * sizeof *s->sig_shapes);
    s->sig_in = sp_xmalloc((size_t)count * sizeof *s->sig_in);
    s->node_pos = sp_xmalloc((size_t)count * sizeof *s->node_pos);
    int n = 0;
    for (int i = 0; i < count; i++) {
        s->sig_ops[i] = nodes[i]->op;
        s->sig_shapes[i][0] = nodes[i]->out.ndim;
        s->sig_in[i] = sp_tensor_sample_numel(sp_node_x(nodes[i]));
        for (int d = 0; d < nodes[i]->out.ndim; d++) s->sig_shapes[i][d + 1] = nodes[i]->out.shape[d];
        if (scans_time(nodes[i])) {   /* the tail of its segment (collect_segments) */
            n += nodes[i]->op->chain_len(nodes[i]);
        } else {
            n++;
        }
    }
    s->n = n;
    s->links = sp_xcalloc((size_t)n, sizeof *s->links);
    int pos = 0;
    for (int i = 0; i < count; i++) {
        s->node_pos[i] = pos + 1;
        int T = scans_time(nodes[i]) ? nodes[i]->op->chain_len(nodes[i]) : 0;
        for (int t = T ? T : 1; t >= 1; t--, pos++)
            build_link(&s->links[pos], nodes[i], T ? t : 0, pos + 1 < n, device);
    }
}

/* Decide every step's output type and run the symbolic SpGEMMs (once per chain). */
static void type_pass(bppsa_state *s)
{
    int n = s->n;
    el_type *a = sp_xcalloc((size_t)n + 1, sizeof *a), reg = {.kind = EL_ID};
    a[0] = (el_type){.kind = EL_VEC, .rows = (int)sp_tensor_sample_numel(&s->nodes[0]->out)};
    for (int i = 0; i < n; i++) a[i + 1] = s->links[i].type;
    a[n].kind = EL_NONE;
    s->steps = sp_xcalloc((size_t)s->plan.nsteps, sizeof *s->steps);
    for (int k = 0; k < s->plan.nsteps; k++) {
        const sp_scan_step *st = &s->plan.steps[k];
        step_info *si = &s->steps[k];
        switch (st->kind) {
        case SP_SCAN_UP:
            si->skip = st->r == n;
            si->mt = a[st->r], si->xt = a[st->l];
            if (!si->skip) a[st->r] = si->out = product_type(&a[st->r], &a[st->l], &si->spgemm, &si->flops);
            break;
        case SP_SCAN_IDENTITY: a[st->r] = (el_type){.kind = EL_ID}; break;
        case SP_SCAN_CARRY: {
            if (st->l < 0) reg = (el_type){.kind = EL_ID};
            el_type old = a[st->r];
            a[st->r] = reg;
            si->skip = st->r == n;
            si->mt = old, si->xt = reg;
            if (!si->skip) reg = si->out = product_type(&old, &reg, &si->spgemm, &si->flops);
            break;
        }
        case SP_SCAN_DOWN: {
            el_type T = a[st->l];
            si->mt = T, si->xt = a[st->r];
            a[st->l] = a[st->r];
            a[st->r] = si->out = product_type(&T, &a[st->r], &si->spgemm, &si->flops);
            break;
        }
        }
    }
    for (int i = 1; i <= n; i++)
        if (a[i].kind != EL_VEC) sp_fail("bppsa: internal: a[%d] ends as %s", i, kind_name(a[i].kind));
    free(a);
    /* memory per sample: the Jᵀ values of every link but a[n]'s, and one new buffer per
     * product (moves and skipped steps allocate nothing; nothing is freed in a step) */
    s->link_bytes = s->prod_bytes = 0;
    for (int i = 0; i + 1 < n; i++) s->link_bytes += arena_bytes(link_floats(&s->links[i]) * sizeof(float));
    for (int k = 0; k < s->plan.nsteps; k++)
        if (s->plan.steps[k].product && !s->steps[k].skip)
            s->prod_bytes += arena_bytes(el_floats(&s->steps[k].out) * sizeof(float));
}

static double modelled_time(const bppsa_state *s, int B, int P);
static double device_time(const bppsa_state *s, int B, const sp_bppsa_gpu_model *g, int *launches, double *launch_s);

/* One segment's figures for a batch of B (memory: the scan's own arena bytes). */
static void compute_stats(bppsa_state *s, int B)
{
    const sp_scan_plan *p = &s->plan;
    sp_bppsa_stats *st = &s->stats;
    *st = (sp_bppsa_stats){.n = s->n, .up_levels = p->up_levels, .full_levels = sp_scan_full_levels(s->n),
                           .levels = p->work_levels, .linear_levels = s->n - 1, .chain_depth = p->chain_depth,
                           .batch = B};
    for (int k = 0; k < p->nsteps;) {   /* a level lasts as long as its longest step */
        double lvl_max = 0;
        int level = p->steps[k].level;
        for (; k < p->nsteps && p->steps[k].level == level; k++) {
            lvl_max = fmax(lvl_max, s->steps[k].flops);
            st->flops += s->steps[k].flops;
            el_kind ok = s->steps[k].out.kind;
            st->matmat += p->steps[k].product && (ok == EL_CSR || ok == EL_DENSE);
        }
        st->critical_flops += lvl_max;
    }
    for (int i = 0; i + 1 < s->n; i++) {
        const el_type *ty = &s->links[i].type;
        double entries = ty->kind == EL_CSR ? (double)ty->nnz : (double)ty->rows * ty->cols;
        st->linear_flops += 2 * entries;
        st->dense_jt_entries += s->links[i].keep ? (double)s->links[i].full.nnz : entries;
    }
    size_t n1 = (size_t)s->n + 1, b = (size_t)B;
    st->scan_bytes = b * (s->link_bytes + s->prod_bytes) + arena_bytes(n1 * b * sizeof(el)) +
                     arena_bytes(n1 * sizeof(el_type)) + arena_bytes(b * sizeof(el)) + arena_bytes(n1 * b * sizeof(task));
    st->jt_bytes = b * s->link_bytes;
    st->product_bytes = b * s->prod_bytes;
    for (int i = 0; i < s->nnodes; i++)   /* ∇h_t of a recurrent op for its weight gradient */
        if (scans_time(s->nodes[i]) && s->nodes[i]->layer && s->nodes[i]->layer->nparams)
            st->scan_bytes += arena_bytes((size_t)B * (size_t)s->nodes[i]->op->chain_len(s->nodes[i]) *
                                          sp_tensor_sample_numel(&s->nodes[i]->out) * sizeof(float));
    int P = sp_get_threads();
    if (s->device) {
        sp_bppsa_gpu_model g = sp_bppsa_gpu_model_get();
        st->modelled_seconds = device_time(s, B, &g, NULL, NULL);
    } else {
        st->modelled_seconds = modelled_time(s, B, P > 0 ? P : 1);
    }
}

/* The whole backward: the scanned segments summed (they run one after another), the
 * gradient buffers (sp_alloc_grads) and bookkeeping, and the forward's bytes, measured
 * when the backward starts (every engine keeps those). peak = the arena's high water. */
static void engine_stats(bppsa_engine *E, const bool *scanned, sp_tape *t, sp_node *loss, int B, size_t forward_bytes)
{
    sp_bppsa_stats *st = &E->stats;
    *st = (sp_bppsa_stats){.batch = B, .forward_bytes = forward_bytes};
    int best = -1;
    for (int k = 0; k < E->nseg; k++) {
        if (!scanned[k]) continue;
        const sp_bppsa_stats *g = &E->seg[k].stats;
        if (best < 0 || g->n > E->seg[best].stats.n) best = k;
        st->n += g->n;
        st->levels += g->levels;
        st->linear_levels += g->linear_levels;
        st->chain_depth += g->chain_depth;
        st->matmat += g->matmat;
        st->flops += g->flops;
        st->critical_flops += g->critical_flops;
        st->linear_flops += g->linear_flops;
        st->modelled_seconds += g->modelled_seconds;
        st->dense_jt_entries += g->dense_jt_entries;
        st->scan_bytes += g->scan_bytes;
        st->jt_bytes += g->jt_bytes;
        st->product_bytes += g->product_bytes;
    }
    if (best >= 0) {
        st->up_levels = E->seg[best].stats.up_levels;
        st->full_levels = E->seg[best].stats.full_levels;
    }
    E->main_seg = best < 0 ? 0 : best;
    int N = loss->index;   /* collect_segments' arrays, then sp_alloc_grads' */
    size_t g = arena_bytes((size_t)(N + 1) * sizeof(sp_node *)) + arena_bytes((size_t)(N + 2) * sizeof(int)) +
               arena_bytes((size_t)(N + 1) * sizeof(bool)) + arena_bytes((size_t)(N + 1) * sizeof(int));
    for (int i = 0; i <= N; i++)
        if (t->nodes[i]->needs_grad || t->nodes[i] == loss) g += arena_bytes(t->nodes[i]->out.numel * sizeof(float));
    st->grad_bytes = g;
    st->peak_bytes = forward_bytes + st->grad_bytes + st->scan_bytes;
    E->have_stats = true;
}

/* ---- the plan, printed (--plan) ---------------------------------------------------------- */

/* --scan-levels auto: the depth K whose plan the cost model says runs fastest here.
 * Model: the levels run one after another; a level lasts as long as the larger of its
 * most expensive product (a product is not split across threads) and its whole work for
 * the batch spread over the threads, at RATE FLOP/s per thread, plus one barrier:
 *     time(K) = Σ_levels that multiply [ max(crit_l, B · work_l / P) / RATE + sync ].
 * sync is measured once (the median of 15 empty sp_parallel_for rounds): on a loaded
 * machine a barrier costs far more than its idle ~10 µs, which favours fewer levels. With
 * few threads and cheap barriers the work term rules and small K wins (K = 0 is linear
 * BP); with many threads or costly barriers the full scan wins (the paper's GPU case). */
#define AUTO_RATE 1e9    /* FLOP/s per thread for the scan's small products (this CPU) */

static double g_sync = -1;   /* seconds per barrier, measured on first use */

static void nothing(void *ctx, size_t b, size_t e) { (void)ctx, (void)b, (void)e; }

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double barrier_seconds(void)
{
    if (g_sync >= 0) return g_sync;
    double t[15];
    int P = sp_get_threads();
    for (int i = 0; i < 15; i++) {
        double t0 = sp_now();
        sp_parallel_for((size_t)(P > 1 ? 4 * P : 1), nothing, NULL);
        t[i] = sp_now() - t0;
    }
    qsort(t, 15, sizeof *t, cmp_dbl);
    return g_sync = t[7];
}

static double modelled_time(const bppsa_state *s, int B, int P)
{
    const sp_scan_plan *p = &s->plan;
    double time = 0, sync = barrier_seconds();
    for (int k = 0; k < p->nsteps;) {
        double crit = 0, work = 0;
        bool any = false;
        int level = p->steps[k].level;
        for (; k < p->nsteps && p->steps[k].level == level; k++) {
            crit = fmax(crit, s->steps[k].flops);
            work += s->steps[k].flops;
            any |= p->steps[k].product;
        }
        if (any) time += fmax(crit, (double)B * work / P) / AUTO_RATE + sync;
    }
    return time;
}

/* ---- the device cost model (--scan-levels auto on the device) ------------------------
 *
 * On a GPU a level's products of one operand type are one batched launch (run_tasks_dev),
 * so a level costs its launches' latency plus its arithmetic and memory traffic, the whole
 * batch spread over the device; the levels run one after another (each waits for the one
 * before on the lane's stream):
 *
 *     time_l  = launches_l · LAUNCH + B·Σ flops(dense, own kernels) / GEMM
 *             + B·Σ flops(CSR·CSR) / SPGEMM + B·Σ bytes(M, X, out) / BW
 *     time(K) = Σ_levels time_l
 *
 * A CSR·CSR group is one cusparseSpGEMMreuse_compute per sample (cuSPARSE has no batched
 * SpGEMM): B launches. FLOPs are the plan's (a CSR product's: 2 per multiply-add of its
 * symbolic phase, i.e. nnz-based); bytes are the operands read and the result written
 * once (a factored recurrent Jᵀ its (gates + 1)·H floats; W_hh, shared, not counted).
 * The Jᵀ fills and the weight gradients cost the same at every K and are left out.
 * Constants: an H100 SXM5 (NVIDIA's H100 datasheet: 67 TFLOP/s FP32 without tensor
 * cores, 3.35 TB/s HBM3); 5 µs per launch (a kernel launch plus the pointer arrays'
 * upload queued before it, the order of a launch's host-to-start latency); cuSPARSE
 * SpGEMM 20 GFLOP/s (no public figure: an estimate of its hash-based numeric phase,
 * memory-bound far below the GEMM rate). Peak rates flatter the small H×H GEMMs of an
 * RNN; the model ranks depths, it does not predict milliseconds. */
#define GPU_LAUNCH_S 5e-6
#define GPU_GEMM_FLOPS 67e12
#define GPU_SPGEMM_FLOPS 20e9
#define GPU_BANDWIDTH 3.35e12

sp_bppsa_gpu_model sp_bppsa_gpu_model_get(void)
{
    sp_bppsa_gpu_model g = {.name = "H100 SXM5 (defaults)", .launch_s = GPU_LAUNCH_S, .gemm_flops = GPU_GEMM_FLOPS,
                            .spgemm_flops = GPU_SPGEMM_FLOPS, .bandwidth = GPU_BANDWIDTH};
    const char *env = getenv("SCANPROP_GPU_MODEL");
    if (!env || !*env) return g;
    snprintf(g.name, sizeof g.name, "SCANPROP_GPU_MODEL");
    static const struct {
        const char *key;
        size_t off;
        double unit;
    } keys[] = {{"launch_us", offsetof(sp_bppsa_gpu_model, launch_s), 1e-6},
                {"gemm_tflops", offsetof(sp_bppsa_gpu_model, gemm_flops), 1e12},
                {"spgemm_gflops", offsetof(sp_bppsa_gpu_model, spgemm_flops), 1e9},
                {"bw_gbs", offsetof(sp_bppsa_gpu_model, bandwidth), 1e9}};
    const char *p = env;
    while (*p) {
        size_t len = strcspn(p, ","), k = 0, klen = strcspn(p, "=");
        for (; k < sizeof keys / sizeof *keys; k++)
            if (klen < len && strlen(keys[k].key) == klen && strncmp(p, keys[k].key, klen) == 0) break;
        char *end;
        double v = k < sizeof keys / sizeof *keys ? strtod(p + klen + 1, &end) : 0;
        if (k == sizeof keys / sizeof *keys || end != p + len || !(v > 0) || !isfinite(v))
            sp_fail("SCANPROP_GPU_MODEL: '%.*s': expected launch_us, gemm_tflops, spgemm_gflops or bw_gbs = a "
                    "positive number, comma-separated", (int)len, p);
        *(double *)((char *)&g + keys[k].off) = v * keys[k].unit;
        p += len + (p[len] == ',');
    }
    return g;
}

/* The device figures of one plan level for a batch of B. */
typedef struct dev_level {
    int launches;
    size_t written;            /* bytes of the products' results                       */
    double moved;              /* bytes read and written                                */
    double flops, sp_flops;    /* dense and own-kernel products; CSR·CSR (cuSPARSE)     */
    double seconds;            /* the model's time                                      */
} dev_level;

static bool same_type(const el_type *a, const el_type *b);
static bool step_multiplies(const bppsa_state *s, int k);

/* The device plan of the level starting at step k: launches (one per distinct operand
 * types, as run_tasks_dev groups them; B per CSR·CSR step), bytes, FLOPs and modelled
 * time for a batch of B. Returns the first step of the next level. */
static int device_level(const bppsa_state *s, int k, int B, const sp_bppsa_gpu_model *g, dev_level *d)
{
    const sp_scan_plan *p = &s->plan;
    int level = p->steps[k].level, start = k;
    *d = (dev_level){0};
    for (; k < p->nsteps && p->steps[k].level == level; k++) {
        if (!step_multiplies(s, k)) continue;
        const step_info *si = &s->steps[k];
        size_t out = el_floats(&si->out) * sizeof(float);
        d->written += (size_t)B * out;
        d->moved += (double)B * (double)((el_floats(&si->mt) + el_floats(&si->xt)) * sizeof(float) + out);
        if (si->spgemm) {
            d->sp_flops += (double)B * si->flops;
            d->launches += B;
            continue;
        }
        d->flops += (double)B * si->flops;
        bool seen = false;
        for (int j = start; j < k && !seen; j++)
            seen = step_multiplies(s, j) && same_type(&s->steps[j].mt, &si->mt) && same_type(&s->steps[j].xt, &si->xt) &&
                   same_type(&s->steps[j].out, &si->out);
        d->launches += !seen;
    }
    d->seconds = d->launches * g->launch_s + d->flops / g->gemm_flops + d->sp_flops / g->spgemm_flops +
                 d->moved / g->bandwidth;
    return k;
}

/* The device model's time of the current plan; its launches and their latency. */
static double device_time(const bppsa_state *s, int B, const sp_bppsa_gpu_model *g, int *launches, double *launch_s)
{
    double time = 0;
    int all = 0;
    for (int k = 0; k < s->plan.nsteps;) {
        dev_level d;
        k = device_level(s, k, B, g, &d);
        time += d.seconds;
        all += d.launches;
    }
    if (launches) *launches = all;
    if (launch_s) *launch_s = all * g->launch_s;
    return time;
}

static int auto_levels(bppsa_state *s, int B)
{
    int F = sp_scan_full_levels(s->n), best = 0, P = sp_get_threads();
    double best_t = INFINITY;
    s->auto_time = sp_xrealloc(s->auto_time, (size_t)(F + 1) * sizeof *s->auto_time);
    s->auto_launches = sp_xrealloc(s->auto_launches, (size_t)(F + 1) * sizeof *s->auto_launches);
    s->auto_launch_time = sp_xrealloc(s->auto_launch_time, (size_t)(F + 1) * sizeof *s->auto_launch_time);
    s->auto_n = F + 1;
    sp_bppsa_gpu_model g = sp_bppsa_gpu_model_get();
    for (int K = 0; K <= F; K++) {
        sp_scan_plan_build(&s->plan, s->n, K);
        type_pass(s);
        s->auto_launches[K] = 0, s->auto_launch_time[K] = 0;
        double t = s->auto_time[K] = s->device
                                         ? device_time(s, B, &g, &s->auto_launches[K], &s->auto_launch_time[K])
                                         : modelled_time(s, B, P > 0 ? P : 1);
        if (t < best_t) best_t = t, best = K;
        plan_clear(s);
    }
    return best;
}


static const char *fmt_bytes(char *buf, size_t len, size_t bytes)
{
    if (bytes >= (size_t)1 << 30) snprintf(buf, len, "%.2f GiB", (double)bytes / (double)(1 << 30));
    else if (bytes >= (size_t)1 << 20) snprintf(buf, len, "%.1f MiB", (double)bytes / (double)(1 << 20));
    else snprintf(buf, len, "%.1f KiB", (double)bytes / 1024.0);
    return buf;
}

static bool same_type(const el_type *a, const el_type *b)
{
    return a->kind == b->kind && a->rows == b->rows && a->cols == b->cols && a->nnz == b->nnz &&
           a->indptr == b->indptr && a->indices == b->indices && a->gates == b->gates && a->zdiag == b->zdiag &&
           a->w == b->w;
}

/* Whether plan step k multiplies (run_level makes a task of it for every sample). */
static bool step_multiplies(const bppsa_state *s, int k)
{
    const sp_scan_step *st = &s->plan.steps[k];
    if (s->steps[k].skip || st->kind == SP_SCAN_IDENTITY) return false;
    return st->kind == SP_SCAN_UP || st->product;
}

static const char *fmt_bytes(char *buf, size_t len, size_t bytes);

static void print_device_plan(const bppsa_state *s)
{
    const sp_scan_plan *p = &s->plan;
    int B = s->stats.batch, total = 0;
    size_t all = 0;
    double time = 0;
    char buf[32], mv[32];
    sp_bppsa_gpu_model g = sp_bppsa_gpu_model_get();
    printf("device plan (batch %d): level: launches, bytes written, bytes moved, FLOP (CSR·CSR), modelled time\n", B);
    for (int k = 0; k < p->nsteps;) {
        int level = p->steps[k].level;
        dev_level d;
        k = device_level(s, k, B, &g, &d);
        if (!d.launches) continue;
        printf("  level %d: %d launch%s, %s, %s moved, %.3g FLOP (%.3g), %.3g us\n", level, d.launches,
               d.launches == 1 ? "" : "es", fmt_bytes(buf, sizeof buf, d.written), fmt_bytes(mv, sizeof mv, (size_t)d.moved),
               d.flops + d.sp_flops, d.sp_flops, 1e6 * d.seconds);
        total += d.launches;
        all += d.written;
        time += d.seconds;
    }
    printf("device plan: %d product launches in all, %s of products, modelled %.3g ms on %s (launch %.3g us, GEMM "
           "%.3g TFLOP/s, SpGEMM %.3g GFLOP/s, memory %.3g GB/s); Jt: one launch per op (two where a CSR Jt is "
           "expanded dense)\n",
           total, fmt_bytes(buf, sizeof buf, all), 1e3 * time, g.name, 1e6 * g.launch_s, g.gemm_flops / 1e12,
           g.spgemm_flops / 1e9, g.bandwidth / 1e9);
    if (!s->auto_time) return;
    /* why auto chose its depth: the two ends and the choice, launches against work */
    int K = p->up_levels, F = s->auto_n - 1;
    printf("device auto: chose K=%d%s, %.3g ms modelled (%d launches = %.3g ms, arithmetic and memory %.3g ms)", K,
           K == F ? " (the full scan)" : K == 0 ? " (linear BP's order)" : "", 1e3 * s->auto_time[K],
           s->auto_launches[K], 1e3 * s->auto_launch_time[K], 1e3 * (s->auto_time[K] - s->auto_launch_time[K]));
    for (int j = 0; j <= F; j += F > 0 ? F : 1)
        if (j != K)
            printf("; K=%d: %.3g ms (%d launches = %.3g ms, work %.3g ms)", j, 1e3 * s->auto_time[j],
                   s->auto_launches[j], 1e3 * s->auto_launch_time[j], 1e3 * (s->auto_time[j] - s->auto_launch_time[j]));
    printf(": %s\n", K == F   ? "fewer levels save more launch latency than the extra products cost"
                      : K == 0 ? "the scan's extra products cost more than the launches they save"
                               : "deeper levels' products cost more than the launches they save");
}

/* What a[i] (i = 1..n) holds: the Jᵀ of the op sp_node_label names, at time step t for a
 * recurrent op ("rnn[t=3]"). */
static const char *link_label(const link *L, char *buf, size_t len)
{
    char name[SP_NAME_LEN + 16];
    sp_node_label(L->node, name, sizeof name);
    if (scans_time(L->node)) snprintf(buf, len, "%s[t=%d]", name, L->t);
    else snprintf(buf, len, "%s", name);
    return buf;
}

static void print_plan(const bppsa_state *s, bool full)
{
    const sp_scan_plan *p = &s->plan;
    const sp_bppsa_stats *st = &s->stats;
    printf("bppsa plan: n = %d links, %d up-sweep levels (full: %d), batch %d\n", s->n, p->up_levels,
           st->full_levels, st->batch);
    if (full) {
        printf("a[1..%d] = Jt of:", s->n);
        for (int i = 0; i < s->n; i++) {
            char name[SP_NAME_LEN + 32];
            printf(" %s", link_label(&s->links[i], name, sizeof name));
        }
        printf("\n");
        printf("%5s %-8s %5s %5s  %-26s %14s %s\n", "level", "kind", "l", "r", "result", "FLOP/sample", "critical");
        for (int k = 0, level_start = 0; k < p->nsteps; k++) {
            const sp_scan_step *sc = &p->steps[k];
            if (k > 0 && sc->level != p->steps[k - 1].level) level_start = k;
            static double lvl_max;
            if (k == level_start) {
                lvl_max = 0;
                for (int j = k; j < p->nsteps && p->steps[j].level == sc->level; j++)
                    lvl_max = fmax(lvl_max, s->steps[j].flops);
            }
            const step_info *si = &s->steps[k];
            static const char *kinds[] = {"up", "identity", "carry", "down"};
            char res[64] = "-";
            if (si->skip) {
                snprintf(res, sizeof res, "skipped (a[n] unused)");
            } else if (sc->kind != SP_SCAN_IDENTITY) {
                int len = snprintf(res, sizeof res, "%s %dx%d%s", kind_name(si->out.kind), si->out.rows,
                                   si->out.kind == EL_VEC ? 1 : si->out.cols, sc->product ? "" : " (move)");
                if (si->out.kind == EL_CSR)
                    snprintf(res + len, sizeof res - (size_t)len, " nnz %lld", (long long)si->out.nnz);
            }
            bool crit = si->flops > 0 && si->flops == lvl_max;
            printf("%5d %-8s %5d %5d  %-26s %14.0f %s\n", sc->level, kinds[sc->kind], sc->l, sc->r, res, si->flops,
                   crit ? "*" : "");
        }
    }
    printf("sequential levels: bppsa %d vs linear BP %d (longest product chain %d); matrix-matrix products %d\n",
           st->levels, st->linear_levels, st->chain_depth, st->matmat);
    printf("FLOP per sample: bppsa total %.0f, critical path %.0f; linear BP %.0f (bppsa does %.1fx the work)\n",
           st->flops, st->critical_flops, st->linear_flops, st->linear_flops > 0 ? st->flops / st->linear_flops : 0.0);
    if (s->auto_time) {
        if (s->device) printf("--scan-levels auto (device model, modelled time per step):");
        else printf("--scan-levels auto (modelled time per step on %d threads):", sp_get_threads());
        for (int K = 0; K < s->auto_n; K++)
            printf(" K=%d %.3g ms%s", K, 1e3 * s->auto_time[K], K == p->up_levels ? " (chosen)" : "");
        printf("\n");
    }
    fflush(stdout);
}

/* ---- the scan tree, drawn (--plan-svg) -------------------------------------------------- */

#define SVG_MAX_LINKS 128

/* One column per element of a, one row per level (row 0: the input array). A step is a
 * node at its result's position, coloured by what it computes; its edges come from where
 * its operands were last written. The most expensive step of every level that multiplies
 * (the critical path of the level-synchronous schedule) has a red outline. */
/* An operand's path: down its own column while it is untouched, then to the step. */
static void edge_to(FILE *f, int x1, int y1, int x2, int y2, int rowh, const char *style)
{
    int ybend = y2 - rowh > y1 ? y2 - rowh : y1;
    fprintf(f, "<polyline points=\"%d,%d %d,%d %d,%d\" fill=\"none\" %s/>\n", x1, y1, x1, ybend, x2, y2, style);
}

static void print_memory(const sp_bppsa_stats *st)
{
    char b[6][32];
    printf("memory per step: scan %s (Jt values %s, products %s) + gradients %s + forward %s = peak %s"
           " (linear BP: forward + gradients)\n",
           fmt_bytes(b[0], 32, st->scan_bytes), fmt_bytes(b[1], 32, st->jt_bytes), fmt_bytes(b[2], 32, st->product_bytes),
           fmt_bytes(b[3], 32, st->grad_bytes), fmt_bytes(b[4], 32, st->forward_bytes),
           fmt_bytes(b[5], 32, st->peak_bytes));
    fflush(stdout);
}

static void draw_plan_svg(const bppsa_state *s, const char *path)
{
    const sp_scan_plan *p = &s->plan;
    int n = s->n;
    if (n > SVG_MAX_LINKS)
        sp_fail("--plan-svg: the chain has %d links; the tree is drawn for at most %d (a shorter --seq-len?)", n,
                SVG_MAX_LINKS);
    FILE *f = fopen(path, "w");
    if (!f) sp_fail("--plan-svg %s: cannot open for writing", path);
    int colw = n > 40 ? 22 : 40, rowh = 46, left = 110, top = 70;
    int names_h = 90;   /* each column's op, rotated, under the tree */
    int rows = p->nlevels + 1, width = left + (n + 1) * colw + 30, height = top + rows * rowh + names_h + 90;
    if (width < 1040) width = 1040;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\" font-size=\"11\">\n", width, height, width, height);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"10\" y=\"20\" font-size=\"14\">BPPSA scan: n = %d links, %d up-sweep levels (full %d); "
               "%d sequential levels vs %d for linear BP</text>\n", n, p->up_levels, sp_scan_full_levels(n),
            p->work_levels, n - 1);
#define X(pos) (left + (pos) * colw + colw / 2)
#define Y(row) (top + (row) * rowh + rowh / 2)
    for (int i = 0; i <= n; i++)
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#555\">%d</text>\n", X(i), top - 8, i);
    fprintf(f, "<text x=\"10\" y=\"%d\">input a</text>\n", Y(0) + 4);
    int *last = sp_xcalloc((size_t)n + 1, sizeof *last);
    /* row labels */
    for (int k = 0; k < p->nsteps; k++)
        if (k == 0 || p->steps[k].level != p->steps[k - 1].level) {
            const sp_scan_step *st = &p->steps[k];
            static const char *names[] = {"up-sweep", "identity", "carry", "down-sweep"};
            fprintf(f, "<text x=\"10\" y=\"%d\">%d %s</text>\n", Y(st->level + 1) + 4, st->level, names[st->kind]);
        }
    /* inputs */
    for (int i = 0; i <= n; i++) {
        const char *fill = i == 0 ? "#4caf50" : i == n ? "#ffffff" : s->links[i - 1].type.kind == EL_CSR ? "#2196f3" : "#ff9800";
        char name[SP_NAME_LEN + 32] = "";
        if (i > 0) link_label(&s->links[i - 1], name, sizeof name);
        fprintf(f, "<g class=\"input\"><rect x=\"%d\" y=\"%d\" width=\"14\" height=\"14\" fill=\"%s\" stroke=\"#333\"%s/>"
                   "<title>a[%d] = %s%s%s%s</title></g>\n", X(i) - 7, Y(0) - 7, fill, i == n ? " stroke-dasharray=\"2,2\"" : "",
                i, i == 0 ? "the loss gradient (vector)" : "Jt of ", name, i == 0 ? "" : i == n ? " (never read)" : ", ",
                i == 0 || i == n ? "" : kind_name(s->links[i - 1].type.kind));
    }
    int carry_pos = -1, carry_row = 0;
    for (int k = 0, level_start = 0; k < p->nsteps; k++) {
        const sp_scan_step *st = &p->steps[k];
        const step_info *si = &s->steps[k];
        if (k > 0 && st->level != p->steps[k - 1].level) level_start = k;
        double lvl_max = 0;
        for (int j = level_start; j < p->nsteps && p->steps[j].level == st->level; j++)
            lvl_max = fmax(lvl_max, s->steps[j].flops);
        int row = st->level + 1;
        const char *edge = "stroke=\"#999\"", *move = "stroke=\"#bbb\" stroke-dasharray=\"3,3\"";
        switch (st->kind) {
        case SP_SCAN_UP:
            edge_to(f, X(st->l), Y(last[st->l]), X(st->r), Y(row), rowh, edge);
            edge_to(f, X(st->r), Y(last[st->r]), X(st->r), Y(row), rowh, edge);
            last[st->r] = row;
            break;
        case SP_SCAN_IDENTITY: last[st->r] = row; break;
        case SP_SCAN_CARRY:
            edge_to(f, X(st->r), Y(last[st->r]), X(st->r), Y(row), rowh, edge);
            if (carry_pos >= 0)
                edge_to(f, X(carry_pos), Y(carry_row), X(st->r), Y(row), rowh, edge);
            carry_pos = st->r;
            carry_row = row;
            last[st->r] = row;
            break;
        case SP_SCAN_DOWN:
            edge_to(f, X(st->l), Y(last[st->l]), X(st->r), Y(row), rowh, edge);
            edge_to(f, X(st->r), Y(last[st->r]), X(st->r), Y(row), rowh, edge);
            edge_to(f, X(st->r), Y(last[st->r]), X(st->l), Y(row), rowh, move);
            fprintf(f, "<circle cx=\"%d\" cy=\"%d\" r=\"3\" fill=\"#bbb\"/>\n", X(st->l), Y(row));
            last[st->l] = last[st->r] = row;
            break;
        }
        const char *fill, *what;
        if (st->kind == SP_SCAN_IDENTITY) fill = "#ffffff", what = "a[n] = I";
        else if (si->skip) fill = "#ffffff", what = "skipped: a[n] is overwritten";
        else if (!st->product) fill = "#dddddd", what = "move (a product with I)";
        else if (si->out.kind == EL_VEC) fill = "#4caf50", what = "matrix-vector product";
        else if (si->out.kind == EL_CSR) fill = "#2196f3", what = "sparse matrix product (CSR)";
        else fill = "#ff9800", what = "dense matrix product";
        bool crit = si->flops > 0 && si->flops == lvl_max;
        fprintf(f, "<g class=\"step\"><circle cx=\"%d\" cy=\"%d\" r=\"8\" fill=\"%s\" stroke=\"%s\" stroke-width=\"%d\"%s/>"
                   "<title>level %d %s l=%d r=%d: %s, %.0f FLOP/sample%s</title></g>\n",
                X(st->r), Y(row), fill, crit ? "#d32f2f" : "#333", crit ? 3 : 1,
                si->skip ? " stroke-dasharray=\"2,2\"" : "", st->level,
                st->kind == SP_SCAN_UP ? "up" : st->kind == SP_SCAN_DOWN ? "down" : st->kind == SP_SCAN_CARRY ? "carry" : "identity",
                st->l, st->r, what, si->flops, crit ? " (critical)" : "");
        if (st->kind == SP_SCAN_IDENTITY)
            fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"10\">I</text>\n", X(st->r), Y(row) + 4);
    }
    /* which op's Jt each column starts with (a[0]: the loss gradient) */
    fprintf(f, "<text x=\"10\" y=\"%d\">Jt of</text>\n", top + rows * rowh + 12);
    for (int i = 0; i <= n; i++) {
        char name[SP_NAME_LEN + 32] = "(∇l)";
        if (i > 0) link_label(&s->links[i - 1], name, sizeof name);
        int x = X(i) - 3, y = top + rows * rowh + 6;
        fprintf(f, "<text class=\"op\" x=\"%d\" y=\"%d\" transform=\"rotate(50 %d %d)\" font-size=\"10\" fill=\"#333\">",
                x, y, x, y);
        for (const char *c = name; *c; c++) {   /* names come from C code: escape XML */
            if (*c == '<') fputs("&lt;", f);
            else if (*c == '>') fputs("&gt;", f);
            else if (*c == '&') fputs("&amp;", f);
            else fputc(*c, f);
        }
        fprintf(f, "</text>\n");
    }
    /* legend */
    static const struct { const char *fill, *text; } legend[] = {
        {"#4caf50", "vector (matrix-vector product)"}, {"#2196f3", "sparse matrix (CSR)"},
        {"#ff9800", "dense matrix"}, {"#dddddd", "move (product with I)"}, {"#ffffff", "identity / skipped"}};
    int ly = top + rows * rowh + names_h + 20;
    for (int i = 0; i < 5; i++) {
        int lx = 10 + i * 200;
        fprintf(f, "<circle cx=\"%d\" cy=\"%d\" r=\"7\" fill=\"%s\" stroke=\"#333\"/><text x=\"%d\" y=\"%d\">%s</text>\n",
                lx + 7, ly, legend[i].fill, lx + 20, ly + 4, legend[i].text);
    }
    fprintf(f, "<circle cx=\"17\" cy=\"%d\" r=\"7\" fill=\"white\" stroke=\"#d32f2f\" stroke-width=\"3\"/>"
               "<text x=\"30\" y=\"%d\">the most expensive step of its level (critical path)</text>\n", ly + 24, ly + 28);
    fprintf(f, "</svg>\n");
#undef X
#undef Y
    free(last);
    if (fclose(f) != 0) sp_fail("--plan-svg %s: write failed", path);
}

/* ---- one step ------------------------------------------------------------------------ */

typedef struct exec_ctx {
    bppsa_state *s;
    el *a;                     /* (n + 1) × B, row-major by position                 */
    int B;
    const int *idx;            /* steps of the current level                          */
    int nidx;
} exec_ctx;

#define A(c, p, b) ((c)->a[(size_t)(p) * (size_t)(c)->B + (size_t)(b)])

static void fill_links_range(void *p, size_t begin, size_t end)
{
    exec_ctx *c = p;
    for (size_t k = begin; k < end; k++) {
        int i = (int)(k / (size_t)c->B), b = (int)(k % (size_t)c->B);
        link *L = &c->s->links[i];
        float *dst = A(c, i + 1, b).v;
        if (L->t > 0) {
            L->node->op->chain_jt(L->node, b, L->t, dst);
            continue;
        }
        /* CSR values go straight into the element; a dense link's into scratch after it */
        float *vals = dst, *scratch = dst + el_floats(&L->type);
        if (L->type.kind == EL_DENSE) {
            vals = scratch;
            scratch += L->pattern.nnz;
        }
        sp_csr m = L->pattern;
        m.data = vals;
        if (L->keep) {   /* pruned: the op fills its full pattern, the kept entries are gathered */
            sp_csr f = L->full;
            f.data = scratch;
            L->node->op->jt_values(L->node, 0, b, &f);
            for (int64_t j = 0; j < m.nnz; j++) vals[j] = scratch[L->keep[j]];
        } else {
            L->node->op->jt_values(L->node, 0, b, &m);
        }
        if (L->type.kind == EL_DENSE) sp_csr_to_dense(&m, dst);
    }
}

typedef struct level_ctx {
    task *tasks;
} level_ctx;

static void tasks_range(void *p, size_t begin, size_t end)
{
    task *tasks = ((level_ctx *)p)->tasks;
    for (size_t k = begin; k < end; k++)
        product(&tasks[k].Mt, tasks[k].M, &tasks[k].Xt, tasks[k].X, tasks[k].plan, &tasks[k].Ot, tasks[k].out);
}

/* Products without a SpGEMM plan are independent small tasks: one parallel_for. Those
 * with a plan share its accumulators, so they run one after another, each parallel
 * over its rows inside sp_spgemm_numeric. */
static void run_tasks(task *tasks, int ntasks)
{
    int light = 0;
    for (int k = 0; k < ntasks; k++)
        if (tasks[k].plan) product(&tasks[k].Mt, tasks[k].M, &tasks[k].Xt, tasks[k].X, tasks[k].plan, &tasks[k].Ot, tasks[k].out);
        else tasks[light++] = tasks[k];
    level_ctx lc = {tasks};
    sp_parallel_for((size_t)light, tasks_range, &lc);
}

static task make_task(const el_type *Mt, float *M, const el_type *Xt, float *X, const step_info *si, float *out)
{
    return (task){.Mt = *Mt, .Xt = *Xt, .Ot = si->out, .M = M, .X = X, .out = out, .plan = si->spgemm};
}

/* ---- one step on the device (schedulers/backward/bppsa_cuda.cu) --------------------------------- */

/* An element's storage in the step: the host arena, or the device arena. */
static float *el_alloc(exec_ctx *c, sp_tape *t, size_t bytes)
{
    return c->s->device ? sp_tape_alloc_on(t, SP_CUDA, bytes) : sp_tape_alloc(t, bytes);
}

#ifdef SP_HAVE_CUDA
static sp_bppsa_mat dev_mat(bppsa_state *s, const el_type *t)
{
    sp_bppsa_mat m = {.kind = (int)t->kind, .rows = t->rows, .cols = t->cols, .nnz = t->nnz, .gates = t->gates,
                      .zdiag = t->zdiag, .w = t->w};
    if (t->kind == EL_CSR)
        sp_bppsa_cuda_pattern(s->dev_cache, t->rows, t->nnz, t->indptr, t->indices, &m.indptr, &m.indices);
    return m;
}

/* A level's products: those of equal operand types (every sample, every step) are one
 * launch. */
static void run_tasks_dev(bppsa_state *s, task *tasks, int ntasks, sp_tape *t)
{
    bool *done = sp_tape_alloc(t, (size_t)(ntasks ? ntasks : 1) * sizeof *done);
    memset(done, 0, (size_t)ntasks * sizeof *done);
    float **M = sp_tape_alloc(t, 3 * (size_t)(ntasks ? ntasks : 1) * sizeof *M), **X = M + ntasks, **O = X + ntasks;
    for (int k = 0; k < ntasks; k++) {
        if (done[k]) continue;
        const task *g = &tasks[k];
        int count = 0;
        for (int j = k; j < ntasks; j++)
            if (!done[j] && same_type(&tasks[j].Mt, &g->Mt) && same_type(&tasks[j].Xt, &g->Xt) &&
                same_type(&tasks[j].Ot, &g->Ot)) {
                done[j] = true;
                M[count] = tasks[j].M, X[count] = tasks[j].X, O[count] = tasks[j].out;
                count++;
            }
        sp_bppsa_mat mt = dev_mat(s, &g->Mt), xt = dev_mat(s, &g->Xt), ot = dev_mat(s, &g->Ot);
        if (g->plan)   /* CSR·CSR: cuSPARSE, symbolic phase once per plan */
            sp_bppsa_cuda_spgemm(s->dev_cache, g->plan, &mt, &xt, g->Ot.indptr, g->Ot.indices, g->Ot.nnz, M, X, O,
                                 count);
        else
            sp_bppsa_cuda_products(t, &mt, &xt, &ot, M, X, O, count);
    }
}

/* Every link's Jᵀ for every sample, one launch per node: a recurrent node's steps in
 * one block (chain_jt_all), any other link's samples in one block (jt_values_all; a
 * dense link's CSR values land in scratch after each sample's element, then expand). */
static void fill_links_dev(exec_ctx *c, sp_tape *t)
{
    bppsa_state *s = c->s;
    int B = c->B, n = s->n;
    for (int k = 0; k < s->nnodes; k++) {
        sp_node *node = s->nodes[k];
        int first = s->node_pos[k] - 1;   /* link index of its first (t = T) link */
        if (scans_time(node)) {
            int T = node->op->chain_len(node), H = s->links[first].type.rows, need = 0;
            while (need < T && first + need + 1 < n) need++;   /* a[n] is never read */
            if (!need) continue;
            const el_type *ty = &s->links[first].type;
            size_t per = ty->kind == EL_FACT ? el_floats(ty) : (size_t)H * H;
            float *block = sp_tape_alloc_on(t, SP_CUDA, (size_t)need * B * per * sizeof(float));
            for (int l = 0; l < need; l++)
                for (int b = 0; b < B; b++) A(c, first + l + 1, b).v = block + ((size_t)l * B + b) * per;
            if (ty->kind == EL_FACT) {
                bool zd;
                const float *w;
                node->op->chain_jt_factors(node, T - need + 1, block, &zd, &w);
            } else {
                if (!node->op->chain_jt_all) sp_fail("bppsa: op %s has no Jᵀ on the device", node->op->name);
                node->op->chain_jt_all(node, T - need + 1, block);
            }
            continue;
        }
        if (first + 1 >= n) continue;
        link *L = &s->links[first];
        if (!node->op->jt_values_all) sp_fail("bppsa: op %s has no Jᵀ on the device", node->op->name);
        size_t floats = link_floats(L), el_n = el_floats(&L->type);
        float *block = sp_tape_alloc_on(t, SP_CUDA, (size_t)B * floats * sizeof(float));
        for (int b = 0; b < B; b++) A(c, first + 1, b).v = block + (size_t)b * floats;
        el_type pt = {.kind = EL_CSR, .rows = L->pattern.rows, .cols = L->pattern.cols, .nnz = L->pattern.nnz,
                      .indptr = L->pattern.indptr, .indices = L->pattern.indices};
        sp_bppsa_mat P = dev_mat(s, &pt);
        bool dense = L->type.kind == EL_DENSE;
        sp_csr m = {.rows = P.rows, .cols = P.cols, .nnz = P.nnz, .indptr = (int32_t *)P.indptr,
                    .indices = (int32_t *)P.indices, .data = dense ? block + el_n : block};
        node->op->jt_values_all(node, 0, &m, floats);
        if (dense) sp_bppsa_cuda_csr_to_dense(&P, block + el_n, block, floats, B);
    }
}

/* weight_gradients on the device: the scatters as gathers through pointer arrays. */
static void weight_gradients_dev(exec_ctx *c, sp_tape *t)
{
    bppsa_state *s = c->s;
    int B = c->B;
    for (int i = 0; i < s->nnodes; i++) {
        sp_node *node = s->nodes[i];
        int pos = s->node_pos[i];
        size_t per = sp_tensor_sample_numel(&node->out);
        float **src = sp_tape_alloc(t, (size_t)B * sizeof *src);
        for (int b = 0; b < B; b++) src[b] = A(c, pos, b).v;
        sp_bppsa_cuda_gather(t, node->grad.data, src, B, per);
        if (!node->layer || node->layer->nparams == 0) continue;
        if (!scans_time(node)) {
            node->op->backward_params(node, &node->grad);
            continue;
        }
        int T = node->op->chain_len(node), H = (int)per;
        sp_tensor dh = sp_tape_tensor_on(t, SP_CUDA, 3, (int[]){B, T, H});
        float **hs = sp_tape_alloc(t, (size_t)B * T * sizeof *hs);
        for (int b = 0; b < B; b++)
            for (int tt = 1; tt <= T; tt++) hs[(size_t)b * T + tt - 1] = A(c, pos + T - tt, b).v;
        sp_bppsa_cuda_gather(t, dh.data, hs, B * T, (size_t)H);
        node->op->chain_backward_params(node, &dh);
    }
}
#endif

/* Run the plan's steps of one level: bookkeeping (swaps, types, output buffers) here,
 * serially; the products of all its steps and samples as one batch of tasks. */
static int run_level(exec_ctx *c, el_type *ty, el *reg, el_type *reg_t, int k, task *tasks, sp_tape *t)
{
    const sp_scan_plan *p = &c->s->plan;
    int B = c->B, ntasks = 0, level = p->steps[k].level;
    for (; k < p->nsteps && p->steps[k].level == level; k++) {
        const sp_scan_step *st = &p->steps[k];
        const step_info *si = &c->s->steps[k];
        size_t floats = el_floats(&si->out) * sizeof(float);
        switch (st->kind) {
        case SP_SCAN_UP:   /* a[r] ← a[r]·a[l] */
            if (si->skip) break;
            for (int b = 0; b < B; b++) {
                float *out = el_alloc(c, t, floats);
                tasks[ntasks++] = make_task(&ty[st->r], A(c, st->r, b).v, &ty[st->l], A(c, st->l, b).v, si, out);
                A(c, st->r, b).v = out;
            }
            ty[st->r] = si->out;
            break;
        case SP_SCAN_IDENTITY: ty[st->r] = (el_type){.kind = EL_ID}; break;
        case SP_SCAN_CARRY: {   /* a[r] ← P; P ← a_old[r]·P (P = I: a move) */
            if (st->l < 0) *reg_t = (el_type){.kind = EL_ID};
            el_type old_t = ty[st->r];
            for (int b = 0; b < B; b++) {
                float *old = A(c, st->r, b).v;
                A(c, st->r, b).v = reg[b].v;
                if (si->skip) continue;
                if (!st->product) {
                    reg[b].v = old;
                    continue;
                }
                float *out = el_alloc(c, t, floats);
                tasks[ntasks++] = make_task(&old_t, old, reg_t, reg[b].v, si, out);
                reg[b].v = out;
            }
            ty[st->r] = *reg_t;
            if (!si->skip) *reg_t = si->out;
            break;
        }
        case SP_SCAN_DOWN: {   /* T ← a[l]; a[l] ← a[r]; a[r] ← T·a[r] (a move when T or a[r] is I) */
            el_type T_t = ty[st->l];
            for (int b = 0; b < B; b++) {
                float *T = A(c, st->l, b).v;
                A(c, st->l, b).v = A(c, st->r, b).v;
                if (!st->product) {   /* the result is the operand that is not I (read only from now on) */
                    if (T_t.kind != EL_ID) A(c, st->r, b).v = T;
                    continue;
                }
                float *out = el_alloc(c, t, floats);
                tasks[ntasks++] = make_task(&T_t, T, &ty[st->r], A(c, st->r, b).v, si, out);
                A(c, st->r, b).v = out;
            }
            ty[st->l] = ty[st->r];
            ty[st->r] = si->out;
            break;
        }
        }
    }
#ifdef SP_HAVE_CUDA
    if (c->s->device) {
        run_tasks_dev(c->s, tasks, ntasks, t);
        return k;
    }
#endif
    run_tasks(tasks, ntasks);
    return k;
}

/* Scatter the recovered ∇x_i into the nodes' grads, then every weight gradient (Eq. 2). */
static void weight_gradients(exec_ctx *c, sp_tape *t)
{
    bppsa_state *s = c->s;
    int B = c->B;
    for (int i = 0; i < s->nnodes; i++) {
        sp_node *node = s->nodes[i];
        int pos = s->node_pos[i];
        size_t per = sp_tensor_sample_numel(&node->out);
        for (int b = 0; b < B; b++) memmove(node->grad.data + (size_t)b * per, A(c, pos, b).v, per * sizeof(float));
        if (!node->layer || node->layer->nparams == 0) continue;
        if (!scans_time(node)) {
            node->op->backward_params(node, &node->grad);
            continue;
        }
        int T = node->op->chain_len(node), H = (int)per;
        sp_tensor dh = sp_tape_tensor(t, 3, (int[]){B, T, H});
        for (int b = 0; b < B; b++)
            for (int tt = 1; tt <= T; tt++)   /* ∇h_t sits at the position of Jᵀ_t */
                memcpy(dh.data + ((size_t)b * T + (size_t)(tt - 1)) * H, A(c, pos + T - tt, b).v,
                       (size_t)H * sizeof(float));
        node->op->chain_backward_params(node, &dh);
    }
}

/* One segment: the scan gives ∇y of every node from its head's, then G of each (Eq. 2). */
static void scan_segment(sp_engine *e, bppsa_state *s, sp_tape *t, sp_node **nodes, int count)
{
    bool device = nodes[0]->out.device != SP_CPU;
    if (same_chain(s, nodes, count, device)) {
        memcpy(s->nodes, nodes, (size_t)count * sizeof *nodes);
        for (int i = 0; i < s->n; i++) {   /* refresh node pointers of the links */
            int j = 0;
            while (j + 1 < count && s->node_pos[j + 1] <= i + 1) j++;
            s->links[i].node = nodes[j];
        }
    } else {
        build_chain(s, nodes, count, device);
        int K = e->opts.scan_levels;
        if (K == SP_SCAN_LEVELS_AUTO) K = auto_levels(s, nodes[0]->out.shape[0]);
        sp_scan_plan_build(&s->plan, s->n, K);
        type_pass(s);
    }
    sp_node *head = nodes[0];
    int B = head->out.shape[0], n = s->n;
#ifdef SP_HAVE_CUDA
    if (s->device && !s->dev_cache) s->dev_cache = sp_bppsa_cuda_cache_new();
#endif
    if (e->opts.plan_only) return;   /* --plan: the figures are all there is to it */

    /* element storage for this step (arena) and types that evolve with the plan;
     * a[0] = ∇y of the head, complete (the loss's δ, or every consumer's) */
    exec_ctx c = {.s = s, .B = B};
    c.a = sp_tape_alloc(t, (size_t)(n + 1) * (size_t)B * sizeof *c.a);
    el_type *ty = sp_tape_alloc(t, (size_t)(n + 1) * sizeof *ty);
    ty[0] = (el_type){.kind = EL_VEC, .rows = (int)sp_tensor_sample_numel(&head->out)};
    size_t in0 = sp_tensor_sample_numel(&head->out);
    for (int b = 0; b < B; b++) A(&c, 0, b).v = head->grad.data + (size_t)b * in0;
    for (int i = 0; i < n; i++) {
        link *L = &s->links[i];
        ty[i + 1] = L->type;
        size_t floats = i + 1 < n && !s->device ? link_floats(L) : 0;   /* device: fill_links_dev */
        for (int b = 0; b < B; b++) A(&c, i + 1, b).v = floats ? sp_tape_alloc(t, floats * sizeof(float)) : NULL;
    }
    ty[n].kind = EL_NONE;
#ifdef SP_HAVE_CUDA
    if (s->device) fill_links_dev(&c, t);
    else
#endif
        sp_parallel_for((size_t)(n - 1) * (size_t)B, fill_links_range, &c);

    /* the scan, level by level */
    el *reg = sp_tape_alloc(t, (size_t)B * sizeof *reg);
    el_type reg_t = {.kind = EL_ID};
    task *tasks = sp_tape_alloc(t, (size_t)(n + 1) * (size_t)B * sizeof *tasks);
    for (int k = 0; k < s->plan.nsteps;) k = run_level(&c, ty, reg, &reg_t, k, tasks, t);
#ifdef SP_HAVE_CUDA
    if (s->device) {
        weight_gradients_dev(&c, t);
        return;
    }
#endif
    weight_gradients(&c, t);
}

static void bppsa_backward(sp_engine *e, sp_tape *t, sp_node *loss)
{
    bppsa_engine *E = e->state;
    size_t forward_bytes = t->arena.used_total;
    sp_mark_needs_grad(t);
    sp_node **nodes;
    int *start;
    int nseg = collect_segments(t, loss, &nodes, &start);
    if (nseg == 0) return;
    if (nseg != E->nseg) {   /* another model: every segment is built afresh */
        for (int k = 0; k < E->nseg; k++) state_clear(&E->seg[k]);
        E->seg = sp_xrealloc(E->seg, (size_t)nseg * sizeof *E->seg);
        memset(E->seg, 0, (size_t)nseg * sizeof *E->seg);
        E->nseg = nseg;
    }
    bool print = e->opts.plan && !E->plan_printed, draw = e->opts.plan_svg && !E->plan_printed;
    bool only = e->opts.plan_only;
    if (print && nseg > 1)
        printf("bppsa: the model is a DAG: %d chain segments, each scanned, joined by δ = Jᵀ·∇y at the joins\n",
               nseg);
    bool scanned[nseg];

    /* ∇ of the logits: the loss's δ for dl = 1 */
    sp_alloc_grads(t, loss);
    if (!only) sp_node_backward_inputs(loss);
    for (int k = 0; k < nseg; k++) {
        sp_node **seg = nodes + start[k];
        int count = start[k + 1] - start[k];
        sp_node *tail = seg[count - 1];
        scanned[k] = !(count == 1 && !scans_time(tail));
        if (!scanned[k]) {   /* nothing to scan: G and δ of the one op */
            char a[SP_NAME_LEN + 16];
            if (print) printf("bppsa segment %d: %s alone, no scan\n", k, sp_node_label(tail, a, sizeof a));
            if (!only) sp_node_backward(tail);
            continue;
        }
        scan_segment(e, &E->seg[k], t, seg, count);
        compute_stats(&E->seg[k], seg[0]->out.shape[0]);
        if (print) {
            if (nseg > 1)
            {
                char a[SP_NAME_LEN + 16], b[SP_NAME_LEN + 16];
                printf("bppsa segment %d: %s .. %s (%d ops)\n", k, sp_node_label(seg[0], a, sizeof a),
                       sp_node_label(tail, b, sizeof b), count);
            }
            print_plan(&E->seg[k], e->opts.plan_full);
            if (E->seg[k].device) print_device_plan(&E->seg[k]);
        }
        if (!only) sp_node_backward_inputs(tail);   /* the join: δ into the inputs below the segment */
    }
    engine_stats(E, scanned, t, loss, loss->input->out.shape[0], forward_bytes);
    if (print) print_memory(&E->stats);
    if (draw) draw_plan_svg(&E->seg[E->main_seg], e->opts.plan_svg);
    E->plan_printed |= print || draw;
}

static void bppsa_destroy(sp_engine *e)
{
    bppsa_engine *E = e->state;
    for (int k = 0; k < E->nseg; k++) state_clear(&E->seg[k]);
    free(E->seg);
    free(E);
}

sp_engine *sp_engine_bppsa_create(const sp_engine_opts *opts)
{
    sp_engine *e = sp_xcalloc(1, sizeof *e);
    e->name = "bppsa";
    e->opts = *opts;
    e->backward = bppsa_backward;
    e->destroy = bppsa_destroy;
    e->state = sp_xcalloc(1, sizeof(bppsa_engine));
    return e;
}

bool sp_bppsa_stats_get(const sp_engine *e, sp_bppsa_stats *out)
{
    if (!e || e->backward != bppsa_backward || !((bppsa_engine *)e->state)->have_stats) return false;
    *out = ((bppsa_engine *)e->state)->stats;
    return true;
}

int sp_bppsa_links(sp_model *m, int ndim, const int *sample_shape)
{
    int shape[SP_MAX_DIMS] = {1};
    if (ndim < 0 || ndim + 1 > SP_MAX_DIMS) sp_fail("bppsa: samples of %d dimensions", ndim);
    for (int i = 0; i < ndim; i++) shape[i + 1] = sample_shape[i];
    sp_tape t;
    sp_tape_init(&t);
    t.shape_only = true;
    sp_tensor x = sp_tensor_view(NULL, ndim + 1, shape);
    sp_model_forward(m, &t, sp_tape_input(&t, &x));
    int n = 0;
    for (int i = 0; i < t.n; i++)
        if (t.nodes[i]->op) n += t.nodes[i]->op->chain_len ? t.nodes[i]->op->chain_len(t.nodes[i]) : 1;
    sp_tape_free(&t);
    return n;
}

int sp_bppsa_max_scan_levels(sp_model *m, int ndim, const int *sample_shape)
{
    int n = sp_bppsa_links(m, ndim, sample_shape);
    return n > 0 ? sp_scan_full_levels(n) : 0;
}

int sp_bppsa_chain_links(const sp_node *loss)
{
    /* the longest chain segment (a DAG scans each segment on its own) */
    sp_tape *t = loss->tape;
    sp_mark_needs_grad(t);
    sp_node **nodes;
    int *start, n = 0;
    int nseg = collect_segments(t, (sp_node *)loss, &nodes, &start);
    for (int k = 0; k < nseg; k++) {
        int links = 0;
        for (int i = start[k]; i < start[k + 1]; i++)
            links += scans_time(nodes[i]) ? nodes[i]->op->chain_len(nodes[i]) : 1;
        n = links > n ? links : n;
    }
    return n;
}

int sp_bppsa_level_flops(const sp_engine *e, double *total, double *critical, int cap)
{
    const bppsa_engine *E = e ? e->state : NULL;
    if (!e || e->backward != bppsa_backward || !E->have_stats) return 0;
    const bppsa_state *s = &E->seg[E->main_seg];
    const sp_scan_plan *p = &s->plan;
    for (int l = 0; l < p->nlevels && l < cap; l++) total[l] = critical[l] = 0;
    for (int k = 0; k < p->nsteps; k++) {
        int l = p->steps[k].level;
        if (l >= cap) continue;
        total[l] += s->steps[k].flops;
        critical[l] = fmax(critical[l], s->steps[k].flops);
    }
    return p->nlevels;
}
