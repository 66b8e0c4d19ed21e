/* split_tp.c — tensor parallel in Megatron's form, on the forward graph.
 *
 * A column matmul  y = x @ Wᵀ  (W a parameter [N, K] read with tb=1, x
 * replicated on every rank) starts a region: rank r keeps 1/K of W's rows
 * (so of y's last axis), and the ops after it run on that 1/K until a row
 * matmul  z = u @ W2ᵀ  contracts the cut axis: rank r keeps the matching 1/K
 * of W2's columns, z is one partial sum per rank, and an all-reduce (sum, in
 * the forward) makes it whole again. In GPT-2 that is the attention block
 * (qkv column-cut by heads, the attention per head, attproj row-cut) and the
 * MLP (fc column-cut, GELU, fcproj row-cut): one all-reduce per block in the
 * forward. The backward's all-reduce is autodiff's: x's gradient arrives as a
 * partial sum per rank (tp_sum_grad), so autodiff sums it over ranks before
 * x's producer reads it; the forward all-reduce's own gradient is the
 * identity. Everything outside the regions (embeddings, layernorms, the
 * residual stream, the classifier) runs replicated and stays bit-identical on
 * every rank, its parameters and their gradients too; no rank sends them.
 *
 * Which 1/K: the cut axis of a region tensor has a layout (outer, F, inner):
 * its global index is (o·F + f)·inner + i and rank r keeps f in
 * [r·F/K, (r+1)·F/K). The first reshape that splits the cut axis chooses F
 * among its factors (qkv [B,T,3C] -> [B,T,3,NH,hs]: F = NH, so rank r keeps
 * heads r·NH/K... of q, of k and of v); the choice is the first that lets
 * every op of the region run on its part (a split or a softmax along the cut
 * axis, an attention contracting head dims: no). Parameters record the
 * layout of their root (tp_axis, tp_outer, tp_inner) for init and
 * checkpoints (runtime/ranks.c cuts and gathers them).
 *
 * Several column matmuls of one x start one region together (its seeds,
 * each cut by its own rows): Llama's q, k and v projections, whose parts
 * meet in the attention, and its gate and up projections, whose parts meet
 * in silu(gate) * up; parts meet where their layouts agree (same_lay).
 * Grouped-query attention's repeat of the k/v heads runs on parts when each
 * rank holds whole kv heads (NKV divisible by K): rank r's kv heads repeat
 * into exactly its query heads. Rotary embeddings run per head.
 *
 * A candidate region whose ops cannot run on parts, or whose parameters are
 * also read elsewhere, stays replicated (the classifier's tied wte, for
 * one). Run after ir_build, before autodiff. Returns the regions cut (0:
 * none; the graph is unchanged and the driver says why).
 */
#include <string.h>

#include "passes.h"

enum { MAXLAY = 16, MAXP = 8, MAXM2 = 4, MAXTRY = 64, MAXSEED = 4 };

typedef struct Lay { long outer, F, inner; int fixed; } Lay;

typedef struct TpRegion {
    int m1, x;                   /* the (first) column matmul and its replicated input */
    int seed[MAXSEED], nseed;    /* every column matmul of x that starts it (m1 first): q, k and v
                                    projections, or a gated MLP's gate and up, read one x */
    int *axis, *lay;             /* per tensor: the cut axis (-1: not in the region) and its layout */
    int *ops, nops;              /* the region's ops after m1 (m2s included) */
    int pw[MAXP], paxis[MAXP], play[MAXP], np;   /* parameters read cut: tensor, axis, layout */
    int m2[MAXM2], nm2;
    int rs_op[MAXLAY], rs_axis[MAXLAY], nrs;     /* reshapes whose target shape is cut, and where */
    Lay lays[MAXLAY];
    int nlays;
    const char *why;             /* why it stays replicated */
} TpRegion;

typedef struct Try {
    TpRegion *r;
    int K, attempt, ndecide;
} Try;

static int new_lay(TpRegion *r, long outer, long F, long inner, int fixed)
{
    if (r->nlays == MAXLAY)
        return -1;
    r->lays[r->nlays] = (Lay){outer, F, inner, fixed};
    return r->nlays++;
}

