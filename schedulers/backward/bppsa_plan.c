/* bppsa_plan.c — what the bppsa engine builds once per chain (schedulers/backward/bppsa.c).
 *
 * Patterns never depend on the input (§3.3–3.4), so the chain segments, each link's Jᵀ
 * pattern, the scan plan (schedulers/scan/scan.c) and a *type pass* over the plan,
 * which decides what every element is after every step and runs the symbolic phase of
 * every sparse×sparse product, are computed once and cached across steps. Here too: the
 * plan's figures (what --plan prints, sp_bppsa_stats), and the two cost models with
 * which --scan-levels auto picks the depth, one for the CPU and one for the device. */
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

/* A link's Jᵀ is stored dense when at least this fraction of it is non-zero. */
#define DENSE_FILL 0.25

/* ---- the chain ---------------------------------------------------------------------- */

void bppsa_plan_clear(bppsa_state *s)
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

void bppsa_state_clear(bppsa_state *s)
{
    for (int i = 0; i < s->n; i++) {
        sp_csr_free(&s->links[i].pattern);
        sp_csr_free(&s->links[i].full);
        free(s->links[i].keep);
    }
    bppsa_plan_clear(s);
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

/* The chain segments of the tape below the loss, in the tape's arena (a step allocates
 * nothing, and an error exit leaves nothing behind). Segment k is nodes[start[k] ..
 * start[k+1]): its head (highest on the tape, whose ∇y is complete when the segment
 * runs) first, then each op's single input down to the tail. A node x extends the
 * segment below it to its input p when x has one input, a Jᵀ and no time steps, and p is
 * an op that needs a gradient and is read by x alone. Heads descend, so every consumer
 * of a head belongs to an earlier segment: segments run in this order. */
int bppsa_collect_segments(sp_tape *t, sp_node *loss, sp_node ***out, int **out_start)
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

bool bppsa_same_chain(const bppsa_state *s, sp_node **nodes, int count, bool device)
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
    node->kern->jt_values(node, 0, 0, &full);
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
    if (bppsa_scans_time(node)) {
        int H = node->out.shape[node->out.ndim - 1];
        L->type = (el_type){.kind = EL_DENSE, .rows = H, .cols = H};
        if (device && node->kern->chain_jt_factors) {   /* W_hh once, the diagonals as vectors */
            L->type.kind = EL_FACT;
            L->type.gates = node->kern->chain_jt_factors(node, 1, NULL, &L->type.zdiag, &L->type.w);
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

void bppsa_build_chain(bppsa_state *s, sp_node **nodes, int count, bool device)
{
    bppsa_state_clear(s);
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
        if (bppsa_scans_time(nodes[i])) {   /* the tail of its segment (collect_segments) */
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
        int T = bppsa_scans_time(nodes[i]) ? nodes[i]->op->chain_len(nodes[i]) : 0;
        for (int t = T ? T : 1; t >= 1; t--, pos++)
            build_link(&s->links[pos], nodes[i], T ? t : 0, pos + 1 < n, device);
    }
}

/* Whether plan step k multiplies (run_level makes a task of it for every sample). */
bool bppsa_step_multiplies(const bppsa_state *s, int k)
{
    const sp_scan_step *st = &s->plan.steps[k];
    if (s->steps[k].skip || st->kind == SP_SCAN_IDENTITY) return false;
    return st->kind == SP_SCAN_UP || st->product;
}

/* Decide every step's output type and run the symbolic SpGEMMs (once per chain). */
void bppsa_type_pass(bppsa_state *s)
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
            if (!si->skip) a[st->r] = si->out = bppsa_product_type(&a[st->r], &a[st->l], &si->spgemm, &si->flops);
            break;
        case SP_SCAN_IDENTITY: a[st->r] = (el_type){.kind = EL_ID}; break;
        case SP_SCAN_CARRY: {
            if (st->l < 0) reg = (el_type){.kind = EL_ID};
            el_type old = a[st->r];
            a[st->r] = reg;
            si->skip = st->r == n;
            si->mt = old, si->xt = reg;
            if (!si->skip) reg = si->out = bppsa_product_type(&old, &reg, &si->spgemm, &si->flops);
            break;
        }
        case SP_SCAN_DOWN: {
            el_type T = a[st->l];
            si->mt = T, si->xt = a[st->r];
            a[st->l] = a[st->r];
            a[st->r] = si->out = bppsa_product_type(&T, &a[st->r], &si->spgemm, &si->flops);
            break;
        }
        }
    }
    for (int i = 1; i <= n; i++)
        if (a[i].kind != EL_VEC) sp_fail("bppsa: internal: a[%d] ends as %s", i, bppsa_kind_name(a[i].kind));
    free(a);
    /* memory per sample: the Jᵀ values of every link but a[n]'s, and one new buffer per
     * product (moves and skipped steps allocate nothing; nothing is freed in a step) */
    s->link_bytes = s->prod_bytes = 0;
    for (int i = 0; i + 1 < n; i++) s->link_bytes += bppsa_arena_bytes(bppsa_link_floats(&s->links[i]) * sizeof(float));
    for (int k = 0; k < s->plan.nsteps; k++)
        if (s->plan.steps[k].product && !s->steps[k].skip)
            s->prod_bytes += bppsa_arena_bytes(bppsa_el_floats(&s->steps[k].out) * sizeof(float));
}

