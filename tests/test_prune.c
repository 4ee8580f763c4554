/* test_prune.c — magnitude pruning (optim/prune.h): the masks, retraining with every
 * engine, torch-named checkpoints, and the pruned Jᵀ patterns bppsa sees. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "layers/zoo.h"
#include "schedulers/backward/engine.h"
#include "core/model.h"
#include "core/io/model_io.h"
#include "core/threads.h"
#include "core/io/safetensors.h"
#include "layers/layers.h"
#include "optim/optim.h"
#include "optim/prune.h"
#include "schedulers/backward/engines.h"
#include "train/train.h"
#include "tests/testutil.h"

static sp_tensor input(int ndim, const int *shape, uint64_t seed)
{
    sp_tensor x = sp_tensor_new(ndim, shape);
    tu_fill_uniform(x.data, x.numel, seed, 0, 1);
    return x;
}

/* Per layer: exactly round(amount · numel) entries of every weight are pruned, and they
 * are the smallest by magnitude; biases untouched. Global: the count over all weights,
 * and one threshold for all. */
Test(prune, magnitude_per_layer_and_global)
{
    sp_model *m = sp_zoo_lenet(1, 28);
    for (int scope = 0; scope < 2; scope++) {
        sp_model_init(m, 3);
        sp_pruning *p = sp_prune_magnitude(m, NULL, 0.8, scope ? SP_PRUNE_GLOBAL : SP_PRUNE_LAYER);
        int64_t kept_all = 0, all = 0;
        float max_pruned = 0, min_kept = INFINITY;
        for (int i = 0; i < m->nparams; i++) {
            sp_param *w = m->params[i];
            bool weight = strstr(w->name, ".weight") != NULL;
            cr_assert_eq(p->mask[i] != NULL, weight, "%s", w->name);
            cr_assert_eq(w->mask, p->mask[i]);
            if (!weight) continue;
            int64_t kept = sp_prune_kept(p, i);
            kept_all += kept;
            all += (int64_t)w->value.numel;
            if (!scope) cr_assert_eq((long long)w->value.numel - kept, llround(0.8 * (double)w->value.numel), "%s", w->name);
            for (size_t j = 0; j < w->value.numel; j++)
                if (p->mask[i][j] == 0.0f) cr_assert_eq(w->value.data[j], 0.0f, "pruned entries are 0");
        }
        if (scope) cr_assert_eq(all - kept_all, llround(0.8 * all));
        /* threshold property against the initial values */
        sp_model *ref = sp_zoo_lenet(1, 28);
        sp_model_init(ref, 3);
        for (int i = 0; i < m->nparams; i++) {
            if (!p->mask[i]) continue;
            float lmax = 0, lmin = INFINITY;
            for (size_t j = 0; j < m->params[i]->value.numel; j++) {
                float a = fabsf(ref->params[i]->value.data[j]);
                if (p->mask[i][j] == 0.0f) lmax = fmaxf(lmax, a);
                else lmin = fminf(lmin, a);
            }
            if (!scope) cr_assert_leq(lmax, lmin, "%s: a pruned weight larger than a kept one", m->params[i]->name);
            max_pruned = fmaxf(max_pruned, lmax);
            min_kept = fminf(min_kept, lmin);
        }
        if (scope) cr_assert_leq(max_pruned, min_kept, "global: one threshold for all layers");
        sp_model_free(ref);
        sp_prune_free(p);
        for (int i = 0; i < m->nparams; i++) cr_assert_null(m->params[i]->mask, "free detaches the masks");
    }
    sp_model_free(m);
}

/* Retraining keeps pruned weights at exactly 0 with every engine and optimizer, and the
 * kept weights do move. */
static void update_layer(void *ctx, sp_layer *l) { sp_optim_step_params(ctx, l->params, l->nparams); }

