/* exec_bppsa_blelloch.c — the time scan's levels in Blelloch's pattern (up-sweep, down-sweep),
 * the alternative to exec_bppsa.c's Hillis–Steele levels with factors passed on.
 *
 * The ranks 1 … W−1 take part, at positions j = W−1−r (m = W−1 of them): position 0 is
 * the last rank, whose element is the vector v = ∇h_{a_{W−1}−1}; position j ≥ 1 holds
 * E_j = P_r (H × H per sample). Rank r needs the exclusive prefix X_j = E_{j−1} ⋯ E_0 =
 * T_{r+1}, a vector. A block of positions [lo, hi) has the aggregate E_{hi−1} ⋯ E_lo, held
 * by its highest position (the owner); a vector when lo = 0, else a matrix. The tree
 * splits a block at lo + p, p the largest power of two below its length, so it has
 * ⌈log₂ m⌉ levels and m − 1 inner nodes:
 *   up-sweep, deepest level first: the left child's owner sends its aggregate to the
 *     node's owner (the right child's), which keeps it and, when the node's own
 *     aggregate is read later, forms A_right · A_left (one H × H × H product per
 *     sample, or a matrix–vector product when the left block holds position 0);
 *   down-sweep, root first: a node's prefix X (nothing at lo = 0) goes to its left
 *     child's owner as it is, and the owner makes its right child's, A_left · X (A_left
 *     itself at lo = 0): one matrix–vector product.
 * 2⌈log₂ m⌉ levels, at most m − 1 messages each way (one H × H matrix or an H vector per
 * sample), O(W) products — against Hillis–Steele's ⌈log₂ W⌉ levels whose messages carry
 * up to span factors each (no matrix–matrix product at all). Which is faster depends on
 * H, W and the links: sp_exec_scan_blelloch chooses. Aggregates nobody reads (the right
 * spine's: rank 1's element, the root's) are never formed.
 *
 * The order of the products differs from Hillis–Steele's (matrices are multiplied into
 * each other instead of applied one by one to the vector), so the two agree within
 * rounding, not bitwise. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/kernels/dense.h"
#include "core/threads.h"
#include "schedulers/exec/exec_internal.h"

typedef struct bnode {
    int lo, hi, mid, depth, left, right;
    bool need;   /* the node's aggregate is read (it is a left child, or its parent's is) */
} bnode;

typedef struct btree {
    bnode *v;
    int n, depth;   /* nodes; levels of inner nodes (the tree's height) */
} btree;

static int build(btree *t, int lo, int hi, int depth, bool need)
{
    int id = t->n++;
    t->v[id] = (bnode){lo, hi, -1, depth, -1, -1, need};
    if (hi - lo > 1) {
        int p = 1;
        while (2 * p < hi - lo) p *= 2;
        t->v[id].mid = lo + p;
        if (depth + 1 > t->depth) t->depth = depth + 1;
        int l = build(t, lo, lo + p, depth + 1, true);
        int r = build(t, lo + p, hi, depth + 1, need);
        t->v[id].left = l, t->v[id].right = r;
    }
    return id;
}

static btree tree_of(const sp_exec *x)
{
    int m = x->W - 1;
    btree t = {sp_xcalloc((size_t)(2 * (m > 0 ? m : 1)), sizeof(bnode)), 0, 0};
    if (m > 0) build(&t, 0, m, 0, false);
    return t;
}

static int rank_of(const sp_exec *x, int pos) { return x->W - 1 - pos; }

bool sp_exec_blelloch_forms(const sp_exec *x, int r)
{
    if (r < 1 || r > x->W - 2) return false;
    btree t = tree_of(x);
    bool need = false;
    for (int i = 0; i < t.n; i++)
        if (t.v[i].hi - t.v[i].lo == 1 && t.v[i].lo == x->W - 1 - r) need = t.v[i].need;
    free(t.v);
    return need;
}

int sp_exec_blelloch_depth(const sp_exec *x)
{
    btree t = tree_of(x);
    int d = t.depth;
    free(t.v);
    return d;
}

/* dst = A·B per sample: A [n, H, H], B [n, H, c] (c = H or 1). */
static float *times(const float *A, const float *B, int n, int H, int c)
{
    size_t HH = (size_t)H * H, Hc = (size_t)H * c;
    float *dst = sp_xmalloc(sizeof(float) * (size_t)n * Hc);
    for (int s = 0; s < n; s++)
        sp_gemm(false, false, H, c, H, 1.0f, A + s * HH, H, B + s * Hc, c, 0.0f, dst + s * Hc, c);
    return dst;
}

