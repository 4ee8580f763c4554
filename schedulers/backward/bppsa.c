/* bppsa.c — back-propagation as a parallel scan (BPPSA, Wang et al., MLSys 2020).
 *
 * For a chain x_0 → f_1 → x_1 → … → f_n → x_n → loss, the gradients of every x_i are
 * the exclusive scan (Eq. 5) of
 *     a = [∇x_n l, Jᵀ_n, Jᵀ_{n−1}, …, Jᵀ_1]        with  A ⋄ B = B·A,
 * i.e. ∇x_{i−1} l = Jᵀ_i · ∇x_i l, computed in Θ(log n) levels by the modified Blelloch
 * scan of Algorithm 1 (schedulers/scan/scan.c makes the plan). The weight gradients then
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
 * Each training step then only fills Jᵀ values and runs numeric products.
 *
 * This file is the step (on the host, or on the device through bppsa_cuda.cu) and the
 * engine; what is built once is bppsa_plan.c, the element algebra bppsa_elem.c, --plan
 * and --plan-svg bppsa_report.c (bppsa_internal.h: what they share). */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/device.h"
#include "core/error.h"
#include "core/threads.h"
#include "schedulers/backward/bppsa_internal.h"
#ifdef SP_HAVE_CUDA
#include "schedulers/backward/bppsa_cuda.h"
#endif

/* ---- one step ------------------------------------------------------------------------ */

typedef struct exec_ctx {
    bppsa_state *s;
    el *a;                     /* (n + 1) × B, row-major by position                 */
    int B;
    const int *idx;            /* steps of the current level                          */
    int nidx;
    char *region;              /* device: the products' memory, one block per step      */
    size_t region_used, region_bytes;
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
            L->node->kern->chain_jt(L->node, b, L->t, dst);
            continue;
        }
        /* CSR values go straight into the element; a dense link's into scratch after it */
        float *vals = dst, *scratch = dst + bppsa_el_floats(&L->type);
        if (L->type.kind == EL_DENSE) {
            vals = scratch;
            scratch += L->pattern.nnz;
        }
        sp_csr m = L->pattern;
        m.data = vals;
        if (L->keep) {   /* pruned: the op fills its full pattern, the kept entries are gathered */
            sp_csr f = L->full;
            f.data = scratch;
            L->node->kern->jt_values(L->node, 0, b, &f);
            for (int64_t j = 0; j < m.nnz; j++) vals[j] = scratch[L->keep[j]];
        } else {
            L->node->kern->jt_values(L->node, 0, b, &m);
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
        bppsa_product(&tasks[k].Mt, tasks[k].M, &tasks[k].Xt, tasks[k].X, tasks[k].plan, &tasks[k].Ot, tasks[k].out);
}

/* Products without a SpGEMM plan are independent small tasks: one parallel_for. Those
 * with a plan share its accumulators, so they run one after another, each parallel
 * over its rows inside sp_spgemm_numeric. */
static void run_tasks(task *tasks, int ntasks)
{
    int light = 0;
    for (int k = 0; k < ntasks; k++)
        if (tasks[k].plan)
            bppsa_product(&tasks[k].Mt, tasks[k].M, &tasks[k].Xt, tasks[k].X, tasks[k].plan, &tasks[k].Ot, tasks[k].out);
        else tasks[light++] = tasks[k];
    level_ctx lc = {tasks};
    sp_engine_parallel_for((size_t)light, tasks_range, &lc);
}

static task make_task(const el_type *Mt, float *M, const el_type *Xt, float *X, const step_info *si, float *out)
{
    return (task){.Mt = *Mt, .Xt = *Xt, .Ot = si->out, .M = M, .X = X, .out = out, .plan = si->spgemm};
}

/* ---- one step on the device (schedulers/backward/bppsa_cuda.cu) ------------------------- */

/* Device products start at multiples of this within the step's block (cudaMalloc's). */
#define DEV_EL_ALIGN 256

static size_t dev_el_bytes(size_t bytes) { return (bytes + DEV_EL_ALIGN - 1) / DEV_EL_ALIGN * DEV_EL_ALIGN; }

/* An element's storage in the step: the host arena, or on the device the step's block
 * of product memory (levels_dev_bytes: one allocation, so the levels' addresses follow
 * from its address alone). */
