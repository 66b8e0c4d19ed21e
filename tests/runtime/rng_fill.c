/* rng_fill.c — gcrt_rng_fill_normal (threaded seeding) gives bit for bit what
 * the same number of gcrt_rng_normal calls give, and leaves the generator in
 * the same state (the Box-Muller spare carried across parameters of odd
 * sizes), over sizes around the chunk of 2^18 pairs and with 1..4 threads. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gc_runtime_internal.h"

int main(void)
{
    /* parameter sizes in declaration order: odd and even, 0, one past a
     * chunk's 2^19 draws, and two chunks and a bit */
    static const long sizes[] = {1, 7, 0, 4, 3, 1L << 19, (1L << 19) + 1, 5, (1L << 20) + 3, 2, 1};
    const int nsizes = (int)(sizeof sizes / sizeof sizes[0]);
    int bad = 0;
    for (int threads = 1; threads <= 4; threads++) {
        omp_set_num_threads(threads);
        gcrt_rng a, b;
        gcrt_rng_seed(&a, 1234, 7);
        gcrt_rng_seed(&b, 1234, 7);
        for (int i = 0; i < nsizes; i++) {
            long n = sizes[i];
            float *x = malloc((size_t)(n + 1) * sizeof *x), *y = malloc((size_t)(n + 1) * sizeof *y);
            double std = 0.02 * (i + 1);
            gcrt_rng_fill_normal(&a, x, n, std);
            for (long k = 0; k < n; k++)
                y[k] = (float)(std * gcrt_rng_normal(&b));
            if (n && memcmp(x, y, (size_t)n * sizeof *x) != 0) {
                printf("FAIL: threads %d, size %ld (#%d): values differ\n", threads, n, i);
                bad = 1;
            }
            free(x);
            free(y);
        }
        /* the same state after: the next draws agree */
        for (int k = 0; k < 5; k++)
            if (gcrt_rng_normal(&a) != gcrt_rng_normal(&b)) {
                printf("FAIL: threads %d: the generator's state differs afterwards\n", threads);
                bad = 1;
                break;
            }
    }
    if (!bad)
        printf("rng_fill: ok (%d sizes, 1-4 threads)\n", nsizes);
    return bad;
}
