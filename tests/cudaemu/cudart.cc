/* cudart.cc — the CUDA emulator's runtime: device memory with an allocation registry,
 * streams and events with deferred execution, kernel launches executed on the CPU.
 *
 * Written from the CUDA Runtime API documentation against the toolkit's own
 * cuda_runtime_api.h (so every signature is the real one). What it checks:
 *   - device allocations are filled with a quiet NaN (0x7fc0dead) and followed by an
 *     unmapped guard page (an allocation ends exactly at the page end, so a kernel that
 *     runs one float past its tensor faults); cudaFree of an unknown pointer aborts;
 *   - kernel pointer arguments, copy and memset ranges must lie in live allocations;
 *     a host→device copy must read host memory and write device memory, and so on;
 *   - launch configurations: block ≤ 1024 threads (x, y ≤ 1024, z ≤ 64), grid y, z ≤
 *     65535, no zero dimension, dynamic shared memory ≤ 48 KiB — else
 *     cudaErrorInvalidConfiguration from cudaGetLastError, as the driver;
 *   - nothing runs when it is queued: each stream keeps a queue that runs at a
 *     synchronisation point (cudaStreamSynchronize, cudaEventSynchronize, a blocking
 *     cudaMemcpy/cudaMemset on the legacy stream, cudaDeviceSynchronize, cudaFree),
 *     honouring cudaStreamWaitEvent and the legacy default stream's implicit order with
 *     blocking streams; device→host copies land only then, so a missing sync reads
 *     stale host memory. Host→device copies from pageable memory are staged when
 *     queued (the driver does the same); from pinned memory they read it when run;
 *   - SCANPROP_EMU_ORDER=shuffle runs the blocks of a launch, the threads of a block
 *     and the streams of a device-wide sync in a pseudo-random order;
 *   - SCANPROP_EMU_PROTECT=1 keeps every device allocation PROT_NONE while host code
 *     runs, so a host dereference of device memory faults with a "cudaemu:" line.
 * A block's threads run one after the other as plain calls; a kernel that calls
 * __syncthreads runs its threads as ucontext fibers that meet at each barrier (the
 * first block of a kernel's first launch always runs as fibers to find out). */
#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>
#include "emu.h"

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#include <dlfcn.h>
#include <sanitizer/common_interface_defs.h>
#else
#define EMU_ASAN 0
#endif

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

struct CUstream_st;
struct CUgraph_st;
struct CUevent_st {
    CUstream_st *stream = nullptr;
    unsigned long long seq = 0;   /* done when stream->done >= seq */
    bool timing = true;           /* not cudaEventDisableTiming */
    std::shared_ptr<double> when; /* host clock when the last record ran; < 0 while pending */
    CUgraph_st *cap = nullptr;    /* recorded inside a stream capture: a graph-internal edge */
    std::vector<int> cap_deps;    /* ... on these graph nodes */
};

/* A captured graph: nodes in capture order (deps always name earlier nodes). */
struct cap_node {
    std::string what;
    std::function<void()> fn;
    std::vector<int> deps;
};
struct CUgraph_st {
    std::vector<cap_node> nodes;
    CUstream_st *origin = nullptr;
    bool global = false;          /* cudaStreamCaptureModeGlobal (or ThreadLocal: same here) */
    cudaError_t invalid = cudaSuccess;
    std::string why;              /* the call that invalidated the capture */
    bool ended = false;
};
struct CUgraphExec_st {
    std::vector<cap_node> nodes;
};

namespace {

const uint32_t NAN_BITS = 0x7fc0deadu;

struct wait_on {
    CUstream_st *stream;
    unsigned long long seq;
};

struct item {
    std::string what;
    std::function<void()> fn;
    std::vector<wait_on> waits;
};

}   // namespace

struct CUstream_st {
    std::deque<item> q;
    unsigned long long enq = 0, done = 0;
    unsigned flags = 0;
    int priority = 0;                /* lower = more urgent (cudaDeviceGetStreamPriorityRange) */
    bool legacy = false;
    bool running = false;            /* its head item is under way (waiting for its events) */
    CUgraph_st *cap = nullptr;       /* capturing into this graph */
    std::vector<int> cap_tail;       /* the graph nodes the next captured work depends on */
};

