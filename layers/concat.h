/* concat.h — the channel arithmetic concat (layers/concat.c) and its CUDA twin
 * (layers/concat_cuda.cu) share: private to the two. */
#ifndef SP_CONCAT_H
#define SP_CONCAT_H

#include <stddef.h>
#include "core/tape.h"

/* Elements per channel (product of the dims after dim 1). */
static inline size_t sp_concat_per_channel(const sp_tensor *t)
{
    size_t s = 1;
    for (int d = 2; d < t->ndim; d++) s *= (size_t)t->shape[d];
    return s;
}

/* Channels before input i. */
static inline int sp_concat_offset(const sp_node *n, int i)
{
    int off = 0;
    for (int k = 0; k < i; k++) off += sp_node_in(n, k)->shape[1];
    return off;
}

#endif
