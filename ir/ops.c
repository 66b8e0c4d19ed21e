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
    case OP_ADD_LAYERNORM: case OP_ADD_RMSNORM:
        return i < 2;             /* x (the sum) over a residual operand, as the add it replaced */
    default:
        return op_info[op->kind].cls == OPC_EW;
    }
}

/* ---- shape rules ------------------------------------------------------- */

/* "[4,64,768]" into buf */
static const char *shape_str(char *buf, size_t n, int rank, const long *shape)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < rank && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%ld", i ? "," : "", shape[i]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
    return buf;
}

#define FAIL(...) do { snprintf(err, errlen, __VA_ARGS__); return -1; } while (0)
#define T(i) (&g->t[op->in[i]])

static void set_out(int *rank, long *shape, int r, const long *s)
{
    *rank = r;
    for (int i = 0; i < r; i++)
        shape[i] = s[i];
}

void op_matmul_geom(const Graph *g, const Op *op, long *batch, long *M, long *N, long *K)
{
    const Tensor *a = T(0), *b = T(1);
    int ta = (int)op->attr[0], tb = (int)op->attr[1];
    if (b->rank == 2 && !ta) {
        *batch = 1;
        *K = a->shape[a->rank - 1];
        *M = a->numel / (*K ? *K : 1);
    } else {
        *batch = 1;
        for (int i = 0; i < a->rank - 2; i++)
            *batch *= a->shape[i];
        *M = ta ? a->shape[a->rank - 1] : a->shape[a->rank - 2];
        *K = ta ? a->shape[a->rank - 2] : a->shape[a->rank - 1];
    }
    *N = tb ? b->shape[b->rank - 2] : b->shape[b->rank - 1];
}

static int infer_matmul(Graph *g, Op *op, int *rank, long *shape, char *err, size_t errlen)
{
    const Tensor *a = T(0), *b = T(1);
    char sa[96], sb[96];
    int ta = (int)op->attr[0], tb = (int)op->attr[1];
    if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1))
        FAIL("matmul: ta and tb must be 0 or 1");
    if (a->rank < 1 || b->rank < 2)
        FAIL("matmul: operands must have rank >= 1 and >= 2, got %s and %s",
             shape_str(sa, sizeof sa, a->rank, a->shape), shape_str(sb, sizeof sb, b->rank, b->shape));
    if (a->dtype == DT_I32 || b->dtype == DT_I32)
        FAIL("matmul: operands must be floating point");
    long kb = tb ? b->shape[b->rank - 1] : b->shape[b->rank - 2];
    if (b->rank == 2 && !ta) {
        if (a->shape[a->rank - 1] != kb)
            FAIL("matmul inner dimensions differ: %s has %ld columns, %s%s has %ld rows",
                 shape_str(sa, sizeof sa, a->rank, a->shape), a->shape[a->rank - 1],
                 shape_str(sb, sizeof sb, b->rank, b->shape), tb ? " transposed (tb=1)" : "", kb);
        set_out(rank, shape, a->rank, a->shape);
        shape[a->rank - 1] = tb ? b->shape[0] : b->shape[1];
        return 0;
    }
    if (a->rank != b->rank)
        FAIL("matmul: batched operands need equal ranks, got %s and %s",
             shape_str(sa, sizeof sa, a->rank, a->shape), shape_str(sb, sizeof sb, b->rank, b->shape));
    for (int i = 0; i < a->rank - 2; i++)
        if (a->shape[i] != b->shape[i])
            FAIL("matmul: batch dimensions differ: %s and %s",
                 shape_str(sa, sizeof sa, a->rank, a->shape), shape_str(sb, sizeof sb, b->rank, b->shape));
    long ka = ta ? a->shape[a->rank - 2] : a->shape[a->rank - 1];
    if (ka != kb)
        FAIL("matmul inner dimensions differ: %s%s gives K = %ld, %s%s gives K = %ld",
             shape_str(sa, sizeof sa, a->rank, a->shape), ta ? " (ta=1)" : "", ka,
             shape_str(sb, sizeof sb, b->rank, b->shape), tb ? " (tb=1)" : "", kb);
    set_out(rank, shape, a->rank, a->shape);
    shape[a->rank - 2] = ta ? a->shape[a->rank - 1] : a->shape[a->rank - 2];
    shape[a->rank - 1] = tb ? b->shape[b->rank - 2] : b->shape[b->rank - 1];
    return 0;
}

/* 1 when shape b equals the trailing dims of shape a */
static int is_suffix(const Tensor *a, const Tensor *b)
{
    if (b->rank > a->rank)
        return 0;
    for (int i = 0; i < b->rank; i++)
        if (b->shape[b->rank - 1 - i] != a->shape[a->rank - 1 - i])
            return 0;
    return 1;
}

