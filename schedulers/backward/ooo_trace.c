/* ooo_trace.c — the timeline of one ooo backward, as a Chrome trace (JSON, for
 * ui.perfetto.dev or chrome://tracing) or as a self-contained SVG picture (".svg").
 *
 * Both show one box per task on its lane, arrows for the cross-lane dependencies (the
 * events a CUDA version records and waits on), and a marker where the next step's
 * forward of each layer could start (F'_i after U_i, EuroSys '22 §2's problem). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/io/fileio.h"
#include "schedulers/backward/ooo.h"

/* ---- capture ---------------------------------------------------------------------- */

static int cross_lane_edges(const sp_ooo_run *run)
{
    const sp_ooo_graph *g = run->graph;
    int n = 0;
    for (int i = 0; i < g->nexec; i++)
        for (int q = 0; q < g->tasks[i].nsucc; q++) {
            int s = g->tasks[i].succ[q];
            n += s < g->nexec && run->ran_on[s] != run->ran_on[i];
        }
    return n;
}

void sp_ooo_trace_capture(sp_ooo_trace *tr, const sp_ooo_run *run, const char *title)
{
    const sp_ooo_graph *g = run->graph;
    int nflow = cross_lane_edges(run);
    if (tr->cap < g->ntasks) {   /* grows with the first step only */
        tr->cap = g->ntasks;
        tr->rec = sp_xrealloc(tr->rec, (size_t)tr->cap * sizeof *tr->rec);
    }
    if (tr->fcap < nflow) {
        tr->fcap = nflow;
        tr->flow = sp_xrealloc(tr->flow, (size_t)tr->fcap * sizeof *tr->flow);
    }
    tr->n = g->ntasks;
    tr->nflow = 0;
    for (int i = 0; i < g->ntasks; i++) {
        const sp_ooo_task *t = &g->tasks[i];
        sp_ooo_trace_rec *r = &tr->rec[i];
        sp_ooo_task_label(t, r->name, sizeof r->name);
        if (i < g->nexec && run->with && run->with[i] >= 0 && t->kind == SP_OOO_DO) {   /* one call for δ and G */
            char what[sizeof r->name];
            snprintf(what, sizeof what, "δ+G%s", r->name + strlen("δ"));
            memcpy(r->name, what, sizeof what);
        }
        r->kind = t->kind;
        r->lane = i < g->nexec ? run->ran_on[i] : SP_OOO_MAIN;
        r->node = t->node ? t->node->index : -1;
        r->start = run->start[i];
        r->end = run->end[i];
        for (int q = 0; i < g->nexec && q < t->nsucc; q++) {
            int s = t->succ[q];
            if (s < g->nexec && run->ran_on[s] != run->ran_on[i]) {
                tr->flow[tr->nflow][0] = i;
                tr->flow[tr->nflow++][1] = s;
            }
        }
    }
    snprintf(tr->title, sizeof tr->title, "%s", title);
}

void sp_ooo_trace_free(sp_ooo_trace *tr)
{
    free(tr->rec);
    free(tr->flow);
    memset(tr, 0, sizeof *tr);
}

static const char *const LANE_NAMES[] = {"main lane: δ (critical path)", "sub lane: G, U"};
/* A device trace (schedulers/backward/ooo_cuda.cu): the lanes are CUDA streams. */
static const char *const STREAM_NAMES[] = {"stream 0, high priority: δ (critical path)", "stream 1, low priority: G, U"};

/* Names come from layer names given in C code; escape what JSON and XML would choke on. */
static void put_text(FILE *f, const char *s, bool xml)
{
    for (; *s; s++) {
        if (*s == '"') fputs(xml ? "&quot;" : "\\\"", f);
        else if (*s == '\\' && !xml) fputs("\\\\", f);
        else if (*s == '<' && xml) fputs("&lt;", f);
        else if (*s == '>' && xml) fputs("&gt;", f);
        else if (*s == '&' && xml) fputs("&amp;", f);
        else if ((unsigned char)*s >= 0x20) fputc(*s, f);
    }
}

/* ---- Chrome trace event format ------------------------------------------------------- */

