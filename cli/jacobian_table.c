/* jacobian_table.c — per-op transposed-Jacobian statistics and pictures (BPPSA Table 1
 * and Figure 5) for a recorded step. A tool, not a training step: it allocates freely. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/kernels/csr_ops.h"
#include "core/error.h"
#include "core/io/fileio.h"
#include "core/threads.h"
#include "cli/jacobian_table.h"

/* stb_image_write compiled privately into this file (static functions), so no link flag
 * is needed and another file compiling the same implementation cannot clash. */
#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>

/* ---- sizes and the two ways to get Jᵀ ----------------------------------------------- */

bool sp_jt_supported(const sp_node *n) { return n->op && sp_node_has_jt(n) && n->kern->jt_values; }

void sp_jt_build(const sp_node *n, int b, sp_csr *jt)
{
    n->op->jt_pattern(n, 0, jt);
    n->kern->jt_values(n, 0, b, jt);
}

static int batch_of(const sp_node *n) { return sp_node_x(n)->shape[0]; }

/* A loss reduces the batch to one scalar: its dy is shared by every sample. */
static bool out_per_sample(const sp_node *n) { return n->out.ndim >= 2 && n->out.shape[0] == batch_of(n); }

long sp_jt_in_size(const sp_node *n) { return (long)sp_tensor_sample_numel(sp_node_x(n)); }

long sp_jt_out_size(const sp_node *n)
{
    return out_per_sample(n) ? (long)sp_tensor_sample_numel(&n->out) : (long)n->out.numel;
}

void sp_jt_columnwise(sp_node *n, const int *cols, int ncols, float *dense)
{
    const sp_tensor *x = sp_node_x(n);
    int B = batch_of(n);
    long in = sp_jt_in_size(n), out = sp_jt_out_size(n);
    int copies = out_per_sample(n) ? B : 1;
    sp_tensor dy = n->out, dx = *x;
    dy.data = sp_xcalloc(n->out.numel, sizeof(float));
    dx.data = sp_xmalloc(x->numel * sizeof(float));
    dy.device = dx.device = SP_CPU;
    for (int k = 0; k < ncols; k++) {
        for (int b = 0; b < copies; b++) dy.data[(size_t)b * out + cols[k]] = 1.0f;
        n->kern->backward_input(n, 0, &dy, &dx);
        for (int b = 0; b < copies; b++) dy.data[(size_t)b * out + cols[k]] = 0.0f;
        memcpy(dense + (size_t)k * B * in, dx.data, (size_t)B * in * sizeof(float));
    }
    free(dy.data);
    free(dx.data);
}

/* ---- one row ------------------------------------------------------------------------ */

static void row_name(sp_jt_row *r, const sp_node *n, sp_tape *t)
{
    (void)t;
    sp_node_label(n, r->name, sizeof r->name);   /* parameter-free ops: op_k, as everywhere */
}

static void fill_sizes(sp_jt_row *r, int64_t nnz, int rows)
{
    double elems = (double)r->in * (double)r->out;
    r->nnz = nnz;
    r->sparsity = elems > 0 ? 1.0 - (double)nnz / elems : 0.0;
    r->csr_bytes = 4.0 * ((double)rows + 1) + 8.0 * (double)nnz;
    r->dense_bytes = 4.0 * elems;
}

/* Generates n's Jᵀ repeatedly (pattern + every sample's values) for o->min_seconds,
 * leaving the last one (sample B−1) in jt. */
static void time_analytic(sp_jt_row *r, const sp_node *n, sp_csr *jt, const sp_jt_opts *o)
{
    int B = batch_of(n), reps = 0;
    double tp = 0.0, tv = 0.0;
    for (;;) {
        double t0 = sp_now();
        n->op->jt_pattern(n, 0, jt);
        double t1 = sp_now();
        for (int b = 0; b < B; b++) n->kern->jt_values(n, 0, b, jt);
        double t2 = sp_now();
        tp += t1 - t0;
        tv += t2 - t1;
        if (++reps >= 1000 || tp + tv >= o->min_seconds) break;
        sp_csr_free(jt);
    }
    r->pattern_ms = 1e3 * tp / reps;
    r->values_ms = 1e3 * tv / reps;
    r->analytic_ms = r->pattern_ms + r->values_ms;
}

