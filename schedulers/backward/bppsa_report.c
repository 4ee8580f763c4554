/* bppsa_report.c — what the bppsa engine shows of its plan (schedulers/backward/bppsa.c):
 * --plan's figures (links, levels, FLOPs, the device's launches, memory; --plan-full adds
 * every step) on stdout, and --plan-svg's drawing of the scan tree. Nothing here changes
 * the plan or the step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "core/error.h"
#include "core/io/fileio.h"
#include "core/threads.h"
#include "schedulers/backward/bppsa_internal.h"

/* ---- the figures (--plan) ------------------------------------------------------------ */

/* A byte count for people: KiB, MiB or GiB. */
static const char *fmt_bytes(char *buf, size_t len, size_t bytes)
{
    if (bytes >= (size_t)1 << 30) snprintf(buf, len, "%.2f GiB", (double)bytes / (double)(1 << 30));
    else if (bytes >= (size_t)1 << 20) snprintf(buf, len, "%.1f MiB", (double)bytes / (double)(1 << 20));
    else snprintf(buf, len, "%.1f KiB", (double)bytes / 1024.0);
    return buf;
}

void bppsa_print_device_plan(const bppsa_state *s)
{
    const sp_scan_plan *p = &s->plan;
    int B = s->stats.batch, total = 0;
    size_t all = 0;
    double time = 0;
    char buf[32], mv[32];
    sp_bppsa_gpu_model g = sp_bppsa_gpu_model_get();
    printf("device plan (batch %d): level: launches, bytes written, bytes moved, FLOP (CSR·CSR), modelled time\n", B);
    for (int k = 0; k < p->nsteps;) {
        int level = p->steps[k].level;
        dev_level d;
        k = bppsa_device_level(s, k, B, &g, &d);
        if (!d.launches) continue;
        printf("  level %d: %d launch%s, %s, %s moved, %.3g FLOP (%.3g), %.3g us\n", level, d.launches,
               d.launches == 1 ? "" : "es", fmt_bytes(buf, sizeof buf, d.written), fmt_bytes(mv, sizeof mv, (size_t)d.moved),
               d.flops + d.sp_flops, d.sp_flops, 1e6 * d.seconds);
        total += d.launches;
        all += d.written;
        time += d.seconds;
    }
    printf("device plan: %d product launches in all, %s of products, modelled %.3g ms on %s (launch %.3g us, GEMM "
           "%.3g TFLOP/s, SpGEMM %.3g GFLOP/s, memory %.3g GB/s); Jt: one launch per op (two where a CSR Jt is "
           "expanded dense)\n",
           total, fmt_bytes(buf, sizeof buf, all), 1e3 * time, g.name, 1e6 * g.launch_s, g.gemm_flops / 1e12,
           g.spgemm_flops / 1e9, g.bandwidth / 1e9);
    if (!s->auto_time) return;
    /* why auto chose its depth: the two ends and the choice, launches against work */
    int K = p->up_levels, F = s->auto_n - 1;
    printf("device auto: chose K=%d%s, %.3g ms modelled (%d launches = %.3g ms, arithmetic and memory %.3g ms)", K,
           K == F ? " (the full scan)" : K == 0 ? " (linear BP's order)" : "", 1e3 * s->auto_time[K],
           s->auto_launches[K], 1e3 * s->auto_launch_time[K], 1e3 * (s->auto_time[K] - s->auto_launch_time[K]));
    for (int j = 0; j <= F; j += F > 0 ? F : 1)
        if (j != K)
            printf("; K=%d: %.3g ms (%d launches = %.3g ms, work %.3g ms)", j, 1e3 * s->auto_time[j],
                   s->auto_launches[j], 1e3 * s->auto_launch_time[j], 1e3 * (s->auto_time[j] - s->auto_launch_time[j]));
    printf(": %s\n", K == F   ? "fewer levels save more launch latency than the extra products cost"
                      : K == 0 ? "the scan's extra products cost more than the launches they save"
                               : "deeper levels' products cost more than the launches they save");
}

/* What a[i] (i = 1..n) holds: the Jᵀ of the op sp_node_label names, at time step t for a
 * recurrent op ("rnn[t=3]"). */
static const char *link_label(const link *L, char *buf, size_t len)
{
    char name[SP_NAME_LEN + 16];
    sp_node_label(L->node, name, sizeof name);
    if (bppsa_scans_time(L->node)) snprintf(buf, len, "%s[t=%d]", name, L->t);
    else snprintf(buf, len, "%s", name);
    return buf;
}

