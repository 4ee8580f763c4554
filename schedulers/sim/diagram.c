/* diagram.c — pipeline diagrams of a simulated schedule, as in [U]: "the columns are
 * time indices, and each row corresponds to a worker ... The color of each cell
 * indicates the id of the batch being processed. The cell value indicates whether the
 * work is for the forward or backward pass, and the pipeline stage being processed."
 *
 * Text: a cell per time step, "f2c" = forward of stage 2 for micro-batch c (text has no
 * colour, so the micro-batch is the letter suffix; 'b' whole backward, 'd' δ, 'g' G).
 * SVG: a box per job, its colour the micro-batch's hue, light for forward, dark for
 * the backward or δ, pale for G. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "schedulers/sim/sim.h"

/* ------------------------------------------------------------------------------------ */
/* Text                                                                                 */

/* The time step of one column: the shortest job, coarser if the run would not fit. */
static double column_step(const sp_schedule *s, const sp_sim *r, int max_cols, int *cols)
{
    double q = 0;
    for (int j = 0; j < s->njobs; j++) {
        double d = r->finish[j] - r->start[j];
        if (d > 0 && (q == 0 || d < q)) q = d;
    }
    if (q == 0 || r->latency <= 0) {
        *cols = 0;
        return 1;
    }
    double n = ceil(r->latency / q - 1e-9);
    if (n > max_cols) {
        q = r->latency / max_cols;
        n = max_cols;
    }
    *cols = (int)n;
    return q;
}

static int label_width(const sp_schedule *s)
{
    char buf[32];
    int w = 2;
    for (int j = 0; j < s->njobs; j++) {
        int n = (int)strlen(sp_job_label(s, j, buf, sizeof buf));
        if (n > w) w = n;
    }
    return w;
}

static void text_row(FILE *out, const sp_schedule *s, const sp_sim *r, int w, double q, int cols, int cw)
{
    char buf[32];
    int i = r->order_off[w], end = r->order_off[w + 1], shown = -1;
    fprintf(out, "w%-4d", w);
    for (int c = 0; c < cols; c++) {
        double mid = (c + 0.5) * q;
        while (i < end && r->finish[r->order[i]] <= mid) i++;
        int j = i < end && r->start[r->order[i]] <= mid ? r->order[i] : -1;
        if (j < 0)
            fprintf(out, " %-*s", cw, "");
        else if (j != shown)
            fprintf(out, " %-*s", cw, sp_job_label(s, j, buf, sizeof buf));
        else
            fprintf(out, " %-*s", cw, "--");
        shown = j;
    }
    fputc('\n', out);
}

void sp_diagram_text(FILE *out, const sp_schedule *s, const sp_sim *r, int max_cols)
{
    int cols;
    double q = column_step(s, r, max_cols > 0 ? max_cols : 160, &cols);
    int cw = label_width(s);
    fprintf(out, "%s: S=%d B=%d W=%d, latency %g (one column = %g time units)\n", s->scheme->name,
            s->stages, s->micro, s->workers, r->latency, q);
    fprintf(out, "%-5s", "");
    for (int c = 0; c < cols; c++) fprintf(out, " %-*d", cw, c + 1);
    fputc('\n', out);
    for (int w = 0; w < s->workers; w++) text_row(out, s, r, w, q, cols, cw);
}

/* ------------------------------------------------------------------------------------ */
/* SVG                                                                                  */

enum { SVG_LEFT = 48, SVG_TOP = 50, SVG_ROW = 26, SVG_RIGHT = 16, SVG_AXIS = 28, SVG_LEGEND = 42 };
/* Under each worker's jobs, its memory lane (sp_sim.mem_*): SVG_MEM px high. */
enum { SVG_MEM = 24, SVG_PITCH = SVG_ROW + SVG_MEM };

/* The micro-batch's hue: golden-angle steps keep neighbours apart. */
static double micro_hue(int b) { return fmod(b * 137.508, 360.0); }

static int lightness(sp_dir d)
{
    switch (d) {
    case SP_FWD: return 74;
    case SP_BWD_GRAD: return 86;
    default: return 46;
    }
}

static void xml_text(FILE *out, const char *t)
{
    for (; *t; t++) {
        if (*t == '&') fputs("&amp;", out);
        else if (*t == '<') fputs("&lt;", out);
        else if (*t == '>') fputs("&gt;", out);
        else fputc(*t, out);
    }
}

/* 1, 2 or 5 times a power of ten, giving about ten ticks over `span`. */
static double nice_step(double span)
{
    double raw = span / 10, p = pow(10, floor(log10(raw)));
    double m = raw / p;
    return p * (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10);
}

static const char *const DIR_NAME[] = {"F (forward)", "whole backward", "δ (input gradient)", "G (weight gradient)"};

