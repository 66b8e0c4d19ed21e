/* attention_cpu.c — fused causal attention for the CPU target (gc_runtime.h,
 * section "attention_cpu.c / attention_cuda.cu"): the FlashAttention-2
 * scheme with CPU-sized tiles, so the T x T scores never exist in memory.
 *
 * Every product is a single-threaded GEMM (gemm_cpu.c's packed AVX-512
 * kernel, or BLAS) on a block of ABR query rows against a chunk of up to
 * AKC keys: the scores of one block live in a per-item scratch of
 * ABR x AKC values (256 KiB in float), never more, whatever T is.
 *
 * Forward: one work item per (batch, head, block of ABR query rows), items
 * spread over OpenMP threads, longest first. A block walks the key chunks up
 * to its last row (keys above the diagonal are never visited past the block's
 * own chunk: causal attention does about half the work of full rows),
 * keeping per row the running max m and the running sum l of exp(s - m);
 * the unnormalised output accumulates in y's rows (rescaled when m grows),
 * and at the end y = acc / l and lse = m + log(l) is saved for the backward.
 *
 * Backward: one work item per (batch, head). For each block of query rows
 * and each key chunk at or below it, the scores are recomputed from q, k and
 * the saved lse (p = exp(s - lse)), dp = dy v^T, ds = p (dp - D) scale with
 * D = sum(p dp) / sum(p) over the row (see bwd_head), and then dq += ds k,
 * dk += ds^T q, dv += p^T dy
 * straight into dx (the rows of one head belong to one item, so no two
 * threads write the same element). Summation orders depend on the sizes
 * only, never on the thread count: the results are bit-reproducible.
 *
 * The row loops (max, exp, sums) keep the innermost index contiguous so that
 * the compiler vectorizes them; the file is built with -ffp-contract=fast and
 * they are cloned for AVX-512 and AVX2.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "gc_runtime_internal.h"

enum { ABR = 128, AKC = 512 };

#if !defined(GCRT_TSAN) && defined(__x86_64__) && defined(__ELF__) && defined(__has_attribute)  /* not under TSan */
#if __has_attribute(target_clones)
#define ATT_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
#endif
#ifndef ATT_CLONES
#define ATT_CLONES
#endif

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

