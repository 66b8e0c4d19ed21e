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
        "                         a target: with --recompute auto and no --micro-batches\n"
        "                         the compiler chooses the micro-batch count and each\n"
        "                         layer's recompute mode with the least predicted step\n"
        "                         time that the real planner proves fits (docs/budget.md);\n"
        "                         nothing fits: exit 1 with the smallest budget found\n"
        "      --micro-batches K  gradient accumulation: each step runs K micro-batches\n"
        "                         of B/K rows (K divides B), then one optimizer update\n"
        "      --recompute MODE   none | selective | full | auto (default) | LIST: free\n"
        "                         forward activations after their last forward use and\n"
        "                         recompute them in the backward (selective: norms,\n"
        "                         elementwise ops, attention internals and the matmuls\n"
        "                         that widen their input, e.g. qkv, fc, gate, up; full:\n"
        "                         all but each layer's input); LIST: one letter per\n"
        "                         layer, n, s or f, layer 0\n"
        "                         first (e.g. ffsn); auto: chosen against --mem (none\n"
        "                         without --mem)\n"
        "      --offload WHAT     auto (default) | none | opt | act | opt+act: what moves\n"
        "                         to host memory (a host region, pinned on CUDA; not\n"
        "                         device memory). opt: fp32 master weights, AdamW moments\n"
        "                         and a copy of each gradient, the update run by host\n"
        "                         threads as the backward makes each gradient, the new\n"
        "                         weights copied back (copy streams with events on CUDA);\n"
        "                         the device keeps the weights the forward and backward\n"
        "                         read. act: each layer's kept activations (the layer\n"
        "                         input under --recompute full) copied to host memory\n"
        "                         after their last forward use and prefetched when the\n"
        "                         backward of the layer above starts (two layers' on the\n"
        "                         device at most). auto: under --mem the budget search\n"
        "                         weighs none, opt, act and opt+act with recompute and\n"
        "                         micro-batches (the cost model prices the copies over\n"
        "                         PCIe and the host update); without --mem, none.\n"
        "                         --precision bf16: the fp32 masters on the host, the\n"
        "                         device keeps their bf16 copies; with --gpus N by\n"
        "                         --split dp only yet (zero1-3 and tp refuse opt and\n"
        "                         act; auto is none)\n"
        "      --search HOW       the budget search: fast (default) | exhaustive (plans\n"
        "                         every per-layer mode x micro-batch count with the real\n"
        "                         planner: 3^L x divisors of B plans, a reference for\n"
        "                         small graphs)\n"
        "      --device PROFILE   the cost model's device: a100-40g, a100-80g, h100, h200,\n"
        "                         rtx4090, cpu (default: cpu for --target cpu, else h100);\n"
        "                         without --mem it implies --mem = its memory less a\n"
        "                         reserve (1.5 GiB on GPUs, 2 GiB on the CPU)\n"
        "      --gpus N           devices: one process per device, started with\n"
        "                         mpirun -np N ./train (MPI on cpu, NCCL on cuda); the\n"
        "                         plan and every artifact are one rank's\n"
        "      --split KIND       how --gpus N > 1 splits the step (default dp):\n"
        "                           dp     each rank B rows of a global batch of N*B rows;\n"
        "                                  gradients all-reduced per layer as made\n"
        "                           zero1  + optimizer state sharded (reduce-scatter,\n"
        "                                  update 1/N, all-gather); whole gradients kept\n"
        "                           zero2  + gradients sharded (each dies at its reduce-scatter)\n"
        "                           zero3  + parameters sharded, gathered per layer before\n"
        "                                  the forward and the backward use them\n"
        "                           tp=K   tensor parallel in groups of K ranks (Megatron's\n"
        "                                  form): qkv and fc cut by columns, attention\n"
        "                                  projection and fc projection by rows, one\n"
        "                                  all-reduce per block in the forward and one in\n"
        "                                  the backward; a group's ranks read the same B\n"
        "                                  rows. --gpus N > K: dp over the N/K groups\n"
        "                                  (global batch N/K*B rows), or tp=K+zero1,\n"
        "                                  tp=K+zero2 (optimizer state, gradients sharded\n"
        "                                  over the groups)\n"
        "                           auto   plans each of the above, keeps those that fit\n"
        "                                  --mem, picks the least predicted step time\n"
        "                                  (plan-text lists the candidates); tp=N at the\n"
        "                                  same global batch (each rank N*B rows); with\n"
        "                                  --mem each split gets the budget search's\n"
        "                                  micro-batches and recompute\n"
        "                         With --precision bf16, ZeRO shards the fp32 master\n"
        "                         weights with their moments and gathers the bf16\n"
        "                         weight copies; tp's collectives carry bf16\n"
        "      --interconnect L   nvlink | pcie | ib: the link --split auto prices\n"
        "                         collectives with (150, 16, 25 GB/s; default nvlink)\n"
        "      --mpicc CMD        MPI wrapper compiler: builds split CPU programs and gives\n"
        "                         split CUDA programs MPI's flags (default: mpicc)\n"
        "      --schedule S       plain | fused-opt (optimizer update right after\n"
        "                         each parameter's last gradient write; default)\n"
        "      --emit KIND        write one artifact instead of building:\n"
        "                           ir, summary, c, cuda, plan, plan-text, plan-svg,\n"
        "                           plan-html (the plan explorer: one offline web page),\n"
        "                           budget-sweep (the budget search at 20 budgets from the\n"
        "                           smallest plan to the unconstrained one: chosen K,\n"
        "                           recompute, peak, predicted time; SVG plot when OUT\n"
        "                           ends in .svg)\n"
        "      --emit plan-diff A.json B.json\n"
        "                         instead of a graph: a web page comparing two plans\n"
        "                         (from --emit plan) of the same graph\n"
        "      --no-reuse         every tensor gets its own storage (baseline plan)\n"
        "      --no-fuse[=KINDS]  turn fusions off: all of them, or the comma-separated\n"
        "                         kinds given (repeatable): attention (causal attention\n"
        "                         without the T x T scores), classifier (matmul +\n"
        "                         cross-entropy in row chunks; such a program cannot\n"
        "                         --sample), bias (matmul +\n"
        "                         bias epilogue), gelu (gelu(matmul + bias) and its\n"
        "                         backward as cuBLASLt GELU epilogues; needs bias; only\n"
        "                         the pre-activation is kept, GELU recomputed in the\n"
        "                         backward), bgrad (the fc bias gradient written by\n"
        "                         the backward's GELU-derivative matmul, cuBLASLt\n"
        "                         DGELU_BGRAD; needs gelu), layernorm (residual add +\n"
        "                         the layernorm or rmsnorm reading it as one kernel;\n"
        "                         off under --recompute), swiglu (silu(a) * b as one\n"
        "                         kernel, its backward as one that recomputes silu)\n"
        "      --classifier-chunk ROWS  rows per chunk of the fused classifier\n"
        "                         (default 1024; the chunk is min(B*T, ROWS) x Vp)\n"
        "      --no-tf32          cuda: fp32 matmuls on the fp32 units (default: TF32\n"
        "                         tensor cores on sm_80 and newer, as llm.c; inputs\n"
        "                         rounded to 10 mantissa bits)\n"
        "      --poison           emitted program fills each buffer with NaN when its\n"
        "                         lifetime ends (debugging plans)\n"
        "      --gpu-arch LIST    CUDA architectures to build for (default: sm_80,sm_90)\n"
        "      --cc CMD           C compiler for --target cpu (default: cc)\n"
        "      --nvcc CMD         CUDA compiler for --target cuda (default: nvcc); the\n"
        "                         CUDA runtime's objects are compiled once and cached in\n"
        "                         $GCOMPILE_CACHE (\"off\": no cache), else\n"
        "                         $XDG_CACHE_HOME/gcompile, else ~/.cache/gcompile;\n"
        "                         the least recently used objects go when it holds\n"
        "                         more than $GCOMPILE_CACHE_MAX (default 1GiB, \"off\":\n"
        "                         no limit)\n"
        "  -v, --verbose          show the build command and pass timings\n"
        "  -h, --help             this text\n"
        "      --version          print the version\n",
        f);
}

