/* fuzz_compile.c — the whole compiler from graph text to a checked plan:
 * parse, build, autodiff, fuse, precision, split updates, schedule,
 * workspace, liveness, memplan, plan_check (as driver/main.c runs them; the
 * options come from a hash of the input). A user error is fine; an abort
 * (IR_BUG, a failed plan check), a crash or a sanitizer report is a bug.
 *
 * The custom mutator knows the language's shape: it deletes, duplicates,
 * swaps and moves lines (statements), changes numbers (dims, shapes,
 * attribute values) to interesting values, edits [shape] lists, and
 * otherwise leaves the bytes to libFuzzer's own mutations. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "fuzz.h"
#include "ir.h"
#include "passes.h"

static int has_config(const Ast *ast, const char *name)
{
    for (int i = 0; i < ast->nstmts; i++)
        if (ast->stmts[i]->kind == S_CONFIG && !strcmp(ast->stmts[i]->name, name))
            return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1u << 20))
        return 0;
    diag_reset(getenv("GC_FUZZ_VERBOSE") == NULL);
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    unsigned h = 2166136261u;                  /* options from the input */
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 16777619u;
    Ast *ast = parse_string("fuzz.graph", text, size);
    Graph *g = NULL;
    if (diag_count())
        goto done;
    BuildOptions bo = {.config = has_config(ast, "tiny") ? "tiny" : NULL};
    g = ir_build(ast, &bo);
    if (!g)
        goto done;
    ir_verify(g);
    g->no_reuse = (h >> 4) % 8 == 0;
    pass_autodiff(g);
    if (diag_count())
        goto done;
    ir_verify(g);
    if (h % 4 != 0) {
        pass_fuse(g);
        ir_verify(g);
    }
    if ((h >> 2) % 4 == 0) {
        pass_precision(g);
        ir_verify(g);
    }
    ScheduleKind sk = (h >> 6) % 3 == 0 ? SCHED_PLAIN : SCHED_FUSED_OPT;
    if (sk == SCHED_FUSED_OPT) {
        pass_split_updates(g);
        ir_verify(g);
    }
    pass_schedule(g, sk);
    if ((h >> 8) % 2)
        pass_workspace(g, (size_t)1 << 20);
    ir_verify(g);
    fill_liveness(g);
    pass_memplan(g);
    ir_verify(g);
    char err[512];
    if (plan_check(g, err, sizeof err) != 0) {
        fprintf(stderr, "plan check failed: %s\n", err);
        abort();
    }
done:
    graph_free(g);
    ast_free(ast);
    free(text);
    return 0;
}

#ifdef GC_LIBFUZZER
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max, unsigned seed);
size_t LLVMFuzzerCustomCrossOver(const uint8_t *d1, size_t n1, const uint8_t *d2, size_t n2, uint8_t *out,
                                 size_t max, unsigned seed);

typedef struct Line { size_t at, len; } Line;    /* len includes the '\n' */

static unsigned rnd(unsigned *s) { *s = *s * 1103515245u + 12345u; return *s >> 8; }

static int split_lines(const uint8_t *d, size_t n, Line *ls, int max)
{
    int k = 0;
    size_t at = 0;
    while (at < n && k < max) {
        const uint8_t *nl = memchr(d + at, '\n', n - at);
        size_t end = nl ? (size_t)(nl - d) + 1 : n;
        ls[k++] = (Line){at, end - at};
        at = end;
    }
    return k;
}

/* out = the lines of d in the order idx[0..k) */
static size_t join(uint8_t *out, size_t max, const uint8_t *d, const Line *ls, const int *idx, int k)
{
    size_t n = 0;
    for (int i = 0; i < k; i++) {
        const Line *l = &ls[idx[i]];
        if (n + l->len > max)
            return 0;
        memcpy(out + n, d + l->at, l->len);
        n += l->len;
    }
    return n;
}

static const char *const numbers[] = {"0", "1", "2", "3", "4", "7", "8", "12", "16", "64", "100", "255",
                                      "256", "1024", "50257", "65536", "2147483648", "1099511627776",
                                      "1000000000000", "9223372036854775807", "-1", "0.5", "1e-5", "1e30"};
static const char *const words[] = {"B", "T", "C", "L", "V", "Vp", "NH", "maxT", "x", "h", "l"};

/* replaces [from, to) of d (n bytes) with rep */
static size_t splice(uint8_t *d, size_t n, size_t max, size_t from, size_t to, const char *rep)
{
    size_t r = strlen(rep);
    if (n - (to - from) + r > max)
        return 0;
    memmove(d + from + r, d + to, n - to);
    memcpy(d + from, rep, r);
    return n - (to - from) + r;
}

/* a number token (digits) or, with want_word, an identifier: its span */
static int pick_token(const uint8_t *d, size_t n, unsigned *s, int want_word, size_t *from, size_t *to)
{
    size_t count = 0;
    for (int pass = 0; pass < 2; pass++) {
        size_t k = 0, target = pass ? rnd(s) % count : 0;
        for (size_t i = 0; i < n;) {
            int digit = d[i] >= '0' && d[i] <= '9';
            int alpha = (d[i] >= 'a' && d[i] <= 'z') || (d[i] >= 'A' && d[i] <= 'Z') || d[i] == '_';
            if (!digit && !alpha) { i++; continue; }
            size_t j = i;
            while (j < n && ((d[j] >= '0' && d[j] <= '9') || (d[j] >= 'a' && d[j] <= 'z') ||
                             (d[j] >= 'A' && d[j] <= 'Z') || d[j] == '_' || d[j] == '.'))
                j++;
            if (digit != want_word) {
                if (pass && k == target) { *from = i; *to = j; return 1; }
                k++;
            }
            i = j;
        }
        if (!pass && !(count = k))
            return 0;
    }
    return 0;
}

