/* split_auto.c — --split auto: plan every split the compiler implements with
 * the real planner (dp, zero1-3, tp over all ranks, and tp in groups of K
 * with dp, zero1 or zero2 over the groups; a tp group of K ranks takes K·B
 * rows, so every candidate trains the same global batch), keep those whose per-rank plan fits --mem, and choose
 * the least predicted step time (ties: the fewest bytes).
 *
 * With --mem (and no --recompute / --micro-batches of the user's) each
 * candidate is the budget search's pick for that split (driver/search.c:
 * the micro-batch count and per-layer recompute with the least predicted
 * time whose real plan, checked by plan_check, fits), so a split that fits
 * only with recomputation competes with one that fits without it.
 *
 * Predicted step time = compute + communication, no overlap assumed:
 *  - compute: the cost model (passes/costs.c through driver_predict: the
 *    --device profile, else h100 for CUDA and cpu for the CPU target), with
 *    recomputation and every micro-batch counted;
 *  - communication: bytes one rank sends per step with ring algorithms over
 *    the --interconnect bandwidth, plus a latency per collective, each as
 *    often as it runs per step (op_runs_per_step: zero3's parameter gathers
 *    once per micro-batch, the gradient reductions and the update's
 *    all-gathers once).
 *
 * Candidates are planned in order of a lower bound on their step time: the
 * time of the split with one micro-batch, nothing recomputed and nothing
 * offloaded (each lever only adds time: more micro-batches run smaller
 * matmuls more often, recomputation adds ops, offload adds waits, zero3
 * gathers once per micro-batch), from a screening lowering (no plan). A
 * candidate whose bound is no less than the best time found is not planned
 * (the report says so), and the chosen plan is the one its search made.
 */
#include <string.h>

#include "driver.h"
#include "frontend.h"

/* The candidates: dp, zero1-3, tp over all ranks, then tp in groups of each
 * K dividing N with dp, zero1 and zero2 over the N/K groups. The first is
 * what the driver plans first (main.c sets it). */
typedef struct Choice { SplitKind kind; int tp; SplitKind rest; } Choice;
enum { MAXCAND = 64 };
static Choice candidates[MAXCAND];
static int NCAND;

static void list_candidates(int ranks)
{
    static const SplitKind plain[] = {SPLIT_DP, SPLIT_ZERO1, SPLIT_ZERO2, SPLIT_ZERO3};
    static const SplitKind rest[] = {SPLIT_DP, SPLIT_ZERO1, SPLIT_ZERO2};
    NCAND = 0;
    for (int i = 0; i < 4; i++)
        candidates[NCAND++] = (Choice){plain[i], 0, SPLIT_DP};
    candidates[NCAND++] = (Choice){SPLIT_TP, ranks, SPLIT_DP};
    for (int k = 2; k < ranks; k++)
        for (int i = 0; i < 3 && ranks % k == 0 && NCAND < MAXCAND; i++)
            candidates[NCAND++] = (Choice){SPLIT_TP, k, rest[i]};
}

/* Stated interconnect profiles: bytes/s one rank sends, seconds per collective. */
static void link_profile(const char *name, double *bw, double *lat)
{
    if (!strcmp(name, "pcie"))
        *bw = 16e9, *lat = 20e-6;       /* PCIe 4.0 x16, about half of its 32 GB/s in practice */
    else if (!strcmp(name, "ib"))
        *bw = 25e9, *lat = 10e-6;       /* InfiniBand HDR, 200 Gb/s per GPU */
    else
        *bw = 150e9, *lat = 5e-6;       /* NVLink (A100/H100 class), ring bus bandwidth */
}

typedef struct Cand {
    size_t bytes;
    double compute, comm;
    int ncoll, fits, K, offload;
    char modes[160];         /* the per-layer recompute letters, "" when none was chosen */
    int uncut;               /* tp: nothing in the graph can be cut over the ranks (not weighed) */
    double bound;            /* a lower bound on its step time: K = 1, nothing recomputed or offloaded */
    int pruned;              /* not planned: its bound cannot beat the chosen split's time */
} Cand;

static Cand cand[MAXCAND];

/* Seconds one rank spends sending per step, and the collectives it runs
 * (*ncoll), micro-batches counted. */
