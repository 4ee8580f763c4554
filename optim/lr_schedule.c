/* lr_schedule.c — learning-rate schedules as closed forms of the index t, matching
 * torch.optim.lr_scheduler (StepLR, CosineAnnealingLR, LinearLR warmup chained with
 * SequentialLR), and the "--lr-schedule" spec parser the apps use. PyTorch computes
 * these recursively in double; the closed forms agree with it to double rounding. */
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "optim/optim.h"
#include "core/guard.h"

#define LR_SPEC_HELP \
    "expected constant, step:STEP_SIZE:GAMMA or cosine:T_MAX[:ETA_MIN], optionally followed by " \
    ",warmup:STEPS[:START_FACTOR]"

/* torch's StepLR / CosineAnnealingLR _get_closed_form_lr, at index t >= 0. */
static double main_lr(const sp_lr_schedule *s, int t)
{
    switch (s->kind) {
    case SP_LR_CONSTANT: return s->lr0;
    case SP_LR_STEP: return s->lr0 * pow(s->gamma, (double)(t / s->step_size));
    case SP_LR_COSINE:
        return s->eta_min + (s->lr0 - s->eta_min) * (1 + cos(M_PI * t / s->t_max)) / 2;
    }
    assert(!"unknown lr schedule kind");
    return s->lr0;
}

double sp_lr_at(const sp_lr_schedule *s, int t)
{
    SP_GUARD(NAN);
    if (!s) sp_fail("sp_lr_at: argument 's' is NULL");
    if (t < 0) sp_fail("sp_lr_at: argument 't' is %d (expected >= 0)", t);
    if (t < s->warmup) {
        /* LinearLR(start_factor, end_factor=1, total_iters=warmup), closed form. */
        double f = s->warmup_start + (1 - s->warmup_start) * t / s->warmup;
        return s->lr0 * f;
    }
    return main_lr(s, t - s->warmup);
}

/* ---- parsing ---------------------------------------------------------------------- */

/* Splits s at ':' into at most max fields (in place); returns the field count. */
static int split_fields(char *s, char **f, int max)
{
    int n = 0;
    for (char *tok = s;; n++) {
        if (n == max) return max + 1;
        f[n] = tok;
        char *c = strchr(tok, ':');
        if (!c) return n + 1;
        *c = '\0';
        tok = c + 1;
    }
}

static int parse_pos_int(const char *spec, const char *what, const char *f)
{
    char *end;
    errno = 0;
    long v = strtol(f, &end, 10);
    if (!*f || *end || errno || v <= 0 || v > INT_MAX)
        sp_fail("--lr-schedule '%s': %s '%s' (expected a positive integer)", spec, what, f);
    return (int)v;
}

static double parse_num(const char *spec, const char *what, const char *f, double lo, double hi,
                        const char *range)
{
    char *end;
    errno = 0;
    double v = strtod(f, &end);
    if (!*f || *end || errno || !isfinite(v) || v < lo || v > hi)
        sp_fail("--lr-schedule '%s': %s '%s' (expected %s)", spec, what, f, range);
    return v;
}

static void parse_main(const char *spec, char *part, sp_lr_schedule *s)
{
    char *f[4];
    int n = split_fields(part, f, 3);
    if (!strcmp(f[0], "constant") && n == 1) {
        s->kind = SP_LR_CONSTANT;
    } else if (!strcmp(f[0], "step") && n == 3) {
        s->kind = SP_LR_STEP;
        s->step_size = parse_pos_int(spec, "STEP_SIZE", f[1]);
        s->gamma = parse_num(spec, "GAMMA", f[2], 0, HUGE_VAL, "a number > 0");
        if (s->gamma == 0) sp_fail("--lr-schedule '%s': GAMMA 0 (expected a number > 0)", spec);
    } else if (!strcmp(f[0], "cosine") && (n == 2 || n == 3)) {
        s->kind = SP_LR_COSINE;
        s->t_max = parse_pos_int(spec, "T_MAX", f[1]);
        s->eta_min = n == 3 ? parse_num(spec, "ETA_MIN", f[2], 0, HUGE_VAL, "a number >= 0") : 0;
    } else {
        sp_fail("--lr-schedule '%s': cannot parse '%s' (" LR_SPEC_HELP ")", spec, f[0]);
    }
}

static void parse_warmup(const char *spec, char *part, sp_lr_schedule *s)
{
    char *f[4];
    int n = split_fields(part, f, 3);
    if (strcmp(f[0], "warmup") || n < 2 || n > 3)
        sp_fail("--lr-schedule '%s': cannot parse '%s' after the comma (" LR_SPEC_HELP ")", spec, f[0]);
    s->warmup = parse_pos_int(spec, "warmup STEPS", f[1]);
    if (n == 3) {
        s->warmup_start = parse_num(spec, "START_FACTOR", f[2], 0, 1, "a number in (0, 1]");
        if (s->warmup_start == 0)
            sp_fail("--lr-schedule '%s': START_FACTOR 0 (expected a number in (0, 1])", spec);
    }
}

sp_lr_schedule sp_lr_parse(const char *spec, double lr0)
{
    SP_GUARD((sp_lr_schedule){.lr0 = NAN});
    if (!(lr0 >= 0) || !isfinite(lr0)) sp_fail("--lr %g: expected a finite number >= 0", lr0);
    sp_lr_schedule s = {.kind = SP_LR_CONSTANT, .lr0 = lr0, .warmup_start = 1.0 / 3};
    char buf[256];
    if (!spec || strlen(spec) >= sizeof buf)
        sp_fail("--lr-schedule: missing or too long a spec (" LR_SPEC_HELP ")");
    strcpy(buf, spec);
    char *comma = strchr(buf, ',');
    if (comma) {
        *comma = '\0';
        parse_warmup(spec, comma + 1, &s);
    }
    parse_main(spec, buf, &s);
    return s;
}