namespace {

struct alloc_rec {
    size_t size;
    char *map;
    size_t map_len;   /* accessible part (the guard page follows) */
    bool pinned;      /* host memory from cudaMallocHost: not device memory */
};

std::recursive_mutex mu;
std::map<uintptr_t, alloc_rec> allocs;
std::set<CUstream_st *> streams;
CUstream_st legacy_stream;
thread_local cudaError_t last_error = cudaSuccess;
bool shuffle_mode, protect_mode, no_device, inited;
std::mt19937_64 rng(12345);
int exec_depth;
std::set<CUgraph_st *> capturing;   /* captures begun and not ended */
size_t page;
/* What the program issued, counted apart from scanprop's own counts (sp_device_counts):
 * cudaemu_counts. */
long long n_launches, n_syncs, n_allocs, n_copies;

void init()
{
    if (inited) return;
    inited = true;
    page = (size_t)sysconf(_SC_PAGESIZE);
    const char *o = getenv("SCANPROP_EMU_ORDER"), *p = getenv("SCANPROP_EMU_PROTECT"),
               *n = getenv("SCANPROP_EMU_NODEVICE"), *s = getenv("SCANPROP_EMU_SEED");
    if (o && *o && strcmp(o, "shuffle") != 0 && strcmp(o, "linear") != 0)
        emu::fail("SCANPROP_EMU_ORDER=%s (expected linear or shuffle)", o);
    shuffle_mode = o && strcmp(o, "shuffle") == 0;
    protect_mode = p && strcmp(p, "1") == 0;
    no_device = n && strcmp(n, "1") == 0;
    if (s) rng.seed(strtoull(s, nullptr, 10));
    legacy_stream.legacy = true;
    streams.insert(&legacy_stream);
}

const alloc_rec *find_alloc(const void *p, uintptr_t *base)
{
    uintptr_t a = (uintptr_t)p;
    auto it = allocs.upper_bound(a);
    if (it == allocs.begin()) return nullptr;
    --it;
    if (a > it->first + it->second.size) return nullptr;
    if (base) *base = it->first;
    return &it->second;
}

/* Inside [base, base + size) (or, for an empty range, at most one past the end). */
const alloc_rec *device_range(const void *p, size_t bytes, uintptr_t *base)
{
    uintptr_t b;
    const alloc_rec *r = find_alloc(p, &b);
    if (!r || r->pinned) return nullptr;
    if ((uintptr_t)p + bytes > b + r->size) return nullptr;
    if (base) *base = b;
    return r;
}

bool is_device(const void *p) { return device_range(p, 0, nullptr) != nullptr; }

void protect_all(int prot)
{
    for (auto &kv : allocs)
        if (!kv.second.pinned && kv.second.map_len) mprotect(kv.second.map, kv.second.map_len, prot);
}

/* Device memory is readable only while queued work runs (SCANPROP_EMU_PROTECT=1). */
struct exec_scope {
    exec_scope()
    {
        if (exec_depth++ == 0 && protect_mode) protect_all(PROT_READ | PROT_WRITE);
    }
    ~exec_scope()
    {
        if (--exec_depth == 0 && protect_mode) protect_all(PROT_NONE);
    }
};

CUstream_st *S(cudaStream_t s)
{
    init();
    if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return &legacy_stream;
    if (!streams.count(s)) emu::fail("stream %p is not a live stream (destroyed, or never created)", (void *)s);
    return s;
}

/* Queue fn on s; the legacy stream orders itself after every blocking stream and
 * every blocking stream after it (CUDA's legacy default stream semantics). */
void push(CUstream_st *s, const char *what, std::function<void()> fn, std::vector<wait_on> waits = {})
{
    if (s->cap) {   /* captured: a graph node after the stream's tail, nothing queued */
        CUgraph_st *g = s->cap;
        g->nodes.push_back(cap_node{what, std::move(fn), s->cap_tail});
        s->cap_tail = {(int)g->nodes.size() - 1};
        return;
    }
    if (s->legacy && !capturing.empty())   /* the legacy stream's implicit sync breaks a capture */
        for (CUgraph_st *g : capturing)
            if (g->invalid == cudaSuccess) {
                g->invalid = cudaErrorStreamCaptureImplicit;
                g->why = std::string(what) + " on the legacy default stream";
            }
    if (s->legacy) {
        for (CUstream_st *o : streams)
            if (o != s && !(o->flags & cudaStreamNonBlocking)) waits.push_back({o, o->enq});
    } else if (!(s->flags & cudaStreamNonBlocking)) {
        waits.push_back({&legacy_stream, legacy_stream.enq});
    }
    s->q.push_back(item{what, std::move(fn), std::move(waits)});
    s->enq++;
}

void run_stream(CUstream_st *s, unsigned long long upto);

void run_one(CUstream_st *s)
{
    item it = std::move(s->q.front());
    s->q.pop_front();
    s->running = true;   /* nothing else of this stream may start before this item is done */
    for (const wait_on &w : it.waits) run_stream(w.stream, w.seq);
    if (it.fn) it.fn();
    s->running = false;
    s->done++;
}

/* The head item of o waits for nothing that has not run yet. */
bool head_ready(const CUstream_st *o)
{
    for (const wait_on &w : o->q.front().waits)
        if (w.stream->done < w.seq) return false;
    return true;
}

/* Streams are independent: a GPU runs them side by side. In shuffle mode a sync on one
 * stream lets every stream progress, item by item in a random order, until the stream
 * has run what was asked; so work on another stream runs before, between or after this
 * one's, and a cross-stream dependency without an event shows. Another stream steps in
 * only when its head is ready: one whose head waits for a stream stopped in the middle
 * of an item (the item that waits for this one) would wait for it forever here, where
 * a GPU would simply let it wait (the emulator runs streams by recursion). */
void run_stream(CUstream_st *s, unsigned long long upto)
{
    exec_scope scope;
    while (s->done < upto && !s->q.empty()) {
        if (!shuffle_mode) {
            run_one(s);
            continue;
        }
        std::vector<CUstream_st *> busy;
        for (CUstream_st *o : streams)
            if (!o->q.empty() && !o->running && (o == s || head_ready(o))) busy.push_back(o);
        if (busy.empty()) emu::fail("stream %p waits for itself (an event cycle)", (void *)s);
        run_one(busy[rng() % busy.size()]);
    }
}

/* Everything queued anywhere; streams interleave item by item in shuffle mode. */
void run_all()
{
    exec_scope scope;
    for (;;) {
        std::vector<CUstream_st *> busy;
        for (CUstream_st *s : streams)
            if (!s->q.empty() && !s->running) busy.push_back(s);
        if (busy.empty()) return;
        if (!shuffle_mode) {   /* the most urgent stream first (lowest priority number) */
            std::stable_sort(busy.begin(), busy.end(),
                             [](const CUstream_st *a, const CUstream_st *b) { return a->priority < b->priority; });
            for (CUstream_st *s : busy) run_stream(s, s->enq);
        } else {
            run_one(busy[rng() % busy.size()]);
        }
    }
}

/* While a capture is under way, a call that would wait for the device or change its
 * memory is an error, as on a GPU (cudaStreamCaptureModeGlobal, what the backend uses):
 * the capture is invalidated, and cudaStreamEndCapture reports it. */
cudaError_t capture_forbids(const char *call)
{
    if (capturing.empty()) return cudaSuccess;
    for (CUgraph_st *g : capturing)
        if (g->invalid == cudaSuccess) {
            g->invalid = cudaErrorStreamCaptureInvalidated;
            g->why = call;
        }
    emu::set_error(cudaErrorStreamCaptureUnsupported);
    return cudaErrorStreamCaptureUnsupported;
}

double now_ms()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

/* Runs a graph's nodes once, in a topological order (a random one in shuffle mode). */
void run_graph(const std::vector<cap_node> &nodes)
{
    size_t n = nodes.size();
    std::vector<int> left(n);
    std::vector<std::vector<int>> succ(n);
    for (size_t i = 0; i < n; i++) {
        left[i] = (int)nodes[i].deps.size();
        for (int d : nodes[i].deps) succ[(size_t)d].push_back((int)i);
    }
    std::vector<int> ready;
    for (size_t i = 0; i < n; i++)
        if (left[i] == 0) ready.push_back((int)i);
    while (!ready.empty()) {
        size_t k = shuffle_mode ? rng() % ready.size() : 0;
        int i = ready[k];
        ready.erase(ready.begin() + (long)k);
        if (nodes[(size_t)i].fn) nodes[(size_t)i].fn();
        std::vector<int> now;
        for (int j : succ[(size_t)i])
            if (--left[(size_t)j] == 0) now.push_back(j);
        std::sort(now.begin(), now.end());
        ready.insert(ready.end(), now.begin(), now.end());
        if (!shuffle_mode) std::sort(ready.begin(), ready.end());
    }
}

// ----------------------------------------------------------------------------
// kernel execution

extern "C" char __start_cudaemu_shared[] __attribute__((weak));
extern "C" char __stop_cudaemu_shared[] __attribute__((weak));

void fill_nan(void *p, size_t bytes)
{
    uint32_t *w = (uint32_t *)p;
    for (size_t i = 0; i < bytes / 4; i++) w[i] = NAN_BITS;
    memset((char *)p + bytes / 4 * 4, 0x7f, bytes % 4);
}

struct launch_rec {
    std::string name;
    const char *file;
    int line;
    const void *key;
    dim3 grid, block;
    size_t shmem;
    std::function<void()> body;
};

std::map<const void *, bool> kernel_syncs;   /* key -> calls __syncthreads */
std::vector<char> dyn_shared;
const launch_rec *running;
bool in_fiber, saw_sync;

enum { F_RUN, F_BARRIER, F_DONE };
struct fiber {
    ucontext_t ctx;
    char *stack;
    int state;
    void *fake;
};
std::vector<fiber> fibers;
ucontext_t sched_ctx;
int cur_fiber;
size_t fiber_stack_size;
#if EMU_ASAN
const void *sched_bottom;
size_t sched_size;
void *sched_fake;
#endif

/* Under ASan the fiber switches are announced with __sanitizer_{start,finish}_switch_fiber,
 * the supported way; libc's swapcontext is called directly, past ASan's interceptor,
 * which would only add a warning ("doesn't fully support swapcontext") to every test. */
int switch_context(ucontext_t *from, const ucontext_t *to)
{
#if EMU_ASAN
    static int (*libc_swapcontext)(ucontext_t *, const ucontext_t *);
    if (!libc_swapcontext) {
        void *h = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
        if (h) libc_swapcontext = (int (*)(ucontext_t *, const ucontext_t *))dlsym(h, "swapcontext");
        if (!libc_swapcontext) libc_swapcontext = swapcontext;
    }
    return libc_swapcontext(from, to);
#else
    return swapcontext(from, to);
#endif
}

void set_thread(unsigned t)
{
    threadIdx.x = t % blockDim.x;
    threadIdx.y = t / blockDim.x % blockDim.y;
    threadIdx.z = t / (blockDim.x * blockDim.y);
}

void fiber_main()
{
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &sched_bottom, &sched_size);
#endif
    running->body();
    fibers[cur_fiber].state = F_DONE;
#if EMU_ASAN
    __sanitizer_start_switch_fiber(nullptr, sched_bottom, sched_size);
#endif
    /* returning resumes sched_ctx through uc_link */
}

