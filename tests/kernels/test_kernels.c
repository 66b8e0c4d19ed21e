/* test_kernels.c — the shipped float kernels (gcrt): forwards and backwards
 * against naive double-precision loops, accumulate mode, in-place calls,
 * determinism across runs and thread counts, AdamW against llm.c's loop and
 * a hand-computed step, fill/poison, and the runtime errors (in a child
 * process: message and exit status 1), and the AVX-512 GEMM (gemm_cpu.c) on
 * edge shapes, every transpose, accumulate and padded leading dimensions.
 *
 *   test_kernels [case]     (all cases without an argument)
 */
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kt.h"
#include "gc_runtime_internal.h"

_Static_assert(sizeof(gc_real) == sizeof(float), "test_kernels checks the float build");

/* ------------------------------------------------------------------ comparisons */

/* Checks |got - want| <= rtol * |want| + atol elementwise (NaN fails);
 * reports the first few misses. */
static void expect_close(const char *what, const float *got, const double *want, long n,
                         double rtol, double atol)
{
    long bad = 0;
    for (long i = 0; i < n; i++) {
        double err = fabs((double)got[i] - want[i]);
        if (!(err <= rtol * fabs(want[i]) + atol) && bad++ < 3)
            KT_FAIL("%s: element %ld is %.9g, want %.9g", what, i, (double)got[i], want[i]);
    }
}

/* Checks the bits of got and want agree; reports the first difference. */
static void expect_bits(const char *what, const float *got, const float *want, long n)
{
    for (long i = 0; i < n; i++)
        if (memcmp(got + i, want + i, sizeof *got) != 0) {
            KT_FAIL("%s: element %ld is %.9g, want %.9g (bits differ)", what, i, (double)got[i],
                    (double)want[i]);
            return;
        }
}

static double max_abs(const double *x, long n)
{
    double m = 0.0;
    for (long i = 0; i < n; i++)
        m = fmax(m, fabs(x[i]));
    return m;
}

static double *dalloc(long n) { return kt_alloc((size_t)n * sizeof(double)); }
static float *falloc(long n) { return kt_alloc((size_t)n * sizeof(float)); }

/* ------------------------------------------------------------------ naive references */

/* Element (i, j) of op(x) for a matrix stored rows x cols (transposed: t). */
static double at(const float *x, long cols_stored, int t, long i, long j)
{
    return t ? x[j * cols_stored + i] : x[i * cols_stored + j];
}

/* c = op(a) @ op(b) per batch item; cabs = sum |a||b| (error scale). */
static void ref_matmul(double *c, double *cabs, const float *a, const float *b, long batch,
                       long M, long N, long K, int ta, int tb)
{
    for (long q = 0; q < batch; q++)
        for (long i = 0; i < M; i++)
            for (long j = 0; j < N; j++) {
                double s = 0.0, sa = 0.0;
                for (long k = 0; k < K; k++) {
                    double x = at(a + q * M * K, ta ? M : K, ta, i, k);
                    double y = at(b + q * K * N, tb ? K : N, tb, k, j);
                    s += x * y;
                    sa += fabs(x * y);
                }
                c[q * M * N + i * N + j] = s;
                cabs[q * M * N + i * N + j] = sa;
            }
}

/* out, mean, rstd of a layernorm, in double. */
static void ref_layernorm(double *out, double *mean, double *rstd, const float *x,
                          const float *w, const float *b, long N, long C, double eps)
{
    for (long r = 0; r < N; r++) {
        double m = 0.0, v = 0.0;
        for (long i = 0; i < C; i++)
            m += x[r * C + i];
        m /= (double)C;
        for (long i = 0; i < C; i++)
            v += (x[r * C + i] - m) * (x[r * C + i] - m);
        double rs = 1.0 / sqrt(v / (double)C + eps);
        for (long i = 0; i < C; i++)
            out[r * C + i] = (x[r * C + i] - m) * rs * w[i] + b[i];
        mean[r] = m;
        rstd[r] = rs;
    }
}

/* dx, dw, db of a layernorm (llm.c's formula) from float mean/rstd, in double. */
static void ref_layernorm_bwd(double *dx, double *dw, double *db, const float *dout,
                              const float *x, const float *w, const float *mean,
                              const float *rstd, long N, long C)
{
    for (long i = 0; i < C; i++)
        dw[i] = db[i] = 0.0;
    for (long r = 0; r < N; r++) {
        double a = 0.0, b = 0.0;
        for (long i = 0; i < C; i++) {
            double nrm = (x[r * C + i] - (double)mean[r]) * rstd[r];
            double dn = (double)w[i] * dout[r * C + i];
            a += dn;
            b += dn * nrm;
            dw[i] += nrm * dout[r * C + i];
            db[i] += dout[r * C + i];
        }
        a /= (double)C;
        b /= (double)C;
        for (long i = 0; i < C; i++) {
            double nrm = (x[r * C + i] - (double)mean[r]) * rstd[r];
            dx[r * C + i] = ((double)w[i] * dout[r * C + i] - a - nrm * b) * rstd[r];
        }
    }
}

/* Row softmax in double (-inf gives 0) of the float differences x - max
 * (the rounding of x - max in float is inherent, not the kernel's error). */
static void ref_softmax(double *y, const float *x, long rows, long cols)
{
    for (long r = 0; r < rows; r++) {
        float m = -INFINITY;
        double s = 0.0;
        for (long i = 0; i < cols; i++)
            m = fmaxf(m, x[r * cols + i]);
        for (long i = 0; i < cols; i++)
            s += y[r * cols + i] = exp((double)(x[r * cols + i] - m));
        for (long i = 0; i < cols; i++)
            y[r * cols + i] /= s;
    }
}

