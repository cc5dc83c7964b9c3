// defines: the emulation's launcher: threads of a block, launch limits, block order, checked barriers.
// The emulation's launcher (see cuda_emu.h): the thread pool, the launch-limit checks against the
// real build's ptxas figures, the block order (in order, or shuffled and concurrent), and the
// barriers of blocks and warps, which check that every thread arrives at the same one and report
// a barrier that can never complete instead of hanging.
#include "kernels/cuda/emu/cuda_emu.h"

extern "C" {
#include "common/num.h"
}

#include <cxxabi.h>
#include <sys/mman.h>
#include <ucontext.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#include <algorithm>
#include <atomic>
#include <barrier>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

namespace mhe_emu {

// ---- the pool ----
// Emulated CUDA threads are pooled: creating (and, under ASan, instrumenting) an OS thread per
// CUDA thread per launch cost milliseconds per launch.  The pool is process-wide, as the device
// it stands for is; launches are serialised (one stream), so one job runs at a time.
class ThreadPool {
  public:
    ~ThreadPool() {
        {
            std::lock_guard<std::mutex> lock(mu_);
            stop_ = true;
        }
        wake_.notify_all();
        for (auto &t : workers_) t.join();
    }
    // Runs job(0 .. n-1) on n distinct threads concurrently; returns when all have finished.
    void run(int n, const std::function<void(int)> &job) {
        std::lock_guard<std::mutex> serial(launch_mu_);
        std::unique_lock<std::mutex> lock(mu_);
        while ((int)workers_.size() < n) {
            int id = (int)workers_.size();
            workers_.emplace_back([this, id] { worker(id); });
        }
        job_ = &job;
        job_threads_ = n;
        remaining_ = n;
        generation_++;
        wake_.notify_all();
        done_.wait(lock, [this] { return remaining_ == 0; });
        job_ = nullptr;
    }

