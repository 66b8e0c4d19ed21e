/* fuse_gelu.c — the MLP's h = gelu(matmul(x, w) + b) with its backward.
 *
 * The pattern (after pass_fuse made the matmul_bias):
 *   fwd  pre = matmul_bias(x, w, b)       fwd  h, pre = matmul_bias_gelu(x, w, b)
 *   fwd  h = gelu(pre)                →
 *   bwd  dh = matmul(dy, w2)               bwd  dpre, h' = matmul_dgelu(dy, w2, pre)
 *   bwd  dpre = gelu_bwd(pre, dh)
 * where pre is read by nothing but the gelu and its gelu_bwd, dh by nothing
 * but the gelu_bwd, none of them accumulates, and the backward also reads h
 * (the next matmul's weight gradient, dw2 = dy^T h). On CUDA the fused ops
 * are cuBLASLt's GELU_AUX_BIAS and DGELU epilogues; on the CPU a matmul and
 * one pass over its output. dh leaves the plan.
 *
 * Recompute: rather than keep h from the forward until dw2, matmul_dgelu
 * also writes h' = gelu(pre) (the GELU and its derivative share one tanh per
 * element on the CPU; one more elementwise kernel on CUDA), and the
 * backward's readers of h read h' instead. h then dies at its last forward
 * use and only pre is kept: at GPT-2 124M, B=8, T=1024, twelve 96 MiB
 * tensors less at the step's peak; h' lives from matmul_dgelu to dw2. Since
 * pre is kept anyway, this always saves.
 *
 * Same arithmetic as unfused on the CPU (the GELU is the elementwise op's
 * text): the losses match --no-fuse=gelu bit for bit. Needs the bias fusion
 * (--no-fuse=bias turns this one off too). Run after pass_fuse, before
 * precision and recompute.
 */
#include <string.h>

#include "passes.h"

/* the non-dead ops reading root r (through views): their count, the first
 * two in *a, *b */
static int readers(const Graph *g, int r, int *a, int *b)
{
    int n = 0;
    *a = *b = -1;
    for (int o = 0; o < g->nops; o++) {
        const Op *op = &g->ops[o];
        if (op->dead)
            continue;
        for (int i = 0; i < op->nin; i++)
            if (graph_root(g, op->in[i], NULL) == r) {
                if (n == 0)
                    *a = o;
                else if (n == 1)
                    *b = o;
                n++;
                break;
            }
    }
    return n;
}

/* 1 when some non-dead op other than `except` writes root r */
static int other_writer(const Graph *g, int r, int except)
{
    for (int o = 0; o < g->nops; o++) {
        const Op *op = &g->ops[o];
        if (op->dead || o == except)
            continue;
        for (int i = 0; i < op->nout; i++)
            if (graph_root(g, op->out[i], NULL) == r)
                return 1;
    }
    return 0;
}

/* t, or the same view of `to` when t is a view (chain) of root `from` */
static int rebase(Graph *g, int t, int from, int to)
{
    if (t == from)
        return to;
    if (g->t[t].view_of < 0)
        return t;
    int p = rebase(g, g->t[t].view_of, from, to);
    if (p == g->t[t].view_of)
        return t;
    Tensor x = g->t[t];
    char *name = xasprintf("%s.re", x.name);
    int v = graph_add_tensor(g, name, x.dtype, x.rank, x.shape, x.kind, x.loc);
    free(name);
    g->t[v].region = g->t[p].region;
    g->t[v].view_of = p;
    g->t[v].view_offset = x.view_offset;
    return v;
}

void pass_fuse_gelu(Graph *g)
{
    int nops = g->nops;
    for (int o = 0; o < nops; o++) {
        const Op *ge = &g->ops[o];
        if (ge->kind != OP_GELU || ge->phase != PH_FWD || ge->dead || ge->acc)
            continue;
        int pre = ge->in[0], h = ge->out[0];
        if (g->t[pre].view_of >= 0 || g->t[h].view_of >= 0 || g->t[pre].producer < 0 || pre == g->loss ||
            h == g->loss)
            continue;
        int mm = g->t[pre].producer;
        const Op *m = &g->ops[mm];
        if (m->kind != OP_MATMUL_BIAS || m->phase != PH_FWD || m->dead || m->acc || other_writer(g, pre, mm))
            continue;
        /* pre: read by the gelu and one gelu_bwd (pre, dh) */
        int r0, r1;
        if (readers(g, pre, &r0, &r1) != 2)
            continue;
        int gb = r0 == o ? r1 : r0;
        const Op *b = &g->ops[gb];
        if (b->kind != OP_GELU_BWD || b->phase != PH_BWD || b->acc || b->in[0] != pre || b->in[1] == pre)
            continue;
        /* dh: made by one plain backward matmul, read by the gelu_bwd only */
        int dh = b->in[1], dpre = b->out[0];
        int mg = g->t[dh].producer;
        if (g->t[dh].view_of >= 0 || mg < 0 || other_writer(g, dh, mg) || readers(g, dh, &r0, &r1) != 1)
            continue;
        const Op *d = &g->ops[mg];
        if (d->kind != OP_MATMUL || d->phase != PH_BWD || d->dead || d->acc || d->out[0] != dh ||
            g->t[dpre].view_of >= 0 || g->t[dpre].numel != g->t[dh].numel)
            continue;

        /* the backward reads h (else there is nothing to recompute it for) */
        int hread = 0;
        for (int k = 0; k < g->nops && !hread; k++)
            for (int i = 0; i < g->ops[k].nin && !g->ops[k].dead && g->ops[k].phase == PH_BWD; i++)
                hread |= graph_root(g, g->ops[k].in[i], NULL) == h;
        if (!hread)
            continue;

        /* forward: matmul_bias_gelu writes h and pre */
        Op *f = &g->ops[mm];
        f->kind = OP_MATMUL_BIAS_GELU;
        f->nout = 2, f->out[0] = h, f->out[1] = pre;
        g->t[h].producer = mm;
        g->ops[o].dead = 1;
        /* backward: matmul_dgelu writes dpre and h' = gelu(pre); dh leaves the plan */
        Tensor x = g->t[h];
        char *name = xasprintf("%s.re", x.name);
        int re = graph_add_tensor(g, name, x.dtype, x.rank, x.shape, TK_ACTIVATION, x.loc);
        free(name);
        g->t[re].region = RG_ARENA;
        Op *bd = &g->ops[mg];
        bd->kind = OP_MATMUL_DGELU;
        bd->nin = 3, bd->in[2] = pre;
        bd->nout = 2, bd->out[0] = dpre, bd->out[1] = re;
        g->t[dpre].producer = mg;
        g->t[re].producer = mg;
        g->t[dh].producer = -1;
        g->ops[gb].dead = 1;
        double saved = (double)g->t[dh].numel - (double)g->t[re].numel;   /* net 0: the saving is h's lifetime */
        for (int k = 0; k < g->nops; k++) {
            if (g->ops[k].dead || g->ops[k].phase != PH_BWD || k == mg)
                continue;
            for (int i = 0; i < g->ops[k].nin; i++)
                if (graph_root(g, g->ops[k].in[i], NULL) == h) {
                    int t = rebase(g, g->ops[k].in[i], h, re);
                    g->ops[k].in[i] = t;
                }
        }
        fuse_note(g, "gelu", saved);
    }
    graph_relink(g);
}
