/* layerpipe.c — LayerPipe's balanced partition ([L] §III-B/C, Algorithm 1) next to the
 * contiguous whole-layer partition of PipeDream.
 *
 * Each layer l has a fixed part Tfix = FP + G (and δ when δ is not movable) and a
 * flexible part Tflex = δ. δ_l computes ∂E/∂a_{l−1} = W_lᵀ δ_l ([L] Eq. 4): it is
 * parallel over channels, so it can be cut in two, δ′ staying with layer l and δ″ moved
 * to the processor of layer l+1, which already holds its input δ_l ([L] Fig. 5). The
 * algorithm walks the layers from the last to the first, filling processors up to the
 * target Tp = Ttot / Np and lending the remainder of a processor's time to the δ of the
 * layer before it.
 *
 * Deviations from the printed pseudo-code, each to make it do what the text says:
 *   - line 26–29: moving to a new processor also resets Tidle to Tp (the text: "we move
 *     to the next processor and assign the computation");
 *   - line 32: processors are counted from 0, so "too many" is pidx + 1 > Np;
 *   - a layer whose own work (δ′ + Tfix) or whose δ′ alone exceeds Tp cannot be placed at
 *     this Tp: the attempt fails and Tp is relaxed (line 34) instead of leaving δ′ on a
 *     processor of its own.
 * Step 1 (critical loops by minimum cycle mean) is not needed for a chain: its critical
 * loop runs through the δ's ([L] §III-C), which is what Tflex encodes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "schedulers/plan/schedule.h"

static bool fits(double need, double room) { return need <= room + 1e-9 * fmax(1.0, fabs(room)); }

/* ------------------------------------------------------------------------------------ */
/* Contiguous partition (PipeDream)                                                     */

/* best[k][i]: the smallest bottleneck splitting load[0..i) into k blocks. */
static double min_bottleneck(const double *prefix, int n, int parts)
{
    double *best = sp_xmalloc(sizeof(double) * (parts + 1) * (n + 1));
#define BEST(k, i) best[(k) * (n + 1) + (i)]
    for (int i = 0; i <= n; i++) BEST(0, i) = i == 0 ? 0 : INFINITY;
    for (int k = 1; k <= parts; k++)
        for (int i = 0; i <= n; i++) {
            BEST(k, i) = INFINITY;
            for (int j = k - 1; j < i; j++) {
                double v = fmax(BEST(k - 1, j), prefix[i] - prefix[j]);
                if (v < BEST(k, i)) BEST(k, i) = v;
            }
        }
    double r = BEST(parts, n);
#undef BEST
    free(best);
    return r;
}

double sp_partition_contiguous(const double *load, int n, int parts, int *owner)
{
    if (parts > n) parts = n;
    double *prefix = sp_xmalloc(sizeof(double) * (n + 1));
    prefix[0] = 0;
    for (int i = 0; i < n; i++) prefix[i + 1] = prefix[i] + load[i];
    double cap = min_bottleneck(prefix, n, parts);

    /* Among partitions under the bottleneck, the smallest Σ block², the most even one. */
    double *ss = sp_xmalloc(sizeof(double) * (parts + 1) * (n + 1));
    int *cut = sp_xmalloc(sizeof(int) * (parts + 1) * (n + 1));
#define SS(k, i) ss[(k) * (n + 1) + (i)]
#define CUT(k, i) cut[(k) * (n + 1) + (i)]
    for (int i = 0; i <= n; i++) SS(0, i) = i == 0 ? 0 : INFINITY;
    for (int k = 1; k <= parts; k++)
        for (int i = 0; i <= n; i++) {
            SS(k, i) = INFINITY;
            CUT(k, i) = -1;
            for (int j = k - 1; j < i; j++) {
                double block = prefix[i] - prefix[j];
                if (!fits(block, cap) || SS(k - 1, j) == INFINITY) continue;
                double v = SS(k - 1, j) + block * block;
                if (v < SS(k, i)) {
                    SS(k, i) = v;
                    CUT(k, i) = j;
                }
            }
        }
    for (int k = parts, i = n; k > 0; k--) {
        int j = CUT(k, i);
        if (j < 0) sp_fail("partition: no split of %d stages into %d parts fits (are the costs finite?)", n, parts);
        for (int l = j; l < i; l++) owner[l] = k - 1;
        i = j;
    }
#undef SS
#undef CUT
    free(ss);
    free(cut);
    free(prefix);
    return cap;
}