/* a parameter root, or a layer slice of one (views made by index ops only:
 * each drops a leading axis, so a cut of the slice's axis a is the root's
 * axis a + the axes dropped; a slice or split of rows would not be) */
static int is_param(const Graph *g, int t)
{
    if (g->t[t].kind != TK_PARAM)
        return 0;
    for (; g->t[t].view_of >= 0; t = g->t[t].view_of) {
        int w = g->t[t].producer;
        if (w < 0 || g->ops[w].kind != OP_INDEX)
            return 0;
    }
    return 1;
}

/* record parameter tensor w read cut along axis a with layout l */
static int add_param(TpRegion *r, int w, int a, int l)
{
    if (r->np == MAXP)
        return 0;
    r->pw[r->np] = w, r->paxis[r->np] = a, r->play[r->np] = l;
    r->np++;
    return 1;
}

static void mark(TpRegion *r, int t, int a, int l) { r->axis[t] = a, r->lay[t] = l; }

/* tensors t and u are cut alike: the same layout (two seeds' parts meet) */
static int same_lay(const TpRegion *r, int t, int u)
{
    const Lay *a = &r->lays[r->lay[t]], *b = &r->lays[r->lay[u]];
    return r->lay[t] == r->lay[u] || (a->outer == b->outer && a->F == b->F && a->inner == b->inner);
}

/* reshape op's output is cut along axis d with layout (outer, F, inner);
 * its target shape's axis d is divided when the region is cut */
static int reshape_cut(TpRegion *r, const Op *op, int d, long outer, long F, long inner)
{
    int l = new_lay(r, outer, F, inner, 1);
    if (l < 0 || r->nrs == MAXLAY)
        return 0;
    r->rs_op[r->nrs] = op->id, r->rs_axis[r->nrs++] = d;
    mark(r, op->out[0], d, l);
    return 1;
}

/* a reshape of a region tensor: the cut axis maps into the output's axes */
static int through_reshape(const Graph *g, Try *ty, const Op *op, int a)
{
    TpRegion *r = ty->r;
    const Tensor *x = &g->t[op->in[0]];
    long cx[IR_MAXRANK + 1], co[IR_MAXRANK + 1];
    cx[0] = co[0] = 1;
    for (int i = 0; i < x->rank; i++)
        cx[i + 1] = cx[i] * x->shape[i];
    for (int j = 0; j < op->nlist; j++)
        co[j + 1] = co[j] * op->list[j];
    /* the smallest group of input axes [i0, i1) around a and output axes [j0, j1) of equal extent */
    int i0 = a, i1 = a + 1, j0 = -1, j1 = -1;
    for (; i0 >= 0; i0--) {
        for (int j = 0; j <= op->nlist && j0 < 0; j++)
            if (co[j] == cx[i0])
                j0 = j;
        if (j0 >= 0)
            break;
    }
    for (; i1 <= x->rank; i1++) {
        for (int j = op->nlist; j >= 0 && j1 < 0; j--)
            if (co[j] == cx[i1])
                j1 = j;
        if (j1 >= 0)
            break;
    }
    if (i0 < 0 || i1 > x->rank || j0 < 0 || j1 <= j0)
        return 0;
    Lay L = r->lays[r->lay[op->in[0]]];
    if (i1 - i0 == 1) {                      /* the cut axis alone: kept or split into [j0, j1) */
        if (!L.fixed) {                      /* choose the factor that is cut */
            int want = (ty->attempt >> (3 * ty->ndecide++)) & 7, seen = 0;
            for (int d = j0; d < j1; d++) {
                if (op->list[d] % ty->K)
                    continue;
                if (seen++ != want)
                    continue;
                r->lays[r->lay[op->in[0]]] = (Lay){co[d] / co[j0], op->list[d], co[j1] / co[d + 1], 1};
                return reshape_cut(r, op, d, 1, op->list[d], 1);
            }
            return 0;
        }
        for (int d = j0; d < j1; d++)       /* a fixed layout: one output axis must be exactly its F */
            if (co[d] / co[j0] == L.outer && op->list[d] == L.F && co[j1] / co[d + 1] == L.inner)
                return reshape_cut(r, op, d, 1, L.F, 1);
        return 0;
    }
    if (j1 - j0 == 1) {                      /* merged with its neighbours into one axis */
        Lay *in = &r->lays[r->lay[op->in[0]]];
        in->fixed = 1;
        long before = cx[a] / cx[i0], after = cx[i1] / cx[a + 1];
        return reshape_cut(r, op, j0, before * in->outer, in->F, in->inner * after);
    }
    return 0;
}

