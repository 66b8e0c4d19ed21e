/* offload.c — host memory as a lever: the optimizer's state and chosen
 * activations move to the host region (RG_HOST), copies become ops of the
 * schedule.
 *
 * Optimizer offload (OFFLOAD_OPT). Every AdamW update runs on the host, on
 * host tensors: the fp32 master of its parameter (slice or ZeRO shard), a
 * host copy of its gradient and its moments (the optstate roots move to the
 * host region, laid out as an optstate region would be). The device keeps
 * the weights the forward and backward read. For each update group (the
 * updates of one layer slice that run as one multi-tensor call) the
 * schedule gets:
 *
 *     offload  d.W   -> host.d.W   (one per update, just before the group;
 *                                   the gradient's norm is added there)
 *     adamw    master.W, host.d.W, m, v     (the group, on the host)
 *     prefetch master.W -> W       (one per update, right after it)
 *     copy_wait d.W, host.d.W      (before the next group's copies, or at
 *                                   the end: the device gradient's storage
 *                                   is free after it, so a layer's gradient
 *                                   lives one layer longer than without)
 *     copy_wait W, master.W        (before the first later op that touches
 *                                   W's bytes, a ZeRO all-gather; else at
 *                                   the end of the step: the next forward
 *                                   reads the new weights)
 *
 * and, at its start, a copy of each weight into its master (offload with
 * slot -1, no wait: run only when the host has written the weights, phase
 * params, like precision.c's casts; op_param_refresh). The copies of one
 * step are numbered (attr slot); on CUDA the runtime runs them on copy
 * streams with events and the host update as a host function after its
 * gradients' copies (gc_runtime.h, "Host offload"), so transfers
 * and the CPU update overlap the backward; on the CPU target every op runs
 * at once, in schedule order: the same arithmetic as without offload, other
 * memory, bit-identical losses.
 *
 * The host gradient copies and masters are persistent (the update runs
 * asynchronously, some time before the step ends), so the host region holds
 * 16 bytes per parameter (4 each: master, gradient, two moments) of this
 * rank's updates. With --precision bf16 the masters themselves move to the
 * host and the update writes a host bf16 copy that is prefetched instead
 * (bf16_masters).
 *
 * Activation offload (OFFLOAD_ACT, kept_activations): an activation kept
 * from the forward to the backward is offloaded after its last forward use
 * and prefetched into a new arena tensor when the backward of the layer
 * above starts (double buffering), its backward readers reading that.
 *
 * Run after pass_schedule (and pass_workspace), before liveness. The
 * search calls it with the levers it weighs; plancheck's rule 9 checks the
 * copies independently. docs/offload.md.
 */
#include <string.h>

#include "passes.h"

const char *offload_name(int what)
{
    static const char *const names[] = {"none", "opt", "act", "opt+act"};
    return names[what & 3];
}

/* prefix + name + suffix, allocated (names of the ops and tensors this pass
 * adds: the budget search makes many, so without printf). */
static char *cat(const char *prefix, const char *name, const char *suffix)
{
    size_t a = strlen(prefix), b = strlen(name), c = strlen(suffix);
    char *s = xmalloc(a + b + c + 1);
    memcpy(s, prefix, a);
    memcpy(s + a, name, b);
    memcpy(s + a + b, suffix, c + 1);
    return s;
}

/* A new tensor like t (dtype, shape), in `region`, of `kind`. */
static int like(Graph *g, int t, const char *prefix, Region region, TensorKind kind)
{
    Tensor x = g->t[t];
    char *name = cat(prefix, x.name, "");
    int n = graph_add_tensor(g, name, x.dtype, x.rank, x.shape, kind, x.loc);
    free(name);
    g->t[n].region = region;
    return n;
}

/* A copy op (offload, prefetch) from `in` to `out`. A copy back into a
 * tensor that is made elsewhere (back: weights the host update wrote)
 * leaves its producer as it was: the op that made it, or none (a
 * parameter). */
static int add_copy(Graph *g, OpKind kind, int in, int out, int slot, Phase ph, int layer, int back)
{
    int keep = g->t[out].producer;
    char *name = cat(op_info[kind].name, ".", g->t[out].name);
    int id = graph_add_op(g, kind, name, &in, 1, &out, 1, g->t[in].loc);
    free(name);
    if (back)
        g->t[out].producer = keep;
    Op *op = &g->ops[id];
    op->attr[0] = slot;
    op->phase = ph;
    op->layer = layer;
    return id;
}

