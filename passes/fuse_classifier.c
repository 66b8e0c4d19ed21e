/* fuse_classifier.c — the classifier matmul and the cross-entropy loss, with
 * their backward, as one op that walks the rows in chunks (runtime
 * gc_classifier): the B*T x Vp logits and their gradient leave the plan, and
 * a chunk of R x Vp logits (a planned arena tensor, named "<logits>.chunk")
 * plus N row losses in double take their place.
 *
 * The pattern: loss = cross_entropy(matmul(x, w, tb=1), targets) where the
 * loss is the graph's loss, its gradient seed is a fill (1.0, or 1/K with K
 * micro-batches: the op's `seed`, which scales dx and dw), and the
 * logits are read by nothing but the cross-entropy and its backward. The
 * backward ops that die: the seed, cross_entropy_bwd and the two matmuls
 * reading the logits' gradient (dx = dlogits w, dw = dlogits^T x); the fused
 * op writes dx and dw itself (with their accumulate bits), in the forward
 * phase, since the loss and its gradient come out of the same pass over the
 * logits (dloss is the constant seed). A forward-only run (validation) therefore also
 * writes dx and dw, into storage the plan reserved for them.
 *
 * The chunk: R = min(N, rows) rows, rows = --classifier-chunk (default
 * 1024): at GPT-2's Vp = 50304 a chunk of 1024 rows is 196 MiB, against
 * 1.54 GiB of logits at B=8, T=1024, and a matmul of 1024 rows runs at full
 * GEMM speed. N <= rows: one chunk, the same work as unfused.
 *
 * Both targets (runtime/classifier_cpu.c, runtime/cuda/classifier_cuda.cu;
 * with --precision bf16 the chunk is bf16 and rowloss stays fp32 storage,
 * passes/precision.c).
 *
 * Sampling (train --sample): the program exposes no logits tensor, so the
 * op has a sixth output, "<logits>.row": one row of Vp logits (fp32, a
 * planned arena tensor of Vp*4 bytes, g->sample_logits: live to the end of
 * the step so the host can read it). A forward run with ctx->sample_row =
 * r+1 computes only row r's logits there (one 1 x C by C x Vp matmul,
 * emit_common.c), no loss, no dx or dw: the inference path is the forward
 * to the final norm, then one row's classifier.
 */
#include <string.h>

#include "passes.h"

/* the one bwd op (not dead) of `kind` that reads tensor t (through a view
 * chain up to t's root), or -1 */
static int reader(const Graph *g, int root, OpKind kind, int skip)
{
    for (int o = 0; o < g->nops; o++) {
        const Op *op = &g->ops[o];
        if (op->dead || op->kind != kind || op->phase != PH_BWD || o == skip)
            continue;
        for (int i = 0; i < op->nin; i++)
            if (graph_root(g, op->in[i], NULL) == root)
                return o;
    }
    return -1;
}

