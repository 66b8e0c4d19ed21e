/* gemm_cpu.c — single-precision matmul for CPUs with AVX-512 (gc_runtime_internal.h,
 * section "gemm_cpu.c").
 *
 * The CPU target's matmuls are at least 85% of a GPT-2 step. OpenBLAS is
 * built for many CPUs and picks its kernel by CPU model; on the machines this
 * project runs on (AMD Zen 4, where a 512-bit FMA issues as two 256-bit
 * halves) its choice reaches about 75% of peak inside a training step. This
 * file is the classic packed GEMM, written for the shapes a transformer step
 * has (one side is B*T rows of activations), single-threaded: kernels_cpu.c
 * already gives each OpenMP thread its own block of the output.
 *
 * Loops (outer to inner), with the cache each block is sized for:
 *   jc: NC columns of C and op(B)       C block (MC x NC) and B panel in L3
 *   pc: KC of the K dimension           B panel (KC x NC) packed once
 *   ic: MC rows of C and op(A)          A block (MC x KC) packed, lives in L2
 *   jr: NR = 32 columns                 B micro-panel (KC x 32)
 *   ir: MR = 8 rows                     A micro-panel (KC x 8), then the kernel
 * A matmul with few rows (M <= MS: the B*T rows of activations in the
 * forward and input-gradient matmuls) runs the few-rows order instead
 * (sgemm_few_rows): all M rows of A packed per KC slice, op(B) packed one
 * micro-panel at a time.
 * The micro-kernel keeps an 8 x 32 tile of C in 16 zmm registers and does
 * 16 FMAs per k from one broadcast of A per row and two loads of B. Packing
 * handles the transposes, so one kernel serves all four (ta, tb) cases;
 * panels are padded with zeros and edge tiles go through a scratch tile.
 *
 * Rounding: each C element is the sum over k in order within each KC slice,
 * added to C slice by slice, in both orders; so the bits do not depend on
 * the order chosen nor on how kernels_cpu.c splits C across threads.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gc_runtime_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define GEMM_AVX512 1
#else
#define GEMM_AVX512 0
#endif

/* Tile, block sizes and the few-rows limit, tuned on Zen 4 (1 MiB L2 per
 * core, 32 MiB L3) over the GPT-2 124M shapes: about 90% of one core's
 * AVX-512 peak there on a quiet machine. */
enum { MR = 8, NR = 32, KC = 768, MC = 128, NC = 3072, MS = 512 };

#if GEMM_AVX512

#define AVX512 __attribute__((target("avx512f")))

/* dst[k*dstride + i] = src[i*ld + k] for i, k < 8: an 8 x 8 transpose in
 * registers. */
