/* train.c — the training loop, evaluation and progress display. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/device.h"
#include "core/error.h"
#include "core/io/fileio.h"
#include "core/parallel.h"
#include "schedulers/train/checkpoint.h"
#include "schedulers/parallel/exec.h"
#include "schedulers/train/train.h"

static sp_device model_device(const sp_model *m) { return m->nparams ? m->params[0]->value.device : SP_CPU; }

/* The step after the tape's reset; on a device everything is queued, nothing waited for. */
static sp_node *step_body(sp_model *m, sp_engine *e, sp_optim *o, sp_tape *t, const sp_tensor *x, const int *y,
                          double *fwd_s, double *bwd_s)
{
    sp_optim_zero_grad(o);
    double t0 = sp_now();
    sp_tensor xin = sp_tape_copy_on(t, model_device(m), x);   /* the batch goes up (--device cuda) */
    t->reuse_inputs = (e->caps & SP_ENGINE_OVER_INPUTS) && model_device(m) == SP_CPU;   /* ReLUs over inputs (tape.h) */
    sp_node *loss = sp_model_loss(m, t, &xin, y);
    double t1 = sp_now();
    sp_backward(e, t, loss);
    double t2 = sp_now();
    if (!e->opts.update) sp_optim_step(o);   /* else the engine ran every layer's update */
    if (fwd_s) *fwd_s = t1 - t0;
    if (bwd_s) *bwd_s = t2 - t1;
    return loss;
}

static sp_node *step_queue(sp_model *m, sp_engine *e, sp_optim *o, sp_tape *t, const sp_tensor *x, const int *y,
                           double *fwd_s, double *bwd_s)
{
    sp_tape_reset(t);
    return step_body(m, e, o, t, x, y, fwd_s, bwd_s);
}

/* ---- the next forward overlaps the last δW/U (an engine with backward_async: ooo's
 * CPU lanes or device streams) ------------------------------------------------------------ */

static void wait_layer(void *e, const sp_layer *l) { sp_engine_wait_layer(e, l); }

/* The step on tape t while the previous step's backward (on the other tape) may still
 * run its last δW and U (ooo: on the sub lane or stream): each layer's forward waits for
 * that layer's update alone (the engine's wait_layer); then the engine is joined (sync),
 * the gradients zeroed and this step's backward started without a join
 * (backward_async). On a device the staged batch of the previous step (slot `release`)
 * is released after the join; on the CPU (release < 0) the batch and labels are copied
 * into the tape, since the loader reuses its buffers while this step's last δW may still
 * read them. */
static sp_node *step_queue_overlap(sp_model *m, sp_engine *e, sp_optim *o, sp_tape *t, const sp_tensor *x,
                                   const int *y, int release, double *fwd_s, double *bwd_s)
{
    sp_tape_reset(t);   /* the tape of two steps ago: joined, so lane 0 alone is waited for */
    double t0 = sp_now();
    sp_tensor xc;
    if (release < 0) {
        xc = sp_tape_tensor(t, x->ndim, x->shape);
        memcpy(xc.data, x->data, x->numel * sizeof(float));
        int *yc = sp_tape_alloc(t, (size_t)x->shape[0] * sizeof *yc);
        memcpy(yc, y, (size_t)x->shape[0] * sizeof *yc);
        x = &xc;
        y = yc;
    }
    t->before_apply = wait_layer;
    t->before_apply_ctx = e;
    sp_node *loss = sp_model_loss(m, t, x, y);
    t->before_apply = NULL;
    sp_engine_sync(e);   /* the previous backward's tail joined: every update has read its gradient */
    if (release >= 0) sp_backend_allocator(model_device(m))->release_staged(release);
    sp_optim_zero_grad(o);
    double t1 = sp_now();
    sp_backward_async(e, t, loss);
    if (fwd_s) *fwd_s = t1 - t0;
    if (bwd_s) *bwd_s = sp_now() - t1;
    return loss;
}

/* ---- the whole step as one device graph ----------------------------------------------- */

#define STEP_GRAPHS 4   /* two staged input slots, times a full and a smaller last batch */

struct sp_step_graph {
    sp_model *m;
    sp_engine *e;
    sp_optim *o;
    sp_device dev;
    struct {
        uint64_t key;
        long used;            /* 0: empty */
        bool capturable;      /* no host randomness in the step */
        void *graph;          /* captured: replay it */
        sp_tensor loss;       /* the captured step's loss (its arena address) */
        int classes;          /* the logits' width: replayed labels are range-checked */
    } c[STEP_GRAPHS];
    long clock, captures, replays;
};

static uint64_t mix64(uint64_t h, uint64_t v)
{
    for (int b = 0; b < 8; b++) h = (h ^ ((v >> (8 * b)) & 0xff)) * 0x100000001b3ull;
    return h;
}

sp_step_graph *sp_step_graph_new(sp_model *m, sp_engine *e, sp_optim *o)
{
    if (!m) sp_fail("sp_step_graph_new: argument 'm' is NULL");
    if (!e) sp_fail("sp_step_graph_new: argument 'e' is NULL");
    if (!o) sp_fail("sp_step_graph_new: argument 'o' is NULL");
    sp_device dev = model_device(m);
    if (dev == SP_CPU) sp_fail("--cuda-graph: the model is on the cpu (expected --device cuda)");
    sp_backend_graph(dev);   /* fails now without graph support */
    sp_step_graph *g = sp_xcalloc(1, sizeof *g);
    *g = (sp_step_graph){.m = m, .e = e, .o = o, .dev = dev};
    sp_optim_device_scalars(o, true);
    sp_engine_set_step_capture(e, true);   /* the engine captures nothing of its own */
    return g;
}

