/* gcemu.h — a small SIMT emulator: runs CUDA kernels on the CPU, for tests.
 *
 * The shim headers beside this one (cuda_runtime.h, cublasLt.h, cuda_bf16.h,
 * mma.h for nvcuda::wmma, gcemu_ptx.h for the PTX of runtime/cuda/gc_mma.h:
 * mma.sync, ldmatrix, cp.async) stand in for the CUDA toolkit's, so runtime/cuda/kernels_cuda.cu compiles
 * unchanged as C++ (g++ -x c++ -DGCEMU is implied by including them).
 *
 * Execution model
 *   - A launch runs its blocks one at a time, in an order chosen by
 *     gcemu_set_order (default: a seeded shuffle), on the calling OS thread.
 *   - Each thread of a block is a cooperative fiber: its own stack, entered
 *     and left through a context switch (a 20-instruction one on x86-64,
 *     makecontext/swapcontext elsewhere or with -DGCEMU_UCONTEXT; swapcontext
 *     makes a system call per switch, ~30x slower). A fiber runs
 *     until it reaches a barrier or returns; the scheduler then runs the next
 *     runnable fiber (in forward, reverse or shuffled order). So any data race
 *     the kernel has between two barriers shows up as an order-dependent
 *     result, and the tests run every kernel under several orders.
 *   - __syncthreads() is a barrier of the block's fibers; warp operations
 *     (__shfl_*_sync, __syncwarp, __ballot_sync) are a barrier of the 32
 *     fibers of one warp with an exchange slot per lane.
 *   - Strict where CUDA is undefined: a __syncthreads that some threads of the
 *     block have exited before, a warp operation after some lanes of the warp
 *     exited, a partial mask, a barrier that can never complete (deadlock) or
 *     a bad launch configuration (0 or too many threads/blocks) aborts with
 *     the kernel's name and launch site.
 *   - __shared__ is `static`: one instance per kernel (per template instance),
 *     shared by the block's fibers. Since blocks run one after another, this
 *     is exactly per-block shared memory. Dynamic shared memory
 *     (GC_DYN_SHARED) is an arena filled with NaN bytes (0xff) at each block
 *     start, so a read before a write is visible; above 48 KiB a launch
 *     needs cudaFuncSetAttribute(kernel, MaxDynamicSharedMemorySize) first,
 *     as on the GPU (GC_LAUNCH passes the kernel's address).
 *   - Warp-collective PTX (gcemu_ptx.h) exchanges whole register fragments
 *     through warp_gather (one warp barrier); cp.async copies are queued per
 *     thread and land only at that thread's cp.async.wait_group.
 *   - threadIdx/blockIdx/blockDim/gridDim are plain globals that the
 *     scheduler sets before switching to a fiber.
 *   - Atomics are plain read-modify-writes (fibers never switch inside one).
 * Works under AddressSanitizer (fiber switches are annotated).
 */
#ifndef GCEMU_H
#define GCEMU_H

#define GCEMU 1

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#if defined(__x86_64__) && !defined(GCEMU_UCONTEXT)
#define GCEMU_FAST_SWITCH 1
#endif

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>
#include <type_traits>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define GCEMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GCEMU_ASAN 1
#endif
#endif
#ifdef GCEMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

/* ---------------------------------------------------------------- CUDA keywords */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __shared__ static
#define __constant__
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __managed__

struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

inline uint3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
constexpr int warpSize = 32;

/* ---------------------------------------------------------------- the scheduler */
extern "C" void gcemu_fiber_main();   /* a fiber's entry, below */

