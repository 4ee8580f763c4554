/* comm_mpi.c — the Open MPI implementation of core/comm.h.
 *
 * Built with -DSP_HAVE_MPI (the Makefile finds mpicc); without it, the hooks below say
 * "no MPI" and the one-rank implementation of comm.c is the world. Only the thread that
 * called sp_comm_init calls MPI (MPI_THREAD_FUNNELED); the compute pool never does.
 * Every communicator returns errors (MPI_ERRORS_RETURN) so a failure becomes the one
 * line of sp_comm_die instead of Open MPI's default abort. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/comm/comm.h"
#include "core/error.h"

#ifdef SP_HAVE_MPI
#include <mpi.h>

_Static_assert(sizeof(MPI_Request) <= sizeof(((sp_req *)0)->impl), "sp_req.impl holds an MPI_Request");

static sp_comm *g_mpi_world;

static MPI_Comm mc(const sp_comm *c) { return *(const MPI_Comm *)c->handle; }
static MPI_Request *mreq(sp_req *r) { return (MPI_Request *)r->impl; }

static void check(sp_comm *c, int rc, const char *op)
{
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    sp_comm_die(c, "%s failed: %s", op, msg);
}

static int count_of(sp_comm *c, size_t n, const char *op)
{
    if (n > (size_t)INT_MAX) sp_comm_die(c, "%s of %zu floats: more than INT_MAX per call", op, n);
    return (int)n;
}

static void start(sp_comm *c, sp_req *r, const char *op, int peer, size_t n)
{
    *r = (sp_req){.comm = c, .op = op, .peer = peer, .count = n, .active = true};
    *mreq(r) = MPI_REQUEST_NULL;
}

static sp_comm *wrap(MPI_Comm m);

static sp_comm *mpi_split(sp_comm *c, int color, int key)
{
    MPI_Comm m;
    check(c, MPI_Comm_split(mc(c), color < 0 ? MPI_UNDEFINED : color, key, &m), "comm_split");
    if (m == MPI_COMM_NULL) return NULL;
    check(c, MPI_Comm_set_errhandler(m, MPI_ERRORS_RETURN), "comm_set_errhandler");
    return wrap(m);
}

static void mpi_free(sp_comm *c)
{
    MPI_Comm *m = c->handle;
    if (*m != MPI_COMM_WORLD) MPI_Comm_free(m);
    free(m);
    free(c);
}

static void mpi_iallreduce(sp_comm *c, float *buf, size_t n, sp_req *r)
{
    start(c, r, "allreduce", -1, n);
    check(c, MPI_Iallreduce(MPI_IN_PLACE, buf, count_of(c, n, "allreduce"), MPI_FLOAT, MPI_SUM, mc(c), mreq(r)),
          "allreduce");
}

static void mpi_ireduce_scatter(sp_comm *c, const float *in, float *out, size_t n, sp_req *r)
{
    start(c, r, "reduce_scatter", -1, n);
    check(c, MPI_Ireduce_scatter_block(in, out, count_of(c, n, "reduce_scatter"), MPI_FLOAT, MPI_SUM, mc(c), mreq(r)),
          "reduce_scatter");
}

static void mpi_iallgather(sp_comm *c, const float *in, float *out, size_t n, sp_req *r)
{
    start(c, r, "allgather", -1, n);
    check(c, MPI_Iallgather(in, count_of(c, n, "allgather"), MPI_FLOAT, out, (int)n, MPI_FLOAT, mc(c), mreq(r)),
          "allgather");
}

static void mpi_ibroadcast(sp_comm *c, float *buf, size_t n, int root, sp_req *r)
{
    start(c, r, "broadcast", root, n);
    check(c, MPI_Ibcast(buf, count_of(c, n, "broadcast"), MPI_FLOAT, root, mc(c), mreq(r)), "broadcast");
}

static void mpi_ireduce(sp_comm *c, float *buf, size_t n, int root, sp_req *r)
{
    start(c, r, "reduce", root, n);
    int cnt = count_of(c, n, "reduce");
    if (c->rank == root)
        check(c, MPI_Ireduce(MPI_IN_PLACE, buf, cnt, MPI_FLOAT, MPI_SUM, root, mc(c), mreq(r)), "reduce");
    else
        check(c, MPI_Ireduce(buf, NULL, cnt, MPI_FLOAT, MPI_SUM, root, mc(c), mreq(r)), "reduce");
}

static void mpi_isend(sp_comm *c, const float *buf, size_t n, int dst, int tag, sp_req *r)
{
    start(c, r, "send", dst, n);
    if (dst < 0 || dst >= c->size || dst == c->rank)
        sp_comm_die(c, "send to rank %d: expected another rank in [0, %d)", dst, c->size);
    check(c, MPI_Isend(buf, count_of(c, n, "send"), MPI_FLOAT, dst, tag, mc(c), mreq(r)), "send");
}

static void mpi_irecv(sp_comm *c, float *buf, size_t n, int src, int tag, sp_req *r)
{
    start(c, r, "recv", src, n);
    if (src < 0 || src >= c->size || src == c->rank)
        sp_comm_die(c, "recv from rank %d: expected another rank in [0, %d)", src, c->size);
    check(c, MPI_Irecv(buf, count_of(c, n, "recv"), MPI_FLOAT, src, tag, mc(c), mreq(r)), "recv");
}

static bool mpi_test(sp_req *r)
{
    int done = 0;
    MPI_Status st;
    int rc = MPI_Test(mreq(r), &done, &st);
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        sp_comm_die(r->comm, "%s of %zu floats (peer %d): %s", r->op, r->count, r->peer, msg);
    }
    if (done && strcmp(r->op, "recv") == 0) {
        int got = 0;
        MPI_Get_count(&st, MPI_FLOAT, &got);
        if ((size_t)got != r->count)
            sp_comm_die(r->comm, "recv from rank %d: %d floats arrived, %zu expected (the ranks disagree on a shape)",
                        r->peer, got, r->count);
    }
    return done != 0;
}

static const sp_comm_ops MPI_OPS = {
    .name = "mpi", .split = mpi_split, .free = mpi_free, .iallreduce = mpi_iallreduce,
    .ireduce_scatter = mpi_ireduce_scatter, .iallgather = mpi_iallgather, .ibroadcast = mpi_ibroadcast,
    .ireduce = mpi_ireduce, .isend = mpi_isend, .irecv = mpi_irecv, .test = mpi_test,
};

static sp_comm *wrap(MPI_Comm m)
{
    sp_comm *c = sp_xcalloc(1, sizeof *c);
    MPI_Comm *h = sp_xmalloc(sizeof *h);
    *h = m;
    c->ops = &MPI_OPS;
    c->handle = h;
    MPI_Comm_rank(m, &c->rank);
    MPI_Comm_size(m, &c->size);
    int wr = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &wr);
    c->world_rank = wr;
    return c;
}

sp_comm *sp_comm_mpi_world(int *argc, char ***argv)
{
    if (g_mpi_world) return g_mpi_world;
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        sp_fail("MPI_Init failed (run under mpirun, or without --parallel)");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    g_mpi_world = wrap(MPI_COMM_WORLD);
    return g_mpi_world;
}

void sp_comm_mpi_finalize(void)
{
    if (!g_mpi_world) return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
    free(g_mpi_world->handle);
    free(g_mpi_world);
    g_mpi_world = NULL;
}

_Noreturn void sp_comm_mpi_abort(int code)
{
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (inited && !fin) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

bool sp_comm_have_mpi(void) { return true; }

#else /* no MPI in this build */

sp_comm *sp_comm_mpi_world(int *argc, char ***argv) { return NULL; }
void sp_comm_mpi_finalize(void) {}
_Noreturn void sp_comm_mpi_abort(int code) { exit(code); }
bool sp_comm_have_mpi(void) { return false; }

#endif
