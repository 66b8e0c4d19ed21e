/* attention_simt.cu — the SIMT attention kernels (fp32 storage; bf16
 * storage without tensor cores), included by attention_cuda.cu after AttGeom
 * and att_rowdot. FlashAttention-2's scheme with fp32 arithmetic:
 *   forward  a block per (ATT_FWD_ROWS query rows, head), K/V tiles of
 *            ATT_TILE keys through shared memory, the running max, sum and
 *            unnormalised output per row; tiles above the diagonal are never
 *            loaded. Saves y and one lse per row.
 *   backward two kernels, no atomics (deterministic): dk/dv per key walking
 *            the query tiles at or below it, dq per query row walking the
 *            key tiles; both recompute p = exp(s - lse) and D = rowsum(dy*y).
 * Specialised by head size at compile time: HS = 16, 32, 64 or 128, the
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
attention_fwd_kernel(T *y, float *lse, const T *x, AttGeom g, float scale)
{
    constexpr int G = HS / ATT_DPT;
    __shared__ float ks[ATT_TILE * HS], vs[ATT_TILE * HS];
    long bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH;
    int j = threadIdx.x % G;
    long r0 = (long)blockIdx.x * ATT_FWD_ROWS, row = r0 + threadIdx.x / G;
    long last = r0 + ATT_FWD_ROWS < g.T ? r0 + ATT_FWD_ROWS : g.T;   /* rows [r0, last) */
    const T *q = x + b * g.sb + h * g.sh, *k = q + g.koff, *v = q + g.voff;
    bool live = row < g.T;
    float qr[ATT_DPT], acc[ATT_DPT], m = -INFINITY, l = 0.0f;
    att_row<T, G>(qr, q + row * g.st, live, j, g.hs);
