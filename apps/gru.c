/* gru — the BPPSA paper's GRU benchmark (§4.3): a GRU (hidden 20) over F frames of C
 * features, a linear layer on the last hidden state. Synthetic sequences in the paper's
 * S/M/L shapes by default (--shape), or --dataset FILE.safetensors with real features. */
#include <string.h>
#include "cli/run.h"
#include "layers/zoo.h"
#include "core/error.h"
#include "core/threads.h"

int main(int argc, char **argv)
{
    sp_run_opts o;
    sp_run_defaults(&o);
    o.batch = 16;
    o.optim = "adam";
    o.lr = 3e-4;
    int hidden = 20, samples = 1024, classes = 10;
    const char *shape = "L", *dataset = "synthetic";
    sp_flag extra[] = {
        {"dataset", SP_FLAG_STR, &dataset, "synthetic or FILE.safetensors (x [N,F,C], y [N]; no test set)",
         .meta = "synthetic|FILE"},
        {"shape", SP_FLAG_STR, &shape, "synthetic frames x features: S 259x38, M 517x24, L 1034x12", .choices = "S|M|L",
         .needs = "dataset=synthetic"},
        {"samples", SP_FLAG_INT, &samples, "synthetic training samples", .range = "1..", .needs = "dataset=synthetic"},
        {"classes", SP_FLAG_INT, &classes, "synthetic classes", .range = "2..", .needs = "dataset=synthetic"},
        {"hidden", SP_FLAG_INT, &hidden, "hidden size", .range = "1.."},
        {0},
    };
    sp_run_parse(argc, argv, "gru", "Train a GRU on F x C feature sequences (BPPSA paper, Sec. 4.3).", &o, SP_SCOPE_TRAINER,
                 extra);
    if (strcmp(dataset, "synthetic") != 0 && sp_flag_given("eval-every"))
        sp_fail("--eval-every needs a test set (--dataset synthetic; a FILE has none)");
    sp_set_threads(o.threads);
    sp_dataset *train, *test = NULL;
    if (strcmp(dataset, "synthetic") == 0) {
        int F, C;
        if (strcmp(shape, "S") == 0) F = 259, C = 38;
        else if (strcmp(shape, "M") == 0) F = 517, C = 24;
        else if (strcmp(shape, "L") == 0) F = 1034, C = 12;
        else F = 1034, C = 12;
        int ntest = samples / 4 > o.batch ? samples / 4 : o.batch;
        sp_run_check_synthetic(&o, "--samples", samples, ntest, (size_t)F * C * sizeof(float));
        train = sp_check_ptr(sp_synthetic_sequences(samples, F, C, classes, o.seed));
        test = sp_check_ptr(sp_synthetic_sequences(ntest, F, C, classes, o.seed + 1000003));
    } else {
        train = sp_check_ptr(sp_seqset_open(dataset));
    }
    if (train->ndim != 2) sp_fail("gru: samples of %s are not F×C sequences", train->name);
    sp_model *m = sp_zoo_gru(train->shape[1], hidden, train->nclasses);
    sp_run("gru", &o, m, train, test);
    sp_model_free(m);
    sp_dataset_free(train);
    if (test) sp_dataset_free(test);
    return 0;
}
