/* comm_cost.h — what a message costs: the α–β model of the executor's communication,
 * measured on the ranks (calibration), fitted, stored in a profile file and queried by
 * whoever predicts a step (the simulator's communication jobs).
 *
 * The model. Each operation class the executor issues (sp_comm_op) costs
 *     t(n) = α + n / β          (µs; n bytes; α latency in µs, β bandwidth in bytes/µs)
 * fitted by least squares on the medians of repeated probes, with the error measured
 * relative to each probe (weights 1/t²: a 4-byte message counts as much as a 25 MB one).
 * One line rarely covers bytes to tens of MB on one machine — Open MPI switches from
 * eager to rendezvous sends and shared memory from cache to DRAM — so a fit may be
 * piecewise: up to SP_COMM_MAX_SEGS segments, each an (α, β) from its own from_bytes on,
 * the break points chosen by the fit where they lower the error.
 *
 * Collectives are fitted directly at the rank count they were measured with (the
 * profile's `ranks`): α and β then hold whatever algorithm Open MPI chose there. For
 * another count P, sp_comm_time scales the fitted time by the step counts of the textbook
 * algorithms — ring allreduce 2(P−1)α' + 2(P−1)/P·n/β', binomial-tree broadcast and
 * reduce ⌈log₂ P⌉(α' + n/β'), ring allgather (P−1)(α' + n/β') with n the block of one
 * rank — where α', β' are the per-link figures that reproduce the fit at the measured
 * count. That extrapolation is a model, not a measurement; say so where it is used.
 *
 *   sp_comm_model *cm = sp_comm_model_measure(world, &(sp_comm_probe_cfg){0});  // collective
 *   double us = sp_comm_time(cm, SP_COMM_ALLREDUCE, 4.0 * bucket_floats, W);
 *   sp_check(sp_comm_model_write(cm, "comm.csv"));                             // rank 0
 *   sp_comm_model *again;  sp_check(sp_comm_model_load("comm.csv", &again));
 *
 * For the simulator (a communication lane per rank): a job that sends n floats from one
 * rank to another lasts sp_comm_time(cm, SP_COMM_P2P, 4n, 2) on both ranks' lanes; a
 * bucket's allreduce over a communicator of P ranks lasts sp_comm_time(cm,
 * SP_COMM_ALLREDUCE, 4n, P) on each member's lane, from when the last member started it;
 * an owner's broadcast of a stage's weights / reduce of its gradients likewise with
 * SP_COMM_BROADCAST / SP_COMM_REDUCE; the time scan's sum of the recurrent layer's weight
 * gradients over the ranks is one allreduce (SP_COMM_ALLREDUCE, n its gradient floats);
 * SP_COMM_ALLGATHER (n the floats of one rank's block) is what --clip-grad-norm's and the
 * reports' small allgathers cost. sp_comm_time is pure (no communication, no
 * allocation), safe to call from any thread.
 *
 * The profile file (written by `mpirun -np W build/schedule --calibrate-comm FILE`, read
 * by `--comm-profile FILE`): CSV, lines starting with '#' are comments, a header, then
 * rows of two kinds:
 *     row,op,ranks,bytes,alpha_us,beta_bytes_per_us,us
 *     fit,allreduce,2,0,3.1,5200,            a segment of the fit, from `bytes` on
 *     probe,allreduce,2,4096,,,4.2           a probe: the median time of `bytes`
 * op is one of sp_comm_op_name's. Every fit row's ranks must be the same as the other
 * rows of its op; segments in increasing `bytes`, the first from 0. */
#ifndef SP_COMM_MODEL_H
#define SP_COMM_MODEL_H

#include <stdio.h>
#include "core/comm/comm.h"
#include "core/error.h"

/* The operation classes the executor uses (core/comm/comm.h): send/recv of activations
 * and gradients (and the cross-rank scan's levels); gradient buckets, the loss and the
 * time scan's weight gradients (allreduce); an owner's weights (broadcast) and gradients
 * (reduce); --clip-grad-norm's per-rank norm parts (allgather). */
typedef enum sp_comm_op {
    SP_COMM_P2P = 0,
    SP_COMM_ALLREDUCE,
    SP_COMM_BROADCAST,
    SP_COMM_REDUCE,
    SP_COMM_ALLGATHER,
    SP_COMM_NOPS
} sp_comm_op;

