/* attention_cuda.cu — fused causal attention on CUDA (gc_runtime.h, section
 * "attention_cpu.c / attention_cuda.cu"; the _bf16 entry points in
 * gc_cuda.h). Compiled as part of kernels_cuda.cu (included at its end), so
 * it shares its helpers and every build of the runtime picks it up.
 *
 * FlashAttention-2 scheme, two paths:
 *   SIMT (fp32 storage; bf16 storage when gc_cuda_attention_wmma() is off
 *   or the device is older than sm_80), fp32 arithmetic, specialised by
 *   head size at compile time: attention_simt.cu.
 *   Tensor cores (bf16 storage, sm_80+; "bf16 on tensor cores" below): the
 *   same blocks and kernels with q k^T, p v, p^T dy, dy v^T, ds^T q and
 *   ds k as nvcuda::wmma 16x16x16 bf16 products with fp32 accumulators;
 *   softmax statistics fp32. Unmeasured on a GPU so far (bench/RESULTS.md).
 *   The emulator runs it through tests/cuda/shim/mma.h.
 */
#include <mma.h>

struct AttGeom {
    long B, NH, T, hs, sb, sh, st, koff, voff, yb, yh, yt;
};

static AttGeom att_geom(const long *g)
{
    AttGeom a = {g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11]};
    if (a.hs < 1 || a.hs > GC_ATTENTION_MAXHS) {
        fprintf(stderr, "error: attention: head size %ld outside [1, %d]\n", a.hs, GC_ATTENTION_MAXHS);
        exit(1);
    }
    if (a.B * a.NH > 65535) {   /* the grid's y: one block row per (batch, head) */
        fprintf(stderr, "error: attention: B*NH = %ld above the grid's 65535\n", a.B * a.NH);
        exit(1);
    }
    return a;
}

/* D = dy . y of one row */
template <class T> __device__ float att_rowdot(const T *dy, const T *y, long hs)
{
    float s = 0.0f;
    for (long d = 0; d < hs; d++)
        s += to_f(dy[d]) * to_f(y[d]);
    return s;
}

#include "attention_simt.cu"

/* ---------------------------------------------------------------- bf16 on tensor cores */
/* The same scheme with every product on tensor cores through nvcuda::wmma
 * (16x16x16 bf16 fragments, fp32 accumulators); softmax statistics, p, ds
 * and D stay fp32 in SIMT code, and p and ds are rounded to bf16 once, as
 * the operands of the next product (FlashAttention-2 does the same).
 * A block is AW_WARPS warps of 16 rows (forward, dq) or 16 keys (dk/dv);
 * tiles of AW_KEYS keys (or rows) pass through shared memory as bf16,
 * zero-padded to a multiple of 16 in both directions, so any T and any head
 * size up to GC_ATTENTION_MAXHS run here (T = 37, hs = 12: one 16-wide
 * chunk, 4 of its columns zero). Causal masking and rows or keys past T are
 * applied to p (0) in the SIMT step. A warp owns its rows of the score tile,
 * so only K/V (Q/dO) tile loads need the block's barrier; the rest is
 * ordered by __syncwarp. Tile sizes are untuned (no GPU measured them). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define AW_NO_BF16_MMA 1   /* bf16 WMMA needs sm_80: kernels compile empty, and the host never launches them */
#endif

enum {
    AW = 16,                          /* the WMMA tile */
    AW_NF = GC_ATTENTION_MAXHS / AW,  /* 16-wide head chunks, at most */
    AW_WARPS = 2,
    AW_ROWS = AW_WARPS * AW,          /* query rows (forward, dq) or keys (dk/dv) per block */
    AW_KEYS = 32,                     /* keys (forward, dq) or query rows (dk/dv) per tile: 2 WMMA columns */
    AW_SLD = AW_KEYS + 4,             /* float row stride of a warp's 16 x AW_KEYS scores */
    AW_PLD = AW_KEYS + 8,             /* bf16 row stride of a warp's p / ds */
};
static_assert(GC_ATTENTION_MAXHS % AW == 0 && AW_KEYS == 2 * AW && AW_ROWS == AW_KEYS, "attention WMMA tiles");

/* Specialised by head size at compile time: NFM 16-wide chunks at most (4:
 * hs <= 64, GPT-2's; 8: hs <= 128), which sizes the register accumulators
 * (o, dk, dv, dq) and the tiles' bf16 row stride LD = 16 NFM + 8. */
