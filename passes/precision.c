/* precision.c — mixed precision: bf16 activations and activation gradients;
 * fp32 master weights, parameter gradients and optimizer state (the weight
 * gradient matmuls accumulate bf16 products into fp32).
 *
 * Every arena tensor becomes bf16 except layernorm's saved mean/rstd, the
 * scalar loss and its gradient, and parameter gradients. Each parameter gets a bf16 copy (named
 * "<param>.bf16", in the params region after all fp32 masters, so an llm.c
 * checkpoint still loads with one read); every op except the AdamW update
 * reads the copy. The update writes it (adamw_bf16: the new weights rounded
 * to bf16 in the same pass, as llm.c), so no step casts a parameter; a cast
 * op (copy, fp32 -> bf16) per parameter remains, run only when the host has
 * written the masters (init, load, gradcheck: GC_PHASE_PARAMS, see
 * op_param_refresh). Byte sizes and view offsets follow the new dtypes,
 * so the plan accounts the right bytes. Runs after autodiff, before schedule.
 *
 * Scalars stay fp32 too (the losses of cross_entropy, whose kernels write and
 * read them as float, and whatever adds or scales them). Then every kernel
 * gets the dtypes its runtime function takes (legalize): where an operand's
 * dtype differs, a cast (an elementwise copy, fp32 <-> bf16) is inserted
 * next to the op, in creation order:
 * - a float slot (reduce_rows' and embedding_bwd's sums, layernorm_bwd's dw
 *   and db, rmsnorm_bwd's dw: parameter gradients by design) that writes a
 *   bf16 tensor (an activation's gradient: x * u, u an activation broadcast
 *   over x) writes an fp32 temporary, copied into the tensor (with the op's
 *   accumulation);
 * - a kernel of one dtype (permute, softmax, causal_mask, rope, concat,
 *   narrow, repeat, mean and their backwards, embedding, fill) runs in its
 *   output's dtype; an input of the other dtype is cast first: mean of a bf16
 *   vector into the fp32 loss, mean_bwd of the fp32 dloss, a permute or
 *   narrow writing a parameter's fp32 gradient from a bf16 one.
 */
#include <stdio.h>

#include "passes.h"

/* 1 when tensor t stays fp32 (its storage root is kept, or not fp32 at all) */
static int keep_f32(const Graph *g, const char *keep, int t)
{
    int r = graph_root(g, t, NULL);
    return keep[r] || g->t[r].dtype != DT_F32;
}

/* 1 when output i of op must be fp32 whatever it holds (its kernel writes float) */
static int float_out(const Op *op, int i)
{
    switch (op->kind) {
    case OP_REDUCE_ROWS: case OP_EMBEDDING_BWD: case OP_CROSS_ENTROPY: return i == 0;
    case OP_LAYERNORM_BWD: return i == 1 || i == 2;
    case OP_RMSNORM_BWD: return i == 1;
    default: return 0;
    }
}

/* kernels whose runtime function takes one dtype for every float operand */
static int uniform_kernel(OpKind k)
{
    switch (k) {
    case OP_PERMUTE: case OP_SOFTMAX: case OP_SOFTMAX_BWD: case OP_CAUSAL_MASK: case OP_CAUSAL_MASK_BWD:
    case OP_ROPE: case OP_ROPE_BWD: case OP_CONCAT: case OP_NARROW: case OP_NARROW_BWD: case OP_REPEAT:
    case OP_REPEAT_BWD: case OP_MEAN: case OP_MEAN_BWD: case OP_EMBEDDING: case OP_FILL:
        return 1;
    default:
        return 0;
    }
}

/* a temporary like t in dtype dt, for a cast next to op o */
static int cast_temp(Graph *g, int t, DType dt, int o)
{
    char *name = xasprintf("%s.%s.%s", g->t[t].name, dtype_name(dt), g->ops[o].name);
    TensorKind k = g->t[t].kind == TK_ACTIVATION ? TK_ACTIVATION : TK_ACTGRAD;
    int v = graph_add_tensor(g, name, dt, g->t[t].rank, g->t[t].shape, k, g->ops[o].loc);
    free(name);
    return v;
}

/* a copy op from -> to at position pos, in op o's phase and layer */
static void insert_cast(Graph *g, int pos, int from, int to, int acc, int o)
{
    char *name = xasprintf("cast.%s", g->t[to].name);
    Phase ph = g->ops[o].phase;
    int layer = g->ops[o].layer;
    graph_insert_op(g, pos, OP_COPY, name, &from, 1, &to, 1, g->ops[o].loc);
    free(name);
    g->ops[pos].acc = acc;
    g->ops[pos].phase = ph;
    g->ops[pos].layer = layer;
}

/* Inserts the casts of the header's last paragraph; from the last op back,
 * so that an insertion moves only ops already done. */
static void legalize(Graph *g)
{
    for (int o = g->nops - 1; o >= 0; o--) {
        if (g->ops[o].dead || op_info[g->ops[o].kind].cls != OPC_KERNEL)
            continue;
        for (int i = 0; i < g->ops[o].nout; i++) {
            int t = g->ops[o].out[i];
            if (t < 0 || !float_out(&g->ops[o], i) || g->t[t].dtype != DT_BF16)
                continue;
            int tmp = cast_temp(g, t, DT_F32, o), acc = g->ops[o].acc >> i & 1, first = g->t[t].producer == o;
            g->ops[o].out[i] = tmp;
            g->ops[o].acc &= ~(1 << i);
            g->t[tmp].producer = o;
            insert_cast(g, o + 1, tmp, t, acc, o);
            if (first)
                g->t[t].producer = o + 1;
        }
        if (!uniform_kernel(g->ops[o].kind) || g->ops[o].nout < 1)
            continue;
        DType want = g->t[g->ops[o].out[0]].dtype;
        for (int i = 0; i < g->ops[o].nin; i++) {
            int t = g->ops[o].in[i];
            if (g->t[t].dtype == want || g->t[t].dtype == DT_I32)
                continue;
            int tmp = cast_temp(g, t, want, o);
            graph_unlink_op(g, o);
            g->ops[o].in[i] = tmp;
            graph_link_op(g, o);
            insert_cast(g, o, t, tmp, 0, o);   /* o moves to o + 1 */
            o++;
            g->t[tmp].producer = o - 1;
        }
    }
}