namespace gcemu {

enum { RUN, WAIT_BLOCK, WAIT_WARP, DONE };
enum { ORDER_FORWARD, ORDER_REVERSE, ORDER_SHUFFLE };

/* A saved execution context. */
struct Ctx {
#ifdef GCEMU_FAST_SWITCH
    void *sp;   /* callee-saved registers, mxcsr and x87 cw are on the stack */
#else
    ucontext_t uc;
#endif
};

struct Fiber {
    Ctx ctx;
    int state;
    uint3 tid;
    void *asan_fake;
};

struct State {
    /* configuration */
    int order = ORDER_SHUFFLE;
    std::mt19937 rng{12345};
    size_t stack_bytes = (size_t)256 << 10;
    /* the running launch */
    const char *kernel = "";
    const char *file = "";
    int line = 0;
    void (*body)(void *) = nullptr;
    void *body_arg = nullptr;
    int nthreads = 0;
    int cur = -1;
    std::vector<Fiber> fibers;
    Ctx sched;
    char *stacks = nullptr;
    size_t stacks_threads = 0;
    std::vector<unsigned char> dyn_shared;
    /* one exchange slot per thread of the block, double-buffered so a warp
     * operation needs one barrier: lanes alternate buffers, and none can
     * reuse a buffer before every lane has passed the next barrier */
    unsigned char xchg[2][1024][8];
    std::vector<unsigned> xphase;
    unsigned char bxchg[2][1024];   /* the same for __syncthreads_count */
    std::vector<unsigned> bphase;
    /* warp_gather's slots: GATHER_BYTES per lane, double-buffered like xchg
     * (the same phase counter, so they interleave with shuffles) */
    unsigned char gather[2][1024][64];
    /* cp.async (gcemu_cp_async): each thread's copies not yet completed, with
     * the group each belongs to; committed / completed group counts */
    struct CpAsync {
        void *dst;
        const void *src;
        int src_bytes, group;
    };
    std::vector<std::vector<CpAsync>> cp_pending;
    std::vector<int> cp_committed, cp_completed;
    /* cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, n) */
    std::vector<std::pair<const void *, int>> dyn_limits;
    const void *fn = nullptr;   /* the running kernel's function (GC_LAUNCH passes it) */
    const void *sched_stack_bottom = nullptr;
    size_t sched_stack_size = 0;
    long launches = 0;
};
inline State st;

[[noreturn]] inline void fail(const char *msg)
{
    fprintf(stderr, "gcemu: %s in kernel %s launched at %s:%d", msg, st.kernel, st.file, st.line);
    if (st.cur >= 0) {
        const Fiber &f = st.fibers[st.cur];
        fprintf(stderr, " (block %u,%u,%u thread %u,%u,%u)", blockIdx.x, blockIdx.y, blockIdx.z,
                f.tid.x, f.tid.y, f.tid.z);
    }
    fprintf(stderr, "\n");
    abort();
}

inline int linear_tid() { return st.cur; }

#ifdef GCEMU_FAST_SWITCH
/* gcemu_switch(&from->sp, to->sp): push the callee-saved registers, mxcsr and
 * the x87 control word, save rsp, load the other stack, pop, return there.
 * Weak, so every translation unit may carry the same copy. */
extern "C" void gcemu_switch(void **from_sp, void *to_sp);
extern "C" void gcemu_fiber_start();
__asm__(".text\n"
        ".weak gcemu_switch\n"
        ".type gcemu_switch,@function\n"
        "gcemu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size gcemu_switch, .-gcemu_switch\n"
        /* a new fiber 'returns' here from its first switch; calls the entry */
        ".weak gcemu_fiber_start\n"
        ".type gcemu_fiber_start,@function\n"
        "gcemu_fiber_start:\n"
        "  call gcemu_fiber_main\n"
        "  ud2\n"
        ".size gcemu_fiber_start, .-gcemu_fiber_start\n");
#endif

inline void ctx_switch(Ctx *from, Ctx *to)
{
#ifdef GCEMU_FAST_SWITCH
    gcemu_switch(&from->sp, to->sp);
#else
    swapcontext(&from->uc, &to->uc);
#endif
}

/* ASan: tell it about each stack switch. */
inline void asan_start(void **save, const void *bottom, size_t size)
{
#ifdef GCEMU_ASAN
    __sanitizer_start_switch_fiber(save, bottom, size);
#else
    (void)save, (void)bottom, (void)size;
#endif
}
inline void asan_finish(void *save, const void **bottom, size_t *size)
{
#ifdef GCEMU_ASAN
    __sanitizer_finish_switch_fiber(save, bottom, size);
#else
    (void)save, (void)bottom, (void)size;
#endif
}

/* Fiber side: block at a barrier until the scheduler releases it. */
inline void wait(int state)
{
    Fiber &f = st.fibers[st.cur];
    f.state = state;
    asan_start(&f.asan_fake, st.sched_stack_bottom, st.sched_stack_size);
    ctx_switch(&f.ctx, &st.sched);
    asan_finish(f.asan_fake, nullptr, nullptr);
}

inline char *stack_of(int i) { return st.stacks + (size_t)i * st.stack_bytes; }

inline void ensure_stacks(int n)
{
    if ((size_t)n <= st.stacks_threads)
        return;
    if (st.stacks)
        munmap(st.stacks, st.stacks_threads * st.stack_bytes);
    st.stacks = (char *)mmap(nullptr, (size_t)n * st.stack_bytes, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (st.stacks == MAP_FAILED)
        fail("cannot map fiber stacks");
    st.stacks_threads = (size_t)n;
}

inline void switch_to(int i)
{
    Fiber &f = st.fibers[i];
    st.cur = i;
    threadIdx = f.tid;
    void *fake = nullptr;
    asan_start(&fake, stack_of(i), st.stack_bytes);
    ctx_switch(&st.sched, &f.ctx);
    asan_finish(fake, nullptr, nullptr);
    st.cur = -1;
}

/* Release the block barrier and the warp barriers that every live fiber has
 * reached. Returns whether any fiber became runnable. */
inline bool release()
{
    int n = st.nthreads, live = 0, at_block = 0, done = 0;
    for (int i = 0; i < n; i++) {
        int s = st.fibers[i].state;
        live += s != DONE;
        done += s == DONE;
        at_block += s == WAIT_BLOCK;
    }
    if (live > 0 && at_block == live) {
        if (done > 0) {
            st.cur = -1;
            fail("__syncthreads() after some threads of the block returned");
        }
        for (int i = 0; i < n; i++)
            st.fibers[i].state = RUN;
        return true;
    }
    bool any = false;
    for (int w = 0; w * 32 < n; w++) {
        int lo = w * 32, hi = std::min(n, lo + 32), wlive = 0, wwait = 0, wdone = 0;
        for (int i = lo; i < hi; i++) {
            int s = st.fibers[i].state;
            wlive += s != DONE;
            wdone += s == DONE;
            wwait += s == WAIT_WARP;
        }
        if (wlive > 0 && wwait == wlive) {
            if (wdone > 0) {
                st.cur = lo;
                fail("warp operation after some lanes of the warp returned");
            }
            for (int i = lo; i < hi; i++)
                st.fibers[i].state = RUN;
            any = true;
        }
    }
    return any;
}

/* Kept out of line: getcontext returns twice, which would put run_block's
 * locals at risk (-Wclobbered). */
__attribute__((noinline)) inline void init_fiber(int i)
{
    Fiber &f = st.fibers[i];
    f.state = RUN;
    f.asan_fake = nullptr;
    st.xphase[i] = 0;
    st.bphase[i] = 0;
    st.cp_pending[i].clear();
    st.cp_committed[i] = st.cp_completed[i] = 0;
#ifdef GCEMU_FAST_SWITCH
    /* what gcemu_switch pops: fp control, r15..rbp, then the return address
     * gcemu_fiber_start, entered with rsp = 0 mod 16 so that its call
     * enters gcemu_fiber_main with the ABI's alignment */
    uint64_t *top = (uint64_t *)(stack_of(i) + st.stack_bytes);
    uint64_t *sp = top - 2 - 8;
    uint32_t mxcsr = 0x1f80, fpucw = 0x037f;
    memcpy(sp, &mxcsr, 4);
    memcpy((char *)sp + 4, &fpucw, 2);
    for (int k = 1; k <= 6; k++)
        sp[k] = 0;
    sp[7] = (uint64_t)(uintptr_t)gcemu_fiber_start;
    sp[8] = 0;
    f.ctx.sp = sp;
#else
    getcontext(&f.ctx.uc);
    f.ctx.uc.uc_stack.ss_sp = stack_of(i);
    f.ctx.uc.uc_stack.ss_size = st.stack_bytes;
    f.ctx.uc.uc_link = nullptr;
    makecontext(&f.ctx.uc, (void (*)())gcemu_fiber_main, 0);
#endif
}

inline void run_block()
{
    int n = st.nthreads;
    std::vector<int> order(n);
    for (int i = 0; i < n; i++)
        order[i] = i;
    for (int i = 0; i < n; i++)
        init_fiber(i);
    if (!st.dyn_shared.empty())
        memset(st.dyn_shared.data(), 0xff, st.dyn_shared.size());
    for (;;) {
        if (st.order == ORDER_REVERSE)
            std::reverse(order.begin(), order.end());
        else if (st.order == ORDER_SHUFFLE)
            std::shuffle(order.begin(), order.end(), st.rng);
        bool ran = false;
        for (int k = 0; k < n; k++) {
            int i = order[k];
            if (st.fibers[i].state == RUN) {
                switch_to(i);
                ran = true;
            }
        }
        bool all_done = true;
        for (int i = 0; i < n; i++)
            all_done &= st.fibers[i].state == DONE;
        if (all_done)
            return;
        if (!release() && !ran)
            fail("deadlock: threads wait at different barriers");
    }
}

template <class F> void call_body(void *p) { (*(F *)p)(); }

} // namespace gcemu

/* A fiber's life: the kernel body, then back to the scheduler for good. */
extern "C" __attribute__((weak, used)) void gcemu_fiber_main()
{
    using namespace gcemu;
    asan_finish(nullptr, &st.sched_stack_bottom, &st.sched_stack_size);
    st.body(st.body_arg);
    if (!st.cp_pending[st.cur].empty())
        fail("a thread returned with cp.async copies it never waited for (cp.async.wait_group)");
    Fiber &f = st.fibers[st.cur];
    f.state = DONE;
    asan_start(nullptr, st.sched_stack_bottom, st.sched_stack_size);
    ctx_switch(&f.ctx, &st.sched);
    fail("a finished fiber was resumed");
}

/* Configure the emulator (tests): fiber order and block order. */
inline void gcemu_set_order(int order, unsigned seed)
{
    gcemu::st.order = order;
    gcemu::st.rng.seed(seed);
}
inline long gcemu_launch_count() { return gcemu::st.launches; }

inline void *gcemu_dyn_shared()
{
    return gcemu::st.dyn_shared.empty() ? nullptr : gcemu::st.dyn_shared.data();
}

/* The kernel's parameters as a tuple (GC_LAUNCH converts its arguments). */
template <class F> struct gcemu_params;
template <class... P> struct gcemu_params<void (*)(P...)> {
    typedef std::tuple<std::decay_t<P>...> type;
};

/* The launch: every block of `grid`, each as `block` fibers running body(). */
namespace gcemu {
/* the largest dynamic shared memory a launch of fn may ask for: 48 KiB, or
 * what cudaFuncSetAttribute set (sm_90's limit is 227 KiB, checked there) */
inline size_t dyn_limit(const void *fn)
{
    for (auto &e : st.dyn_limits)
        if (e.first == fn)
            return (size_t)e.second;
    return 48 * 1024;
}
} // namespace gcemu

template <class F>
void gcemu_launch(const char *kernel, dim3 grid, dim3 block, size_t shmem, F body,
                  const char *file, int line, const void *fn = nullptr)
{
    using namespace gcemu;
    st.kernel = kernel;
    st.fn = fn;
    st.file = file;
    st.line = line;
    st.cur = -1;
    unsigned long nt = (unsigned long)block.x * block.y * block.z;
    if (nt == 0 || nt > 1024 || block.z > 64)
        fail("invalid configuration argument (block size)");
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 ||
        grid.z > 65535)
        fail("invalid configuration argument (grid size)");
    if (shmem > 48 * 1024 && shmem > dyn_limit(fn))
        fail("dynamic shared memory above 48 KiB needs cudaFuncSetAttribute "
             "(cudaFuncAttributeMaxDynamicSharedMemorySize) on the kernel");
    st.launches++;
    st.nthreads = (int)nt;
    st.fibers.assign(nt, Fiber());
    st.xphase.assign(nt, 0);
    st.bphase.assign(nt, 0);
    st.cp_pending.resize(nt);
    st.cp_committed.assign(nt, 0);
    st.cp_completed.assign(nt, 0);
    for (unsigned long i = 0; i < nt; i++)
        st.fibers[i].tid = uint3{(unsigned)(i % block.x), (unsigned)(i / block.x % block.y),
                                 (unsigned)(i / block.x / block.y)};
    ensure_stacks((int)nt);
    st.dyn_shared.assign(shmem, 0xff);
    st.body = call_body<F>;
    st.body_arg = (void *)&body;
    blockDim = block;
    gridDim = grid;
    unsigned long nb = (unsigned long)grid.x * grid.y * grid.z;
    std::vector<unsigned long> blocks(nb);
    for (unsigned long b = 0; b < nb; b++)
        blocks[b] = b;
    if (st.order == ORDER_REVERSE)
        std::reverse(blocks.begin(), blocks.end());
    else if (st.order == ORDER_SHUFFLE)
        std::shuffle(blocks.begin(), blocks.end(), st.rng);
    for (unsigned long b : blocks) {
        blockIdx = uint3{(unsigned)(b % grid.x), (unsigned)(b / grid.x % grid.y),
                         (unsigned)(b / grid.x / grid.y)};
        run_block();
    }
    st.kernel = "";
}

