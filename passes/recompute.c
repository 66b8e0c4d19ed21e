/* recompute.c — activation recomputation (a transformation).
 *
 * For each layer (op->layer) a choice: keep everything (RC_NONE), recompute
 * the cheap ops (RC_SELECTIVE), or recompute the whole layer from its input
 * (RC_FULL). A recomputed forward op gets a clone of phase `recompute` (same
 * kernel, same inputs, new output tensors "<name>.re") and every backward op
 * that read the original's outputs reads the clone's instead. The original
 * outputs then die at their last forward use; the clones live from just
 * before the backward needs them (the schedule places a recompute op when
 * the backward cannot go on without it) to their last backward use. Same
 * kernels on the same inputs: the step's results are bit-identical.
 *
 * What may be recomputed (from the op table, so fused ops qualify by the
 * same rules):
 *   - a non-view forward op of the layer that overwrites its outputs, none
 *     of whose outputs is read by a forward op of another layer (or outside
 *     the layers): those outputs are the layer's checkpoint (its output, the
 *     next layer's input), always kept (a fused residual add reads its
 *     operands in the add's layer, add_layer);
 *   - RC_FULL: every such op; RC_SELECTIVE: those that are cheap per element
 *     (rc_cheap: elementwise, normalisation, softmax, permutes), the
 *     batched matmuls (attention scores and attention times values), whose
 *     outputs grow with T^2 or are small — Megatron's selective recompute —
 *     and the linear layers that widen their input (rc_widening: GPT-2's qkv
 *     and fc, Llama's gate and up): the weight gradient keeps their input in
 *     the backward anyway, so the rerun costs FLOPs and no memory and drops
 *     an output N/K times that input. The other linear layers' outputs stay.
 * Only ops whose outputs the backward (or another clone) reads are cloned;
 * a fused residual add + layernorm across layers as the layernorm of the
 * kept sum (ln_only).
 * An input of a clone that is not recomputed stays alive until the clone
 * runs (it becomes a checkpoint); under zero3 a clone reads the weights the
 * backward gathers, not the forward's gathered copy (split_backward_gather),
 * which dies after the forward as without recomputation.
 * Run after autodiff, fuse, precision and split_updates, before schedule.
 */
#include <string.h>

#include "passes.h"

int graph_layers(const Graph *g)
{
    int n = 0;
    for (int o = 0; o < g->nops; o++)
        if (g->ops[o].layer + 1 > n)
            n = g->ops[o].layer + 1;
    return n;
}

int rc_cheap(const Graph *g, const Op *op)
{
    if (op_info[op->kind].cls == OPC_VIEW || op->nout < 1)
        return 0;
    double n = (double)g->t[op->out[0]].numel;
    if (op->kind == OP_MATMUL || op->kind == OP_MATMUL_BIAS) {
        long b, M, N, K;
        op_matmul_geom(g, op, &b, &M, &N, &K);
        return b > 1;            /* attention's batched matmuls */
    }
    return n > 0 && op_flops(g, op) <= 16.0 * n;
}

/* A linear layer whose output is wider than its input (N > K: an expanding
 * projection, as GPT-2's qkv and fc or Llama's gate and up): its input has to
 * be at hand in the backward anyway (the weight gradient reads it, kept or
 * recomputed), so rerunning the matmul there costs its FLOPs and no memory,
 * and drops an output N/K times that input's size. */
static int rc_widening(const Graph *g, const Op *op)
{
    if (op->kind != OP_MATMUL && op->kind != OP_MATMUL_BIAS && op->kind != OP_MATMUL_BIAS_GELU)
        return 0;
    long b, M, N, K;
    op_matmul_geom(g, op, &b, &M, &N, &K);
    return b == 1 && N > K;
}

typedef struct RC {
    Graph *g;
    int *map;        /* tensor id -> its recomputed twin, -1 */
    int nmap;
} RC;

static void grow_map(RC *rc)
{
    if (rc->nmap >= rc->g->nt)
        return;
    rc->map = xrealloc(rc->map, (size_t)rc->g->nt * sizeof(int));
    for (int t = rc->nmap; t < rc->g->nt; t++)
        rc->map[t] = -1;
    rc->nmap = rc->g->nt;
}

/* The twin of t: a recomputed root, or a view of a recomputed root made on
 * demand (same offset and shape); t itself when nothing above it is. */
