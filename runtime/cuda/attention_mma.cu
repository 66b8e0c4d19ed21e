/* attention_mma.cu — causal attention on tensor cores for bf16 storage
 * (sm_80+), FlashAttention-2's scheme with mma.sync m16n8k16 (bf16
 * operands, fp32 accumulators) through gc_mma.h. Included by
 * attention_cuda.cu after AttP; serves both entry points (q, k, v in one x,
 * and grouped-query q, k, v) through AttP's pointers and strides.
 *
 * A block is 4 warps; a warp owns 16 query rows (forward, dq) or 16 keys
 * (dk/dv), so every product is warp-local:
 *   forward  a block per (64 query rows, query head), heaviest blocks
 *            first (causal: the last rows see the most keys). The block's q
 *            rows stay in shared memory (their A fragments are read 16
 *            columns at a time by ldmatrix for each tile: 4 registers
 *            instead of HS / 4, about 12 % more shared-memory reads); tiles
 *            of BN keys of k and v come through shared memory by cp.async,
 *            double-buffered (tile j+1 loads while tile j computes). s = q k^T (ldmatrix of k rows), the
 *            causal mask and the online softmax in registers (a row lives
 *            in the 4 lanes of a quad: max by two shuffles, the sum per
 *            lane until the end), exp2 with scale·log2(e) folded in; the C
 *            fragments of s are p's A fragments (gc_mma.h), rounded once to
 *            bf16; o += p v (ldmatrix.trans of v rows). y and lse per row.
 *   backward three steps, no atomics (bit-identical reruns):
 *            dq: a block per (64 query rows, query head): D = rowsum(dy·y)
 *                of its rows, once (also into the workspace for dk/dv); q
 *                and dy rows in shared memory; per key tile s = q k^T,
 *                p = exp2(s·scale·log2e - lse·log2e), dp = dy v^T,
 *                ds = p (dp - D), dq += ds k; dq·scale at the end.
 *            dk, dv: a block of 8 warps per (64 keys, kv head), k and v
 *                in shared memory, walking the tiles of BQ query rows at or
 *                below its keys of each query head of its group (GQA's dk
 *                and dv sum over the group in the block: no atomics), q
 *                and dy tiles double-buffered; per 16 keys a pair of warps:
 *                one forms s^T = k q^T, p^T from lse, dv += p^T dy; the
 *                other dp^T = v dy^T, ds^T = p^T (dp^T - D), dk += ds^T q,
 *                with p^T handed over in shared memory.
 *            7 products where FlashAttention-2 does 5: FA2 adds dq into a
 *            B·T·C fp32 buffer with atomics from the dk/dv blocks, which
 *            would break bit-identical reruns and need a planned buffer of
 *            B·NH·T·hs floats; here dq recomputes s and dp (2 products)
 *            instead. D is computed once per row (FA2's preprocessing, done
 *            by the dq kernel) and kept in the planned workspace
 *            (runtime.workspace, gc_cuda_set_workspace): B·NH·T floats,
 *            in chunks of (batch, kv head) pairs when the workspace is
 *            smaller; with no workspace the dk/dv blocks compute D of each
 *            tile's rows themselves by the same function (same bits, more
 *            reads).
 * Any T (rows and keys past T are zero in the tiles and masked in
 * registers), any hs <= 128 (specialised at compile time by HS = 32, 64,
 * 128, the smallest >= hs; columns hs..HS are zero), B·NH above the grid's
 * 65,535 (launches over chunks of heads). Tiles load by 16-byte cp.async
 * when every row is 16-byte aligned (hs % 8 == 0, aligned pointers and
 * strides: `vec`), else element by element (odd shapes). Shared tiles have
 * a row stride of HS + 8 bf16 (16 bytes more than a row), so the 8 rows an
 * ldmatrix reads fall in 8 different 16-byte bank groups.
 */
#include "gc_mma.h"

static const float AM_LOG2E = 1.4426950408889634f, AM_LN2 = 0.6931471805599453f;

enum { AM_THREADS = 128, AM_ROWS = 64 };   /* 4 warps x 16 rows (or keys) */
enum { AM_KV_THREADS = 256 };              /* dk/dv: 4 pairs of warps x 16 keys */

struct alignas(16) AmF4 {
    float v[4];
};

/* Tile sizes by head size: keys per tile in the forward (FWD_BN) and in dq
 * (DQ_BN), query rows per tile in dk/dv (KV_BQ); the minimum blocks per SM
 * asked of ptxas for dq and dk/dv (DQ_MINB, KV_MINB: __launch_bounds__).
 * A warp's accumulators are 16 x BN scores (BN / 2 registers a lane; dq
 * holds two such) and 16 x HS outputs (HS / 2): at HS = 64, 32 + 32
 * registers (forward), 16 + 32 (dq at BN = 16), 16 + 32 (a dk/dv warp,
 * which holds dk or dv). HS = 64 (GPT-2, Llama 3.2 1B) is sized for 16
 * warps per SM: forward 100 registers, dq 128 at 4 blocks of 128 threads,
 * dk/dv 128 at 2 blocks of 256 (nvcc 13.0, sm_90 and sm_80, no spills;
 * dq at 32-key tiles needed 149 registers, dk and dv in one warp 168).
 * Unmeasured on a GPU: bench/RESULTS.md has the registers and occupancy
 * ptxas gives, bench/ptxas.sh reads these lines. */