/* ---------------------------------------------------------------- device intrinsics */

inline void __syncthreads() { gcemu::wait(gcemu::WAIT_BLOCK); }

namespace gcemu {
/* The lanes of the calling warp that exist in this block, as a mask. */
inline unsigned warp_lanes()
{
    int lo = st.cur / 32 * 32, n = std::min(32, st.nthreads - lo);
    return n == 32 ? 0xffffffffu : ((1u << n) - 1);
}
inline void warp_sync(unsigned mask)
{
    if ((mask & warp_lanes()) != warp_lanes())
        fail("warp operation with a partial mask (gcemu supports full warps only)");
    wait(WAIT_WARP);
}
template <class T> T shfl_from(T v, unsigned mask, int src_lane)
{
    static_assert(sizeof(T) <= 8, "shuffle of a type above 8 bytes");
    int me = st.cur, lo = me / 32 * 32, b = st.xphase[me]++ & 1;
    memcpy(st.xchg[b][me], &v, sizeof(T));
    warp_sync(mask);
    if (lo + src_lane >= st.nthreads)
        fail("shuffle from a lane that does not exist in this block");
    T r;
    memcpy(&r, st.xchg[b][lo + src_lane], sizeof(T));
    return r;
}
inline int lane() { return st.cur % 32; }

/* A warp-collective exchange for the emulated PTX (gcemu_ptx.h): every lane
 * of a full warp deposits n <= 64 bytes, one warp barrier, then each gets
 * all 32 deposits, lane i's at all + i*n. `what` names the instruction in
 * the message when the warp is partial (undefined on the GPU: .aligned
 * instructions need every lane). */
inline void warp_gather(const char *what, const void *mine, size_t n, void *all)
{
    if (warp_lanes() != 0xffffffffu || n > sizeof st.gather[0][0]) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s from a partial warp (every lane of the warp must execute it)", what);
        fail(msg);
    }
    int me = st.cur, lo = me / 32 * 32, b = st.xphase[me]++ & 1;
    memcpy(st.gather[b][me], mine, n);
    warp_sync(0xffffffffu);
    for (int i = 0; i < 32; i++)
        memcpy((unsigned char *)all + i * n, st.gather[b][lo + i], n);
}

