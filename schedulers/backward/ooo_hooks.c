/* ooo_hooks.c — the ooo engine's check and report hooks (schedulers/backward/engine.h),
 * over its public calls: --k against the model, and what the last backward ran as JSON
 * keys. The overlap and capture hooks are the calls of ooo.c itself (sp_engine_ooo_create). */
#include <string.h>
#include "core/error.h"
#include "core/model.h"
#include "schedulers/backward/ooo.h"

void sp_ooo_check(sp_engine *e, struct sp_model *m, const sp_tensor *x1, const int *y1)
{
    int k = ((const sp_ooo_opts *)e->opts.own)->k;
    if (k <= 0) return;   /* 0: half of them */
    int L = 0;
    for (int i = 0; i < m->nlayers; i++) L += m->layers[i]->nparams > 0;
    if (k > L) sp_fail("--k %d: expected 0..%d for %s (its parameterised layers; 0 = half of them)", k, L, m->name);
}

/* order (k for reverse-first-k), the lanes the backwards ran on (sp_ooo_stats.lanes:
 * --lanes 1 or 2 as given; auto, the lane tuner's pick), the critical path and the
 * memory model's peak of the last backward, as it ran and as its order's plan run one
 * task at a time; with --cuda-graph the backward's graph counts. Nothing before the first
 * backward (under --parallel the executor runs the steps, not this engine). */
void sp_ooo_report(sp_engine *e, const sp_report_writer *w)
{
    const sp_ooo_stats *st = sp_ooo_last_stats(e);
    if (!st || !st->order || st->steps == 0) return;
    w->str(w->ctx, "order", st->order);
    if (strcmp(st->order, "reverse-first-k") == 0) w->integer(w->ctx, "k", st->k);
    w->integer(w->ctx, "lanes", st->lanes);
    w->num(w->ctx, "critical_path_ms", 1e3 * st->critical_s);
    w->integer(w->ctx, "peak_bytes", (long)st->peak_bytes);
    w->integer(w->ctx, "plan_peak_bytes", (long)st->plan_peak_bytes);
    sp_ooo_device_stats ds = sp_ooo_device_stats_get(e);
    if (ds.graph_captures + ds.graph_replays > 0) {   /* the backward alone (demo) */
        w->str(w->ctx, "cuda_graph", "backward");
        w->integer(w->ctx, "graph_captures", ds.graph_captures);
        w->integer(w->ctx, "graph_replays", ds.graph_replays);
    }
}
