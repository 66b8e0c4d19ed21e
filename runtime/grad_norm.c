/* grad_norm.c — the global gradient norm of a program that updates each
 * parameter inside its backward pass (fused-opt schedule): no grads region
 * holds every gradient at once, so the emitted step adds each gradient's sum
 * of squares just before the update that reads it (when ctx->gnorm_sq is
 * set: the trainer does so under --log), on the device without waiting
 * (gc_device_sumsq_add); the trainer reads the total once after the step
 * and takes the square root. The sums are in double, added tensor by tensor
 * in schedule order: the same bits every run.
 */
#include "gc_runtime.h"

void gc_update_sumsq(const gc_adamw_tensor *u, int n)
{
    for (int i = 0; i < n; i++)
        gc_device_sumsq_add(u[i].g, u[i].n);
}
