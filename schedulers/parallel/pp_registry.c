/* pp_registry.c — the table of pipeline-schedule generators (actions.h: sp_pp_find,
 * sp_pp_count, sp_pp_at). Each entry names a generator of pp_gen.h; the order is the
 * order `build/schedule --list` prints them in. Only the generators this build links
 * count: the V-shaped and automatic ones are weak references until their file is in
 * the tree (a weak reference does not pull a member out of libscanprop.a, so a
 * generator in its own file must be referenced strongly: drop its pragma then). */
#include <stddef.h>
#include <string.h>
#include "schedulers/parallel/actions.h"
#include "schedulers/parallel/pp_gen.h"


static const sp_pp_generator GENERATORS[] = {
    {"1f1b-strict", "1F1B with a fixed order: p-r-1 warm-up forwards, one F one B, cool-down (B = I+W)", 1,
     sp_pp_gen_1f1b_strict},
    {"zb-h1", "zero bubble H1 (Qi et al. 2024): 1F1B's memory, W deferred into the bubbles", 1, sp_pp_gen_zb_h1},
    {"zb-h2", "zero bubble H2 (Qi et al. 2024): 2p-1 in flight, W fills warm-up and cool-down", 1,
     sp_pp_gen_zb_h2},
    {"interleaved-1f1b", "Megatron interleaved 1F1B: --chunks v per rank, chunk c on rank c mod p", 2,
     sp_pp_gen_interleaved_1f1b},
    {"looped-bfs", "PyTorch LoopedBFS: chunk c on rank c mod p, every F of a chunk, then the backwards", 2,
     sp_pp_gen_looped_bfs},
    {"zbv", "zero bubble V (Qi et al. 2024): two chunks per rank in a V", 2, sp_pp_gen_zbv},
    {"v-half", "V-Half (Qi et al. 2024, controllable memory): half of 1F1B's activations", 2, sp_pp_gen_v_half},
    {"v-min", "V-Min (Qi et al. 2024, controllable memory): a third of 1F1B's activations", 2, sp_pp_gen_v_min},
    {"dualpipev", "DualPipeV (DeepSeek): two chunks per rank in a V, paired forward/backward", 2,
     sp_pp_gen_dualpipev},
    {"zb-auto", "zero bubble automatic: the shortest greedy list schedule within --mem-limit", 1,
     sp_pp_gen_zb_auto},
};
#define NGEN ((int)(sizeof GENERATORS / sizeof GENERATORS[0]))

/* Only the generators this build links count. */
int sp_pp_count(void)
{
    int n = 0;
    for (int i = 0; i < NGEN; i++) n += GENERATORS[i].generate != NULL;
    return n;
}

const sp_pp_generator *sp_pp_at(int i)
{
    for (int k = 0; k < NGEN && i >= 0; k++)
        if (GENERATORS[k].generate && i-- == 0) return &GENERATORS[k];
    return NULL;
}

const sp_pp_generator *sp_pp_find(const char *name)
{
    if (!name) return NULL;
    for (int i = 0; i < NGEN; i++)
        if (GENERATORS[i].generate && strcmp(GENERATORS[i].name, name) == 0) return &GENERATORS[i];
    return NULL;
}
