/* batchnorm2d_internal.h — batchnorm2d's layer struct and per-step saved state, shared
 * by layers/batchnorm2d.c and its CUDA twin (batchnorm2d_cuda.cu): the twin reads eps
 * and momentum from the layer, and the op's jt_exists reads `training` from either
 * device's saved state. Not part of the public API (layers/layers.h). */
#ifndef SP_BATCHNORM2D_INTERNAL_H
#define SP_BATCHNORM2D_INTERNAL_H

#include <stdbool.h>
#include "core/op.h"

typedef struct bn_layer {
    sp_layer base;
    int C;
    float eps, momentum;
    bool relu;        /* batchnorm2d_relu: y = max(γ·x̂ + β, 0) */
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
} bn_saved;

#endif
