/* attention_cuda.cu — fused causal attention on CUDA (gc_runtime.h, section
 * "attention_cpu.c / attention_cuda.cu"; the _bf16 entry points in
 * gc_cuda.h). Compiled as part of kernels_cuda.cu (included at its end), so
 * it shares its helpers and every build of the runtime picks it up.
 *
 * FlashAttention-2 scheme, two paths:
 *   SIMT (fp32 storage; bf16 storage when gc_cuda_attention_wmma() is off
 *   or the device is older than sm_80), fp32 arithmetic:
 *   forward   a block per (64 query rows, head); a thread per row keeps q,
 *             the running max, sum and unnormalised output; K/V tiles of
 *             32 keys pass through shared memory; tiles above the diagonal
 *             are never loaded. Saves y and one lse per row.
 *   backward  two kernels, no atomics (deterministic): dk/dv with a thread
 *             per key walking the query tiles at or below it, dq with a
 *             thread per query row walking the key tiles; both recompute
 *             p = exp(s - lse) and D = rowsum(dy * y).
 *   Tensor cores (bf16 storage, sm_80+; "bf16 on tensor cores" below): the
 *   same blocks and kernels with q k^T, p v, p^T dy, dy v^T, ds^T q and
 *   ds k as nvcuda::wmma 16x16x16 bf16 products with fp32 accumulators;
 *   softmax statistics fp32. Unmeasured on a GPU so far (bench/RESULTS.md).
 *   The emulator runs it through tests/cuda/shim/mma.h.
 */
#include <mma.h>

static const long ATT_FWD_ROWS = 64, ATT_TILE = 32;

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
    return a;
}

/* dst[r*hs + d] = rows[r*st + d] for r < n, 0 for n <= r < ATT_TILE; the
 * block's threads share the work */
template <class T>
__device__ void att_load_tile(float *dst, const T *rows, long st, long n, long hs)
{
    for (long i = threadIdx.x; i < ATT_TILE * hs; i += blockDim.x) {
        long r = i / hs, d = i % hs;
        dst[i] = r < n ? to_f(rows[r * st + d]) : 0.0f;
    }
}

template <class T>
__global__ void attention_fwd_kernel(T *y, float *lse, const T *x, AttGeom g, float scale)
{
    __shared__ float ks[ATT_TILE * GC_ATTENTION_MAXHS], vs[ATT_TILE * GC_ATTENTION_MAXHS];
    long bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH, hs = g.hs;
    long r0 = (long)blockIdx.x * ATT_FWD_ROWS, row = r0 + threadIdx.x;
    long last = r0 + ATT_FWD_ROWS < g.T ? r0 + ATT_FWD_ROWS : g.T;   /* rows [r0, last) */
    const T *q = x + b * g.sb + h * g.sh, *k = q + g.koff, *v = q + g.voff;
    float qr[GC_ATTENTION_MAXHS], acc[GC_ATTENTION_MAXHS], m = -INFINITY, l = 0.0f;
    bool live = row < g.T;
    for (long d = 0; d < hs; d++) {
        qr[d] = live ? to_f(q[row * g.st + d]) : 0.0f;
        acc[d] = 0.0f;
    }
    for (long c0 = 0; c0 < last; c0 += ATT_TILE) {
        long nc = last - c0 < ATT_TILE ? last - c0 : ATT_TILE;
        __syncthreads();                 /* the previous tile's readers are done */
        att_load_tile(ks, k + c0 * g.st, g.st, nc, hs);
        att_load_tile(vs, v + c0 * g.st, g.st, nc, hs);
        __syncthreads();
        long valid = live ? row - c0 + 1 : 0;
        if (valid > nc)
            valid = nc;
        float s[ATT_TILE], mx = m;
        for (long c = 0; c < valid; c++) {
            float dot = 0.0f;
            for (long d = 0; d < hs; d++)
                dot += qr[d] * ks[c * hs + d];
            s[c] = dot * scale;
            mx = fmaxf(mx, s[c]);
        }
        if (valid <= 0)
            continue;
        float corr = expf(m - mx), sum = 0.0f;
        for (long d = 0; d < hs; d++)
            acc[d] *= corr;
        for (long c = 0; c < valid; c++) {
            float p = expf(s[c] - mx);
            sum += p;
            for (long d = 0; d < hs; d++)
                acc[d] += p * vs[c * hs + d];
        }
        l = l * corr + sum;
        m = mx;
    }
    if (!live)
        return;
    float inv = 1.0f / l;
    T *yr = y + b * g.yb + h * g.yh + row * g.yt;
    for (long d = 0; d < hs; d++)
        store(yr + d, acc[d] * inv);
    lse[bh * g.T + row] = m + logf(l);
}

