/* autodiff.c — reverse-mode differentiation of the forward graph, then the
 * optimizer step.
 *
 * Forward ops are visited in reverse; each op's backward rule (the table
 * below, one function per op of ops.def) adds backward ops that contribute to
 * the gradients of its inputs. A gradient tensor is created on its first
 * contribution, which overwrites; later contributions accumulate (acc bits).
 * Which bytes of a gradient have been written is tracked per storage root, so
 * views (layer slices of stacked parameters, splits of qkv) need no special
 * case: a view's gradient is the same view of its base's gradient, and bytes
 * that nothing wrote are zero-filled just before the first read.
 */
#include <string.h>

#include "passes.h"

typedef struct Range { size_t lo, hi; } Range;

typedef struct AD {
    Graph *g;
    char *needs;            /* per forward tensor: on a path parameter -> loss */
    Range **cov;            /* per tensor (gradient roots): written byte ranges */
    int *ncov;
    int capt;
    Loc loc;                /* of the forward op being differentiated */
    int layer;
    const char *name;       /* of the forward op */
    /* forward ops reading each storage root of a forward tensor, ascending
       (readers + rstart[r] .. rstart[r + 1]); forward ops never change here */
    int *rstart, *readers, nt0;
    /* the sharing groups (may_share): per gradient storage root r, the
       forward tensors whose gradients live in it: member[ghead[r]],
       member[gnext[that]], ... (-1 ends) */
    int *member, *gnext, *ghead, ngroup, capgroup;
} AD;

/* ---- coverage of gradient roots ---------------------------------------------------- */

static void grow(AD *ad)
{
    if (ad->g->nt <= ad->capt)
        return;
    int cap = ad->g->nt * 2;
    ad->cov = xrealloc(ad->cov, (size_t)cap * sizeof *ad->cov);
    ad->ncov = xrealloc(ad->ncov, (size_t)cap * sizeof *ad->ncov);
    ad->ghead = xrealloc(ad->ghead, (size_t)cap * sizeof *ad->ghead);
    for (int i = ad->capt; i < cap; i++) {
        ad->cov[i] = NULL;
        ad->ncov[i] = 0;
        ad->ghead[i] = -1;
    }
    ad->capt = cap;
}

/* forward tensor t's gradient lives in gradient storage root r */
static void join(AD *ad, int t, int r)
{
    grow(ad);
    if (ad->ngroup == ad->capgroup) {
        ad->capgroup = ad->capgroup ? 2 * ad->capgroup : 64;
        ad->member = xrealloc(ad->member, (size_t)ad->capgroup * sizeof *ad->member);
        ad->gnext = xrealloc(ad->gnext, (size_t)ad->capgroup * sizeof *ad->gnext);
    }
    ad->member[ad->ngroup] = t;
    ad->gnext[ad->ngroup] = ad->ghead[r];
    ad->ghead[r] = ad->ngroup++;
}

/* bytes of [lo,hi) already written in root r */
static size_t covered(AD *ad, int r, size_t lo, size_t hi)
{
    size_t n = 0;
    for (int i = 0; i < ad->ncov[r]; i++) {
        size_t a = ad->cov[r][i].lo > lo ? ad->cov[r][i].lo : lo;
        size_t b = ad->cov[r][i].hi < hi ? ad->cov[r][i].hi : hi;
        if (a < b)
            n += b - a;
    }
    return n;
}

/* marks [lo,hi) of root r written (ranges kept disjoint: callers only add
 * ranges that are wholly unwritten) */
static void cover(AD *ad, int r, size_t lo, size_t hi)
{
    grow(ad);
    for (int i = 0; i < ad->ncov[r]; i++) {    /* extend an adjacent range */
        if (ad->cov[r][i].hi == lo) { ad->cov[r][i].hi = hi; return; }
        if (ad->cov[r][i].lo == hi) { ad->cov[r][i].lo = lo; return; }
    }
    ad->cov[r] = xrealloc(ad->cov[r], (size_t)(ad->ncov[r] + 1) * sizeof(Range));
    ad->cov[r][ad->ncov[r]++] = (Range){lo, hi};
}

/* ---- tensors and ops ----------------------------------------------------------------- */

/* A view of `base` (any tensor) starting `offset` bytes into it. */
static int make_view(AD *ad, int base, size_t offset, int rank, const long *shape, const char *name)
{
    Graph *g = ad->g;
    int v = graph_add_tensor(g, name, g->t[base].dtype, rank, shape, g->t[base].kind, ad->loc);
    g->t[v].region = g->t[base].region;
    g->t[v].view_of = base;
    g->t[v].view_offset = offset;
    return v;
}

