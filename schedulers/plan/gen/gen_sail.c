/* gen_sail.c — the list heuristics of the zero-bubble papers' published code, rebuilt
 * (gen_sail.h): [ZB]'s one-chunk heuristic, its ZB-V heuristic, and [CM]'s V-Half and
 * V-Min building blocks. Written from the algorithms' description; every variant that
 * cannot place an action returns NULL instead of a partial list.
 *
 * [ZB] Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024; code: the scheduler
 *      folder of sail-sg/zero-bubble-pipeline-parallelism (zb.py, zbv.py).
 * [CM] Qi et al., "Pipeline Parallelism with Controllable Memory", NeurIPS 2024; code:
 *      the same folder, zbv_greedy.py. */
#include "schedulers/plan/gen/gen_sail.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "schedulers/plan/gen/gen_v.h"

/* ---- shared --------------------------------------------------------------------------- */

static double cost_of(const sp_chunk_costs *k, sp_act_type t, int c)
{
    if (!k) return 1;
    return t == SP_ACT_F ? k->f[c] : t == SP_ACT_I ? k->i[c] : k->w[c];
}

static double act_of(const sp_chunk_costs *k, int c) { return k && k->act ? k->act[c] : 1; }

void sp_gen_pick(sp_gen_best *bs, sp_actions *cand, const sp_chunk_costs *costs, double limit, int ties)
{
    if (!cand) return;
    sp_actions_sim s;
    if (sp_actions_simulate(cand, costs, &s) != SP_OK) {
        sp_clear_error();
        sp_actions_free(cand);
        return;
    }
    double peak = 0;
    for (int r = 0; r < cand->ranks; r++) peak = fmax(peak, s.peak_act[r]);
    double lat = s.latency;
    sp_actions_sim_free(&s);
    if (peak > limit + 1e-9 ||
        (bs->a && (lat > bs->latency + 1e-9 || (fabs(lat - bs->latency) <= 1e-9 && (!ties || peak >= bs->peak - 1e-9))))) {
        sp_actions_free(cand);
        return;
    }
    sp_actions_free(bs->a);
    *bs = (sp_gen_best){cand, lat, peak};
}

/* ---- [ZB]'s one-chunk heuristic --------------------------------------------------------- */

/* Its state: per rank the count of F, I, W placed, the time it is busy until, what it
 * holds and the bubble it has taken; per action its finish time (0 until placed, as the
 * heuristic reads it). */
typedef struct zbs {
    int S, M;
    const sp_chunk_costs *k;
    double comm, maxmem;
    int *n[3];
    double *e, *m, *bub, *t[3];
    sp_actions *a;
    int **list, *len;
    int bad;
} zbs;

static double zb_maxbub(const zbs *z)
{
    double b = 0;
    for (int j = 0; j < z->S; j++) b = fmax(b, z->bub[j]);
    return b;
}

static double zb_mem(const zbs *z, int type, int j)
{
    double u = act_of(z->k, j);
    return type == 0 ? u : type == 1 ? 0 : -u;
}

static void zb_put(zbs *z, int j, int type)
{
    int b = z->n[type][j];
    if (b >= z->M) {
        z->bad = 1;
        return;
    }
    sp_act_type at = (sp_act_type)type;
    double c = cost_of(z->k, at, j), tmp = z->e[j] + c, nb = tmp;
    if (j > 0 && type == 0) tmp = fmax(tmp, z->t[0][(j - 1) * z->M + b] + z->comm + c);
    if (j < z->S - 1 && type == 1) tmp = fmax(tmp, z->t[1][(j + 1) * z->M + b] + z->comm + c);
    if (z->n[0][j] > 0) z->bub[j] += tmp - nb;
    z->e[j] = tmp;
    z->t[type][j * z->M + b] = tmp;
    z->m[j] += zb_mem(z, type, j);
    z->n[type][j]++;
    z->list[j][z->len[j]++] = type * z->M + b;
}

/* W's before the next action of rank j, whose input arrives at `arrive`. */
static void zb_fill(zbs *z, int j, double arrive, int no_bubble_greedy)
{
    while (z->n[2][j] < z->n[1][j] && z->e[j] + cost_of(z->k, SP_ACT_W, j) <= arrive) zb_put(z, j, 2);
    if (z->n[2][j] < z->n[1][j] && z->e[j] < arrive) {
        if (arrive - z->e[j] <= zb_maxbub(z) - z->bub[j]) {
            if (no_bubble_greedy) zb_put(z, j, 2);
        } else zb_put(z, j, 2);
    }
}

