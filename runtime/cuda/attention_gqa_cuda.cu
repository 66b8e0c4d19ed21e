/* attention_gqa_cuda.cu — causal attention on separate q, k, v with grouped
 * key/value heads on the GPU (gc_runtime.h, section "attention_gqa_cpu.c /
 * attention_gqa_cuda.cu"; bf16 variants in gc_cuda.h). Included by
 * kernels_cuda.cu after attention_cuda.cu, whose kernels these run: q
 * (B, NH, T, hs), k and v (B, NKV, T, hs), y (B, T, NH, hs) when heads_out
 * else (B, NH, T, hs), as AttP strides with group = NH / NKV query heads per
 * kv head. dk and dv of a kv head sum over its group inside one block (no
 * atomics: deterministic). */

template <class T>
static AttP<T> att_gqa(const T *q, const T *k, const T *v, long NH, long NKV, long T_, long hs, int heads_out,
                       float scale)
{
    att_check(hs);
    if (NKV < 1 || NH % NKV != 0) {
        fprintf(stderr, "%s:%d: internal error: attention with %ld query heads and %ld kv heads\n", __FILE__,
                __LINE__, NH, NKV);
        exit(1);
    }
    AttP<T> a = {};
    a.NH = (int)NH, a.T = T_, a.hs = (int)hs, a.group = (int)(NH / NKV);
    a.q = q, a.k = k, a.v = v;
    a.qb = NH * T_ * hs, a.qh = T_ * hs, a.qt = hs;
    a.kb = NKV * T_ * hs, a.kh = T_ * hs, a.kt = hs;
    if (heads_out)
        a.yb = T_ * NH * hs, a.yh = hs, a.yt = NH * hs;
    else
        a.yb = NH * T_ * hs, a.yh = T_ * hs, a.yt = hs;
    a.scale = scale;
    return a;
}

template <class T>
static void attention_gqa_fwd(T *y, float *lse, const T *q, const T *k, const T *v, long B, long NH, long NKV, long T_,
                              long hs, int heads_out, float scale)
{
    AttP<T> a = att_gqa(q, k, v, NH, NKV, T_, hs, heads_out, scale);
    a.out = y, a.lse = lse;
    att_fwd(a, B);
}

template <class T>
static void attention_gqa_bwd(T *dq, T *dk, T *dv, const T *dy, const T *q, const T *k, const T *v, const T *y,
                              const float *lse, long B, long NH, long NKV, long T_, long hs, int heads_out, float scale,
                              int acc)
{
    AttP<T> a = att_gqa(q, k, v, NH, NKV, T_, hs, heads_out, scale);
    a.y = y, a.dy = dy, a.lse = (float *)lse;
    a.dq = dq, a.dk = dk, a.dv = dv;
    a.acc = acc & 7;
    att_bwd(a, B);
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
