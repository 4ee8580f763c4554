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
    free(a);
}

static int key_of(const sp_actions *a, int chunk, int micro, int type)
{
    return ((chunk * a->micro) + micro) * 4 + type;
}

/* pos[key] = the action's index in act[], or -1; rank_of[k] = the rank running act[k].
 * Fills both (caller frees) after the structural checks; SP_ERR names the first fault. */
static int index_list(const sp_actions *a, int **pos_out, int **rank_out)
{
    char s1[32], s2[32];
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
            int at = k - a->off[r] + 1;
            if (x.type < SP_ACT_F || x.type > SP_ACT_B) {
                st = sp_error("rank %d: action %d has type %d (expected F, I, W or B)", r, at, (int)x.type);
                break;
            }
            if (x.chunk < 0 || x.chunk >= a->chunks || x.micro < 0 || x.micro >= a->micro) {
                st = sp_error("rank %d: action %s (position %d) is out of range (the list has chunks 0..%d, "
                              "micro-batches 0..%d)", r, sp_action_str(x, s1), at, a->chunks - 1, a->micro - 1);
                break;
            }
            if (a->chunk_rank[x.chunk] < 0) {
                st = sp_error("rank %d: action %s: chunk %d is assigned to no rank", r, sp_action_str(x, s1), x.chunk);
                break;
            }
            if (a->chunk_rank[x.chunk] != r) {
                st = sp_error("rank %d: action %s: chunk %d is on rank %d too (a chunk on two ranks)", r,
                              sp_action_str(x, s1), x.chunk, a->chunk_rank[x.chunk]);
                break;
            }
            int key = key_of(a, x.chunk, x.micro, x.type);
            if (pos[key] >= 0) {
                int r0 = 0;
                while (a->off[r0 + 1] <= pos[key]) r0++;
                st = sp_error("rank %d: action %s repeated (at position %d, and at position %d of rank %d)", r,
                              sp_action_str(x, s1), at, pos[key] - a->off[r0] + 1, r0);
                break;
            }
            pos[key] = k;
        }
    for (int c = 0; c < a->chunks && st == SP_OK; c++)
        for (int b = 0; b < a->micro && st == SP_OK; b++) {
            int r = a->chunk_rank[c];
            sp_action f = {c, b, SP_ACT_F}, i = {c, b, SP_ACT_I}, w = {c, b, SP_ACT_W}, bb = {c, b, SP_ACT_B};
            int hf = pos[key_of(a, c, b, SP_ACT_F)] >= 0, hi = pos[key_of(a, c, b, SP_ACT_I)] >= 0;
            int hw = pos[key_of(a, c, b, SP_ACT_W)] >= 0, hb = pos[key_of(a, c, b, SP_ACT_B)] >= 0;
            if (r < 0)
                st = sp_error("action %s missing (no rank holds chunk %d)", sp_action_str(f, s1), c);
            else if (!hf)
                st = sp_error("rank %d: action %s missing (every chunk runs every micro-batch's forward)", r,
                              sp_action_str(f, s1));
            else if (hb && (hi || hw))
                st = sp_error("rank %d: action %s and %s both present (B is I and W together)", r,
                              sp_action_str(bb, s1), sp_action_str(hi ? i : w, s2));
            else if (!hb && !hi && !hw)
                st = sp_error("rank %d: action %s missing (or %s and its W)", r, sp_action_str(bb, s1),
                              sp_action_str(i, s2));
            else if (hi && !hw)
                st = sp_error("rank %d: action %s without %s (I without W)", r, sp_action_str(i, s1),
                              sp_action_str(w, s2));
            else if (hw && !hi)
                st = sp_error("rank %d: action %s without %s (W without I)", r, sp_action_str(w, s1),
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
    char s1[32], s2[32];
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
        st = sp_error("rank %d: action %s waits for %s, which no rank can run first (%s comes later in rank %d's "
                      "own list)", r, sp_action_str(a->act[k], s1), sp_action_str(a->act[wait[r]], s2), s2, r);
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
        st = sp_error("rank %d: action %s waits for %s, which no rank can run first: a cycle between ranks (%s)", r,
                      sp_action_str(a->act[k], s1), sp_action_str(a->act[wait[r]], s2), chain);
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

/* "<chunk><F|I|W|B><micro>" with nothing around it (the caller trims blanks). */
static int parse_cell(const char *s, sp_action *out)
{
    long v[2];
    int t = -1;
    for (int part = 0; part < 2; part++) {
        if (!isdigit((unsigned char)*s)) return 0;
        v[part] = 0;
        while (isdigit((unsigned char)*s)) {
            v[part] = v[part] * 10 + (*s++ - '0');
            if (v[part] > ACT_MAX_INDEX) return -1;
        }
        if (part == 0) {
            const char *p = *s ? strchr("FIWB", *s) : NULL;
            if (!p) return 0;
            t = (int)(p - "FIWB");
            s++;
        }
    }
    if (*s) return 0;
    out->chunk = (int)v[0];
    out->micro = (int)v[1];
    out->type = (sp_act_type)t;
    return 1;
}

typedef struct csv_rows {
    int rows, cap;
    int *row_n;            /* actions per row          */
    sp_action *act;        /* all rows, in row order   */
    int n, acap;
} csv_rows;

static int read_rows(FILE *f, const char *path, csv_rows *cr)
{
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    int st = SP_OK;
    while (st == SP_OK && (len = getline(&line, &lcap, f)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (cr->rows == cr->cap) {
            cr->cap = cr->cap ? 2 * cr->cap : 8;
            cr->row_n = sp_xrealloc(cr->row_n, sizeof(int) * (size_t)cr->cap);
        }
        int row = cr->rows++;
        cr->row_n[row] = 0;
        int cell = 0;
        for (char *p = line, *end; st == SP_OK; p = end + 1) {
            end = strchr(p, ',');
            if (end) *end = 0;
            cell++;
            while (*p == ' ' || *p == '\t') p++;
            size_t l = strlen(p);
            while (l > 0 && (p[l - 1] == ' ' || p[l - 1] == '\t')) p[--l] = 0;
            if (l > 0) {
                sp_action x;
                int ok = parse_cell(p, &x);
                if (ok < 0)
                    st = sp_error("%s: row %d, cell %d: \"%.40s\": an index above %d", path, row + 1, cell, p,
                                  ACT_MAX_INDEX);
                else if (ok == 0)
                    st = sp_error("%s: row %d, cell %d: \"%.40s\" is not an action (expected "
                                  "<chunk><F|I|W|B><micro-batch>, e.g. 0F0, or an empty cell)", path, row + 1,
                                  cell, p);
                else {
                    if (cr->n == cr->acap) {
                        cr->acap = cr->acap ? 2 * cr->acap : 64;
                        cr->act = sp_xrealloc(cr->act, sizeof(sp_action) * (size_t)cr->acap);
                    }
                    cr->act[cr->n++] = x;
                    cr->row_n[row]++;
                }
            }
            if (!end) break;
        }
    }
    free(line);
    if (st == SP_OK && ferror(f)) st = sp_error("%s: read failed", path);
    return st;
}

int sp_actions_read_csv(const char *path, sp_actions **out)
{
    if (!path || !out) return sp_error("sp_actions_read_csv: NULL %s", path ? "out" : "path");
    FILE *f = sp_open_read(path, "action list");
    if (!f) return SP_ERR;
    csv_rows cr = {0};
    int st = read_rows(f, path, &cr);
    fclose(f);
    if (st == SP_OK && cr.n == 0) st = sp_error("%s: no actions (expected one row per rank, e.g. 0F0,0I0,0W0)", path);
    sp_actions *a = NULL;
    if (st == SP_OK) {
        int chunks = 0, micro = 0;
        for (int k = 0; k < cr.n; k++) {
            if (cr.act[k].chunk >= chunks) chunks = cr.act[k].chunk + 1;
            if (cr.act[k].micro >= micro) micro = cr.act[k].micro + 1;
        }
        a = sp_actions_new(cr.rows, chunks, micro, cr.n);
        for (int r = 0, k = 0; r < cr.rows; r++)
            for (int j = 0; j < cr.row_n[r]; j++) sp_actions_push(a, r, cr.act[k++]);
        if (sp_actions_simulate(a, NULL, NULL) != SP_OK) {
            st = sp_error_prefix("%s", path);
            sp_actions_free(a);
            a = NULL;
        }
    }
    free(cr.row_n);
    free(cr.act);
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
