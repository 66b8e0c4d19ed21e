/* emit_cuda.c — the CUDA training program (not implemented yet). */
#include "codegen.h"

void emit_cuda(FILE *f, const Graph *g, const EmitOptions *opt)
{
    (void)g;
    (void)opt;
    fprintf(f, "#error \"gcompile: --emit cuda is not implemented yet\"\n");
    fprintf(stderr, "gcompile: error: --emit cuda is not implemented yet\n");
}
