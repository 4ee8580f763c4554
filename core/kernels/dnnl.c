/* dnnl.c — conv2d's forward, δ and G on oneDNN; see core/kernels/dnnl.h for the design.
 *
 * One call: the batch is cut into S = min(threads, B) contiguous slots (the split of
 * conv2d's im2col path); every slot gets the cached primitive for its batch size (at
 * most two sizes), its own scratch from the tape's arena (carved out on the calling
 * thread, as the arena is not thread-safe) and runs on one pool thread with oneDNN
 * held to that one thread. Arguments whose layout the primitive wants blocked are
 * reordered per slot; the weights, shared by every slot, are reordered once before
 * the slots start. G: each slot writes its own partial dW, added to dw in slot order.
 *
 * Deterministic: the split depends on B and the thread count only, a primitive on one
 * thread has a fixed order of operations, and the partials are added in a fixed order,
 * so a run inline on one lane of the ooo engine gives the bits of the pool's run. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/kernels/dnnl.h"
#include "core/error.h"
#include "core/threads.h"

static int g_mode = -1;   /* -1 not read yet, 0 gemm, 1 oneDNN */

#ifdef SP_HAVE_DNNL
#define HAVE_DNNL 1
#else
#define HAVE_DNNL 0
#endif

static void read_env(void)
{
    const char *v = getenv("SCANPROP_CONV");
    if (!v || !*v || !strcmp(v, "dnnl")) g_mode = HAVE_DNNL;
    else if (!strcmp(v, "gemm")) g_mode = 0;
    else sp_fail("SCANPROP_CONV=%s: expected dnnl or gemm", v);
}

bool sp_dnnl_conv_on(void)
{
    if (g_mode < 0) read_env();
    return g_mode == 1;
}

bool sp_dnnl_conv_set(bool on)
{
    g_mode = on && HAVE_DNNL;
    return g_mode == (int)on;
}

static int g_algo = -1;   /* -1 not read yet, else an sp_dnnl_algo */

sp_dnnl_algo sp_dnnl_conv_algo(void)
{
    if (g_algo < 0) {
        const char *v = getenv("SCANPROP_CONV_ALGO");
        if (!v || !*v || !strcmp(v, "auto")) g_algo = SP_DNNL_AUTO;
        else if (!strcmp(v, "direct")) g_algo = SP_DNNL_DIRECT;
        else if (!strcmp(v, "winograd")) g_algo = SP_DNNL_WINOGRAD;
        else sp_fail("SCANPROP_CONV_ALGO=%s: expected auto, direct or winograd", v);
    }
    return (sp_dnnl_algo)g_algo;
}

void sp_dnnl_conv_algo_set(sp_dnnl_algo a) { g_algo = a; }

bool sp_dnnl_conv_wants_winograd(const sp_dnnl_conv *c)
{
    sp_dnnl_algo a = sp_dnnl_conv_algo();
    if (a == SP_DNNL_DIRECT || c->k != 3 || c->stride != 1) return false;
    return a == SP_DNNL_WINOGRAD || (c->C >= SP_DNNL_WINO_MIN_C && c->O >= SP_DNNL_WINO_MIN_C &&
                                     c->Ho >= SP_DNNL_WINO_MIN_HW && c->Wo >= SP_DNNL_WINO_MIN_HW);
}

#ifndef SP_HAVE_DNNL

int sp_dnnl_block(void) { return 0; }

bool sp_dnnl_sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc)
{
    return false;
}

void sp_dnnl_conv_forward(sp_tape *t, const sp_dnnl_conv *c, const float *x, const float *w, const float *b,
                          float *y)
{
    sp_fail("conv2d: this build has no oneDNN (make DNNL=1)");
}
void sp_dnnl_conv_forward_relu(sp_tape *t, const sp_dnnl_conv *c, const float *x, const float *w, const float *b,
                               float *y, const sp_dnnl_side *tail)
{
    sp_fail("conv2d: this build has no oneDNN (make DNNL=1)");
}
void sp_dnnl_conv_backward_weights(sp_tape *t, const sp_dnnl_conv *c, const float *x, const float *dy, float *dw,
                                   const sp_dnnl_side *side)
{
    sp_fail("conv2d: this build has no oneDNN (make DNNL=1)");
}
void sp_dnnl_conv_backward(sp_tape *t, const sp_dnnl_conv *c, const float *x, const float *w, const float *dy,
                           float *dx, bool acc, float *dw, const sp_dnnl_side *side)
{
    sp_fail("conv2d: this build has no oneDNN (make DNNL=1)");
}
sp_dnnl_dy_share *sp_dnnl_dy_share_new(sp_tape *t) { return NULL; }
void sp_dnnl_conv_backward_data_shared(sp_tape *t, const sp_dnnl_conv *c, const float *w, const float *dy, float *dx,
                                       bool acc, sp_dnnl_dy_share *sh)
{
    sp_fail("conv2d: this build has no oneDNN (make DNNL=1)");
}
void sp_dnnl_conv_backward_weights_shared(sp_tape *t, const sp_dnnl_conv *c, const float *x, const float *dy,
                                          float *dw, const sp_dnnl_side *side, sp_dnnl_dy_share *sh)
{
    sp_fail("conv2d: this build has no oneDNN (make DNNL=1)");
}
long sp_dnnl_reorder_count(void) { return 0; }
bool sp_dnnl_conv_runs_winograd(const sp_dnnl_conv *c) { return false; }

