/* The generated expressions of issue 22's elementwise ops (ew_ops_gen.c
 * writes them from codegen/expr.c): each forward against its formula in
 * double, each <op>_bwd(x, dy) against central finite differences of that
 * formula in double, over [-12, 12]. Tolerances: the fp32 evaluation of an
 * exp / erf / tanh and a few products, relative to 1 + |value| (absolute
 * near zero): a few ulps of fp32 (1.2e-7 each) plus libm's expf/erff error;
 * 2e-6 allows ~16 ulps. The finite differences in double (h = 1e-5) are
 * exact to ~1e-10. Exit status 1 on any failure. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ew_ops.h"

static double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }
static double silu_d(double x) { return x * sigmoid_d(x); }
static double relu_d(double x) { return x > 0 ? x : 0; }
static double gelu_erf_d(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }

typedef struct {
    const char *name;
    double (*ref)(double);
    float (*fwd)(float, float, float);
    float (*bwd)(float, float, float);
} Case;

int main(void)
{
    const Case cases[] = {
        {"silu", silu_d, ew_silu, ew_silu_bwd},
        {"sigmoid", sigmoid_d, ew_sigmoid, ew_sigmoid_bwd},
        {"relu", relu_d, ew_relu, ew_relu_bwd},
        {"tanh", tanh, ew_tanh, ew_tanh_bwd},
        {"gelu_erf", gelu_erf_d, ew_gelu_erf, ew_gelu_erf_bwd},
    };
    int fail = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double wf = 0, wb = 0;
        for (int i = -20000; i <= 20000; i++) {
            float x = (float)i * 6e-4f + 3e-5f;   /* off the grid points, so relu's kink is never hit */
            double r = cases[c].ref(x), h = 1e-5;
            double fd = (cases[c].ref((double)x + h) - cases[c].ref((double)x - h)) / (2 * h);
            double ef = fabs(cases[c].fwd(x, 0, 0) - r) / (1.0 + fabs(r));
            double eb = fabs(cases[c].bwd(x, 0.75f, 0) - 0.75 * fd) / (1.0 + fabs(fd));   /* dy = 0.75 */
            wf = ef > wf ? ef : wf;
            wb = eb > wb ? eb : wb;
        }
        int bad = !(wf < 2e-6) || !(wb < 2e-6) || !isnan(cases[c].fwd(NAN, 0, 0)) ||
                  !isnan(cases[c].bwd(NAN, 1, 0));
        printf("%-9s forward worst rel error %.2e, backward vs finite differences %.2e (limits 2e-6)%s\n",
               cases[c].name, wf, wb, bad ? "  FAIL" : "");
        fail |= bad;
    }
    /* the binary ops, on a few values (broadcasting is the emitters' indexing) */
    if (ew_mul(3.0f, -2.5f, 0) != -7.5f || ew_sub(3.0f, -2.5f, 0) != 5.5f) {
        puts("FAIL: mul or sub");
        fail = 1;
    }
    puts(fail ? "FAIL" : "ok");
    return fail;
}
