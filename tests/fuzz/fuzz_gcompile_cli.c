/* fuzz_gcompile_cli.c — gcompile's command line: parse_args of
 * driver/main.c (included here with main renamed, so options added there
 * are fuzzed as they land). The input is the argument list, one per line.
 * --help and --version call exit(0): caught and counted as success. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

static jmp_buf fuzz_exit_jmp;
static _Noreturn void fuzz_exit(int code) { longjmp(fuzz_exit_jmp, code + 1); }

int gcompile_main(int argc, char **argv);
#define main gcompile_main
#define exit fuzz_exit
#include "../../driver/main.c"
#undef exit
#undef main

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *argv[64], *buf;
    int argc = fuzz_args(data, size, "gcompile", argv, 64, &buf);
    DriverOptions o = {
        .output = NULL, .schedule = SCHED_FUSED_OPT, .gpus = 1, .cc = "cc", .nvcc = "nvcc",
        .gpu_arch = "sm_80,sm_90", .emit = {.target = "cuda", .precision = "fp32"},
    };
    optind = 0;                 /* glibc: full reinitialisation of getopt */
    fuzz_quiet_begin();
    int code = setjmp(fuzz_exit_jmp);
    int rc = code ? code - 1 : parse_args(argc, argv, &o);
    fuzz_quiet_end();
    if (rc != 0 && rc != 1)
        abort();
    if (!code && rc == 0 && !o.input)
        abort();                /* success names the input */
    free(o.defines);
    free(buf);
    return 0;
}
