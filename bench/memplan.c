/* memplan.c — memory planner benchmark (not a test).
 *
 *   memplan_bench [--synthetic] [--graph FILE] [--sched plain|fused]
 *                 [--show MODEL B T PREFIX]
 *
 * For GPT-2 124M/350M/774M/1558M x B in {1, 8, 32} x T in {128, 1024} it
 * plans the training graph and prints, per shape: the planned bytes of each
 * region, the arena's lower bound and ratio, the arena under --no-reuse, and
 * llm.c's activation + activation-gradient allocation for the same shape
 * (train_gpt2.c: fp32, one buffer per ActivationTensors field, the same sizes
 * again for the gradients, no reuse), with the time the planner took.
 *
 * The graph comes from models/gpt2.graph through the compiler's own passes
 * (parse -> ir_build -> pass_autodiff [-> pass_split_updates] -> pass_schedule -> fill_liveness ->
 * pass_memplan) when this was built with GC_HAVE_FRONTEND, else (or with
 * --synthetic) from tests/plan/gpt2_synth.c, a hand-built graph of the same
 * shape. --show plans one shape (MODEL: 124M, 350M, 774M, 1558M), prints its
 * plan-text and writes PREFIX.json and PREFIX.svg. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen.h"
#include "passes.h"
#include "plan_util.h"
#ifdef GC_HAVE_FRONTEND
#include "frontend.h"
#endif

#ifndef GC_SOURCE_DIR
#define GC_SOURCE_DIR "."
#endif

typedef struct Model { const char *name; long L, NH, C; } Model;
static const Model models[] = {{"gpt2_124M", 12, 12, 768}, {"gpt2_350M", 24, 16, 1024},
                               {"gpt2_774M", 36, 20, 1280}, {"gpt2_1558M", 48, 25, 1600}};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* llm.c train_gpt2.c: fill_in_activation_sizes (23 tensors), fp32; the
 * gradients of the activations (grads_acts) have the same sizes. */
static double llmc_acts_bytes(long B, long T, long L, long NH, long C, long Vp)
{
    double BT = (double)B * T, act = 0;
    act += BT * C;                       /* encoded */
    act += L * BT * C;                   /* ln1 */
    act += 2 * L * BT;                   /* ln1_mean, ln1_rstd */
    act += L * BT * 3 * C;               /* qkv */
    act += L * BT * C;                   /* atty */
    act += 2 * L * (double)B * NH * T * T; /* preatt, att */
    act += L * BT * C;                   /* attproj */
    act += L * BT * C;                   /* residual2 */
    act += L * BT * C;                   /* ln2 */
    act += 2 * L * BT;                   /* ln2_mean, ln2_rstd */
    act += 2 * L * BT * 4 * C;           /* fch, fch_gelu */
    act += L * BT * C;                   /* fcproj */
    act += L * BT * C;                   /* residual3 */
    act += BT * C;                       /* lnf */
    act += 2 * BT;                       /* lnf_mean, lnf_rstd */
    act += 2 * BT * Vp;                  /* logits, probs */
    act += BT;                           /* losses */
    return 2 * 4 * act;                  /* activations + their gradients, fp32 */
}

static Graph *build(const Model *m, long B, long T, const char *graph, ScheduleKind sk,
                    int synthetic, int fuse)
{
#ifdef GC_HAVE_FRONTEND
    if (!synthetic) {
        Ast *ast = parse_file(graph);
        if (!ast || diag_count())
            return NULL;
        char bs[32], ts[32];
        snprintf(bs, sizeof bs, "%ld", B);
        snprintf(ts, sizeof ts, "%ld", T);
        Define defs[2] = {{"B", bs}, {"T", ts}};
        BuildOptions bo = {m->name, defs, 2};
        Graph *g = ir_build(ast, &bo);
        ast_free(ast);
        if (!g)
            return NULL;
        pass_autodiff(g);
        if (fuse) {                     /* as the driver does by default */
            pass_fuse(g);
            pass_fuse_gelu(g);
            pass_fuse_attention(g);
            pass_fuse_classifier(g, 1024);   /* the driver's default (both targets) */
            pass_fuse_layernorm(g);
        }
        if (sk == SCHED_FUSED_OPT)      /* as the driver does: per-layer updates */
            pass_split_updates(g);
        pass_schedule(g, sk);
        return g;
    }
#else
    (void)graph;
    (void)sk;
    (void)synthetic;
#endif
    (void)fuse;
    Gpt2Dims d = {B, T, 1024, 50257, 50304, m->L, m->NH, m->C};
    return gpt2_synth(&d);
}

