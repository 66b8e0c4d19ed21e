/* fuzz_ckpt.c — the runtime's checkpoint reader (gcrt_ckpt_load: an llm.c
 * model file, fp32 version 3 or bf16 version 5) on any bytes, against a
 * small program; and gcrt_output_probe on the same path. Any input either
 * loads or returns a one-line error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "gc_runtime_internal.h"

/* the program the file must match: tiny dims, 96 parameter floats */
const gc_program fuzz_ckpt_prog = {
    .graph_file = "fuzz.graph", .config = "tiny", .target = "cpu",
    .B = 2, .T = 8, .maxT = 16, .V = 32, .Vp = 64, .L = 2, .NH = 2, .C = 4, .nparam_elems = 96,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size);
    float *params = malloc((size_t)fuzz_ckpt_prog.nparam_elems * sizeof(float));
    char err[512] = "";
    if (gcrt_ckpt_load(params, &fuzz_ckpt_prog, path, err, sizeof err) != 0 && !err[0])
        abort();                    /* an error must say why */
    free(params);
    err[0] = '\0';
    if (gcrt_output_probe(path, err, sizeof err) != 0 && !err[0])
        abort();
    return 0;
}
