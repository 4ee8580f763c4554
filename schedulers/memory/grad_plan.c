/* grad_plan.c — the reverse walk's δ buffers placed by lifetime (memory.h: the δ plan).
 * The walk is simulated once over byte offsets per device; the region of its high water
 * is allocated from the tape and each δ is a view at its offset. */
#include <stdlib.h>
#include <string.h>
#include "core/device.h"
#include "core/error.h"
#include "schedulers/memory/memory.h"

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

/* Best fit among the free ranges; else at the end (from a free range that reaches it). */
static size_t sim_alloc(sp_grad_plan *p, size_t *extent, size_t need)
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

static void sim_free(sp_grad_plan *p, size_t o, size_t len)
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
static void sim_begin(sp_grad_plan *p, sp_tape *t, int j, sp_device dev, size_t *extent, bool *placed)
{
    sp_node *n = t->nodes[j];
    if (p->writer[j] == j && n->out.device == dev && !placed[j]) {
        p->off[j] = sim_alloc(p, extent, sp_grad_bytes(n));
        placed[j] = true;
    }
    if (dev == SP_CPU && n->op && n->op->delta_over && n->ninputs == 1 && n->out.device == dev && placed[j]) {   /* δx over δy */
        const sp_node *in = n->inputs[0];
        int i = in->index;
        if (p->writer[i] == j && !p->zero[i] && !placed[i] && in->out.device == dev &&
            sp_grad_bytes(in) == sp_grad_bytes(n)) {
            p->off[i] = p->off[j];
            placed[i] = true;
            p->over[j] = true;
        }
    }
    for (int k = 0; k < n->ninputs; k++) {
        int i = n->inputs[k]->index;
        if (p->writer[i] != j || n->inputs[k]->out.device != dev || placed[i]) continue;
        p->off[i] = sim_alloc(p, extent, sp_grad_bytes(n->inputs[k]));
        placed[i] = true;
    }
}

/* The same lifetimes placed offline, largest first, each at the lowest offset clear of
 * every placed δ whose life meets its own (the walk's order of allocation can strand a
 * large δ above small ones: VGG-11 b32, 15 MiB where 10 are live at most). A δ handed on
 * (over) and its input's are one buffer, live from the first's start to the last's end.
 * O(n²): tapes of up to GREEDY_MAX walked nodes. Returns the extent, off2 the offsets. */
#define GREEDY_MAX 512
typedef struct greedy_buf {
    int start, end;   /* walk times, inclusive */
    size_t size, off;
} greedy_buf;

static int by_size(const void *a, const void *b)
{
    const greedy_buf *x = a, *y = b;
    if (x->size != y->size) return x->size < y->size ? 1 : -1;
    return x->start - y->start;
}

static int by_off(const void *a, const void *b)
{
    const greedy_buf *const *x = a, *const *y = b;
    return (*x)->off < (*y)->off ? -1 : (*x)->off > (*y)->off;
}

static size_t greedy_place(const sp_grad_plan *p, sp_tape *t, sp_device dev, int nbuf, size_t *off2)
{
    int L = p->L;
    greedy_buf *b = sp_tape_alloc(t, (size_t)nbuf * sizeof *b);
    int *group = sp_tape_alloc(t, ((size_t)L + 1) * sizeof *group);
    size_t n = 0;
    for (int i = L; i >= 0; i--) {
        const sp_node *nd = t->nodes[i];
        group[i] = -1;
        if (p->writer[i] < 0 || nd->out.device != dev) continue;
        int w = p->writer[i];
        if (w != i && p->over[w] && t->nodes[w]->inputs[0]->index == i && group[w] >= 0) {
            group[i] = group[w];   /* δ_w's bytes go on as δ_i */
            b[group[i]].end = L - i;
            continue;
        }
        b[n] = (greedy_buf){.start = L - w, .end = L - i, .size = sp_grad_bytes(nd)};
        group[i] = (int)n++;
    }
    size_t *order = sp_tape_alloc(t, n * sizeof *order);
    greedy_buf *s = sp_tape_alloc(t, n * sizeof *s);
    memcpy(s, b, n * sizeof *s);
    for (size_t k = 0; k < n; k++) s[k].off = k;   /* remember each one's index */
    qsort(s, n, sizeof *s, by_size);
    for (size_t k = 0; k < n; k++) order[k] = s[k].off;
    const greedy_buf **meet = sp_tape_alloc(t, n * sizeof *meet);
    bool *done = sp_tape_alloc(t, n * sizeof *done);
    memset(done, 0, n * sizeof *done);
    size_t extent = 0;
    for (size_t k = 0; k < n; k++) {
        greedy_buf *g = &b[order[k]];
        size_t m = 0;
        for (size_t q = 0; q < n; q++)
            if (done[q] && b[q].start <= g->end && g->start <= b[q].end) meet[m++] = &b[q];
        qsort(meet, m, sizeof *meet, by_off);
        size_t o = 0;
        for (size_t q = 0; q < m; q++) {
            if (meet[q]->off >= o + g->size) break;   /* the gap below it fits */
            if (meet[q]->off + meet[q]->size > o) o = meet[q]->off + meet[q]->size;
        }
        g->off = o;
        done[order[k]] = true;
        if (o + g->size > extent) extent = o + g->size;
    }
    for (int i = 0; i <= L; i++)
        if (group[i] >= 0) off2[i] = b[group[i]].off;
    return extent;
}

