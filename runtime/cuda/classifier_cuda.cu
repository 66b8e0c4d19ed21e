/* classifier_cuda.cu — the classifier matmul fused with cross-entropy and its
 * gradient on CUDA (gc_runtime.h, section "classifier_cpu.c /
 * classifier_cuda.cu"; the _bf16 entry point in gc_cuda.h;
 * passes/fuse_classifier.c). Compiled as part of kernels_cuda.cu (included at
 * its end), so it shares its helpers (matmul, block_row_maxsum, target_ok).
 *
 * The B*T rows go through in chunks of R rows, as the CPU op does; per chunk
 * four launches, all on gc_stream:
 *   chunk    = x_chunk w^T            cuBLASLt (n x Vp, the planned chunk)
 *   ce       a block per row: its loss (double, into rowloss) and, in place,
 *            its gradient seed/N (softmax - onehot), 0 in the padding
 *   dx_chunk (+)= chunk w             cuBLASLt (acc bit 1)
 *   dw       (+)= chunk^T x_chunk     cuBLASLt, accumulating after the first
 *            chunk (acc bit 2 for the first)
 * then one block sums the N row losses in double, in row order per thread
 * and a fixed tree: the loss's bits depend only on N. Launches per call:
 * 4 * ceil(N / R) + 1 (ir/ops.c op_launches).
 *
 * bf16 (--precision bf16): the chunk is bf16, like the unfused plan's bf16
 * logits, so the three matmuls are bf16 tensor-core GEMMs with the same
 * operand types as the unfused ops (dw: bf16 products into the fp32
 * gradient, as gc_matmul_bf16_f32), the chunk moves half the bytes of fp32
 * and the fused op rounds exactly where the unfused ops round (logits, then
 * their gradient, to bf16). The softmax, the loss and the gradient are fp32
 * arithmetic on the loaded values.
 */

enum { CLS_SUM_THREADS = 256 };

/* One block per row r of the chunk (rows r0 + r of the batch): the row's
 * loss into rowloss[r0 + r], then the row's gradient over it in place.
 * A target outside [0, V) raises the device error (target_ok) and leaves
 * the row alone. */
template <class T>
__global__ void classifier_ce_kernel(T *chunk, double *rowloss, const int32_t *targets, long r0, long Vp, long V,
                                     float scale)
{
    long r = blockIdx.x;
    T *x = chunk + r * Vp;
    MaxSum ms = block_row_maxsum(x, V);
    int32_t t = targets[r0 + r];
    if (!target_ok(t, V, r0 + r))
        return;   /* uniform across the block */
    float xt = to_f(x[t]);
    if (threadIdx.x == 0)
        rowloss[r0 + r] = (double)ms.m + log((double)ms.s) - (double)xt;
    __syncthreads();   /* every thread has read x[t] before anyone overwrites it */
    float inv = 1.0f / ms.s;
    const int W = VecN<T>::N;   /* 16-byte vectors over [0, ve), then one by one */
    long ve = vec_end<T>(Vp, al16(x));
    for (long c = (long)threadIdx.x * W; c < ve; c += (long)blockDim.x * W) {
        float v[W];
        gc_vload<W>(v, x + c);
        for (int k = 0; k < W; k++)
            v[k] = c + k < V ? scale * (expf(v[k] - ms.m) * inv - (c + k == t ? 1.0f : 0.0f)) : 0.0f;
        gc_vstore<W>(x + c, v);
    }
    for (long c = ve + threadIdx.x; c < Vp; c += blockDim.x)
        store(x + c, c < V ? scale * (expf(to_f(x[c]) - ms.m) * inv - (c == t ? 1.0f : 0.0f)) : 0.0f);
}

/* loss[0] = sum(rowloss[0..N)) / N in double; one block of CLS_SUM_THREADS */
static __global__ void classifier_loss_kernel(float *loss, const double *rowloss, long N)
{
    __shared__ double part[CLS_SUM_THREADS];
    double s = 0.0;
    for (long i = threadIdx.x; i < N; i += blockDim.x)
        s += rowloss[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int h = CLS_SUM_THREADS / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.x < h)
            part[threadIdx.x] += part[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        loss[0] = (float)(part[0] / (double)N);
}

/* tw: cuBLASLt type of the activations (x, w, chunk, dx); dw is fp32 */
template <class T>
static void classifier(float *loss, T *dx, float *dw, T *chunk, float *rowloss, const T *x, const T *w,
                       const int32_t *targets, long N, long C, long Vp, long V, long R, float seed, int acc,
                       cudaDataType_t tw)
{
    if (N <= 0 || R <= 0) {
        fill(loss, 1, 0.0f);
        return;
    }
    float scale = seed / (float)N;   /* d loss / d logit row: the seed over the mean's N */
    double *rl = (double *)(void *)rowloss;   /* N doubles (the buffer holds 2N floats) */
    for (long r0 = 0; r0 < N; r0 += R) {
        long n = N - r0 < R ? N - r0 : R;
        matmul(chunk, tw, x + r0 * C, w, tw, 1, n, Vp, C, 0, 1, 0);
        GC_LAUNCH(classifier_ce_kernel<T>, grid_for(n, 1), CE_THREADS, 0, chunk, rl, targets, r0, Vp, V, scale);
        matmul(dx + r0 * C, tw, chunk, w, tw, 1, n, C, Vp, 0, 0, (acc >> 1) & 1);
        matmul(dw, CUDA_R_32F, chunk, x + r0 * C, tw, 1, Vp, C, n, 1, 0, r0 > 0 || ((acc >> 2) & 1));
    }
    GC_LAUNCH(classifier_loss_kernel, 1, CLS_SUM_THREADS, 0, loss, rl, N);
}

void gc_classifier(gc_real *loss, gc_real *dx, gc_real *dw, gc_real *chunk, gc_real *rowloss, const gc_real *x,
                   const gc_real *w, const int32_t *targets, long N, long C, long Vp, long V, long R, float seed,
                   int acc)
{
    classifier(loss, dx, dw, chunk, rowloss, x, w, targets, N, C, Vp, V, R, seed, acc, CUDA_R_32F);
}

void gc_classifier_bf16(float *loss, gc_bf16 *dx, float *dw, gc_bf16 *chunk, float *rowloss, const gc_bf16 *x,
                        const gc_bf16 *w, const int32_t *targets, long N, long C, long Vp, long V, long R, float seed,
                        int acc)
{
    classifier(loss, dx, dw, chunk, rowloss, x, w, targets, N, C, Vp, V, R, seed, acc, CUDA_R_16BF);
}
