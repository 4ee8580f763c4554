/* wasm_models.c — the zoo models' out-of-order task graph and BPPSA plan for the teaching
 * page, computed in its WebAssembly build by the engines' own code (make site):
 *
 *   site_ooo(model, batch, channels, seq_len, hidden, order, k)
 *       the ooo engine's δO/δW/U task graph of one batch (sp_ooo_graph_build), its
 *       critical path, and for each ordering policy (order "": all four) the plan
 *       sp_ooo_plan_make makes (two lanes but for conventional; k <= 0: ⌈L/2⌉) with its
 *       peak_bytes, and the two-lane timeline of that plan on the engine's estimates
 *   site_bppsa_plan(model, levels, prune, batch, channels, seq_len, hidden)
 *       what `build/<app> --backward bppsa --plan=full --scan-levels levels --batch
 *       batch [--prune prune]` prints (levels -1: full), as "text", and its JSON keys as
 *       "report"
 *
 * model: a zoo name (layers/zoo.h); channels (lenet, vgg11, resnet20; 0: the zoo's) the
 * images' channels (build/vgg11 reads Fashion-MNIST, 1 channel, by default; the zoo's
 * VGG-11 takes 3); seq_len, hidden (rnn, gru; 0: the zoo's T and hidden size) as the
 * apps' --seq-len and --hidden. The parameters are the apps' seeded init (--seed 1),
 * pruned as --prune does (global magnitude). The input is zeros: only shapes, Jᵀ patterns
 * and masks enter the graph and the plan, never the values.
 *
 * How the engines get into WebAssembly: core/, layers/, optim/ and schedulers/backward/
 * are compiled unchanged, without oneDNN (conv2d's im2col path, no SP_HAVE_DNNL) and
 * with a portable SGEMM behind the CBLAS interface instead of OpenBLAS (site/wasm_blas.c,
 * site/cblas/cblas.h): the tape, the graph and the plan are the native build's code line
 * for line. The ooo graph records on a shape-only tape (core/tape.h: the planners' mode,
 * no kernel runs; VGG-11's graph takes 0.1 s instead of 2 s): it reads shapes and costs
 * only. The BPPSA plan cannot: it reports the forward's measured arena bytes, and a pruned
 * model's plan reads the masked Jᵀ values and runs the dense model's scan beside it, so
 * its forward runs, on the portable SGEMM (LeNet at batch 8: about 0.1 s). A shape-only
 * mode for every op's Jᵀ and pruning would have put a second path into core/ for the page.
 *
 * One kind of figure differs from a native run: the memory model's bytes count host
 * bookkeeping too (pointers, tape nodes, task records), which this 32-bit build lays out
 * smaller (Debian's emcc has no wasm64 libraries), so scan_bytes and peak_bytes fall a few
 * KiB short of a 64-bit build's; the Jᵀ values and products are the same to the byte
 * (make test-site checks both). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include "core/error.h"
#include "core/model.h"
#include "core/tape.h"
#include "core/tensor.h"
#include "layers/zoo.h"
#include "optim/prune.h"
#include "schedulers/backward/engine.h"
#include "schedulers/backward/engines.h"
#include "schedulers/backward/ooo.h"
#include "site/wasm_api.h"

/* ---- a zoo model and one batch of zeros ---------------------------------------------- */

typedef struct model_args {
    const char *name;
    int batch, channels, seq_len, hidden;
    double prune;             /* bppsa only */
    bool init;                /* the seeded init (bppsa: pruning and Jᵀ values read it) */
    sp_model *m;
    sp_pruning *pruning;
    sp_tensor x, x1;          /* the batch, and its first sample (the runner's check) */
    int *y;
    sp_tape t;
    bool have_tape;
} model_args;

