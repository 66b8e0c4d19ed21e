/* gc_runtime_internal.h — private to the program harness around the step
 * (train_main.c, data.c, corpus.c, rng.c) and to the CPU kernels (kernels_cpu.c,
 * gemm_cpu.c). Nothing here is seen by emitted
 * code; names carry the prefix gcrt_ so they never collide with the kernels.
 *
 * Functions that can fail on user input return 0 on success and -1 after
 * writing a one-line message (without the "error: " prefix) into err.
 */
#ifndef GC_RUNTIME_INTERNAL_H
#define GC_RUNTIME_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gc_runtime.h"

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
/* Writes version 3 atomically: path.tmp, fsync, rename. On failure nothing
 * is left behind (neither path.tmp nor a partial path). */
int gcrt_ckpt_save(const char *path, const gc_program *prog, const float *params,
                   char *err, size_t errlen);
/* Checks early that path.tmp can be created (then removes it), so a bad
 * --save path fails before training rather than after. */
int gcrt_ckpt_probe(const char *path, char *err, size_t errlen);

/* ---------------------------------------------------------------- corpus.c */
/* The built-in training text: plain ASCII prose, about 30 KB, assembled once. */
const char *gcrt_corpus(size_t *len);

#endif
