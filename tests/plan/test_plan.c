/* test_plan.c — unit tests of liveness, the memory planner, the plan checker
 * and the plan emitters, on graphs built by hand. `test_plan NAME` runs one
 * test (CTest registers each); `test_plan` runs them all. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen.h"
#include "passes.h"
#include "plan_util.h"

static int failures;

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);     \
            failures++;                                                                  \
        }                                                                                \
    } while (0)

#define CHECK_EQ(a, b)                                                                   \
    do {                                                                                 \
        long long a_ = (long long)(a), b_ = (long long)(b);                              \
        if (a_ != b_) {                                                                  \
            fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", __FILE__,       \
                    __LINE__, #a, a_, #b, b_);                                           \
            failures++;                                                                  \
        }                                                                                \
    } while (0)

/* Plans g and requires plan_check to accept it. */
static void plan(Graph *g)
{
    char err[512];
    fill_liveness(g);
    pass_memplan(g);
    if (plan_check(g, err, sizeof err) != 0) {
        fprintf(stderr, "plan_check rejected a plan: %s\n", err);
        failures++;
    }
}

/* Independent brute force: no two live arena roots overlap in bytes and time
 * unless one is the in-place child of the other at the handover step. */
static int brute_overlap(const Graph *g)
{
    for (int i = 0; i < g->nt; i++)
        for (int j = i + 1; j < g->nt; j++) {
            const Tensor *a = &g->t[i], *b = &g->t[j];
            if (a->view_of >= 0 || b->view_of >= 0 || a->region != b->region ||
                a->first < 0 || b->first < 0)
                continue;
            int time = a->first <= b->last && b->first <= a->last;
            int bytes = a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes;
            int hand = (b->inplace_of == i && a->last == b->first) ||
                       (a->inplace_of == j && b->last == a->first);
            if (time && bytes && !hand)
                return 1;
        }
    return 0;
}

static int unary(Graph *g, OpKind k, const char *name, int in, int out)
{
    return pu_op(g, k, name, 1, &in, 1, &out, 0, PH_FWD);
}

/* x -> gelu -> scale -> gelu -> reduce(loss): one buffer for the whole chain. */
static void test_chain(void)
{
    Graph *g = graph_new("chain");
    int x = pu_tensor(g, "x", 1000, TK_INPUT), a = pu_tensor(g, "a", 1000, TK_ACTIVATION);
    int b = pu_tensor(g, "b", 1000, TK_ACTIVATION), c = pu_tensor(g, "c", 1000, TK_ACTIVATION);
    int loss = pu_tensor(g, "loss", 1, TK_ACTIVATION);
    unary(g, OP_GELU, "a", x, a);
    unary(g, OP_SCALE, "b", a, b);
    unary(g, OP_GELU, "c", b, c);
    unary(g, OP_REDUCE_ROWS, "loss", c, loss);
    g->loss = loss;
    pu_schedule_all(g);
    plan(g);
    CHECK_EQ(g->t[x].first, 0);
    CHECK_EQ(g->t[x].last, 0);
    CHECK_EQ(g->t[c].first, 2);
    CHECK_EQ(g->t[c].last, 3);
    CHECK_EQ(g->t[loss].last, 3);
    CHECK_EQ(g->t[a].inplace_of, x);
    CHECK_EQ(g->t[b].inplace_of, a);
    CHECK_EQ(g->t[c].inplace_of, b);
    CHECK_EQ(g->t[loss].inplace_of, -1);   /* sizes differ */
    CHECK(g->t[x].offset == g->t[c].offset);
    CHECK_EQ(g->region_lower_bound[RG_ARENA], 4096 + 256);
    CHECK_EQ(g->region_bytes[RG_ARENA], g->region_lower_bound[RG_ARENA]);
    graph_free(g);
}

/* x -> a = gelu(x), b = scale(x), c = a + b: a and b live together. */
static void test_diamond(void)
{
    Graph *g = graph_new("diamond");
    int x = pu_tensor(g, "x", 1024, TK_INPUT), a = pu_tensor(g, "a", 1024, TK_ACTIVATION);
    int b = pu_tensor(g, "b", 1024, TK_ACTIVATION), c = pu_tensor(g, "c", 1024, TK_ACTIVATION);
    int loss = pu_tensor(g, "loss", 1, TK_ACTIVATION);
    unary(g, OP_GELU, "a", x, a);
    unary(g, OP_SCALE, "b", x, b);
    pu_op(g, OP_ADD, "c", 2, (int[]){a, b}, 1, &c, 0, PH_FWD);
    unary(g, OP_REDUCE_ROWS, "loss", c, loss);
    g->loss = loss;
    pu_schedule_all(g);
    plan(g);
    CHECK_EQ(g->t[a].inplace_of, -1);      /* x still read at step 1 */
    CHECK_EQ(g->t[b].inplace_of, x);
    CHECK_EQ(g->t[c].inplace_of, a);
    CHECK(g->t[a].offset != g->t[b].offset);
    CHECK_EQ(g->region_lower_bound[RG_ARENA], 2 * 4096);
    CHECK_EQ(g->region_bytes[RG_ARENA], 2 * 4096);
    CHECK(!brute_overlap(g));
    graph_free(g);
}

