/* dropout_internal.h — dropout's layer struct, shared by layers/dropout.c and its CUDA
 * twin (dropout_cuda.cu), which draws the CPU op's masks from the layer's generator. Not
 * part of the public API (layers/layers.h). */
#ifndef SP_DROPOUT_INTERNAL_H
#define SP_DROPOUT_INTERNAL_H

#include "core/op.h"
#include "core/rng.h"

typedef struct dropout_layer {
    sp_layer base;
    float p;
    sp_rng rng;
} dropout_layer;

#endif
