/* search.c — the budget search (--mem with --recompute auto, no
 * --micro-batches): the micro-batch count K, each layer's recompute mode and
 * (--offload auto, the default) what moves to host memory, with the least
 * predicted step time whose plan fits. How it works and why it is optimal:
 * docs/budget.md.
 *
 * A level is one micro-batch count with one offload choice (none, opt, act,
 * opt+act; passes/offload.c); the levels of one K share their lowered
 * prefix. Every level but the first (one micro-batch, no offload) is lazy:
 * calibrated only when the walk, in order of predicted time, gets to a lower
 * bound of its fastest staircase without having found a plan that fits.
 * More micro-batches only add time (smaller matmuls, run more often), so a
 * level's fastest staircase is no faster than the next smaller K's; offload
 * only adds time to the same plan (copies the step may wait for, never
 * fewer kernels), and an offloaded optimizer no less than its floor
 * (StepCost.update_floor), so an offload level is no faster than its base
 * (the same K without offload). A lazy level is screened without
 * recomputation when the walk gets to its bound, then calibrated when the
 * walk gets to that time (with activations offloaded at once: recomputing
 * keeps fewer of them to copy, so its staircases may be faster than its
 * time without recomputation). Under offload a mode's recompute time per
 * layer includes what it changes in the copies (measured by the uniform
 * screens, spread evenly over the layers).
 */
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "frontend.h"

static const char *const mode_names[] = {"none", "selective", "full"};
static const char mode_letters[] = "nsf";

/* The walk screens every staircase whose modelled bound exceeds the budget
 * by at most this share of the arena without recomputation, at most this
 * many. */
#define SEARCH_SLACK 0.02
#define SEARCH_MAX_WALK 128

RecomputeChoice driver_rc_choice(char letter)
{
    return letter == 'f' ? RC_FULL : letter == 's' ? RC_SELECTIVE : RC_NONE;
}

void driver_predict(const Graph *g, DriverOptions *o)
{
    int cuda = !strcmp(o->emit.target, "cuda");
    DeviceProfile d = *device_profile(o->device ? o->device : cuda ? "h100" : "cpu");
    if (cuda && !o->emit.no_tf32)
        d.mm_flops[0] = d.tf32_flops;
    StepCost c = fill_costs(g, &d, NULL);
    o->emit.device = o->device ? o->device : cuda ? "h100" : "cpu";
    o->emit.predicted_s = c.seconds;
    o->emit.predicted_mfu = c.mfu;
    o->emit.predicted_norm_pass_s = c.norm_pass_seconds;
    o->emit.predicted_update_floor_s = c.update_floor;
    o->emit.predicted_d2h_bytes = c.d2h_bytes;
    o->emit.predicted_h2d_bytes = c.h2d_bytes;
    o->emit.predicted_copy_s = c.copy_seconds;
    o->emit.predicted_host_update_s = c.host_update_seconds;
    o->emit.predicted_exposed_s = c.offload_exposed;
    o->emit.device_peak_flops = o->device ? c.peak_flops : 0;
}

/* What the plan needs per device, as driver_check_budget counts it: its
 * regions, plus the stated CUDA reserve on the CUDA target. */
static size_t plan_total(const Graph *g, const DriverOptions *o)
{
    return graph_device_bytes(g) + (strcmp(o->emit.target, "cuda") ? 0 : GC_CUDA_RESERVE_BYTES);
}

/* The device regions other than the arena, as pass_memplan will pack them
 * (every root of params, grads and optstate), plus the CUDA reserve:
 * known once the graph is scheduled, without a plan. */
static size_t persistent_total(const Graph *g, const DriverOptions *o)
{
    size_t n = strcmp(o->emit.target, "cuda") ? 0 : GC_CUDA_RESERVE_BYTES;
    for (int t = 0; t < g->nt; t++)
        if (g->t[t].view_of < 0 && region_on_device(g->t[t].region) && g->t[t].region != RG_ARENA)
            n += g->t[t].bytes;
    return n;
}

