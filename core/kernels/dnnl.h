/* dnnl.h — convolutions on oneDNN (Debian's libdnnl, oneDNN 2.x), the CPU path of conv2d.
 *
 * The tensors stay in the layouts the ops use (x, y: NCHW; W: OIHW). Each call splits
 * the batch into sp_get_threads() contiguous slots, like the im2col path, and runs one
 * single-threaded oneDNN primitive per slot on the thread pool: oneDNN's own OpenMP
 * team is never started, so `--threads N` still governs every core, a lane of the ooo
 * engine running inline uses exactly its one core, and the bits depend only on the
 * shape and the thread count. Inside a slot the primitive works in the blocked layouts
 * oneDNN's JIT kernels want (nChw16c …), reordered in and out per call.
 * Primitives are created on first use of a (kind, slot batch, shape) and cached.
 *
 * Matrix products: sp_gemm_serial (core/kernels/dense.h) hands every product of at least
 * SP_DNNL_GEMM_MIN_MACS multiply-adds to oneDNN's JIT SGEMM on one thread; OpenBLAS
 * keeps the tiny ones. The recurrent steps' own products (16×20×20, 16×60×20) go to
 * the project's small kernel first (core/kernels/gemm_small.h, layers/recurrent.h).
 * Debian's OpenBLAS 0.3.21 runs its generic SSE3 kernels on CPUs it does not know and
 * its AVX2 ones under OPENBLAS_CORETYPE=Haswell; oneDNN picks AVX-512 where it exists.
 *
 * SCANPROP_CONV=gemm (or sp_dnnl_conv_set(false)) selects the previous path for both,
 * im2col + OpenBLAS convolutions and OpenBLAS products, which stays the reference of
 * the tests; SCANPROP_CONV=dnnl or unset: oneDNN when the build has it (make DNNL=0
 * builds without). */
#ifndef SP_DNNL_H
#define SP_DNNL_H

#include <stdbool.h>
#include "core/tape.h"

typedef struct sp_dnnl_conv {
    int B, C, H, W, O, k, stride, pad, Ho, Wo;
    int xblk, yblk;   /* the layouts of x (and dx), y (and dy): 0 NCHW, else sp_tensor.blk */
} sp_dnnl_conv;

/* The channel block of the activations oneDNN's convolutions work in on this CPU (16:
 * nChw16c with AVX-512, 8: nChw8c with AVX2), 0 where oneDNN is off or picks neither. */
int sp_dnnl_block(void);

/* Whether conv2d uses oneDNN now (SCANPROP_CONV, read once; a bad value exits 2). */
bool sp_dnnl_conv_on(void);
/* Switches conv2d's path at run time (tests compare both); false when on is asked for
 * and the build has no oneDNN. */
bool sp_dnnl_conv_set(bool on);

/* The convolution algorithm (SCANPROP_CONV_ALGO, read once; a bad value exits 2):
 *   auto      (default) oneDNN's Winograd F(4×4, 3×3) for 3×3 stride-1 convolutions
 *             with ≥ SP_DNNL_WINO_MIN_C input and output channels and an output of at
 *             least SP_DNNL_WINO_MIN_HW × SP_DNNL_WINO_MIN_HW, for each of forward, δ and
 *             G whose scratchpad stays within SP_DNNL_WINO_MAX_SCRATCH; direct for the rest;
 *   direct    oneDNN's direct convolutions only;
 *   winograd  Winograd for every 3×3 stride-1 convolution oneDNN has it for.
 * Winograd runs where oneDNN 2.x has it: AVX-512 CPUs (on AVX2 oneDNN's convolutions run
 * direct, and conv2d takes the project's own F(2×2, 3×3) for the larger ones,
 * core/kernels/wino_b8.h, under auto and winograd). It does 2.25× fewer multiplications on its 4×4 output tiles and rounds
 * differently (its transforms add and scale). Its scratchpad holds the transformed
 * weights and tiles, and grows with the channels (no more with the batch once a slot
 * fills oneDNN's tile blocks): 7–9 MB a slot for ResNet-20's 32- and 64-channel layers,
 * 11–32 MB for VGG-11's 128–256 at slots of 16 (its b32 step arena +100 MiB); the cap
 * keeps auto's memory near direct's. The rule comes from per-layer timings
 * (docs/PERFORMANCE.md): Winograd was 1.6–1.9× faster at 8×8 and 16×16 with 32–256
 * channels, even at 32×32 with 16, and slower at 4×4 and 2×2 (mostly padding there). */
