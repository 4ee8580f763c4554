/* ooo_bench.c — training-step time of the linear engine against every ooo order, in
 * one process, rounds interleaved so that noise from a shared machine hits all alike.
 *
 *   ooo_bench MODEL BATCH [ROUNDS] [STEPS] [TRACE_DIR]
 *
 * Each engine trains its own copy of the model (same initial weights, same batch) with
 * SGD, its step the apps' step on the CPU (train/train.c): the optimizer zeroes each
 * gradient as it reads it; the linear engine updates each layer in its walk, the layer's
 * gradient made in the step (sp_model_step_grads); the ooo engine runs each update U_i
 * as a task and the next forward overlaps the last δW and U (train_step_queue_overlap,
 * two tapes), joined before the next engine's round — the join's time counted in that
 * round's last step. Every engine first runs WARMUP steps (arenas, threads, the ooo lane
 * tuner's probe window). ROUNDS rounds of STEPS steps per engine: small STEPS (2) pairs
 * the engines most closely in time. Prints a markdown table (median and best step time
 * over all rounds, ratio to linear, lane busy times, critical path, memory model), then
 * one JSON line with every step's time per engine (bench/bench.py reads it), and with
 * TRACE_DIR writes each order's last step as a Chrome trace (.json) and a picture (.svg). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "layers/zoo.h"
#include "schedulers/backward/engine.h"
#include "core/threads.h"
#include "optim/optim.h"
#include "bench/stats.h"
#include "schedulers/backward/ooo.h"
#include "train/train_internal.h"

#define NCFG 5
#define WARMUP 12   /* > the lane tuner's probe window of 8 steps (ooo_exec.c) */
static const char *const ORDERS[NCFG] = {NULL, "conventional", "ooo", "reverse-first-k", "list"};

typedef struct cfg_run {
    sp_model *m;
    sp_optim *o;
    sp_engine *e;
    sp_tape t[2];   /* the overlapping step alternates between two */
    long steps;
    double *times;
    int ntimes;
    sp_ooo_stats stats;
} cfg_run;

/* The median of v[0..n), v left as it is (bench_median sorts). */
static double median_of(const double *v, int n)
{
    double *c = malloc((size_t)n * sizeof *c);
    memcpy(c, v, (size_t)n * sizeof *c);
    double m = bench_median(c, n);
    free(c);
    return m;
}

/* The fastest step: what a loaded machine disturbs least. */
static double best_of(const double *v, int n)
{
    double m = v[0];
    for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
    return m;
}

static void update_layer(void *ctx, sp_layer *l) { sp_optim_step_params(ctx, l->params, l->nparams); }

/* One step as the apps run it on the CPU (train.c's step_cpu / step_cpu_overlap). */
static double step(cfg_run *c, const sp_tensor *x, const int *y)
{
    double t0 = sp_now();
    if (c->e->backward_async) train_step_queue_overlap(c->m, c->e, c->o, &c->t[c->steps % 2], x, y, -1, NULL, NULL);
    else train_step_queue(c->m, c->e, c->o, &c->t[0], x, y, NULL, NULL);
    c->steps++;
    return sp_now() - t0;
}

/* The end of an engine's round: the last backward's tail joined (another engine runs
 * next); its time belongs to the round's last step. */
