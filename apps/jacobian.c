/* jacobian — per-op transposed-Jacobian table of a zoo model (BPPSA Table 1, for our
 * ops): size, nnz, sparsity of guaranteed zeros, CSR vs dense bytes, and analytic
 * generation time against building Jᵀ column by column from backward_input.
 * --png DIR draws each pattern like the paper's Figure 5. The work is in
 * cli/jacobian_table.c; this file parses flags and runs one forward pass. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/flags.h"
#include "layers/zoo.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/rng.h"
#include "cli/jacobian_table.h"

typedef struct opts {
    const char *model, *input, *png;
    int batch, threads, columns;
    uint64_t seed;
} opts;

static void parse(int argc, char **argv, opts *o)
{
    *o = (opts){.model = "lenet", .batch = 1, .threads = 2, .columns = 256, .seed = 1};
    sp_flag table[] = {
        {"model", SP_FLAG_STR, &o->model, "the zoo model", .choices = sp_zoo_names()},
        {"input", SP_FLAG_STR, &o->input, "per-sample input, CxHxW (cnn) or TxC (rnn, gru)", .meta = "SHAPE",
         .def = "the model's"},
        {"batch", SP_FLAG_INT, &o->batch, "samples in the forward pass", .range = "1..4096"},
        {"png", SP_FLAG_STR, &o->png, "write each Jt pattern as DIR/NN_op.png", .meta = "DIR"},
        {"columns", SP_FLAG_INT, &o->columns, "columns built one at a time per op, the rest extrapolated",
         .range = "1..1073741824"},
        {"threads", SP_FLAG_INT, &o->threads, "threads for everything, OpenBLAS included", .range = "1..64"},
        {"seed", SP_FLAG_U64, &o->seed, "weights and input", .range = "0..2147483647"},
        {0},
    };
    sp_flags_parse(argc, argv, "jacobian",
                   "Per-op transposed Jacobians of a model: nnz, sparsity, CSR vs dense bytes, analytic\n"
                   "generation vs column-by-column from backward_input. Last stdout line: JSON.",
                   table);
}

/* "3x32x32" → shape; the number of dimensions must be the model's. */
static void parse_input(const char *s, const char *model, int ndim, int *shape)
{
    const char *p = s;
    for (int d = 0; d < ndim; d++) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 1 || v > 1 << 20 || (d + 1 < ndim ? *end != 'x' : *end != 0))
            sp_fail("--input %s: expected %s for %s (positive sizes joined by 'x')", s, ndim == 3 ? "CxHxW" : "TxC",
                    model);
        shape[d] = (int)v;
        p = end + 1;
    }
}

int main(int argc, char **argv)
{
    opts o;
    parse(argc, argv, &o);
    sp_set_threads(o.threads);
    int shape[3], ndim = sp_zoo_input_shape(o.model, shape);
    if (o.input) parse_input(o.input, o.model, ndim, shape);
    sp_model *m = sp_zoo_model(o.model);
    sp_model_init(m, o.seed);

    int xshape[4] = {o.batch, shape[0], shape[1], shape[2]};
    sp_tensor x = sp_tensor_new(ndim + 1, xshape);
    sp_rng r;
    sp_rng_seed(&r, o.seed + 1);
    for (size_t i = 0; i < x.numel; i++) x.data[i] = sp_rng_uniform_range(&r, -1.0f, 1.0f);
    sp_tape t;
    sp_tape_init(&t);
    sp_node *logits = sp_model_forward(m, &t, sp_tape_input(&t, &x));
    int *labels = sp_xmalloc((size_t)o.batch * sizeof(int));
    for (int b = 0; b < o.batch; b++) labels[b] = b % logits->out.shape[1];
    sp_apply_loss(&t, m->loss, logits, labels);

    sp_jt_opts jo;
    sp_jt_opts_default(&jo);
    jo.max_columns = o.columns;
    jo.png_dir = o.png;
    sp_jt_table table;
    sp_jt_table_build(&table, &t, &jo);
    char in[64];
    if (ndim == 3) snprintf(in, sizeof in, "%dx%dx%d", shape[0], shape[1], shape[2]);
    else snprintf(in, sizeof in, "%dx%d", shape[0], shape[1]);
    printf("%s, input %s, batch %d, threads %d, seed %llu\n", o.model, in, o.batch, o.threads,
           (unsigned long long)o.seed);
    sp_jt_table_print(&table, stdout);

    /* printed directly: a deep model's ops array outgrows sp_json's fixed buffer; the
     * model name is a validated zoo name and needs no escaping */
    char *ops = sp_jt_table_json(&table);
    printf("{\"model\": \"%s\", \"input\": \"%s\", \"ops\": %s}\n", o.model, in, ops);

    free(ops);
    sp_jt_table_free(&table);
    free(labels);
    sp_tape_free(&t);
    sp_tensor_free(&x);
    sp_model_free(m);
    return 0;
}