/* The gradient tensor of t, created on first use (views: the same view of the
 * base's gradient). */
static int grad_of(AD *ad, int t)
{
    Graph *g = ad->g;
    if (g->t[t].grad >= 0)
        return g->t[t].grad;
    char *name = xasprintf("d.%s", g->t[t].name);
    int gt;
    if (g->t[t].view_of >= 0) {
        int gb = grad_of(ad, g->t[t].view_of);
        gt = make_view(ad, gb, g->t[t].view_offset, g->t[t].rank, g->t[t].shape, name);
    } else {
        gt = graph_add_tensor(g, name, DT_F32, g->t[t].rank, g->t[t].shape,
                              g->t[t].kind == TK_PARAM ? TK_GRAD : TK_ACTGRAD, ad->loc);
        if (g->t[t].kind != TK_PARAM && t < ad->nt0)
            join(ad, t, gt);
    }
    free(name);
    g->t[t].grad = gt;
    grow(ad);
    return gt;
}

static int new_op(AD *ad, OpKind kind, const int *in, int nin, const int *out, int nout, const char *tag)
{
    char *name = xasprintf("%s.%s", tag, ad->name);
    int id = graph_add_op(ad->g, kind, name, in, nin, out, nout, ad->loc);
    free(name);
    ad->g->ops[id].phase = PH_BWD;
    ad->g->ops[id].layer = ad->layer;
    return id;
}

/* Fills the unwritten bytes of [lo,hi) of gradient root r with zeros. */
static void zero_fill(AD *ad, int r, size_t lo, size_t hi)
{
    Graph *g = ad->g;
    /* walk the written ranges in order, filling the gaps */
    while (lo < hi) {
        size_t next = hi, gap_end = hi;
        int inside = 0;
        for (int i = 0; i < ad->ncov[r]; i++) {
            Range c = ad->cov[r][i];
            if (c.lo <= lo && lo < c.hi) {
                inside = 1;
                next = c.hi;
            } else if (c.lo > lo && c.lo < gap_end) {
                gap_end = c.lo;
            }
        }
        if (inside) {
            lo = next;
            continue;
        }
        long n = (long)((gap_end - lo) / sizeof(float));
        char *name = xasprintf("%s[%zu:%zu]", g->t[r].name, lo, gap_end);
        int v = make_view(ad, r, lo, 1, &n, name);
        free(name);
        int id = new_op(ad, OP_FILL, NULL, 0, &v, 1, "zero");
        g->ops[id].attr[0] = 0.0;
        cover(ad, r, lo, gap_end);
        lo = gap_end;
    }
}

/* Gradient tensor of t as an output of a new backward op: returns its id and
 * sets *acc when the op must accumulate. Bytes not yet written overwrite;
 * a partly written range is zero-filled first and then accumulated. */
static int contribute(AD *ad, int t, int *acc)
{
    int gt = grad_of(ad, t);
    size_t off;
    int r = graph_root(ad->g, gt, &off);
    size_t lo = off, hi = off + ad->g->t[gt].bytes;
    size_t done = covered(ad, r, lo, hi);
    if (done == 0) {
        cover(ad, r, lo, hi);
        *acc = 0;
    } else {
        if (done < hi - lo)
            zero_fill(ad, r, lo, hi);
        *acc = 1;
    }
    return gt;
}

/* The finished gradient of t for reading (unwritten bytes zero-filled), or -1
 * when t received no gradient at all. */
static int grad_read(AD *ad, int t)
{
    if (ad->g->t[t].grad < 0)
        return -1;
    int gt = ad->g->t[t].grad;
    size_t off;
    int r = graph_root(ad->g, gt, &off);
    zero_fill(ad, r, off, off + ad->g->t[gt].bytes);
    return gt;
}

/* A backward op with one output: the gradient of input `x`. */
static void emit1(AD *ad, OpKind kind, const int *in, int nin, int x, const double *attr, const char *tag)
{
    int acc, gx = contribute(ad, x, &acc);
    int id = new_op(ad, kind, in, nin, &gx, 1, tag);
    ad->g->ops[id].acc = acc;
    if (attr)
        memcpy(ad->g->ops[id].attr, attr, sizeof ad->g->ops[id].attr);
}

/* A rank-2 view [rows, cols] of t (t itself when already rank 2). */
static int as_matrix(AD *ad, int t, long rows, long cols)
{
    Graph *g = ad->g;
    if (g->t[t].rank == 2)
        return t;
    long shape[2] = {rows, cols};
    char *name = xasprintf("%s.2d", g->t[t].name);
    int v = make_view(ad, t, 0, 2, shape, name);
    free(name);
    return v;
}