/* Cross-entropy loss and gradient (scale dloss/n) in double. */
static double ref_crossentropy(double *dlogits, const float *logits, const int32_t *t, long n,
                               long Vp, long V, double dloss)
{
    double loss = 0.0;
    for (long r = 0; r < n; r++) {
        const float *x = logits + r * Vp;
        double m = -INFINITY, s = 0.0;
        for (long j = 0; j < V; j++)
            m = fmax(m, x[j]);
        for (long j = 0; j < V; j++)
            s += exp(x[j] - m);
        loss += log(s) + m - x[t[r]];
        for (long j = 0; j < Vp; j++)
            dlogits[r * Vp + j] = j < V ? (exp(x[j] - m) / s - (j == t[r])) * dloss / n : 0.0;
    }
    return loss / n;
}

/* ------------------------------------------------------------------ forward (and backward) against references */

static void check_matmul(long batch, long M, long N, long K, int ta, int tb)
{
    char what[96];
    snprintf(what, sizeof what, "matmul batch=%ld M=%ld N=%ld K=%ld ta=%d tb=%d", batch, M, N, K,
             ta, tb);
    long nc = batch * M * N;
    float *a = kt_rand(batch * M * K, -1, 1), *b = kt_rand(batch * K * N, -1, 1), *c = falloc(nc);
    double *ref = dalloc(nc), *cabs = dalloc(nc);
    ref_matmul(ref, cabs, a, b, batch, M, N, K, ta, tb);
    gc_matmul(c, a, b, batch, M, N, K, ta, tb, 0);
    long bad = 0;
    for (long i = 0; i < nc; i++)
        if (!(fabs(c[i] - ref[i]) <= 1e-5 * cabs[i] + 1e-30) && bad++ < 3)
            KT_FAIL("%s: element %ld is %.9g, want %.9g", what, i, (double)c[i], ref[i]);
    free(a), free(b), free(c), free(ref), free(cabs);
}

static void forward_matmul(void)
{
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            check_matmul(1, 1, 1, 1, ta, tb);
            check_matmul(1, 5, 7, 3, ta, tb);
            check_matmul(3, 4, 6, 9, ta, tb);
            check_matmul(1, 200, 130, 70, ta, tb); /* split by rows */
            check_matmul(1, 60, 300, 70, ta, tb);  /* split by columns */
        }
    check_matmul(48, 64, 64, 64, 0, 1); /* attention scores */
    check_matmul(48, 64, 64, 64, 0, 0); /* attention @ v */
    check_matmul(2, 100, 120, 130, 1, 1);
    check_matmul(2, 3, 4, 0, 0, 0); /* K = 0: zeros */
}

static void forward_reduce_embedding(void)
{
    long rows = 300, cols = 203;
    float *in = kt_rand(rows * cols, -1, 1), *out = falloc(cols);
    double *ref = dalloc(cols);
    for (long c = 0; c < cols; c++) {
        ref[c] = 0.0;
        for (long r = 0; r < rows; r++)
            ref[c] += in[r * cols + c];
    }
    gc_reduce_rows(out, in, rows, cols, 0);
    expect_close("reduce_rows", out, ref, cols, 1e-6, 1e-6);
    free(in), free(out), free(ref);

    long n = 300, tr = 57, C = 300; /* C > 256: several column blocks */
    float *table = kt_rand(tr * C, -1, 1), *e = falloc(n * C), *dout = kt_rand(n * C, -1, 1);
    float *dt = falloc(tr * C), *dref = falloc(tr * C);
    int32_t *idx = kt_randidx(n, tr);
    gc_embedding_fwd(e, idx, table, n, tr, C);
    for (long i = 0; i < n; i++)
        expect_bits("embedding_fwd", e + i * C, table + (long)idx[i] * C, C);
    memset(dref, 0, (size_t)(tr * C) * sizeof(float));
    for (long i = 0; i < n; i++) /* the contract's order: i ascending */
        for (long j = 0; j < C; j++)
            dref[idx[i] * C + j] += dout[i * C + j];
    for (long i = 0; i < tr * C; i++)
        dt[i] = NAN;
    gc_embedding_bwd(dt, dout, idx, n, tr, C, 0);
    expect_bits("embedding_bwd", dt, dref, tr * C);
    free(table), free(e), free(dout), free(dt), free(dref), free(idx);
}

