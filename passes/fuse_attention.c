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
 * The second form (Llama: q, k, v from separate projections, rotary
 * embeddings applied, grouped-query k/v heads):
 *
 *   [K = repeat(k, n, axis=1)]  [V = repeat(v, n, axis=1)]   (B, NKV, T, hs) -> (B, NH, T, hs)
 *   S  = matmul(q, K, tb=1);  A = softmax(causal_mask(scale(S, s)));  O = matmul(A, V)
 *   [Y = permute(O, [0, 2, 1, 3])]
 *
 * becomes y, lse = attention_gqa(q, k, v): the repeated k and v leave the
 * plan with the scores (query head h reads kv head h / n), and the backward
 * becomes dq, dk, dv (+)= attention_gqa_bwd(dy, q, k, v, y, lse), in the
 * slot of the first op that wrote one of them.
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
    int ops[9], nops;         /* forward ops of the pattern (dead after) */
    int gqa, end[3], group;   /* the second form: q, k, v; query heads per kv head */
    int internal[NINT], nint; /* forward tensors that disappear */
    int x, y;                 /* the input (heads split off it) and the output */
    int heads_out;            /* y is permute(O, [0,2,1,3]) */
    int permute_op;           /* the permute that splits x into heads */
    double scale;
} Match;

/* What the pass keeps between matches, so that each costs about its own ops
 * rather than a walk over the whole graph: the pass adds no views, so the
 * storage roots and the viewed flags of its start hold throughout (the lse
 * tensors it adds are roots nothing views), and every marked root is one of
 * those tensors. touch lists, per root, the ops that read or write under it
 * (a superset: entries are rechecked). */
typedef struct Ctx {
    int n0;                   /* tensors at the start */
    int *root;                /* [n0] storage root */
    char *viewed;             /* [n0] some tensor is a view of it */
    char *mark;               /* [n0] roots marked by the current rewrite */
    int *tstart, *tops;       /* ops touching each root at the start (CSR) */
    int *xhead, *xnext, *xop, nx, capx;   /* touches added since (lists per root) */
    int *pending, npending, cappending;   /* ops killed since the last producer sweep */
    int swept;                /* the first producer sweep has run */
    int linked;               /* consumer lists are graph_relink's (kept so incrementally) */
} Ctx;

static int root_of(const Ctx *c, int t) { return t < c->n0 ? c->root[t] : t; }

static void add_touch(Ctx *c, int r, int op)
{
    if (r >= c->n0)
        return;               /* an lse: never marked */
    if (c->nx == c->capx) {
        c->capx = c->capx ? 2 * c->capx : 64;
        c->xnext = xrealloc(c->xnext, (size_t)c->capx * sizeof *c->xnext);
        c->xop = xrealloc(c->xop, (size_t)c->capx * sizeof *c->xop);
    }
    c->xop[c->nx] = op;
    c->xnext[c->nx] = c->xhead[r];
    c->xhead[r] = c->nx++;
}

static void ctx_init(Ctx *c, const Graph *g)
{
    memset(c, 0, sizeof *c);
    c->n0 = g->nt;
    c->root = graph_roots(g, NULL);
    c->viewed = xcalloc((size_t)g->nt + 1, 1);
    for (int t = 0; t < g->nt; t++)
        if (g->t[t].view_of >= 0)
            c->viewed[g->t[t].view_of] = 1;
    c->mark = xcalloc((size_t)g->nt + 1, 1);
    c->tstart = xcalloc((size_t)g->nt + 2, sizeof *c->tstart);
    for (int pass = 0; pass < 2; pass++) {   /* count, then fill */
        for (int o = 0; o < g->nops; o++) {
            const Op *op = &g->ops[o];
            for (int i = 0; i < op->nin + op->nout && !op->dead; i++) {
                int r = c->root[i < op->nin ? op->in[i] : op->out[i - op->nin]];
                if (pass == 0)
                    c->tstart[r + 2]++;
                else
                    c->tops[c->tstart[r + 1]++] = o;
            }
        }
        if (pass == 0) {
            for (int r = 0; r < g->nt; r++)
                c->tstart[r + 2] += c->tstart[r + 1];
            c->tops = xmalloc(((size_t)c->tstart[g->nt + 1] + 1) * sizeof *c->tops);
        }
    }
    c->xhead = xmalloc(((size_t)g->nt + 1) * sizeof *c->xhead);
    for (int t = 0; t < g->nt; t++)
        c->xhead[t] = -1;
}

