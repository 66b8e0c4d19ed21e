/* device_cuda.cu — the CUDA target's device (gc_runtime.h, "device_cpu.c /
 * device_cuda.cu"): one GPU, one stream, one cuBLASLt handle. Every CUDA call
 * is checked (file:line, error string, exit 1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gc_cuda.h"

cudaStream_t gc_stream;
cublasLtHandle_t gc_cublaslt;

static int dev_ready;
static int dev_sms, dev_major, dev_minor;
static char dev_name[256] = "cuda (not initialised)";

/* The GPU to use: $GC_CUDA_DEVICE (default 0), modulo the device count. */
static int pick_device(int count)
{
    const char *s = getenv("GC_CUDA_DEVICE");
    int d = s ? atoi(s) : 0;
    return d >= 0 ? d % count : 0;
}

int gc_device_init(char *err, size_t errlen)
{
    if (dev_ready)
        return 0;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count <= 0) {
        if (err && errlen)
            snprintf(err, errlen, "no CUDA device (%s)",
                     e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports 0 devices");
        (void)cudaGetLastError();   /* clear the sticky state of the failed query */
        return 1;
    }
    int d = pick_device(count);
    GC_CUDA_CHECK(cudaSetDevice(d));
    cudaDeviceProp prop;
    GC_CUDA_CHECK(cudaGetDeviceProperties(&prop, d));
    snprintf(dev_name, sizeof dev_name, "%s", prop.name);
    dev_sms = prop.multiProcessorCount;
    dev_major = prop.major;
    dev_minor = prop.minor;
    GC_CUDA_CHECK(cudaStreamCreate(&gc_stream));
    if (!gc_cublaslt)
        GC_CUBLAS_CHECK(cublasLtCreate(&gc_cublaslt));
    dev_ready = 1;
    return 0;
}

const char *gc_device_name(void) { return dev_name; }

int gc_cuda_cc_major(void)
{
    if (dev_ready)
        return dev_major;
    int d = 0, major = 0;   /* kernels used before gc_device_init (tests): the current device */
    if (cudaGetDevice(&d) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return major;
}

size_t gc_device_free_bytes(void)
{
    size_t free_b = 0, total = 0;
    GC_CUDA_CHECK(cudaMemGetInfo(&free_b, &total));
    return free_b;
}

/* Dense peak per SM (TFLOP/s) of each architecture's data-center part at its
 * boost clock: bf16 tensor, tf32 tensor, fp32 SIMT. H100/H200 (132 SMs):
 * 989 bf16; A100 (108): 312. */
typedef struct {
    int major, minor;
    double bf16, tf32, fp32;
} PeakRow;

static const PeakRow peak_table[] = {
    {7, 0, 0.0, 0.0, 15.7 / 80},                      /* V100: no bf16 */
    {7, 5, 0.0, 0.0, 8.1 / 40},                       /* T4 */
    {8, 0, 312.0 / 108, 156.0 / 108, 19.5 / 108},     /* A100 */
    {8, 6, 125.0 / 72, 62.5 / 72, 31.2 / 72},         /* A10 */
    {8, 9, 362.0 / 142, 181.0 / 142, 91.6 / 142},     /* L40S */
    {9, 0, 989.4 / 132, 494.7 / 132, 66.9 / 132},     /* H100 SXM, H200 */
    {10, 0, 2250.0 / 148, 1100.0 / 148, 80.0 / 148},  /* B200 */
};

double gc_device_peak_flops(int bf16)
{
    if (!dev_ready)
        return 0.0;
    for (size_t i = 0; i < sizeof peak_table / sizeof peak_table[0]; i++) {
        const PeakRow *r = &peak_table[i];
        if (r->major == dev_major && r->minor == dev_minor) {
            double per_sm = bf16 ? r->bf16 : gc_cuda_tf32() ? r->tf32 : r->fp32;
            return per_sm * 1e12 * dev_sms;
        }
    }
    return 0.0;
}

size_t gc_device_total_bytes(void)
{
    size_t free_b = 0, total = 0;
    GC_CUDA_CHECK(cudaMemGetInfo(&free_b, &total));
    return total;
}

void *gc_device_alloc(size_t bytes)
{
    void *p = NULL;
    size_t n = bytes ? bytes : 1;
    cudaError_t e = cudaMalloc(&p, n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        size_t free_b = 0, total = 0;
        (void)cudaMemGetInfo(&free_b, &total);
        fprintf(stderr, "error: cannot allocate %zu bytes of device memory on %s: %s (%zu bytes free)\n", bytes,
                dev_name, cudaGetErrorString(e), free_b);
        exit(1);
    }
    GC_CUDA_CHECK(cudaMemsetAsync(p, 0, n, gc_stream));
    GC_CUDA_CHECK(cudaStreamSynchronize(gc_stream));
    return p;
}

void gc_device_free(void *p)
{
    if (p)
        GC_CUDA_CHECK(cudaFree(p));
}

/* Pinned (page-locked) host memory: the copies of the offload levers run at
 * the bus's speed and asynchronously (runtime/offload.c). Zero-filled. */
void *gc_host_alloc(size_t bytes)
{
    void *p = NULL;
    size_t n = bytes ? bytes : 1;
    cudaError_t e = cudaHostAlloc(&p, n, cudaHostAllocDefault);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        fprintf(stderr, "error: cannot allocate %zu bytes of pinned host memory (the host region): %s\n", bytes,
                cudaGetErrorString(e));
        exit(1);
    }
    memset(p, 0, n);
    return p;
}

