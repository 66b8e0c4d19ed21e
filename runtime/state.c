/* state.c — the training-state file of a checkpoint (docs/checkpoints.md):
 * everything beside the llm.c model file that a resumed run needs to
 * continue bit-identically (step, AdamW moments, data position, data RNG).
 *
 * Layout, little-endian: a 1024-byte header of 128 uint64 slots (GCRT_ST_*),
 * then the optimizer-state region exactly as the plan lays it out. The last
 * header slot checks the header, slot GCRT_ST_PAYLOAD_SUM the payload.
 *
 * gcrt_state_parse reads a whole file held in memory and trusts nothing in
 * it: every failure is a one-line message naming the file and the byte
 * offset. It never reads outside [buf, buf+len).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gc_runtime_internal.h"

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

uint64_t gcrt_checksum(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (; n >= 8; b += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        h = (h ^ w) * 0x9E3779B97F4A7C15ull;
        h ^= h >> 29;
    }
    for (; n; b++, n--)
        h = (h ^ *b) * 0x100000001b3ull;
    return h;
}

static uint64_t rd_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void wr_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static const char *const dim_names[8] = {"B", "T", "maxT", "V", "Vp", "L", "NH", "C"};

static void prog_dims(const gc_program *p, long d[8])
{
    d[0] = p->B, d[1] = p->T, d[2] = p->maxT, d[3] = p->V;
    d[4] = p->Vp, d[5] = p->L, d[6] = p->NH, d[7] = p->C;
}

size_t gcrt_optstate_local_bytes(const gc_program *p)
{
    return p->optstate_host_bytes ? p->optstate_host_bytes : p->region_bytes[GC_REGION_OPTSTATE];
}

size_t gcrt_state_optstate_bytes(const gc_program *p)
{
    size_t n = gcrt_optstate_local_bytes(p);
    return p->optstate_sharded && p->nranks > 1 ? n * (size_t)p->nranks : n;
}

void gcrt_state_init(gcrt_state *s, const gc_program *p)
{
    memset(s, 0, sizeof *s);
    s->hash = p->state_hash;
    prog_dims(p, s->dims);
    s->nparam_elems = p->nparam_elems;
    s->optstate_bytes = gcrt_state_optstate_bytes(p);
}

void gcrt_state_header(unsigned char *h, const gcrt_state *s, const void *optstate)
{
    memset(h, 0, GCRT_HEADER_BYTES);
    wr_u64(h + 8 * GCRT_ST_MAGIC, GCRT_STATE_MAGIC);
    wr_u64(h + 8 * GCRT_ST_VERSION, GCRT_STATE_VERSION);
    wr_u64(h + 8 * GCRT_ST_HEADER_BYTES, GCRT_HEADER_BYTES);
    wr_u64(h + 8 * GCRT_ST_STEP, (uint64_t)s->step);
    wr_u64(h + 8 * GCRT_ST_HASH, s->hash);
    for (int i = 0; i < 8; i++)
        wr_u64(h + 8 * (GCRT_ST_DIMS + i), (uint64_t)s->dims[i]);
    wr_u64(h + 8 * GCRT_ST_NPARAM, (uint64_t)s->nparam_elems);
    wr_u64(h + 8 * GCRT_ST_OPTSTATE_BYTES, s->optstate_bytes);
    wr_u64(h + 8 * GCRT_ST_PARAMS_SUM, s->params_sum);
    wr_u64(h + 8 * GCRT_ST_SEED, s->seed);
    wr_u64(h + 8 * GCRT_ST_DATA_EPOCH, (uint64_t)s->data_epoch);
    wr_u64(h + 8 * GCRT_ST_DATA_POS, (uint64_t)s->data_pos);
    for (int i = 0; i < 4; i++)
        wr_u64(h + 8 * (GCRT_ST_DATA_RNG + i), s->data_rng[i]);
    wr_u64(h + 8 * GCRT_ST_SKIPPED, (uint64_t)s->skipped);
    wr_u64(h + 8 * GCRT_ST_FLAGS, s->flags);
    wr_u64(h + 8 * GCRT_ST_PAYLOAD_SUM, gcrt_checksum(0, optstate, s->optstate_bytes));
    wr_u64(h + 8 * GCRT_ST_HEADER_SUM, gcrt_checksum(0, h, 8 * GCRT_ST_HEADER_SUM));
}

/* A slot that must be a non-negative count no larger than lim. */
static int count_slot(const unsigned char *h, int slot, uint64_t lim, const char *what, long long *out,
                      const char *name, char *err, size_t errlen)
{
    uint64_t v = rd_u64(h + 8 * slot);
    if (v > lim)
        return fail(err, errlen, "%s: offset %d: %s %llu is out of range (at most %llu)", name, 8 * slot, what,
                    (unsigned long long)v, (unsigned long long)lim);
    *out = (long long)v;
    return 0;
}

