/* gc_runtime_internal.h — private to the program harness around the step
 * (train_main.c and its rooms flags.c, progress.c, ckpt.c, sample.c,
 * gradcheck.c, data.c, corpus.c, rng.c, status_line.c) and to the CPU kernels (kernels_cpu.c,
 * gemm_cpu.c). Nothing here is seen by emitted
 * code; names carry the prefix gcrt_ so they never collide with the kernels.
 *
 * Functions that can fail on user input return 0 on success and -1 after
 * writing a one-line message (without the "error: " prefix) into err.
 */
#ifndef GC_RUNTIME_INTERNAL_H
#define GC_RUNTIME_INTERNAL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "gc_runtime.h"

/* GCRT_TSAN: built under ThreadSanitizer, whose instrumented ifunc resolvers
 * run before its runtime is up and crash the program at load time, so the
 * CPU kernels use no target_clones then (kernels_cpu.c, attention_cpu.c). */
#if defined(__SANITIZE_THREAD__)
#define GCRT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define GCRT_TSAN 1
#endif
#endif

/* GC_REAL_IS_DOUBLE: 1 when the kernels are built with -DGC_REAL=double (the
 * gradcheck build of tests/kernels; token paste on the type name, so it works
 * in #if). */
#define GC_TYPE_IS_double 1
#define GC_TYPE_IS_float 0
#define GC_TYPE_IS_(t) GC_TYPE_IS_##t
#define GC_TYPE_IS(t) GC_TYPE_IS_(t)
#if GC_TYPE_IS(GC_REAL)
#define GC_REAL_IS_DOUBLE 1
#else
#define GC_REAL_IS_DOUBLE 0
#endif

/* ---------------------------------------------------------------- gemm_cpu.c */
/* c (MxN, row stride ldc) (+)= op(a) @ op(b) in float on one thread, with
 * the AVX-512 kernel. Returns 1 when done, 0 when it cannot run here (no
 * AVX-512, GC_CPU_GEMM=blas in the environment, or no memory for its panels):
 * the caller then uses BLAS. */
int gcrt_sgemm(float *c, const float *a, const float *b, long M, long N, long K, long lda,
               long ldb, long ldc, int ta, int tb, int acc);

/* ---------------------------------------------------------------- kernels_cpu.c: exp */
/* exp of x <= 0 (x may be -inf: result 0; NaN stays NaN), written so gcc
 * vectorizes it without -ffast-math: the clamp and the final zeroing are bit
 * masks (a float select would be if-converted into a branch), round to
 * nearest by adding 1.5*2^23 (n is then read from the sum's low bits),
 * Cody-Waite reduction by ln 2, the Cephes expf polynomial (about 1 ulp),
 * 2^n through the exponent bits. Below -87 (subnormal results) gives 0.
 * Shared by kernels_cpu.c and attention_cpu.c. */
static inline float gcrt_expf_nonpos(float x)
{
    const float lo = -87.0f;
    uint32_t keep = (uint32_t)0 - (uint32_t) !(x < lo); /* ones unless x < lo; NaN: ones */
    uint32_t xb, lob, tb, eb;
    memcpy(&xb, &x, sizeof xb);
    memcpy(&lob, &lo, sizeof lob);
    xb = (xb & keep) | (lob & ~keep);
    float xc;
    memcpy(&xc, &xb, sizeof xc);
    float t = xc * 1.44269504088896341f + 12582912.0f;
    float n = t - 12582912.0f;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float z = r * r;
    float y = 1.9875691500e-4f;
    y = y * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * z + r + 1.0f;
    memcpy(&tb, &t, sizeof tb);
    uint32_t sb = (tb - 0x4B400000u + 127u) << 23; /* bits of 2^n */
    float scale, e;
    memcpy(&scale, &sb, sizeof scale);
    e = y * scale;
    memcpy(&eb, &e, sizeof eb);
    eb &= keep;
    memcpy(&e, &eb, sizeof e);
    return e;
}

