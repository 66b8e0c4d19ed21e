/* test_gcemu.cc — the SIMT emulator itself (tests/cuda/shim): indices, warp
 * shuffles, ballots, barriers, shared and dynamic shared memory, that a
 * missing __syncthreads shows up as an order-dependent result, and that
 * undefined behaviour (barrier after an exit, partial warps, bad launches,
 * deadlock) aborts with a message instead of passing silently. The WMMA shim
 * (mma.h): products in every layout, and its contract checks. The PTX
 * helpers (gcemu_ptx.h, for runtime/cuda/gc_mma.h): cp.async lands only at
 * its wait, strictness of mma/ldmatrix/cp.async, dynamic shared memory above
 * 48 KiB only with the kernel's attribute. (Their fragment layouts against a
 * plain matrix product: test_kernels' "mma" group, which also runs on a GPU.) */
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <vector>

#include "child.h"
#include "gc_cuda.h"
#include "gc_mma.h"
#include <mma.h>

static int failures, checks;

static void expect(bool ok, const char *what)
{
    checks++;
    if (!ok) {
        printf("FAIL %s\n", what);
        failures++;
    }
}

/* ---------------------------------------------------------------- kernels */

static __global__ void index_kernel(int *out)
{
    int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    out[b * blockDim.x * blockDim.y * blockDim.z + t] = b * 1000 + t;
}

static __global__ void shuffle_kernel(int *out)
{
    int lane = threadIdx.x % 32, base = threadIdx.x * 6;
    out[base + 0] = __shfl_xor_sync(0xffffffffu, lane * 10, 5);
    out[base + 1] = __shfl_down_sync(0xffffffffu, lane * 10, 3);
    out[base + 2] = __shfl_up_sync(0xffffffffu, lane * 10, 2);
    out[base + 3] = __shfl_sync(0xffffffffu, lane * 10, 7);
    out[base + 4] = __shfl_xor_sync(0xffffffffu, lane * 10, 1, 8);
    out[base + 5] = (int)__ballot_sync(0xffffffffu, lane % 3 == 0);
}

static __global__ void sync_count_kernel(int *out)
{
    out[threadIdx.x] = __syncthreads_count(threadIdx.x % 4 == 0) + 100 * __syncthreads_or(threadIdx.x == 77);
}

/* block reversal through shared memory; `sync` = 0 leaves out the barrier */
static __global__ void reverse_kernel(int *out, const int *in, int sync)
{
    __shared__ int sh[256];
    sh[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x];
    if (sync)
        __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = sh[blockDim.x - 1 - threadIdx.x];
}

