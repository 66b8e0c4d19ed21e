/* Writes the elementwise expression preamble (codegen/expr.c) as a header,
 * so the test below runs exactly the text the emitters generate. */
#include <stdio.h>
#include "codegen.h"

int main(void)
{
    fputs("#define GC_EWFN static inline\n", stdout);
    fputs(ew_preamble(), stdout);
    return ferror(stdout) != 0;
}