/* exp of x <= 0 (or -inf) in the working precision: gcrt_expf_nonpos, or
 * libm's exp in the double build (for the finite-difference checks). */
static inline gc_real gcrt_exp_nonpos(gc_real x)
{
#if GC_REAL_IS_DOUBLE
    return exp(x);
#else
    return gcrt_expf_nonpos(x);
#endif
}

/* ---------------------------------------------------------------- kernels_cpu.c: matmul */
/* One matmul on the calling thread: c (ldc) (+)= op(a) (lda) @ op(b) (ldb),
 * row-major; gcrt_sgemm where it runs, else BLAS (single-threaded: the
 * kernels split the work over OpenMP themselves). Used by kernels_cpu.c's
 * matmuls and by attention_cpu.c's tiles. */
void gcrt_gemm_one(gc_real *c, const gc_real *a, const gc_real *b, long M, long N, long K, long lda, long ldb,
                   long ldc, int ta, int tb, int acc);

/* ---------------------------------------------------------------- kernels_cpu.c: cross-entropy rows */
/* (shared with classifier_cpu.c) logsumexp(x[0:n]) - x[t], in double */
double gcrt_ce_row_loss(const gc_real *x, long n, long t);
/* d[0:V] (+)= scale * (softmax(x[0:V]) - onehot(t)), d[V:Vp] (+)= 0; d may be x */
void gcrt_ce_row_grad(gc_real *d, const gc_real *x, long V, long Vp, long t, gc_real scale, int acc);

/* ---------------------------------------------------------------- rng.c */
/* xoshiro256** seeded through splitmix64; every stream is a pure function of
 * (seed, stream), so init, sampling and gradcheck never disturb each other. */
typedef struct {
    uint64_t s[4];
    int has_spare;     /* Box-Muller makes normals in pairs */
    double spare;
} gcrt_rng;

enum { GCRT_STREAM_INIT = 1, GCRT_STREAM_SAMPLE = 2, GCRT_STREAM_GRADCHECK = 3 };

void gcrt_rng_seed(gcrt_rng *r, uint64_t seed, uint64_t stream);
uint64_t gcrt_rng_u64(gcrt_rng *r);
double gcrt_rng_uniform(gcrt_rng *r);          /* [0, 1), 53 random bits */
double gcrt_rng_normal(gcrt_rng *r);           /* N(0, 1) */
void gcrt_rng_fill_normal(gcrt_rng *r, float *x, long n, double std);   /* x[i] = (float)(std * normal), threaded */
long gcrt_rng_below(gcrt_rng *r, long n);      /* [0, n), n >= 1 */

/* ---------------------------------------------------------------- data.c: token shards */
/* A token stream held in host memory, read sequentially in batches of B*T+1
 * tokens that advance by B*T and wrap like llm.c's loader. */
typedef struct {
    const char *name;  /* file name as given (or "built-in corpus"), for messages */
    uint16_t *tok;
    long ntok;
    long pos;
} gcrt_shard;

#define GCRT_SHARD_MAGIC 20240520
#define GCRT_CKPT_MAGIC 20240326
#define GCRT_HEADER_BYTES 1024

/* Reads and validates a shard (magic, version, exact size, ntok >= need,
 * every token < V). */
int gcrt_shard_open(gcrt_shard *s, const char *path, long need, long V,
                    char *err, size_t errlen);
/* A shard whose tokens are the bytes of text (byte-level vocabulary). */
int gcrt_shard_from_text(gcrt_shard *s, const char *name, const char *text, size_t len,
                         long need, long V, char *err, size_t errlen);
/* What a --data file is, from its header only: a token shard (its header
 * checked, *ntok from it), or, when it lacks the shard magic and its name
 * does not end in .bin, plain text whose bytes are the tokens (*text = 1,
 * *ntok = its size; needs V >= 256). */
