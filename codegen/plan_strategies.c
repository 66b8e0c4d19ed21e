/* plan_strategies.c — the plan JSON's "strategies" section: what each
 * memory or speed strategy did to this plan, as the compiler can tell from
 * the graph. One object per strategy (schema: docs/plan.md):
 *   {"name", "applied", "summary", "saved_bytes", "details"}
 * saved_bytes is what the whole allocation saves against the same plan
 * without the strategy, when the compiler measured it, else null. A new
 * strategy appends its own object (a function below and one line in
 * plan_strategies_json); the plan explorer shows any object of this form. */
#include <stdlib.h>
#include <string.h>

#include "codegen.h"

/* Fusion: the ops that absorbed others (the live producers of the outputs of
 * ops marked dead), counted by kind, and the intermediates nothing makes or
 * reads any more. The arena saving needs a second plan: not measured. */
static json_t *fusion_json(const Graph *g)
{
    int *fused = xcalloc((size_t)g->nops + 1, sizeof *fused), count[OP_COUNT] = {0};
    int removed = 0, nfused = 0, ninter = 0;
    size_t inter_bytes = 0;
    for (int o = 0; o < g->nops; o++) {
        const Op *op = &g->ops[o];
        if (!op->dead)
            continue;
        removed++;
        for (int i = 0; i < op->nout; i++) {
            int p = g->t[op->out[i]].producer;
            if (p >= 0 && !g->ops[p].dead && !fused[p]) {
                fused[p] = 1;
                count[g->ops[p].kind]++;
                nfused++;
            }
        }
    }
    for (int o = 0; o < g->nops; o++)    /* fused kinds that took a removed op's slot (fuse_attention.c) */
        if (!g->ops[o].dead && !fused[o] && (g->ops[o].kind == OP_ATTENTION || g->ops[o].kind == OP_ATTENTION_BWD ||
                                             g->ops[o].kind == OP_CLASSIFIER)) {
            fused[o] = 1;
            count[g->ops[o].kind]++;
            nfused++;
        }
    for (int i = 0; i < g->nt; i++) {
        const Tensor *t = &g->t[i];
        if ((t->kind == TK_ACTIVATION || t->kind == TK_ACTGRAD) && t->view_of < 0 &&
            t->producer < 0 && t->first < 0)
            ninter++, inter_bytes += t->bytes;
    }
    json_t *kinds = json_object();
    char summary[512] = "";
    size_t len = 0;
    for (int k = 0; k < OP_COUNT; k++)
        if (count[k]) {
            json_object_set_new(kinds, op_info[k].name, json_integer(count[k]));
            if (len < sizeof summary)
                len += (size_t)snprintf(summary + len, sizeof summary - len, "%s%s x%d",
                                        len ? ", " : "", op_info[k].name, count[k]);
        }
    char line[640];
    if (nfused)
        snprintf(line, sizeof line, "%d fused ops (%s) replace %d ops; %d intermediates no longer stored",
                 nfused, summary, nfused + removed, ninter);
    else
        snprintf(line, sizeof line, "no ops fused");
    json_t *d = json_object();
    json_object_set_new(d, "fused_ops", kinds);
    json_object_set_new(d, "ops_removed", json_integer(removed));
    json_object_set_new(d, "intermediates_removed", json_integer(ninter));
    json_object_set_new(d, "intermediate_bytes", json_integer((long long)inter_bytes));
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string("fusion"));
    json_object_set_new(o, "applied", json_boolean(nfused > 0));
    json_object_set_new(o, "summary", json_string(line));
    json_object_set_new(o, "saved_bytes", json_null());
    json_object_set_new(o, "details", d);
    free(fused);
    return o;
}

json_t *plan_strategies_json(const Graph *g)
{
    json_t *a = json_array();
    json_array_append_new(a, fusion_json(g));
    return a;
}
