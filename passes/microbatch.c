/* microbatch.c — gradient accumulation over K micro-batches.
 *
 * The driver builds the graph with B/K rows (the micro-batch); this pass
 * makes its step run K times per optimizer update:
 *   - g->micro_batches = K. The emitted step is run K times by the program
 *     (ctx->micro = 0..K-1, each on its slice of B/K rows of the batch); the
 *     optimizer phase runs only with the last one, so with the fused-opt
 *     schedule each update follows the last micro-batch's gradient write.
 *   - The loss seed (d loss = 1) becomes 1/K: each micro-batch's loss is the
 *     mean over its rows, so the parameter gradients summed over the K
 *     micro-batches are those of the mean loss over all B rows.
 *   - Parameter gradients accumulate across micro-batches: code generation
 *     turns an op's first (overwriting) write of a parameter gradient into an
 *     accumulating one when ctx->micro > 0 and runs the zero-fills of unused
 *     gradient bytes only for micro-batch 0 (codegen/emit_common.c).
 *   - The gradients must survive from one micro-batch to the next, so they
 *     stay in the persistent grads region (passes/schedule.c keeps them there
 *     when K > 1; plan_check verifies it).
 * Run after autodiff, before schedule.
 */
#include "passes.h"

void pass_micro_batches(Graph *g, int k)
{
    if (k <= 1)
        return;
    g->micro_batches = k;
    int dl = g->loss >= 0 ? g->t[g->loss].grad : -1;
    if (dl < 0)
        IR_BUG("micro-batches: the loss has no gradient (run after autodiff)");
    int root = graph_root(g, dl, NULL), seeds = 0;
    for (int o = 0; o < g->nops; o++) {
        Op *op = &g->ops[o];
        if (op->kind == OP_FILL && op->nout == 1 && graph_root(g, op->out[0], NULL) == root) {
            op->attr[0] /= k;
            seeds++;
        }
    }
    if (seeds != 1)
        IR_BUG("micro-batches: expected one seed of d loss, found %d", seeds);
}
