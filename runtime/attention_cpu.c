/* attention_cpu.c — fused causal attention for the CPU target (gc_runtime.h,
 * section "attention_cpu.c / attention_cuda.cu"): the FlashAttention-2
 * scheme, so the T x T scores never exist in memory.
 *
 * Forward: one work item per (batch, head, block of ABR query rows), items
 * spread over OpenMP threads. A block walks the key/value tiles of ABC keys
 * up to its last row (tiles wholly above the diagonal are skipped: causal
 * attention does half the work of full rows), keeping per row the running
 * max m, the running sum l of exp(s - m) and the unnormalised output; at
 * the end o = acc / l and lse = m + log(l) is saved for the backward.
 *
 * Backward: one work item per (batch, head). For each key tile the scores
 * of every query row at or below it are recomputed from q, k and the saved
 * lse (p = exp(s - lse)); dv and dk of the tile accumulate in a local
 * buffer, dq rows accumulate straight into the output (rows of one head
 * belong to one item, so no two threads write the same element). D = rowsum
 * (dy * y) is computed once per row. Summation orders depend on the sizes
 * only, never on the thread count: the results are bit-reproducible.
 *
 * Loops keep the innermost index contiguous (tile columns or the head
 * dimension) so that the compiler vectorizes them; the file is built with
 * -ffp-contract=fast and the hot functions are cloned for AVX-512 and AVX2.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gc_runtime_internal.h"

enum { ABR = 32, ABC = 64 };

#if !defined(GCRT_TSAN) && defined(__x86_64__) && defined(__ELF__) && defined(__has_attribute)  /* not under TSan */
#if __has_attribute(target_clones)
#define ATT_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
#endif
#ifndef ATT_CLONES
#define ATT_CLONES
#endif

/* exp(x) for x <= 0 (or a rounding error above) in the working precision */
static inline gc_real att_exp(gc_real x)
{
    if (sizeof(gc_real) == sizeof(double))
        return (gc_real)exp((double)x);
    return (gc_real)gcrt_expf_nonpos((float)x);
}

typedef struct {
    long B, NH, T, hs;
    long sb, sh, st, koff, voff;   /* q/k/v element strides and offsets in x */
    long ob, oh, ot;               /* y element strides */
} Geom;

static Geom geom_of(const long *g)
{
    Geom G = {g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11]};
    if (G.hs > GC_ATTENTION_MAXHS || G.hs < 1 || G.T < 1) {
        fprintf(stderr, "error: attention: head size %ld outside [1, %d]\n", G.hs, GC_ATTENTION_MAXHS);
        exit(1);
    }
    return G;
}

/* kt[d*ABC + c] = rows[c*stride + d] for c < n (c < ABC, zero past n) */
static void transpose_tile(gc_real *kt, const gc_real *rows, long stride, long n, long hs)
{
    for (long d = 0; d < hs; d++)
        for (long c = 0; c < ABC; c++)
            kt[d * ABC + c] = c < n ? rows[c * stride + d] : 0;
}

/* s[r*ABC + c] = scale * q_r . k_c for r < nr (q rows `qs` apart), kt the
 * transposed key tile */
static inline void scores(gc_real *s, const gc_real *q, long qs, const gc_real *kt, long nr, long hs,
                          gc_real scale)
{
    for (long r = 0; r < nr; r++) {
        gc_real *sr = s + r * ABC;
        const gc_real *qr = q + r * qs;
        for (long c = 0; c < ABC; c++)
            sr[c] = 0;
        for (long d = 0; d < hs; d++) {
            gc_real qv = qr[d];
            const gc_real *kd = kt + d * ABC;
            for (long c = 0; c < ABC; c++)
                sr[c] += qv * kd[c];
        }
        for (long c = 0; c < ABC; c++)
            sr[c] *= scale;
    }
}

