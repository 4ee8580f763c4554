/* model.c — ordered layers + parameter registry with PyTorch names. */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include "core/model.h"
#include "core/device.h"
#include "core/error.h"
#include "core/guard.h"

sp_model *sp_model_new(const char *name)
{
    SP_GUARD(NULL);
    if (!name) sp_fail("sp_model_new: argument 'name' is NULL");
    sp_model *m = sp_xcalloc(1, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name);
    return m;
}

int sp_model_set_loss(sp_model *m, sp_layer *loss)
{
    SP_GUARD(SP_ERR);
    if (!m) sp_fail("sp_model_set_loss: argument 'm' is NULL");
    if (!loss) sp_fail("sp_model_set_loss: argument 'loss' is NULL");
    if (loss && loss->nparams > 0)
        sp_fail("model '%s': loss %s has parameters (expected a parameter-free loss: no optimizer would train them)",
                m->name, loss->op->name);
    if (m->loss != loss) sp_layer_free(m->loss);
    m->loss = loss;
    return SP_OK;
}

void sp_model_free(sp_model *m)
{
    if (!m) return;
    for (int i = 0; i < m->nlayers; i++) sp_layer_free(m->layers[i]);
    sp_layer_free(m->loss);
    free(m->layers);
    free(m->from);
    free(m->from_start);
    free(m->params);
    free(m->buffers);
    free(m);
}

/* Whether l may join m: SP_ERR naming what is wrong (nothing changed), else SP_OK. */
static int add_check(const sp_model *m, const sp_layer *l, int ninputs, const int *from)
{
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i] == l)
            return sp_error("model '%s': layer %d (%s) is already in the model as layer %d (a layer is added once)",
                            m->name, m->nlayers, l->op->name, i);
    int arity = l->op->arity ? l->op->arity : 1;
    if (arity == SP_ARITY_ANY ? ninputs < 1 : ninputs != arity)
        return sp_error("model '%s': layer %d (%s) given %d inputs, expected %d", m->name, m->nlayers, l->op->name,
                        ninputs, arity);
    for (int k = 0; k < ninputs; k++)
        if (from[k] < SP_MODEL_INPUT || from[k] >= m->nlayers)
            return sp_error("model '%s': layer %d (%s) reads layer %d, expected an earlier layer or the input",
                            m->name, m->nlayers, l->op->name, from[k]);
    for (int i = 0; i < l->nparams; i++) {
        if (sp_model_param(m, l->params[i]->name))
            return sp_error("model '%s': duplicate parameter name '%s'", m->name, l->params[i]->name);
        for (int j = 0; j < i; j++)
            if (strcmp(l->params[j]->name, l->params[i]->name) == 0)
                return sp_error("model '%s': duplicate parameter name '%s'", m->name, l->params[i]->name);
    }
    for (int i = 0; i < l->nbuffers; i++)
        if (sp_model_param(m, l->buffers[i]->name))
            return sp_error("model '%s': duplicate buffer name '%s'", m->name, l->buffers[i]->name);
    return SP_OK;
}

