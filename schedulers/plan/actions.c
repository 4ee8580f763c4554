/* actions.c — per-rank action lists: building, checking, simulating, CSV in and out.
 *
 * The simulator runs each rank's list in its fixed order: an action starts when its rank
 * has finished the one before it and its predecessors (actions.h) are done, plus the
 * transfer time when a predecessor ran on another rank. Start times depend only on what
 * came before, so the lists are placed by repeated sweeps over the ranks, each rank
 * advancing while its next action's predecessors are placed; a sweep that places
 * nothing, with actions left, is a list that cannot run, and the wait chain from the
 * first stuck rank names why (a rank waiting on itself, or a cycle between ranks). */
#include "schedulers/plan/actions.h"
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/io/fileio.h"

/* Bounds on what a list may name, so every index product fits an int. */
#define ACT_MAX_INDEX 1000000
#define ACT_MAX_KEYS (1 << 28)

const char *sp_action_str(sp_action a, char *buf)
{
    char t = (a.type >= SP_ACT_F && a.type <= SP_ACT_B) ? "FIWB"[a.type] : '?';
    snprintf(buf, 32, "%d%c%d", a.chunk, t, a.micro);
    return buf;
}

sp_actions *sp_actions_new(int ranks, int chunks, int micro, int cap)
{
    if (ranks < 1 || chunks < 1 || micro < 1 || cap < 0)
        sp_fail("sp_actions_new: %d ranks, %d chunks, %d micro-batches, room for %d", ranks, chunks, micro, cap);
    sp_actions *a = sp_xcalloc(1, sizeof *a);
    a->ranks = ranks;
    a->chunks = chunks;
    a->micro = micro;
    a->chunk_rank = sp_xmalloc(sizeof(int) * (size_t)chunks);
    for (int c = 0; c < chunks; c++) a->chunk_rank[c] = -1;
    a->off = sp_xcalloc((size_t)ranks + 1, sizeof(int));
    a->cap = cap > 0 ? cap : 16;
    a->act = sp_xmalloc(sizeof(sp_action) * (size_t)a->cap);
    return a;
}

void sp_actions_push(sp_actions *a, int rank, sp_action act)
{
    int n = a->off[a->ranks];
    /* Rank by rank: nothing may be on a later rank yet. */
    if (rank < 0 || rank >= a->ranks || a->off[rank + 1] != n)
        sp_fail("sp_actions_push: rank %d out of order (%d ranks)", rank, a->ranks);
    if (n == a->cap) {
        a->cap *= 2;
        a->act = sp_xrealloc(a->act, sizeof(sp_action) * (size_t)a->cap);
    }
    a->act[n] = act;
    for (int j = rank + 1; j <= a->ranks; j++) a->off[j] = n + 1;
    if (act.chunk >= 0 && act.chunk < a->chunks && a->chunk_rank[act.chunk] < 0) a->chunk_rank[act.chunk] = rank;
}

void sp_actions_free(sp_actions *a)
{
    if (!a) return;
    free(a->chunk_rank);
    free(a->off);
    free(a->act);
    free(a->cell);
    free(a);
}

static int key_of(const sp_actions *a, int chunk, int micro, int type)
{
    return ((chunk * a->micro) + micro) * 4 + type;
}

/* Where act[k] of rank r is: "line L, cell C" of the CSV it came from, or its position
 * in the rank's list. */
static const char *where(const sp_actions *a, int r, int k, char *buf)
{
    if (a->cell) snprintf(buf, 48, "line %d, cell %d", r + 1, a->cell[k]);
    else snprintf(buf, 48, "position %d", k - a->off[r] + 1);
    return buf;
}

/* pos[key] = the action's index in act[], or -1; rank_of[k] = the rank running act[k].
 * Fills both (caller frees) after the structural checks; SP_ERR names the first fault. */
