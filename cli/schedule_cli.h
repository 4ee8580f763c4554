/* schedule_cli.h — the schedule program (build/schedule, apps/schedule.c) as library
 * API: its flags, the simulation or LayerPipe it runs, and what it prints (the last
 * stdout line one JSON object). */
#ifndef SP_SCHEDULE_CLI_H
#define SP_SCHEDULE_CLI_H

#ifdef __cplusplus
extern "C" {
#endif

/* Parses argv as build/schedule does (--help: its flags) and runs it; returns the exit
 * status, 0. A refused flag or a failure prints "scanprop: <message>" and exits 2. */
int sp_schedule_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif
