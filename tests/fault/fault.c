/* fault.c — an LD_PRELOAD shim that makes the Nth I/O call of a process
 * fail (issue 21; the idea of SQLite's I/O-error tests: every Nth call
 * fails in turn and the files must survive each).
 *
 *   GC_FAULT_AT=N       fail the Nth counted call (0 or unset: only count)
 *   GC_FAULT_ERRNO=E    EIO (default) or ENOSPC
 *   GC_FAULT_OPS=LIST   which calls count, of write,fsync,rename,open,mkdir
 *                       (default: all five)
 *   GC_FAULT_PATH=S     count only calls on paths that contain S
 *   GC_FAULT_REPORT=F   appends "injected N OP PATH" at the failure and
 *                       "count N" at exit to F
 *
 * Counted: write, pwrite (write); fflush and fclose of a stream other than
 * stdout/stderr (write: the stream's error flag is set, as when a buffered
 * write fails; stdio's own writes cannot be interposed); fsync, fdatasync
 * (fsync); rename (rename); open, open64, openat, creat, fopen, fopen64,
 * mkstemp, mkostemp (open); mkdir, mkdtemp (mkdir). Calls on the standard
 * streams and on system paths (/proc, /sys, /dev, /etc, /usr, /lib) are not
 * counted. The constructor removes LD_PRELOAD from the environment, so
 * children (the C compiler gcompile runs) are not injected.
 */
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

enum { OP_WRITE, OP_FSYNC, OP_RENAME, OP_OPEN, OP_MKDIR, NOPS };
static const char *const op_names[NOPS] = {"write", "fsync", "rename", "open", "mkdir"};

static long fault_at;
static int fault_errno = EIO;
static int ops_on[NOPS] = {1, 1, 1, 1, 1};
static char report[4096], only[4096];
static atomic_long calls;
static int ready;

static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_rename)(const char *, const char *);
static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_creat)(const char *, mode_t);
static FILE *(*real_fopen)(const char *, const char *);
static FILE *(*real_fopen64)(const char *, const char *);
static int (*real_mkstemp)(char *);
static int (*real_mkostemp)(char *, int);
static int (*real_mkdir)(const char *, mode_t);
static char *(*real_mkdtemp)(char *);
static int (*real_fflush)(FILE *);
static int (*real_fclose)(FILE *);

#define LOAD(name) (real_##name = (__typeof__(real_##name))dlsym(RTLD_NEXT, #name))

static void load(void);
static void ensure(void)
{
    if (!real_fclose)
        load();
}

static void load(void)
{
    LOAD(write), LOAD(pwrite), LOAD(fsync), LOAD(fdatasync), LOAD(rename), LOAD(open), LOAD(open64);
    LOAD(openat), LOAD(creat), LOAD(fopen), LOAD(fopen64), LOAD(mkstemp), LOAD(mkostemp), LOAD(mkdir);
    LOAD(mkdtemp), LOAD(fflush), LOAD(fclose);
}

__attribute__((constructor)) static void fault_init(void)
{
    load();
    const char *s = getenv("GC_FAULT_AT");
    fault_at = s ? strtol(s, NULL, 10) : 0;
    s = getenv("GC_FAULT_ERRNO");
    if (s && !strcmp(s, "ENOSPC"))
        fault_errno = ENOSPC;
    s = getenv("GC_FAULT_OPS");
    if (s && *s) {
        for (int i = 0; i < NOPS; i++)
            ops_on[i] = strstr(s, op_names[i]) != NULL;
    }
    s = getenv("GC_FAULT_PATH");
    if (s)
        snprintf(only, sizeof only, "%s", s);
    s = getenv("GC_FAULT_REPORT");
    if (s)
        snprintf(report, sizeof report, "%s", s);
    unsetenv("LD_PRELOAD");     /* children (cc, ld) run without the shim */
    ready = 1;
}

static void say(const char *line)
{
    ensure();
    if (!*report)
        return;
    int fd = real_open(report, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
        real_write(fd, line, strlen(line));
        close(fd);
    }
}

__attribute__((destructor)) static void fault_fini(void)
{
    char line[64];
    snprintf(line, sizeof line, "count %ld\n", atomic_load(&calls));
    say(line);
}

