/* build.c — building the executable: emit the program into a temporary
 * directory, compile and link it with the runtime, and move the result to
 * its place atomically. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "driver.h"

int driver_run(char **argv, const char *err, int verbose)
{
    if (verbose) {
        fputs("gcompile: run:", stderr);
        for (char **a = argv; *a; a++)
            fprintf(stderr, " %s", *a);
        fputc('\n', stderr);
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = err ? open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644) : -1;
        if (fd >= 0)
            dup2(fd, 2);
        execvp(argv[0], argv);
        fprintf(stderr, "gcompile: error: cannot run '%s': %s%s\n", argv[0], strerror(errno),
                strstr(argv[0], "nvcc") ? " (the CUDA target needs the CUDA toolkit; --target cpu builds for the CPU)"
                                        : "");
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Where the runtime lives: $GCOMPILE_RUNTIME, else the build's own paths. */
static const char *runtime_dir(void)
{
    const char *d = getenv("GCOMPILE_RUNTIME_DIR");
    return d && *d ? d : GC_RUNTIME_DIR;
}

static const char *runtime_lib(void)
{
    const char *d = getenv("GCOMPILE_RUNTIME_LIB");
    return d && *d ? d : GC_RUNTIME_LIB;
}

#ifndef GC_JANSSON_LIB
#define GC_JANSSON_LIB "-ljansson"   /* the runtime's safetensors headers (CMakeLists.txt: the library's path) */
#endif

#ifndef GC_PROGRAM_CFLAGS
#define GC_PROGRAM_CFLAGS ""   /* sanitizer builds: the runtime's -fsanitize flags (CMakeLists.txt) */
#endif

/* Appends the space-separated words of s to argv (a copy in *buf). */
static int add_words(char **argv, int n, int max, const char *s, char **buf)
{
    *buf = xstrdup(s);
    for (char *w = strtok(*buf, " \t"); w && n < max; w = strtok(NULL, " \t"))
        argv[n++] = w;
    return n;
}

/* cc on the program and the runtime; the flags the runtime was built with
 * (GC_PROGRAM_CFLAGS: a sanitizer build's programs are sanitized too), then
 * $GCOMPILE_CFLAGS (e.g. -fsanitize=thread). */
/* Split programs (g->nranks > 1) are built with mpicc (--mpicc) and the MPI comm file. */
static int build_cpu(const Graph *g, const char *src, const char *exe, const DriverOptions *o)
{
    int split = g->nranks > 1;
    char *inc = xasprintf("-I%s", runtime_dir());
    char *cbl = xasprintf("-I%s", GC_CBLAS_INCLUDE);
    char *cc = xstrdup(split ? o->mpicc : o->cc), *w1, *w2;
    char *comm = xasprintf("%s/mpi/comm_mpi.c", runtime_dir());
    const char *env = getenv("GCOMPILE_CFLAGS");
    char *argv[96] = {cc, "-std=c11", "-O3", "-march=native", "-fopenmp", "-w", inc, cbl};
    int n = 8;
    n = add_words(argv, n, 40, GC_PROGRAM_CFLAGS, &w1);
    n = add_words(argv, n, 80, env ? env : "", &w2);
    const char *rest[] = {"-o", exe, src, split ? comm : runtime_lib(), runtime_lib(), GC_OPENBLAS_LIB, GC_JANSSON_LIB,
                          "-lm", NULL};
    for (int i = 0; rest[i]; i++)
        if (i != 4 || split)    /* the runtime once, after the comm file when split */
            argv[n++] = (char *)rest[i];
    argv[n] = NULL;
    int rc = driver_run(argv, NULL, o->verbose);
    free(inc);
    free(cbl);
    free(cc);
    free(w1);
    free(w2);
    free(comm);
    return rc;
}

static const char *runtime_host_lib(void)
{
    const char *d = getenv("GCOMPILE_RUNTIME_HOST_LIB");
    return d && *d ? d : GC_RUNTIME_HOST_LIB;
}

/* The -I, -L and -l words of `MPICC --showme:WHAT` (Open MPI's wrapper
 * flags), appended to argv[*n..max) and to keep (freed by the caller); -1
 * after an error message. */