#else

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#define MAX_SLOTS 64
#define ALIGN 64
#define CHANNEL_BLOCK 16   /* oneDNN's AVX-512 channel block (nChw16c) */

enum { FWD, BWD_D, BWD_W };
/* A primitive's three tensors: two inputs, one output. Role 1 is the weights (input of
 * FWD and BWD_D, output of BWD_W). */
enum { IN0, IN1, OUT, NARG };

typedef struct entry {
    int kind;
    sp_dnnl_conv key;             /* B = the slot's batch */
    sp_dnnl_algo algo;            /* the algorithm set when created (part of the key) */
    bool wino;                    /* oneDNN's Winograd runs it (else direct) */
    dnnl_primitive_t prim;
    int arg[NARG];                /* DNNL_ARG_* of each role */
    dnnl_memory_desc_t user[NARG], want[NARG];
    dnnl_primitive_t reorder[NARG];   /* NULL: the primitive takes the user layout */
    dnnl_primitive_t reorder_acc;     /* BWD_D: OUT's reorder adding into the user's dx */
    /* FWD, BWD_D: the weights' reorder cut by output channels into W_PARTS pieces run on
     * the pool at once (the same primitive on each piece: W_PARTS contiguous ranges of
     * both layouts), or NULL: one piece on the calling thread */
    dnnl_primitive_t wpart;
    dnnl_memory_desc_t wpart_from, wpart_to;
    size_t wpart_from_floats, wpart_to_bytes;
    size_t want_bytes[NARG];
    dnnl_memory_desc_t scratch_md, bias_md;
    size_t scratch_bytes;
    struct bound *_Atomic sets;   /* memory objects and streams, see acquire() */
    struct entry *next;
} entry;

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static entry *cache;
static dnnl_engine_t engine;

static void check(dnnl_status_t s, const char *what)
{
    if (s != dnnl_success) sp_fail("oneDNN: %s failed (status %d)", what, (int)s);
}

static void md_tag(dnnl_memory_desc_t *md, int nd, const dnnl_dim_t *dims, dnnl_format_tag_t tag)
{
    check(dnnl_memory_desc_init_by_tag(md, nd, dims, dnnl_f32, tag), "memory_desc_init_by_tag");
}

/* Every oneDNN call of this thread runs on it alone: the pool provides the cores. */
static void one_thread(void)
{
    if (omp_get_max_threads() != 1) omp_set_num_threads(1);
}

bool sp_dnnl_sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc)
{
    if ((double)M * N * K < SP_DNNL_GEMM_MIN_MACS || !sp_dnnl_conv_on()) return false;
    one_thread();
    check(dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc),
          "sgemm");
    return true;
}

/* A reorder from → to; acc: one that adds into to (a sum post-op: to = from + to, one
 * f32 add per element, the bits of a reorder then an add). */
static dnnl_primitive_t make_reorder_to(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to, bool acc)
{
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t r;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    if (acc) {
        check(dnnl_primitive_attr_create(&attr), "primitive_attr_create");
        check(dnnl_post_ops_create(&po), "post_ops_create");
        check(dnnl_post_ops_append_sum(po, 1.0f), "post_ops_append_sum");
        check(dnnl_primitive_attr_set_post_ops(attr, po), "primitive_attr_set_post_ops");
    }
    check(dnnl_reorder_primitive_desc_create(&pd, from, engine, to, engine, attr), "reorder_primitive_desc_create");
    check(dnnl_primitive_create(&r, pd), "primitive_create (reorder)");
    dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return r;
}

static dnnl_primitive_t make_reorder(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to)
{
    return make_reorder_to(from, to, false);
}

static dnnl_format_tag_t layout_tag(int blk)
{
    return blk == 16 ? dnnl_nChw16c : blk == 8 ? dnnl_nChw8c : dnnl_nchw;
}

/* The weights' reorder of a FWD or BWD_D entry in W_PARTS pieces by output channels
 * (entry.wpart), where the layout it wants keeps the output-channel blocks outermost
 * (one of the tags below; not Winograd's) and the pieces fill whole blocks: then piece p
 * is the p-th contiguous range of both the OIHW weights and the blocked copy. A copy,
 * so the pieces give the bits of the whole. VGG-11: 35 MiB of weights twice a step, on
 * one thread while the other waited. */
#define W_PARTS 2
#define W_PART_MIN_FLOATS 65536
static void wparts_make(entry *e, const sp_dnnl_conv *k)
{
    static const dnnl_format_tag_t tags[] = {dnnl_ABcd16b16a, dnnl_ABcd16a16b, dnnl_ABcd8b8a,
                                             dnnl_ABcd8a8b, dnnl_Acdb16a, dnnl_Acdb8a};
    size_t n = (size_t)k->O * k->C * k->k * k->k;
    if (n < W_PART_MIN_FLOATS || k->O % (W_PARTS * CHANNEL_BLOCK) || sp_get_threads() < 2) return;
    dnnl_dims_t wd = {k->O, k->C, k->k, k->k}, pd = {k->O / W_PARTS, k->C, k->k, k->k};
    for (size_t i = 0; i < sizeof tags / sizeof *tags; i++) {
        dnnl_memory_desc_t whole;
        md_tag(&whole, 4, wd, tags[i]);
        if (!dnnl_memory_desc_equal(&whole, &e->want[IN1])) continue;
        md_tag(&e->wpart_from, 4, pd, dnnl_oihw);
        md_tag(&e->wpart_to, 4, pd, tags[i]);
        e->wpart_from_floats = n / W_PARTS;
        e->wpart_to_bytes = dnnl_memory_desc_get_size(&e->wpart_to);
        if (e->wpart_to_bytes * W_PARTS != e->want_bytes[IN1]) return;   /* padded: not whole pieces */
        e->wpart = make_reorder(&e->wpart_from, &e->wpart_to);
        return;
    }
}