/* A candidate: K micro-batches, one mode letter per layer, what is offloaded. */
typedef struct Cand {
    int K;
    int offload;         /* OFFLOAD_* bits */
    char *modes;         /* "ffsn": layer 0 first */
    size_t peak;         /* planned: regions (+ CUDA reserve); screened: bound */
    size_t bound;        /* the same with the arena's lower bound */
    size_t arena;        /* planned: the arena region */
    double seconds;      /* predicted step time */
} Cand;

/* One micro-batch count: its lowered prefix (lower_front, cloned for each
 * plan), the exact time each layer's recompute adds, and the model of the
 * peak's lower bound fitted to its calibration screens. */
typedef struct Level {
    int K;
    int offload;             /* OFFLOAD_* bits planned at this level */
    int base;                /* the level of the same K without offload (its own index when none) */
    int lazy;                /* calibrated only when the walk reaches its lower bound (level_lower) */
    int prev;                /* the level of the next smaller K with the same offload, -1 for the first K */
    int probed;              /* t0 known (the staircase without recomputation screened) */
    Graph *front;            /* shared by the levels of one K; owned by the base level */
    int calibrated;          /* 0: not yet, 1: done, -1: pruned (cannot beat the best) */
    double t0;               /* predicted step time, nothing recomputed */
    double floor;            /* base levels: the step with the optimizer offloaded is no faster (StepCost.update_floor) */
    double *cost;            /* cost[3*l + m]: seconds layer l's recompute ops add in mode m */
    size_t persist;          /* the regions other than the arena (+ CUDA reserve) */
    double arena;            /* the arena, nothing recomputed */
    double pn;               /* bound, nothing recomputed */
    double dmid[3], dtop[3]; /* bound change per layer below the top / of the top layer, by mode */
    char *done;              /* done[a*(L+1)+b]: staircase (a, b) 1 screened, 2 planned */
    size_t *bound;           /* bound[a*(L+1)+b]: its bound once done */
    size_t *peak;            /* peak[a*(L+1)+b]: its peak once planned */
    double *secs;            /* secs[a*(L+1)+b]: its predicted time once done */
    int *run;                /* run[a*(L+1)+b]: the search_run that last counted its plan */
} Level;

/* The search's state: the options, the levels, what it planned; per run
 * (search_run), the budget, the best plan that fits and the smallest. */
struct Search {
    Ast *ast;
    const DriverOptions *o;
    int nlayers;
    long B;
    int planned, screened;       /* real plans made, bounds computed (all runs) */
    Level *lv;
    int nlv;
    int run;                     /* runs so far */
    size_t budget;
    int has_best, has_small;
    Graph *best, *small;         /* owned; NULL when the plan was made by an earlier run */
    Cand best_c, small_c;
};

static void cand_set(Cand *dst, const Cand *src)
{
    free(dst->modes);
    *dst = *src;
    dst->modes = xstrdup(src->modes);
}

/* The mode's name when all layers agree, else the letters (messages). */
static const char *modes_label(const char *modes)
{
    for (const char *p = modes; *p; p++)
        if (*p != modes[0])
            return modes;
    return modes[0] ? mode_names[driver_rc_choice(modes[0])] : "none";
}

/* The cost model's device for o (as driver_predict). */
static DeviceProfile profile(const DriverOptions *o)
{
    int cuda = !strcmp(o->emit.target, "cuda");
    DeviceProfile d = *device_profile(o->device ? o->device : cuda ? "h100" : "cpu");
    if (cuda && !o->emit.no_tf32)
        d.mm_flops[0] = d.tf32_flops;
    return d;
}

/* Keeps planned graph g (candidate c) when it is the best that fits or the
 * smallest so far; frees what is no longer either. */
static void keep(Search *s, Graph *g, const Cand *c)
{
    int fits = c->peak <= s->budget;
    int is_best = fits && (!s->has_best || c->seconds < s->best_c.seconds);
    int is_small = !s->has_small || c->peak < s->small_c.peak;
    Graph *ob = s->best, *os = s->small;
    if (is_best) {
        s->best = g;
        s->has_best = 1;
        cand_set(&s->best_c, c);
    }
    if (is_small) {
        s->small = g;
        s->has_small = 1;
        cand_set(&s->small_c, c);
    }
    if (ob && ob != s->best && ob != s->small)
        graph_free(ob);
    if (os && os != ob && os != s->best && os != s->small)
        graph_free(os);
    if (!is_best && !is_small)
        graph_free(g);
}

