/* bppsa.c — back-propagation as a parallel scan (BPPSA, Wang et al., MLSys 2020).
 *
 * For a chain x_0 → f_1 → x_1 → … → f_n → x_n → loss, the gradients of every x_i are
 * the exclusive scan (Eq. 5) of
 *     a = [∇x_n l, Jᵀ_n, Jᵀ_{n−1}, …, Jᵀ_1]        with  A ⋄ B = B·A,
 * i.e. ∇x_{i−1} l = Jᵀ_i · ∇x_i l, computed in Θ(log n) levels by the modified Blelloch
 * scan of Algorithm 1 (schedulers/scan.c makes the plan). The weight gradients then
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/backend.h"
#include "core/csr_ops.h"
#include "core/error.h"
#include "core/parallel.h"
#include "schedulers/engines.h"
#include "schedulers/scan.h"

/* A link's Jᵀ is stored dense when at least this fraction of it is non-zero. */
#define DENSE_FILL 0.25

typedef enum { EL_NONE, EL_ID, EL_VEC, EL_CSR, EL_DENSE } el_kind;

/* The static type of a scan element: the same for every sample and every step. */
typedef struct el_type {
    el_kind kind;
    int rows, cols;            /* VEC: rows only                                      */
    int64_t nnz;               /* CSR                                                 */
    const int32_t *indptr, *indices;   /* CSR pattern (owned by a link or a plan)     */
} el_type;

/* One sample's value of an element: the type's data. */
typedef struct el {
    float *v;
} el;

typedef struct link {
    sp_node *node;             /* refreshed every step                               */
    int t;                     /* time step for recurrent ops, 0 otherwise           */
    el_type type;
    sp_csr pattern;            /* CSR links and dense links built from CSR           */
} link;

typedef struct step_info {
    el_type out;               /* a[r] after the step (CARRY: the register)           */
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
} bppsa_state;

/* The engine: one scan state per chain segment of the model, in the order they run. */
typedef struct bppsa_engine {
    bppsa_state *seg;
    int nseg;
    bool plan_printed;
} bppsa_engine;

/* ---- element arithmetic ------------------------------------------------------------- */