static __global__ void dyn_shared_kernel(float *out)
{
    GC_DYN_SHARED(float, buf);
    if (threadIdx.x == 0)
        out[0] = buf[0];   /* never written: NaN bytes */
    __syncthreads();
    buf[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    out[1 + threadIdx.x] = buf[(threadIdx.x + 1) % blockDim.x];
}

static __global__ void exit_then_sync_kernel(int *out)
{
    if (threadIdx.x == 3)
        return;
    __syncthreads();
    out[threadIdx.x] = 1;
}

static __global__ void partial_warp_kernel(int *out)
{
    if (threadIdx.x % 32 == 5)
        return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
}

/* lane 0 waits for the block, the other lanes for the warp: neither completes */
static __global__ void deadlock_kernel(int *out)
{
    if (threadIdx.x == 0)
        __syncthreads();
    else
        __syncwarp();
    out[threadIdx.x] = 1;
}

/* ---------------------------------------------------------------- wmma */
namespace wm = nvcuda::wmma;
struct alignas(32) SharedTile {   /* __shared__ is `static` here: the alignment goes on the type */
    float v[512];
};

/* out (16 x 16 floats, row-major) = a b + out; a, b 16 x 16 bf16 stored
 * row-major (la, lb = 0) or column-major (1); the accumulator goes through
 * memory column-major when lc = 1 */
template <class LA, class LB>
static __global__ void wmma_kernel(float *out, const __nv_bfloat16 *a, const __nv_bfloat16 *b, int lc)
{
    __shared__ SharedTile cs;
    float *c = cs.v;
    wm::fragment<wm::matrix_a, 16, 16, 16, __nv_bfloat16, LA> fa;
    wm::fragment<wm::matrix_b, 16, 16, 16, __nv_bfloat16, LB> fb;
    wm::fragment<wm::accumulator, 16, 16, 16, float> fc;
    for (int e = threadIdx.x; e < 256; e += blockDim.x)
        c[lc ? e % 16 * 16 + e / 16 : e] = out[e];
    __syncwarp();
    wm::load_matrix_sync(fa, a, 16);
    wm::load_matrix_sync(fb, b, 16);
    wm::load_matrix_sync(fc, c, 16, lc ? wm::mem_col_major : wm::mem_row_major);
    wm::mma_sync(fc, fa, fb, fc);
    __syncwarp();
    wm::store_matrix_sync(c, fc, 16, lc ? wm::mem_col_major : wm::mem_row_major);
    __syncwarp();
    for (int e = threadIdx.x; e < 256; e += blockDim.x)
        out[e] = c[lc ? e % 16 * 16 + e / 16 : e];
}

/* misuse: 1 ldm 12 (bf16), 2 a pointer 16 bytes off, 3 lanes with different
 * pointers, 4 float store with ldm 6; 5 a partial warp (launch 48 threads) */
static __global__ void wmma_bad_kernel(float *out, const __nv_bfloat16 *a, int bad)
{
    __shared__ SharedTile cs;
    float *c = cs.v;
    wm::fragment<wm::matrix_a, 16, 16, 16, __nv_bfloat16, wm::row_major> fa;
    wm::fragment<wm::accumulator, 16, 16, 16, float> fc;
    wm::fill_fragment(fc, 1.0f);
    wm::load_matrix_sync(fa, a + (bad == 2 ? 8 : bad == 3 ? threadIdx.x % 2 * 16 : 0), bad == 1 ? 12 : 16);
    wm::store_matrix_sync(c, fc, bad == 4 ? 6 : 16, wm::mem_row_major);
    out[threadIdx.x] = c[threadIdx.x];
}

/* each lane reads the element at 8 lane of a tile the warp stored: without
 * the __syncwarp, other lanes' shares may not be there yet */
static __global__ void wmma_store_race_kernel(float *out, int sync)
{
    __shared__ SharedTile cs;
    float *c = cs.v;
    for (int e = threadIdx.x; e < 256; e += 32)
        c[e] = -1.0f;
    __syncwarp();
    wm::fragment<wm::accumulator, 16, 16, 16, float> fc;
    wm::fill_fragment(fc, 2.0f);
    wm::store_matrix_sync(c, fc, 16, wm::mem_row_major);
    if (sync)
        __syncwarp();
    out[threadIdx.x] = c[threadIdx.x * 8 + 1];
}

/* a b + c in float, k in order, as the shim and the reference agree */
static bool wmma_case(int la, int lb, int lc)
{
    alignas(32) static __nv_bfloat16 a[256], b[256];   /* wmma wants 256-bit aligned pointers */
    std::vector<float> af(256), bf(256), out(256), want(256);
    for (int e = 0; e < 256; e++) {
        a[e] = __float2bfloat16((float)((e * 37 % 23) - 11) / 8);
        b[e] = __float2bfloat16((float)((e * 53 % 19) - 9) / 4);
        af[e] = __bfloat162float(a[e]);
        bf[e] = __bfloat162float(b[e]);
        out[e] = want[e] = (float)(e % 7) - 3;
    }
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float s = want[i * 16 + j];
            for (int k = 0; k < 16; k++)
                s += af[la ? k * 16 + i : i * 16 + k] * bf[lb ? j * 16 + k : k * 16 + j];
            want[i * 16 + j] = s;
        }
    __nv_bfloat16 *da = a, *db = b;
    if (!la && !lb)
        GC_LAUNCH((wmma_kernel<wm::row_major, wm::row_major>), 1, 32, 0, out.data(), da, db, lc);
    else if (!la && lb)
        GC_LAUNCH((wmma_kernel<wm::row_major, wm::col_major>), 1, 32, 0, out.data(), da, db, lc);
    else if (la && !lb)
        GC_LAUNCH((wmma_kernel<wm::col_major, wm::row_major>), 1, 32, 0, out.data(), da, db, lc);
    else
        GC_LAUNCH((wmma_kernel<wm::col_major, wm::col_major>), 1, 32, 0, out.data(), da, db, lc);
    return out == want;
}