static void write_json(const sp_ooo_trace *tr, FILE *f)
{
    static const char *const CAT[] = {"d", "g", "U", "F"};
    fputs("{\"displayTimeUnit\": \"ms\", \"otherData\": {\"title\": \"", f);
    put_text(f, tr->title, false);
    fputs("\"},\n\"traceEvents\": [\n{\"ph\": \"M\", \"pid\": 1, \"name\": \"process_name\", \"args\": {\"name\": \"", f);
    put_text(f, tr->title, false);
    fputs("\"}}", f);
    bool dev = strstr(tr->title, " on cuda") != NULL;
    for (int l = 0; l < 2; l++)
        fprintf(f, ",\n{\"ph\": \"M\", \"pid\": 1, \"tid\": %d, \"name\": \"thread_name\", \"args\": {\"name\": \"%s\"}}",
                l, dev ? STREAM_NAMES[l] : LANE_NAMES[l]);
    for (int i = 0; i < tr->n; i++) {
        const sp_ooo_trace_rec *r = &tr->rec[i];
        bool marker = r->kind == SP_OOO_F;
        fprintf(f, ",\n{\"ph\": \"%s\", \"pid\": 1, \"tid\": %d, \"name\": \"", marker ? "i" : "X", r->lane);
        put_text(f, r->name, false);
        if (marker) {
            fprintf(f, " may start\", \"s\": \"t\", \"cat\": \"F\", \"ts\": %.3f}", 1e6 * r->start);
            continue;
        }
        fprintf(f, "\", \"cat\": \"%s\", \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"task\": %d, \"node\": %d}}",
                CAT[r->kind], 1e6 * r->start, 1e6 * (r->end - r->start), i, r->node);
    }
    for (int e = 0; e < tr->nflow; e++) {   /* flow arrows bind to the slices around them */
        const sp_ooo_trace_rec *a = &tr->rec[tr->flow[e][0]], *b = &tr->rec[tr->flow[e][1]];
        fprintf(f, ",\n{\"ph\": \"s\", \"id\": %d, \"pid\": 1, \"tid\": %d, \"name\": \"dep\", \"cat\": \"dep\", "
                   "\"ts\": %.3f}",
                e + 1, a->lane, 1e6 * (a->start + 0.999 * (a->end - a->start)));
        fprintf(f, ",\n{\"ph\": \"f\", \"bp\": \"e\", \"id\": %d, \"pid\": 1, \"tid\": %d, \"name\": \"dep\", "
                   "\"cat\": \"dep\", \"ts\": %.3f}",
                e + 1, b->lane, 1e6 * b->start);
    }
    fputs("\n]}\n", f);
}

/* ---- SVG --------------------------------------------------------------------------------- */

#define SVG_W 1200.0
#define SVG_LEFT 170.0
#define SVG_LANE_H 34.0

/* Grid spacing: 1, 2 or 5 × 10^n seconds, at most ten lines. */
static double nice_step(double span)
{
    static const double MANTISSA[3] = {1, 2, 5};
    for (double decade = 1e-6;; decade *= 10)
        for (int m = 0; m < 3; m++)
            if (span / (decade * MANTISSA[m]) <= 10) return decade * MANTISSA[m];
}