/* One forward item: rows [r0, r1) of head (b, h). */
ATT_CLONES static void fwd_block(gc_real *o, gc_real *lse, const gc_real *x, const Geom *G, long b, long h,
                                 long r0, long r1, gc_real scale)
{
    gc_real kt[GC_ATTENTION_MAXHS * ABC], s[ABR * ABC], acc[ABR * GC_ATTENTION_MAXHS];
    gc_real m[ABR], l[ABR];
    long hs = G->hs, nr = r1 - r0;
    const gc_real *q = x + b * G->sb + h * G->sh, *k = q + G->koff, *v = q + G->voff;
    for (long r = 0; r < nr; r++) {
        m[r] = -INFINITY;
        l[r] = 0;
        for (long d = 0; d < hs; d++)
            acc[r * hs + d] = 0;
    }
    for (long c0 = 0; c0 < r1; c0 += ABC) {
        long nc = r1 - c0 < ABC ? r1 - c0 : ABC;
        transpose_tile(kt, k + c0 * G->st, G->st, nc, hs);
        scores(s, q + r0 * G->st, G->st, kt, nr, hs, scale);
        for (long r = 0; r < nr; r++) {
            long valid = r0 + r - c0 + 1;       /* keys c0 .. row (causal) */
            if (valid <= 0)
                continue;
            if (valid > nc)
                valid = nc;
            gc_real *sr = s + r * ABC, mx = m[r];
            for (long c = 0; c < valid; c++)
                mx = sr[c] > mx ? sr[c] : mx;
            gc_real corr = att_exp(m[r] - mx), sum = 0;
            for (long c = 0; c < valid; c++) {
                gc_real e = att_exp(sr[c] - mx);
                sr[c] = e;
                sum += e;
            }
            for (long c = valid; c < ABC; c++)
                sr[c] = 0;
            l[r] = l[r] * corr + sum;
            m[r] = mx;
            gc_real *ar = acc + r * hs;
            for (long d = 0; d < hs; d++)
                ar[d] *= corr;
            for (long c = 0; c < valid; c++) {
                gc_real p = sr[c];
                const gc_real *vc = v + (c0 + c) * G->st;
                for (long d = 0; d < hs; d++)
                    ar[d] += p * vc[d];
            }
        }
    }
    for (long r = 0; r < nr; r++) {
        gc_real inv = 1 / l[r], *orow = o + b * G->ob + h * G->oh + (r0 + r) * G->ot;
        for (long d = 0; d < hs; d++)
            orow[d] = acc[r * hs + d] * inv;
        lse[(b * G->NH + h) * G->T + r0 + r] = m[r] + (gc_real)log((double)l[r]);
    }
}

void gc_attention_fwd(gc_real *y, gc_real *lse, const gc_real *x, const long *geom, float scale)
{
    Geom G = geom_of(geom);
    long nblk = (G.T + ABR - 1) / ABR, items = G.B * G.NH * nblk;
    #pragma omp parallel for schedule(dynamic, 1) if (items > 1 && G.T * G.T * G.hs >= 32768)
    for (long it = 0; it < items; it++) {
        long blk = nblk - 1 - it % nblk, bh = it / nblk;   /* longest rows first */
        long r0 = blk * ABR, r1 = r0 + ABR < G.T ? r0 + ABR : G.T;
        fwd_block(y, lse, x, &G, bh / G.NH, bh % G.NH, r0, r1, (gc_real)scale);
    }
}