#pragma unroll
    for (int e = 0; e < ATT_DPT; e++)
        acc[e] = 0.0f;
    for (long c0 = 0; c0 < last; c0 += ATT_TILE) {
        long nc = last - c0 < ATT_TILE ? last - c0 : ATT_TILE;
        __syncthreads();                 /* the previous tile's readers are done */
        att_tile<T, HS>(ks, k + c0 * g.st, g.st, nc, g.hs);
        att_tile<T, HS>(vs, v + c0 * g.st, g.st, nc, g.hs);
        __syncthreads();
        long valid = live ? row - c0 + 1 : 0;   /* keys [c0, c0 + valid) are visible to the row */
        if (valid > nc)
            valid = nc;
        float s[ATT_TILE], mx = m;
#pragma unroll
        for (int c = 0; c < ATT_TILE; c++) {
            float dot = att_group_sum<G>(att_dot<HS>(qr, ks + c * HS, j));
            s[c] = c < valid ? dot * scale : -INFINITY;
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
    T *yr = y + b * g.yb + h * g.yh + row * g.yt;
#pragma unroll
    for (int e = 0; e < ATT_DPT; e++)
        if (e * G + j < g.hs)
            store(yr + e * G + j, acc[e] * inv);
    if (j == 0)
        lse[bh * g.T + row] = m + logf(l);
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

/* dk, dv: G lanes per key, a block per ATT_TILE keys of one head */
template <class T, int HS>
__global__ void __launch_bounds__(ATT_TILE * (HS / ATT_DPT))
attention_dkdv_kernel(T *dx, const T *dy, const T *x, const T *y, const float *lse, AttGeom g, float scale, int acc)
{
    constexpr int G = HS / ATT_DPT;
    __shared__ float qs[ATT_TILE * HS], dys[ATT_TILE * HS], ls[ATT_TILE], Ds[ATT_TILE];
    long bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH;
    int j = threadIdx.x % G, grp = threadIdx.x / G;
    long c0 = (long)blockIdx.x * ATT_TILE, col = c0 + grp;
    bool live = col < g.T;
    long hoff = b * g.sb + h * g.sh, yoff = b * g.yb + h * g.yh;
    const T *q = x + hoff;
    float kc[ATT_DPT], vc[ATT_DPT], dk[ATT_DPT], dv[ATT_DPT];
    att_row<T, G>(kc, q + g.koff + col * g.st, live, j, g.hs);
    att_row<T, G>(vc, q + g.voff + col * g.st, live, j, g.hs);
#pragma unroll
    for (int e = 0; e < ATT_DPT; e++)
        dk[e] = dv[e] = 0.0f;
    for (long r0 = c0; r0 < g.T; r0 += ATT_TILE) {
        long nr = g.T - r0 < ATT_TILE ? g.T - r0 : ATT_TILE;
        __syncthreads();
        att_tile<T, HS>(qs, q + r0 * g.st, g.st, nr, g.hs);
        att_tile<T, HS>(dys, dy + yoff + r0 * g.yt, g.yt, nr, g.hs);
        {   /* group grp: lse and D of the tile's row grp */
            long ro = yoff + (r0 + grp) * g.yt;
            float D = att_group_rowdot<T, G>(dy + ro, y + ro, grp < nr, j, g.hs);
            if (j == 0) {
                ls[grp] = grp < nr ? lse[bh * g.T + r0 + grp] : 0.0f;
                Ds[grp] = D;
            }
        }
        __syncthreads();
        long first = col - r0;   /* rows at or below the key */
        for (int r = 0; r < nr; r++) {
            const float *qi = qs + r * HS, *dyi = dys + r * HS;
            float s = att_group_sum<G>(att_dot<HS>(kc, qi, j));
            float dp = att_group_sum<G>(att_dot<HS>(vc, dyi, j));
            float p = live && r >= first ? expf(s * scale - ls[r]) : 0.0f, ds = p * (dp - Ds[r]) * scale;
#pragma unroll
            for (int e = 0; e < ATT_DPT; e++) {
                dv[e] += p * dyi[e * G + j];
                dk[e] += ds * qi[e * G + j];
            }
        }
    }
    if (!live)
        return;
    T *dkx = dx + hoff + g.koff + col * g.st, *dvx = dx + hoff + g.voff + col * g.st;
#pragma unroll
    for (int e = 0; e < ATT_DPT; e++)
        if (e * G + j < g.hs) {
            put(dkx + e * G + j, dk[e], acc);
            put(dvx + e * G + j, dv[e], acc);
        }
}

/* dq: G lanes per query row, a block per ATT_TILE rows of one head */
template <class T, int HS>
__global__ void __launch_bounds__(ATT_TILE * (HS / ATT_DPT))
attention_dq_kernel(T *dx, const T *dy, const T *x, const T *y, const float *lse, AttGeom g, float scale, int acc)
{
    constexpr int G = HS / ATT_DPT;
    __shared__ float ks[ATT_TILE * HS], vs[ATT_TILE * HS];
    long bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH;
    int j = threadIdx.x % G;
    long r0 = (long)blockIdx.x * ATT_TILE, row = r0 + threadIdx.x / G;
    long last = r0 + ATT_TILE < g.T ? r0 + ATT_TILE : g.T;
    bool live = row < g.T;
    long hoff = b * g.sb + h * g.sh, yoff = b * g.yb + h * g.yh;
    const T *q = x + hoff;
    float qr[ATT_DPT], dyr[ATT_DPT], dq[ATT_DPT];
    float lr = live ? lse[bh * g.T + row] : 0.0f;
    float D = att_group_rowdot<T, G>(dy + yoff + row * g.yt, y + yoff + row * g.yt, live, j, g.hs);
    att_row<T, G>(qr, q + row * g.st, live, j, g.hs);
    att_row<T, G>(dyr, dy + yoff + row * g.yt, live, j, g.hs);
#pragma unroll
    for (int e = 0; e < ATT_DPT; e++)
        dq[e] = 0.0f;
    for (long c0 = 0; c0 < last; c0 += ATT_TILE) {
        long nc = last - c0 < ATT_TILE ? last - c0 : ATT_TILE;
        __syncthreads();
        att_tile<T, HS>(ks, q + g.koff + c0 * g.st, g.st, nc, g.hs);
        att_tile<T, HS>(vs, q + g.voff + c0 * g.st, g.st, nc, g.hs);
        __syncthreads();
        long valid = live ? row - c0 + 1 : 0;
        for (int c = 0; c < nc; c++) {
            const float *kc = ks + c * HS, *vc = vs + c * HS;
            float s = att_group_sum<G>(att_dot<HS>(qr, kc, j));
            float dp = att_group_sum<G>(att_dot<HS>(dyr, vc, j));
            float p = c < valid ? expf(s * scale - lr) : 0.0f, ds = p * (dp - D) * scale;
#pragma unroll
            for (int e = 0; e < ATT_DPT; e++)
                dq[e] += ds * kc[e * G + j];
        }
    }
    if (!live)
        return;
    T *dqx = dx + hoff + row * g.st;
#pragma unroll
    for (int e = 0; e < ATT_DPT; e++)
        if (e * G + j < g.hs)
            put(dqx + e * G + j, dq[e], acc);
}

template <class T, int HS> static void attention_fwd_hs(T *y, float *lse, const T *x, const AttGeom &g, float scale)
{
    dim3 grid(ceil_div(g.T, ATT_FWD_ROWS), (unsigned)(g.B * g.NH));
    GC_LAUNCH(attention_fwd_kernel<T ATT_COMMA HS>, grid, ATT_FWD_ROWS * (HS / ATT_DPT), 0, y, lse, x, g, scale);
}

template <class T, int HS>
static void attention_bwd_hs(T *dx, const T *dy, const T *x, const T *y, const float *lse, const AttGeom &g,
                             float scale, int acc)
{
    dim3 grid(ceil_div(g.T, ATT_TILE), (unsigned)(g.B * g.NH));
    int threads = ATT_TILE * (HS / ATT_DPT);
    GC_LAUNCH(attention_dkdv_kernel<T ATT_COMMA HS>, grid, threads, 0, dx, dy, x, y, lse, g, scale, acc & 1);
    GC_LAUNCH(attention_dq_kernel<T ATT_COMMA HS>, grid, threads, 0, dx, dy, x, y, lse, g, scale, acc & 1);
}

/* the smallest HS >= hs (att_geom checked hs <= GC_ATTENTION_MAXHS = 128) */
template <class T> static void attention_fwd(T *y, float *lse, const T *x, const long *geom, float scale)
{
    AttGeom g = att_geom(geom);
    if (g.B * g.NH <= 0 || g.T <= 0)
        return;
    if (g.hs <= 16)
        attention_fwd_hs<T, 16>(y, lse, x, g, scale);
    else if (g.hs <= 32)
        attention_fwd_hs<T, 32>(y, lse, x, g, scale);
    else if (g.hs <= 64)
        attention_fwd_hs<T, 64>(y, lse, x, g, scale);
    else
        attention_fwd_hs<T, 128>(y, lse, x, g, scale);
}

template <class T>
static void attention_bwd(T *dx, const T *dy, const T *x, const T *y, const float *lse, const long *geom, float scale,
                          int acc)
{
    AttGeom g = att_geom(geom);
    if (g.B * g.NH <= 0 || g.T <= 0)
        return;
    if (g.hs <= 16)
        attention_bwd_hs<T, 16>(dx, dy, x, y, lse, g, scale, acc);
    else if (g.hs <= 32)
        attention_bwd_hs<T, 32>(dx, dy, x, y, lse, g, scale, acc);
    else if (g.hs <= 64)
        attention_bwd_hs<T, 64>(dx, dy, x, y, lse, g, scale, acc);
    else
        attention_bwd_hs<T, 128>(dx, dy, x, y, lse, g, scale, acc);
}
