/* attention_simt.cu — the SIMT attention kernels (fp32 storage; bf16
 * storage without tensor cores), included by attention_cuda.cu after AttP.
 * Both entry points use them: gc_attention_* (q, k, v in one x) and
 * gc_attention_gqa_* (separate q, k, v; a kv head per `group` query heads).
 * FlashAttention-2's scheme with fp32 arithmetic:
 *   forward  a block per (ATT_FWD_ROWS query rows, head), K/V tiles of
 *            ATT_TILE keys through shared memory, the running max, sum and
 *            unnormalised output per row; tiles above the diagonal are never
 *            loaded. Saves y and one lse per row.
 *   backward two kernels, no atomics (deterministic): dk/dv per key walking
 *            the query tiles at or below it, dq per query row walking the
 *            key tiles; both recompute p = exp(s - lse) and D = rowsum(dy*y).
 * The dk/dv kernel runs per kv head, over the rows of its group's query
 * heads (no atomics). Specialised by head size at compile time: HS = 16, 32, 64 or 128, the
 * smallest that holds hs (the tiles are zero-padded from hs to HS). A row
 * (or key) is G = HS / ATT_DPT consecutive lanes, lane j owning dimensions
 * d = e*G + j for e < ATT_DPT: every per-thread array has ATT_DPT entries
 * indexed by unrolled loops, so it lives in registers (no stack frame, no
 * local memory), dot products end with a shuffle over the G lanes, and a
 * warp reading a shared tile row reads consecutive words (no bank
 * conflicts). Loops over keys or rows run the block's common bound with
 * masks (causality, T), so every lane reaches every shuffle.
 */

enum { ATT_DPT = 16 };   /* head dimensions per thread */
/* a comma inside GC_LAUNCH's kernel argument (expanded after the split) */
#define ATT_COMMA ,
static const long ATT_FWD_ROWS = 64, ATT_TILE = 32;