template <int HS> struct AmCfg;
template <> struct AmCfg<32> { enum { FWD_BN = 64, DQ_BN = 32, KV_BQ = 32, DQ_MINB = 1, KV_MINB = 2 }; };
template <> struct AmCfg<64> { enum { FWD_BN = 64, DQ_BN = 16, KV_BQ = 32, DQ_MINB = 4, KV_MINB = 2 }; };
template <> struct AmCfg<128> { enum { FWD_BN = 32, DQ_BN = 32, KV_BQ = 32, DQ_MINB = 1, KV_MINB = 1 }; };

/* shared memory of each kernel, bytes (bf16 tiles of row stride HS + 8) */
template <int HS> static constexpr size_t am_fwd_smem()   /* q, then 2 stages of k, v */
{
    return (size_t)(AM_ROWS + 4 * AmCfg<HS>::FWD_BN) * (HS + 8) * 2;
}
template <int HS> static constexpr size_t am_dq_smem()    /* q, dy, 2 stages of k, v; D */
{
    return (size_t)(2 * AM_ROWS + 4 * AmCfg<HS>::DQ_BN) * (HS + 8) * 2 + AM_ROWS * sizeof(float);
}
template <int HS> static constexpr size_t am_dkdv_smem()
{
    return (size_t)(2 * AM_ROWS + 4 * AmCfg<HS>::KV_BQ) * (HS + 8) * 2 + 4 * AmCfg<HS>::KV_BQ * sizeof(float) +
           (size_t)4 * AmCfg<HS>::KV_BQ / 8 * 32 * sizeof(AmF4);   /* k, v, 2 stages of q, dy; lse, D; p^T */
}

struct alignas(16) AmChunk {
    uint32_t w[4];
};

/* rows [t0, t0 + R) of a head (row stride st) into the shared tile s (R rows
 * of HS + 8 bf16), zero at rows >= T and columns >= hs; the block's threads
 * share it. vec: 16-byte cp.async (the caller commits and waits); else plain
 * loads and stores (visible after the caller's __syncthreads). */
template <int R, int HS, int NTH = AM_THREADS>
static __device__ __forceinline__ void am_load(gc_bf16 *s, const gc_bf16 *base, long st, long t0, long T, int hs,
                                               int vec)
{
    const int LD = HS + 8;
    if (vec) {
        const int CH = HS / 8;   /* 16-byte chunks of a row */
        const gc_smem_t sb = gc_smem(s);
        for (int i = threadIdx.x; i < R * CH; i += NTH) {
            int r = i / CH, c = i % CH;
            long t = t0 + r;
            bool in = t < T && c * 8 < hs;
            gc_cp_async16(sb + (r * LD + c * 8) * 2, in ? base + t * st + c * 8 : base, in ? 16 : 0);
        }
    } else {
        for (int i = threadIdx.x; i < R * HS; i += NTH) {
            int r = i / HS, c = i % HS;
            long t = t0 + r;
            s[r * LD + c] = t < T && c < hs ? base[t * st + c] : __float2bfloat16(0.0f);
        }
    }
}

/* D = sum over d of dy[d] y[d], one fmaf per d in order, so any code shape
 * gives the same bits (the dq kernel's and the dk/dv kernel's fallback).
 * vec: 16-byte loads, U of them (of dy and of y each) issued together, so
 * that a row costs hs / 8 U memory latencies (dq: U = 4, 32 registers
 * briefly; the dk/dv fallback: U = 1) */
template <int HS, int U>
static __device__ __forceinline__ float am_rowD(const gc_bf16 *dy, const gc_bf16 *y, int hs, int vec)
{
    float s = 0.0f;
    if (vec) {
#pragma unroll 1
        for (int c0 = 0; c0 < HS / 8; c0 += U) {
            GcVec<gc_bf16> u[U], w[U];
#pragma unroll
            for (int c = 0; c < U; c++)
                if ((c0 + c) * 8 < hs) {
                    u[c] = *(const GcVec<gc_bf16> *)(dy + (c0 + c) * 8);
                    w[c] = *(const GcVec<gc_bf16> *)(y + (c0 + c) * 8);
                }
#pragma unroll
            for (int c = 0; c < U; c++)
#pragma unroll
                for (int e = 0; e < 8; e++)
                    if ((c0 + c) * 8 < hs)
                        s = fmaf(to_f(u[c].v[e]), to_f(w[c].v[e]), s);
        }
    } else {
        for (int d = 0; d < hs; d++)
            s = fmaf(to_f(dy[d]), to_f(y[d]), s);
    }
    return s;
}

/* Each lane's byte offset in a tile of row stride LD for the three ldmatrix
 * patterns below (lane i addresses row i % 8 of matrix i / 8):
 *   a:  A fragments of 16 rows x 16 columns: matrices (rows 0-7 | 8-15) x (columns 0-7 | 8-15)
 *   b:  B fragments of two n-tiles from 16 rows read as n (B(k, n) = tile[n][k]):
 *       matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15)
 *   bt: B fragments of two n-tiles from 16 rows read as k (B(k, n) = tile[k][n]), .trans:
 *       matrices (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15) */
