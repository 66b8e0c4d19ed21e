/* gc_runtime.h — the runtime shipped into every program gcompile emits.
 *
 * One header, sectioned by file. The emitted training step (train.c or
 * train.cu) calls the kernels below in schedule order on pointers of the form
 * region base + planned offset; gc_main() (train_main.c) owns everything
 * around the step: flags, regions, data, checkpoints, logging, sampling.
 *
 * Kernel conventions (llm.c style): outputs first, then const inputs, then
 * sizes, then flags. `acc` is a bit mask, bit i set = output i is accumulated
 * into (+=) instead of overwritten (=). All tensors are contiguous row-major.
 * The CPU kernels (kernels_cpu.c) and the CUDA kernels (kernels_cuda.cu) have
 * the same names and signatures; the CUDA ones take device pointers and run on
 * the runtime's current stream.
 *
 * gc_real is float in every shipped program. Tests build kernels_cpu.c a
 * second time with -DGC_REAL=double to check backward kernels against finite
 * differences in double precision.
 */
#ifndef GC_RUNTIME_H
#define GC_RUNTIME_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifndef GC_REAL
#define GC_REAL float
#endif
typedef GC_REAL gc_real;

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- kernels_cpu.c / kernels_cuda.cu */

/* c[b] (+)= op(a[b]) @ op(b[b]) for b in [0,batch). op(a) is MxK (stored KxM
 * when ta), op(b) is KxN (stored NxK when tb), c is MxN; batch strides are
 * M*K, K*N and M*N elements. acc bit 0: c += instead of c =. */
void gc_matmul(gc_real *c, const gc_real *a, const gc_real *b, long batch,
               long M, long N, long K, int ta, int tb, int acc);

/* gc_matmul, then bias (N elements) added to every row of c: the fusion of a
 * matmul with the broadcast add of its bias (cuBLASLt's BIAS epilogue). */
void gc_matmul_bias(gc_real *c, const gc_real *a, const gc_real *b, const gc_real *bias, long batch,
                    long M, long N, long K, int ta, int tb, int acc);

/* pre = gc_matmul_bias(a, b, bias), h = gelu(pre) (llm.c's tanh GELU, the
 * arithmetic of the elementwise gelu op): the MLP's gelu(matmul + bias) as
 * one op (cuBLASLt's GELU_AUX_BIAS epilogue); pre is kept for the backward.
 * Both outputs are overwritten (the fusion pass fuses no accumulation). */
void gc_matmul_bias_gelu(gc_real *h, gc_real *pre, const gc_real *a, const gc_real *b, const gc_real *bias,
                         long batch, long M, long N, long K, int ta, int tb);

/* dpre = gelu'(pre) * (op(a) @ op(b)): the matmul giving the gradient of
 * gelu's output fused with the GELU derivative (cuBLASLt's DGELU epilogue),
 * and h = gelu(pre) recomputed for the backward (so the forward's h need
 * not be kept). */
void gc_matmul_dgelu(gc_real *dpre, gc_real *h, const gc_real *a, const gc_real *b, const gc_real *pre, long batch,
                     long M, long N, long K, int ta, int tb);

/* gc_matmul_dgelu, and db (N) = the column sums of dpre (its batch*M rows)
 * as gc_reduce_rows(db, dpre, batch*M, N, acc >> 2): the bias gradient of
 * the matmul that made pre, from the same call (cuBLASLt's DGELU_BGRAD
 * epilogue, which overwrites db; with acc bit 2 set, db += the sums, and
 * the CUDA runtime adds a column sum instead). Bits 0 and 1 of acc must be
 * clear (dpre and h are overwritten). fuse_bgrad.c. */
void gc_matmul_dgelu_bgrad(gc_real *dpre, gc_real *h, gc_real *db, const gc_real *a, const gc_real *b,
                           const gc_real *pre, long batch, long M, long N, long K, int ta, int tb, int acc);

/* out[c] (+)= sum_r in[r*cols + c]: the gradient of a broadcast add. */
void gc_reduce_rows(gc_real *out, const gc_real *in, long rows, long cols, int acc);

/* out[i,:] = table[idx[i],:] for i in [0,n); table has `rows` rows of C. An
 * index outside [0,rows) is a runtime error (message, exit 1). */
void gc_embedding_fwd(gc_real *out, const int32_t *idx, const gc_real *table,
                      long n, long rows, long C);
/* dtable[idx[i],:] += dout[i,:]; when acc bit 0 is clear, dtable (rows x C) is
 * zeroed first. Deterministic (no atomics, fixed summation order). */