/* Views keep their root alive; a partial view is never taken in place. */
static void test_views(void)
{
    Graph *g = graph_new("views");
    int x = pu_tensor(g, "x", 1024, TK_INPUT), r = pu_tensor(g, "r", 1024, TK_ACTIVATION);
    unary(g, OP_GELU, "r", x, r);                              /* 0 */
    int lo = pu_view(g, "r.lo", r, 0, 1, (long[]){512});
    int hi = pu_view(g, "r.hi", r, 2048, 1, (long[]){512});
    int hh = pu_view(g, "r.hi.b", hi, 1024, 1, (long[]){256}); /* view of a view */
    pu_op(g, OP_SPLIT, "r.split", 1, &r, 2, (int[]){lo, hi}, 0, PH_FWD);  /* 1 */
    int a = pu_tensor(g, "a", 512, TK_ACTIVATION), t = pu_tensor(g, "t", 4096, TK_ACTIVATION);
    unary(g, OP_GELU, "a", lo, a);                             /* 2 */
    unary(g, OP_FILL, "t", a, t);                              /* 3 */
    int u = pu_tensor(g, "u", 4096, TK_ACTIVATION);
    unary(g, OP_GELU, "u", t, u);                              /* 4: in place over t */
    int b = pu_tensor(g, "b", 256, TK_ACTIVATION);
    pu_op(g, OP_ADD, "b", 2, (int[]){hh, u}, 1, &b, 0, PH_FWD); /* 5 */
    int loss = pu_tensor(g, "loss", 256, TK_ACTIVATION);
    unary(g, OP_GELU, "loss", b, loss);                        /* 6 */
    g->loss = loss;
    pu_schedule_all(g);
    plan(g);
    CHECK_EQ(g->t[r].first, 0);
    CHECK_EQ(g->t[r].last, 5);   /* through hh */
    CHECK_EQ(g->t[hi].first, 1);
    CHECK_EQ(g->t[hi].last, 5);  /* its own sub-view */
    CHECK_EQ(g->t[lo].last, 2);
    CHECK_EQ(g->t[hh].first, 5);
    CHECK_EQ(g->t[hh].region, RG_ARENA);
    CHECK_EQ(g->t[lo].offset, g->t[r].offset);
    CHECK_EQ(g->t[hi].offset, g->t[r].offset + 2048);
    CHECK_EQ(g->t[hh].offset, g->t[r].offset + 3072);
    CHECK_EQ(g->t[u].inplace_of, t);
    CHECK_EQ(g->t[b].inplace_of, -1);        /* hh is a part of r */
    CHECK_EQ(g->t[loss].inplace_of, b);
    CHECK(!brute_overlap(g));
    CHECK(g->region_bytes[RG_ARENA] >= g->region_lower_bound[RG_ARENA]);
    graph_free(g);
}

/* A tensor several ops accumulate into lives from its first write to its
 * last; an accumulating output never takes an input's storage. */
static void test_accumulate(void)
{
    Graph *g = graph_new("acc");
    int x = pu_tensor(g, "x", 64, TK_INPUT), s = pu_tensor(g, "s", 64, TK_ACTGRAD);
    int y = pu_tensor(g, "y", 64, TK_ACTIVATION), z = pu_tensor(g, "z", 64, TK_ACTIVATION);
    int loss = pu_tensor(g, "loss", 1, TK_ACTIVATION);
    unary(g, OP_GELU, "y", x, y);                                     /* 0 */
    pu_op(g, OP_COPY, "s", 1, &y, 1, &s, 0, PH_BWD);                   /* 1: y ends, s = */
    unary(g, OP_GELU, "z", x, z);                                     /* 2 */
    pu_op(g, OP_COPY, "s+", 1, &z, 1, &s, 1, PH_BWD);                  /* 3: s += z */
    unary(g, OP_REDUCE_ROWS, "loss", s, loss);                        /* 4 */
    g->loss = loss;
    pu_schedule_all(g);
    plan(g);
    CHECK_EQ(g->t[s].first, 1);
    CHECK_EQ(g->t[s].last, 4);
    CHECK_EQ(g->t[s].inplace_of, y);   /* the first, overwriting write may */
    CHECK_EQ(g->t[z].inplace_of, x);
    CHECK(g->t[s].offset != g->t[z].offset);
    CHECK(!brute_overlap(g));
    graph_free(g);

    g = graph_new("acc2");   /* s = 0; s += y at y's last use: not in place */
    x = pu_tensor(g, "x", 64, TK_INPUT);
    y = pu_tensor(g, "y", 64, TK_ACTIVATION);
    s = pu_tensor(g, "s", 64, TK_ACTGRAD);
    unary(g, OP_GELU, "y", x, y);
    pu_op(g, OP_FILL, "s", 0, NULL, 1, &s, 0, PH_BWD);
    pu_op(g, OP_COPY, "s+", 1, &y, 1, &s, 1, PH_BWD);
    g->loss = s;
    pu_schedule_all(g);
    plan(g);
    CHECK_EQ(g->t[s].first, 1);
    CHECK_EQ(g->t[s].inplace_of, -1);
    CHECK(g->t[s].offset != g->t[y].offset);
    graph_free(g);

    g = graph_new("acc3");   /* accumulating into storage nothing wrote: rejected */
    x = pu_tensor(g, "x", 64, TK_INPUT);
    s = pu_tensor(g, "s", 64, TK_ACTGRAD);
    pu_op(g, OP_COPY, "s+", 1, &x, 1, &s, 1, PH_BWD);
    g->loss = s;
    pu_schedule_all(g);
    fill_liveness(g);
    pass_memplan(g);
    char err[256] = "";
    CHECK(plan_check(g, err, sizeof err) != 0);
    CHECK(strstr(err, "accumulates into s before") != NULL);
    graph_free(g);
}