/* ------------------------------------------------------------------------------------ */
/* Algorithm 1                                                                          */

/* One pass of step 3 at target tp. Processors are numbered from the LAST layer (rp = 0),
 * as the algorithm walks the layers in reverse. Fills owner_rp[l] and, per layer, the
 * δ piece on the owner (keep) and the piece lent to the processor after it (moved,
 * on moved_rp[l]). Returns the processors used, or −1 when the pass fails. */
static int allocate(const double *flex, const double *fix, int L, double tp, int *owner_rp, double *keep,
                    double *moved, int *moved_rp)
{
    int rp = 0;
    double idle = tp;   /* line 13 */
    for (int l = L - 1; l >= 0; l--) {      /* line 14 */
        int delta_rp = rp;
        double on_delta_rp;
        bool split = false;
        if (fits(flex[l], idle)) {          /* lines 15–17: δ fits where we are */
            on_delta_rp = flex[l];
            idle -= flex[l];
        } else {                            /* lines 19–24: δ″ here, δ′ on the next one */
            on_delta_rp = fmax(idle, 0);
            rp++;
            idle = tp - (flex[l] - on_delta_rp);
            if (idle < 0) return -1;        /* δ′ alone exceeds Tp */
            split = true;
        }
        if (!fits(fix[l], idle)) {          /* lines 26–28 */
            if (split) return -1;           /* δ′ + Tfix exceed Tp */
            rp++;
            idle = tp;
            if (!fits(fix[l], idle)) return -1;
        }
        idle -= fix[l];                     /* lines 29–30 */
        owner_rp[l] = rp;
        if (delta_rp == rp) {               /* all of δ stayed with its layer */
            keep[l] = flex[l];
            moved[l] = 0;
            moved_rp[l] = -1;
        } else {                            /* δ″ lent to the processor of layer l+1 */
            keep[l] = flex[l] - on_delta_rp;
            moved[l] = on_delta_rp;
            moved_rp[l] = delta_rp;
        }
    }
    return rp + 1;
}

static void lp_alloc(sp_layerpipe *lp, int L, int np)
{
    memset(lp, 0, sizeof *lp);
    lp->layers = L;
    lp->processors = np;
    lp->assigned = sp_xcalloc(np, sizeof(double));
    lp->borrowed = sp_xcalloc(np, sizeof(double));
    lp->total = sp_xcalloc(np, sizeof(double));
    lp->owner = sp_xcalloc(L, sizeof(int));
    lp->delta_keep = sp_xcalloc(L, sizeof(double));
    lp->delta_moved = sp_xcalloc(L, sizeof(double));
    lp->moved_to = sp_xcalloc(L, sizeof(int));
    lp->contig_owner = sp_xcalloc(L, sizeof(int));
    lp->contig_load = sp_xcalloc(np, sizeof(double));
}

/* Renumber processors in layer order (processor 0 runs layer 0) and add up the loads. */
static void tally(sp_layerpipe *lp, const double *fix, int used)
{
    for (int l = 0; l < lp->layers; l++) {
        lp->owner[l] = used - 1 - lp->owner[l];
        if (lp->moved_to[l] >= 0) lp->moved_to[l] = used - 1 - lp->moved_to[l];
        lp->assigned[lp->owner[l]] += fix[l] + lp->delta_keep[l];
        if (lp->moved_to[l] >= 0) lp->borrowed[lp->moved_to[l]] += lp->delta_moved[l];
    }
    for (int p = 0; p < lp->processors; p++) {
        lp->total[p] = lp->assigned[p] + lp->borrowed[p];
        lp->bottleneck = fmax(lp->bottleneck, lp->total[p]);
    }
}

static void contiguous(sp_layerpipe *lp, const sp_costs *c)
{
    double *load = sp_xmalloc(sizeof(double) * c->stages);
    for (int l = 0; l < c->stages; l++) load[l] = c->fwd[l] + c->grad[l] + c->delta[l];
    lp->contig_bottleneck = sp_partition_contiguous(load, c->stages, lp->processors, lp->contig_owner);
    for (int l = 0; l < c->stages; l++) lp->contig_load[lp->contig_owner[l]] += load[l];
    free(load);
}