int op_infer(Graph *g, Op *op, int *nout, int rank[], long shape[][IR_MAXRANK], DType dt[],
             char *err, size_t errlen)
{
    const char *name = op_info[op->kind].name;
    char s0[96], s1[96];
    *nout = op_info[op->kind].nout;
    for (int i = 0; i < IR_MAXIO; i++)
        dt[i] = DT_F32;
    for (int i = 0; i < op->nin; i++)
        if (T(i)->dtype == DT_I32 && !(i == 1 && (op->kind == OP_EMBEDDING || op->kind == OP_CROSS_ENTROPY)))
            FAIL("%s: input %d must be floating point, got i32", name, i + 1);
    const Tensor *x = op->nin ? T(0) : NULL;
    switch (op->kind) {
    case OP_EMBEDDING: {
        const Tensor *idx = T(1);
        if (x->rank != 2)
            FAIL("embedding: the table must have rank 2, got %s", shape_str(s0, sizeof s0, x->rank, x->shape));
        if (idx->dtype != DT_I32)
            FAIL("embedding: indices must be i32");
        if (idx->rank + 1 > IR_MAXRANK)
            FAIL("embedding: indices have too many dimensions");
        set_out(&rank[0], shape[0], idx->rank, idx->shape);
        shape[0][rank[0]++] = x->shape[1];
        return 0;
    }
    case OP_MATMUL:
        return infer_matmul(g, op, &rank[0], shape[0], err, errlen);
    case OP_ADD:
        if (!is_suffix(x, T(1)))
            FAIL("add: shapes %s and %s do not match (the smaller must equal the trailing dims of the larger)",
                 shape_str(s0, sizeof s0, x->rank, x->shape), shape_str(s1, sizeof s1, T(1)->rank, T(1)->shape));
        set_out(&rank[0], shape[0], x->rank, x->shape);
        return 0;
    case OP_MUL: case OP_SUB:
        if (!is_suffix(x, T(1)))
            FAIL("%s: shapes %s and %s do not match (the second must equal the trailing dims of the first)", name,
                 shape_str(s0, sizeof s0, x->rank, x->shape), shape_str(s1, sizeof s1, T(1)->rank, T(1)->shape));
        set_out(&rank[0], shape[0], x->rank, x->shape);
        return 0;
    case OP_RMSNORM: {
        if (x->rank < 1)
            FAIL("rmsnorm: needs rank >= 1");
        long C = x->shape[x->rank - 1];
        if (T(1)->rank != 1 || T(1)->shape[0] != C)
            FAIL("rmsnorm: weight must have shape [%ld] to match %s, got %s", C,
                 shape_str(s0, sizeof s0, x->rank, x->shape), shape_str(s1, sizeof s1, T(1)->rank, T(1)->shape));
        if (!(op->attr[0] > 0))
            FAIL("rmsnorm: eps must be positive");
        set_out(&rank[0], shape[0], x->rank, x->shape);
        long N = x->numel / (C ? C : 1);
        set_out(&rank[1], shape[1], 1, &N);
        return 0;
    }
    case OP_ROPE: case OP_ROPE_BWD:
        if (x->rank < 2 || x->shape[x->rank - 1] % 2)
            FAIL("%s: needs (..., T, hs) with an even head size hs, got %s", name,
                 shape_str(s0, sizeof s0, x->rank, x->shape));
        if (!(op->attr[0] > 0))
            FAIL("%s: theta must be positive", name);
        set_out(&rank[0], shape[0], x->rank, x->shape);
        return 0;
    case OP_CONCAT: {
        const Tensor *y = T(1);
        int ax = (int)op->attr[0];
        if (x->rank < 1 || x->rank != y->rank || ax < 0 || ax >= x->rank)
            FAIL("concat: cannot join %s and %s along axis %d (equal ranks, an axis in [0, %d))",
                 shape_str(s0, sizeof s0, x->rank, x->shape), shape_str(s1, sizeof s1, y->rank, y->shape),
                 ax, x->rank);
        for (int i = 0; i < x->rank; i++)
            if (i != ax && x->shape[i] != y->shape[i])
                FAIL("concat: %s and %s differ in dimension %d (only axis %d may)",
                     shape_str(s0, sizeof s0, x->rank, x->shape), shape_str(s1, sizeof s1, y->rank, y->shape),
                     i, ax);
        set_out(&rank[0], shape[0], x->rank, x->shape);
        shape[0][ax] += y->shape[ax];
        return 0;
    }
    case OP_REPEAT: case OP_REPEAT_BWD: {
        long n = (long)op->attr[0];
        int ax = (int)op->attr[1];
        if (x->rank < 1 || ax < 0 || ax >= x->rank || n < 1 ||
            (op->kind == OP_REPEAT_BWD && x->shape[ax] % n))
            FAIL("%s: cannot repeat %s %ld times along axis %d", name, shape_str(s0, sizeof s0, x->rank, x->shape),
                 n, ax);
        set_out(&rank[0], shape[0], x->rank, x->shape);
        if (op->kind == OP_REPEAT && __builtin_mul_overflow(shape[0][ax], n, &shape[0][ax]))
            FAIL("repeat: too large");
        if (op->kind == OP_REPEAT_BWD)
            shape[0][ax] /= n;
        return 0;
    }
    case OP_MEAN:
        if (x->rank < 1)
            FAIL("mean: needs rank >= 1");
        set_out(&rank[0], shape[0], x->rank - 1, x->shape);
        return 0;
    case OP_NARROW: {
        long start = (long)op->attr[0], len = (long)op->attr[1];
        int ax = (int)op->attr[2];
        if (ax < 0 || ax >= x->rank || start < 0 || len < 1 || start + len > x->shape[ax])
            FAIL("slice: [%ld, %ld) of axis %d is outside %s", start, start + len, ax,
                 shape_str(s0, sizeof s0, x->rank, x->shape));
        set_out(&rank[0], shape[0], x->rank, x->shape);
        shape[0][ax] = len;
        return 0;
    }
    case OP_SILU: case OP_SIGMOID: case OP_RELU: case OP_TANH: case OP_GELU_ERF:
    case OP_SILU_BWD: case OP_SIGMOID_BWD: case OP_RELU_BWD: case OP_TANH_BWD: case OP_GELU_ERF_BWD:
    case OP_SCALE: case OP_GELU: case OP_SOFTMAX: case OP_COPY:
    case OP_SOFTMAX_BWD: case OP_GELU_BWD: case OP_CAUSAL_MASK_BWD:
        if (x->rank < 1 && op->kind == OP_SOFTMAX)
            FAIL("softmax: needs rank >= 1");
        if (op->nin == 2 && (T(1)->numel != x->numel))
            FAIL("%s: shapes %s and %s differ", name, shape_str(s0, sizeof s0, x->rank, x->shape),
                 shape_str(s1, sizeof s1, T(1)->rank, T(1)->shape));
        set_out(&rank[0], shape[0], x->rank, x->shape);
        return 0;
    case OP_CAUSAL_MASK:
        if (x->rank < 2 || x->shape[x->rank - 1] != x->shape[x->rank - 2])
            FAIL("causal_mask: needs [..., T, T], got %s", shape_str(s0, sizeof s0, x->rank, x->shape));
        set_out(&rank[0], shape[0], x->rank, x->shape);
        return 0;
    case OP_LAYERNORM: {
        if (x->rank < 1)
            FAIL("layernorm: needs rank >= 1");
        long C = x->shape[x->rank - 1];
        for (int i = 1; i < 3; i++)
            if (T(i)->rank != 1 || T(i)->shape[0] != C)
                FAIL("layernorm: %s must have shape [%ld] to match %s, got %s", i == 1 ? "weight" : "bias",
                     C, shape_str(s0, sizeof s0, x->rank, x->shape),
                     shape_str(s1, sizeof s1, T(i)->rank, T(i)->shape));
        if (!(op->attr[0] > 0))
            FAIL("layernorm: eps must be positive");
        set_out(&rank[0], shape[0], x->rank, x->shape);
        long N = x->numel / (C ? C : 1);
        set_out(&rank[1], shape[1], 1, &N);
        set_out(&rank[2], shape[2], 1, &N);
        return 0;
    }
    case OP_CROSS_ENTROPY: {
        const Tensor *tg = T(1);
        if (tg->dtype != DT_I32)
            FAIL("cross_entropy: targets must be i32");
        if (x->rank != tg->rank + 1)
            FAIL("cross_entropy: logits %s must have one more dimension than targets %s",
                 shape_str(s0, sizeof s0, x->rank, x->shape), shape_str(s1, sizeof s1, tg->rank, tg->shape));
        for (int i = 0; i < tg->rank; i++)
            if (x->shape[i] != tg->shape[i])
                FAIL("cross_entropy: logits %s and targets %s differ in leading dimensions",
                     shape_str(s0, sizeof s0, x->rank, x->shape), shape_str(s1, sizeof s1, tg->rank, tg->shape));
        long n = (long)op->attr[0];
        if (n < 1 || n > x->shape[x->rank - 1])
            FAIL("cross_entropy: n = %ld must be in [1, %ld] (the logits' last dimension)", n, x->shape[x->rank - 1]);
        rank[0] = 0;
        return 0;
    }
    case OP_RESHAPE: {
        long n = 1;
        for (int i = 0; i < op->nlist; i++) {
            if (op->list[i] < 1)
                FAIL("reshape: dimension %d is %ld, must be positive", i, op->list[i]);
            n *= op->list[i];
        }
        if (op->nlist < 1 || n != x->numel)
            FAIL("reshape: %s has %ld elements, the new shape %s has %ld",
                 shape_str(s0, sizeof s0, x->rank, x->shape), x->numel,
                 shape_str(s1, sizeof s1, op->nlist, op->list), n);
        set_out(&rank[0], shape[0], op->nlist, op->list);
        return 0;
    }
    case OP_PERMUTE: {
        int seen[IR_MAXRANK] = {0};
        if (op->nlist != x->rank)
            FAIL("permute: %d axes given for a tensor of rank %d", op->nlist, x->rank);
        for (int i = 0; i < op->nlist; i++) {
            if (op->list[i] < 0 || op->list[i] >= x->rank || seen[op->list[i]]++)
                FAIL("permute: %s is not a permutation of 0..%d", shape_str(s0, sizeof s0, op->nlist, op->list),
                     x->rank - 1);
            shape[0][i] = x->shape[op->list[i]];
        }
        rank[0] = x->rank;
        return 0;
    }
    case OP_SPLIT: {
        long parts = (long)op->attr[0];
        if (op->attr[1] != 0)
            FAIL("split: axis %g reached the view rule (ir/build.c lowers other axes)", op->attr[1]);
        if (x->rank < 1 || parts < 1 || parts > IR_MAXIO || x->shape[0] % parts)
            FAIL("split: cannot split %s into %ld parts along its first dimension (1..%d parts that divide it)",
                 shape_str(s0, sizeof s0, x->rank, x->shape), parts, IR_MAXIO);
        *nout = (int)parts;
        for (int k = 0; k < parts; k++) {
            if (x->shape[0] == parts) {
                set_out(&rank[k], shape[k], x->rank - 1, x->shape + 1);
            } else {
                set_out(&rank[k], shape[k], x->rank, x->shape);
                shape[k][0] = x->shape[0] / parts;
            }
            dt[k] = x->dtype;
        }
        return 0;
    }
    case OP_SLICE: {
        long start = (long)op->attr[0], len = (long)op->attr[1];
        if (op->attr[2] != 0)
            FAIL("slice: axis %g reached the view rule (ir/build.c lowers other axes)", op->attr[2]);
        if (x->rank < 1 || start < 0 || len < 1 || start + len > x->shape[0])
            FAIL("slice: rows [%ld, %ld) are outside %s", start, start + len,
                 shape_str(s0, sizeof s0, x->rank, x->shape));
        set_out(&rank[0], shape[0], x->rank, x->shape);
        shape[0][0] = len;
        dt[0] = x->dtype;
        return 0;
    }
    case OP_INDEX: {
        long i = (long)op->attr[0];
        if (x->rank < 1 || i < 0 || i >= x->shape[0])
            FAIL("index %ld is outside [0, %ld)", i, x->rank ? x->shape[0] : 0);
        set_out(&rank[0], shape[0], x->rank - 1, x->shape + 1);
        dt[0] = x->dtype;
        return 0;
    }
    default:
        FAIL("%s: no shape rule (internal op)", name);
    }
}

