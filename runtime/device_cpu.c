/* device_cpu.c — the CPU target's "device": host memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gc_runtime.h"

int gc_device_init(char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    return 0;
}

const char *gc_device_name(void) { return "cpu"; }
size_t gc_device_free_bytes(void) { return 0; }
double gc_device_peak_flops(int bf16) { (void)bf16; return 0.0; }

void *gc_device_alloc(size_t bytes)
{
    /* 256-byte aligned like cudaMalloc, so planned offsets keep their alignment */
    size_t rounded = (bytes + 255) / 256 * 256;
    void *p = aligned_alloc(256, rounded ? rounded : 256);
    if (!p) {
        fprintf(stderr, "error: cannot allocate %zu bytes of host memory\n", bytes);
        exit(1);
    }
    memset(p, 0, rounded ? rounded : 256);
    return p;
}

void gc_device_free(void *p) { free(p); }
void gc_device_upload(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
void gc_device_download(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
void gc_device_sync(void) {}