static int add_wait(Graph *g, int dev, int host, int slot, Phase ph, int layer)
{
    char *name = cat("copy_wait.", g->t[dev].name, "");
    int id = graph_add_op(g, OP_COPY_WAIT, name, (int[]){dev, host}, 2, NULL, 0, g->t[dev].loc);
    free(name);
    g->ops[id].attr[0] = slot;
    g->ops[id].phase = ph;
    g->ops[id].layer = layer;
    return id;
}

/* The new schedule: for each old position k, the ops to run before it
 * (before[k]) and after it (after[k]); position nsched collects the end. */
typedef struct List { int *v, n, cap; } List;
typedef struct Plan { List *before, *after; int nsched; } Plan;

static void push(List *l, int op)
{
    l->v = xgrow(l->v, &l->cap, l->n + 1, sizeof *l->v);
    l->v[l->n++] = op;
}

static void rebuild(Graph *g, Plan *p, const List *head)
{
    int n = g->nsched + head->n;
    for (int k = 0; k <= p->nsched; k++)
        n += p->before[k].n + p->after[k].n;
    int *s = xmalloc(((size_t)n + 1) * sizeof *s), m = 0;
    for (int i = 0; i < head->n; i++)
        s[m++] = head->v[i];
    for (int k = 0; k <= p->nsched; k++) {
        for (int i = 0; i < p->before[k].n; i++)
            s[m++] = p->before[k].v[i];
        if (k < p->nsched)
            s[m++] = g->sched[k];
        for (int i = 0; i < p->after[k].n; i++)
            s[m++] = p->after[k].v[i];
    }
    free(g->sched);
    g->sched = s;
    g->nsched = m;
    for (int k = 0; k < m; k++)
        g->ops[s[k]].step = k;
}

/* Where each update's weights are touched after it: per storage root of an
 * update's first input, the (position, bytes) of every access by an op that
 * is not an update, in schedule order. */
typedef struct Touch { int pos; size_t lo, hi; } Touch;
typedef struct Touches { Touch *v; int n, cap; } Touches;

/* The weights an update leaves on the device: the parameter (fp32), or its
 * bf16 copy (adamw_bf16's input 4). */
static int device_weights(const Op *u) { return u->kind == OP_ADAMW_BF16 ? u->in[4] : u->in[0]; }

static int is_update(const Op *o) { return o->kind == OP_ADAMW || o->kind == OP_ADAMW_BF16; }

static Touches *weight_touches(const Graph *g, const int *root, const size_t *roff)
{
    Touches *tt = xcalloc((size_t)g->nt, sizeof *tt);
    char *want = xcalloc((size_t)g->nt, 1);
    for (int k = 0; k < g->nsched; k++)
        if (is_update(&g->ops[g->sched[k]]))
            want[root[device_weights(&g->ops[g->sched[k]])]] = 1;
    for (int k = 0; k < g->nsched; k++) {
        const Op *o = &g->ops[g->sched[k]];
        for (int i = 0; !is_update(o) && i < o->nin + o->nout; i++) {
            int t = i < o->nin ? o->in[i] : o->out[i - o->nin];
            Touches *x = &tt[root[t]];
            if (!want[root[t]])
                continue;
            x->v = xgrow(x->v, &x->cap, x->n + 1, sizeof *x->v);
            x->v[x->n++] = (Touch){k, roff[t], roff[t] + g->t[t].bytes};
        }
    }
    free(want);
    return tt;
}

/* The first position after `from` whose op touches bytes [lo, hi) of root
 * r, or `none`. */
static int next_touch(const Touches *tt, int r, size_t lo, size_t hi, int from, int none)
{
    const Touches *x = &tt[r];
    int a = 0, b = x->n;
    while (a < b) {
        int mid = (a + b) / 2;
        if (x->v[mid].pos <= from)
            a = mid + 1;
        else
            b = mid;
    }
    for (; a < x->n; a++)
        if (x->v[a].lo < hi && lo < x->v[a].hi)
            return x->v[a].pos;
    return none;
}

/* --precision bf16: the host copy (bf16, persistent) of the device's bf16
 * weight root r, made on first use (hcopy[r], -1: none yet). */
static int host_copy_root(Graph *g, int r, int *hcopy)
{
    if (hcopy[r] < 0)
        hcopy[r] = like(g, r, "host.", RG_HOST, TK_PARAM);
    return hcopy[r];
}

/* The view of host root h at byte offset off with t's shape. */
static int host_view(Graph *g, int h, size_t off, int t)
{
    return graph_add_view(g, h, off, "host.", t, TK_PARAM);
}

