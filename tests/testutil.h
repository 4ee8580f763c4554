/* testutil.h — helpers shared by the Criterion suites.
 *
 * tu_gradcheck checks one layer's δ (backward_input) and G (backward_params) against
 * central finite differences of the scalar L = Σ r ⊙ y for a fixed random r, so
 * ∂L/∂y = r. Values of L are accumulated in float64. The reported error of a gradient
 * g against its finite-difference estimate f over the checked entries is
 *     max_i |g_i − f_i| / max(1, max_i |f_i|)
 * and each suite asserts it is below a stated tolerance. */
#ifndef SP_TESTUTIL_H
#define SP_TESTUTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include "core/op.h"
#include "core/tape.h"
#include "core/model.h"

typedef struct tu_gc_opts {
    double eps;          /* finite-difference step (default 1e-2)                  */
    int max_checks;      /* entries checked per tensor, chosen at random (default 64) */
    float x_lo, x_hi;    /* input range (default [-1, 1])                          */
    float min_abs_x;     /* keep |x| >= this (kinks, e.g. relu), default 0          */
    float grid;          /* >0: inputs are distinct multiples of grid (max-pool ties) */
    const int *labels;   /* loss ops: labels [B]                                   */
} tu_gc_opts;

#define TU_MAX_INPUTS 8

typedef struct tu_gc_result {
    double err_dx;                        /* δ (the worst input's)               */
    double err_in[TU_MAX_INPUTS];         /* δ_i of each input                   */
    int ninputs;
    double err_param[SP_MAX_PARAMS];      /* G, one per parameter                */
    double max_abs_dx;                    /* size of the analytic δ (sanity)     */
    int nparams;
} tu_gc_result;

/* Parameters are initialised from seed with the op's init (if any); the layer keeps them. */
tu_gc_result tu_gradcheck(sp_layer *l, int ndim, const int *xshape, uint64_t seed, const tu_gc_opts *opts);
/* The same for an op of ninputs inputs (input i: ndims[i] dims, shapes[i]); every δ_i is
 * checked against finite differences in that input. */
tu_gc_result tu_gradcheck_n(sp_layer *l, int ninputs, const int *ndims, const int (*shapes)[SP_MAX_DIMS],
                            uint64_t seed, const tu_gc_opts *opts);
double tu_gc_worst(const tu_gc_result *r);

/* Small DAG models (parameters at zero: call sp_model_init), input [B, ...]:
 *   "resmlp"  [B, 8]: fc → tanh → a residual pair of fc+tanh joined by add, add(h, h),
 *             concat(h, x) (a second read of the block input), a dead sigmoid branch;
 *   "resconv" [B, 2, 6, 6]: conv → relu → a basic block (identity shortcut) → a block
 *             with a strided 1×1 conv shortcut (ResNet option B) → flatten → fc;
 *   "dense"   [B, 2, 6, 6]: a DenseNet-style block: conv, then three relu→conv(growth 3)
 *             layers each reading the concat of every earlier output, pool, fc.
 * tu_dag_input_shape fills the per-sample shape and returns its ndim. */
sp_model *tu_dag_model(const char *name);
int tu_dag_input_shape(const char *name, int *shape);

/* x[i] ~ U(lo, hi) from seed. */
void tu_fill_uniform(float *x, size_t n, uint64_t seed, float lo, float hi);
/* Every parameter value of m, in order, in one malloc'd array (caller frees); *n its length. */
float *tu_model_weights(const sp_model *m, size_t *n);
/* max |a − b| / max(1, max |b|) */
double tu_max_rel_diff(const float *a, const float *b, size_t n);
/* Two safetensors checkpoints (the same tensors, float32): max |a − b| / max(1, max |b|)
 * over every tensor, or over the parameters only without `buffers` (batch norm's
 * running_* and num_batches_tracked left out); *bitwise (may be NULL): every compared
 * byte equal; *nbuf (may be NULL): how many buffers the files hold. Missing files,
 * tensors or sizes fail the test. */
