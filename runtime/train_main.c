/* train_main.c — gc_main(): everything in an emitted training program except
 * the kernels and the compiled step.
 *
 * Flags, the device regions (one allocation each, exactly the planned size),
 * parameter init or checkpoint load, the data loader, the training loop with
 * progress lines and a JSONL log, validation, checkpoint save, sampling and a
 * finite-difference gradient check of the compiled graph.
 *
 * The same file is linked into CUDA programs, so region memory is touched
 * only through gc_device_alloc/upload/download/sync; host copies live here.
 * Every user error is one line on stderr starting "error: " and exit 1.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "gc_runtime_internal.h"

static void download_floats(const gc_program *p, float *dst, const char *src, size_t n);

#ifndef GC_RUNTIME_VERSION
#define GC_RUNTIME_VERSION "0.1.0"
#endif

/* OpenBLAS's thread count, when OpenBLAS is linked in (weak: CUDA programs
 * may not link it, and then the call is skipped). */
extern void openblas_set_num_threads(int n) __attribute__((weak));

enum { DEFAULT_STEPS = 20, DEFAULT_VAL_BATCHES = 8, DEFAULT_GRADCHECK = 16 };
#define DEFAULT_SEED 1337
#define DEFAULT_GRADCHECK_TOL 1e-2
#define DEFAULT_GRADCHECK_H 1e-2

/* ---------------------------------------------------------------- options */

typedef struct {
    const char *data, *val_data, *init, *save, *log;
    long steps, val_every, val_batches, threads, sample, gradcheck;
    int profile;
    unsigned long long seed;
    float lr, beta1, beta2, eps, wd;
    double gc_tol, gc_h;
} options;

enum {
    OPT_DATA = 256, OPT_VAL_DATA, OPT_VAL_EVERY, OPT_VAL_BATCHES, OPT_INIT, OPT_SAVE,
    OPT_STEPS, OPT_LR, OPT_BETA1, OPT_BETA2, OPT_EPS, OPT_WD, OPT_SEED, OPT_LOG,
    OPT_THREADS, OPT_SAMPLE, OPT_PROFILE, OPT_GRADCHECK, OPT_GC_TOL, OPT_GC_H, OPT_HELP, OPT_VERSION
};

static const struct option long_opts[] = {
    {"data", required_argument, 0, OPT_DATA},
    {"val-data", required_argument, 0, OPT_VAL_DATA},
    {"val-every", required_argument, 0, OPT_VAL_EVERY},
    {"val-batches", required_argument, 0, OPT_VAL_BATCHES},
    {"init", required_argument, 0, OPT_INIT},
    {"save", required_argument, 0, OPT_SAVE},
    {"steps", required_argument, 0, OPT_STEPS},
    {"lr", required_argument, 0, OPT_LR},
    {"beta1", required_argument, 0, OPT_BETA1},
    {"beta2", required_argument, 0, OPT_BETA2},
    {"eps", required_argument, 0, OPT_EPS},
    {"weight-decay", required_argument, 0, OPT_WD},
    {"seed", required_argument, 0, OPT_SEED},
    {"log", required_argument, 0, OPT_LOG},
    {"threads", required_argument, 0, OPT_THREADS},
    {"sample", required_argument, 0, OPT_SAMPLE},
    {"profile", no_argument, 0, OPT_PROFILE},
    {"gradcheck", optional_argument, 0, OPT_GRADCHECK},
    {"gradcheck-tol", required_argument, 0, OPT_GC_TOL},
    {"gradcheck-h", required_argument, 0, OPT_GC_H},
    {"help", no_argument, 0, OPT_HELP},
    {"version", no_argument, 0, OPT_VERSION},
    {0, 0, 0, 0},
};

