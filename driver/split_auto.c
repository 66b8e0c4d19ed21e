/* split_auto.c — --split auto: plan every split the compiler implements with
 * the real planner, keep those whose per-rank plan fits --mem, and choose
 * the least predicted step time (ties: the fewest bytes).
 *
 * Predicted step time = compute + communication, no overlap assumed:
 *  - compute: the step's FLOPs (op_flops over the schedule) at an assumed
 *    device rate (COMPUTE_FLOPS below). A placeholder, kept to this one
 *    function until the cost model of issue 10 lands; it is the same for
 *    every candidate of one --gpus N (each rank runs B rows), so the choice
 *    rests on memory and communication.
 *  - communication: bytes one rank sends per step (ring algorithms,
 *    g->comm_bytes) over the --interconnect bandwidth, plus a latency per
 *    collective.
 */
#include <string.h>

#include "driver.h"

/* the first is what the driver plans first (main.c sets it) */
static const SplitKind candidates[] = {SPLIT_DP, SPLIT_ZERO1, SPLIT_ZERO2, SPLIT_ZERO3};
enum { NCAND = sizeof candidates / sizeof candidates[0] };

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

/* Compute time of one step: the placeholder estimate (see the file comment). */
static double compute_seconds(const Graph *g, const DriverOptions *o)
{
    const double COMPUTE_FLOPS = !strcmp(o->emit.target, "cpu") ? 2e11 : 5e13;
    double flops = 0;
    for (int k = 0; k < g->nsched; k++)
        flops += op_flops(g, &g->ops[g->sched[k]]);
    return flops / COMPUTE_FLOPS;
}

typedef struct Cand { size_t bytes; double compute, comm; int ncoll, fits; } Cand;

static Cand cand[NCAND];
static int next_cand;        /* candidates planned so far */

/* the plan's regions, plus the CUDA target's reserve (as driver_check_budget) */
static size_t plan_bytes(const Graph *g, const DriverOptions *o)
{
    size_t b = strcmp(o->emit.target, "cuda") ? 0 : GC_CUDA_RESERVE_BYTES;
    for (int r = 0; r < RG_COUNT; r++)
        b += g->region_bytes[r];
    return b;
}

static char *report(const DriverOptions *o, int chosen, double bw, double lat)
{
    char *s = xasprintf("  --split auto weighed (--interconnect %s: %.0f GB/s, %.0f us per collective; "
                        "compute at an assumed %s, same for all; bytes include the CUDA reserve):\n", o->interconnect, bw / 1e9, lat * 1e6,
                        !strcmp(o->emit.target, "cpu") ? "200 GFLOP/s" : "50 TFLOP/s");
    for (int i = 0; i < NCAND; i++) {
        char h[32];
        const Cand *c = &cand[i];
        char *line = xasprintf("%s    %-6s %12s per rank%s  step %.4f s = compute %.4f + comm %.4f (%d collectives)%s\n",
                               s, split_kind_name(candidates[i]), human_bytes(h, sizeof h, (double)c->bytes),
                               c->fits ? "        " : " (>mem)", c->compute + c->comm, c->compute, c->comm, c->ncoll,
                               i == chosen ? "  <- chosen" : "");
        free(s);
        s = line;
    }
    char *tail = xasprintf("%s    (not weighed: tp=K, not implemented yet)\n", s);
    free(s);
    return tail;
}

int driver_split_auto(Graph *g, DriverOptions *o)
{
    double bw, lat;
    link_profile(o->interconnect, &bw, &lat);
    if (next_cand < NCAND) {                 /* g is candidate next_cand */
        Cand *c = &cand[next_cand];
        int ncoll = 0;
        for (int k = 0; k < g->nsched; k++)
            ncoll += g->ops[g->sched[k]].phase == PH_COMM;
        *c = (Cand){plan_bytes(g, o), compute_seconds(g, o), g->comm_bytes / bw + ncoll * lat, ncoll,
                    !o->emit.budget_bytes || plan_bytes(g, o) <= o->emit.budget_bytes};
        if (++next_cand < NCAND) {
            o->split.kind = candidates[next_cand];
            return 1;
        }
        int best = -1;
        for (int i = 0; i < NCAND; i++) {
            const Cand *x = &cand[i];
            double t = x->compute + x->comm;
            if (x->fits && (best < 0 || t < cand[best].compute + cand[best].comm ||
                            (t == cand[best].compute + cand[best].comm && x->bytes < cand[best].bytes)))
                best = i;
        }
        if (best < 0) {
            char *r = report(o, -1, bw, lat);
            char h[32];
            fprintf(stderr, "gcompile: error: no split over %d devices fits --mem %s:\n%s", o->gpus,
                    human_bytes(h, sizeof h, (double)o->emit.budget_bytes), r);
            free(r);
            return -1;
        }
        o->split.kind = candidates[best];
        next_cand = NCAND + best;
        if (best == NCAND - 1) {             /* g is the chosen one already */
            g->split_report = report(o, best, bw, lat);
            o->split_auto = 0;
            return 0;
        }
        return 1;
    }
    g->split_report = report(o, next_cand - NCAND, bw, lat);   /* the chosen one, planned again */
    o->split_auto = 0;
    return 0;
}
