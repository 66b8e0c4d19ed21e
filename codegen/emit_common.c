/* emit_common.c — what the C and CUDA emitters share: tensor addresses,
 * runtime kernel calls (same names and signatures on both targets), the
 * program description, NaN poisoning and the --profile categories. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codegen.h"

/* Longest --profile category label (bytes, with the NUL). */
#define PROF_LABEL 96

void emit_tensor_ptr(FILE *f, const Graph *g, int t)
{
    const Tensor *x = &g->t[t];
    static const char *const ctype[] = {"float", "gc_bf16", "int32_t"};
    if (x->rank_stride)   /* this rank's shard */
        fprintf(f, "((%s *)(ctx->region[%d] + %zu + (size_t)ctx->dp_rank * %zu))", ctype[x->dtype], (int)x->region,
                x->offset, x->rank_stride);
    else
        fprintf(f, "((%s *)(ctx->region[%d] + %zu))", ctype[x->dtype], (int)x->region, x->offset);
}

int ew_broadcast(const Graph *g, const Op *op)
{
    return op->nin == 2 && g->t[op->in[1]].numel != g->t[op->out[0]].numel;
}

const char *ew_name(char *buf, size_t n, const Graph *g, const Op *op)
{
    /* operand dtypes in the name when any is not fp32: ew_copy_f32_bf16 */
    char types[32] = "";
    int mixed = g->t[op->out[0]].dtype != DT_F32;
    for (int i = 0; i < op->nin; i++)
        mixed |= g->t[op->in[i]].dtype != DT_F32;
    if (mixed) {
        snprintf(types, sizeof types, "_%s", dtype_name(g->t[op->out[0]].dtype));
        for (int i = 0; i < op->nin; i++)
            snprintf(types + strlen(types), sizeof types - strlen(types), "_%s", dtype_name(g->t[op->in[i]].dtype));
    }
    snprintf(buf, n, "ew_%s%s%s%s", op_info[op->kind].name, ew_broadcast(g, op) ? "_b" : "",
             (op->acc & 1) ? "_acc" : "", types);
    return buf;
}

/* comma-separated pointers of outputs then inputs */
static void ptrs(FILE *f, const Graph *g, const int *ids, int n, int *first)
{
    for (int i = 0; i < n; i++) {
        fputs(*first ? "" : ", ", f);
        *first = 0;
        if (ids[i] < 0)
            fputs("NULL", f);
        else
            emit_tensor_ptr(f, g, ids[i]);
    }
}

/* the tensor whose dtype picks the kernel variant (gc_<name>_bf16) */
static int primary(const Op *op)
{
    switch (op->kind) {
    case OP_CROSS_ENTROPY: return op->in[0];    /* logits; the loss stays fp32 */
    case OP_CLASSIFIER: return op->in[0];       /* x; the loss, dw and rowloss stay fp32 */
    case OP_ADAMW: case OP_ADAMW_BF16: return op->in[1];   /* the gradient; masters stay fp32 */
    default: return op->nout ? op->out[0] : op->in[0];
    }
}

static const char *variant(const Graph *g, const Op *op)
{
    int bf_in = op->nin && g->t[op->in[0]].dtype == DT_BF16;
    switch (op->kind) {
    case OP_MATMUL:               /* weight gradients: bf16 products into fp32 */
        if (g->t[op->out[0]].dtype == DT_F32 && bf_in)
            return "_bf16_f32";
        break;
    case OP_REDUCE_ROWS: case OP_EMBEDDING_BWD:   /* fp32 parameter gradients from bf16 */
        return bf_in ? "_bf16" : "";
    default:
        break;
    }
    return g->t[primary(op)].dtype == DT_BF16 ? "_bf16" : "";
}

static void call_head(FILE *f, const Graph *g, const char *fn, const Op *op, const int *in, int nin)
{
    int first = 1;
    fprintf(f, "%s%s(", fn, variant(g, op));
    ptrs(f, g, op->out, op->nout, &first);
    ptrs(f, g, in ? in : op->in, in ? nin : op->nin, &first);
}

static long last_dim(const Tensor *t) { return t->rank ? t->shape[t->rank - 1] : 1; }

/* the product of t's dims before axis ax */
static long shape_outer(const Tensor *t, int ax)
{
    long n = 1;
    for (int i = 0; i < ax; i++)
        n *= t->shape[i];
    return n;
}

/* With micro-batches (passes/microbatch.c): the outputs (bit i) of op that
 * are parameter gradients it overwrites; they accumulate when ctx->micro > 0. */
static int micro_acc_mask(const Graph *g, const Op *op)
{
    if (g->micro_batches <= 1 || op->phase == PH_OPT)
        return 0;
    int m = 0;
    for (int i = 0; i < op->nout; i++)
        if (g->t[graph_root(g, op->out[i], NULL)].kind == TK_GRAD && !(op->acc >> i & 1))
            m |= 1 << i;
    return m;
}

/* The kernel's acc argument: op->acc, or "(ctx->micro ? acc|mask : acc)". */
static const char *acc_arg(char *buf, size_t n, const Graph *g, const Op *op)
{
    int m = micro_acc_mask(g, op);
    if (m)
        snprintf(buf, n, "(ctx->micro ? %d : %d)", op->acc | m, op->acc);
    else
        snprintf(buf, n, "%d", op->acc);
    return buf;
}

/* "{p, pcopy or NULL, g, m, v, n, wd}," of one update (gc_adamw_tensor) */
static void emit_update_tensor(FILE *f, const Graph *g, const Op *op)
{
    fputs("{", f);
    for (int i = 0; i < 5; i++) {
        int t = i == 0 ? op->in[0] : i == 1 ? (op->nin > 4 ? op->in[4] : -1) : op->in[i - 1];
        if (t < 0)
            fputs("NULL", f);
        else
            emit_tensor_ptr(f, g, t);
        fputs(", ", f);
    }
    fprintf(f, "%ldL, %s},", g->t[op->in[0]].numel, op->attr[0] != 0 ? "ctx->weight_decay" : "0.0f");
}

/* An update's device tensor i (0: the weights, 1: the gradient): itself,
 * or for a host update (passes/offload.c) the device tensor its host copy
 * is copied from (the master's refresh, the gradient's offload). */
static int update_device(const Graph *g, const Op *op, int i)
{
    int t = op->in[i], w = g->t[t].producer;
    return g->t[t].region == RG_HOST && w >= 0 && g->ops[w].kind == OP_OFFLOAD ? g->ops[w].in[0] : t;
}

/* 1 for an update that runs on the host (--offload opt) */
static int host_update(const Graph *g, const Op *op)
{
    return (op->kind == OP_ADAMW || op->kind == OP_ADAMW_BF16) && g->t[op->in[0]].region == RG_HOST;
}

/* tensor parallel: the update of a cut parameter (each rank its own part;
 * the others are alike on every rank) */
static int update_is_cut(const Graph *g, const Op *op)
{
    return g->tp && g->t[graph_root(g, update_device(g, op, 0), NULL)].tp_ranks > 0;
}