void bppsa_print_plan(const bppsa_state *s, bool full)
{
    const sp_scan_plan *p = &s->plan;
    const sp_bppsa_stats *st = &s->stats;
    printf("bppsa plan: n = %d links, %d up-sweep levels (full: %d), batch %d\n", s->n, p->up_levels,
           st->full_levels, st->batch);
    if (full) {
        printf("a[1..%d] = Jt of:", s->n);
        for (int i = 0; i < s->n; i++) {
            char name[SP_NAME_LEN + 32];
            printf(" %s", link_label(&s->links[i], name, sizeof name));
        }
        printf("\n");
        printf("%5s %-8s %5s %5s  %-26s %14s %s\n", "level", "kind", "l", "r", "result", "FLOP/sample", "critical");
        for (int k = 0, level_start = 0; k < p->nsteps; k++) {
            const sp_scan_step *sc = &p->steps[k];
            if (k > 0 && sc->level != p->steps[k - 1].level) level_start = k;
            static double lvl_max;
            if (k == level_start) {
                lvl_max = 0;
                for (int j = k; j < p->nsteps && p->steps[j].level == sc->level; j++)
                    lvl_max = fmax(lvl_max, s->steps[j].flops);
            }
            const step_info *si = &s->steps[k];
            static const char *kinds[] = {"up", "identity", "carry", "down"};
            char res[64] = "-";
            if (si->skip) {
                snprintf(res, sizeof res, "skipped (a[n] unused)");
            } else if (sc->kind != SP_SCAN_IDENTITY) {
                int len = snprintf(res, sizeof res, "%s %dx%d%s", bppsa_kind_name(si->out.kind), si->out.rows,
                                   si->out.kind == EL_VEC ? 1 : si->out.cols, sc->product ? "" : " (move)");
                if (si->out.kind == EL_CSR)
                    snprintf(res + len, sizeof res - (size_t)len, " nnz %lld", (long long)si->out.nnz);
            }
            bool crit = si->flops > 0 && si->flops == lvl_max;
            printf("%5d %-8s %5d %5d  %-26s %14.0f %s\n", sc->level, kinds[sc->kind], sc->l, sc->r, res, si->flops,
                   crit ? "*" : "");
        }
    }
    printf("sequential levels: bppsa %d vs linear BP %d (longest product chain %d); matrix-matrix products %d\n",
           st->levels, st->linear_levels, st->chain_depth, st->matmat);
    printf("FLOP per sample: bppsa total %.0f, critical path %.0f; linear BP %.0f (bppsa does %.1fx the work)\n",
           st->flops, st->critical_flops, st->linear_flops, st->linear_flops > 0 ? st->flops / st->linear_flops : 0.0);
    if (s->auto_time) {
        if (s->device) printf("--scan-levels auto (device model, modelled time per step):");
        else printf("--scan-levels auto (modelled time per step on %d threads):", sp_get_threads());
        for (int K = 0; K < s->auto_n; K++)
            printf(" K=%d %.3g ms%s", K, 1e3 * s->auto_time[K], K == p->up_levels ? " (chosen)" : "");
        printf("\n");
    }
    fflush(stdout);
}

void bppsa_print_memory(const sp_bppsa_stats *st)
{
    /* every part of the scan's memory, so that they add up to it: the rest are the element
     * arrays, the task lists and a recurrent op's ∇h_t */
    char b[7][32];
    size_t rest = st->scan_bytes - st->jt_bytes - st->product_bytes;
    printf("memory per step: scan %s (Jt values %s, products %s, arrays and tasks %s) + gradients %s + forward %s = "
           "peak %s (linear BP: forward + gradients)\n",
           fmt_bytes(b[0], 32, st->scan_bytes), fmt_bytes(b[1], 32, st->jt_bytes), fmt_bytes(b[2], 32, st->product_bytes),
           fmt_bytes(b[6], 32, rest), fmt_bytes(b[3], 32, st->grad_bytes), fmt_bytes(b[4], 32, st->forward_bytes),
           fmt_bytes(b[5], 32, st->peak_bytes));
    fflush(stdout);
}

/* ---- the scan tree, drawn (--plan-svg) -------------------------------------------------- */

#define SVG_MAX_LINKS 128

/* An operand's path: down its own column while it is untouched, then to the step. */
static void edge_to(FILE *f, int x1, int y1, int x2, int y2, int rowh, const char *style)
{
    int ybend = y2 - rowh > y1 ? y2 - rowh : y1;
    fprintf(f, "<polyline points=\"%d,%d %d,%d %d,%d\" fill=\"none\" %s/>\n", x1, y1, x1, ybend, x2, y2, style);
}

/* One column per element of a, one row per level (row 0: the input array). A step is a
 * node at its result's position, coloured by what it computes; its edges come from where
 * its operands were last written. The most expensive step of every level that multiplies
 * (the critical path of the level-synchronous schedule) has a red outline. */
