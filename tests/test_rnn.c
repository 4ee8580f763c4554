/* test_rnn.c — the rnn and gru ops: δ and G against finite differences, forward and
 * backward against PyTorch (tests/ref/rnn_ref.h, gru_ref.h from tests/gen_rnn_ref.py, float64
 * reference), the time chain (Jᵀ_t against finite differences of a float64 cell, and
 * the chain + chain_backward_params reproducing BPTT), δ and G on two threads at once,
 * and shape errors. Tolerances: gradcheck 5e-3 of the largest entry (float32 forward,
 * eps 1e-2); everything else 1e-5 relative (max |a − b| / max(1, max |b|)). */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "core/tape.h"
#include "layers/layers.h"
#include "layers/recurrent.h"
#include "tests/ref/gru_ref.h"
#include "tests/ref/rnn_ref.h"
#include "tests/testutil.h"

#define GC_TOL 5e-3
#define REF_TOL 1e-5

typedef sp_layer *(*ctor_fn)(const char *, int, int, sp_seq_output);

/* ---------------------------------------------------------------- gradcheck */

static void gradcheck(ctor_fn ctor, sp_seq_output mode, int B, int T, int C, int H, uint64_t seed)
{
    sp_layer *l = ctor("rec", C, H, mode);
    tu_gc_opts o = {.max_checks = 48};
    tu_gc_result r = tu_gradcheck(l, 3, (int[]){B, T, C}, seed, &o);
    cr_assert_lt(r.err_dx, GC_TOL, "%s mode %d [%d,%d,%d] H %d δ: err %.2e", l->op->name, mode, B, T, C, H, r.err_dx);
    cr_assert_gt(r.max_abs_dx, 0.0, "%s δ is all zeros", l->op->name);
    for (int p = 0; p < r.nparams; p++)
        cr_assert_lt(r.err_param[p], GC_TOL, "%s mode %d G of %s: err %.2e", l->op->name, mode, l->params[p]->name,
                     r.err_param[p]);
    sp_layer_free(l);
}

static const int GC_SIZES[][4] = {{3, 4, 5, 7}, {2, 6, 1, 3}, {1, 1, 2, 4}};   /* B, T, C, H */

Test(gradcheck, rnn)
{
    for (int m = 0; m < 2; m++)
        for (int i = 0; i < 3; i++)
            gradcheck(sp_rnn, (sp_seq_output)m, GC_SIZES[i][0], GC_SIZES[i][1], GC_SIZES[i][2], GC_SIZES[i][3],
                      10 + i);
}

Test(gradcheck, gru)
{
    for (int m = 0; m < 2; m++)
        for (int i = 0; i < 3; i++)
            gradcheck(sp_gru, (sp_seq_output)m, GC_SIZES[i][0], GC_SIZES[i][1], GC_SIZES[i][2], GC_SIZES[i][3],
                      20 + i);
}

/* ---------------------------------------------------------------- PyTorch */

typedef struct ref_case {
    ctor_fn ctor;
    int B, T, C, H;
    const float *w[4], *x, *dy_all, *dy_last, *output, *h_n;
    const float *dx_all, *dx_last, *g_all[4], *g_last[4];
} ref_case;

