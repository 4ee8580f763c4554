/* engine.c — the registry of backward engines and the helpers they share. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/device.h"
#include "schedulers/backward/engine.h"
#include "core/error.h"
#include "core/threads.h"
#include "schedulers/backward/engines.h"
#include "core/guard.h"

/* The registry: every engine's descriptor (each in its engine's file), in the order
 * --help and messages list them. */
static const sp_engine_def *const ENGINES[] = {&sp_engine_def_linear, &sp_engine_def_bppsa, &sp_engine_def_ooo};
#define NENGINES (sizeof ENGINES / sizeof ENGINES[0])
_Static_assert(NENGINES <= SP_ENGINES_MAX, "more engines than SP_ENGINES_MAX");

const sp_engine_def *sp_engine_def_at(int i) { return i >= 0 && (size_t)i < NENGINES ? ENGINES[i] : NULL; }

const sp_engine_def *sp_engine_def_find(const char *name)
{
    SP_GUARD(NULL);
    if (!name) sp_fail("sp_engine_def_find: argument 'name' is NULL");
    for (size_t i = 0; i < NENGINES; i++)
        if (strcmp(name, ENGINES[i]->name) == 0 || (ENGINES[i]->alias && strcmp(name, ENGINES[i]->alias) == 0))
            return ENGINES[i];
    return NULL;
}

const void *sp_engine_own_opts(const sp_engine_def *d, const sp_engine_opts *opts)
{
    SP_GUARD(NULL);
    if (!d) sp_fail("sp_engine_own_opts: argument 'd' is NULL");
    return opts && opts->own ? opts->own : d->opts_default;
}

const char *sp_engine_names(void)
{
    static char buf[128];
    buf[0] = 0;
    for (size_t i = 0; i < NENGINES; i++) {
        if (i) strcat(buf, "|");
        strcat(buf, ENGINES[i]->name);
    }
    return buf;
}

const char *const *sp_engine_aliases(void)
{
    static const char *pairs[2 * NENGINES + 1];
    size_t n = 0;
    for (size_t i = 0; i < NENGINES; i++)
        if (ENGINES[i]->alias) pairs[n++] = ENGINES[i]->alias, pairs[n++] = ENGINES[i]->name;
    pairs[n] = NULL;
    return pairs;
}

unsigned sp_engine_caps(const char *name)
{
    SP_GUARD(0);
    if (!name) sp_fail("sp_engine_caps: argument 'name' is NULL");
    const sp_engine_def *d = sp_engine_def_find(name);
    return d ? d->caps : 0;
}

const char *sp_engine_names_with(unsigned caps, char *buf, size_t len)
{
    SP_GUARD(NULL);
    if (!buf) sp_fail("sp_engine_names_with: argument 'buf' is NULL");
    size_t total = 0, k = 0;
    for (size_t i = 0; i < NENGINES; i++) total += (ENGINES[i]->caps & caps) == caps;
    buf[0] = 0;
    for (size_t i = 0, n = 0; i < NENGINES && k < len; i++) {
        if ((ENGINES[i]->caps & caps) != caps) continue;
        const char *sep = n == 0 ? "" : n + 1 == total ? " or " : ", ";
        k += (size_t)snprintf(buf + k, len - k, "%s%s", sep, ENGINES[i]->name);
        n++;
    }
    return buf;
}

sp_engine_opts sp_engine_opts_default(void) { return (sp_engine_opts){0}; }

typedef struct create_args {
    const sp_engine_def *d;
    const sp_engine_opts *opts;
    sp_engine *e;
} create_args;

static void create(void *arg)   /* an engine's create checks its options before it allocates */
{
    create_args *a = arg;
    a->e = a->d->create(a->opts);
}

sp_engine *sp_engine_create(const char *name, const sp_engine_opts *opts)
{
    if (!name) return sp_error("sp_engine_create: argument 'name' is NULL"), NULL;
    const sp_engine_def *d = sp_engine_def_find(name);
    if (!d) return sp_error("--backward %s: unknown engine (expected one of %s)", name, sp_engine_names()), NULL;
    sp_engine_opts defaults = sp_engine_opts_default();
    create_args a = {d, opts ? opts : &defaults, NULL};
    if (sp_try(create, &a) != SP_OK) return NULL;
    a.e->caps = d->caps;
    return a.e;
}

void sp_engine_destroy(sp_engine *e)
{
    if (!e) return;
    if (e->destroy) e->destroy(e);
    free(e);
}

int sp_backward(sp_engine *e, sp_tape *t, sp_node *loss)
{
    SP_GUARD(SP_ERR);
    if (!e || !t || !loss)   /* no status to return: a programming error, one line */
        sp_fail("sp_backward: %s is NULL", !e ? "the engine" : !t ? "the tape" : "the loss node");
    e->backward(e, t, loss);
    return SP_OK;
}

/* ---- the optional hooks, with their defaults --------------------------------------------- */

int sp_backward_async(sp_engine *e, sp_tape *t, sp_node *loss)
{
    SP_GUARD(SP_ERR);
    if (!e) sp_fail("sp_backward_async: argument 'e' is NULL");
    if (!t) sp_fail("sp_backward_async: argument 't' is NULL");
    if (!loss) sp_fail("sp_backward_async: argument 'loss' is NULL");
    if (e->backward_async) e->backward_async(e, t, loss);
    else e->backward(e, t, loss);
    return SP_OK;
}

int sp_engine_sync(sp_engine *e)
{
    SP_GUARD(SP_ERR);
    if (!e) sp_fail("sp_engine_sync: argument 'e' is NULL");
    if (e->sync) e->sync(e);
    return SP_OK;
}

