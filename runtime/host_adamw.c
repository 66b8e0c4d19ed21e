/* host_adamw.c — AdamW on the host, llm.c's arithmetic: the CPU target's
 * gc_adamw (kernels_cpu.c calls it) and the host update of programs that
 * offload the optimizer (gcompile --offload opt, passes/offload.c) on
 * either target, so that an offloaded CPU program updates with the same
 * bits as one that is not. Linked into CPU and CUDA programs (gcrt,
 * gcrt_host).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "gc_runtime.h"

/* AdamW step constants; c1, c2 are the bias corrections 1 - beta^t. */
typedef struct {
    float lr, beta1, beta2, eps, wd, c1, c2;
} AdamW;

/* AdamW on [i, hi), llm.c's arithmetic exactly (float throughout, divisions
 * not reciprocals). Plain C cannot be vectorized here: sqrtf may set errno,
 * so without -fno-math-errno gcc keeps a scalar call. The SSE2 and AVX paths
 * below do the same IEEE operations in the same order (sqrt and division are
 * correctly rounded in every width), so all paths give the same bits. */
static void adamw_scalar(const AdamW *h, float *p, const float *g, float *m, float *v, long i,
                         long hi)
{
    for (; i < hi; i++) {
        float param = p[i], grad = g[i];
        float mi = h->beta1 * m[i] + (1.0f - h->beta1) * grad;
        float vi = h->beta2 * v[i] + (1.0f - h->beta2) * grad * grad;
        float mhat = mi / h->c1;
        float vhat = vi / h->c2;
        m[i] = mi;
        v[i] = vi;
        p[i] = param - h->lr * (mhat / (sqrtf(vhat) + h->eps) + h->wd * param);
    }
}

#ifdef __SSE2__
/* AdamW on whole groups of 4 in [i, hi); returns where it stopped. */
static long adamw_sse2(const AdamW *h, float *p, const float *g, float *m, float *v, long i,
                       long hi)
{
    const __m128 b1 = _mm_set1_ps(h->beta1), b2 = _mm_set1_ps(h->beta2);
    const __m128 ob1 = _mm_set1_ps(1.0f - h->beta1), ob2 = _mm_set1_ps(1.0f - h->beta2);
    const __m128 c1 = _mm_set1_ps(h->c1), c2 = _mm_set1_ps(h->c2), eps = _mm_set1_ps(h->eps);
    const __m128 lr = _mm_set1_ps(h->lr), wd = _mm_set1_ps(h->wd);
    for (; i + 4 <= hi; i += 4) {
        __m128 param = _mm_loadu_ps(p + i), grad = _mm_loadu_ps(g + i);
        __m128 mi = _mm_add_ps(_mm_mul_ps(b1, _mm_loadu_ps(m + i)), _mm_mul_ps(ob1, grad));
        __m128 vi = _mm_add_ps(_mm_mul_ps(b2, _mm_loadu_ps(v + i)),
                               _mm_mul_ps(_mm_mul_ps(ob2, grad), grad));
        __m128 mhat = _mm_div_ps(mi, c1), vhat = _mm_div_ps(vi, c2);
        __m128 step = _mm_add_ps(_mm_div_ps(mhat, _mm_add_ps(_mm_sqrt_ps(vhat), eps)),
                                 _mm_mul_ps(wd, param));
        _mm_storeu_ps(m + i, mi);
        _mm_storeu_ps(v + i, vi);
        _mm_storeu_ps(p + i, _mm_sub_ps(param, _mm_mul_ps(lr, step)));
    }
    return i;
}
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_ADAMW_AVX 1
/* AdamW on whole groups of 8 in [i, hi) with AVX (chosen at run time: the
 * division and the sqrt bound the SSE loop, and twice the width helps even
 * though the step is close to memory-bound); returns where it stopped. */
