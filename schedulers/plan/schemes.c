/* schemes.c — the scheme registry (schedule.h): one row per scheme, in the order every
 * list prints them. A RULES row points at a rule set (rules.h), a LIST row at a
 * generator (gen.h); the older views — sp_scheme_find (the RULES rows as sp_scheme),
 * sp_pp_find (the LIST rows as sp_pp_generator, actions.h), sp_schedule_all_names — are
 * read from this table. Adding a scheme: its file, its declaration in rules.h or gen.h,
 * and one row here. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "core/error.h"
#include "schedulers/plan/actions.h"
#include "schedulers/plan/gen.h"
#include "schedulers/plan/rules.h"
#include "schedulers/plan/schedule.h"
#include "schedulers/plan/schedule_internal.h"

#define RULES(name, help, rules) {name, SP_SCHEME_RULES, help, &(rules), NULL, 0}
#define LIST(name, help, fn, chunks) {name, SP_SCHEME_LIST, help, NULL, fn, chunks}

static const sp_scheme_def SCHEMES[] = {
    RULES("ddp", "Distributed Data Parallel: w = (b, b)", sp_rules_ddp),
    RULES("fsdp", "Fully Sharded DDP: w = (s, b), weights of stage s on worker s", sp_rules_fsdp),
    RULES("gpipe", "GPipe: w = (s, s), all forwards before backwards", sp_rules_gpipe),
    /* 1f1b and 1f1b-strict: the same PipeDream-Flush idea in the two forms a scheme can
     * take. 1f1b is [U]'s: rules (backward first, at most W − w micro-batches in flight)
     * that the greedy simulator turns into an order, so it follows the costs, takes
     * --split (its G jobs then fill whatever is idle) and a LayerPipe placement, and is
     * the one [U]'s figures use. 1f1b-strict (below) is the textbook order written down
     * rank by rank as an action list — the baseline the zero-bubble lists modify and
     * PyTorch's Schedule1F1B — whatever the costs. Same latency on unit costs unsplit;
     * they differ once the backward is split or the costs are uneven. */
    RULES("1f1b", "1F1B (PipeDream-Flush): GPipe placement, backward first, W-w micro-batches in flight",
          sp_rules_1f1b),
    RULES("lpp", "Looped PP: w = (h(s,b), h(s,b)), h = (Rb mod W) + (s mod R)", sp_rules_lpp),
    RULES("fslpp", "Fully Sharded LPP: w = (h(s,s), h(s,b))", sp_rules_fslpp),
    RULES("ooo-ff", "GPipe + gradient fast-forwarding: delta before G (ooo §5.2.1)", sp_rules_ooo_ff),
    RULES("ooo-modulo", "modulo layer allocation s mod W + fast-forwarding (ooo §5.2.1)", sp_rules_ooo_modulo),
    RULES("ddp-ooo", "DDP with ooo's reverse first-k weight-gradient order (ooo §5.1, Algorithm 2)",
          sp_rules_ddp_ooo),
    RULES("dualpipe", "DualPipe (DeepSeek): bidirectional, rank r holds stages r and W-1-r, half the micro-batches from each end",
          sp_rules_dualpipe),
    /* the fixed order of 1f1b above (see there why both exist) */
    LIST("1f1b-strict", "1F1B with a fixed order: p-r-1 warm-up forwards, one F one B, cool-down (B = I+W)",
         sp_pp_gen_1f1b_strict, 1),
    LIST("zb-h1", "zero bubble H1 (Qi et al. 2024): 1F1B's memory, W deferred into the bubbles", sp_pp_gen_zb_h1, 1),
    LIST("zb-h2", "zero bubble H2 (Qi et al. 2024): 2p-1 in flight, W fills warm-up and cool-down", sp_pp_gen_zb_h2,
         1),
    LIST("interleaved-1f1b", "Megatron interleaved 1F1B: --chunks v per rank, chunk c on rank c mod p",
         sp_pp_gen_interleaved_1f1b, 2),
    LIST("interleaved-zb", "PyTorch InterleavedZeroBubble (ZB1P): interleaved 1F1B's placement, I then W deferred by r",
         sp_pp_gen_interleaved_zb, 2),
    LIST("looped-bfs", "PyTorch LoopedBFS: chunk c on rank c mod p, every F of a chunk, then the backwards",
         sp_pp_gen_looped_bfs, 2),
    LIST("1f1b-v", "1F1B on the V placement: zbv's order with I and W run together as B", sp_pp_gen_1f1b_v, 2),
    LIST("zbv", "zero bubble V (Qi et al. 2024): two chunks per rank in a V", sp_pp_gen_zbv, 2),
    LIST("v-half", "V-Half (Qi et al. 2024, controllable memory): half of 1F1B's activations", sp_pp_gen_v_half, 2),
    LIST("v-min", "V-Min (Qi et al. 2024, controllable memory): a third of 1F1B's activations", sp_pp_gen_v_min, 2),
    LIST("dualpipev", "DualPipeV (DeepSeek): two chunks per rank in a V, paired forward/backward",
         sp_pp_gen_dualpipev, 2),
    LIST("zb-auto", "zero bubble automatic: the shortest greedy list schedule within --mem-limit", sp_pp_gen_zb_auto,
         1),
    {"custom", SP_SCHEME_CUSTOM, "per-rank action lists from a CSV", NULL, NULL, 0},
};
#define NSCHEMES ((int)(sizeof SCHEMES / sizeof SCHEMES[0]))