static void ctx_free(Ctx *c)
{
    free(c->root);
    free(c->viewed);
    free(c->mark);
    free(c->tstart);
    free(c->tops);
    free(c->xhead);
    free(c->xnext);
    free(c->xop);
    free(c->pending);
}

/* op o dies: out of the consumer lists; its outputs' producers are swept later */
static void kill(Graph *g, Ctx *c, int o)
{
    graph_unlink_op(g, o);
    g->ops[o].dead = 1;
    if (c->npending == c->cappending) {
        c->cappending = c->cappending ? 2 * c->cappending : 64;
        c->pending = xrealloc(c->pending, (size_t)c->cappending * sizeof *c->pending);
    }
    c->pending[c->npending++] = o;
}

/* Producers of dead ops become -1: once over all tensors, then over the
 * outputs of the ops killed since (a producer outputs its tensor: ir_verify) */
static void sweep_producers(Graph *g, Ctx *c)
{
    if (!c->swept) {
        for (int t = 0; t < g->nt; t++)
            if (g->t[t].producer >= 0 && g->ops[g->t[t].producer].dead)
                g->t[t].producer = -1;
        c->swept = 1;
    } else {
        for (int k = 0; k < c->npending; k++) {
            const Op *op = &g->ops[c->pending[k]];
            for (int i = 0; i < op->nout; i++) {
                Tensor *t = &g->t[op->out[i]];
                if (t->producer >= 0 && g->ops[t->producer].dead)
                    t->producer = -1;
            }
        }
    }
    c->npending = 0;
}

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
static int match(const Graph *g, const Ctx *c, int sm, Match *m)
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
        if (t->id == g->loss || (t->id < c->n0 && c->viewed[t->id] && t->id != P))
            return 0;
        for (int u = 0; u < t->nconsumers; u++) {
            const Op *op = &g->ops[t->consumers[u]];
            int ours = 0;
            for (int j = 0; j < m->nops; j++)
                ours |= op->id == m->ops[j];
            if (!ours && op->phase != PH_BWD)
                return 0;
        }
    }
    return 1;
}

/* k or v of the second form: the input of a repeat over the head axis, or t itself (n = 1) */
static int unrepeat(const Graph *g, int t, int *n, int *op)
{
    *n = 1, *op = -1;
    if (!producer_is(g, t, OP_REPEAT))
        return t;
    const Op *r = &g->ops[g->t[t].producer];
    if (r->attr[1] != 1 || g->t[t].rank != 4)
        return -1;
    *n = (int)r->attr[0], *op = r->id;
    return r->in[0];
}

/* Matches the second form (q, k, v separate, k and v maybe repeated) around softmax op `sm` */
static int match_gqa(const Graph *g, const Ctx *c, int sm, Match *m)
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
    int q = mm1->in[0], K = mm1->in[1];
    int mm2 = only_fwd_consumer(g, A);
    if (mm2 < 0 || g->ops[mm2].kind != OP_MATMUL || g->ops[mm2].in[0] != A || g->ops[mm2].acc ||
        g->ops[mm2].attr[0] != 0 || g->ops[mm2].attr[1] != 0)
        return 0;
    int V = g->ops[mm2].in[1], O = g->ops[mm2].out[0];
    int nk, nv, rk, rv, k = unrepeat(g, K, &nk, &rk), v = unrepeat(g, V, &nv, &rv);
    const Tensor *tq = &g->t[q];
    if (k < 0 || v < 0 || nk != nv || tq->rank != 4 || g->t[k].rank != 4 || g->t[v].rank != 4 ||
        tq->shape[3] > GC_ATTENTION_MAXHS || q == k || q == v || k == v)
        return 0;
    for (int i = 0; i < 4; i++)   /* q (B, NH, T, hs); k, v (B, NH/n, T, hs) */
        if (g->t[k].shape[i] != (i == 1 ? tq->shape[1] / nk : tq->shape[i]) || g->t[v].shape[i] != g->t[k].shape[i])
            return 0;
    if (tq->shape[1] % nk)
        return 0;
    int y = O, heads_out = 0, pc = only_fwd_consumer(g, O);
    if (pc >= 0 && g->ops[pc].kind == OP_PERMUTE && g->t[O].nconsumers == 1 && !g->ops[pc].acc &&
        g->ops[pc].list[0] == 0 && g->ops[pc].list[1] == 2 && g->ops[pc].list[2] == 1 && g->ops[pc].list[3] == 3) {
        y = g->ops[pc].out[0];
        heads_out = 1;
    }
    *m = (Match){.x = -1, .y = y, .heads_out = heads_out, .permute_op = -1, .scale = sc->attr[0], .gqa = 1,
                 .end = {q, k, v}, .group = nk};
    int ops[] = {rk, rv, mm1->id, sc->id, g->t[M].producer, sm, mm2, heads_out ? pc : -1};
    for (int i = 0; i < 8; i++)
        if (ops[i] >= 0)
            m->ops[m->nops++] = ops[i];
    int in[] = {S, Sc, M, A, O, rk >= 0 ? K : -1, rv >= 0 ? V : -1};
    for (int i = 0; i < 7; i++)
        if (in[i] >= 0 && in[i] != y)
            m->internal[m->nint++] = in[i];
    for (int i = 0; i < m->nint; i++) {
        const Tensor *t = &g->t[m->internal[i]];
        if (t->id == g->loss || (t->id < c->n0 && c->viewed[t->id]))
            return 0;
        for (int u = 0; u < t->nconsumers; u++) {
            const Op *op = &g->ops[t->consumers[u]];
            int ours = 0;
            for (int j = 0; j < m->nops; j++)
                ours |= op->id == m->ops[j];
            if (!ours && op->phase != PH_BWD)
                return 0;
        }
    }
    return 1;
}

