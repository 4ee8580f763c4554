/* engine.h — backward engines, chosen by name at run time ("linear", "bppsa", "ooo").
 *
 * An engine takes a recorded tape and the loss node and accumulates ∂l/∂θ into every
 * parameter's grad. Engines only call op entry points and backend kernels; they never
 * touch raw device memory. The engines live in schedulers/. */
#ifndef SP_ENGINE_H
#define SP_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include "core/tape.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --scan-levels by name: the full scan, and a depth chosen from the plan's cost model. */
#define SP_SCAN_LEVELS_FULL (-1)
#define SP_SCAN_LEVELS_AUTO (-2)

typedef struct sp_engine_opts {
    int scan_levels;          /* bppsa: up-sweep levels; SP_SCAN_LEVELS_FULL (any other
                               * value < 0 too), SP_SCAN_LEVELS_AUTO             */
    const char *order;        /* ooo: conventional | ooo | reverse-first-k | list */
    int k;                    /* ooo reverse-first-k                          */
    size_t mem_cap;           /* ooo reverse-first-k memory cap (bytes, 0=none) */
    const char *trace_path;   /* ooo: Chrome trace JSON                       */
    /* ooo: when set, the optimizer update U_i of layer l runs as a task right after
     * its weight gradient (the sub lane), and the caller skips its own step. */
    void (*update)(void *ctx, sp_layer *l);
    void *update_ctx;
    bool plan;                /* bppsa: print the static plan (summary)       */
    bool plan_full;           /* bppsa: ... with every step of the scan       */
    const char *plan_svg;     /* bppsa: draw the scan tree to this file       */
    bool plan_only;           /* bppsa: make (and print) the plan, compute nothing */
} sp_engine_opts;

typedef struct sp_engine sp_engine;
struct sp_engine {
    const char *name;
    sp_engine_opts opts;
    void (*backward)(sp_engine *e, sp_tape *t, sp_node *loss);
    void (*destroy)(sp_engine *e);
    void *state;
};

/* NULL opts = defaults. Unknown name: sp_fail listing the known engines. */
sp_engine *sp_engine_create(const char *name, const sp_engine_opts *opts);
void sp_engine_destroy(sp_engine *e);
void sp_backward(sp_engine *e, sp_tape *t, sp_node *loss);
const char *sp_engine_names(void);   /* "linear|bppsa|ooo" as registered */

/* Helpers shared by engines. */
void sp_mark_needs_grad(sp_tape *t);             /* sets needs_grad, nconsumers  */
void sp_alloc_grads(sp_tape *t, sp_node *loss);  /* grad buffers (zeroed where accumulated); seeds loss = 1 */

#ifdef __cplusplus
}
#endif

#endif