#define REF_CASE(P, U, ctor)                                                                               \
    (ref_case)                                                                                             \
    {                                                                                                      \
        ctor, U##_B, U##_T, U##_C, U##_H, {P##_weight_ih_l0, P##_weight_hh_l0, P##_bias_ih_l0, P##_bias_hh_l0}, \
            P##_x, P##_dy_all, P##_dy_last, P##_output, P##_h_n, P##_dx_all, P##_dx_last,                  \
            {P##_dweight_ih_l0_all, P##_dweight_hh_l0_all, P##_dbias_ih_l0_all, P##_dbias_hh_l0_all},      \
            {P##_dweight_ih_l0_last, P##_dweight_hh_l0_last, P##_dbias_ih_l0_last, P##_dbias_hh_l0_last}    \
    }

static void check_close(const float *got, const float *want, size_t n, const char *what)
{
    double err = tu_max_rel_diff(got, want, n);
    cr_assert_lt(err, REF_TOL, "%s: err %.2e", what, err);
}

/* input_first: call δ before G (engines may use either order). */
static void check_against_pytorch(const ref_case *c, sp_seq_output mode, bool input_first)
{
    sp_layer *l = c->ctor("rec", c->C, c->H, mode);
    for (int p = 0; p < 4; p++) {
        memcpy(l->params[p]->value.data, c->w[p], l->params[p]->value.numel * sizeof(float));
        sp_tensor_zero(&l->params[p]->grad);
    }
    sp_tensor x = sp_tensor_new(3, (int[]){c->B, c->T, c->C});
    memcpy(x.data, c->x, x.numel * sizeof(float));
    sp_tape t;
    sp_tape_init(&t);
    sp_node *y = sp_apply(&t, l, sp_tape_input(&t, &x));
    bool all = mode == SP_SEQ_ALL;
    check_close(y->out.data, all ? c->output : c->h_n, y->out.numel, all ? "output" : "h_n");

    sp_tensor dy = sp_tape_tensor_like(&t, &y->out);
    memcpy(dy.data, all ? c->dy_all : c->dy_last, dy.numel * sizeof(float));
    sp_tensor dx = sp_tensor_new(3, (int[]){c->B, c->T, c->C});
    if (input_first) y->kern->backward_input(y, 0, &dy, &dx);
    y->kern->backward_params(y, &dy);
    if (!input_first) y->kern->backward_input(y, 0, &dy, &dx);
    check_close(dx.data, all ? c->dx_all : c->dx_last, dx.numel, "dx");
    for (int p = 0; p < 4; p++)
        check_close(l->params[p]->grad.data, all ? c->g_all[p] : c->g_last[p], l->params[p]->grad.numel,
                    l->params[p]->name);
    sp_tensor_free(&dx);
    sp_tensor_free(&x);
    sp_tape_free(&t);
    sp_layer_free(l);
}

Test(pytorch, rnn)
{
    ref_case c = REF_CASE(rnn_ref, RNN_REF, sp_rnn);
    check_against_pytorch(&c, SP_SEQ_ALL, false);
    check_against_pytorch(&c, SP_SEQ_LAST, true);
}

Test(pytorch, gru)
{
    ref_case c = REF_CASE(gru_ref, GRU_REF, sp_gru);
    check_against_pytorch(&c, SP_SEQ_ALL, true);
    check_against_pytorch(&c, SP_SEQ_LAST, false);
}

/* ---------------------------------------------------------------- time chain */

/* One step of each cell in float64, straight from the PyTorch equations. */
static void rnn_cell_f64(const sp_layer *l, int C, int H, const float *x, const double *h, double *out)
{
    const float *Wi = l->params[0]->value.data, *Wh = l->params[1]->value.data;
    const float *bi = l->params[2]->value.data, *bh = l->params[3]->value.data;
    for (int j = 0; j < H; j++) {
        double a = (double)bi[j] + bh[j];
        for (int k = 0; k < C; k++) a += (double)Wi[j * C + k] * x[k];
        for (int k = 0; k < H; k++) a += (double)Wh[j * H + k] * h[k];
        out[j] = tanh(a);
    }
}

static void gru_cell_f64(const sp_layer *l, int C, int H, const float *x, const double *h, double *out)
{
    const float *Wi = l->params[0]->value.data, *Wh = l->params[1]->value.data;
    const float *bi = l->params[2]->value.data, *bh = l->params[3]->value.data;
    for (int j = 0; j < H; j++) {
        double gi[3], gh[3];   /* r, z, n rows j, H + j, 2H + j */
        for (int g = 0; g < 3; g++) {
            int row = g * H + j;
            gi[g] = bi[row];
            gh[g] = bh[row];
            for (int k = 0; k < C; k++) gi[g] += (double)Wi[row * C + k] * x[k];
            for (int k = 0; k < H; k++) gh[g] += (double)Wh[row * H + k] * h[k];
        }
        double r = 1 / (1 + exp(-(gi[0] + gh[0]))), z = 1 / (1 + exp(-(gi[1] + gh[1])));
        double n = tanh(gi[2] + r * gh[2]);
        out[j] = (1 - z) * n + z * h[j];
    }
}

typedef void (*cell_fn)(const sp_layer *, int, int, const float *, const double *, double *);

/* Jᵀ_t from chain_jt against central differences of the float64 cell at the saved
 * h_{t-1}; also the float64 cell reproduces the op's h_t. */
static void check_chain_jt(ctor_fn ctor, cell_fn cell, uint64_t seed)
{
    enum { B = 3, T = 6, C = 5, H = 7 };
    sp_layer *l = ctor("rec", C, H, SP_SEQ_ALL);
    sp_rng r;
    sp_rng_seed(&r, seed);
    l->op->init_params(l, &r);
    sp_tensor x = sp_tensor_new(3, (int[]){B, T, C});
    tu_fill_uniform(x.data, x.numel, seed + 1, -1.5f, 1.5f);
    sp_tape tp;
    sp_tape_init(&tp);
    sp_node *y = sp_apply(&tp, l, sp_tape_input(&tp, &x));
    cr_assert_eq(y->op->chain_len(y), T);

    double hprev[H], hp[H], hm[H], h[H], eps = 1e-4, worst = 0, worst_h = 0;
    float jt[H * H];
    for (int b = 0; b < B; b++)
        for (int t = 1; t <= T; t++) {
            const float *xt = x.data + ((size_t)b * T + t - 1) * C;
            for (int i = 0; i < H; i++) hprev[i] = t > 1 ? y->out.data[((size_t)b * T + t - 2) * H + i] : 0.0;
            cell(l, C, H, xt, hprev, h);
            for (int j = 0; j < H; j++)
                worst_h = fmax(worst_h, fabs(h[j] - y->out.data[((size_t)b * T + t - 1) * H + j]));
            y->kern->chain_jt(y, b, t, jt);
            for (int i = 0; i < H; i++) {
                double keep = hprev[i];
                hprev[i] = keep + eps;
                cell(l, C, H, xt, hprev, hp);
                hprev[i] = keep - eps;
                cell(l, C, H, xt, hprev, hm);
                hprev[i] = keep;
                for (int j = 0; j < H; j++) worst = fmax(worst, fabs(jt[i * H + j] - (hp[j] - hm[j]) / (2 * eps)));
            }
        }
    cr_assert_lt(worst_h, REF_TOL, "%s forward vs float64 cell: err %.2e", l->op->name, worst_h);
    cr_assert_lt(worst, REF_TOL, "%s Jᵀ_t vs finite differences: err %.2e", l->op->name, worst);
    sp_tensor_free(&x);
    sp_tape_free(&tp);
    sp_layer_free(l);
}

Test(chain, rnn_jt_matches_finite_differences) { check_chain_jt(sp_rnn, rnn_cell_f64, 31); }
Test(chain, gru_jt_matches_finite_differences) { check_chain_jt(sp_gru, gru_cell_f64, 32); }

/* ∇h_{t-1} = Jᵀ_t ∇h_t + dy_{t-1} from ∇h_T = dy_T, then chain_backward_params: the same
 * pre-activation gradients as BPTT (compared in the saved da) and the same G. */
static void check_chain_reproduces_bptt(ctor_fn ctor, sp_seq_output mode, uint64_t seed)
{
    enum { B = 3, T = 7, C = 5, H = 6 };
    sp_layer *l = ctor("rec", C, H, mode);
    sp_rng r;
    sp_rng_seed(&r, seed);
    l->op->init_params(l, &r);
    sp_tensor x = sp_tensor_new(3, (int[]){B, T, C});
    tu_fill_uniform(x.data, x.numel, seed + 1, -1, 1);
    sp_tape tp;
    sp_tape_init(&tp);
    sp_node *y = sp_apply(&tp, l, sp_tape_input(&tp, &x));
    sp_tensor dy = sp_tape_tensor_like(&tp, &y->out);
    tu_fill_uniform(dy.data, dy.numel, seed + 2, -1, 1);

    for (int p = 0; p < 4; p++) sp_tensor_zero(&l->params[p]->grad);
    y->kern->backward_params(y, &dy);
    float *g_bptt[4];
    for (int p = 0; p < 4; p++) {
        g_bptt[p] = malloc(l->params[p]->grad.numel * sizeof(float));
        memcpy(g_bptt[p], l->params[p]->grad.data, l->params[p]->grad.numel * sizeof(float));
        sp_tensor_zero(&l->params[p]->grad);
    }

    float dh[B * T * H], jt[H * H];
    for (int b = 0; b < B; b++) {
        float *d = dh + (size_t)b * T * H;
        for (int t = T; t >= 1; t--) {   /* d[t-1] = ∇h_t */
            for (int j = 0; j < H; j++)
                d[(t - 1) * H + j] = mode == SP_SEQ_ALL ? dy.data[((size_t)b * T + t - 1) * H + j]
                                                        : (t == T ? dy.data[b * H + j] : 0.0f);
            if (t == T) continue;
            y->kern->chain_jt(y, b, t + 1, jt);
            for (int i = 0; i < H; i++)
                for (int j = 0; j < H; j++) d[(t - 1) * H + i] += jt[i * H + j] * d[t * H + j];
        }
    }
    sp_tensor dht = sp_tensor_view(dh, 3, (int[]){B, T, H});
    y->kern->chain_backward_params(y, &dht);

    const sp_recurrent_saved *s = SP_REC_SAVED(y);
    check_close(s->chain_da, s->da, (size_t)B * T * SP_REC(y)->da_width, "pre-activation grads");
    for (int p = 0; p < 4; p++)
        check_close(l->params[p]->grad.data, g_bptt[p], l->params[p]->grad.numel, l->params[p]->name);

    /* chain_backward_params_range over the steps split as the scan across ranks splits
     * them (the first range holds step 1, whose W_hh term is zero; the others start
     * mid-sequence): each range sees only its own ∇h, and the sums are G again. */
    for (int p = 0; p < 4; p++) sp_tensor_zero(&l->params[p]->grad);
    const int cut[] = {0, 2, 5, T};
    for (int k = 0; k < 3; k++) {
        int t0 = cut[k], len = cut[k + 1] - cut[k];
        float part[B * T * H];
        for (size_t i = 0; i < sizeof part / sizeof *part; i++) part[i] = NAN;   /* unread */
        for (int b = 0; b < B; b++)
            memcpy(part + (size_t)b * len * H, dh + ((size_t)b * T + t0) * H, sizeof(float) * (size_t)len * H);
        sp_tensor pt = sp_tensor_view(part, 3, (int[]){B, len, H});
        y->kern->chain_backward_params_range(y, &pt, t0, t0 + len);
    }
    for (int p = 0; p < 4; p++) {
        check_close(l->params[p]->grad.data, g_bptt[p], l->params[p]->grad.numel, l->params[p]->name);
        free(g_bptt[p]);
    }
    sp_tensor_free(&x);
    sp_tape_free(&tp);
    sp_layer_free(l);
}

Test(chain, rnn_reproduces_bptt)
{
    check_chain_reproduces_bptt(sp_rnn, SP_SEQ_ALL, 41);
    check_chain_reproduces_bptt(sp_rnn, SP_SEQ_LAST, 42);
}

Test(chain, gru_reproduces_bptt)
{
    check_chain_reproduces_bptt(sp_gru, SP_SEQ_ALL, 43);
    check_chain_reproduces_bptt(sp_gru, SP_SEQ_LAST, 44);
}

/* ---------------------------------------------------------------- δ ∥ G */

typedef struct bw_job { sp_node *n; sp_tensor *dy, *dx; } bw_job;

static void *run_params(void *p)
{
    bw_job *j = p;
    j->n->kern->backward_params(j->n, j->dy);
    return NULL;
}

static void *run_input(void *p)
{
    bw_job *j = p;
    j->n->kern->backward_input(j->n, 0, j->dy, j->dx);
    return NULL;
}

/* Grads of one fresh forward + backward, δ and G sequential or on two threads. */
static void backward_once(sp_layer *l, const sp_tensor *x, const float *dyv, bool threads, float *dx_out,
                          float **g_out)
{
    sp_tape tp;
    sp_tape_init(&tp);
    sp_node *y = sp_apply(&tp, l, sp_tape_input(&tp, x));
    sp_tensor dy = sp_tape_tensor_like(&tp, &y->out);
    memcpy(dy.data, dyv, dy.numel * sizeof(float));
    sp_tensor dx = sp_tensor_view(dx_out, 3, x->shape);
    for (int p = 0; p < 4; p++) sp_tensor_zero(&l->params[p]->grad);
    bw_job job = {y, &dy, &dx};
    if (threads) {
        pthread_t a, b;
        pthread_create(&a, NULL, run_params, &job);
        pthread_create(&b, NULL, run_input, &job);
        pthread_join(a, NULL);
        pthread_join(b, NULL);
    } else {
        run_params(&job);
        run_input(&job);
    }
    for (int p = 0; p < 4; p++)
        memcpy(g_out[p], l->params[p]->grad.data, l->params[p]->grad.numel * sizeof(float));
    sp_tape_free(&tp);
}

static void check_concurrent(ctor_fn ctor)
{
    enum { B = 4, T = 60, C = 3, H = 9, GH = 3 * H };
    sp_layer *l = ctor("rec", C, H, SP_SEQ_ALL);
    sp_rng r;
    sp_rng_seed(&r, 51);
    l->op->init_params(l, &r);
    sp_tensor x = sp_tensor_new(3, (int[]){B, T, C});
    tu_fill_uniform(x.data, x.numel, 52, -1, 1);
    static float dyv[B * T * H], dx0[B * T * C], dx1[B * T * C], g0[4][GH * H], g1[4][GH * H];
    tu_fill_uniform(dyv, B * T * H, 53, -1, 1);
    float *p0[4] = {g0[0], g0[1], g0[2], g0[3]}, *p1[4] = {g1[0], g1[1], g1[2], g1[3]};
    backward_once(l, &x, dyv, false, dx0, p0);
    for (int rep = 0; rep < 20; rep++) {
        backward_once(l, &x, dyv, true, dx1, p1);
        cr_assert(memcmp(dx0, dx1, sizeof dx0) == 0, "%s δ differs on two threads (rep %d)", l->op->name, rep);
        for (int p = 0; p < 4; p++)
            cr_assert(memcmp(g0[p], g1[p], l->params[p]->grad.numel * sizeof(float)) == 0,
                      "%s G of %s differs on two threads (rep %d)", l->op->name, l->params[p]->name, rep);
    }
    sp_tensor_free(&x);
    sp_layer_free(l);
}

Test(threads, rnn_input_and_params_concurrently) { check_concurrent(sp_rnn); }
Test(threads, gru_input_and_params_concurrently) { check_concurrent(sp_gru); }

/* A second backward pass over the same node (same dy buffer, new contents) must not
 * reuse the first pass's BPTT. */
Test(backward, second_pass_recomputes)
{
    enum { B = 2, T = 5, C = 3, H = 4 };
    sp_layer *l = sp_gru("gru", C, H, SP_SEQ_LAST);
    sp_rng r;
    sp_rng_seed(&r, 61);
    l->op->init_params(l, &r);
    sp_tensor x = sp_tensor_new(3, (int[]){B, T, C});
    tu_fill_uniform(x.data, x.numel, 62, -1, 1);
    float dyv[B * H], want[3 * H * H];
    tu_fill_uniform(dyv, B * H, 63, -1, 1);
    sp_tape tp;
    sp_tape_init(&tp);
    sp_node *y = sp_apply(&tp, l, sp_tape_input(&tp, &x));
    sp_tensor dy = sp_tensor_view(dyv, 2, (int[]){B, H});
    sp_tensor_zero(&l->params[1]->grad);
    y->kern->backward_params(y, &dy);
    memcpy(want, l->params[1]->grad.data, sizeof want);
    for (int i = 0; i < B * H; i++) dyv[i] *= 2.0f;   /* grads are linear in dy */
    sp_tensor_zero(&l->params[1]->grad);
    y->kern->backward_params(y, &dy);
    for (int i = 0; i < 3 * H * H; i++) want[i] *= 2.0f;
    check_close(l->params[1]->grad.data, want, 3 * H * H, "second pass dW_hh");
    sp_tensor_free(&x);
    sp_tape_free(&tp);
    sp_layer_free(l);
}

/* Steady state: after the arena has grown once, a forward + backward step mallocs nothing. */
Test(backward, steady_state_no_malloc)
{
    sp_layer *l = sp_gru("gru", 3, 5, SP_SEQ_ALL);
    sp_tensor x = sp_tensor_new(3, (int[]){2, 9, 3});
    tu_fill_uniform(x.data, x.numel, 71, -1, 1);
    sp_tape tp;
    sp_tape_init(&tp);
    size_t mallocs = 0;
    for (int step = 0; step < 3; step++) {
        if (step == 2) mallocs = tp.arena.nmallocs;
        sp_node *y = sp_apply(&tp, l, sp_tape_input(&tp, &x));
        sp_tensor dy = sp_tape_tensor_like(&tp, &y->out), dx = sp_tape_tensor_like(&tp, &x);
        tu_fill_uniform(dy.data, dy.numel, 72, -1, 1);
        y->kern->backward_params(y, &dy);
        y->kern->backward_input(y, 0, &dy, &dx);
        sp_tape_reset(&tp);
    }
    cr_assert_eq(tp.arena.nmallocs, mallocs, "arena allocated in a steady-state step");
    sp_tensor_free(&x);
    sp_tape_free(&tp);
    sp_layer_free(l);
}

/* ---------------------------------------------------------------- pieces */

Test(pointwise, fast_tanh_accuracy)
{
    double worst_abs = 0, worst_rel = 0;
    for (float v = -12.0f; v < 12.0f; v += 3.1e-4f) {
        double want = tanh((double)v), got = sp_rec_tanh(v);
        worst_abs = fmax(worst_abs, fabs(got - want));
        if (want != 0) worst_rel = fmax(worst_rel, fabs(got - want) / fabs(want));
    }
    cr_assert_lt(worst_abs, 2e-7, "abs err %.2e", worst_abs);
    cr_assert_lt(worst_rel, 3e-6, "rel err %.2e", worst_rel);
    cr_assert_eq(sp_rec_tanh(0.0f), 0.0f);
    cr_assert_eq(sp_rec_tanh(100.0f), 1.0f);
}

Test(pointwise, vectorisable_exp_and_sigmoid_accuracy)
{
    double worst = 0, worst_sig = 0;
    for (float v = -87.0f; v < 88.0f; v += 1.7e-3f) {
        double want = exp((double)v), got = sp_rec_expf(v);
        worst = fmax(worst, fabs(got - want) / want);
        double s = 1.0 / (1.0 + exp(-(double)v)), gs = sp_rec_sigmoid(v);
        if (s > 1e-30) worst_sig = fmax(worst_sig, fabs(gs - s) / s);
    }
    cr_assert_lt(worst, 3e-7, "exp rel err %.2e", worst);
    cr_assert_lt(worst_sig, 5e-7, "sigmoid rel err %.2e", worst_sig);
    cr_assert_eq(sp_rec_expf(0.0f), 1.0f);
    cr_assert(isnan(sp_rec_expf(NAN)) && isnan(sp_rec_tanh(NAN)) && isnan(sp_rec_sigmoid(NAN)), "NaN must stay NaN");
    cr_assert(isfinite(sp_rec_expf(1e30f)) && sp_rec_expf(-1e30f) >= 0.0f, "clamped, not inf");
    cr_assert_lt(sp_rec_sigmoid(-1e30f), 1e-38f);
    cr_assert_eq(sp_rec_sigmoid(1e30f), 1.0f);
}

Test(shapes, shape_only_cost)
{
    sp_layer *l = sp_gru("gru", 12, 20, SP_SEQ_LAST);
    sp_tape tp;
    sp_tape_init(&tp);
    tp.shape_only = true;
    sp_tensor x = sp_tensor_view(NULL, 3, (int[]){16, 1034, 12});
    sp_node *y = sp_apply(&tp, l, sp_tape_input(&tp, &x));
    cr_assert_eq(y->out.ndim, 2);
    cr_assert_eq(y->out.shape[1], 20);
    sp_cost c = y->op->cost(y);
    cr_assert_gt(c.fwd_flops, 2.0 * 16 * 1034 * 60 * (12 + 20));
    cr_assert_gt(c.saved_bytes, 0);
    sp_tape_free(&tp);
    sp_layer_free(l);
}

/* A shape the layer refuses: sp_apply returns NULL naming it (core/tape.h), no exit. */
static void apply_shape(ctor_fn ctor, int ndim, const int *shape, const char *says)
{
    sp_layer *l = ctor("rec", 4, 6, SP_SEQ_LAST);
    sp_tensor x = sp_tensor_new(ndim, shape);
    sp_tape tp;
    sp_tape_init(&tp);
    sp_clear_error();
    tu_refused(!sp_apply(&tp, l, sp_tape_input(&tp, &x)), says);
    sp_tape_free(&tp);
    sp_tensor_free(&x);
    sp_layer_free(l);
}

Test(shapes, rnn_x_not_3d) { apply_shape(sp_rnn, 2, (int[]){3, 4}, "rnn rec: input [3, 4], expected [B, T, 4]"); }
Test(shapes, rnn_c_mismatch) { apply_shape(sp_rnn, 3, (int[]){3, 5, 7}, "rnn rec: input [3, 5, 7], expected [B, T, 4]"); }
Test(shapes, gru_x_not_3d) { apply_shape(sp_gru, 4, (int[]){1, 3, 5, 4}, "gru rec: input [1, 3, 5, 4], expected [B, T, 4]"); }
Test(shapes, gru_c_mismatch) { apply_shape(sp_gru, 3, (int[]){2, 5, 3}, "gru rec: input [2, 5, 3], expected [B, T, 4]"); }
Test(shapes, bad_hidden) { tu_refused(!sp_rnn("rnn", 4, 0, SP_SEQ_LAST), "rnn rnn: input 4, hidden 0 (expected positive)"); }
