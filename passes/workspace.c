/* workspace.c — the runtime's scratch memory as a planned tensor, so that the
 * plan stays the allocation (the CUDA target's cuBLASLt workspace). */
#include "passes.h"

void pass_workspace(Graph *g, size_t bytes)
{
    if (!bytes)
        return;
    long n = (long)(bytes / sizeof(float));
    int t = graph_add_tensor(g, "runtime.workspace", DT_F32, 1, &n, TK_WORKSPACE, (Loc){0});
    g->t[t].region = RG_ARENA;
}
