/* split.c — the parallel split: one plan per rank, collectives as ops.
 *
 * dp: every rank holds all parameters and optimizer state and runs the whole
 *     step on its own B rows (rank r takes rows r·B … (r+1)·B−1 of the
 *     global batch of N·B rows, see runtime/ranks.c). Each update's gradient
 *     (a per-layer slice after split_updates) goes through an allreduce
 *     (mean over ranks) into a comm tensor in the arena, and the update reads
 *     that. The schedule runs each collective as soon as its gradient is
 *     complete, so under the fused-opt schedule a layer's all-reduce and
 *     update follow its backward directly.
 *
 * zero1, zero2, zero3: see split_zero and split_zero3 below.
 *
 * bf16 programs (passes/precision.c) update with adamw_bf16: the fp32 master,
 * its moments and its gradient as adamw, plus the bf16 copy of the weights
 * that every other op reads (input 4). ZeRO shards the masters with the
 * moments (zero1-3: each rank stores 1/N of every master and updates it),
 * and the collectives that make weights whole carry the bf16 copies: zero1
 * and zero2 all-gather each updated copy shard (the copies stay whole in the
 * params region), zero3 keeps 1/N of each copy too and gathers whole copies
 * into the arena before use. The casts that refresh the copies from masters
 * the host wrote (GC_PHASE_PARAMS) run per shard; under zero1/zero2 each is
 * followed by an all-gather of gate 8 (GC_PHASE_PARAMS) that completes the
 * whole copies.
 *
 * The pass also records g->nranks, g->split_name and g->comm_bytes (bytes
 * one rank sends per step with ring algorithms: an all-reduce of n bytes
 * sends 2(N-1)/N·n). Run after split_updates, before schedule.
 */
#include <string.h>

#include "passes.h"

const char *split_kind_name(SplitKind k)
{
    static const char *const names[] = {"none", "dp", "zero1", "zero2", "zero3", "tp", "auto"};
    return names[k];
}

void comm_op_attrs(Op *op, int ranks, int avg, int gate, int group)
{
    op->phase = PH_COMM;
    op->attr[0] = ranks;
    op->attr[1] = avg;
    op->attr[2] = gate;
    op->attr[3] = group;
}

/* a collective (mean where it reduces) of layer `layer` */
static void add_comm_op(Graph *g, OpKind kind, const char *name, const int *in, int nin, const int *out, int nout,
                        int ranks, int gate, int layer, int group)
{
    int id = graph_add_op(g, kind, name, in, nin, out, nout, g->t[in[0]].loc);
    g->ops[id].layer = layer;
    comm_op_attrs(&g->ops[id], ranks, 1, gate, group);
}

/* out = mean over ranks of `in`, a new comm tensor; returns the out id */
static int add_allreduce(Graph *g, int in, int ranks, int layer, int group)
{
    Tensor x = g->t[in];
    char *name = xasprintf("ar.%s", x.name);
    int out = graph_add_tensor(g, name, x.dtype, x.rank, x.shape, TK_COMM, x.loc);
    g->t[out].region = RG_ARENA;
    add_comm_op(g, OP_ALLREDUCE, name, &in, 1, &out, 1, ranks, 2, layer, group);   /* with the backward */
    free(name);
    g->comm_bytes += 2.0 * (ranks - 1) / ranks * (double)x.bytes;
    return out;
}

/* an optimizer update: adamw, or a bf16 program's adamw_bf16 (precision.c),
 * which reads the same fp32 master, gradient and moments */
static int is_update(const Op *op) { return !op->dead && (op->kind == OP_ADAMW || op->kind == OP_ADAMW_BF16); }

/* the bf16 copy an update writes (adamw_bf16's input 4), or -1 */
static int update_copy(const Op *op) { return op->kind == OP_ADAMW_BF16 ? op->in[4] : -1; }

static void split_dp(Graph *g, int ranks, int group)
{
    int nops = g->nops;
    for (int o = 0; o < nops; o++) {
        if (!is_update(&g->ops[o]))
            continue;
        int grad = g->ops[o].in[1], w = g->t[grad].producer;
        int red = add_allreduce(g, grad, ranks, w >= 0 ? g->ops[w].layer : -1, group);
        g->ops[o].in[1] = red;     /* the update reads the mean gradient */
    }
}