/* ---------------------------------------------------------------- PTX helpers */
struct alignas(16) Chunk16 {
    uint32_t w[4];
};

/* thread t copies 16 bytes of in into shared memory by cp.async; `wait` 0
 * reads it back (another thread's chunk) before waiting: the old bytes under
 * some order; 1 waits and syncs first */
static __global__ void cp_async_kernel(uint32_t *out, const uint32_t *in, int wait)
{
    __shared__ Chunk16 sh[64];
    for (int j = 0; j < 4; j++)
        sh[threadIdx.x].w[j] = 0xffffffffu;
    __syncthreads();
    gc_cp_async16(gc_smem(&sh[threadIdx.x]), in + threadIdx.x * 4, threadIdx.x % 8 == 7 ? 0 : 16);
    gc_cp_async_commit();
    if (wait)
        gc_cp_async_wait<0>();
    __syncthreads();
    out[threadIdx.x] = sh[(threadIdx.x + 1) % blockDim.x].w[1];
    if (!wait)
        gc_cp_async_wait<0>();
}

/* misuse: 1 cp.async never waited for, 2 cp.async to a misaligned address,
 * 3 ldmatrix of a misaligned row, 4 mma from a partial warp (48 threads),
 * 5 ldmatrix from a partial warp */
static __global__ void ptx_bad_kernel(uint32_t *out, const uint32_t *in, int bad)
{
    __shared__ Chunk16 sh[64];
    uint32_t r[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    float d[4] = {0, 0, 0, 0};
    if (bad == 1 || bad == 2) {
        gc_cp_async16(gc_smem(&sh[threadIdx.x]) + (bad == 2 ? 4 : 0), in, 16);
        gc_cp_async_commit();
    }
    if (bad == 3 || bad == 5)
        gc_ldmatrix_x4(r, gc_smem(&sh[threadIdx.x % 16]) + (bad == 3 ? 2 : 0));
    if (bad == 4)
        gc_mma_bf16_16816(d, r, b);
    out[threadIdx.x] = r[0] + (uint32_t)d[0];
}

/* dynamic shared memory of `bytes`, touched by every thread */
static __global__ void big_shared_kernel(int *out)
{
    GC_DYN_SHARED(int, buf);
    buf[threadIdx.x] = (int)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = buf[blockDim.x - 1 - threadIdx.x];
}

/* ---------------------------------------------------------------- checks */

static void expect_abort(const std::function<void()> &f, const char *msg)
{
    std::string err;
    int rc = in_child(f, &err);
    checks++;
    if (rc != -SIGABRT || err.find(msg) == std::string::npos) {
        printf("FAIL expected an abort with \"%s\": status %d, stderr \"%s\"\n", msg, rc, err.c_str());
        failures++;
    }
}

int main()
{
    std::vector<int> out(2 * 3 * 2 * 4 * 2 * 3);
    GC_LAUNCH(index_kernel, dim3(2, 3, 2), dim3(4, 2, 3), 0, out.data());
    bool ok = true;
    for (int b = 0; b < 12; b++)
        for (int t = 0; t < 24; t++)
            ok &= out[b * 24 + t] == b * 1000 + t;
    expect(ok, "threadIdx/blockIdx over 3-d grids and blocks");

    for (int order = 0; order < 3; order++) {
        gcemu_set_order(order, 99);
        std::vector<int> sh(64 * 6);
        GC_LAUNCH(shuffle_kernel, 1, 64, 0, sh.data());
        ok = true;
        for (int t = 0; t < 64; t++) {
            int lane = t % 32, *o = &sh[t * 6];
            unsigned ballot = 0;
            for (int l = 0; l < 32; l++)
                ballot |= (unsigned)(l % 3 == 0) << l;
            ok &= o[0] == (lane ^ 5) * 10;
            ok &= o[1] == (lane + 3 < 32 ? lane + 3 : lane) * 10;
            ok &= o[2] == (lane >= 2 ? lane - 2 : lane) * 10;
            ok &= o[3] == 70;
            ok &= o[4] == (lane ^ 1) * 10;
            ok &= (unsigned)o[5] == ballot;
        }
        expect(ok, "shuffles (xor, down, up, idx, width 8) and ballot");

        std::vector<int> cnt(256);
        GC_LAUNCH(sync_count_kernel, 1, 256, 0, cnt.data());
        ok = true;
        for (int c : cnt)
            ok &= c == 64 + 100;
        expect(ok, "__syncthreads_count / __syncthreads_or");
    }

    /* a missing barrier: some schedule gets it wrong; with it, every one is right */
    std::vector<int> in(512), rev(512);
    for (int i = 0; i < 512; i++)
        in[i] = i;
    bool race_seen = false, all_right = true;
    for (int order = 0; order < 3; order++) {
        gcemu_set_order(order, 5);
        GC_LAUNCH(reverse_kernel, 2, 256, 0, rev.data(), in.data(), 0);
        for (int i = 0; i < 512; i++)
            race_seen |= rev[i] != (i / 256) * 256 + 255 - i % 256;
        GC_LAUNCH(reverse_kernel, 2, 256, 0, rev.data(), in.data(), 1);
        for (int i = 0; i < 512; i++)
            all_right &= rev[i] == (i / 256) * 256 + 255 - i % 256;
    }
    expect(race_seen, "a missing __syncthreads changes the result under some order");
    expect(all_right, "__syncthreads orders shared memory");

    std::vector<float> dyn(1 + 64);
    GC_LAUNCH(dyn_shared_kernel, 1, 64, 64 * sizeof(float), dyn.data());
    ok = isnan(dyn[0]);
    for (int t = 0; t < 64; t++)
        ok &= dyn[1 + t] == (float)((t + 1) % 64);
    expect(ok, "dynamic shared memory: NaN before written, shared by the block");

    std::vector<int> junk(1024);
    expect_abort([&] { GC_LAUNCH(exit_then_sync_kernel, 1, 64, 0, junk.data()); },
                 "__syncthreads() after some threads of the block returned");
    expect_abort([&] { GC_LAUNCH(partial_warp_kernel, 1, 64, 0, junk.data()); },
                 "warp operation after some lanes of the warp returned");
    expect_abort([&] { GC_LAUNCH(deadlock_kernel, 1, 32, 0, junk.data()); }, "deadlock");
    expect_abort([&] { GC_LAUNCH(index_kernel, 0, 32, 0, junk.data()); }, "invalid configuration argument");
    expect_abort([&] { GC_LAUNCH(index_kernel, 1, 2048, 0, junk.data()); }, "invalid configuration argument");
    expect_abort([&] { GC_LAUNCH(index_kernel, dim3(1, 70000), 32, 0, junk.data()); },
                 "invalid configuration argument");

    /* wmma: every layout of a, b and the accumulator in memory */
    ok = true;
    long m0 = gcemu_wmma_mmas;
    for (int la = 0; la < 2; la++)
        for (int lb = 0; lb < 2; lb++)
            for (int lc = 0; lc < 2; lc++)
                ok &= wmma_case(la, lb, lc);
    expect(ok && gcemu_wmma_mmas - m0 == 8, "wmma: a b + c in every layout, one mma_sync per warp call");
    race_seen = false, all_right = true;
    for (int order = 0; order < 3; order++) {
        std::vector<float> r(32);
        gcemu_set_order(order, 3);
        GC_LAUNCH(wmma_store_race_kernel, 1, 32, 0, r.data(), 0);
        for (float v : r)
            race_seen |= v != 2.0f;
        GC_LAUNCH(wmma_store_race_kernel, 1, 32, 0, r.data(), 1);
        for (float v : r)
            all_right &= v == 2.0f;
    }
    expect(race_seen, "wmma: reading another lane's share of a store before __syncwarp is seen");
    expect(all_right, "wmma: store_matrix_sync then __syncwarp");
    alignas(32) static __nv_bfloat16 tile[512];
    std::vector<float> fo(64);
    expect_abort([&] { GC_LAUNCH(wmma_bad_kernel, 1, 32, 0, fo.data(), tile, 1); }, "ldm 12 is not a multiple of 8");
    expect_abort([&] { GC_LAUNCH(wmma_bad_kernel, 1, 32, 0, fo.data(), tile, 2); }, "is not 256-bit aligned");
    expect_abort([&] { GC_LAUNCH(wmma_bad_kernel, 1, 32, 0, fo.data(), tile, 3); },
                 "load_matrix_sync: lanes passed different arguments");
    expect_abort([&] { GC_LAUNCH(wmma_bad_kernel, 1, 32, 0, fo.data(), tile, 4); }, "ldm 6 is not a multiple of 4");
    expect_abort([&] { GC_LAUNCH(wmma_bad_kernel, 1, 48, 0, fo.data(), tile, 5); }, "wmma call from a partial warp");

    /* cp.async: lands at the thread's wait (zero-filled past src_bytes); read before it, stale */
    std::vector<uint32_t> cin(64 * 4), cout(64);
    for (size_t i = 0; i < cin.size(); i++)
        cin[i] = (uint32_t)i;
    bool seen_old = false, seen_new = false;
    all_right = true;
    for (int order = 0; order < 3; order++) {
        gcemu_set_order(order, 11);
        GC_LAUNCH(cp_async_kernel, 1, 64, 0, cout.data(), cin.data(), 0);
        for (int t = 0; t < 64; t++) {
            seen_old |= cout[t] == 0xffffffffu;
            seen_new |= cout[t] != 0xffffffffu;
        }
        GC_LAUNCH(cp_async_kernel, 1, 64, 0, cout.data(), cin.data(), 1);
        for (int t = 0; t < 64; t++) {
            int s = (t + 1) % 64;
            all_right &= cout[t] == (s % 8 == 7 ? 0u : (uint32_t)(s * 4 + 1));
        }
    }
    expect(seen_old && seen_new, "cp.async: a read before the writer's cp.async.wait_group is a race (old or new bytes)");
    expect(all_right, "cp.async: after wait_group and __syncthreads, the bytes (zero past src_bytes)");
    std::vector<uint32_t> pj(64);
    expect_abort([&] { GC_LAUNCH(ptx_bad_kernel, 1, 32, 0, pj.data(), cin.data(), 1); },
                 "cp.async copies it never waited for");
    expect_abort([&] { GC_LAUNCH(ptx_bad_kernel, 1, 32, 0, pj.data(), cin.data(), 2); },
                 "cp.async (shared destination): address");
    expect_abort([&] { GC_LAUNCH(ptx_bad_kernel, 1, 32, 0, pj.data(), cin.data(), 3); },
                 "ldmatrix.x4: address");
    expect_abort([&] { GC_LAUNCH(ptx_bad_kernel, 1, 48, 0, pj.data(), cin.data(), 4); },
                 "mma.sync.m16n8k16 from a partial warp");
    expect_abort([&] { GC_LAUNCH(ptx_bad_kernel, 1, 48, 0, pj.data(), cin.data(), 5); },
                 "ldmatrix.x4 from a partial warp");
    /* dynamic shared memory above 48 KiB: only after cudaFuncSetAttribute on the kernel */
    std::vector<int> bs(64);
    expect_abort([&] { GC_LAUNCH(big_shared_kernel, 1, 64, 64 << 10, bs.data()); }, "above 48 KiB");
    expect(cudaFuncSetAttribute(big_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 228 << 10) ==
               cudaErrorInvalidValue, "cudaFuncSetAttribute: above 227 KiB refused");
    expect(cudaFuncSetAttribute(big_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10) ==
               cudaSuccess, "cudaFuncSetAttribute: 64 KiB");
    GC_LAUNCH(big_shared_kernel, 1, 64, 64 << 10, bs.data());
    ok = true;
    for (int t = 0; t < 64; t++)
        ok &= bs[t] == 63 - t;
    expect(ok, "64 KiB of dynamic shared memory after cudaFuncSetAttribute");
    expect_abort([&] { GC_LAUNCH(big_shared_kernel, 1, 64, 65 << 10, bs.data()); }, "above 48 KiB");

    printf("%s: %d checks, %d failed\n", failures ? "FAIL" : "ok", checks, failures);
    return failures ? 1 : 0;
}