template <int LD> static __device__ __forceinline__ int am_off_a(int lane)
{
    return ((lane % 16) * LD + lane / 16 * 8) * 2;
}
template <int LD> static __device__ __forceinline__ int am_off_b(int lane)
{
    return ((lane % 8 + lane / 16 * 8) * LD + (lane / 8) % 2 * 8) * 2;
}
template <int LD> static __device__ __forceinline__ int am_off_bt(int lane)
{
    return ((lane % 8 + (lane / 8) % 2 * 8) * LD + lane / 16 * 8) * 2;
}

/* c[NT][4] (16 x 8 NT fp32) += a b^T: a the 16 rows x 16 KC columns at a
 * (+ am_off_a; A fragments loaded a 16-column chunk at a time, so they
 * hold 4 registers), b^T the 8 NT rows of the tile at b (+ am_off_b) as B,
 * B(k, n) = tile[n][k] */
template <int NT, int KC, int LD, int KU = KC>
static __device__ __forceinline__ void am_abt(float (*c)[4], gc_smem_t a, gc_smem_t b)
{
#pragma unroll(KU)
    for (int kc = 0; kc < KC; kc++) {
        uint32_t af[4];
        gc_ldmatrix_x4(af, a + kc * 16 * 2);
#pragma unroll
        for (int n2 = 0; n2 < NT / 2; n2++) {
            uint32_t f[4];
            gc_ldmatrix_x4(f, b + (n2 * 16 * LD + kc * 16) * 2);
            gc_mma_bf16_16816(c[2 * n2], af, f);
            gc_mma_bf16_16816(c[2 * n2 + 1], af, f + 2);
        }
    }
}

/* o[OT][4] (16 x 8 OT) += p (16 x 8 NT: the C fragments s[NT][4], rounded to
 * bf16 here as A fragments) times the 8 NT rows of the tile at b (+
 * am_off_bt) as B, B(k, n) = tile[k][n] */
template <int NT, int OT, int LD>
static __device__ __forceinline__ void am_pb(float (*o)[4], const float (*s)[4], gc_smem_t b)
{
#pragma unroll
    for (int kc = 0; kc < NT / 2; kc++) {
        uint32_t p[4] = {gc_pack_bf16(s[2 * kc][0], s[2 * kc][1]), gc_pack_bf16(s[2 * kc][2], s[2 * kc][3]),
                         gc_pack_bf16(s[2 * kc + 1][0], s[2 * kc + 1][1]),
                         gc_pack_bf16(s[2 * kc + 1][2], s[2 * kc + 1][3])};
#pragma unroll
        for (int o2 = 0; o2 < OT / 2; o2++) {
            uint32_t f[4];
            gc_ldmatrix_x4_trans(f, b + (kc * 16 * LD + o2 * 16) * 2);
            gc_mma_bf16_16816(o[2 * o2], p, f);
            gc_mma_bf16_16816(o[2 * o2 + 1], p, f + 2);
        }
    }
}

/* out (+)= the 16 x HS fragments o times mul, rows row0 + g (+8) below T, columns below hs */
template <int OT>
static __device__ __forceinline__ void am_put(gc_bf16 *out, long st, const float (*o)[4], float mul, long row0,
                                              long T, int hs, int acc, int lane)
{
    int g = lane / 4, tg = lane % 4;
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        long row = row0 + g + 8 * rr;
        if (row >= T)
            continue;
#pragma unroll
        for (int ot = 0; ot < OT; ot++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int col = ot * 8 + 2 * tg + e;
                if (col < hs)
                    put(out + row * st + col, o[ot][2 * rr + e] * mul, acc);
            }
    }
}

/* __launch_bounds__: the forward asks no minimum of blocks per SM
 * (ptxas's own choice, nvcc 13.0, sm_90: 100 registers at HS = 64; asking
 * for 4 blocks made it spill). dq and dk/dv ask AmCfg's minimum: at HS = 64
 * 4 and 2 blocks (128 registers, no spills since dq's key tiles are 16 and
 * dk/dv's warps hold one accumulator, and dk/dv's A-fragment loop is not
 * unrolled: unrolled, ptxas kept every chunk's fragments live and spilled);
 * 1 elsewhere, without which ptxas for sm_80 capped dq<32> at 96-128
 * registers and spilled 8 bytes (bench/RESULTS.md, issue 24). */
#define AM_BOUNDS __launch_bounds__(AM_THREADS)
#define AM_BOUNDS_DQ __launch_bounds__(AM_THREADS, AmCfg<HS>::DQ_MINB)
#define AM_BOUNDS_KV __launch_bounds__(AM_KV_THREADS, AmCfg<HS>::KV_MINB)

