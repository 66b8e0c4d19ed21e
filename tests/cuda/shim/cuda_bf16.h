/* cuda_bf16.h (gcemu shim) — __nv_bfloat16 as 16 bits with CUDA's
 * conversions: float -> bf16 rounds to nearest even (NaN stays a quiet NaN),
 * bf16 -> float is exact. */
#ifndef GCEMU_CUDA_BF16_H
#define GCEMU_CUDA_BF16_H

#include "gcemu.h"

struct __nv_bfloat16 {
    uint16_t x;
};
typedef __nv_bfloat16 nv_bfloat16;

inline float __bfloat162float(__nv_bfloat16 h)
{
    uint32_t u = (uint32_t)h.x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

inline __nv_bfloat16 __float2bfloat16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    __nv_bfloat16 h;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        h.x = (uint16_t)((u >> 16) | 0x40);   /* quiet NaN */
        return h;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    h.x = (uint16_t)(u >> 16);
    return h;
}

inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }

#endif