/* One op with a region input: 1 when it runs on parts (its outputs marked,
 * or it is a row matmul ending the region), 0 when it cannot. */
static int through(const Graph *g, Try *ty, const Op *op)
{
    TpRegion *r = ty->r;
    int x = op->in[0], ax = r->axis[x], rx = g->t[x].rank;
    switch (op->kind) {
    case OP_SCALE: case OP_GELU: case OP_SILU: case OP_SIGMOID: case OP_RELU: case OP_TANH: case OP_GELU_ERF:
        mark(r, op->out[0], ax, r->lay[x]);
        return ax >= 0;
    case OP_ROPE:                            /* per (row, head): any axis but T and hs */
        mark(r, op->out[0], ax, r->lay[x]);
        return ax >= 0 && ax < rx - 2;
    case OP_REPEAT: {                        /* GQA's k/v heads: along the cut axis, whole slices */
        int rax = (int)op->attr[1];
        if (ax < 0)
            return 0;
        if (rax != ax) {
            mark(r, op->out[0], ax, r->lay[x]);
            return 1;
        }
        Lay L = r->lays[r->lay[x]];
        int l = L.inner == 1 ? new_lay(r, L.outer, L.F * (long)op->attr[0], 1, 1) : -1;
        if (l < 0)
            return 0;
        mark(r, op->out[0], ax, l);
        return 1;
    }
    case OP_SOFTMAX:
        mark(r, op->out[0], ax, r->lay[x]);
        return ax >= 0 && ax != rx - 1;
    case OP_CAUSAL_MASK:
        mark(r, op->out[0], ax, r->lay[x]);
        return ax >= 0 && ax < rx - 2;
    case OP_PERMUTE:
        if (ax < 0)
            return 0;
        for (int j = 0; j < op->nlist; j++)
            if (op->list[j] == ax)
                mark(r, op->out[0], j, r->lay[x]);
        return 1;
    case OP_SPLIT:
        if (ax <= 0)
            return 0;
        for (int k = 0; k < op->nout; k++)
            mark(r, op->out[k], g->t[x].shape[0] == op->attr[0] ? ax - 1 : ax, r->lay[x]);
        return 1;
    case OP_RESHAPE:
        return ax >= 0 && through_reshape(g, ty, op, ax);
    case OP_ADD: case OP_MUL: case OP_SUB: {
        int y = op->in[1], ay = r->axis[y], ry = g->t[y].rank;
        if (ax >= 0 && ay >= 0) {            /* two parts alike */
            if (ax - (rx - ry) != ay || !same_lay(r, x, y))
                return 0;
        } else if (ax >= 0 && is_param(g, y)) {   /* a bias: cut alike */
            if (ax - (rx - ry) < 0 || !add_param(r, y, ax - (rx - ry), r->lay[x]))
                return 0;
        } else {
            return 0;
        }
        mark(r, op->out[0], ax, r->lay[x]);
        return 1;
    }
    case OP_MATMUL: {
        int y = op->in[1], ay = r->axis[y], ta = (int)op->attr[0], tb = (int)op->attr[1];
        if (ax >= 0 && ay >= 0) {            /* batched, cut along a batch axis of both (heads) */
            if (rx != g->t[y].rank || rx < 3 || ax != ay || ax >= rx - 2 || !same_lay(r, x, y))
                return 0;
            mark(r, op->out[0], ax, r->lay[x]);
            return 1;
        }
        /* the row matmul: x's cut axis is the contraction, W [N, K] read with tb=1 */
        if (ax != rx - 1 || ta || !tb || ay >= 0 || !is_param(g, y) || g->t[y].rank != 2 ||
            r->nm2 == MAXM2 || !add_param(r, y, 1, r->lay[x]))
            return 0;
        r->m2[r->nm2++] = op->id;
        return 1;
    }
    default:
        return 0;
    }
}