sp_actions *sp_sail_zb(const sp_pp_params *p, double max_mem, int variant)
{
    int S = p->ranks, M = p->micro;
    int allow_bubble = !(variant & 1), prioritize_b = !(variant & 2), no_bubble_greedy = !(variant & 4);
    zbs z;
    memset(&z, 0, sizeof z);
    z.S = S, z.M = M, z.k = p->costs, z.comm = p->costs ? p->costs->transfer : 0, z.maxmem = max_mem;
    for (int k = 0; k < 3; k++) {
        z.n[k] = sp_xcalloc((size_t)S, sizeof(int));
        z.t[k] = sp_xcalloc((size_t)S * M, sizeof(double));
    }
    z.e = sp_xcalloc((size_t)S, sizeof(double));
    z.m = sp_xcalloc((size_t)S, sizeof(double));
    z.bub = sp_xcalloc((size_t)S, sizeof(double));
    z.len = sp_xcalloc((size_t)S, sizeof(int));
    z.list = sp_xmalloc(sizeof(int *) * (size_t)S);
    int *freq = sp_xcalloc((size_t)S, sizeof(int));
    double *limit = sp_xmalloc(sizeof(double) * (size_t)S);
    for (int j = 0; j < S; j++) {
        z.list[j] = sp_xmalloc(sizeof(int) * 3 * (size_t)M);
        limit[j] = max_mem > 0 ? max_mem : act_of(z.k, j) * M * 3;
    }
#define CF(j) cost_of(z.k, SP_ACT_F, j)
#define CB(j) cost_of(z.k, SP_ACT_I, j)
    for (int i = 0; i < M && !z.bad; i++) {
        memset(freq, 0, sizeof(int) * (size_t)S);
        if (i == 0) {
            for (int j = 0; j < S; j++) zb_put(&z, j, 0);
            /* Warm-up: each rank's forwards until the first backward comes back. */
            double last = 0;
            for (int j = S - 1; j >= 0; j--) {
                if (j == S - 1) {
                    last = z.t[0][j * M] + CB(j);
                    continue;
                }
                double mem = z.m[j], cost = z.e[j];
                while (z.n[0][j] + freq[j] < M && mem + zb_mem(&z, 0, j) <= limit[j]) {
                    if (allow_bubble ? cost + CF(j) > last + z.comm : cost >= last + z.comm) break;
                    mem += zb_mem(&z, 0, j);
                    cost += CF(j);
                    freq[j]++;
                }
                last = fmax(cost, last + z.comm) + CB(j);
            }
            for (int j = 1; j < S; j++)
                while (freq[j] > 0 && freq[j] >= freq[j - 1] && z.n[0][j] + freq[j] < M) freq[j]--;
            for (int j = 0; j < S; j++)
                for (int k = 0; k < freq[j]; k++) zb_put(&z, j, 0);
            for (int j = S - 1; j >= 0; j--) zb_put(&z, j, 1);
            continue;
        }
        for (int j = 0; j < S; j++) {
            if (z.n[0][j] >= M) continue;
            if (j + 1 < S && z.n[0][j] >= z.n[0][j + 1] + 2 && prioritize_b) {
                double next = z.e[j + 1] + CF(j + 1) + CB(j + 1) + z.comm;
                if (z.e[j] >= next) continue;
                double wc = 0, mw = z.m[j] + zb_mem(&z, 0, j);
                for (int c = 0; mw > limit[j] && z.n[2][j] + c < z.n[1][j]; c++) {
                    wc += cost_of(z.k, SP_ACT_W, j);
                    mw += zb_mem(&z, 2, j);
                }
                if (z.e[j] + CF(j) + wc <= next) {
                    freq[j] = 1;
                    continue;
                }
                if (next - z.e[j] <= zb_maxbub(&z) - z.bub[j]) continue;
            }
            freq[j] = 1;
        }
        for (int j = S - 2; j >= 0; j--) freq[j] = freq[j] < freq[j + 1] ? freq[j] : freq[j + 1];
        for (int j = 0; j < S && !z.bad; j++) {
            if (!freq[j]) continue;
            while (z.m[j] + zb_mem(&z, 0, j) > limit[j] && !z.bad) {
                if (z.n[2][j] >= z.n[1][j]) z.bad = 1;
                else zb_put(&z, j, 2);
            }
            if (j > 0) zb_fill(&z, j, z.t[0][(j - 1) * M + z.n[0][j]] + z.comm, no_bubble_greedy);
            zb_put(&z, j, 0);
        }
        for (int j = S - 1; j >= 0 && !z.bad; j--) {
            while (z.m[j] > limit[j] && !z.bad) {
                if (z.n[2][j] >= z.n[1][j]) z.bad = 1;
                else zb_put(&z, j, 2);
            }
            if (j + 1 < S) zb_fill(&z, j, z.t[1][(j + 1) * M + i] + z.comm, no_bubble_greedy);
            if (j == 0 && z.n[0][j] == M)
                while (z.n[2][j] < z.n[1][j]) zb_put(&z, j, 2);
            zb_put(&z, j, 1);
        }
    }
#undef CF
#undef CB
    for (int j = 0; j < S && !z.bad; j++)
        while (z.n[2][j] < M && !z.bad) zb_put(&z, j, 2);
    sp_actions *a = NULL;
    if (!z.bad) {
        a = sp_actions_new(S, S, M, 3 * S * M);
        for (int j = 0; j < S; j++)
            for (int k = 0; k < z.len[j]; k++)
                sp_actions_push(a, j, sp_gen_act(j, (sp_act_type)(z.list[j][k] / M), z.list[j][k] % M));
    }
    for (int k = 0; k < 3; k++) {
        free(z.n[k]);
        free(z.t[k]);
    }
    for (int j = 0; j < S; j++) free(z.list[j]);
    free(z.list);
    free(z.len);
    free(z.e);
    free(z.m);
    free(z.bub);
    free(freq);
    free(limit);
    return a;
}

