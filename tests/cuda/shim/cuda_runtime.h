/* cuda_runtime.h (gcemu shim) — the subset of the CUDA runtime API that
 * runtime/cuda/ (*.cu) use, on host memory. "Device" memory is malloc'd (256-byte
 * aligned, exact size, so AddressSanitizer sees overruns); streams are
 * synchronous; kernels run in the SIMT emulator (gcemu.h). */
#ifndef GCEMU_CUDA_RUNTIME_H
#define GCEMU_CUDA_RUNTIME_H

#include "gcemu.h"

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
} cudaError_t;

typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
} cudaMemcpyKind;

typedef enum cudaDataType_t {
    CUDA_R_16F = 2,
    CUDA_R_32F = 0,
    CUDA_R_64F = 1,
    CUDA_R_16BF = 14,
} cudaDataType_t;
typedef cudaDataType_t cudaDataType;

typedef enum cudaDeviceAttr {
    cudaDevAttrClockRate = 13,
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76,
} cudaDeviceAttr;

enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

struct CUstream_st { int dummy; };
typedef struct CUstream_st *cudaStream_t;
#define cudaStreamNonBlocking 0x01
#define cudaStreamDefault 0x00

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    int multiProcessorCount;
    int major, minor;
    size_t sharedMemPerBlock;
    int maxThreadsPerBlock;
    int warpSize;
};

/* Emulator knobs (tests): how many devices cudaGetDeviceCount reports. */
inline int gcemu_device_count = 1;
inline cudaError_t gcemu_last_error = cudaSuccess;

inline const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    }
    return "unknown error";
}
inline cudaError_t cudaGetLastError() { cudaError_t e = gcemu_last_error; gcemu_last_error = cudaSuccess; return e; }
inline cudaError_t cudaPeekAtLastError() { return gcemu_last_error; }

inline cudaError_t cudaGetDeviceCount(int *n)
{
    *n = gcemu_device_count;
    return gcemu_device_count > 0 ? cudaSuccess : cudaErrorNoDevice;
}
inline cudaError_t cudaSetDevice(int d) { return d >= 0 && d < gcemu_device_count ? cudaSuccess : cudaErrorInvalidDevice; }
inline cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d)
{
    if (d < 0 || d >= gcemu_device_count)
        return cudaErrorInvalidDevice;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "gcemu (SIMT emulator on the CPU)");
    p->totalGlobalMem = (size_t)16 << 30;
    p->multiProcessorCount = 4;
    p->major = 9;
    p->minor = 0;
    p->sharedMemPerBlock = 48 << 10;
    p->maxThreadsPerBlock = 1024;
    p->warpSize = 32;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d)
{
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, d);
    if (e != cudaSuccess)
        return e;
    switch (a) {
    case cudaDevAttrClockRate: *v = 1000000; break;
    case cudaDevAttrMultiProcessorCount: *v = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *v = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *v = p.minor; break;
    default: return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}
/* "device" memory: host memory with its size in a 256-byte header, so that
 * cudaMemGetInfo reports what the program has allocated (a 16 GiB device, no
 * CUDA context or kernel images: the reserve's "other" is only the program's
 * own allocations beyond its regions) */
inline size_t &gc_shim_device_used() { static size_t used; return used; }   /* inline: one per program */
inline cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total)
{
    *total = (size_t)16 << 30;
    *free_b = *total - (gc_shim_device_used() < *total ? gc_shim_device_used() : *total);
    return cudaSuccess;
}

inline cudaError_t cudaMalloc(void **p, size_t bytes)
{
    void *base;
    if (bytes > ((size_t)1 << 48) || posix_memalign(&base, 256, bytes + 256) != 0)
        return cudaErrorMemoryAllocation;
    *(size_t *)base = bytes;
    gc_shim_device_used() += bytes;
    *p = (char *)base + 256;
    return cudaSuccess;
}
template <class T> cudaError_t cudaMalloc(T **p, size_t bytes) { return cudaMalloc((void **)p, bytes); }
inline cudaError_t cudaFree(void *p)
{
    if (p) {
        char *base = (char *)p - 256;
        gc_shim_device_used() -= *(size_t *)base;
        free(base);
    }
    return cudaSuccess;
}
/* pinned host memory: plain host memory here */
#define cudaHostAllocDefault 0x00
inline cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned)
{
    if (posix_memalign(p, 256, bytes ? bytes : 1) != 0)
        return cudaErrorMemoryAllocation;
    return cudaSuccess;
}
inline cudaError_t cudaFreeHost(void *p) { free(p); return cudaSuccess; }