void gc_embedding_bwd(gc_real *dtable, const gc_real *dout, const int32_t *idx,
                      long n, long rows, long C, int acc);

/* Row-wise layernorm over the last dim C of N rows; mean and rstd (N each)
 * are saved for the backward. */
void gc_layernorm_fwd(gc_real *out, gc_real *mean, gc_real *rstd,
                      const gc_real *x, const gc_real *w, const gc_real *b,
                      long N, long C, float eps);
/* x = ra + rb (the residual add), then gc_layernorm_fwd(out, mean, rstd, x,
 * w, b): both in one pass over the rows (fuse_layernorm.c). x may be ra or
 * rb (in place). */
void gc_add_layernorm_fwd(gc_real *x, gc_real *out, gc_real *mean, gc_real *rstd, const gc_real *ra,
                          const gc_real *rb, const gc_real *w, const gc_real *b, long N, long C, float eps);
/* Outputs dx (bit 0), dw (bit 1), db (bit 2); any of the three may be NULL
 * (not needed). dw/db sums run in a fixed order (deterministic). */
void gc_layernorm_bwd(gc_real *dx, gc_real *dw, gc_real *db, const gc_real *dout,
                      const gc_real *x, const gc_real *w, const gc_real *mean,
                      const gc_real *rstd, long N, long C, int acc);

/* out = in with its axes permuted: out.shape[i] = shape[perm[i]].
 * rank <= 8. Its gradient is gc_permute with the inverse permutation. */
void gc_permute(gc_real *out, const gc_real *in, int rank, const long *shape,
                const int *perm, int acc);

/* Softmax over the last dim (cols) of `rows` rows. -INFINITY inputs give 0. */
void gc_softmax_fwd(gc_real *out, const gc_real *in, long rows, long cols);
/* dx (+)= y * (dy - sum(dy * y)) row-wise. */
void gc_softmax_bwd(gc_real *dx, const gc_real *dy, const gc_real *y,
                    long rows, long cols, int acc);

/* in is batch x T x T; out[b,i,j] = in[b,i,j] for j <= i, -INFINITY above the
 * diagonal. out may equal in (in place). */
void gc_causal_mask_fwd(gc_real *out, const gc_real *in, long batch, long T);
/* dx[b,i,j] (+)= dy[b,i,j] for j <= i, (+)0 above the diagonal. */
void gc_causal_mask_bwd(gc_real *dx, const gc_real *dy, long batch, long T, int acc);

/* ---------------------------------------------------------------- norm_rope_cpu.c / norm_rope_cuda.cu */

/* out (N, C) = x * rstd * w per row, rstd = 1/sqrt(mean(x^2) + eps) (N,
 * saved for the backward). */
void gc_rmsnorm_fwd(gc_real *out, gc_real *rstd, const gc_real *x, const gc_real *w, long N, long C, float eps);
/* x = ra + rb (the residual add), then gc_rmsnorm_fwd(out, rstd, x, w) in
 * one pass over the rows (fuse_layernorm.c); x may be ra or rb */
void gc_add_rmsnorm_fwd(gc_real *x, gc_real *out, gc_real *rstd, const gc_real *ra, const gc_real *rb,
                        const gc_real *w, long N, long C, float eps);
/* dx (bit 0) = rstd (g - xhat mean(g xhat)), g = dy w, xhat = x rstd; dw
 * (bit 1) = column sums of dy xhat; either may be NULL. */
void gc_rmsnorm_bwd(gc_real *dx, gc_real *dw, const gc_real *dy, const gc_real *x, const gc_real *w,
                    const gc_real *rstd, long N, long C, int acc);
/* Rotary embedding of x (batch, T, hs), Hugging Face's rotate-half layout:
 * with h = hs/2, angle a = t theta^(-2i/hs) for position t and i < h,
 * y[i] = x[i] cos a - x[i+h] sin a, y[i+h] = x[i+h] cos a + x[i] sin a.
 * inverse: the opposite rotation (sin -> -sin), the backward. The cos/sin
 * are computed in double from t, i, theta on every call. */
void gc_rope(gc_real *y, const gc_real *x, long batch, long T, long hs, double theta, int inverse, int acc);
/* The backward of h = silu(a) * b (fuse_swiglu.c), n elements: da (bit 0)
 * = dh b silu'(a), db (bit 1) = dh silu(a), silu recomputed from a. */
void gc_swiglu_bwd(gc_real *da, gc_real *db, const gc_real *dh, const gc_real *a, const gc_real *b, long n, int acc);

