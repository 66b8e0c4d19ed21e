/* test_kernels_grad.c — every backward kernel against central finite
 * differences of a random linear functional of its forward, in double
 * precision (kernels_cpu.c compiled a second time with -DGC_REAL=double).
 *
 * For a forward y = f(x) and random weights W, L(x) = <W, f(x)>; the backward
 * kernels given dy = W must return dL/dx. Each backward runs twice: with acc
 * clear into a NaN-filled buffer (it must overwrite, never read), and with
 * acc set into a buffer of random values (it must add). Shapes include odd
 * sizes (vector tails) and sizes large enough to take the parallel paths.
 *
 *   test_kernels_grad [case]     (all cases without an argument)
 */
#include "kt.h"

_Static_assert(sizeof(gc_real) == sizeof(double), "build this test with -DGC_REAL=double");

/* Central differences use step H; a coordinate passes when
 * |fd - g| <= RTOL * (|g| + 0.01 * max|g|) + ATOL. */
#define H 1e-4
#define RTOL 1e-6
#define ATOL 1e-10

typedef double (*loss_fn)(void *ctx);

/* <w, y> over n elements, skipping entries where y is infinite (masked). */
static double dot_finite(const double *w, const double *y, long n)
{
    double s = 0.0;
    for (long i = 0; i < n; i++)
        if (isfinite(y[i]))
            s += w[i] * y[i];
    return s;
}

/* Checks g = dL/dx on `ns` random coordinates of x[0..n) (all of them when
 * n <= ns) by central differences of L. */
static void check_fd(const char *what, loss_fn L, void *ctx, double *x, const double *g, long n,
                     long ns)
{
    double gmax = 0.0;
    for (long i = 0; i < n; i++)
        gmax = fmax(gmax, fabs(g[i]));
    double worst = 0.0;
    long count = n <= ns ? n : ns, bad = 0;
    for (long s = 0; s < count; s++) {
        long j = n <= ns ? s : kt_randint(n);
        double x0 = x[j];
        x[j] = x0 + H;
        double lp = L(ctx);
        x[j] = x0 - H;
        double lm = L(ctx);
        x[j] = x0;
        double fd = (lp - lm) / (2 * H);
        double tol = RTOL * (fabs(g[j]) + 0.01 * gmax) + ATOL;
        double err = fabs(fd - g[j]);
        worst = fmax(worst, err / tol);
        if (!(err <= tol) && bad++ < 3)
            KT_FAIL("%s: d/dx[%ld]: analytic %.12g, finite difference %.12g", what, j, g[j], fd);
    }
    if (worst > 0.1)
        printf("  %s: worst error %.3f of tolerance\n", what, worst);
}

/* Runs a backward twice into out[0..n): acc clear over NaNs, and acc set
 * over random values (then subtracted). Checks the two agree to rounding and
 * leaves the acc-clear result in out. `run(ctx, out, acc)` is the backward. */
static void run_both_acc(const char *what, void (*run)(void *ctx, double *out, int acc),
                         void *ctx, double *out, long n)
{
    double *init = kt_rand(n, -1, 1), *acc = kt_dup(init, n);
    for (long i = 0; i < n; i++)
        out[i] = NAN;
    run(ctx, out, 0);
    run(ctx, acc, 1);
    long bad = 0;
    for (long i = 0; i < n; i++) {
        double d = acc[i] - init[i];
        if (!(fabs(d - out[i]) <= 1e-12 * (1 + fabs(out[i]))) && bad++ < 3)
            KT_FAIL("%s: acc mode: element %ld is %.17g + %.17g, want + %.17g", what, i, init[i],
                    d, out[i]);
    }
    free(init);
    free(acc);
}

/* ------------------------------------------------------------------ matmul */

typedef struct {
    double *a, *b, *w, *c;
    long batch, M, N, K;
    int ta, tb;
    double *dc; /* W, the upstream gradient */
} MatmulCtx;

static double matmul_loss(void *p)
{
    MatmulCtx *m = p;
    gc_matmul(m->c, m->a, m->b, m->batch, m->M, m->N, m->K, m->ta, m->tb, 0);
    return dot_finite(m->w, m->c, m->batch * m->M * m->N);
}

/* da: ta=0: da = dc @ op(b)^T; ta=1: da = op(b) @ dc^T (stored KxM). */
static void matmul_da(void *p, double *da, int acc)
{
    MatmulCtx *m = p;
    if (!m->ta)
        gc_matmul(da, m->w, m->b, m->batch, m->M, m->K, m->N, 0, !m->tb, acc);
    else
        gc_matmul(da, m->b, m->w, m->batch, m->K, m->M, m->N, m->tb, 1, acc);
}

/* db: tb=0: db = op(a)^T @ dc; tb=1: db = dc^T @ op(a) (stored NxK). */
static void matmul_db(void *p, double *db, int acc)
{
    MatmulCtx *m = p;
    if (!m->tb)
        gc_matmul(db, m->a, m->w, m->batch, m->K, m->N, m->M, !m->ta, 0, acc);
    else
        gc_matmul(db, m->w, m->a, m->batch, m->N, m->K, m->M, 1, m->ta, acc);
}

