/* test_actions.c — per-rank action lists (actions.h): the CSV form, every refusal with its
 * named message, and the V-shaped and automatic generators against their closed forms.
 *
 * Units. Costs are per chunk: F = I = W = 1 (B = 2), no transfer. A V schedule holds two
 * chunks per rank, each half a rank's layers, so the same model on 1F1B (one stage of two
 * chunks per rank) costs F = I = W = 2 per stage:
 *     1F1B   latency 6(m + p − 1), peak p full-rank activations (2p chunk activations).
 * Lower bound for any schedule of 2p chunks on p ranks in a V (or any placement where rank
 * p − 1 first runs chunk p − 1): rank p − 1 cannot start before the p − 1 forwards ahead
 * of it, and it has 6m units of work, so latency ≥ 6m + p − 1.
 *
 * ZB-V ([ZB] §6; the phases of gen_zbv.c): latency = max(6m + p − 1, 4m + 2(2p − 1)); the
 *     first term, the lower bound, wins from m ≥ (3p − 1)/2.
 *     Rank p − 1 starts at p − 1 and never waits again: its warm-up alternates its two
 *     chunks (p − 1 and p, the turn of the V, no transfer between them) and from then on
 *     each I it needs comes from its own chunk p or from rank p − 2, one step behind.
 *     Every other rank finishes earlier: its deferred W's fill its tail.
 *   Fewer micro-batches (the warm-up counts stay those of 2p − 1 micro-batches, the
 *     missing ones dropped, as PyTorch's ScheduleZBVZeroBubble does) the V never fills:
 *     the tail is the last micro-batches' backward chain down the V, and the latency,
 *     measured at every p = 2..8 and m < (3p − 1)/2, is 4m + 2(2p − 1). This second term
 *     is a fit to the simulation, not a derivation; the test asserts it exactly.
 *   Peak, rank r: min(2p, m + r + 1) chunk activations. Rank r runs 2(p − r) − 1 F's of
 *     its first chunk, r pairs of F's, then F, I, W of its second chunk, before its first
 *     W frees anything: 2(p − r) − 1 + 2r + 1 = 2p; from then every F is followed by a W
 *     of the same rank before the next F, so 2p stays the peak. 2p chunk activations = p
 *     full-rank activations: 1F1B's peak, with the bubble at the lower bound instead of
 *     1F1B's 6(p − 1).
 * DualPipeV ([DS] dualpipev.py's eight steps), m ≥ 2p: latency = 6m + p − 1, the bound
 *     again (the paired F & B run back to back, so DualPipe's overlap gain is not in it).
 *     DeepSeek's table gives its bubble as (PP/2 − 1)(F&B + B − 3W) with PP = 2p stages;
 *     with F&B = F + B = 3, B = 2, W = 1 that is 2(p − 1) ≥ the p − 1 measured.
 *   Peak: 2p + 1 chunk activations on every rank (DeepSeek's "PP + 1"): steps 1–2 hold
 *     2(p − r − 1) + 2(r + 1) = 2p, step 3 keeps 2p (I, W frees one, F adds one), step 4's
 *     first pair F0 then B1 reaches 2p + 1. In full-rank units p + ½.
 * V-Half and V-Min ([CM]; gen_greedy.c: the greedy list scheduler on the V placement under
 *     [CM]'s memory): peak ≤ p + 2 chunk activations (p/2 + 1 full-rank: half of 1F1B's
 *     plus one) and ≤ ⌈2p/3⌉ + 2 (p/3 + 1: a third plus one). Their latency has no clean
 *     closed form (a greedy list); [CM]'s claims are asserted as bounds: V-Half below
 *     1F1B's 6(m + p − 1) (measured ≤ 0.94 of it at p = 2..8, m = p..4p), V-Min within 5 %
 *     of it ("comparable throughput"; measured ≤ 1.035).
 * zb-auto: never above its memory limit, never longer than zb-h1 at the same limit, and
 *     with one chunk per rank at unit costs and a limit ≥ p it reaches ZB-H1's 3m + p − 1,
 *     which is the same lower bound for p stages (rank p − 1 starts at p − 1, 3m work).
 *
 * [ZB] Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024.
 * [CM] Qi et al., "Pipeline Parallelism with Controllable Memory", NeurIPS 2024.
 * [DS] DeepSeek-AI, DualPipe (dualpipev.py and its README's table). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "schedulers/plan/actions.h"
#include "schedulers/plan/gen.h"
#include "schedulers/plan/schedule.h"
#include "schedulers/sim/comm_cost.h"
#include "tests/testutil.h"

typedef int (*gen_fn)(const sp_pp_params *, sp_actions **);

static sp_actions *gen(gen_fn f, int p, int m, double mem_limit)
{
    sp_pp_params pp = {p, m, 0, NULL, mem_limit};
    sp_actions *a = NULL;
    cr_assert_eq(f(&pp, &a), SP_OK, "p=%d m=%d: %s", p, m, sp_last_error());
    cr_assert_eq(sp_actions_check(a), SP_OK, "p=%d m=%d: %s", p, m, sp_last_error());
    return a;
}

/* Simulate at unit costs, or with every chunk's activation `act` (0: one unit). */
static sp_actions_sim sim(const sp_actions *a, double act)
{
    sp_actions_sim s;
    double *one = NULL, *half = NULL;
    sp_chunk_costs c = {0};
    if (act > 0) {
        one = malloc(sizeof(double) * (size_t)a->chunks);
        half = malloc(sizeof(double) * (size_t)a->chunks);
        for (int k = 0; k < a->chunks; k++) one[k] = 1, half[k] = act;
        c = (sp_chunk_costs){a->chunks, one, one, one, half, 0};
    }
    cr_assert_eq(sp_actions_simulate(a, act > 0 ? &c : NULL, &s), SP_OK, "%s", sp_last_error());
    free(one);
    free(half);
    return s;
}

