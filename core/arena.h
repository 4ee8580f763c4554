/* arena.h — the per-step bump allocator for activations and their gradients.
 *
 * Everything a training step creates (node outputs, saved state, gradient buffers,
 * scratch) is carved from one arena and released at once by sp_arena_reset. The
 * arena grows during the first step(s); on reset it merges its blocks into one of
 * the high-water size, so a steady-state step performs no malloc at all. */
#ifndef SP_ARENA_H
#define SP_ARENA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sp_arena_block sp_arena_block;

typedef struct sp_arena {
    sp_arena_block *head;   /* current block; older blocks follow ->next   */
    size_t used_total;      /* bytes handed out since the last reset        */
    size_t high_water;      /* largest used_total seen                      */
    size_t nmallocs;        /* block allocations performed (for tests)      */
} sp_arena;

void sp_arena_init(sp_arena *a, size_t initial_bytes);
void sp_arena_free(sp_arena *a);
/* 64-byte aligned, uninitialised. */
void *sp_arena_alloc(sp_arena *a, size_t bytes);
void *sp_arena_calloc(sp_arena *a, size_t bytes);
void sp_arena_reset(sp_arena *a);

#ifdef __cplusplus
}
#endif

#endif
