/* comm_cost.c — the α–β model of communication (comm_cost.h): its piecewise weighted
 * least-squares fit, the time of an operation at any rank count, the probes that measure
 * it on a communicator, and the profile file. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/io/fileio.h"
#include "core/threads.h"
#include "schedulers/plan/limits.h"
#include "schedulers/sim/comm_cost.h"

static const char *const OP_NAMES[SP_COMM_NOPS] = {"p2p", "allreduce", "broadcast", "reduce", "allgather"};

const char *sp_comm_op_name(sp_comm_op op) { return op >= 0 && op < SP_COMM_NOPS ? OP_NAMES[op] : "?"; }

int sp_comm_op_find(const char *name)
{
    for (int i = 0; i < SP_COMM_NOPS; i++)
        if (!strcmp(name, OP_NAMES[i])) return i;
    return -1;
}

/* ---- the fit -------------------------------------------------------------------------- */

/* One segment: minimise Σ ((α + γ·n_i − t_i) / t_i)² with α, γ >= 0 (γ = 1/β). Sizes are
 * scaled by their largest so the normal equations stay well conditioned. */
static sp_comm_seg fit_one(const double *n, const double *t, int k)
{
    double scale = 0;
    for (int i = 0; i < k; i++) scale = n[i] > scale ? n[i] : scale;
    if (scale <= 0) scale = 1;
    double s0 = 0, s1 = 0, s2 = 0, t0 = 0, t1 = 0;
    for (int i = 0; i < k; i++) {
        double w = 1 / (t[i] * t[i]), x = n[i] / scale;
        s0 += w, s1 += w * x, s2 += w * x * x, t0 += w * t[i], t1 += w * x * t[i];
    }
    double det = s0 * s2 - s1 * s1, a, g;
    if (det > 1e-12 * s0 * s2) {
        a = (s2 * t0 - s1 * t1) / det;
        g = (s0 * t1 - s1 * t0) / det;
    } else {   /* one distinct size: latency only */
        a = t0 / s0, g = 0;
    }
    if (g < 0) a = t0 / s0, g = 0;
    if (a < 0) a = 0, g = s2 > 0 ? t1 / s2 : 0;
    if (g < 0) g = 0;
    return (sp_comm_seg){.from_bytes = n[0], .alpha_us = a, .beta = g > 0 ? scale / g : INFINITY};
}

static double seg_time(const sp_comm_seg *s, double bytes) { return s->alpha_us + (isinf(s->beta) ? 0 : bytes / s->beta); }

/* Σ of squared relative errors: what fit_one minimises, and what a split is chosen by. */
static double sq_err(const sp_comm_seg *s, const double *n, const double *t, int k)
{
    double e = 0;
    for (int i = 0; i < k; i++) {
        double r = (seg_time(s, n[i]) - t[i]) / t[i];
        e += r * r;
    }
    return e;
}

/* The fewest probes a segment of a piecewise fit is fitted to. */
#define SEG_MIN_POINTS 2

/* The best split of points [lo, hi) into `segs` ranges of >= SEG_MIN_POINTS (least
 * squares of the relative error over all of them): segments into out, returns that sum
 * (INFINITY when no split fits). */