/* the sum of v over the G consecutive lanes of a row; every lane of the warp calls it */
template <int G> static __device__ __forceinline__ float att_group_sum(float v)
{
#pragma unroll
    for (int o = 1; o < G; o <<= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* dst[r*HS + d] = rows[r*st + d] for r < n, d < hs; 0 elsewhere in the
 * ATT_TILE x HS tile; the block's threads share the work */
template <class T, int HS>
static __device__ void att_tile(float *dst, const T *rows, long st, long n, long hs)
{
    for (int i = threadIdx.x; i < ATT_TILE * HS; i += blockDim.x) {
        int r = i / HS, d = i % HS;   /* HS a power of two: shifts */
        dst[i] = r < n && d < hs ? to_f(rows[r * st + d]) : 0.0f;
    }
}

/* out[e] = row[(e*G + j)] for the lane's dimensions below hs, else 0 */
template <class T, int G>
static __device__ __forceinline__ void att_row(float *out, const T *row, bool live, int j, long hs)
{
#pragma unroll
    for (int e = 0; e < ATT_DPT; e++) {
        int d = e * G + j;
        out[e] = live && d < hs ? to_f(row[d]) : 0.0f;
    }
}

/* the partial dot of the lane's dimensions with tile row r (stride HS) */
template <int HS>
static __device__ __forceinline__ float att_dot(const float *mine, const float *tile, int j)
{
    constexpr int G = HS / ATT_DPT;
    float s = 0.0f;
#pragma unroll
    for (int e = 0; e < ATT_DPT; e++)
        s += mine[e] * tile[e * G + j];
    return s;
}

template <class T, int HS>
__global__ void __launch_bounds__(ATT_FWD_ROWS * (HS / ATT_DPT))
attention_fwd_kernel(AttP<T> a)
{
    constexpr int G = HS / ATT_DPT;
    __shared__ float ks[ATT_TILE * HS], vs[ATT_TILE * HS];
    long bh = a.bh0 + blockIdx.y, b = bh / a.NH, h = bh % a.NH, kvh = h / a.group;
    int j = threadIdx.x % G;
    long r0 = (long)blockIdx.x * ATT_FWD_ROWS, row = r0 + threadIdx.x / G;
    long last = r0 + ATT_FWD_ROWS < a.T ? r0 + ATT_FWD_ROWS : a.T;   /* rows [r0, last) */
    const T *q = a.q + b * a.qb + h * a.qh, *k = a.k + b * a.kb + kvh * a.kh, *v = a.v + b * a.kb + kvh * a.kh;
    bool live = row < a.T;
    float qr[ATT_DPT], acc[ATT_DPT], m = -INFINITY, l = 0.0f;
    att_row<T, G>(qr, q + row * a.qt, live, j, a.hs);
#pragma unroll
    for (int e = 0; e < ATT_DPT; e++)
        acc[e] = 0.0f;
    for (long c0 = 0; c0 < last; c0 += ATT_TILE) {
        long nc = last - c0 < ATT_TILE ? last - c0 : ATT_TILE;
        __syncthreads();                 /* the previous tile's readers are done */
        att_tile<T, HS>(ks, k + c0 * a.kt, a.kt, nc, a.hs);
        att_tile<T, HS>(vs, v + c0 * a.kt, a.kt, nc, a.hs);
        __syncthreads();
        long valid = live ? row - c0 + 1 : 0;   /* keys [c0, c0 + valid) are visible to the row */
        if (valid > nc)
            valid = nc;
        float s[ATT_TILE], mx = m;
#pragma unroll
        for (int c = 0; c < ATT_TILE; c++) {
            float dot = att_group_sum<G>(att_dot<HS>(qr, ks + c * HS, j));
            s[c] = c < valid ? dot * a.scale : -INFINITY;
            mx = fmaxf(mx, s[c]);
        }
        float corr = mx == -INFINITY ? 1.0f : expf(m - mx), sum = 0.0f;
#pragma unroll
        for (int e = 0; e < ATT_DPT; e++)
            acc[e] *= corr;
#pragma unroll
        for (int c = 0; c < ATT_TILE; c++) {
            float p = c < valid ? expf(s[c] - mx) : 0.0f;
            sum += p;
#pragma unroll
            for (int e = 0; e < ATT_DPT; e++)
                acc[e] += p * vs[c * HS + e * G + j];
        }
        l = l * corr + sum;
        m = mx;
    }
    if (!live)
        return;
    float inv = 1.0f / l;
    T *yr = a.out + b * a.yb + h * a.yh + row * a.yt;
#pragma unroll
    for (int e = 0; e < ATT_DPT; e++)
        if (e * G + j < a.hs)
            store(yr + e * G + j, acc[e] * inv);
    if (j == 0)
        a.lse[bh * a.T + row] = m + logf(l);
}

/* D = dy . y of row r (G lanes, the sum in every one of them) */
template <class T, int G>
static __device__ __forceinline__ float att_group_rowdot(const T *dy, const T *y, bool live, int j, long hs)
{
    float s = 0.0f;
#pragma unroll
    for (int e = 0; e < ATT_DPT; e++) {
        int d = e * G + j;
        if (live && d < hs)
            s += to_f(dy[d]) * to_f(y[d]);
    }
    return att_group_sum<G>(s);
}

/* dk, dv: G lanes per key, a block per ATT_TILE keys of one kv head; walks
 * the rows at or below its keys of each query head of the group */
template <class T, int HS>
__global__ void __launch_bounds__(ATT_TILE * (HS / ATT_DPT))
attention_dkdv_kernel(AttP<T> a)
{
    constexpr int G = HS / ATT_DPT;
    __shared__ float qs[ATT_TILE * HS], dys[ATT_TILE * HS], ls[ATT_TILE], Ds[ATT_TILE];
    long NKV = a.NH / a.group, bkv = a.bh0 + blockIdx.y, b = bkv / NKV, kvh = bkv % NKV;
    int j = threadIdx.x % G, grp = threadIdx.x / G;
    long c0 = (long)blockIdx.x * ATT_TILE, col = c0 + grp;
    bool live = col < a.T;
    long koff = b * a.kb + kvh * a.kh;
    float kc[ATT_DPT], vc[ATT_DPT], dk[ATT_DPT], dv[ATT_DPT];
    att_row<T, G>(kc, a.k + koff + col * a.kt, live, j, a.hs);
    att_row<T, G>(vc, a.v + koff + col * a.kt, live, j, a.hs);
#pragma unroll
    for (int e = 0; e < ATT_DPT; e++)
        dk[e] = dv[e] = 0.0f;
    for (long hj = 0; hj < a.group; hj++) {
        long h = kvh * a.group + hj, qbh = b * a.NH + h;
        const T *q = a.q + b * a.qb + h * a.qh, *dy = a.dy + b * a.yb + h * a.yh, *y = a.y + b * a.yb + h * a.yh;
        for (long r0 = c0; r0 < a.T; r0 += ATT_TILE) {
            long nr = a.T - r0 < ATT_TILE ? a.T - r0 : ATT_TILE;
            __syncthreads();
            att_tile<T, HS>(qs, q + r0 * a.qt, a.qt, nr, a.hs);
            att_tile<T, HS>(dys, dy + r0 * a.yt, a.yt, nr, a.hs);
            {   /* group grp: lse and D of the tile's row grp */
                long ro = (r0 + grp) * a.yt;
                float D = att_group_rowdot<T, G>(dy + ro, y + ro, grp < nr, j, a.hs);
                if (j == 0) {
                    ls[grp] = grp < nr ? a.lse[qbh * a.T + r0 + grp] : 0.0f;
                    Ds[grp] = D;
                }
            }
            __syncthreads();
            long first = col - r0;   /* rows at or below the key */
            for (int r = 0; r < nr; r++) {
                const float *qi = qs + r * HS, *dyi = dys + r * HS;
                float s = att_group_sum<G>(att_dot<HS>(kc, qi, j));
                float dp = att_group_sum<G>(att_dot<HS>(vc, dyi, j));
                float p = live && r >= first ? expf(s * a.scale - ls[r]) : 0.0f, ds = p * (dp - Ds[r]) * a.scale;
#pragma unroll
                for (int e = 0; e < ATT_DPT; e++) {
                    dv[e] += p * dyi[e * G + j];
                    dk[e] += ds * qi[e * G + j];
                }
            }
        }
    }
    if (!live)
        return;
    T *dkx = a.dk + koff + col * a.kt, *dvx = a.dv + koff + col * a.kt;
#pragma unroll
    for (int e = 0; e < ATT_DPT; e++)
        if (e * G + j < a.hs) {
            put(dkx + e * G + j, dk[e], a.acc & 2);
            put(dvx + e * G + j, dv[e], a.acc & 4);
        }
}

/* dq: G lanes per query row, a block per ATT_TILE rows of one head */
template <class T, int HS>
__global__ void __launch_bounds__(ATT_TILE * (HS / ATT_DPT))
attention_dq_kernel(AttP<T> a)
{
    constexpr int G = HS / ATT_DPT;
    __shared__ float ks[ATT_TILE * HS], vs[ATT_TILE * HS];
    long bh = a.bh0 + blockIdx.y, b = bh / a.NH, h = bh % a.NH, kvh = h / a.group;
    int j = threadIdx.x % G;
    long r0 = (long)blockIdx.x * ATT_TILE, row = r0 + threadIdx.x / G;
    long last = r0 + ATT_TILE < a.T ? r0 + ATT_TILE : a.T;
    bool live = row < a.T;
    const T *q = a.q + b * a.qb + h * a.qh, *k = a.k + b * a.kb + kvh * a.kh, *v = a.v + b * a.kb + kvh * a.kh;
    const T *dyr = a.dy + b * a.yb + h * a.yh + row * a.yt, *yr = a.y + b * a.yb + h * a.yh + row * a.yt;
    float qr[ATT_DPT], dyv[ATT_DPT], dq[ATT_DPT];
    float lr = live ? a.lse[bh * a.T + row] : 0.0f;
    float D = att_group_rowdot<T, G>(dyr, yr, live, j, a.hs);
    att_row<T, G>(qr, q + row * a.qt, live, j, a.hs);
    att_row<T, G>(dyv, dyr, live, j, a.hs);
#pragma unroll
    for (int e = 0; e < ATT_DPT; e++)
        dq[e] = 0.0f;
    for (long c0 = 0; c0 < last; c0 += ATT_TILE) {
        long nc = last - c0 < ATT_TILE ? last - c0 : ATT_TILE;
        __syncthreads();
        att_tile<T, HS>(ks, k + c0 * a.kt, a.kt, nc, a.hs);
        att_tile<T, HS>(vs, v + c0 * a.kt, a.kt, nc, a.hs);
        __syncthreads();
        long valid = live ? row - c0 + 1 : 0;
        for (int c = 0; c < nc; c++) {
            const float *kc = ks + c * HS, *vc = vs + c * HS;
            float s = att_group_sum<G>(att_dot<HS>(qr, kc, j));
            float dp = att_group_sum<G>(att_dot<HS>(dyv, vc, j));
            float p = c < valid ? expf(s * a.scale - lr) : 0.0f, ds = p * (dp - D) * a.scale;
#pragma unroll
            for (int e = 0; e < ATT_DPT; e++)
                dq[e] += ds * kc[e * G + j];
        }
    }
    if (!live)
        return;
    T *dqx = a.dq + b * a.qb + h * a.qh + row * a.qt;
#pragma unroll
    for (int e = 0; e < ATT_DPT; e++)
        if (e * G + j < a.hs)
            put(dqx + e * G + j, dq[e], a.acc & 1);
}

/* launches over the (batch, head) range [bh0, bh0 + nbh) (query heads; the
 * dk/dv kernel: kv heads) */
template <class T, int HS> static void attention_fwd_hs(AttP<T> a, long nbh)
{
    dim3 grid(ceil_div(a.T, ATT_FWD_ROWS), (unsigned)nbh);
    GC_LAUNCH(attention_fwd_kernel<T ATT_COMMA HS>, grid, ATT_FWD_ROWS * (HS / ATT_DPT), 0, a);
}

template <class T, int HS> static void attention_dq_hs(AttP<T> a, long nbh)
{
    dim3 grid(ceil_div(a.T, ATT_TILE), (unsigned)nbh);
    GC_LAUNCH(attention_dq_kernel<T ATT_COMMA HS>, grid, ATT_TILE * (HS / ATT_DPT), 0, a);
}

template <class T, int HS> static void attention_dkdv_hs(AttP<T> a, long nkv)
{
    dim3 grid(ceil_div(a.T, ATT_TILE), (unsigned)nkv);
    GC_LAUNCH(attention_dkdv_kernel<T ATT_COMMA HS>, grid, ATT_TILE * (HS / ATT_DPT), 0, a);
}

/* SIMT: the smallest HS >= hs (att_check: hs <= GC_ATTENTION_MAXHS = 128) */
template <class T> static void attention_fwd_simt(AttP<T> a, long nbh)
{
    if (a.hs <= 16)
        attention_fwd_hs<T, 16>(a, nbh);
    else if (a.hs <= 32)
        attention_fwd_hs<T, 32>(a, nbh);
    else if (a.hs <= 64)
        attention_fwd_hs<T, 64>(a, nbh);
    else
        attention_fwd_hs<T, 128>(a, nbh);
}

/* dq over query heads [bh0, bh0 + nkv group), then dk, dv over kv heads [bh0 / group, + nkv) */
template <class T> static void attention_bwd_simt(AttP<T> a, long nkv)
{
    long kv0 = a.bh0 / a.group;
    AttP<T> k = a;
    k.bh0 = kv0;
    if (a.hs <= 16) {
        attention_dq_hs<T, 16>(a, nkv * a.group);
        attention_dkdv_hs<T, 16>(k, nkv);
    } else if (a.hs <= 32) {
        attention_dq_hs<T, 32>(a, nkv * a.group);
        attention_dkdv_hs<T, 32>(k, nkv);
    } else if (a.hs <= 64) {
        attention_dq_hs<T, 64>(a, nkv * a.group);
        attention_dkdv_hs<T, 64>(k, nkv);
    } else {
        attention_dq_hs<T, 128>(a, nkv * a.group);
        attention_dkdv_hs<T, 128>(k, nkv);
    }
}
