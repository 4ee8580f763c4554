/* sim_comm.h — a step of a schedule simulated WITH its communication (sim_comm.c): the
 * compute jobs of sp_simulate, each worker in the order sp_simulate gave it (the order
 * the executor walks), re-timed with every message the executor sends on a
 * communication lane per rank, and the optimizer step as jobs of their own.
 *
 *   sp_sim r;  sp_simulate(s, costs, &r);
 *   sp_sim_comm_cfg cfg = {.model = cm, .out_bytes = ob, .bucket_mb = 25, .deferred = true};
 *   sp_sim_comm sc;  sp_simulate_comm(s, costs, &r, &cfg, &sc);   // sc.latency: the step
 *
 * What becomes a message (the executor's exec_stage.c / exec_sync.c / exec.c):
 *   - act / grad: F(s, b) sends its output, δ (or B) of stage s+1 sends ∂l/∂y_s, to every
 *     other worker running a successor of that direction (once per worker), out_bytes[s]
 *     each — sp_comm_time(P2P) on the sender's lane from when the job ends (non-blocking);
 *     the receiving job starts no earlier than the message's arrival (the lane's end);
 *   - allreduce: a gradient bucket of replicated stages over its ranks, issued by each
 *     member when its last gradient job of the bucket ends (and the bucket before it on the
 *     same communicator was issued); it starts when every member issued it and every
 *     member's lane is free, and lasts sp_comm_time(ALLREDUCE, bytes, P) on each lane;
 *   - broadcast: a stage whose weights live on one owner (fsdp, fslpp), issued at the
 *     step's start in stage order; its jobs wait for it. reduce: its gradients to the owner
 *     (one bucket per stage);
 *   - loss: the 4-byte allreduce of the batch's loss over every worker, issued after the
 *     worker's last F of the last stage (or at the end of its step);
 *   - opt: the optimizer step of the stages a worker steps, on its compute lane: after its
 *     buckets are done (non-deferred), or — deferred (ddp's cross-step overlap) — before
 *     the first forward of a bucket's stage in the next step, which also waits for that
 *     bucket (the steady state: the bucket ends of the previous step, one step time
 *     earlier, found by iterating to a fixed point).
 *   - norm (cfg.clip): --clip-grad-norm's allgather of every rank's squared norm (8 bytes a
 *     rank, exec_clip.c), issued after the rank's buckets and loss; plain: the updates
 *     wait for it; post-validate: the updates run first and the step waits for both (the
 *     rolled-back, redone step when the clip triggers is not modelled: it depends on the
 *     data).
 *   - buffers / sync-bn: batch norm's, with cfg.buffers (sp_sim_buffers below).
 * Bucket composition is exec_sync.c's: the stages with gradients to synchronise, ordered
 * by when their gradients complete on the lowest rank of their communicator (ties: higher
 * stage first), consecutive stages of one communicator packed while under bucket_mb. An op
 * the model did not measure is derived from its p2p fit (tree broadcast/reduce
 * ⌈log₂ P⌉ messages, ring allreduce 2(P−1) messages of n/P); no model: every message 0 µs,
 * so with opt_us NULL the latency equals sp_simulate's. With a topology (cfg.topo) every
 * message costs sp_comm_time_ranks on its own ranks instead: a p2p between the sender's and
 * the receiver's node (intra or inter link), a collective over its communicator's members,
 * the loss over every worker (build/schedule --nodes).
 * transfer > 0 with no model (build/schedule --transfer-cost X, the page's transfer slider):
 * a constant latency per message in the costs' own unit (α = X, β = ∞) — an act or grad
 * message costs X, a collective X per step of its algorithm (ring allreduce 2(P−1) steps,
 * tree broadcast/reduce ⌈log₂ P⌉), and the loss's 4-byte allreduce nothing (it is no
 * transfer of activations, gradients or weights, and costs nothing to the compute).
 * The cross-rank scan (--parallel scan) has no job schedule of its own: its steps are a
 * program per rank (sp_prog below, sim_prog.c), built by the executor from its plan.
 * Not modelled: the per-tensor split of a stage's broadcast (one message per stage here). */
#ifndef SP_SIM_COMM_H
#define SP_SIM_COMM_H

#include <stdbool.h>
#include "schedulers/sim/comm_cost.h"
#include "schedulers/sim/sim.h"