void run_block_fibers(unsigned nthreads)
{
    if (fibers.size() < nthreads) {
        size_t old = fibers.size();
        fibers.resize(nthreads);
        fiber_stack_size = EMU_ASAN ? (256u << 10) : (64u << 10);
        for (size_t i = old; i < nthreads; i++) {
            void *m = mmap(nullptr, fiber_stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                           -1, 0);
            if (m == MAP_FAILED) emu::fail("out of memory for fiber stacks");
            fibers[i].stack = (char *)m;
        }
    }
    for (unsigned t = 0; t < nthreads; t++) {
        fiber &f = fibers[t];
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack;
        f.ctx.uc_stack.ss_size = fiber_stack_size;
        f.ctx.uc_link = &sched_ctx;
        f.state = F_RUN;
        f.fake = nullptr;
        makecontext(&f.ctx, fiber_main, 0);
    }
    std::vector<unsigned> order(nthreads);
    for (unsigned t = 0; t < nthreads; t++) order[t] = t;
    in_fiber = true;
    for (;;) {
        if (shuffle_mode) std::shuffle(order.begin(), order.end(), rng);
        for (unsigned t : order) {
            if (fibers[t].state != F_RUN) continue;
            cur_fiber = (int)t;
            set_thread(t);
#if EMU_ASAN
            __sanitizer_start_switch_fiber(&sched_fake, fibers[t].stack, fiber_stack_size);
#endif
            switch_context(&sched_ctx, &fibers[t].ctx);
#if EMU_ASAN
            __sanitizer_finish_switch_fiber(sched_fake, nullptr, nullptr);
#endif
        }
        unsigned done = 0, waiting = 0;
        for (unsigned t = 0; t < nthreads; t++) {
            done += fibers[t].state == F_DONE;
            waiting += fibers[t].state == F_BARRIER;
        }
        if (done == nthreads) break;
        if (done > 0)
            emu::fail("kernel %s (%s:%d): block (%u,%u,%u): %u threads wait at __syncthreads while %u have exited "
                      "(every thread of a block must reach each barrier)",
                      running->name.c_str(), running->file, running->line, blockIdx.x, blockIdx.y, blockIdx.z,
                      waiting, done);
        for (unsigned t = 0; t < nthreads; t++) fibers[t].state = F_RUN;   /* release the barrier */
    }
    in_fiber = false;
}

