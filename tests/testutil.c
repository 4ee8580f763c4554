/* testutil.c — finite-difference gradient checking and small fixtures. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/error.h"
#include "core/rng.h"
#include "tests/testutil.h"

void tu_fill_uniform(float *x, size_t n, uint64_t seed, float lo, float hi)
{
    sp_rng r;
    sp_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) x[i] = sp_rng_uniform_range(&r, lo, hi);
}

double tu_max_rel_diff(const float *a, const float *b, size_t n)
{
    double scale = 1.0, worst = 0.0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)b[i]));
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)a[i] - (double)b[i]));
    return worst / scale;
}

const char *tu_tmpdir(void)
{
    static char path[64];
    if (!path[0]) {
        snprintf(path, sizeof path, "/tmp/scanprop-test-XXXXXX");
        if (!mkdtemp(path)) sp_fail("cannot create a temporary directory");
    }
    return path;
}

/* L = Σ r ⊙ f(x), float64 accumulation, on a scratch tape. */
static double eval_L(sp_layer *l, const sp_tensor *x, const float *r, const int *labels, sp_tape *t)
{
    sp_tape_reset(t);
    sp_node *in = sp_tape_input(t, x);
    sp_node *y = labels ? sp_apply_loss(t, l, in, labels) : sp_apply(t, l, in);
    double L = 0.0;
    for (size_t i = 0; i < y->out.numel; i++) L += (double)r[i] * (double)y->out.data[i];
    return L;
}

/* Compare analytic grad g of tensor v (perturbed in place) with finite differences. */
static double check_tensor(sp_tensor *v, const float *g, sp_layer *l, const sp_tensor *x, const float *r,
                           const tu_gc_opts *o, sp_rng *pick, sp_tape *t)
{
    int nchk = (size_t)o->max_checks < v->numel ? o->max_checks : (int)v->numel;
    double worst = 0.0, scale = 1.0;
    double *fd = sp_xmalloc((size_t)nchk * sizeof *fd);
    size_t *idx = sp_xmalloc((size_t)nchk * sizeof *idx);
    for (int c = 0; c < nchk; c++) {
        size_t i = (size_t)nchk == v->numel ? (size_t)c : sp_rng_below(pick, (uint32_t)v->numel);
        float keep = v->data[i];
        v->data[i] = keep + (float)o->eps;
        double Lp = eval_L(l, x, r, o->labels, t);
        v->data[i] = keep - (float)o->eps;
        double Lm = eval_L(l, x, r, o->labels, t);
        v->data[i] = keep;
        idx[c] = i;
        fd[c] = (Lp - Lm) / (2.0 * o->eps);
        scale = fmax(scale, fabs(fd[c]));
    }
    for (int c = 0; c < nchk; c++) worst = fmax(worst, fabs((double)g[idx[c]] - fd[c]));
    free(fd);
    free(idx);
    return worst / scale;
}

tu_gc_result tu_gradcheck(sp_layer *l, int ndim, const int *xshape, uint64_t seed, const tu_gc_opts *opts)
{
    tu_gc_opts o = opts ? *opts : (tu_gc_opts){0};
    if (o.eps == 0) o.eps = 1e-2;
    if (o.max_checks == 0) o.max_checks = 64;
    if (o.x_lo == 0 && o.x_hi == 0) o.x_lo = -1, o.x_hi = 1;
    sp_rng r;
    sp_rng_seed(&r, seed);
    if (l->op->init_params) l->op->init_params(l, &r);

    sp_tensor x = sp_tensor_new(ndim, xshape);
    for (size_t i = 0; i < x.numel; i++) {
        float v = sp_rng_uniform_range(&r, o.x_lo, o.x_hi);
        if (o.min_abs_x > 0 && fabsf(v) < o.min_abs_x) v = v < 0 ? -o.min_abs_x : o.min_abs_x;
        x.data[i] = v;
    }
    if (o.grid > 0) {   /* distinct values: a random permutation of a grid */
        int *perm = sp_xmalloc(x.numel * sizeof *perm);
        for (size_t i = 0; i < x.numel; i++) perm[i] = (int)i;
        sp_rng_shuffle(&r, perm, (int)x.numel);
        for (size_t i = 0; i < x.numel; i++) x.data[i] = o.grid * ((float)perm[i] - 0.5f * (float)x.numel);
        free(perm);
    }

    sp_tape t, scratch;
    sp_tape_init(&t);
    sp_tape_init(&scratch);
    sp_node *in = sp_tape_input(&t, &x);
    sp_node *y = o.labels ? sp_apply_loss(&t, l, in, o.labels) : sp_apply(&t, l, in);
    float *rv = sp_xmalloc(y->out.numel * sizeof *rv);
    for (size_t i = 0; i < y->out.numel; i++) rv[i] = sp_rng_uniform_range(&r, -1, 1);
    sp_tensor dy = sp_tensor_view(rv, y->out.ndim, y->out.shape);

    tu_gc_result res = {.nparams = l->nparams};
    sp_tensor dx = sp_tensor_new(ndim, xshape);
    for (size_t i = 0; i < dx.numel; i++) dx.data[i] = NAN;   /* δ must overwrite */
    y->op->backward_input(y, &dy, &dx);
    for (size_t i = 0; i < dx.numel; i++) res.max_abs_dx = fmax(res.max_abs_dx, fabs(dx.data[i]));
    for (int p = 0; p < l->nparams; p++) sp_tensor_zero(&l->params[p]->grad);
    if (y->op->backward_params) y->op->backward_params(y, &dy);

    sp_rng pick;
    sp_rng_seed(&pick, seed ^ 0x5eed);
    res.err_dx = check_tensor(&x, dx.data, l, &x, rv, &o, &pick, &scratch);
    if (isnan(res.max_abs_dx)) res.err_dx = INFINITY;
    for (int p = 0; p < l->nparams; p++)
        res.err_param[p] = check_tensor(&l->params[p]->value, l->params[p]->grad.data, l, &x, rv, &o, &pick, &scratch);

    free(rv);
    sp_tensor_free(&dx);
    sp_tensor_free(&x);
    sp_tape_free(&t);
    sp_tape_free(&scratch);
    return res;
}

double tu_gc_worst(const tu_gc_result *r)
{
    double w = r->err_dx;
    for (int p = 0; p < r->nparams; p++) w = fmax(w, r->err_param[p]);
    return w;
}