/* ---- backward rules, one per op --------------------------------------------------------- */

typedef void (*GradFn)(AD *ad, const Op *op, int dy);
#define NEEDS(i) (ad->needs[op->in[i]])

static void grad_embedding(AD *ad, const Op *op, int dy)
{
    if (NEEDS(0)) {
        int in[2] = {dy, op->in[1]};
        emit1(ad, OP_EMBEDDING_BWD, in, 2, op->in[0], NULL, "bwd");
    }
}

static void grad_matmul(AD *ad, const Op *op, int dy)
{
    Graph *g = ad->g;
    int a = op->in[0], b = op->in[1];
    int ta = (int)op->attr[0], tb = (int)op->attr[1];
    if (g->t[b].rank == 2 && !ta) {
        long batch, M, N, K;
        op_matmul_geom(g, op, &batch, &M, &N, &K);
        if (NEEDS(0)) {        /* dA = dC op(B)^T */
            int in[2] = {dy, b};
            double at[4] = {0, tb ? 0 : 1};
            emit1(ad, OP_MATMUL, in, 2, a, at, "bwd.da");
        }
        if (NEEDS(1)) {        /* tb: dB = dC^T A ; else dB = A^T dC */
            int dc2 = as_matrix(ad, dy, M, N), a2 = as_matrix(ad, a, M, K);
            int in[2] = {tb ? dc2 : a2, tb ? a2 : dc2};
            double at[4] = {1, 0};
            emit1(ad, OP_MATMUL, in, 2, b, at, "bwd.db");
        }
        return;
    }
    /* batched: the four transpose cases */
    if (NEEDS(0)) {
        int in[2];
        double at[4] = {0};
        if (!ta) { in[0] = dy; in[1] = b; at[1] = !tb; }              /* dA = dC op(B)^T */
        else     { in[0] = b;  in[1] = dy; at[0] = tb; at[1] = 1; }   /* dA = op(B) dC^T */
        emit1(ad, OP_MATMUL, in, 2, a, at, "bwd.da");
    }
    if (NEEDS(1)) {
        int in[2];
        double at[4] = {0};
        if (!tb) { in[0] = a;  in[1] = dy; at[0] = !ta; }             /* dB = op(A)^T dC */
        else     { in[0] = dy; in[1] = a;  at[0] = 1; at[1] = ta; }   /* dB = dC^T op(A) */
        emit1(ad, OP_MATMUL, in, 2, b, at, "bwd.db");
    }
}

/* whether a forward op in [lo, hi) reads root r (a forward tensor's) */
static int read_between(const AD *ad, int r, int lo, int hi)
{
    if (r >= ad->nt0)
        return 0;
    int a = ad->rstart[r], b = ad->rstart[r + 1];   /* first reader >= lo */
    while (a < b) {
        int mid = a + (b - a) / 2;
        if (ad->readers[mid] < lo)
            a = mid + 1;
        else
            b = mid;
    }
    return a < ad->rstart[r + 1] && ad->readers[a] < hi;
}

/* THE SHARING RULE (the one place that decides it; docs/training.md).
 *
 * Backward ops write a gradient either fresh or by accumulating into it in
 * place (acc). Where c = a + b (or c = allreduce(u)), the gradient of an
 * operand u may be dc's storage itself instead of a copy; the forward
 * tensors whose gradients share one storage root form a group. The gradient
 * of a group member Y is read once, when the backward of Y's producer runs
 * (visit p_Y, the ops being visited in reverse), and until then its bytes
 * must hold Y's gradient and nothing else; an accumulation into member X
 * happens at the visit of each forward op that reads X, and it writes the
 * shared bytes. So:
 *
 *   u may join the group of dc at the visit of op q only when no
 *   accumulation into the group's bytes can fall while a member other than
 *   the accumulated one is still to be read: no forward op in [p_u, q)
 *   reads another member X (it would overwrite u's gradient before p_u
 *   reads it; p_u itself counts: a matmul writing dX while reading du), and
 *   no forward op in [p_Y, q) reads u, for each member Y whose producer
 *   p_Y < q is still to be visited.
 *
 * The members already read (producers visited) and the ancestors of u in
 * the group (c and the adds above it, all visited) take no part. Otherwise
 * the caller copies dc. Example: x + (matmul(x, w) + z): matmul(x, w) may not
 * share with x, since the matmul's backward accumulates into dx while it still
 * reads the matmul's gradient. The residual stream x + f(ln(x)) of a
 * transformer shares: ln(x) precedes f's producer. plancheck.c checks the
 * result on the finished plan, independently (rule 8). */