static int twin(RC *rc, int t)
{
    grow_map(rc);
    if (rc->map[t] >= 0)
        return rc->map[t];
    Graph *g = rc->g;
    if (g->t[t].view_of < 0)
        return t;
    int p = twin(rc, g->t[t].view_of);
    if (p == g->t[t].view_of)
        return t;
    Tensor x = g->t[t];
    char *name = xasprintf("%s.re", x.name);
    int v = graph_add_tensor(g, name, x.dtype, x.rank, x.shape, x.kind, x.loc);
    free(name);
    g->t[v].region = g->t[p].region;
    g->t[v].view_of = p;
    g->t[v].view_offset = x.view_offset;
    grow_map(rc);
    rc->map[t] = v;
    return v;
}

/* 1 when op o may be recomputed (see the file comment); cross[r]: root r is
 * read by a forward op of another layer than its producer's. */
static int eligible(const Graph *g, const Op *op, const char *cross)
{
    if (op->dead || op->phase != PH_FWD || op->layer < 0 || op_info[op->kind].cls == OPC_VIEW ||
        op->nout < 1 || op->acc)
        return 0;
    for (int i = 0; i < op->nout; i++) {
        const Tensor *t = &g->t[op->out[i]];
        if (t->view_of >= 0 || t->region != RG_ARENA || t->kind != TK_ACTIVATION || cross[t->id] ||
            t->id == g->loss)
            return 0;
    }
    return 1;
}

/* The layer of op's residual add when op is a fused residual add +
 * layernorm (fuse_layernorm.c), else op's layer: the later layer of the
 * add's operands' producers (the one that made the residual branch). GPT-2's
 * block ends with a residual add fused with the next block's first
 * layernorm, which gives the op its layer, so the add belongs to the layer
 * below. */
static int add_layer(const Graph *g, const Op *op)
{
    if (op->kind != OP_ADD_LAYERNORM && op->kind != OP_ADD_RMSNORM)
        return op->layer;
    int l = -1;
    for (int i = 0; i < 2; i++) {
        int p = g->t[graph_root(g, op->in[i], NULL)].producer;
        if (p >= 0 && g->ops[p].layer > l)
            l = g->ops[p].layer;
    }
    return l;
}

/* 1 when op is a fused residual add + layernorm whose add belongs to
 * another layer (add_layer). Its sum x is that layer's output, the
 * checkpoint a full recompute keeps: op is recomputed as the layernorm alone
 * of the kept x (recomputing the add would keep both of its operands from
 * the layer below alive instead). A fused op inside one layer is cloned
 * whole. */
static int ln_only(const Graph *g, const Op *op)
{
    return (op->kind == OP_ADD_LAYERNORM || op->kind == OP_ADD_RMSNORM) && add_layer(g, op) != op->layer;
}

/* The inputs of op's clone (in, returned: their count); see ln_only */
static int clone_inputs(const Graph *g, const Op *op, int *in)
{
    if (ln_only(g, op)) {   /* x, w (, bias) */
        in[0] = op->out[0], in[1] = op->in[2], in[2] = op->nin > 3 ? op->in[3] : -1;
        return op->nin - 1;
    }
    memcpy(in, op->in, (size_t)op->nin * sizeof *in);
    return op->nin;
}