static void forward_layernorm(void)
{
    long N = 70, C = 768, n = N * C;
    float *x = kt_rand(n, -2, 2), *w = kt_rand(C, 0.5, 1.5), *b = kt_rand(C, -1, 1);
    for (long i = 0; i < C; i++)
        x[i] += 100.0f; /* a large mean: catches one-pass variance */
    float *out = falloc(n), *mean = falloc(N), *rstd = falloc(N);
    double *rout = dalloc(n), *rmean = dalloc(N), *rrstd = dalloc(N);
    ref_layernorm(rout, rmean, rrstd, x, w, b, N, C, 1e-5);
    gc_layernorm_fwd(out, mean, rstd, x, w, b, N, C, 1e-5f);
    expect_close("layernorm out", out, rout, n, 1e-5, 1e-5);
    expect_close("layernorm mean", mean, rmean, N, 1e-6, 1e-7);
    expect_close("layernorm rstd", rstd, rrstd, N, 1e-6, 0);

    float *dout = kt_rand(n, -1, 1), *dx = falloc(n), *dw = falloc(C), *db = falloc(C);
    double *rdx = dalloc(n), *rdw = dalloc(C), *rdb = dalloc(C);
    ref_layernorm_bwd(rdx, rdw, rdb, dout, x, w, mean, rstd, N, C);
    gc_layernorm_bwd(dx, dw, db, dout, x, w, mean, rstd, N, C, 0);
    expect_close("layernorm dx", dx, rdx, n, 1e-4, 1e-5 * max_abs(rdx, n));
    expect_close("layernorm dw", dw, rdw, C, 1e-5, 1e-6 * max_abs(rdw, C));
    expect_close("layernorm db", db, rdb, C, 1e-5, 1e-6 * max_abs(rdb, C));
    free(x), free(w), free(b), free(out), free(mean), free(rstd), free(rout), free(rmean),
        free(rrstd);
    free(dout), free(dx), free(dw), free(db), free(rdx), free(rdw), free(rdb);
}

/* Permute against index arithmetic on the input's multi-index. */
static void check_permute(int rank, const long *shape, const int *perm)
{
    long n = 1, st[8];
    for (int d = rank - 1; d >= 0; d--) {
        st[d] = n;
        n *= shape[d];
    }
    float *in = kt_rand(n, -1, 1), *out = falloc(n), *ref = falloc(n);
    for (long o = 0; o < n; o++) { /* o walks the output in row-major order */
        long rem = o, off = 0;
        for (int i = rank - 1; i >= 0; i--) {
            long ext = shape[perm[i]];
            off += (rem % ext) * st[perm[i]];
            rem /= ext;
        }
        ref[o] = in[off];
    }
    gc_permute(out, in, rank, shape, perm, 0);
    expect_bits("permute", out, ref, n);
    free(in), free(out), free(ref);
}

static void forward_permute(void)
{
    static const long s3[] = {3, 4, 5}, s4[] = {2, 1, 3, 5}, s5[] = {4, 64, 3, 12, 64};
    static const int p3[] = {2, 0, 1}, p4[] = {3, 1, 0, 2}, p5[] = {2, 0, 3, 1, 4},
                     p5t[] = {0, 2, 1, 4, 3};
    check_permute(3, s3, p3);
    check_permute(4, s4, p4);
    check_permute(5, s5, p5);  /* GPT-2 qkv split */
    check_permute(5, s5, p5t); /* last axis moves: strided gather */
}

static void forward_softmax_mask(void)
{
    long rows = 48 * 64, T = 64, n = rows * T;
    float *x = kt_rand(n, -30, 30), *m = falloc(n), *y = falloc(n);
    double *ref = dalloc(n);
    gc_causal_mask_fwd(m, x, rows / T, T);
    for (long r = 0; r < rows; r++)
        for (long j = 0; j < T; j++) {
            float want = j <= r % T ? x[r * T + j] : -INFINITY;
            KT_CHECK(memcmp(&m[r * T + j], &want, sizeof want) == 0,
                     "causal_mask_fwd: row %ld col %ld", r, j);
        }
    gc_softmax_fwd(y, m, rows, T);
    ref_softmax(ref, m, rows, T);
    /* relative accuracy down to tiny probabilities tests the exp polynomial */
    long bad = 0;
    for (long i = 0; i < n; i++) {
        double tol = ref[i] > 1e-30 ? 2e-6 * ref[i] : 1e-37;
        if (!(fabs(y[i] - ref[i]) <= tol) && bad++ < 3)
            KT_FAIL("softmax_fwd: element %ld is %.9g, want %.9g", i, (double)y[i], ref[i]);
    }
    /* exp over its whole range: a row {0, x} gives y = {inv, e^x * inv} with
     * inv = 1/(1 + e^x) rounded once, so y[1]/y[0] is the kernel's e^x to
     * within half an ulp */
    float worst = 0;
    for (int k = 0; k <= 20000; k++) {
        float pair[2] = {0.0f, -87.0f * (float)k / 20000.0f}, p[2];
        gc_softmax_fwd(p, pair, 1, 2);
        double want = exp((double)pair[1]);
        float rel = (float)(fabs((double)p[1] / p[0] - want) / want);
        worst = rel > worst ? rel : worst;
    }
    KT_CHECK(worst < 2.5e-7f, "softmax_fwd: exp relative error %g over [-87, 0]", (double)worst);

    /* backward */
    float *dy = kt_rand(n, -1, 1), *dx = falloc(n), *dm = falloc(n);
    double *rdx = dalloc(n);
    for (long r = 0; r < rows; r++) {
        double s = 0.0;
        for (long j = 0; j < T; j++)
            s += (double)dy[r * T + j] * y[r * T + j];
        for (long j = 0; j < T; j++)
            rdx[r * T + j] = y[r * T + j] * (dy[r * T + j] - s);
    }
    gc_softmax_bwd(dx, dy, y, rows, T, 0);
    expect_close("softmax_bwd", dx, rdx, n, 1e-5, 1e-6);
    gc_causal_mask_bwd(dm, dy, rows / T, T, 0);
    for (long r = 0; r < rows; r++)
        for (long j = 0; j < T; j++)
            KT_CHECK(dm[r * T + j] == (j <= r % T ? dy[r * T + j] : 0.0f),
                     "causal_mask_bwd: row %ld col %ld", r, j);
    free(x), free(m), free(y), free(ref), free(dy), free(dx), free(dm), free(rdx);
}

