/* kernels_cuda.cu — the CUDA kernels of gc_runtime.h ("kernels_cpu.c /
 * kernels_cuda.cu" section): same names and signatures as the CPU kernels,
 * device pointers, everything on gc_stream.
 *
 * Each op is a kernel plus a host launcher (outputs first, then const inputs,
 * sizes, flags). Row kernels (layernorm, softmax) put one warp on a row and
 * reduce with shuffles; cross-entropy puts a block on a row. Every reduction
 * has a fixed shape that depends only on the sizes (and on the workspace size
 * for the chunked column sums), never on timing: no floating-point atomics,
 * so a step is bit-reproducible.
 *
 * Kernels are templates over the storage type of activations (float, and
 * gc_bf16 for the _bf16 entry points declared in gc_cuda.h) and always compute
 * in float. Host launchers: gc_<op> (fp32, gc_runtime.h) and gc_<op>_bf16
 * wrap one template launcher <op>.
 *
 * This file also compiles as C++ on the CPU against tests/cuda/shim (the SIMT
 * emulator); keep it free of anything the shim lacks.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "gc_cuda.h"

static_assert(sizeof(gc_real) == sizeof(float), "kernels_cuda.cu is built with gc_real = float");

#define FULL_MASK 0xffffffffu

/* ---------------------------------------------------------------- state */

static void *gc_ws;            /* workspace (gc_cuda_set_workspace) */
static size_t gc_ws_bytes;
static int gc_use_tf32;

static __device__ gc_cuda_error gc_err_dev;   /* raised by kernels, read by the host */

/* Aligned up to 256 bytes (cuBLASLt's alignment; the sort's 8-byte keys). */
void gc_cuda_set_workspace(void *p, size_t bytes)
{
    size_t skip = p ? (size_t)((256 - (uintptr_t)p % 256) % 256) : 0;
    if (!p || bytes <= skip) {
        gc_ws = NULL;
        gc_ws_bytes = 0;
        return;
    }
    gc_ws = (char *)p + skip;
    gc_ws_bytes = bytes - skip;
}

void gc_cuda_set_tf32(int on) { gc_use_tf32 = on != 0; }
int gc_cuda_tf32(void) { return gc_use_tf32 && gc_cuda_cc_major() >= 8; }

void gc_cuda_read_error(gc_cuda_error *e)
{
    static const gc_cuda_error none = {0, 0, 0, 0};
    GC_CUDA_CHECK(cudaMemcpyFromSymbolAsync(e, gc_err_dev, sizeof *e, 0, cudaMemcpyDeviceToHost, gc_stream));
    GC_CUDA_CHECK(cudaStreamSynchronize(gc_stream));
    if (e->flag)
        GC_CUDA_CHECK(cudaMemcpyToSymbolAsync(gc_err_dev, &none, sizeof none, 0, cudaMemcpyHostToDevice, gc_stream));
}

/* First error wins; the host reports it after the step. */
static __device__ void raise_error(int kind, int value, long limit, long pos)
{
    if (atomicCAS(&gc_err_dev.flag, 0, kind) == 0) {
        gc_err_dev.value = value;
        gc_err_dev.limit = limit;
        gc_err_dev.pos = pos;
    }
}

/* ---------------------------------------------------------------- helpers */

/* Storage type <-> float: every kernel loads through to_f and stores
 * through store (bf16: round to nearest even). */
__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(gc_bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void store(float *p, float v) { *p = v; }
__device__ __forceinline__ void store(gc_bf16 *p, float v) { *p = __float2bfloat16(v); }

/* out (+)= v, by the acc flag */
template <class T> __device__ __forceinline__ void put(T *p, float v, int acc)
{
    store(p, acc ? to_f(*p) + v : v);
}

/* Butterfly sums: every lane ends with the same bits (a+b == b+a). */
__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

/* Online softmax state: running max m and sum s of exp(x - m). */
struct MaxSum {
    float m, s;
};

__device__ __forceinline__ MaxSum ms_add(MaxSum a, float x)
{
    if (x > a.m) {
        a.s = a.s * expf(a.m - x) + 1.0f;   /* expf(-inf) = 0 on the first value */
        a.m = x;
    } else if (x != -INFINITY) {
        a.s += expf(x - a.m);
    }
    return a;
}

/* Commutative bit for bit, so butterfly lanes agree. */
__device__ __forceinline__ MaxSum ms_merge(MaxSum a, MaxSum b)
{
    float m = fmaxf(a.m, b.m);
    if (m == -INFINITY)
        return a;
    float sa = a.m == -INFINITY ? 0.0f : a.s * expf(a.m - m);
    float sb = b.m == -INFINITY ? 0.0f : b.s * expf(b.m - m);
    MaxSum r = {m, sa + sb};
    return r;
}

__device__ __forceinline__ MaxSum warp_maxsum(MaxSum v)
{
    for (int o = 16; o > 0; o >>= 1) {
        MaxSum w = {__shfl_xor_sync(FULL_MASK, v.m, o), __shfl_xor_sync(FULL_MASK, v.s, o)};
        v = ms_merge(v, w);
    }
    return v;
}

/* Block-wide reductions (blockDim.x a multiple of 32, <= 1024; every thread
 * of the block must call). All threads get the result. */
static __device__ float block_sum(float v)
{
    __shared__ float part[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = warp_sum(v);
    __syncthreads();   /* the previous call's readers are done with part[] */
    if (lane == 0)
        part[warp] = v;
    __syncthreads();
    return warp_sum(lane < nwarps ? part[lane] : 0.0f);
}

static __device__ MaxSum block_maxsum(MaxSum v)
{
    __shared__ float pm[32], ps[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = warp_maxsum(v);
    __syncthreads();
    if (lane == 0) {
        pm[warp] = v.m;
        ps[warp] = v.s;
    }
    __syncthreads();
    MaxSum r = {-INFINITY, 0.0f};
    if (lane < nwarps) {
        r.m = pm[lane];
        r.s = ps[lane];
    }
    return warp_maxsum(r);
}

/* max and sum of exp(x - max) over x[0..n), the whole block cooperating */
template <class T> static __device__ MaxSum block_row_maxsum(const T *x, long n)
{
    const int V = GcVec<T>::N;   /* 16-byte vectors over [0, ve), then one by one */
    long ve = gc_al16(x) ? n / V * V : 0;
    MaxSum ms = {-INFINITY, 0.0f};
    for (long c = (long)threadIdx.x * V; c < ve; c += (long)blockDim.x * V) {
        float xv[V];
        gc_vload<V>(xv, x + c);
        for (int k = 0; k < V; k++)
            ms = ms_add(ms, xv[k]);
    }
    for (long c = ve + threadIdx.x; c < n; c += blockDim.x)
        ms = ms_add(ms, to_f(x[c]));
    return block_maxsum(ms);
}

/* 16-byte vectors (gc_cuda.h): VecN<T> is 16 bytes of T (4 floats, 8 bf16).
 * A row kernel takes the whole vectors of a row this way when every row
 * pointer it touches is 16-byte aligned, then the tail (n mod N elements),
 * or the whole of a misaligned row, one element at a time. An elementwise
 * kernel runs vec_items(): nv vectors (the first nv*N elements), then the
 * rest one element per item. */
template <class T> using VecN = GcVec<T>;

__host__ __device__ __forceinline__ bool al16(const void *p) { return gc_al16(p); }

/* elements [0, end) of a row of n go by vectors: a multiple of N, 0 when misaligned */
template <class T> __device__ __forceinline__ long vec_end(long n, bool aligned)
{
    return aligned ? n / VecN<T>::N * VecN<T>::N : 0;
}

/* work items over n elements: n / V vectors when aligned (else none), then the rest one by one */
static long vec_count(long n, int V, bool aligned) { return aligned ? n / V : 0; }
static long vec_items(long n, int V, long nv) { return nv + (n - nv * V); }

static unsigned ceil_div(long a, long b) { return (unsigned)((a + b - 1) / b); }

/* Grid size for n items of `per` each; an error above CUDA's limit. */
static unsigned grid_for(long n, long per)
{
    long g = (n + per - 1) / per;
    if (g > 2147483647L) {
        fprintf(stderr, "%s:%d: internal error: grid of %ld blocks\n", __FILE__, __LINE__, g);
        exit(1);
    }
    return (unsigned)g;
}

/* Largest power of two (<= 256) dividing the address. */
static uint32_t align_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && a % al)
        al >>= 1;
    return al;
}

/* ---------------------------------------------------------------- gc_matmul (cuBLASLt) */

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, so the
 * cuBLASLt call gets B as its first operand and A as its second:
 *   Lt "A" = our B: stored NxK col-major (ld N) when !tb -> op N; stored KxN col-major (ld K) when tb -> op T
 *   Lt "B" = our A: stored KxM col-major (ld K) when !ta -> op N; stored MxK (ld M) when ta -> op T
 *   Lt "D" = our C: NxM col-major, ld N.
 * Descriptors and the heuristic's algorithm are cached per shape and per
 * alignment of each pointer, the bias's included: the heuristic sees the real
 * bias pointer (it infers the bias alignment from it), and a later call
 * reuses the algorithm only with a bias of the same alignment. */
typedef struct {
    long batch, M, N, K;
    int ta, tb, tf32, bias;   /* bias: the BIAS epilogue (a vector of N added to every row), or
                                 with gelu 3 the bias gradient (N column sums of c, written) */
    int gelu;                 /* 1: GELU_AUX_BIAS (aux = pre), 2: DGELU (aux = pre), 3: DGELU_BGRAD
                                 (aux = pre, bias = the gradient); fuse_gelu.c, fuse_bgrad.c */
    int unsupported;          /* gelu: the heuristic found no algorithm (callers fall back) */
    uint32_t aux_align;       /* of aux (0: none) */
    const void *aux_ptr;      /* the aux the heuristic saw (not part of the key) */
    cudaDataType_t tab, tc;   /* element types of a and b, of c */
    uint32_t align[4];        /* of a, b, c, bias (0: no bias) */
    const void *bias_ptr;     /* the bias the heuristic saw (not part of the key) */
    size_t ws;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
} MatmulPlan;

enum { MATMUL_CACHE = 64 };
static MatmulPlan mm_cache[MATMUL_CACHE];
static int mm_count, mm_next;

static void plan_destroy(MatmulPlan *p)
{
    GC_CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->desc));
    GC_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->la));
    GC_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->lb));
    GC_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->lc));
}

void gc_cuda_matmul_cache_clear(void)
{
    for (int i = 0; i < mm_count; i++)
        plan_destroy(&mm_cache[i]);
    mm_count = mm_next = 0;
}

static cublasLtMatrixLayout_t make_layout(cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld, long batch,
                                          int64_t stride)
{
    cublasLtMatrixLayout_t l;
    GC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, rows, cols, ld));
    if (batch > 1) {
        int32_t b = (int32_t)batch;
        GC_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b));
        GC_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                         sizeof stride));
    }
    return l;
}

static const char *type_name(cudaDataType_t t) { return t == CUDA_R_32F ? "f32" : t == CUDA_R_16BF ? "bf16" : "?"; }

/* "no cuBLASLt algorithm for MxNxK, layouts …, epilogue …" and exit 1 */
static void no_algorithm(const MatmulPlan *p, cublasStatus_t s)
{
    long ra = p->tb ? p->K : p->N, rb = p->ta ? p->M : p->K;   /* rows (= leading dimension) of Lt's A and B */
    fprintf(stderr,
            "error: no cuBLASLt algorithm for %ldx%ldx%ld (M x N x K, batch %ld), layouts A %s %ldx%ld ld %ld op %s "
            "(%u-byte aligned), B %s %ldx%ld ld %ld op %s (%u), D %s %ldx%ld ld %ld (%u), epilogue %s",
            p->M, p->N, p->K, p->batch, type_name(p->tab), ra, p->tb ? p->N : p->K, ra, p->tb ? "T" : "N",
            p->align[1], type_name(p->tab), rb, p->ta ? p->K : p->M, rb, p->ta ? "T" : "N", p->align[0],
            type_name(p->tc), p->N, p->M, p->N, p->align[2], p->bias ? "BIAS" : "DEFAULT");
    if (p->bias)
        fprintf(stderr, " (bias %s, %u-byte aligned)", type_name(p->tc), p->align[3]);
    fprintf(stderr, ", compute %s, workspace %zu bytes (%s)\n", p->tf32 ? "32F_FAST_TF32" : "32F", p->ws,
            cublasLtGetStatusString(s));
    exit(1);
}

static void plan_build(MatmulPlan *p)
{
    /* fp32 accumulation always; TF32 only applies to fp32 operands */
    cublasComputeType_t ct = p->tf32 && p->tab == CUDA_R_32F ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    GC_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, ct, CUDA_R_32F));
    int32_t opa = p->tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = p->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    GC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    GC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    if (p->gelu || p->bias) {
        int32_t epi = p->gelu == 1   ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                      : p->gelu == 2 ? CUBLASLT_EPILOGUE_DGELU
                      : p->gelu == 3 ? CUBLASLT_EPILOGUE_DGELU_BGRAD
                                     : CUBLASLT_EPILOGUE_BIAS;
        GC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    }
    if (p->gelu) {   /* the aux matrix (pre) has D's layout: N x M, ld N */
        int64_t ld = p->N;
        GC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                       &p->aux_ptr, sizeof p->aux_ptr));
        GC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
    }
    /* the bias (or, DGELU_BGRAD, the bias gradient: D's type, N elements)
       before the heuristic, which infers its alignment from the pointer */
    if (p->bias)
        GC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p->bias_ptr,
                                                       sizeof p->bias_ptr));
    p->la = p->tb ? make_layout(p->tab, p->K, p->N, p->K, p->batch, p->N * p->K)
                  : make_layout(p->tab, p->N, p->K, p->N, p->batch, p->N * p->K);
    p->lb = p->ta ? make_layout(p->tab, p->M, p->K, p->M, p->batch, p->M * p->K)
                  : make_layout(p->tab, p->K, p->M, p->K, p->batch, p->M * p->K);
    p->lc = make_layout(p->tc, p->N, p->M, p->N, p->batch, p->M * p->N);

    cublasLtMatmulPreference_t pref;
    GC_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = p->ws;
    GC_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    /* Lt's A is our b, Lt's B our a; C and D are both c */
    uint32_t al[4] = {p->align[1], p->align[0], p->align[2], p->align[2]};
    GC_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], 4));
    GC_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], 4));
    GC_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], 4));
    GC_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], 4));
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    /* NOT_SUPPORTED: no algorithm for this problem (reported below, not as a generic cuBLAS error) */
    cublasStatus_t s =
        cublasLtMatmulAlgoGetHeuristic(gc_cublaslt, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &res, &nres);
    GC_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    /* a GELU epilogue without an algorithm: NOT_SUPPORTED, or INVALID_VALUE from some cuBLASLt versions */
    if (p->gelu && (s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE ||
                    (s == CUBLAS_STATUS_SUCCESS && nres < 1))) {
        p->unsupported = 1;   /* the caller runs the plain matmul and a GELU kernel */
        return;
    }
    if (s == CUBLAS_STATUS_NOT_SUPPORTED || (s == CUBLAS_STATUS_SUCCESS && nres < 1))
        no_algorithm(p, s);
    GC_CUBLAS_CHECK(s);
    p->algo = res.algo;
}

static MatmulPlan *plan_get(const MatmulPlan *key)
{
    for (int i = 0; i < mm_count; i++) {
        MatmulPlan *p = &mm_cache[i];
        if (p->batch == key->batch && p->M == key->M && p->N == key->N && p->K == key->K && p->ta == key->ta &&
            p->tb == key->tb && p->tf32 == key->tf32 && p->bias == key->bias && p->gelu == key->gelu && p->aux_align == key->aux_align &&
            p->tab == key->tab &&
            p->tc == key->tc && p->ws == key->ws &&
            p->align[0] == key->align[0] &&
            p->align[1] == key->align[1] && p->align[2] == key->align[2] && p->align[3] == key->align[3])
            return p;
    }
    MatmulPlan *p;
    if (mm_count < MATMUL_CACHE) {
        p = &mm_cache[mm_count++];
    } else {
        p = &mm_cache[mm_next];
        mm_next = (mm_next + 1) % MATMUL_CACHE;
        plan_destroy(p);
    }
    *p = *key;
    plan_build(p);
    return p;
}

template <class T> static void fill(T *x, long n, float value);

/* c (n / N, N) += bias (N). Only for a bias under 16-byte aligned (below),
 * so one element at a time: no 16-byte vector of it exists. */
template <class T> __global__ void add_bias_kernel(T *c, const T *bias, long n, long N)
{
    long e = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < n)
        store(c + e, to_f(c[e]) + to_f(bias[e % N]));
}

/* c (B, M, N) (+)= op(a) (B, M, K) @ op(b) (B, K, N); a and b of type tab, c of tc.
 * A bias under 16-byte aligned, which cuBLASLt's bias epilogue may not take
 * (its heuristic can pick a kernel that assumes 16), is added by a kernel
 * after the matmul. */
static int matmul(void *c, cudaDataType_t tc, const void *a, const void *b, cudaDataType_t tab, long batch, long M,
                  long N, long K, int ta, int tb, int acc, const void *bias = NULL, int gelu = 0,
                  const void *aux = NULL)
{
    if (batch <= 0 || M <= 0 || N <= 0)
        return 1;
    if (bias && !gelu && align_of(bias) < 16) {
        matmul(c, tc, a, b, tab, batch, M, N, K, ta, tb, acc);
        long n = batch * M * N;
        if (tc == CUDA_R_32F)
            GC_LAUNCH(add_bias_kernel<float>, grid_for(n, 256), 256, 0, (float *)c, (const float *)bias, n, N);
        else
            GC_LAUNCH(add_bias_kernel<gc_bf16>, grid_for(n, 256), 256, 0, (gc_bf16 *)c, (const gc_bf16 *)bias, n,
                      N);
        return 1;
    }
    if (K <= 0 && gelu)   /* an empty product: the callers' plain path */
        return 0;
    if (K <= 0) {
        if (!(acc & 1)) {
            if (tc == CUDA_R_32F)
                fill((float *)c, batch * M * N, 0.0f);
            else
                fill((gc_bf16 *)c, batch * M * N, 0.0f);
        }
        return 1;
    }
    if (!gc_cublaslt)
        GC_CUBLAS_CHECK(cublasLtCreate(&gc_cublaslt));
    MatmulPlan key;
    memset(&key, 0, sizeof key);
    key.batch = batch;
    key.M = M;
    key.N = N;
    key.K = K;
    key.ta = ta != 0;
    key.tb = tb != 0;
    key.tf32 = tab == CUDA_R_32F && gc_cuda_tf32();
    key.tab = tab;
    key.tc = tc;
    key.ws = gc_ws_bytes;
    key.align[0] = align_of(a);
    key.align[1] = align_of(b);
    key.align[2] = align_of(c);
    key.bias = bias != NULL;
    key.align[3] = bias ? align_of(bias) : 0;
    key.bias_ptr = bias;
    key.gelu = gelu;
    key.aux_align = aux ? align_of(aux) : 0;
    key.aux_ptr = aux;
    MatmulPlan *p = plan_get(&key);
    if (p->unsupported)
        return 0;
    if (aux)
        GC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                                       sizeof aux));
    if (bias)   /* the pointer changes from call to call; the cached plan does not */
        GC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    const float alpha = 1.0f, beta = (acc & 1) ? 1.0f : 0.0f;
    GC_CUBLAS_CHECK(cublasLtMatmul(gc_cublaslt, p->desc, &alpha, b, p->la, a, p->lb, &beta, c, p->lc, c, p->lc,
                                   &p->algo, gc_ws, gc_ws_bytes, gc_stream));
    return 1;
}

void gc_matmul(gc_real *c, const gc_real *a, const gc_real *b, long batch, long M, long N, long K, int ta, int tb,
               int acc)
{
    matmul(c, CUDA_R_32F, a, b, CUDA_R_32F, batch, M, N, K, ta, tb, acc);
}

void gc_matmul_bias(gc_real *c, const gc_real *a, const gc_real *b, const gc_real *bias, long batch, long M, long N,
                    long K, int ta, int tb, int acc)
{
    matmul(c, CUDA_R_32F, a, b, CUDA_R_32F, batch, M, N, K, ta, tb, acc, bias);
}

void gc_matmul_bias_bf16(gc_bf16 *c, const gc_bf16 *a, const gc_bf16 *b, const gc_bf16 *bias, long batch, long M,
                         long N, long K, int ta, int tb, int acc)
{
    matmul(c, CUDA_R_16BF, a, b, CUDA_R_16BF, batch, M, N, K, ta, tb, acc, bias);
}

void gc_matmul_bf16(gc_bf16 *c, const gc_bf16 *a, const gc_bf16 *b, long batch, long M, long N, long K, int ta,
                    int tb, int acc)
{
    matmul(c, CUDA_R_16BF, a, b, CUDA_R_16BF, batch, M, N, K, ta, tb, acc);
}

