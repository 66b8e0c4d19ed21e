/* schedule.c — the final op order.
 *
 * plain:     forward ops, backward ops, then every optimizer update, each in
 *            creation order (creation order is a valid topological order).
 * fused-opt: forward and backward as above, but each parameter's AdamW update
 *            runs right after the last op that touches the parameter or its
 *            gradient, so updates overlap the rest of the backward pass.
 */
#include "passes.h"

/* the last op (in bwd order) that reads or writes parameter p, its gradient
 * or a view of either; -1 if none */
static void last_touch(const Graph *g, const int *order, int n, int *last_of_param)
{
    int *owner = xmalloc((size_t)g->nt * sizeof(int));  /* tensor -> param index or -1 */
    for (int t = 0; t < g->nt; t++)
        owner[t] = -1;
    for (int i = 0; i < g->nparams; i++) {
        owner[g->params[i]] = i;
        owner[g->t[g->params[i]].grad] = i;
        last_of_param[i] = -1;
    }
    for (int t = 0; t < g->nt; t++) {      /* views belong to their root's owner */
        int r = graph_root(g, t, NULL);
        owner[t] = owner[r];
    }
    for (int k = 0; k < n; k++) {
        const Op *op = &g->ops[order[k]];
        for (int i = 0; i < op->nin; i++)
            if (owner[op->in[i]] >= 0)
                last_of_param[owner[op->in[i]]] = k;
        for (int i = 0; i < op->nout; i++)
            if (owner[op->out[i]] >= 0)
                last_of_param[owner[op->out[i]]] = k;
    }
    free(owner);
}

void pass_schedule(Graph *g, ScheduleKind kind)
{
    free(g->sched);
    g->sched = xmalloc((size_t)g->nops * sizeof(int));
    g->nsched = 0;
    int *fb = xmalloc((size_t)g->nops * sizeof(int)), nfb = 0;
    int *opt = xmalloc((size_t)g->nops * sizeof(int)), nopt = 0;
    for (Phase ph = PH_FWD; ph <= PH_BWD; ph++)
        for (int o = 0; o < g->nops; o++)
            if (g->ops[o].phase == ph)
                fb[nfb++] = o;
    for (int o = 0; o < g->nops; o++)
        if (g->ops[o].phase == PH_OPT)
            opt[nopt++] = o;
    if (kind == SCHED_PLAIN) {
        for (int k = 0; k < nfb; k++)
            g->sched[g->nsched++] = fb[k];
        for (int k = 0; k < nopt; k++)
            g->sched[g->nsched++] = opt[k];
        g->schedule_name = "plain";
    } else {
        int *last = xmalloc((size_t)(g->nparams ? g->nparams : 1) * sizeof(int));
        last_touch(g, fb, nfb, last);
        /* adamw of parameter i goes after fb[last[i]] (params untouched: first) */
        int *param_of_opt = xmalloc((size_t)(nopt ? nopt : 1) * sizeof(int));
        for (int k = 0; k < nopt; k++) {
            int p = g->ops[opt[k]].in[0];
            param_of_opt[k] = -1;
            for (int i = 0; i < g->nparams; i++)
                if (g->params[i] == p)
                    param_of_opt[k] = i;
        }
        for (int k = 0; k < nopt; k++)
            if (param_of_opt[k] >= 0 && last[param_of_opt[k]] < 0)
                g->sched[g->nsched++] = opt[k];
        for (int j = 0; j < nfb; j++) {
            g->sched[g->nsched++] = fb[j];
            for (int k = 0; k < nopt; k++)
                if (param_of_opt[k] >= 0 && last[param_of_opt[k]] == j)
                    g->sched[g->nsched++] = opt[k];
        }
        for (int k = 0; k < nopt; k++)
            if (param_of_opt[k] < 0)
                g->sched[g->nsched++] = opt[k];
        free(last);
        free(param_of_opt);
        g->schedule_name = "fused-opt";
    }
    for (int k = 0; k < g->nsched; k++)
        g->ops[g->sched[k]].step = k;
    free(fb);
    free(opt);
}