template <int NFM> struct AttFwdShared {   /* NFM = 8: 33,280 bytes; 4: 20,992 */
    static const int LD = NFM * AW + 8;
    alignas(32) gc_bf16 a[AW_ROWS * LD];                          /* q: this block's rows */
    alignas(32) gc_bf16 k[AW_KEYS * LD], v[AW_KEYS * LD];
    alignas(32) float s[AW_WARPS][AW * AW_SLD];                   /* a warp's scores; its output chunks */
    alignas(32) gc_bf16 p[AW_WARPS][AW * AW_PLD];
};
template <int NFM> struct AttBwdShared {   /* dk/dv; NFM = 8: 44,544 bytes; 4: 28,160 (8 blocks per SM) */
    static const int LD = NFM * AW + 8;
    alignas(32) gc_bf16 a[AW_ROWS * LD], b[AW_ROWS * LD];         /* q, dy: the tile's rows */
    alignas(32) gc_bf16 k[AW_KEYS * LD], v[AW_KEYS * LD];         /* this block's keys */
    alignas(32) float s[AW_WARPS][AW * AW_SLD];
    alignas(32) gc_bf16 p[AW_WARPS][AW * AW_PLD], ds[AW_WARPS][AW * AW_PLD];
};
template <int NFM> struct AttDqShared {    /* NFM = 8: 42,240 bytes; 4: 25,856 */
    static const int LD = NFM * AW + 8;
    alignas(32) gc_bf16 a[AW_ROWS * LD], b[AW_ROWS * LD];         /* q, dy: this block's rows */
    alignas(32) gc_bf16 k[AW_KEYS * LD], v[AW_KEYS * LD];         /* the tile's keys */
    alignas(32) float s[AW_WARPS][AW * AW_SLD];
    alignas(32) gc_bf16 ds[AW_WARPS][AW * AW_PLD];
    float lse[AW_ROWS], D[AW_ROWS];
};
static_assert(sizeof(AttBwdShared<AW_NF>) <= 48 * 1024 && sizeof(AttDqShared<AW_NF>) <= 48 * 1024,
              "static shared memory above 48 KiB");

/* dst[r*ld + d] = rows[r*st + d] for r < n, d < hs; zero elsewhere up to nr
 * rows and hsp columns; the block's threads share the work */
static __device__ void aw_load_tile(gc_bf16 *dst, const gc_bf16 *rows, long st, long n, long hs, int nr, int hsp, int ld)
{
    const gc_bf16 zero = __float2bfloat16(0.0f);
    for (int i = threadIdx.x; i < nr * hsp; i += blockDim.x) {
        int r = i / hsp, d = i % hsp;
        dst[r * ld + d] = r < n && d < hs ? rows[r * st + d] : zero;
    }
}

#ifndef AW_NO_BF16_MMA
namespace wm = nvcuda::wmma;
typedef wm::fragment<wm::matrix_a, 16, 16, 16, __nv_bfloat16, wm::row_major> AwA;
typedef wm::fragment<wm::matrix_b, 16, 16, 16, __nv_bfloat16, wm::row_major> AwB;    /* B as stored */
typedef wm::fragment<wm::matrix_b, 16, 16, 16, __nv_bfloat16, wm::col_major> AwBt;   /* a row-major tile, transposed */
typedef wm::fragment<wm::accumulator, 16, 16, 16, float> AwC;

/* out (16 x AW_KEYS floats, stride AW_SLD) = a (16 x hsp) . b^T, b being
 * AW_KEYS rows of hsp; a and b bf16 with row stride ld. The warp's call. */
static __device__ void aw_abt(float *out, const gc_bf16 *a, const gc_bf16 *b, int nf, int ld)
{
    for (int j = 0; j < AW_KEYS / AW; j++) {
        AwC c;
        wm::fill_fragment(c, 0.0f);
        for (int f = 0; f < nf; f++) {
            AwA fa;
            AwBt fb;
            wm::load_matrix_sync(fa, a + f * AW, ld);
            wm::load_matrix_sync(fb, b + j * AW * ld + f * AW, ld);
            wm::mma_sync(c, fa, fb, c);
        }
        wm::store_matrix_sync(out + j * AW, c, AW_SLD, wm::mem_row_major);
    }
}

