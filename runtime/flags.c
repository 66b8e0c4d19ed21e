/* flags.c — the emitted program's command line: the flag table, --help,
 * --version, and the parsing of every value (whole-string numbers in range,
 * one-line errors that name the flag).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gc_runtime_internal.h"

enum { DEFAULT_STEPS = 20, DEFAULT_GRADCHECK = 16 };
#define DEFAULT_SEED 1337
#define DEFAULT_GRADCHECK_TOL 2e-3
#define DEFAULT_GRADCHECK_H 2e-3
#define DEFAULT_COMM_TIMEOUT 900.0

enum {
    OPT_DATA = 256, OPT_VAL_DATA, OPT_VAL_EVERY, OPT_VAL_BATCHES, OPT_INIT, OPT_SAVE,
    OPT_STEPS, OPT_LR, OPT_BETA1, OPT_BETA2, OPT_EPS, OPT_WD, OPT_SEED, OPT_LOG,
    OPT_THREADS, OPT_SAMPLE, OPT_PROFILE, OPT_GRADCHECK, OPT_GC_TOL, OPT_GC_H, OPT_HELP, OPT_VERSION,
    OPT_SAVE_EVERY, OPT_CKPT_DIR, OPT_RESUME, OPT_KEEP, OPT_WARMUP, OPT_LR_SCHEDULE, OPT_LR_FINAL_FRAC,
    OPT_GRAD_CLIP, OPT_SKIP_NONFINITE, OPT_SHUFFLE, OPT_NO_PREFETCH, OPT_PRINT_EVERY, OPT_PEAK_FLOPS,
    OPT_COMM_TIMEOUT, OPT_EVAL_ONLY, OPT_SAVE_DTYPE
};

static const struct option long_opts[] = {
    {"data", required_argument, 0, OPT_DATA},
    {"val-data", required_argument, 0, OPT_VAL_DATA},
    {"val-every", required_argument, 0, OPT_VAL_EVERY},
    {"val-batches", required_argument, 0, OPT_VAL_BATCHES},
    {"init", required_argument, 0, OPT_INIT},
    {"save", required_argument, 0, OPT_SAVE},
    {"save-dtype", required_argument, 0, OPT_SAVE_DTYPE},
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
    {"eval-only", no_argument, 0, OPT_EVAL_ONLY},
    {"gradcheck", optional_argument, 0, OPT_GRADCHECK},
    {"gradcheck-tol", required_argument, 0, OPT_GC_TOL},
    {"gradcheck-h", required_argument, 0, OPT_GC_H},
    {"save-every", required_argument, 0, OPT_SAVE_EVERY},
    {"ckpt-dir", required_argument, 0, OPT_CKPT_DIR},
    {"resume", required_argument, 0, OPT_RESUME},
    {"keep", required_argument, 0, OPT_KEEP},
    {"warmup", required_argument, 0, OPT_WARMUP},
    {"lr-schedule", required_argument, 0, OPT_LR_SCHEDULE},
    {"lr-final-frac", required_argument, 0, OPT_LR_FINAL_FRAC},
    {"grad-clip", required_argument, 0, OPT_GRAD_CLIP},
    {"skip-nonfinite", no_argument, 0, OPT_SKIP_NONFINITE},
    {"shuffle", no_argument, 0, OPT_SHUFFLE},
    {"no-prefetch", no_argument, 0, OPT_NO_PREFETCH},
    {"print-every", required_argument, 0, OPT_PRINT_EVERY},
    {"peak-flops", required_argument, 0, OPT_PEAK_FLOPS},
    {"comm-timeout", required_argument, 0, OPT_COMM_TIMEOUT},
    {"help", no_argument, 0, OPT_HELP},
    {"version", no_argument, 0, OPT_VERSION},
    {0, 0, 0, 0},
};

/* Prints "error: <message>" on stderr; returns the exit status 1. */
int gcrt_errorf(const char *fmt, ...)
{
    va_list ap;
    char line[4096];
    gcrt_progress_break();    /* the message on a line of its own, not after the status line */
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* one write per line (glibc buffers one call on unbuffered stderr): the
     * lines of several ranks on one stderr never interleave */
    fprintf(stderr, "error: %s\n", line);
    fflush(stderr);
    return 1;
}