static double modelled_time(const bppsa_state *s, int B, int P);
static double device_time(const bppsa_state *s, int B, const sp_bppsa_gpu_model *g, int *launches, double *launch_s);

/* One segment's figures for a batch of B (memory: the scan's own arena bytes). */
void bppsa_compute_stats(bppsa_state *s, int B)
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
    st->scan_bytes = b * (s->link_bytes + s->prod_bytes) + bppsa_arena_bytes(n1 * b * sizeof(el)) +
                     bppsa_arena_bytes(n1 * sizeof(el_type)) + bppsa_arena_bytes(b * sizeof(el)) + bppsa_arena_bytes(n1 * b * sizeof(task));
    st->jt_bytes = b * s->link_bytes;
    st->product_bytes = b * s->prod_bytes;
    for (int i = 0; i < s->nnodes; i++)   /* ∇h_t of a recurrent op for its weight gradient */
        if (bppsa_scans_time(s->nodes[i]) && s->nodes[i]->layer && s->nodes[i]->layer->nparams)
            st->scan_bytes += bppsa_arena_bytes((size_t)B * (size_t)s->nodes[i]->op->chain_len(s->nodes[i]) *
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
void bppsa_engine_stats(bppsa_engine *E, const bool *scanned, sp_tape *t, sp_node *loss, int B, size_t forward_bytes)
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
    size_t g = bppsa_arena_bytes((size_t)(N + 1) * sizeof(sp_node *)) + bppsa_arena_bytes((size_t)(N + 2) * sizeof(int)) +
               bppsa_arena_bytes((size_t)(N + 1) * sizeof(bool)) + bppsa_arena_bytes((size_t)(N + 1) * sizeof(int));
    for (int i = 0; i <= N; i++)
        if (t->nodes[i]->needs_grad || t->nodes[i] == loss) g += bppsa_arena_bytes(t->nodes[i]->out.numel * sizeof(float));
    st->grad_bytes = g;
    st->peak_bytes = forward_bytes + st->grad_bytes + st->scan_bytes;
    E->have_stats = true;
}

/* ---- the CPU cost model (--scan-levels auto) ----------------------------------------- */

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

/* The device plan of the level starting at step k: launches (one per distinct operand
 * types, as run_tasks_dev groups them; B per CSR·CSR step), bytes, FLOPs and modelled
 * time for a batch of B. Returns the first step of the next level. */
int bppsa_device_level(const bppsa_state *s, int k, int B, const sp_bppsa_gpu_model *g, dev_level *d)
{
    const sp_scan_plan *p = &s->plan;
    int level = p->steps[k].level, start = k;
    *d = (dev_level){0};
    for (; k < p->nsteps && p->steps[k].level == level; k++) {
        if (!bppsa_step_multiplies(s, k)) continue;
        const step_info *si = &s->steps[k];
        size_t out = bppsa_el_floats(&si->out) * sizeof(float);
        d->written += (size_t)B * out;
        d->moved += (double)B * (double)((bppsa_el_floats(&si->mt) + bppsa_el_floats(&si->xt)) * sizeof(float) + out);
        if (si->spgemm) {
            d->sp_flops += (double)B * si->flops;
            d->launches += B;
            continue;
        }
        d->flops += (double)B * si->flops;
        bool seen = false;
        for (int j = start; j < k && !seen; j++)
            seen = bppsa_step_multiplies(s, j) && bppsa_same_type(&s->steps[j].mt, &si->mt) && bppsa_same_type(&s->steps[j].xt, &si->xt) &&
                   bppsa_same_type(&s->steps[j].out, &si->out);
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
        k = bppsa_device_level(s, k, B, g, &d);
        time += d.seconds;
        all += d.launches;
    }
    if (launches) *launches = all;
    if (launch_s) *launch_s = all * g->launch_s;
    return time;
}

int bppsa_auto_levels(bppsa_state *s, int B)
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
        bppsa_type_pass(s);
        s->auto_launches[K] = 0, s->auto_launch_time[K] = 0;
        double t = s->auto_time[K] = s->device
                                         ? device_time(s, B, &g, &s->auto_launches[K], &s->auto_launch_time[K])
                                         : modelled_time(s, B, P > 0 ? P : 1);
        if (t < best_t) best_t = t, best = K;
        bppsa_plan_clear(s);
    }
    return best;
}

/* ---- the chain's length, without a plan (checks of --scan-levels) --------------------- */

int sp_bppsa_links(sp_model *m, int ndim, const int *sample_shape)
{
    if (ndim < 0 || ndim + 1 > SP_MAX_DIMS) sp_fail("bppsa: samples of %d dimensions", ndim);
    sp_tape t;
    sp_model_forward_shapes(m, &t, 1, ndim, sample_shape);
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
    int nseg = bppsa_collect_segments(t, (sp_node *)loss, &nodes, &start);
    for (int k = 0; k < nseg; k++) {
        int links = 0;
        for (int i = start[k]; i < start[k + 1]; i++)
            links += bppsa_scans_time(nodes[i]) ? nodes[i]->op->chain_len(nodes[i]) : 1;
        n = links > n ? links : n;
    }
    return n;
}