int gcrt_shard_peek(const char *path, long need, long V, long *ntok, int *text, char *err, size_t errlen);
/* Reads and validates a shard or (text) a plain-text file as one. */
int gcrt_shard_load(gcrt_shard *s, const char *path, int text, long need, long V, char *err, size_t errlen);
/* The batch at the current position: inputs = tok[pos, pos+BT), targets the
 * same shifted by one; then advance by BT, back to 0 when the next batch
 * would run past the end. */
void gcrt_shard_next(gcrt_shard *s, int32_t *inputs, int32_t *targets, long BT);
/* How many distinct batches of BT (+1) tokens the shard holds (>= 1). */
long gcrt_shard_nbatches(const gcrt_shard *s, long BT);
void gcrt_shard_close(gcrt_shard *s);

/* ---------------------------------------------------------------- data.c: checkpoints */
/* llm.c model file: 256 int32 [20240326, version, maxT, V, L, NH, C, Vp],
 * then nparam_elems params (version 3: fp32, version 5: bf16). Loads into
 * params (host, nparam_elems floats) after checking every header field
 * against prog and the exact file size. */
int gcrt_ckpt_load(float *params, const gc_program *prog, const char *path,
                   char *err, size_t errlen);
/* Writes version 3 with gcrt_write_file (atomically; a device in place).
 * Refuses parameters that are not finite (nothing written). */
int gcrt_ckpt_save(const char *path, const gc_program *prog, const float *params,
                   char *err, size_t errlen);
/* The version-3 header of prog's model file (GCRT_HEADER_BYTES bytes). */
void gcrt_ckpt_header(unsigned char *h, const gc_program *prog);
/* -1 with "WHAT: element i (parameter NAME) is nan" in err when one of the
 * n floats is not finite; params: names the parameter (else a flat index). */
int gcrt_check_finite(const float *x, long n, const gc_program *params, const char *what, char *err, size_t errlen);

/* ---------------------------------------------------------------- files.c */
/* Opens a regular file for reading without blocking in open() (a FIFO is
 * refused, not waited on) and reports its size; NULL with "PATH: why". */
FILE *gcrt_open_input(const char *path, long long *size, char *err, size_t errlen);
/* How an output path is written: GCRT_OUT_REPLACE (absent or a regular
 * file: atomically), GCRT_OUT_THROUGH (an existing device, when `devices`:
 * in place, never renamed over), or -1 with "PATH: cannot write: it is a
 * FIFO, ..." in err (a directory, FIFO, socket; a device without `devices`). */
enum { GCRT_OUT_REPLACE, GCRT_OUT_THROUGH };
int gcrt_output_kind(const char *path, int devices, char *err, size_t errlen);
typedef struct {
    const void *p;
    size_t n;
} gcrt_part;
/* GCRT_W_DEVICES: an existing device is written in place (else refused);
 * GCRT_W_TEST_DELAY: GC_CKPT_TEST_DELAY_MS pauses halfway through the last part. */
enum { GCRT_W_DEVICES = 1, GCRT_W_TEST_DELAY = 2 };
/* Writes the parts to path: atomically (path.tmp created afresh, written,
 * fsynced, closed, renamed over path, the directory fsynced), or in place
 * on a device. 0; or -1 with "PATH: cannot write: why": then path holds its
 * old contents and no path.tmp is left; or -2 when only the final fsync of
 * the directory failed ("written, but syncing its directory failed"): path
 * is the complete new file, its durability unknown. */
int gcrt_write_file(const char *path, const gcrt_part *parts, int nparts, int flags, char *err, size_t errlen);
/* Checks early that path can be written (creates and removes path.tmp;
 * a device passes, a FIFO or directory does not), so a bad --save fails
 * before training rather than after. */
int gcrt_output_probe(const char *path, char *err, size_t errlen);

/* ---------------------------------------------------------------- safetensors.c */
/* Hugging Face safetensors checkpoints (docs/checkpoints.md); which tensor
 * holds which parameter comes from prog->params[].st_*. */
/* --init: a name ending in .safetensors, or a regular file whose first 8
 * bytes are a header length within the limit followed by '{'. */