static void model_make(model_args *a)
{
    int shape[4];
    int ndim = 1 + sp_zoo_input_shape(a->name, shape + 1);   /* an unknown name: the valid ones */
    bool rnn = !strcmp(a->name, "rnn"), gru = !strcmp(a->name, "gru"), lenet = !strcmp(a->name, "lenet"),
         vgg = !strcmp(a->name, "vgg11"), resnet = !strcmp(a->name, "resnet20");
    if (a->batch < 1 || a->batch > 64) sp_fail("--batch %d: expected 1..64", a->batch);
    if (a->channels && !lenet && !vgg && !resnet)
        sp_fail("channels %d: only the image models (lenet, vgg11, resnet20) take a channel count", a->channels);
    if (a->channels < 0 || a->channels > 16) sp_fail("channels %d: expected 1..16", a->channels);
    if ((a->seq_len || a->hidden) && !rnn && !gru)
        sp_fail("--seq-len and --hidden are the recurrent models' (rnn, gru), not %s's", a->name);
    if (a->seq_len < 0 || a->seq_len > 4096) sp_fail("--seq-len %d: expected 1..4096", a->seq_len);
    if (a->hidden < 0 || a->hidden > 1024) sp_fail("--hidden %d: expected 1..1024", a->hidden);
    if (!(a->prune >= 0 && a->prune < 1)) sp_fail("--prune %g: expected a fraction in [0, 1)", a->prune);
    if (a->seq_len) shape[1] = a->seq_len;
    if (a->channels) shape[1] = a->channels;
    if (a->hidden) a->m = rnn ? sp_zoo_rnn(shape[2], a->hidden, 10) : sp_zoo_gru(shape[2], a->hidden, 10);
    else if (a->channels) a->m = lenet ? sp_zoo_lenet(a->channels, shape[2])
                                 : vgg ? sp_zoo_vgg11(a->channels, 10) : sp_zoo_resnet20(a->channels, 10);
    else a->m = sp_zoo_model(a->name);
    if (a->init) sp_model_init(a->m, 1);
    if (a->prune > 0) a->pruning = sp_prune_magnitude(a->m, NULL, a->prune, SP_PRUNE_GLOBAL);
    shape[0] = a->batch;
    a->x = sp_tensor_new(ndim, shape);
    shape[0] = 1;
    a->x1 = sp_tensor_new(ndim, shape);
    a->y = sp_xcalloc((size_t)a->batch, sizeof *a->y);
}

static void model_free(model_args *a)
{
    if (a->have_tape) sp_tape_free(&a->t);
    sp_tensor_free(&a->x);
    sp_tensor_free(&a->x1);
    free(a->y);
    sp_prune_free(a->pruning);
    if (a->m) sp_model_free(a->m);
}

/* ---- the ooo task graph and its orders ----------------------------------------------- */

typedef struct ooo_args {
    model_args model;
    const char *order;
    int k;
    FILE *f;
} ooo_args;

/* Each lane runs its queue in order; a task waits for its lane and its predecessors (the
 * two-lane executor with modelled instead of measured durations). */
static double two_lanes(const sp_ooo_graph *g, const sp_ooo_plan *p, double *start, double *end, double *main_done)
{
    int at[2] = {0, 0};
    double free_at[2] = {0, 0};
    char *done = sp_xcalloc((size_t)g->nexec, 1);
    for (int placed = 0; placed < g->nexec;) {
        int progress = 0;
        for (int l = 0; l < 2; l++) {
            while (at[l] < p->nqueue[l]) {
                int t = p->queue[l][at[l]];
                const sp_ooo_task *k = &g->tasks[t];
                double ready = free_at[l];
                int ok = 1;
                for (int i = 0; i < k->npred; i++) {
                    int q = k->pred[i];
                    if (q >= g->nexec) continue;
                    if (!done[q]) {
                        ok = 0;
                        break;
                    }
                    if (end[q] > ready) ready = end[q];
                }
                if (!ok) break;
                start[t] = ready;
                end[t] = ready + k->est;
                free_at[l] = end[t];
                done[t] = 1;
                at[l]++, placed++, progress = 1;
            }
        }
        if (!progress) {
            free(done);
            sp_fail("ooo: the two lanes of the %s order wait on each other", sp_ooo_order_name(p->order));
        }
    }
    free(done);
    *main_done = free_at[0];
    return free_at[0] > free_at[1] ? free_at[0] : free_at[1];
}