static int index_list(const sp_actions *a, int **pos_out, int **rank_out)
{
    char s1[32], s2[32], w1[48], w2[48];
    if (!a) return sp_error("action list: NULL");
    if (a->ranks < 1 || a->chunks < 1 || a->micro < 1)
        return sp_error("action list: %d ranks, %d chunks, %d micro-batches (expected at least 1 of each)",
                        a->ranks, a->chunks, a->micro);
    if (a->chunks > ACT_MAX_INDEX || a->micro > ACT_MAX_INDEX ||
        (double)a->chunks * a->micro * 4 > ACT_MAX_KEYS)
        return sp_error("action list: %d chunks × %d micro-batches is too large (at most %d actions)",
                        a->chunks, a->micro, ACT_MAX_KEYS);
    for (int c = 0; c < a->chunks; c++)
        if (a->chunk_rank[c] < -1 || a->chunk_rank[c] >= a->ranks)
            return sp_error("action list: chunk %d on rank %d (expected a rank in 0..%d)", c, a->chunk_rank[c],
                            a->ranks - 1);
    int nkeys = a->chunks * a->micro * 4, n = a->off[a->ranks];
    int *pos = sp_xmalloc(sizeof(int) * (size_t)nkeys);
    int *rank_of = sp_xmalloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    for (int k = 0; k < nkeys; k++) pos[k] = -1;
    int st = SP_OK;
    for (int r = 0; r < a->ranks && st == SP_OK; r++)
        for (int k = a->off[r]; k < a->off[r + 1]; k++) {
            sp_action x = a->act[k];
            rank_of[k] = r;
            if (x.type < SP_ACT_F || x.type > SP_ACT_B) {
                st = sp_error("rank %d: action at %s has type %d (expected F, I, W or B)", r, where(a, r, k, w1),
                              (int)x.type);
                break;
            }
            if (x.chunk < 0 || x.chunk >= a->chunks || x.micro < 0 || x.micro >= a->micro) {
                st = sp_error("rank %d: action %s (%s) is out of range (the list has chunks 0..%d, "
                              "micro-batches 0..%d)", r, sp_action_str(x, s1), where(a, r, k, w1), a->chunks - 1,
                              a->micro - 1);
                break;
            }
            if (a->chunk_rank[x.chunk] < 0) {
                st = sp_error("rank %d: action %s: chunk %d is assigned to no rank", r, sp_action_str(x, s1), x.chunk);
                break;
            }
            if (a->chunk_rank[x.chunk] != r) {
                st = sp_error("rank %d: action %s (%s): chunk %d is on rank %d too (a chunk on two ranks)", r,
                              sp_action_str(x, s1), where(a, r, k, w1), x.chunk, a->chunk_rank[x.chunk]);
                break;
            }
            int key = key_of(a, x.chunk, x.micro, x.type);
            if (pos[key] >= 0) {
                int r0 = 0;
                while (a->off[r0 + 1] <= pos[key]) r0++;
                st = sp_error("rank %d: action %s repeated (at %s, and at %s of rank %d)", r, sp_action_str(x, s1),
                              where(a, r, k, w1), where(a, r0, pos[key], w2), r0);
                break;
            }
            pos[key] = k;
        }
    for (int c = 0; c < a->chunks && st == SP_OK; c++)
        for (int b = 0; b < a->micro && st == SP_OK; b++) {
            int r = a->chunk_rank[c];
            char rk[48];
            if (a->cell) snprintf(rk, sizeof rk, "rank %d (line %d)", r, r + 1);
            else snprintf(rk, sizeof rk, "rank %d", r);
            sp_action f = {c, b, SP_ACT_F}, i = {c, b, SP_ACT_I}, w = {c, b, SP_ACT_W}, bb = {c, b, SP_ACT_B};
            int hf = pos[key_of(a, c, b, SP_ACT_F)] >= 0, hi = pos[key_of(a, c, b, SP_ACT_I)] >= 0;
            int hw = pos[key_of(a, c, b, SP_ACT_W)] >= 0, hb = pos[key_of(a, c, b, SP_ACT_B)] >= 0;
            if (r < 0)
                st = sp_error("action %s missing (no rank holds chunk %d)", sp_action_str(f, s1), c);
            else if (!hf)
                st = sp_error("%s: action %s missing (every chunk runs every micro-batch's forward)", rk,
                              sp_action_str(f, s1));
            else if (hb && (hi || hw))
                st = sp_error("%s: action %s and %s both present (B is I and W together)", rk,
                              sp_action_str(bb, s1), sp_action_str(hi ? i : w, s2));
            else if (!hb && !hi && !hw)
                st = sp_error("%s: action %s missing (or %s and its W)", rk, sp_action_str(bb, s1),
                              sp_action_str(i, s2));
            else if (hi && !hw)
                st = sp_error("%s: action %s without %s (I without W)", rk, sp_action_str(i, s1),
                              sp_action_str(w, s2));
            else if (hw && !hi)
                st = sp_error("%s: action %s without %s (W without I)", rk, sp_action_str(w, s1),
                              sp_action_str(i, s2));
        }
    if (st != SP_OK) {
        free(pos);
        free(rank_of);
        return st;
    }
    *pos_out = pos;
    *rank_out = rank_of;
    return SP_OK;
}

int sp_actions_check(const sp_actions *a)
{
    int *pos, *rank_of;
    if (index_list(a, &pos, &rank_of) != SP_OK) return SP_ERR;
    free(pos);
    free(rank_of);
    return SP_OK;
}

