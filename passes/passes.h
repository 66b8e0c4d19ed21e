/* passes.h — the passes between the forward IR and code generation.
 *
 * One pass per file, one exported entry each. Analyses are named for what
 * they fill (fill_liveness) and never change the graph; transformations are
 * verbs (pass_autodiff). The driver (driver/main.c) calls them in order.
 *
 * Conventions the passes share:
 *  - A tensor whose op has bit i of `acc` set for it is accumulated into, not
 *    overwritten: several ops write it; its `producer` is the first writer.
 *  - Views (view_of >= 0) own no storage; they live at their root's offset
 *    plus view_offset. Liveness folds a view's uses into its root.
 *  - adamw updates its inputs p, m, v in place (no outputs).
 *  - Ops marked dead (fused away) are never scheduled; everything that walks
 *    g->ops rather than the schedule skips them.
 *  - The growth rule (ir/ir.h, store.c): g->t and g->ops NEVER move, so a
 *    Tensor * or Op * may be held across graph_add_tensor / graph_add_op.
 *    Everything else that grows MOVES (a tensor's consumers, g->params,
 *    g->inputs, g->dims, g->sched, a pass's side tables sized by g->nt):
 *    across a call that can grow one of those, hold an index, not a pointer,
 *    and size side tables by g->nt after the last tensor was added (or grow
 *    them). Sanitizer builds move on every xrealloc/xgrow, so a breach is an
 *    ASan use-after-free in the test that reaches it.
 */
#ifndef GC_PASSES_H
#define GC_PASSES_H

#include <stddef.h>
#include "ir.h"

/* ---------------------------------------------------------------- autodiff.c */
/* Appends the backward ops of g->loss (phase bwd) and one AdamW op per
 * parameter (phase opt); creates gradient (grads region) and moment
 * (optstate region) tensors. Exits with a located error when the graph has
 * no `minimize` statement. */
void pass_autodiff(Graph *g);

/* ---------------------------------------------------------------- fuse.c */
/* The fusion kinds, for --no-fuse=KIND (bits of a mask of kinds left off). */
enum {
    FUSE_BIAS = 1,         /* matmul + bias add (fuse.c) */
    FUSE_ATTENTION = 2,    /* causal attention (fuse_attention.c) */
    FUSE_CLASSIFIER = 4,   /* classifier matmul + cross-entropy */
    FUSE_GELU = 8,         /* bias + GELU (fuse_gelu.c) */
    FUSE_LAYERNORM = 16,   /* residual + layernorm (fuse_layernorm.c) */
    FUSE_BGRAD = 32,       /* the fc bias gradient in the dgelu matmul (fuse_bgrad.c) */
    FUSE_SWIGLU = 64,      /* silu(a) * b and its backward (fuse_swiglu.c) */
    FUSE_ALL = 127
};
/* The kind named `name` ("attention", ...), 0 when unknown. */
int fuse_kind(const char *name);
/* Fuses a forward matmul with the broadcast add of its bias (matmul_bias);
 * the add is marked dead. Run after autodiff, before precision. */
void pass_fuse(Graph *g);
/* Records one fusion of `kind` that removed `elems` tensor elements (net)
 * from the plan, for plan-text. */
void fuse_note(Graph *g, const char *kind, double elems);

/* ---------------------------------------------------------------- fuse_attention.c */
/* matmul(q,k^T) -> scale -> causal_mask -> softmax -> matmul(.,v), with the
 * permutes that split heads off qkv and merge them back, becomes one
 * attention op (and its backward one attention_bwd) that never stores the
 * T x T scores. Run after autodiff, before precision. */
void pass_fuse_attention(Graph *g);

/* ---------------------------------------------------------------- fuse_classifier.c */
/* loss = cross_entropy(matmul(x, w, tb=1)) and its backward become one
 * classifier op that walks the rows in chunks of min(B*T, rows) rows: the
 * B*T x Vp logits leave the plan. Both targets. */
void pass_fuse_classifier(Graph *g, long rows);

/* ---------------------------------------------------------------- fuse_gelu.c */
/* h = gelu(matmul_bias(x, w, b)) becomes matmul_bias_gelu (out h and pre),
 * the backward's matmul + gelu_bwd one matmul_dgelu, and the backward reads
 * a recomputed h (a gelu of phase recompute), so only pre is kept. Run after
 * pass_fuse, before precision and recompute. */
