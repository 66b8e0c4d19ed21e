/* fuse_attention.c — causal self-attention as one op that never stores the
 * T x T scores (FlashAttention-2 kernels in runtime/attention_*.c|cu).
 *
 * The pattern, found from each forward softmax (GPT-2 writes it so):
 *
 *   P  = permute(x, perm)           (3, B, NH, T, hs): heads split off x
 *   q, k, v = split(P, 3)
 *   S  = matmul(q, k, tb=1)         (B, NH, T, T)
 *   A  = softmax(causal_mask(scale(S, s)))
 *   O  = matmul(A, v)               (B, NH, T, hs)
 *   [Y = permute(O, [0, 2, 1, 3])]  (B, T, NH, hs): heads back into channels
 *
 * becomes y, lse = attention(x): the permutes fold into the kernel's
 * indexing, so P, S, the scaled and masked scores, A and O leave the plan,
 * and one fp32 log-sum-exp per row (B*NH*T) is added. Fusion runs after
 * autodiff, so the backward ops of the pattern are rewritten too: every
 * backward op that reads or writes an internal tensor or an internal
 * gradient dies, and the one that wrote dx (the gradient of x, through the
 * inverse permute) becomes dx (+)= attention_bwd(dy, x, y, lse), which
 * recomputes the scores tile by tile.
 *
 * A candidate is left alone unless every use of every internal tensor is
 * one of the pattern's forward ops or a backward op, and every backward op
 * it kills writes only internal gradients or dx; x must be rank 5 with the
 * head dimension contiguous after the permute, hs <= GC_ATTENTION_MAXHS.
 * New ops take the ids of ops they replace, so creation order stays a valid
 * topological order.
 */
#include <string.h>

#include "gc_runtime.h"   /* GC_ATTENTION_MAXHS */
#include "passes.h"

enum { NINT = 10 };           /* internal forward tensors: P q k v S Sc M A O [Y's producer input] */

typedef struct Match {
    int ops[8], nops;         /* forward ops of the pattern (dead after) */
    int internal[NINT], nint; /* forward tensors that disappear */
    int x, y;                 /* the input (heads split off it) and the output */
    int heads_out;            /* y is permute(O, [0,2,1,3]) */
    int permute_op;           /* the permute that splits x into heads */
    double scale;
} Match;

static int producer_is(const Graph *g, int t, OpKind kind)
{
    int p = g->t[t].producer;
    return p >= 0 && g->ops[p].kind == kind && g->ops[p].phase == PH_FWD && !g->ops[p].dead && !g->ops[p].acc;
}

/* the only forward consumer of t, -1 when none or several */
static int only_fwd_consumer(const Graph *g, int t)
{
    int c = -1;
    for (int i = 0; i < g->t[t].nconsumers; i++) {
        const Op *op = &g->ops[g->t[t].consumers[i]];
        if (op->phase != PH_FWD)
            continue;
        if (c >= 0 && c != op->id)
            return -1;
        c = op->id;
    }
    return c;
}

