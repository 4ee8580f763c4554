/* cuda_backend.cu — the CUDA backend: device selection, the stream and library handles,
 * persistent and per-step device memory, host↔device copies, cuBLAS GEMM. */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include "core/kernels/cuda.h"
extern "C" {
#include "core/arena.h"
#include "core/device.h"
#include "core/error.h"
#include "core/guard.h"
#include "core/tape.h"
}

#define DEV_ALIGN 256   /* cudaMalloc's own alignment; keeps every arena tensor GEMM-friendly */

static sp_cuda_ctx ctx;
static bool ready;
static thread_local int cur_lane;   /* this host thread's lane */

// ----------------------------------------------------------------------------
// error checks

// Counts of what was issued (sp_device_counts), taken from the text of each checked call:
// every launch is followed by sp_cuda_check(cudaGetLastError()) and every runtime or
// library call goes through a check, so nothing is missed and nothing is wrapped.
static long long n_launches, n_library, n_syncs, n_allocs, n_copies;

static bool starts(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }
static void bump(long long *n) { __atomic_fetch_add(n, 1, __ATOMIC_RELAXED); }

static void count_call(const char *call)
{
    if (starts(call, "cudaGetLastError") || starts(call, "cudaGraphLaunch")) bump(&n_launches);
    else if (starts(call, "cudaStreamSynchronize") || starts(call, "cudaDeviceSynchronize") ||
             starts(call, "cudaEventSynchronize"))
        bump(&n_syncs);
    else if (starts(call, "cudaMalloc(") || starts(call, "cudaMallocHost") || starts(call, "cudaHostAlloc") ||
             starts(call, "cudaMallocAsync"))
        bump(&n_allocs);
    else if (starts(call, "cudaMemcpy"))
        bump(&n_copies);
}

static void counts(sp_device_counts *c)
{
    c->launches = __atomic_load_n(&n_launches, __ATOMIC_RELAXED);
    c->library_calls = __atomic_load_n(&n_library, __ATOMIC_RELAXED);
    c->syncs = __atomic_load_n(&n_syncs, __ATOMIC_RELAXED);
    c->allocs = __atomic_load_n(&n_allocs, __ATOMIC_RELAXED);
    c->copies = __atomic_load_n(&n_copies, __ATOMIC_RELAXED);
}

/* A failed device call: the device's state after it is undefined, so the line is also
 * written to stderr when an sp_try or a guarded call would otherwise only return it
 * (a caller that does not look at the status still sees why); an app prints it once,
 * through sp_fail. */
static void device_fail(const char *what, const char *file, int line, const char *call, const char *why)
{
    if (sp_try_active()) fprintf(stderr, "scanprop: %s error at %s:%d: %s: %s\n", what, file, line, call, why);
    sp_fail("%s error at %s:%d: %s: %s", what, file, line, call, why);
}

void sp_cuda_check_at(cudaError_t e, const char *call, const char *file, int line)
{
    count_call(call);
    if (e != cudaSuccess) device_fail("CUDA", file, line, call, cudaGetErrorString(e));
}

void sp_cublas_check_at(cublasStatus_t s, const char *call, const char *file, int line)
{
    bump(&n_library);
    if (s != CUBLAS_STATUS_SUCCESS)
        device_fail("cuBLAS", file, line, call, cublasGetStatusString(s));
}

void sp_cusparse_check_at(cusparseStatus_t s, const char *call, const char *file, int line)
{
    bump(&n_library);
    if (s != CUSPARSE_STATUS_SUCCESS)
        device_fail("cuSPARSE", file, line, call, cusparseGetErrorString(s));
}

void sp_cudnn_check_at(cudnnStatus_t s, const char *call, const char *file, int line)
{
    bump(&n_library);
    if (s != CUDNN_STATUS_SUCCESS) device_fail("cuDNN", file, line, call, cudnnGetErrorString(s));
}

// ----------------------------------------------------------------------------
// CUDA kernels

__global__ void fill_kernel(float *data, size_t n, float value)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        data[i] = value;
}

// ----------------------------------------------------------------------------
// device memory: persistent buffers, and the per-tape step arena

