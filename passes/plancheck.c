/* plancheck.c — an independent checker of a finished memory plan.
 *
 * Shares no code with liveness.c or memplan.c: it re-derives everything it
 * needs from the graph and the schedule. A plan is sound when
 *   1. every tensor that is live (and every persistent root) lies inside its
 *      region, planned roots are LIVE_ALIGN-aligned. Persistent: every root
 *      of params, grads and optstate, and the roots of kind param, grad or
 *      optstate of the host region (masters, gradient copies, moments);
 *      planned: the arena's roots and the host region's others (activation
 *      copies);
 *   2. a view has its root's region, the offset root + view_offset, lies
 *      inside the tensor it views, and lives within its root's interval;
 *   3. intervals cover the schedule: each op's inputs and outputs (and the
 *      tensors above them) are live at its step; persistent roots live for the
 *      whole schedule, inputs from step 0, the loss and the --sample row
 *      (g->sample_logits) to the last step; no op
 *      accumulates into arena storage that nothing has written yet;
 *   4. an inplace_of link is one the op at the child's first step allows
 *      (output 0 over an input whose root is the parent, op_inplace_ok, same
 *      offset, parent.last == child.first, never the loss or the sample row);
 *   5. no two live roots of a region overlap in bytes while their intervals
 *      intersect, except a child and its in-place parent at the handover step
 *      (with --no-reuse: no two arena roots overlap at all);
 *   6. each region's lower bound, recomputed (docs/plan.md), equals
 *      g->region_lower_bound[] and is <= the region's size (the host
 *      region's: its persistent bytes plus the bound of its planned roots);
 *   7. with micro-batches, no parameter gradient lies in the arena (they
 *      accumulate across the runs of the step);
 *   8. no op writes bytes through one tensor while another tensor of the same
 *      storage root, neither above nor below it in the view tree (an alias:
 *      two gradients autodiff let share one buffer), still has to read the
 *      value those bytes held: a read of V at step r fails when an earlier
 *      write at step s <= r (s == r: the reading op itself, unless it is an
 *      elementwise op allowed in place over exactly V's bytes) went through
 *      such a tensor W, over bytes something had already written before s,
 *      and no write through V or its view ancestors/descendants covering V
 *      came between. "Above or below" is judged after counting a gradient
 *      of a forward view as the gradient of the view's forward root, when
 *      that is its view ancestor (gradient_owners: both are one gradient's
 *      bytes). (The rule autodiff follows so that this holds is stated at
 *      may_share in autodiff.c.)
 *   9. host memory and its copies (passes/offload.c): only copies
 *      (offload: device -> host, prefetch: host -> device, the same bytes and
 *      dtype), their waits and host updates (adamw on host tensors only)
 *      touch the host region; each copy with a slot (>= 0, below
 *      g->copy_slots, each slot once) has one copy_wait of that slot later in
 *      the schedule, on its device and host tensors, run in the same part of
 *      the step (fwd, bwd, opt, or the params refresh); a copy without one
 *      (slot -1) is a refresh of weights (into their host master, or a
 *      host-cast bf16 copy to the device), on the compute stream. Between a
 *      copy and its wait (the copy is in flight) no op writes its source's
 *      bytes, and none reads or writes its destination's bytes, but the ops
 *      that wait for the copy themselves: the host update of a gradient copy
 *      and the prefetch of an activation copy (the copy is the producer of
 *      what they read).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "passes.h"

#define LIVE_ALIGN ((size_t)256)

typedef struct Item { size_t lo, hi; int id; } Item;
typedef struct Event { int step; int add; size_t bytes; } Event;

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int top_of(const Graph *g, int t, size_t *off)
{
    size_t o = 0;
    for (int guard = 0; g->t[t].view_of >= 0 && guard <= g->nt; guard++) {
        o += g->t[t].view_offset;
        t = g->t[t].view_of;
    }
    *off = o;
    return t;
}

/* The walks up the view chains, done once (a residual stream's gradient is a
 * chain as deep as the model): per tensor its top (-1 where the chain is
 * broken: out of range or a cycle; the plain walks then report it), the
 * offset in it, and the intersection [lo, hi] of the intervals along it. */
typedef struct Memo { int *top, *lo, *hi; size_t *off; } Memo;