static double max_peak(const sp_actions *a, const sp_actions_sim *s)
{
    double pk = 0;
    for (int r = 0; r < a->ranks; r++) pk = fmax(pk, s->peak_act[r]);
    return pk;
}

/* ---------------------------------------------------------------------------------- */
/* CSV                                                                                */

static const char *write_file(const char *name, const char *text)
{
    static char path[8][512];
    static int k;
    char *p = path[k++ % 8];
    snprintf(p, 512, "%s/%s", tu_tmpdir(), name);
    FILE *f = fopen(p, "w");
    cr_assert(f);
    fputs(text, f);
    fclose(f);
    return p;
}

static void round_trip(gen_fn f, int p, int m)
{
    sp_actions *a = gen(f, p, m, 0);
    char path[512];
    snprintf(path, sizeof path, "%s/rt.csv", tu_tmpdir());
    FILE *out = fopen(path, "w");
    sp_actions_write_csv(out, a);
    fclose(out);
    sp_actions *b = NULL;
    cr_assert_eq(sp_actions_read_csv(path, &b), SP_OK, "%s", sp_last_error());
    cr_assert_eq(b->ranks, a->ranks);
    cr_assert_eq(b->chunks, a->chunks);
    cr_assert_eq(b->micro, a->micro);
    for (int c = 0; c < a->chunks; c++) cr_assert_eq(b->chunk_rank[c], a->chunk_rank[c], "chunk %d", c);
    for (int r = 0; r <= a->ranks; r++) cr_assert_eq(b->off[r], a->off[r]);
    cr_assert(memcmp(a->act, b->act, sizeof(sp_action) * (size_t)a->off[a->ranks]) == 0, "same lists");
    sp_actions_sim sa = sim(a, 0), sb = sim(b, 0);
    cr_assert_eq(sa.latency, sb.latency);
    sp_actions_sim_free(&sa);
    sp_actions_sim_free(&sb);
    sp_actions_free(a);
    sp_actions_free(b);
}

Test(actions, csv_round_trip)
{
    round_trip(sp_pp_gen_zbv, 3, 6);          /* F, I, W */
    round_trip(sp_pp_gen_dualpipev, 4, 8);    /* B as well */
    round_trip(sp_pp_gen_zb_auto, 4, 8);
    /* Blanks around cells and empty cells are idle; CRLF line ends. */
    sp_actions *a = NULL;
    const char *p = write_file("blank.csv", " 0F0 ,, 0I0,0W0\r\n1F0,1I0,,1W0,\r\n");
    cr_assert_eq(sp_actions_read_csv(p, &a), SP_OK, "%s", sp_last_error());
    cr_assert_eq(a->ranks, 2);
    cr_assert_eq(a->off[2], 6);
    char s[32];
    cr_assert_str_eq(sp_action_str(a->act[1], s), "0I0");
    sp_actions_free(a);
}

/* The list in text is refused, the message holding every piece of want[]. */
static void refused(const char *name, const char *text, const char *want1, const char *want2)
{
    const char *p = write_file(name, text);
    sp_actions *a = (sp_actions *)0x1;
    cr_assert_eq(sp_actions_read_csv(p, &a), SP_ERR, "%s accepted", name);
    cr_assert_eq(a, (sp_actions *)0x1, "out untouched on failure");
    const char *e = sp_last_error();
    cr_assert(strstr(e, p), "%s: message names the file: %s", name, e);
    cr_assert(strstr(e, want1), "%s: \"%s\" not in: %s", name, want1, e);
    if (want2) cr_assert(strstr(e, want2), "%s: \"%s\" not in: %s", name, want2, e);
}