const char *sp_comm_op_name(sp_comm_op op);   /* "p2p", "allreduce", "broadcast", "reduce", "allgather" */
int sp_comm_op_find(const char *name);        /* its sp_comm_op, or −1 */

#define SP_COMM_MAX_SEGS 4

typedef struct sp_comm_seg {
    double from_bytes;       /* this segment applies to n >= from_bytes               */
    double alpha_us;         /* latency                                               */
    double beta;             /* bandwidth, bytes per µs (= MB/s); +inf: no size term  */
} sp_comm_seg;

typedef struct sp_comm_fit {
    int ranks;               /* measured with this many ranks; 0: not measured         */
    int nsegs;
    sp_comm_seg seg[SP_COMM_MAX_SEGS];
    double max_rel_err;      /* the largest |model − probe| / probe over its probes    */
    double median_rel_err;   /* … and the median (a noisy probe moves it less)          */
} sp_comm_fit;

typedef struct sp_comm_probe {
    int op, ranks;
    double bytes;
    double us;               /* median over the repetitions                           */
} sp_comm_probe;

typedef struct sp_comm_model {
    sp_comm_fit fit[SP_COMM_NOPS];
    sp_comm_probe *probes;
    int nprobes;
    char source[256];        /* the profile's path, or "probe"                         */
    double probe_ms;         /* wall time the measurement took (0 when read)            */
} sp_comm_model;

/* Weighted least squares of t = α + n/β on n points (bytes[i], us[i] > 0), error relative
 * to each point, α >= 0 and β > 0 (a negative coefficient is refitted with it at 0:
 * β = +inf when the sizes explain nothing). With max_segs > 1 the points (sorted by
 * bytes) may be split into up to max_segs ranges of at least 2 points each, where that
 * lowers the sum of squared relative errors by more than a tenth. SP_ERR on fewer than 2 points. */
int sp_comm_fit_ab(const double *bytes, const double *us, int n, int max_segs, sp_comm_fit *out) SP_MUST_CHECK;
/* The fit's time for n bytes at the fit's own rank count. */
double sp_comm_fit_time(const sp_comm_fit *f, double bytes);

/* µs that op on `bytes` bytes takes on a communicator of `ranks` ranks (scaled from the
 * measured count as above; 0 for a collective of one rank; p2p ignores ranks). An op
 * the model did not measure: NAN. */
double sp_comm_time(const sp_comm_model *m, sp_comm_op op, double bytes, int ranks);

typedef struct sp_comm_probe_cfg {
    double min_bytes;        /* smallest message (0: 4 bytes)                          */
    double max_bytes;        /* largest (0: 25 MB, the default gradient bucket)        */
    double factor;           /* geometric step between sizes (0: 4)                    */
    int reps;                /* repetitions per size, the median kept (0: 7)           */
    unsigned ops;            /* bit (1 << op) per op to measure (0: every op)          */
} sp_comm_probe_cfg;

/* Measures every chosen op on c (collective over c: every rank calls it alike, and
 * every rank gets the same model: rank 0's timings, broadcast). p2p is a ping-pong
 * between ranks 0 and 1 (half the round trip); a collective is timed on rank 0 after a
 * barrier, per repetition. A one-rank communicator measures nothing (every fit's ranks
 * stays 0). */
sp_comm_model *sp_comm_model_measure(sp_comm *c, const sp_comm_probe_cfg *cfg);
/* The short probe a --parallel run takes when no --comm-profile is given: sizes 4 B to
 * 256 KiB by factors of 8, 3 repetitions, p2p and allreduce (tens of ms). */
sp_comm_model *sp_comm_model_quick(sp_comm *c);

/* The profile file (format above): written atomically; read with sp_open_read, a bad
 * row refused as "FILE:LINE: <problem> (expected ...)". */
int sp_comm_model_write(const sp_comm_model *m, const char *path) SP_MUST_CHECK;
void sp_comm_model_print_csv(FILE *f, const sp_comm_model *m);
int sp_comm_model_load(const char *path, sp_comm_model **out) SP_MUST_CHECK;
/* One line: "p2p alpha 1.2 us beta 3.1e+03 B/us (max err 4%); allreduce ..." */
void sp_comm_model_summary(const sp_comm_model *m, char *buf, size_t len);
void sp_comm_model_free(sp_comm_model *m);

