/* bench_kernels.c — times each CPU kernel at GPT-2 124M shapes (B=4, T=64 by
 * default) and adds them up per training step, so the non-matmul overhead of
 * the CPU target is known. Not a test.
 *
 *   bench_kernels [-t THREADS] [-B B] [-T T] [-r REPS]
 *
 * Run it on an idle machine, with the same environment as the benchmark
 * (here: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE). Each line gives the
 * best and median wall time of REPS calls on THREADS threads, the CPU time of
 * one call on one thread (the work, unaffected by other load), the calls per
 * step (12 layers), and best x calls. The step totals count each kernel as
 * often as the GPT-2 step calls it; elementwise kernels (generated code) are
 * not included.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gc_runtime.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float *buf(long n, float lo, float hi)
{
    float *p = malloc((size_t)n * sizeof *p);
    if (!p) {
        fprintf(stderr, "bench_kernels: out of memory\n");
        exit(1);
    }
    for (long i = 0; i < n; i++)
        p[i] = lo + (hi - lo) * (float)((i * 2654435761u) % 1000003) / 1000003.0f;
    return p;
}

static int reps = 10, threads = 2;
static double tot_matmul, tot_other, cpu_matmul, cpu_other;

/* Kernel call closure: what to time. */
typedef struct Call Call;
struct Call {
    void (*fn)(const Call *);
    float *o, *a, *b, *c, *d, *e;
    int32_t *idx;
    long batch, M, N, K, n;
    int ta, tb, acc;
};

static double thread_cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Times `call`: wall time on `threads` threads (one warm-up, then reps; best
 * and median), and the CPU time of the best of reps on one thread (immune to
 * other load on the machine: the work itself). Adds best x calls per step to
 * the totals. */
static void bench(const char *name, const char *shape, int per_step, int is_matmul,
                  const Call *call)
{
    double t[64], cpu1 = 1e30;
    int r = reps < 64 ? reps : 64;
    omp_set_num_threads(threads);
    call->fn(call);
    for (int i = 0; i < r; i++) {
        double t0 = now();
        call->fn(call);
        t[i] = now() - t0;
    }
    qsort(t, (size_t)r, sizeof t[0], cmp_double);
    omp_set_num_threads(1);
    for (int i = 0; i < (r + 1) / 2; i++) {
        double c0 = thread_cpu();
        call->fn(call);
        c0 = thread_cpu() - c0;
        cpu1 = c0 < cpu1 ? c0 : cpu1;
    }
    omp_set_num_threads(threads);
    *(is_matmul ? &tot_matmul : &tot_other) += t[0] * per_step;
    *(is_matmul ? &cpu_matmul : &cpu_other) += cpu1 * per_step;
    printf("%-22s %-28s %8.3f %8.3f %8.3f %5d %8.2f\n", name, shape, 1e3 * t[0], 1e3 * t[r / 2],
           1e3 * cpu1, per_step, 1e3 * t[0] * per_step);
}