static void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    sp_cuda_check(cudaMalloc(&p, bytes ? bytes : DEV_ALIGN));
    return p;
}

static void dev_free(void *p) { sp_cuda_check(cudaFree(p)); }

__global__ void grad_accumulate_kernel(float *dst, const float *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __fadd_rn(dst[i], src[i]);
}

/* The engines' fan-out sum (sp_accumulate), on the calling lane: the host's float adds. */
static void dev_add(float *dst, const float *src, size_t n)
{
    if (n == 0) return;
    grad_accumulate_kernel<<<sp_cuda_blocks(n, 256), 256, 0, sp_cuda_stream()>>>(dst, src, n);
    sp_cuda_check(cudaGetLastError());
}

static void dev_fill(float *data, size_t n, float value)
{
    if (n == 0) return;
    if (value == 0.0f) {
        sp_cuda_check(cudaMemsetAsync(data, 0, n * sizeof(float), sp_cuda_stream()));
        return;
    }
    fill_kernel<<<sp_cuda_blocks(n, 256), 256, 0, sp_cuda_stream()>>>(data, n, value);
    sp_cuda_check(cudaGetLastError());
}

/* The step arena: core/arena.c's arena over a block source of device memory (bump
 * allocation in blocks; a reset after a step that needed several blocks replaces them by
 * one block of the high-water size, so from the second step on nothing is cudaMalloc'ed).
 *
 * Reuse and streams: a reset hands the same memory to the next step, whose kernels may
 * be queued on any lane while the previous step's are still running there. A reset
 * therefore waits for every lane (cudaDeviceSynchronize) before the memory is reused —
 * one host-device synchronisation per step, which reading the step's loss implies anyway
 * — or, when the ooo engine joined every other lane's work on this arena into lane 0
 * (sp_cuda_arena_joined), for lane 0 alone: the other lane may then still run the next
 * tape's tail (the next forward overlapping the last δW/U, schedulers/backward/ooo_cuda.cu).
 * SCANPROP_CUDA_ARENA=off (debug): every allocation is its own cudaMalloc, freed at the
 * reset, so an overrun leaves its allocation instead of landing in a neighbour
 * (the emulator then reports it at the guard page). */
typedef struct dev_arena {
    sp_arena a;        /* blocks from dev_source */
    bool off;          /* SCANPROP_CUDA_ARENA=off */
    bool joined;       /* sp_cuda_arena_joined since the last reset: lane 0 holds all its work */
    void **own;        /* off: this step's allocations */
    size_t nown, cap;
} dev_arena;

/* Device blocks: cudaMalloc'ed memory, the header on the host heap. */
static sp_arena_block *dev_block_new(size_t size)
{
    sp_arena_block *b = (sp_arena_block *)sp_xcalloc(1, sizeof *b);
    b->base = (unsigned char *)dev_alloc(size);
    b->size = size;
    return b;
}

static void dev_block_free(sp_arena_block *b)
{
    dev_free(b->base);   /* cudaFree waits for kernels still using the block */
    free(b);
}

static const sp_arena_source dev_source = {DEV_ALIGN, dev_block_new, dev_block_free};

static bool arena_off(void)
{
    const char *e = getenv("SCANPROP_CUDA_ARENA");
    if (!e || !*e || strcmp(e, "on") == 0) return false;
    if (strcmp(e, "off") == 0) return true;
    sp_fail("SCANPROP_CUDA_ARENA=%s (expected on or off)", e);
}

static void *dev_arena_new(void)
{
    dev_arena *a = (dev_arena *)sp_xcalloc(1, sizeof(dev_arena));
    sp_arena_init_on(&a->a, &dev_source, 0);
    a->off = arena_off();
    return a;
}

static void *dev_arena_alloc(void *arena, size_t bytes)
{
    dev_arena *a = (dev_arena *)arena;
    if (a->off) {
        if (a->nown == a->cap) {
            a->cap = a->cap ? 2 * a->cap : 64;
            a->own = (void **)sp_xrealloc(a->own, a->cap * sizeof *a->own);
        }
        void *p = NULL;
        sp_cuda_check(cudaMalloc(&p, bytes ? bytes : 4));
        return a->own[a->nown++] = p;
    }
    return sp_arena_alloc(&a->a, bytes);
}