  private:
    void worker(int id) {
        uint64_t seen = 0;
        std::unique_lock<std::mutex> lock(mu_);
        for (;;) {
            wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
            if (id >= job_threads_) continue;
            const std::function<void(int)> *job = job_;
            lock.unlock();
            (*job)(id);
            lock.lock();
            if (--remaining_ == 0) done_.notify_one();
        }
    }
    std::mutex launch_mu_, mu_;
    std::condition_variable wake_, done_;
    std::vector<std::thread> workers_;
    const std::function<void(int)> *job_ = nullptr;
    int job_threads_ = 0, remaining_ = 0;
    uint64_t generation_ = 0;
    bool stop_ = false;
};

static ThreadPool &pool() {
    static ThreadPool p;
    return p;
}

// ---- messages ----
void kernel_fail(const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const ThreadState &s = self;
    std::fprintf(stderr, "cuda_emu: kernel %s, block (%u,%u,%u), thread (%u,%u,%u): %s\n",
                 s.kernel ? s.kernel : "?", s.block_idx.x, s.block_idx.y, s.block_idx.z, s.thread_idx.x,
                 s.thread_idx.y, s.thread_idx.z, msg);
    std::fflush(stderr);
    std::abort();
}
[[noreturn]] static void launch_fail(const char *kernel, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void launch_fail(const char *kernel, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    std::fprintf(stderr, "cuda_emu: launch of %s: %s\n", kernel, msg);
    std::fflush(stderr);
    std::abort();
}

// ---- ptxas figures ----
// Registers per thread and static shared bytes of every kernel of the real build, per
// architecture, from ptxas -v (cuda.cmake generates ptxas_table.inc while building mhecuda).
struct PtxasEntry {
    const char *mangled;
    int arch, registers, shared;
};
static const PtxasEntry ptxas_table[] = {
#include "ptxas_table.inc"
    {nullptr, 0, 0, 0}};

constexpr int N_ARCH = 2;
static const int arch_sm[N_ARCH] = {80, 90};
// Opt-in shared memory per block (cudaDevAttrMaxSharedMemoryPerBlockOptin): 163 KB, 227 KB.
static const size_t arch_optin[N_ARCH] = {166912, 232448};
struct Resources {
    int registers[N_ARCH] = {0, 0}, shared[N_ARCH] = {0, 0};
};

static std::string strip_spaces(const std::string &s) {
    std::string out;
    for (char c : s)
        if (c != ' ') out += c;
    return out;
}
// "void name<args>(params)" -> "name<args>", without spaces (the two spellings differ in them).
static std::string demangled_name(const char *mangled) {
    int status = 0;
    char *d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
    if (status != 0 || !d) return mangled;
    std::string s(d);
    std::free(d);
    int depth = 0;
    size_t start = 0, end = s.size();
    for (size_t i = 0; i < s.size(); i++) {
        if (s[i] == '<') depth++;
        else if (s[i] == '>') depth--;
        else if (depth == 0 && s[i] == ' ') start = i + 1;
        else if (depth == 0 && s[i] == '(') {
            end = i;
            break;
        }
    }
    return strip_spaces(s.substr(start, end - start));
}

std::string kernel_name_from(const char *pretty) {
    // "const char* mhe_emu::kernel_name() [with auto F = NAME]"
    std::string s(pretty);
    size_t at = s.find("F = ");
    if (at == std::string::npos) return s;
    std::string name = s.substr(at + 4, s.rfind(']') - (at + 4));
    if (!name.empty() && name[0] == '&') name.erase(0, 1);
    return strip_spaces(name);
}

static std::mutex res_mu;
static std::unordered_map<std::string, Resources> &resource_map() {
    static std::unordered_map<std::string, Resources> m = [] {
        std::unordered_map<std::string, Resources> r;
        for (const PtxasEntry *e = ptxas_table; e->mangled; e++)
            for (int a = 0; a < N_ARCH; a++)
                if (e->arch == arch_sm[a]) {
                    Resources &x = r[demangled_name(e->mangled)];
                    // Two overloads of one name: the larger figures.
                    x.registers[a] = std::max(x.registers[a], e->registers);
                    x.shared[a] = std::max(x.shared[a], e->shared);
                }
        return r;
    }();
    return m;
}
void set_resources(const char *name, int registers, int static_shared_bytes) {
    std::lock_guard<std::mutex> lock(res_mu);
    Resources &r = resource_map()[strip_spaces(name)];
    for (int a = 0; a < N_ARCH; a++) {
        r.registers[a] = registers;
        r.shared[a] = static_shared_bytes;
    }
}

static std::mutex smem_mu;
static std::unordered_map<const void *, size_t> smem_limit;  // kernels opted in past 48 KB

cudaError_t func_set_attribute(const void *kernel, cudaFuncAttribute attr, int value) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || value > (int)arch_optin[N_ARCH - 1])
        return cudaErrorInvalidValue;
    std::lock_guard<std::mutex> lock(smem_mu);
    smem_limit[kernel] = (size_t)value;
    return cudaSuccess;
}

