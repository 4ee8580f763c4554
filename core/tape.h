/* tape.h — the define-by-run graph of one step.
 *
 * sp_apply(t, layer, x) validates shapes, allocates the output in the tape's arena,
 * runs the forward and records a node. Nodes are recorded after their inputs, so the
 * tape order is a topological order of the DAG (reverse it to back-propagate). The backward engines walk the recorded nodes;
 * sp_tape_reset drops them all and recycles the arena in O(1). */
#ifndef SP_TAPE_H
#define SP_TAPE_H

#include "core/op.h"
#include "core/arena.h"

#ifdef __cplusplus
extern "C" {
#endif

struct sp_tape {
    sp_arena arena;
    sp_node **nodes;
    int n, cap;
    bool shape_only;   /* record shapes and costs, run nothing (planners, simulators) */
    void *dev_arena[SP_NDEVICES];   /* per-step memory on other devices (core/device.h) */
    /* Set by a caller that staged the labels on the device (the training loop's
     * prefetch, a whole-step CUDA graph): sp_apply_loss hands them to the loss node,
     * whose device twin then reads them there instead of copying them up. */
    const int *dev_labels;
    /* Called before each sp_apply / sp_apply_n runs a layer's forward (NULL: none): the
     * training loop's next forward waits there for that layer's update of the previous
     * step, still running (sp_ooo_wait_layer). */
    void (*before_apply)(void *ctx, const sp_layer *l);
    void *before_apply_ctx;
    /* Set by a caller whose backward reads only what the ops say they read (the training
     * loop, linear engine, host): sp_model_forward then runs an over_input op (ReLU) over
     * the output of an out_unread op (convolution, batch norm, add) that only it reads,
     * instead of keeping both (VGG-11 and ResNet-20: one activation less per ReLU). */
    bool reuse_inputs;
    /* Set by a caller whose engine reads activations and their gradients only through
     * the ops' kernels (the training loop, SP_ENGINE_BLOCKED): sp_model_forward then keeps
     * the activations between convolutions in oneDNN's blocked layout (sp_tensor.blk)
     * where every op they reach takes it (sp_opdef.blocked). */
    bool blocked;
    /* Whether the next layer's output is written blocked, for an op that makes blocked
     * outputs (SP_BLK_MAKES; the op picks the block): set by sp_model_forward around each
     * apply, false otherwise (NCHW). */
    bool out_blocked;
    /* Its arena is reset only between steps, never inside one (the ooo engine's lane
     * tapes, set each step): an op may leave scratch in it for a later call of the same
     * step (conv2d's blocked dy, made by δ for G or by G for δ). */
    bool scratch_lives_step;
    /* Set by an op that left scratch in this tape for a later call of the same step
     * (conv2d's blocked dy): the ooo lanes hand each task's scratch back when it returns,
     * unless its op set this (cleared before each task). */
    bool scratch_kept;
};

/* Every call here but sp_tape_free refuses a NULL pointer, a negative count, a bad shape
 * or device, a node of another tape, an op's shape check or forward that fails (labels
 * out of range) or memory that runs out with sp_refuse (core/error.h): outside sp_try it
 * returns NULL, SP_ERR or a tensor of ndim 0 with the message in sp_last_error(), never
 * exiting; inside sp_try it ends there with SP_ERR. A refused sp_apply* leaves the tape
 * as it was: no node recorded, the host arena's bytes handed back, no input counted as
 * read. */
int sp_tape_init(sp_tape *t);
void sp_tape_free(sp_tape *t);
int sp_tape_reset(sp_tape *t);
/* sp_tape_reset, and the host arena's blocks go back to the system until the next step
 * (which opens one block of the size it had: sp_arena_trim). For a tape idle a while:
 * the training steps' tape during an evaluation. */
int sp_tape_trim(sp_tape *t);

/* A leaf holding x (not copied: x must outlive the step; ndim 1..SP_MAX_DIMS). */
sp_node *sp_tape_input(sp_tape *t, const sp_tensor *x);
/* Record layer l applied to x. Returns the new node. */
sp_node *sp_apply(sp_tape *t, sp_layer *l, sp_node *x);
/* The same for ops of several inputs (add, concat): l applied to xs[0..ninputs-1], in
 * the op's argument order; a node may appear more than once. A count the op does not
 * take is refused naming the op. */
sp_node *sp_apply_n(sp_tape *t, sp_layer *l, int ninputs, sp_node *const *xs);
sp_node *sp_apply2(sp_tape *t, sp_layer *l, sp_node *a, sp_node *b);
/* sp_apply with the output written over x's bytes (x keeps its node, its data now y's):
 * l's op has over_input, x is on the host (else refused) and nothing reads x's output
 * after this (the caller's promise: sp_model_forward checks the model's graph). */
sp_node *sp_apply_over(sp_tape *t, sp_layer *l, sp_node *x);
/* sp_apply with x's ReLU folded into l's forward (l's kernels' forward_relu): the
 * output is max(y, 0), bitwise what l then a ReLU over y give. The caller then records
 * that ReLU with sp_apply_over_fused on the returned node, and nothing else reads y. */
sp_node *sp_apply_fused_relu(sp_tape *t, sp_layer *l, sp_node *x);
/* sp_apply_over for a ReLU layer (op->relu) whose work x's producer did already
 * (sp_apply_fused_relu): the node is recorded over x and its forward does not run. */
sp_node *sp_apply_over_fused(sp_tape *t, sp_layer *relu, sp_node *x);
/* sp_apply_fused_relu, then sp_apply_over_fused(relu), then next applied to the ReLU's
 * output, with next's forward run by l's forward on each range of samples once their
 * ReLU is done, in l's parallel region (l's forward_relu with next; next's kernels'
 * forward_begin and forward_samples, else refused): bitwise the three ops one after the
 * other. Returns next's node (its input the ReLU's, whose input is l's). */
sp_node *sp_apply_fused_relu_next(sp_tape *t, sp_layer *l, sp_layer *relu, sp_layer *next, sp_node *x);
/* The loss layer (a model's sp_model.loss, e.g. softmax + cross-entropy, mean over the
 * batch) applied to logits; labels [B] must outlive the step (NULL only on a shape-only
 * tape, or with labels staged on the logits' device: sp_tape.dev_labels). */
sp_node *sp_apply_loss(sp_tape *t, sp_layer *loss, sp_node *logits, const int *labels);

/* The name every output uses for a node (traces, Jacobian tables, schedule costs, bppsa
 * plans): its layer's name ("conv1"), or for a parameter-free op "<op>_<k>", k = 1, 2, …
 * counting that op's nodes on the tape ("relu_2"); "input" for a leaf. Returns buf. */
const char *sp_node_label(const sp_node *n, char *buf, size_t len);

void *sp_tape_alloc(sp_tape *t, size_t bytes);
sp_tensor sp_tape_tensor(sp_tape *t, int ndim, const int *shape);
/* Same shape and device as like. */
sp_tensor sp_tape_tensor_like(sp_tape *t, const sp_tensor *like);
/* Per-step memory on device dev (SP_CPU: the host arena), released by sp_tape_reset. */
void *sp_tape_alloc_on(sp_tape *t, sp_device dev, size_t bytes);
/* Before t's first step: its device arenas open their first block at the size like's
 * needed (sp_device_allocator.arena_size_like), so two tapes that take turns (the
 * training loop's, ooo's next forward overlapping the last updates) allocate no device
 * memory after their first steps. Nothing for arenas t already has. SP_OK, or SP_ERR
 * (sp_refuse) given a NULL tape. */
int sp_tape_arena_like(sp_tape *t, const sp_tape *like);
sp_tensor sp_tape_tensor_on(sp_tape *t, sp_device dev, int ndim, const int *shape);

#ifdef __cplusplus
}
#endif

#endif
