/* plan_util.h — helpers for the memory-plan tests and benchmark: build small
 * graphs by hand and a synthetic GPT-2 training graph (gpt2_synth.c). */
#ifndef GC_PLAN_UTIL_H
#define GC_PLAN_UTIL_H

#include "ir.h"

/* A float tensor of shape [n] (rank 1). */
int pu_tensor(Graph *g, const char *name, long n, TensorKind kind);
/* A tensor of any shape and dtype. */
int pu_tensor_nd(Graph *g, const char *name, DType dt, int rank, const long *shape,
                 TensorKind kind);
/* A view of `of` (no op) starting `off` bytes in, of the given shape. */
int pu_view(Graph *g, const char *name, int of, size_t off, int rank, const long *shape);
/* An op; acc is the accumulate mask of its outputs. */
int pu_op(Graph *g, OpKind kind, const char *name, int nin, const int *in, int nout,
          const int *out, int acc, Phase ph);
/* Schedules every op in id order (sched, nsched, op->step). */
void pu_schedule_all(Graph *g);

/* GPT-2 training graph in the shape of models/gpt2.graph after autodiff,
 * scheduled plainly (forward, backward, optimizer). */
typedef struct Gpt2Dims { long B, T, maxT, V, Vp, L, NH, C; } Gpt2Dims;
Graph *gpt2_synth(const Gpt2Dims *d);

#endif
