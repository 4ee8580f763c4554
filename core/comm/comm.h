/* comm.h — communication between processes: Open MPI on CPU ranks, NCCL on GPUs.
 *
 * The executor (schedulers/exec/exec.c) talks only to this interface. A communicator is a
 * set of ranks; the world holds them all and sp_comm_split makes sub-communicators
 * (the groups of the looped schemes, the replicas of a stage). Every buffer is float32
 * and reductions are sums.
 *
 *   sp_comm_init(&argc, &argv);                 // MPI_Init (a no-op in a serial build)
 *   sp_comm *w = sp_comm_world();
 *   sp_allreduce(w, grad, n);                   // blocking, in place
 *   sp_req r;  sp_iallreduce(w, grad, n, &r);   // non-blocking ...
 *   sp_wait(&r);                                // ... finished here
 *   sp_comm_finalize();
 *
 * Nothing waits forever. Every wait polls its request against a deadline (the timeout,
 * sp_comm_set_timeout, default 60 s or $SCANPROP_COMM_TIMEOUT). When the deadline
 * passes, or MPI reports an error (the world runs with MPI_ERRORS_RETURN), the rank
 * prints ONE line naming itself, the operation, the peer and the step's label
 * (sp_comm_set_label), then the whole job stops with exit status 2. A peer process that
 * dies is noticed by mpirun, which ends the other ranks at once.
 *
 * Implementations: core/comm/comm_mpi.c (Open MPI, built when mpicc is found or MPI=1),
 * core/comm/comm.c (the front end and the one-rank implementation a build without MPI runs
 * on), core/comm/comm_nccl.cu
 * (NCCL on device buffers, CUDA=1 and MPI: the NCCL communicator is bootstrapped from
 * an MPI one). All three fill the same table of functions, sp_comm_ops. */
#ifndef SP_COMM_H
#define SP_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include "core/tensor.h"

typedef struct sp_comm sp_comm;

/* A request of a non-blocking operation, owned by the caller (no allocation). */
typedef struct sp_req {
    void *impl[4];         /* the implementation's handle (MPI_Request, cudaEvent_t, …) */
    sp_comm *comm;
    const char *op;        /* "allreduce", "send", … — for the timeout line              */
    int peer;              /* the other rank of a send/recv, the root of a broadcast, −1 */
    size_t count;          /* floats                                                      */
    bool active;
} sp_req;

/* The table every implementation fills. */
typedef struct sp_comm_ops {
    const char *name;      /* "mpi", "serial", "nccl" */
    sp_comm *(*split)(sp_comm *c, int color, int key);
    void (*free)(sp_comm *c);
    void (*iallreduce)(sp_comm *c, float *buf, size_t n, sp_req *r);
    void (*ireduce_scatter)(sp_comm *c, const float *in, float *out, size_t n, sp_req *r);
    void (*iallgather)(sp_comm *c, const float *in, float *out, size_t n, sp_req *r);
    void (*ibroadcast)(sp_comm *c, float *buf, size_t n, int root, sp_req *r);
    void (*ireduce)(sp_comm *c, float *buf, size_t n, int root, sp_req *r);
    void (*isend)(sp_comm *c, const float *buf, size_t n, int dst, int tag, sp_req *r);
    void (*irecv)(sp_comm *c, float *buf, size_t n, int src, int tag, sp_req *r);
    /* true when r has finished; false while it runs; failures call sp_comm_die. */
    bool (*test)(sp_req *r);
} sp_comm_ops;

struct sp_comm {
    const sp_comm_ops *ops;
    int rank, size;
    int world_rank;        /* this process's rank in the world (for messages)           */
    void *handle;          /* MPI_Comm, ncclComm_t, …                                    */
    void *extra;
};

/* ---- the world ---------------------------------------------------------------------- */

/* Initialises MPI when this build has it (idempotent). Apps call it only when a
 * --parallel scheme is asked for, so a plain run never starts MPI. */