/* an update that reads its rank's share of a reduce-scattered gradient (zero) */
static int update_reads_share(const Graph *g, const Op *op)
{
    int w = g->t[update_device(g, op, 1)].producer;
    return w >= 0 && g->ops[w].kind == OP_REDUCE_SCATTER;
}

/* "gc_copy(dst, src, bytes, " */
static void copy_head(FILE *f, const Graph *g, int dst, int src)
{
    fputs("gc_copy(", f);
    emit_tensor_ptr(f, g, dst);
    fputs(", ", f);
    emit_tensor_ptr(f, g, src);
    fprintf(f, ", %zuu, ", g->t[src].bytes);
}

/* The host update that reads host gradient copy t (its only reader). */
static const Op *reader_update(const Graph *g, int t)
{
    for (int i = 0; i < g->t[t].nconsumers; i++)
        if (host_update(g, &g->ops[g->t[t].consumers[i]]))
            return &g->ops[g->t[t].consumers[i]];
    IR_BUG("host gradient %s: no host update reads it", g->t[t].name);
}

/* Tensor-parallel programs: when this rank adds the squares of an update's
 * gradient to the global norm, so that every element counts once: a
 * gradient that the ranks of a tp group hold alike counts on tp rank 0, one
 * that the data-parallel groups hold alike (all-reduced) on dp rank 0. ""
 * when always (and in other programs, whose split_step.c decides). */
static const char *norm_condition(const Graph *g, const Op *op)
{
    if (!g->tp)
        return "";
    int cut = update_is_cut(g, op), share = graph_data_ranks(g) == 1 || update_reads_share(g, op);
    return cut && share ? "" : cut ? " && ctx->dp_rank == 0" : share ? " && ctx->tp_rank == 0"
                                                                      : " && ctx->tp_rank == 0 && ctx->dp_rank == 0";
}

