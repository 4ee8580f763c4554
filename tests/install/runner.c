/* runner.c — the apps' training runner called from out of tree, against the installed
 * library only: scripts/test_install.sh compiles it with `pkg-config --cflags --libs
 * scanprop` after `make install` into a temporary prefix and runs it with each engine.
 * It takes the runner's flags (--steps, --backward, --save…) as the apps do, trains the
 * zoo's RNN on a short synthetic bitstream with sp_run, and checks what sp_run returned;
 * sp_run prints the JSON line the apps print. */
#include <scanprop.h>
#include <math.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    sp_run_opts o;
    sp_run_defaults(&o);
    o.batch = 8;
    o.optim = "adam";
    o.lr = 1e-3;
    sp_run_parse(argc, argv, "runner", "Train the zoo's RNN on a short bitstream through sp_run.", &o,
                 SP_SCOPE_TRAINER, NULL);
    sp_set_threads(o.threads);
    sp_dataset *train = sp_check_ptr(sp_bitstream(128, 24, o.seed));
    sp_dataset *test = sp_check_ptr(sp_bitstream(32, 24, o.seed + 1));
    sp_model *m = sp_zoo_rnn(train->shape[1], 12, train->nclasses);
    sp_train_result r = sp_run("runner", &o, m, train, test);
    int bad = o.steps > 0 && r.steps != o.steps;
    bad |= !isfinite(r.last_loss) || !(r.test_acc >= 0 && r.test_acc <= 1);
    if (bad) fprintf(stderr, "runner: %ld steps (asked %ld), last loss %g, test accuracy %g\n", r.steps, o.steps,
                     r.last_loss, r.test_acc);
    sp_model_free(m);
    sp_dataset_free(train);
    sp_dataset_free(test);
    return bad;
}