void pass_fuse_gelu(Graph *g);

/* ---------------------------------------------------------------- fuse_bgrad.c */
/* matmul_dgelu followed by the reduce_rows of its dpre into a bias gradient
 * becomes one matmul_dgelu_bgrad (cuBLASLt's DGELU_BGRAD epilogue where it
 * applies; the runtime keeps the column sum where it does not: micro-batches
 * after the first, bf16). Run after pass_fuse_gelu, before precision. */
void pass_fuse_bgrad(Graph *g);

/* ---------------------------------------------------------------- fuse_layernorm.c */
/* x = add(a, b) followed by layernorm(x, w, bias) becomes one add_layernorm
 * (out x, h, mean, rstd): one pass instead of two, no tensor removed
 * (recompute clones it as the layernorm of the kept x). Run after the
 * other fusions, before precision. */
void pass_fuse_layernorm(Graph *g);

/* ---------------------------------------------------------------- fuse_swiglu.c */

/* silu(a) * b (a SwiGLU MLP's gate) as one elementwise op, and its backward
 * as one kernel that recomputes silu(a): s = silu(a) and its gradient leave
 * the plan. Run after autodiff, before precision. */
void pass_fuse_swiglu(Graph *g);

/* ---------------------------------------------------------------- precision.c */
/* --precision bf16: bf16 activations and activation gradients, fp32 master
 * weights, parameter gradients and optimizer state, a bf16 copy of each parameter refreshed by a cast op at
 * the start of the step. Run after autodiff, before schedule. */
void pass_precision(Graph *g);

/* ---------------------------------------------------------------- microbatch.c */
/* Gradient accumulation: the graph was built with B/k rows; the step runs k
 * micro-batches (g->micro_batches = k) and one optimizer update. Scales the
 * loss seed by 1/k. No-op for k <= 1. Run after autodiff, before schedule. */
void pass_micro_batches(Graph *g, int k);

/* ---------------------------------------------------------------- split_updates.c */
/* For the fused-opt schedule: a layer-stacked parameter's gradient root is
 * split into one root per layer slice, and its AdamW update into one update
 * per slice, so each layer's gradient dies at its own update. */
void pass_split_updates(Graph *g);

/* ---------------------------------------------------------------- recompute.c */
typedef enum RecomputeChoice {
    RC_NONE,          /* keep the layer's activations for the backward */
    RC_SELECTIVE,     /* recompute its cheap ops and attention's batched matmuls */
    RC_FULL           /* keep only the layer's input; recompute the rest */
} RecomputeChoice;
/* Clones the chosen forward ops of each layer l < nlayers (choice[l]) as ops
 * of phase recompute that the backward reads instead of the originals, so
 * the originals die at their last forward use. Bit-identical results. Run
 * after autodiff, fuse, precision, split_updates; before schedule. */
void pass_recompute(Graph *g, const RecomputeChoice *choice, int nlayers);
/* 1 + the largest op->layer (0 when the graph has no layers), dead ops
 * included: a layer whose ops were all fused into ops outside the loop (a
 * one-op body `x = x + t` feeding a layernorm after the loop) is still one
 * of the layers --recompute LIST names (randgraph seed 101824). */
int graph_layers(const Graph *g);
/* 1 when op is cheap to recompute: few FLOPs per output element (elementwise,
 * normalisation, softmax, permute) or a batched (attention) matmul. */
int rc_cheap(const Graph *g, const Op *op);

