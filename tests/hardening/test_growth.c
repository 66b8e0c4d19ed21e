/* test_growth.c — the growth rule of ir/ir.h: g->t and g->ops never move;
 * in sanitizer builds (GC_MOVE_ON_GROW) every other growth moves. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

#define CHECK(c)                                                          \
    do {                                                                  \
        if (!(c)) {                                                       \
            fprintf(stderr, "%s:%d: FAIL: %s\n", __FILE__, __LINE__, #c); \
            exit(1);                                                      \
        }                                                                 \
    } while (0)

int main(void)
{
    Graph *g = graph_new("test");
    long shape[2] = {3, 5};
    int a = graph_add_tensor(g, "a", DT_F32, 2, shape, TK_INPUT, (Loc){0});
    Tensor *ta = &g->t[a];
    Tensor *t0 = g->t;
    int o = graph_add_op(g, OP_SCALE, "s", &a, 1, &a, 1, (Loc){0});
    Op *op = &g->ops[o];
    Op *ops0 = g->ops;
    /* far past any doubling boundary: 300k tensors, 300k ops */
    for (int i = 0; i < 300000; i++) {
        /* shape read from an element of g->t while adding to g->t */
        int b = graph_add_tensor(g, "b", DT_F32, ta->rank, ta->shape, TK_ACTIVATION, (Loc){0});
        int in[1] = {b};
        graph_add_op(g, OP_SCALE, "s", in, 1, in, 1, (Loc){0});
    }
    CHECK(g->t == t0 && g->ops == ops0);
    CHECK(ta == &g->t[a] && op == &g->ops[o]);
    CHECK(ta->numel == 15 && g->t[g->nt - 1].numel == 15 && op->kind == OP_SCALE);
    CHECK(g->nt == 300001 && g->nops == 300001 && g->capt >= g->nt && g->capops >= g->nops);
    graph_free(g);

    /* xgrow: doubling normally; every call moves under GC_MOVE_ON_GROW */
    int cap = 0, moved = 0;
    int *arr = NULL;
    for (int n = 1; n <= 1000; n++) {
        int *before = arr;
        arr = xgrow(arr, &cap, n, sizeof *arr);
        arr[n - 1] = n;
        moved += before != NULL && before != arr;
        CHECK(cap >= n);
    }
    for (int n = 1; n <= 1000; n++)
        CHECK(arr[n - 1] == n);
    free(arr);
#ifdef GC_MOVE_ON_GROW
    CHECK(moved == 999);            /* up to 16 KiB: every growth */
    printf("ok: g->t, g->ops never moved; xgrow moved on all %d growths (GC_MOVE_ON_GROW)\n", moved);
#else
    CHECK(moved <= 16);
    printf("ok: g->t, g->ops never moved; xgrow grew by doubling (%d reallocations)\n", moved);
#endif
    return 0;
}