Test(actions, refusals_name_rank_action_and_reason)
{
    static const struct {
        const char *name, *text, *want1, *want2;
    } rows[] = {
        {"missing.csv", "0F0,0F1,0I0,0W0,0I1,0W1\n1F0,1I0,1W0,1I1,1W1\n", "rank 1 (line 2): action 1F1 missing", NULL},
        {"missing_b.csv", "0F0,0I0,0W0\n1F0\n", "rank 1 (line 2): action 1B0 missing", "or 1I0"},
        {"repeated.csv", "0F0,0I0,0W0\n1F0,1F0,1I0,1W0\n", "rank 1: action 1F0 repeated", "at line 2, cell 2"},
        {"two_ranks.csv", "0F0,0I0,0W0\n1F0,1I0,1W0,0F1\n", "rank 1: action 0F1 (line 2, cell 4): chunk 0 is on rank 0 too",
         "a chunk on two ranks"},
        {"i_without_w.csv", "0F0,0I0,0W0\n1F0,1I0\n", "rank 1 (line 2): action 1I0 without 1W0", "I without W"},
        {"w_without_i.csv", "0F0,0B0\n1F0,1W0,1B0\n", "and 1W0 both present", "B is I and W together"},
        {"b_and_i.csv", "0F0,0I0,0W0\n1F0,1B0,1I0\n", "rank 1 (line 2): action 1B0 and 1I0 both present", NULL},
        {"w_alone.csv", "0F0,0B0\n1F0,1W0\n", "rank 1 (line 2): action 1W0 without 1I0", "W without I"},
        /* An action before its predecessor can exist on any rank: on its own rank, later. */
        {"own_order.csv", "0I0,0F0,0W0\n1F0,1I0,1W0\n",
         "rank 0: action 0I0 (line 1, cell 1) waits for 0F0, which no rank can run first", "later in rank 0's own list"},
        /* A cycle between ranks: rank 0 waits for rank 1's backward, rank 1 for rank 0's
         * forward of the next micro-batch. */
        {"cycle.csv", "0F0,0I0,0W0,0F1,0I1,0W1\n1F1,1F0,1I0,1W0,1I1,1W1\n",
         "rank 0: action 0I0 (line 1, cell 2) waits for 1I0, which no rank can run first: a cycle between ranks",
         "rank 1: 1F1 waits for 0F1 on rank 0"},
        {"bad_type.csv", "0F0,0Q0\n", "line 1 (rank 0), cell 2: \"0Q0\" is not an action", "<chunk><F|I|W|B><micro-batch>"},
        {"bad_chunk.csv", "0F0\nF0\n", "line 2 (rank 1), cell 1: \"F0\" is not an action", NULL},
        {"bad_micro.csv", "0F\n", "line 1 (rank 0), cell 1: \"0F\" is not an action", NULL},
        {"bad_tail.csv", "0F0x\n", "\"0F0x\" is not an action", NULL},
        {"bad_space.csv", "0F 0\n", "\"0F 0\" is not an action", NULL},
        {"bad_sign.csv", "-1F0\n", "\"-1F0\" is not an action", NULL},
        {"lower.csv", "0f0\n", "\"0f0\" is not an action", NULL},
        {"huge.csv", "0F99999999999\n", "an index above 1000000", NULL},
        {"empty.csv", "", "no actions", NULL},
        {"blank_cells.csv", ",,\n,\n", "no actions", NULL},
        /* A typo for a missing action names the rank that lacks it, not every other rank. */
        {"typo_micro.csv", "0F0,0F1,0B0,0B1\n1F0,1F1,1B0,1B1\n2F0,2F1,2B0,2B1\n3F2,3F1,3B0,3B1\n",
         "line 4 (rank 3), cell 1: 3F2 names micro-batch 2, but no chunk runs more than 2 forwards", "rank 3 has no 3F0"},
        /* Blank lines: a rank that runs nothing would shift every later rank. */
        {"blank_lead.csv", "\n0F0,0B0\n1F0,1B0\n", "line 1 is blank, and line 2 after it has actions", NULL},
        {"blank_mid.csv", "0F0,0B0\n\n \t,\n1F0,1B0\n", "line 2 is the first of blank lines, and line 4", NULL},
        /* PyTorch's forms, misspelt or misplaced */
        {"torch_comm_only.csv", "0F0,0B0,0SEND_F0\n1RECV_F0\n", "line 2 (rank 1) has no computation", NULL},
        {"torch_comm_chunk.csv", "0F0,0B0,1RECV_F0\n1F0,1B0\n", "line 1 (rank 0), cell 3: 1RECV_F0 does not fit the "
         "list's messages (another rank holds its chunk)", NULL},
        {"torch_comm_local.csv", "0F0,0SEND_F0,1F0,1B0,0B0\n", "0SEND_F0 does not fit", "chunk 1 is on the same rank"},
        {"torch_comm_end.csv", "0F0,0B0,0SEND_B0\n", "0SEND_B0 does not fit", "chunk 0 has no chunk before it"},
        {"torch_comm_micro.csv", "0F0,0SEND_F3,0B0\n1F0,1B0\n", "0SEND_F3 does not fit",
         "the list has micro-batches 0..0"},
        {"torch_no_micro.csv", "0F0,0B0,0SEND_F\n", "\"0SEND_F\" is not an action", "0REDUCE_GRAD"},
        {"torch_grad_micro.csv", "0F0,0B0,0REDUCE_GRAD0\n", "\"0REDUCE_GRAD0\" is not an action", NULL},
        {"torch_overlap_tail.csv", "(0F0;0B0)OVERLAP\n", "a compound is (<action>;<action>...)OVERLAP_F_B", NULL},
        {"torch_overlap_comm.csv", "(0F0;0SEND_F0)OVERLAP_F_B,0B0\n", "part 2 \"0SEND_F0\" is not a computation",
         NULL},
        {"torch_overlap_empty.csv", "()OVERLAP_F_B\n", "is not an action", NULL},
        {"torch_overlap_nested.csv", "((0F0)OVERLAP_F_B;0B0)OVERLAP_F_B\n", "is not an action", NULL},
    };
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++)
        refused(rows[k].name, rows[k].text, rows[k].want1, rows[k].want2);
    /* Not a regular file. */
    sp_actions *a = NULL;
    cr_assert_eq(sp_actions_read_csv(tu_tmpdir(), &a), SP_ERR);
    cr_assert(strstr(sp_last_error(), "not a regular file"), "%s", sp_last_error());
    cr_assert_eq(sp_actions_read_csv("/nonexistent/x.csv", &a), SP_ERR);
    cr_assert(strstr(sp_last_error(), "/nonexistent/x.csv"), "%s", sp_last_error());
}