/* --show: one shape's plan as text (stdout), JSON and SVG. */
static int fuse_default = 1;   /* --show: with the default fusions (--no-fuse: without) */

/* Arena bytes of g planned; *big: planned tensors of B*NH*T*T or B*T*Vp
 * elements (the attention scores and the logits). */
static size_t plan_fused(Graph *g, long B, long T, long NH, int *big)
{
    fill_liveness(g);
    pass_memplan(g);
    *big = 0;
    for (int i = 0; i < g->nt; i++) {
        const Tensor *t = &g->t[i];
        long last = t->rank ? t->shape[t->rank - 1] : 0, prev = t->rank > 1 ? t->shape[t->rank - 2] : 0;
        if (t->view_of < 0 && t->first >= 0 &&
            ((t->numel == B * NH * T * T && last == T && prev == T) || (t->numel == B * T * 50304 && last == 50304)))
            (*big)++;
    }
    return g->region_bytes[RG_ARENA];
}

static int show(const char *model, long B, long T, const char *graph, ScheduleKind sk,
                int synthetic, const char *prefix)
{
    const Model *m = NULL;
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        if (!strcmp(models[i].name + 5, model))
            m = &models[i];
    if (!m) {
        fprintf(stderr, "memplan_bench: unknown model %s\n", model);
        return 2;
    }
    Graph *g = build(m, B, T, graph, sk, synthetic, fuse_default);
    if (!g)
        return 1;
    fill_liveness(g);
    pass_memplan(g);
    char err[512], path[1024];
    if (plan_check(g, err, sizeof err))
        fprintf(stderr, "plan_check: %s\n", err);
    EmitOptions eo = {.target = "cpu", .precision = "fp32"};
    emit_plan_text(stdout, g, &eo);
    snprintf(path, sizeof path, "%s.json", prefix);
    FILE *f = fopen(path, "w");
    if (f) {
        emit_plan_json(f, g, &eo);
        fclose(f);
    }
    snprintf(path, sizeof path, "%s.svg", prefix);
    if ((f = fopen(path, "w"))) {
        emit_plan_svg(f, g, &eo);
        fclose(f);
    }
    graph_free(g);
    return 0;
}

static void mib(char *buf, size_t len, double bytes)
{
    snprintf(buf, len, "%.1f", bytes / 1048576.0);
}

int main(int argc, char **argv)
{
    int synthetic = 0;
    const char *graph = GC_SOURCE_DIR "/models/gpt2.graph";
    ScheduleKind sk = SCHED_PLAIN;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--synthetic"))
            synthetic = 1;
        else if (!strcmp(argv[i], "--no-fuse"))
            fuse_default = 0;
        else if (!strcmp(argv[i], "--graph") && i + 1 < argc)
            graph = argv[++i];
        else if (!strcmp(argv[i], "--show") && i + 4 < argc) {
#ifndef GC_HAVE_FRONTEND
            synthetic = 1;
#endif
            return show(argv[i + 1], atol(argv[i + 2]), atol(argv[i + 3]), graph, sk,
                        synthetic, argv[i + 4]);
        } else if (!strcmp(argv[i], "--sched") && i + 1 < argc)
            sk = !strcmp(argv[++i], "fused") ? SCHED_FUSED_OPT : SCHED_PLAIN;
        else {
            fprintf(stderr, "usage: memplan_bench [--synthetic] [--graph FILE] "
                    "[--sched plain|fused] [--no-fuse] [--show MODEL B T PREFIX]\n");
            return 2;
        }
    }
#ifndef GC_HAVE_FRONTEND
    synthetic = 1;