void emit_kernel_call(FILE *f, const Graph *g, const Op *op)
{
    char acc[64];
    acc_arg(acc, sizeof acc, g, op);
    const Tensor *in0 = op->nin ? &g->t[op->in[0]] : NULL;
    const Tensor *out0 = op->nout ? &g->t[op->out[0]] : NULL;
    switch (op->kind) {
    case OP_MATMUL: {
        long b, M, N, K;
        op_matmul_geom(g, op, &b, &M, &N, &K);
        call_head(f, g, "gc_matmul", op, NULL, 0);
        fprintf(f, ", %ld, %ld, %ld, %ld, %d, %d, %s);\n", b, M, N, K, (int)op->attr[0], (int)op->attr[1], acc);
        return;
    }
    case OP_MATMUL_BIAS: {
        long b, M, N, K;
        op_matmul_geom(g, op, &b, &M, &N, &K);
        call_head(f, g, "gc_matmul_bias", op, NULL, 0);
        fprintf(f, ", %ld, %ld, %ld, %ld, %d, %d, %s);\n", b, M, N, K, (int)op->attr[0], (int)op->attr[1], acc);
        return;
    }
    case OP_MATMUL_BIAS_GELU: case OP_MATMUL_DGELU: {   /* no acc: fuse_gelu.c fuses none */
        long b, M, N, K;
        op_matmul_geom(g, op, &b, &M, &N, &K);
        call_head(f, g, op->kind == OP_MATMUL_DGELU ? "gc_matmul_dgelu" : "gc_matmul_bias_gelu", op, NULL, 0);
        fprintf(f, ", %ld, %ld, %ld, %ld, %d, %d);\n", b, M, N, K, (int)op->attr[0], (int)op->attr[1]);
        return;
    }
    case OP_MATMUL_DGELU_BGRAD: {   /* acc: the bias gradient's bit 2 (micro-batches after the first) */
        long b, M, N, K;
        op_matmul_geom(g, op, &b, &M, &N, &K);
        call_head(f, g, "gc_matmul_dgelu_bgrad", op, NULL, 0);
        fprintf(f, ", %ld, %ld, %ld, %ld, %d, %d, %s);\n", b, M, N, K, (int)op->attr[0], (int)op->attr[1], acc);
        return;
    }
    case OP_EMBEDDING: {
        const Tensor *idx = &g->t[op->in[1]];
        int in[2] = {op->in[1], op->in[0]};    /* kernel order: idx, table */
        call_head(f, g, "gc_embedding_fwd", op, in, 2);
        fprintf(f, ", %ldL, %ldL, %ldL);\n", idx->numel, in0->shape[0], in0->shape[1]);
        return;
    }
    case OP_EMBEDDING_BWD:
        call_head(f, g, "gc_embedding_bwd", op, NULL, 0);
        fprintf(f, ", %ldL, %ldL, %ldL, %s);\n", g->t[op->in[1]].numel, out0->shape[0], out0->shape[1], acc);
        return;
    case OP_REDUCE_ROWS:
        call_head(f, g, "gc_reduce_rows", op, NULL, 0);
        fprintf(f, ", %ldL, %ldL, %s);\n", in0->numel / out0->numel, out0->numel, acc);
        return;
    case OP_LAYERNORM:
        call_head(f, g, "gc_layernorm_fwd", op, NULL, 0);
        fprintf(f, ", %ldL, %ldL, %.9ef);\n", in0->numel / last_dim(in0), last_dim(in0), op->attr[0]);
        return;
    case OP_ADD_LAYERNORM: {
        const Tensor *x = &g->t[op->out[0]];
        call_head(f, g, "gc_add_layernorm_fwd", op, NULL, 0);
        fprintf(f, ", %ldL, %ldL, %.9ef);\n", x->numel / last_dim(x), last_dim(x), op->attr[0]);
        return;
    }
    case OP_LAYERNORM_BWD: {
        const Tensor *x = &g->t[op->in[1]];
        call_head(f, g, "gc_layernorm_bwd", op, NULL, 0);
        fprintf(f, ", %ldL, %ldL, %s);\n", x->numel / last_dim(x), last_dim(x), acc);
        return;
    }
    case OP_SOFTMAX:
        call_head(f, g, "gc_softmax_fwd", op, NULL, 0);
        fprintf(f, ", %ldL, %ldL);\n", in0->numel / last_dim(in0), last_dim(in0));
        return;
    case OP_SOFTMAX_BWD:
        call_head(f, g, "gc_softmax_bwd", op, NULL, 0);
        fprintf(f, ", %ldL, %ldL, %s);\n", in0->numel / last_dim(in0), last_dim(in0), acc);
        return;
    case OP_CAUSAL_MASK:
        call_head(f, g, "gc_causal_mask_fwd", op, NULL, 0);
        fprintf(f, ", %ldL, %ldL);\n", in0->numel / (last_dim(in0) * last_dim(in0)), last_dim(in0));
        return;
    case OP_CAUSAL_MASK_BWD:
        call_head(f, g, "gc_causal_mask_bwd", op, NULL, 0);
        fprintf(f, ", %ldL, %ldL, %s);\n", in0->numel / (last_dim(in0) * last_dim(in0)), last_dim(in0), acc);
        return;
    case OP_CROSS_ENTROPY:
        call_head(f, g, "gc_crossentropy_fwd", op, NULL, 0);
        fprintf(f, ", %ldL, %ldL, %ldL);\n", in0->numel / last_dim(in0), last_dim(in0), (long)op->attr[0]);
        return;
    case OP_CROSS_ENTROPY_BWD: {
        const Tensor *lg = &g->t[op->in[1]];
        call_head(f, g, "gc_crossentropy_bwd", op, NULL, 0);
        fprintf(f, ", %ldL, %ldL, %ldL, %s);\n", lg->numel / last_dim(lg), last_dim(lg), (long)op->attr[0], acc);
        return;
    }
    case OP_PERMUTE: {
        fprintf(f, "{ static const long shape[] = {");
        for (int i = 0; i < in0->rank; i++)
            fprintf(f, "%s%ldL", i ? ", " : "", in0->shape[i]);
        fprintf(f, "}; static const int perm[] = {");
        for (int i = 0; i < op->nlist; i++)
            fprintf(f, "%s%ld", i ? ", " : "", op->list[i]);
        fprintf(f, "}; ");
        call_head(f, g, "gc_permute", op, NULL, 0);
        fprintf(f, ", %d, shape, perm, %s); }\n", in0->rank, acc);
        return;
    }
    case OP_RMSNORM:
        call_head(f, g, "gc_rmsnorm_fwd", op, NULL, 0);
        fprintf(f, ", %ldL, %ldL, %.9ef);\n", in0->numel / last_dim(in0), last_dim(in0), op->attr[0]);
        return;
    case OP_ADD_RMSNORM: {
        const Tensor *x = &g->t[op->out[0]];
        call_head(f, g, "gc_add_rmsnorm_fwd", op, NULL, 0);
        fprintf(f, ", %ldL, %ldL, %.9ef);\n", x->numel / last_dim(x), last_dim(x), op->attr[0]);
        return;
    }
    case OP_SWIGLU_BWD:
        call_head(f, g, "gc_swiglu_bwd", op, NULL, 0);
        fprintf(f, ", %ldL, %s);\n", g->t[op->in[1]].numel, acc);
        return;
    case OP_RMSNORM_BWD: {
        const Tensor *x = &g->t[op->in[1]];
        call_head(f, g, "gc_rmsnorm_bwd", op, NULL, 0);
        fprintf(f, ", %ldL, %ldL, %s);\n", x->numel / last_dim(x), last_dim(x), acc);
        return;
    }
    case OP_ROPE: case OP_ROPE_BWD: {   /* (batch, T, hs) */
        long hs = last_dim(in0), T = in0->shape[in0->rank - 2];
        call_head(f, g, "gc_rope", op, NULL, 0);
        fprintf(f, ", %ldL, %ldL, %ldL, %.17g, %d, %s);\n", in0->numel / (T * hs), T, hs, op->attr[0],
                op->kind == OP_ROPE_BWD, acc);
        return;
    }
    case OP_CONCAT: {   /* rows of a's then b's elements along the axis and below */
        long in[2];
        long outer = shape_outer(&g->t[op->out[0]], (int)op->attr[0]);
        for (int i = 0; i < 2; i++)
            in[i] = g->t[op->in[i]].numel / (outer ? outer : 1);
        call_head(f, g, "gc_concat", op, NULL, 0);
        fprintf(f, ", %ldL, %ldL, %ldL, %s);\n", outer, in[0], in[1], acc);
        return;
    }
    case OP_NARROW: case OP_NARROW_BWD: {   /* x: outer rows of nx elements, [start, start+len) of each */
        const Tensor *x = op->kind == OP_NARROW ? in0 : out0;
        int ax = (int)op->attr[2];
        long outer = shape_outer(x, ax), inner = x->numel / (outer * x->shape[ax]);
        call_head(f, g, op->kind == OP_NARROW ? "gc_narrow" : "gc_narrow_bwd", op, NULL, 0);
        fprintf(f, ", %ldL, %ldL, %ldL, %ldL, %s);\n", outer, x->shape[ax] * inner, (long)op->attr[0] * inner,
                (long)op->attr[1] * inner, acc);
        return;
    }
    case OP_REPEAT: case OP_REPEAT_BWD: {   /* x (outer, d, inner) -> (outer, d*n, inner) */
        const Tensor *x = op->kind == OP_REPEAT ? in0 : out0;
        int ax = (int)op->attr[1];
        long outer = shape_outer(x, ax), inner = x->numel / (outer * x->shape[ax]);
        call_head(f, g, op->kind == OP_REPEAT ? "gc_repeat" : "gc_repeat_bwd", op, NULL, 0);
        fprintf(f, ", %ldL, %ldL, %ldL, %ldL, %s);\n", outer, x->shape[ax], (long)op->attr[0], inner, acc);
        return;
    }
    case OP_MEAN: case OP_MEAN_BWD: {
        const Tensor *x = op->kind == OP_MEAN ? in0 : out0;
        call_head(f, g, op->kind == OP_MEAN ? "gc_mean_rows" : "gc_mean_bwd", op, NULL, 0);
        fprintf(f, ", %ldL, %ldL, %s);\n", x->numel / last_dim(x), last_dim(x), acc);
        return;
    }
    case OP_FILL:   /* zeros of unused gradient bytes: once, before the first micro-batch's writes */
        fprintf(f, "%sgc_fill%s(", micro_acc_mask(g, op) ? "if (!ctx->micro) " : "", variant(g, op));
        emit_tensor_ptr(f, g, op->out[0]);
        fprintf(f, ", %ldL, %.9ef);\n", out0->numel, op->attr[0]);
        return;
    case OP_OFFLOAD: {   /* device -> host region (passes/offload.c) */
        int slot = (int)op->attr[0];
        if (slot < 0) {      /* weights into their master: once the host has written them */
            copy_head(f, g, op->out[0], op->in[0]);
            fprintf(f, "GC_COPY_NOW, -1, -1);\n");
        } else if (op->phase == PH_OPT) {   /* a gradient for a host update: its norm first */
            fprintf(f, "if (ctx->gnorm_sq%s) gc_device_sumsq_add(", norm_condition(g, reader_update(g, op->out[0])));
            emit_tensor_ptr(f, g, op->in[0]);
            fprintf(f, ", %ldL);\n        if (!ctx->norm_pass) ", in0->numel);
            copy_head(f, g, op->out[0], op->in[0]);
            fprintf(f, "GC_COPY_D2H, %d, -1);\n", slot);
        } else {
            copy_head(f, g, op->out[0], op->in[0]);
            fprintf(f, "GC_COPY_D2H, %d, -1);\n", slot);
        }
        return;
    }
    case OP_PREFETCH: {  /* host region -> device */
        int slot = (int)op->attr[0], w = g->t[op->in[0]].producer;
        if (slot < 0) {              /* host-cast bf16 weights to the device: once the host wrote the masters */
            copy_head(f, g, op->out[0], op->in[0]);
            fprintf(f, "GC_COPY_NOW, -1, -1);\n");
        } else if (op->phase == PH_OPT) {   /* the weights a host update wrote, after it on its stream */
            fprintf(f, "if (!ctx->norm_pass) ");
            copy_head(f, g, op->out[0], op->in[0]);
            fprintf(f, "GC_COPY_UPDATE, %d, -1);\n", slot);
        } else {                     /* after the offload that filled the host copy */
            copy_head(f, g, op->out[0], op->in[0]);
            fprintf(f, "GC_COPY_H2D, %d, %d);\n", slot,
                    w >= 0 && g->ops[w].kind == OP_OFFLOAD ? (int)g->ops[w].attr[0] : -1);
        }
        return;
    }
    case OP_COPY_WAIT:
        fprintf(f, "gc_copy_wait(%d);\n", (int)op->attr[0]);
        return;
    case OP_ADAMW: case OP_ADAMW_BF16:   /* one tensor; emit_step_body groups them */
        fprintf(f, "{ const gc_adamw_tensor u[] = {");
        emit_update_tensor(f, g, op);
        fprintf(f, "}; if (ctx->gnorm_sq%s) gc_update_sumsq(u, 1); "
                   "gc_update_apply(u, 1, ctx); }\n",
                norm_condition(g, op));
        return;
    case OP_ALLREDUCE:
        if (op_last_micro_only(g, op))   /* the accumulated gradient: reduced once, with the last micro-batch */
            fprintf(f, "if (ctx->micro == %d) ", g->micro_batches - 1);
        call_head(f, g, "gc_allreduce", op, NULL, 0);
        fprintf(f, ", %ldL, %d, %d);\n", in0->numel, op->attr[1] != 0, (int)op->attr[3]);
        return;
    case OP_REDUCE_SCATTER:
        if (op_last_micro_only(g, op))
            fprintf(f, "if (ctx->micro == %d) ", g->micro_batches - 1);
        call_head(f, g, "gc_reduce_scatter", op, NULL, 0);
        fprintf(f, ", %ldL, %d, %d);\n", out0->numel, op->attr[1] != 0, (int)op->attr[3]);
        return;
    case OP_ALLGATHER:
        call_head(f, g, "gc_allgather", op, NULL, 0);
        fprintf(f, ", %ldL, %d);\n", g->t[op->in[1]].numel, (int)op->attr[3]);
        return;
    case OP_GATHER:
        call_head(f, g, "gc_gather", op, NULL, 0);
        fprintf(f, ", %ldL, %d);\n", in0->numel, (int)op->attr[3]);
        return;
    case OP_CLASSIFIER: {   /* --sample (ctx->sample_row = r+1): row r's logits only, into out[5] */
        const Tensor *w = &g->t[op->in[1]];
        long C = w->shape[1], Vp = w->shape[0];
        fprintf(f, "if (ctx->sample_row) gc_matmul%s(", in0->dtype == DT_BF16 ? "_bf16_f32" : "");
        emit_tensor_ptr(f, g, op->out[5]);
        fputs(", ", f);
        emit_tensor_ptr(f, g, op->in[0]);
        fprintf(f, " + (ctx->sample_row - 1) * %ldL, ", C);
        emit_tensor_ptr(f, g, op->in[1]);
        fprintf(f, ", 1, 1, %ldL, %ldL, 0, 1, 0);\n        else ", Vp, C);
        int first = 1;
        fprintf(f, "gc_classifier%s(", variant(g, op));
        ptrs(f, g, op->out, 5, &first);
        ptrs(f, g, op->in, op->nin, &first);
        fprintf(f, ", %ldL, %ldL, %ldL, %ldL, %ldL, %.9ef, %s);\n", in0->numel / C, C, Vp, (long)op->attr[0],
                (long)op->attr[1], op->attr[2], acc);
        return;
    }
    case OP_ATTENTION_GQA: case OP_ATTENTION_GQA_BWD: {   /* q (B, NH, T, hs), k (B, NKV, T, hs) */
        const Tensor *q = &g->t[op->in[op->kind == OP_ATTENTION_GQA ? 0 : 1]];
        const Tensor *k = &g->t[op->in[op->kind == OP_ATTENTION_GQA ? 1 : 2]];
        call_head(f, g, op->kind == OP_ATTENTION_GQA ? "gc_attention_gqa_fwd" : "gc_attention_gqa_bwd", op, NULL, 0);
        fprintf(f, ", %ldL, %ldL, %ldL, %ldL, %ldL, %d, %.9ef", q->shape[0], q->shape[1], k->shape[1], q->shape[2],
                q->shape[3], op->attr[1] != 0, op->attr[0]);
        if (op->kind == OP_ATTENTION_GQA_BWD)
            fprintf(f, ", %s", acc);
        fprintf(f, ");\n");
        return;
    }
    case OP_ATTENTION: case OP_ATTENTION_BWD: {
        long geom[12];
        op_attention_geom(g, op, geom);
        fprintf(f, "{ static const long geom[] = {");
        for (int i = 0; i < 12; i++)
            fprintf(f, "%s%ldL", i ? ", " : "", geom[i]);
        fprintf(f, "}; ");
        call_head(f, g, op->kind == OP_ATTENTION ? "gc_attention_fwd" : "gc_attention_bwd", op, NULL, 0);
        if (op->kind == OP_ATTENTION)
            fprintf(f, ", geom, %.9ef); }\n", op->attr[0]);
        else
            fprintf(f, ", geom, %.9ef, %s); }\n", op->attr[0], acc);
        return;
    }
    default:
        IR_BUG("no kernel call for %s", op_info[op->kind].name);
    }
}