void gc_host_free(void *p)
{
    if (p)
        GC_CUDA_CHECK(cudaFreeHost(p));
}

void gc_device_upload(void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return;
    GC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, gc_stream));
    GC_CUDA_CHECK(cudaStreamSynchronize(gc_stream));
}

void gc_device_upload_async(void *dst, const void *src, size_t bytes)
{
    if (bytes)
        GC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, gc_stream));
}

void gc_device_download_async(void *dst, const void *src, size_t bytes)
{
    if (bytes)
        GC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, gc_stream));
}

void gc_device_download(void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return;
    GC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, gc_stream));
    GC_CUDA_CHECK(cudaStreamSynchronize(gc_stream));
}

void gc_cuda_check_errors(void)
{
    gc_cuda_error e;
    gc_cuda_read_error(&e);   /* synchronizes gc_stream */
    if (!e.flag)
        return;
    /* the CPU kernels' wording */
    fprintf(stderr, "error: %s %d at position %ld is outside %s [0, %ld)\n", e.flag == 2 ? "target" : "index",
            e.value, e.pos, e.flag == 2 ? "the vocabulary" : "the embedding table", e.limit);
    exit(1);
}

/* One wait: gc_cuda_check_errors copies the error flag on gc_stream and
 * waits for it, so for everything queued before it. */
void gc_device_sync(void)
{
    gc_cuda_check_errors();
}

/* ---------------------------------------------------------------- gradient norm and scale */

enum { SUMSQ_BLOCKS = 256, SUMSQ_THREADS = 256 };

/* The device-side total (gc_runtime.h, gc_device_sumsq_add): sum the
 * running total, parts[b] block b's share of the tensor being added, done the
 * count of blocks finished with it (the last one resets it). */
typedef struct {
    double sum;
    double parts[SUMSQ_BLOCKS];
    unsigned done;
} gc_sumsq_acc;

/* acc->sum += sum of x[i]^2 (= when first), in double, deterministic: each
 * block writes its grid-stride share to acc->parts[b]; the block that
 * finishes last adds the parts in block order to acc->sum (the same bits as
 * the host adding them in order). nv 16-byte vectors of 4 (gc_cuda.h; 0 when x is misaligned),
 * then the remaining elements one by one. */