static void matmul_case(long batch, long M, long N, long K, int ta, int tb, long ns)
{
    char what[96];
    snprintf(what, sizeof what, "matmul batch=%ld M=%ld N=%ld K=%ld ta=%d tb=%d", batch, M, N, K,
             ta, tb);
    long na = batch * M * K, nb = batch * K * N, nc = batch * M * N;
    MatmulCtx m = {kt_rand(na, -1, 1), kt_rand(nb, -1, 1), kt_rand(nc, -1, 1),
                   kt_alloc(nc * sizeof(double)), batch, M, N, K, ta, tb, NULL};
    double *da = kt_alloc(na * sizeof(double)), *db = kt_alloc(nb * sizeof(double));
    run_both_acc(what, matmul_da, &m, da, na);
    run_both_acc(what, matmul_db, &m, db, nb);
    check_fd(what, matmul_loss, &m, m.a, da, na, ns);
    check_fd(what, matmul_loss, &m, m.b, db, nb, ns);
    free(m.a), free(m.b), free(m.w), free(m.c), free(da), free(db);
}

static void test_matmul(void)
{
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            matmul_case(1, 5, 7, 3, ta, tb, 1000);
            matmul_case(3, 4, 6, 9, ta, tb, 1000);
            matmul_case(1, 130, 97, 90, ta, tb, 40); /* split across threads */
            matmul_case(1, 33, 150, 250, ta, tb, 40);
        }
    matmul_case(48, 16, 16, 16, 0, 1, 60); /* attention-like: one item per thread */
    matmul_case(5, 70, 60, 50, 1, 0, 60);
}

/* ------------------------------------------------------------------ reduce_rows */

typedef struct {
    double *x, *bias, *w, *y;
    long rows, cols;
} BiasCtx;

/* y = x + bias broadcast over rows; L = <w, y>. */
static double bias_loss(void *p)
{
    BiasCtx *b = p;
    for (long r = 0; r < b->rows; r++)
        for (long c = 0; c < b->cols; c++)
            b->y[r * b->cols + c] = b->x[r * b->cols + c] + b->bias[c];
    return dot_finite(b->w, b->y, b->rows * b->cols);
}

static void bias_grad(void *p, double *dbias, int acc)
{
    BiasCtx *b = p;
    gc_reduce_rows(dbias, b->w, b->rows, b->cols, acc);
}

static void test_reduce_rows(void)
{
    long shapes[][2] = {{1, 1}, {7, 5}, {3, 130}, {300, 201}};
    for (int s = 0; s < 4; s++) {
        long rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
        BiasCtx b = {kt_rand(n, -1, 1), kt_rand(cols, -1, 1), kt_rand(n, -1, 1),
                     kt_alloc(n * sizeof(double)), rows, cols};
        double *g = kt_alloc(cols * sizeof(double));
        run_both_acc("reduce_rows", bias_grad, &b, g, cols);
        check_fd("reduce_rows", bias_loss, &b, b.bias, g, cols, 60);
        free(b.x), free(b.bias), free(b.w), free(b.y), free(g);
    }
}

/* ------------------------------------------------------------------ embedding */

typedef struct {
    double *table, *w, *out;
    int32_t *idx;
    long n, rows, C;
} EmbCtx;

static double emb_loss(void *p)
{
    EmbCtx *e = p;
    gc_embedding_fwd(e->out, e->idx, e->table, e->n, e->rows, e->C);
    return dot_finite(e->w, e->out, e->n * e->C);
}

static void emb_grad(void *p, double *dtable, int acc)
{
    EmbCtx *e = p;
    gc_embedding_bwd(dtable, e->w, e->idx, e->n, e->rows, e->C, acc);
}

static void test_embedding(void)
{
    long shapes[][3] = {{20, 13, 7}, {256, 40, 300}, {5, 1000, 3}}; /* n, rows, C */
    for (int s = 0; s < 3; s++) {
        long n = shapes[s][0], rows = shapes[s][1], C = shapes[s][2];
        EmbCtx e = {kt_rand(rows * C, -1, 1), kt_rand(n * C, -1, 1),
                    kt_alloc(n * C * sizeof(double)), kt_randidx(n, rows), n, rows, C};
        e.idx[n - 1] = e.idx[0]; /* at least one repeated index */
        double *g = kt_alloc(rows * C * sizeof(double));
        run_both_acc("embedding", emb_grad, &e, g, rows * C);
        check_fd("embedding", emb_loss, &e, e.table, g, rows * C, 150);
        for (long i = 0; i < n; i++) { /* and the rows that are used */
            long j = (long)e.idx[kt_randint(n)] * C + kt_randint(C);
            check_fd("embedding (used row)", emb_loss, &e, e.table + j, g + j, 1, 1);
        }
        free(e.table), free(e.w), free(e.out), free(e.idx), free(g);
    }
}

/* ------------------------------------------------------------------ layernorm */

typedef struct {
    double *x, *w, *b, *W, *out, *mean, *rstd;
    long N, C;
    int which; /* backward output under test: 0 dx, 1 dw, 2 db */
} LnCtx;

static const float LN_EPS = 1e-5f;

static double ln_loss(void *p)
{
    LnCtx *l = p;
    gc_layernorm_fwd(l->out, l->mean, l->rstd, l->x, l->w, l->b, l->N, l->C, LN_EPS);
    return dot_finite(l->W, l->out, l->N * l->C);
}

/* One of dx/dw/db alone (the other two NULL). */
static void ln_grad(void *p, double *g, int acc)
{
    LnCtx *l = p;
    ln_loss(l); /* mean, rstd for the current x */
    double *d[3] = {NULL, NULL, NULL};
    d[l->which] = g;
    gc_layernorm_bwd(d[0], d[1], d[2], l->W, l->x, l->w, l->mean, l->rstd, l->N, l->C,
                     acc ? 1 << l->which : 0);
}

