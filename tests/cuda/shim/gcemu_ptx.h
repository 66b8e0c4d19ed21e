/* gcemu_ptx.h (gcemu shim) — the PTX helpers of runtime/cuda/gc_mma.h,
 * emulated: warp-level tensor-core products (mma.sync m16n8k16, bf16 in,
 * fp32 accumulate), ldmatrix (x4, plain and .trans) and cp.async (16 bytes,
 * zero-filled past src_bytes). gc_mma.h includes this file instead of its
 * inline PTX when GCEMU is defined; the signatures are the same.
 *
 * Fragments follow the PTX ISA's tables ("Matrix Fragments for
 * mma.m16n8k16 with floating point type"), groupID g = lane >> 2,
 * threadID_in_group t = lane & 3, two bf16 per 32-bit register, the lower
 * column (or k) index in the lower 16 bits:
 *   A (16 x 16, row-major)  a[0] = (g, 2t..2t+1)    a[1] = (g+8, 2t..2t+1)
 *                           a[2] = (g, 2t+8..2t+9)  a[3] = (g+8, 2t+8..2t+9)
 *   B (16 x 8, k x n)       b[0] = (k 2t..2t+1, n g)  b[1] = (k 2t+8..2t+9, n g)
 *   C, D (16 x 8, fp32)     d[0], d[1] = (g, 2t), (g, 2t+1)
 *                           d[2], d[3] = (g+8, 2t), (g+8, 2t+1)
 * ldmatrix .x4: lane i gives the address of row i % 8 of matrix i / 8
 * (16 bytes, 16-byte aligned); register j of lane L holds matrix j's row
 * L / 4, elements 2 (L % 4) and 2 (L % 4) + 1; with .trans the transpose:
 * elements (row 2 (L % 4), column L / 4) and (row 2 (L % 4) + 1, column L / 4).
 *
 * Semantics
 *   - mma and ldmatrix are warp-collective (.sync.aligned): every lane of a
 *     full warp must execute them (a partial warp aborts, as the shim's
 *     other warp operations do), one warp barrier each, operands exchanged
 *     through gcemu::warp_gather. A lane's result is computed from the
 *     other lanes' registers exactly by the tables above, so a kernel that
 *     assumes a different layout gets wrong numbers here as on the GPU;
 *     tests/cuda/test_kernels.cc ("mma" group) checks these tables against
 *     a plain matrix product, under the emulator and on a GPU alike.
 *   - mma: products of bf16 exact in fp32, summed in k order onto c in fp32
 *     (the tensor core's internal order and rounding are its own; it is also
 *     fp32 accumulation). gcemu_mma_syncs counts calls (once per warp).
 *   - ldmatrix reads shared memory after the warp's barrier; a row address
 *     that is not 16-byte aligned aborts.
 *   - cp.async (gcemu::cp_async): queued per thread and completed only at
 *     the thread's cp.async.wait_group, so reading the destination before
 *     wait + __syncthreads is an order-dependent result; a thread that
 *     returns with copies it never waited for aborts; 16-byte alignment of
 *     both addresses is checked.
 */
#ifndef GCEMU_PTX_H
#define GCEMU_PTX_H

#include "cuda_bf16.h"
#include "gcemu.h"

inline long gcemu_mma_syncs;

namespace gcemu {
inline float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
inline float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
inline float bf16_half(uint32_t w, int hi) { return hi ? bf16_hi(w) : bf16_lo(w); }

inline void check16(const char *what, const void *p)
{
    if ((uintptr_t)p % 16 != 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s: address %p is not 16-byte aligned", what, p);
        fail(msg);
    }
}
} // namespace gcemu

/* d (16 x 8 fp32 fragment) += a (16 x 16 bf16) b (16 x 8 bf16) */
inline void gc_mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2])
{
    struct Frag {
        uint32_t a[4], b[2];
    } mine = {{a[0], a[1], a[2], a[3]}, {b[0], b[1]}}, all[32];
    gcemu::warp_gather("mma.sync.m16n8k16", &mine, sizeof mine, all);
    int lane = gcemu::lane(), g = lane >> 2, t = lane & 3;
    if (lane == 0)
        gcemu_mma_syncs++;
    /* A(r, k): lane (r % 8) * 4 + (k % 8) / 2, register (r >= 8) + 2 (k >= 8), half k % 2 */
    auto A = [&](int r, int k) {
        return gcemu::bf16_half(all[(r % 8) * 4 + (k % 8) / 2].a[(r >= 8) + 2 * (k >= 8)], k % 2);
    };
    /* B(k, n): lane n * 4 + (k % 8) / 2, register k >= 8, half k % 2 */
    auto B = [&](int k, int n) { return gcemu::bf16_half(all[n * 4 + (k % 8) / 2].b[k >= 8], k % 2); };
    for (int i = 0; i < 4; i++) {
        int r = g + 8 * (i >= 2), c = 2 * t + (i & 1);
        float s = d[i];
        for (int k = 0; k < 16; k++)
            s += A(r, k) * B(k, c);   /* bf16 x bf16 is exact in fp32 */
        d[i] = s;
    }
}

namespace gcemu {
inline void ldmatrix_x4(uint32_t r[4], const void *row, bool trans)
{
    check16(trans ? "ldmatrix.x4.trans" : "ldmatrix.x4", row);
    const unsigned char *all[32];
    warp_gather(trans ? "ldmatrix.x4.trans" : "ldmatrix.x4", &row, sizeof row, all);
    int L = lane();
    for (int j = 0; j < 4; j++) {
        if (!trans) {
            memcpy(&r[j], all[8 * j + L / 4] + 4 * (L % 4), 4);
        } else {
            uint16_t lo, hi;
            memcpy(&lo, all[8 * j + 2 * (L % 4)] + 2 * (L / 4), 2);
            memcpy(&hi, all[8 * j + 2 * (L % 4) + 1] + 2 * (L / 4), 2);
            r[j] = (uint32_t)lo | (uint32_t)hi << 16;
        }
    }
}
} // namespace gcemu

/* a shared-memory address: here the pointer itself (bytes) */
typedef unsigned char *gc_smem_t;
inline gc_smem_t gc_smem(const void *p) { return (gc_smem_t)p; }

inline void gc_ldmatrix_x4(uint32_t r[4], gc_smem_t row) { gcemu::ldmatrix_x4(r, row, false); }
inline void gc_ldmatrix_x4_trans(uint32_t r[4], gc_smem_t row) { gcemu::ldmatrix_x4(r, row, true); }

/* 16 bytes from global src to shared dst, the bytes past src_bytes (0 or 16) zero */
inline void gc_cp_async16(gc_smem_t dst, const void *src, int src_bytes)
{
    gcemu::check16("cp.async (shared destination)", dst);
    if (src_bytes > 0)
        gcemu::check16("cp.async (global source)", src);
    gcemu::cp_async(dst, src, src_bytes);
}
inline void gc_cp_async_commit() { gcemu::cp_async_commit(); }
template <int N> inline void gc_cp_async_wait() { gcemu::cp_async_wait(N); }

/* two floats rounded to bf16 (nearest even), lo in the lower 16 bits */
inline uint32_t gc_pack_bf16(float lo, float hi)
{
    return (uint32_t)__float2bfloat16(lo).x | (uint32_t)__float2bfloat16(hi).x << 16;
}

#endif