static double comm_seconds(const Graph *g, double bw, double lat, int *ncoll)
{
    double s = 0;
    *ncoll = 0;
    for (int k = 0; k < g->nsched; k++) {
        const Op *op = &g->ops[g->sched[k]];
        if (op->phase != PH_COMM)
            continue;
        double bytes = 0, n = op->attr[0] > 1 ? op->attr[0] : 1;   /* the ranks of its group */
        switch (op->kind) {
        case OP_ALLREDUCE: bytes = 2 * (n - 1) / n * (double)g->t[op->in[0]].bytes; break;
        case OP_REDUCE_SCATTER: bytes = (n - 1) / n * (double)g->t[op->in[0]].bytes; break;
        case OP_ALLGATHER: bytes = (n - 1) / n * (double)g->t[op->in[0]].bytes; break;
        case OP_GATHER: bytes = (n - 1) / n * (double)g->t[op->out[0]].bytes; break;
        default: break;
        }
        int times = op_runs_per_step(g, op);
        s += times * (bytes / bw + lat);
        *ncoll += times;
    }
    return s;
}

/* the plan's regions, plus the CUDA target's reserve (as driver_check_budget) */
static size_t plan_bytes(const Graph *g, const DriverOptions *o)
{
    return graph_device_bytes(g) + (strcmp(o->emit.target, "cuda") ? 0 : GC_CUDA_RESERVE_BYTES);
}

/* "zero2", "tp=8" */
static void cand_name(char *buf, size_t n, int i, int ranks)
{
    const Choice *c = &candidates[i];
    if (c->kind != SPLIT_TP)
        snprintf(buf, n, "%s", split_kind_name(c->kind));
    else if (c->tp == ranks)
        snprintf(buf, n, "tp=%d", ranks);
    else
        snprintf(buf, n, "tp=%d+%s", c->tp, split_kind_name(c->rest));
}

static char *report(const DriverOptions *o, int chosen, double bw, double lat)
{
    char *s = xasprintf("  --split auto weighed (--interconnect %s: %.0f GB/s, %.0f us per collective; compute from "
                        "the cost model (%s)%s; bytes include the CUDA reserve):\n", o->interconnect, bw / 1e9,
                        lat * 1e6, o->emit.device ? o->emit.device : "-",
                        o->search_layers ? "; each split with the budget search's micro-batches and recompute" : "");
    for (int i = 0; i < NCAND; i++) {
        char h[32], name[16];
        const Cand *c = &cand[i];
        cand_name(name, sizeof name, i, o->gpus);
        if (c->uncut) {
            char *line = xasprintf("%s    %-10s not weighed: no matmul pair of the graph can be cut over %d ranks\n", s,
                                   name, candidates[i].tp);
            free(s);
            s = line;
            continue;
        }
        if (c->pruned) {
            char *line = xasprintf("%s    %-10s not planned: step at least %.4f s (one micro-batch, nothing "
                                   "recomputed or offloaded), no faster than the chosen\n", s, name, c->bound);
            free(s);
            s = line;
            continue;
        }
        char *line = xasprintf("%s    %-10s %12s per rank%s  step %.4f s = compute %.4f + comm %.4f (%d collectives)"
                               "  K=%d recompute %s%s%s%s\n",
                               s, name, human_bytes(h, sizeof h, (double)c->bytes),
                               c->fits ? "        " : " (>mem)", c->compute + c->comm, c->compute, c->comm, c->ncoll,
                               c->K, c->modes[0] ? c->modes : "none", c->offload ? " offload " : "",
                               c->offload ? offload_name(c->offload) : "", i == chosen ? "  <- chosen" : "");
        free(s);
        s = line;
    }
    char *why;
    if (chosen >= 0) {
        const Cand *c = &cand[chosen];
        int faster = 0, fitless = 0;
        for (int i = 0; i < NCAND; i++)
            if (i != chosen && !cand[i].uncut && !cand[i].pruned)
                cand[i].fits ? faster++ : fitless++;
        char other[96] = "";
        if (fitless)
            snprintf(other, sizeof other, "; %d do%s not fit --mem even with the search's levers", fitless,
                     fitless == 1 ? "es" : "");
        char name[16];
        cand_name(name, sizeof name, chosen, o->gpus);
        why = xasprintf("%s    why: %s is the least predicted step time (%.4f s) of the %d split%s planned that fit%s%s\n",
                        s, name, c->compute + c->comm, faster + 1, faster ? "s" : "",
                        other, !o->emit.budget_bytes ? " (no --mem)" : "");
    } else {
        why = xstrdup(s);
    }
    free(s);
    char *tail = xasprintf("%s    (tp=K: each group of K ranks takes K·B rows, so every split trains the same global "
                           "batch of %d·B rows)\n", why, o->gpus);
    free(why);
    return tail;
}

/* o->split becomes candidate i */
static void set_candidate(DriverOptions *o, int i)
{
    o->split.kind = candidates[i].kind;
    o->split.tp = candidates[i].tp;
    o->split.rest = candidates[i].rest;
    o->tp_global_rows = candidates[i].kind == SPLIT_TP;
}