int sp_model_add_from(sp_model *m, sp_layer *l, int ninputs, const int *from)
{
    SP_GUARD(SP_MODEL_NONE);
    if (!m) sp_fail("sp_model_add_from: argument 'm' is NULL");
    if (!l) sp_fail("sp_model_add_from: argument 'l' is NULL");
    if (ninputs > 0 && !from) sp_fail("sp_model_add_from: argument 'from' is NULL");
    if (add_check(m, l, ninputs, from) != SP_OK) {
        bool owned = false;   /* a layer already in m stays m's; any other is freed (ownership taken) */
        for (int i = 0; i < m->nlayers && !owned; i++) owned = m->layers[i] == l;
        if (!owned) sp_layer_free(l);
        return SP_MODEL_NONE;
    }
    l->eval = m->eval;
    if (m->nlayers == m->cap_layers) {
        m->cap_layers = m->cap_layers ? 2 * m->cap_layers : 16;
        m->layers = sp_xrealloc(m->layers, (size_t)m->cap_layers * sizeof *m->layers);
        m->from_start = sp_xrealloc(m->from_start, ((size_t)m->cap_layers + 1) * sizeof *m->from_start);
    }
    int used = m->nlayers ? m->from_start[m->nlayers] : 0;
    if (used + ninputs > m->cap_from) {
        m->cap_from = 2 * (used + ninputs);
        m->from = sp_xrealloc(m->from, (size_t)m->cap_from * sizeof *m->from);
    }
    m->from_start[0] = 0;
    memcpy(m->from + used, from, (size_t)ninputs * sizeof *from);
    m->from_start[m->nlayers + 1] = used + ninputs;
    m->layers[m->nlayers++] = l;
    for (int i = 0; i < l->nparams; i++) {
        if (m->nparams == m->cap_params) {
            m->cap_params = m->cap_params ? 2 * m->cap_params : 16;
            m->params = sp_xrealloc(m->params, (size_t)m->cap_params * sizeof *m->params);
        }
        m->params[m->nparams++] = l->params[i];
    }
    for (int i = 0; i < l->nbuffers; i++) {
        if (m->nbuffers == m->cap_buffers) {
            m->cap_buffers = m->cap_buffers ? 2 * m->cap_buffers : 16;
            m->buffers = sp_xrealloc(m->buffers, (size_t)m->cap_buffers * sizeof *m->buffers);
        }
        m->buffers[m->nbuffers++] = l->buffers[i];
    }
    return m->nlayers - 1;
}

int sp_model_add(sp_model *m, sp_layer *l)
{
    if (!m || !l) return sp_error("sp_model_add: %s is NULL", !m ? "the model" : "the layer"), SP_MODEL_NONE;
    int from = m->nlayers - 1;
    return sp_model_add_from(m, l, 1, &from);
}

int sp_model_last(const sp_model *m)
{
    SP_GUARD(SP_MODEL_NONE);
    if (!m) sp_fail("sp_model_last: argument 'm' is NULL");
    return m->nlayers - 1;
}

bool sp_model_is_chain(const sp_model *m)
{
    SP_GUARD(false);
    if (!m) sp_fail("sp_model_is_chain: argument 'm' is NULL");
    for (int i = 0; i < m->nlayers; i++)
        if (m->from_start[i + 1] - m->from_start[i] != 1 || m->from[m->from_start[i]] != i - 1) return false;
    return true;
}

int sp_model_init(sp_model *m, uint64_t seed)
{
    SP_GUARD(SP_ERR);
    if (!m) sp_fail("sp_model_init: argument 'm' is NULL");
    sp_rng r;
    sp_rng_seed(&r, seed);
    if (m->init) {
        m->init(m, &r);
        return SP_OK;
    }
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i]->op->init_params) m->layers[i]->op->init_params(m->layers[i], &r);
    return SP_OK;
}

/* Whether layer i may run over its one input, layer j's output (t->reuse_inputs): an
 * over_input op after an out_unread one, on the host, the output read by layer i alone. */
static bool over_input_on(const sp_model *m, const sp_tape *t, int i, int j, sp_device dev)
{
    if (!t->reuse_inputs || j < 0 || !m->layers[i]->op->over_input || !m->layers[j]->op->out_unread) return false;
    if (dev != SP_CPU || m->from_start[i + 1] - m->from_start[i] != 1 || j == m->nlayers - 1) return false;
    int readers = 0;
    for (int k = 0; k < m->from_start[m->nlayers]; k++) readers += m->from[k] == j;
    return readers == 1;
}

static bool over_input(const sp_model *m, const sp_tape *t, int i, int j, const sp_node *x)
{
    return over_input_on(m, t, i, j, x->out.device);
}

/* sp_model_fuses_relu without its guard: sp_model_forward asks it for every layer. */
static bool fuses_relu(const sp_model *m, const sp_tape *t, int i, sp_device dev)
{
    if (i < 0 || i + 1 >= m->nlayers || !m->layers[i + 1]->op->relu || m->from[m->from_start[i + 1]] != i) return false;
    if (m->from_start[i + 1] - m->from_start[i] != 1) return false;   /* layer i itself: one input */
    return over_input_on(m, t, i + 1, i, dev) && sp_op_kernels(m->layers[i]->op, dev)->forward_relu;
}