/* Candidate c through the real pipeline on a copy of its level's prefix
 * (lower_back: recompute, schedule, liveness, then) either the memory plan
 * and plan_check (real: c->peak is the plan's, and the graph is kept when it
 * is the best that fits or the smallest) or only the arena's lower bound
 * (c->peak = c->bound). Fills c's time; when cost is not NULL, adds each
 * layer's recompute time to cost[3*l + m]. 0, or -1 after a reported error. */
static int plan(Search *s, Level *lv, Cand *c, double *cost, int real)
{
    DriverOptions d = *s->o;
    d.verbose = 0;
    d.micro_batches = c->K;
    d.recompute = RC_NONE;
    d.rc_layers = s->nlayers > 0 ? c->modes : NULL;
    d.bound_only = !real;
    d.offload = lv->offload;
    Graph *g = driver_lower_back(graph_clone(lv->front), &d);
    if (!g)
        return -1;
    driver_predict(g, &d);
    c->seconds = d.emit.predicted_s;
    if (!lv->floor)
        lv->floor = d.emit.predicted_update_floor_s;
    if (!lv->persist)
        lv->persist = persistent_total(g, s->o);
    if (real) {
        s->planned++;
        c->peak = plan_total(g, s->o);
        c->arena = g->region_bytes[RG_ARENA];
    } else {
        s->screened++;
        c->arena = g->region_lower_bound[RG_ARENA];
    }
    c->bound = lv->persist + g->region_lower_bound[RG_ARENA];
    if (!real)
        c->peak = c->bound;
    if (cost) {
        DeviceProfile dp = profile(s->o);
        for (int k = 0; k < g->nsched; k++) {
            const Op *op = &g->ops[g->sched[k]];
            if (op->phase == PH_RECOMPUTE && op->layer >= 0 && op->layer < s->nlayers)
                cost[3 * op->layer + driver_rc_choice(c->modes[op->layer])] += op_cost(g, op, &dp) * c->K;
        }
    }
    int fits = c->peak <= s->budget;
    c->offload = lv->offload;
    if (s->o->verbose)
        fprintf(stderr, "gcompile: search: K=%d recompute %s offload %s %s %zu predicted %.6f ms%s\n", c->K,
                c->modes, offload_name(lv->offload), real ? "peak" : "bound", c->peak, c->seconds * 1e3,
                fits ? real ? " fits" : " (bound fits)" : "");
    if (real)
        keep(s, g, c);
    else
        graph_free(g);
    return 0;
}

/* --search exhaustive: every K dividing B times every per-layer assignment
 * (3^L), each planned. The reference the fast search is tested against. */
static int search_exhaustive(Search *s)
{
    double n = 1;
    for (int l = 0; l < s->nlayers; l++)
        n *= 3;
    if (n > 100000) {
        fprintf(stderr, "gcompile: error: --search exhaustive: 3^%d assignments per micro-batch count is too many "
                        "(at most 100000)\n", s->nlayers);
        return -1;
    }
    Cand c = {0};
    c.modes = xcalloc((size_t)s->nlayers + 1, 1);
    int rc = 0;
    for (int i = 0; i < s->nlv && !rc; i++) {
        c.K = s->lv[i].K;
        for (long a = 0; a < (long)n && !rc; a++) {
            long x = a;
            for (int l = 0; l < s->nlayers; l++, x /= 3)
                c.modes[l] = mode_letters[x % 3];
            rc = plan(s, &s->lv[i], &c, NULL, 1);
        }
    }
    free(c.modes);
    return rc;
}

/* The staircase (a, b): layers [0, a) full, [a, a+b) selective, the rest
 * none, into modes (L + 1 bytes). */
static void staircase(char *modes, int L, int a, int b)
{
    for (int l = 0; l < L; l++)
        modes[l] = l < a ? 'f' : l < a + b ? 's' : 'n';
    modes[L] = '\0';
}

/* Exact predicted time of staircase (a, b) at level lv: the plan without
 * recomputation plus each layer's recompute ops (they depend only on that
 * layer's mode). */
