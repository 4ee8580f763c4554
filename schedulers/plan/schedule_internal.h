/* schedule_internal.h — what schedule.c shares with schedule_actions.c (private to
 * schedulers/plan/; the public API is schedule.h). */
#ifndef SP_SCHEDULE_INTERNAL_H
#define SP_SCHEDULE_INTERNAL_H

#include "schedulers/plan/schedule.h"

/* A schedule of shape's scheme, sizes and split whose stages are placed by stage_worker
 * (taken over): its jobs, w_compute / w_weights / n from the scheme, and pred/succ. */
sp_schedule *sp_schedule_build(const sp_schedule *shape, int *stage_worker);

#endif
