/* arena.c — bump allocation in blocks; reset merges blocks so steady state never mallocs.
 *
 * Blocks are mapped from the kernel (mmap), not taken from malloc: a block of tens of MB
 * that is freed (an evaluation's tape, the first steps' blocks merged on reset) goes back
 * to the system whole. From malloc, glibc raises its mmap threshold to the size of every
 * large chunk freed, so the next such blocks came from the heap and the heap fragmented:
 * LeNet's RSS rose from 68 to 163 MB over ten evaluations (issue 19, item 15). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "core/arena.h"
#include "core/error.h"

#define ARENA_ALIGN 64

struct sp_arena_block {
    sp_arena_block *next;
    size_t size, used;
    unsigned char *base;   /* ARENA_ALIGN-aligned */
};

static sp_arena_block *block_new(sp_arena *a, size_t size)
{
    size_t page = 4096;
    size = (size + page - 1) & ~(page - 1);   /* mapped in whole pages (page-aligned: ARENA_ALIGN holds) */
    void *base = mmap(NULL, size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) sp_fail("out of memory: arena block of %zu bytes (%s)", size, strerror(errno));
    /* the block's header lives in its first page: no malloc at all */
    sp_arena_block *b = base;
    b->base = (unsigned char *)base + page;
    b->size = size;
    b->used = 0;
    b->next = NULL;
    a->nmallocs++;
    return b;
}

static void blocks_free(sp_arena_block *b)
{
    while (b) {
        sp_arena_block *next = b->next;
        munmap(b, (size_t)(b->base - (unsigned char *)b) + b->size);
        b = next;
    }
}

void sp_arena_init(sp_arena *a, size_t initial_bytes)
{
    memset(a, 0, sizeof *a);
    if (initial_bytes) a->head = block_new(a, initial_bytes);
}

void sp_arena_free(sp_arena *a)
{
    blocks_free(a->head);
    memset(a, 0, sizeof *a);
}

void *sp_arena_alloc(sp_arena *a, size_t bytes)
{
    size_t need = (bytes + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    if (need == 0) need = ARENA_ALIGN;
    sp_arena_block *b = a->head;
    if (!b || b->used + need > b->size) {
        size_t size = need > (1u << 20) ? need : (1u << 20);
        if (b && size < 2 * b->size) size = 2 * b->size;   /* geometric growth */
        sp_arena_block *nb = block_new(a, size);
        nb->next = b;
        a->head = b = nb;
    }
    void *p = b->base + b->used;
    b->used += need;
    a->used_total += need;
    if (a->used_total > a->high_water) a->high_water = a->used_total;
    return p;
}

void *sp_arena_calloc(sp_arena *a, size_t bytes)
{
    return memset(sp_arena_alloc(a, bytes), 0, bytes);
}

void sp_arena_reset(sp_arena *a)
{
    /* Several blocks mean the step outgrew the arena: replace them by one block of
     * the high-water size so the next step fits in one block with no malloc. */
    if (a->head && a->head->next) {
        blocks_free(a->head);
        a->head = block_new(a, a->high_water);
    }
    if (a->head) a->head->used = 0;
    a->used_total = 0;
}