static double stair_seconds(const Search *s, const Level *lv, int a, int b)
{
    const Level *b0 = &s->lv[lv->base];
    if (lv->offload == OFFLOAD_OPT && b0 != lv && b0->calibrated == 1) {
        /* The optimizer offloaded: the step waits for the host update beyond
           its compute, and recomputation fills some of that wait, so adding
           the base's costs overestimates (tiny Llama, 4 layers: ffsn was
           modelled 5% slower than it plans, and the walk stopped before it).
           A lower bound instead, which the walk needs: no faster than the
           same staircase without offload, nor than nothing recomputed. */
        double t = stair_seconds(s, b0, a, b);
        return t > lv->t0 ? t : lv->t0;
    }
    double t = lv->t0;
    for (int l = 0; l < a + b && l < s->nlayers; l++)
        t += lv->cost[3 * l + (l < a ? RC_FULL : RC_SELECTIVE)];
    return t;
}

/* The model's bound of staircase (a, b): additive over layers, the top
 * layer's change measured apart (its recompute runs at once, so it saves
 * less). */
static double stair_bound(const Search *s, const Level *lv, int a, int b)
{
    int L = s->nlayers, c = L - a - b;
    if (L == 0)
        return lv->pn;
    int top = c > 0 ? RC_NONE : b > 0 ? RC_SELECTIVE : RC_FULL;
    int fa = top == RC_FULL ? a - 1 : a, sb = top == RC_SELECTIVE ? b - 1 : b;
    return lv->pn + fa * lv->dmid[RC_FULL] + sb * lv->dmid[RC_SELECTIVE] + lv->dtop[top];
}

/* Staircase (a, b) at level lv, screened (real 0) or planned (1), unless
 * done before; 1 when done before (c not filled), 0, -1 after an error. */
static int plan_stair(Search *s, Level *lv, int a, int b, Cand *c, double *cost, int real)
{
    int L = s->nlayers, k = a * (L + 1) + b;
    c->K = lv->K;
    staircase(c->modes, L, a, b);
    if (lv->done[k] >= 1 + real && !cost) {
        c->bound = lv->bound[k];
        c->peak = lv->done[k] == 2 ? lv->peak[k] : c->bound;
        c->seconds = lv->secs[k];
        if (real && lv->run[k] != s->run) {   /* planned by an earlier run: count it in this one */
            lv->run[k] = s->run;
            keep(s, NULL, c);
        }
        return 1;
    }
    lv->done[k] = (char)(1 + real);
    int rc = plan(s, lv, c, cost, real);
    lv->bound[k] = c->bound;
    lv->peak[k] = c->peak;
    lv->secs[k] = c->seconds;
    lv->run[k] = s->run;
    return rc;
}

/* Calibrates level lv: the bound without recomputation (its time, the
 * persistent regions), then, once, bounds of the uniform modes with and
 * without the top layer (each layer's exact recompute time, the model's
 * per-layer changes): screenings only, no plan. A level whose time without
 * recomputation cannot beat the best plan found is skipped in this run
 * (*skip), and so is one whose persistent regions alone exceed the budget
 * (unless force: the smallest plan is wanted); one whose time without
 * recomputation exceeds upto stops there (the walk comes back when it gets
 * that far). A level that offloads the
 * optimizer only takes the rest from its base level: the same recompute
 * ops, and nearly the same arena (each gradient lives one update group
 * longer), the persistent bytes less the moments. */
