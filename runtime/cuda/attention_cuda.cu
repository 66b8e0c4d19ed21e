/* attention_cuda.cu — fused causal attention on CUDA (gc_runtime.h, sections
 * "attention_cpu.c / attention_cuda.cu" and "attention_gqa_cpu.c /
 * attention_gqa_cuda.cu"; the _bf16 entry points in gc_cuda.h). Compiled as
 * part of kernels_cuda.cu (included at its end), so it shares its helpers and
 * every build of the runtime picks it up.
 *
 * FlashAttention-2's scheme; one set of kernels serves both forms of the
 * op, described by AttP (pointers and strides of q, k, v, y and their
 * gradients, and `group` query heads per kv head: 1 for gc_attention_*,
 * whose q, k, v live in one x; NH / NKV for gc_attention_gqa_*). Two paths:
 *   tensor cores  bf16 storage on sm_80+ (gc_cuda_attention_wmma(), on by
 *                 default): mma.sync m16n8k16 with fp32 accumulators,
 *                 attention_mma.cu;
 *   SIMT          fp32 storage, and bf16 when the switch is off or the
 *                 device is older than sm_80: fp32 arithmetic,
 *                 attention_simt.cu.
 * Neither uses atomics: reruns are bit-identical. The emulator runs both
 * (tests/cuda/shim/gcemu_ptx.h emulates the PTX of gc_mma.h).
 */

template <class S> struct AttP {   /* S: the storage type, float or gc_bf16 */
    const S *q, *k, *v;    /* q (b, h, t, d) at q + b qb + h qh + t qt + d; k, v of kv head h / group: kb, kh, kt */
    const S *y, *dy;       /* backward: the forward's y and its gradient, strides yb, yh, yt */
    S *out;                /* forward: y */
    S *dq, *dk, *dv;       /* backward: dq with q's strides, dk and dv with k's */
    float *lse;            /* (B, NH, T): written by the forward, read by the backward */
    float *D;              /* backward, tensor cores: rowsum(dy y) of query head rows from Dbh0, or NULL */
    long qb, qh, qt, kb, kh, kt, yb, yh, yt;
    long T, bh0, Dbh0;     /* bh0: the launch's first (batch, head): query head (forward, dq) or kv head (dk/dv) */
    int NH, group, hs, acc, vec;   /* acc: bit 0 dq, 1 dk, 2 dv; vec: every row 16-byte aligned */
    float scale, sl2;      /* sl2 = scale log2(e) */
};

static void att_check(long hs)
{
    if (hs < 1 || hs > GC_ATTENTION_MAXHS) {
        fprintf(stderr, "error: attention: head size %ld outside [1, %d]\n", hs, GC_ATTENTION_MAXHS);
        exit(1);
    }
}

/* 16-byte rows everywhere the kernels load: hs % 8 == 0, pointers aligned, strides multiples of 8 elements */
template <class T> static int att_vec(const AttP<T> &a)
{
    const long s[] = {a.qb, a.qh, a.qt, a.kb, a.kh, a.kt, a.yb, a.yh, a.yt};
    int ok = a.hs % 8 == 0 && gc_al16(a.q) && gc_al16(a.k) && gc_al16(a.v) && (!a.y || gc_al16(a.y)) &&
             (!a.dy || gc_al16(a.dy));
    for (long v : s)
        ok &= v % 8 == 0;
    return ok;
}

#include "attention_simt.cu"
#include "attention_mma.cu"

static int att_tc = 1;

void gc_cuda_set_attention_wmma(int on) { att_tc = on != 0; }
int gc_cuda_attention_wmma(void) { return att_tc && gc_cuda_cc_major() >= 8; }

static long att_max_heads = 65535;   /* heads per launch: the grid's y (gc_cuda_attention_max_heads) */

void gc_cuda_attention_max_heads(long n) { att_max_heads = n > 0 && n < 65535 ? n : 65535; }

static void att_fwd_path(const AttP<float> &a, long nbh) { attention_fwd_simt(a, nbh); }
static void att_fwd_path(const AttP<gc_bf16> &a, long nbh)
{
    if (gc_cuda_attention_wmma())
        attention_fwd_mma(a, nbh);
    else
        attention_fwd_simt(a, nbh);
}

/* the forward over B NH query heads, in launches of at most att_max_heads */
template <class T> static void att_fwd(AttP<T> a, long B)
{
    att_check(a.hs);
    long BH = B * a.NH;
    if (BH <= 0 || a.T <= 0)
        return;
    a.sl2 = a.scale * AM_LOG2E;
    a.vec = att_vec(a);
    for (long c = 0; c < BH; c += att_max_heads) {
        a.bh0 = c;
        att_fwd_path(a, BH - c < att_max_heads ? BH - c : att_max_heads);
    }
}