/* ---- [ZB]'s ZB-V heuristic -------------------------------------------------------------- */

/* Kinds by (category, side): category 0 F, 1 I, 2 W; side 0 is the chunk the rank holds on
 * the way down for F, and for I and W the one on the way back (the order in which a rank
 * meets them), side 1 the other one. */
typedef struct zvs {
    int S, M;
    const sp_chunk_costs *k;
    double comm, maxmem;
    int *count;                 /* [S][6]: cat * 2 + side                         */
    double *end;                /* [3][2][S][M]; −1 until placed                   */
    double *cur, *mem, *bub;
    const double *approved;     /* NULL: none                                      */
    double max_approved;
    int **wq, *wh, *wt;         /* pending W's: side, micro                        */
    int **list, *len;
    int bad;
} zvs;

static int zv_id(const zvs *z, int cat, int side, int s, int b) { return ((cat * 2 + side) * z->S + s) * z->M + b; }

/* The chunk of (cat, side) on rank s, in the V's numbering. */
static int zv_chunk(const zvs *z, int cat, int side, int s)
{
    int down = cat == 0 ? side == 0 : side == 1;
    return down ? s : 2 * z->S - 1 - s;
}

static double zv_cost(const zvs *z, int cat, int side, int s)
{
    return cost_of(z->k, (sp_act_type)cat, zv_chunk(z, cat, side, s));
}

static double zv_maxbub(const zvs *z, int s)
{
    double b = 0;
    for (int j = 0; j < z->S; j++) b = fmax(b, z->bub[j]);
    if (s >= 0 && z->approved) b = fmax(b, z->max_approved - z->approved[s]);
    return b;
}

/* The finish time the heuristic reads for id (−1: unplaced; id −1 reads the last one). */
static double zv_end(const zvs *z, int id) { return z->end[id >= 0 ? id : 6 * z->S * z->M - 1]; }

static void zv_put(zvs *z, int cat, int side, int s)
{
    if (z->bad) return;
    int b = z->count[s * 6 + cat * 2 + side];
    double c = zv_cost(z, cat, side, s), tmp = z->cur[s] + c, nb = tmp;
    double dm = cat == 0 ? 1 : cat == 1 ? 0 : -1;
    if (b >= z->M || z->mem[s] + dm > z->maxmem + 1e-9) {
        z->bad = 1;
        return;
    }
    if (cat > 0 || side > 0) {
        int prev = cat < 2 ? zv_id(z, (cat * 2 + side - 1) / 2, (cat * 2 + side - 1) % 2, s, b) : zv_id(z, 1, side, s, b);
        if (z->end[prev] < 0) {
            z->bad = 1;
            return;
        }
    }
    int fa = -1;
    if (side == 1 && cat < 2 && s < z->S - 1) fa = zv_id(z, cat, 1, s + 1, b);
    if (side == 0 && cat < 2 && s > 0) fa = zv_id(z, cat, 0, s - 1, b);
    if (fa >= 0) {
        if (z->end[fa] < 0) {
            z->bad = 1;
            return;
        }
        tmp = fmax(tmp, z->end[fa] + z->comm + c);
    }
    if (z->count[s * 6] > 0) z->bub[s] += tmp - nb;
    z->end[zv_id(z, cat, side, s, b)] = tmp;
    z->cur[s] = tmp;
    z->mem[s] += dm;
    z->list[s][z->len[s]++] = (cat * 2 + side) * z->M + b;
    if (cat == 1) {
        z->wq[s][z->wt[s]++] = side;
        z->wq[s][z->wt[s]++] = b;
    }
    z->count[s * 6 + cat * 2 + side]++;
}