template <int HS>
__global__ void AM_BOUNDS attention_fwd_mma_kernel(AttP<gc_bf16> a)
{
#ifndef GC_MMA_NONE
    constexpr int BN = AmCfg<HS>::FWD_BN, LD = HS + 8, KC = HS / 16, NT = BN / 8, OT = HS / 8;
    constexpr int STAGE = 2 * BN * LD * 2;   /* bytes: k rows, then v rows */
    GC_DYN_SHARED(AmChunk, am_smem);
    gc_bf16 *sm = (gc_bf16 *)am_smem, *st0 = sm + AM_ROWS * LD;   /* q (64 rows), then stage s: k, v (BN rows each) */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tg = lane % 4;
    const gc_smem_t qa = gc_smem(sm) + warp * 16 * LD * 2 + am_off_a<LD>(lane), S0 = gc_smem(st0);
    const long T = a.T, bh = a.bh0 + blockIdx.y, b = bh / a.NH, h = bh % a.NH, kvh = h / a.group;
    const long r0 = (long)(gridDim.x - 1 - blockIdx.x) * AM_ROWS, rw = r0 + warp * 16;
    const gc_bf16 *q = a.q + b * a.qb + h * a.qh, *k = a.k + b * a.kb + kvh * a.kh, *v = a.v + b * a.kb + kvh * a.kh;
    const long last = r0 + AM_ROWS < T ? r0 + AM_ROWS : T;
    const int ntiles = (int)((last + BN - 1) / BN);
    const int offb = am_off_b<LD>(lane), offbt = am_off_bt<LD>(lane);

    float o[OT][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int ot = 0; ot < OT; ot++)
        o[ot][0] = o[ot][1] = o[ot][2] = o[ot][3] = 0.0f;
    am_load<AM_ROWS, HS>(sm, q, a.qt, r0, T, a.hs, a.vec);
    am_load<BN, HS>(st0, k, a.kt, 0, T, a.hs, a.vec);
    am_load<BN, HS>(st0 + BN * LD, v, a.kt, 0, T, a.hs, a.vec);
    gc_cp_async_commit();   /* q and tile 0 */
    for (int j = 0; j < ntiles; j++) {
        if (j + 1 < ntiles) {   /* tile j+1 into the other stage, read last in iteration j-1 */
            gc_bf16 *nx = st0 + ((j + 1) & 1) * 2 * BN * LD;
            am_load<BN, HS>(nx, k, a.kt, (long)(j + 1) * BN, T, a.hs, a.vec);
            am_load<BN, HS>(nx + BN * LD, v, a.kt, (long)(j + 1) * BN, T, a.hs, a.vec);
        }
        gc_cp_async_commit();
        gc_cp_async_wait<1>();   /* tile j is in */
        __syncthreads();
        const long c0 = (long)j * BN;
        if (rw < T && c0 <= rw + 15) {   /* the warp has rows, and keys of the tile at or left of them */
            const gc_smem_t ks = S0 + (j & 1) * STAGE, vs = ks + BN * LD * 2;
            float s[NT][4];
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
                s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
            am_abt<NT, KC, LD>(s, qa, ks + offb);   /* s = q k^T */
            const bool diag = c0 + BN - 1 > rw;         /* some key above some row of the warp */
            const int d0 = diag ? (int)(rw - c0) : 0;   /* then in (-16, BN) */
#pragma unroll
            for (int rr = 0; rr < 2; rr++) {
                float mx = m[rr];
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        float x = s[nt][2 * rr + e] * a.sl2;
                        if (diag && nt * 8 + 2 * tg + e > d0 + g + 8 * rr)   /* key > row */
                            x = -INFINITY;
                        s[nt][2 * rr + e] = x;
                        mx = fmaxf(mx, x);
                    }
                mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 2));
                const float base = mx == -INFINITY ? 0.0f : mx, corr = exp2f(m[rr] - base);
                float sum = 0.0f;
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        float p = exp2f(s[nt][2 * rr + e] - base);
                        s[nt][2 * rr + e] = p;
                        sum += p;
                    }
                l[rr] = l[rr] * corr + sum;   /* this lane's part of the row sum */
                m[rr] = mx;
#pragma unroll
                for (int ot = 0; ot < OT; ot++) {
                    o[ot][2 * rr] *= corr;
                    o[ot][2 * rr + 1] *= corr;
                }
            }
            am_pb<NT, OT, LD>(o, s, vs + offbt);
        }
        __syncthreads();   /* stage j&1 read: iteration j+1 refills it */
    }
    gc_cp_async_wait<0>();
    if (rw >= T)
        return;
    float inv[2];
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {   /* the quad's sum: a butterfly, the same bits in its 4 lanes */
        l[rr] += __shfl_xor_sync(FULL_MASK, l[rr], 1);
        l[rr] += __shfl_xor_sync(FULL_MASK, l[rr], 2);
        inv[rr] = __fdividef(1.0f, l[rr]);   /* no IEEE division: its slow path is a call (a stack frame) */
        const long row = rw + g + 8 * rr;
        if (tg == 0 && row < T)
            a.lse[bh * T + row] = (m[rr] + log2f(l[rr])) * AM_LN2;
    }
#pragma unroll
    for (int ot = 0; ot < OT; ot++) {
        o[ot][0] *= inv[0], o[ot][1] *= inv[0];
        o[ot][2] *= inv[1], o[ot][3] *= inv[1];
    }
    am_put<OT>(a.out + b * a.yb + h * a.yh, a.yt, o, 1.0f, rw, T, a.hs, 0, lane);
#endif
}