/* ---------------------------------------------------------------- attention_gqa_cpu.c / attention_gqa_cuda.cu */

/* Causal attention with grouped key/value heads (fuse_attention.c's
 * attention_gqa): q (B, NH, T, hs), k and v (B, NKV, T, hs), query head h
 * reads kv head h / (NH/NKV); y (B, T, NH, hs) when heads_out, else
 * (B, NH, T, hs), = softmax(causal(scale q k^T)) v; lse (B, NH, T) the
 * log-sum-exp of each score row (natural log), for the backward. The T x T
 * scores are never stored. hs <= GC_ATTENTION_MAXHS on CUDA. */
void gc_attention_gqa_fwd(gc_real *y, gc_real *lse, const gc_real *q, const gc_real *k, const gc_real *v, long B,
                          long NH, long NKV, long T, long hs, int heads_out, float scale);
/* dq (bit 0), dk (bit 1), dv (bit 2) of gc_attention_gqa_fwd, given dy; dk
 * and dv sum over the query heads of each kv head. */
void gc_attention_gqa_bwd(gc_real *dq, gc_real *dk, gc_real *dv, const gc_real *dy, const gc_real *q,
                          const gc_real *k, const gc_real *v, const gc_real *y, const gc_real *lse, long B, long NH,
                          long NKV, long T, long hs, int heads_out, float scale, int acc);

/* ---------------------------------------------------------------- shape_cpu.c / shape_cuda.cu */

/* y (outer, na + nb) = [a (outer, na), b (outer, nb)] row by row */
void gc_concat(gc_real *y, const gc_real *a, const gc_real *b, long outer, long na, long nb, int acc);
/* y (outer, len) = x (outer, nx)[:, start : start + len] */
void gc_narrow(gc_real *y, const gc_real *x, long outer, long nx, long start, long len, int acc);
/* dx (outer, nx)[:, start : start + len] (+)= dy (outer, len); without acc
 * the rest of dx is zeroed */
void gc_narrow_bwd(gc_real *dx, const gc_real *dy, long outer, long nx, long start, long len, int acc);
/* y (outer, d*n, inner)[o, j*n + r, :] = x (outer, d, inner)[o, j, :] */
void gc_repeat(gc_real *y, const gc_real *x, long outer, long d, long n, long inner, int acc);
/* dx[o, j, :] (+)= sum over r < n of dy[o, j*n + r, :] */
void gc_repeat_bwd(gc_real *dx, const gc_real *dy, long outer, long d, long n, long inner, int acc);
/* y[r] = mean of x[r, 0:n]; dx[r, j] (+)= dy[r] / n */
void gc_mean_rows(gc_real *y, const gc_real *x, long rows, long n, int acc);
void gc_mean_bwd(gc_real *dx, const gc_real *dy, long rows, long n, int acc);

/* loss[0] = mean over n rows of (logsumexp(logits[r,0:V]) - logits[r,targets[r]]),
 * logits rows have Vp >= V columns; columns V..Vp-1 are ignored (padding).
 * A target outside [0,V) is a runtime error. */
void gc_crossentropy_fwd(gc_real *loss, const gc_real *logits,
                         const int32_t *targets, long n, long Vp, long V);
/* dlogits[r,c] (+)= dloss[0] * (softmax(logits[r,0:V])[c] - (c == targets[r])) / n
 * for c < V, and (+)0 for V <= c < Vp. */
void gc_crossentropy_bwd(gc_real *dlogits, const gc_real *dloss, const gc_real *logits,
                         const int32_t *targets, long n, long Vp, long V, int acc);

/* x[0..n) = value. */
void gc_fill(gc_real *x, long n, float value);

/* AdamW exactly as llm.c: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g²;
 * m̂ = m/(1-b1^t); v̂ = v/(1-b2^t); p -= lr (m̂/(√v̂+eps) + wd p). t >= 1. */
void gc_adamw(float *p, const float *g, float *m, float *v, long n, float lr,
              float beta1, float beta2, float eps, float wd, int t);

/* One tensor of a multi-tensor update: gc_adamw on (p, g, m, v, n) with
 * weight decay wd; pcopy (CUDA, --precision bf16; else NULL) gets the updated
 * weights rounded to bf16 (nearest even) in the same pass. */
typedef struct {
    float *p;
    void *pcopy;
    const float *g;
    float *m, *v;
    long n;
    float wd;
} gc_adamw_tensor;
/* gc_adamw on each of u[0..n): on CUDA one launch (per 16 tensors), the
 * emitted step's update of a layer. Same results as n gc_adamw calls. */