#endif
    printf("graph: %s\n", synthetic ? "synthetic (tests/plan/gpt2_synth.c)" : graph);
    printf("unfused: --no-fuse; fused: the default fusions (bias, gelu, attention, classifier, layernorm); big: planned tensors of\n"
           "B*NH*T*T or B*T*Vp elements left in the fused plan\n");
    printf("%-11s %3s %5s %6s | %9s %9s %9s %9s %9s %7s | %9s %9s | %5s %5s %7s | %9s %6s %3s\n", "model", "B",
           "T", "tensors", "params", "grads", "optstate", "arena", "bound", "ratio",
           "no-reuse", "llm.c", "liv", "plan", "check", "fused", "/unfu", "big");
    printf("%-11s %3s %5s %6s | %9s %9s %9s %9s %9s %7s | %9s %9s | %5s %5s %7s | %9s %6s %3s\n", "", "", "",
           "", "MiB", "MiB", "MiB", "MiB", "MiB", "", "MiB", "MiB", "ms", "ms", "ms", "MiB", "", "");
    static const long Bs[] = {1, 8, 32}, Ts[] = {128, 1024};
    /* shapes: first the CPU benchmark's (124M, B=4, T=64), then the grid */
    struct { const Model *m; long B, T; } shapes[64];
    int nshapes = 0;
    shapes[nshapes].m = &models[0], shapes[nshapes].B = 4, shapes[nshapes++].T = 64;
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++)
        for (int bi = 0; bi < 3; bi++)
            for (int ti = 0; ti < 2; ti++)
                shapes[nshapes].m = &models[mi], shapes[nshapes].B = Bs[bi], shapes[nshapes++].T = Ts[ti];
    double worst = 0;
    int bad = 0;
    for (int si = 0; si < nshapes; si++) {
            {
                const Model *m = shapes[si].m;
                long B = shapes[si].B, T = shapes[si].T;
                Graph *g = build(m, B, T, graph, sk, synthetic, 0);
                if (!g) {
                    fprintf(stderr, "memplan_bench: %s B=%ld T=%ld: build failed\n", m->name, B,
                            T);
                    return 1;
                }
                double t0 = now();
                fill_liveness(g);
                double t1 = now();
                pass_memplan(g);
                double t2 = now();
                char err[512];
                int rc = plan_check(g, err, sizeof err);
                double t3 = now();
                if (rc) {
                    fprintf(stderr, "memplan_bench: %s B=%ld T=%ld: plan_check: %s\n", m->name,
                            B, T, err);
                    bad = 1;
                }
                size_t nr = 0;
                for (int i = 0; i < g->nt; i++) {
                    const Tensor *t = &g->t[i];
                    if (t->view_of < 0 && t->region == RG_ARENA && t->first >= 0)
                        nr += (t->bytes + 255) / 256 * 256;
                }
                double ratio = (double)g->region_bytes[RG_ARENA] /
                               (double)g->region_lower_bound[RG_ARENA];
                if (ratio > worst)
                    worst = ratio;
                char c[8][32];
                mib(c[0], 32, (double)g->region_bytes[RG_PARAMS]);
                mib(c[1], 32, (double)g->region_bytes[RG_GRADS]);
                mib(c[2], 32, (double)g->region_bytes[RG_OPTSTATE]);
                mib(c[3], 32, (double)g->region_bytes[RG_ARENA]);
                mib(c[4], 32, (double)g->region_lower_bound[RG_ARENA]);
                mib(c[5], 32, (double)nr);
                mib(c[6], 32, llmc_acts_bytes(B, T, m->L, m->NH, m->C, 50304));
                printf("%-11s %3ld %5ld %6d | %9s %9s %9s %9s %9s %7.4f | %9s %9s | %5.1f %5.1f "
                       "%7.1f", m->name + 5, B, T, g->nt, c[0], c[1], c[2], c[3], c[4], ratio,
                       c[5], c[6], 1e3 * (t1 - t0), 1e3 * (t2 - t1), 1e3 * (t3 - t2));
                size_t unfused = g->region_bytes[RG_ARENA];
                graph_free(g);
                if (!synthetic && (g = build(m, B, T, graph, sk, synthetic, 1)) != NULL) {
                    int big;
                    size_t fused = plan_fused(g, B, T, m->NH, &big);
                    if (plan_check(g, err, sizeof err)) {
                        fprintf(stderr, "memplan_bench: fused %s B=%ld T=%ld: plan_check: %s\n", m->name, B, T, err);
                        bad = 1;
                    }
                    mib(c[7], 32, (double)fused);
                    printf(" | %9s %6.3f %3d", c[7], (double)fused / (double)unfused, big);
                    graph_free(g);
                }
                printf("\n");
                fflush(stdout);
            }
    }
    printf("worst arena / lower bound: %.4f (target <= 1.01, limit 1.02)\n", worst);
    return bad || worst > 1.02;
}
