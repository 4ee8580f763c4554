/* exec_bppsa_blelloch.c — the time scan's levels in Blelloch's pattern: the steps of the
 * scan plan (schedulers/scan/scan.h, Algorithm 1's full scan) run across ranks, the
 * alternative to exec_bppsa.c's Hillis–Steele levels with factors passed on.
 *
 * The ranks 1 … W−1 take part, at positions j = W−1−r (m = W−1 of them, the plan's
 * n = m − 1): position 0 is the last rank, whose element is the vector v = ∇h_{a_{W−1}−1};
 * position j ≥ 1 holds E_j = P_r (H × H per sample). Rank r needs the exclusive prefix
 * X_j = E_{j−1} ⋯ E_0 = T_{r+1}, a vector: the plan's a[j] at the end. Each rank holds
 * its own a[j] and runs the plan's steps that name its position; a step's left operand
 * a[l] holds the aggregate E_l ⋯ E_lo of its block, a vector when lo = 0, else a matrix:
 *   up, a[r] ← a[r]·a[l]: l sends its aggregate to r, which keeps it for the down-sweep
 *     and, when the plan marks the step a product (its result is read), forms it (one
 *     H × H × H product per sample, a matrix–vector one when lo = 0);
 *   identity, a[n] ← I: the root's left aggregate goes to position n all the same, as
 *     the up-sweep's last message (the root's down step reads it; the plan has no up
 *     step for the root, whose result only a[n] would hold);
 *   down, a[l] ← a[r], a[r] ← a[l]·a[r]: r sends its prefix X to l as it is (no message
 *     when lo = 0: X = I) and makes its own from the aggregate it kept, A_l · X (A_l
 *     itself when X = I): one matrix–vector product.
 * 2⌈log₂ m⌉ levels, at most m − 1 messages each way (one H × H matrix or an H vector per
 * sample), O(W) products — against Hillis–Steele's ⌈log₂ W⌉ levels whose messages carry
 * up to span factors each (no matrix–matrix product at all). Which is faster depends on
 * H, W and the links: sp_exec_scan_blelloch chooses. Aggregates nobody reads (rank 1's
 * element, a[n]'s products) are never formed.
 *
 * The order of the products differs from Hillis–Steele's (matrices are multiplied into
 * each other instead of applied one by one to the vector), so the two agree within
 * rounding, not bitwise. */
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/kernels/dense.h"
#include "core/threads.h"
#include "schedulers/exec/exec_internal.h"
#include "schedulers/scan/scan.h"

/* The full scan over the m = W − 1 positions; no steps below two positions (no levels). */
static void plan_of(const sp_exec *x, sp_scan_plan *p)
{
    if (x->W - 1 < 2) *p = (sp_scan_plan){0};
    else sp_scan_plan_build(p, x->W - 2, -1);
}

static int rank_of(const sp_exec *x, int pos) { return x->W - 1 - pos; }

/* Step k's message (see the top of the file): from position *from to *to, a vector or
 * an H × H matrix per sample; false when it sends nothing. */
static bool step_message(const sp_scan_plan *p, int k, int *from, int *to, bool *vec)
{
    const sp_scan_step *st = &p->steps[k];
    switch (st->kind) {
    case SP_SCAN_UP: *from = st->l, *to = st->r, *vec = st->lo == 0; return true;
    case SP_SCAN_IDENTITY: *from = p->steps[k + 1].l, *to = st->r, *vec = true; return true;   /* the root's down step follows */
    case SP_SCAN_DOWN: *from = st->r, *to = st->l, *vec = true; return st->lo > 0;
    default: return false;
    }
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
    int H = x->H, me = x->rank >= 1 ? x->W - 1 - x->rank : -1, tag = tag_of(x, 2, 0, 0);
    size_t vec = (size_t)n * H, mat = vec * H;
    sp_scan_plan p;
    plan_of(x, &p);
    float *a = elem;   /* a[me]: the element, the aggregates, then the prefix (NULL: I or none) */
    float **kept = sp_xcalloc((size_t)x->W, sizeof *kept);   /* a[l] as received from l, by l */
    if (me == 0) {
        a = sp_xmalloc(sizeof(float) * vec);
        memcpy(a, v, sizeof(float) * vec);
    }
    for (int k = 0; k < p.nsteps; k++) {
        const sp_scan_step *st = &p.steps[k];
        int from = -1, to = -1;
        bool isvec = true, msg = step_message(&p, k, &from, &to, &isvec);
        size_t cnt = isvec ? vec : mat;
        sp_req sr = {0}, rr = {0};
        float *got = NULL;
        if (msg && me == from) {
            sp_exec_log_msg(x, rank_of(x, to), st->kind == SP_SCAN_DOWN ? SP_MSG_DOWN : SP_MSG_UP, st->level,
                            4.0 * (double)cnt);
            sp_isend(x->world, a, cnt, rank_of(x, to), tag, &sr);
        }
        if (msg && me == to) {
            got = sp_xmalloc(sizeof(float) * cnt);
            sp_irecv(x->world, got, cnt, rank_of(x, from), tag, &rr);
        }
        sp_wait(&rr);
        sp_wait(&sr);
        if (st->kind == SP_SCAN_DOWN && me == st->l) {   /* a[l] ← a[r]: X, or I */
            free(a);
            a = got;
        }
        if (me != st->r) continue;
        double t0 = sp_now();
        if (st->kind != SP_SCAN_DOWN) {   /* up or identity: keep a[l]; form a[r]·a[l] when read */
            kept[from] = got;
            if (st->product) {
                float *t = times(a, got, n, H, isvec ? 1 : H);
                free(a);
                a = t;
            }
        } else if (st->lo == 0) {         /* X = I (a is NULL): a[r] ← a[l] */
            a = kept[st->l], kept[st->l] = NULL;
        } else {
            float *t = times(kept[st->l], a, n, H, 1);
            free(a);
            a = t;
        }
        sp_exec_scan_phase(x, SCAN_PH_LV + 2 * st->level + 1, t0);
    }
    if (me < 1) free(a), a = NULL;
    for (int i = 0; i < x->W; i++) free(kept[i]);
    free(kept);
    sp_scan_plan_free(&p);
    return a;
}

