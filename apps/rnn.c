/* rnn — the BPPSA paper's RNN benchmark (§4.1): a vanilla tanh RNN (hidden 20) reads a
 * bitstream whose density encodes the class (Eq. 8), and a linear layer classifies its
 * last hidden state. Adam, lr 1e-5 by default, as in the paper. */
#include <string.h>
#include "apps/common.h"
#include "apps/models.h"
#include "core/error.h"
#include "core/parallel.h"

int main(int argc, char **argv)
{
    sp_app_opts o;
    sp_app_defaults(&o);
    o.batch = 16;
    o.optim = "adam";
    o.lr = 1e-5;
    int T = 1000, hidden = 20, samples = 32000;
    const char *dataset = "bitstream";
    sp_flag extra[] = {
        {"dataset", SP_FLAG_STR, &dataset, "bitstream (synthetic, Eq. 8) or FILE.safetensors (x [N,T,C], y [N]; "
         "no test set)", .meta = "bitstream|FILE"},
        {"seq-len", SP_FLAG_INT, &T, "bitstream length T", .range = "1..", .needs = "dataset=bitstream"},
        {"samples", SP_FLAG_INT, &samples, "bitstream training samples", .range = "1..", .needs = "dataset=bitstream"},
        {"hidden", SP_FLAG_INT, &hidden, "hidden size", .range = "1.."},
        {0},
    };
    sp_app_parse(argc, argv, "rnn", "Train an Elman RNN on the BPPSA bitstream task (Eq. 8) or a sequence file.", &o,
                 SP_SCOPE_TRAINER, extra);
    if (strcmp(dataset, "bitstream") != 0 && sp_flag_given("eval-every"))
        sp_fail("--eval-every needs a test set (--dataset bitstream; a FILE has none)");
    sp_set_threads(o.threads);
    sp_dataset *train, *test;
    if (strcmp(dataset, "bitstream") == 0) {
        train = sp_check_ptr(sp_bitstream(samples, T, o.seed));
        test = sp_check_ptr(sp_bitstream(samples / 10 > o.batch ? samples / 10 : o.batch, T, o.seed + 1000003));
    } else {
        train = sp_check_ptr(sp_seqset_open(dataset));
        test = NULL;
    }
    if (train->ndim != 2) sp_fail("rnn: samples of %s are not T×C sequences", train->name);
    sp_model *m = sp_zoo_rnn(train->shape[1], hidden, train->nclasses);
    sp_app_train("rnn", &o, m, train, test, true);
    sp_model_free(m);
    sp_dataset_free(train);
    if (test) sp_dataset_free(test);
    return 0;
}
