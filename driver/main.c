/* main.c — the gcompile driver: options, then the passes in order, then the
 * requested artifact (or a built executable). */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen.h"
#include "driver.h"
#include "frontend.h"
#include "ir.h"
#include "passes.h"

static void usage(FILE *f)
{
    fputs(
        "usage: gcompile FILE.graph [options]\n"
        "\n"
        "Compiles a graph description of a network into a standalone training\n"
        "program: derives the backward pass and the optimizer step, plans every\n"
        "byte of memory, and emits C (cpu) or CUDA C (cuda).\n"
        "\n"
        "options:\n"
        "  -o, --output FILE      where to write (default: train; '-' = stdout for --emit)\n"
        "      --config NAME      a named config of the graph (e.g. gpt2_124M, tiny)\n"
        "  -D NAME=VALUE          override one dim (repeatable), e.g. -D B=8\n"
        "      --target T         cuda | cpu (default: cuda)\n"
        "      --precision P      fp32 | bf16 (bf16 activations and gradients, fp32 master\n"
        "                         weights and optimizer state; --target cuda only)\n"
        "      --mem SIZE         per-device memory budget, e.g. 24GiB, 80GB, 512MiB;\n"
        "                         a plan that does not fit is rejected with numbers\n"
        "                         (recompute/micro-batch search: not implemented yet)\n"
        "      --gpus N           devices (only 1 is implemented yet)\n"
        "      --schedule S       plain | fused-opt (optimizer update right after\n"
        "                         each parameter's last gradient write; default)\n"
        "      --emit KIND        write one artifact instead of building:\n"
        "                           ir, summary, c, cuda, plan, plan-text, plan-svg,\n"
        "                           plan-html (the plan explorer: one offline web page)\n"
        "      --emit plan-diff A.json B.json\n"
        "                         instead of a graph: a web page comparing two plans\n"
        "                         (from --emit plan) of the same graph\n"
        "      --no-reuse         every tensor gets its own storage (baseline plan)\n"
        "      --no-fuse[=KINDS]  turn fusions off: all of them, or the comma-separated\n"
        "                         kinds given (repeatable): attention (causal attention\n"
        "                         without the T x T scores), classifier (matmul +\n"
        "                         cross-entropy in row chunks; --target cpu only so far,\n"
        "                         and such a program cannot --sample), bias (matmul +\n"
        "                         bias epilogue); gelu and layernorm are accepted but\n"
        "                         those fusions are not implemented yet\n"
        "      --classifier-chunk ROWS  rows per chunk of the fused classifier\n"
        "                         (default 1024; the chunk is min(B*T, ROWS) x Vp)\n"
        "      --no-tf32          cuda: fp32 matmuls on the fp32 units (default: TF32\n"
        "                         tensor cores on sm_80 and newer, as llm.c; inputs\n"
        "                         rounded to 10 mantissa bits)\n"
        "      --poison           emitted program fills each buffer with NaN when its\n"
        "                         lifetime ends (debugging plans)\n"
        "      --gpu-arch LIST    CUDA architectures to build for (default: sm_80,sm_90)\n"
        "      --cc CMD           C compiler for --target cpu (default: cc)\n"
        "      --nvcc CMD         CUDA compiler for --target cuda (default: nvcc)\n"
        "  -v, --verbose          show the build command and pass timings\n"
        "  -h, --help             this text\n"
        "      --version          print the version\n",
        f);
}

/* "24GiB" / "80GB" / "512MiB" / "1000" -> bytes; -1 when malformed */
static long long parse_size(const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !(v > 0))
        return -1;
    static const struct { const char *suffix; double mult; } units[] = {
        {"", 1}, {"B", 1}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
        {"TiB", 1099511627776.0}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(end, units[i].suffix) == 0) {
            double b = v * units[i].mult;
            return b < 9e18 ? (long long)b : -1;
        }
    return -1;
}

