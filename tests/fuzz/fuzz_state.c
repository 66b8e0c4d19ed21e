/* fuzz_state.c — the runtime's training-state reader (gcrt_state_parse, the
 * resume state file of docs/checkpoints.md) on any bytes; gcrt_state_check
 * against a small program on what it accepts; gcrt_state_read on the same
 * bytes as a file. Every input is tried twice: as it is, and with its two
 * checksums (payload, header) made right, so mutations get past the
 * checksums to the checks behind them. Any input either parses or returns a
 * one-line error that names the file and a byte offset; what parses
 * round-trips (the header written from it parses to the same state).
 *
 * The seed tests/fuzz/seeds/state_tiny.bin is a real state file: step 3 of
 *   gcompile models/gpt2.graph --config tiny -D C=8 -D NH=2 -D maxT=8 -D T=8 -D B=2 --target cpu -o t
 *   ./t --threads 1 --steps 3 --ckpt-dir ck
 * (seeds.sh adds truncated and corrupted copies); fuzz_state_prog is that
 * program, so the seed passes gcrt_state_check. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "gc_runtime_internal.h"

static const gc_program fuzz_state_prog = {
    .graph_file = "fuzz.graph", .config = "tiny", .target = "cpu",
    .B = 2, .T = 8, .maxT = 8, .V = 256, .Vp = 256, .L = 2, .NH = 2, .C = 8, .nparam_elems = 3872,
    .region_bytes = {[GC_REGION_OPTSTATE] = 30976}, .state_hash = 0xdfe586a00f670b02ull,
};

/* an error: one line, naming the file, with a byte offset when it is about the bytes */
static void check_error(const char *err, const char *name, int offset)
{
    size_t n = strlen(name);
    if (strncmp(err, name, n) != 0 || strncmp(err + n, ": ", 2) != 0 || strchr(err, '\n') ||
        (offset && strncmp(err + n, ": offset ", 9) != 0))
        abort();
}

static int parse_one(const unsigned char *data, size_t size)
{
    gcrt_state s, t;
    char err[512] = "";
    if (gcrt_state_parse(data, size, "fuzz.bin", &s, err, sizeof err) != 0) {
        check_error(err, "fuzz.bin", 1);
        return -1;
    }
    if (size < GCRT_HEADER_BYTES || s.optstate != data + GCRT_HEADER_BYTES ||
        s.optstate_bytes != size - GCRT_HEADER_BYTES || s.step < 0 || s.nparam_elems < 0 || s.data_epoch < 0 ||
        s.data_pos < 0 || s.skipped < 0)
        abort();
    for (int i = 0; i < 8; i++)
        if (s.dims[i] < 0)
            abort();
    /* round trip: the header written from s, with the same payload, parses to s */
    unsigned char *copy = malloc(size);
    gcrt_state_header(copy, &s, s.optstate);
    memcpy(copy + GCRT_HEADER_BYTES, s.optstate, s.optstate_bytes);
    if (gcrt_state_parse(copy, size, "copy.bin", &t, err, sizeof err) != 0)
        abort();
    t.optstate = s.optstate;
    if (memcmp(&s, &t, sizeof s) != 0)
        abort();
    free(copy);
    err[0] = '\0';
    if (gcrt_state_check(&s, &fuzz_state_prog, "fuzz.bin", err, sizeof err) != 0)
        check_error(err, "fuzz.bin", 1);
    return 0;
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int rc = parse_one(data, size);
    /* the same bytes as a file: gcrt_state_read agrees with the parse */
    const char *path = fuzz_file(data, size);
    void *buf = NULL;
    gcrt_state s;
    char err[512] = "";
    int rrc = gcrt_state_read(path, &buf, &s, err, sizeof err);
    if (rrc != rc)
        abort();
    if (rrc != 0)
        check_error(err, path, 0);
    free(buf);
    if (size >= GCRT_HEADER_BYTES) {  /* checksums made right */
        unsigned char *fixed = malloc(size);
        memcpy(fixed, data, size);
        put_u64(fixed + 8 * GCRT_ST_PAYLOAD_SUM,
                gcrt_checksum(0, fixed + GCRT_HEADER_BYTES, size - GCRT_HEADER_BYTES));
        put_u64(fixed + 8 * GCRT_ST_HEADER_SUM, gcrt_checksum(0, fixed, 8 * GCRT_ST_HEADER_SUM));
        parse_one(fixed, size);
        free(fixed);
    }
    return 0;
}