int gcrt_st_is_file(const char *path);
/* --save: a name ending in .safetensors. */
int gcrt_st_is_save_path(const char *path);
/* Checks the whole header (every entry, every range against the file size,
 * no duplicate names, no overlaps or gaps), then that every tensor the
 * program names is there with its shape and an F32, BF16 or F16 dtype, then
 * reads them into params (host, nparam_elems floats, widened to fp32; what a
 * smaller stored shape leaves out is zero). info (may be NULL) gets a
 * one-line account of what was read. */
int gcrt_st_load(float *params, const gc_program *prog, const char *path, char *info, size_t infolen,
                 char *err, size_t errlen);
/* Writes every parameter's tensors as F32 (bf16: BF16, rounded to nearest
 * even) atomically: path.tmp, fsync, rename; on failure nothing is left.
 * Refuses parameters that are not finite (nothing written). */
int gcrt_st_save(const char *path, const gc_program *prog, const float *params, int bf16, char *err,
                 size_t errlen);

/* ---------------------------------------------------------------- ranks.c */
/* Rank `rank` of `nranks`'s part (BT tokens) of the next global batch of
 * nranks·BT tokens: the rows one process with nranks·B rows would give it;
 * advances and wraps by the global batch (gcrt_shard_next for one rank). */
void gcrt_shard_next_rank(gcrt_shard *s, int32_t *inputs, int32_t *targets, long BT, int rank, int nranks);
/* zero3, zero1-3 of bf16 programs (prog->nshards > 0): this rank's shards
 * (its params region) from the whole parameters (with tp: this rank's part
 * of them), and back: the latter is collective over `group` (GC_GROUP_ALL,
 * or with tp the dp group; every rank calls it and ends with the whole). */
void gcrt_params_to_shards(const gc_program *p, const float *whole, float *shards, int rank, int nranks);
void gcrt_params_from_shards(const gc_program *p, const float *shards, float *whole, int rank, int nranks,
                             int group);

/* ---------------------------------------------------------------- corpus.c */
/* The built-in training text: plain ASCII prose, about 30 KB, assembled once. */
const char *gcrt_corpus(size_t *len);

/* ---------------------------------------------------------------- state.c: training-state files */
/* docs/checkpoints.md describes the format. Header slots (uint64, LE): */
enum {
    GCRT_ST_MAGIC, GCRT_ST_VERSION, GCRT_ST_HEADER_BYTES, GCRT_ST_STEP, GCRT_ST_HASH,
    GCRT_ST_DIMS,                       /* 8 slots: B T maxT V Vp L NH C */
    GCRT_ST_NPARAM = GCRT_ST_DIMS + 8, GCRT_ST_OPTSTATE_BYTES, GCRT_ST_PARAMS_SUM, GCRT_ST_SEED,
    GCRT_ST_DATA_EPOCH, GCRT_ST_DATA_POS,
    GCRT_ST_DATA_RNG,                   /* 4 slots: xoshiro256** state */
    GCRT_ST_SKIPPED = GCRT_ST_DATA_RNG + 4, GCRT_ST_PAYLOAD_SUM,
    GCRT_ST_FLAGS,                      /* GCRT_STF_*: how the run read its data */
    GCRT_ST_HEADER_SUM = 127            /* checksum of slots 0..126 */
};
#define GCRT_STATE_MAGIC 0x3145544154534347ull   /* "GCSTATE1" */
#define GCRT_STATE_VERSION 1
enum { GCRT_STF_SHUFFLE = 1 };          /* slot GCRT_ST_FLAGS: the run had --shuffle */

typedef struct {
    long long step;                /* steps completed */
    unsigned long long hash;       /* gc_program.state_hash of the writer */
    long dims[8];                  /* B T maxT V Vp L NH C */
    long nparam_elems;
    size_t optstate_bytes;
    uint64_t params_sum;           /* gcrt_checksum of the model file's fp32 params */
    uint64_t seed;
    long long data_epoch, data_pos;
    uint64_t data_rng[4];
    long long skipped;             /* steps skipped as non-finite so far */
    uint64_t flags;                /* GCRT_STF_* */
    const unsigned char *optstate; /* parse: points into the buffer parsed */
} gcrt_state;