void pass_fuse_classifier(Graph *g, long rows)
{
    if (g->loss < 0 || rows < 1)
        return;
    int ce = g->t[g->loss].producer;
    if (ce < 0 || g->ops[ce].kind != OP_CROSS_ENTROPY || g->ops[ce].dead)
        return;
    int logits = g->ops[ce].in[0], targets = g->ops[ce].in[1];
    int mm = g->t[logits].producer;
    const Tensor *L = &g->t[logits];
    if (mm < 0 || g->ops[mm].kind != OP_MATMUL || g->ops[mm].dead || g->ops[mm].acc || L->view_of >= 0 ||
        g->ops[mm].attr[0] != 0 || g->ops[mm].attr[1] != 1)
        return;
    int x = g->ops[mm].in[0], w = g->ops[mm].in[1];
    if (g->t[w].rank != 2 || g->t[x].dtype != DT_F32)
        return;
    for (int t = 0; t < g->nt; t++)        /* nothing views the logits but the backward's 2-d view */
        if (g->t[t].view_of == logits)
            return;
    long Vp = g->t[w].shape[0], N = L->numel / Vp;
    /* the backward: seed fill 1.0 -> cross_entropy_bwd -> dx and dw matmuls */
    int dloss = g->t[g->loss].grad, dl = L->grad;
    if (dloss < 0 || dl < 0 || g->t[dloss].producer < 0)
        return;
    const Op *seed = &g->ops[g->t[dloss].producer];
    if (seed->kind != OP_FILL || !(seed->attr[0] > 0))   /* 1, or 1/K with K micro-batches */
        return;
    double dseed = seed->attr[0];
    int ceb = g->t[dl].producer;
    if (ceb < 0 || g->ops[ceb].kind != OP_CROSS_ENTROPY_BWD || g->ops[ceb].acc)
        return;
    int da = reader(g, dl, OP_MATMUL, ceb), db = reader(g, dl, OP_MATMUL, da);
    if (da < 0 || db < 0 || reader(g, dl, OP_MATMUL, -1) < 0)
        return;
    if (g->ops[da].attr[0] != 0)           /* da = dlogits w (no transpose of a) */
        { int t = da; da = db; db = t; }
    int dx = g->ops[da].out[0], dw = g->ops[db].out[0];
    if (graph_root(g, dw, NULL) != graph_root(g, g->t[w].grad, NULL) || g->t[x].grad != dx)
        return;
    /* every other reader of the logits, their gradient or dloss breaks the match */
    int dead[5] = {g->t[dloss].producer, ce, ceb, da, db};
    for (int o = 0; o < g->nops; o++) {
        const Op *op = &g->ops[o];
        if (op->dead || o == mm)
            continue;
        int ours = 0;
        for (int k = 0; k < 5; k++)
            ours |= o == dead[k];
        for (int i = 0; i < op->nin && !ours; i++) {
            int r = graph_root(g, op->in[i], NULL);
            if (r == logits || r == graph_root(g, dl, NULL) || r == dloss)
                return;
        }
    }
    int acc = (g->ops[da].acc & 1) << 1 | (g->ops[db].acc & 1) << 2;
    long R = N < rows ? N : rows;
    Loc loc = g->ops[mm].loc;
    long cs[2] = {R, Vp}, rs[2] = {N, 2};
    char *name = xasprintf("%s.chunk", L->name);
    int chunk = graph_add_tensor(g, name, DT_F32, 2, cs, TK_ACTIVATION, loc);
    free(name);
    name = xasprintf("%s.rowloss", L->name);
    int rowloss = graph_add_tensor(g, name, DT_F32, 2, rs, TK_ACTIVATION, loc);
    free(name);
    long ws[2] = {1, Vp};
    name = xasprintf("%s.row", L->name);
    int row = graph_add_tensor(g, name, DT_F32, 2, ws, TK_ACTIVATION, loc);
    free(name);
    double saved = 2.0 * (double)g->t[logits].numel - (double)R * (double)Vp - 2.0 * (double)N - (double)Vp;
    for (int k = 0; k < 5; k++)
        g->ops[dead[k]].dead = 1;
    /* the fused op takes the matmul's slot (before everything that reads dx or dw) */
    graph_rename_op(g, mm, xasprintf("%s.classifier", g->t[g->loss].name));
    Op *f = &g->ops[mm];
    f->kind = OP_CLASSIFIER;
    f->nin = 3, f->in[0] = x, f->in[1] = w, f->in[2] = targets;
    f->nout = 6, f->out[0] = g->loss, f->out[1] = dx, f->out[2] = dw, f->out[3] = chunk, f->out[4] = rowloss;
    f->out[5] = row;
    g->sample_logits = row;
    f->acc = acc;
    memset(f->attr, 0, sizeof f->attr);
    f->attr[0] = g->ops[ce].attr[0], f->attr[1] = (double)R, f->attr[2] = dseed;
    for (int t = 0; t < g->nt; t++)
        if (g->t[t].producer >= 0 && g->ops[g->t[t].producer].dead)
            g->t[t].producer = -1;
    g->t[logits].producer = -1;
    int outs[6] = {g->loss, dx, dw, chunk, rowloss, row};
    for (int k = 0; k < 6; k++)
        if (g->t[outs[k]].producer < 0)
            g->t[outs[k]].producer = mm;
    fuse_note(g, "classifier", saved);
    graph_relink(g);
}