static void zv_put_w(zvs *z, int s)
{
    if (z->wh[s] >= z->wt[s]) {
        z->bad = 1;
        return;
    }
    int side = z->wq[s][z->wh[s]];
    z->wh[s] += 2;
    zv_put(z, 2, side, s);
}

static int zv_pending(const zvs *z, int s) { return z->wh[s] < z->wt[s]; }

/* W's before an action on s whose input is fa (−1: none): into the wait while they fit,
 * then one more when the wait is longer than the bubble s may still take. */
static void zv_fill(zvs *z, int s, int fa, int fill)
{
    double cw = cost_of(z->k, SP_ACT_W, 0);
    while (!z->bad && zv_pending(z, s) && fa >= 0 && zv_end(z, fa) + z->comm >= z->cur[s] + cw) zv_put_w(z, s);
    if (!z->bad && zv_pending(z, s) && zv_end(z, fa) + z->comm - z->cur[s] > zv_maxbub(z, s) - z->bub[s] && fill)
        zv_put_w(z, s);
}

static int CNT(const zvs *z, int s, int k) { return z->count[s * 6 + k]; }

/* One pass; returns its largest bubble (z->bad when it cannot place everything). */
static double zv_try(zvs *z, int fill_f, int fill_b)
{
    int S = z->S, M = z->M;
    double cf = cost_of(z->k, SP_ACT_F, 0), ci = cost_of(z->k, SP_ACT_I, 0);
    for (int i = 0; i < S; i++) zv_put(z, 0, 0, i);
    for (int i = S - 1; i >= 0 && !z->bad; i--) {
        if (i == S - 1) {
            zv_put(z, 0, 1, i);
            continue;
        }
        double until = z->end[zv_id(z, 0, 1, i + 1, 0)] + z->comm;
        while (!z->bad && z->mem[i] + 2 + 2 * i <= z->maxmem + 1e-9 && z->cur[i] + cf <= until && CNT(z, i, 0) < M)
            for (int j = 0; j <= i; j++) zv_put(z, 0, 0, j);
        zv_put(z, 0, 1, i);
    }
    (void)ci;
    int side = 0;
    for (int i = 1; i < S && !z->bad; i++)
        for (int guard = 0; CNT(z, i, 0) + CNT(z, i, 1) < CNT(z, i - 1, 0) + CNT(z, i - 1, 1) ||
                            (CNT(z, i, 1) <= CNT(z, i - 1, 1) && CNT(z, i - 1, 1) < M);
             guard++) {
            if (guard > 4 * M + 4 || z->bad) {
                z->bad = 1;
                break;
            }
            for (int j = S - 1; j >= i; j--)
                if (CNT(z, j, side) < M) zv_put(z, 0, side, j);
            side = 1 - side;
        }
    int *order = sp_xmalloc(sizeof(int) * 2 * (size_t)S);
    for (int step = 0; step < 2 * M && !z->bad; step++) {
        for (int i = 0; i < S; i++)
            while (!z->bad && z->mem[i] > z->maxmem + 1e-9) zv_put_w(z, i);
        /* The ranks whose next I is on the side 1 (going up from the last rank first),
         * then those on side 0 (from rank 0). */
        int n = 0;
        for (int pass = 0; pass < 2; pass++)
            for (int q = 0; q < S; q++) {
                int i = pass == 0 ? S - 1 - q : q, one;
                if (CNT(z, i, 3) >= CNT(z, i, 2)) one = 0;
                else if (i == S - 1) one = 1;
                else one = z->end[zv_id(z, 1, 1, i + 1, CNT(z, i, 3))] >= 0 || CNT(z, i, 2) >= M;
                if (one == (pass == 0)) order[n++] = i * 2 + one;
            }
        for (int k = 0; k < n && !z->bad; k++) {
            int i = order[k] / 2, sd = order[k] % 2, fa = -1;
            if (sd == 1 && i < S - 1) fa = zv_id(z, 1, 1, i + 1, CNT(z, i, 3));
            if (sd == 0 && i > 0) fa = zv_id(z, 1, 0, i - 1, CNT(z, i, 2));
            zv_fill(z, i, fa, sd == 1 || fill_b);
            zv_put(z, 1, sd, i);
        }
        for (int i = 0; i < S && !z->bad; i++) {
            if (CNT(z, i, 1) >= M) continue;
            int item = -1;
            if (CNT(z, i, 1) >= CNT(z, i, 0)) item = 0;
            else if (i == S - 1) item = 1;
            else if (z->end[zv_id(z, 0, 1, i + 1, CNT(z, i, 1))] >= 0) item = 1;
            else if (CNT(z, i, 0) < M && (i == 0 || z->end[zv_id(z, 0, 0, i - 1, CNT(z, i, 0))] >= 0)) item = 0;
            if (item < 0) continue;
            while (!z->bad && z->mem[i] + 1 > z->maxmem + 1e-9) zv_put_w(z, i);
            int fa = -1;
            if (item == 0 && i > 0) fa = zv_id(z, 0, 0, i - 1, CNT(z, i, 0));
            if (item == 1 && i < S - 1) fa = zv_id(z, 0, 1, i + 1, CNT(z, i, 1));
            zv_fill(z, i, fa, fill_f);
            zv_put(z, 0, item, i);
        }
    }
    free(order);
    for (int i = 0; i < S && !z->bad; i++)
        while (!z->bad && zv_pending(z, i)) zv_put_w(z, i);
    return zv_maxbub(z, -1);
}