/* ---------------------------------------------------------------- costs.c */
/* A device the cost model predicts for (--device NAME). */
typedef struct DeviceProfile {
    const char *name;        /* "a100-80g" */
    const char *desc;
    double mm_flops[2];      /* matmul peak FLOP/s: [0] fp32, [1] bf16 operands */
    double tf32_flops;       /* fp32 matmuls on TF32 tensor cores (the CUDA target's default) */
    double ew_flops;         /* peak FLOP/s of everything else */
    double bandwidth;        /* memory bytes/s */
    double mem_bytes;        /* device memory */
    double reserve_bytes;    /* held back when --device implies --mem */
    double launch_s;         /* fixed seconds per kernel */
    double mm_eff;           /* a large matmul's fraction of the peak */
    double mm_half;          /* a matmul dimension of this size halves the efficiency */
    /* host offload (passes/offload.c): the device's host link (bytes/s each
       way, PCIe), the host's memory bandwidth and AdamW rate (elements/s) with
       the whole host, which the devices of one host (up to devices_per_host
       ranks) share, and the fixed seconds of one copy or host update */
    double link_bw;
    double host_bw;
    double host_update_rate;
    int devices_per_host;
    double copy_s;
    int sync_copies;         /* 1: copies and host updates run at once on the compute thread (the CPU target) */
} DeviceProfile;
/* The profile called name (see device_profile_names), NULL when unknown. */
const DeviceProfile *device_profile(const char *name);
const char *device_profile_names(void);
/* Memory a plan may use on d: its memory less the reserve. */
double device_mem_budget(const DeviceProfile *d);
/* Predicted seconds of one execution of op on d: max(FLOPs / (peak * eff),
 * bytes / bandwidth) + launch; eff falls with small matmul dimensions. */
double op_cost(const Graph *g, const Op *op, const DeviceProfile *d);
typedef struct StepCost {
    double seconds;          /* predicted step time */
    double flops;            /* model FLOPs per step (micro-batches included) */
    double recompute_flops;  /* FLOPs of the recompute ops per step */
    double peak_flops;       /* the matmul peak MFU is measured against */
    double mfu;              /* flops / seconds / peak_flops */
    double norm_pass_seconds;  /* what --grad-clip adds to a program that updates inside its
                                  backward (fused-opt): a first forward and backward whose
                                  updates only add up their gradients' squares (0: the
                                  program keeps every gradient, plain schedule) */
    /* host offload: bytes copied per step each way, the seconds the copies
       and the host updates take on their streams, and what the step waits
       for them beyond its compute (seconds includes it) */
    double d2h_bytes, h2d_bytes, copy_seconds, host_update_seconds, offload_exposed;
    /* a lower bound on the step of the same plan with the optimizer
       offloaded: the compute until the first update (in the last
       micro-batch), then every update's elements on the host */
    double update_floor;
} StepCost;
/* The predicted step of the scheduled graph g on d (fwd, bwd and recompute
 * ops once per micro-batch); per_op[op id] (may be NULL) gets each op's cost.
 * An analysis: changes nothing. Needs pass_schedule. */
StepCost fill_costs(const Graph *g, const DeviceProfile *d, double *per_op);
/* ---------------------------------------------------------------- split.c */
typedef enum SplitKind { SPLIT_NONE, SPLIT_DP, SPLIT_ZERO1, SPLIT_ZERO2, SPLIT_ZERO3, SPLIT_TP, SPLIT_AUTO } SplitKind;
typedef struct SplitSpec {
    SplitKind kind;
    int ranks;        /* processes (--gpus) */
    int tp;           /* SPLIT_TP: ranks the tensor-parallel regions are cut over (a divisor of ranks) */
    SplitKind rest;   /* SPLIT_TP over fewer than `ranks`: dp, zero1 or zero2 over the ranks/tp groups */
} SplitSpec;
/* the collectives' `group` attribute (ops.def; the runtime's GC_GROUP_*) */
enum { COMM_ALL = 0, COMM_TP = 1, COMM_DP = 2 };
/* Makes op a collective of phase comm: its attributes in ops.def order
 * (ranks; avg: mean, else sum; gate: the GC_PHASE_* bit that runs it;
 * group: COMM_*). split.c, split_tp.c and autodiff's tp sums use it. */
void comm_op_attrs(Op *op, int ranks, int avg, int gate, int group);
const char *split_kind_name(SplitKind k);
/* Splits the step over s->ranks processes (one plan per rank): inserts the
 * collectives (phase comm, outputs of kind comm in the arena) and sets
 * g->nranks, g->split_name, g->comm_bytes. Nothing for one rank. Run after
 * split_updates, before schedule. */
void pass_split(Graph *g, const SplitSpec *s);
/* zero3: t read from a forward gather of parameter bytes (gf.*) gives the
 * same view of the backward gather of that slice (gb.*, made when the
 * backward had none), so that a recomputation in the backward reads the
 * weights gathered there instead of keeping the forward's alive; any other t
 * is itself. memo (nmemo entries, each -2 at first; NULL: none) keeps the
 * backward gather found or made per parameter shard for the next reads, so a
 * pass that asks for every input does not scan the ops each time. */