/* A 64-bit checksum of n bytes, continuing from h (start with 0). */
uint64_t gcrt_checksum(uint64_t h, const void *p, size_t n);
/* The optimizer state a training state holds: the optstate region, or
 * under zero1-3 (prog->optstate_sharded) every rank's region in rank order. */
size_t gcrt_state_optstate_bytes(const gc_program *prog);
/* This rank's moments: the optstate region's bytes, or with the optimizer
 * offloaded (prog->optstate_host_bytes) the first bytes of the host region,
 * laid out alike. */
size_t gcrt_optstate_local_bytes(const gc_program *prog);
/* s with prog's hash, dims and sizes; everything else zero. */
void gcrt_state_init(gcrt_state *s, const gc_program *prog);
/* The 1024-byte header of s, whose payload is optstate (s->optstate_bytes). */
void gcrt_state_header(unsigned char *h, const gcrt_state *s, const void *optstate);
/* Parses a whole state file held in buf[0..len): 0, or -1 with "NAME:
 * offset N: why" in err. Checks the format only (magic, version, checksums,
 * sizes), not that the state suits a program. s->optstate points into buf. */
int gcrt_state_parse(const void *buf, size_t len, const char *name, gcrt_state *s, char *err, size_t errlen);
/* Does a parsed state suit prog (dims, parameter count, plan hash, sizes)? */
int gcrt_state_check(const gcrt_state *s, const gc_program *prog, const char *name, char *err, size_t errlen);
/* Reads path into a malloc'd *buf and parses it (the caller frees *buf). */
int gcrt_state_read(const char *path, void **buf, gcrt_state *s, char *err, size_t errlen);

/* ---------------------------------------------------------------- flags.c */
#ifndef GC_RUNTIME_VERSION
#define GC_RUNTIME_VERSION "0.1.0"
#endif
enum { GCRT_DEFAULT_VAL_BATCHES = 8, GCRT_AVG_STEPS = 20 };   /* GCRT_AVG_STEPS: the loss's moving mean */

/* Everything the command line sets. */
typedef struct {
    const char *data, *val_data, *init, *save, *log;
    int save_bf16;                   /* --save-dtype bf16 (safetensors saves) */
    long steps, val_every, val_batches, threads, sample, gradcheck;
    const char *ckpt_dir, *resume;   /* --ckpt-dir, --resume */
    long save_every, keep;
    long warmup;                     /* --warmup steps */
    int lr_schedule;                 /* GCRT_LR_* */
    double lr_final_frac, grad_clip; /* --lr-final-frac, --grad-clip (0: off) */
    int skip_nonfinite;
    double comm_timeout;             /* --comm-timeout S: split programs' collective watchdog (0: off) */
    int shuffle, no_prefetch;        /* --shuffle, --no-prefetch */
    int profile;
    int eval_only;                   /* --eval-only: validate the loaded model, no training */
    long print_every;                /* --print-every N; 0: not given (1 off a terminal) */
    double peak_flops;               /* --peak-flops X (FLOP/s); 0: the device's or compiled-in */
    unsigned long long seed;
    float lr, beta1, beta2, eps, wd;
    double gc_tol, gc_h;
} gcrt_options;

enum { GCRT_PARSE_RUN = -1, GCRT_PARSE_EXIT_OK = 0, GCRT_PARSE_EXIT_ERR = 1 };

/* Fills o from argv (defaults from p). Returns GCRT_PARSE_RUN, or an exit
 * status after --help, --version or an error. */
