/* attention_cuda.cu — fused causal attention on CUDA (gc_runtime.h, section
 * "attention_cpu.c / attention_cuda.cu"; the _bf16 entry points in
 * gc_cuda.h). Compiled as part of kernels_cuda.cu (included at its end), so
 * it shares its helpers and every build of the runtime picks it up.
 *
 * FlashAttention-2 scheme, fp32 arithmetic on fp32 or bf16 storage, no
 * tensor cores yet (a plain SIMT path that the emulator in tests/cuda runs):
 *   forward   a block per (64 query rows, head); a thread per row keeps q,
 *             the running max, sum and unnormalised output; K/V tiles of
 *             32 keys pass through shared memory; tiles above the diagonal
 *             are never loaded. Saves y and one lse per row.
 *   backward  two kernels, no atomics (deterministic): dk/dv with a thread
 *             per key walking the query tiles at or below it, dq with a
 *             thread per query row walking the key tiles; both recompute
 *             p = exp(s - lse) and D = rowsum(dy * y).
 */

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
    attention_fwd(y, lse, x, geom, scale);
}

void gc_attention_bwd_bf16(gc_bf16 *dx, const gc_bf16 *dy, const gc_bf16 *x, const gc_bf16 *y, const float *lse,
                           const long *geom, float scale, int acc)
{
    attention_bwd(dx, dy, x, y, lse, geom, scale, acc);
}
