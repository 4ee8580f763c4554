/* elementwise.h — what relu, tanh and sigmoid share: same-shape output, a parameter-
 * free layer, and cost proportional to the element count. Each activation's math
 * stays in its own file. */
#ifndef SP_ELEMENTWISE_H
#define SP_ELEMENTWISE_H

#include "core/op.h"
#include "core/threads.h"

void sp_elementwise_infer(sp_node *n, const sp_tensor *x);
sp_cost sp_elementwise_cost(const sp_node *n, double fwd_per_elem, double bwd_per_elem);
sp_layer *sp_elementwise_layer(const sp_opdef *op);
/* fn(ctx, begin, end) over [0, n) elements: on the thread pool when n is large enough
 * to pay for the hand-off, else inline. For pointwise maps, whose bits never depend on
 * the split. */
void sp_elementwise_for(size_t n, sp_range_fn fn, void *ctx);
/* ReLU's δ: dx = dy where gate > 0, else 0, over n elements (relu's gate is its input or
 * output, add_relu's its output: the same signs); dx may be dy itself. relu.c. */
void sp_relu_mask(const float *gate, const float *dy, float *dx, size_t n);
/* dx += dy where gate > 0 (a δ added into a fan-out's sum; bitwise mask-then-add). */
void sp_relu_mask_acc(const float *gate, const float *dy, float *dx, size_t n);

#endif
