/* schedule.c — the final op order.
 *
 * plain:     forward ops, backward ops, then every optimizer update, each in
 *            creation order (creation order is a valid topological order).
 *            Recompute ops (created last) are ordered as if they had the id
 *            of the first op that reads them: each runs just before the
 *            backward needs it. Collectives (phase comm) run as soon as
 *            their inputs are ready.
 * fused-opt: forward and backward as above, but each parameter's AdamW update
 *            runs right after the last op that touches the parameter (its
 *            bf16 copy too) or its gradient. A gradient then dies at its
 *            update, so parameter gradients move from the persistent grads
 *            region into the arena, where the planner overlaps them: they
 *            never all coexist (not with micro-batches, which accumulate
 *            gradients across steps). The updates of one layer (op->layer,
 *            set by split_updates) wait for the layer's last such op and run
 *            together, as one multi-tensor launch (op_update_group_len).
 * Both open with the ops that refresh bf16 weight copies from the masters
 * (op_param_refresh): they run only when the host wrote the masters, never
 * inside a step, so nothing in the step waits for them.
 */
#include <limits.h>

#include "passes.h"

/* last[k]: position in order[0..n) of the last op that touches the bytes of
 * the parameter or the gradient that update opt[k] reads; -1 if none.
 * Accesses are listed per storage root, so each update scans only its own
 * roots' accesses (from the end). */
typedef struct Access { int pos; size_t lo, hi; } Access;

/* (root, offset, index, bytes) of a tensor an update writes, for grouping by root */
typedef struct Slice { int root; size_t off; int k; size_t bytes; } Slice;

static int slice_cmp(const void *pa, const void *pb)
{
    const Slice *a = pa, *b = pb;
    if (a->root != b->root)
        return (a->root > b->root) - (a->root < b->root);
    return (a->k > b->k) - (a->k < b->k);
}

static void last_touch(const Graph *g, const int *root, const size_t *roff, const int *order, int n,
                       const int *opt, int nopt, int *last)
{
    Access **acc = xcalloc((size_t)g->nt, sizeof *acc);
    int *nacc = xcalloc((size_t)g->nt, sizeof(int)), *cap = xcalloc((size_t)g->nt, sizeof(int));
    for (int j = 0; j < n; j++) {
        const Op *op = &g->ops[order[j]];
        for (int i = 0; i < op->nin + op->nout; i++) {
            int t = i < op->nin ? op->in[i] : op->out[i - op->nin];
            size_t off = roff[t];
            int r = root[t];
            if (nacc[r] == cap[r]) {
                cap[r] = cap[r] ? 2 * cap[r] : 8;
                acc[r] = xrealloc(acc[r], (size_t)cap[r] * sizeof(Access));
            }
            acc[r][nacc[r]++] = (Access){j, off, off + g->t[t].bytes};
        }
    }
    for (int k = 0; k < nopt; k++) {
        const Op *u = &g->ops[opt[k]];
        last[k] = -1;
        for (int w = 0; w < u->nin; w++) {   /* the parameter (slice), the gradient, the bf16 copy */
            if (w == 2 || w == 3)            /* m and v: only the update touches them */
                continue;
            size_t off = roff[u->in[w]];
            int r = root[u->in[w]];
            size_t lo = off, hi = off + g->t[u->in[w]].bytes;
            for (int e = nacc[r] - 1; e >= 0 && acc[r][e].pos > last[k]; e--)
                if (acc[r][e].lo < hi && lo < acc[r][e].hi) {
                    last[k] = acc[r][e].pos;
                    break;
                }
        }
    }
    /* an op of the list never runs before an earlier one of the list that
     * touches the same bytes of its first input (a ZeRO all-gather after its
     * update), or of an adamw_bf16's bf16 copy (input 4: the all-gather of
     * the copy under zero1/zero2) */
    /* (only updates of one root can overlap: grouped by root, in list order) */
    Slice *sl = xmalloc(((size_t)2 * nopt + 1) * sizeof *sl);
    int ns = 0;
    for (int k = 0; k < nopt; k++) {
        const Op *u = &g->ops[opt[k]];
        for (int w = 0; w < (u->kind == OP_ADAMW_BF16 ? 2 : 1); w++) {
            int t = u->in[w ? 4 : 0];
            sl[ns++] = (Slice){root[t], roff[t], k, g->t[t].bytes};
        }
    }
    qsort(sl, (size_t)ns, sizeof *sl, slice_cmp);
    for (int a = 0, b; a < ns; a = b) {
        for (b = a; b < ns && sl[b].root == sl[a].root; b++)
            ;
        for (int x = a + 1; x < b; x++) {
            int k = sl[x].k;
            size_t off = sl[x].off, bytes = sl[x].bytes;
            for (int y = a; y < x; y++) {
                int j = sl[y].k;
                if (sl[y].off < off + bytes && off < sl[y].off + sl[y].bytes && last[j] > last[k])
                    last[k] = last[j];
            }
        }
    }
    free(sl);
    for (int t = 0; t < g->nt; t++)
        free(acc[t]);
    free(acc);
    free(nacc);
    free(cap);
}