void gc_matmul_bf16_f32(float *c, const gc_bf16 *a, const gc_bf16 *b, long batch, long M, long N, long K, int ta,
                        int tb, int acc)
{
    matmul(c, CUDA_R_32F, a, b, CUDA_R_16BF, batch, M, N, K, ta, tb, acc);
}

/* ---------------------------------------------------------------- bias + GELU (fuse_gelu.c) */
/* llm.c's tanh GELU and its derivative (the elementwise ops' formulas,
 * codegen/expr.c) */
__device__ __forceinline__ float gelu_f(float x)
{
    float cube = 0.044715f * x * x * x;
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + cube)));
}
__device__ __forceinline__ float gelu_grad_f(float x)
{
    float cube = 0.044715f * x * x * x;
    float th = tanhf(0.7978845608028654f * (x + cube));
    return 0.5f * (1.0f + th) + x * 0.5f * (1.0f - th * th) * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
}
/* h = gelu(pre): nv 16-byte vectors (vec_items), then one element per item */
template <class T> __global__ void gelu_kernel(T *h, const T *pre, long n, long nv)
{
    const int V = VecN<T>::N;
    long t = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < nv) {
        float w[V];
        gc_vload<V>(w, pre + t * V);
#pragma unroll
        for (int k = 0; k < V; k++)
            w[k] = gelu_f(w[k]);
        gc_vstore<V>(h + t * V, w);
        return;
    }
    long e = nv * V + (t - nv);
    if (e < n)
        store(h + e, gelu_f(to_f(pre[e])));
}
/* d *= gelu'(pre), h = gelu(pre); vectors as gelu_kernel */
template <class T> __global__ void dgelu_kernel(T *d, T *h, const T *pre, long n, long nv)
{
    const int V = VecN<T>::N;
    long t = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < nv) {
        float p[V], dv[V], hv[V];
        gc_vload<V>(p, pre + t * V);
        gc_vload<V>(dv, d + t * V);
#pragma unroll
        for (int k = 0; k < V; k++) {
            dv[k] *= gelu_grad_f(p[k]);
            hv[k] = gelu_f(p[k]);
        }
        gc_vstore<V>(d + t * V, dv);
        gc_vstore<V>(h + t * V, hv);
        return;
    }
    long e = nv * V + (t - nv);
    if (e < n) {
        float p = to_f(pre[e]);
        store(d + e, gelu_grad_f(p) * to_f(d[e]));
        store(h + e, gelu_f(p));
    }
}
template <class T> static void launch_gelu(T *h, const T *pre, long n)
{
    long nv = vec_count(n, VecN<T>::N, al16(h) && al16(pre));
    GC_LAUNCH(gelu_kernel<T>, grid_for(vec_items(n, VecN<T>::N, nv), 256), 256, 0, h, pre, n, nv);
}
template <class T> static void launch_dgelu(T *d, T *h, const T *pre, long n)
{
    long nv = vec_count(n, VecN<T>::N, al16(d) && al16(h) && al16(pre));
    GC_LAUNCH(dgelu_kernel<T>, grid_for(vec_items(n, VecN<T>::N, nv), 256), 256, 0, d, h, pre, n, nv);
}

/* cuBLASLt's GELU epilogues (aux = pre, ld N) want bias and aux 16-byte
 * aligned and N a multiple of 8 (ir/ops.c op_launches counts the same);
 * otherwise, or when the heuristic has no algorithm, the plain matmul and
 * one elementwise kernel. */
static int gelu_epilogue_ok(const void *bias, const void *aux, long batch, long N)
{
    return batch == 1 && N % 8 == 0 && align_of(aux) >= 16 && (!bias || align_of(bias) >= 16);
}

template <class T>
static void matmul_bias_gelu(T *h, T *pre, const T *a, const T *b, const T *bias, cudaDataType_t t, long batch,
                             long M, long N, long K, int ta, int tb)
{
    if (batch <= 0 || M <= 0 || N <= 0)
        return;
    if (gelu_epilogue_ok(bias, pre, batch, N) && matmul(h, t, a, b, t, batch, M, N, K, ta, tb, 0, bias, 1, pre))
        return;
    matmul(pre, t, a, b, t, batch, M, N, K, ta, tb, 0, bias);
    long n = batch * M * N;
    launch_gelu<T>(h, pre, n);
}

/* dpre = gelu'(pre) * (a b) and h = gelu(pre) (recomputed for the
 * backward): the DGELU epilogue and a GELU kernel, else the plain matmul and
 * one kernel for both; two launches either way */
template <class T>
static void matmul_dgelu(T *dpre, T *h, const T *a, const T *b, const T *pre, cudaDataType_t t, long batch, long M,
                         long N, long K, int ta, int tb)
{
    if (batch <= 0 || M <= 0 || N <= 0)
        return;
    long n = batch * M * N;
    if (gelu_epilogue_ok(NULL, pre, batch, N) && matmul(dpre, t, a, b, t, batch, M, N, K, ta, tb, 0, NULL, 2, pre)) {
        launch_gelu<T>(h, pre, n);
        return;
    }
    matmul(dpre, t, a, b, t, batch, M, N, K, ta, tb, 0);
    launch_dgelu<T>(dpre, h, pre, n);
}

template <class T> static void reduce_rows(float *out, const T *in, long rows, long cols, int acc);

/* matmul_dgelu and db (N, fp32) = the column sums of dpre (fuse_bgrad.c).
 * The DGELU_BGRAD epilogue writes db in the matmul (one launch less than
 * matmul_dgelu + reduce_rows) where it applies: fp32 (for a bf16 D the
 * epilogue's bias gradient is bf16, CUBLASLT_MATMUL_DESC_BIAS_POINTER; db is
 * an fp32 parameter gradient), db overwritten (the epilogue overwrites; with
 * acc bit 2 set, a micro-batch after the first, db accumulates: the column
 * sum adds instead, no scratch vector and add kernel, which would cost the
 * launch saved), the GELU epilogues' conditions with db as the bias, and an
 * algorithm. ir/ops.c op_launches counts the same. */
template <class T>
static void matmul_dgelu_bgrad(T *dpre, T *h, float *db, const T *a, const T *b, const T *pre, cudaDataType_t t,
                               long batch, long M, long N, long K, int ta, int tb, int acc)
{
    if (batch <= 0 || M <= 0 || N <= 0) {
        if (N > 0 && !(acc & 4))   /* no rows: the sums are 0 */
            fill(db, N, 0.0f);
        return;
    }
    if (t == CUDA_R_32F && !(acc & 4) && gelu_epilogue_ok(db, pre, batch, N) &&
        matmul(dpre, t, a, b, t, batch, M, N, K, ta, tb, 0, db, 3, pre)) {
        long n = batch * M * N;
        launch_gelu<T>(h, pre, n);
        return;
    }
    matmul_dgelu<T>(dpre, h, a, b, pre, t, batch, M, N, K, ta, tb);
    reduce_rows(db, (const T *)dpre, batch * M, N, acc >> 2 & 1);
}

void gc_matmul_dgelu_bgrad(gc_real *dpre, gc_real *h, gc_real *db, const gc_real *a, const gc_real *b,
                           const gc_real *pre, long batch, long M, long N, long K, int ta, int tb, int acc)
{
    matmul_dgelu_bgrad<float>(dpre, h, db, a, b, pre, CUDA_R_32F, batch, M, N, K, ta, tb, acc);
}

void gc_matmul_dgelu_bgrad_bf16(gc_bf16 *dpre, gc_bf16 *h, float *db, const gc_bf16 *a, const gc_bf16 *b,
                                const gc_bf16 *pre, long batch, long M, long N, long K, int ta, int tb, int acc)
{
    matmul_dgelu_bgrad<gc_bf16>(dpre, h, db, a, b, pre, CUDA_R_16BF, batch, M, N, K, ta, tb, acc);
}

void gc_matmul_bias_gelu(gc_real *h, gc_real *pre, const gc_real *a, const gc_real *b, const gc_real *bias,
                         long batch, long M, long N, long K, int ta, int tb)
{
    matmul_bias_gelu<float>(h, pre, a, b, bias, CUDA_R_32F, batch, M, N, K, ta, tb);
}

void gc_matmul_bias_gelu_bf16(gc_bf16 *h, gc_bf16 *pre, const gc_bf16 *a, const gc_bf16 *b, const gc_bf16 *bias,
                              long batch, long M, long N, long K, int ta, int tb)
{
    matmul_bias_gelu<gc_bf16>(h, pre, a, b, bias, CUDA_R_16BF, batch, M, N, K, ta, tb);
}

void gc_matmul_dgelu(gc_real *dpre, gc_real *h, const gc_real *a, const gc_real *b, const gc_real *pre, long batch,
                     long M, long N, long K, int ta, int tb)
{
    matmul_dgelu<float>(dpre, h, a, b, pre, CUDA_R_32F, batch, M, N, K, ta, tb);
}

void gc_matmul_dgelu_bf16(gc_bf16 *dpre, gc_bf16 *h, const gc_bf16 *a, const gc_bf16 *b, const gc_bf16 *pre,
                          long batch, long M, long N, long K, int ta, int tb)
{
    matmul_dgelu<gc_bf16>(dpre, h, a, b, pre, CUDA_R_16BF, batch, M, N, K, ta, tb);
}

/* ---------------------------------------------------------------- column sums */
/* out_k[c] (+)= sum_r f_k(r, c) for k < NOUT: the reductions behind
 * gc_reduce_rows (bias gradients) and layernorm's dw/db, in one launch.
 * Block (32, 8) sums a tile of 32 x W columns (W: 16-byte vectors of the
 * input, or 1 when a pointer is misaligned or cols is not a multiple) over
 * `chunk` rows; with one chunk it writes out directly. With several, each
 * block writes partial[k][chunk][col] to the workspace and counts itself
 * done for its tile (an integer atomic); the tile's last block adds the
 * chunks in order and writes out. The summation order depends only on rows,
 * cols and the workspace size (not on W or on which block finishes last),
 * so the bits are reproducible. Above CS_MAX_TILES tiles of 32 columns: a
 * second kernel adds the chunks instead (ir/ops.c counts the launches). */

enum { CS_TX = 32, CS_TY = 8, CS_CHUNK = 128, CS_MAX_CHUNKS = 1024, CS_MAX_TILES = 8192 };

/* blocks done per column tile; the last one resets its counter */
static __device__ unsigned gc_cs_done[CS_MAX_TILES];
static long gc_cs_max_tiles = CS_MAX_TILES;

void gc_cuda_colsum_max_tiles(long n) { gc_cs_max_tiles = n > 0 && n < (long)CS_MAX_TILES ? n : (long)CS_MAX_TILES; }

/* a load that bypasses L1: other blocks' partial sums */
__device__ __forceinline__ float ld_cg(const float *p)
{
#ifdef GCEMU
    return *p;
#else
    return __ldcg(p);
#endif
}

