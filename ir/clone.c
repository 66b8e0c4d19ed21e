/* clone.c — a deep copy of a graph, so that a pass pipeline can be run
 * several times from one prefix (the budget search lowers each micro-batch
 * count once and plans each recompute choice on a copy). */
#include <string.h>

#include "ir.h"

static void *dup_array(const void *p, size_t n, size_t elem)
{
    if (!p || !n)
        return NULL;
    void *q = xmalloc(n * elem);
    memcpy(q, p, n * elem);
    return q;
}

Graph *graph_clone(const Graph *g)
{
    Graph *c = graph_new(g->file);
    Tensor *t = c->t;
    Op *ops = c->ops;
    int capt = c->capt, capops = c->capops;
    *c = *g;                                  /* scalars and borrowed strings */
    c->t = t, c->ops = ops, c->capt = capt, c->capops = capops;
    store_commit(c->t, sizeof *c->t, IR_MAX_TENSORS, &c->capt, g->nt);
    store_commit(c->ops, sizeof *c->ops, IR_MAX_OPS, &c->capops, g->nops);
    if (g->nt)
        memcpy(c->t, g->t, (size_t)g->nt * sizeof *g->t);
    if (g->nops)
        memcpy(c->ops, g->ops, (size_t)g->nops * sizeof *g->ops);
    size_t len = 0;   /* every name in one block (graph.c frees the others one by one) */
    for (int i = 0; i < g->nt; i++)
        len += strlen(g->t[i].name) + 1;
    for (int i = 0; i < g->nops; i++)
        len += strlen(g->ops[i].name) + 1;
    c->name_block = xmalloc(len + 1);
    c->name_block_len = len;
    char *p = c->name_block;
    for (int i = 0; i < g->nt + g->nops; i++) {
        char **name = i < g->nt ? &c->t[i].name : &c->ops[i - g->nt].name;
        size_t n = strlen(*name) + 1;
        memcpy(p, *name, n);
        *name = p;
        p += n;
    }
    for (int i = 0; i < g->nt; i++)
        c->t[i].consumers = dup_array(g->t[i].consumers, (size_t)g->t[i].nconsumers, sizeof(int));
    c->dims = dup_array(g->dims, (size_t)g->ndims, sizeof *g->dims);
    for (int i = 0; i < g->ndims; i++)
        c->dims[i].name = xstrdup(g->dims[i].name);
    c->params = dup_array(g->params, (size_t)g->nparams, sizeof(int));
    c->psrc = dup_array(g->psrc, (size_t)g->nparams, sizeof *g->psrc);
    for (int i = 0; c->psrc && i < g->nparams; i++) {
        c->psrc[i].name = xstrdup(g->psrc[i].name);
        for (int k = 0; k < g->psrc[i].nalts; k++)
            c->psrc[i].alt[k].name = xstrdup(g->psrc[i].alt[k].name);
    }
    c->inputs = dup_array(g->inputs, (size_t)g->ninputs, sizeof(int));
    c->sched = dup_array(g->sched, (size_t)g->nsched, sizeof(int));
    c->split_report = g->split_report ? xstrdup(g->split_report) : NULL;
    return c;
}
