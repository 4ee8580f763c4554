/* exec_setup.c — what every rank of the executor plans alike before its first step: the
 * refusals of configurations the schedule cannot run, the stage costs (measured on rank 0
 * and broadcast, or read from --costs), and the schedule with its simulation. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/threads.h"
#include "core/rng.h"
#include "schedulers/exec/exec_internal.h"

/* ---- setup: costs ------------------------------------------------------------------------ */

/* Per-stage F, δ, G times on one micro-batch, measured on this process (min of 3). */
static sp_costs *measure_costs(sp_exec *x, int ndim, const int *shape, int rows)
{
    sp_costs *c = sp_costs_uniform(x->S, 0, 0, 0);
    int full[SP_MAX_DIMS + 1] = {rows};
    for (int i = 0; i < ndim; i++) full[i + 1] = shape[i];
    sp_tensor in = sp_tensor_new(ndim + 1, full);
    sp_rng r;
    sp_rng_seed(&r, 7);
    for (size_t i = 0; i < in.numel; i++) in.data[i] = sp_rng_uniform(&r) * 2.0f - 1.0f;
    int *labels = sp_xcalloc((size_t)rows, sizeof *labels);
    sp_tape t;
    sp_tape_init(&t);
    for (int s = 0; s < x->S; s++) c->fwd[s] = c->delta[s] = c->grad[s] = INFINITY;
    for (int rep = 0; rep < 3; rep++) {
        sp_tape_reset(&t);
        sp_node *h = sp_tape_input(&t, &in);
        sp_node **nodes = sp_tape_alloc(&t, sizeof *nodes * (size_t)x->S);
        int *first = sp_tape_alloc(&t, sizeof *first * (size_t)x->S);
        for (int s = 0; s < x->S; s++) {
            double t0 = sp_now();
            first[s] = t.n;
            h = nodes[s] = sp_exec_stage_forward(x, s, &t, h);
            double dt = sp_now() - t0;
            if (dt < c->fwd[s]) c->fwd[s] = dt;
        }
        sp_node *l = sp_apply_loss(&t, x->m->loss, h, labels);
        sp_tensor seed = sp_tape_tensor(&t, 1, (int[]){1});
        seed.data[0] = 1.0f;
        sp_tensor dy = sp_tape_tensor_like(&t, &h->out);
        l->kern->backward_input(l, 0, &seed, &dy);
        for (int s = x->S - 1; s >= 0 && x->dag; s--) {   /* a DAG's stages: their walks */
            double t0 = sp_now(), tg;
            sp_tensor dx = s > 0 ? sp_tape_tensor_like(&t, &nodes[s - 1]->out) : dy;
            sp_exec_stage_walk(&t, first[s], nodes[s]->index, &dy, s > 0 ? &dx : NULL, true, false, &tg);
            double dt = sp_now() - t0;
            /* stage 0 has no δ job (no input gradient): its G job walks */
            if ((s > 0 ? tg : dt) < c->grad[s]) c->grad[s] = s > 0 ? tg : dt;
            if (s > 0 && dt - tg < c->delta[s]) c->delta[s] = dt - tg;
            dy = dx;
        }
        for (int s = x->S - 1; s >= 0 && !x->dag; s--) {
            sp_node *n = nodes[s];
            double t0 = sp_now();
            if (n->kern->backward_params && n->layer->nparams > 0) n->kern->backward_params(n, &dy);
            double t1 = sp_now();
            sp_tensor dx = sp_tape_tensor_like(&t, &n->input->out);
            if (s > 0) n->kern->backward_input(n, 0, &dy, &dx);
            double t2 = sp_now();
            if (t1 - t0 < c->grad[s]) c->grad[s] = t1 - t0;
            if (s > 0 && t2 - t1 < c->delta[s]) c->delta[s] = t2 - t1;
            dy = dx;
        }
    }
    for (int s = 0; s < x->S; s++) {
        if (!isfinite(c->delta[s])) c->delta[s] = 0;
        c->fwd[s] *= 1e6, c->delta[s] *= 1e6, c->grad[s] *= 1e6;   /* µs */
    }
    snprintf(c->unit, sizeof c->unit, "us");
    sp_model_zero_grad(x->m);
    sp_tape_free(&t);
    free(labels);
    sp_tensor_free(&in);
    return c;
}

