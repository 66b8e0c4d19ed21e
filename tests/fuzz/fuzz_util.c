/* fuzz_util.c — files, argument lists and quiet output for the fuzz targets. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"

const char *fuzz_file(const uint8_t *data, size_t size)
{
    static char path[256];
    if (!path[0]) {
        const char *dir = getenv("TMPDIR");      /* memory-backed /dev/shm when there is one */
        if (!dir || !*dir)
            dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(path, sizeof path, "%s/gcfuzz.%ld.bin", dir, (long)getpid());
    }
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort();
    }
    return path;
}

int fuzz_args(const uint8_t *data, size_t size, const char *argv0, char **argv, int max, char **buf)
{
    *buf = malloc(size + 1);
    memcpy(*buf, data, size);
    (*buf)[size] = '\0';
    int argc = 0;
    argv[argc++] = (char *)argv0;
    char *p = *buf;
    while (argc < max - 1 && p <= *buf + size) {
        char *nl = memchr(p, '\n', (size_t)(*buf + size - p));
        if (nl)
            *nl = '\0';
        if (*p || nl)
            argv[argc++] = p;
        if (!nl)
            break;
        p = nl + 1;
    }
    argv[argc] = NULL;
    return argc;
}

static int saved_out = -1, saved_err = -1;

void fuzz_quiet_begin(void)
{
    fflush(stdout);
    fflush(stderr);
    int null = open("/dev/null", O_WRONLY);
    saved_out = dup(1);
    saved_err = dup(2);
    dup2(null, 1);
    dup2(null, 2);
    close(null);
}

void fuzz_quiet_end(void)
{
    fflush(stdout);
    fflush(stderr);
    dup2(saved_out, 1);
    dup2(saved_err, 2);
    close(saved_out);
    close(saved_err);
}
