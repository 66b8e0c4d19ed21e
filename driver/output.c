/* output.c — writing artifacts: atomic files, --emit, the budget check. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "driver.h"

int driver_output_kind(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return OUT_REPLACE;      /* absent (or unreadable: the create beside it reports that) */
    if (S_ISREG(sb.st_mode))
        return OUT_REPLACE;
    if (S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode))
        return OUT_THROUGH;
    fprintf(stderr, "gcompile: error: cannot write '%s': it is %s, not a regular file or a device\n", path,
            S_ISDIR(sb.st_mode) ? "a directory" : S_ISFIFO(sb.st_mode) ? "a FIFO" : S_ISSOCK(sb.st_mode) ? "a socket"
                                                                             : "a special file");
    return -1;
}

FILE *atomic_open(const char *path, char **tmp)
{
    *tmp = NULL;
    int kind = driver_output_kind(path);
    if (kind < 0)
        return NULL;
    if (kind == OUT_THROUGH) {      /* a device: written in place, never replaced by a file */
        int fd = open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC);
        FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
        if (!f) {
            fprintf(stderr, "gcompile: error: cannot open '%s': %s\n", path, strerror(errno));
            if (fd >= 0)
                close(fd);
        }
        return f;
    }
    *tmp = xasprintf("%s.tmp.XXXXXX", path);
    int fd = mkstemp(*tmp);
    if (fd < 0) {
        fprintf(stderr, "gcompile: error: cannot create '%s': %s\n", *tmp, strerror(errno));
        free(*tmp);
        *tmp = NULL;
        return NULL;
    }
    FILE *f = fdopen(fd, "w");
    if (!f) {
        fprintf(stderr, "gcompile: error: cannot open '%s': %s\n", *tmp, strerror(errno));
        close(fd);
        unlink(*tmp);
        free(*tmp);
        *tmp = NULL;
    }
    return f;
}

/* errno of the first failing step (0: none failed) */
static int first_error(int prev, int failed) { return prev ? prev : failed ? (errno ? errno : EIO) : 0; }

int atomic_commit(FILE *f, char *tmp, const char *path)
{
    /* a buffered write that failed earlier left its errno, if nothing has
     * failed since (write_output zeroes errno before writing) */
    int e = ferror(f) ? (errno ? errno : EIO) : 0;
    errno = 0;
    e = first_error(e, fflush(f) != 0);
    if (tmp) {           /* a device (tmp NULL) may not support fsync: /dev/null says EINVAL */
        errno = 0;
        e = first_error(e, fsync(fileno(f)) != 0);
    }
    errno = 0;
    e = first_error(e, fclose(f) != 0);
    if (!e && tmp) {
        errno = 0;
        e = first_error(e, rename(tmp, path) != 0);
    }
    if (!e) {
        free(tmp);
        return 0;
    }
    fprintf(stderr, "gcompile: error: cannot write '%s': %s%s\n", path, strerror(e),
            tmp ? " (the file is unchanged)" : "");
    if (tmp)
        unlink(tmp);
    free(tmp);
    return -1;
}

void atomic_abandon(FILE *f, char *tmp)
{
    fclose(f);
    if (tmp)
        unlink(tmp);
    free(tmp);
}

const char *human_bytes(char *buf, size_t n, double bytes)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, n, u ? "%.2f %s" : "%.0f %s", bytes, units[u]);
    return buf;
}

int driver_check_budget(const Graph *g, const DriverOptions *o)
{
    if (!o->emit.budget_bytes)
        return 0;
    size_t reserve = strcmp(o->emit.target, "cuda") ? 0 : GC_CUDA_RESERVE_BYTES;
    size_t total = graph_device_bytes(g) + reserve;   /* the host region is not device memory */
    if (total <= o->emit.budget_bytes)
        return 0;
    char a[32], b[32], p[32], gr[32], os[32], ar[32], rs[32];
    fprintf(stderr,
            "gcompile: error: the plan needs %s per device but --mem is %s "
            "(params %s + grads %s + optimizer state %s + arena %s + CUDA reserve %s) with the levers given; "
            "--recompute auto without --micro-batches searches for a plan that fits\n",
            human_bytes(a, sizeof a, (double)total), human_bytes(b, sizeof b, (double)o->emit.budget_bytes),
            human_bytes(p, sizeof p, (double)g->region_bytes[RG_PARAMS]),
            human_bytes(gr, sizeof gr, (double)g->region_bytes[RG_GRADS]),
            human_bytes(os, sizeof os, (double)g->region_bytes[RG_OPTSTATE]),
            human_bytes(ar, sizeof ar, (double)g->region_bytes[RG_ARENA]), human_bytes(rs, sizeof rs, (double)reserve));
    return 1;
}

/* The emitted trainer feeds two inputs, tokens and targets, i32 [B, T],
 * and checks every token id against the dim V; a graph it cannot train so
 * is a located error here, before any code is written (docs/grammar.md). */
