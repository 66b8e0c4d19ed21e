/* split_updates.c — per-layer optimizer updates for the fused-opt schedule.
 *
 * A layer-stacked parameter (qkvw: [L, 3C, C]) gets its gradient written
 * layer by layer, through disjoint views of one gradient root. Split that
 * root into one root per view and the single AdamW update into one update per
 * slice: each layer's gradient then lives only from its backward to its
 * update, and the planner overlaps the layers' gradients instead of keeping
 * all of them (the fused-opt schedule places each update right after its
 * slice's last use). Gradient roots that ops also use whole stay as they are.
 * Nothing with micro-batches (their gradients stay in the grads region).
 * Each slice's update gets `layer` = the loop iteration of the ops that
 * write its gradient (the latest, -1 outside loops: a layer stack's slice l
 * is written by layer l's backward), so the schedule and codegen can run one
 * layer's updates as one multi-tensor launch; an adamw_bf16's bf16 copy is
 * sliced the same way. (Not the slice's index: a parameter sliced into rows
 * outside any loop is no layer stack, and numbering its slices as layers
 * made graph_layers() count layers the graph does not have.)
 * Run after autodiff (and precision), before schedule.
 */
#include "passes.h"

/* 1 when some op other than `except` names tensor t itself */
static int used_directly(const Graph *g, int t, int except)
{
    for (int o = 0; o < g->nops; o++) {
        const Op *op = &g->ops[o];
        if (o == except)
            continue;
        for (int i = 0; i < op->nin; i++)
            if (op->in[i] == t)
                return 1;
        for (int i = 0; i < op->nout; i++)
            if (op->out[i] == t)
                return 1;
    }
    return 0;
}

/* a view of base at the same element offset as `like` is in its own root */
static int view_like(Graph *g, int base, size_t elem_off, const Tensor *like, const char *prefix)
{
    char *name = xasprintf("%s%s", prefix, like->name);
    int v = graph_add_tensor(g, name, g->t[base].dtype, like->rank, like->shape, g->t[base].kind, like->loc);
    free(name);
    g->t[v].region = g->t[base].region;
    g->t[v].view_of = base;
    g->t[v].view_offset = elem_off * dtype_size(g->t[base].dtype);
    return v;
}

/* layers[k] = the latest op->layer among the ops that write views[k] (a view
 * of G) or a view of it, -1 if none; one pass over the ops (a pass per view
 * was quadratic in the layers: 80 s under the fuzzer for 1024 of them) */
static void writer_layers(const Graph *g, int G, const int *views, int nv, int *layers)
{
    int *at = xmalloc((size_t)g->nt * sizeof(int));   /* tensor -> its index in views, or -1 */
    for (int t = 0; t < g->nt; t++)
        at[t] = -1;
    for (int k = 0; k < nv; k++)
        at[views[k]] = k, layers[k] = -1;
    for (int o = 0; o < g->nops; o++) {
        const Op *op = &g->ops[o];
        for (int i = 0; i < op->nout && !op->dead; i++) {
            int u = op->out[i];
            while (u >= 0 && at[u] < 0 && g->t[u].view_of >= 0 && g->t[u].view_of != G)
                u = g->t[u].view_of;
            if (u >= 0 && at[u] >= 0 && op->layer > layers[at[u]])
                layers[at[u]] = op->layer;
        }
    }
    free(at);
}

static void split_param(Graph *g, int p, int adamw)
{
    int G = g->t[p].grad;
    if (G < 0 || g->t[G].view_of >= 0 || used_directly(g, G, adamw) ||
        (g->ops[adamw].nin > 4 && g->t[g->ops[adamw].in[4]].view_of >= 0))
        return;
    int nt0 = g->nt, *views = xmalloc((size_t)nt0 * sizeof(int)), nv = 0;
    size_t covered = 0;
    for (int t = 0; t < nt0; t++)
        if (g->t[t].view_of == G) {
            /* disjoint from the views found so far */
            for (int k = 0; k < nv; k++) {
                const Tensor *a = &g->t[views[k]], *b = &g->t[t];
                if (a->view_offset < b->view_offset + b->bytes && b->view_offset < a->view_offset + a->bytes) {
                    free(views);
                    return;
                }
            }
            views[nv++] = t;
            covered += g->t[t].bytes;
        }
    if (nv < 2 || covered != g->t[G].bytes) {
        free(views);
        return;
    }
    Op proto = g->ops[adamw];
    int pcopy = proto.nin > 4 ? proto.in[4] : -1;   /* adamw_bf16: the bf16 copy */
    int *layers = xmalloc((size_t)nv * sizeof(int));
    writer_layers(g, G, views, nv, layers);
    for (int k = 0; k < nv; k++) {
        Tensor *v = &g->t[views[k]];
        size_t elem = v->view_offset / dtype_size(v->dtype);
        int layer = layers[k];
        v->view_of = -1;            /* its own root now */
        v->view_offset = 0;
        v->region = RG_ARENA;
        const Tensor like = *v;
        int pv = view_like(g, p, elem, &like, "p.");
        int mv = view_like(g, g->t[p].opt_m, elem, &like, "m.");
        int vv = view_like(g, g->t[p].opt_v, elem, &like, "v.");
        int in[5] = {pv, views[k], mv, vv, pcopy >= 0 ? view_like(g, pcopy, elem, &like, "c.") : -1};
        if (k == 0) {               /* the original update becomes the first slice's */
            Op *op = &g->ops[adamw];
            for (int i = 0; i < proto.nin; i++)
                op->in[i] = in[i];
            op->layer = layer;
        } else {
            char *name = xasprintf("%s.%d", proto.name, k);
            int id = graph_add_op(g, proto.kind, name, in, proto.nin, NULL, 0, proto.loc);
            free(name);
            g->ops[id].phase = PH_OPT;
            g->ops[id].attr[0] = proto.attr[0];
            g->ops[id].layer = layer;
        }
    }
    free(layers);
    free(views);
}

void pass_split_updates(Graph *g)
{
    if (g->micro_batches > 1)   /* gradients accumulate in the grads region: nothing to gain */
        return;
    int nops = g->nops;
    for (int o = 0; o < nops; o++)
        if (g->ops[o].kind == OP_ADAMW || g->ops[o].kind == OP_ADAMW_BF16)
            split_param(g, g->ops[o].in[0], o);
    graph_relink(g);
}
