/* kernels_cpu.c — the CPU kernels (gc_runtime.h, section "kernels_cpu.c").
 *
 * Matmuls go to gemm_cpu.c's AVX-512 GEMM where the CPU has AVX-512, else
 * (or with GC_CPU_GEMM=blas in the environment) to OpenBLAS (cblas_sgemm, or
 * cblas_dgemm when gc_real is double); everything else is plain C with
 * OpenMP, written so that gcc -O3 vectorizes the inner loops.
 *
 * Threads. OpenBLAS is set to one thread on the first gc_matmul and every
 * matmul is split across the OpenMP team instead (one block of C per thread,
 * each a single-threaded GEMM), so the program runs one pool of threads (no
 * oversubscription of BLAS workers against OpenMP workers).
 *
 * Determinism. Every output element is written by exactly one thread, and
 * every reduction runs in an order that does not depend on how the work is
 * split: row reductions (softmax, layernorm, cross-entropy) run inside one
 * thread; column reductions (reduce_rows, layernorm dw/db, embedding_bwd) are
 * split by columns and each column is summed over the rows in row order. So
 * results are bit-identical run to run and for any thread count, with one
 * exception: a large single matmul is split in one block per thread, and
 * OpenBLAS's blocking (hence its rounding) depends on the block shape, so its
 * bits depend on the thread count (never on the run). gemm_cpu.c never
 * splits K, so its bits depend on neither.
 *
 * Precision. Sums accumulate in double and round once at the end (row
 * statistics, sums of exponentials, dot products, column sums, the loss
 * mean): it costs little next to the memory traffic and is closer to the
 * exact result than llm.c's float sums. The exceptions are the ones the
 * contracts define as a sequence of += into the output (embedding_bwd, acc
 * mode) and the matmuls (BLAS). Exponentials in softmax and cross-entropy use
 * a vectorizable expf (Cephes polynomial, ~1 ulp) in the float build, and
 * libm exp() in the double build; those row loops also have an AVX2 clone
 * (ROW_CLONES), so their last bits may differ between CPUs with and without
 * AVX2 (never between runs on one machine). NaN inputs propagate to every
 * output they feed, so a poisoned buffer read by mistake shows in the loss.
 *
 * In place. These accept output == input: softmax_fwd (out == in),
 * softmax_bwd (dx == dy or dx == y), causal_mask_fwd (out == in),
 * causal_mask_bwd (dx == dy), crossentropy_bwd (dlogits == logits),
 * layernorm_bwd (dx == dout). Row statistics are computed before any element
 * of the row is written, and each element is read before it is written.
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "gc_runtime_internal.h"

#ifdef __clang__
/* `omp simd` is a hint here; clang warns where it cannot honour it. */
#pragma clang diagnostic ignored "-Wpass-failed"
#endif

_Static_assert(sizeof(gc_real) == (GC_REAL_IS_DOUBLE ? sizeof(double) : sizeof(float)),
               "GC_REAL must be float or double");

/* Below this many elements of work a kernel runs on one thread: waking the
 * team costs more than it saves. */
#define PAR_MIN_WORK 32768L
/* Below this many multiply-adds a matmul runs on one thread. */
#define GEMM_SPLIT_MIN (1 << 20)
/* Column block of the column-parallel reductions (elements). */
#define COL_BLOCK 64L
/* Below this many bytes a memset runs on one thread. */
#define SET_MIN_PAR (1L << 20)

/* ------------------------------------------------------------------ helpers */

#if GC_REAL_IS_DOUBLE
#define gc_sqrt sqrt
#else
#define gc_sqrt sqrtf
#endif

/* ROW_CLONES: the row loops that evaluate exp (softmax, cross-entropy) also
 * get an AVX2 build, picked once at load time (GCC/Clang target_clones, an
 * ifunc): twice the vector width halves their time. The clones differ in
 * summation order (lanes), so results are deterministic per machine but may
 * differ in the last bits between a CPU with AVX2 and one without. */
/* Not under ThreadSanitizer (GCRT_TSAN). */
#if !defined(GCRT_TSAN) && defined(__x86_64__) && defined(__ELF__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define ROW_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef ROW_CLONES
#define ROW_CLONES
#endif
#if !defined(GCRT_TSAN) && defined(__x86_64__) && defined(__ELF__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define EW_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
#endif
#ifndef EW_CLONES
#define EW_CLONES
#endif

/* Number of OpenMP threads a parallel region would get. */
static int team_size(void) { return omp_get_max_threads(); }