// The launch against the limits of every architecture the real build targets: a launch that
// fails on either fails here.
static void check_launch(const void *kernel, const char *name, const char *file, dim3 grid, dim3 block,
                         size_t dynamic_bytes) {
    const long long threads = (long long)block.x * block.y * block.z;
    if (block.x < 1 || block.y < 1 || block.z < 1 || block.x > 1024 || block.y > 1024 || block.z > 64 ||
        threads > 1024)
        launch_fail(name, "block (%u,%u,%u): at most 1024 threads, x, y <= 1024, z <= 64, none 0", block.x, block.y,
                    block.z);
    if (grid.x < 1 || grid.y < 1 || grid.z < 1 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535)
        launch_fail(name, "grid (%u,%u,%u): x in [1, 2^31-1], y and z in [1, 65535]", grid.x, grid.y, grid.z);
    Resources r;
    {
        std::lock_guard<std::mutex> lock(res_mu);
        auto &m = resource_map();
        auto it = m.find(name);
        if (it != m.end()) r = it->second;
        else if (std::strstr(file, "kernels/cuda/"))
            launch_fail(name, "no ptxas figures for this kernel (ptxas_table.inc from the sm_80/sm_90 build of "
                              "mhecuda lacks it)");
    }
    size_t opted = 0;
    bool opted_in = false;
    {
        std::lock_guard<std::mutex> lock(smem_mu);
        auto it = smem_limit.find(kernel);
        if (it != smem_limit.end()) opted_in = true, opted = it->second;
    }
    const int warps = (int)((threads + WARP - 1) / WARP);
    for (int a = 0; a < N_ARCH; a++) {
        const size_t total = dynamic_bytes + (size_t)r.shared[a];
        if (!opted_in && total > 48 * 1024)
            launch_fail(name, "%zu B of dynamic + %d B of static shared memory exceed 48 KB (sm_%d) without "
                              "cudaFuncSetAttribute(MaxDynamicSharedMemorySize) first", dynamic_bytes, r.shared[a],
                        arch_sm[a]);
        if (opted_in && dynamic_bytes > opted)
            launch_fail(name, "%zu B of dynamic shared memory, more than the %zu B it opted in to", dynamic_bytes,
                        opted);
        if (total > arch_optin[a])
            launch_fail(name, "%zu B of dynamic + %d B of static shared memory exceed sm_%d's %zu B per block",
                        dynamic_bytes, r.shared[a], arch_sm[a], arch_optin[a]);
        // Registers are allocated per warp in units of 256 (8 per thread).
        const long long regs = (long long)warps * WARP * ((r.registers[a] + 7) / 8 * 8);
        if (regs > 65536)
            launch_fail(name, "%d registers x %lld threads need %lld registers (sm_%d), more than a block's 65536",
                        r.registers[a], threads, regs, arch_sm[a]);
    }
}


// ---- fibers ----
// The threads of a launch run as fibers on the launching thread, each until its next barrier, in
// turn (with MHE_EMU_SHUFFLE, the concurrent blocks' threads interleaved).  A barrier is a count
// and a jump instead of a futex wake-up of up to 1024 OS threads, which on a two-core machine was
// most of the emulation's time and grew with every other process.  The order between barriers
// is fixed, which a GPU's is not: data races are ThreadSanitizer's to find, on OS threads (the
// tsan build never uses fibers).
#if defined(__SANITIZE_THREAD__)
constexpr bool kFibers = false;
#else
constexpr bool kFibers = true;
#endif
enum FiberState { F_RUN, F_BLOCK, F_WARP, F_DONE };
// 64 KB each: an ASan frame of the tensor-core kernels (wmma fragments of 1 KB per lane, the
// emulation's) uses a few tens; a guard page below each stops an overflow.
constexpr size_t FIBER_STACK = 64 * 1024;
struct Fiber {
    void *jb[5];    // where it waits (__builtin_setjmp's buffer)
    ucontext_t ctx;  // its first entry
    ThreadState st;
    FiberState state;
    bool started;
};
struct FiberRun {
    void *jb[5];  // the scheduler's
    std::vector<Fiber> f;
    const std::function<void(int)> *job;
    int current;
    const void *sched_bottom;  // the launching thread's stack (ASan's switch annotations)
    size_t sched_size;
};
static thread_local FiberRun *fiber_now = nullptr;
static thread_local std::vector<unsigned char *> fiber_stacks;  // each above its guard page

