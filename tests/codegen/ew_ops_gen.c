/* Writes every elementwise op's expression (codegen/expr.c) as a function
 * ew_<op>(x0, x1, s), after the preamble, so test_ew_ops runs exactly the
 * text the emitters generate. */
#include <stdio.h>
#include "codegen.h"

int main(void)
{
    fputs("#define GC_EWFN static inline\n", stdout);
    fputs(ew_preamble(), stdout);
    for (int k = 0; k < OP_COUNT; k++) {
        Op op = {.kind = (OpKind)k};
        const char *e = op_info[k].cls == OPC_EW ? ew_expr(&op) : NULL;
        if (e)
            printf("static inline float ew_%s(float x0, float x1, float s) { (void)x1; (void)s; return %s; }\n",
                   op_info[k].name, e);
    }
    return ferror(stdout) != 0;
}
