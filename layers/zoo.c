/* zoo.c — the model zoo. Each builder is the whole model, top to bottom. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "layers/zoo.h"
#include "core/error.h"
#include "layers/layers.h"
#include "core/guard.h"

/* A builder's sizes, checked before anything is allocated (a refused size leaks nothing). */
static void zoo_size(const char *model, const char *what, int v)
{
    if (v < 1) sp_fail("%s: %s %d (expected positive)", model, what, v);
}

/* Every model of the zoo is a classifier: softmax cross-entropy is its loss. */
static sp_model *classifier(const char *name)
{
    sp_model *m = sp_model_new(name);
    sp_model_set_loss(m, sp_softmax_ce());
    return m;
}

/* LeNet-5: 28×28 inputs get padding 2 on conv1 (as in the BPPSA paper's Fashion-MNIST
 * runs), 32×32 inputs none, so both reach conv2 with 16×5×5 features after pooling. */
sp_model *sp_zoo_lenet(int in_channels, int size)
{
    SP_GUARD(NULL);
    if (size != 28 && size != 32) sp_fail("lenet: input %dx%d, expected 28x28 or 32x32", size, size);
    zoo_size("lenet", "in_channels", in_channels);
    sp_model *m = classifier("lenet");
    sp_model_add(m, sp_conv2d("conv1", in_channels, 6, 5, 1, size == 28 ? 2 : 0));
    sp_model_add(m, sp_relu());
    sp_model_add(m, sp_maxpool2d(2, 2, 0));
    sp_model_add(m, sp_conv2d("conv2", 6, 16, 5, 1, 0));
    sp_model_add(m, sp_relu());
    sp_model_add(m, sp_maxpool2d(2, 2, 0));
    sp_model_add(m, sp_flatten());
    sp_model_add(m, sp_linear("fc1", 16 * 5 * 5, 120));
    sp_model_add(m, sp_relu());
    sp_model_add(m, sp_linear("fc2", 120, 84));
    sp_model_add(m, sp_relu());
    sp_model_add(m, sp_linear("fc3", 84, 10));
    return m;
}

/* torchvision's VGG initialisation: conv weights Kaiming-normal (fan_out, ReLU gain),
 * linear weights N(0, 0.01²), biases 0. With the per-layer PyTorch defaults
 * (kaiming_uniform with a = √5, std 1/√(3·fan_in)) a VGG without batch norm shrinks
 * its signal by ~√6 per conv+ReLU, and SGD (lr 0.01, momentum 0.9) barely moves the loss
 * from ln 10 on Fashion-MNIST; with this scheme it trains. */
static void vgg_init(sp_model *m, sp_rng *r)
{
    for (int i = 0; i < m->nparams; i++) {
        sp_tensor *w = &m->params[i]->value;
        if (w->ndim == 1) {
            sp_tensor_zero(w);
            continue;
        }
        float std = 0.01f;
        if (w->ndim == 4) std = sqrtf(2.0f / (float)(w->shape[0] * w->shape[2] * w->shape[3]));
        for (size_t j = 0; j < w->numel; j++) w->data[j] = std * sp_rng_normal(r);
    }
}

/* VGG-11 (config A) for 32×32 inputs, no batch norm: 8 convs, 5 pools, fc 512 → classes. */
sp_model *sp_zoo_vgg11(int in_channels, int classes)
{
    SP_GUARD(NULL);
    static const int widths[8] = {64, 128, 256, 256, 512, 512, 512, 512};
    static const int pool_after[8] = {1, 1, 0, 1, 0, 1, 0, 1};
    zoo_size("vgg11", "in_channels", in_channels);
    zoo_size("vgg11", "classes", classes);
    sp_model *m = classifier("vgg11");
    int cin = in_channels;
    for (int i = 0; i < 8; i++) {
        char name[16];
        snprintf(name, sizeof name, "conv%d", i + 1);
        sp_model_add(m, sp_conv2d(name, cin, widths[i], 3, 1, 1));
        sp_model_add(m, sp_relu());
        if (pool_after[i]) sp_model_add(m, sp_maxpool2d(2, 2, 0));
        cin = widths[i];
    }
    sp_model_add(m, sp_flatten());
    sp_model_add(m, sp_linear("fc", 512, classes));
    m->init = vgg_init;
    return m;
}

