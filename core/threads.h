/* threads.h — the thread pool and the one thread knob.
 *
 * sp_set_threads(n) governs everything: the pool used by sp_parallel_for, and through
 * it OpenBLAS and oneDNN, which run single-threaded per call while sp_gemm splits large
 * products and conv2d its batch over the pool (core/kernels/dense.h, core/kernels/dnnl.h): oneDNN's
 * OpenMP is held at one thread in every thread that calls it, so it never starts a
 * team of its own and the process keeps n threads busy at most. Work is split into contiguous static chunks so the same
 * thread count always gives the same partition (bitwise reproducible results). */
#ifndef SP_THREADS_H
#define SP_THREADS_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* n in 1..64; else (or a worker that cannot start) refused with sp_refuse (core/error.h):
 * SP_ERR outside sp_try with the message in sp_last_error() and the count unchanged,
 * never exiting; inside sp_try the call ends there with SP_ERR. */
int sp_set_threads(int n);
int sp_get_threads(void);

/* Processes that share this machine's cores, this one included (1 until told: the MPI
 * front end, core/comm/comm.c, sets its ranks on this node). While they times the
 * threads exceed the online cores, a pool thread that waits sleeps at once instead of
 * spinning first (SPIN_S, parallel.c): a spinning thread would hold a core that a
 * thread with work needs. Results do not change, only how threads wait. */
void sp_parallel_set_node_procs(int procs);
/* Whether this machine has a core that no pool thread of its processes uses (processes
 * × threads < online cores): where it has none, a helper thread (the loader's prefetch)
 * would take its time from the pool's threads. */
bool sp_parallel_spare_core(void);

/* Subnormal floats are flushed to zero, as TensorFlow's and oneDNN's own threads do:
 * results below 2⁻¹²⁶ ≈ 1.2e-38 become 0 (FTZ) and subnormal inputs read as 0 (DAZ).
 * Gradients that fade over a long chain (the RNN at T = 1000 under Adam's lr 1e-5)
 * reach that range, and every x86 operation on a subnormal takes a microcode assist of
 * ~100 cycles on Intel cores, for values no gradient step can feel.
 * sp_set_threads sets it on the calling thread before the pool starts (workers inherit
 * it and set it again), so every app and every pool thread computes with it;
 * sp_flush_denormals sets it on the calling thread only (a thread of the caller's own).
 * No effect off x86; sp_denormals_flushed reports the calling thread's state. */
void sp_flush_denormals(void);
bool sp_denormals_flushed(void);

/* Calls fn(ctx, begin, end) over [0, n) split into at most sp_get_threads() chunks.
 * Runs inline when n is small or one thread is set. Not reentrant: a nested call runs
 * inline on the calling thread. */
typedef void (*sp_range_fn)(void *ctx, size_t begin, size_t end);
/* SP_OK; a NULL fn is refused as sp_set_threads' arguments are (SP_ERR). */
int sp_parallel_for(size_t n, sp_range_fn fn, void *ctx);

/* on: every sp_parallel_for called from THIS thread runs inline — for a thread that
 * owns one core, like a lane of the ooo executor. Off by default. */
void sp_parallel_set_inline(bool on);

/* Help between inline threads (the ooo lanes): while a notify function is set, a loop
 * of an inline thread is split into the pool's chunks and offered; an idle thread calls
 * sp_parallel_help to run offered chunks (true: it took part in one), and
 * sp_parallel_help_open tells whether any is on offer. notify(ctx) is called on each
 * offer, to wake a sleeping helper; NULL stops offering. The chunks are the pool's
 * own, so results are bitwise those of the pool whoever runs them. */
void sp_parallel_set_help_notify(void (*notify)(void *), void *ctx);
bool sp_parallel_help(void);
bool sp_parallel_help_open(void);

/* A hint inside a spin-wait loop (x86 pause). */
static inline void sp_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Spins until done(arg) holds or `seconds` have passed; returns done(arg). For
 * hand-offs between threads that are usually microseconds apart: the caller falls
 * back to sleeping on a condition variable when this returns false. A NULL done is
 * refused as sp_set_threads' arguments are (false). */
bool sp_spin_until(bool (*done)(void *), void *arg, double seconds);

/* Wall clock in seconds (monotonic). */
double sp_now(void);

#ifdef __cplusplus
}
#endif

#endif
