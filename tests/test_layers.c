/* test_layers.c — gradient checks of the dense and pointwise ops (δ and G) against
 * float64-accumulated central finite differences. Tolerance: 5e-3 of the largest
 * gradient entry (see tests/testutil.h); float32 forward noise is ~1e-4 at eps 1e-2. */
#include <criterion/criterion.h>
#include <math.h>
#include "layers/layers.h"
#include "tests/testutil.h"

#define GC_TOL 5e-3

static void check(sp_layer *l, int ndim, const int *shape, uint64_t seed, const tu_gc_opts *o)
{
    tu_gc_result r = tu_gradcheck(l, ndim, shape, seed, o);
    cr_assert_lt(r.err_dx, GC_TOL, "%s δ: err %.2e", l->op->name, r.err_dx);
    cr_assert_gt(r.max_abs_dx, 0.0, "%s δ is all zeros", l->op->name);
    for (int p = 0; p < r.nparams; p++)
        cr_assert_lt(r.err_param[p], GC_TOL, "%s G of %s: err %.2e", l->op->name, l->params[p]->name,
                     r.err_param[p]);
    sp_layer_free(l);
}

Test(gradcheck, linear_odd_sizes)
{
    int sizes[][3] = {{1, 1, 1}, {3, 7, 5}, {5, 13, 2}, {2, 33, 17}};
    for (int i = 0; i < 4; i++)
        check(sp_linear("fc", sizes[i][1], sizes[i][2]), 2, (int[]){sizes[i][0], sizes[i][1]}, 100 + i, NULL);
}

Test(gradcheck, relu)
{
    tu_gc_opts o = {.min_abs_x = 0.05f};   /* keep FD steps away from the kink */
    check(sp_relu(), 4, (int[]){2, 3, 5, 7}, 1, &o);
    check(sp_relu(), 2, (int[]){3, 11}, 2, &o);
}

Test(gradcheck, tanh) { check(sp_tanh(), 4, (int[]){2, 3, 4, 5}, 3, NULL); }
Test(gradcheck, sigmoid) { check(sp_sigmoid(), 3, (int[]){3, 4, 5}, 4, NULL); }
Test(gradcheck, flatten) { check(sp_flatten(), 4, (int[]){2, 3, 4, 5}, 5, NULL); }

Test(gradcheck, softmax_ce)
{
    int labels[5] = {0, 3, 6, 2, 6};
    tu_gc_opts o = {.labels = labels, .x_lo = -3, .x_hi = 3};
    check(sp_softmax_ce(), 2, (int[]){5, 7}, 6, &o);
}

Test(softmax_ce, value_matches_closed_form)
{
    /* logits all equal → loss = log K */
    float z[2 * 4] = {0};
    int y[2] = {1, 3};
    sp_tensor x = sp_tensor_2d(z, 2, 4);
    sp_tape t;
    sp_tape_init(&t);
    sp_layer *ce = sp_softmax_ce();
    sp_node *l = sp_apply_loss(&t, ce, sp_tape_input(&t, &x), y);
    cr_assert_float_eq(l->out.data[0], logf(4.0f), 1e-6);
    sp_tape_free(&t);
    sp_layer_free(ce);
}
