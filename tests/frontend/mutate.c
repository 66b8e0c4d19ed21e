/* mutate.c — writes a mutated copy of a file, for the robustness test.
 * usage: mutate IN OUT SEED
 * The seed picks one of: delete lines, insert junk lines, overwrite random
 * bytes, truncate, duplicate a block, swap two lines. Deterministic per seed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned long long state;
static unsigned long long next(void)
{
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}
static size_t pick(size_t n) { return n ? (size_t)(next() % n) : 0; }

/* byte offset of the start of line `line` (0-based) */
static size_t line_start(const char *s, size_t len, size_t line)
{
    size_t i = 0;
    while (line && i < len)
        if (s[i++] == '\n')
            line--;
    return i;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: mutate IN OUT SEED\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f)
        return 2;
    static char in[1 << 20], out[1 << 21];
    size_t len = fread(in, 1, sizeof in, f), n = 0;
    fclose(f);
    state = strtoull(argv[3], NULL, 10) * 2654435761ULL + 88172645463325252ULL;
    size_t lines = 0;
    for (size_t i = 0; i < len; i++)
        lines += in[i] == '\n';
    static const char *const junk[] = {"@@junk@@", "x = = y", "param", "for l in { }", ")", "[[[", "dim",
                                       "q, k = split(x, 3)", "\x01\x02\xff", "matmul(", "config {",
                                       "x = matmul(x, x)", "require 0", "minimize tokens", "}"};
    int mode = (int)pick(6);
    memcpy(out, in, len);
    n = len;
    if (mode == 0) {                       /* delete 1..3 lines */
        size_t a = line_start(in, len, pick(lines)), k = 1 + pick(3);
        size_t b = line_start(in, len, 0) + a;
        b = a;
        while (k && b < len)
            if (in[b++] == '\n')
                k--;
        memcpy(out, in, a);
        memcpy(out + a, in + b, len - b);
        n = len - (b - a);
    } else if (mode == 1) {                /* insert a junk line */
        size_t a = line_start(in, len, pick(lines + 1));
        const char *j = junk[pick(sizeof junk / sizeof junk[0])];
        memcpy(out, in, a);
        n = a + (size_t)sprintf(out + a, "%s\n", j);
        memcpy(out + n, in + a, len - a);
        n += len - a;
    } else if (mode == 2) {                /* overwrite 1..8 random bytes */
        for (size_t k = 1 + pick(8); k; k--)
            out[pick(len)] = (char)pick(256);
    } else if (mode == 3) {                /* truncate */
        n = pick(len);
    } else if (mode == 4) {                /* duplicate a block of lines */
        size_t a = line_start(in, len, pick(lines)), b = line_start(in, len, pick(lines));
        if (a > b) { size_t t = a; a = b; b = t; }
        memcpy(out + len, in + a, b - a);
        n = len + (b - a);
    } else {                               /* change a digit */
        for (size_t tries = 0; tries < 1000; tries++) {
            size_t i = pick(len);
            if (in[i] >= '0' && in[i] <= '9') {
                out[i] = (char)('0' + pick(10));
                break;
            }
        }
    }
    f = fopen(argv[2], "wb");
    if (!f || fwrite(out, 1, n, f) != n || fclose(f))
        return 2;
    return 0;
}