static void test_layernorm(void)
{
    long shapes[][2] = {{1, 1}, {5, 7}, {3, 130}, {64, 768}};
    for (int s = 0; s < 4; s++) {
        long N = shapes[s][0], C = shapes[s][1], n = N * C;
        LnCtx l = {kt_rand(n, -2, 2), kt_rand(C, 0.5, 1.5), kt_rand(C, -1, 1), kt_rand(n, -1, 1),
                   kt_alloc(n * sizeof(double)), kt_alloc(N * sizeof(double)),
                   kt_alloc(N * sizeof(double)), N, C, 0};
        for (long i = 0; i < C; i++) /* a non-zero mean, to test the centring */
            l.x[i] += 3.0;
        double *dx = kt_alloc(n * sizeof(double)), *dw = kt_alloc(C * sizeof(double)),
               *db = kt_alloc(C * sizeof(double));
        double *g[3] = {dx, dw, db}, *in[3] = {l.x, l.w, l.b};
        long len[3] = {n, C, C};
        static const char *names[3] = {"layernorm dx", "layernorm dw", "layernorm db"};
        for (int k = 0; k < 3; k++) {
            l.which = k;
            run_both_acc(names[k], ln_grad, &l, g[k], len[k]);
            check_fd(names[k], ln_loss, &l, in[k], g[k], len[k], 60);
        }
        /* all three in one call give the same bits as one at a time */
        double *ax = kt_alloc(n * sizeof(double)), *aw = kt_alloc(C * sizeof(double)),
               *ab = kt_alloc(C * sizeof(double));
        ln_loss(&l);
        gc_layernorm_bwd(ax, aw, ab, l.W, l.x, l.w, l.mean, l.rstd, N, C, 0);
        KT_CHECK(kt_same_bits(ax, dx, n) && kt_same_bits(aw, dw, C) && kt_same_bits(ab, db, C),
                 "layernorm_bwd: dx/dw/db together differ from one at a time");
        free(ax), free(aw), free(ab), free(dx), free(dw), free(db);
        free(l.x), free(l.w), free(l.b), free(l.W), free(l.out), free(l.mean), free(l.rstd);
    }
}

/* ------------------------------------------------------------------ permute */

typedef struct {
    double *in, *w, *out;
    int rank;
    long shape[8], oshape[8];
    int perm[8], inv[8];
    long n;
} PermCtx;

static double perm_loss(void *p)
{
    PermCtx *q = p;
    gc_permute(q->out, q->in, q->rank, q->shape, q->perm, 0);
    return dot_finite(q->w, q->out, q->n);
}

/* The gradient: the inverse permutation applied to W (shaped like out). */
static void perm_grad(void *p, double *din, int acc)
{
    PermCtx *q = p;
    gc_permute(din, q->w, q->rank, q->oshape, q->inv, acc);
}

static void permute_case(int rank, const long *shape, const int *perm)
{
    PermCtx q = {0};
    q.rank = rank;
    q.n = 1;
    for (int i = 0; i < rank; i++) {
        q.shape[i] = shape[i];
        q.perm[i] = perm[i];
        q.oshape[i] = shape[perm[i]];
        q.inv[perm[i]] = i;
        q.n *= shape[i];
    }
    q.in = kt_rand(q.n, -1, 1);
    q.w = kt_rand(q.n, -1, 1);
    q.out = kt_alloc(q.n * sizeof(double));
    double *g = kt_alloc(q.n * sizeof(double));
    run_both_acc("permute", perm_grad, &q, g, q.n);
    check_fd("permute", perm_loss, &q, q.in, g, q.n, 80);
    free(q.in), free(q.w), free(q.out), free(g);
}

static void test_permute(void)
{
    static const long s1[] = {7}, s2[] = {5, 9}, s3[] = {3, 4, 5}, s4[] = {2, 3, 4, 5},
                      s5[] = {2, 16, 3, 4, 16}, s6[] = {1, 3, 1, 4}, big[] = {2, 64, 3, 4, 64};
    static const int p1[] = {0}, p2[] = {1, 0}, p3a[] = {2, 0, 1}, p3b[] = {0, 2, 1},
                     p4a[] = {0, 2, 1, 3}, p4b[] = {3, 2, 1, 0}, p4c[] = {0, 1, 2, 3},
                     p5[] = {2, 0, 3, 1, 4}, p6[] = {3, 0, 2, 1};
    permute_case(1, s1, p1);
    permute_case(2, s2, p2);
    permute_case(3, s3, p3a);
    permute_case(3, s3, p3b);
    permute_case(4, s4, p4a);
    permute_case(4, s4, p4b);
    permute_case(4, s4, p4c);
    permute_case(5, s5, p5);
    permute_case(4, s6, p6);
    permute_case(5, big, p5); /* (B,T,3,NH,hs) -> (3,B,NH,T,hs), parallel */
}

/* ------------------------------------------------------------------ softmax */

typedef struct {
    double *x, *w, *y;
    long rows, cols;
} SmCtx;

static double sm_loss(void *p)
{
    SmCtx *s = p;
    gc_softmax_fwd(s->y, s->x, s->rows, s->cols);
    return dot_finite(s->w, s->y, s->rows * s->cols);
}

static void sm_grad(void *p, double *dx, int acc)
{
    SmCtx *s = p;
    sm_loss(s);
    gc_softmax_bwd(dx, s->w, s->y, s->rows, s->cols, acc);
}

