/* files.c — how the runtime opens and writes files (docs/checkpoints.md,
 * "Guarantees").
 *
 * Inputs (--data, --val-data, --init, checkpoints) are opened with
 * O_NONBLOCK, so a FIFO never blocks open(), and refused unless they are
 * regular files: every later read is bounded by the file's size and header.
 * Outputs are written by kind: a new path or a regular file is replaced
 * atomically (NAME.tmp, fsync, rename, fsync of the directory); an existing
 * device (/dev/null, /dev/full) is written in place where the caller allows
 * it (--save) and never renamed over; anything else (a directory, FIFO,
 * socket) is refused. Every write, fsync, close and rename is checked.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gc_runtime_internal.h"

FILE *gcrt_open_input(const char *path, long long *size, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    *size = (long long)sb.st_size;
    return f;
}

static const char *kind_name(mode_t m)
{
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket"
         : S_ISCHR(m) || S_ISBLK(m) ? "a device" : "a special file";
}

int gcrt_output_kind(const char *path, int devices, char *err, size_t errlen)
{
    struct stat sb;
    if (stat(path, &sb) != 0 || S_ISREG(sb.st_mode))
        return GCRT_OUT_REPLACE;    /* absent (or unreadable: creating beside it reports why) */
    if (devices && (S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode)))
        return GCRT_OUT_THROUGH;
    snprintf(err, errlen, "%s: cannot write: it is %s, not a regular file%s", path, kind_name(sb.st_mode),
             devices ? " or a device" : " (refusing to replace it)");
    return -1;
}

/* GC_CKPT_TEST_DELAY_MS (tests only): sleep this long halfway through each
 * checkpoint file, so a test can kill the program while it saves. */
static void test_delay(void)
{
    const char *s = getenv("GC_CKPT_TEST_DELAY_MS");
    long ms = s ? strtol(s, NULL, 10) : 0;
    if (ms > 0) {
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *b = p;
    while (n > 0) {
        ssize_t w = write(fd, b, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w == 0)
            errno = ENOSPC;
        if (w <= 0)
            return -1;
        b += w, n -= (size_t)w;
    }
    return 0;
}

/* The parts in order; with `delay`, the test pause halfway through the last. */
static int write_parts(int fd, const gcrt_part *parts, int nparts, int delay)
{
    for (int i = 0; i < nparts; i++) {
        size_t half = delay && i == nparts - 1 ? parts[i].n / 2 : parts[i].n;
        if (write_all(fd, parts[i].p, half) != 0)
            return -1;
        if (half < parts[i].n) {
            test_delay();
            if (write_all(fd, (const char *)parts[i].p + half, parts[i].n - half) != 0)
                return -1;
        }
    }
    return 0;
}

/* fsync of path's directory, so the rename itself survives a power loss */
static int sync_parent(const char *path)
{
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

/* A device, written in place: no temporary, no fsync (/dev/null has none). */
static int write_through(const char *path, const gcrt_part *parts, int nparts, char *err, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    int rc = write_parts(fd, parts, nparts, 0), saved = errno;
    if (close(fd) != 0 && rc == 0)
        rc = -1, saved = errno;
    if (rc != 0)
        snprintf(err, errlen, "%s: cannot write: %s", path, strerror(saved));
    return rc;
}

int gcrt_write_file(const char *path, const gcrt_part *parts, int nparts, int flags, char *err, size_t errlen)
{
    int kind = gcrt_output_kind(path, flags & GCRT_W_DEVICES, err, errlen);
    if (kind < 0)
        return -1;
    if (kind == GCRT_OUT_THROUGH)
        return write_through(path, parts, nparts, err, errlen);
    size_t n = strlen(path);
    char *tmp = malloc(n + 5);
    if (!tmp) {
        snprintf(err, errlen, "%s: cannot write: out of memory", path);
        return -1;
    }
    memcpy(tmp, path, n);
    memcpy(tmp + n, ".tmp", 5);
    /* a stale NAME.tmp (a killed run's, or a link someone left) goes first:
     * the new one is always a fresh regular file of ours */
    if (unlink(tmp) != 0 && errno != ENOENT) {
        snprintf(err, errlen, "%s: cannot remove the stale %s: %s", path, tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot create %s: %s", path, tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    int rc = write_parts(fd, parts, nparts, flags & GCRT_W_TEST_DELAY);
    if (rc == 0)
        rc = fsync(fd);
    int saved = errno;
    if (close(fd) != 0 && rc == 0)
        rc = -1, saved = errno;
    if (rc == 0 && rename(tmp, path) != 0)
        rc = -1, saved = errno;
    if (rc != 0) {
        unlink(tmp);
        snprintf(err, errlen, "%s: cannot write: %s", path, strerror(saved));
        free(tmp);
        return -1;
    }
    free(tmp);
    if (sync_parent(path) != 0) {   /* renamed, complete, but not known to be durable */
        snprintf(err, errlen, "%s: written, but syncing its directory failed: %s", path, strerror(errno));
        return -2;
    }
    return 0;
}

int gcrt_output_probe(const char *path, char *err, size_t errlen)
{
    int kind = gcrt_output_kind(path, 1, err, errlen);
    if (kind != GCRT_OUT_REPLACE)
        return kind < 0 ? -1 : 0;
    size_t n = strlen(path);
    char *tmp = malloc(n + 5);
    if (!tmp) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    memcpy(tmp, path, n);
    memcpy(tmp + n, ".tmp", 5);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0644), rc = 0;
    if (fd < 0)
        rc = -1, snprintf(err, errlen, "%s: cannot create %s: %s", path, tmp, strerror(errno));
    else {
        close(fd);
        unlink(tmp);
    }
    free(tmp);
    return rc;
}