static int may_share(const AD *ad, int u, int dy, int q)
{
    const Graph *g = ad->g;
    const Tensor *tu = &g->t[u];
    if (tu->grad >= 0 || tu->view_of >= 0 || tu->kind == TK_PARAM || tu->producer < 0 ||
        u >= ad->nt0 || tu->numel != g->t[dy].numel)
        return 0;
    int r = graph_root(g, dy, NULL), pu = tu->producer;
    for (int i = r < ad->capt ? ad->ghead[r] : -1; i >= 0; i = ad->gnext[i]) {
        int x = ad->member[i], px = g->t[x].producer;
        if (read_between(ad, x, pu, q))
            return 0;
        if (px >= 0 && px < q && read_between(ad, u, px, q))
            return 0;
    }
    return 1;
}

/* u's gradient is dy's storage (may_share said yes): a view of dy, and u a
 * member of dy's group. */
static void share(AD *ad, int u, int dy)
{
    Graph *g = ad->g;
    int r = graph_root(g, dy, NULL);
    char *name = xasprintf("d.%s", g->t[u].name);
    int v = make_view(ad, dy, 0, g->t[u].rank, g->t[u].shape, name);
    free(name);
    g->t[u].grad = v;
    join(ad, u, r);
}

/* The readers-by-root index of the forward ops [0, nfwd). */
static void index_readers(AD *ad, int nfwd)
{
    const Graph *g = ad->g;
    int *root = graph_roots(g, NULL);
    ad->nt0 = g->nt;
    ad->rstart = xcalloc((size_t)g->nt + 2, sizeof *ad->rstart);
    for (int o = 0; o < nfwd; o++)
        for (int i = 0; i < g->ops[o].nin; i++)
            ad->rstart[root[g->ops[o].in[i]] + 2]++;
    for (int r = 0; r < g->nt; r++)
        ad->rstart[r + 2] += ad->rstart[r + 1];
    ad->readers = xmalloc(((size_t)ad->rstart[g->nt + 1] + 1) * sizeof *ad->readers);
    for (int o = 0; o < nfwd; o++)
        for (int i = 0; i < g->ops[o].nin; i++)
            ad->readers[ad->rstart[root[g->ops[o].in[i]] + 1]++] = o;
    free(root);
}

static void grad_add(AD *ad, const Op *op, int dy)
{
    Graph *g = ad->g;
    int a = op->in[0], b = op->in[1];
    if (NEEDS(0)) {
        if (may_share(ad, a, dy, op->id))     /* da = dc, no copy */
            share(ad, a, dy);
        else
            emit1(ad, OP_COPY, &dy, 1, a, NULL, "bwd");
    }
    if (NEEDS(1)) {
        if (may_share(ad, b, dy, op->id))     /* db = dc, no copy */
            share(ad, b, dy);
        else if (g->t[b].numel == g->t[dy].numel)
            emit1(ad, OP_COPY, &dy, 1, b, NULL, "bwd");
        else
            emit1(ad, OP_REDUCE_ROWS, &dy, 1, b, NULL, "bwd");
    }
}

static void grad_scale(AD *ad, const Op *op, int dy)
{
    if (NEEDS(0))
        emit1(ad, OP_SCALE, &dy, 1, op->in[0], op->attr, "bwd");
}

static void grad_gelu(AD *ad, const Op *op, int dy)
{
    if (NEEDS(0)) {
        int in[2] = {op->in[0], dy};
        emit1(ad, OP_GELU_BWD, in, 2, op->in[0], NULL, "bwd");
    }
}

static void grad_layernorm(AD *ad, const Op *op, int dy)
{
    Graph *g = ad->g;
    int out[3], acc = 0;
    for (int i = 0; i < 3; i++) {
        int a;
        if (NEEDS(i)) {
            out[i] = contribute(ad, op->in[i], &a);
            acc |= a << i;
        } else {     /* not needed: a scratch output the kernel writes and nobody reads */
            char *name = xasprintf("scratch.%s.%d", ad->name, i);
            out[i] = graph_add_tensor(g, name, DT_F32, g->t[op->in[i]].rank, g->t[op->in[i]].shape,
                                      TK_WORKSPACE, ad->loc);
            free(name);
        }
    }
    int in[5] = {dy, op->in[0], op->in[1], op->out[1], op->out[2]};
    int id = new_op(ad, OP_LAYERNORM_BWD, in, 5, out, 3, "bwd");
    g->ops[id].acc = acc;
}

