/* scan.c — Algorithm 1 of the BPPSA paper as a list of steps (see scan.h).
 *
 *   up-sweep   d = 0 .. D−1:  for i = 0 .. n − 2^d step 2^{d+1}:
 *                 l = i + 2^d − 1,  r = min(i + 2^{d+1} − 1, n),  a[r] ← a[l] ⋄ a[r]
 *   middle:    full scan: a[n] ← I.  Hybrid: after D < full levels, the blocks of size
 *              2^D end at r_j = min((j+1)·2^D − 1, n) and hold their reductions; a
 *              sequential exclusive scan over them leaves each a[r_j] holding the
 *              prefix of all earlier blocks (one level per block: Θ(n / 2^D) steps).
 *   down-sweep d = D' .. 0 (D' = full depth for the full scan, else D − 1):
 *                 same pairs, T ← a[l]; a[l] ← a[r]; a[r] ← a[r] ⋄ T.
 * The operands of ⋄ are reversed in the down-sweep (line 13) because ⋄ does not
 * commute. */
#include <stdlib.h>
#include "core/error.h"
#include "schedulers/scan/scan.h"

int sp_scan_ceil_log2(int n)
{
    int levels = 0;
    while ((1L << levels) < (long)n) levels++;
    return levels;
}

int sp_scan_full_levels(int n) { return sp_scan_ceil_log2(n + 1) - 1; }

static void push(sp_scan_plan *p, int *cap, sp_scan_kind kind, int level, int l, int r, int lo)
{
    if (p->nsteps == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        p->steps = sp_xrealloc(p->steps, (size_t)*cap * sizeof *p->steps);
    }
    p->steps[p->nsteps++] = (sp_scan_step){kind, level, l, r, lo, false};
}

static void sweep_level(sp_scan_plan *p, int *cap, sp_scan_kind kind, int level, int d)
{
    long half = 1L << d, full = 2 * half;
    for (long i = 0; i <= p->n - half; i += full) {
        long r = i + full - 1;
        push(p, cap, kind, level, (int)(i + half - 1), (int)(r < p->n ? r : p->n), (int)i);
    }
}

/* Which steps multiply (see sp_scan_step.product), the levels that do, and the longest
 * chain of products. Per element: ID (the identity), NONE (a[n] before the scan gives
 * it a value), or the depth of the product chain that made it (inputs: 0). */
enum { ID = -1, NONE = -2 };

static int combine(int x, int y, bool *product)   /* depth of x·y */
{
    *product = false;
    if (x == ID) return y;
    if (y == ID) return x;
    *product = true;
    return (x > y ? x : y) + 1;
}

static void mark_products(sp_scan_plan *p)
{
    int n = p->n, reg = ID, last_level = -1;
    int *d = sp_xcalloc((size_t)n + 1, sizeof *d);
    d[n] = NONE;
    p->work_levels = 0;
    for (int k = 0; k < p->nsteps; k++) {
        sp_scan_step *st = &p->steps[k];
        bool prod = false;
        switch (st->kind) {
        case SP_SCAN_UP:
            if (st->r != n) d[st->r] = combine(d[st->r], d[st->l], &prod);
            break;
        case SP_SCAN_IDENTITY: d[st->r] = ID; break;
        case SP_SCAN_CARRY: {
            if (st->l < 0) reg = ID;
            int old = d[st->r];
            d[st->r] = reg;
            if (st->r != n) reg = combine(old, reg, &prod);
            break;
        }
        case SP_SCAN_DOWN: {
            int T = d[st->l];
            d[st->l] = d[st->r];
            d[st->r] = combine(T, d[st->r], &prod);
            break;
        }
        }
        st->product = prod;
        if (prod && st->level != last_level) {
            p->work_levels++;
            last_level = st->level;
        }
    }
    p->chain_depth = 0;
    for (int i = 0; i <= n; i++)
        if (d[i] > p->chain_depth) p->chain_depth = d[i];
    free(d);
}

void sp_scan_plan_build(sp_scan_plan *p, int n, int up_levels)
{
    int full = sp_scan_full_levels(n);
    int D = up_levels < 0 || up_levels > full ? full : up_levels;
    int cap = 0, level = 0;
    *p = (sp_scan_plan){.n = n, .up_levels = D};
    for (int d = 0; d < D; d++, level++) sweep_level(p, &cap, SP_SCAN_UP, level, d);
    int top;
    if (D == full) {   /* Blelloch: the root becomes the identity */
        push(p, &cap, SP_SCAN_IDENTITY, level, -1, n, 0);
        top = full;
    } else {           /* hybrid: sequential exclusive scan over the block reductions */
        long block = 1L << D;
        int prev = -1;
        for (long r = block - 1;; r += block) {
            int rr = (int)(r < n ? r : n);
            push(p, &cap, SP_SCAN_CARRY, level++, prev, rr, prev + 1);
            prev = rr;
            if (rr == n) break;
        }
        top = D - 1;
        level--;
    }
    level++;
    for (int d = top; d >= 0; d--, level++) sweep_level(p, &cap, SP_SCAN_DOWN, level, d);
    p->nlevels = level;
    mark_products(p);
}

void sp_scan_plan_free(sp_scan_plan *p)
{
    free(p->steps);
    p->steps = NULL;
    p->nsteps = 0;
}
