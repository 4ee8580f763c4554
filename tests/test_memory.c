/* test_memory.c — what one training step keeps in its tape's arena.
 *
 * The linear engine holds a δ (∂l/∂y of a node) only from its first writer to its
 * node's own backward, in one region sized by a simulated walk (the δ plan, schedulers/
 * memory/grad_plan.c). Checked here on a VGG-11 and a ResNet-20 step against bounds computed from
 * the tape's shapes alone: the largest set of δ alive at once, and what the same step
 * costs when every δ is kept to the end (the walk before this change, rebuilt here from
 * the engines' public pieces), and the gradients are bitwise those of that walk. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdlib.h>
#include <string.h>
#include "core/device.h"
#include "core/threads.h"
#include "layers/zoo.h"
#include "schedulers/backward/engines.h"
#include "schedulers/memory/memory.h"
#include "tests/testutil.h"

/* From shapes and the tape's edges: the bytes of every δ (Σ) and the most that are alive
 * at once in the reverse walk, δ_i alive from its first writer (the consumer of highest
 * index up to the loss; i itself without one) to node i's backward. */
static void delta_sizes(sp_tape *t, const sp_node *loss, size_t *sum, size_t *live_max)
{
    int L = loss->index;
    int *w = calloc((size_t)L + 1, sizeof *w);
    for (int i = 0; i <= L; i++) w[i] = i;
    for (int j = 0; j <= L; j++)
        for (int k = 0; k < t->nodes[j]->ninputs; k++) w[t->nodes[j]->inputs[k]->index] = j;
    *sum = *live_max = 0;
    for (int i = 0; i <= L; i++) *sum += sp_grad_has(t->nodes[i], loss) ? sp_grad_bytes(t->nodes[i]) : 0;
    for (int j = 0; j <= L; j++) {
        size_t live = 0;
        for (int i = 0; i <= j; i++)
            if (sp_grad_has(t->nodes[i], loss) && w[i] >= j) live += sp_grad_bytes(t->nodes[i]);
        if (live > *live_max) *live_max = live;
    }
    free(w);
}

/* Whether node j's op hands its δ's bytes on to its one input i (sp_opdef.delta_over,
 * the δ plan's rule): j writes δ_i first, and only j reads i. */
static bool hands_over(sp_tape *t, const int *w, const int *uses, int j)
{
    const sp_node *n = t->nodes[j];
    if (!n->op || !n->op->delta_over || n->ninputs != 1) return false;
    const sp_node *in = n->inputs[0];
    return w[in->index] == j && in->nconsumers == 1 && uses[in->index] == 1 && sp_grad_bytes(in) == sp_grad_bytes(n);
}

/* The δ plan's placement against the lifetimes: δ_a and δ_b alive at once (a at its
 * writer's backward to its own) never share a byte, except a δ handed over and its
 * input's, which share them all; and the most bytes alive at once counting those two as
 * one (*live_over). */
static void check_placement(sp_tape *t, const sp_node *loss, size_t *live_over)
{
    int L = loss->index;
    int *w = calloc((size_t)L + 1, sizeof *w), *uses = calloc((size_t)L + 1, sizeof *uses);
    for (int i = 0; i <= L; i++) w[i] = i;
    for (int j = 0; j <= L; j++)
        for (int k = 0; k < t->nodes[j]->ninputs; k++) {
            w[t->nodes[j]->inputs[k]->index] = j;
            uses[t->nodes[j]->inputs[k]->index]++;
        }
    int handed = 0;
    for (int a = 0; a <= L; a++) {
        if (!sp_grad_has(t->nodes[a], loss)) continue;
        for (int b = a + 1; b <= L; b++) {
            if (!sp_grad_has(t->nodes[b], loss) || w[a] < b) continue;   /* δ_a begins after δ_b ends */
            const sp_tensor *ga = &t->nodes[a]->grad, *gb = &t->nodes[b]->grad;
            if (w[a] == b && hands_over(t, w, uses, b)) {
                cr_assert_eq(ga->data, gb->data, "δ of node %d is not the bytes node %d handed over", a, b);
                handed++;
                continue;
            }
            bool apart = ga->data + ga->numel <= gb->data || gb->data + gb->numel <= ga->data;
            cr_assert(apart, "δ of nodes %d and %d are alive at once in the same bytes", a, b);
        }
    }
    *live_over = 0;
    for (int j = 0; j <= L; j++) {
        size_t live = 0;
        for (int i = 0; i <= j; i++)
            if (sp_grad_has(t->nodes[i], loss) && w[i] >= j && !(j > i && w[i] == j && hands_over(t, w, uses, j) &&
                                                                  t->nodes[j]->inputs[0]->index == i))
                live += sp_grad_bytes(t->nodes[i]);
        if (live > *live_over) *live_over = live;
    }
    cr_log_info("%d δ handed over", handed);
    free(w);
    free(uses);
}