/* cp.async for the calling thread: queued, completed (copied, the rest of
 * the 16 bytes zero) only when the thread waits for its group, so a read of
 * the destination before cp.async.wait_group and __syncthreads sees the old
 * bytes under some fiber order, as a race would on the GPU. */
inline void cp_async(void *dst, const void *src, int src_bytes)
{
    State::CpAsync c = {dst, src, src_bytes, st.cp_committed[st.cur]};
    st.cp_pending[st.cur].push_back(c);
}
inline void cp_async_commit() { st.cp_committed[st.cur]++; }
/* cp.async.wait_group n: the thread's committed groups complete until at most n are pending */
inline void cp_async_wait(int n)
{
    int me = st.cur;
    auto &q = st.cp_pending[me];
    while (st.cp_committed[me] - st.cp_completed[me] > n) {
        int g = st.cp_completed[me]++;
        size_t k = 0;
        for (size_t i = 0; i < q.size(); i++) {
            if (q[i].group == g) {
                memset(q[i].dst, 0, 16);
                if (q[i].src_bytes > 0)
                    memcpy(q[i].dst, q[i].src, (size_t)q[i].src_bytes);
            } else {
                q[k++] = q[i];
            }
        }
        q.resize(k);
    }
}
} // namespace gcemu

inline void __syncwarp(unsigned mask = 0xffffffffu) { gcemu::warp_sync(mask); }

