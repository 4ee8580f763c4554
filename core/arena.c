/* arena.c — bump allocation in blocks; reset merges blocks so steady state never
 * allocates a block. The blocks come from a block source (arena.h); the host's is here.
 *
 * Host blocks are mapped from the kernel (mmap), not taken from malloc: a block of tens
 * of MB that is freed (an evaluation's tape, the first steps' blocks merged on reset)
 * goes back to the system whole. From malloc, glibc raises its mmap threshold to the
 * size of every large chunk freed, so the next such blocks came from the heap and the
 * heap fragmented: LeNet's RSS rose from 68 to 163 MB over ten evaluations (issue 19,
 * item 15). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "core/arena.h"
#include "core/error.h"

#define ARENA_MIN_BLOCK ((size_t)1 << 20)

// ----------------------------------------------------------------------------
// the host's block source: mapped pages

static sp_arena_block *host_block_new(size_t size)
{
    size_t page = 4096;
    size = (size + page - 1) & ~(page - 1);   /* mapped in whole pages (page-aligned: the 64-byte unit holds) */
    if (size > SIZE_MAX - 2 * page) return NULL;
    void *base = mmap(NULL, size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return NULL;   /* errno says why */
    /* the block's header lives in its first page: no malloc at all */
    sp_arena_block *b = base;
    b->base = (unsigned char *)base + page;
    b->size = size;
    b->used = 0;
    b->next = NULL;
    return b;
}

static void host_block_free(sp_arena_block *b) { munmap(b, (size_t)(b->base - (unsigned char *)b) + b->size); }

const sp_arena_source sp_arena_host = {.align = 64, .block_new = host_block_new, .block_free = host_block_free};

// ----------------------------------------------------------------------------
// the arena

/* A zeroed arena (no block source set) is a host arena. */
static const sp_arena_source *source(const sp_arena *a) { return a->src ? a->src : &sp_arena_host; }

/* A new block, or NULL with errno set (the source had none). */
static sp_arena_block *block_new(sp_arena *a, size_t size)
{
    a->nmallocs++;
    errno = ENOMEM;
    return source(a)->block_new(size);
}

static int no_block(const char *what, size_t size)
{
    return sp_refuse("%s: out of memory: arena block of %zu bytes (%s)", what, size, strerror(errno));
}

static void blocks_free(const sp_arena_source *src, sp_arena_block *b)
{
    while (b) {
        sp_arena_block *next = b->next;
        src->block_free(b);
        b = next;
    }
}

static int init(const char *what, sp_arena *a, const sp_arena_source *src, size_t initial_bytes)
{
    if (!a) return sp_refuse("%s: argument 'a' is NULL", what);
    if (src && (!src->block_new || !src->block_free || !src->align || (src->align & (src->align - 1))))
        return sp_refuse("%s: argument 'src' has no block_new / block_free or an align of %zu (expected a power of "
                         "two)", what, src->align);
    memset(a, 0, sizeof *a);
    a->src = src;
    if (initial_bytes && !(a->head = block_new(a, initial_bytes))) return no_block(what, initial_bytes);
    return SP_OK;
}

int sp_arena_init_on(sp_arena *a, const sp_arena_source *src, size_t initial_bytes)
{
    return init("sp_arena_init_on", a, src, initial_bytes);
}

int sp_arena_init(sp_arena *a, size_t initial_bytes) { return init("sp_arena_init", a, &sp_arena_host, initial_bytes); }

void sp_arena_free(sp_arena *a)
{
    if (!a) return;
    const sp_arena_source *src = source(a);
    blocks_free(src, a->head);
    memset(a, 0, sizeof *a);
    a->src = src;
}

void *sp_arena_alloc(sp_arena *a, size_t bytes)
{
    if (!a) return sp_refuse("sp_arena_alloc: argument 'a' is NULL"), NULL;
    size_t align = source(a)->align;
    if (__builtin_expect(bytes > SIZE_MAX / 2, 0))
        return sp_refuse("sp_arena_alloc: %zu bytes, more than memory can hold", bytes), NULL;
    size_t need = (bytes + align - 1) & ~(align - 1);
    if (need == 0) need = align;
    sp_arena_block *b = a->head;
    if (!b || b->used + need > b->size) {
        size_t size = need > ARENA_MIN_BLOCK ? need : ARENA_MIN_BLOCK;
        if (!b && size < a->high_water) size = a->high_water;   /* after sp_arena_trim: the size it had */
        if (b && size < 2 * b->size) size = 2 * b->size;   /* geometric growth */
        sp_arena_block *nb = block_new(a, size);
        if (!nb) return no_block("sp_arena_alloc", size), NULL;
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
    if (!a) return sp_refuse("sp_arena_calloc: argument 'a' is NULL"), NULL;
    void *p = sp_arena_alloc(a, bytes);
    return p ? memset(p, 0, bytes) : NULL;
}

int sp_arena_reset(sp_arena *a)
{
    if (!a) return sp_refuse("sp_arena_reset: argument 'a' is NULL");
    /* Several blocks, or one smaller than the high water (blocks handed back by
     * sp_arena_release), mean the step outgrew the arena: replace them by one block of
     * the high-water size so the next step fits in one block with no allocation. */
    if (a->head && (a->head->next || a->head->size < a->high_water)) {
        blocks_free(source(a), a->head);
        a->head = block_new(a, a->high_water);   /* none: the next allocation tries again */
    }
    if (a->head) a->head->used = 0;
    a->used_total = 0;
    return SP_OK;
}

int sp_arena_trim(sp_arena *a)
{
    if (!a) return sp_refuse("sp_arena_trim: argument 'a' is NULL");
    blocks_free(source(a), a->head);
    a->head = NULL;
    a->used_total = 0;
    return SP_OK;
}

sp_arena_mark sp_arena_mark_get(const sp_arena *a)
{
    if (!a) return sp_refuse("sp_arena_mark_get: argument 'a' is NULL"), (sp_arena_mark){0};
    return (sp_arena_mark){.head = a->head, .used = a->head ? a->head->used : 0, .used_total = a->used_total};
}

int sp_arena_release(sp_arena *a, sp_arena_mark m)
{
    if (!a) return sp_refuse("sp_arena_release: argument 'a' is NULL");
    /* m is a's (its block is one of a's, or none), not past what a handed out */
    sp_arena_block *b = a->head;
    while (b && b != m.head) b = b->next;
    if (b != m.head || m.used_total > a->used_total || (m.head && m.used > m.head->size))
        return sp_refuse("sp_arena_release: argument 'm' is not a mark of this arena's live allocations");
    while (a->head != m.head) {   /* blocks opened after the mark (the arena only grows from m.head) */
        sp_arena_block *b = a->head;
        a->head = b->next;
        source(a)->block_free(b);
    }
    if (a->head) a->head->used = m.used;
    a->used_total = m.used_total;
    return SP_OK;
}

const void *sp_arena_base(const sp_arena *a)
{
    if (!a) return sp_refuse("sp_arena_base: argument 'a' is NULL"), NULL;
    return a->head ? a->head->base : NULL;
}