/* No schedule: nothing is live; persistent regions are still packed. */
static void test_empty(void)
{
    Graph *g = graph_new("empty");
    int w = pu_tensor(g, "w", 10, TK_PARAM);
    pu_tensor(g, "a", 10, TK_ACTIVATION);
    g->params = xmalloc(sizeof(int));
    g->params[g->nparams++] = w;
    plan(g);
    CHECK_EQ(g->region_bytes[RG_PARAMS], 40);
    CHECK_EQ(g->region_bytes[RG_ARENA], 0);
    CHECK_EQ(g->region_lower_bound[RG_ARENA], 0);
    CHECK_EQ(g->t[w].first, -1);
    EmitOptions eo = {.target = "cpu", .precision = "fp32"};
    FILE *f = tmpfile();
    CHECK_EQ(emit_plan_json(f, g, &eo), 0);
    emit_plan_text(f, g, &eo);
    emit_plan_svg(f, g, &eo);
    fclose(f);
    graph_free(g);
}

/* Persistent regions: params packed without padding in declaration order,
 * grads mirror them, optstate = all m then all v; views inside roots. */
static void test_persistent(void)
{
    Graph *g = graph_new("persist");
    int w = pu_tensor_nd(g, "w", DT_F32, 2, (long[]){3, 5}, TK_PARAM);   /* 60 bytes */
    int e = pu_tensor(g, "e", 7, TK_PARAM);                               /* 28 bytes */
    int tok = pu_tensor_nd(g, "tok", DT_I32, 1, (long[]){4}, TK_INPUT);
    int pm[2] = {e, w};   /* declaration order differs from id order */
    g->params = xmalloc(sizeof pm);
    memcpy(g->params, pm, sizeof pm);
    g->nparams = 2;
    for (int i = 0; i < 2; i++) {
        Tensor *p = &g->t[pm[i]];
        char n[32];
        long sh[IR_MAXRANK];
        int rank = p->rank;
        memcpy(sh, p->shape, sizeof sh);
        snprintf(n, sizeof n, "d.%d", i);
        int gr = pu_tensor_nd(g, n, DT_F32, rank, sh, TK_GRAD);
        snprintf(n, sizeof n, "m.%d", i);
        int m = pu_tensor_nd(g, n, DT_F32, rank, sh, TK_OPTSTATE);
        snprintf(n, sizeof n, "v.%d", i);
        int v = pu_tensor_nd(g, n, DT_F32, rank, sh, TK_OPTSTATE);
        g->t[pm[i]].grad = gr;
        g->t[pm[i]].opt_m = m;
        g->t[pm[i]].opt_v = v;
    }
    int w1 = pu_view(g, "w[1]", w, 20, 1, (long[]){5});
    pu_op(g, OP_INDEX, "w[1]", 1, &w, 1, &w1, 0, PH_FWD);
    int dw1 = pu_view(g, "dw[1]", g->t[w].grad, 20, 1, (long[]){5});
    int h = pu_tensor(g, "h", 5, TK_ACTIVATION);
    pu_op(g, OP_EMBEDDING, "h", 2, (int[]){w1, tok}, 1, &h, 0, PH_FWD);
    pu_op(g, OP_COPY, "dw1", 1, &h, 1, &dw1, 0, PH_BWD);
    for (int i = 0; i < 2; i++) {
        const Tensor *p = &g->t[pm[i]];
        pu_op(g, OP_ADAMW, "adamw", 4, (int[]){pm[i], p->grad, p->opt_m, p->opt_v}, 0, NULL, 0,
              PH_OPT);
    }
    pu_schedule_all(g);
    plan(g);
    const Tensor *te = &g->t[e], *tw = &g->t[w];
    CHECK_EQ(te->offset, 0);
    CHECK_EQ(tw->offset, 28);
    CHECK_EQ(g->region_bytes[RG_PARAMS], 88);
    CHECK_EQ(g->region_lower_bound[RG_PARAMS], 88);
    CHECK_EQ(g->t[te->grad].offset, 0);
    CHECK_EQ(g->t[tw->grad].offset, 28);
    CHECK_EQ(g->region_bytes[RG_GRADS], 88);
    CHECK_EQ(g->t[te->opt_m].offset, 0);
    CHECK_EQ(g->t[tw->opt_m].offset, 28);
    CHECK_EQ(g->t[te->opt_v].offset, 88);
    CHECK_EQ(g->t[tw->opt_v].offset, 116);
    CHECK_EQ(g->region_bytes[RG_OPTSTATE], 176);
    CHECK_EQ(g->t[w1].offset, 48);
    CHECK_EQ(g->t[w1].region, RG_PARAMS);
    CHECK_EQ(g->t[dw1].offset, 48);
    CHECK_EQ(g->t[dw1].region, RG_GRADS);
    CHECK_EQ(tw->first, 0);
    CHECK_EQ(tw->last, g->nsched - 1);
    CHECK_EQ(g->t[w1].first, 0);
    CHECK_EQ(g->t[w1].last, 1);
    CHECK_EQ(g->t[tok].first, 0);
    graph_free(g);
}