template <class T> T __shfl_sync(unsigned mask, T v, int src, int width = 32)
{
    int l = gcemu::lane();
    return gcemu::shfl_from(v, mask, l / width * width + (src % width));
}
template <class T> T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32)
{
    int l = gcemu::lane(), s = l ^ lane_mask;
    if (s / width != l / width)
        s = l;
    return gcemu::shfl_from(v, mask, s);
}
template <class T> T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
    int l = gcemu::lane(), s = (l % width) + (int)delta < width ? l + (int)delta : l;
    return gcemu::shfl_from(v, mask, s);
}
template <class T> T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
    int l = gcemu::lane(), s = (l % width) >= (int)delta ? l - (int)delta : l;
    return gcemu::shfl_from(v, mask, s);
}
inline unsigned __ballot_sync(unsigned mask, int pred)
{
    using namespace gcemu;
    int me = st.cur, lo = me / 32 * 32, hi = std::min(st.nthreads, lo + 32), b = st.xphase[me]++ & 1;
    st.xchg[b][me][0] = pred != 0;
    warp_sync(mask);
    unsigned r = 0;
    for (int i = lo; i < hi; i++)
        r |= (unsigned)st.xchg[b][i][0] << (i - lo);
    return r;
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) == __ballot_sync(mask, 1); }

