/* gen_common.c — what the action-list generators (gen.h) share: the checks of their
 * parameters, the interleaved rounds, the V placement of the V-shaped ones, and --mem-limit's parse (actions.h). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "core/error.h"
#include "schedulers/plan/gen/gen_v.h"

/* One chunk per rank or v of them: p ≥ 1, m ≥ 1, p·m bounded. */
int sp_gen_check_pm(const char *name, const sp_pp_params *p)
{
    if (!p) return sp_error("%s: NULL parameters", name);
    if (p->ranks < 1) return sp_error("%s: %d ranks (expected >= 1)", name, p->ranks);
    if (p->micro < 1) return sp_error("%s: %d micro-batches (expected >= 1)", name, p->micro);
    if ((long)p->ranks * p->micro > 10000000L)
        return sp_error("%s: %d ranks x %d micro-batches is too large", name, p->ranks, p->micro);
    return SP_OK;
}

int sp_gen_chunks_per_rank(const char *name, const sp_pp_params *p, int *v)
{
    *v = p->chunks_per_rank > 0 ? p->chunks_per_rank : 2;
    if (*v > 1000) return sp_error("%s: --chunks %d per rank (expected <= 1000)", name, *v);
    return SP_OK;
}

sp_gen_rounds sp_gen_rounds_of(int ranks, int micro, int v)
{
    sp_gen_rounds r = {.v = v, .rounds = micro / ranks > 1 ? micro / ranks : 1};
    r.base = micro / r.rounds, r.rem = micro % r.rounds;
    return r;
}

int sp_gen_rounds_local(const sp_gen_rounds *r, long k)
{
    long big = (long)r->v * (r->base + 1) * r->rem;   /* the ops of the rounds one larger */
    if (k < big) return (int)(k % ((long)r->v * (r->base + 1)) / (r->base + 1));
    k -= big;
    return (int)(k % ((long)r->v * r->base) / r->base);
}

/* Shared by the V generators: p ≥ 1, m ≥ 1, costs (if any) for 2p chunks. */
int sp_gen_v_params(const char *name, const sp_pp_params *p, int min_micro)
{
    if (!p) return sp_error("%s: NULL parameters", name);
    if (p->ranks < 1) return sp_error("%s: %d ranks (expected at least 1)", name, p->ranks);
    if (p->micro < min_micro)
        return sp_error("%s: %d micro-batches on %d ranks (expected at least %d)", name, p->micro, p->ranks,
                        min_micro);
    if (p->chunks_per_rank != 0 && p->chunks_per_rank != 2)
        return sp_error("%s: %d chunks per rank (a V holds exactly 2)", name, p->chunks_per_rank);
    if (p->costs && p->costs->chunks != 2 * p->ranks)
        return sp_error("%s: costs for %d chunks (expected 2 × %d ranks = %d)", name, p->costs->chunks, p->ranks,
                        2 * p->ranks);
    return SP_OK;
}

sp_actions *sp_gen_v_new(int ranks, int micro)
{
    sp_actions *a = sp_actions_new(ranks, 2 * ranks, micro, 6 * ranks * micro);
    for (int c = 0; c < 2 * ranks; c++) a->chunk_rank[c] = c < ranks ? c : 2 * ranks - 1 - c;
    return a;
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
