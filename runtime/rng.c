/* rng.c — the harness's deterministic random numbers (xoshiro256**). */
#include <math.h>

#include "gc_runtime_internal.h"

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void gcrt_rng_seed(gcrt_rng *r, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ (stream * 0xD1B54A32D192ED03ull);
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
    r->has_spare = 0;
    r->spare = 0.0;
}

uint64_t gcrt_rng_u64(gcrt_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double gcrt_rng_uniform(gcrt_rng *r)
{
    return (double)(gcrt_rng_u64(r) >> 11) * 0x1.0p-53;
}

/* Box-Muller; u1 is drawn from (0, 1] so the log is finite. */
double gcrt_rng_normal(gcrt_rng *r)
{
    if (r->has_spare) {
        r->has_spare = 0;
        return r->spare;
    }
    double u1 = 1.0 - gcrt_rng_uniform(r);
    double u2 = gcrt_rng_uniform(r);
    double rad = sqrt(-2.0 * log(u1));
    double ang = 6.283185307179586476925 * u2;
    r->spare = rad * sin(ang);
    r->has_spare = 1;
    return rad * cos(ang);
}

/* Box-Muller's transform of one pair of raw draws (as gcrt_rng_normal). */
static void box_muller(uint64_t a, uint64_t b, double *c, double *s)
{
    double u1 = 1.0 - (double)(a >> 11) * 0x1.0p-53;
    double u2 = (double)(b >> 11) * 0x1.0p-53;
    double rad = sqrt(-2.0 * log(u1));
    double ang = 6.283185307179586476925 * u2;
    *c = rad * cos(ang);
    *s = rad * sin(ang);
}

/* x[0..n) = (float)(std * gcrt_rng_normal(r)) n times, bit for bit, and r
 * left as those n calls leave it: the raw draws stay sequential (about 1 ns
 * each), the transform (log, sqrt, cos, sin: tens of ns) runs on OpenMP's
 * threads, so seeding a billion parameters takes seconds, not a minute. */
void gcrt_rng_fill_normal(gcrt_rng *r, float *x, long n, double std)
{
    enum { CHUNK = 1 << 18 };   /* pairs per round: 4 MiB of raw draws */
    static uint64_t raw[2 * CHUNK];
    long k = 0;
    if (n > 0 && r->has_spare) {
        x[k++] = (float)(std * r->spare);
        r->has_spare = 0;
    }
    while (k < n) {
        long pairs = (n - k + 1) / 2;
        if (pairs > CHUNK)
            pairs = CHUNK;
        for (long j = 0; j < 2 * pairs; j++)
            raw[j] = gcrt_rng_u64(r);
        long full = (n - k) / 2 < pairs ? (n - k) / 2 : pairs;   /* pairs whose both halves land in x */
#pragma omp parallel for schedule(static) if (full > 4096)
        for (long j = 0; j < full; j++) {
            double c, s;
            box_muller(raw[2 * j], raw[2 * j + 1], &c, &s);
            x[k + 2 * j] = (float)(std * c);
            x[k + 2 * j + 1] = (float)(std * s);
        }
        k += 2 * full;
        if (full < pairs) {   /* n - k == 1: the last pair's sine becomes the spare */
            double c, s;
            box_muller(raw[2 * full], raw[2 * full + 1], &c, &s);
            x[k++] = (float)(std * c);
            r->spare = s;
            r->has_spare = 1;
        }
    }
}

/* Rejection sampling: unbiased for any n. */
long gcrt_rng_below(gcrt_rng *r, long n)
{
    uint64_t un = (uint64_t)n;
    uint64_t limit = UINT64_MAX - UINT64_MAX % un;
    uint64_t x;
    do
        x = gcrt_rng_u64(r);
    while (x >= limit);
    return (long)(x % un);
}
