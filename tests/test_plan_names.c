/* test_plan_names.c — one name per op in every output (issue 16, item 5): the ooo
 * engine's trace, the Jacobian table (build/jacobian), the schedule cost CSV (build/schedule
 * --costs-out) and the bppsa plan (--plan=full) name a parameter-free op "<op>_<k>" (its
 * op's k-th node) and every other op by its layer name. The name sets of the four outputs
 * are compared with each other and with a list written here by hand. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "layers/zoo.h"
#include "core/threads.h"
#include "core/tape.h"
#include "layers/layers.h"
#include "schedulers/backward/ooo.h"
#include "tests/testutil.h"

#define MAXN 128

typedef struct names {
    char v[MAXN][64];
    int n;
} names;

static void add(names *s, const char *name, size_t len)
{
    if (len == 0 || len >= sizeof s->v[0]) return;
    for (int i = 0; i < s->n; i++)
        if (strlen(s->v[i]) == len && strncmp(s->v[i], name, len) == 0) return;
    cr_assert_lt(s->n, MAXN);
    memcpy(s->v[s->n], name, len);
    s->v[s->n++][len] = 0;
}

static bool has(const names *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->v[i], name) == 0) return true;
    return false;
}

static void drop(names *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->v[i], name) == 0) {
            memmove(s->v[i], s->v[i + 1], (size_t)(s->n - i - 1) * sizeof s->v[0]);
            s->n--;
            return;
        }
}

static void same_set(const names *a, const char *what_a, const names *b, const char *what_b, const char *model)
{
    for (int i = 0; i < a->n; i++)
        cr_assert(has(b, a->v[i]), "%s: %s names '%s', %s does not", model, what_a, a->v[i], what_b);
    for (int i = 0; i < b->n; i++)
        cr_assert(has(a, b->v[i]), "%s: %s names '%s', %s does not", model, what_b, b->v[i], what_a);
}

static char out[1 << 20];

/* build/jacobian's JSON line: "ops": [{"name": "conv1", …}, …] */
static names jacobian_names(const char *model)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s --model %s --columns 1 --batch 1", tu_bin("jacobian"), model);
    cr_assert_eq(tu_run(cmd, out, sizeof out, NULL, 0), 0, "%s", cmd);
    names s = {.n = 0};
    const char *json = strstr(out, "\"ops\": [");
    cr_assert_not_null(json, "no ops in build/jacobian's JSON");
    for (const char *p = strstr(json, "{\"name\": \""); p; p = strstr(p + 1, "{\"name\": \"")) {
        const char *b = p + strlen("{\"name\": \"");
        add(&s, b, strcspn(b, "\""));
    }
    return s;
}

/* build/schedule --model M --costs-out F: the CSV's first column under its header */
static names costs_names(const char *model)
{
    char cmd[512], path[300];
    snprintf(path, sizeof path, "%s/costs_%s.csv", tu_tmpdir(), model);
    snprintf(cmd, sizeof cmd, "%s --model %s --costs-out %s", tu_bin("schedule"), model, path);
    cr_assert_eq(tu_run(cmd, NULL, 0, NULL, 0), 0, "%s", cmd);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    names s = {.n = 0};
    char line[512];
    cr_assert_not_null(fgets(line, sizeof line, f));
    cr_assert(strncmp(line, "layer,", 6) == 0, "header %s", line);
    while (fgets(line, sizeof line, f)) add(&s, line, strcspn(line, ","));
    fclose(f);
    remove(path);
    return s;
}

/* build/<app> --backward bppsa --plan=full: the "a[1..n] = Jt of: …" line (K = 0 keeps
 * the plan cheap for VGG-11: no matrix products) */
static names plan_names(const char *app)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s --backward bppsa --plan=full --batch 1 --scan-levels 0", tu_bin(app));
    cr_assert_eq(tu_run(cmd, out, sizeof out, NULL, 0), 0, "%s", cmd);
    const char *p = strstr(out, "= Jt of:");
    cr_assert_not_null(p, "--plan=full names no ops");
    p += strlen("= Jt of:");
    names s = {.n = 0};
    while (*p == ' ') {
        p++;
        size_t len = strcspn(p, " \n");
        add(&s, p, len);
        p += len;
    }
    return s;
}

/* The trace's event names: "δO relu_2", "δW conv1", "U fc1", "F' conv1 may start". */
static void add_trace_name(names *s, const char *ev)
{
    const char *sp = strchr(ev, ' ');
    cr_assert_not_null(sp, "trace event '%s' has no op name", ev);
    const char *b = sp + 1;
    const char *end = strstr(b, " may start");
    add(s, b, end ? (size_t)(end - b) : strlen(b));
}

