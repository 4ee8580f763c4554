/* op.h — the op interface, the heart of scanprop.
 *
 * An op is two tables. sp_opdef says what the op IS, on every device: name, arity, shape
 * inference, cost, parameter init, the pattern of its Jacobian. sp_kernels says what RUNS
 * on one device: forward, δ, G, Jacobian values. Every op (layers/<op>.c) fills one
 * sp_opdef, which carries its CPU kernels; a device twin (layers/<op>_cuda.cu) only
 * registers another sp_kernels for the same op (core/device.h). An op knows its
 * derivative two ways:
 *   - as products:   backward_input  δ_i = J_iᵀ·dy (gradient of input i, on the critical
 *                                    path)
 *                    backward_params G += ∂l/∂θ  (weight gradient, off the critical path)
 *   - as a matrix:   jt_pattern / jt_values, the transposed Jacobian block J_iᵀ of input
 *                    i for one sample in CSR, (input-i size × output size), pattern from
 *                    shapes only.
 * δ and G are separate entry points because the ooo engine, LayerPipe and the pipeline
 * schedules run them at different times; the linear engine calls both.
 *
 * Most ops have one input (i is then always 0); add and concat have several
 * (.arity), and a node's output may feed any number of nodes: the tape is a DAG.
 *
 * A layer (sp_layer) is the persistent part of an op: hyper-parameters and parameters.
 * A node (sp_node) is one application of a layer on the tape during one step. */
#ifndef SP_OP_H
#define SP_OP_H

#include <stdbool.h>
#include "core/error.h"
#include "core/tensor.h"
#include "core/csr.h"
#include "core/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SP_MAX_PARAMS 4
#define SP_NAME_LEN 64

typedef struct sp_node sp_node;
typedef struct sp_tape sp_tape;
typedef struct sp_layer sp_layer;
typedef struct sp_opdef sp_opdef;

/* Work and memory of one node, per step (whole batch). */
typedef struct sp_cost {
    double fwd_flops;
    double bwd_input_flops;   /* δ */
    double bwd_params_flops;  /* G */
    double out_bytes;         /* the output activation                     */
    double saved_bytes;       /* retained for backward besides the input   */
    double param_bytes;
} sp_cost;

typedef struct sp_param {
    char name[2 * SP_NAME_LEN]; /* PyTorch name, e.g. "conv1.weight"              */
    sp_tensor value;          /* PyTorch layout: conv OIHW, linear [out, in]    */
    sp_tensor grad;           /* same shape; backward_params accumulates into it */
    sp_layer *owner;
    /* Pruning (optim/prune.h): 0/1 per entry of value, NULL = dense. The optimizer zeroes
     * the masked entries of grad before and of value after every update, so pruned
     * weights stay exactly 0 in the forward; bppsa drops them from Jᵀ patterns. */
    const float *mask;
    /* Its gradient lives in the training step's arena (sp_model_step_grads, core/model.h):
     * grad.data is set by the linear engine for the backward of its layer's nodes and the
     * layer's update, and is NULL otherwise; grad keeps its shape. */
    bool grad_in_step;
} sp_param;

/* Op-specific layer structs embed sp_layer as their FIRST member. */
struct sp_layer {
    const sp_opdef *op;
    char name[SP_NAME_LEN];   /* "conv1"; "" for parameter-free ops */
    sp_param *params[SP_MAX_PARAMS];
    int nparams;
    /* State that is saved and loaded but not trained (batch norm's running_mean,
     * running_var, num_batches_tracked): no grad, never seen by an optimizer. */
    sp_param *buffers[SP_MAX_PARAMS];
    int nbuffers;
    bool eval;                /* eval mode (sp_model_set_training): batch norm uses its
                               * running statistics, dropout passes x through */
};

/* sp_opdef.blocked's answers. */
enum { SP_BLK_NONE = 0, SP_BLK_PASS, SP_BLK_PLAIN, SP_BLK_MAKES };

/* sp_opdef.arity for ops taking any number (>= 1) of inputs. */
#define SP_ARITY_ANY (-1)