Test(prune, masks_stay_applied_with_every_engine)
{
    sp_set_threads(2);
    const char *engines[] = {"linear", "bppsa", "ooo"}, *optims[] = {"sgd", "adam"};
    sp_tensor x = input(4, (int[]){4, 1, 28, 28}, 5);
    int y[4] = {1, 7, 3, 0};
    for (int e = 0; e < 3; e++)
        for (int o = 0; o < 2; o++) {
            sp_model *m = sp_zoo_lenet(1, 28);
            sp_model_init(m, 9);
            sp_pruning *p = sp_prune_magnitude(m, NULL, 0.9, SP_PRUNE_GLOBAL);
            sp_engine *eng = sp_engine_create(engines[e], NULL);
            sp_optim_cfg cfg = sp_optim_cfg_default();
            cfg.lr = 0.05;
            cfg.momentum = 0.9;
            cfg.weight_decay = 1e-3;   /* decay must not revive pruned weights either */
            sp_optim *opt = sp_optim_create(optims[o], m->params, m->nparams, &cfg);
            if (e == 2) {
                eng->opts.update = update_layer;
                eng->opts.update_ctx = opt;
            }
            sp_tape t;
            sp_tape_init(&t);
            for (int s = 0; s < 6; s++) sp_train_step(m, eng, opt, &t, &x, y, NULL, NULL, NULL);
            int64_t moved = 0;
            for (int i = 0; i < m->nparams; i++) {
                if (!p->mask[i]) continue;
                for (size_t j = 0; j < m->params[i]->value.numel; j++)
                    if (p->mask[i][j] == 0.0f)
                        cr_assert_eq(m->params[i]->value.data[j], 0.0f, "%s/%s: %s[%zu] = %g after 6 steps",
                                     engines[e], optims[o], m->params[i]->name, j, m->params[i]->value.data[j]);
                    else
                        moved++;
            }
            cr_assert_gt(moved, 0);
            sp_tape_free(&t);
            sp_optim_free(opt);
            sp_engine_destroy(eng);
            sp_prune_free(p);
            sp_model_free(m);
        }
    sp_tensor_free(&x);
}

/* Checkpoints: torch.nn.utils.prune's names (weight_orig, weight_mask), read back into a
 * fresh model with the masks attached; a plain checkpoint still loads. */
Test(prune, checkpoint_uses_torch_names)
{
    const char *path = "test_prune_ck.safetensors";
    sp_model *m = sp_zoo_lenet(1, 28);
    sp_model_init(m, 4);
    sp_pruning *p = sp_prune_magnitude(m, NULL, 0.5, SP_PRUNE_LAYER);
    cr_assert_eq(sp_prune_save(p, m, path), SP_OK);
    sp_st_file *f = sp_st_open(path);
    cr_assert_not_null(f);
    cr_assert_not_null(sp_st_find(f, "conv1.weight_orig"));
    cr_assert_not_null(sp_st_find(f, "conv1.weight_mask"));
    cr_assert_null(sp_st_find(f, "conv1.weight"));
    cr_assert_not_null(sp_st_find(f, "conv1.bias"), "biases are not pruned: plain names");
    cr_assert_null(sp_st_find(f, "conv1.bias_mask"));
    cr_assert_eq(sp_st_count(f), m->nparams + 5, "5 pruned weights: one extra tensor each");
    sp_st_close(f);

    sp_model *q = sp_zoo_lenet(1, 28);
    sp_pruning *pq;
    cr_assert_eq(sp_prune_load(q, path, &pq), SP_OK);
    cr_assert_not_null(pq);
    for (int i = 0; i < m->nparams; i++) {
        cr_assert_eq(memcmp(q->params[i]->value.data, m->params[i]->value.data, m->params[i]->value.numel * 4), 0);
        cr_assert_eq(pq->mask[i] != NULL, p->mask[i] != NULL);
        if (p->mask[i]) {
            cr_assert_eq(memcmp(pq->mask[i], p->mask[i], m->params[i]->value.numel * 4), 0);
            cr_assert_eq(q->params[i]->mask, pq->mask[i]);
        }
    }
    /* a plain checkpoint: no masks */
    cr_assert_eq(sp_model_save(m, path), SP_OK);
    sp_model *r = sp_zoo_lenet(1, 28);
    sp_pruning *pr;
    cr_assert_eq(sp_prune_load(r, path, &pr), SP_OK);
    cr_assert_null(pr);
    /* a mask without its weight: one line, nothing loaded */
    sp_tensor mk = sp_tensor_view(p->mask[0], m->params[0]->value.ndim, m->params[0]->value.shape);
    const char *names[] = {"conv1.weight_mask"};
    const sp_tensor *ts[] = {&mk};
    cr_assert_eq(sp_st_save(path, 1, names, ts, NULL), SP_OK);
    cr_assert_eq(sp_prune_load(r, path, &pr), SP_ERR);
    cr_assert(strstr(sp_last_error(), "conv1.weight_mask without conv1.weight_orig"), "%s", sp_last_error());
    remove(path);
    sp_prune_free(pq);
    sp_prune_free(p);
    sp_model_free(r);
    sp_model_free(q);
    sp_model_free(m);
}

