/* nvcache.c — the cache of the CUDA runtime's objects. kernels_cuda.cu alone
 * takes nvcc half a minute per architecture, and it does not change between
 * programs: each runtime source is compiled once (`nvcc -c`) into an object
 * named by a hash of everything that can change it (nvcc and its --version, the
 * host compiler's --version, nvcc's environment flags, the runtime sources, the
 * flags), and linked with train.cu.
 * A hit is an existing file; a miss compiles into a temporary directory in the
 * cache and renames the object into place, so a reader never sees a partial
 * object and two gcompile processes racing both succeed. The cache keeps
 * under $GCOMPILE_CACHE_MAX: closing removes the least recently used
 * objects (a hit touches its object), never one this build used. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "driver.h"

/* ---- the key: 64-bit FNV-1a ---- */

static void fnv(uint64_t *h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        *h = (*h ^ b[i]) * 0x100000001b3ull;
}

/* s and its terminating NUL: "ab","c" and "a","bc" differ */
static void fnv_str(uint64_t *h, const char *s)
{
    fnv(h, s ? s : "", strlen(s ? s : "") + 1);
}

/* Adds the output of `argv` (stdout and stderr) to *h; nothing when it
 * cannot run (the compile that follows reports that). */
static void fnv_output(uint64_t *h, char **argv)
{
    int fd[2];
    if (pipe(fd) != 0)
        return;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 1);
        dup2(fd[1], 2);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(fd[1]);
    char buf[4096];
    ssize_t n;
    while (pid > 0 && ((n = read(fd[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)))
        if (n > 0)
            fnv(h, buf, (size_t)n);
    close(fd[0]);
    int status;
    while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Adds every regular file of dir (not its subdirectories), sorted by name:
 * the name and the contents. */
static void fnv_dir(uint64_t *h, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        fnv_str(h, "(no directory)");
        return;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap)
            names = xrealloc(names, (cap = cap ? 2 * cap : 64) * sizeof *names);
        names[n++] = xasprintf("%s/%s", dir, e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        FILE *f = stat(names[i], &st) == 0 && S_ISREG(st.st_mode) ? fopen(names[i], "rb") : NULL;
        if (f) {
            fnv_str(h, strrchr(names[i], '/') + 1);
            char buf[65536];
            size_t k;
            while ((k = fread(buf, 1, sizeof buf, f)) > 0)
                fnv(h, buf, k);
            fnv(h, "", 1);
            fclose(f);
        }
        free(names[i]);
    }
    free(names);
}

/* ---- the directory ---- */

/* mkdir -p path (mode 0755); 0 when it is a directory afterwards. */
static int mkdir_p(const char *path)
{
    char *p = xstrdup(path);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            mkdir(p, 0755);   /* an error shows at the last component */
            *s = '/';
        }
    int rc = mkdir(p, 0755) != 0 && errno != EEXIST ? -1 : 0;
    struct stat st;
    if (rc == 0 && (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)))
        rc = -1, errno = ENOTDIR;
    free(p);
    return rc;
}

/* $GCOMPILE_CACHE, else $XDG_CACHE_HOME/gcompile, else $HOME/.cache/gcompile;
 * NULL when off ("" or "off") or there is no home. */
static char *cache_path(void)
{
    const char *c = getenv("GCOMPILE_CACHE"), *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (c)
        return *c && strcmp(c, "off") ? xstrdup(c) : NULL;
    if (x && x[0] == '/')   /* the XDG spec: a relative path is ignored */
        return xasprintf("%s/gcompile", x);
    return home && *home ? xasprintf("%s/.cache/gcompile", home) : NULL;
}