int gcrt_state_parse(const void *buf, size_t len, const char *name, gcrt_state *s, char *err, size_t errlen)
{
    const unsigned char *h = buf;
    memset(s, 0, sizeof *s);
    if (len < GCRT_HEADER_BYTES)
        return fail(err, errlen, "%s: offset %zu: file ends after %zu bytes, inside the %d-byte header (truncated)",
                    name, len, len, GCRT_HEADER_BYTES);
    if (rd_u64(h + 8 * GCRT_ST_MAGIC) != GCRT_STATE_MAGIC)
        return fail(err, errlen, "%s: offset 0: bad magic (not a gcompile training-state file)", name);
    uint64_t version = rd_u64(h + 8 * GCRT_ST_VERSION);
    if (version != GCRT_STATE_VERSION)
        return fail(err, errlen, "%s: offset %d: unsupported version %llu (expected %d)", name,
                    8 * GCRT_ST_VERSION, (unsigned long long)version, GCRT_STATE_VERSION);
    if (rd_u64(h + 8 * GCRT_ST_HEADER_SUM) != gcrt_checksum(0, h, 8 * GCRT_ST_HEADER_SUM))
        return fail(err, errlen, "%s: offset %d: header checksum mismatch (the header is corrupt)", name,
                    8 * GCRT_ST_HEADER_SUM);
    if (rd_u64(h + 8 * GCRT_ST_HEADER_BYTES) != GCRT_HEADER_BYTES)
        return fail(err, errlen, "%s: offset %d: header size %llu (expected %d)", name, 8 * GCRT_ST_HEADER_BYTES,
                    (unsigned long long)rd_u64(h + 8 * GCRT_ST_HEADER_BYTES), GCRT_HEADER_BYTES);
    const uint64_t BIG = (uint64_t)1 << 62;
    long long v = 0;
    if (count_slot(h, GCRT_ST_STEP, 0x7fffffff, "step", &s->step, name, err, errlen) ||
        count_slot(h, GCRT_ST_NPARAM, BIG, "parameter count", &v, name, err, errlen))
        return -1;
    s->nparam_elems = (long)v;
    for (int i = 0; i < 8; i++) {
        char what[32];
        snprintf(what, sizeof what, "dim %s", dim_names[i]);
        if (count_slot(h, GCRT_ST_DIMS + i, 0x7fffffff, what, &v, name, err, errlen))
            return -1;
        s->dims[i] = (long)v;
    }
    if (count_slot(h, GCRT_ST_DATA_EPOCH, BIG, "data epoch", &s->data_epoch, name, err, errlen) ||
        count_slot(h, GCRT_ST_DATA_POS, BIG, "data position", &s->data_pos, name, err, errlen) ||
        count_slot(h, GCRT_ST_SKIPPED, 0x7fffffff, "skipped-step count", &s->skipped, name, err, errlen))
        return -1;
    s->hash = rd_u64(h + 8 * GCRT_ST_HASH);
    s->params_sum = rd_u64(h + 8 * GCRT_ST_PARAMS_SUM);
    s->seed = rd_u64(h + 8 * GCRT_ST_SEED);
    s->flags = rd_u64(h + 8 * GCRT_ST_FLAGS);
    if (s->flags & ~(uint64_t)GCRT_STF_SHUFFLE)
        return fail(err, errlen, "%s: offset %d: unknown flags %llx", name, 8 * GCRT_ST_FLAGS,
                    (unsigned long long)s->flags);
    for (int i = 0; i < 4; i++)
        s->data_rng[i] = rd_u64(h + 8 * (GCRT_ST_DATA_RNG + i));
    s->optstate_bytes = rd_u64(h + 8 * GCRT_ST_OPTSTATE_BYTES);
    size_t have = len - GCRT_HEADER_BYTES;
    if (s->optstate_bytes != have)
        return fail(err, errlen, "%s: offset %zu: file is %zu bytes, header says %d + %llu%s", name,
                    s->optstate_bytes > have ? len : (size_t)GCRT_HEADER_BYTES + (size_t)s->optstate_bytes, len,
                    GCRT_HEADER_BYTES, (unsigned long long)s->optstate_bytes,
                    s->optstate_bytes > have ? " (truncated)" : " (extra bytes at the end)");
    s->optstate = h + GCRT_HEADER_BYTES;
    if (rd_u64(h + 8 * GCRT_ST_PAYLOAD_SUM) != gcrt_checksum(0, s->optstate, have))
        return fail(err, errlen, "%s: offset %d: checksum of the optimizer state (bytes %d..%zu) does not match "
                    "the header (the file is corrupt)", name, GCRT_HEADER_BYTES, GCRT_HEADER_BYTES, len);
    return 0;
}