float *sp_exec_blelloch_levels(sp_exec *x, float *elem, const float *v, int n)
{
    int r = x->rank, H = x->H, me = r >= 1 ? x->W - 1 - r : -1;
    size_t vec = (size_t)n * H, mat = vec * H;
    btree t = tree_of(x);
    float **agg = sp_xcalloc((size_t)t.n + 1, sizeof(float *));    /* on the owner */
    float **lagg = sp_xcalloc((size_t)t.n + 1, sizeof(float *));   /* A_left, on the owner */
    float **pre = sp_xcalloc((size_t)t.n + 1, sizeof(float *));    /* the prefix X, on the owner */
    int tag = tag_of(x, 2, 0, 0);
    for (int i = 0; i < t.n; i++)   /* leaves: the elements */
        if (t.v[i].hi - t.v[i].lo == 1 && t.v[i].lo == me) {
            if (me == 0) {
                agg[i] = sp_xmalloc(sizeof(float) * vec);
                memcpy(agg[i], v, sizeof(float) * vec);
            } else if (t.v[i].need) {
                agg[i] = elem, elem = NULL;
            }
        }
    free(elem);
    for (int d = t.depth - 1; d >= 0; d--)   /* up-sweep */
        for (int i = 0; i < t.n; i++) {
            bnode b = t.v[i];
            if (b.depth != d || b.mid < 0) continue;
            int from = b.mid - 1, to = b.hi - 1, k = t.depth - 1 - d;
            size_t cnt = b.lo == 0 ? vec : mat;
            sp_req sr = {0}, rr = {0};
            if (me == from) {
                sp_exec_log_msg(x, rank_of(x, to), SP_MSG_UP, k, 4.0 * (double)cnt);
                sp_isend(x->world, agg[b.left], cnt, rank_of(x, to), tag, &sr);
            }
            if (me == to) {
                lagg[i] = sp_xmalloc(sizeof(float) * cnt);
                sp_irecv(x->world, lagg[i], cnt, rank_of(x, from), tag, &rr);
            }
            sp_wait(&rr);
            sp_wait(&sr);
            double t0 = sp_now();
            if (me == to && b.need) agg[i] = times(agg[b.right], lagg[i], n, H, b.lo == 0 ? 1 : H);
            if (me == to) sp_exec_scan_phase(x, SCAN_PH_LV + 2 * k + 1, t0);
        }
    for (int d = 0; d < t.depth; d++)   /* down-sweep */
        for (int i = 0; i < t.n; i++) {
            bnode b = t.v[i];
            if (b.depth != d || b.mid < 0) continue;
            int to = b.mid - 1, own = b.hi - 1, k = t.depth + d;
            sp_req sr = {0}, rr = {0};
            if (b.lo > 0) {   /* X exists: to the left child as it is */
                if (me == own) {
                    sp_exec_log_msg(x, rank_of(x, to), SP_MSG_DOWN, k, 4.0 * (double)vec);
                    sp_isend(x->world, pre[i], vec, rank_of(x, to), tag, &sr);
                }
                if (me == to) {
                    pre[b.left] = sp_xmalloc(sizeof(float) * vec);
                    sp_irecv(x->world, pre[b.left], vec, rank_of(x, own), tag, &rr);
                }
            }
            sp_wait(&rr);
            sp_wait(&sr);
            if (me == own) {
                double t0 = sp_now();
                if (b.lo == 0) pre[b.right] = lagg[i], lagg[i] = NULL;
                else pre[b.right] = times(lagg[i], pre[i], n, H, 1);
                sp_exec_scan_phase(x, SCAN_PH_LV + 2 * k + 1, t0);
            }
        }
    float *out = NULL;
    for (int i = 0; i < t.n; i++) {
        if (t.v[i].hi - t.v[i].lo == 1 && t.v[i].lo == me && me > 0) out = pre[i], pre[i] = NULL;
        free(agg[i]);
        free(lagg[i]);
        free(pre[i]);
    }
    free(agg);
    free(lagg);
    free(pre);
    free(t.v);
    return out;
}

/* Rank r's part of the levels as program ops (exec_internal.h): the same loops as
 * sp_exec_blelloch_levels, each send, receive and wait in its place, the products after
 * a level's waits as the rank's measured phase of that level. */