/* LeNet: the trace is the one build/lenet --backward ooo --trace writes. */
static names trace_names_lenet(void)
{
    char cmd[512], path[300];
    snprintf(path, sizeof path, "%s/trace.json", tu_tmpdir());
    snprintf(cmd, sizeof cmd, "%s --backward ooo --steps 1 --batch 2 --quiet --trace %s", tu_bin("lenet"), path);
    cr_assert_eq(tu_run(cmd, NULL, 0, NULL, 0), 0, "%s", cmd);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    size_t len = fread(out, 1, sizeof out - 1, f);
    fclose(f);
    remove(path);
    out[len] = 0;
    names s = {.n = 0};
    for (char *p = strstr(out, "\"ph\": \""); p; p = strstr(p + 1, "\"ph\": \"")) {
        if (p[7] == 'M' || p[7] == 's' || p[7] == 'f') continue;   /* metadata and dependency arrows */
        char *q = strstr(p, "\"name\": \"");
        cr_assert_not_null(q);
        q += strlen("\"name\": \"");
        char ev[128];
        size_t n = strcspn(q, "\"");
        cr_assert_lt(n, sizeof ev);
        memcpy(ev, q, n);
        ev[n] = 0;
        add_trace_name(&s, ev);
    }
    return s;
}

/* VGG-11: the trace's labels (sp_ooo_task_label, which schedulers/backward/ooo_trace.c writes)
 * from the task graph of one batch-1 forward, without a training run's evaluation. */
static names trace_names_model(sp_model *m, int c, int h)
{
    sp_model_init(m, 1);
    sp_layer *ce = sp_softmax_ce();
    sp_tensor x = sp_tensor_new(4, (int[]){1, c, h, h});
    tu_fill_uniform(x.data, x.numel, 3, 0, 1);
    int y = 1;
    sp_tape t;
    sp_tape_init(&t);
    sp_node *loss = sp_apply_loss(&t, ce, sp_model_forward(m, &t, sp_tape_input(&t, &x)), &y);
    sp_ooo_graph *g = sp_ooo_graph_build(&t, loss, true);
    names s = {.n = 0};
    for (int i = 0; i < g->ntasks; i++) {
        char ev[160];
        add_trace_name(&s, sp_ooo_task_label(&g->tasks[i], ev, sizeof ev));
    }
    sp_tape_free(&t);
    sp_tensor_free(&x);
    sp_layer_free(ce);
    return s;
}

static void check_all(const char *model, const names *trace_all, const char *const *want, int nwant)
{
    names hand = {.n = 0};
    for (int i = 0; i < nwant; i++) add(&hand, want[i], strlen(want[i]));
    names jac = jacobian_names(model), costs = costs_names(model), plan = plan_names(model), trace = *trace_all;
    /* the loss op is a row of the Jacobian table and a δO of the trace, but no model layer */
    cr_assert(has(&jac, "softmax_ce_1"), "%s: the Jacobian table names the loss softmax_ce_1", model);
    cr_assert(has(&trace, "softmax_ce_1"), "%s: the trace names the loss softmax_ce_1", model);
    drop(&jac, "softmax_ce_1");
    drop(&trace, "softmax_ce_1");
    same_set(&hand, "the model", &costs, "the schedule cost CSV", model);
    same_set(&hand, "the model", &jac, "the Jacobian table", model);
    same_set(&hand, "the model", &plan, "the bppsa plan", model);
    same_set(&hand, "the model", &trace, "the ooo trace", model);
}

Test(names, lenet_same_in_trace_jacobian_costs_and_plan, .timeout = 300)
{
    static const char *const want[] = {"conv1", "relu_1", "maxpool2d_1", "conv2",  "relu_2", "maxpool2d_2",
                                       "flatten_1", "fc1", "relu_3",  "fc2", "relu_4", "fc3"};
    names trace = trace_names_lenet();
    check_all("lenet", &trace, want, (int)(sizeof want / sizeof *want));
}

Test(names, vgg11_same_in_trace_jacobian_costs_and_plan, .timeout = 300)
{
    static const char *const want[] = {
        "conv1", "relu_1", "maxpool2d_1", "conv2", "relu_2", "maxpool2d_2", "conv3", "relu_3",
        "conv4", "relu_4", "maxpool2d_3", "conv5", "relu_5", "conv6", "relu_6", "maxpool2d_4",
        "conv7", "relu_7", "conv8", "relu_8", "maxpool2d_5", "flatten_1", "fc"};
    sp_set_threads(2);
    sp_model *m = sp_zoo_vgg11(3, 10);
    names trace = trace_names_model(m, 3, 32);
    sp_model_free(m);
    check_all("vgg11", &trace, want, (int)(sizeof want / sizeof *want));
}

/* The library's two spellings agree: a node's label and its model layer's label. */
Test(names, node_and_layer_labels_agree)
{
    sp_model *m = sp_zoo_lenet(1, 28);
    sp_model_init(m, 1);
    sp_tensor x = sp_tensor_new(4, (int[]){1, 1, 28, 28});
    tu_fill_uniform(x.data, x.numel, 3, 0, 1);
    sp_tape t;
    sp_tape_init(&t);
    sp_node *in = sp_tape_input(&t, &x);
    sp_model_forward(m, &t, in);
    char a[96], b[96];
    cr_assert_str_eq(sp_node_label(in, a, sizeof a), "input");
    cr_assert_eq(t.n, m->nlayers + 1);
    for (int i = 0; i < m->nlayers; i++)
        cr_assert_str_eq(sp_node_label(t.nodes[i + 1], a, sizeof a), sp_model_layer_label(m, i, b, sizeof b));
    cr_assert_str_eq(sp_model_layer_label(m, 4, b, sizeof b), "relu_2");
    sp_tape_free(&t);
    sp_tensor_free(&x);
    sp_model_free(m);
}