int gcrt_state_check(const gcrt_state *s, const gc_program *p, const char *name, char *err, size_t errlen)
{
    long d[8];
    prog_dims(p, d);
    for (int i = 0; i < 8; i++)
        if (s->dims[i] != d[i])
            return fail(err, errlen, "%s: offset %d: state has %s = %ld but the program was compiled with %s = %ld",
                        name, 8 * (GCRT_ST_DIMS + i), dim_names[i], s->dims[i], dim_names[i], d[i]);
    if (s->nparam_elems != p->nparam_elems)
        return fail(err, errlen, "%s: offset %d: state has %ld parameters, the program %ld", name,
                    8 * GCRT_ST_NPARAM, s->nparam_elems, p->nparam_elems);
    if (s->hash != p->state_hash)
        return fail(err, errlen, "%s: offset %d: written by a program with another plan of its parameters and "
                    "optimizer state (hash %016llx, this program %016llx); resume with the program that wrote it",
                    name, 8 * GCRT_ST_HASH, (unsigned long long)s->hash, (unsigned long long)p->state_hash);
    if (s->optstate_bytes != gcrt_state_optstate_bytes(p))
        return fail(err, errlen, "%s: offset %d: %zu bytes of optimizer state, the program plans %zu", name,
                    8 * GCRT_ST_OPTSTATE_BYTES, s->optstate_bytes, gcrt_state_optstate_bytes(p));
    return 0;
}

int gcrt_state_read(const char *path, void **buf, gcrt_state *s, char *err, size_t errlen)
{
    *buf = NULL;
    long long size;
    FILE *f = gcrt_open_input(path, &size, err, errlen);
    if (!f)
        return -1;
    size_t len = (size_t)size;
    unsigned char *b = malloc(len ? len : 1);
    if (!b) {
        fclose(f);
        return fail(err, errlen, "%s: cannot allocate %zu bytes to read it", path, len);
    }
    size_t got = fread(b, 1, len, f);
    fclose(f);
    if (got != len) {
        free(b);
        return fail(err, errlen, "%s: offset %zu: read error (the file changed while it was read?)", path, got);
    }
    if (gcrt_state_parse(b, len, path, s, err, errlen) != 0) {
        free(b);
        return -1;
    }
    *buf = b;
    return 0;
}
