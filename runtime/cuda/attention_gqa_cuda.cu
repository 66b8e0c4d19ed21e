/* attention_gqa_cuda.cu — causal attention on separate q, k, v with grouped
 * key/value heads on the GPU (gc_runtime.h, section "attention_gqa_cpu.c /
 * attention_gqa_cuda.cu"; bf16 variants in gc_cuda.h). Included by
 * kernels_cuda.cu. Simple kernels, not tuned: one thread per query row
 * (forward: an online softmax, the row of y in registers; backward: dq),
 * one thread per key row (dk, dv over its kv head's query heads), the
 * probabilities recomputed from lse. No atomics: deterministic. */

template <class T>
__device__ __forceinline__ float gqa_dot(const T *a, const T *b, long n)
{
    float s = 0.0f;
    for (long i = 0; i < n; i++)
        s += to_f(a[i]) * to_f(b[i]);
    return s;
}

__device__ __forceinline__ long gqa_yrow(long b, long h, long t, long NH, long T_, long hs, int heads_out)
{
    return heads_out ? ((b * T_ + t) * NH + h) * hs : ((b * NH + h) * T_ + t) * hs;
}

template <class T>
__global__ void attention_gqa_fwd_kernel(T *y, float *lse, const T *q, const T *k, const T *v, long B, long NH,
                                         long NKV, long T_, long hs, int heads_out, float scale)
{
    long r = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= B * NH * T_)
        return;
    long b = r / (NH * T_), h = (r / T_) % NH, t = r % T_, kvh = h / (NH / NKV);
    const T *qr = q + r * hs, *kb = k + (b * NKV + kvh) * T_ * hs, *vb = v + (b * NKV + kvh) * T_ * hs;
    float acc[GC_ATTENTION_MAXHS];
    for (long i = 0; i < hs; i++)
        acc[i] = 0.0f;
    float m = -INFINITY, s = 0.0f;
    for (long j = 0; j <= t; j++) {
        float x = scale * gqa_dot(qr, kb + j * hs, hs);
        if (x > m) {
            float c = expf(m - x);
            s *= c;
            for (long i = 0; i < hs; i++)
                acc[i] *= c;
            m = x;
        }
        float p = expf(x - m);
        s += p;
        for (long i = 0; i < hs; i++)
            acc[i] += p * to_f(vb[j * hs + i]);
    }
    T *yr = y + gqa_yrow(b, h, t, NH, T_, hs, heads_out);
    for (long i = 0; i < hs; i++)
        store(yr + i, acc[i] / s);
    lse[r] = m + logf(s);
}

/* dq of one query row */
template <class T>
__global__ void attention_gqa_dq_kernel(T *dq, const T *dy, const T *q, const T *k, const T *v, const T *y,
                                        const float *lse, long B, long NH, long NKV, long T_, long hs, int heads_out,
                                        float scale, int acc)
{
    long r = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= B * NH * T_)
        return;
    long b = r / (NH * T_), h = (r / T_) % NH, t = r % T_, kvh = h / (NH / NKV);
    long yo = gqa_yrow(b, h, t, NH, T_, hs, heads_out);
    const T *qr = q + r * hs, *gy = dy + yo, *kb = k + (b * NKV + kvh) * T_ * hs, *vb = v + (b * NKV + kvh) * T_ * hs;
    float g[GC_ATTENTION_MAXHS];
    for (long i = 0; i < hs; i++)
        g[i] = 0.0f;
    float D = gqa_dot(gy, y + yo, hs), L = lse[r];
    for (long j = 0; j <= t; j++) {
        float p = expf(scale * gqa_dot(qr, kb + j * hs, hs) - L);
        float ds = p * (gqa_dot(gy, vb + j * hs, hs) - D) * scale;
        for (long i = 0; i < hs; i++)
            g[i] += ds * to_f(kb[j * hs + i]);
    }
    for (long i = 0; i < hs; i++)
        put(dq + r * hs + i, g[i], acc);
}

