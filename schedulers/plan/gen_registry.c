/* gen_registry.c — the table of pipeline-schedule generators (actions.h: sp_pp_find,
 * sp_pp_count, sp_pp_at). Each entry names a generator of gen.h; the order is the
 * order `build/schedule --list` prints them in. Only the generators this build links
 * count: the V-shaped and automatic ones are weak references until their file is in
 * the tree (a weak reference does not pull a member out of libscanprop.a, so a
 * generator in its own file must be referenced strongly: drop its pragma then). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "schedulers/plan/actions.h"
#include "schedulers/plan/gen.h"


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

int sp_mem_limit_parse(const char *flag, const char *text, double *limit, bool *bytes)
{
    static const struct {
        const char *name;
        double scale;
    } UNITS[] = {{"B", 1},       {"KB", 1e3},          {"MB", 1e6},           {"GB", 1e9},
                 {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}};
    const char *what = "expected N (micro-batches of a chunk's activations per rank, 0 = none) or bytes with a "
                       "unit: B, KB, MB, GB, KiB, MiB or GiB, e.g. 512MiB";
    /* digits first: strtod alone would take "inf", "nan", hex and leading blanks */
    if (!text || !(isdigit((unsigned char)text[0]) || (text[0] == '.' && isdigit((unsigned char)text[1]))))
        return sp_error("%s %s: %s", flag, text ? text : "(none)", what);
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || !isfinite(v) || end == text) return sp_error("%s %s: %s", flag, text, what);
    if (!*end) {
        *limit = v, *bytes = false;
        return SP_OK;
    }
    for (size_t k = 0; k < sizeof UNITS / sizeof UNITS[0]; k++)
        if (!strcasecmp(end, UNITS[k].name)) {
            double b = v * UNITS[k].scale;
            if (!(b >= 1) || !isfinite(b) || b > 9007199254740992.0)   /* whole bytes, exact in a double */
                return sp_error("%s %s: a limit in bytes must be at least 1 B and at most 2^53 B", flag, text);
            *limit = b, *bytes = true;
            return SP_OK;
        }
    if (!isalpha((unsigned char)*end)) return sp_error("%s %s: %s", flag, text, what);
    return sp_error("%s %s: unknown unit \"%s\" (%s)", flag, text, end, what);
}