static void memo_fill(const Graph *g, Memo *m)
{
    int n = g->nt;
    m->top = malloc(((size_t)n + 1) * sizeof *m->top);
    m->lo = malloc(((size_t)n + 1) * sizeof *m->lo);
    m->hi = malloc(((size_t)n + 1) * sizeof *m->hi);
    m->off = malloc(((size_t)n + 1) * sizeof *m->off);
    int *path = malloc(((size_t)n + 1) * sizeof *path);
    char *state = calloc((size_t)n + 1, 1);   /* 1: on the path, 2: done */
    if (!m->top || !m->lo || !m->hi || !m->off || !path || !state)
        IR_BUG("out of memory");
    for (int i = 0; i < n; i++) {
        int k = 0, u = i, base = -1;          /* base: a done tensor, or -1 broken */
        while (state[u] == 0) {
            state[u] = 1;
            path[k++] = u;
            int v = g->t[u].view_of;
            if (v < 0) {                      /* a root */
                const Tensor *t = &g->t[u];
                m->top[u] = u, m->off[u] = 0, m->lo[u] = t->first, m->hi[u] = t->last;
                state[u] = 2;
                k--;
                base = u;
                break;
            }
            if (v >= n || v == u || state[v] == 1) {
                base = -1;
                break;
            }
            u = v;
        }
        if (k > 0 && state[u] == 2 && u != path[k - 1])
            base = u;
        while (k > 0) {
            int w = path[--k];
            const Tensor *t = &g->t[w];
            if (base < 0 || m->top[base] < 0) {
                m->top[w] = -1;
            } else {
                m->top[w] = m->top[base];
                m->off[w] = m->off[base] + t->view_offset;
                m->lo[w] = t->first > m->lo[base] ? t->first : m->lo[base];
                m->hi[w] = t->last < m->hi[base] ? t->last : m->hi[base];
            }
            state[w] = 2;
            base = w;
        }
    }
    free(path);
    free(state);
}

static void memo_free(Memo *m)
{
    free(m->top);
    free(m->lo);
    free(m->hi);
    free(m->off);
}

/* top_of through the memo */
static int top_at(const Graph *g, const Memo *m, int t, size_t *off)
{
    if (m->top[t] < 0)
        return top_of(g, t, off);
    *off = m->off[t];
    return m->top[t];
}

static int live(const Tensor *t) { return t->first >= 0 && t->last >= t->first; }

/* A root that lives for the whole step at a packed offset (rule 1). */
static int persistent(const Tensor *t)
{
    if (t->region == RG_HOST)
        return t->kind == TK_PARAM || t->kind == TK_GRAD || t->kind == TK_OPTSTATE;
    return t->region != RG_ARENA;
}

static int overlap_time(const Tensor *a, const Tensor *b)
{
    return a->first <= b->last && b->first <= a->last;
}

/* 1 and 2: placement of each tensor. */
static int check_places(const Graph *g, const Memo *m, char *err, size_t errlen)
{
    for (int i = 0; i < g->nt; i++) {
        const Tensor *t = &g->t[i];
        if ((unsigned)t->region >= RG_COUNT)
            return fail(err, errlen, "tensor %s: bad region %d", t->name, (int)t->region);
        int fixed = persistent(t);   /* a view: its kind is its root's */
        if ((live(t) || fixed) &&
            (t->offset > g->region_bytes[t->region] ||
             t->bytes > g->region_bytes[t->region] - t->offset))
            return fail(err, errlen, "tensor %s: [%zu, %zu) outside region %s of %zu bytes",
                        t->name, t->offset, t->offset + t->bytes, region_name(t->region),
                        g->region_bytes[t->region]);
        if (t->view_of < 0) {
            if (!fixed && live(t) && t->offset % LIVE_ALIGN)
                return fail(err, errlen, "tensor %s: %s offset %zu not %zu-aligned",
                            t->name, region_name(t->region), t->offset, LIVE_ALIGN);
            continue;
        }
        if (t->view_of >= g->nt || t->view_of == i)
            return fail(err, errlen, "view %s: bad view_of %d", t->name, t->view_of);
        const Tensor *p = &g->t[t->view_of];
        size_t off;
        const Tensor *r = &g->t[top_at(g, m, i, &off)];
        if (r->view_of >= 0)
            return fail(err, errlen, "view %s: view_of chain has a cycle", t->name);
        if (t->region != r->region)
            return fail(err, errlen, "view %s in %s but its root %s in %s", t->name,
                        region_name(t->region), r->name, region_name(r->region));
        if (persistent(t) != persistent(r))
            return fail(err, errlen, "view %s (%s) of %s (%s): one persistent, the other planned", t->name,
                        tensor_kind_name(t->kind), r->name, tensor_kind_name(r->kind));
        if (t->offset != r->offset + off)
            return fail(err, errlen, "view %s: offset %zu, expected root %s at %zu + %zu",
                        t->name, t->offset, r->name, r->offset, off);
        if (t->view_offset > p->bytes || t->bytes > p->bytes - t->view_offset)
            return fail(err, errlen, "view %s: bytes [%zu, %zu) outside %s (%zu bytes)",
                        t->name, t->view_offset, t->view_offset + t->bytes, p->name, p->bytes);
        /* a rank's shard: the last rank's must lie inside too (with tp: the last of a dp group) */
        int shards = graph_data_ranks(g);
        double last_end = (double)t->view_offset + (double)(shards - 1) * (double)t->rank_stride + (double)t->bytes;
        if (t->rank_stride && last_end > (double)p->bytes)
            return fail(err, errlen, "view %s: rank %d's shard ends at %.0f, outside %s (%zu bytes)", t->name,
                        shards - 1, last_end, p->name, p->bytes);
        if (live(t) && !(live(r) && r->first <= t->first && t->last <= r->last))
            return fail(err, errlen, "view %s live [%d, %d] outside root %s [%d, %d]",
                        t->name, t->first, t->last, r->name, r->first, r->last);
    }
    return 0;
}