static size_t el_floats(const el_type *t)
{
    switch (t->kind) {
    case EL_VEC: return (size_t)t->rows;
    case EL_CSR: return (size_t)t->nnz;
    case EL_DENSE: return (size_t)t->rows * (size_t)t->cols;
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
    static const char *names[] = {"none", "I", "vec", "csr", "dense"};
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
    el_type r = {.rows = M->rows, .cols = X->cols};
    double m_entries = M->kind == EL_CSR ? (double)M->nnz : (double)M->rows * M->cols;
    if (X->kind == EL_VEC) {
        r.kind = EL_VEC;
        *flops = 2 * m_entries;
    } else if (M->kind == EL_CSR && X->kind == EL_CSR) {
        sp_csr A = csr_view(M, NULL), B = csr_view(X, NULL);
        *plan = sp_xcalloc(1, sizeof **plan);
        sp_spgemm_symbolic(*plan, &A, &B);
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

static void state_clear(bppsa_state *s)
{
    for (int i = 0; i < s->n; i++) sp_csr_free(&s->links[i].pattern);
    if (s->steps)
        for (int i = 0; i < s->plan.nsteps; i++)
            if (s->steps[i].spgemm) {
                sp_spgemm_plan_free(s->steps[i].spgemm);
                free(s->steps[i].spgemm);
            }
    sp_scan_plan_free(&s->plan);
    free(s->steps);
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
            if (x->ninputs != 1 || !x->op->jt_pattern || x->op->chain_len || !p->op || !p->needs_grad ||
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

static bool same_chain(const bppsa_state *s, sp_node **nodes, int count)
{
    if (!s->sig_ops || s->nnodes != count) return false;
    for (int i = 0; i < count; i++) {
        if (s->sig_ops[i] != nodes[i]->op || s->sig_shapes[i][0] != nodes[i]->out.ndim ||
            s->sig_in[i] != sp_tensor_sample_numel(sp_node_x(nodes[i])))
            return false;
        for (int d = 1; d < nodes[i]->out.ndim; d++)   /* dim 0 is the batch: patterns ignore it */
            if (s->sig_shapes[i][d + 1] != nodes[i]->out.shape[d]) return false;
    }
    return true;
}

static void build_link(link *L, sp_node *node, int t, bool needed)
{
    L->node = node;
    L->t = t;
    if (scans_time(node)) {
        int H = node->out.shape[node->out.ndim - 1];
        L->type = (el_type){.kind = EL_DENSE, .rows = H, .cols = H};
        return;
    }
    int in = (int)sp_tensor_sample_numel(sp_node_x(node)), out = (int)sp_tensor_sample_numel(&node->out);
    L->type = (el_type){.kind = EL_CSR, .rows = in, .cols = out};
    if (!needed) return;   /* a[n]: Jᵀ_1 is never read (its product is replaced by I) */
    node->op->jt_pattern(node, 0, &L->pattern);
    if ((double)L->pattern.nnz >= DENSE_FILL * (double)in * (double)out) {
        L->type.kind = EL_DENSE;
    } else {
        L->type.nnz = L->pattern.nnz;
        L->type.indptr = L->pattern.indptr;
        L->type.indices = L->pattern.indices;
    }
}

static void build_chain(bppsa_state *s, sp_node **nodes, int count, int up_levels)
{
    state_clear(s);
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
        for (int t = T ? T : 1; t >= 1; t--, pos++) build_link(&s->links[pos], nodes[i], T ? t : 0, pos + 1 < n);
    }
    sp_scan_plan_build(&s->plan, n, up_levels);
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
            if (!si->skip) a[st->r] = si->out = product_type(&a[st->r], &a[st->l], &si->spgemm, &si->flops);
            break;
        case SP_SCAN_IDENTITY: a[st->r] = (el_type){.kind = EL_ID}; break;
        case SP_SCAN_CARRY: {
            if (st->l < 0) reg = (el_type){.kind = EL_ID};
            el_type old = a[st->r];
            a[st->r] = reg;
            si->skip = st->r == n;
            if (!si->skip) reg = si->out = product_type(&old, &reg, &si->spgemm, &si->flops);
            break;
        }
        case SP_SCAN_DOWN: {
            el_type T = a[st->l];
            a[st->l] = a[st->r];
            a[st->r] = si->out = product_type(&T, &a[st->r], &si->spgemm, &si->flops);
            break;
        }
        }
    }
    for (int i = 1; i <= n; i++)
        if (a[i].kind != EL_VEC) sp_fail("bppsa: internal: a[%d] ends as %s", i, kind_name(a[i].kind));
    free(a);
}

/* ---- the plan, printed (--plan) ---------------------------------------------------------- */

static void print_plan(const bppsa_state *s, int B)
{
    const sp_scan_plan *p = &s->plan;
    double total = 0, span = 0, linear = 0;
    int matmat = 0, work_levels = 0, last_work_level = -1;
    printf("bppsa plan: n = %d links, %d up-sweep levels (full: %d), batch %d\n", s->n, p->up_levels,
           sp_scan_full_levels(s->n), B);
    printf("%5s %-8s %5s %5s  %-26s %14s %s\n", "level", "kind", "l", "r", "result", "FLOP/sample", "critical");
    for (int k = 0, level_start = 0; k < p->nsteps; k++) {
        const sp_scan_step *st = &p->steps[k];
        if (k > 0 && st->level != p->steps[k - 1].level) level_start = k;
        double lvl_max = 0;
        int lvl_end = k;
        while (lvl_end < p->nsteps && p->steps[lvl_end].level == st->level) lvl_end++;
        for (int j = level_start; j < lvl_end; j++) lvl_max = fmax(lvl_max, s->steps[j].flops);
        const step_info *si = &s->steps[k];
        static const char *kinds[] = {"up", "identity", "carry", "down"};
        char res[64] = "-";
        if (si->skip) snprintf(res, sizeof res, "skipped (a[n] unused)");
        else if (st->kind != SP_SCAN_IDENTITY)
        {
            int k = snprintf(res, sizeof res, "%s %dx%d", kind_name(si->out.kind), si->out.rows,
                             si->out.kind == EL_VEC ? 1 : si->out.cols);
            if (si->out.kind == EL_CSR) snprintf(res + k, sizeof res - (size_t)k, " nnz %lld", (long long)si->out.nnz);
        }
        bool crit = si->flops > 0 && si->flops == lvl_max;
        printf("%5d %-8s %5d %5d  %-26s %14.0f %s\n", st->level, kinds[st->kind], st->l, st->r, res, si->flops,
               crit ? "*" : "");
        if (crit && (k == 0 || st->level != last_work_level)) work_levels++, last_work_level = st->level;
        total += si->flops;
        if (k == level_start) span += lvl_max;   /* a level takes as long as its longest step */
        if (si->out.kind == EL_CSR || si->out.kind == EL_DENSE) matmat += !si->skip && si->flops > 0;
    }
    for (int i = 0; i + 1 < s->n; i++) {
        const el_type *t = &s->links[i].type;
        linear += 2 * (t->kind == EL_CSR ? (double)t->nnz : (double)t->rows * t->cols);
    }
    printf("sequential levels: bppsa %d vs linear BP %d (levels that multiply: %d); matrix-matrix products %d\n",
           p->nlevels, s->n - 1, work_levels, matmat);
    printf("FLOP per sample: bppsa total %.0f, critical path %.0f; linear BP %.0f (bppsa does %.1fx the work)\n",
           total, span, linear, linear > 0 ? total / linear : 0.0);
    fflush(stdout);
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
        } else if (L->type.kind == EL_CSR) {
            sp_csr m = L->pattern;
            m.data = dst;
            L->node->op->jt_values(L->node, 0, b, &m);
        } else {   /* dense from CSR: values into scratch after the dense block, then expand */
            sp_csr m = L->pattern;
            m.data = dst + (size_t)L->type.rows * L->type.cols;
            L->node->op->jt_values(L->node, 0, b, &m);
            sp_csr_to_dense(&m, dst);
        }
    }
}