static void f_matmul(const Call *c)
{
    gc_matmul(c->o, c->a, c->b, c->batch, c->M, c->N, c->K, c->ta, c->tb, c->acc);
}
static void f_reduce(const Call *c) { gc_reduce_rows(c->o, c->a, c->M, c->N, c->acc); }
static void f_emb_fwd(const Call *c) { gc_embedding_fwd(c->o, c->idx, c->a, c->M, c->N, c->K); }
static void f_emb_bwd(const Call *c)
{
    gc_embedding_bwd(c->o, c->a, c->idx, c->M, c->N, c->K, c->acc);
}
static void f_ln_fwd(const Call *c)
{
    gc_layernorm_fwd(c->o, c->d, c->e, c->a, c->b, c->c, c->M, c->N, 1e-5f);
}
static void f_ln_bwd(const Call *c)
{
    gc_layernorm_bwd(c->o, c->b + c->N, c->c + c->N, c->a, c->a, c->b, c->d, c->e, c->M, c->N,
                     c->acc);
}
static void f_perm(const Call *c)
{
    long shape[5] = {c->batch, c->M, 3, c->N, c->K};
    static const int p5[] = {2, 0, 3, 1, 4};
    long shape4[4] = {c->batch, c->N, c->M, c->K};
    static const int p4[] = {0, 2, 1, 3};
    if (c->ta)
        gc_permute(c->o, c->a, 5, shape, p5, 0);
    else
        gc_permute(c->o, c->a, 4, shape4, p4, 0);
}
static void f_mask_fwd(const Call *c) { gc_causal_mask_fwd(c->o, c->o, c->batch, c->M); }
static void f_mask_bwd(const Call *c) { gc_causal_mask_bwd(c->o, c->o, c->batch, c->M, 0); }
static void f_sm_fwd(const Call *c) { gc_softmax_fwd(c->o, c->a, c->M, c->N); }
static void f_sm_bwd(const Call *c) { gc_softmax_bwd(c->o, c->a, c->b, c->M, c->N, 0); }
static void f_ce_fwd(const Call *c) { gc_crossentropy_fwd(c->o, c->a, c->idx, c->M, c->N, c->K); }
static void f_ce_bwd(const Call *c)
{
    gc_crossentropy_bwd(c->o, c->b, c->a, c->idx, c->M, c->N, c->K, 0);
}
static void f_adamw(const Call *c)
{
    gc_adamw(c->o, c->a, c->b, c->c, c->n, 3e-4f, 0.9f, 0.999f, 1e-8f, 0.0f, 1);
}
static void f_fill(const Call *c) { gc_fill(c->o, c->n, 0.0f); }
static void f_poison(const Call *c) { gc_poison(c->o, (size_t)c->n * sizeof(float)); }

