/* search.c — the budget search (--mem with --recompute auto, no
 * --micro-batches): the micro-batch count K and each layer's recompute mode
 * with the least predicted step time whose plan fits. How it works and why
 * it is optimal: docs/budget.md.
 */
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "frontend.h"

static const char *const mode_names[] = {"none", "selective", "full"};
static const char mode_letters[] = "nsf";

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
}

/* What the plan needs per device, as driver_check_budget counts it: its
 * regions, plus the stated CUDA reserve on the CUDA target. */
static size_t plan_total(const Graph *g, const DriverOptions *o)
{
    size_t total = strcmp(o->emit.target, "cuda") ? 0 : GC_CUDA_RESERVE_BYTES;
    for (int r = 0; r < RG_COUNT; r++)
        total += g->region_bytes[r];
    return total;
}

/* A candidate: K micro-batches, one mode letter per layer. */
typedef struct Cand {
    int K;
    char *modes;         /* "ffsn": layer 0 first */
    size_t peak;         /* planned: regions (+ CUDA reserve) */
    double seconds;      /* predicted step time */
} Cand;

/* The search's state: the options, what it planned, the best that fits and
 * the smallest plan. */
typedef struct Search {
    Ast *ast;
    const DriverOptions *o;
    int nlayers;
    long B;
    int planned;                 /* real plans made */
    Graph *best, *small;         /* owned */
    Cand best_c, small_c;
} Search;

static void cand_set(Cand *dst, const Cand *src)
{
    free(dst->modes);
    *dst = *src;
    dst->modes = xstrdup(src->modes);
}

/* "fffs" -> "full x3, selective x1"-like label for messages: the letters
 * when the layers differ, the mode's name when all agree. */
static const char *modes_label(const char *modes)
{
    for (const char *p = modes; *p; p++)
        if (*p != modes[0])
            return modes;
    return modes[0] ? mode_names[driver_rc_choice(modes[0])] : "none";
}

/* Plans candidate c with the real pipeline (lower + plan_check), fills its
 * peak and predicted time, and keeps the graph when it is the best that fits
 * or the smallest so far. 0, or -1 after a reported error. */
static int plan(Search *s, Cand *c)
{
    DriverOptions d = *s->o;
    d.verbose = 0;
    d.micro_batches = c->K;
    d.recompute = RC_NONE;
    d.rc_layers = s->nlayers > 0 ? c->modes : NULL;
    Graph *g = driver_lower(s->ast, &d);
    if (!g)
        return -1;
    s->planned++;
    driver_predict(g, &d);
    c->peak = plan_total(g, s->o);
    c->seconds = d.emit.predicted_s;
    int fits = c->peak <= s->o->emit.budget_bytes;
    if (s->o->verbose)
        fprintf(stderr, "gcompile: search: K=%d recompute %-9s peak %zu predicted %.6f ms%s\n", c->K,
                modes_label(c->modes), c->peak, c->seconds * 1e3, fits ? " fits" : "");
    int is_best = fits && (!s->best || c->seconds < s->best_c.seconds);
    int is_small = !s->small || c->peak < s->small_c.peak;
    Graph *ob = s->best, *os = s->small;
    if (is_best) {
        s->best = g;
        cand_set(&s->best_c, c);
    }
    if (is_small) {
        s->small = g;
        cand_set(&s->small_c, c);
    }
    if (ob && ob != s->best && ob != s->small)
        graph_free(ob);
    if (os && os != ob && os != s->best && os != s->small)
        graph_free(os);
    if (!is_best && !is_small)
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
    for (long K = 1; K <= s->B && !rc; K++) {
        if (s->B % K)
            continue;
        c.K = (int)K;
        for (long a = 0; a < (long)n && !rc; a++) {
            long x = a;
            for (int l = 0; l < s->nlayers; l++, x /= 3)
                c.modes[l] = mode_letters[x % 3];
            rc = plan(s, &c);
        }
    }
    free(c.modes);
    return rc;
}

/* The default search. */
static int search_fast(Search *s)
{
    Cand c = {0};
    c.modes = xcalloc((size_t)s->nlayers + 1, 1);
    int rc = 0;
    for (long K = 1; K <= s->B && !rc; K++) {
        if (s->B % K)
            continue;
        c.K = (int)K;
        for (int m = RC_NONE; m <= RC_FULL && !rc; m++) {
            memset(c.modes, mode_letters[m], (size_t)s->nlayers);
            rc = plan(s, &c);
            if (!rc && c.peak <= s->o->emit.budget_bytes)
                break;
        }
    }
    free(c.modes);
    return rc;
}

Graph *driver_search(Ast *ast, DriverOptions *o)
{
    DriverOptions d = *o;
    d.verbose = 0;
    d.micro_batches = 1;
    d.recompute = RC_NONE;
    d.rc_layers = NULL;
    Graph *g = driver_lower(ast, &d);   /* the dims and the layers */
    if (!g)
        return NULL;
    Search s = {.ast = ast, .o = o, .nlayers = graph_layers(g), .B = graph_dim(g, "B")};
    if (s.B < 1)
        s.B = 1;
    graph_free(g);
    int rc = o->search_exhaustive ? search_exhaustive(&s) : search_fast(&s);
    if (rc == 0 && s.best) {
        if (o->verbose)
            fprintf(stderr, "gcompile: search: chose K=%d recompute %s peak %zu predicted %.6f ms (%d plans)\n",
                    s.best_c.K, s.best_c.modes, s.best_c.peak, s.best_c.seconds * 1e3, s.planned);
        if (s.small != s.best)
            graph_free(s.small);
        o->search_layers = s.best_c.modes;     /* main frees it */
        o->emit.recompute_layers = s.nlayers > 0 ? s.best_c.modes : NULL;
        free(s.small_c.modes);
        return s.best;
    }
    if (rc == 0 && s.small) {
        static const char *const part[] = {"parameters", "gradients", "optimizer state", "activations (arena)"};
        Graph *sm = s.small;
        int big = 0;
        for (int r = 1; r < RG_COUNT; r++)
            if (sm->region_bytes[r] > sm->region_bytes[big])
                big = r;
        char a[32], b[32], e[32];
        fprintf(stderr, "gcompile: error: nothing fits --mem %s: the smallest plan found needs %s (--micro-batches "
                        "%d --recompute %s; --mem %zu compiles); the largest part is %s %s\n",
                human_bytes(a, sizeof a, (double)o->emit.budget_bytes), human_bytes(b, sizeof b, (double)s.small_c.peak),
                s.small_c.K, modes_label(s.small_c.modes), s.small_c.peak, part[big],
                human_bytes(e, sizeof e, (double)sm->region_bytes[big]));
    }
    graph_free(s.small);
    free(s.small_c.modes);
    free(s.best_c.modes);
    return NULL;
}