void bppsa_draw_plan_svg(const bppsa_state *s, const char *path)
{
    const sp_scan_plan *p = &s->plan;
    int n = s->n;
    if (n > SVG_MAX_LINKS)
        sp_fail("--plan-svg: the chain has %d links; the tree is drawn for at most %d (a shorter --seq-len?)", n,
                SVG_MAX_LINKS);
    sp_out out;
    sp_check(sp_out_open(&out, path, "--plan-svg"));
    FILE *f = out.f;
    int colw = n > 40 ? 22 : 40, rowh = 46, left = 110, top = 70;
    int names_h = 90;   /* each column's op, rotated, under the tree */
    int rows = p->nlevels + 1, width = left + (n + 1) * colw + 30, height = top + rows * rowh + names_h + 114;
    if (width < 1040) width = 1040;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\" font-size=\"11\">\n", width, height, width, height);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"10\" y=\"20\" font-size=\"14\">BPPSA scan: n = %d links, %d up-sweep levels (full %d); "
               "%d sequential levels vs %d for linear BP</text>\n", n, p->up_levels, sp_scan_full_levels(n),
            p->work_levels, n - 1);
#define X(pos) (left + (pos) * colw + colw / 2)
#define Y(row) (top + (row) * rowh + rowh / 2)
    for (int i = 0; i <= n; i++)
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#555\">%d</text>\n", X(i), top - 8, i);
    fprintf(f, "<text x=\"10\" y=\"%d\">input a</text>\n", Y(0) + 4);
    int *last = sp_xcalloc((size_t)n + 1, sizeof *last);
    /* row labels */
    for (int k = 0; k < p->nsteps; k++)
        if (k == 0 || p->steps[k].level != p->steps[k - 1].level) {
            const sp_scan_step *st = &p->steps[k];
            static const char *names[] = {"up-sweep", "identity", "carry", "down-sweep"};
            fprintf(f, "<text x=\"10\" y=\"%d\">%d %s</text>\n", Y(st->level + 1) + 4, st->level, names[st->kind]);
        }
    /* inputs */
    for (int i = 0; i <= n; i++) {
        const char *fill = i == 0 ? "#4caf50" : i == n ? "#ffffff" : s->links[i - 1].type.kind == EL_CSR ? "#2196f3" : "#ff9800";
        char name[SP_NAME_LEN + 32] = "";
        if (i > 0) link_label(&s->links[i - 1], name, sizeof name);
        fprintf(f, "<g class=\"input\"><rect x=\"%d\" y=\"%d\" width=\"14\" height=\"14\" fill=\"%s\" stroke=\"#333\"%s/>"
                   "<title>a[%d] = %s%s%s%s</title></g>\n", X(i) - 7, Y(0) - 7, fill, i == n ? " stroke-dasharray=\"2,2\"" : "",
                i, i == 0 ? "the loss gradient (vector)" : "Jt of ", name, i == 0 ? "" : i == n ? " (never read)" : ", ",
                i == 0 || i == n ? "" : bppsa_kind_name(s->links[i - 1].type.kind));
    }
    int carry_pos = -1, carry_row = 0;
    for (int k = 0, level_start = 0; k < p->nsteps; k++) {
        const sp_scan_step *st = &p->steps[k];
        const step_info *si = &s->steps[k];
        if (k > 0 && st->level != p->steps[k - 1].level) level_start = k;
        double lvl_max = 0;
        for (int j = level_start; j < p->nsteps && p->steps[j].level == st->level; j++)
            lvl_max = fmax(lvl_max, s->steps[j].flops);
        int row = st->level + 1;
        const char *edge = "stroke=\"#999\"", *move = "stroke=\"#bbb\" stroke-dasharray=\"3,3\"";
        switch (st->kind) {
        case SP_SCAN_UP:
            edge_to(f, X(st->l), Y(last[st->l]), X(st->r), Y(row), rowh, edge);
            edge_to(f, X(st->r), Y(last[st->r]), X(st->r), Y(row), rowh, edge);
            last[st->r] = row;
            break;
        case SP_SCAN_IDENTITY: last[st->r] = row; break;
        case SP_SCAN_CARRY:
            edge_to(f, X(st->r), Y(last[st->r]), X(st->r), Y(row), rowh, edge);
            if (carry_pos >= 0)
                edge_to(f, X(carry_pos), Y(carry_row), X(st->r), Y(row), rowh, edge);
            carry_pos = st->r;
            carry_row = row;
            last[st->r] = row;
            break;
        case SP_SCAN_DOWN:
            edge_to(f, X(st->l), Y(last[st->l]), X(st->r), Y(row), rowh, edge);
            edge_to(f, X(st->r), Y(last[st->r]), X(st->r), Y(row), rowh, edge);
            edge_to(f, X(st->r), Y(last[st->r]), X(st->l), Y(row), rowh, move);
            fprintf(f, "<circle cx=\"%d\" cy=\"%d\" r=\"3\" fill=\"#bbb\"/>\n", X(st->l), Y(row));
            last[st->l] = last[st->r] = row;
            break;
        }
        const char *fill, *what;
        if (st->kind == SP_SCAN_IDENTITY) fill = "#ffffff", what = "a[n] = I";
        else if (si->skip) fill = "#ffffff", what = "skipped: a[n] is overwritten";
        else if (!st->product) fill = "#dddddd", what = "move (a product with I)";
        else if (si->out.kind == EL_VEC) fill = "#4caf50", what = "matrix-vector product";
        else if (si->out.kind == EL_CSR) fill = "#2196f3", what = "sparse matrix product (CSR)";
        else fill = "#ff9800", what = "dense matrix product";
        bool crit = si->flops > 0 && si->flops == lvl_max;
        fprintf(f, "<g class=\"step\"><circle cx=\"%d\" cy=\"%d\" r=\"8\" fill=\"%s\" stroke=\"%s\" stroke-width=\"%d\"%s/>"
                   "<title>level %d %s l=%d r=%d: %s, %.0f FLOP/sample%s</title></g>\n",
                X(st->r), Y(row), fill, crit ? "#d32f2f" : "#333", crit ? 3 : 1,
                si->skip ? " stroke-dasharray=\"2,2\"" : "", st->level,
                st->kind == SP_SCAN_UP ? "up" : st->kind == SP_SCAN_DOWN ? "down" : st->kind == SP_SCAN_CARRY ? "carry" : "identity",
                st->l, st->r, what, si->flops, crit ? " (critical)" : "");
        if (st->kind == SP_SCAN_IDENTITY)
            fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"10\">I</text>\n", X(st->r), Y(row) + 4);
    }
    /* which op's Jt each column starts with (a[0]: the loss gradient) */
    fprintf(f, "<text x=\"10\" y=\"%d\">Jt of</text>\n", top + rows * rowh + 12);
    for (int i = 0; i <= n; i++) {
        char name[SP_NAME_LEN + 32] = "(∇l)";
        if (i > 0) link_label(&s->links[i - 1], name, sizeof name);
        int x = X(i) - 3, y = top + rows * rowh + 6;
        fprintf(f, "<text class=\"op\" x=\"%d\" y=\"%d\" transform=\"rotate(50 %d %d)\" font-size=\"10\" fill=\"#333\">",
                x, y, x, y);
        for (const char *c = name; *c; c++) {   /* names come from C code: escape XML */
            if (*c == '<') fputs("&lt;", f);
            else if (*c == '>') fputs("&gt;", f);
            else if (*c == '&') fputs("&amp;", f);
            else fputc(*c, f);
        }
        fprintf(f, "</text>\n");
    }
    /* legend */
    static const struct { const char *fill, *text; } legend[] = {
        {"#4caf50", "vector (matrix-vector product)"}, {"#2196f3", "sparse matrix (CSR)"},
        {"#ff9800", "dense matrix"}, {"#dddddd", "move (product with I)"}, {"#ffffff", "identity / skipped"}};
    int ly = top + rows * rowh + names_h + 20;
    for (int i = 0; i < 5; i++) {
        int lx = 10 + i * 200;
        fprintf(f, "<circle cx=\"%d\" cy=\"%d\" r=\"7\" fill=\"%s\" stroke=\"#333\"/><text x=\"%d\" y=\"%d\">%s</text>\n",
                lx + 7, ly, legend[i].fill, lx + 20, ly + 4, legend[i].text);
    }
    fprintf(f, "<circle cx=\"17\" cy=\"%d\" r=\"7\" fill=\"white\" stroke=\"#d32f2f\" stroke-width=\"3\"/>"
               "<text x=\"30\" y=\"%d\">the most expensive step of its level (critical path)</text>\n", ly + 24, ly + 28);
    /* the lines: a step's two operands (solid), and the down-sweep's move of a[r]'s old
     * value into a[l] (dashed, ending in a grey dot where it lands) */
    int lz = ly + 48;
    fprintf(f, "<line x1=\"10\" y1=\"%d\" x2=\"34\" y2=\"%d\" stroke=\"#999\"/>"
               "<text x=\"40\" y=\"%d\">operand of a step</text>\n", lz, lz, lz + 4);
    fprintf(f, "<line x1=\"210\" y1=\"%d\" x2=\"234\" y2=\"%d\" stroke=\"#bbb\" stroke-dasharray=\"3,3\"/>"
               "<circle cx=\"234\" cy=\"%d\" r=\"3\" fill=\"#bbb\"/>"
               "<text x=\"242\" y=\"%d\">down-sweep: a[r]'s old value moves to a[l] (grey dot: where it lands)</text>\n",
            lz, lz, lz, lz + 4);
    fprintf(f, "</svg>\n");
#undef X
#undef Y
    free(last);
    sp_check(sp_out_commit(&out));
}