/* poison_at[s]: the first planned root (arena; host region activation
 * copies) whose storage dies at step s, chained
 * through next[]; a root with an in-place child hands its storage on and is
 * not poisoned, nor are the loss and the --sample row (the host reads them
 * after the step). */
static void poison_lists(const Graph *g, int *poison_at, int *next)
{
    char *handed = xcalloc((size_t)g->nt, 1);
    for (int t = 0; t < g->nt; t++)
        if (g->t[t].inplace_of >= 0)
            handed[g->t[t].inplace_of] = 1;
    for (int s = 0; s < g->nsched; s++)
        poison_at[s] = -1;
    for (int t = g->nt - 1; t >= 0; t--) {
        const Tensor *x = &g->t[t];
        int planned = x->region == RG_ARENA || (x->region == RG_HOST && !tensor_persistent(x));   /* host copies too */
        if (x->last < 0 || x->last >= g->nsched || x->view_of >= 0 || !planned || t == g->loss ||
            t == g->sample_logits || handed[t])
            continue;
        next[t] = poison_at[x->last];
        poison_at[x->last] = t;
    }
    free(handed);
}

static int input_named(const Graph *g, const char *name)
{
    for (int i = 0; i < g->ninputs; i++)
        if (!strcmp(g->t[g->inputs[i]].name, name))
            return g->inputs[i];
    return -1;
}

static long dim_or0(const Graph *g, const char *name)
{
    long v = graph_dim(g, name);
    return v < 0 ? 0 : v;
}

/* ---------------------------------------------------------------- --profile categories */

