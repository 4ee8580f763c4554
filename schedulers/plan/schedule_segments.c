/* schedule_segments.c — a model's graph as the chain of stages the schedules place.
 *
 * The schedules (schedule.h) place a chain: stage s reads stage s − 1's output alone. A
 * chain of layers is one already, one stage per op node. A model with residual or dense
 * connections (a DAG: ResNet-20) becomes one by cutting its tape after each articulation
 * point — an op node that every path from the input to the output goes through. Between
 * two cuts lies a segment (ResNet-20: the stem's conv1, bn1 and relu, each residual
 * block's body up to its add, the block's relu, the pooling and the fc); nothing but
 * the segment's last node's output crosses to the next one, so the segment is one
 * "layer" of the chain: its F, δ and G the sums of its ops', its output what a
 * pipeline sends to the next stage. In a chain every op node is such a point, so each
 * segment is one node. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/tape.h"
#include "schedulers/plan/schedule.h"

/* In tape (topological) order, op node v is on every path from the input leaf to the
 * last node iff no edge u → w jumps over it (u < v < w): an edge that did would make a
 * path input … u → w … output that never reaches v (the nodes before u lie before v,
 * those after w after it); without one, every path must step from below v to v itself.
 * A node whose output nobody reads but the model's is only counted as reading. */
int sp_tape_segments(const sp_tape *t, int *last)
{
    if (!t) sp_fail("sp_tape_segments: argument 't' is NULL");
    if (!last) sp_fail("sp_tape_segments: argument 'last' is NULL");
    if (t->n < 2) return 0;
    int *reach = sp_xmalloc(sizeof(int) * (size_t)t->n);   /* the latest reader of node i */
    for (int i = 0; i < t->n; i++) reach[i] = i;
    for (int i = 0; i < t->n; i++)
        for (int k = 0; k < t->nodes[i]->ninputs; k++) {
            int u = t->nodes[i]->inputs[k]->index;
            if (reach[u] < i) reach[u] = i;
        }
    int segments = 0, far = reach[0];   /* far: the latest reader of any node before v */
    for (int v = 1; v < t->n; v++) {
        if (t->nodes[v]->op && (far <= v || v == t->n - 1)) last[segments++] = v;
        if (reach[v] > far) far = reach[v];
    }
    free(reach);
    return segments;
}

/* A segment's name: a single node's label ("conv1", "relu_3"); several nodes: the dotted
 * prefix their named layers share ("layer2.0" for layer2.0.conv1 … layer2.0.shortcut.1),
 * else the first node's label and the count ("conv_a+3"). */
void sp_tape_segment_name(const sp_tape *t, int first, int end, char name[SP_STAGE_NAME])
{
    if (!t) sp_fail("sp_tape_segment_name: argument 't' is NULL");
    if (!name) sp_fail("sp_tape_segment_name: argument 'name' is NULL");
    if (first < 1 || end > t->n || first >= end)
        sp_fail("sp_tape_segment_name: nodes [%d, %d) of a tape of %d (expected 1 <= first < end <= n)", first, end,
                t->n);
    char label[SP_NAME_LEN + 16];
    if (end - first == 1) {
        snprintf(name, SP_STAGE_NAME, "%.*s", SP_STAGE_NAME - 1, sp_node_label(t->nodes[first], label, sizeof label));
        return;
    }
    const char *common = NULL;
    size_t len = 0;
    for (int i = first; i < end; i++) {
        const char *l = t->nodes[i]->layer ? t->nodes[i]->layer->name : "";
        if (!*l) continue;
        if (!common) {
            common = l, len = strlen(l);
            continue;
        }
        size_t k = 0;
        while (k < len && l[k] == common[k]) k++;
        len = k;
    }
    while (common && len > 0 && common[len - 1] != '.') len--;
    if (common && len > 1) {
        snprintf(name, SP_STAGE_NAME, "%.*s", (int)(len - 1 < SP_STAGE_NAME - 1 ? len - 1 : SP_STAGE_NAME - 1), common);
        return;
    }
    char both[sizeof label + 16];
    snprintf(both, sizeof both, "%s+%d", sp_node_label(t->nodes[first], label, sizeof label), end - first - 1);
    snprintf(name, SP_STAGE_NAME, "%.*s", SP_STAGE_NAME - 1, both);
}
