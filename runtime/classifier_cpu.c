/* classifier_cpu.c — the classifier matmul fused with cross-entropy and its
 * gradient (gc_runtime.h, section "classifier_cpu.c"; passes/fuse_classifier.c).
 *
 * The B*T rows go through in chunks of R rows: logits of the chunk (one
 * matmul into the chunk buffer), each row's loss, the row's gradient in
 * place (scale seed/N: dloss is the seed, 1 or 1/K with K micro-batches),
 * then the chunk's share of dx and of
 * dw. The full N x Vp logits never exist. Row losses and gradients use the
 * same row functions as gc_crossentropy_fwd/bwd (kernels_cpu.c), and the loss
 * is summed over rows in row order in double: the same bits as the unfused
 * ops. dw sums over rows chunk by chunk, so its rounding differs slightly.
 */
#include <stdio.h>
#include <stdlib.h>

#include "gc_runtime_internal.h"

void gc_classifier(gc_real *loss, gc_real *dx, gc_real *dw, gc_real *chunk, gc_real *rowloss, const gc_real *x,
                   const gc_real *w, const int32_t *targets, long N, long C, long Vp, long V, long R, float seed,
                   int acc)
{
    for (long i = 0; i < N; i++)
        if (targets[i] < 0 || targets[i] >= V) {
            fprintf(stderr, "error: target %d at position %ld is outside the vocabulary [0, %ld)\n",
                    (int)targets[i], i, V);
            exit(1);
        }
    if (N <= 0 || R <= 0) {
        loss[0] = 0;
        return;
    }
    gc_real scale = (gc_real)seed / (gc_real)N;   /* d loss / d logit row: the seed over the mean's N */
    double *rl = (double *)(void *)rowloss;   /* N doubles (the buffer holds 2N floats) */
    for (long r0 = 0; r0 < N; r0 += R) {
        long n = N - r0 < R ? N - r0 : R;
        gc_matmul(chunk, x + r0 * C, w, 1, n, Vp, C, 0, 1, 0);
        #pragma omp parallel for schedule(static) if (n * V >= 32768)
        for (long r = 0; r < n; r++) {
            gc_real *row = chunk + r * Vp;
            rl[r0 + r] = gcrt_ce_row_loss(row, V, targets[r0 + r]);
            gcrt_ce_row_grad(row, row, V, Vp, targets[r0 + r], scale, 0);
        }
        gc_matmul(dx + r0 * C, chunk, w, 1, n, C, Vp, 0, 0, (acc >> 1) & 1);
        gc_matmul(dw, chunk, x + r0 * C, 1, Vp, C, n, 1, 0, r0 > 0 || ((acc >> 2) & 1));
    }
    double sum = 0;
    for (long r = 0; r < N; r++)
        sum += rl[r];
    loss[0] = (gc_real)(sum / (double)N);
}