/* ---- topology: ranks on nodes, two link classes ---------------------------------------
 *
 * Beyond the measured machine, a cluster is described by its nodes and two links: the
 * one between ranks of the same node (NVLink, shared memory) and the one between nodes
 * (InfiniBand, Ethernet). Rank r lives on node r / ranks_per_node. Each link is an α–β
 * pair: latency α µs, bandwidth β bytes per µs (1 GB/s = 1000 B/µs). inter's β is what
 * one node can send to another at once (all its NICs together).
 *
 * The cost of an op over a set of n ranks spanning k nodes, at most m of them on one node:
 *   p2p (two ranks)       the link between them: α + bytes/β
 *   k = 1                 the textbook algorithm on the intra link (ring allreduce
 *                         2(n−1)(α + bytes/(nβ)); binomial broadcast/reduce
 *                         ⌈log₂ n⌉(α + bytes/β); ring allgather (n−1)(α + b/β), b the
 *                         block of one rank)
 *   allreduce, k > 1      the cheaper of a flat ring over all n ranks, every step bounded
 *                         by its slowest link (inter): 2(n−1)(α_e + bytes/(nβ_e)), and
 *                         the hierarchical form NCCL and Open MPI's han use — ring
 *                         reduce-scatter in each node, m concurrent rings across the k
 *                         nodes on 1/m of the data each (sharing the node's β_e), ring
 *                         allgather in each node:
 *                             2(m−1)(α_i + bytes/(mβ_i)) + 2(k−1)(α_e + bytes/(kβ_e))
 *   broadcast/reduce      binomial trees across nodes, then within them:
 *                             ⌈log₂ k⌉(α_e + bytes/β_e) + ⌈log₂ m⌉(α_i + bytes/β_i)
 *   allgather, k > 1      ring bounded by the slowest link: (n−1)(α_e + b/β_e)
 * No contention between different collectives is modelled; that is a prediction's
 * simplification, not a measurement. */
typedef struct sp_comm_link {
    double alpha_us;         /* latency, µs                                            */
    double beta;             /* bandwidth, bytes per µs (GB/s × 1000)                   */
} sp_comm_link;

typedef struct sp_comm_topology {
    int nodes, ranks_per_node;   /* 0 nodes: no topology (sp_comm_time_ranks uses the model) */
    sp_comm_link intra, inter;
} sp_comm_topology;

/* SP_OK, or SP_ERR with a one-line reason (nodes or ranks per node < 1, a latency < 0
 * or not finite, a bandwidth <= 0 or not finite) and `what` (a flag name or a path) first. */
int sp_comm_topology_check(const sp_comm_topology *t, const char *what) SP_MUST_CHECK;
/* The node of world rank r. */
int sp_comm_topology_node(const sp_comm_topology *t, int rank);

/* µs that op on `bytes` bytes takes over a set of n world ranks: ranks[0..n) when ranks
 * is not NULL, else first, first+1, …, first+n−1. With a topology (t && t->nodes > 0)
 * the cost is the topology's (above; m is not used and may be NULL); without one it is
 * sp_comm_time(m, op, bytes, n). p2p needs n = 2 (the two ends); a collective of one
 * rank costs 0; a rank outside the topology (>= nodes × ranks_per_node): NAN. Pure. */
double sp_comm_time_ranks(const sp_comm_model *m, sp_comm_op op, double bytes, const int *ranks, int first, int n,
                          const sp_comm_topology *t);

/* The communication of one step of schedule s, added up per worker (µs, into
 * per_worker[0..s->workers)): every stage's gradient synchronisation as the executor
 * does it (replicas: allreduce of buckets of up to bucket_bytes, consecutive stages of
 * one rank set in backward order; one owner: broadcast of the weights + reduce of the
 * gradients over the computing ranks and the owner), and each activation / ∂l/∂y that
 * crosses workers (p2p of the receiving stage's act_bytes, an upper bound). Costs from
 * sp_comm_time_ranks(m, …, t); c must be in µs (--model, or a profile in µs). No
 * timeline (sim_comm.h's sp_simulate_comm with cfg.topo is the timeline): the step lies between compute + max(per_worker) (nothing overlaps) and
 * max(compute, max(per_worker)) (everything does). comm_cost_account.c. */
struct sp_schedule;
struct sp_costs;
void sp_comm_step_account(const struct sp_schedule *s, const struct sp_costs *c, const sp_comm_model *m,
                          const sp_comm_topology *t, double bucket_bytes, double *per_worker);

#endif
