/* memplan.c — the memory plan: a region and a byte offset for every tensor.
 *
 * Persistent regions are packed without padding: params in declaration order
 * (an llm.c checkpoint is one read), grads in the order of their parameters
 * (so the grads region mirrors the params region), optstate as all first
 * moments then all second moments in parameter order (llm.c's m_memory,
 * v_memory), then any other tensor of the region in id order.
 *
 * The arena holds everything else. Its unit of storage is a buffer: a root
 * tensor, or an in-place chain of roots (output 0 of an op taking the storage
 * of an input whose last use is that op) over the union of their intervals.
 * Buffer sizes are rounded up to ALIGN and offsets are multiples of ALIGN.
 * Several orderings feed one best-fit placer; the smallest arena wins. The
 * lower bound is the largest total size of buffers live at one step
 * (docs/plan.md). With g->no_reuse every arena root gets its own storage.
 *
 * The host region (RG_HOST, passes/offload.c) is both: its persistent roots
 * (tensor_persistent: the moments in optstate's order, so that its first
 * bytes are laid out as an optstate region would be, then parameters that
 * live there (the fp32 masters of --precision bf16) in declaration order,
 * then the other masters and gradient copies) packed from offset 0, then, from the next ALIGN boundary,
 * its other roots (activation copies) placed by the same best-fit placer as
 * the arena, by liveness; no in-place reuse there. Its lower bound is the
 * persistent bytes plus the largest live total of the others.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

#define ALIGN ((size_t)256)

typedef struct Buf {
    int first, last;   /* inclusive steps */
    size_t size;       /* ALIGN-rounded */
} Buf;

typedef struct Key {   /* sort key: ascending on a, then b, then c, then idx */
    uint64_t a, b, c;
    int idx;
} Key;

static size_t round_up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

static int is_root(const Tensor *t) { return t->view_of < 0; }

/* ------------------------------------------------------------ persistent */

/* Places root t at *end if it is an unplaced root of region r. */
static void pack(Graph *g, int t, Region r, char *placed, size_t *end)
{
    if (t < 0 || placed[t] || !is_root(&g->t[t]) || g->t[t].region != r)
        return;
    placed[t] = 1;
    g->t[t].offset = *end;
    *end += g->t[t].bytes;
}

/* The persistent roots; returns the host region's persistent bytes. */
static size_t plan_persistent(Graph *g, char *placed)
{
    size_t end[RG_COUNT] = {0};
    for (int i = 0; i < g->nparams; i++)
        pack(g, g->params[i], RG_PARAMS, placed, &end[RG_PARAMS]);
    for (int i = 0; i < g->nt; i++)
        pack(g, i, RG_PARAMS, placed, &end[RG_PARAMS]);
    for (int i = 0; i < g->nparams; i++)
        pack(g, g->t[g->params[i]].grad, RG_GRADS, placed, &end[RG_GRADS]);
    for (int r = RG_OPTSTATE; r <= RG_HOST; r += RG_HOST - RG_OPTSTATE) {   /* optstate's layout, in either */
        for (int i = 0; i < g->nparams; i++)
            pack(g, g->t[g->params[i]].opt_m, (Region)r, placed, &end[r]);
        for (int i = 0; i < g->nparams; i++)
            pack(g, g->t[g->params[i]].opt_v, (Region)r, placed, &end[r]);
    }
    for (int i = 0; i < g->nparams; i++)   /* masters on the host (bf16 offload): llm.c's layout too */
        pack(g, g->params[i], RG_HOST, placed, &end[RG_HOST]);
    for (int i = 0; i < g->nt; i++) {
        pack(g, i, RG_GRADS, placed, &end[RG_GRADS]);
        pack(g, i, RG_OPTSTATE, placed, &end[RG_OPTSTATE]);
        if (tensor_persistent(&g->t[i]))
            pack(g, i, RG_HOST, placed, &end[RG_HOST]);
    }
    for (int r = 0; r < RG_ARENA; r++)   /* all live throughout: the bound is the sum */
        g->region_bytes[r] = g->region_lower_bound[r] = end[r];
    return end[RG_HOST];
}

/* ------------------------------------------------------------ in-place */

/* 1 when tensor t (an input of op) covers all of root r from byte 0. */
static int whole_view(const Graph *g, const int *root, const size_t *roff, int t, int r)
{
    return root[t] == r && roff[t] == 0 && g->t[t].bytes == g->t[r].bytes;
}