static int calibrate(Search *s, Level *lv, Cand *c, int *skip, double upto, int force)
{
    int L = s->nlayers;
    size_t cells = (size_t)(L + 1) * (size_t)(L + 1);
    if (!lv->done) {
        lv->cost = xcalloc((size_t)(3 * L + 3), sizeof(double));
        lv->done = xcalloc(cells, 1);
        lv->bound = xcalloc(cells, sizeof *lv->bound);
        lv->peak = xcalloc(cells, sizeof *lv->peak);
        lv->secs = xcalloc(cells, sizeof *lv->secs);
        lv->run = xcalloc(cells, sizeof *lv->run);
    }
    if (plan_stair(s, lv, 0, 0, c, NULL, 0) < 0)
        return -1;
    lv->probed = 1;
    lv->t0 = c->seconds;
    lv->pn = (double)c->bound;
    if (!lv->arena)
        lv->arena = (double)c->arena;
    int act = (lv->offload & OFFLOAD_ACT) != 0;   /* recomputing keeps fewer activations to copy: faster */
    *skip = (s->has_best && lv->t0 >= s->best_c.seconds && !act) || (!force && lv->persist > s->budget);
    if (*skip || lv->calibrated || (lv->t0 > upto && !act))
        return 0;
    const Level *b0 = &s->lv[lv->base];
    if (lv->offload == OFFLOAD_OPT && b0->calibrated == 1 && b0 != lv) {
        memcpy(lv->cost, b0->cost, (size_t)(3 * L + 3) * sizeof(double));
        memcpy(lv->dmid, b0->dmid, sizeof lv->dmid);
        memcpy(lv->dtop, b0->dtop, sizeof lv->dtop);
        lv->calibrated = 1;
        return 0;
    }
    for (int m = RC_SELECTIVE; m <= RC_FULL && L > 0; m++) {
        double *tmp = xcalloc((size_t)(3 * L + 3), sizeof(double));
        int a = m == RC_FULL ? L : 0, b = L - a;
        if (plan_stair(s, lv, a, b, c, tmp, 0) < 0) {
            free(tmp);
            return -1;
        }
        double all = (double)c->bound, all_t = c->seconds;
        for (int l = 0; l < L; l++)
            lv->cost[3 * l + m] = tmp[3 * l + m];
        if (L == 1) {
            if (lv->offload)          /* with offload, the time as measured (the copies change too) */
                lv->cost[m] = all_t - lv->t0;
            lv->dtop[m] = all - lv->pn;
            free(tmp);
            continue;
        }
        if (plan_stair(s, lv, m == RC_FULL ? L - 1 : 0, m == RC_FULL ? 0 : L - 1, c, NULL, 0) < 0) {
            free(tmp);
            return -1;
        }
        lv->dmid[m] = ((double)c->bound - lv->pn) / (L - 1);
        lv->dtop[m] = all - (double)c->bound;
        if (lv->offload) {            /* what the mode changes in the copies: spread below the top, the top's apart */
            double extra = c->seconds - lv->t0;
            for (int l = 0; l < L - 1; l++)
                extra -= tmp[3 * l + m];
            for (int l = 0; l < L - 1; l++)
                lv->cost[3 * l + m] += extra / (L - 1);
            lv->cost[3 * (L - 1) + m] = all_t - c->seconds;
        }
        free(tmp);
    }
    lv->calibrated = 1;
    return 0;
}

/* A staircase the walk may plan, in order of predicted time; a = -1: a
 * lazy level to calibrate when the walk gets to its lower bound. */
typedef struct Step {
    double seconds, bound;
    int level, a, b;
    int levers;          /* the offload choices of its level (ties: fewer first) */
} Step;

/* Time order; at equal times (a step bound by the host update) the fewer
 * levers first: less offloaded, fewer layers recomputed, then the level and
 * the staircase (a total order: the walk is the same every run). */
static int by_seconds(const void *x, const void *y)
{
    const Step *p = x, *q = y;
    if (p->seconds != q->seconds)
        return p->seconds < q->seconds ? -1 : 1;
    int tp = p->levers * 1000 + p->a + p->b, tq = q->levers * 1000 + q->a + q->b;
    if (tp != tq)
        return tp < tq ? -1 : 1;
    if (p->level != q->level)
        return p->level < q->level ? -1 : 1;
    return p->a != q->a ? (p->a < q->a ? -1 : 1) : (p->b > q->b) - (p->b < q->b);
}

/* Nothing fit: plans each level's staircase of the least bound, so that
 * the smallest plan reported is as small as the search can tell. A
 * staircase's bound is its screened one once known, else the model's; the
 * least is screened until the least is a known one (the model is additive
 * and can miss mixed staircases by more than the difference between two
 * modes' savings, as selective and full of small graphs), at most
 * SEARCH_MAX_WALK screens per level. Lazy levels are calibrated first:
 * offload may be what fits. */
