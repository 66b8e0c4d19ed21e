/* sample.c — --sample: generates tokens from the trained model, one forward
 * pass per token with a sliding window of T tokens (no KV cache).
 *
 * Where the logits come from: a program with a [B, T, Vp] logits tensor
 * (classifier not fused) leaves them in the arena after a forward, and the
 * row of the last position is read. A program whose classifier is fused
 * never stores them; its forward run with ctx.sample_row = pos (1-based)
 * computes the final norm's row pos-1 times the classifier into its planned
 * sample row (gc_program.sample_off, Vp fp32 values) instead of the loss
 * and the gradients (passes/fuse_classifier.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gc_runtime_internal.h"

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
int gcrt_sample(gcrt_run *st)
{
    const gc_program *p = st->prog;
    int fused = p->logits_cols < p->V;   /* no logits tensor: the fused classifier's sample row */
    long T = p->T, V = p->V, cols = fused ? p->sample_cols : p->logits_cols;
    int byte_level = V <= 256;
    char *arena = st->ctx.region[GC_REGION_ARENA];
    float *row = malloc((size_t)cols * sizeof *row);
    if (!row)
        return gcrt_errorf("cannot allocate a logits row");
    memset(st->inputs, 0, (size_t)st->BT * sizeof(int32_t));
    memset(st->targets, 0, (size_t)st->BT * sizeof(int32_t));
    st->inputs[0] = byte_level ? '\n' : (50256 < V ? 50256 : 0);
    long pos = 1;
    gcrt_rng r;
    gcrt_rng_seed(&r, st->o.seed, GCRT_STREAM_SAMPLE);
    printf("--- sample: %ld tokens, seed %llu ---\n", st->o.sample, st->o.seed);
    for (long i = 0; i < st->o.sample; i++) {
        gcrt_upload_batch(st);
        st->ctx.sample_row = fused ? pos : 0;
        p->run(&st->ctx, GC_PHASE_FWD);
        st->ctx.sample_row = 0;
        gc_device_sync();
        if (fused)
            gc_device_download(row, arena + p->sample_off, (size_t)cols * sizeof *row);
        else
            download_floats(p, row, arena + p->logits_off + (size_t)(pos - 1) * (size_t)cols * (p->bf16 ? 2 : 4),
                            (size_t)cols);
        long tok = draw(row, V, &r);
        if (tok < 0) {
            free(row);
            putchar('\n');
            return gcrt_errorf("sample: token %ld: the logits are not finite", i + 1);
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
