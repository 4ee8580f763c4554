/* linear.c — classic back-propagation: walk the tape in reverse, Θ(n) sequential steps.
 *
 * The tape order is topological, so in reverse every node has its ∂l/∂y complete (all
 * its consumers have added their δ) when it is reached. It computes its weight gradient
 * G (backward_params) and the gradient δ_i of each input i (backward_input), written
 * into a producer read once, added into one that fans out. Everything else in scanprop
 * is checked against it.
 *
 * Memory: a δ lives only from its first writer to its node's own backward (grad_plan
 * below), and each node's backward scratch is handed back when it returns, so the walk
 * holds the forward's outputs and saved state, a few δ buffers and one node's scratch. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "core/device.h"
#include "core/error.h"
#include "schedulers/backward/engines.h"

/* Under AddressSanitizer (make SANITIZE=1) a host δ is poisoned outside its life, so an
 * op that read a δ after its node's backward (its bytes may be another δ's by then)
 * stops the run at the read; elsewhere these are no-ops. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define GRAD_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define GRAD_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define GRAD_POISON(p, n) ((void)(p), (void)(n))
#define GRAD_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

void sp_node_backward_inputs(sp_node *n)
{
    for (int k = 0; k < n->ninputs; k++) {
        sp_node *in = n->inputs[k];
        if (!in->needs_grad) continue;
        if (in->nconsumers == 1) {   /* the common chain case: write δ in place */
            n->kern->backward_input(n, k, &n->grad, &in->grad);
            continue;
        }
        if (n->kern->backward_input_acc) {   /* fan-out: added into the sum in the op's own pass */
            n->kern->backward_input_acc(n, k, &n->grad, &in->grad);
            continue;
        }
        sp_tensor tmp = sp_tape_tensor_like(n->tape, &in->out);   /* else through a scratch */
        n->kern->backward_input(n, k, &n->grad, &tmp);
        sp_accumulate(&in->grad, &tmp);   /* on the tensors' device */
    }
}

void sp_node_backward(sp_node *n)
{
    bool params = n->kern->backward_params && n->layer->nparams > 0;
    sp_node *in = n->input;
    if (params && n->kern->backward_input_params && n->ninputs == 1 && in->needs_grad) {
        /* δ and G from one pass over dy (batch norm's sums, conv2d's blocked dy); into a
         * producer that fans out, added */
        n->kern->backward_input_params(n, &n->grad, &in->grad, in->nconsumers > 1);
        return;
    }
    if (params) n->kern->backward_params(n, &n->grad);
    sp_node_backward_inputs(n);
}

// ----------------------------------------------------------------------------
// δ buffers by lifetime
//
// The walk reaches node j at time L − j (L: the loss's index). δ_i is written first by
// the consumer of i of highest index (its writer w_i; i itself when no node up to the
// loss reads i, and for the loss) and read last by node i's own backward: it lives from
// the start of w_i's backward to the end of i's. Two δ whose lifetimes do not overlap
// may share bytes. The walk is simulated once over byte offsets (best fit in a sorted
// list of free ranges, freed ranges merged), so one region per device of the simulated
// high water holds every δ, at the same offsets in every step of the same tape. The
// region is about the largest live set of δ (two for a chain, a few more across a
// residual block) instead of their sum. A δ that is accumulated into (a fan-out, a
// node no op up to the loss reads, the loss itself) is zeroed when its life begins,
// just before w_i's backward, since its bytes were another δ's until then.

#define GRAD_ALIGN 256   /* the device arena's unit; a multiple of the host's 64 */

typedef struct grad_plan {
    int L;
    int *writer;      /* w_i; -1: no δ (a leaf, or no parameter upstream)       */
    size_t *off;      /* δ_i's offset in its device's region                    */
    bool *zero;       /* zeroed when its life begins                            */
    unsigned char *host;   /* the host region (NULL: none), host_bytes long      */
    size_t host_bytes;
    size_t *fr_off, *fr_len;   /* the simulation's free ranges, sorted by offset */
    int nfree;
} grad_plan;

static size_t grad_bytes(const sp_node *n) { return (n->out.numel * sizeof(float) + GRAD_ALIGN - 1) & ~(size_t)(GRAD_ALIGN - 1); }

static bool has_grad(const sp_node *n, const sp_node *loss) { return n->op && (n->needs_grad || n == loss); }

