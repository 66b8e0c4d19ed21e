/* graph.c — building the IR graph: tensors, ops, producer/consumer links. */
#include <stdlib.h>
#include <string.h>

#include "ir.h"

static const char *const dtype_names[] = {"f32", "bf16", "i32"};
static const size_t dtype_sizes[] = {4, 2, 4};
static const char *const kind_names[] = {"param", "grad", "optstate", "activation",
                                         "actgrad", "input", "workspace", "comm"};
static const char *const region_names[] = {"params", "grads", "optstate", "arena", "host"};
static const char *const phase_names[] = {"fwd", "bwd", "opt", "recompute", "comm"};

const char *dtype_name(DType d) { return dtype_names[d]; }
size_t dtype_size(DType d) { return dtype_sizes[d]; }
const char *tensor_kind_name(TensorKind k) { return kind_names[k]; }
const char *region_name(Region r) { return region_names[r]; }
const char *phase_name(Phase p) { return phase_names[p]; }
int region_on_device(Region r) { return r != RG_HOST; }

int tensor_persistent(const Tensor *t)
{
    if (t->region == RG_HOST)
        return t->kind == TK_PARAM || t->kind == TK_GRAD || t->kind == TK_OPTSTATE;
    return t->region != RG_ARENA;
}

size_t graph_device_bytes(const Graph *g)
{
    size_t n = 0;
    for (int r = 0; r < RG_COUNT; r++)
        if (region_on_device((Region)r))
            n += g->region_bytes[r];
    return n;
}

Graph *graph_new(const char *file)
{
    Graph *g = xcalloc(1, sizeof *g);
    g->file = file;
    g->config = "";
    g->loss = -1;
    g->sample_logits = -1;
    g->lr = 3e-4;
    g->beta1 = 0.9;
    g->beta2 = 0.999;
    g->eps = 1e-8;
    g->weight_decay = 0.0;
    g->schedule_name = "";
    g->nranks = 1;
    g->split_name = "";
    g->t = store_reserve(sizeof *g->t, IR_MAX_TENSORS);
    g->ops = store_reserve(sizeof *g->ops, IR_MAX_OPS);
    return g;
}

/* 1 when name lies in g's name block (graph_clone's). */
static int in_block(const Graph *g, const char *name)
{
    return g->name_block && name >= g->name_block && name < g->name_block + g->name_block_len;
}

void graph_rename_tensor(Graph *g, int t, char *name)
{
    if (!in_block(g, g->t[t].name))
        free(g->t[t].name);
    g->t[t].name = name;
}

void graph_rename_op(Graph *g, int o, char *name)
{
    if (!in_block(g, g->ops[o].name))
        free(g->ops[o].name);
    g->ops[o].name = name;
}

void graph_free(Graph *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->nt; i++) {
        if (!in_block(g, g->t[i].name))
            free(g->t[i].name);
        free(g->t[i].consumers);
    }
    for (int i = 0; i < g->nops; i++)
        if (!in_block(g, g->ops[i].name))
            free(g->ops[i].name);
    free(g->name_block);
    for (int i = 0; i < g->ndims; i++)
        free(g->dims[i].name);
    free(g->dims);
    store_release(g->t, sizeof *g->t, IR_MAX_TENSORS, g->capt);
    store_release(g->ops, sizeof *g->ops, IR_MAX_OPS, g->capops);
    for (int i = 0; g->psrc && i < g->nparams; i++) {
        free(g->psrc[i].name);
        for (int k = 0; k < g->psrc[i].nalts; k++)
            free(g->psrc[i].alt[k].name);
    }
    free(g->psrc);
    free(g->params);
    free(g->inputs);
    free(g->sched);
    free(g->split_report);
    free(g);
}