/* memset of `bytes` bytes: one contiguous, page-aligned range per thread.
 * Large ranges let glibc use non-temporal stores (about twice as fast as 1
 * MiB pieces on the 154 MB wte gradient). */
static void par_memset(void *p, int byte, size_t bytes)
{
    if (bytes < (size_t)SET_MIN_PAR) {
        memset(p, byte, bytes);
        return;
    }
    #pragma omp parallel
    {
        size_t nt = (size_t)omp_get_num_threads(), id = (size_t)omp_get_thread_num();
        size_t per = (bytes / nt + 4095) / 4096 * 4096, off = per * id;
        if (off < bytes)
            memset((char *)p + off, byte, bytes - off < per ? bytes - off : per);
    }
}

/* Max of x[0..n); -INFINITY when n == 0. NaN may or may not win (callers
 * propagate NaN through the later sum anyway). */
static inline gc_real row_max(const gc_real *x, long n)
{
    gc_real m = -INFINITY;
    #pragma omp simd reduction(max : m)
    for (long i = 0; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

/* sum_i exp(x[i] - m) over [0,n), accumulated in double. */
static inline double row_sumexp(const gc_real *x, long n, gc_real m)
{
    double s = 0.0;
    #pragma omp simd reduction(+ : s)
    for (long i = 0; i < n; i++)
        s += (double)gcrt_exp_nonpos(x[i] - m);
    return s;
}

/* y[i] = exp(x[i] - m) for i < n; returns their sum (in double). y may be x. */
static inline double row_expsum(gc_real *y, const gc_real *x, long n, gc_real m)
{
    double s = 0.0;
    #pragma omp simd reduction(+ : s)
    for (long i = 0; i < n; i++) {
        gc_real e = gcrt_exp_nonpos(x[i] - m);
        y[i] = e;
        s += e;
    }
    return s;
}

/* ------------------------------------------------------------------ matmul */

/* gc_runtime_internal.h */
void gcrt_gemm_one(gc_real *c, const gc_real *a, const gc_real *b, long M, long N,
                   long K, long lda, long ldb, long ldc, int ta, int tb, int acc)
{
    enum CBLAS_TRANSPOSE tra = ta ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE trb = tb ? CblasTrans : CblasNoTrans;
#if GC_REAL_IS_DOUBLE
    cblas_dgemm(CblasRowMajor, tra, trb, (int)M, (int)N, (int)K, 1.0, a, (int)lda, b,
                (int)ldb, acc ? 1.0 : 0.0, c, (int)ldc);
#else
    if (gcrt_sgemm(c, a, b, M, N, K, lda, ldb, ldc, ta, tb, acc))
        return;
    cblas_sgemm(CblasRowMajor, tra, trb, (int)M, (int)N, (int)K, 1.0f, a, (int)lda, b,
                (int)ldb, acc ? 1.0f : 0.0f, c, (int)ldc);
#endif
}

/* OpenBLAS runs single-threaded; the OpenMP team splits the work. */
static void blas_single_thread_once(void)
{
    static int done;
    if (!done) {
        openblas_set_num_threads(1);
        done = 1;
    }
}

/* One matmul c (MxN) (+)= op(a) @ op(b) split into `parts` blocks of rows
 * (split_m) or columns of c, each one BLAS call on one thread. Blocks are
 * multiples of 16 so each keeps whole BLAS micro-tiles. */
static void gemm_split(gc_real *c, const gc_real *a, const gc_real *b, long M, long N,
                       long K, int ta, int tb, int acc, int parts)
{
    long lda = ta ? M : K, ldb = tb ? K : N;
    int split_m = M > N;
    long len = split_m ? M : N;
    long blk = ((len + parts - 1) / parts + 15) / 16 * 16;
    long nblk = (len + blk - 1) / blk;
    #pragma omp parallel for schedule(static) if (nblk > 1)
    for (long k = 0; k < nblk; k++) {
        long lo = k * blk, n = len - lo < blk ? len - lo : blk;
        if (split_m)
            gcrt_gemm_one(c + lo * N, ta ? a + lo : a + lo * K, b, n, N, K, lda, ldb, N, ta, tb, acc);
        else
            gcrt_gemm_one(c + lo, a, tb ? b + lo * K : b + lo, M, n, K, lda, ldb, N, ta, tb, acc);
    }
}

/* c[b] (MxN) (+)= op(a[b]) @ op(b[b]) for b < batch (see gc_runtime.h).
 * Small items (attention: 48 of 64x64x64) run one item per thread; a large
 * item is split across the team. */
void gc_matmul(gc_real *c, const gc_real *a, const gc_real *b, long batch, long M, long N,
               long K, int ta, int tb, int acc)
{
    blas_single_thread_once();
    if (batch <= 0 || M <= 0 || N <= 0)
        return;
    if (K <= 0) { /* an empty sum (BLAS would reject lda = 0) */
        if (!(acc & 1))
            memset(c, 0, (size_t)(batch * M * N) * sizeof(gc_real));
        return;
    }
    int nt = team_size();
    double work = (double)M * (double)N * (double)K;
    long sa = M * K, sb = K * N, sc = M * N;
    if (batch > 1 && (batch >= nt || work < GEMM_SPLIT_MIN)) {
        long lda = ta ? M : K, ldb = tb ? K : N;
        #pragma omp parallel for schedule(static) if (work * (double)batch >= GEMM_SPLIT_MIN)
        for (long i = 0; i < batch; i++)
            gcrt_gemm_one(c + i * sc, a + i * sa, b + i * sb, M, N, K, lda, ldb, N, ta, tb, acc & 1);
        return;
    }
    int parts = work >= GEMM_SPLIT_MIN ? nt : 1;
    for (long i = 0; i < batch; i++)
        gemm_split(c + i * sc, a + i * sa, b + i * sb, M, N, K, ta, tb, acc & 1, parts);
}

/* c = op(a) @ op(b), then bias[0..N) added to each of its batch*M rows: the
 * same two roundings as a matmul followed by a broadcast add. */
void gc_matmul_bias(gc_real *c, const gc_real *a, const gc_real *b, const gc_real *bias, long batch,
                    long M, long N, long K, int ta, int tb, int acc)
{
    gc_matmul(c, a, b, batch, M, N, K, ta, tb, acc);
    long rows = batch * M;
    #pragma omp parallel for schedule(static) if (rows * N >= PAR_MIN_WORK)
    for (long r = 0; r < rows; r++)
        for (long j = 0; j < N; j++)
            c[r * N + j] += bias[j];
}

/* ------------------------------------------------------------------ bias + GELU */

/* GELU and its derivative, the same arithmetic as the elementwise ops'
 * gc_gelu / gc_gelu_grad (codegen/expr.c, ew_preamble: llm.c's tanh
 * approximation, tanh by the Cephes expf polynomial), so a fused program
 * computes the bits an unfused one does. Keep the two texts in step
 * (train.fusions compares the losses). */
#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
static inline float gelu_tanh(float x)
{
    uint32_t xb, sign, tb, sb;
    memcpy(&xb, &x, 4);
    sign = xb & 0x80000000u;
    xb &= 0x7fffffffu;
    xb = xb < 0x41100000u ? xb : 0x41100000u;
    float a;
    memcpy(&a, &xb, 4);
    float r0 = -2.0f * a;
    float t = r0 * 1.44269504088896341f + 12582912.0f;
    float n = t - 12582912.0f;
    float r = r0 - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float z = r * r, y = 1.9875691500e-4f;
    y = y * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * z + r + 1.0f;
    memcpy(&tb, &t, 4);
    sb = (tb - 0x4B400000u + 127u) << 23;
    float scale, e;
    memcpy(&scale, &sb, 4);
    e = y * scale;
    float th = (1.0f - e) / (1.0f + e);
    memcpy(&tb, &th, 4);
    tb |= sign;
    memcpy(&th, &tb, 4);
    return th;
}

static inline float gelu_f(float x)
{
    float cube = 0.044715f * x * x * x;
    return 0.5f * x * (1.0f + gelu_tanh(GELU_K * (x + cube)));
}

/* gelu(x) and gelu'(x) from one tanh: the same expressions (hence bits) as
 * gc_gelu and gc_gelu_grad */
static inline void gelu_both(float x, float *g, float *dg)
{
    float cube = 0.044715f * x * x * x;
    float th = gelu_tanh(GELU_K * (x + cube));
    *g = 0.5f * x * (1.0f + th);
    float sech2 = 1.0f - th * th;
    *dg = 0.5f * (1.0f + th) + x * 0.5f * sech2 * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
}

/* The GELU passes after the matmuls, on elements [lo, hi). EW_CLONES: an
 * AVX-512 and an AVX2 build picked at load time, as wide as the emitted
 * elementwise kernels (-march=native) that the unfused program runs; the
 * arithmetic is per element with no contraction (ISO C: -ffp-contract=off),
 * so every clone computes the same bits. */
static EW_CLONES void gelu_fwd_range(gc_real *restrict h, const gc_real *restrict pre, long lo, long hi)
{
    for (long i = lo; i < hi; i++)
        h[i] = (gc_real)gelu_f((float)pre[i]);
}

static EW_CLONES void gelu_bwd_range(gc_real *restrict dpre, gc_real *restrict h, const gc_real *restrict pre,
                                     long lo, long hi)
{
    for (long i = lo; i < hi; i++) {
        float gv, dg;
        gelu_both((float)pre[i], &gv, &dg);
        h[i] = (gc_real)gv;
        dpre[i] = (gc_real)(dg * (float)dpre[i]);
    }
}

/* [lo, hi): this thread's contiguous share of n elements */
static void thread_range(long n, long *lo, long *hi)
{
    long nt = omp_get_num_threads(), t = omp_get_thread_num(), per = (n + nt - 1) / nt;
    *lo = t * per < n ? t * per : n;
    *hi = *lo + per < n ? *lo + per : n;
}

/* pre = op(a) @ op(b) + bias, h = gelu(pre): gc_matmul_bias into pre, then
 * one pass writing h (the epilogue of cuBLASLt's GELU_AUX_BIAS). */
void gc_matmul_bias_gelu(gc_real *h, gc_real *pre, const gc_real *a, const gc_real *b, const gc_real *bias,
                         long batch, long M, long N, long K, int ta, int tb)
{
    gc_matmul_bias(pre, a, b, bias, batch, M, N, K, ta, tb, 0);
    long n = batch * M * N;
    #pragma omp parallel if (n >= PAR_MIN_WORK)
    {
        long lo, hi;
        thread_range(n, &lo, &hi);
        gelu_fwd_range(h, pre, lo, hi);
    }
}

/* dpre = gelu'(pre) * (op(a) @ op(b)): the product into dpre, then scaled in
 * place (cuBLASLt's DGELU epilogue); h = gelu(pre) recomputed in the same
 * pass. */
void gc_matmul_dgelu(gc_real *dpre, gc_real *h, const gc_real *a, const gc_real *b, const gc_real *pre, long batch,
                     long M, long N, long K, int ta, int tb)
{
    gc_matmul(dpre, a, b, batch, M, N, K, ta, tb, 0);
    long n = batch * M * N;
    #pragma omp parallel if (n >= PAR_MIN_WORK)
    {
        long lo, hi;
        thread_range(n, &lo, &hi);
        gelu_bwd_range(dpre, h, pre, lo, hi);
    }
}

/* gc_matmul_dgelu, then gc_reduce_rows of dpre into db: the unfused ops'
 * arithmetic, so the same bits. */
void gc_matmul_dgelu_bgrad(gc_real *dpre, gc_real *h, gc_real *db, const gc_real *a, const gc_real *b,
                           const gc_real *pre, long batch, long M, long N, long K, int ta, int tb, int acc)
{
    gc_matmul_dgelu(dpre, h, a, b, pre, batch, M, N, K, ta, tb);
    gc_reduce_rows(db, dpre, batch * M, N, acc >> 2 & 1);
}

/* ------------------------------------------------------------------ reduce_rows */

/* out[c] (+)= sum_r in[r, c]; in is (rows, cols). Column blocks in parallel,
 * each column summed over r in order, in double. */
void gc_reduce_rows(gc_real *out, const gc_real *in, long rows, long cols, int acc)
{
    long nblk = (cols + COL_BLOCK - 1) / COL_BLOCK;
    #pragma omp parallel for schedule(static) if (rows * cols >= PAR_MIN_WORK)
    for (long k = 0; k < nblk; k++) {
        long c0 = k * COL_BLOCK, nc = cols - c0 < COL_BLOCK ? cols - c0 : COL_BLOCK;
        double s[COL_BLOCK] = {0};
        for (long r = 0; r < rows; r++) {
            const gc_real *row = in + r * cols + c0;
            for (long j = 0; j < nc; j++)
                s[j] += row[j];
        }
        gc_real *o = out + c0;
        if (acc & 1)
            for (long j = 0; j < nc; j++)
                o[j] += (gc_real)s[j];
        else
            for (long j = 0; j < nc; j++)
                o[j] = (gc_real)s[j];
    }
}

/* ------------------------------------------------------------------ embedding */

/* Exits 1 with a message when some idx[i] is outside [0, rows). */
static void check_indices(const int32_t *idx, long n, long rows, const char *what,
                          const char *range)
{
    for (long i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= rows) {
            fprintf(stderr, "error: %s %d at position %ld is outside %s [0, %ld)\n", what,
                    (int)idx[i], i, range, rows);
            exit(1);
        }
}

/* out (n, C) = table (rows, C)[idx]; one row per iteration. */
void gc_embedding_fwd(gc_real *out, const int32_t *idx, const gc_real *table, long n,
                      long rows, long C)
{
    check_indices(idx, n, rows, "index", "the embedding table");
    #pragma omp parallel for schedule(static) if (n * C >= PAR_MIN_WORK)
    for (long i = 0; i < n; i++)
        memcpy(out + i * C, table + (long)idx[i] * C, (size_t)C * sizeof(gc_real));
}

/* dtable (rows, C) [idx[i]] += dout (n, C) [i], in order of i. acc bit 0
 * clear: dtable is zeroed first (parallel memset). Column blocks in parallel,
 * so repeated indices are summed in a fixed order without atomics. */
void gc_embedding_bwd(gc_real *dtable, const gc_real *dout, const int32_t *idx, long n,
                      long rows, long C, int acc)
{
    check_indices(idx, n, rows, "index", "the embedding table");
    if (!(acc & 1))
        par_memset(dtable, 0, (size_t)rows * (size_t)C * sizeof(gc_real));
    long blk = 4 * COL_BLOCK;
    long nblk = (C + blk - 1) / blk;
    #pragma omp parallel for schedule(static) if (n * C >= PAR_MIN_WORK)
    for (long k = 0; k < nblk; k++) {
        long c0 = k * blk, nc = C - c0 < blk ? C - c0 : blk;
        for (long i = 0; i < n; i++) {
            gc_real *d = dtable + (long)idx[i] * C + c0;
            const gc_real *g = dout + i * C + c0;
            for (long j = 0; j < nc; j++)
                d[j] += g[j];
        }
    }
}

/* ------------------------------------------------------------------ layernorm */

/* out (N, C) = (x - mean) * rstd * w + b per row; mean, rstd (N) saved.
 * Biased variance, two passes, double accumulation; rstd = 1/sqrt(var + eps)
 * rounded to gc_real as in llm.c. */
/* one row of the layernorm forward (statistics in double) */
static inline void layernorm_row(gc_real *o, gc_real *mean, gc_real *rstd, const gc_real *xr, const gc_real *w,
                                 const gc_real *b, long C, float eps)
{
    double s = 0.0;
    #pragma omp simd reduction(+ : s)
    for (long i = 0; i < C; i++)
        s += xr[i];
    double md = s / (double)C;
    double v = 0.0;
    #pragma omp simd reduction(+ : v)
    for (long i = 0; i < C; i++) {
        double d = (double)xr[i] - md;
        v += d * d;
    }
    gc_real m = (gc_real)md;
    gc_real rs = (gc_real)1 / gc_sqrt((gc_real)(v / (double)C) + (gc_real)eps);
    for (long i = 0; i < C; i++)
        o[i] = (xr[i] - m) * rs * w[i] + b[i];
    *mean = m;
    *rstd = rs;
}

void gc_layernorm_fwd(gc_real *out, gc_real *mean, gc_real *rstd, const gc_real *x,
                      const gc_real *w, const gc_real *b, long N, long C, float eps)
{
    #pragma omp parallel for schedule(static) if (N * C >= PAR_MIN_WORK)
    for (long r = 0; r < N; r++)
        layernorm_row(out + r * C, mean + r, rstd + r, x + r * C, w, b, C, eps);
}

/* x = ra + rb, then layernorm(x) row by row: the residual add and the next
 * layernorm in one pass over the rows (x stays in cache between the two) */
void gc_add_layernorm_fwd(gc_real *x, gc_real *out, gc_real *mean, gc_real *rstd, const gc_real *ra,
                          const gc_real *rb, const gc_real *w, const gc_real *b, long N, long C, float eps)
{
    #pragma omp parallel for schedule(static) if (N * C >= PAR_MIN_WORK)
    for (long r = 0; r < N; r++) {
        gc_real *xr = x + r * C;
        for (long i = 0; i < C; i++)
            xr[i] = ra[r * C + i] + rb[r * C + i];
        layernorm_row(out + r * C, mean + r, rstd + r, xr, w, b, C, eps);
    }
}

/* dw (bit 1) and db (bit 2) of the layernorm backward, either may be NULL:
 * column blocks in parallel, each column summed over rows in order. */
static void layernorm_bwd_params(gc_real *dw, gc_real *db, const gc_real *dout,
                                 const gc_real *x, const gc_real *mean, const gc_real *rstd,
                                 long N, long C, int acc)
{
    long nblk = (C + COL_BLOCK - 1) / COL_BLOCK;
    #pragma omp parallel for schedule(static) if (N * C >= PAR_MIN_WORK)
    for (long k = 0; k < nblk; k++) {
        long c0 = k * COL_BLOCK, nc = C - c0 < COL_BLOCK ? C - c0 : COL_BLOCK;
        double sw[COL_BLOCK] = {0}, sb[COL_BLOCK] = {0};
        for (long r = 0; r < N; r++) {
            const gc_real *xr = x + r * C + c0, *g = dout + r * C + c0;
            gc_real m = mean[r], rs = rstd[r];
            for (long j = 0; j < nc; j++) {
                sw[j] += (double)((xr[j] - m) * rs * g[j]);
                sb[j] += g[j];
            }
        }
        for (long j = 0; dw && j < nc; j++)
            dw[c0 + j] = (acc & 2) ? dw[c0 + j] + (gc_real)sw[j] : (gc_real)sw[j];
        for (long j = 0; db && j < nc; j++)
            db[c0 + j] = (acc & 4) ? db[c0 + j] + (gc_real)sb[j] : (gc_real)sb[j];
    }
}

/* dx (N, C) (+)= rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) with
 * dnorm = w * dout, norm = (x - mean) * rstd (llm.c's formula), row-parallel;
 * dw (+)= sum_r norm * dout, db (+)= sum_r dout. dw/db are computed before dx
 * so dx may alias dout. */
void gc_layernorm_bwd(gc_real *dx, gc_real *dw, gc_real *db, const gc_real *dout,
                      const gc_real *x, const gc_real *w, const gc_real *mean,
                      const gc_real *rstd, long N, long C, int acc)
{
    if (dw || db)
        layernorm_bwd_params(dw, db, dout, x, mean, rstd, N, C, acc);
    if (!dx)
        return;
    #pragma omp parallel for schedule(static) if (N * C >= PAR_MIN_WORK)
    for (long r = 0; r < N; r++) {
        const gc_real *xr = x + r * C, *g = dout + r * C;
        gc_real m = mean[r], rs = rstd[r];
        double s1 = 0.0, s2 = 0.0;
        #pragma omp simd reduction(+ : s1, s2)
        for (long i = 0; i < C; i++) {
            gc_real dn = w[i] * g[i];
            s1 += dn;
            s2 += (double)(dn * ((xr[i] - m) * rs));
        }
        gc_real dm = (gc_real)(s1 / (double)C), dnm = (gc_real)(s2 / (double)C);
        gc_real *d = dx + r * C;
        if (acc & 1)
            for (long i = 0; i < C; i++)
                d[i] += (w[i] * g[i] - dm - (xr[i] - m) * rs * dnm) * rs;
        else
            for (long i = 0; i < C; i++)
                d[i] = (w[i] * g[i] - dm - (xr[i] - m) * rs * dnm) * rs;
    }
}

/* ------------------------------------------------------------------ permute */

/* out (+)= in with axes permuted (out.shape[i] = shape[perm[i]]), rank <= 8.
 * Output axes that stay adjacent in the input are merged; then each output
 * row (last merged axis) is one strided (or contiguous) gather. */
void gc_permute(gc_real *out, const gc_real *in, int rank, const long *shape,
                const int *perm, int acc)
{
    long istride[8], os[8], ost[8]; /* input strides; merged out shape / input stride */
    long total = 1;
    for (int d = rank - 1; d >= 0; d--) {
        istride[d] = total;
        total *= shape[d];
    }
    if (total <= 0)
        return;
    int nr = 0;
    for (int i = 0; i < rank; i++) {
        long n = shape[perm[i]], st = istride[perm[i]];
        if (n == 1)
            continue;
        if (nr > 0 && ost[nr - 1] == st * n) {
            os[nr - 1] *= n;
            ost[nr - 1] = st;
        } else {
            os[nr] = n;
            ost[nr] = st;
            nr++;
        }
    }
    if (nr == 0) { /* a single element */
        os[0] = 1;
        ost[0] = 1;
        nr = 1;
    }
    long inner = os[nr - 1], istep = ost[nr - 1], outer = total / inner;
    #pragma omp parallel for schedule(static) if (total >= PAR_MIN_WORK)
    for (long o = 0; o < outer; o++) {
        long off = 0, rem = o;
        for (int d = nr - 2; d >= 0; d--) {
            off += (rem % os[d]) * ost[d];
            rem /= os[d];
        }
        const gc_real *src = in + off;
        gc_real *dst = out + o * inner;
        if (istep == 1) {
            if (acc & 1)
                for (long j = 0; j < inner; j++)
                    dst[j] += src[j];
            else
                memmove(dst, src, (size_t)inner * sizeof(gc_real));
        } else if (acc & 1) {
            for (long j = 0; j < inner; j++)
                dst[j] += src[j * istep];
        } else {
            for (long j = 0; j < inner; j++)
                dst[j] = src[j * istep];
        }
    }
}

/* ------------------------------------------------------------------ softmax */

/* y = softmax(x) over one row of n, max subtracted; y may be x. */
ROW_CLONES static void softmax_row(gc_real *y, const gc_real *x, long n)
{
    gc_real m = row_max(x, n);
    gc_real inv = (gc_real)(1.0 / row_expsum(y, x, n, m));
    for (long i = 0; i < n; i++)
        y[i] *= inv;
}

/* out (rows, cols) = softmax of each row of in, max subtracted; -INFINITY
 * gives 0. A row without a finite entry gives NaN (as PyTorch), and a NaN
 * anywhere in a row makes the row NaN. out may be in. */
void gc_softmax_fwd(gc_real *out, const gc_real *in, long rows, long cols)
{
    #pragma omp parallel for schedule(static) if (rows * cols >= PAR_MIN_WORK)
    for (long r = 0; r < rows; r++)
        softmax_row(out + r * cols, in + r * cols, cols);
}

/* dx (rows, cols) (+)= y * (dy - sum(dy * y)) per row; dx may be dy or y. */
void gc_softmax_bwd(gc_real *dx, const gc_real *dy, const gc_real *y, long rows, long cols,
                    int acc)
{
    #pragma omp parallel for schedule(static) if (rows * cols >= PAR_MIN_WORK)
    for (long r = 0; r < rows; r++) {
        const gc_real *g = dy + r * cols, *p = y + r * cols;
        gc_real *d = dx + r * cols;
        double s = 0.0;
        #pragma omp simd reduction(+ : s)
        for (long i = 0; i < cols; i++)
            s += (double)(g[i] * p[i]);
        gc_real dot = (gc_real)s;
        if (acc & 1)
            for (long i = 0; i < cols; i++)
                d[i] += p[i] * (g[i] - dot);
        else
            for (long i = 0; i < cols; i++)
                d[i] = p[i] * (g[i] - dot);
    }
}

/* ------------------------------------------------------------------ causal mask */

/* out (batch, T, T) = in below and on the diagonal, -INFINITY above; out may
 * be in. */
void gc_causal_mask_fwd(gc_real *out, const gc_real *in, long batch, long T)
{
    long rows = batch * T;
    #pragma omp parallel for schedule(static) if (rows * T >= PAR_MIN_WORK)
    for (long r = 0; r < rows; r++) {
        long i = r % T;
        const gc_real *x = in + r * T;
        gc_real *y = out + r * T;
        for (long j = 0; j < T; j++)
            y[j] = j <= i ? x[j] : -INFINITY;
    }
}

/* dx (batch, T, T) (+)= dy below and on the diagonal, (+)0 above; dx may be
 * dy. */
void gc_causal_mask_bwd(gc_real *dx, const gc_real *dy, long batch, long T, int acc)
{
    long rows = batch * T;
    #pragma omp parallel for schedule(static) if (rows * T >= PAR_MIN_WORK)
    for (long r = 0; r < rows; r++) {
        long i = r % T;
        const gc_real *g = dy + r * T;
        gc_real *d = dx + r * T;
        if (acc & 1)
            for (long j = 0; j < T; j++)
                d[j] += j <= i ? g[j] : 0;
        else
            for (long j = 0; j < T; j++)
                d[j] = j <= i ? g[j] : 0;
    }
}

/* ------------------------------------------------------------------ cross-entropy */

/* logsumexp(x[0:n]) - x[t], max subtracted, the sum in double. */
ROW_CLONES double gcrt_ce_row_loss(const gc_real *x, long n, long t)
{
    gc_real m = row_max(x, n);
    return log(row_sumexp(x, n, m)) + (double)m - (double)x[t];
}

/* loss[0] = mean over rows r < n of logsumexp(logits[r, 0:V]) - logits[r, t_r];
 * logits is (n, Vp). Rows in parallel; the per-row losses are summed in row
 * order in double (independent of the thread count). */
void gc_crossentropy_fwd(gc_real *loss, const gc_real *logits, const int32_t *targets,
                         long n, long Vp, long V)
{
    check_indices(targets, n, V, "target", "the vocabulary");
    if (n <= 0) {
        loss[0] = 0;
        return;
    }
    double *rl = malloc((size_t)n * sizeof *rl);
    if (!rl) {
        fprintf(stderr, "error: out of memory in gc_crossentropy_fwd\n");
        exit(1);
    }
    #pragma omp parallel for schedule(static) if (n * V >= PAR_MIN_WORK)
    for (long r = 0; r < n; r++)
        rl[r] = gcrt_ce_row_loss(logits + r * Vp, V, targets[r]);
    double sum = 0.0;
    for (long r = 0; r < n; r++)
        sum += rl[r];
    free(rl);
    loss[0] = (gc_real)(sum / (double)n);
}

/* d[c] += (exp(x[c] - m) * inv) * scale for c in [lo, hi). */
static inline void ce_grad_add(gc_real *d, const gc_real *x, long lo, long hi, gc_real m,
                               gc_real inv, gc_real scale)
{
    for (long c = lo; c < hi; c++)
        d[c] += gcrt_exp_nonpos(x[c] - m) * inv * scale;
}

/* One row of the cross-entropy gradient: d[0:V] (+)= scale * (softmax(x[0:V])
 * - onehot(t)), d[V:Vp] (+)= 0. d may be x. Without acc the exponentials are
 * stored in d and scaled in a second pass (one exp per element); with acc
 * they are computed twice. */
ROW_CLONES void gcrt_ce_row_grad(gc_real *d, const gc_real *x, long V, long Vp, long t,
                                   gc_real scale, int acc)
{
    gc_real m = row_max(x, V);
    if (acc) {
        gc_real inv = (gc_real)(1.0 / row_sumexp(x, V, m));
        gc_real pt = gcrt_exp_nonpos(x[t] - m) * inv;
        ce_grad_add(d, x, 0, t, m, inv, scale);
        ce_grad_add(d, x, t + 1, V, m, inv, scale);
        d[t] += (pt - 1) * scale;
        return;
    }
    gc_real inv = (gc_real)(1.0 / row_expsum(d, x, V, m));
    gc_real pt = d[t] * inv;
    for (long c = 0; c < V; c++)
        d[c] = d[c] * inv * scale;
    d[t] = (pt - 1) * scale;
    for (long c = V; c < Vp; c++)
        d[c] = 0;
}

/* dlogits (n, Vp) (+)= dloss[0]/n * (softmax(logits[r, 0:V]) - onehot(t_r)),
 * (+)0 in the padding columns V..Vp-1. dlogits may be logits: the row's max
 * is taken before the row is written, and each element is read before it is
 * written. */
void gc_crossentropy_bwd(gc_real *dlogits, const gc_real *dloss, const gc_real *logits,
                         const int32_t *targets, long n, long Vp, long V, int acc)
{
    check_indices(targets, n, V, "target", "the vocabulary");
    if (n <= 0)
        return;
    gc_real scale = dloss[0] / (gc_real)n;
    #pragma omp parallel for schedule(static) if (n * V >= PAR_MIN_WORK)
    for (long r = 0; r < n; r++)
        gcrt_ce_row_grad(dlogits + r * Vp, logits + r * Vp, V, Vp, targets[r], scale, acc & 1);
}

/* ------------------------------------------------------------------ fill, adamw, poison */

/* x[0..n) = value. */
void gc_fill(gc_real *x, long n, float value)
{
    if (n <= 0)
        return;
    if (value == 0.0f && !signbit(value)) {
        par_memset(x, 0, (size_t)n * sizeof(gc_real));
        return;
    }
    gc_real v = (gc_real)value;
    #pragma omp parallel for schedule(static) if (n >= 8 * PAR_MIN_WORK)
    for (long i = 0; i < n; i++)
        x[i] = v;
}

/* One AdamW step on n floats: the host's AdamW (host_adamw.c), which the
 * host update of an offloaded program (--offload opt) runs too, so both give
 * the same bits. */
void gc_adamw(float *p, const float *g, float *m, float *v, long n, float lr, float beta1,
              float beta2, float eps, float wd, int t)
{
    gc_host_adamw(p, g, m, v, n, lr, beta1, beta2, eps, wd, t);
}

void gc_adamw_multi(const gc_adamw_tensor *u, int n, float lr, float beta1, float beta2, float eps, int t)
{
    for (int i = 0; i < n; i++) {
        if (u[i].pcopy) {
            fprintf(stderr, "%s:%d: internal error: a bf16 weight copy on the CPU target\n", __FILE__, __LINE__);
            exit(1);
        }
        gc_adamw(u[i].p, u[i].g, u[i].m, u[i].v, u[i].n, lr, beta1, beta2, eps, u[i].wd, t);
    }
}

/* `bytes` bytes at p = 0xFF: a quiet NaN in every float format (f32, f64,
 * bf16) and -1 as int32, so a read of a dead buffer shows up. */
void gc_poison(void *p, size_t bytes)
{
    par_memset(p, 0xFF, bytes);
}
