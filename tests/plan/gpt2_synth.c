/* gpt2_synth.c — builders for plan tests: small graphs and a synthetic GPT-2
 * training graph (forward as models/gpt2.graph writes it, a backward in the
 * shape autodiff produces, one AdamW op per parameter). Shapes are exact; op
 * attributes that only codegen needs are left out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_util.h"

static const Loc noloc = {"<test>", 0, 0};

int pu_tensor_nd(Graph *g, const char *name, DType dt, int rank, const long *shape,
                 TensorKind kind)
{
    return graph_add_tensor(g, name, dt, rank, shape, kind, noloc);
}

int pu_tensor(Graph *g, const char *name, long n, TensorKind kind)
{
    return pu_tensor_nd(g, name, DT_F32, 1, &n, kind);
}

int pu_view(Graph *g, const char *name, int of, size_t off, int rank, const long *shape)
{
    int t = pu_tensor_nd(g, name, g->t[of].dtype, rank, shape, g->t[of].kind);
    g->t[t].view_of = of;
    g->t[t].view_offset = off;
    g->t[t].region = g->t[of].region;
    return t;
}

int pu_op(Graph *g, OpKind kind, const char *name, int nin, const int *in, int nout,
          const int *out, int acc, Phase ph)
{
    int o = graph_add_op(g, kind, name, in, nin, out, nout, noloc);
    g->ops[o].acc = acc;
    g->ops[o].phase = ph;
    return o;
}

void pu_schedule_all(Graph *g)
{
    free(g->sched);
    g->sched = xmalloc(((size_t)g->nops + 1) * sizeof *g->sched);
    g->nsched = g->nops;
    for (int i = 0; i < g->nops; i++) {
        g->sched[i] = i;
        g->ops[i].step = i;
    }
    g->schedule_name = "plain";
}

/* ------------------------------------------------------------ GPT-2 */

typedef struct Ctx {
    Graph *g;
    const Gpt2Dims *d;
    Phase ph;
    int layer;
} Ctx;

#define SH(...) (const long[]){__VA_ARGS__}, (int)(sizeof((long[]){__VA_ARGS__}) / sizeof(long))

static char *nm(const Ctx *c, const char *s)
{
    static char buf[8][128];
    static int k;
    k = (k + 1) % 8;
    if (c->layer >= 0)
        snprintf(buf[k], sizeof buf[k], "%sh%d.%s", c->ph == PH_BWD ? "d." : "", c->layer, s);
    else
        snprintf(buf[k], sizeof buf[k], "%s%s", c->ph == PH_BWD ? "d." : "", s);
    return buf[k];
}

/* New f32 tensor of the phase's kind. */
static int ten(Ctx *c, const char *name, const long *shape, int rank)
{
    TensorKind k = c->ph == PH_BWD ? TK_ACTGRAD : TK_ACTIVATION;
    return pu_tensor_nd(c->g, nm(c, name), DT_F32, rank, shape, k);
}

static int op1(Ctx *c, OpKind k, const char *name, int nin, const int *in, int out, int acc)
{
    return pu_op(c->g, k, nm(c, name), nin, in, 1, &out, acc, c->ph);
}

/* Layer slice l of a stacked parameter (or gradient) root: a view, made by an
 * index op when `with_op`. */
static int slice_l(Ctx *c, int root, int l, int with_op)
{
    const Tensor *r = &c->g->t[root];   /* copied out: adding a tensor moves g->t */
    size_t per = r->bytes / (size_t)r->shape[0];
    long shape[IR_MAXRANK];
    int rank = r->rank - 1;
    memcpy(shape, r->shape + 1, (size_t)rank * sizeof *shape);
    char name[160];
    snprintf(name, sizeof name, "%s[%d]", r->name, l);
    int v = pu_view(c->g, name, root, per * (size_t)l, rank, shape);
    if (with_op)
        pu_op(c->g, OP_INDEX, name, 1, &root, 1, &v, 0, c->ph);
    return v;
}