/* Sets view_of/view_offset of the outputs of a VIEW op. */
void op_make_views(Graph *g, const Op *op)
{
    const Tensor *x = T(0);
    size_t rowbytes = x->rank ? x->bytes / (size_t)x->shape[0] : x->bytes;
    for (int k = 0; k < op->nout; k++) {
        Tensor *o = &g->t[op->out[k]];
        o->view_of = op->in[0];
        o->kind = x->kind;            /* a layer slice of a parameter is a parameter view */
        o->region = x->region;
        switch (op->kind) {
        case OP_RESHAPE: o->view_offset = 0; break;
        case OP_SPLIT:   o->view_offset = (size_t)k * o->bytes; break;
        case OP_SLICE:   o->view_offset = (size_t)op->attr[0] * rowbytes; break;
        case OP_INDEX:   o->view_offset = (size_t)op->attr[0] * rowbytes; break;
        default: IR_BUG("op_make_views on %s", op_info[op->kind].name);
        }
    }
}

/* Geometry of a fused attention op (the runtime's geom[12], gc_runtime.h):
 * x (input 0 of attention, input 1 of attention_bwd) is split into heads by
 * the permutation op->list, whose result has 3 (q, k, v) as its first axis
 * and the head dimension last; y is (B,T,NH,hs) when heads_out, else
 * (B,NH,T,hs), contiguous. */