/* The root whose storage output 0 of op (at step s) may take, or -1. */
static int inplace_parent(const Graph *g, const int *root, const size_t *roff, const Op *op, int s)
{
    if (op->nout < 1)
        return -1;
    int c = op->out[0];
    const Tensor *ct = &g->t[c];
    if (!is_root(ct) || ct->region != RG_ARENA || ct->kind == TK_INPUT || ct->first != s)
        return -1;
    int loss_root = g->loss >= 0 ? root[g->loss] : -1;
    int row_root = g->sample_logits >= 0 ? root[g->sample_logits] : -1;
    for (int i = 0; i < op->nin; i++) {
        int r = root[op->in[i]];
        const Tensor *rt = &g->t[r];
        if (r == c || r == loss_root || r == row_root || rt->region != RG_ARENA || rt->last != s ||
            !whole_view(g, root, roff, op->in[i], r) || !op_inplace_ok(g, op, i))
            continue;
        int clean = 1;   /* no other input reads part of r */
        for (int j = 0; j < op->nin; j++)
            if (root[op->in[j]] == r && !whole_view(g, root, roff, op->in[j], r))
                clean = 0;
        for (int j = 0; j < op->nout; j++)
            if (j > 0 && root[op->out[j]] == r)
                clean = 0;
        if (clean)
            return r;
    }
    return -1;
}

/* Fills buf_of[t] (buffer index of each live planned root of region r:
 * the arena's, or the host region's that are not persistent; -1 otherwise)
 * and the buffers; in the arena, records in-place chains in inplace_of.
 * Returns the count. */
static int make_buffers(Graph *g, Region r, const int *root, const size_t *roff, int *buf_of, Buf *bufs)
{
    int n = 0;
    for (int i = 0; i < g->nt; i++) {
        Tensor *t = &g->t[i];
        buf_of[i] = -1;
        if (!is_root(t) || t->region != r || tensor_persistent(t) || t->first < 0)
            continue;
        buf_of[i] = n;
        bufs[n++] = (Buf){t->first, t->last, round_up(t->bytes)};
    }
    if (g->no_reuse || r != RG_ARENA)
        return n;
    int *merged = xcalloc((size_t)n, sizeof *merged);
    for (int s = 0; s < g->nsched; s++) {
        const Op *op = &g->ops[g->sched[s]];
        int p = inplace_parent(g, root, roff, op, s);
        if (p < 0)
            continue;
        int c = op->out[0], bp = buf_of[p], bc = buf_of[c];
        g->t[c].inplace_of = p;
        merged[bc] = 1;
        buf_of[c] = bp;
        if (bufs[bc].last > bufs[bp].last)
            bufs[bp].last = bufs[bc].last;
        if (bufs[bc].size > bufs[bp].size)
            bufs[bp].size = bufs[bc].size;
    }
    /* compact: drop merged buffers, renumber */
    int *renum = xmalloc((size_t)n * sizeof *renum), m = 0;
    for (int b = 0; b < n; b++) {
        renum[b] = merged[b] ? -1 : m;
        if (!merged[b])
            bufs[m++] = bufs[b];
    }
    for (int i = 0; i < g->nt; i++)
        if (buf_of[i] >= 0)
            buf_of[i] = renum[buf_of[i]];
    free(renum);
    free(merged);
    return m;
}

/* ------------------------------------------------------------ placement */

/* Live bytes per step (profile[0..nsched)); returns the maximum. */
static size_t live_profile(const Buf *b, int n, int nsched, size_t *profile)
{
    long long *d = xcalloc((size_t)nsched + 1, sizeof *d);
    for (int i = 0; i < n; i++) {
        d[b[i].first] += (long long)b[i].size;
        d[b[i].last + 1] -= (long long)b[i].size;
    }
    size_t peak = 0;
    long long run = 0;
    for (int s = 0; s < nsched; s++) {
        run += d[s];
        profile[s] = (size_t)run;
        if (profile[s] > peak)
            peak = profile[s];
    }
    free(d);
    return peak;
}

/* The placed buffers in offset order (ties: in placement order), in chunks
 * of at most CHUNK, each with the earliest first and the latest last step of
 * its buffers: the scan below skips a chunk none of whose buffers is live
 * with the one being placed, and an insertion moves at most one chunk. */