/* The stages: the model's segments (a chain's layers), from a shape-only pass of one
 * sample, with each stage's output shape. */
void sp_exec_setup_stages(sp_exec *x, int ndim, const int *shape)
{
    sp_model *m = x->m;
    x->dag = !sp_model_is_chain(m);
    sp_tape t;
    sp_model_forward_shapes(m, &t, 1, ndim, shape);
    if (t.n != m->nlayers + 1)   /* node l + 1 is layer l (node 0: the input) */
        sp_fail("internal: model %s: %d layers but %d tape nodes", m->name, m->nlayers, t.n - 1);
    int *last = sp_xmalloc(sizeof(int) * (size_t)t.n);
    if (x->dag) {
        x->S = sp_tape_segments(&t, last);
    } else {   /* every layer is a segment */
        x->S = m->nlayers;
        for (int s = 0; s < x->S; s++) last[s] = s + 1;
    }
    x->st = sp_xcalloc((size_t)(x->S > 0 ? x->S : 1), sizeof *x->st);
    for (int s = 0; s < x->S; s++) {
        stage_info *si = &x->st[s];
        si->layer0 = s > 0 ? last[s - 1] : 0;
        si->nlayers = last[s] - si->layer0;
        si->layer = m->layers[si->layer0];
        for (int l = si->layer0; l < si->layer0 + si->nlayers; l++) {
            si->nparams += m->layers[l]->nparams;
            for (int k = m->from_start[l]; k < m->from_start[l + 1]; k++)   /* the cut: only the previous stage's output enters */
                if (m->from[k] < si->layer0 - 1)
                    sp_fail("internal: model %s: layer %d of stage %d reads layer %d, before the stage's input", m->name,
                            l, s, m->from[k]);
        }
        si->params = sp_xmalloc(sizeof *si->params * (size_t)(si->nparams > 0 ? si->nparams : 1));
        si->wreq = sp_xcalloc((size_t)(si->nparams > 0 ? si->nparams : 1), sizeof *si->wreq);
        si->nparams = 0;
        for (int l = si->layer0; l < si->layer0 + si->nlayers; l++)
            for (int p = 0; p < m->layers[l]->nparams; p++) {
                si->params[si->nparams++] = m->layers[l]->params[p];
                si->nfloats += m->layers[l]->params[p]->value.numel;
            }
        if (x->dag) {
            sp_tape_segment_name(&t, si->layer0 + 1, last[s] + 1, si->name);
        } else {
            char label[SP_NAME_LEN + 16];
            snprintf(si->name, SP_STAGE_NAME, "%.31s", sp_model_layer_label(m, s, label, sizeof label));
        }
        const sp_node *out = t.nodes[last[s]];
        si->out_ndim = out->out.ndim;
        memcpy(si->out_shape, out->out.shape, sizeof si->out_shape);
        si->out_shape[0] = 1;
    }
    free(last);
    sp_tape_free(&t);
}

/* "nowhere inside layer1.0 (layers 4-7) nor inside ...": the segments of several layers,
 * where a residual or dense connection spans the layers and leaves no cut. */
void sp_exec_uncut(const sp_exec *x, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = 0;
    for (int s = 0, k = 0; s < x->S && n + 1 < len; s++) {
        const stage_info *si = &x->st[s];
        if (si->nlayers < 2) continue;
        n += (size_t)snprintf(buf + n, len - n, "%s %s (layers %d-%d)", k++ ? " nor inside" : "nowhere inside",
                              si->name, si->layer0, si->layer0 + si->nlayers - 1);
    }
}

static double round6(double v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%.6g", v);
    return strtod(buf, NULL);
}

/* x->costs: read from --costs, or measured on rank 0 and broadcast (every rank plans with
 * the same numbers). */