/* --no-reuse: every arena root its own storage; the bound is unchanged. */
static void test_no_reuse(void)
{
    Graph *g = graph_new("noreuse");
    int x = pu_tensor(g, "x", 1000, TK_INPUT), a = pu_tensor(g, "a", 1000, TK_ACTIVATION);
    int b = pu_tensor(g, "b", 1000, TK_ACTIVATION), c = pu_tensor(g, "c", 1000, TK_ACTIVATION);
    unary(g, OP_GELU, "a", x, a);
    unary(g, OP_SCALE, "b", a, b);
    unary(g, OP_GELU, "c", b, c);
    g->loss = c;
    g->no_reuse = 1;
    pu_schedule_all(g);
    plan(g);
    for (int i = 0; i < g->nt; i++)
        CHECK_EQ(g->t[i].inplace_of, -1);
    CHECK_EQ(g->region_bytes[RG_ARENA], 4 * 4096);
    CHECK_EQ(g->region_lower_bound[RG_ARENA], 2 * 4096);
    char err[256];
    g->t[c].offset = g->t[x].offset;   /* disjoint in time, but no reuse allowed */
    CHECK(plan_check(g, err, sizeof err) != 0);
    graph_free(g);
}

/* The checker rejects corrupted plans, each with a reason. */
static void test_checker_negative(void)
{
    Graph *g = graph_new("neg");
    int x = pu_tensor(g, "x", 1024, TK_INPUT), a = pu_tensor(g, "a", 1024, TK_ACTIVATION);
    int b = pu_tensor(g, "b", 1024, TK_ACTIVATION), c = pu_tensor(g, "c", 1024, TK_ACTIVATION);
    int v = pu_view(g, "c.v", c, 1024, 1, (long[]){256});
    int loss = pu_tensor(g, "loss", 1, TK_ACTIVATION);
    unary(g, OP_GELU, "a", x, a);
    unary(g, OP_SCALE, "b", x, b);
    pu_op(g, OP_ADD, "c", 2, (int[]){a, b}, 1, &c, 0, PH_FWD);
    unary(g, OP_RESHAPE, "c.v", c, v);
    unary(g, OP_REDUCE_ROWS, "loss", v, loss);
    g->loss = loss;
    pu_schedule_all(g);
    plan(g);
    char err[512];
    CHECK_EQ(plan_check(g, err, sizeof err), 0);
    struct { const char *what, *expect; } cases[] = {
        {"overlap", "overlaps"}, {"bound", "lower bound"}, {"view", "view c.v"},
        {"inplace", "in place"}, {"short", "live only"}, {"outside", "outside region"},
        {"align", "aligned"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        Tensor *saved = xmalloc((size_t)g->nt * sizeof *saved);
        memcpy(saved, g->t, (size_t)g->nt * sizeof *saved);
        size_t lb = g->region_lower_bound[RG_ARENA];
        const char *w = cases[k].what;
        if (!strcmp(w, "overlap"))   /* x and its in-place child b onto a */
            g->t[x].offset = g->t[b].offset = g->t[a].offset;
        else if (!strcmp(w, "bound"))
            g->region_lower_bound[RG_ARENA] += 256;
        else if (!strcmp(w, "view"))
            g->t[v].offset += 4;
        else if (!strcmp(w, "inplace"))
            g->t[a].inplace_of = b;
        else if (!strcmp(w, "short"))
            g->t[a].last--;
        else if (!strcmp(w, "outside"))
            g->t[b].offset = g->region_bytes[RG_ARENA];
        else
            g->t[a].offset += 128;
        err[0] = 0;
        int rc = plan_check(g, err, sizeof err);
        CHECK(rc != 0);
        if (!strstr(err, cases[k].expect)) {
            fprintf(stderr, "case %s: message '%s' lacks '%s'\n", w, err, cases[k].expect);
            failures++;
        }
        memcpy(g->t, saved, (size_t)g->nt * sizeof *saved);
        free(saved);
        g->region_lower_bound[RG_ARENA] = lb;
    }
    CHECK_EQ(plan_check(g, err, sizeof err), 0);
    graph_free(g);
}

/* Rule 8: two gradients that share one buffer (views a and b of d, as
 * autodiff makes them for x + (matmul(x, w) + z)): a write through a while b
 * is still to be read is rejected; the same ops with the read first, or the
 * write through d itself (b's base), are accepted. `fwd` names the forward
 * tensors a and b are the gradients of (none: FWD_NONE): two forward roots
 * (FWD_APART: an alias, rejected); two views of one forward root r whose
 * gradient is d (FWD_VIEWS: both are d's bytes, as for t3 + f(reshape(t3))
 * in issue 20's tests/randgraph/regress/plancheck_alias_views.graph:
 * accepted); the same, but r's gradient is a tensor that is not a view
 * ancestor of a and b (FWD_FOREIGN: no such plan is d's, rejected). */
enum { FWD_NONE, FWD_APART, FWD_VIEWS, FWD_FOREIGN };

static Graph *alias_graph(int read_first, int through_base, int fwd)
{
    Graph *g = graph_new("alias");
    int x = pu_tensor(g, "x", 64, TK_INPUT), d = pu_tensor(g, "d", 64, TK_ACTGRAD);
    int a = pu_view(g, "d.a", d, 0, 1, (long[]){64}), b = pu_view(g, "d.b", d, 0, 1, (long[]){64});
    if (fwd != FWD_NONE) {
        int r = pu_tensor(g, "r", 64, TK_ACTIVATION);
        int fa = fwd == FWD_APART ? pu_tensor(g, "fa", 64, TK_ACTIVATION) : pu_view(g, "fa", r, 0, 1, (long[]){64});
        int fb = fwd == FWD_APART ? pu_tensor(g, "fb", 64, TK_ACTIVATION) : pu_view(g, "fb", r, 0, 1, (long[]){64});
        g->t[fa].grad = a;
        g->t[fb].grad = b;
        g->t[r].grad = fwd == FWD_FOREIGN ? pu_tensor(g, "e", 64, TK_ACTGRAD) : d;
    }
    int y = pu_tensor(g, "y", 64, TK_ACTGRAD), loss = pu_tensor(g, "loss", 1, TK_ACTIVATION);
    pu_op(g, OP_FILL, "seed", 0, NULL, 1, &d, 0, PH_BWD);
    int w = through_base ? d : a;
    if (read_first) {
        unary(g, OP_SCALE, "read.b", b, y);
        pu_op(g, OP_COPY, "write.a", 1, &x, 1, &w, 1, PH_BWD);
    } else {
        pu_op(g, OP_COPY, "write.a", 1, &x, 1, &w, 1, PH_BWD);
        unary(g, OP_SCALE, "read.b", b, y);
    }
    pu_op(g, OP_REDUCE_ROWS, "loss", 1, (int[]){y}, 1, &loss, 0, PH_BWD);
    pu_op(g, OP_REDUCE_ROWS, "use.a", 1, (int[]){a}, 1, (int[]){pu_tensor(g, "z", 1, TK_ACTGRAD)}, 0, PH_BWD);
    g->loss = loss;
    pu_schedule_all(g);
    fill_liveness(g);
    pass_memplan(g);
    return g;
}

static void test_checker_alias(void)
{
    char err[512] = "";
    const int rejected[] = {FWD_NONE, FWD_APART, FWD_FOREIGN};
    for (int k = 0; k < 3; k++) {
        Graph *g = alias_graph(0, 0, rejected[k]);
        err[0] = 0;
        CHECK(plan_check(g, err, sizeof err) != 0);
        if (!strstr(err, "op write.a at step 1 writes d.a over bytes of d.b, an alias still to be read")) {
            fprintf(stderr, "alias (fwd %d): message '%s'\n", rejected[k], err);
            failures++;
        }
        graph_free(g);
    }
    Graph *g = alias_graph(1, 0, FWD_NONE);
    CHECK_EQ(plan_check(g, err, sizeof err), 0);
    graph_free(g);
    g = alias_graph(0, 1, FWD_NONE);
    CHECK_EQ(plan_check(g, err, sizeof err), 0);
    graph_free(g);
    g = alias_graph(0, 0, FWD_VIEWS);
    CHECK_EQ(plan_check(g, err, sizeof err), 0);
    graph_free(g);
}

/* ------------------------------------------------------------ random graphs */

static uint64_t rng = 88172645463325252ull;
static unsigned rnd(unsigned n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % n);
}