static int mpi_flags(const char *mpicc, const char *what, char **argv, int *n, int max, char **keep, int *nkeep)
{
    char *cmd = xasprintf("%s --showme:%s 2>/dev/null", mpicc, what);
    FILE *p = popen(cmd, "r");
    free(cmd);
    char line[4096] = "";
    int got = p && fgets(line, sizeof line, p) != NULL;
    int rc = p ? pclose(p) : -1;
    if (!got || rc != 0) {
        fprintf(stderr, "gcompile: error: '%s --showme' did not give MPI's flags (a split CUDA program needs "
                        "MPI and NCCL; --mpicc names the MPI wrapper)\n", mpicc);
        return -1;
    }
    for (char *w = strtok(line, " \t\n"); w && *n < max && *nkeep < 40; w = strtok(NULL, " \t\n"))
        if (!strncmp(w, "-I", 2) || !strncmp(w, "-L", 2) || !strncmp(w, "-l", 2))
            argv[(*n)++] = keep[(*nkeep)++] = xstrdup(w);
    return 0;
}

/* The runtime's objects (nvcache.c) with the flags so far (argv[0..n)):
 * rt[i] becomes the object of source rt[i]. 0; 1 when nvcc failed; -1 when
 * the cache cannot be written (the sources left are compiled with the program). */
static int cached_objects(const NvCache *c, char **argv, int n, char **rt, int nrt, char **tofree, int *nfree)
{
    argv[n] = NULL;   /* overwritten by the caller's next flag */
    int rc = 0;
    for (int i = 0; i < nrt && rc == 0; i++) {
        char *obj;
        rc = nvcache_object(c, argv, rt[i], &obj);
        if (rc == 0)
            rt[i] = tofree[(*nfree)++] = obj;
    }
    return rc;
}

/* nvcc for every architecture of --gpu-arch (SASS), plus PTX of the last one
 * so that a newer GPU JIT-compiles it instead of failing with "no kernel
 * image"; nvcc's warnings are shown (tests/cudabuild keeps them at zero).
 * The runtime's sources are compiled once each into the cache (nvcache.c)
 * and linked as objects (no cross-file device code: no -rdc); without the
 * cache they are compiled with the program, in the same nvcc command.
 * Split programs add NCCL and MPI (flags from the MPI wrapper compiler):
 * comm_nccl.cu is compiled with MPI's include flags. */
static int build_cuda(const Graph *g, const char *src, const char *exe, const DriverOptions *o)
{
    char *argv[80];
    int n = 0;
    char *tofree[48];
    int nfree = 0, rc = 1;
#define KEEP(s) (tofree[nfree++] = (s))
    argv[n++] = KEEP(xstrdup(o->nvcc));
    argv[n++] = "-O3";
    argv[n++] = "-std=c++17";
    char *arch = xstrdup(o->gpu_arch);
    KEEP(arch);
    const char *last = NULL;
    for (char *a = strtok(arch, ","); a && n < 40 && nfree < 16; a = strtok(NULL, ",")) {
        argv[n++] = "-gencode";
        argv[n++] = KEEP(xasprintf("arch=compute_%s,code=%s", a + 3, a));
        last = a;
    }
    if (last) {
        argv[n++] = "-gencode";
        argv[n++] = KEEP(xasprintf("arch=compute_%s,code=compute_%s", last + 3, last + 3));
    }
    argv[n++] = KEEP(xasprintf("-I%s", runtime_dir()));
    argv[n++] = KEEP(xasprintf("-I%s/cuda", runtime_dir()));
    int split = g->nranks > 1;
    char *rt[3];
    const char *names[] = {"kernels_cuda", "device_cuda", "comm_nccl"};
    for (int i = 0; i < 2 + split; i++)
        rt[i] = KEEP(xasprintf("%s/cuda/%s.cu", runtime_dir(), names[i]));
    NvCache cache;
    int cached = nvcache_open(&cache, o->nvcc, runtime_dir(), o->verbose) == 0, got = 0;
    if (cached && (got = cached_objects(&cache, argv, n, rt, 2, tofree, &nfree)) > 0)
        goto out;
    if (split && mpi_flags(o->mpicc, "compile", argv, &n, 50, tofree, &nfree))
        goto out;
    if (split && cached && got == 0 && cached_objects(&cache, argv, n, rt + 2, 1, tofree, &nfree) > 0)
        goto out;
    argv[n++] = "-o";
    argv[n++] = (char *)exe;
    argv[n++] = (char *)src;
    for (int i = 0; i < 2 + split; i++)
        argv[n++] = rt[i];
    if (split) {
        if (mpi_flags(o->mpicc, "link", argv, &n, 60, tofree, &nfree))
            goto out;
        argv[n++] = "-lnccl";
    }
    argv[n++] = (char *)runtime_host_lib();
    argv[n++] = GC_JANSSON_LIB;
    argv[n++] = "-lcublasLt";
    argv[n++] = "-lcublas";
    argv[n++] = "-Xcompiler";
    argv[n++] = "-fopenmp";
    argv[n++] = "-lm";
    argv[n] = NULL;
#undef KEEP
    rc = driver_run(argv, NULL, o->verbose);
out:
    if (cached)
        nvcache_close(&cache);
    for (int i = 0; i < nfree; i++)
        free(tofree[i]);
    return rc;
}