static void forward_crossentropy(void)
{
    long n = 8, V = 50257, Vp = 50304;
    float *logits = kt_rand(n * Vp, -8, 8), *d = falloc(n * Vp), loss, dloss = 0.83f;
    int32_t *t = kt_randidx(n, V);
    t[0] = (int32_t)(V - 1);
    for (long r = 0; r < n; r++) /* padding columns hold garbage: must be ignored */
        for (long j = V; j < Vp; j++)
            logits[r * Vp + j] = j % 2 ? 1e30f : NAN;
    double *rd = dalloc(n * Vp);
    double rloss = ref_crossentropy(rd, logits, t, n, Vp, V, dloss);
    gc_crossentropy_fwd(&loss, logits, t, n, Vp, V);
    KT_CHECK(fabs(loss - rloss) <= 1e-6 * rloss, "crossentropy_fwd: loss %.9g, want %.9g",
             (double)loss, rloss);
    gc_crossentropy_bwd(d, &dloss, logits, t, n, Vp, V, 0);
    expect_close("crossentropy_bwd", d, rd, n * Vp, 1e-5, 1e-7 * dloss / n);
    free(logits), free(d), free(t), free(rd);
}

static void test_forward(void)
{
    forward_matmul();
    forward_reduce_embedding();
    forward_layernorm();
    forward_permute();
    forward_softmax_mask();
    forward_crossentropy();
}

/* ------------------------------------------------------------------ accumulate */

/* out = init + fresh, bitwise (for kernels that compute then add). */
static void expect_sum_bits(const char *what, const float *acc, const float *init,
                            const float *fresh, long n)
{
    float *want = falloc(n);
    for (long i = 0; i < n; i++)
        want[i] = init[i] + fresh[i];
    expect_bits(what, acc, want, n);
    free(want);
}

static void test_accumulate(void)
{
    long R = 300, C = 130, n = R * C;
    float *x = kt_rand(n, -1, 1), *g = kt_rand(n, -1, 1), *init = kt_rand(n, -1, 1);
    float *fresh = falloc(n), *acc = falloc(n);

    /* matmul: c += a @ b (BLAS adds in its own order: compare closely) */
    gc_matmul(fresh, x, g, 1, 100, 100, 60, 0, 1, 0);
    memcpy(acc, init, 100 * 100 * sizeof(float));
    gc_matmul(acc, x, g, 1, 100, 100, 60, 0, 1, 1);
    for (long i = 0; i < 100 * 100; i++)
        KT_CHECK(fabsf(acc[i] - (init[i] + fresh[i])) <= 1e-5f, "matmul acc: element %ld", i);

    gc_reduce_rows(fresh, g, R, C, 0);
    memcpy(acc, init, C * sizeof(float));
    gc_reduce_rows(acc, g, R, C, 1);
    expect_sum_bits("reduce_rows acc", acc, init, fresh, C);

    static const long shape[] = {3, 100, 130};
    static const int perm[] = {1, 2, 0};
    gc_permute(fresh, x, 3, shape, perm, 0);
    memcpy(acc, init, n * sizeof(float));
    gc_permute(acc, x, 3, shape, perm, 1);
    expect_sum_bits("permute acc", acc, init, fresh, n);

    float *y = falloc(n);
    gc_softmax_fwd(y, x, R, C);
    gc_softmax_bwd(fresh, g, y, R, C, 0);
    memcpy(acc, init, n * sizeof(float));
    gc_softmax_bwd(acc, g, y, R, C, 1);
    expect_sum_bits("softmax_bwd acc", acc, init, fresh, n);

    gc_causal_mask_bwd(fresh, g, 3, 100, 0);
    memcpy(acc, init, 3 * 100 * 100 * sizeof(float));
    gc_causal_mask_bwd(acc, g, 3, 100, 1);
    expect_sum_bits("causal_mask_bwd acc", acc, init, fresh, 3 * 100 * 100);

    int32_t *t = kt_randidx(R, C - 7);
    float dloss = 1.0f;
    gc_crossentropy_bwd(fresh, &dloss, x, t, R, C, C - 7, 0);
    memcpy(acc, init, n * sizeof(float));
    gc_crossentropy_bwd(acc, &dloss, x, t, R, C, C - 7, 1);
    expect_sum_bits("crossentropy_bwd acc", acc, init, fresh, n); /* padding: init + 0 */

    /* layernorm_bwd: each bit accumulates its own output only */
    float *mean = falloc(R), *rstd = falloc(R), *w = kt_rand(C, 0.5, 1.5);
    gc_layernorm_fwd(y, mean, rstd, x, w, w, R, C, 1e-5f);
    float *f3[3] = {falloc(n), falloc(C), falloc(C)}, *a3[3] = {falloc(n), falloc(C), falloc(C)};
    long len[3] = {n, C, C};
    gc_layernorm_bwd(f3[0], f3[1], f3[2], g, x, w, mean, rstd, R, C, 0);
    for (int bits = 1; bits < 8; bits++) {
        for (int k = 0; k < 3; k++)
            memcpy(a3[k], init, len[k] * sizeof(float));
        gc_layernorm_bwd(a3[0], a3[1], a3[2], g, x, w, mean, rstd, R, C, bits);
        for (int k = 0; k < 3; k++) {
            char what[64];
            snprintf(what, sizeof what, "layernorm_bwd acc=%d output %d", bits, k);
            if (bits & (1 << k))
                expect_sum_bits(what, a3[k], init, f3[k], len[k]);
            else
                expect_bits(what, a3[k], f3[k], len[k]);
        }
    }

    /* embedding_bwd: acc adds into the table, untouched rows keep their bits;
     * without acc, untouched rows become 0 */
    long tr = 500;
    int32_t *idx = kt_randidx(R, 50); /* only rows < 50 are used */
    float *tab = kt_rand(tr * C, -1, 1), *tab0 = kt_dup(tab, tr * C);
    gc_embedding_bwd(tab, g, idx, R, tr, C, 1);
    expect_bits("embedding_bwd acc: unused rows", tab + 50 * C, tab0 + 50 * C, (tr - 50) * C);
    gc_embedding_bwd(fresh, g, idx, R, 50, C, 0);
    for (long i = 0; i < 50 * C; i++)
        KT_CHECK(fabsf(tab[i] - (tab0[i] + fresh[i])) <= 1e-5f, "embedding_bwd acc: element %ld",
                 i);
    gc_embedding_bwd(tab, g, idx, R, tr, C, 0);
    for (long i = 50 * C; i < tr * C; i++)
        if (tab[i] != 0.0f) {
            KT_FAIL("embedding_bwd: unused element %ld not zeroed", i);
            break;
        }
    for (int k = 0; k < 3; k++)
        free(f3[k]), free(a3[k]);
    free(x), free(g), free(init), free(fresh), free(acc), free(y), free(t), free(mean),
        free(rstd), free(w), free(idx), free(tab), free(tab0);
}