static double best_split(const double *n, const double *t, int lo, int hi, int segs, sp_comm_seg *out)
{
    if (segs == 1) {
        out[0] = fit_one(n + lo, t + lo, hi - lo);
        return sq_err(&out[0], n + lo, t + lo, hi - lo);
    }
    double best = INFINITY;
    sp_comm_seg tmp[SP_COMM_MAX_SEGS];
    for (int k = lo + SEG_MIN_POINTS; k + SEG_MIN_POINTS * (segs - 1) <= hi; k++) {
        sp_comm_seg first = fit_one(n + lo, t + lo, k - lo);
        double e = sq_err(&first, n + lo, t + lo, k - lo);
        if (e >= best) continue;
        e += best_split(n, t, k, hi, segs - 1, tmp + 1);
        if (e < best) {
            best = e;
            tmp[0] = first;
            memcpy(out, tmp, sizeof(sp_comm_seg) * (size_t)segs);
        }
    }
    return best;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_err(const sp_comm_fit *f, const double *n, const double *t, int k)
{
    double *e = sp_xmalloc(sizeof(double) * (size_t)k);
    for (int i = 0; i < k; i++) e[i] = fabs(sp_comm_fit_time(f, n[i]) - t[i]) / t[i];
    qsort(e, (size_t)k, sizeof *e, cmp_double);
    double m = k % 2 ? e[k / 2] : (e[k / 2 - 1] + e[k / 2]) / 2;
    free(e);
    return m;
}

typedef struct pt { double n, t; } pt;
static int by_bytes(const void *a, const void *b)
{
    double x = ((const pt *)a)->n, y = ((const pt *)b)->n;
    return x < y ? -1 : x > y;
}

int sp_comm_fit_ab(const double *bytes, const double *us, int n, int max_segs, sp_comm_fit *out)
{
    if (n < 2) return sp_error("comm fit: %d probe sizes (expected at least 2)", n);
    for (int i = 0; i < n; i++)
        if (!(us[i] > 0) || !isfinite(us[i]) || !(bytes[i] >= 0) || !isfinite(bytes[i]))
            return sp_error("comm fit: probe %d: %g bytes in %g us (expected bytes >= 0 and a time > 0)", i, bytes[i],
                            us[i]);
    pt *p = sp_xmalloc(sizeof *p * (size_t)n);
    for (int i = 0; i < n; i++) p[i] = (pt){bytes[i], us[i]};
    qsort(p, (size_t)n, sizeof *p, by_bytes);
    double *x = sp_xmalloc(sizeof(double) * 2 * (size_t)n), *t = x + n;
    for (int i = 0; i < n; i++) x[i] = p[i].n, t[i] = p[i].t;
    free(p);
    int ranks = out->ranks;
    *out = (sp_comm_fit){.ranks = ranks, .nsegs = 1};
    double err = best_split(x, t, 0, n, 1, out->seg);
    if (max_segs > SP_COMM_MAX_SEGS) max_segs = SP_COMM_MAX_SEGS;
    for (int s = 2; s <= max_segs && SEG_MIN_POINTS * s <= n; s++) {
        sp_comm_seg seg[SP_COMM_MAX_SEGS];
        double e = best_split(x, t, 0, n, s, seg);
        if (e < 0.9 * err) {   /* a break point must earn its place */
            err = e;
            out->nsegs = s;
            memcpy(out->seg, seg, sizeof(sp_comm_seg) * (size_t)s);
        }
    }
    out->seg[0].from_bytes = 0;
    out->max_rel_err = 0;
    for (int i = 0; i < n; i++) out->max_rel_err = fmax(out->max_rel_err, fabs(sp_comm_fit_time(out, x[i]) - t[i]) / t[i]);
    out->median_rel_err = median_err(out, x, t, n);
    free(x);
    return SP_OK;
}

double sp_comm_fit_time(const sp_comm_fit *f, double bytes)
{
    if (f->nsegs < 1) return NAN;
    int s = 0;
    while (s + 1 < f->nsegs && bytes >= f->seg[s + 1].from_bytes) s++;
    return seg_time(&f->seg[s], bytes);
}

/* Latency steps and bandwidth factor of the textbook algorithm of op on P ranks. */
static void algo_steps(sp_comm_op op, int P, double *lat, double *bw)
{
    double lg = ceil(log2((double)P));
    switch (op) {
    case SP_COMM_ALLREDUCE: *lat = 2.0 * (P - 1), *bw = 2.0 * (P - 1) / P; break;
    case SP_COMM_BROADCAST:
    case SP_COMM_REDUCE: *lat = lg, *bw = lg; break;
    case SP_COMM_ALLGATHER: *lat = P - 1, *bw = P - 1; break;
    default: *lat = *bw = 1; break;
    }
}

double sp_comm_time(const sp_comm_model *m, sp_comm_op op, double bytes, int ranks)
{
    if (!m || op < 0 || op >= SP_COMM_NOPS) return NAN;
    const sp_comm_fit *f = &m->fit[op];
    if (f->ranks < 1 || f->nsegs < 1) return NAN;
    if (op != SP_COMM_P2P && ranks <= 1) return 0;
    if (op == SP_COMM_P2P || ranks == f->ranks || f->ranks < 2) return sp_comm_fit_time(f, bytes);
    int s = 0;
    while (s + 1 < f->nsegs && bytes >= f->seg[s + 1].from_bytes) s++;
    double lw, bw, lp, bp;
    algo_steps(op, f->ranks, &lw, &bw);
    algo_steps(op, ranks, &lp, &bp);
    const sp_comm_seg *g = &f->seg[s];
    return g->alpha_us * lp / lw + (isinf(g->beta) ? 0 : bytes / g->beta * bp / bw);
}

/* ---- measuring -------------------------------------------------------------------------- */

/* µs of one repetition of op on `floats` floats, on rank 0 (other ranks: 0). */
static double time_op(sp_comm *c, sp_comm_op op, float *buf, float *out, size_t floats)
{
    int rank = sp_comm_rank(c);
    sp_req r;
    sp_barrier(c);
    double t0 = sp_now();
    switch (op) {
    case SP_COMM_P2P:   /* a ping-pong between ranks 0 and 1: half the round trip */
        if (rank == 0) {
            sp_isend(c, buf, floats, 1, 7001, &r), sp_wait(&r);
            sp_irecv(c, buf, floats, 1, 7002, &r), sp_wait(&r);
        } else if (rank == 1) {
            sp_irecv(c, buf, floats, 0, 7001, &r), sp_wait(&r);
            sp_isend(c, buf, floats, 0, 7002, &r), sp_wait(&r);
        }
        return rank == 0 ? (sp_now() - t0) * 1e6 / 2 : 0;
    case SP_COMM_ALLREDUCE: sp_iallreduce(c, buf, floats, &r); break;
    case SP_COMM_BROADCAST: sp_ibroadcast(c, buf, floats, 0, &r); break;
    case SP_COMM_REDUCE: sp_ireduce(c, buf, floats, 0, &r); break;
    case SP_COMM_ALLGATHER: sp_iallgather(c, buf, out, floats, &r); break;
    default: return 0;
    }
    sp_wait(&r);
    return (sp_now() - t0) * 1e6;
}

sp_comm_model *sp_comm_model_measure(sp_comm *c, const sp_comm_probe_cfg *cfg)
{
    double t_start = sp_now();
    sp_comm_probe_cfg k = cfg ? *cfg : (sp_comm_probe_cfg){0};
    if (!(k.min_bytes > 0)) k.min_bytes = 4;
    if (!(k.max_bytes > 0)) k.max_bytes = 25.0 * 1024 * 1024;
    if (!(k.factor > 1)) k.factor = 4;
    if (k.reps < 1) k.reps = 7;
    if (!k.ops) k.ops = (1u << SP_COMM_NOPS) - 1;
    int P = sp_comm_size(c);
    sp_comm_model *m = sp_xcalloc(1, sizeof *m);
    snprintf(m->source, sizeof m->source, "probe");
    if (P < 2) return m;
    /* the sizes: min, min·factor, …, and max itself (whole floats) */
    int ns = 0;
    double sizes[64];
    for (double b = k.min_bytes; b < k.max_bytes && ns < 63; b *= k.factor) sizes[ns++] = b;
    sizes[ns++] = k.max_bytes;
    size_t maxf = (size_t)(k.max_bytes / 4) + 1;
    float *buf = sp_xcalloc(maxf, sizeof *buf), *out = sp_xcalloc(maxf * (size_t)P, sizeof *out);
    double *rep = sp_xmalloc(sizeof(double) * (size_t)k.reps);
    m->probes = sp_xcalloc((size_t)(SP_COMM_NOPS * ns), sizeof *m->probes);
    for (int op = 0; op < SP_COMM_NOPS; op++) {
        if (!(k.ops & (1u << op))) continue;
        for (int i = 0; i < ns; i++) {
            size_t floats = (size_t)(sizes[i] / 4);
            if (floats < 1) floats = 1;
            (void)time_op(c, (sp_comm_op)op, buf, out, floats);   /* warm-up: buffers, connections */
            for (int r = 0; r < k.reps; r++) rep[r] = time_op(c, (sp_comm_op)op, buf, out, floats);
            qsort(rep, (size_t)k.reps, sizeof *rep, cmp_double);
            m->probes[m->nprobes++] = (sp_comm_probe){op, op == SP_COMM_P2P ? 2 : P, 4.0 * (double)floats,
                                                      rep[k.reps / 2]};
        }
    }
    /* every rank takes rank 0's timings (floats: a µs figure needs no more) */
    float *v = sp_xmalloc(sizeof(float) * (size_t)(m->nprobes ? m->nprobes : 1));
    for (int i = 0; i < m->nprobes; i++) v[i] = (float)m->probes[i].us;
    sp_broadcast(c, v, (size_t)m->nprobes, 0);
    for (int i = 0; i < m->nprobes; i++) m->probes[i].us = v[i] > 0 ? v[i] : 1e-3;
    free(v);
    double *x = sp_xmalloc(sizeof(double) * 2 * (size_t)ns), *t = x + ns;
    for (int op = 0; op < SP_COMM_NOPS; op++) {
        int n = 0, ranks = 0;
        for (int i = 0; i < m->nprobes; i++)
            if (m->probes[i].op == op) x[n] = m->probes[i].bytes, t[n++] = m->probes[i].us, ranks = m->probes[i].ranks;
        if (n < 2) continue;
        m->fit[op].ranks = ranks;
        if (sp_comm_fit_ab(x, t, n, SP_COMM_MAX_SEGS, &m->fit[op]) != SP_OK) sp_fail("%s", sp_last_error());
    }
    free(x);
    free(rep);
    free(buf);
    free(out);
    m->probe_ms = (sp_now() - t_start) * 1e3;
    return m;
}

sp_comm_model *sp_comm_model_quick(sp_comm *c)
{
    return sp_comm_model_measure(c, &(sp_comm_probe_cfg){.min_bytes = 4, .max_bytes = 1 << 18, .factor = 8,
                                                         .reps = 3,
                                                         .ops = (1u << SP_COMM_P2P) | (1u << SP_COMM_ALLREDUCE)});
}

void sp_comm_model_free(sp_comm_model *m)
{
    if (!m) return;
    free(m->probes);
    free(m);
}

/* ---- the profile file ------------------------------------------------------------------- */

void sp_comm_model_print_csv(FILE *f, const sp_comm_model *m)
{
    fprintf(f, "# scanprop communication profile: t(bytes) = alpha_us + bytes / beta_bytes_per_us per segment "
               "(schedulers/sim/comm_cost.h)\n");
    fprintf(f, "row,op,ranks,bytes,alpha_us,beta_bytes_per_us,us\n");
    for (int op = 0; op < SP_COMM_NOPS; op++) {
        const sp_comm_fit *g = &m->fit[op];
        if (g->ranks < 1) continue;
        fprintf(f, "# %s: relative error on its probes: median %.1f%%, worst %.1f%%\n", OP_NAMES[op],
                100 * g->median_rel_err, 100 * g->max_rel_err);
        for (int s = 0; s < g->nsegs; s++)
            fprintf(f, "fit,%s,%d,%.0f,%.6g,%.6g,\n", OP_NAMES[op], g->ranks, g->seg[s].from_bytes, g->seg[s].alpha_us,
                    isinf(g->seg[s].beta) ? INFINITY : g->seg[s].beta);
    }
    for (int i = 0; i < m->nprobes; i++)
        fprintf(f, "probe,%s,%d,%.0f,,,%.6g\n", OP_NAMES[m->probes[i].op], m->probes[i].ranks, m->probes[i].bytes,
                m->probes[i].us);
}

int sp_comm_model_write(const sp_comm_model *m, const char *path)
{
    sp_out out;
    if (sp_out_open(&out, path, "--calibrate-comm") != SP_OK) return SP_ERR;
    sp_comm_model_print_csv(out.f, m);
    return sp_out_commit(&out);
}

/* A field as a number: "" → NAN when empty is allowed, else an error. */
static int num(const char *s, double *v, bool empty_ok)
{
    if (!*s) {
        *v = NAN;
        return empty_ok ? 0 : -1;
    }
    char *end;
    *v = strtod(s, &end);
    return *end ? -1 : 0;
}

static const char *const COLS[] = {"row", "op", "ranks", "bytes", "alpha_us", "beta_bytes_per_us", "us"};
enum { NCOLS = 7 };

static int parse_row(sp_comm_model *m, char *line, const char *path, int ln)
{
    char *f[NCOLS];
    int n = 0;
    for (char *p = line;; p++) {
        if (n == NCOLS) return sp_error("%s:%d: more than %d fields (expected %s,...)", path, ln, NCOLS, COLS[0]);
        f[n++] = p;
        p += strcspn(p, ",");
        if (!*p) break;
        *p = 0;
    }
    if (n != NCOLS) return sp_error("%s:%d: %d fields (expected %d: row,op,ranks,bytes,alpha_us,beta_bytes_per_us,us)",
                                    path, ln, n, NCOLS);
    int op = sp_comm_op_find(f[1]);
    if (op < 0) return sp_error("%s:%d: op '%s' (expected p2p|allreduce|broadcast|reduce|allgather)", path, ln, f[1]);
    double ranks, bytes, a, b, us;
    if (num(f[2], &ranks, false) || ranks != floor(ranks) || ranks < 1 || ranks > 1e6)
        return sp_error("%s:%d: ranks '%s' (expected an integer >= 1)", path, ln, f[2]);
    if (num(f[3], &bytes, false) || !(bytes >= 0) || !isfinite(bytes))
        return sp_error("%s:%d: bytes '%s' (expected a finite number >= 0)", path, ln, f[3]);
    char what[96];   /* the bounds every caller shares (schedulers/plan/limits.h) */
    snprintf(what, sizeof what, "%s:%d: bytes", path, ln);
    if (sp_limit_bytes(what, bytes) != SP_OK) return SP_ERR;
    sp_comm_fit *g = &m->fit[op];
    if (g->ranks && g->ranks != (int)ranks && strcmp(f[0], "fit") == 0)
        return sp_error("%s:%d: %s measured with %d ranks here, %d above (expected one rank count per op)", path, ln,
                        f[1], (int)ranks, g->ranks);
    if (!strcmp(f[0], "fit")) {
        if (num(f[4], &a, false) || !(a >= 0) || !isfinite(a))
            return sp_error("%s:%d: alpha_us '%s' (expected a finite number >= 0)", path, ln, f[4]);
        if (num(f[5], &b, false) || !(b > 0))
            return sp_error("%s:%d: beta_bytes_per_us '%s' (expected a number > 0, inf for none)", path, ln, f[5]);
        snprintf(what, sizeof what, "%s:%d: alpha_us", path, ln);
        if (sp_limit_time(what, a) != SP_OK) return SP_ERR;
        snprintf(what, sizeof what, "%s:%d: beta_bytes_per_us", path, ln);
        if (!isinf(b) && sp_limit_bandwidth(what, b) != SP_OK) return SP_ERR;
        if (g->nsegs == SP_COMM_MAX_SEGS)
            return sp_error("%s:%d: a %d-th segment of %s (expected at most %d)", path, ln, g->nsegs + 1, f[1],
                            SP_COMM_MAX_SEGS);
        if (g->nsegs == 0 ? bytes != 0 : bytes <= g->seg[g->nsegs - 1].from_bytes)
            return sp_error("%s:%d: %s segment from %s bytes (expected %s)", path, ln, f[1], f[3],
                            g->nsegs == 0 ? "the first from 0" : "increasing bytes");
        g->ranks = (int)ranks;
        g->seg[g->nsegs++] = (sp_comm_seg){bytes, a, b};
    } else if (!strcmp(f[0], "probe")) {
        if (num(f[6], &us, false) || !(us > 0) || !isfinite(us))
            return sp_error("%s:%d: us '%s' (expected a finite time > 0)", path, ln, f[6]);
        snprintf(what, sizeof what, "%s:%d: us", path, ln);
        if (sp_limit_time(what, us) != SP_OK) return SP_ERR;
        m->probes = sp_xrealloc(m->probes, sizeof *m->probes * (size_t)(m->nprobes + 1));
        m->probes[m->nprobes++] = (sp_comm_probe){op, (int)ranks, bytes, us};
    } else {
        return sp_error("%s:%d: row '%s' (expected fit or probe)", path, ln, f[0]);
    }
    return SP_OK;
}

int sp_comm_model_load(const char *path, sp_comm_model **out)
{
    *out = NULL;
    FILE *f = sp_open_text(path, "--comm-profile");
    if (!f) return SP_ERR;
    sp_comm_model *m = sp_xcalloc(1, sizeof *m);
    snprintf(m->source, sizeof m->source, "%s", path);
    char line[512];
    int ln = 0, rc = SP_OK;
    bool header = false;
    while (rc == SP_OK && fgets(line, sizeof line, f)) {
        ln++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n') {
            rc = sp_error("%s:%d: a line longer than %zu characters", path, ln, sizeof line - 2);
            break;
        }
        while (len && isspace((unsigned char)line[len - 1])) line[--len] = 0;
        if (!len || line[0] == '#') continue;
        if (!header) {
            if (strcmp(line, "row,op,ranks,bytes,alpha_us,beta_bytes_per_us,us"))
                rc = sp_error("%s:%d: header '%s' (expected row,op,ranks,bytes,alpha_us,beta_bytes_per_us,us)", path,
                              ln, line);
            header = true;
            continue;
        }
        rc = parse_row(m, line, path, ln);
    }
    fclose(f);
    int fits = 0;
    for (int op = 0; op < SP_COMM_NOPS; op++) fits += m->fit[op].nsegs > 0;
    if (rc == SP_OK && !fits) rc = sp_error("%s: no fit rows (expected at least one: fit,op,ranks,0,alpha,beta,)", path);
    for (int op = 0; rc == SP_OK && op < SP_COMM_NOPS; op++) {   /* the fit's error on the file's probes */
        sp_comm_fit *g = &m->fit[op];
        double *x = sp_xmalloc(sizeof(double) * 2 * (size_t)(m->nprobes + 1)), *t = x + m->nprobes + 1;
        int k = 0;
        for (int i = 0; i < m->nprobes; i++)
            if (m->probes[i].op == op && m->probes[i].ranks == g->ranks) x[k] = m->probes[i].bytes, t[k++] = m->probes[i].us;
        for (int i = 0; i < k && g->nsegs; i++) {
            double e = fabs(sp_comm_fit_time(g, x[i]) - t[i]) / t[i];
            g->max_rel_err = e > g->max_rel_err ? e : g->max_rel_err;
        }
        if (k && g->nsegs) g->median_rel_err = median_err(g, x, t, k);
        free(x);
    }
    if (rc != SP_OK) {
        sp_comm_model_free(m);
        return SP_ERR;
    }
    *out = m;
    return SP_OK;
}

