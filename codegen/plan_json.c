/* plan_json.c — --emit plan: the memory plan as JSON (schema: docs/plan.md). */
#include <jansson.h>
#include <stdlib.h>

#include "codegen.h"

/* Wraps a size or step; -1 (no value) becomes null. */
static json_t *jint(long long v) { return json_integer(v); }
static json_t *jopt(long long v) { return v < 0 ? json_null() : json_integer(v); }

static json_t *id_list(const int *ids, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, jint(ids[i]));
    return a;
}

/* "file:line:col", or nothing when loc is unknown. */
static void set_src(json_t *o, Loc loc)
{
    if (!loc.file || loc.line < 1)
        return;
    char *s = xasprintf("%s:%d:%d", loc.file, loc.line, loc.col);
    json_object_set_new(o, "src", json_string(s));
    free(s);
}

/* {"file:line": "text of the line"} for every line a tensor or op came from. */
static json_t *source_lines_json(const Graph *g)
{
    json_t *o = json_object();
    for (int i = 0; i < g->nt + g->nops; i++) {
        Loc loc = i < g->nt ? g->t[i].loc : g->ops[i - g->nt].loc;
        size_t len;
        const char *text = diag_source_line(loc, &len);
        if (!text)
            continue;
        char *key = xasprintf("%s:%d", loc.file, loc.line);
        if (!json_object_get(o, key)) {
            json_t *v = json_stringn(text, len);   /* NULL when not UTF-8 */
            json_object_set_new(o, key, v ? v : json_string("?"));
        }
        free(key);
    }
    return o;
}

static json_t *dims_json(const Graph *g)
{
    json_t *d = json_object();
    for (int i = 0; i < g->ndims; i++)
        json_object_set_new(d, g->dims[i].name, jint(g->dims[i].value));
    return d;
}

/* the parallel split: the plan is rank 0's (every rank's plan is alike) */
static json_t *split_json(const Graph *g)
{
    json_t *o = json_object();
    int ncomm = 0;
    for (int s = 0; s < g->nsched; s++)
        ncomm += g->ops[g->sched[s]].phase == PH_COMM;
    json_object_set_new(o, "kind", json_string(g->nranks > 1 ? g->split_name : "none"));
    json_object_set_new(o, "ranks", jint(g->nranks));
    json_object_set_new(o, "rank_shown", jint(0));
    json_object_set_new(o, "collectives_per_step", jint(ncomm));
    json_object_set_new(o, "bytes_sent_per_step", jint((long long)g->comm_bytes));
    json_object_set_new(o, "tp_group", jint(g->tp ? g->tp : 1));   /* ranks that hold the parts of one model */
    json_object_set_new(o, "dp_groups", jint(graph_data_ranks(g)));
    return o;
}

static json_t *schedule_json(const Graph *g)
{
    json_t *a = json_array();
    for (int s = 0; s < g->nsched; s++) {
        const Op *op = &g->ops[g->sched[s]];
        json_t *o = json_object();
        json_object_set_new(o, "step", jint(s));
        json_object_set_new(o, "op", json_string(op_info[op->kind].name));
        json_object_set_new(o, "name", json_string(op->name));
        /* "params": an op the step runs only after the host wrote the master weights (GC_PHASE_PARAMS:
           the bf16 weight copies at init, load or gradcheck; the updates keep them current) */
        json_object_set_new(o, "phase", json_string(op_phase_label(g, op)));
        json_object_set_new(o, "inputs", id_list(op->in, op->nin));
        json_object_set_new(o, "outputs", id_list(op->out, op->nout));
        if (op->acc)
            json_object_set_new(o, "acc", jint(op->acc));
        set_src(o, op->loc);
        json_array_append_new(a, o);
    }
    return a;
}

/* A parameter's checkpoint tensors (ir/psource.c): {"name", "tensors",
 * "transposed", "shape"}; name is the template ({l}: the index along the
 * parameter's first axis, one tensor per index), shape one tensor's in the file. */
static json_t *psource_json(const ParamSource *ps)
{
    json_t *o = json_object(), *shape = json_array();
    for (int k = 0; k < ps->rank; k++)
        json_array_append_new(shape, jint(ps->sshape[k]));
    json_object_set_new(o, "name", json_string(ps->name));
    if (ps->nalts) {
        json_t *alts = json_array();
        for (int k = 0; k < ps->nalts; k++)
            json_array_append_new(alts, json_string(ps->alt[k].name));
        json_object_set_new(o, "alternatives", alts);
    }
    json_object_set_new(o, "given", json_boolean(ps->given));
    json_object_set_new(o, "tensors", jint(ps->layers ? ps->layers : 1));
    json_object_set_new(o, "layered", json_boolean(ps->layers > 0));
    json_object_set_new(o, "transposed", json_boolean(ps->transposed));
    json_object_set_new(o, "shape", shape);
    return o;
}