void op_attention_geom(const Graph *g, const Op *op, long geom[12])
{
    const Tensor *x = &g->t[op->in[op->kind == OP_ATTENTION ? 0 : 1]];
    long xs[IR_MAXRANK], ps[IR_MAXRANK], pst[IR_MAXRANK];
    xs[x->rank - 1] = 1;
    for (int i = x->rank - 2; i >= 0; i--)
        xs[i] = xs[i + 1] * x->shape[i + 1];
    for (int i = 0; i < op->nlist; i++) {
        ps[i] = x->shape[op->list[i]];
        pst[i] = xs[op->list[i]];
    }
    long B = ps[1], NH = ps[2], T = ps[3], hs = ps[4];
    long out[12] = {B, NH, T, hs, pst[1], pst[2], pst[3], pst[0], 2 * pst[0], 0, 0, 0};
    if (op->attr[1] != 0) {      /* y (B,T,NH,hs) */
        out[9] = T * NH * hs, out[10] = hs, out[11] = NH * hs;
    } else {
        out[9] = NH * T * hs, out[10] = T * hs, out[11] = hs;
    }
    memcpy(geom, out, sizeof out);
}

/* ---- cost model ---------------------------------------------------------- */

double op_flops(const Graph *g, const Op *op)
{
    double n = op->nout ? (double)g->t[op->out[0]].numel : 0;
    double in0 = op->nin ? (double)T(0)->numel : 0;
    switch (op->kind) {
    case OP_MATMUL: case OP_MATMUL_BIAS: {
        long b, M, N, K;
        op_matmul_geom(g, op, &b, &M, &N, &K);
        return 2.0 * (double)b * (double)M * (double)N * (double)K + (op->kind == OP_MATMUL_BIAS ? n : 0);
    }
    case OP_MATMUL_BIAS_GELU: case OP_MATMUL_DGELU: case OP_MATMUL_DGELU_BGRAD: {
        /* + bias and gelu, or gelu' times the product (and its column sums) */
        long b, M, N, K;
        op_matmul_geom(g, op, &b, &M, &N, &K);
        return 2.0 * (double)b * (double)M * (double)N * (double)K +
               (op->kind == OP_MATMUL_BIAS_GELU ? 9 : op->kind == OP_MATMUL_DGELU ? 25 : 26) * n;
    }
    case OP_ADD: case OP_SCALE: case OP_COPY: case OP_CAUSAL_MASK: case OP_CAUSAL_MASK_BWD:
        return n;
    case OP_MUL: case OP_SUB: case OP_RELU: case OP_RELU_BWD: return n;
    case OP_SILU: case OP_SIGMOID: case OP_TANH: return 5 * n;   /* an exp (or tanh), a divide */
    case OP_SILU_BWD: case OP_SIGMOID_BWD: case OP_TANH_BWD: return 8 * n;
    case OP_GELU_ERF: return 10 * n;
    case OP_GELU_ERF_BWD: return 16 * n;
    case OP_RMSNORM: return 4 * n;
    case OP_RMSNORM_BWD: return 8 * (double)T(1)->numel;
    case OP_ROPE: case OP_ROPE_BWD: return 6 * n;   /* 3 per element, and the angle's cos and sin per pair */
    case OP_CONCAT: case OP_NARROW: case OP_NARROW_BWD: case OP_REPEAT: return 0;
    case OP_REPEAT_BWD: case OP_MEAN: return in0;
    case OP_MEAN_BWD: return n;
    case OP_SWIGLU: return 6 * n;
    case OP_SWIGLU_BWD: return 12 * (double)T(1)->numel;
    case OP_ADD_RMSNORM: return 5 * n;
    case OP_GELU: return 8 * n;
    case OP_GELU_BWD: return 16 * n;
    case OP_LAYERNORM: return 8 * n;
    case OP_ADD_LAYERNORM: return 9 * n;
    case OP_LAYERNORM_BWD: return 12 * n;
    case OP_SOFTMAX: return 5 * n;
    case OP_SOFTMAX_BWD: return 4 * n;
    case OP_CROSS_ENTROPY: return 4 * in0;
    case OP_CROSS_ENTROPY_BWD: return 5 * n;
    case OP_REDUCE_ROWS: return in0;
    case OP_EMBEDDING_BWD: return in0;
    case OP_ADAMW: case OP_ADAMW_BF16: return 12 * in0;
    case OP_CLASSIFIER: {   /* logits, dx, dw matmuls; loss and gradient per logit */
        double N = (double)T(0)->numel / (double)T(1)->shape[1];
        return 6.0 * N * (double)T(1)->numel + 9.0 * N * (double)T(1)->shape[0];
    }
    case OP_ATTENTION_GQA: case OP_ATTENTION_GQA_BWD: {   /* as attention's; q is input 0 or 1 */
        const Tensor *q = T(op->kind == OP_ATTENTION_GQA ? 0 : 1);
        double pairs = (double)q->shape[0] * (double)q->shape[1] * (double)q->shape[2] * (double)(q->shape[2] + 1) / 2;
        return pairs * (double)q->shape[3] * (op->kind == OP_ATTENTION_GQA ? 4 : 10);
    }
    case OP_ATTENTION: case OP_ATTENTION_BWD: {
        long geom[12];
        op_attention_geom(g, op, geom);
        /* causal: T(T+1)/2 scores per head; forward q k^T and p v, backward
           q k^T, dy v^T, dv, dq, dk */
        double pairs = (double)geom[0] * (double)geom[1] * (double)geom[2] * (double)(geom[2] + 1) / 2;
        return pairs * (double)geom[3] * (op->kind == OP_ATTENTION ? 4 : 10);
    }
    default: return 0;
    }
}

