/* arena.h — the per-step bump allocator for activations and their gradients.
 *
 * Everything a training step creates (node outputs, saved state, gradient buffers,
 * scratch) is carved from one arena and released at once by sp_arena_reset. The
 * arena grows during the first step(s); on reset it merges its blocks into one of
 * the high-water size, so a steady-state step performs no block allocation at all.
 *
 * The policy is one; where the blocks come from is a block source: host pages
 * (sp_arena_host, the default) or a device's memory (the CUDA backend's step arena,
 * core/kernels/cuda_backend.cu). */
#ifndef SP_ARENA_H
#define SP_ARENA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One block: size bytes at base, the first used of them handed out; older blocks
 * follow next. Where the header itself lives is the source's business. */
typedef struct sp_arena_block {
    struct sp_arena_block *next;
    unsigned char *base;   /* align-aligned (the source's align) */
    size_t size, used;
} sp_arena_block;

/* A block source. block_new returns a block of at least `bytes` usable bytes at an
 * align-aligned base, with next = NULL and used = 0, or NULL with errno set when it has
 * none (the arena's call then refuses; a source may end in sp_fail instead);
 * block_free returns one block, header included. */
typedef struct sp_arena_source {
    size_t align;   /* every allocation's alignment and size unit (a power of two) */
    sp_arena_block *(*block_new)(size_t bytes);
    void (*block_free)(sp_arena_block *b);
} sp_arena_source;

/* Host pages mapped from the kernel, 64-byte allocations (core/arena.c). */
extern const sp_arena_source sp_arena_host;

typedef struct sp_arena {
    sp_arena_block *head;        /* current block; older blocks follow ->next   */
    size_t used_total;           /* bytes handed out since the last reset        */
    size_t high_water;           /* largest used_total seen                      */
    size_t nmallocs;             /* block allocations performed (for tests)      */
    const sp_arena_source *src;  /* where blocks come from                       */
} sp_arena;

/* Every call but sp_arena_free refuses a NULL arena, a source without its functions or a
 * power-of-two align, a mark that is not the arena's, or memory the source cannot give
 * with sp_refuse (core/error.h): outside sp_try it returns SP_ERR, NULL or a zero mark
 * with the message in sp_last_error(), never exiting; inside sp_try it ends there with
 * SP_ERR. */

/* A host arena (sp_arena_host; a zeroed sp_arena is one too, and so is src NULL). A
 * refused initial block leaves the arena initialised and empty. */
int sp_arena_init(sp_arena *a, size_t initial_bytes);
int sp_arena_init_on(sp_arena *a, const sp_arena_source *src, size_t initial_bytes);
/* Returns every block; the arena keeps its source and may be used again. */
void sp_arena_free(sp_arena *a);
/* src->align-aligned, uninitialised. */
void *sp_arena_alloc(sp_arena *a, size_t bytes);
/* Host arenas only (memset). */
void *sp_arena_calloc(sp_arena *a, size_t bytes);
/* (Where the merged block cannot be had, the arena is left empty and the next
 * allocation asks for it again.) */
int sp_arena_reset(sp_arena *a);
/* Between uses that are far apart (training steps around an evaluation): returns every
 * block to the source but keeps the high-water size, so the next allocation opens one
 * block of that size and the steps after it allocate nothing. */
int sp_arena_trim(sp_arena *a);
/* A point in the arena to come back to: sp_arena_release(a, m) hands back everything
 * allocated after sp_arena_mark returned m (last in, first out), so transient scratch
 * (one node's backward) is reused by the next instead of piling up until the reset.
 * high_water then measures the live peak, and the reset's merged block is that size.
 * Blocks opened after the mark are returned to the source (the first step only: later
 * steps fit in the merged block). */
typedef struct sp_arena_mark {
    sp_arena_block *head;
    size_t used, used_total;
} sp_arena_mark;
sp_arena_mark sp_arena_mark_get(const sp_arena *a);
int sp_arena_release(sp_arena *a, sp_arena_mark m);
/* Where the first allocation after a reset lands (NULL before any block exists):
 * the same base and the same requests give the same addresses. */
const void *sp_arena_base(const sp_arena *a);

#ifdef __cplusplus
}
#endif

#endif