/* ------------------------------------------------------------------ in place */

static void test_inplace(void)
{
    long R = 257, C = 191, n = R * C; /* odd sizes: vector tails */
    float *x = kt_rand(n, -5, 5), *g = kt_rand(n, -1, 1), *y = falloc(n), *ref = falloc(n);
    float *buf = falloc(n);

    gc_softmax_fwd(ref, x, R, C);
    memcpy(buf, x, n * sizeof(float));
    gc_softmax_fwd(buf, buf, R, C);
    expect_bits("softmax_fwd in place", buf, ref, n);

    memcpy(y, ref, n * sizeof(float));
    gc_softmax_bwd(ref, g, y, R, C, 0);
    memcpy(buf, g, n * sizeof(float));
    gc_softmax_bwd(buf, buf, y, R, C, 0);
    expect_bits("softmax_bwd dx == dy", buf, ref, n);
    memcpy(buf, y, n * sizeof(float));
    gc_softmax_bwd(buf, g, buf, R, C, 0);
    expect_bits("softmax_bwd dx == y", buf, ref, n);

    long B = 7, T = 97, m = B * T * T;
    float *s = kt_rand(m, -1, 1), *sref = falloc(m), *sbuf = kt_dup(s, m);
    gc_causal_mask_fwd(sref, s, B, T);
    gc_causal_mask_fwd(sbuf, sbuf, B, T);
    expect_bits("causal_mask_fwd in place", sbuf, sref, m);
    gc_causal_mask_bwd(sref, s, B, T, 0);
    memcpy(sbuf, s, m * sizeof(float));
    gc_causal_mask_bwd(sbuf, sbuf, B, T, 0);
    expect_bits("causal_mask_bwd in place", sbuf, sref, m);

    int32_t *t = kt_randidx(R, C - 3);
    float dloss = 0.5f;
    gc_crossentropy_bwd(ref, &dloss, x, t, R, C, C - 3, 0);
    memcpy(buf, x, n * sizeof(float));
    gc_crossentropy_bwd(buf, &dloss, buf, t, R, C, C - 3, 0);
    expect_bits("crossentropy_bwd in place", buf, ref, n);

    float *w = kt_rand(C, 0.5, 1.5), *mean = falloc(R), *rstd = falloc(R);
    float *dw = falloc(C), *db = falloc(C), *dw2 = falloc(C), *db2 = falloc(C);
    gc_layernorm_fwd(y, mean, rstd, x, w, w, R, C, 1e-5f);
    gc_layernorm_bwd(ref, dw, db, g, x, w, mean, rstd, R, C, 0);
    memcpy(buf, g, n * sizeof(float));
    gc_layernorm_bwd(buf, dw2, db2, buf, x, w, mean, rstd, R, C, 0);
    expect_bits("layernorm_bwd dx == dout", buf, ref, n);
    expect_bits("layernorm_bwd dx == dout (dw)", dw2, dw, C);
    expect_bits("layernorm_bwd dx == dout (db)", db2, db, C);

    free(x), free(g), free(y), free(ref), free(buf), free(s), free(sref), free(sbuf), free(t);
    free(w), free(mean), free(rstd), free(dw), free(db), free(dw2), free(db2);
}

/* ------------------------------------------------------------------ determinism */

/* Runs every kernel at sizes that take the parallel paths and returns the
 * concatenated outputs (a fresh buffer of *len floats). A matmul split across
 * threads gives bits that depend on the split (OpenBLAS blocks differently),
 * so those run only when `split` is set. */