/* --no-fuse[=KIND[,KIND...]] into the mask of fusions left off */
static int parse_no_fuse(const char *arg, int *mask)
{
    if (!arg) {
        *mask = FUSE_ALL;
        return 0;
    }
    char *list = xstrdup(arg), *save = NULL;
    int rc = 0;
    for (char *k = strtok_r(list, ",", &save); k && !rc; k = strtok_r(NULL, ",", &save)) {
        int kind = fuse_kind(k);
        if (!kind) {
            fprintf(stderr, "gcompile: error: --no-fuse: unknown fusion '%s' (attention, classifier, bias, gelu, "
                            "layernorm)\n", k);
            rc = 1;
        }
        *mask |= kind;
    }
    if (!rc && !*arg) {
        fprintf(stderr, "gcompile: error: --no-fuse= needs a fusion name (or use plain --no-fuse)\n");
        rc = 1;
    }
    free(list);
    return rc;
}

static const char *const emit_kinds[] = {"ir", "summary", "c", "cuda", "plan", "plan-text", "plan-svg",
                                         "plan-html", "plan-diff", NULL};

static int parse_args(int argc, char **argv, DriverOptions *o)
{
    enum { O_CONFIG = 256, O_TARGET, O_PRECISION, O_MEM, O_GPUS, O_EMIT, O_NOREUSE, O_VERSION,
           O_SCHEDULE, O_POISON, O_CC, O_NVCC, O_ARCH, O_NOFUSE, O_NOTF32, O_CLSCHUNK };
    static const struct option longopts[] = {
        {"output", required_argument, 0, 'o'}, {"config", required_argument, 0, O_CONFIG},
        {"target", required_argument, 0, O_TARGET}, {"precision", required_argument, 0, O_PRECISION},
        {"mem", required_argument, 0, O_MEM}, {"gpus", required_argument, 0, O_GPUS},
        {"emit", required_argument, 0, O_EMIT}, {"no-reuse", no_argument, 0, O_NOREUSE},
        {"schedule", required_argument, 0, O_SCHEDULE}, {"poison", no_argument, 0, O_POISON},
        {"cc", required_argument, 0, O_CC}, {"nvcc", required_argument, 0, O_NVCC},
        {"gpu-arch", required_argument, 0, O_ARCH}, {"no-fuse", optional_argument, 0, O_NOFUSE},
        {"classifier-chunk", required_argument, 0, O_CLSCHUNK},
        {"no-tf32", no_argument, 0, O_NOTF32}, {"verbose", no_argument, 0, 'v'},
        {"help", no_argument, 0, 'h'}, {"version", no_argument, 0, O_VERSION}, {0, 0, 0, 0},
    };
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":o:D:vh", longopts, NULL)) != -1) {
        switch (c) {
        case 'o': o->output = optarg; break;
        case O_CONFIG: o->build.config = optarg; break;
        case 'D': {
            char *eq = strchr(optarg, '=');
            if (!eq || eq == optarg) {
                fprintf(stderr, "gcompile: error: -D expects NAME=VALUE, got '%s'\n", optarg);
                return 1;
            }
            *eq = '\0';
            o->defines = xrealloc(o->defines, (size_t)(o->build.ndefines + 1) * sizeof *o->defines);
            o->defines[o->build.ndefines++] = (Define){optarg, eq + 1};
            o->build.defines = o->defines;
            break;
        }
        case O_TARGET:
            if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda")) {
                fprintf(stderr, "gcompile: error: --target must be cpu or cuda, got '%s'\n", optarg);
                return 1;
            }
            o->emit.target = optarg;
            break;
        case O_PRECISION:
            if (strcmp(optarg, "fp32") && strcmp(optarg, "bf16")) {
                fprintf(stderr, "gcompile: error: --precision must be fp32 or bf16, got '%s'\n", optarg);
                return 1;
            }
            o->emit.precision = optarg;
            break;
        case O_MEM: {
            long long b = parse_size(optarg);
            if (b <= 0) {
                fprintf(stderr, "gcompile: error: --mem: bad size '%s' (e.g. 24GiB, 80GB, 512MiB)\n", optarg);
                return 1;
            }
            o->emit.budget_bytes = (size_t)b;
            break;
        }
        case O_GPUS: {
            char *end;
            long n = strtol(optarg, &end, 10);
            if (*end || n < 1 || n > 4096) {
                fprintf(stderr, "gcompile: error: --gpus expects a positive integer, got '%s'\n", optarg);
                return 1;
            }
            o->gpus = (int)n;
            break;
        }
        case O_EMIT: {
            int ok = 0;
            for (int i = 0; emit_kinds[i]; i++)
                ok |= !strcmp(optarg, emit_kinds[i]);
            if (!ok) {
                fprintf(stderr, "gcompile: error: --emit: unknown kind '%s' (ir, summary, c, cuda, plan, "
                                "plan-text, plan-svg, plan-html, plan-diff)\n", optarg);
                return 1;
            }
            o->emit_kind = optarg;
            break;
        }
        case O_NOREUSE: o->no_reuse = 1; break;
        case O_CLSCHUNK: {
            char *end;
            long n = strtol(optarg, &end, 10);
            if (*end || n < 1 || n > (1L << 30)) {
                fprintf(stderr, "gcompile: error: --classifier-chunk expects a positive number of rows, got '%s'\n",
                        optarg);
                return 1;
            }
            o->classifier_chunk = n;
            break;
        }
        case O_NOFUSE:
            if (parse_no_fuse(optarg, &o->no_fuse))
                return 1;
            break;
        case O_SCHEDULE:
            if (!strcmp(optarg, "plain"))
                o->schedule = SCHED_PLAIN;
            else if (!strcmp(optarg, "fused-opt"))
                o->schedule = SCHED_FUSED_OPT;
            else {
                fprintf(stderr, "gcompile: error: --schedule must be plain or fused-opt, got '%s'\n", optarg);
                return 1;
            }
            break;
        case O_POISON: o->emit.poison = 1; break;
        case O_NOTF32: o->emit.no_tf32 = 1; break;
        case O_CC: o->cc = optarg; break;
        case O_NVCC: o->nvcc = optarg; break;
        case O_ARCH:
            for (const char *p = optarg; *p; p++)
                if (!(isalnum((unsigned char)*p) || *p == '_' || *p == ',')) {
                    fprintf(stderr, "gcompile: error: --gpu-arch expects a list such as sm_80,sm_90, got '%s'\n",
                            optarg);
                    return 1;
                }
            if (strncmp(optarg, "sm_", 3) != 0) {
                fprintf(stderr, "gcompile: error: --gpu-arch expects a list such as sm_80,sm_90, got '%s'\n", optarg);
                return 1;
            }
            o->gpu_arch = optarg;
            break;
        case 'v': o->verbose = 1; break;
        case 'h': usage(stdout); exit(0);
        case O_VERSION: printf("gcompile %s\n", GC_VERSION); exit(0);
        case ':':
            fprintf(stderr, "gcompile: error: option '%s' needs a value\n", argv[optind - 1]);
            return 1;
        default:
            fprintf(stderr, "gcompile: error: unknown option '%s' (see --help)\n", argv[optind - 1]);
            return 1;
        }
    }
    if (o->emit_kind && !strcmp(o->emit_kind, "plan-diff")) {   /* two plans instead of a graph */
        if (argc - optind != 2) {
            fprintf(stderr, "gcompile: error: --emit plan-diff expects two plan files (A.json B.json), got %d\n",
                    argc - optind);
            return 1;
        }
        o->input = argv[optind];
        o->input2 = argv[optind + 1];
        return 0;
    }
    if (optind >= argc) {
        fprintf(stderr, "gcompile: error: no input file (usage: gcompile FILE.graph [options]; see --help)\n");
        return 1;
    }
    if (optind + 1 < argc) {
        fprintf(stderr, "gcompile: error: one input file expected, got '%s' and '%s'\n", argv[optind],
                argv[optind + 1]);
        return 1;
    }
    o->input = argv[optind];
    if (o->emit_kind && !strcmp(o->emit_kind, "c"))      /* the source kinds imply their target */
        o->emit.target = "cpu";
    if (o->emit_kind && !strcmp(o->emit_kind, "cuda"))
        o->emit.target = "cuda";
    if (!strcmp(o->emit.precision, "bf16") && strcmp(o->emit.target, "cuda") != 0) {
        fprintf(stderr, "gcompile: error: --precision bf16 needs --target cuda (the CPU target is fp32)\n");
        return 1;
    }
    if (o->gpus > 1) {
        fprintf(stderr, "gcompile: error: --gpus %d: the parallel split is not implemented yet (1 device only)\n",
                o->gpus);
        return 1;
    }
    return 0;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