static int covers(const Graph *g, int t, int s, const char *what, const Op *op, char *err,
                  size_t errlen)
{
    for (int guard = 0; t >= 0 && guard <= g->nt; guard++, t = g->t[t].view_of) {
        const Tensor *x = &g->t[t];
        if (!(x->first <= s && s <= x->last))
            return fail(err, errlen, "tensor %s (%s of op %s at step %d) live only [%d, %d]",
                        x->name, what, op->name, s, x->first, x->last);
    }
    return 0;
}

/* 3b: reused storage holds garbage, so an arena tensor is written (not
 * accumulated into) before any op accumulates into it: some earlier op wrote
 * a tensor of the same root without accumulating. */
static int check_first_writes(const Graph *g, const Memo *m, char *err, size_t errlen)
{
    char *written = calloc((size_t)g->nt + 1, 1);
    if (!written)
        IR_BUG("out of memory");
    int rc = 0;
    for (int s = 0; s < g->nsched && !rc; s++) {
        const Op *op = &g->ops[g->sched[s]];
        for (int j = 0; j < op->nout && !rc; j++) {
            size_t off;
            int r = top_at(g, m, op->out[j], &off);
            if (persistent(&g->t[r]))
                continue;
            if (!(op->acc >> j & 1))
                written[r] = 1;
            else if (!written[r])
                rc = fail(err, errlen, "op %s at step %d accumulates into %s before anything "
                          "writes it", op->name, s, g->t[op->out[j]].name);
        }
    }
    free(written);
    return rc;
}

/* 3: the intervals cover every use. */
static int check_intervals(const Graph *g, const Memo *m, char *err, size_t errlen)
{
    for (int s = 0; s < g->nsched; s++) {
        if (g->sched[s] < 0 || g->sched[s] >= g->nops)
            return fail(err, errlen, "schedule step %d: bad op id %d", s, g->sched[s]);
        const Op *op = &g->ops[g->sched[s]];
        for (int i = 0; i < op->nin + op->nout; i++) {
            int t = i < op->nin ? op->in[i] : op->out[i - op->nin];
            if (m->top[t] >= 0 && m->lo[t] <= s && s <= m->hi[t])
                continue;                     /* the whole chain is live at s */
            if (covers(g, t, s, i < op->nin ? "input" : "output", op, err, errlen))
                return -1;
        }
    }
    if (g->nsched == 0)
        return 0;
    int end = g->nsched - 1;
    for (int i = 0; i < g->nt; i++) {
        const Tensor *t = &g->t[i];
        if (t->view_of >= 0)
            continue;
        if (persistent(t) && (t->first != 0 || t->last != end))
            return fail(err, errlen, "persistent %s live [%d, %d], not [0, %d]", t->name,
                        t->first, t->last, end);
        if (t->region == RG_ARENA && t->kind == TK_INPUT && t->first != 0)
            return fail(err, errlen, "input %s first live at step %d, not 0", t->name,
                        t->first);
    }
    int out[2] = {g->loss, g->sample_logits};
    for (int k = 0; k < 2; k++)
        if (out[k] >= 0) {
            size_t off;
            const Tensor *r = &g->t[top_at(g, m, out[k], &off)];
            if (r->last != end)
                return fail(err, errlen, "%s %s live until step %d, not %d", k ? "sample row" : "loss", r->name,
                            r->last, end);
        }
    return 0;
}

/* 1 when op reads, as input i allowed in place, a view of `parent` that
 * covers it all from byte 0. */
static int op_allows(const Graph *g, const Memo *m, const Op *op, int parent)
{
    for (int i = 0; i < op->nin; i++) {
        size_t off;
        int r = top_at(g, m, op->in[i], &off);
        if (r == parent && off == 0 && g->t[op->in[i]].bytes == g->t[r].bytes &&
            op_inplace_ok(g, op, i))
            return 1;
    }
    return 0;
}

