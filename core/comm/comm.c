/* comm.c — the communicator front end: dispatch to the implementation, waits with a
 * deadline, the one-line failure, and the serial (one-rank) implementation that builds
 * without MPI link. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sched.h>
#include <unistd.h>
#include "core/comm/comm.h"
#include "core/error.h"
#include "core/threads.h"

/* comm_mpi.c (NULL hooks without MPI) */
sp_comm *sp_comm_mpi_world(int *argc, char ***argv);
void sp_comm_mpi_finalize(void);
_Noreturn void sp_comm_mpi_abort(int code);

static double g_timeout = 60.0;
static bool g_timeout_set;
static char g_label[160];
static double g_wait_s;

/* ---- serial: one rank -------------------------------------------------------------------- */

static sp_comm *serial_split(sp_comm *c, int color, int key);
static void serial_free(sp_comm *c) { free(c); }
static void serial_done(sp_comm *c, sp_req *r, const char *op, size_t n)
{
    *r = (sp_req){.comm = c, .op = op, .peer = -1, .count = n, .active = true};
}
static void serial_iallreduce(sp_comm *c, float *buf, size_t n, sp_req *r) { serial_done(c, r, "allreduce", n); }
static void serial_ireduce_scatter(sp_comm *c, const float *in, float *out, size_t n, sp_req *r)
{
    if (out != in) memmove(out, in, n * sizeof *out);
    serial_done(c, r, "reduce_scatter", n);
}
static void serial_iallgather(sp_comm *c, const float *in, float *out, size_t n, sp_req *r)
{
    if (out != in) memmove(out, in, n * sizeof *out);
    serial_done(c, r, "allgather", n);
}
static void serial_ibroadcast(sp_comm *c, float *buf, size_t n, int root, sp_req *r)
{
    serial_done(c, r, "broadcast", n);
}
static void serial_ireduce(sp_comm *c, float *buf, size_t n, int root, sp_req *r) { serial_done(c, r, "reduce", n); }
static void serial_isend(sp_comm *c, const float *buf, size_t n, int dst, int tag, sp_req *r)
{
    sp_comm_die(c, "send of %zu floats to rank %d: a one-rank communicator has no peer", n, dst);
}
static void serial_irecv(sp_comm *c, float *buf, size_t n, int src, int tag, sp_req *r)
{
    sp_comm_die(c, "recv of %zu floats from rank %d: a one-rank communicator has no peer", n, src);
}
static bool serial_test(sp_req *r) { return true; }

static const sp_comm_ops SERIAL_OPS = {
    .name = "serial", .split = serial_split, .free = serial_free, .iallreduce = serial_iallreduce,
    .ireduce_scatter = serial_ireduce_scatter, .iallgather = serial_iallgather,
    .ibroadcast = serial_ibroadcast, .ireduce = serial_ireduce, .isend = serial_isend,
    .irecv = serial_irecv, .test = serial_test,
};

static sp_comm *serial_split(sp_comm *c, int color, int key)
{
    if (color < 0) return NULL;
    sp_comm *s = sp_xcalloc(1, sizeof *s);
    *s = (sp_comm){.ops = &SERIAL_OPS, .rank = 0, .size = 1, .world_rank = c->world_rank};
    return s;
}

static sp_comm g_serial_world = {.ops = &SERIAL_OPS, .rank = 0, .size = 1};
static sp_comm *g_world = &g_serial_world;

/* The ranks of this job on this node: Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE, else the
 * whole world is taken to share it. */
static long node_ranks(void)
{
    const char *env = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    long ranks = env ? strtol(env, NULL, 10) : sp_comm_size(g_world);
    return ranks > 0 ? ranks : 1;
}

/* ---- the world ------------------------------------------------------------------------- */

void sp_comm_init(int *argc, char ***argv)
{
    if (!g_timeout_set) {
        const char *env = getenv("SCANPROP_COMM_TIMEOUT");
        if (env) {
            char *end;
            double t = strtod(env, &end);
            if (*end || !(t > 0)) sp_fail("SCANPROP_COMM_TIMEOUT=%s: expected seconds > 0", env);
            g_timeout = t;
        }
    }
    if (g_world != &g_serial_world) return;
    sp_comm *w = sp_comm_mpi_world(argc, argv);
    if (w) g_world = w;
    sp_parallel_set_node_procs((int)node_ranks());   /* the pool's threads stop spinning if they outnumber the cores */
}