enum { P_WTE, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_APW, P_APB, P_LN2W, P_LN2B, P_FCW, P_FCB,
       P_FPW, P_FPB, P_LNFW, P_LNFB, NP };

typedef struct Saved {   /* per layer forward tensors the backward reads */
    int x, ln1w, h, mean1, rstd1, qkvw, q, k, v, att, yr, apw, x2, ln2w, h2, mean2, rstd2,
        fcw, f2, gel, fpw;
} Saved;

static void make_params(Graph *g, const Gpt2Dims *d, int *p)
{
    long L = d->L, C = d->C;
    static const char *names[NP] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw",
                                    "attprojb", "ln2w", "ln2b", "fcw", "fcb", "fcprojw",
                                    "fcprojb", "lnfw", "lnfb"};
    long shapes[NP][3] = {{d->Vp, C}, {d->maxT, C}, {L, C}, {L, C}, {L, 3 * C, C}, {L, 3 * C},
                          {L, C, C}, {L, C}, {L, C}, {L, C}, {L, 4 * C, C}, {L, 4 * C},
                          {L, C, 4 * C}, {L, C}, {C}, {C}};
    int ranks[NP] = {2, 2, 2, 2, 3, 2, 3, 2, 2, 2, 3, 2, 3, 2, 1, 1};
    g->params = xmalloc(NP * sizeof *g->params);
    for (int i = 0; i < NP; i++) {
        p[i] = pu_tensor_nd(g, names[i], DT_F32, ranks[i], shapes[i], TK_PARAM);
        g->params[g->nparams++] = p[i];
    }
    for (int i = 0; i < NP; i++) {
        char n[64];
        snprintf(n, sizeof n, "d.%s", names[i]);
        int gr = pu_tensor_nd(g, n, DT_F32, ranks[i], shapes[i], TK_GRAD);
        snprintf(n, sizeof n, "m.%s", names[i]);
        int m = pu_tensor_nd(g, n, DT_F32, ranks[i], shapes[i], TK_OPTSTATE);
        snprintf(n, sizeof n, "v.%s", names[i]);
        int v = pu_tensor_nd(g, n, DT_F32, ranks[i], shapes[i], TK_OPTSTATE);
        g->t[p[i]].grad = gr;
        g->t[p[i]].opt_m = m;
        g->t[p[i]].opt_v = v;
    }
}