/* c += p (16 x AW_KEYS bf16, stride AW_PLD) . b (AW_KEYS x 16 bf16, stride ld). The warp's call. */
static __device__ void aw_pb(AwC &c, const gc_bf16 *p, const gc_bf16 *b, int ld)
{
    for (int j = 0; j < AW_KEYS / AW; j++) {
        AwA fa;
        AwB fb;
        wm::load_matrix_sync(fa, p + j * AW, AW_PLD);
        wm::load_matrix_sync(fb, b + j * AW * ld, ld);
        wm::mma_sync(c, fa, fb, c);
    }
}

/* The accumulator chunk c (16 x 16) of rows row0.. and columns d0.. put into
 * out (row stride st) through the warp's scratch s: lane = (row i, 8 columns) */
static __device__ void aw_put_chunk(gc_bf16 *out, long st, float *s, const AwC &c, long row0, long T, int d0, long hs,
                             int acc)
{
    int lane = threadIdx.x % 32, i = lane / 2, c0 = lane % 2 * 8;
    wm::store_matrix_sync(s, c, AW_SLD, wm::mem_row_major);
    __syncwarp();
    if (row0 + i < T)
        for (int e = 0; e < 8; e++)
            if (d0 + c0 + e < hs)
                put(out + (row0 + i) * st + d0 + c0 + e, s[i * AW_SLD + c0 + e], acc);
    __syncwarp();
}
#endif

static __device__ __forceinline__ long aw_min(long a, long b) { return a < b ? a : b; }

/* forward: a block per (AW_ROWS query rows, head); lane = (row i, 16 of the
 * tile's keys), so the two lanes of a row combine max and sum by one shuffle */
template <int NFM>
__global__ void __launch_bounds__(AW_WARPS * 32)
    attention_fwd_wmma_kernel(gc_bf16 *y, float *lse, const gc_bf16 *x, AttGeom g, float scale)
{
#ifndef AW_NO_BF16_MMA
    __shared__ AttFwdShared<NFM> sm;
    int w = threadIdx.x / 32, lane = threadIdx.x % 32, i = lane / 2, half = lane % 2;
    long bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH, hs = g.hs;
    int nf = (int)((hs + AW - 1) / AW), hsp = nf * AW, ld = hsp + 8;
    long r0 = (long)blockIdx.x * AW_ROWS, last = aw_min(r0 + AW_ROWS, g.T);
    long rw = r0 + w * AW, row = rw + i;   /* the warp's first row, this lane's */
    const gc_bf16 *q = x + b * g.sb + h * g.sh, *k = q + g.koff, *v = q + g.voff;
    float *ss = sm.s[w];
    gc_bf16 *ps = sm.p[w];
    aw_load_tile(sm.a, q + r0 * g.st, g.st, last - r0, hs, AW_ROWS, hsp, ld);
    float o[NFM][8], m = -INFINITY, l = 0.0f;
#pragma unroll
    for (int f = 0; f < NFM; f++)
        for (int e = 0; e < 8; e++)
            o[f][e] = 0.0f;
    for (long c0 = 0; c0 < last; c0 += AW_KEYS) {
        long nc = aw_min(AW_KEYS, last - c0);
        __syncthreads();   /* the previous tile's readers are done */
        aw_load_tile(sm.k, k + c0 * g.st, g.st, nc, hs, AW_KEYS, hsp, ld);
        aw_load_tile(sm.v, v + c0 * g.st, g.st, nc, hs, AW_KEYS, hsp, ld);
        __syncthreads();
        if (rw >= g.T || rw + AW - 1 < c0)
            continue;   /* the warp's rows are padding, or the tile is above its diagonal */
        aw_abt(ss, sm.a + w * AW * ld, sm.k, nf, ld);
        __syncwarp();
        float sv[AW], mx = m;
        for (int c = 0; c < AW; c++) {
            long key = c0 + half * AW + c;
            sv[c] = key <= row ? ss[i * AW_SLD + half * AW + c] * scale : -INFINITY;
            mx = fmaxf(mx, sv[c]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 1));
        float base = mx == -INFINITY ? 0.0f : mx, corr = expf(m - base), sum = 0.0f;
        for (int c = 0; c < AW; c++) {
            float p = expf(sv[c] - base);
            sum += p;
            ps[i * AW_PLD + half * AW + c] = __float2bfloat16(p);
        }
        sum += __shfl_xor_sync(FULL_MASK, sum, 1);   /* a + b in one lane, b + a in the other: same bits */
        l = l * corr + sum;
        m = mx;
        __syncwarp();   /* p written, the scores read */
#pragma unroll
        for (int f = 0; f < NFM; f++) {
            if (f >= nf)
                break;
            AwC c;
            wm::fill_fragment(c, 0.0f);
            aw_pb(c, ps, sm.v + f * AW, ld);
            wm::store_matrix_sync(ss, c, AW_SLD, wm::mem_row_major);
            __syncwarp();
            for (int e = 0; e < 8; e++)
                o[f][e] = o[f][e] * corr + ss[i * AW_SLD + half * 8 + e];
            __syncwarp();
        }
    }
    if (row >= g.T)
        return;
    float inv = 1.0f / l;
    gc_bf16 *yr = y + b * g.yb + h * g.yh + row * g.yt;
#pragma unroll
    for (int f = 0; f < NFM; f++)
        for (int e = 0; e < 8; e++)
            if (f * AW + half * 8 + e < hs)
                yr[f * AW + half * 8 + e] = __float2bfloat16(o[f][e] * inv);
    if (half == 0)
        lse[bh * g.T + row] = m + logf(l);
#endif
}