/* dk, dv of one key row: over the query heads of its kv head, rows t >= j */
template <class T>
__global__ void attention_gqa_dkv_kernel(T *dk, T *dv, const T *dy, const T *q, const T *k, const T *v, const T *y,
                                         const float *lse, long B, long NH, long NKV, long T_, long hs, int heads_out,
                                         float scale, int acck, int accv)
{
    long e = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= B * NKV * T_)
        return;
    long b = e / (NKV * T_), kvh = (e / T_) % NKV, j = e % T_, group = NH / NKV;
    const T *kr = k + e * hs, *vr = v + e * hs;
    float gk[GC_ATTENTION_MAXHS], gv[GC_ATTENTION_MAXHS];
    for (long i = 0; i < hs; i++)
        gk[i] = gv[i] = 0.0f;
    for (long h = kvh * group; h < (kvh + 1) * group; h++)
        for (long t = j; t < T_; t++) {
            long r = (b * NH + h) * T_ + t, yo = gqa_yrow(b, h, t, NH, T_, hs, heads_out);
            const T *qr = q + r * hs, *gy = dy + yo;
            float p = expf(scale * gqa_dot(qr, kr, hs) - lse[r]);
            float ds = p * (gqa_dot(gy, vr, hs) - gqa_dot(gy, y + yo, hs)) * scale;
            for (long i = 0; i < hs; i++) {
                gk[i] += ds * to_f(qr[i]);
                gv[i] += p * to_f(gy[i]);
            }
        }
    for (long i = 0; i < hs; i++) {
        put(dk + e * hs + i, gk[i], acck);
        put(dv + e * hs + i, gv[i], accv);
    }
}

static void gqa_check_hs(long hs)
{
    if (hs > GC_ATTENTION_MAXHS) {
        fprintf(stderr, "%s:%d: internal error: attention head size %ld above %d\n", __FILE__, __LINE__, hs,
                GC_ATTENTION_MAXHS);
        exit(1);
    }
}

template <class T>
static void attention_gqa_fwd(T *y, float *lse, const T *q, const T *k, const T *v, long B, long NH, long NKV, long T_,
                              long hs, int heads_out, float scale)
{
    gqa_check_hs(hs);
    long n = B * NH * T_;
    if (n > 0)
        GC_LAUNCH(attention_gqa_fwd_kernel<T>, grid_for(n, 128), 128, 0, y, lse, q, k, v, B, NH, NKV, T_, hs,
                  heads_out, scale);
}

template <class T>
static void attention_gqa_bwd(T *dq, T *dk, T *dv, const T *dy, const T *q, const T *k, const T *v, const T *y,
                              const float *lse, long B, long NH, long NKV, long T_, long hs, int heads_out, float scale,
                              int acc)
{
    gqa_check_hs(hs);
    long nq = B * NH * T_, nk = B * NKV * T_;
    if (nk > 0)
        GC_LAUNCH(attention_gqa_dkv_kernel<T>, grid_for(nk, 128), 128, 0, dk, dv, dy, q, k, v, y, lse, B, NH, NKV, T_,
                  hs, heads_out, scale, (acc >> 1) & 1, (acc >> 2) & 1);
    if (nq > 0)
        GC_LAUNCH(attention_gqa_dq_kernel<T>, grid_for(nq, 128), 128, 0, dq, dy, q, k, v, y, lse, B, NH, NKV, T_, hs,
                  heads_out, scale, acc & 1);
}

void gc_attention_gqa_fwd(gc_real *y, gc_real *lse, const gc_real *q, const gc_real *k, const gc_real *v, long B,
                          long NH, long NKV, long T, long hs, int heads_out, float scale)
{
    attention_gqa_fwd(y, lse, q, k, v, B, NH, NKV, T, hs, heads_out, scale);
}

void gc_attention_gqa_fwd_bf16(gc_bf16 *y, float *lse, const gc_bf16 *q, const gc_bf16 *k, const gc_bf16 *v, long B,
                               long NH, long NKV, long T, long hs, int heads_out, float scale)
{
    attention_gqa_fwd(y, lse, q, k, v, B, NH, NKV, T, hs, heads_out, scale);
}

void gc_attention_gqa_bwd(gc_real *dq, gc_real *dk, gc_real *dv, const gc_real *dy, const gc_real *q,
                          const gc_real *k, const gc_real *v, const gc_real *y, const gc_real *lse, long B, long NH,
                          long NKV, long T, long hs, int heads_out, float scale, int acc)
{
    attention_gqa_bwd(dq, dk, dv, dy, q, k, v, y, lse, B, NH, NKV, T, hs, heads_out, scale, acc);
}

void gc_attention_gqa_bwd_bf16(gc_bf16 *dq, gc_bf16 *dk, gc_bf16 *dv, const gc_bf16 *dy, const gc_bf16 *q,
                               const gc_bf16 *k, const gc_bf16 *v, const gc_bf16 *y, const float *lse, long B, long NH,
                               long NKV, long T, long hs, int heads_out, float scale, int acc)
{
    attention_gqa_bwd(dq, dk, dv, dy, q, k, v, y, lse, B, NH, NKV, T, hs, heads_out, scale, acc);
}