static void region_reset(TpRegion *r, int nt)
{
    for (int t = 0; t < nt; t++)
        r->axis[t] = r->lay[t] = -1;
    r->nops = r->np = r->nm2 = r->nrs = r->nlays = 0;
}

/* The region of column matmul m1 under one attempt's choices: 1 when every
 * op reached runs on parts and at least one row matmul ends it. */
static int grow_region(const Graph *g, Try *ty, int nfwd)
{
    TpRegion *r = ty->r;
    region_reset(r, g->nt);
    for (int s = 0; s < r->nseed; s++) {
        const Op *m = &g->ops[r->seed[s]];
        int w = m->in[1], y = m->out[0];
        int l = new_lay(r, 1, g->t[y].shape[g->t[y].rank - 1], 1, 0);
        if (l < 0 || g->t[y].shape[g->t[y].rank - 1] % ty->K || !add_param(r, w, 0, l))
            return 0;
        mark(r, y, g->t[y].rank - 1, l);
    }
    for (int o = r->m1 + 1; o < nfwd; o++) {
        int seed = 0;
        for (int s = 1; s < r->nseed; s++)
            seed |= r->seed[s] == o;
        if (seed)
            continue;
        const Op *op = &g->ops[o];
        int reads = 0;
        for (int i = 0; i < op->nin; i++)
            reads |= r->axis[op->in[i]] >= 0;
        if (!reads)
            continue;
        if (!through(g, ty, op))
            return 0;
        r->ops[r->nops++] = o;
    }
    return r->nm2 > 0;
}

/* x @ Wᵀ with W a parameter [N, K]; x the first output of a kernel op (not a
 * view, a parameter or an input): autodiff sums x's gradient over the ranks
 * where it differentiates that op (tp_sum_grad) */
static int column_candidate(const Graph *g, const Op *op)
{
    if (op->dead || op->kind != OP_MATMUL || op->attr[0] != 0 || op->attr[1] != 1 || !is_param(g, op->in[1]) ||
        g->t[op->in[1]].rank != 2)
        return 0;
    const Tensor *x = &g->t[op->in[0]];
    return x->kind != TK_PARAM && x->view_of < 0 && x->producer >= 0 &&
           op_info[g->ops[x->producer].kind].cls != OPC_VIEW && g->ops[x->producer].out[0] == x->id;
}

/* ---- checks across regions ------------------------------------------------------ */

/* the layout of parameter record k of region r, as (root axis, outer, F, inner) */
static void param_root_cut(const Graph *g, const TpRegion *r, int k, int *root, int *axis, Lay *L)
{
    size_t off;
    int w = r->pw[k];
    *root = graph_root(g, w, &off);
    *axis = r->paxis[k] + (g->t[*root].rank - g->t[w].rank);   /* a layer slice: one axis in front */
    *L = r->lays[r->play[k]];
    if (!L->fixed)
        *L = (Lay){1, L->F, 1, 1};
}

/* Drops (why) the regions whose parameters are also read outside cut
 * regions or cut two ways, and those whose input x has other readers; until
 * nothing changes. Returns the regions left. */