/* A random DAG: each op reads 1-3 earlier tensors (or views of them) and
 * writes a new tensor, sometimes accumulates into an earlier one, sometimes
 * makes views. Sizes come from a small set so in-place applies often. */
static Graph *random_graph(int nops)
{
    static const long sizes[] = {64, 100, 1000, 4096, 5000, 20000};
    static const OpKind kinds[] = {OP_GELU, OP_SCALE, OP_ADD, OP_MATMUL, OP_SOFTMAX, OP_COPY};
    Graph *g = graph_new("random");
    int *avail = xmalloc((size_t)(4 * nops + 8) * sizeof *avail), na = 0;
    for (int i = 0; i < 2; i++)
        avail[na++] = pu_tensor(g, "in", sizes[rnd(6)], TK_INPUT);
    for (int o = 0; o < nops; o++) {
        OpKind k = kinds[rnd(6)];
        int nin = k == OP_ADD || k == OP_MATMUL ? 2 : 1, in[2];
        for (int i = 0; i < nin; i++)
            in[i] = avail[na - 1 - (int)rnd((unsigned)(na < 12 ? na : 12))];
        long n = rnd(3) ? (long)(g->t[in[0]].bytes / 4) : sizes[rnd(6)];
        if (rnd(8) == 0 && g->t[in[0]].view_of < 0 && g->t[in[0]].kind != TK_INPUT &&
            g->t[in[0]].producer >= 0) {   /* accumulate into an earlier tensor */
            int out = in[0];
            pu_op(g, OP_COPY, "acc", 1, &in[nin - 1], 1, &out, 1, PH_BWD);
            continue;
        }
        int out = pu_tensor(g, "t", n, rnd(2) ? TK_ACTIVATION : TK_ACTGRAD);
        pu_op(g, k, "op", nin, in, 1, &out, 0, PH_FWD);
        avail[na++] = out;
        if (rnd(4) == 0 && n >= 64) {   /* a view: whole, half, or a quarter */
            long parts = 1 + rnd(4);
            size_t off = (size_t)rnd((unsigned)parts) * (size_t)(n / parts) * 4;
            int v = pu_view(g, "v", out, off, 1, (long[]){n / parts});
            pu_op(g, OP_RESHAPE, "view", 1, &out, 1, &v, 0, PH_FWD);
            avail[na++] = v;
        }
    }
    int loss = pu_tensor(g, "loss", 1, TK_ACTIVATION);
    pu_op(g, OP_REDUCE_ROWS, "loss", 1, &avail[na - 1], 1, &loss, 0, PH_FWD);
    g->loss = loss;
    free(avail);
    pu_schedule_all(g);
    return g;
}

