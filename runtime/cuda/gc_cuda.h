/* gc_cuda.h — private declarations of the CUDA runtime, shared by
 * kernels_cuda.cu, device_cuda.cu and the train.cu that gcompile emits.
 *
 * The same sources also compile as plain C++ against the SIMT emulator in
 * tests/cuda/shim/ (which defines GCEMU): kernels are then run on the CPU, one
 * fiber per CUDA thread. Everything that differs between the two builds is in
 * this header (GC_LAUNCH, GC_DYN_SHARED); the .cu files are identical.
 *
 * Sections:
 *   types       gc_bf16
 *   checks      GC_CUDA_CHECK, GC_CUBLAS_CHECK, GC_LAUNCH, GC_DYN_SHARED
 *   vectors     GcVec, gc_al16, gc_vload, gc_vstore (16-byte accesses)
 *   device_cuda.cu   stream, cuBLASLt handle, device error flag
 *   kernels_cuda.cu  workspace, TF32, matmul cache, error flag
 *   kernels_cuda.cu: bf16   the bf16 variants of the kernels
 */
#ifndef GC_CUDA_H
#define GC_CUDA_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cublasLt.h>

#include "gc_runtime.h"

/* bf16 storage (--precision bf16): __bfloat162float / __float2bfloat16
 * (round to nearest even) convert. */
typedef __nv_bfloat16 gc_bf16;

/* ---------------------------------------------------------------- checks */

/* Every CUDA runtime call: on failure print file:line and the error string,
 * exit 1. */
#define GC_CUDA_CHECK(call) gc_cuda_check_((call), #call, __FILE__, __LINE__)
/* Every cuBLAS / cuBLASLt call. */
#define GC_CUBLAS_CHECK(call) gc_cublas_check_((call), #call, __FILE__, __LINE__)

static inline void gc_cuda_check_(cudaError_t e, const char *what, const char *file, int line)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "%s:%d: CUDA error: %s (%s)\n", file, line, cudaGetErrorString(e), what);
        exit(1);
    }
}

static inline void gc_cublas_check_(cublasStatus_t s, const char *what, const char *file, int line)
{
    if (s != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "%s:%d: cuBLAS error: %s (%s)\n", file, line, cublasLtGetStatusString(s), what);
        exit(1);
    }
}

/* GC_LAUNCH(kernel, grid, block, shmem_bytes, args...): launch on gc_stream
 * and check the launch. `kernel` may be a template-id (foo<float>; in
 * parentheses when it has a comma: (foo<float, int>)). Under the emulator:
 * the arguments are converted to the kernel's parameter types once, as a
 * launch does, then the kernel runs on the CPU, block after block. */
#ifdef GCEMU
#define GC_LAUNCH(kernel, grid, block, shmem, ...)                                           \
    do {                                                                                     \
        typename gcemu_params<decltype(&kernel)>::type gcemu_args_{__VA_ARGS__};             \
        gcemu_launch(#kernel, dim3(grid), dim3(block), (size_t)(shmem),                      \
                     [&gcemu_args_]() { std::apply(kernel, gcemu_args_); }, __FILE__, __LINE__,  \
                     reinterpret_cast<const void *>(&kernel));                               \
    } while (0)
#else
#define GC_LAUNCH(kernel, grid, block, shmem, ...)                                   \
    do {                                                                             \
        kernel<<<(grid), (block), (shmem), gc_stream>>>(__VA_ARGS__);                \
        GC_CUDA_CHECK(cudaGetLastError());                                           \
    } while (0)
#endif

/* Dynamic shared memory inside a kernel: GC_DYN_SHARED(float, buf); */
#ifdef GCEMU
#define GC_DYN_SHARED(type, name) type *name = (type *)gcemu_dyn_shared()
#else
#define GC_DYN_SHARED(type, name) extern __shared__ type name[]
#endif