void exec_launch(const launch_rec &L)
{
    running = &L;
    gridDim = L.grid;
    blockDim = L.block;
    unsigned nthreads = L.block.x * L.block.y * L.block.z;
    size_t nblocks = (size_t)L.grid.x * L.grid.y * L.grid.z;
    auto known = kernel_syncs.find(L.key);
    bool fibers_on = known == kernel_syncs.end() || known->second;
    bool probing = known == kernel_syncs.end();
    std::vector<size_t> border;
    if (shuffle_mode) {
        border.resize(nblocks);
        for (size_t b = 0; b < nblocks; b++) border[b] = b;
        std::shuffle(border.begin(), border.end(), rng);
    }
    std::vector<unsigned> torder(nthreads);
    for (unsigned t = 0; t < nthreads; t++) torder[t] = t;
    dyn_shared.assign(L.shmem, 0);
    size_t shared_bytes = __start_cudaemu_shared ? (size_t)(__stop_cudaemu_shared - __start_cudaemu_shared) : 0;
    for (size_t i = 0; i < nblocks; i++) {
        size_t b = shuffle_mode ? border[i] : i;
        blockIdx.x = (unsigned)(b % L.grid.x);
        blockIdx.y = (unsigned)(b / L.grid.x % L.grid.y);
        blockIdx.z = (unsigned)(b / ((size_t)L.grid.x * L.grid.y));
        if (shared_bytes) fill_nan(__start_cudaemu_shared, shared_bytes);
        if (L.shmem) fill_nan(dyn_shared.data(), L.shmem);
        if (fibers_on) {
            saw_sync = false;
            run_block_fibers(nthreads);
            if (probing) {
                kernel_syncs[L.key] = saw_sync;
                fibers_on = saw_sync;
                probing = false;
            }
        } else {
            if (shuffle_mode) std::shuffle(torder.begin(), torder.end(), rng);
            for (unsigned t : torder) {
                set_thread(t);
                L.body();
            }
        }
    }
    running = nullptr;
}

// ----------------------------------------------------------------------------
// device memory