int gcrt_parse_flags(gcrt_options *o, int argc, char **argv, const gc_program *p);
/* Prints "error: <message>" on stderr; returns the exit status 1. */
int gcrt_errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---------------------------------------------------------------- train_main.c: the run */
/* One run of a program: what gc_main sets up and every room reads. */
typedef struct {
    const gc_program *prog;
    gcrt_options o;
    long BT;
    gc_ctx ctx;
    float *params;                 /* host copy of the params region */
    int32_t *inputs, *targets;     /* host batch, B*T each */
    struct gcrt_loader *loader;    /* the training data (loader.c) */
    long long data_epoch, data_k;  /* position of the next training batch */
    gcrt_shard val;
    int have_val;
    FILE *log;
    int log_errno;                 /* the first failed write or flush of the log (0: none) */
    int lock_fd;                   /* --ckpt-dir's DIR/.lock, held while the run lasts (-1: none) */
    double *prof;                  /* --profile: seconds per category over steps 2.. */
    long first_step;               /* 1, or the step after the checkpoint resumed */
    long last_ckpt;                /* step of the newest checkpoint in --ckpt-dir, 0: none */
    long long skipped;             /* steps skipped as non-finite */
    void *resume_buf;              /* the state file resumed from (freed at the end) */
    const unsigned char *resume_optstate;  /* its optimizer state, uploaded once */
    struct gcrt_progress *progress;  /* what progress.c keeps between steps */
} gcrt_run;

/* ---------------------------------------------------------------- ranks.c: the process group */
/* Split programs (prog->comm): joins the process group (ranks other than 0
 * print nothing on stdout) and checks its size; 0 or the exit status 1
 * after a message. Nothing for other programs. */
int gcrt_join_group(gcrt_run *st);
/* Leaves the group; a failing rank (status != 0) ends every rank, so none
 * is left waiting in a collective. */
void gcrt_leave_group(gcrt_run *st, int status);
/* The loss averaged over ranks (itself when not split). */
/* Ranks that read rows of their own (tensor parallel: one per tp group, whose
 * ranks read the same rows; 1 when not split) and this rank's place among
 * them. */
static inline int gcrt_prog_data_ranks(const gc_program *p)
{
    int n = p->nranks > 1 ? p->nranks : 1;
    return p->tp ? n / p->tp : n;
}
static inline int gcrt_data_ranks(const gcrt_run *st) { return gcrt_prog_data_ranks(st->prog); }
static inline int gcrt_data_rank(const gcrt_run *st) { return st->ctx.dp_rank; }
float gcrt_mean_loss(gcrt_run *st, float loss);
/* zero3, tp, zero1-3 of bf16 programs: st->params (whole) cut into this
 * rank's part (tp) and shards (ZeRO) and uploaded; the shards downloaded
 * and gathered into st->params (collective). */
void gcrt_upload_shards(gcrt_run *st);
int gcrt_download_shards(gcrt_run *st);

/* Micro-batches per step (gc_program.micro_batches, at least 1). */
int gcrt_micro_batches(const gc_program *p);
/* The host batch's first micro-batch (all of it when there is one) into the
 * arena's tokens and targets. */
void gcrt_upload_batch(gcrt_run *st);
/* The given phases on the host batch: one run per micro-batch, each on its
 * rows, the optimizer only with the last; returns the mean loss. */
float gcrt_run_step(gcrt_run *st, int phases);
/* Waits for the device and returns the loss the step left in the arena. */
float gcrt_read_loss(gcrt_run *st);
/* Next batch of sh, then the given phases (GC_PHASE_*); returns the loss. */
float gcrt_run_batch(gcrt_run *st, gcrt_shard *sh, int phases);

/* ---------------------------------------------------------------- progress.c */
double gcrt_now_ms(void);                     /* monotonic clock */
size_t gcrt_total_region_bytes(const gc_program *p);
/* Program, dims, parameters, plan, memory and device, before the run. */
void gcrt_print_header(const gc_program *p);
/* What one training step measured. */
typedef struct {
    long step;
    float loss;
    double ms, lr;
    double gnorm;        /* global gradient norm, NAN when the program has no grads region */
    double val;          /* validation loss, NAN when none */
    int skipped;         /* --skip-nonfinite skipped this step's update */
    int shard;           /* the batch: shard index (glob order) and batch within it */
    long batch;
} gcrt_step_info;

