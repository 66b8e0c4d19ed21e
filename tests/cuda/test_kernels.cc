/* test_kernels.cc — every CUDA kernel (runtime/cuda/kernels_cuda.cu) against
 * the CPU kernel of the same name (runtime/kernels_cpu.c, renamed cpu_* by
 * cpu_rename.h) on random inputs: forward and backward, acc modes, in-place
 * cases, shapes that are not multiples of the warp or block size.
 *
 * Two builds of this one file:
 *   - test_cuda_emu (label unit): kernels_cuda.cu and device_cuda.cu compiled
 *     as C++ against the SIMT emulator (tests/cuda/shim). Each case runs
 *     under several fiber/block orders and must give the same bits under all
 *     of them (a race between barriers would not), and with several workspace
 *     sizes (0 selects the single-pass fallbacks).
 *   - test_cuda_gpu (label gpu): the same file built by nvcc against the real
 *     kernels; each case runs twice and must give the same bits.
 *
 * Usage: test_kernels [filter]   (runs the groups whose name contains filter)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "child.h"
#include "gc_cuda.h"
#ifdef GCEMU
#include <gcemu_ptx.h>   /* the shim's gcemu_mma_syncs */
#endif

/* The CPU reference: the same signatures, other names. */
extern "C" {
decltype(gc_matmul) cpu_matmul;
decltype(gc_matmul_bias) cpu_matmul_bias;
decltype(gc_matmul_bias_gelu) cpu_matmul_bias_gelu;
decltype(gc_matmul_dgelu) cpu_matmul_dgelu;
decltype(gc_matmul_dgelu_bgrad) cpu_matmul_dgelu_bgrad;
decltype(gc_reduce_rows) cpu_reduce_rows;
decltype(gc_embedding_fwd) cpu_embedding_fwd;
decltype(gc_embedding_bwd) cpu_embedding_bwd;
decltype(gc_layernorm_fwd) cpu_layernorm_fwd;
decltype(gc_add_layernorm_fwd) cpu_add_layernorm_fwd;
decltype(gc_layernorm_bwd) cpu_layernorm_bwd;
decltype(gc_permute) cpu_permute;
decltype(gc_softmax_fwd) cpu_softmax_fwd;
decltype(gc_softmax_bwd) cpu_softmax_bwd;
decltype(gc_causal_mask_fwd) cpu_causal_mask_fwd;
decltype(gc_causal_mask_bwd) cpu_causal_mask_bwd;
decltype(gc_crossentropy_fwd) cpu_crossentropy_fwd;
decltype(gc_crossentropy_bwd) cpu_crossentropy_bwd;
decltype(gc_fill) cpu_fill;
decltype(gc_adamw) cpu_adamw;
decltype(gc_poison) cpu_poison;
decltype(gc_attention_fwd) cpu_attention_fwd;
decltype(gc_attention_bwd) cpu_attention_bwd;
decltype(gc_attention_gqa_fwd) cpu_attention_gqa_fwd;
decltype(gc_attention_gqa_bwd) cpu_attention_gqa_bwd;
decltype(gc_classifier) cpu_classifier;
decltype(gc_rope) cpu_rope;
}

typedef std::vector<float> Vec;
typedef std::vector<int32_t> IVec;

static int failures, checks;
static std::mt19937 rng(20240607);
static void *workspace;

/* ---------------------------------------------------------------- data */

static Vec rand_vec(size_t n, float lo = -1.0f, float hi = 1.0f)
{
    std::uniform_real_distribution<float> u(lo, hi);
    Vec v(n);
    for (auto &x : v)
        x = u(rng);
    return v;
}

static IVec rand_idx(size_t n, int32_t rows)
{
    std::uniform_int_distribution<int32_t> u(0, rows - 1);
    IVec v(n);
    for (auto &x : v)
        x = u(rng);
    return v;
}

static Vec nan_vec(size_t n) { return Vec(n, NAN); }

/* Device buffers of one case, freed together. */
struct Dev {
    std::vector<void *> ptrs;
    template <class T> T *up(const std::vector<T> &h, size_t pad_front = 0)
    {
        size_t bytes = (h.size() + pad_front) * sizeof(T);
        char *d = (char *)gc_device_alloc(bytes ? bytes : 1);
        ptrs.push_back(d);
        T *p = (T *)d + pad_front;
        gc_device_upload(p, h.data(), h.size() * sizeof(T));
        return p;
    }
    /* n elements of device memory, not initialised (scratch a case writes before it reads) */
    template <class T> T *raw(size_t n)
    {
        void *d = gc_device_alloc(n ? n * sizeof(T) : 1);
        ptrs.push_back(d);
        return (T *)d;
    }
    ~Dev()
    {
        for (void *p : ptrs)
            gc_device_free(p);
    }
};

template <class T> static std::vector<T> down(const T *d, size_t n)
{
    std::vector<T> h(n);
    gc_device_download(h.data(), d, n * sizeof(T));
    return h;
}

/* ---------------------------------------------------------------- checking */

/* |got - want| <= tol * (|want| + max|want|) elementwise; infinities and
 * NaNs must match exactly. */
static bool close(const char *what, const Vec &got, const Vec &want, float tol = 1e-5f)
{
    checks++;
    if (got.size() != want.size()) {
        printf("FAIL %s: %zu values, want %zu\n", what, got.size(), want.size());
        failures++;
        return false;
    }
    float scale = 0.0f;
    for (float w : want)
        if (isfinite(w))
            scale = fmaxf(scale, fabsf(w));
    for (size_t i = 0; i < got.size(); i++) {
        float g = got[i], w = want[i];
        bool ok = (isnan(g) && isnan(w)) || g == w || fabsf(g - w) <= tol * (fabsf(w) + scale);
        if (!ok) {
            printf("FAIL %s: [%zu] = %.9g, want %.9g (|diff| %.3g, scale %.3g)\n", what, i, g, w,
                   fabsf(g - w), scale);
            failures++;
            return false;
        }
    }
    return true;
}

static bool same_bits(const char *what, const Vec &a, const Vec &b)
{
    checks++;
    if (a.size() == b.size() && (a.empty() || memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0))
        return true;
    for (size_t i = 0; i < a.size() && i < b.size(); i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            printf("FAIL %s: not deterministic: [%zu] = %.9g vs %.9g\n", what, i, a[i], b[i]);
            break;
        }
    failures++;
    return false;
}

/* Runs the GPU side of a case under each schedule (emulator) or twice (GPU);
 * all runs must agree bit for bit; returns the first. */
static Vec run_gpu(const char *what, const std::function<Vec()> &f)
{
#ifdef GCEMU
    gcemu_set_order(gcemu::ORDER_FORWARD, 0);
    Vec first = f();
    gcemu_set_order(gcemu::ORDER_REVERSE, 0);
    same_bits(what, f(), first);
    gcemu_set_order(gcemu::ORDER_SHUFFLE, 7);
    same_bits(what, f(), first);
    gcemu_set_order(gcemu::ORDER_SHUFFLE, 12345);
#else
    Vec first = f();
    same_bits(what, f(), first);
#endif
    return first;
}

/* once (where a case only has to equal another run bit for bit, which
 * already ran under every schedule), or as run_gpu */
static Vec run_once_or_gpu(bool once, const char *what, const std::function<Vec()> &f)
{
    return once ? f() : run_gpu(what, f);
}

/* Concatenation of several outputs, for cases with more than one. */
static Vec cat(std::initializer_list<Vec> parts)
{
    Vec r;
    for (const Vec &p : parts)
        r.insert(r.end(), p.begin(), p.end());
    return r;
}

/* Workspace sizes each case runs with: none (single-pass fallbacks), small,
 * full, and 1 MiB starting 4 bytes past an alignment boundary (the runtime
 * aligns it). */
static const size_t WS_MISALIGNED = 1 << 20 | 1;
static const size_t ws_sizes[] = {0, 4096, GC_CUDA_WORKSPACE_BYTES, WS_MISALIGNED};

static void set_ws(size_t bytes)
{
    if (bytes == WS_MISALIGNED)
        gc_cuda_set_workspace((char *)workspace + 4, 1 << 20);
    else
        gc_cuda_set_workspace(bytes ? workspace : NULL, bytes);
}

#define NAME(...) (snprintf(name, sizeof name, __VA_ARGS__), name)

/* ---------------------------------------------------------------- matmul */

/* TF32 (the emulator's cuBLASLt rounds fp32 operands to TF32 as the tensor
 * cores do): every element within the stated bound of the CPU's fp32,
 * (2^-10 + K 2^-24) sum_k |a_ik b_kj| (gc_cuda.h), and some elements not
 * equal to fp32's, so the rounding is really there. bf16 matmuls ignore the
 * flag (same bits as with it off). */
static void test_matmul_tf32()
{
    const long M = 33, N = 17, K = 300;
    Vec a = rand_vec(M * K), b = rand_vec(K * N), want(M * N), abs_sum(M * N, 0.0f);
    cpu_matmul(want.data(), a.data(), b.data(), 1, M, N, K, 0, 0, 0);
    for (long i = 0; i < M; i++)
        for (long j = 0; j < N; j++)
            for (long k = 0; k < K; k++)
                abs_sum[i * N + j] += fabsf(a[i * K + k] * b[k * N + j]);
    auto run = [&](int tf32) {
        gc_cuda_set_tf32(tf32);
        Vec got = run_gpu("matmul tf32", [&] {
            Dev d;
            float *dc = d.up(Vec(M * N, 0.0f));
            gc_matmul(dc, d.up(a), d.up(b), 1, M, N, K, 0, 0, 0);
            return down(dc, M * N);
        });
        gc_cuda_set_tf32(0);
        return got;
    };
    checks++;
    if (!(gc_cuda_set_tf32(1), gc_cuda_tf32())) {
        printf("FAIL matmul tf32: not on for an sm_%d device\n", gc_cuda_cc_major() * 10);
        failures++;
    }
    Vec t = run(1), f = run(0);
    long differ = 0;
    double worst = 0;
    for (long i = 0; i < M * N; i++) {
        double bound_tf32 = (0x1p-10 + K * 0x1p-24) * abs_sum[i], bound_f32 = K * 0x1p-24 * abs_sum[i];
        differ += t[i] != f[i];
        worst = fmax(worst, fabs(t[i] - want[i]) / bound_tf32);
        if (!(fabs(t[i] - want[i]) <= bound_tf32) || !(fabs(f[i] - want[i]) <= bound_f32)) {
            printf("FAIL matmul tf32: [%ld] tf32 %.9g fp32 %.9g want %.9g (bounds %.3g, %.3g)\n", i, t[i], f[i],
                   want[i], bound_tf32, bound_f32);
            failures++;
            break;
        }
    }
    checks++;
    if (differ < M * N / 2) {
        printf("FAIL matmul tf32: only %ld of %ld elements differ from fp32 (no TF32 rounding?)\n", differ, M * N);
        failures++;
    }
    printf("matmul tf32: %ld of %ld elements differ from fp32, worst error %.2f of the bound\n", differ, M * N,
           worst);
    /* bf16 operands: the flag changes nothing */
    Vec bt[2];
    for (int tf32 = 0; tf32 < 2; tf32++) {
        gc_cuda_set_tf32(tf32);
        bt[tf32] = run_gpu("matmul bf16 tf32 flag", [&] {
            Dev d;
            std::vector<gc_bf16> ha(M * K), hb(K * N);
            for (long i = 0; i < M * K; i++)
                ha[i] = __float2bfloat16(a[i]);
            for (long i = 0; i < K * N; i++)
                hb[i] = __float2bfloat16(b[i]);
            float *dc = d.up(Vec(M * N, 0.0f));
            gc_matmul_bf16_f32(dc, d.up(ha), d.up(hb), 1, M, N, K, 0, 0, 0);
            return down(dc, M * N);
        });
    }
    gc_cuda_set_tf32(0);
    same_bits("matmul bf16 ignores tf32", bt[0], bt[1]);
}

static void test_matmul()
{
    struct { long batch, M, N, K; } shapes[] = {
        {1, 1, 1, 1}, {1, 3, 5, 7}, {2, 33, 17, 65}, {3, 8, 40, 1}, {1, 64, 48, 32}, {2, 5, 4, 0},
    };
    char name[160];
    for (auto s : shapes)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int acc = 0; acc < 2; acc++)
                    for (int pad = 0; pad < 2; pad++) {   /* pad: 4-byte aligned pointers */
                        Vec a = rand_vec(s.batch * s.M * s.K), b = rand_vec(s.batch * s.K * s.N);
                        Vec c0 = acc ? rand_vec(s.batch * s.M * s.N) : nan_vec(s.batch * s.M * s.N);
                        Vec want = acc ? c0 : Vec(c0.size(), 0.0f);
                        cpu_matmul(want.data(), a.data(), b.data(), s.batch, s.M, s.N, s.K, ta, tb, acc);
                        NAME("matmul b%ld M%ld N%ld K%ld ta%d tb%d acc%d pad%d", s.batch, s.M, s.N, s.K, ta, tb,
                             acc, pad);
                        Vec got = run_gpu(name, [&] {
                            Dev d;
                            float *dc = d.up(c0, pad);
                            gc_matmul(dc, d.up(a, pad), d.up(b, 0), s.batch, s.M, s.N, s.K, ta, tb, acc);
                            return down(dc, c0.size());
                        });
                        close(name, got, want);
                    }
    test_matmul_tf32();
    /* the BIAS epilogue (fusion of matmul + bias add), fp32 and bf16; the bias
     * 256-byte aligned, then 16 (the same shape again: the cached algorithm
     * was chosen for 256, so the alignment must be in the cache key, or the
     * emulator's cuBLASLt refuses the call), then 4 (under 16: a bias-add
     * kernel after the matmul) */
    struct { long M, N, K; int ta, tb; } bs[] = {{1, 1, 1, 0, 0}, {33, 17, 65, 0, 1}, {64, 48, 32, 1, 0}, {5, 40, 7, 1, 1}};
    for (auto s : bs)
        for (int pad : {0, 4, 1}) {
            Vec ma = rand_vec(s.M * s.K), mb = rand_vec(s.K * s.N), bias = rand_vec(s.N), mwant(s.M * s.N);
            cpu_matmul_bias(mwant.data(), ma.data(), mb.data(), bias.data(), 1, s.M, s.N, s.K, s.ta, s.tb, 0);
            NAME("matmul_bias M%ld N%ld K%ld ta%d tb%d bias+%d", s.M, s.N, s.K, s.ta, s.tb, pad * 4);
            Vec mgot = run_gpu(name, [&] {
                Dev d;
                float *dc = d.up(nan_vec(s.M * s.N));
                gc_matmul_bias(dc, d.up(ma), d.up(mb), d.up(bias, pad), 1, s.M, s.N, s.K, s.ta, s.tb, 0);
                return down(dc, (size_t)(s.M * s.N));
            });
            close(name, mgot, mwant);
        }
#ifdef GCEMU
    /* a heuristic that finds no algorithm (NOT_SUPPORTED): one line naming the problem */
    std::string err;
    int rc = in_child([&] {
        gc_cuda_matmul_cache_clear();
        gcemu_lt_no_algo = true;
        Dev d;
        Vec z(40 * 7, 0.0f);
        gc_matmul_bias(d.up(z), d.up(z), d.up(z), d.up(z), 1, 5, 40, 7, 1, 1, 0);
    }, &err);
    checks++;
    if (rc != 1 || !strstr(err.c_str(), "error: no cuBLASLt algorithm for 5x40x7 (M x N x K, batch 1), layouts A f32") ||
        !strstr(err.c_str(), "epilogue BIAS (bias f32, 256-byte aligned)")) {
        printf("FAIL matmul no algorithm: exit %d \"%s\"\n", rc, err.c_str());
        failures++;
    }
#endif
}

/* ---------------------------------------------------------------- reduce_rows */

static void test_reduce_rows()
{
    struct { long rows, cols; } shapes[] = {{1, 1}, {7, 33}, {130, 70}, {1000, 5}, {300, 257}};
    char name[160];
    for (size_t ws : ws_sizes) {
        set_ws(ws);
        for (auto s : shapes)
            for (int acc = 0; acc < 2; acc++) {
                Vec in = rand_vec(s.rows * s.cols), o0 = rand_vec(s.cols), want = o0;
                cpu_reduce_rows(want.data(), in.data(), s.rows, s.cols, acc);
                NAME("reduce_rows %ldx%ld acc%d ws%zu", s.rows, s.cols, acc, ws);
                Vec got = run_gpu(name, [&] {
                    Dev d;
                    float *o = d.up(o0);
                    gc_reduce_rows(o, d.up(in), s.rows, s.cols, acc);
                    return down(o, s.cols);
                });
                close(name, got, want);
            }
    }
    set_ws(GC_CUDA_WORKSPACE_BYTES);
}

/* ---------------------------------------------------------------- embedding */

