/* limits.h — the bounds on what the simulator takes, checked in one place for every
 * caller: build/schedule (cli/schedule_cli.c), the schedules the executor builds, and the
 * teaching page's WebAssembly module (site/wasm_api.c, site/wasm_models.c), so that they
 * refuse the same inputs with the same line.
 *
 * Numbers: every duration (a stage's forward, δ or G cost, a transfer cost, a latency α)
 * is finite and at most SP_LIMIT_TIME_MAX, every size in bytes at most SP_LIMIT_BYTES_MAX
 * and every bandwidth β finite and at least SP_LIMIT_BW_MIN B/µs. With the work bound
 * below, every sum and product the simulator forms (a step is at most jobs × the largest
 * duration, a message at most α + bytes / β) then stays far inside a double: no figure it
 * reports is ever inf or NaN.
 *
 * Work: a simulation of J jobs on W workers costs time and memory in J × W; it is refused
 * above SP_LIMIT_WORK (before anything is allocated). Every configuration the tutorial,
 * the tests and the page use is far below it (1f1b with 256 stages and 256 micro-batches
 * is 3.4e7 of it; 1f1b with 400 × 400, 1.28e8, also fits; gpipe with 1000 stages and 1e5
 * micro-batches is 2e11).
 *
 * Each check returns SP_OK, or SP_ERR with one line in sp_last_error() naming `what` (a
 * flag or a file's column) and the value: "--transfer-cost 1e+308: expected a finite time
 * in 0..1e+12 (larger ones overflow the simulation's sums)". */
#ifndef SP_PLAN_LIMITS_H
#define SP_PLAN_LIMITS_H

#define SP_LIMIT_TIME_MAX 1e12
#define SP_LIMIT_BYTES_MAX 9007199254740992.0   /* 2^53: whole bytes, exact in a double */
#define SP_LIMIT_BW_MIN 1e-3                    /* B/µs (1 kB/s) */
#define SP_LIMIT_WORK 134217728.0               /* 2^27: jobs × workers of one simulation */

#include <stdbool.h>

/* The predicates alone, for a caller that names the value only when it is refused. */
bool sp_limit_time_ok(double v);
bool sp_limit_bytes_ok(double v);

/* A duration: finite, 0 <= v <= SP_LIMIT_TIME_MAX. */
int sp_limit_time(const char *what, double v);
/* A size in bytes: finite, 0 <= v <= SP_LIMIT_BYTES_MAX. */
int sp_limit_bytes(const char *what, double v);
/* A bandwidth in B/µs: finite, v >= SP_LIMIT_BW_MIN. */
int sp_limit_bandwidth(const char *what, double v);
/* A simulation of `jobs` jobs on `workers` workers (what: the scheme): jobs × workers <=
 * SP_LIMIT_WORK. Doubles: the caller's product of counts never overflows. */
int sp_limit_work(const char *what, double jobs, double workers);

#endif