static void dev_own_free(dev_arena *a)
{
    for (size_t i = 0; i < a->nown; i++) dev_free(a->own[i]);
    a->nown = 0;
}

static void dev_arena_reset(void *arena)
{
    dev_arena *a = (dev_arena *)arena;
    if (a->joined)   /* every lane's work on it was joined into lane 0 */
        sp_cuda_wait_stream(ctx.lanes[0].stream);
    else   /* no lane may still use the memory */
        sp_cuda_wait_device();
    a->joined = false;
    dev_own_free(a);
    sp_arena_reset(&a->a);
}

/* The first block at like's high water (sp_arena_alloc opens a first block of at least
 * the arena's high water). */
static void dev_arena_size_like(void *arena, const void *like)
{
    dev_arena *a = (dev_arena *)arena;
    const dev_arena *l = (const dev_arena *)like;
    if (!a->off && !a->a.head && l->a.high_water > a->a.high_water) a->a.high_water = l->a.high_water;
}

static void dev_arena_free(void *arena)
{
    dev_arena *a = (dev_arena *)arena;
    dev_own_free(a);
    free(a->own);
    sp_arena_free(&a->a);
    free(a);
}

static void dev_upload(float *dst, const float *src, size_t n)
{
    if (n == 0) return;
    cudaStream_t s = sp_cuda_stream();
    sp_cuda_check(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyHostToDevice, s));
    sp_cuda_check(cudaStreamSynchronize(s));
}

static void dev_download(float *dst, const float *src, size_t n)
{
    if (n == 0) return;
    cudaStream_t s = sp_cuda_stream();
    sp_cuda_check(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost, s));
    sp_cuda_check(cudaStreamSynchronize(s));
}

/* Two pinned host buffers and two device buffers, so the upload of batch k+1 (on the
 * copy stream) overlaps step k, which reads the other slot. */
typedef struct staged_slot {
    float *host, *dev;
    size_t cap;
    int *yhost, *ydev;   /* the labels (stage_labels) */
    size_t ycap;
    cudaEvent_t done;
    bool pending;
    cudaEvent_t released;   /* release_staged: the slot's last reader */
    bool release;
} staged_slot;

static staged_slot slots[2];
static cudaStream_t copy_stream;

static float *dev_stage(int slot, const float *host, size_t n)
{
    if (slot < 0 || slot > 1) sp_fail("cuda: staging slot %d (expected 0 or 1)", slot);
    staged_slot *s = &slots[slot];
    if (s->pending) sp_cuda_wait_event(s->done);   /* the pinned buffer is free again */
    if (n > s->cap) {
        sp_cuda_check(cudaFreeHost(s->host));
        sp_cuda_check(cudaFree(s->dev));
        sp_cuda_check(cudaMallocHost((void **)&s->host, n * sizeof(float)));
        sp_cuda_check(cudaMalloc((void **)&s->dev, n * sizeof(float)));
        s->cap = n;
    }
    if (s->release) {   /* the step that read the slot may still run: the upload waits for it */
        sp_cuda_check(cudaStreamWaitEvent(copy_stream, s->released, 0));
        s->release = false;
    }
    if (n) {
        memcpy(s->host, host, n * sizeof(float));
        sp_cuda_check(cudaMemcpyAsync(s->dev, s->host, n * sizeof(float), cudaMemcpyHostToDevice, copy_stream));
    }
    sp_cuda_check(cudaEventRecord(s->done, copy_stream));
    s->pending = true;
    return s->dev;
}

static int *dev_stage_labels(int slot, const int *host, size_t n)
{
    if (slot < 0 || slot > 1 || !slots[slot].pending) sp_fail("cuda: labels staged in slot %d before its batch", slot);
    staged_slot *s = &slots[slot];   /* stage() waited for the slot's previous upload */
    if (n > s->ycap) {
        sp_cuda_check(cudaFreeHost(s->yhost));
        sp_cuda_check(cudaFree(s->ydev));
        sp_cuda_check(cudaMallocHost((void **)&s->yhost, n * sizeof(int)));
        sp_cuda_check(cudaMalloc((void **)&s->ydev, n * sizeof(int)));
        s->ycap = n;
    }
    if (n) {
        memcpy(s->yhost, host, n * sizeof(int));
        sp_cuda_check(cudaMemcpyAsync(s->ydev, s->yhost, n * sizeof(int), cudaMemcpyHostToDevice, copy_stream));
    }
    sp_cuda_check(cudaEventRecord(s->done, copy_stream));
    return s->ydev;
}