/* The shapes of one convolution's three primitives, as oneDNN's descriptors take them. */
typedef struct conv_mds {
    const dnnl_memory_desc_t *x, *w, *b, *y;
    const dnnl_dim_t *st, *pad, *pad_r;
} conv_mds;

/* *pd ← kind's primitive descriptor with algorithm alg (fpd: the forward's, the hint of
 * δ and G), or false (nothing made) where oneDNN has none for this shape and ISA, or,
 * for Winograd under SP_DNNL_AUTO, its scratchpad (the transformed weights and tiles)
 * exceeds SP_DNNL_WINO_MAX_SCRATCH. */
static bool conv_pd(dnnl_primitive_desc_t *pd, int kind, dnnl_alg_kind_t alg, const conv_mds *m,
                    dnnl_primitive_attr_t attr, dnnl_primitive_desc_t fpd)
{
    dnnl_convolution_desc_t d;
    dnnl_status_t st =
        kind == FWD ? dnnl_convolution_forward_desc_init(&d, dnnl_forward_training, alg, m->x, m->w, m->b, m->y, m->st,
                                                         m->pad, m->pad_r)
        : kind == BWD_D
            ? dnnl_convolution_backward_data_desc_init(&d, alg, m->x, m->w, m->y, m->st, m->pad, m->pad_r)
            : dnnl_convolution_backward_weights_desc_init(&d, alg, m->x, m->w, NULL, m->y, m->st, m->pad, m->pad_r);
    if (st != dnnl_success || dnnl_primitive_desc_create(pd, &d, attr, engine, fpd) != dnnl_success) return false;
    if (alg == dnnl_convolution_winograd && sp_dnnl_conv_algo() == SP_DNNL_AUTO &&
        dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(*pd, dnnl_query_scratchpad_md, 0)) >
            SP_DNNL_WINO_MAX_SCRATCH) {
        dnnl_primitive_desc_destroy(*pd);
        return false;
    }
    return true;
}

/* Winograd where wino asks for it and conv_pd gives it, else direct (which must exist).
 * Returns whether Winograd was taken. */
static bool conv_pd_pick(dnnl_primitive_desc_t *pd, int kind, bool wino, const conv_mds *m,
                         dnnl_primitive_attr_t attr, dnnl_primitive_desc_t fpd)
{
    static const char *what[] = {"primitive_desc_create (conv forward)", "primitive_desc_create (conv backward data)",
                                 "primitive_desc_create (conv backward weights)"};
    if (wino && conv_pd(pd, kind, dnnl_convolution_winograd, m, attr, fpd)) return true;
    if (!conv_pd(pd, kind, dnnl_convolution_direct, m, attr, fpd)) check(dnnl_unimplemented, what[kind]);
    return false;
}