void gc_adamw_multi(const gc_adamw_tensor *u, int n, float lr, float beta1, float beta2, float eps, int t);
/* (grad_norm.c) Adds the sums of squares of the gradients u[0..n).g to the
 * device total (gc_device_sumsq_add per tensor, in order; no wait): the
 * emitted step calls it before each update when ctx->gnorm_sq is set, so a
 * program that updates inside its backward (fused-opt) still yields the
 * step's global norm; the trainer resets the total before the step and
 * reads it (one wait) after. */
void gc_update_sumsq(const gc_adamw_tensor *u, int n);
struct gc_ctx;
/* (grad_norm.c) The update of u[0..n) as the emitted step calls it after
 * gc_update_sumsq: nothing in a norm pass (ctx->norm_pass), else the
 * gradients multiplied by ctx->grad_scale when it is neither 0 nor 1 (the
 * clipping factor, --grad-clip), then gc_adamw_multi. */
void gc_update_apply(const gc_adamw_tensor *u, int n, const struct gc_ctx *ctx);

/* AdamW's bias correction 1 - beta^t (gc_adamw on both targets, gc_host_adamw),
 * in double, rounded once. powf's float beta^t is off by up to half an ulp
 * of ~1, which 1 - beta^t keeps as an absolute error: relative 1.5e-5 for
 * beta2 = 0.999 at t = 2, an error of 7e-6 in every update, which moved a
 * steep random graph's (seed 117607) step-3 loss by 4e-5 relative. */
static inline float gc_adamw_bias(float beta, int t)
{
    return (float)(1.0 - pow((double)beta, (double)t));
}

/* (host_adamw.c) gc_adamw on host memory, the CPU target's arithmetic: the
 * CPU target's gc_adamw is this; an offloaded program's host update
 * (gc_host_update) runs it on either target. */
void gc_host_adamw(float *p, const float *g, float *m, float *v, long n, float lr, float beta1, float beta2,
                   float eps, float wd, int t);
/* (host_adamw.c) The host update of u[0..n) (host pointers): each gradient
 * multiplied by grad_scale first when it is neither 0 nor 1 (as
 * gc_update_apply does on the device), then gc_host_adamw, then, when pcopy
 * is set (--precision bf16), the new weights rounded to bf16 into it. */
void gc_host_update_apply(const gc_adamw_tensor *u, int n, float lr, float beta1, float beta2, float eps, int t,
                          float grad_scale);
/* (host_adamw.c) out[0..n) = in[0..n) rounded to bf16 (nearest even, NaN
 * kept a NaN: what __float2bfloat16 does), on host memory; out holds the
 * bf16 bit patterns. */
void gc_host_cast_bf16(uint16_t *out, const float *in, long n);

/* Fill `bytes` bytes at p with quiet NaNs (debug builds: end of a lifetime). */
void gc_poison(void *p, size_t bytes);

/* ---------------------------------------------------------------- mpi/comm_mpi.c / cuda/comm_nccl.cu */
/* Collectives of programs split over ranks (gcompile --gpus N > 1); only
 * those programs link a comm file. Every rank ends with the same bits. Each
 * runs over a group of ranks: GC_GROUP_ALL, or with tensor parallel (tp=K)
 * this rank's tp group (the K consecutive ranks that hold the parts of one
 * model) or its dp group (the ranks that hold the same part, one per tp
 * group); "rank" below is the rank's place in that group.
 * out = sum over ranks of in (n elements), divided by the rank count when
 * avg; out may equal in. */
enum { GC_GROUP_ALL = 0, GC_GROUP_TP = 1, GC_GROUP_DP = 2, GC_NGROUPS = 3 };
void gc_allreduce(float *out, const float *in, long n, int avg, int group);
/* out (n elements) = this rank's n elements of the sum (mean when avg) over
 * ranks of in (nranks * n elements): elements [rank*n, rank*n + n). */
void gc_reduce_scatter(float *out, const float *in, long n, int avg, int group);
/* In place: rank r's n elements, at whole + r*n on rank r (`part`), end up
 * at whole + r*n on every rank. */
void gc_allgather(float *whole, const float *part, long n, int group);
/* out (nranks * n elements) = every rank's in (n elements) in rank order. */
void gc_gather(float *out, const float *in, long n, int group);