/* 4: in-place links. */
static int check_inplace(const Graph *g, const Memo *m, char *err, size_t errlen)
{
    size_t off;
    int loss_root = g->loss >= 0 ? top_at(g, m, g->loss, &off) : -1;
    int row_root = g->sample_logits >= 0 ? top_at(g, m, g->sample_logits, &off) : -1;
    for (int i = 0; i < g->nt; i++) {
        const Tensor *c = &g->t[i];
        if (c->inplace_of < 0)
            continue;
        if (g->no_reuse)
            return fail(err, errlen, "tensor %s in place of another under --no-reuse", c->name);
        if (c->inplace_of >= g->nt || c->inplace_of == i)
            return fail(err, errlen, "tensor %s: bad inplace_of %d", c->name, c->inplace_of);
        const Tensor *p = &g->t[c->inplace_of];
        if (c->view_of >= 0 || p->view_of >= 0 || c->region != RG_ARENA ||
            p->region != RG_ARENA)
            return fail(err, errlen, "in place %s over %s: both must be arena roots", c->name,
                        p->name);
        if (c->inplace_of == loss_root || c->inplace_of == row_root)
            return fail(err, errlen, "in place %s over the %s %s", c->name,
                        c->inplace_of == loss_root ? "loss" : "sample row", p->name);
        if (!live(c) || !live(p) || p->last != c->first)
            return fail(err, errlen, "in place %s [%d, %d] over %s [%d, %d]: parent must end "
                        "where the child starts", c->name, c->first, c->last, p->name,
                        p->first, p->last);
        if (c->offset != p->offset)
            return fail(err, errlen, "in place %s at %zu but parent %s at %zu", c->name,
                        c->offset, p->name, p->offset);
        if (c->first >= g->nsched)
            return fail(err, errlen, "in place %s: step %d past the schedule", c->name, c->first);
        const Op *op = &g->ops[g->sched[c->first]];
        if (op->nout < 1 || op->out[0] != i || !op_allows(g, m, op, c->inplace_of))
            return fail(err, errlen, "in place %s over %s: op %s at step %d does not allow it",
                        c->name, p->name, op->name, c->first);
    }
    return 0;
}

static int item_cmp(const void *a, const void *b)
{
    const Item *x = a, *y = b;
    if (x->lo != y->lo)
        return x->lo < y->lo ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int handover(const Graph *g, int a, int b)
{
    const Tensor *x = &g->t[a], *y = &g->t[b];
    return (y->inplace_of == a && x->last == y->first) ||
           (x->inplace_of == b && y->last == x->first);
}

/* 5: no overlap in bytes and steps (sorted by offset, each against the ones
 * that start inside it). */
static int check_overlap(const Graph *g, Region r, Item *items, char *err, size_t errlen)
{
    int n = 0;
    for (int i = 0; i < g->nt; i++) {
        const Tensor *t = &g->t[i];
        if (t->view_of < 0 && t->region == r && (live(t) || persistent(t)) && t->bytes > 0)
            items[n++] = (Item){t->offset, t->offset + t->bytes, i};
    }
    qsort(items, (size_t)n, sizeof *items, item_cmp);
    int strict = r == RG_ARENA || r == RG_HOST ? g->no_reuse : 1;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n && items[j].lo < items[i].hi; j++) {
            const Tensor *a = &g->t[items[i].id], *b = &g->t[items[j].id];
            if (strict || (overlap_time(a, b) && !handover(g, a->id, b->id)))
                return fail(err, errlen, "%s: %s [%zu, %zu) steps [%d, %d] overlaps %s "
                            "[%zu, %zu) steps [%d, %d]", region_name(r), a->name,
                            items[i].lo, items[i].hi, a->first, a->last, b->name,
                            items[j].lo, items[j].hi, b->first, b->last);
        }
    return 0;
}

static int event_cmp(const void *a, const void *b)
{
    const Event *x = a, *y = b;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    return x->add - y->add;   /* releases (step last+1) before allocations */
}

/* 6: the bound of the planned roots of region r (the arena; the host
 * region's activation copies): in-place chains merged into one storage over
 * the union of their intervals, sizes rounded up, the largest live total at
 * a step. */
static size_t planned_bound(const Graph *g, Region r, int *head, Event *ev)
{
    for (int i = 0; i < g->nt; i++)
        head[i] = -1;
    for (int i = 0; i < g->nt; i++) {   /* chain ends, each link followed once */
        int h = i, guard = 0;
        while (head[h] < 0 && g->t[h].inplace_of >= 0 && guard++ <= g->nt)
            h = g->t[h].inplace_of;
        int end = head[h] >= 0 ? head[h] : h;
        for (int u = i, k = 0; u != h && k <= guard; k++) {
            int next = g->t[u].inplace_of;
            head[u] = end;
            u = next;
        }
        if (head[h] < 0 && g->t[h].inplace_of < 0)
            head[h] = h;
    }
    for (int i = 0; i < g->nt; i++)   /* a cycle (check_inplace rules them out) */
        if (head[i] < 0)
            IR_BUG("plan check: in-place links of %s form a cycle", g->t[i].name);
    int *first = malloc(((size_t)g->nt + 1) * sizeof *first);
    int *last = malloc(((size_t)g->nt + 1) * sizeof *last);
    size_t *size = calloc((size_t)g->nt + 1, sizeof *size);
    if (!first || !last || !size)
        IR_BUG("out of memory");
    for (int i = 0; i < g->nt; i++)
        first[i] = -1, last[i] = -2;
    for (int i = 0; i < g->nt; i++) {
        const Tensor *t = &g->t[i];
        if (t->view_of >= 0 || t->region != r || persistent(t) || !live(t))
            continue;
        int h = head[i];
        size_t sz = (t->bytes + LIVE_ALIGN - 1) / LIVE_ALIGN * LIVE_ALIGN;
        if (first[h] < 0 || t->first < first[h])
            first[h] = t->first;
        if (t->last > last[h])
            last[h] = t->last;
        if (sz > size[h])
            size[h] = sz;
    }
    int n = 0;
    for (int h = 0; h < g->nt; h++)
        if (first[h] >= 0) {
            ev[n++] = (Event){first[h], 1, size[h]};
            ev[n++] = (Event){last[h] + 1, 0, size[h]};
        }
    qsort(ev, (size_t)n, sizeof *ev, event_cmp);
    size_t cur = 0, peak = 0;
    for (int i = 0; i < n; i++) {
        cur = ev[i].add ? cur + ev[i].bytes : cur - ev[i].bytes;
        if (cur > peak)
            peak = cur;
    }
    free(first);
    free(last);
    free(size);
    return peak;
}

