/* sim_report.c — the per-worker table and the JSON lines of a simulated schedule and of
 * a LayerPipe partition (schedulers/sim/sim_report.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "schedulers/sim/sim_comm.h"
#include "schedulers/sim/sim_report.h"

/* ,"key":[v0,v1,...] over n records `stride` bytes apart */
static void json_array_d(FILE *out, const char *key, const double *v, int n, size_t stride)
{
    fprintf(out, ",\"%s\":[", key);
    for (int i = 0; i < n; i++) fprintf(out, "%s%.6g", i ? "," : "", *(const double *)((const char *)v + i * stride));
    fprintf(out, "]");
}

/* bytes: exact up to 2^53 (%.6g would round a peak of 2408448 to 2.40845e+06) */
static void json_array_bytes(FILE *out, const char *key, const double *v, int n, size_t stride)
{
    fprintf(out, ",\"%s\":[", key);
    for (int i = 0; i < n; i++) fprintf(out, "%s%.15g", i ? "," : "", *(const double *)((const char *)v + i * stride));
    fprintf(out, "]");
}

static void json_array_i(FILE *out, const char *key, const int *v, int n, size_t stride)
{
    fprintf(out, ",\"%s\":[", key);
    for (int i = 0; i < n; i++) fprintf(out, "%s%d", i ? "," : "", *(const int *)((const char *)v + i * stride));
    fprintf(out, "]");
}

void sp_sim_print_workers(FILE *out, const sp_sim *r)
{
    fprintf(out, "%-6s %6s %8s %9s %9s %9s %9s %9s\n", "worker", "jobs", "util", "act_recv", "grad_recv",
            "wgt_recv", "wgt_held", "peak_act");
    for (int w = 0; w < r->workers; w++) {
        const sp_worker_stats *s = &r->worker[w];
        fprintf(out, "w%-5d %6d %8.3f %9d %9d %9d %9d %9d\n", w, s->jobs, s->utilization, s->act_recv,
                s->grad_recv, s->weight_recv, s->weight_stages, s->peak_act);
    }
    fprintf(out, "latency %g, utilization %.3f, rho %.4f <= M/S = %.4f\n", r->latency, r->utilization, r->rho,
            r->rho_bound);
}

void sp_sim_print_json(FILE *out, const sp_schedule *s, const sp_costs *c, const sp_sim *r)
{
    sp_sim_print_json_comm(out, s, c, r, NULL);
}

/* JSON has no inf or NaN: a figure that is not finite is refused before a byte is
 * written (the inputs' bounds, schedulers/plan/limits.h, keep every figure finite). */
static void check_finite(const char *what, double v)
{
    if (!isfinite(v)) sp_fail("simulate: %s is %g (expected a finite figure: are the inputs within "
                              "schedulers/plan/limits.h's bounds?)", what, v);
}

static void check_figures(const sp_sim *r, const struct sp_sim_comm *sc)
{
    const double top[] = {r->latency, r->utilization, r->peak_act_bytes_max, r->rho, r->rho_bound};
    for (size_t k = 0; k < sizeof top / sizeof *top; k++) check_finite("the step's latency or utilization", top[k]);
    for (int w = 0; w < r->workers; w++) {
        const sp_worker_stats *x = &r->worker[w];
        const double v[] = {x->utilization, x->peak_act_bytes, x->mem.total, x->mem.weights, x->mem.grads,
                            x->mem.optim, x->mem.buckets, x->mem.activations};
        for (size_t k = 0; k < sizeof v / sizeof *v; k++) check_finite("a worker's utilization or memory", v[k]);
    }
    if (!sc) return;
    check_finite("latency_with_comm", sc->latency);
    check_finite("the transfer cost", sc->transfer);
    for (int w = 0; w < sc->workers; w++) {
        check_finite("a worker's communication time", sc->comm_us[w]);
        if (sc->opt_us) check_finite("a worker's optimizer time", sc->opt_us[w]);
    }
}

void sp_sim_print_json_comm(FILE *out, const sp_schedule *s, const sp_costs *c, const sp_sim *r,
                            const struct sp_sim_comm *sc)
{
    sp_sim_print_json_bn(out, s, c, r, sc, NULL);
}