/* Candidate i's lower bound on its step time (Cand.bound): a screening
 * lowering with one micro-batch, nothing recomputed or offloaded. 0, or 1
 * when it cannot be cut (tp). */
static int bound_candidate(Ast *ast, const DriverOptions *o, int i, double bw, double lat)
{
    DriverOptions d = *o;
    set_candidate(&d, i);
    d.verbose = 0;
    d.micro_batches = 0;
    d.recompute = RC_NONE;
    d.rc_layers = NULL;
    d.offload = OFFLOAD_NONE;
    d.bound_only = 1;
    Graph *g = driver_lower(ast, &d);
    if (!g)
        return 1;
    int ncoll;
    double comm = comm_seconds(g, bw, lat, &ncoll);
    driver_predict(g, &d);
    cand[i].bound = d.emit.predicted_s + comm;
    graph_free(g);
    return 0;
}

static int by_bound(const void *x, const void *y)
{
    const Cand *a = &cand[*(const int *)x], *b = &cand[*(const int *)y];
    if (a->bound != b->bound)
        return a->bound < b->bound ? -1 : 1;
    return (*(const int *)x > *(const int *)y) - (*(const int *)x < *(const int *)y);
}

/* Candidate i planned as the driver plans a split (the search under --mem
 * with the levers left to it), recorded in cand[i]; NULL after an error or
 * when it cannot be cut. */
static Graph *plan_candidate(Ast *ast, DriverOptions *o, int i, double bw, double lat)
{
    set_candidate(o, i);
    Graph *g = o->emit.budget_bytes && o->recompute < 0 && o->micro_batches == 0 ? driver_search(ast, o)
                                                                                  : driver_lower(ast, o);
    if (!g)
        return NULL;
    Cand *c = &cand[i];
    int ncoll = 0;
    double comm = comm_seconds(g, bw, lat, &ncoll), bound = c->bound;
    driver_predict(g, o);
    *c = (Cand){plan_bytes(g, o), o->emit.predicted_s, comm, ncoll,
                !o->emit.budget_bytes || plan_bytes(g, o) <= o->emit.budget_bytes,
                g->micro_batches > 1 ? g->micro_batches : 1, g->offload, "", 0, bound, 0};
    if (o->emit.recompute_layers)
        snprintf(c->modes, sizeof c->modes, "%s", o->emit.recompute_layers);
    return g;
}

Graph *driver_split_auto(Ast *ast, DriverOptions *o)
{
    double bw, lat;
    link_profile(o->interconnect, &bw, &lat);
    list_candidates(o->gpus);
    int order[MAXCAND], n = 0;
    for (int i = 0; i < NCAND; i++) {
        cand[i] = (Cand){0};
        if (bound_candidate(ast, o, i, bw, lat)) {
            if (diag_count())
                return NULL;
            cand[i].uncut = 1;
            continue;
        }
        order[n++] = i;
    }
    qsort(order, (size_t)n, sizeof *order, by_bound);
    int best = -1;
    Graph *kept = NULL;
    char *layers = NULL;       /* the chosen split's search_layers */
    for (int k = 0; k < n; k++) {
        int i = order[k];
        double t = best >= 0 ? cand[best].compute + cand[best].comm : 0;
        if (best >= 0 && cand[i].bound >= t) {
            cand[i].pruned = 1;
            continue;
        }
        Graph *g = plan_candidate(ast, o, i, bw, lat);
        if (!g) {
            if (diag_count()) {
                graph_free(kept);
                free(layers);
                return NULL;
            }
            cand[i].uncut = 1;
            continue;
        }
        const Cand *x = &cand[i];
        double tx = x->compute + x->comm;
        if (x->fits && (best < 0 || tx < t || (tx == t && x->bytes < cand[best].bytes))) {
            graph_free(kept);
            free(layers);
            kept = g;
            layers = o->search_layers ? xstrdup(o->search_layers) : NULL;
            best = i;
        } else {
            graph_free(g);
        }
    }
    if (best < 0) {
        char *r = report(o, -1, bw, lat);
        char h[32];
        fprintf(stderr, "gcompile: error: no split over %d devices fits --mem %s:\n%s", o->gpus,
                human_bytes(h, sizeof h, (double)o->emit.budget_bytes), r);
        free(r);
        free(layers);
        return NULL;
    }
    set_candidate(o, best);
    free(o->search_layers);              /* the chosen split's levers (main frees them) */
    o->search_layers = layers;
    o->emit.recompute_layers = layers;
    kept->split_report = report(o, best, bw, lat);
    o->split_auto = 0;
    return kept;
}