enum { CHUNK = 16 };
typedef struct Chunk {
    int n, minf, maxl;
    int first[CHUNK], last[CHUNK];
    size_t off[CHUNK], end[CHUNK];
} Chunk;
typedef struct Placed { Chunk **c; int nc, cap; } Placed;
typedef struct Run { size_t lo, hi; } Run;
typedef struct Runs { Run *r; int n, cap; } Runs;

static void chunk_sum(Chunk *c)
{
    c->minf = INT32_MAX, c->maxl = INT32_MIN;
    for (int i = 0; i < c->n; i++) {
        c->minf = c->first[i] < c->minf ? c->first[i] : c->minf;
        c->maxl = c->last[i] > c->maxl ? c->last[i] : c->maxl;
    }
}

/* inserts (f, l, off, end) after every placed offset <= off */
static void placed_insert(Placed *p, int f, int l, size_t off, size_t end)
{
    int ci = 0, lo = 0, hi = p->nc;   /* the last chunk starting at or below off */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (p->c[mid]->off[0] <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    ci = lo > 0 ? lo - 1 : 0;
    if (p->nc == 0) {
        p->c[0] = xcalloc(1, sizeof(Chunk));
        p->nc = 1;
    }
    Chunk *c = p->c[ci];
    if (c->n == CHUNK) {              /* split: the upper half into a new chunk */
        Chunk *d = xcalloc(1, sizeof(Chunk));
        int h = CHUNK / 2;
        d->n = CHUNK - h;
        memcpy(d->first, c->first + h, (size_t)d->n * sizeof(int));
        memcpy(d->last, c->last + h, (size_t)d->n * sizeof(int));
        memcpy(d->off, c->off + h, (size_t)d->n * sizeof(size_t));
        memcpy(d->end, c->end + h, (size_t)d->n * sizeof(size_t));
        c->n = h;
        chunk_sum(c);
        chunk_sum(d);
        memmove(p->c + ci + 2, p->c + ci + 1, (size_t)(p->nc - ci - 1) * sizeof *p->c);
        p->c[ci + 1] = d;
        p->nc++;
        if (d->off[0] <= off)
            c = d;
    }
    int i = c->n;                     /* upper bound of off in c */
    while (i > 0 && c->off[i - 1] > off) {
        c->first[i] = c->first[i - 1], c->last[i] = c->last[i - 1];
        c->off[i] = c->off[i - 1], c->end[i] = c->end[i - 1];
        i--;
    }
    c->first[i] = f, c->last[i] = l, c->off[i] = off, c->end[i] = end;
    c->n++;
    c->minf = c->n == 1 || f < c->minf ? f : c->minf;
    c->maxl = c->n == 1 || l > c->maxl ? l : c->maxl;
}

/* The scan of best_fit over the placed buffers live with x (in offset
 * order): each such buffer's start may open a gap [prev, start) from the
 * highest end before it. For a size > 0 the result depends only on the union
 * of those buffers' byte ranges: a start inside the union's run opens no gap
 * of size > 0, a run's start opens the same gap as the first buffer there.
 * (Size 0 tells touching ranges apart: best_fit_list, the plain scan.) */
static size_t scan_gaps(const Run *r, int m, size_t size)
{
    size_t prev = 0, best = SIZE_MAX, bestgap = SIZE_MAX;
    for (int j = 0; j < m; j++) {
        size_t o = r[j].lo;
        if (o >= prev + size && o - prev < bestgap)
            bestgap = o - prev, best = prev;
        if (r[j].hi > prev)
            prev = r[j].hi;
    }
    return best == SIZE_MAX ? prev : best;
}

static size_t best_fit_list(const Placed *p, const Buf *x)
{
    int xf = x->first, xl = x->last;
    size_t prev = 0, best = SIZE_MAX, bestgap = SIZE_MAX, size = x->size;
    for (int ci = 0; ci < p->nc; ci++) {
        const Chunk *c = p->c[ci];
        if (c->minf > xl || xf > c->maxl)
            continue;                 /* none live with x: no gap, no end */
        for (int j = 0; j < c->n; j++) {
            if (c->first[j] > xl || xf > c->last[j])
                continue;
            size_t o = c->off[j];
            if (o >= prev + size && o - prev < bestgap)
                bestgap = o - prev, best = prev;
            if (c->end[j] > prev)
                prev = c->end[j];
        }
    }
    return best == SIZE_MAX ? prev : best;
}

/* Unions of byte ranges, as sorted runs (touching ranges merged). */
static void runs_add(Runs *u, size_t lo, size_t hi)
{
    int a = 0, b = u->n;              /* the first run that reaches lo */
    while (a < b) {
        int mid = (a + b) / 2;
        if (u->r[mid].hi < lo)
            a = mid + 1;
        else
            b = mid;
    }
    int e = a;                        /* runs [a, e) merge with [lo, hi) */
    while (e < u->n && u->r[e].lo <= hi) {
        lo = u->r[e].lo < lo ? u->r[e].lo : lo;
        hi = u->r[e].hi > hi ? u->r[e].hi : hi;
        e++;
    }
    if (e == a) {
        if (u->n == u->cap) {
            u->cap = u->cap ? 2 * u->cap : 4;
            u->r = xrealloc(u->r, (size_t)u->cap * sizeof *u->r);
        }
        memmove(u->r + a + 1, u->r + a, (size_t)(u->n - a) * sizeof *u->r);
        u->n++;
    } else {
        memmove(u->r + a + 1, u->r + e, (size_t)(u->n - e) * sizeof *u->r);
        u->n -= e - a - 1;
    }
    u->r[a] = (Run){lo, hi};
}

/* A segment tree over the steps: node v (steps [a, b]) holds the union of
 * the placed buffers that cover [a, b] (cover[v]; stored at the O(log S)
 * nodes that split a buffer's interval) and of those that meet [a, b]
 * without covering it (part[v]; the nodes above them). The buffers live
 * with x are those of cover[] on the path to each node splitting x's
 * interval and of cover[] and part[] of those nodes. */
typedef struct Tree { Runs *cover, *part; int steps; const Runs **got; int ngot; Run *tmp; int captmp; } Tree;

static void tree_add(Tree *t, int v, int a, int b, int f, int l, size_t lo, size_t hi)
{
    if (l < a || b < f)
        return;
    if (f <= a && b <= l) {
        runs_add(&t->cover[v], lo, hi);
        return;
    }
    runs_add(&t->part[v], lo, hi);
    int mid = a + (b - a) / 2;
    tree_add(t, 2 * v, a, mid, f, l, lo, hi);
    tree_add(t, 2 * v + 1, mid + 1, b, f, l, lo, hi);
}

static void tree_get(Tree *t, int v, int a, int b, int f, int l)
{
    if (l < a || b < f)
        return;
    t->got[t->ngot++] = &t->cover[v];
    if (f <= a && b <= l) {
        t->got[t->ngot++] = &t->part[v];
        return;
    }
    int mid = a + (b - a) / 2;
    tree_get(t, 2 * v, a, mid, f, l);
    tree_get(t, 2 * v + 1, mid + 1, b, f, l);
}

static int run_cmp(const void *pa, const void *pb)
{
    const Run *a = pa, *b = pb;
    return (a->lo > b->lo) - (a->lo < b->lo);
}

/* best_fit_list's offset for x through the tree, or SIZE_MAX when sorting
 * the runs found would cost more than the plain scan of nplaced buffers */
int memplan_place_mode = MEMPLAN_PLACE_AUTO;

static size_t best_fit_tree(Tree *t, const Buf *x, int nplaced)
{
    t->ngot = 0;
    tree_get(t, 1, 0, t->steps - 1, x->first, x->last);
    int m = 0, lg = 1;
    for (int i = 0; i < t->ngot; i++)
        m += t->got[i]->n;
    while ((1 << lg) < m)
        lg++;
    if ((double)m * lg * 4 > nplaced && memplan_place_mode != MEMPLAN_PLACE_TREE)
        return SIZE_MAX;
    if (m > t->captmp) {
        t->captmp = 2 * m;
        t->tmp = xrealloc(t->tmp, (size_t)t->captmp * sizeof *t->tmp);
    }
    if (m == 0)
        return 0;                     /* nothing live with x */
    m = 0;
    for (int i = 0; i < t->ngot; i++) {
        if (t->got[i]->n == 0)
            continue;
        memcpy(t->tmp + m, t->got[i]->r, (size_t)t->got[i]->n * sizeof *t->tmp);
        m += t->got[i]->n;
    }
    qsort(t->tmp, (size_t)m, sizeof *t->tmp, run_cmp);
    return scan_gaps(t->tmp, m, x->size);
}

/* Best fit: places the buffers in `order`, each in the smallest gap between
 * already placed buffers that are live at the same time as it (or above
 * them all). Returns the top. Buffers of size > 0 are placed through the
 * tree (each costs about the runs of O(log steps) unions); a buffer of size
 * 0, or steps outside [0, nsched), through the plain list. */
static size_t place(const Buf *b, int n, const int *order, size_t *off, int nsched)
{
    int usetree = nsched > 0 && memplan_place_mode != MEMPLAN_PLACE_LIST;
    for (int k = 0; k < n; k++)
        usetree &= b[k].first >= 0 && b[k].first <= b[k].last && b[k].last < nsched;
    Tree t = {0};
    if (usetree) {
        t.steps = nsched;
        t.cover = xcalloc(4 * (size_t)nsched, sizeof *t.cover);
        t.part = xcalloc(4 * (size_t)nsched, sizeof *t.part);
        t.got = xmalloc((4 * 64 + 8) * sizeof *t.got);
    }
    Placed p = {xmalloc(((size_t)n + 1) * sizeof(Chunk *)), 0, n + 1};
    size_t top = 0;
    for (int k = 0; k < n; k++) {
        const Buf *x = &b[order[k]];
        size_t at = usetree && x->size > 0 ? best_fit_tree(&t, x, k) : SIZE_MAX;
        if (at == SIZE_MAX)
            at = best_fit_list(&p, x);
        off[order[k]] = at;
        if (at + x->size > top)
            top = at + x->size;
        placed_insert(&p, x->first, x->last, at, at + x->size);
        if (usetree)
            tree_add(&t, 1, 0, nsched - 1, x->first, x->last, at, at + x->size);
    }
    for (int ci = 0; ci < p.nc; ci++)
        free(p.c[ci]);
    free(p.c);
    if (usetree) {
        for (size_t v = 0; v < 4 * (size_t)nsched; v++) {
            free(t.cover[v].r);
            free(t.part[v].r);
        }
        free(t.cover);
        free(t.part);
        free(t.got);
        free(t.tmp);
    }
    return top;
}

static int key_cmp(const void *pa, const void *pb)
{
    const Key *a = pa, *b = pb;
    if (a->a != b->a) return a->a < b->a ? -1 : 1;
    if (a->b != b->b) return a->b < b->b ? -1 : 1;
    if (a->c != b->c) return a->c < b->c ? -1 : 1;
    return (a->idx > b->idx) - (a->idx < b->idx);
}

/* Largest profile value over [first, last] for every buffer (sparse table). */
static void range_max(const Buf *b, int n, const size_t *profile, int S, uint64_t *out)
{
    int lg = 1;
    while ((1 << lg) <= S)
        lg++;
    size_t *t = xmalloc((size_t)lg * (size_t)S * sizeof *t);
    memcpy(t, profile, (size_t)S * sizeof *t);
    for (int k = 1; k < lg; k++)
        for (int s = 0; s + (1 << k) <= S; s++) {
            size_t u = t[(k - 1) * S + s], v = t[(k - 1) * S + s + (1 << (k - 1))];
            t[k * S + s] = u > v ? u : v;
        }
    for (int i = 0; i < n; i++) {
        int len = b[i].last - b[i].first + 1, k = 0;
        while ((2 << k) <= len)
            k++;
        size_t u = t[k * S + b[i].first], v = t[k * S + b[i].last - (1 << k) + 1];
        out[i] = u > v ? u : v;
    }
    free(t);
}

enum { H_SIZE, H_BREADTH, H_FIRST, H_LENGTH, H_COUNT };

/* The placement order of heuristic h (see the file comment). */
static void make_order(const Buf *b, int n, int h, const uint64_t *breadth, Key *keys,
                       int *order)
{
    for (int i = 0; i < n; i++) {
        uint64_t sz = ~(uint64_t)b[i].size, len = ~(uint64_t)(b[i].last - b[i].first);
        uint64_t first = (uint64_t)b[i].first;
        switch (h) {
        case H_SIZE:    keys[i] = (Key){sz, len, first, i}; break;
        case H_BREADTH: keys[i] = (Key){~breadth[i], sz, first, i}; break;
        case H_FIRST:   keys[i] = (Key){first, sz, len, i}; break;
        default:        keys[i] = (Key){len, sz, first, i}; break;
        }
    }
    qsort(keys, (size_t)n, sizeof *keys, key_cmp);
    for (int i = 0; i < n; i++)
        order[i] = keys[i].idx;
}

/* Offsets of the buffers (off[]) and the arena size. */
static size_t plan_buffers(const Graph *g, const Buf *b, int n, size_t *off)
{
    if (g->no_reuse) {
        size_t end = 0;
        for (int i = 0; i < n; i++)
            off[i] = end, end += b[i].size;
        return end;
    }
    size_t *profile = xmalloc(((size_t)g->nsched + 1) * sizeof *profile);
    live_profile(b, n, g->nsched, profile);
    uint64_t *breadth = xmalloc(((size_t)n + 1) * sizeof *breadth);
    if (n > 0)
        range_max(b, n, profile, g->nsched, breadth);
    Key *keys = xmalloc(((size_t)n + 1) * sizeof *keys);
    int *order = xmalloc(((size_t)n + 1) * sizeof *order);
    size_t *trial = xmalloc(((size_t)n + 1) * sizeof *trial);
    size_t best = SIZE_MAX;
    for (int h = 0; h < H_COUNT; h++) {
        make_order(b, n, h, breadth, keys, order);
        size_t top = place(b, n, order, trial, g->nsched);
        if (top < best) {
            best = top;
            memcpy(off, trial, (size_t)n * sizeof *off);
        }
    }
    free(trial);
    free(order);
    free(keys);
    free(breadth);
    free(profile);
    return n > 0 ? best : 0;
}

/* ------------------------------------------------------------ the pass */

/* Places the planned roots of region r (arena, or the host region's
 * activation copies) from byte base on: sets their offsets and the region's
 * size and bound (the bound: base_bytes plus the largest live total). */
static void plan_region(Graph *g, Region r, const int *root, const size_t *roff, size_t base, size_t base_bytes)
{
    int *buf_of = xmalloc(((size_t)g->nt + 1) * sizeof *buf_of);
    Buf *bufs = xmalloc(((size_t)g->nt + 1) * sizeof *bufs);
    int n = make_buffers(g, r, root, roff, buf_of, bufs);
    size_t *profile = xmalloc(((size_t)g->nsched + 1) * sizeof *profile);
    g->region_lower_bound[r] = base_bytes + live_profile(bufs, n, g->nsched, profile);
    free(profile);
    size_t *off = xmalloc(((size_t)n + 1) * sizeof *off);
    size_t top = plan_buffers(g, bufs, n, off);
    g->region_bytes[r] = n > 0 ? base + top : base_bytes;
    for (int i = 0; i < g->nt; i++)
        if (buf_of[i] >= 0)
            g->t[i].offset = base + off[buf_of[i]];
    free(off);
    free(bufs);
    free(buf_of);
}

void pass_memplan(Graph *g)
{
    for (int i = 0; i < g->nt; i++) {
        g->t[i].inplace_of = -1;
        g->t[i].offset = 0;
    }
    char *placed = xcalloc((size_t)g->nt + 1, 1);
    size_t host = plan_persistent(g, placed);
    free(placed);

    size_t *roff;
    int *root = graph_roots(g, &roff);   /* the plan changes no view */
    plan_region(g, RG_ARENA, root, roff, 0, 0);
    plan_region(g, RG_HOST, root, roff, round_up(host), host);

    for (int i = 0; i < g->nt; i++) {   /* views follow their roots */
        Tensor *t = &g->t[i];
        if (is_root(t))
            continue;
        const Tensor *r = &g->t[root[i]];
        t->region = r->region;
        t->offset = r->offset + roff[i];
    }
    free(root);
    free(roff);
}

/* ------------------------------------------------------------ the bound alone */

void fill_arena_lower_bound(Graph *g)
{
    for (int i = 0; i < g->nt; i++)
        g->t[i].inplace_of = -1;
    int *buf_of = xmalloc(((size_t)g->nt + 1) * sizeof *buf_of);
    Buf *bufs = xmalloc(((size_t)g->nt + 1) * sizeof *bufs);
    size_t *roff;
    int *root = graph_roots(g, &roff);   /* the plan changes no view */
    int n = make_buffers(g, RG_ARENA, root, roff, buf_of, bufs);
    size_t *profile = xmalloc(((size_t)g->nsched + 1) * sizeof *profile);
    g->region_lower_bound[RG_ARENA] = live_profile(bufs, n, g->nsched, profile);
    free(profile);
    free(bufs);
    free(buf_of);
    free(root);
    free(roff);
}