/* The pruned Jᵀ patterns: linear BP's FLOPs in the plan are Σ 2·nnz(Jᵀ) over the links
 * it reads, so pruning fc2 and conv2 must lower them by exactly 2 × the Jᵀ entries of the
 * pruned weights: one per weight for a linear layer, one per (output position whose
 * window sees the input) for a conv weight. */
static int valid_positions(int size, int k, int pad, int out)   /* outputs y with 0 <= y + k - pad < size */
{
    int c = 0;
    for (int y = 0; y < out; y++) c += y + k - pad >= 0 && y + k - pad < size;
    return c;
}

static double linear_flops(sp_model *m, const sp_tensor *x, const int *y)
{
    sp_engine *e = sp_engine_create("bppsa", NULL);
    sp_tape t;
    sp_tape_init(&t);
    sp_backward(e, &t, sp_model_loss(m, &t, x, y));
    sp_bppsa_stats st;
    cr_assert(sp_bppsa_stats_get(e, &st));
    sp_tape_free(&t);
    sp_engine_destroy(e);
    return st.linear_flops;
}

Test(prune, pruned_jt_patterns_have_the_expected_nnz)
{
    sp_set_threads(2);
    /* conv1 (first op: its Jᵀ is never read) relu conv2 relu flatten fc1 tanh fc2 */
    sp_model *m = sp_model_new("small");
    sp_model_set_loss(m, sp_softmax_ce());
    sp_model_add(m, sp_conv2d("conv1", 1, 3, 3, 1, 1));
    sp_model_add(m, sp_relu());
    sp_model_add(m, sp_conv2d("conv2", 3, 4, 3, 1, 1));
    sp_model_add(m, sp_relu());
    sp_model_add(m, sp_flatten());
    sp_model_add(m, sp_linear("fc1", 4 * 6 * 6, 20));
    sp_model_add(m, sp_tanh());
    sp_model_add(m, sp_linear("fc2", 20, 5));
    sp_model_init(m, 2);
    sp_tensor x = input(4, (int[]){2, 1, 6, 6}, 3);
    int y[2] = {1, 4};
    double dense = linear_flops(m, &x, y);
    sp_pruning *p = sp_prune_magnitude(m, NULL, 0.9, SP_PRUNE_LAYER);
    double pruned = linear_flops(m, &x, y);
    double removed = 0;
    for (int i = 0; i < m->nparams; i++) {
        const sp_param *w = m->params[i];
        if (!p->mask[i] || strcmp(w->name, "conv1.weight") == 0) continue;
        bool conv = w->value.ndim == 4;
        for (size_t j = 0; j < w->value.numel; j++) {
            if (p->mask[i][j] != 0.0f) continue;
            if (!conv) {
                removed += 1;
                continue;
            }
            int kw = (int)(j % 3), kh = (int)(j / 3 % 3);
            removed += valid_positions(6, kh, 1, 6) * valid_positions(6, kw, 1, 6);
        }
    }
    cr_assert_float_eq(dense - pruned, 2 * removed, 1e-6, "dense %g, pruned %g: expected %g fewer", dense, pruned,
                       2 * removed);
    cr_assert_gt(removed, 0);
    sp_prune_free(p);
    sp_tensor_free(&x);
    sp_model_free(m);
}