/* The baseline on up to o->max_columns output columns spread over the output, then the
 * analytic Jᵀ of the last sample checked against the same columns. */
static void time_columnwise(sp_jt_row *r, sp_node *n, const sp_csr *jt, const sp_jt_opts *o)
{
    int B = batch_of(n);
    int ncols = r->out < o->max_columns ? (int)r->out : o->max_columns;
    int *cols = sp_xmalloc((size_t)ncols * sizeof(int));
    for (int k = 0; k < ncols; k++) cols[k] = (int)((double)k * (double)r->out / ncols);
    float *dense = sp_xmalloc((size_t)B * (size_t)r->in * (size_t)ncols * sizeof(float));
    double t0 = sp_now();
    sp_jt_columnwise(n, cols, ncols, dense);
    double dt = sp_now() - t0;
    r->columns_timed = ncols;
    r->columnwise_ms = 1e3 * dt * (double)r->out / ncols;

    int *slot = sp_xmalloc((size_t)r->out * sizeof(int));
    for (long j = 0; j < r->out; j++) slot[j] = -1;
    for (int k = 0; k < ncols; k++) slot[cols[k]] = k;
    float *ana = sp_xcalloc((size_t)r->in * (size_t)ncols, sizeof(float));
    for (int i = 0; i < jt->rows; i++)
        for (int32_t q = jt->indptr[i]; q < jt->indptr[i + 1]; q++)
            if (slot[jt->indices[q]] >= 0) ana[(size_t)i * ncols + slot[jt->indices[q]]] = jt->data[q];
    double diff = 0.0, scale = 1.0;
    for (int k = 0; k < ncols; k++) {
        const float *ref = dense + ((size_t)k * B + (size_t)(B - 1)) * (size_t)r->in;   /* sample B−1 */
        for (long i = 0; i < r->in; i++) {
            diff = fmax(diff, fabs((double)ana[(size_t)i * ncols + k] - ref[i]));
            scale = fmax(scale, fabs((double)ref[i]));
        }
    }
    r->max_err = diff / scale;
    free(ana);
    free(slot);
    free(dense);
    free(cols);
}

static void png_to_file(void *f, void *data, int size) { fwrite(data, 1, (size_t)size, f); }

static void png_path(char *buf, size_t len, const char *dir, int idx, const char *name)
{
    snprintf(buf, len, "%s/%02d_%s.png", dir, idx, name);
}

static void op_row(sp_jt_table *t, sp_jt_row *r, sp_node *n, const sp_jt_opts *o)
{
    sp_csr jt;
    time_analytic(r, n, &jt, o);
    if (jt.rows != r->in || jt.cols != r->out)
        sp_fail("%s: Jᵀ is %d×%d, expected %ld×%ld (input × output elements)", r->name, jt.rows, jt.cols, r->in,
                r->out);
    fill_sizes(r, jt.nnz, jt.rows);
    time_columnwise(r, n, &jt, o);
    if (o->png_dir) {
        char path[4096];
        png_path(path, sizeof path, o->png_dir, t->n, r->name);
        sp_jt_write_png(&jt, path, o->png_side);
    }
    sp_csr_free(&jt);
}

/* Recurrent ops: the T dense H×H steps Jᵀ_t = (∂h_t/∂h_{t−1})ᵀ of every sample. There is
 * no per-step backward_input to build them column by column, so no baseline. */
static void chain_row(sp_jt_row *r, const sp_node *n, const sp_jt_opts *o)
{
    int B = batch_of(n), T = n->op->chain_len(n), H = n->out.shape[n->out.ndim - 1], reps = 0;
    float *jt = sp_xmalloc((size_t)H * H * sizeof(float));
    double el = 0.0;
    do {
        double t0 = sp_now();
        for (int b = 0; b < B; b++)
            for (int s = 1; s <= T; s++) n->kern->chain_jt(n, b, s, jt);
        el += sp_now() - t0;
    } while (++reps < 1000 && el < o->min_seconds);
    free(jt);
    strncat(r->name, ".step", sizeof r->name - strlen(r->name) - 1);
    r->chain = true;
    r->steps = T;
    r->in = r->out = H;
    fill_sizes(r, (int64_t)H * H, H);
    r->values_ms = r->analytic_ms = 1e3 * el / reps;
}