/* Matches the pattern around softmax op `sm`; 1 on success. */
static int match(const Graph *g, const char *viewed, int sm, Match *m)
{
    const Op *soft = &g->ops[sm];
    if (soft->kind != OP_SOFTMAX || soft->phase != PH_FWD || soft->dead)
        return 0;
    int A = soft->out[0], M = soft->in[0];
    if (!producer_is(g, M, OP_CAUSAL_MASK))
        return 0;
    int Sc = g->ops[g->t[M].producer].in[0];
    if (!producer_is(g, Sc, OP_SCALE))
        return 0;
    const Op *sc = &g->ops[g->t[Sc].producer];
    int S = sc->in[0];
    if (!producer_is(g, S, OP_MATMUL))
        return 0;
    const Op *mm1 = &g->ops[g->t[S].producer];
    if (mm1->attr[0] != 0 || mm1->attr[1] != 1)
        return 0;
    int q = mm1->in[0], k = mm1->in[1];
    int mm2 = only_fwd_consumer(g, A);
    if (mm2 < 0 || g->ops[mm2].kind != OP_MATMUL || g->ops[mm2].in[0] != A || g->ops[mm2].acc ||
        g->ops[mm2].attr[0] != 0 || g->ops[mm2].attr[1] != 0)
        return 0;
    int v = g->ops[mm2].in[1], O = g->ops[mm2].out[0];
    /* q, k, v: the three parts of one split of a permute's output */
    int sp = g->t[q].producer;
    if (sp < 0 || g->ops[sp].kind != OP_SPLIT || g->ops[sp].nout != 3 || g->ops[sp].out[0] != q ||
        g->ops[sp].out[1] != k || g->ops[sp].out[2] != v || g->ops[sp].dead)
        return 0;
    int P = g->ops[sp].in[0];
    if (!producer_is(g, P, OP_PERMUTE) || g->t[P].rank != 5 || g->t[P].shape[0] != 3 || g->t[q].rank != 4)
        return 0;
    const Op *perm = &g->ops[g->t[P].producer];
    int x = perm->in[0];
    if (perm->list[4] != g->t[x].rank - 1 || g->t[P].shape[4] > GC_ATTENTION_MAXHS)
        return 0;
    /* the output: O itself, or O with its heads moved back next to channels */
    int y = O, heads_out = 0, pc = only_fwd_consumer(g, O);
    if (pc >= 0 && g->ops[pc].kind == OP_PERMUTE && g->t[O].nconsumers == 1 && !g->ops[pc].acc &&
        g->ops[pc].list[0] == 0 && g->ops[pc].list[1] == 2 && g->ops[pc].list[2] == 1 && g->ops[pc].list[3] == 3) {
        y = g->ops[pc].out[0];
        heads_out = 1;
    }
    *m = (Match){.nops = 0, .nint = 0, .x = x, .y = y, .heads_out = heads_out, .permute_op = perm->id,
                 .scale = sc->attr[0]};
    int ops[] = {perm->id, sp, mm1->id, sc->id, g->t[M].producer, sm, mm2, heads_out ? pc : -1};
    for (int i = 0; i < 8; i++)
        if (ops[i] >= 0)
            m->ops[m->nops++] = ops[i];
    int in[] = {P, q, k, v, S, Sc, M, A, O};
    for (int i = 0; i < 9; i++)
        if (in[i] != y)
            m->internal[m->nint++] = in[i];
    /* internal tensors: used only by the pattern (forward) or the backward */
    for (int i = 0; i < m->nint; i++) {
        const Tensor *t = &g->t[m->internal[i]];
        if (t->id == g->loss || (viewed[t->id] && t->id != P))
            return 0;
        for (int c = 0; c < t->nconsumers; c++) {
            const Op *op = &g->ops[t->consumers[c]];
            int ours = 0;
            for (int j = 0; j < m->nops; j++)
                ours |= op->id == m->ops[j];
            if (!ours && op->phase != PH_BWD)
                return 0;
        }
    }
    return 1;
}

/* mark[r] for each storage root r the fusion removes: the internal tensors
 * and their gradients. Returns 0 when a gradient aliases dx or dy. */
static int mark_internal(const Graph *g, const Match *m, char *mark)
{
    for (int i = 0; i < m->nint; i++) {
        const Tensor *t = &g->t[m->internal[i]];
        mark[graph_root(g, t->id, NULL)] = 1;
        if (t->grad >= 0)
            mark[graph_root(g, t->grad, NULL)] = 1;
    }
    int roots[] = {graph_root(g, m->x, NULL), graph_root(g, m->y, NULL),
                   g->t[m->x].grad >= 0 ? graph_root(g, g->t[m->x].grad, NULL) : -1,
                   g->t[m->y].grad >= 0 ? graph_root(g, g->t[m->y].grad, NULL) : -1};
    for (int i = 0; i < 4; i++)
        if (roots[i] >= 0 && mark[roots[i]])
            return 0;
    return 1;
}

static int touches(const Graph *g, const Op *op, const char *mark)
{
    for (int i = 0; i < op->nin; i++)
        if (mark[graph_root(g, op->in[i], NULL)])
            return 1;
    for (int i = 0; i < op->nout; i++)
        if (mark[graph_root(g, op->out[i], NULL)])
            return 1;
    return 0;
}

/* elements of the arena tensors under the marked roots */
static double marked_elems(const Graph *g, const char *mark)
{
    double n = 0;
    for (int t = 0; t < g->nt; t++)
        if (mark[t] && g->t[t].view_of < 0)
            n += (double)g->t[t].numel;
    return n;
}