int driver_check_trainer(const Graph *g)
{
    long B = graph_dim(g, "B"), T = graph_dim(g, "T");
    static const char *const names[] = {"tokens", "targets"};
    int bad = 0;
    if (B < 0 || T < 0) {
        diag_error((Loc){g->file, 1, 1}, "a training program needs dims B (batch) and T (sequence length)");
        return 1;
    }
    if (graph_dim(g, "V") < 0) {
        diag_error((Loc){g->file, 1, 1}, "a training program needs a dim V, the vocabulary size (every token id "
                   "of the data must be below it)");
        bad = 1;
    }
    for (int i = 0; i < g->ninputs; i++) {
        const Tensor *t = &g->t[g->inputs[i]];
        if (strcmp(t->name, names[0]) && strcmp(t->name, names[1])) {
            diag_error(t->loc, "input '%s': a training program feeds only 'tokens' and 'targets' (i32[B, T] from "
                       "the token data); nothing would feed '%s'", t->name, t->name);
            bad = 1;
        }
    }
    for (int k = 0; k < 2; k++) {
        int found = -1;
        for (int i = 0; i < g->ninputs; i++)
            if (!strcmp(g->t[g->inputs[i]].name, names[k]))
                found = g->inputs[i];
        if (found < 0) {
            diag_error((Loc){g->file, 1, 1},
                       "a training program feeds inputs named 'tokens' and 'targets' (i32[B, T]); "
                       "this graph has no input '%s'", names[k]);
            bad = 1;
            continue;
        }
        const Tensor *t = &g->t[found];
        if (t->dtype != DT_I32 || t->rank != 2 || t->shape[0] != B || t->shape[1] != T) {
            diag_error(t->loc, "input '%s' must be i32[B, T] = i32[%ld, %ld] for the training program", names[k], B, T);
            bad = 1;
        }
    }
    return bad;
}

/* writes the artifact named by o->emit_kind to f */
static int write_artifact(FILE *f, const Graph *g, const DriverOptions *o)
{
    const char *k = o->emit_kind;
    EmitOptions e = o->emit;
    if (!strcmp(k, "ir"))
        ir_print(f, g);
    else if (!strcmp(k, "summary")) {
        ir_print_summary(f, g);
        if (!strcmp(o->emit.target, "cuda") && g->nsched) {   /* the plan + the CUDA reserve (codegen.h) */
            size_t total = GC_CUDA_RESERVE_BYTES + graph_device_bytes(g);
            fprintf(f, "device_reserve_bytes: %zu\ndevice_bytes_needed: %zu\n", GC_CUDA_RESERVE_BYTES, total);
        }
    }
    else if ((!strcmp(k, "c") || !strcmp(k, "cuda")) && driver_check_trainer(g))
        return -2;
    else if (!strcmp(k, "c"))
        emit_c(f, g, &e);
    else if (!strcmp(k, "cuda"))
        emit_cuda(f, g, &e);
    else if (!strcmp(k, "plan"))
        return emit_plan_json(f, g, &e);
    else if (!strcmp(k, "plan-text"))
        emit_plan_text(f, g, &e);
    else if (!strcmp(k, "plan-svg"))
        emit_plan_svg(f, g, &e);
    else if (!strcmp(k, "plan-html"))
        return emit_plan_html(f, g, &e);
    else
        IR_BUG("emit kind %s", k);
    return 0;
}

/* Runs write(f, arg) into path, or into stdout when path is NULL or "-"; a
 * file is written atomically (temporary file + rename). write returns 0, -2
 * after reporting its own error, anything else when writing failed. */
static int write_output(const char *path, int (*write)(FILE *, const void *), const void *arg)
{
    if (!path || !strcmp(path, "-")) {
        int rc = write(stdout, arg);
        if (rc == -2)
            return 1;
        if (fflush(stdout) != 0 || ferror(stdout) || rc) {
            fprintf(stderr, "gcompile: error: writing to standard output failed\n");
            return 1;
        }
        return 0;
    }
    char *tmp;
    FILE *f = atomic_open(path, &tmp);
    if (!f)
        return 1;
    errno = 0;
    int rc = write(f, arg);
    if (rc != 0) {
        int e = ferror(f) ? errno : 0, replaced = tmp != NULL;
        atomic_abandon(f, tmp);
        if (rc != -2)
            fprintf(stderr, "gcompile: error: cannot write '%s': %s%s\n", path, e ? strerror(e) : "write failed",
                    replaced ? " (the file is unchanged)" : "");
        return 1;
    }
    return atomic_commit(f, tmp, path) ? 1 : 0;
}

int driver_write(const char *path, int (*write)(FILE *, const void *), const void *arg)
{
    return write_output(path, write, arg);
}

typedef struct { const Graph *g; const DriverOptions *o; } Artifact;
typedef struct { json_t *a, *b; const DriverOptions *o; } DiffPage;

static int put_artifact(FILE *f, const void *arg)
{
    const Artifact *x = arg;
    return write_artifact(f, x->g, x->o);
}

static int put_diff(FILE *f, const void *arg)
{
    const DiffPage *x = arg;
    return emit_plan_diff(f, x->a, x->o->input, x->b, x->o->input2);
}

int driver_emit(const Graph *g, const DriverOptions *o)
{
    Artifact x = {g, o};
    return write_output(o->output, put_artifact, &x);
}

/* Writes the page to o->output (stdout when NULL or "-"). */
static int write_diff(json_t *a, json_t *b, const DriverOptions *o)
{
    DiffPage x = {a, b, o};
    return write_output(o->output, put_diff, &x);
}

int driver_emit_diff(const DriverOptions *o)
{
    char err[512];
    json_t *a = plan_diff_load(o->input, err, sizeof err), *b = NULL;
    int rc = 1;
    if (a)
        b = plan_diff_load(o->input2, err, sizeof err);
    if (!a || !b)
        fprintf(stderr, "gcompile: error: plan-diff: %s\n", err);
    else if (plan_diff_check(a, b, err, sizeof err))
        fprintf(stderr, "gcompile: error: plan-diff: '%s' and '%s' are plans of different graphs (%s)\n",
                o->input, o->input2, err);
    else
        rc = write_diff(a, b, o);
    json_decref(a);
    json_decref(b);
    return rc;
}