void sp_grad_plan_make(sp_grad_plan *p, sp_tape *t, sp_node *loss)
{
    if (!p) sp_fail("sp_grad_plan_make: argument 'p' is NULL");
    if (!t) sp_fail("sp_grad_plan_make: argument 't' is NULL");
    if (!loss) sp_fail("sp_grad_plan_make: argument 'loss' is NULL");
    *p = (sp_grad_plan){0};
    int L = p->L = loss->index;
    size_t cnt = (size_t)L + 1;
    p->writer = sp_tape_alloc(t, cnt * sizeof *p->writer);
    p->off = sp_tape_alloc(t, cnt * sizeof *p->off);
    p->zero = sp_tape_alloc(t, cnt * sizeof *p->zero);
    p->over = sp_tape_alloc(t, cnt * sizeof *p->over);
    memset(p->over, 0, cnt * sizeof *p->over);
    p->fr_off = sp_tape_alloc(t, (cnt + 1) * sizeof *p->fr_off);
    p->fr_len = sp_tape_alloc(t, (cnt + 1) * sizeof *p->fr_len);
    bool *placed = sp_tape_alloc(t, cnt * sizeof *placed);
    int *uses = sp_tape_alloc(t, cnt * sizeof *uses);   /* input slots up to the loss (as sp_alloc_grads) */
    memset(uses, 0, cnt * sizeof *uses);
    for (int i = 0; i <= L; i++) p->writer[i] = sp_grad_has(t->nodes[i], loss) ? i : -1;
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
        int nbuf = 0;
        for (int j = L; j >= 0; j--) {
            if (p->writer[j] < 0) continue;   /* not walked (sp_grad_has: exactly the walked nodes) */
            sim_begin(p, t, j, (sp_device)d, &extent, placed);
            if (t->nodes[j]->out.device == (sp_device)d && !p->over[j])   /* else its input's now */
                sim_free(p, p->off[j], sp_grad_bytes(t->nodes[j]));
            nbuf += t->nodes[j]->out.device == (sp_device)d;
        }
        if (nbuf <= GREEDY_MAX) {   /* the offline placement where it is smaller */
            size_t *off2 = sp_tape_alloc(t, cnt * sizeof *off2);
            size_t ext2 = greedy_place(p, t, (sp_device)d, nbuf, off2);
            if (ext2 < extent) {
                for (int i = 0; i <= L; i++)
                    if (p->writer[i] >= 0 && t->nodes[i]->out.device == (sp_device)d) p->off[i] = off2[i];
                extent = ext2;
            }
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
            n->grad.blk = n->out.blk;   /* ∂l/∂y in y's layout */
            n->grad.device = n->out.device;
        }
    }
    for (int i = 0; i <= L; i++)
        if (p->writer[i] < 0) t->nodes[i]->grad.data = NULL;
}

static void grad_live(const sp_grad_plan *p, const sp_node *n, bool live)
{
    if (!p->host || n->grad.device != SP_CPU || !n->grad.data) return;
    if (live) GRAD_UNPOISON(n->grad.data, n->grad.numel * sizeof(float));
    else GRAD_POISON(n->grad.data, n->grad.numel * sizeof(float));
}

/* Zero the accumulated δ whose life begins at node j (before j's backward writes them). */
void sp_grad_plan_begin(const sp_grad_plan *p, sp_tape *t, int j)
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

void sp_grad_plan_end(const sp_grad_plan *p, const sp_node *n)
{
    if (!p->over[n->index]) grad_live(p, n, false);   /* over: the bytes live on as its input's δ */
}

void sp_grad_plan_finish(const sp_grad_plan *p)
{
    if (p->host) GRAD_UNPOISON(p->host, p->host_bytes);
}