/* D = dy . y of one row */
template <class T> __device__ float att_rowdot(const T *dy, const T *y, long hs)
{
    float s = 0.0f;
    for (long d = 0; d < hs; d++)
        s += to_f(dy[d]) * to_f(y[d]);
    return s;
}

/* dk, dv: a thread per key, a block per ATT_TILE keys of one head */
template <class T>
__global__ void attention_dkdv_kernel(T *dx, const T *dy, const T *x, const T *y, const float *lse, AttGeom g,
                                      float scale, int acc)
{
    __shared__ float qs[ATT_TILE * GC_ATTENTION_MAXHS], dys[ATT_TILE * GC_ATTENTION_MAXHS], ls[ATT_TILE],
        Ds[ATT_TILE];
    long bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH, hs = g.hs;
    long c0 = (long)blockIdx.x * ATT_TILE, col = c0 + threadIdx.x;
    bool live = col < g.T;
    long hoff = b * g.sb + h * g.sh, yoff = b * g.yb + h * g.yh;
    const T *q = x + hoff;
    float kc[GC_ATTENTION_MAXHS], vc[GC_ATTENTION_MAXHS], dk[GC_ATTENTION_MAXHS], dv[GC_ATTENTION_MAXHS];
    for (long d = 0; d < hs; d++) {
        kc[d] = live ? to_f(q[g.koff + col * g.st + d]) : 0.0f;
        vc[d] = live ? to_f(q[g.voff + col * g.st + d]) : 0.0f;
        dk[d] = dv[d] = 0.0f;
    }
    for (long r0 = c0; r0 < g.T; r0 += ATT_TILE) {
        long nr = g.T - r0 < ATT_TILE ? g.T - r0 : ATT_TILE;
        __syncthreads();
        att_load_tile(qs, q + r0 * g.st, g.st, nr, hs);
        att_load_tile(dys, dy + yoff + r0 * g.yt, g.yt, nr, hs);
        for (long r = threadIdx.x; r < ATT_TILE; r += blockDim.x) {
            ls[r] = r < nr ? lse[bh * g.T + r0 + r] : 0.0f;
            Ds[r] = r < nr ? att_rowdot(dy + yoff + (r0 + r) * g.yt, y + yoff + (r0 + r) * g.yt, hs) : 0.0f;
        }
        __syncthreads();
        if (!live)
            continue;
        for (long r = col - r0 > 0 ? col - r0 : 0; r < nr; r++) {   /* rows at or below the key */
            const float *qi = qs + r * hs, *dyi = dys + r * hs;
            float s = 0.0f, dp = 0.0f;
            for (long d = 0; d < hs; d++) {
                s += qi[d] * kc[d];
                dp += dyi[d] * vc[d];
            }
            float p = expf(s * scale - ls[r]), ds = p * (dp - Ds[r]) * scale;
            for (long d = 0; d < hs; d++) {
                dv[d] += p * dyi[d];
                dk[d] += ds * qi[d];
            }
        }
    }
    if (!live)
        return;
    T *dkx = dx + hoff + g.koff + col * g.st, *dvx = dx + hoff + g.voff + col * g.st;
    for (long d = 0; d < hs; d++) {
        put(dkx + d, dk[d], acc);
        put(dvx + d, dv[d], acc);
    }
}