template <class T> struct ReduceRowsF {
    const T *in;
    typedef T elem;
    static const int NOUT = 1;
    bool aligned() const { return al16(in); }
    template <int W> __device__ void add(long r, long c, long cols, float (*v)[W]) const
    {
        float x[W];
        gc_vload<W>(x, in + r * cols + c);
#pragma unroll
        for (int j = 0; j < W; j++)
            v[0][j] += x[j];
    }
};

template <class T> struct LayernormDwDbF {
    const T *dout, *x;
    const float *mean, *rstd;
    typedef T elem;
    static const int NOUT = 2;
    bool aligned() const { return al16(dout) && al16(x); }
    template <int W> __device__ void add(long r, long c, long cols, float (*v)[W]) const
    {
        float d[W], xv[W], m = mean[r], rs = rstd[r];
        gc_vload<W>(d, dout + r * cols + c);
        gc_vload<W>(xv, x + r * cols + c);
#pragma unroll
        for (int j = 0; j < W; j++) {
            v[0][j] += d[j] * (xv[j] - m) * rs;   /* dw */
            v[1][j] += d[j];                      /* db */
        }
    }
};

struct ColOut {
    float *out[2];   /* NULL: not wanted */
    int acc[2];
};

/* grid (ceil(cols / (32 W)), nchunks), block (32, 8). partial: NULL with one
 * chunk; final: whether the tile's last block adds the chunks (else
 * colsum_final_kernel does). */
template <class F, int W>
__global__ void colsum_kernel(ColOut o, float *partial, F f, long rows, long cols, long chunk, int final)
{
    __shared__ float sh[F::NOUT][CS_TY][CS_TX * W + 1];
    __shared__ unsigned last;
    long c = (long)blockIdx.x * CS_TX * W + (long)threadIdx.x * W;   /* this thread's first column */
    long r0 = (long)blockIdx.y * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
    bool mine = c < cols;   /* W > 1 only when cols is a multiple of W */
    float v[F::NOUT][W];
    for (int k = 0; k < F::NOUT; k++)
        for (int j = 0; j < W; j++)
            v[k][j] = 0.0f;
    if (mine)
        for (long r = r0 + threadIdx.y; r < r1; r += CS_TY)
            f.template add<W>(r, c, cols, v);
    for (int k = 0; k < F::NOUT; k++)
        for (int j = 0; j < W; j++)
            sh[k][threadIdx.y][threadIdx.x * W + j] = v[k][j];
    __syncthreads();
    bool lead = threadIdx.y == 0 && mine;   /* sums the 8 rows of partial sums of its columns */
    /* s in registers: loops over k and j with compile-time bounds (unrolled), run-time tests inside */
    float s[F::NOUT][W] = {};
    if (lead)
#pragma unroll
        for (int k = 0; k < F::NOUT; k++)
#pragma unroll
            for (int j = 0; j < W; j++) {
                float t = 0.0f;
                for (int y = 0; y < CS_TY; y++)
                    t += sh[k][y][threadIdx.x * W + j];
                s[k][j] = t;
            }
    if (!partial) {   /* one chunk: the sums are final */
        if (lead)
#pragma unroll
            for (int k = 0; k < F::NOUT; k++)
                if (o.out[k])
#pragma unroll
                    for (int j = 0; j < W; j++)
                        put(o.out[k] + c + j, s[k][j], o.acc[k]);
        return;
    }
    if (lead)
#pragma unroll
        for (int k = 0; k < F::NOUT; k++)
            gc_vstore<W>(partial + ((long)k * gridDim.y + blockIdx.y) * cols + c, s[k]);
    if (!final)
        return;
    __threadfence();   /* the partial sums are visible before the count */
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0)
        last = atomicAdd(&gc_cs_done[blockIdx.x], 1u) == gridDim.y - 1;
    __syncthreads();
    if (!last)
        return;
    /* the tile's last block: out_k[c] (+)= the chunks' sums, in chunk order (k unrolled: o.out[k]
       indexed at run time would copy o to the stack) */
    if (lead)
#pragma unroll
        for (int k = 0; k < F::NOUT; k++) {
            if (!o.out[k])
                continue;
            for (int j = 0; j < W; j++) {
                float t = 0.0f;
                for (long y = 0; y < (long)gridDim.y; y++)
                    t += ld_cg(partial + ((long)k * gridDim.y + y) * cols + c + j);
                put(o.out[k] + c + j, t, o.acc[k]);
            }
        }
    if (threadIdx.x == 0 && threadIdx.y == 0)
        gc_cs_done[blockIdx.x] = 0;   /* ready for the next launch */
}

/* Above CS_MAX_TILES tiles: one thread per column, out_k[c] (+)= sum over
 * chunks, in order (the same order as the last block's) */
template <int NOUT>
__global__ void colsum_final_kernel(ColOut o, const float *partial, long cols, long nchunks)
{
    long c = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols)
        return;
#pragma unroll
    for (int k = 0; k < NOUT; k++) {
        if (!o.out[k])
            continue;
        float s = 0.0f;
        for (long j = 0; j < nchunks; j++)
            s += partial[(k * nchunks + j) * cols + c];
        put(o.out[k] + c, s, o.acc[k]);
    }
}

/* The chunking depends only on rows, cols and the workspace size. */
template <class F> static void colsum(ColOut o, F f, long rows, long cols)
{
    if (cols <= 0)
        return;
    if (rows <= 0) {
        for (int k = 0; k < F::NOUT; k++)
            if (o.out[k] && !o.acc[k])
                fill(o.out[k], cols, 0.0f);
        return;
    }
    long nchunks = (rows + CS_CHUNK - 1) / CS_CHUNK;
    if (nchunks > CS_MAX_CHUNKS)
        nchunks = CS_MAX_CHUNKS;
    long fit = (long)(gc_ws_bytes / ((size_t)F::NOUT * cols * sizeof(float)));
    if (nchunks > fit)
        nchunks = fit;
    if (nchunks > 65535)
        nchunks = 65535;
    if (nchunks <= 1)
        nchunks = 1;
    long chunk = (rows + nchunks - 1) / nchunks;
    nchunks = (rows + chunk - 1) / chunk;
    float *partial = nchunks > 1 ? (float *)gc_ws : NULL;
    int final = cols <= gc_cs_max_tiles * CS_TX;   /* tiles of 32 columns fit the counters */
    const int W = VecN<typename F::elem>::N;           /* one 16-byte vector of the input per thread */
    dim3 block(CS_TX, CS_TY);
    if (cols % W == 0 && f.aligned())
        GC_LAUNCH((colsum_kernel<F, W>), dim3(ceil_div(cols, (long)CS_TX * W), (unsigned)nchunks), block, 0, o,
                  partial, f, rows, cols, chunk, final);
    else
        GC_LAUNCH((colsum_kernel<F, 1>), dim3(ceil_div(cols, CS_TX), (unsigned)nchunks), block, 0, o, partial, f,
                  rows, cols, chunk, final);
    if (partial && !final)
        GC_LAUNCH(colsum_final_kernel<F::NOUT>, grid_for(cols, 256), 256, 0, o, partial, cols, nchunks);
}

/* out (cols) (+)= sum over rows of in (rows, cols) */
template <class T> static void reduce_rows(float *out, const T *in, long rows, long cols, int acc)
{
    ColOut o = {{out, NULL}, {acc & 1, 0}};
    ReduceRowsF<T> f = {in};
    colsum(o, f, rows, cols);
}

void gc_reduce_rows(gc_real *out, const gc_real *in, long rows, long cols, int acc)
{
    reduce_rows(out, in, rows, cols, acc);
}

void gc_reduce_rows_bf16(float *out, const gc_bf16 *in, long rows, long cols, int acc)
{
    reduce_rows(out, in, rows, cols, acc);
}

/* ---------------------------------------------------------------- embedding */

/* out (n, C) = table (rows, C)[idx (n)]; one thread per element, or per
 * 16-byte vector (W = VecN<T>::N) when C is a multiple and both are aligned */
template <class T, int W>
__global__ void embedding_fwd_kernel(T *out, const int32_t *idx, const T *table, long n, long rows, long C)
{
    long e = ((long)blockIdx.x * blockDim.x + threadIdx.x) * W;
    if (e >= n * C)
        return;
    long i = e / C, c = e % C;
    int32_t t = idx[i];
    if (t < 0 || t >= rows) {
        if (c == 0)
            raise_error(1, t, rows, i);
        for (int k = 0; k < W; k++)
            store(out + e + k, 0.0f);
        return;
    }
    if (W > 1)
        *(VecN<T> *)(out + e) = *(const VecN<T> *)(table + (long)t * C + c);
    else
        out[e] = table[(long)t * C + c];
}

template <class T> static void embedding_fwd(T *out, const int32_t *idx, const T *table, long n, long rows, long C)
{
    if (n <= 0 || C <= 0)
        return;
    const int V = VecN<T>::N;
    if (C % V == 0 && al16(out) && al16(table))
        GC_LAUNCH((embedding_fwd_kernel<T, V>), grid_for(n * C / V, 256), 256, 0, out, idx, table, n, rows, C);
    else
        GC_LAUNCH((embedding_fwd_kernel<T, 1>), grid_for(n * C, 256), 256, 0, out, idx, table, n, rows, C);
}

void gc_embedding_fwd(gc_real *out, const int32_t *idx, const gc_real *table, long n, long rows, long C)
{
    embedding_fwd(out, idx, table, n, rows, C);
}

void gc_embedding_fwd_bf16(gc_bf16 *out, const int32_t *idx, const gc_bf16 *table, long n, long rows, long C)
{
    embedding_fwd(out, idx, table, n, rows, C);
}

/* embedding_bwd: sort (token, position) pairs, then each run of one token is
 * summed by one block, in position order. Sorting 64-bit keys token<<32|pos
 * with a bitonic network (keys are distinct, so the result is unique). */

enum { BITONIC_TILE = 2048 };   /* keys per block in the shared-memory stages */

__device__ __forceinline__ void cmp_swap(uint64_t *a, uint64_t *b, bool up)
{
    uint64_t x = *a, y = *b;
    if ((x > y) == up) {
        *a = y;
        *b = x;
    }
}

/* keys (npad): token<<32 | position, padding UINT64_MAX */
static __global__ void embed_keys_kernel(uint64_t *keys, const int32_t *idx, long n, long npad, long rows)
{
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= npad)
        return;
    if (i >= n) {
        keys[i] = UINT64_MAX;
        return;
    }
    int32_t t = idx[i];
    if (t < 0 || t >= rows) {
        raise_error(1, t, rows, i);
        keys[i] = UINT64_MAX;   /* dropped */
        return;
    }
    keys[i] = ((uint64_t)(uint32_t)t << 32) | (uint64_t)i;
}