int nvcache_open(NvCache *c, const char *nvcc, const char *rtdir, int verbose)
{
    memset(c, 0, sizeof *c);
    c->verbose = verbose;
    c->opened = time(NULL) - 1;   /* whole seconds: an object touched or written from now on is newer */
    c->dir = cache_path();
    if (!c->dir) {
        if (verbose)
            fprintf(stderr, "gcompile: cache: %s; the runtime is compiled with the program\n",
                    getenv("GCOMPILE_CACHE") ? "off (GCOMPILE_CACHE)" : "no directory (neither XDG_CACHE_HOME nor HOME)");
        return -1;
    }
    if (mkdir_p(c->dir) != 0) {
        if (verbose)
            fprintf(stderr, "gcompile: cache: cannot create '%s': %s; building without the cache\n", c->dir,
                    strerror(errno));
        nvcache_close(c);
        return -1;
    }
    c->key = 0xcbf29ce484222325ull;
    fnv_str(&c->key, "gcompile nvcache 1");
    fnv_str(&c->key, nvcc);
    char *version[] = {(char *)nvcc, "--version", NULL};
    fnv_output(&c->key, version);
    fnv_str(&c->key, getenv("NVCC_PREPEND_FLAGS"));   /* nvcc adds these to every command */
    fnv_str(&c->key, getenv("NVCC_APPEND_FLAGS"));
    /* the host compiler nvcc runs: $NVCC_CCBIN, else gcc and g++ on PATH; an upgraded
     * host compiler (another --version) is another key */
    const char *ccbin = getenv("NVCC_CCBIN");
    fnv_str(&c->key, ccbin);
    const char *hosts[] = {ccbin && *ccbin ? ccbin : "gcc", ccbin && *ccbin ? NULL : "g++"};
    for (int i = 0; i < 2 && hosts[i]; i++) {
        char *host_version[] = {(char *)hosts[i], "--version", NULL};
        fnv_output(&c->key, host_version);
    }
    char *cuda = xasprintf("%s/cuda", rtdir);
    fnv_dir(&c->key, rtdir);
    fnv_dir(&c->key, cuda);
    free(cuda);
    return 0;
}

/* ---- the size limit ---- */

enum { CACHE_MAX_DEFAULT = 1 << 30 };

/* $GCOMPILE_CACHE_MAX in bytes; -1: no limit ("off") */
static long long cache_limit(void)
{
    const char *e = getenv("GCOMPILE_CACHE_MAX");
    if (!e || !*e)
        return CACHE_MAX_DEFAULT;
    if (!strcmp(e, "off"))
        return -1;
    long long b = driver_parse_size(e);
    if (b < 0) {
        fprintf(stderr, "gcompile: warning: GCOMPILE_CACHE_MAX='%s' is not a size (e.g. 2GiB, 500MB, or off); "
                        "the cache keeps under 1GiB\n", e);
        return CACHE_MAX_DEFAULT;
    }
    return b;
}

typedef struct Entry { char *path; long long size; time_t mtime; } Entry;

static int by_age(const void *a, const void *b)
{
    const Entry *x = a, *y = b;
    return x->mtime < y->mtime ? -1 : x->mtime > y->mtime ? 1 : strcmp(x->path, y->path);
}

/* Removes the oldest objects (and their .err) older than c->opened while
 * the objects add up to more than the limit. */
static void prune(const NvCache *c)
{
    long long limit = cache_limit();
    DIR *d = limit >= 0 ? opendir(c->dir) : NULL;
    if (!d)
        return;
    Entry *e = NULL;
    size_t n = 0, cap = 0;
    long long total = 0;
    for (struct dirent *de; (de = readdir(d));) {
        size_t len = strlen(de->d_name);
        struct stat st;
        char *path = xasprintf("%s/%s", c->dir, de->d_name);
        if (len > 2 && !strcmp(de->d_name + len - 2, ".o") && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            if (n == cap)
                e = xrealloc(e, (cap = cap ? 2 * cap : 32) * sizeof *e);
            e[n++] = (Entry){path, (long long)st.st_size, st.st_mtime};
            total += st.st_size;
        } else {
            free(path);
        }
    }
    closedir(d);
    qsort(e, n, sizeof *e, by_age);
    long long freed = 0;
    int removed = 0;
    for (size_t i = 0; i < n && total > limit && e[i].mtime < c->opened; i++)
        if (unlink(e[i].path) == 0 || errno == ENOENT) {   /* ENOENT: another gcompile pruned it */
            char *err = xasprintf("%.*s.err", (int)(strlen(e[i].path) - 2), e[i].path);
            unlink(err);
            free(err);
            total -= e[i].size, freed += e[i].size, removed++;
        }
    if (c->verbose && removed)
        fprintf(stderr, "gcompile: cache: removed %d least recently used object%s (%.1f MiB) to keep under %.1f MiB\n",
                removed, removed == 1 ? "" : "s", freed / 1048576.0, limit / 1048576.0);
    for (size_t i = 0; i < n; i++)
        free(e[i].path);
    free(e);
}

void nvcache_close(NvCache *c)
{
    if (c->dir)
        prune(c);
    free(c->dir);
    c->dir = NULL;
}

/* ---- an object ---- */

static int is_object(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}

