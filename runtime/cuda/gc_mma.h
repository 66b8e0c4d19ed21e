/* gc_mma.h — the few PTX instructions the tensor-core attention
 * (attention_mma.cu) uses, as small __device__ helpers with the register
 * layouts of the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating
 * point type"; groupID g = lane >> 2, threadID_in_group t = lane & 3; two
 * bf16 per 32-bit register, the lower index in the lower 16 bits):
 *
 *   gc_mma_bf16_16816(d, a, b)   d += a b: mma.sync.aligned.m16n8k16.row.col
 *                                .f32.bf16.bf16.f32, sm_80+
 *       A (16 x 16)  a[0] = (g, 2t..2t+1)    a[1] = (g+8, 2t..2t+1)
 *                    a[2] = (g, 2t+8..2t+9)  a[3] = (g+8, 2t+8..2t+9)
 *       B (16 x 8)   b[0] = (k 2t..2t+1, n g)  b[1] = (k 2t+8..2t+9, n g)
 *       C, D (fp32)  d[0], d[1] = (g, 2t), (g, 2t+1); d[2], d[3] = (g+8, 2t), (g+8, 2t+1)
 *     So two 16 x 8 score tiles side by side (C layout) are one 16 x 16 A
 *     operand: a[0] = d_left[0..1], a[1] = d_left[2..3], a[2] =
 *     d_right[0..1], a[3] = d_right[2..3] (FlashAttention-2: p never goes
 *     through shared memory).
 *   gc_smem(p)                   the shared-memory address of p (gc_smem_t: a
 *                                32-bit shared address; adding n moves n bytes)
 *   gc_ldmatrix_x4(r, row)       ldmatrix.sync.aligned.m8n8.x4.shared.b16:
 *                                lane i passes row i % 8 of 8 x 8 matrix i / 8
 *                                (16 bytes, 16-byte aligned, shared memory);
 *                                r[j] = matrix j's row lane / 4, elements
 *                                2 (lane % 4), +1
 *   gc_ldmatrix_x4_trans(r, row) the same, .trans: r[j] = matrix j's
 *                                elements (2 (lane % 4), lane / 4) and
 *                                (2 (lane % 4) + 1, lane / 4)
 *   gc_cp_async16(dst, src, n)   cp.async.cg.shared.global, 16 bytes, the
 *                                bytes past n (0 or 16) zero; then
 *                                gc_cp_async_commit() and
 *                                gc_cp_async_wait<N>() (at most N groups
 *                                still in flight), __syncthreads for others
 *   gc_pack_bf16(lo, hi)         two floats rounded to nearest even bf16
 *
 * Under the SIMT emulator (GCEMU, tests/cuda/shim/gcemu_ptx.h) the same
 * names are emulated warp-collective operations with exactly these layouts;
 * test_kernels' "mma" group checks them against a plain matrix product on
 * both. Below sm_80 the helpers compile to nothing (the host never runs
 * the kernels that use them there).
 */
#ifndef GC_MMA_H
#define GC_MMA_H

#include <stdint.h>

#ifdef GCEMU
#include <gcemu_ptx.h>
#else

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define GC_MMA_NONE 1
#endif

__device__ __forceinline__ void gc_mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2])
{
#ifndef GC_MMA_NONE
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

typedef uint32_t gc_smem_t;
__device__ __forceinline__ gc_smem_t gc_smem(const void *p) { return (gc_smem_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void gc_ldmatrix_x4(uint32_t r[4], gc_smem_t s)
{
#ifndef GC_MMA_NONE
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
#endif
}

__device__ __forceinline__ void gc_ldmatrix_x4_trans(uint32_t r[4], gc_smem_t s)
{
#ifndef GC_MMA_NONE
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
#endif
}

__device__ __forceinline__ void gc_cp_async16(gc_smem_t s, const void *src, int src_bytes)
{
#ifndef GC_MMA_NONE
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(src_bytes) : "memory");
#endif
}

__device__ __forceinline__ void gc_cp_async_commit()
{
#ifndef GC_MMA_NONE
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

template <int N> __device__ __forceinline__ void gc_cp_async_wait()
{
#ifndef GC_MMA_NONE
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

__device__ __forceinline__ uint32_t gc_pack_bf16(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);   /* .x = lo: the lower 16 bits */
    return *reinterpret_cast<uint32_t *>(&v);
}

#endif
#endif