/* ---- ZeRO ----------------------------------------------------------------- */

/* A view of k elements of t's storage, elem elements in, moved k elements
 * further per rank: rank r's shard of t. */
static int shard_view(Graph *g, int t, long k, const char *prefix)
{
    size_t off;
    int root = graph_root(g, t, &off);
    char *name = xasprintf("%s%s", prefix, g->t[t].name);
    int v = graph_add_tensor(g, name, g->t[t].dtype, 1, &k, g->t[t].kind, g->t[t].loc);
    free(name);
    g->t[v].region = g->t[root].region;
    g->t[v].view_of = root;
    g->t[v].view_offset = off;
    g->t[v].rank_stride = (size_t)k * dtype_size(g->t[t].dtype);
    return v;
}

/* Shrinks an optimizer moment (a root, or a layer view of one) to 1/ranks:
 * rank r keeps only the moments of its shard. */
static void shard_moment(Graph *g, int t, int ranks, char *shrunk)
{
    Tensor *x = &g->t[t];
    if (shrunk[t])
        return;
    shrunk[t] = 1;
    x->numel /= ranks;
    x->bytes /= (size_t)ranks;
    x->rank = 1;
    x->shape[0] = x->numel;
    if (x->view_of < 0)
        return;
    x->view_offset /= (size_t)ranks;
    shard_moment(g, graph_root(g, t, NULL), ranks, shrunk);
}

/* zero1: a gradient root that no op names (split_updates gave each layer
 * slice its own root) takes no space in the grads region. */
static void drop_unused_grad_roots(Graph *g)
{
    char *used = xcalloc((size_t)g->nt, 1);
    for (int o = 0; o < g->nops; o++) {
        const Op *op = &g->ops[o];
        for (int i = 0; i < op->nin + op->nout && !op->dead; i++)
            used[graph_root(g, i < op->nin ? op->in[i] : op->out[i - op->nin], NULL)] = 1;
    }
    for (int t = 0; t < g->nt; t++)
        if (g->t[t].region == RG_GRADS && g->t[t].view_of < 0 && !used[t])
            g->t[t].region = RG_ARENA;
    free(used);
}

/* -1 after a located error when an update cannot be cut into equal shards */
static int check_divisible(Graph *g, int ranks, int stage)
{
    for (int o = 0; o < g->nops; o++) {
        const Op *u = &g->ops[o];
        if (!is_update(u))
            continue;
        if (g->t[u->in[0]].numel % ranks) {
            diag_error(u->loc, "--split zero%d: update %s has %ld elements, not a multiple of %d ranks", stage,
                       u->name, g->t[u->in[0]].numel, ranks);
            return -1;
        }
    }
    return 0;
}

/* 1 for a bf16 program (its updates are adamw_bf16) */
static int updates_bf16(const Graph *g)
{
    for (int o = 0; o < g->nops; o++)
        if (is_update(&g->ops[o]))
            return g->ops[o].kind == OP_ADAMW_BF16;
    return 0;
}

/* Root r gives way to a root of 1/ranks its size in its region, with its
 * name, init, decay, moments and tensor-parallel cut; the whole one,
 * renamed whole.NAME, moves to the arena with its views (no op uses them
 * any more: no storage). Returns the new root (its `whole`: r). */
static int shard_root(Graph *g, int r, int ranks)
{
    long k = g->t[r].numel / ranks;
    int s = graph_add_tensor(g, g->t[r].name, g->t[r].dtype, 1, &k, g->t[r].kind, g->t[r].loc);
    Tensor *x = &g->t[s], *old = &g->t[r];
    x->region = old->region;
    x->init = old->init, x->init_std = old->init_std, x->decay = old->decay;
    x->opt_m = old->opt_m, x->opt_v = old->opt_v;
    x->tp_ranks = old->tp_ranks, x->tp_axis = old->tp_axis;
    x->tp_outer = old->tp_outer, x->tp_inner = old->tp_inner;
    x->whole = r;
    graph_rename_tensor(g, r, xasprintf("whole.%s", old->name));
    old->region = RG_ARENA;
    return s;
}

