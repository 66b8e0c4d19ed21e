/* data.c — token shards and llm.c checkpoints: read, validate, write.
 *
 * Both formats are little-endian with a 256 x int32 header. Every error names
 * the file and the byte offset where the file disagrees with what was
 * expected; nothing here exits or crashes on a bad file.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gc_runtime_internal.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "data.c reads little-endian files with plain loads: port it to this host first"
#endif

/* ---------------------------------------------------------------- helpers */

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static int32_t rd_i32(const unsigned char *p)
{
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    int32_t v;
    memcpy(&v, &u, 4);
    return v;
}

static void wr_i32(unsigned char *p, long v)
{
    uint32_t u = (uint32_t)(int32_t)v;
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(u >> (8 * i));
}

static FILE *open_sized(const char *path, long long *size, char *err, size_t errlen)
{
    return gcrt_open_input(path, size, err, errlen);
}

/* Reads exactly n bytes that start at byte `offset` of the file. */
static int read_exact(FILE *f, void *buf, size_t n, const char *path, long long offset,
                      char *err, size_t errlen)
{
    if (fread(buf, 1, n, f) != n)
        return fail(err, errlen, "%s: offset %lld: read error: %s", path, offset,
                    ferror(f) ? strerror(errno) : "unexpected end of file");
    return 0;
}

/* Reads the 1024-byte header, or says the file ends inside it. */
static int read_header(FILE *f, unsigned char *h, long long size, const char *path,
                       char *err, size_t errlen)
{
    if (size < GCRT_HEADER_BYTES)
        return fail(err, errlen, "%s: offset %lld: file ends after %lld bytes, inside the %d-byte header",
                    path, size, size, GCRT_HEADER_BYTES);
    return read_exact(f, h, GCRT_HEADER_BYTES, path, 0, err, errlen);
}

/* ---------------------------------------------------------------- token shards */

/* Every token must index the vocabulary; the first offender is reported. */
static int check_tokens(const gcrt_shard *s, long V, long long base, long long step,
                        char *err, size_t errlen)
{
    for (long i = 0; i < s->ntok; i++)
        if ((long)s->tok[i] >= V)
            return fail(err, errlen, "%s: offset %lld: token %u >= vocabulary size %ld",
                        s->name, base + step * i, (unsigned)s->tok[i], V);
    return 0;
}

/* Checks the shard header against the file size and the batch size. */
static int check_shard_header(const unsigned char *h, long long size, long need,
                              const char *path, char *err, size_t errlen)
{
    int32_t magic = rd_i32(h), version = rd_i32(h + 4), ntok = rd_i32(h + 8);
    if (magic != GCRT_SHARD_MAGIC)
        return fail(err, errlen, "%s: offset 0: bad magic %d (expected %d)", path, magic,
                    GCRT_SHARD_MAGIC);
    if (version != 1)
        return fail(err, errlen, "%s: offset 4: unsupported version %d (expected 1)", path, version);
    if (ntok < 0)
        return fail(err, errlen, "%s: offset 8: negative token count %d", path, ntok);
    long long expect = GCRT_HEADER_BYTES + 2LL * ntok;
    if (size != expect)
        return fail(err, errlen, "%s: offset %lld: size %lld bytes, header says 1024 + 2*%d = %lld%s",
                    path, size < expect ? size : expect, size, ntok, expect,
                    size < expect ? " (truncated)" : "");
    if (ntok < need)
        return fail(err, errlen, "%s: offset 8: %d tokens, need at least B*T+1 = %ld", path, ntok, need);
    return 0;
}