static void grad_softmax(AD *ad, const Op *op, int dy)
{
    if (NEEDS(0)) {
        int in[2] = {dy, op->out[0]};
        emit1(ad, OP_SOFTMAX_BWD, in, 2, op->in[0], NULL, "bwd");
    }
}

static void grad_causal_mask(AD *ad, const Op *op, int dy)
{
    if (NEEDS(0))
        emit1(ad, OP_CAUSAL_MASK_BWD, &dy, 1, op->in[0], NULL, "bwd");
}

static void grad_cross_entropy(AD *ad, const Op *op, int dy)
{
    if (NEEDS(0)) {
        int in[3] = {dy, op->in[0], op->in[1]};
        emit1(ad, OP_CROSS_ENTROPY_BWD, in, 3, op->in[0], op->attr, "bwd");
    }
}

static void grad_permute(AD *ad, const Op *op, int dy)
{
    if (!NEEDS(0))
        return;
    int acc, gx = contribute(ad, op->in[0], &acc);
    int id = new_op(ad, OP_PERMUTE, &dy, 1, &gx, 1, "bwd");
    Op *b = &ad->g->ops[id];
    b->acc = acc;
    b->nlist = op->nlist;
    for (int i = 0; i < op->nlist; i++)     /* the inverse permutation */
        b->list[op->list[i]] = i;
}

/* The forward all-reduce of tensor parallel (split_tp.c; a sum, every rank
 * ends with the same bits): every rank's partial sum has the gradient dy
 * itself, which every rank holds whole. */
static void grad_allreduce(AD *ad, const Op *op, int dy)
{
    Graph *g = ad->g;
    if (op->attr[1] != 0 || op->attr[2] != 1)
        IR_BUG("autodiff reached %s, a collective that is not tensor parallel's forward sum", op->name);
    if (!NEEDS(0))
        return;
    if (g->t[op->in[0]].nconsumers == 1 && may_share(ad, op->in[0], dy, op->id)) {
        share(ad, op->in[0], dy);                 /* its only reader is this op: dy's storage */
    } else {
        emit1(ad, OP_COPY, &dy, 1, op->in[0], NULL, "bwd");
    }
}

/* dy summed over ranks (tensor parallel: a tensor read by column-cut matmuls,
 * whose gradient each rank holds a partial sum of): a new gradient tensor,
 * which the backward of the tensor's producer reads instead of dy. Its bytes
 * are written (covered): an operand's gradient that shares them (the add
 * rule) is read whole, never zero-filled over the sum. */
static int sum_over_ranks(AD *ad, int t, int dy)
{
    Graph *g = ad->g;
    Tensor x = g->t[dy];
    char *name = xasprintf("ar.%s", x.name);
    int out = graph_add_tensor(g, name, x.dtype, x.rank, x.shape, TK_ACTGRAD, ad->loc);
    free(name);
    int id = new_op(ad, OP_ALLREDUCE, &dy, 1, &out, 1, "ar");
    comm_op_attrs(&g->ops[id], g->t[t].tp_sum_grad, 0, 2, COMM_TP);   /* a sum, with the backward */
    cover(ad, out, 0, g->t[out].bytes);
    return out;
}

/* ---- issue 22's ops ---- */

/* A new backward tensor shaped like t (not a gradient of anything): the
 * product or sum a broadcast operand's gradient is reduced from. */
static int bwd_temp(AD *ad, int t, const char *what)
{
    Graph *g = ad->g;
    char *name = xasprintf("%s.%s", what, ad->name);
    int v = graph_add_tensor(g, name, DT_F32, g->t[t].rank, g->t[t].shape, TK_ACTGRAD, ad->loc);
    free(name);
    return v;
}

/* t and u have one shape (not only one size: b [2, 1, 2] broadcast over
 * a [1, 2, 1, 2] has a's size, and an elementwise op writing b's gradient
 * from dy would break its shape rule) */
static int same_shape(const Graph *g, int t, int u)
{
    return g->t[t].rank == g->t[u].rank &&
           memcmp(g->t[t].shape, g->t[u].shape, sizeof(long) * (size_t)g->t[t].rank) == 0;
}

/* c = a * b: da = dy * b (b broadcast as in the forward); db = dy * a,
 * summed over the broadcast rows when b is smaller (over one row when b
 * only lacks leading 1s) */
