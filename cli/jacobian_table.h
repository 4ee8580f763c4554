/* jacobian_table.h — inspecting the transposed Jacobians of a recorded step: the data of
 * BPPSA Table 1 (sparsity of guaranteed zeros, analytic generation vs one column at a
 * time) and the pattern pictures of its Figure 5, for every op of a model.
 *
 *   sp_jt_table t;
 *   sp_jt_table_build(&t, tape, &opts);   // after a forward (+ loss) on the tape
 *   sp_jt_table_print(&t, stderr);
 *   char *ops = sp_jt_table_json(&t);
 *
 * Per sample, Jᵀ of an op is (input elements × output elements) in CSR (core/csr.h);
 * recurrent ops without a whole-op Jᵀ contribute their chain of dense H×H steps. */
#ifndef SP_JACOBIAN_TABLE_H
#define SP_JACOBIAN_TABLE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "core/tape.h"

/* Node n has both Jᵀ entry points. */
bool sp_jt_supported(const sp_node *n);
/* jt = Jᵀ of n for sample b: jt_pattern then jt_values (jt is allocated). */
void sp_jt_build(const sp_node *n, int b, sp_csr *jt);

/* Per-sample sizes of n's Jᵀ: rows (input elements) and columns (output elements).
 * A loss node's output is one scalar for the whole batch: 1 column. */
long sp_jt_in_size(const sp_node *n);
long sp_jt_out_size(const sp_node *n);

/* Jᵀ columns from backward_input, one output element at a time (the baseline of BPPSA
 * Table 1): for each k < ncols, dy = e_{cols[k]} in every sample, dx = backward_input(dy),
 * and dense[(k·B + b)·in + i] = dx_b[i]: column k of sample b's Jᵀ is contiguous (the
 * baseline's cheapest layout, J row-major). dense holds ncols·B·in floats. */
void sp_jt_columnwise(sp_node *n, const int *cols, int ncols, float *dense);

typedef struct sp_jt_opts {
    int max_columns;        /* columns timed by sp_jt_columnwise; more are extrapolated */
    double min_seconds;     /* repeat the analytic generation until this much time     */
    const char *png_dir;    /* write each Jᵀ pattern here as NN_name.png (NULL: none)  */
    int png_side;           /* largest image side in pixels (bigger Jᵀ are binned)     */
} sp_jt_opts;

typedef struct sp_jt_row {
    char name[SP_NAME_LEN];     /* layer name, or op_k for parameter-free ops          */
    const char *op;
    bool chain;                 /* recurrent step: H×H, times cover all T steps        */
    int steps;                  /* chain: T                                            */
    long in, out;               /* per-sample elements                                 */
    int64_t nnz;                /* stored entries of the pattern                       */
    double sparsity;            /* 1 − nnz/(in·out): guaranteed zeros                   */
    double csr_bytes, dense_bytes;
    double pattern_ms, values_ms, analytic_ms;   /* analytic = pattern + B × values    */
    double columnwise_ms;       /* < 0: no column-by-column baseline for this row      */
    int columns_timed;          /* < out: columnwise_ms extrapolated linearly          */
    double max_err;             /* analytic vs columnwise on the timed columns (rel.)  */
} sp_jt_row;

typedef struct sp_jt_table {
    sp_jt_row *rows;
    int n;
    int batch;
} sp_jt_table;

void sp_jt_opts_default(sp_jt_opts *o);
/* One row per node of the tape that has Jᵀ entry points or a chain (leaves skipped).
 * Generates, times and frees one Jᵀ at a time, so memory peaks at the largest one. */
void sp_jt_table_build(sp_jt_table *t, sp_tape *tape, const sp_jt_opts *o);
/* The human-readable table (extrapolated column times marked with '~'). */
void sp_jt_table_print(const sp_jt_table *t, FILE *f);
/* The rows as a JSON array of {"name","in","out","nnz","sparsity","csr_bytes",
 * "dense_bytes","analytic_ms","columnwise_ms"} (null where not measured). Heap string. */
char *sp_jt_table_json(const sp_jt_table *t);
void sp_jt_table_free(sp_jt_table *t);

/* The pattern of jt as a PNG, colours as BPPSA Figure 5: yellow non-zero, teal stored
 * zero (an input-dependent zero), purple guaranteed zero. Matrices larger than
 * max_side are binned (a pixel shows the strongest class in its block). */
void sp_jt_write_png(const sp_csr *jt, const char *path, int max_side);

#endif