inline int __syncthreads_count(int pred)
{
    using namespace gcemu;
    int b = st.bphase[st.cur]++ & 1;
    st.bxchg[b][st.cur] = pred != 0;
    __syncthreads();
    int c = 0;
    for (int i = 0; i < st.nthreads; i++)
        c += st.bxchg[b][i];
    return c;
}
inline int __syncthreads_or(int pred) { return __syncthreads_count(pred) != 0; }
inline int __syncthreads_and(int pred) { return __syncthreads_count(pred) == gcemu::st.nthreads; }

inline void __threadfence() {}
inline void __threadfence_block() {}

template <class T> T atomicAdd(T *p, T v) { T old = *p; *p = old + v; return old; }
template <class T> T atomicMax(T *p, T v) { T old = *p; if (v > old) *p = v; return old; }
template <class T> T atomicMin(T *p, T v) { T old = *p; if (v < old) *p = v; return old; }
template <class T> T atomicExch(T *p, T v) { T old = *p; *p = v; return old; }
template <class T> T atomicCAS(T *p, T cmp, T v) { T old = *p; if (old == cmp) *p = v; return old; }

template <class T> T __ldg(const T *p) { return *p; }

inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __fmul_rn(float a, float b) { volatile float p = a * b; return p; }   /* rounded, never an FMA */
inline float __saturatef(float x) { return x < 0.f ? 0.f : x > 1.f ? 1.f : x; }
inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
inline unsigned __float_as_uint(float f) { unsigned i; memcpy(&i, &f, 4); return i; }
inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }
/* sin and cos of pi x: x reduced exactly to [-1, 1] (x - 2 rint(x / 2)), then the host's sincos */
inline void sincospi(double x, double *s, double *c)
{
    double r = x - 2.0 * rint(0.5 * x);
    sincos(M_PI * r, s, c);
}

#endif