static int check_bounds(const Graph *g, int *head, Event *ev, char *err, size_t errlen)
{
    size_t lb[RG_COUNT] = {0};
    for (int i = 0; i < g->nt; i++)
        if (g->t[i].view_of < 0 && persistent(&g->t[i]))
            lb[g->t[i].region] += g->t[i].bytes;
    lb[RG_ARENA] = planned_bound(g, RG_ARENA, head, ev);
    lb[RG_HOST] += planned_bound(g, RG_HOST, head, ev);
    for (int r = 0; r < RG_COUNT; r++) {
        if (lb[r] != g->region_lower_bound[r])
            return fail(err, errlen, "region %s: lower bound %zu, recomputed %zu",
                        region_name((Region)r), g->region_lower_bound[r], lb[r]);
        if (g->region_bytes[r] < lb[r])
            return fail(err, errlen, "region %s: %zu bytes, below its lower bound %zu",
                        region_name((Region)r), g->region_bytes[r], lb[r]);
    }
    return 0;
}

/* 8: alias reads (see the header). One byte-range access of a tensor at a step. */
typedef struct Access { int root, step, t, in; size_t lo, hi; } Access;

static int access_cmp(const void *a, const void *b)
{
    const Access *x = a, *y = b;
    if (x->root != y->root)
        return x->root < y->root ? -1 : 1;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    return (x->t > y->t) - (x->t < y->t);
}

/* The view forest's pre/post order numbers (an ancestor test in O(1)). */
static void view_order(const Graph *g, int *tin, int *tout)
{
    int n = g->nt, clock = 0;
    int *head = malloc(((size_t)n + 1) * sizeof *head), *next = malloc(((size_t)n + 1) * sizeof *next);
    int *stack = malloc(((size_t)n + 1) * sizeof *stack), *it = malloc(((size_t)n + 1) * sizeof *it);
    if (!head || !next || !stack || !it)
        IR_BUG("out of memory");
    for (int t = 0; t < n; t++)
        head[t] = -1;
    for (int t = n - 1; t >= 0; t--)
        if (g->t[t].view_of >= 0) {
            next[t] = head[g->t[t].view_of];
            head[g->t[t].view_of] = t;
        }
    for (int r = 0; r < n; r++) {
        if (g->t[r].view_of >= 0)
            continue;
        int k = 0;
        stack[k++] = r;
        tin[r] = clock++;
        it[r] = head[r];
        while (k > 0) {
            int u = stack[k - 1], c = it[u];
            if (c < 0) {
                tout[u] = clock++;
                k--;
                continue;
            }
            it[u] = next[c];
            tin[c] = clock++;
            it[c] = head[c];
            stack[k++] = c;
        }
    }
    free(head);
    free(next);
    free(stack);
    free(it);
}

static int family(const int *tin, const int *tout, int a, int b)
{
    return (tin[a] <= tin[b] && tout[b] <= tout[a]) || (tin[b] <= tin[a] && tout[a] <= tout[b]);
}

/* The tensor an access of t counts as going through, for the family test:
 * a gradient is one per forward storage root, and the gradient of a forward
 * view F (a reshape, a slice, a layer of a stack) is the same view of the
 * gradient of F's root (autodiff's grad_of), so bytes written through it are
 * that gradient's bytes, not an alias's. So t, after climbing same-bytes views
 * that are nobody's gradient (a matmul's rank-2 view of a gradient), counts as
 * the gradient of its forward tensor's storage root, when that gradient is a
 * view ancestor of it. Two gradients autodiff let share one buffer (may_share)
 * are gradients of different forward roots and stay apart. With --precision
 * bf16 a parameter's forward views are views of its bf16 copy (precision.c),
 * which has no gradient: the master's counts (the copy's producer is the cast
 * that reads the master). */