static void *att_alloc(size_t n)
{
    void *p = malloc(n);
    if (!p) {
        fprintf(stderr, "error: out of memory in the attention kernel (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* keys of chunk [c0, c0 + nc) that row t sees: 0 .. valid-1 */
static inline long valid_keys(long t, long c0, long nc)
{
    long v = t - c0 + 1;
    return v < 0 ? 0 : v > nc ? nc : v;
}

/* One forward row of a chunk: scale, mask, the online-softmax update of m
 * and l; s becomes p = exp(s - m_new) (0 past valid); returns the factor
 * that rescales the row's earlier accumulation. */
ATT_CLONES static gc_real fwd_row(gc_real *s, long valid, long nc, gc_real scale, gc_real *m, gc_real *l)
{
    gc_real mx = *m;
    for (long c = 0; c < valid; c++) {
        s[c] *= scale;
        mx = s[c] > mx ? s[c] : mx;
    }
    if (valid == 0) {   /* no key of this chunk: nothing changes */
        for (long c = 0; c < nc; c++)
            s[c] = 0;
        return 1;
    }
    gc_real corr = gcrt_exp_nonpos(*m - mx), sum = 0;
    for (long c = 0; c < valid; c++) {
        gc_real e = gcrt_exp_nonpos(s[c] - mx);
        s[c] = e;
        sum += e;
    }
    for (long c = valid; c < nc; c++)
        s[c] = 0;
    *l = *l * corr + sum;
    *m = mx;
    return corr;
}

/* One forward item: rows [r0, r1) of head (b, h); s: ABR x AKC scratch. */
static void fwd_block(gc_real *o, gc_real *lse, const gc_real *x, const Geom *G, long b, long h, long r0, long r1,
                      gc_real scale, gc_real *s)
{
    gc_real m[ABR], l[ABR];
    long hs = G->hs, nr = r1 - r0, st = G->st, ot = G->ot;
    const gc_real *q = x + b * G->sb + h * G->sh, *k = q + G->koff, *v = q + G->voff;
    gc_real *orow = o + b * G->ob + h * G->oh + r0 * ot;
    for (long r = 0; r < nr; r++)
        m[r] = -INFINITY, l[r] = 0;
    for (long c0 = 0; c0 < r1; c0 += AKC) {
        long nc = r1 - c0 < AKC ? r1 - c0 : AKC;
        gcrt_gemm_one(s, q + r0 * st, k + c0 * st, nr, nc, hs, st, st, nc, 0, 1, 0);   /* s = q k^T */
        for (long r = 0; r < nr; r++) {
            gc_real corr = fwd_row(s + r * nc, valid_keys(r0 + r, c0, nc), nc, scale, &m[r], &l[r]);
            if (c0 > 0 && corr != 1)
                for (long d = 0; d < hs; d++)
                    orow[r * ot + d] *= corr;
        }
        gcrt_gemm_one(orow, s, v + c0 * st, nr, hs, nc, nc, st, ot, 0, 0, c0 > 0);      /* acc (+)= p v */
    }
    for (long r = 0; r < nr; r++) {
        gc_real inv = 1 / l[r];
        for (long d = 0; d < hs; d++)
            orow[r * ot + d] *= inv;
        lse[(b * G->NH + h) * G->T + r0 + r] = m[r] + (gc_real)log((double)l[r]);
    }
}

void gc_attention_fwd(gc_real *y, gc_real *lse, const gc_real *x, const long *geom, float scale)
{
    Geom G = geom_of(geom);
    long nblk = (G.T + ABR - 1) / ABR, items = G.B * G.NH * nblk;
    #pragma omp parallel if (items > 1 && G.T * G.T * G.hs >= 32768)
    {
        gc_real *s = att_alloc(sizeof(gc_real) * ABR * AKC);
        #pragma omp for schedule(dynamic, 1)
        for (long it = 0; it < items; it++) {
            long blk = nblk - 1 - it % nblk, bh = it / nblk;   /* longest rows first */
            long r0 = blk * ABR, r1 = r0 + ABR < G.T ? r0 + ABR : G.T;
            fwd_block(y, lse, x, &G, bh / G.NH, bh % G.NH, r0, r1, (gc_real)scale, s);
        }
        free(s);
    }
}

/* The backward's first half for one row of a chunk: s (scores) becomes
 * p = exp(scale s - lse) (0 past valid); when pdp is not NULL, adds
 * sum(p * dp) to *pdp and sum(p) to *psum over the valid keys. */
ATT_CLONES static void bwd_probs(gc_real *s, const gc_real *dp, long valid, long nc, gc_real scale, gc_real lse,
                                 gc_real *pdp, gc_real *psum)
{
    gc_real a = 0, b = 0;
    for (long c = 0; c < valid; c++) {
        gc_real p = gcrt_exp_nonpos(s[c] * scale - lse);
        s[c] = p;
        a += p * dp[c];
        b += p;
    }
    for (long c = valid; c < nc; c++)
        s[c] = 0;
    if (pdp)
        *pdp += a, *psum += b;
}

/* The second half: dp becomes ds = p (dp - D) scale (0 past valid). */
ATT_CLONES static void bwd_ds(const gc_real *p, gc_real *dp, long valid, long nc, gc_real scale, gc_real D)
{
    for (long c = 0; c < valid; c++)
        dp[c] = p[c] * (dp[c] - D) * scale;
    for (long c = valid; c < nc; c++)
        dp[c] = 0;
}

/* s = q k^T and dp = dy v^T for rows [r0, r0 + nr), keys [c0, c0 + nc) */
static void bwd_scores(gc_real *s, gc_real *dp, const gc_real *q, const gc_real *k, const gc_real *v,
                       const gc_real *dyh, const Geom *G, long r0, long nr, long c0, long nc)
{
    long hs = G->hs, st = G->st, ot = G->ot;
    gcrt_gemm_one(s, q + r0 * st, k + c0 * st, nr, nc, hs, st, st, nc, 0, 1, 0);       /* s = q k^T */
    gcrt_gemm_one(dp, dyh + r0 * ot, v + c0 * st, nr, nc, hs, ot, st, nc, 0, 1, 0);   /* dp = dy v^T */
}

/* One backward item: head (b, h); s, dp: ABR x AKC scratch each.
 * D of a row is sum(p dp) / sum(p) over all its keys, from the p and dp
 * this kernel computes, not rowsum(dy * y) (FlashAttention-2's form, which
 * the CUDA kernels keep): on a saturated row (one p = 1) the exact
 * ds = p (dp - D) is ~0, and D from the stored output y differs from that
 * key's dp by a rounding of the order of u |dy| |v|, which dq gets times
 * |k| (random-graph seeds 100092, 105250). Dividing by sum(p) removes lse's
 * rounding (p = exp(s - lse) sums to 1 only within 2^-24 |lse|). So every
 * key chunk of a block is seen before its ds: a block of more than one
 * chunk computes s and dp of the chunks before its last twice, once for D
 * (T = 1024: 8 GEMMs more to the 60). */
static void bwd_head(gc_real *dx, const gc_real *dy, const gc_real *x, const gc_real *lse, const Geom *G, long b,
                     long h, gc_real scale, int acc, gc_real *s, gc_real *dp)
{
    long hs = G->hs, T = G->T, st = G->st, ot = G->ot;
    long hoff = b * G->sb + h * G->sh, yoff = b * G->ob + h * G->oh;
    const gc_real *q = x + hoff, *k = q + G->koff, *v = q + G->voff, *dyh = dy + yoff;
    gc_real *dq = dx + hoff, *dk = dq + G->koff, *dv = dq + G->voff;
    const gc_real *l = lse + (b * G->NH + h) * T;
    gc_real pdp[ABR], psum[ABR], D[ABR];
    if (!acc)
        for (long t = 0; t < T; t++)
            for (long d = 0; d < hs; d++)
                dq[t * st + d] = dk[t * st + d] = dv[t * st + d] = 0;
    for (long r0 = 0; r0 < T; r0 += ABR) {
        long nr = T - r0 < ABR ? T - r0 : ABR, r1 = r0 + nr;
        long last = (r1 - 1) / AKC * AKC;   /* the block's last key chunk */
        for (long r = 0; r < nr; r++)
            pdp[r] = psum[r] = 0;
        for (long c0 = 0; c0 <= last; c0 += AKC) {   /* D: every chunk; the last one stays in s, dp */
            long nc = r1 - c0 < AKC ? r1 - c0 : AKC;
            bwd_scores(s, dp, q, k, v, dyh, G, r0, nr, c0, nc);
            for (long r = 0; r < nr; r++)
                bwd_probs(s + r * nc, dp + r * nc, valid_keys(r0 + r, c0, nc), nc, scale, l[r0 + r], &pdp[r],
                          &psum[r]);
        }
        for (long r = 0; r < nr; r++)
            D[r] = psum[r] > 0 ? pdp[r] / psum[r] : 0;
        for (long c0 = last; c0 >= 0; c0 -= AKC) {   /* the last chunk first: its s and dp are at hand */
            long nc = r1 - c0 < AKC ? r1 - c0 : AKC;
            if (c0 != last) {
                bwd_scores(s, dp, q, k, v, dyh, G, r0, nr, c0, nc);
                for (long r = 0; r < nr; r++)
                    bwd_probs(s + r * nc, dp + r * nc, valid_keys(r0 + r, c0, nc), nc, scale, l[r0 + r], NULL,
                              NULL);
            }
            for (long r = 0; r < nr; r++)
                bwd_ds(s + r * nc, dp + r * nc, valid_keys(r0 + r, c0, nc), nc, scale, D[r]);
            gcrt_gemm_one(dq + r0 * st, dp, k + c0 * st, nr, hs, nc, nc, st, st, 0, 0, 1);    /* dq += ds k */
            gcrt_gemm_one(dk + c0 * st, dp, q + r0 * st, nc, hs, nr, nc, st, st, 1, 0, 1);    /* dk += ds^T q */
            gcrt_gemm_one(dv + c0 * st, s, dyh + r0 * ot, nc, hs, nr, nc, ot, st, 1, 0, 1);   /* dv += p^T dy */
        }
    }
}

void gc_attention_bwd(gc_real *dx, const gc_real *dy, const gc_real *x, const gc_real *y, const gc_real *lse,
                      const long *geom, float scale, int acc)
{
    (void)y;   /* D comes from p and dp (bwd_head); y is the CUDA kernels' */
    Geom G = geom_of(geom);
    long items = G.B * G.NH;
    #pragma omp parallel if (items > 1 && G.T * G.T * G.hs >= 32768)
    {
        gc_real *s = att_alloc(sizeof(gc_real) * 2 * ABR * AKC);
        #pragma omp for schedule(dynamic, 1)
        for (long it = 0; it < items; it++)
            bwd_head(dx, dy, x, lse, &G, it / G.NH, it % G.NH, (gc_real)scale, acc & 1, s, s + ABR * AKC);
        free(s);
    }
}
