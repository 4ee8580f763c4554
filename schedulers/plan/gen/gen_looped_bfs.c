/* gen_looped_bfs.c — looped-bfs (gen.h): PyTorch's ScheduleLoopedBFS, v chunks per rank
 * (--chunks, default 2) placed as interleaved-1f1b's: rank r holds chunks r, r + p, …. */
#include <stdlib.h>
#include "schedulers/plan/gen.h"

/* PyTorch's ScheduleLoopedBFS: rank r's chunks r, r + p, …; every forward of a chunk,
 * chunk after chunk, then the backwards, chunks in reverse and the micro-batches last
 * to first (the last forward's backward is the first ready). */
int sp_pp_gen_looped_bfs(const sp_pp_params *p, sp_actions **out)
{
    int v;
    if (sp_gen_check_pm("looped-bfs", p) != SP_OK || sp_gen_chunks_per_rank("looped-bfs", p, &v) != SP_OK) return SP_ERR;
    int P = p->ranks, m = p->micro;
    if ((long)P * v * m * 2 > 100000000L)
        return sp_error("looped-bfs: %d ranks x %d chunks x %d micro-batches is too large", P, v, m);
    sp_actions *a = sp_actions_new(P, P * v, m, 2 * P * v * m);
    for (int r = 0; r < P; r++) {
        for (int j = 0; j < v; j++)
            for (int b = 0; b < m; b++) sp_actions_push(a, r, sp_gen_act(j * P + r, SP_ACT_F, b));
        for (int j = v - 1; j >= 0; j--)
            for (int b = m - 1; b >= 0; b--) sp_actions_push(a, r, sp_gen_act(j * P + r, SP_ACT_B, b));
    }
    *out = a;
    return SP_OK;
}
