/* cublasLt.h (gcemu shim) — the subset of cuBLASLt that kernels_cuda.cu
 * calls, computed on the CPU with cblas_sgemm. It keeps cuBLASLt's semantics
 * (column-major layouts, op on A/B, strided batches, D = alpha op(A) op(B) +
 * beta C; fp32 or bf16 A/B, fp32 or bf16 C/D, fp32 compute: bf16 operands
 * are widened, the product rounded once; CUBLAS_COMPUTE_32F_FAST_TF32 rounds
 * fp32 operands to TF32 first, as the tensor cores do) and checks what the real library
 * would reject: unsupported type mixes, mismatched
 * dimensions, ld < rows, pointers less aligned than the preference promises,
 * a workspace larger than the preference allows, a bias epilogue whose bias
 * is under 16-byte aligned or less aligned at the call than at the heuristic,
 * C and D in place with different layouts, a bias (gradient) type other than
 * D's. */
#ifndef GCEMU_CUBLASLT_H
#define GCEMU_CUBLASLT_H

#include <cblas.h>

#include "cuda_bf16.h"
#include "cuda_runtime.h"

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;

typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;

typedef enum {
    CUBLAS_COMPUTE_32F = 68,
    CUBLAS_COMPUTE_32F_FAST_16BF = 75,
    CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
} cublasComputeType_t;

typedef enum {
    CUBLASLT_MATMUL_DESC_TRANSA = 3,
    CUBLASLT_MATMUL_DESC_TRANSB = 4,
    CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,
    CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,
} cublasLtMatmulDescAttributes_t;

typedef enum {
    CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,
    CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6,
} cublasLtMatrixLayoutAttribute_t;

typedef enum {
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
} cublasLtMatmulPreferenceAttributes_t;

struct gcemu_lt_handle { int dummy; };
/* the epilogues the runtime uses: BIAS: D = alpha op(A) op(B) + beta C + bias (per row of D);
 * GELU_AUX_BIAS: that X into aux (D's type, ld aux_ld), D = gelu(X); DGELU: D = X * gelu'(aux)
 * (X without bias); DGELU_BGRAD: DGELU, and the bias gradient written (overwritten, never
 * accumulated) to the BIAS_POINTER vector: one element per row of D, the sum over D's
 * columns of the DGELU'd D (before rounding to D's type), in D's type (cuBLASLt's documentation
 * of BIAS_POINTER: "Bias gradient vector elements are the same type as the output elements";
 * of BIAS_DATA_TYPE: D's type unless set, other types documented for IMMA and FP8 kernels
 * only, none of which this shim has: here any type other than D's is refused). The GELU is
 * the tanh approximation. */
typedef enum {
    CUBLASLT_EPILOGUE_DEFAULT = 1,
    CUBLASLT_EPILOGUE_BIAS = 4,
    CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164,
    CUBLASLT_EPILOGUE_DGELU = 192,
    CUBLASLT_EPILOGUE_DGELU_BGRAD = 208,
} cublasLtEpilogue_t;
struct gcemu_lt_desc { cublasComputeType_t compute; cudaDataType_t scale; int32_t opa, opb; int32_t epilogue;
                       const void *bias; void *aux; int64_t aux_ld; int32_t bias_type; };
struct gcemu_lt_layout { cudaDataType_t type; uint64_t rows, cols; int64_t ld; int32_t batch; int64_t stride; };
struct gcemu_lt_pref { uint64_t max_ws; uint32_t align[4]; };

typedef gcemu_lt_handle *cublasLtHandle_t;
typedef gcemu_lt_desc *cublasLtMatmulDesc_t;
typedef gcemu_lt_layout *cublasLtMatrixLayout_t;
typedef gcemu_lt_pref *cublasLtMatmulPreference_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;
typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;