/* The predecessors of act[k] (actions.h) as indices into act[]; returns how many. */
static int preds(const sp_actions *a, const int *pos, int k, int out[2])
{
    sp_action x = a->act[k];
    int n = 0;
    if (x.type == SP_ACT_F) {
        if (x.chunk > 0) out[n++] = pos[key_of(a, x.chunk - 1, x.micro, SP_ACT_F)];
    } else if (x.type == SP_ACT_W) {
        out[n++] = pos[key_of(a, x.chunk, x.micro, SP_ACT_I)];
    } else {
        out[n++] = pos[key_of(a, x.chunk, x.micro, SP_ACT_F)];
        if (x.chunk + 1 < a->chunks) {
            int d = pos[key_of(a, x.chunk + 1, x.micro, SP_ACT_I)];
            out[n++] = d >= 0 ? d : pos[key_of(a, x.chunk + 1, x.micro, SP_ACT_B)];
        }
    }
    return n;
}

/* The message for lists stuck with heads head[]: follow "the head of rank r waits for d,
 * which rank_of[d] holds" from the first stuck rank until a rank repeats. */
static int stuck_error(const sp_actions *a, const int *pos, const int *rank_of, const int *head,
                       const char *placed)
{
    char s1[32], s2[32], w1[48];
    int *seen = sp_xmalloc(sizeof(int) * (size_t)a->ranks); /* step at which rank was visited */
    int *wait = sp_xmalloc(sizeof(int) * (size_t)a->ranks); /* the dep its head waits for   */
    for (int r = 0; r < a->ranks; r++) seen[r] = -1;
    int r = 0;
    while (head[r] >= a->off[r + 1]) r++;
    for (int step = 0; seen[r] < 0; step++) {
        seen[r] = step;
        int d[2], nd = preds(a, pos, head[r], d);
        wait[r] = d[0];
        for (int j = 0; j < nd; j++)
            if (!placed[d[j]]) { wait[r] = d[j]; break; }
        r = rank_of[wait[r]];
    }
    /* r starts the cycle. */
    int k = head[r], st;
    if (rank_of[wait[r]] == r) {
        st = sp_error("rank %d: action %s (%s) waits for %s, which no rank can run first (%s comes later in rank %d's "
                      "own list)", r, sp_action_str(a->act[k], s1), where(a, r, k, w1),
                      sp_action_str(a->act[wait[r]], s2), s2, r);
    } else {
        char chain[512] = "";
        size_t len = 0;
        int q = r;
        do {
            int w = wait[q];
            len += (size_t)snprintf(chain + len, len < sizeof chain ? sizeof chain - len : 0, "%srank %d: %s waits for %s on rank %d",
                                    q == r ? "" : "; ", q, sp_action_str(a->act[head[q]], s1),
                                    sp_action_str(a->act[w], s2), rank_of[w]);
            q = rank_of[w];
        } while (q != r && len < sizeof chain);
        st = sp_error("rank %d: action %s (%s) waits for %s, which no rank can run first: a cycle between ranks (%s)",
                      r, sp_action_str(a->act[k], s1), where(a, r, k, w1), sp_action_str(a->act[wait[r]], s2), chain);
    }
    free(seen);
    free(wait);
    return st;
}

static int check_costs(const sp_actions *a, const sp_chunk_costs *c)
{
    if (c->chunks != a->chunks)
        return sp_error("action list: costs for %d chunks, the list has %d", c->chunks, a->chunks);
    if (!c->f || !c->i || !c->w) return sp_error("action list: chunk costs without f, i or w");
    if (!isfinite(c->transfer) || c->transfer < 0)
        return sp_error("action list: transfer cost %g (expected a finite value ≥ 0)", c->transfer);
    for (int j = 0; j < c->chunks; j++) {
        double v[4] = {c->f[j], c->i[j], c->w[j], c->act ? c->act[j] : 1};
        for (int t = 0; t < 4; t++)
            if (!isfinite(v[t]) || v[t] < 0)
                return sp_error("action list: chunk %d has cost %g (expected finite values ≥ 0)", j, v[t]);
    }
    return SP_OK;
}

static double duration(const sp_chunk_costs *c, sp_action x)
{
    if (!c) return x.type == SP_ACT_B ? 2 : 1;
    switch (x.type) {
    case SP_ACT_F: return c->f[x.chunk];
    case SP_ACT_I: return c->i[x.chunk];
    case SP_ACT_W: return c->w[x.chunk];
    default: return c->i[x.chunk] + c->w[x.chunk];
    }
}

