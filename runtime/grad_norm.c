/* grad_norm.c — the global gradient norm of a program that updates each
 * parameter inside its backward pass (fused-opt schedule): no grads region
 * holds every gradient at once, so the emitted step adds each gradient's sum
 * of squares just before the update that reads it (when ctx->gnorm_sq is
 * set: the trainer does so under --log and --grad-clip), on the device
 * without waiting (gc_device_sumsq_add); the trainer reads the total once
 * after the step and takes the square root. The sums are in double, added
 * tensor by tensor in schedule order: the same bits every run.
 *
 * Clipping by that norm (--grad-clip) runs the step twice (LOMO's norm
 * pass): first with ctx->norm_pass set, where the updates only add up the
 * squares, then, with the norm known, with ctx->grad_scale = the clipping
 * factor, where each update scales its gradient and applies AdamW. The
 * kernels are deterministic, so both passes see the same gradients.
 */
#include "gc_runtime.h"

void gc_update_sumsq(const gc_adamw_tensor *u, int n)
{
    for (int i = 0; i < n; i++)
        gc_device_sumsq_add(u[i].g, u[i].n);
}

void gc_update_apply(const gc_adamw_tensor *u, int n, const gc_ctx *ctx)
{
    if (ctx->norm_pass)
        return;
    if (ctx->grad_scale != 0.0f && ctx->grad_scale != 1.0f)
        for (int i = 0; i < n; i++)
            gc_device_scale((float *)u[i].g, u[i].n, ctx->grad_scale);
    gc_adamw_multi(u, n, ctx->lr, ctx->beta1, ctx->beta2, ctx->eps, ctx->t);
}