/* ---- What runs: an op's kernels on one device ---------------------------------------
 * The CPU's are the op's own (sp_opdef.cpu); a device backend registers its twin's with
 * sp_op_register_kernels (core/device.h), and sp_apply gives every node the table of the
 * device its inputs live on (n->kern). Every member but forward may be NULL where the op
 * or the device lacks it.
 *   forward                y = f(x; θ). May allocate per-step saved state with
 *                          sp_tape_alloc.
 *   backward_input         dx = J_iᵀ·dy for input i, overwriting dx (input i's shape).
 *   backward_params        θ.grad += ∂l/∂θ given dy. NULL for parameter-free ops.
 *   backward_input_params  both at once for a one-input op with parameters: dx = J_0ᵀ·dy
 *                          (acc: dx += J_0ᵀ·dy, as backward_input_acc) and θ.grad +=
 *                          ∂l/∂θ, bitwise what the two calls above give, for ops whose
 *                          δ and G share a pass over dy (batch norm's per-channel sums,
 *                          conv2d's dy in oneDNN's blocked layout). NULL: callers make
 *                          the two calls. The
 *                          linear engine uses it (sp_node_backward); engines that run δ
 *                          and G apart (ooo) make the two calls.
 *   forward_relu           y = max(f(x; θ), 0): the forward with the ReLU that runs over
 *                          y next (sp_model_forward, sp_tape.reuse_inputs) folded into
 *                          the same pass, bitwise forward then relu's forward; that
 *                          ReLU's node is then recorded without running
 *                          (sp_apply_over_fused). next: NULL, or the node that reads the
 *                          ReLU's output, whose forward_samples it runs on every range of
 *                          samples once their ReLU is done, on the same thread, in the same
 *                          parallel region (sp_apply_fused_relu_next). NULL: none.
 *   forward_begin          the forward in pieces, for a node whose producer's forward_relu
 *   forward_samples        runs it (next above): forward_begin does what comes before any
 *                          sample (saved state from the arena) on the calling thread;
 *                          forward_samples(n, b0, b1) then samples [b0, b1) on the calling
 *                          thread, with no parallel region of its own. Pieces covering
 *                          [0, B) give forward's bits. NULL: none.
 *   backward_input_acc     dx += J_iᵀ·dy, bitwise dx + (what backward_input writes): the
 *                          δ of an input that fans out, added into its sum with no
 *                          scratch tensor and no separate pass (the linear engine's
 *                          sp_node_backward_inputs). NULL: callers go through a scratch
 *                          and sp_accumulate.
 *   jt_values              J_iᵀ of sample b, (input-i size × out): fills jt->data (nnz
 *                          preallocated by sp_opdef.jt_pattern) from saved state and
 *                          weights.
 * Recurrent ops (sp_opdef.chain_len set): their time steps as a chain.
 *   chain_jt               the dense H×H matrix Jᵀ_t = (∂h_t/∂h_{t-1})ᵀ of sample b, t in
 *                          [1, T] (row-major, rows index h_{t-1}).
 *   chain_backward_params  G from the recovered ∇h_t (dh: [B, T, H]) — Eq. 2 of the
 *                          BPPSA paper.
 *   chain_backward_params_range  the same sums over the steps t0+1 … t1 only (rows
 *                          [t0, t1) of the chain, 0 ≤ t0 < t1 ≤ T; dh: [B, t1 − t0, H],
 *                          ∇h of those steps), added into θ.grad: one rank's share of
 *                          G in the scan across ranks. NULL on a device (unsupported).
 * Devices only (docs/CUDA.md), for the bppsa engine there: every sample at once, one
 * launch.
 *   jt_values_all          jt's indptr/indices are device copies of jt_pattern's; sample
 *                          b's values go to jt->data + b·stride.
 *   chain_jt_all           Jᵀ_t of every sample for t = T down to t_lo, sample b's at
 *                          jt + ((T − t)·B + b)·H².
 *   chain_jt_factors       Jᵀ_t factored as Σ_g W_gᵀ·diag(v_g) (+ diag(z) when *zdiag),
 *                          W_g the g-th H×H block of W_hh (*W, on the device, shared by
 *                          every step and sample); writes (gates + zdiag)·H floats per
 *                          step and sample, laid out as chain_jt_all's (nothing when v
 *                          is NULL). Returns gates. */