static float *run_all(long *len, int split)
{
    kt_seed(77);
    long BT = 256, C = 192, C3 = 3 * C, V = 5000, Vp = 5008, n = 0;
    float *out = falloc(4000000), *o = out;
    float *x = kt_rand(BT * C3, -1, 1), *w = kt_rand(C3 * C, -1, 1), *g = kt_rand(BT * C3, -1, 1);
    if (split) {
        gc_matmul(o, x, w, 1, BT, C3, C, 0, 1, 0), o += BT * C3;  /* split by columns */
        gc_matmul(o, g, x, 1, C3, C3, BT, 1, 0, 0), o += C3 * C3; /* split by rows, ta */
    }
    gc_matmul(o, x, g, 12, 64, 64, 48, 0, 1, 0), o += 12 * 64 * 64; /* batched */
    gc_reduce_rows(o, g, BT, C3, 0), o += C3;
    float *mean = falloc(BT), *rstd = falloc(BT);
    gc_layernorm_fwd(o, mean, rstd, x, w, g, BT, C3, 1e-5f), o += BT * C3;
    memcpy(o, mean, BT * sizeof(float)), o += BT;
    memcpy(o, rstd, BT * sizeof(float)), o += BT;
    gc_layernorm_bwd(o, o + BT * C3, o + BT * C3 + C3, g, x, w, mean, rstd, BT, C3, 0);
    o += BT * C3 + 2 * C3;
    gc_softmax_fwd(o, x, BT * 9, 64), o += BT * C3;
    gc_softmax_bwd(o, g, o - BT * C3, BT * 9, 64, 0), o += BT * C3;
    static const long shape[] = {4, 64, 3, 12, 16};
    static const int perm[] = {2, 0, 3, 1, 4};
    gc_permute(o, x, 5, shape, perm, 0), o += BT * C3;
    int32_t *idx = kt_randidx(BT, 100);
    gc_embedding_bwd(o, g, idx, BT, 100, C3, 0), o += 100 * C3;
    float *logits = kt_rand(BT * Vp, -4, 4), dloss = 1.0f;
    int32_t *t = kt_randidx(BT, V);
    gc_crossentropy_fwd(o, logits, t, BT, Vp, V), o += 1;
    gc_crossentropy_bwd(o, &dloss, logits, t, BT, Vp, V, 0), o += BT * Vp;
    long np = BT * C3;
    float *p = kt_rand(np, -1, 1), *m = kt_rand(np, -1, 1), *v = kt_rand(np, 0, 1);
    gc_adamw(p, g, m, v, np, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 3);
    memcpy(o, p, np * sizeof(float)), o += np;
    n = o - out;
    free(x), free(w), free(g), free(mean), free(rstd), free(idx), free(logits), free(t), free(p),
        free(m), free(v);
    *len = n;
    return out;
}

/* Same bits run to run (all kernels), and for 1, 2 and 3 threads (all but
 * the split matmuls). */
static void test_determinism(void)
{
    long n1, n2, n3, n4, n5;
    omp_set_num_threads(2);
    float *a = run_all(&n1, 1), *b = run_all(&n2, 1);
    KT_CHECK(n1 == n2, "run_all lengths differ");
    expect_bits("two runs on 2 threads", b, a, n1);
    free(a), free(b);
    a = run_all(&n1, 0);
    omp_set_num_threads(1);
    float *c = run_all(&n3, 0);
    expect_bits("1 thread vs 2 threads", c, a, n1);
    omp_set_num_threads(3);
    float *d = run_all(&n4, 0);
    expect_bits("3 threads vs 2 threads", d, a, n1);
    omp_set_num_threads(5);
    float *e = run_all(&n5, 0);
    expect_bits("5 threads vs 2 threads", e, a, n1);
    KT_CHECK(n1 == n3 && n1 == n4 && n1 == n5, "run_all lengths differ");
    omp_set_num_threads(2);
    free(a), free(c), free(d), free(e);
}

/* ------------------------------------------------------------------ adamw */

static void test_adamw(void)
{
    /* one step by hand: t=1, so mhat = g and vhat = g^2 */
    float p = 1.0f, g = 0.5f, m = 0.0f, v = 0.0f;
    gc_adamw(&p, &g, &m, &v, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 1);
    double want = 1.0 - 0.1 * (0.5 / (0.5 + 1e-8) + 0.01 * 1.0);
    KT_CHECK(fabs(p - want) < 1e-6, "adamw step 1: p = %.9g, want %.9g", (double)p, want);
    KT_CHECK(m == (1.0f - 0.9f) * 0.5f && v == (1.0f - 0.999f) * 0.5f * 0.5f,
             "adamw step 1: m = %.9g, v = %.9g", (double)m, (double)v);

    /* against llm.c's loop, bit for bit, less its powf bias corrections
     * (gc_adamw_bias: 1 - beta^t in double, rounded once); n = 14 (13 after the unaligned
     * start) takes one 8-wide, one 4-wide and one scalar step */
    for (int t = 1; t <= 3; t += 2) {
        long n = t == 1 ? 14 : 200003;
        float *pp = kt_rand(n, -1, 1), *gg = kt_rand(n, -1, 1), *mm = kt_rand(n, -0.1, 0.1),
              *vv = kt_rand(n, 0, 0.01);
        float *p2 = kt_dup(pp, n), *m2 = kt_dup(mm, n), *v2 = kt_dup(vv, n);
        float lr = 3e-4f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
        float c1 = (float)(1.0 - pow(b1, t)), c2 = (float)(1.0 - pow(b2, t));
        for (long i = 0; i < n; i++) {
            float mi = b1 * m2[i] + (1.0f - b1) * gg[i];
            float vi = b2 * v2[i] + (1.0f - b2) * gg[i] * gg[i];
            float mhat = mi / c1, vhat = vi / c2;
            m2[i] = mi;
            v2[i] = vi;
            p2[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p2[i]);
        }
        gc_adamw(pp + 1, gg + 1, mm + 1, vv + 1, n - 1, lr, b1, b2, eps, wd, t); /* unaligned */
        gc_adamw(pp, gg, mm, vv, 1, lr, b1, b2, eps, wd, t);
        expect_bits("adamw p", pp, p2, n);
        expect_bits("adamw m", mm, m2, n);
        expect_bits("adamw v", vv, v2, n);
        free(pp), free(gg), free(mm), free(vv), free(p2), free(m2), free(v2);
    }
}