int graph_add_tensor(Graph *g, const char *name, DType dt, int rank, const long *shape,
                     TensorKind kind, Loc loc)
{
    if (rank < 0 || rank > IR_MAXRANK)
        IR_BUG("tensor %s: rank %d", name, rank);
    if (g->nt >= IR_MAX_TENSORS)
        IR_BUG("more than %d tensors (ir/build.c bounds the forward graph)", IR_MAX_TENSORS);
    store_commit(g->t, sizeof *g->t, IR_MAX_TENSORS, &g->capt, g->nt + 1);
    Tensor *t = &g->t[g->nt];
    memset(t, 0, sizeof *t);
    t->id = g->nt;
    t->name = xstrdup(name);
    t->dtype = dt;
    t->rank = rank;
    t->numel = 1;
    for (int i = 0; i < rank; i++) {          /* checked: ir/build.c bounds shapes */
        t->shape[i] = shape[i];
        if (shape[i] < 0 || __builtin_mul_overflow(t->numel, shape[i], &t->numel))
            IR_BUG("tensor %s: shape overflows", name);
    }
    if (__builtin_mul_overflow((size_t)t->numel, dtype_size(dt), &t->bytes))
        IR_BUG("tensor %s: size overflows", name);
    t->kind = kind;
    t->region = kind == TK_PARAM ? RG_PARAMS : kind == TK_GRAD ? RG_GRADS
              : kind == TK_OPTSTATE ? RG_OPTSTATE : RG_ARENA;
    t->loc = loc;
    t->producer = -1;
    t->view_of = -1;
    t->whole = -1;
    t->grad = t->opt_m = t->opt_v = -1;
    t->decay = 1;
    t->first = t->last = -1;
    t->inplace_of = -1;
    return g->nt++;
}

int graph_insert_op(Graph *g, int pos, OpKind kind, const char *name, const int *in, int nin,
                    const int *out, int nout, Loc loc)
{
    if (g->nsched)
        IR_BUG("graph_insert_op after scheduling");
    int n = graph_add_op(g, kind, name, in, nin, out, nout, loc);
    Op moved = g->ops[n];
    memmove(&g->ops[pos + 1], &g->ops[pos], (size_t)(n - pos) * sizeof *g->ops);
    g->ops[pos] = moved;
    for (int o = pos; o <= n; o++)
        g->ops[o].id = o;
    for (int t = 0; t < g->nt; t++)
        if (g->t[t].producer >= pos)
            g->t[t].producer = g->t[t].producer == n ? pos : g->t[t].producer + 1;
    graph_relink(g);
    return pos;
}

int graph_data_ranks(const Graph *g)
{
    int n = g->nranks > 1 ? g->nranks : 1;
    return g->tp ? n / g->tp : n;
}

static void add_consumer(Tensor *t, int op)
{
    t->consumers = xrealloc(t->consumers, (size_t)(t->nconsumers + 1) * sizeof(int));
    t->consumers[t->nconsumers++] = op;
}

int graph_add_view(Graph *g, int base, size_t off, const char *prefix, int like, TensorKind kind)
{
    Tensor x = g->t[like];      /* a copy: adding a tensor moves g->t */
    char *name = xasprintf("%s%s", prefix, x.name);
    int v = graph_add_tensor(g, name, x.dtype, x.rank, x.shape, kind, x.loc);
    free(name);
    g->t[v].region = g->t[base].region;
    g->t[v].view_of = base;
    g->t[v].view_offset = off;
    return v;
}

int graph_add_op(Graph *g, OpKind kind, const char *name, const int *in, int nin,
                 const int *out, int nout, Loc loc)
{
    if (nin > IR_MAXIO || nout > IR_MAXIO)
        IR_BUG("op %s: %d inputs, %d outputs", name, nin, nout);
    if (g->nops >= IR_MAX_OPS)
        IR_BUG("more than %d ops (ir/build.c bounds the forward graph)", IR_MAX_OPS);
    store_commit(g->ops, sizeof *g->ops, IR_MAX_OPS, &g->capops, g->nops + 1);
    Op *op = &g->ops[g->nops];
    memset(op, 0, sizeof *op);
    op->id = g->nops;
    op->kind = kind;
    op->name = xstrdup(name);
    op->nin = nin;
    op->nout = nout;
    for (int i = 0; i < nin; i++) {
        op->in[i] = in[i];
        add_consumer(&g->t[in[i]], op->id);
    }
    for (int i = 0; i < nout; i++) {
        op->out[i] = out[i];
        if (g->t[out[i]].producer < 0)   /* accumulating ops write again later */
            g->t[out[i]].producer = op->id;
    }
    op->layer = -1;
    op->step = -1;
    op->loc = loc;
    return g->nops++;
}