/* Best fit among the free ranges; else at the end (from a free range that reaches it). */
static size_t sim_alloc(grad_plan *p, size_t *extent, size_t need)
{
    int best = -1;
    for (int r = 0; r < p->nfree; r++)
        if (p->fr_len[r] >= need && (best < 0 || p->fr_len[r] < p->fr_len[best])) best = r;
    if (best >= 0) {
        size_t o = p->fr_off[best];
        p->fr_off[best] += need;
        p->fr_len[best] -= need;
        if (p->fr_len[best] == 0) {
            memmove(p->fr_off + best, p->fr_off + best + 1, (size_t)(p->nfree - best - 1) * sizeof *p->fr_off);
            memmove(p->fr_len + best, p->fr_len + best + 1, (size_t)(p->nfree - best - 1) * sizeof *p->fr_len);
            p->nfree--;
        }
        return o;
    }
    size_t o = *extent;
    if (p->nfree > 0 && p->fr_off[p->nfree - 1] + p->fr_len[p->nfree - 1] == *extent) o = p->fr_off[--p->nfree];
    *extent = o + need;
    return o;
}

static void sim_free(grad_plan *p, size_t o, size_t len)
{
    int r = 0;
    while (r < p->nfree && p->fr_off[r] < o) r++;
    bool left = r > 0 && p->fr_off[r - 1] + p->fr_len[r - 1] == o;
    bool right = r < p->nfree && o + len == p->fr_off[r];
    if (left && right) {   /* bridges two ranges: one */
        p->fr_len[r - 1] += len + p->fr_len[r];
        memmove(p->fr_off + r, p->fr_off + r + 1, (size_t)(p->nfree - r - 1) * sizeof *p->fr_off);
        memmove(p->fr_len + r, p->fr_len + r + 1, (size_t)(p->nfree - r - 1) * sizeof *p->fr_len);
        p->nfree--;
    } else if (left) {
        p->fr_len[r - 1] += len;
    } else if (right) {
        p->fr_off[r] = o;
        p->fr_len[r] += len;
    } else {
        memmove(p->fr_off + r + 1, p->fr_off + r, (size_t)(p->nfree - r) * sizeof *p->fr_off);
        memmove(p->fr_len + r + 1, p->fr_len + r, (size_t)(p->nfree - r) * sizeof *p->fr_len);
        p->fr_off[r] = o;
        p->fr_len[r] = len;
        p->nfree++;
    }
}

/* The buffers whose life begins at node j's backward: j's own when it has no writer,
 * then its inputs' that it writes first (an input repeated in j's slots once). */
static void sim_begin(grad_plan *p, sp_tape *t, int j, sp_device dev, size_t *extent, bool *placed)
{
    sp_node *n = t->nodes[j];
    if (p->writer[j] == j && n->out.device == dev && !placed[j]) {
        p->off[j] = sim_alloc(p, extent, grad_bytes(n));
        placed[j] = true;
    }
    for (int k = 0; k < n->ninputs; k++) {
        int i = n->inputs[k]->index;
        if (p->writer[i] != j || n->inputs[k]->out.device != dev || placed[i]) continue;
        p->off[i] = sim_alloc(p, extent, grad_bytes(n->inputs[k]));
        placed[i] = true;
    }
}