static void *fiber_stack(int i) {
    while ((int)fiber_stacks.size() <= i) {
        void *m = mmap(nullptr, FIBER_STACK + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
        if (m == MAP_FAILED) {
            std::fprintf(stderr, "cuda_emu: no memory for a fiber stack\n");
            std::abort();
        }
        mprotect(m, 4096, PROT_NONE);
        fiber_stacks.push_back(static_cast<unsigned char *>(m) + 4096);
    }
    return fiber_stacks[i];
}

// Switches are GCC's __builtin_setjmp / __builtin_longjmp: registers and a jump, where
// swapcontext's signal-mask system call and ASan's clearing of the whole target stack's shadow
// took most of the time.  A fiber's first entry is setcontext (once per launch), after its stack's
// shadow is cleared of the last launch's frames.  The two switching functions are not
// instrumented: ASan's handling of a no-return call (its alternate-stack system call and a
// clearing of the stack below) before every jump was the next largest cost, and a switch leaves
// no frame to clean (the fiber resumes it).
static void fiber_main();
__attribute__((noinline, no_sanitize_address)) static void fiber_enter(FiberRun &r, int t) {
    r.current = t;
    self = r.f[t].st;
#if defined(__SANITIZE_ADDRESS__)
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, fiber_stack(t), FIBER_STACK);
#endif
    if (__builtin_setjmp(r.jb) == 0) {
        if (!r.f[t].started) {
            r.f[t].started = true;
#if defined(__SANITIZE_ADDRESS__)
            ASAN_UNPOISON_MEMORY_REGION(fiber_stack(t), FIBER_STACK);
#endif
            setcontext(&r.f[t].ctx);
        }
        __builtin_longjmp(r.f[t].jb, 1);
    }
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    r.f[r.current].st = self;
}
// From the running fiber back to the scheduler (`ending`: never to return).
__attribute__((noinline, no_sanitize_address)) static void fiber_leave(FiberRun &r, bool ending) {
    Fiber &me = r.f[r.current];
#if defined(__SANITIZE_ADDRESS__)
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(ending ? nullptr : &fake, r.sched_bottom, r.sched_size);
#endif
    if (ending) __builtin_longjmp(r.jb, 1);
    if (__builtin_setjmp(me.jb) == 0) __builtin_longjmp(r.jb, 1);
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_finish_switch_fiber(fake, &r.sched_bottom, &r.sched_size);
#endif
}
static void fiber_main() {
    FiberRun &r = *fiber_now;
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_finish_switch_fiber(nullptr, &r.sched_bottom, &r.sched_size);
#endif
    (*r.job)(r.current);
    r.f[r.current].state = F_DONE;
    fiber_leave(r, true);
}
static void fiber_wait(FiberState st) {
    FiberRun &r = *fiber_now;
    r.f[r.current].state = st;
    fiber_leave(r, false);
}

// ---- block order ----
// MHE_EMU_SHUFFLE=SEED (an integer): every launch runs its blocks in an order drawn from SEED
// and the launch count, MHE_EMU_CONCURRENT_BLOCKS (default 2) of them at a time, so blocks that
// depend on each other's order or race on the same memory disagree between runs or fail.
// Unset: one block at a time, in order.
struct Order {
    bool shuffle;
    long long seed;
    int concurrent;
};
static const Order &order() {
    static const Order o = [] {
        Order r{false, 0, 1};
        const char *e = std::getenv("MHE_EMU_SHUFFLE");
        if (!e) return r;
        if (mhe_parse_int(e, 0, 1LL << 62, &r.seed) != MHE_NUM_OK) {
            std::fprintf(stderr, "cuda_emu: MHE_EMU_SHUFFLE=%s is not a non-negative integer\n", e);
            std::exit(2);
        }
        r.shuffle = true;
        long long k = 2;
        const char *c = std::getenv("MHE_EMU_CONCURRENT_BLOCKS");
        if (c && mhe_parse_int(c, 1, 16, &k) != MHE_NUM_OK) {
            std::fprintf(stderr, "cuda_emu: MHE_EMU_CONCURRENT_BLOCKS=%s is not an integer in [1, 16]\n", c);
            std::exit(2);
        }
        r.concurrent = (int)k;
        return r;
    }();
    return o;
}
static std::atomic<uint64_t> launches{0};

