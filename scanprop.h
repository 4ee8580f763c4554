/* scanprop.h — the public API of scanprop in one header: what a model author needs to
 * build a model in C (layers, residual and dense connections), train it (data loader,
 * optimizer, backward engine, training loop) and save it (safetensors, PyTorch names),
 * or hand it to the runner the apps use (sp_run: flags, engine, loop, JSON line), and
 * the built-in models (layers/zoo.h).
 *
 *   cc my_model.c $(pkg-config --cflags --libs scanprop)     after make install
 *
 * docs/ARCHITECTURE.md describes the modules; each header says what its calls do. */
#ifndef SCANPROP_H
#define SCANPROP_H

#include "core/tensor.h"
#include "core/rng.h"
#include "core/error.h"
#include "core/op.h"
#include "core/tape.h"
#include "core/model.h"
#include "schedulers/backward/engine.h"
#include "core/threads.h"
#include "core/io/safetensors.h"
#include "core/io/model_io.h"
#include "layers/layers.h"
#include "optim/optim.h"
#include "data/data.h"
#include "train/train.h"
#include "cli/run.h"
#include "layers/zoo.h"
#include "cli/cuda_start.h"   /* sp_cuda_start: in a make CUDA=1 build */

/* Each header above declares C linkage for a C++ program (extern "C"); so does this
 * block, for whatever is declared here. */
#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif

#endif