Test(actions, check_on_built_lists)
{
    /* chunk_rank disagreeing with where the actions are, and out-of-range actions. */
    sp_actions *a = sp_actions_new(2, 2, 1, 0);
    sp_actions_push(a, 0, (sp_action){0, 0, SP_ACT_F});
    sp_actions_push(a, 0, (sp_action){0, 0, SP_ACT_B});
    sp_actions_push(a, 1, (sp_action){1, 0, SP_ACT_F});
    sp_actions_push(a, 1, (sp_action){1, 0, SP_ACT_B});
    cr_assert_eq(sp_actions_check(a), SP_OK, "%s", sp_last_error());
    a->chunk_rank[1] = 0;
    cr_assert_eq(sp_actions_check(a), SP_ERR);
    cr_assert(strstr(sp_last_error(), "rank 1: action 1F0 (position 1): chunk 1 is on rank 0 too"), "%s", sp_last_error());
    a->chunk_rank[1] = 1;
    a->act[3].micro = 5;
    cr_assert_eq(sp_actions_check(a), SP_ERR);
    cr_assert(strstr(sp_last_error(), "rank 1: action 1B5 (position 2) is out of range"), "%s", sp_last_error());
    a->act[3].micro = 0;
    /* Unit costs: a B is 2; with a transfer of 0.5 each way: 1 + .5 + 1 + 2 + .5 + 2. */
    sp_actions_sim s = sim(a, 0);
    cr_assert_float_eq(s.latency, 6, 1e-12);
    cr_assert_eq(s.messages[0], 1);
    cr_assert_eq(s.messages[1], 1);
    sp_actions_sim_free(&s);
    double one[2] = {1, 1};
    sp_chunk_costs c = {2, one, one, one, NULL, 0.5};
    cr_assert_eq(sp_actions_simulate(a, &c, &s), SP_OK);
    cr_assert_float_eq(s.latency, 7, 1e-12);
    cr_assert_float_eq(s.bubble, 1 - 6.0 / 14, 1e-12);
    sp_actions_sim_free(&s);
    c.chunks = 3;
    cr_assert_eq(sp_actions_simulate(a, &c, NULL), SP_ERR);
    cr_assert(strstr(sp_last_error(), "costs for 3 chunks, the list has 2"), "%s", sp_last_error());
    c.chunks = 2;
    c.transfer = NAN;
    cr_assert_eq(sp_actions_simulate(a, &c, NULL), SP_ERR);
    sp_actions_free(a);
}

/* ---------------------------------------------------------------------------------- */
/* Closed forms at unit costs                                                         */

