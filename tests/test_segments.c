/* test_segments.c — a model's graph as the chain of stages the schedules place
 * (schedule_segments.c): the cut points of a DAG, the costs summed per segment, and
 * build/schedule --model on ResNet-20 by hand. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/model.h"
#include "layers/layers.h"
#include "layers/zoo.h"
#include "schedulers/plan/schedule.h"
#include "tests/scheduletest.h"
#include "tests/testutil.h"

/* ---- a DAG model as a chain of segments (schedule_segments.c) ------------------------- */

/* Σ over a shape-only tape of m at `batch` of each op node's F + δ + G FLOPs, its forward
 * FLOPs alone, and its sp_node_act_bytes: the whole model's, for the sums of its stages. */
static void whole_model(sp_model *m, int batch, double *flops, double *fwd, double *act)
{
    int shape[3], nd = sp_zoo_input_shape(m->name, shape);
    sp_tape t;
    sp_model_forward_shapes(m, &t, batch, nd, shape);
    *flops = *fwd = *act = 0;
    for (int i = 0; i < t.n; i++) {
        if (!t.nodes[i]->op) continue;
        sp_cost k = t.nodes[i]->op->cost(t.nodes[i]);
        *flops += k.fwd_flops + k.bwd_input_flops + k.bwd_params_flops;
        *fwd += k.fwd_flops;
        *act += sp_node_act_bytes(t.nodes[i]);
    }
    sp_tape_free(&t);
}

/* ResNet-20 (one input channel, as the zoo's) is cut after each node every path goes
 * through: conv1 | bn1 (batch norm with the ReLU fused: the stem), then each residual
 * block up to its add with the block's ReLU fused (9), then the pooling and the fc:
 * 2 + 9 + 2 = 13 stages.
 * Their F, δ, G and parameter bytes add up to the whole model's; their activations too,
 * less the input of the two downsampling blocks, which both the block's conv1 and its
 * shortcut conv read (counted once: 4 B × 32 × 16×32×32 and 4 B × 32 × 32×16×16). */
Test(segments, resnet20_is_cut_at_its_articulation_points)
{
    sp_model *m = sp_zoo_model("resnet20");
    int shape[3], nd = sp_zoo_input_shape("resnet20", shape);
    sp_costs *c = sp_costs_from_model(m, nd, shape, 32, 1000);
    cr_assert_eq(c->stages, 13);   /* conv1 | bn1 (+ReLU) | the 9 blocks (each ending in add+ReLU) | pool | fc */
    const char *names[][2] = {{"0", "conv1"}, {"1", "bn1"}, {"2", "layer1.0"}, {"5", "layer2.0"},
                              {"8", "layer3.0"}, {"10", "layer3.2"}, {"11", "global_avgpool2d_1"}, {"12", "fc"}};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        cr_assert_str_eq(c->name[atoi(names[k][0])], names[k][1], "stage %s", names[k][0]);
    double flops, fwd, act, sf = 0, sfwd = 0, sact = 0, sparam = 0;
    whole_model(m, 32, &flops, &fwd, &act);
    for (int s = 0; s < c->stages; s++) {
        sf += c->fwd[s] + c->delta[s] + c->grad[s];
        sfwd += c->fwd[s];
        sact += c->act_bytes[s];
        sparam += c->param_bytes[s];
    }
    cr_assert_float_eq(sf, flops / 1e6, 1e-9 * sf, "F+δ+G %g us, the ops' %g", sf, flops / 1e6);
    cr_assert_float_eq(sfwd, fwd / 1e6, 1e-9 * sfwd);
    cr_assert_float_eq(sparam, 4.0 * (double)sp_model_numel(m), 0.5, "param bytes %g", sparam);
    cr_assert_float_eq(sact, act - 4.0 * 32 * (16 * 32 * 32 + 32 * 16 * 16), 0.5, "act %g, ops %g", sact, act);
    /* what crosses a stage boundary: the segment's output, not what it keeps */
    cr_assert_float_eq(c->out_bytes[2], 4.0 * 32 * 16 * 32 * 32, 0.5);
    cr_assert_float_eq(c->out_bytes[5], 4.0 * 32 * 32 * 16 * 16, 0.5);
    cr_assert_float_eq(c->out_bytes[12], 4.0 * 32 * 10, 0.5);
    cr_assert_gt(c->act_bytes[2], c->out_bytes[2]);
    sp_costs_free(c);
    sp_model_free(m);
}