void sp_sim_print_json_bn(FILE *out, const sp_schedule *s, const sp_costs *c, const sp_sim *r,
                          const struct sp_sim_comm *sc, const char *batch_norm)
{
    check_figures(r, sc);
    const sp_worker_stats *w0 = r->worker;
    fprintf(out,
            "{\"scheme\":\"%s\",\"stages\":%d,\"microbatches\":%d,\"workers\":%d,\"groups\":%d,\"per_group\":%d,"
            "\"split_backward\":%s,\"time_unit\":\"%s\"%s%s%s,\"latency\":%.6g,\"utilization\":%.6g,"
            "\"activation_transfers_max\":%d,\"gradient_transfers_max\":%d,\"weight_transfers_max\":%d,"
            "\"weight_storage_max\":%d,\"peak_activations_max\":%d,\"peak_activation_bytes_max\":%.6g,"
            "\"rho\":%.6g,\"rho_bound\":%.6g",
            s->scheme->name, s->stages, s->micro, s->workers, s->groups, s->per_group,
            s->split_backward ? "true" : "false", c->unit, batch_norm ? ",\"batch_norm\":\"" : "",
            batch_norm ? batch_norm : "", batch_norm ? "\"" : "", r->latency, r->utilization, r->act_recv_max,
            r->grad_recv_max, r->weight_recv_max, r->weight_stages_max, r->peak_act_max, r->peak_act_bytes_max,
            r->rho, r->rho_bound);
    size_t st = sizeof *w0;
    json_array_d(out, "utilization_per_worker", &w0->utilization, r->workers, st);
    json_array_i(out, "activation_transfers", &w0->act_recv, r->workers, st);
    json_array_i(out, "weight_transfers", &w0->weight_recv, r->workers, st);
    json_array_i(out, "peak_activations", &w0->peak_act, r->workers, st);
    json_array_bytes(out, "peak_activation_bytes", &w0->peak_act_bytes, r->workers, st);
    /* the whole memory per worker, and what it is made of (sp_mem_breakdown) */
    json_array_bytes(out, "peak_memory_bytes", &w0->mem.total, r->workers, st);
    fprintf(out, ",\"memory_breakdown\":{\"weights\":[");
    const char *keys[] = {"gradients", "optimizer", "buckets", "activations"};
    const double *v[] = {&w0->mem.weights, &w0->mem.grads, &w0->mem.optim, &w0->mem.buckets, &w0->mem.activations};
    for (int k = 0; k < 5; k++) {
        if (k) fprintf(out, "],\"%s\":[", keys[k - 1]);
        for (int i = 0; i < r->workers; i++)
            fprintf(out, "%s%.15g", i ? "," : "", *(const double *)((const char *)v[k] + (size_t)i * st));
    }
    fprintf(out, "]}");
    if (sc && sc->transfer > 0) {   /* the constant transfer latency: the costs' own unit throughout */
        fprintf(out, ",\"transfer_cost\":%.6g,\"latency_with_comm\":%.6g", sc->transfer, sc->latency);
        json_array_d(out, "comm_time", sc->comm_us, sc->workers, sizeof(double));
        json_array_i(out, "messages", sc->messages, sc->workers, sizeof(int));
    } else if (sc) {   /* with communication (sim_comm.h): the step, and per worker µs/1000 on its lane */
        fprintf(out, ",\"latency_with_comm\":%.6g", sc->latency);
        double *ms = sp_xmalloc(sizeof(double) * (size_t)sc->workers * 2);
        for (int w = 0; w < sc->workers; w++) ms[w] = sc->comm_us[w] / 1e3, ms[sc->workers + w] = sc->opt_us[w] / 1e3;
        json_array_d(out, "comm_ms", ms, sc->workers, sizeof(double));
        json_array_d(out, "opt_ms", ms + sc->workers, sc->workers, sizeof(double));
        json_array_i(out, "messages", sc->messages, sc->workers, sizeof(int));
        free(ms);
    }
    fprintf(out, "}\n");
}

void sp_layerpipe_print_json(FILE *out, const sp_layerpipe *lp)
{
    fprintf(out,
            "{\"mode\":\"layerpipe\",\"layers\":%d,\"processors\":%d,\"used\":%d,\"target\":%.6g,"
            "\"bottleneck\":%.6g,\"pipedream_bottleneck\":%.6g,\"relaxations\":%d",
            lp->layers, lp->processors, lp->used, lp->target, lp->bottleneck, lp->contig_bottleneck,
            lp->relaxations);
    json_array_d(out, "assigned", lp->assigned, lp->processors, sizeof(double));
    json_array_d(out, "borrowed", lp->borrowed, lp->processors, sizeof(double));
    json_array_d(out, "total", lp->total, lp->processors, sizeof(double));
    json_array_d(out, "pipedream", lp->contig_load, lp->processors, sizeof(double));
    fprintf(out, "}\n");
}

void sp_schemes_print_json(FILE *out)
{
    /* the built-ins, the action-list generators and custom */
    const char *names = sp_schedule_all_names();
    fprintf(out, "{\"schemes\":[");
    for (const char *p = names; *p; p += strcspn(p, "|"), p += *p == '|')
        fprintf(out, "%s\"%.*s\"", p > names ? "," : "", (int)strcspn(p, "|"), p);
    fprintf(out, "]}\n");
}