// ---- blocks and their barriers ----
// What each thread of a block arrived at last, and its progress as one word other threads can
// read at any time: its state and how many block and warp barriers it has arrived at.
struct Arrival {
    Arrive what;
    const char *file;
    unsigned line;
};
enum : uint64_t { RUNNING = 0, WAIT_BLOCK = 1, WAIT_WARP = 2 };
static inline uint64_t progress_word(uint64_t state, int block_phase, int warp_phase) {
    return state << 62 | (uint64_t)(block_phase & 0x7fffffff) << 31 | (uint64_t)(warp_phase & 0x7fffffff);
}
static inline uint64_t p_state(uint64_t p) { return p >> 62; }
static inline int p_block(uint64_t p) { return (int)(p >> 31 & 0x7fffffff); }
static inline int p_warp(uint64_t p) { return (int)(p & 0x7fffffff); }

static const char *arrival_text(const Arrival &a, char *buf, size_t n) {
    static const char *what[] = {"__syncthreads", "return", "a shuffle", "__syncwarp"};
    if (a.what == ARRIVE_EXIT) std::snprintf(buf, n, "had returned");
    else std::snprintf(buf, n, "is at %s (%s:%u)", what[a.what], a.file, a.line);
    return buf;
}

struct Block;
// Run once per barrier completion, by the last thread to arrive, before any is released.
struct BlockCheck {
    Block *b;
    void operator()() noexcept;
};
struct WarpCheck {
    Block *b;
    int warp;
    void operator()() noexcept;
};

// Shared memory is filled with 0xff bytes (NaN as fp32 and bf16) when a block starts, as
// uninitialised memory on a GPU holds whatever the last block left: a kernel reading shared
// memory it did not write fails its parity test.
// Static shared variables get offsets in one area per running block, in the order their
// declarations are first reached; 48 KB holds every kernel's (a kernel may have at most that).
constexpr size_t STATIC_SHARED = 48 * 1024;
static std::mutex shared_mu;
static size_t shared_used;
SharedVar::SharedVar(size_t bytes, size_t align) {
    std::lock_guard<std::mutex> lock(shared_mu);
    offset = (shared_used + align - 1) / align * align;
    if (offset + bytes > STATIC_SHARED) {
        std::fprintf(stderr, "cuda_emu: the __shared__ variables of all kernels exceed %zu B\n", STATIC_SHARED);
        std::abort();
    }
    shared_used = offset + bytes;
}
struct Block {
    const char *kernel;
    int n;
    std::barrier<BlockCheck> sync;
    std::vector<std::unique_ptr<std::barrier<WarpCheck>>> warp_sync;
    std::vector<Warp> warps;
    std::vector<Arrival> arrivals;
    // One cache line each: every arrival stores its own.
    struct alignas(64) Progress {
        std::atomic<uint64_t> word{0};
    };
    // Per warp, how many lanes wait at (or are just leaving) a warp / block barrier: only when the
    // other kind is non-zero can a lane's barrier be one that never completes, so only then are
    // the warp-mates' words read.
    struct alignas(64) WarpWaits {
        std::atomic<int> at_warp{0}, at_block{0};
    };
    std::unique_ptr<Progress[]> progress;
    std::unique_ptr<WarpWaits[]> waits;
    size_t dynamic_bytes;
    unsigned char *dynamic_shared, *static_shared;
    Block(const char *k, int threads, size_t dyn)
        : kernel(k), n(threads), sync(threads, BlockCheck{this}), warps((threads + WARP - 1) / WARP),
          arrivals(threads), progress(new Progress[threads]), waits(new WarpWaits[(threads + WARP - 1) / WARP]),
          dynamic_bytes(dyn) {
        for (int w = 0; w < (int)warps.size(); w++) {
            const int lanes = n - w * WARP < WARP ? n - w * WARP : WARP;
            warp_sync.push_back(std::make_unique<std::barrier<WarpCheck>>(lanes, WarpCheck{this, w}));
        }
        // The real build aligns dynamic shared memory to 128 bytes (cuda_compat.h).
        const size_t bytes = (dyn + 127) / 128 * 128 + STATIC_SHARED;
        mem_ = static_cast<unsigned char *>(std::aligned_alloc(128, bytes));
        dynamic_shared = mem_;
        static_shared = mem_ + (dyn + 127) / 128 * 128;
        poison();
    }
    ~Block() { std::free(mem_); }
    void poison() {
        std::memset(dynamic_shared, 0xff, dynamic_bytes);
        size_t used;
        {
            std::lock_guard<std::mutex> lock(shared_mu);
            used = shared_used;
        }
        std::memset(static_shared, 0xff, used);
    }

