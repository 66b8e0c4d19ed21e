/* ir.h — the graph IR, the op table and the diagnostics every stage shares.
 *
 * Sections by file:
 *   diag.c    located errors (file:line:col: error: …, source line, caret)
 *   store.c   growth that never moves (the tensor and op arrays)
 *   graph.c   Graph construction: tensors, ops, names, views
 *   ops.c     the op table (from ops.def): shape rules, FLOPs, bytes moved
 *   build.c   AST -> IR: dims, configs, loops unrolled, shape inference
 *   psource.c where each parameter lives in a safetensors file (`from "…"`)
 *   verify.c  IR verifier (internal consistency; aborts with file:line)
 *   print.c   --emit ir and --emit summary
 */
#ifndef GC_IR_H
#define GC_IR_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#define IR_MAXRANK 8
#define IR_MAXIO 8

/* ---------------------------------------------------------------- diag.c */

typedef struct Loc {
    const char *file; /* interned, lives as long as the process */
    int line, col;    /* 1-based; line 0 = no location */
} Loc;

/* Registers a source buffer so errors can print the offending line. */
void diag_add_source(const char *file, const char *text, size_t len);
/* The text of loc's line in its registered source (without the newline;
 * *len gets its length), or NULL when the source or the line is unknown. */
const char *diag_source_line(Loc loc, size_t *len);
/* Prints "file:line:col: error: msg", the source line and a caret to stderr
 * and counts the error. Without a location it prints "gcompile: error: msg". */