/* marks (c->mark[r] = 1, listed in roots[]) each storage root r the fusion
 * removes: the internal tensors and their gradients. Returns the count, or
 * -1 when a gradient aliases dx or dy (roots[] as marked so far). */
static int mark_internal(const Graph *g, Ctx *c, const Match *m, int *roots, int *n)
{
    *n = 0;
    for (int i = 0; i < m->nint; i++) {
        const Tensor *t = &g->t[m->internal[i]];
        int rs[2] = {root_of(c, t->id), t->grad >= 0 ? root_of(c, t->grad) : -1};
        for (int k = 0; k < 2; k++)
            if (rs[k] >= 0 && !c->mark[rs[k]]) {
                c->mark[rs[k]] = 1;
                roots[(*n)++] = rs[k];
            }
    }
    int io[4] = {m->gqa ? m->end[0] : m->x, m->y, m->gqa ? m->end[1] : -1, m->gqa ? m->end[2] : -1};
    for (int k = 0; k < 4; k++) {
        if (io[k] < 0)
            continue;
        int ends[2] = {root_of(c, io[k]), g->t[io[k]].grad >= 0 ? root_of(c, g->t[io[k]].grad) : -1};
        for (int i = 0; i < 2; i++)
            if (ends[i] >= 0 && ends[i] < c->n0 && c->mark[ends[i]])
                return 0;
    }
    return 1;
}

static int touches(const Ctx *c, const Op *op)
{
    for (int i = 0; i < op->nin + op->nout; i++) {
        int r = root_of(c, i < op->nin ? op->in[i] : op->out[i - op->nin]);
        if (r < c->n0 && c->mark[r])
            return 1;
    }
    return 0;
}

