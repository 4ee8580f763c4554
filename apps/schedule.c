/* schedule — simulate a parallel-training schedule and draw it, or balance a pipeline
 * with LayerPipe. Thin main: flags → schedulers/parallel/schedule.h → print.
 *
 *   schedule --scheme lpp --stages 8 --microbatches 16 --groups 2 --per-group 4 --svg out.svg
 *   schedule --scheme gpipe --model vgg11 --workers 4
 *   schedule --layerpipe profile.csv --processors 3
 *
 * The last stdout line is one JSON object. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "schedulers/train/run.h"
#include "layers/zoo.h"
#include "core/error.h"
#include "core/model.h"
#include "schedulers/parallel/schedule.h"

typedef struct opts {
    const char *scheme, *model, *profile, *svg, *title, *layerpipe, *costs_out;
    int stages, micro, workers, groups, per_group, batch, processors, max_cols;
    double fwd, bwd, delta, grad, gflops, alpha;
    bool split, no_split, no_input_grad, no_diagram, list;
} opts;

#define SIM "!layerpipe,!list"          /* the simulator's flags */
#define UNIFORM SIM ",!model,!profile"  /* durations given by the cost flags */

static void parse(int argc, char **argv, opts *o)
{
    const char *scheme_names = sp_scheme_names();
    sp_flag table[] = {
        {"scheme", SP_FLAG_STR, &o->scheme, "the schedule", .choices = scheme_names, .group = "schedule",
         .needs = SIM},
        {"stages", SP_FLAG_INT, &o->stages, "S, pipeline stages (--model/--profile: one per layer)", .range = "1..",
         .group = "schedule", .needs = UNIFORM},
        {"microbatches", SP_FLAG_INT, &o->micro, "B, micro-batches", .range = "1..", .group = "schedule", .needs = SIM},
        {"workers", SP_FLAG_INT, &o->workers, "W workers", .def = "B for ddp/fsdp, S for pipelines, G*R for lpp",
         .range = "1..", .group = "schedule", .needs = SIM},
        {"groups", SP_FLAG_INT, &o->groups, "G groups", .def = "from W", .range = "1..", .group = "schedule",
         .needs = SIM ",scheme=lpp|fslpp"},
        {"per-group", SP_FLAG_INT, &o->per_group, "R workers per group", .def = "from W", .range = "1..", .group = "schedule",
         .needs = SIM ",scheme=lpp|fslpp"},
        {"split", SP_FLAG_BOOL, &o->split, "backward as two jobs, delta before G (any scheme)", .group = "schedule",
         .needs = SIM ",!no-split"},
        {"no-split", SP_FLAG_BOOL, &o->no_split, "backward as one job (ooo schemes split by default)",
         .group = "schedule", .needs = SIM},
        {"no-input-grad", SP_FLAG_BOOL, &o->no_input_grad, "stage 0 computes no delta (its input is data)",
         .group = "schedule", .needs = SIM},
        {"fwd-cost", SP_FLAG_DOUBLE, &o->fwd, "time of a forward job", .range = "0..", .group = "uniform durations",
         .needs = UNIFORM},
        {"bwd-cost", SP_FLAG_DOUBLE, &o->bwd, "time of a backward job (delta = G = half)", .range = "0..",
         .group = "uniform durations", .needs = UNIFORM},
        {"delta-cost", SP_FLAG_DOUBLE, &o->delta, "time of a delta job", .def = "bwd-cost/2", .range = "0..",
         .group = "uniform durations", .needs = UNIFORM},
        {"grad-cost", SP_FLAG_DOUBLE, &o->grad, "time of a G job", .def = "bwd-cost/2", .range = "0..",
         .group = "uniform durations", .needs = UNIFORM},
        {"model", SP_FLAG_STR, &o->model, "durations from the op costs of a zoo model", .choices = sp_zoo_names(),
         .group = "durations from a model or a profile", .needs = SIM ",!profile"},
        {"batch-size", SP_FLAG_INT, &o->batch, "samples per micro-batch", .range = "1..",
         .group = "durations from a model or a profile", .needs = SIM ",model"},
        {"gflops", SP_FLAG_DOUBLE, &o->gflops, "worker speed in GFLOP/s, times in us", .meta = "X",
         .group = "durations from a model or a profile", .needs = SIM ",model"},
        {"profile", SP_FLAG_STR, &o->profile, "durations from a profile CSV (layer,fwd,bwd_grad,bwd_delta)",
         .meta = "CSV", .group = "durations from a model or a profile", .needs = SIM},
        {"costs-out", SP_FLAG_STR, &o->costs_out, "write the per-stage costs as a profile CSV", .meta = "CSV",
         .group = "output", .needs = SIM},
        {"svg", SP_FLAG_STR, &o->svg, "write the pipeline diagram as SVG", .meta = "FILE", .group = "output",
         .needs = SIM},
        {"title", SP_FLAG_STR, &o->title, "SVG title", .group = "output", .needs = SIM ",svg"},
        {"max-cols", SP_FLAG_INT, &o->max_cols, "text diagram width in time steps", .range = "1..", .group = "output",
         .needs = SIM ",!no-diagram"},
        {"no-diagram", SP_FLAG_BOOL, &o->no_diagram, "do not print the text diagram", .group = "output", .needs = SIM},
        {"layerpipe", SP_FLAG_STR, &o->layerpipe, "LayerPipe Algorithm 1 on a profile CSV (instead of a schedule)",
         .meta = "CSV", .group = "layerpipe", .needs = "!list"},
        {"processors", SP_FLAG_INT, &o->processors, "processors", .range = "1..", .group = "layerpipe",
         .needs = "layerpipe"},
        {"alpha", SP_FLAG_DOUBLE, &o->alpha, "relaxation factor of Tp", .range = "1..", .group = "layerpipe",
         .needs = "layerpipe"},
        {"list", SP_FLAG_BOOL, &o->list, "list the schemes (and nothing else)", .group = "layerpipe"},
        {0},
    };
    sp_flags_parse(argc, argv, "schedule",
                   "Simulate a parallel-training schedule (one master schedule: DDP, FSDP, GPipe, 1F1B,\n"
                   "LPP, FSLPP, ooo fast-forwarding and modulo allocation), print its pipeline diagram\n"
                   "and statistics, or balance a pipeline with LayerPipe. Last stdout line: JSON.",
                   table);
}

