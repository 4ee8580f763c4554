/* test_scan.c — Algorithm 1's indexing for every n (including n + 1 not a power of
 * two) and every hybrid depth, executed over 2×2 matrices mod a prime: an associative,
 * non-commutative operator with exact arithmetic, so any misplaced or mis-ordered
 * operand shows up. Reference: the sequential exclusive scan. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "schedulers/scan/scan.h"

#define P 1000003ull

typedef struct { uint64_t m[4]; } mat;

static mat mul(mat a, mat b)   /* a·b mod P */
{
    mat c;
    c.m[0] = (a.m[0] * b.m[0] + a.m[1] * b.m[2]) % P;
    c.m[1] = (a.m[0] * b.m[1] + a.m[1] * b.m[3]) % P;
    c.m[2] = (a.m[2] * b.m[0] + a.m[3] * b.m[2]) % P;
    c.m[3] = (a.m[2] * b.m[1] + a.m[3] * b.m[3]) % P;
    return c;
}
static const mat I = {{1, 0, 0, 1}};
/* A ⋄ B = B·A */
static mat diamond(mat a, mat b) { return mul(b, a); }

static bool is_id(mat a) { return memcmp(&a, &I, sizeof a) == 0; }

/* The inputs in[lo..hi] reduced, in[lo] ⋄ … ⋄ in[hi] (I when hi < lo). */
static mat reduce(const mat *in, int lo, int hi)
{
    mat acc = I;
    for (int i = lo; i <= hi; i++) acc = diamond(acc, in[i]);
    return acc;
}

static bool eq(mat a, mat b) { return memcmp(&a, &b, sizeof a) == 0; }

/* What a step's block lo says the operands hold before it (scan.h, sp_scan_step.lo):
 * an up or down step's a[l] the reduction of lo..l, an up step's a[r] that of l+1..r
 * (a[n] aside: it holds nothing yet), a down step's a[r] the exclusive prefix of lo, a
 * carry's a[r] the reduction of its block l+1..r, the identity's block everything. */
static void check_block(const sp_scan_plan *p, const sp_scan_step *st, const mat *a, const mat *in)
{
    int n = p->n;
    switch (st->kind) {
    case SP_SCAN_UP:
        cr_assert(eq(a[st->l], reduce(in, st->lo, st->l)), "n=%d: up %d..%d: a[l] is not lo=%d..l", n, st->l, st->r, st->lo);
        if (st->r != n) cr_assert(eq(a[st->r], reduce(in, st->l + 1, st->r)), "n=%d: up %d..%d: a[r]", n, st->l, st->r);
        break;
    case SP_SCAN_IDENTITY: cr_assert(st->lo == 0 && st->r == n, "n=%d: the identity's block is 0..n", n); break;
    case SP_SCAN_CARRY:
        cr_assert_eq(st->lo, st->l + 1, "n=%d: carry into %d", n, st->r);
        if (st->r != n) cr_assert(eq(a[st->r], reduce(in, st->lo, st->r)), "n=%d: carry into %d", n, st->r);
        break;
    case SP_SCAN_DOWN:
        cr_assert(eq(a[st->l], reduce(in, st->lo, st->l)), "n=%d: down %d..%d: a[l] is not lo=%d..l", n, st->l, st->r,
                  st->lo);
        cr_assert(eq(a[st->r], reduce(in, 0, st->lo - 1)), "n=%d: down %d..%d: a[r] is not the prefix of lo=%d", n,
                  st->l, st->r, st->lo);
        break;
    }
}

/* Runs the plan; checks each step's `product` flag against the values: a product has
 * two operands that are not the identity (random matrices never are) and is not a
 * write into a[n] before the down-sweep (the up-sweep's last pair, the last carry);
 * and each step's block against the operands (check_block). */
static void run_plan(const sp_scan_plan *p, mat *a, const mat *in)
{
    mat prefix = I;
    for (int s = 0; s < p->nsteps; s++) {
        const sp_scan_step *st = &p->steps[s];
        if (s > 0) cr_assert_geq(st->level, p->steps[s - 1].level, "steps ordered by level");
        check_block(p, st, a, in);
        bool real = false;
        switch (st->kind) {
        case SP_SCAN_UP:
            real = st->r != p->n && !is_id(a[st->l]) && !is_id(a[st->r]);
            a[st->r] = diamond(a[st->l], a[st->r]);
            break;
        case SP_SCAN_IDENTITY: a[st->r] = I; break;
        case SP_SCAN_CARRY: {
            if (st->l < 0) prefix = I;
            mat t = a[st->r];
            real = st->r != p->n && !is_id(prefix) && !is_id(t);
            a[st->r] = prefix;
            prefix = diamond(prefix, t);
            break;
        }
        case SP_SCAN_DOWN: {
            mat t = a[st->l];
            real = !is_id(t) && !is_id(a[st->r]);
            a[st->l] = a[st->r];
            a[st->r] = diamond(a[st->r], t);
            break;
        }
        }
        cr_assert_eq(st->product, real, "n=%d up_levels=%d step %d (level %d, %d..%d): product flag %d, values say %d",
                     p->n, p->up_levels, s, st->level, st->l, st->r, st->product, real);
    }
}

