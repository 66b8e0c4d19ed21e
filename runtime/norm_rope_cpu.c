/* norm_rope_cpu.c — the CPU kernels of rmsnorm (with the residual add),
 * rope and the SwiGLU backward (gc_runtime.h,
 * section "norm_rope_cpu.c / norm_rope_cuda.cu").
 *
 * As kernels_cpu.c: row statistics and column sums accumulate in double and
 * round once; every output element is written by one thread; column sums run
 * over the rows in row order, so the bits do not depend on the thread count.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "gc_runtime_internal.h"

#define PAR_MIN_WORK 32768L
#define COL_BLOCK 64L
#if GC_REAL_IS_DOUBLE
#define gc_exp exp
#else
#define gc_exp expf   /* as the emitted silu's gc_sigmoid */
#endif

/* ------------------------------------------------------------------ rmsnorm */

/* one row: the sum of squares in double, rstd rounded once */
static inline void rmsnorm_row(gc_real *o, gc_real *rstd, const gc_real *xr, const gc_real *w, long C, float eps)
{
    double s = 0.0;
    for (long i = 0; i < C; i++)
        s += (double)xr[i] * (double)xr[i];
    gc_real rs = (gc_real)(1.0 / sqrt(s / (double)C + (double)eps));
    for (long i = 0; i < C; i++)
        o[i] = xr[i] * rs * w[i];
    *rstd = rs;
}

void gc_rmsnorm_fwd(gc_real *out, gc_real *rstd, const gc_real *x, const gc_real *w, long N, long C, float eps)
{
    #pragma omp parallel for schedule(static) if (N * C >= PAR_MIN_WORK)
    for (long r = 0; r < N; r++)
        rmsnorm_row(out + r * C, rstd + r, x + r * C, w, C, eps);
}

void gc_add_rmsnorm_fwd(gc_real *x, gc_real *out, gc_real *rstd, const gc_real *ra, const gc_real *rb,
                        const gc_real *w, long N, long C, float eps)
{
    #pragma omp parallel for schedule(static) if (N * C >= PAR_MIN_WORK)
    for (long r = 0; r < N; r++) {
        gc_real *xr = x + r * C;
        for (long i = 0; i < C; i++)
            xr[i] = ra[r * C + i] + rb[r * C + i];
        rmsnorm_row(out + r * C, rstd + r, xr, w, C, eps);
    }
}

void gc_rmsnorm_bwd(gc_real *dx, gc_real *dw, const gc_real *dy, const gc_real *x, const gc_real *w,
                    const gc_real *rstd, long N, long C, int acc)
{
    if (dw) {   /* dw[c] (+)= sum over rows of dy * x * rstd: column blocks, rows in order */
        long nblk = (C + COL_BLOCK - 1) / COL_BLOCK;
        #pragma omp parallel for schedule(static) if (N * C >= PAR_MIN_WORK)
        for (long k = 0; k < nblk; k++) {
            long c0 = k * COL_BLOCK, nc = C - c0 < COL_BLOCK ? C - c0 : COL_BLOCK;
            double sw[COL_BLOCK] = {0};
            for (long r = 0; r < N; r++)
                for (long j = 0; j < nc; j++)
                    sw[j] += (double)dy[r * C + c0 + j] * (double)(x[r * C + c0 + j] * rstd[r]);
            for (long j = 0; j < nc; j++)
                dw[c0 + j] = (gc_real)((acc & 2) ? (double)dw[c0 + j] + sw[j] : sw[j]);
        }
    }
    if (!dx)
        return;
    /* dx = rstd (g - xhat mean(g xhat)), g = dy w, xhat = x rstd */
    #pragma omp parallel for schedule(static) if (N * C >= PAR_MIN_WORK)
    for (long r = 0; r < N; r++) {
        const gc_real *xr = x + r * C, *gr = dy + r * C;
        double rs = (double)rstd[r], dot = 0.0;
        for (long i = 0; i < C; i++)
            dot += (double)gr[i] * (double)w[i] * (double)xr[i] * rs;
        dot /= (double)C;
        gc_real *o = dx + r * C;
        for (long i = 0; i < C; i++) {
            double v = rs * ((double)gr[i] * (double)w[i] - (double)xr[i] * rs * dot);
            o[i] = (gc_real)((acc & 1) ? (double)o[i] + v : v);
        }
    }
}

/* ------------------------------------------------------------------ rope */

/* cos and sin of position t times theta^(-2i/hs), i < hs/2: tab[2 (t half + i)] */
static double *rope_table(long T, long hs, double theta)
{
    long half = hs / 2;
    double *tab = malloc((size_t)(T * half * 2 > 0 ? T * half * 2 : 1) * sizeof *tab);
    if (!tab) {
        fprintf(stderr, "error: out of host memory for the rope table (%ld positions)\n", T);
        exit(1);
    }
    for (long i = 0; i < half; i++) {
        double inv = pow(theta, -2.0 * (double)i / (double)hs);
        for (long t = 0; t < T; t++) {
            tab[2 * (t * half + i)] = cos((double)t * inv);
            tab[2 * (t * half + i) + 1] = sin((double)t * inv);
        }
    }
    return tab;
}

void gc_rope(gc_real *y, const gc_real *x, long batch, long T, long hs, double theta, int inverse, int acc)
{
    long half = hs / 2;
    double *tab = rope_table(T, hs, theta), sg = inverse ? -1.0 : 1.0;
    #pragma omp parallel for schedule(static) if (batch * T * hs >= PAR_MIN_WORK)
    for (long bt = 0; bt < batch * T; bt++) {
        const double *cs = tab + 2 * (bt % T) * half;
        const gc_real *xr = x + bt * hs;
        gc_real *o = y + bt * hs;
        for (long i = 0; i < half; i++) {
            double c = cs[2 * i], s = sg * cs[2 * i + 1], a = (double)xr[i], b = (double)xr[i + half];
            double lo = a * c - b * s, hi = b * c + a * s;
            o[i] = (gc_real)((acc & 1) ? (double)o[i] + lo : lo);
            o[i + half] = (gc_real)((acc & 1) ? (double)o[i + half] + hi : hi);
        }
    }
    free(tab);
}

/* ------------------------------------------------------------------ swiglu */

/* the arithmetic of the elementwise silu, silu_bwd and mul ops (codegen/expr.c)
 * in the same order, so the fused backward gives the unfused bits */
void gc_swiglu_bwd(gc_real *da, gc_real *db, const gc_real *dh, const gc_real *a, const gc_real *b, long n, int acc)
{
    #pragma omp parallel for schedule(static) if (n >= PAR_MIN_WORK)
    for (long i = 0; i < n; i++) {
        gc_real x = a[i], sg = (gc_real)1 / ((gc_real)1 + gc_exp(-x));
        gc_real s = x * sg;                                      /* silu(a) */
        gc_real ds = dh[i] * b[i];
        gc_real ga = sg * ((gc_real)1 + x * ((gc_real)1 - sg)) * ds;
        gc_real gb = dh[i] * s;
        da[i] = (acc & 1) ? da[i] + ga : ga;
        db[i] = (acc & 2) ? db[i] + gb : gb;
    }
}