static int check_regions(Graph *g, TpRegion *rg, int n, int nfwd)
{
    int *cut_axis = xmalloc((size_t)g->nt * sizeof(int));
    Lay *cut = xmalloc((size_t)g->nt * sizeof(Lay));
    char *reader = xmalloc((size_t)nfwd + 1);    /* ops of live regions that may read cut parameters */
    int left = 0;
    for (int changed = 1; changed;) {
        changed = 0;
        left = 0;
        for (int t = 0; t < g->nt; t++)
            cut_axis[t] = -2;             /* -2: not read cut; -3: read cut two ways */
        memset(reader, 0, (size_t)nfwd + 1);
        for (int i = 0; i < n; i++) {
            if (rg[i].why)
                continue;
            left++;
            for (int s = 0; s < rg[i].nseed; s++)
                reader[rg[i].seed[s]] = 1;
            for (int k = 0; k < rg[i].nops; k++)
                reader[rg[i].ops[k]] = 1;
            for (int k = 0; k < rg[i].np; k++) {
                int root, axis;
                Lay L;
                param_root_cut(g, &rg[i], k, &root, &axis, &L);
                if (cut_axis[root] == -2) {
                    cut_axis[root] = axis, cut[root] = L;
                } else if (cut_axis[root] != axis || cut[root].outer != L.outer || cut[root].F != L.F ||
                           cut[root].inner != L.inner) {
                    cut_axis[root] = -3;
                }
            }
        }
        for (int i = 0; i < n; i++) {
            TpRegion *r = &rg[i];
            if (r->why)
                continue;
            for (int k = 0; k < r->np && !r->why; k++) {
                int root, axis;
                Lay L;
                param_root_cut(g, r, k, &root, &axis, &L);
                if (cut_axis[root] == -3)
                    r->why = "its parameters would be cut two ways";
                /* every reader of the parameter's bytes: a view op or a cut region's op */
                for (int o = 0; o < nfwd && !r->why; o++) {
                    const Op *op = &g->ops[o];
                    if (op_info[op->kind].cls == OPC_VIEW || reader[o])
                        continue;
                    for (int j = 0; j < op->nin; j++)
                        if (graph_root(g, op->in[j], NULL) == root)
                            r->why = "its parameters are also read whole";
                }
            }
            for (int c = 0; c < g->t[r->x].nconsumers && !r->why; c++) {
                const Op *op = &g->ops[g->t[r->x].consumers[c]];
                int ok = 0;
                for (int j = 0; j < n; j++)
                    for (int s = 0; s < rg[j].nseed; s++)
                        ok |= !rg[j].why && rg[j].seed[s] == op->id;
                if (!ok)
                    r->why = "its input is also read by ops that are not cut";
            }
            changed |= r->why != NULL;
        }
    }
    free(cut_axis);
    free(cut);
    free(reader);
    return left;
}

/* ---- rewriting -------------------------------------------------------------------- */

static void set_shape(Graph *g, int t, int rank, const long *shape)
{
    Tensor *x = &g->t[t];
    x->rank = rank;
    x->numel = 1;
    for (int i = 0; i < rank; i++) {
        x->shape[i] = shape[i];
        x->numel *= shape[i];
    }
    x->bytes = (size_t)x->numel * dtype_size(x->dtype);
}

/* op's outputs take the shapes its rule gives for its (cut) inputs */
static void reinfer(Graph *g, int o)
{
    Op *op = &g->ops[o];
    int nout, rank[IR_MAXIO];
    long shape[IR_MAXIO][IR_MAXRANK];
    DType dt[IR_MAXIO];
    char err[256];
    if (op_infer(g, op, &nout, rank, shape, dt, err, sizeof err) != 0)
        IR_BUG("tensor parallel: %s: %s", op->name, err);
    for (int k = 0; k < op->nout; k++)
        set_shape(g, op->out[k], rank[k], shape[k]);
    if (op_info[op->kind].cls == OPC_VIEW)
        op_make_views(g, op);
}

/* out = sum over ranks of op's output: the row matmul now writes a partial
 * sum, and an all-reduce right after it gives every rank the whole. */
static double add_forward_allreduce(Graph *g, int m2, int K)
{
    int out = g->ops[m2].out[0];
    Tensor x = g->t[out];
    char *name = xasprintf("tp.%s", x.name);
    int part = graph_add_tensor(g, name, x.dtype, x.rank, x.shape, TK_ACTIVATION, x.loc);
    free(name);
    graph_unlink_op(g, m2);
    g->ops[m2].out[0] = part;
    g->t[part].producer = m2;
    g->t[out].producer = -1;
    name = xasprintf("ar.%s", x.name);
    int id = graph_insert_op(g, m2 + 1, OP_ALLREDUCE, name, &part, 1, &out, 1, x.loc);
    free(name);
    g->ops[id].layer = g->ops[m2].layer;
    comm_op_attrs(&g->ops[id], K, 0, 1, COMM_TP);   /* a sum, with the forward */
    return 2.0 * (K - 1) / K * (double)x.bytes;
}

