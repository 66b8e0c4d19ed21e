/* fuse_swiglu.c — the gated MLP's h = silu(a) * b with its backward.
 *
 * The pattern (a SwiGLU MLP: a the gate projection, b the up projection):
 *   fwd  s = silu(a)                        fwd  h = swiglu(a, b)
 *   fwd  h = mul(s, b)   (or mul(b, s))  →
 *   bwd  ds = mul(dh, b)                    bwd  da, db = swiglu_bwd(dh, a, b)
 *   bwd  db = mul(dh, s)
 *   bwd  da = silu_bwd(a, ds)
 * where s is read by nothing but the mul and its db, a and b (same shape,
 * no broadcast) by no other forward op, ds by nothing but the silu_bwd, and
 * neither ds nor s is accumulated into. One elementwise kernel forward (the
 * expression text of silu then mul: the same bits as unfused in fp32) and
 * one kernel backward that recomputes silu(a) and its derivative from a: s
 * and ds leave the plan (at Llama 3.2 1B, B=8, T=2048: 16 layers x 512 MiB
 * of s kept for the backward, and the ds of one layer at a time).
 * Run after autodiff, before precision and recompute.
 */
#include "passes.h"

/* the forward ops reading t */
static int fwd_readers(const Graph *g, int t)
{
    int n = 0;
    for (int i = 0; i < g->t[t].nconsumers; i++)
        n += g->ops[g->t[t].consumers[i]].phase == PH_FWD;
    return n;
}

/* the live op of kind k reading t as input i (-1: none) */
static int reader(const Graph *g, int t, OpKind k, int i)
{
    for (int c = 0; c < g->t[t].nconsumers; c++) {
        const Op *op = &g->ops[g->t[t].consumers[c]];
        if (!op->dead && op->kind == k && op->nin > i && op->in[i] == t)
            return op->id;
    }
    return -1;
}

/* 1 when t is an activation of its own storage that only ops read */
static int plain(const Graph *g, const char *viewed, int t)
{
    const Tensor *x = &g->t[t];
    return x->view_of < 0 && !viewed[t] && t != g->loss;
}

static void fuse_one(Graph *g, const char *viewed, int mo)
{
    Op *m = &g->ops[mo];
    if (m->kind != OP_MUL || m->phase != PH_FWD || m->dead || m->acc)
        return;
    int side = -1;   /* which input of the mul is silu's output */
    for (int i = 0; i < 2 && side < 0; i++) {
        int p = g->t[m->in[i]].producer;
        if (p >= 0 && g->ops[p].kind == OP_SILU && !g->ops[p].dead && g->ops[p].phase == PH_FWD)
            side = i;
    }
    if (side < 0)
        return;
    int s = m->in[side], b = m->in[1 - side], so = g->t[s].producer, a = g->ops[so].in[0];
    const Tensor *S = &g->t[s];
    if (g->ops[so].acc || g->t[a].numel != S->numel || g->t[b].numel != S->numel || g->t[a].dtype != S->dtype ||
        g->t[b].dtype != S->dtype || !plain(g, viewed, s) || fwd_readers(g, s) != 1 || fwd_readers(g, a) != 1 ||
        fwd_readers(g, b) != 1 || a == b || S->nconsumers != 2)
        return;
    int ds = S->grad;
    if (ds < 0 || !plain(g, viewed, ds) || g->t[ds].producer < 0 || g->t[ds].nconsumers != 1)
        return;
    Op *dso = &g->ops[g->t[ds].producer];   /* ds = dh * b */
    if (dso->kind != OP_MUL || dso->dead || dso->acc || dso->in[1] != b)
        return;
    int dh = dso->in[0];
    int dbo = reader(g, s, OP_MUL, 1), dao = reader(g, ds, OP_SILU_BWD, 1);
    if (dbo < 0 || dao < 0 || g->ops[dbo].in[0] != dh || g->ops[dao].in[0] != a)
        return;
    /* the fused forward: m becomes swiglu(a, b), writing h */
    g->t[s].producer = -1;
    g->ops[so].dead = 1;
    m->kind = OP_SWIGLU;
    m->in[0] = a, m->in[1] = b;
    /* the fused backward, at ds's producer */
    int da = g->ops[dao].out[0], db = g->ops[dbo].out[0];
    int acc = (g->ops[dao].acc & 1) | (g->ops[dbo].acc & 1) << 1;
    g->t[ds].producer = -1;
    dso->kind = OP_SWIGLU_BWD;
    dso->nin = 3, dso->nout = 2;
    dso->in[0] = dh, dso->in[1] = a, dso->in[2] = b;
    dso->out[0] = da, dso->out[1] = db;
    dso->acc = acc;
    g->t[da].producer = dso->id;
    g->t[db].producer = dso->id;
    g->ops[dao].dead = 1;
    g->ops[dbo].dead = 1;
    fuse_note(g, "swiglu", (double)S->numel * 2);   /* s and ds leave the plan */
}

void pass_fuse_swiglu(Graph *g)
{
    char *viewed = xcalloc((size_t)g->nt, 1);
    for (int t = 0; t < g->nt; t++)
        if (g->t[t].view_of >= 0)
            viewed[g->t[t].view_of] = 1;
    for (int o = 0; o < g->nops; o++)
        fuse_one(g, viewed, o);
    free(viewed);
    graph_relink(g);
}