/* appends dependency edge a -> b (op ids) */
typedef struct Deps { int *head, *next, *to, n, cap; int *indeg; const char *member; } Deps;

/* (an op outside the ordered list, a refresh op run before the step, orders nothing) */
static void add_edge(Deps *d, int a, int b)
{
    if (a < 0 || a == b || !d->member[a])
        return;
    if (d->n == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 1024;
        d->next = xrealloc(d->next, (size_t)d->cap * sizeof(int));
        d->to = xrealloc(d->to, (size_t)d->cap * sizeof(int));
    }
    d->to[d->n] = b;
    d->next[d->n] = d->head[a];
    d->head[a] = d->n++;
    d->indeg[b]++;
}

/* The order key of each op: its id, but a recompute op takes the smallest
 * key of the ops that read its outputs (transitively), so it runs right
 * before the first op that needs it rather than whenever nothing else is
 * ready. */
static int *recompute_priorities(const Graph *g, const int *root, const int *ops, int n, const char *member)
{
    int *prio = xmalloc((size_t)g->nops * sizeof(int)), any = 0;
    for (int o = 0; o < g->nops; o++) {
        prio[o] = g->ops[o].phase == PH_RECOMPUTE && member[o] ? g->nops : o;
        any |= prio[o] == g->nops;
    }
    for (int changed = 1; changed;) {   /* readers first (a recompute chain's later ops have larger ids): few passes */
        changed = 0;
        for (int k = n - 1; k >= 0; k--) {
            const Op *op = &g->ops[ops[k]];
            for (int i = 0; i < op->nin; i++) {
                int p = g->t[root[op->in[i]]].producer;
                if (p >= 0 && member[p] && g->ops[p].phase == PH_RECOMPUTE && prio[op->id] < prio[p]) {
                    prio[p] = prio[op->id];
                    changed = 1;
                }
            }
        }
    }
    for (int k = 0; k < n; k++)
        if (prio[ops[k]] == g->nops)   /* read by nothing scheduled */
            prio[ops[k]] = ops[k];
    /* with recompute ops, forward ops (some made by fusion, with large ids)
     * all come first: bit 30 ranks the others after them */
    for (int k = 0; any && k < n; k++)
        if (g->ops[ops[k]].phase != PH_FWD)
            prio[ops[k]] |= 1 << 30;
    return prio;
}