/* The shard roots of zero1-3: each parameter (an fp32 master in a bf16
 * program) keeps its place in g->params with a root of 1/ranks its size;
 * with `copies`, each bf16 copy of a parameter (the output of its refresh
 * cast) gets one too. Views of the whole roots follow them to the arena.
 * Returns the map old root -> shard root (-1 elsewhere) of *nto entries. */
static int *shard_params(Graph *g, int ranks, int copies, int *nto)
{
    int nt0 = g->nt;
    *nto = nt0;
    int *to = xmalloc((size_t)(nt0 + 1) * sizeof(int));
    for (int t = 0; t < nt0; t++)
        to[t] = -1;
    for (int i = 0; i < g->nparams; i++) {
        int r = g->params[i];
        to[r] = g->params[i] = shard_root(g, r, ranks);
    }
    for (int o = 0; copies && o < g->nops; o++) {   /* the casts precision.c made: master -> copy */
        const Op *op = &g->ops[o];
        if (!op->dead && op->kind == OP_COPY && op->in[0] < nt0 && to[op->in[0]] >= 0 && op->out[0] < nt0 &&
            g->t[op->out[0]].view_of < 0 && g->t[op->out[0]].kind == TK_PARAM)
            to[op->out[0]] = shard_root(g, op->out[0], ranks);
    }
    for (int t = 0; t < nt0; t++)          /* views of the whole roots follow them */
        if (g->t[t].view_of >= 0 && to[graph_root(g, t, NULL)] >= 0)
            g->t[t].region = RG_ARENA;
    return to;
}

/* An update's tensor t (a whole root of `to`, or a view of one: a layer
 * slice) moved onto the shard: the shard root, or t made the same view of
 * the shard root at 1/ranks of its size and offset. */
static int on_shard(Graph *g, int t, const int *to, int ranks, char *shrunk)
{
    size_t off;
    int r = graph_root(g, t, &off);
    if (r == t)
        return to[t];
    g->t[t].view_of = to[r];
    g->t[t].region = g->t[to[r]].region;
    g->t[t].view_offset = off;   /* shard_moment divides it */
    shard_moment(g, t, ranks, shrunk);
    return t;
}

/* a shrunk-flag per tensor (shard_moment), set for the shard roots */
static char *shrunk_flags(const Graph *g, const int *to, int nto)
{
    char *shrunk = xcalloc((size_t)g->nt + 1, 1);
    for (int t = 0; t < nto; t++)
        if (to[t] >= 0)
            shrunk[to[t]] = 1;
    return shrunk;
}

/* zero1/zero2: the gradient of each update is reduce-scattered (each rank
 * gets the mean of its 1/N), the update runs on this rank's shard of the
 * parameter with 1/N of the optimizer state, and an all-gather (in place,
 * right after the update) gives every rank the whole updated parameter.
 * zero1 keeps the whole gradients in the grads region; zero2 lets each die
 * at its reduce-scatter (its own arena root under the fused-opt schedule).
 * A bf16 program stores 1/N of each master (params_sharded) and all-gathers
 * the updated bf16 copy instead; the refresh of the copies from the masters
 * becomes a cast of each shard plus an all-gather (gate 8). */