typedef struct sp_kernels {
    void (*forward)(sp_node *n);
    void (*backward_input)(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx);
    void (*backward_params)(sp_node *n, const sp_tensor *dy);
    void (*jt_values)(const sp_node *n, int i, int b, sp_csr *jt);
    void (*chain_jt)(const sp_node *n, int b, int t, float *jt);
    void (*chain_backward_params)(sp_node *n, const sp_tensor *dh);
    void (*jt_values_all)(const sp_node *n, int i, const sp_csr *jt, size_t stride);
    void (*chain_jt_all)(const sp_node *n, int t_lo, float *jt);
    int (*chain_jt_factors)(const sp_node *n, int t_lo, float *v, bool *zdiag, const float **W);
    void (*chain_backward_params_range)(sp_node *n, const sp_tensor *dh, int t0, int t1);
    void (*backward_input_params)(sp_node *n, const sp_tensor *dy, sp_tensor *dx, bool acc);
    void (*backward_input_acc)(sp_node *n, int i, const sp_tensor *dy, sp_tensor *dx);
    void (*forward_relu)(sp_node *n, sp_node *next);
    void (*forward_begin)(sp_node *n);
    void (*forward_samples)(sp_node *n, int b0, int b1);
} sp_kernels;

/* ---- What an op is, on every device -------------------------------------------------- */
struct sp_opdef {
    const char *name;
    /* Number of inputs: 0 means 1; SP_ARITY_ANY: one or more. */
    int arity;
    /* Validate the inputs' shapes (x is input 0; others: sp_node_in(n, i)) — sp_fail
     * with op name, shapes and expectation on mismatch — and set n->out.ndim/shape. */
    void (*infer)(sp_node *n, const sp_tensor *x);
    sp_cost (*cost)(const sp_node *n);
    /* PyTorch's default initialisation for this op's parameters. */
    void (*init_params)(sp_layer *l, sp_rng *r);
    /* The sparsity pattern of J_iᵀ for one sample, (input-i size × out), from shapes
     * only: allocates indptr/indices (a kernel's jt_values fills the values). */
    void (*jt_pattern)(const sp_node *n, int i, sp_csr *jt);
    /* NULL, or false where this node has no per-sample Jᵀ (batch norm in training mode
     * couples the samples of a batch): sp_node_has_jt. */
    bool (*jt_exists)(const sp_node *n);
    /* Recurrent ops only: the length T of the node's chain of time steps (the kernels'
     * chain_* members walk it). */
    int (*chain_len)(const sp_node *n);
    void (*free_layer)(sp_layer *l);   /* extra cleanup; NULL if none */
    /* Memory of the training forward (sp_tape.reuse_inputs, sp_model_forward), CPU kernels:
     * out_unread   no kernel of the op reads a node's own output once its forward has
     *              run (δ, G and Jᵀ need its inputs or saved state only);
     * over_input   the forward may write y over its one input x (sp_apply_over), and every
     *              kernel gives the same bits reading y where it read x. */
    bool out_unread, over_input;
    /* The CPU backward_input of its one input may write δx over δy (same shape, read and
     * written element by element): the δ plan (schedulers/memory/memory.h) then gives
     * the input's δ the output's bytes where nothing else adds into it (VGG-11: one
     * activation's δ less at the first ReLU). */
    bool delta_over;
    /* The op is the ReLU, y = max(x, 0) elementwise: a producer's forward_relu computes
     * its output (sp_model_forward). */
    bool relu;
    /* Layouts (sp_tensor.blk) its CPU kernels take and give; NULL or SP_BLK_NONE for
     * layer l: NCHW inputs only (sp_apply fails on a blocked one). SP_BLK_PASS: any one
     * layout, the output and every δ in the input's; SP_BLK_PLAIN: any input layout, an
     * NCHW output; SP_BLK_MAKES: any input layout, the output blocked when the tape asks
     * for it (sp_tape.out_blocked), in the block the op picks. Where a blocked activation may go is decided per
     * model from these (sp_model_forward), so an op without support never sees one. */
    int (*blocked)(const sp_layer *l);
    /* The CPU kernels, the op's default table (.cpu = {.forward = …, …}). Code that runs a
     * node calls n->kern->…, never n->op->cpu.…: on a device, n->kern is that device's. */
    sp_kernels cpu;
};

