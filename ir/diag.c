/* diag.c — located diagnostics and allocation helpers. */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ir.h"

typedef struct Source { const char *file; const char *text; size_t len; } Source;
static Source sources[16];
static int nsources;
static int nerrors;
static int quiet;
/* hashes of the warnings printed so far: a graph built several times (the
 * budget search, --split auto, micro-batches) warns once */
static size_t warned[256];
static int nwarned;

void diag_reset(int be_quiet)
{
    nsources = 0;
    nerrors = 0;
    nwarned = 0;
    quiet = be_quiet;
}

void diag_add_source(const char *file, const char *text, size_t len)
{
    if (nsources < (int)(sizeof sources / sizeof sources[0]))
        sources[nsources++] = (Source){file, text, len};
}

const char *diag_source_line(Loc loc, size_t *len)
{
    if (!loc.file || loc.line < 1)
        return NULL;
    for (int i = 0; i < nsources; i++) {
        if (strcmp(sources[i].file, loc.file) != 0)
            continue;
        const char *p = sources[i].text, *end = p + sources[i].len;
        for (int l = 1; l < loc.line && p < end; p++)
            if (*p == '\n')
                l++;
        if (p >= end)
            return NULL;
        const char *e = p;
        while (e < end && *e != '\n' && *e != '\r')
            e++;
        *len = (size_t)(e - p);
        return p;
    }
    return NULL;
}

/* Prints line `line` of the registered source of `file` and a caret at col. */
static void show_line(Loc loc)
{
    for (int i = 0; i < nsources; i++) {
        if (strcmp(sources[i].file, loc.file) != 0)
            continue;
        const char *p = sources[i].text, *end = p + sources[i].len;
        for (int l = 1; l < loc.line && p < end; p++)
            if (*p == '\n')
                l++;
        const char *e = p;
        while (e < end && *e != '\n')
            e++;
        /* a window of at most 160 columns around the caret ("..." marks a cut) */
        long col = loc.col > 0 ? loc.col : 1, len = (long)(e - p);
        long from = col > 80 ? col - 80 : 1, to = from + 159 < len ? from + 159 : len;
        fputs(from > 1 ? "  ..." : "  ", stderr);
        for (const char *q = p + from - 1; q < p + to; q++)  /* unprintable bytes shown as '?' */
            fputc((*q == '\t' || (*q >= 32 && *q < 127)) ? *q : '?', stderr);
        fputs(to < len ? "...\n  " : "\n  ", stderr);
        if (from > 1)
            fputs("   ", stderr);
        for (long c = from; c < col && c <= to; c++)
            fputc(p[c - 1] == '\t' ? '\t' : ' ', stderr);
        fputs("^\n", stderr);
        return;
    }
}

static void report(Loc loc, const char *what, const char *fmt, va_list ap)
{
    if (quiet)
        return;
    if (loc.file && loc.line > 0)
        fprintf(stderr, "%s:%d:%d: %s: ", loc.file, loc.line, loc.col, what);
    else
        fprintf(stderr, "gcompile: %s: ", what);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    if (loc.file && loc.line > 0)
        show_line(loc);
}

/* errors past this many are counted, not printed */
#define DIAG_MAX_SHOWN 50