int sp_actions_simulate(const sp_actions *a, const sp_chunk_costs *costs, sp_actions_sim *out)
{
    int *pos, *rank_of;
    if (index_list(a, &pos, &rank_of) != SP_OK) return SP_ERR;
    if (costs && check_costs(a, costs) != SP_OK) {
        free(pos);
        free(rank_of);
        return SP_ERR;
    }
    int n = a->off[a->ranks], R = a->ranks;
    double transfer = costs ? costs->transfer : 0;
    double *start = sp_xcalloc((size_t)(n > 0 ? n : 1), sizeof(double));
    double *finish = sp_xcalloc((size_t)(n > 0 ? n : 1), sizeof(double));
    char *placed = sp_xcalloc((size_t)(n > 0 ? n : 1), 1);
    int *head = sp_xmalloc(sizeof(int) * (size_t)R);
    double *free_at = sp_xcalloc((size_t)R, sizeof(double));
    for (int r = 0; r < R; r++) head[r] = a->off[r];
    int done = 0;
    for (int progress = 1; progress;) {
        progress = 0;
        for (int r = 0; r < R; r++)
            while (head[r] < a->off[r + 1]) {
                int k = head[r], d[2], nd = preds(a, pos, k, d), ready = 1;
                double t = free_at[r];
                for (int j = 0; j < nd && ready; j++) {
                    if (!placed[d[j]]) ready = 0;
                    else t = fmax(t, finish[d[j]] + (rank_of[d[j]] != r ? transfer : 0));
                }
                if (!ready) break;
                start[k] = t;
                finish[k] = t + duration(costs, a->act[k]);
                free_at[r] = finish[k];
                placed[k] = 1;
                head[r]++;
                done++;
                progress = 1;
            }
    }
    int st = SP_OK;
    if (done < n) st = stuck_error(a, pos, rank_of, head, placed);
    if (st == SP_OK && out) {
        memset(out, 0, sizeof *out);
        out->start = start;
        out->finish = finish;
        out->busy = sp_xcalloc((size_t)R, sizeof(double));
        out->peak_act = sp_xcalloc((size_t)R, sizeof(double));
        out->messages = sp_xcalloc((size_t)R, sizeof(int));
        double total = 0;
        for (int r = 0; r < R; r++) {
            /* A rank runs its list one action at a time, so the running sum in list
             * order is what it holds between its actions. */
            double held = 0;
            for (int k = a->off[r]; k < a->off[r + 1]; k++) {
                sp_action x = a->act[k];
                double sz = costs && costs->act ? costs->act[x.chunk] : 1;
                out->busy[r] += finish[k] - start[k];
                out->latency = fmax(out->latency, finish[k]);
                if (x.type == SP_ACT_F) {
                    held += sz;
                    out->peak_act[r] = fmax(out->peak_act[r], held);
                    if (x.chunk + 1 < a->chunks && a->chunk_rank[x.chunk + 1] != r) out->messages[r]++;
                } else {
                    if (x.type != SP_ACT_I) held -= sz;
                    if (x.type != SP_ACT_W && x.chunk > 0 && a->chunk_rank[x.chunk - 1] != r) out->messages[r]++;
                }
            }
            total += out->busy[r];
        }
        out->bubble = out->latency > 0 ? 1 - total / (R * out->latency) : 0;
        start = finish = NULL;
    }
    free(start);
    free(finish);
    free(placed);
    free(head);
    free(free_at);
    free(pos);
    free(rank_of);
    return st;
}

void sp_actions_sim_free(sp_actions_sim *r)
{
    if (!r) return;
    free(r->start);
    free(r->finish);
    free(r->busy);
    free(r->peak_act);
    free(r->messages);
    memset(r, 0, sizeof *r);
}

/* ------------------------------------------------------------------------------------ */
/* CSV                                                                                  */

/* Digits at s into *v; the count of digits read (0: none), -1 past ACT_MAX_INDEX. */
static int digits(const char *s, long *v)
{
    int n = 0;
    *v = 0;
    while (isdigit((unsigned char)s[n])) {
        *v = *v * 10 + (s[n++] - '0');
        if (*v > ACT_MAX_INDEX) return -1;
    }
    return n;
}

/* PyTorch's actions that are not computation: run by its runtime, not by a schedule's
 * ranks here (the simulator and executor derive the messages from the placement). The
 * first four carry a micro-batch, the last three none. */
static const char *const COMM_TYPES[] = {"SEND_F", "RECV_F", "SEND_B", "RECV_B", "UNSHARD", "RESHARD", "REDUCE_GRAD"};
#define COMM_WITH_MICRO 4

/* One action, s ending at its NUL (blanks trimmed): 1 a computation <chunk><F|I|W|B><micro>
 * in *out; 2 a communication or bookkeeping action of chunk out->chunk (micro-batch
 * out->micro, 0 for those without), COMM_TYPES[*kind]; 0 not an action; -1 an index above
 * ACT_MAX_INDEX. */