/* One transformer block forward; returns the new residual. */
static int block_fwd(Ctx *c, const int *p, int x, Saved *s)
{
    const Gpt2Dims *d = c->d;
    long B = d->B, T = d->T, C = d->C, NH = d->NH, hs = C / NH;
    int l = c->layer;
    s->x = x;
    s->ln1w = slice_l(c, p[P_LN1W], l, 1);
    int ln1b = slice_l(c, p[P_LN1B], l, 1);
    s->h = ten(c, "ln1", SH(B, T, C));
    s->mean1 = ten(c, "ln1.mean", SH(B, T));
    s->rstd1 = ten(c, "ln1.rstd", SH(B, T));
    pu_op(c->g, OP_LAYERNORM, nm(c, "ln1"), 3, (int[]){x, s->ln1w, ln1b}, 3,
          (int[]){s->h, s->mean1, s->rstd1}, 0, c->ph);
    s->qkvw = slice_l(c, p[P_QKVW], l, 1);
    int qkv0 = ten(c, "qkv.mm", SH(B, T, 3 * C));
    op1(c, OP_MATMUL, "qkv.mm", 2, (int[]){s->h, s->qkvw}, qkv0, 0);
    int qkvb = slice_l(c, p[P_QKVB], l, 1);
    int qkv = ten(c, "qkv", SH(B, T, 3 * C));
    op1(c, OP_ADD, "qkv", 2, (int[]){qkv0, qkvb}, qkv, 0);
    int r = pu_view(c->g, nm(c, "qkv.r"), qkv, 0, 5, (long[]){B, T, 3, NH, hs});
    pu_op(c->g, OP_RESHAPE, nm(c, "qkv.r"), 1, &qkv, 1, &r, 0, c->ph);
    int pq = ten(c, "qkv.p", SH(3, B, NH, T, hs));
    op1(c, OP_PERMUTE, "qkv.p", 1, &r, pq, 0);
    size_t third = c->g->t[pq].bytes / 3;
    s->q = pu_view(c->g, nm(c, "q"), pq, 0, 4, (long[]){B, NH, T, hs});
    s->k = pu_view(c->g, nm(c, "k"), pq, third, 4, (long[]){B, NH, T, hs});
    s->v = pu_view(c->g, nm(c, "v"), pq, 2 * third, 4, (long[]){B, NH, T, hs});
    pu_op(c->g, OP_SPLIT, nm(c, "qkv.split"), 1, &pq, 3, (int[]){s->q, s->k, s->v}, 0, c->ph);
    int pre = ten(c, "preatt", SH(B, NH, T, T));
    op1(c, OP_MATMUL, "preatt", 2, (int[]){s->q, s->k}, pre, 0);
    int sc = ten(c, "preatt.s", SH(B, NH, T, T));
    op1(c, OP_SCALE, "preatt.s", 1, &pre, sc, 0);
    int mk = ten(c, "preatt.m", SH(B, NH, T, T));
    op1(c, OP_CAUSAL_MASK, "preatt.m", 1, &sc, mk, 0);
    s->att = ten(c, "att", SH(B, NH, T, T));
    op1(c, OP_SOFTMAX, "att", 1, &mk, s->att, 0);
    int yv = ten(c, "atty.mm", SH(B, NH, T, hs));
    op1(c, OP_MATMUL, "atty.mm", 2, (int[]){s->att, s->v}, yv, 0);
    int yp = ten(c, "atty", SH(B, T, NH, hs));
    op1(c, OP_PERMUTE, "atty", 1, &yv, yp, 0);
    s->yr = pu_view(c->g, nm(c, "atty.r"), yp, 0, 3, (long[]){B, T, C});
    pu_op(c->g, OP_RESHAPE, nm(c, "atty.r"), 1, &yp, 1, &s->yr, 0, c->ph);
    s->apw = slice_l(c, p[P_APW], l, 1);
    int ap0 = ten(c, "attproj.mm", SH(B, T, C));
    op1(c, OP_MATMUL, "attproj.mm", 2, (int[]){s->yr, s->apw}, ap0, 0);
    int apb = slice_l(c, p[P_APB], l, 1);
    int ap = ten(c, "attproj", SH(B, T, C));
    op1(c, OP_ADD, "attproj", 2, (int[]){ap0, apb}, ap, 0);
    s->x2 = ten(c, "res2", SH(B, T, C));
    op1(c, OP_ADD, "res2", 2, (int[]){x, ap}, s->x2, 0);
    s->ln2w = slice_l(c, p[P_LN2W], l, 1);
    int ln2b = slice_l(c, p[P_LN2B], l, 1);
    s->h2 = ten(c, "ln2", SH(B, T, C));
    s->mean2 = ten(c, "ln2.mean", SH(B, T));
    s->rstd2 = ten(c, "ln2.rstd", SH(B, T));
    pu_op(c->g, OP_LAYERNORM, nm(c, "ln2"), 3, (int[]){s->x2, s->ln2w, ln2b}, 3,
          (int[]){s->h2, s->mean2, s->rstd2}, 0, c->ph);
    s->fcw = slice_l(c, p[P_FCW], l, 1);
    int f0 = ten(c, "fch.mm", SH(B, T, 4 * C));
    op1(c, OP_MATMUL, "fch.mm", 2, (int[]){s->h2, s->fcw}, f0, 0);
    int fcb = slice_l(c, p[P_FCB], l, 1);
    s->f2 = ten(c, "fch", SH(B, T, 4 * C));
    op1(c, OP_ADD, "fch", 2, (int[]){f0, fcb}, s->f2, 0);
    s->gel = ten(c, "fch_gelu", SH(B, T, 4 * C));
    op1(c, OP_GELU, "fch_gelu", 1, &s->f2, s->gel, 0);
    s->fpw = slice_l(c, p[P_FPW], l, 1);
    int pr0 = ten(c, "fcproj.mm", SH(B, T, C));
    op1(c, OP_MATMUL, "fcproj.mm", 2, (int[]){s->gel, s->fpw}, pr0, 0);
    int fpb = slice_l(c, p[P_FPB], l, 1);
    int pr = ten(c, "fcproj", SH(B, T, C));
    op1(c, OP_ADD, "fcproj", 2, (int[]){pr0, fpb}, pr, 0);
    int x3 = ten(c, "res3", SH(B, T, C));
    op1(c, OP_ADD, "res3", 2, (int[]){s->x2, pr}, x3, 0);
    return x3;
}