__attribute__((target("avx")))
static long adamw_avx(const AdamW *h, float *p, const float *g, float *m, float *v, long i,
                      long hi)
{
    const __m256 b1 = _mm256_set1_ps(h->beta1), b2 = _mm256_set1_ps(h->beta2);
    const __m256 ob1 = _mm256_set1_ps(1.0f - h->beta1), ob2 = _mm256_set1_ps(1.0f - h->beta2);
    const __m256 c1 = _mm256_set1_ps(h->c1), c2 = _mm256_set1_ps(h->c2);
    const __m256 eps = _mm256_set1_ps(h->eps), lr = _mm256_set1_ps(h->lr);
    const __m256 wd = _mm256_set1_ps(h->wd);
    for (; i + 8 <= hi; i += 8) {
        __m256 param = _mm256_loadu_ps(p + i), grad = _mm256_loadu_ps(g + i);
        __m256 mi = _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(m + i)),
                                  _mm256_mul_ps(ob1, grad));
        __m256 vi = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(v + i)),
                                  _mm256_mul_ps(_mm256_mul_ps(ob2, grad), grad));
        __m256 mhat = _mm256_div_ps(mi, c1), vhat = _mm256_div_ps(vi, c2);
        __m256 step = _mm256_add_ps(
            _mm256_div_ps(mhat, _mm256_add_ps(_mm256_sqrt_ps(vhat), eps)),
            _mm256_mul_ps(wd, param));
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        _mm256_storeu_ps(p + i, _mm256_sub_ps(param, _mm256_mul_ps(lr, step)));
    }
    return i;
}
#endif

/* AdamW on [lo, hi): the widest path the CPU has, then the narrower ones on
 * the tail. */
static void adamw_range(const AdamW *h, int avx, float *p, const float *g, float *m, float *v,
                        long lo, long hi)
{
    long i = lo;
#ifdef HAVE_ADAMW_AVX
    if (avx)
        i = adamw_avx(h, p, g, m, v, i, hi);
#endif
#ifdef __SSE2__
    i = adamw_sse2(h, p, g, m, v, i, hi);
#endif
    adamw_scalar(h, p, g, m, v, i, hi);
}

/* One AdamW step on n floats; bias corrections 1 - beta^t by
 * gc_adamw_bias (in double: llm.c's powf is 1.5e-5 off at beta2 = 0.999,
 * t = 2). Blocks of 64 Ki elements in parallel. */
void gc_host_adamw(float *p, const float *g, float *m, float *v, long n, float lr, float beta1,
                   float beta2, float eps, float wd, int t)
{
    AdamW h = {lr, beta1, beta2, eps, wd, gc_adamw_bias(beta1, t), gc_adamw_bias(beta2, t)};
    int avx = 0;
#ifdef HAVE_ADAMW_AVX
    avx = __builtin_cpu_supports("avx");
#endif
    const long blk = 1L << 16;
    long nblk = (n + blk - 1) / blk;
    #pragma omp parallel for schedule(static) if (nblk > 1)
    for (long k = 0; k < nblk; k++)
        adamw_range(&h, avx, p, g, m, v, k * blk, (k + 1) * blk < n ? (k + 1) * blk : n);
}


static uint16_t bf16_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)   /* NaN: a quiet NaN of the same sign */
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);        /* round to nearest even */
    return (uint16_t)(u >> 16);
}

void gc_host_cast_bf16(uint16_t *out, const float *in, long n)
{
    #pragma omp parallel for schedule(static) if (n >= (1L << 16))
    for (long i = 0; i < n; i++)
        out[i] = bf16_of(in[i]);
}

void gc_host_update_apply(const gc_adamw_tensor *u, int n, float lr, float beta1, float beta2, float eps, int t,
                          float grad_scale)
{
    for (int i = 0; i < n; i++) {
        float *g = (float *)u[i].g;
        if (grad_scale != 0.0f && grad_scale != 1.0f) {   /* as gc_device_scale, on the host copy */
            #pragma omp parallel for schedule(static)
            for (long k = 0; k < u[i].n; k++)
                g[k] *= grad_scale;
        }
        gc_host_adamw(u[i].p, g, u[i].m, u[i].v, u[i].n, lr, beta1, beta2, eps, u[i].wd, t);
        if (u[i].pcopy)   /* --precision bf16: the weights the device reads, rounded */
            gc_host_cast_bf16((uint16_t *)u[i].pcopy, u[i].p, u[i].n);
    }
}
