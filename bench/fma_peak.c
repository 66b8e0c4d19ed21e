/* fma_peak.c — the FP32 FMA peak of this machine's cores, measured now:
 * every thread runs independent FMA chains on registers (no memory) for
 * about 0.3 s. AVX-512 where the compiler targets it (-march=native), else
 * AVX2+FMA, else SSE. Used by bench/cpu_step.sh to say how far the step's
 * matmuls are from the peak. Prints "fma_peak: N threads X GFLOP/s". */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>

#if defined(__AVX512F__)
typedef __m512 vec;
#define LANES 16
#define FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define SET1 _mm512_set1_ps
#define REDUCE(v) _mm512_reduce_add_ps(v)
#elif defined(__FMA__)
typedef __m256 vec;
#define LANES 8
#define FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define SET1 _mm256_set1_ps
static float REDUCE(__m256 v)
{
    float f[8];
    _mm256_storeu_ps(f, v);
    return f[0] + f[1] + f[2] + f[3] + f[4] + f[5] + f[6] + f[7];
}
#else
typedef __m128 vec;
#define LANES 4
#define FMA(a, b, c) _mm_add_ps(_mm_mul_ps(a, b), c)
#define SET1 _mm_set1_ps
static float REDUCE(__m128 v)
{
    float f[4];
    _mm_storeu_ps(f, v);
    return f[0] + f[1] + f[2] + f[3];
}
#endif

enum { CHAINS = 12 };

static float chains(long iters, float seed)
{
    vec acc[CHAINS];
    for (int j = 0; j < CHAINS; j++)
        acc[j] = SET1(seed * (float)(j + 1));
    vec m = SET1(0.999999f), a = SET1(1e-7f);
    for (long i = 0; i < iters; i++) {
#pragma GCC unroll 12
        for (int j = 0; j < CHAINS; j++)   /* unrolled: the chains live in registers */
            acc[j] = FMA(acc[j], m, a);
    }
    float s = 0;
    for (int j = 0; j < CHAINS; j++)
        s += REDUCE(acc[j]);
    return s;
}

int main(void)
{
    const long iters = 20000000;
    double best = 0;
    float sink = 0;
    for (int r = 0; r < 3; r++) {
        double t = omp_get_wtime();
        #pragma omp parallel reduction(+ : sink)
        sink += chains(iters, 1e-3f * (float)(omp_get_thread_num() + r));
        t = omp_get_wtime() - t;
        double gf = 2.0 * LANES * CHAINS * (double)iters * omp_get_max_threads() / t / 1e9;
        best = gf > best ? gf : best;
    }
    printf("fma_peak: %d threads %.1f GFLOP/s (%d-lane FMA)%s\n", omp_get_max_threads(), best, LANES,
           sink == 12345.0f ? " " : "");
    return 0;
}