void sp_jt_opts_default(sp_jt_opts *o)
{
    *o = (sp_jt_opts){.max_columns = 256, .min_seconds = 0.05, .png_dir = NULL, .png_side = 1024};
}

void sp_jt_table_build(sp_jt_table *t, sp_tape *tape, const sp_jt_opts *o)
{
    memset(t, 0, sizeof *t);
    t->rows = sp_xcalloc((size_t)tape->n * 2 + 1, sizeof(sp_jt_row));
    if (o->png_dir && mkdir(o->png_dir, 0777) != 0 && errno != EEXIST)
        sp_fail("--png %s: cannot create directory (%s)", o->png_dir, strerror(errno));
    for (int i = 0; i < tape->n; i++) {
        sp_node *n = tape->nodes[i];
        if (!n->op) continue;
        t->batch = batch_of(n);
        bool chain = n->op->chain_len && n->kern->chain_jt;
        sp_jt_row base = {.op = n->op->name, .columnwise_ms = -1.0, .nnz = -1, .max_err = NAN};
        row_name(&base, n, tape);
        base.in = sp_jt_in_size(n);
        base.out = sp_jt_out_size(n);
        if (sp_jt_supported(n) || !chain) {
            sp_jt_row *r = &t->rows[t->n];
            *r = base;
            if (sp_jt_supported(n)) op_row(t, r, n, o);
            t->n++;
        }
        if (chain) {
            t->rows[t->n] = base;
            chain_row(&t->rows[t->n++], n, o);
        }
    }
}

void sp_jt_table_free(sp_jt_table *t)
{
    free(t->rows);
    memset(t, 0, sizeof *t);
}

/* ---- output ------------------------------------------------------------------------- */

static const char *human_bytes(double b, char *buf, size_t len)
{
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024.0 && u < 4) {
        b /= 1024.0;
        u++;
    }
    snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
    return buf;
}

void sp_jt_table_print(const sp_jt_table *t, FILE *f)
{
    fprintf(f, "%-14s %-10s %8s %8s %11s %9s %10s %10s %10s %10s %12s %10s %8s\n", "op", "kind", "in", "out", "nnz",
            "sparsity", "CSR", "dense", "pattern", "values", "columnwise", "speedup", "check");
    bool extrapolated = false;
    for (int i = 0; i < t->n; i++) {
        const sp_jt_row *r = &t->rows[i];
        char cb[32], db[32], cw[32], sp[32], ck[32];
        if (r->nnz < 0) {
            fprintf(f, "%-14s %-10s %8ld %8ld   (no Jᵀ entry points)\n", r->name, r->op, r->in, r->out);
            continue;
        }
        bool ex = r->columnwise_ms >= 0 && r->columns_timed < r->out;
        extrapolated |= ex;
        snprintf(cw, sizeof cw, "—");
        snprintf(sp, sizeof sp, "—");
        snprintf(ck, sizeof ck, "—");
        if (r->columnwise_ms >= 0) {
            snprintf(cw, sizeof cw, "%s%.3f ms", ex ? "~" : "", r->columnwise_ms);
            snprintf(sp, sizeof sp, "%.3g×", r->columnwise_ms / r->analytic_ms);
        }
        if (!isnan(r->max_err)) snprintf(ck, sizeof ck, "%.1e", r->max_err);
        fprintf(f, "%-14s %-10s %8ld %8ld %11lld %9.5f %10s %10s %7.3f ms %7.3f ms %12s %10s %8s\n", r->name, r->op,
                r->in, r->out, (long long)r->nnz, r->sparsity, human_bytes(r->csr_bytes, cb, sizeof cb),
                human_bytes(r->dense_bytes, db, sizeof db), r->pattern_ms, r->values_ms, cw, sp, ck);
        if (r->chain)
            fprintf(f, "%-14s   ↳ dense H×H per step; times are all %d steps × %d samples\n", "", r->steps,
                    t->batch);
    }
    fprintf(f, "batch %d; values = jt_values for every sample; speedup = columnwise / (pattern + values); "
               "check = max|analytic − columnwise| / max(1, max|columnwise|)\n",
            t->batch);
    if (extrapolated)
        fprintf(f, "~ columnwise extrapolated linearly from the columns timed (spread over the output)\n");
}

