/* norm_rope_cuda.cu — rmsnorm and rope on the GPU (gc_runtime.h, section
 * "norm_rope_cpu.c / norm_rope_cuda.cu"; bf16 variants in gc_cuda.h).
 * Also the residual add + rmsnorm and the SwiGLU backward (fuse_layernorm.c,
 * fuse_swiglu.c). Included by kernels_cuda.cu (its helpers: to_f, store, put, warp_sum,
 * colsum, grid_for, ROW_WARPS). Row statistics: one warp per row, fp32 sums
 * in a fixed lane order (deterministic); dw: the chunked column sum. */

/* out = x * rstd * w per row, rstd = 1/sqrt(mean(x^2) + eps) */
template <class T>
__global__ void rmsnorm_fwd_kernel(T *out, float *rstd, const T *x, const T *w, long N, long C, float eps)
{
    long row = (long)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N)
        return;
    const T *xr = x + row * C;
    float s = 0.0f;
    for (long c = lane; c < C; c += 32) {
        float v = to_f(xr[c]);
        s += v * v;
    }
    s = warp_sum(s);
    float rs = 1.0f / sqrtf(s / (float)C + eps);
    for (long c = lane; c < C; c += 32)
        store(out + row * C + c, to_f(xr[c]) * rs * to_f(w[c]));
    if (lane == 0)
        rstd[row] = rs;
}

/* dx (+)= rstd (g - xhat mean(g xhat)), g = dy w, xhat = x rstd */
template <class T>
__global__ void rmsnorm_bwd_dx_kernel(T *dx, const T *dy, const T *x, const T *w, const float *rstd, long N, long C,
                                      int acc)
{
    long row = (long)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N)
        return;
    const T *xr = x + row * C, *gr = dy + row * C;
    float rs = rstd[row], dot = 0.0f;
    for (long c = lane; c < C; c += 32)
        dot += to_f(gr[c]) * to_f(w[c]) * to_f(xr[c]) * rs;
    dot = warp_sum(dot) / (float)C;
    for (long c = lane; c < C; c += 32) {
        float v = rs * (to_f(gr[c]) * to_f(w[c]) - to_f(xr[c]) * rs * dot);
        put(dx + row * C + c, v, acc);
    }
}

/* dw: column sums of dy * x * rstd */
template <class T> struct RmsnormDwF {
    const T *dy, *x;
    const float *rstd;
    typedef T elem;
    static const int NOUT = 1;
    bool aligned() const { return al16(dy) && al16(x); }
    template <int W> __device__ void add(long r, long c, long cols, float (*v)[W]) const
    {
        float d[W], xv[W], rs = rstd[r];
        gc_vload<W>(d, dy + r * cols + c);
        gc_vload<W>(xv, x + r * cols + c);
#pragma unroll
        for (int j = 0; j < W; j++)
            v[0][j] += d[j] * xv[j] * rs;
    }
};

template <class T> static void rmsnorm_fwd(T *out, float *rstd, const T *x, const T *w, long N, long C, float eps)
{
    if (N > 0 && C > 0)
        GC_LAUNCH(rmsnorm_fwd_kernel<T>, grid_for(N, ROW_WARPS), ROW_WARPS * 32, 0, out, rstd, x, w, N, C, eps);
}

template <class T>
static void rmsnorm_bwd(T *dx, float *dw, const T *dy, const T *x, const T *w, const float *rstd, long N, long C,
                        int acc)
{
    if (C <= 0)
        return;
    if (dw) {
        ColOut o = {{dw, NULL}, {(acc >> 1) & 1, 0}};
        RmsnormDwF<T> f = {dy, x, rstd};
        colsum(o, f, N, C);
    }
    if (dx && N > 0)
        GC_LAUNCH(rmsnorm_bwd_dx_kernel<T>, grid_for(N, ROW_WARPS), ROW_WARPS * 32, 0, dx, dy, x, w, rstd, N, C,
                  acc & 1);
}

void gc_rmsnorm_fwd(gc_real *out, gc_real *rstd, const gc_real *x, const gc_real *w, long N, long C, float eps)
{
    rmsnorm_fwd(out, rstd, x, w, N, C, eps);
}

void gc_rmsnorm_fwd_bf16(gc_bf16 *out, float *rstd, const gc_bf16 *x, const gc_bf16 *w, long N, long C, float eps)
{
    rmsnorm_fwd(out, rstd, x, w, N, C, eps);
}

void gc_rmsnorm_bwd(gc_real *dx, gc_real *dw, const gc_real *dy, const gc_real *x, const gc_real *w,
                    const gc_real *rstd, long N, long C, int acc)
{
    rmsnorm_bwd(dx, dw, dy, x, w, rstd, N, C, acc);
}

void gc_rmsnorm_bwd_bf16(gc_bf16 *dx, float *dw, const gc_bf16 *dy, const gc_bf16 *x, const gc_bf16 *w,
                         const float *rstd, long N, long C, int acc)
{
    rmsnorm_bwd(dx, dw, dy, x, w, rstd, N, C, acc);
}

/* one thread per (row, i < hs/2) pair; the angle in double as the CPU's,
 * in units of pi: sincospi reduces its argument exactly, where sincos of a
 * double keeps a slow path for huge angles that needs a 40-byte stack frame
 * (local memory outside the plan, issue 24); the angle t theta^(-2i/hs) / pi
 * is within a few double ulps of the CPU's */