/* Host synchronisations: the calls that make the host wait for the device
 * (cudaStreamSynchronize, cudaDeviceSynchronize, cudaMemcpy and the
 * synchronous symbol copies), counted for "gcemu: ... syncs N" under
 * $GCEMU_COUNTS; asynchronous copies do not count. */
inline long gcemu_syncs = 0;
inline cudaError_t gcemu_copy(void *dst, const void *src, size_t n)
{
    if (n)
        memmove(dst, src, n);
    return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind)
{
    gcemu_syncs++;
    return gcemu_copy(dst, src, n);
}
inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind, cudaStream_t = nullptr)
{
    return gcemu_copy(dst, src, n);
}
inline cudaError_t cudaMemset(void *p, int v, size_t n)
{
    if (n)
        memset(p, v, n);
    return cudaSuccess;
}
inline long gcemu_memsets = 0;   /* cudaMemsetAsync calls (a kernel launch on a GPU) */
inline cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t = nullptr)
{
    gcemu_memsets++;
    return cudaMemset(p, v, n);
}

template <class T>
cudaError_t cudaMemcpyFromSymbolAsync(void *dst, const T &sym, size_t n, size_t off = 0,
                                      cudaMemcpyKind = cudaMemcpyDeviceToHost, cudaStream_t = nullptr)
{
    memcpy(dst, (const char *)&sym + off, n);
    return cudaSuccess;
}
template <class T>
cudaError_t cudaMemcpyToSymbolAsync(const T &sym, const void *src, size_t n, size_t off = 0,
                                    cudaMemcpyKind = cudaMemcpyHostToDevice, cudaStream_t = nullptr)
{
    memcpy((char *)&sym + off, src, n);
    return cudaSuccess;
}
template <class T>
cudaError_t cudaMemcpyFromSymbol(void *dst, const T &sym, size_t n, size_t off = 0,
                                 cudaMemcpyKind k = cudaMemcpyDeviceToHost)
{
    gcemu_syncs++;
    return cudaMemcpyFromSymbolAsync(dst, sym, n, off, k);
}
template <class T>
cudaError_t cudaMemcpyToSymbol(const T &sym, const void *src, size_t n, size_t off = 0,
                               cudaMemcpyKind k = cudaMemcpyHostToDevice)
{
    gcemu_syncs++;
    return cudaMemcpyToSymbolAsync(sym, src, n, off, k);
}
template <class T> cudaError_t cudaGetSymbolAddress(void **p, const T &sym)
{
    *p = (void *)&sym;
    return cudaSuccess;
}

/* Events and host functions: streams are synchronous here, so an event is
 * always complete and a host function runs when it is queued. */
struct CUevent_st { int dummy; };
typedef struct CUevent_st *cudaEvent_t;
#define cudaEventDisableTiming 0x02
#define CUDART_CB
typedef void (*cudaHostFn_t)(void *);
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { *e = new CUevent_st(); return cudaSuccess; }
inline cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
inline cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t = nullptr) { return cudaSuccess; }
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { gcemu_syncs++; return cudaSuccess; }
inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned = 0) { return cudaSuccess; }
inline long gcemu_host_funcs = 0;   /* cudaLaunchHostFunc calls */
inline cudaError_t cudaLaunchHostFunc(cudaStream_t, cudaHostFn_t fn, void *arg)
{
    gcemu_host_funcs++;
    fn(arg);
    return cudaSuccess;
}
inline cudaError_t cudaStreamCreate(cudaStream_t *s) { *s = new CUstream_st(); return cudaSuccess; }
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) { return cudaStreamCreate(s); }
inline cudaError_t cudaStreamDestroy(cudaStream_t s) { delete s; return cudaSuccess; }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { gcemu_syncs++; return cudaSuccess; }
inline cudaError_t cudaDeviceSynchronize() { gcemu_syncs++; return cudaSuccess; }
/* kept per kernel: a launch above 48 KiB of dynamic shared memory needs it
 * (gcemu_launch); sm_90's limit is 227 KiB per block */
template <class F> cudaError_t cudaFuncSetAttribute(F f, cudaFuncAttribute attr, int value)
{
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize)
        return cudaSuccess;
    if (value < 0 || value > 227 * 1024)
        return cudaErrorInvalidValue;
    const void *key = reinterpret_cast<const void *>(f);
    for (auto &e : gcemu::st.dyn_limits)
        if (e.first == key) {
            e.second = value;
            return cudaSuccess;
        }
    gcemu::st.dyn_limits.push_back({key, value});
    return cudaSuccess;
}

#endif