static int parse_one(const char *s, sp_action *out, int *kind)
{
    long c, b;
    int n = digits(s, &c);
    if (n <= 0) return n;
    s += n;
    for (int t = 0; t < (int)(sizeof COMM_TYPES / sizeof COMM_TYPES[0]); t++) {
        size_t l = strlen(COMM_TYPES[t]);
        if (strncmp(s, COMM_TYPES[t], l) != 0) continue;
        s += l;
        if (t < COMM_WITH_MICRO) {
            int k = digits(s, &b);
            if (k <= 0) return k;
            s += k;
        }
        if (*s) return 0;
        out->chunk = (int)c;
        out->micro = t < COMM_WITH_MICRO ? (int)b : 0;
        out->type = SP_ACT_F;
        *kind = t;
        return 2;
    }
    const char *p = *s ? strchr("FIWB", *s) : NULL;
    if (!p) return 0;
    int k = digits(s + 1, &b);
    if (k <= 0) return k;
    if (s[1 + k]) return 0;
    out->chunk = (int)c;
    out->micro = (int)b;
    out->type = (sp_act_type)(p - "FIWB");
    return 1;
}

static char *trim(char *p)
{
    while (*p == ' ' || *p == '\t') p++;
    size_t l = strlen(p);
    while (l > 0 && (p[l - 1] == ' ' || p[l - 1] == '\t')) p[--l] = 0;
    return p;
}

typedef struct csv_rows {
    int rows, cap;
    int *row_n;            /* actions per row                                   */
    sp_action *act;        /* all rows, in row order                            */
    int *cell;             /* the cell of each action                           */
    int n, acap;
    int *ign;              /* not run: (row, cell, chunk, kind, micro) each     */
    int nign, igncap;
} csv_rows;

static void put_action(csv_rows *cr, int row, int cell, sp_action x)
{
    if (cr->n == cr->acap) {
        cr->acap = cr->acap ? 2 * cr->acap : 64;
        cr->act = sp_xrealloc(cr->act, sizeof(sp_action) * (size_t)cr->acap);
        cr->cell = sp_xrealloc(cr->cell, sizeof(int) * (size_t)cr->acap);
    }
    cr->cell[cr->n] = cell;
    cr->act[cr->n++] = x;
    cr->row_n[row]++;
}

#define CELL_FORMS "expected <chunk><F|I|W|B><micro-batch> (e.g. 0F0), PyTorch's communication and bookkeeping " \
                   "actions (0SEND_F0, 1RECV_F0, 1SEND_B0, 0RECV_B0, 0UNSHARD, 0RESHARD, 0REDUCE_GRAD), a compound " \
                   "(0F1;3B0)OVERLAP_F_B, or an empty cell"

/* One cell (trimmed, not empty) of line row + 1: its actions appended. */
static int parse_cell(csv_rows *cr, const char *path, int row, int cell, char *p)
{
    char shown[48];
    snprintf(shown, sizeof shown, "%s", p);
    sp_action x;
    if (*p == '(') {   /* (a;b;...)OVERLAP_F_B: its computations in order */
        static const char tail[] = ")OVERLAP_F_B";
        size_t l = strlen(p), tl = sizeof tail - 1;
        if (l < tl + 2 || strcmp(p + l - tl, tail) != 0 || strchr(p + 1, '(') || memchr(p, ')', l - tl))
            return sp_error("%s: line %d (rank %d), cell %d: \"%s\" is not an action (a compound is "
                            "(<action>;<action>...)OVERLAP_F_B, e.g. (0F1;3B0)OVERLAP_F_B)", path, row + 1, row, cell,
                            shown);
        p[l - tl] = 0;
        int parts = 0;
        for (char *q = p + 1, *e; q; q = e ? e + 1 : NULL) {
            e = strchr(q, ';');
            if (e) *e = 0;
            char *t = trim(q);
            int kind, ok = parse_one(t, &x, &kind);
            if (ok < 0)
                return sp_error("%s: line %d (rank %d), cell %d: \"%s\": an index above %d", path, row + 1, row, cell,
                                shown, ACT_MAX_INDEX);
            if (ok != 1)
                return sp_error("%s: line %d (rank %d), cell %d: \"%s\": part %d \"%.24s\" is not a computation "
                                "(expected <chunk><F|I|W|B><micro-batch> in each part)", path, row + 1, row, cell,
                                shown, parts + 1, t);
            put_action(cr, row, cell, x);
            parts++;
        }
        return SP_OK;
    }
    int kind = 0, ok = parse_one(p, &x, &kind);
    if (ok < 0)
        return sp_error("%s: line %d (rank %d), cell %d: \"%s\": an index above %d", path, row + 1, row, cell, shown,
                        ACT_MAX_INDEX);
    if (ok == 0)
        return sp_error("%s: line %d (rank %d), cell %d: \"%s\" is not an action (" CELL_FORMS ")", path, row + 1,
                        row, cell, shown);
    if (ok == 1) {
        put_action(cr, row, cell, x);
        return SP_OK;
    }
    if (cr->nign == cr->igncap) {
        cr->igncap = cr->igncap ? 2 * cr->igncap : 32;
        cr->ign = sp_xrealloc(cr->ign, sizeof(int) * 5 * (size_t)cr->igncap);
    }
    int *g = cr->ign + 5 * cr->nign++;
    g[0] = row, g[1] = cell, g[2] = x.chunk, g[3] = kind, g[4] = x.micro;
    return SP_OK;
}