typedef struct step_mem {
    size_t forward;   /* the arena in use when the backward starts */
    size_t peak;      /* its high water over the step              */
    size_t region;    /* the span of the δ buffers' addresses      */
    size_t sum, live_max;
    size_t live_over;    /* live_max with a δ handed over and its input's as one */
    size_t over_bytes;   /* Σ outputs of ReLUs that may run over their input    */
    int overs;           /* ReLUs that ran over their input                      */
} step_mem;

/* One step (forward and backward) of m on (x, y) on a fresh tape: the linear engine, or
 * (keep_all) every δ allocated up front and kept to the end, each node's scratch
 * released after it, as the linear engine did before its δ had lifetimes. */
static step_mem one_step(sp_model *m, const sp_tensor *x, const int *y, bool keep_all, bool reuse)
{
    for (int p = 0; p < m->nparams; p++) sp_zero(&m->params[p]->grad);
    sp_tape t;
    sp_tape_init(&t);
    t.reuse_inputs = reuse;
    sp_node *loss = sp_model_loss(m, &t, x, y);
    step_mem r = {.forward = t.arena.used_total};
    for (int i = 0; i < t.n; i++) {   /* what a ReLU over its input would not have allocated */
        const sp_node *n = t.nodes[i];
        if (n->op && n->op->over_input && n->input->op && n->input->op->out_unread && n->input->nconsumers == 1)
            r.over_bytes += (n->out.numel * sizeof(float) + 63) & ~(size_t)63;
        if (n->op && n->input && n->out.data == n->input->out.data) r.overs++;
    }
    t.arena.high_water = r.forward;
    sp_mark_needs_grad(&t);
    delta_sizes(&t, loss, &r.sum, &r.live_max);
    if (keep_all) {
        sp_alloc_grads(&t, loss);
        for (int i = loss->index; i >= 0; i--) {
            sp_node *n = t.nodes[i];
            if (!sp_grad_has(n, loss)) continue;
            sp_arena_mark mk = sp_arena_mark_get(&t.arena);
            sp_node_backward(n);
            sp_arena_release(&t.arena, mk);
        }
    } else {
        sp_engine *e = sp_engine_create("linear", NULL);
        sp_backward(e, &t, loss);
        sp_engine_destroy(e);
        check_placement(&t, loss, &r.live_over);
    }
    r.peak = t.arena.high_water;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i <= loss->index; i++) {
        const sp_node *n = t.nodes[i];
        if (!sp_grad_has(n, loss)) continue;
        cr_assert_not_null(n->grad.data, "node %d has no δ", i);
        uintptr_t a = (uintptr_t)n->grad.data;
        cr_assert_eq(a % 64, 0, "δ of node %d is not 64-byte aligned", i);
        if (a < lo) lo = a;
        if (a + n->grad.numel * sizeof(float) > hi) hi = a + n->grad.numel * sizeof(float);
    }
    r.region = hi - lo;
    sp_tape_free(&t);
    return r;
}

static float **grads_copy(const sp_model *m)
{
    float **g = calloc((size_t)m->nparams, sizeof *g);
    for (int p = 0; p < m->nparams; p++) {
        g[p] = malloc(m->params[p]->grad.numel * sizeof(float));
        memcpy(g[p], m->params[p]->grad.data, m->params[p]->grad.numel * sizeof(float));
    }
    return g;
}

/* relus: the model has ReLUs of their own after a convolution, batch norm or add (VGG-11);
 * ResNet-20's are fused into batchnorm2d_relu and add_relu, so nothing runs over. */