void graph_relink(Graph *g)
{
    /* counted first, so each list is allocated once at its final size */
    for (int i = 0; i < g->nt; i++) {
        free(g->t[i].consumers);
        g->t[i].consumers = NULL;
        g->t[i].nconsumers = 0;
    }
    for (int o = 0; o < g->nops; o++)
        for (int i = 0; i < g->ops[o].nin && !g->ops[o].dead; i++)
            g->t[g->ops[o].in[i]].nconsumers++;
    for (int i = 0; i < g->nt; i++) {
        if (g->t[i].nconsumers)
            g->t[i].consumers = xmalloc((size_t)g->t[i].nconsumers * sizeof(int));
        g->t[i].nconsumers = 0;
    }
    for (int o = 0; o < g->nops; o++)
        for (int i = 0; i < g->ops[o].nin && !g->ops[o].dead; i++) {
            Tensor *t = &g->t[g->ops[o].in[i]];
            t->consumers[t->nconsumers++] = o;
        }
}

void graph_unlink_op(Graph *g, int o)
{
    const Op *op = &g->ops[o];
    for (int i = 0; i < op->nin; i++) {
        Tensor *t = &g->t[op->in[i]];
        int k = 0;
        for (int j = 0; j < t->nconsumers; j++)
            if (t->consumers[j] != o)
                t->consumers[k++] = t->consumers[j];
        t->nconsumers = k;
    }
}

void graph_link_op(Graph *g, int o)
{
    const Op *op = &g->ops[o];
    for (int i = 0; i < op->nin && !op->dead; i++) {
        Tensor *t = &g->t[op->in[i]];
        add_consumer(t, o);
        int j = t->nconsumers - 1;            /* into place: after every id <= o */
        while (j > 0 && t->consumers[j - 1] > o) {
            t->consumers[j] = t->consumers[j - 1];
            j--;
        }
        t->consumers[j] = o;
    }
}

int graph_root(const Graph *g, int t, size_t *offset)
{
    size_t off = 0;
    while (g->t[t].view_of >= 0) {
        off += g->t[t].view_offset;
        t = g->t[t].view_of;
    }
    if (offset)
        *offset = off;
    return t;
}

int *graph_roots(const Graph *g, size_t **offsets)
{
    int n = g->nt;
    int *root = xmalloc(((size_t)n + 1) * sizeof *root), *path = xmalloc(((size_t)n + 1) * sizeof *path);
    size_t *off = offsets ? xmalloc(((size_t)n + 1) * sizeof *off) : NULL;
    for (int t = 0; t < n; t++)
        root[t] = -1;
    for (int t = 0; t < n; t++) {
        int k = 0, u = t;
        while (root[u] < 0 && g->t[u].view_of >= 0) {   /* up to a known or a true root */
            if (k >= n)
                IR_BUG("tensor %%%d %s: views form a cycle", t, g->t[t].name);
            path[k++] = u;
            u = g->t[u].view_of;
        }
        if (root[u] < 0) {
            root[u] = u;
            if (off)
                off[u] = 0;
        }
        while (k > 0) {                                  /* back down, filling in */
            int v = path[--k];
            root[v] = root[u];
            if (off)
                off[v] = off[u] + g->t[v].view_offset;
            u = v;
        }
    }
    free(path);
    if (offsets)
        *offsets = off;
    return root;
}

long graph_dim(const Graph *g, const char *name)
{
    for (int i = 0; i < g->ndims; i++)
        if (strcmp(g->dims[i].name, name) == 0)
            return g->dims[i].value;
    return -1;
}