static void print_help(const char *argv0, const gc_program *p)
{
    printf("usage: %s [flags]\n"
           "Trains the graph %s (config %s, target %s) compiled by gcompile.\n\n",
           argv0, p->graph_file, p->config && *p->config ? p->config : "-", p->target);
    printf("  --data FILE|'GLOB'   what to train on: a token shard, a glob of shards in name order\n"
           "                       ('dir/train_*.bin', quoted), or plain text files whose bytes are the\n"
           "                       tokens (any name not ending in .bin without the shard magic; V >= 256)\n"
           "                       (default: the built-in byte-level corpus)\n"
           "  --shuffle            each epoch, a new seeded order of shards and of batches within each\n"
           "                       shard (llm.c's shuffling; default: files and batches in order)\n"
           "  --no-prefetch        prepare each batch on the main thread (default: a prefetch thread\n"
           "                       prepares the next batch while the step runs)\n"
           "  --val-data FILE      token shard for validation (default: none)\n"
           "  --val-every N        validate every N steps (default 0: only after the last step)\n"
           "  --val-batches N      batches per validation (default %d, or fewer if the shard holds fewer)\n"
           "  --init FILE          checkpoint to start from: llm.c's (version 3 or 5) or Hugging Face's\n"
           "                       safetensors (F32, BF16 or F16 tensors, named by the graph's `from`)\n"
           "                       (default: seeded init)\n"
           "  --save FILE          write the parameters after training: FILE.safetensors as safetensors,\n"
           "                       any other name as an llm.c checkpoint (version 3)\n"
           "  --save-dtype T       f32 or bf16: the tensors of a safetensors --save (default f32)\n"
           "  --steps N            training steps (default %d); a resumed run stops at the same N\n",
           GCRT_DEFAULT_VAL_BATCHES, DEFAULT_STEPS);
    printf("  --lr X               AdamW learning rate (default %g)\n"
           "  --beta1 X            AdamW beta1 (default %g)\n"
           "  --beta2 X            AdamW beta2 (default %g)\n"
           "  --eps X              AdamW epsilon (default %g)\n"
           "  --weight-decay X     AdamW weight decay (default %g) of the parameters the graph does not mark nodecay\n",
           p->lr, p->beta1, p->beta2, p->eps, p->weight_decay);
    printf("  --warmup N           learning rate rises linearly over the first N steps (default 0)\n"
           "  --lr-schedule S      after the warmup: constant, cosine or linear decay from --lr to\n"
           "                       --lr * --lr-final-frac at the last step (default constant)\n"
           "  --lr-final-frac X    final learning rate as a fraction of --lr, in [0, 1] (default 0)\n"
           "  --grad-clip X        scale the gradients down to global L2 norm X when it is larger\n"
           "                       (default 0: off; llm.c uses 1.0). %s\n"
           "  --skip-nonfinite     skip the update of a step whose loss or gradient norm is NaN/inf\n"
           "                       (counted in the log) instead of stopping the run\n",
           (p->comm ? p->nupd_grads > 0 : p->region_bytes[GC_REGION_GRADS] >= (size_t)p->nparam_elems * 4)
               ? "This program keeps all gradients (plain schedule): the norm after the backward"
               : "This program updates each parameter inside the backward (fused-opt):\n"
                 "                       a norm pass first (forward and backward twice per step)");
    printf("  --ckpt-dir DIR       where checkpoints go (created if missing): model_NNNNNNNN.bin (llm.c)\n"
           "                       + state_NNNNNNNN.bin (AdamW moments, step, data position), atomically;\n"
           "                       one after the last step, and on SIGINT/SIGTERM (finish the step, save, exit 0);\n"
           "                       one run per DIR at a time (DIR/.lock)\n"
           "  --save-every N       also a checkpoint every N steps (needs --ckpt-dir)\n"
           "  --keep K             keep only the newest K checkpoints (default: all)\n"
           "  --resume DIR         continue from DIR's newest checkpoint (bit-identical to a run that was\n"
           "                       never stopped); starts at step 1 when DIR holds none (then --init, if\n"
           "                       given, is used); implies --ckpt-dir DIR unless that is given; pass the\n"
           "                       first run's --steps and --shuffle (--steps 0: only load it)\n");
    printf("  --print-every N      stdout not a terminal: a line every N steps (default 1) and after the\n"
           "                       last step, ms and tok/s the mean since the previous line; a terminal:\n"
           "                       one status line rewritten in place (step, loss and its mean over the\n"
           "                       last %d steps, ms/step, tok/s, MFU, ETA%s), and with this flag\n"
           "                       also a kept line every N steps\n",
           GCRT_AVG_STEPS, strcmp(p->target, "cuda") ? "" : ", device memory used vs planned");
    printf("  --peak-flops X       the FLOP/s MFU is measured against (e.g. 989e12); default: %s\n",
           !strcmp(p->target, "cuda") ? "the GPU's\n"
                                        "                       dense matmul peak at this precision when the runtime knows "
                                        "the GPU,\n                       else the compiled-in --device profile's, else no MFU"
           : p->peak_flops > 0 ? "the\n                       compiled-in --device profile's"
                               : "none (no MFU\n"
                                 "                       shown); gcompile --device PROFILE compiles a profile's peak in");
    if (p->peak_flops > 0)
        printf("                       (compiled in: %s, %.4g FLOP/s)\n", p->peak_device ? p->peak_device : "?",
               p->peak_flops);
    printf("  --comm-timeout S     programs split over ranks: a collective not completed after S seconds\n"
           "                       ends the rank with an error naming the ranks of its node that are\n"
           "                       gone or stopped (default %g; 0: off)%s\n",
           DEFAULT_COMM_TIMEOUT, !p->comm ? "; this program is not split"
                                 : p->comm->watch ? "" : "; not available on NCCL yet");
    printf("  --seed N             seed for init, sampling and gradcheck (default %d)\n"
           "  --log FILE           write one JSON object per step to FILE (JSONL): step, loss, ms,\n"
           "                       tok_per_s, lr, grad_norm (before clipping; a fused-opt program adds\n"
           "                       it up in its updates when --log is given), val_loss, shard, batch,\n"
           "                       skipped\n"
           "  --threads N          OpenMP/OpenBLAS threads (default: OpenMP's default)\n"
           "  --sample N           after training, generate and print N tokens (default 0)\n"
           "  --eval-only          instead of training, the mean loss of the model (--init FILE, the newest\n"
           "                       checkpoint of --resume DIR, else the seeded init) over --val-batches\n"
           "                       batches of --val-data, printed and logged (eval_loss); then --sample\n"
           "  --profile            time every op (waiting for the device after each) and print\n"
           "                       ms/step, share and GFLOP/s per kernel and shape\n"
           "  --gradcheck[=N]      instead of training, check the gradients: N directional derivatives\n"
           "                       (default %d, at least one per parameter tensor: along its gradient,\n"
           "                       then random directions) against Richardson-extrapolated central\n"
           "                       differences of the loss; a gradient 1%% off fails (plain schedule)\n"
           "  --gradcheck-tol X    largest relative error that passes (default %g)\n"
           "  --gradcheck-h X      step: the loss moves by X*max(1,|loss|) along the direction (default %g)\n"
           "  --help               this list\n"
           "  --version            program and runtime version\n",
           DEFAULT_SEED, DEFAULT_GRADCHECK, DEFAULT_GRADCHECK_TOL, DEFAULT_GRADCHECK_H);
    printf("\nthe long-run flags (--ckpt-dir, --resume, --keep, --warmup, --lr-schedule, --grad-clip,\n"
           "--data globs and text, --shuffle, prefetch, --skip-nonfinite, SIGINT/SIGTERM) work the same\n"
           "in CPU and CUDA programs%s\n",
           strcmp(p->target, "cuda") ? "." : " (on CUDA tested in a SIMT emulator, not yet on a GPU).");
    if (!strcmp(p->target, "cpu"))
        printf("\nenvironment: OMP_NUM_THREADS (as --threads); GC_CPU_GEMM=blas runs the matmuls\n"
               "with OpenBLAS instead of the built-in AVX-512 GEMM (used when the CPU has AVX-512).\n");
    if (p->tp)
        printf("\nthis program is split over %d ranks (%s, tensor-parallel groups of %d): start it with mpirun -np %d\n"
               "%s [flags]; the ranks of a group train the same B = %ld rows on their parts of the weights (global\n"
               "batch %ld rows); rank 0 prints, logs and saves.\n", p->nranks, p->split, p->tp, p->nranks, argv0,
               p->B, p->B * gcrt_prog_data_ranks(p));
    else if (p->nranks > 1)
        printf("\nthis program is split over %d ranks (%s): start it with mpirun -np %d %s [flags];\n"
               "each rank trains B = %ld rows of a global batch of %ld; rank 0 prints, logs and saves.\n",
               p->nranks, p->split, p->nranks, argv0, p->B, p->B * p->nranks);
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
        return gcrt_errorf("--%s: bad value '%s' (expected an integer in [%ld, %ld])", flag_name(code), s, lo, hi);
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
        return gcrt_errorf("--%s: bad value '%s' (expected %s)", flag_name(code), s, want[kind]);
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
        return gcrt_errorf("--seed: bad value '%s' (expected a non-negative integer)", s);
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

static void default_options(gcrt_options *o, const gc_program *p)
{
    memset(o, 0, sizeof *o);
    o->steps = DEFAULT_STEPS;
    o->seed = DEFAULT_SEED;
    o->lr = p->lr, o->beta1 = p->beta1, o->beta2 = p->beta2, o->eps = p->eps, o->wd = p->weight_decay;
    o->comm_timeout = DEFAULT_COMM_TIMEOUT;
    o->gc_tol = DEFAULT_GRADCHECK_TOL;
    o->gc_h = DEFAULT_GRADCHECK_H;
}

/* One flag with its value; returns 0 or the exit status 1. */
static int apply_flag(gcrt_options *o, int code, const char *arg)
{
    const long BIG = 2147483647L;
    switch (code) {
    case OPT_DATA: o->data = arg; return 0;
    case OPT_VAL_DATA: o->val_data = arg; return 0;
    case OPT_INIT: o->init = arg; return 0;
    case OPT_SAVE: o->save = arg; return 0;
    case OPT_SAVE_DTYPE:
        if (strcmp(arg, "f32") && strcmp(arg, "bf16"))
            return gcrt_errorf("--save-dtype: bad value '%s' (expected f32 or bf16)", arg);
        o->save_bf16 = !strcmp(arg, "bf16");
        return 0;
    case OPT_LOG: o->log = arg; return 0;
    case OPT_VAL_EVERY: return parse_long(code, arg, 0, BIG, &o->val_every);
    case OPT_VAL_BATCHES: return parse_long(code, arg, 1, BIG, &o->val_batches);
    case OPT_STEPS: return parse_long(code, arg, 0, BIG, &o->steps);
    case OPT_THREADS: return parse_long(code, arg, 1, 4096, &o->threads);
    case OPT_SAMPLE: return parse_long(code, arg, 0, BIG, &o->sample);
    case OPT_PROFILE: o->profile = 1; return 0;
    case OPT_EVAL_ONLY: o->eval_only = 1; return 0;
    case OPT_CKPT_DIR: o->ckpt_dir = arg; return 0;
    case OPT_RESUME: o->resume = arg; return 0;
    case OPT_SAVE_EVERY: return parse_long(code, arg, 1, BIG, &o->save_every);
    case OPT_KEEP: return parse_long(code, arg, 1, BIG, &o->keep);
    case OPT_WARMUP: return parse_long(code, arg, 0, BIG, &o->warmup);
    case OPT_LR_SCHEDULE:
        if ((o->lr_schedule = gcrt_lr_schedule_parse(arg)) < 0)
            return gcrt_errorf("--lr-schedule: bad value '%s' (expected cosine, linear or constant)", arg);
        return 0;
    case OPT_LR_FINAL_FRAC:
        if (parse_num(code, arg, NUM_NONNEG, &o->lr_final_frac))
            return 1;
        return o->lr_final_frac > 1 ? gcrt_errorf("--lr-final-frac: bad value '%s' (expected a number in [0, 1])", arg) : 0;
    case OPT_GRAD_CLIP: return parse_num(code, arg, NUM_NONNEG, &o->grad_clip);
    case OPT_SKIP_NONFINITE: o->skip_nonfinite = 1; return 0;
    case OPT_SHUFFLE: o->shuffle = 1; return 0;
    case OPT_NO_PREFETCH: o->no_prefetch = 1; return 0;
    case OPT_PRINT_EVERY: return parse_long(code, arg, 1, BIG, &o->print_every);
    case OPT_PEAK_FLOPS: return parse_num(code, arg, NUM_POS, &o->peak_flops);
    case OPT_COMM_TIMEOUT: return parse_num(code, arg, NUM_NONNEG, &o->comm_timeout);
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
    return gcrt_errorf("internal: unhandled flag %d", code);
}

/* Fills o from argv. Returns GCRT_PARSE_RUN, or an exit status after --help,
 * --version or an error. */
int gcrt_parse_flags(gcrt_options *o, int argc, char **argv, const gc_program *p)
{
    default_options(o, p);
    opterr = 0;
    optind = 1;
    int code;
    while ((code = getopt_long(argc, argv, "+:h", long_opts, NULL)) != -1) {
        const char *arg = optarg;
        if (code == '?')
            return gcrt_errorf("unknown flag '%s' (see --help)", argv[optind - 1]);
        if (code == ':')
            return gcrt_errorf("flag '%s' needs a value", argv[optind - 1]);
        if (code == 'h' || code == OPT_HELP) {
            print_help(argv[0], p);
            return GCRT_PARSE_EXIT_OK;
        }
        if (code == OPT_VERSION) {
            printf("%s: graph %s, config %s, target %s; gcompile runtime %s\n", argv[0],
                   p->graph_file, p->config && *p->config ? p->config : "-", p->target,
                   GC_RUNTIME_VERSION);
            return GCRT_PARSE_EXIT_OK;
        }
        if (code == OPT_GRADCHECK && !arg && optind < argc && is_uint(argv[optind]))
            arg = argv[optind++];   /* "--gradcheck 32" as well as "--gradcheck=32" */
        if (apply_flag(o, code, arg))
            return GCRT_PARSE_EXIT_ERR;
    }
    if (optind < argc)
        return gcrt_errorf("unexpected argument '%s' (see --help)", argv[optind]);
    if (o->val_every > 0 && !o->val_data)
        return gcrt_errorf("--val-every needs --val-data");
    if (o->eval_only && !o->val_data)
        return gcrt_errorf("--eval-only needs --val-data (the tokens to evaluate on)");
    if (o->eval_only && o->gradcheck)
        return gcrt_errorf("--eval-only and --gradcheck exclude each other");
    if (o->resume && !o->ckpt_dir)
        o->ckpt_dir = o->resume;       /* a resumed run goes on saving where it resumed from */
    if (o->save_bf16 && !(o->save && gcrt_st_is_save_path(o->save)))
        return gcrt_errorf("--save-dtype bf16 needs --save FILE.safetensors (llm.c checkpoints are fp32)");
    if ((o->save_every || o->keep) && !o->ckpt_dir)
        return gcrt_errorf("--%s needs --ckpt-dir DIR (or --resume DIR)", o->save_every ? "save-every" : "keep");
    return GCRT_PARSE_RUN;
}