#define PASS(o, name, call)                                                      \
    do {                                                                         \
        double t0_ = now_ms();                                                   \
        call;                                                                    \
        if ((o)->verbose)                                                        \
            fprintf(stderr, "gcompile: %-10s %8.2f ms\n", name, now_ms() - t0_); \
    } while (0)

int main(int argc, char **argv)
{
    DriverOptions o = {
        .output = NULL, .schedule = SCHED_FUSED_OPT, .classifier_chunk = 1024, .gpus = 1, .cc = "cc", .nvcc = "nvcc",
        .gpu_arch = "sm_80,sm_90",
        .emit = {.target = "cuda", .precision = "fp32"},
    };
    if (parse_args(argc, argv, &o))
        return 1;
    if (o.input2)
        return driver_emit_diff(&o);
    Ast *ast = NULL;
    Graph *g = NULL;
    int rc = 1;
    PASS(&o, "parse", ast = parse_file(o.input));
    if (!ast || diag_count())
        goto done;
    PASS(&o, "build", g = ir_build(ast, &o.build));
    if (!g)
        goto done;
    ir_verify(g);
    g->no_reuse = o.no_reuse;
    PASS(&o, "autodiff", pass_autodiff(g));
    if (diag_count())
        goto done;
    ir_verify(g);
    if (!(o.no_fuse & FUSE_BIAS)) {
        PASS(&o, "fuse", pass_fuse(g));
        ir_verify(g);
    }
    if (!(o.no_fuse & FUSE_ATTENTION)) {
        PASS(&o, "fuse-att", pass_fuse_attention(g));
        ir_verify(g);
    }
    if (!(o.no_fuse & FUSE_CLASSIFIER) && !strcmp(o.emit.target, "cpu")) {
        PASS(&o, "fuse-cls", pass_fuse_classifier(g, o.classifier_chunk));
        ir_verify(g);
    }
    if (!strcmp(o.emit.precision, "bf16")) {
        PASS(&o, "precision", pass_precision(g));
        ir_verify(g);
    }
    if (o.schedule == SCHED_FUSED_OPT) {
        PASS(&o, "split-upd", pass_split_updates(g));
        ir_verify(g);
    }
    PASS(&o, "schedule", pass_schedule(g, o.schedule));
    if (!strcmp(o.emit.target, "cuda"))
        pass_workspace(g, (size_t)32 << 20);   /* cuBLASLt + reductions (gc_cuda.h) */
    ir_verify(g);
    PASS(&o, "liveness", fill_liveness(g));
    PASS(&o, "memplan", pass_memplan(g));
    ir_verify(g);
    char err[512];
    PASS(&o, "plancheck", if (plan_check(g, err, sizeof err) != 0) IR_BUG("plan check failed: %s", err));
    if (driver_check_budget(g, &o))
        goto done;
    rc = o.emit_kind ? driver_emit(g, &o) : driver_build(g, &o);
done:
    graph_free(g);
    ast_free(ast);
    free(o.defines);
    return rc;
}