static void test_softmax(void)
{
    long shapes[][2] = {{1, 1}, {4, 7}, {3, 130}, {200, 200}};
    for (int k = 0; k < 4; k++) {
        long rows = shapes[k][0], cols = shapes[k][1], n = rows * cols;
        SmCtx s = {kt_rand(n, -3, 3), kt_rand(n, -1, 1), kt_alloc(n * sizeof(double)), rows, cols};
        for (long r = 0; r < rows && cols > 2; r++) /* masked entries: gradient 0 */
            s.x[r * cols + kt_randint(cols - 1) + 1] = -INFINITY;
        double *g = kt_alloc(n * sizeof(double));
        run_both_acc("softmax", sm_grad, &s, g, n);
        check_fd("softmax", sm_loss, &s, s.x, g, n, 100);
        for (long i = 0; i < n; i++)
            if (isinf(s.x[i]))
                KT_CHECK(g[i] == 0.0, "softmax: gradient at a -inf input is %g", g[i]);
        free(s.x), free(s.w), free(s.y), free(g);
    }
}

/* ------------------------------------------------------------------ causal mask */

typedef struct {
    double *x, *w, *y;
    long batch, T;
} CmCtx;

static double cm_loss(void *p)
{
    CmCtx *c = p;
    gc_causal_mask_fwd(c->y, c->x, c->batch, c->T);
    return dot_finite(c->w, c->y, c->batch * c->T * c->T);
}

static void cm_grad(void *p, double *dx, int acc)
{
    CmCtx *c = p;
    gc_causal_mask_bwd(dx, c->w, c->batch, c->T, acc);
}

static void test_causal_mask(void)
{
    long shapes[][2] = {{1, 1}, {2, 5}, {48, 33}};
    for (int k = 0; k < 3; k++) {
        long batch = shapes[k][0], T = shapes[k][1], n = batch * T * T;
        CmCtx c = {kt_rand(n, -1, 1), kt_rand(n, -1, 1), kt_alloc(n * sizeof(double)), batch, T};
        double *g = kt_alloc(n * sizeof(double));
        run_both_acc("causal_mask", cm_grad, &c, g, n);
        check_fd("causal_mask", cm_loss, &c, c.x, g, n, 200);
        free(c.x), free(c.w), free(c.y), free(g);
    }
}

/* ------------------------------------------------------------------ cross-entropy */

typedef struct {
    double *logits, dloss, loss;
    int32_t *targets;
    long n, Vp, V;
} CeCtx;

static double ce_loss(void *p)
{
    CeCtx *c = p;
    gc_crossentropy_fwd(&c->loss, c->logits, c->targets, c->n, c->Vp, c->V);
    return c->dloss * c->loss;
}

static void ce_grad(void *p, double *dlogits, int acc)
{
    CeCtx *c = p;
    gc_crossentropy_bwd(dlogits, &c->dloss, c->logits, c->targets, c->n, c->Vp, c->V, acc);
}

static void test_crossentropy(void)
{
    long shapes[][3] = {{1, 1, 1}, {6, 11, 16}, {3, 130, 130}, {64, 1000, 1024}}; /* n, V, Vp */
    for (int k = 0; k < 4; k++) {
        long n = shapes[k][0], V = shapes[k][1], Vp = shapes[k][2];
        CeCtx c = {kt_rand(n * Vp, -3, 3), 0.7, 0, kt_randidx(n, V), n, Vp, V};
        c.targets[n - 1] = (int32_t)(V - 1); /* the last valid column */
        double *g = kt_alloc(n * Vp * sizeof(double));
        run_both_acc("cross_entropy", ce_grad, &c, g, n * Vp);
        check_fd("cross_entropy", ce_loss, &c, c.logits, g, n * Vp, 150);
        for (long r = 0; r < n; r++)
            for (long j = V; j < Vp; j++)
                KT_CHECK(g[r * Vp + j] == 0.0, "cross_entropy: padding column %ld has gradient %g",
                         j, g[r * Vp + j]);
        /* the loss itself against a direct evaluation */
        double ref = 0.0;
        for (long r = 0; r < n; r++) {
            double m = -INFINITY, s = 0.0;
            for (long j = 0; j < V; j++)
                m = fmax(m, c.logits[r * Vp + j]);
            for (long j = 0; j < V; j++)
                s += exp(c.logits[r * Vp + j] - m);
            ref += log(s) + m - c.logits[r * Vp + c.targets[r]];
        }
        ce_loss(&c);
        KT_CHECK(fabs(c.loss - ref / n) <= 1e-12 * (1 + fabs(c.loss)), "cross_entropy: loss %.17g, want %.17g",
                 c.loss, ref / n);
        free(c.logits), free(c.targets), free(g);
    }
}

/* ------------------------------------------------------------------ attention */

/* x laid out as GPT-2's qkv (B, T, 3, NH, hs); y as (B, T, NH, hs) when
 * heads_out, else (B, NH, T, hs): the geometry fuse_attention.c emits. */
typedef struct {
    double *x, *w, *y, *lse;
    long geom[12];
    double scale;
} AttCtx;

static void att_geom(long *g, long B, long NH, long T, long hs, int heads_out)
{
    long C = NH * hs;
    long v[12] = {B, NH, T, hs, T * 3 * C, hs, 3 * C, C, 2 * C, 0, 0, 0};
    if (heads_out)
        v[9] = T * C, v[10] = hs, v[11] = C;
    else
        v[9] = NH * T * hs, v[10] = T * hs, v[11] = hs;
    memcpy(g, v, sizeof v);
}