/* --precision bf16: the fp32 masters move to the host (the device keeps
 * their bf16 copies); the casts that refresh the copies when the host wrote
 * the masters (precision.c, phase params) cast on the host into the copies'
 * host roots, each followed by a copy of its root to the device. */
static void bf16_masters(Graph *g, Plan *p, const int *root, const size_t *roff, int *hcopy, int nt0)
{
    char *master = xcalloc((size_t)nt0, 1);
    for (int k = 0; k < p->nsched; k++)
        if (g->ops[g->sched[k]].kind == OP_ADAMW_BF16)
            master[root[g->ops[g->sched[k]].in[0]]] = 1;
    for (int t = nt0 - 1; t >= 0; t--)
        if (master[root[t]])
            g->t[t].region = RG_HOST;
    for (int k = 0; k < p->nsched; k++) {
        Op *c = &g->ops[g->sched[k]];
        if (c->kind != OP_COPY || c->out[0] >= nt0 || !master[root[c->in[0]]] || !op_param_refresh(g, c))
            continue;
        int dev = c->out[0], id = c->id;
        if (roff[dev] != 0 || root[dev] != dev)
            IR_BUG("offload: the cast %s writes part of %s", c->name, g->t[root[dev]].name);
        int h = host_copy_root(g, dev, hcopy);
        graph_unlink_op(g, id);
        g->ops[id].out[0] = h;
        graph_link_op(g, id);
        g->t[h].producer = id;
        int pf = add_copy(g, OP_PREFETCH, h, dev, -1, PH_FWD, g->ops[id].layer, 0);
        g->t[dev].producer = pf;
        push(&p->after[k], pf);
    }
    free(master);
}

static void offload_opt(Graph *g, Plan *p, List *head, int *slot)
{
    int nt0 = g->nt;
    size_t *roff;
    int *root = graph_roots(g, &roff);   /* of the tensors before this pass (it adds roots only) */
    Touches *tt = weight_touches(g, root, roff);
    for (int t = nt0 - 1; t >= 0; t--)    /* the moments and their views (roots last) to the host */
        if (g->t[root[t]].region == RG_OPTSTATE && g->t[root[t]].kind == TK_OPTSTATE)
            g->t[t].region = RG_HOST;
    int *hcopy = xmalloc((size_t)nt0 * sizeof *hcopy);
    for (int t = 0; t < nt0; t++)
        hcopy[t] = -1;
    bf16_masters(g, p, root, roff, hcopy, nt0);
    List pending = {0};                   /* the waits of the last group's gradient copies */
    for (int k = 0; k < p->nsched; k++) {
        int n = op_update_group_len(g, k);
        if (n == 0)
            continue;
        for (int i = 0; i < pending.n; i++)
            push(&p->before[k], pending.v[i]);
        pending.n = 0;
        for (int j = k; j < k + n; j++) {
            const Op *u = &g->ops[g->sched[j]];
            int bf16 = u->kind == OP_ADAMW_BF16, w = u->in[0], gd = u->in[1], dev = device_weights(u);
            int layer = u->layer, id = u->id;
            /* hp: the host tensor the update writes that the device reads a copy of: the master (fp32; a
               new one, refreshed from the weights when the host writes them), or the host bf16 copy */
            int hp = bf16 ? host_view(g, host_copy_root(g, root[dev], hcopy), roff[dev], dev)
                          : like(g, w, "master.", RG_HOST, TK_PARAM);
            int hg = like(g, gd, "host.", RG_HOST, TK_GRAD);
            g->t[hp].rank_stride = g->t[hg].rank_stride = 0;   /* this rank's own */
            int s_g = (*slot)++, s_p = (*slot)++;
            if (!bf16)
                push(head, add_copy(g, OP_OFFLOAD, w, hp, -1, PH_FWD, layer, 0));    /* the refresh */
            push(&p->before[k], add_copy(g, OP_OFFLOAD, gd, hg, s_g, PH_OPT, layer, 0));
            push(&p->after[k + n - 1], add_copy(g, OP_PREFETCH, hp, dev, s_p, PH_OPT, layer, 1));
            push(&pending, add_wait(g, gd, hg, s_g, PH_OPT, layer));
            int at = next_touch(tt, root[dev], roff[dev], roff[dev] + g->t[dev].bytes, k + n - 1, p->nsched);
            push(&p->before[at], add_wait(g, dev, hp, s_p, PH_OPT, layer));
            graph_unlink_op(g, id);
            g->ops[id].in[bf16 ? 4 : 0] = hp;
            g->ops[id].in[1] = hg;
            graph_link_op(g, id);
        }
    }
    for (int i = 0; i < pending.n; i++)
        push(&p->before[p->nsched], pending.v[i]);
    free(pending.v);
    free(hcopy);
    for (int t = 0; t < nt0; t++)
        free(tt[t].v);
    free(tt);
    free(root);
    free(roff);
}

