/* nvcc_probe.cu — the smallest program over the CUDA runtime: it references
 * every entry point of kernels_cuda.cu and device_cuda.cu (so linking it
 * proves they all resolve against cudart and cuBLASLt), then opens the device.
 * Without a GPU it must print one line, "error: no CUDA device (...)", and
 * exit 1, as an emitted training program does. */
#include <stdio.h>

#include "gc_cuda.h"

static void (*const entry_points[])(void) = {
    (void (*)(void))gc_matmul,           (void (*)(void))gc_reduce_rows,
    (void (*)(void))gc_embedding_fwd,    (void (*)(void))gc_embedding_bwd,
    (void (*)(void))gc_layernorm_fwd,    (void (*)(void))gc_layernorm_bwd,
    (void (*)(void))gc_permute,          (void (*)(void))gc_softmax_fwd,
    (void (*)(void))gc_softmax_bwd,      (void (*)(void))gc_causal_mask_fwd,
    (void (*)(void))gc_causal_mask_bwd,  (void (*)(void))gc_crossentropy_fwd,
    (void (*)(void))gc_crossentropy_bwd, (void (*)(void))gc_fill,
    (void (*)(void))gc_adamw,            (void (*)(void))gc_poison,
    (void (*)(void))gc_device_init,      (void (*)(void))gc_device_name,
    (void (*)(void))gc_device_free_bytes, (void (*)(void))gc_device_peak_flops,
    (void (*)(void))gc_device_alloc,     (void (*)(void))gc_device_free,
    (void (*)(void))gc_device_upload,    (void (*)(void))gc_device_download,
    (void (*)(void))gc_device_sync,      (void (*)(void))gc_cuda_set_workspace,
    (void (*)(void))gc_cuda_set_tf32,    (void (*)(void))gc_cuda_check_errors,
};

int main(void)
{
    char err[256];
    if (gc_device_init(err, sizeof err) != 0) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    printf("%s: %zu MiB free, %.0f TFLOP/s bf16 peak, %zu entry points\n", gc_device_name(),
           gc_device_free_bytes() >> 20, gc_device_peak_flops(1) / 1e12,
           sizeof entry_points / sizeof entry_points[0]);
    return 0;
}
