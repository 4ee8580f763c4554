/* device.h — device dispatch: ops' kernels per device, device memory and graphs.
 *
 * Ops are written once per device: the opdef with its CPU kernels in layers/<op>.c, a
 * device twin's kernels in layers/<op>_cuda.cu, registered with sp_op_register_kernels
 * when that device starts (layers/register_cuda.c). sp_apply gives each node the kernels
 * of its input tensor's device, so no op logic carries #ifdefs. */
#ifndef SP_DEVICE_H
#define SP_DEVICE_H

#include <stdbool.h>
#include "core/device_counts.h"
#include "core/op.h"

/* k (kept, not copied) runs op on dev (not SP_CPU); a second call for the same op and
 * device replaces the first. */
void sp_op_register_kernels(const sp_opdef *op, sp_device dev, const sp_kernels *k);
/* op's kernels on dev: &op->cpu for SP_CPU; sp_fail if dev has none registered. */
const sp_kernels *sp_op_kernels(const sp_opdef *op, sp_device dev);
const char *sp_device_name(sp_device dev);

/* dev's counts so far; all zero on the CPU or before dev's backend started. */
void sp_device_counts_get(sp_device dev, sp_device_counts *c);
/* after − before, field by field. */
sp_device_counts sp_device_counts_diff(const sp_device_counts *after, const sp_device_counts *before);

/* Memory of a non-CPU device, registered by that backend's init (sp_cuda_init).
 * Persistent buffers (parameters) use alloc/free; per-step tensors come from one arena
 * per tape (sp_tape_tensor_on), created lazily and reset with the tape, so a device
 * step allocates nothing in steady state, like the host arena. */
typedef struct sp_device_allocator {
    void *(*alloc)(size_t bytes);
    void (*free)(void *p);
    void *(*arena_new)(void);
    void *(*arena_alloc)(void *arena, size_t bytes);
    void (*arena_reset)(void *arena);
    void (*arena_free)(void *arena);
    void (*fill)(float *data, size_t n, float value);   /* ordered with the device's ops */
    /* Copies of n floats, ordered after the work queued on the calling thread's lane;
     * they return once the data has arrived. */
    void (*upload)(float *dev_dst, const float *host_src, size_t n);
    void (*download)(float *host_dst, const float *dev_src, size_t n);
    /* The training loop's prefetch: copy n floats into pinned host slot `slot` (0 or 1)
     * and start their upload to the slot's device buffer on a copy stream (returned);
     * use_staged(slot) makes the calling lane's stream wait for that upload. A slot may
     * be staged again once the step that used it has been waited for. */
    float *(*stage)(int slot, const float *host_src, size_t n);
    void (*use_staged)(int slot);
    /* After stage(slot, ...): the batch's n labels into the slot's device buffer, on the
     * same upload (use_staged waits for both). */
    int *(*stage_labels)(int slot, const int *host_src, size_t n);
    /* The work queued so far on the calling lane is the last to read slot `slot`: its
     * next upload waits for it (a step whose tail may outlive the next step's queueing). */
    void (*release_staged)(int slot);
    /* Where the arena's memory starts after a reset: the same base and the same requests
     * give the same addresses (what a captured graph relies on); NULL when it cannot
     * promise that (SCANPROP_CUDA_ARENA=off, nothing allocated yet). */
    const void *(*arena_base)(void *arena);
    void (*add)(float *dst, const float *src, size_t n);   /* dst[i] += src[i], ordered like fill */
    void (*counts)(sp_device_counts *c);   /* what the backend has issued so far */
    /* Device time: time_mark(0) before some work, time_mark(1) after it, both on the
     * calling lane; once that work is done (the step's wait has passed it), time_ms()
     * gives the device milliseconds between the marks, once; < 0 if not both were
     * marked since the last read or the work is still running. */
    void (*time_mark)(int which);
    double (*time_ms)(void);
    /* A fresh arena (nothing allocated yet) opens its first block at the size `like`
     * needed (its high water), not growing block by block: a tape that takes turns with
     * another (the ooo engine's two tapes) then allocates nothing from its second step
     * on. May be NULL. */
    void (*arena_size_like)(void *arena, const void *like);
} sp_device_allocator;

void sp_backend_register_allocator(sp_device dev, const sp_device_allocator *a);
/* The allocator of dev (not SP_CPU); sp_fail if its backend was not initialised. */
const sp_device_allocator *sp_backend_allocator(sp_device dev);
/* Whether dev (not SP_CPU) has one. */
bool sp_backend_has_allocator(sp_device dev);

/* Graphs of queued work (CUDA Graphs), for the whole-step capture of the training loop
 * (train/train.h, sp_step_graph): everything the calling thread queues on its lane
 * — and on the lanes forked from it — between capture_begin and capture_end becomes one
 * graph; launch queues it on the calling lane. No host sync, allocation or copy of
 * pageable memory may happen in between (the backend fails with one line if it does). */
typedef struct sp_device_graph {
    void (*capture_begin)(void);
    void *(*capture_end)(void);
    void (*launch)(void *graph);
    void (*free)(void *graph);
} sp_device_graph;

void sp_backend_register_graph(sp_device dev, const sp_device_graph *g);
/* The graph support of dev; sp_fail if its backend registered none. */
const sp_device_graph *sp_backend_graph(sp_device dev);

/* Host copies of device data, for code that runs on any device (the training loop). */
/* Entry i of t, wherever t lives. */
float sp_tensor_get(const sp_tensor *t, size_t i);
/* All of t into host memory dst (t.numel floats). */
void sp_tensor_read(float *dst, const sp_tensor *t);
/* x on device dev: x itself if it is there already, else a copy in tape t's device memory. */
sp_tensor sp_tape_copy_on(sp_tape *t, sp_device dev, const sp_tensor *x);

/* Whole-tensor fills on the tensor's own device (engines never touch device memory). */
void sp_fill(sp_tensor *t, float value);
void sp_zero(sp_tensor *t);
/* dst[i] += src[i] on their (common) device, in float: the engines' fan-out sums. */
void sp_accumulate(sp_tensor *dst, const sp_tensor *src);

#endif
