/* schedule_internal.h — what schedule.c, schedule_actions.c and the registry (schemes.c)
 * share (private to schedulers/plan/; the public API is schedule.h). */
#ifndef SP_SCHEDULE_INTERNAL_H
#define SP_SCHEDULE_INTERNAL_H

#include "schedulers/plan/schedule.h"

/* A schedule of shape's scheme, sizes and split whose stages are placed by stage_worker
 * (taken over): its jobs, w_compute / w_weights / n from the scheme, and pred/succ. */
sp_schedule *sp_schedule_build(const sp_schedule *shape, int *stage_worker);

/* Where a scheme places its stages: its registry row's rules; SP_PLACE_NONE for an
 * action-list scheme or a scheme the caller built. */
sp_placement sp_scheme_placement(const sp_scheme *scheme);
/* The sp_scheme of an action-list row (a generator or custom), as sp_schedule_from_actions
 * reports it; NULL for any other name. */
const sp_scheme *sp_scheme_actions_view(const char *name);

#endif