double tu_st_max_rel_diff(const char *pa, const char *pb, bool buffers, bool *bitwise, int *nbuf);
/* A fresh empty directory for this test process, under $BUILD/tmp (build/tmp), never
 * /tmp; removed with everything in it when the process that made it exits, whether the
 * test passed or failed (scripts/run_tests.sh also clears $BUILD/tmp after a crash). */
const char *tu_tmpdir(void);
/* tu_tmpdir()/name, in one of 8 rotating buffers (a call may hold up to 8 at once). */
const char *tu_tmp_path(const char *name);
/* $BUILD/name (build/name without BUILD): a program of this build, in one of 4 rotating
 * buffers. */
const char *tu_bin_path(const char *name);
/* Write n bytes to path, gzip-compressed if gz; the test fails if it cannot. */
void tu_write_file(const char *path, const void *data, size_t n, bool gz);

/* Quiet expected errors. As a test's or suite's .init (or called first in a test): stderr
 * goes to a file. At exit, a test declared with .exit_code = 2 must have printed exactly
 * one line "scanprop: …" (containing the text given to tu_expect_error, if any); then
 * nothing is shown. Otherwise the captured text is printed with what was expected, and a
 * wrong message turns the exit status into 1, so the test fails. A test expecting exit 0
 * shows its stderr as before. */
void tu_capture_stderr(void);
void tu_expect_error(const char *text);
/* A fallible call's refusal (core/error.h's first kind): cond (its failure value) holds
 * and sp_last_error() is one line containing `says`; the process goes on. */
#define tu_refused(cond, says)                                                                  \
    cr_assert((cond) && strstr(sp_last_error(), (says)) && !strchr(sp_last_error(), '\n'),      \
              "expected a refusal saying '%s'; got %s with '%s'", (says), (cond) ? "it" : "no failure", \
              sp_last_error())

/* Runs `cmd` with /bin/sh, stdout and stderr into files of tu_tmpdir() (nothing shown);
 * out/err (if not NULL) receive them, NUL-terminated and cut to their size. Returns the
 * exit status, or 128 + signal. */
int tu_run(const char *cmd, char *out, size_t outlen, char *err, size_t errlen);
/* The path of a built binary: $BUILD/name (default build/name); up to 8 live at once. */
const char *tu_bin(const char *name);
/* Runs `cmd` with popen, stderr passing through; the last stdout line goes to `last`
 * (if not NULL). Returns the exit status, or -1 if it did not exit. */
int tu_run_last(const char *cmd, char *last, size_t len);
/* The number after `"key": ` in an app's JSON line; the test fails if the key is missing. */
double tu_json_num(const char *json, const char *key);
/* Removes `"key": value` from an app's JSON line (not the first key). */
void tu_strip_key(char *json, const char *key);
/* Removes the keys that measure time (images_per_s, seconds, forward_ms, backward_ms,
 * step_ms, critical_path_ms) from a JSON line, so two runs' lines can be compared byte
 * for byte. */
void tu_strip_timings(char *json);

/* Environment for a program run under mpirun in the sanitizer build whose leak report
 * must be clean: Open MPI keeps its components loaded (so a leak report can name the
 * library that allocated) and the leak checker unwinds full stacks, so tests/lsan.supp
 * suppresses exactly Open MPI's own allocations (libmpi, libopen-pal, libopen-rte,
 * libevent) and nothing of ours. Full unwinding makes every malloc ~1.5x slower, so the
 * other MPI runs of the suites use TU_MPI_FAST_ENV (no leak check) and one test per MPI
 * path checks leaks (test_exec: exec/parallel_run_leak_check). */
#define TU_MPI_SAN_ENV "OMPI_MCA_mca_base_component_disable_dlclose=1 LSAN_OPTIONS=\"$LSAN_OPTIONS:fast_unwind_on_malloc=0\" "
#define TU_MPI_FAST_ENV "ASAN_OPTIONS=detect_leaks=0 "

#endif