static int dgelu_bgrad_epilogue(const Graph *g, const Op *op, long batch, long N, long K);

double op_bytes(const Graph *g, const Op *op)
{
    if (op_info[op->kind].cls == OPC_VIEW || op_off_device(g, op))
        return 0;
    double b = 0;
    for (int i = 0; i < op->nin; i++)
        b += (double)T(i)->bytes;
    for (int i = 0; i < op->nout; i++)
        if (op->out[i] >= 0)
            b += (double)g->t[op->out[i]].bytes * ((op->acc >> i & 1) ? 2 : 1);
    switch (op->kind) {
    case OP_ADAMW: case OP_ADAMW_BF16:  /* p, m, v written back (the bf16 copy only written) */
        b += 3 * (double)T(0)->bytes;
        break;
    case OP_EMBEDDING:                  /* only the rows the indices name */
        b += (double)T(1)->numel * (double)T(0)->shape[1] * (double)dtype_size(T(0)->dtype) - (double)T(0)->bytes;
        break;
    case OP_EMBEDDING_BWD: {            /* cleared, then each named row read and written back */
        const Tensor *d = &g->t[op->out[0]];
        long rows = T(1)->numel < d->shape[0] ? T(1)->numel : d->shape[0];
        b += 2.0 * (double)rows * (double)d->shape[1] * (double)dtype_size(d->dtype) -
             (double)d->bytes * ((op->acc & 1) ? 1 : 0);
        break;
    }
    case OP_CLASSIFIER: {               /* per chunk: 3 matmuls and the loss/gradient pass (classifier_cuda.cu) */
        const Tensor *x = T(0), *w = T(1), *dw = &g->t[op->out[2]], *ch = &g->t[op->out[3]];
        long C = w->shape[1], Vp = w->shape[0], N = C > 0 ? x->numel / C : 0, R = (long)op->attr[1];
        double nch = N > 0 && R > 0 ? (double)((N + R - 1) / R) : 0, es = (double)dtype_size(ch->dtype);
        b = 5.0 * (double)N * (double)Vp * es          /* chunk: written, read + written, read twice */
            + 2.0 * nch * (double)w->bytes + 2.0 * (double)x->bytes   /* w and x: two matmuls each */
            + (double)g->t[op->out[1]].bytes * ((op->acc >> 1 & 1) ? 2 : 1)   /* dx */
            + (double)dw->bytes * (2.0 * nch - 1 + (op->acc >> 2 & 1))        /* dw: accumulated per chunk */
            + (double)T(2)->bytes + 16.0 * (double)N + 4;  /* targets; row losses written, read; the loss */
        break;
    }
    case OP_MATMUL_DGELU_BGRAD: {       /* without the DGELU_BGRAD epilogue the column sum reads dpre back */
        long bt, M, N, K;
        op_matmul_geom(g, op, &bt, &M, &N, &K);
        if (!dgelu_bgrad_epilogue(g, op, bt, N, K))
            b += (double)g->t[op->out[0]].bytes;
        break;
    }
    case OP_LAYERNORM_BWD:              /* dw/db and dx are two kernels: dout and x read twice */
        if (op->out[0] >= 0 && (op->out[1] >= 0 || op->out[2] >= 0))
            b += (double)T(0)->bytes + (double)T(1)->bytes;
        break;
    default:
        break;
    }
    return b;
}

