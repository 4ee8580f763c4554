/* device.c — the device registry: ops' kernels on each device, each device's allocator
 * and graph support, and the whole-tensor helpers that dispatch on a tensor's device. */
#include <string.h>
#include "core/device.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/tape.h"

#define MAX_TWINS 64

/* The kernel tables of the devices other than the CPU, one per (op, device). */
static struct { const sp_opdef *op; sp_device dev; const sp_kernels *k; } twins[MAX_TWINS];
static int ntwins;

void sp_op_register_kernels(const sp_opdef *op, sp_device dev, const sp_kernels *k)
{
    if (dev == SP_CPU) sp_fail("op %s: the CPU kernels are the opdef's own (sp_opdef.cpu)", op->name);
    for (int i = 0; i < ntwins; i++)
        if (twins[i].op == op && twins[i].dev == dev) {
            twins[i].k = k;
            return;
        }
    if (ntwins == MAX_TWINS) sp_fail("too many device ops registered");
    twins[ntwins].op = op;
    twins[ntwins].dev = dev;
    twins[ntwins].k = k;
    ntwins++;
}

static const sp_device_allocator *allocators[SP_NDEVICES];

void sp_backend_register_allocator(sp_device dev, const sp_device_allocator *a) { allocators[dev] = a; }

bool sp_backend_has_allocator(sp_device dev) { return dev > SP_CPU && dev < SP_NDEVICES && allocators[dev]; }

const sp_device_allocator *sp_backend_allocator(sp_device dev)
{
    if (dev == SP_CPU || !allocators[dev])
        sp_fail("%s memory: no allocator (build with make CUDA=1 and call the backend's init)",
                sp_device_name(dev));
    return allocators[dev];
}

void sp_device_counts_get(sp_device dev, sp_device_counts *c)
{
    *c = (sp_device_counts){0};
    if (dev != SP_CPU && allocators[dev] && allocators[dev]->counts) allocators[dev]->counts(c);
}

sp_device_counts sp_device_counts_diff(const sp_device_counts *after, const sp_device_counts *before)
{
    return (sp_device_counts){.launches = after->launches - before->launches,
                              .library_calls = after->library_calls - before->library_calls,
                              .syncs = after->syncs - before->syncs,
                              .allocs = after->allocs - before->allocs,
                              .copies = after->copies - before->copies};
}

static const sp_device_graph *graphs[SP_NDEVICES];

void sp_backend_register_graph(sp_device dev, const sp_device_graph *g) { graphs[dev] = g; }

const sp_device_graph *sp_backend_graph(sp_device dev)
{
    if (dev == SP_CPU || !graphs[dev])
        sp_fail("%s graphs: not supported (build with make CUDA=1 and call the backend's init)", sp_device_name(dev));
    return graphs[dev];
}

void sp_fill(sp_tensor *t, float value)
{
    if (t->device != SP_CPU) {
        sp_backend_allocator(t->device)->fill(t->data, t->numel, value);
        return;
    }
    for (size_t i = 0; i < t->numel; i++) t->data[i] = value;
}

void sp_zero(sp_tensor *t)
{
    if (t->device != SP_CPU) sp_fill(t, 0.0f);
    else memset(t->data, 0, t->numel * sizeof(float));
}

void sp_accumulate(sp_tensor *dst, const sp_tensor *src)
{
    if (dst->device != src->device || dst->numel != src->numel)
        sp_fail("sp_accumulate: %s tensor of %zu into %s tensor of %zu (expected one device, equal sizes)",
                sp_device_name(src->device), src->numel, sp_device_name(dst->device), dst->numel);
    if (dst->device != SP_CPU) {
        sp_backend_allocator(dst->device)->add(dst->data, src->data, dst->numel);
        return;
    }
    for (size_t i = 0; i < dst->numel; i++) dst->data[i] += src->data[i];
}

float sp_tensor_get(const sp_tensor *t, size_t i)
{
    if (t->device == SP_CPU) return t->data[i];
    float v;
    sp_backend_allocator(t->device)->download(&v, t->data + i, 1);
    return v;
}

void sp_tensor_read(float *dst, const sp_tensor *t)
{
    if (t->device == SP_CPU) memcpy(dst, t->data, t->numel * sizeof(float));
    else sp_backend_allocator(t->device)->download(dst, t->data, t->numel);
}

sp_tensor sp_tape_copy_on(sp_tape *t, sp_device dev, const sp_tensor *x)
{
    if (x->device == dev) return *x;
    if (x->device != SP_CPU) sp_fail("sp_tape_copy_on: %s tensor to %s (expected a host tensor)",
                                     sp_device_name(x->device), sp_device_name(dev));
    sp_tensor d = sp_tape_tensor_on(t, dev, x->ndim, x->shape);
    sp_backend_allocator(dev)->upload(d.data, x->data, x->numel);
    return d;
}

const char *sp_device_name(sp_device dev) { return dev == SP_CUDA ? "cuda" : "cpu"; }

const sp_kernels *sp_op_kernels(const sp_opdef *op, sp_device dev)
{
    if (dev == SP_CPU) return &op->cpu;
    for (int i = 0; i < ntwins; i++)
        if (twins[i].op == op && twins[i].dev == dev) return twins[i].k;
    sp_fail("op %s: no %s implementation (build with make CUDA=1 and call the backend's init)", op->name,
            sp_device_name(dev));
}