  private:
    unsigned char *mem_;
};

static bool same_site(const Arrival &a, const Arrival &b) {
    return a.what == b.what && (a.what == ARRIVE_EXIT || a.what == ARRIVE_SYNCWARP ||
                                (a.line == b.line && std::strcmp(a.file, b.file) == 0));
}

// Every thread of the block at the same __syncthreads, or all returned (the block's end).
void BlockCheck::operator()() noexcept {
    const Arrival &first = b->arrivals[0];
    for (int t = 1; t < b->n; t++) {
        const Arrival &a = b->arrivals[t];
        if (same_site(a, first)) continue;
        int same = 0;
        for (int u = 0; u < b->n; u++) same += same_site(b->arrivals[u], first);
        char x[300], y[300];
        kernel_fail("__syncthreads reached by part of the block: thread 0 %s, as %d of %d threads; thread %d %s",
                    arrival_text(first, x, sizeof x), same, b->n, t, arrival_text(a, y, sizeof y));
    }
    if (first.what == ARRIVE_EXIT) b->poison();  // the next block's shared memory
}

// Every lane of the warp at the same shuffle, or at a __syncwarp (sm_70 and later allow
// different ones).
void WarpCheck::operator()() noexcept {
    const int lo = warp * WARP, hi = std::min(lo + WARP, b->n);
    const Arrival &first = b->arrivals[lo];
    for (int t = lo + 1; t < hi; t++) {
        const Arrival &a = b->arrivals[t];
        if (same_site(a, first)) continue;
        char x[300], y[300];
        kernel_fail("warp %d's lanes at different warp operations: lane 0 %s, lane %d %s", warp,
                    arrival_text(first, x, sizeof x), t - lo, arrival_text(a, y, sizeof y));
    }
}

// A barrier that cannot complete: a warp-mate waits at a warp barrier this thread will not
// reach before the block barrier it is arriving at (or the mate waits at a block barrier and
// this thread at a warp barrier the mate has not reached).  Either arrival sees the other, as
// both publish before they look (sequentially consistent).
static void check_mates(Block &b, const ThreadState &s, bool at_block) {
    const int lo = s.linear / WARP * WARP, hi = std::min(lo + WARP, b.n);
    for (int m = lo; m < hi; m++) {
        if (m == s.linear) continue;
        const uint64_t p = b.progress[m].word.load();
        const bool stuck = at_block
                               ? p_state(p) == WAIT_WARP && p_warp(p) > s.warp_phase && p_block(p) < s.block_phase
                               : p_state(p) == WAIT_BLOCK && p_block(p) > s.block_phase && p_warp(p) < s.warp_phase;
        if (!stuck) continue;
        char x[300], y[300];
        kernel_fail("a warp barrier that cannot complete: lane %d %s while lane %d %s", s.lane,
                    arrival_text(b.arrivals[s.linear], x, sizeof x), m - lo, arrival_text(b.arrivals[m], y, sizeof y));
    }
}

void block_arrive(Arrive what, const char *file, unsigned line) {
    ThreadState &s = self;
    Block &b = *s.block;
    Block::WarpWaits &w = b.waits[s.linear / WARP];
    s.block_phase++;
    b.arrivals[s.linear] = Arrival{what, file, line};
    if (fiber_now) return fiber_wait(F_BLOCK);
    b.progress[s.linear].word.store(progress_word(WAIT_BLOCK, s.block_phase, s.warp_phase));
    w.at_block.fetch_add(1);
    if (w.at_warp.load() > 0) check_mates(b, s, true);
    b.sync.arrive_and_wait();
    w.at_block.fetch_sub(1);
    b.progress[s.linear].word.store(progress_word(RUNNING, s.block_phase, s.warp_phase));
}