/* Bitonic stages k (sizes) with strides j < tile, in shared memory; each
 * block owns `tile` consecutive keys, blockDim.x = tile / 2. With kfull = 0:
 * the full sort of each tile (k = 2 .. tile); else only the merge of size
 * kfull for strides tile/2 .. 1. Direction from the global index. */
static __global__ void bitonic_shared_kernel(uint64_t *keys, long tile, long kfull)
{
    __shared__ uint64_t sh[BITONIC_TILE];
    long base = (long)blockIdx.x * tile;
    for (long t = threadIdx.x; t < tile; t += blockDim.x)
        sh[t] = keys[base + t];
    __syncthreads();
    long kfirst = kfull ? kfull : 2, klast = kfull ? kfull : tile;
    for (long k = kfirst; k <= klast; k <<= 1) {
        for (long j = (kfull ? tile : k) >> 1; j > 0; j >>= 1) {
            long t = threadIdx.x;
            long i = 2 * t - (t & (j - 1));   /* the lower index of pair t */
            bool up = ((base + i) & k) == 0;
            cmp_swap(&sh[i], &sh[i + j], up);
            __syncthreads();
        }
    }
    for (long t = threadIdx.x; t < tile; t += blockDim.x)
        keys[base + t] = sh[t];
}

/* One global stage (k, j) with j >= tile: one thread per pair. */
static __global__ void bitonic_global_kernel(uint64_t *keys, long npad, long k, long j)
{
    long t = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= npad / 2)
        return;
    long i = 2 * t - (t & (j - 1));
    cmp_swap(&keys[i], &keys[i + j], (i & k) == 0);
}

static void bitonic_sort(uint64_t *keys, long npad)
{
    long tile = npad < (long)BITONIC_TILE ? npad : (long)BITONIC_TILE;
    unsigned blocks = (unsigned)(npad / tile), threads = (unsigned)(tile / 2);
    GC_LAUNCH(bitonic_shared_kernel, blocks, threads, 0, keys, tile, 0L);
    for (long k = 2 * tile; k <= npad; k <<= 1) {
        for (long j = k >> 1; j >= tile; j >>= 1)
            GC_LAUNCH(bitonic_global_kernel, grid_for(npad / 2, 256), 256, 0, keys, npad, k, j);
        GC_LAUNCH(bitonic_shared_kernel, blocks, threads, 0, keys, tile, k);
    }
}

/* grid (n, ceil(C/(256 W))): block s sums the run of equal tokens starting
 * at sorted key s (if one starts there) for 256 x W columns: dtable[tok] +=
 * sum. W: the columns of one 16-byte vector of dout (C a multiple, dout and
 * dtable aligned), or 1. */
template <class TD, class TG, int W>
__global__ void embedding_bwd_runs_kernel(TD *dtable, const TG *dout, const uint64_t *keys, long n, long C)
{
    long s = blockIdx.x, c = ((long)blockIdx.y * blockDim.x + threadIdx.x) * W;
    uint64_t key = keys[s];
    if (key == UINT64_MAX || (s > 0 && (keys[s - 1] >> 32) == (key >> 32)) || c >= C)
        return;
    uint64_t tok = key >> 32;
    float sum[W], x[W];
    for (int k = 0; k < W; k++)
        sum[k] = 0.0f;
    for (long j = s; j < n && (keys[j] >> 32) == tok && keys[j] != UINT64_MAX; j++) {
        gc_vload<W>(x, dout + (long)(keys[j] & 0xffffffffu) * C + c);
        for (int k = 0; k < W; k++)
            sum[k] += x[k];
    }
    TD *o = dtable + (long)tok * C + c;
    gc_vload<W>(x, o);
    for (int k = 0; k < W; k++)
        x[k] += sum[k];
    gc_vstore<W>(o, x);
}

/* Fallback without workspace, O(n^2): block i owns token idx[i] if i is its
 * first occurrence and sums all its occurrences in order. grid (n, ceil(C/256)). */
template <class TD, class TG>
__global__ void embedding_bwd_scan_kernel(TD *dtable, const TG *dout, const int32_t *idx, long n, long rows, long C)
{
    long i = blockIdx.x, c = (long)blockIdx.y * blockDim.x + threadIdx.x;
    int32_t tok = idx[i];
    if (tok < 0 || tok >= rows) {
        if (threadIdx.x == 0 && blockIdx.y == 0)
            raise_error(1, tok, rows, i);
        return;
    }
    int seen = 0;
    for (long j = threadIdx.x; j < i; j += blockDim.x)
        seen |= idx[j] == tok;
    if (__syncthreads_or(seen) || c >= C)
        return;
    float sum = 0.0f;
    for (long j = i; j < n; j++)
        if (idx[j] == tok)
            sum += to_f(dout[j * C + c]);
    put(dtable + (long)tok * C + c, sum, 1);
}

/* dtable (rows, C) (+)= scatter of dout (n, C) by idx (n) */
template <class TD, class TG>
static void embedding_bwd(TD *dtable, const TG *dout, const int32_t *idx, long n, long rows, long C, int acc)
{
    if (rows <= 0 || C <= 0)
        return;
    if (!(acc & 1))
        GC_CUDA_CHECK(cudaMemsetAsync(dtable, 0, (size_t)rows * C * sizeof(TD), gc_stream));
    if (n <= 0)
        return;
    if (n > 0x7fffffffL) {
        fprintf(stderr, "%s:%d: gc_embedding_bwd: %ld indices is too many\n", __FILE__, __LINE__, n);
        exit(1);
    }
    long npad = 1;
    while (npad < n)
        npad <<= 1;
    if (npad < 2)
        npad = 2;
    dim3 grid((unsigned)n, ceil_div(C, 256));
    if (grid.y > 65535) {
        fprintf(stderr, "%s:%d: gc_embedding_bwd: C = %ld is too wide\n", __FILE__, __LINE__, C);
        exit(1);
    }
    if ((size_t)npad * sizeof(uint64_t) <= gc_ws_bytes) {
        uint64_t *keys = (uint64_t *)gc_ws;
        GC_LAUNCH(embed_keys_kernel, grid_for(npad, 256), 256, 0, keys, idx, n, npad, rows);
        bitonic_sort(keys, npad);
        const int V = VecN<TG>::N;
        if (C % V == 0 && al16(dout) && al16(dtable))
            GC_LAUNCH((embedding_bwd_runs_kernel<TD, TG, V>), dim3((unsigned)n, ceil_div(C, 256L * V)), 256, 0,
                      dtable, dout, keys, n, C);
        else
            GC_LAUNCH((embedding_bwd_runs_kernel<TD, TG, 1>), grid, 256, 0, dtable, dout, keys, n, C);
    } else {
        GC_LAUNCH((embedding_bwd_scan_kernel<TD, TG>), grid, 256, 0, dtable, dout, idx, n, rows, C);
    }
}

void gc_embedding_bwd(gc_real *dtable, const gc_real *dout, const int32_t *idx, long n, long rows, long C, int acc)
{
    embedding_bwd(dtable, dout, idx, n, rows, C, acc);
}

void gc_embedding_bwd_bf16(float *dtable, const gc_bf16 *dout, const int32_t *idx, long n, long rows, long C,
                           int acc)
{
    embedding_bwd(dtable, dout, idx, n, rows, C, acc);
}

/* ---------------------------------------------------------------- layernorm */

enum { ROW_WARPS = 8 };   /* rows (warps) per block of the warp-per-row kernels */

/* out (N, C) = (x - mean) * rstd * w + b; mean, rstd (N); one warp per row.
 * With ra (fuse_layernorm.c): first xs = ra + rb, and x is xs (each lane
 * reads back the elements it wrote). */
template <class T>
__global__ void layernorm_fwd_kernel(T *out, float *mean, float *rstd, const T *x, const T *w, const T *b,
                                     long N, long C, float eps, T *xs, const T *ra, const T *rb)
{
    long row = (long)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N)
        return;   /* the whole warp */
    const T *xr = x + row * C;
    T *o = out + row * C;
    const int V = VecN<T>::N;   /* 16-byte vectors over [0, ve), then one by one */
    long ve = vec_end<T>(C, al16(xr) && al16(o) && al16(w) && al16(b) &&
                                (!ra || (al16(ra + row * C) && al16(rb + row * C) && al16(xs + row * C))));
    if (ra) {
        const T *a = ra + row * C, *bb = rb + row * C;
        T *xw = xs + row * C;
        for (long c = (long)lane * V; c < ve; c += 32L * V) {
            VecN<T> av = *(const VecN<T> *)(a + c), bv = *(const VecN<T> *)(bb + c), sv;
#pragma unroll
            for (int k = 0; k < V; k++)
                store(&sv.v[k], to_f(av.v[k]) + to_f(bv.v[k]));
            *(VecN<T> *)(xw + c) = sv;
        }
        for (long c = ve + lane; c < C; c += 32)
            store(xw + c, to_f(a[c]) + to_f(bb[c]));
        __syncwarp();
        xr = xw;
    }
    float s = 0.0f;
    for (long c = (long)lane * V; c < ve; c += 32L * V) {
        VecN<T> xv = *(const VecN<T> *)(xr + c);
#pragma unroll
        for (int k = 0; k < V; k++)
            s += to_f(xv.v[k]);
    }
    for (long c = ve + lane; c < C; c += 32)
        s += to_f(xr[c]);
    float m = warp_sum(s) / (float)C;
    float v = 0.0f;
    for (long c = (long)lane * V; c < ve; c += 32L * V) {
        VecN<T> xv = *(const VecN<T> *)(xr + c);
#pragma unroll
        for (int k = 0; k < V; k++) {
            float d = to_f(xv.v[k]) - m;
            v += d * d;
        }
    }
    for (long c = ve + lane; c < C; c += 32) {
        float d = to_f(xr[c]) - m;
        v += d * d;
    }
    float rs = 1.0f / sqrtf(warp_sum(v) / (float)C + eps);
    for (long c = (long)lane * V; c < ve; c += 32L * V) {
        VecN<T> xv = *(const VecN<T> *)(xr + c), wv = *(const VecN<T> *)(w + c), bv = *(const VecN<T> *)(b + c), ov;
#pragma unroll
        for (int k = 0; k < V; k++)
            store(&ov.v[k], (to_f(xv.v[k]) - m) * rs * to_f(wv.v[k]) + to_f(bv.v[k]));
        *(VecN<T> *)(o + c) = ov;
    }
    for (long c = ve + lane; c < C; c += 32)
        store(o + c, (to_f(xr[c]) - m) * rs * to_f(w[c]) + to_f(b[c]));
    if (lane == 0) {
        if (mean)
            mean[row] = m;
        if (rstd)
            rstd[row] = rs;
    }
}