/* "fwd matmul_bias 256x2304x768 tb", "bwd ew_gelu_bwd", "opt adamw". */
static void prof_label(char *buf, size_t n, const Graph *g, const Op *op)
{
    char ew[64];
    const char *kind = op_info[op->kind].cls == OPC_EW ? ew_name(ew, sizeof ew, g, op) : op_info[op->kind].name;
    if (op->kind != OP_MATMUL && op->kind != OP_MATMUL_BIAS && op->kind != OP_MATMUL_BIAS_GELU &&
        op->kind != OP_MATMUL_DGELU && op->kind != OP_MATMUL_DGELU_BGRAD) {
        snprintf(buf, n, "%s %s", phase_name(op->phase), kind);
        return;
    }
    long b, M, N, K;
    op_matmul_geom(g, op, &b, &M, &N, &K);
    char batch[32] = "";
    if (b > 1)
        snprintf(batch, sizeof batch, "%ld x ", b);
    snprintf(buf, n, "%s %s %s%ldx%ldx%ld%s%s", phase_name(op->phase), kind, batch, M, N, K,
             op->attr[0] != 0 ? " ta" : "", op->attr[1] != 0 ? " tb" : "");
}

typedef struct {
    int n;
    char (*label)[PROF_LABEL];
    int *calls;
    double *flops;
    int *cat;   /* per schedule position; -1 for views */
} ProfTable;

/* One category per distinct label, in order of first appearance. */
static void prof_table(const Graph *g, ProfTable *pt)
{
    pt->n = 0;
    pt->label = xcalloc((size_t)g->nsched + 1, sizeof *pt->label);
    pt->calls = xcalloc((size_t)g->nsched + 1, sizeof *pt->calls);
    pt->flops = xcalloc((size_t)g->nsched + 1, sizeof *pt->flops);
    pt->cat = xmalloc(((size_t)g->nsched + 1) * sizeof *pt->cat);
    for (int k = 0; k < g->nsched; k++) {
        const Op *op = &g->ops[g->sched[k]];
        pt->cat[k] = -1;
        if (op_info[op->kind].cls == OPC_VIEW || op_param_refresh(g, op) ||
            ((op->kind == OP_ADAMW || op->kind == OP_ADAMW_BF16) && op_update_group_len(g, k) == 0))
            continue;
        char label[PROF_LABEL];
        prof_label(label, sizeof label, g, op);
        int c = 0;
        while (c < pt->n && strcmp(pt->label[c], label))
            c++;
        if (c == pt->n)
            memcpy(pt->label[pt->n++], label, sizeof label);
        int runs = op_runs_per_step(g, op);
        pt->cat[k] = c;
        pt->calls[c] += runs;
        pt->flops[c] += runs * op_flops(g, op);
    }
}

static void prof_free(ProfTable *pt)
{
    free(pt->label);
    free(pt->calls);
    free(pt->flops);
    free(pt->cat);
}

static void emit_prof_tables(FILE *f, const Graph *g)
{
    ProfTable pt;
    prof_table(g, &pt);
    fprintf(f, "static const char *const PROF_LABEL[] = {\n");
    for (int c = 0; c < pt.n; c++)
        fprintf(f, "    \"%s\",\n", pt.label[c]);
    fprintf(f, "    \"\",\n};\nstatic const int PROF_CALLS[] = {");
    for (int c = 0; c < pt.n; c++)
        fprintf(f, "%s%d,", c % 16 ? " " : "\n    ", pt.calls[c]);
    fprintf(f, "\n    0,\n};\nstatic const double PROF_FLOPS[] = {");
    for (int c = 0; c < pt.n; c++)
        fprintf(f, "%s%.6e,", c % 8 ? " " : "\n    ", pt.flops[c]);
    fprintf(f, "\n    0,\n};\n\n");
    fprintf(f, "#define PROF_N %d\n\n", pt.n);
    prof_free(&pt);
}

/* zero3 (and zero1-3 of a bf16 program, whose masters are sharded):
 * SHARDS[i] = {first element in the llm.c layout, elements} of each
 * update's slice; rank r keeps elements [r·n/N, (r+1)·n/N) of it at element
 * first/N of its params region. With tensor parallel the layout is the
 * rank's part (its params region without ZeRO) and N its data ranks. */
static void emit_shards(FILE *f, const Graph *g)
{
    if (!g->params_sharded)
        return;
    fprintf(f, "static const long SHARDS[][2] = {\n");
    for (int k = 0; k < g->nsched; k++) {
        const Op *op = &g->ops[g->sched[k]];
        if (op->kind != OP_ADAMW && op->kind != OP_ADAMW_BF16)
            continue;
        const Tensor *p = &g->t[update_device(g, op, 0)];   /* the shard on the device */
        int n = graph_data_ranks(g);   /* the ranks a shard is 1/n of (with tp: in this rank's part) */
        fprintf(f, "    {%zuL, %ldL}, /* %s */\n", p->offset / dtype_size(p->dtype) * (size_t)n, p->numel * n, p->name);
    }
    fprintf(f, "};\n\n");
}

/* Split programs whose updates all run after the whole backward (plain
 * schedule): UPD_GRADS lists the gradient each update reads (gc_grad_ref),
 * so the trainer can take the global norm and clip before any update.
 * Returns the entry count (0: no table, the updates run inside the backward). */
static int emit_upd_grads(FILE *f, const Graph *g)
{
    if (g->nranks <= 1)
        return 0;
    int last_bwd = -1, first_opt = g->nsched, n = 0;
    for (int k = 0; k < g->nsched; k++) {
        const Op *op = &g->ops[g->sched[k]];
        if (op->phase == PH_OPT || (op->phase == PH_COMM && op->attr[2] == 4)) {
            first_opt = first_opt < k ? first_opt : k;
            if ((op->kind == OP_ADAMW || op->kind == OP_ADAMW_BF16) &&
                (g->t[update_device(g, op, 1)].dtype != DT_F32 || g->t[update_device(g, op, 1)].rank_stride))
                return 0;
        } else if (op->phase != PH_COMM || op->attr[2] != 4) {
            last_bwd = k;
        }
    }
    if (last_bwd > first_opt)
        return 0;
    fprintf(f, "static const gc_grad_ref UPD_GRADS[] = {\n");
    for (int k = 0; k < g->nsched; k++) {
        const Op *op = &g->ops[g->sched[k]];
        if (op->kind != OP_ADAMW && op->kind != OP_ADAMW_BF16)
            continue;
        const Tensor *x = &g->t[update_device(g, op, 1)];   /* on the device (before any host copy) */
        int sharded = update_reads_share(g, op) | update_is_cut(g, op) << 1;
        fprintf(f, "    {%d, %zuu, %ldL, %d}, /* %s */\n", (int)x->region, x->offset, x->numel, sharded, x->name);
        n++;
    }
    fprintf(f, "};\n\n");
    return n;
}

/* --offload opt: the bytes of the moments at the start of the host region
 * (laid out as an optstate region; passes/memplan.c), 0 when none. */