static void zv_init(zvs *z, const sp_pp_params *p, const double *approved)
{
    int S = p->ranks, M = p->micro;
    memset(z, 0, sizeof *z);
    z->S = S, z->M = M, z->k = p->costs, z->comm = p->costs ? p->costs->transfer : 0, z->maxmem = 2.0 * S;
    z->count = sp_xcalloc((size_t)S * 6, sizeof(int));
    z->end = sp_xmalloc(sizeof(double) * 6 * (size_t)S * M);
    for (int k = 0; k < 6 * S * M; k++) z->end[k] = -1;
    z->cur = sp_xcalloc((size_t)S, sizeof(double));
    z->mem = sp_xcalloc((size_t)S, sizeof(double));
    z->bub = sp_xcalloc((size_t)S, sizeof(double));
    z->wq = sp_xmalloc(sizeof(int *) * (size_t)S);
    z->list = sp_xmalloc(sizeof(int *) * (size_t)S);
    z->wh = sp_xcalloc((size_t)S, sizeof(int));
    z->wt = sp_xcalloc((size_t)S, sizeof(int));
    z->len = sp_xcalloc((size_t)S, sizeof(int));
    for (int s = 0; s < S; s++) {
        z->wq[s] = sp_xmalloc(sizeof(int) * 4 * (size_t)M);
        z->list[s] = sp_xmalloc(sizeof(int) * 6 * (size_t)M);
    }
    z->approved = approved;
    z->max_approved = -1;
    for (int s = 0; approved && s < S; s++) z->max_approved = fmax(z->max_approved, approved[s]);
}

static void zv_free(zvs *z)
{
    for (int s = 0; s < z->S; s++) {
        free(z->wq[s]);
        free(z->list[s]);
    }
    free(z->wq);
    free(z->list);
    free(z->wh);
    free(z->wt);
    free(z->len);
    free(z->count);
    free(z->end);
    free(z->cur);
    free(z->mem);
    free(z->bub);
}

static sp_actions *zv_actions(const zvs *z)
{
    sp_actions *a = sp_gen_v_new(z->S, z->M);
    for (int s = 0; s < z->S; s++)
        for (int k = 0; k < z->len[s]; k++) {
            int kind = z->list[s][k] / z->M, b = z->list[s][k] % z->M;
            sp_actions_push(a, s, sp_gen_act(zv_chunk(z, kind / 2, kind % 2, s), (sp_act_type)(kind / 2), b));
        }
    return a;
}

/* One variant: a pass, then passes that each rank may take the bubble the previous one
 * left it, kept while the largest bubble shrinks. */
sp_actions *sp_sail_zbv(const sp_pp_params *p, int variant)
{
    int fill_f = !(variant & 1), fill_b = !(variant & 2);
    zvs z;
    zv_init(&z, p, NULL);
    double bub = zv_try(&z, fill_f, fill_b);
    if (z.bad) {
        zv_free(&z);
        return NULL;
    }
    double *approved = sp_xmalloc(sizeof(double) * (size_t)p->ranks);
    for (int round = 0; round < 1000; round++) {
        memcpy(approved, z.bub, sizeof(double) * (size_t)p->ranks);
        if (!(round == 0 || bub < z.max_approved)) break;
        zvs y;
        zv_init(&y, p, approved);
        double nb = zv_try(&y, fill_f, fill_b);
        if (y.bad || !(nb < bub)) {
            zv_free(&y);
            break;
        }
        zv_free(&z);
        z = y;
        bub = nb;
    }
    free(approved);
    sp_actions *a = zv_actions(&z);
    zv_free(&z);
    return a;
}

