/* engines.h — constructors of the built-in backward engines (see core/engine.h). */
#ifndef SP_ENGINES_H
#define SP_ENGINES_H

#include "core/engine.h"

sp_engine *sp_engine_linear_create(const sp_engine_opts *opts);
/* BP as a parallel scan over transposed Jacobians (schedulers/bppsa.c). */
sp_engine *sp_engine_bppsa_create(const sp_engine_opts *opts);
/* Jacobians in the chain bppsa scans for this loss (its n; for checking --scan-levels). */
int sp_bppsa_chain_links(const sp_node *loss);
sp_engine *sp_engine_ooo_create(const sp_engine_opts *opts);   /* schedulers/ooo.h */

/* One node's whole backward, as the linear engine does it: G (if the op has params)
 * then, input by input in argument order, δ_i into the producer's grad (accumulating
 * when the producer fans out). sp_node_backward_inputs is the δ part alone. */
void sp_node_backward(sp_node *n);
void sp_node_backward_inputs(sp_node *n);

#endif
