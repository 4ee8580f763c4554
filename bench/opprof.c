/* opprof.c — where a training step's time goes, op by op.
 *
 *   opprof MODEL BATCH [STEPS] [THREADS]   (make opprof; MODEL: a zoo name, e.g. lenet, vgg11, resnet20; resnet = resnet20)
 *
 * Runs the linear engine's step by hand on a random batch so that each piece can be
 * timed on its own: every layer's forward (sp_apply_n on the outputs it reads, so DAG
 * models such as ResNet-20 too), δ (backward_input of each input, summed into a
 * producer that fans out, as sp_node_backward_inputs) and G (backward_params), zero_grad
 * and the SGD update. An op with backward_input_params (batch norm) runs δ and G in one
 * pass, as the linear engine does: its time is in the δ column, marked "δ+G". Prints, per op, the median over
 * STEPS steps (after 5 warm-up steps) in µs, its share of the step, and for conv and
 * linear the achieved GFLOP/s from the op's own cost(). The sum of the medians is
 * compared with the median of whole steps, so time lost between ops shows.
 * OPPROF_BEST=1: the best (minimum) of the STEPS steps instead of the median, which
 * other tenants' load disturbs less on a shared machine. As the training step's forward,
 * a layer whose ReLU sp_model_forward folds into it (sp_model_fuses_relu) runs with it,
 * the ReLU's row then near 0, and where it also folds the op after that ReLU (a max
 * pool: sp_model_fuses_relu_next) the three run as one, their time in the layer's row;
 * OPPROF_FUSE=relu folds the ReLUs only; OPPROF_FUSE=0 runs every layer on its own, each
 * output in bytes of its own. OPPROF_CHANNELS=3 runs resnet20 on 3-channel input, as the
 * bench's CIFAR-format data (the zoo's default is 1, Fashion-MNIST). OPPROF_SPLIT=1 runs
 * δ and G of every layer as two calls, as the ooo engine's tasks do. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "layers/zoo.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/rng.h"
#include "optim/optim.h"
#include "bench/stats.h"
#include "schedulers/backward/engines.h"
#include "schedulers/plan/schedule.h"

enum { PH_FWD, PH_DELTA, PH_G, NPH };

static int g_best;

static double stat(double *v, int n)
{
    if (!g_best) return bench_median(v, n);
    double m = v[0];
    for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
    return m;
}
#define WARMUP 5

/* OPPROF_COSTS=FILE: the layers' statistics as a profile CSV for build/schedule --profile,
 * one stage per segment of the model (sp_costs_from_model_times: per layer of a chain,
 * per residual block of a DAG), the loss's time in the last stage (which computes it),
 * durations in µs; the first line names the command. */