template <class T>
static void layernorm_fwd(T *out, float *mean, float *rstd, const T *x, const T *w, const T *b, long N, long C,
                          float eps)
{
    if (N <= 0 || C <= 0)
        return;
    GC_LAUNCH(layernorm_fwd_kernel<T>, grid_for(N, ROW_WARPS), ROW_WARPS * 32, 0, out, mean, rstd, x, w, b, N, C,
              eps, (T *)NULL, (const T *)NULL, (const T *)NULL);
}

/* x = ra + rb, then the layernorm of x (fuse_layernorm.c) */
template <class T>
static void add_layernorm_fwd(T *x, T *out, float *mean, float *rstd, const T *ra, const T *rb, const T *w,
                              const T *b, long N, long C, float eps)
{
    if (N <= 0 || C <= 0)
        return;
    GC_LAUNCH(layernorm_fwd_kernel<T>, grid_for(N, ROW_WARPS), ROW_WARPS * 32, 0, out, mean, rstd, (const T *)x, w, b,
              N, C, eps, x, ra, rb);
}

void gc_add_layernorm_fwd(gc_real *x, gc_real *out, gc_real *mean, gc_real *rstd, const gc_real *ra,
                          const gc_real *rb, const gc_real *w, const gc_real *b, long N, long C, float eps)
{
    add_layernorm_fwd(x, out, mean, rstd, ra, rb, w, b, N, C, eps);
}

void gc_add_layernorm_fwd_bf16(gc_bf16 *x, gc_bf16 *out, float *mean, float *rstd, const gc_bf16 *ra,
                               const gc_bf16 *rb, const gc_bf16 *w, const gc_bf16 *b, long N, long C, float eps)
{
    add_layernorm_fwd(x, out, mean, rstd, ra, rb, w, b, N, C, eps);
}

void gc_layernorm_fwd(gc_real *out, gc_real *mean, gc_real *rstd, const gc_real *x, const gc_real *w,
                      const gc_real *b, long N, long C, float eps)
{
    layernorm_fwd(out, mean, rstd, x, w, b, N, C, eps);
}

void gc_layernorm_fwd_bf16(gc_bf16 *out, float *mean, float *rstd, const gc_bf16 *x, const gc_bf16 *w,
                           const gc_bf16 *b, long N, long C, float eps)
{
    layernorm_fwd(out, mean, rstd, x, w, b, N, C, eps);
}

/* dx (N, C) (+)= (dout*w - mean(dout*w) - xhat * mean(dout*w*xhat)) * rstd; warp per row.
 * dout*w is rounded once (__fmul_rn: never contracted into an FMA), the same
 * in the sums and in dx, so where dx is 0 in exact arithmetic (C = 1) it is 0
 * here too, not one product's rounding error times rstd (seen on an H200). */
template <class T>
__global__ void layernorm_bwd_dx_kernel(T *dx, const T *dout, const T *x, const T *w, const float *mean,
                                        const float *rstd, long N, long C, int acc)
{
    long row = (long)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N)
        return;
    const T *dr = dout + row * C, *xr = x + row * C;
    T *o = dx + row * C;
    float m = mean[row], rs = rstd[row];
    const int V = VecN<T>::N;   /* 16-byte vectors over [0, ve), then one by one */
    long ve = vec_end<T>(C, al16(dr) && al16(xr) && al16(w) && al16(o));
    float s1 = 0.0f, s2 = 0.0f;
    for (long c = (long)lane * V; c < ve; c += 32L * V) {
        float dv[V], wv[V], xv[V];
        gc_vload<V>(dv, dr + c);
        gc_vload<V>(wv, w + c);
        gc_vload<V>(xv, xr + c);
        for (int k = 0; k < V; k++) {
            float dn = __fmul_rn(dv[k], wv[k]);
            s1 += dn;
            s2 += dn * (xv[k] - m) * rs;
        }
    }
    for (long c = ve + lane; c < C; c += 32) {
        float dn = __fmul_rn(to_f(dr[c]), to_f(w[c]));
        s1 += dn;
        s2 += dn * (to_f(xr[c]) - m) * rs;
    }
    float dn_mean = warp_sum(s1) / (float)C, dn_xhat_mean = warp_sum(s2) / (float)C;
    for (long c = (long)lane * V; c < ve; c += 32L * V) {
        float dv[V], wv[V], xv[V], ov[V] = {0.0f};   /* ov read only when acc */
        gc_vload<V>(dv, dr + c);
        gc_vload<V>(wv, w + c);
        gc_vload<V>(xv, xr + c);
        if (acc)
            gc_vload<V>(ov, o + c);
        for (int k = 0; k < V; k++) {
            float xhat = (xv[k] - m) * rs;
            float g = (__fmul_rn(dv[k], wv[k]) - dn_mean - xhat * dn_xhat_mean) * rs;
            ov[k] = acc ? ov[k] + g : g;
        }
        gc_vstore<V>(o + c, ov);
    }
    for (long c = ve + lane; c < C; c += 32) {
        float xhat = (to_f(xr[c]) - m) * rs;
        float g = (__fmul_rn(to_f(dr[c]), to_f(w[c])) - dn_mean - xhat * dn_xhat_mean) * rs;
        put(o + c, g, acc);
    }
}

template <class T>
static void layernorm_bwd(T *dx, float *dw, float *db, const T *dout, const T *x, const T *w, const float *mean,
                          const float *rstd, long N, long C, int acc)
{
    if (C <= 0)
        return;
    if (dw || db) {   /* before dx: dx may alias dout */
        ColOut o = {{dw, db}, {(acc >> 1) & 1, (acc >> 2) & 1}};
        LayernormDwDbF<T> f = {dout, x, mean, rstd};
        colsum(o, f, N, C);
    }
    if (dx && N > 0)
        GC_LAUNCH(layernorm_bwd_dx_kernel<T>, grid_for(N, ROW_WARPS), ROW_WARPS * 32, 0, dx, dout, x, w, mean,
                  rstd, N, C, acc & 1);
}

void gc_layernorm_bwd(gc_real *dx, gc_real *dw, gc_real *db, const gc_real *dout, const gc_real *x,
                      const gc_real *w, const gc_real *mean, const gc_real *rstd, long N, long C, int acc)
{
    layernorm_bwd(dx, dw, db, dout, x, w, mean, rstd, N, C, acc);
}

void gc_layernorm_bwd_bf16(gc_bf16 *dx, float *dw, float *db, const gc_bf16 *dout, const gc_bf16 *x,
                           const gc_bf16 *w, const float *mean, const float *rstd, long N, long C, int acc)
{
    layernorm_bwd(dx, dw, db, dout, x, w, mean, rstd, N, C, acc);
}

/* ---------------------------------------------------------------- permute */

enum { PERM_MAX = 8 };
struct PermArgs {
    int rank;
    long long shape[PERM_MAX];    /* out shape (merged axes) */
    long long stride[PERM_MAX];   /* in stride of each out axis */
};

/* out[e] (+)= in[offset of e]; I: index type (32-bit when it fits). W > 1:
 * each thread moves the W elements e.. of one 16-byte vector, which are
 * contiguous in the input too (the innermost out axis has stride 1 and a
 * multiple of W elements; both pointers aligned). */
template <class T, class I, int W>
__global__ void permute_kernel(T *out, const T *in, PermArgs p, I n, int acc)
{
    I e = ((I)blockIdx.x * blockDim.x + threadIdx.x) * (I)W;
    if (e >= n)
        return;
    I rest = e, off = 0;
    for (int d = p.rank - 1; d > 0; d--) {
        I s = (I)p.shape[d];
        off += rest % s * (I)p.stride[d];
        rest /= s;
    }
    off += rest * (I)p.stride[0];
    if (W == 1) {
        put(out + e, to_f(in[off]), acc);
        return;
    }
    float x[W], o[W];
    gc_vload<W>(x, in + off);
    if (acc) {
        gc_vload<W>(o, out + e);
        for (int k = 0; k < W; k++)
            x[k] += o[k];
    }
    gc_vstore<W>(out + e, x);
}

/* out = in (shape) with axes permuted: out.shape[i] = shape[perm[i]] */
template <class T> static void permute(T *out, const T *in, int rank, const long *shape, const int *perm, int acc)
{
    long long istride[PERM_MAX], n = 1;
    if (rank < 1 || rank > PERM_MAX) {
        fprintf(stderr, "%s:%d: gc_permute: rank %d outside [1, %d]\n", __FILE__, __LINE__, rank, PERM_MAX);
        exit(1);
    }
    for (int d = rank - 1; d >= 0; d--) {
        istride[d] = n;
        n *= shape[d];
    }
    if (n <= 0)
        return;
    /* drop size-1 axes, merge out axes that are contiguous in the input */
    PermArgs p;
    memset(&p, 0, sizeof p);
    for (int i = 0; i < rank; i++) {
        long long s = shape[perm[i]], st = istride[perm[i]];
        if (s == 1)
            continue;
        if (p.rank > 0 && p.stride[p.rank - 1] == st * s) {
            p.shape[p.rank - 1] *= s;
            p.stride[p.rank - 1] = st;
            continue;
        }
        p.shape[p.rank] = s;
        p.stride[p.rank] = st;
        p.rank++;
    }
    if (p.rank == 0) {
        p.rank = 1;
        p.shape[0] = 1;
        p.stride[0] = 1;
    }
    const int V = VecN<T>::N;
    if (p.stride[p.rank - 1] == 1 && p.shape[p.rank - 1] % V == 0 && al16(out) && al16(in)) {
        unsigned grid = grid_for(n / V, 256);
        if (n <= 0xffffffffLL)
            GC_LAUNCH((permute_kernel<T, uint32_t, V>), grid, 256, 0, out, in, p, (uint32_t)n, acc & 1);
        else
            GC_LAUNCH((permute_kernel<T, uint64_t, V>), grid, 256, 0, out, in, p, (uint64_t)n, acc & 1);
        return;
    }
    unsigned grid = grid_for(n, 256);
    if (n <= 0xffffffffLL)
        GC_LAUNCH((permute_kernel<T, uint32_t, 1>), grid, 256, 0, out, in, p, (uint32_t)n, acc & 1);
    else
        GC_LAUNCH((permute_kernel<T, uint64_t, 1>), grid, 256, 0, out, in, p, (uint64_t)n, acc & 1);
}

void gc_permute(gc_real *out, const gc_real *in, int rank, const long *shape, const int *perm, int acc)
{
    permute(out, in, rank, shape, perm, acc);
}