static int split_zero(Graph *g, int ranks, int stage, int group)
{
    int nops = g->nops, nto = 0, bf16 = updates_bf16(g);
    if (check_divisible(g, ranks, stage))
        return -1;
    int *to = bf16 ? shard_params(g, ranks, 0, &nto) : NULL;
    char *shrunk = shrunk_flags(g, to, nto);
    for (int o = 0; o < nops; o++) {
        if (!is_update(&g->ops[o]))
            continue;
        int p = g->ops[o].in[0], grad = g->ops[o].in[1], c = update_copy(&g->ops[o]), w = g->t[grad].producer;
        int layer = w >= 0 ? g->ops[w].layer : -1;
        long k = g->t[p].numel / ranks;
        if (stage == 1)
            g->t[graph_root(g, grad, NULL)].region = RG_GRADS;
        char *name = xasprintf("rs.%s", g->t[grad].name);
        int rs = graph_add_tensor(g, name, g->t[grad].dtype, 1, &k, TK_COMM, g->t[grad].loc);
        g->t[rs].region = RG_ARENA;
        add_comm_op(g, OP_REDUCE_SCATTER, name, &grad, 1, &rs, 1, ranks, 2, layer, group);
        free(name);
        g->comm_bytes += (double)g->t[grad].bytes * (ranks - 1) / ranks;
        for (int i = 2; i < 4; i++)
            shard_moment(g, g->ops[o].in[i], ranks, shrunk);
        g->ops[o].in[1] = rs;
        int whole = c >= 0 ? c : p;       /* what the all-gather makes whole */
        int part = shard_view(g, whole, k, "shard.");
        if (c >= 0) {
            int ms = on_shard(g, p, to, ranks, shrunk);
            g->ops[o].in[0] = ms;
            g->ops[o].in[4] = part;
            name = xasprintf("refresh.%s", g->t[c].name);   /* the copy from a master the host wrote */
            int cast = graph_add_op(g, OP_COPY, name, &ms, 1, &part, 1, g->t[c].loc);
            g->ops[cast].phase = PH_FWD;
            g->ops[cast].layer = layer;
            add_comm_op(g, OP_ALLGATHER, name, (int[]){c, part}, 2, NULL, 0, ranks, 8, layer, group);
            free(name);
        } else {
            g->ops[o].in[0] = part;
        }
        name = xasprintf("ag.%s", g->t[whole].name);
        add_comm_op(g, OP_ALLGATHER, name, (int[]){whole, part}, 2, NULL, 0, ranks, 4, layer, group);
        free(name);
        g->comm_bytes += (double)g->t[whole].bytes * (ranks - 1) / ranks;
    }
    for (int o = 0; bf16 && o < nops; o++)   /* the whole casts: their masters are shards now */
        if (!g->ops[o].dead && g->ops[o].kind == OP_COPY && g->ops[o].in[0] < nto && to[g->ops[o].in[0]] >= 0)
            g->ops[o].dead = 1;
    g->params_sharded = bf16;
    free(shrunk);
    free(to);
    g->grads_persist = stage == 1;
    if (stage == 1)
        drop_unused_grad_roots(g);
    return 0;
}

/* ---- ZeRO-3 ------------------------------------------------------------------ */

/* The bytes [lo, hi) of a parameter root that one update writes (its shape
 * and its shard tensor), and the gathered copies of them for the forward
 * ([0]) and the backward ([1]). In a bf16 program the root is the bf16
 * copy, which the forward and backward read. */
typedef struct Slice {
    int root, upd, part, gathered[2];
    size_t lo, hi;
    int rank;
    long shape[IR_MAXRANK];
} Slice;

/* A comm tensor with the whole of slice s, gathered from every rank's shard
 * (phase 0: for the forward, 1: the backward), made by a gather op that the
 * schedule runs just before its first reader. */
static int add_gather(Graph *g, Slice *s, int ranks, int phase)
{
    const Tensor *part = &g->t[s->part];
    char *name = xasprintf("%s.%s", phase ? "gb" : "gf", part->name);
    int out = graph_add_tensor(g, name, part->dtype, s->rank, s->shape, TK_COMM, part->loc);
    g->t[out].region = RG_ARENA;
    add_comm_op(g, OP_GATHER, name, &s->part, 1, &out, 1, ranks, phase ? 2 : 1, -1, COMM_ALL);
    free(name);
    g->comm_bytes += (double)g->t[out].bytes * (ranks - 1) / ranks;
    return out;
}

/* Points every forward and backward read of parameter bytes at a view of
 * the gathered copy of its slice. */
static void read_gathered(Graph *g, Slice *sl, int ns, int ranks, int nops)
{
    for (int o = 0; o < nops; o++) {
        Phase ph = g->ops[o].phase;
        if (g->ops[o].dead || op_info[g->ops[o].kind].cls == OPC_VIEW || (ph != PH_FWD && ph != PH_BWD))
            continue;
        for (int i = 0; i < g->ops[o].nin; i++) {
            int t = g->ops[o].in[i];
            size_t off;
            int r = graph_root(g, t, &off), k = 0;
            while (k < ns && !(sl[k].root == r && sl[k].lo <= off && off + g->t[t].bytes <= sl[k].hi))
                k++;
            if (k == ns)
                continue;             /* not parameter bytes */
            int b = ph == PH_BWD;
            if (sl[k].gathered[b] < 0)
                sl[k].gathered[b] = add_gather(g, &sl[k], ranks, b);
            int v = graph_add_view(g, sl[k].gathered[b], off - sl[k].lo, b ? "gb." : "gf.", t, TK_COMM);
            g->ops[o].in[i] = v;
        }
    }
}