/* ---- activations ---------------------------------------------------------- */

/* The same view chain as v (a view, at any depth, of root `from`) on root
 * `to`: clones of the views between, memoized in clone[] (by tensor id,
 * -1: none yet; sized for the tensors before the pass). */
static int clone_view(Graph *g, int v, int from, int to, int *clone, int nt0)
{
    if (v == from)
        return to;
    if (v < nt0 && clone[v] >= 0)
        return clone[v];
    int base = clone_view(g, g->t[v].view_of, from, to, clone, nt0);
    int c = graph_add_view(g, base, g->t[v].view_offset, "pf.", v, g->t[v].kind);
    if (v < nt0)
        clone[v] = c;
    return c;
}

/* An activation kept across the gap between the forward and the backward:
 * its root, the last step of the forward that uses it (its producer's when
 * only the backward reads it), the first step of the backward (or
 * recompute) that does, and that reader's layer. */
typedef struct Kept { int root, last_fwd, first_bwd, layer; } Kept;

static int kept_cmp(const void *a, const void *b)
{
    const Kept *x = a, *y = b;
    if (x->last_fwd != y->last_fwd)
        return (x->last_fwd > y->last_fwd) - (x->last_fwd < y->last_fwd);
    return (x->root > y->root) - (x->root < y->root);
}

/* The arena activations the backward of a layer l reads (first) and that
 * the backward of layer l+1 starts after the forward is done with them:
 * offloading one frees its bytes from its forward's end to layer l+1's
 * backward, and prefetching it when that backward starts keeps at most two
 * layers' prefetched tensors on the device (double buffering). Not one that
 * a view op of the backward names (the view would keep its bytes: its
 * readers are rewired through clones of the forward's views only). start[l]
 * gets the first step of layer l's backward (-1: none). Returns the count. */
static int kept_activations(const Graph *g, const int *root, Kept *kept, int *start, int nlayers)
{
    int *last_fwd = xmalloc((size_t)g->nt * sizeof *last_fwd), *first_bwd = xmalloc((size_t)g->nt * sizeof *first_bwd);
    int *layer = xmalloc((size_t)g->nt * sizeof *layer);
    for (int t = 0; t < g->nt; t++)
        last_fwd[t] = first_bwd[t] = layer[t] = -1;
    char *viewed = xcalloc((size_t)g->nt, 1);
    for (int l = 0; l < nlayers; l++)
        start[l] = -1;
    for (int k = 0; k < g->nsched; k++) {
        const Op *op = &g->ops[g->sched[k]];
        int bwd = op->phase == PH_BWD || op->phase == PH_RECOMPUTE;
        if (bwd && op->layer >= 0 && op->layer < nlayers && start[op->layer] < 0)
            start[op->layer] = k;
        if (op_info[op->kind].cls == OPC_VIEW) {
            for (int i = 0; bwd && i < op->nin; i++)
                viewed[root[op->in[i]]] = 1;
            continue;
        }
        for (int i = 0; i < op->nin + op->nout; i++) {
            int r = root[i < op->nin ? op->in[i] : op->out[i - op->nin]];
            if (op->phase == PH_FWD)
                last_fwd[r] = k;
            else if (bwd && first_bwd[r] < 0 && i < op->nin)
                first_bwd[r] = k, layer[r] = op->layer;
        }
    }
    int n = 0;
    for (int t = 0; t < g->nt; t++) {
        const Tensor *x = &g->t[t];
        int l = layer[t];
        if (x->view_of >= 0 || x->region != RG_ARENA || x->kind != TK_ACTIVATION || t == root[g->loss] || viewed[t] ||
            (g->sample_logits >= 0 && t == root[g->sample_logits]) || x->producer < 0 ||
            g->ops[x->producer].phase != PH_FWD || last_fwd[t] < 0 || first_bwd[t] < 0 || l < 0 ||
            l + 1 >= nlayers || start[l + 1] < 0 || !(last_fwd[t] < start[l + 1] && start[l + 1] < first_bwd[t]))
            continue;
        kept[n++] = (Kept){t, last_fwd[t], first_bwd[t], l};
    }
    free(last_fwd);
    free(first_bwd);
    free(layer);
    free(viewed);
    qsort(kept, (size_t)n, sizeof *kept, kept_cmp);
    return n;
}