void sp_exec_blelloch_program(const sp_exec *x, int r, const double *ph, sp_prog *p)
{
    int me = r >= 1 ? x->W - 1 - r : -1;
    double vec = 4.0 * x->batch * x->H, mat = vec * x->H;
    const double *mine = ph + (size_t)r * SCAN_PHASES;
    btree t = tree_of(x);
    for (int pass = 0; pass < 2; pass++)   /* up-sweep (deepest first), then down-sweep (root first) */
        for (int dd = 0; dd < t.depth; dd++) {
            int d = pass == 0 ? t.depth - 1 - dd : dd, k = pass == 0 ? dd : t.depth + d;
            for (int i = 0; i < t.n; i++) {
                bnode b = t.v[i];
                if (b.depth != d || b.mid < 0) continue;
                int snd = pass == 0 ? b.mid - 1 : b.hi - 1, rcv = pass == 0 ? b.hi - 1 : b.mid - 1;   /* positions */
                bool msg = pass == 0 || b.lo > 0, sent = msg && me == snd, got = msg && me == rcv;
                if (sent)
                    sp_prog_add(p, (sp_prog_op){.op = SP_OP_SEND, .rank = r, .peer = rank_of(x, rcv),
                                                .kind = pass == 0 ? SP_MSG_UP : SP_MSG_DOWN, .stage = k,
                                                .bytes = pass == 0 && b.lo > 0 ? mat : vec, .job = -1});
                if (got)
                    sp_prog_add(p, (sp_prog_op){.op = SP_OP_RECV, .rank = r, .peer = rank_of(x, snd), .job = -1});
                if (sent) sp_prog_add(p, (sp_prog_op){.op = SP_OP_WAITSENDS, .rank = r, .job = -1});
                if (me == b.hi - 1)   /* the node's owner (one per depth) forms what it needs */
                    sp_prog_add(p, (sp_prog_op){.op = SP_OP_COMPUTE, .rank = r, .job = -1,
                                                .us = mine[SCAN_PH_LV + 2 * k + 1],
                                                .name = pass == 0 ? "up-sweep: product" : "down-sweep: product"});
            }
        }
    free(t.v);
}

/* The plan's lines: each level's messages (sender → receiver, floats) and products. */
void sp_exec_blelloch_plan(const sp_exec *x, FILE *f)
{
    btree t = tree_of(x);
    int n = x->batch, H = x->H, level = 0;
    for (int d = t.depth - 1; d >= 0; d--) {
        fprintf(f, "up-sweep level %d:", ++level);
        for (int i = 0, k = 0; i < t.n; i++) {
            bnode b = t.v[i];
            if (b.depth != d || b.mid < 0) continue;
            fprintf(f, "%s rank %d -> rank %d (%s, %.4g floats", k++ ? ";" : "", rank_of(x, b.mid - 1),
                    rank_of(x, b.hi - 1), b.lo == 0 ? "a vector" : "an H x H matrix",
                    (double)n * H * (b.lo == 0 ? 1 : H));
            if (b.need)
                fprintf(f, "; rank %d forms the aggregate, %.4g FLOPs", rank_of(x, b.hi - 1),
                        2.0 * n * H * H * (b.lo == 0 ? 1 : H));
            fprintf(f, ")");
        }
        fprintf(f, "\n");
    }
    for (int d = 0; d < t.depth; d++) {
        fprintf(f, "down-sweep level %d:", ++level);
        int k = 0;
        for (int i = 0; i < t.n; i++) {
            bnode b = t.v[i];
            if (b.depth != d || b.mid < 0 || b.lo == 0) continue;
            fprintf(f, "%s rank %d -> rank %d (a vector, %.4g floats)", k++ ? ";" : "", rank_of(x, b.hi - 1),
                    rank_of(x, b.mid - 1), (double)n * H);
        }
        fprintf(f, "%s\n", k ? "" : " no message (the prefixes below position 0 are made where they are)");
    }
    free(t.v);
}

/* $SCANPROP_SCAN_ALGO = blelloch | hillis-steele | auto (default): which levels the time
 * scan runs. auto compares the two critical paths in an α–β model with the figures of
 * docs/comm-profile.csv's point-to-point fit (α = 6.4 µs, β = 24.6 GB/s) and 10 GFLOP/s:
 *   Hillis–Steele: ⌈log₂ W⌉ (α) + 4·n·H²·(W − 2)/β        (up to span factors a level)
 *   Blelloch:      2⌈log₂(W−1)⌉ α + ⌈log₂(W−1)⌉ (4·n·H²/β + 2·n·H³/F)
 * The scan over layers always runs Hillis–Steele (its matrix–matrix products would be
 * far too large: see exec_bppsa.c). */
bool sp_exec_scan_blelloch(const sp_exec *x)
{
    const char *e = getenv("SCANPROP_SCAN_ALGO");
    if (!x->tscan) return false;
    if (e && !strcmp(e, "blelloch")) return true;
    if (e && !strcmp(e, "hillis-steele")) return false;
    if (e && *e && strcmp(e, "auto") != 0)
        sp_fail("$SCANPROP_SCAN_ALGO=%s: expected blelloch, hillis-steele or auto", e);
    double alpha = 6.4, beta = 24633.0, F = 1e4, n = x->batch, H = x->H, W = x->W;
    int L = 0, D = sp_exec_blelloch_depth(x);
    while ((1 << L) < x->W) L++;
    double hs = L * alpha + 4 * n * H * H * (W > 2 ? W - 2 : 0) / beta;
    double bl = 2 * D * alpha + D * (4 * n * H * H / beta + 2 * n * H * H * H / F);
    return bl < hs;
}