/* The process group as gc_main sees it (host side). */
typedef struct gc_comm {
    /* joins the group; 0, or -1 with a one-line reason in err */
    int (*init)(int *rank, int *nranks, char *err, size_t errlen);
    void (*finalize)(void);
    /* x[0..n) = sum over ranks of x[0..n) (host doubles) */
    void (*sum_doubles)(double *x, int n);
    /* ends every rank of the group with this exit status */
    void (*abort)(int status);
    /* in place on the host: rank r's n floats at whole + r*n go to every rank
     * of the group (GC_GROUP_*; r: the place in it) */
    void (*allgather_floats)(float *whole, long n, int group);
    /* tensor parallel over groups of tp consecutive ranks: makes the tp and
     * dp groups (every rank calls it, after init); 0, or -1 with a reason */
    int (*make_groups)(int tp, char *err, size_t errlen);
    /* a collective that has not completed after timeout_s seconds ends this
     * rank with an error naming the ranks that are gone or stopped (0: off);
     * NULL where not implemented (NCCL) */
    void (*watch)(double timeout_s);
    /* after gc_device_init has chosen the device: makes what the collectives
     * need on it (NCCL: every group's communicator, so that the first step
     * does not pay for ncclCommInitRank); NULL where there is nothing to make */
    void (*ready)(void);
} gc_comm;
extern const gc_comm gc_comm_group;
/* ---------------------------------------------------------------- attention_cpu.c / attention_cuda.cu */
/* Fused causal attention (passes/fuse_attention.c), FlashAttention-2 style:
 * the T x T scores are never stored. q, k, v are read in place from x and y
 * is written in place, through element strides in geom[12] =
 *   {B, NH, T, hs, sb, sh, st, koff, voff, yb, yh, yt}:
 * q[b,h,t,d] = x[b*sb + h*sh + t*st + d], k and v the same at +koff, +voff;
 * y[b,h,t,d] at b*yb + h*yh + t*yt + d. lse (B*NH*T, contiguous) keeps one
 * log-sum-exp of the scaled, masked scores per row for the backward.
 *   y = softmax(causal_mask(scale * q k^T)) v
 * hs <= GC_ATTENTION_MAXHS. */
#define GC_ATTENTION_MAXHS 128
void gc_attention_fwd(gc_real *y, gc_real *lse, const gc_real *x, const long *geom, float scale);
/* dq, dk, dv (+)= the gradients of y given dy, written into dx (x's layout:
 * the same strides and offsets); scores recomputed tile by tile from lse.
 * ds = p (dp - D) scale: the CUDA kernels take D = rowsum(dy y) from y, the
 * CPU ones D = sum(p dp) / sum(p) from their own p and dp (y unused), which
 * stays ~0 on a saturated row where the first leaves a rounding of the
 * order of u |dy| |v| (attention_cpu.c, bwd_head). The same holds for
 * gc_attention_gqa_bwd. */
void gc_attention_bwd(gc_real *dx, const gc_real *dy, const gc_real *x, const gc_real *y, const gc_real *lse,
                      const long *geom, float scale, int acc);

/* ---------------------------------------------------------------- classifier_cpu.c / classifier_cuda.cu */
/* The classifier matmul fused with cross-entropy (passes/fuse_classifier.c),
 * both targets: for the N rows of x (N x C) in chunks of R rows,
 * chunk = x_chunk w^T (R x Vp, w is Vp x C), the rows' losses, the gradient
 * of seed x the mean loss (seed = d loss: 1, or 1/K with K micro-batches) in place, then dx_chunk (+)= chunk w (acc bit
 * 1) and dw (+)= chunk^T x_chunk (acc bit 2). loss[0] = mean over rows of
 * logsumexp(logits[r, 0:V]) - logits[r, t_r], as gc_crossentropy_fwd.
 * rowloss holds N doubles (2N floats). */
void gc_classifier(gc_real *loss, gc_real *dx, gc_real *dw, gc_real *chunk, gc_real *rowloss, const gc_real *x,
                   const gc_real *w, const int32_t *targets, long N, long C, long Vp, long V, long R, float seed,
                   int acc);

/* ---------------------------------------------------------------- device_cpu.c / device_cuda.cu */
/* The target's memory, seen by train_main.c. On the CPU these are malloc and
 * memcpy; on CUDA cudaMalloc/cudaMemcpy with every call checked (file:line). */