/* One block backward: dx is the gradient of the block's output residual, it
 * is accumulated into and returned as the gradient of its input. */
static int block_bwd(Ctx *c, const int *gr, const Saved *s, int dx)
{
    const Gpt2Dims *d = c->d;
    long B = d->B, T = d->T, C = d->C, NH = d->NH, hs = C / NH;
    int l = c->layer;
    /* MLP */
    op1(c, OP_REDUCE_ROWS, "fcprojb", 1, &dx, slice_l(c, gr[P_FPB], l, 0), 0);
    int dg = ten(c, "fch_gelu", SH(B, T, 4 * C));
    op1(c, OP_MATMUL, "fch_gelu", 2, (int[]){dx, s->fpw}, dg, 0);
    op1(c, OP_MATMUL, "fcprojw", 2, (int[]){dx, s->gel}, slice_l(c, gr[P_FPW], l, 0), 0);
    int df = ten(c, "fch", SH(B, T, 4 * C));
    op1(c, OP_GELU_BWD, "fch", 2, (int[]){s->f2, dg}, df, 0);
    op1(c, OP_REDUCE_ROWS, "fcb", 1, &df, slice_l(c, gr[P_FCB], l, 0), 0);
    int dh2 = ten(c, "ln2", SH(B, T, C));
    op1(c, OP_MATMUL, "ln2", 2, (int[]){df, s->fcw}, dh2, 0);
    op1(c, OP_MATMUL, "fcw", 2, (int[]){df, s->h2}, slice_l(c, gr[P_FCW], l, 0), 0);
    pu_op(c->g, OP_LAYERNORM_BWD, nm(c, "ln2.bwd"), 5,
          (int[]){dh2, s->x2, s->ln2w, s->mean2, s->rstd2}, 3,
          (int[]){dx, slice_l(c, gr[P_LN2W], l, 0), slice_l(c, gr[P_LN2B], l, 0)}, 1, c->ph);
    /* attention */
    op1(c, OP_REDUCE_ROWS, "attprojb", 1, &dx, slice_l(c, gr[P_APB], l, 0), 0);
    int dyr = ten(c, "atty", SH(B, T, C));
    op1(c, OP_MATMUL, "atty", 2, (int[]){dx, s->apw}, dyr, 0);
    op1(c, OP_MATMUL, "attprojw", 2, (int[]){dx, s->yr}, slice_l(c, gr[P_APW], l, 0), 0);
    int dyp = pu_view(c->g, nm(c, "atty.r"), dyr, 0, 4, (long[]){B, T, NH, hs});
    pu_op(c->g, OP_RESHAPE, nm(c, "atty.r"), 1, &dyr, 1, &dyp, 0, c->ph);
    int dyv = ten(c, "atty.mm", SH(B, NH, T, hs));
    op1(c, OP_PERMUTE, "atty.mm", 1, &dyp, dyv, 0);
    int da = ten(c, "att", SH(B, NH, T, T));
    op1(c, OP_MATMUL, "att", 2, (int[]){dyv, s->v}, da, 0);
    int dp = ten(c, "qkv.p", SH(3, B, NH, T, hs));
    size_t third = c->g->t[dp].bytes / 3;
    int dq = pu_view(c->g, nm(c, "q"), dp, 0, 4, (long[]){B, NH, T, hs});
    int dk = pu_view(c->g, nm(c, "k"), dp, third, 4, (long[]){B, NH, T, hs});
    int dv = pu_view(c->g, nm(c, "v"), dp, 2 * third, 4, (long[]){B, NH, T, hs});
    op1(c, OP_MATMUL, "v", 2, (int[]){s->att, dyv}, dv, 0);
    int dm = ten(c, "preatt.m", SH(B, NH, T, T));
    pu_op(c->g, OP_SOFTMAX_BWD, nm(c, "preatt.m"), 2, (int[]){da, s->att}, 1, &dm, 0, c->ph);
    int dsc = ten(c, "preatt.s", SH(B, NH, T, T));
    op1(c, OP_CAUSAL_MASK_BWD, "preatt.s", 1, &dm, dsc, 0);
    int dpre = ten(c, "preatt", SH(B, NH, T, T));
    op1(c, OP_SCALE, "preatt", 1, &dsc, dpre, 0);
    op1(c, OP_MATMUL, "q", 2, (int[]){dpre, s->k}, dq, 0);
    op1(c, OP_MATMUL, "k", 2, (int[]){dpre, s->q}, dk, 0);
    int dr = ten(c, "qkv.r", SH(B, T, 3, NH, hs));
    op1(c, OP_PERMUTE, "qkv.r", 1, &dp, dr, 0);
    int dqkv = pu_view(c->g, nm(c, "qkv"), dr, 0, 3, (long[]){B, T, 3 * C});
    pu_op(c->g, OP_RESHAPE, nm(c, "qkv"), 1, &dr, 1, &dqkv, 0, c->ph);
    op1(c, OP_REDUCE_ROWS, "qkvb", 1, &dqkv, slice_l(c, gr[P_QKVB], l, 0), 0);
    int dh = ten(c, "ln1", SH(B, T, C));
    op1(c, OP_MATMUL, "ln1", 2, (int[]){dqkv, s->qkvw}, dh, 0);
    op1(c, OP_MATMUL, "qkvw", 2, (int[]){dqkv, s->h}, slice_l(c, gr[P_QKVW], l, 0), 0);
    pu_op(c->g, OP_LAYERNORM_BWD, nm(c, "ln1.bwd"), 5,
          (int[]){dh, s->x, s->ln1w, s->mean1, s->rstd1}, 3,
          (int[]){dx, slice_l(c, gr[P_LN1W], l, 0), slice_l(c, gr[P_LN1B], l, 0)}, 1, c->ph);
    return dx;
}