template <int HS>
__global__ void AM_BOUNDS_DQ attention_dq_mma_kernel(AttP<gc_bf16> a)
{
#ifndef GC_MMA_NONE
    constexpr int BN = AmCfg<HS>::DQ_BN, LD = HS + 8, KC = HS / 16, NT = BN / 8, OT = HS / 8;
    constexpr int STAGE = 2 * BN * LD * 2;
    GC_DYN_SHARED(AmChunk, am_smem);
    gc_bf16 *sm = (gc_bf16 *)am_smem, *dys = sm + AM_ROWS * LD, *st0 = dys + AM_ROWS * LD;   /* q, dy, stages */
    float *Ds = (float *)(st0 + 4 * BN * LD);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tg = lane % 4;
    const gc_smem_t qa = gc_smem(sm) + warp * 16 * LD * 2 + am_off_a<LD>(lane), da = qa + AM_ROWS * LD * 2;
    const gc_smem_t S0 = gc_smem(st0);
    const long T = a.T, bh = a.bh0 + blockIdx.y, b = bh / a.NH, h = bh % a.NH, kvh = h / a.group;
    const long r0 = (long)(gridDim.x - 1 - blockIdx.x) * AM_ROWS, rw = r0 + warp * 16;
    const gc_bf16 *q = a.q + b * a.qb + h * a.qh, *k = a.k + b * a.kb + kvh * a.kh, *v = a.v + b * a.kb + kvh * a.kh;
    const gc_bf16 *dy = a.dy + b * a.yb + h * a.yh, *y = a.y + b * a.yb + h * a.yh;
    const long last = r0 + AM_ROWS < T ? r0 + AM_ROWS : T;
    const int ntiles = (int)((last + BN - 1) / BN);
    const int offb = am_off_b<LD>(lane), offbt = am_off_bt<LD>(lane);

    am_load<AM_ROWS, HS>(sm, q, a.qt, r0, T, a.hs, a.vec);
    am_load<AM_ROWS, HS>(dys, dy, a.yt, r0, T, a.hs, a.vec);
    am_load<BN, HS>(st0, k, a.kt, 0, T, a.hs, a.vec);
    am_load<BN, HS>(st0 + BN * LD, v, a.kt, 0, T, a.hs, a.vec);
    gc_cp_async_commit();   /* q, dy and tile 0 */
    if (threadIdx.x < AM_ROWS) {   /* D of the block's rows, once (FlashAttention-2's preprocessing) */
        long t = r0 + threadIdx.x;
        float d = t < T ? am_rowD<HS, 4>(dy + t * a.yt, y + t * a.yt, a.hs, a.vec) : 0.0f;
        Ds[threadIdx.x] = d;
        if (a.D && t < T)
            a.D[(bh - a.Dbh0) * T + t] = d;
    }
    __syncthreads();   /* D written */
    float lse2[2], Dr[2];
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        const long row = rw + g + 8 * rr;
        lse2[rr] = row < T ? a.lse[bh * T + row] * AM_LOG2E : 0.0f;
        Dr[rr] = Ds[warp * 16 + g + 8 * rr];
    }
    float dq[OT][4];
#pragma unroll
    for (int ot = 0; ot < OT; ot++)
        dq[ot][0] = dq[ot][1] = dq[ot][2] = dq[ot][3] = 0.0f;
    for (int j = 0; j < ntiles; j++) {
        if (j + 1 < ntiles) {
            gc_bf16 *nx = st0 + ((j + 1) & 1) * 2 * BN * LD;
            am_load<BN, HS>(nx, k, a.kt, (long)(j + 1) * BN, T, a.hs, a.vec);
            am_load<BN, HS>(nx + BN * LD, v, a.kt, (long)(j + 1) * BN, T, a.hs, a.vec);
        }
        gc_cp_async_commit();
        gc_cp_async_wait<1>();
        __syncthreads();
        const long c0 = (long)j * BN;
        if (rw < T && c0 <= rw + 15) {
            const gc_smem_t ks = S0 + (j & 1) * STAGE, vs = ks + BN * LD * 2;
            float s[NT][4], dp[NT][4];
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    s[nt][e] = dp[nt][e] = 0.0f;
            am_abt<NT, KC, LD>(s, qa, ks + offb);    /* s = q k^T */
            am_abt<NT, KC, LD>(dp, da, vs + offb);   /* dp = dy v^T */
            const bool diag = c0 + BN - 1 > rw;
            const int d0 = diag ? (int)(rw - c0) : 0;
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int rr = e / 2;
                    float p = diag && nt * 8 + 2 * tg + e % 2 > d0 + g + 8 * rr ? 0.0f
                                                                                : exp2f(s[nt][e] * a.sl2 - lse2[rr]);
                    s[nt][e] = p * (dp[nt][e] - Dr[rr]);   /* ds / scale */
                }
            am_pb<NT, OT, LD>(dq, s, ks + offbt);   /* dq += ds k */
        }
        __syncthreads();
    }
    gc_cp_async_wait<0>();
    if (rw < T)
        am_put<OT>(a.dq + b * a.qb + h * a.qh, a.qt, dq, a.scale, rw, T, a.hs, a.acc & 1, lane);
#endif
}

/* dk/dv's tile of query head h, rows [r0, r0 + BQ): q and dy by cp.async
 * into the stage st (the block's AM_KV_THREADS share the loads); lse
 * log2(e) and D of row threadIdx.x < BQ into *nl, *nd */