Test(actions, zbv_closed_form_and_peak)
{
    for (int p = 2; p <= 8; p++)
        for (int m = p; m <= 4 * p; m++) {
            sp_actions *a = gen(sp_pp_gen_zbv, p, m, 0);
            cr_assert_eq(a->chunks, 2 * p);
            for (int c = 0; c < 2 * p; c++) cr_assert_eq(a->chunk_rank[c], c < p ? c : 2 * p - 1 - c);
            sp_actions_sim s = sim(a, 0);
            /* PyTorch's order takes max(6m + p − 1, 4m + 2(2p − 1)), the lower bound
             * 6m + p − 1 from m ≥ (3p − 1)/2 on; below that [ZB]'s heuristic fills the V
             * and is shorter. */
            double order = fmax(6 * m + p - 1, 4 * m + 2 * (2 * p - 1)), bound = 6 * m + p - 1;
            cr_assert(s.latency <= order + 1e-9 && s.latency >= bound - 1e-9, "zbv p=%d m=%d: latency %g, PyTorch's "
                      "order %g, bound %g", p, m, s.latency, order, bound);
            if (2 * m >= 3 * p - 1) cr_assert_float_eq(s.latency, bound, 1e-9, "zbv p=%d m=%d", p, m);
            cr_assert(s.latency < 6.0 * (m + p - 1), "below 1F1B");
            for (int r = 0; r < p; r++) {
                cr_assert(s.peak_act[r] <= 2 * p + 1e-9, "zbv p=%d m=%d rank %d peak %g", p, m, r, s.peak_act[r]);
                if (s.latency == order) {   /* PyTorch's order kept: its peak */
                    int pk = m + r + 1 < 2 * p ? m + r + 1 : 2 * p;
                    cr_assert_float_eq(s.peak_act[r], pk, 1e-9, "zbv p=%d m=%d rank %d peak %g", p, m, r,
                                       s.peak_act[r]);
                }
                /* Rank 0 sends chunk 0's F and chunk 2p−1's I; the others both ways twice. */
                cr_assert_eq(s.messages[r], (r == 0 || r == p - 1 ? 2 : 4) * m, "p=%d m=%d rank %d", p, m, r);
            }
            sp_actions_sim_free(&s);
            /* In full-rank activations (a chunk is half a rank): 1F1B's p. */
            if (m >= 2 * p - 1) {
                s = sim(a, 0.5);
                for (int r = 0; r < p; r++) cr_assert_float_eq(s.peak_act[r], p, 1e-9);
                sp_actions_sim_free(&s);
            }
            sp_actions_free(a);
        }
}

Test(actions, dualpipev_closed_form_and_peak)
{
    for (int p = 2; p <= 8; p++) {
        sp_pp_params pp = {p, 2 * p - 1, 0, NULL, 0};
        sp_actions *a = NULL;
        cr_assert_eq(sp_pp_gen_dualpipev(&pp, &a), SP_ERR, "needs m ≥ 2p");
        cr_assert(strstr(sp_last_error(), "expected at least"), "%s", sp_last_error());
        for (int m = 2 * p; m <= 4 * p; m++) {
            a = gen(sp_pp_gen_dualpipev, p, m, 0);
            sp_actions_sim s = sim(a, 0);
            cr_assert_float_eq(s.latency, 6 * m + p - 1, 1e-9, "dualpipev p=%d m=%d: %g", p, m, s.latency);
            cr_assert(s.latency <= 6 * m + 2 * (p - 1), "DeepSeek's bubble bound");
            for (int r = 0; r < p; r++)
                cr_assert_float_eq(s.peak_act[r], 2 * p + 1, 1e-9, "dualpipev p=%d m=%d rank %d: %g", p, m, r,
                                   s.peak_act[r]);
            /* Full backwards in the paired steps, split I/W at the ends. */
            int nb = 0, ni = 0;
            for (int k = 0; k < a->off[p]; k++) nb += a->act[k].type == SP_ACT_B, ni += a->act[k].type == SP_ACT_I;
            cr_assert(nb > 0 && ni > 0);
            sp_actions_sim_free(&s);
            s = sim(a, 0.5);
            for (int r = 0; r < p; r++) cr_assert_float_eq(s.peak_act[r], p + 0.5, 1e-9);
            sp_actions_sim_free(&s);
            sp_actions_free(a);
        }
    }
}

