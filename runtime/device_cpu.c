/* device_cpu.c — the CPU target's "device": host memory. */
#define _DEFAULT_SOURCE 1   /* madvise */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "gc_runtime.h"

int gc_device_init(char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    return 0;
}

const char *gc_device_name(void) { return "cpu"; }
size_t gc_device_free_bytes(void) { return 0; }
size_t gc_device_total_bytes(void) { return 0; }
double gc_device_peak_flops(int bf16) { (void)bf16; return 0.0; }

/* Regions of 2 MiB or more are 2 MiB aligned and asked for transparent huge
 * pages: a step streams every weight from memory, and the GEMM's packing
 * reads 32 weight rows at once (measured on Zen 4 with cold weights: a
 * 256x3072x768 forward matmul at 99 GFLOP/s on 4 KiB pages, 183 on 2 MiB
 * pages). Where THP is off this changes nothing. */
#define HUGE_PAGE (2UL << 20)

void *gc_device_alloc(size_t bytes)
{
    /* at least 256-byte aligned like cudaMalloc, so planned offsets keep their alignment */
    size_t align = bytes >= HUGE_PAGE ? HUGE_PAGE : 256;
    size_t rounded = (bytes + align - 1) / align * align;
    void *p = aligned_alloc(align, rounded ? rounded : 256);
    if (!p) {
        fprintf(stderr, "error: cannot allocate %zu bytes of host memory\n", bytes);
        exit(1);
    }
#ifdef MADV_HUGEPAGE
    if (align == HUGE_PAGE)
        (void)madvise(p, rounded, MADV_HUGEPAGE);   /* advice only: failure is harmless */
#endif
    memset(p, 0, rounded ? rounded : 256);
    return p;
}

void gc_device_free(void *p) { free(p); }
/* The host region: host memory here too, a separate allocation. */
void *gc_host_alloc(size_t bytes) { return gc_device_alloc(bytes); }
void gc_host_free(void *p) { free(p); }
void gc_device_upload(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
void gc_device_download(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
void gc_device_upload_async(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
void gc_device_download_async(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
void gc_device_sync(void) {}

/* Partial sums over fixed chunks, added in chunk order: the same bits for
 * every thread count. */
#define SUMSQ_CHUNK 65536L

double gc_device_sumsq(const float *x, long n)
{
    long nchunks = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
    double *part = calloc((size_t)(nchunks ? nchunks : 1), sizeof *part);
    if (!part) {
        fprintf(stderr, "error: out of host memory\n");
        exit(1);
    }
#pragma omp parallel for schedule(static)
    for (long c = 0; c < nchunks; c++) {
        long end = (c + 1) * SUMSQ_CHUNK < n ? (c + 1) * SUMSQ_CHUNK : n;
        double s = 0;
        for (long i = c * SUMSQ_CHUNK; i < end; i++)
            s += (double)x[i] * (double)x[i];
        part[c] = s;
    }
    double sum = 0;
    for (long c = 0; c < nchunks; c++)
        sum += part[c];
    free(part);
    return sum;
}

/* The device total of gc_device_sumsq_add is host memory here. */
static double sumsq_total;
void gc_device_sumsq_reset(void) { sumsq_total = 0; }
void gc_device_sumsq_add(const float *x, long n) { sumsq_total += gc_device_sumsq(x, n); }
double gc_device_sumsq_read(void) { return sumsq_total; }
const double *gc_device_sumsq_total_ptr(void) { return &sumsq_total; }

void gc_device_scale(float *x, long n, float s)
{
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++)
        x[i] *= s;
}

/* ---------------------------------------------------------------- host offload */

/* Host memory both sides: every copy is done when it returns, and the host
 * update runs in the step's order, with the arithmetic of the device update
 * it replaces (gc_update_apply, gc_adamw: host_adamw.c). */
void gc_copy_init(int nslots) { (void)nslots; }

void gc_copy(void *dst, const void *src, size_t bytes, int stream, int slot, int after)
{
    (void)stream;
    (void)slot;
    (void)after;
    if (bytes)
        memcpy(dst, src, bytes);
}

void gc_copy_wait(int slot) { (void)slot; }

void gc_host_update(const gc_adamw_tensor *u, int n, const int *after, int nafter, const gc_ctx *ctx)
{
    (void)after;
    (void)nafter;
    if (!ctx->norm_pass)
        gc_host_update_apply(u, n, ctx->lr, ctx->beta1, ctx->beta2, ctx->eps, ctx->t, ctx->grad_scale);
}