static void test_random(void)
{
    double worst = 1.0;
    for (int it = 0; it < 300; it++) {
        Graph *g = random_graph(5 + (int)rnd(120));
        g->no_reuse = it % 7 == 0;
        int before = failures;
        plan(g);
        CHECK(g->region_bytes[RG_ARENA] >= g->region_lower_bound[RG_ARENA]);
        CHECK(!brute_overlap(g));
        for (int i = 0; i < g->nt; i++)   /* every use covered */
            for (int k = 0; k < g->t[i].nconsumers; k++) {
                int s = g->ops[g->t[i].consumers[k]].step;
                CHECK(g->t[i].first <= s && s <= g->t[i].last);
            }
        if (!g->no_reuse && g->region_lower_bound[RG_ARENA]) {
            double r = (double)g->region_bytes[RG_ARENA] / (double)g->region_lower_bound[RG_ARENA];
            if (r > worst)
                worst = r;
        }
        for (int k = 0; k < 4; k++) {   /* move a root onto another: the checker sees it */
            int a = (int)rnd((unsigned)g->nt), b = (int)rnd((unsigned)g->nt);
            Tensor *ta = &g->t[a];
            if (ta->view_of >= 0 || g->t[b].view_of >= 0 || ta->region != RG_ARENA)
                continue;
            size_t saved = ta->offset;
            ta->offset = g->t[b].offset;
            char err[512];
            if (brute_overlap(g))
                CHECK(plan_check(g, err, sizeof err) != 0);
            ta->offset = saved;
        }
        if (failures != before) {
            fprintf(stderr, "random graph %d failed\n", it);
            graph_free(g);
            return;
        }
        graph_free(g);
    }
    printf("random: worst arena / lower bound = %.4f\n", worst);
}

/* The placer's two ways to find a gap (the scan over placed buffers and the
 * segment tree over the steps) give the same plan, byte for byte: random
 * graphs and GPT-2 shapes planned three times, list only, tree wherever it
 * applies, and the default mix. */
static size_t *plan_offsets(Graph *g, int mode)
{
    memplan_place_mode = mode;
    plan(g);
    memplan_place_mode = MEMPLAN_PLACE_AUTO;
    size_t *off = malloc(((size_t)g->nt + 1) * sizeof *off);
    for (int i = 0; i < g->nt; i++)
        off[i] = g->t[i].offset;
    off[g->nt] = g->region_bytes[RG_ARENA];
    return off;
}