Test(actions, v_half_and_v_min_memory_and_bounds)
{
    for (int p = 2; p <= 8; p++)
        for (int m = p; m <= 4 * p; m++) {
            double onefonb = 6.0 * (m + p - 1), bound = 6.0 * m + p - 1;
            sp_actions *a = gen(sp_pp_gen_v_half, p, m, 0);
            sp_actions_sim s = sim(a, 0);
            cr_assert(max_peak(a, &s) <= p + 2 + 1e-9, "v-half p=%d m=%d peak %g", p, m, max_peak(a, &s));
            cr_assert(s.latency < onefonb, "v-half p=%d m=%d: %g, 1F1B %g", p, m, s.latency, onefonb);
            cr_assert(s.latency >= bound, "v-half p=%d m=%d below the lower bound", p, m);
            sp_actions_sim_free(&s);
            sp_actions_free(a);
            a = gen(sp_pp_gen_v_min, p, m, 0);
            s = sim(a, 0);
            int cap = (2 * p + 2) / 3 + 2;
            cr_assert(max_peak(a, &s) <= cap + 1e-9, "v-min p=%d m=%d peak %g", p, m, max_peak(a, &s));
            cr_assert(s.latency <= 1.05 * onefonb, "v-min p=%d m=%d: %g, 1F1B %g", p, m, s.latency, onefonb);
            cr_assert(s.latency >= bound);
            sp_actions_sim_free(&s);
            sp_actions_free(a);
        }
    /* V-Min holds less than V-Half, which holds less than ZB-V (at p = 8: 8, 10, 16). */
    sp_actions *z = gen(sp_pp_gen_zbv, 8, 32, 0), *h = gen(sp_pp_gen_v_half, 8, 32, 0),
               *n = gen(sp_pp_gen_v_min, 8, 32, 0);
    sp_actions_sim sz = sim(z, 0), sh = sim(h, 0), sn = sim(n, 0);
    cr_assert(max_peak(n, &sn) < max_peak(h, &sh) && max_peak(h, &sh) < max_peak(z, &sz));
    cr_assert(sz.latency <= sh.latency && sh.latency <= sn.latency);
    sp_actions_sim_free(&sz);
    sp_actions_sim_free(&sh);
    sp_actions_sim_free(&sn);
    sp_actions_free(z);
    sp_actions_free(h);
    sp_actions_free(n);
}

/* ---------------------------------------------------------------------------------- */
/* zb-auto                                                                            */

Test(actions, zb_auto_within_limit_and_not_longer_than_zb_h1)
{
    for (int p = 2; p <= 6; p++)
        for (int m = p; m <= 3 * p; m += p / 2 + 1) {
            sp_pp_params pp = {p, m, 0, NULL, 0};
            sp_actions *h1 = NULL;
            cr_assert_eq(sp_pp_gen_zb_h1(&pp, &h1), SP_OK, "%s", sp_last_error());
            sp_actions_sim sh = sim(h1, 0);
            double h1_peak = max_peak(h1, &sh);
            double limits[] = {1, 2, p - 1, p, p + 1, 2 * p - 1, 0};
            for (int k = 0; k < 7; k++) {
                if (limits[k] < 1 && k < 6) continue;
                sp_actions *a = gen(sp_pp_gen_zb_auto, p, m, limits[k]);
                sp_actions_sim s = sim(a, 0);
                if (limits[k] > 0)
                    cr_assert(max_peak(a, &s) <= limits[k] + 1e-9, "zb-auto p=%d m=%d limit %g: peak %g", p, m,
                              limits[k], max_peak(a, &s));
                if (limits[k] == 0 || h1_peak <= limits[k])
                    cr_assert(s.latency <= sh.latency + 1e-9, "zb-auto p=%d m=%d limit %g: %g, zb-h1 %g", p, m,
                              limits[k], s.latency, sh.latency);
                if (limits[k] == 0 || limits[k] >= p)
                    cr_assert_float_eq(s.latency, 3 * m + p - 1, 1e-9, "the bound 3m + p − 1");
                sp_actions_sim_free(&s);
                sp_actions_free(a);
            }
            sp_actions_sim_free(&sh);
            sp_actions_free(h1);
        }
    sp_pp_params pp = {4, 8, 0, NULL, 0.5};
    sp_actions *a = NULL;
    cr_assert_eq(sp_pp_gen_zb_auto(&pp, &a), SP_ERR);
    cr_assert(strstr(sp_last_error(), "below one micro-batch's activations"), "%s", sp_last_error());
    pp.mem_limit = -1;
    cr_assert_eq(sp_pp_gen_zb_auto(&pp, &a), SP_ERR);
    pp.mem_limit = 0;
    pp.chunks_per_rank = 3;
    cr_assert_eq(sp_pp_gen_zb_auto(&pp, &a), SP_ERR);
}

/* Uneven costs, a transfer, activations of different sizes: still within the limit. */
Test(actions, zb_auto_with_costs)
{
    enum { P = 4, M = 8 };
    double f[P] = {1, 2, 1.5, 1}, i[P] = {2, 3, 2, 1.5}, w[P] = {1, 1.5, 0.5, 2}, act[P] = {3, 1, 2, 2};
    sp_chunk_costs c = {P, f, i, w, act, 0.25};
    for (double lim = 3; lim <= 24; lim += 3) {
        sp_pp_params pp = {P, M, 0, &c, lim};
        sp_actions *a = NULL;
        cr_assert_eq(sp_pp_gen_zb_auto(&pp, &a), SP_OK, "limit %g: %s", lim, sp_last_error());
        sp_actions_sim s;
        cr_assert_eq(sp_actions_simulate(a, &c, &s), SP_OK);
        for (int r = 0; r < P; r++) cr_assert(s.peak_act[r] <= lim + 1e-9, "limit %g rank %d: %g", lim, r, s.peak_act[r]);
        /* No schedule beats the slowest rank's work plus what must precede it. */
        cr_assert(s.latency >= M * (i[1] + f[1] + w[1]) - 1e-9);
        sp_pp_params q = {P, M, 0, &c, 0};
        sp_actions *h1 = NULL;
        cr_assert_eq(sp_pp_gen_zb_h1(&q, &h1), SP_OK);
        sp_actions_sim sh;
        cr_assert_eq(sp_actions_simulate(h1, &c, &sh), SP_OK);
        if (max_peak(h1, &sh) <= lim) cr_assert(s.latency <= sh.latency + 1e-9, "limit %g", lim);
        sp_actions_sim_free(&sh);
        sp_actions_free(h1);
        sp_actions_sim_free(&s);
        sp_actions_free(a);
    }
}