void diag_error(Loc loc, const char *fmt, ...)
{
    if (++nerrors > DIAG_MAX_SHOWN) {
        if (nerrors == DIAG_MAX_SHOWN + 1 && !quiet)
            fprintf(stderr, "gcompile: error: more than %d errors; the rest are not shown\n", DIAG_MAX_SHOWN);
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    report(loc, "error", fmt, ap);
    va_end(ap);
}


static size_t warn_hash(Loc loc, const char *msg)
{
    size_t h = 1469598103934665603u;
    for (const char *s = loc.file ? loc.file : ""; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    h = (h ^ (size_t)loc.line) * 1099511628211u;
    h = (h ^ (size_t)loc.col) * 1099511628211u;
    for (const char *s = msg; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    return h;
}

static void print_line(Loc loc, const char *what, const char *msg)
{
    if (loc.file && loc.line > 0)
        fprintf(stderr, "%s:%d:%d: %s: %s\n", loc.file, loc.line, loc.col, what, msg);
    else
        fprintf(stderr, "gcompile: %s: %s\n", what, msg);
    if (loc.file && loc.line > 0)
        show_line(loc);
}

void diag_warning(Loc loc, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t h = warn_hash(loc, fmt);   /* not msg: a micro-batch build's B differs in the numbers */
    for (int i = 0; i < nwarned; i++)
        if (warned[i] == h)
            return;
    if (nwarned < (int)(sizeof warned / sizeof warned[0]))
        warned[nwarned++] = h;
    if (!quiet)
        print_line(loc, "warning", msg);
}

void diag_note(Loc loc, const char *fmt, ...)
{
    if (nerrors > DIAG_MAX_SHOWN)
        return;
    va_list ap;
    va_start(ap, fmt);
    report(loc, "note", fmt, ap);
    va_end(ap);
}

int diag_count(void) { return nerrors; }

void ir_bug(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s:%d: internal compiler error: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        IR_BUG("out of memory (%zu bytes)", n);
    return p;
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        IR_BUG("out of memory (%zu x %zu bytes)", n, size);
    return p;
}

void *xrealloc(void *p, size_t n)
{
#ifdef GC_MOVE_ON_GROW      /* sanitizer builds: every growth moves (ir.h, the growth rule) */
    void *q = xmalloc(n);
    if (p) {
        size_t old = malloc_usable_size(p);
        memcpy(q, p, old < n ? old : n);
        free(p);
    }
    return q;
#endif
    p = realloc(p, n ? n : 1);
    if (!p)
        IR_BUG("out of memory (%zu bytes)", n);
    return p;
}

void *xgrow(void *p, int *cap, int need, size_t elem)
{
    if (need < 0)
        IR_BUG("xgrow: negative count");
#ifndef GC_MOVE_ON_GROW
    if (need <= *cap)
        return p;
    int c = *cap > 8 ? *cap : 8;
    while (c < need)
        c = c > (1 << 29) ? need : 2 * c;
    *cap = c;
#else
    /* exact size, so the next growth moves again; past 16 KiB by doubling
       (moving at each doubling only), so large arrays stay linear (moving
       on every call copied 29 GB for a 20,000-statement graph: minutes) */
    if (need <= *cap)
        return p;
    *cap = (size_t)need * elem <= 16384 ? need : (need > 2 * *cap ? need : 2 * *cap);
#endif
    return xrealloc(p, (size_t)*cap * elem);
}

char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(xmalloc(n), s, n);
}

char *xasprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

char *read_regular_file(const char *path, size_t limit, size_t *len, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);   /* a FIFO opens at once, then is refused */
    if (fd < 0) {
        snprintf(err, errlen, "cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        snprintf(err, errlen, "cannot read '%s': not a regular file", path);
        close(fd);
        return NULL;
    }
    if ((unsigned long long)sb.st_size > limit) {
        snprintf(err, errlen, "cannot read '%s': %lld bytes, larger than the limit of %zu MiB", path,
                 (long long)sb.st_size, limit >> 20);
        close(fd);
        return NULL;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    size_t cap = (size_t)sb.st_size + 1, n = 0;   /* a file that grows while read: up to limit */
    char *text = xmalloc(cap + 1);
    for (;;) {
        if (n == cap) {
            if (cap > limit) {
                snprintf(err, errlen, "cannot read '%s': larger than the limit of %zu MiB", path, limit >> 20);
                goto bad;
            }
            cap = cap * 2 < limit + 1 ? cap * 2 : limit + 1;
            text = xrealloc(text, cap + 1);
        }
        ssize_t got = read(fd, text + n, cap - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            snprintf(err, errlen, "cannot read '%s': %s", path, strerror(errno));
            goto bad;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    text[n] = '\0';
    *len = n;
    return text;
bad:
    close(fd);
    free(text);
    return NULL;
}