void pass_recompute(Graph *g, const RecomputeChoice *choice, int nlayers)
{
    int nops = g->nops, nt = g->nt;
    char *cross = xcalloc((size_t)nt, 1), *pick = xcalloc((size_t)nops, 1);
    char *need = xcalloc((size_t)nt, 1);
    int nbg = nt, *bg = xmalloc((size_t)nbg * sizeof(int));   /* zero3: each shard's backward gather (split_backward_gather) */
    for (int t = 0; t < nbg; t++)
        bg[t] = -2;
    for (int o = 0; o < nops; o++) {
        const Op *op = &g->ops[o];
        if (op->dead || op->phase != PH_FWD)
            continue;
        for (int i = 0; i < op->nin; i++) {   /* a fused add's operands are read by its own layer */
            int r = graph_root(g, op->in[i], NULL), p = g->t[r].producer;
            if (p >= 0 && g->ops[p].layer != (i < 2 ? add_layer(g, op) : op->layer))
                cross[r] = 1;
        }
    }
    if (g->loss >= 0)
        cross[graph_root(g, g->loss, NULL)] = 1;
    for (int o = 0; o < nops; o++) {
        const Op *op = &g->ops[o];
        if (!eligible(g, op, cross) || op->layer >= nlayers)
            continue;
        RecomputeChoice c = choice[op->layer];
        pick[o] = c == RC_FULL || (c == RC_SELECTIVE && (rc_cheap(g, op) || rc_widening(g, op)));
    }
    /* needed: roots the backward reads, then (backwards) the inputs of needed picks */
    for (int o = 0; o < nops; o++) {
        const Op *op = &g->ops[o];
        if (!op->dead && op->phase == PH_BWD)
            for (int i = 0; i < op->nin; i++)
                need[graph_root(g, op->in[i], NULL)] = 1;
    }
    for (int o = nops - 1; o >= 0; o--) {
        const Op *op = &g->ops[o];
        int used = 0, in[IR_MAXIO];
        for (int i = 0; pick[o] && i < op->nout; i++)
            used |= need[op->out[i]];
        pick[o] = (char)used;
        for (int i = 0, n = used ? clone_inputs(g, op, in) : 0; i < n; i++)
            need[graph_root(g, in[i], NULL)] = 1;
    }
    /* clones: top layer first (the backward's order), forward order inside */
    RC rc = {.g = g};
    grow_map(&rc);
    int *order = xmalloc(((size_t)nops + 1) * sizeof *order), norder = 0;   /* the picked ops by layer, top first */
    int *count = xcalloc((size_t)nlayers + 1, sizeof *count);
    for (int o = 0; o < nops; o++)
        if (pick[o] && g->ops[o].layer >= 0 && g->ops[o].layer < nlayers)
            count[g->ops[o].layer]++;
    for (int l = nlayers - 1, at = 0; l >= 0; l--) {   /* count[l]: where layer l's ops start */
        int c = count[l];
        count[l] = at;
        at += c;
        norder = at;
    }
    for (int o = 0; o < nops; o++)
        if (pick[o] && g->ops[o].layer >= 0 && g->ops[o].layer < nlayers)
            order[count[g->ops[o].layer]++] = o;
    free(count);
    for (int k = 0; k < norder; k++) {
        int o = order[k];
        {
            Op op = g->ops[o];        /* a copy: adding ops moves g->ops */
            int in[IR_MAXIO], out[IR_MAXIO], kind = op.kind;
            op.nin = clone_inputs(g, &op, in);
            if (ln_only(g, &op)) {   /* the layernorm (rmsnorm) alone, of the kept sum */
                kind = op.kind == OP_ADD_RMSNORM ? OP_RMSNORM : OP_LAYERNORM;
                memmove(op.out, op.out + 1, (size_t)(op.nout - 1) * sizeof op.out[0]);
                op.nout--;
            }
            for (int i = 0; i < op.nin; i++)   /* zero3: weights gathered for the backward */
                in[i] = split_backward_gather(g, twin(&rc, in[i]), bg, nbg);
            for (int i = 0; i < op.nout; i++) {
                Tensor x = g->t[op.out[i]];
                char *name = xasprintf("%s.re", x.name);
                out[i] = graph_add_tensor(g, name, x.dtype, x.rank, x.shape, x.kind, x.loc);
                free(name);
                g->t[out[i]].region = RG_ARENA;
                grow_map(&rc);
                rc.map[op.out[i]] = out[i];
            }
            char *name = xasprintf("re.%s", op.name);
            int id = graph_add_op(g, kind, name, in, op.nin, out, op.nout, op.loc);
            free(name);
            Op *c = &g->ops[id];
            memcpy(c->attr, op.attr, sizeof c->attr);
            memcpy(c->list, op.list, sizeof c->list);
            c->nlist = op.nlist;
            c->phase = PH_RECOMPUTE;
            c->layer = op.layer;
        }
    }
    free(order);
    /* the backward reads the twins */
    for (int o = 0; o < nops; o++) {
        if (g->ops[o].dead || g->ops[o].phase != PH_BWD)
            continue;
        for (int i = 0; i < g->ops[o].nin; i++) {
            int t = twin(&rc, g->ops[o].in[i]);
            g->ops[o].in[i] = t;
        }
    }
    graph_relink(g);
    free(rc.map);
    free(cross);
    free(pick);
    free(need);
    free(bg);
}
