// cxx.cc — a C++ program against the installed library: scripts/test_install.sh builds
// it with `c++ cxx.cc $(pkg-config --cflags --libs scanprop)` and runs it. It proves the
// public headers compile as C++ and declare C linkage (extern "C"): without the guards
// every call below is an undefined reference to a C++-mangled name such as
// `sp_model_new(char const*)`. A small MLP learns Gaussian blobs with each backward
// engine, its checkpoint round-trips, and a built-in model (layers/zoo.h) is built.
#include <scanprop.h>
#include <layers/zoo.h>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

namespace {

const int N = 128, D = 8, K = 3;

sp_model *build()
{
    sp_model *m = sp_model_new("cxx_mlp");
    sp_model_set_loss(m, sp_softmax_ce());
    sp_model_add(m, sp_linear("fc1", D, 16));
    sp_model_add(m, sp_tanh());
    sp_model_add(m, sp_linear("fc2", 16, K));
    return m;
}

// Trains a fresh model with `engine` for a few epochs; first and last batch loss.
bool train(sp_dataset *d, const std::string &engine, const char *ckpt)
{
    sp_model *m = build();
    sp_model_init(m, 5);
    sp_optim_cfg cfg = sp_optim_cfg_default();
    cfg.lr = 0.1;
    cfg.momentum = 0.9;
    sp_optim *o = sp_optim_create("sgd", m->params, m->nparams, &cfg);
    sp_engine *e = sp_engine_create(engine.c_str(), nullptr);
    if (!o || !e) {
        std::fprintf(stderr, "%s\n", sp_last_error());
        return false;
    }
    sp_loader *l = sp_loader_new(d, 16, true, 2, false);
    sp_tape t;
    sp_tape_init(&t);
    std::vector<float> losses;
    for (int epoch = 0; epoch < 5; epoch++) {
        sp_loader_set_epoch(l, epoch);
        sp_batch b;
        while (sp_loader_next(l, &b)) losses.push_back(sp_train_step(m, e, o, &t, &b.x, b.y, nullptr, nullptr, nullptr));
    }
    bool ok = !losses.empty() && losses.back() < 0.5f * losses.front();
    std::printf("c++ %s: loss %.4f -> %.4f\n", engine.c_str(), losses.front(), losses.back());
    if (ok && sp_model_save(m, ckpt) == SP_OK) {
        sp_model *back = build();
        ok = sp_model_load(back, ckpt) == SP_OK;
        for (int p = 0; ok && p < m->nparams; p++)
            ok = std::memcmp(m->params[p]->value.data, back->params[p]->value.data,
                             m->params[p]->value.numel * sizeof(float)) == 0;
        if (!ok) std::fprintf(stderr, "c++: checkpoint round trip failed: %s\n", sp_last_error());
        sp_model_free(back);
    } else {
        std::fprintf(stderr, "c++ %s: the loss did not fall or the save failed\n", engine.c_str());
        ok = false;
    }
    sp_tape_free(&t);
    sp_loader_free(l);
    sp_engine_destroy(e);
    sp_optim_free(o);
    sp_model_free(m);
    return ok;
}

}  // namespace

int main(int argc, char **argv)
{
    const char *ckpt = argc > 1 ? argv[1] : "cxx.safetensors";
    sp_run_opts defaults;   /* the apps' runner links with C linkage too */
    sp_run_defaults(&defaults);
    if (defaults.batch < 1) return 1;
    float *xs;
    int *ys;
    const int shape[1] = {D};
    sp_dataset *d = sp_dataset_new_f32("blobs", N, 1, shape, K, &xs, &ys);
    if (!d) return 2;
    sp_rng r;
    sp_rng_seed(&r, 11);
    std::vector<float> centres(K * D);
    for (float &c : centres) c = 2 * sp_rng_normal(&r);
    for (int i = 0; i < N; i++) {
        ys[i] = (int)sp_rng_below(&r, K);
        for (int j = 0; j < D; j++) xs[i * D + j] = centres[ys[i] * D + j] + 0.5f * sp_rng_normal(&r);
    }
    for (const char *engine : {"linear", "bppsa", "ooo"})
        if (!train(d, engine, ckpt)) return 1;
    sp_dataset_free(d);
    sp_model *lenet = sp_zoo_model("lenet");
    if (!lenet || lenet->nparams != 10) {
        std::fprintf(stderr, "c++: sp_zoo_model(\"lenet\") has %d parameters, expected 10\n", lenet ? lenet->nparams : -1);
        return 1;
    }
    sp_model_free(lenet);
    std::printf("c++: scanprop.h and layers/zoo.h link with C linkage\n");
    return 0;
}