AVX512 static inline void transpose_8x8(float *dst, long dstride, const float *src, long ld)
{
    __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + ld), r2 = _mm256_loadu_ps(src + 2 * ld),
           r3 = _mm256_loadu_ps(src + 3 * ld), r4 = _mm256_loadu_ps(src + 4 * ld),
           r5 = _mm256_loadu_ps(src + 5 * ld), r6 = _mm256_loadu_ps(src + 6 * ld),
           r7 = _mm256_loadu_ps(src + 7 * ld);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(dst, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(dst + dstride, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(dst + 2 * dstride, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(dst + 3 * dstride, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(dst + 4 * dstride, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(dst + 5 * dstride, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(dst + 6 * dstride, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(dst + 7 * dstride, _mm256_permute2f128_ps(u3, u7, 0x31));
}

/* dst[k*dstride + i] = src[i*ld + k] for i < rows (a multiple of 8), k < kc. */
AVX512 static void transpose_rows(float *dst, long dstride, const float *src, long ld, long rows, long kc)
{
    long k8 = kc / 8 * 8;
    for (long i = 0; i < rows; i += 8) {
        for (long k = 0; k < k8; k += 8)
            transpose_8x8(dst + k * dstride + i, dstride, src + i * ld + k, ld);
        for (long k = k8; k < kc; k++)
            for (long r = 0; r < 8; r++)
                dst[k * dstride + i + r] = src[(i + r) * ld + k];
    }
}

/* Packs n columns of a kc x n operand into panels of w columns (w = MR for
 * op(A)^T, NR for op(B)): panel p holds, for each k, the w values X[k, p*w + j]
 * (zeros past n). X[k, j] is src[k*ld + j] (spread: each row of src feeds
 * every panel) or src[j*ld + k] (transposed: 8 x 8 blocks in registers). */
AVX512 static void pack(float *dst, const float *src, long ld, int transposed, long w, long kc, long n)
{
    long full = n / w * w;
    if (!transposed) {
        for (long k = 0; k < kc; k++) {
            const float *row = src + k * ld;
            float *d = dst + k * w;
            for (long p = 0; p < full; p += w, d += kc * w)
                for (long j = 0; j < w; j += 8)
                    _mm256_store_ps(d + j, _mm256_loadu_ps(row + p + j));
            if (full < n)   /* the last, partial panel: zeros past n */
                for (long j = 0; j < w; j++)
                    d[j] = full + j < n ? row[full + j] : 0.0f;
        }
        return;
    }
    for (long p = 0; p < n; p += w, dst += kc * w) {
        if (p < full) {
            transpose_rows(dst, w, src + p * ld, ld, w, kc);
            continue;
        }
        for (long k = 0; k < kc; k++)
            for (long j = 0; j < w; j++)
                dst[k * w + j] = p + j < n ? src[(p + j) * ld + k] : 0.0f;
    }
}

/* Rows [0, mc) x [0, kc) of op(A) into MR-row panels; op(A)[i, k] is
 * a[i*lda + k], or a[k*lda + i] when ta. */
static void pack_a(float *dst, const float *a, long lda, int ta, long mc, long kc)
{
    pack(dst, a, lda, !ta, MR, kc, mc);
}

/* Rows [0, kc) x columns [0, nc) of op(B) into NR-column panels; op(B)[k, j]
 * is b[k*ldb + j], or b[j*ldb + k] when tb. */
static void pack_b(float *dst, const float *b, long ldb, int tb, long kc, long nc)
{
    pack(dst, b, ldb, tb, NR, kc, nc);
}

#define ROW(i)                                      \
    {                                               \
        __m512 ai = _mm512_set1_ps(ap[i]);          \
        c##i##0 = _mm512_fmadd_ps(ai, b0, c##i##0); \
        c##i##1 = _mm512_fmadd_ps(ai, b1, c##i##1); \
    }
#define STORE(i)                                                                          \
    if (add) {                                                                            \
        c##i##0 = _mm512_add_ps(_mm512_loadu_ps(c + (i) * ldc), c##i##0);                 \
        c##i##1 = _mm512_add_ps(_mm512_loadu_ps(c + (i) * ldc + 16), c##i##1);            \
    }                                                                                     \
    _mm512_storeu_ps(c + (i) * ldc, c##i##0);                                             \
    _mm512_storeu_ps(c + (i) * ldc + 16, c##i##1);

/* c[0:8, 0:32] (+)= sum_k ap[k*8 + i] * bp[k*32 + j]. */
AVX512 static void kernel_8x32(long kc, const float *ap, const float *bp, float *c, long ldc, int add)
{
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
           c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00,
           c61 = c00, c70 = c00, c71 = c00;
    for (long k = 0; k < kc; k++) {
        __m512 b0 = _mm512_load_ps(bp), b1 = _mm512_load_ps(bp + 16);
        ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5) ROW(6) ROW(7)
        ap += MR;
        bp += NR;
    }
    STORE(0) STORE(1) STORE(2) STORE(3) STORE(4) STORE(5) STORE(6) STORE(7)
}
#undef ROW
#undef STORE

/* Per-thread packing buffers, 64-byte aligned, grown on demand. */
static _Thread_local float *buf_a, *buf_b;
static _Thread_local size_t cap_a, cap_b;

static float *grow(float **p, size_t *cap, size_t n)
{
    if (n <= *cap)
        return *p;
    free(*p);
    size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
    *p = aligned_alloc(64, bytes);
    *cap = *p ? n : 0;
    return *p;
}

AVX512 static void macro_block(float *c, long ldc, const float *pa, const float *pb, long mc, long nc,
                               long kc, int add)
{
    float tile[MR * NR] __attribute__((aligned(64)));
    for (long jr = 0; jr < nc; jr += NR) {
        long cols = nc - jr < NR ? nc - jr : NR;
        const float *bp = pb + jr * kc;
        for (long ir = 0; ir < mc; ir += MR) {
            long rows = mc - ir < MR ? mc - ir : MR;
            float *cc = c + ir * ldc + jr;
            const float *ap = pa + ir * kc;
            if (rows == MR && cols == NR) {
                kernel_8x32(kc, ap, bp, cc, ldc, add);
                continue;
            }
            kernel_8x32(kc, ap, bp, tile, NR, 0);
            for (long i = 0; i < rows; i++)
                for (long j = 0; j < cols; j++)
                    cc[i * ldc + j] = add ? cc[i * ldc + j] + tile[i * NR + j] : tile[i * NR + j];
        }
    }
}

/* Whether this GEMM runs here; decided on first use (threads may race to
 * decide: they all reach the same answer, stored atomically). */
static int have_avx512(void)
{
    static int known = -1;
    int k = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (k < 0) {
        const char *e = getenv("GC_CPU_GEMM");
        k = !(e && !strcmp(e, "blas")) && __builtin_cpu_supports("avx512f");
        __atomic_store_n(&known, k, __ATOMIC_RELAXED);
    }
    return k;
}

/* Few rows (M <= MS: B*T rows of activations times a weight): all of op(A)
 * for one KC slice stays packed in L2 and op(B) is packed one micro-panel
 * at a time, just before the kernels that use it, so the weight streams from
 * memory once per KC slice and its packed copy never leaves L1/L2. */
static int sgemm_few_rows(float *c, const float *a, const float *b, long M, long N, long K, long lda,
                          long ldb, long ldc, int ta, int tb, int acc)
{
    long kc_max = K < KC ? K : KC;
    float *pa = grow(&buf_a, &cap_a, (size_t)((M + MR - 1) / MR * MR * kc_max));
    float *pb = grow(&buf_b, &cap_b, (size_t)(NR * kc_max));
    if (!pa || !pb)
        return 0;
    for (long pc = 0; pc < K; pc += KC) {
        long kc = K - pc < KC ? K - pc : KC;
        pack_a(pa, ta ? a + pc * lda : a + pc, lda, ta, M, kc);
        int add = pc > 0 || acc;
        for (long jr = 0; jr < N; jr += NR) {
            long nr = N - jr < NR ? N - jr : NR;
            pack_b(pb, tb ? b + jr * ldb + pc : b + pc * ldb + jr, ldb, tb, kc, nr);
            macro_block(c + jr, ldc, pa, pb, M, nr, kc, add);
        }
    }
    return 1;
}

int gcrt_sgemm(float *c, const float *a, const float *b, long M, long N, long K, long lda, long ldb,
               long ldc, int ta, int tb, int acc)
{
    if (!have_avx512() || M <= 0 || N <= 0 || K <= 0)
        return 0;
    if (M <= MS)
        return sgemm_few_rows(c, a, b, M, N, K, lda, ldb, ldc, ta, tb, acc);
    long kc_max = K < KC ? K : KC, nc_max = N < NC ? N : NC, mc_max = M < MC ? M : MC;
    float *pa = grow(&buf_a, &cap_a, (size_t)((mc_max + MR - 1) / MR * MR * kc_max));
    float *pb = grow(&buf_b, &cap_b, (size_t)((nc_max + NR - 1) / NR * NR * kc_max));
    if (!pa || !pb)
        return 0;   /* out of memory for the panels: the caller uses BLAS */
    for (long jc = 0; jc < N; jc += NC) {
        long nc = N - jc < NC ? N - jc : NC;
        for (long pc = 0; pc < K; pc += KC) {
            long kc = K - pc < KC ? K - pc : KC;
            /* op(B)[pc.., jc..] */
            pack_b(pb, tb ? b + jc * ldb + pc : b + pc * ldb + jc, ldb, tb, kc, nc);
            int add = pc > 0 || acc;
            for (long ic = 0; ic < M; ic += MC) {
                long mc = M - ic < MC ? M - ic : MC;
                /* op(A)[ic.., pc..] */
                pack_a(pa, ta ? a + pc * lda + ic : a + ic * lda + pc, lda, ta, mc, kc);
                macro_block(c + ic * ldc + jc, ldc, pa, pb, mc, nc, kc, add);
            }
        }
    }
    return 1;
}

#else

int gcrt_sgemm(float *c, const float *a, const float *b, long M, long N, long K, long lda, long ldb,
               long ldc, int ta, int tb, int acc)
{
    (void)c, (void)a, (void)b, (void)M, (void)N, (void)K, (void)lda, (void)ldb, (void)ldc;
    (void)ta, (void)tb, (void)acc;
    return 0;
}

#endif
