/* fuzz_safetensors.c — the runtime's safetensors reader (gcrt_st_load) on any
 * bytes, against a small program of two parameters: "a" [3, 4] stored
 * transposed as one tensor "w.a" [4, 3], and "b" [2, 5] layer-stacked as
 * "h.0.b" and "h.1.b" [5], or else "g.0.c" and "g.1.c" (gen_seeds writes
 * valid files of it). Any input
 * either loads or returns a one-line error that names the file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "gc_runtime_internal.h"

static const char *const fuzz_st_alts[] = {"g.", ".c"};
static const gc_param_info fuzz_st_params[] = {
    {"a", 0, 12, 2, {3, 4}, GC_INIT_ZEROS, 0.0f, 1, 0, 0, 0, 0, "w.a", NULL, 0, 1, 2, {3, 4}, {4, 3}, "f.graph:1:7",
     0, NULL},
    {"b", 12, 10, 2, {2, 5}, GC_INIT_ZEROS, 0.0f, 1, 0, 0, 0, 0, "h.", ".b", 2, 0, 1, {5}, {5}, "f.graph:2:7",
     1, fuzz_st_alts},
};

const gc_program fuzz_st_prog = {
    .graph_file = "f.graph", .config = "", .target = "cpu",
    .nparams = 2, .params = fuzz_st_params, .nparam_elems = 22,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size);
    float params[22];
    char err[1024] = "", info[512];
    if (gcrt_st_load(params, &fuzz_st_prog, path, info, sizeof info, err, sizeof err) != 0 &&
        (!err[0] || !strstr(err, path) || strchr(err, '\n')))
        abort();                    /* an error must say why, name the file, fit one line */
    (void)gcrt_st_is_file(path);
    return 0;
}