static void test_embedding()
{
    char name[160];
    struct { long n, rows, C; } fshapes[] = {{1, 1, 1}, {37, 50, 19}, {64, 5, 300}};
    for (auto s : fshapes) {
        IVec idx = rand_idx(s.n, (int32_t)s.rows);
        Vec table = rand_vec(s.rows * s.C), want(s.n * s.C);
        cpu_embedding_fwd(want.data(), idx.data(), table.data(), s.n, s.rows, s.C);
        NAME("embedding_fwd n%ld rows%ld C%ld", s.n, s.rows, s.C);
        Vec got = run_gpu(name, [&] {
            Dev d;
            float *o = d.up(nan_vec(s.n * s.C));
            gc_embedding_fwd(o, d.up(idx), d.up(table), s.n, s.rows, s.C);
            return down(o, s.n * s.C);
        });
        close(name, got, want);
    }
    struct { long n, rows, C; } bshapes[] = {
        {1, 1, 1}, {37, 50, 7}, {300, 5, 33}, {64, 1000, 300}, {3000, 40, 3},
    };
    for (size_t ws : ws_sizes) {
        set_ws(ws);
        for (auto s : bshapes)
            for (int acc = 0; acc < 2; acc++) {
                if (s.n == 3000 && ws == 0 && acc == 0)
                    continue;   /* the O(n^2) fallback is slow in the emulator */
                IVec idx = rand_idx(s.n, (int32_t)s.rows);
                Vec dout = rand_vec(s.n * s.C), t0 = acc ? rand_vec(s.rows * s.C) : nan_vec(s.rows * s.C);
                Vec want = t0;
                cpu_embedding_bwd(want.data(), dout.data(), idx.data(), s.n, s.rows, s.C, acc);
                NAME("embedding_bwd n%ld rows%ld C%ld acc%d ws%zu", s.n, s.rows, s.C, acc, ws);
                Vec got = run_gpu(name, [&] {
                    Dev d;
                    float *t = d.up(t0);
                    gc_embedding_bwd(t, d.up(dout), d.up(idx), s.n, s.rows, s.C, acc);
                    return down(t, s.rows * s.C);
                });
                close(name, got, want);
            }
    }
    set_ws(GC_CUDA_WORKSPACE_BYTES);
}

/* ---------------------------------------------------------------- layernorm */

