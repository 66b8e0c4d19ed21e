/* attention_gqa_cpu.c — causal attention on separate q, k, v with grouped
 * key/value heads (gc_runtime.h, section "attention_gqa_cpu.c /
 * attention_gqa_cuda.cu"), never storing the T x T scores: per query row an
 * online softmax over its keys (forward), the probabilities recomputed from
 * the saved log-sum-exp (backward) with D = sum(p dp) / sum(p) per row.
 * Sums in double, rounded once; the backward runs one (batch, kv head) per
 * thread (its query heads' dq rows and its dk, dv rows are that thread's
 * alone): deterministic for any thread count. Plain loops, no tiles: correct
 * on any shape, not tuned. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gc_runtime_internal.h"

/* y row (b, h, t): (B,T,NH,hs) when heads_out, else (B,NH,T,hs) */
static inline long y_row(long b, long h, long t, long NH, long T, long hs, int heads_out)
{
    return heads_out ? ((b * T + t) * NH + h) * hs : ((b * NH + h) * T + t) * hs;
}

static double dot(const gc_real *a, const gc_real *b, long n)
{
    double s = 0.0;
    for (long i = 0; i < n; i++)
        s += (double)a[i] * (double)b[i];
    return s;
}

void gc_attention_gqa_fwd(gc_real *y, gc_real *lse, const gc_real *q, const gc_real *k, const gc_real *v, long B,
                          long NH, long NKV, long T, long hs, int heads_out, float scale)
{
    long group = NH / NKV;
    #pragma omp parallel
    {
        double *acc = malloc((size_t)(hs > 0 ? hs : 1) * sizeof *acc);
        if (!acc) {
            fprintf(stderr, "error: out of host memory in attention\n");
            exit(1);
        }
        #pragma omp for schedule(static)
        for (long r = 0; r < B * NH * T; r++) {
            long b = r / (NH * T), h = (r / T) % NH, t = r % T, kvh = h / group;
            const gc_real *qr = q + r * hs, *kb = k + (b * NKV + kvh) * T * hs, *vb = v + (b * NKV + kvh) * T * hs;
            double m = -INFINITY, s = 0.0;
            for (long i = 0; i < hs; i++)
                acc[i] = 0.0;
            for (long j = 0; j <= t; j++) {   /* online softmax: rescale when the max grows */
                double x = (double)scale * dot(qr, kb + j * hs, hs);
                if (x > m) {
                    double c = exp(m - x);
                    s *= c;
                    for (long i = 0; i < hs; i++)
                        acc[i] *= c;
                    m = x;
                }
                double p = exp(x - m);
                s += p;
                for (long i = 0; i < hs; i++)
                    acc[i] += p * (double)vb[j * hs + i];
            }
            gc_real *yr = y + y_row(b, h, t, NH, T, hs, heads_out);
            for (long i = 0; i < hs; i++)
                yr[i] = (gc_real)(acc[i] / s);
            lse[r] = (gc_real)(m + log(s));
        }
        free(acc);
    }
}

void gc_attention_gqa_bwd(gc_real *dq, gc_real *dk, gc_real *dv, const gc_real *dy, const gc_real *q,
                          const gc_real *k, const gc_real *v, const gc_real *y, const gc_real *lse, long B, long NH,
                          long NKV, long T, long hs, int heads_out, float scale, int acc)
{
    (void)y;   /* D comes from p and dp; y is the CUDA kernels' */
    long group = NH / NKV;
    #pragma omp parallel
    {
        double *gk = malloc((size_t)(T * hs > 0 ? T * hs : 1) * sizeof *gk);
        double *gv = malloc((size_t)(T * hs > 0 ? T * hs : 1) * sizeof *gv);
        double *gq = malloc((size_t)(hs > 0 ? hs : 1) * sizeof *gq);
        double *pr = malloc((size_t)(T > 0 ? 2 * T : 1) * sizeof *pr), *dpr = pr + T;   /* one row's p, dp */
        if (!gk || !gv || !gq || !pr) {
            fprintf(stderr, "error: out of host memory in attention\n");
            exit(1);
        }
        #pragma omp for schedule(static)
        for (long bk = 0; bk < B * NKV; bk++) {
            long b = bk / NKV, kvh = bk % NKV;
            const gc_real *kb = k + bk * T * hs, *vb = v + bk * T * hs;
            memset(gk, 0, (size_t)(T * hs) * sizeof *gk);
            memset(gv, 0, (size_t)(T * hs) * sizeof *gv);
            for (long h = kvh * group; h < (kvh + 1) * group; h++)
                for (long t = 0; t < T; t++) {
                    long r = (b * NH + h) * T + t, yo = y_row(b, h, t, NH, T, hs, heads_out);
                    const gc_real *qr = q + r * hs, *gy = dy + yo;
                    double L = (double)lse[r], pdp = 0.0, psum = 0.0;
                    for (long j = 0; j <= t; j++) {
                        pr[j] = exp((double)scale * dot(qr, kb + j * hs, hs) - L);
                        dpr[j] = dot(gy, vb + j * hs, hs);
                        pdp += pr[j] * dpr[j];
                        psum += pr[j];
                    }
                    /* D from this row's own p and dp, not rowsum(dy * y): see
                     * attention_cpu.c's bwd_head (saturated rows) */
                    double D = psum > 0 ? pdp / psum : 0.0;
                    for (long i = 0; i < hs; i++)
                        gq[i] = 0.0;
                    for (long j = 0; j <= t; j++) {
                        double p = pr[j], ds = p * (dpr[j] - D) * (double)scale;
                        for (long i = 0; i < hs; i++) {
                            gq[i] += ds * (double)kb[j * hs + i];
                            gk[j * hs + i] += ds * (double)qr[i];
                            gv[j * hs + i] += p * (double)gy[i];
                        }
                    }
                    gc_real *o = dq + r * hs;
                    for (long i = 0; i < hs; i++)
                        o[i] = (gc_real)((acc & 1) ? (double)o[i] + gq[i] : gq[i]);
                }
            for (long e = 0; e < T * hs; e++) {
                dk[bk * T * hs + e] = (gc_real)((acc & 2) ? (double)dk[bk * T * hs + e] + gk[e] : gk[e]);
                dv[bk * T * hs + e] = (gc_real)((acc & 4) ? (double)dv[bk * T * hs + e] + gv[e] : gv[e]);
            }
        }
        free(gk);
        free(gv);
        free(gq);
        free(pr);
    }
}