static int plan_smallest(Search *s, Cand *c)
{
    int L = s->nlayers;
    for (int i = 0; i < s->nlv; i++) {
        Level *lv = &s->lv[i];
        int skip = 0;
        if (!lv->calibrated && calibrate(s, lv, c, &skip, 1e300, 1) < 0)
            return -1;
        if (!lv->calibrated)
            continue;
        int ba = 0, bb = 0;
        for (int walk = 0; walk <= SEARCH_MAX_WALK; walk++) {
            double least = 0;
            for (int a = 0; a <= L; a++)
                for (int b = 0; a + b <= L; b++) {
                    int k = a * (L + 1) + b;
                    double x = lv->done[k] ? (double)lv->bound[k] : stair_bound(s, lv, a, b);
                    if ((a == 0 && b == 0) || x < least)
                        least = x, ba = a, bb = b;
                }
            if (lv->done[ba * (L + 1) + bb] || walk == SEARCH_MAX_WALK)
                break;
            if (plan_stair(s, lv, ba, bb, c, NULL, 0) < 0)   /* its bound */
                return -1;
        }
        if (plan_stair(s, lv, ba, bb, c, NULL, 1) < 0)
            return -1;
    }
    return 0;
}

/* A lower bound on the predicted time of level i's staircases: its t0 once
 * screened, else the next smaller K's (more micro-batches only add time),
 * and for an offload level its base's (offload only adds time) or, with
 * the optimizer offloaded, the base's update floor. */
static double level_lower(const Search *s, int i)
{
    const Level *lv = &s->lv[i];
    if (lv->probed && !(lv->offload & OFFLOAD_ACT))   /* offloaded activations: recompute can save copies */
        return lv->t0;
    double t = 0;
    if (lv->base != i) {
        const Level *b = &s->lv[lv->base];
        t = level_lower(s, lv->base);
        if (lv->offload & OFFLOAD_OPT && b->probed && b->floor > t)
            t = b->floor;
    }
    if (lv->prev >= 0) {
        double p = level_lower(s, lv->prev);
        t = p > t ? p : t;
    }
    return t;
}

/* Level i's staircases onto st (n of them so far): the time measured where
 * one was screened, else the model's; returns the new count. */
static size_t add_stairs(Search *s, int i, Step *st, size_t n)
{
    int L = s->nlayers;
    const Level *lv = &s->lv[i];
    for (int a = 0; a <= L; a++)
        for (int b = 0; a + b <= L; b++) {
            int k = a * (L + 1) + b;
            double t = lv->done && lv->done[k] ? lv->secs[k] : stair_seconds(s, lv, a, b);
            st[n++] = (Step){t, stair_bound(s, lv, a, b), i, a, b, __builtin_popcount((unsigned)lv->offload)};
        }
    return n;
}

/* The default search (docs/budget.md): calibrate each level (a lazy one
 * when the walk reaches its lower bound), then walk all staircases of all
 * levels cheapest first; screen those the model lets through, plan those
 * whose bound fits; the first plan that fits wins. */