static void test_place_modes(void)
{
    int graphs = 0, tensors = 0;
    for (int it = 0; it < 200 + 3; it++) {
        uint64_t seed = rng;
        Gpt2Dims ds[] = {{2, 16, 32, 100, 128, 2, 2, 16}, {1, 64, 64, 500, 512, 12, 4, 48},
                         {4, 256, 1024, 50257, 50304, 6, 12, 768}};
        const int modes[] = {MEMPLAN_PLACE_LIST, MEMPLAN_PLACE_TREE, MEMPLAN_PLACE_AUTO};
        size_t *off[3];
        int nt = 0;
        for (int m = 0; m < 3; m++) {
            rng = seed;
            Graph *g = it < 200 ? random_graph(5 + (int)rnd(400)) : gpt2_synth(&ds[it - 200]);
            if (it < 200)
                g->no_reuse = it % 11 == 0;
            off[m] = plan_offsets(g, modes[m]);
            nt = g->nt;
            graph_free(g);
        }
        for (int m = 1; m < 3; m++)
            for (int i = 0; i <= nt; i++)
                if (off[m][i] != off[0][i]) {
                    fprintf(stderr, "graph %d, mode %d: tensor %d at %zu, list scan put it at %zu\n",
                            it, modes[m], i, off[m][i], off[0][i]);
                    failures++;
                    i = nt;
                }
        for (int m = 0; m < 3; m++)
            free(off[m]);
        graphs++;
        tensors += nt;
    }
    printf("place_modes: %d graphs, %d tensors, list = tree = auto\n", graphs, tensors);
}

/* ------------------------------------------------------------ JSON */

static long long jget(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? json_integer_value(v) : -1;
}

static void test_json(void)
{
    Gpt2Dims d = {2, 16, 32, 100, 128, 2, 2, 16};
    Graph *g = gpt2_synth(&d);
    plan(g);
    FILE *f = tmpfile();
    EmitOptions eo = {.target = "cpu", .precision = "fp32", .budget_bytes = 1 << 30};
    CHECK_EQ(emit_plan_json(f, g, &eo), 0);
    rewind(f);
    json_error_t je;
    json_t *root = json_loadf(f, 0, &je);
    fclose(f);
    if (!root) {
        fprintf(stderr, "plan JSON does not parse: %s at line %d\n", je.text, je.line);
        failures++;
        graph_free(g);
        return;
    }
    CHECK_EQ(jget(root, "version"), 1);
    CHECK(!strcmp(json_string_value(json_object_get(root, "target")), "cpu"));
    CHECK_EQ(jget(root, "budget_bytes"), 1 << 30);
    CHECK(!strcmp(json_string_value(json_object_get(root, "schedule_kind")), "plain"));
    CHECK_EQ(jget(json_object_get(root, "dims"), "C"), 16);
    json_t *sched = json_object_get(root, "schedule"), *ts = json_object_get(root, "tensors");
    CHECK_EQ(json_array_size(sched), g->nsched);
    CHECK_EQ(json_array_size(ts), g->nt);
    json_t *s0 = json_array_get(sched, 0);
    CHECK(!strcmp(json_string_value(json_object_get(s0, "phase")), "fwd"));
    CHECK(json_is_array(json_object_get(s0, "inputs")));
    size_t region_bytes[RG_COUNT] = {0}, lb = 0, device = 0;
    json_t *regs = json_object_get(root, "regions");
    CHECK_EQ(json_array_size(regs), RG_COUNT);   /* params, grads, optstate, arena, host */
    for (size_t r = 0; r < json_array_size(regs) && r < RG_COUNT; r++) {
        json_t *o = json_array_get(regs, r);
        region_bytes[r] = (size_t)jget(o, "bytes");
        CHECK(!strcmp(json_string_value(json_object_get(o, "name")), region_name((Region)r)));
        CHECK(json_is_true(json_object_get(o, "device")) == (r != RG_HOST));
        if (json_is_true(json_object_get(o, "device")))
            device += region_bytes[r];
        if (!strcmp(json_string_value(json_object_get(o, "name")), "arena"))
            lb = (size_t)jget(o, "lower_bound");
    }
    CHECK_EQ(region_bytes[RG_ARENA], g->region_bytes[RG_ARENA]);
    CHECK_EQ(lb, g->region_lower_bound[RG_ARENA]);
    json_t *tot = json_object_get(root, "totals");
    CHECK_EQ(jget(tot, "peak_bytes"), device);   /* device memory: the host region apart */
    CHECK_EQ(jget(tot, "host_bytes"), region_bytes[RG_HOST]);
    /* re-derive: no two live roots of one region overlap (from the JSON alone) */
    size_t n = json_array_size(ts);
    int bad = 0;
    for (size_t i = 0; i < n && !bad; i++) {
        json_t *a = json_array_get(ts, i);
        CHECK_EQ(jget(a, "id"), (long long)i);
        if (!json_is_null(json_object_get(a, "view_of")) ||
            json_is_null(json_object_get(a, "first")))
            continue;
        const char *ra = json_string_value(json_object_get(a, "region"));
        long long ao = jget(a, "offset"), ab = jget(a, "bytes");
        long long af = jget(a, "first"), al = jget(a, "last");
        for (size_t j = i + 1; j < n; j++) {
            json_t *b = json_array_get(ts, j);
            if (!json_is_null(json_object_get(b, "view_of")) ||
                json_is_null(json_object_get(b, "first")) ||
                strcmp(ra, json_string_value(json_object_get(b, "region"))))
                continue;
            long long bo = jget(b, "offset"), bb = jget(b, "bytes");
            long long bf = jget(b, "first"), bl = jget(b, "last");
            if (!(af <= bl && bf <= al && ao < bo + bb && bo < ao + ab))
                continue;
            int hand = (jget(b, "inplace_of") == (long long)i && al == bf) ||
                       (jget(a, "inplace_of") == (long long)j && bl == af);
            if (!hand) {
                fprintf(stderr, "JSON: tensors %zu and %zu overlap\n", i, j);
                bad = 1;
                failures++;
                break;
            }
        }
    }
    json_decref(root);
    graph_free(g);
}