/* Ops whose forward draws host randomness each step: a replay would repeat it. */
static bool step_capturable(const sp_tape *t)
{
    for (int i = 0; i < t->n; i++)
        if (t->nodes[i]->op && strcmp(t->nodes[i]->op->name, "dropout") == 0 && !t->nodes[i]->layer->eval) return false;
    return true;
}

const sp_tensor *sp_step_graph_step(sp_step_graph *g, sp_tape *t, const sp_tensor *x, const int *y, const int *y_dev)
{
    if (!g) sp_fail("sp_step_graph_step: argument 'g' is NULL");
    if (!t) sp_fail("sp_step_graph_step: argument 't' is NULL");
    if (!x) sp_fail("sp_step_graph_step: argument 'x' is NULL");
    if (!y) sp_fail("sp_step_graph_step: argument 'y' is NULL");
    const sp_device_allocator *a = sp_backend_allocator(g->dev);
    sp_tape_reset(t);   /* waits for the previous step: outside any capture */
    const void *base = t->dev_arena[g->dev] ? a->arena_base(t->dev_arena[g->dev]) : NULL;
    uint64_t key = 0xcbf29ce484222325ull;
    key = mix64(key, (uint64_t)(uintptr_t)x->data);
    key = mix64(key, (uint64_t)(uintptr_t)y_dev);
    key = mix64(key, (uint64_t)(uintptr_t)base);
    key = mix64(key, (uint64_t)g->m->eval);
    key = mix64(key, (uint64_t)x->ndim);
    for (int d = 0; d < x->ndim; d++) key = mix64(key, (uint64_t)x->shape[d]);
    int slot = -1, lru = 0;
    for (int i = 0; i < STEP_GRAPHS; i++) {
        if (g->c[i].used && g->c[i].key == key) slot = i;
        if (g->c[i].used < g->c[lru].used) lru = i;
    }
    g->clock++;
    sp_optim_stage_scalars(g->o);   /* this step's lr, step counts, bias corrections: one copy */
    if (slot >= 0 && g->c[slot].graph) {   /* replay */
        int K = g->c[slot].classes, B = x->shape[0];
        for (int b = 0; b < B; b++)   /* the live op's check, in its words */
            if (y[b] < 0 || y[b] >= K) sp_fail("softmax_ce: label %d of sample %d out of range [0, %d)", y[b], b, K);
        g->c[slot].used = g->clock;
        sp_backend_graph(g->dev)->launch(g->c[slot].graph);
        g->replays++;
        return &g->c[slot].loss;
    }
    bool capture = slot >= 0 && g->c[slot].capturable && base;
    if (slot < 0) {   /* a new key: live now, captured when it comes again */
        slot = lru;
        sp_backend_graph(g->dev)->free(g->c[slot].graph);
        g->c[slot].graph = NULL;
        g->c[slot].key = key;
    }
    g->c[slot].used = g->clock;
    if (capture) sp_backend_graph(g->dev)->capture_begin();
    t->dev_labels = y_dev;
    sp_node *loss = step_body(g->m, g->e, g->o, t, x, y, NULL, NULL);
    t->dev_labels = NULL;
    if (capture) {
        g->c[slot].graph = sp_backend_graph(g->dev)->capture_end();
        sp_backend_graph(g->dev)->launch(g->c[slot].graph);
        g->captures++;
    }
    g->c[slot].capturable = base && y_dev && step_capturable(t);
    g->c[slot].loss = loss->out;
    g->c[slot].classes = sp_node_x(loss)->shape[1];
    return &g->c[slot].loss;
}

void sp_step_graph_counts(const sp_step_graph *g, long *captures, long *replays)
{
    if (!g) sp_fail("sp_step_graph_counts: argument 'g' is NULL");
    if (!captures) sp_fail("sp_step_graph_counts: argument 'captures' is NULL");
    if (!replays) sp_fail("sp_step_graph_counts: argument 'replays' is NULL");
    *captures = g->captures;
    *replays = g->replays;
}

void sp_step_graph_free(sp_step_graph *g)
{
    if (!g) return;
    for (int i = 0; i < STEP_GRAPHS; i++) sp_backend_graph(g->dev)->free(g->c[i].graph);
    sp_optim_device_scalars(g->o, false);
    sp_engine_set_step_capture(g->e, false);
    free(g);
}

float sp_train_step(sp_model *m, sp_engine *e, sp_optim *o, sp_tape *t, const sp_tensor *x, const int *y,
                    double *fwd_s, double *bwd_s, double *step_s)
{
    if (!m) sp_fail("sp_train_step: argument 'm' is NULL");
    if (!e) sp_fail("sp_train_step: argument 'e' is NULL");
    if (!o) sp_fail("sp_train_step: argument 'o' is NULL");
    if (!t) sp_fail("sp_train_step: argument 't' is NULL");
    if (!x) sp_fail("sp_train_step: argument 'x' is NULL");
    if (!y) sp_fail("sp_train_step: argument 'y' is NULL");
    double t0 = sp_now();
    sp_node *loss = step_queue(m, e, o, t, x, y, fwd_s, bwd_s);
    float l = sp_tensor_get(&loss->out, 0);   /* waits for the step on a device */
    if (step_s) *step_s = sp_now() - t0;
    return l;
}