sp_comm *sp_comm_world(void) { return g_world; }

void sp_comm_finalize(void)
{
    if (g_world == &g_serial_world) return;
    sp_comm_mpi_finalize();
    g_world = &g_serial_world;
}

static _Noreturn void vdie(sp_comm *c, bool print, const char *fmt, va_list ap)
{
    fflush(stdout);
    if (print) {
        char msg[768];
        vsnprintf(msg, sizeof msg, fmt, ap);
        fprintf(stderr, "scanprop: rank %d: %s\n", c ? c->world_rank : 0, msg);
        fflush(stderr);
    }
    if (g_world != &g_serial_world) sp_comm_mpi_abort(SP_EXIT_USAGE);
    exit(SP_EXIT_USAGE);
}

void sp_comm_die(sp_comm *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vdie(c ? c : g_world, true, fmt, ap);
}

void sp_comm_fail_all(sp_comm *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    if (sp_comm_rank(c) == 0) {
        fputs("scanprop: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        fflush(stderr);
    }
    va_end(ap);
    /* Every rank found the same problem: leave without a collective and without
     * MPI_Abort's banner. */
    sp_comm_mpi_finalize();
    exit(SP_EXIT_USAGE);
}

sp_comm *sp_comm_split(sp_comm *c, int color, int key) { return c->ops->split(c, color, key); }

void sp_comm_free(sp_comm *c)
{
    if (c && c != g_world) c->ops->free(c);
}

/* ---- deadlines --------------------------------------------------------------------------- */

void sp_comm_set_timeout(double seconds)
{
    if (!(seconds > 0)) sp_fail("--comm-timeout %g: expected seconds > 0", seconds);
    g_timeout = seconds;
    g_timeout_set = true;
}

double sp_comm_timeout(void) { return g_timeout; }

void sp_comm_set_label(const char *label)
{
    snprintf(g_label, sizeof g_label, "%s", label ? label : "");
}

double sp_comm_wait_seconds(void) { return g_wait_s; }

bool sp_test(sp_req *r)
{
    if (!r->active) return true;
    if (!r->comm->ops->test(r)) return false;
    r->active = false;
    return true;
}

static void describe(const sp_req *r, char *buf, size_t len)
{
    const sp_comm *c = r->comm;
    int n = snprintf(buf, len, "%s of %zu floats", r->op, r->count);
    if (r->peer >= 0 && n > 0 && (size_t)n < len) {
        const char *rel = strcmp(r->op, "send") == 0 ? "to" : strcmp(r->op, "recv") == 0 ? "from" : "root";
        n += snprintf(buf + n, len - (size_t)n, " %s rank %d", rel, r->peer);
    }
    if (n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, " on a communicator of %d ranks", c->size);
}

/* This node runs more threads (its ranks × --threads) than it has online cores. */
static bool node_oversubscribed(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return cores >= 1 && node_ranks() * sp_get_threads() > cores;
}

/* When this node runs more threads (its ranks × --threads) than it has online cores, a
 * peer that does not answer in time may only be starved of CPU: say so in the timeout's
 * line. Empty when the node is not oversubscribed. */
static void oversubscription_hint(char *buf, size_t len)
{
    buf[0] = 0;
    if (!node_oversubscribed()) return;
    long ranks = node_ranks(), cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = sp_get_threads();
    snprintf(buf, len,
             ", or, likely here, is starved of CPU: this node is oversubscribed, %ld ranks x %d thread%s on %ld "
             "online cores; raise --comm-timeout or run fewer ranks or --threads",
             ranks, threads, threads == 1 ? "" : "s", cores);
}

void sp_wait(sp_req *r)
{
    if (!r->active) return;
    double t0 = sp_now(), deadline = t0 + g_timeout;
    long polls = 0;
    bool may_sleep = false;   /* asked once per wait, when the polls run long */
    while (!sp_test(r)) {
        double now = sp_now();
        if (now > deadline) {
            char what[200], hint[256];
            describe(r, what, sizeof what);
            oversubscription_hint(hint, sizeof hint);
            sp_comm_die(r->comm, "%s%s%s: no answer within %g s (a peer died, hung or runs a different schedule%s)",
                        what, g_label[0] ? " during " : "", g_label, g_timeout, hint);
        }
        /* Spin briefly (a neighbour's message is often microseconds away), then yield the
         * core. Sleep between polls only when ranks may outnumber cores (--oversubscribe):
         * Open MPI's non-blocking collectives (libnbc) and rendezvous-size messages move
         * only inside a poll, so a 50-µs sleep per poll made a 25-MB reduce take 0.5 s. */
        if (++polls == 256) may_sleep = node_oversubscribed();
        if (polls < 64) {
            sp_cpu_relax();
        } else if (polls < 256 || !may_sleep) {
            sched_yield();
        } else {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
    }
    g_wait_s += sp_now() - t0;
}

void sp_wait_all(sp_req *r, int n)
{
    for (int i = 0; i < n; i++) sp_wait(&r[i]);
}

/* ---- operations ------------------------------------------------------------------------ */

void sp_iallreduce(sp_comm *c, float *buf, size_t n, sp_req *r) { c->ops->iallreduce(c, buf, n, r); }
void sp_ireduce_scatter(sp_comm *c, const float *in, float *out, size_t n, sp_req *r)
{
    c->ops->ireduce_scatter(c, in, out, n, r);
}
void sp_iallgather(sp_comm *c, const float *in, float *out, size_t n, sp_req *r)
{
    c->ops->iallgather(c, in, out, n, r);
}
void sp_ibroadcast(sp_comm *c, float *buf, size_t n, int root, sp_req *r) { c->ops->ibroadcast(c, buf, n, root, r); }
void sp_ireduce(sp_comm *c, float *buf, size_t n, int root, sp_req *r) { c->ops->ireduce(c, buf, n, root, r); }
void sp_isend(sp_comm *c, const float *buf, size_t n, int dst, int tag, sp_req *r)
{
    c->ops->isend(c, buf, n, dst, tag, r);
}
void sp_irecv(sp_comm *c, float *buf, size_t n, int src, int tag, sp_req *r) { c->ops->irecv(c, buf, n, src, tag, r); }

void sp_allreduce(sp_comm *c, float *buf, size_t n)
{
    sp_req r;
    sp_iallreduce(c, buf, n, &r);
    sp_wait(&r);
}

void sp_reduce_scatter(sp_comm *c, const float *in, float *out, size_t n)
{
    sp_req r;
    sp_ireduce_scatter(c, in, out, n, &r);
    sp_wait(&r);
}

void sp_allgather(sp_comm *c, const float *in, float *out, size_t n)
{
    sp_req r;
    sp_iallgather(c, in, out, n, &r);
    sp_wait(&r);
}

void sp_broadcast(sp_comm *c, float *buf, size_t n, int root)
{
    sp_req r;
    sp_ibroadcast(c, buf, n, root, &r);
    sp_wait(&r);
}

void sp_reduce(sp_comm *c, float *buf, size_t n, int root)
{
    sp_req r;
    sp_ireduce(c, buf, n, root, &r);
    sp_wait(&r);
}

void sp_barrier(sp_comm *c)
{
    /* An allreduce of one float: it goes through sp_wait, so a missing rank times out. */
    float x = 0;
    sp_allreduce(c, &x, 1);
}

void sp_send(sp_comm *c, const sp_tensor *t, int dst, int tag)
{
    sp_req r;
    sp_isend(c, t->data, t->numel, dst, tag, &r);
    sp_wait(&r);
}

void sp_recv(sp_comm *c, sp_tensor *t, int src, int tag)
{
    sp_req r;
    sp_irecv(c, t->data, t->numel, src, tag, &r);
    sp_wait(&r);
}

double sp_comm_sum_double(sp_comm *c, double v)
{
    /* Two floats carry the value exactly enough for statistics (hi + lo). */
    float hl[2] = {(float)v, (float)(v - (double)(float)v)};
    sp_allreduce(c, hl, 2);
    return (double)hl[0] + (double)hl[1];
}

#ifndef SP_HAVE_NCCL
sp_comm *sp_comm_nccl_new(sp_comm *over, int device) { return NULL; }
#endif