typedef enum sp_msg_kind {
    SP_MSG_ACT = 0,      /* F's output to the next stage's worker                        */
    SP_MSG_GRAD,         /* ∂l/∂y to the previous stage's worker                         */
    SP_MSG_ALLREDUCE,    /* a gradient bucket                                            */
    SP_MSG_BROADCAST,    /* an owner's weights                                           */
    SP_MSG_REDUCE,       /* gradients to the owner                                       */
    SP_MSG_LOSS,         /* the loss allreduce                                           */
    SP_MSG_NORM,         /* --clip-grad-norm's allgather of the squared norms            */
    SP_MSG_SCAN,         /* a Hillis–Steele level of the cross-rank scan (stage: level)  */
    SP_MSG_UP,           /* a Blelloch up-sweep level (stage: level, counted from 0)     */
    SP_MSG_DOWN,         /* a Blelloch down-sweep level (stage: level, after the up's)   */
    SP_MSG_HANDOFF,      /* the scan's T_1, rank 1 to rank 0 (stage −1)                  */
    SP_MSG_BUFFERS,      /* an owner's batch-norm buffers to every rank (peer: the owner) */
    SP_MSG_SYNC_BN,      /* --sync-bn's allgather of a batch-norm layer's sums           */
    SP_MSG_KINDS
} sp_msg_kind;
const char *sp_msg_kind_name(sp_msg_kind k);   /* "act", "grad", "allreduce", ... */

typedef struct sp_sim_msg {
    int rank;            /* the lane: the sender (p2p) or a member (collectives)           */
    int peer;            /* p2p: the receiver; collectives: the root (−1 for allreduce)     */
    int kind;            /* sp_msg_kind                                                    */
    int stage;           /* p2p: the stage whose output moves; bucket: its first stage     */
    double bytes, start, end;
} sp_sim_msg;

typedef struct sp_sim_comm_cfg {
    const sp_comm_model *model;  /* NULL: every message costs 0                          */
    const double *out_bytes;     /* [stages]: bytes of stage s's output of one micro-batch
                                    (the act and grad messages); NULL: costs->act_bytes  */
    double bucket_mb;            /* the executor's --bucket-mb; <= 0: one per stage       */
    bool deferred;               /* ddp's updates in the next step's forward               */
    const double *opt_us;        /* [stages]: optimizer step of the stage; NULL: 0         */
    const sp_comm_topology *topo; /* a cluster (--nodes): each message costs
                                    sp_comm_time_ranks over the ranks it spans (worker w
                                    is rank w; model unused); NULL or 0 nodes: model  */
    double transfer;             /* model NULL: every message's latency (costs' unit); 0: 0 */
    double job_us;               /* added to every job: the executor's own time per job (its
                                    bookkeeping between the ops: posting sends, tapes, polls),
                                    measured by a run (exec_predict.c); 0 in build/schedule */
    int clip;                    /* SP_CLIP_*: --clip-grad-norm and its --step-sync        */
    const struct sp_sim_buffers *buffers;   /* batch norm's messages; NULL: none          */
} sp_sim_comm_cfg;

/* Batch norm's messages (the executor's exec_buffers.c):
 *   - buffers: at the step's start, before any job, each owner's running statistics of
 *     the layers whose forward runs on several ranks, one broadcast over every worker
 *     per owner in owner order (PyTorch DDP's broadcast_buffers); blocking: the ranks'
 *     first jobs wait for it;
 *   - sync_bn (--sync-bn): inside a job, a blocking allgather over every worker per
 *     batch-norm layer — F: its [Σx, Σx², count] in the layers' order; the first backward
 *     job (B or δ): its [Σdy, Σdy·x̂] in reverse order. bytes: one rank's share. The
 *     matching jobs of every worker (the n-th job with such messages on each) meet there:
 *     each starts when its worker gets to it and all finish at the latest start plus the
 *     job's compute plus the allgathers, the compute split evenly around them. */
typedef struct sp_sim_buffers {
    int nbcast;
    const int *bcast_root, *bcast_stage;   /* [nbcast]                                   */
    const double *bcast_bytes;
    const int *sync_off;         /* [2·stages + 1]: stage s's F allgathers are
                                    sync_bytes[sync_off[2s] … sync_off[2s+1]), its
                                    backward's up to sync_off[2s+2]; NULL: none          */
    const double *sync_bytes;
} sp_sim_buffers;

/* A layer with buffers, as sp_sim_buffers_new reads it: the stage that applies it, its
 * buffers' bytes (what a broadcast of its running statistics moves), and with --sync-bn
 * the bytes of one rank's share of its forward and its backward allgather (0: none). */
typedef struct sp_sim_bn_layer {
    int stage;
    double buffer_bytes, sync_fwd_bytes, sync_bwd_bytes;
} sp_sim_bn_layer;