/* One product of one sample: out = M·X with the types fixed by the type pass. */
typedef struct task {
    el_type Mt, Xt, Ot;
    float *M, *X, *out;
    sp_spgemm_plan *plan;
} task;

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
                float *out = sp_tape_alloc(t, floats);
                tasks[ntasks++] = make_task(&ty[st->r], A(c, st->r, b).v, &ty[st->l], A(c, st->l, b).v, si, out);
                A(c, st->r, b).v = out;
            }
            ty[st->r] = si->out;
            break;
        case SP_SCAN_IDENTITY: ty[st->r] = (el_type){.kind = EL_ID}; break;
        case SP_SCAN_CARRY: {   /* a[r] ← P; P ← a_old[r]·P */
            if (st->l < 0) *reg_t = (el_type){.kind = EL_ID};
            el_type old_t = ty[st->r];
            for (int b = 0; b < B; b++) {
                float *old = A(c, st->r, b).v;
                A(c, st->r, b).v = reg[b].v;
                if (si->skip) continue;
                float *out = sp_tape_alloc(t, floats);
                tasks[ntasks++] = make_task(&old_t, old, reg_t, reg[b].v, si, out);
                reg[b].v = out;
            }
            ty[st->r] = *reg_t;
            if (!si->skip) *reg_t = si->out;
            break;
        }
        case SP_SCAN_DOWN: {   /* T ← a[l]; a[l] ← a[r]; a[r] ← T·a[r] */
            el_type T_t = ty[st->l];
            for (int b = 0; b < B; b++) {
                float *T = A(c, st->l, b).v, *out = sp_tape_alloc(t, floats);
                A(c, st->l, b).v = A(c, st->r, b).v;
                tasks[ntasks++] = make_task(&T_t, T, &ty[st->r], A(c, st->r, b).v, si, out);
                A(c, st->r, b).v = out;
            }
            ty[st->l] = ty[st->r];
            ty[st->r] = si->out;
            break;
        }
        }
    }
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
    if (same_chain(s, nodes, count)) {
        memcpy(s->nodes, nodes, (size_t)count * sizeof *nodes);
        for (int i = 0; i < s->n; i++) {   /* refresh node pointers of the links */
            int j = 0;
            while (j + 1 < count && s->node_pos[j + 1] <= i + 1) j++;
            s->links[i].node = nodes[j];
        }
    } else {
        build_chain(s, nodes, count, e->opts.scan_levels);
        type_pass(s);
    }
    sp_node *head = nodes[0];
    int B = head->out.shape[0], n = s->n;

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
        size_t floats = i + 1 < n ? el_floats(&L->type) : 0;
        if (L->t == 0 && L->type.kind == EL_DENSE && i + 1 < n) floats += (size_t)L->pattern.nnz;
        for (int b = 0; b < B; b++) A(&c, i + 1, b).v = floats ? sp_tape_alloc(t, floats * sizeof(float)) : NULL;
    }
    ty[n].kind = EL_NONE;
    sp_parallel_for((size_t)(n - 1) * (size_t)B, fill_links_range, &c);

    /* the scan, level by level */
    el *reg = sp_tape_alloc(t, (size_t)B * sizeof *reg);
    el_type reg_t = {.kind = EL_ID};
    task *tasks = sp_tape_alloc(t, (size_t)(n + 1) * (size_t)B * sizeof *tasks);
    for (int k = 0; k < s->plan.nsteps;) k = run_level(&c, ty, reg, &reg_t, k, tasks, t);
    weight_gradients(&c, t);
}