static entry *create(int kind, const sp_dnnl_conv *k, bool wino)
{
    if (!engine) check(dnnl_engine_create(&engine, dnnl_cpu, 0), "engine_create");
    entry *e = sp_xcalloc(1, sizeof *e);
    e->kind = kind;
    e->key = *k;
    e->algo = sp_dnnl_conv_algo();
    dnnl_dims_t xd = {k->B, k->C, k->H, k->W}, wd = {k->O, k->C, k->k, k->k}, bd = {k->O},
                yd = {k->B, k->O, k->Ho, k->Wo};
    dnnl_dims_t st = {k->stride, k->stride}, pad = {k->pad, k->pad};
    /* oneDNN pads on the right only as far as the last window reaches */
    dnnl_dims_t pad_r = {(k->Ho - 1) * k->stride + k->k - k->H - k->pad, (k->Wo - 1) * k->stride + k->k - k->W - k->pad};
    dnnl_memory_desc_t x, w, b, y, xa, wa, ya;
    md_tag(&x, 4, xd, layout_tag(k->xblk));
    md_tag(&w, 4, wd, dnnl_oihw);
    md_tag(&b, 1, bd, dnnl_a);
    md_tag(&y, 4, yd, layout_tag(k->yblk));
    md_tag(&xa, 4, xd, dnnl_format_tag_any);
    md_tag(&wa, 4, wd, dnnl_format_tag_any);
    md_tag(&ya, 4, yd, dnnl_format_tag_any);
    if (kind == BWD_W && k->C % CHANNEL_BLOCK && k->C >= 4) {
        /* G with input channels that do not fill oneDNN's blocks (LeNet-5's conv2: 6 of
         * 16): channels-last src and diff_dst, so no padded channels are computed. The
         * forward and δ gain nothing from it and keep the blocked layouts. Under 4 input
         * channels (VGG-11's and ResNet-20's first convs) oneDNN's own choice, plain src
         * and the blocked diff_dst as it comes, is faster (AVX2: ResNet-20 b64's stem G
         * 0.94-0.99 → 0.39-0.78 ms, VGG-11 b32's conv1 G 2.0-3.0 → 1.4-1.8 ms). */
        md_tag(&xa, 4, xd, dnnl_nhwc);
        md_tag(&ya, 4, yd, dnnl_nhwc);
    }
    e->bias_md = b;
    dnnl_primitive_attr_t attr;
    check(dnnl_primitive_attr_create(&attr), "primitive_attr_create");
    check(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "set_scratchpad_mode");
    /* Winograd where the rule asks for it and oneDNN has it (its F(4×4, 3×3) kernels:
     * AVX-512 only); the forward and its δ or G fall back to direct each on its own. */
    conv_mds m = {.x = &xa, .w = &wa, .b = &b, .y = &ya, .st = st, .pad = pad, .pad_r = pad_r};
    dnnl_primitive_desc_t fpd, pd;
    bool fwino = conv_pd_pick(&fpd, FWD, wino, &m, attr, NULL);
    e->wino = kind == FWD ? fwino : conv_pd_pick(&pd, kind, wino, &m, attr, fpd);
    dnnl_query_t q[NARG];
    if (kind == FWD) {
        pd = fpd;
        e->user[IN0] = x, e->user[IN1] = w, e->user[OUT] = y;
        e->arg[IN0] = DNNL_ARG_SRC, e->arg[IN1] = DNNL_ARG_WEIGHTS, e->arg[OUT] = DNNL_ARG_DST;
        q[IN0] = dnnl_query_src_md, q[IN1] = dnnl_query_weights_md, q[OUT] = dnnl_query_dst_md;
    } else if (kind == BWD_D) {
        e->user[IN0] = y, e->user[IN1] = w, e->user[OUT] = x;
        e->arg[IN0] = DNNL_ARG_DIFF_DST, e->arg[IN1] = DNNL_ARG_WEIGHTS, e->arg[OUT] = DNNL_ARG_DIFF_SRC;
        q[IN0] = dnnl_query_diff_dst_md, q[IN1] = dnnl_query_weights_md, q[OUT] = dnnl_query_diff_src_md;
    } else {
        e->user[IN0] = x, e->user[IN1] = y, e->user[OUT] = w;
        e->arg[IN0] = DNNL_ARG_SRC, e->arg[IN1] = DNNL_ARG_DIFF_DST, e->arg[OUT] = DNNL_ARG_DIFF_WEIGHTS;
        q[IN0] = dnnl_query_src_md, q[IN1] = dnnl_query_diff_dst_md, q[OUT] = dnnl_query_diff_weights_md;
    }
    for (int r = 0; r < NARG; r++) {
        e->want[r] = *dnnl_primitive_desc_query_md(pd, q[r], 0);
        if (dnnl_memory_desc_equal(&e->want[r], &e->user[r])) continue;
        e->want_bytes[r] = dnnl_memory_desc_get_size(&e->want[r]);
        e->reorder[r] = r == OUT ? make_reorder(&e->want[r], &e->user[r]) : make_reorder(&e->user[r], &e->want[r]);
    }
    if (kind == BWD_D && e->reorder[OUT]) e->reorder_acc = make_reorder_to(&e->want[OUT], &e->user[OUT], true);
    if (kind != BWD_W && e->reorder[IN1]) wparts_make(e, k);
    e->scratch_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    e->scratch_bytes = dnnl_memory_desc_get_size(&e->scratch_md);
    check(dnnl_primitive_create(&e->prim, pd), "primitive_create (convolution)");
    if (pd != fpd) dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_desc_destroy(fpd);
    dnnl_primitive_attr_destroy(attr);
    return e;
}

static void sets_make(entry *e);

static entry *lookup(int kind, const sp_dnnl_conv *k)
{
    bool wino = sp_dnnl_conv_wants_winograd(k);
    pthread_mutex_lock(&cache_mu);
    entry *e = cache;
    sp_dnnl_algo algo = sp_dnnl_conv_algo();
    while (e && (e->kind != kind || e->algo != algo || memcmp(&e->key, k, sizeof *k))) e = e->next;
    if (!e) {
        one_thread();   /* a primitive is planned for the threads it sees when created */
        e = create(kind, k, wino);
        sets_make(e);
        e->next = cache;
        cache = e;
    }
    pthread_mutex_unlock(&cache_mu);
    return e;
}

/* Memory objects and a stream, one set per concurrent user of a cache entry: a slot
 * takes a free set, rebinds its memory objects to the call's buffers with
 * dnnl_memory_set_data_handle, runs, and gives it back. An entry's sets are made with
 * the entry (threads + 1: every pool thread and an ooo sub lane at once), so whichever
 * threads run it in a later step, nothing is created then; a further set is made only
 * if more users than that ever meet. */
typedef struct bound {
    dnnl_stream_t s;
    dnnl_memory_t user[NARG], want[NARG], scratch, bias;
    dnnl_memory_t w_from, w_to;   /* the shared weights' reorder in run() */
    dnnl_memory_t wp_from, wp_to;   /* one piece of it (entry.wpart) */
    _Atomic int busy;
    struct bound *next;
} bound;

static void mem_new(dnnl_memory_t *m, const dnnl_memory_desc_t *md)
{
    check(dnnl_memory_create(m, md, engine, NULL), "memory_create");
}

static bound *bound_new(const entry *e)
{
    bound *m = sp_xcalloc(1, sizeof *m);
    check(dnnl_stream_create(&m->s, engine, dnnl_stream_default_flags), "stream_create");
    for (int r = 0; r < NARG; r++) {
        mem_new(&m->user[r], &e->user[r]);
        if (e->reorder[r]) mem_new(&m->want[r], &e->want[r]);
    }
    mem_new(&m->scratch, &e->scratch_md);
    if (e->kind == FWD) mem_new(&m->bias, &e->bias_md);
    if (e->reorder[IN1]) {
        mem_new(&m->w_from, &e->user[IN1]);
        mem_new(&m->w_to, &e->want[IN1]);
    }
    if (e->wpart) {
        mem_new(&m->wp_from, &e->wpart_from);
        mem_new(&m->wp_to, &e->wpart_to);
    }
    return m;
}

