/* fuse_bgrad.c — the MLP's bias gradient folded into the backward's
 * matmul_dgelu (fuse_gelu.c):
 *   bwd  dpre, h' = matmul_dgelu(dy, w2, pre)      bwd  dpre, h', db = matmul_dgelu_bgrad(dy, w2, pre)
 *   bwd  db = reduce_rows(dpre)                →
 * where db (the fc bias gradient) is the column sums of the very dpre the
 * matmul writes: the reduce_rows reads dpre itself (not a view), writes db
 * whole (cols = dpre's last dimension) without accumulating, and nothing
 * else writes dpre's or db's bytes. On CUDA the op is cuBLASLt's DGELU_BGRAD
 * epilogue, which writes the bias gradient in the matmul (one launch per
 * layer less); on the CPU matmul_dgelu and gc_reduce_rows in one call, the
 * same arithmetic as unfused (bit-identical losses).
 *
 * Where the epilogue does not apply, the runtime keeps the column sum, so
 * the fusion is always correct and only sometimes a saving
 * (kernels_cuda.cu, matmul_dgelu_bgrad; ir/ops.c counts the launches alike):
 *   - the epilogue OVERWRITES the bias gradient. With micro-batches the
 *     program accumulates parameter gradients after the first micro-batch
 *     (acc bit 2 of the kernel call, codegen/emit_common.c), and then the
 *     runtime runs the DGELU epilogue and the accumulating column sum (no
 *     scratch vector and add kernel: that would cost the launch it saves);
 *   - bf16: the epilogue's bias gradient has D's type (bf16), the plan's
 *     parameter gradients are fp32 (summed in fp32 by the column sum), so
 *     bf16 programs keep the column sum;
 *   - the GELU epilogues' own conditions (aligned pre and db, N a multiple
 *     of 8, one batch), or no cuBLASLt algorithm.
 * Run after fuse_gelu, before precision (--no-fuse=bgrad turns it off).
 */
#include <stdlib.h>

#include "passes.h"

/* One output of a live op: its storage root and byte range. */
typedef struct Write { int op, root; size_t lo, hi; } Write;

static int write_cmp(const void *a, const void *b)
{
    const Write *p = a, *q = b;
    return (p->root > q->root) - (p->root < q->root);
}

/* The writes of all live ops, sorted by root (*n of them; caller frees). */
static Write *all_writes(const Graph *g, const int *root, const size_t *off, int *n)
{
    int cap = 0;
    for (int o = 0; o < g->nops; o++)
        cap += g->ops[o].dead ? 0 : g->ops[o].nout;
    Write *w = xmalloc(((size_t)cap + 1) * sizeof *w);
    *n = 0;
    for (int o = 0; o < g->nops; o++) {
        const Op *op = &g->ops[o];
        if (op->dead || op_info[op->kind].cls == OPC_VIEW)
            continue;
        for (int i = 0; i < op->nout; i++) {
            int t = op->out[i];
            w[(*n)++] = (Write){o, root[t], off[t], off[t] + g->t[t].bytes};
        }
    }
    qsort(w, (size_t)*n, sizeof *w, write_cmp);
    return w;
}

/* 1 when an op of w other than `except` writes bytes of tensor t (a
 * reduce_rows fused below keeps its entry: its write moved, it is still one) */
static int other_write(const Graph *g, const Write *w, int n, const int *root, const size_t *off, int t,
                       int except)
{
    int lo = 0, hi = n;   /* the first write of t's root */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (w[mid].root < root[t])
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t a = off[t], b = off[t] + g->t[t].bytes;
    for (int k = lo; k < n && w[k].root == root[t]; k++)
        if (w[k].op != except && w[k].lo < b && a < w[k].hi)
            return 1;
    return 0;
}

/* The reduce_rows that sums the rows of op's dpre into a bias gradient, or -1. */
static int bias_grad_sum(const Graph *g, const Op *op, const Write *w, int n, const int *root, const size_t *off)
{
    int dpre = op->out[0];
    const Tensor *d = &g->t[dpre];
    long N = d->rank ? d->shape[d->rank - 1] : 0;
    if (N <= 0 || other_write(g, w, n, root, off, dpre, op->id))
        return -1;
    for (int i = 0; i < d->nconsumers; i++) {
        const Op *rr = &g->ops[d->consumers[i]];
        if (rr->dead || rr->kind != OP_REDUCE_ROWS || rr->phase != PH_BWD || rr->acc || rr->in[0] != dpre)
            continue;
        int db = rr->out[0];
        if (g->t[db].numel != N || g->t[db].producer != rr->id ||
            other_write(g, w, n, root, off, db, rr->id))
            continue;
        return rr->id;
    }
    return -1;
}

void pass_fuse_bgrad(Graph *g)
{
    size_t *off;
    int *root = graph_roots(g, &off), n;
    Write *w = all_writes(g, root, off, &n);
    for (int o = 0; o < g->nops; o++) {
        Op *op = &g->ops[o];
        if (op->dead || op->kind != OP_MATMUL_DGELU || op->acc)
            continue;
        int r = bias_grad_sum(g, op, w, n, root, off);
        if (r < 0)
            continue;
        int db = g->ops[r].out[0];
        op->kind = OP_MATMUL_DGELU_BGRAD;
        op->nout = 3, op->out[2] = db;
        g->t[db].producer = o;
        g->ops[r].dead = 1;
        fuse_note(g, "bgrad", 0);
    }
    free(w);
    free(root);
    free(off);
    graph_relink(g);
}