/* 0 when usable; else writes a one-line reason ("no CUDA device") to err. */
int gc_device_init(char *err, size_t errlen);
const char *gc_device_name(void);
size_t gc_device_free_bytes(void);      /* CPU: 0 (unknown) */
size_t gc_device_total_bytes(void);     /* CPU: 0 (unknown) */
double gc_device_peak_flops(int bf16);  /* for MFU; 0 when unknown */
void *gc_device_alloc(size_t bytes);    /* zero-filled; exits 1 with a message on failure */
void gc_device_free(void *p);
/* The host region: zero-filled host memory the device's copies reach at full
 * speed (CUDA: pinned, cudaHostAlloc; CPU: as gc_device_alloc); exits 1
 * with a message on failure. */
void *gc_host_alloc(size_t bytes);
void gc_host_free(void *p);
void gc_device_upload(void *dst, const void *src, size_t bytes);     /* waits */
void gc_device_download(void *dst, const void *src, size_t bytes);   /* waits */
/* Queued copies that do not wait: the source must stay unchanged, and a
 * download's destination is written, when the next gc_device_sync returns. */
void gc_device_upload_async(void *dst, const void *src, size_t bytes);
void gc_device_download_async(void *dst, const void *src, size_t bytes);
/* Waits for the device (one host synchronisation) and reports a kernel's
 * index error (CUDA). */
void gc_device_sync(void);
/* Sum of x[i]^2 over n device floats, in double, the same bits every run
 * (the trainer's global gradient norm); waits for the device. */
double gc_device_sumsq(const float *x, long n);
/* The same kept on the device across tensors, so a step's global norm costs
 * one wait: gc_device_sumsq_reset zeroes the total, each
 * gc_device_sumsq_add(x, n) adds x's sum of squares to it without waiting
 * (one launch on CUDA; the tensors' sums added in call order, the same
 * bits every run), gc_device_sumsq_read waits and returns it. The total
 * itself (a device double) is at gc_device_sumsq_total_ptr(), for a kernel
 * that reads the norm on the device once something was added since the
 * reset (a reset launches nothing: the next add overwrites the total). One
 * total per process. */
void gc_device_sumsq_reset(void);
void gc_device_sumsq_add(const float *x, long n);
double gc_device_sumsq_read(void);
const double *gc_device_sumsq_total_ptr(void);
/* x[i] *= s over n device floats (gradient clipping). */
void gc_device_scale(float *x, long n, float s);

/* Host offload (gcompile --offload, passes/offload.c): the copies between
 * device memory and the host region, and the host update, as the emitted
 * step calls them. Each copy of a step has a slot; the compute stream (the
 * kernels') sees a copy complete only after gc_copy_wait of its slot. On
 * CUDA a copy runs on a copy stream, after everything queued on the compute
 * stream so far (an event): device-to-host copies on one stream, host-to-
 * device prefetches on another (each after the copy `after` that filled its
 * source, -1: none), and the weights an update wrote (GC_COPY_UPDATE) on
 * the update stream, after that update's host function; the host update
 * runs as a host function on the update stream once its gradients' copies
 * (slots after[0..nafter)) are done, so transfers and the CPU update overlap
 * the backward. GC_COPY_NOW copies on the compute stream (no slot: the
 * weights into their masters, once, after the host wrote them). On the CPU
 * target every call runs at once, in the order the step makes them. */
enum { GC_COPY_D2H, GC_COPY_H2D, GC_COPY_UPDATE, GC_COPY_NOW };
/* Makes the slots (the program's copy_slots), once before the first step. */
void gc_copy_init(int nslots);
void gc_copy(void *dst, const void *src, size_t bytes, int stream, int slot, int after);
void gc_copy_wait(int slot);
struct gc_ctx;
/* The host update of u[0..n) (host pointers) with the step's AdamW
 * settings from ctx: gc_host_update_apply, after the copies of slots
 * after[0..nafter); nothing in a norm pass (ctx->norm_pass). */
void gc_host_update(const gc_adamw_tensor *u, int n, const int *after, int nafter, const struct gc_ctx *ctx);

/* ---------------------------------------------------------------- train_main.c: the program */

enum { GC_INIT_ZEROS, GC_INIT_ONES, GC_INIT_NORMAL };
/* GC_PHASE_PARAMS: the host has written the fp32 master weights (init, load,
 * gradcheck): refresh what is derived from them (the bf16 copies of
 * --precision bf16, which the optimizer update otherwise keeps current). */
enum { GC_PHASE_FWD = 1, GC_PHASE_BWD = 2, GC_PHASE_OPT = 4, GC_PHASE_PARAMS = 8 };
/* GC_REGION_HOST: host memory (pinned on CUDA, gc_host_alloc) that the
 * offloaded optimizer state and activations live in; not device memory. */
