/* limits.c — the bounds on the simulator's inputs (schedulers/plan/limits.h), one line
 * each when refused. */
#include <math.h>
#include "core/error.h"
#include "schedulers/plan/limits.h"

bool sp_limit_time_ok(double v) { return v >= 0 && v <= SP_LIMIT_TIME_MAX; }
bool sp_limit_bytes_ok(double v) { return v >= 0 && v <= SP_LIMIT_BYTES_MAX; }

int sp_limit_time(const char *what, double v)
{
    if (!sp_limit_time_ok(v))
        return sp_error("%s %g: expected a finite time in 0..%g (larger ones overflow the simulation's sums)", what, v,
                        SP_LIMIT_TIME_MAX);
    return SP_OK;
}

int sp_limit_bytes(const char *what, double v)
{
    if (!sp_limit_bytes_ok(v))
        return sp_error("%s %g: expected a finite number of bytes in 0..2^53", what, v);
    return SP_OK;
}

int sp_limit_bandwidth(const char *what, double v)
{
    if (!(v >= SP_LIMIT_BW_MIN && isfinite(v)))
        return sp_error("%s %g B/us: expected a finite bandwidth >= %g B/us (1 kB/s; smaller ones overflow the "
                        "simulation's sums)", what, v, SP_LIMIT_BW_MIN);
    return SP_OK;
}

int sp_limit_work(const char *what, double jobs, double workers)
{
    if (!(jobs * workers <= SP_LIMIT_WORK))
        return sp_error("%s: %.0f jobs on %.0f workers is too large to simulate (expected jobs x workers <= %.0f"
                        ")", what, jobs, workers, SP_LIMIT_WORK);
    return SP_OK;
}