/* ------------------------------------------------------------------ fill, poison */

static void test_fill_poison(void)
{
    long n = 3000001;
    float *x = falloc(n + 1);
    x[n] = 7.0f;
    float vals[] = {0.0f, -0.0f, 1.5f, -2.25f};
    for (int k = 0; k < 4; k++) {
        gc_fill(x, n, vals[k]);
        long bad = 0;
        for (long i = 0; i < n; i++)
            bad += memcmp(&x[i], &vals[k], sizeof(float)) != 0;
        KT_CHECK(bad == 0, "fill %g: %ld elements wrong", (double)vals[k], bad);
        KT_CHECK(x[n] == 7.0f, "fill %g wrote past the end", (double)vals[k]);
    }
    size_t sizes[] = {1, 7, 4 * 1000 + 3, (size_t)n * 4 - 1};
    for (int k = 0; k < 4; k++) {
        memset(x, 0, (size_t)(n + 1) * sizeof(float));
        gc_poison(x, sizes[k]);
        size_t whole = sizes[k] / 4;
        long bad = 0;
        for (size_t i = 0; i < whole; i++)
            bad += !isnan(x[i]);
        KT_CHECK(bad == 0, "poison %zu bytes: %ld floats not NaN", sizes[k], bad);
        const unsigned char *bytes = (const unsigned char *)x;
        KT_CHECK(bytes[sizes[k] - 1] == 0xFF && bytes[sizes[k]] == 0,
                 "poison %zu bytes: wrong extent", sizes[k]);
    }
    double dpoison;
    gc_poison(&dpoison, sizeof dpoison);
    KT_CHECK(isnan(dpoison), "poison: a double is not NaN");
    free(x);
}

/* ------------------------------------------------------------------ NaN propagation */

/* A NaN input (a poisoned, dead buffer read by mistake) must reach the
 * outputs that depend on it, so the loss turns NaN instead of hiding it. */
static void test_nan(void)
{
    long R = 4, C = 300;
    float *x = kt_rand(R * C, -2, 2), *y = falloc(R * C), *w = kt_rand(C, 0.5, 1.5);
    float *mean = falloc(R), *rstd = falloc(R), loss, dloss = 1.0f;
    for (int pos = 0; pos < 3; pos++) { /* first, middle, last column of row 1 */
        long j = pos == 0 ? 0 : pos == 1 ? C / 2 : C - 1;
        float keep = x[C + j];
        x[C + j] = NAN;
        gc_softmax_fwd(y, x, R, C);
        KT_CHECK(isnan(y[C]) && isnan(y[2 * C - 1]) && !isnan(y[0]),
                 "softmax_fwd: NaN at column %ld does not make its row (only) NaN", j);
        gc_layernorm_fwd(y, mean, rstd, x, w, w, R, C, 1e-5f);
        KT_CHECK(isnan(y[C]) && isnan(mean[1]) && !isnan(y[0]),
                 "layernorm_fwd: NaN at column %ld does not make its row (only) NaN", j);
        int32_t t[4] = {1, 2, 3, 4};
        gc_crossentropy_fwd(&loss, x, t, R, C, C);
        KT_CHECK(isnan(loss), "crossentropy_fwd: NaN logit at column %ld gives loss %g", j,
                 (double)loss);
        gc_crossentropy_bwd(y, &dloss, x, t, R, C, C, 0);
        KT_CHECK(isnan(y[C]) && !isnan(y[0]), "crossentropy_bwd: NaN logit at column %ld", j);
        x[C + j] = keep;
    }
    free(x), free(y), free(w), free(mean), free(rstd);
}

/* ------------------------------------------------------------------ runtime errors */

/* Runs fn in a child process; checks that it exits with status 1 after
 * printing exactly `want` (one line) on stderr. */
static void expect_error(void (*fn)(void), const char *want)
{
    int fd[2];
    if (pipe(fd) != 0) {
        KT_FAIL("pipe failed");
        return;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        fn();
        _exit(0); /* not reached when the kernel reports the error */
    }
    close(fd[1]);
    char buf[512];
    size_t len = 0;
    ssize_t r;
    while ((r = read(fd[0], buf + len, sizeof buf - 1 - len)) > 0)
        len += (size_t)r;
    buf[len] = '\0';
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    KT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1, "'%s': exit status %d, want 1", want,
             WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    KT_CHECK(strcmp(buf, want) == 0, "stderr is '%s', want '%s'", buf, want);
}

static float err_buf[64 * 4];
static int32_t err_idx[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 70000, 0, 0, 0};

