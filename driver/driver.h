/* driver.h — the gcompile driver.
 *   main.c    options and the list of passes
 *   output.c  artifacts: --emit kinds, atomic files, the budget check
 *   build.c   building the executable (cc or nvcc, linked with runtime/)
 *   nvcache.c the cache of the CUDA runtime's compiled objects
 *   search.c  the budget search: micro-batches and per-layer recompute
 *   sweep.c   --emit budget-sweep: the search over a range of budgets
 */
#ifndef GC_DRIVER_H
#define GC_DRIVER_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include "codegen.h"
#include "ir.h"
#include "passes.h"

typedef struct DriverOptions {
    const char *input, *output;
    const char *input2;      /* --emit plan-diff: the second plan (input: the first) */
    BuildOptions build;
    Define *defines;
    EmitOptions emit;
    const char *emit_kind;   /* NULL: build an executable */
    ScheduleKind schedule;
    int no_reuse, no_fuse, gpus, verbose;
    int micro_batches;       /* --micro-batches K (0: not given) */
    int recompute;           /* --recompute: RC_NONE, RC_SELECTIVE, RC_FULL, or -1 (auto) */
    const char *rc_layers;   /* --recompute LIST: a letter per layer (n, s, f), or NULL */
    int search_exhaustive;   /* --search exhaustive */
    int offload;             /* --offload: OFFLOAD_* bits (passes/offload.c), -1: auto (chosen under --mem) */
    char *search_layers;     /* the budget search's per-layer choice (owned), or NULL */
    int bound_only;          /* lower_back stops at the arena's lower bound (no offsets, no check) */
    const char *device;      /* --device PROFILE (passes/costs.c), NULL: by target */
    long classifier_chunk;   /* rows per chunk of the fused classifier */
    const char *cc;
    const char *nvcc;
    const char *gpu_arch;    /* "sm_80,sm_90" */
    SplitSpec split;         /* --gpus N --split KIND (the candidate being planned, under auto) */
    int split_auto;          /* --split auto: candidates still being weighed (split_auto.c) */
    int tp_global_rows;      /* tp under --split auto: each group of tp ranks takes tp·B rows, so the
                                candidate trains dp's global batch (lower_front scales B) */
    const char *interconnect;   /* nvlink | pcie | ib */
    const char *mpicc;       /* C compiler of split CPU programs (default: mpicc) */
} DriverOptions;

/* ---------------------------------------------------------------- output.c */
/* How an output path is written: OUT_REPLACE when absent or a regular file
 * (a temporary beside it, renamed over it), OUT_THROUGH when an existing
 * device (/dev/null, /dev/full: written in place, never renamed over), or
 * -1 after an error (a directory, FIFO or socket is refused). */
enum { OUT_REPLACE, OUT_THROUGH };
int driver_output_kind(const char *path);
/* Opens PATH.tmp.XXXXXX beside path for writing; *tmp receives its name
 * (NULL: path is a device, opened in place). NULL after an error. */
FILE *atomic_open(const char *path, char **tmp);
/* Checks every write, flush, sync and close of f, then renames tmp over path
 * (0); or removes tmp and reports (-1): path holds the old file or the
 * complete new one. */
int atomic_commit(FILE *f, char *tmp, const char *path);
/* Closes f and removes tmp, after a failed write. */
void atomic_abandon(FILE *f, char *tmp);
/* Writes the --emit artifact to o->output (stdout when NULL or "-"). */
int driver_emit(const Graph *g, const DriverOptions *o);
/* --emit plan-diff: reads the plans o->input and o->input2 and writes the
 * comparison page; 0, or 1 after a one-line error. */
int driver_emit_diff(const DriverOptions *o);
/* Runs write(f, arg) into path, or stdout when path is NULL or "-"; a file
 * is written atomically. write returns 0, -2 after reporting its own error,
 * else writing failed. 0, or 1 after an error. */
int driver_write(const char *path, int (*write)(FILE *, const void *), const void *arg);
/* 1 (after a message) when the plan exceeds --mem. */
int driver_check_budget(const Graph *g, const DriverOptions *o);
/* 1 (after located errors) when the graph lacks what the emitted trainer
 * feeds it: dims B and T, inputs tokens and targets, i32[B, T]. */
int driver_check_trainer(const Graph *g);
/* "1.50 GiB" */
const char *human_bytes(char *buf, size_t n, double bytes);

/* ---------------------------------------------------------------- split_auto.c */
/* --split auto: plans the candidate splits (each with the budget search's
 * levers under --mem) in order of a lower bound on their step time, skips
 * those whose bound cannot beat the best found, and returns the chosen
 * plan with the candidates in g->split_report, o->split set to it. NULL
 * after an error (none fits). */
Graph *driver_split_auto(struct Ast *ast, DriverOptions *o);

