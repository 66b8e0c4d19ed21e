/* mma.h (gcemu shim) — nvcuda::wmma, the warp-level tensor-core API, for the
 * shapes the runtime uses: 16x16x16 with __nv_bfloat16 matrix_a / matrix_b
 * fragments (row_major or col_major) and float accumulators.
 *
 * Semantics
 *   - Every lane of the warp calls each function with the same arguments (as
 *     on the GPU); here each lane's fragment holds the whole 16x16 tile, so
 *     every lane computes the full product (same bits in every lane).
 *   - mma_sync: d = a b + c, products of bf16 exact in float, summed in
 *     float in k order onto c (the hardware's order of the sum is its own;
 *     it is also fp32 there).
 *   - load_matrix_sync / store_matrix_sync / mma_sync are warp barriers (the
 *     real ones wait until all lanes arrive). store_matrix_sync writes only
 *     this lane's share of the tile (element e of the row-major tile by lane
 *     e % 32, not the rows a kernel would guess), so a lane that reads what
 *     another lane stored without a __syncwarp first sees stale memory
 *     under some fiber orders, and the order-checking tests catch it.
 *   - Strict where CUDA is undefined, aborting with the kernel's name: a call
 *     from a partial warp, lanes that disagree on the pointer, ldm or
 *     layout, a pointer that is not 256-bit (32-byte) aligned, ldm not a
 *     multiple of 8 elements (bf16) or 4 (float), i.e. of 16 bytes.
 *   - fill_fragment and the x[] / num_elements access are plain per lane
 *     (num_elements is 256 here: the whole tile, row-major; on the GPU each
 *     lane holds a few elements in an unspecified order, so only uniform
 *     element-wise code is portable).
 * gcemu_wmma_mmas counts mma_sync calls (once per warp), for tests that
 * check which path a kernel took.
 */
#ifndef GCEMU_MMA_H
#define GCEMU_MMA_H

#include "cuda_bf16.h"
#include "gcemu.h"

inline long gcemu_wmma_mmas;

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void> class fragment {
    static_assert(M == 16 && N == 16 && K == 16, "gcemu wmma: only the 16x16x16 shape");
    static_assert(std::is_same<Use, accumulator>::value ? std::is_same<T, float>::value
                                                        : std::is_same<T, __nv_bfloat16>::value,
                  "gcemu wmma: bf16 matrix_a/matrix_b and float accumulators only");
    static_assert(std::is_same<Use, accumulator>::value == std::is_same<Layout, void>::value,
                  "gcemu wmma: matrix_a/matrix_b take a layout, accumulators none");

public:
    typedef T element_type;
    enum { num_elements = 256 };
    T x[256];   /* the whole tile, row-major: (row, col) at x[row * 16 + col] */
};

} // namespace wmma
} // namespace nvcuda

namespace gcemu {

/* The warp barrier of a wmma call, and the check that every lane passed the
 * same value (pointer, ldm, layout). */
inline void wmma_uniform(const char *fn, uint64_t v)
{
    if (warp_lanes() != 0xffffffffu)
        fail("wmma call from a partial warp (the whole warp must call it)");
    uint64_t v0 = shfl_from(v, 0xffffffffu, 0);
    if (v0 != v) {
        char msg[160];
        snprintf(msg, sizeof msg, "nvcuda::wmma::%s: lanes passed different arguments", fn);
        fail(msg);
    }
}

inline void wmma_check(const char *fn, const void *p, unsigned ldm, unsigned elem_bytes, int layout)
{
    char msg[200];
    if ((uintptr_t)p % 32 != 0) {
        snprintf(msg, sizeof msg, "nvcuda::wmma::%s: pointer %p is not 256-bit aligned", fn, p);
        fail(msg);
    }
    if (ldm * elem_bytes % 16 != 0 || ldm == 0) {
        snprintf(msg, sizeof msg, "nvcuda::wmma::%s: ldm %u is not a multiple of %u elements", fn, ldm,
                 16 / elem_bytes);
        fail(msg);
    }
    wmma_uniform(fn, (uint64_t)(uintptr_t)p);
    wmma_uniform(fn, (uint64_t)ldm << 8 | (unsigned)layout);
}

/* element (r, c) of a 16x16 tile at p: row-major p[r ldm + c], column-major p[c ldm + r] */
inline size_t wmma_at(int r, int c, unsigned ldm, bool row) { return row ? (size_t)r * ldm + c : (size_t)c * ldm + r; }

} // namespace gcemu

namespace nvcuda {
namespace wmma {

template <class Use, class T, class L> inline void fill_fragment(fragment<Use, 16, 16, 16, T, L> &f, const T &v)
{
    for (auto &e : f.x)
        e = v;
}

/* matrix_a (row i, col k) and matrix_b (row k, col n): x[row * 16 + col] */
template <class Use, class L>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, L> &f, const __nv_bfloat16 *p, unsigned ldm)
{
    bool row = std::is_same<L, row_major>::value;
    gcemu::wmma_check("load_matrix_sync", p, ldm, 2, row ? mem_row_major : mem_col_major);
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.x[r * 16 + c] = p[gcemu::wmma_at(r, c, ldm, row)];
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p, unsigned ldm, layout_t layout)
{
    gcemu::wmma_check("load_matrix_sync", p, ldm, 4, layout);
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.x[r * 16 + c] = p[gcemu::wmma_at(r, c, ldm, layout == mem_row_major)];
}

inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f, unsigned ldm,
                              layout_t layout)
{
    gcemu::wmma_check("store_matrix_sync", p, ldm, 4, layout);
    for (int e = gcemu::lane(); e < 256; e += 32)
        p[gcemu::wmma_at(e / 16, e % 16, ldm, layout == mem_row_major)] = f.x[e];
}

/* d = a b + c (d may be c) */
template <class LA, class LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                     const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b,
                     const fragment<accumulator, 16, 16, 16, float> &c)
{
    gcemu::wmma_uniform("mma_sync", 0);
    if (gcemu::lane() == 0)
        gcemu_wmma_mmas++;
    float t[256];
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float s = c.x[i * 16 + j];
            for (int k = 0; k < 16; k++)
                s += __bfloat162float(a.x[i * 16 + k]) * __bfloat162float(b.x[k * 16 + j]);
            t[i * 16 + j] = s;
        }
    memcpy(d.x, t, sizeof t);
}

} // namespace wmma
} // namespace nvcuda

#endif