static void gradient_owners(const Graph *g, const int *tin, const int *tout, int *owner)
{
    int n = g->nt;
    int *fwd = malloc(((size_t)n + 1) * sizeof *fwd);    /* the forward tensor of a gradient */
    if (!fwd)
        IR_BUG("out of memory");
    for (int t = 0; t < n; t++)
        fwd[t] = -1;
    for (int t = 0; t < n; t++)
        if (g->t[t].grad >= 0 && g->t[t].grad < n && fwd[g->t[t].grad] < 0)
            fwd[g->t[t].grad] = t;
    for (int t = 0; t < n; t++) {
        int u = t;
        for (int guard = 0; guard <= n && fwd[u] < 0; guard++) {
            int p = g->t[u].view_of;
            if (p < 0 || p >= n || g->t[u].view_offset != 0 || g->t[u].bytes != g->t[p].bytes)
                break;
            u = p;
        }
        owner[t] = t;
        if (fwd[u] < 0)
            continue;
        size_t off;
        int r = top_of(g, fwd[u], &off), gr = g->t[r].grad, pr = g->t[r].producer;
        if (gr < 0 && g->t[r].kind == TK_PARAM && pr >= 0 && pr < g->nops && g->ops[pr].kind == OP_COPY &&
            g->ops[pr].nin == 1)      /* a bf16 copy (precision.c): the gradient is its master's */
            gr = g->t[g->ops[pr].in[0]].grad;
        if (gr >= 0 && gr < n && tin[gr] <= tin[t] && tout[t] <= tout[gr])
            owner[t] = gr;
    }
    free(fwd);
}

/* The reads and writes of the schedule (an accumulation reads its output too). */
static int collect_accesses(const Graph *g, const Memo *m, Access *rd, Access *wr, int *nwr)
{
    int nr = 0, nw = 0;
    for (int s = 0; s < g->nsched; s++) {
        const Op *op = &g->ops[g->sched[s]];
        if (op_info[op->kind].cls == OPC_VIEW)
            continue;                         /* names bytes, moves none */
        for (int i = 0; i < op->nin + op->nout; i++) {
            int j = i - op->nin, t = i < op->nin ? op->in[i] : op->out[j];
            size_t off;
            int r = top_at(g, m, t, &off);
            Access a = {r, s, t, i < op->nin ? i : -1, off, off + g->t[t].bytes};
            if (!g->t[t].bytes)
                continue;
            if (j < 0 || (op->acc >> j & 1))
                rd[nr++] = a;
            if (j >= 0)
                wr[nw++] = a;
        }
    }
    *nwr = nw;
    return nr;
}

static int check_alias_reads(const Graph *g, const Memo *m, char *err, size_t errlen)
{
    size_t nacc = 0;
    for (int s = 0; s < g->nsched; s++)
        nacc += (size_t)g->ops[g->sched[s]].nin + (size_t)g->ops[g->sched[s]].nout;
    int *tin = malloc(((size_t)g->nt + 1) * sizeof *tin), *tout = malloc(((size_t)g->nt + 1) * sizeof *tout);
    Access *rd = malloc((nacc + 1) * sizeof *rd), *wr = malloc((nacc + 1) * sizeof *wr);
    char *est = malloc(nacc + 1);
    int *owner = malloc(((size_t)g->nt + 1) * sizeof *owner);
    if (!tin || !tout || !rd || !wr || !est || !owner)
        IR_BUG("out of memory");
    view_order(g, tin, tout);
    gradient_owners(g, tin, tout, owner);
    int nw, nr = collect_accesses(g, m, rd, wr, &nw), rc = 0;
    qsort(rd, (size_t)nr, sizeof *rd, access_cmp);
    qsort(wr, (size_t)nw, sizeof *wr, access_cmp);
    /* est[j]: some earlier step wrote bytes of write j (the bytes held a value) */
    for (int j = 0, w0 = 0; j < nw; j++) {
        if (wr[j].root != wr[w0].root)
            w0 = j;
        est[j] = 0;
        for (int i = w0; i < j && wr[i].step < wr[j].step && !est[j]; i++)
            est[j] = wr[i].lo < wr[j].hi && wr[j].lo < wr[i].hi;
    }
    for (int k = 0, w0 = 0; k < nr && !rc; k++) {
        const Access *a = &rd[k];
        while (w0 < nw && wr[w0].root < a->root)
            w0++;
        int j = w0;
        while (j < nw && wr[j].root == a->root && wr[j].step <= a->step)
            j++;
        for (j--; j >= w0; j--) {
            const Access *w = &wr[j];
            if (family(tin, tout, owner[w->t], owner[a->t])) {
                if (w->step < a->step && w->lo <= a->lo && a->hi <= w->hi)
                    break;                    /* V's value written again since */
                continue;
            }
            if (!(w->lo < a->hi && a->lo < w->hi) || !est[j])
                continue;
            const Op *op = &g->ops[g->sched[a->step]];
            if (w->step == a->step && a->in >= 0 && w->lo == a->lo && w->hi == a->hi &&
                op_inplace_ok(g, op, a->in))
                continue;                     /* elementwise in place over the same bytes */
            rc = fail(err, errlen, "op %s at step %d writes %s over bytes of %s, an alias still to be read "
                      "(by op %s at step %d)", g->ops[g->sched[w->step]].name, w->step, g->t[w->t].name,
                      g->t[a->t].name, op->name, a->step);
            break;
        }
    }
    free(tin);
    free(tout);
    free(rd);
    free(wr);
    free(est);
    free(owner);
    return rc;
}

/* 9: host memory and copies (see the header). */
static int is_copy(const Op *op) { return op->kind == OP_OFFLOAD || op->kind == OP_PREFETCH; }

