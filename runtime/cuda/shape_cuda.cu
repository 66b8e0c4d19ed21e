/* shape_cuda.cu — concat, narrow, repeat, mean and their backwards on the
 * GPU (gc_runtime.h, section "shape_cpu.c / shape_cuda.cu"; bf16 variants
 * in gc_cuda.h). Included by kernels_cuda.cu. Grid-stride loops over the
 * output's elements: each output element written by one thread, sums in a
 * fixed order (deterministic). */

static unsigned ew_grid(long n)
{
    long g = (n + 255) / 256;
    return (unsigned)(g < 1 ? 1 : g > 65536L * 16 ? 65536L * 16 : g);
}

#define GC_FOR_EACH(e, n) for (long e = (long)blockIdx.x * blockDim.x + threadIdx.x; e < (n); e += (long)gridDim.x * blockDim.x)

template <class T> __global__ void concat_kernel(T *y, const T *a, const T *b, long outer, long na, long nb, int acc)
{
    long row = na + nb;
    GC_FOR_EACH(e, outer * row) {
        long o = e / row, j = e % row;
        put(y + e, j < na ? to_f(a[o * na + j]) : to_f(b[o * nb + j - na]), acc);
    }
}

template <class T> __global__ void narrow_kernel(T *y, const T *x, long outer, long nx, long start, long len, int acc)
{
    GC_FOR_EACH(e, outer * len)
        put(y + e, to_f(x[(e / len) * nx + start + e % len]), acc);
}

template <class T> __global__ void narrow_bwd_kernel(T *dx, const T *dy, long outer, long nx, long start, long len, int acc)
{
    GC_FOR_EACH(e, outer * nx) {
        long o = e / nx, j = e % nx - start;
        bool in = j >= 0 && j < len;
        if (in)
            put(dx + e, to_f(dy[o * len + j]), acc);
        else if (!acc)
            store(dx + e, 0.0f);
    }
}

template <class T> __global__ void repeat_kernel(T *y, const T *x, long outer, long d, long n, long inner, int acc)
{
    GC_FOR_EACH(e, outer * d * n * inner) {
        long i = e % inner, J = (e / inner) % (d * n), o = e / (inner * d * n);
        put(y + e, to_f(x[(o * d + J / n) * inner + i]), acc);
    }
}

template <class T> __global__ void repeat_bwd_kernel(T *dx, const T *dy, long outer, long d, long n, long inner, int acc)
{
    GC_FOR_EACH(e, outer * d * inner) {
        long i = e % inner, od = e / inner;
        float s = 0.0f;
        for (long r = 0; r < n; r++)
            s += to_f(dy[(od * n + r) * inner + i]);
        put(dx + e, s, acc);
    }
}

/* one warp per row */
template <class T> __global__ void mean_rows_kernel(T *y, const T *x, long rows, long n, int acc)
{
    long row = (long)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    float s = 0.0f;
    for (long j = lane; j < n; j += 32)
        s += to_f(x[row * n + j]);
    s = warp_sum(s);
    if (lane == 0)
        put(y + row, s / (float)n, acc);
}

template <class T> __global__ void mean_bwd_kernel(T *dx, const T *dy, long rows, long n, int acc)
{
    GC_FOR_EACH(e, rows * n)
        put(dx + e, to_f(dy[e / n]) / (float)n, acc);
}

#undef GC_FOR_EACH

template <class T> static void concat(T *y, const T *a, const T *b, long outer, long na, long nb, int acc)
{
    if (outer * (na + nb) > 0)
        GC_LAUNCH(concat_kernel<T>, ew_grid(outer * (na + nb)), 256, 0, y, a, b, outer, na, nb, acc & 1);
}
template <class T> static void narrow(T *y, const T *x, long outer, long nx, long start, long len, int acc)
{
    if (outer * len > 0)
        GC_LAUNCH(narrow_kernel<T>, ew_grid(outer * len), 256, 0, y, x, outer, nx, start, len, acc & 1);
}
template <class T> static void narrow_bwd(T *dx, const T *dy, long outer, long nx, long start, long len, int acc)
{
    if (outer * nx > 0)
        GC_LAUNCH(narrow_bwd_kernel<T>, ew_grid(outer * nx), 256, 0, dx, dy, outer, nx, start, len, acc & 1);
}
template <class T> static void repeat(T *y, const T *x, long outer, long d, long n, long inner, int acc)
{
    if (outer * d * n * inner > 0)
        GC_LAUNCH(repeat_kernel<T>, ew_grid(outer * d * n * inner), 256, 0, y, x, outer, d, n, inner, acc & 1);
}
template <class T> static void repeat_bwd(T *dx, const T *dy, long outer, long d, long n, long inner, int acc)
{
    if (outer * d * inner > 0)
        GC_LAUNCH(repeat_bwd_kernel<T>, ew_grid(outer * d * inner), 256, 0, dx, dy, outer, d, n, inner, acc & 1);
}
template <class T> static void mean_rows(T *y, const T *x, long rows, long n, int acc)
{
    if (rows > 0)
        GC_LAUNCH(mean_rows_kernel<T>, grid_for(rows, ROW_WARPS), ROW_WARPS * 32, 0, y, x, rows, n, acc & 1);
}
template <class T> static void mean_bwd(T *dx, const T *dy, long rows, long n, int acc)
{
    if (rows * n > 0)
        GC_LAUNCH(mean_bwd_kernel<T>, ew_grid(rows * n), 256, 0, dx, dy, rows, n, acc & 1);
}

/* the fp32 and bf16 entry points */
#define GC_SHAPE_ENTRIES(S, TY)                                                                                    \
    void gc_concat##S(TY *y, const TY *a, const TY *b, long outer, long na, long nb, int acc)                     \
    { concat(y, a, b, outer, na, nb, acc); }                                                                       \
    void gc_narrow##S(TY *y, const TY *x, long outer, long nx, long start, long len, int acc)                    \
    { narrow(y, x, outer, nx, start, len, acc); }                                                                  \
    void gc_narrow_bwd##S(TY *dx, const TY *dy, long outer, long nx, long start, long len, int acc)              \
    { narrow_bwd(dx, dy, outer, nx, start, len, acc); }                                                            \
    void gc_repeat##S(TY *y, const TY *x, long outer, long d, long n, long inner, int acc)                       \
    { repeat(y, x, outer, d, n, inner, acc); }                                                                     \
    void gc_repeat_bwd##S(TY *dx, const TY *dy, long outer, long d, long n, long inner, int acc)                 \
    { repeat_bwd(dx, dy, outer, d, n, inner, acc); }                                                               \
    void gc_mean_rows##S(TY *y, const TY *x, long rows, long n, int acc) { mean_rows(y, x, rows, n, acc); }       \
    void gc_mean_bwd##S(TY *dx, const TY *dy, long rows, long n, int acc) { mean_bwd(dx, dy, rows, n, acc); }
GC_SHAPE_ENTRIES(, gc_real)
GC_SHAPE_ENTRIES(_bf16, gc_bf16)
#undef GC_SHAPE_ENTRIES