/* a [ ... ] list: delete, duplicate or swap its items */
static size_t mutate_list(uint8_t *d, size_t n, size_t max, unsigned *s)
{
    size_t opens[256];
    int k = 0;
    for (size_t i = 0; i < n && k < 256; i++)
        if (d[i] == '[')
            opens[k++] = i;
    if (!k)
        return 0;
    size_t a = opens[rnd(s) % (unsigned)k] + 1, b = a;
    while (b < n && d[b] != ']' && d[b] != '\n')
        b++;
    if (b >= n || d[b] != ']')
        return 0;
    /* items of [a, b) split at commas */
    size_t at[IR_MAXRANK * 2 + 2], cnt = 0;
    at[cnt++] = a;
    for (size_t i = a; i < b && cnt < IR_MAXRANK * 2; i++)
        if (d[i] == ',')
            at[cnt++] = i + 1;
    at[cnt] = b + 1;
    size_t i = rnd(s) % cnt;
    char item[256];
    size_t ilen = at[i + 1] - 1 - at[i];
    if (ilen >= sizeof item)
        return 0;
    memcpy(item, d + at[i], ilen);
    item[ilen] = '\0';
    switch (rnd(s) % 3) {
    case 0:                                         /* delete item i (and its comma) */
        if (cnt == 1)
            return splice(d, n, max, a, b, "");
        return i + 1 < cnt ? splice(d, n, max, at[i], at[i + 1], "") : splice(d, n, max, at[i] - 1, b, "");
    case 1: {                                       /* duplicate it */
        char rep[300];
        snprintf(rep, sizeof rep, "%s,", item);
        return splice(d, n, max, at[i], at[i], rep);
    }
    default: {                                      /* a dim name or a number instead */
        const char *w = rnd(s) % 2 ? words[rnd(s) % (sizeof words / sizeof *words)]
                                   : numbers[rnd(s) % (sizeof numbers / sizeof *numbers)];
        return splice(d, n, max, at[i], at[i + 1] - 1, w);
    }
    }
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max, unsigned seed)
{
    unsigned s = seed;
    enum { MAXL = 4096 };
    static Line ls[MAXL];
    static int idx[MAXL + 1];
    static uint8_t tmp[1 << 20];
    int k = split_lines(data, size, ls, MAXL);
    size_t n = 0;
    unsigned op = rnd(&s) % 10;
    if (k >= 1 && op <= 3 && max <= sizeof tmp) {
        for (int i = 0; i < k; i++)
            idx[i] = i;
        int i = (int)(rnd(&s) % (unsigned)k), j = (int)(rnd(&s) % (unsigned)k), m = k;
        if (op == 0) {                                   /* delete line i */
            memmove(idx + i, idx + i + 1, (size_t)(k - i - 1) * sizeof *idx);
            m--;
        } else if (op == 1) {                            /* duplicate line i after j */
            memmove(idx + j + 1, idx + j, (size_t)(k - j) * sizeof *idx);
            idx[j + 1] = i;
            m++;
        } else if (op == 2) {                            /* swap lines i and j */
            int t = idx[i]; idx[i] = idx[j]; idx[j] = t;
        } else {                                         /* move line i to j */
            int t = idx[i];
            memmove(idx + i, idx + i + 1, (size_t)(k - i - 1) * sizeof *idx);
            memmove(idx + j + 1, idx + j, (size_t)(k - 1 - j) * sizeof *idx);
            idx[j] = t;
        }
        n = join(tmp, max, data, ls, idx, m);
        if (n || m == 0) {
            memcpy(data, tmp, n);
            return n;
        }
    } else if (op <= 5) {                                /* a number: an interesting value */
        size_t from, to;
        if (pick_token(data, size, &s, 0, &from, &to))
            n = splice(data, size, max, from, to, numbers[rnd(&s) % (sizeof numbers / sizeof *numbers)]);
    } else if (op == 6) {                                /* a name: another name */
        size_t from, to;
        if (pick_token(data, size, &s, 1, &from, &to))
            n = splice(data, size, max, from, to, words[rnd(&s) % (sizeof words / sizeof *words)]);
    } else if (op == 7) {                                /* a [shape] / [perm] list */
        n = mutate_list(data, size, max, &s);
    }
    return n ? n : LLVMFuzzerMutate(data, size, max);
}

/* splice: the first lines of one input, the last lines of the other */
size_t LLVMFuzzerCustomCrossOver(const uint8_t *d1, size_t n1, const uint8_t *d2, size_t n2, uint8_t *out,
                                 size_t max, unsigned seed)
{
    unsigned s = seed;
    static Line l1[4096], l2[4096];
    int k1 = split_lines(d1, n1, l1, 4096), k2 = split_lines(d2, n2, l2, 4096);
    if (!k1 || !k2)
        return 0;
    int a = (int)(rnd(&s) % (unsigned)(k1 + 1)), b = (int)(rnd(&s) % (unsigned)(k2 + 1));
    size_t n = 0;
    for (int i = 0; i < a && n + l1[i].len <= max; i++, n += l1[i - 1].len)
        memcpy(out + n, d1 + l1[i].at, l1[i].len);
    for (int i = b; i < k2 && n + l2[i].len <= max; i++, n += l2[i - 1].len)
        memcpy(out + n, d2 + l2[i].at, l2[i].len);
    return n;
}
#endif