template <int HS, int BQ>
static __device__ __forceinline__ void am_kv_issue(const AttP<gc_bf16> &a, gc_bf16 *st, long b, long h, long r0,
                                                   float *nl, float *nd)
{
    const long T = a.T, qbh = b * a.NH + h;
    const gc_bf16 *dy = a.dy + b * a.yb + h * a.yh;
    am_load<BQ, HS, AM_KV_THREADS>(st, a.q + b * a.qb + h * a.qh, a.qt, r0, T, a.hs, a.vec);
    am_load<BQ, HS, AM_KV_THREADS>(st + BQ * (HS + 8), dy, a.yt, r0, T, a.hs, a.vec);
    if (threadIdx.x < BQ) {
        const long t = r0 + threadIdx.x;
        *nl = t < T ? a.lse[qbh * T + t] * AM_LOG2E : 0.0f;
        *nd = t >= T  ? 0.0f
              : a.D ? a.D[(qbh - a.Dbh0) * T + t]
                    : am_rowD<HS, 1>(dy + t * a.yt, a.y + b * a.yb + h * a.yh + t * a.yt, a.hs, a.vec);
    }
}

/* dk and dv: 8 warps, a pair per 16 keys, so that a thread holds one 16 x HS
 * accumulator (dk and dv in one warp were 168 registers at HS = 64: 12 warps
 * per SM). Warp w < 4 (the p warp of keys w) forms s^T = k q^T and p^T,
 * hands p^T to its partner through shared memory (C fragments, one 16-byte
 * store and load per lane and 8 columns) and adds dv += p^T dy; warp w + 4
 * forms dp^T = v dy^T, takes p^T after the barrier, ds^T = p^T (dp^T - D)
 * and adds dk += ds^T q. The same products and the same roundings as one
 * warp doing both (bit-identical), two products a warp per tile, one
 * before and one after the tile's middle barrier. */
template <int HS>
__global__ void AM_BOUNDS_KV attention_dkdv_mma_kernel(AttP<gc_bf16> a)
{
#ifndef GC_MMA_NONE
    constexpr int BQ = AmCfg<HS>::KV_BQ, LD = HS + 8, KC = HS / 16, NT = BQ / 8, OT = HS / 8;
    constexpr int STAGE = 2 * BQ * LD * 2;   /* bytes: q rows, then dy rows */
    GC_DYN_SHARED(AmChunk, am_smem);
    gc_bf16 *sm = (gc_bf16 *)am_smem;   /* k (64 rows), v (64 rows), then stages of q, dy (BQ rows each) */
    const gc_smem_t S0 = gc_smem(sm), Q0 = S0 + 2 * AM_ROWS * LD * 2;
    float *Ls = (float *)(sm + (2 * AM_ROWS + 4 * BQ) * LD), *Dt = Ls + 2 * BQ;   /* [stage][BQ]: lse log2e, D */
    AmF4 *Px = (AmF4 *)(Dt + 2 * BQ);                                             /* [key warp][NT][lane]: p^T */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tg = lane % 4;
    const int wk = warp % 4, dwarp = warp / 4;   /* keys wk; 0: p, dv; 1: dp, dk */
    const long T = a.T, NKV = a.NH / a.group, bkv = a.bh0 + blockIdx.y, b = bkv / NKV, kvh = bkv % NKV;
    const long c0 = (long)blockIdx.x * AM_ROWS, kw = c0 + wk * 16;   /* the first blocks have the most rows */
    const long koff = b * a.kb + kvh * a.kh;
    const long hend = kvh * a.group + a.group;   /* the group's query heads: [hend - group, hend) */
    /* A fragments: k rows (p warps) or v rows (dk warps); B tiles: q then dy rows of a stage,
       the p warps read (q, dy), the dk warps (dy, q) */
    const gc_smem_t fa = S0 + (dwarp * AM_ROWS + wk * 16) * LD * 2 + am_off_a<LD>(lane);
    const int tb = dwarp * BQ * LD * 2, to = (1 - dwarp) * BQ * LD * 2;   /* byte offsets in a stage */
    const int offb = am_off_b<LD>(lane) + tb, offbt = am_off_bt<LD>(lane) + to;
    AmF4 *px = Px + wk * NT * 32 + lane;

    am_load<AM_ROWS, HS, AM_KV_THREADS>(sm, a.k + koff, a.kt, c0, T, a.hs, a.vec);
    am_load<AM_ROWS, HS, AM_KV_THREADS>(sm + AM_ROWS * LD, a.v + koff, a.kt, c0, T, a.hs, a.vec);
    /* tile it's q and dy by cp.async into stage stg; lse and D of its rows into nl, nd (registers),
       stored before the barrier that precedes the tile's use, so their loads overlap the products */
    float nl = 0.0f, nd = 0.0f;
    long nh = hend - a.group, nr0 = c0;   /* the next tile to issue: head, first row */
    am_kv_issue<HS, BQ>(a, sm + 2 * AM_ROWS * LD, b, nh, nr0, &nl, &nd);
    gc_cp_async_commit();   /* k, v and tile 0 */
    if (threadIdx.x < BQ)
        Ls[threadIdx.x] = nl, Dt[threadIdx.x] = nd;

    float acc[OT][4];   /* dv (p warps) or dk / scale (dk warps) */
#pragma unroll
    for (int ot = 0; ot < OT; ot++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            acc[ot][e] = 0.0f;
    /* the tiles: each query head of the group, its rows from c0 in steps of BQ (no 64-bit
       division per tile: with it, the kernel spilled at 128 registers) */
#pragma unroll 1
    for (int stg = 0; nh < hend; stg ^= 1) {
        const long r0 = nr0;
        nr0 += BQ;
        if (nr0 >= T)
            nr0 = c0, nh++;
        const bool more = nh < hend;
        if (more)   /* into the other stage, read in the previous iteration */
            am_kv_issue<HS, BQ>(a, sm + (2 * AM_ROWS + (stg ^ 1) * 2 * BQ) * LD, b, nh, nr0, &nl, &nd);
        gc_cp_async_commit();
        gc_cp_async_wait<1>();
        __syncthreads();
        const bool act = kw < T && r0 + BQ - 1 >= kw;   /* the warp has keys, and rows of the tile at or below them */
        const gc_smem_t qs = Q0 + stg * STAGE;
        const float *ls = Ls + stg * BQ, *Ds = Dt + stg * BQ;
        float s[NT][4];   /* s^T, then p^T (p warps); dp^T, then ds^T / scale (dk warps) */
        if (act) {
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    s[nt][e] = 0.0f;
            am_abt<NT, KC, LD, 1>(s, fa, qs + offb);   /* s^T = k q^T, or dp^T = v dy^T: 16 keys x BQ rows */
            if (dwarp == 0) {
                const bool diag = r0 < kw + 15;                       /* some row above some key of the warp */
                const int d0 = (int)(kw - r0);                        /* in (-BQ, 16): row < key when ri < d0 + key's g */
                const int nr = T - r0 < BQ ? (int)(T - r0) : BQ;      /* rows of the tile below T */
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int ri = nt * 8 + 2 * tg + e % 2;   /* the row in the tile; the key is kw + g + 8 (e / 2) */
                        s[nt][e] = ri >= nr || (diag && ri < d0 + g + 8 * (e / 2)) ? 0.0f
                                                                                 : exp2f(s[nt][e] * a.sl2 - ls[ri]);
                    }
                    px[nt * 32] = AmF4{{s[nt][0], s[nt][1], s[nt][2], s[nt][3]}};
                }
            }
        }
        __syncthreads();   /* p^T handed over */
        if (act) {
            if (dwarp == 1) {
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    const AmF4 p = px[nt * 32];
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        s[nt][e] = p.v[e] * (s[nt][e] - Ds[nt * 8 + 2 * tg + e % 2]);   /* ds^T / scale */
                }
            }
            am_pb<NT, OT, LD>(acc, s, qs + offbt);   /* dv += p^T dy, or dk += ds^T q */
        }
        if (more && threadIdx.x < BQ)
            Ls[(stg ^ 1) * BQ + threadIdx.x] = nl, Dt[(stg ^ 1) * BQ + threadIdx.x] = nd;
        __syncthreads();
    }
    gc_cp_async_wait<0>();
    if (kw >= T)
        return;
    if (dwarp == 0)
        am_put<OT>(a.dv + koff, a.kt, acc, 1.0f, kw, T, a.hs, a.acc & 4, lane);
    else
        am_put<OT>(a.dk + koff, a.kt, acc, a.scale, kw, T, a.hs, a.acc & 2, lane);
