/* kt.h — small helpers shared by the kernel tests: a seeded RNG, buffers,
 * and failure accounting. Header-only (static functions) so each test
 * executable stays one translation unit plus kernels_cpu.c. */
#ifndef KT_H
#define KT_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gc_runtime.h"

static int kt_failures; /* checks that failed in this process */

/* Records a failed check with its location and a message. */
#define KT_FAIL(...)                                                                      \
    do {                                                                                  \
        fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__);                             \
        fprintf(stderr, __VA_ARGS__);                                                     \
        fputc('\n', stderr);                                                              \
        kt_failures++;                                                                    \
    } while (0)

#define KT_CHECK(cond, ...)                                                               \
    do {                                                                                  \
        if (!(cond))                                                                      \
            KT_FAIL(__VA_ARGS__);                                                         \
    } while (0)

static uint64_t kt_rng_state = 0x9E3779B97F4A7C15ull;

static void kt_seed(uint64_t s) { kt_rng_state = s * 0x9E3779B97F4A7C15ull + 1; }

/* Uniform in [0, 1) (xorshift64*). */
static double kt_unif(void)
{
    kt_rng_state ^= kt_rng_state >> 12;
    kt_rng_state ^= kt_rng_state << 25;
    kt_rng_state ^= kt_rng_state >> 27;
    return (double)((kt_rng_state * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53;
}

/* Uniform integer in [0, n). */
static long kt_randint(long n) { return (long)(kt_unif() * (double)n); }

/* malloc that fails the test process loudly. */
static void *kt_alloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
        exit(2);
    }
    return p;
}

/* n gc_reals uniform in [lo, hi). */
static gc_real *kt_rand(long n, double lo, double hi)
{
    gc_real *p = kt_alloc((size_t)n * sizeof *p);
    for (long i = 0; i < n; i++)
        p[i] = (gc_real)(lo + (hi - lo) * kt_unif());
    return p;
}

/* A copy of n gc_reals. */
static gc_real *kt_dup(const gc_real *x, long n)
{
    gc_real *p = kt_alloc((size_t)n * sizeof *p);
    memcpy(p, x, (size_t)n * sizeof *p);
    return p;
}

/* n indices uniform in [0, rows). */
static int32_t *kt_randidx(long n, long rows)
{
    int32_t *p = kt_alloc((size_t)n * sizeof *p);
    for (long i = 0; i < n; i++)
        p[i] = (int32_t)kt_randint(rows);
    return p;
}

/* 1 when the n gc_reals at a and b have the same bits. */
static inline int kt_same_bits(const gc_real *a, const gc_real *b, long n)
{
    return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

/* A test case: name and function; main() runs the one named on the command
 * line (or all of them). */
typedef struct {
    const char *name;
    void (*fn)(void);
} kt_case;

/* Runs the case named argv[1] (all cases without an argument); exit 0 when
 * every check passed. */
static int kt_main(int argc, char **argv, const kt_case *cases, int ncases)
{
    int ran = 0;
    for (int i = 0; i < ncases; i++) {
        if (argc > 1 && strcmp(argv[1], cases[i].name) != 0)
            continue;
        int before = kt_failures;
        cases[i].fn();
        printf("%-28s %s\n", cases[i].name, kt_failures == before ? "ok" : "FAILED");
        ran++;
    }
    if (!ran) {
        fprintf(stderr, "no test case named '%s'\n", argc > 1 ? argv[1] : "");
        return 2;
    }
    return kt_failures ? 1 : 0;
}

#endif