void warp_arrive(Arrive what, const char *file, unsigned line) {
    ThreadState &s = self;
    Block &b = *s.block;
    Block::WarpWaits &w = b.waits[s.linear / WARP];
    s.warp_phase++;
    b.arrivals[s.linear] = Arrival{what, file, line};
    if (fiber_now) return fiber_wait(F_WARP);
    b.progress[s.linear].word.store(progress_word(WAIT_WARP, s.block_phase, s.warp_phase));
    w.at_warp.fetch_add(1);
    if (w.at_block.load() > 0) check_mates(b, s, false);
    b.warp_sync[s.linear / WARP]->arrive_and_wait();
    w.at_warp.fetch_sub(1);
    b.progress[s.linear].word.store(progress_word(RUNNING, s.block_phase, s.warp_phase));
}


// getcontext returns twice (as setjmp): alone in its frame, no local of the caller's is at risk.
__attribute__((noinline)) static void fiber_init(Fiber &f, int t, const ThreadState &host) {
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = fiber_stack(t);
    f.ctx.uc_stack.ss_size = FIBER_STACK;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, fiber_main, 0);
    f.st = host;
    f.state = F_RUN;
    f.started = false;
}

// The threads of every block slot as fibers (slot s: fibers s·n .. s·n + n − 1, with the
// threaded launch's numbering): each runs until it waits or ends, the slots' threads in turn, so
// concurrent blocks (MHE_EMU_SHUFFLE) interleave at every barrier.  A barrier every thread of a
// slot (block) or lane of a warp waits at is checked, as the threaded barriers' completion step
// does, and released.  Nothing runnable and nothing to release: a barrier that cannot complete.
static void fiber_run_blocks(const std::vector<std::unique_ptr<Block>> &blocks, int n,
                             const std::function<void(int)> &job) {
    const int slots = (int)blocks.size(), total = n * slots, warps = (n + WARP - 1) / WARP;
    FiberRun r;
    r.f.resize(total);
    r.job = &job;
    r.current = -1;
    r.sched_bottom = nullptr;
    r.sched_size = 0;
    FiberRun *outer = fiber_now;
    const ThreadState host = self;
    fiber_now = &r;
    for (int t = 0; t < total; t++) fiber_init(r.f[t], t, host);
    for (int done = 0;;) {
        bool progress = false;
        for (int t = 0; t < total; t++)
            if (r.f[t].state == F_RUN) {
                fiber_enter(r, t);
                progress = true;
                done += r.f[t].state == F_DONE;
            }
        if (done == total) break;
        for (int sl = 0; sl < slots; sl++) {
            Fiber *f = &r.f[(size_t)sl * n];
            Block &b = *blocks[sl];
            int at_block = 0;
            for (int t = 0; t < n; t++) at_block += f[t].state == F_BLOCK;
            if (at_block == n) {
                self = f[n - 1].st;  // the messages name the last to arrive, as a thread's would
                BlockCheck{&b}();
                for (int t = 0; t < n; t++) f[t].state = F_RUN;
                progress = true;
                continue;
            }
            for (int w = 0; w < warps; w++) {
                const int lo = w * WARP, hi = std::min(lo + WARP, n);
                bool all = true;
                for (int t = lo; t < hi && all; t++) all = f[t].state == F_WARP;
                if (!all) continue;
                self = f[hi - 1].st;
                WarpCheck{&b, w}();
                for (int t = lo; t < hi; t++) f[t].state = F_RUN;
                progress = true;
            }
        }
        if (progress) continue;
        // Stuck: a lane waits at a warp barrier that a warp-mate waiting at a block barrier (or
        // done with the block) will not reach.
        for (int t = 0; t < total; t++) {
            if (r.f[t].state != F_WARP) continue;
            const int base = t / n * n, lo = base + (t - base) / WARP * WARP, hi = std::min(lo + WARP, base + n);
            const Block &b = *blocks[t / n];
            for (int m = lo; m < hi; m++)
                if (r.f[m].state == F_BLOCK) {
                    self = r.f[t].st;
                    char x[300], y[300];
                    kernel_fail("a warp barrier that cannot complete: lane %d %s while lane %d %s", t - lo,
                                arrival_text(b.arrivals[t - base], x, sizeof x), m - lo,
                                arrival_text(b.arrivals[m - base], y, sizeof y));
                }
        }
        kernel_fail("no barrier of a block can complete (%d threads in %d block(s))", total, slots);
    }
    fiber_now = outer;
    self = host;
}