/* ---- launches ------------------------------------------------------------ */

/* The column sum of kernels_cuda.cu (colsum): one launch (the last block of
 * each column tile adds the chunks); 2 when the rows are split into chunks
 * and cols is above its 8192 tiles of 32 columns (a second kernel adds them). */
static int colsum_launches(long rows, long cols, int nout, size_t ws)
{
    if (cols <= 0)
        return 0;
    if (rows <= 0)
        return nout;
    long nchunks = (rows + 127) / 128;
    if (nchunks > 1024)
        nchunks = 1024;
    long fit = (long)(ws / ((size_t)nout * (size_t)cols * sizeof(float)));
    if (nchunks > fit)
        nchunks = fit;
    if (nchunks > 65535)
        nchunks = 65535;
    if (nchunks <= 1)
        return 1;
    long chunk = (rows + nchunks - 1) / nchunks;
    return (rows + chunk - 1) / chunk > 1 && cols > 8192L * 32 ? 2 : 1;
}

/* embedding_bwd of kernels_cuda.cu: clear, keys, bitonic sort, runs */
static int embedding_bwd_launches(long n, int acc, size_t ws)
{
    int l = !(acc & 1);
    if (n <= 0)
        return l;
    long npad = 2;
    while (npad < n)
        npad <<= 1;
    if ((size_t)npad * 8 > ws)
        return l + 1;                   /* the O(n^2) fallback */
    long tile = npad < 2048 ? npad : 2048;
    l += 2 + 1;                         /* keys, the first shared stage, the runs */
    for (long k = 2 * tile; k <= npad; k <<= 1) {
        for (long j = k >> 1; j >= tile; j >>= 1)
            l++;
        l++;
    }
    return l;
}