/* ------------------------------------------------------------ text, SVG, GPT-2 */

static void test_emitters(void)
{
    Gpt2Dims d = {2, 16, 32, 100, 128, 2, 2, 16};
    Graph *g = gpt2_synth(&d);
    plan(g);
    EmitOptions eo = {.target = "cpu", .precision = "fp32"};
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    emit_plan_text(f, g, &eo);
    fclose(f);
    CHECK(strstr(buf, "arena") != NULL);
    CHECK(strstr(buf, "lower bound") != NULL);
    CHECK(strstr(buf, "peak") != NULL);
    free(buf);
    f = open_memstream(&buf, &len);
    emit_plan_svg(f, g, &eo);
    fclose(f);
    CHECK(strncmp(buf, "<?xml", 5) == 0 || strncmp(buf, "<svg", 4) == 0);
    CHECK(strstr(buf, "</svg>") != NULL);
    CHECK(strstr(buf, "<rect") != NULL);
    CHECK(strstr(buf, "<title>") != NULL);
    free(buf);
    graph_free(g);
}

/* The synthetic GPT-2 training graph plans within 2 % of its lower bound. */
static void test_gpt2(void)
{
    Gpt2Dims ds[] = {{4, 64, 1024, 50257, 50304, 12, 12, 768},
                     {1, 1024, 1024, 50257, 50304, 12, 12, 768},
                     {2, 128, 1024, 50257, 50304, 24, 16, 1024}};
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) {
        Graph *g = gpt2_synth(&ds[i]);
        clock_t t0 = clock();
        plan(g);
        double ms = 1e3 * (double)(clock() - t0) / CLOCKS_PER_SEC;
        double r = (double)g->region_bytes[RG_ARENA] / (double)g->region_lower_bound[RG_ARENA];
        printf("gpt2 B=%ld T=%ld L=%ld C=%ld: %d tensors, %d steps, params %zu, arena %zu, "
               "bound %zu, ratio %.4f, %.1f ms\n", ds[i].B, ds[i].T, ds[i].L, ds[i].C, g->nt,
               g->nsched, g->region_bytes[RG_PARAMS], g->region_bytes[RG_ARENA],
               g->region_lower_bound[RG_ARENA], r, ms);
        long C = ds[i].C, L = ds[i].L;   /* llm.c: Vp·C + maxT·C + L·(12C² + 13C) + 2C */
        CHECK_EQ(g->region_bytes[RG_PARAMS],
                 4 * (ds[i].Vp * C + ds[i].maxT * C + L * (12 * C * C + 13 * C) + 2 * C));
        if (C == 768)
            CHECK_EQ(g->region_bytes[RG_PARAMS], 4 * 124475904L);
        CHECK(r <= 1.02);
        graph_free(g);
    }
}

static const struct { const char *name; void (*fn)(void); } tests[] = {
    {"empty", test_empty},
    {"chain", test_chain},
    {"diamond", test_diamond},
    {"views", test_views},
    {"accumulate", test_accumulate},
    {"persistent", test_persistent},
    {"no_reuse", test_no_reuse},
    {"checker_negative", test_checker_negative},
    {"checker_alias", test_checker_alias},
    {"random", test_random},
    {"place_modes", test_place_modes},
    {"json", test_json},
    {"emitters", test_emitters},
    {"gpt2", test_gpt2},
};

int main(int argc, char **argv)
{
    int ran = 0;
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (argc < 2 || !strcmp(argv[1], tests[i].name)) {
            tests[i].fn();
            ran++;
        }
    if (!ran) {
        fprintf(stderr, "test_plan: no test named %s\n", argv[1]);
        return 2;
    }
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    return failures ? 1 : 0;
}