/* A batch's x in device slot `slot`, its upload started (sp_device_allocator.stage). */
static sp_tensor stage_batch(sp_device dev, const sp_tensor *x, int slot)
{
    sp_tensor d = sp_tensor_view(NULL, x->ndim, x->shape);
    d.device = dev;
    d.data = sp_backend_allocator(dev)->stage(slot, x->data, x->numel);
    return d;
}

/* Evaluation state kept across the evaluations of one training run: the loader's batch
 * buffers and the tape's arena are allocated by the first evaluation and reused, so
 * evaluating every epoch (or every N steps) allocates nothing after the first time (a
 * new tape and loader per evaluation fragmented the heap: issue 19, item 15). */
typedef struct slice_ds {
    sp_dataset d;
    sp_dataset *base;
    int off;
} slice_ds;

typedef struct evaluator {
    slice_ds slice;            /* with ranks: this rank's share of the test set */
    sp_dataset *d;             /* what this process evaluates (NULL: nothing)   */
    sp_loader *l;
    sp_tape t;                 /* its arena: the input, the loss; the others:   */
    sp_arena *slot;            /* one arena per output alive at once (eval_forward) */
    int *slot_of, *last_use;   /* per layer: its output's slot, its last reader */
    int nslots;
    sp_tape *idle[3];          /* the steps' host tapes, idle while it runs: trimmed */
} evaluator;

static void evaluator_init(evaluator *ev, sp_dataset *d, int batch)
{
    ev->d = d;
    ev->l = sp_loader_new_sync(d, batch, false, 0, false);
    if (!ev->l) sp_fail("%s", sp_last_error());   /* a status under sp_train's sp_try */
    sp_tape_init(&ev->t);
}

static void evaluator_free(evaluator *ev)
{
    if (!ev->l) return;
    sp_tape_free(&ev->t);
    for (int s = 0; s < ev->nslots; s++) sp_arena_free(&ev->slot[s]);
    free(ev->slot);
    free(ev->slot_of);
    free(ev->last_use);
    ev->slot = NULL;
    ev->slot_of = ev->last_use = NULL;
    ev->nslots = 0;
    sp_loader_free(ev->l);
    ev->l = NULL;
}

/* The forward of sp_model_loss, the same kernels on the same inputs (bitwise the same
 * logits and loss), but no output outlives its last reader: nothing goes backward, so
 * layer i's output (with its scratch) lives in an arena of its own, reset once the last
 * layer reading it has run, and the next layer takes the free arena of lowest index. A
 * chain then holds two outputs at a time, not the whole network's: at VGG-11's
 * evaluation batch of 256 that is 0.56 GB less. The host arena only: a device's
 * outputs stay in its arena (a device op may alias its input). */
static sp_node *eval_forward(evaluator *ev, sp_model *m, const sp_tensor *x, const int *labels)
{
    int L = m->nlayers;
    if (!m->loss) sp_fail("model '%s': no loss (its builder sets one, e.g. sp_model_set_loss(m, sp_softmax_ce()))", m->name);
    if (!ev->slot_of) {   /* the first batch: who reads what last */
        ev->slot = sp_xcalloc((size_t)L + 1, sizeof *ev->slot);
        ev->slot_of = sp_xmalloc(((size_t)L + 1) * sizeof *ev->slot_of);
        ev->last_use = sp_xmalloc(((size_t)L + 1) * sizeof *ev->last_use);
        ev->nslots = L + 1;
        for (int i = 0; i < L; i++) ev->last_use[i] = i == L - 1 ? L : i;   /* the logits: the loss reads them */
        for (int i = 0; i < L; i++)
            for (int k = m->from_start[i]; k < m->from_start[i + 1]; k++)
                if (m->from[k] >= 0 && ev->last_use[m->from[k]] < i) ev->last_use[m->from[k]] = i;
    }
    for (int s = 0; s < ev->nslots; s++) sp_arena_reset(&ev->slot[s]);
    bool busy[ev->nslots];
    memset(busy, 0, sizeof busy);
    sp_node *in = sp_tape_input(&ev->t, x), *out = in;
    sp_node **node = sp_tape_alloc(&ev->t, ((size_t)L + 1) * sizeof *node);
    for (int i = 0; i < L; i++) {
        int k0 = m->from_start[i], nin = m->from_start[i + 1] - k0;
        sp_node **a = sp_tape_alloc(&ev->t, (size_t)nin * sizeof *a);
        for (int k = 0; k < nin; k++) a[k] = m->from[k0 + k] == SP_MODEL_INPUT ? in : node[m->from[k0 + k]];
        int s = 0;
        while (busy[s]) s++;   /* at most L outputs are alive: one slot is free */
        sp_arena keep = ev->t.arena;
        ev->t.arena = ev->slot[s];
        out = node[i] = sp_apply_n(&ev->t, m->layers[i], nin, a);
        ev->slot[s] = ev->t.arena;
        ev->t.arena = keep;
        busy[s] = ev->last_use[i] > i;   /* an output nobody reads is dropped at once */
        if (!busy[s]) sp_arena_reset(&ev->slot[s]);
        ev->slot_of[i] = s;
        for (int k = 0; k < nin; k++) {   /* the outputs read for the last time: their slots free */
            int j = m->from[k0 + k];
            if (j >= 0 && ev->last_use[j] == i && busy[ev->slot_of[j]]) {
                busy[ev->slot_of[j]] = false;
                sp_arena_reset(&ev->slot[ev->slot_of[j]]);
            }
        }
    }
    return sp_apply_loss(&ev->t, m->loss, out, labels);
}

