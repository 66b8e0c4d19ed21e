/* fuse.c — operator fusion. One rule so far: a forward matmul whose only
 * consumer is the broadcast add of a bias vector becomes one matmul_bias op
 * (cuBLASLt's BIAS epilogue on the GPU), and the matmul's own output, which
 * nothing else reads, disappears from the plan. The add is marked dead.
 * Run after autodiff (backward rules see primitive ops only), before
 * precision and schedule. */
#include <string.h>

#include "passes.h"

/* op o (an add) fuses with the matmul producing its first input; viewed[t]:
 * some tensor is a view of t */
static int fusible(const Graph *g, const char *viewed, const Op *add, int *mm)
{
    if (add->kind != OP_ADD || add->phase != PH_FWD || add->acc || add->dead)
        return 0;
    const Tensor *x = &g->t[add->in[0]], *bias = &g->t[add->in[1]], *y = &g->t[add->out[0]];
    if (x->producer < 0 || x->view_of >= 0 || x->nconsumers != 1 || x->id == g->loss)
        return 0;
    const Op *m = &g->ops[x->producer];
    if (m->kind != OP_MATMUL || m->phase != PH_FWD || m->acc || m->dead)
        return 0;
    long b, M, N, K;
    op_matmul_geom(g, m, &b, &M, &N, &K);
    /* the bias: one vector of N, added to every row of one (unbatched) product */
    if (bias->rank != 1 || bias->numel != N || b != 1 || y->numel != x->numel)
        return 0;
    if (viewed[x->id])                    /* nothing views the product (its storage goes away) */
        return 0;
    *mm = m->id;
    return 1;
}

int fuse_kind(const char *name)
{
    static const struct { const char *name; int kind; } kinds[] = {
        {"bias", FUSE_BIAS}, {"attention", FUSE_ATTENTION}, {"classifier", FUSE_CLASSIFIER},
        {"gelu", FUSE_GELU}, {"layernorm", FUSE_LAYERNORM}, {"bgrad", FUSE_BGRAD},
        {"swiglu", FUSE_SWIGLU},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (!strcmp(name, kinds[i].name))
            return kinds[i].kind;
    return 0;
}

void fuse_note(Graph *g, const char *kind, double elems)
{
    int i = 0;
    while (i < g->nfused && strcmp(g->fused[i].kind, kind))
        i++;
    if (i == g->nfused) {
        if (i == (int)(sizeof g->fused / sizeof g->fused[0]))
            IR_BUG("too many fusion kinds");
        g->fused[g->nfused++].kind = kind;
    }
    g->fused[i].count++;
    g->fused[i].elems += elems;
}

void pass_fuse(Graph *g)
{
    int nops = g->nops;
    char *viewed = xcalloc((size_t)g->nt, 1);
    for (int t = 0; t < g->nt; t++)
        if (g->t[t].view_of >= 0)
            viewed[g->t[t].view_of] = 1;
    for (int o = 0; o < nops; o++) {
        int mm;
        if (!fusible(g, viewed, &g->ops[o], &mm))
            continue;
        Op *add = &g->ops[o], *m = &g->ops[mm];
        double product = (double)g->t[add->in[0]].numel;   /* leaves the plan */
        m->kind = OP_MATMUL_BIAS;
        m->in[2] = add->in[1];
        m->nin = 3;
        g->t[m->out[0]].producer = -1;      /* the product: no longer made, never read */
        m->out[0] = add->out[0];
        g->t[add->out[0]].producer = mm;
        add->dead = 1;
        fuse_note(g, "bias", product);
    }
    free(viewed);
    graph_relink(g);
}