/* threads + 1 sets, made with the entry (under cache_mu). */
static void sets_make(entry *e)
{
    for (int n = 0; n <= sp_get_threads(); n++) {
        bound *m = bound_new(e);
        m->next = atomic_load(&e->sets);
        atomic_store(&e->sets, m);
    }
}

static bound *acquire(const entry *e_)
{
    entry *e = (entry *)e_;   /* only its list of sets changes, under cache_mu */
    for (bound *m = atomic_load(&e->sets); m; m = m->next) {
        int free_ = 0;
        if (atomic_compare_exchange_strong(&m->busy, &free_, 1)) return m;
    }
    pthread_mutex_lock(&cache_mu);
    one_thread();
    bound *m = bound_new(e);
    atomic_store(&m->busy, 1);
    m->next = atomic_load(&e->sets);
    atomic_store(&e->sets, m);   /* readers see the old head or this one: both lists are whole */
    pthread_mutex_unlock(&cache_mu);
    return m;
}

static void release(bound *m) { atomic_store(&m->busy, 0); }

/* *m rebound to p. */
static dnnl_memory_t mem(dnnl_memory_t *m, const dnnl_memory_desc_t *md, void *p)
{
    (void)md;
    check(dnnl_memory_set_data_handle(*m, p), "memory_set_data_handle");
    return *m;
}

static void exec(const bound *m, dnnl_primitive_t p, int n, const dnnl_exec_arg_t *args)
{
    check(dnnl_primitive_execute(p, m->s, n, args), "primitive_execute");
}

static _Atomic long reorders;
long sp_dnnl_reorder_count(void) { return atomic_load_explicit(&reorders, memory_order_relaxed); }

