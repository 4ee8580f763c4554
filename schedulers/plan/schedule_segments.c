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
 * segment is one node, as before. */
#include <stdlib.h>
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

