/* mpirun.h — running a program under mpirun from a Criterion suite (test_comm, test_exec).
 *
 * mpi_run("-np 2", "build/tests/comm_worker ops", &res) runs the command with stdout and
 * stderr captured to files under the test's own temporary directory; res receives the
 * exit status, the seconds it took and both outputs. mpi_available() is false in a build
 * without MPI or without mpirun on PATH: the suites then skip. Root needs Open MPI's two
 * ALLOW_RUN_AS_ROOT variables; --oversubscribe lets 4 ranks share 2 cores. */
#ifndef SP_TEST_MPIRUN_H
#define SP_TEST_MPIRUN_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include "core/comm/comm.h"
#include "core/threads.h"
#include "tests/testutil.h"

typedef struct mpi_result {
    int status;            /* exit status (128 + signal when killed) */
    double seconds;
    char out[65536], err[65536];
} mpi_result;

static inline bool mpi_available(void)
{
    return sp_comm_have_mpi() && system("command -v mpirun >/dev/null 2>&1") == 0;
}

static inline void mpi_slurp(const char *path, char *buf, size_t len)
{
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = 0;
    fclose(f);
    remove(path);
}

/* env: extra "VAR=value ..." before mpirun (may be ""). */
static inline void mpi_run(const char *env, const char *np, const char *cmd, mpi_result *r)
{
    const char *dir = tu_tmpdir();
    char out[512], err[512], line[4096];
    snprintf(out, sizeof out, "%s/mpi.out", dir);
    snprintf(err, sizeof err, "%s/mpi.err", dir);
    snprintf(line, sizeof line,
             "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1 "
             TU_MPI_FAST_ENV "%s mpirun --oversubscribe --bind-to none %s %s >%s 2>%s",
             env, np, cmd, out, err);
    double t0 = sp_now();
    int st = system(line);
    r->seconds = sp_now() - t0;
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    mpi_slurp(out, r->out, sizeof r->out);
    mpi_slurp(err, r->err, sizeof r->err);
}

#endif