/* Batch norm's messages under schedule s for the layers l[0 … n) (in the model's order),
 * as the executor sends them (exec_buffers.c): a layer's owner is the lowest worker that
 * runs its stage's forward; a layer whose forward runs on several workers is
 * broadcast from its owner (one broadcast per owner, its layers packed, stage: its first
 * layer's); with sync, each stage's forward allgathers in layer order and its backward's
 * in reverse order (a zero byte count: no message). NULL when there is no message. */
sp_sim_buffers *sp_sim_buffers_new(const sp_schedule *s, const sp_sim_bn_layer *l, int n, bool sync);
void sp_sim_buffers_free(sp_sim_buffers *b);

enum { SP_CLIP_NONE = 0, SP_CLIP_PLAIN, SP_CLIP_POST_VALIDATE };

typedef struct sp_sim_comm {
    int njobs, workers;
    double *start, *finish;      /* per job                                                */
    double latency;              /* the step: every rank past its loss allreduce           */
    double *comm_us;             /* [workers]: lane busy time                              */
    double *opt_us;              /* [workers]: optimizer time on the compute lane          */
    int *messages;               /* [workers]: messages on the lane                        */
    sp_sim_msg *msg;             /* every message, per rank in issue order (sorted by rank) */
    int nmsg;
    struct sp_sim_span { int rank; const char *name; double start, end; } *span;
    int nspan;                   /* a program's compute that is no job of the schedule (its
                                    named ops, sim_prog.c: the scan's phases, the optimizer) */
    double transfer;             /* cfg->transfer when no model: comm_us in the costs' unit */
} sp_sim_comm;

/* r: sp_simulate(s, costs) (its order is kept). costs in µs when a model is given. */
void sp_simulate_comm(const sp_schedule *s, const sp_costs *costs, const sp_sim *r, const sp_sim_comm_cfg *cfg,
                      sp_sim_comm *out);
void sp_sim_comm_free(sp_sim_comm *c);

/* ---- a program per rank (sim_prog.c): the cross-rank scan ------------------------------
 *
 * Each rank runs its ops in order; a message's cost is as above (cfg's model, topology or
 * transfer; the bucket and clip fields unused):
 *   COMPUTE us on the compute lane (job: the schedule's job it is, −1: none);
 *   SEND    a p2p message to peer (kind, stage, bytes) on the sender's lane, non-blocking;
 *   RECV    blocks until the next message from peer (FIFO per pair) has arrived;
 *   WAITSENDS blocks until the rank's sends are done;
 *   ALLREDUCE a blocking allreduce over every rank (matched in program order);
 *   LOSS    the loss's 4-byte allreduce, issued (not waited: the step ends past it);
 *   NORM    the clip's allgather, issued; NORMWAIT blocks until it is done;
 *   OPT     the optimizer step (us), on the compute lane and counted in opt_us. */
enum { SP_OP_COMPUTE, SP_OP_SEND, SP_OP_RECV, SP_OP_WAITSENDS, SP_OP_ALLREDUCE, SP_OP_LOSS, SP_OP_NORM,
       SP_OP_NORMWAIT, SP_OP_OPT };

typedef struct sp_prog_op {
    int op, rank, peer, kind, stage, job;
    double bytes, us;
    const char *name;            /* COMPUTE / OPT with no job: the trace's label (static)  */
} sp_prog_op;

typedef struct sp_prog {
    int workers, njobs;          /* njobs: the schedule's, for out->start/finish (0: none)  */
    sp_prog_op *ops;             /* every rank's, each rank's in program order              */
    int n, cap;
} sp_prog;

/* µs of one message of op on `bytes` over n ranks (ranks NULL: 0 … n−1) as cfg prices it:
 * its topology's sp_comm_time_ranks, else its model (an op the model lacks from its p2p
 * fit), else its constant transfer per message (0 with none). */
double sp_sim_msg_us(const sp_sim_comm_cfg *cfg, sp_comm_op op, double bytes, const int *ranks, int n);

void sp_prog_add(sp_prog *p, sp_prog_op op);
void sp_prog_free(sp_prog *p);
/* The step of the program: latency, messages (per rank in issue order), lanes, jobs. */
void sp_simulate_prog(const sp_prog *p, const sp_sim_comm_cfg *cfg, sp_sim_comm *out);

/* Model-derived optimizer time of a stage (build/schedule --model): SGD with momentum
 * reads weights, gradients and momentum and writes two of them, at 10 GB/s:
 * 5 · param_bytes / 10⁴ µs. */
double sp_opt_us_estimate(double param_bytes);

#endif