static void grad_mul(AD *ad, const Op *op, int dy)
{
    Graph *g = ad->g;
    int a = op->in[0], b = op->in[1];
    if (NEEDS(0)) {
        int in[2] = {dy, b};
        emit1(ad, OP_MUL, in, 2, a, NULL, "bwd.da");
    }
    if (NEEDS(1)) {
        int in[2] = {dy, a};
        if (same_shape(g, b, dy)) {
            emit1(ad, OP_MUL, in, 2, b, NULL, "bwd.db");
        } else {
            int tmp = bwd_temp(ad, dy, "dyxa");
            new_op(ad, OP_MUL, in, 2, &tmp, 1, "bwd.dyxa");
            emit1(ad, OP_REDUCE_ROWS, &tmp, 1, b, NULL, "bwd.db");
        }
    }
}

/* c = a - b: da = dy, db = -dy (summed over broadcast rows) */
static void grad_sub(AD *ad, const Op *op, int dy)
{
    Graph *g = ad->g;
    int a = op->in[0], b = op->in[1];
    double neg[4] = {-1};
    if (NEEDS(0))
        emit1(ad, OP_COPY, &dy, 1, a, NULL, "bwd");
    if (NEEDS(1)) {
        if (same_shape(g, b, dy)) {
            emit1(ad, OP_SCALE, &dy, 1, b, neg, "bwd.db");
        } else {
            int tmp = bwd_temp(ad, b, "sumdy");
            new_op(ad, OP_REDUCE_ROWS, &dy, 1, &tmp, 1, "bwd.sumdy");
            emit1(ad, OP_SCALE, &tmp, 1, b, neg, "bwd.db");
        }
    }
}

/* y = f(x) elementwise: dx = f'(x) dy, one EW op <f>_bwd(x, dy) */
static void grad_unary(AD *ad, const Op *op, int dy)
{
    static const OpKind bwd[OP_COUNT] = {
        [OP_SILU] = OP_SILU_BWD, [OP_SIGMOID] = OP_SIGMOID_BWD, [OP_RELU] = OP_RELU_BWD,
        [OP_TANH] = OP_TANH_BWD, [OP_GELU_ERF] = OP_GELU_ERF_BWD,
    };
    if (NEEDS(0)) {
        int in[2] = {op->in[0], dy};
        emit1(ad, bwd[op->kind], in, 2, op->in[0], NULL, "bwd");
    }
}

static void grad_rmsnorm(AD *ad, const Op *op, int dy)
{
    Graph *g = ad->g;
    int out[2], acc = 0;
    for (int i = 0; i < 2; i++) {
        int a;
        if (NEEDS(i)) {
            out[i] = contribute(ad, op->in[i], &a);
            acc |= a << i;
        } else {     /* a scratch output the kernel writes and nobody reads */
            char *name = xasprintf("scratch.%s.%d", ad->name, i);
            out[i] = graph_add_tensor(g, name, DT_F32, g->t[op->in[i]].rank, g->t[op->in[i]].shape,
                                      TK_WORKSPACE, ad->loc);
            free(name);
        }
    }
    int in[4] = {dy, op->in[0], op->in[1], op->out[1]};
    int id = new_op(ad, OP_RMSNORM_BWD, in, 4, out, 2, "bwd");
    g->ops[id].acc = acc;
}

static void grad_rope(AD *ad, const Op *op, int dy)
{
    if (NEEDS(0))
        emit1(ad, OP_ROPE_BWD, &dy, 1, op->in[0], op->attr, "bwd");
}

/* each input's gradient is its slice of dy */
static void grad_concat(AD *ad, const Op *op, int dy)
{
    Graph *g = ad->g;
    int ax = (int)op->attr[0];
    long start = 0;
    for (int i = 0; i < 2; i++) {
        long len = g->t[op->in[i]].shape[ax];
        double at[4] = {(double)start, (double)len, ax};
        if (NEEDS(i))
            emit1(ad, OP_NARROW, &dy, 1, op->in[i], at, i ? "bwd.db" : "bwd.da");
        start += len;
    }
}

static void grad_narrow(AD *ad, const Op *op, int dy)
{
    if (NEEDS(0))
        emit1(ad, OP_NARROW_BWD, &dy, 1, op->in[0], op->attr, "bwd");
}

static void grad_repeat(AD *ad, const Op *op, int dy)
{
    if (NEEDS(0))
        emit1(ad, OP_REPEAT_BWD, &dy, 1, op->in[0], op->attr, "bwd");
}

static void grad_mean(AD *ad, const Op *op, int dy)
{
    if (NEEDS(0))
        emit1(ad, OP_MEAN_BWD, &dy, 1, op->in[0], NULL, "bwd");
}

/* views: the gradient of a view is a view of its base's gradient (grad_of) */
static void grad_view(AD *ad, const Op *op, int dy) { (void)ad; (void)op; (void)dy; }