#endif
}

/* dynamic shared memory above 48 KiB needs the kernel's attribute, once */
template <class F> static void am_smem_attr(F kernel, size_t bytes, int *done)
{
    if (bytes > 48 * 1024 && !*done) {
        GC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
        *done = 1;
    }
}

template <int HS> static void am_fwd_hs(const AttP<gc_bf16> &a, long nbh)
{
    static int attr;
    am_smem_attr(attention_fwd_mma_kernel<HS>, am_fwd_smem<HS>(), &attr);
    dim3 grid(ceil_div(a.T, AM_ROWS), (unsigned)nbh);
    GC_LAUNCH(attention_fwd_mma_kernel<HS>, grid, AM_THREADS, am_fwd_smem<HS>(), a);
}

template <int HS> static void am_bwd_hs(const AttP<gc_bf16> &a, long nkv)
{
    static int attr_dq, attr_kv;
    am_smem_attr(attention_dq_mma_kernel<HS>, am_dq_smem<HS>(), &attr_dq);
    am_smem_attr(attention_dkdv_mma_kernel<HS>, am_dkdv_smem<HS>(), &attr_kv);
    AttP<gc_bf16> k = a;
    k.bh0 = a.bh0 / a.group;
    GC_LAUNCH(attention_dq_mma_kernel<HS>, dim3(ceil_div(a.T, AM_ROWS), (unsigned)(nkv * a.group)), AM_THREADS,
              am_dq_smem<HS>(), a);
    GC_LAUNCH(attention_dkdv_mma_kernel<HS>, dim3(ceil_div(a.T, AM_ROWS), (unsigned)nkv), AM_KV_THREADS,
              am_dkdv_smem<HS>(), k);
}