/* 1 when tensor t's address in its region is 16-byte aligned (regions are) */
static int aligned16(const Graph *g, int t)
{
    size_t off;
    int r = graph_root(g, t, &off);
    return (g->t[r].offset + off) % 16 == 0;
}

/* 1 when gc_matmul_dgelu_bgrad takes cuBLASLt's DGELU_BGRAD epilogue (as
 * kernels_cuda.cu decides): fp32 dpre (with a bf16 one the epilogue's bias
 * gradient would be bf16; the plan's is fp32), the bias gradient overwritten
 * (acc bit 2 clear: the epilogue overwrites, so micro-batches after the
 * first add a column sum), one unbatched product with K > 0, N a multiple
 * of 8, pre and db 16-byte aligned. */
static int dgelu_bgrad_epilogue(const Graph *g, const Op *op, long batch, long N, long K)
{
    return g->t[op->out[0]].dtype == DT_F32 && !(op->acc >> 2 & 1) && batch == 1 && K > 0 && N % 8 == 0 &&
           g->t[op->out[0]].numel > 0 && aligned16(g, op->in[2]) && aligned16(g, op->out[2]);
}

int op_off_device(const Graph *g, const Op *op)
{
    if (op->kind == OP_OFFLOAD || op->kind == OP_PREFETCH || op->kind == OP_COPY_WAIT)
        return 1;
    if (op->kind == OP_COPY && g->t[op->in[0]].region == RG_HOST)   /* the host cast of bf16 masters */
        return 1;
    return (op->kind == OP_ADAMW || op->kind == OP_ADAMW_BF16) && g->t[op->in[0]].region == RG_HOST;
}

int op_launches(const Graph *g, const Op *op, size_t ws)
{
    const Tensor *in0 = op->nin ? T(0) : NULL;
    if (op_off_device(g, op))
        return 0;
    switch (op_info[op->kind].cls) {
    case OPC_VIEW: return 0;
    case OPC_EW: return 1;
    default: break;
    }
    switch (op->kind) {
    case OP_CROSS_ENTROPY: return 2;    /* per-block partial sums, final sum */
    case OP_REDUCE_ROWS: {
        long cols = g->t[op->out[0]].numel;
        return colsum_launches(in0->numel / (cols ? cols : 1), cols, 1, ws);
    }
    case OP_LAYERNORM_BWD: {
        const Tensor *x = T(1);
        long C = x->rank ? x->shape[x->rank - 1] : 1, N = x->numel / (C ? C : 1);
        int nout = (op->out[1] >= 0) + (op->out[2] >= 0);
        return (op->out[0] >= 0) + (nout ? colsum_launches(N, C, 2, ws) : 0);
    }
    case OP_RMSNORM_BWD: {              /* dw's column sum, then dx (norm_rope_cuda.cu) */
        const Tensor *x = T(1);
        long C = x->rank ? x->shape[x->rank - 1] : 1, N = x->numel / (C ? C : 1);
        return (op->out[0] >= 0) + (op->out[1] >= 0 ? colsum_launches(N, C, 1, ws) : 0);
    }
    case OP_EMBEDDING_BWD:
        return embedding_bwd_launches(T(1)->numel, op->acc, ws);
    case OP_MATMUL_BIAS: {              /* a bias under 16-byte aligned: added by a second kernel */
        size_t off;
        int r = graph_root(g, op->in[2], &off);
        return 1 + ((g->t[r].offset + off) % 16 != 0);
    }
    case OP_ATTENTION_BWD: return 2;    /* dk/dv, then dq (attention_cuda.cu) */
    case OP_ATTENTION_GQA_BWD: return 2;   /* dk/dv, then dq (attention_gqa_cuda.cu) */
    case OP_CLASSIFIER: {               /* per chunk 3 matmuls + the loss/gradient kernel; the loss sum */
        long C = T(1)->shape[1], N = C > 0 ? T(0)->numel / C : 0, R = (long)op->attr[1];
        return N <= 0 || R <= 0 ? 1 : (int)(4 * ((N + R - 1) / R) + 1);
    }
    case OP_MATMUL_DGELU: return 2;     /* DGELU epilogue + the recomputed GELU, or matmul + one kernel */
    case OP_MATMUL_DGELU_BGRAD: {       /* DGELU_BGRAD epilogue + the recomputed GELU, else + a column sum */
        long b, M, N, K;
        op_matmul_geom(g, op, &b, &M, &N, &K);
        return 2 + (dgelu_bgrad_epilogue(g, op, b, N, K) ? 0 : colsum_launches(b * M, N, 1, ws));
    }
    case OP_MATMUL_BIAS_GELU: {         /* the cuBLASLt GELU_AUX_BIAS epilogue, else matmul + GELU kernel */
        /* as gc_matmul_bias_gelu decides: bias and aux (pre) 16-byte
           aligned, rows of pre a multiple of 8 elements */
        int aux = op->out[1];
        int ok = T(2)->rank > 0 && T(2)->shape[T(2)->rank - 1] % 8 == 0 && g->t[aux].numel > 0;
        int ts[2] = {op->in[2], aux}, al[2];
        for (int i = 0; i < 2; i++) {
            size_t off;
            int r = graph_root(g, ts[i], &off);
            al[i] = (g->t[r].offset + off) % 16 == 0;
        }
        /* the fallback's matmul adds a misaligned bias by a kernel of its own (OP_MATMUL_BIAS) */
        return ok && al[0] && al[1] ? 1 : 2 + !al[0];
    }
    default:
        return 1;
    }
}

