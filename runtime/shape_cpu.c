/* shape_cpu.c — the CPU kernels that move elements between shapes: concat,
 * narrow (slice along an axis), repeat, the mean over the last axis, and
 * their backwards (gc_runtime.h, section "shape_cpu.c / shape_cuda.cu").
 * Tensors are seen as (outer, axis, inner) with the axis's elements and
 * everything below it one contiguous run of a row. */
#include <omp.h>
#include <string.h>

#include "gc_runtime_internal.h"

#define PAR_MIN_WORK 32768L

/* y[j] (+)= x[j], n elements */
static inline void put_row(gc_real *y, const gc_real *x, long n, int acc)
{
    if (acc & 1) {
        for (long j = 0; j < n; j++)
            y[j] += x[j];
    } else {
        memcpy(y, x, (size_t)n * sizeof *y);
    }
}

void gc_concat(gc_real *y, const gc_real *a, const gc_real *b, long outer, long na, long nb, int acc)
{
    #pragma omp parallel for schedule(static) if (outer * (na + nb) >= PAR_MIN_WORK)
    for (long o = 0; o < outer; o++) {
        put_row(y + o * (na + nb), a + o * na, na, acc);
        put_row(y + o * (na + nb) + na, b + o * nb, nb, acc);
    }
}

void gc_narrow(gc_real *y, const gc_real *x, long outer, long nx, long start, long len, int acc)
{
    #pragma omp parallel for schedule(static) if (outer * len >= PAR_MIN_WORK)
    for (long o = 0; o < outer; o++)
        put_row(y + o * len, x + o * nx + start, len, acc);
}

void gc_narrow_bwd(gc_real *dx, const gc_real *dy, long outer, long nx, long start, long len, int acc)
{
    #pragma omp parallel for schedule(static) if (outer * nx >= PAR_MIN_WORK)
    for (long o = 0; o < outer; o++) {
        gc_real *d = dx + o * nx;
        if (!(acc & 1)) {
            memset(d, 0, (size_t)start * sizeof *d);
            memset(d + start + len, 0, (size_t)(nx - start - len) * sizeof *d);
        }
        put_row(d + start, dy + o * len, len, acc);
    }
}

void gc_repeat(gc_real *y, const gc_real *x, long outer, long d, long n, long inner, int acc)
{
    #pragma omp parallel for schedule(static) if (outer * d * n * inner >= PAR_MIN_WORK)
    for (long od = 0; od < outer * d; od++)
        for (long r = 0; r < n; r++)
            put_row(y + (od * n + r) * inner, x + od * inner, inner, acc);
}

void gc_repeat_bwd(gc_real *dx, const gc_real *dy, long outer, long d, long n, long inner, int acc)
{
    #pragma omp parallel for schedule(static) if (outer * d * n * inner >= PAR_MIN_WORK)
    for (long od = 0; od < outer * d; od++) {
        gc_real *o = dx + od * inner;
        for (long i = 0; i < inner; i++) {
            double s = (acc & 1) ? (double)o[i] : 0.0;
            for (long r = 0; r < n; r++)
                s += (double)dy[(od * n + r) * inner + i];
            o[i] = (gc_real)s;
        }
    }
}

void gc_mean_rows(gc_real *y, const gc_real *x, long rows, long n, int acc)
{
    #pragma omp parallel for schedule(static) if (rows * n >= PAR_MIN_WORK)
    for (long r = 0; r < rows; r++) {
        double s = 0.0;
        for (long j = 0; j < n; j++)
            s += (double)x[r * n + j];
        s /= (double)n;
        y[r] = (gc_real)((acc & 1) ? (double)y[r] + s : s);
    }
}

void gc_mean_bwd(gc_real *dx, const gc_real *dy, long rows, long n, int acc)
{
    #pragma omp parallel for schedule(static) if (rows * n >= PAR_MIN_WORK)
    for (long r = 0; r < rows; r++) {
        gc_real g = (gc_real)((double)dy[r] / (double)n);
        for (long j = 0; j < n; j++)
            dx[r * n + j] = (acc & 1) ? dx[r * n + j] + g : g;
    }
}