/* One backward item: head (b, h). dxq etc. point at the head's rows of dx. */
ATT_CLONES static void bwd_head(gc_real *dx, const gc_real *dy, const gc_real *x, const gc_real *y,
                                const gc_real *lse, const Geom *G, long b, long h, gc_real scale, int acc,
                                gc_real *D)
{
    gc_real kt[GC_ATTENTION_MAXHS * ABC], vt[GC_ATTENTION_MAXHS * ABC], s[ABR * ABC], dp[ABR * ABC],
        dk[ABC * GC_ATTENTION_MAXHS], dv[ABC * GC_ATTENTION_MAXHS];   /* about 300 KB in double */
    long hs = G->hs, T = G->T, st = G->st;
    long hoff = b * G->sb + h * G->sh, yoff = b * G->ob + h * G->oh;
    const gc_real *q = x + hoff, *k = q + G->koff, *v = q + G->voff;
    gc_real *dq = dx + hoff, *dkx = dq + G->koff, *dvx = dq + G->voff;
    const gc_real *l = lse + (b * G->NH + h) * T;
    for (long t = 0; t < T; t++) {
        const gc_real *yr = y + yoff + t * G->ot, *dyr = dy + yoff + t * G->ot;
        gc_real sum = 0;
        for (long d = 0; d < hs; d++)
            sum += yr[d] * dyr[d];
        D[t] = sum;
        if (!acc)
            for (long d = 0; d < hs; d++)
                dq[t * st + d] = 0;
    }
    for (long c0 = 0; c0 < T; c0 += ABC) {
        long nc = T - c0 < ABC ? T - c0 : ABC;
        transpose_tile(kt, k + c0 * st, st, nc, hs);
        transpose_tile(vt, v + c0 * st, st, nc, hs);
        memset(dk, 0, sizeof(gc_real) * (size_t)(ABC * hs));
        memset(dv, 0, sizeof(gc_real) * (size_t)(ABC * hs));
        for (long r0 = c0 / ABR * ABR; r0 < T; r0 += ABR) {
            long nr = T - r0 < ABR ? T - r0 : ABR;
            scores(s, q + r0 * st, st, kt, nr, hs, scale);
            scores(dp, dy + yoff + r0 * G->ot, G->ot, vt, nr, hs, 1);
            for (long r = 0; r < nr; r++) {
                long valid = r0 + r - c0 + 1;
                if (valid <= 0)
                    continue;
                if (valid > nc)
                    valid = nc;
                gc_real *sr = s + r * ABC, *dpr = dp + r * ABC, lr = l[r0 + r], Dr = D[r0 + r];
                const gc_real *qr = q + (r0 + r) * st, *dyr = dy + yoff + (r0 + r) * G->ot;
                gc_real *dqr = dq + (r0 + r) * st;
                for (long c = 0; c < valid; c++) {
                    gc_real p = att_exp(sr[c] - lr);
                    sr[c] = p;                          /* p */
                    dpr[c] = p * (dpr[c] - Dr) * scale; /* dscores (with the scale) */
                }
                for (long c = 0; c < valid; c++) {
                    gc_real p = sr[c], g = dpr[c];
                    gc_real *dvc = dv + c * hs, *dkc = dk + c * hs;
                    const gc_real *kc = k + (c0 + c) * st;
                    for (long d = 0; d < hs; d++) {
                        dvc[d] += p * dyr[d];
                        dkc[d] += g * qr[d];
                        dqr[d] += g * kc[d];
                    }
                }
            }
        }
        for (long c = 0; c < nc; c++) {
            gc_real *dkr = dkx + (c0 + c) * st, *dvr = dvx + (c0 + c) * st;
            for (long d = 0; d < hs; d++) {
                dkr[d] = acc ? dkr[d] + dk[c * hs + d] : dk[c * hs + d];
                dvr[d] = acc ? dvr[d] + dv[c * hs + d] : dv[c * hs + d];
            }
        }
    }
}

void gc_attention_bwd(gc_real *dx, const gc_real *dy, const gc_real *x, const gc_real *y, const gc_real *lse,
                      const long *geom, float scale, int acc)
{
    Geom G = geom_of(geom);
    long items = G.B * G.NH;
    gc_real *D = malloc((size_t)(items * G.T) * sizeof *D);
    if (!D) {
        fprintf(stderr, "error: out of memory in gc_attention_bwd\n");
        exit(1);
    }
    #pragma omp parallel for schedule(dynamic, 1) if (items > 1 && G.T * G.T * G.hs >= 32768)
    for (long it = 0; it < items; it++)
        bwd_head(dx, dy, x, y, lse, &G, it / G.NH, it % G.NH, (gc_real)scale, acc & 1, D + it * G.T);
    free(D);
}