int sp_scheme_def_count(void) { return NSCHEMES; }
const sp_scheme_def *sp_scheme_def_at(int i) { return i >= 0 && i < NSCHEMES ? &SCHEMES[i] : NULL; }

const sp_scheme_def *sp_scheme_def_find(const char *name)
{
    for (int i = 0; name && i < NSCHEMES; i++)
        if (!strcmp(SCHEMES[i].name, name)) return &SCHEMES[i];
    return NULL;
}

/* ---- the views, built once from the table ------------------------------------------------ */

/* An action-list scheme's sp_scheme: each stage on the rank of its chunk, the fixed order
 * of the list replacing the priority. */
static int w_placed(const sp_schedule *s, sp_job j) { return s->stage_worker[j.stage]; }
static long prio_later(const sp_schedule *s, sp_job j) { return 0; }   /* the fixed position replaces it */
static void setup_given(sp_schedule *s) { (void)s; }

static sp_scheme views[NSCHEMES];            /* every row as an sp_scheme          */
static sp_pp_generator generators[NSCHEMES]; /* the LIST rows as generators          */
static int rules_row[NSCHEMES], nrules, ngenerators;
static char rules_names[256], all_names[1024];
static pthread_once_t views_once = PTHREAD_ONCE_INIT;

static void append(char *buf, size_t len, const char *name)
{
    size_t n = strlen(buf);
    snprintf(buf + n, len - n, "%s%s", n ? "|" : "", name);
}

static void init_views(void)
{
    for (int i = 0; i < NSCHEMES; i++) {
        const sp_scheme_def *d = &SCHEMES[i];
        if (d->kind == SP_SCHEME_RULES) {
            const sp_scheme_rules *r = d->rules;
            views[i] = (sp_scheme){d->name, d->help, r->split_backward, r->setup, r->compute, r->weights, r->priority,
                                   r->inflight};
            rules_row[nrules++] = i;
            append(rules_names, sizeof rules_names, d->name);
        } else {
            views[i] = (sp_scheme){d->name, d->help, false, setup_given, w_placed, w_placed, prio_later, NULL};
            if (d->kind == SP_SCHEME_LIST)
                generators[ngenerators++] = (sp_pp_generator){d->name, d->help, d->chunks_per_rank, d->generate};
        }
        append(all_names, sizeof all_names, d->name);
    }
}

static void views_init(void) { pthread_once(&views_once, init_views); }

int sp_scheme_count(void)
{
    views_init();
    return nrules;
}

const sp_scheme *sp_scheme_at(int i)
{
    views_init();
    return i >= 0 && i < nrules ? &views[rules_row[i]] : NULL;
}

const char *sp_scheme_names(void)
{
    views_init();
    return rules_names;
}

const sp_scheme *sp_scheme_find(const char *name)
{
    const sp_scheme_def *d = sp_scheme_def_find(name);
    views_init();
    if (d && d->kind == SP_SCHEME_RULES) return &views[d - SCHEMES];
    sp_fail("--scheme %s: unknown scheme (expected one of %s)", name, sp_scheme_names());
}

sp_placement sp_scheme_placement(const sp_scheme *scheme)
{
    for (int i = 0; i < NSCHEMES; i++)
        if (scheme == &views[i]) return SCHEMES[i].kind == SP_SCHEME_RULES ? SCHEMES[i].rules->placement : SP_PLACE_NONE;
    return SP_PLACE_NONE;   /* a caller's own scheme places stages by its rules */
}

const sp_scheme *sp_scheme_actions_view(const char *name)
{
    const sp_scheme_def *d = sp_scheme_def_find(name);
    views_init();
    return d && d->kind != SP_SCHEME_RULES ? &views[d - SCHEMES] : NULL;
}

bool sp_scheme_is_actions(const char *name) { return sp_scheme_actions_view(name) != NULL; }

const char *sp_schedule_all_names(void)
{
    views_init();
    return all_names;
}

int sp_pp_count(void)
{
    views_init();
    return ngenerators;
}

const sp_pp_generator *sp_pp_at(int i)
{
    views_init();
    return i >= 0 && i < ngenerators ? &generators[i] : NULL;
}

const sp_pp_generator *sp_pp_find(const char *name)
{
    views_init();
    for (int i = 0; name && i < ngenerators; i++)
        if (!strcmp(generators[i].name, name)) return &generators[i];
    return NULL;
}