static void check(const opts *o)
{
    if (!(o->gflops > 0)) sp_fail("--gflops %g: expected > 0", o->gflops);
}

/* ------------------------------------------------------------------------------------ */

static sp_costs *load_costs(opts *o)
{
    if (o->profile) return sp_costs_read_csv(o->profile);
    if (o->model) {
        sp_model *m = sp_zoo_model(o->model);
        int shape[3], ndim = sp_zoo_input_shape(o->model, shape);
        sp_costs *c = sp_costs_from_model(m, ndim, shape, o->batch, o->gflops);
        sp_model_free(m);
        return c;
    }
    double delta = o->delta >= 0 ? o->delta : o->bwd / 2, grad = o->grad >= 0 ? o->grad : o->bwd / 2;
    return sp_costs_uniform(o->stages, o->fwd, delta, grad);
}

static void write_costs(const opts *o, const sp_costs *c)
{
    if (!o->costs_out) return;
    FILE *f = fopen(o->costs_out, "w");
    if (!f) sp_fail("--costs-out %s: cannot write: %s", o->costs_out, strerror(errno));
    sp_costs_write_csv(f, c);
    char what[4200];
    snprintf(what, sizeof what, "--costs-out %s", o->costs_out);
    sp_output_close(f, what);
}

static void json_array_d(const char *key, const double *v, int n, size_t stride)
{
    printf(",\"%s\":[", key);
    for (int i = 0; i < n; i++) printf("%s%.6g", i ? "," : "", *(const double *)((const char *)v + i * stride));
    printf("]");
}

static void json_array_i(const char *key, const int *v, int n, size_t stride)
{
    printf(",\"%s\":[", key);
    for (int i = 0; i < n; i++) printf("%s%d", i ? "," : "", *(const int *)((const char *)v + i * stride));
    printf("]");
}

static void print_workers(const sp_sim *r)
{
    printf("%-6s %6s %8s %9s %9s %9s %9s %9s\n", "worker", "jobs", "util", "act_recv", "grad_recv", "wgt_recv",
           "wgt_held", "peak_act");
    for (int w = 0; w < r->workers; w++) {
        const sp_worker_stats *s = &r->worker[w];
        printf("w%-5d %6d %8.3f %9d %9d %9d %9d %9d\n", w, s->jobs, s->utilization, s->act_recv, s->grad_recv,
               s->weight_recv, s->weight_stages, s->peak_act);
    }
    printf("latency %g, utilization %.3f, rho %.4f <= M/S = %.4f\n", r->latency, r->utilization, r->rho,
           r->rho_bound);
}