void segv_handler(int sig, siginfo_t *si, void *)
{
    uintptr_t a = (uintptr_t)si->si_addr;
    char buf[320];
    int n = 0;
    for (auto &kv : allocs) {
        const alloc_rec &r = kv.second;
        uintptr_t m = (uintptr_t)r.map;
        if (a >= m && a < m + r.map_len + page) {
            if (a >= m + r.map_len)
                n = snprintf(buf, sizeof buf,
                             "cudaemu: out-of-bounds access at %p: %zu bytes past the end of device allocation %p "
                             "(%zu bytes)%s%s\n",
                             (void *)a, a - (kv.first + r.size), (void *)kv.first, r.size,
                             running ? " in kernel " : "", running ? running->name.c_str() : "");
            else
                n = snprintf(buf, sizeof buf,
                             "cudaemu: host code touched device memory at %p (allocation %p, %zu bytes; "
                             "SCANPROP_EMU_PROTECT=1)\n",
                             (void *)a, (void *)kv.first, r.size);
            break;
        }
    }
    if (n > 0) {
        ssize_t w = write(2, buf, (size_t)n);
        (void)w;
    }
    signal(sig, SIG_DFL);   /* returning re-faults into the default action */
}

__attribute__((constructor)) void install_handler()
{
#if !EMU_ASAN
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = segv_handler;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, nullptr);
#endif
}

const char *kind_name(cudaMemcpyKind k)
{
    switch (k) {
    case cudaMemcpyHostToHost: return "host->host";
    case cudaMemcpyHostToDevice: return "host->device";
    case cudaMemcpyDeviceToHost: return "device->host";
    case cudaMemcpyDeviceToDevice: return "device->device";
    default: return "default";
    }
}

/* Queue a copy on s after checking both ends against the registry and kind. */
cudaError_t queue_copy(void *dst, const void *src, size_t n, cudaMemcpyKind kind, CUstream_st *s, const char *who)
{
    if (n == 0) return cudaSuccess;
    bool dd = device_range(dst, n, nullptr), sd = device_range(src, n, nullptr);
    if (kind == cudaMemcpyDefault) {
        kind = dd ? (sd ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                  : (sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    }
    bool want_dd = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool want_sd = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (want_dd && !dd)
        emu::fail("%s %s of %zu bytes: destination %p is not %zu bytes inside one device allocation", who,
                  kind_name(kind), n, dst, n);
    if (want_sd && !sd)
        emu::fail("%s %s of %zu bytes: source %p is not %zu bytes inside one device allocation", who,
                  kind_name(kind), n, src, n);
    if (!want_dd && is_device(dst)) emu::fail("%s %s: destination %p is device memory", who, kind_name(kind), dst);
    if (!want_sd && is_device(src)) emu::fail("%s %s: source %p is device memory", who, kind_name(kind), src);
    const alloc_rec *pin = find_alloc(src, nullptr);
    bool pageable = (kind == cudaMemcpyHostToDevice && !(pin && pin->pinned)) ||
                    (kind == cudaMemcpyDeviceToHost && !(find_alloc(dst, nullptr) && find_alloc(dst, nullptr)->pinned));
    if (s->cap && pageable) {   /* a graph cannot copy pageable memory: the driver refuses */
        s->cap->invalid = cudaErrorStreamCaptureInvalidated;
        s->cap->why = std::string(who) + " of pageable host memory";
        emu::set_error(cudaErrorStreamCaptureUnsupported);
        return cudaErrorStreamCaptureUnsupported;
    }
    if (kind == cudaMemcpyHostToDevice && !(pin && pin->pinned)) {
        /* pageable: staged now, as the driver does before returning */
        auto staged = std::make_shared<std::vector<char>>((const char *)src, (const char *)src + n);
        push(s, who, [dst, staged, n]() { memcpy(dst, staged->data(), n); });
    } else {
        push(s, who, [dst, src, n]() { memcpy(dst, src, n); });
    }
    return cudaSuccess;
}

}   // namespace

// ----------------------------------------------------------------------------
// the emulator's internal interface

namespace emu {

void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cudaemu: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(stderr);
    abort();
}

void check_kernel_ptr(const char *kernel, const char *file, int line, int arg, const void *p)
{
    std::lock_guard<std::recursive_mutex> g(mu);
    init();
    if (p && !is_device(p))
        fail("kernel %s (%s:%d): pointer argument %d (%p) is not device memory", kernel, file, line, arg, p);
}

void check_device_range(const char *who, const void *p, size_t bytes)
{
    std::lock_guard<std::recursive_mutex> g(mu);
    init();
    if (bytes == 0) return;
    uintptr_t b;
    if (!device_range(p, bytes, &b)) {
        const alloc_rec *r = find_alloc(p, &b);
        if (r && !r->pinned)
            fail("%s: range %p + %zu bytes leaves device allocation %p of %zu bytes by %zu bytes", who, p, bytes,
                 (void *)b, r->size, (size_t)((uintptr_t)p + bytes - (b + r->size)));
        fail("%s: %p is not device memory", who, p);
    }
}

bool launch_config_ok(dim3 g, dim3 b, size_t shmem)
{
    bool ok = g.x >= 1 && g.y >= 1 && g.z >= 1 && b.x >= 1 && b.y >= 1 && b.z >= 1 && b.x <= 1024 &&
              b.y <= 1024 && b.z <= 64 && (size_t)b.x * b.y * b.z <= 1024 && g.y <= 65535 && g.z <= 65535 &&
              g.x <= 2147483647u && shmem <= 48 * 1024;
    if (!ok) set_error(cudaErrorInvalidConfiguration);
    return ok;
}

void launch(const char *kernel, const char *file, int line, const void *key, dim3 grid, dim3 block, size_t shmem,
            cudaStream_t s, std::function<void()> body)
{
    std::lock_guard<std::recursive_mutex> g(mu);
    n_launches++;
    auto L = std::make_shared<launch_rec>(launch_rec{kernel, file, line, key, grid, block, shmem, std::move(body)});
    push(S(s), kernel, [L]() { exec_launch(*L); });
}

void enqueue(cudaStream_t s, const char *what, std::function<void()> fn)
{
    std::lock_guard<std::recursive_mutex> g(mu);
    push(S(s), what, std::move(fn));
}

void *dynamic_shared() { return dyn_shared.data(); }

void syncthreads()
{
    saw_sync = true;
    if (!running) fail("__syncthreads called outside a kernel");
    if (!in_fiber)
        fail("kernel %s (%s:%d): __syncthreads in a block run without fibers (the kernel's first block did not "
             "synchronise; barriers must be reached by every block alike)",
             running->name.c_str(), running->file, running->line);
    fiber &f = fibers[cur_fiber];
    f.state = F_BARRIER;
#if EMU_ASAN
    __sanitizer_start_switch_fiber(&f.fake, sched_bottom, sched_size);
#endif
    switch_context(&f.ctx, &sched_ctx);
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(f.fake, &sched_bottom, &sched_size);
#endif
    set_thread((unsigned)cur_fiber);
}

void set_error(cudaError_t e) { last_error = e; }

}   // namespace emu