static double att_loss(void *p)
{
    AttCtx *a = p;
    gc_attention_fwd(a->y, a->lse, a->x, a->geom, (float)a->scale);
    return dot_finite(a->w, a->y, a->geom[0] * a->geom[1] * a->geom[2] * a->geom[3]);
}

static void att_grad(void *p, double *dx, int acc)
{
    AttCtx *a = p;
    gc_attention_fwd(a->y, a->lse, a->x, a->geom, (float)a->scale);
    gc_attention_bwd(dx, a->w, a->x, a->y, a->lse, a->geom, (float)a->scale, acc);
}

/* the forward against softmax(causal_mask(scale q k^T)) v in plain loops */
static void att_reference(const AttCtx *a)
{
    const long *g = a->geom;
    long B = g[0], NH = g[1], T = g[2], hs = g[3];
    double *s = kt_alloc((size_t)T * sizeof(double));
    int bad = 0;
    for (long b = 0; b < B && bad < 3; b++)
        for (long h = 0; h < NH; h++)
            for (long i = 0; i < T; i++) {
                const double *q = a->x + b * g[4] + h * g[5] + i * g[6];
                double mx = -INFINITY, sum = 0;
                for (long j = 0; j <= i; j++) {
                    const double *k = a->x + b * g[4] + h * g[5] + j * g[6] + g[7];
                    s[j] = 0;
                    for (long d = 0; d < hs; d++)
                        s[j] += q[d] * k[d];
                    s[j] *= (double)(float)a->scale;
                    mx = fmax(mx, s[j]);
                }
                for (long j = 0; j <= i; j++)
                    sum += s[j] = exp(s[j] - mx);
                const double *y = a->y + b * g[9] + h * g[10] + i * g[11];
                for (long d = 0; d < hs; d++) {
                    double o = 0;
                    for (long j = 0; j <= i; j++)
                        o += s[j] / sum * a->x[b * g[4] + h * g[5] + j * g[6] + g[8] + d];
                    if (!(fabs(o - y[d]) <= 1e-12) && bad++ < 3)
                        KT_FAIL("attention forward b=%ld h=%ld t=%ld d=%ld: %.15g, want %.15g",
                             b, h, i, d, y[d], o);
                }
                if (!(fabs(a->lse[(b * NH + h) * T + i] - (mx + log(sum))) <= 1e-12) && bad++ < 3)
                    KT_FAIL("attention lse t=%ld", i);
            }
    free(s);
}

static void att_case(long B, long NH, long T, long hs, int heads_out, long ns)
{
    char what[96];
    snprintf(what, sizeof what, "attention B=%ld NH=%ld T=%ld hs=%ld heads_out=%d", B, NH, T, hs, heads_out);
    AttCtx a;
    att_geom(a.geom, B, NH, T, hs, heads_out);
    long nx = B * T * 3 * NH * hs, ny = B * NH * T * hs;
    a.x = kt_rand(nx, -1.5, 1.5);
    a.w = kt_rand(ny, -1, 1);
    a.y = kt_alloc((size_t)ny * sizeof(double));
    a.lse = kt_alloc((size_t)(B * NH * T) * sizeof(double));
    a.scale = 1 / sqrt((double)hs);
    att_loss(&a);
    att_reference(&a);
    double *dx = kt_alloc((size_t)nx * sizeof(double));
    run_both_acc(what, att_grad, &a, dx, nx);
    check_fd(what, att_loss, &a, a.x, dx, nx, ns);
    free(a.x), free(a.w), free(a.y), free(a.lse), free(dx);
}

static void test_attention(void)
{
    att_case(1, 1, 1, 1, 1, 100);
    att_case(2, 3, 5, 4, 0, 400);
    att_case(1, 2, 37, 12, 1, 300);     /* T, hs: no multiple of a tile */
    att_case(2, 2, 97, 12, 1, 200);
    att_case(1, 1, 130, 64, 0, 120);    /* two row blocks (ABR = 128) */
    att_case(1, 1, 600, 4, 1, 80);      /* blocks of two key chunks (AKC = 512): D from both */
}

/* ------------------------------------------------------------------ classifier */

typedef struct {
    double *x, *w, *dx, *dw, *chunk, *rowloss, loss;
    int32_t *t;
    long N, C, Vp, V, R;
} ClsCtx;

static double cls_loss(void *p)
{
    ClsCtx *c = p;
    double *dx = kt_alloc((size_t)(c->N * c->C) * sizeof(double)), *dw = kt_alloc((size_t)(c->Vp * c->C) * sizeof(double));
    gc_classifier(&c->loss, dx, dw, c->chunk, c->rowloss, c->x, c->w, c->t, c->N, c->C, c->Vp, c->V, c->R, 1.0f, 0);
    free(dx), free(dw);
    return c->loss;
}

static void cls_dx(void *p, double *dx, int acc)
{
    ClsCtx *c = p;
    gc_classifier(&c->loss, dx, c->dw, c->chunk, c->rowloss, c->x, c->w, c->t, c->N, c->C, c->Vp, c->V, c->R, 1.0f,
                  acc << 1);
}

static void cls_dw(void *p, double *dw, int acc)
{
    ClsCtx *c = p;
    gc_classifier(&c->loss, c->dx, dw, c->chunk, c->rowloss, c->x, c->w, c->t, c->N, c->C, c->Vp, c->V, c->R, 1.0f,
                  acc << 2);
}

