/* comm_nccl.cu — the NCCL implementation of core/comm/comm.h: the same operations on device
 * buffers (CUDA=1; compile-checked here, run where a GPU is).
 *
 * sp_comm_nccl_new(over, device) bootstraps a NCCL communicator over the ranks of an
 * existing (MPI) communicator: rank 0 makes the ncclUniqueId and broadcasts it with
 * over's own broadcast. Every operation is enqueued on the communicator's stream and
 * records a CUDA event in the request; sp_test polls that event, and while it is not
 * done asks NCCL for an asynchronous error, so a peer that died becomes the one line of
 * sp_comm_die (and sp_wait's deadline covers a peer that hangs). NCCL has no message
 * tags: point-to-point messages between two ranks match in the order they were issued,
 * which the executor's schedule keeps identical on both sides. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>
extern "C" {
#include "core/comm/comm.h"
#include "core/error.h"

/* From core/kernels/cuda.h (whose library headers this file does not need): the
 * backend then waits for the whole device where it would ask its own streams. */
void sp_cuda_foreign_stream(void);
}

#ifdef SP_HAVE_NCCL

struct nccl_state {
    ncclComm_t comm;
    cudaStream_t stream;
};

static nccl_state *st(const sp_comm *c) { return (nccl_state *)c->handle; }

static void check_nccl(sp_comm *c, ncclResult_t rc, const char *op)
{
    if (rc != ncclSuccess && rc != ncclInProgress) sp_comm_die(c, "%s failed: %s", op, ncclGetErrorString(rc));
}

static void check_cuda(sp_comm *c, cudaError_t rc, const char *op)
{
    if (rc != cudaSuccess) sp_comm_die(c, "%s failed: %s", op, cudaGetErrorString(rc));
}

static void start(sp_comm *c, sp_req *r, const char *op, int peer, size_t n)
{
    *r = sp_req{};
    r->comm = c;
    r->op = op;
    r->peer = peer;
    r->count = n;
    r->active = true;
}

/* The event that marks the end of what was just enqueued. */
static void finish(sp_comm *c, sp_req *r)
{
    cudaEvent_t ev;
    check_cuda(c, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(c, cudaEventRecord(ev, st(c)->stream), "cudaEventRecord");
    r->impl[0] = (void *)ev;
}

static const sp_comm_ops *nccl_ops(void);

static sp_comm *wrap(ncclComm_t comm, cudaStream_t stream, int world_rank)
{
    sp_comm *c = (sp_comm *)sp_xcalloc(1, sizeof *c);
    nccl_state *s = (nccl_state *)sp_xcalloc(1, sizeof *s);
    s->comm = comm;
    s->stream = stream;
    c->ops = nccl_ops();
    c->handle = s;
    c->world_rank = world_rank;
    ncclCommUserRank(comm, &c->rank);
    ncclCommCount(comm, &c->size);
    return c;
}

static sp_comm *nccl_split(sp_comm *c, int color, int key)
{
    ncclComm_t out = NULL;
    check_nccl(c, ncclCommSplit(st(c)->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &out, NULL), "commSplit");
    if (!out) return NULL;
    cudaStream_t s;
    check_cuda(c, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    sp_cuda_foreign_stream();
    return wrap(out, s, c->world_rank);
}

static void nccl_free(sp_comm *c)
{
    nccl_state *s = st(c);
    cudaStreamSynchronize(s->stream);
    ncclCommDestroy(s->comm);
    cudaStreamDestroy(s->stream);
    free(s);
    free(c);
}

static void nccl_iallreduce(sp_comm *c, float *buf, size_t n, sp_req *r)
{
    start(c, r, "allreduce", -1, n);
    check_nccl(c, ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, st(c)->comm, st(c)->stream), "allreduce");
    finish(c, r);
}

static void nccl_ireduce_scatter(sp_comm *c, const float *in, float *out, size_t n, sp_req *r)
{
    start(c, r, "reduce_scatter", -1, n);
    check_nccl(c, ncclReduceScatter(in, out, n, ncclFloat, ncclSum, st(c)->comm, st(c)->stream), "reduce_scatter");
    finish(c, r);
}

static void nccl_iallgather(sp_comm *c, const float *in, float *out, size_t n, sp_req *r)
{
    start(c, r, "allgather", -1, n);
    check_nccl(c, ncclAllGather(in, out, n, ncclFloat, st(c)->comm, st(c)->stream), "allgather");
    finish(c, r);
}

static void nccl_ibroadcast(sp_comm *c, float *buf, size_t n, int root, sp_req *r)
{
    start(c, r, "broadcast", root, n);
    check_nccl(c, ncclBroadcast(buf, buf, n, ncclFloat, root, st(c)->comm, st(c)->stream), "broadcast");
    finish(c, r);
}

static void nccl_ireduce(sp_comm *c, float *buf, size_t n, int root, sp_req *r)
{
    start(c, r, "reduce", root, n);
    check_nccl(c, ncclReduce(buf, buf, n, ncclFloat, ncclSum, root, st(c)->comm, st(c)->stream), "reduce");
    finish(c, r);
}

static void nccl_isend(sp_comm *c, const float *buf, size_t n, int dst, int tag, sp_req *r)
{
    start(c, r, "send", dst, n);
    check_nccl(c, ncclSend(buf, n, ncclFloat, dst, st(c)->comm, st(c)->stream), "send");
    finish(c, r);
}

static void nccl_irecv(sp_comm *c, float *buf, size_t n, int src, int tag, sp_req *r)
{
    start(c, r, "recv", src, n);
    check_nccl(c, ncclRecv(buf, n, ncclFloat, src, st(c)->comm, st(c)->stream), "recv");
    finish(c, r);
}

static bool nccl_test(sp_req *r)
{
    cudaEvent_t ev = (cudaEvent_t)r->impl[0];
    cudaError_t q = cudaEventQuery(ev);
    if (q == cudaSuccess) {
        cudaEventDestroy(ev);
        return true;
    }
    if (q != cudaErrorNotReady) check_cuda(r->comm, q, r->op);
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(st(r->comm)->comm, &async);
    if (async != ncclSuccess && async != ncclInProgress)
        sp_comm_die(r->comm, "%s of %zu floats (peer %d): %s", r->op, r->count, r->peer, ncclGetErrorString(async));
    return false;
}

static const sp_comm_ops NCCL_OPS = {
    "nccl", nccl_split, nccl_free, nccl_iallreduce, nccl_ireduce_scatter, nccl_iallgather,
    nccl_ibroadcast, nccl_ireduce, nccl_isend, nccl_irecv, nccl_test,
};
static const sp_comm_ops *nccl_ops(void) { return &NCCL_OPS; }

extern "C" sp_comm *sp_comm_nccl_new(sp_comm *over, int device)
{
    check_cuda(over, cudaSetDevice(device), "cudaSetDevice");
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (over->rank == 0) check_nccl(over, ncclGetUniqueId(&id), "getUniqueId");
    /* The id travels as floats through the bootstrap communicator (bit patterns kept). */
    size_t nf = (sizeof id + sizeof(float) - 1) / sizeof(float);
    float *buf = (float *)sp_xcalloc(nf, sizeof(float));
    memcpy(buf, &id, sizeof id);
    sp_broadcast(over, buf, nf, 0);
    memcpy(&id, buf, sizeof id);
    free(buf);
    ncclComm_t comm;
    check_nccl(over, ncclCommInitRank(&comm, over->size, id, over->rank), "commInitRank");
    cudaStream_t s;
    check_cuda(over, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    sp_cuda_foreign_stream();
    return wrap(comm, s, over->world_rank);
}

#endif