static void grad_internal(AD *ad, const Op *op, int dy)
{
    (void)ad; (void)dy;
    IR_BUG("autodiff reached internal op %s", op->name);
}

/* the rule of each op of ops.def (a missing one fails to compile) */
#define RULE_EMBEDDING grad_embedding
#define RULE_MATMUL grad_matmul
#define RULE_ADD grad_add
#define RULE_SCALE grad_scale
#define RULE_GELU grad_gelu
#define RULE_LAYERNORM grad_layernorm
#define RULE_SOFTMAX grad_softmax
#define RULE_CAUSAL_MASK grad_causal_mask
#define RULE_CROSS_ENTROPY grad_cross_entropy
#define RULE_RESHAPE grad_view
#define RULE_PERMUTE grad_permute
#define RULE_SPLIT grad_view
#define RULE_SLICE grad_view
#define RULE_INDEX grad_view
#define RULE_MUL grad_mul
#define RULE_SUB grad_sub
#define RULE_SILU grad_unary
#define RULE_SIGMOID grad_unary
#define RULE_RELU grad_unary
#define RULE_TANH grad_unary
#define RULE_GELU_ERF grad_unary
#define RULE_RMSNORM grad_rmsnorm
#define RULE_ROPE grad_rope
#define RULE_CONCAT grad_concat
#define RULE_REPEAT grad_repeat
#define RULE_MEAN grad_mean
#define RULE_NARROW grad_narrow
#define RULE_SILU_BWD grad_internal
#define RULE_SIGMOID_BWD grad_internal
#define RULE_RELU_BWD grad_internal
#define RULE_TANH_BWD grad_internal
#define RULE_GELU_ERF_BWD grad_internal
#define RULE_RMSNORM_BWD grad_internal
#define RULE_ROPE_BWD grad_internal
#define RULE_NARROW_BWD grad_internal
#define RULE_REPEAT_BWD grad_internal
#define RULE_MEAN_BWD grad_internal
#define RULE_EMBEDDING_BWD grad_internal
#define RULE_REDUCE_ROWS grad_internal
#define RULE_LAYERNORM_BWD grad_internal
#define RULE_SOFTMAX_BWD grad_internal
#define RULE_CAUSAL_MASK_BWD grad_internal
#define RULE_CROSS_ENTROPY_BWD grad_internal
#define RULE_GELU_BWD grad_internal
#define RULE_COPY grad_internal
#define RULE_FILL grad_internal
#define RULE_ADAMW grad_internal
#define RULE_MATMUL_BIAS grad_internal
#define RULE_ALLREDUCE grad_allreduce
#define RULE_REDUCE_SCATTER grad_internal
#define RULE_ALLGATHER grad_internal
#define RULE_GATHER grad_internal
#define RULE_ADAMW_BF16 grad_internal
#define RULE_ATTENTION grad_internal
#define RULE_ATTENTION_BWD grad_internal
#define RULE_ATTENTION_GQA grad_internal
#define RULE_ATTENTION_GQA_BWD grad_internal
#define RULE_CLASSIFIER grad_internal
#define RULE_MATMUL_BIAS_GELU grad_internal
#define RULE_MATMUL_DGELU grad_internal
#define RULE_MATMUL_DGELU_BGRAD grad_internal
#define RULE_ADD_LAYERNORM grad_internal
#define RULE_ADD_RMSNORM grad_internal
#define RULE_SWIGLU grad_internal
#define RULE_SWIGLU_BWD grad_internal
#define RULE_OFFLOAD grad_internal
#define RULE_PREFETCH grad_internal
#define RULE_COPY_WAIT grad_internal

static const GradFn grad_rule[OP_COUNT] = {
#define OP(E, name, nin, nout, attrs, cls) [OP_##E] = RULE_##E,
#include "ops.def"
#undef OP
};

/* ---- the pass ------------------------------------------------------------------------ */

/* needs[t]: t depends on a parameter and the loss depends on t */
static char *find_needs(const Graph *g)
{
    char *from_param = xcalloc((size_t)g->nt, 1), *to_loss = xcalloc((size_t)g->nt, 1);
    for (int i = 0; i < g->nparams; i++)
        from_param[g->params[i]] = 1;
    for (int o = 0; o < g->nops; o++) {
        const Op *op = &g->ops[o];
        int any = 0;
        for (int i = 0; i < op->nin; i++)
            any |= from_param[op->in[i]];
        for (int i = 0; i < op->nout; i++)
            from_param[op->out[i]] |= (char)any;
    }
    to_loss[g->loss] = 1;
    for (int o = g->nops - 1; o >= 0; o--) {
        const Op *op = &g->ops[o];
        int any = 0;
        for (int i = 0; i < op->nout; i++)
            any |= to_loss[op->out[i]];
        for (int i = 0; i < op->nin; i++)
            to_loss[op->in[i]] |= (char)any;
    }
    for (int t = 0; t < g->nt; t++)
        from_param[t] &= to_loss[t];
    free(to_loss);
    return from_param;
}