bool sp_model_fuses_relu(const sp_model *m, const sp_tape *t, int i, sp_device dev)
{
    SP_GUARD(false);
    if (!m) sp_fail("sp_model_fuses_relu: argument 'm' is NULL");
    if (!t) sp_fail("sp_model_fuses_relu: argument 't' is NULL");
    return fuses_relu(m, t, i, dev);
}

/* sp_model_fuses_relu_next without its guard. */
static bool fuses_relu_next(const sp_model *m, const sp_tape *t, int i, sp_device dev)
{
    if (!fuses_relu(m, t, i, dev) || i + 2 >= m->nlayers) return false;
    if (m->from_start[i + 3] - m->from_start[i + 2] != 1 || m->from[m->from_start[i + 2]] != i + 1) return false;
    int readers = 0;   /* of the ReLU's output: layer i + 2 alone */
    for (int k = 0; k < m->from_start[m->nlayers]; k++) readers += m->from[k] == i + 1;
    const sp_kernels *k = sp_op_kernels(m->layers[i + 2]->op, dev);
    return readers == 1 && k->forward_begin && k->forward_samples;
}

bool sp_model_fuses_relu_next(const sp_model *m, const sp_tape *t, int i, sp_device dev)
{
    SP_GUARD(false);
    if (!m) sp_fail("sp_model_fuses_relu_next: argument 'm' is NULL");
    if (!t) sp_fail("sp_model_fuses_relu_next: argument 't' is NULL");
    return fuses_relu_next(m, t, i, dev);
}

static int blk_kind(const sp_model *m, int i)
{
    const sp_layer *l = m->layers[i];
    return l->op->blocked ? l->op->blocked(l) : SP_BLK_NONE;
}

/* Layer i's output is blocked no more: the layers making it so (through those passing
 * their input's layout on) make NCHW. */
static void unblock(const sp_model *m, const bool *out, bool *make, int i)
{
    if (i < 0 || !out[i]) return;
    if (blk_kind(m, i) == SP_BLK_MAKES) {
        make[i] = false;
        return;
    }
    for (int k = m->from_start[i]; k < m->from_start[i + 1]; k++) unblock(m, out, make, m->from[k]);
}

/* Which layers write a blocked output (make[i], sp_tape.out_blocked): every layer that
 * may (SP_BLK_MAKES), less those whose output would reach, through layers passing the
 * layout on, an op that does not take it, an op whose inputs would be in two layouts, the
 * model's output, or the output of a layer marked plain[i] (plain may be NULL). Starts
 * from all and drops the makers of each conflict until none is left (the model's input
 * is NCHW). */
static void blocked_plan(const sp_model *m, const bool *plain, bool *make, bool *out)
{
    if (!m->nlayers) return;
    for (int i = 0; i < m->nlayers; i++) make[i] = blk_kind(m, i) == SP_BLK_MAKES;
    for (bool changed = true; changed;) {
        changed = false;
        for (int i = 0; i < m->nlayers && !changed; i++) {
            int kind = blk_kind(m, i), k0 = m->from_start[i], k1 = m->from_start[i + 1];
            int nblk = 0;
            for (int k = k0; k < k1; k++) nblk += m->from[k] >= 0 && out[m->from[k]];
            bool conflict = nblk && (kind == SP_BLK_NONE || (kind == SP_BLK_PASS && nblk != k1 - k0));
            out[i] = kind == SP_BLK_MAKES ? make[i] : kind == SP_BLK_PASS && nblk == k1 - k0 && nblk > 0;
            if (!conflict && out[i] && (i == m->nlayers - 1 || (plain && plain[i]))) {
                unblock(m, out, make, i);
                changed = true;
            } else if (conflict) {
                for (int k = k0; k < k1; k++) unblock(m, out, make, m->from[k]);
                changed = true;
            }
        }
    }
}

static int plan_cut(const sp_model *m, const bool *plain, bool *make, const char *who)
{
    if (!m) sp_fail("%s: argument 'm' is NULL", who);
    if (!make) sp_fail("%s: argument 'make' is NULL", who);
    bool *out = sp_xcalloc((size_t)m->nlayers + 1, sizeof *out);
    blocked_plan(m, plain, make, out);
    free(out);
    return SP_OK;
}