static void bppsa_backward(sp_engine *e, sp_tape *t, sp_node *loss)
{
    bppsa_engine *E = e->state;
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
    bool print = e->opts.plan && !E->plan_printed;
    if (print && nseg > 1)
        printf("bppsa: the model is a DAG: %d chain segments, each scanned, joined by δ = Jᵀ·∇y at the joins\n",
               nseg);

    /* ∇ of the logits: the loss's δ for dl = 1 */
    sp_alloc_grads(t, loss);
    sp_node_backward_inputs(loss);
    for (int k = 0; k < nseg; k++) {
        sp_node **seg = nodes + start[k];
        int count = start[k + 1] - start[k];
        sp_node *tail = seg[count - 1];
        if (count == 1 && !scans_time(tail)) {   /* nothing to scan: G and δ of the one op */
            if (print) printf("bppsa segment %d: %s#%d alone, no scan\n", k, tail->op->name, tail->index);
            sp_node_backward(tail);
            continue;
        }
        scan_segment(e, &E->seg[k], t, seg, count);
        if (print) {
            if (nseg > 1)
                printf("bppsa segment %d: %s#%d .. %s#%d (%d ops)\n", k, seg[0]->op->name, seg[0]->index,
                       tail->op->name, tail->index, count);
            print_plan(&E->seg[k], seg[0]->out.shape[0]);
        }
        sp_node_backward_inputs(tail);   /* the join: δ into the inputs below the segment */
    }
    E->plan_printed |= print;
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

int sp_bppsa_chain_links(const sp_node *loss)
{
    int n = 0;
    for (sp_node *x = loss->input; x && x->op; x = x->input) n += x->op->chain_len ? x->op->chain_len(x) : 1;
    return n;
}