static float *el_alloc(exec_ctx *c, sp_tape *t, size_t bytes)
{
    if (!c->s->device) return sp_tape_alloc(t, bytes);
    size_t need = dev_el_bytes(bytes);
    if (c->region_used + need > c->region_bytes)
        sp_fail("bppsa (cuda): internal: the levels need more than the %zu bytes planned", c->region_bytes);
    float *p = (float *)(c->region + c->region_used);
    c->region_used += need;
    return p;
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
            if (!done[j] && bppsa_same_type(&tasks[j].Mt, &g->Mt) && bppsa_same_type(&tasks[j].Xt, &g->Xt) &&
                bppsa_same_type(&tasks[j].Ot, &g->Ot)) {
                done[j] = true;
                M[count] = tasks[j].M, X[count] = tasks[j].X, O[count] = tasks[j].out;
                count++;
            }
        sp_bppsa_mat mt = dev_mat(s, &g->Mt), xt = dev_mat(s, &g->Xt), ot = dev_mat(s, &g->Ot);
        if (g->plan)   /* CSR·CSR: cuSPARSE, symbolic phase once per plan */
            sp_bppsa_cuda_spgemm(s->dev_cache, g->plan, &mt, &xt, g->Ot.indptr, g->Ot.indices, g->Ot.nnz, M, X, O,
                                 count);
        else
            sp_bppsa_cuda_products(s->dev_cache, t, &mt, &xt, &ot, M, X, O, count);
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
        if (bppsa_scans_time(node)) {
            int T = node->op->chain_len(node), H = s->links[first].type.rows, need = 0;
            while (need < T && first + need + 1 < n) need++;   /* a[n] is never read */
            if (!need) continue;
            const el_type *ty = &s->links[first].type;
            size_t per = ty->kind == EL_FACT ? bppsa_el_floats(ty) : (size_t)H * H;
            float *block = sp_tape_alloc_on(t, SP_CUDA, (size_t)need * B * per * sizeof(float));
            for (int l = 0; l < need; l++)
                for (int b = 0; b < B; b++) A(c, first + l + 1, b).v = block + ((size_t)l * B + b) * per;
            if (ty->kind == EL_FACT) {
                bool zd;
                const float *w;
                node->kern->chain_jt_factors(node, T - need + 1, block, &zd, &w);
            } else {
                if (!node->kern->chain_jt_all) sp_fail("bppsa: op %s has no Jᵀ on the device", node->op->name);
                node->kern->chain_jt_all(node, T - need + 1, block);
            }
            continue;
        }
        if (first + 1 >= n) continue;
        link *L = &s->links[first];
        if (!node->kern->jt_values_all) sp_fail("bppsa: op %s has no Jᵀ on the device", node->op->name);
        size_t floats = bppsa_link_floats(L), el_n = bppsa_el_floats(&L->type);
        float *block = sp_tape_alloc_on(t, SP_CUDA, (size_t)B * floats * sizeof(float));
        for (int b = 0; b < B; b++) A(c, first + 1, b).v = block + (size_t)b * floats;
        el_type pt = {.kind = EL_CSR, .rows = L->pattern.rows, .cols = L->pattern.cols, .nnz = L->pattern.nnz,
                      .indptr = L->pattern.indptr, .indices = L->pattern.indices};
        sp_bppsa_mat P = dev_mat(s, &pt);
        bool dense = L->type.kind == EL_DENSE;
        sp_csr m = {.rows = P.rows, .cols = P.cols, .nnz = P.nnz, .indptr = (int32_t *)P.indptr,
                    .indices = (int32_t *)P.indices, .data = dense ? block + el_n : block};
        node->kern->jt_values_all(node, 0, &m, floats);
        if (dense) sp_bppsa_cuda_csr_to_dense(&P, block + el_n, block, floats, B);
    }
}

/* The device memory of a step's products: one block per product and sample (el_alloc). */
static size_t levels_dev_bytes(const bppsa_state *s, int B)
{
    size_t bytes = 0;
    for (int k = 0; k < s->plan.nsteps; k++)
        if (bppsa_step_multiplies(s, k)) bytes += (size_t)B * dev_el_bytes(bppsa_el_floats(&s->steps[k].out) * sizeof(float));
    return bytes;
}

static uint64_t mix(uint64_t h, uint64_t v)
{
    for (int b = 0; b < 8; b++) h = (h ^ ((v >> (8 * b)) & 0xff)) * 0x100000001b3ull;
    return h;
}