static void cls_case(long N, long C, long Vp, long V, long R, long ns)
{
    char what[96];
    snprintf(what, sizeof what, "classifier N=%ld C=%ld Vp=%ld V=%ld R=%ld", N, C, Vp, V, R);
    ClsCtx c = {kt_rand(N * C, -1, 1), kt_rand(Vp * C, -1, 1), kt_alloc((size_t)(N * C) * sizeof(double)),
                kt_alloc((size_t)(Vp * C) * sizeof(double)), kt_alloc((size_t)(R * Vp) * sizeof(double)),
                kt_alloc((size_t)(2 * N) * sizeof(double)), 0, kt_randidx(N, V), N, C, Vp, V, R};
    /* the loss against logits and cross-entropy done the plain way */
    double *logits = kt_alloc((size_t)(N * Vp) * sizeof(double)), want = 0;
    gc_matmul(logits, c.x, c.w, 1, N, Vp, C, 0, 1, 0);
    for (long r = 0; r < N; r++) {
        double m = -INFINITY, s = 0;
        for (long v = 0; v < V; v++)
            m = fmax(m, logits[r * Vp + v]);
        for (long v = 0; v < V; v++)
            s += exp(logits[r * Vp + v] - m);
        want += m + log(s) - logits[r * Vp + c.t[r]];
    }
    want /= (double)N;
    double got = cls_loss(&c);
    KT_CHECK(fabs(got - want) <= 1e-12 * fabs(want), "%s: loss %.15g, want %.15g", what, got, want);
    double *dx = kt_alloc((size_t)(N * C) * sizeof(double)), *dw = kt_alloc((size_t)(Vp * C) * sizeof(double));
    run_both_acc(what, cls_dx, &c, dx, N * C);
    run_both_acc(what, cls_dw, &c, dw, Vp * C);
    check_fd(what, cls_loss, &c, c.x, dx, N * C, ns);
    check_fd(what, cls_loss, &c, c.w, dw, Vp * C, ns);
    free(c.x), free(c.w), free(c.dx), free(c.dw), free(c.chunk), free(c.rowloss), free(c.t);
    free(logits), free(dx), free(dw);
}

static void test_classifier(void)
{
    cls_case(1, 1, 1, 1, 1, 10);
    cls_case(37, 12, 50, 45, 16, 200);     /* 3 chunks, the last of 5 rows; padded vocabulary */
    cls_case(64, 20, 130, 130, 64, 150);   /* one chunk */
    cls_case(100, 8, 33, 30, 7, 150);
}

/* ------------------------------------------------------------------ issue 22: rmsnorm, rope, shapes */

typedef struct {
    double *x, *w, *W, *out, *rstd;
    long N, C;
    int which; /* 0 dx, 1 dw */
} RmsCtx;

static double rms_loss(void *p)
{
    RmsCtx *r = p;
    gc_rmsnorm_fwd(r->out, r->rstd, r->x, r->w, r->N, r->C, 1e-5f);
    return dot_finite(r->W, r->out, r->N * r->C);
}

static void rms_grad(void *p, double *g, int acc)
{
    RmsCtx *r = p;
    rms_loss(r);
    gc_rmsnorm_bwd(r->which == 0 ? g : NULL, r->which == 1 ? g : NULL, r->W, r->x, r->w, r->rstd, r->N, r->C,
                   acc ? 1 << r->which : 0);
}

static void test_rmsnorm(void)
{
    long shapes[][2] = {{1, 1}, {5, 7}, {3, 130}, {64, 200}};
    for (int s = 0; s < 4; s++) {
        long N = shapes[s][0], C = shapes[s][1], n = N * C;
        RmsCtx r = {kt_rand(n, -2, 2), kt_rand(C, 0.5, 1.5), kt_rand(n, -1, 1), kt_alloc(n * sizeof(double)),
                    kt_alloc(N * sizeof(double)), N, C, 0};
        double *dx = kt_alloc(n * sizeof(double)), *dw = kt_alloc(C * sizeof(double));
        /* the forward against its formula */
        rms_loss(&r);
        for (long i = 0; i < N; i++) {
            double ss = 0;
            for (long j = 0; j < C; j++)
                ss += r.x[i * C + j] * r.x[i * C + j];
            for (long j = 0; j < C; j++) {
                double want = r.x[i * C + j] / sqrt(ss / (double)C + (double)1e-5f) * r.w[j];
                KT_CHECK(fabs(r.out[i * C + j] - want) <= 1e-12 * (1 + fabs(want)), "rmsnorm fwd [%ld,%ld]", i, j);
            }
        }
        r.which = 0;
        run_both_acc("rmsnorm dx", rms_grad, &r, dx, n);
        check_fd("rmsnorm dx", rms_loss, &r, r.x, dx, n, 60);
        r.which = 1;
        run_both_acc("rmsnorm dw", rms_grad, &r, dw, C);
        check_fd("rmsnorm dw", rms_loss, &r, r.w, dw, C, 60);
        free(dx), free(dw), free(r.x), free(r.w), free(r.W), free(r.out), free(r.rstd);
    }
}

typedef struct {
    double *x, *W, *y;
    long batch, T, hs;
} RopeCtx;

static double rope_loss(void *p)
{
    RopeCtx *r = p;
    gc_rope(r->y, r->x, r->batch, r->T, r->hs, 500000.0, 0, 0);
    return dot_finite(r->W, r->y, r->batch * r->T * r->hs);
}

static void rope_grad(void *p, double *g, int acc)
{
    RopeCtx *r = p;
    gc_rope(g, r->W, r->batch, r->T, r->hs, 500000.0, 1, acc);
}