long long driver_parse_size(const char *s)
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

/* --split KIND: auto | dp | zero1 | zero2 | zero3 | tp=K */
static int parse_split(const char *s, SplitSpec *sp)
{
    static const char *const names[] = {"dp", "zero1", "zero2", "zero3"};
    static const SplitKind kinds[] = {SPLIT_DP, SPLIT_ZERO1, SPLIT_ZERO2, SPLIT_ZERO3};
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, names[i])) {
            sp->kind = kinds[i];
            return 0;
        }
    if (!strcmp(s, "auto")) {
        sp->kind = SPLIT_AUTO;
        return 0;
    }
    if (!strncmp(s, "tp=", 3)) {   /* tp=K, tp=K+dp, tp=K+zero1, tp=K+zero2 */
        char *end;
        long k = strtol(s + 3, &end, 10);
        if (end == s + 3 || (*end && *end != '+') || k < 2 || k > 4096) {
            fprintf(stderr, "gcompile: error: --split tp=K: K must be an integer >= 2, got '%s'\n", s + 3);
            return 1;
        }
        sp->kind = SPLIT_TP;
        sp->tp = (int)k;
        sp->rest = SPLIT_DP;
        if (*end) {
            int found = 0;
            for (int i = 0; i < 3; i++)
                if (!strcmp(end + 1, names[i]))
                    sp->rest = kinds[i], found = 1;
            if (!found) {
                fprintf(stderr, "gcompile: error: --split tp=%ld+%s: over the rest of the ranks tp takes dp, zero1 "
                        "or zero2\n", k, end + 1);
                return 1;
            }
        }
        return 0;
    }
    fprintf(stderr, "gcompile: error: --split must be auto, dp, zero1, zero2, zero3 or tp=K, got '%s'\n", s);
    return 1;
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
                            "bgrad, layernorm, swiglu)\n", k);
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
                                         "plan-html", "plan-diff", "budget-sweep", NULL};