int driver_build(const Graph *g, const DriverOptions *o)
{
    int cuda = !strcmp(o->emit.target, "cuda");
    if (driver_check_trainer(g))
        return 1;

    const char *out = o->output ? o->output : "train";
    int kind = driver_output_kind(out);     /* refused (a directory, a FIFO) before compiling */
    if (kind < 0)
        return 1;
    const char *tmpdir = getenv("TMPDIR");
    char *dir = xasprintf("%s/gcompile.XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "gcompile: error: cannot create a temporary directory '%s': %s\n", dir, strerror(errno));
        free(dir);
        return 1;
    }
    char *src = xasprintf("%s/train.%s", dir, cuda ? "cu" : "c");
    char *exe = xasprintf("%s/train", dir);
    int rc = 1;
    FILE *f = fopen(src, "w");
    if (!f) {
        fprintf(stderr, "gcompile: error: cannot write '%s': %s\n", src, strerror(errno));
        goto cleanup;
    }
    if (cuda)
        emit_cuda(f, g, &o->emit);
    else
        emit_c(f, g, &o->emit);
    int bad = ferror(f);
    if ((fclose(f) != 0) | bad) {
        fprintf(stderr, "gcompile: error: cannot write '%s': %s\n", src, strerror(bad ? EIO : errno));
        goto cleanup;
    }
    if ((cuda ? build_cuda(g, src, exe, o) : build_cpu(g, src, exe, o)) != 0) {
        fprintf(stderr, "gcompile: error: the %s compiler failed on the generated program (kept in %s)\n",
                cuda ? "CUDA" : "C", dir);
        free(src);
        free(exe);
        free(dir);
        return 1;
    }
    /* same filesystem, out not a device: rename; another filesystem: copy
     * through a temporary beside out; a device: written in place */
    int moved = kind == OUT_REPLACE && rename(exe, out) == 0;
    if (!moved && kind == OUT_REPLACE && errno != EXDEV) {
        fprintf(stderr, "gcompile: error: cannot write '%s': %s (the file is unchanged)\n", out, strerror(errno));
        goto cleanup;
    }
    if (!moved) {
        char *tmp;
        FILE *dst = atomic_open(out, &tmp), *in = dst ? fopen(exe, "rb") : NULL;
        if (!in) {
            if (dst) {
                fprintf(stderr, "gcompile: error: cannot read '%s': %s\n", exe, strerror(errno));
                atomic_abandon(dst, tmp);
            }
            goto cleanup;
        }
        char buf[65536];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, in)) > 0)
            if (fwrite(buf, 1, n, dst) != n) {
                fprintf(stderr, "gcompile: error: cannot write '%s': %s%s\n", out, strerror(errno),
                        tmp ? " (the file is unchanged)" : "");   /* before abandon frees tmp */
                fclose(in);
                atomic_abandon(dst, tmp);
                goto cleanup;
            }
        int bad_in = ferror(in);
        fclose(in);
        if (bad_in) {
            fprintf(stderr, "gcompile: error: cannot read '%s'\n", exe);
            atomic_abandon(dst, tmp);
            goto cleanup;
        }
        if (tmp)
            fchmod(fileno(dst), 0755);
        if (atomic_commit(dst, tmp, out) != 0)
            goto cleanup;
    }
    if (o->verbose)
        fprintf(stderr, "gcompile: wrote %s\n", out);
    rc = 0;
cleanup:
    unlink(exe);
    unlink(src);
    rmdir(dir);
    free(src);
    free(exe);
    free(dir);
    return rc;
}