/* ---- [CM]'s V-Half and V-Min ------------------------------------------------------------ */

/* A rank's plan on a grid of unit slots: per kind the slot of each micro-batch in order.
 * Kinds: 0 F down, 1 F up, 2 I up, 3 I down, then the W's: one kind 4 (every W, 2m of
 * them) or two, 4 (of kind 2's I's) and 5 (of kind 3's). */
typedef struct vplan {
    int S, M, kinds;
    int *t[6], n[6];       /* per rank: t[k][s * 2M + j] */
} vplan;

#define VT(v, s, k, j) ((v)->t[k][(s) * 2 * (v)->M + (j)])

static void vp_alloc(vplan *v, int S, int M)
{
    memset(v, 0, sizeof *v);
    v->S = S, v->M = M;
    for (int k = 0; k < 6; k++) v->t[k] = sp_xcalloc((size_t)S * 2 * M, sizeof(int));
}

static void vp_free(vplan *v)
{
    for (int k = 0; k < 6; k++) free(v->t[k]);
}

/* The next element of rank s at or after the pointers ptr[] (kinds < nk): its slot (INT_MAX
 * when none), kind in *kind. Ties to the lower kind. */
static int vp_next(const vplan *v, int s, const int *ptr, int nk, int *kind)
{
    int best = 1 << 30;
    *kind = -1;
    for (int k = 0; k < nk; k++)
        if (ptr[k] < v->n[k] && VT(v, s, k, ptr[k]) < best) best = VT(v, s, k, ptr[k]), *kind = k;
    return best;
}

static int vp_last(const vplan *v, int s)
{
    int b = 0;
    for (int k = 0; k < v->kinds; k++)
        if (v->n[k]) b = b > VT(v, s, k, v->n[k] - 1) ? b : VT(v, s, k, v->n[k] - 1);
    return b;
}

/* W's into the empty slots of rank s (kinds 0..3 given): one kind, or one per I kind. */
static void vp_put_w(vplan *v, int s, int split)
{
    int ptr[4] = {0}, cnt[2] = {0}, nw[2] = {0}, bound = 0;
    for (int k = 0; k < 4; k++) bound = bound > VT(v, s, k, v->n[k] - 1) ? bound : VT(v, s, k, v->n[k] - 1);
    int i;
    for (i = 0; i <= bound; i++) {
        int kind, nt = vp_next(v, s, ptr, 4, &kind);
        if (nt == i) {
            ptr[kind]++;
            if (kind >= 2) cnt[split ? kind - 2 : 0]++;
        } else
            for (int w = 0; w < 2; w++)
                if (cnt[w]) {
                    VT(v, s, 4 + w, nw[w]++) = i;
                    cnt[w]--;
                    break;
                }
    }
    i--;
    for (int w = 0; w < 2; w++)
        while (cnt[w] > 0) VT(v, s, 4 + w, nw[w]++) = ++i, cnt[w]--;
    v->n[4] = nw[0];
    v->n[5] = nw[1];
}

static void vp_with_w(vplan *v, int split)
{
    for (int s = 0; s < v->S; s++) vp_put_w(v, s, split);
    v->kinds = split ? 6 : 5;
}

/* The largest number of chunk activations rank s holds (F and F up +1, a W −1; without
 * W kinds, each empty slot runs one pending W). */
static int vp_mem(const vplan *v, int s)
{
    static const int dm[5] = {1, 1, 0, 0, -1};
    int ptr[5] = {0}, has_w = v->kinds > 4, bound = vp_last(v, s), wc = 0, cur = 0, res = 0;
    for (int i = 0; i <= bound; i++) {
        int kind, nt = vp_next(v, s, ptr, v->kinds, &kind);
        if (nt == i) {
            ptr[kind]++;
            cur += dm[kind];
            if (kind == 2 || kind == 3) wc++;
        } else if (!has_w && wc) {
            cur--;
            wc--;
        }
        res = res > cur ? res : cur;
    }
    return res;
}

/* Run the plan eagerly in grid order with unit costs: every element as early as its
 * predecessors and its rank allow. new slots into out (same shape); order (when not
 * NULL): per rank the kinds and micro-batches in the order they run. 0 when an element
 * comes before its predecessor in the grid order. */