static size_t optstate_host_bytes(const Graph *g)
{
    size_t n = 0;
    for (int t = 0; t < g->nt; t++)
        if (g->t[t].view_of < 0 && g->t[t].region == RG_HOST && g->t[t].kind == TK_OPTSTATE)
            n += g->t[t].bytes;
    return n;
}

/* FNV-1a over the bytes of n objects, continuing from h. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* The part of the plan a training state depends on: every parameter and
 * optimizer-state tensor (name, region, offset, bytes), the sizes of the
 * params and optstate regions and the precision. A resumed run refuses a
 * state written by a program whose hash differs. */
static uint64_t state_hash(const Graph *g, const EmitOptions *opt)
{
    uint64_t h = fnv(0xcbf29ce484222325ull, opt->precision, strlen(opt->precision));
    size_t os = optstate_host_bytes(g) ? optstate_host_bytes(g) : g->region_bytes[RG_OPTSTATE];
    h = fnv(h, &g->region_bytes[RG_PARAMS], sizeof g->region_bytes[0]);
    h = fnv(h, &os, sizeof os);
    for (int t = 0; t < g->nt; t++) {   /* moments offloaded to the host hash as where an optstate region has them */
        const Tensor *x = &g->t[t];
        Region r = x->region == RG_HOST && x->kind == TK_OPTSTATE ? RG_OPTSTATE : x->region;
        if (x->view_of >= 0 || (r != RG_PARAMS && r != RG_OPTSTATE))
            continue;
        uint64_t rec[3] = {(uint64_t)r, (uint64_t)x->offset, (uint64_t)x->bytes};
        h = fnv(fnv(h, x->name, strlen(x->name) + 1), rec, sizeof rec);
    }
    return h;
}