/* ---------------------------------------------------------------- 16-byte vectors */
/* Memory-bound kernels (kernels_cuda.cu, device_cuda.cu and the elementwise
 * kernels gcompile emits) move whole 16-byte vectors, as llm.c's do: GcVec<T>
 * is 16 bytes of T (4 floats, 8 bf16) read or written with one 128-bit
 * access. A kernel takes the vector path only where every pointer it moves
 * that way is 16-byte aligned (gc_al16, checked at run time: the planner's
 * offsets are 256-byte aligned, views and parameters inside a region need
 * not be) and the shape keeps the vectors aligned; the tail (n mod the vector
 * length), or everything when misaligned, goes one element at a time. */
#ifdef __cplusplus
template <class T> struct alignas(16) GcVec {
    static const int N = 16 / sizeof(T);
    T v[16 / sizeof(T)];
};

__host__ __device__ __forceinline__ bool gc_al16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

__device__ __forceinline__ float gc_tof(float x) { return x; }
__device__ __forceinline__ float gc_tof(gc_bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void gc_fromf(float *p, float v) { *p = v; }
__device__ __forceinline__ void gc_fromf(gc_bf16 *p, float v) { *p = __float2bfloat16(v); }

/* x[0..V) = p[0..V) in float. V a multiple of GcVec<T>::N (16-byte
 * accesses; p 16-byte aligned), or less than it (one element at a time). */
template <int V, class T> __device__ __forceinline__ void gc_vload(float *x, const T *p)
{
    const int N = GcVec<T>::N;
    if (V >= N) {
#pragma unroll
        for (int j = 0; j + N <= V; j += N) {
            GcVec<T> w = *(const GcVec<T> *)(p + j);
#pragma unroll
            for (int k = 0; k < N; k++)
                x[j + k] = gc_tof(w.v[k]);
        }
    } else {
#pragma unroll
        for (int k = 0; k < V; k++)
            x[k] = gc_tof(p[k]);
    }
}

/* p[0..V) = x[0..V), rounded to T (bf16: nearest even); as gc_vload */
template <int V, class T> __device__ __forceinline__ void gc_vstore(T *p, const float *x)
{
    const int N = GcVec<T>::N;
    if (V >= N) {
#pragma unroll
        for (int j = 0; j + N <= V; j += N) {
            GcVec<T> w;
#pragma unroll
            for (int k = 0; k < N; k++)
                gc_fromf(&w.v[k], x[j + k]);
            *(GcVec<T> *)(p + j) = w;
        }
    } else {
#pragma unroll
        for (int k = 0; k < V; k++)
            gc_fromf(p + k, x[k]);
    }
}
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- device_cuda.cu */

/* The stream every kernel, copy and cuBLASLt call of the runtime runs on
 * (created by gc_device_init; a blocking stream, so it also orders with the
 * legacy default stream). */
extern cudaStream_t gc_stream;
/* The cuBLASLt handle (created by gc_device_init). */
extern cublasLtHandle_t gc_cublaslt;

/* Checks the device-side error flag that kernels raise on bad input (an
 * index or target outside its range). Synchronizes gc_stream; on an error
 * prints the CPU kernels' message ("error: index 77 at position 2 is outside
 * the embedding table [0, 50)", "error: target ... outside the vocabulary
 * ...") and exits 1. gc_device_sync() calls it, so a program that syncs after
 * each step needs nothing else. */
void gc_cuda_check_errors(void);

/* ---------------------------------------------------------------- kernels_cuda.cu */

/* Scratch memory for cuBLASLt and for the deterministic reductions: the
 * chunked column sums (reduce_rows, layernorm dw/db: up to
 * 1024 x cols x 2 floats, fewer chunks when smaller) and embedding_bwd's sort
 * (8 bytes x n rounded up to a power of two; below that an O(n^2) fallback).
 * Used in stream order on gc_stream only, so one buffer serves every kernel.
 * 32 MiB (llm.c's cuBLASLt size) covers GPT-2 up to n = B*T = 4M. 0 bytes
 * works too (slower single-pass fallbacks). Results are deterministic for a
 * given workspace size; another size may change the last bits of the column
 * sums. p is rounded up to 256-byte alignment (bytes shrink to match). Set it
 * before each step (the pointer is kept, not copied). */
void gc_cuda_set_workspace(void *p, size_t bytes);
#define GC_CUDA_WORKSPACE_BYTES ((size_t)32 << 20)

/* TF32 tensor cores for fp32 matmuls (fp32 operands rounded to a 10-bit
 * mantissa, fp32 accumulation), as llm.c: about 7x the fp32 rate on an H100.
 * The emitted program turns it on before each step unless it was compiled
 * with gcompile --no-tf32. It takes effect on sm_80 and newer only
 * (gc_cuda_tf32() then says 1); bf16 matmuls are not affected. Error: each
 * product a*b is off by at most 2^-10 |a b| relative, so an element of a
 * matmul by at most (2^-10 + K 2^-24) sum_k |a_ik b_kj| (fp32 alone:
 * K 2^-24 of that), which tests/cuda checks against the CPU. */
void gc_cuda_set_tf32(int on);
int gc_cuda_tf32(void);
/* Compute capability major of the device in use (device_cuda.cu). */
int gc_cuda_cc_major(void);

/* Raised by kernels on a token or target outside [0, limit); read by
 * gc_cuda_check_errors. Defined in kernels_cuda.cu. */
typedef struct {
    int flag;      /* 0: no error; 1: embedding index; 2: cross-entropy target */
    int value;     /* the offending value */
    long limit;    /* the valid range was [0, limit) */
    long pos;      /* its position in the index tensor */
} gc_cuda_error;
void gc_cuda_read_error(gc_cuda_error *e);  /* synchronous; clears the flag */

/* Drops the cached cuBLASLt descriptors (called by tests and at exit). */
void gc_cuda_matmul_cache_clear(void);

/* Tests: lowers the column sums' limit of 8192 column tiles (32 columns
 * each), above which a second kernel adds the chunks (0: back to 8192). */
void gc_cuda_colsum_max_tiles(long n);

/* ---------------------------------------------------------------- kernels_cuda.cu: bf16 */
/* For --precision bf16 (llm.c's scheme): bf16 activations and bf16 copies of
 * the weights; fp32 master weights, optimizer state, parameter gradients,
 * layernorm statistics and the loss. Each is its fp32 namesake in
 * gc_runtime.h with these types; all arithmetic is fp32, rounded once to bf16
 * on store (nearest even). Same in-place and acc rules. */
void gc_matmul_bf16(gc_bf16 *c, const gc_bf16 *a, const gc_bf16 *b, long batch, long M, long N, long K, int ta,
                    int tb, int acc);
/* fp32 output (weight gradients): c (+)= op(a) @ op(b) */
void gc_matmul_bias_bf16(gc_bf16 *c, const gc_bf16 *a, const gc_bf16 *b, const gc_bf16 *bias, long batch, long M,
                         long N, long K, int ta, int tb, int acc);
void gc_matmul_bf16_f32(float *c, const gc_bf16 *a, const gc_bf16 *b, long batch, long M, long N, long K, int ta,
                        int tb, int acc);
/* fuse_gelu.c's ops (gc_runtime.h: gc_matmul_bias_gelu, gc_matmul_dgelu) */
void gc_matmul_bias_gelu_bf16(gc_bf16 *h, gc_bf16 *pre, const gc_bf16 *a, const gc_bf16 *b, const gc_bf16 *bias,
                              long batch, long M, long N, long K, int ta, int tb);
void gc_matmul_dgelu_bf16(gc_bf16 *dpre, gc_bf16 *h, const gc_bf16 *a, const gc_bf16 *b, const gc_bf16 *pre,
                          long batch, long M, long N, long K, int ta, int tb);
/* db stays fp32 (a parameter gradient), summed in fp32 from the bf16 dpre:
 * always the column sum (the DGELU_BGRAD epilogue's bias gradient would be
 * bf16, D's type) */
void gc_matmul_dgelu_bgrad_bf16(gc_bf16 *dpre, gc_bf16 *h, float *db, const gc_bf16 *a, const gc_bf16 *b,
                                const gc_bf16 *pre, long batch, long M, long N, long K, int ta, int tb, int acc);
void gc_reduce_rows_bf16(float *out, const gc_bf16 *in, long rows, long cols, int acc);
void gc_embedding_fwd_bf16(gc_bf16 *out, const int32_t *idx, const gc_bf16 *table, long n, long rows, long C);
void gc_embedding_bwd_bf16(float *dtable, const gc_bf16 *dout, const int32_t *idx, long n, long rows, long C,
                           int acc);
void gc_layernorm_fwd_bf16(gc_bf16 *out, float *mean, float *rstd, const gc_bf16 *x, const gc_bf16 *w,
                           const gc_bf16 *b, long N, long C, float eps);
void gc_add_layernorm_fwd_bf16(gc_bf16 *x, gc_bf16 *out, float *mean, float *rstd, const gc_bf16 *ra,
                               const gc_bf16 *rb, const gc_bf16 *w, const gc_bf16 *b, long N, long C, float eps);
void gc_layernorm_bwd_bf16(gc_bf16 *dx, float *dw, float *db, const gc_bf16 *dout, const gc_bf16 *x,
                           const gc_bf16 *w, const float *mean, const float *rstd, long N, long C, int acc);
void gc_permute_bf16(gc_bf16 *out, const gc_bf16 *in, int rank, const long *shape, const int *perm, int acc);
void gc_softmax_fwd_bf16(gc_bf16 *out, const gc_bf16 *in, long rows, long cols);
void gc_softmax_bwd_bf16(gc_bf16 *dx, const gc_bf16 *dy, const gc_bf16 *y, long rows, long cols, int acc);
void gc_causal_mask_fwd_bf16(gc_bf16 *out, const gc_bf16 *in, long batch, long T);
void gc_causal_mask_bwd_bf16(gc_bf16 *dx, const gc_bf16 *dy, long batch, long T, int acc);
void gc_crossentropy_fwd_bf16(float *loss, const gc_bf16 *logits, const int32_t *targets, long n, long Vp, long V);
void gc_crossentropy_bwd_bf16(gc_bf16 *dlogits, const float *dloss, const gc_bf16 *logits, const int32_t *targets,
                              long n, long Vp, long V, int acc);
void gc_fill_bf16(gc_bf16 *x, long n, float value);
/* gc_adamw that also writes the updated weights, rounded, to pcopy (the bf16
 * weight copy; NULL: none) in the same pass */
void gc_adamw_bf16(float *p, gc_bf16 *pcopy, const float *g, float *m, float *v, long n, float lr, float beta1,
                   float beta2, float eps, float wd, int t);
void gc_cast_bf16(gc_bf16 *out, const float *in, long n);   /* round to nearest even */
/* attention_cuda.cu: fused attention on bf16 storage, lse fp32 */
void gc_attention_fwd_bf16(gc_bf16 *y, float *lse, const gc_bf16 *x, const long *geom, float scale);
void gc_attention_bwd_bf16(gc_bf16 *dx, const gc_bf16 *dy, const gc_bf16 *x, const gc_bf16 *y, const float *lse,
                           const long *geom, float scale, int acc);
/* The bf16 attention's tensor-core kernels (mma.sync, attention_mma.cu; both
 * gc_attention_*_bf16 and gc_attention_gqa_*_bf16): on by default, used on
 * sm_80 and newer (gc_cuda_attention_wmma() then says 1); off, or on an
 * older device, the bf16 attention runs the SIMT kernels of the fp32 path.
 * For tests and comparisons on a GPU. (The name stays from the WMMA kernels
 * these replaced.) */
void gc_cuda_set_attention_wmma(int on);
int gc_cuda_attention_wmma(void);
/* Tests: at most n (batch, head) pairs per attention launch (default and
 * n <= 0: 65,535, the grid's y), so that the chunked launches run at small
 * shapes. */
void gc_cuda_attention_max_heads(long n);
/* Tests (sm_80+): gc_mma.h's fragment layouts on one warp, see
 * mma_selftest_kernel in attention_mma.cu: d (3 x 16 x 8 floats) = c + a b
 * three ways, raw (32 x 12) the ldmatrix registers; device pointers. */
void gc_cuda_mma_selftest(float *d, uint32_t *raw, const gc_bf16 *a, const gc_bf16 *bkn, const gc_bf16 *bnk,
                          const float *c);
void gc_cast_f32(float *out, const gc_bf16 *in, long n);
/* classifier_cuda.cu: the fused classifier (gc_classifier) on bf16 x, w,
 * chunk and dx; loss, dw and rowloss (N doubles) fp32 storage */
void gc_classifier_bf16(float *loss, gc_bf16 *dx, float *dw, gc_bf16 *chunk, float *rowloss, const gc_bf16 *x,
                        const gc_bf16 *w, const int32_t *targets, long N, long C, long Vp, long V, long R, float seed,
                        int acc);
/* norm_rope_cuda.cu, shape_cuda.cu (issue 22): rstd and dw fp32 */
void gc_rmsnorm_fwd_bf16(gc_bf16 *out, float *rstd, const gc_bf16 *x, const gc_bf16 *w, long N, long C, float eps);
void gc_rmsnorm_bwd_bf16(gc_bf16 *dx, float *dw, const gc_bf16 *dy, const gc_bf16 *x, const gc_bf16 *w,
                         const float *rstd, long N, long C, int acc);
void gc_add_rmsnorm_fwd_bf16(gc_bf16 *x, gc_bf16 *out, float *rstd, const gc_bf16 *ra, const gc_bf16 *rb,
                             const gc_bf16 *w, long N, long C, float eps);
void gc_swiglu_bwd_bf16(gc_bf16 *da, gc_bf16 *db, const gc_bf16 *dh, const gc_bf16 *a, const gc_bf16 *b, long n,
                        int acc);
void gc_attention_gqa_fwd_bf16(gc_bf16 *y, float *lse, const gc_bf16 *q, const gc_bf16 *k, const gc_bf16 *v, long B,
                               long NH, long NKV, long T, long hs, int heads_out, float scale);
void gc_attention_gqa_bwd_bf16(gc_bf16 *dq, gc_bf16 *dk, gc_bf16 *dv, const gc_bf16 *dy, const gc_bf16 *q,
                               const gc_bf16 *k, const gc_bf16 *v, const gc_bf16 *y, const float *lse, long B, long NH,
                               long NKV, long T, long hs, int heads_out, float scale, int acc);
void gc_rope_bf16(gc_bf16 *y, const gc_bf16 *x, long batch, long T, long hs, double theta, int inverse, int acc);
void gc_concat_bf16(gc_bf16 *y, const gc_bf16 *a, const gc_bf16 *b, long outer, long na, long nb, int acc);
void gc_narrow_bf16(gc_bf16 *y, const gc_bf16 *x, long outer, long nx, long start, long len, int acc);
void gc_narrow_bwd_bf16(gc_bf16 *dx, const gc_bf16 *dy, long outer, long nx, long start, long len, int acc);
void gc_repeat_bf16(gc_bf16 *y, const gc_bf16 *x, long outer, long d, long n, long inner, int acc);
void gc_repeat_bwd_bf16(gc_bf16 *dx, const gc_bf16 *dy, long outer, long d, long n, long inner, int acc);
void gc_mean_rows_bf16(gc_bf16 *y, const gc_bf16 *x, long rows, long n, int acc);
void gc_mean_bwd_bf16(gc_bf16 *dx, const gc_bf16 *dy, long rows, long n, int acc);
/* comm_nccl.cu: the collectives of gc_runtime.h on bf16 buffers (ncclBfloat16):
 * tensor parallel's sums of bf16 activations and their gradients, ZeRO's
 * all-gathers and gathers of the bf16 weight copies. NCCL adds bf16 in fp32
 * and rounds to nearest even. */
void gc_allreduce_bf16(gc_bf16 *out, const gc_bf16 *in, long n, int avg, int group);
void gc_reduce_scatter_bf16(gc_bf16 *out, const gc_bf16 *in, long n, int avg, int group);
void gc_allgather_bf16(gc_bf16 *whole, const gc_bf16 *part, long n, int group);
void gc_gather_bf16(gc_bf16 *out, const gc_bf16 *in, long n, int group);

#ifdef __cplusplus
}
#endif
#endif