/* Rewrites one match; 1 when done, 0 when the backward does not fit. */
static int rewrite(Graph *g, const Match *m)
{
    char *mark = xcalloc((size_t)g->nt, 1);
    int ok = mark_internal(g, m, mark);
    /* the backward ops to kill, and the one writing dx */
    int dx = g->t[m->x].grad, dxroot = dx >= 0 ? graph_root(g, dx, NULL) : -1, writer = -1, nbwd = 0;
    int *bwd = xmalloc((size_t)g->nops * sizeof(int));
    for (int o = 0; o < g->nops && ok; o++) {
        const Op *op = &g->ops[o];
        if (op->dead || op->phase != PH_BWD || !touches(g, op, mark))
            continue;
        bwd[nbwd++] = o;
        for (int i = 0; i < op->nout && ok; i++) {
            int r = graph_root(g, op->out[i], NULL);
            if (mark[r])
                continue;
            if (r != dxroot || op->out[i] != dx || writer >= 0)
                ok = 0;           /* writes something else outside the pattern */
            else
                writer = o;
        }
    }
    if (ok && nbwd && (writer < 0 || g->t[m->y].grad < 0))
        ok = 0;
    if (!ok) {
        free(mark);
        free(bwd);
        return 0;
    }
    double saved = marked_elems(g, mark);
    const Op *perm = &g->ops[m->permute_op];
    long B = g->t[m->internal[1]].shape[0], NH = g->t[m->internal[1]].shape[1], T = g->t[m->internal[1]].shape[2];
    /* lse: one fp32 per (batch, head, row) */
    long shape[3] = {B, NH, T};
    char *name = xasprintf("%s.lse", g->t[m->y].name);
    int lse = graph_add_tensor(g, name, DT_F32, 3, shape, TK_ACTIVATION, g->ops[m->permute_op].loc);
    free(name);
    perm = &g->ops[m->permute_op];
    /* the forward op takes the slot of the last op of the pattern */
    int fid = m->ops[m->nops - 1];
    long list[IR_MAXRANK];
    int nlist = perm->nlist;
    memcpy(list, perm->list, sizeof list);
    for (int i = 0; i < m->nops; i++)
        g->ops[m->ops[i]].dead = 1;
    for (int i = 0; i < m->nint; i++)
        g->t[m->internal[i]].producer = -1;
    Op *f = &g->ops[fid];
    char *fname = xasprintf("%s.attention", g->t[m->y].name);
    free(f->name);
    f->name = fname;
    f->kind = OP_ATTENTION;
    f->dead = 0;
    f->nin = 1, f->in[0] = m->x;
    f->nout = 2, f->out[0] = m->y, f->out[1] = lse;
    f->acc = 0;
    memset(f->attr, 0, sizeof f->attr);
    f->attr[0] = m->scale, f->attr[1] = m->heads_out;
    memcpy(f->list, list, sizeof list);
    f->nlist = nlist;
    g->t[m->y].producer = fid;
    g->t[lse].producer = fid;
    if (nbwd) {
        for (int i = 0; i < nbwd; i++)
            g->ops[bwd[i]].dead = 1;
        Op *b = &g->ops[writer];
        int acc = b->acc & 1;
        char *bname = xasprintf("bwd.%s", fname);
        free(b->name);
        b->name = bname;
        b->kind = OP_ATTENTION_BWD;
        b->dead = 0;
        b->nin = 4;
        b->in[0] = g->t[m->y].grad, b->in[1] = m->x, b->in[2] = m->y, b->in[3] = lse;
        b->nout = 1, b->out[0] = dx;
        b->acc = acc;
        memset(b->attr, 0, sizeof b->attr);
        b->attr[0] = m->scale, b->attr[1] = m->heads_out;
        memcpy(b->list, list, sizeof list);
        b->nlist = nlist;
        for (int t = 0; t < g->nt; t++)       /* producers of the dead gradients */
            if (g->t[t].producer >= 0 && g->ops[g->t[t].producer].dead)
                g->t[t].producer = -1;
        if (g->t[dx].producer < 0 || g->t[dx].producer == writer)
            g->t[dx].producer = writer;
    }
    fuse_note(g, "attention", saved - (double)(B * NH * T));
    free(mark);
    free(bwd);
    graph_relink(g);
    return 1;
}

void pass_fuse_attention(Graph *g)
{
    int nops = g->nops;
    for (int o = 0; o < nops; o++) {
        if (g->ops[o].kind != OP_SOFTMAX || g->ops[o].dead)
            continue;
        char *viewed = xcalloc((size_t)g->nt, 1);
        for (int t = 0; t < g->nt; t++)
            if (g->t[t].view_of >= 0)
                viewed[g->t[t].view_of] = 1;
        Match m;
        if (match(g, viewed, o, &m))
            rewrite(g, &m);
        free(viewed);
    }
}