/* Orders ops[0..n) (ids, ascending) topologically; writes the order to out. */
static void topo_order(const Graph *g, const int *root, const int *ops, int n, int *out)
{
    Deps d = {0};
    char *member = xcalloc((size_t)g->nops, 1);
    for (int k = 0; k < n; k++)
        member[ops[k]] = 1;
    d.member = member;
    d.head = xmalloc((size_t)g->nops * sizeof(int));
    d.indeg = xcalloc((size_t)g->nops, sizeof(int));
    for (int o = 0; o < g->nops; o++)
        d.head[o] = -1;
    /* per storage root: the last writer and the readers since it */
    int *last_w = xmalloc((size_t)g->nt * sizeof(int));
    int **readers = xcalloc((size_t)g->nt, sizeof(int *));
    int *nreaders = xcalloc((size_t)g->nt, sizeof(int));
    for (int t = 0; t < g->nt; t++)
        last_w[t] = -1;
    for (int k = 0; k < n; k++) {
        const Op *op = &g->ops[ops[k]];
        for (int i = 0; i < op->nin; i++) {
            int r = root[op->in[i]];
            if (r != op->in[i])          /* a view: after the op that made it */
                add_edge(&d, g->t[op->in[i]].producer, op->id);
            if (g->t[r].producer > op->id) {   /* made by an op inserted later: after it */
                add_edge(&d, g->t[r].producer, op->id);
                continue;
            }
            add_edge(&d, last_w[r], op->id);
            readers[r] = xrealloc(readers[r], (size_t)(nreaders[r] + 1) * sizeof(int));
            readers[r][nreaders[r]++] = op->id;
        }
        for (int i = 0; i < op->nout && op_info[op->kind].cls != OPC_VIEW; i++) {
            int r = root[op->out[i]];
            add_edge(&d, last_w[r], op->id);
            for (int j = 0; j < nreaders[r]; j++)
                add_edge(&d, readers[r][j], op->id);
            nreaders[r] = 0;
            last_w[r] = op->id;
        }
    }
    /* Kahn's algorithm, smallest ready key first (a binary heap of ids).
     * An op's key is (priority, id) as prio·M + 2·id, the priority from
     * recompute_priorities (its own id unless it is a recompute op); a
     * collective that reduces (phase comm) gets 2·(id - nops) < 0, so it
     * runs as soon as its inputs are ready and can overlap the compute after
     * it; a gather (ZeRO-3) gets its first reader's key - 1, so it runs just
     * before that reader needs it. */
    int *prio = recompute_priorities(g, root, ops, n, member);
    long M = 2L * g->nops + 2, *key = xmalloc((size_t)g->nops * sizeof(long));
    for (int o = 0; o < g->nops; o++)
        key[o] = g->ops[o].kind == OP_GATHER ? LONG_MAX
               : g->ops[o].phase == PH_COMM ? 2L * (o - g->nops) : (long)prio[o] * M + 2L * o;
    for (int k = 0; k < n; k++) {
        const Op *op = &g->ops[ops[k]];
        for (int i = 0; i < op->nin; i++) {
            int w = g->t[root[op->in[i]]].producer;
            if (w >= 0 && g->ops[w].kind == OP_GATHER && key[op->id] - 1 < key[w])
                key[w] = key[op->id] - 1;
        }
    }
    int *heap = xmalloc((size_t)(n + 1) * sizeof(int)), nh = 0, nout = 0;
#define PUSH(x) do { int i_ = nh++; heap[i_] = (x); \
        while (i_ && key[heap[(i_ - 1) / 2]] > key[heap[i_]]) { int p_ = (i_ - 1) / 2, t_ = heap[p_]; \
            heap[p_] = heap[i_]; heap[i_] = t_; i_ = p_; } } while (0)
    for (int k = 0; k < n; k++)
        if (d.indeg[ops[k]] == 0)
            PUSH(ops[k]);
    while (nh) {
        int top = heap[0];
        heap[0] = heap[--nh];
        for (int i = 0;;) {     /* sift down */
            int l = 2 * i + 1, r = l + 1, m = i;
            if (l < nh && key[heap[l]] < key[heap[m]]) m = l;
            if (r < nh && key[heap[r]] < key[heap[m]]) m = r;
            if (m == i) break;
            int t = heap[m]; heap[m] = heap[i]; heap[i] = t; i = m;
        }
        out[nout++] = top;
        for (int e = d.head[top]; e >= 0; e = d.next[e])
            if (member[d.to[e]] && --d.indeg[d.to[e]] == 0)
                PUSH(d.to[e]);
    }
#undef PUSH
    free(key);
    if (nout != n)
        IR_BUG("schedule: dependency cycle (%d of %d ops ordered)", nout, n);
    for (int t = 0; t < g->nt; t++)
        free(readers[t]);
    free(readers);
    free(nreaders);
    free(last_w);
    free(heap);
    free(prio);
    free(member);
    free(d.head);
    free(d.indeg);
    free(d.next);
    free(d.to);
}

/* A collective that runs with the updates (gate GC_PHASE_OPT: the all-gather
 * of updated ZeRO shards) is ordered with them, after the update it follows. */
static int after_update(const Op *op) { return (int)op->attr[2] == 4; }