struct sp_node {
    const sp_opdef *op;       /* NULL for a leaf (data input)                 */
    const sp_kernels *kern;   /* op's kernels on the device of out; NULL for  */
                              /* a leaf                                       */
    sp_layer *layer;
    sp_node *input;           /* inputs[0], the producer of x; NULL for a leaf */
    sp_node **inputs;         /* the ninputs producers, in argument order (may */
    int ninputs;              /* repeat a node); &input when ninputs == 1      */
    sp_tensor out;            /* y, in the tape's arena                       */
    sp_tensor grad;           /* ∂l/∂y, allocated by the backward engine      */
    void *saved;              /* op's per-step saved state (arena)            */
    const int *labels;        /* loss ops only: [B] class indices             */
    const int *dev_labels;    /* loss ops on a device: the same labels staged */
                              /* there already (sp_tape.dev_labels), or NULL  */
    sp_tape *tape;
    int index;                /* position on the tape                         */
    int nconsumers;           /* input slots of later nodes that read out     */
    bool needs_grad;          /* some parameter lies upstream (or at) here    */
};

/* The input tensor of a node (input 0), and input i (0 <= i < n->ninputs). A NULL node
 * or an i out of range is refused with sp_refuse (core/error.h): NULL, or false for
 * sp_node_has_jt, outside sp_try; inside sp_try the call ends there with SP_ERR. */
static inline const sp_tensor *sp_node_x(const sp_node *n)
{
    if (__builtin_expect(!n, 0)) return sp_refuse("sp_node_x: argument 'n' is NULL"), (const sp_tensor *)NULL;
    return &n->input->out;
}
static inline const sp_tensor *sp_node_in(const sp_node *n, int i)
{
    if (__builtin_expect(!n, 0)) return sp_refuse("sp_node_in: argument 'n' is NULL"), (const sp_tensor *)NULL;
    if (__builtin_expect(i < 0 || i >= n->ninputs, 0))
        return sp_refuse("sp_node_in: argument 'i' is %d (the node has %d inputs)", i, n->ninputs),
               (const sp_tensor *)NULL;
    return &n->inputs[i]->out;
}

/* Whether n's op gives a per-sample Jᵀ for n, on n's device. */
static inline bool sp_node_has_jt(const sp_node *n)
{
    if (__builtin_expect(!n, 0)) return sp_refuse("sp_node_has_jt: argument 'n' is NULL"), false;
    return n->op->jt_pattern && n->kern->jt_values && (!n->op->jt_exists || n->op->jt_exists(n));
}

/* Parameters: created by layer constructors, owned by their layer. A NULL owner or
 * suffix, a bad shape (tensor.h), a fifth parameter or buffer or no memory is refused
 * with sp_refuse (core/error.h): NULL outside sp_try, having allocated nothing. */
sp_param *sp_param_new(sp_layer *owner, const char *suffix, int ndim, const int *shape);
/* A buffer (sp_layer.buffers): value only, grad left empty. */
sp_param *sp_buffer_new(sp_layer *owner, const char *suffix, int ndim, const int *shape);
void sp_layer_free(sp_layer *l);

/* Uniform(-bound, bound) fill, as PyTorch's kaiming_uniform_(a=√5) / bias init. A NULL
 * argument or a shape-only t: SP_ERR after sp_refuse. */
int sp_fill_uniform(sp_tensor *t, sp_rng *r, float bound);

#ifdef __cplusplus
}
#endif

#endif