int main(int argc, char **argv)
{
    long B = 4, T = 64;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-t"))
            threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-B"))
            B = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "-T"))
            T = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "-r"))
            reps = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: bench_kernels [-t THREADS] [-B B] [-T T] [-r REPS]\n");
            return 1;
        }
    }
    if (getenv("OPENBLAS_CORETYPE") || getenv("OPENBLAS_L2_SIZE"))
        fprintf(stderr, "warning: OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE are set; sgemm may be slow\n");
    omp_set_num_threads(threads);
    const long L = 12, C = 768, NH = 12, hs = C / NH, V = 50257, Vp = 50304, maxT = 1024;
    const long BT = B * T, C3 = 3 * C, C4 = 4 * C, nparams = 124475904;
    printf("GPT-2 124M kernels: B=%ld T=%ld, %d threads (best and median of %d)\n", B, T, threads,
           reps);
    printf("%-22s %-28s %8s %8s %8s %5s %8s\n", "kernel", "shape", "best ms", "med ms",
           "cpu1 ms", "calls", "ms/step");

    float *x = buf(BT * C4, -1, 1), *y = buf(BT * C4, -1, 1), *z = buf(BT * C4, -1, 1);
    float *w = buf(Vp * C, -0.05f, 0.05f), *dw = buf(Vp * C, -1, 1);
    float *att = buf(B * NH * T * T, -2, 2), *att2 = buf(B * NH * T * T, 0, 0.1f);
    float *logits = buf(BT * Vp, -4, 4), *dlogits = buf(BT * Vp, 0, 1);
    float *stats = buf(4 * BT, 0.5f, 1.5f), *lnw = buf(4 * C, 0.5f, 1.5f), loss, dloss = 1.0f;
    int32_t *tok = malloc((size_t)BT * sizeof *tok);
    int32_t *pos = malloc((size_t)BT * sizeof *pos);
    for (long i = 0; i < BT; i++) {
        tok[i] = (int32_t)((i * 7919) % V);
        pos[i] = (int32_t)(i % T);
    }
    char s[64];

    /* matmuls: forward, then dX and dW per weight */
    struct {
        const char *name;
        long N, K, calls;
    } lin[] = {{"qkv", C3, C, L}, {"attproj", C, C, L}, {"fc", C4, C, L}, {"fcproj", C, C4, L},
               {"classifier", Vp, C, 1}};
    for (int i = 0; i < 5; i++) {
        long N = lin[i].N, K = lin[i].K;
        int calls = (int)lin[i].calls;
        char nm[48];
        snprintf(s, sizeof s, "%ldx%ldx%ld", BT, N, K);
        snprintf(nm, sizeof nm, "matmul %s fwd", lin[i].name);
        bench(nm, s, calls, 1,
              &(Call){.fn = f_matmul, .o = i == 4 ? logits : y, .a = x, .b = w, .batch = 1, .M = BT, .N = N, .K = K, .tb = 1});
        snprintf(s, sizeof s, "%ldx%ldx%ld", BT, K, N);
        snprintf(nm, sizeof nm, "matmul %s dX", lin[i].name);
        bench(nm, s, calls, 1,
              &(Call){.fn = f_matmul, .o = z, .a = i == 4 ? logits : y, .b = w, .batch = 1, .M = BT, .N = K, .K = N});
        snprintf(s, sizeof s, "%ldx%ldx%ld ta", N, K, BT);
        snprintf(nm, sizeof nm, "matmul %s dW", lin[i].name);
        bench(nm, s, calls, 1,
              &(Call){.fn = f_matmul, .o = dw, .a = i == 4 ? logits : y, .b = x, .batch = 1, .M = N, .N = K, .K = BT, .ta = 1});
    }
    long BH = B * NH;
    snprintf(s, sizeof s, "%ld x %ldx%ldx%ld", BH, T, T, hs);
    bench("matmul att q@k^T", s, (int)L, 1, &(Call){.fn = f_matmul, .o = att, .a = x, .b = y, .batch = BH, .M = T, .N = T, .K = hs, .tb = 1});
    bench("matmul att @v", s, (int)L, 1, &(Call){.fn = f_matmul, .o = z, .a = att2, .b = y, .batch = BH, .M = T, .N = hs, .K = T});
    bench("matmul att bwd (x4)", s, 4 * (int)L, 1,
          &(Call){.fn = f_matmul, .o = z, .a = att2, .b = y, .batch = BH, .M = T, .N = hs, .K = T});

    /* everything else */
    snprintf(s, sizeof s, "%ld of %ld (wte)", BT, C);
    bench("embedding_fwd", s, 2, 0, &(Call){.fn = f_emb_fwd, .o = x, .a = w, .idx = tok, .M = BT, .N = Vp, .K = C});
    snprintf(s, sizeof s, "%ldx%ld (wte), acc=0", Vp, C);
    bench("embedding_bwd wte", s, 1, 0, &(Call){.fn = f_emb_bwd, .o = dw, .a = x, .idx = tok, .M = BT, .N = Vp, .K = C});
    snprintf(s, sizeof s, "%ldx%ld (wte), acc=1", Vp, C);
    bench("embedding_bwd wte acc", s, 0, 0, &(Call){.fn = f_emb_bwd, .o = dw, .a = x, .idx = tok, .M = BT, .N = Vp, .K = C, .acc = 1});
    snprintf(s, sizeof s, "%ldx%ld (wpe), acc=0", maxT, C);
    bench("embedding_bwd wpe", s, 1, 0, &(Call){.fn = f_emb_bwd, .o = dw, .a = x, .idx = pos, .M = BT, .N = maxT, .K = C});
    snprintf(s, sizeof s, "%ldx%ld", BT, C);
    bench("layernorm_fwd", s, (int)(2 * L + 1), 0,
          &(Call){.fn = f_ln_fwd, .o = y, .a = x, .b = lnw, .c = lnw + C, .d = stats, .e = stats + BT, .M = BT, .N = C});
    bench("layernorm_bwd", s, (int)(2 * L + 1), 0,
          &(Call){.fn = f_ln_bwd, .o = y, .a = x, .b = lnw, .c = lnw + 2 * C, .d = stats, .e = stats + BT, .M = BT, .N = C});
    snprintf(s, sizeof s, "%ldx%ld", BT, C3);
    bench("reduce_rows qkvb", s, (int)L, 0, &(Call){.fn = f_reduce, .o = z, .a = x, .M = BT, .N = C3});
    snprintf(s, sizeof s, "%ldx%ld", BT, C4);
    bench("reduce_rows fcb", s, (int)L, 0, &(Call){.fn = f_reduce, .o = z, .a = x, .M = BT, .N = C4});
    snprintf(s, sizeof s, "%ldx%ld", BT, C);
    bench("reduce_rows (C) x2", s, 2 * (int)L, 0, &(Call){.fn = f_reduce, .o = z, .a = x, .M = BT, .N = C});
    snprintf(s, sizeof s, "(%ld,%ld,3,%ld,%ld)->(3,B,NH,T,hs)", B, T, NH, hs);
    bench("permute qkv", s, 2 * (int)L, 0, &(Call){.fn = f_perm, .o = y, .a = x, .batch = B, .M = T, .N = NH, .K = hs, .ta = 1});
    snprintf(s, sizeof s, "(%ld,%ld,%ld,%ld)->(B,T,NH,hs)", B, NH, T, hs);
    bench("permute heads", s, 2 * (int)L, 0, &(Call){.fn = f_perm, .o = y, .a = x, .batch = B, .M = T, .N = NH, .K = hs});
    snprintf(s, sizeof s, "%ld x %ldx%ld in place", BH, T, T);
    bench("causal_mask_fwd", s, (int)L, 0, &(Call){.fn = f_mask_fwd, .o = att, .batch = BH, .M = T});
    bench("causal_mask_bwd", s, (int)L, 0, &(Call){.fn = f_mask_bwd, .o = att, .batch = BH, .M = T});
    snprintf(s, sizeof s, "%ldx%ld", BH * T, T);
    bench("softmax_fwd", s, (int)L, 0, &(Call){.fn = f_sm_fwd, .o = att2, .a = att, .M = BH * T, .N = T});
    bench("softmax_bwd", s, (int)L, 0, &(Call){.fn = f_sm_bwd, .o = att, .a = att, .b = att2, .M = BH * T, .N = T});
    snprintf(s, sizeof s, "%ldx%ld (V=%ld)", BT, Vp, V);
    bench("crossentropy_fwd", s, 1, 0, &(Call){.fn = f_ce_fwd, .o = &loss, .a = logits, .idx = tok, .M = BT, .N = Vp, .K = V});
    bench("crossentropy_bwd", s, 1, 0,
          &(Call){.fn = f_ce_bwd, .o = dlogits, .a = logits, .b = &dloss, .idx = tok, .M = BT, .N = Vp, .K = V});
    free(x), free(y), free(z), free(att), free(att2), free(logits), free(dlogits);

    float *p = buf(nparams, -0.1f, 0.1f), *g = buf(nparams, -0.01f, 0.01f);
    float *m = buf(nparams, -0.001f, 0.001f), *v = buf(nparams, 0, 1e-6f);
    int saved = reps;
    reps = reps < 5 ? reps : 5;
    snprintf(s, sizeof s, "%ld params", nparams);
    bench("adamw", s, 1, 0, &(Call){.fn = f_adamw, .o = p, .a = g, .b = m, .c = v, .n = nparams});
    bench("fill 0 (grads)", s, 0, 0, &(Call){.fn = f_fill, .o = g, .n = nparams});
    bench("poison (debug)", s, 0, 0, &(Call){.fn = f_poison, .o = g, .n = nparams});
    reps = saved;

    printf("\nper step, %d threads (best):  matmuls %7.1f ms, other kernels %6.1f ms\n", threads,
           1e3 * tot_matmul, 1e3 * tot_other);
    printf("per step, 1-thread CPU time: matmuls %7.1f ms, other kernels %6.1f ms\n",
           1e3 * cpu_matmul, 1e3 * cpu_other);
    printf("(cpu1: CPU time of one call on one thread; calls = 0: not counted in the step;\n"
           " elementwise ops are generated code and not included)\n");
    free(p), free(g), free(m), free(v), free(w), free(dw), free(stats), free(lnw), free(tok), free(pos);
    return 0;
}