void pass_precision(Graph *g)
{
    int nt0 = g->nt;
    char *keep = xcalloc((size_t)nt0, 1);
    for (int i = 0; i < g->nparams; i++) {
        const Tensor *p = &g->t[g->params[i]];
        keep[p->id] = 1;
        keep[p->opt_m] = keep[p->opt_v] = 1;
        keep[p->grad] = 1;
    }
    keep[g->loss] = 1;
    for (int t = 0; t < nt0; t++)      /* scalars: losses and what adds or scales them */
        if (g->t[t].rank == 0)
            keep[graph_root(g, t, NULL)] = 1;
    if (g->t[g->loss].grad >= 0)
        keep[graph_root(g, g->t[g->loss].grad, NULL)] = 1;
    for (int o = 0; o < g->nops; o++)
        if (g->ops[o].kind == OP_LAYERNORM)
            keep[g->ops[o].out[1]] = keep[g->ops[o].out[2]] = 1;
        else if (g->ops[o].kind == OP_ADD_LAYERNORM && !g->ops[o].dead)   /* fuse_layernorm.c: mean, rstd */
            keep[g->ops[o].out[2]] = keep[g->ops[o].out[3]] = 1;
        else if (g->ops[o].kind == OP_RMSNORM && !g->ops[o].dead)
            keep[g->ops[o].out[1]] = 1;      /* rstd */
        else if (g->ops[o].kind == OP_ADD_RMSNORM && !g->ops[o].dead)
            keep[g->ops[o].out[2]] = 1;      /* rstd */
        else if ((g->ops[o].kind == OP_ATTENTION || g->ops[o].kind == OP_ATTENTION_GQA) && !g->ops[o].dead)
            keep[g->ops[o].out[1]] = 1;      /* lse */
        else if (g->ops[o].kind == OP_CLASSIFIER && !g->ops[o].dead)
            keep[g->ops[o].out[4]] = keep[g->ops[o].out[5]] = 1;   /* rowloss: N doubles; the --sample row */
    /* the bf16 copies of the parameters */
    int *copy = xmalloc((size_t)nt0 * sizeof(int));   /* master id -> copy id */
    for (int i = 0; i < nt0; i++)
        copy[i] = -1;
    for (int i = 0; i < g->nparams; i++) {
        int p = g->params[i];
        char *name = xasprintf("%s.bf16", g->t[p].name);
        int c = graph_add_tensor(g, name, DT_BF16, g->t[p].rank, g->t[p].shape, TK_PARAM, g->t[p].loc);
        free(name);
        copy[p] = c;
        int id = graph_add_op(g, OP_COPY, g->t[c].name, &p, 1, &c, 1, g->t[p].loc);
        g->ops[id].phase = PH_FWD;
    }
    /* views of masters become views of the copies */
    for (int t = 0; t < nt0; t++) {
        Tensor *x = &g->t[t];
        if (x->view_of >= 0 && copy[graph_root(g, t, NULL)] >= 0 && x->region == RG_PARAMS) {
            if (copy[x->view_of] >= 0)
                x->view_of = copy[x->view_of];
            x->view_offset = x->view_offset / 4 * 2;
            x->dtype = DT_BF16;
            x->bytes = (size_t)x->numel * 2;
        }
    }
    /* everything else that is fp32 and not kept becomes bf16; views follow
       their roots, and their byte offsets halve */
    char *conv = xcalloc((size_t)nt0, 1);
    for (int t = 0; t < nt0; t++) {
        const Tensor *x = &g->t[t];
        conv[t] = x->dtype == DT_F32 && x->region != RG_PARAMS && x->region != RG_OPTSTATE && !keep_f32(g, keep, t);
    }
    for (int t = 0; t < nt0; t++) {
        Tensor *x = &g->t[t];
        if (!conv[t])
            continue;
        if (x->view_of >= 0)
            x->view_offset = x->view_offset / 4 * 2;
        x->dtype = DT_BF16;
        x->bytes = (size_t)x->numel * 2;
    }
    free(conv);
    /* the update writes the copy too */
    for (int o = 0; o < g->nops; o++) {
        Op *op = &g->ops[o];
        if (op->kind == OP_ADAMW && copy[op->in[0]] >= 0) {
            op->kind = OP_ADAMW_BF16;
            op->in[op->nin++] = copy[op->in[0]];
        }
    }
    /* ops read the copies (AdamW and the casts keep the masters) */
    for (int o = 0; o < g->nops; o++) {
        Op *op = &g->ops[o];
        if (op->kind == OP_ADAMW || op->kind == OP_ADAMW_BF16 || (op->kind == OP_COPY && op->out[0] >= nt0))
            continue;
        for (int i = 0; i < op->nin; i++)
            if (op->in[i] < nt0 && copy[op->in[i]] >= 0)
                op->in[i] = copy[op->in[i]];
    }
    graph_relink(g);
    free(copy);
    free(keep);
    legalize(g);
}