static void dev_release_staged(int slot)
{
    if (slot < 0 || slot > 1) sp_fail("cuda: staging slot %d (expected 0 or 1)", slot);
    sp_cuda_check(cudaEventRecord(slots[slot].released, sp_cuda_stream()));
    slots[slot].release = true;
}

static const void *dev_arena_base(void *arena)
{
    dev_arena *a = (dev_arena *)arena;
    return a->off ? NULL : sp_arena_base(&a->a);
}

static void dev_use_staged(int slot)
{
    if (slot < 0 || slot > 1 || !slots[slot].pending) sp_fail("cuda: staging slot %d was not staged", slot);
    sp_cuda_check(cudaStreamWaitEvent(sp_cuda_stream(), slots[slot].done, 0));
}

/* Device time between two marks: timing events recorded on the calling lane, read
 * (once, without waiting) after the step's wait has passed both. */
static cudaEvent_t marks[2];
static bool marked[2];

static void dev_time_mark(int which)
{
    if (which < 0 || which > 1) sp_fail("cuda: time mark %d (expected 0 or 1)", which);
    sp_cuda_check(cudaEventRecord(marks[which], sp_cuda_stream()));
    marked[which] = true;
    if (which == 0) marked[1] = false;
}

static double dev_time_ms(void)
{
    if (!marked[0] || !marked[1]) return -1.0;
    marked[0] = marked[1] = false;
    float ms = 0.0f;
    cudaError_t e = cudaEventElapsedTime(&ms, marks[0], marks[1]);
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError();   /* not an error: the work is still queued */
        return -1.0;
    }
    sp_cuda_check(e);
    return ms;
}

static const sp_device_allocator cuda_allocator = {
    dev_alloc,     dev_free,   dev_arena_new, dev_arena_alloc, dev_arena_reset,    dev_arena_free,
    dev_fill,      dev_upload, dev_download,  dev_stage,       dev_use_staged,     dev_stage_labels,
    dev_release_staged, dev_arena_base, dev_add, counts, dev_time_mark, dev_time_ms, dev_arena_size_like,
};

/* Whole-step graphs: captured on the calling lane's stream (global mode: any forbidden
 * call anywhere fails the capture, as the driver does), replayed there. */
static void graph_begin(void) { sp_cuda_check(cudaStreamBeginCapture(sp_cuda_stream(), cudaStreamCaptureModeGlobal)); }

static void *graph_end(void)
{
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    sp_cuda_check(cudaStreamEndCapture(sp_cuda_stream(), &g));
    sp_cuda_check(cudaGraphInstantiate(&x, g, 0));
    sp_cuda_check(cudaGraphDestroy(g));
    return x;
}

static void graph_launch(void *x) { sp_cuda_check(cudaGraphLaunch((cudaGraphExec_t)x, sp_cuda_stream())); }

static void graph_free(void *x)
{
    if (x) sp_cuda_check(cudaGraphExecDestroy((cudaGraphExec_t)x));
}

static const sp_device_graph cuda_graph = {graph_begin, graph_end, graph_launch, graph_free};

// ----------------------------------------------------------------------------
// device, stream, handles

int sp_cuda_device_count(const char **why)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) n = 0;
    if (why) *why = e != cudaSuccess ? cudaGetErrorString(e) : n == 0 ? "no device found" : NULL;
    return n;
}