static void eval_pass(evaluator *ev, sp_model *m, double *loss_out, double *acc_out)
{
    bool was_training = !m->eval;
    sp_model_set_training(m, false);   /* batch norm: running statistics; no dropout */
    sp_loader_set_epoch(ev->l, 0);     /* rewinds (no shuffle: the same order every time) */
    double loss = 0.0;
    long correct = 0, seen = 0;
    sp_batch b;
    while (sp_loader_next(ev->l, &b)) {
        sp_tape_reset(&ev->t);
        sp_tensor xin = sp_tape_copy_on(&ev->t, model_device(m), &b.x);
        sp_node *ln = eval_forward(ev, m, &xin, b.y);
        const sp_tensor *z = sp_node_x(ln);   /* logits */
        int K = z->shape[1];
        const float *zh = z->data;
        if (z->device != SP_CPU) {   /* the logits come down */
            float *h = sp_tape_alloc(&ev->t, z->numel * sizeof(float));
            sp_tensor_read(h, z);
            zh = h;
        }
        for (int i = 0; i < b.n; i++) {
            const float *zi = zh + (size_t)i * K;
            int best = 0;
            for (int k = 1; k < K; k++) best = zi[k] > zi[best] ? k : best;
            correct += best == b.y[i];
        }
        loss += (double)sp_tensor_get(&ln->out, 0) * b.n;
        seen += b.n;
    }
    sp_model_set_training(m, was_training);
    *loss_out = seen ? loss / (double)seen : NAN;
    *acc_out = seen ? (double)correct / (double)seen : NAN;
}

void sp_evaluate(sp_model *m, sp_dataset *d, int batch, double *loss_out, double *acc_out)
{
    if (!m) sp_fail("sp_evaluate: argument 'm' is NULL");
    if (!d) sp_fail("sp_evaluate: argument 'd' is NULL");
    if (!loss_out) sp_fail("sp_evaluate: argument 'loss_out' is NULL");
    if (!acc_out) sp_fail("sp_evaluate: argument 'acc_out' is NULL");
    evaluator ev = {0};
    evaluator_init(&ev, d, batch);
    eval_pass(&ev, m, loss_out, acc_out);
    evaluator_free(&ev);
}

/* ---- evaluation across ranks --------------------------------------------------------- */

/* Rank r of W evaluates the samples [r·n/W, (r+1)·n/W) of d; the sums meet by allreduce. */
static void slice_get(sp_dataset *d, int i, float *x, int *y)
{
    slice_ds *s = (slice_ds *)d;
    sp_dataset_get(s->base, s->off + i, x, y);
}

static void evaluator_open(evaluator *ev, sp_dataset *d, int batch, const sp_train_cfg *cfg)
{
    *ev = (evaluator){0};
    if (!cfg->exec) {
        evaluator_init(ev, d, batch);
        return;
    }
    int W = sp_exec_workers(cfg->exec), r = sp_exec_rank(cfg->exec);
    int lo = (int)((long)d->n * r / W), hi = (int)((long)d->n * (r + 1) / W);
    ev->slice = (slice_ds){.d = *d, .base = d, .off = lo};
    ev->slice.d.n = hi - lo;
    ev->slice.d.get = slice_get;
    ev->slice.d.label = NULL;   /* the base's would read the slice as the base */
    ev->slice.d.free = NULL;
    ev->slice.d.norm_channels = 0;   /* the base normalises */
    if (ev->slice.d.n > 0) evaluator_init(ev, &ev->slice.d, batch);
}

static void evaluate(evaluator *ev, sp_model *m, sp_dataset *d, const sp_train_cfg *cfg, double *loss, double *acc)
{
    /* the step's arena and the evaluation's are not needed at once (VGG-11 b32: 0.17 GB) */
    for (int k = 0; k < 3; k++)
        if (ev->idle[k]) sp_tape_trim(ev->idle[k]);
    if (!cfg->exec) {
        eval_pass(ev, m, loss, acc);
        return;
    }
    sp_exec_sync_weights(cfg->exec);
    int n = ev->l ? ev->d->n : 0;
    double l = 0, a = 0;
    if (n > 0) eval_pass(ev, m, &l, &a);
    float sums[2] = {(float)(l * n), (float)floor(a * n + 0.5)};   /* rounded per rank, then summed */
    sp_comm_set_label("evaluation");
    sp_allreduce(sp_comm_world(), sums, 2);
    *loss = d->n ? (double)sums[0] / d->n : NAN;
    *acc = d->n ? floor((double)sums[1]) / d->n : NAN;
}

/* ---- progress ------------------------------------------------------------------------ */

typedef struct progress {
    bool tty, quiet;
    double start, last_print;
    long total_steps;
} progress;