/* View ops of the whole parameters whose views nothing reads any more die. */
static void drop_param_views(Graph *g, const int *to, int nto)
{
    for (int changed = 1; changed;) {
        changed = 0;
        graph_relink(g);
        for (int o = 0; o < g->nops; o++) {
            Op *op = &g->ops[o];
            int r = graph_root(g, op->in[0], NULL);
            if (op->dead || op_info[op->kind].cls != OPC_VIEW || r >= nto || to[r] < 0)
                continue;
            int used = 0;
            for (int i = 0; i < op->nout; i++)
                used |= g->t[op->out[i]].nconsumers > 0;
            if (!used)
                op->dead = changed = 1;
        }
    }
}

/* zero3: as zero2, and each rank stores only its 1/N of every update's
 * parameter slice (the params region shrinks to 1/N); the forward and the
 * backward read whole slices gathered into the arena just before use. A
 * bf16 program stores 1/N of each master and of each bf16 copy, gathers the
 * copies, and refreshes each copy shard from its master shard. */
static int split_zero3(Graph *g, int ranks)
{
    if (check_divisible(g, ranks, 3))
        return -1;
    int nops = g->nops, ns = 0, nto = 0, bf16 = updates_bf16(g);
    Slice *sl = xcalloc((size_t)nops + 1, sizeof *sl);
    for (int o = 0; o < nops; o++)
        if (is_update(&g->ops[o])) {
            int p = bf16 ? update_copy(&g->ops[o]) : g->ops[o].in[0];   /* what the step reads */
            size_t off;
            int r = graph_root(g, p, &off);
            sl[ns] = (Slice){.root = r, .upd = o, .part = p, .gathered = {-1, -1}, .lo = off,
                             .hi = off + g->t[p].bytes, .rank = g->t[p].rank};
            memcpy(sl[ns].shape, g->t[p].shape, sizeof sl[ns].shape);
            ns++;
        }
    int *to = shard_params(g, ranks, bf16, &nto);
    char *shrunk = shrunk_flags(g, to, nto);
    for (int k = 0; k < ns; k++) {        /* each update on its shard */
        Op *u = &g->ops[sl[k].upd];
        u->in[0] = on_shard(g, u->in[0], to, ranks, shrunk);
        if (bf16)
            u->in[4] = on_shard(g, u->in[4], to, ranks, shrunk);
        sl[k].part = bf16 ? u->in[4] : u->in[0];
    }
    for (int o = 0; bf16 && o < nops; o++) {   /* the casts: master shard -> copy shard */
        Op *op = &g->ops[o];
        if (!op->dead && op->kind == OP_COPY && op->in[0] < nto && to[op->in[0]] >= 0 && op->out[0] < nto &&
            to[op->out[0]] >= 0) {
            g->t[op->out[0]].producer = -1;
            op->in[0] = to[op->in[0]];
            op->out[0] = to[op->out[0]];
            g->t[op->out[0]].producer = o;
        }
    }
    read_gathered(g, sl, ns, ranks, nops);
    for (int k = 0; k < ns; k++) {
        int o = sl[k].upd, grad = g->ops[o].in[1], w = g->t[grad].producer;
        long n = g->t[sl[k].part].numel;
        char *name = xasprintf("rs.%s", g->t[grad].name);
        int rs = graph_add_tensor(g, name, g->t[grad].dtype, 1, &n, TK_COMM, g->t[grad].loc);
        g->t[rs].region = RG_ARENA;
        add_comm_op(g, OP_REDUCE_SCATTER, name, &grad, 1, &rs, 1, ranks, 2, w >= 0 ? g->ops[w].layer : -1, COMM_ALL);
        free(name);
        g->ops[o].in[1] = rs;
        for (int i = 2; i < 4; i++)
            shard_moment(g, g->ops[o].in[i], ranks, shrunk);
        g->comm_bytes += (double)g->t[grad].bytes * (ranks - 1) / ranks;
    }
    drop_param_views(g, to, nto);
    g->params_sharded = 1;
    free(shrunk);
    free(to);
    free(sl);
    return 0;
}