void sp_comm_model_summary(const sp_comm_model *m, char *buf, size_t len)
{
    size_t k = 0;
    buf[0] = 0;
    for (int op = 0; op < SP_COMM_NOPS && k < len; op++) {
        const sp_comm_fit *g = &m->fit[op];
        if (g->nsegs < 1) continue;
        const sp_comm_seg *last = &g->seg[g->nsegs - 1];
        int w = snprintf(buf + k, len - k, "%s%s (%d ranks) alpha %.3g us, beta %.3g B/us", k ? "; " : "",
                         OP_NAMES[op], g->ranks, g->seg[0].alpha_us, last->beta);
        if (w < 0 || (size_t)w >= len - k) break;
        k += (size_t)w;
        if (g->nsegs > 1) {
            w = snprintf(buf + k, len - k, " (%d segments)", g->nsegs);
            if (w < 0 || (size_t)w >= len - k) break;
            k += (size_t)w;
        }
        w = snprintf(buf + k, len - k, ", error median %.0f%% worst %.0f%%", 100 * g->median_rel_err,
                     100 * g->max_rel_err);
        if (w < 0 || (size_t)w >= len - k) break;
        k += (size_t)w;
    }
}

/* ---- topology ---------------------------------------------------------------------------- */

int sp_comm_topology_check(const sp_comm_topology *t, const char *what)
{
    if (t->nodes < 1 || t->ranks_per_node < 1)
        return sp_error("%s: %d nodes of %d ranks (expected at least 1 of each)", what, t->nodes, t->ranks_per_node);
    const sp_comm_link *l[2] = {&t->intra, &t->inter};
    const char *name[2] = {"intra", "inter"};
    for (int i = 0; i < 2; i++) {
        if (!(l[i]->alpha_us >= 0) || !isfinite(l[i]->alpha_us))
            return sp_error("%s: %s-node latency %g us (expected a finite number >= 0)", what, name[i], l[i]->alpha_us);
        if (!(l[i]->beta > 0) || !isfinite(l[i]->beta))
            return sp_error("%s: %s-node bandwidth %g B/us (expected a finite number > 0)", what, name[i], l[i]->beta);
        char w[64];   /* the bounds every caller shares (schedulers/plan/limits.h) */
        snprintf(w, sizeof w, "%s: --%s-latency-us", what, name[i]);
        if (sp_limit_time(w, l[i]->alpha_us) != SP_OK) return SP_ERR;
        snprintf(w, sizeof w, "%s: %s-node bandwidth", what, name[i]);
        if (sp_limit_bandwidth(w, l[i]->beta) != SP_OK) return SP_ERR;
    }
    return SP_OK;
}

