/* expr.c — the elementwise expressions. One text per EW op, valid C and valid
 * CUDA: the C emitter wraps it in an OpenMP loop, the CUDA emitter in a
 * grid-stride kernel, so the CPU tests run the arithmetic the GPU will run.
 * Operands: x0 (input 0), x1 (input 1; for add, the broadcast operand's
 * element), s (the op's first attribute). Helpers in ew_preamble(). */
#include "codegen.h"

const char *ew_expr(const Op *op)
{
    switch (op->kind) {
    case OP_ADD:      return "x0 + x1";
    case OP_SCALE:    return "s * x0";
    case OP_GELU:     return "gc_gelu(x0)";
    case OP_GELU_BWD: return "gc_gelu_grad(x0) * x1";   /* x0 = x, x1 = dy */
    case OP_COPY:     return "x0";
    case OP_MUL:      return "x0 * x1";
    case OP_SUB:      return "x0 - x1";
    case OP_SILU:     return "x0 * gc_sigmoid(x0)";
    case OP_SIGMOID:  return "gc_sigmoid(x0)";
    case OP_RELU:     return "x0 > 0.0f ? x0 : 0.0f * x0";   /* 0 * NaN: NaN propagates */
    case OP_TANH:     return "gc_tanh(x0) + 0.0f * x0";   /* gc_tanh clamps NaN to 1 */
    case OP_GELU_ERF: return "0.5f * x0 * (1.0f + erff(x0 * GC_SQRT1_2))";
    /* backward: x0 = the forward's input, x1 = dy */
    case OP_SILU_BWD: return "gc_silu_grad(x0) * x1";
    case OP_SIGMOID_BWD: return "gc_sigmoid_grad(x0) * x1";
    case OP_RELU_BWD: return "x0 > 0.0f ? x1 : 0.0f * x0";
    case OP_TANH_BWD: return "gc_tanh_grad(x0) * x1";
    case OP_GELU_ERF_BWD: return "gc_gelu_erf_grad(x0) * x1";
    case OP_SWIGLU:   return "x0 * gc_sigmoid(x0) * x1";   /* silu's text, then mul's: the unfused bits */
    default:          return NULL;
    }
}

/* GC_EWFN is defined by the wrapper: "static inline" for C, "__device__
 * static inline" for CUDA. Both follow llm.c's tanh approximation of GELU.
 * On the GPU tanh is the device's tanhf; elsewhere (the CPU target, the SIMT
 * emulator) a branch-free tanh that compilers vectorize: tanh|x| =
 * (1 - e)/(1 + e), e = exp(-2|x|) by the Cephes expf polynomial (~1 ulp). */
const char *ew_preamble(void)
{
    return "#define GC_GELU_K 0.7978845608028654f /* sqrt(2/pi) */\n"
           "#if defined(__CUDACC__)\n"
           "GC_EWFN float gc_tanh(float x) { return tanhf(x); }\n"
           "#else\n"
           "GC_EWFN float gc_tanh(float x)\n"
           "{\n"
           "    uint32_t xb, sign, tb, sb;\n"
           "    memcpy(&xb, &x, 4);\n"
           "    sign = xb & 0x80000000u;\n"
           "    xb &= 0x7fffffffu;\n"
           "    xb = xb < 0x41100000u ? xb : 0x41100000u; /* |x| <= 9 (tanh 9 = 1 in float); an integer min */\n"
           "    float a;\n"
           "    memcpy(&a, &xb, 4);\n"
           "    float r0 = -2.0f * a;                  /* exp(r0), r0 in [-18, 0] */\n"
           "    float t = r0 * 1.44269504088896341f + 12582912.0f;\n"
           "    float n = t - 12582912.0f;\n"
           "    float r = r0 - n * 0.693359375f;\n"
           "    r = r - n * -2.12194440e-4f;\n"
           "    float z = r * r, y = 1.9875691500e-4f;\n"
           "    y = y * r + 1.3981999507e-3f;\n"
           "    y = y * r + 8.3334519073e-3f;\n"
           "    y = y * r + 4.1665795894e-2f;\n"
           "    y = y * r + 1.6666665459e-1f;\n"
           "    y = y * r + 5.0000001201e-1f;\n"
           "    y = y * z + r + 1.0f;\n"
           "    memcpy(&tb, &t, 4);\n"
           "    sb = (tb - 0x4B400000u + 127u) << 23;\n"
           "    float scale, e;\n"
           "    memcpy(&scale, &sb, 4);\n"
           "    e = y * scale;\n"
           "    float th = (1.0f - e) / (1.0f + e);\n"
           "    memcpy(&tb, &th, 4);\n"
           "    tb |= sign;\n"
           "    memcpy(&th, &tb, 4);\n"
           "    return th;\n"
           "}\n"
           "#endif\n"
           "GC_EWFN float gc_gelu(float x)\n"
           "{\n"
           "    float cube = 0.044715f * x * x * x;\n"
           "    return 0.5f * x * (1.0f + gc_tanh(GC_GELU_K * (x + cube)));\n"
           "}\n"
           "GC_EWFN float gc_gelu_grad(float x)\n"
           "{\n"
           "    float cube = 0.044715f * x * x * x;\n"
           "    float th = gc_tanh(GC_GELU_K * (x + cube));\n"
           "    float sech2 = 1.0f - th * th;\n"
           "    return 0.5f * (1.0f + th) + x * 0.5f * sech2 * GC_GELU_K * (1.0f + 3.0f * 0.044715f * x * x);\n"
           "}\n"
           "#define GC_SQRT1_2 0.70710678118654752f  /* 1/sqrt(2) */\n"
           "GC_EWFN float gc_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }\n"
           "GC_EWFN float gc_sigmoid_grad(float x) { float s = gc_sigmoid(x); return s * (1.0f - s); }\n"
           "GC_EWFN float gc_silu_grad(float x) { float s = gc_sigmoid(x); return s * (1.0f + x * (1.0f - s)); }\n"
           "GC_EWFN float gc_tanh_grad(float x) { float t = gc_tanh(x); return 1.0f - t * t + 0.0f * x; }\n"
           "GC_EWFN float gc_gelu_erf_grad(float x)\n"
           "{\n"
           "    /* Phi(x) + x phi(x), phi the standard normal density */\n"
           "    return 0.5f * (1.0f + erff(x * GC_SQRT1_2)) + x * 0.39894228040143268f * expf(-0.5f * x * x);\n"
           "}\n";
}
