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
    default:          return NULL;
    }
}

/* GC_EWFN is defined by the wrapper: "static inline" for C, "__device__
 * static inline" for CUDA. Both follow llm.c's tanh approximation. */
const char *ew_preamble(void)
{
    return "#define GC_GELU_K 0.7978845608028654f /* sqrt(2/pi) */\n"
           "GC_EWFN float gc_gelu(float x)\n"
           "{\n"
           "    float cube = 0.044715f * x * x * x;\n"
           "    return 0.5f * x * (1.0f + tanhf(GC_GELU_K * (x + cube)));\n"
           "}\n"
           "GC_EWFN float gc_gelu_grad(float x)\n"
           "{\n"
           "    float cube = 0.044715f * x * x * x;\n"
           "    float arg = GC_GELU_K * (x + cube);\n"
           "    float th = tanhf(arg), ch = coshf(arg);\n"
           "    float sech2 = 1.0f / (ch * ch);\n"
           "    return 0.5f * (1.0f + th) + x * 0.5f * sech2 * GC_GELU_K * (1.0f + 3.0f * 0.044715f * x * x);\n"
           "}\n";
}