static void offload_act(Graph *g, Plan *p, int *slot)
{
    int nlayers = graph_layers(g), nt0 = g->nt;
    if (nlayers < 2)
        return;
    int *root = graph_roots(g, NULL);
    Kept *kept = xmalloc(((size_t)g->nt + 1) * sizeof *kept);
    int *start = xmalloc((size_t)nlayers * sizeof *start), *clone = xmalloc((size_t)nt0 * sizeof *clone);
    int n = kept_activations(g, root, kept, start, nlayers);
    for (int t = 0; t < nt0; t++)
        clone[t] = -1;
    int first_bwd = p->nsched;   /* the forward's last offloads are waited for before the backward */
    for (int k = 0; k < p->nsched && first_bwd == p->nsched; k++)
        if (g->ops[g->sched[k]].phase != PH_FWD && g->ops[g->sched[k]].phase != PH_COMM)
            first_bwd = k;
    List *readers = xcalloc((size_t)nt0, sizeof *readers);   /* per kept root: its backward readers */
    char *is_kept = xcalloc((size_t)nt0, 1);
    for (int i = 0; i < n; i++)
        is_kept[kept[i].root] = 1;
    for (int k = 0; k < p->nsched; k++) {
        const Op *op = &g->ops[g->sched[k]];
        if (op->phase != PH_BWD && op->phase != PH_RECOMPUTE)
            continue;
        for (int j = 0; j < op->nin; j++)
            if (is_kept[root[op->in[j]]] && (j == 0 || root[op->in[j]] != root[op->in[j - 1]])) {
                List *r = &readers[root[op->in[j]]];
                if (!r->n || r->v[r->n - 1] != op->id)
                    push(r, op->id);
            }
    }
    List pending = {0};
    for (int i = 0; i < n; i++) {
        const Kept *c = &kept[i];
        int x = c->root, l = c->layer;
        if (i > 0 && kept[i - 1].last_fwd != c->last_fwd) {   /* the earlier offloads' waits, then these */
            for (int j = 0; j < pending.n; j++)
                push(&p->after[c->last_fwd], pending.v[j]);
            pending.n = 0;
        }
        int xh = like(g, x, "host.", RG_HOST, TK_ACTIVATION), xd = like(g, x, "pf.", RG_ARENA, TK_ACTIVATION);
        int s_o = (*slot)++, s_p = (*slot)++;
        /* the backward's readers of x (or of views of it) read the prefetched copy */
        for (int q = 0; q < readers[x].n; q++) {
            Op *op = &g->ops[readers[x].v[q]];
            graph_unlink_op(g, op->id);
            for (int j = 0; j < op->nin; j++)
                if (op->in[j] < nt0 && root[op->in[j]] == x)
                    op->in[j] = clone_view(g, op->in[j], x, xd, clone, nt0);
            graph_link_op(g, op->id);
        }
        push(&p->after[c->last_fwd], add_copy(g, OP_OFFLOAD, x, xh, s_o, PH_FWD, l, 0));
        push(&pending, add_wait(g, x, xh, s_o, PH_FWD, l));
        push(&p->before[start[l + 1]], add_copy(g, OP_PREFETCH, xh, xd, s_p, PH_BWD, l, 0));
        push(&p->before[c->first_bwd], add_wait(g, xd, xh, s_p, PH_BWD, l));
    }
    for (int j = 0; j < pending.n; j++)
        push(&p->before[first_bwd], pending.v[j]);
    free(pending.v);
    for (int t = 0; t < nt0; t++)
        free(readers[t].v);
    free(readers);
    free(is_kept);
    free(clone);
    free(start);
    free(kept);
    free(root);
}

void pass_offload(Graph *g, int what)
{
    if (!what)
        return;
    Plan p = {xcalloc((size_t)g->nsched + 1, sizeof(List)), xcalloc((size_t)g->nsched + 1, sizeof(List)), g->nsched};
    List head = {0};
    int slot = 0;
    if (what & OFFLOAD_ACT)   /* before the optimizer's: its copies lead the insertions at a step */
        offload_act(g, &p, &slot);
    if (what & OFFLOAD_OPT)
        offload_opt(g, &p, &head, &slot);
    rebuild(g, &p, &head);
    for (int k = 0; k <= p.nsched; k++) {
        free(p.before[k].v);
        free(p.after[k].v);
    }
    free(p.before);
    free(p.after);
    free(head.v);
    g->offload |= what;
    g->copy_slots = slot;
}