static int system_path(const char *p)
{
    static const char *const sys[] = {"/proc/", "/sys/", "/dev/", "/etc/", "/usr/", "/lib"};
    for (int i = 0; i < 6; i++)
        if (!strncmp(p, sys[i], strlen(sys[i])))
            return 1;
    return 0;
}

/* the path behind fd, or "" for a pipe, socket, or the standard streams */
static void fd_path(int fd, char *buf, size_t n)
{
    char link[64];
    buf[0] = '\0';
    if (fd <= 2)
        return;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t k = readlink(link, buf, n - 1);
    buf[k > 0 ? k : 0] = '\0';
    if (buf[0] != '/')
        buf[0] = '\0';
}

/* Counts a call on path; 1 when this one is to fail (errno set). */
static int inject(int op, const char *path)
{
    ensure();
    if (!ready || !ops_on[op] || !path || !*path || system_path(path) || (*only && !strstr(path, only)))
        return 0;
    long n = atomic_fetch_add(&calls, 1) + 1;
    if (n != fault_at)
        return 0;
    char line[4200];
    snprintf(line, sizeof line, "injected %ld %s %s\n", n, op_names[op], path);
    say(line);
    errno = fault_errno;
    return 1;
}

static int inject_fd(int op, int fd)
{
    char p[4096];
    fd_path(fd, p, sizeof p);
    return inject(op, p);
}

ssize_t write(int fd, const void *b, size_t n)
{
    return inject_fd(OP_WRITE, fd) ? -1 : real_write(fd, b, n);
}

ssize_t pwrite(int fd, const void *b, size_t n, off_t off)
{
    return inject_fd(OP_WRITE, fd) ? -1 : real_pwrite(fd, b, n, off);
}

int fsync(int fd) { return inject_fd(OP_FSYNC, fd) ? -1 : real_fsync(fd); }
int fdatasync(int fd) { return inject_fd(OP_FSYNC, fd) ? -1 : real_fdatasync(fd); }
int rename(const char *a, const char *b) { return inject(OP_RENAME, b) ? -1 : real_rename(a, b); }

static mode_t mode_arg(int flags, va_list ap)
{
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *p, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t m = mode_arg(flags, ap);
    va_end(ap);
    return inject(OP_OPEN, p) ? -1 : real_open(p, flags, m);
}

int open64(const char *p, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t m = mode_arg(flags, ap);
    va_end(ap);
    return inject(OP_OPEN, p) ? -1 : real_open64(p, flags, m);
}

int openat(int dir, const char *p, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t m = mode_arg(flags, ap);
    va_end(ap);
    return inject(OP_OPEN, p) ? -1 : real_openat(dir, p, flags, m);
}

int creat(const char *p, mode_t m) { return inject(OP_OPEN, p) ? -1 : real_creat(p, m); }
FILE *fopen(const char *p, const char *m) { return inject(OP_OPEN, p) ? NULL : real_fopen(p, m); }
FILE *fopen64(const char *p, const char *m) { return inject(OP_OPEN, p) ? NULL : real_fopen64(p, m); }
int mkstemp(char *t) { return inject(OP_OPEN, t) ? -1 : real_mkstemp(t); }
int mkostemp(char *t, int f) { return inject(OP_OPEN, t) ? -1 : real_mkostemp(t, f); }
int mkdir(const char *p, mode_t m) { return inject(OP_MKDIR, p) ? -1 : real_mkdir(p, m); }
char *mkdtemp(char *t) { return inject(OP_MKDIR, t) ? NULL : real_mkdtemp(t); }

/* a stream of ours with a file behind it (not stdout/stderr, not all streams) */
static int counted_stream(FILE *f) { return f && f != stdout && f != stderr; }

static void set_error(FILE *f)
{
#ifdef __GLIBC__
    f->_flags |= 0x20;     /* _IO_ERR_SEEN: ferror(f) is now true, as after a failed buffered write */
#else
    (void)f;
#endif
}

int fflush(FILE *f)
{
    if (counted_stream(f) && inject_fd(OP_WRITE, fileno(f))) {
        set_error(f);
        return EOF;
    }
    return real_fflush(f);
}

int fclose(FILE *f)
{
    if (counted_stream(f) && inject_fd(OP_WRITE, fileno(f))) {
        int e = errno;
        real_fclose(f);    /* the stream is gone either way, as a real failing close leaves it */
        errno = e;
        return EOF;
    }
    return real_fclose(f);
}