static json_t *tensor_json(const Tensor *t, const ParamSource *ps)
{
    json_t *o = json_object(), *shape = json_array();
    for (int i = 0; i < t->rank; i++)
        json_array_append_new(shape, jint(t->shape[i]));
    json_object_set_new(o, "id", jint(t->id));
    json_object_set_new(o, "name", json_string(t->name));
    json_object_set_new(o, "kind", json_string(tensor_kind_name(t->kind)));
    json_object_set_new(o, "dtype", json_string(dtype_name(t->dtype)));
    json_object_set_new(o, "shape", shape);
    json_object_set_new(o, "bytes", jint((long long)t->bytes));
    json_object_set_new(o, "region", json_string(region_name(t->region)));
    json_object_set_new(o, "offset", jint((long long)t->offset));
    json_object_set_new(o, "first", jopt(t->first));
    json_object_set_new(o, "last", jopt(t->last));
    json_object_set_new(o, "inplace_of", jopt(t->inplace_of));
    json_object_set_new(o, "view_of", jopt(t->view_of));
    if (ps)
        json_object_set_new(o, "checkpoint", psource_json(ps));
    set_src(o, t->loc);
    return o;
}

static json_t *regions_json(const Graph *g)
{
    json_t *a = json_array();
    for (int r = 0; r < RG_COUNT; r++) {
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(region_name((Region)r)));
        json_object_set_new(o, "bytes", jint((long long)g->region_bytes[r]));
        json_object_set_new(o, "lower_bound", jint((long long)g->region_lower_bound[r]));
        json_object_set_new(o, "device", json_boolean(region_on_device((Region)r)));
        json_array_append_new(a, o);
    }
    return a;
}

/* Bytes of the arena without reuse: every live root its own rounded storage. */
static size_t no_reuse_bytes(const Graph *g)
{
    size_t sum = 0;
    for (int i = 0; i < g->nt; i++) {
        const Tensor *t = &g->t[i];
        if (t->view_of < 0 && t->region == RG_ARENA && t->first >= 0)
            sum += (t->bytes + 255) / 256 * 256;
    }
    return sum;
}

static json_t *totals_json(const Graph *g, const EmitOptions *opt)
{
    size_t peak = graph_device_bytes(g);   /* device memory: the host region apart */
    size_t lb = g->region_lower_bound[RG_ARENA];
    json_t *o = json_object();
    json_object_set_new(o, "peak_bytes", jint((long long)peak));
    json_object_set_new(o, "host_bytes", jint((long long)g->region_bytes[RG_HOST]));
    json_object_set_new(o, "params_bytes", jint((long long)g->region_bytes[RG_PARAMS]));
    json_object_set_new(o, "grads_bytes", jint((long long)g->region_bytes[RG_GRADS]));
    json_object_set_new(o, "optstate_bytes", jint((long long)g->region_bytes[RG_OPTSTATE]));
    json_object_set_new(o, "arena_bytes", jint((long long)g->region_bytes[RG_ARENA]));
    json_object_set_new(o, "arena_lower_bound", jint((long long)lb));
    json_object_set_new(o, "arena_ratio",
                        lb ? json_real((double)g->region_bytes[RG_ARENA] / (double)lb)
                           : json_null());
    json_object_set_new(o, "arena_no_reuse_bytes", jint((long long)no_reuse_bytes(g)));
    json_object_set_new(o, "fits", opt->budget_bytes ? json_boolean(peak <= opt->budget_bytes)
                                                     : json_null());
    return o;
}

json_t *plan_json(const Graph *g, const EmitOptions *opt)
{
    json_t *root = json_object(), *tensors = json_array();
    json_object_set_new(root, "version", jint(1));
    json_object_set_new(root, "target", json_string(opt->target ? opt->target : "cpu"));
    json_object_set_new(root, "budget_bytes",
                        opt->budget_bytes ? jint((long long)opt->budget_bytes) : json_null());
    json_object_set_new(root, "graph", json_string(g->file ? g->file : ""));
    json_object_set_new(root, "config", json_string(g->config ? g->config : ""));
    json_object_set_new(root, "schedule_kind",
                        json_string(g->schedule_name ? g->schedule_name : ""));
    json_object_set_new(root, "no_reuse", json_boolean(g->no_reuse));
    json_object_set_new(root, "micro_batches", jint(g->micro_batches > 1 ? g->micro_batches : 1));
    json_object_set_new(root, "dims", dims_json(g));
    json_object_set_new(root, "split", split_json(g));
    json_object_set_new(root, "schedule", schedule_json(g));
    const ParamSource **src = psrc_table(g);
    for (int i = 0; i < g->nt; i++)
        json_array_append_new(tensors, tensor_json(&g->t[i], src[i]));
    free(src);
    json_object_set_new(root, "tensors", tensors);
    json_object_set_new(root, "regions", regions_json(g));
    json_object_set_new(root, "totals", totals_json(g, opt));
    json_object_set_new(root, "strategies", plan_strategies_json(g));
    json_object_set_new(root, "source_lines", source_lines_json(g));
    return root;
}

int emit_plan_json(FILE *f, const Graph *g, const EmitOptions *opt)
{
    json_t *root = plan_json(g, opt);
    int rc = json_dumpf(root, f, JSON_INDENT(1));
    json_decref(root);
    if (rc == 0 && (fputc('\n', f) == EOF || fflush(f) != 0))
        rc = -1;
    return rc ? -1 : 0;
}