static int vp_eager(const vplan *v, vplan *out, int **order, int *olen)
{
    int S = v->S, M = v->M, nk = v->kinds, total = 0, ok = 1;
    int *ptr = sp_xcalloc((size_t)S * 6, sizeof(int));
    int *done = sp_xcalloc((size_t)S * 6, sizeof(int));
    int *free_at = sp_xcalloc((size_t)S, sizeof(int)), *started = sp_xcalloc((size_t)S, sizeof(int));
    for (int k = 0; k < nk; k++) total += S * v->n[k];
    if (out) {
        out->kinds = nk;
        for (int k = 0; k < 6; k++) out->n[k] = v->n[k];
    }
    for (int e = 0; e < total && ok; e++) {
        int bs = -1, bk = -1, bt = 1 << 30;
        for (int s = 0; s < S; s++)
            for (int k = 0; k < nk; k++)
                if (ptr[s * 6 + k] < v->n[k] && VT(v, s, k, ptr[s * 6 + k]) < bt)
                    bt = VT(v, s, k, ptr[s * 6 + k]), bs = s, bk = k;
        int s = bs, k = bk, j = ptr[s * 6 + k]++, dep = 0;
        /* predecessors: the neighbour's same kind (kinds 0, 2 from s − 1; 1, 3 from s + 1),
         * the kind before on this rank (kinds 1..3), the previous micro-batch, the rank */
        int nb = (k == 0 || k == 2) ? s - 1 : (k == 1 || k == 3) ? s + 1 : -1;
        if (nb >= 0 && nb < S) {
            if (done[nb * 6 + k] <= j) ok = 0;
            else dep = VT(out, nb, k, j) + 1;
        }
        if (k > 0 && k < 4) {
            if (done[s * 6 + k - 1] <= j) ok = 0;
            else dep = dep > VT(out, s, k - 1, j) + 1 ? dep : VT(out, s, k - 1, j) + 1;
        }
        if (started[s]) dep = dep > free_at[s] ? dep : free_at[s];
        VT(out, s, k, j) = dep;   /* unit costs: start = dep */
        free_at[s] = dep + 1;
        started[s] = 1;
        done[s * 6 + k]++;
        if (order) order[s][olen[s]++] = k * 2 * M + j;
    }
    free(ptr);
    free(done);
    free(free_at);
    free(started);
    return ok;
}

/* The squeeze: walking the plan in grid order, move each element to the earliest free
 * slot after its predecessors that keeps the rank's memory at the plan's peak. The part
 * from rank 0's first I (kind 3) to the last micro-batch's F on rank 0 stays; with_w
 * false, so does everything before it. Result in v (re-timed eagerly). */