sp_model *sp_zoo_rnn(int input, int hidden, int classes)
{
    SP_GUARD(NULL);
    zoo_size("rnn", "input", input);
    zoo_size("rnn", "hidden", hidden);
    zoo_size("rnn", "classes", classes);
    sp_model *m = classifier("rnn");
    sp_model_add(m, sp_rnn("rnn", input, hidden, SP_SEQ_LAST));
    sp_model_add(m, sp_linear("fc", hidden, classes));
    return m;
}

sp_model *sp_zoo_gru(int input, int hidden, int classes)
{
    SP_GUARD(NULL);
    zoo_size("gru", "input", input);
    zoo_size("gru", "hidden", hidden);
    zoo_size("gru", "classes", classes);
    sp_model *m = classifier("gru");
    sp_model_add(m, sp_gru("gru", input, hidden, SP_SEQ_LAST));
    sp_model_add(m, sp_linear("fc", hidden, classes));
    return m;
}

sp_model *sp_zoo_mlp(int input, int hidden, int classes)
{
    SP_GUARD(NULL);
    zoo_size("mlp", "input", input);
    zoo_size("mlp", "hidden", hidden);
    zoo_size("mlp", "classes", classes);
    sp_model *m = classifier("mlp");
    sp_model_add(m, sp_flatten());
    sp_model_add(m, sp_linear("fc1", input, hidden));
    sp_model_add(m, sp_relu());
    sp_model_add(m, sp_linear("fc2", hidden, classes));
    return m;
}

/* One basic block of ResNet (He et al. 2016, §4.2): conv3×3 → bn → relu → conv3×3 → bn,
 * plus the shortcut, → relu. A shortcut that changes shape is option B: a strided
 * 1×1 conv + bn (<block>.shortcut.0, .shortcut.1); otherwise the identity. Returns the
 * index of the block's output layer. bn → relu and add → relu are the fused ops
 * (batchnorm2d_relu, add_relu): the same floats as the pairs, one pass over memory
 * fewer each way. */
static int basic_block(sp_model *m, const char *name, int x, int cin, int cout, int stride)
{
    char n[64];
    snprintf(n, sizeof n, "%s.conv1", name);
    sp_model_add_from(m, sp_conv2d_nobias(n, cin, cout, 3, stride, 1), 1, (int[]){x});
    snprintf(n, sizeof n, "%s.bn1", name);
    sp_model_add(m, sp_batchnorm2d_relu(n, cout));
    snprintf(n, sizeof n, "%s.conv2", name);
    sp_model_add(m, sp_conv2d_nobias(n, cout, cout, 3, 1, 1));
    snprintf(n, sizeof n, "%s.bn2", name);
    int f = sp_model_add_from(m, sp_batchnorm2d(n, cout), 1, (int[]){sp_model_last(m)});
    int s = x;
    if (stride != 1 || cin != cout) {
        snprintf(n, sizeof n, "%s.shortcut.0", name);
        sp_model_add_from(m, sp_conv2d_nobias(n, cin, cout, 1, stride, 0), 1, (int[]){x});
        snprintf(n, sizeof n, "%s.shortcut.1", name);
        s = sp_model_add_from(m, sp_batchnorm2d(n, cout), 1, (int[]){sp_model_last(m)});
    }
    return sp_model_add_from(m, sp_add_relu(), 2, (int[]){f, s});
}

/* Kaiming-normal (fan_in, ReLU gain) convolution and linear weights, as the usual CIFAR
 * ResNet code does; linear bias PyTorch's default; batch norm γ = 1, β = 0. */