/* Before the first step: whether stdout is a terminal (then one status line
 * rewritten in place, else plain lines every --print-every steps), the peak
 * MFU is measured against (--peak-flops, else the device's, else the
 * compiled-in --device profile's, else none), printed with the step's FLOPs;
 * 0 or exit status 1 (out of memory). */
int gcrt_progress_start(gcrt_run *st);
/* The progress of one step (the status line, or a plain line when due) and
 * its JSONL record. */
void gcrt_report_step(gcrt_run *st, const gcrt_step_info *si);
/* Flushes --log; the first failure's errno stays in st->log_errno. */
void gcrt_log_flush(gcrt_run *st);
/* Flushes and closes --log (if open): 0, or 1 after "error: LOG: cannot
 * write the log: why" when any write, flush or the close failed. */
int gcrt_log_close(gcrt_run *st);
/* (status_line.c) Clears the status line, if one is on the terminal, so
 * that a message can be printed on a line of its own (the next step draws
 * it again). */
void gcrt_progress_break(void);
/* After the last step (whose line, on a terminal, took the status line's
 * place): the final summary ("done: ..."). mean_ms over
 * `timed` steps (the run's first is not timed when there are others). */
void gcrt_progress_done(gcrt_run *st, double mean_ms, long timed);
void gcrt_progress_free(gcrt_run *st);
/* The --profile table: categories by time, largest first. */
void gcrt_print_profile(const gcrt_run *st, long nsteps, double step_ms);

/* A step of a fused-opt program under --grad-clip: a norm pass, the global
 * norm (group_sum over ranks, NULL for one process), then the updates scaled
 * by the clipping factor; fills si->loss, gnorm, skipped. */
void gcrt_clipped_fused_step(gcrt_run *st, gcrt_step_info *si, double (*group_sum)(gcrt_run *, double));

/* ---------------------------------------------------------------- split_step.c */
/* One training step of a split program (st->ctx.nranks > 1) on the batch in
 * st->inputs/targets, every rank taking the same decisions: with
 * prog->upd_grads (plain schedule) the global gradient norm over ranks
 * first, then --skip-nonfinite and --grad-clip as one process does; else
 * (fused-opt) --skip-nonfinite on the mean forward loss and, under --log,
 * the norm the updates add up; with --grad-clip a norm pass first
 * (gcrt_clipped_fused_step). */
void gcrt_split_step(gcrt_run *st, gcrt_step_info *si);
/* 1 on every rank when v is non-zero on some rank (v itself when not split). */
int gcrt_group_any(gcrt_run *st, int v);
/* After a step, what every rank agrees on: *stop becomes the signal that
 * stops the run (this rank's own; else SIGTERM when some rank got one that
 * is not SIGINT; else SIGINT when some rank got SIGINT; 0: none), and
 * *log_bad 1 when some rank (rank 0: it logs) could not write the log.
 * One collective; nothing changes when not split. */
void gcrt_group_stop(gcrt_run *st, int *stop, int *log_bad);

/* ---------------------------------------------------------------- status_line.c */
/* Draws line[0..n) as the terminal's status line ("\r", the text, cleared to
 * the end of the line); gcrt_progress_break (above) clears it. */
void gcrt_status_draw(const char *line, size_t n);
int gcrt_status_shown(void);

/* ---------------------------------------------------------------- schedule.c */
enum { GCRT_LR_CONSTANT, GCRT_LR_COSINE, GCRT_LR_LINEAR };
/* "constant" | "cosine" | "linear" -> GCRT_LR_*, or -1. */
int gcrt_lr_schedule_parse(const char *s);
const char *gcrt_lr_schedule_name(int k);
/* The learning rate of `step` (1-based) under o's lr, warmup, schedule,
 * final fraction and total steps. */