/* A chain is every op node a cut: one stage per layer, its costs the node's, as before. */
Test(segments, a_chain_keeps_one_stage_per_layer)
{
    sp_model *m = sp_zoo_model("vgg11");
    int shape[3], nd = sp_zoo_input_shape("vgg11", shape);
    sp_costs *c = sp_costs_from_model(m, nd, shape, 4, 500);
    cr_assert_eq(c->stages, m->nlayers);
    sp_tape t;
    sp_model_forward_shapes(m, &t, 4, nd, shape);
    for (int s = 0; s < c->stages; s++) {
        const sp_node *n = t.nodes[s + 1];
        cr_assert_eq(c->fwd[s], n->op->cost(n).fwd_flops / 5e5, "stage %d", s);
        cr_assert_eq(c->act_bytes[s], sp_node_act_bytes(n), "stage %d", s);
        cr_assert_eq(c->out_bytes[s], 4.0 * (double)n->out.numel, "stage %d", s);
    }
    sp_tape_free(&t);
    sp_costs_free(c);
    sp_model_free(m);
}

/* Two branches from the input joined at the output: no node but the last is on every
 * path, nothing to cut; refused with one line naming the model. */
static void branches_only(void *arg)
{
    sp_model *m = arg;
    int shape[1] = {4};
    sp_costs_free(sp_costs_from_model(m, 1, shape, 2, 1));
}

Test(segments, a_dag_without_cut_points_is_refused)
{
    sp_model *m = sp_model_new("branches");
    sp_model_set_loss(m, sp_softmax_ce());
    sp_model_add_from(m, sp_linear("a", 4, 3), 1, (int[]){SP_MODEL_INPUT});
    sp_model_add_from(m, sp_linear("b", 4, 3), 1, (int[]){SP_MODEL_INPUT});
    sp_model_add_from(m, sp_add(), 2, (int[]){0, 1});
    cr_assert_eq(sp_try(branches_only, m), SP_ERR);
    cr_assert(strstr(sp_last_error(), "--model branches: no layer that every path from the input to the output "
                                      "goes through but the last"), "%s", sp_last_error());
    /* one cut after a: a | b-and-add is two stages */
    sp_model *m2 = sp_model_new("two");
    sp_model_set_loss(m2, sp_softmax_ce());
    sp_model_add(m2, sp_linear("a", 4, 4));
    sp_model_add(m2, sp_linear("b", 4, 4));
    sp_model_add_from(m2, sp_add(), 2, (int[]){0, 1});
    int shape[1] = {4};
    sp_costs *c = sp_costs_from_model(m2, 1, shape, 2, 1);
    cr_assert_eq(c->stages, 2);
    cr_assert_str_eq(c->name[0], "a");
    cr_assert_str_eq(c->name[1], "b+1");
    sp_costs_free(c);
    sp_model_free(m2);
    sp_model_free(m);
}

/* build/schedule --model resnet20 for two schemes, against the sum worked here: at
 * --gflops 1 (10^3 FLOPs per us) DDP with one micro-batch per worker and GPipe with one
 * micro-batch both take every job one after another, the whole model's F + δ + G; DDP's
 * worker keeps the whole micro-batch's activations (the ops' act bytes less the two
 * downsampling blocks' inputs counted twice, at 8 samples) and weights, gradients, SGD
 * momentum and buckets of 4 bytes per parameter each. */
Test(segments, program_resnet20_by_hand)
{
    sp_model *m = sp_zoo_model("resnet20");
    double flops, fwd, act;
    whole_model(m, 8, &flops, &fwd, &act);
    double want = flops / 1e3, acts = act - 4.0 * 8 * (16 * 32 * 32 + 32 * 16 * 16), p = 4.0 * (double)sp_model_numel(m);
    sp_model_free(m);
    char last[8192];
    const char *runs[] = {"--scheme ddp --workers 2 --microbatches 2", "--scheme gpipe --workers 4 --microbatches 1"};
    for (int k = 0; k < 2; k++) {
        char args[400];
        snprintf(args, sizeof args, "%s --model resnet20 --batch-size 8 --gflops 1", runs[k]);
        cr_assert_eq(program_last(args, last, sizeof last), 0, "%s: %s", args, last);
        cr_assert(strstr(last, "\"stages\":13,"), "%s", last);
        double lat = atof(strstr(last, "\"latency\":") + strlen("\"latency\":"));
        cr_assert_float_eq(lat, want, 1e-5 * want, "%s: latency %g, expected %g", args, lat, want);
    }
    cr_assert_eq(program_last("--scheme ddp --workers 2 --microbatches 2 --model resnet20 --batch-size 8", last,
                              sizeof last), 0, "%s", last);
    double peak[2];
    cr_assert_eq(peak_bytes(last, peak, 2), 2);
    cr_assert_float_eq(peak[0], acts, 0.5, "activations %g, expected %g", peak[0], acts);
    const char *tot = strstr(last, "\"peak_memory_bytes\":[");
    cr_assert_not_null(tot, "%s", last);
    double total = atof(tot + strlen("\"peak_memory_bytes\":["));
    cr_assert_float_eq(total, acts + 4 * p, 0.5, "memory %g, expected %g", total, acts + 4 * p);
}

