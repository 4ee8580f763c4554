/* comm_worker — the program tests/test_comm.c runs under mpirun.
 *
 *   comm_worker ops       every operation of core/comm/comm.h, checked against values each
 *                         rank computes itself; rank 0 prints "ok <n> ranks"
 *   comm_worker groups    sub-communicators: split by rank % 2, allreduce inside each
 *   comm_worker hang      rank 1 stops answering; the others must time out (exit 2)
 *   comm_worker exit      rank 1 exits in the middle of a step; the job must end
 *
 * Exits 1 with a line naming the rank and the check on a wrong value. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/comm/comm.h"

static int failures;

#define CHECK(cond, ...)                                                          \
    do {                                                                          \
        if (!(cond)) {                                                            \
            fprintf(stderr, "comm_worker rank %d: ", sp_comm_rank(sp_comm_world())); \
            fprintf(stderr, __VA_ARGS__);                                         \
            fputc('\n', stderr);                                                  \
            failures++;                                                           \
        }                                                                         \
    } while (0)

/* A value every rank can recompute: rank r's element i. */
static float val(int r, size_t i) { return (float)(r + 1) * 0.5f + (float)i; }

static void ops(sp_comm *w)
{
    int R = w->rank, W = w->size;
    enum { N = 1000 };
    float *a = malloc(sizeof(float) * N * (size_t)W), *b = malloc(sizeof(float) * N * (size_t)W);

    /* allreduce, blocking and not */
    for (size_t i = 0; i < N; i++) a[i] = val(R, i);
    sp_allreduce(w, a, N);
    for (size_t i = 0; i < N; i++) {
        float want = 0;
        for (int r = 0; r < W; r++) want += val(r, i);
        CHECK(fabsf(a[i] - want) <= 1e-5f * fabsf(want), "allreduce[%zu] = %g, want %g", i, a[i], want);
    }
    sp_req req[2];
    for (size_t i = 0; i < N; i++) a[i] = (float)R, b[i] = 1.0f;
    sp_iallreduce(w, a, N, &req[0]);
    sp_iallreduce(w, b, N, &req[1]);
    sp_wait_all(req, 2);
    CHECK(a[N - 1] == (float)(W * (W - 1) / 2) && b[0] == (float)W, "iallreduce: %g %g", a[N - 1], b[0]);

    /* reduce_scatter: block k of rank r is val(r, k·N + i) */
    for (int k = 0; k < W; k++)
        for (size_t i = 0; i < N; i++) a[(size_t)k * N + i] = val(R, (size_t)k * N + i);
    sp_reduce_scatter(w, a, b, N);
    for (size_t i = 0; i < N; i++) {
        float want = 0;
        for (int r = 0; r < W; r++) want += val(r, (size_t)R * N + i);
        CHECK(fabsf(b[i] - want) <= 1e-5f * fabsf(want), "reduce_scatter[%zu] = %g, want %g", i, b[i], want);
    }

    /* allgather */
    for (size_t i = 0; i < N; i++) a[i] = val(R, i);
    sp_allgather(w, a, b, N);
    for (int r = 0; r < W; r++)
        for (size_t i = 0; i < N; i += 97)
            CHECK(b[(size_t)r * N + i] == val(r, i), "allgather block %d [%zu] = %g", r, i, b[(size_t)r * N + i]);

    /* broadcast from the last rank */
    for (size_t i = 0; i < N; i++) a[i] = R == W - 1 ? val(W - 1, i) : -1.0f;
    sp_broadcast(w, a, N, W - 1);
    CHECK(a[0] == val(W - 1, 0) && a[N - 1] == val(W - 1, N - 1), "broadcast: %g", a[0]);

    /* reduce to rank 0: the others keep their buffer */
    for (size_t i = 0; i < N; i++) a[i] = 1.0f;
    sp_reduce(w, a, N, 0);
    CHECK(a[5] == (R == 0 ? (float)W : 1.0f), "reduce: rank %d holds %g", R, a[5]);

    /* send/recv of tensors around a ring, non-blocking both ways */
    if (W > 1) {
        int next = (R + 1) % W, prev = (R + W - 1) % W;
        for (size_t i = 0; i < N; i++) a[i] = val(R, i);
        sp_tensor ta = sp_tensor_2d(a, 10, 100), tb = sp_tensor_2d(b, 10, 100);
        sp_irecv(w, tb.data, tb.numel, prev, 7, &req[1]);
        sp_isend(w, ta.data, ta.numel, next, 7, &req[0]);
        sp_wait_all(req, 2);
        CHECK(b[3] == val(prev, 3) && b[N - 1] == val(prev, N - 1), "ring recv: %g", b[3]);
        /* blocking tensor send/recv: even ranks send first */
        if (R % 2 == 0 && next != R) {
            sp_send(w, &ta, next, 8);
            sp_recv(w, &tb, prev, 8);
        } else {
            sp_recv(w, &tb, prev, 8);
            sp_send(w, &ta, next, 8);
        }
        CHECK(b[7] == val(prev, 7), "blocking ring recv: %g", b[7]);
    }
    double s = sp_comm_sum_double(w, 0.25 * (R + 1));
    CHECK(fabs(s - 0.125 * W * (W + 1)) < 1e-6, "sum_double %g", s);
    free(a);
    free(b);
}

static void groups(sp_comm *w)
{
    sp_comm *g = sp_comm_split(w, w->rank % 2, w->rank);
    CHECK(g != NULL, "split returned NULL");
    int want_size = (w->size + 1 - w->rank % 2) / 2;
    CHECK(g->size == want_size && g->rank == w->rank / 2, "group size %d rank %d", g->size, g->rank);
    float x = (float)w->rank;
    sp_allreduce(g, &x, 1);
    float want = 0;
    for (int r = w->rank % 2; r < w->size; r += 2) want += (float)r;
    CHECK(x == want, "group allreduce %g, want %g", x, want);
    sp_comm *none = sp_comm_split(w, w->rank == 0 ? 0 : -1, 0);
    CHECK((w->rank == 0) == (none != NULL), "split with color -1");
    sp_comm_free(none);
    sp_comm_free(g);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: comm_worker ops|groups|hang|exit\n");
        return 2;
    }
    sp_comm_init(&argc, &argv);
    sp_comm *w = sp_comm_world();
    const char *mode = argv[1];
    if (strcmp(mode, "ops") == 0) {
        ops(w);
    } else if (strcmp(mode, "groups") == 0) {
        groups(w);
    } else if (strcmp(mode, "hang") == 0 || strcmp(mode, "exit") == 0) {
        float x = 1;
        sp_allreduce(w, &x, 1);   /* everyone is up */
        if (w->rank == 1) {
            if (mode[0] == 'e') _exit(0);   /* mid-step, without MPI_Finalize */
            sleep(60);
            return 0;
        }
        sp_comm_set_label("step 1, f0b activation");
        sp_tensor t = sp_tensor_2d(&x, 1, 1);
        sp_recv(w, &t, 1, 3);   /* never arrives */
        fprintf(stderr, "comm_worker rank %d: the recv returned\n", w->rank);
        return 1;
    } else {
        fprintf(stderr, "comm_worker: unknown mode %s\n", mode);
        return 2;
    }
    int bad = failures;
    float f = (float)bad;
    sp_allreduce(w, &f, 1);
    if (w->rank == 0 && f == 0) printf("ok %d ranks\n", w->size);
    sp_comm_finalize();
    return bad ? 1 : 0;
}