static void test_layernorm()
{
    char name[160];
    struct { long N, C; } shapes[] = {{1, 1}, {9, 31}, {33, 65}, {20, 200}, {300, 8}};
    for (auto s : shapes) {
        long N = s.N, C = s.C;
        Vec x = rand_vec(N * C, -2.0f, 3.0f), w = rand_vec(C), b = rand_vec(C);
        Vec out(N * C), mean(N), rstd(N);
        cpu_layernorm_fwd(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
        NAME("layernorm_fwd %ldx%ld", N, C);
        Vec got = run_gpu(name, [&] {
            Dev d;
            float *o = d.up(nan_vec(N * C)), *m = d.up(nan_vec(N)), *r = d.up(nan_vec(N));
            gc_layernorm_fwd(o, m, r, d.up(x), d.up(w), d.up(b), N, C, 1e-5f);
            return cat({down(o, N * C), down(m, N), down(r, N)});
        });
        close(name, got, cat({out, mean, rstd}));

        Vec dout = rand_vec(N * C);
        for (size_t ws : ws_sizes) {
            set_ws(ws);
            /* acc bits 0..7; mask: which of dx, dw, db are passed; inplace: dx == dout */
            for (int acc = 0; acc < 8; acc++)
                for (int mask = 1; mask < 8; mask++)
                    for (int inplace = 0; inplace < 2; inplace++) {
                        if (inplace && !(mask & 1))
                            continue;
                        if (ws != GC_CUDA_WORKSPACE_BYTES && mask != 7)
                            continue;
                        Vec dx0 = (acc & 1) ? rand_vec(N * C) : nan_vec(N * C);
                        Vec dw0 = (acc & 2) ? rand_vec(C) : nan_vec(C), db0 = (acc & 4) ? rand_vec(C) : nan_vec(C);
                        if (inplace)
                            dx0 = dout;
                        Vec wdx = dx0, wdw = dw0, wdb = db0;
                        cpu_layernorm_bwd(mask & 1 ? wdx.data() : NULL, mask & 2 ? wdw.data() : NULL,
                                          mask & 4 ? wdb.data() : NULL, inplace ? wdx.data() : dout.data(),
                                          x.data(), w.data(), mean.data(), rstd.data(), N, C, acc);
                        NAME("layernorm_bwd %ldx%ld acc%d mask%d inplace%d ws%zu", N, C, acc, mask, inplace, ws);
                        Vec got2 = run_gpu(name, [&] {
                            Dev d;
                            float *ddx = d.up(dx0), *ddw = d.up(dw0), *ddb = d.up(db0);
                            gc_layernorm_bwd(mask & 1 ? ddx : NULL, mask & 2 ? ddw : NULL, mask & 4 ? ddb : NULL,
                                             inplace ? ddx : d.up(dout), d.up(x), d.up(w), d.up(mean), d.up(rstd),
                                             N, C, acc);
                            return cat({down(ddx, N * C), down(ddw, C), down(ddb, C)});
                        });
                        close(name, got2, cat({wdx, wdw, wdb}), 2e-5f);
                    }
        }
        set_ws(GC_CUDA_WORKSPACE_BYTES);
    }
}

/* ---------------------------------------------------------------- permute */

static void test_permute()
{
    struct Case { std::vector<long> shape; std::vector<int> perm; };
    Case cases[] = {
        {{7}, {0}},
        {{5, 3}, {1, 0}},
        {{2, 3, 4, 5}, {0, 2, 1, 3}},
        {{2, 3, 4, 5}, {3, 1, 0, 2}},
        {{1, 5, 1}, {2, 0, 1}},
        {{2, 1, 3, 2, 4}, {4, 2, 0, 3, 1}},
        {{2, 1, 2, 1, 2, 3, 1, 2}, {7, 6, 5, 4, 3, 2, 1, 0}},
        {{3, 33, 2, 9}, {0, 2, 1, 3}},   /* (B, T, NH, HS) -> (B, NH, T, HS) */
    };
    char name[160];
    for (auto &cs : cases)
        for (int acc = 0; acc < 2; acc++) {
            long n = 1;
            for (long s : cs.shape)
                n *= s;
            int rank = (int)cs.shape.size();
            Vec in = rand_vec(n), o0 = acc ? rand_vec(n) : nan_vec(n), want = o0;
            cpu_permute(want.data(), in.data(), rank, cs.shape.data(), cs.perm.data(), acc);
            NAME("permute rank%d n%ld perm0=%d acc%d", rank, n, cs.perm[0], acc);
            Vec got = run_gpu(name, [&] {
                Dev d;
                float *o = d.up(o0);
                gc_permute(o, d.up(in), rank, cs.shape.data(), cs.perm.data(), acc);
                return down(o, n);
            });
            close(name, got, want);
        }
}

/* ---------------------------------------------------------------- softmax, causal mask */

static void test_softmax()
{
    struct { long rows, cols; int masked; } shapes[] = {
        {1, 1, 0}, {9, 31, 0}, {17, 33, 0}, {5, 100, 0}, {3 * 20, 20, 1}, {2 * 37, 37, 1},
    };
    char name[160];
    for (auto s : shapes) {
        long n = s.rows * s.cols;
        Vec x = rand_vec(n, -5.0f, 5.0f);
        if (s.masked)
            cpu_causal_mask_fwd(x.data(), x.data(), s.rows / s.cols, s.cols);
        for (int inplace = 0; inplace < 2; inplace++) {
            Vec want(n);
            cpu_softmax_fwd(want.data(), x.data(), s.rows, s.cols);
            NAME("softmax_fwd %ldx%ld masked%d inplace%d", s.rows, s.cols, s.masked, inplace);
            Vec got = run_gpu(name, [&] {
                Dev d;
                float *in = d.up(x), *o = inplace ? in : d.up(nan_vec(n));
                gc_softmax_fwd(o, in, s.rows, s.cols);
                return down(o, n);
            });
            close(name, got, want);
        }
        Vec y(n), dy = rand_vec(n);
        cpu_softmax_fwd(y.data(), x.data(), s.rows, s.cols);
        for (int acc = 0; acc < 2; acc++)
            for (int inplace = 0; inplace < 3; inplace++) {   /* 1: dx == dy, 2: dx == y */
                Vec dx0 = inplace == 1 ? dy : inplace == 2 ? y : acc ? rand_vec(n) : nan_vec(n);
                Vec want = dx0;
                cpu_softmax_bwd(want.data(), inplace == 1 ? want.data() : dy.data(),
                                inplace == 2 ? want.data() : y.data(), s.rows, s.cols, acc);
                NAME("softmax_bwd %ldx%ld acc%d inplace%d", s.rows, s.cols, acc, inplace);
                Vec got = run_gpu(name, [&] {
                    Dev d;
                    float *dx = d.up(dx0);
                    gc_softmax_bwd(dx, inplace == 1 ? dx : d.up(dy), inplace == 2 ? dx : d.up(y), s.rows, s.cols,
                                   acc);
                    return down(dx, n);
                });
                close(name, got, want);
            }
    }
    /* a row of -inf only: NaN, as on the CPU */
    Vec x(8, -INFINITY), want(8);
    cpu_softmax_fwd(want.data(), x.data(), 1, 8);
    Vec got = run_gpu("softmax_fwd all -inf", [&] {
        Dev d;
        float *in = d.up(x);
        gc_softmax_fwd(in, in, 1, 8);
        return down(in, 8);
    });
    close("softmax_fwd all -inf", got, want);
}

static void test_causal_mask()
{
    struct { long batch, T; } shapes[] = {{1, 1}, {3, 5}, {2, 33}};
    char name[160];
    for (auto s : shapes) {
        long n = s.batch * s.T * s.T;
        Vec x = rand_vec(n);
        for (int inplace = 0; inplace < 2; inplace++) {
            Vec want(n);
            cpu_causal_mask_fwd(want.data(), x.data(), s.batch, s.T);
            NAME("causal_mask_fwd %ldx%ld inplace%d", s.batch, s.T, inplace);
            Vec got = run_gpu(name, [&] {
                Dev d;
                float *in = d.up(x), *o = inplace ? in : d.up(nan_vec(n));
                gc_causal_mask_fwd(o, in, s.batch, s.T);
                return down(o, n);
            });
            close(name, got, want);
        }
        for (int acc = 0; acc < 2; acc++)
            for (int inplace = 0; inplace < 2; inplace++) {
                Vec dy = rand_vec(n), dx0 = inplace ? dy : acc ? rand_vec(n) : nan_vec(n), want = dx0;
                cpu_causal_mask_bwd(want.data(), inplace ? want.data() : dy.data(), s.batch, s.T, acc);
                NAME("causal_mask_bwd %ldx%ld acc%d inplace%d", s.batch, s.T, acc, inplace);
                Vec got = run_gpu(name, [&] {
                    Dev d;
                    float *dx = d.up(dx0);
                    gc_causal_mask_bwd(dx, inplace ? dx : d.up(dy), s.batch, s.T, acc);
                    return down(dx, n);
                });
                close(name, got, want);
            }
    }
}

/* ---------------------------------------------------------------- cross-entropy */

static void test_crossentropy()
{
    struct { long n, V, Vp; } shapes[] = {
        {1, 1, 1}, {5, 10, 13}, {40, 300, 304}, {3, 1100, 1104}, {1030, 7, 8},
    };
    char name[160];
    for (auto s : shapes) {
        long n = s.n, V = s.V, Vp = s.Vp;
        Vec logits = rand_vec(n * Vp, -4.0f, 4.0f);
        IVec tg = rand_idx(n, (int32_t)V);
        Vec want(1);
        cpu_crossentropy_fwd(want.data(), logits.data(), tg.data(), n, Vp, V);
        NAME("crossentropy_fwd n%ld V%ld Vp%ld", n, V, Vp);
        Vec got = run_gpu(name, [&] {
            Dev d;
            float *loss = d.up(nan_vec(1));
            gc_crossentropy_fwd(loss, d.up(logits), d.up(tg), n, Vp, V);
            return down(loss, 1);
        });
        close(name, got, want);
        if (n > 100)
            continue;
        Vec dloss = {1.7f};
        for (int acc = 0; acc < 2; acc++)
            for (int inplace = 0; inplace < 2; inplace++) {
                Vec d0 = inplace ? logits : acc ? rand_vec(n * Vp) : nan_vec(n * Vp), want2 = d0;
                cpu_crossentropy_bwd(want2.data(), dloss.data(), inplace ? want2.data() : logits.data(), tg.data(),
                                     n, Vp, V, acc);
                NAME("crossentropy_bwd n%ld V%ld Vp%ld acc%d inplace%d", n, V, Vp, acc, inplace);
                Vec got2 = run_gpu(name, [&] {
                    Dev d;
                    float *dl = d.up(d0);
                    gc_crossentropy_bwd(dl, d.up(dloss), inplace ? dl : d.up(logits), d.up(tg), n, Vp, V, acc);
                    return down(dl, n * Vp);
                });
                close(name, got2, want2);
            }
    }
}

/* ---------------------------------------------------------------- fill, adamw, poison */

/* gc_adamw_multi: 21 tensors (two launches of at most 16), sizes with and
 * without a multiple of 4, one empty, weight decay on some, a bf16 copy on
 * others: each equals gc_adamw on the CPU, each copy the rounded parameter. */
static void test_adamw_multi()
{
    const int NT = 21;
    std::vector<Vec> p(NT), g(NT), m(NT), v(NT), want(NT);
    std::vector<long> n(NT);
    Vec all_want;
    for (int k = 0; k < NT; k++) {
        n[k] = k == 5 ? 0 : 1 + (k * 37) % 300;
        p[k] = rand_vec(n[k]), g[k] = rand_vec(n[k]), m[k] = rand_vec(n[k], -0.1f, 0.1f);
        v[k] = rand_vec(n[k], 0.0f, 0.01f);
        Vec wp = p[k], wm = m[k], wv = v[k];
        cpu_adamw(wp.data(), g[k].data(), wm.data(), wv.data(), n[k], 3e-4f, 0.9f, 0.95f, 1e-8f, k % 3 ? 0.1f : 0.0f, 2);
        want[k] = cat({wp, wm, wv});
        all_want = cat({all_want, want[k]});
    }
    int bad_copy = 0;
    Vec got = run_gpu("adamw_multi", [&] {
        Dev d;
        std::vector<gc_adamw_tensor> u(NT);
        std::vector<gc_bf16 *> pc(NT);
        for (int k = 0; k < NT; k++) {
            pc[k] = k % 2 ? d.up(std::vector<gc_bf16>(n[k])) : NULL;
            u[k] = {d.up(p[k]), pc[k], d.up(g[k]), d.up(m[k]), d.up(v[k]), n[k], k % 3 ? 0.1f : 0.0f};
        }
        gc_adamw_multi(u.data(), NT, 3e-4f, 0.9f, 0.95f, 1e-8f, 2);
        Vec out;
        for (int k = 0; k < NT; k++) {
            Vec pk = down(u[k].p, n[k]);
            out = cat({out, pk, down(u[k].m, n[k]), down(u[k].v, n[k])});
            if (pc[k]) {
                std::vector<gc_bf16> c = down(pc[k], n[k]);
                for (long i = 0; i < n[k]; i++)
                    bad_copy += __bfloat162float(c[i]) != __bfloat162float(__float2bfloat16(pk[i]));
            }
        }
        return out;
    });
    close("adamw_multi", got, all_want);
    checks++;
    if (bad_copy) {
        printf("FAIL adamw_multi: %d bf16 copy elements are not the rounded parameter\n", bad_copy);
        failures++;
    }
}

static void test_misc()
{
    char name[160];
    for (long n : {1L, 1000L}) {
        Vec want(n);
        cpu_fill(want.data(), n, 3.5f);
        NAME("fill n%ld", n);
        close(name, run_gpu(name, [&] {
                  Dev d;
                  float *x = d.up(nan_vec(n));
                  gc_fill(x, n, 3.5f);
                  return down(x, n);
              }),
              want);
    }
    for (int t : {1, 5}) {
        long n = 1000;
        Vec p = rand_vec(n), g = rand_vec(n), m = rand_vec(n, -0.1f, 0.1f), v = rand_vec(n, 0.0f, 0.01f);
        Vec wp = p, wm = m, wv = v;
        cpu_adamw(wp.data(), g.data(), wm.data(), wv.data(), n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
        NAME("adamw t%d", t);
        Vec got = run_gpu(name, [&] {
            Dev d;
            float *dp = d.up(p), *dm = d.up(m), *dv = d.up(v);
            gc_adamw(dp, d.up(g), dm, dv, n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
            return cat({down(dp, n), down(dm, n), down(dv, n)});
        });
        close(name, got, cat({wp, wm, wv}));
    }
    test_adamw_multi();
    Vec got = run_gpu("poison", [&] {
        Dev d;
        float *x = d.up(Vec(10, 1.0f));
        gc_poison(x + 1, 7 * sizeof(float) + 2);
        return down(x, 10);
    });
    checks++;   /* bytes [4, 34) are 0xff, the rest untouched */
    const unsigned char *bytes = (const unsigned char *)got.data();
    bool ok = got[0] == 1.0f && got[9] == 1.0f && isnan(got[1]);
    for (int i = 4; i < 34; i++)
        ok &= bytes[i] == 0xff;
    ok &= bytes[34] == 0x80 && bytes[35] == 0x3f;
    if (!ok) {
        printf("FAIL poison\n");
        failures++;
    }
}

/* ---------------------------------------------------------------- bf16 */
/* The bf16 entry points against the fp32 CPU kernels run on the same
 * bf16-rounded inputs: fp32 outputs within 1e-5, bf16 outputs (the CPU's
 * result rounded) within a bf16 ulp (1/128 of the row's scale). */

typedef std::vector<gc_bf16> BVec;
static const float BF16_TOL = 1.0f / 128;

static BVec to_bf(const Vec &v)
{
    BVec b(v.size());
    for (size_t i = 0; i < v.size(); i++)
        b[i] = __float2bfloat16(v[i]);
    return b;
}

static Vec from_bf(const BVec &b)
{
    Vec v(b.size());
    for (size_t i = 0; i < b.size(); i++)
        v[i] = __bfloat162float(b[i]);
    return v;
}

static Vec round_bf(const Vec &v) { return from_bf(to_bf(v)); }
static Vec rand_bf(size_t n, float lo = -1.0f, float hi = 1.0f) { return round_bf(rand_vec(n, lo, hi)); }
static Vec down_bf(const gc_bf16 *d, size_t n) { return from_bf(down(d, n)); }

static void test_bf16()
{
    char name[160];
    /* matmul: bf16 out and fp32 out */
    struct { long batch, M, N, K; } shapes[] = {{1, 5, 7, 3}, {2, 33, 17, 65}};
    for (auto s : shapes)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int acc = 0; acc < 2; acc++) {
                    long nc = s.batch * s.M * s.N;
                    Vec a = rand_bf(s.batch * s.M * s.K), b = rand_bf(s.batch * s.K * s.N), c0 = rand_bf(nc);
                    Vec want = acc ? c0 : Vec(nc, 0.0f);
                    cpu_matmul(want.data(), a.data(), b.data(), s.batch, s.M, s.N, s.K, ta, tb, acc);
                    NAME("matmul_bf16 b%ld M%ld N%ld K%ld ta%d tb%d acc%d", s.batch, s.M, s.N, s.K, ta, tb, acc);
                    close(name, run_gpu(name, [&] {
                              Dev d;
                              gc_bf16 *dc = d.up(to_bf(acc ? c0 : nan_vec(nc)));
                              gc_matmul_bf16(dc, d.up(to_bf(a)), d.up(to_bf(b)), s.batch, s.M, s.N, s.K, ta, tb, acc);
                              return down_bf(dc, nc);
                          }),
                          round_bf(want), BF16_TOL);
                    NAME("matmul_bf16_f32 b%ld M%ld N%ld K%ld ta%d tb%d acc%d", s.batch, s.M, s.N, s.K, ta, tb, acc);
                    close(name, run_gpu(name, [&] {
                              Dev d;
                              float *dc = d.up(acc ? c0 : nan_vec(nc));
                              gc_matmul_bf16_f32(dc, d.up(to_bf(a)), d.up(to_bf(b)), s.batch, s.M, s.N, s.K, ta, tb,
                                                 acc);
                              return down(dc, nc);
                          }),
                          want);
                }

    /* reduce_rows, embedding */
    {
        long rows = 130, cols = 70;
        Vec in = rand_bf(rows * cols), o0 = rand_vec(cols), want = o0;
        cpu_reduce_rows(want.data(), in.data(), rows, cols, 1);
        close("reduce_rows_bf16", run_gpu("reduce_rows_bf16", [&] {
                  Dev d;
                  float *o = d.up(o0);
                  gc_reduce_rows_bf16(o, d.up(to_bf(in)), rows, cols, 1);
                  return down(o, cols);
              }),
              want);
        long n = 300, V = 50, C = 33;
        IVec idx = rand_idx(n, (int32_t)V);
        Vec table = rand_bf(V * C), fw(n * C);
        cpu_embedding_fwd(fw.data(), idx.data(), table.data(), n, V, C);
        close("embedding_fwd_bf16", run_gpu("embedding_fwd_bf16", [&] {
                  Dev d;
                  gc_bf16 *o = d.up(to_bf(nan_vec(n * C)));
                  gc_embedding_fwd_bf16(o, d.up(idx), d.up(to_bf(table)), n, V, C);
                  return down_bf(o, n * C);
              }),
              fw, 0.0f);
        Vec dout = rand_bf(n * C), t0 = rand_vec(V * C);
        for (int acc = 0; acc < 2; acc++) {
            Vec bw = acc ? t0 : Vec(V * C, 0.0f);
            cpu_embedding_bwd(bw.data(), dout.data(), idx.data(), n, V, C, acc);
            NAME("embedding_bwd_bf16 acc%d", acc);
            close(name, run_gpu(name, [&] {
                      Dev d;
                      float *t = d.up(acc ? t0 : nan_vec(V * C));
                      gc_embedding_bwd_bf16(t, d.up(to_bf(dout)), d.up(idx), n, V, C, acc);
                      return down(t, V * C);
                  }),
                  bw);
        }
    }

    /* layernorm: C = 65 (misaligned rows, tails), 64 and 200 (16-byte vectors; 200 = 25 vectors of 8) */
    for (long C : {65L, 64L, 200L}) {
        long N = 33;
        Vec x = rand_bf(N * C, -2.0f, 3.0f), w = rand_bf(C), b = rand_bf(C), out(N * C), mean(N), rstd(N);
        cpu_layernorm_fwd(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
        Vec got = run_gpu("layernorm_fwd_bf16", [&] {
            Dev d;
            gc_bf16 *o = d.up(to_bf(nan_vec(N * C)));
            float *m = d.up(nan_vec(N)), *r = d.up(nan_vec(N));
            gc_layernorm_fwd_bf16(o, m, r, d.up(to_bf(x)), d.up(to_bf(w)), d.up(to_bf(b)), N, C, 1e-5f);
            return cat({down_bf(o, N * C), down(m, N), down(r, N)});
        });
        close("layernorm_fwd_bf16 out", Vec(got.begin(), got.begin() + N * C), round_bf(out), BF16_TOL);
        close("layernorm_fwd_bf16 stats", Vec(got.begin() + N * C, got.end()), cat({mean, rstd}));
        Vec dout = rand_bf(N * C);
        for (int acc : {0, 7}) {
            Vec dx0 = rand_bf(N * C), dw0 = rand_vec(C), db0 = rand_vec(C), wdx = dx0, wdw = dw0, wdb = db0;
            cpu_layernorm_bwd(wdx.data(), wdw.data(), wdb.data(), dout.data(), x.data(), w.data(), mean.data(),
                              rstd.data(), N, C, acc);
            NAME("layernorm_bwd_bf16 acc%d", acc);
            Vec g2 = run_gpu(name, [&] {
                Dev d;
                gc_bf16 *ddx = d.up(to_bf(dx0));
                float *ddw = d.up(dw0), *ddb = d.up(db0);
                gc_layernorm_bwd_bf16(ddx, ddw, ddb, d.up(to_bf(dout)), d.up(to_bf(x)), d.up(to_bf(w)), d.up(mean),
                                      d.up(rstd), N, C, acc);
                return cat({down_bf(ddx, N * C), down(ddw, C), down(ddb, C)});
            });
            close(name, Vec(g2.begin(), g2.begin() + N * C), round_bf(wdx), BF16_TOL);
            close(name, Vec(g2.begin() + N * C, g2.end()), cat({wdw, wdb}), 2e-5f);
        }
    }

    /* permute, softmax, causal mask */
    {
        std::vector<long> shape = {3, 33, 2, 9};
        std::vector<int> perm = {0, 2, 1, 3};
        long n = 3 * 33 * 2 * 9;
        Vec in = rand_bf(n), want(n);
        cpu_permute(want.data(), in.data(), 4, shape.data(), perm.data(), 0);
        close("permute_bf16", run_gpu("permute_bf16", [&] {
                  Dev d;
                  gc_bf16 *o = d.up(to_bf(nan_vec(n)));
                  gc_permute_bf16(o, d.up(to_bf(in)), 4, shape.data(), perm.data(), 0);
                  return down_bf(o, n);
              }),
              want, 0.0f);
        long B = 3, T = 20, rows = B * T;
        Vec x = rand_bf(rows * T, -5.0f, 5.0f), xm(rows * T);
        cpu_causal_mask_fwd(xm.data(), x.data(), B, T);
        close("causal_mask_fwd_bf16", run_gpu("causal_mask_fwd_bf16", [&] {
                  Dev d;
                  gc_bf16 *io = d.up(to_bf(x));
                  gc_causal_mask_fwd_bf16(io, io, B, T);
                  return down_bf(io, rows * T);
              }),
              xm, 0.0f);
        Vec dy = rand_bf(rows * T), dxm(rows * T);
        cpu_causal_mask_bwd(dxm.data(), dy.data(), B, T, 0);
        close("causal_mask_bwd_bf16", run_gpu("causal_mask_bwd_bf16", [&] {
                  Dev d;
                  gc_bf16 *dx = d.up(to_bf(nan_vec(rows * T)));
                  gc_causal_mask_bwd_bf16(dx, d.up(to_bf(dy)), B, T, 0);
                  return down_bf(dx, rows * T);
              }),
              dxm, 0.0f);
        Vec y(rows * T);
        cpu_softmax_fwd(y.data(), xm.data(), rows, T);
        close("softmax_fwd_bf16", run_gpu("softmax_fwd_bf16", [&] {
                  Dev d;
                  gc_bf16 *io = d.up(to_bf(xm));
                  gc_softmax_fwd_bf16(io, io, rows, T);
                  return down_bf(io, rows * T);
              }),
              round_bf(y), BF16_TOL);
        Vec yb = round_bf(y), dx0 = rand_bf(rows * T), wdx = dx0;
        cpu_softmax_bwd(wdx.data(), dy.data(), yb.data(), rows, T, 1);
        close("softmax_bwd_bf16", run_gpu("softmax_bwd_bf16", [&] {
                  Dev d;
                  gc_bf16 *dx = d.up(to_bf(dx0));
                  gc_softmax_bwd_bf16(dx, d.up(to_bf(dy)), d.up(to_bf(yb)), rows, T, 1);
                  return down_bf(dx, rows * T);
              }),
              round_bf(wdx), BF16_TOL);
    }

    /* cross-entropy */
    {
        long n = 40, V = 300, Vp = 304;
        Vec logits = rand_bf(n * Vp, -4.0f, 4.0f), want(1), dloss = {1.7f};
        IVec tg = rand_idx(n, (int32_t)V);
        cpu_crossentropy_fwd(want.data(), logits.data(), tg.data(), n, Vp, V);
        close("crossentropy_fwd_bf16", run_gpu("crossentropy_fwd_bf16", [&] {
                  Dev d;
                  float *loss = d.up(nan_vec(1));
                  gc_crossentropy_fwd_bf16(loss, d.up(to_bf(logits)), d.up(tg), n, Vp, V);
                  return down(loss, 1);
              }),
              want);
        Vec g(n * Vp);
        cpu_crossentropy_bwd(g.data(), dloss.data(), logits.data(), tg.data(), n, Vp, V, 0);
        close("crossentropy_bwd_bf16", run_gpu("crossentropy_bwd_bf16", [&] {
                  Dev d;
                  gc_bf16 *io = d.up(to_bf(logits));
                  gc_crossentropy_bwd_bf16(io, d.up(dloss), io, d.up(tg), n, Vp, V, 0);
                  return down_bf(io, n * Vp);
              }),
              round_bf(g), BF16_TOL);
    }

    /* fill, casts, adamw with the bf16 copy */
    {
        long n = 1000;
        Vec v = rand_vec(n, -100.0f, 100.0f);
        close("fill_bf16", run_gpu("fill_bf16", [&] {
                  Dev d;
                  gc_bf16 *x = d.up(to_bf(nan_vec(n)));
                  gc_fill_bf16(x, n, 0.1f);
                  return down_bf(x, n);
              }),
              round_bf(Vec(n, 0.1f)), 0.0f);
        close("cast_bf16", run_gpu("cast_bf16", [&] {
                  Dev d;
                  gc_bf16 *o = d.up(to_bf(nan_vec(n)));
                  gc_cast_bf16(o, d.up(v), n);
                  return down_bf(o, n);
              }),
              round_bf(v), 0.0f);
        Vec vb = round_bf(v);
        close("cast_f32", run_gpu("cast_f32", [&] {
                  Dev d;
                  float *o = d.up(nan_vec(n));
                  gc_cast_f32(o, d.up(to_bf(vb)), n);
                  return down(o, n);
              }),
              vb, 0.0f);
        Vec p = rand_vec(n), g = rand_vec(n), m = rand_vec(n, -0.1f, 0.1f), s2 = rand_vec(n, 0.0f, 0.01f);
        Vec wp = p, wm = m, wv = s2;
        cpu_adamw(wp.data(), g.data(), wm.data(), wv.data(), n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 3);
        close("adamw_bf16", run_gpu("adamw_bf16", [&] {
                  Dev d;
                  float *dp = d.up(p), *dm = d.up(m), *dv = d.up(s2);
                  gc_bf16 *pc = d.up(to_bf(nan_vec(n)));
                  gc_adamw_bf16(dp, pc, d.up(g), dm, dv, n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 3);
                  Vec got_p = down(dp, n);
                  checks++;
                  if (down_bf(pc, n) != round_bf(got_p)) {
                      printf("FAIL adamw_bf16: the bf16 copy is not the rounded parameter\n");
                      failures++;
                  }
                  return cat({got_p, down(dm, n), down(dv, n)});
              }),
              cat({wp, wm, wv}));
    }
}

/* ---------------------------------------------------------------- 16-byte vectors */
/* The kernels with a 16-byte vector path (gc_cuda.h), fp32 and bf16, on
 * sizes that leave scalar tails (counts and row lengths that are not
 * multiples of 4 or 8, so some rows start misaligned) and with every pointer
 * one element past a 16-byte boundary (pad 1: the scalar path throughout),
 * against the CPU kernels. bf16: the CPU runs on the bf16-rounded inputs;
 * bf16 outputs within a bf16 ulp. The column sums give the same bits by
 * either path and with the chunks added by the last block or by a second
 * kernel. */

/* One case's device arrays in fp32 or bf16 storage, pad elements past a
 * 16-byte boundary. */
struct VStore {
    bool bf;
    int pad;
    Dev d;
    void *up(const Vec &v) { return bf ? (void *)d.up(to_bf(v), pad) : (void *)d.up(v, pad); }
    float *upf(const Vec &v) { return d.up(v, pad); }   /* always fp32 */
    Vec down(const void *p, size_t n) { return bf ? down_bf((const gc_bf16 *)p, n) : ::down((const float *)p, n); }
};

static void test_vectors()
{
    char name[200];
    for (int bf = 0; bf < 2; bf++)
        for (int pad = 0; pad < 2; pad++) {
            const char *ty = bf ? "bf16" : "fp32";
            float tol = bf ? BF16_TOL : 1e-5f;
            auto in = [&](size_t n, float lo = -1.0f, float hi = 1.0f) { return bf ? rand_bf(n, lo, hi) : rand_vec(n, lo, hi); };
            auto out = [&](const Vec &v) { return bf ? round_bf(v) : v; };   /* what a store of v gives */

            /* fill */
            for (long n : {13L, 1003L}) {
                Vec want(n);
                cpu_fill(want.data(), n, 0.37f);
                NAME("vectors fill %s pad%d n%ld", ty, pad, n);
                close(name, run_gpu(name, [&] {
                          VStore s{(bool)bf, pad, {}};
                          void *x = s.up(nan_vec(n));
                          if (bf)
                              gc_fill_bf16((gc_bf16 *)x, n, 0.37f);
                          else
                              gc_fill((float *)x, n, 0.37f);
                          return s.down(x, n);
                      }),
                      out(want), 0.0f);
            }
            /* casts (bf16 only: fp32 -> bf16 -> fp32) */
            if (bf) {
                long n = 1003;
                Vec v = rand_vec(n, -50.0f, 50.0f);
                NAME("vectors cast pad%d", pad);
                close(name, run_gpu(name, [&] {
                          Dev d;
                          gc_bf16 *b = d.up(to_bf(nan_vec(n)), pad);
                          float *o = d.up(nan_vec(n), pad ? 0 : 1);   /* the other alignment */
                          gc_cast_bf16(b, d.up(v, pad), n);
                          gc_cast_f32(o, b, n);
                          return cat({down_bf(b, n), down(o, n)});
                      }),
                      cat({round_bf(v), round_bf(v)}), 0.0f);
            }
            /* causal mask, forward and backward (acc 0, 1) */
            {
                long B = 2, T = 11, n = B * T * T;
                Vec x = in(n), want(n);
                cpu_causal_mask_fwd(want.data(), x.data(), B, T);
                NAME("vectors causal_mask_fwd %s pad%d", ty, pad);
                close(name, run_gpu(name, [&] {
                          VStore s{(bool)bf, pad, {}};
                          void *o = s.up(nan_vec(n));
                          if (bf)
                              gc_causal_mask_fwd_bf16((gc_bf16 *)o, (const gc_bf16 *)s.up(x), B, T);
                          else
                              gc_causal_mask_fwd((float *)o, (const float *)s.up(x), B, T);
                          return s.down(o, n);
                      }),
                      want, 0.0f);
                for (int acc = 0; acc < 2; acc++) {
                    Vec dy = in(n), dx0 = acc ? in(n) : nan_vec(n), wdx = dx0;
                    cpu_causal_mask_bwd(wdx.data(), dy.data(), B, T, acc);
                    NAME("vectors causal_mask_bwd %s pad%d acc%d", ty, pad, acc);
                    close(name, run_gpu(name, [&] {
                              VStore s{(bool)bf, pad, {}};
                              void *dx = s.up(dx0);
                              if (bf)
                                  gc_causal_mask_bwd_bf16((gc_bf16 *)dx, (const gc_bf16 *)s.up(dy), B, T, acc);
                              else
                                  gc_causal_mask_bwd((float *)dx, (const float *)s.up(dy), B, T, acc);
                              return s.down(dx, n);
                          }),
                          out(wdx), tol);
                }
            }
            /* softmax forward and backward (acc 0, 1): rows of 44 (a tail of 4 bf16;
             * every other bf16 row misaligned) and 48 */
            for (long cols : {44L, 48L}) {
                long rows = 7, n = rows * cols;
                Vec x = in(n, -4.0f, 4.0f), y(n);
                cpu_softmax_fwd(y.data(), x.data(), rows, cols);
                NAME("vectors softmax_fwd %s pad%d cols%ld", ty, pad, cols);
                close(name, run_gpu(name, [&] {
                          VStore s{(bool)bf, pad, {}};
                          void *o = s.up(nan_vec(n));
                          if (bf)
                              gc_softmax_fwd_bf16((gc_bf16 *)o, (const gc_bf16 *)s.up(x), rows, cols);
                          else
                              gc_softmax_fwd((float *)o, (const float *)s.up(x), rows, cols);
                          return s.down(o, n);
                      }),
                      out(y), tol);
                Vec yb = out(y), dy = in(n);
                for (int acc = 0; acc < 2; acc++) {
                    Vec dx0 = acc ? in(n) : nan_vec(n), wdx = dx0;
                    cpu_softmax_bwd(wdx.data(), dy.data(), yb.data(), rows, cols, acc);
                    NAME("vectors softmax_bwd %s pad%d cols%ld acc%d", ty, pad, cols, acc);
                    close(name, run_gpu(name, [&] {
                              VStore s{(bool)bf, pad, {}};
                              void *dx = s.up(dx0);
                              if (bf)
                                  gc_softmax_bwd_bf16((gc_bf16 *)dx, (const gc_bf16 *)s.up(dy), (const gc_bf16 *)s.up(yb),
                                                      rows, cols, acc);
                              else
                                  gc_softmax_bwd((float *)dx, (const float *)s.up(dy), (const float *)s.up(yb), rows,
                                                 cols, acc);
                              return s.down(dx, n);
                          }),
                          out(wdx), tol);
                }
            }
            /* layernorm backward: dx (row kernel) and dw/db (column sums), acc 0 and 7 */
            for (long C : {44L, 48L}) {
                long N = 150;   /* two chunks of rows in the column sums */
                Vec x = in(N * C, -2.0f, 3.0f), w = in(C), b = in(C), o(N * C), mean(N), rstd(N);
                cpu_layernorm_fwd(o.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
                Vec dout = in(N * C);
                for (int acc : {0, 7}) {
                    Vec dx0 = acc ? in(N * C) : nan_vec(N * C), dw0 = acc ? rand_vec(C) : nan_vec(C);
                    Vec db0 = acc ? rand_vec(C) : nan_vec(C), wdx = dx0, wdw = dw0, wdb = db0;
                    cpu_layernorm_bwd(wdx.data(), wdw.data(), wdb.data(), dout.data(), x.data(), w.data(), mean.data(),
                                      rstd.data(), N, C, acc);
                    NAME("vectors layernorm_bwd %s pad%d C%ld acc%d", ty, pad, C, acc);
                    Vec got = run_gpu(name, [&] {
                        VStore s{(bool)bf, pad, {}};
                        void *dx = s.up(dx0);
                        float *dw = s.upf(dw0), *db = s.upf(db0), *m = s.upf(mean), *r = s.upf(rstd);
                        if (bf)
                            gc_layernorm_bwd_bf16((gc_bf16 *)dx, dw, db, (const gc_bf16 *)s.up(dout),
                                                  (const gc_bf16 *)s.up(x), (const gc_bf16 *)s.up(w), m, r, N, C, acc);
                        else
                            gc_layernorm_bwd((float *)dx, dw, db, (const float *)s.up(dout), (const float *)s.up(x),
                                             (const float *)s.up(w), m, r, N, C, acc);
                        return cat({s.down(dx, N * C), ::down(dw, C), ::down(db, C)});
                    });
                    close(name, Vec(got.begin(), got.begin() + N * C), out(wdx), tol);
                    close(name, Vec(got.begin() + N * C, got.end()), cat({wdw, wdb}), 2e-5f);
                }
            }
            /* cross-entropy: Vp 44 (a tail; misaligned bf16 rows) and 48 with V = 45
             * (padding inside the last vector) */
            for (long Vp : {44L, 48L}) {
                long n = 5, V = Vp == 48 ? 45 : 43;
                Vec logits = in(n * Vp, -4.0f, 4.0f), loss(1), dloss = {1.3f};
                IVec tg = rand_idx(n, (int32_t)V);
                tg[0] = (int32_t)V - 1;
                cpu_crossentropy_fwd(loss.data(), logits.data(), tg.data(), n, Vp, V);
                NAME("vectors crossentropy_fwd %s pad%d Vp%ld", ty, pad, Vp);
                close(name, run_gpu(name, [&] {
                          VStore s{(bool)bf, pad, {}};
                          float *l = s.upf(nan_vec(1));
                          if (bf)
                              gc_crossentropy_fwd_bf16(l, (const gc_bf16 *)s.up(logits), s.d.up(tg), n, Vp, V);
                          else
                              gc_crossentropy_fwd(l, (const float *)s.up(logits), s.d.up(tg), n, Vp, V);
                          return ::down(l, 1);
                      }),
                      loss);
                for (int acc = 0; acc < 2; acc++) {
                    Vec g0 = acc ? in(n * Vp) : nan_vec(n * Vp), wg = g0;
                    cpu_crossentropy_bwd(wg.data(), dloss.data(), logits.data(), tg.data(), n, Vp, V, acc);
                    NAME("vectors crossentropy_bwd %s pad%d Vp%ld acc%d", ty, pad, Vp, acc);
                    close(name, run_gpu(name, [&] {
                              VStore s{(bool)bf, pad, {}};
                              void *g = s.up(g0);
                              if (bf)
                                  gc_crossentropy_bwd_bf16((gc_bf16 *)g, s.upf(dloss), (const gc_bf16 *)s.up(logits),
                                                           s.d.up(tg), n, Vp, V, acc);
                              else
                                  gc_crossentropy_bwd((float *)g, s.upf(dloss), (const float *)s.up(logits), s.d.up(tg),
                                                      n, Vp, V, acc);
                              return s.down(g, n * Vp);
                          }),
                          out(wg), tol);
                }
            }
            /* column sums (bias gradients): 300 rows (3 chunks), cols 44 and 48; the
             * chunks added by the last block, then by the second kernel (1 tile
             * allowed): the same bits */
            for (long cols : {44L, 48L, 200L})
                for (int acc = 0; acc < 2; acc++) {
                    long rows = 300;
                    Vec x = in(rows * cols), o0 = rand_vec(cols), want = o0;
                    cpu_reduce_rows(want.data(), x.data(), rows, cols, acc);
                    Vec got[2];
                    for (int two = 0; two < 2; two++) {
                        gc_cuda_colsum_max_tiles(two);
                        NAME("vectors reduce_rows %s pad%d cols%ld acc%d %s", ty, pad, cols, acc,
                             two ? "two kernels" : "one kernel");
                        got[two] = run_gpu(name, [&] {
                            VStore s{(bool)bf, pad, {}};
                            float *o = s.upf(o0);
                            if (bf)
                                gc_reduce_rows_bf16(o, (const gc_bf16 *)s.up(x), rows, cols, acc);
                            else
                                gc_reduce_rows(o, (const float *)s.up(x), rows, cols, acc);
                            return ::down(o, cols);
                        });
                        close(name, got[two], want);
                    }
                    gc_cuda_colsum_max_tiles(0);
                    same_bits(name, got[0], got[1]);
                }
            /* permute (B, T, NH, hs) -> (B, NH, T, hs), hs 16 (vectors) and 6, acc 0 and 1 */
            for (long hs : {16L, 6L})
                for (int acc = 0; acc < 2; acc++) {
                    std::vector<long> shape = {3, 5, 2, hs};
                    std::vector<int> perm = {0, 2, 1, 3};
                    long n = 3 * 5 * 2 * hs;
                    Vec x = in(n), o0 = acc ? in(n) : nan_vec(n), want = o0;
                    cpu_permute(want.data(), x.data(), 4, shape.data(), perm.data(), acc);
                    NAME("vectors permute %s pad%d hs%ld acc%d", ty, pad, hs, acc);
                    close(name, run_gpu(name, [&] {
                              VStore s{(bool)bf, pad, {}};
                              void *o = s.up(o0);
                              if (bf)
                                  gc_permute_bf16((gc_bf16 *)o, (const gc_bf16 *)s.up(x), 4, shape.data(), perm.data(),
                                                  acc);
                              else
                                  gc_permute((float *)o, (const float *)s.up(x), 4, shape.data(), perm.data(), acc);
                              return s.down(o, n);
                          }),
                          out(want), acc ? tol : 0.0f);
                }
            /* embedding forward and backward (acc 0, 1), C 48 (vectors) and 44 */
            for (long C : {48L, 44L}) {
                long n = 37, rows = 20;
                IVec idx = rand_idx(n, (int32_t)rows);
                Vec table = in(rows * C), fw(n * C);
                cpu_embedding_fwd(fw.data(), idx.data(), table.data(), n, rows, C);
                NAME("vectors embedding_fwd %s pad%d C%ld", ty, pad, C);
                close(name, run_gpu(name, [&] {
                          VStore s{(bool)bf, pad, {}};
                          void *o = s.up(nan_vec(n * C));
                          if (bf)
                              gc_embedding_fwd_bf16((gc_bf16 *)o, s.d.up(idx), (const gc_bf16 *)s.up(table), n, rows, C);
                          else
                              gc_embedding_fwd((float *)o, s.d.up(idx), (const float *)s.up(table), n, rows, C);
                          return s.down(o, n * C);
                      }),
                      fw, 0.0f);
                Vec dout = in(n * C);
                for (int acc = 0; acc < 2; acc++) {
                    Vec t0 = acc ? rand_vec(rows * C) : nan_vec(rows * C), bw = acc ? t0 : Vec(rows * C, 0.0f);
                    cpu_embedding_bwd(bw.data(), dout.data(), idx.data(), n, rows, C, acc);
                    NAME("vectors embedding_bwd %s pad%d C%ld acc%d", ty, pad, C, acc);
                    close(name, run_gpu(name, [&] {
                              VStore s{(bool)bf, pad, {}};
                              float *t = s.upf(t0);
                              if (bf)
                                  gc_embedding_bwd_bf16(t, (const gc_bf16 *)s.up(dout), s.d.up(idx), n, rows, C, acc);
                              else
                                  gc_embedding_bwd(t, (const float *)s.up(dout), s.d.up(idx), n, rows, C, acc);
                              return ::down(t, rows * C);
                          }),
                          bw);
                }
            }
            /* gradient norm and clipping scale (fp32 only): 1003 elements */
            if (!bf) {
                long n = 1003;
                Vec x = rand_vec(n, -3.0f, 3.0f), want = x;
                double ss = 0;
                for (float v : x)
                    ss += (double)v * v;
                for (float &v : want)
                    v *= 0.7f;
                double got_ss = 0;
                NAME("vectors sumsq/scale pad%d", pad);
                close(name, run_gpu(name, [&] {
                          Dev d;
                          float *dx = d.up(x, pad);
                          got_ss = gc_device_sumsq(dx, n);
                          gc_device_scale(dx, n, 0.7f);
                          return down(dx, n);
                      }),
                      want, 0.0f);
                checks++;
                if (!(fabs(got_ss - ss) <= 1e-12 * ss)) {
                    printf("FAIL %s: sum of squares %.17g, want %.17g\n", name, got_ss, ss);
                    failures++;
                }
            }
            /* the device total over several tensors (one wait per step's norm): the same
             * bits as adding the tensors' gc_device_sumsq in order, also when one takes
             * every block (300001 elements) and one starts misaligned; a reset then
             * nothing reads 0, and the add after a reset overwrites */
            if (!bf && pad == 0) {
                Vec a = rand_vec(300001, -2.0f, 2.0f), b = rand_vec(1003), c = rand_vec(17);
                Dev d;
                float *da = d.up(a), *db = d.up(b, 1), *dc = d.up(c);
                double want = 0;
                want += gc_device_sumsq(da, (long)a.size());
                want += gc_device_sumsq(db, (long)b.size());
                want += gc_device_sumsq(dc, (long)c.size());
                gc_device_sumsq_reset();
                double none = gc_device_sumsq_read();
                gc_device_sumsq_add(dc, (long)c.size());   /* then reset: must not count */
                gc_device_sumsq_reset();
                gc_device_sumsq_add(da, (long)a.size());
                gc_device_sumsq_add(db, (long)b.size());
                gc_device_sumsq_add(dc, (long)c.size());
                double got = gc_device_sumsq_read(), on_dev = 0;
                gc_device_download(&on_dev, gc_device_sumsq_total_ptr(), sizeof on_dev);
                checks++;
                if (!(got == want && on_dev == want && none == 0.0)) {
                    printf("FAIL vectors sumsq total: %.17g (on the device %.17g; after a reset %g), want %.17g\n",
                           got, on_dev, none, want);
                    failures++;
                }
            }
            /* AdamW: 1003 elements (a tail of 3), the bf16 copy when bf */
            {
                long n = 1003;
                Vec p = rand_vec(n), g = rand_vec(n), m = rand_vec(n, -0.1f, 0.1f), v = rand_vec(n, 0.0f, 0.01f);
                Vec wp = p, wm = m, wv = v;
                cpu_adamw(wp.data(), g.data(), wm.data(), wv.data(), n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 4);
                NAME("vectors adamw %s pad%d", ty, pad);
                int bad_copy = 0;
                close(name, run_gpu(name, [&] {
                          Dev d;
                          float *dp = d.up(p, pad), *dm = d.up(m, pad), *dv = d.up(v, pad);
                          gc_bf16 *pc = bf ? d.up(to_bf(nan_vec(n)), pad) : NULL;
                          gc_adamw_bf16(dp, pc, d.up(g, pad), dm, dv, n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 4);
                          Vec got_p = down(dp, n);
                          if (pc && down_bf(pc, n) != round_bf(got_p))
                              bad_copy++;
                          return cat({got_p, down(dm, n), down(dv, n)});
                      }),
                      cat({wp, wm, wv}));
                checks++;
                if (bad_copy) {
                    printf("FAIL %s: the bf16 copy is not the rounded parameter\n", name);
                    failures++;
                }
            }
        }
}

/* ---------------------------------------------------------------- errors */

/* A bad index or target: exit 1 at the next gc_device_sync with the CPU
 * kernel's message. */
/* ---------------------------------------------------------------- mma */
/* The tensor-core helpers of runtime/cuda/gc_mma.h (and their emulation,
 * tests/cuda/shim/gcemu_ptx.h) against the PTX ISA's fragment tables: one
 * warp computes c + a b with fragments built by the tables, and again from
 * shared memory through cp.async and ldmatrix (plain and .trans); each must
 * equal the plain matrix product (fp32 sums of 16 exact bf16 products: within
 * 16 fp32 roundings, 1e-5 of the scale), and each ldmatrix register must
 * hold exactly the two bf16 the table names. A layout the emulator got wrong
 * would fail here under the emulator; on a GPU the same test checks the
 * tables against the hardware. */
static uint32_t bf_bits(float x)
{
    gc_bf16 b = __float2bfloat16(x);
    uint16_t u;
    memcpy(&u, &b, 2);
    return u;
}

static void test_mma()
{
    if (gc_cuda_cc_major() < 8) {
        printf("mma: skipped (sm_%d0: no bf16 mma.sync)\n", gc_cuda_cc_major());
        return;
    }
    char name[160];
    for (int rep = 0; rep < 3; rep++) {
        Vec a = round_bf(rand_vec(256, -2, 2)), b = round_bf(rand_vec(128, -2, 2)), c = rand_vec(128), bnk(128);
        if (rep == 2)   /* integers: every sum exact, so the products must match bit for bit */
            for (Vec *v : {&a, &b, &c})
                for (float &x : *v)
                    x = (float)(int)(x * 4);
        for (int k = 0; k < 16; k++)
            for (int n = 0; n < 8; n++)
                bnk[n * 16 + k] = b[k * 8 + n];
        Vec want(128);
        for (int i = 0; i < 16; i++)
            for (int n = 0; n < 8; n++) {
                double s = c[i * 8 + n];
                for (int k = 0; k < 16; k++)
                    s += (double)a[i * 16 + k] * b[k * 8 + n];
                want[i * 8 + n] = (float)s;
            }
        std::vector<uint32_t> raw;
        NAME("mma m16n8k16 case %d", rep);
        Vec got = run_gpu(name, [&] {
            Dev d;
            float *dd = d.up(nan_vec(384));
            uint32_t *dr = d.up(std::vector<uint32_t>(32 * 12, 0xdeadbeefu));
            gc_cuda_mma_selftest(dd, dr, d.up(to_bf(a)), d.up(to_bf(b)), d.up(to_bf(bnk)), d.up(c));
            raw = down(dr, 32 * 12);
            Vec r = down(dd, 384);
            for (uint32_t w : raw)   /* the registers join the bits compared across runs */
                r.push_back((float)(w & 0xffffu) + 65536.0f * (float)(w >> 16));
            return r;
        });
        const char *how[3] = {"fragments by the table", "ldmatrix a, ldmatrix.trans b", "ldmatrix a, ldmatrix b^T"};
        for (int m = 0; m < 3; m++) {
            NAME("mma m16n8k16 case %d: %s", rep, how[m]);
            Vec dm(got.begin() + m * 128, got.begin() + (m + 1) * 128);
            if (rep == 2)
                same_bits(name, dm, want);
            else
                close(name, dm, want, 1e-5f);
        }
        /* ldmatrix registers: lane L, register j holds (lo, hi) */
        int bad = 0;
        for (int L = 0; L < 32; L++)
            for (int j = 0; j < 4; j++) {
                int r0 = 8 * (j % 2), c0 = 8 * (j / 2), rl = L / 4, cl = 2 * (L % 4);
                uint32_t plain = bf_bits(a[(r0 + rl) * 16 + c0 + cl]) | bf_bits(a[(r0 + rl) * 16 + c0 + cl + 1]) << 16;
                uint32_t trans = bf_bits(a[(r0 + cl) * 16 + c0 + rl]) | bf_bits(a[(r0 + cl + 1) * 16 + c0 + rl]) << 16;
                uint32_t bt = bf_bits(b[(r0 + cl) * 8 + rl]) | bf_bits(b[(r0 + cl + 1) * 8 + rl]) << 16;
                bad += raw[L * 12 + j] != plain;
                bad += raw[L * 12 + 4 + j] != trans;
                bad += raw[L * 12 + 8 + j] != bt;
            }
        checks++;
        if (bad) {
            printf("FAIL mma case %d: %d ldmatrix registers differ from the PTX table\n", rep, bad);
            failures++;
        }
    }
}

/* ---------------------------------------------------------------- attention */

/* x as GPT-2's qkv (B, T, 3, NH, hs); y (B, T, NH, hs) or (B, NH, T, hs) */
static void att_geom(long *g, long B, long NH, long T, long hs, int heads_out)
{
    long C = NH * hs;
    long v[12] = {B, NH, T, hs, T * 3 * C, hs, 3 * C, C, 2 * C, 0, 0, 0};
    if (heads_out)
        v[9] = T * C, v[10] = hs, v[11] = C;
    else
        v[9] = NH * T * hs, v[10] = T * hs, v[11] = hs;
    memcpy(g, v, sizeof v);
}

/* ---------------------------------------------------------------- bias + GELU */
/* fuse_gelu.c's ops against the CPU kernels, fp32 and bf16: the cuBLASLt
 * GELU_AUX_BIAS / DGELU epilogues (N a multiple of 8, aligned bias and pre),
 * and the two-kernel path (N = 13, or pre 4-byte aligned). Under the
 * emulator the forward's epilogue path must be one cuBLASLt call and no
 * kernel; the backward is one call and one kernel (the recomputed GELU). */
static void test_gelu()
{
    struct { long M, N, K; int ta, tb; } shapes[] = {{5, 8, 3, 0, 1}, {33, 48, 65, 0, 0}, {17, 13, 9, 0, 1},
                                                      {64, 96, 32, 1, 0}};
    char name[160];
    for (auto s : shapes)
        for (int pad = 0; pad < 2; pad++)
            for (int bf = 0; bf < 2; bf++) {
                long n = s.M * s.N;
                Vec a = rand_bf(s.M * s.K, -2, 2), b = rand_bf(s.K * s.N, -2, 2), bias = rand_bf(s.N);
                Vec hw(n), pw(n), dy = rand_bf(s.M * s.K), dw(n), hre(n);
                cpu_matmul_bias_gelu(hw.data(), pw.data(), a.data(), b.data(), bias.data(), 1, s.M, s.N, s.K, s.ta,
                                     s.tb);
                Vec pre = bf ? round_bf(pw) : pw;
                /* backward shape: dpre (M x N) = dy (M x K) @ op(w), w stored as b */
                cpu_matmul_dgelu(dw.data(), hre.data(), dy.data(), b.data(), pre.data(), 1, s.M, s.N, s.K, 0, s.tb);
                int epi = s.N % 8 == 0 && !pad;
                float tol = bf ? BF16_TOL : 1e-5f;
                NAME("matmul_bias_gelu%s M%ld N%ld K%ld ta%d tb%d pad%d", bf ? "_bf16" : "", s.M, s.N, s.K, s.ta,
                     s.tb, pad);
                long l0 = 0, m0 = 0;
                Vec got = run_gpu(name, [&] {
                    Dev d;
#ifdef GCEMU
                    l0 = gcemu_launch_count(), m0 = gcemu_lt_matmuls;
#endif
                    Vec out(2 * n);
                    if (bf) {
                        gc_bf16 *h = d.up(to_bf(nan_vec(n))), *p = d.up(to_bf(nan_vec(n)), pad);
                        gc_matmul_bias_gelu_bf16(h, p, d.up(to_bf(a)), d.up(to_bf(b)), d.up(to_bf(bias)), 1, s.M, s.N,
                                                 s.K, s.ta, s.tb);
                        Vec hh = down_bf(h, n), pp = down_bf(p, n);
                        std::copy(hh.begin(), hh.end(), out.begin());
                        std::copy(pp.begin(), pp.end(), out.begin() + n);
                    } else {
                        float *h = d.up(nan_vec(n)), *p = d.up(nan_vec(n), pad);
                        gc_matmul_bias_gelu(h, p, d.up(a), d.up(b), d.up(bias), 1, s.M, s.N, s.K, s.ta, s.tb);
                        Vec hh = down(h, n), pp = down(p, n);
                        std::copy(hh.begin(), hh.end(), out.begin());
                        std::copy(pp.begin(), pp.end(), out.begin() + n);
                    }
#ifdef GCEMU
                    l0 = gcemu_launch_count() - l0, m0 = gcemu_lt_matmuls - m0;
#endif
                    return out;
                });
                Vec want(2 * n);
                std::copy(hw.begin(), hw.end(), want.begin());
                std::copy(pw.begin(), pw.end(), want.begin() + n);
                close(name, got, bf ? round_bf(want) : want, tol);
#ifdef GCEMU
                checks++;
                if (m0 != 1 || l0 != (epi ? 0 : 1)) {
                    printf("FAIL %s: %ld cuBLASLt calls and %ld kernels, want 1 and %d\n", name, m0, l0, epi ? 0 : 1);
                    failures++;
                }
#endif
                NAME("matmul_dgelu%s M%ld N%ld K%ld tb%d pad%d", bf ? "_bf16" : "", s.M, s.N, s.K, s.tb, pad);
                got = run_gpu(name, [&] {
                    Dev d;
#ifdef GCEMU
                    l0 = gcemu_launch_count(), m0 = gcemu_lt_matmuls;
#endif
                    Vec out;
                    if (bf) {
                        gc_bf16 *o = d.up(to_bf(nan_vec(n))), *hr = d.up(to_bf(nan_vec(n)));
                        gc_matmul_dgelu_bf16(o, hr, d.up(to_bf(dy)), d.up(to_bf(b)), d.up(to_bf(pre), pad), 1, s.M,
                                             s.N, s.K, 0, s.tb);
                        out = cat({down_bf(o, n), down_bf(hr, n)});
                    } else {
                        float *o = d.up(nan_vec(n)), *hr = d.up(nan_vec(n));
                        gc_matmul_dgelu(o, hr, d.up(dy), d.up(b), d.up(pre, pad), 1, s.M, s.N, s.K, 0, s.tb);
                        out = cat({down(o, n), down(hr, n)});
                    }
#ifdef GCEMU
                    l0 = gcemu_launch_count() - l0, m0 = gcemu_lt_matmuls - m0;
#endif
                    return out;
                });
                close(name, got, bf ? round_bf(cat({dw, hre})) : cat({dw, hre}), bf ? 2 * BF16_TOL : 1e-5f);
#ifdef GCEMU
                checks++;
                if (m0 != 1 || l0 != 1) {   /* DGELU + GELU kernel, or matmul + one kernel */
                    printf("FAIL %s: %ld cuBLASLt calls and %ld kernels, want 1 and 1\n", name, m0, l0);
                    failures++;
                }
#endif
            }
#ifdef GCEMU
    /* a heuristic that answers INVALID_VALUE for the GELU epilogue (some cuBLASLt versions): the
     * plain matmul and the GELU kernel, the same results, no exit */
    {
        long M = 5, N = 8, K = 3, n = M * N;
        Vec a = rand_vec(M * K), b = rand_vec(N * K), bias = rand_vec(N), hw(n), pw(n);
        cpu_matmul_bias_gelu(hw.data(), pw.data(), a.data(), b.data(), bias.data(), 1, M, N, K, 0, 1);
        gc_cuda_matmul_cache_clear();
        gcemu_lt_gelu_status = CUBLAS_STATUS_INVALID_VALUE;
        long l0 = 0, m0 = 0;   /* of the last run */
        Vec got = run_gpu("matmul_bias_gelu heuristic INVALID_VALUE", [&] {
            Dev d;
            float *h = d.up(nan_vec(n)), *p = d.up(nan_vec(n));
            l0 = gcemu_launch_count(), m0 = gcemu_lt_matmuls;
            gc_matmul_bias_gelu(h, p, d.up(a), d.up(b), d.up(bias), 1, M, N, K, 0, 1);
            l0 = gcemu_launch_count() - l0, m0 = gcemu_lt_matmuls - m0;
            return cat({down(h, n), down(p, n)});
        });
        gcemu_lt_gelu_status = CUBLAS_STATUS_SUCCESS;
        gc_cuda_matmul_cache_clear();
        close("matmul_bias_gelu heuristic INVALID_VALUE", got, cat({hw, pw}), 1e-5f);
        checks++;
        if (m0 != 1 || l0 != 1) {
            printf("FAIL matmul_bias_gelu heuristic INVALID_VALUE: %ld cuBLASLt calls and %ld kernels, want 1 and 1\n",
                   m0, l0);
            failures++;
        }
    }
#endif
}

/* ---------------------------------------------------------------- bias gradient in the dgelu matmul */
/* cuBLASLt's DGELU_BGRAD epilogue itself (the shim on the emulator, the
 * library on a GPU), on the layout kernels_cuda.cu uses (D = N x M col-major,
 * aux = pre with D's layout): D = gelu'(aux) * (A B) and the bias gradient =
 * per row of D (our column n) the sum over D's M columns, OVERWRITING the
 * vector (it starts as NaN), against a CPU reference in double. Under the
 * emulator also what the library refuses: no bias pointer, a bias gradient
 * type other than D's (fp32 for a bf16 D), a bias under 16-byte aligned. */
static void lt_dgelu_bgrad_case(int bf, long M, long N, long K)
{
    char name[160];
    NAME("lt DGELU_BGRAD%s M%ld N%ld K%ld", bf ? " bf16" : "", M, N, K);
    Vec a = rand_bf(M * K), w = rand_bf(K * N), pre = rand_bf(M * N, -3, 3);
    Vec want(M * N), wantdb(N, 0.0f);
    for (long m = 0; m < M; m++)   /* dpre (M x N, row-major) = a (M x K) @ w (K x N), times gelu'(pre) */
        for (long n = 0; n < N; n++) {
            double s = 0;
            for (long k = 0; k < K; k++)
                s += (double)a[m * K + k] * w[k * N + n];
            float p = pre[m * N + n], c = 0.044715f * p * p * p, th = tanhf(0.7978845608028654f * (p + c));
            float dg = 0.5f * (1.0f + th) + p * 0.5f * (1.0f - th * th) * 0.7978845608028654f *
                                                (1.0f + 3.0f * 0.044715f * p * p);
            want[m * N + n] = (float)s * dg;
        }
    for (long n = 0; n < N; n++) {
        double s = 0;
        for (long m = 0; m < M; m++)
            s += want[m * N + n];
        wantdb[n] = (float)s;
    }
    cudaDataType_t t = bf ? CUDA_R_16BF : CUDA_R_32F;
    size_t es = bf ? 2 : 4;
    cublasLtHandle_t h;
    GC_CUBLAS_CHECK(cublasLtCreate(&h));
    Dev d;
    void *da, *dw, *dpre, *dd, *ddb;
    if (bf) {
        da = d.up(to_bf(a)), dw = d.up(to_bf(w)), dpre = d.up(to_bf(pre));
        dd = d.up(to_bf(nan_vec(M * N))), ddb = d.up(to_bf(nan_vec(N)));
    } else {
        da = d.up(a), dw = d.up(w), dpre = d.up(pre), dd = d.up(nan_vec(M * N)), ddb = d.up(nan_vec(N));
    }
    /* Lt A = w (N x K col-major, ld N), Lt B = a (K x M, ld K), D = N x M (ld N) */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    GC_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    int32_t epi = CUBLASLT_EPILOGUE_DGELU_BGRAD;
    int64_t ld = N;
    GC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    GC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &dpre, sizeof dpre));
    GC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
    GC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ddb, sizeof ddb));
    GC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, t, N, K, N));
    GC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, t, K, M, K));
    GC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, t, N, M, N));
    cublasLtMatmulPreference_t pref;
    GC_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = 0;
    GC_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, 1, &res, &nres);
    const float one = 1.0f, zero = 0.0f;
    checks++;
    if (st != CUBLAS_STATUS_SUCCESS || nres < 1) {
        printf("%s %s: no algorithm (%s)\n", st == CUBLAS_STATUS_NOT_SUPPORTED ? "SKIP" : "FAIL", name,
               cublasLtGetStatusString(st));
        failures += st != CUBLAS_STATUS_NOT_SUPPORTED;
    } else {
        for (int rep = 0; rep < 2; rep++)   /* twice: the second overwrites the first's sums */
            GC_CUBLAS_CHECK(cublasLtMatmul(h, desc, &one, dw, la, da, lb, &zero, dd, lc, dd, lc, &res.algo, NULL, 0,
                                           gc_stream));
        gc_device_sync();
        Vec got = bf ? down_bf((const gc_bf16 *)dd, M * N) : down((const float *)dd, M * N);
        Vec gotdb = bf ? down_bf((const gc_bf16 *)ddb, N) : down((const float *)ddb, N);
        float tol = bf ? 2 * BF16_TOL : 1e-5f;
        close(name, got, bf ? round_bf(want) : want, tol);
        NAME("lt DGELU_BGRAD%s M%ld N%ld K%ld: bias gradient", bf ? " bf16" : "", M, N, K);
        close(name, gotdb, bf ? round_bf(wantdb) : wantdb, tol);
#ifdef GCEMU
        /* what the real library refuses: no bias gradient pointer; fp32 bias gradient for a bf16 D */
        void *none = NULL;
        GC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &none, sizeof none));
        checks++;
        if (cublasLtMatmul(h, desc, &one, dw, la, da, lb, &zero, dd, lc, dd, lc, &res.algo, NULL, 0, gc_stream) !=
            CUBLAS_STATUS_INVALID_VALUE) {
            printf("FAIL %s: DGELU_BGRAD without a bias pointer accepted\n", name);
            failures++;
        }
        GC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ddb, sizeof ddb));
        int32_t other = bf ? CUDA_R_32F : CUDA_R_16BF;
        GC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &other, 4));
        checks++;
        if (cublasLtMatmul(h, desc, &one, dw, la, da, lb, &zero, dd, lc, dd, lc, &res.algo, NULL, 0, gc_stream) !=
            CUBLAS_STATUS_INVALID_VALUE) {
            printf("FAIL %s: a bias gradient of another type than D accepted\n", name);
            failures++;
        }
        int32_t dflt = -1;
        GC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &dflt, 4));
        char *mis = (char *)ddb + es;   /* under 16-byte aligned: the heuristic has no algorithm */
        GC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &mis, sizeof mis));
        checks++;
        if (cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, 1, &res, &nres) !=
            CUBLAS_STATUS_NOT_SUPPORTED) {
            printf("FAIL %s: a bias gradient %zu bytes past 16-byte alignment accepted\n", name, es);
            failures++;
        }
