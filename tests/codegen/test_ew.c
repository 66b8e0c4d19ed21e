/* The generated elementwise arithmetic (codegen/expr.c): GELU forward against
 * llm.c's formula evaluated in double, and the backward rule gelu_bwd against
 * central finite differences of that formula in double precision; the tanh
 * used on the CPU against libm. Exit status 1 on any failure. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ew_preamble.h"

static double gelu_ref(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

int main(void)
{
    int fail = 0;
    double worst_t = 0, worst_f = 0, worst_b = 0;
    for (int i = -20000; i <= 20000; i++) {
        float x = (float)i * 6e-4f;               /* [-12, 12] */
        double th = tanh((double)x);
        double et = fabs(gc_tanh(x) - th);
        double ef = fabs(gc_gelu(x) - gelu_ref(x)) / (1.0 + fabs(gelu_ref(x)));
        double h = 1e-5;
        double fd = (gelu_ref((double)x + h) - gelu_ref((double)x - h)) / (2 * h);
        double eb = fabs(gc_gelu_grad(x) - fd) / (1.0 + fabs(fd));
        if (et > worst_t) worst_t = et;
        if (ef > worst_f) worst_f = ef;
        if (eb > worst_b) worst_b = eb;
    }
    printf("tanh: worst abs error %.2e (limit 4e-7)\n", worst_t);
    printf("gelu: worst rel error %.2e (limit 1e-6)\n", worst_f);
    printf("gelu_bwd vs finite differences (double): worst rel error %.2e (limit 2e-6)\n", worst_b);
    fail |= !(worst_t < 4e-7) | !(worst_f < 1e-6) | !(worst_b < 2e-6);
    /* NaN in, NaN out: the poisoned-buffer check relies on it */
    float nan = NAN;
    if (!isnan(gc_gelu(nan)) || !isnan(gc_gelu_grad(nan))) {
        printf("FAIL: NaN does not propagate through gelu\n");
        fail = 1;
    }
    if (gc_tanh(-0.0f) != 0.0f || gc_tanh(1e30f) != 1.0f || gc_tanh(-1e30f) != -1.0f) {
        printf("FAIL: tanh limits\n");
        fail = 1;
    }
    puts(fail ? "FAIL" : "ok");
    return fail;
}