static void ooo_body(void *arg)
{
    ooo_args *a = arg;
    model_args *ma = &a->model;
    int only = a->order && *a->order ? (int)sp_ooo_order_parse(a->order) : -1;
    if (a->k < 0) sp_fail("--k %d: expected >= 0", a->k);   /* the flag's range, as the apps refuse it */
    model_make(ma);
    int L = 0;   /* as the engine's check (ooo_hooks.c) */
    for (int i = 0; i < ma->m->nlayers; i++) L += ma->m->layers[i]->nparams > 0;
    if (a->k > L)
        sp_fail("--k %d: expected 0..%d for %s (its parameterised layers; 0 = half of them)", a->k, L, ma->m->name);
    sp_tape_init(&ma->t);
    ma->have_tape = true;
    sp_tape *t = &ma->t;
    t->shape_only = true;   /* the graph and its memory model read shapes and costs only */
    sp_ooo_graph *g = sp_ooo_graph_build(t, sp_model_loss(ma->m, t, &ma->x, ma->y), true);
    int n = g->nexec;

    /* the critical path: the longest chain of estimates, relaxed in the conventional
     * order (a topological order of the graph) */
    sp_ooo_plan *conv = sp_ooo_plan_make(t, g, SP_OOO_CONVENTIONAL, 0, 0, true);
    double *len = sp_tape_alloc(t, (size_t)n * sizeof *len);
    int *via = sp_tape_alloc(t, (size_t)n * sizeof *via);
    char *critical = sp_tape_alloc(t, (size_t)n);
    memset(len, 0, (size_t)n * sizeof *len);
    memset(critical, 0, (size_t)n);
    int last = 0;
    for (int i = 0; i < n; i++) {
        int task = conv->seq[i];
        const sp_ooo_task *k = &g->tasks[task];
        via[task] = -1;
        for (int j = 0; j < k->npred; j++)
            if (k->pred[j] < n && len[k->pred[j]] > len[task]) len[task] = len[k->pred[j]], via[task] = k->pred[j];
        len[task] += k->est;
        if (len[task] > len[last]) last = task;
    }
    for (int c = last; c >= 0; c = via[c]) critical[c] = 1;

    FILE *f = a->f;
    fprintf(f, "{\"ok\":true,\"model\":");
    site_json_str(f, ma->name);
    fprintf(f, ",\"batch\":%d,\"layers\":%d,\"critical_est\":%.6g,\"tasks\":[", ma->batch, g->L, len[last]);
    static const char *kinds[] = {"d", "g", "U", "F"};   /* δ, G, update, next forward */
    for (int i = 0; i < n; i++) {
        const sp_ooo_task *k = &g->tasks[i];
        char label[96];
        fprintf(f, "%s{\"label\":", i ? "," : "");
        site_json_str(f, sp_ooo_task_label(k, label, sizeof label));
        fprintf(f, ",\"kind\":\"%s\",\"rank\":%d,\"est\":%.6g,\"critical\":%d,\"pred\":[", kinds[k->kind], k->rank,
                k->est, critical[i]);
        for (int j = 0, c = 0; j < k->npred; j++)
            if (k->pred[j] < n) fprintf(f, "%s%d", c++ ? "," : "", k->pred[j]);
        fprintf(f, "]}");
    }
    /* each order: [task, lane, start, end] in the order's sequence */
    fprintf(f, "],\"orders\":[");
    double *start = sp_tape_alloc(t, (size_t)n * sizeof *start), *end = sp_tape_alloc(t, (size_t)n * sizeof *end);
    for (int o = SP_OOO_CONVENTIONAL, first = 1; o <= SP_OOO_LIST; o++) {
        if (only >= 0 && o != only) continue;
        sp_ooo_plan *p = sp_ooo_plan_make(t, g, (sp_ooo_order)o, a->k, 0, o != SP_OOO_CONVENTIONAL);
        double main_done, span = two_lanes(g, p, start, end, &main_done);
        fprintf(f, "%s{\"order\":\"%s\",\"k\":%d,\"peak_bytes\":%zu,\"makespan\":%.6g,\"main_done\":%.6g,\"tasks\":[",
                first ? "" : ",", sp_ooo_order_name(p->order), p->k, p->peak_bytes, span, main_done);
        for (int i = 0; i < n; i++) {
            int task = p->seq[i];
            fprintf(f, "%s[%d,%d,%.6g,%.6g]", i ? "," : "", task, p->lane[task], start[task], end[task]);
        }
        fprintf(f, "]}");
        first = 0;
    }
    fprintf(f, "]}");
}

SITE_API const char *site_ooo(const char *model, int batch, int channels, int seq_len, int hidden, const char *order,
                              int k)
{
    ooo_args a = {.model = {.name = model, .batch = batch, .channels = channels, .seq_len = seq_len, .hidden = hidden},
                  .order = order, .k = k};
    site_out o;
    site_out_open(&o);
    a.f = o.f;
    int st = sp_try(ooo_body, &a);
    model_free(&a.model);
    if (st == SP_OK) return site_out_close(&o);
    fclose(o.f);
    free(o.buf);
    return site_error_answer();
}