/* Blocks on an exclusive lock of path (created): another gcompile compiling
 * the same object finishes first, and this one finds it. The fd, or -1 (no
 * lock: both compile, the renames keep that correct). */
static int lock_file(const char *path)
{
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    while (fd >= 0 && fcntl(fd, F_SETLKW, &l) != 0)
        if (errno != EINTR) {
            close(fd);
            return -1;
        }
    return fd;
}

/* Copies the file path to stderr; 1 when it held anything. */
static int replay(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    char buf[4096];
    size_t n, any = 0;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        any += fwrite(buf, 1, n, stderr);
    fclose(f);
    return any > 0;
}

/* nvcc -c src -o tmp/stem.o in a fresh directory of the cache, its stderr
 * shown and kept as name.err (replayed on every hit, as ccache does: nvcc's
 * warnings stay visible), the object synced and renamed onto name.o (after
 * the .err, so a hit finds both). 0, 1 when nvcc failed, -1 when the cache
 * cannot be written. */
static int compile_into(const NvCache *c, char **flags, const char *src, const char *stem, const char *name)
{
    char *tmp = xasprintf("%s.tmp.XXXXXX", name);
    if (!mkdtemp(tmp)) {
        if (c->verbose)
            fprintf(stderr, "gcompile: cache: cannot write in '%s': %s; building without the cache\n", c->dir,
                    strerror(errno));
        free(tmp);
        return -1;
    }
    char *out = xasprintf("%s/%s.o", tmp, stem), *err = xasprintf("%s/%s.err", tmp, stem);
    char *obj = xasprintf("%s.o", name), *kept = xasprintf("%s.err", name);
    int n = 0;
    while (flags[n])
        n++;
    char **argv = xmalloc((size_t)(n + 5) * sizeof *argv);
    memcpy(argv, flags, (size_t)n * sizeof *argv);
    argv[n] = "-c";
    argv[n + 1] = (char *)src;
    argv[n + 2] = "-o";
    argv[n + 3] = out;
    argv[n + 4] = NULL;
    int rc = driver_run(argv, err, c->verbose) != 0 ? 1 : 0;
    int said = replay(err);
    if (rc == 0) {
        int fd = open(out, O_RDONLY);
        if (!said)
            unlink(kept);   /* a stale one, its object deleted since */
        if (fd < 0 || fsync(fd) != 0 || (said && rename(err, kept) != 0) || rename(out, obj) != 0) {
            if (c->verbose)
                fprintf(stderr, "gcompile: cache: cannot write '%s': %s; building without the cache\n", obj,
                        strerror(errno));
            rc = -1;
        }
        if (fd >= 0)
            close(fd);
    }
    unlink(out);
    unlink(err);
    rmdir(tmp);
    free(argv);
    free(out);
    free(err);
    free(obj);
    free(kept);
    free(tmp);
    return rc;
}

int nvcache_object(const NvCache *c, char **flags, const char *src, char **obj)
{
    uint64_t h = c->key;
    for (char **f = flags; *f; f++)
        fnv_str(&h, *f);
    const char *base = strrchr(src, '/') ? strrchr(src, '/') + 1 : src;
    fnv_str(&h, base);
    char *stem = xstrdup(base);
    char *dot = strrchr(stem, '.');
    if (dot)
        *dot = 0;
    char *name = xasprintf("%s/%s-%016llx", c->dir, stem, (unsigned long long)h);   /* + .o, .err, .lock */
    char *lock = xasprintf("%s.lock", name), *kept = xasprintf("%s.err", name);
    *obj = xasprintf("%s.o", name);
    int rc = 0, hit = is_object(*obj), fd = -1;
    if (!hit && (fd = lock_file(lock)) >= 0)
        hit = is_object(*obj);   /* compiled by the holder we waited for */
    if (hit) {
        replay(kept);
        utimensat(AT_FDCWD, *obj, NULL, 0);   /* recently used: the last to be pruned */
    }
    else
        rc = compile_into(c, flags, src, stem, name);
    if (fd >= 0) {
        unlink(lock);   /* after the rename: a later process finds the object first */
        close(fd);
    }
    if (c->verbose && rc == 0)
        fprintf(stderr, "gcompile: cache: %s: %s %s\n", base, hit ? "hit" : "compiled into", *obj);
    if (rc) {
        free(*obj);
        *obj = NULL;
    }
    free(name);
    free(lock);
    free(kept);
    free(stem);
    return rc;
}