int sp_engine_wait_layer(sp_engine *e, const sp_layer *l)
{
    SP_GUARD(SP_ERR);
    if (!e) sp_fail("sp_engine_wait_layer: argument 'e' is NULL");
    if (!l) sp_fail("sp_engine_wait_layer: argument 'l' is NULL");
    if (e->wait_layer) e->wait_layer(e, l);
    return SP_OK;
}

int sp_engine_set_graph(sp_engine *e, bool on)
{
    SP_GUARD(SP_ERR);
    if (!e) sp_fail("sp_engine_set_graph: argument 'e' is NULL");
    if (e->set_graph) e->set_graph(e, on);
    else if (on) sp_fail("--cuda-graph: the %s engine does not capture its backward as a graph", e->name);
    return SP_OK;
}

int sp_engine_set_step_capture(sp_engine *e, bool on)
{
    SP_GUARD(SP_ERR);
    if (!e) sp_fail("sp_engine_set_step_capture: argument 'e' is NULL");
    if (e->set_step_capture) e->set_step_capture(e, on);
    return SP_OK;
}

int sp_engine_check(sp_engine *e, struct sp_model *m, const sp_tensor *x1, const int *y1)
{
    SP_GUARD(SP_ERR);
    if (!e) sp_fail("sp_engine_check: argument 'e' is NULL");
    if (!m) sp_fail("sp_engine_check: argument 'm' is NULL");
    if (e->check) e->check(e, m, x1, y1);
    return SP_OK;
}

int sp_engine_report(sp_engine *e, const sp_report_writer *w)
{
    SP_GUARD(SP_ERR);
    if (!e) sp_fail("sp_engine_report: argument 'e' is NULL");
    if (e->report) e->report(e, w);
    return SP_OK;
}

bool sp_engine_plan(sp_engine *e, struct sp_model *m, const sp_tensor *x, const int *y, const sp_report_writer *w)
{
    SP_GUARD(false);
    if (!e) sp_fail("sp_engine_plan: argument 'e' is NULL");
    if (!m) sp_fail("sp_engine_plan: argument 'm' is NULL");
    return e->plan && e->plan(e, m, x, y, w);
}

int sp_mark_needs_grad(sp_tape *t)
{
    SP_GUARD(SP_ERR);
    if (!t) sp_fail("sp_mark_needs_grad: argument 't' is NULL");
    for (int i = 0; i < t->n; i++) {
        sp_node *n = t->nodes[i];
        n->needs_grad = n->op && n->layer && n->layer->nparams > 0;
        for (int k = 0; n->op && k < n->ninputs; k++) n->needs_grad |= n->inputs[k]->needs_grad;
    }
    return SP_OK;
}

int sp_alloc_grads(sp_tape *t, sp_node *loss)
{
    SP_GUARD(SP_ERR);
    if (!t) sp_fail("sp_alloc_grads: argument 't' is NULL");
    if (!loss) sp_fail("sp_alloc_grads: argument 'loss' is NULL");
    /* A node read once (one input slot of one op), which the backward runs (at or before the loss),
     * gets ∂l/∂y overwritten by that op's δ (backward_input's contract): no zeroing.
     * A fan-out accumulates into it, and an output nobody back-propagates keeps 0. */
    int *uses = sp_tape_alloc(t, (size_t)(loss->index + 1) * sizeof *uses);
    memset(uses, 0, (size_t)(loss->index + 1) * sizeof *uses);
    for (int i = 0; i <= loss->index; i++)
        for (int k = 0; k < t->nodes[i]->ninputs; k++) uses[t->nodes[i]->inputs[k]->index]++;
    for (int i = 0; i <= loss->index; i++) {
        sp_node *n = t->nodes[i];
        if (n->needs_grad || n == loss) {
            n->grad = sp_tape_tensor_like(t, &n->out);
            if (n == loss || n->nconsumers != 1 || uses[i] != 1) sp_zero(&n->grad);
        } else {
            n->grad.data = NULL;
        }
    }
    sp_tensor seed = sp_tensor_view(loss->grad.data, 1, (int[]){1});   /* ∂l/∂l, first entry */
    seed.device = loss->grad.device;
    sp_fill(&seed, 1.0f);
    return SP_OK;
}

/* ---- workers whose failures come back (engines.h) ---------------------------------------- */

typedef struct checked_for {
    void (*fn)(void *ctx, size_t begin, size_t end);
    void *ctx;
    _Atomic int failed;
    char failure[512];   /* written once, by the chunk that failed first */
} checked_for;

typedef struct checked_chunk {
    checked_for *f;
    size_t begin, end;
} checked_chunk;

static void checked_chunk_run(void *arg)
{
    checked_chunk *c = arg;
    c->f->fn(c->f->ctx, c->begin, c->end);
}

static void checked_range(void *arg, size_t begin, size_t end)
{
    checked_for *f = arg;
    if (atomic_load(&f->failed)) return;   /* the loop's result is lost already */
    checked_chunk c = {f, begin, end};
    if (sp_try(checked_chunk_run, &c) != SP_OK && !atomic_exchange(&f->failed, 1))
        snprintf(f->failure, sizeof f->failure, "%s", sp_last_error());
}

void sp_engine_parallel_for(size_t n, void (*fn)(void *ctx, size_t begin, size_t end), void *ctx)
{
    checked_for f = {.fn = fn, .ctx = ctx};
    atomic_init(&f.failed, 0);
    sp_parallel_for(n, checked_range, &f);
    if (atomic_load(&f.failed)) sp_fail("%s", f.failure);
}