void sp_exec_setup_costs(sp_exec *x, int ndim, const int *shape)
{
    int rows = x->batch / x->B;
    if (x->cfg.costs_in) {
        x->costs = sp_costs_read_csv(x->cfg.costs_in);
        if (x->costs->stages != x->S)
            sp_comm_fail_all(x->world, "--costs %s: %d stages, the model has %d %s", x->cfg.costs_in,
                             x->costs->stages, x->S, x->dag ? "segments" : "layers");
    } else {
        x->costs = sp_costs_uniform(x->S, 0, 0, 0);
        float *v = sp_xcalloc((size_t)x->S * 3, sizeof *v);
        if (x->rank == 0) {
            sp_costs *mc = measure_costs(x, ndim, shape, rows);
            for (int s = 0; s < x->S; s++) {
                v[3 * s] = (float)mc->fwd[s], v[3 * s + 1] = (float)mc->delta[s], v[3 * s + 2] = (float)mc->grad[s];
            }
            sp_costs_free(mc);
        }
        sp_broadcast(x->world, v, (size_t)x->S * 3, 0);   /* every rank plans with rank 0's numbers */
        for (int s = 0; s < x->S; s++)
            x->costs->fwd[s] = v[3 * s], x->costs->delta[s] = v[3 * s + 1], x->costs->grad[s] = v[3 * s + 2];
        snprintf(x->costs->unit, sizeof x->costs->unit, "us");
        free(v);
    }
    /* Plan with exactly the numbers --costs-out writes (%.6g), so that build/schedule
     * --profile on that file simulates the very schedule this run executes. */
    for (int s = 0; s < x->S; s++) {
        x->costs->fwd[s] = round6(x->costs->fwd[s]);
        x->costs->delta[s] = round6(x->costs->delta[s]);
        x->costs->grad[s] = round6(x->costs->grad[s]);
    }
    for (int s = 0; s < x->S; s++) {
        memcpy(x->costs->name[s], x->st[s].name, SP_STAGE_NAME);
        x->costs->param_bytes[s] = (double)x->st[s].nfloats * sizeof(float);
    }
    /* What each stage's forward keeps for its backward at a micro-batch of `rows`, as
     * build/schedule --model counts it and exec_memory.c measures it (node l + 1: layer l). */
    sp_tape t;
    sp_model_forward_shapes(x->m, &t, rows, ndim, shape);
    for (int s = 0; s < x->S; s++) {
        const stage_info *si = &x->st[s];
        x->costs->act_bytes[s] = si->nlayers == 1 ? sp_node_act_bytes(t.nodes[si->layer0 + 1])
                                                  : sp_tape_segment_act_bytes(&t, si->layer0 + 1,
                                                                              si->layer0 + si->nlayers + 1);
    }
    sp_tape_free(&t);
}

/* ---- setup: the schedule and its refusals ------------------------------------------------- */

/* Problems of a configuration, gathered so that one refusal names them all. */
typedef struct problems {
    char text[2048];
    int n;
} problems;