/* Rank r's part of the levels as program ops (exec_internal.h): the same loop as
 * sp_exec_blelloch_levels, each send, receive and wait in its place, the products after
 * a step's waits as the rank's measured phase of that level. */
void sp_exec_blelloch_program(const sp_exec *x, int r, const double *ph, sp_prog *p)
{
    int me = r >= 1 ? x->W - 1 - r : -1;
    double vec = 4.0 * x->batch * x->H, mat = vec * x->H;
    const double *mine = ph + (size_t)r * SCAN_PHASES;
    sp_scan_plan sp;
    plan_of(x, &sp);
    for (int k = 0; k < sp.nsteps; k++) {
        const sp_scan_step *st = &sp.steps[k];
        int from = -1, to = -1;
        bool isvec = true, msg = step_message(&sp, k, &from, &to, &isvec);
        bool sent = msg && me == from, got = msg && me == to, down = st->kind == SP_SCAN_DOWN;
        if (sent)
            sp_prog_add(p, (sp_prog_op){.op = SP_OP_SEND, .rank = r, .peer = rank_of(x, to),
                                        .kind = down ? SP_MSG_DOWN : SP_MSG_UP, .stage = st->level,
                                        .bytes = isvec ? vec : mat, .job = -1});
        if (got) sp_prog_add(p, (sp_prog_op){.op = SP_OP_RECV, .rank = r, .peer = rank_of(x, from), .job = -1});
        if (sent) sp_prog_add(p, (sp_prog_op){.op = SP_OP_WAITSENDS, .rank = r, .job = -1});
        if (me == st->r)
            sp_prog_add(p, (sp_prog_op){.op = SP_OP_COMPUTE, .rank = r, .job = -1,
                                        .us = mine[SCAN_PH_LV + 2 * st->level + 1],
                                        .name = down ? "down-sweep: product" : "up-sweep: product"});
    }
    sp_scan_plan_free(&sp);
}

/* The plan's lines: each level's messages (sender → receiver, floats) and products. */
void sp_exec_blelloch_plan(const sp_exec *x, FILE *f)
{
    sp_scan_plan p;
    plan_of(x, &p);
    int n = x->batch, H = x->H;
    for (int k = 0; k < p.nsteps;) {
        int level = p.steps[k].level, msgs = 0;
        bool down = p.steps[k].kind == SP_SCAN_DOWN;
        fprintf(f, "%s level %d:", down ? "down-sweep" : "up-sweep", level + 1);
        for (; k < p.nsteps && p.steps[k].level == level; k++) {
            int from = -1, to = -1;
            bool isvec = true;
            if (!step_message(&p, k, &from, &to, &isvec)) continue;
            fprintf(f, "%s rank %d -> rank %d (%s, %.4g floats", msgs++ ? ";" : "", rank_of(x, from), rank_of(x, to),
                    isvec ? "a vector" : "an H x H matrix", (double)n * H * (isvec ? 1 : H));
            if (!down && p.steps[k].product)
                fprintf(f, "; rank %d forms the aggregate, %.4g FLOPs", rank_of(x, to),
                        2.0 * n * H * H * (isvec ? 1 : H));
            fprintf(f, ")");
        }
        fprintf(f, "%s\n", down && !msgs ? " no message (the prefixes below position 0 are made where they are)" : "");
    }
    sp_scan_plan_free(&p);
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
    int L = sp_scan_ceil_log2(x->W), D = sp_scan_ceil_log2(x->W - 1);
    double hs = L * alpha + 4 * n * H * H * (W > 2 ? W - 2 : 0) / beta;
    double bl = 2 * D * alpha + D * (4 * n * H * H / beta + 2 * n * H * H * H / F);
    return bl < hs;
}
