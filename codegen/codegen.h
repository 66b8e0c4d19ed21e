/* codegen.h — everything that turns a planned graph into text.
 *
 * Sections by file:
 *   plan_json.c   --emit plan       (jansson; schema in docs/plan.md)
 *   plan_strategies.c  the plan's "strategies" section (what fusion, … did)
 *   plan_html.c   --emit plan-html, --emit plan-diff (pages from codegen/web/)
 *   plan_text.c   --emit plan-text  (regions, peak step, bytes by kind, largest tensors)
 *   plan_svg.c    --emit plan-svg   (x = step, y = offset, one rectangle per tensor)
 *   expr.c        elementwise expressions shared by the C and CUDA emitters
 *   emit_c.c      --emit c          (CPU training program)
 *   emit_cuda.c   --emit cuda       (CUDA training program)
 */
#ifndef GC_CODEGEN_H
#define GC_CODEGEN_H

#include <stddef.h>
#include <stdio.h>
#include <jansson.h>
#include "ir.h"

/* Device memory a CUDA program needs beyond its plan: the CUDA context, the
 * kernel images, the cuBLASLt handle and the kernels it loads lazily at the
 * first matmul. Stated, not measured here: the --mem check adds it to the
 * plan, the emitted program adds it to the plan before it compares with the
 * device's free memory, and prints what it measures after its first step
 * (cudaMemGetInfo); tests/gpu/run.sh records that on the first GPU lent. */
#define GC_CUDA_RESERVE_BYTES ((size_t)768 << 20)

typedef struct EmitOptions {
    const char *target;      /* "cpu" | "cuda" */
    const char *precision;   /* "fp32" | "bf16" */
    size_t budget_bytes;     /* 0 = none */
    int poison;              /* emit NaN poisoning at the end of each lifetime */
    int no_tf32;             /* cuda: fp32 matmuls on the fp32 units, not TF32 (--no-tf32) */
    /* the cost model's prediction (passes/costs.c), for plan-text; device NULL: none */
    const char *device;
    double predicted_s, predicted_mfu;
    double predicted_norm_pass_s;   /* what train --grad-clip adds per step (StepCost.norm_pass_seconds) */
    double predicted_update_floor_s;   /* StepCost.update_floor (the budget search's offload bound) */
    /* host offload (passes/offload.c): StepCost's copies and host update */
    double predicted_d2h_bytes, predicted_h2d_bytes, predicted_copy_s, predicted_host_update_s, predicted_exposed_s;
    /* --device given: its matmul peak (FLOP/s), baked into the program for
     * MFU; 0 when --device was not given */
    double device_peak_flops;
    const char *recompute_layers;   /* each layer's recompute mode (n, s, f; layer 0 first), or NULL */
} EmitOptions;

/* ---------------------------------------------------------------- plan_json.c */
/* Writes the plan as JSON. Returns 0, or -1 on a write error. */
int emit_plan_json(FILE *f, const Graph *g, const EmitOptions *opt);
/* The same plan as a new JSON object (the caller owns it). */
json_t *plan_json(const Graph *g, const EmitOptions *opt);

/* ---------------------------------------------------------------- plan_strategies.c */
/* The "strategies" array: one object per memory/speed strategy the compiler
 * considered ({name, applied, summary, saved_bytes, details}; docs/plan.md). */
json_t *plan_strategies_json(const Graph *g);

/* ---------------------------------------------------------------- plan_html.c */
/* --emit plan-html: the plan explorer page (one self-contained file).
 * Returns 0, or -1 on a write error. */
int emit_plan_html(FILE *f, const Graph *g, const EmitOptions *opt);
/* Reads and checks a plan JSON file for --emit plan-diff. NULL after writing
 * a one-line reason into err. */
json_t *plan_diff_load(const char *path, char *err, size_t errlen);
/* 0 when a and b are plans of the same graph, else -1 and a reason in err. */
int plan_diff_check(const json_t *a, const json_t *b, char *err, size_t errlen);
/* --emit plan-diff: the page comparing plan a (named name_a) with plan b. */
int emit_plan_diff(FILE *f, json_t *a, const char *name_a, json_t *b, const char *name_b);

/* ---------------------------------------------------------------- web (generated) */
/* codegen/web/ files embedded by cmake/embed.cmake: bytes, a 0, and length. */
extern const unsigned char gc_web_plan_html[], gc_web_diff_html[], gc_web_explorer_css[],
    gc_web_common_js[], gc_web_plan_js[], gc_web_diff_js[];
extern const size_t gc_web_plan_html_len, gc_web_diff_html_len, gc_web_explorer_css_len,
    gc_web_common_js_len, gc_web_plan_js_len, gc_web_diff_js_len;

/* ---------------------------------------------------------------- plan_text.c */
void emit_plan_text(FILE *f, const Graph *g, const EmitOptions *opt);
/* The step with the most live arena bytes (an in-place parent hands its
 * storage to its child), -1 when none; *peak_bytes (may be NULL) gets them. */
int plan_arena_peak(const Graph *g, size_t *peak_bytes);

/* ---------------------------------------------------------------- plan_svg.c */
void emit_plan_svg(FILE *f, const Graph *g, const EmitOptions *opt);

/* ---------------------------------------------------------------- expr.c */
/* The expression of an elementwise op's output element i, as C text valid in
 * both C and CUDA: inputs are named x0, x1 (already loaded as float), the
 * broadcast operand of add is indexed by the caller. NULL for non-EW ops. */
const char *ew_expr(const Op *op);
/* Helper functions the expressions call; the wrapper defines GC_EWFN first. */
const char *ew_preamble(void);

/* ---------------------------------------------------------------- emit_common.c */
/* Shared by both emitters. A tensor as a typed pointer expression:
 * "((float *)(ctx->region[3] + 1024))". */
void emit_tensor_ptr(FILE *f, const Graph *g, int t);
/* The runtime call of a KERNEL op: "gc_matmul(..., acc);" (no indentation). */
void emit_kernel_call(FILE *f, const Graph *g, const Op *op);
/* Name of the generated function of an EW op ("ew_add_b_acc"): one per
 * (op kind, broadcast, accumulate) combination. */
const char *ew_name(char *buf, size_t n, const Graph *g, const Op *op);
/* Whether input 1 of an EW op is broadcast (fewer elements than the output). */
int ew_broadcast(const Graph *g, const Op *op);
/* The parameter table and the static const gc_program PROG (needs a
 * function `run` declared before). */
void emit_program_struct(FILE *f, const Graph *g, const EmitOptions *opt);
/* Calls define() once per distinct elementwise function the schedule uses. */
void emit_each_ew(FILE *f, const Graph *g, void (*define)(FILE *, const Graph *, const Op *));
/* The body of run(ctx, phases): every scheduled op's call, in order, grouped
 * into `if (phases & GC_PHASE_…)` blocks (NaN poisoning with opt->poison). */
void emit_step_body(FILE *f, const Graph *g, const EmitOptions *opt);

/* ---------------------------------------------------------------- emit_c.c */
void emit_c(FILE *f, const Graph *g, const EmitOptions *opt);

/* ---------------------------------------------------------------- emit_cuda.c */
void emit_cuda(FILE *f, const Graph *g, const EmitOptions *opt);

#endif