static void cut_regions(Graph *g, TpRegion *rg, int n, int K)
{
    int nfwd = g->nops;
    char *redo = xcalloc((size_t)nfwd + 1, 1);
    for (int i = 0; i < n; i++) {
        TpRegion *r = &rg[i];
        if (r->why)
            continue;
        for (int k = 0; k < r->np; k++) {     /* parameter roots: one rank's part */
            int root, axis;
            Lay L;
            param_root_cut(g, r, k, &root, &axis, &L);
            Tensor *p = &g->t[root];
            if (!p->tp_ranks) {
                long shape[IR_MAXRANK];
                memcpy(shape, p->shape, sizeof shape);
                shape[axis] /= K;
                set_shape(g, root, p->rank, shape);
                p->tp_ranks = K, p->tp_axis = axis, p->tp_outer = L.outer, p->tp_inner = L.inner;
            }
            for (int o = 0; o < nfwd; o++)    /* its layer slices */
                if (op_info[g->ops[o].kind].cls == OPC_VIEW && graph_root(g, g->ops[o].in[0], NULL) == root)
                    redo[o] = 1;
        }
        for (int k = 0; k < r->nrs; k++)      /* reshapes: the cut axis of the target shape */
            g->ops[r->rs_op[k]].list[r->rs_axis[k]] /= K;
        for (int s = 0; s < r->nseed; s++)
            redo[r->seed[s]] = 1;
        for (int k = 0; k < r->nops; k++)
            redo[r->ops[k]] = 1;
        g->t[r->x].tp_sum_grad = K;
    }
    for (int o = 0; o < nfwd; o++)            /* in order: inputs before outputs */
        if (redo[o])
            reinfer(g, o);
    free(redo);
    /* the all-reduces, from the last row matmul back (insertion moves later ops) */
    int *m2 = xmalloc((size_t)(n * MAXM2 + 1) * sizeof(int)), nm2 = 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < rg[i].nm2 && !rg[i].why; k++)
            m2[nm2++] = rg[i].m2[k];
    for (int a = 1; a < nm2; a++)             /* descending */
        for (int b = a; b > 0 && m2[b - 1] < m2[b]; b--) {
            int t = m2[b];
            m2[b] = m2[b - 1], m2[b - 1] = t;
        }
    g->comm_bytes = 0;
    for (int k = 0; k < nm2; k++)
        g->comm_bytes += 2 * add_forward_allreduce(g, m2[k], K);   /* + the backward's, as large */
    free(m2);
}

int pass_split_tp(Graph *g, int K)
{
    graph_relink(g);
    int nfwd = g->nops, n = 0;
    TpRegion *rg = xcalloc((size_t)nfwd + 1, sizeof *rg);
    for (int o = 0; o < nfwd; o++) {
        if (!column_candidate(g, &g->ops[o]))
            continue;
        int x = g->ops[o].in[0], seen = 0;
        for (int i = 0; i < n; i++)
            seen |= rg[i].x == x;
        if (seen)              /* a seed of the region of x's first column matmul */
            continue;
        TpRegion *r = &rg[n++];
        r->m1 = o, r->x = x;
        for (int p = o; p < nfwd && r->nseed < MAXSEED; p++)
            if (column_candidate(g, &g->ops[p]) && g->ops[p].in[0] == x)
                r->seed[r->nseed++] = p;
        r->axis = xmalloc((size_t)g->nt * sizeof(int));
        r->lay = xmalloc((size_t)g->nt * sizeof(int));
        r->ops = xmalloc((size_t)nfwd * sizeof(int));
        r->why = "no row matmul ends it, or an op after it cannot run on parts";
        for (int attempt = 0; attempt < MAXTRY; attempt++) {
            Try ty = {r, K, attempt, 0};
            if (grow_region(g, &ty, nfwd)) {
                r->why = NULL;
                break;
            }
            if (attempt >= 1 << (3 * ty.ndecide))   /* every choice tried */
                break;
        }
    }
    int left = check_regions(g, rg, n, nfwd);
    if (left > 0) {
        cut_regions(g, rg, n, K);
        g->tp = K;
    }
    for (int i = 0; i < n; i++) {
        free(rg[i].axis);
        free(rg[i].lay);
        free(rg[i].ops);
    }
    free(rg);
    return left;
}