static void test_rope(void)
{
    long shapes[][3] = {{1, 1, 2}, {3, 13, 10}, {2, 64, 64}};
    for (int s = 0; s < 3; s++) {
        long B = shapes[s][0], T = shapes[s][1], hs = shapes[s][2], n = B * T * hs, h = hs / 2;
        RopeCtx r = {kt_rand(n, -1, 1), kt_rand(n, -1, 1), kt_alloc(n * sizeof(double)), B, T, hs};
        /* the forward against rotate_half: y = x cos + [-x2, x1] sin, angle t theta^(-2i/hs) */
        rope_loss(&r);
        for (long e = 0; e < n; e++) {
            long t = (e / hs) % T, j = e % hs, i = j % h;
            double a = (double)t / pow(500000.0, 2.0 * (double)i / (double)hs);
            double rot = j < h ? -r.x[e + h] : r.x[e - h];
            double want = r.x[e] * cos(a) + rot * sin(a);
            KT_CHECK(fabs(r.y[e] - want) <= 1e-12, "rope fwd [%ld]: %.17g, want %.17g", e, r.y[e], want);
        }
        double *dx = kt_alloc(n * sizeof(double));
        run_both_acc("rope dx", rope_grad, &r, dx, n);
        check_fd("rope dx", rope_loss, &r, r.x, dx, n, 80);
        free(dx), free(r.x), free(r.W), free(r.y);
    }
}

/* narrow, repeat, mean: (outer, d, inner) shapes */
typedef struct {
    double *x, *W, *y;
    long outer, d, inner, a, b; /* narrow: [a, a+b) of d; repeat: b copies */
    int kind;                   /* 0 narrow, 1 repeat, 2 mean */
} ShapeCtx;

static long shape_out(const ShapeCtx *c)
{
    return c->kind == 0 ? c->outer * c->b * c->inner : c->kind == 1 ? c->outer * c->d * c->b * c->inner
                                                                     : c->outer * c->d;
}

static double shape_loss(void *p)
{
    ShapeCtx *c = p;
    if (c->kind == 0)
        gc_narrow(c->y, c->x, c->outer, c->d * c->inner, c->a * c->inner, c->b * c->inner, 0);
    else if (c->kind == 1)
        gc_repeat(c->y, c->x, c->outer, c->d, c->b, c->inner, 0);
    else
        gc_mean_rows(c->y, c->x, c->outer * c->d, c->inner, 0);
    return dot_finite(c->W, c->y, shape_out(c));
}

static void shape_grad(void *p, double *g, int acc)
{
    ShapeCtx *c = p;
    if (c->kind == 0)
        gc_narrow_bwd(g, c->W, c->outer, c->d * c->inner, c->a * c->inner, c->b * c->inner, acc);
    else if (c->kind == 1)
        gc_repeat_bwd(g, c->W, c->outer, c->d, c->b, c->inner, acc);
    else
        gc_mean_bwd(g, c->W, c->outer * c->d, c->inner, acc);
}

static void test_shapes(void)
{
    static const char *names[3] = {"narrow", "repeat", "mean"};
    long shapes[][5] = {{1, 1, 1, 0, 1}, {3, 7, 5, 2, 4}, {2, 8, 130, 0, 3}, {4, 6, 1, 5, 1}};
    for (int kind = 0; kind < 3; kind++)
        for (int s = 0; s < 4; s++) {
            ShapeCtx c = {NULL, NULL, NULL, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], shapes[s][4],
                          kind};
            long n = c.outer * c.d * c.inner, m = shape_out(&c);
            c.x = kt_rand(n, -1, 1), c.W = kt_rand(m, -1, 1), c.y = kt_alloc((size_t)m * sizeof(double));
            shape_loss(&c);   /* the forward against its index formula */
            for (long e = 0; e < m; e++) {
                double want;
                if (kind == 0) {
                    long o = e / (c.b * c.inner), r = e % (c.b * c.inner);
                    want = c.x[o * c.d * c.inner + c.a * c.inner + r];
                } else if (kind == 1) {
                    long i = e % c.inner, J = (e / c.inner) % (c.d * c.b), o = e / (c.inner * c.d * c.b);
                    want = c.x[(o * c.d + J / c.b) * c.inner + i];
                } else {
                    want = 0;
                    for (long j = 0; j < c.inner; j++)
                        want += c.x[e * c.inner + j] / (double)c.inner;
                }
                KT_CHECK(fabs(c.y[e] - want) <= 1e-14 * (1 + fabs(want)), "%s fwd [%ld]", names[kind], e);
            }
            double *g = kt_alloc((size_t)n * sizeof(double));
            run_both_acc(names[kind], shape_grad, &c, g, n);
            check_fd(names[kind], shape_loss, &c, c.x, g, n, 60);
            free(g), free(c.x), free(c.W), free(c.y);
        }
    /* concat: rows of a then b; its backward is narrow (above) */
    long outer = 3, na = 4, nb = 6;
    double *a = kt_rand(outer * na, -1, 1), *b = kt_rand(outer * nb, -1, 1), *y = kt_alloc(outer * (na + nb) * sizeof(double));
    gc_concat(y, a, b, outer, na, nb, 0);
    for (long o = 0; o < outer; o++)
        for (long j = 0; j < na + nb; j++)
            KT_CHECK(y[o * (na + nb) + j] == (j < na ? a[o * na + j] : b[o * nb + j - na]), "concat [%ld,%ld]", o, j);
    free(a), free(b), free(y);
}

