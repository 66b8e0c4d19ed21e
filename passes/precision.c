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
 */
#include "passes.h"

/* 1 when tensor t stays fp32 (its storage root is kept, or not fp32 at all) */
static int keep_f32(const Graph *g, const char *keep, int t)
{
    int r = graph_root(g, t, NULL);
    return keep[r] || g->t[r].dtype != DT_F32;
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
}