template <class T>
__global__ void rope_kernel(T *y, const T *x, long rows, long T_, long hs, double theta, int inverse, int acc)
{
    long half = hs / 2, n = rows * half;
    for (long e = (long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (long)gridDim.x * blockDim.x) {
        long r = e / half, i = e % half, t = r % T_;
        double ang = (double)t * (pow(theta, -2.0 * (double)i / (double)hs) / M_PI), sd, cd;
        sincospi(ang, &sd, &cd);
        float c = (float)cd, s = inverse ? -(float)sd : (float)sd;
        float a = to_f(x[r * hs + i]), b = to_f(x[r * hs + i + half]);
        put(y + r * hs + i, a * c - b * s, acc);
        put(y + r * hs + i + half, b * c + a * s, acc);
    }
}

template <class T> static void rope(T *y, const T *x, long batch, long T_, long hs, double theta, int inverse, int acc)
{
    long n = batch * T_ * (hs / 2);
    if (n <= 0)
        return;
    long grid = (n + 255) / 256;
    if (grid > 65536L * 16)
        grid = 65536L * 16;
    GC_LAUNCH(rope_kernel<T>, (unsigned)grid, 256, 0, y, x, batch * T_, T_, hs, theta, inverse, acc & 1);
}

void gc_rope(gc_real *y, const gc_real *x, long batch, long T, long hs, double theta, int inverse, int acc)
{
    rope(y, x, batch, T, hs, theta, inverse, acc);
}

void gc_rope_bf16(gc_bf16 *y, const gc_bf16 *x, long batch, long T, long hs, double theta, int inverse, int acc)
{
    rope(y, x, batch, T, hs, theta, inverse, acc);
}

/* x = ra + rb, then the rmsnorm of x row by row (fuse_layernorm.c); x may
 * be ra or rb: each lane reads its elements before writing them */
template <class T>
__global__ void add_rmsnorm_fwd_kernel(T *x, T *out, float *rstd, const T *ra, const T *rb, const T *w, long N, long C,
                                       float eps)
{
    long row = (long)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N)
        return;
    float s = 0.0f;
    for (long c = lane; c < C; c += 32) {
        T v;
        store(&v, to_f(ra[row * C + c]) + to_f(rb[row * C + c]));   /* the sum as stored */
        x[row * C + c] = v;
        s += to_f(v) * to_f(v);
    }
    s = warp_sum(s);
    float rs = 1.0f / sqrtf(s / (float)C + eps);
    for (long c = lane; c < C; c += 32)
        store(out + row * C + c, to_f(x[row * C + c]) * rs * to_f(w[c]));
    if (lane == 0)
        rstd[row] = rs;
}

template <class T>
static void add_rmsnorm_fwd(T *x, T *out, float *rstd, const T *ra, const T *rb, const T *w, long N, long C, float eps)
{
    if (N > 0 && C > 0)
        GC_LAUNCH(add_rmsnorm_fwd_kernel<T>, grid_for(N, ROW_WARPS), ROW_WARPS * 32, 0, x, out, rstd, ra, rb, w, N, C,
                  eps);
}

void gc_add_rmsnorm_fwd(gc_real *x, gc_real *out, gc_real *rstd, const gc_real *ra, const gc_real *rb,
                        const gc_real *w, long N, long C, float eps)
{
    add_rmsnorm_fwd(x, out, rstd, ra, rb, w, N, C, eps);
}

void gc_add_rmsnorm_fwd_bf16(gc_bf16 *x, gc_bf16 *out, float *rstd, const gc_bf16 *ra, const gc_bf16 *rb,
                             const gc_bf16 *w, long N, long C, float eps)
{
    add_rmsnorm_fwd(x, out, rstd, ra, rb, w, N, C, eps);
}

/* the SwiGLU backward (fuse_swiglu.c): silu recomputed from a */
template <class T>
__global__ void swiglu_bwd_kernel(T *da, T *db, const T *dh, const T *a, const T *b, long n, int acc)
{
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        float x = to_f(a[i]), sg = 1.0f / (1.0f + expf(-x)), g = to_f(dh[i]);
        float ds = g * to_f(b[i]);
        put(da + i, sg * (1.0f + x * (1.0f - sg)) * ds, acc & 1);
        put(db + i, g * (x * sg), (acc >> 1) & 1);
    }
}

template <class T> static void swiglu_bwd(T *da, T *db, const T *dh, const T *a, const T *b, long n, int acc)
{
    if (n <= 0)
        return;
    long grid = (n + 255) / 256;
    if (grid > 65536L * 16)
        grid = 65536L * 16;
    GC_LAUNCH(swiglu_bwd_kernel<T>, (unsigned)grid, 256, 0, da, db, dh, a, b, n, acc);
}

void gc_swiglu_bwd(gc_real *da, gc_real *db, const gc_real *dh, const gc_real *a, const gc_real *b, long n, int acc)
{
    swiglu_bwd(da, db, dh, a, b, n, acc);
}

void gc_swiglu_bwd_bf16(gc_bf16 *da, gc_bf16 *db, const gc_bf16 *dh, const gc_bf16 *a, const gc_bf16 *b, long n,
                        int acc)
{
    swiglu_bwd(da, db, dh, a, b, n, acc);
}