#else
        (void)es;
#endif
    }
    GC_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    GC_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(la));
    GC_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(lb));
    GC_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(lc));
    GC_CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
    GC_CUBLAS_CHECK(cublasLtDestroy(h));
}

/* gc_matmul_dgelu_bgrad (fuse_bgrad.c's op) against the CPU kernel
 * (matmul_dgelu + reduce_rows), fp32 and bf16, db overwritten (acc 0) and
 * accumulated (acc 4, a micro-batch after the first; db starts random): dpre,
 * h and db. Under the emulator the DGELU_BGRAD epilogue must be taken
 * exactly where kernels_cuda.cu says it applies (fp32, acc 0, N a multiple
 * of 8, pre and db 16-byte aligned): one cuBLASLt call with that epilogue and
 * one kernel (the recomputed GELU); elsewhere no such epilogue and at least
 * one kernel more (the column sum). */
static void test_gelu_bgrad()
{
    for (int bf = 0; bf < 2; bf++) {
        lt_dgelu_bgrad_case(bf, 33, 48, 65);
        lt_dgelu_bgrad_case(bf, 1, 8, 3);
        lt_dgelu_bgrad_case(bf, 130, 16, 7);
    }
    struct { long M, N, K; int tb; } shapes[] = {{5, 8, 3, 1}, {33, 48, 65, 0}, {17, 13, 9, 1}, {300, 64, 32, 0}};
    char name[160];
    for (size_t ws : ws_sizes) {
        set_ws(ws);
        for (auto s : shapes)
            for (int pad = 0; pad < 3; pad++)   /* 1: pre 4 bytes off; 2: db 4 bytes off */
                for (int acc = 0; acc <= 4; acc += 4)
                    for (int bf = 0; bf < 2; bf++) {
                        long n = s.M * s.N;
                        Vec dy = rand_bf(s.M * s.K), w = rand_bf(s.K * s.N), pre = rand_bf(n, -3, 3);
                        Vec db0 = rand_vec(s.N), dw(n), hre(n), wdb = db0;
                        cpu_matmul_dgelu_bgrad(dw.data(), hre.data(), wdb.data(), dy.data(), w.data(), pre.data(), 1,
                                               s.M, s.N, s.K, 0, s.tb, acc);
                        int epi = !bf && !acc && s.N % 8 == 0 && !pad;
                        NAME("matmul_dgelu_bgrad%s M%ld N%ld K%ld tb%d pad%d acc%d ws%zu", bf ? "_bf16" : "", s.M,
                             s.N, s.K, s.tb, pad, acc, ws);
                        long l0 = 0, m0 = 0, e0 = 0;
                        Vec got = run_gpu(name, [&] {
                            Dev d;
#ifdef GCEMU
                            l0 = gcemu_launch_count(), m0 = gcemu_lt_matmuls, e0 = gcemu_lt_bgrads;
#endif
                            Vec out;
                            float *db = d.up(db0, pad == 2);
                            if (bf) {
                                gc_bf16 *o = d.up(to_bf(nan_vec(n))), *hr = d.up(to_bf(nan_vec(n)));
                                gc_matmul_dgelu_bgrad_bf16(o, hr, db, d.up(to_bf(dy)), d.up(to_bf(w)),
                                                           d.up(to_bf(pre), pad == 1), 1, s.M, s.N, s.K, 0, s.tb,
                                                           acc);
                                out = cat({down_bf(o, n), down_bf(hr, n), down(db, s.N)});
                            } else {
                                float *o = d.up(nan_vec(n)), *hr = d.up(nan_vec(n));
                                gc_matmul_dgelu_bgrad(o, hr, db, d.up(dy), d.up(w), d.up(pre, pad == 1), 1, s.M, s.N,
                                                      s.K, 0, s.tb, acc);
                                out = cat({down(o, n), down(hr, n), down(db, s.N)});
                            }
#ifdef GCEMU
                            l0 = gcemu_launch_count() - l0, m0 = gcemu_lt_matmuls - m0, e0 = gcemu_lt_bgrads - e0;
#endif
                            return out;
                        });
                        float tol = bf ? 2 * BF16_TOL : 1e-5f;
                        close(name, Vec(got.begin(), got.begin() + 2 * n), bf ? round_bf(cat({dw, hre})) : cat({dw, hre}),
                              tol);
                        /* db: fp32 sums of (bf16) dpre; the CPU's are of its fp32 dpre */
                        close(name, Vec(got.begin() + 2 * n, got.end()), wdb, bf ? 2 * BF16_TOL : 1e-5f);
#ifdef GCEMU
                        checks++;
                        if (m0 != 1 || e0 != epi || (epi ? l0 != 1 : l0 < 2)) {
                            printf("FAIL %s: %ld cuBLASLt calls (%ld DGELU_BGRAD) and %ld kernels, want 1 (%d) and %s\n",
                                   name, m0, e0, l0, epi, epi ? "1" : "2 or more");
                            failures++;
                        }
#endif
                    }
    }
    set_ws(GC_CUDA_WORKSPACE_BYTES);
}