static int is_host_update(const Graph *g, const Op *op)
{
    return ((op->kind == OP_ADAMW || op->kind == OP_ADAMW_BF16) && g->t[op->in[0]].region == RG_HOST) ||
           (op->kind == OP_COPY && g->t[op->in[0]].region == RG_HOST);   /* the host cast of bf16 masters */
}

/* The part of the step an op runs in, as the emitted step gates it: 1 fwd,
 * 2 bwd (recompute too), 4 opt, 8 the params refresh; a collective by its
 * gate attribute. */
static int gate_of(const Graph *g, const Op *op)
{
    if (op_param_refresh(g, op))
        return 8;
    if (op->phase == PH_COMM)
        return (int)op->attr[2];
    return op->phase == PH_OPT ? 4 : op->phase == PH_BWD || op->phase == PH_RECOMPUTE ? 2 : 1;
}

/* One access of a tensor's bytes at a step, by root (sorted). */
typedef struct Hit { int root, step, write; size_t lo, hi; } Hit;

static int hit_cmp(const void *a, const void *b)
{
    const Hit *x = a, *y = b;
    if (x->root != y->root)
        return x->root < y->root ? -1 : 1;
    return (x->step > y->step) - (x->step < y->step);
}

/* The first hit of root r after step s (hits sorted), or n. */
static int first_hit(const Hit *h, int n, int r, int s)
{
    int a = 0, b = n;
    while (a < b) {
        int mid = (a + b) / 2;
        if (h[mid].root < r || (h[mid].root == r && h[mid].step <= s))
            a = mid + 1;
        else
            b = mid;
    }
    return a;
}

static int check_copies(const Graph *g, const Memo *m, char *err, size_t errlen)
{
    int nslots = g->copy_slots, rc = 0;
    int *copy_at = malloc(((size_t)nslots + 1) * sizeof *copy_at), *wait_at = malloc(((size_t)nslots + 1) * sizeof *wait_at);
    size_t nacc = 0;
    for (int s = 0; s < g->nsched; s++)
        nacc += (size_t)g->ops[g->sched[s]].nin + (size_t)g->ops[g->sched[s]].nout;
    Hit *hits = malloc((nacc + 1) * sizeof *hits);
    if (!copy_at || !wait_at || !hits)
        IR_BUG("out of memory");
    for (int k = 0; k < nslots; k++)
        copy_at[k] = wait_at[k] = -1;
    int nh = 0;
    for (int s = 0; s < g->nsched && !rc; s++) {
        const Op *op = &g->ops[g->sched[s]];
        int host = 0, all_host = 1;
        for (int i = 0; i < op->nin + op->nout; i++) {
            int t = i < op->nin ? op->in[i] : op->out[i - op->nin];
            size_t off;
            int r = top_at(g, m, t, &off);
            host |= g->t[t].region == RG_HOST;
            all_host &= g->t[t].region == RG_HOST;
            if (op_info[op->kind].cls != OPC_VIEW && g->t[t].bytes)
                hits[nh++] = (Hit){r, s, i >= op->nin, off, off + g->t[t].bytes};   /* outputs write (accumulating ones too) */
        }
        if (is_host_update(g, op) && !all_host)
            rc = fail(err, errlen, "host update %s at step %d reads device memory", op->name, s);
        else if (host && !is_copy(op) && op->kind != OP_COPY_WAIT && !is_host_update(g, op))
            rc = fail(err, errlen, "op %s at step %d touches the host region; only copies and host updates may",
                      op->name, s);
        if (rc || (!is_copy(op) && op->kind != OP_COPY_WAIT))
            continue;
        int slot = (int)op->attr[0];
        if (op->kind == OP_COPY_WAIT) {
            if (slot < 0 || slot >= nslots || wait_at[slot] >= 0)
                rc = fail(err, errlen, "copy_wait %s at step %d: slot %d unknown or waited twice", op->name, s, slot);
            else
                wait_at[slot] = s;
            continue;
        }
        const Tensor *in = &g->t[op->in[0]], *out = &g->t[op->out[0]];
        int to_host = op->kind == OP_OFFLOAD;
        if ((in->region == RG_HOST) == to_host || (out->region == RG_HOST) != to_host)
            rc = fail(err, errlen, "%s %s at step %d copies %s (%s) into %s (%s)", op_info[op->kind].name, op->name,
                      s, in->name, region_name(in->region), out->name, region_name(out->region));
        else if (in->bytes != out->bytes || in->dtype != out->dtype)
            rc = fail(err, errlen, "%s %s at step %d: %s and %s differ in bytes or dtype", op_info[op->kind].name,
                      op->name, s, in->name, out->name);
        else if (slot < 0 && !(out->kind == TK_PARAM && in->kind == TK_PARAM))
            rc = fail(err, errlen, "%s %s at step %d has no slot but is no refresh of weights", op_info[op->kind].name,
                      op->name, s);
        else if (slot >= nslots || (slot >= 0 && copy_at[slot] >= 0))
            rc = fail(err, errlen, "%s %s at step %d: slot %d out of range or used twice", op_info[op->kind].name,
                      op->name, s, slot);
        else if (slot >= 0)
            copy_at[slot] = s;
    }
    qsort(hits, (size_t)nh, sizeof *hits, hit_cmp);
    for (int k = 0; k < nslots && !rc; k++)
        if (copy_at[k] >= 0 && wait_at[k] <= copy_at[k])
            rc = fail(err, errlen, "copy %s (slot %d, step %d) has no copy_wait after it",
                      g->ops[g->sched[copy_at[k]]].name, k, copy_at[k]);
        else if (copy_at[k] < 0 && wait_at[k] >= 0)
            rc = fail(err, errlen, "copy_wait %s (slot %d) waits for no copy", g->ops[g->sched[wait_at[k]]].name, k);
    for (int k = 0; k < nslots && !rc; k++) {
        if (copy_at[k] < 0)
            continue;
        const Op *c = &g->ops[g->sched[copy_at[k]]];
        int w = wait_at[k];
        if (w < 0 || w <= copy_at[k]) {
            rc = fail(err, errlen, "copy %s (slot %d, step %d) has no copy_wait after it", c->name, k, copy_at[k]);
            break;
        }
        const Op *wo = &g->ops[g->sched[w]];
        int dev = c->kind == OP_OFFLOAD ? c->in[0] : c->out[0], host = c->kind == OP_OFFLOAD ? c->out[0] : c->in[0];
        if (wo->in[0] != dev || wo->in[1] != host) {
            rc = fail(err, errlen, "copy_wait %s (slot %d) waits on %s, %s; the copy %s moves %s, %s", wo->name, k,
                      g->t[wo->in[0]].name, g->t[wo->in[1]].name, c->name, g->t[dev].name, g->t[host].name);
            break;
        }
        if (gate_of(g, wo) != gate_of(g, c)) {
            rc = fail(err, errlen, "copy %s and its copy_wait %s run in different parts of the step", c->name, wo->name);
            break;
        }
        /* in flight over (copy, wait): no write of the source, no use of the destination */
        for (int side = 0; side < 2 && !rc; side++) {
            int t = side ? c->out[0] : c->in[0];
            size_t off;
            int r = top_at(g, m, t, &off);
            size_t lo = off, hi = off + g->t[t].bytes;
            for (int h = first_hit(hits, nh, r, copy_at[k]); h < nh && hits[h].root == r && hits[h].step < w; h++) {
                if (!(hits[h].lo < hi && lo < hits[h].hi) || (side == 0 && !hits[h].write))
                    continue;
                const Op *o = &g->ops[g->sched[hits[h].step]];
                int waits = side && ((is_host_update(g, o) && o->nin > 1 && o->in[1] == t) ||
                                     (o->kind == OP_PREFETCH && o->in[0] == t));
                if (!waits && o->kind != OP_COPY_WAIT) {
                    rc = fail(err, errlen, "op %s at step %d %s %s while copy %s (slot %d, steps %d..%d) is in "
                              "flight", o->name, hits[h].step, side ? "uses" : "writes", g->t[t].name, c->name, k,
                              copy_at[k], w);
                    break;
                }
            }
        }
    }
    free(copy_at);
    free(wait_at);
    free(hits);
    return rc;
}