void gc_permute_bf16(gc_bf16 *out, const gc_bf16 *in, int rank, const long *shape, const int *perm, int acc)
{
    permute(out, in, rank, shape, perm, acc);
}

/* ---------------------------------------------------------------- softmax */

/* out (rows, cols) = softmax(in) row-wise; warp per row; out may equal in */
template <class T> __global__ void softmax_fwd_kernel(T *out, const T *in, long rows, long cols)
{
    long row = (long)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    const T *x = in + row * cols;
    T *o = out + row * cols;
    const int V = VecN<T>::N;   /* 16-byte vectors over [0, ve), then one by one */
    long ve = vec_end<T>(cols, al16(x) && al16(o));
    MaxSum ms = {-INFINITY, 0.0f};
    for (long c = (long)lane * V; c < ve; c += 32L * V) {
        float xv[V];
        gc_vload<V>(xv, x + c);
        for (int k = 0; k < V; k++)
            ms = ms_add(ms, xv[k]);
    }
    for (long c = ve + lane; c < cols; c += 32)
        ms = ms_add(ms, to_f(x[c]));
    ms = warp_maxsum(ms);
    float inv = 1.0f / ms.s;
    for (long c = (long)lane * V; c < ve; c += 32L * V) {
        float xv[V];
        gc_vload<V>(xv, x + c);
        for (int k = 0; k < V; k++)
            xv[k] = expf(xv[k] - ms.m) * inv;
        gc_vstore<V>(o + c, xv);
    }
    for (long c = ve + lane; c < cols; c += 32)
        store(o + c, expf(to_f(x[c]) - ms.m) * inv);   /* a row of -inf only: NaN, as the CPU */
}

template <class T> static void softmax_fwd(T *out, const T *in, long rows, long cols)
{
    if (rows <= 0 || cols <= 0)
        return;
    GC_LAUNCH(softmax_fwd_kernel<T>, grid_for(rows, ROW_WARPS), ROW_WARPS * 32, 0, out, in, rows, cols);
}

void gc_softmax_fwd(gc_real *out, const gc_real *in, long rows, long cols) { softmax_fwd(out, in, rows, cols); }

void gc_softmax_fwd_bf16(gc_bf16 *out, const gc_bf16 *in, long rows, long cols) { softmax_fwd(out, in, rows, cols); }

/* dx (+)= y * (dy - sum(dy * y)); warp per row; dx may equal dy or y */
template <class T> __global__ void softmax_bwd_kernel(T *dx, const T *dy, const T *y, long rows, long cols, int acc)
{
    long row = (long)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    const T *g = dy + row * cols, *p = y + row * cols;
    T *o = dx + row * cols;
    const int V = VecN<T>::N;   /* 16-byte vectors over [0, ve), then one by one */
    long ve = vec_end<T>(cols, al16(g) && al16(p) && al16(o));
    float s = 0.0f;
    for (long c = (long)lane * V; c < ve; c += 32L * V) {
        float gv[V], pv[V];
        gc_vload<V>(gv, g + c);
        gc_vload<V>(pv, p + c);
        for (int k = 0; k < V; k++)
            s += gv[k] * pv[k];
    }
    for (long c = ve + lane; c < cols; c += 32)
        s += to_f(g[c]) * to_f(p[c]);
    s = warp_sum(s);
    for (long c = (long)lane * V; c < ve; c += 32L * V) {
        float gv[V], pv[V], ov[V] = {0.0f};   /* ov read only when acc */
        gc_vload<V>(gv, g + c);   /* read both before o[c..] is written */
        gc_vload<V>(pv, p + c);
        if (acc)
            gc_vload<V>(ov, o + c);
        for (int k = 0; k < V; k++) {
            float v = pv[k] * (gv[k] - s);
            ov[k] = acc ? ov[k] + v : v;
        }
        gc_vstore<V>(o + c, ov);
    }
    for (long c = ve + lane; c < cols; c += 32) {
        float v = to_f(p[c]) * (to_f(g[c]) - s);   /* read both before o[c] is written */
        put(o + c, v, acc);
    }
}

template <class T> static void softmax_bwd(T *dx, const T *dy, const T *y, long rows, long cols, int acc)
{
    if (rows <= 0 || cols <= 0)
        return;
    GC_LAUNCH(softmax_bwd_kernel<T>, grid_for(rows, ROW_WARPS), ROW_WARPS * 32, 0, dx, dy, y, rows, cols, acc & 1);
}

void gc_softmax_bwd(gc_real *dx, const gc_real *dy, const gc_real *y, long rows, long cols, int acc)
{
    softmax_bwd(dx, dy, y, rows, cols, acc);
}

void gc_softmax_bwd_bf16(gc_bf16 *dx, const gc_bf16 *dy, const gc_bf16 *y, long rows, long cols, int acc)
{
    softmax_bwd(dx, dy, y, rows, cols, acc);
}

/* ---------------------------------------------------------------- causal mask */

/* out (batch, T, T) = in, -inf above the diagonal; out may equal in; nv
 * vectors (element e's row and column from e), then the rest one by one */
template <class T> __global__ void causal_mask_fwd_kernel(T *out, const T *in, long n, long Tn, long nv)
{
    const int V = VecN<T>::N;
    long t = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < nv) {
        float w[V];
        gc_vload<V>(w, in + t * V);
        for (int k = 0; k < V; k++) {
            long e = t * V + k;
            if (e % Tn > e / Tn % Tn)
                w[k] = -INFINITY;
        }
        gc_vstore<V>(out + t * V, w);
        return;
    }
    long e = nv * V + (t - nv);
    if (e >= n)
        return;
    long j = e % Tn, i = e / Tn % Tn;
    store(out + e, j <= i ? to_f(in[e]) : -INFINITY);
}

template <class E> static void causal_mask_fwd(E *out, const E *in, long batch, long T)
{
    long n = batch * T * T;
    if (n <= 0)
        return;
    long nv = vec_count(n, VecN<E>::N, al16(out) && al16(in));
    GC_LAUNCH(causal_mask_fwd_kernel<E>, grid_for(vec_items(n, VecN<E>::N, nv), 256), 256, 0, out, in, n, T, nv);
}

void gc_causal_mask_fwd(gc_real *out, const gc_real *in, long batch, long T) { causal_mask_fwd(out, in, batch, T); }

void gc_causal_mask_fwd_bf16(gc_bf16 *out, const gc_bf16 *in, long batch, long T)
{
    causal_mask_fwd(out, in, batch, T);
}

/* dx (+)= dy below and on the diagonal, (+)0 above; vectors as the forward */
template <class T> __global__ void causal_mask_bwd_kernel(T *dx, const T *dy, long n, long Tn, int acc, long nv)
{
    const int V = VecN<T>::N;
    long t = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < nv) {
        float w[V], o[V];
        gc_vload<V>(w, dy + t * V);
        if (acc)
            gc_vload<V>(o, dx + t * V);
        for (int k = 0; k < V; k++) {
            long e = t * V + k;
            float g = e % Tn <= e / Tn % Tn ? w[k] : 0.0f;
            w[k] = acc ? o[k] + g : g;
        }
        gc_vstore<V>(dx + t * V, w);
        return;
    }
    long e = nv * V + (t - nv);
    if (e >= n)
        return;
    long j = e % Tn, i = e / Tn % Tn;
    put(dx + e, j <= i ? to_f(dy[e]) : 0.0f, acc);
}

template <class E> static void causal_mask_bwd(E *dx, const E *dy, long batch, long T, int acc)
{
    long n = batch * T * T;
    if (n <= 0)
        return;
    long nv = vec_count(n, VecN<E>::N, al16(dx) && al16(dy));
    GC_LAUNCH(causal_mask_bwd_kernel<E>, grid_for(vec_items(n, VecN<E>::N, nv), 256), 256, 0, dx, dy, n, T,
              acc & 1, nv);
}

void gc_causal_mask_bwd(gc_real *dx, const gc_real *dy, long batch, long T, int acc)
{
    causal_mask_bwd(dx, dy, batch, T, acc);
}

void gc_causal_mask_bwd_bf16(gc_bf16 *dx, const gc_bf16 *dy, long batch, long T, int acc)
{
    causal_mask_bwd(dx, dy, batch, T, acc);
}

/* ---------------------------------------------------------------- cross-entropy */

enum { CE_THREADS = 1024, CE_BLOCKS = 1024 };

/* Per-block partial sums of the forward; a fixed number of blocks, so the
 * summation order depends only on n. */
static __device__ float gc_ce_partial[CE_BLOCKS];

/* Whether target t of row r is in [0, V); if not, thread 0 of the block
 * raises the error. Every thread of the block gets the same answer. */
static __device__ bool target_ok(int32_t t, long V, long r)
{
    if (t >= 0 && t < V)
        return true;
    if (threadIdx.x == 0)
        raise_error(2, t, V, r);
    return false;
}

/* grid G <= CE_BLOCKS: block b sums the losses of rows b, b+G, ... in order */
template <class T>
__global__ void crossentropy_fwd_kernel(const T *logits, const int32_t *targets, long n, long Vp, long V)
{
    float total = 0.0f;
    for (long r = blockIdx.x; r < n; r += gridDim.x) {
        const T *x = logits + r * Vp;
        MaxSum ms = block_row_maxsum(x, V);
        int32_t t = targets[r];
        if (!target_ok(t, V, r))
            continue;   /* uniform across the block */
        total += ms.m + logf(ms.s) - to_f(x[t]);
    }
    if (threadIdx.x == 0)
        gc_ce_partial[blockIdx.x] = total;
}

/* loss[0] = sum(partial[0..G)) / n; one block */
static __global__ void crossentropy_final_kernel(float *loss, long G, long n)
{
    float s = 0.0f;
    for (long i = threadIdx.x; i < G; i += blockDim.x)
        s += gc_ce_partial[i];
    s = block_sum(s);
    if (threadIdx.x == 0)
        loss[0] = s / (float)n;
}

template <class T>
static void crossentropy_fwd(float *loss, const T *logits, const int32_t *targets, long n, long Vp, long V)
{
    if (n <= 0) {
        fill(loss, 1, 0.0f);
        return;
    }
    long G = n < (long)CE_BLOCKS ? n : (long)CE_BLOCKS;
    GC_LAUNCH(crossentropy_fwd_kernel<T>, (unsigned)G, CE_THREADS, 0, logits, targets, n, Vp, V);
    GC_LAUNCH(crossentropy_final_kernel, 1, CE_THREADS, 0, loss, G, n);
}

void gc_crossentropy_fwd(gc_real *loss, const gc_real *logits, const int32_t *targets, long n, long Vp, long V)
{
    crossentropy_fwd(loss, logits, targets, n, Vp, V);
}