/* dq: a thread per query row, a block per ATT_TILE rows of one head */
template <class T>
__global__ void attention_dq_kernel(T *dx, const T *dy, const T *x, const T *y, const float *lse, AttGeom g,
                                    float scale, int acc)
{
    __shared__ float ks[ATT_TILE * GC_ATTENTION_MAXHS], vs[ATT_TILE * GC_ATTENTION_MAXHS];
    long bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH, hs = g.hs;
    long r0 = (long)blockIdx.x * ATT_TILE, row = r0 + threadIdx.x;
    long last = r0 + ATT_TILE < g.T ? r0 + ATT_TILE : g.T;
    bool live = row < g.T;
    long hoff = b * g.sb + h * g.sh, yoff = b * g.yb + h * g.yh;
    const T *q = x + hoff;
    float qr[GC_ATTENTION_MAXHS], dyr[GC_ATTENTION_MAXHS], dq[GC_ATTENTION_MAXHS], lr = 0.0f, D = 0.0f;
    if (live) {
        lr = lse[bh * g.T + row];
        D = att_rowdot(dy + yoff + row * g.yt, y + yoff + row * g.yt, hs);
    }
    for (long d = 0; d < hs; d++) {
        qr[d] = live ? to_f(q[row * g.st + d]) : 0.0f;
        dyr[d] = live ? to_f(dy[yoff + row * g.yt + d]) : 0.0f;
        dq[d] = 0.0f;
    }
    for (long c0 = 0; c0 < last; c0 += ATT_TILE) {
        long nc = last - c0 < ATT_TILE ? last - c0 : ATT_TILE;
        __syncthreads();
        att_load_tile(ks, q + g.koff + c0 * g.st, g.st, nc, hs);
        att_load_tile(vs, q + g.voff + c0 * g.st, g.st, nc, hs);
        __syncthreads();
        long valid = live ? row - c0 + 1 : 0;
        if (valid > nc)
            valid = nc;
        for (long c = 0; c < valid; c++) {
            const float *kc = ks + c * hs, *vc = vs + c * hs;
            float s = 0.0f, dp = 0.0f;
            for (long d = 0; d < hs; d++) {
                s += qr[d] * kc[d];
                dp += dyr[d] * vc[d];
            }
            float p = expf(s * scale - lr), ds = p * (dp - D) * scale;
            for (long d = 0; d < hs; d++)
                dq[d] += ds * kc[d];
        }
    }
    if (!live)
        return;
    T *dqx = dx + hoff + row * g.st;
    for (long d = 0; d < hs; d++)
        put(dqx + d, dq[d], acc);
}

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
    AW_LD = GC_ATTENTION_MAXHS + 8,   /* bf16 row stride of Q/K/V/dO tiles (hsp + 8 at run time) */
    AW_WARPS = 2,
    AW_ROWS = AW_WARPS * AW,          /* query rows (forward, dq) or keys (dk/dv) per block */
    AW_KEYS = 32,                     /* keys (forward, dq) or query rows (dk/dv) per tile: 2 WMMA columns */
    AW_SLD = AW_KEYS + 4,             /* float row stride of a warp's 16 x AW_KEYS scores */
    AW_PLD = AW_KEYS + 8,             /* bf16 row stride of a warp's p / ds */
};
static_assert(GC_ATTENTION_MAXHS % AW == 0 && AW_KEYS == 2 * AW && AW_ROWS == AW_KEYS, "attention WMMA tiles");