// ----------------------------------------------------------------------------
// the CUDA Runtime API

#define LOCK                                       \
    std::lock_guard<std::recursive_mutex> lock_(mu); \
    init()

extern "C" {

cudaError_t cudaGetDeviceCount(int *count)
{
    LOCK;
    *count = no_device ? 0 : 1;
    return no_device ? cudaErrorNoDevice : cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    LOCK;
    if (no_device) return cudaErrorNoDevice;
    return device == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}

cudaError_t cudaGetDevice(int *device)
{
    *device = 0;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    LOCK;
    if (no_device || device != 0) return cudaErrorInvalidDevice;
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "scanprop CUDA emulator");
    prop->totalGlobalMem = (size_t)16 << 30;
    prop->sharedMemPerBlock = 48 * 1024;
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 2147483647;
    prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
    prop->warpSize = 32;
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 1;
    return cudaSuccess;
}

/* What the program has issued so far: kernel and graph launches, explicit waits
 * (stream, event, device synchronize; not queries), allocations (device and pinned),
 * copies. Tests compare it with scanprop's own counts (sp_device_counts_get). */
void cudaemu_counts(long long *launches, long long *syncs, long long *allocs, long long *copies)
{
    LOCK;
    *launches = n_launches;
    *syncs = n_syncs;
    *allocs = n_allocs;
    *copies = n_copies;
}

cudaError_t cudaDeviceSynchronize(void)
{
    LOCK;
    n_syncs++;
    if (cudaError_t e = capture_forbids("cudaDeviceSynchronize")) return e;
    run_all();
    return cudaSuccess;
}

cudaError_t cudaDeviceReset(void)
{
    LOCK;
    run_all();
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) { return last_error; }

const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureUnjoined: return "cudaErrorStreamCaptureUnjoined";
    case cudaErrorStreamCaptureIsolation: return "cudaErrorStreamCaptureIsolation";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    default: return "cudaErrorUnknown";
    }
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureUnjoined: return "capture was not joined to the original stream";
    case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
    case cudaErrorNotReady: return "device not ready";
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    default: return "unknown error";
    }
}