static int vp_reorder(vplan *v, int with_w)
{
    int S = v->S, M = v->M;
    if (with_w) vp_with_w(v, 0);
    else v->kinds = 4;
    int nk = v->kinds, cur = 0, total = 0, ok = 1;
    for (int s = 0; s < S; s++) cur = cur > vp_mem(v, s) ? cur : vp_mem(v, s);
    for (int k = 0; k < nk; k++) total += S * v->n[k];
    int len = 0, *llen = sp_xmalloc(sizeof(int) * (size_t)S);
    for (int s = 0; s < S; s++) {
        llen[s] = VT(v, s, nk - 1, v->n[nk - 1] - 1) + 1;   /* each rank's slots */
        len = len > llen[s] ? len : llen[s];
    }
    char *occ = sp_xcalloc((size_t)S * (len + 1), 1);
    int *ptr = sp_xcalloc((size_t)S * 6, sizeof(int)), phase = 0;
    int *tmpb = sp_xmalloc(sizeof(int) * 2 * (size_t)M);
    for (int e = 0; e < total && ok; e++) {
        int bs = -1, bk = -1, bt = 1 << 30;
        for (int s = 0; s < S; s++)
            for (int k = 0; k < nk; k++)
                if (ptr[s * 6 + k] < v->n[k] && VT(v, s, k, ptr[s * 6 + k]) < bt)
                    bt = VT(v, s, k, ptr[s * 6 + k]), bs = s, bk = k;
        int s = bs, k = bk, j = ptr[s * 6 + k]++;
        if (bt >= llen[s]) {
            ok = 0;
            break;
        }
        if (k == 3 && s == 0 && phase == 0) phase = 1;
        if (phase == 1 || (phase == 0 && !with_w)) {
            if (phase == 1 && k == 0 && j == v->n[0] - 1) phase = 2;
            occ[s * (len + 1) + bt] = 1;
            continue;
        }
        int dep = -1;
        int nb = (k == 0 || k == 2) ? s - 1 : (k == 1 || k == 3) ? s + 1 : -1;
        if (nb >= 0 && nb < S) dep = dep > VT(v, nb, k, j) ? dep : VT(v, nb, k, j);
        if (k > 0 && k < 4) dep = dep > VT(v, s, k - 1, j) ? dep : VT(v, s, k - 1, j);
        if (k == 4) {
            /* the j-th I of the rank in time */
            int a = 0, b = 0, x = 0;
            while (x <= j) tmpb[x++] = (b >= v->n[3] || (a < v->n[2] && VT(v, s, 2, a) <= VT(v, s, 3, b)))
                                           ? VT(v, s, 2, a++) : VT(v, s, 3, b++);
            dep = dep > tmpb[j] ? dep : tmpb[j];
        }
        if (j > 0) dep = dep > VT(v, s, k, j - 1) ? dep : VT(v, s, k, j - 1);
        dep++;
        if (dep > bt) {
            ok = 0;
            break;
        }
        int placed = 0;
        for (int t = dep; t < bt; t++)
            if (!occ[s * (len + 1) + t]) {
                VT(v, s, k, j) = t;
                if (vp_mem(v, s) <= cur) {
                    placed = 1;
                    break;
                }
            }
        if (!placed) VT(v, s, k, j) = bt;
        occ[s * (len + 1) + VT(v, s, k, j)] = 1;
    }
    free(occ);
    free(llen);
    free(ptr);
    free(tmpb);
    if (!ok) return 0;
    if (!with_w) vp_with_w(v, 0);
    vplan o;
    vp_alloc(&o, S, M);
    ok = vp_eager(v, &o, NULL, NULL);
    for (int k = 0; k < 6; k++) {
        free(v->t[k]);
        v->t[k] = o.t[k];
        v->n[k] = o.n[k];
    }
    v->kinds = o.kinds;
    return ok;
}

sp_actions *sp_sail_vpattern(const sp_pp_params *p, int half)
{
    int S = p->ranks, M = p->micro;
    vplan v;
    vp_alloc(&v, S, M);
    v.kinds = 4;
    for (int k = 0; k < 4; k++) v.n[k] = M;
    for (int s = 0; s < S; s++) {
        int b[4];
        if (half) {
            int gap = S % 2 == 0 ? 3 : 0;
            b[0] = 2 * s, b[1] = 3 * S - s - 2, b[2] = 3 * S + gap + 2 * s - 1, b[3] = 6 * S + gap - s - 2;
        } else {
            int gap = S % 3 == 0 ? 2 : 0;
            b[0] = s, b[1] = 2 * S - s - 1, b[2] = 2 * S + gap + s, b[3] = 4 * S + gap - s - 1;
        }
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < M; j++) VT(&v, s, k, j) = b[k] + 6 * j;
    }
    sp_actions *a = NULL;
    int ok = 1;
    for (int s = 0; s < S && ok; s++)
        for (int k = 0; k < 4; k++)
            if (VT(&v, s, k, 0) < 0) ok = 0;
    if (ok) ok = vp_reorder(&v, 1);
    if (ok) {
        v.kinds = 4;
        ok = vp_reorder(&v, 0);
    }
    if (ok) {
        v.kinds = 4;
        vp_with_w(&v, 1);
        int **order = sp_xmalloc(sizeof(int *) * (size_t)S), *olen = sp_xcalloc((size_t)S, sizeof(int));
        for (int s = 0; s < S; s++) order[s] = sp_xmalloc(sizeof(int) * 6 * (size_t)M);
        vplan o;
        vp_alloc(&o, S, M);
        ok = vp_eager(&v, &o, order, olen);
        vp_free(&o);
        if (ok) {
            a = sp_gen_v_new(S, M);
            for (int s = 0; s < S; s++)
                for (int q = 0; q < olen[s]; q++) {
                    int k = order[s][q] / (2 * M), j = order[s][q] % (2 * M);
                    static const sp_act_type type[6] = {SP_ACT_F, SP_ACT_F, SP_ACT_I, SP_ACT_I, SP_ACT_W, SP_ACT_W};
                    static const int up[6] = {0, 1, 1, 0, 1, 0};
                    sp_actions_push(a, s, sp_gen_act(up[k] ? 2 * S - 1 - s : s, type[k], j));
                }
        }
        for (int s = 0; s < S; s++) free(order[s]);
        free(order);
        free(olen);
    }
    vp_free(&v);
    return a;
}