void diag_error(Loc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void diag_note(Loc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "file:line:col: warning: msg" (not counted as an error); a warning of
 * one format at one place is printed once per process (the first). */
void diag_warning(Loc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int diag_count(void);
/* Forgets the registered sources and the error count; quiet: print nothing
 * (a process that compiles many graphs: the fuzzers). */
void diag_reset(int quiet);
/* Internal compiler error: prints file:line and aborts. */
#define IR_BUG(...) ir_bug(__FILE__, __LINE__, __VA_ARGS__)
void ir_bug(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
/* Allocation that never returns NULL (aborts on exhaustion). */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
/* Grows array p of *cap elements of elem bytes to hold need (doubling);
 * returns it (it may move: see the growth rule below). Under GC_MOVE_ON_GROW
 * it moves on every call that adds an element (past 16 KiB, at every
 * doubling). */
void *xgrow(void *p, int *cap, int need, size_t elem);
char *xstrdup(const char *s);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The whole of the regular file path, at most limit bytes, NUL-terminated
 * (*len excludes the NUL); NULL with a one-line reason in err. Never blocks
 * in open() (a FIFO is refused, not waited on) and never reads past limit
 * (a device like /dev/zero is refused before any read). */
char *read_regular_file(const char *path, size_t limit, size_t *len, char *err, size_t errlen);

/* ---------------------------------------------------------------- store.c */

/* THE GROWTH RULE. g->t and g->ops never move: they live in a Store, address
 * space reserved once for IR_MAX_TENSORS / IR_MAX_OPS elements, so a Tensor *
 * or Op * stays valid across graph_add_tensor / graph_add_op (and any pass
 * that calls them). Every other array that grows (a tensor's consumers,
 * g->dims, g->params, g->inputs, g->sched, side tables of passes, AST lists)
 * MOVES when it grows: across a call that can grow it, hold an index, never a
 * pointer. Sanitizer builds (GC_SANITIZE) compile xrealloc to move on every
 * call (and xgrow on every added element of a small array), so a pointer held
 * across such a growth is a use-after-free that ASan reports on the first
 * test that reaches it, not only at a capacity boundary. */
#define IR_MAX_TENSORS (1 << 22)
#define IR_MAX_OPS (1 << 22)
/* Reserves address space for max elements of elem bytes (no memory yet). */
void *store_reserve(size_t elem, size_t max);
/* Makes elements [0, need) usable; *committed counts the usable ones. */
void store_commit(void *base, size_t elem, size_t max, int *committed, int need);
/* Gives the store back (committed: the elements store_commit made usable). */
void store_release(void *base, size_t elem, size_t max, int committed);

/* ---------------------------------------------------------------- ops.c (ops.def) */

typedef enum OpKind {
#define OP(E, name, nin, nout, attrs, cls) OP_##E,
#include "ops.def"
#undef OP
    OP_COUNT
} OpKind;
#define OP_FIRST_INTERNAL OP_EMBEDDING_BWD

typedef enum OpClass { OPC_EW, OPC_VIEW, OPC_KERNEL } OpClass;

typedef struct OpInfo {
    const char *name;
    int nin, nout;      /* nout -1: given by the `parts` attribute */
    const char *attrs;  /* "ta,tb", "[shape", … */
    OpClass cls;
} OpInfo;
extern const OpInfo op_info[OP_COUNT];

/* Op kind by DSL name; -1 when unknown or internal. */
int op_lookup(const char *name);

/* ---------------------------------------------------------------- graph.c */

typedef enum DType { DT_F32, DT_BF16, DT_I32 } DType;
typedef enum TensorKind {
    TK_PARAM, TK_GRAD, TK_OPTSTATE, TK_ACTIVATION, TK_ACTGRAD, TK_INPUT,
    TK_WORKSPACE, TK_COMM
} TensorKind;
/* RG_HOST: host memory (pinned on CUDA; a separate allocation on the CPU
 * target) that the offload levers move optimizer state and activations into
 * (passes/offload.c). Its persistent roots (kinds param, grad, optstate)
 * live for the whole step, packed; the others (activation copies) are
 * planned by liveness like the arena. It is not device memory: the device
 * peak, --mem and the CUDA reserve count the other four regions only. */
typedef enum Region { RG_PARAMS, RG_GRADS, RG_OPTSTATE, RG_ARENA, RG_HOST, RG_COUNT } Region;
typedef enum Phase { PH_FWD, PH_BWD, PH_OPT, PH_RECOMPUTE, PH_COMM, PH_COUNT } Phase;
typedef enum InitKind { INIT_NONE, INIT_ZEROS, INIT_ONES, INIT_NORMAL } InitKind;

const char *dtype_name(DType);
size_t dtype_size(DType);
const char *tensor_kind_name(TensorKind);
const char *region_name(Region);
const char *phase_name(Phase);
/* 1 for a region in device memory (all but RG_HOST). */
int region_on_device(Region);

typedef struct Tensor {
    int id;
    char *name;             /* "h0.qkv", "d.h0.qkv", "m.wte" */
    DType dtype;
    int rank;
    long shape[IR_MAXRANK];
    long numel;
    size_t bytes;
    TensorKind kind;
    Region region;
    Loc loc;
    int producer;           /* op id, -1 for params/inputs/optstate */
    int *consumers, nconsumers;
    /* views: storage is view_of's, starting view_offset bytes in */
    int view_of;            /* tensor id or -1 */
    size_t view_offset;
    size_t rank_stride;     /* views: bytes further in per rank (a ZeRO shard); 0: alike on all ranks */
    /* parameters */
    InitKind init;
    double init_std;
    int decay;
    int grad;               /* id of this tensor's gradient, -1 if none */
    int opt_m, opt_v;       /* AdamW moments of a parameter, -1 if none */
    /* memory plan (filled by passes/liveness.c and passes/memplan.c) */
    int first, last;        /* inclusive schedule steps; -1 when unused */
    size_t offset;          /* bytes from the start of `region` */
    int inplace_of;         /* tensor id or -1 */
    /* tensor parallel (passes/split_tp.c). A parameter root cut over tp_ranks
       ranks (0: not cut): its axis tp_axis, of global length tp_outer·F·tp_inner,
       has F cut into tp_ranks blocks (rank r keeps indices [r·F/K, (r+1)·F/K) of
       F, for every outer and inner index); shape[tp_axis] is one rank's. */
    int tp_ranks, tp_axis;
    long tp_outer, tp_inner;
    int tp_sum_grad;        /* a forward tensor whose gradient arrives as one partial
                               sum per rank: autodiff all-reduces it (tp_sum_grad ranks) */
    int whole;              /* a ZeRO shard root (passes/split.c): the whole root it stands
                               for (its shape, numel and tp cut); -1 otherwise */
} Tensor;

typedef struct Op {
    int id;
    OpKind kind;
    char *name;             /* "h0.qkv", "bwd.h0.qkv" */
    int in[IR_MAXIO], nin;
    int out[IR_MAXIO], nout;
    double attr[4];         /* scalar attributes in ops.def order */
    long list[IR_MAXRANK];  /* the list attribute ([shape] / [perm]) */
    int nlist;
    int acc;                /* bit i: output i accumulates (+=) */
    Phase phase;
    int layer;              /* loop iteration that produced it, -1 outside */
    int step;               /* position in the schedule, -1 if unscheduled */
    int dead;               /* removed by a transformation (fusion): never scheduled */
    Loc loc;
} Op;

typedef struct Dim {
    char *name;
    long value;
    Loc loc;
} Dim;

/* Where a parameter's values live in a safetensors checkpoint (psource.c,
 * docs/checkpoints.md): the graph's `from "NAME" [transposed] [[stored
 * shape]]`, or without one the parameter's own name, whole. */
#define PSRC_MAX_ALTS 4
typedef struct PsrcName {
    char *name;             /* a template as written; "{l}" the index along axis 0 */
    int pre_len;            /* layered: the text before '{' … */
    int post_off;           /* … and where the text after '}' starts */
    Loc loc;
} PsrcName;
typedef struct ParamSource {
    char *name;             /* the template as written; "{l}" the index along axis 0 */
    Loc loc;                /* of the string (the parameter's name without a `from`) */
    int given;              /* 1: the graph says `from` */
    long layers;            /* tensors per parameter: 0 = one whole tensor; else one per
                               index of axis 0 (the template has a {…}) */
    int pre_len;            /* layered: the template's text before '{' … */
    int post_off;           /* … and where the text after '}' starts */
    PsrcName alt[PSRC_MAX_ALTS];  /* `| "…"`: tried in turn when a file lacks `name` (a tied
                               lm_head read from the embedding); saves use `name` */
    int nalts;
    int transposed;         /* the file holds each tensor's matrix transposed */
    int rank;               /* one tensor's axes (the parameter's, less axis 0 when layered) */
    long pshape[IR_MAXRANK];  /* one tensor as the parameter holds it */
    long sshape[IR_MAXRANK];  /* one tensor as the file holds it (transposed: pshape's
                                 axes swapped); smaller than pshape: the file's tensor
                                 fills the leading corner, the rest is zero */
} ParamSource;

typedef struct Graph {
    const char *file;       /* source .graph */
    const char *config;     /* selected config or "" */
    Dim *dims; int ndims;
    Tensor *t; int nt, capt;    /* never moves (store.c); capt: committed */
    Op *ops; int nops, capops;  /* never moves (store.c); capops: committed */
    int *params; int nparams;   /* tensor ids, declaration order */
    ParamSource *psrc;          /* nparams, parallel to params: each one's checkpoint tensors */
    int *inputs; int ninputs;   /* tensor ids, declaration order */
    int loss;                   /* tensor id of the minimised scalar, -1 */
    int sample_logits;          /* tensor id of the one row of logits --sample reads after a
                                   forward (the fused classifier's, passes/fuse_classifier.c);
                                   -1: none. Like the loss, live to the last step, never
                                   poisoned, never given away in place */
    /* optimizer (AdamW) */
    double lr, beta1, beta2, eps, weight_decay;
    /* schedule: op ids in execution order (filled by passes/schedule.c) */
    int *sched; int nsched;
    /* plan results (passes/memplan.c) */
    size_t region_bytes[RG_COUNT];
    size_t region_lower_bound[RG_COUNT];
    int no_reuse;               /* --no-reuse: every tensor its own storage */
    const char *schedule_name;  /* which schedule was used, for the plan */
    int micro_batches;          /* the step runs the fwd/bwd ops this many times (0, 1: once);
                                   passes/microbatch.c */
    /* parallel split (passes/split.c): the plan is one rank's */
    int nranks;                 /* processes the step is split over (1: none) */
    const char *split_name;     /* "dp", "zero1", …; "" when not split */
    double comm_bytes;          /* bytes one rank sends per step (ring algorithms) */
    int grads_persist;          /* zero1: gradients stay whole in the grads region */
    int params_sharded;         /* zero3, and zero1-3 of a bf16 program: the params region holds this
                                   rank's 1/nranks of each update's (master) parameter */
    int tp;                     /* tensor parallel over this many ranks (passes/split_tp.c); 0: none */
    char *split_report;         /* --split auto: the candidates weighed (plan-text), or NULL */
    /* host offload (passes/offload.c): what moved to the host region
       (OFFLOAD_* bits) and how many copies a step numbers (op attr slot) */
    int offload;
    int copy_slots;
    /* graph_clone copies every tensor and op name into one block (the
       budget search clones by the hundred); names inside it are not freed
       one by one: rename with graph_rename_tensor / graph_rename_op */
    char *name_block;
    size_t name_block_len;
    /* fusions that fired (passes/fuse*.c, for plan-text): per kind, how many
       and the elements of tensors they took out of the plan (net) */
    struct { const char *kind; int count; double elems; } fused[8];
    int nfused;
} Graph;

Graph *graph_new(const char *file);
void graph_free(Graph *g);
/* clone.c: a deep copy of g (tensors, ops, dims, schedule, plan). */
Graph *graph_clone(const Graph *g);
/* Adds a tensor; computes numel and bytes; returns its id. */
int graph_add_tensor(Graph *g, const char *name, DType dt, int rank, const long *shape,
                     TensorKind kind, Loc loc);
/* Adds an op with the given inputs and outputs; records producer/consumer
 * links; returns its id. */
int graph_add_op(Graph *g, OpKind kind, const char *name, const int *in, int nin,
                 const int *out, int nout, Loc loc);
/* Adds a view of base at byte offset off: named prefix + like's name, with
 * like's dtype, shape and loc, of the given kind, in base's region (a view
 * lives in its base's storage); returns its id. */
int graph_add_view(Graph *g, int base, size_t off, const char *prefix, int like, TensorKind kind);
/* Storage root of a tensor (follows view_of) and its byte offset in it. */
int graph_root(const Graph *g, int t, size_t *offset);
/* graph_root of every tensor at once, in O(tensors) however long the view
 * chains: roots[t] (and, when offsets is not NULL, *offsets[t]); both
 * caller-freed, valid until a view_of changes or a view is added. */
int *graph_roots(const Graph *g, size_t **offsets);
long graph_dim(const Graph *g, const char *name);   /* -1 when absent */
/* 1 when root t lives for the whole step at a packed offset: every root of
 * the params, grads and optstate regions, and the host region's roots of
 * kind param, grad or optstate (masters, gradient copies, moments); the
 * other roots (arena, the host region's activation copies) are planned by
 * liveness. */
int tensor_persistent(const Tensor *t);
/* The bytes a plan needs in device memory: its regions less RG_HOST. */
size_t graph_device_bytes(const Graph *g);
/* Ranks that read rows of their own: every rank, or with tensor parallel
 * one per tp group (nranks / tp); 1 when not split. ZeRO shards over them. */
int graph_data_ranks(const Graph *g);
/* Replaces the name of tensor t (op o) with name (taken, allocated). */
void graph_rename_tensor(Graph *g, int t, char *name);
void graph_rename_op(Graph *g, int o, char *name);
/* Rebuilds every tensor's consumer list from the ops. */
void graph_relink(Graph *g);
/* Incremental relinking of one op o, for a pass that rewrites a few ops
 * among many: unlink drops o from its inputs' consumer lists (call it before
 * changing o's inputs or killing o); link adds it back in id order (after
 * changing them; nothing when o is dead). On lists as graph_relink leaves
 * them, the result is what graph_relink would give. */
void graph_unlink_op(Graph *g, int o);
/* graph_add_op, then the new op moves to position pos of g->ops (the ops
 * from pos on move one up: their ids, the producers and the consumer lists
 * follow). Before scheduling only (forward passes that must keep the ops in
 * execution order); returns pos. */
int graph_insert_op(Graph *g, int pos, OpKind kind, const char *name, const int *in, int nin,
                    const int *out, int nout, Loc loc);
void graph_link_op(Graph *g, int o);

/* ---------------------------------------------------------------- ops.c */

/* Shape rule: fills the output shapes of op (its inputs must exist). On a
 * user error writes a message into err (no location) and returns -1. */
int op_infer(Graph *g, Op *op, int *nout, int rank[], long shape[][IR_MAXRANK],
             DType dt[], char *err, size_t errlen);
/* Sets view_of/view_offset of the outputs of a VIEW op. */
void op_make_views(Graph *g, const Op *op);
/* Floating-point operations of one execution of op. */
double op_flops(const Graph *g, const Op *op);
/* How often op runs per training step: once for updates, the collectives
 * of the update and the reductions of accumulated parameter gradients
 * (with micro-batches they run with the last micro-batch only); never for
 * the refresh of the bf16 copies (op_param_refresh); once per micro-batch
 * for everything else. */
int op_runs_per_step(const Graph *g, const Op *op);
/* 1 for a collective that reduces accumulated parameter gradients in a
 * program with micro-batches: the emitted step runs it with the last one. */
int op_last_micro_only(const Graph *g, const Op *op);
/* Bytes read plus written by op (its inputs and outputs, views excluded). */
double op_bytes(const Graph *g, const Op *op);
/* Kernel launches of one execution of op on the CUDA target (the launch
 * structure of runtime/cuda: 1 for a column sum, 2 above 8192 x 32 columns;
 * the sort stages of embedding_bwd, …; 1 for an op the table does not know
 * better; 0 for views).
 * ws: the planned workspace bytes (the chunking depends on it). */
int op_launches(const Graph *g, const Op *op, size_t ws);
/* 1 for the cast of a parameter master into its bf16 copy (passes/precision.c),
 * under zero1/zero2 the all-gather of the cast copy shards (gate 8,
 * passes/split.c), or the copy of the weights into their host master (an
 * offload with slot -1, passes/offload.c): they run only when the host has
 * written the masters (GC_PHASE_PARAMS), not per step, since the optimizer
 * update writes the copy. */
int op_param_refresh(const Graph *g, const Op *op);
/* the phase an op is shown under: "params" for those, else phase_name */
const char *op_phase_label(const Graph *g, const Op *op);
/* 1 for an op that runs on the host or a copy engine, not as a kernel: the
 * copies of the offload levers, their waits, an update on host tensors and
 * the host cast of bf16 masters (passes/offload.c). No launches, no device
 * bytes (the cost model prices the transfers and the host update apart). */
int op_off_device(const Graph *g, const Op *op);
/* Optimizer updates run as one multi-tensor launch per group: consecutive
 * updates (adamw, adamw_bf16) in the schedule with the same `layer` (the
 * layer slice; -1 for parameters outside the layer stack), at most
 * OP_UPDATE_GROUP_MAX to a launch. For schedule position k: the number of
 * updates in the launch that starts at k, 0 when none starts there. */
#define OP_UPDATE_GROUP_MAX 16
int op_update_group_len(const Graph *g, int k);
/* Launches and bytes moved (op_bytes) per step of the schedule, by phase;
 * parameter refreshes are not counted, an update group is one launch; the fwd, bwd and
 * recompute ops count once per micro-batch. */
void graph_step_traffic(const Graph *g, long launches[PH_COUNT], double bytes[PH_COUNT]);   /* + the trainer's
                                                     gradient-norm launch (opt) when the plan has a grads region */
/* 1 when output 0 of op may take the storage of input i (the kernel is
 * written to allow out == in[i]); never for accumulating outputs. */
int op_inplace_ok(const Graph *g, const Op *op, int i);
/* GEMM geometry of a matmul: a [.., M, K] (or [.., K, M] when ta) times b. */
void op_matmul_geom(const Graph *g, const Op *op, long *batch, long *M, long *N, long *K);
/* The runtime's geom[12] of an attention / attention_bwd op (gc_runtime.h). */
void op_attention_geom(const Graph *g, const Op *op, long geom[12]);

/* ---------------------------------------------------------------- build.c */

struct Ast;
typedef struct Define { const char *name; const char *value; } Define;
typedef struct BuildOptions {
    const char *config;         /* NULL: the graph's defaults */
    const Define *defines; int ndefines;
} BuildOptions;
/* Builds the forward graph; NULL after reporting located errors. */
Graph *ir_build(struct Ast *ast, const BuildOptions *opt);

/* ---------------------------------------------------------------- psource.c */

/* Parses a `from` template into ps (name, layers, pre_len, post_off): at
 * most one {NAME} placeholder, closed, a name inside; printable ASCII. On a
 * user error reports it at loc (the column of the offending character when
 * known) and returns -1. */
int psrc_parse(ParamSource *ps, const char *name, Loc loc);
/* Adds an alternative name (`| "…"`), parsed and checked as psrc_parse does
 * and layered as the first; -1 after a located error. Call after the first
 * name's layers are known. */
int psrc_add_alt(ParamSource *ps, const char *name, Loc loc);
/* Tensor k's name (layered: the template with k in place of {…}) into buf. */
void psrc_tensor_name(const ParamSource *ps, long k, char *buf, size_t len);
/* Located errors for two parameters whose tensors share a name; -1 if any. */
int psrc_check_unique(const Graph *g);
/* By tensor id: the ParamSource of each parameter root, NULL elsewhere
 * (g->nt entries, caller-freed). */
const ParamSource **psrc_table(const Graph *g);
/* `from="…" transposed stored=[…]` as --emit ir prints it (nothing without a `from`). */
void psrc_print(FILE *f, const ParamSource *ps);

/* ---------------------------------------------------------------- verify.c */

/* Checks internal consistency (links, shapes, views, schedule, plan fields
 * when present); aborts via IR_BUG on a violation. */
void ir_verify(const Graph *g);

/* ---------------------------------------------------------------- print.c */

void ir_print(FILE *f, const Graph *g);
void ir_print_summary(FILE *f, const Graph *g);
double graph_param_count(const Graph *g);
double graph_forward_flops(const Graph *g);

#endif