static void progress_show(progress *p, const char *app, int epoch, int epochs, long step, double loss,
                          double ips, bool force)
{
    if (p->quiet) return;
    double now = sp_now();
    if (!force && now - p->last_print < (p->tty ? 0.1 : 10.0)) return;
    p->last_print = now;
    double frac = p->total_steps ? (double)step / (double)p->total_steps : 0.0;
    double eta = frac > 0 ? (now - p->start) * (1.0 - frac) / frac : 0.0;
    if (p->tty) {
        char bar[31];
        int fill = (int)(frac * 30);
        for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
        bar[30] = 0;
        fprintf(stderr, "\r%s epoch %d/%d [%s] %ld/%ld loss %.4f %.0f img/s ETA %.0fs   ", app, epoch + 1, epochs,
                bar, step, p->total_steps, loss, ips, eta);
    } else {
        fprintf(stderr, "%s epoch %d/%d step %ld/%ld loss %.4f %.0f img/s ETA %.0fs\n", app, epoch + 1, epochs,
                step, p->total_steps, loss, ips, eta);
    }
}

static void progress_line(progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void progress_line(progress *p, const char *fmt, ...)
{
    if (p->quiet) return;
    if (p->tty) fputc('\n', stderr);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_ms(double *v, long n)
{
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return 1e3 * (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

#define LOG_HEADER "step,epoch,loss,lr,seconds,test_loss,test_acc\n"

/* A resumed run's log (keep >= 0: the checkpoint's step): the rows of the old log up to
 * that step, in memory (rows past it, which a killed run may have written, are dropped);
 * NULL when there is none. *eval_at_keep: whether one of them is an evaluation at keep. */
static char *log_rows_upto(const char *path, long keep, bool *eval_at_keep)
{
    FILE *f = keep >= 0 ? sp_open_read(path, NULL) : NULL;   /* none yet (or not a file: refused below) */
    if (!f) return NULL;
    size_t len = 0, cap = 4096;
    char *out = sp_xmalloc(cap), line[1024];
    out[0] = 0;
    bool header = true;
    while (fgets(line, sizeof line, f)) {
        if (header) {   /* the header is written anew */
            header = false;
            if (strcmp(line, LOG_HEADER) == 0) continue;
        }
        char *end;
        long step = strtol(line, &end, 10);
        if (end == line || *end != ',' || step > keep) continue;
        size_t n = strlen(line);
        if (line[n - 1] != '\n') continue;   /* a row cut short by a kill */
        const char *loss = strchr(end + 1, ',');   /* after the epoch: empty in an evaluation's row */
        if (step == keep && loss && loss[1] == ',') *eval_at_keep = true;
        if (len + n + 1 > cap) out = sp_xrealloc(out, cap = 2 * (len + n + 1));
        memcpy(out + len, line, n + 1);
        len += n;
    }
    fclose(f);
    return out;
}

/* The --log CSV collects in memory and replaces the file atomically at each checkpoint
 * save (so the log on disk matches the checkpoint a resume starts from) and at the end. */
static int open_log(sp_out *out, const char *path, long resumed_step, bool *eval_at_keep, FILE **log)
{
    *log = NULL;
    if (!path) return SP_OK;
    if (sp_out_open(out, path, "--log") != SP_OK) return SP_ERR;
    char *kept = log_rows_upto(path, resumed_step, eval_at_keep);
    fprintf(out->f, LOG_HEADER);
    if (kept) fputs(kept, out->f);
    free(kept);
    *log = out->f;
    return SP_OK;
}

/* An evaluation's row of the --log CSV: the loss column empty, the test columns set. */
static void log_eval(FILE *log, long step, int epoch, const sp_optim *o, double seconds, double loss, double acc)
{
    if (log) fprintf(log, "%ld,%d,,%.9g,%.6f,%.9g,%.9g\n", step, epoch, sp_optim_get_lr(o), seconds, loss, acc);
}

sp_train_cfg sp_train_cfg_default(void)
{
    return (sp_train_cfg){.app = "train", .epochs = 1, .eval_batch = 256};
}

/* The configuration's own checks, before anything is allocated or read. */
static int check_cfg(const sp_train_cfg *cfg, const sp_dataset *test)
{
    const char *app = cfg->app ? cfg->app : "sp_train";
    if (cfg->epochs < 0 || cfg->steps < 0 || (cfg->epochs == 0 && cfg->steps == 0))
        return sp_error("%s: %d epochs and %ld steps: give at least one limit (sp_train_cfg.epochs or .steps)", app,
                        cfg->epochs, cfg->steps);
    if (test && cfg->eval_batch < 1)
        return sp_error("%s: sp_train_cfg.eval_batch is %d (expected >= 1; start from sp_train_cfg_default())", app,
                        cfg->eval_batch);
    if (cfg->eval_every < 0)
        return sp_error("%s: sp_train_cfg.eval_every is %d (expected >= 0)", app, cfg->eval_every);
    if (cfg->save_every < 0 || (cfg->save_every > 0 && !cfg->save_path))
        return sp_error("%s: sp_train_cfg.save_every is %ld (expected >= 0, and a save_path with it)", app,
                        cfg->save_every);
    return SP_OK;
}

/* What sp_train returns when it refuses before any work: the message is in sp_last_error(). */
static sp_train_result refused(void) { return (sp_train_result){.test_loss = NAN, .test_acc = NAN, .status = SP_ERR}; }

/* One sp_train call: what it holds, so that a failure anywhere in the run (an sp_fail
 * inside a step, caught by sp_try) frees all of it. */
typedef struct train_run {
    sp_model *m;
    sp_engine *e;
    sp_optim *o;
    sp_loader *train;
    sp_dataset *test;
    const sp_train_cfg *cfg;
    sp_train_result r;
    sp_train_state resumed;
    long per_epoch, total, first;
    int epochs;
    bool logged_eval;   /* the kept log already has the evaluation at the resumed step */
    sp_out logout;
    FILE *log;
    double *fwd, *bwd, *all;   /* per-step times, indexed by step */
    progress p;
    sp_tape t, tapes[2];
    evaluator ev;
    sp_step_graph *sg;
    bool overlap, zero_in_step, was_training;
} train_run;

/* The run itself, under sp_try: a failure (a non-finite loss, a failed save or log
 * write, a shape or label a layer refuses) is an sp_fail, which returns to sp_train. */
static void train_body(void *arg)
{
    train_run *s = arg;
    sp_model *m = s->m;
    sp_engine *e = s->e;
    sp_optim *o = s->o;
    sp_loader *train = s->train;
    sp_dataset *test = s->test;
    const sp_train_cfg *cfg = s->cfg;
    sp_train_result *r = &s->r;
    const sp_train_state resumed = s->resumed;
    long total = s->total, first = s->first;
    int epochs = s->epochs;
    double *fwd = s->fwd, *bwd = s->bwd, *all = s->all;
    FILE *log = s->log;
    if (test) evaluator_open(&s->ev, test, cfg->eval_batch, cfg);
    double busy = 0.0;
    long images = 0;
    sp_step_graph *sg = s->sg = cfg->cuda_graph && model_device(m) != SP_CPU ? sp_step_graph_new(m, e, o) : NULL;
    /* An engine that runs its backward asynchronously and the updates itself (ooo), without
     * the graph: step k+1's forward overlaps step k's last δW/U (on the CPU with two
     * threads or more: its lanes; docs/OOO.md) */
    bool overlap = s->overlap = !sg && !cfg->exec && e->backward_async && e->opts.update &&
                                (model_device(m) != SP_CPU || sp_get_threads() >= 2);
    /* On the CPU each update zeroes the gradient it read (in cache, same pass) and the
     * next step's zero_grad skips it: nothing writes a gradient in between here. */
    s->zero_in_step = model_device(m) == SP_CPU;
    if (s->zero_in_step) sp_optim_set_zero_in_step(o, true);
    if (!s->sg && model_device(m) == SP_CPU) {   /* every step joined before an evaluation (overlap: sync) */
        s->ev.idle[0] = &s->t;
        s->ev.idle[1] = &s->tapes[0];
        s->ev.idle[2] = &s->tapes[1];
    }

    for (int epoch = resumed.epoch; epoch < epochs && r->steps < total; epoch++) {
        sp_loader_set_epoch(train, epoch);
        if (cfg->lr) sp_optim_set_lr(o, sp_lr_at(cfg->lr, epoch));
        double epoch_loss = 0.0;
        long epoch_steps = 0;
        sp_batch b, nb = {0};
        if (cfg->resume_path && epoch == resumed.epoch) {   /* the epoch's order; skip what was done */
            for (; epoch_steps < resumed.batch; epoch_steps++)
                if (!sp_loader_next(train, &b)) break;
            epoch_loss = resumed.epoch_loss;
        }
        r->epochs = epoch + 1;
        /* On a device, batch k+1 goes up (pinned slot, copy stream) while step k runs:
         * step k is queued, the next batch fetched and staged, then step k's loss read. */
        sp_device dev = model_device(m);
        int slot = 0;
        bool have = r->steps < total && sp_loader_next(train, &b);
        sp_tensor xd = have && dev != SP_CPU ? stage_batch(dev, &b.x, slot) : b.x;
        const int *yd = have && sg ? sp_backend_allocator(dev)->stage_labels(slot, b.y, (size_t)b.n) : NULL;
        while (have) {
            double f, bw, st;
            float loss;
            bool next = false;
            if (dev == SP_CPU && overlap) {
                double t0 = sp_now();
                sp_tape *tp = &s->tapes[r->steps % 2];
                loss = sp_tensor_get(&step_queue_overlap(m, e, o, tp, &b.x, b.y, -1, &f, &bw)->out, 0);
                st = sp_now() - t0;
            } else if (dev == SP_CPU) {
                loss = cfg->exec ? sp_exec_step(cfg->exec, &b.x, b.y, &f, &bw, &st)
                                 : sp_train_step(m, e, o, &s->t, &b.x, b.y, &f, &bw, &st);
            } else {
                double t0 = sp_now();
                sp_backend_allocator(dev)->use_staged(slot);
                const sp_tensor *lt;
                if (sg) {
                    lt = sp_step_graph_step(sg, &s->t, &xd, b.y, yd);
                    f = sp_now() - t0;   /* queueing (or one launch); the backward inside */
                    bw = 0;
                } else if (overlap) {
                    lt = &step_queue_overlap(m, e, o, &s->tapes[r->steps % 2], &xd, b.y, slot ^ 1, &f, &bw)->out;
                } else {
                    lt = &step_queue(m, e, o, &s->t, &xd, b.y, &f, &bw)->out;
                }
                next = r->steps + 1 < total && sp_loader_next(train, &nb);   /* b.y stays valid: copied up */
                if (next) xd = stage_batch(dev, &nb.x, slot ^ 1);
                if (next && sg) yd = sp_backend_allocator(dev)->stage_labels(slot ^ 1, nb.y, (size_t)nb.n);
                loss = sp_tensor_get(lt, 0);
                st = sp_now() - t0;
            }
            if (!isfinite(loss))
                sp_fail("%s: loss became %g at step %ld (try a smaller --lr)", cfg->app ? cfg->app : "sp_train", loss,
                        r->steps);
            fwd[r->steps] = f;
            bwd[r->steps] = bw;
            all[r->steps] = st;
            busy += st;
            images += b.n;
            r->steps++;
            epoch_loss += loss;
            epoch_steps++;
            r->last_loss = loss;
            if (log)
                fprintf(log, "%ld,%d,%.9g,%.9g,%.6f,,\n", r->steps, epoch, loss, sp_optim_get_lr(o),
                        sp_now() - s->p.start);
            /* a checkpoint holds every update of the step: join the lanes first */
            if (overlap && cfg->save_every > 0 && (r->steps % cfg->save_every == 0 || r->steps == total))
                sp_engine_sync(e);
            if (cfg->save_every > 0 && (r->steps % cfg->save_every == 0 || r->steps == total) &&
                sp_checkpoint_save(cfg->save_path, m, o,
                                   &(sp_train_state){r->steps, epoch, epoch_steps, epoch_loss, sp_optim_get_lr(o)},
                                   cfg->run_meta) != SP_OK)
                sp_fail("%s", sp_last_error());
            if (log && cfg->save_every > 0 && (r->steps % cfg->save_every == 0 || r->steps == total))
                sp_check(sp_out_flush(&s->logout));
            if (cfg->on_step) cfg->on_step(cfg->on_step_ctx, r->steps);
            progress_show(&s->p, cfg->app, epoch, epochs, r->steps, loss, busy > 0 ? images / busy : 0, false);
            if (test && cfg->eval_every > 0 && r->steps % cfg->eval_every == 0) {
                if (overlap) sp_engine_sync(e);   /* every update in */
                evaluate(&s->ev, m, test, cfg, &r->test_loss, &r->test_acc);
                log_eval(log, r->steps, epoch, o, sp_now() - s->p.start, r->test_loss, r->test_acc);
                progress_line(&s->p, "%s step %ld: test loss %.4f acc %.4f", cfg->app, r->steps, r->test_loss,
                              r->test_acc);
            }
            if (dev == SP_CPU) {
                have = r->steps < total && sp_loader_next(train, &b);
            } else {
                have = next;
                b = nb;
                slot ^= 1;
            }
        }
        if (overlap) {   /* every update in (evaluation, the end of training); the next epoch's */
            sp_engine_sync(e);   /* first uploads wait for the join (its last step's δW read a slot) */
            if (dev != SP_CPU) {
                sp_backend_allocator(dev)->release_staged(0);
                sp_backend_allocator(dev)->release_staged(1);
            }
        }
        r->train_loss = epoch_steps ? epoch_loss / (double)epoch_steps : NAN;
        progress_show(&s->p, cfg->app, epoch, epochs, r->steps, r->last_loss, busy > 0 ? images / busy : 0, true);
        if (test && cfg->eval_every == 0) {
            evaluate(&s->ev, m, test, cfg, &r->test_loss, &r->test_acc);
            log_eval(log, r->steps, epoch, o, sp_now() - s->p.start, r->test_loss, r->test_acc);
            progress_line(&s->p, "%s epoch %d: train loss %.4f, test loss %.4f acc %.4f", cfg->app, epoch + 1,
                          r->train_loss, r->test_loss, r->test_acc);
        } else {
            progress_line(&s->p, "%s epoch %d: train loss %.4f", cfg->app, epoch + 1, r->train_loss);
        }
    }
    if (cfg->resume_path && first >= total) {
        /* a checkpoint of the run's last step (a job killed after its last save) or past it:
         * nothing is left to train; the result is the checkpoint's — its steps, its epoch's
         * mean loss, and the final evaluation the run ends with */
        progress_line(&s->p, "%s: --resume %s: saved after step %ld, this run has %ld: nothing left to train",
                      cfg->app, cfg->resume_path, first, total);
        r->epochs = resumed.epoch + 1;
        r->train_loss = resumed.batch ? resumed.epoch_loss / (double)resumed.batch : NAN;
        r->last_loss = NAN;
        if (test) {
            evaluate(&s->ev, m, test, cfg, &r->test_loss, &r->test_acc);
            if (!s->logged_eval)
                log_eval(log, r->steps, resumed.epoch, o, sp_now() - s->p.start, r->test_loss, r->test_acc);
        }
    } else if (test && cfg->eval_every > 0 && r->steps % cfg->eval_every != 0) {
        evaluate(&s->ev, m, test, cfg, &r->test_loss, &r->test_acc);
        log_eval(log, r->steps, r->epochs - 1, o, sp_now() - s->p.start, r->test_loss, r->test_acc);
    }
    r->seconds = sp_now() - s->p.start;
    r->images_per_s = busy > 0 ? (double)images / busy : 0.0;
    bool ran = r->steps > first;   /* a resume past the limit ran nothing: no index past the arrays */
    r->forward_ms = ran ? median_ms(fwd + first, r->steps - first) : NAN;
    r->backward_ms = ran ? median_ms(bwd + first, r->steps - first) : NAN;
    r->step_ms = ran ? median_ms(all + first, r->steps - first) : NAN;
    if (log) {
        s->log = NULL;   /* ended, whatever the outcome */
        if (sp_out_commit(&s->logout) != SP_OK) sp_fail("%s", sp_last_error());
    }
}

/* Frees what the run holds; after a failure also joins an engine's lanes still running
 * the failed step's tail and puts the model back in its mode. */
static void train_end(train_run *s, bool failed)
{
    if (failed) {
        if (s->overlap) sp_engine_sync(s->e);
        s->tapes[0].before_apply = s->tapes[1].before_apply = NULL;
        sp_model_set_training(s->m, s->was_training);
        if (s->log) sp_out_abort(&s->logout);   /* the file on disk stays as it was */
    }
    if (s->sg) {
        sp_step_graph_counts(s->sg, &s->r.graph_captures, &s->r.graph_replays);
        sp_step_graph_free(s->sg);
    }
    s->r.arena_bytes = s->t.arena.high_water + s->tapes[0].arena.high_water + s->tapes[1].arena.high_water;
    /* the evaluation tape's arena and one per output alive at once (eval_forward) */
    s->r.eval_arena_bytes = s->ev.l ? s->ev.t.arena.high_water : 0;
    for (int k = 0; s->ev.l && k < s->ev.nslots; k++) s->r.eval_arena_bytes += s->ev.slot[k].high_water;
    sp_tape_free(&s->t);
    sp_tape_free(&s->tapes[0]);
    sp_tape_free(&s->tapes[1]);
    evaluator_free(&s->ev);
    free(s->fwd);
    free(s->bwd);
    free(s->all);
    if (s->zero_in_step) sp_optim_set_zero_in_step(s->o, false);
}

sp_train_result sp_train(sp_model *m, sp_engine *e, sp_optim *o, sp_loader *train, sp_dataset *test,
                         const sp_train_cfg *cfg)
{
    if (!m || !e || !o || !train || !cfg)
        return sp_error("sp_train: %s is NULL", !m ? "the model" : !e ? "the engine" : !o ? "the optimizer" :
                                                 !train ? "the loader" : "the configuration"), refused();
    if (check_cfg(cfg, test) != SP_OK) return refused();
    /* The files first, before anything is allocated or trained: a bad path is a status. */
    if (cfg->save_path && sp_check_save_target(cfg->save_path) != SP_OK) return refused();
    /* sp_try's frame is below this one: s stays intact when a failure returns through it */
    train_run s = {.m = m, .e = e, .o = o, .train = train, .test = test, .cfg = cfg, .was_training = !m->eval,
                   .r = {.test_loss = NAN, .test_acc = NAN}};
    long per_epoch = sp_loader_nbatches(train);
    /* both limits: whichever comes first; steps alone: as many epochs as they need */
    long total = cfg->epochs > 0 ? per_epoch * cfg->epochs : cfg->steps;
    if (cfg->steps > 0 && cfg->steps < total) total = cfg->steps;
    s.per_epoch = per_epoch;
    s.total = total;
    s.epochs = (int)((total + per_epoch - 1) / per_epoch);
    sp_train_state *resumed = &s.resumed;
    if (cfg->resume_path) {
        if (sp_checkpoint_load(cfg->resume_path, m, o, resumed, cfg->run_meta) != SP_OK) return refused();
        if (resumed->batch > per_epoch)
            return sp_error("--resume %s: saved after batch %ld of an epoch of %ld batches (a different dataset?)",
                            cfg->resume_path, resumed->batch, per_epoch), refused();
        /* steps count from the start: epoch·(batches an epoch) + batch (a crafted 2^62 is not) */
        if (resumed->step != (long)resumed->epoch * per_epoch + resumed->batch)
            return sp_error("--resume %s: inconsistent training state: step %ld is not epoch %d x %ld batches + "
                            "batch %ld", cfg->resume_path, resumed->step, resumed->epoch, per_epoch, resumed->batch),
                   refused();
        s.r.steps = resumed->step;
    }
    if (open_log(&s.logout, cfg->log_path, cfg->resume_path ? resumed->step : -1, &s.logged_eval, &s.log) != SP_OK)
        return refused();
    s.fwd = sp_xmalloc((size_t)(total + 1) * sizeof *s.fwd);   /* before the loop: no malloc per step */
    s.bwd = sp_xmalloc((size_t)(total + 1) * sizeof *s.bwd);
    s.all = sp_xmalloc((size_t)(total + 1) * sizeof *s.all);
    s.p = (progress){.tty = isatty(2), .quiet = cfg->quiet, .start = sp_now(), .total_steps = total};
    sp_tape_init(&s.t);
    sp_tape_init(&s.tapes[0]);
    sp_tape_init(&s.tapes[1]);
    s.first = s.r.steps;   /* the timing arrays are indexed by step */
    int status = sp_try(train_body, &s);
    train_end(&s, status != SP_OK);
    if (status != SP_OK) {   /* the steps done are reported; the message says what stopped the run */
        sp_train_result r = refused();
        r.steps = s.r.steps;
        r.epochs = s.r.epochs;
        return r;
    }
    return s.r;
}