void sp_cuda_init(int device_id)
{
    if (ready) {
        if (device_id != ctx.device)
            sp_fail("cuda: device %d: backend already initialised on device %d (expected one device per process)",
                    device_id, ctx.device);
        return;
    }
    const char *why;
    int n = sp_cuda_device_count(&why);
    if (n == 0) sp_fail("cuda: no CUDA device: %s (expected a GPU; make test-cuda runs on a GPU machine)", why);
    if (device_id < 0 || device_id >= n) sp_fail("cuda: device %d: out of range (expected 0..%d)", device_id, n - 1);
    ctx.device = device_id;
    sp_cuda_check(cudaSetDevice(device_id));
    int least = 0, greatest = 0;   /* lane 0 (the critical path) first when both have work */
    sp_cuda_check(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    for (int i = 0; i < SP_CUDA_LANES; i++) {
        sp_cuda_lane *l = &ctx.lanes[i];
        sp_cuda_check(cudaStreamCreateWithPriority(&l->stream, cudaStreamNonBlocking, i == 0 ? greatest : least));
        sp_cublas_check(cublasCreate(&l->cublas));
        /* Full FP32, no TF32: results must match the CPU ops to 1e-5 (tests/test_ops_cuda.c). */
        sp_cublas_check(cublasSetMathMode(l->cublas, CUBLAS_DEFAULT_MATH));
        sp_cublas_check(cublasSetStream(l->cublas, l->stream));
        sp_cusparse_check(cusparseCreate(&l->cusparse));
        sp_cusparse_check(cusparseSetStream(l->cusparse, l->stream));
        sp_cudnn_check(cudnnCreate(&l->cudnn));
        sp_cudnn_check(cudnnSetStream(l->cudnn, l->stream));
    }
    sp_cuda_check(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking));
    for (int i = 0; i < 2; i++) {
        sp_cuda_check(cudaEventCreateWithFlags(&slots[i].done, cudaEventDisableTiming));
        sp_cuda_check(cudaEventCreateWithFlags(&slots[i].released, cudaEventDisableTiming));
        sp_cuda_check(cudaEventCreate(&marks[i]));
    }
    sp_backend_register_allocator(SP_CUDA, &cuda_allocator);
    sp_backend_register_graph(SP_CUDA, &cuda_graph);
    ready = true;
}

const sp_cuda_ctx *sp_cuda(void)
{
    if (!ready) sp_fail("cuda: backend not initialised (expected sp_cuda_init before any CUDA tensor)");
    return &ctx;
}

const sp_cuda_lane *sp_cuda_current(void) { return &sp_cuda()->lanes[cur_lane]; }

cudaStream_t sp_cuda_stream(void) { return sp_cuda_current()->stream; }

void sp_cuda_set_lane(int lane)
{
    sp_cuda();
    if (lane < 0 || lane >= SP_CUDA_LANES) sp_fail("cuda: lane %d (expected 0..%d)", lane, SP_CUDA_LANES - 1);
    cur_lane = lane;
}

/* The waits of a steady-state step: a query first, so that work the device has already
 * done (the usual case after the loss was read) costs no host wait, and the counts
 * (device_syncs) show only the waits that happen. */
void sp_cuda_wait_stream(cudaStream_t s)
{
    cudaError_t q = cudaStreamQuery(s);
    if (q == cudaErrorNotReady) sp_cuda_check(cudaStreamSynchronize(s));
    else sp_cuda_check(q);
}

void sp_cuda_wait_event(cudaEvent_t e)
{
    cudaError_t q = cudaEventQuery(e);
    if (q == cudaErrorNotReady) sp_cuda_check(cudaEventSynchronize(e));
    else sp_cuda_check(q);
}

static bool foreign_streams;   /* streams the backend does not know of (NCCL's) */

void sp_cuda_foreign_stream(void) { foreign_streams = true; }

void sp_cuda_wait_device(void)
{
    bool idle = !foreign_streams;
    for (int i = 0; idle && i < SP_CUDA_LANES; i++) {
        cudaError_t q = cudaStreamQuery(ctx.lanes[i].stream);
        if (q != cudaErrorNotReady) sp_cuda_check(q);
        idle = q == cudaSuccess;
    }
    if (idle && copy_stream) {
        cudaError_t q = cudaStreamQuery(copy_stream);
        if (q != cudaErrorNotReady) sp_cuda_check(q);
        idle = q == cudaSuccess;
    }
    if (!idle) sp_cuda_check(cudaDeviceSynchronize());
}