struct AttFwdShared {   /* 33,280 bytes */
    alignas(32) gc_bf16 a[AW_ROWS * AW_LD];                       /* q: this block's rows */
    alignas(32) gc_bf16 k[AW_KEYS * AW_LD], v[AW_KEYS * AW_LD];
    alignas(32) float s[AW_WARPS][AW * AW_SLD];                   /* a warp's scores; its output chunks */
    alignas(32) gc_bf16 p[AW_WARPS][AW * AW_PLD];
};
struct AttBwdShared {   /* 44,800 bytes */
    alignas(32) gc_bf16 a[AW_ROWS * AW_LD], b[AW_ROWS * AW_LD];   /* q, dy: the tile's rows */
    alignas(32) gc_bf16 k[AW_KEYS * AW_LD], v[AW_KEYS * AW_LD];   /* k, v (dk/dv: this block's keys) */
    alignas(32) float s[AW_WARPS][AW * AW_SLD];
    alignas(32) gc_bf16 p[AW_WARPS][AW * AW_PLD], ds[AW_WARPS][AW * AW_PLD];   /* p: dk/dv only */
    float lse[AW_ROWS], D[AW_ROWS];
};
static_assert(sizeof(AttBwdShared) <= 48 * 1024, "static shared memory above 48 KiB");

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
static __global__ void __launch_bounds__(AW_WARPS * 32)
    attention_fwd_wmma_kernel(gc_bf16 *y, float *lse, const gc_bf16 *x, AttGeom g, float scale)
{
#ifndef AW_NO_BF16_MMA
    __shared__ AttFwdShared sm;
    int w = threadIdx.x / 32, lane = threadIdx.x % 32, i = lane / 2, half = lane % 2;
    long bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH, hs = g.hs;
    int nf = (int)((hs + AW - 1) / AW), hsp = nf * AW, ld = hsp + 8;
    long r0 = (long)blockIdx.x * AW_ROWS, last = aw_min(r0 + AW_ROWS, g.T);
    long rw = r0 + w * AW, row = rw + i;   /* the warp's first row, this lane's */
    const gc_bf16 *q = x + b * g.sb + h * g.sh, *k = q + g.koff, *v = q + g.voff;
    float *ss = sm.s[w];
    gc_bf16 *ps = sm.p[w];
    aw_load_tile(sm.a, q + r0 * g.st, g.st, last - r0, hs, AW_ROWS, hsp, ld);
    float o[AW_NF][8], m = -INFINITY, l = 0.0f;
#pragma unroll
    for (int f = 0; f < AW_NF; f++)
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
        for (int f = 0; f < AW_NF; f++) {
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
    for (int f = 0; f < AW_NF; f++)
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
static __global__ void __launch_bounds__(AW_WARPS * 32)
    attention_dkdv_wmma_kernel(gc_bf16 *dx, const gc_bf16 *dy, const gc_bf16 *x, const gc_bf16 *y, const float *lse,
                               AttGeom g, float scale, int acc)
{
#ifndef AW_NO_BF16_MMA
    __shared__ AttBwdShared sm;
    int w = threadIdx.x / 32, lane = threadIdx.x % 32, i = lane / 2, half = lane % 2;
    long bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH, hs = g.hs;
    int nf = (int)((hs + AW - 1) / AW), hsp = nf * AW, ld = hsp + 8;
    long c0 = (long)blockIdx.x * AW_ROWS, kw = c0 + w * AW, key = kw + i;
    long hoff = b * g.sb + h * g.sh, yoff = b * g.yb + h * g.yh;
    const gc_bf16 *q = x + hoff;
    float *ss = sm.s[w];
    aw_load_tile(sm.k, q + g.koff + c0 * g.st, g.st, aw_min(AW_ROWS, g.T - c0), hs, AW_ROWS, hsp, ld);
    aw_load_tile(sm.v, q + g.voff + c0 * g.st, g.st, aw_min(AW_ROWS, g.T - c0), hs, AW_ROWS, hsp, ld);
    AwC dk[AW_NF], dv[AW_NF];
#pragma unroll
    for (int f = 0; f < AW_NF; f++) {
        wm::fill_fragment(dk[f], 0.0f);
        wm::fill_fragment(dv[f], 0.0f);
    }
    for (long r0 = c0; r0 < g.T; r0 += AW_KEYS) {
        long nr = aw_min(AW_KEYS, g.T - r0);
        __syncthreads();
        aw_load_tile(sm.a, q + r0 * g.st, g.st, nr, hs, AW_KEYS, hsp, ld);
        aw_load_tile(sm.b, dy + yoff + r0 * g.yt, g.yt, nr, hs, AW_KEYS, hsp, ld);
        for (int r = threadIdx.x; r < AW_KEYS; r += blockDim.x) {
            sm.lse[r] = r < nr ? lse[bh * g.T + r0 + r] : 0.0f;
            sm.D[r] = r < nr ? att_rowdot(dy + yoff + (r0 + r) * g.yt, y + yoff + (r0 + r) * g.yt, hs) : 0.0f;
        }
        __syncthreads();
        if (kw >= g.T)
            continue;   /* the warp's keys are padding */
        aw_abt(ss, sm.k + w * AW * ld, sm.a, nf, ld);   /* s^T: 16 keys x AW_KEYS rows */
        __syncwarp();
        float pv[AW];
        for (int c = 0; c < AW; c++) {
            int r = half * AW + c;
            pv[c] = r0 + r < g.T && key <= r0 + r ? expf(ss[i * AW_SLD + r] * scale - sm.lse[r]) : 0.0f;
            sm.p[w][i * AW_PLD + r] = __float2bfloat16(pv[c]);
        }
        __syncwarp();
        aw_abt(ss, sm.v + w * AW * ld, sm.b, nf, ld);   /* dp^T */
        __syncwarp();
        for (int c = 0; c < AW; c++) {
            int r = half * AW + c;
            sm.ds[w][i * AW_PLD + r] = __float2bfloat16(pv[c] * (ss[i * AW_SLD + r] - sm.D[r]) * scale);
        }
        __syncwarp();
#pragma unroll
        for (int f = 0; f < AW_NF; f++) {
            if (f >= nf)
                break;
            aw_pb(dv[f], sm.p[w], sm.b + f * AW, ld);
            aw_pb(dk[f], sm.ds[w], sm.a + f * AW, ld);
        }
    }
    if (kw >= g.T)
        return;
#pragma unroll
    for (int f = 0; f < AW_NF; f++) {
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
static __global__ void __launch_bounds__(AW_WARPS * 32)
    attention_dq_wmma_kernel(gc_bf16 *dx, const gc_bf16 *dy, const gc_bf16 *x, const gc_bf16 *y, const float *lse,
                             AttGeom g, float scale, int acc)
{
#ifndef AW_NO_BF16_MMA
    __shared__ AttBwdShared sm;
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
    AwC dq[AW_NF];
#pragma unroll
    for (int f = 0; f < AW_NF; f++)
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
        for (int f = 0; f < AW_NF; f++) {
            if (f >= nf)
                break;
            aw_pb(dq[f], sm.ds[w], sm.k + f * AW, ld);
        }
    }
    if (rw >= g.T)
        return;
#pragma unroll
    for (int f = 0; f < AW_NF; f++) {
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
    GC_LAUNCH(attention_fwd_wmma_kernel, grid, AW_WARPS * 32, 0, y, lse, x, g, scale);
}

static void attention_bwd_wmma(gc_bf16 *dx, const gc_bf16 *dy, const gc_bf16 *x, const gc_bf16 *y, const float *lse,
                               const AttGeom &g, float scale, int acc)
{
    dim3 grid(ceil_div(g.T, (long)AW_ROWS), (unsigned)(g.B * g.NH));
    GC_LAUNCH(attention_dkdv_wmma_kernel, grid, AW_WARPS * 32, 0, dx, dy, x, y, lse, g, scale, acc & 1);
    GC_LAUNCH(attention_dq_wmma_kernel, grid, AW_WARPS * 32, 0, dx, dy, x, y, lse, g, scale, acc & 1);
}

template <class T> static void attention_fwd(T *y, float *lse, const T *x, const long *geom, float scale)
{
    AttGeom g = att_geom(geom);
    if (g.B * g.NH <= 0 || g.T <= 0)
        return;
    dim3 grid(ceil_div(g.T, ATT_FWD_ROWS), (unsigned)(g.B * g.NH));
    GC_LAUNCH(attention_fwd_kernel<T>, grid, ATT_FWD_ROWS, 0, y, lse, x, g, scale);
}

template <class T>
static void attention_bwd(T *dx, const T *dy, const T *x, const T *y, const float *lse, const long *geom, float scale,
                          int acc)
{
    AttGeom g = att_geom(geom);
    if (g.B * g.NH <= 0 || g.T <= 0)
        return;
    dim3 grid(ceil_div(g.T, ATT_TILE), (unsigned)(g.B * g.NH));
    GC_LAUNCH(attention_dkdv_kernel<T>, grid, ATT_TILE, 0, dx, dy, x, y, lse, g, scale, acc & 1);
    GC_LAUNCH(attention_dq_kernel<T>, grid, ATT_TILE, 0, dx, dy, x, y, lse, g, scale, acc & 1);
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