void sp_comm_init(int *argc, char ***argv);
/* Whether this build was linked with MPI. */
bool sp_comm_have_mpi(void);
/* The world: every rank (size 1 before sp_comm_init or without MPI). */
sp_comm *sp_comm_world(void);
void sp_comm_finalize(void);
/* Ends every rank of the job with exit status 2 after printing
 * "scanprop: rank R: <message>" (one line). */
void sp_comm_die(sp_comm *c, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
/* Called on every rank: the line is printed by rank 0 only, then all exit 2 without
 * waiting for each other (a configuration error every rank detects alike). */
void sp_comm_fail_all(sp_comm *c, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));

static inline int sp_comm_rank(const sp_comm *c) { return c ? c->rank : 0; }
static inline int sp_comm_size(const sp_comm *c) { return c ? c->size : 1; }

/* A sub-communicator of the ranks of c with the same color, ordered by key. Collective
 * over c. color < 0: this rank joins none and gets NULL. */
sp_comm *sp_comm_split(sp_comm *c, int color, int key);
void sp_comm_free(sp_comm *c);

/* ---- deadlines and accounting -------------------------------------------------------- */

/* Seconds a wait may last before the job stops (> 0). */
void sp_comm_set_timeout(double seconds);
double sp_comm_timeout(void);
/* A short description of what the caller is doing ("step 3, f2b activation"), printed
 * in the timeout line. The string is copied. */
void sp_comm_set_label(const char *label);
/* Seconds spent inside sp_wait / blocking calls since the start (comm_ms of the JSON). */
double sp_comm_wait_seconds(void);

/* ---- operations (floats, sums) --------------------------------------------------------- */
/* Non-blocking: start, then sp_wait / sp_test. Buffers must stay untouched until done. */
void sp_iallreduce(sp_comm *c, float *buf, size_t n, sp_req *r);
/* in: n·size floats, rank i's block is in[i·n .. (i+1)·n); out: the sum of block `rank`. */
void sp_ireduce_scatter(sp_comm *c, const float *in, float *out, size_t n, sp_req *r);
/* in: n floats; out: n·size floats, block i from rank i. */
void sp_iallgather(sp_comm *c, const float *in, float *out, size_t n, sp_req *r);
void sp_ibroadcast(sp_comm *c, float *buf, size_t n, int root, sp_req *r);
/* The sum lands in root's buf; the other ranks' buf is left as it was. */
void sp_ireduce(sp_comm *c, float *buf, size_t n, int root, sp_req *r);
void sp_isend(sp_comm *c, const float *buf, size_t n, int dst, int tag, sp_req *r);
void sp_irecv(sp_comm *c, float *buf, size_t n, int src, int tag, sp_req *r);

/* Polls until r finishes or the timeout passes (then: one line, exit 2 everywhere).
 * A request that is not active returns at once. */
void sp_wait(sp_req *r);
void sp_wait_all(sp_req *r, int n);
bool sp_test(sp_req *r);

/* Blocking forms: the non-blocking operation and sp_wait. */
void sp_allreduce(sp_comm *c, float *buf, size_t n);
void sp_reduce_scatter(sp_comm *c, const float *in, float *out, size_t n);
void sp_allgather(sp_comm *c, const float *in, float *out, size_t n);
void sp_broadcast(sp_comm *c, float *buf, size_t n, int root);
void sp_reduce(sp_comm *c, float *buf, size_t n, int root);
void sp_barrier(sp_comm *c);
/* Tensors: the element count must match on both sides (the receiver's shape). */
void sp_send(sp_comm *c, const sp_tensor *t, int dst, int tag);
void sp_recv(sp_comm *c, sp_tensor *t, int src, int tag);
/* A double, summed / maximised over the ranks (small statistics: busy time, loss). */
double sp_comm_sum_double(sp_comm *c, double v);

/* ---- NCCL (CUDA=1) ---------------------------------------------------------------------- */
/* A NCCL communicator over the same ranks as `over` (an MPI communicator), buffers on
 * the device. NULL in builds without NCCL. */
sp_comm *sp_comm_nccl_new(sp_comm *over, int device);

#endif