static double join(cfg_run *c)
{
    double t0 = sp_now();
    sp_engine_sync(c->e);
    return sp_now() - t0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL BATCH [ROUNDS] [STEPS] [TRACE_DIR]\n", argv[0]);
        return 2;
    }
    const char *model = argv[1];
    int batch = atoi(argv[2]), rounds = argc > 3 ? atoi(argv[3]) : 5, steps = argc > 4 ? atoi(argv[4]) : 10;
    const char *trace_dir = argc > 5 ? argv[5] : NULL;
    int s[3], nd = sp_zoo_input_shape(model, s);
    if (nd < 0 || batch < 1 || rounds < 1 || steps < 1) {
        if (nd < 0) fprintf(stderr, "ooo_bench: unknown model '%s' (%s)\n", model, sp_last_error());
        else fprintf(stderr, "ooo_bench: BATCH, ROUNDS and STEPS must be positive integers\n");
        return 2;
    }
    sp_set_threads(2);
    int shape[4] = {batch, s[0], s[1], s[2]};
    sp_tensor x = sp_tensor_new(nd + 1, shape);
    for (size_t i = 0; i < x.numel; i++) x.data[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
    int *y = calloc((size_t)batch, sizeof(int));
    for (int i = 0; i < batch; i++) y[i] = i % 10;

    cfg_run runs[NCFG];
    for (int c = 0; c < NCFG; c++) {
        cfg_run *r = &runs[c];
        memset(r, 0, sizeof *r);
        r->m = sp_zoo_model(model);
        sp_model_init(r->m, 1);
        r->o = sp_sgd_new(r->m->params, r->m->nparams, 0.01, 0.9, 0.0, 0.0, false);
        char path[512];
        if (trace_dir) snprintf(path, sizeof path, "%s/ooo-%s-%s.json", trace_dir, model, ORDERS[c] ? ORDERS[c] : "");
        sp_engine_opts eo = {.own = ORDERS[c] ? &(sp_ooo_opts){.order = ORDERS[c]} : NULL, .update = update_layer,
                             .update_ctx = r->o, .trace_path = trace_dir && ORDERS[c] ? path : NULL};
        r->e = sp_engine_create(ORDERS[c] ? "ooo" : "linear", &eo);
        if (!r->e) sp_fail("%s", sp_last_error());
        sp_check(sp_optim_set_zero_in_step(r->o, true));
        if (r->e->caps & SP_ENGINE_STEP_GRADS) sp_check(sp_model_step_grads(r->m, true));
        sp_tape_init(&r->t[0]);
        sp_tape_init(&r->t[1]);
        r->times = calloc((size_t)(rounds * steps), sizeof(double));
        for (int w = 0; w < WARMUP; w++) step(r, &x, y);
        join(r);
    }
    for (int round = 0; round < rounds; round++)
        for (int c = 0; c < NCFG; c++) {
            cfg_run *r = &runs[c];
            for (int i = 0; i < steps; i++) r->times[r->ntimes++] = step(r, &x, y);
            r->times[r->ntimes - 1] += join(r);
            if (ORDERS[c]) r->stats = *sp_ooo_last_stats(r->e);
        }

    double base = median_of(runs[0].times, runs[0].ntimes), base_best = best_of(runs[0].times, runs[0].ntimes);
    printf("| %s, batch %d, 2 threads | step ms (median of %d) | vs linear | best step ms | vs linear (best) | "
           "main busy ms | sub busy ms | critical path ms | U_1 done ms | peak MiB (model) | conventional MiB |\n",
           model, batch, rounds * steps);
    printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    printf("| linear | %.2f | 1.00 | %.2f | 1.00 | | | | | | |\n", 1e3 * base, 1e3 * base_best);
    for (int c = 1; c < NCFG; c++) {
        cfg_run *r = &runs[c];
        const sp_ooo_stats *st = &r->stats;
        double med = median_of(r->times, r->ntimes), best = best_of(r->times, r->ntimes);
        char name[48];
        snprintf(name, sizeof name, "%s", ORDERS[c]);
        if (st->k) snprintf(name, sizeof name, "%s (k=%d)", ORDERS[c], st->k);
        printf("| ooo %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", name, 1e3 * med,
               base / med, 1e3 * best, base_best / best, 1e3 * st->busy_s[0], 1e3 * st->busy_s[1],
               1e3 * st->critical_s, 1e3 * st->first_ready_s, st->peak_bytes / 1048576.0,
               st->conventional_peak_bytes / 1048576.0);
    }
    /* every step's seconds, in the order they ran (bench/bench.py, bench/compare.py) */
    printf("{\"app\": \"ooo_bench\", \"model\": \"%s\", \"batch\": %d, \"rounds\": %d, \"steps\": %d, \"step_s\": {",
           model, batch, rounds, steps);
    for (int c = 0; c < NCFG; c++) {
        printf("%s\"%s\": [", c ? ", " : "", ORDERS[c] ? ORDERS[c] : "linear");
        for (int i = 0; i < runs[c].ntimes; i++) printf("%s%.6f", i ? ", " : "", runs[c].times[i]);
        printf("]");
    }
    printf("}}\n");
    for (int c = 0; c < NCFG; c++) {
        if (trace_dir && ORDERS[c]) {   /* the picture too (the JSON is written at destroy) */
            char path[512];
            snprintf(path, sizeof path, "%s/ooo-%s-%s.svg", trace_dir, model, ORDERS[c]);
            sp_ooo_write_trace(runs[c].e, path);
        }
        sp_engine_destroy(runs[c].e);
        sp_optim_free(runs[c].o);
        sp_tape_free(&runs[c].t[0]);
        sp_tape_free(&runs[c].t[1]);
        sp_model_free(runs[c].m);
        free(runs[c].times);
    }
    sp_tensor_free(&x);
    free(y);
    return 0;
}