enum { GC_REGION_PARAMS, GC_REGION_GRADS, GC_REGION_OPTSTATE, GC_REGION_ARENA, GC_REGION_HOST, GC_NREGIONS };

/* One parameter of the graph, in declaration order. Parameters are packed
 * without padding in the params region (llm.c's layout), so `offset` (in
 * elements) is also the parameter's place in an llm.c checkpoint. */
typedef struct {
    const char *name;
    long offset, numel;
    int rank;
    long shape[8];
    int init;      /* GC_INIT_* */
    float std;     /* GC_INIT_NORMAL */
    int decay;     /* 1: weight decay applies */
    /* tensor parallel (gc_program.tp > 1): where this rank's part lies in the
     * params region (elements), and how the parameter is cut: tp_outer 0 when
     * every rank holds it whole; else along axis tp_axis, of length
     * tp_outer·F·tp_inner (shape[] is the whole), rank r keeps indices
     * [r·F/tp, (r+1)·F/tp) of F for every outer and inner index */
    long local_offset;
    int tp_axis;
    long tp_outer, tp_inner;
    /* its tensors in a safetensors checkpoint (safetensors.c; the graph's
     * `from`, docs/checkpoints.md): st_layers 0: one tensor, named st_pre,
     * holding the whole parameter; else st_layers tensors, tensor l named
     * st_pre + l + st_post, holding index l of axis 0. One tensor has
     * st_rank axes: st_pshape as the parameter holds it, st_shape as the
     * file does (st_transposed: the file holds the matrix transposed); a
     * stored axis shorter than the parameter's fills its leading part (the
     * rest is zero on load and not saved). st_where: the parameter's
     * "file:line:col" in the graph. st_alts: st_nalts more names (pre,
     * post pairs, laid out as st_pre/st_post) tried in turn when a file
     * lacks the first; saves use the first. */
    const char *st_pre, *st_post;
    long st_layers;
    int st_transposed, st_rank;
    long st_pshape[8], st_shape[8];
    const char *st_where;
    int st_nalts;
    const char *const *st_alts;
} gc_param_info;

/* What a run of the step sees. gc_main fills it; the emitted step reads it. */
typedef struct gc_ctx {
    char *region[GC_NREGIONS];   /* base pointers (device pointers on CUDA; region[GC_REGION_HOST] host) */
    float lr, beta1, beta2, eps, weight_decay;
    int t;                       /* optimizer step, 1-based */
    void *user;                  /* target-specific (CUDA stream, handles) */
    double *prof;                /* --profile: seconds per profile category, else NULL */
    double prof_t0;              /* time of the last gc_prof_mark */
    int micro;                   /* micro-batch of this run of the step, 0-based: parameter
                                    gradients accumulate when > 0 */
    int rank, nranks;            /* this process in the group (0 of 1 when not split) */
    int tp_rank, dp_rank;        /* its place in its tp group (0 without tp) and in its dp
                                    group (= rank without tp): ZeRO shards, norms */
    int gnorm_sq;                /* when set, each update adds its gradients' sum of squares to the
                                    device total (gc_update_sumsq; the trainer's norm in fused-opt
                                    programs) */
    int norm_pass;               /* 1: the updates only add up gnorm_sq, nothing is updated (the
                                    first of a clipped fused-opt step's two passes) */
    float grad_scale;            /* 0 or 1: none; else each update's gradient is multiplied by it
                                    first (the clipping factor of a fused-opt step's second pass) */
    long sample_row;             /* 0: training; r+1: a forward for --sample, the fused classifier
                                    computing only row r's logits (gc_program.sample_off) */
} gc_ctx;

/* --profile: the emitted step calls GC_PROF(ctx, -1) on entry and
 * GC_PROF(ctx, k) after each op of profile category k; gc_prof_mark waits for
 * the device and adds the time since the previous mark to ctx->prof[k]. One
 * branch per op when profiling is off. */
void gc_prof_mark(gc_ctx *ctx, int k);
#define GC_PROF(ctx, k)              \
    do {                             \
        if ((ctx)->prof)             \
            gc_prof_mark((ctx), (k)); \
    } while (0)

/* One update's gradient in a split program (gc_program.upd_grads): n floats
 * at byte `offset` of region `region`; sharded bit 0: this rank's 1/N of the
 * mean over its data ranks (reduce-scatter), else the whole mean, the same on
 * all of them (all-reduce); bit 1: the gradient of this rank's part of a
 * tensor-parallel cut, else the same in its tp group. */
typedef struct {
    int region;
    size_t offset;
    long n;
    int sharded;
} gc_grad_ref;