void gc_crossentropy_fwd_bf16(float *loss, const gc_bf16 *logits, const int32_t *targets, long n, long Vp, long V)
{
    crossentropy_fwd(loss, logits, targets, n, Vp, V);
}

/* dlogits (n, Vp) (+)= dloss/n * (softmax(logits) - onehot(target)), 0 in the
 * padding; block per row; dlogits may equal logits */
template <class T>
__global__ void crossentropy_bwd_kernel(T *dlogits, const float *dloss, const T *logits, const int32_t *targets,
                                        long n, long Vp, long V, int acc)
{
    long r = blockIdx.x;
    const T *x = logits + r * Vp;
    MaxSum ms = block_row_maxsum(x, V);
    int32_t t = targets[r];
    if (!target_ok(t, V, r))
        return;
    float scale = dloss[0] / (float)n, inv = 1.0f / ms.s;
    T *o = dlogits + r * Vp;
    const int W = VecN<T>::N;   /* 16-byte vectors over [0, ve), then one by one */
    long ve = vec_end<T>(Vp, al16(x) && al16(o));
    for (long c = (long)threadIdx.x * W; c < ve; c += (long)blockDim.x * W) {
        float xv[W], ov[W] = {0.0f};   /* ov read only when acc (and GCC cannot see it) */
        gc_vload<W>(xv, x + c);
        if (acc)
            gc_vload<W>(ov, o + c);
        for (int k = 0; k < W; k++) {
            float g = 0.0f;
            if (c + k < V)
                g = scale * (expf(xv[k] - ms.m) * inv - (c + k == t ? 1.0f : 0.0f));
            ov[k] = acc ? ov[k] + g : g;
        }
        gc_vstore<W>(o + c, ov);   /* x[c..] was read above: in place is safe */
    }
    for (long c = ve + threadIdx.x; c < Vp; c += blockDim.x) {
        float g = 0.0f;
        if (c < V)
            g = scale * (expf(to_f(x[c]) - ms.m) * inv - (c == t ? 1.0f : 0.0f));
        put(o + c, g, acc);   /* x[c] was read above: in place is safe */
    }
}

template <class T>
static void crossentropy_bwd(T *dlogits, const float *dloss, const T *logits, const int32_t *targets, long n, long Vp,
                             long V, int acc)
{
    if (n <= 0 || Vp <= 0)
        return;
    GC_LAUNCH(crossentropy_bwd_kernel<T>, grid_for(n, 1), CE_THREADS, 0, dlogits, dloss, logits, targets, n, Vp, V,
              acc & 1);
}

void gc_crossentropy_bwd(gc_real *dlogits, const gc_real *dloss, const gc_real *logits, const int32_t *targets,
                         long n, long Vp, long V, int acc)
{
    crossentropy_bwd(dlogits, dloss, logits, targets, n, Vp, V, acc);
}

void gc_crossentropy_bwd_bf16(gc_bf16 *dlogits, const float *dloss, const gc_bf16 *logits, const int32_t *targets,
                              long n, long Vp, long V, int acc)
{
    crossentropy_bwd(dlogits, dloss, logits, targets, n, Vp, V, acc);
}

/* ---------------------------------------------------------------- fill, adamw, poison */

/* x (n) = value: nv 16-byte vectors, then the rest one by one */
template <class T> __global__ void fill_kernel(T *x, long n, long nv, float value)
{
    const int V = VecN<T>::N;
    long t = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < nv) {
        float w[V];
        for (int k = 0; k < V; k++)
            w[k] = value;
        gc_vstore<V>(x + t * V, w);
    } else if (nv * V + (t - nv) < n) {
        store(x + nv * V + (t - nv), value);
    }
}

template <class T> static void fill(T *x, long n, float value)
{
    if (n <= 0)
        return;
    long nv = vec_count(n, VecN<T>::N, al16(x));
    GC_LAUNCH(fill_kernel<T>, grid_for(vec_items(n, VecN<T>::N, nv), 256), 256, 0, x, n, nv, value);
}

void gc_fill(gc_real *x, long n, float value) { fill(x, n, value); }

void gc_fill_bf16(gc_bf16 *x, long n, float value) { fill(x, n, value); }

/* out = in, converted (to bf16: round to nearest even); nv vectors of 8
 * (one 16-byte bf16 vector, two fp32 ones), then the rest one by one */
enum { CAST_V = 8 };
template <class TO, class TI> __global__ void cast_kernel(TO *out, const TI *in, long n, long nv)
{
    long t = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < nv) {
        float w[CAST_V];
        gc_vload<CAST_V>(w, in + t * CAST_V);
        gc_vstore<CAST_V>(out + t * CAST_V, w);
    } else if (nv * CAST_V + (t - nv) < n) {
        long i = nv * CAST_V + (t - nv);
        store(out + i, to_f(in[i]));
    }
}

template <class TO, class TI> static void cast(TO *out, const TI *in, long n)
{
    if (n <= 0)
        return;
    long nv = vec_count(n, CAST_V, al16(out) && al16(in));
    GC_LAUNCH((cast_kernel<TO, TI>), grid_for(vec_items(n, CAST_V, nv), 256), 256, 0, out, in, n, nv);
}

void gc_cast_bf16(gc_bf16 *out, const float *in, long n) { cast(out, in, n); }

void gc_cast_f32(float *out, const gc_bf16 *in, long n) { cast(out, in, n); }

/* llm.c's AdamW over up to ADAMW_MAX tensors in one launch (a layer's
 * update): their work items laid end to end, start[k] = the items before
 * tensor k; a thread finds its tensor by scanning start[]. Tensor k's items:
 * nv[k] vectors of ADAMW_V elements (p, g, m, v by 16-byte accesses, the
 * bf16 copy by one; 0 when a pointer is misaligned), then its remaining
 * elements one each. bc1 = 1 - beta1^t, bc2 = 1 - beta2^t; pcopy (may be
 * NULL): the updated parameter rounded to bf16. */
enum { ADAMW_MAX = 16, ADAMW_V = 8 };
struct AdamwArgs {
    int n;
    long long start[ADAMW_MAX + 1];
    long long nv[ADAMW_MAX];
    gc_adamw_tensor u[ADAMW_MAX];
};

/* elements i .. i+W-1 of one tensor */
template <int W>
__device__ __forceinline__ void adamw_elems(const gc_adamw_tensor &u, long i, float lr, float beta1, float beta2,
                                            float bc1, float bc2, float eps)
{
    float g[W], m[W], v[W], p[W];
    gc_vload<W>(g, u.g + i);
    gc_vload<W>(m, u.m + i);
    gc_vload<W>(v, u.v + i);
    gc_vload<W>(p, u.p + i);
    for (int k = 0; k < W; k++) {
        m[k] = beta1 * m[k] + (1.0f - beta1) * g[k];
        v[k] = beta2 * v[k] + (1.0f - beta2) * g[k] * g[k];
        float mhat = m[k] / bc1, vhat = v[k] / bc2;
        p[k] -= lr * (mhat / (sqrtf(vhat) + eps) + u.wd * p[k]);
    }
    gc_vstore<W>(u.m + i, m);
    gc_vstore<W>(u.v + i, v);
    gc_vstore<W>(u.p + i, p);
    if (u.pcopy)
        gc_vstore<W>((gc_bf16 *)u.pcopy + i, p);
}

static __global__ void adamw_multi_kernel(AdamwArgs a, float lr, float beta1, float beta2, float bc1, float bc2,
                                          float eps)
{
    long long total = a.start[a.n], stride = (long long)gridDim.x * blockDim.x;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        int k = 0;
        while (e >= a.start[k + 1])
            k++;
        long long t = e - a.start[k], nv = a.nv[k];
        if (t < nv)
            adamw_elems<ADAMW_V>(a.u[k], (long)(t * ADAMW_V), lr, beta1, beta2, bc1, bc2, eps);
        else
            adamw_elems<1>(a.u[k], (long)(nv * ADAMW_V + (t - nv)), lr, beta1, beta2, bc1, bc2, eps);
    }
}

void gc_adamw_multi(const gc_adamw_tensor *u, int n, float lr, float beta1, float beta2, float eps, int t)
{
    float bc1 = gc_adamw_bias(beta1, t), bc2 = gc_adamw_bias(beta2, t);
    for (int k = 0; k < n;) {
        AdamwArgs a;
        memset(&a, 0, sizeof a);
        for (; k < n && a.n < ADAMW_MAX; k++) {
            if (u[k].n <= 0)
                continue;
            a.u[a.n] = u[k];
            bool aligned = al16(u[k].p) && al16(u[k].g) && al16(u[k].m) && al16(u[k].v) &&
                           (!u[k].pcopy || al16(u[k].pcopy));
            a.nv[a.n] = vec_count(u[k].n, ADAMW_V, aligned);
            a.start[a.n + 1] = a.start[a.n] + vec_items(u[k].n, ADAMW_V, a.nv[a.n]);
            a.n++;
        }
        if (a.n == 0)
            break;
        long grid = (long)((a.start[a.n] + 255) / 256);
        if (grid > 65536L * 16)   /* grid-stride beyond this */
            grid = 65536L * 16;
        GC_LAUNCH(adamw_multi_kernel, (unsigned)grid, 256, 0, a, lr, beta1, beta2, bc1, bc2, eps);
    }
}

void gc_adamw_bf16(float *p, gc_bf16 *pcopy, const float *g, float *m, float *v, long n, float lr, float beta1,
                   float beta2, float eps, float wd, int t)
{
    gc_adamw_tensor u = {p, pcopy, g, m, v, n, wd};
    gc_adamw_multi(&u, 1, lr, beta1, beta2, eps, t);
}

void gc_adamw(float *p, const float *g, float *m, float *v, long n, float lr, float beta1, float beta2, float eps,
              float wd, int t)
{
    gc_adamw_bf16(p, NULL, g, m, v, n, lr, beta1, beta2, eps, wd, t);
}

/* 0xff bytes: a NaN in f32 and in bf16 */
void gc_poison(void *p, size_t bytes)
{
    if (bytes)
        GC_CUDA_CHECK(cudaMemsetAsync(p, 0xff, bytes, gc_stream));
}

/* fused attention: its own file, built as part of this one (shares the helpers above) */
#include "attention_cuda.cu"
/* fused classifier + cross-entropy: likewise */
#include "classifier_cuda.cu"
/* rmsnorm and rope (issue 22): likewise */
#include "norm_rope_cuda.cu"
/* concat, narrow, repeat, mean (issue 22): likewise */
#include "shape_cuda.cu"
/* causal attention with grouped k/v heads on separate q, k, v (issue 22): likewise */
#include "attention_gqa_cuda.cu"