void sp_layerpipe_partition(const sp_costs *c, int np, double alpha, sp_layerpipe *lp)
{
    if (np < 1) sp_fail("--processors %d: expected >= 1", np);
    if (!(alpha > 1)) sp_fail("--alpha %g: expected > 1 (the relaxation factor of Tp)", alpha);
    int L = c->stages;
    lp_alloc(lp, L, np);
    double *flex = sp_xmalloc(sizeof(double) * L), *fix = sp_xmalloc(sizeof(double) * L);
    double ttot = 0;
    for (int l = 0; l < L; l++) {   /* line 5: profile → Tfix, Tflex */
        flex[l] = c->movable[l] ? c->delta[l] : 0;
        fix[l] = c->fwd[l] + c->grad[l] + (c->movable[l] ? 0 : c->delta[l]);
        ttot += flex[l] + fix[l];
    }
    double tp = ttot / np;          /* lines 6–8 */
    int used;
    while ((used = allocate(flex, fix, L, tp, lp->owner, lp->delta_keep, lp->delta_moved, lp->moved_to)) < 0 ||
           used > np) {             /* lines 32–34 */
        tp *= alpha;
        lp->relaxations++;
    }
    lp->used = used;
    lp->target = tp;
    tally(lp, fix, used);
    contiguous(lp, c);
    free(flex);
    free(fix);
}

void sp_layerpipe_free(sp_layerpipe *lp)
{
    free(lp->assigned);
    free(lp->borrowed);
    free(lp->total);
    free(lp->owner);
    free(lp->delta_keep);
    free(lp->delta_moved);
    free(lp->moved_to);
    free(lp->contig_owner);
    free(lp->contig_load);
    memset(lp, 0, sizeof *lp);
}

static void print_row(FILE *out, const char *name, const double *v, int n)
{
    fprintf(out, "%-22s", name);
    for (int p = 0; p < n; p++) fprintf(out, " %11.3e", v[p]);
    fputc('\n', out);
}

/* [L] Table III: per processor, PipeDream's load next to LayerPipe's assigned,
 * borrowed and total time; then where every layer's work went. */
void sp_layerpipe_print(FILE *out, const sp_costs *c, const sp_layerpipe *lp)
{
    fprintf(out, "LayerPipe (Algorithm 1): %d layers, %d processors, Tp = %.4g %s (%d relaxations)\n",
            lp->layers, lp->processors, lp->target, c->unit, lp->relaxations);
    fprintf(out, "%-22s", "processor");
    for (int p = 0; p < lp->processors; p++) fprintf(out, " %11d", p + 1);
    fputc('\n', out);
    print_row(out, "PipeDream (contiguous)", lp->contig_load, lp->processors);
    print_row(out, "LayerPipe assigned", lp->assigned, lp->processors);
    print_row(out, "LayerPipe borrowed", lp->borrowed, lp->processors);
    print_row(out, "LayerPipe total", lp->total, lp->processors);
    double gain = 1 - lp->bottleneck / lp->contig_bottleneck;
    fprintf(out, "bottleneck: PipeDream %.4g, LayerPipe %.4g (%.1f%% %s time per step)\n", lp->contig_bottleneck,
            lp->bottleneck, 100 * fabs(gain), gain >= 0 ? "less" : "more");
    fprintf(out, "%-12s %5s %10s %11s %11s %11s\n", "layer", "proc", "PipeDream", "fixed", "delta'", "delta''");
    for (int l = 0; l < lp->layers; l++) {
        double fixed = c->fwd[l] + c->grad[l] + (c->movable[l] ? 0 : c->delta[l]);
        fprintf(out, "%-12s %5d %10d %11.3e %11.3e %11.3e", c->name[l], lp->owner[l] + 1, lp->contig_owner[l] + 1,
                fixed, lp->delta_keep[l], lp->delta_moved[l]);
        if (lp->moved_to[l] >= 0) fprintf(out, " -> processor %d", lp->moved_to[l] + 1);
        fputc('\n', out);
    }
}
