/* driver.h — the gcompile driver.
 *   main.c    options and the list of passes
 *   output.c  artifacts: --emit kinds, atomic files, the budget check
 *   build.c   building the executable (cc or nvcc, linked with runtime/)
 */
#ifndef GC_DRIVER_H
#define GC_DRIVER_H

#include <stdio.h>
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
    long classifier_chunk;   /* rows per chunk of the fused classifier */
    const char *cc;
    const char *nvcc;
    const char *gpu_arch;    /* "sm_80,sm_90" */
} DriverOptions;

/* ---------------------------------------------------------------- output.c */
/* Opens PATH.tmp.XXXXXX beside path for writing; *tmp receives its name. */
FILE *atomic_open(const char *path, char **tmp);
/* Closes f and renames tmp over path (0), or removes tmp and reports (-1). */
int atomic_commit(FILE *f, char *tmp, const char *path);
/* Writes the --emit artifact to o->output (stdout when NULL or "-"). */
int driver_emit(const Graph *g, const DriverOptions *o);
/* --emit plan-diff: reads the plans o->input and o->input2 and writes the
 * comparison page; 0, or 1 after a one-line error. */
int driver_emit_diff(const DriverOptions *o);
/* 1 (after a message) when the plan exceeds --mem. */
int driver_check_budget(const Graph *g, const DriverOptions *o);
/* 1 (after located errors) when the graph lacks what the emitted trainer
 * feeds it: dims B and T, inputs tokens and targets, i32[B, T]. */
int driver_check_trainer(const Graph *g);
/* "1.50 GiB" */
const char *human_bytes(char *buf, size_t n, double bytes);

/* ---------------------------------------------------------------- build.c */
/* Emits the program, compiles and links it to o->output (default "train"). */
int driver_build(const Graph *g, const DriverOptions *o);

#endif