inline long gcemu_lt_matmuls = 0;   /* tests: how many cublasLtMatmul calls */
inline long gcemu_lt_bgrads = 0;    /* tests: how many of them with the DGELU_BGRAD epilogue */
inline bool gcemu_lt_no_algo = false;   /* tests: the heuristic finds nothing (NOT_SUPPORTED) */
/* tests: what the heuristic answers for a GELU epilogue (one with aux) when
 * not SUCCESS, e.g. INVALID_VALUE as some cuBLASLt versions do */
inline cublasStatus_t gcemu_lt_gelu_status = CUBLAS_STATUS_SUCCESS;

/* Largest power of two <= 256 dividing the address (NULL: 256). */
inline uint32_t gcemu_lt_align(const void *p)
{
    uint32_t a = 256;
    while (a > 1 && (uintptr_t)p % a)
        a >>= 1;
    return a;
}

/* With $GCEMU_COUNTS set, a program prints at exit what a GPU would have
 * launched: "gcemu: launches N" (kernels + cuBLASLt matmuls + memsets), so a
 * test can compare it with gcompile's kernel_launches_per_step, and how
 * often the host waited for the device ("syncs N", cuda_runtime.h). */
inline void gcemu_print_counts()
{
    fprintf(stderr, "gcemu: launches %ld (kernels %ld, matmuls %ld, memsets %ld; dgelu_bgrad epilogues %ld) syncs %ld\n",
            gcemu_launch_count() + gcemu_lt_matmuls + gcemu_memsets, gcemu_launch_count(), gcemu_lt_matmuls,
            gcemu_memsets, gcemu_lt_bgrads, gcemu_syncs);
}
inline struct gcemu_counts_at_exit {
    gcemu_counts_at_exit()
    {
        if (getenv("GCEMU_COUNTS"))
            atexit(gcemu_print_counts);
    }
} gcemu_counts_at_exit_;

inline const char *cublasLtGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_INVALID_VALUE: return "an unsupported value or parameter was passed to the function";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    default: return "cuBLAS error";
    }
}

inline cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) { *h = new gcemu_lt_handle(); return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }

inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t c, cudaDataType_t s)
{
    *d = new gcemu_lt_desc{c, s, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, 0, -1};
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { delete d; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                                     const void *buf, size_t n)
{
    if (a == CUBLASLT_MATMUL_DESC_BIAS_POINTER && n == sizeof(void *)) {
        memcpy(&d->bias, buf, sizeof(void *));
        return CUBLAS_STATUS_SUCCESS;
    }
    if (a == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER && n == sizeof(void *)) {
        memcpy(&d->aux, buf, sizeof(void *));
        return CUBLAS_STATUS_SUCCESS;
    }
    if (a == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD)   /* int64_t */
        return n == sizeof(int64_t) ? (memcpy(&d->aux_ld, buf, 8), CUBLAS_STATUS_SUCCESS) : CUBLAS_STATUS_INVALID_VALUE;
    if (n != sizeof(int32_t))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (a == CUBLASLT_MATMUL_DESC_EPILOGUE) {
        memcpy(&d->epilogue, buf, 4);
        return d->epilogue == CUBLASLT_EPILOGUE_DEFAULT || d->epilogue == CUBLASLT_EPILOGUE_BIAS ||
                       d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || d->epilogue == CUBLASLT_EPILOGUE_DGELU ||
                       d->epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD
                   ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (a == CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE)   /* cudaDataType_t as int32_t; -1: D's type */
        memcpy(&d->bias_type, buf, 4);
    else if (a == CUBLASLT_MATMUL_DESC_TRANSA)
        memcpy(&d->opa, buf, 4);
    else if (a == CUBLASLT_MATMUL_DESC_TRANSB)
        memcpy(&d->opb, buf, 4);
    else
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t rows,
                                                 uint64_t cols, int64_t ld)
{
    if (ld < (int64_t)rows || ld < 1)
        return CUBLAS_STATUS_INVALID_VALUE;
    *l = new gcemu_lt_layout{t, rows, cols, ld, 1, 0};
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { delete l; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a,
                                                       const void *buf, size_t n)
{
    if (a == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT && n == 4)
        memcpy(&l->batch, buf, 4);
    else if (a == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET && n == 8)
        memcpy(&l->stride, buf, 8);
    else
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
    *p = new gcemu_lt_pref{0, {256, 256, 256, 256}};
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { delete p; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                           cublasLtMatmulPreferenceAttributes_t a,
                                                           const void *buf, size_t n)
{
    if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES && n == 8)
        memcpy(&p->max_ws, buf, 8);
    else if (a >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES && n == 4)
        memcpy(&p->align[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, 4);
    else
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

/* the epilogue reads a bias vector (BIAS, GELU_AUX_BIAS) or writes one (DGELU_BGRAD: the bias
 * gradient), at CUBLASLT_MATMUL_DESC_BIAS_POINTER, whose alignment the heuristic infers */
inline bool gcemu_lt_has_bias(const gcemu_lt_desc *d)
{
    return d->epilogue == CUBLASLT_EPILOGUE_BIAS || d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
           d->epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}
/* the epilogue writes (GELU_AUX_BIAS) or reads (DGELU, DGELU_BGRAD) the aux matrix */
inline bool gcemu_lt_has_aux(const gcemu_lt_desc *d)
{
    return d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || d->epilogue == CUBLASLT_EPILOGUE_DGELU ||
           d->epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}

/* op(X) dims of a layout */
inline void gcemu_lt_opdims(const gcemu_lt_layout *l, int op, uint64_t *r, uint64_t *c)
{
    *r = op == CUBLAS_OP_N ? l->rows : l->cols;
    *c = op == CUBLAS_OP_N ? l->cols : l->rows;
}

inline cublasStatus_t gcemu_lt_check(cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                                     cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D)
{
    uint64_t ar, ac, br, bc;
    gcemu_lt_opdims(A, d->opa, &ar, &ac);
    gcemu_lt_opdims(B, d->opb, &br, &bc);
    if (ac != br || ar != D->rows || bc != D->cols || C->rows != D->rows || C->cols != D->cols)
        return CUBLAS_STATUS_INVALID_VALUE;
    bool ab32 = A->type == CUDA_R_32F && B->type == CUDA_R_32F, ab16 = A->type == CUDA_R_16BF && B->type == CUDA_R_16BF;
    if (!(ab32 || ab16) || C->type != D->type || (D->type != CUDA_R_32F && !(ab16 && D->type == CUDA_R_16BF)) ||
        d->scale != CUDA_R_32F || (d->compute == CUBLAS_COMPUTE_32F_FAST_TF32 && !ab32))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    /* the bias (gradient) vector has D's type: another one only for FP8 and integer
       kernels, which this shim has not ("cublasLtMatmul() returns INVALID_VALUE") */
    if (d->bias_type != -1 && d->bias_type != (int32_t)D->type)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (A->batch != D->batch || B->batch != D->batch || C->batch != D->batch || D->batch < 1)
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                                     cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                                                     cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D,
                                                     cublasLtMatmulPreference_t p, int requested,
                                                     cublasLtMatmulHeuristicResult_t *res, int *nres)
{
    if (!h || requested < 1)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t s = gcemu_lt_check(d, A, B, C, D);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    /* the bias epilogue: the heuristic infers the bias alignment from the
     * pointer (none set: it assumes 256 bytes) and may choose a kernel that
     * needs 16 (the real library then faults on a less aligned bias; here:
     * no algorithm) */
    bool has_bias = gcemu_lt_has_bias(d), has_aux = gcemu_lt_has_aux(d);
    if (has_aux && gcemu_lt_gelu_status != CUBLAS_STATUS_SUCCESS)
        return gcemu_lt_gelu_status;
    if (gcemu_lt_no_algo || (has_bias && gcemu_lt_align(d->bias) < 16))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    /* aux: set, 16-byte aligned, ld a multiple of 8 covering D's rows, one batch (no aux batch stride) */
    if (has_aux && (!d->aux || gcemu_lt_align(d->aux) < 16 || d->aux_ld % 8 || d->aux_ld < (int64_t)D->rows ||
                    D->batch != 1))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    memset(res, 0, sizeof *res);
    res->algo.data[5] = has_bias ? gcemu_lt_align(d->bias) : 0;
    res->algo.data[6] = has_aux ? gcemu_lt_align(d->aux) : 0;
    /* remember the promised alignments in the algo, checked at the call */
    for (int i = 0; i < 4; i++)
        res->algo.data[i] = p->align[i];
    res->algo.data[4] = p->max_ws;
    res->workspaceSize = 0;
    res->state = CUBLAS_STATUS_SUCCESS;
    res->wavesCount = 1.0f;
    *nres = 1;
    return CUBLAS_STATUS_SUCCESS;
}

/* Elements a layout spans (all batches). */
inline size_t gcemu_lt_span(const gcemu_lt_layout *l)
{
    return (size_t)(l->batch - 1) * (size_t)l->stride + (size_t)l->ld * (l->cols - 1) + l->rows;
}

/* fp32 -> TF32 as the tensor cores take it: 10 mantissa bits, round to
 * nearest (ties away from zero); NaN and Inf pass through. */
inline float gcemu_tf32(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u)
        u = (u + 0x1000u) & 0xffffe000u;
    memcpy(&x, &u, 4);
    return x;
}

/* A float copy of a bf16 matrix (or the matrix itself when fp32; rounded to
 * TF32 when tf32). */
inline const float *gcemu_lt_widen(const void *p, const gcemu_lt_layout *l, std::vector<float> &tmp, bool tf32 = false)
{
    if (l->type == CUDA_R_32F && tf32) {
        size_t n = gcemu_lt_span(l);
        tmp.resize(n);
        for (size_t i = 0; i < n; i++)
            tmp[i] = gcemu_tf32(((const float *)p)[i]);
        return tmp.data();
    }
    if (l->type == CUDA_R_32F)
        return (const float *)p;
    size_t n = gcemu_lt_span(l);
    tmp.resize(n);
    for (size_t i = 0; i < n; i++)
        tmp[i] = __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    return tmp.data();
}

inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha,
                                     const void *Aptr, cublasLtMatrixLayout_t A, const void *Bptr,
                                     cublasLtMatrixLayout_t B, const void *beta, const void *Cptr,
                                     cublasLtMatrixLayout_t C, void *Dptr, cublasLtMatrixLayout_t D,
                                     const cublasLtMatmulAlgo_t *algo, void *ws, size_t wsbytes, cudaStream_t)
{
    if (!h || !algo)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t s = gcemu_lt_check(d, A, B, C, D);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    const void *ptrs[4] = {Aptr, Bptr, Cptr, Dptr};
    for (int i = 0; i < 4; i++)
        if ((uintptr_t)ptrs[i] % algo->data[i] != 0)
            return CUBLAS_STATUS_INVALID_VALUE;
    if (wsbytes > algo->data[4] || (wsbytes && !ws))
        return CUBLAS_STATUS_INVALID_VALUE;
    /* a bias less aligned than the one the heuristic saw (a misaligned address on a GPU) */
    bool has_bias = gcemu_lt_has_bias(d), has_aux = gcemu_lt_has_aux(d);
    bool bgrad = d->epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD;
    if (has_bias && (!d->bias || gcemu_lt_align(d->bias) < algo->data[5]))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (has_aux && (!d->aux || gcemu_lt_align(d->aux) < algo->data[6]))
        return CUBLAS_STATUS_INVALID_VALUE;
    /* in place (C == D): the same layout */
    if (Cptr == Dptr && (C->type != D->type || C->ld != D->ld || C->rows != D->rows || C->cols != D->cols ||
                         C->batch != D->batch || C->stride != D->stride))
        return CUBLAS_STATUS_INVALID_VALUE;
    float a = *(const float *)alpha, b = *(const float *)beta;
    uint64_t m = D->rows, n = D->cols, k = d->opa == CUBLAS_OP_N ? A->cols : A->rows;
    gcemu_lt_matmuls++;
    std::vector<float> ta, tb, tc, td;
    bool tf32 = d->compute == CUBLAS_COMPUTE_32F_FAST_TF32;
    const float *fa = gcemu_lt_widen(Aptr, A, ta, tf32), *fb = gcemu_lt_widen(Bptr, B, tb, tf32);
    const float *fc = gcemu_lt_widen(Cptr, C, tc);
    float *fd = (float *)Dptr;
    if (D->type == CUDA_R_16BF) {
        td.assign(gcemu_lt_span(D), 0.0f);
        fd = td.data();
    }
    for (int32_t bi = 0; bi < D->batch; bi++) {
        const float *pa = fa + bi * A->stride;
        const float *pb = fb + bi * B->stride;
        const float *pc = fc + bi * C->stride;
        float *pd = fd + bi * D->stride;
        if (pc != pd && b != 0.0f)
            for (uint64_t j = 0; j < n; j++)
                memmove(pd + j * D->ld, pc + j * C->ld, m * sizeof(float));
        cblas_sgemm(CblasColMajor, d->opa == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                    d->opb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, (int)m, (int)n, (int)k, a, pa,
                    (int)A->ld, pb, (int)B->ld, b, pd, (int)D->ld);
        if (has_bias && !bgrad) {   /* bias: m elements of D's type */
            if (!d->bias)
                return CUBLAS_STATUS_INVALID_VALUE;
            for (uint64_t j = 0; j < n; j++)
                for (uint64_t i = 0; i < m; i++)
                    pd[j * D->ld + i] += D->type == CUDA_R_16BF ? __bfloat162float(((const __nv_bfloat16 *)d->bias)[i])
                                                                : ((const float *)d->bias)[i];
        }
        if (has_aux)   /* aux (D's type): X stored (GELU_AUX_BIAS) or read (DGELU) */
            for (uint64_t j = 0; j < n; j++)
                for (uint64_t i = 0; i < m; i++) {
                    float &x = pd[j * D->ld + i];
                    size_t e = j * (size_t)d->aux_ld + i;
                    bool bf = D->type == CUDA_R_16BF;
                    if (d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
                        if (bf)
                            ((__nv_bfloat16 *)d->aux)[e] = __float2bfloat16(x);
                        else
                            ((float *)d->aux)[e] = x;
                        float c = 0.044715f * x * x * x;
                        x = 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + c)));
                    } else {   /* DGELU, DGELU_BGRAD */
                        float p = bf ? __bfloat162float(((const __nv_bfloat16 *)d->aux)[e]) : ((const float *)d->aux)[e];
                        float c = 0.044715f * p * p * p, th = tanhf(0.7978845608028654f * (p + c));
                        x *= 0.5f * (1.0f + th) + p * 0.5f * (1.0f - th * th) * 0.7978845608028654f *
                                                      (1.0f + 3.0f * 0.044715f * p * p);
                    }
                }
        if (bgrad)   /* the bias gradient: per row i of D, the sum over its n columns, overwritten */
            for (uint64_t i = 0; i < m; i++) {
                float sum = 0.0f;
                for (uint64_t j = 0; j < n; j++)
                    sum += pd[j * D->ld + i];
                if (D->type == CUDA_R_16BF)
                    ((__nv_bfloat16 *)d->bias)[i] = __float2bfloat16(sum);
                else
                    ((float *)d->bias)[i] = sum;
            }
    }
    if (bgrad)
        gcemu_lt_bgrads++;
    if (D->type == CUDA_R_16BF)   /* only the matrix elements, not the gaps between columns */
        for (int32_t bi = 0; bi < D->batch; bi++)
            for (uint64_t j = 0; j < n; j++)
                for (uint64_t i = 0; i < m; i++) {
                    size_t e = bi * D->stride + j * D->ld + i;
                    ((__nv_bfloat16 *)Dptr)[e] = __float2bfloat16(td[e]);
                }
    return CUBLAS_STATUS_SUCCESS;
}

#endif
