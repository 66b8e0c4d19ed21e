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
 * one pass over its output. dh leaves the plan. (fuse_bgrad.c then folds
 * the bias gradient, the column sums of dpre, into matmul_dgelu: DGELU_BGRAD.)
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

/* Per storage root of the tensors at the pass's start (n0 of them), the ops
 * reading it and the ops writing it, so that each candidate costs its own
 * ops rather than a walk over all ops. The pass adds no view above an old
 * tensor (rebase's views sit under the new h'), so the roots of old tensors
 * hold; the lists are supersets (every entry is rechecked) that gain an
 * entry whenever an op starts reading or writing an old root. Queries on a
 * newer root fall back to the scan over all ops. */
typedef struct List { int *v, n, cap; } List;
typedef struct Index { int n0, *root; List *rd, *wr; } Index;

static void list_add(List *l, int o)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 4;
        l->v = xrealloc(l->v, (size_t)l->cap * sizeof *l->v);
    }
    l->v[l->n++] = o;
}

static int root_of(const Graph *g, const Index *x, int t)
{
    return t < x->n0 ? x->root[t] : graph_root(g, t, NULL);
}

/* op o now reads (its inputs) and writes (its outputs) whatever it does */
static void index_op(const Graph *g, Index *x, int o)
{
    const Op *op = &g->ops[o];
    for (int i = 0; i < op->nin + op->nout; i++) {
        int r = root_of(g, x, i < op->nin ? op->in[i] : op->out[i - op->nin]);
        if (r < x->n0)
            list_add(i < op->nin ? &x->rd[r] : &x->wr[r], o);
    }
}

static int int_cmp(const void *a, const void *b)
{
    int p = *(const int *)a, q = *(const int *)b;
    return (p > q) - (p < q);
}

static int reads_root(const Graph *g, const Index *x, const Op *op, int r)
{
    for (int i = 0; i < op->nin; i++)
        if (root_of(g, x, op->in[i]) == r)
            return 1;
    return 0;
}

static int writes_root(const Graph *g, const Index *x, const Op *op, int r)
{
    for (int i = 0; i < op->nout; i++)
        if (root_of(g, x, op->out[i]) == r)
            return 1;
    return 0;
}

/* The live ops that read (writes = 0) or write root r, ascending, into *out
 * (caller frees); their count. */
static int ops_at(const Graph *g, const Index *x, int r, int writes, int **out)
{
    int n = 0;
    int *v;
    if (r < x->n0) {
        const List *l = writes ? &x->wr[r] : &x->rd[r];
        v = xmalloc(((size_t)l->n + 1) * sizeof *v);
        memcpy(v, l->v, (size_t)l->n * sizeof *v);
        qsort(v, (size_t)l->n, sizeof *v, int_cmp);
        for (int i = 0; i < l->n; i++)
            if (i == 0 || v[i] != v[i - 1])
                v[n++] = v[i];
    } else {
        v = xmalloc(((size_t)g->nops + 1) * sizeof *v);
        for (int o = 0; o < g->nops; o++)
            v[n++] = o;
    }
    int m = 0;
    for (int i = 0; i < n; i++) {
        const Op *op = &g->ops[v[i]];
        if (!op->dead && (writes ? writes_root(g, x, op, r) : reads_root(g, x, op, r)))
            v[m++] = v[i];
    }
    *out = v;
    return m;
}

/* the non-dead ops reading root r (through views): their count, the first
 * two in *a, *b */
static int readers(const Graph *g, const Index *x, int r, int *a, int *b)
{
    int *v, n = ops_at(g, x, r, 0, &v);
    *a = n > 0 ? v[0] : -1;
    *b = n > 1 ? v[1] : -1;
    free(v);
    return n;
}

/* 1 when some non-dead op other than `except` writes root r */
static int other_writer(const Graph *g, const Index *x, int r, int except)
{
    int *v, n = ops_at(g, x, r, 1, &v), other = 0;
    for (int i = 0; i < n; i++)
        other |= v[i] != except;
    free(v);
    return other;
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
    Index ix = {g->nt, graph_roots(g, NULL), xcalloc((size_t)g->nt + 1, sizeof(List)),
               xcalloc((size_t)g->nt + 1, sizeof(List))};
    for (int k = 0; k < g->nops; k++)
        if (!g->ops[k].dead)
            index_op(g, &ix, k);
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
        if (m->kind != OP_MATMUL_BIAS || m->phase != PH_FWD || m->dead || m->acc || other_writer(g, &ix, pre, mm))
            continue;
        /* pre: read by the gelu and one gelu_bwd (pre, dh) */
        int r0, r1;
        if (readers(g, &ix, pre, &r0, &r1) != 2)
            continue;
        int gb = r0 == o ? r1 : r0;
        const Op *b = &g->ops[gb];
        if (b->kind != OP_GELU_BWD || b->phase != PH_BWD || b->acc || b->in[0] != pre || b->in[1] == pre)
            continue;
        /* dh: made by one plain backward matmul, read by the gelu_bwd only */
        int dh = b->in[1], dpre = b->out[0];
        int mg = g->t[dh].producer;
        if (g->t[dh].view_of >= 0 || mg < 0 || other_writer(g, &ix, dh, mg) || readers(g, &ix, dh, &r0, &r1) != 1)
            continue;
        const Op *d = &g->ops[mg];
        if (d->kind != OP_MATMUL || d->phase != PH_BWD || d->dead || d->acc || d->out[0] != dh ||
            g->t[dpre].view_of >= 0 || g->t[dpre].numel != g->t[dh].numel)
            continue;

        /* the backward reads h (else there is nothing to recompute it for) */
        int hread = 0, *hr, nhr = ops_at(g, &ix, h, 0, &hr);
        for (int k = 0; k < nhr; k++)
            hread |= g->ops[hr[k]].phase == PH_BWD;
        if (!hread) {
            free(hr);
            continue;
        }

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
        for (int j = 0; j < nhr; j++) {        /* the readers of h (none died since) */
            int k = hr[j];
            if (g->ops[k].dead || g->ops[k].phase != PH_BWD || k == mg)
                continue;
            for (int i = 0; i < g->ops[k].nin; i++)
                if (root_of(g, &ix, g->ops[k].in[i]) == h) {
                    int t = rebase(g, g->ops[k].in[i], h, re);
                    g->ops[k].in[i] = t;
                }
        }
        free(hr);
        index_op(g, &ix, mm);
        index_op(g, &ix, mg);
        fuse_note(g, "gelu", saved);
    }
    for (int t = 0; t < ix.n0; t++) {
        free(ix.rd[t].v);
        free(ix.wr[t].v);
    }
    free(ix.rd);
    free(ix.wr);
    free(ix.root);
    graph_relink(g);
}