/* ---- the BPPSA plan ------------------------------------------------------------------ */

typedef struct bppsa_args {
    model_args model;
    int levels;
    FILE *report;             /* the JSON keys of the plan (sp_report_writer) */
    int nkeys;
    sp_engine *e;
} bppsa_args;

static void key(bppsa_args *a, const char *k)
{
    fprintf(a->report, "%s", a->nkeys++ ? "," : "");
    site_json_str(a->report, k);
    fputc(':', a->report);
}
/* the runner's JSON line formats (cli/summary.c: sp_json_*) */
static void put_str(void *ctx, const char *k, const char *v)
{
    key(ctx, k);
    site_json_str(((bppsa_args *)ctx)->report, v);
}
static void put_num(void *ctx, const char *k, double v)
{
    key(ctx, k);
    fprintf(((bppsa_args *)ctx)->report, "%.9g", v);
}
static void put_int(void *ctx, const char *k, long v)
{
    key(ctx, k);
    fprintf(((bppsa_args *)ctx)->report, "%ld", v);
}

/* as the runner's --plan (cli/run.c): the options checked against the model
 * on one sample, then the plan-only engine on the batch */
static void bppsa_body(void *arg)
{
    bppsa_args *a = arg;
    if (a->levels < -1 || a->levels > 1000000)   /* as the engine's --scan-levels parse (bppsa.c) */
        sp_fail("--scan-levels %d: expected 0 (linear BP) .. the model's full depth, full or auto", a->levels);
    model_make(&a->model);
    sp_engine_opts eo = sp_engine_opts_default();
    eo.own = &(sp_bppsa_opts){.scan_levels = a->levels};
    eo.plan = eo.plan_full = eo.plan_only = true;
    a->e = sp_engine_create("bppsa", &eo);
    if (!a->e) sp_fail("%s", sp_last_error());   /* under the call's sp_try: its status */
    sp_engine_check(a->e, a->model.m, &a->model.x1, a->model.y);
    sp_report_writer w = {.ctx = a, .str = put_str, .num = put_num, .integer = put_int};
    if (!sp_engine_plan(a->e, a->model.m, &a->model.x, a->model.y, &w)) sp_fail("%s: --plan: no plan was made", a->model.name);
}

/* The engine prints the plan on stdout: fd 1 goes to an in-memory file meanwhile. */
static int saved_stdout = -1;
static const char *capture_path = "/bppsa-plan.txt";

static void capture_begin(void)
{
    fflush(stdout);
    saved_stdout = dup(1);
    int fd = open(capture_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 1);
    close(fd);
}

static char *capture_end(void)
{
    fflush(stdout);
    dup2(saved_stdout, 1);
    close(saved_stdout);
    FILE *f = fopen(capture_path, "r");
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    int ch;
    while (f && (ch = fgetc(f)) != EOF) fputc(ch, m);
    fclose(m);
    if (f) fclose(f);
    unlink(capture_path);
    return text;
}

SITE_API const char *site_bppsa_plan(const char *model, int levels, double prune, int batch, int channels, int seq_len,
                                     int hidden)
{
    bppsa_args a = {.model = {.name = model, .batch = batch, .channels = channels, .seq_len = seq_len, .hidden = hidden,
                              .prune = prune, .init = true},
                    .levels = levels};
    char *report = NULL;
    size_t report_len = 0;
    a.report = open_memstream(&report, &report_len);
    capture_begin();
    int st = sp_try(bppsa_body, &a);
    char *text = capture_end();
    fclose(a.report);
    if (a.e) sp_engine_destroy(a.e);
    model_free(&a.model);
    const char *answer;
    if (st == SP_OK) {
        site_out o;
        site_out_open(&o);
        fprintf(o.f, "{\"ok\":true,\"model\":");
        site_json_str(o.f, model);
        fprintf(o.f, ",\"prune\":%.9g,\"report\":{%s},\"text\":", prune, report);
        site_json_str(o.f, text ? text : "");
        fprintf(o.f, "}");
        answer = site_out_close(&o);
    } else {
        answer = site_error_answer();
    }
    free(report);
    free(text);
    return answer;
}