int split_backward_gather(Graph *g, int t, int *memo, int nmemo)
{
    size_t off;
    int r = graph_root(g, t, &off), w = g->t[r].producer;
    if (w < 0 || g->ops[w].kind != OP_GATHER || (int)g->ops[w].attr[2] != 1)
        return t;
    Op fwd = g->ops[w];               /* a copy: adding ops moves g->ops */
    int part = fwd.in[0], gb = -1;
    if (memo && part < nmemo && memo[part] != -2)   /* found or made for an earlier read */
        gb = memo[part];
    else
        for (int o = 0; o < g->nops && gb < 0; o++)
            if (!g->ops[o].dead && g->ops[o].kind == OP_GATHER && (int)g->ops[o].attr[2] == 2 &&
                g->ops[o].in[0] == part)
                gb = g->ops[o].out[0];
    if (gb < 0) {                     /* a slice the backward itself does not read */
        Tensor x = g->t[r];
        char *name = xasprintf("gb.%s", g->t[part].name);
        gb = graph_add_tensor(g, name, x.dtype, x.rank, x.shape, TK_COMM, x.loc);
        g->t[gb].region = RG_ARENA;
        add_comm_op(g, OP_GATHER, name, &part, 1, &gb, 1, (int)fwd.attr[0], 2, -1, (int)fwd.attr[3]);
        free(name);
        g->comm_bytes += (double)x.bytes * (fwd.attr[0] - 1) / fwd.attr[0];
    }
    if (memo && part < nmemo)
        memo[part] = gb;
    if (r == t)
        return gb;
    return graph_add_view(g, gb, off, "gb.", t, TK_COMM);
}

/* The bytes tensor parallel's all-reduces send (split_tp.c's forward ones,
 * autodiff's in the backward), counted at the dtype precision.c gave them. */
static void tp_comm_bytes(Graph *g)
{
    g->comm_bytes = 0;
    for (int o = 0; o < g->nops; o++) {
        const Op *op = &g->ops[o];
        if (!op->dead && op->kind == OP_ALLREDUCE && (int)op->attr[3] == COMM_TP)
            g->comm_bytes += 2.0 * (op->attr[0] - 1) / op->attr[0] * (double)g->t[op->in[0]].bytes;
    }
}

void pass_split(Graph *g, const SplitSpec *s)
{
    if (s->kind == SPLIT_NONE || s->ranks <= 1)
        return;
    g->nranks = s->ranks;
    g->split_name = split_kind_name(s->kind);
    SplitKind kind = s->kind;
    int ranks = s->ranks, group = COMM_ALL;
    if (s->kind == SPLIT_TP) {   /* cut before autodiff (split_tp.c) */
        tp_comm_bytes(g);
        ranks = s->ranks / s->tp;
        if (ranks <= 1)
            return;
        kind = s->rest;          /* over the groups of the ranks that hold the same part */
        group = COMM_DP;
        static const char *const names[] = {[SPLIT_DP] = "tp+dp", [SPLIT_ZERO1] = "tp+zero1", [SPLIT_ZERO2] = "tp+zero2"};
        if (kind != SPLIT_DP && kind != SPLIT_ZERO1 && kind != SPLIT_ZERO2)
            IR_BUG("split tp + %s: not implemented", split_kind_name(kind));
        g->split_name = names[kind];
    } else {
        g->comm_bytes = 0;
    }
    switch (kind) {
    case SPLIT_DP: split_dp(g, ranks, group); break;
    case SPLIT_ZERO1: case SPLIT_ZERO2:
        if (split_zero(g, ranks, kind == SPLIT_ZERO1 ? 1 : 2, group))
            return;
        break;
    case SPLIT_ZERO3:
        if (split_zero3(g, ranks))
            return;
        break;
    default: IR_BUG("split %s: not implemented", split_kind_name(kind));
    }
    graph_relink(g);
}