int gcrt_shard_open(gcrt_shard *s, const char *path, long need, long V, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->name = path;
    long long size;
    unsigned char h[GCRT_HEADER_BYTES];
    FILE *f = open_sized(path, &size, err, errlen);
    if (!f)
        return -1;
    int rc = read_header(f, h, size, path, err, errlen);
    if (rc == 0)
        rc = check_shard_header(h, size, need, path, err, errlen);
    if (rc == 0) {
        s->ntok = rd_i32(h + 8);
        s->tok = malloc((size_t)s->ntok * sizeof *s->tok);
        if (!s->tok)
            rc = fail(err, errlen, "%s: cannot allocate %ld tokens", path, s->ntok);
    }
    if (rc == 0)
        rc = read_exact(f, s->tok, (size_t)s->ntok * 2, path, GCRT_HEADER_BYTES, err, errlen);
    if (rc == 0)
        rc = check_tokens(s, V, GCRT_HEADER_BYTES, 2, err, errlen);
    fclose(f);
    if (rc != 0)
        gcrt_shard_close(s);
    return rc;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

int gcrt_shard_peek(const char *path, long need, long V, long *ntok, int *text, char *err, size_t errlen)
{
    long long size;
    unsigned char h[GCRT_HEADER_BYTES];
    FILE *f = open_sized(path, &size, err, errlen);
    if (!f)
        return -1;
    size_t got = fread(h, 1, sizeof h, f);
    fclose(f);
    *text = !(got >= 4 && rd_i32(h) == GCRT_SHARD_MAGIC) && !ends_with(path, ".bin");
    if (*text) {
        *ntok = (long)size;
        if (V < 256)
            return fail(err, errlen, "%s: offset 0: not a token shard (no magic %d), and this program's V = %ld is "
                        "too small to read it as byte-level text (needs V >= 256)", path, GCRT_SHARD_MAGIC, V);
        if (size < need)
            return fail(err, errlen, "%s: offset %lld: %lld bytes of text (byte-level tokens), need at least "
                        "B*T+1 = %ld", path, size, size, need);
        return 0;
    }
    if (size < GCRT_HEADER_BYTES)
        return fail(err, errlen, "%s: offset %lld: file ends after %lld bytes, inside the %d-byte header",
                    path, size, size, GCRT_HEADER_BYTES);
    *ntok = rd_i32(h + 8);
    return check_shard_header(h, size, need, path, err, errlen);
}

int gcrt_shard_load(gcrt_shard *s, const char *path, int text, long need, long V, char *err, size_t errlen)
{
    if (!text)
        return gcrt_shard_open(s, path, need, V, err, errlen);
    long long size;
    FILE *f = open_sized(path, &size, err, errlen);
    if (!f)
        return -1;
    char *buf = malloc((size_t)size + 1);
    int rc = buf ? read_exact(f, buf, (size_t)size, path, 0, err, errlen)
                 : fail(err, errlen, "%s: cannot allocate %lld bytes", path, size);
    fclose(f);
    if (rc == 0)
        rc = gcrt_shard_from_text(s, path, buf, (size_t)size, need, V, err, errlen);
    free(buf);
    return rc;
}

int gcrt_shard_from_text(gcrt_shard *s, const char *name, const char *text, size_t len,
                         long need, long V, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->name = name;
    if ((long long)len < need)
        return fail(err, errlen, "%s: %zu tokens, need at least B*T+1 = %ld; pass --data FILE",
                    name, len, need);
    s->ntok = (long)len;
    s->tok = malloc(len * sizeof *s->tok);
    if (!s->tok)
        return fail(err, errlen, "%s: cannot allocate %zu tokens", name, len);
    for (size_t i = 0; i < len; i++)
        s->tok[i] = (unsigned char)text[i];
    if (check_tokens(s, V, 0, 1, err, errlen) != 0) {
        gcrt_shard_close(s);
        return -1;
    }
    return 0;
}

void gcrt_shard_next(gcrt_shard *s, int32_t *inputs, int32_t *targets, long BT)
{
    const uint16_t *t = s->tok + s->pos;
    for (long i = 0; i < BT; i++) {
        inputs[i] = t[i];
        targets[i] = t[i + 1];
    }
    s->pos += BT;
    if (s->pos + BT + 1 > s->ntok)
        s->pos = 0;
}

long gcrt_shard_nbatches(const gcrt_shard *s, long BT) { return (s->ntok - 1) / BT; }

void gcrt_shard_close(gcrt_shard *s)
{
    free(s->tok);
    s->tok = NULL;
    s->ntok = 0;
}

/* ---------------------------------------------------------------- checkpoints */

static const char *const ckpt_dim_names[6] = {"maxT", "V", "L", "NH", "C", "Vp"};

static void prog_dims(const gc_program *p, long d[6])
{
    d[0] = p->maxT, d[1] = p->V, d[2] = p->L, d[3] = p->NH, d[4] = p->C, d[5] = p->Vp;
}

/* Magic, version (3 or 5) and each dim the program has (a dim the graph
 * lacks, 0 in the program, is not compared). */
static int check_ckpt_header(const unsigned char *h, const gc_program *prog, const char *path,
                             char *err, size_t errlen)
{
    int32_t magic = rd_i32(h), version = rd_i32(h + 4);
    if (magic != GCRT_CKPT_MAGIC)
        return fail(err, errlen, "%s: offset 0: bad magic %d (expected %d)", path, magic,
                    GCRT_CKPT_MAGIC);
    if (version != 3 && version != 5)
        return fail(err, errlen, "%s: offset 4: unsupported version %d (expected 3 = fp32 or 5 = bf16)",
                    path, version);
    long d[6];
    prog_dims(prog, d);
    for (int i = 0; i < 6; i++) {
        int32_t v = rd_i32(h + 8 + 4 * i);
        if (d[i] != 0 && v != d[i])
            return fail(err, errlen, "%s: offset %d: header has %s = %d but the program was compiled with %s = %ld",
                        path, 8 + 4 * i, ckpt_dim_names[i], v, ckpt_dim_names[i], d[i]);
    }
    return 0;
}

/* The parameter block must fill the rest of the file exactly. */
static int check_ckpt_size(long long size, int version, long n, const char *path,
                           char *err, size_t errlen)
{
    int elem = version == 3 ? 4 : 2;
    long long expect = GCRT_HEADER_BYTES + (long long)elem * n;
    if (size < expect)
        return fail(err, errlen, "%s: offset %lld: file ends after %lld bytes; version %d with %ld parameters needs 1024 + %d*%ld = %lld (truncated)",
                    path, size, size, version, n, elem, n, expect);
    if (size > expect)
        return fail(err, errlen, "%s: offset %lld: %lld extra bytes after the parameters (file is %lld bytes, expected 1024 + %d*%ld = %lld)",
                    path, expect, size - expect, size, elem, n, expect);
    return 0;
}

/* bf16 params, converted to fp32 in chunks (exact: bf16 is fp32's top half). */
static int read_bf16(FILE *f, float *params, long n, const char *path, char *err, size_t errlen)
{
    enum { CHUNK = 1 << 16 };
    uint16_t *buf = malloc(CHUNK * sizeof *buf);
    if (!buf)
        return fail(err, errlen, "%s: out of memory", path);
    int rc = 0;
    for (long done = 0; rc == 0 && done < n; done += CHUNK) {
        long m = n - done < CHUNK ? n - done : CHUNK;
        rc = read_exact(f, buf, (size_t)m * 2, path, GCRT_HEADER_BYTES + 2LL * done, err, errlen);
        for (long i = 0; rc == 0 && i < m; i++) {
            uint32_t bits = (uint32_t)buf[i] << 16;
            memcpy(&params[done + i], &bits, 4);
        }
    }
    free(buf);
    return rc;
}

int gcrt_ckpt_load(float *params, const gc_program *prog, const char *path,
                   char *err, size_t errlen)
{
    long long size;
    unsigned char h[GCRT_HEADER_BYTES];
    FILE *f = open_sized(path, &size, err, errlen);
    if (!f)
        return -1;
    long n = prog->nparam_elems;
    int rc = read_header(f, h, size, path, err, errlen);
    if (rc == 0)
        rc = check_ckpt_header(h, prog, path, err, errlen);
    int version = rc == 0 ? rd_i32(h + 4) : 0;
    if (rc == 0)
        rc = check_ckpt_size(size, version, n, path, err, errlen);
    if (rc == 0 && version == 3)
        rc = read_exact(f, params, (size_t)n * 4, path, GCRT_HEADER_BYTES, err, errlen);
    if (rc == 0 && version == 5)
        rc = read_bf16(f, params, n, path, err, errlen);
    fclose(f);
    return rc;
}

void gcrt_ckpt_header(unsigned char *h, const gc_program *prog)
{
    long d[6];
    prog_dims(prog, d);
    memset(h, 0, GCRT_HEADER_BYTES);
    wr_i32(h, GCRT_CKPT_MAGIC);
    wr_i32(h + 4, 3);
    for (int i = 0; i < 6; i++)
        wr_i32(h + 8 + 4 * i, d[i]);
}

int gcrt_check_finite(const float *x, long n, const gc_program *prog, const char *what, char *err, size_t errlen)
{
    for (long i = 0; i < n; i++) {
        if (isfinite(x[i]))
            continue;
        const char *name = NULL;
        for (int k = 0; prog && k < prog->nparams; k++)
            if (i >= prog->params[k].offset && i < prog->params[k].offset + prog->params[k].numel)
                name = prog->params[k].name;
        return fail(err, errlen, "%s: element %ld%s%s%s is %s", what, i, name ? " (parameter " : "", name ? name : "",
                    name ? ")" : "", x[i] != x[i] ? "nan" : "inf");
    }
    return 0;
}

int gcrt_ckpt_save(const char *path, const gc_program *prog, const float *params,
                   char *err, size_t errlen)
{
    char why[512];
    if (gcrt_check_finite(params, prog->nparam_elems, prog, "the parameters", why, sizeof why) != 0)
        return fail(err, errlen, "%s: not written: %s (the run diverged)", path, why);
    unsigned char h[GCRT_HEADER_BYTES];
    gcrt_ckpt_header(h, prog);
    gcrt_part parts[2] = {{h, sizeof h}, {params, (size_t)prog->nparam_elems * 4}};
    return gcrt_write_file(path, parts, 2, GCRT_W_DEVICES, err, errlen);
}