static cudaError_t do_alloc(void **p, size_t size, bool pinned)
{
    LOCK;
    n_allocs++;
    if (no_device) return cudaErrorNoDevice;
    if (cudaError_t e = capture_forbids(pinned ? "cudaMallocHost" : "cudaMalloc")) return e;
    *p = nullptr;
    if (size == 0) return cudaSuccess;
    size_t len = (size + 3) & ~(size_t)3;
    size_t map_len = (len + page - 1) / page * page;
    char *m = (char *)mmap(nullptr, map_len + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return cudaErrorMemoryAllocation;
    mprotect(m + map_len, page, PROT_NONE);   /* the guard page */
    char *base = m + map_len - len;
    fill_nan(base, len);
    allocs[(uintptr_t)base] = alloc_rec{size, m, map_len, pinned};
    if (!pinned && protect_mode && exec_depth == 0) mprotect(m, map_len, PROT_NONE);
    *p = base;
    return cudaSuccess;
}

static cudaError_t do_free(void *p, bool pinned)
{
    LOCK;
    if (!p) return cudaSuccess;
    if (cudaError_t e = capture_forbids(pinned ? "cudaFreeHost" : "cudaFree")) return e;
    auto it = allocs.find((uintptr_t)p);
    if (it == allocs.end() || it->second.pinned != pinned)
        emu::fail("%s(%p): not the start of a live %s allocation", pinned ? "cudaFreeHost" : "cudaFree", p,
                  pinned ? "pinned host" : "device");
    run_all();   /* cudaFree synchronises the device */
    munmap(it->second.map, it->second.map_len + page);
    allocs.erase(it);
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **devPtr, size_t size) { return do_alloc(devPtr, size, false); }
cudaError_t cudaFree(void *devPtr) { return do_free(devPtr, false); }
cudaError_t cudaMallocHost(void **ptr, size_t size) { return do_alloc(ptr, size, true); }
cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int) { return do_alloc(ptr, size, true); }
cudaError_t cudaFreeHost(void *ptr) { return do_free(ptr, true); }

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total)
{
    *free_b = (size_t)8 << 30;
    *total = (size_t)16 << 30;
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream)
{
    LOCK;
    n_copies++;
    return queue_copy(dst, src, count, kind, S(stream), "cudaMemcpyAsync");
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    LOCK;
    n_copies++;
    if (cudaError_t c = capture_forbids("cudaMemcpy")) return c;
    cudaError_t e = queue_copy(dst, src, count, kind, &legacy_stream, "cudaMemcpy");
    run_stream(&legacy_stream, legacy_stream.enq);
    return e;
}

/* height rows of width bytes, each checked like a cudaMemcpyAsync of its own. */
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind kind, cudaStream_t stream)
{
    LOCK;
    n_copies++;
    if (width > dpitch || width > spitch) return cudaErrorInvalidPitchValue;
    CUstream_st *s = S(stream);
    for (size_t r = 0; r < height; r++)
        queue_copy((char *)dst + r * dpitch, (const char *)src + r * spitch, width, kind, s, "cudaMemcpy2DAsync");
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
    LOCK;
    if (count == 0) return cudaSuccess;
    emu::check_device_range("cudaMemsetAsync", devPtr, count);
    push(S(stream), "cudaMemsetAsync", [devPtr, value, count]() { memset(devPtr, value, count); });
    return cudaSuccess;
}

cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
    LOCK;
    if (cudaError_t c = capture_forbids("cudaMemset")) return c;
    cudaError_t e = cudaMemsetAsync(devPtr, value, count, nullptr);
    run_stream(&legacy_stream, legacy_stream.enq);
    return e;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    LOCK;
    CUstream_st *s = new CUstream_st;
    s->flags = flags;
    streams.insert(s);
    *pStream = s;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *pStream) { return cudaStreamCreateWithFlags(pStream, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    LOCK;
    CUstream_st *s = S(stream);
    if (s->legacy) return cudaErrorInvalidResourceHandle;
    run_stream(s, s->enq);   /* the driver lets queued work finish */
    streams.erase(s);
    delete s;
    return cudaSuccess;
}

static cudaError_t stream_run(cudaStream_t stream, const char *call)
{
    LOCK;
    CUstream_st *s = S(stream);
    if (cudaError_t e = capture_forbids(call)) return e;
    run_stream(s, s->enq);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    LOCK;
    n_syncs++;
    return stream_run(stream, "cudaStreamSynchronize");
}

/* A query makes progress (the emulator has no background worker): the stream runs. */
cudaError_t cudaStreamQuery(cudaStream_t stream) { return stream_run(stream, "cudaStreamQuery"); }

cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    *event = new CUevent_st;
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    *event = new CUevent_st;
    (*event)->timing = !(flags & cudaEventDisableTiming);
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    delete event;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    LOCK;
    CUstream_st *s = S(stream);
    if (s->cap) {   /* inside a capture: an edge of the graph, not a completion to wait for */
        event->cap = s->cap;
        event->cap_deps = s->cap_tail;
        event->stream = nullptr;
        return cudaSuccess;
    }
    auto when = std::make_shared<double>(-1.0);
    /* a marker: the event completes (and takes its time) when it runs */
    push(s, "cudaEventRecord", [when]() { *when = now_ms(); });
    event->stream = s;
    event->seq = s->enq;
    event->when = when;
    event->cap = nullptr;
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int)
{
    LOCK;
    CUstream_st *s = S(stream);
    if (event->cap) {   /* a captured event: the stream joins (or forks into) that capture */
        if (!capturing.count(event->cap)) return cudaErrorStreamCaptureIsolation;
        if (s->cap && s->cap != event->cap) return cudaErrorStreamCaptureMerge;
        if (!s->cap) {
            s->cap = event->cap;
            s->cap_tail.clear();
        }
        for (int d : event->cap_deps)
            if (std::find(s->cap_tail.begin(), s->cap_tail.end(), d) == s->cap_tail.end()) s->cap_tail.push_back(d);
        return cudaSuccess;
    }
    if (!event->stream) return cudaSuccess;   /* never recorded: no dependency */
    if (!streams.count(event->stream)) return cudaErrorInvalidResourceHandle;
    if (s->cap) {   /* a capture may not wait for work outside it */
        s->cap->invalid = cudaErrorStreamCaptureIsolation;
        s->cap->why = "cudaStreamWaitEvent on an event recorded outside the capture";
        return cudaErrorStreamCaptureIsolation;
    }
    push(s, "cudaStreamWaitEvent", nullptr, {{event->stream, event->seq}});
    return cudaSuccess;
}

