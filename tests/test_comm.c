/* test_comm — core/comm/comm.h under mpirun: every operation on 2 and 4 ranks (4 share the
 * cores with --oversubscribe), sub-communicators, and the two faults: a rank that stops
 * answering (the others time out with one line naming the rank and the operation, exit
 * 2) and a rank that exits mid-step (mpirun ends the job; nothing hangs). Plus the
 * one-rank implementation every build has. Skipped without MPI. */
#include <criterion/criterion.h>
#include "core/comm/comm.h"
#include "tests/mpirun.h"


static const char *worker(void)
{
    static char path[512];
    const char *b = getenv("BUILD");
    snprintf(path, sizeof path, "%s/tests/comm_worker", b ? b : "build");
    return path;
}

static void run_mode(const char *np, const char *mode, const char *env, mpi_result *r)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "%s %s", worker(), mode);
    mpi_run(env, np, cmd, r);
}

Test(comm, serial_world_is_one_rank)
{
    sp_comm *w = sp_comm_world();   /* no sp_comm_init: the one-rank world */
    cr_assert_eq(sp_comm_size(w), 1);
    cr_assert_eq(sp_comm_rank(w), 0);
    float a[3] = {1, 2, 3}, b[3] = {0};
    sp_allreduce(w, a, 3);
    sp_reduce_scatter(w, a, b, 3);
    cr_assert(b[0] == 1 && b[2] == 3, "reduce_scatter on one rank copies");
    sp_allgather(w, a, b, 3);
    sp_broadcast(w, a, 3, 0);
    cr_assert(a[1] == 2 && b[1] == 2);
    sp_comm *g = sp_comm_split(w, 0, 0);
    cr_assert_not_null(g);
    cr_assert_eq(g->size, 1);
    sp_comm_free(g);
    cr_assert_null(sp_comm_split(w, -1, 0));
}

Test(comm, ops_on_2_and_4_ranks, .timeout = 120)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    static mpi_result r;
    const char *nps[] = {"-np 2", "-np 4", "-np 3"};
    for (int i = 0; i < 3; i++) {
        run_mode(nps[i], "ops", "", &r);
        cr_assert_eq(r.status, 0, "%s ops: status %d\n%s", nps[i], r.status, r.err);
        char want[32];
        snprintf(want, sizeof want, "ok %c ranks", nps[i][4]);
        cr_assert(strstr(r.out, want), "%s ops: stdout '%s'", nps[i], r.out);
    }
    run_mode("-np 4", "groups", "", &r);
    cr_assert_eq(r.status, 0, "groups: status %d\n%s", r.status, r.err);
    cr_assert(strstr(r.out, "ok 4 ranks"));
}

Test(comm, a_rank_that_stops_answering_times_out, .timeout = 120)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    static mpi_result r;
    run_mode("-np 3", "hang", "SCANPROP_COMM_TIMEOUT=2", &r);
    cr_assert_eq(r.status, 2, "status %d, want 2\n%s", r.status, r.err);
    cr_assert(r.seconds < 30, "took %.1f s with a 2 s timeout", r.seconds);
    /* one line naming the waiting rank, the operation, the peer and the label */
    cr_assert(strstr(r.err, "scanprop: rank 0: recv of 1 floats from rank 1") ||
                  strstr(r.err, "scanprop: rank 2: recv of 1 floats from rank 1"),
              "stderr:\n%s", r.err);
    cr_assert(strstr(r.err, "during step 1, f0b activation: no answer within 2 s"), "stderr:\n%s", r.err);
    cr_assert(!strstr(r.out, "returned") && !strstr(r.err, "the recv returned"));
}

Test(comm, a_rank_that_exits_mid_step_ends_the_job, .timeout = 120)
{
    if (!mpi_available()) cr_skip_test("no MPI in this build or no mpirun");
    static mpi_result r;
    run_mode("-np 3", "exit", "SCANPROP_COMM_TIMEOUT=20", &r);
    cr_assert_neq(r.status, 0, "the job succeeded although rank 1 died\n%s", r.err);
    cr_assert(r.seconds < 25, "took %.1f s", r.seconds);
    /* either mpirun names the rank, or a survivor's timeout line does */
    cr_assert(strstr(r.err, "process rank 1") || strstr(r.err, "from rank 1"), "stderr:\n%s", r.err);
    cr_assert(!strstr(r.err, "the recv returned"));
}