int split_backward_gather(Graph *g, int t, int *memo, int nmemo);
/* ---------------------------------------------------------------- split_tp.c */
/* Tensor parallel over K ranks on the forward graph: cuts the column/row
 * matmul regions (Megatron's form), their parameters and activations to one
 * rank's 1/K, adds the forward all-reduces and marks the tensors whose
 * gradients autodiff must sum over ranks; sets g->tp and g->comm_bytes.
 * Returns the regions cut (0: none, the graph unchanged). Run after
 * ir_build, before autodiff. */
int pass_split_tp(Graph *g, int K);

/* ---------------------------------------------------------------- workspace.c */
/* Adds the runtime scratch the target needs as a planned arena tensor named
 * "runtime.workspace" (live for the whole step): the CUDA target's cuBLASLt
 * and reduction workspace. Nothing for bytes == 0. */
void pass_workspace(Graph *g, size_t bytes);

/* ---------------------------------------------------------------- schedule.c */
typedef enum ScheduleKind {
    SCHED_PLAIN,      /* forward, backward, then every optimizer op */
    SCHED_FUSED_OPT   /* each parameter's update right after its last gradient write */
} ScheduleKind;
/* Fills g->sched / g->nsched and every op's step. */
void pass_schedule(Graph *g, ScheduleKind kind);

/* ---------------------------------------------------------------- offload.c */
/* What moves to the host region (--offload): the optimizer's masters,
 * moments and gradient copies, with the update run on the host (opt);
 * chosen activations between their forward and backward uses (act). */
enum { OFFLOAD_NONE = 0, OFFLOAD_OPT = 1, OFFLOAD_ACT = 2 };
/* "none", "opt", "act", "opt+act" */
const char *offload_name(int what);
/* Moves what `what` names to the host region and adds the copies (offload,
 * prefetch) and their waits (copy_wait) to the schedule; sets g->offload
 * and g->copy_slots. Run after pass_schedule and pass_workspace, before
 * fill_liveness. */
void pass_offload(Graph *g, int what);

/* ---------------------------------------------------------------- liveness.c */
/* Fills first/last (inclusive schedule steps) of every tensor. Inputs are
 * live from step 0; the loss until the last step; persistent regions
 * (params, grads, optstate) for the whole schedule. A root's interval covers
 * the uses of all of its views; a view's own interval covers its own uses. */
void fill_liveness(Graph *g);

/* ---------------------------------------------------------------- memplan.c */
/* Assigns region and offset to every tensor and fills g->region_bytes and
 * g->region_lower_bound. Persistent regions are packed in declaration order
 * (params exactly as an llm.c checkpoint). Arena: 256-byte aligned offsets,
 * in-place reuse where legal, the best of several heuristics; with
 * g->no_reuse every arena tensor gets its own storage. Needs fill_liveness. */
void pass_memplan(Graph *g);
/* The arena's lower bound alone (g->region_lower_bound[RG_ARENA]: the
 * largest bytes live at one step, as pass_memplan counts them, in-place
 * chains included), without placing anything: a plan's arena is never
 * smaller. Needs fill_liveness. For the budget search's screening. */
void fill_arena_lower_bound(Graph *g);
/* How the best-fit placer finds a buffer's gap: MEMPLAN_PLACE_AUTO (the
 * default) asks the segment tree where that is cheaper than scanning the
 * placed buffers; LIST and TREE force one way wherever it applies. Both ways
 * find the same gap, so every plan is the same under all three; the tests
 * prove it (plan_place_modes). */
enum { MEMPLAN_PLACE_AUTO, MEMPLAN_PLACE_LIST, MEMPLAN_PLACE_TREE };
extern int memplan_place_mode;

/* ---------------------------------------------------------------- plancheck.c */
/* Independent checker of a finished plan (shares no code with memplan.c):
 * no two simultaneously live tensors of a region overlap unless one is
 * inplace_of the other with parent.last == child.first; views lie inside
 * their roots; every tensor lies inside its region; recomputes each
 * region's lower bound and compares it with g->region_lower_bound. Returns
 * 0 when the plan is sound, else -1 with a one-line reason in err. */
int plan_check(const Graph *g, char *err, size_t errlen);

#endif
