/* fixture.c — writes and edits the files the runtime tests feed to programs.
 *
 *   fixture text2shard IN OUT        shard whose tokens are the bytes of IN
 *   fixture shard OUT NTOK [KEY=VAL]  shard of NTOK printable-byte tokens; keys:
 *        magic=M version=V hdr_ntok=N  header fields written instead
 *        bad_at=I bad=TOK              token I set to TOK (default 300)
 *   fixture patch FILE OFFSET VALUE   overwrite the int32 at OFFSET
 *   fixture bf16 IN OUT               version-3 checkpoint -> version 5 (RNE)
 *   fixture bf16-check V3 SAVED       SAVED's params equal V3's rounded to bf16
 * Exit 0 on success, 1 with a message otherwise.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int die(const char *msg, const char *arg)
{
    fprintf(stderr, "fixture: %s %s\n", msg, arg ? arg : "");
    return 1;
}

static unsigned char *slurp(const char *path, long *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)*n + 1);
    if (b && fread(b, 1, (size_t)*n, f) != (size_t)*n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

static int spit(const char *path, const void *a, size_t na, const void *b, size_t nb)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return die("cannot write", path);
    int ok = fwrite(a, 1, na, f) == na && (nb == 0 || fwrite(b, 1, nb, f) == nb);
    return fclose(f) == 0 && ok ? 0 : die("cannot write", path);
}

static void header(int32_t h[256], int32_t magic, int32_t version, int32_t ntok)
{
    memset(h, 0, 256 * sizeof *h);
    h[0] = magic, h[1] = version, h[2] = ntok;
}

static int text2shard(const char *in, const char *out)
{
    long n;
    unsigned char *t = slurp(in, &n);
    if (!t)
        return die("cannot read", in);
    uint16_t *tok = malloc((size_t)n * 2 + 2);
    for (long i = 0; i < n; i++)
        tok[i] = t[i];
    int32_t h[256];
    header(h, 20240520, 1, (int32_t)n);
    int rc = spit(out, h, sizeof h, tok, (size_t)n * 2);
    free(t), free(tok);
    return rc;
}

static int shard(int argc, char **argv)
{
    long n = atol(argv[3]), bad_at = -1, bad = 300;
    int32_t magic = 20240520, version = 1, hdr_ntok = (int32_t)n;
    for (int i = 4; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq)
            return die("bad key", argv[i]);
        long v = atol(eq + 1);
        if (!strncmp(argv[i], "magic=", 6)) magic = (int32_t)v;
        else if (!strncmp(argv[i], "version=", 8)) version = (int32_t)v;
        else if (!strncmp(argv[i], "hdr_ntok=", 9)) hdr_ntok = (int32_t)v;
        else if (!strncmp(argv[i], "bad_at=", 7)) bad_at = v;
        else if (!strncmp(argv[i], "bad=", 4)) bad = v;
        else return die("bad key", argv[i]);
    }
    uint16_t *tok = malloc((size_t)n * 2 + 2);
    for (long i = 0; i < n; i++)
        tok[i] = (uint16_t)(32 + (i * 7) % 95);
    if (bad_at >= 0 && bad_at < n)
        tok[bad_at] = (uint16_t)bad;
    int32_t h[256];
    header(h, magic, version, hdr_ntok);
    int rc = spit(argv[2], h, sizeof h, tok, (size_t)n * 2);
    free(tok);
    return rc;
}

static int patch(const char *path, long off, long value)
{
    FILE *f = fopen(path, "r+b");
    if (!f)
        return die("cannot open", path);
    int32_t v = (int32_t)value;
    int ok = fseek(f, off, SEEK_SET) == 0 && fwrite(&v, 4, 1, f) == 1;
    return fclose(f) == 0 && ok ? 0 : die("cannot patch", path);
}

static uint16_t to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7FFF + ((u >> 16) & 1);   /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static int bf16(const char *in, const char *out)
{
    long n;
    unsigned char *b = slurp(in, &n);
    if (!b || n < 1024 || (n - 1024) % 4)
        return die("not a version-3 checkpoint:", in);
    long np = (n - 1024) / 4;
    uint16_t *w = malloc((size_t)np * 2 + 2);
    for (long i = 0; i < np; i++) {
        float x;
        memcpy(&x, b + 1024 + 4 * i, 4);
        w[i] = to_bf16(x);
    }
    int32_t version = 5;
    memcpy(b + 4, &version, 4);
    int rc = spit(out, b, 1024, w, (size_t)np * 2);
    free(b), free(w);
    return rc;
}

static int bf16_check(const char *v3, const char *saved)
{
    long na, nb;
    unsigned char *a = slurp(v3, &na), *b = slurp(saved, &nb);
    if (!a || !b || na != nb || na < 1024)
        return die("sizes differ:", saved);
    for (long i = 0; i < (na - 1024) / 4; i++) {
        float x, y;
        memcpy(&x, a + 1024 + 4 * i, 4);
        memcpy(&y, b + 1024 + 4 * i, 4);
        uint32_t want = (uint32_t)to_bf16(x) << 16, got;
        memcpy(&got, &y, 4);
        if (want != got) {
            fprintf(stderr, "fixture: param %ld: %08x != %08x\n", i, (unsigned)got, (unsigned)want);
            return 1;
        }
    }
    free(a), free(b);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "text2shard"))
        return text2shard(argv[2], argv[3]);
    if (argc >= 4 && !strcmp(argv[1], "shard"))
        return shard(argc, argv);
    if (argc == 5 && !strcmp(argv[1], "patch"))
        return patch(argv[2], atol(argv[3]), atol(argv[4]));
    if (argc == 4 && !strcmp(argv[1], "bf16"))
        return bf16(argv[2], argv[3]);
    if (argc == 4 && !strcmp(argv[1], "bf16-check"))
        return bf16_check(argv[2], argv[3]);
    return die("usage: see fixture.c", NULL);
}