void launch(const void *kernel, const char *name, const char *file, dim3 grid, dim3 block,
            size_t dynamic_shared_bytes, const std::function<void()> &body) {
    check_launch(kernel, name, file, grid, block, dynamic_shared_bytes);
    const int n = (int)(block.x * block.y * block.z);
    const size_t n_blocks = (size_t)grid.x * grid.y * grid.z;
    std::vector<size_t> seq(n_blocks);
    for (size_t i = 0; i < n_blocks; i++) seq[i] = i;
    const Order &o = order();
    const uint64_t launch_no = launches.fetch_add(1);
    int slots = 1;
    if (o.shuffle) {
        std::mt19937_64 rng((uint64_t)o.seed * 0x9E3779B97F4A7C15ull + launch_no);
        std::shuffle(seq.begin(), seq.end(), rng);
        slots = (int)std::min<size_t>((size_t)o.concurrent, n_blocks);
    }
    std::vector<std::unique_ptr<Block>> blocks;
    for (int sl = 0; sl < slots; sl++) blocks.push_back(std::make_unique<Block>(name, n, dynamic_shared_bytes));
    // Slot s runs blocks seq[s], seq[s + slots], ...; its threads walk them together, a barrier
    // after each keeps its blocks from overlapping (their shared memory is the slot's).
    std::function<void(int)> thread_main = [&](int id) {
        const int sl = id / n, linear = id % n;
        Block &blk = *blocks[sl];
        ThreadState &s = self;
        s.block = &blk;
        s.kernel = name;
        s.block_dim = block;
        s.grid_dim = grid;
        s.linear = linear;
        s.lane = linear % WARP;
        s.warp = &blk.warps[linear / WARP];
        s.shuffle_phase = 0;
        s.block_phase = s.warp_phase = 0;
        s.dynamic_shared = blk.dynamic_shared;
        s.static_shared = blk.static_shared;
        s.thread_idx = uint3{(unsigned)linear % block.x, (unsigned)(linear / block.x) % block.y,
                             (unsigned)(linear / (block.x * block.y))};
        for (size_t i = (size_t)sl; i < n_blocks; i += (size_t)slots) {
            const size_t b = seq[i];
            s.block_idx = uint3{(unsigned)(b % grid.x), (unsigned)(b / grid.x % grid.y),
                                (unsigned)(b / ((size_t)grid.x * grid.y))};
            body();
            block_arrive(ARRIVE_EXIT, nullptr, 0);
        }
        s.block = nullptr;
        s.kernel = nullptr;
    };
    if (kFibers && !fiber_now) fiber_run_blocks(blocks, n, thread_main);
    else pool().run(n * slots, thread_main);
}

}  // namespace mhe_emu

int mhe_emu_block_threads(void) {
    static const int threads = [] {
        const char *e = std::getenv("MHE_EMU_BLOCK");
        long long t = 64;
        if (e && (mhe_parse_int(e, 32, 1024, &t) != MHE_NUM_OK || t % 32)) {
            std::fprintf(stderr, "cuda_emu: MHE_EMU_BLOCK=%s is not a multiple of 32 in [32, 1024]\n", e);
            std::abort();
        }
        return (int)t;
    }();
    return threads;
}
