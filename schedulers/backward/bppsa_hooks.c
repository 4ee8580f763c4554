/* bppsa_hooks.c — the bppsa engine's optional hooks (schedulers/backward/engine.h), written
 * over its public calls (engines.h) and set by sp_engine_bppsa_create: --scan-levels
 * against the model's chain, the scan_levels key of a run's JSON line, and --plan (the
 * plan printed by the engine, the dense-vs-pruned FLOPs of each level, the plan's figures
 * as JSON keys). */
#include <stdio.h>
#include "core/device.h"
#include "core/error.h"
#include "core/model.h"
#include "schedulers/backward/bppsa_internal.h"
#include "schedulers/scan/scan.h"

/* x1 on the model's device (--device cuda moves the parameters first) */
static sp_node *forward_loss(sp_model *m, sp_tape *t, const sp_tensor *x, const int *y)
{
    sp_tensor xin = m->nparams ? sp_tape_copy_on(t, m->params[0]->value.device, x) : *x;
    return sp_model_loss(m, t, &xin, y);
}

/* --scan-levels above the full depth of the model's longest chain: the scan would clamp
 * it silently. */
void sp_bppsa_check(sp_engine *e, sp_model *m, const sp_tensor *x1, const int *y1)
{
    int levels = ((const sp_bppsa_opts *)e->opts.own)->scan_levels;
    if (levels < 0) return;   /* full, auto */
    sp_tape t;
    sp_tape_init(&t);
    int n = sp_bppsa_chain_links(forward_loss(m, &t, x1, y1)), full = sp_scan_full_levels(n);
    sp_tape_free(&t);
    if (levels > full)
        sp_fail("--scan-levels %d: expected 0..%d for %s (its longest scanned chain: %d Jacobians), or full", levels,
                full, m->name, n);
}

/* scan_levels: the depth the plan chose (auto), "full", or the depth asked for. */
void sp_bppsa_report(sp_engine *e, const sp_report_writer *w)
{
    sp_bppsa_stats bs;
    int levels = ((const sp_bppsa_opts *)e->opts.own)->scan_levels;
    if (levels == SP_SCAN_LEVELS_AUTO && sp_bppsa_stats_get(e, &bs)) w->integer(w->ctx, "scan_levels", bs.up_levels);
    else if (levels < 0) w->str(w->ctx, "scan_levels", "full");
    else w->integer(w->ctx, "scan_levels", levels);
}

/* A pruned model: the dense model's plan next to it, level by level (the paper's
 * Figure 10). The dense plan's symbolic phase: VGG-11 at 32x32 (1.1e8 Jt entries per
 * sample) takes 1.3 GB and ~50 s on 2 cores; far larger chains are not attempted. */
static void print_dense_vs_pruned(sp_engine *e, sp_model *m, const sp_tensor *x, const int *y,
                                  const sp_bppsa_stats *st)
{
    if (st->dense_jt_entries > 3e8) {
        printf("dense plan: not made (its Jt hold %.3g entries per sample; its symbolic products would need "
               "gigabytes)\n", st->dense_jt_entries);
        return;
    }
    const float *masks[512];
    int np = m->nparams < 512 ? m->nparams : 512;
    for (int i = 0; i < np; i++) masks[i] = m->params[i]->mask, m->params[i]->mask = NULL;
    sp_engine_opts dq = e->opts;
    dq.plan = false;
    dq.plan_svg = NULL;
    sp_engine *d = sp_engine_create("bppsa", &dq);
    if (!d) sp_fail("%s", sp_last_error());
    sp_tape td;
    sp_tape_init(&td);
    sp_backward(d, &td, sp_model_loss(m, &td, x, y));
    for (int i = 0; i < np; i++) m->params[i]->mask = masks[i];
    double dt[256], dc[256], pt[256], pc[256];
    int nl = sp_bppsa_level_flops(d, dt, dc, 256), pl = sp_bppsa_level_flops(e, pt, pc, 256);
    sp_bppsa_stats ds;
    sp_bppsa_stats_get(d, &ds);
    if (nl == pl && nl <= 256) {
        printf("FLOP per sample per level, dense vs pruned (all steps | the critical step):\n");
        printf("%5s %16s %16s %16s %16s\n", "level", "dense", "pruned", "dense crit", "pruned crit");
        for (int l = 0; l < nl; l++) printf("%5d %16.0f %16.0f %16.0f %16.0f\n", l, dt[l], pt[l], dc[l], pc[l]);
    }
    printf("dense: bppsa total %.0f, critical path %.0f, linear BP %.0f; pruned: %.0f, %.0f, %.0f "
           "(critical path %.1fx shorter)\n", ds.flops, ds.critical_flops, ds.linear_flops, st->flops,
           st->critical_flops, st->linear_flops, st->critical_flops > 0 ? ds.critical_flops / st->critical_flops : 0.0);
    sp_tape_free(&td);
    sp_engine_destroy(d);
}

/* One forward and one backward of a plan-only engine (opts.plan_only): the engine prints
 * the plan as it makes it (and draws it with opts.plan_svg). */
bool sp_bppsa_plan(sp_engine *e, sp_model *m, const sp_tensor *x, const int *y, const sp_report_writer *w)
{
    sp_tape t;
    sp_tape_init(&t);
    sp_backward(e, &t, forward_loss(m, &t, x, y));
    sp_bppsa_stats st;
    bool made = sp_bppsa_stats_get(e, &st);
    bool pruned = false;
    for (int i = 0; made && i < m->nparams; i++) pruned |= m->params[i]->mask != NULL;
    if (pruned && e->opts.plan) print_dense_vs_pruned(e, m, x, y, &st);
    sp_tape_free(&t);
    if (!made) return false;
    w->integer(w->ctx, "links", st.n);
    w->integer(w->ctx, "batch", st.batch);
    w->integer(w->ctx, "scan_levels", st.up_levels);
    w->integer(w->ctx, "full_levels", st.full_levels);
    w->integer(w->ctx, "levels", st.levels);
    w->integer(w->ctx, "linear_levels", st.linear_levels);
    w->num(w->ctx, "flops_per_sample", st.flops);
    w->num(w->ctx, "critical_flops_per_sample", st.critical_flops);
    w->num(w->ctx, "linear_flops_per_sample", st.linear_flops);
    w->num(w->ctx, "scan_bytes", (double)st.scan_bytes);
    w->num(w->ctx, "peak_bytes", (double)st.peak_bytes);
    return true;
}
