/* fault_demo — build/demo with a fault to inject, for the MPI suites' timeout tests
 * (test_exec): $SCANPROP_EXEC_FAULT = exit:RANK:STEP | hang:RANK:STEP | slow:RANK:STEP:MS;
 * halfway through its jobs of that step (counted from 1) that rank exits (without
 * MPI_Finalize), stops answering, or computes its next job MS ms longer. The hook is
 * set here through sp_exec_set_job_hook; the library and the apps read no such variable. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "schedulers/exec/exec.h"

#define main demo_main
#include "apps/demo.c"
#undef main

static double fault(int rank, long step)
{
    const char *f = getenv("SCANPROP_EXEC_FAULT");
    char kind[8] = "";
    int r = -1;
    long s = -1;
    double ms = 0;
    if (!f || sscanf(f, "%7[a-z]:%d:%ld:%lf", kind, &r, &s, &ms) < 3 || r != rank || s != step) return 0;
    if (!strcmp(kind, "exit")) _exit(3);
    if (!strcmp(kind, "hang"))
        for (;;) pause();
    return !strcmp(kind, "slow") ? 1e-3 * ms : 0;
}

int main(int argc, char **argv)
{
    sp_exec_set_job_hook(fault);
    return demo_main(argc, argv);
}