/* the forward over query heads [bh0, bh0 + nbh) */
static void attention_fwd_mma(const AttP<gc_bf16> &a, long nbh)
{
    if (a.hs <= 32)
        am_fwd_hs<32>(a, nbh);
    else if (a.hs <= 64)
        am_fwd_hs<64>(a, nbh);
    else
        am_fwd_hs<128>(a, nbh);
}

/* the backward over kv heads [bh0 / group, + nkv) and their query heads */
static void attention_bwd_mma(const AttP<gc_bf16> &a, long nkv)
{
    if (a.hs <= 32)
        am_bwd_hs<32>(a, nkv);
    else if (a.hs <= 64)
        am_bwd_hs<64>(a, nkv);
    else
        am_bwd_hs<128>(a, nkv);
}

/* ---------------------------------------------------------------- the fragment layouts, for tests */
/* One warp: a (16 x 16), b (16 x 8, k x n: bkn[k 8 + n]; bnk its transpose,
 * bnk[n 16 + k]) bf16, c (16 x 8) fp32, all row-major. d[0..128): c + a b
 * with the fragments built from global memory by gc_mma.h's table; d[128..256):
 * the same through shared memory (cp.async), a by ldmatrix.x4 and b by
 * ldmatrix.x4.trans of bkn; d[256..384): b by ldmatrix.x4 of bnk; d as the C
 * table says. raw[lane 12 + j]: j < 4 ldmatrix.x4 of a (matrix j: rows
 * 8 (j % 2).., columns 8 (j / 2)..), j 4..8 the same .trans, j 8..12
 * ldmatrix.x4.trans of bkn (matrices: k rows 0-7, 8-15, 0-7, 8-15). */
static __global__ void mma_selftest_kernel(float *d, uint32_t *raw, const gc_bf16 *a, const gc_bf16 *bkn, const gc_bf16 *bnk,
                                    const float *c)
{
#ifndef GC_MMA_NONE
    enum { LDS = 24 };   /* 48-byte rows: 16-byte aligned */
    __shared__ AmChunk sraw[3 * 16 * LDS / 8];
    gc_bf16 *sa = (gc_bf16 *)sraw, *sk = sa + 16 * LDS, *sn = sk + 16 * LDS;
    const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    auto A = [&](int r, int k) { return __bfloat162float(a[r * 16 + k]); };
    auto B = [&](int k, int n) { return __bfloat162float(bkn[k * 8 + n]); };
    uint32_t fa[4] = {gc_pack_bf16(A(g, 2 * t), A(g, 2 * t + 1)), gc_pack_bf16(A(g + 8, 2 * t), A(g + 8, 2 * t + 1)),
                      gc_pack_bf16(A(g, 2 * t + 8), A(g, 2 * t + 9)),
                      gc_pack_bf16(A(g + 8, 2 * t + 8), A(g + 8, 2 * t + 9))};
    uint32_t fb[2] = {gc_pack_bf16(B(2 * t, g), B(2 * t + 1, g)), gc_pack_bf16(B(2 * t + 8, g), B(2 * t + 9, g))};
    float acc[3][4];
#pragma unroll
    for (int m = 0; m < 3; m++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            acc[m][i] = c[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2];
    gc_mma_bf16_16816(acc[0], fa, fb);
    /* 16 rows of a (2 chunks each), 16 rows of bkn (1 chunk), 8 rows of bnk (2 chunks) */
    for (int i = lane; i < 32 + 16 + 16; i += 32) {
        if (i < 32)
            gc_cp_async16(gc_smem(sa + i / 2 * LDS + i % 2 * 8), a + i / 2 * 16 + i % 2 * 8, 16);
        else if (i < 48)
            gc_cp_async16(gc_smem(sk + (i - 32) * LDS), bkn + (i - 32) * 8, 16);
        else
            gc_cp_async16(gc_smem(sn + (i - 48) / 2 * LDS + (i - 48) % 2 * 8), bnk + (i - 48) / 2 * 16 + (i - 48) % 2 * 8, 16);
    }
    gc_cp_async_commit();
    gc_cp_async_wait<0>();
    __syncwarp();
    uint32_t la[4], lt[4], lk[4], ln[4];
    gc_ldmatrix_x4(la, gc_smem(sa + (lane % 16) * LDS + lane / 16 * 8));
    gc_ldmatrix_x4_trans(lt, gc_smem(sa + (lane % 16) * LDS + lane / 16 * 8));
    gc_ldmatrix_x4_trans(lk, gc_smem(sk + (lane % 16) * LDS));
    gc_ldmatrix_x4(ln, gc_smem(sn + (lane % 8) * LDS + (lane / 8) % 2 * 8));
    gc_mma_bf16_16816(acc[1], la, lk);
    gc_mma_bf16_16816(acc[2], la, ln);
#pragma unroll
    for (int m = 0; m < 3; m++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            d[m * 128 + (g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = acc[m][i];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        raw[lane * 12 + j] = la[j];
        raw[lane * 12 + 4 + j] = lt[j];
        raw[lane * 12 + 8 + j] = lk[j];
    }
#endif
}

void gc_cuda_mma_selftest(float *d, uint32_t *raw, const gc_bf16 *a, const gc_bf16 *bkn, const gc_bf16 *bnk,
                          const float *c)
{
    GC_LAUNCH(mma_selftest_kernel, 1, 32, 0, d, raw, a, bkn, bnk, c);
}