static void resnet_init(sp_model *m, sp_rng *r)
{
    for (int i = 0; i < m->nlayers; i++) {
        sp_layer *l = m->layers[i];
        if (l->op->init_params) l->op->init_params(l, r);   /* biases, batch norm */
        if (l->op != &sp_op_conv2d && l->op != &sp_op_linear) continue;
        sp_tensor *w = &l->params[0]->value;
        size_t fan_in = w->numel / (size_t)w->shape[0];
        float std = sqrtf(2.0f / (float)fan_in);
        for (size_t j = 0; j < w->numel; j++) w->data[j] = std * sp_rng_normal(r);
    }
}

/* ResNet-20 for 32×32 inputs (He et al. 2016, §4.2, the CIFAR variant): conv3×3 16 → bn → relu →
 * 3 stages × 3 basic blocks (16, 32, 64 channels, stride 2 entering stages 2 and 3,
 * option-B shortcuts there) → global average pooling → fc. Convs have no bias (batch
 * norm follows each). */
sp_model *sp_zoo_resnet20(int in_channels, int classes)
{
    SP_GUARD(NULL);
    zoo_size("resnet20", "in_channels", in_channels);
    zoo_size("resnet20", "classes", classes);
    sp_model *m = classifier("resnet20");
    sp_model_add(m, sp_conv2d_nobias("conv1", in_channels, 16, 3, 1, 1));
    sp_model_add(m, sp_batchnorm2d_relu("bn1", 16));
    int x = sp_model_last(m);
    static const int widths[3] = {16, 32, 64};
    int cin = 16;
    for (int s = 0; s < 3; s++)
        for (int b = 0; b < 3; b++) {
            char name[32];
            snprintf(name, sizeof name, "layer%d.%d", s + 1, b);
            x = basic_block(m, name, x, cin, widths[s], s > 0 && b == 0 ? 2 : 1);
            cin = widths[s];
        }
    sp_model_add(m, sp_global_avgpool2d());
    sp_model_add(m, sp_linear("fc", 64, classes));
    m->init = resnet_init;
    return m;
}

typedef struct zoo_entry {
    const char *name;
    int ndim, shape[3];
} zoo_entry;

static const zoo_entry ZOO[] = {
    {"lenet", 3, {1, 28, 28}}, {"vgg11", 3, {3, 32, 32}}, {"rnn", 2, {1000, 1}},
    {"gru", 2, {1034, 12}},    {"mlp", 3, {1, 28, 28}}, {"resnet20", 3, {1, 32, 32}},
};
#define NZOO (sizeof ZOO / sizeof ZOO[0])

const char *sp_zoo_names(void) { return "lenet|vgg11|rnn|gru|mlp|resnet20"; }

static const zoo_entry *zoo_find(const char *name)
{
    for (size_t i = 0; i < NZOO; i++)
        if (strcmp(ZOO[i].name, name) == 0) return &ZOO[i];
    sp_fail("--model %s: unknown model (expected one of %s)", name, sp_zoo_names());
}

int sp_zoo_input_shape(const char *name, int shape[3])
{
    SP_GUARD(SP_ERR);
    if (!name) sp_fail("sp_zoo_input_shape: argument 'name' is NULL");
    if (!shape) sp_fail("sp_zoo_input_shape: argument 'shape' is NULL");
    const zoo_entry *e = zoo_find(name);
    memcpy(shape, e->shape, sizeof e->shape);
    return e->ndim;
}

sp_model *sp_zoo_model(const char *name)
{
    SP_GUARD(NULL);
    if (!name) sp_fail("sp_zoo_model: argument 'name' is NULL");
    const zoo_entry *e = zoo_find(name);
    if (strcmp(e->name, "lenet") == 0) return sp_zoo_lenet(1, 28);
    if (strcmp(e->name, "vgg11") == 0) return sp_zoo_vgg11(3, 10);
    if (strcmp(e->name, "rnn") == 0) return sp_zoo_rnn(1, 20, 10);
    if (strcmp(e->name, "gru") == 0) return sp_zoo_gru(12, 20, 10);
    if (strcmp(e->name, "resnet20") == 0) return sp_zoo_resnet20(1, 10);
    return sp_zoo_mlp(28 * 28, 128, 10);
}