/* attention_gqa: forward against softmax(causal(s q k^T)) v over repeated kv heads; dq, dk, dv by finite differences */
typedef struct {
    double *q, *k, *v, *W, *y, *lse;
    long B, NH, NKV, T, hs;
    int heads_out, which;   /* 0 dq, 1 dk, 2 dv */
} GqaCtx;

static const float GQA_SCALE = 0.37f;

static double gqa_loss(void *p)
{
    GqaCtx *a = p;
    gc_attention_gqa_fwd(a->y, a->lse, a->q, a->k, a->v, a->B, a->NH, a->NKV, a->T, a->hs, a->heads_out, GQA_SCALE);
    return dot_finite(a->W, a->y, a->B * a->NH * a->T * a->hs);
}

static void gqa_grad(void *p, double *g, int acc)
{
    GqaCtx *a = p;
    gqa_loss(a);
    long nq = a->B * a->NH * a->T * a->hs, nk = a->B * a->NKV * a->T * a->hs;
    double *d[3] = {kt_alloc((size_t)nq * sizeof(double)), kt_alloc((size_t)nk * sizeof(double)),
                    kt_alloc((size_t)nk * sizeof(double))};
    long len[3] = {nq, nk, nk};
    memcpy(d[a->which], g, (size_t)len[a->which] * sizeof(double));
    gc_attention_gqa_bwd(d[0], d[1], d[2], a->W, a->q, a->k, a->v, a->y, a->lse, a->B, a->NH, a->NKV, a->T, a->hs,
                         a->heads_out, GQA_SCALE, acc ? 1 << a->which : 0);
    memcpy(g, d[a->which], (size_t)len[a->which] * sizeof(double));
    free(d[0]), free(d[1]), free(d[2]);
}

static void gqa_case(long B, long NH, long NKV, long T, long hs, int heads_out)
{
    long nq = B * NH * T * hs, nk = B * NKV * T * hs;
    GqaCtx a = {kt_rand(nq, -1, 1), kt_rand(nk, -1, 1), kt_rand(nk, -1, 1), kt_rand(nq, -1, 1),
                kt_alloc((size_t)nq * sizeof(double)), kt_alloc((size_t)(B * NH * T) * sizeof(double)),
                B, NH, NKV, T, hs, heads_out, 0};
    gqa_loss(&a);
    long grp = NH / NKV;
    for (long b = 0; b < B; b++)   /* the forward, naively */
        for (long h = 0; h < NH; h++)
            for (long t = 0; t < T; t++) {
                const double *qr = a.q + ((b * NH + h) * T + t) * hs, *kb = a.k + (b * NKV + h / grp) * T * hs,
                             *vb = a.v + (b * NKV + h / grp) * T * hs;
                double sc[64], m = -INFINITY, s = 0;
                for (long j = 0; j <= t; j++) {
                    sc[j] = 0;
                    for (long i = 0; i < hs; i++)
                        sc[j] += qr[i] * kb[j * hs + i];
                    sc[j] *= (double)GQA_SCALE;
                    m = fmax(m, sc[j]);
                }
                for (long j = 0; j <= t; j++)
                    s += exp(sc[j] - m);
                for (long i = 0; i < hs; i++) {
                    double want = 0;
                    for (long j = 0; j <= t; j++)
                        want += exp(sc[j] - m) / s * vb[j * hs + i];
                    long yo = heads_out ? ((b * T + t) * NH + h) * hs : ((b * NH + h) * T + t) * hs;
                    KT_CHECK(fabs(a.y[yo + i] - want) <= 1e-12, "attention_gqa fwd [%ld,%ld,%ld,%ld]", b, h, t, i);
                }
            }
    static const char *names[3] = {"attention_gqa dq", "attention_gqa dk", "attention_gqa dv"};
    double *in[3] = {a.q, a.k, a.v};
    long len[3] = {nq, nk, nk};
    for (int w = 0; w < 3; w++) {
        a.which = w;
        double *g = kt_alloc((size_t)len[w] * sizeof(double));
        run_both_acc(names[w], gqa_grad, &a, g, len[w]);
        check_fd(names[w], gqa_loss, &a, in[w], g, len[w], 60);
        free(g);
    }
    free(a.q), free(a.k), free(a.v), free(a.W), free(a.y), free(a.lse);
}

static void test_attention_gqa(void)
{
    gqa_case(1, 1, 1, 1, 1, 0);
    gqa_case(2, 6, 2, 13, 10, 1);   /* 3 query heads per kv head, odd T and hs */
    gqa_case(1, 4, 4, 9, 8, 0);     /* no grouping */
    gqa_case(2, 4, 1, 16, 4, 1);    /* one kv head */
}

int main(int argc, char **argv)
{
    static const kt_case cases[] = {
        {"matmul", test_matmul},           {"reduce_rows", test_reduce_rows},
        {"embedding", test_embedding},     {"layernorm", test_layernorm},
        {"permute", test_permute},         {"softmax", test_softmax},
        {"causal_mask", test_causal_mask}, {"cross_entropy", test_crossentropy},
        {"attention", test_attention},     {"classifier", test_classifier},
        {"rmsnorm", test_rmsnorm},         {"rope", test_rope},
        {"shapes", test_shapes},           {"attention_gqa", test_attention_gqa},
    };
    kt_seed(1234);
    return kt_main(argc, argv, cases, (int)(sizeof cases / sizeof cases[0]));
}