int sp_model_blocked_plan(const sp_model *m, bool *make)
{
    SP_GUARD(SP_ERR);
    return plan_cut(m, NULL, make, "sp_model_blocked_plan");
}

int sp_model_blocked_plan_cut(const sp_model *m, const bool *plain, bool *make)
{
    SP_GUARD(SP_ERR);
    return plan_cut(m, plain, make, "sp_model_blocked_plan_cut");
}

/* Whether sp_model_forward runs layer i, its input x, with its ReLU folded in: in NCHW,
 * or in any layouts for a layer that makes its output's (a convolution: its forward_relu
 * reads and writes the blocked layouts as its forward does). */
static bool fuses_relu_in(const sp_model *m, const sp_tape *t, int i, const sp_node *x)
{
    if ((t->out_blocked || x->out.blk) && blk_kind(m, i) != SP_BLK_MAKES) return false;
    return fuses_relu(m, t, i, x->out.device);
}

/* Whether the plan writes layer i + 1's or i + 2's output blocked (make may be NULL). */
static bool make_next(const bool *make, int i) { return make && (make[i + 1] || make[i + 2]); }

static sp_node *model_forward(sp_model *m, sp_tape *t, sp_node *x)
{
    if (!m) sp_fail("sp_model_forward: argument 'm' is NULL");
    if (!t) sp_fail("sp_model_forward: argument 't' is NULL");
    if (!x) sp_fail("sp_model_forward: argument 'x' is NULL");
    bool *make = NULL;
    if (t->blocked && !t->shape_only && x->out.device == SP_CPU && m->nlayers) {
        make = sp_tape_alloc(t, 2 * (size_t)m->nlayers * sizeof *make);
        blocked_plan(m, NULL, make, make + m->nlayers);
    }
    if (sp_model_is_chain(m)) {
        for (int i = 0; i < m->nlayers; i++) {
            t->out_blocked = make && make[i];
            if (!t->out_blocked && !x->out.blk && fuses_relu_next(m, t, i, x->out.device) && !make_next(make, i)) {
                /* layer i, its ReLU and the pool after it in one region */
                x = sp_apply_fused_relu_next(t, m->layers[i], m->layers[i + 1], m->layers[i + 2], x);
                i += 2;
                continue;
            }
            if (fuses_relu_in(m, t, i, x)) {   /* layer i and its ReLU in one pass */
                x = sp_apply_over_fused(t, m->layers[i + 1], sp_apply_fused_relu(t, m->layers[i], x));
                i++;
                continue;
            }
            x = over_input(m, t, i, i - 1, x) ? sp_apply_over(t, m->layers[i], x) : sp_apply(t, m->layers[i], x);
        }
        t->out_blocked = false;
        return x;
    }
    sp_node **out = sp_tape_alloc(t, ((size_t)m->nlayers + 1) * sizeof *out), **in = out + 1;   /* out[-1]: x */
    out[0] = x;
    sp_node **args = sp_tape_alloc(t, ((size_t)m->from_start[m->nlayers] + 1) * sizeof *args);
    for (int i = 0; i < m->nlayers; i++) {
        int k0 = m->from_start[i], nin = m->from_start[i + 1] - k0;
        for (int k = 0; k < nin; k++) args[k0 + k] = in[m->from[k0 + k]];
        t->out_blocked = make && make[i];
        if (nin == 1 && !t->out_blocked && !args[k0]->out.blk && fuses_relu_next(m, t, i, args[k0]->out.device) &&
            !make_next(make, i)) {
            in[i + 2] = sp_apply_fused_relu_next(t, m->layers[i], m->layers[i + 1], m->layers[i + 2], args[k0]);
            in[i + 1] = in[i + 2]->input;
            in[i] = in[i + 1]->input;
            i += 2;
            continue;
        }
        if (nin == 1 && fuses_relu_in(m, t, i, args[k0])) {
            in[i] = sp_apply_fused_relu(t, m->layers[i], args[k0]);
            in[i + 1] = sp_apply_over_fused(t, m->layers[i + 1], in[i]);
            i++;
            continue;
        }
        if (nin == 1 && over_input(m, t, i, m->from[k0], args[k0]))
            in[i] = sp_apply_over(t, m->layers[i], args[k0]);
        else
            in[i] = sp_apply_n(t, m->layers[i], nin, args + k0);
    }
    t->out_blocked = false;
    return m->nlayers ? in[m->nlayers - 1] : x;
}