void sp_cuda_synchronize(void)
{
    sp_cuda();
    sp_cuda_check(cudaDeviceSynchronize());
}

void sp_cuda_arena_joined(sp_tape *t)
{
    if (t && t->dev_arena[SP_CUDA]) ((dev_arena *)t->dev_arena[SP_CUDA])->joined = true;
}

// ----------------------------------------------------------------------------
// tensors and parameters

sp_tensor sp_cuda_tensor_new(int ndim, const int *shape)
{
    sp_cuda();
    sp_tensor t = sp_tensor_view(NULL, ndim, shape);
    t.data = (float *)dev_alloc(t.numel * sizeof(float));
    t.device = SP_CUDA;
    sp_zero(&t);
    return t;
}

static void copy(sp_tensor *dst, const sp_tensor *src, sp_device to, cudaMemcpyKind kind)
{
    char a[64], b[64];
    if (dst->device != to || src->device == to || dst->numel != src->numel)
        sp_fail("cuda copy: %s %s -> %s %s (expected %s, equal sizes)", sp_device_name(src->device),
                sp_shape_str(src, a, sizeof a), sp_device_name(dst->device), sp_shape_str(dst, b, sizeof b),
                to == SP_CUDA ? "cpu -> cuda" : "cuda -> cpu");
    cudaStream_t s = sp_cuda_stream();
    sp_cuda_check(cudaMemcpyAsync(dst->data, src->data, src->numel * sizeof(float), kind, s));
    sp_cuda_check(cudaStreamSynchronize(s));
}

void sp_tensor_to_device(sp_tensor *dst, const sp_tensor *src) { copy(dst, src, SP_CUDA, cudaMemcpyHostToDevice); }

void sp_tensor_to_host(sp_tensor *dst, const sp_tensor *src) { copy(dst, src, SP_CPU, cudaMemcpyDeviceToHost); }

static void move_tensor(sp_tensor *t, sp_device d)
{
    if (t->device == d) return;
    sp_tensor moved = d == SP_CUDA ? sp_cuda_tensor_new(t->ndim, t->shape) : sp_tensor_new(t->ndim, t->shape);
    if (d == SP_CUDA) sp_tensor_to_device(&moved, t);
    else sp_tensor_to_host(&moved, t);
    sp_tensor_free(t);
    *t = moved;
}

void sp_layer_to_device(sp_layer *l, sp_device d)
{
    for (int i = 0; i < l->nparams; i++) {
        move_tensor(&l->params[i]->value, d);
        move_tensor(&l->params[i]->grad, d);
    }
    for (int i = 0; i < l->nbuffers; i++)   /* batch norm's running statistics: no grad */
        move_tensor(&l->buffers[i]->value, d);
}

void sp_model_to_device(sp_model *m, sp_device d)
{
    for (int i = 0; i < m->nlayers; i++) sp_layer_to_device(m->layers[i], d);
    if (m->loss) sp_layer_to_device(m->loss, d);
}

void sp_cuda_require_params(const sp_layer *l)
{
    for (int i = 0; i < l->nparams; i++)
        if (l->params[i]->value.device != SP_CUDA || l->params[i]->grad.device != SP_CUDA)
            sp_fail("%s %s: input on cuda, parameter %s on %s (expected sp_model_to_device(m, SP_CUDA))",
                    l->op->name, l->name, l->params[i]->name, sp_device_name(l->params[i]->value.device));
}

// ----------------------------------------------------------------------------
// cuBLAS

void sp_cuda_gemm(cudaStream_t stream, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                  const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    /* cuBLAS is column-major: a row-major X is the column-major Xᵀ with the same ld, so
     * row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: swap the operands. */
    const sp_cuda_lane *l = NULL;
    for (int i = 0; i < SP_CUDA_LANES; i++)
        if (ctx.lanes[i].stream == stream) l = &ctx.lanes[i];
    if (!l) sp_fail("sp_cuda_gemm: stream %p is no lane's stream (expected sp_cuda_stream())", (void *)stream);
    sp_cublas_check(cublasSgemm(l->cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc));
}