/* Everything gc_main needs to know about the compiled graph; emitted as one
 * static const object by the code generator. */
typedef struct gc_program {
    const char *graph_file;       /* the .graph it was compiled from */
    const char *config;           /* config name or "" */
    const char *target;           /* "cpu" or "cuda" */
    int bf16;                     /* --precision bf16: activations (logits) are bf16 */
    const char *plan_summary;     /* one line: regions and peak bytes */
    const char *dims_text;        /* every dim of the graph, "B=4 T=64 ...", in declaration order
                                     (NULL: the header prints the named ones below) */
    const char *V_where;          /* "FILE:LINE:COL" of the graph's dim V (NULL: unknown) */
    /* dims the runtime needs (0 when the graph has no such dim) */
    long B, T, maxT, V, Vp, L, NH, C;
    int nparams;
    const gc_param_info *params;
    long nparam_elems;            /* total elements in the params region */
    size_t region_bytes[GC_NREGIONS];
    /* byte offsets in the arena of the step's inputs and outputs */
    size_t tokens_off, targets_off, loss_off, logits_off;
    long logits_cols;             /* Vp: row length of the logits tensor (0: none) */
    /* the fused classifier's --sample row (fp32, sample_cols = Vp values at
     * arena byte sample_off), written by a forward run with ctx->sample_row
     * set; sample_cols 0: none */
    size_t sample_off;
    long sample_cols;
    double flops_per_step;        /* forward + backward + optimizer (model FLOPs: recompute not counted) */
    size_t device_reserve_bytes;  /* device memory needed beyond the regions (CUDA context, kernel images, cuBLASLt) */
    /* optimizer defaults from the graph's `optimizer` statement */
    float lr, beta1, beta2, eps, weight_decay;
    /* --profile categories: one per (phase, kernel, shape) in the step */
    int nprof;
    const char *const *prof_label;
    const int *prof_calls;        /* calls per step */
    const double *prof_flops;     /* flops per step */
    /* runs the ops of the given phases (GC_PHASE_* mask) in schedule order */
    void (*run)(gc_ctx *ctx, int phases);
    /* split programs (--gpus N > 1): ranks, split name, the group; else 0, NULL, NULL */
    int nranks;
    const char *split;
    const gc_comm *comm;
    /* zero3: the params region holds this rank's shard of each update slice
     * {first element in the llm.c layout, elements} (see gcrt_params_to_shards) */
    int nshards;
    const long (*shards)[2];
    /* hash of the plan's params and optstate layout: a training state
     * (--ckpt-dir) written by one program resumes only in a program with
     * the same hash */
    unsigned long long state_hash;
    /* gradient accumulation: a step is micro_batches runs of fwd+bwd on B
     * rows each (B is the micro-batch), the optimizer with the last one;
     * 0 or 1: one run */
    int micro_batches;
    /* the matmul peak (FLOP/s) of the cost model's device profile when the
     * program was compiled with --device (MFU's default where the runtime
     * does not know the device's own peak), and that profile's name; 0, NULL
     * without --device */
    double peak_flops;
    const char *peak_device;
    /* split programs whose updates all follow the backward (plain schedule):
     * the gradient each update reads, so the global norm (and clipping) can
     * come before any update; 0, NULL otherwise */
    int nupd_grads;
    const gc_grad_ref *upd_grads;
    /* zero1-3: each rank's optstate region holds its own 1/N of the moments
     * (a training state holds every rank's region, in rank order) */
    int optstate_sharded;
    /* tensor parallel over this many ranks (every rank reads the same rows;
     * params are cut as gc_param_info says); 0 otherwise */
    int tp;
    /* host offload (gcompile --offload): the copies a step numbers
     * (gc_copy_init), and with the optimizer offloaded the bytes of the
     * moments at the start of the host region, laid out as an optstate
     * region (the training state reads and writes them there); 0 otherwise */
    int copy_slots;
    size_t optstate_host_bytes;
    /* --precision bf16 with the optimizer offloaded: the fp32 master weights
       live in the host region at this byte offset (llm.c's layout), the
       params region holds the bf16 copies only; 0 otherwise (the masters are
       the params region's first bytes) */
    size_t masters_host_off;
} gc_program;

/* The emitted program's main(): parses flags (--help lists them), allocates
 * one buffer per region of exactly the planned size, initialises or loads
 * parameters, and trains. Returns the process exit status. */
int gc_main(int argc, char **argv, const gc_program *prog);

#ifdef __cplusplus
}
#endif
#endif