/* s[0..n) as a C string literal (printable ASCII; '"', '\\' and '?' escaped). */
static void emit_cstr(FILE *f, const char *s, int n)
{
    fputc('"', f);
    for (int i = 0; i < n && s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\' || c == '?')
            fprintf(f, "\\%c", c);
        else if (c < 32 || c > 126)
            fprintf(f, "\\%03o", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* The st_* fields of parameter i's gc_param_info: where its values live in a
 * safetensors checkpoint (ir/psource.c). Graphs built without sources (tests
 * that make a Graph by hand) get the parameter's name, whole. */
static void emit_param_source(FILE *f, const Graph *g, int i)
{
    const Tensor *p = &g->t[g->params[i]];
    ParamSource whole = {.name = p->name, .rank = p->rank, .pre_len = (int)strlen(p->name)};
    for (int k = 0; !g->psrc && k < p->rank; k++)
        whole.pshape[k] = whole.sshape[k] = p->shape[k];
    const ParamSource *ps = g->psrc ? &g->psrc[i] : &whole;
    fprintf(f, ", ");
    emit_cstr(f, ps->name, ps->pre_len);
    fprintf(f, ", ");
    if (ps->layers)
        emit_cstr(f, ps->name + ps->post_off, (int)strlen(ps->name + ps->post_off));
    else
        fprintf(f, "NULL");
    fprintf(f, ", %ldL, %d, %d, {", ps->layers, ps->transposed, ps->rank);
    for (int k = 0; k < ps->rank; k++)
        fprintf(f, "%s%ldL", k ? ", " : "", ps->pshape[k]);
    fprintf(f, "%s}, {", ps->rank ? "" : "0");
    for (int k = 0; k < ps->rank; k++)
        fprintf(f, "%s%ldL", k ? ", " : "", ps->sshape[k]);
    char *where = xasprintf("%s:%d:%d", p->loc.file ? p->loc.file : g->file, p->loc.line, p->loc.col);
    fprintf(f, "%s}, ", ps->rank ? "" : "0");
    emit_cstr(f, where, (int)strlen(where));
    free(where);
    if (ps->nalts)
        fprintf(f, ", %d, ST_ALTS_%d", ps->nalts, i);
    else
        fprintf(f, ", 0, NULL");
}

/* The alternative names of each parameter that has some (`from "…" | "…"`):
 * ST_ALTS_i, pre/post pairs as gc_param_info.st_alts reads them. */
static void emit_param_alts(FILE *f, const Graph *g)
{
    for (int i = 0; g->psrc && i < g->nparams; i++) {
        const ParamSource *ps = &g->psrc[i];
        if (!ps->nalts)
            continue;
        fprintf(f, "static const char *const ST_ALTS_%d[] = {", i);
        for (int k = 0; k < ps->nalts; k++) {
            const PsrcName *a = &ps->alt[k];
            fprintf(f, "%s", k ? ", " : "");
            emit_cstr(f, a->name, a->pre_len);
            fprintf(f, ", ");
            if (ps->layers)
                emit_cstr(f, a->name + a->post_off, (int)strlen(a->name + a->post_off));
            else
                fprintf(f, "NULL");
        }
        fprintf(f, "};\n");
    }
}

void emit_program_struct(FILE *f, const Graph *g, const EmitOptions *opt)
{
    emit_prof_tables(f, g);
    static const char *const init[] = {"GC_INIT_ZEROS", "GC_INIT_ZEROS", "GC_INIT_ONES", "GC_INIT_NORMAL"};
    emit_shards(f, g);
    int nupd_grads = emit_upd_grads(f, g);
    emit_param_alts(f, g);
    fprintf(f, "static const gc_param_info PARAMS[] = {\n");
    long off = 0, scale = g->params_sharded ? graph_data_ranks(g) : 1;   /* ZeRO: a shard is 1/scale */
    for (int i = 0; i < g->nparams; i++) {
        const Tensor *p = &g->t[g->params[i]];
        const Tensor *w = p->whole >= 0 ? &g->t[p->whole] : p;   /* a shard root: the shape it stands for */
        long numel = w->numel * (p->tp_ranks ? p->tp_ranks : 1);   /* the whole parameter's */
        fprintf(f, "    {\"%s\", %ldL, %ldL, %d, {", p->name, off, numel, w->rank);
        for (int k = 0; k < w->rank; k++)
            fprintf(f, "%s%ldL", k ? ", " : "", w->shape[k] * (p->tp_ranks && k == p->tp_axis ? p->tp_ranks : 1));
        fprintf(f, "}, %s, %.9ef, %d", init[p->init], p->init_std, p->decay);
        if (g->tp)   /* this rank's part: where (without ZeRO's shards), and how it is cut */
            fprintf(f, ", %zuL, %d, %ldL, %ldL", p->offset / dtype_size(p->dtype) * (size_t)scale, p->tp_axis,
                    p->tp_ranks ? p->tp_outer : 0, p->tp_inner);
        else
            fprintf(f, ", 0L, 0, 0L, 0L");
        emit_param_source(f, g, i);
        fprintf(f, "},\n");
        off += numel;
    }
    if (!g->nparams)
        fprintf(f, "    {\"\", 0, 0, 0, {0}, 0, 0.0f, 0},\n");
    fprintf(f, "};\n\n");
    int tokens = input_named(g, "tokens"), targets = input_named(g, "targets");
    int loss_op = g->t[g->loss].producer;
    int logits = loss_op >= 0 && g->ops[loss_op].kind == OP_CROSS_ENTROPY ? g->ops[loss_op].in[0] : -1;
    double flops = 0;
    for (int o = 0; o < g->nops; o++)
        if (!g->ops[o].dead && g->ops[o].phase != PH_RECOMPUTE)   /* model FLOPs; fwd/bwd once per micro-batch */
            flops += op_flops(g, &g->ops[o]) *
                     (g->ops[o].phase == PH_OPT || g->micro_batches <= 1 ? 1 : g->micro_batches);
    size_t total = graph_device_bytes(g);
    fprintf(f, "static const gc_program PROG = {\n");
    fprintf(f, "    .graph_file = \"%s\",\n    .config = \"%s\",\n    .target = \"%s\",\n", g->file, g->config,
            opt->target);
    fprintf(f, "    .bf16 = %d,\n", !strcmp(opt->precision, "bf16"));
    fprintf(f, "    .plan_summary = \"%s schedule; params %zu + grads %zu + optstate %zu + arena %zu "
               "(lower bound %zu) = %zu bytes",
            g->schedule_name, g->region_bytes[RG_PARAMS], g->region_bytes[RG_GRADS],
            g->region_bytes[RG_OPTSTATE], g->region_bytes[RG_ARENA], g->region_lower_bound[RG_ARENA], total);
    if (g->region_bytes[RG_HOST])
        fprintf(f, " of device memory; host %zu bytes", g->region_bytes[RG_HOST]);
    fprintf(f, "\",\n");
    fprintf(f, "    .dims_text = \"");   /* the header's dims line: whatever the graph declares */
    for (int i = 0; i < g->ndims; i++)
        fprintf(f, "%s%s=%ld", i ? " " : "", g->dims[i].name, g->dims[i].value);
    fprintf(f, "\",\n");
    for (int i = 0; i < g->ndims; i++)   /* where V is declared, for the runtime's messages */
        if (!strcmp(g->dims[i].name, "V") && g->dims[i].loc.line) {
            char *where = xasprintf("%s:%d:%d", g->dims[i].loc.file ? g->dims[i].loc.file : g->file,
                                    g->dims[i].loc.line, g->dims[i].loc.col);
            fprintf(f, "    .V_where = ");
            emit_cstr(f, where, (int)strlen(where));
            fprintf(f, ",\n");
            free(where);
        }
    static const char *const dims[] = {"B", "T", "maxT", "V", "Vp", "L", "NH", "C"};
    for (int i = 0; i < 8; i++)
        fprintf(f, "    .%s = %ldL,\n", dims[i], dim_or0(g, dims[i]));
    fprintf(f, "    .nparams = %d,\n    .params = PARAMS,\n    .nparam_elems = %ldL,\n", g->nparams, off);
    fprintf(f, "    .region_bytes = {%zuu, %zuu, %zuu, %zuu, %zuu},\n", g->region_bytes[0], g->region_bytes[1],
            g->region_bytes[2], g->region_bytes[3], g->region_bytes[RG_HOST]);
    fprintf(f, "    .tokens_off = %zuu,\n    .targets_off = %zuu,\n", tokens >= 0 ? g->t[tokens].offset : 0,
            targets >= 0 ? g->t[targets].offset : 0);
    fprintf(f, "    .loss_off = %zuu,\n    .logits_off = %zuu,\n    .logits_cols = %ldL,\n", g->t[g->loss].offset,
            logits >= 0 ? g->t[logits].offset : 0,
            logits >= 0 ? g->t[logits].shape[g->t[logits].rank - 1] : 0);
    const Tensor *row = g->sample_logits >= 0 ? &g->t[g->sample_logits] : NULL;
    fprintf(f, "    .sample_off = %zuu,\n    .sample_cols = %ldL,\n", row ? row->offset : 0,
            row ? row->shape[row->rank - 1] : 0);
    fprintf(f, "    .flops_per_step = %.6e,\n", flops);
    fprintf(f, "    .device_reserve_bytes = %zuu,\n", strcmp(opt->target, "cuda") ? (size_t)0 : GC_CUDA_RESERVE_BYTES);
    fprintf(f, "    .lr = %.9ef, .beta1 = %.9ef, .beta2 = %.9ef, .eps = %.9ef, .weight_decay = %.9ef,\n", g->lr,
            g->beta1, g->beta2, g->eps, g->weight_decay);
    fprintf(f, "    .nprof = PROF_N,\n    .prof_label = PROF_LABEL,\n    .prof_calls = PROF_CALLS,\n"
               "    .prof_flops = PROF_FLOPS,\n");
    fprintf(f, "    .run = run,\n");
    if (g->nranks > 1)    /* the process group: runtime/mpi/comm_mpi.c or runtime/cuda/comm_nccl.cu */
        fprintf(f, "    .nranks = %d,\n    .split = \"%s\",\n    .comm = &gc_comm_group,\n", g->nranks,
                g->split_name);
    if (g->params_sharded)
        fprintf(f, "    .nshards = (int)(sizeof SHARDS / sizeof SHARDS[0]),\n    .shards = SHARDS,\n");
    fprintf(f, "    .state_hash = 0x%016llxull,\n", (unsigned long long)state_hash(g, opt));
    fprintf(f, "    .micro_batches = %d,\n", g->micro_batches > 1 ? g->micro_batches : 1);
    if (opt->device_peak_flops > 0)   /* gcompile --device: MFU's default peak */
        fprintf(f, "    .peak_flops = %.6e,\n    .peak_device = \"%s\",\n", opt->device_peak_flops, opt->device);
    if (nupd_grads)
        fprintf(f, "    .nupd_grads = %d,\n    .upd_grads = UPD_GRADS,\n", nupd_grads);
    if (g->nranks > 1 && strcmp(g->split_name, "dp"))   /* zero1-3, tp: each rank keeps its own moments */
        fprintf(f, "    .optstate_sharded = 1,\n");
    if (g->tp)
        fprintf(f, "    .tp = %d,\n", g->tp);
    /* (in gc_program's order: C++, the CUDA target, wants designators in declaration order) */
    if (g->copy_slots)   /* host offload (passes/offload.c) */
        fprintf(f, "    .copy_slots = %d,\n", g->copy_slots);
    if (optstate_host_bytes(g))
        fprintf(f, "    .optstate_host_bytes = %zuu,\n", optstate_host_bytes(g));
    if (g->nparams && g->t[g->params[0]].region == RG_HOST)   /* bf16 offload: the masters on the host */
        fprintf(f, "    .masters_host_off = %zuu,\n", g->t[g->params[0]].offset);
    fprintf(f, "};\n");
}

void emit_each_ew(FILE *f, const Graph *g, void (*define)(FILE *, const Graph *, const Op *))
{
    char (*seen)[64] = xcalloc(2 * (size_t)g->nops + 1, sizeof *seen);
    int nseen = 0;
    for (int k = 0; k < g->nsched; k++) {
        const Op *op = &g->ops[g->sched[k]];
        if (op_info[op->kind].cls != OPC_EW || op_off_device(g, op))   /* the host cast is no kernel */
            continue;
        char name[64];
        ew_name(name, sizeof name, g, op);
        int dup = 0;
        for (int i = 0; i < nseen && !dup; i++)
            dup = !strcmp(seen[i], name);
        if (!dup) {
            strcpy(seen[nseen++], name);
            define(f, g, op);
        }
        if (micro_acc_mask(g, op) & 1) {   /* its accumulating twin, for micro-batches > 0 */
            Op twin = *op;
            twin.acc |= 1;
            ew_name(name, sizeof name, g, &twin);
            dup = 0;
            for (int i = 0; i < nseen && !dup; i++)
                dup = !strcmp(seen[i], name);
            if (!dup) {
                strcpy(seen[nseen++], name);
                define(f, g, &twin);
            }
        }
    }
    free(seen);
}

/* "name(y, x0, x1 or NULL, n, n1, s);" */
static void emit_ew_call(FILE *f, const Graph *g, const Op *op)
{
    char name[64];
    fprintf(f, "%s(", ew_name(name, sizeof name, g, op));
    emit_tensor_ptr(f, g, op->out[0]);
    fputs(", ", f);
    emit_tensor_ptr(f, g, op->in[0]);
    fputs(", ", f);
    if (op->nin == 2)
        emit_tensor_ptr(f, g, op->in[1]);
    else
        fputs("NULL", f);
    fprintf(f, ", %ldL, %ldL, %.9ef);\n", g->t[op->out[0]].numel,
            op->nin == 2 ? g->t[op->in[1]].numel : g->t[op->out[0]].numel, op->attr[0]);
}

/* the GC_PHASE_* flag that runs op: a collective's `gate` attribute (the
 * last one in ops.def) names the part of the step it belongs to */
static const char *phase_flag(const Op *op)
{
    Phase p = op->phase;
    if (p == PH_COMM) {
        int gate = (int)op->attr[2];
        p = gate == 4 ? PH_OPT : gate == 2 ? PH_BWD : PH_FWD;
    }
    return p == PH_OPT ? "GC_PHASE_OPT" : p == PH_BWD || p == PH_RECOMPUTE ? "GC_PHASE_BWD" : "GC_PHASE_FWD";
}

/* The updates at schedule positions k .. k+n-1 as one multi-tensor call. */
static void emit_update_group(FILE *f, const Graph *g, int k, int n)
{
    fprintf(f, "{\n            const gc_adamw_tensor u[] = {\n");
    for (int i = 0; i < n; i++) {
        fputs("                ", f);
        emit_update_tensor(f, g, &g->ops[g->sched[k + i]]);
        fputc('\n', f);
    }
    fprintf(f, "            };\n");
    if (host_update(g, &g->ops[g->sched[k]])) {   /* on the host, after its gradients' copies (their norms added there) */
        fprintf(f, "            static const int after[] = {");
        for (int i = 0; i < n; i++) {
            int w = g->t[g->ops[g->sched[k + i]].in[1]].producer;
            fprintf(f, "%s%d", i ? ", " : "", w >= 0 && g->ops[w].kind == OP_OFFLOAD ? (int)g->ops[w].attr[0] : -1);
        }
        fprintf(f, "};\n            gc_host_update(u, %d, after, %d, ctx);\n        }\n", n, n);
        return;
    }
    if (!g->tp) {
        fprintf(f, "            if (ctx->gnorm_sq)\n                gc_update_sumsq(u, %d);\n", n);
    } else {   /* the global norm counts each gradient element once (norm_condition) */
        for (int i = 0; i < n; i++)
            fprintf(f, "            if (ctx->gnorm_sq%s)\n                gc_update_sumsq(u + %d, 1);\n",
                    norm_condition(g, &g->ops[g->sched[k + i]]), i);
    }
    fprintf(f, "            gc_update_apply(u, %d, ctx);\n"
               "        }\n", n);
}

void emit_step_body(FILE *f, const Graph *g, const EmitOptions *opt)
{
    int *poison_at = xmalloc((size_t)(g->nsched + 1) * sizeof(int)), *next = xmalloc((size_t)(g->nt + 1) * sizeof(int));
    if (opt->poison)
        poison_lists(g, poison_at, next);
    ProfTable pt;
    prof_table(g, &pt);
    fprintf(f, "    GC_PROF(ctx, -1);\n");
    const char *open = NULL;
    for (int k = 0; k < g->nsched; k++) {
        const Op *op = &g->ops[g->sched[k]];
        int refresh = op_param_refresh(g, op);   /* only when the host wrote the masters */
        const char *flag = refresh ? "GC_PHASE_PARAMS" : phase_flag(op);
        if (!open || strcmp(flag, open)) {
            if (open)
                fprintf(f, "    }\n");
            open = flag;
            fprintf(f, "    if (phases & %s) {\n", open);
        }
        fprintf(f, "        /* %d %s %s", k, phase_name(op->phase), op->name);
        if (op->loc.line)
            fprintf(f, " (%s:%d)", op->loc.file, op->loc.line);
        fprintf(f, " */\n        ");
        if (op_info[op->kind].cls == OPC_VIEW)
            fprintf(f, "/* view: no code */\n");
        else if ((op->kind == OP_ADAMW || op->kind == OP_ADAMW_BF16) && op_update_group_len(g, k) == 0)
            fprintf(f, "/* in the multi-tensor update above */\n");
        else if (op->kind == OP_ADAMW || op->kind == OP_ADAMW_BF16)
            emit_update_group(f, g, k, op_update_group_len(g, k));
        else if (op->kind == OP_COPY && op_off_device(g, op)) {   /* bf16 masters on the host: cast there */
            fputs("gc_host_cast_bf16((uint16_t *)", f);
            emit_tensor_ptr(f, g, op->out[0]);
            fputs(", ", f);
            emit_tensor_ptr(f, g, op->in[0]);
            fprintf(f, ", %ldL);\n", g->t[op->in[0]].numel);
        }
        else if (op_info[op->kind].cls == OPC_EW && (micro_acc_mask(g, op) & 1)) {
            Op twin = *op;
            twin.acc |= 1;
            fputs("if (ctx->micro) ", f);
            emit_ew_call(f, g, &twin);
            fputs("        else ", f);
            emit_ew_call(f, g, op);
        } else if (op_info[op->kind].cls == OPC_EW)
            emit_ew_call(f, g, op);
        else
            emit_kernel_call(f, g, op);
        if (pt.cat[k] >= 0)
            fprintf(f, "        GC_PROF(ctx, %d);\n", pt.cat[k]);
        for (int t = opt->poison ? poison_at[k] : -1; t >= 0; t = next[t])
            fprintf(f, "        gc_poison(ctx->region[%d] + %zu, %zu); /* %s */\n", (int)g->t[t].region,
                    g->t[t].offset, g->t[t].bytes, g->t[t].name);
    }
    if (open)
        fprintf(f, "    }\n");
    free(poison_at);
    free(next);
    prof_free(&pt);
}