/* 7: with micro-batches the step's fwd/bwd ops run several times and
 * parameter gradients accumulate across the runs, so no parameter gradient
 * may live in the (reused) arena. */
static int check_micro(const Graph *g, char *err, size_t errlen)
{
    if (g->micro_batches <= 1)
        return 0;
    for (int i = 0; i < g->nt; i++) {
        const Tensor *t = &g->t[i];
        if (t->kind == TK_GRAD && t->region == RG_ARENA)
            return fail(err, errlen, "gradient %s is in the arena, but %d micro-batches accumulate into it",
                        t->name, g->micro_batches);
    }
    return 0;
}

int plan_check(const Graph *g, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    Memo m;
    memo_fill(g, &m);
    int bad = check_places(g, &m, err, errlen) || check_intervals(g, &m, err, errlen) ||
              check_first_writes(g, &m, err, errlen) || check_inplace(g, &m, err, errlen) ||
              check_micro(g, err, errlen) || check_alias_reads(g, &m, err, errlen) ||
              check_copies(g, &m, err, errlen);
    memo_free(&m);
    if (bad)
        return -1;
    size_t n = (size_t)g->nt + 1;
    Item *items = malloc(n * sizeof *items);
    int *head = malloc(n * sizeof *head);
    Event *ev = malloc(2 * n * sizeof *ev);
    if (!items || !head || !ev)
        IR_BUG("out of memory");
    int rc = 0;
    for (int r = 0; r < RG_COUNT && !rc; r++)
        rc = check_overlap(g, (Region)r, items, err, errlen);
    if (!rc)
        rc = check_bounds(g, head, ev, err, errlen);
    free(items);
    free(head);
    free(ev);
    return rc;
}