static int parse_args(int argc, char **argv, DriverOptions *o)
{
    enum { O_CONFIG = 256, O_TARGET, O_PRECISION, O_MEM, O_GPUS, O_EMIT, O_NOREUSE, O_VERSION,
           O_SCHEDULE, O_POISON, O_CC, O_NVCC, O_ARCH, O_NOFUSE, O_NOTF32, O_MICRO, O_RECOMPUTE, O_DEVICE, O_CLSCHUNK,
           O_SPLIT, O_MPICC, O_INTERCONNECT, O_SEARCH, O_OFFLOAD };
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
        {"micro-batches", required_argument, 0, O_MICRO}, {"recompute", required_argument, 0, O_RECOMPUTE},
        {"device", required_argument, 0, O_DEVICE},
        {"split", required_argument, 0, O_SPLIT}, {"mpicc", required_argument, 0, O_MPICC},
        {"interconnect", required_argument, 0, O_INTERCONNECT}, {"search", required_argument, 0, O_SEARCH},
        {"offload", required_argument, 0, O_OFFLOAD},
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
            long long b = driver_parse_size(optarg);
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
                                "plan-text, plan-svg, plan-html, plan-diff, budget-sweep)\n", optarg);
                return 1;
            }
            o->emit_kind = optarg;
            break;
        }
        case O_MICRO: {
            char *end;
            long n = strtol(optarg, &end, 10);
            if (*end || n < 1 || n > 65536) {
                fprintf(stderr, "gcompile: error: --micro-batches expects a positive integer, got '%s'\n", optarg);
                return 1;
            }
            o->micro_batches = (int)n;
            break;
        }
        case O_RECOMPUTE:
            o->rc_layers = NULL;              /* the last --recompute wins */
            if (!strcmp(optarg, "none"))
                o->recompute = RC_NONE;
            else if (!strcmp(optarg, "selective"))
                o->recompute = RC_SELECTIVE;
            else if (!strcmp(optarg, "full"))
                o->recompute = RC_FULL;
            else if (!strcmp(optarg, "auto"))
                o->recompute = -1;
            else if (optarg[0] && strspn(optarg, "nsf") == strlen(optarg)) {
                o->recompute = RC_NONE;       /* per layer: lower() checks the count */
                o->rc_layers = optarg;
            } else {
                fprintf(stderr, "gcompile: error: --recompute must be none, selective, full, auto or one letter "
                                "per layer (n, s, f; e.g. ffsn), got '%s'\n", optarg);
                return 1;
            }
            break;
        case O_OFFLOAD:
            if (!strcmp(optarg, "none"))
                o->offload = OFFLOAD_NONE;
            else if (!strcmp(optarg, "opt"))
                o->offload = OFFLOAD_OPT;
            else if (!strcmp(optarg, "act"))
                o->offload = OFFLOAD_ACT;
            else if (!strcmp(optarg, "opt+act"))
                o->offload = OFFLOAD_OPT | OFFLOAD_ACT;
            else if (!strcmp(optarg, "auto"))
                o->offload = -1;
            else {
                fprintf(stderr, "gcompile: error: --offload must be none, opt, act, opt+act or auto, got '%s'\n",
                        optarg);
                return 1;
            }
            break;
        case O_SEARCH:
            if (strcmp(optarg, "fast") && strcmp(optarg, "exhaustive")) {
                fprintf(stderr, "gcompile: error: --search must be fast or exhaustive, got '%s'\n", optarg);
                return 1;
            }
            o->search_exhaustive = !strcmp(optarg, "exhaustive");
            break;
        case O_DEVICE:
            if (!device_profile(optarg)) {
                fprintf(stderr, "gcompile: error: --device: unknown profile '%s' (%s)\n", optarg,
                        device_profile_names());
                return 1;
            }
            o->device = optarg;
            break;
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
        case O_SPLIT:
            if (parse_split(optarg, &o->split))
                return 1;
            break;
        case O_MPICC: o->mpicc = optarg; break;
        case O_INTERCONNECT:
            if (strcmp(optarg, "nvlink") && strcmp(optarg, "pcie") && strcmp(optarg, "ib")) {
                fprintf(stderr, "gcompile: error: --interconnect must be nvlink, pcie or ib, got '%s'\n", optarg);
                return 1;
            }
            o->interconnect = optarg;
            break;
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
    if (o->device && !o->emit.budget_bytes)   /* --device implies --mem */
        o->emit.budget_bytes = (size_t)device_mem_budget(device_profile(o->device));
    if (!strcmp(o->emit.precision, "bf16") && strcmp(o->emit.target, "cuda") != 0) {
        fprintf(stderr, "gcompile: error: --precision bf16 needs --target cuda (the CPU target is fp32)\n");
        return 1;
    }
    o->emit.recompute_layers = o->rc_layers;
    o->split.ranks = o->gpus;
    if (o->split.kind == SPLIT_TP && o->gpus % o->split.tp) {
        fprintf(stderr, "gcompile: error: --split tp=%d needs --gpus a multiple of %d (groups of %d ranks hold "
                "the parts of a model; dp or zero runs over the groups), got --gpus %d\n", o->split.tp,
                o->split.tp, o->split.tp, o->gpus);
        return 1;
    }
    if (o->gpus == 1)
        o->split.kind = SPLIT_NONE;
    else if (o->split.kind == SPLIT_NONE)
        o->split.kind = SPLIT_DP;
    /* bf16 with offload over several devices: dp offloads as one device
       does (each rank its whole optimizer, bit-identical to no offload); a
       ZeRO shard of the masters with its bf16 copies' refresh from the host
       is not written yet (zero1/zero2 stop in passes/offload.c, zero3's
       program crashed under the emulator), nor tp's. */
    if (!strcmp(o->emit.precision, "bf16") && o->offload > 0 && o->gpus > 1 && o->split.kind != SPLIT_DP) {
        fprintf(stderr, "gcompile: error: --offload %s with --precision bf16 and --gpus %d is implemented for --split "
                "dp only (zero1-3 and tp with bf16 offload are not yet); use --split dp, or --precision fp32\n",
                offload_name(o->offload), o->gpus);
        return 1;
    }
    if (o->split.kind == SPLIT_AUTO) {     /* driver/split_auto.c plans each candidate in turn */
        o->split_auto = 1;
        o->split.kind = SPLIT_DP;
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

/* --micro-batches K (and tp under --split auto: N·B rows per rank): the
 * graph g was built with the batch's B rows; builds it again with B·N/K
 * rows per run of the step and frees g. NULL after an error. */
static Graph *build_micro(Ast *ast, const DriverOptions *o, Graph *g)
{
    long B = graph_dim(g, "B"), K = o->micro_batches > 1 ? o->micro_batches : 1;
    graph_free(g);
    if (B < 0) {
        fprintf(stderr, "gcompile: error: %s needs a dim named B (the batch's rows)\n",
                K > 1 ? "--micro-batches" : "--split auto's tensor-parallel candidate");
        return NULL;
    }
    if (o->tp_global_rows)   /* a group of tp ranks takes the rows of tp data ranks */
        B *= o->split.tp;
    if (B % K) {
        fprintf(stderr, "gcompile: error: --micro-batches %ld does not divide B = %ld\n", K, B);
        return NULL;
    }
    char *val = xasprintf("%ld", B / K);
    BuildOptions b = o->build;   /* the -D list plus B=B/K, which wins as the last */
    Define *defs = xmalloc((size_t)(b.ndefines + 1) * sizeof *defs);
    for (int i = 0; i < b.ndefines; i++)
        defs[i] = b.defines[i];
    defs[b.ndefines++] = (Define){"B", val};
    b.defines = defs;
    g = ir_build(ast, &b);
    free(defs);
    free(val);
    return g;
}

/* --recompute MODE or LIST: each layer's choice (rc_layers: a letter per
 * layer, else o->recompute for all); 1 after an error (a list of the wrong
 * length). */
static int recompute_layers(Graph *g, const DriverOptions *o)
{
    int n = graph_layers(g);
    if (o->rc_layers && (int)strlen(o->rc_layers) != n) {
        fprintf(stderr, "gcompile: error: --recompute %s names %zu layer%s; the graph has %d\n", o->rc_layers,
                strlen(o->rc_layers), strlen(o->rc_layers) == 1 ? "" : "s", n);
        return 1;
    }
    RecomputeChoice *choice = xmalloc((size_t)(n + 1) * sizeof *choice);
    for (int l = 0; l < n; l++)
        choice[l] = o->rc_layers ? driver_rc_choice(o->rc_layers[l]) : (RecomputeChoice)o->recompute;
    pass_recompute(g, choice, n);
    free(choice);
    return 0;
}

/* The passes from the AST up to (not including) the parallel split's
 * collectives, with the levers of o: micro_batches and a tensor-parallel
 * cut. NULL after reported errors. */
static Graph *front_prefix(Ast *ast, DriverOptions o)
{
    Graph *g = NULL;
    PASS(&o, "build", g = ir_build(ast, &o.build));
    if (!g)
        return NULL;
    if ((o.micro_batches > 1 || o.tp_global_rows) && !(g = build_micro(ast, &o, g)))
        return NULL;
    ir_verify(g);
    g->no_reuse = o.no_reuse;
    if (o.split.kind == SPLIT_TP) {
        int cut = 0;
        PASS(&o, "split-tp", cut = pass_split_tp(g, o.split.tp));
        if (!cut) {     /* under --split auto: a candidate that is not weighed */
            if (!o.split_auto)
                fprintf(stderr, "gcompile: error: --split tp=%d: no matmul pair can be cut over %d ranks (a column "
                        "matmul x @ Wᵀ whose following ops run on 1/%d of its output until a row matmul contracts "
                        "it; with GPT-2: the head count and 4·C must divide by %d; with Llama: NKV and F)\n", o.split.tp,
                        o.split.tp, o.split.tp, o.split.tp);
            graph_free(g);
            return NULL;
        }
        ir_verify(g);
    }
    PASS(&o, "autodiff", pass_autodiff(g));
    if (diag_count()) {
        graph_free(g);
        return NULL;
    }
    ir_verify(g);
    PASS(&o, "micro", pass_micro_batches(g, o.micro_batches));
    if (!(o.no_fuse & FUSE_BIAS)) {
        PASS(&o, "fuse", pass_fuse(g));
        ir_verify(g);
    }
    if (!(o.no_fuse & (FUSE_BIAS | FUSE_GELU))) {
        PASS(&o, "fuse-gelu", pass_fuse_gelu(g));
        ir_verify(g);
    }
    if (!(o.no_fuse & (FUSE_BIAS | FUSE_GELU | FUSE_BGRAD))) {
        PASS(&o, "fuse-bgrad", pass_fuse_bgrad(g));
        ir_verify(g);
    }
    if (!(o.no_fuse & FUSE_ATTENTION)) {
        PASS(&o, "fuse-att", pass_fuse_attention(g));
        ir_verify(g);
    }
    /* the fused classifier takes the d loss seed (1/K with micro-batches) as its `seed` */
    if (!(o.no_fuse & FUSE_CLASSIFIER)) {
        PASS(&o, "fuse-cls", pass_fuse_classifier(g, o.classifier_chunk));
        ir_verify(g);
    }
    if (!(o.no_fuse & FUSE_SWIGLU)) {
        PASS(&o, "fuse-swiglu", pass_fuse_swiglu(g));
        ir_verify(g);
    }
    if (!(o.no_fuse & FUSE_LAYERNORM)) {
        PASS(&o, "fuse-ln", pass_fuse_layernorm(g));
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
    return g;
}

/* front_prefix's graphs by what changes them within one gcompile run (the
 * budget search and --split auto lower the same prefix many times: once per
 * micro-batch count and split): the micro-batch count and the tensor-
 * parallel cut; the rest of the options is the run's. Copies are handed out. */
enum { FRONT_CACHE = 32 };
typedef struct FrontEntry { const Ast *ast; int K, tp, global; Graph *g; } FrontEntry;
static FrontEntry front_cache[FRONT_CACHE];
static int front_cached;

static Graph *cached_prefix(Ast *ast, const DriverOptions *o)
{
    int K = o->micro_batches > 1 ? o->micro_batches : 1, tp = o->split.kind == SPLIT_TP ? o->split.tp : 0;
    for (int i = 0; i < front_cached; i++) {
        const FrontEntry *e = &front_cache[i];
        if (e->ast == ast && e->K == K && e->tp == tp && e->global == o->tp_global_rows)
            return graph_clone(e->g);
    }
    Graph *g = front_prefix(ast, *o);
    if (g && front_cached < FRONT_CACHE) {
        front_cache[front_cached++] = (FrontEntry){ast, K, tp, o->tp_global_rows, g};
        return graph_clone(g);
    }
    return g;
}

static void front_cache_clear(void)
{
    for (int i = 0; i < front_cached; i++)
        graph_free(front_cache[i].g);
    front_cached = 0;
}

/* The passes from the AST up to the parallel split, with the levers of o
 * (micro_batches; not recompute): the prefix the budget search lowers once
 * per micro-batch count. NULL after reported errors. */
static Graph *lower_front(Ast *ast, DriverOptions o)
{
    Graph *g = cached_prefix(ast, &o);
    if (!g)
        return NULL;
    PASS(&o, "split", pass_split(g, &o.split));
    if (diag_count()) {
        graph_free(g);
        return NULL;
    }
    ir_verify(g);
    return g;
}

/* The rest of lower() on g from lower_front: recomputation, schedule and
 * the checked plan. Frees g and returns NULL after reported errors. The
 * budget search's screenings (bound_only) skip the IR verifier; every plan
 * (and plan_check) runs it. */
static Graph *lower_back(Graph *g, DriverOptions o)
{
#define VERIFY(g) do { if (!o.bound_only) ir_verify(g); } while (0)
    if (o.recompute > RC_NONE || o.rc_layers) {
        int bad = 0;
        PASS(&o, "recompute", bad = recompute_layers(g, &o));
        if (bad) {
            graph_free(g);
            return NULL;
        }
        VERIFY(g);
    }
    PASS(&o, "schedule", pass_schedule(g, o.schedule));
    if (!strcmp(o.emit.target, "cuda"))
        pass_workspace(g, (size_t)32 << 20);   /* cuBLASLt + reductions (gc_cuda.h) */
    VERIFY(g);
    if (o.offload > 0) {
        PASS(&o, "offload", pass_offload(g, o.offload));
        VERIFY(g);
    }
#undef VERIFY
    PASS(&o, "liveness", fill_liveness(g));
    if (o.bound_only) {        /* the budget search's screening: the arena's lower bound, no plan */
        fill_arena_lower_bound(g);
        return g;
    }
    PASS(&o, "memplan", pass_memplan(g));
    ir_verify(g);
    char err[512];
    PASS(&o, "plancheck", if (plan_check(g, err, sizeof err) != 0) IR_BUG("plan check failed: %s", err));
    return g;
}

/* The passes from the AST to a checked plan, with the levers of o
 * (micro_batches, recompute); NULL after reported errors. */
static Graph *lower(Ast *ast, DriverOptions o)
{
    Graph *g = lower_front(ast, o);
    return g ? lower_back(g, o) : NULL;
}

Graph *driver_lower(Ast *ast, const DriverOptions *o) { return lower(ast, *o); }
Graph *driver_lower_front(Ast *ast, const DriverOptions *o) { return lower_front(ast, *o); }
Graph *driver_lower_back(Graph *g, const DriverOptions *o) { return lower_back(g, *o); }

int main(int argc, char **argv)
{
    DriverOptions o = {
        .output = NULL, .schedule = SCHED_FUSED_OPT, .gpus = 1, .recompute = -1, .offload = -1, .classifier_chunk = 1024, .cc = "cc", .nvcc = "nvcc",
        .gpu_arch = "sm_80,sm_90", .mpicc = "mpicc", .interconnect = "nvlink",
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
    if (o.emit_kind && !strcmp(o.emit_kind, "budget-sweep")) {   /* the search at many budgets */
        rc = driver_budget_sweep(ast, &o);
        goto done;
    }
    if (o.split_auto)   /* every candidate split, each with the search's levers under --mem */
        PASS(&o, "split-auto", g = driver_split_auto(ast, &o));
    else if (o.emit.budget_bytes && o.recompute < 0 && o.micro_batches == 0)
        PASS(&o, "search", g = driver_search(ast, &o));
    else
        g = lower(ast, o);
    if (!g)
        goto done;
    PASS(&o, "costs", driver_predict(g, &o));
    if (driver_check_budget(g, &o))
        goto done;
    rc = o.emit_kind ? driver_emit(g, &o) : driver_build(g, &o);
done:
    graph_free(g);
    front_cache_clear();
    ast_free(ast);
    free(o.defines);
    free(o.search_layers);
    return rc;
}
