/* scan.h — the modified Blelloch scan of BPPSA (Algorithm 1), as a plan of steps.
 *
 * Input  a = [a_0, a_1, ..., a_n]     (a_0 = ∇x_n l, a_i = Jᵀ_{n−i+1})
 * Output a = [I, a_0, a_0⋄a_1, ..., a_0⋄…⋄a_{n−1}]   (exclusive scan)
 * with the non-commutative operator A ⋄ B = B·A. The plan says, level by level, which
 * pairs to combine; every step of one level is independent (run in parallel). Whoever
 * runs the plan decides what an element is and where it lives: the backward engine
 * (schedulers/backward/bppsa.c: a vector, CSR or dense matrix per sample, all in one
 * process) and the executor's scan across ranks (schedulers/exec/exec_bppsa_blelloch.c:
 * each element on its own rank, a step a message between two ranks).
 *
 * Hybrid depth (§5.3 of the paper): up-sweep only `up_levels` levels, finish with a
 * sequential exclusive scan over the block reductions left, then down-sweep those
 * levels. up_levels = 0 is linear back-propagation; up_levels >= sp_scan_full_levels(n)
 * is the full Blelloch scan. */
#ifndef SP_SCAN_H
#define SP_SCAN_H

#include <stdbool.h>

typedef enum {
    SP_SCAN_UP,         /* a[r] ← a[l] ⋄ a[r] = a[r]·a[l]                        */
    SP_SCAN_IDENTITY,   /* a[r] ← I                                              */
    SP_SCAN_CARRY,      /* sequential middle: a[r] ← prefix; prefix ← a_old[r]·prefix,
                         * (l = −1 marks the first block: prefix starts as I)      */
    SP_SCAN_DOWN,       /* T ← a[l]; a[l] ← a[r]; a[r] ← a[r] ⋄ T = T·a[r]        */
} sp_scan_kind;

typedef struct sp_scan_step {
    sp_scan_kind kind;
    int level;          /* steps of the same level are independent               */
    int l, r;
    /* The block the step's pair spans, a[lo..r] of the input: before an up or down step
     * a[l] holds the reduction of lo..l (an up step's a[r] that of l+1..r), before a
     * down step a[r] the exclusive prefix of lo (I when lo = 0); a carry's block is
     * l+1..r, the identity's 0..n. */
    int lo;
    /* true when the step multiplies two operands neither of which is the identity and
     * its result is read later; false for the identity seed, for moves (a product
     * with I is its other operand: a pointer copy) and for results written into a[n]
     * during the up-sweep or the carry (overwritten before anything reads them). */
    bool product;
} sp_scan_step;

typedef struct sp_scan_plan {
    int n;              /* a has n + 1 elements                                  */
    int up_levels;      /* levels actually up-swept                              */
    int nlevels;        /* levels of the plan, moves and the identity seed included */
    /* The "sequential levels" figure: levels that contain at least one product. The
     * levels run one after another (each waits for the one before), so this is the
     * length of the dependency chain the executor walks. Closed form (docs/BPPSA.md):
     *   K = 0 .. F−1 (hybrid):  2K + ⌊n / 2^K⌋ − 1        (K = 0: n − 1, linear BP)
     *   full scan (K ≥ F):      F + #{d ≥ 0 : 3·2^d ≤ n}  with F = ⌊log2 n⌋        */
    int work_levels;
    /* Longest chain of products through the step graph (as-soon-as-possible
     * scheduling could reach it); <= work_levels, equal when n + 1 is a power of 2. */
    int chain_depth;
    int nsteps;
    sp_scan_step *steps;   /* ordered by level                                   */
} sp_scan_plan;

/* ⌈log2 n⌉ (0 for n <= 1): the levels of a scan over n elements in Hillis–Steele's
 * pattern, and the depth of the full scan's tree over n elements. */
int sp_scan_ceil_log2(int n);
/* ⌈log2(n + 1)⌉ − 1: the up-sweep depth of the full scan (0 for n = 1). */
int sp_scan_full_levels(int n);
/* up_levels < 0 means full. */
void sp_scan_plan_build(sp_scan_plan *p, int n, int up_levels);
void sp_scan_plan_free(sp_scan_plan *p);

#endif
