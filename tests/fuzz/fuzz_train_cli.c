/* fuzz_train_cli.c — the emitted program's command line (gcrt_parse_flags):
 * the input is the argument list, one argument per line. Every list parses,
 * or ends in --help / --version, or is a one-line error; never a crash. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "gc_runtime_internal.h"

static const gc_program prog = {
    .graph_file = "fuzz.graph", .config = "tiny", .target = "cpu",
    .B = 2, .T = 8, .maxT = 16, .V = 32, .Vp = 64, .L = 2, .NH = 2, .C = 4, .nparam_elems = 96,
    .lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *argv[64], *buf;
    int argc = fuzz_args(data, size, "train", argv, 64, &buf);
    gcrt_options o;
    memset(&o, 0, sizeof o);
    fuzz_quiet_begin();
    int rc = gcrt_parse_flags(&o, argc, argv, &prog);
    fuzz_quiet_end();
    if (rc != GCRT_PARSE_RUN && rc != GCRT_PARSE_EXIT_OK && rc != GCRT_PARSE_EXIT_ERR)
        abort();
    free(buf);
    return 0;
}