/* dk, dv: a block per (AW_ROWS keys, head), a warp per 16 keys; walks the
 * query tiles at or below its keys: s^T = k q^T, p, dp^T = v dy^T, ds;
 * dv += p^T dy, dk += ds^T q in accumulators */
template <int NFM>
__global__ void __launch_bounds__(AW_WARPS * 32, NFM <= 4 ? 8 : 1)   /* hs <= 64: 16 warps per SM */
    attention_dkdv_wmma_kernel(gc_bf16 *dx, const gc_bf16 *dy, const gc_bf16 *x, const gc_bf16 *y, const float *lse,
                               AttGeom g, float scale, int acc)
{
#ifndef AW_NO_BF16_MMA
    __shared__ AttBwdShared<NFM> sm;
    int w = threadIdx.x / 32, lane = threadIdx.x % 32, i = lane / 2, half = lane % 2;
    long bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH, hs = g.hs;
    int nf = (int)((hs + AW - 1) / AW), hsp = nf * AW, ld = hsp + 8;
    long c0 = (long)blockIdx.x * AW_ROWS, kw = c0 + w * AW, key = kw + i;
    long hoff = b * g.sb + h * g.sh, yoff = b * g.yb + h * g.yh;
    const gc_bf16 *q = x + hoff;
    float *ss = sm.s[w];
    aw_load_tile(sm.k, q + g.koff + c0 * g.st, g.st, aw_min(AW_ROWS, g.T - c0), hs, AW_ROWS, hsp, ld);
    aw_load_tile(sm.v, q + g.voff + c0 * g.st, g.st, aw_min(AW_ROWS, g.T - c0), hs, AW_ROWS, hsp, ld);
    AwC dk[NFM], dv[NFM];
#pragma unroll
    for (int f = 0; f < NFM; f++) {
        wm::fill_fragment(dk[f], 0.0f);
        wm::fill_fragment(dv[f], 0.0f);
    }
    for (long r0 = c0; r0 < g.T; r0 += AW_KEYS) {
        long nr = aw_min(AW_KEYS, g.T - r0);
        __syncthreads();
        aw_load_tile(sm.a, q + r0 * g.st, g.st, nr, hs, AW_KEYS, hsp, ld);
        aw_load_tile(sm.b, dy + yoff + r0 * g.yt, g.yt, nr, hs, AW_KEYS, hsp, ld);
        __syncthreads();
        if (kw >= g.T)
            continue;   /* the warp's keys are padding */
        /* lane L holds lse and D of the tile's row r0 + L; the lanes that need them read them by
           shuffles (no shared arrays: at hs <= 64, 8 blocks fit an SM) */
        long rl = r0 + lane;
        float lse_l = rl < g.T ? lse[bh * g.T + rl] : 0.0f;
        float D_l = rl < g.T ? att_rowdot(dy + yoff + rl * g.yt, y + yoff + rl * g.yt, hs) : 0.0f;
        aw_abt(ss, sm.k + w * AW * ld, sm.a, nf, ld);   /* s^T: 16 keys x AW_KEYS rows */
        __syncwarp();
        float pv[AW];
        for (int c = 0; c < AW; c++) {
            int r = half * AW + c;
            float lr = __shfl_sync(FULL_MASK, lse_l, r);
            pv[c] = r0 + r < g.T && key <= r0 + r ? expf(ss[i * AW_SLD + r] * scale - lr) : 0.0f;
            sm.p[w][i * AW_PLD + r] = __float2bfloat16(pv[c]);
        }
        __syncwarp();
        aw_abt(ss, sm.v + w * AW * ld, sm.b, nf, ld);   /* dp^T */
        __syncwarp();
        for (int c = 0; c < AW; c++) {
            int r = half * AW + c;
            float Dr = __shfl_sync(FULL_MASK, D_l, r);
            sm.ds[w][i * AW_PLD + r] = __float2bfloat16(pv[c] * (ss[i * AW_SLD + r] - Dr) * scale);
        }
        __syncwarp();
#pragma unroll
        for (int f = 0; f < NFM; f++) {
            if (f >= nf)
                break;
            aw_pb(dv[f], sm.p[w], sm.b + f * AW, ld);
            aw_pb(dk[f], sm.ds[w], sm.a + f * AW, ld);
        }
    }
    if (kw >= g.T)
        return;
#pragma unroll
    for (int f = 0; f < NFM; f++) {
        if (f >= nf)
            break;
        aw_put_chunk(dx + hoff + g.koff, g.st, ss, dk[f], kw, g.T, f * AW, hs, acc);
        aw_put_chunk(dx + hoff + g.voff, g.st, ss, dv[f], kw, g.T, f * AW, hs, acc);
    }
#endif
}