/* Prints "error: <message>" on stderr; returns the exit status 1. */
static int errorf(const char *fmt, ...)
{
    va_list ap;
    fputs("error: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

static void print_help(const char *argv0, const gc_program *p)
{
    printf("usage: %s [flags]\n"
           "Trains the graph %s (config %s, target %s) compiled by gcompile.\n\n",
           argv0, p->graph_file, p->config && *p->config ? p->config : "-", p->target);
    printf("  --data FILE          token shard to train on (default: the built-in byte-level corpus)\n"
           "  --val-data FILE      token shard for validation (default: none)\n"
           "  --val-every N        validate every N steps (default 0: only after the last step)\n"
           "  --val-batches N      batches per validation (default %d, or fewer if the shard holds fewer)\n"
           "  --init FILE          llm.c checkpoint to start from, version 3 or 5 (default: seeded init)\n"
           "  --save FILE          write an llm.c checkpoint (version 3) after training\n"
           "  --steps N            training steps (default %d)\n",
           DEFAULT_VAL_BATCHES, DEFAULT_STEPS);
    printf("  --lr X               AdamW learning rate (default %g)\n"
           "  --beta1 X            AdamW beta1 (default %g)\n"
           "  --beta2 X            AdamW beta2 (default %g)\n"
           "  --eps X              AdamW epsilon (default %g)\n"
           "  --weight-decay X     AdamW weight decay (default %g)\n",
           p->lr, p->beta1, p->beta2, p->eps, p->weight_decay);
    printf("  --seed N             seed for init, sampling and gradcheck (default %d)\n"
           "  --log FILE           write one JSON object per step to FILE (JSONL)\n"
           "  --threads N          OpenMP/OpenBLAS threads (default: OpenMP's default)\n"
           "  --sample N           after training, generate and print N tokens (default 0)\n"
           "  --profile            time every op (waiting for the device after each) and print\n"
           "                       ms/step, share and GFLOP/s per kernel and shape\n"
           "  --gradcheck[=N]      instead of training, check N gradient elements against\n"
           "                       finite differences of the loss (default N %d)\n"
           "  --gradcheck-tol X    largest relative error that passes (default %g)\n"
           "  --gradcheck-h X      perturbation, scaled by max(1,|param|) (default %g)\n"
           "  --help               this list\n"
           "  --version            program and runtime version\n",
           DEFAULT_SEED, DEFAULT_GRADCHECK, DEFAULT_GRADCHECK_TOL, DEFAULT_GRADCHECK_H);
    if (!strcmp(p->target, "cpu"))
        printf("\nenvironment: OMP_NUM_THREADS (as --threads); GC_CPU_GEMM=blas runs the matmuls\n"
               "with OpenBLAS instead of the built-in AVX-512 GEMM (used when the CPU has AVX-512).\n");
}

static const char *flag_name(int code)
{
    for (const struct option *o = long_opts; o->name; o++)
        if (o->val == code)
            return o->name;
    return "?";
}

/* A whole-string integer in [lo, hi]. */
static int parse_long(int code, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return errorf("--%s: bad value '%s' (expected an integer in [%ld, %ld])", flag_name(code), s, lo, hi);
    *out = v;
    return 0;
}

enum { NUM_NONNEG, NUM_POS, NUM_UNIT };   /* >= 0, > 0, [0, 1) */

/* A whole-string finite number of the given kind. */
static int parse_num(int code, const char *s, int kind, double *out)
{
    static const char *const want[] = {"a number >= 0", "a number > 0", "a number in [0, 1)"};
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    int ok = !errno && end != s && !*end && isfinite(v);
    ok = ok && (kind == NUM_NONNEG ? v >= 0 : kind == NUM_POS ? v > 0 : v >= 0 && v < 1);
    if (!ok)
        return errorf("--%s: bad value '%s' (expected %s)", flag_name(code), s, want[kind]);
    *out = v;
    return 0;
}

static int parse_float(int code, const char *s, int kind, float *out)
{
    double v;
    if (parse_num(code, s, kind, &v))
        return 1;
    *out = (float)v;
    return 0;
}

static int parse_seed(const char *s, unsigned long long *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || *s == '-' || *s == '+')
        return errorf("--seed: bad value '%s' (expected a non-negative integer)", s);
    *out = v;
    return 0;
}

static int is_uint(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
}

static void default_options(options *o, const gc_program *p)
{
    memset(o, 0, sizeof *o);
    o->steps = DEFAULT_STEPS;
    o->seed = DEFAULT_SEED;
    o->lr = p->lr, o->beta1 = p->beta1, o->beta2 = p->beta2, o->eps = p->eps, o->wd = p->weight_decay;
    o->gc_tol = DEFAULT_GRADCHECK_TOL;
    o->gc_h = DEFAULT_GRADCHECK_H;
}

/* One flag with its value; returns 0 or the exit status 1. */
static int apply_flag(options *o, int code, const char *arg)
{
    const long BIG = 2147483647L;
    switch (code) {
    case OPT_DATA: o->data = arg; return 0;
    case OPT_VAL_DATA: o->val_data = arg; return 0;
    case OPT_INIT: o->init = arg; return 0;
    case OPT_SAVE: o->save = arg; return 0;
    case OPT_LOG: o->log = arg; return 0;
    case OPT_VAL_EVERY: return parse_long(code, arg, 0, BIG, &o->val_every);
    case OPT_VAL_BATCHES: return parse_long(code, arg, 1, BIG, &o->val_batches);
    case OPT_STEPS: return parse_long(code, arg, 0, BIG, &o->steps);
    case OPT_THREADS: return parse_long(code, arg, 1, 4096, &o->threads);
    case OPT_SAMPLE: return parse_long(code, arg, 0, BIG, &o->sample);
    case OPT_PROFILE: o->profile = 1; return 0;
    case OPT_GRADCHECK: return arg ? parse_long(code, arg, 1, 1000000, &o->gradcheck)
                                   : (o->gradcheck = DEFAULT_GRADCHECK, 0);
    case OPT_LR: return parse_float(code, arg, NUM_NONNEG, &o->lr);
    case OPT_BETA1: return parse_float(code, arg, NUM_UNIT, &o->beta1);
    case OPT_BETA2: return parse_float(code, arg, NUM_UNIT, &o->beta2);
    case OPT_EPS: return parse_float(code, arg, NUM_POS, &o->eps);
    case OPT_WD: return parse_float(code, arg, NUM_NONNEG, &o->wd);
    case OPT_GC_TOL: return parse_num(code, arg, NUM_POS, &o->gc_tol);
    case OPT_GC_H: return parse_num(code, arg, NUM_POS, &o->gc_h);
    case OPT_SEED: return parse_seed(arg, &o->seed);
    }
    return errorf("internal: unhandled flag %d", code);
}

enum { PARSE_RUN = -1, PARSE_EXIT_OK = 0, PARSE_EXIT_ERR = 1 };

/* Fills o from argv. Returns PARSE_RUN, or an exit status after --help,
 * --version or an error. */
static int parse_flags(options *o, int argc, char **argv, const gc_program *p)
{
    default_options(o, p);
    opterr = 0;
    optind = 1;
    int code;
    while ((code = getopt_long(argc, argv, "+:h", long_opts, NULL)) != -1) {
        const char *arg = optarg;
        if (code == '?')
            return errorf("unknown flag '%s' (see --help)", argv[optind - 1]);
        if (code == ':')
            return errorf("flag '%s' needs a value", argv[optind - 1]);
        if (code == 'h' || code == OPT_HELP) {
            print_help(argv[0], p);
            return PARSE_EXIT_OK;
        }
        if (code == OPT_VERSION) {
            printf("%s: graph %s, config %s, target %s; gcompile runtime %s\n", argv[0],
                   p->graph_file, p->config && *p->config ? p->config : "-", p->target,
                   GC_RUNTIME_VERSION);
            return PARSE_EXIT_OK;
        }
        if (code == OPT_GRADCHECK && !arg && optind < argc && is_uint(argv[optind]))
            arg = argv[optind++];   /* "--gradcheck 32" as well as "--gradcheck=32" */
        if (apply_flag(o, code, arg))
            return PARSE_EXIT_ERR;
    }
    if (optind < argc)
        return errorf("unexpected argument '%s' (see --help)", argv[optind]);
    if (o->val_every > 0 && !o->val_data)
        return errorf("--val-every needs --val-data");
    return PARSE_RUN;
}

/* ---------------------------------------------------------------- the program table */

/* [off, off+bytes) must lie inside a region of `size` bytes. */
static int in_region(size_t off, double bytes, size_t size)
{
    return (double)off + bytes <= (double)size;
}

static int micro_batches(const gc_program *p) { return p->micro_batches > 1 ? p->micro_batches : 1; }

/* Checks what gc_main relies on in the emitted table; a failure is a
 * compiler bug, reported as an internal error. */
static int check_program(const gc_program *p, const options *o)
{
    size_t arena = p->region_bytes[GC_REGION_ARENA];
    double bt = (double)p->B * (double)p->T;
    if (!p->run || p->B <= 0 || p->T <= 0 || p->V <= 0 || p->nparam_elems < 0 || p->nparams < 0)
        return errorf("internal: program table lacks run, B, T or V");
    for (int i = 0; i < p->nparams; i++) {
        const gc_param_info *q = &p->params[i];
        if (q->offset < 0 || q->numel < 0 || q->offset + q->numel > p->nparam_elems)
            return errorf("internal: parameter %s [%ld, +%ld) lies outside the %ld parameter elements",
                          q->name, q->offset, q->numel, p->nparam_elems);
    }
    if (!in_region(0, 4.0 * (double)p->nparam_elems, p->region_bytes[GC_REGION_PARAMS]))
        return errorf("internal: params region (%zu bytes) is smaller than %ld parameters",
                      p->region_bytes[GC_REGION_PARAMS], p->nparam_elems);
    if (!in_region(p->tokens_off, 4 * bt, arena) || !in_region(p->targets_off, 4 * bt, arena) ||
        !in_region(p->loss_off, 4, arena))
        return errorf("internal: tokens, targets or loss lie outside the arena (%zu bytes)", arena);
    if (o->sample > 0 && (p->logits_cols < p->V || !in_region(p->logits_off, (p->bf16 ? 2 : 4) * bt * (double)p->logits_cols, arena)))
        return errorf("--sample: this program exposes no [B, T, %ld] logits tensor in its arena", p->V);
    return 0;
}

/* ---------------------------------------------------------------- run state */

typedef struct {
    const gc_program *prog;
    options o;
    long BT;
    gc_ctx ctx;
    float *params;                 /* host copy of the params region */
    int32_t *inputs, *targets;     /* host batch, B*T each */
    gcrt_shard train, val;
    int have_val;
    FILE *log;
    double *prof;                  /* --profile: seconds per category over steps 2.. */
} state;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

void gc_prof_mark(gc_ctx *ctx, int k)
{
    gc_device_sync();
    double t = now_ms() * 1e-3;
    if (k >= 0)
        ctx->prof[k] += t - ctx->prof_t0;
    ctx->prof_t0 = t;
}

/* The --profile table: categories by time, largest first. */
static void print_profile(const state *st, long nsteps, double step_ms)
{
    const gc_program *p = st->prog;
    int *order = malloc((size_t)(p->nprof + 1) * sizeof *order);
    if (!order)
        return;
    double ops_ms = 0;
    for (int k = 0; k < p->nprof; k++) {   /* insertion sort: a few dozen categories */
        int i = k;
        for (; i > 0 && st->prof[order[i - 1]] < st->prof[k]; i--)
            order[i] = order[i - 1];
        order[i] = k;
        ops_ms += 1e3 * st->prof[k] / (double)nsteps;
    }
    printf("profile: %d kernels and shapes, mean over %ld step%s: step %.1f ms = ops %.1f ms + outside ops %.1f ms\n",
           p->nprof, nsteps, nsteps == 1 ? "" : "s", step_ms, ops_ms, step_ms - ops_ms);
    printf("  %9s %6s %6s %9s  %s\n", "ms/step", "%", "calls", "GFLOP/s", "phase kernel shape");
    for (int i = 0; i < p->nprof; i++) {
        int k = order[i];
        double ms = 1e3 * st->prof[k] / (double)nsteps;
        printf("  %9.2f %6.1f %6d ", ms, step_ms > 0 ? 100.0 * ms / step_ms : 0.0, p->prof_calls[k]);
        if (p->prof_flops[k] > 0 && ms > 0)
            printf("%9.1f", p->prof_flops[k] / (ms * 1e-3) / 1e9);
        else
            printf("%9s", "-");
        printf("  %s\n", p->prof_label[k]);
    }
    free(order);
}

static void set_threads(long n)
{
    if (n <= 0)
        return;
#ifdef _OPENMP
    omp_set_num_threads((int)n);
#endif
    if (openblas_set_num_threads)
        openblas_set_num_threads((int)n);
}

static int max_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static size_t total_region_bytes(const gc_program *p)
{
    size_t s = 0;
    for (int r = 0; r < GC_NREGIONS; r++)
        s += p->region_bytes[r];
    return s;
}

/* 1234567 -> "1,234,567" */
static const char *grouped(long long v, char *buf, size_t len)
{
    char raw[32];
    int n = snprintf(raw, sizeof raw, "%lld", v < 0 ? -v : v);
    size_t k = 0;
    if (v < 0 && k + 1 < len)
        buf[k++] = '-';
    for (int i = 0; i < n && k + 2 < len; i++) {
        buf[k++] = raw[i];
        if ((n - i - 1) % 3 == 0 && i != n - 1)
            buf[k++] = ',';
    }
    buf[k] = 0;
    return buf;
}

static void print_header(const gc_program *p)
{
    char b1[32], b2[32];
    printf("gcompile program: %s | config %s | target %s | runtime %s\n", p->graph_file,
           p->config && *p->config ? p->config : "-", p->target, GC_RUNTIME_VERSION);
    static const char *const names[8] = {"B", "T", "maxT", "V", "Vp", "L", "NH", "C"};
    long dims[8] = {p->B, p->T, p->maxT, p->V, p->Vp, p->L, p->NH, p->C};
    printf("dims:");
    for (int i = 0; i < 8; i++)
        if (dims[i])
            printf(" %s=%ld", names[i], dims[i]);
    if (micro_batches(p) > 1)
        printf(" | %d micro-batches of B rows per step (batch %ld rows)", micro_batches(p), p->B * micro_batches(p));
    printf("\nparameters: %s in %d tensors\n", grouped(p->nparam_elems, b1, sizeof b1), p->nparams);
    printf("plan: %s\n", p->plan_summary ? p->plan_summary : "-");
    printf("memory: %s bytes in regions params %zu | grads %zu | optstate %zu | arena %zu\n",
           grouped((long long)total_region_bytes(p), b2, sizeof b2), p->region_bytes[0],
           p->region_bytes[1], p->region_bytes[2], p->region_bytes[3]);
    printf("device: %s | threads %d\n", gc_device_name(), max_threads());
}

/* On a device that knows its free memory the plan must fit, or nothing starts. */
static int check_fits(const gc_program *p)
{
    size_t need = total_region_bytes(p), avail = gc_device_free_bytes();
    if (avail > 0 && need > avail)
        return errorf("the plan needs %zu bytes of device memory but %s has only %zu bytes free",
                      need, gc_device_name(), avail);
    return 0;
}

static int open_data(state *st)
{
    const gc_program *p = st->prog;
    char err[512];
    int rc;
    if (st->o.data) {
        rc = gcrt_shard_open(&st->train, st->o.data, st->BT + 1, p->V, err, sizeof err);
    } else {
        if (p->V < 256)
            return errorf("the built-in corpus is byte-level and needs V >= 256, but this program has V = %ld; "
                          "pass --data FILE or compile with V >= 256", p->V);
        size_t n;
        const char *text = gcrt_corpus(&n);
        rc = gcrt_shard_from_text(&st->train, "built-in corpus", text, n, st->BT + 1, p->V, err, sizeof err);
    }
    if (rc == 0 && st->o.val_data) {
        rc = gcrt_shard_open(&st->val, st->o.val_data, st->BT + 1, p->V, err, sizeof err);
        st->have_val = rc == 0;
    }
    if (rc != 0)
        return errorf("%s", err);
    printf("data: %s (%ld tokens, %ld batches of B*T = %ld)\n", st->train.name, st->train.ntok,
           gcrt_shard_nbatches(&st->train, st->BT), st->BT);
    if (st->have_val)
        printf("val data: %s (%ld tokens, %ld batches)\n", st->val.name, st->val.ntok,
               gcrt_shard_nbatches(&st->val, st->BT));
    return 0;
}

static int open_outputs(state *st)
{
    char err[512];
    if (st->o.save && gcrt_ckpt_probe(st->o.save, err, sizeof err) != 0)
        return errorf("%s", err);
    if (st->o.log) {
        st->log = fopen(st->o.log, "w");
        if (!st->log)
            return errorf("%s: cannot open log: %s", st->o.log, strerror(errno));
    }
    return 0;
}

/* Seeded init in declaration order: zeros, ones or normal(0, std). */
static void init_params(float *w, const gc_program *p, unsigned long long seed)
{
    gcrt_rng r;
    gcrt_rng_seed(&r, seed, GCRT_STREAM_INIT);
    memset(w, 0, (size_t)p->nparam_elems * sizeof *w);
    for (int i = 0; i < p->nparams; i++) {
        const gc_param_info *q = &p->params[i];
        float *x = w + q->offset;
        for (long k = 0; k < q->numel; k++)
            x[k] = q->init == GC_INIT_ONES ? 1.0f
                 : q->init == GC_INIT_NORMAL ? (float)(q->std * gcrt_rng_normal(&r)) : 0.0f;
    }
}

static int prepare_params(state *st)
{
    const gc_program *p = st->prog;
    st->params = malloc((size_t)(p->nparam_elems ? p->nparam_elems : 1) * sizeof(float));
    if (!st->params)
        return errorf("cannot allocate %ld parameters on the host", p->nparam_elems);
    if (!st->o.init) {
        init_params(st->params, p, st->o.seed);
        printf("init: seeded (seed %llu)\n", st->o.seed);
        return 0;
    }
    char err[512];
    if (gcrt_ckpt_load(st->params, p, st->o.init, err, sizeof err) != 0)
        return errorf("%s", err);
    printf("init: %s\n", st->o.init);
    return 0;
}

/* One allocation per region, exactly the planned size: the plan is the allocation. */
static void alloc_regions(state *st)
{
    const gc_program *p = st->prog;
    size_t before = gc_device_free_bytes();
    for (int r = 0; r < GC_NREGIONS; r++)
        st->ctx.region[r] = p->region_bytes[r] ? gc_device_alloc(p->region_bytes[r]) : NULL;
    size_t after = gc_device_free_bytes();
    if (before > 0)     /* a device that reports free memory: planned vs measured */
        printf("device memory: planned %zu bytes, measured %zu bytes (free memory before - after allocating)\n",
               total_region_bytes(p), before - after);
    if (p->nparam_elems)
        gc_device_upload(st->ctx.region[GC_REGION_PARAMS], st->params, (size_t)p->nparam_elems * 4);
    st->ctx.lr = st->o.lr, st->ctx.beta1 = st->o.beta1, st->ctx.beta2 = st->o.beta2;
    st->ctx.eps = st->o.eps, st->ctx.weight_decay = st->o.wd;
    st->ctx.t = 1;
}

static void release(state *st)
{
    for (int r = 0; r < GC_NREGIONS; r++)
        if (st->ctx.region[r])
            gc_device_free(st->ctx.region[r]);
    gcrt_shard_close(&st->train);
    gcrt_shard_close(&st->val);
    if (st->log)
        fclose(st->log);
    free(st->params);
    free(st->prof);
    free(st->inputs);
    free(st->targets);
}

/* ---------------------------------------------------------------- one step */

/* Uploads micro-batch k's rows of the batch (all of it when there is one). */
static void upload_micro(state *st, int k)
{
    char *arena = st->ctx.region[GC_REGION_ARENA];
    size_t n = (size_t)(st->BT / micro_batches(st->prog)), bytes = n * sizeof(int32_t);
    gc_device_upload(arena + st->prog->tokens_off, st->inputs + (size_t)k * n, bytes);
    gc_device_upload(arena + st->prog->targets_off, st->targets + (size_t)k * n, bytes);
}

static float read_loss(state *st)
{
    float loss;
    gc_device_sync();
    gc_device_download(&loss, st->ctx.region[GC_REGION_ARENA] + st->prog->loss_off, sizeof loss);
    return loss;
}

/* The given phases on the uploaded batch: one run per micro-batch (the
 * optimizer only with the last); returns the mean loss over the batch. */
static float run_micro_batches(state *st, int phases)
{
    int K = micro_batches(st->prog);
    if (K == 1) {
        upload_micro(st, 0);
        st->ctx.micro = 0;
        st->prog->run(&st->ctx, phases);
        return read_loss(st);
    }
    double sum = 0;
    for (int k = 0; k < K; k++) {
        upload_micro(st, k);
        st->ctx.micro = k;
        st->prog->run(&st->ctx, k == K - 1 ? phases : phases & ~GC_PHASE_OPT);
        sum += read_loss(st);
    }
    st->ctx.micro = 0;
    return (float)(sum / K);
}

/* Next batch of sh, then the given phases; returns the loss. */
static float run_batch(state *st, gcrt_shard *sh, int phases)
{
    gcrt_shard_next(sh, st->inputs, st->targets, st->BT);
    return run_micro_batches(st, phases);
}

/* Mean forward loss over the first --val-batches batches of the val shard. */
static int validate(state *st, double *out)
{
    long n = st->o.val_batches;
    if (n == 0) {
        n = gcrt_shard_nbatches(&st->val, st->BT);
        n = n < DEFAULT_VAL_BATCHES ? n : DEFAULT_VAL_BATCHES;
    }
    st->val.pos = 0;
    double sum = 0;
    for (long i = 0; i < n; i++)
        sum += run_batch(st, &st->val, GC_PHASE_FWD);
    *out = sum / (double)n;
    if (!isfinite(*out))
        return errorf("validation: loss is %s", isnan(*out) ? "nan" : "inf");
    return 0;
}

static void report_step(state *st, long step, float loss, double ms, double val)
{
    const gc_program *p = st->prog;
    double tps = (double)st->BT / (ms / 1e3), peak = gc_device_peak_flops(p->bf16);
    printf("step %4ld/%ld | loss %.6f | %.1f ms | %.0f tok/s", step, st->o.steps, loss, ms, tps);
    if (peak > 0 && p->flops_per_step > 0)
        printf(" | MFU %.1f%%", 100.0 * p->flops_per_step / (ms / 1e3) / peak);
    if (!isnan(val))
        printf(" | val loss %.6f", val);
    putchar('\n');
    fflush(stdout);
    if (!st->log)
        return;
    fprintf(st->log, "{\"step\":%ld,\"loss\":%.9g,\"ms\":%.3f,\"tok_per_s\":%.1f", step, loss, ms, tps);
    if (!isnan(val))
        fprintf(st->log, ",\"val_loss\":%.9g", val);
    fputs("}\n", st->log);
    fflush(st->log);
}

static int want_val(const state *st, long step)
{
    long every = st->o.val_every;
    return st->have_val && ((every > 0 && step % every == 0) || step == st->o.steps);
}

static int train(state *st)
{
    double sum_ms = 0;
    if (st->o.profile && st->prog->nprof > 0 &&
        !(st->prof = calloc((size_t)st->prog->nprof, sizeof *st->prof)))
        return errorf("--profile: out of memory");
    for (long step = 1; step <= st->o.steps; step++) {
        double t0 = now_ms();
        st->ctx.t = (int)step;
        st->ctx.prof = st->prof;
        float loss = run_batch(st, &st->train, GC_PHASE_FWD | GC_PHASE_BWD | GC_PHASE_OPT);
        double ms = now_ms() - t0, val = NAN;
        st->ctx.prof = NULL;
        if (st->prof && step == 1 && st->o.steps > 1)    /* step 1 pays first-touch page faults */
            memset(st->prof, 0, (size_t)st->prog->nprof * sizeof *st->prof);
        if (!isfinite(loss))
            return errorf("step %ld: loss is %s", step, isnan(loss) ? "nan" : "inf");
        if (want_val(st, step) && validate(st, &val))
            return 1;
        report_step(st, step, loss, ms, val);
        if (step > 1 || st->o.steps == 1)
            sum_ms += ms;
    }
    if (st->o.steps > 0) {
        double mean = sum_ms / (double)(st->o.steps > 1 ? st->o.steps - 1 : 1);
        printf("done: %ld steps | %.1f ms/step | %.0f tok/s%s\n", st->o.steps, mean,
               (double)st->BT / (mean / 1e3), st->o.steps > 1 ? " (mean over steps 2..)" : "");
        if (st->prof)
            print_profile(st, st->o.steps > 1 ? st->o.steps - 1 : 1, mean);
    } else if (st->have_val) {
        double val;
        if (validate(st, &val))
            return 1;
        printf("val loss %.6f\n", val);
        if (st->log) {
            fprintf(st->log, "{\"step\":0,\"val_loss\":%.9g}\n", val);
            fflush(st->log);
        }
    }
    return 0;
}

static int save(state *st)
{
    const gc_program *p = st->prog;
    char err[512];
    if (p->nparam_elems)
        gc_device_download(st->params, st->ctx.region[GC_REGION_PARAMS], (size_t)p->nparam_elems * 4);
    if (gcrt_ckpt_save(st->o.save, p, st->params, err, sizeof err) != 0)
        return errorf("%s", err);
    printf("saved %s (%lld bytes)\n", st->o.save, GCRT_HEADER_BYTES + 4LL * p->nparam_elems);
    return 0;
}

/* ---------------------------------------------------------------- sampling */

/* Draws from softmax(logits[0..V)) with r; -1 when the logits are not finite. */
static long draw(const float *logits, long V, gcrt_rng *r)
{
    double mx = -INFINITY, sum = 0;
    for (long i = 0; i < V; i++) {
        if (isnan(logits[i]))
            return -1;
        mx = logits[i] > mx ? logits[i] : mx;
    }
    if (!isfinite(mx))
        return -1;
    for (long i = 0; i < V; i++)
        sum += exp(logits[i] - mx);
    double u = gcrt_rng_uniform(r) * sum, acc = 0;
    for (long i = 0; i < V; i++) {
        acc += exp(logits[i] - mx);
        if (u < acc)
            return i;
    }
    return V - 1;
}

static void emit_token(long tok, long i, int byte_level)
{
    if (!byte_level)
        printf("%s%ld", i ? " " : "", tok);
    else
        putchar(tok == '\n' || tok == '\t' || (tok >= 32 && tok < 127) ? (int)tok : '?');
}

/* Generates o.sample tokens from batch row 0, one forward per token, with a
 * sliding window of T tokens. Other rows and all targets stay 0. */
static int sample(state *st)
{
    const gc_program *p = st->prog;
    long T = p->T, V = p->V, cols = p->logits_cols;
    int byte_level = V <= 256;
    char *arena = st->ctx.region[GC_REGION_ARENA];
    float *row = malloc((size_t)cols * sizeof *row);
    if (!row)
        return errorf("cannot allocate a logits row");
    memset(st->inputs, 0, (size_t)st->BT * sizeof(int32_t));
    memset(st->targets, 0, (size_t)st->BT * sizeof(int32_t));
    st->inputs[0] = byte_level ? '\n' : (50256 < V ? 50256 : 0);
    long pos = 1;
    gcrt_rng r;
    gcrt_rng_seed(&r, st->o.seed, GCRT_STREAM_SAMPLE);
    printf("--- sample: %ld tokens, seed %llu ---\n", st->o.sample, st->o.seed);
    for (long i = 0; i < st->o.sample; i++) {
        upload_micro(st, 0);
        p->run(&st->ctx, GC_PHASE_FWD);
        gc_device_sync();
        download_floats(p, row, arena + p->logits_off + (size_t)(pos - 1) * (size_t)cols * (p->bf16 ? 2 : 4),
                        (size_t)cols);
        long tok = draw(row, V, &r);
        if (tok < 0) {
            free(row);
            putchar('\n');
            return errorf("sample: token %ld: the logits are not finite", i + 1);
        }
        if (pos == T) {
            memmove(st->inputs, st->inputs + 1, (size_t)(T - 1) * sizeof(int32_t));
            pos = T - 1;
        }
        st->inputs[pos++] = (int32_t)tok;
        emit_token(tok, i, byte_level);
    }
    putchar('\n');
    fflush(stdout);
    free(row);
    return 0;
}

/* ---------------------------------------------------------------- gradient check */

typedef struct {
    int param;
    long idx;          /* element within the parameter */
    double an, fd, err;
} check;

static int chosen(const check *c, long k, int param, long idx)
{
    for (long i = 0; i < k; i++)
        if (c[i].param == param && c[i].idx == idx)
            return 1;
    return 0;
}

/* N elements spread over the parameters (round robin, or evenly spaced
 * tensors when N < nparams); within a tensor the candidate with the largest
 * |gradient| of 32 random ones not chosen before, so checks are not wasted on
 * exact zeros (e.g. embedding rows of tokens absent from the batch). */
static int pick_elements(check *c, long n, const gc_program *p, const float *g, gcrt_rng *r)
{
    int np = 0, *nz = malloc((size_t)(p->nparams ? p->nparams : 1) * sizeof *nz);
    for (int i = 0; nz && i < p->nparams; i++)
        if (p->params[i].numel > 0)
            nz[np++] = i;
    if (!nz || np == 0) {
        free(nz);
        return -1;
    }
    for (long k = 0; k < n; k++) {
        int pi = nz[n >= np ? k % np : (int)(k * np / n)];
        const gc_param_info *q = &p->params[pi];
        long best = -1;
        for (int t = 0; t < 32; t++) {
            long cand = gcrt_rng_below(r, q->numel);
            if (best < 0 || (!chosen(c, k, pi, cand) &&
                             (chosen(c, k, pi, best) || fabsf(g[q->offset + cand]) > fabsf(g[q->offset + best]))))
                best = cand;
        }
        c[k] = (check){.param = pi, .idx = best};
    }
    free(nz);
    return 0;
}

/* Loss of a forward pass on the current batch with parameter element k set
 * to v. The batch is uploaded again: the plan may reuse the bytes of tokens
 * and targets once the step is done with them. */
static double loss_at(state *st, long k, float v)
{
    gc_device_upload(st->ctx.region[GC_REGION_PARAMS] + (size_t)k * 4, &v, 4);
    return run_micro_batches(st, GC_PHASE_FWD);
}

/* Central difference with the step the float parameter really took; the
 * parameter is restored bit-exactly afterwards. */
static double finite_diff(state *st, long k, double h)
{
    float p0 = st->params[k];
    float hi = (float)(p0 + h * fmax(1.0, fabs(p0)));
    float lo = (float)(p0 - h * fmax(1.0, fabs(p0)));
    double fp = loss_at(st, k, hi), fm = loss_at(st, k, lo);
    gc_device_upload(st->ctx.region[GC_REGION_PARAMS] + (size_t)k * 4, &p0, 4);
    return (fp - fm) / ((double)hi - (double)lo);
}

/* The fp32 rounding noise of a central difference: each loss is rounded to
 * within |loss|*2^-24, so (f+ - f-)/2h is uncertain by about |loss|*2^-24/h. */
static double fd_noise(double loss, double h) { return fabs(loss) * 0x1p-24 / h; }

/* Relative error with a denominator floor tied to the noise: err < tol
 * exactly when |an - fd| < max(tol * max(|an|, |fd|), 10 * noise), i.e. a
 * difference passes when it is small relative to the gradient or when it is
 * within ten times the rounding noise of the finite difference. */
static double rel_error(double an, double fd, double noise, double tol)
{
    double den = fmax(fmax(fabs(an), fabs(fd)), 10.0 * noise / tol);
    return den > 0 ? fabs(an - fd) / den : 0.0;
}

static void print_check(const check *c, long k, const gc_program *p)
{
    printf("%4ld  %-20s %10ld  %14.6e  %14.6e  %9.2e\n", k + 1, p->params[c->param].name, c->idx,
           c->an, c->fd, c->err);
}

/* Downloads n values that are fp32, or bf16 when the program is bf16, as floats. */
static void download_floats(const gc_program *p, float *dst, const char *src, size_t n)
{
    if (!p->bf16) {
        gc_device_download(dst, src, n * 4);
        return;
    }
    uint16_t *tmp = malloc((n ? n : 1) * sizeof *tmp);
    if (!tmp) {
        fprintf(stderr, "error: out of host memory\n");
        exit(1);
    }
    gc_device_download(tmp, src, n * 2);
    for (size_t i = 0; i < n; i++) {
        uint32_t bits = (uint32_t)tmp[i] << 16;
        memcpy(&dst[i], &bits, 4);
    }
    free(tmp);
}

static int gradcheck(state *st)
{
    const gc_program *p = st->prog;
    long n = st->o.gradcheck, N = p->nparam_elems;
    if (p->region_bytes[GC_REGION_GRADS] < (size_t)N * 4)
        return errorf("--gradcheck: the grads region (%zu bytes) does not hold all %ld parameter gradients%s",
                      p->region_bytes[GC_REGION_GRADS], N,
                      p->region_bytes[GC_REGION_GRADS] ? "" :
                      " (this program updates each parameter inside the backward pass and keeps gradients"
                      " in the arena; compile with --schedule plain to check gradients)");
    float *g = malloc((size_t)(N ? N : 1) * sizeof *g);
    check *c = malloc((size_t)n * sizeof *c);
    gcrt_rng r;
    gcrt_rng_seed(&r, st->o.seed, GCRT_STREAM_GRADCHECK);
    double loss = run_batch(st, &st->train, GC_PHASE_FWD | GC_PHASE_BWD);
    if (g && N)
        gc_device_download(g, st->ctx.region[GC_REGION_GRADS], (size_t)N * 4);   /* fp32 in both precisions */
    if (!g || !c || !isfinite(loss) || pick_elements(c, n, p, g, &r) != 0) {
        free(g), free(c);
        return errorf("--gradcheck: %s", !isfinite(loss) ? "the loss is not finite" : "no parameters to check");
    }
    double noise = fd_noise(loss, st->o.gc_h);
    printf("gradcheck: %ld elements | loss %.6f | h %g*max(1,|p|) | passes when |analytic - numeric| < "
           "max(%g * |gradient|, 10 * fd noise = %.2g)\n", n, loss, st->o.gc_h, st->o.gc_tol, 10 * noise);
    printf("%4s  %-20s %10s  %14s  %14s  %9s\n", "#", "param", "index", "analytic", "numeric", "rel err");
    long worst = 0;
    for (long k = 0; k < n; k++) {
        long e = p->params[c[k].param].offset + c[k].idx;
        c[k].an = g[e];
        c[k].fd = finite_diff(st, e, st->o.gc_h);
        c[k].err = rel_error(c[k].an, c[k].fd, noise, st->o.gc_tol);
        if (!isnan(c[worst].err) && !(c[k].err <= c[worst].err))   /* NaN is the worst */
            worst = k;
        print_check(&c[k], k, p);
    }
    const check *w = &c[worst];
    printf("gradcheck: %ld elements, worst relative error %.3g (param %s[%ld])\n", n, w->err,
           p->params[w->param].name, w->idx);
    int rc = w->err < st->o.gc_tol ? 0
           : errorf("gradcheck failed: worst relative error %.3g >= tolerance %g (param %s[%ld])",
                    w->err, st->o.gc_tol, p->params[w->param].name, w->idx);
    free(g), free(c);
    return rc;
}

/* ---------------------------------------------------------------- gc_main */

/* Everything after the flags: returns the exit status. */
static int run_program(state *st)
{
    const gc_program *p = st->prog;
    char err[512] = "";
    if (check_program(p, &st->o))
        return 1;
    set_threads(st->o.threads);
    if (gc_device_init(err, sizeof err) != 0)
        return errorf("%s", *err ? err : "device initialisation failed");
    print_header(p);
    if (check_fits(p) || open_data(st) || open_outputs(st) || prepare_params(st))
        return 1;
    st->inputs = calloc((size_t)st->BT, sizeof(int32_t));
    st->targets = calloc((size_t)st->BT, sizeof(int32_t));
    if (!st->inputs || !st->targets)
        return errorf("cannot allocate a batch of %ld tokens", st->BT);
    alloc_regions(st);
    fflush(stdout);
    if (st->o.gradcheck)
        return gradcheck(st);
    if (train(st) || (st->o.save && save(st)) || (st->o.sample && sample(st)))
        return 1;
    return 0;
}

int gc_main(int argc, char **argv, const gc_program *prog)
{
    state st;
    memset(&st, 0, sizeof st);
    st.prog = prog;
    int rc = parse_flags(&st.o, argc, argv, prog);
    if (rc != PARSE_RUN)
        return rc;
    st.BT = prog->B * prog->T * micro_batches(prog);   /* B: the micro-batch's rows */
    rc = run_program(&st);
    fflush(stdout);
    release(&st);
    return rc;
}