static void svg_jobs(FILE *out, const sp_schedule *s, const sp_sim *r, double px, const char *unit)
{
    char buf[32];
    for (int j = 0; j < s->njobs; j++) {
        double x = SVG_LEFT + r->start[j] * px, w = (r->finish[j] - r->start[j]) * px;
        if (w <= 0) continue;
        double y = SVG_TOP + s->compute[j] * SVG_PITCH;
        sp_job job = s->jobs[j];
        fprintf(out,
                "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%d\" fill=\"hsl(%.1f,65%%,%d%%)\" "
                "stroke=\"white\" stroke-width=\"1\"><title>",
                x, y + 2, w, SVG_ROW - 4, micro_hue(job.micro), lightness(job.dir));
        char mb[16];
        sp_micro_name(job.micro, mb);
        sp_job_label(s, j, buf, sizeof buf);
        fprintf(out, "%s: %s of stage %d, micro-batch %s: %g-%g %s</title></rect>\n", buf, DIR_NAME[job.dir],
                job.stage, mb, r->start[j], r->finish[j], unit);
        const char *ink = lightness(job.dir) < 60 ? " dark" : "";
        if (w >= 7.0 * (double)strlen(buf))
            fprintf(out, "<text x=\"%.2f\" y=\"%.2f\" class=\"j%s\">%s</text>\n", x + w / 2, y + SVG_ROW / 2 + 4,
                    ink, buf);
        else if (w >= 8.0) {   /* a sliver: its direction and stage, upright ("f12") */
            snprintf(buf, sizeof buf, "%s%d", sp_dir_letter(job.dir), job.stage);
            double cx = x + w / 2 + 3, cy = y + SVG_ROW / 2;
            fprintf(out, "<text x=\"%.2f\" y=\"%.2f\" class=\"j s%s\" transform=\"rotate(-90 %.2f %.2f)\">%s</text>\n",
                    cx, cy, ink, cx, cy, buf);
        }
    }
}

static void svg_axis(FILE *out, const sp_schedule *s, const sp_sim *r, double px, const char *unit)
{
    double y = SVG_TOP + s->workers * SVG_PITCH + 4;
    fprintf(out, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#444\"/>\n", SVG_LEFT, y,
            SVG_LEFT + r->latency * px, y);
    double step = nice_step(r->latency > 0 ? r->latency : 1);
    for (double t = 0; t <= r->latency + 1e-9; t += step)
        fprintf(out,
                "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#444\"/>"
                "<text x=\"%.2f\" y=\"%.1f\" class=\"t\">%g</text>\n",
                SVG_LEFT + t * px, y, SVG_LEFT + t * px, y + 4, SVG_LEFT + t * px, y + 16, t);
    for (int w = 0; w < s->workers; w++)
        fprintf(out, "<text x=\"%d\" y=\"%d\" class=\"w\">w%d</text>\n", SVG_LEFT - 8,
                SVG_TOP + w * SVG_PITCH + SVG_ROW / 2 + 4, w);
    /* axis titles: time with its unit below the ticks, worker up the left edge */
    fprintf(out, "<text x=\"%.2f\" y=\"%.1f\" class=\"t\">time (%s)</text>\n", SVG_LEFT + r->latency * px / 2,
            y + 30, unit);
    double my = SVG_TOP + s->workers * SVG_PITCH / 2.0;
    fprintf(out, "<text x=\"12\" y=\"%.1f\" class=\"t\" transform=\"rotate(-90 12 %.1f)\">worker</text>\n", my, my);
}

/* "2.4 MB" (binary multiples); without byte sizes (unit costs) a count of activations. */
static void mem_text(double v, bool bytes, char *buf, size_t len)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int k = 0;
    if (!bytes) {
        snprintf(buf, len, "%g act.", v);
        return;
    }
    while (v >= 1024 && k < 4) v /= 1024, k++;
    snprintf(buf, len, k ? "%.3g %s" : "%.0f %s", v, units[k]);
}

/* One lane per worker under its jobs: the activations it holds over time as a filled
 * step plot (blue), fetched weights stacked on them (orange, fsdp/fslpp), all lanes on
 * one scale (the largest peak), each labelled with its own peak. */