static void write_costs(const char *path, sp_model *m, int nd, const int *shape, int B, double *const *t, int steps,
                        int argc, char **argv)
{
    int L = m->nlayers;
    double *us = calloc((size_t)3 * L, sizeof(double));
    for (int l = 0; l <= L; l++)
        for (int p = 0; p < NPH; p++) us[3 * (l < L ? l : L - 1) + p] += 1e6 * stat(t[p] + (size_t)l * steps, steps);
    sp_costs *c = sp_costs_from_model_times(m, nd, shape, B, us);
    FILE *f = fopen(path, "w");
    if (!f) sp_fail("OPPROF_COSTS=%s: cannot write it", path);
    fprintf(f, "# %s costs measured by:%s", m->name, g_best ? " OPPROF_BEST=1" : "");
    for (int i = 0; i < argc; i++) fprintf(f, " %s", argv[i]);
    fprintf(f, " (bench/opprof.c, the %s of %d steps per layer, summed per segment; durations in us)\n",
            g_best ? "best" : "median", steps);
    sp_costs_write_csv(f, c);
    if (fclose(f) != 0) sp_fail("OPPROF_COSTS=%s: write failed", path);
    sp_costs_free(c);
    free(us);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: opprof MODEL BATCH [STEPS] [THREADS]\n");
        return 2;
    }
    const char *name = strcmp(argv[1], "resnet") == 0 ? "resnet20" : argv[1];
    int B = atoi(argv[2]), steps = argc > 3 ? atoi(argv[3]) : 50, threads = argc > 4 ? atoi(argv[4]) : 2;
    if (B < 1 || steps < 1) sp_fail("opprof: BATCH and STEPS must be >= 1");
    g_best = getenv("OPPROF_BEST") && !strcmp(getenv("OPPROF_BEST"), "1");
    const char *fv = getenv("OPPROF_FUSE");
    bool fuse = !(fv && !strcmp(fv, "0")), fuse_next = fuse && !(fv && !strcmp(fv, "relu"));
    const char *sv = getenv("OPPROF_SPLIT");
    bool split = sv && !strcmp(sv, "1");
    if (fv && strcmp(fv, "0") && strcmp(fv, "1") && strcmp(fv, "relu"))
        sp_fail("OPPROF_FUSE=%s: expected 0, relu or 1", fv);
    sp_set_threads(threads);
    const char *cv = getenv("OPPROF_CHANNELS");
    int in_ch = cv ? atoi(cv) : 0;
    if (cv && (in_ch < 1 || strcmp(name, "resnet20")))
        sp_fail("OPPROF_CHANNELS=%s: expected a count >= 1, for resnet20 only", cv);
    sp_model *m = in_ch ? sp_zoo_resnet20(in_ch, 10) : sp_zoo_model(name);
    sp_model_init(m, 1);
    int shape[3];
    int nd = sp_zoo_input_shape(name, shape);
    if (in_ch) shape[0] = in_ch;
    int xs[4] = {B, shape[0], shape[1], shape[2]};
    sp_tensor x = sp_tensor_new(nd + 1, xs);
    sp_rng r;
    sp_rng_seed(&r, 7);
    for (size_t i = 0; i < x.numel; i++) x.data[i] = sp_rng_uniform(&r);
    int *y = malloc((size_t)B * sizeof *y);
    for (int b = 0; b < B; b++) y[b] = b % 10;
    sp_optim_cfg cfg = sp_optim_cfg_default();
    cfg.lr = 1e-4;
    cfg.momentum = 0.9;
    sp_optim *o = sp_optim_create("sgd", m->params, m->nparams, &cfg);

    int L = m->nlayers + 1;   /* the layers and the loss */
    double *t[NPH], *zero = malloc((size_t)steps * sizeof(double)), *upd = malloc((size_t)steps * sizeof(double));
    double *whole = malloc((size_t)steps * sizeof(double));
    for (int p = 0; p < NPH; p++) t[p] = calloc((size_t)L * steps, sizeof(double));
    double *flops[NPH];
    for (int p = 0; p < NPH; p++) flops[p] = calloc((size_t)L, sizeof(double));
    sp_tape tape;
    sp_tape_init(&tape);
    tape.reuse_inputs = fuse;   /* the training step's forward (a ReLU over a conv: folded in) */
    sp_node **outs = malloc((size_t)m->nlayers * sizeof *outs), *args[16];
    bool *fused = calloc((size_t)L, sizeof *fused);
    /* activations in oneDNN's blocked layout where the model allows (sp_model_forward's
     * plan, as the training loop); OPPROF_BLOCKED=0: NCHW throughout */
    const char *bv = getenv("OPPROF_BLOCKED");
    bool *make = calloc((size_t)m->nlayers + 1, sizeof *make);
    if (!bv || strcmp(bv, "0") != 0) sp_model_blocked_plan(m, make);
    for (int s = -WARMUP; s < steps; s++) {
        double w0 = sp_now(), a;
        sp_tape_reset(&tape);
        a = sp_now();
        sp_model_zero_grad(m);
        if (s >= 0) zero[s] = sp_now() - a;
        sp_node *in = sp_tape_input(&tape, &x), *n = in;
        for (int l = 0; l < L; l++) {
            int k0 = l < m->nlayers ? m->from_start[l] : 0, nin = l < m->nlayers ? m->from_start[l + 1] - k0 : 0;
            if (nin > 16) sp_fail("opprof: layer %d reads %d inputs (at most 16)", l, nin);
            for (int k = 0; k < nin; k++) args[k] = m->from[k0 + k] == SP_MODEL_INPUT ? in : outs[m->from[k0 + k]];
            tape.out_blocked = l < m->nlayers && make[l];
            a = sp_now();
            if (l < m->nlayers && fuse_next && nin == 1 && sp_model_fuses_relu_next(m, &tape, l, SP_CPU) &&
                !make[l] && !make[l + 1] && !make[l + 2] && !args[0]->out.blk) {
                /* as sp_model_forward: the layer, its ReLU and the next op as one; their rows 0 */
                n = outs[l + 2] = sp_apply_fused_relu_next(&tape, m->layers[l], m->layers[l + 1], m->layers[l + 2], args[0]);
                if (s >= 0) t[PH_FWD][(size_t)l * steps + s] = sp_now() - a;
                outs[l + 1] = n->input;
                outs[l] = n->input->input;
                if (s >= 0) t[PH_FWD][(size_t)(l + 1) * steps + s] = t[PH_FWD][(size_t)(l + 2) * steps + s] = 0;
                l += 2;
                continue;
            }
            if (l < m->nlayers && fuse && nin == 1 && sp_model_fuses_relu(m, &tape, l, SP_CPU)) {
                /* as sp_model_forward: the layer with its ReLU folded in; the ReLU's row 0 */
                outs[l] = sp_apply_fused_relu(&tape, m->layers[l], args[0]);
                if (s >= 0) t[PH_FWD][(size_t)l * steps + s] = sp_now() - a;
                a = sp_now();
                n = outs[l + 1] = sp_apply_over_fused(&tape, m->layers[l + 1], outs[l]);
                if (s >= 0) t[PH_FWD][(size_t)(l + 1) * steps + s] = sp_now() - a;
                l++;
                continue;
            }
            n = l < m->nlayers ? sp_apply_n(&tape, m->layers[l], nin, args) : sp_apply_loss(&tape, m->loss, n, y);
            if (s >= 0) t[PH_FWD][(size_t)l * steps + s] = sp_now() - a;
            if (l < m->nlayers) outs[l] = n;
        }
        tape.out_blocked = false;
        sp_mark_needs_grad(&tape);
        sp_alloc_grads(&tape, n);
        for (int l = L - 1; l >= 0; l--) {   /* node l + 1 is layer l (node 0: the input) */
            sp_node *nd_ = tape.nodes[l + 1];
            bool params = nd_->kern->backward_params && nd_->layer->nparams > 0;
            fused[l] = params && !split && nd_->kern->backward_input_params && nd_->ninputs == 1 && nd_->input->needs_grad;
            if (fused[l]) {   /* as sp_node_backward: one pass for δ and G */
                a = sp_now();
                sp_node_backward(nd_);
                if (s >= 0) t[PH_DELTA][(size_t)l * steps + s] = sp_now() - a;
                continue;
            }
            if (params) {
                a = sp_now();
                nd_->kern->backward_params(nd_, &nd_->grad);
                if (s >= 0) t[PH_G][(size_t)l * steps + s] = sp_now() - a;
            }
            bool any = false;   /* δ of every input that needs one (added into one read twice) */
            for (int k = 0; k < nd_->ninputs; k++) any |= nd_->inputs[k]->needs_grad;
            if (any) {
                a = sp_now();
                sp_node_backward_inputs(nd_);
                if (s >= 0) t[PH_DELTA][(size_t)l * steps + s] = sp_now() - a;
            }
            if (s == 0) {
                sp_cost c = nd_->op->cost(nd_);
                flops[PH_FWD][l] = c.fwd_flops, flops[PH_DELTA][l] = c.bwd_input_flops;
                flops[PH_G][l] = c.bwd_params_flops;
            }
        }
        a = sp_now();
        sp_optim_step(o);
        if (s >= 0) upd[s] = sp_now() - a, whole[s] = sp_now() - w0;
    }

    printf("%s, batch %d, %d threads, %s of %d steps (µs)\n\n", name, B, threads, g_best ? "best" : "median", steps);
    printf("| op | fwd | δ | G | total | share | GFLOP/s fwd, δ, G |\n|---|---:|---:|---:|---:|---:|---|\n");
    double step = stat(whole, steps), sum = 0;
    for (int l = 0; l < L; l++) {
        double med[NPH], tot = 0;
        for (int p = 0; p < NPH; p++) tot += med[p] = stat(t[p] + (size_t)l * steps, steps);
        sum += tot;
        sp_layer *ly = l < m->nlayers ? m->layers[l] : m->loss;
        char gf[64] = "";
        if (ly->nparams > 0 && flops[PH_FWD][l] > 1e6)   /* conv and linear: arithmetic-bound */
            snprintf(gf, sizeof gf, "%.1f, %.1f, %.1f", flops[PH_FWD][l] / med[0] * 1e-9,
                     med[1] > 0 ? flops[PH_DELTA][l] / med[1] * 1e-9 : 0, med[2] > 0 ? flops[PH_G][l] / med[2] * 1e-9 : 0);
        printf("| %s %s%s | %.0f | %.0f | %.0f | %.0f | %.1f%% | %s |\n", ly->op->name, ly->name, fused[l] ? " (δ+G)" : "",
               1e6 * med[0],
               1e6 * med[1], 1e6 * med[2], 1e6 * tot, 100 * tot / step, gf);
    }
    double z = stat(zero, steps), u = stat(upd, steps);
    sum += z + u;
    printf("| zero_grad | | | | %.0f | %.1f%% | |\n| sgd update | | | | %.0f | %.1f%% | |\n", 1e6 * z, 100 * z / step,
           1e6 * u, 100 * u / step);
    const char *w = g_best ? "best" : "median";
    printf("\nsum of op %ss %.0f µs; %s step %.0f µs (%.0f images/s)\n", w, 1e6 * sum, w, 1e6 * step, B / step);
    const char *costs = getenv("OPPROF_COSTS");
    if (costs) write_costs(costs, m, nd, shape, B, t, steps, argc, argv);
    sp_tape_free(&tape);
    sp_optim_free(o);
    sp_tensor_free(&x);
    sp_model_free(m);
    free(y);
    free(outs), free(fused);
    for (int p = 0; p < NPH; p++) free(t[p]), free(flops[p]);
    free(zero), free(upd), free(whole);
    return 0;
}
