/* rnn — the BPPSA paper's RNN benchmark (§4.1): a vanilla tanh RNN reads a bitstream whose
 * density encodes the class (Eq. 8), and a linear layer classifies its last hidden state.
 *
 * Defaults that learn within a minute on 2 cores: T = 100, hidden 64, 48000 samples,
 * batch 8, Adam lr 1e-3 (one epoch: test accuracy 0.55-0.72 over seeds 1-3, the Bayes
 * limit at T = 100 being about 0.7). --paper-defaults is the paper's setting (T = 1000,
 * hidden 20, 32000 samples, batch 16, Adam lr 1e-5), which stays near chance for several
 * epochs; flags given explicitly win over either set. */
#include <string.h>
#include "cli/run.h"
#include "layers/zoo.h"
#include "core/error.h"
#include "core/threads.h"

int main(int argc, char **argv)
{
    sp_run_opts o;
    sp_run_defaults(&o);
    o.batch = 8;
    o.optim = "adam";
    o.lr = 1e-3;
    int T = 100, hidden = 64, samples = 48000;
    bool paper = false;
    const char *dataset = "bitstream";
    sp_flag extra[] = {
        {"paper-defaults", SP_FLAG_BOOL, &paper, "the BPPSA paper's setting for flags not given: --seq-len 1000 "
         "--hidden 20 --samples 32000 --batch 16 --optim adam --lr 1e-5 (near chance for several epochs)", .meta = ""},
        {"dataset", SP_FLAG_STR, &dataset, "bitstream (synthetic, Eq. 8) or FILE.safetensors (x [N,T,C], y [N]; "
         "no test set)", .meta = "bitstream|FILE"},
        {"seq-len", SP_FLAG_INT, &T, "bitstream length T", .range = "1..", .needs = "dataset=bitstream"},
        {"samples", SP_FLAG_INT, &samples, "bitstream training samples", .range = "1..", .needs = "dataset=bitstream"},
        {"hidden", SP_FLAG_INT, &hidden, "hidden size", .range = "1.."},
        {0},
    };
    sp_run_parse(argc, argv, "rnn", "Train an Elman RNN on the BPPSA bitstream task (Eq. 8) or a sequence file.", &o,
                 SP_SCOPE_TRAINER, extra);
    if (paper) {
        if (!sp_flag_given("seq-len")) T = 1000;
        if (!sp_flag_given("hidden")) hidden = 20;
        if (!sp_flag_given("samples")) samples = 32000;
        if (!sp_flag_given("batch")) o.batch = 16;
        if (!sp_flag_given("optim")) o.optim = "adam";
        if (!sp_flag_given("lr")) o.lr = 1e-5;
    }
    if (strcmp(dataset, "bitstream") != 0 && sp_flag_given("eval-every"))
        sp_fail("--eval-every needs a test set (--dataset bitstream; a FILE has none)");
    sp_set_threads(o.threads);
    sp_dataset *train, *test;
    if (strcmp(dataset, "bitstream") == 0) {
        int ntest = samples / 10 > o.batch ? samples / 10 : o.batch;
        sp_run_check_synthetic(&o, "--samples", samples, ntest, 0);   /* generated on demand */
        train = sp_check_ptr(sp_bitstream(samples, T, o.seed));
        test = sp_check_ptr(sp_bitstream(ntest, T, o.seed + 1000003));
    } else {
        train = sp_check_ptr(sp_seqset_open(dataset));
        test = NULL;
    }
    if (train->ndim != 2) sp_fail("rnn: samples of %s are not T×C sequences", train->name);
    sp_model *m = sp_zoo_rnn(train->shape[1], hidden, train->nclasses);
    sp_run("rnn", &o, m, train, test);
    sp_model_free(m);
    sp_dataset_free(train);
    if (test) sp_dataset_free(test);
    return 0;
}
