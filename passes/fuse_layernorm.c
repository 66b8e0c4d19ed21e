/* fuse_layernorm.c — the residual add and the layernorm (or rmsnorm) that
 * reads its sum.
 *
 * The pattern (GPT-2: every block's two residual adds, each followed by the
 * next layernorm, the last one by the final layernorm):
 *   fwd  x = add(a, b)                      (a, b of the same shape)
 *   fwd  h, mean, rstd = layernorm(x, w, bias)
 * becomes x, h, mean, rstd = add_layernorm(a, b, w, bias): one kernel that
 * writes the sum and normalises it row by row while the row is in cache (on
 * CUDA one warp per row, as the layernorm kernel), so x is written once and
 * never read back by the forward, and one launch goes per pair. The plan
 * keeps the same tensors (x is still the residual stream and the layernorm
 * backward's input): this fusion saves traffic and launches, not memory.
 *
 * The backward needs no rewrite: autodiff already folds the residual
 * gradient add into the layernorm backward (layernorm_bwd accumulates its dx
 * into the gradient of x, which the add's operands' gradients alias).
 *
 * Recompute (recompute.c) clones this op as the plain layernorm of the kept
 * x: the sum is the residual stream, a checkpoint, never recomputed.
 *
 * The same for rmsnorm (Llama): x = add(a, b), h, rstd = rmsnorm(x, w)
 * becomes x, h, rstd = add_rmsnorm(a, b, w).
 * Run after autodiff and the other fusions, before precision.
 */
#include "passes.h"

/* writes[r] += d for each output of op stored under root r */
static void count_writes(const Graph *g, const int *root, const Op *op, int *writes, int d)
{
    for (int i = 0; i < op->nout; i++)
        writes[root[op->out[i]]] += d;
}

void pass_fuse_layernorm(Graph *g)
{
    int nops = g->nops;
    int *root = graph_roots(g, NULL);                 /* no view changes here */
    int *writes = xcalloc((size_t)g->nt + 1, sizeof *writes);   /* live ops' outputs per root */
    for (int k = 0; k < g->nops; k++)
        if (!g->ops[k].dead)
            count_writes(g, root, &g->ops[k], writes, 1);
    for (int o = 0; o < nops; o++) {
        const Op *ln = &g->ops[o];
        int rms = ln->kind == OP_RMSNORM;
        if ((ln->kind != OP_LAYERNORM && !rms) || ln->phase != PH_FWD || ln->dead || ln->acc)
            continue;
        int x = ln->in[0];
        const Tensor *X = &g->t[x];
        if (X->view_of >= 0 || X->producer < 0 || x == g->loss || X->kind != TK_ACTIVATION)
            continue;
        int ad = X->producer;
        const Op *a = &g->ops[ad];
        if (a->kind != OP_ADD || a->phase != PH_FWD || a->dead || a->acc || a->out[0] != x ||
            g->t[a->in[0]].numel != X->numel || g->t[a->in[1]].numel != X->numel ||
            g->t[a->in[0]].dtype != X->dtype || g->t[a->in[1]].dtype != X->dtype)
            continue;
        /* nobody else writes x: every write under root x is the add's own */
        int own = 0;
        for (int i = 0; i < a->nout; i++)
            own += root[a->out[i]] == x;
        if (writes[x] != own)
            continue;
        Op *f = &g->ops[o];
        count_writes(g, root, f, writes, -1);
        count_writes(g, root, &g->ops[ad], writes, -1);
        int in[4] = {a->in[0], a->in[1], f->in[1], rms ? -1 : f->in[2]};
        int out[4] = {x, f->out[0], f->out[1], rms ? -1 : f->out[2]};
        f->kind = rms ? OP_ADD_RMSNORM : OP_ADD_LAYERNORM;
        f->nin = f->nout = rms ? 3 : 4;
        for (int i = 0; i < f->nin; i++)
            f->in[i] = in[i], f->out[i] = out[i];
        g->t[x].producer = o;
        g->ops[ad].dead = 1;
        count_writes(g, root, f, writes, 1);
        fuse_note(g, rms ? "rmsnorm" : "layernorm", 0);   /* no tensor leaves the plan */
    }
    free(writes);
    free(root);
    graph_relink(g);
}