static void check_model(sp_model *m, int B, int C, bool relus)
{
    sp_set_threads(2);
    sp_model_init(m, 11);
    sp_tensor x = sp_tensor_new(4, (int[]){B, C, 32, 32});
    tu_fill_uniform(x.data, x.numel, 12, -1, 1);
    int y[8];
    for (int b = 0; b < B; b++) y[b] = (3 * b + 1) % 10;

    step_mem old = one_step(m, &x, y, true, false);
    float **ref = grads_copy(m);
    step_mem now = one_step(m, &x, y, false, false);
    cr_log_info("%s b%d: forward %zu B; δ: %zu B in all, at most %zu B alive at once; region %zu B; "
                "step peak %zu B (every δ kept: %zu B)", m->name, B, now.forward, now.sum, now.live_max, now.region,
                now.peak, old.peak);

    for (int p = 0; p < m->nparams; p++)
        cr_assert(memcmp(ref[p], m->params[p]->grad.data, m->params[p]->grad.numel * sizeof(float)) == 0,
                  "%s: grad of %s differs from the walk that keeps every δ", m->name, m->params[p]->name);
    cr_assert_eq(now.forward, old.forward, "the forward is the same in both");
    /* the δ plan packs the δ into little more than the largest live set, a ReLU's δ and
     * its input's one buffer (VGG-11: the largest live set is the first ReLU's pair) */
    cr_assert_leq(now.region, now.live_over + now.live_over / 4, "δ region %zu B for a live set of %zu B",
                  now.region, now.live_over);
    if (relus) cr_assert_lt(now.live_over, now.live_max, "no ReLU handed its δ over (test premise)");
    cr_assert_lt(now.live_max, now.sum / 2, "the model's δ are not mostly dead at any one time (test premise)");
    /* the step's peak: the forward, that region, and the largest node's scratch — which
     * the step that keeps every δ has on top of its forward and Σδ */
    size_t scratch = old.peak - old.forward - old.sum;
    size_t bookkeeping = (size_t)64 * 1024;
    cr_assert_leq(now.peak, now.forward + now.live_max + now.live_max / 4 + scratch + bookkeeping,
                  "step peak %zu B: forward %zu, δ alive at most %zu, scratch %zu", now.peak, now.forward,
                  now.live_max, scratch);
    cr_assert_lt(now.peak + (now.sum - now.live_max) / 2, old.peak, "the cut is not in the peak");

    /* the training loop's forward (sp_tape.reuse_inputs): each ReLU after a convolution,
     * batch norm or add runs over that output, the same gradients to the bit */
    step_mem over = one_step(m, &x, y, false, true);
    cr_log_info("%s b%d: %d ReLUs over their input, forward %zu B (%zu B less)", m->name, B, over.overs, over.forward,
                now.forward - over.forward);
    for (int p = 0; p < m->nparams; p++)
        cr_assert(memcmp(ref[p], m->params[p]->grad.data, m->params[p]->grad.numel * sizeof(float)) == 0,
                  "%s: grad of %s differs with ReLUs over their inputs", m->name, m->params[p]->name);
    cr_assert_eq(now.overs, 0, "without reuse_inputs every output has bytes of its own");
    if (relus) {
        cr_assert_gt(over.overs, 0);
        cr_assert_gt(now.over_bytes, 0);
    } else {
        cr_assert_eq(over.overs, 0, "%s: a ReLU of its own ran over its input", m->name);
    }
    cr_assert_eq(now.forward - over.forward, now.over_bytes, "forward %zu B, %zu B less; the ReLUs' outputs: %zu B",
                 over.forward, now.forward - over.forward, now.over_bytes);

    for (int p = 0; p < m->nparams; p++) free(ref[p]);
    free(ref);
    sp_tensor_free(&x);
    sp_model_free(m);
}

Test(step_arena, vgg11_keeps_the_live_deltas_only, .timeout = 300) { check_model(sp_zoo_vgg11(3, 10), 4, 3, true); }

Test(step_arena, resnet20_keeps_the_live_deltas_only, .timeout = 300) { check_model(sp_zoo_resnet20(1, 10), 4, 1, false); }

/* ---- the use-after-free guard (make SAN=1) --------------------------------------------- */

#if defined(__SANITIZE_ADDRESS__)
#include "layers/layers.h"

/* y = x, whose δ also reads the last float of its consumer's δ: dead by then (the
 * consumer's backward ran first), its bytes poisoned, so AddressSanitizer stops the step
 * there (exit 1). That δ (1 KiB) is the step's largest and was alive with the peek's own
 * (256 B); the δ the peek writes (256 B) may reuse its first bytes (the δ plan packs
 * dead ones), never its last: they stay poisoned under either placement. */
static void peek_infer(sp_node *n, const sp_tensor *x) { n->out = sp_tensor_view(NULL, x->ndim, x->shape); }
static void peek_forward(sp_node *n) { memcpy(n->out.data, sp_node_x(n)->data, n->out.numel * sizeof(float)); }
static volatile float peeked;
static void peek_backward_input(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx)
{
    memcpy(dx->data, dy->data, dx->numel * sizeof(float));
    const sp_tensor *dead = &n->tape->nodes[n->index + 1]->grad;
    peeked = dead->data[dead->numel - 1];
}
static const sp_opdef peek_op = {.name = "peek", .infer = peek_infer,
                                 .cpu = {.forward = peek_forward, .backward_input = peek_backward_input}};

Test(step_arena, reading_a_dead_delta_stops_the_sanitized_run, .exit_code = 1, .init = cr_redirect_stderr)
{
    /* fc's and peek's δ 256 B each, fc2's 1 KiB */
    sp_layer *fc = sp_linear("fc", 4, 32), *fc2 = sp_linear("fc2", 32, 128), *ce = sp_softmax_ce(),
             peek = {.op = &peek_op};
    sp_rng r;
    sp_rng_seed(&r, 1);
    fc->op->init_params(fc, &r);
    fc2->op->init_params(fc2, &r);
    sp_tensor x = sp_tensor_new(2, (int[]){2, 4});
    tu_fill_uniform(x.data, x.numel, 3, -1, 1);
    int y[2] = {0, 42};
    sp_tape t;
    sp_tape_init(&t);
    sp_node *h = sp_apply(&t, fc, sp_tape_input(&t, &x));
    sp_node *loss = sp_apply_loss(&t, ce, sp_apply(&t, fc2, sp_apply(&t, &peek, h)), y);
    sp_engine *e = sp_engine_create("linear", NULL);
    sp_backward(e, &t, loss);   /* exits 1 in peek's δ */
    cr_log_error("read %g from a dead δ unnoticed", (double)peeked);
}
#endif