static void grad_plan_make(grad_plan *p, sp_tape *t, sp_node *loss)
{
    int L = p->L = loss->index;
    size_t cnt = (size_t)L + 1;
    p->writer = sp_tape_alloc(t, cnt * sizeof *p->writer);
    p->off = sp_tape_alloc(t, cnt * sizeof *p->off);
    p->zero = sp_tape_alloc(t, cnt * sizeof *p->zero);
    p->fr_off = sp_tape_alloc(t, (cnt + 1) * sizeof *p->fr_off);
    p->fr_len = sp_tape_alloc(t, (cnt + 1) * sizeof *p->fr_len);
    bool *placed = sp_tape_alloc(t, cnt * sizeof *placed);
    int *uses = sp_tape_alloc(t, cnt * sizeof *uses);   /* input slots up to the loss (as sp_alloc_grads) */
    memset(uses, 0, cnt * sizeof *uses);
    for (int i = 0; i <= L; i++) p->writer[i] = has_grad(t->nodes[i], loss) ? i : -1;
    for (int j = 0; j <= L; j++)
        for (int k = 0; k < t->nodes[j]->ninputs; k++) {
            int i = t->nodes[j]->inputs[k]->index;
            uses[i]++;
            if (p->writer[i] >= 0) p->writer[i] = j;   /* ascending j: the highest index */
        }
    for (int i = 0; i <= L; i++) {
        const sp_node *n = t->nodes[i];
        p->zero[i] = n == loss || n->nconsumers != 1 || uses[i] != 1;
    }
    for (int d = 0; d < SP_NDEVICES; d++) {
        bool any = false;
        for (int i = 0; i <= L && !any; i++) any = p->writer[i] >= 0 && t->nodes[i]->out.device == (sp_device)d;
        if (!any) continue;
        memset(placed, 0, cnt * sizeof *placed);
        p->nfree = 0;
        size_t extent = 0;
        for (int j = L; j >= 0; j--) {
            if (p->writer[j] < 0) continue;   /* not walked (has_grad: exactly the walked nodes) */
            sim_begin(p, t, j, (sp_device)d, &extent, placed);
            if (t->nodes[j]->out.device == (sp_device)d) sim_free(p, p->off[j], grad_bytes(t->nodes[j]));
        }
        unsigned char *base = t->shape_only ? NULL : sp_tape_alloc_on(t, (sp_device)d, extent);
        if (d == SP_CPU && base) {
            p->host = base, p->host_bytes = extent;
            GRAD_POISON(base, extent);
        }
        for (int i = 0; i <= L; i++) {
            sp_node *n = t->nodes[i];
            if (p->writer[i] < 0 || n->out.device != (sp_device)d) continue;
            n->grad = sp_tensor_view(base ? (float *)(base + p->off[i]) : NULL, n->out.ndim, n->out.shape);
            n->grad.device = n->out.device;
        }
    }
    for (int i = 0; i <= L; i++)
        if (p->writer[i] < 0) t->nodes[i]->grad.data = NULL;
}

static void grad_live(const grad_plan *p, const sp_node *n, bool live)
{
    if (!p->host || n->grad.device != SP_CPU || !n->grad.data) return;
    if (live) GRAD_UNPOISON(n->grad.data, n->grad.numel * sizeof(float));
    else GRAD_POISON(n->grad.data, n->grad.numel * sizeof(float));
}

/* Zero the accumulated δ whose life begins at node j (before j's backward writes them). */
static void grad_plan_begin(const grad_plan *p, sp_tape *t, int j)
{
    sp_node *n = t->nodes[j];
    if (p->writer[j] == j) {
        grad_live(p, n, true);
        if (p->zero[j]) sp_zero(&n->grad);
    }
    for (int k = 0; k < n->ninputs; k++) {
        int i = n->inputs[k]->index;
        bool first_slot = true;   /* an input repeated in j's slots: zeroed once */
        for (int q = 0; q < k; q++) first_slot &= n->inputs[q]->index != i;
        if (p->writer[i] != j || !first_slot) continue;
        grad_live(p, n->inputs[k], true);
        if (p->zero[i]) sp_zero(&n->inputs[k]->grad);
    }
}

static void linear_backward(sp_engine *e, sp_tape *t, sp_node *loss)
{
    sp_mark_needs_grad(t);
    grad_plan p = {0};
    grad_plan_make(&p, t, loss);
    for (int i = loss->index; i >= 0; i--) {
        sp_node *n = t->nodes[i];
        if (p.writer[i] < 0) continue;   /* a leaf, or nothing to back-propagate */
        grad_plan_begin(&p, t, i);
        if (n == loss) {
            sp_tensor seed = sp_tensor_view(loss->grad.data, 1, (int[]){1});   /* ∂l/∂l, first entry */
            seed.device = loss->grad.device;
            sp_fill(&seed, 1.0f);
        }
        /* a node's backward scratch (im2col columns, partial G, fan-out δ) is dead once
         * it returns: the next node reuses it (the δ region was allocated above) */
        sp_arena_mark m = sp_arena_mark_get(&t->arena);
        sp_node_backward(n);
        sp_arena_release(&t->arena, m);
        grad_live(&p, n, false);   /* read for the last time */
    }
    if (p.host) GRAD_UNPOISON(p.host, p.host_bytes);   /* the arena's bytes again (the next step's) */
}

sp_engine *sp_engine_linear_create(const sp_engine_opts *opts)
{
    sp_engine *e = sp_xcalloc(1, sizeof *e);
    e->name = "linear";
    e->opts = *opts;
    e->backward = linear_backward;
    return e;
}

/* No options of its own; "reverse" (this file's name) is another name for it. */
const sp_engine_def sp_engine_def_linear = {
    .name = "linear",
    .alias = "reverse",
    .caps = SP_ENGINE_DEVICE | SP_ENGINE_OVER_INPUTS,
    .create = sp_engine_linear_create,
};
