/* elementwise.c — shared plumbing of the pointwise activations. */
#include "core/error.h"
#include "layers/elementwise.h"

void sp_elementwise_infer(sp_node *n, const sp_tensor *x)
{
    n->out = sp_tensor_view(NULL, x->ndim, x->shape);
}

sp_cost sp_elementwise_cost(const sp_node *n, double fwd_per_elem, double bwd_per_elem)
{
    double e = (double)n->out.numel;
    return (sp_cost){.fwd_flops = fwd_per_elem * e, .bwd_input_flops = bwd_per_elem * e, .out_bytes = 4 * e};
}

sp_layer *sp_elementwise_layer(const sp_opdef *op)
{
    sp_layer *l = sp_xcalloc(1, sizeof *l);
    l->op = op;
    return l;
}

void sp_elementwise_for(size_t n, sp_range_fn fn, void *ctx)
{
    enum { MIN_PARALLEL = 1 << 15 };   /* ~10 µs of a pointwise map: below, one thread */
    if (n < MIN_PARALLEL) {
        if (n) fn(ctx, 0, n);
        return;
    }
    sp_parallel_for(n, fn, ctx);
}