static void add(problems *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(problems *p, const char *fmt, ...)
{
    size_t len = strlen(p->text);
    if (p->n++ > 0 && len + 2 < sizeof p->text) {
        strcat(p->text, "; ");
        len += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->text + len, sizeof p->text - len, fmt, ap);
    va_end(ap);
}

/* Where B came from, for a message: the user's --microbatches or the scheme's default. */
static void micro_origin(const sp_exec *x, char *buf, size_t len)
{
    if (x->cfg.micro > 0) snprintf(buf, len, "%d micro-batches (--microbatches %d)", x->B, x->B);
    else snprintf(buf, len, "%d micro-batches (--parallel %s's default, %s with %d ranks)", x->B, x->cfg.scheme,
                  is_pipeline(x->cfg.scheme) || is_actions(x->cfg.scheme) ? "2W" : "W", x->W);
}

/* A generator's list for W ranks and B micro-batches; chunk costs from x->costs when set
 * (NULL: unit). NULL with sp_error when the parameters do not fit the generator. */
static sp_actions *generate(const sp_exec *x)
{
    const sp_pp_generator *g = sp_pp_find(x->cfg.scheme);
    int v = x->cfg.chunks > 0 ? x->cfg.chunks : g->default_chunks_per_rank;
    /* unit costs until the costs exist, or when the chunks outnumber the stages
     * (check_actions names that) */
    const sp_costs *c = x->costs && (long)x->W * v <= x->S ? x->costs : NULL;
    /* The configuration check runs before the costs exist: there a limit in bytes is left
     * out, and sp_exec_build_schedule applies it with the model's sizes (refusing a limit
     * no schedule fits); in bytes each chunk weighs its layers' act_bytes, what
     * exec_memory.c measures. */
    bool bytes_unknown = x->cfg.mem_limit_bytes && !c;
    sp_actions *a = NULL;
    if (sp_pp_generate_from_costs(g, c, x->W, x->B, x->cfg.chunks, bytes_unknown ? 0 : x->cfg.mem_limit,
                                  x->cfg.mem_limit_bytes && c, 0, &a) != SP_OK)
        a = NULL;
    return a;
}

/* The action list fits the run: its generator takes W and B, its ranks are the world's,
 * its micro-batches B, its chunks whole stages (chunks <= S). */
static void check_actions(sp_exec *x, problems *P)
{
    const char *name = x->cfg.scheme;
    sp_actions *a = x->actions ? x->actions : generate(x);
    if (!a) {
        add(P, "%s", sp_last_error());
        return;
    }
    if (a->ranks != x->W)
        add(P, "%s has %d rank%s, mpirun started %d (expected mpirun -np %d)", x->cfg.actions, a->ranks,
            a->ranks == 1 ? "" : "s", x->W, a->ranks);
    if (a->micro != x->B)
        add(P, "--microbatches %d but %s names %d micro-batches", x->B, x->cfg.actions ? x->cfg.actions : name,
            a->micro);
    if (a->chunks > x->S && !x->dag)
        add(P, "%d chunks for the model's %d layers (expected chunks <= layers: each chunk holds whole layers; fewer "
               "ranks or --chunks)", a->chunks, x->S);
    else if (a->chunks > x->S) {
        char where[1024];
        sp_exec_uncut(x, where, sizeof where);
        add(P, "%d chunks for the model's %d segments (expected chunks <= segments: model %s can be cut only between "
               "segments, %s; fewer ranks or --chunks)", a->chunks, x->S, x->m->name, where);
    }
    if (a != x->actions) sp_actions_free(a);
}

/* Every rank checks the same things and refuses alike, before any work, with every
 * problem of the configuration in one line (fixing one should not reveal the next). */
void sp_exec_check_config(sp_exec *x)
{
    const char *name = x->cfg.scheme;
    sp_comm *w = x->world;
    if (!sp_exec_scheme_known(name) || (!is_pipeline(name) && !is_looped(name) && !is_data(name) && !is_actions(name)))
        sp_comm_fail_all(w, "--parallel %s: unknown scheme (expected one of %s)", name, sp_exec_scheme_names());
    problems P = {.n = 0};
    char where[1024];
    sp_exec_uncut(x, where, sizeof where);
    if (is_scan(name) && x->dag)   /* BPPSA: the backward as a scan over a chain of transposed Jacobians */
        sp_comm_fail_all(w, "--parallel scan: model %s has residual or dense connections; the scan across ranks "
                            "(BPPSA) runs over a chain of per-layer Jacobians, and a DAG's backward is not one (another "
                            "--parallel scheme runs it)", x->m->name);
    if (x->cfg.ooo && strcmp(name, "ddp-ooo") != 0)
        add(&P, "--backward ooo: ooo's data-parallel order is --parallel ddp-ooo (the pipelines have ooo-ff and "
                "ooo-modulo)");
    if (is_scan(name)) {
        if (x->B != 1) add(&P, "--microbatches %d (the scan runs the whole batch: 1)", x->B);
        /* A recurrent first layer: the scan runs over its time steps (exec_bppsa.c, BPPSA across
         * ranks); otherwise over the layers, each of which needs a per-sample Jᵀ. */
        const sp_opdef *op0 = x->S > 0 ? x->m->layers[0]->op : NULL;
        x->tscan = op0 && op0->chain_len && op0->cpu.chain_jt && op0->cpu.chain_backward_params_range;
        for (int s = x->tscan ? 1 : 0; s < x->S; s++) {
            const sp_opdef *op = x->m->layers[s]->op;
            if (op->chain_len)
                add(&P, "layer %d (%s) is recurrent; the scan runs over the time steps of a recurrent FIRST layer "
                        "only", s, op->name);
            else if (!x->tscan && !op->jt_pattern)
                add(&P, "layer %d (%s) has no per-sample transposed Jacobian to scan", s, op->name);
        }
    }
    char why[320];
    if (sp_exec_buffers_refusal(x, why, sizeof why)) add(&P, "%s", why);
    char mb[160];
    micro_origin(x, mb, sizeof mb);
    if (x->B < 1) add(&P, "--microbatches %d: expected >= 1", x->B);
    else if (x->batch % x->B != 0) {
        int down = x->batch / x->B * x->B, up = down + x->B;
        char fix[64] = "";
        if (down > 0) snprintf(fix, sizeof fix, " or --batch %d", down);
        add(&P, "--batch %d does not split into %s (expected a multiple of %d: --batch %d%s, or --microbatches "
                "dividing %d)", x->batch, mb, x->B, up, fix, x->batch);
    }
    if (is_data(name) && x->B >= 1 && x->B < x->W)
        add(&P, "%s for %d workers (each rank needs one: expected --microbatches >= %d)", mb, x->W, x->W);
    if (is_pipeline(name) && !x->tscan && x->W > x->S && !x->dag)
        add(&P, "%d workers for %d stages (a pipeline needs workers <= stages, the model's %d layers: mpirun -np %d "
                "or fewer)", x->W, x->S, x->S, x->S);
    else if (is_pipeline(name) && !x->tscan && x->W > x->S)
        add(&P, "%d workers for %d stages (a pipeline needs workers <= stages: model %s can be cut only between its %d "
                "segments, %s; mpirun -np %d or fewer)", x->W, x->S, x->m->name, x->S, where, x->S);
    if (!strcmp(name, "dualpipe")) {   /* rules_dualpipe.c's conditions, named here for every rank */
        if (x->W % 2) add(&P, "%d ranks (expected an even number: rank r pairs with rank W-1-r)", x->W);
        if (x->B >= 1 && x->B % 2) add(&P, "%s (expected an even number: half enter from each end)", mb);
    }
    if (is_looped(name)) {
        int G = x->cfg.groups > 0 ? x->cfg.groups : 1;
        if (x->W % G != 0)
            add(&P, "%d workers but --groups %d (expected W = G*R, W a multiple of G)", x->W, G);
        else if (x->W / G > x->S && !x->dag)
            add(&P, "%d workers per group for %d stages (expected R <= S)", x->W / G, x->S);
        else if (x->W / G > x->S)
            add(&P, "%d workers per group for %d stages (expected R <= S: model %s can be cut only between its %d "
                    "segments, %s)", x->W / G, x->S, x->m->name, x->S, where);
        if (x->B >= 1 && x->B < G) add(&P, "%s for %d groups (expected --microbatches >= %d)", mb, G, G);
    }
    if (is_actions(name) && x->B >= 1) check_actions(x, &P);
    if (x->cfg.partition && strcmp(x->cfg.partition, "cost") && strcmp(x->cfg.partition, "layerpipe"))
        add(&P, "--partition %s: expected cost | layerpipe", x->cfg.partition);
    if (P.n == 1) sp_comm_fail_all(w, "--parallel %s: %s", name, P.text);
    if (P.n > 1) sp_comm_fail_all(w, "--parallel %s: %d problems: %s", name, P.n, P.text);
}

/* x->sched for the scheme (scan: GPipe's forward) and its simulation x->sim, whose
 * per-rank order the step walks. */
void sp_exec_build_schedule(sp_exec *x)
{
    const char *name = x->cfg.scheme;
    /* A time scan has no pipeline: every rank runs the whole (short) forward, so the
     * schedule is that of one worker (the step does not walk it). */
    sp_sched_config sc = {.stages = x->S, .micro = x->B, .workers = x->tscan ? 1 : x->W, .split = -1,
                          .no_input_grad = true};
    if (!strcmp(name, "ddp-ooo")) {   /* reverse first-k over the first k parameterised stages */
        int params = 0, k = x->cfg.k;
        for (int s = 0; s < x->S; s++) params += x->st[s].nfloats > 0;
        if (k <= 0) k = params / 2 > 0 ? params / 2 : 1;
        if (k > params) sp_comm_fail_all(x->world, "--k %d: the model has %d parameterised layers", k, params);
        for (int s = 0, seen = 0; s < x->S && seen < k; s++)
            if (x->st[s].nfloats > 0 && ++seen == k) sc.first_k = s + 1;
    }
    if (is_looped(name)) {
        sc.groups = x->cfg.groups > 0 ? x->cfg.groups : 1;
        sc.per_group = x->W / sc.groups;
    }
    int *placement = NULL;
    if (x->cfg.partition && !strcmp(x->cfg.partition, "layerpipe") && is_pipeline(name)) {
        /* LayerPipe's Algorithm 1 assigns whole layers to processors in order, balancing
         * with the δ it could move; here each layer's δ stays with its owner. */
        sp_layerpipe lp;
        sp_layerpipe_partition(x->costs, x->W, 1.01, &lp);
        placement = sp_xmalloc(sizeof(int) * (size_t)x->S);
        memcpy(placement, lp.owner, sizeof(int) * (size_t)x->S);
        sp_layerpipe_free(&lp);
        sc.placement = placement;
    }
    if (is_actions(name)) {   /* the list, expanded to the stages; its order is every rank's */
        if (!x->actions) x->actions = generate(x);
        if (!x->actions) sp_comm_fail_all(x->world, "--parallel %s: %s", name, sp_last_error());
        sc.actions_scheme = name;
        x->sched = sp_schedule_from_actions(x->actions, &sc, x->costs);
        sp_simulate(x->sched, x->costs, &x->sim);
        return;
    }
    /* scan: the forward is GPipe's with one micro-batch on the same contiguous segments */
    x->sched = sp_schedule_new(sp_scheme_find(is_scan(name) ? "gpipe" : name), &sc, x->costs);
    free(placement);
    sp_simulate(x->sched, x->costs, &x->sim);
}

/* Whether stage s's output never crosses ranks: for every micro-batch, the jobs of stages
 * s and s + 1 (which make, read and differentiate it) run on one rank. */
static bool stays_on_one_rank(const sp_exec *x, int s)
{
    if (s + 1 >= x->S) return false;   /* the model's output: the loss reads NCHW */
    for (int b = 0; b < x->B; b++) {
        int rank = -1;
        for (int j = 0; j < x->sched->njobs; j++) {
            const sp_job *jb = &x->sched->jobs[j];
            if (jb->micro != b || (jb->stage != s && jb->stage != s + 1)) continue;
            if (rank < 0) rank = x->sched->compute[j];
            else if (x->sched->compute[j] != rank) return false;
        }
    }
    return true;
}

void sp_exec_setup_blocked(sp_exec *x)
{
    const char *env = getenv("SCANPROP_EXEC_BLOCKED");
    if (env && !strcmp(env, "0")) return;
    if (x->tscan || is_scan(x->cfg.scheme) || !x->m->nlayers) return;   /* the scan reads NCHW Jacobians */
    if (x->m->nparams && x->m->params[0]->value.device != SP_CPU) return;
    int L = x->m->nlayers;
    bool *plain = sp_xcalloc((size_t)L, sizeof *plain);
    for (int s = 0; s < x->S; s++) {
        const stage_info *si = &x->st[s];
        plain[si->layer0 + si->nlayers - 1] = !stays_on_one_rank(x, s);
    }
    bool *make = sp_xcalloc((size_t)L, sizeof *make);
    sp_model_blocked_plan_cut(x->m, plain, make);
    free(plain);
    bool any = false;
    for (int l = 0; l < L; l++) any |= make[l];
    if (any) x->blk_make = make;
    else free(make);
}
