/* test_offload_plan.c — the host region in the memory plan (passes/memplan.c)
 * and the plan checker's rule 9 (passes/plancheck.c) on a graph built by
 * hand: an activation offloaded after its forward use and prefetched for
 * its backward use, beside persistent host tensors. The planner packs the
 * persistent ones and plans the copy by its lifetime; the checker accepts
 * the plan and rejects each way of breaking it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"
#include "plan_util.h"

static int failures;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                              \
        }                                                                            \
    } while (0)

#define CHECK_EQ(a, b)                                                                                \
    do {                                                                                              \
        long long a_ = (long long)(a), b_ = (long long)(b);                                           \
        if (a_ != b_) {                                                                               \
            fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", __FILE__, __LINE__, #a, a_, #b, \
                    b_);                                                                              \
            failures++;                                                                               \
        }                                                                                             \
    } while (0)

static int copy(Graph *g, OpKind k, const char *name, int in, int out, int slot, Phase ph)
{
    int id = pu_op(g, k, name, 1, &in, 1, &out, 0, ph);
    g->ops[id].attr[0] = slot;
    return id;
}

static int wait(Graph *g, const char *name, int dev, int host, int slot, Phase ph)
{
    int id = pu_op(g, OP_COPY_WAIT, name, 2, (int[]){dev, host}, 0, NULL, 0, ph);
    g->ops[id].attr[0] = slot;
    return id;
}

typedef struct Ids { int x, a, ah, a2, b, c, loss, m, v, master, off, pf, w0, w1; } Ids;

/*  0 a = gelu(x)               fwd
 *  1 offload a -> ah (slot 0)  fwd
 *  2 b = scale(x)              fwd
 *  3 copy_wait a, ah (0)       fwd
 *  4 prefetch ah -> a2 (1)     bwd
 *  5 copy_wait a2, ah (1)      bwd
 *  6 c = a2 + b                bwd
 *  7 loss = reduce_rows(c)     bwd
 * with moments m, v and a master in the host region (persistent).
 * mutate (may be NULL) changes the graph before it is planned. */
static Graph *build(Ids *d, void (*mutate)(Graph *, const Ids *))
{
    Graph *g = graph_new("offload");
    d->x = pu_tensor(g, "x", 1000, TK_INPUT);
    d->a = pu_tensor(g, "a", 1000, TK_ACTIVATION);
    d->ah = pu_tensor(g, "host.a", 1000, TK_ACTIVATION);
    d->a2 = pu_tensor(g, "pf.a", 1000, TK_ACTIVATION);
    d->b = pu_tensor(g, "b", 1000, TK_ACTIVATION);
    d->c = pu_tensor(g, "c", 1000, TK_ACTIVATION);
    d->loss = pu_tensor(g, "loss", 1, TK_ACTIVATION);
    d->m = pu_tensor(g, "m", 30, TK_OPTSTATE);
    d->v = pu_tensor(g, "v", 30, TK_OPTSTATE);
    d->master = pu_tensor(g, "master", 30, TK_PARAM);
    g->t[d->ah].region = g->t[d->m].region = g->t[d->v].region = g->t[d->master].region = RG_HOST;
    pu_op(g, OP_GELU, "a", 1, &d->x, 1, &d->a, 0, PH_FWD);
    d->off = copy(g, OP_OFFLOAD, "off.a", d->a, d->ah, 0, PH_FWD);
    pu_op(g, OP_SCALE, "b", 1, &d->x, 1, &d->b, 0, PH_FWD);
    d->w0 = wait(g, "wait.a", d->a, d->ah, 0, PH_FWD);
    d->pf = copy(g, OP_PREFETCH, "pf.a", d->ah, d->a2, 1, PH_BWD);
    d->w1 = wait(g, "wait.pf.a", d->a2, d->ah, 1, PH_BWD);
    pu_op(g, OP_ADD, "c", 2, (int[]){d->a2, d->b}, 1, &d->c, 0, PH_BWD);
    pu_op(g, OP_REDUCE_ROWS, "loss", 1, &d->c, 1, &d->loss, 0, PH_BWD);
    g->loss = d->loss;
    g->copy_slots = 2;
    pu_schedule_all(g);
    if (mutate)
        mutate(g, d);
    fill_liveness(g);
    pass_memplan(g);
    return g;
}