static void jputs(char **s, size_t *len, size_t *cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void jputs(char **s, size_t *len, size_t *cap, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(*s + *len, *cap - *len, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < *cap - *len) {
            *len += (size_t)n;
            return;
        }
        *cap *= 2;
        *s = sp_xrealloc(*s, *cap);
    }
}

static void jnum(char **s, size_t *len, size_t *cap, const char *key, double v, bool known)
{
    if (known && isfinite(v)) jputs(s, len, cap, ", \"%s\": %.6g", key, v);
    else jputs(s, len, cap, ", \"%s\": null", key);
}

/* Counts and byte sizes are exact integers (%.0f of a double holding an integer). */
static void jint(char **s, size_t *len, size_t *cap, const char *key, double v, bool known)
{
    if (known) jputs(s, len, cap, ", \"%s\": %.0f", key, v);
    else jputs(s, len, cap, ", \"%s\": null", key);
}

char *sp_jt_table_json(const sp_jt_table *t)
{
    size_t cap = 1024, len = 0;
    char *s = sp_xmalloc(cap);
    s[0] = 0;
    jputs(&s, &len, &cap, "[");
    for (int i = 0; i < t->n; i++) {
        const sp_jt_row *r = &t->rows[i];
        bool known = r->nnz >= 0;
        jputs(&s, &len, &cap, "%s{\"name\": \"%s\", \"in\": %ld, \"out\": %ld", i ? ", " : "", r->name, r->in, r->out);
        jint(&s, &len, &cap, "nnz", (double)r->nnz, known);
        jnum(&s, &len, &cap, "sparsity", r->sparsity, known);
        jint(&s, &len, &cap, "csr_bytes", r->csr_bytes, known);
        jint(&s, &len, &cap, "dense_bytes", 4.0 * (double)r->in * (double)r->out, true);
        jnum(&s, &len, &cap, "analytic_ms", r->analytic_ms, known);
        jnum(&s, &len, &cap, "columnwise_ms", r->columnwise_ms, known && r->columnwise_ms >= 0);
        jputs(&s, &len, &cap, "}");
    }
    jputs(&s, &len, &cap, "]");
    return s;
}

/* ---- pictures ----------------------------------------------------------------------- */

void sp_jt_write_png(const sp_csr *jt, const char *path, int max_side)
{
    static const unsigned char colour[3][3] = {{68, 1, 84}, {33, 145, 140}, {253, 231, 37}};
    int H = jt->rows < max_side ? jt->rows : max_side, W = jt->cols < max_side ? jt->cols : max_side;
    if (H < 1) H = 1;
    if (W < 1) W = 1;
    /* blow tiny matrices up so one entry is several pixels wide */
    int big = H > W ? H : W, zoom = big >= 512 ? 1 : 512 / big;
    if (zoom > 16) zoom = 16;
    unsigned char *cls = sp_xcalloc((size_t)H * W, 1);
    for (int i = 0; i < jt->rows; i++) {
        size_t py = (size_t)((double)i * H / jt->rows);
        for (int32_t q = jt->indptr[i]; q < jt->indptr[i + 1]; q++) {
            size_t px = (size_t)((double)jt->indices[q] * W / jt->cols);
            unsigned char c = jt->data[q] != 0.0f ? 2 : 1;
            if (cls[py * W + px] < c) cls[py * W + px] = c;
        }
    }
    int w = W * zoom, h = H * zoom;
    unsigned char *rgb = sp_xmalloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            memcpy(rgb + ((size_t)y * w + x) * 3, colour[cls[(size_t)(y / zoom) * W + x / zoom]], 3);
    /* through our FILE: stbi_write_png does not check its fwrite or fclose */
    sp_out out;
    sp_check(sp_out_open(&out, path, "--png"));
    int ok = stbi_write_png_to_func(png_to_file, out.f, w, h, 3, rgb, w * 3);
    free(rgb);
    free(cls);
    if (!ok) {
        sp_out_abort(&out);
        sp_fail("--png %s: write failed: cannot encode the image", path);
    }
    sp_check(sp_out_commit(&out));
}