/* ---- PyTorch: torch.nn.utils.prune's checkpoints, both ways (tests/parity/prune.py) --- */
#include <stdlib.h>
#include <sys/wait.h>

#define PY "/usr/bin/python3"

static const char *parity_script(char *buf, size_t len)
{
    const char *src = __FILE__, *slash = strrchr(src, '/');
    snprintf(buf, len, "%.*sparity/prune.py", slash ? (int)(slash - src + 1) : 0, src);
    return buf;
}

static int sh(const char *cmd)
{
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static float *read_f32(const char *path, const char *name, int ndim, const int *shape)
{
    sp_st_file *f = sp_st_open(path);
    cr_assert_not_null(f, "%s: %s", path, sp_last_error());
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    float *v = malloc(n * sizeof *v);
    cr_assert_eq(sp_st_read_f32(f, name, v, ndim, shape), SP_OK, "%s", sp_last_error());
    sp_st_close(f);
    return v;
}

Test(prune, torch_checkpoints_both_ways, .timeout = 300)
{
    char dir[] = "/tmp/sp_prune_XXXXXX", cmd[2048], sc[512], path[512];
    if (access(PY, X_OK) != 0) {
        cr_log_warn("skipped: %s not found (apt-get install python3-torch)", PY);
        return;
    }
    cr_assert_not_null(mkdtemp(dir));
    snprintf(cmd, sizeof cmd, "%s %s %s", PY, parity_script(sc, sizeof sc), dir);
    int st = sh(cmd);
    if (st == 77) {
        cr_log_warn("skipped: %s cannot import torch", PY);
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        sh(cmd);
        return;
    }
    cr_assert_eq(st, 0, "%s", cmd);
    sp_set_threads(2);
    const char *engines[] = {"linear", "bppsa"};
    for (int e = 0; e < 2; e++) {
        /* torch's pruned state_dict (weight_orig holds the unpruned values) into scanprop */
        sp_model *m = sp_zoo_lenet(1, 28);
        sp_pruning *p;
        snprintf(path, sizeof path, "%s/pruned.safetensors", dir);
        cr_assert_eq(sp_prune_load(m, path, &p), SP_OK, "%s", sp_last_error());
        cr_assert_not_null(p);
        int64_t kept = 0, all = 0;
        for (int i = 0; i < m->nparams; i++)
            if (p->mask[i]) kept += sp_prune_kept(p, i), all += (int64_t)m->params[i]->value.numel;
        cr_assert_eq(all - kept, llround(0.9 * all), "torch pruned 90%% of the weights");
        snprintf(path, sizeof path, "%s/data.safetensors", dir);
        float *x = read_f32(path, "x", 4, (int[]){8, 1, 28, 28});
        sp_st_file *f = sp_st_open(path);
        int32_t y[8];
        cr_assert_eq(sp_st_read_i32(f, "y", y, 1, (int[]){8}), SP_OK);
        sp_st_close(f);
        sp_tensor xt = sp_tensor_view(x, 4, (int[]){8, 1, 28, 28});
        sp_engine *eng = sp_engine_create(engines[e], NULL);
        sp_optim_cfg cfg = sp_optim_cfg_default();
        cfg.lr = 0.05;
        cfg.momentum = 0.9;
        sp_optim *opt = sp_optim_create("sgd", m->params, m->nparams, &cfg);
        sp_tape t;
        sp_tape_init(&t);
        for (int s = 0; s < 5; s++) sp_train_step(m, eng, opt, &t, &xt, y, NULL, NULL, NULL);
        /* the effective weights after 5 steps: torch's weight_orig * weight_mask */
        snprintf(path, sizeof path, "%s/expected.safetensors", dir);
        for (int i = 0; i < m->nparams; i++) {
            const sp_param *w = m->params[i];
            float *want = read_f32(path, w->name, w->value.ndim, w->value.shape);
            double worst = 0, scale = 1;
            for (size_t j = 0; j < w->value.numel; j++) scale = fmax(scale, fabs(want[j]));
            size_t wj = 0;
            for (size_t j = 0; j < w->value.numel; j++) {
                double d = fabs(w->value.data[j] - want[j]) / scale;
                if (d > worst) worst = d, wj = j;
            }
            cr_assert_lt(worst, 1e-4, "%s: %s differs from torch's by %.2e at %zu after 5 pruned SGD steps",
                         engines[e], w->name, worst, wj);
            free(want);
        }
        /* and scanprop's checkpoint into torch (prune.identity + load_state_dict): same logits */
        snprintf(path, sizeof path, "%s/ours.safetensors", dir);
        cr_assert_eq(sp_prune_save(p, m, path), SP_OK);
        snprintf(cmd, sizeof cmd, "%s %s %s --check %s", PY, sc, dir, path);
        cr_assert_eq(sh(cmd), 0, "%s", cmd);
        sp_tape_reset(&t);
        sp_node *l = sp_model_loss(m, &t, &xt, y);
        const sp_tensor *z = sp_node_x(l);
        snprintf(path, sizeof path, "%s/logits.safetensors", dir);
        float *want = read_f32(path, "logits", 2, (int[]){8, 10});
        for (int j = 0; j < 80; j++)
            cr_assert_float_eq(z->data[j], want[j], 1e-4 * fmax(1, fabs(want[j])), "logit %d: ours %g, torch %g", j,
                               z->data[j], want[j]);
        free(want);
        sp_tape_free(&t);
        sp_optim_free(opt);
        sp_engine_destroy(eng);
        sp_prune_free(p);
        sp_model_free(m);
        free(x);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    sh(cmd);
}

/* --plan with --prune prints the FLOPs of every level for the dense network next to the
 * pruned one (the paper's Figure 10): each column sums to its own plan's total (the dense
 * one made by a --plan run without --prune), and no pruned level costs more than dense. */
static double json_field(const char *s, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(s, pat);
    cr_assert_not_null(p, "no %s in %s", key, s);
    return strtod(p + strlen(pat), NULL);
}

Test(prune, plan_prints_dense_next_to_pruned_per_level, .timeout = 300)
{
    static char out[1 << 16], dense[1 << 16];
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s --backward bppsa --plan --batch 1", tu_bin("lenet"));
    cr_assert_eq(tu_run(cmd, dense, sizeof dense, NULL, 0), 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "%s --backward bppsa --plan --batch 1 --prune 0.97", tu_bin("lenet"));
    cr_assert_eq(tu_run(cmd, out, sizeof out, NULL, 0), 0, "%s", cmd);
    const char *t = strstr(out, "FLOP per sample per level, dense vs pruned");
    cr_assert_not_null(t, "no per-level table: %s", out);
    t = strchr(strchr(t, '\n') + 1, '\n') + 1;   /* past the title and the column header */
    double sum_d = 0, sum_p = 0;
    int levels = 0, lv;
    double d, p, dc, pc;
    int used;
    while (sscanf(t, "%d %lf %lf %lf %lf%n", &lv, &d, &p, &dc, &pc, &used) == 5) {
        cr_assert_eq(lv, levels, "levels in order");
        cr_assert_leq(p, d, "level %d: pruned %g FLOP > dense %g", lv, p, d);
        cr_assert_leq(dc, d);
        cr_assert_leq(pc, p);
        sum_d += d, sum_p += p, levels++;
        t = strchr(t + used, '\n');
        if (!t) break;
        t++;
    }
    cr_assert_gt(levels, 3);
    const char *jd = strrchr(dense, '{'), *jp = strrchr(out, '{');
    double want_d = json_field(jd, "flops_per_sample"), want_p = json_field(jp, "flops_per_sample");
    cr_assert_lt(fabs(sum_d - want_d), 1e-9 * want_d + 1, "dense column sums to %.0f, the dense plan has %.0f", sum_d,
                 want_d);
    cr_assert_lt(fabs(sum_p - want_p), 1e-9 * want_p + 1, "pruned column sums to %.0f, the plan has %.0f", sum_p, want_p);
    cr_assert_lt(sum_p, 0.2 * sum_d, "97%% pruning: the scan's work falls (%.0f vs %.0f)", sum_p, sum_d);
}