/* What a captured graph of the levels bakes in (FNV-1a): the batch, the products'
 * memory, every element's address before the levels and the recurrent ops' W_hh. The
 * plan is the state's: a new plan drops the graph (sp_bppsa_cuda_cache_reset). */
static uint64_t levels_key(const exec_ctx *c)
{
    const bppsa_state *s = c->s;
    uint64_t h = 0xcbf29ce484222325ull;
    h = mix(h, (uint64_t)c->B);
    h = mix(h, (uint64_t)s->n);
    h = mix(h, (uint64_t)(uintptr_t)c->region);
    h = mix(h, (uint64_t)c->region_bytes);
    for (size_t i = 0; i < (size_t)(s->n + 1) * (size_t)c->B; i++) h = mix(h, (uint64_t)(uintptr_t)c->a[i].v);
    for (int i = 0; i < s->n; i++) h = mix(h, (uint64_t)(uintptr_t)s->links[i].type.w);
    return h;
}

static int run_level(exec_ctx *c, el_type *ty, el *reg, el_type *reg_t, int k, task *tasks, sp_tape *t);

/* The levels on the device: live, captured into a graph, or replayed (bppsa_cuda.h). */
static void levels_dev(exec_ctx *c, el_type *ty, el *reg, el_type *reg_t, task *tasks, sp_tape *t)
{
    bppsa_state *s = c->s;
    size_t bytes = (size_t)(s->n + 1) * (size_t)c->B * sizeof *c->a;
    if (sp_bppsa_cuda_levels_begin(s->dev_cache, levels_key(c), c->a, bytes) == SP_BPPSA_LEVELS_REPLAYED) return;
    for (int k = 0; k < s->plan.nsteps;) k = run_level(c, ty, reg, reg_t, k, tasks, t);
    sp_bppsa_cuda_levels_end(s->dev_cache, c->a, bytes);
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
        size_t floats = bppsa_el_floats(&si->out) * sizeof(float);
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

/* ---- the weight gradients (host and device) --------------------------------------------- */

/* Block k of the run of T elements that ends at position pos, for k < B·T: sample k / T's
 * element at pos + T − 1 − k % T. T = 1: ∇y of the node whose link sits at pos; a
 * recurrent op's T links: ∇h_t (t = k % T + 1), which sits at the position of Jᵀ_t. */
static float *run_block(const exec_ctx *c, int pos, int T, size_t k)
{
    return A(c, pos + T - 1 - (int)(k % (size_t)T), k / (size_t)T).v;
}

/* The gather hook of weight_gradients: dst + k·len ← run_block(c, pos, T, k), len floats,
 * for every k < B·T, in the memory the elements live in. */
typedef void gather_fn(const exec_ctx *c, sp_tape *t, float *dst, int pos, int T, size_t len);

/* On the host: one copy per block (the head's ∇y may already be in place: memmove). */
static void gather_host(const exec_ctx *c, sp_tape *t, float *dst, int pos, int T, size_t len)
{
    (void)t;
    size_t count = (size_t)c->B * (size_t)T;
    for (size_t k = 0; k < count; k++) memmove(dst + k * len, run_block(c, pos, T, k), len * sizeof(float));
}

#ifdef SP_HAVE_CUDA
/* On the device: one launch that reads the blocks through an array of their addresses. */
static void gather_dev(const exec_ctx *c, sp_tape *t, float *dst, int pos, int T, size_t len)
{
    int count = c->B * T;
    float **src = sp_tape_alloc(t, (size_t)count * sizeof *src);
    for (int k = 0; k < count; k++) src[k] = run_block(c, pos, T, (size_t)k);
    sp_bppsa_cuda_gather(c->s->dev_cache, dst, src, count, len);
}
#endif

/* Gather the recovered ∇x_i into the nodes' grads, then every weight gradient (Eq. 2):
 * G from ∇y, a recurrent op's from its ∇h_t of every time step. dev is where the grads
 * and the scan's elements live, gather how elements are brought together there. */
static void weight_gradients(exec_ctx *c, sp_tape *t, sp_device dev, gather_fn *gather)
{
    bppsa_state *s = c->s;
    int B = c->B;
    for (int i = 0; i < s->nnodes; i++) {
        sp_node *node = s->nodes[i];
        int pos = s->node_pos[i];
        size_t per = sp_tensor_sample_numel(&node->out);
        gather(c, t, node->grad.data, pos, 1, per);
        if (!node->layer || node->layer->nparams == 0) continue;
        if (!bppsa_scans_time(node)) {
            node->kern->backward_params(node, &node->grad);
            continue;
        }
        int T = node->op->chain_len(node), H = (int)per;
        sp_tensor dh = sp_tape_tensor_on(t, dev, 3, (int[]){B, T, H});
        gather(c, t, dh.data, pos, T, (size_t)H);
        node->kern->chain_backward_params(node, &dh);
    }
}

/* One segment: the scan gives ∇y of every node from its head's, then G of each (Eq. 2). */
static void scan_segment(sp_engine *e, bppsa_state *s, sp_tape *t, sp_node **nodes, int count)
{
    bool device = nodes[0]->out.device != SP_CPU;
    if (bppsa_same_chain(s, nodes, count, device)) {
        memcpy(s->nodes, nodes, (size_t)count * sizeof *nodes);
        for (int i = 0; i < s->n; i++) {   /* refresh node pointers of the links */
            int j = 0;
            while (j + 1 < count && s->node_pos[j + 1] <= i + 1) j++;
            s->links[i].node = nodes[j];
        }
    } else {
        bppsa_build_chain(s, nodes, count, device);
        int K = ((const sp_bppsa_opts *)e->opts.own)->scan_levels;
        if (K == SP_SCAN_LEVELS_AUTO) K = bppsa_auto_levels(s, nodes[0]->out.shape[0]);
        sp_scan_plan_build(&s->plan, s->n, K);
        bppsa_type_pass(s);
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
        size_t floats = i + 1 < n && !s->device ? bppsa_link_floats(L) : 0;   /* device: fill_links_dev */
        for (int b = 0; b < B; b++) A(&c, i + 1, b).v = floats ? sp_tape_alloc(t, floats * sizeof(float)) : NULL;
    }
    ty[n].kind = EL_NONE;
#ifdef SP_HAVE_CUDA
    if (s->device) {
        sp_bppsa_cuda_step_begin(s->dev_cache);
        fill_links_dev(&c, t);
    } else
#endif
        sp_engine_parallel_for((size_t)(n - 1) * (size_t)B, fill_links_range, &c);

    /* the scan, level by level */
    el *reg = sp_tape_alloc(t, (size_t)B * sizeof *reg);
    memset(reg, 0, (size_t)B * sizeof *reg);   /* the identity's address: none */
    el_type reg_t = {.kind = EL_ID};
    task *tasks = sp_tape_alloc(t, (size_t)(n + 1) * (size_t)B * sizeof *tasks);
#ifdef SP_HAVE_CUDA
    if (s->device) {
        c.region_bytes = levels_dev_bytes(s, B);
        c.region = c.region_bytes ? sp_tape_alloc_on(t, SP_CUDA, c.region_bytes) : NULL;
        levels_dev(&c, ty, reg, &reg_t, tasks, t);
        weight_gradients(&c, t, SP_CUDA, gather_dev);
        return;
    }
#endif
    for (int k = 0; k < s->plan.nsteps;) k = run_level(&c, ty, reg, &reg_t, k, tasks, t);
    weight_gradients(&c, t, SP_CPU, gather_host);
}

static void bppsa_backward(sp_engine *e, sp_tape *t, sp_node *loss)
{
    bppsa_engine *E = e->state;
    size_t forward_bytes = t->arena.used_total;
    sp_mark_needs_grad(t);
    sp_node **nodes;
    int *start;
    int nseg = bppsa_collect_segments(t, loss, &nodes, &start);
    if (nseg == 0) return;
    if (nseg != E->nseg) {   /* another model: every segment is built afresh */
        for (int k = 0; k < E->nseg; k++) bppsa_state_clear(&E->seg[k]);
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
        scanned[k] = !(count == 1 && !bppsa_scans_time(tail));
        if (!scanned[k]) {   /* nothing to scan: G and δ of the one op */
            char a[SP_NAME_LEN + 16];
            if (print) printf("bppsa segment %d: %s alone, no scan\n", k, sp_node_label(tail, a, sizeof a));
            if (!only) sp_node_backward(tail);
            continue;
        }
        scan_segment(e, &E->seg[k], t, seg, count);
        bppsa_compute_stats(&E->seg[k], seg[0]->out.shape[0]);
        if (print) {
            if (nseg > 1)
            {
                char a[SP_NAME_LEN + 16], b[SP_NAME_LEN + 16];
                printf("bppsa segment %d: %s .. %s (%d ops)\n", k, sp_node_label(seg[0], a, sizeof a),
                       sp_node_label(tail, b, sizeof b), count);
            }
            bppsa_print_plan(&E->seg[k], e->opts.plan_full);
            if (E->seg[k].device) bppsa_print_device_plan(&E->seg[k]);
        }
        if (!only) sp_node_backward_inputs(tail);   /* the join: δ into the inputs below the segment */
    }
    bppsa_engine_stats(E, scanned, t, loss, loss->input->out.shape[0], forward_bytes);
    if (print) bppsa_print_memory(&E->stats);
    if (draw) bppsa_draw_plan_svg(&E->seg[E->main_seg], e->opts.plan_svg);
    E->plan_printed |= print || draw;
}

static void bppsa_destroy(sp_engine *e)
{
    bppsa_engine *E = e->state;
    for (int k = 0; k < E->nseg; k++) bppsa_state_clear(&E->seg[k]);
    free(E->seg);
    free(E);
}

sp_engine *sp_engine_bppsa_create(const sp_engine_opts *opts)
{
    sp_engine *e = sp_xcalloc(1, sizeof *e);
    bppsa_engine *E = sp_xcalloc(1, sizeof *E);
    E->own = *(const sp_bppsa_opts *)sp_engine_own_opts(&sp_engine_def_bppsa, opts);
    e->name = "bppsa";
    e->opts = *opts;
    e->opts.own = &E->own;
    e->backward = bppsa_backward;
    e->destroy = bppsa_destroy;
    e->check = sp_bppsa_check;    /* bppsa_hooks.c */
    e->report = sp_bppsa_report;
    e->plan = sp_bppsa_plan;
    e->state = E;
    return e;
}

/* --scan-levels N | full | auto into scan_levels */
static void bppsa_opts_finish(void *own, int threads, bool on_device)
{
    sp_bppsa_opts *o = own;
    const char *arg = o->scan_levels_arg;
    if (!arg) return;
    if (strcmp(arg, "full") == 0) {
        o->scan_levels = SP_SCAN_LEVELS_FULL;
    } else if (strcmp(arg, "auto") == 0) {
        o->scan_levels = SP_SCAN_LEVELS_AUTO;
    } else {
        char *end;
        errno = 0;
        long x = strtol(arg, &end, 10);
        if (!*arg || *end || errno || x < 0 || x > 1000000)
            sp_fail("--scan-levels %s: expected 0 (linear BP) .. the model's full depth, full or auto", arg);
        o->scan_levels = (int)x;
    }
}

static const sp_bppsa_opts BPPSA_DEFAULTS = {.scan_levels = SP_SCAN_LEVELS_FULL, .scan_levels_arg = "full"};
static const sp_engine_option BPPSA_OPTIONS[] = {
    {"scan-levels", SP_ENGINE_OPT_STR, offsetof(sp_bppsa_opts, scan_levels_arg), "up-sweep levels: 0 (= linear BP) "
     ".. the model's full depth, full, or auto (the plan's cost model picks; docs/BPPSA.md)", .meta = "N|full|auto"},
    {0},
};
_Static_assert(sizeof(sp_bppsa_opts) <= SP_ENGINE_OPTS_BYTES, "sp_bppsa_opts: too large");

const sp_engine_def sp_engine_def_bppsa = {
    .name = "bppsa",
    .caps = SP_ENGINE_DEVICE | SP_ENGINE_PLAN,
    .create = sp_engine_bppsa_create,
    .opts_size = sizeof(sp_bppsa_opts),
    .opts_default = &BPPSA_DEFAULTS,
    .options = BPPSA_OPTIONS,
    .group = "bppsa engine (with --backward bppsa)",
    .finish = bppsa_opts_finish,
};

bool sp_bppsa_stats_get(const sp_engine *e, sp_bppsa_stats *out)
{
    if (!e || e->backward != bppsa_backward || !((bppsa_engine *)e->state)->have_stats) return false;
    *out = ((bppsa_engine *)e->state)->stats;
    return true;
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