static cudaError_t event_run(cudaEvent_t event, const char *call)
{
    LOCK;
    if (cudaError_t e = capture_forbids(call)) return e;
    if (event->stream) run_stream(event->stream, event->seq);
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    LOCK;
    n_syncs++;
    return event_run(event, "cudaEventSynchronize");
}

cudaError_t cudaEventQuery(cudaEvent_t event) { return event_run(event, "cudaEventQuery"); }

/* The host clock when each event's marker ran: work runs one item at a time at the
 * synchronisation points, so this is the emulated work's own time, serialised; no
 * GPU timing can be read from it (docs/CUDA.md). */
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    LOCK;
    if (!start->timing || !end->timing || start->cap || end->cap) return cudaErrorInvalidResourceHandle;
    if (!start->when || !end->when) return cudaErrorInvalidResourceHandle;   /* never recorded */
    if (*start->when < 0 || *end->when < 0) return cudaErrorNotReady;
    *ms = (float)(*end->when - *start->when);
    return cudaSuccess;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    if (leastPriority) *leastPriority = 0;   /* as an H100 */
    if (greatestPriority) *greatestPriority = -5;
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
{
    LOCK;
    cudaError_t e = cudaStreamCreateWithFlags(pStream, flags);
    (*pStream)->priority = priority > 0 ? 0 : priority < -5 ? -5 : priority;   /* clamped, as the driver */
    return e;
}

cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int *priority)
{
    LOCK;
    *priority = S(hStream)->priority;
    return cudaSuccess;
}

// ---- graphs: stream capture, instantiation, replay

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    LOCK;
    CUstream_st *s = S(stream);
    if (s->legacy) return cudaErrorStreamCaptureUnsupported;   /* the legacy stream cannot be captured */
    if (s->cap) return cudaErrorIllegalState;
    CUgraph_st *g = new CUgraph_st;
    g->origin = s;
    g->global = mode != cudaStreamCaptureModeRelaxed;
    s->cap = g;
    s->cap_tail.clear();
    if (g->global) capturing.insert(g);
    return cudaSuccess;
}

/* Every stream that forked from the origin must have joined it again: its last node is
 * an ancestor of (or one of) the origin's tail; else cudaErrorStreamCaptureUnjoined. */
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
    LOCK;
    CUstream_st *s = S(stream);
    *pGraph = nullptr;
    if (!s->cap) return cudaErrorIllegalState;
    CUgraph_st *g = s->cap;
    if (g->origin != s) return cudaErrorStreamCaptureUnmatched;
    std::vector<char> reach(g->nodes.size(), 0);
    std::vector<int> todo(s->cap_tail);
    while (!todo.empty()) {
        int i = todo.back();
        todo.pop_back();
        if (reach[(size_t)i]) continue;
        reach[(size_t)i] = 1;
        for (int d : g->nodes[(size_t)i].deps) todo.push_back(d);
    }
    bool unjoined = false;
    for (CUstream_st *o : streams) {
        if (o == s || o->cap != g) continue;
        for (int t : o->cap_tail) unjoined |= !reach[(size_t)t];
        o->cap = nullptr;
        o->cap_tail.clear();
    }
    s->cap = nullptr;
    s->cap_tail.clear();
    capturing.erase(g);
    if (g->invalid != cudaSuccess || unjoined) {
        if (unjoined && g->invalid == cudaSuccess) g->why = "a stream forked from the capture did not join it";
        fprintf(stderr, "cudaemu: stream capture invalidated: %s\n", g->why.c_str());
        cudaError_t e = unjoined && g->invalid == cudaSuccess ? cudaErrorStreamCaptureUnjoined : g->invalid;
        delete g;
        return e;
    }
    g->ended = true;
    *pGraph = g;
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus)
{
    LOCK;
    CUstream_st *s = S(stream);
    *pCaptureStatus = !s->cap ? cudaStreamCaptureStatusNone
                      : s->cap->invalid != cudaSuccess ? cudaStreamCaptureStatusInvalidated
                                                       : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long)
{
    LOCK;
    if (!graph || !graph->ended) return cudaErrorInvalidValue;
    if (cudaError_t e = capture_forbids("cudaGraphInstantiate")) return e;
    *pGraphExec = new CUgraphExec_st{graph->nodes};
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    LOCK;
    if (!graphExec) return cudaErrorInvalidValue;
    CUstream_st *s = S(stream);
    if (s->cap) return cudaErrorStreamCaptureUnsupported;
    CUgraphExec_st *x = graphExec;
    n_launches++;
    push(s, "cudaGraphLaunch", [x]() { run_graph(x->nodes); });
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
    LOCK;
    run_all();   /* a launch still queued keeps using it */
    delete graphExec;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    delete graph;
    return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
    LOCK;
    push(S(stream), "cudaLaunchHostFunc", [fn, userData]() { fn(userData); });
    return cudaSuccess;
}

}   // extern "C"