static void run_reorder(const bound *m, dnnl_primitive_t r, dnnl_memory_t from, dnnl_memory_t to)
{
    atomic_fetch_add_explicit(&reorders, 1, memory_order_relaxed);
    exec(m, r, 2, (dnnl_exec_arg_t[]){{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
}

static size_t up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

typedef struct job {
    int kind, slots;
    bool acc;                     /* BWD_D: add into dx instead of overwriting it */
    bool relu;                    /* FWD: y = max(y, 0) after each slot's convolution */
    sp_dnnl_conv c;
    entry *e[MAX_SLOTS];
    float *user[NARG];            /* the whole batch; role 1 (weights) not per sample */
    size_t per_sample[NARG];      /* floats per sample of each batched role, 0 for weights */
    const float *bias;
    unsigned char *scratch[MAX_SLOTS];
    void *shared_w;               /* weights already in the primitives' layout, or NULL */
    float *partial;               /* BWD_W: [slots][O·C·k·k] */
    const sp_dnnl_side *side;     /* BWD_W, FWD with relu: work in the same region, or NULL */
    void **dy_in;                 /* [slot]: dy already blocked (sp_dnnl_dy_share), or NULL */
    void **dy_out;                /* [slot]: where the slot's blocked dy is, or NULL  */
} job;

/* sp_dnnl_dy_share: state 0 free, 1 claimed by a running call, 2 published (release
 * store after the call's slots are done; read with acquire). */
struct sp_dnnl_dy_share {
    _Atomic int state;
    int slots, kind;
    const entry *e[MAX_SLOTS];
    void *blk[MAX_SLOTS];
};

sp_dnnl_dy_share *sp_dnnl_dy_share_new(sp_tape *t)
{
    sp_dnnl_dy_share *sh = sp_tape_alloc(t, sizeof *sh);
    memset(sh, 0, sizeof *sh);
    atomic_init(&sh->state, 0);
    return sh;
}

/* The side work's share of the thread that ran slots [begin, end). */
static void run_side(const job *J, size_t begin, size_t end)
{
    const sp_dnnl_side *d = J->side;
    if (!d || !d->n) return;
    size_t b = d->n * begin / (size_t)J->slots, e = d->n * end / (size_t)J->slots;
    if (b < e) d->fn(d->ctx, b, e);
}

static void slot_range(const job *J, int s, int *b0, int *b1)
{
    *b0 = (int)((size_t)J->c.B * (size_t)s / (size_t)J->slots);
    *b1 = (int)((size_t)J->c.B * (size_t)(s + 1) / (size_t)J->slots);
}

/* Slot s of J on the calling thread. dy_in: dy already in the primitive's blocked layout
 * (the other half of a δ + G pair made it), or NULL; *dy_out (when asked): where this
 * slot's blocked dy is, NULL if the primitive took dy as it is. */
static void exec_slot(const job *J, size_t s, void *dy_in, void **dy_out)
{
    size_t nw = (size_t)J->c.O * J->c.C * J->c.k * J->c.k;
    int dy_role = J->kind == BWD_D ? IN0 : J->kind == BWD_W ? IN1 : -1;
    const entry *e = J->e[s];
    int b0, b1;
    slot_range(J, (int)s, &b0, &b1);
    unsigned char *sc = J->scratch[s];
    bound *m = acquire(e);
    dnnl_memory_t user[NARG], use[NARG];
    if (dy_out) *dy_out = NULL;
    for (int r = 0; r < NARG; r++) {
        void *p = J->user[r] + (size_t)b0 * J->per_sample[r];
        if (J->kind == BWD_W && r == OUT) p = J->partial + s * nw;
        user[r] = mem(&m->user[r], &e->user[r], p);
        use[r] = user[r];
        if (!e->reorder[r]) continue;
        if (r == IN1 && J->shared_w) {
            use[r] = mem(&m->want[r], &e->want[r], J->shared_w);
            continue;
        }
        if (r == dy_role && dy_in) {
            use[r] = mem(&m->want[r], &e->want[r], dy_in);
            continue;
        }
        use[r] = mem(&m->want[r], &e->want[r], sc);
        if (r == dy_role && dy_out) *dy_out = sc;
        sc += up(e->want_bytes[r]);
        if (r != OUT) run_reorder(m, e->reorder[r], user[r], use[r]);
    }
    float *acc_to = NULL, *acc_from = NULL;   /* acc, no reorder: written to scratch, added after */
    size_t acc_n = 0;
    if (J->acc && !e->reorder[OUT]) {
        acc_to = J->user[OUT] + (size_t)b0 * J->per_sample[OUT];
        acc_from = (float *)sc;
        acc_n = (size_t)(b1 - b0) * J->per_sample[OUT];
        use[OUT] = mem(&m->user[OUT], &e->user[OUT], acc_from);
        sc += up(acc_n * sizeof(float));
    }
    dnnl_memory_t scratch = mem(&m->scratch, &e->scratch_md, e->scratch_bytes ? sc : NULL);
    dnnl_exec_arg_t args[5] = {{e->arg[IN0], use[IN0]}, {e->arg[IN1], use[IN1]}, {e->arg[OUT], use[OUT]},
                               {DNNL_ARG_SCRATCHPAD, scratch}};
    int nargs = 4;
    if (J->kind == FWD)
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, mem(&m->bias, &e->bias_md, (void *)J->bias)};
    exec(m, e->prim, nargs, args);
    if (e->reorder[OUT]) run_reorder(m, J->acc ? e->reorder_acc : e->reorder[OUT], use[OUT], user[OUT]);
    for (size_t i = 0; i < acc_n; i++) acc_to[i] += acc_from[i];
    release(m);
    if (J->relu) {   /* the ReLU's formula (layers/relu.c), on the slot's output still in cache */
        float *restrict y = J->user[OUT] + (size_t)b0 * J->per_sample[OUT];
        size_t n = (size_t)(b1 - b0) * J->per_sample[OUT];
        for (size_t i = 0; i < n; i++) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
    }
}

static void run_slots(void *ctx, size_t begin, size_t end)
{
    const job *J = ctx;
    one_thread();
    for (size_t s = begin; s < end; s++)
        exec_slot(J, s, J->dy_in ? J->dy_in[s] : NULL, J->dy_out ? &J->dy_out[s] : NULL);
    run_side(J, begin, end);
}

/* G then δ of one slot on one thread, dy reordered into the blocked layout once for
 * both where their primitives want the same layout. */
typedef struct pair {
    const job *w, *d;
} pair;

static void run_pair_slots(void *ctx, size_t begin, size_t end)
{
    const pair *P = ctx;
    one_thread();
    for (size_t s = begin; s < end; s++) {
        void *dy = NULL;
        exec_slot(P->w, s, NULL, &dy);
        bool same = dy && dnnl_memory_desc_equal(&P->w->e[s]->want[IN1], &P->d->e[s]->want[IN0]);
        exec_slot(P->d, s, same ? dy : NULL, NULL);
    }
    run_side(P->w, begin, end);
}

typedef struct sum_job {
    float *dw;
    const float *partial;
    int slots;
    size_t n;
} sum_job;

static void sum_range(void *ctx, size_t begin, size_t end)
{
    const sum_job *J = ctx;
    for (int s = 0; s < J->slots; s++) {
        const float *p = J->partial + (size_t)s * J->n;
        for (size_t i = begin; i < end; i++) J->dw[i] += p[i];
    }
}

/* The bytes slot s of J uses in its scratch, in exec_slot's order: the reorder buffers
 * of its roles (not the weights shared by every slot), the acc buffer, the primitive's
 * scratchpad. *dy_end (when asked): the offset just past dy's reorder buffer, 0 if dy
 * has none (only what lies before it must outlive the call when the other half of a
 * δ + G pair reads dy from there). */
static size_t slot_bytes(const job *J, int s, size_t *dy_end)
{
    const entry *e = J->e[s];
    int dy_role = J->kind == BWD_D ? IN0 : J->kind == BWD_W ? IN1 : -1;
    size_t bytes = 0;
    if (dy_end) *dy_end = 0;
    for (int r = 0; r < NARG; r++)
        if (e->reorder[r] && !(r == IN1 && J->shared_w)) {
            bytes += up(e->want_bytes[r]);
            if (r == dy_role && dy_end) *dy_end = bytes;
        }
    if (J->acc && !e->reorder[OUT]) bytes += up((size_t)e->key.B * J->per_sample[OUT] * sizeof(float));
    return bytes + up(e->scratch_bytes);
}

/* Pieces [begin, end) of an entry's weights' reorder (entry.wpart), each with a set of
 * its own. */
typedef struct wpart_job {
    const entry *e;
    const float *from;
    void *to;
} wpart_job;

static void wpart_range(void *ctx, size_t begin, size_t end)
{
    const wpart_job *W = ctx;
    one_thread();
    for (size_t p = begin; p < end; p++) {
        bound *m = acquire(W->e);
        run_reorder(m, W->e->wpart, mem(&m->wp_from, &W->e->wpart_from, (void *)(W->from + p * W->e->wpart_from_floats)),
                    mem(&m->wp_to, &W->e->wpart_to, (unsigned char *)W->to + p * W->e->wpart_to_bytes));
        release(m);
    }
}

/* A call's job: primitives per slot, the weights reordered once, each slot's scratch
 * (none with no_scratch: the caller places it). */
static job *prepare_with(sp_tape *t, int kind, bool acc, const sp_dnnl_conv *c, float *in0, float *in1, float *out,
                         const float *bias, bool no_scratch)
{
    job *J = sp_tape_alloc(t, sizeof *J);
    memset(J, 0, sizeof *J);
    J->kind = kind;
    J->acc = acc;
    J->c = *c;
    J->slots = sp_get_threads() < c->B ? sp_get_threads() : c->B;
    if (J->slots > MAX_SLOTS) J->slots = MAX_SLOTS;
    J->user[IN0] = in0, J->user[IN1] = in1, J->user[OUT] = out;
    J->bias = bias;
    size_t xs = (size_t)c->C * c->H * c->W, ys = (size_t)c->O * c->Ho * c->Wo;
    J->per_sample[IN0] = kind == BWD_D ? ys : xs;
    J->per_sample[IN1] = kind == BWD_W ? ys : 0;
    J->per_sample[OUT] = kind == FWD ? ys : kind == BWD_D ? xs : 0;
    bool same_w = true;
    for (int s = 0; s < J->slots; s++) {
        int b0, b1;
        slot_range(J, s, &b0, &b1);
        sp_dnnl_conv k = *c;
        k.B = b1 - b0;
        J->e[s] = (s > 0 && J->e[s - 1]->key.B == k.B) ? J->e[s - 1] : lookup(kind, &k);
        same_w = same_w && dnnl_memory_desc_equal(&J->e[s]->want[IN1], &J->e[0]->want[IN1]);
    }
    /* The weights into the primitives' layout once, before the slots start. */
    if (kind != BWD_W && J->e[0]->reorder[IN1] && same_w) {
        one_thread();
        J->shared_w = sp_tape_alloc(t, J->e[0]->want_bytes[IN1] + ALIGN);
        J->shared_w = (void *)up((uintptr_t)J->shared_w);
        if (J->e[0]->wpart) {
            wpart_job W = {.e = J->e[0], .from = in1, .to = J->shared_w};
            sp_parallel_for(W_PARTS, wpart_range, &W);
        } else {
            bound *m = acquire(J->e[0]);
            run_reorder(m, J->e[0]->reorder[IN1], mem(&m->w_from, &J->e[0]->user[IN1], in1),
                        mem(&m->w_to, &J->e[0]->want[IN1], J->shared_w));
            release(m);
        }
    }
    for (int s = 0; s < J->slots && !no_scratch; s++)
        J->scratch[s] = (unsigned char *)up((uintptr_t)sp_tape_alloc(t, slot_bytes(J, s, NULL) + ALIGN));
    size_t nw = (size_t)c->O * c->C * c->k * c->k;
    if (kind == BWD_W) J->partial = sp_tape_alloc(t, (size_t)J->slots * nw * sizeof(float));
    return J;
}

static job *prepare(sp_tape *t, int kind, bool acc, const sp_dnnl_conv *c, float *in0, float *in1, float *out,
                    const float *bias)
{
    return prepare_with(t, kind, acc, c, in0, in1, out, bias, false);
}

/* G: the slots' partial dW added into dw in slot order. */
static void finish(const job *J)
{
    if (J->kind != BWD_W) return;
    size_t nw = (size_t)J->c.O * J->c.C * J->c.k * J->c.k;
    sum_job S = {.dw = J->user[OUT], .partial = J->partial, .slots = J->slots, .n = nw};
    if (nw >= 4096) sp_parallel_for(nw, sum_range, &S);
    else sum_range(&S, 0, nw);
}

static void run(sp_tape *t, int kind, bool acc, const sp_dnnl_conv *c, float *in0, float *in1, float *out,
                const float *bias)
{
    job *J = prepare(t, kind, acc, c, in0, in1, out, bias);
    sp_parallel_for((size_t)J->slots, run_slots, J);
    finish(J);
}

bool sp_dnnl_conv_runs_winograd(const sp_dnnl_conv *c)
{
    return sp_dnnl_conv_on() && lookup(FWD, c)->wino;
}

/* The source layout oneDNN's forward picks for a 3×3 convolution of 16 → 16 channels. */
int sp_dnnl_block(void)
{
    static _Atomic int blk = -1;
    if (!sp_dnnl_conv_on()) return 0;
    if (blk < 0) {
        sp_dnnl_conv k = {.B = 1, .C = 16, .H = 8, .W = 8, .O = 16, .k = 3, .stride = 1, .pad = 1, .Ho = 8, .Wo = 8};
        const entry *e = lookup(FWD, &k);
        int found = 0;
        for (int b = 8; b <= 16; b += 8) {
            dnnl_memory_desc_t md;
            md_tag(&md, 4, (dnnl_dims_t){1, 16, 8, 8}, layout_tag(b));
            if (dnnl_memory_desc_equal(&md, &e->want[IN0])) found = b;
        }
        blk = found;
    }
    return blk;
}

void sp_dnnl_conv_forward(sp_tape *t, const sp_dnnl_conv *c, const float *x, const float *w, const float *b,
                          float *y)
{
    run(t, FWD, false, c, (float *)x, (float *)w, y, b);
}

void sp_dnnl_conv_forward_relu(sp_tape *t, const sp_dnnl_conv *c, const float *x, const float *w, const float *b,
                               float *y, const sp_dnnl_side *tail)
{
    job *J = prepare(t, FWD, false, c, (float *)x, (float *)w, y, b);
    J->relu = true;
    J->side = tail;
    sp_parallel_for((size_t)J->slots, run_slots, J);
}

void sp_dnnl_conv_backward_weights(sp_tape *t, const sp_dnnl_conv *c, const float *x, const float *dy, float *dw,
                                   const sp_dnnl_side *side)
{
    sp_dnnl_conv_backward_weights_shared(t, c, x, dy, dw, side, NULL);
}

/* dy's role in J's primitive: IN0 for δ, IN1 for G. */
static int dy_role_of(const job *J) { return J->kind == BWD_D ? IN0 : IN1; }

/* J's slots read sh's blocked dy where it is published by a call with the same slots
 * and the same layout per slot (else they reorder dy themselves); if sh is free, J
 * claims it and its slots record theirs (published by share_publish). */
static void share_attach(job *J, sp_tape *t, sp_dnnl_dy_share *sh, bool *claimed)
{
    *claimed = false;
    if (!sh) return;
    int st = atomic_load_explicit(&sh->state, memory_order_acquire);
    if (st == 2) {
        if (sh->slots != J->slots) return;
        J->dy_in = sp_tape_alloc(t, (size_t)J->slots * sizeof *J->dy_in);
        int role = dy_role_of(J), prole = sh->kind == BWD_D ? IN0 : IN1;
        for (int s = 0; s < J->slots; s++) {
            bool same = sh->blk[s] && J->e[s]->reorder[role] &&
                        dnnl_memory_desc_equal(&J->e[s]->want[role], &sh->e[s]->want[prole]);
            J->dy_in[s] = same ? sh->blk[s] : NULL;
        }
        return;
    }
    if (st == 0 && atomic_compare_exchange_strong(&sh->state, &st, 1)) {
        *claimed = true;
        t->scratch_kept = true;   /* the blocked dy stays in this call's scratch for the other call */
        J->dy_out = sp_tape_alloc(t, (size_t)J->slots * sizeof *J->dy_out);
        memset(J->dy_out, 0, (size_t)J->slots * sizeof *J->dy_out);
    }
}

static void share_publish(const job *J, sp_dnnl_dy_share *sh, bool claimed)
{
    if (!claimed) return;
    sh->slots = J->slots;
    sh->kind = J->kind;
    for (int s = 0; s < J->slots; s++) sh->e[s] = J->e[s], sh->blk[s] = J->dy_out[s];
    atomic_store_explicit(&sh->state, 2, memory_order_release);
}

void sp_dnnl_conv_backward_data_shared(sp_tape *t, const sp_dnnl_conv *c, const float *w, const float *dy, float *dx,
                                       bool acc, sp_dnnl_dy_share *sh)
{
    job *J = prepare(t, BWD_D, acc, c, (float *)dy, (float *)w, dx, NULL);
    bool claimed;
    share_attach(J, t, sh, &claimed);
    sp_parallel_for((size_t)J->slots, run_slots, J);
    share_publish(J, sh, claimed);
}

void sp_dnnl_conv_backward_weights_shared(sp_tape *t, const sp_dnnl_conv *c, const float *x, const float *dy,
                                          float *dw, const sp_dnnl_side *side, sp_dnnl_dy_share *sh)
{
    job *J = prepare(t, BWD_W, false, c, (float *)x, (float *)dy, dw, NULL);
    J->side = side;
    bool claimed;
    share_attach(J, t, sh, &claimed);
    sp_parallel_for((size_t)J->slots, run_slots, J);
    share_publish(J, sh, claimed);
    finish(J);
}

void sp_dnnl_conv_backward(sp_tape *t, const sp_dnnl_conv *c, const float *x, const float *w, const float *dy,
                           float *dx, bool acc, float *dw, const sp_dnnl_side *side)
{
    job *G = prepare_with(t, BWD_W, false, c, (float *)x, (float *)dy, dw, NULL, true);
    G->side = side;
    job *D = prepare_with(t, BWD_D, acc, c, (float *)dy, (float *)w, dx, NULL, true);
    /* A slot runs G, then δ, on one thread: δ's scratch starts where G's dy (which δ
     * may read) ends, over G's dead buffers and scratchpad, so a slot holds the larger
     * of the two rather than both (Winograd's scratchpads: 7–9 MB each at ResNet-20). */
    for (int s = 0; s < G->slots; s++) {
        size_t dy_end, wb = slot_bytes(G, s, &dy_end), db = slot_bytes(D, s, NULL);
        size_t bytes = wb > dy_end + db ? wb : dy_end + db;
        G->scratch[s] = (unsigned char *)up((uintptr_t)sp_tape_alloc(t, bytes + ALIGN));
        D->scratch[s] = G->scratch[s] + dy_end;
    }
    pair P = {.w = G, .d = D};
    sp_parallel_for((size_t)P.w->slots, run_pair_slots, &P);
    finish(P.w);
}

#endif
