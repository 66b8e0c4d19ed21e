/* liveness.c — first/last schedule step of every tensor (an analysis: fills
 * Tensor.first/last, changes nothing else).
 *
 * A use is any scheduled op reading or writing the tensor (an accumulating
 * output is both). A view's use is also a use of every tensor above it up to
 * its root, so a root lives while any of its views does, and a view lives
 * while its own sub-views do. Then:
 *   - persistent roots (tensor_persistent: every root of params, grads and
 *     optstate, and the host region's masters, gradient copies and
 *     moments) and their views' roots live for the whole schedule
 *     [0, nsched-1];
 *   - arena inputs (TK_INPUT) are live from step 0 (the host writes them
 *     before the step runs);
 *   - the loss and the --sample row (g->sample_logits) are live until the
 *     last step (the host reads them after the step);
 *   - an arena workspace that no op names (the runtime's scratch, such as the
 *     cuBLASLt workspace) is live for the whole schedule.
 * Tensors that nothing uses keep first = last = -1.
 */
#include "passes.h"

/* Extends the interval of t and of every tensor above it to cover step s. */
static void touch(Graph *g, int t, int s)
{
    for (; t >= 0; t = g->t[t].view_of) {
        Tensor *x = &g->t[t];
        if (x->first < 0 || s < x->first)
            x->first = s;
        if (s > x->last)
            x->last = s;
    }
}

/* Widens t (and its views' root chain) to [first, last]. */
static void widen(Graph *g, int t, int first, int last)
{
    touch(g, t, first);
    touch(g, t, last);
}

/* Each tensor's own uses, then (deepest views first) every interval widened
 * into its base's: the same as touching the whole chain at each use. */
void fill_liveness(Graph *g)
{
    for (int i = 0; i < g->nt; i++)
        g->t[i].first = g->t[i].last = -1;
    for (int s = 0; s < g->nsched; s++) {
        const Op *op = &g->ops[g->sched[s]];
        for (int i = 0; i < op->nin + op->nout; i++) {
            Tensor *x = &g->t[i < op->nin ? op->in[i] : op->out[i - op->nin]];
            if (x->first < 0)
                x->first = s;
            x->last = s;
        }
    }
    int *depth = xmalloc(((size_t)g->nt + 1) * sizeof *depth), maxd = 0;
    for (int i = 0; i < g->nt; i++)
        depth[i] = -1;
    for (int i = 0; i < g->nt; i++) {   /* memoized walks up (graph_roots checks for cycles) */
        int d = 0, t = i;
        while (depth[t] < 0 && g->t[t].view_of >= 0)
            if (t = g->t[t].view_of, ++d > g->nt)
                IR_BUG("tensor %%%d %s: views form a cycle", i, g->t[i].name);
        int base = depth[t] < 0 ? 0 : depth[t];
        for (int u = i; u >= 0 && depth[u] < 0; u = g->t[u].view_of, d--)
            depth[u] = base + d;
        maxd = depth[i] > maxd ? depth[i] : maxd;
    }
    int *start = xcalloc((size_t)maxd + 2, sizeof *start), *by = xmalloc(((size_t)g->nt + 1) * sizeof *by);
    for (int i = 0; i < g->nt; i++)
        start[depth[i] + 1]++;
    for (int d = 0; d < maxd; d++)
        start[d + 1] += start[d];
    for (int i = 0; i < g->nt; i++)
        by[start[depth[i]]++] = i;         /* by depth, ascending */
    for (int k = g->nt - 1; k >= 0; k--) {
        const Tensor *x = &g->t[by[k]];
        if (x->view_of < 0 || x->first < 0)
            continue;
        Tensor *p = &g->t[x->view_of];
        if (p->first < 0 || x->first < p->first)
            p->first = x->first;
        if (x->last > p->last)
            p->last = x->last;
    }
    free(start);
    free(by);
    free(depth);
    if (g->nsched == 0)
        return;
    int end = g->nsched - 1;
    for (int i = 0; i < g->nt; i++) {
        Tensor *t = &g->t[i];
        if (t->view_of >= 0)
            continue;
        if (tensor_persistent(t))
            t->first = 0, t->last = end;
        else if (t->kind == TK_INPUT)
            widen(g, i, 0, t->last < 0 ? 0 : t->last);
        else if (t->kind == TK_WORKSPACE && t->first < 0)
            widen(g, i, 0, end);
    }
    int out[2] = {g->loss, g->sample_logits};
    for (int k = 0; k < 2; k++)
        if (out[k] >= 0) {
            const Tensor *l = &g->t[out[k]];
            widen(g, out[k], l->first < 0 ? end : l->first, end);
        }
}