int sp_comm_topology_node(const sp_comm_topology *t, int rank) { return rank / t->ranks_per_node; }

static double link_time(const sp_comm_link *l, double bytes) { return l->alpha_us + bytes / l->beta; }

double sp_comm_time_ranks(const sp_comm_model *m, sp_comm_op op, double bytes, const int *ranks, int first, int n,
                          const sp_comm_topology *t)
{
    if (op < 0 || op >= SP_COMM_NOPS || n < 1) return NAN;
    if (op == SP_COMM_P2P && n != 2) return NAN;
    if (!t || t->nodes < 1) return sp_comm_time(m, op, bytes, n);
    if (op != SP_COMM_P2P && n == 1) return 0;
    /* k nodes spanned, at most m ranks on one of them */
    int total = t->nodes * t->ranks_per_node, k = 0, most = 0;
    int *per = sp_xcalloc((size_t)t->nodes, sizeof *per);
    for (int i = 0; i < n; i++) {
        int r = ranks ? ranks[i] : first + i;
        if (r < 0 || r >= total) {
            free(per);
            return NAN;
        }
        int c = ++per[sp_comm_topology_node(t, r)];
        k += c == 1;
        most = c > most ? c : most;
    }
    free(per);
    const sp_comm_link *li = &t->intra, *le = &t->inter;
    double N = n, K = k, M = most;
    if (op == SP_COMM_P2P) return link_time(k == 1 ? li : le, bytes);
    if (k == 1) {
        switch (op) {
        case SP_COMM_ALLREDUCE: return 2 * (N - 1) * link_time(li, bytes / N);
        case SP_COMM_BROADCAST:
        case SP_COMM_REDUCE: return ceil(log2(N)) * link_time(li, bytes);
        default: return (N - 1) * link_time(li, bytes);
        }
    }
    switch (op) {
    case SP_COMM_ALLREDUCE: {
        double flat = 2 * (N - 1) * link_time(le, bytes / N);
        double hier = 2 * (M - 1) * link_time(li, bytes / M) + 2 * (K - 1) * link_time(le, bytes / K);
        return fmin(flat, hier);
    }
    case SP_COMM_BROADCAST:
    case SP_COMM_REDUCE: return ceil(log2(K)) * link_time(le, bytes) + ceil(log2(M)) * link_time(li, bytes);
    default: return (N - 1) * link_time(le, bytes);
    }
}