void pass_schedule(Graph *g, ScheduleKind kind)
{
    free(g->sched);
    g->sched = xmalloc((size_t)g->nops * sizeof(int));
    g->nsched = 0;
    int *fb = xmalloc((size_t)g->nops * sizeof(int)), nfb = 0;
    int *opt = xmalloc((size_t)g->nops * sizeof(int)), nopt = 0;
    /* the refreshes of the bf16 copies (run only after the host wrote the
       masters, GC_PHASE_PARAMS) open the schedule, in creation order */
    for (int o = 0; o < g->nops; o++)
        if (!g->ops[o].dead && op_param_refresh(g, &g->ops[o]))
            g->sched[g->nsched++] = o;
    for (int o = 0; o < g->nops; o++)
        if (!g->ops[o].dead && !op_param_refresh(g, &g->ops[o]) && (g->ops[o].phase == PH_FWD || g->ops[o].phase == PH_BWD ||
                                g->ops[o].phase == PH_RECOMPUTE ||
                                (g->ops[o].phase == PH_COMM && !after_update(&g->ops[o]))))
            fb[nfb++] = o;
    int *ordered = xmalloc((size_t)(nfb ? nfb : 1) * sizeof(int));
    size_t *roff;
    int *root = graph_roots(g, &roff);     /* the schedule changes no view */
    topo_order(g, root, fb, nfb, ordered);
    free(fb);
    fb = ordered;
    for (int o = 0; o < g->nops; o++)
        if (!g->ops[o].dead && (g->ops[o].phase == PH_OPT || (g->ops[o].phase == PH_COMM && after_update(&g->ops[o]))))
            opt[nopt++] = o;
    if (kind == SCHED_PLAIN) {
        for (int k = 0; k < nfb; k++)
            g->sched[g->nsched++] = fb[k];
        for (int k = 0; k < nopt; k++)
            g->sched[g->nsched++] = opt[k];
        g->schedule_name = "plain";
    } else {
        int *last = xmalloc((size_t)(nopt ? nopt : 1) * sizeof(int));
        last_touch(g, root, roff, fb, nfb, opt, nopt, last);
        /* placed in order of layer, then creation, so each group is consecutive */
        int *by_layer = xmalloc((size_t)(nopt ? nopt : 1) * sizeof(int));
        Slice *sl = xmalloc(((size_t)nopt + 1) * sizeof *sl);   /* (layer, -, k): sorted */
        for (int k = 0; k < nopt; k++)
            sl[k] = (Slice){g->ops[opt[k]].layer, 0, k, 0};
        qsort(sl, (size_t)nopt, sizeof *sl, slice_cmp);
        for (int k = 0; k < nopt; k++)
            by_layer[k] = sl[k].k;
        free(sl);
        /* a layer's updates after the last op touching any of them */
        for (int a = 0, b; a < nopt; a = b) {
            int mx = INT_MIN;
            for (b = a; b < nopt && g->ops[opt[by_layer[b]]].layer == g->ops[opt[by_layer[a]]].layer; b++)
                mx = last[by_layer[b]] > mx ? last[by_layer[b]] : mx;
            for (int i = a; i < b; i++)
                last[by_layer[i]] = mx;
        }
        /* each update right after the last op touching its slice (untouched: first) */
        for (int k = 0; k < nopt; k++)
            if (last[k] < 0)
                g->sched[g->nsched++] = opt[k];
        int *first_at = xmalloc((size_t)(nfb + 1) * sizeof(int)), *next = xmalloc((size_t)(nopt + 1) * sizeof(int));
        for (int j = 0; j < nfb; j++)
            first_at[j] = -1;
        for (int i = nopt - 1; i >= 0; i--) {   /* lists in by_layer order */
            int k = by_layer[i];
            if (last[k] >= 0) {
                next[k] = first_at[last[k]];
                first_at[last[k]] = k;
            }
        }
        free(by_layer);
        for (int j = 0; j < nfb; j++) {
            g->sched[g->nsched++] = fb[j];
            for (int k = first_at[j]; k >= 0; k = next[k])   /* updates placed after fb[j] */
                g->sched[g->nsched++] = opt[k];
        }
        free(first_at);
        free(next);
        free(last);
        g->schedule_name = "fused-opt";
        for (int t = 0; t < g->nt && g->micro_batches <= 1 && !g->grads_persist; t++)   /* gradients (and their
                                                  views); accumulated over micro-batches, they stay */
            if (g->t[t].region == RG_GRADS)
                g->t[t].region = RG_ARENA;
    }
    for (int k = 0; k < g->nsched; k++)
        g->ops[g->sched[k]].step = k;
    free(fb);
    free(opt);
    free(root);
    free(roff);
}