/* ---------------------------------------------------------------- main.c */
/* "24GiB" / "80GB" / "512MiB" / "1000" -> bytes; -1 when malformed */
long long driver_parse_size(const char *s);
/* The passes from the AST to a checked plan with the levers of o; NULL
 * after reported errors. */
Graph *driver_lower(struct Ast *ast, const DriverOptions *o);
/* driver_lower in two halves: up to the parallel split (the levers' common
 * prefix), then recomputation to the checked plan on that graph (freed and
 * NULL after reported errors). */
Graph *driver_lower_front(struct Ast *ast, const DriverOptions *o);
Graph *driver_lower_back(Graph *g, const DriverOptions *o);

/* ---------------------------------------------------------------- search.c */
/* --mem with --recompute auto and no --micro-batches: the micro-batch count
 * and per-layer recompute modes with the least predicted step time whose
 * real plan fits (docs/budget.md); sets o->search_layers and
 * o->emit.recompute_layers. NULL after an error (nothing fits: the
 * smallest budget found and its largest part), except under --split auto
 * (o->split_auto), where nothing fitting returns the smallest plan found for
 * driver_split_auto to mark as not fitting. With a split (--gpus N) it
 * searches that split's per-rank plans. */
Graph *driver_search(struct Ast *ast, DriverOptions *o);
/* The search, reusable over budgets (--emit budget-sweep): the levels are
 * lowered once; each run weighs one budget; plans and bounds made by one
 * run serve the next. */
typedef struct Search Search;
typedef struct SearchPick {
    int fits;              /* 1: the least predicted time that fits; 0: nothing fits, the smallest plan */
    int K;                 /* micro-batches */
    const char *modes;     /* a letter per layer (n, s, f); until the next run */
    int offload;           /* OFFLOAD_* bits: what moved to host memory */
    size_t peak;           /* planned bytes (+ CUDA reserve) */
    double seconds;        /* predicted step time */
    const Graph *graph;    /* the plan when this run made it, else NULL */
} SearchPick;
/* NULL after reported errors. */
Search *search_open(struct Ast *ast, const DriverOptions *o);
/* 0: *p fits budget; 1: nothing fits (*p: the smallest plan); -1 after an error. */
int search_run(Search *s, size_t budget, SearchPick *p);
/* The last run's pick's graph, now the caller's (NULL when an earlier run made it). */
Graph *search_take(Search *s);
void search_close(Search *s);
/* ---------------------------------------------------------------- sweep.c */
/* --emit budget-sweep: the search at 20 budgets from the smallest plan to
 * the unconstrained one; text, or SVG when o->output ends in .svg. 0, or 1
 * after an error. */
int driver_budget_sweep(struct Ast *ast, DriverOptions *o);

/* The cost model's step time and MFU on --device (default: by target), into
 * o->emit for the reports. */
void driver_predict(const Graph *g, DriverOptions *o);
/* The choice of a --recompute LIST letter: n, s, f. */
RecomputeChoice driver_rc_choice(char letter);

/* ---------------------------------------------------------------- build.c */
/* Emits the program, compiles and links it to o->output (default "train"). */
int driver_build(const Graph *g, const DriverOptions *o);
/* Runs argv (NULL-terminated), printing it under verbose, its stderr into
 * the file err (NULL: gcompile's); its exit status or -1. */
int driver_run(char **argv, const char *err, int verbose);

/* ---------------------------------------------------------------- nvcache.c */
/* The cache of the CUDA runtime's objects: one `nvcc -c` per runtime source
 * and set of flags, reused by every later build. */
typedef struct NvCache {
    char *dir;          /* the cache directory */
    uint64_t key;       /* the hash of nvcc, its version and the runtime's files */
    int verbose;
    time_t opened;      /* objects this build used have this mtime or later */
} NvCache;
/* Opens the cache: $GCOMPILE_CACHE ("" or "off": no cache), else
 * $XDG_CACHE_HOME/gcompile, else $HOME/.cache/gcompile, created if missing
 * (0755); hashes `nvcc --version` and every file of rtdir and rtdir/cuda.
 * 0, or -1 (with a note under verbose) when off or not creatable. */
int nvcache_open(NvCache *c, const char *nvcc, const char *rtdir, int verbose);
/* Closes the cache, after removing the least recently used objects (by
 * mtime: a hit touches its object) while the objects add up to more than
 * $GCOMPILE_CACHE_MAX (a size as --mem takes; default 1 GiB; "off": no
 * limit), never one this build used. */
void nvcache_close(NvCache *c);
/* The object of `flags... -c src` (flags NULL-terminated, flags[0] nvcc) into
 * *obj (the caller frees): a cached one, or compiled now into a temporary in
 * the cache and renamed into place (a concurrent gcompile compiling the same
 * object is waited for). 0; 1 when nvcc failed (its errors shown); -1 when
 * the cache cannot be written (a note under verbose). */
int nvcache_object(const NvCache *c, char **flags, const char *src, char **obj);

#endif
