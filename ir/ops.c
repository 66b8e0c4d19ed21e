/* ops.c — the op table (ops.def): names, arities, classes, shape rules,
 * FLOPs and bytes moved. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir.h"

const OpInfo op_info[OP_COUNT] = {
#define OP(E, name, nin, nout, attrs, cls) [OP_##E] = {name, nin, nout, attrs, OPC_##cls},
#include "ops.def"
#undef OP
};

int op_lookup(const char *name)
{
    for (int k = 0; k < OP_FIRST_INTERNAL; k++)
        if (strcmp(op_info[k].name, name) == 0)
            return k;
    return -1;
}

int op_inplace_ok(const Graph *g, const Op *op, int i)
{
    if (op->nout < 1 || (op->acc & 1) || i >= op->nin)
        return 0;
    const Tensor *in = &g->t[op->in[i]], *out = &g->t[op->out[0]];
    if (in->bytes != out->bytes || in->dtype != out->dtype)
        return 0;
    switch (op->kind) {
    case OP_CAUSAL_MASK: case OP_CAUSAL_MASK_BWD: case OP_SOFTMAX:
        return i == 0;
    case OP_SOFTMAX_BWD:
        return 1;                 /* dy or y */
    case OP_CROSS_ENTROPY_BWD:
        return i == 1;            /* dlogits over logits */
    default:
        return op_info[op->kind].cls == OPC_EW;
    }
}