/* The plan: persistent host tensors packed from 0, the copy after them at a
 * 256-byte boundary, live from its offload to its prefetch's wait; the
 * device peak excludes the host region. */
static void test_plan(void)
{
    Ids d;
    Graph *g = build(&d, NULL);
    char err[512];
    CHECK_EQ(plan_check(g, err, sizeof err), 0);
    if (*err)
        fprintf(stderr, "plan_check: %s\n", err);
    CHECK_EQ(g->t[d.ah].first, 1);
    CHECK_EQ(g->t[d.ah].last, 5);
    CHECK_EQ(g->t[d.a].last, 3);        /* a's storage is free once the offload is waited for */
    CHECK_EQ(g->t[d.m].first, 0);
    CHECK_EQ(g->t[d.m].last, g->nsched - 1);
    size_t persist = 3 * 30 * 4;         /* m, v, master */
    CHECK_EQ(g->t[d.ah].offset, 512);    /* 360 bytes rounded up */
    CHECK(g->t[d.m].offset < persist && g->t[d.v].offset < persist && g->t[d.master].offset < persist);
    CHECK_EQ(g->region_lower_bound[RG_HOST], persist + 4096);
    CHECK_EQ(g->region_bytes[RG_HOST], 512 + 4096);
    CHECK_EQ(graph_device_bytes(g), g->region_bytes[RG_ARENA]);
    CHECK(g->region_bytes[RG_ARENA] > 0);
    graph_free(g);
}

/* Ways of breaking the plan before it is planned (so that only rule 9 sees them). */
static void m_nowait(Graph *g, const Ids *d)   /* the prefetch's wait names a slot no copy has */
{
    g->ops[d->w1].attr[0] = 2;
    g->copy_slots = 3;
}
static void m_compute(Graph *g, const Ids *d) { g->ops[2].in[0] = d->ah; }   /* a kernel reads the host copy */
static void m_early(Graph *g, const Ids *d)    /* the backward reads the prefetched copy before its wait */
{
    int s5 = g->sched[5], s6 = g->sched[6];
    g->sched[5] = s6, g->sched[6] = s5;
    g->ops[s6].step = 5, g->ops[s5].step = 6;
    (void)d;
}
static void m_clobber(Graph *g, const Ids *d) { g->ops[2].out[0] = d->a; }   /* the forward writes a while it is offloaded */
static void m_gate(Graph *g, const Ids *d) { g->ops[d->w0].phase = PH_BWD; }  /* offloaded in the fwd, waited in the bwd */

/* Each way of breaking the plan is rejected, naming what is wrong. */
static void test_negative(void)
{
    static const struct { const char *what, *expect; void (*mutate)(Graph *, const Ids *); } cases[] = {
        {"nowait", "no copy_wait after it", m_nowait},
        {"compute", "touches the host region", m_compute},
        {"early", "in flight", m_early},
        {"clobber", "in flight", m_clobber},
        {"gate", "different parts of the step", m_gate},
        {"twice", "waited twice", NULL},          /* the offload's wait names the prefetch's slot */
        {"region", "copies", NULL},               /* an offload into device memory */
        {"overlap", "overlaps", NULL},            /* the copy over a persistent host tensor */
        {"bound", "lower bound", NULL},
        {"persist", "not [0,", NULL},             /* a moment not live for the whole step */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        Ids d;
        Graph *g = build(&d, cases[k].mutate);
        const char *w = cases[k].what;
        if (!strcmp(w, "twice"))
            g->ops[d.w0].attr[0] = 1;
        else if (!strcmp(w, "region"))
            g->t[d.ah].region = RG_ARENA;
        else if (!strcmp(w, "overlap"))
            g->t[d.ah].offset = 256;
        else if (!strcmp(w, "bound"))
            g->region_lower_bound[RG_HOST] += 256;
        else if (!strcmp(w, "persist"))
            g->t[d.m].last = 3;
        char err[512] = "";
        int rc = plan_check(g, err, sizeof err);
        CHECK(rc != 0);
        if (!strstr(err, cases[k].expect)) {
            fprintf(stderr, "case %s: message '%s' lacks '%s'\n", w, err, cases[k].expect);
            failures++;
        }
        graph_free(g);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "plan"))
        test_plan();
    if (argc < 2 || !strcmp(argv[1], "negative"))
        test_negative();
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    return failures ? 1 : 0;
}
