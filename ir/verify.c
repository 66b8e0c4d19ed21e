/* verify.c — the IR verifier: internal consistency of a graph, run after
 * building and after every pass in debug runs. A violation is a compiler bug
 * (IR_BUG: file:line and abort), never a user error. */
#include <string.h>

#include "ir.h"

static void verify_tensor(const Graph *g, const Tensor *t)
{
    long numel = 1;
    for (int i = 0; i < t->rank; i++) {
        if (t->shape[i] < 1)
            IR_BUG("tensor %%%d %s: dimension %d is %ld", t->id, t->name, i, t->shape[i]);
        numel *= t->shape[i];
    }
    if (numel != t->numel || t->bytes != (size_t)numel * dtype_size(t->dtype))
        IR_BUG("tensor %%%d %s: numel/bytes inconsistent with its shape", t->id, t->name);
    if (t->producer >= g->nops)
        IR_BUG("tensor %%%d %s: producer %d out of range", t->id, t->name, t->producer);
    if (t->producer >= 0) {
        const Op *p = &g->ops[t->producer];
        int found = 0;
        for (int i = 0; i < p->nout; i++)
            found |= p->out[i] == t->id;
        if (!found)
            IR_BUG("tensor %%%d %s: its producer %s does not output it", t->id, t->name, p->name);
    }
    if (t->view_of >= 0) {
        const Tensor *base = &g->t[t->view_of];
        if (t->view_of == t->id || t->view_offset + t->bytes > base->bytes)
            IR_BUG("tensor %%%d %s: view outside %%%d %s", t->id, t->name, base->id, base->name);
        if (base->region != t->region)
            IR_BUG("tensor %%%d %s: view in another region than its base", t->id, t->name);
    }
    for (int i = 0; i < t->nconsumers; i++) {
        const Op *c = &g->ops[t->consumers[i]];
        int found = 0;
        for (int k = 0; k < c->nin; k++)
            found |= c->in[k] == t->id;
        if (!found)
            IR_BUG("tensor %%%d %s: consumer %s does not read it", t->id, t->name, c->name);
    }
    if (t->grad >= 0 && (t->grad >= g->nt || g->t[t->grad].numel != t->numel))
        IR_BUG("tensor %%%d %s: bad gradient link", t->id, t->name);
}

static void verify_op(const Graph *g, const Op *op)
{
    const OpInfo *info = &op_info[op->kind];
    if (op->nin != info->nin || (info->nout >= 0 && op->nout != info->nout))
        IR_BUG("op %d %s: arity %d->%d, table says %d->%d", op->id, op->name, op->nin, op->nout, info->nin,
               info->nout);
    for (int i = 0; i < op->nin; i++)
        if (op->in[i] < 0 || op->in[i] >= g->nt)
            IR_BUG("op %d %s: input %d out of range", op->id, op->name, i);
    for (int i = 0; i < op->nout; i++)
        if (op->out[i] < 0 || op->out[i] >= g->nt)
            IR_BUG("op %d %s: output %d out of range", op->id, op->name, i);
    if (op->kind >= OP_FIRST_INTERNAL)
        return;
    /* primitive ops: the shape rule must reproduce the outputs */
    int nout, rank[IR_MAXIO];
    long shape[IR_MAXIO][IR_MAXRANK];
    DType dt[IR_MAXIO];
    char err[256];
    if (op_infer((Graph *)g, (Op *)op, &nout, rank, shape, dt, err, sizeof err) != 0)
        IR_BUG("op %d %s: %s", op->id, op->name, err);
    if (nout != op->nout)
        IR_BUG("op %d %s: %d outputs, shape rule says %d", op->id, op->name, op->nout, nout);
    for (int k = 0; k < nout; k++) {
        const Tensor *t = &g->t[op->out[k]];
        if (t->rank != rank[k] || memcmp(t->shape, shape[k], sizeof(long) * (size_t)rank[k]) != 0)
            IR_BUG("op %d %s: output %d shape differs from the shape rule", op->id, op->name, k);
    }
}

static void verify_schedule(const Graph *g)
{
    char *seen = xcalloc((size_t)g->nops, 1);
    for (int s = 0; s < g->nsched; s++) {
        int o = g->sched[s];
        if (o < 0 || o >= g->nops || seen[o]++)
            IR_BUG("schedule step %d: op %d out of range or scheduled twice", s, o);
        const Op *op = &g->ops[o];
        if (op->step != s)
            IR_BUG("op %d %s: step %d but scheduled at %d", o, op->name, op->step, s);
        for (int i = 0; i < op->nin; i++) {
            const Tensor *t = &g->t[op->in[i]];
            if (t->producer >= 0 && g->ops[t->producer].step >= s)
                IR_BUG("op %d %s reads %s before it is produced", o, op->name, t->name);
        }
    }
    for (int o = 0; o < g->nops; o++)
        if (!seen[o] && !g->ops[o].dead)
            IR_BUG("op %d %s is not scheduled", o, g->ops[o].name);
    free(seen);
}

static void verify_plan(const Graph *g)
{
    for (int i = 0; i < g->nt; i++) {
        const Tensor *t = &g->t[i];
        if (t->first < 0)
            continue;
        if (t->offset + t->bytes > g->region_bytes[t->region])
            IR_BUG("tensor %%%d %s lies outside region %s", i, t->name, region_name(t->region));
    }
}

void ir_verify(const Graph *g)
{
    for (int i = 0; i < g->nt; i++)   /* views in range (graph_roots follows them) */
        if (g->t[i].view_of >= g->nt)
            IR_BUG("tensor %%%d %s: view of %d, out of range", i, g->t[i].name, g->t[i].view_of);
    free(graph_roots(g, NULL));        /* IR_BUG when views form a cycle; linear in the tensors */
    for (int i = 0; i < g->nt; i++) {
        if (g->t[i].id != i)
            IR_BUG("tensor %d has id %d", i, g->t[i].id);
        verify_tensor(g, &g->t[i]);
    }
    for (int o = 0; o < g->nops; o++) {
        if (g->ops[o].id != o)
            IR_BUG("op %d has id %d", o, g->ops[o].id);
        verify_op(g, &g->ops[o]);
    }
    if (g->loss >= 0 && g->t[g->loss].rank != 0)
        IR_BUG("the loss is not a scalar");
    if (g->nsched)
        verify_schedule(g);
    if (g->region_bytes[RG_ARENA] || g->region_bytes[RG_PARAMS])
        verify_plan(g);
}