float gcrt_lr_at(const gcrt_options *o, long step);
/* The factor gradients are multiplied by: clip/norm when norm > clip > 0, else 1. */
float gcrt_clip_scale(double norm, double clip);

/* ---------------------------------------------------------------- loader.c */
typedef struct gcrt_loader gcrt_loader;
/* Opens --data (one file, a glob of shards or text files, or the built-in
 * corpus; headers only) and --val-data; 0 or exit status 1. */
int gcrt_data_open(gcrt_run *st);
/* Prepares the first batch (from the position a resume set) and starts the
 * prefetch thread unless --no-prefetch; 0 or exit status 1. */
int gcrt_data_start(gcrt_run *st);
/* The next training batch into st->inputs and st->targets, the shard and
 * batch it came from; the next one is then prepared (by the prefetch
 * thread while the step runs). 0, or exit status 1 when a shard could not
 * be read. */
int gcrt_data_next(gcrt_run *st, int *shard, long *batch);
/* Milliseconds spent preparing batches so far (on whichever thread). */
double gcrt_data_prep_ms(const gcrt_run *st);
/* Milliseconds the main thread spent in gcrt_data_next so far, inside the
 * steps' time: waiting for the prefetch thread, or preparing (--no-prefetch). */
double gcrt_data_wait_ms(const gcrt_run *st);
void gcrt_data_close(gcrt_run *st);
/* Where the training stream stands, into s (data_epoch, data_pos, data_rng). */
void gcrt_data_position(const gcrt_run *st, gcrt_state *s);
/* Continues the stream from a checkpoint's position; 0 or exit status 1. */
int gcrt_data_seek(gcrt_run *st, const gcrt_state *s);

/* ---------------------------------------------------------------- ckpt.c */
/* --ckpt-dir: rank 0 creates DIR (one level) if needed, checks that it is
 * writable and locks DIR/.lock (flock, held until exit: a second run on the
 * same DIR is refused); every rank of a split program waits for that, so
 * none reads DIR before it exists. 0 or exit status 1. */
int gcrt_ckpt_dir_open(gcrt_run *st);
/* The newest checkpoint (state file) in dir whose step is below `below`;
 * 0 when there is none. */
long gcrt_ckpt_newest_before(const char *dir, long below);
/* Writes the checkpoint of `step` (model + state, atomically) into
 * --ckpt-dir and applies --keep; 0 or exit status 1 (the previous
 * checkpoint is then intact, and the message says so). */
int gcrt_ckpt_write(gcrt_run *st, long step);
/* --resume DIR: loads the newest checkpoint into st (params on the host,
 * resume_optstate, first_step, data position); *found = 0 when DIR has
 * none. 0 or exit status 1. */
int gcrt_ckpt_resume(gcrt_run *st, int *found);
/* --save: the trained parameters as an llm.c model file; 0 or exit status 1. */
int gcrt_save_final(gcrt_run *st);
/* The whole fp32 parameters between st->params and where the program keeps
 * its masters (the params region, or the host region with bf16 offload),
 * then (put) the phase that derives the rest from them (GC_PHASE_PARAMS:
 * bf16 copies, host masters). Not for zero3 or tp (gcrt_upload_shards). */
void gcrt_params_put(gcrt_run *st, const float *params);
void gcrt_params_get(gcrt_run *st, float *params);
/* This rank's moments (gcrt_optstate_local_bytes) into dst, from the
 * device or the host region; and back from src. */
void gcrt_optstate_get(gcrt_run *st, void *dst);
void gcrt_optstate_put(gcrt_run *st, const void *src);

/* ---------------------------------------------------------------- sample.c */
/* --sample N: prints N tokens generated from batch row 0; 0 or exit status 1. */
int gcrt_sample(gcrt_run *st);

/* ---------------------------------------------------------------- gradcheck.c */
/* --gradcheck N: analytic vs finite-difference gradients; the exit status. */
int gcrt_gradcheck(gcrt_run *st);

#endif