void pass_autodiff(Graph *g)
{
    if (g->loss < 0) {
        diag_error((Loc){g->file, 1, 1}, "the graph has no 'minimize' statement");
        return;
    }
    if (g->t[g->loss].producer < 0) {
        /* a loss no op computes (`minimize p` of a scalar parameter): the
           program reads the loss from the arena after the forward, so it
           becomes a forward copy of it, scale(p, 1), whose gradient is p's */
        const Tensor *p = &g->t[g->loss];
        char *name = xasprintf("%s.loss", p->name);
        int l = graph_add_tensor(g, name, p->dtype, p->rank, p->shape, TK_ACTIVATION, p->loc);
        int in = g->loss, id = graph_add_op(g, OP_SCALE, name, &in, 1, &l, 1, g->t[in].loc);
        free(name);
        g->ops[id].phase = PH_FWD;
        g->ops[id].attr[0] = 1.0;
        g->loss = l;
    }
    AD ad = {.g = g, .layer = -1};
    int nfwd = g->nops;
    ad.needs = find_needs(g);
    index_readers(&ad, nfwd);
    /* gradients of parameters live in the grads region, in declaration order */
    for (int i = 0; i < g->nparams; i++) {
        Tensor *p = &g->t[g->params[i]];
        char *name = xasprintf("d.%s", p->name);
        int gt = graph_add_tensor(g, name, DT_F32, p->rank, p->shape, TK_GRAD, p->loc);
        free(name);
        g->t[g->params[i]].grad = gt;
    }
    grow(&ad);      /* coverage for the gradients just added (a loss that is a parameter: its own) */
    /* the seed: d loss = 1 */
    ad.loc = g->t[g->loss].loc;
    ad.name = g->t[g->loss].name;
    double one[4] = {1.0};
    emit1(&ad, OP_FILL, NULL, 0, g->loss, one, "seed");
    for (int o = nfwd - 1; o >= 0; o--) {
        const Op op = g->ops[o];       /* g->ops never moves (ir.h); a copy all the same */
        if (op_info[op.kind].cls == OPC_VIEW)
            continue;
        int dy = ad.needs[op.out[0]] ? grad_read(&ad, op.out[0]) : -1;
        if (dy < 0)
            continue;
        ad.loc = op.loc;
        ad.layer = op.layer;
        ad.name = op.name;
        if (g->t[op.out[0]].tp_sum_grad > 1)
            dy = sum_over_ranks(&ad, op.out[0], dy);
        grad_rule[op.kind](&ad, &op, dy);
    }
    /* parameter gradients: bytes nothing wrote (unused rows) become zeros */
    ad.layer = -1;
    for (int i = 0; i < g->nparams; i++) {
        ad.loc = g->t[g->params[i]].loc;
        ad.name = g->t[g->params[i]].name;
        grad_read(&ad, g->params[i]);
    }
    /* the optimizer: one AdamW update per parameter */
    for (int i = 0; i < g->nparams; i++) {
        int p = g->params[i];
        char *m = xasprintf("m.%s", g->t[p].name), *v = xasprintf("v.%s", g->t[p].name);
        Loc loc = g->t[p].loc;
        int mt = graph_add_tensor(g, m, DT_F32, g->t[p].rank, g->t[p].shape, TK_OPTSTATE, loc);
        int vt = graph_add_tensor(g, v, DT_F32, g->t[p].rank, g->t[p].shape, TK_OPTSTATE, loc);
        g->t[p].opt_m = mt;
        g->t[p].opt_v = vt;
        int in[4] = {p, g->t[p].grad, mt, vt};
        char *name = xasprintf("adamw.%s", g->t[p].name);
        int id = graph_add_op(g, OP_ADAMW, name, in, 4, NULL, 0, loc);
        g->ops[id].phase = PH_OPT;
        g->ops[id].attr[0] = g->t[p].decay;
        free(name);
        free(m);
        free(v);
    }
    for (int t = 0; t < ad.capt; t++)
        free(ad.cov[t]);
    free(ad.cov);
    free(ad.ncov);
    free(ad.needs);
    free(ad.rstart);
    free(ad.readers);
    free(ad.member);
    free(ad.gnext);
    free(ad.ghead);
}