static int int_cmp(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The live backward ops touching a marked root, ascending, into bwd[]; the count. */
static int marked_bwd_ops(const Graph *g, const Ctx *c, const int *roots, int nroots, int **bwd)
{
    int n = 0, cap = 16;
    int *v = xmalloc((size_t)cap * sizeof *v);
    for (int k = 0; k < nroots; k++) {
        int r = roots[k];
        for (int pass = 0; pass < 2; pass++)
            for (int e = pass ? c->xhead[r] : c->tstart[r]; pass ? e >= 0 : e < c->tstart[r + 1];
                 e = pass ? c->xnext[e] : e + 1) {
                if (n == cap)
                    v = xrealloc(v, (size_t)(cap *= 2) * sizeof *v);
                v[n++] = pass ? c->xop[e] : c->tops[e];
            }
    }
    qsort(v, (size_t)n, sizeof *v, int_cmp);
    int m = 0;
    for (int i = 0; i < n; i++) {
        const Op *op = &g->ops[v[i]];
        if ((m > 0 && v[m - 1] == v[i]) || op->dead || op->phase != PH_BWD || !touches(c, op))
            continue;
        v[m++] = v[i];
    }
    *bwd = v;
    return m;
}

/* elements of the arena tensors under the marked roots (added in id order) */
static double marked_elems(const Graph *g, int *roots, int nroots)
{
    qsort(roots, (size_t)nroots, sizeof *roots, int_cmp);
    double n = 0;
    for (int k = 0; k < nroots; k++)
        if (g->t[roots[k]].view_of < 0)
            n += (double)g->t[roots[k]].numel;
    return n;
}

/* Rewrites one match; 1 when done, 0 when the backward does not fit. */
static int rewrite(Graph *g, Ctx *c, const Match *m)
{
    int roots[2 * NINT], nroots;
    int ok = mark_internal(g, c, m, roots, &nroots);
    /* the backward ops to kill, and the one writing dx */
    int dx = g->t[m->x].grad, dxroot = dx >= 0 ? root_of(c, dx) : -1, writer = -1, nbwd = 0;
    int *bwd = NULL;
    if (ok)
        nbwd = marked_bwd_ops(g, c, roots, nroots, &bwd);
    for (int k = 0; k < nbwd && ok; k++) {
        const Op *op = &g->ops[bwd[k]];
        for (int i = 0; i < op->nout && ok; i++) {
            int r = root_of(c, op->out[i]);
            if (r < c->n0 && c->mark[r])
                continue;
            if (r != dxroot || op->out[i] != dx || writer >= 0)
                ok = 0;           /* writes something else outside the pattern */
            else
                writer = bwd[k];
        }
    }
    if (ok && nbwd && (writer < 0 || g->t[m->y].grad < 0))
        ok = 0;
    double saved = ok ? marked_elems(g, roots, nroots) : 0;
    for (int k = 0; k < nroots; k++)
        c->mark[roots[k]] = 0;
    if (!ok) {
        free(bwd);
        return 0;
    }
    if (!c->linked) {         /* from here on the consumer lists are kept exact */
        graph_relink(g);
        c->linked = 1;
    }
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
        kill(g, c, m->ops[i]);
    for (int i = 0; i < m->nint; i++)
        g->t[m->internal[i]].producer = -1;
    Op *f = &g->ops[fid];
    char *fname = xasprintf("%s.attention", g->t[m->y].name);
    graph_rename_op(g, fid, fname);
    f->kind = OP_ATTENTION;
    f->dead = 0;
    f->nin = 1, f->in[0] = m->x;
    f->nout = 2, f->out[0] = m->y, f->out[1] = lse;
    f->acc = 0;
    memset(f->attr, 0, sizeof f->attr);
    f->attr[0] = m->scale, f->attr[1] = m->heads_out;
    memcpy(f->list, list, sizeof list);
    f->nlist = nlist;
    graph_link_op(g, fid);
    for (int i = 0; i < f->nin + f->nout; i++)
        add_touch(c, root_of(c, i < f->nin ? f->in[i] : f->out[i - f->nin]), fid);
    g->t[m->y].producer = fid;
    g->t[lse].producer = fid;
    if (nbwd) {
        for (int i = 0; i < nbwd; i++)
            kill(g, c, bwd[i]);
        Op *b = &g->ops[writer];
        int acc = b->acc & 1;
        char *bname = xasprintf("bwd.%s", fname);
        graph_rename_op(g, writer, bname);
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
        graph_link_op(g, writer);
        for (int i = 0; i < b->nin + b->nout; i++)
            add_touch(c, root_of(c, i < b->nin ? b->in[i] : b->out[i - b->nin]), writer);
        sweep_producers(g, c);    /* producers of the dead gradients */
        if (g->t[dx].producer < 0 || g->t[dx].producer == writer)
            g->t[dx].producer = writer;
    }
    fuse_note(g, "attention", saved - (double)(B * NH * T));
    free(bwd);
    return 1;
}

/* Rewrites one match of the second form; 1 when done, 0 when the backward does not fit. */
static int rewrite_gqa(Graph *g, Ctx *c, const Match *m)
{
    int roots[2 * NINT], nroots;
    int ok = mark_internal(g, c, m, roots, &nroots);
    int d[3], writer[3] = {-1, -1, -1}, nbwd = 0, *bwd = NULL;
    for (int e = 0; e < 3; e++)
        d[e] = g->t[m->end[e]].grad;
    if (ok)
        nbwd = marked_bwd_ops(g, c, roots, nroots, &bwd);
    for (int k = 0; k < nbwd && ok; k++) {   /* each killed op writes internal gradients or one of dq, dk, dv */
        const Op *op = &g->ops[bwd[k]];
        for (int i = 0; i < op->nout && ok; i++) {
            int r = root_of(c, op->out[i]), e = 0;
            if (r < c->n0 && c->mark[r])
                continue;
            while (e < 3 && (d[e] < 0 || op->out[i] != d[e]))
                e++;
            if (e == 3 || writer[e] >= 0)
                ok = 0;
            else
                writer[e] = bwd[k];
        }
    }
    int slot = -1;
    for (int e = 0; e < 3; e++) {
        if (nbwd && writer[e] < 0)
            ok = 0;             /* the fused backward writes all three */
        if (writer[e] >= 0 && (slot < 0 || writer[e] < slot))
            slot = writer[e];
    }
    if (ok && nbwd && g->t[m->y].grad < 0)
        ok = 0;
    double saved = ok ? marked_elems(g, roots, nroots) : 0;
    for (int k = 0; k < nroots; k++)
        c->mark[roots[k]] = 0;
    if (!ok) {
        free(bwd);
        return 0;
    }
    if (!c->linked) {
        graph_relink(g);
        c->linked = 1;
    }
    const Tensor *q = &g->t[m->end[0]];
    long B = q->shape[0], NH = q->shape[1], T = q->shape[2];
    long shape[3] = {B, NH, T};
    char *name = xasprintf("%s.lse", g->t[m->y].name);
    int lse = graph_add_tensor(g, name, DT_F32, 3, shape, TK_ACTIVATION, g->ops[m->ops[m->nops - 1]].loc);
    free(name);
    int fid = m->ops[m->nops - 1];
    for (int i = 0; i < m->nops; i++)
        kill(g, c, m->ops[i]);
    for (int i = 0; i < m->nint; i++)
        g->t[m->internal[i]].producer = -1;
    Op *f = &g->ops[fid];
    char *fname = xasprintf("%s.attention", g->t[m->y].name);
    graph_rename_op(g, fid, fname);
    f->kind = OP_ATTENTION_GQA;
    f->dead = 0;
    f->nin = 3;
    for (int e = 0; e < 3; e++)
        f->in[e] = m->end[e];
    f->nout = 2, f->out[0] = m->y, f->out[1] = lse;
    f->acc = 0;
    memset(f->attr, 0, sizeof f->attr);
    f->attr[0] = m->scale, f->attr[1] = m->heads_out;
    f->nlist = 0;
    graph_link_op(g, fid);
    for (int i = 0; i < f->nin + f->nout; i++)
        add_touch(c, root_of(c, i < f->nin ? f->in[i] : f->out[i - f->nin]), fid);
    g->t[m->y].producer = fid;
    g->t[lse].producer = fid;
    if (nbwd) {
        int acc = 0;
        for (int e = 0; e < 3; e++)
            acc |= (g->ops[writer[e]].acc & 1) << e;
        for (int i = 0; i < nbwd; i++)
            kill(g, c, bwd[i]);
        Op *b = &g->ops[slot];
        char *bname = xasprintf("bwd.%s", fname);
        graph_rename_op(g, slot, bname);
        b->kind = OP_ATTENTION_GQA_BWD;
        b->dead = 0;
        b->nin = 6;
        b->in[0] = g->t[m->y].grad;
        for (int e = 0; e < 3; e++)
            b->in[1 + e] = m->end[e];
        b->in[4] = m->y, b->in[5] = lse;
        b->nout = 3;
        for (int e = 0; e < 3; e++)
            b->out[e] = d[e];
        b->acc = acc;
        memset(b->attr, 0, sizeof b->attr);
        b->attr[0] = m->scale, b->attr[1] = m->heads_out;
        b->nlist = 0;
        graph_link_op(g, slot);
        for (int i = 0; i < b->nin + b->nout; i++)
            add_touch(c, root_of(c, i < b->nin ? b->in[i] : b->out[i - b->nin]), slot);
        sweep_producers(g, c);
        for (int e = 0; e < 3; e++)
            if (g->t[d[e]].producer < 0 || g->t[d[e]].producer == writer[e])
                g->t[d[e]].producer = slot;
    }
    fuse_note(g, "attention", saved - (double)(B * NH * T));
    free(bwd);
    return 1;
}

void pass_fuse_attention(Graph *g)
{
    int nops = g->nops;
    Ctx c;
    ctx_init(&c, g);
    for (int o = 0; o < nops; o++) {
        if (g->ops[o].kind != OP_SOFTMAX || g->ops[o].dead)
            continue;
        Match m;
        if (match(g, &c, o, &m))
            rewrite(g, &c, &m);
        else if (match_gqa(g, &c, o, &m))
            rewrite_gqa(g, &c, &m);
    }
    ctx_free(&c);
}