static void emb_fwd_bad(void) { gc_embedding_fwd(err_buf, err_idx, err_buf, 16, 50304, 1); }
static void emb_bwd_bad(void)
{
    err_idx[12] = -5;
    gc_embedding_bwd(err_buf, err_buf, err_idx, 16, 64, 1, 0);
}
static void ce_fwd_bad(void)
{
    int32_t t[3] = {0, 3, 4}; /* V = 4: column 4 is padding */
    gc_crossentropy_fwd(err_buf, err_buf, t, 3, 8, 4);
}
static void ce_bwd_bad(void)
{
    int32_t t[3] = {0, -1, 1};
    gc_crossentropy_bwd(err_buf, err_buf, err_buf, t, 3, 8, 4, 0);
}
static void test_errors(void)
{
    expect_error(emb_fwd_bad,
                 "error: index 70000 at position 12 is outside the embedding table [0, 50304)\n");
    expect_error(emb_bwd_bad,
                 "error: index -5 at position 12 is outside the embedding table [0, 64)\n");
    expect_error(ce_fwd_bad, "error: target 4 at position 2 is outside the vocabulary [0, 4)\n");
    expect_error(ce_bwd_bad, "error: target -1 at position 1 is outside the vocabulary [0, 4)\n");
}

/* ------------------------------------------------------------------ gemm_cpu.c */

/* gcrt_sgemm on one shape with leading dimensions padded by `pad` columns and
 * a random C (acc: C + op(A) op(B)); elements outside the M x N window of C
 * must not change. */
static int check_sgemm(long M, long N, long K, int ta, int tb, int acc, long pad)
{
    long ar = ta ? K : M, acol = ta ? M : K, br = tb ? N : K, bcol = tb ? K : N;
    long lda = acol + pad, ldb = bcol + pad, ldc = N + pad;
    float *a = kt_rand(ar * lda, -1, 1), *b = kt_rand(br * ldb, -1, 1), *c = kt_rand(M * ldc, -1, 1);
    float *c0 = falloc(M * ldc);
    memcpy(c0, c, (size_t)(M * ldc) * sizeof *c);
    if (!gcrt_sgemm(c, a, b, M, N, K, lda, ldb, ldc, ta, tb, acc)) {
        free(a), free(b), free(c), free(c0);
        return 0;
    }
    long bad = 0;
    for (long i = 0; i < M; i++)
        for (long j = 0; j < ldc; j++) {
            double want = c0[i * ldc + j], scale = fabs(want);
            if (j < N) {
                double s = 0.0, sa = 0.0;
                for (long k = 0; k < K; k++) {
                    double x = ta ? a[k * lda + i] : a[i * lda + k];
                    double y = tb ? b[j * ldb + k] : b[k * ldb + j];
                    s += x * y;
                    sa += fabs(x * y);
                }
                want = acc ? want + s : s;
                scale = acc ? scale + sa : sa;
            }
            double got = c[i * ldc + j];
            if (!(fabs(got - want) <= 1e-5 * scale + 1e-30) && bad++ < 3)
                KT_FAIL("sgemm M=%ld N=%ld K=%ld ta=%d tb=%d acc=%d pad=%ld: c[%ld,%ld] is %.9g, want %.9g",
                        M, N, K, ta, tb, acc, pad, i, j, got, want);
        }
    free(a), free(b), free(c), free(c0);
    return 1;
}

static void test_gemm(void)
{
    /* edges of the 8 x 32 tile, K around the 384/768 blocks, M around the
     * few-rows limit (512), N past one 3072 column block */
    static const long shapes[][3] = {
        {1, 1, 1},     {8, 32, 16},   {7, 31, 5},    {9, 33, 17},   {13, 70, 385},
        {64, 64, 64},  {256, 96, 800}, {520, 40, 390}, {600, 3100, 3}, {17, 100, 1000},
    };
    int ran = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 8; t++)
            ran += check_sgemm(shapes[s][0], shapes[s][1], shapes[s][2], t & 1, (t >> 1) & 1, t >> 2,
                               (long)(s % 3) * 5);
    /* the rounding does not depend on how gc_matmul splits C across threads */
    static const long split[][5] = {{600, 3100, 100, 1, 0}, {256, 768, 900, 0, 1}, {256, 700, 300, 0, 0},
                                    {17, 100, 1000, 1, 0}, {9, 330, 800, 0, 1}, {500, 95, 70, 1, 1}};
    for (size_t s = 0; ran && s < sizeof split / sizeof split[0]; s++) {
        long M = split[s][0], N = split[s][1], K = split[s][2];
        int ta = (int)split[s][3], tb = (int)split[s][4];
        float *a = kt_rand(M * K, -1, 1), *b = kt_rand(K * N, -1, 1), *c1 = falloc(M * N), *c2 = falloc(M * N);
        omp_set_num_threads(1);
        gc_matmul(c1, a, b, 1, M, N, K, ta, tb, 0);
        omp_set_num_threads(2);
        gc_matmul(c2, a, b, 1, M, N, K, ta, tb, 0);
        expect_bits("gemm: 1 thread vs 2 threads", c2, c1, M * N);
        free(a), free(b), free(c1), free(c2);
    }
    if (!ran)
        printf("gemm: skipped (this CPU has no AVX-512, or GC_CPU_GEMM=blas: OpenBLAS runs the matmuls)\n");
    else
        printf("gemm: %d shapes x transposes x accumulate checked\n", ran);
}

int main(int argc, char **argv)
{
    static const kt_case cases[] = {
        {"forward", test_forward},         {"accumulate", test_accumulate},
        {"inplace", test_inplace},         {"determinism", test_determinism},
        {"adamw", test_adamw},             {"fill_poison", test_fill_poison},
        {"nan", test_nan},                 {"errors", test_errors},
        {"gemm", test_gemm},
    };
    kt_seed(4321);
    return kt_main(argc, argv, cases, (int)(sizeof cases / sizeof cases[0]));
}