/* ---------------------------------------------------------------------------------- */
/* Text only, blank lines, PyTorch's forms                                             */

static const char *write_bytes(const char *name, const char *data, size_t n)
{
    static char path[4][512];
    static int k;
    char *p = path[k++ % 4];
    snprintf(p, 512, "%s/%s", tu_tmpdir(), name);
    tu_write_file(p, data, n, false);
    return p;
}

/* A NUL byte anywhere is refused naming the file, the line and the byte: C's string
 * functions would end the line there and run the rest of it as nothing. */
Test(actions, nul_byte_is_refused_where_it_is)
{
    static const struct {
        const char *data;
        size_t n;
        const char *want;
    } rows[] = {
        {"0F0,0B0\0,0F1,0B1\n", 17, "line 1, byte 8: a NUL byte"},
        {"0F0,0F1,0B0,0B1\n\0" "1F0,1F1,1B0,1B1\n", 32, "line 2, byte 1: a NUL byte"},
        {"0F0,0B0\n1F0,1B0\0", 16, "line 2, byte 8: a NUL byte"},
    };
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        const char *p = write_bytes("nul.csv", rows[k].data, rows[k].n);
        sp_actions *a = NULL;
        cr_assert_eq(sp_actions_read_csv(p, &a), SP_ERR, "row %zu accepted", k);
        cr_assert(strstr(sp_last_error(), p) && strstr(sp_last_error(), rows[k].want), "row %zu: %s", k,
                  sp_last_error());
        cr_assert_null(a);
    }
    /* The same for a cost profile and a communication profile; a profile starting with
     * NUL is not taken as "no profile". */
    const char *prof = write_bytes("nul_profile.csv", "\0layer,fwd,bwd_grad,bwd_delta\nl0,1,1,1\n", 38);
    sp_costs *c = NULL;
    cr_assert_eq(sp_costs_load_csv(prof, &c), SP_ERR);
    cr_assert(strstr(sp_last_error(), "line 1, byte 1: a NUL byte"), "%s", sp_last_error());
    const char *cp = write_bytes("nul_comm.csv", "row,op,ranks,bytes,alpha_us,beta_bytes_per_us,us\n\0", 51);
    sp_comm_model *m = NULL;
    cr_assert_eq(sp_comm_model_load(cp, &m), SP_ERR);
    cr_assert(strstr(sp_last_error(), "line 2, byte 1: a NUL byte"), "%s", sp_last_error());
}

/* Blank lines at the end are no ranks (the refusals of blank lines before a rank are in
 * refusals_name_rank_action_and_reason). */
Test(actions, trailing_blank_lines_are_not_ranks)
{
    const char *p = write_file("trail.csv", "0F0,0B0\r\n1F0,1B0\r\n\r\n \n,,\n\n");
    sp_actions *a = NULL;
    cr_assert_eq(sp_actions_read_csv(p, &a), SP_OK, "%s", sp_last_error());
    cr_assert_eq(a->ranks, 2);
    sp_actions_free(a);
}

/* PyTorch's raw CSVs (tests/ref/torch_csv, written by make_fixtures.py from scanprop's
 * lists by PyTorch's rules): the computation-only grid with empty cells and REDUCE_GRAD,
 * and the runtime's form with UNSHARD/RESHARD, SEND/RECV and (F;B)OVERLAP_F_B, read as
 * the same actions in the same order as the clean list, so the same makespan. */
static void same_list(const sp_actions *a, const sp_actions *b, const char *what)
{
    cr_assert(a->ranks == b->ranks && a->chunks == b->chunks && a->micro == b->micro, "%s: %dx%dx%d vs %dx%dx%d",
              what, a->ranks, a->chunks, a->micro, b->ranks, b->chunks, b->micro);
    for (int r = 0; r <= a->ranks; r++) cr_assert_eq(a->off[r], b->off[r], "%s: rank %d", what, r);
    for (int k = 0; k < a->off[a->ranks]; k++)
        cr_assert(a->act[k].chunk == b->act[k].chunk && a->act[k].micro == b->act[k].micro &&
                  a->act[k].type == b->act[k].type, "%s: action %d", what, k);
}