/* dq: a block per (AW_ROWS query rows, head), a warp per 16 rows; walks the
 * key tiles at or left of the diagonal: s = q k^T, p, dp = dy v^T, ds;
 * dq += ds k in accumulators */
template <int NFM>
__global__ void __launch_bounds__(AW_WARPS * 32)
    attention_dq_wmma_kernel(gc_bf16 *dx, const gc_bf16 *dy, const gc_bf16 *x, const gc_bf16 *y, const float *lse,
                             AttGeom g, float scale, int acc)
{
#ifndef AW_NO_BF16_MMA
    __shared__ AttDqShared<NFM> sm;
    int w = threadIdx.x / 32, lane = threadIdx.x % 32, i = lane / 2, half = lane % 2;
    long bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH, hs = g.hs;
    int nf = (int)((hs + AW - 1) / AW), hsp = nf * AW, ld = hsp + 8;
    long r0 = (long)blockIdx.x * AW_ROWS, last = aw_min(r0 + AW_ROWS, g.T);
    long rw = r0 + w * AW, row = rw + i;
    long hoff = b * g.sb + h * g.sh, yoff = b * g.yb + h * g.yh;
    const gc_bf16 *q = x + hoff;
    float *ss = sm.s[w];
    aw_load_tile(sm.a, q + r0 * g.st, g.st, last - r0, hs, AW_ROWS, hsp, ld);
    aw_load_tile(sm.b, dy + yoff + r0 * g.yt, g.yt, last - r0, hs, AW_ROWS, hsp, ld);
    for (int r = threadIdx.x; r < AW_ROWS; r += blockDim.x) {
        sm.lse[r] = r0 + r < g.T ? lse[bh * g.T + r0 + r] : 0.0f;
        sm.D[r] = r0 + r < g.T ? att_rowdot(dy + yoff + (r0 + r) * g.yt, y + yoff + (r0 + r) * g.yt, hs) : 0.0f;
    }
    AwC dq[NFM];
#pragma unroll
    for (int f = 0; f < NFM; f++)
        wm::fill_fragment(dq[f], 0.0f);
    for (long c0 = 0; c0 < last; c0 += AW_KEYS) {
        long nc = aw_min(AW_KEYS, last - c0);
        __syncthreads();
        aw_load_tile(sm.k, q + g.koff + c0 * g.st, g.st, nc, hs, AW_KEYS, hsp, ld);
        aw_load_tile(sm.v, q + g.voff + c0 * g.st, g.st, nc, hs, AW_KEYS, hsp, ld);
        __syncthreads();
        if (rw >= g.T || rw + AW - 1 < c0)
            continue;
        float lr = sm.lse[w * AW + i], D = sm.D[w * AW + i];
        aw_abt(ss, sm.a + w * AW * ld, sm.k, nf, ld);   /* s: 16 rows x AW_KEYS keys */
        __syncwarp();
        float pv[AW];
        for (int c = 0; c < AW; c++) {
            long kc = c0 + half * AW + c;
            pv[c] = row < g.T && kc <= row ? expf(ss[i * AW_SLD + half * AW + c] * scale - lr) : 0.0f;
        }
        __syncwarp();
        aw_abt(ss, sm.b + w * AW * ld, sm.v, nf, ld);   /* dp */
        __syncwarp();
        for (int c = 0; c < AW; c++)
            sm.ds[w][i * AW_PLD + half * AW + c] =
                __float2bfloat16(pv[c] * (ss[i * AW_SLD + half * AW + c] - D) * scale);
        __syncwarp();
#pragma unroll
        for (int f = 0; f < NFM; f++) {
            if (f >= nf)
                break;
            aw_pb(dq[f], sm.ds[w], sm.k + f * AW, ld);
        }
    }
    if (rw >= g.T)
        return;
#pragma unroll
    for (int f = 0; f < NFM; f++) {
        if (f >= nf)
            break;
        aw_put_chunk(dx + hoff, g.st, ss, dq[f], rw, g.T, f * AW, hs, acc);
    }
#endif
}

