/* wino_b8.h — the project's own Winograd F(2×2, 3×3) convolution on oneDNN's 8-channel
 * blocked layout, for AVX2-only CPUs.
 *
 * oneDNN 2.6 has Winograd kernels for AVX-512 only; on an AVX2 CPU every 3×3 convolution
 * of both scanprop and PyTorch runs oneDNN's direct kernels at ~80 % of the FMA peak, so
 * only fewer multiplications make one faster. F(2×2, 3×3) computes each 2×2 output tile
 * from a 4×4 input tile with 16 products instead of 36: the input's tiles and the
 * weights are transformed (additions only, and halves for the weights), 16 GEMMs
 * (one per point ξ of the 4×4 transform: M_ξ [tiles × O] = V_ξ [tiles × C] · U_ξ [C × O],
 * sp_gemm_serial) multiply them, and the output transform (additions only) gives the
 * tiles. δ is the same convolution of dy with the weights transposed and flipped. The
 * weight gradient is F(3×3, 2×2), its transposed twin: the same transform of x's 4×4
 * tiles, dy's 2×2 tiles as the "kernels" (A dy Aᵀ), 16 GEMMs summing over the batch's
 * tiles (M_ξ [O × C] += D_ξᵀ · X_ξ), and Gᵀ M G gives each 3×3 kernel's gradient.
 *
 * Shapes: k = 3, stride 1, padding 1, C and O multiples of 8 and both at least
 * SP_WINO_B8_MIN_C, planes of at least SP_WINO_B8_MIN_HW × SP_WINO_B8_MIN_HW (at 2×2 the
 * weights' transform, 16 MiB at 512 → 512 channels, costs what the products save); only
 * where AVX2 is the widest vector unit the process may use (sp_cpu_isa_level() == 1).
 * Measured on one Zen 3 core, 16 samples, against oneDNN's direct forward of the same
 * slot: VGG-11's conv2 (64 → 128, 16×16) 4.5 against 7.3 ms, conv4 (256 → 256, 8×8) 7.2
 * against 15.7, conv6 (512 → 512, 4×4) 8.2 against 17.7. Its roundings are not those
 * of direct loops (the transforms add before they multiply); each sum runs in a fixed
 * order for a shape, so the results repeat bitwise. */
#ifndef SP_WINO_B8_H
#define SP_WINO_B8_H

#include <stdbool.h>
#include <stddef.h>

#define SP_WINO_B8_MIN_C 64
#define SP_WINO_B8_MIN_HW 4

typedef struct sp_wino_b8 {
    int C, O, H, W;   /* the forward's input and output channels; the plane */
} sp_wino_b8;

/* Whether this process runs the kernel for this convolution. */
bool sp_wino_b8_on(int C, int O, int H, int W, int k, int stride, int pad);

/* The transformed weights, 16·O·C floats, [16][O][C]: those of the forward, and of δ's
 * convolution (O input channels, C outputs, taps flipped) too, read at other points.
 * filter writes the rows of output channels [k0, k1); w [O][C][3][3]. */
size_t sp_wino_b8_u_floats(const sp_wino_b8 *d);
void sp_wino_b8_filter(const sp_wino_b8 *d, const float *w, int k0, int k1, float *U);

/* Samples per run, so that one run's transformed tiles stay near 2 MiB. */
int sp_wino_b8_chunk(const sp_wino_b8 *d);

/* Floats of one run's scratch (for up to sp_wino_b8_chunk samples). */
size_t sp_wino_b8_scratch_floats(const sp_wino_b8 *d);

/* n samples (n <= chunk) of the packed convolution's input (in, layout inblk: 0 NCHW, 8
 * nChw8c) to its output, n samples in nChw8c; bias (the outputs', NULL for none) and
 * relu (max(y, 0)) on the forward. */
void sp_wino_b8_run(const sp_wino_b8 *d, bool delta, const float *in, int inblk, int n, const float *U,
                    const float *bias, bool relu, float *out, float *scratch);

