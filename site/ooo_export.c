/* ooo_export.c — the out-of-order backward's task graph of a zoo model, ordered by each
 * policy, as the JSON the teaching page draws (make site → build/site/data/ooo-<model>.json).
 *
 *   ooo_export MODEL BATCH
 *
 * The graph and the orders are the ooo engine's own (sp_ooo_graph_build, sp_ooo_plan_make
 * with two lanes, k = ⌈L/2⌉ for reverse-first-k): what `build/<app> --backward ooo --order
 * X` would run for one batch. The timeline places each lane's queue in order on the
 * engine's cost estimates (est: the ops' FLOPs plus a per-task overhead): a task starts
 * when its lane is free and its predecessors are done, as the two-lane executor runs it,
 * with modelled instead of measured durations. The critical path is the longest chain of
 * estimates through the graph (δO and δW, then U). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/model.h"
#include "core/tape.h"
#include "core/tensor.h"
#include "layers/zoo.h"
#include "schedulers/backward/ooo.h"

static void str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') putchar('\\');
        putchar(*s);
    }
    putchar('"');
}

/* Each lane runs its queue in order; a task waits for its lane and its predecessors. */
static double two_lanes(const sp_ooo_graph *g, const sp_ooo_plan *p, double *start, double *end, double *main_done)
{
    int at[2] = {0, 0};
    double free_at[2] = {0, 0};
    char *done = calloc((size_t)g->nexec, 1);
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
                    if (!done[q]) { ok = 0; break; }
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
            fprintf(stderr, "ooo_export: the lanes wait on each other\n");
            exit(2);
        }
    }
    free(done);
    *main_done = free_at[0];
    return free_at[0] > free_at[1] ? free_at[0] : free_at[1];
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: ooo_export MODEL BATCH\n");
        return 2;
    }
    int batch = atoi(argv[2]), shape[4];
    sp_model *m = sp_zoo_model(argv[1]);
    int ndim = 1 + sp_zoo_input_shape(argv[1], shape + 1);
    shape[0] = batch;
    sp_tensor x = sp_tensor_new(ndim, shape);
    int *y = calloc((size_t)batch, sizeof *y);
    sp_tape t;
    sp_tape_init(&t);
    sp_node *loss = sp_model_loss(m, &t, &x, y);
    sp_ooo_graph *g = sp_ooo_graph_build(&t, loss, true);
    int n = g->nexec;

    /* the critical path: the longest chain of estimates, relaxed in the conventional
     * order (a topological order of the graph) */
    sp_ooo_plan *conv = sp_ooo_plan_make(&t, g, SP_OOO_CONVENTIONAL, 0, 0, true);
    double *len = calloc((size_t)n, sizeof *len);
    int *via = malloc((size_t)n * sizeof *via);
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
    char *critical = calloc((size_t)n, 1);
    for (int c = last; c >= 0; c = via[c]) critical[c] = 1;

    printf("{\"model\":");
    str(argv[1]);
    printf(",\"batch\":%d,\"layers\":%d,\"critical_est\":%.6g,\"tasks\":[", batch, g->L, len[last]);
    static const char *kinds[] = {"dO", "dW", "U", "F"};
    for (int i = 0; i < n; i++) {
        const sp_ooo_task *k = &g->tasks[i];
        char label[96];
        printf("%s{\"label\":", i ? "," : "");
        str(sp_ooo_task_label(k, label, sizeof label));
        printf(",\"kind\":\"%s\",\"rank\":%d,\"est\":%.6g,\"critical\":%d,\"pred\":[", kinds[k->kind], k->rank, k->est,
               critical[i]);
        for (int j = 0, c = 0; j < k->npred; j++)
            if (k->pred[j] < n) printf("%s%d", c++ ? "," : "", k->pred[j]);
        printf("]}");
    }
    printf("],\"orders\":[");
    double *start = malloc((size_t)n * sizeof *start), *end = malloc((size_t)n * sizeof *end);
    for (int o = SP_OOO_CONVENTIONAL; o <= SP_OOO_LIST; o++) {
        sp_ooo_plan *p = sp_ooo_plan_make(&t, g, (sp_ooo_order)o, 0, 0, o != SP_OOO_CONVENTIONAL);
        double main_done, span = two_lanes(g, p, start, end, &main_done);
        printf("%s{\"order\":\"%s\",\"k\":%d,\"peak_bytes\":%zu,\"makespan\":%.6g,\"main_done\":%.6g,\"tasks\":[",
               o ? "," : "", sp_ooo_order_name(p->order), p->k, p->peak_bytes, span, main_done);
        for (int i = 0; i < n; i++) {
            int task = p->seq[i];
            printf("%s[%d,%d,%.6g,%.6g]", i ? "," : "", task, p->lane[task], start[task], end[task]);
        }
        printf("]}");
    }
    printf("]}\n");
    free(start), free(end), free(len), free(via), free(critical), free(y);
    sp_tape_free(&t);
    sp_tensor_free(&x);
    sp_model_free(m);
    return 0;
}