/* Each line is a rank's list, line r + 1 rank r. A line with no action (blank, or empty
 * cells only) at the end of the file is nothing; before a line with actions it is refused:
 * it would be a rank that runs nothing, and every later rank would shift by one. */
static int read_rows(FILE *f, const char *path, csv_rows *cr)
{
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    int st = SP_OK, lineno = 0, blank = 0;   /* blank: the first line of a run of lines without actions */
    while (st == SP_OK && (len = getline(&line, &lcap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (cr->rows == cr->cap) {
            cr->cap = cr->cap ? 2 * cr->cap : 8;
            cr->row_n = sp_xrealloc(cr->row_n, sizeof(int) * (size_t)cr->cap);
        }
        int row = cr->rows, before = cr->n, ign = cr->nign;
        cr->row_n[row] = 0;
        int cell = 0;
        for (char *p = line, *end; st == SP_OK; p = end + 1) {
            end = strchr(p, ',');
            if (end) *end = 0;
            cell++;
            p = trim(p);
            if (*p) st = parse_cell(cr, path, row, cell, p);
            if (!end) break;
        }
        if (st != SP_OK) break;
        if (cr->n == before && cr->nign == ign) {
            if (!blank) blank = lineno;
            continue;
        }
        if (cr->n == before) {   /* only communication: a rank that computes nothing */
            st = sp_error("%s: line %d (rank %d) has no computation (only communication or bookkeeping actions: "
                          "every rank runs F and B, or I and W, of its chunks)", path, lineno, row);
            break;
        }
        if (blank) {
            st = sp_error("%s: line %d is %s, and line %d after it has actions (each line is a rank's list: line %d "
                          "would be rank %d with nothing to run; remove it)", path, blank,
                          blank == lineno - 1 ? "blank" : "the first of blank lines", lineno, blank, blank - 1);
            break;
        }
        cr->rows++;
    }
    free(line);
    if (st == SP_OK && ferror(f)) st = sp_error("%s: read failed", path);
    return st;
}

/* The micro-batch count a list means: the most forwards any chunk runs. A cell naming a
 * micro-batch at or past it (a typo for a missing one, 3F8 for 3F0) is refused naming
 * its rank and cell and the micro-batch its chunk lacks, not as every other chunk
 * missing micro-batch 8. */
static int check_micro(const csv_rows *cr, const char *path, int chunks, int top)
{
    char *seen = sp_xcalloc((size_t)chunks * (size_t)top, 1);
    int *count = sp_xcalloc((size_t)chunks, sizeof(int)), most = 0;
    for (int k = 0; k < cr->n; k++) {
        sp_action x = cr->act[k];
        if (x.type != SP_ACT_F) continue;
        char *s = &seen[(size_t)x.chunk * top + x.micro];
        if (!*s) *s = 1, count[x.chunk]++;
    }
    for (int c = 0; c < chunks; c++)
        if (count[c] > most) most = count[c];
    int st = SP_OK;
    if (most > 0 && most < top)
        for (int r = 0, k = 0; r < cr->rows && st == SP_OK; r++)
            for (int j = 0; j < cr->row_n[r]; j++, k++) {
                sp_action x = cr->act[k];
                if (x.micro < most) continue;
                int lack = 0;
                while (lack < most && seen[(size_t)x.chunk * top + lack]) lack++;
                char s1[32], s2[32];
                sp_action miss = {x.chunk, lack, SP_ACT_F};
                if (lack < most)   /* the chunk of x lacks a micro-batch below the count */
                    st = sp_error("%s: line %d (rank %d), cell %d: %s names micro-batch %d, but no chunk runs more "
                                  "than %d forwards (micro-batches 0..%d); rank %d has no %s", path, r + 1, r,
                                  cr->cell[k], sp_action_str(x, s1), x.micro, most, most - 1, r,
                                  sp_action_str(miss, s2));
                else
                    st = sp_error("%s: line %d (rank %d), cell %d: %s names micro-batch %d, but no chunk runs more "
                                  "than %d forwards (micro-batches 0..%d)", path, r + 1, r, cr->cell[k],
                                  sp_action_str(x, s1), x.micro, most, most - 1);
                break;
            }
    free(seen);
    free(count);
    return st;
}

int sp_actions_read_csv(const char *path, sp_actions **out)
{
    if (!path || !out) return sp_error("sp_actions_read_csv: NULL %s", path ? "out" : "path");
    FILE *f = sp_open_text(path, "action list");
    if (!f) return SP_ERR;
    csv_rows cr = {0};
    int st = read_rows(f, path, &cr);
    fclose(f);
    if (st == SP_OK && cr.n == 0) st = sp_error("%s: no actions (expected one row per rank, e.g. 0F0,0I0,0W0)", path);
    sp_actions *a = NULL;
    int chunks = 0, micro = 0;
    if (st == SP_OK) {
        for (int k = 0; k < cr.n; k++) {
            if (cr.act[k].chunk >= chunks) chunks = cr.act[k].chunk + 1;
            if (cr.act[k].micro >= micro) micro = cr.act[k].micro + 1;
        }
        if ((double)chunks * micro * 4 > ACT_MAX_KEYS)
            st = sp_error("%s: %d chunks × %d micro-batches is too large (at most %d actions)", path, chunks, micro,
                          ACT_MAX_KEYS);
    }
    /* Every (chunk, micro-batch) pair needs two actions at least (F and B): a list naming
     * more pairs than half its actions cannot be whole. Refused before the tables of the
     * checks are sized by it (small lists go on, for the check's sharper messages). */
    if (st == SP_OK && (double)chunks * micro > (1 << 18) && 2.0 * chunks * micro > cr.n)
        st = sp_error("%s: the list names chunks 0..%d and micro-batches 0..%d, %.0f pairs of them, each needing an F "
                      "and a B (or I and W), but it has %d actions", path, chunks - 1, micro - 1,
                      (double)chunks * micro, cr.n);
    if (st == SP_OK) st = check_micro(&cr, path, chunks, micro);
    if (st == SP_OK) {
        a = sp_actions_new(cr.rows, chunks, micro, cr.n);
        for (int r = 0, k = 0; r < cr.rows; r++)
            for (int j = 0; j < cr.row_n[r]; j++) sp_actions_push(a, r, cr.act[k++]);
        a->cell = cr.cell;
        cr.cell = NULL;
        a->ignored = cr.nign;
        if (sp_actions_simulate(a, NULL, NULL) != SP_OK) st = sp_error_prefix("%s", path);
        /* PyTorch's communication actions against the list's messages: each names a chunk
         * of its own rank (RECV_F/RECV_B: the receiving one), and a send or receive a
         * neighbouring chunk on another rank, for a micro-batch the list has */
        for (int g = 0; g < cr.nign && st == SP_OK; g++) {
            const int *e = cr.ign + 5 * g;
            int r = e[0], c = e[2], kind = e[3], b = e[4];
            char name[48];
            snprintf(name, sizeof name, "%d%s", c, COMM_TYPES[kind]);
            if (kind < COMM_WITH_MICRO) snprintf(name + strlen(name), sizeof name - strlen(name), "%d", b);
            int peer = kind == 0 || kind == 3 ? c + 1 : c - 1;   /* SEND_F, RECV_B: the next chunk */
            const char *why = NULL;
            char buf[96];
            if (c >= a->chunks || a->chunk_rank[c] != r)
                why = c >= a->chunks ? "no rank computes its chunk" : "another rank holds its chunk";
            else if (kind < COMM_WITH_MICRO && (peer < 0 || peer >= a->chunks))
                why = peer < 0 ? "chunk 0 has no chunk before it" : "the last chunk has no chunk after it";
            else if (kind < COMM_WITH_MICRO && a->chunk_rank[peer] == r)
                why = (snprintf(buf, sizeof buf, "chunk %d is on the same rank: no message", peer), buf);
            else if (kind < COMM_WITH_MICRO && b >= a->micro)
                why = (snprintf(buf, sizeof buf, "the list has micro-batches 0..%d", a->micro - 1), buf);
            if (why)
                st = sp_error("%s: line %d (rank %d), cell %d: %s does not fit the list's messages (%s)", path, r + 1,
                              r, e[1], name, why);
        }
        if (st != SP_OK) {
            sp_actions_free(a);
            a = NULL;
        }
    }
    free(cr.row_n);
    free(cr.act);
    free(cr.cell);
    free(cr.ign);
    if (st == SP_OK) *out = a;
    return st;
}

void sp_actions_write_csv(FILE *out, const sp_actions *a)
{
    char s[32];
    for (int r = 0; r < a->ranks; r++) {
        for (int k = a->off[r]; k < a->off[r + 1]; k++)
            fprintf(out, "%s%s", k > a->off[r] ? "," : "", sp_action_str(a->act[k], s));
        fputc('\n', out);
    }
}

/* ---- PyTorch's form with communication -------------------------------------------- */

typedef struct tbuf {
    char *s;
    size_t n, cap;
} tbuf;

static void tput(tbuf *b, const char *cell)
{
    size_t l = strlen(cell);
    if (b->n + l + 2 > b->cap) {
        b->cap = 2 * (b->cap + l + 2);
        b->s = sp_xrealloc(b->s, b->cap);
    }
    if (b->n) b->s[b->n++] = ',';
    memcpy(b->s + b->n, cell, l + 1);
    b->n += l;
}

void sp_actions_write_torch(FILE *out, const sp_actions *a)
{
    int R = a->ranks, C = a->chunks, M = a->micro;
    size_t pairs = (size_t)C * (size_t)M;
    /* per (chunk, micro-batch): F run, I/B run, RECV_F and RECV_B placed (on the rank of
     * the chunk, the only one that runs or receives for it) */
    char *f_done = sp_xcalloc(pairs, 1), *b_done = sp_xcalloc(pairs, 1);
    char *recv_f = sp_xcalloc(pairs, 1), *recv_b = sp_xcalloc(pairs, 1);
    int *grads = sp_xcalloc((size_t)C, sizeof(int)), *head = sp_xmalloc(sizeof(int) * (size_t)R);
    tbuf *row = sp_xcalloc((size_t)R, sizeof(tbuf));
    char cell[64];
    for (int r = 0; r < R; r++) head[r] = a->off[r];
    for (bool progress = true; progress;) {
        progress = false;
        /* PyTorch's lowering: one action per rank per sweep, in rank order; a computation
         * waits until its input is on its rank (received, or made there by the
         * neighbouring chunk); its send follows it, the receive goes to the other rank's
         * list at that moment. */
        for (int r = 0; r < R; r++) {
            if (head[r] >= a->off[r + 1]) continue;
            sp_action x = a->act[head[r]];
            size_t at = (size_t)x.chunk * M + (size_t)x.micro;
            bool bwd = x.type == SP_ACT_I || x.type == SP_ACT_B;
            bool ready = true;
            if (x.type == SP_ACT_F && x.chunk > 0)
                ready = recv_f[at] || (f_done[at - M] && a->chunk_rank[x.chunk - 1] == r);
            else if (bwd && x.chunk + 1 < C)
                ready = recv_b[at] || (b_done[at + M] && a->chunk_rank[x.chunk + 1] == r);
            if (!ready) continue;
            tput(&row[r], sp_action_str(x, cell));
            if (x.type == SP_ACT_F) {
                f_done[at] = 1;
                int to = x.chunk + 1 < C ? a->chunk_rank[x.chunk + 1] : r;
                if (to != r) {
                    snprintf(cell, sizeof cell, "%dSEND_F%d", x.chunk, x.micro);
                    tput(&row[r], cell);
                    snprintf(cell, sizeof cell, "%dRECV_F%d", x.chunk + 1, x.micro);
                    tput(&row[to], cell);
                    recv_f[at + M] = 1;
                }
            } else if (bwd) {
                b_done[at] = 1;
                int to = x.chunk > 0 ? a->chunk_rank[x.chunk - 1] : r;
                if (to != r) {
                    snprintf(cell, sizeof cell, "%dSEND_B%d", x.chunk, x.micro);
                    tput(&row[r], cell);
                    snprintf(cell, sizeof cell, "%dRECV_B%d", x.chunk - 1, x.micro);
                    tput(&row[to], cell);
                    recv_b[at - M] = 1;
                }
            }
            /* the gradients of a chunk are reduced after its last W or B */
            if (x.type != SP_ACT_F && x.type != SP_ACT_I && ++grads[x.chunk] == M) {
                snprintf(cell, sizeof cell, "%dREDUCE_GRAD", x.chunk);
                tput(&row[r], cell);
            }
            head[r]++;
            progress = true;
        }
    }
    /* csv.writer's line ends */
    for (int r = 0; r < R; r++) fprintf(out, "%s\r\n", row[r].s ? row[r].s : "");
    for (int r = 0; r < R; r++) free(row[r].s);
    free(row);
    free(f_done);
    free(b_done);
    free(recv_f);
    free(recv_b);
    free(grads);
    free(head);
}