static __global__ void gc_sumsq_kernel(gc_sumsq_acc *acc, const float *x, long n, long nv, int first)
{
    __shared__ double s[SUMSQ_THREADS];
    __shared__ int last;
    double a = 0;
    long items = nv + (n - nv * 4), stride = (long)gridDim.x * blockDim.x;
    for (long t = (long)blockIdx.x * blockDim.x + threadIdx.x; t < items; t += stride) {
        float v[4];
        if (t < nv) {
            gc_vload<4>(v, x + t * 4);
            for (int k = 0; k < 4; k++)
                a += (double)v[k] * (double)v[k];
        } else {
            float xi = x[nv * 4 + (t - nv)];
            a += (double)xi * (double)xi;
        }
    }
    s[threadIdx.x] = a;
    __syncthreads();
    for (int w = SUMSQ_THREADS / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w)
            s[threadIdx.x] += s[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        acc->parts[blockIdx.x] = s[0];
        __threadfence();   /* the part is visible before this block counts as done */
        last = atomicAdd(&acc->done, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (last && threadIdx.x == 0) {
        const volatile double *parts = acc->parts;   /* written by other blocks: not from L1 */
        double sum = 0;
        for (unsigned b = 0; b < gridDim.x; b++)
            sum += parts[b];
        acc->sum = first ? sum : acc->sum + sum;
        acc->done = 0;
    }
}

/* x *= s; vectors as gc_sumsq_kernel */
static __global__ void gc_scale_kernel(float *x, long n, float s, long nv)
{
    long items = nv + (n - nv * 4), stride = (long)gridDim.x * blockDim.x;
    for (long t = (long)blockIdx.x * blockDim.x + threadIdx.x; t < items; t += stride) {
        if (t < nv) {
            float v[4];
            gc_vload<4>(v, x + t * 4);
            for (int k = 0; k < 4; k++)
                v[k] *= s;
            gc_vstore<4>(x + t * 4, v);
        } else {
            x[nv * 4 + (t - nv)] *= s;
        }
    }
}

/* Blocks for the work items of n elements (vectors of 4 when x is aligned):
 * up to SUMSQ_BLOCKS, no more than the items fill, so the many small
 * tensors of a fused-opt step's gradient norm (one call per tensor) launch
 * a block or a few, not 65536 threads each. */
static int sumsq_blocks(const float *x, long n)
{
    long nv = gc_al16(x) ? n / 4 : 0, items = nv + (n - nv * 4);
    long b = (items + SUMSQ_THREADS - 1) / SUMSQ_THREADS;
    return b < 1 ? 1 : b > SUMSQ_BLOCKS ? SUMSQ_BLOCKS : (int)b;
}

static gc_sumsq_acc *sumsq_acc;   /* allocated (zero) on first use */
static int sumsq_first = 1;       /* reset since the last add: the next add overwrites the total
                                     (a reset costs no launch) */

static gc_sumsq_acc *the_acc(void)
{
    if (!sumsq_acc)
        sumsq_acc = (gc_sumsq_acc *)gc_device_alloc(sizeof *sumsq_acc);
    return sumsq_acc;
}

void gc_device_sumsq_reset(void) { sumsq_first = 1; }

void gc_device_sumsq_add(const float *x, long n)
{
    GC_LAUNCH(gc_sumsq_kernel, sumsq_blocks(x, n), SUMSQ_THREADS, 0, the_acc(), x, n, gc_al16(x) ? n / 4 : 0L,
              sumsq_first);
    sumsq_first = 0;
}

const double *gc_device_sumsq_total_ptr(void) { return &the_acc()->sum; }

double gc_device_sumsq_read(void)
{
    double sum;
    if (sumsq_first)   /* nothing added since the reset */
        return 0.0;
    gc_device_download_async(&sum, &the_acc()->sum, sizeof sum);
    gc_device_sync();
    return sum;
}

double gc_device_sumsq(const float *x, long n)
{
    gc_device_sumsq_reset();
    gc_device_sumsq_add(x, n);
    return gc_device_sumsq_read();
}

void gc_device_scale(float *x, long n, float s)
{
    GC_LAUNCH(gc_scale_kernel, sumsq_blocks(x, n), SUMSQ_THREADS, 0, x, n, s, gc_al16(x) ? n / 4 : 0L);
}

/* ---------------------------------------------------------------- host offload */

/* Three copy streams (gc_runtime.h, "Host offload"): device to host, host to
 * device, and the update stream (host updates as host functions, then the
 * weights they wrote). Non-blocking: they never wait for the legacy default
 * stream. compute_ev marks how far the compute stream (gc_stream) got when
 * a copy was queued; done_ev[slot] when copy `slot` finished. */
static cudaStream_t copy_streams[3];
static cudaEvent_t compute_ev;
static cudaEvent_t *done_ev;
static char *copy_pending;   /* copy_pending[slot]: queued, not yet waited for */
static int copy_nslots;

void gc_copy_init(int nslots)
{
    if (done_ev)
        return;
    for (int i = 0; i < 3; i++)
        GC_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_streams[i], cudaStreamNonBlocking));
    GC_CUDA_CHECK(cudaEventCreateWithFlags(&compute_ev, cudaEventDisableTiming));
    copy_nslots = nslots > 0 ? nslots : 1;
    done_ev = (cudaEvent_t *)calloc((size_t)copy_nslots, sizeof *done_ev);
    copy_pending = (char *)calloc((size_t)copy_nslots, 1);
    if (!done_ev || !copy_pending) {
        fprintf(stderr, "error: out of host memory\n");
        exit(1);
    }
    for (int i = 0; i < copy_nslots; i++)
        GC_CUDA_CHECK(cudaEventCreateWithFlags(&done_ev[i], cudaEventDisableTiming));
}