static void print_json(const sp_schedule *s, const sp_costs *c, const sp_sim *r)
{
    const sp_worker_stats *w0 = r->worker;
    printf("{\"scheme\":\"%s\",\"stages\":%d,\"microbatches\":%d,\"workers\":%d,\"groups\":%d,\"per_group\":%d,"
           "\"split_backward\":%s,\"time_unit\":\"%s\",\"latency\":%.6g,\"utilization\":%.6g,"
           "\"activation_transfers_max\":%d,\"gradient_transfers_max\":%d,\"weight_transfers_max\":%d,"
           "\"weight_storage_max\":%d,\"peak_activations_max\":%d,\"peak_activation_bytes_max\":%.6g,"
           "\"rho\":%.6g,\"rho_bound\":%.6g",
           s->scheme->name, s->stages, s->micro, s->workers, s->groups, s->per_group,
           s->split_backward ? "true" : "false", c->unit, r->latency, r->utilization, r->act_recv_max,
           r->grad_recv_max, r->weight_recv_max, r->weight_stages_max, r->peak_act_max, r->peak_act_bytes_max,
           r->rho, r->rho_bound);
    size_t st = sizeof *w0;
    json_array_d("utilization_per_worker", &w0->utilization, r->workers, st);
    json_array_i("activation_transfers", &w0->act_recv, r->workers, st);
    json_array_i("weight_transfers", &w0->weight_recv, r->workers, st);
    json_array_i("peak_activations", &w0->peak_act, r->workers, st);
    printf("}\n");
}

static void write_svg(const opts *o, const sp_schedule *s, const sp_sim *r)
{
    if (!o->svg) return;
    FILE *f = fopen(o->svg, "w");
    if (!f) sp_fail("--svg %s: cannot write: %s", o->svg, strerror(errno));
    sp_diagram_svg(f, s, r, o->title);
    char what[4200];
    snprintf(what, sizeof what, "--svg %s", o->svg);
    sp_output_close(f, what);
}

static int run_schedule(opts *o)
{
    sp_costs *c = load_costs(o);
    write_costs(o, c);
    sp_sched_config cfg = {
        .stages = c->stages, .micro = o->micro, .workers = o->workers, .groups = o->groups,
        .per_group = o->per_group, .split = o->split ? 1 : o->no_split ? 0 : -1, .no_input_grad = o->no_input_grad,
    };
    sp_schedule *s = sp_schedule_new(sp_scheme_find(o->scheme), &cfg, c);
    sp_sim r;
    sp_simulate(s, c, &r);
    if (!o->no_diagram) sp_diagram_text(stdout, s, &r, o->max_cols);
    print_workers(&r);
    write_svg(o, s, &r);
    print_json(s, c, &r);
    sp_sim_free(&r);
    sp_schedule_free(s);
    sp_costs_free(c);
    return 0;
}

static int run_layerpipe(const opts *o)
{
    sp_costs *c = sp_costs_read_csv(o->layerpipe);
    sp_layerpipe lp;
    sp_layerpipe_partition(c, o->processors, o->alpha, &lp);
    sp_layerpipe_print(stdout, c, &lp);
    printf("{\"mode\":\"layerpipe\",\"layers\":%d,\"processors\":%d,\"used\":%d,\"target\":%.6g,"
           "\"bottleneck\":%.6g,\"pipedream_bottleneck\":%.6g,\"relaxations\":%d",
           lp.layers, lp.processors, lp.used, lp.target, lp.bottleneck, lp.contig_bottleneck, lp.relaxations);
    json_array_d("assigned", lp.assigned, lp.processors, sizeof(double));
    json_array_d("borrowed", lp.borrowed, lp.processors, sizeof(double));
    json_array_d("total", lp.total, lp.processors, sizeof(double));
    json_array_d("pipedream", lp.contig_load, lp.processors, sizeof(double));
    printf("}\n");
    sp_layerpipe_free(&lp);
    sp_costs_free(c);
    return 0;
}

static int list_schemes(void)
{
    printf("{\"schemes\":[");
    for (int i = 0; i < sp_scheme_count(); i++) printf("%s\"%s\"", i ? "," : "", sp_scheme_at(i)->name);
    printf("]}\n");
    return 0;
}

int main(int argc, char **argv)
{
    opts o = {.scheme = "gpipe", .stages = 4, .micro = 8, .batch = 32, .processors = 3, .fwd = 1, .bwd = 1,
              .delta = -1, .grad = -1, .gflops = 1000, .alpha = 1.01};
    parse(argc, argv, &o);
    check(&o);
    if (o.list) {
        for (int i = 0; i < sp_scheme_count(); i++)
            printf("%-11s %s\n", sp_scheme_at(i)->name, sp_scheme_at(i)->summary);
        return list_schemes();
    }
    if (o.layerpipe) return run_layerpipe(&o);
    return run_schedule(&o);
}