static double latency_at(const sp_actions *a, double f, double i, double w, double transfer)
{
    double *F = malloc(sizeof(double) * (size_t)a->chunks), *I = malloc(sizeof(double) * (size_t)a->chunks),
           *W = malloc(sizeof(double) * (size_t)a->chunks);
    for (int k = 0; k < a->chunks; k++) F[k] = f, I[k] = i, W[k] = w;
    sp_chunk_costs c = {a->chunks, F, I, W, NULL, transfer};
    sp_actions_sim s;
    cr_assert_eq(sp_actions_simulate(a, &c, &s), SP_OK, "%s", sp_last_error());
    double l = s.latency;
    sp_actions_sim_free(&s);
    free(F);
    free(I);
    free(W);
    return l;
}

Test(actions, torch_raw_csvs_import_as_their_clean_form)
{
    static const char *names[] = {"Schedule1F1B",          "ScheduleInterleaved1F1B", "ScheduleLoopedBFS",
                                  "ScheduleZBVZeroBubble", "ScheduleDualPipeV",       "ScheduleInterleavedZeroBubble"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char path[256];
        sp_actions *clean = NULL, *raw = NULL;
        snprintf(path, sizeof path, "tests/ref/torch_csv/%s.csv", names[k]);
        cr_assert_eq(sp_actions_read_csv(path, &clean), SP_OK, "%s", sp_last_error());
        cr_assert_eq(clean->ignored, 0);
        static const char *forms[] = {"compute", "comms"};
        for (int f = 0; f < 2; f++) {
            snprintf(path, sizeof path, "tests/ref/torch_csv/%s_%s.csv", names[k], forms[f]);
            cr_assert_eq(sp_actions_read_csv(path, &raw), SP_OK, "%s", sp_last_error());
            same_list(clean, raw, path);
            cr_assert(f == 0 || raw->ignored > 0, "%s: communication actions counted", path);
            cr_assert_eq(latency_at(raw, 1, 1, 1, 0), latency_at(clean, 1, 1, 1, 0), "%s", path);
            cr_assert_eq(latency_at(raw, 1, 1.2, 0.8, 0.5), latency_at(clean, 1, 1.2, 0.8, 0.5), "%s", path);
            sp_actions_free(raw);
        }
        sp_actions_free(clean);
    }
}

/* A compound runs its parts in the order written. */
Test(actions, torch_overlap_runs_its_parts_in_order)
{
    const char *p = write_file("ov.csv", "0F0,(0F1;0B0)OVERLAP_F_B,0B1\n");
    sp_actions *a = NULL;
    cr_assert_eq(sp_actions_read_csv(p, &a), SP_OK, "%s", sp_last_error());
    char s[32], line[128] = "";
    for (int k = 0; k < a->off[1]; k++) strcat(strcat(line, sp_action_str(a->act[k], s)), " ");
    cr_assert_str_eq(line, "0F0 0F1 0B0 0B1 ");
    cr_assert_eq(a->cell[2], 2);
    sp_actions_free(a);
}

/* --actions-out --torch: the runtime's form with communication, read back as the same
 * list; every cell one of PyTorch's actions (no compound: each computation stands alone),
 * each send with its receive, and a REDUCE_GRAD per chunk. */
Test(actions, torch_form_written_reads_back)
{
    gen_fn gens[] = {sp_pp_gen_zbv, sp_pp_gen_dualpipev, sp_pp_gen_zb_auto};
    for (size_t g = 0; g < sizeof gens / sizeof gens[0]; g++) {
        sp_actions *a = gen(gens[g], 4, 8, 0), *b = NULL;
        char path[512];
        snprintf(path, sizeof path, "%s/torch.csv", tu_tmpdir());
        FILE *f = fopen(path, "w");
        sp_actions_write_torch(f, a);
        fclose(f);
        cr_assert_eq(sp_actions_read_csv(path, &b), SP_OK, "%s", sp_last_error());
        same_list(a, b, "torch form");
        char *text = NULL;
        size_t len = 0;
        f = fopen(path, "r");
        cr_assert_gt(getdelim(&text, &len, 0, f), 0);
        fclose(f);
        int sends = 0, recvs = 0, reduces = 0;
        for (const char *p = text; (p = strstr(p, "SEND_")); p++) sends++;
        for (const char *p = text; (p = strstr(p, "RECV_")); p++) recvs++;
        for (const char *p = text; (p = strstr(p, "REDUCE_GRAD")); p++) reduces++;
        cr_assert_eq(sends, recvs);
        cr_assert_gt(sends, 0);
        cr_assert_eq(reduces, a->chunks);
        cr_assert_eq(b->ignored, sends + recvs + reduces);
        cr_assert(strstr(text, "\r\n"), "csv.writer's line ends");
        free(text);
        sp_actions_free(a);
        sp_actions_free(b);
    }
}
