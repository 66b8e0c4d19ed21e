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
                                             g->ops[o].kind == OP_ATTENTION_GQA || g->ops[o].kind == OP_ATTENTION_GQA_BWD ||
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

/* One strategy object with no saving measured; details may be NULL. */
static json_t *strategy(const char *name, int applied, const char *summary, json_t *details)
{
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(name));
    json_object_set_new(o, "applied", json_boolean(applied));
    json_object_set_new(o, "summary", json_string(summary));
    json_object_set_new(o, "saved_bytes", json_null());
    json_object_set_new(o, "details", details ? details : json_object());
    return o;
}

/* Gradient accumulation (passes/microbatch.c). */
static json_t *micro_json(const Graph *g)
{
    int k = g->micro_batches > 1 ? g->micro_batches : 1;
    char line[160];
    snprintf(line, sizeof line, k > 1 ? "%d micro-batches of B rows per optimizer step; gradients accumulate in "
                                        "the grads region" : "one batch per step (%d micro-batch)", k);
    json_t *d = json_object();
    json_object_set_new(d, "micro_batches", json_integer(k));
    return strategy("micro_batches", k > 1, line, d);
}

/* Recomputation (passes/recompute.c): the ops of phase recompute, their
 * outputs and FLOPs against the rest of the step. */
static json_t *recompute_json(const Graph *g)
{
    int nops = 0, ntens = 0;
    double extra = 0, base = 0;
    for (int k = 0; k < g->nsched; k++) {
        const Op *op = &g->ops[g->sched[k]];
        double fl = op_flops(g, op);
        if (op->phase == PH_RECOMPUTE)
            nops++, ntens += op->nout, extra += fl;
        else
            base += fl;
    }
    char line[160];
    if (nops)
        snprintf(line, sizeof line, "%d tensors recomputed in the backward by %d ops (+%.1f%% FLOPs)", ntens, nops,
                 base > 0 ? 100.0 * extra / base : 0.0);
    else
        snprintf(line, sizeof line, "nothing recomputed");
    json_t *d = json_object();
    json_object_set_new(d, "ops", json_integer(nops));
    json_object_set_new(d, "tensors", json_integer(ntens));
    json_object_set_new(d, "extra_flops", json_real(extra));
    return strategy("recompute", nops > 0, line, d);
}

/* The parallel split (passes/split.c): this plan is one rank's. */
static json_t *split_json(const Graph *g)
{
    char line[200];
    int split = g->nranks > 1;
    if (split)
        snprintf(line, sizeof line, "%s over %d ranks; %.0f bytes sent per rank per step", g->split_name, g->nranks,
                 g->comm_bytes);
    else
        snprintf(line, sizeof line, "one device, no split");
    json_t *d = json_object();
    json_object_set_new(d, "ranks", json_integer(split ? g->nranks : 1));
    json_object_set_new(d, "kind", json_string(split ? g->split_name : "none"));
    json_object_set_new(d, "comm_bytes_per_step", json_real(split ? g->comm_bytes : 0));
    return strategy("split", split, line, d);
}

json_t *plan_strategies_json(const Graph *g)
{
    json_t *a = json_array();
    json_array_append_new(a, fusion_json(g));
    json_array_append_new(a, micro_json(g));
    json_array_append_new(a, recompute_json(g));
    json_array_append_new(a, split_json(g));
    return a;
}