static void check_slot(int slot)
{
    if (slot < 0 || slot >= copy_nslots || !done_ev) {
        fprintf(stderr, "%s:%d: internal error: copy slot %d of %d (gc_copy_init)\n", __FILE__, __LINE__, slot,
                copy_nslots);
        exit(1);
    }
}

void gc_copy(void *dst, const void *src, size_t bytes, int stream, int slot, int after)
{
    if (!bytes)
        return;
    if (stream == GC_COPY_NOW) {
        GC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, gc_stream));
        return;
    }
    check_slot(slot);
    cudaStream_t s = copy_streams[stream];
    GC_CUDA_CHECK(cudaEventRecord(compute_ev, gc_stream));   /* after the ops queued so far */
    GC_CUDA_CHECK(cudaStreamWaitEvent(s, compute_ev, 0));
    if (after >= 0) {                                         /* after the copy that filled src */
        check_slot(after);
        GC_CUDA_CHECK(cudaStreamWaitEvent(s, done_ev[after], 0));
    }
    GC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
    GC_CUDA_CHECK(cudaEventRecord(done_ev[slot], s));
    copy_pending[slot] = 1;
}

void gc_copy_wait(int slot)
{
    check_slot(slot);
    if (!copy_pending[slot])   /* not queued this time (a norm pass skips the optimizer's copies) */
        return;
    GC_CUDA_CHECK(cudaStreamWaitEvent(gc_stream, done_ev[slot], 0));
    copy_pending[slot] = 0;
}

/* A host update queued on the update stream: the step's settings as they
 * were when it was queued, and its tensors (a group of up to 16, the
 * emitted step's multi-tensor updates). */
enum { UPDATE_TASK_MAX = 16 };
typedef struct {
    int n, t;
    float lr, beta1, beta2, eps, grad_scale;
    gc_adamw_tensor u[UPDATE_TASK_MAX];
} UpdateTask;

static void CUDART_CB run_update(void *arg)
{
    UpdateTask *k = (UpdateTask *)arg;
    gc_host_update_apply(k->u, k->n, k->lr, k->beta1, k->beta2, k->eps, k->t, k->grad_scale);
    free(k);
}

void gc_host_update(const gc_adamw_tensor *u, int n, const int *after, int nafter, const gc_ctx *ctx)
{
    if (ctx->norm_pass || n <= 0)
        return;
    cudaStream_t s = copy_streams[GC_COPY_UPDATE];
    for (int i = 0; i < nafter; i++) {   /* the gradients' copies */
        check_slot(after[i]);
        GC_CUDA_CHECK(cudaStreamWaitEvent(s, done_ev[after[i]], 0));
    }
    for (int i = 0; i < n; i += UPDATE_TASK_MAX) {
        UpdateTask *k = (UpdateTask *)malloc(sizeof *k);
        if (!k) {
            fprintf(stderr, "error: out of host memory\n");
            exit(1);
        }
        k->n = n - i < UPDATE_TASK_MAX ? n - i : UPDATE_TASK_MAX;
        memcpy(k->u, u + i, (size_t)k->n * sizeof *u);
        k->t = ctx->t, k->lr = ctx->lr, k->beta1 = ctx->beta1, k->beta2 = ctx->beta2, k->eps = ctx->eps;
        k->grad_scale = ctx->grad_scale;
        GC_CUDA_CHECK(cudaLaunchHostFunc(s, run_update, k));
    }
}