sp_node *sp_model_forward(sp_model *m, sp_tape *t, sp_node *x)
{
    SP_GUARD(NULL);
    return model_forward(m, t, x);
}

sp_node *sp_model_loss(sp_model *m, sp_tape *t, const sp_tensor *x, const int *labels)
{
    SP_GUARD(NULL);
    if (!m) sp_fail("sp_model_loss: argument 'm' is NULL");
    if (!t) sp_fail("sp_model_loss: argument 't' is NULL");
    if (!x) sp_fail("sp_model_loss: argument 'x' is NULL");
    if (!m->loss) sp_fail("model '%s': no loss (its builder sets one, e.g. sp_model_set_loss(m, sp_softmax_ce()))", m->name);
    sp_node *logits = sp_model_forward(m, t, sp_tape_input(t, x));
    return sp_apply_loss(t, m->loss, logits, labels);
}

sp_param *sp_model_param(const sp_model *m, const char *name)
{
    if (!m) return sp_error("sp_model_param: argument 'm' is NULL"), NULL;
    if (!name) return sp_error("sp_model_param: argument 'name' is NULL"), NULL;
    for (int i = 0; i < sp_model_nstate(m); i++)
        if (strcmp(sp_model_state(m, i)->name, name) == 0) return sp_model_state(m, i);
    return NULL;
}

int sp_model_nstate(const sp_model *m)
{
    SP_GUARD(-1);
    if (!m) sp_fail("sp_model_nstate: argument 'm' is NULL");
    return m->nparams + m->nbuffers;
}

sp_param *sp_model_state(const sp_model *m, int i)
{
    SP_GUARD(NULL);
    if (!m) sp_fail("sp_model_state: argument 'm' is NULL");
    return i < m->nparams ? m->params[i] : m->buffers[i - m->nparams];
}

int sp_model_set_training(sp_model *m, bool training)
{
    SP_GUARD(SP_ERR);
    if (!m) sp_fail("sp_model_set_training: argument 'm' is NULL");
    m->eval = !training;
    for (int i = 0; i < m->nlayers; i++) m->layers[i]->eval = !training;
    return SP_OK;
}

int sp_model_zero_grad(sp_model *m)
{
    SP_GUARD(SP_ERR);
    if (!m) sp_fail("sp_model_zero_grad: argument 'm' is NULL");
    for (int i = 0; i < m->nparams; i++)
        if (!m->params[i]->grad_in_step) sp_zero(&m->params[i]->grad);
    return SP_OK;
}

int sp_model_step_grads(sp_model *m, bool on)
{
    SP_GUARD(SP_ERR);
    if (!m) sp_fail("sp_model_step_grads: argument 'm' is NULL");
    for (int i = 0; i < m->nparams; i++)
        if (m->params[i]->value.device != SP_CPU)
            sp_fail("sp_model_step_grads: parameter '%s' is on a device (expected the cpu)", m->params[i]->name);
    for (int i = 0; i < m->nparams; i++) {
        sp_param *p = m->params[i];
        if (p->grad_in_step == on) continue;
        if (on) {
            sp_tensor_free(&p->grad);   /* keeps its shape */
        } else {
            sp_tensor g = sp_tensor_new(p->grad.ndim, p->grad.shape);
            if (!g.data) sp_fail("%s", sp_last_error());
            p->grad = g;
        }
        p->grad_in_step = on;
    }
    return SP_OK;
}

const char *sp_model_layer_label(const sp_model *m, int i, char *buf, size_t len)
{
    SP_GUARD(NULL);
    if (!m) sp_fail("sp_model_layer_label: argument 'm' is NULL");
    if (!buf) sp_fail("sp_model_layer_label: argument 'buf' is NULL");
    const sp_layer *l = m->layers[i];
    if (l->name[0]) {
        snprintf(buf, len, "%s", l->name);
        return buf;
    }
    int k = 0;
    for (int j = 0; j <= i; j++) k += strcmp(m->layers[j]->op->name, l->op->name) == 0;
    snprintf(buf, len, "%s_%d", l->op->name, k);
    return buf;
}

