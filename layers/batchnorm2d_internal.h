/* batchnorm2d_internal.h — batchnorm2d's layer struct and per-step saved state, shared
 * by layers/batchnorm2d.c and its CUDA twin (batchnorm2d_cuda.cu): the twin reads eps
 * and momentum from the layer, and the op's jt_exists reads `training` from either
 * device's saved state. Not part of the public API (layers/layers.h). */
#ifndef SP_BATCHNORM2D_INTERNAL_H
#define SP_BATCHNORM2D_INTERNAL_H

#include <stdbool.h>
#include "core/op.h"
#include "layers/layers.h"

typedef struct bn_layer {
    sp_layer base;
    int C;
    float eps, momentum;
    bool relu;        /* batchnorm2d_relu: y = max(γ·x̂ + β, 0) */
    /* Synchronized batch norm (sp_batchnorm2d_set_reduce): sums the statistics' doubles
     * over the processes in place; NULL: this process's batch alone. CPU only. */
    sp_bn_reduce_fn reduce;
    void *reduce_ctx;
} bn_layer;

/* In the memory of the node's device (host on the CPU, device on CUDA). */
typedef struct bn_saved {
    bool training;
    float *xhat;      /* training on CUDA: x̂, [B, C, H, W] (the CPU's is NULL) */
    float *scale;     /* [C]: γ/√(var + eps) of the mode used */
    float *mean, *inv;   /* training on the CPU: [C] each, the batch's mean and 1/σ as
                          * the forward rounded them; x̂ = (x − mean)·inv is recomputed */
    bool relu;        /* the layer's relu, as the forward ran */
    float *gb;        /* training with relu: [C][2], the forward's γ_c, β_c (ReLU's
                       * mask γ·x̂ + β > 0 recomputed in the backward); CPU only */
    bool sync;        /* training with the layer's reduce (CPU): the statistics and δ's
                       * two sums are over every process's batch */
    double count;     /* sync: the values per channel over every process (N)      */
} bn_saved;

#endif