/* ---------------------------------------------------------------- residual + layernorm */
/* fuse_layernorm.c's op against the CPU kernel, fp32 and bf16: the vector
 * path (C a multiple of the vector, aligned rows), the scalar path (odd C,
 * or ra 4 bytes off), and x in place over ra. */
static void test_add_layernorm()
{
    struct { long N, C; } shapes[] = {{1, 1}, {9, 31}, {20, 64}, {7, 256}};
    char name[160];
    for (auto s : shapes)
        for (int pad = 0; pad < 2; pad++)
            for (int inplace = 0; inplace < 2; inplace++)
                for (int bf = 0; bf < 2; bf++) {
                    long N = s.N, C = s.C, n = N * C;
                    Vec ra = rand_bf(n, -2, 3), rb = rand_bf(n, -2, 2), w = rand_bf(C), b = rand_bf(C);
                    Vec x(n), out(n), mean(N), rstd(N);
                    cpu_add_layernorm_fwd(x.data(), out.data(), mean.data(), rstd.data(), ra.data(), rb.data(),
                                          w.data(), b.data(), N, C, 1e-5f);
                    if (bf) {   /* the GPU rounds x to bf16 before normalising it */
                        x = round_bf(x);
                        cpu_layernorm_fwd(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                                          1e-5f);
                    }
                    NAME("add_layernorm_fwd%s %ldx%ld pad%d inplace%d", bf ? "_bf16" : "", N, C, pad, inplace);
                    Vec got = run_gpu(name, [&] {
                        Dev d;
                        float *m = d.up(nan_vec(N)), *r = d.up(nan_vec(N));
                        if (bf) {
                            gc_bf16 *a = d.up(to_bf(ra), pad), *xx = inplace ? a : d.up(to_bf(nan_vec(n)));
                            gc_bf16 *o = d.up(to_bf(nan_vec(n)));
                            gc_add_layernorm_fwd_bf16(xx, o, m, r, a, d.up(to_bf(rb)), d.up(to_bf(w)), d.up(to_bf(b)), N,
                                                      C, 1e-5f);
                            return cat({down_bf(xx, n), down_bf(o, n), down(m, N), down(r, N)});
                        }
                        float *a = d.up(ra, pad), *xx = inplace ? a : d.up(nan_vec(n)), *o = d.up(nan_vec(n));
                        gc_add_layernorm_fwd(xx, o, m, r, a, d.up(rb), d.up(w), d.up(b), N, C, 1e-5f);
                        return cat({down(xx, n), down(o, n), down(m, N), down(r, N)});
                    });
                    Vec want = cat({bf ? x : x, bf ? round_bf(out) : out, mean, rstd});
                    close(name, got, want, bf ? BF16_TOL : 1e-5f);
                }
}