size_t sp_model_numel(const sp_model *m)
{
    SP_GUARD(0);
    if (!m) sp_fail("sp_model_numel: argument 'm' is NULL");
    size_t n = 0;
    for (int i = 0; i < m->nparams; i++) n += m->params[i]->value.numel;
    return n;
}

sp_node *sp_model_forward_shapes(sp_model *m, sp_tape *t, int batch, int ndim, const int *sample_shape)
{
    SP_GUARD(NULL);
    if (!m) sp_fail("sp_model_forward_shapes: argument 'm' is NULL");
    if (!t) sp_fail("sp_model_forward_shapes: argument 't' is NULL");
    if (ndim > 0 && !sample_shape) sp_fail("sp_model_forward_shapes: argument 'sample_shape' is NULL");
    if (ndim < 0 || ndim + 1 > SP_MAX_DIMS) sp_fail("model '%s': samples of %d dimensions", m->name, ndim);
    int shape[SP_MAX_DIMS] = {batch};
    for (int i = 0; i < ndim; i++) shape[i + 1] = sample_shape[i];
    sp_tape_init(t);
    t->shape_only = true;
    sp_tensor x = sp_tensor_view(NULL, ndim + 1, shape);
    return sp_model_forward(m, t, sp_tape_input(t, &x));
}

int sp_model_summary(sp_model *m, int ndim, const int *sample_shape, FILE *f)
{
    SP_GUARD(SP_ERR);
    if (!m) sp_fail("sp_model_summary: argument 'm' is NULL");
    if (ndim > 0 && !sample_shape) sp_fail("sp_model_summary: argument 'sample_shape' is NULL");
    if (!f) sp_fail("sp_model_summary: argument 'f' is NULL");
    if (ndim < 1 || ndim >= SP_MAX_DIMS) sp_fail("model '%s': summary of a %d-dim sample", m->name, ndim);
    sp_tape t;
    sp_model_forward_shapes(m, &t, 1, ndim, sample_shape);
    fprintf(f, "%-4s %-36s %-12s %-18s %10s %14s\n", "#", "layer", "reads", "output", "params", "FLOPs");
    double flops = 0;
    for (int i = 0, li = 0; i < t.n; i++) {
        const sp_node *n = t.nodes[i];
        if (!n->op) continue;
        char name[SP_NAME_LEN + 24], reads[48] = "", out[48] = "";
        char label[SP_NAME_LEN + 16];   /* "conv1 (conv2d)", "relu_2 (relu)": the name every output uses */
        snprintf(name, sizeof name, "%s (%s)", sp_model_layer_label(m, li, label, sizeof label), n->op->name);
        for (int k = m->from_start[li]; k < m->from_start[li + 1]; k++) {
            size_t at = strlen(reads);
            if (m->from[k] == SP_MODEL_INPUT) snprintf(reads + at, sizeof reads - at, "%sin", at ? "," : "");
            else snprintf(reads + at, sizeof reads - at, "%s%d", at ? "," : "", m->from[k]);
        }
        for (int d = 1, at = 0; d < n->out.ndim; d++)
            at += snprintf(out + at, sizeof out - (size_t)at, "%s%d", d > 1 ? "x" : "", n->out.shape[d]);
        size_t np = 0;
        for (int p = 0; p < n->layer->nparams; p++) np += n->layer->params[p]->value.numel;
        double fl = n->op->cost ? n->op->cost(n).fwd_flops : 0;
        flops += fl;
        fprintf(f, "%-4d %-36s %-12s %-18s %10zu %14.0f\n", li, name, reads, out, np, fl);
        li++;
    }
    fprintf(f, "total: %d layers, %zu parameters, %.0f forward FLOPs per sample%s\n", m->nlayers, sp_model_numel(m),
            flops, sp_model_is_chain(m) ? " (a chain)" : " (a DAG)");
    sp_tape_free(&t);
    return SP_OK;
}