static void check_n(int n, int up_levels)
{
    mat a[200], in[200], ref[200];
    uint64_t seed = 12345 + (uint64_t)n;
    for (int i = 0; i <= n; i++)
        for (int k = 0; k < 4; k++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            a[i].m[k] = (seed >> 33) % P;
        }
    memcpy(in, a, sizeof(mat) * ((size_t)n + 1));
    ref[0] = I;
    for (int i = 1; i <= n; i++) ref[i] = diamond(ref[i - 1], a[i - 1]);
    sp_scan_plan p;
    sp_scan_plan_build(&p, n, up_levels);
    /* a[n] is never read before it is replaced: poison it to prove it. */
    a[n] = (mat){{7, 7, 7, 7}};
    run_plan(&p, a, in);
    for (int i = 0; i <= n; i++)
        cr_assert(memcmp(&a[i], &ref[i], sizeof(mat)) == 0, "n=%d up_levels=%d: element %d wrong", n, up_levels, i);
    sp_scan_plan_free(&p);
}

Test(scan, full_blelloch_every_n_up_to_130)
{
    for (int n = 1; n <= 130; n++) check_n(n, -1);
}

Test(scan, hybrid_every_depth)
{
    for (int n = 1; n <= 65; n++)
        for (int k = 0; k <= sp_scan_full_levels(n) + 1; k++) check_n(n, k);
}

Test(scan, full_levels_is_log)
{
    int want[] = {0, 0, 1, 2, 2, 3, 3, 3, 3, 4};   /* ⌈log2 n⌉, n = 0 … 9 */
    for (int n = 0; n < 10; n++) cr_assert_eq(sp_scan_ceil_log2(n), want[n], "ceil_log2(%d)", n);
    for (int n = 0; n <= 130; n++) cr_assert_eq(sp_scan_full_levels(n), sp_scan_ceil_log2(n + 1) - 1, "n=%d", n);
    cr_assert_eq(sp_scan_full_levels(1), 0);
    cr_assert_eq(sp_scan_full_levels(3), 1);
    cr_assert_eq(sp_scan_full_levels(4), 2);
    cr_assert_eq(sp_scan_full_levels(7), 2);
    cr_assert_eq(sp_scan_full_levels(8), 3);
    sp_scan_plan p;
    sp_scan_plan_build(&p, 1023, -1);   /* n + 1 = 1024: 9 up + identity + 10 down */
    cr_assert_eq(p.nlevels, 20);
    sp_scan_plan_free(&p);
    sp_scan_plan_build(&p, 10, 0);      /* depth 0 = linear BP: one carry per element */
    cr_assert_eq(p.nlevels, 11);
    sp_scan_plan_free(&p);
}

/* The "sequential levels" figure against the closed form docs/BPPSA.md states:
 *   F = ⌊log2 n⌋;  K < F: 2K + ⌊n / 2^K⌋ − 1;  full: F + #{d ≥ 0 : 3·2^d ≤ n}. */
static int closed_form_levels(int n, int K)
{
    int F = 0;
    while ((2L << F) <= n) F++;
    if (K >= 0 && K < F) return 2 * K + n / (1 << K) - 1;
    int down = 0;
    for (long d = 0; 3L << d <= n; d++) down++;
    return F + down;
}

Test(scan, sequential_levels_closed_form)
{
    for (int n = 1; n <= 64; n++) {
        cr_assert_eq(sp_scan_full_levels(n), (int)floor(log2(n)), "n=%d", n);
        for (int K = -1; K <= sp_scan_full_levels(n) + 2; K++) {
            sp_scan_plan p;
            sp_scan_plan_build(&p, n, K);
            cr_assert_eq(p.work_levels, closed_form_levels(n, K), "n=%d K=%d: %d levels, closed form %d", n, K,
                         p.work_levels, closed_form_levels(n, K));
            cr_assert_leq(p.chain_depth, p.work_levels, "n=%d K=%d", n, K);
            if (K == 0) cr_assert_eq(p.work_levels, n - 1, "n=%d: K = 0 is linear BP's n - 1 products", n);
            if (K < 0 && ((n + 1) & n) == 0)
                cr_assert_eq(p.chain_depth, p.work_levels, "n=%d: n + 1 a power of two", n);
            sp_scan_plan_free(&p);
        }
    }
    /* the examples the issue and docs name: n = 7 full → 4 (2 up + 2 down), n = 11 → 5 */
    sp_scan_plan p;
    sp_scan_plan_build(&p, 7, -1);
    cr_assert_eq(p.work_levels, 4);
    sp_scan_plan_free(&p);
    sp_scan_plan_build(&p, 11, -1);
    cr_assert_eq(p.work_levels, 5);
    sp_scan_plan_free(&p);
    sp_scan_plan_build(&p, 1023, -1);
    cr_assert_eq(p.work_levels, 18);
    sp_scan_plan_free(&p);
}