typedef enum { SP_DNNL_AUTO, SP_DNNL_DIRECT, SP_DNNL_WINOGRAD } sp_dnnl_algo;
#define SP_DNNL_WINO_MIN_C 32
#define SP_DNNL_WINO_MIN_HW 8
#define SP_DNNL_WINO_MAX_SCRATCH ((size_t)12 << 20)
sp_dnnl_algo sp_dnnl_conv_algo(void);
/* Sets the algorithm at run time (tests compare them); primitives made before keep theirs. */
void sp_dnnl_conv_algo_set(sp_dnnl_algo a);
/* Whether the algorithm now set asks Winograd for c by its shape (oneDNN may still not
 * have it, or auto's scratch cap turn it down). */
bool sp_dnnl_conv_wants_winograd(const sp_dnnl_conv *c);
/* Whether c's forward runs on Winograd now (its primitive made if not yet); false
 * without oneDNN. */
bool sp_dnnl_conv_runs_winograd(const sp_dnnl_conv *c);

/* Row-major C = alpha·op(A)·op(B) + beta·C on oneDNN, one thread; false (nothing done)
 * when oneDNN is off or the product is below SP_DNNL_GEMM_MIN_MACS. */
#define SP_DNNL_GEMM_MIN_MACS 8192
bool sp_dnnl_sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc);

/* Work that rides in the same parallel region as G (conv2d's bias gradient) or as a
 * forward with its ReLU (the next op's forward on the same samples): the thread that runs slots [s0, s1) of S also runs fn(ctx, n·s0/S, n·s1/S), so [0, n) is
 * covered once, split as the slots are; fn's bits must not depend on that split. */
typedef struct sp_dnnl_side {
    void (*fn)(void *ctx, size_t begin, size_t end);
    void *ctx;
    size_t n;
} sp_dnnl_side;

/* y = conv(x, w) + b. Scratch from the tape's arena. */
void sp_dnnl_conv_forward(sp_tape *t, const sp_dnnl_conv *c, const float *x, const float *w, const float *b,
                          float *y);
/* y = max(conv(x, w) + b, 0): the same, each slot's ReLU run on its own thread right
 * after its convolution; bitwise the call above then y = y > 0 ? y : 0. tail: NULL, or
 * work run after the ReLU in the same region, split as sp_dnnl_side says (with n = B:
 * the samples of the slots that thread has just written). */
void sp_dnnl_conv_forward_relu(sp_tape *t, const sp_dnnl_conv *c, const float *x, const float *w, const float *b,
                               float *y, const sp_dnnl_side *tail);
/* dw += Σ_b dy_b ⋆ x_b; the slots' partial sums are added in slot order. side: NULL or
 * work run in the same region. */
void sp_dnnl_conv_backward_weights(sp_tape *t, const sp_dnnl_conv *c, const float *x, const float *dy, float *dw,
                                   const sp_dnnl_side *side);
/* A convolution's dy in the blocked layout, left by the first of its δ and G calls for
 * the second where they run apart (the ooo engine's lanes) on tapes whose scratch lives
 * until the step's end (sp_tape.scratch_lives_step): the second reads it instead of
 * reordering dy again. One per conv node and forward, zeroed, from the tape's arena.
 * The calls below take it (or NULL): the first to start claims it and publishes its
 * slots' blocked dy when it returns; a call that finds it published by a call with the
 * same slots and layouts reads it, else reorders for itself. Bitwise the same either
 * way: a reorder is a copy. */
typedef struct sp_dnnl_dy_share sp_dnnl_dy_share;
sp_dnnl_dy_share *sp_dnnl_dy_share_new(sp_tape *t);
/* δ: dx = convᵀ(dy, w), overwriting dx; with acc, dx += it, bitwise dx + (what acc false
 * writes), one add per element, folded into each slot's reorder out of the blocked
 * layout (a sum post-op) or, where the primitive takes dx's layout, added from the
 * slot's scratch on the slot's thread. sh: dy's reorder shared with G, or NULL. */
void sp_dnnl_conv_backward_data_shared(sp_tape *t, const sp_dnnl_conv *c, const float *w, const float *dy, float *dx,
                                       bool acc, sp_dnnl_dy_share *sh);
/* G as sp_dnnl_conv_backward_weights, sharing dy's reorder with δ through sh (or NULL). */
void sp_dnnl_conv_backward_weights_shared(sp_tape *t, const sp_dnnl_conv *c, const float *x, const float *dy,
                                          float *dw, const sp_dnnl_side *side, sp_dnnl_dy_share *sh);
/* The reorders into or out of oneDNN's layouts run so far, by every call (tests). */
long sp_dnnl_reorder_count(void);
/* Both at once, slot by slot: dw += G and dx = δ (acc: dx += δ), each slot's dy
 * reordered into the blocked layout once for both; bitwise the two calls above. */
void sp_dnnl_conv_backward(sp_tape *t, const sp_dnnl_conv *c, const float *x, const float *w, const float *dy,
                           float *dx, bool acc, float *dw, const sp_dnnl_side *side);

#endif