int op_param_refresh(const Graph *g, const Op *op)
{
    if (op->kind == OP_ALLGATHER)   /* zero1/zero2 of a bf16 program: the copy shards made whole */
        return op->phase == PH_COMM && (int)op->attr[2] == 8;
    if (op->kind == OP_OFFLOAD || op->kind == OP_PREFETCH)   /* a copy without a slot (passes/offload.c) */
        return op->attr[0] < 0;
    if (op->kind != OP_COPY)
        return 0;
    const Tensor *in = &g->t[op->in[0]], *out = &g->t[op->out[0]];   /* on the host with the optimizer offloaded */
    return (in->region == RG_PARAMS || in->region == RG_HOST) && (out->region == RG_PARAMS || out->region == RG_HOST) &&
           in->kind == TK_PARAM && out->kind == TK_PARAM;
}

const char *op_phase_label(const Graph *g, const Op *op)
{
    return op_param_refresh(g, op) ? "params" : phase_name(op->phase);
}

static int is_update(const Op *op) { return op->kind == OP_ADAMW || op->kind == OP_ADAMW_BF16; }

int op_update_group_len(const Graph *g, int k)
{
    const Op *op = &g->ops[g->sched[k]];
    if (!is_update(op))
        return 0;
    if (k > 0) {   /* inside a group started before k: 0 */
        int s = k;
        while (s > 0 && is_update(&g->ops[g->sched[s - 1]]) && g->ops[g->sched[s - 1]].layer == op->layer)
            s--;
        if ((k - s) % OP_UPDATE_GROUP_MAX)
            return 0;
    }
    int n = 1;
    while (n < OP_UPDATE_GROUP_MAX && k + n < g->nsched && is_update(&g->ops[g->sched[k + n]]) &&
           g->ops[g->sched[k + n]].layer == op->layer)
        n++;
    return n;
}

void graph_step_traffic(const Graph *g, long launches[PH_COUNT], double bytes[PH_COUNT])
{
    size_t ws = 0;
    for (int t = 0; t < g->nt; t++)
        if (g->t[t].kind == TK_WORKSPACE)
            ws += g->t[t].bytes;
    for (int p = 0; p < PH_COUNT; p++) {
        launches[p] = 0;
        bytes[p] = 0;
    }
    for (int k = 0; k < g->nsched; k++) {
        const Op *op = &g->ops[g->sched[k]];
        if (op_param_refresh(g, op))
            continue;                   /* not per step */
        int runs = op->phase == PH_OPT || g->micro_batches <= 1 ? 1 : g->micro_batches;   /* per micro-batch */
        /* micro-batches after the first accumulate into the parameter
           gradients that the first overwrites (codegen's acc_arg), and skip
           the fills of their unused bytes */
        Op later = *op;
        for (int i = 0; runs > 1 && i < op->nout; i++)
            if (g->t[graph_root(g, op->out[i], NULL)].kind == TK_GRAD)
                later.acc |= 1 << i;
        int skip_later = runs > 1 && op->kind == OP_FILL && later.acc != op->acc;
        if (is_update(op))              /* one multi-tensor launch per group (none on the host) */
            launches[op->phase] += op_update_group_len(g, k) > 0 && !op_off_device(g, op);
        else
            launches[op->phase] += op_launches(g, op, ws) + (skip_later ? 0 : (runs - 1) * op_launches(g, &later, ws));
        bytes[op->phase] += op_bytes(g, op) + (skip_later ? 0 : (runs - 1) * op_bytes(g, &later));
    }
    if (g->region_bytes[RG_GRADS] > 0) {   /* the trainer's global gradient norm (gc_device_sumsq): one launch */
        launches[PH_OPT] += 1;
        bytes[PH_OPT] += (double)g->region_bytes[RG_GRADS];
    }
}

int op_last_micro_only(const Graph *g, const Op *op)
{
    return g->micro_batches > 1 && (op->kind == OP_ALLREDUCE || op->kind == OP_REDUCE_SCATTER) &&
           g->t[graph_root(g, op->in[0], NULL)].kind == TK_GRAD;
}

int op_runs_per_step(const Graph *g, const Op *op)
{
    if (op_param_refresh(g, op))   /* not per step: after the host wrote the masters */
        return 0;
    if (g->micro_batches <= 1 || op->phase == PH_OPT || op_last_micro_only(g, op) ||
        (op->phase == PH_COMM && op->attr[2] == 4))
        return 1;
    return g->micro_batches;
}