static int search_fast(Search *s)
{
    int L = s->nlayers, rc = 0;
    Cand c = {0};
    c.modes = xcalloc((size_t)L + 1, 1);
    char *skip = xcalloc((size_t)s->nlv, 1);
    for (int i = 0; i < s->nlv && !rc; i++) {
        int sk = 0;
        if (!s->lv[i].lazy)
            rc = calibrate(s, &s->lv[i], &c, &sk, 1e300, 0);
        skip[i] = (char)sk;
    }
    size_t per = (size_t)(L + 1) * (size_t)(L + 2) / 2, n = 0;
    int cap = (int)((size_t)s->nlv * (per + 1) + 16);
    Step *st = xmalloc((size_t)cap * sizeof *st);
    for (int i = 0; i < s->nlv && !rc; i++) {
        Level *lv = &s->lv[i];
        if (lv->lazy && !lv->calibrated)     /* a placeholder at its lower bound */
            st[n++] = (Step){level_lower(s, i), 0, i, -1, 0, __builtin_popcount((unsigned)lv->offload)};
        else if (!skip[i] && lv->calibrated)
            n = add_stairs(s, i, st, n);
    }
    qsort(st, n, sizeof *st, by_seconds);
    double budget = (double)s->budget;
    int walked = 0;
    for (size_t k = 0; k < n && !rc && walked < SEARCH_MAX_WALK; k++) {
        Level *lv = &s->lv[st[k].level];
        if (s->has_best && st[k].seconds >= s->best_c.seconds)
            break;                     /* nothing cheaper is left */
        if (st[k].a < 0) {             /* a lazy level: its bound, its time without recomputation, then the rest */
            double lo = level_lower(s, st[k].level);
            int sk = 0;
            if (lo <= st[k].seconds)
                rc = calibrate(s, lv, &c, &sk, st[k].seconds, 0);
            size_t m = n;
            st = xgrow(st, &cap, (int)(n + per + 2), sizeof *st);
            if (!rc && !sk && !lv->calibrated)   /* slower than this: back when the walk gets there */
                st[m++] = (Step){level_lower(s, st[k].level), 0, st[k].level, -1, 0, st[k].levers};
            else if (!rc && !sk)
                m = add_stairs(s, st[k].level, st, n);
            qsort(st + k + 1, m - k - 1, sizeof *st, by_seconds);
            n = m;
            continue;
        }
        if (st[k].bound > budget + SEARCH_SLACK * lv->arena)
            continue;                  /* the model says it cannot fit */
        walked++;
        int cell = st[k].a * (L + 1) + st[k].b;
        rc = plan_stair(s, lv, st[k].a, st[k].b, &c, NULL, 0);      /* its bound, unless known */
        if (rc >= 0 && lv->bound[cell] <= s->budget && lv->secs[cell] > st[k].seconds * (1 + 1e-9)) {
            st = xgrow(st, &cap, (int)(n + 1), sizeof *st);       /* slower than modelled: back in time order */
            st[n++] = (Step){lv->secs[cell], (double)lv->bound[cell], st[k].level, st[k].a, st[k].b, st[k].levers};
            qsort(st + k + 1, n - k - 1, sizeof *st, by_seconds);
            rc = 0;
            continue;
        }
        if (rc >= 0 && lv->bound[cell] <= s->budget)
            rc = plan_stair(s, lv, st[k].a, st[k].b, &c, NULL, 1);  /* may fit: the real plan */
        if (rc > 0)
            rc = 0;
    }
    free(st);
    free(skip);
    if (!rc && !s->has_best)
        rc = plan_smallest(s, &c);
    free(c.modes);
    return rc;
}

Search *search_open(Ast *ast, const DriverOptions *o)
{
    DriverOptions d = *o;
    d.verbose = 0;
    d.micro_batches = 1;
    d.recompute = RC_NONE;
    d.rc_layers = NULL;
    Graph *g = driver_lower_front(ast, &d);   /* the dims and the layers */
    if (!g)
        return NULL;
    Search *s = xcalloc(1, sizeof *s);
    s->ast = ast;
    s->o = o;
    s->nlayers = graph_layers(g);
    s->B = graph_dim(g, "B") > 0 ? graph_dim(g, "B") : 1;
    /* the offload choices: the one given, or under auto all of them (act needs two layers) */
    int modes[4] = {o->offload > 0 ? o->offload : OFFLOAD_NONE}, nmodes = 1;
    if (o->offload < 0 && (strcmp(o->emit.precision, "bf16") || o->gpus <= 1)) {   /* bf16 split: not offloaded yet */
        modes[nmodes++] = OFFLOAD_OPT;
        if (s->nlayers >= 2) {
            modes[nmodes++] = OFFLOAD_ACT;
            modes[nmodes++] = OFFLOAD_OPT | OFFLOAD_ACT;
        }
    }
    s->lv = xcalloc((size_t)s->B * (size_t)nmodes, sizeof *s->lv);
    int prev = -1;                       /* the first level of the last K */
    for (long K = 1; K <= s->B; K++) {   /* levels per micro-batch count dividing B */
        if (s->B % K)
            continue;
        int base = s->nlv;
        for (int m = 0; m < nmodes; m++) {
            Level *lv = &s->lv[s->nlv++];
            lv->K = (int)K;
            lv->offload = modes[m];
            lv->base = base;
            lv->prev = prev >= 0 ? prev + m : -1;
            lv->lazy = s->nlv > 1;       /* all but the first: calibrated when the walk gets to them */
            if (m > 0) {
                lv->front = s->lv[base].front;
                continue;
            }
            d.micro_batches = (int)K;
            lv->front = K == 1 ? g : driver_lower_front(ast, &d);
            if (!lv->front) {
                search_close(s);
                return NULL;
            }
        }
        prev = base;
    }
    return s;
}