static void svg_memory(FILE *out, const sp_schedule *s, const sp_sim *r, double px, bool bytes)
{
    if (!r->mem_off) return;
    double top = 0;
    for (int w = 0; w < s->workers; w++) top = fmax(top, r->worker[w].peak_mem_bytes);
    if (!(top > 0)) return;
    double h = SVG_MEM - 6, end = SVG_LEFT + r->latency * px;
    for (int w = 0; w < s->workers; w++) {
        double base = SVG_TOP + w * SVG_PITCH + SVG_ROW + h;
        fprintf(out, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#bbb\"/>\n", SVG_LEFT, base, end, base);
        for (int layer = 1; layer >= 0; layer--) {   /* act + weights behind, act in front */
            if (layer == 1 && !(r->worker[w].peak_weight_bytes > 0)) continue;
            fprintf(out, "<path fill=\"%s\" stroke=\"none\" d=\"M%d %.2f", layer ? "#f0a050" : "#5b8fd0", SVG_LEFT, base);
            for (int i = r->mem_off[w]; i < r->mem_off[w + 1]; i++) {
                double v = r->mem_act[i] + (layer ? r->mem_wgt[i] : 0), t1 = i + 1 < r->mem_off[w + 1] ? r->mem_time[i + 1] : r->latency;
                double y = base - h * fmax(0.0, v) / top;
                fprintf(out, " L%.2f %.2f L%.2f %.2f", SVG_LEFT + r->mem_time[i] * px, y, SVG_LEFT + t1 * px, y);
            }
            fprintf(out, " L%.2f %.2f Z\"/>\n", end, base);
        }
        char a[32], m[32];
        mem_text(r->worker[w].peak_act_bytes, bytes, a, sizeof a);
        fprintf(out, "<text x=\"%.2f\" y=\"%.2f\" class=\"l\">peak %s", end + 6, base - 2, a);
        if (r->worker[w].peak_weight_bytes > 0) {
            mem_text(r->worker[w].peak_mem_bytes, bytes, m, sizeof m);
            fprintf(out, " (%s with weights)", m);
        }
        fprintf(out, "</text>\n");
    }
}

static void svg_legend(FILE *out, const sp_schedule *s, double y)
{
    int shown = s->micro < 12 ? s->micro : 12;
    double x = SVG_LEFT;
    fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" class=\"l\">micro-batch:</text>\n", x, y + 12);
    x += 80;
    for (int b = 0; b < shown; b++, x += 30) {
        char mb[16];
        sp_micro_name(b, mb);
        fprintf(out,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"hsl(%.1f,65%%,46%%)\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" class=\"l\">%s</text>\n",
                x, y + 2, micro_hue(b), x + 14, y + 12, mb);
    }
    if (shown < s->micro) fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" class=\"l\">…</text>\n", x, y + 12);
    fprintf(out, "<text x=\"%d\" y=\"%.1f\" class=\"l\">light = f, the forward F; dark = %s; "
                 "f2c = f of stage 2, micro-batch c</text>\n",
            SVG_LEFT, y + 30, s->split_backward ? "d, the input gradient δ; pale = g, the weight gradient G"
                                                 : "b, the whole backward");
    fprintf(out, "<text x=\"%d\" y=\"%.1f\" class=\"l\">lane under each worker: activations held from F to the "
                 "end of their backward (blue), fetched weights while in use (orange)</text>\n", SVG_LEFT, y + 48);
}

void sp_diagram_svg(FILE *out, const sp_schedule *s, const sp_sim *r, const char *title)
{
    sp_diagram_svg_unit(out, s, r, title, NULL);
}

void sp_diagram_svg_unit(FILE *out, const sp_schedule *s, const sp_sim *r, const char *title, const char *unit)
{
    /* "us" (costs from a model) is drawn as µs; unit costs and profiles as time units */
    const char *u = !unit || strcmp(unit, "unit") == 0 ? "time units" : strcmp(unit, "us") == 0 ? "µs" : unit;
    double span = r->latency > 0 ? r->latency : 1;
    double px = fmin(48.0, 1100.0 / span);   /* at most ~1100 px of timeline */
    double width = fmax(SVG_LEFT + span * px + SVG_RIGHT + 260, 860);   /* the legend's lines fit */
    double legend_y = SVG_TOP + s->workers * SVG_PITCH + SVG_AXIS + 16;
    double height = legend_y + SVG_LEGEND + 18;
    fprintf(out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\">\n",
            width, height, width, height);
    fprintf(out, "<style>text{font-size:11px;fill:#222}.j{text-anchor:middle}.dark{fill:#fff}"
                 ".t{text-anchor:middle;font-size:10px}.w{text-anchor:end}.h{font-size:14px}.s{font-size:9px}</style>\n");
    fprintf(out, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(out, "<text x=\"%d\" y=\"22\" class=\"h\">", SVG_LEFT);
    if (title && *title)
        xml_text(out, title);
    else
        fprintf(out, "%s: S=%d B=%d W=%d", s->scheme->name, s->stages, s->micro, s->workers);
    fprintf(out, "</text>\n");
    /* the figures a reader compares schedules by, on the figure itself */
    fprintf(out, "<text x=\"%d\" y=\"%d\" class=\"l\">latency %.4g %s, utilisation %.1f%%, bubble %.1f%%</text>\n",
            SVG_LEFT, SVG_TOP - 8, r->latency, u, 100 * r->utilization, 100 * (1 - r->utilization));
    svg_jobs(out, s, r, px, u);
    svg_memory(out, s, r, px, unit && strcmp(unit, "unit") != 0);
    svg_axis(out, s, r, px, u);
    svg_legend(out, s, legend_y);
    fprintf(out, "</svg>\n");
}