/* The backward over B NKV kv heads (and their query heads), in chunks of
 * nkv kv heads: at most att_max_heads query heads per launch, and on tensor
 * cores as many as the workspace holds D for (group T floats per kv head;
 * with less than one, D = NULL: the dk/dv kernel computes it per tile). */
static void att_bwd_path(AttP<float> a, long BKV)
{
    long n = att_max_heads / a.group > 0 ? att_max_heads / a.group : 1;
    for (long c = 0; c < BKV; c += n) {
        a.bh0 = c * a.group;
        attention_bwd_simt(a, BKV - c < n ? BKV - c : n);
    }
}
static void att_bwd_path(AttP<gc_bf16> a, long BKV)
{
    long n = att_max_heads / a.group > 0 ? att_max_heads / a.group : 1;
    if (!gc_cuda_attention_wmma()) {
        for (long c = 0; c < BKV; c += n) {
            a.bh0 = c * a.group;
            attention_bwd_simt(a, BKV - c < n ? BKV - c : n);
        }
        return;
    }
    size_t per = (size_t)a.group * (size_t)a.T * sizeof(float);
    long fit = gc_ws && gc_ws_bytes >= per ? (long)(gc_ws_bytes / per) : 0;
    if (fit > 0 && fit < n)
        n = fit;
    for (long c = 0; c < BKV; c += n) {
        a.bh0 = a.Dbh0 = c * a.group;
        a.D = fit > 0 ? (float *)gc_ws : NULL;
        attention_bwd_mma(a, BKV - c < n ? BKV - c : n);
    }
}

template <class T> static void att_bwd(AttP<T> a, long B)
{
    att_check(a.hs);
    long BKV = B * (a.NH / a.group);
    if (BKV <= 0 || a.T <= 0)
        return;
    a.sl2 = a.scale * AM_LOG2E;
    a.vec = att_vec(a);
    att_bwd_path(a, BKV);
}

/* gc_attention_*: q, k, v in x through geom = {B, NH, T, hs, sb, sh, st, koff, voff, yb, yh, yt} */
template <class T> static AttP<T> att_mha(const T *x, const long *g, float scale)
{
    AttP<T> a = {};
    a.NH = (int)g[1], a.T = g[2], a.hs = (int)g[3], a.group = 1;
    a.q = x, a.k = x + g[7], a.v = x + g[8];
    a.qb = a.kb = g[4], a.qh = a.kh = g[5], a.qt = a.kt = g[6];
    a.yb = g[9], a.yh = g[10], a.yt = g[11];
    a.scale = scale;
    return a;
}

template <class T> static void att_mha_fwd(T *y, float *lse, const T *x, const long *geom, float scale)
{
    att_check(geom[3]);
    AttP<T> a = att_mha(x, geom, scale);
    a.out = y, a.lse = lse;
    att_fwd(a, geom[0]);
}

template <class T>
static void att_mha_bwd(T *dx, const T *dy, const T *x, const T *y, const float *lse, const long *geom, float scale,
                        int acc)
{
    att_check(geom[3]);
    AttP<T> a = att_mha(x, geom, scale);
    a.y = y, a.dy = dy, a.lse = (float *)lse;
    a.dq = dx, a.dk = dx + geom[7], a.dv = dx + geom[8];
    a.acc = acc ? 7 : 0;
    att_bwd(a, geom[0]);
}

void gc_attention_fwd(gc_real *y, gc_real *lse, const gc_real *x, const long *geom, float scale)
{
    att_mha_fwd(y, lse, x, geom, scale);
}

void gc_attention_bwd(gc_real *dx, const gc_real *dy, const gc_real *x, const gc_real *y, const gc_real *lse,
                      const long *geom, float scale, int acc)
{
    att_mha_bwd(dx, dy, x, y, lse, geom, scale, acc);
}

void gc_attention_fwd_bf16(gc_bf16 *y, float *lse, const gc_bf16 *x, const long *geom, float scale)
{
    att_mha_fwd(y, lse, x, geom, scale);
}

void gc_attention_bwd_bf16(gc_bf16 *dx, const gc_bf16 *dy, const gc_bf16 *x, const gc_bf16 *y, const float *lse,
                           const long *geom, float scale, int acc)
{
    att_mha_bwd(dx, dy, x, y, lse, geom, scale, acc);
}