/* G in runs of sp_wino_b8_grad_chunk samples over a work area of sp_wino_b8_grad_floats:
 * per run, grad_tiles for each sample s of the run (any thread), then grad_rows for
 * blocks of at most SP_WINO_B8_ROWS output channels [k0, k1): their 16 GEMMs into block
 * (sp_wino_b8_block_floats, one per thread) and Gᵀ M G added to those rows of dw
 * [O][C][3][3] (the runs' sums meet in dw). tmp: a blocked copy of one NCHW sample's x
 * or dy, per thread (sp_wino_b8_tmp_floats). */
#define SP_WINO_B8_ROWS 64
int sp_wino_b8_grad_chunk(const sp_wino_b8 *d);
size_t sp_wino_b8_grad_floats(const sp_wino_b8 *d);
size_t sp_wino_b8_block_floats(const sp_wino_b8 *d);
size_t sp_wino_b8_tmp_floats(const sp_wino_b8 *d);
void sp_wino_b8_grad_tiles(const sp_wino_b8 *d, const float *x, int xblk, const float *dy, int dyblk, int s, int n,
                           float *work, float *tmp);
void sp_wino_b8_grad_rows(const sp_wino_b8 *d, int n, int k0, int k1, const float *work, float *block, float *dw);


/* The fused form, for 32 to 64 channels (ResNet-20's second and third stages): one sample
 * at a time, in strips of about 48 tiles whose transformed tiles and products stay in
 * cache (the run above writes a run's whole V and M, ~2 MiB, and multiplies them with
 * sp_gemm_serial, which at these channel counts cost more than the products saved), its
 * GEMMs on register-blocked kernels (6 tiles × 16 outputs; G: 4 outputs × 16 inputs), and
 * each column's Bᵀ computed once along a row of tiles. Measured on one Zen 3 core, 32
 * samples, best of 40 alternating calls against the blocked direct kernel
 * (conv3x3_b8.h): 32 channels at 16×16 forward 1.21 against 1.54 ms, G 1.27 against
 * 1.59; 64 at 8×8 1.00 against 1.56, G 1.05 against 1.61. At 16 channels and 32×32 it
 * gained 12–18 % on 32 samples and lost up to 7 % on 64 (more of its time is transforms
 * and memory): not taken. C and O multiples of 16 in [SP_WINO_B8_FUSED_MIN_C,
 * SP_WINO_B8_FUSED_MAX_C]. scratch: per thread, sp_wino_b8_fused_floats. The
 * forward's weights are filter_fwd's, [16][C][O] (rows [k0, k1) of each point's columns);
 * δ's are sp_wino_b8_filter's. sample: the forward (delta false: x → y, with bias and
 * relu) or δ (dy → dx) of one sample (layout inblk: 0 NCHW, 8 nChw8c) into out (nChw8c),
 * added to it with acc. grad_sample adds one sample's products to dU [16][O][C] (zero it
 * first); grad_finish adds Gᵀ dU G to dw [O][C][3][3]. */
#define SP_WINO_B8_FUSED_MIN_C 32
#define SP_WINO_B8_FUSED_MAX_C 64
bool sp_wino_b8_fused_on(int C, int O, int H, int W, int k, int stride, int pad);
size_t sp_wino_b8_fused_floats(const sp_wino_b8 *d);
void sp_wino_b8_filter_fwd(const sp_wino_b8 *d, const float *w, int k0, int k1, float *U);
void sp_wino_b8_sample(const sp_wino_b8 *d, bool delta, const float *in, int inblk, const float *U, const float *bias,
                       bool relu, bool acc, float *out, float *scratch);
void sp_wino_b8_grad_sample(const sp_wino_b8 *d, const float *x, int xblk, const float *dy, int dyblk, float *dU,
                            float *scratch);
void sp_wino_b8_grad_finish(const sp_wino_b8 *d, const float *dU, float *dw);

#endif