static int att_wmma = 1;

void gc_cuda_set_attention_wmma(int on) { att_wmma = on != 0; }
int gc_cuda_attention_wmma(void) { return att_wmma && gc_cuda_cc_major() >= 8; }

static void attention_fwd_wmma(gc_bf16 *y, float *lse, const gc_bf16 *x, const AttGeom &g, float scale)
{
    dim3 grid(ceil_div(g.T, (long)AW_ROWS), (unsigned)(g.B * g.NH));
    if (g.hs <= 4 * AW)
        GC_LAUNCH(attention_fwd_wmma_kernel<4>, grid, AW_WARPS * 32, 0, y, lse, x, g, scale);
    else
        GC_LAUNCH(attention_fwd_wmma_kernel<AW_NF>, grid, AW_WARPS * 32, 0, y, lse, x, g, scale);
}

static void attention_bwd_wmma(gc_bf16 *dx, const gc_bf16 *dy, const gc_bf16 *x, const gc_bf16 *y, const float *lse,
                               const AttGeom &g, float scale, int acc)
{
    dim3 grid(ceil_div(g.T, (long)AW_ROWS), (unsigned)(g.B * g.NH));
    if (g.hs <= 4 * AW) {
        GC_LAUNCH(attention_dkdv_wmma_kernel<4>, grid, AW_WARPS * 32, 0, dx, dy, x, y, lse, g, scale, acc & 1);
        GC_LAUNCH(attention_dq_wmma_kernel<4>, grid, AW_WARPS * 32, 0, dx, dy, x, y, lse, g, scale, acc & 1);
    } else {
        GC_LAUNCH(attention_dkdv_wmma_kernel<AW_NF>, grid, AW_WARPS * 32, 0, dx, dy, x, y, lse, g, scale, acc & 1);
        GC_LAUNCH(attention_dq_wmma_kernel<AW_NF>, grid, AW_WARPS * 32, 0, dx, dy, x, y, lse, g, scale, acc & 1);
    }
}

void gc_attention_fwd(gc_real *y, gc_real *lse, const gc_real *x, const long *geom, float scale)
{
    attention_fwd(y, lse, x, geom, scale);
}

void gc_attention_bwd(gc_real *dx, const gc_real *dy, const gc_real *x, const gc_real *y, const gc_real *lse,
                      const long *geom, float scale, int acc)
{
    attention_bwd(dx, dy, x, y, lse, geom, scale, acc);
}

void gc_attention_fwd_bf16(gc_bf16 *y, float *lse, const gc_bf16 *x, const long *geom, float scale)
{
    AttGeom g = att_geom(geom);
    if (g.B * g.NH <= 0 || g.T <= 0)
        return;
    if (gc_cuda_attention_wmma())
        attention_fwd_wmma(y, lse, x, g, scale);
    else
        attention_fwd(y, lse, x, geom, scale);
}

void gc_attention_bwd_bf16(gc_bf16 *dx, const gc_bf16 *dy, const gc_bf16 *x, const gc_bf16 *y, const float *lse,
                           const long *geom, float scale, int acc)
{
    AttGeom g = att_geom(geom);
    if (g.B * g.NH <= 0 || g.T <= 0)
        return;
    if (gc_cuda_attention_wmma())
        attention_bwd_wmma(dx, dy, x, y, lse, g, scale, acc);
    else
        attention_bwd(dx, dy, x, y, lse, geom, scale, acc);
}