/* Forgets the last run's picks. */
static void reset(Search *s)
{
    if (s->small != s->best)
        graph_free(s->small);
    graph_free(s->best);
    free(s->best_c.modes);
    free(s->small_c.modes);
    s->best = s->small = NULL;
    s->best_c = s->small_c = (Cand){0};
    s->has_best = s->has_small = 0;
}

int search_run(Search *s, size_t budget, SearchPick *p)
{
    reset(s);
    s->run++;
    s->budget = budget;
    int rc = s->o->search_exhaustive ? search_exhaustive(s) : search_fast(s);
    if (rc < 0 || !s->has_small)
        return -1;
    const Cand *c = s->has_best ? &s->best_c : &s->small_c;
    *p = (SearchPick){s->has_best, c->K, c->modes, c->offload, c->peak, c->seconds, s->has_best ? s->best : s->small};
    return s->has_best ? 0 : 1;
}

Graph *search_take(Search *s)
{
    Graph *g = s->has_best ? s->best : s->small;
    if (s->best == g)
        s->best = NULL;
    if (s->small == g)
        s->small = NULL;
    return g;
}

void search_close(Search *s)
{
    if (!s)
        return;
    reset(s);
    for (int i = 0; i < s->nlv; i++) {
        Level *lv = &s->lv[i];
        if (lv->base == i)               /* the levels of one K share its front */
            graph_free(lv->front);
        free(lv->cost);
        free(lv->done);
        free(lv->bound);
        free(lv->peak);
        free(lv->secs);
        free(lv->run);
    }
    free(s->lv);
    free(s);
}

Graph *driver_search(Ast *ast, DriverOptions *o)
{
    Search *s = search_open(ast, o);
    if (!s)
        return NULL;
    SearchPick p;
    int rc = search_run(s, o->emit.budget_bytes, &p);
    Graph *g = NULL;
    if (rc == 0) {
        if (o->verbose)
            fprintf(stderr, "gcompile: search: chose K=%d recompute %s offload %s peak %zu predicted %.6f ms (%d plans, "
                    "%d bounds)\n", p.K, p.modes, offload_name(p.offload), p.peak, p.seconds * 1e3, s->planned, s->screened);
        free(o->search_layers);                  /* --split auto: the previous candidate's */
        o->search_layers = xstrdup(p.modes);     /* main frees it */
        o->emit.recompute_layers = s->nlayers > 0 ? o->search_layers : NULL;
        g = search_take(s);
    } else if (rc == 1 && o->split_auto) {      /* this split fits nowhere: split_auto.c says so */
        free(o->search_layers);
        o->search_layers = xstrdup(p.modes);
        o->emit.recompute_layers = s->nlayers > 0 ? o->search_layers : NULL;
        g = search_take(s);
    } else if (rc == 1) {
        static const char *const part[] = {"parameters", "gradients", "optimizer state", "activations (arena)"};
        const Graph *sm = p.graph;
        int big = 0;
        for (int r = 1; r < RG_COUNT; r++)
            if (region_on_device((Region)r) && sm->region_bytes[r] > sm->region_bytes[big])
                big = r;
        char a[32], b[32], e[32];
        fprintf(stderr, "gcompile: error: nothing fits --mem %s: the smallest plan found needs %s (--micro-batches "
                        "%d --recompute %s --offload %s; --mem %zu compiles); the largest part is %s %s\n",
                human_bytes(a, sizeof a, (double)o->emit.budget_bytes), human_bytes(b, sizeof b, (double)p.peak),
                p.K, modes_label(p.modes), offload_name(p.offload), p.peak, part[big],
                human_bytes(e, sizeof e, (double)sm->region_bytes[big]));
    }
    search_close(s);
    return g;
}