static void write_svg(const sp_ooo_trace *tr, FILE *f)
{
    static const char *const FILL[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759"};
    double t_end = 0;
    for (int i = 0; i < tr->n; i++)
        if (tr->rec[i].end > t_end) t_end = tr->rec[i].end;
    if (t_end <= 0) t_end = 1e-6;
    double scale = (SVG_W - SVG_LEFT - 20) / t_end, lane_y[3] = {50, 50 + SVG_LANE_H + 14, 50 + 2 * (SVG_LANE_H + 14)};
    double height = lane_y[2] + 70;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
               "font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n<text x=\"10\" y=\"22\" "
               "font-size=\"15\">",
            SVG_W, height);
    put_text(f, tr->title, true);
    fputs("</text>\n", f);
    /* Each lane is labelled with the kinds of task it actually ran (a one-lane run or a
     * reordered plan puts G and U on the main lane too). */
    static const char *const KIND[] = {"δ", "G", "U", "F′"};
    bool ran[2][3] = {{false}};
    for (int i = 0; i < tr->n; i++)
        if (tr->rec[i].kind != SP_OOO_F && tr->rec[i].lane >= 0 && tr->rec[i].lane < 2)
            ran[tr->rec[i].lane][tr->rec[i].kind] = true;
    for (int l = 0; l < 2; l++) {
        fprintf(f, "<text x=\"10\" y=\"%.1f\">%s lane:", lane_y[l] + SVG_LANE_H / 2 + 4, l == SP_OOO_MAIN ? "main" : "sub");
        bool any = false;
        for (int k = 0; k < 3; k++)
            if (ran[l][k]) fprintf(f, "%s %s", any ? "," : "", KIND[k]), any = true;
        fprintf(f, "%s</text>\n", any ? "" : " idle");
    }
    fprintf(f, "<text x=\"10\" y=\"%.1f\">next forward F′</text>\n", lane_y[2] + SVG_LANE_H / 2 + 4);
    /* the colour legend, top right */
    static const char *const KIND_LONG[] = {"δ input gradient", "G weight gradient", "U update", "F′ next forward may start"};
    for (int k = 0; k < 4; k++) {
        double lx = SVG_W - 4 * 150 + k * 150;
        fprintf(f, "<rect x=\"%.1f\" y=\"28\" width=\"10\" height=\"10\" fill=\"%s\"/>"
                   "<text x=\"%.1f\" y=\"37\">%s</text>\n", lx, FILL[k], lx + 14, KIND_LONG[k]);
    }
    double step = nice_step(t_end);
    for (double t = 0; t <= t_end * 1.0001; t += step) {
        double x = SVG_LEFT + t * scale;
        fprintf(f, "<line x1=\"%.1f\" y1=\"40\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x, x, lane_y[2] + SVG_LANE_H);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#666\">%.3g ms</text>\n", x,
                lane_y[2] + SVG_LANE_H + 16, 1e3 * t);
    }
    for (int e = 0; e < tr->nflow; e++) {   /* dependencies first, boxes drawn over them */
        const sp_ooo_trace_rec *a = &tr->rec[tr->flow[e][0]], *b = &tr->rec[tr->flow[e][1]];
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#999\" stroke-width=\"0.8\"/>\n",
                SVG_LEFT + a->end * scale, lane_y[a->lane] + SVG_LANE_H / 2, SVG_LEFT + b->start * scale,
                lane_y[b->lane] + SVG_LANE_H / 2);
    }
    for (int i = 0; i < tr->n; i++) {
        const sp_ooo_trace_rec *r = &tr->rec[i];
        double x = SVG_LEFT + r->start * scale, w = (r->end - r->start) * scale;
        if (r->kind == SP_OOO_F) {
            fprintf(f, "<path d=\"M%.1f %.1f l-5 -9 h10 z\" fill=\"%s\"><title>", x, lane_y[2] + 12, FILL[3]);
            put_text(f, r->name, true);
            fprintf(f, " may start at %.3f ms</title></path>\n", 1e3 * r->start);
            continue;
        }
        fprintf(f, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" stroke=\"white\" "
                   "stroke-width=\"0.5\"><title>",
                x, lane_y[r->lane], w > 0.5 ? w : 0.5, SVG_LANE_H, FILL[r->kind]);
        put_text(f, r->name, true);
        fprintf(f, ": %.3f – %.3f ms</title></rect>\n", 1e3 * r->start, 1e3 * r->end);
        if (w > 7.0 * (double)strlen(r->name)) {
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"white\" text-anchor=\"middle\">", x + w / 2,
                    lane_y[r->lane] + SVG_LANE_H / 2 + 4);
            put_text(f, r->name, true);
            fputs("</text>\n", f);
        }
    }
    for (int i = 0, fi = 0; i < tr->n; i++)   /* F' labels, staggered so they do not collide */
        if (tr->rec[i].kind == SP_OOO_F) {
            /* near the right edge the label ends at its marker instead of running off */
            double fx = SVG_LEFT + tr->rec[i].start * scale;
            bool right = fx > SVG_W - 90;
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\" fill=\"#333\"%s>", right ? fx - 4 : fx + 4,
                    lane_y[2] + 22 + 10 * (fi++ % 3), right ? " text-anchor=\"end\"" : "");
            put_text(f, tr->rec[i].name + 3, true);   /* skip "F' " */
            fputs("</text>\n", f);
        }
    fputs("</svg>\n", f);
}

void sp_ooo_trace_write(const sp_ooo_trace *tr, const char *path)
{
    sp_out out;
    sp_check(sp_out_open(&out, path, "--trace"));
    size_t n = strlen(path);
    if (n > 4 && strcmp(path + n - 4, ".svg") == 0) write_svg(tr, out.f);
    else write_json(tr, out.f);
    sp_check(sp_out_commit(&out));
}