Graph *gpt2_synth(const Gpt2Dims *d)
{
    Graph *g = graph_new("<gpt2_synth>");
    const char *dn[] = {"B", "T", "maxT", "V", "Vp", "L", "NH", "C"};
    const long dv[] = {d->B, d->T, d->maxT, d->V, d->Vp, d->L, d->NH, d->C};
    g->dims = xcalloc(8, sizeof *g->dims);
    for (int i = 0; i < 8; i++)
        g->dims[g->ndims++] = (Dim){xstrdup(dn[i]), dv[i], noloc};
    long B = d->B, T = d->T, C = d->C;
    int tokens = pu_tensor_nd(g, "tokens", DT_I32, 2, (long[]){B, T}, TK_INPUT);
    int targets = pu_tensor_nd(g, "targets", DT_I32, 2, (long[]){B, T}, TK_INPUT);
    g->inputs = xmalloc(2 * sizeof *g->inputs);
    g->inputs[g->ninputs++] = tokens;
    g->inputs[g->ninputs++] = targets;
    int p[NP], gr[NP];
    make_params(g, d, p);
    for (int i = 0; i < NP; i++)
        gr[i] = g->t[p[i]].grad;
    Saved *sv = xcalloc((size_t)d->L, sizeof *sv);
    Ctx c = {g, d, PH_FWD, -1};

    int emb = ten(&c, "encoded.emb", SH(B, T, C));
    op1(&c, OP_EMBEDDING, "encoded.emb", 2, (int[]){p[P_WTE], tokens}, emb, 0);
    int wpe = pu_view(g, "wpe.T", p[P_WPE], 0, 2, (long[]){T, C});
    op1(&c, OP_SLICE, "wpe.T", 1, &p[P_WPE], wpe, 0);
    int x = ten(&c, "encoded", SH(B, T, C));
    op1(&c, OP_ADD, "encoded", 2, (int[]){emb, wpe}, x, 0);
    for (int l = 0; l < d->L; l++) {
        c.layer = l;
        x = block_fwd(&c, p, x, &sv[l]);
    }
    c.layer = -1;
    int xf = ten(&c, "lnf", SH(B, T, C)), mf = ten(&c, "lnf.mean", SH(B, T)),
        rf = ten(&c, "lnf.rstd", SH(B, T));
    pu_op(g, OP_LAYERNORM, "lnf", 3, (int[]){x, p[P_LNFW], p[P_LNFB]}, 3, (int[]){xf, mf, rf},
          0, PH_FWD);
    int logits = ten(&c, "logits", SH(B, T, d->Vp));
    op1(&c, OP_MATMUL, "logits", 2, (int[]){xf, p[P_WTE]}, logits, 0);
    int loss = ten(&c, "loss", SH(1));
    op1(&c, OP_CROSS_ENTROPY, "loss", 2, (int[]){logits, targets}, loss, 0);
    g->loss = loss;

    c.ph = PH_BWD;
    int dloss = ten(&c, "loss", SH(1));
    op1(&c, OP_FILL, "loss", 0, NULL, dloss, 0);
    int dlogits = ten(&c, "logits", SH(B, T, d->Vp));
    op1(&c, OP_CROSS_ENTROPY_BWD, "logits", 3, (int[]){dloss, logits, targets}, dlogits, 0);
    int dxf = ten(&c, "lnf", SH(B, T, C));
    op1(&c, OP_MATMUL, "lnf", 2, (int[]){dlogits, p[P_WTE]}, dxf, 0);
    op1(&c, OP_MATMUL, "wte", 2, (int[]){dlogits, xf}, gr[P_WTE], 0);
    int dx = ten(&c, "res", SH(B, T, C));
    pu_op(g, OP_LAYERNORM_BWD, "d.lnf", 5, (int[]){dxf, x, p[P_LNFW], mf, rf}, 3,
          (int[]){dx, gr[P_LNFW], gr[P_LNFB]}, 0, PH_BWD);
    for (int l = (int)d->L - 1; l >= 0; l--) {
        c.layer = l;
        dx = block_bwd(&c, gr, &sv[l], dx);
    }
    c.layer = -1;
    op1(&c, OP_EMBEDDING_BWD, "wte.emb", 2, (int[]){dx, tokens}, gr[P_WTE], 1);
    op1(&c, OP_REDUCE_ROWS, "wpe", 1, &dx, pu_view(g, "d.wpe.T", gr[P_WPE], 0, 2,
                                                  (long[]){T, C}), 0);
    for (int i = 0; i < NP; i++)
        pu_op(g, OP_ADAMW, "adamw", 4,
              (int[]){p[i], gr[i], g->t[p[i]].opt_m, g->t[p[i]].opt_v}, 0, NULL, 0, PH_OPT);
    free(sv);
    pu_schedule_all(g);
    return g;
}