#ifndef GCEMU
/* On a GPU only: bf16 attention at GPT-2 124M's shape (B=8, NH=12, T=1024,
 * hs=64), forward + backward, tensor cores (mma.sync) against the SIMT path:
 * ms per call (mean of 5 after a warm-up) and the largest difference of the
 * two outputs relative to the largest |y| or |dx|. Printed, not checked
 * (tests/gpu/run.sh copies the line into its summary). */
static void time_attention()
{
    const long B = 8, NH = 12, T = 1024, hs = 64, nx = B * T * 3 * NH * hs, ny = B * NH * T * hs;
    long geom[12];
    att_geom(geom, B, NH, T, hs, 1);
    float scale = 1.0f / sqrtf((float)hs);
    Dev d;
    gc_bf16 *x = d.up(to_bf(rand_vec(nx, -2.0f, 2.0f))), *dy = d.up(to_bf(rand_vec(ny)));
    gc_bf16 *y = d.up(to_bf(Vec(ny))), *dx = d.up(to_bf(Vec(nx)));
    float *lse = d.up(Vec(B * NH * T));
    double ms[2][2];
    Vec out[2][2];
    for (int tc = 0; tc < 2; tc++) {
        gc_cuda_set_attention_wmma(tc);
        for (int bwd = 0; bwd < 2; bwd++) {
            auto call = [&] {
                if (bwd)
                    gc_attention_bwd_bf16(dx, dy, x, y, lse, geom, scale, 0);
                else
                    gc_attention_fwd_bf16(y, lse, x, geom, scale);
            };
            call();
            gc_device_sync();
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            for (int r = 0; r < 5; r++)
                call();
            gc_device_sync();
            clock_gettime(CLOCK_MONOTONIC, &t1);
            ms[tc][bwd] = ((t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6) / 5;
            out[tc][bwd] = bwd ? down_bf(dx, nx) : down_bf(y, ny);
        }
    }
    gc_cuda_set_attention_wmma(1);
    double diff[2] = {0, 0};
    for (int bwd = 0; bwd < 2; bwd++) {
        float top = 0, worst = 0;
        for (size_t i = 0; i < out[0][bwd].size(); i++) {
            top = fmaxf(top, fabsf(out[0][bwd][i]));
            worst = fmaxf(worst, fabsf(out[1][bwd][i] - out[0][bwd][i]));
        }
        diff[bwd] = top > 0 ? worst / top : worst;
    }
    printf("attention bf16 B8 NH12 T1024 hs64: fwd %.3f ms tensor cores, %.3f ms simt (%.2fx); bwd %.3f ms tensor "
           "cores, %.3f ms simt (%.2fx); max |tc - simt| / max: fwd %.2g, bwd %.2g\n",
           ms[1][0], ms[0][0], ms[0][0] / ms[1][0], ms[1][1], ms[0][1], ms[0][1] / ms[1][1], diff[0], diff[1]);
}
#endif

/* Workspace variants of the tensor-core backward, which must give the same
 * bits: the full workspace (D of every row in it, one chunk of heads), room
 * for D of one kv head's rows with one head per launch (chunked launches),
 * and none (each dk/dv block computes D of its tiles' rows itself). */
static const int ATT_WS_VARIANTS = 3;
static void att_ws_variant(int v, size_t per_head)
{
    gc_cuda_attention_max_heads(v == 1 ? 1 : 0);
    if (v == 0)
        set_ws(GC_CUDA_WORKSPACE_BYTES);
    else
        gc_cuda_set_workspace(v == 1 ? workspace : NULL, v == 1 ? per_head : 0);
}

/* fp32 and bf16 storage against the CPU kernels (bf16: the CPU runs on the
 * bf16-rounded inputs). Tolerance for bf16: y, lse and dx are compared
 * within BF16_TOL = 2^-7 of the output's largest value: one rounding of the
 * output to bf16 (2^-9 relative) plus, on tensor cores, p and ds rounded to
 * bf16 as operands of the products (2^-9 relative each, in sums over at most
 * T terms accumulated in fp32, so at most a few 2^-9 of the scale) and the
 * rounded y the backward reads. bf16 runs twice: on tensor cores
 * (mma.sync, attention_mma.cu) and on the SIMT path
 * (gc_cuda_set_attention_wmma(0)). Head sizes 1..128 are padded to HS
 * (tensor cores: 32, 64, 128); hs 40 and 72 load by 16-byte rows with zero
 * columns, 12, 36, 100 element by element, as does a misaligned x (pad: one
 * element in front); T = 1, 37, 63..67, 70, 130, 200 are not multiples of
 * the 64-row blocks or of the key tiles. The tensor-core backward runs in
 * each workspace variant (att_ws_variant), bit-identical (variants 1 and 2
 * run once: variant 0 ran under every schedule). Under the emulator, bf16
 * on tensor cores must run mma.syncs and the others none. */
static void test_attention()
{
    struct { long B, NH, T, hs; int heads_out, pad; } shapes[] = {
        {1, 1, 1, 1, 1, 0}, {2, 3, 37, 12, 1, 0}, {1, 2, 70, 16, 0, 0}, {1, 1, 33, 64, 1, 0}, {1, 2, 45, 40, 0, 0},
        {1, 1, 20, 128, 1, 0}, {1, 2, 41, 24, 1, 0},
        {1, 1, 1, 64, 0, 0}, {1, 2, 63, 64, 1, 0}, {2, 1, 64, 64, 0, 0}, {1, 2, 65, 64, 1, 0}, {1, 1, 200, 64, 0, 0},
        {1, 1, 65, 128, 0, 0}, {1, 1, 130, 128, 1, 0}, {1, 2, 66, 72, 1, 0}, {1, 1, 67, 36, 0, 0},
        {1, 1, 40, 100, 1, 0}, {1, 2, 65, 64, 1, 1},
    };
    char name[160];
    for (auto s : shapes)
        for (int path = 0; path < 3; path++) {   /* fp32, bf16 on tensor cores, bf16 SIMT */
            int bf = path > 0, tc = path == 1;
            const char *tag = path == 0 ? "" : tc ? "_bf16" : "_bf16 simt";
            gc_cuda_set_attention_wmma(tc);
            long geom[12];
            att_geom(geom, s.B, s.NH, s.T, s.hs, s.heads_out);
            long nx = s.B * s.T * 3 * s.NH * s.hs, ny = s.B * s.NH * s.T * s.hs, nl = s.B * s.NH * s.T;
            float scale = 1.0f / sqrtf((float)s.hs);
            Vec x = rand_vec(nx, -2.0f, 2.0f), dy = rand_vec(ny);
            if (bf)
                x = round_bf(x), dy = round_bf(dy);
            Vec y(ny), lse(nl);
            cpu_attention_fwd(y.data(), lse.data(), x.data(), geom, scale);
            if (bf)
                y = round_bf(y);    /* what the backward reads */
            long mmas = 0;   /* mma.syncs of the last run (emulator only) */
            auto check_mmas = [&] {   /* the tensor-core path ran mma.syncs, the others none */
#ifdef GCEMU
                checks++;
                if ((mmas > 0) != tc) {
                    printf("FAIL %s: %ld mma.syncs, want %s\n", name, mmas, tc ? "some" : "none");
                    failures++;
                }
#endif
            };
            (void)mmas;
            NAME("attention_fwd%s B%ld NH%ld T%ld hs%ld pad%d", tag, s.B, s.NH, s.T, s.hs, s.pad);
            Vec first;
            for (int split = 0; split < 2; split++) {   /* all heads in one launch, then one per launch */
                gc_cuda_attention_max_heads(split);
                Vec got = run_gpu(name, [&] {
                    Dev d;
#ifdef GCEMU
                    long m0 = gcemu_mma_syncs;
#endif
                    float *l = d.up(nan_vec(nl));
                    Vec r;
                    if (bf) {
                        gc_bf16 *o = d.up(to_bf(nan_vec(ny)));
                        gc_attention_fwd_bf16(o, l, d.up(to_bf(x), s.pad), geom, scale);
                        r = cat({down_bf(o, ny), down(l, nl)});
                    } else {
                        float *o = d.up(nan_vec(ny));
                        gc_attention_fwd(o, l, d.up(x, s.pad), geom, scale);
                        r = cat({down(o, ny), down(l, nl)});
                    }
#ifdef GCEMU
                    mmas = gcemu_mma_syncs - m0;
#endif
                    return r;
                });
                if (split)
                    same_bits(name, got, first);
                else
                    close(name, got, cat({y, lse}), bf ? BF16_TOL : 1e-5f);
                first = got;
                check_mmas();
            }
            gc_cuda_attention_max_heads(0);
            for (int acc = 0; acc < 2; acc++) {
                Vec dx0 = acc ? rand_vec(nx) : nan_vec(nx);
                if (bf && acc)
                    dx0 = round_bf(dx0);
                Vec want = dx0;
                cpu_attention_bwd(want.data(), dy.data(), x.data(), y.data(), lse.data(), geom, scale, acc);
                for (int ws = 0; ws < (tc ? ATT_WS_VARIANTS : 1); ws++) {
                    NAME("attention_bwd%s B%ld NH%ld T%ld hs%ld acc%d pad%d ws%d", tag, s.B, s.NH, s.T, s.hs, acc,
                         s.pad, ws);
                    Vec gotb = run_once_or_gpu(ws > 0, name, [&] {
                        Dev d;
                        att_ws_variant(ws, (size_t)s.T * sizeof(float));
#ifdef GCEMU
                        long m0 = gcemu_mma_syncs;
#endif
                        float *l = d.up(lse);
                        Vec r;
                        if (bf) {
                            gc_bf16 *dx = d.up(to_bf(dx0), s.pad);
                            gc_attention_bwd_bf16(dx, d.up(to_bf(dy)), d.up(to_bf(x), s.pad), d.up(to_bf(y)), l,
                                                  geom, scale, acc);
                            r = down_bf(dx, nx);
                        } else {
                            float *dx = d.up(dx0, s.pad);
                            gc_attention_bwd(dx, d.up(dy), d.up(x, s.pad), d.up(y), l, geom, scale, acc);
                            r = down(dx, nx);
                        }
#ifdef GCEMU
                        mmas = gcemu_mma_syncs - m0;
#endif
                        att_ws_variant(0, 0);
                        return r;
                    });
                    if (ws)
                        same_bits(name, gotb, first);
                    else
                        close(name, gotb, want, bf ? BF16_TOL : 1e-5f);
                    first = gotb;
                    check_mmas();
                }
            }
        }
    gc_cuda_set_attention_wmma(1);
#ifndef GCEMU
    time_attention();
#endif
}

/* ---------------------------------------------------------------- rope */
/* gc_rope(_bf16) against norm_rope_cpu.c: positions up to 40,000 (the GPU
 * takes sin and cos of the angle by sincospi, in units of pi; the CPU by
 * sincos), theta 1e4 and 5e5, hs 2-128, forward and inverse, acc 0 and 1.
 * fp32 tolerance 1e-6 of the row scale: the GPU rounds cos and sin to float
 * and forms a c - b s in float (about 5 roundings of 2^-24, 3e-7), where the
 * CPU rounds once from double; the two angles differ by a few double ulps
 * (below 1e-11 at these positions). An angle off by 1e-5 radians is out by
 * 1e-5 of the scale. bf16: the output's rounding (BF16_TOL). */
static void test_rope()
{
    struct { long batch, T, hs; double theta; } shapes[] = {
        {2, 37, 8, 1e4}, {1, 40000, 4, 5e5}, {1, 5, 128, 1e4}, {3, 1, 2, 1e4}, {1, 300, 64, 5e5},
    };
    char name[160];
    for (auto sh : shapes)
        for (int inv = 0; inv < 2; inv++)
            for (int acc = 0; acc < 2; acc++)
                for (int bf = 0; bf < 2; bf++) {
                    long n = sh.batch * sh.T * sh.hs;
                    Vec x = rand_vec(n, -2.0f, 2.0f), y0 = acc ? rand_vec(n) : nan_vec(n);
                    if (bf)
                        x = round_bf(x), y0 = acc ? round_bf(y0) : y0;
                    Vec want = y0;
                    cpu_rope(want.data(), x.data(), sh.batch, sh.T, sh.hs, sh.theta, inv, acc);
                    NAME("rope%s batch%ld T%ld hs%ld theta%g inverse%d acc%d", bf ? "_bf16" : "", sh.batch, sh.T, sh.hs,
                         sh.theta, inv, acc);
                    Vec got = run_gpu(name, [&] {
                        Dev d;
                        if (bf) {
                            gc_bf16 *y = d.up(to_bf(y0));
                            gc_rope_bf16(y, d.up(to_bf(x)), sh.batch, sh.T, sh.hs, sh.theta, inv, acc);
                            return down_bf(y, n);
                        }
                        float *y = d.up(y0);
                        gc_rope(y, d.up(x), sh.batch, sh.T, sh.hs, sh.theta, inv, acc);
                        return down(y, n);
                    });
                    close(name, got, want, bf ? BF16_TOL : 1e-6f);
                }
}

/* ---------------------------------------------------------------- grouped-query attention */
/* gc_attention_gqa_* (separate q, k, v; NKV kv heads, each shared by NH/NKV
 * query heads) against attention_gqa_cpu.c, fp32 and bf16 (tensor cores and
 * SIMT), the same tolerances as test_attention: groups of 1, 2, 3 and 4
 * query heads, y in (B, T, NH, hs) (heads_out) or (B, NH, T, hs), acc
 * 0, 7 and mixed (dq and dv accumulated, dk overwritten: 5), T and hs as
 * there; the tensor-core backward in each workspace variant, bit-identical
 * (a chunk is whole kv heads with their query heads). */
static void test_attention_gqa()
{
    struct { long B, NH, NKV, T, hs; int heads_out; } shapes[] = {
        {1, 2, 2, 37, 16, 1}, {2, 4, 2, 65, 64, 0}, {1, 4, 1, 63, 64, 1}, {1, 4, 2, 64, 128, 0},
        {1, 4, 1, 130, 64, 1}, {2, 6, 2, 13, 10, 1}, {1, 2, 1, 1, 64, 0}, {1, 8, 2, 67, 72, 1},
    };
    char name[160];
    for (auto s : shapes)
        for (int path = 0; path < 3; path++) {
            int bf = path > 0, tc = path == 1;
            const char *tag = path == 0 ? "" : tc ? "_bf16" : "_bf16 simt";
            gc_cuda_set_attention_wmma(tc);
            long nq = s.B * s.NH * s.T * s.hs, nk = s.B * s.NKV * s.T * s.hs, nl = s.B * s.NH * s.T;
            float scale = 1.0f / sqrtf((float)s.hs);
            Vec q = rand_vec(nq, -2, 2), k = rand_vec(nk, -2, 2), v = rand_vec(nk, -2, 2), dy = rand_vec(nq);
            if (bf)
                q = round_bf(q), k = round_bf(k), v = round_bf(v), dy = round_bf(dy);
            Vec y(nq), lse(nl);
            cpu_attention_gqa_fwd(y.data(), lse.data(), q.data(), k.data(), v.data(), s.B, s.NH, s.NKV, s.T, s.hs,
                                  s.heads_out, scale);
            if (bf)
                y = round_bf(y);
            NAME("attention_gqa_fwd%s B%ld NH%ld NKV%ld T%ld hs%ld out%d", tag, s.B, s.NH, s.NKV, s.T, s.hs,
                 s.heads_out);
            long mmas = 0;
            Vec got = run_gpu(name, [&] {
                Dev d;
#ifdef GCEMU
                long m0 = gcemu_mma_syncs;
#endif
                float *l = d.up(nan_vec(nl));
                Vec r;
                if (bf) {
                    gc_bf16 *o = d.up(to_bf(nan_vec(nq)));
                    gc_attention_gqa_fwd_bf16(o, l, d.up(to_bf(q)), d.up(to_bf(k)), d.up(to_bf(v)), s.B, s.NH, s.NKV,
                                              s.T, s.hs, s.heads_out, scale);
                    r = cat({down_bf(o, nq), down(l, nl)});
                } else {
                    float *o = d.up(nan_vec(nq));
                    gc_attention_gqa_fwd(o, l, d.up(q), d.up(k), d.up(v), s.B, s.NH, s.NKV, s.T, s.hs, s.heads_out,
                                         scale);
                    r = cat({down(o, nq), down(l, nl)});
                }
#ifdef GCEMU
                mmas = gcemu_mma_syncs - m0;
#endif
                return r;
            });
            close(name, got, cat({y, lse}), bf ? BF16_TOL : 1e-5f);
#ifdef GCEMU
            checks++;
            if ((mmas > 0) != tc) {
                printf("FAIL %s: %ld mma.syncs, want %s\n", name, mmas, tc ? "some" : "none");
                failures++;
            }
#endif
            for (int acc : {0, 7, 5}) {
                Vec g0[3] = {acc & 1 ? rand_vec(nq) : nan_vec(nq), acc & 2 ? rand_vec(nk) : nan_vec(nk),
                             acc & 4 ? rand_vec(nk) : nan_vec(nk)};
                if (bf)
                    for (Vec &g : g0)
                        g = round_bf(g);
                Vec w[3] = {g0[0], g0[1], g0[2]};
                cpu_attention_gqa_bwd(w[0].data(), w[1].data(), w[2].data(), dy.data(), q.data(), k.data(), v.data(),
                                      y.data(), lse.data(), s.B, s.NH, s.NKV, s.T, s.hs, s.heads_out, scale, acc);
                Vec first;
                for (int ws = 0; ws < (tc ? ATT_WS_VARIANTS : 1); ws++) {
                    NAME("attention_gqa_bwd%s B%ld NH%ld NKV%ld T%ld hs%ld out%d acc%d ws%d", tag, s.B, s.NH, s.NKV,
                         s.T, s.hs, s.heads_out, acc, ws);
                    Vec gotb = run_once_or_gpu(ws > 0, name, [&] {
                        Dev d;
                        att_ws_variant(ws, (size_t)(s.NH / s.NKV) * s.T * sizeof(float));
                        float *l = d.up(lse);
                        Vec r;
                        if (bf) {
                            gc_bf16 *dq = d.up(to_bf(g0[0])), *dk = d.up(to_bf(g0[1])), *dv = d.up(to_bf(g0[2]));
                            gc_attention_gqa_bwd_bf16(dq, dk, dv, d.up(to_bf(dy)), d.up(to_bf(q)), d.up(to_bf(k)),
                                                      d.up(to_bf(v)), d.up(to_bf(y)), l, s.B, s.NH, s.NKV, s.T, s.hs,
                                                      s.heads_out, scale, acc);
                            r = cat({down_bf(dq, nq), down_bf(dk, nk), down_bf(dv, nk)});
                        } else {
                            float *dq = d.up(g0[0]), *dk = d.up(g0[1]), *dv = d.up(g0[2]);
                            gc_attention_gqa_bwd(dq, dk, dv, d.up(dy), d.up(q), d.up(k), d.up(v), d.up(y), l, s.B,
                                                 s.NH, s.NKV, s.T, s.hs, s.heads_out, scale, acc);
                            r = cat({down(dq, nq), down(dk, nk), down(dv, nk)});
                        }
                        att_ws_variant(0, 0);
                        return r;
                    });
                    if (ws) {
                        same_bits(name, gotb, first);
                    } else {   /* each gradient against its own scale */
                        long off[4] = {0, nq, nq + nk, nq + 2 * nk};
                        for (int e = 0; e < 3; e++)
                            close(name, Vec(gotb.begin() + off[e], gotb.begin() + off[e + 1]), w[e],
                                  bf ? BF16_TOL : 1e-5f);
                    }
                    first = gotb;
                }
            }
        }
    gc_cuda_set_attention_wmma(1);
}

/* ---------------------------------------------------------------- classifier */
/* fuse_classifier.c's op against the CPU op (classifier_cpu.c), fp32 and
 * bf16: rows not a multiple of the chunk (a short last chunk), Vp not a
 * multiple of the chunk nor of the 16-byte vector (rows not 16-byte aligned:
 * the scalar path), a Vp with aligned rows (the vector path), one chunk
 * (N <= R), dx and dw overwritten or accumulated, and seed 1 or 1/2 (two
 * micro-batches). bf16: the reference is the unfused CPU ops (matmul,
 * cross-entropy and its backward, the two gradient matmuls) on the
 * bf16-rounded inputs, with the logits and their gradient rounded to bf16
 * where the GPU rounds them (as the unfused bf16 ops do). Under the emulator: 3 cuBLASLt calls and 1 kernel per chunk, plus the
 * loss's kernel (ir/ops.c op_launches). */
static void test_classifier()
{
    struct { long N, C, Vp, V, R; } shapes[] = {
        {37, 24, 70, 67, 16}, {40, 32, 264, 259, 64}, {9, 8, 13, 10, 4}, {33, 16, 128, 128, 11},
    };
    char name[160];
    gc_cuda_set_tf32(0);
    for (auto s : shapes)
        for (int bf = 0; bf < 2; bf++)
            for (int acc = 0; acc < 7; acc += 6)
                for (int half = 0; half < 2; half++) {
                    long N = s.N, C = s.C, Vp = s.Vp, V = s.V, R = s.R, nx = N * C, nw = Vp * C;
                    float seed = half ? 0.5f : 1.0f;
                    Vec x = rand_bf(nx, -2, 2), w = rand_bf(nw, -2, 2);
                    IVec tg = rand_idx(N, (int32_t)V);
                    Vec dx0 = acc ? rand_bf(nx) : nan_vec(nx), dw0 = acc ? rand_vec(nw) : nan_vec(nw);
                    Vec loss(1), dx = dx0, dw = dw0, chunk(R * Vp), rl(2 * N);
                    if (bf) {   /* the unfused ops, rounding where the GPU rounds: logits and their gradient */
                        Vec lg(N * Vp), sd = {seed};
                        cpu_matmul(lg.data(), x.data(), w.data(), 1, N, Vp, C, 0, 1, 0);
                        lg = round_bf(lg);
                        cpu_crossentropy_fwd(loss.data(), lg.data(), tg.data(), N, Vp, V);
                        cpu_crossentropy_bwd(lg.data(), sd.data(), lg.data(), tg.data(), N, Vp, V, 0);
                        lg = round_bf(lg);
                        cpu_matmul(dx.data(), lg.data(), w.data(), 1, N, C, Vp, 0, 0, (acc >> 1) & 1);
                        cpu_matmul(dw.data(), lg.data(), x.data(), 1, Vp, C, N, 1, 0, (acc >> 2) & 1);
                    } else {
                        cpu_classifier(loss.data(), dx.data(), dw.data(), chunk.data(), rl.data(), x.data(), w.data(),
                                       tg.data(), N, C, Vp, V, R, seed, acc);
                    }
                    NAME("classifier%s N%ld C%ld Vp%ld V%ld R%ld acc%d seed%g", bf ? "_bf16" : "", N, C, Vp, V, R,
                         acc, seed);
                    long l0 = 0, m0 = 0;
                    Vec got = run_gpu(name, [&] {
                        Dev d;
                        float *lo = d.up(nan_vec(1)), *gw = d.up(dw0), *r = d.up(nan_vec(2 * N));
#ifdef GCEMU
                        l0 = gcemu_launch_count(), m0 = gcemu_lt_matmuls;
#endif
                        Vec out;
                        if (bf) {
                            gc_bf16 *gx = d.up(to_bf(dx0)), *ch = d.up(to_bf(nan_vec(R * Vp)));
                            gc_classifier_bf16(lo, gx, gw, ch, r, d.up(to_bf(x)), d.up(to_bf(w)), d.up(tg), N, C, Vp, V,
                                               R, seed, acc);
                            out = cat({down(lo, 1), down_bf(gx, nx), down(gw, nw)});
                        } else {
                            float *gx = d.up(dx0), *ch = d.up(nan_vec(R * Vp));
                            gc_classifier(lo, gx, gw, ch, r, d.up(x), d.up(w), d.up(tg), N, C, Vp, V, R, seed, acc);
                            out = cat({down(lo, 1), down(gx, nx), down(gw, nw)});
                        }
#ifdef GCEMU
                        l0 = gcemu_launch_count() - l0, m0 = gcemu_lt_matmuls - m0;
#endif
                        return out;
                    });
                    /* each part against its own scale: the loss, dx, dw */
                    float tol = bf ? BF16_TOL : 1e-5f;
                    Vec g0(got.begin(), got.begin() + 1), g1(got.begin() + 1, got.begin() + 1 + nx),
                        g2(got.begin() + 1 + nx, got.end());
                    close(name, g0, loss, tol);
                    close(name, g1, bf ? round_bf(dx) : dx, tol);
                    close(name, g2, dw, tol);
#ifdef GCEMU
                    long chunks = (N + R - 1) / R;
                    checks++;
                    if (m0 != 3 * chunks || l0 != chunks + 1) {
                        printf("FAIL %s: %ld cuBLASLt calls and %ld kernels, want %ld and %ld\n", name, m0, l0,
                               3 * chunks, chunks + 1);
                        failures++;
                    }
#endif
                }
}

/* ---------------------------------------------------------------- fused against unfused */
/* The fused kernels against what the unfused program runs (cuBLASLt
 * matmuls + the mask, softmax and cross-entropy kernels), bf16, on the same
 * data: ms per call (mean of 5 after a warm-up; one line each, which
 * tests/gpu/run.sh copies into its summary) and the largest difference of
 * the outputs relative to the largest |output|. On a GPU at GPT-2 124M's
 * shape (B=8, NH=12, T=1024, hs=64; classifier N=8192, C=768, Vp=50304, in
 * chunks of 1024 rows as gcompile's default); under the emulator at a small
 * shape, where only the agreement means something. The tolerance: the
 * unfused path rounds the scores, the probabilities and their gradients to
 * bf16 storage (2^-9 relative each) where the fused one keeps them fp32 or
 * rounds them once as WMMA operands; a few such roundings summed over T or
 * Vp terms stay within 3e-2 of the largest output (seen under the emulator:
 * printed). The unfused attention reads q pre-scaled by 1/sqrt(hs) (hs=64:
 * 1/8, exact in bf16) and its dq is scaled back on the host: no scale
 * kernel is timed, which favours unfused a little. */
static double bench_ms(const std::function<void()> &call)
{
    call();
    gc_device_sync();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int r = 0; r < 5; r++)
        call();
    gc_device_sync();
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return ((t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6) / 5;
}

static double rel_diff(const Vec &a, const Vec &b)
{
    float top = 0, worst = 0;
    for (size_t i = 0; i < a.size(); i++) {
        top = fmaxf(top, fabsf(b[i]));
        worst = fmaxf(worst, fabsf(a[i] - b[i]));
    }
    return a.size() != b.size() ? INFINITY : top > 0 ? worst / top : worst;
}

static void bench_check(const char *what, double d)
{
    checks++;
    if (!(d <= 3e-2)) {
        printf("FAIL bench %s: fused and unfused differ by %.3g of the largest output (limit 3e-2)\n", what, d);
        failures++;
    }
}

static void bench_attention()
{
#ifdef GCEMU
    const long B = 1, NH = 2, T = 48, hs = 64;
#else
    const long B = 8, NH = 12, T = 1024, hs = 64;
#endif
    const long BH = B * NH, n1 = BH * T * hs;   /* q, k, v, y: (B, NH, T, hs) each, contiguous */
    long geom[12] = {B, NH, T, hs, NH * T * hs, T * hs, hs, n1, 2 * n1, NH * T * hs, T * hs, hs};
    const float scale = 0.125f;   /* 1/sqrt(64) */
    Vec x = round_bf(rand_vec(3 * n1, -2.0f, 2.0f)), xs = x, dyh = round_bf(rand_vec(n1));
    for (long i = 0; i < n1; i++)
        xs[i] *= scale;   /* exact: a power of two */
    Dev d;
    gc_bf16 *dx_in = d.up(to_bf(x)), *dxs = d.up(to_bf(xs)), *dy = d.up(to_bf(dyh));
    gc_bf16 *y = d.up(to_bf(Vec(n1))), *dxo = d.up(to_bf(Vec(3 * n1)));
    gc_bf16 *yu = d.up(to_bf(Vec(n1))), *dxu = d.up(to_bf(Vec(3 * n1)));
    gc_bf16 *s = d.raw<gc_bf16>(BH * T * T), *p = d.raw<gc_bf16>(BH * T * T), *dp = d.raw<gc_bf16>(BH * T * T);
    float *lse = d.up(Vec(BH * T));
    const gc_bf16 *q = dxs, *k = dxs + n1, *v = dxs + 2 * n1;
    auto unfused_fwd = [&] {
        gc_matmul_bf16(s, q, k, BH, T, T, hs, 0, 1, 0);   /* s = (q/8) k^T */
        gc_causal_mask_fwd_bf16(s, s, BH, T);
        gc_softmax_fwd_bf16(p, s, BH * T, T);
        gc_matmul_bf16(yu, p, v, BH, T, hs, T, 0, 0, 0);
    };
    auto unfused_bwd = [&] {
        gc_matmul_bf16(dp, dy, v, BH, T, T, hs, 0, 1, 0);          /* dp = dy v^T */
        gc_matmul_bf16(dxu + 2 * n1, p, dy, BH, T, hs, T, 1, 0, 0); /* dv = p^T dy */
        gc_softmax_bwd_bf16(s, dp, p, BH * T, T, 0);                /* ds (in s) */
        gc_causal_mask_bwd_bf16(s, s, BH, T, 0);
        gc_matmul_bf16(dxu, s, k, BH, T, hs, T, 0, 0, 0);           /* dq / scale */
        gc_matmul_bf16(dxu + n1, s, q, BH, T, hs, T, 1, 0, 0);      /* dk = ds^T (q/8) */
    };
    double fwd = bench_ms([&] { gc_attention_fwd_bf16(y, lse, dx_in, geom, scale); });
    double bwd = bench_ms([&] { gc_attention_bwd_bf16(dxo, dy, dx_in, y, lse, geom, scale, 0); });
    double ufwd = bench_ms(unfused_fwd), ubwd = bench_ms(unfused_bwd);
    Vec dxf = down_bf(dxo, 3 * n1), dxv = down_bf(dxu, 3 * n1);
    for (long i = 0; i < n1; i++)
        dxv[i] *= scale;   /* the unfused dq was taken against q/8 */
    double dfwd = rel_diff(down_bf(y, n1), down_bf(yu, n1)), dbwd = rel_diff(dxf, dxv);
    double flop = 4.0 * B * NH * T * T * hs / 2;   /* causal: half of q k^T and p v; the backward 2.5x */
    printf("bench attention bf16 B%ld NH%ld T%ld hs%ld (%s): fwd %.3f ms fused (%.0f TFLOP/s), %.3f ms unfused "
           "cuBLAS (%.2fx); bwd %.3f ms fused (%.0f TFLOP/s), %.3f ms unfused (%.2fx); max |fused - unfused| / max: "
           "fwd %.2g, bwd %.2g\n",
           B, NH, T, hs, gc_cuda_attention_wmma() ? "tensor cores" : "simt", fwd, flop / fwd / 1e9, ufwd, ufwd / fwd,
           bwd, 2.5 * flop / bwd / 1e9, ubwd, ubwd / bwd, dfwd, dbwd);
    bench_check("attention fwd", dfwd);
    bench_check("attention bwd", dbwd);
}

/* Grouped-query attention at Llama 3.2 1B's shape (B=2, NH=32, NKV=8,
 * T=2048, hs=64; under the emulator a small one), fused against what the
 * unfused program runs: k and v repeated to NH heads (gc_repeat), the
 * cuBLASLt matmuls, mask and softmax kernels as bench_attention, and the
 * repeated heads' dk, dv summed back (gc_repeat_bwd). Same tolerance and
 * pre-scaled q. */
static void bench_attention_gqa()
{
#ifdef GCEMU
    const long B = 1, NH = 4, NKV = 2, T = 40, hs = 64;
#else
    const long B = 2, NH = 32, NKV = 8, T = 2048, hs = 64;
#endif
    const long G = NH / NKV, BH = B * NH, nq = BH * T * hs, nk = B * NKV * T * hs;
    const float scale = 0.125f;   /* 1/sqrt(64) */
    Vec qh = round_bf(rand_vec(nq, -2.0f, 2.0f)), kh = round_bf(rand_vec(nk, -2.0f, 2.0f));
    Vec vh = round_bf(rand_vec(nk, -2.0f, 2.0f)), dyh = round_bf(rand_vec(nq)), qs = qh;
    for (float &x : qs)
        x *= scale;   /* exact: a power of two */
    Dev d;
    gc_bf16 *q = d.up(to_bf(qh)), *k = d.up(to_bf(kh)), *v = d.up(to_bf(vh)), *dy = d.up(to_bf(dyh));
    gc_bf16 *q8 = d.up(to_bf(qs)), *y = d.up(to_bf(Vec(nq))), *yu = d.up(to_bf(Vec(nq)));
    gc_bf16 *dq = d.up(to_bf(Vec(nq))), *dk = d.up(to_bf(Vec(nk))), *dv = d.up(to_bf(Vec(nk)));
    gc_bf16 *dqu = d.up(to_bf(Vec(nq))), *dku = d.up(to_bf(Vec(nk))), *dvu = d.up(to_bf(Vec(nk)));
    gc_bf16 *kr = d.up(to_bf(Vec(nq))), *vr = d.up(to_bf(Vec(nq))), *dkr = d.up(to_bf(Vec(nq)));
    gc_bf16 *dvr = d.up(to_bf(Vec(nq)));
    gc_bf16 *sc = d.raw<gc_bf16>(BH * T * T), *p = d.raw<gc_bf16>(BH * T * T), *dp = d.raw<gc_bf16>(BH * T * T);
    float *lse = d.up(Vec(BH * T));
    auto unfused_fwd = [&] {
        gc_repeat_bf16(kr, k, B, NKV, G, T * hs, 0);
        gc_repeat_bf16(vr, v, B, NKV, G, T * hs, 0);
        gc_matmul_bf16(sc, q8, kr, BH, T, T, hs, 0, 1, 0);   /* s = (q/8) k^T */
        gc_causal_mask_fwd_bf16(sc, sc, BH, T);
        gc_softmax_fwd_bf16(p, sc, BH * T, T);
        gc_matmul_bf16(yu, p, vr, BH, T, hs, T, 0, 0, 0);
    };
    auto unfused_bwd = [&] {
        gc_matmul_bf16(dp, dy, vr, BH, T, T, hs, 0, 1, 0);    /* dp = dy v^T */
        gc_matmul_bf16(dvr, p, dy, BH, T, hs, T, 1, 0, 0);    /* dv of the repeated heads = p^T dy */
        gc_softmax_bwd_bf16(sc, dp, p, BH * T, T, 0);         /* ds (in s) */
        gc_causal_mask_bwd_bf16(sc, sc, BH, T, 0);
        gc_matmul_bf16(dqu, sc, kr, BH, T, hs, T, 0, 0, 0);   /* dq / scale */
        gc_matmul_bf16(dkr, sc, q8, BH, T, hs, T, 1, 0, 0);   /* dk of the repeated heads = ds^T (q/8) */
        gc_repeat_bwd_bf16(dku, dkr, B, NKV, G, T * hs, 0);
        gc_repeat_bwd_bf16(dvu, dvr, B, NKV, G, T * hs, 0);
    };
    double fwd = bench_ms([&] { gc_attention_gqa_fwd_bf16(y, lse, q, k, v, B, NH, NKV, T, hs, 0, scale); });
    double bwd = bench_ms([&] {
        gc_attention_gqa_bwd_bf16(dq, dk, dv, dy, q, k, v, y, lse, B, NH, NKV, T, hs, 0, scale, 0);
    });
    double ufwd = bench_ms(unfused_fwd), ubwd = bench_ms(unfused_bwd);
    Vec dqv = down_bf(dqu, nq);
    for (float &x : dqv)
        x *= scale;   /* the unfused dq was taken against q/8 */
    Vec gf = cat({down_bf(dq, nq), down_bf(dk, nk), down_bf(dv, nk)});
    Vec gu = cat({dqv, down_bf(dku, nk), down_bf(dvu, nk)});
    double dfwd = rel_diff(down_bf(y, nq), down_bf(yu, nq)), dbwd = rel_diff(gf, gu);
    /* causal attention's FLOPs: 4 B NH T^2 hs forward (two products over half the scores), 2.5x that backward */
    double flop = 4.0 * B * NH * T * T * hs / 2;
    printf("bench attention_gqa bf16 B%ld NH%ld NKV%ld T%ld hs%ld (%s): fwd %.3f ms fused (%.0f TFLOP/s), %.3f ms "
           "unfused cuBLAS (%.2fx); bwd %.3f ms fused (%.0f TFLOP/s), %.3f ms unfused (%.2fx); "
           "max |fused - unfused| / max: fwd %.2g, bwd %.2g\n",
           B, NH, NKV, T, hs, gc_cuda_attention_wmma() ? "tensor cores" : "simt", fwd, flop / fwd / 1e9, ufwd,
           ufwd / fwd, bwd, 2.5 * flop / bwd / 1e9, ubwd, ubwd / bwd, dfwd, dbwd);
    bench_check("attention_gqa fwd", dfwd);
    bench_check("attention_gqa bwd", dbwd);
}

static void bench_classifier()
{
#ifdef GCEMU
    const long N = 40, C = 32, Vp = 136, V = 130, R = 16;
#else
    const long N = 8192, C = 768, Vp = 50304, V = 50257, R = 1024;
#endif
    Vec x = round_bf(rand_vec(N * C)), w = round_bf(rand_vec(Vp * C, -0.1f, 0.1f));
    IVec t(N);
    for (long i = 0; i < N; i++)
        t[i] = (int32_t)((i * 7919) % V);
    Dev d;
    gc_bf16 *dxin = d.up(to_bf(x)), *dw_in = d.up(to_bf(w));
    gc_bf16 *dx = d.up(to_bf(Vec(N * C))), *dxu = d.up(to_bf(Vec(N * C)));
    gc_bf16 *chunk = d.up(to_bf(Vec(R * Vp))), *logits = d.up(to_bf(Vec(N * Vp))), *dlogits = d.up(to_bf(Vec(N * Vp)));
    float *loss = d.up(Vec(1)), *lossu = d.up(Vec(1)), *dw = d.up(Vec(Vp * C)), *dwu = d.up(Vec(Vp * C));
    float *rowloss = d.up(Vec(2 * N)), *seed = d.up(Vec{1.0f});
    int32_t *dt = d.up(t);
    auto fused = [&] { gc_classifier_bf16(loss, dx, dw, chunk, rowloss, dxin, dw_in, dt, N, C, Vp, V, R, 1.0f, 0); };
    auto unfused = [&] {
        gc_matmul_bf16(logits, dxin, dw_in, 1, N, Vp, C, 0, 1, 0);            /* logits = x w^T */
        gc_crossentropy_fwd_bf16(lossu, logits, dt, N, Vp, V);
        gc_crossentropy_bwd_bf16(dlogits, seed, logits, dt, N, Vp, V, 0);
        gc_matmul_bf16(dxu, dlogits, dw_in, 1, N, C, Vp, 0, 0, 0);            /* dx = dlogits w */
        gc_matmul_bf16_f32(dwu, dlogits, dxin, 1, Vp, C, N, 1, 0, 0);         /* dw = dlogits^T x */
    };
    double f = bench_ms(fused), u = bench_ms(unfused);
    double dl = rel_diff(down(loss, 1), down(lossu, 1)), ddx = rel_diff(down_bf(dx, N * C), down_bf(dxu, N * C)),
           ddw = rel_diff(down(dw, Vp * C), down(dwu, Vp * C));
    printf("bench classifier bf16 N%ld C%ld Vp%ld R%ld: fwd+bwd %.3f ms fused, %.3f ms unfused cuBLAS (%.2fx); "
           "max |fused - unfused| / max: loss %.2g, dx %.2g, dw %.2g\n",
           N, C, Vp, R, f, u, u / f, dl, ddx, ddw);
    bench_check("classifier loss", dl);
    bench_check("classifier dx", ddx);
    bench_check("classifier dw", ddw);
}

static void test_bench()
{
    bench_attention();
    bench_attention_gqa();
    bench_classifier();
}

/* --error-case K: this process runs only the CUDA side of error case K. The
 * parent runs each case that way, a fresh process (fork, then exec of this
 * program): the CUDA runtime does not survive a fork on a real GPU. */
static int error_case = -1;

static void test_errors()
{
    IVec idx = {1, 2, 77, 0};
    Vec table = rand_vec(50 * 3), dout = rand_vec(4 * 3), logits = rand_vec(4 * 10);
    struct { const char *what; std::function<void()> cpu, gpu; } cases[] = {
        {"embedding_fwd",
         [&] { Vec o(12); cpu_embedding_fwd(o.data(), idx.data(), table.data(), 4, 50, 3); },
         [&] { Dev d; gc_embedding_fwd(d.up(Vec(12)), d.up(idx), d.up(table), 4, 50, 3); gc_device_sync(); }},
        {"embedding_bwd",
         [&] { Vec t(150); cpu_embedding_bwd(t.data(), dout.data(), idx.data(), 4, 50, 3, 0); },
         [&] { Dev d; gc_embedding_bwd(d.up(Vec(150)), d.up(dout), d.up(idx), 4, 50, 3, 0); gc_device_sync(); }},
        {"embedding_bwd (no workspace)",
         [&] { Vec t(150); cpu_embedding_bwd(t.data(), dout.data(), idx.data(), 4, 50, 3, 0); },
         [&] { set_ws(0); Dev d; gc_embedding_bwd(d.up(Vec(150)), d.up(dout), d.up(idx), 4, 50, 3, 0); gc_device_sync(); }},
        {"crossentropy_fwd",
         [&] { Vec l(1); IVec t = {1, 20, 3, 4}; cpu_crossentropy_fwd(l.data(), logits.data(), t.data(), 4, 10, 10); },
         [&] { Dev d; IVec t = {1, 20, 3, 4}; gc_crossentropy_fwd(d.up(Vec(1)), d.up(logits), d.up(t), 4, 10, 10); gc_device_sync(); }},
        {"crossentropy_bwd",
         [&] { Vec g(40), dl = {1.0f}; IVec t = {1, 20, 3, 4}; cpu_crossentropy_bwd(g.data(), dl.data(), logits.data(), t.data(), 4, 10, 10, 0); },
         [&] { Dev d; IVec t = {1, 20, 3, 4}; gc_crossentropy_bwd(d.up(Vec(40)), d.up(Vec{1.0f}), d.up(logits), d.up(t), 4, 10, 10, 0); gc_device_sync(); }},
        {"classifier",   /* x (4 x 2), w (10 x 2): the logits of crossentropy's cases */
         [&] { Vec l(1), dx(8), dw(20), ch(30), rl(8); IVec t = {1, 20, 3, 4}; cpu_classifier(l.data(), dx.data(), dw.data(), ch.data(), rl.data(), logits.data(), logits.data() + 8, t.data(), 4, 2, 10, 10, 3, 1.0f, 0); },
         [&] { Dev d; IVec t = {1, 20, 3, 4}; gc_classifier(d.up(Vec(1)), d.up(Vec(8)), d.up(Vec(20)), d.up(Vec(30)), d.up(Vec(8)), d.up(logits), d.up(Vec(logits.begin() + 8, logits.begin() + 28)), d.up(t), 4, 2, 10, 10, 3, 1.0f, 0); gc_device_sync(); }},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        auto &c = cases[k];
        if (error_case >= 0) {
            if ((size_t)error_case == k) {
                c.gpu();   /* exits 1 with the error */
                exit(0);
            }
            continue;
        }
        std::string ecpu, egpu;
        int rc_cpu = in_child(c.cpu, &ecpu), rc_gpu = in_child([k] {
            char arg[32];
            snprintf(arg, sizeof arg, "%zu", k);
            execl("/proc/self/exe", "test_kernels", "--error-case", arg, (char *)NULL);
            _exit(127);
        }, &egpu);
        /* the first line: sanitizers may add their own after exit() in a forked child */
        ecpu = ecpu.substr(0, ecpu.find('\n'));
        egpu = egpu.substr(0, egpu.find('\n'));
        checks++;
        if (rc_cpu != 1 || rc_gpu != 1 || ecpu != egpu || ecpu.find("error: ") != 0) {
            printf("FAIL error %s: cpu exit %d \"%s\", cuda exit %d \"%s\"\n", c.what, rc_cpu, ecpu.c_str(), rc_gpu,
                   egpu.c_str());
            failures++;
        }
    }
    /* the flag does not outlive a clean sync */
    gc_device_sync();
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    const char *filter = argc > 1 ? argv[1] : "";
    if (argc > 2 && !strcmp(argv[1], "--error-case")) {
        error_case = atoi(argv[2]);
        filter = "errors";
    }
    char err[256] = "";
#ifdef GCEMU
    /* no device: a one-line reason, non-zero */
    gcemu_device_count = 0;
    checks++;
    if (gc_device_init(err, sizeof err) == 0 || !strstr(err, "no CUDA device")) {
        printf("FAIL gc_device_init without a device: \"%s\"\n", err);
        failures++;
    }
    gcemu_device_count = 1;
#endif
    if (gc_device_init(err, sizeof err) != 0) {
        printf("SKIP: %s\n", err);
        return 77;
    }
    if (error_case < 0)
        printf("device: %s, %.1f TFLOP/s bf16 peak, %zu MiB free\n", gc_device_name(), gc_device_peak_flops(1) / 1e12,
               gc_device_free_bytes() >> 20);
    workspace = gc_device_alloc(GC_CUDA_WORKSPACE_BYTES);
    set_ws(GC_CUDA_WORKSPACE_BYTES);

    struct { const char *name; void (*fn)(); } groups[] = {
        {"matmul", test_matmul},         {"reduce_rows", test_reduce_rows},
        {"embedding", test_embedding},   {"layernorm", test_layernorm},
        {"permute", test_permute},       {"softmax", test_softmax},
        {"causal_mask", test_causal_mask}, {"crossentropy", test_crossentropy},
        {"misc", test_misc},             {"bf16", test_bf16},
        {"errors", test_errors},         {"mma", test_mma},
        {"attention", test_attention},   {"attention_gqa", test_attention_gqa},
        {"vectors", test_vectors},
        {"gelu", test_gelu},             {"gelu_bgrad", test_gelu_bgrad},
        {"add_layernorm", test_add_layernorm},
        {"classifier", test_classifier}, {"rope", test_rope},
        {"bench", test_bench},
    };
    for (auto &g : groups) {
        if (!strstr(g.name, filter))
            continue;
        int f0 = failures, c0 = checks;
        g.fn();
        printf("%-12s %4d checks, %d failed\n", g.name, checks - c0, failures - f0);
        fflush(stdout);
    }
    gc_cuda_matmul_cache_clear();
    gc_device_free(workspace);
    printf("%s: %d checks, %d failed\n", failures ? "FAIL" : "ok", checks, failures);
    return failures ? 1 : 0;
}
