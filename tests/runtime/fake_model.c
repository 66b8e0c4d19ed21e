/* fake_model.c — a hand-written program that follows the gc_program contract,
 * standing in for gcompile's output in the runtime tests.
 *
 * A bigram model small enough to differentiate by hand:
 *   x = wte[tok]            (BT, C)     embedding
 *   h = x * gain            (BT, C)     per-channel gain (init ones)
 *   logits = h @ proj + bias (BT, Vp)   columns V..Vp-1 are padding (= 100)
 *   loss = mean cross-entropy over BT rows
 * Forward, backward and AdamW are naive loops in this file; nothing here
 * needs kernels_cpu.c. Build switches:
 *   -DFAKE_WRONG_GRAD  the embedding backward overwrites instead of
 *                      accumulating (a classic bug): gradcheck must fail.
 *   -DFAKE_V=N         vocabulary size (default 256, byte-level).
 */
#include <math.h>
#include <string.h>

#include "gc_runtime.h"

#ifndef FAKE_V
#define FAKE_V 256
#endif

enum { B = 4, T = 64, V = FAKE_V, VP = FAKE_V + 8, C = 8, BT = B * T };

/* params, in elements: wte [V,C], gain [C], proj [C,V], bias [V] */
enum { P_WTE = 0, P_GAIN = P_WTE + V * C, P_PROJ = P_GAIN + C, P_BIAS = P_PROJ + C * V, NPARAM = P_BIAS + V };

/* arena, in bytes */
enum {
    A_TOKENS = 0,                      /* int32 (BT) */
    A_TARGETS = A_TOKENS + BT * 4,     /* int32 (BT) */
    A_LOSS = A_TARGETS + BT * 4,       /* float, padded to 256 bytes */
    A_X = A_LOSS + 256,                /* (BT, C) */
    A_H = A_X + BT * C * 4,            /* (BT, C) */
    A_LOGITS = A_H + BT * C * 4,       /* (BT, VP) */
    A_DLOGITS = A_LOGITS + BT * VP * 4, /* (BT, V) */
    A_DH = A_DLOGITS + BT * V * 4,     /* (BT, C) */
    A_END = A_DH + BT * C * 4
};

#define ARENA(ctx, type, off) ((type *)((ctx)->region[GC_REGION_ARENA] + (off)))
#define PARAM(ctx, off) ((float *)(ctx)->region[GC_REGION_PARAMS] + (off))
#define GRAD(ctx, off) ((float *)(ctx)->region[GC_REGION_GRADS] + (off))

static void forward(gc_ctx *ctx)
{
    const int32_t *tok = ARENA(ctx, int32_t, A_TOKENS), *tgt = ARENA(ctx, int32_t, A_TARGETS);
    float *x = ARENA(ctx, float, A_X), *h = ARENA(ctx, float, A_H), *lg = ARENA(ctx, float, A_LOGITS);
    const float *wte = PARAM(ctx, P_WTE), *gain = PARAM(ctx, P_GAIN);
    const float *proj = PARAM(ctx, P_PROJ), *bias = PARAM(ctx, P_BIAS);
    double sum = 0;
    for (int r = 0; r < BT; r++) {
        float *l = lg + (long)r * VP;
        for (int c = 0; c < C; c++) {
            x[r * C + c] = wte[tok[r] * C + c];
            h[r * C + c] = x[r * C + c] * gain[c];
        }
        float mx = -INFINITY;
        for (int v = 0; v < V; v++) {
            float a = bias[v];
            for (int c = 0; c < C; c++)
                a += h[r * C + c] * proj[c * V + v];
            l[v] = a;
            mx = a > mx ? a : mx;
        }
        for (int v = V; v < VP; v++)
            l[v] = 100.0f;   /* padding must never be read as a logit */
        float se = 0;
        for (int v = 0; v < V; v++)
            se += expf(l[v] - mx);
        sum += (double)(mx + logf(se) - l[tgt[r]]);
    }
    *ARENA(ctx, float, A_LOSS) = (float)(sum / BT);
}

static void backward(gc_ctx *ctx)
{
    const int32_t *tok = ARENA(ctx, int32_t, A_TOKENS), *tgt = ARENA(ctx, int32_t, A_TARGETS);
    const float *x = ARENA(ctx, float, A_X), *h = ARENA(ctx, float, A_H), *lg = ARENA(ctx, float, A_LOGITS);
    float *dl = ARENA(ctx, float, A_DLOGITS), *dh = ARENA(ctx, float, A_DH);
    const float *gain = PARAM(ctx, P_GAIN), *proj = PARAM(ctx, P_PROJ);
    float *dwte = GRAD(ctx, P_WTE), *dgain = GRAD(ctx, P_GAIN);
    float *dproj = GRAD(ctx, P_PROJ), *dbias = GRAD(ctx, P_BIAS);
    memset(GRAD(ctx, 0), 0, NPARAM * sizeof(float));
    for (int r = 0; r < BT; r++) {   /* dlogits = (softmax - onehot) / BT */
        const float *l = lg + (long)r * VP;
        float mx = -INFINITY, se = 0;
        for (int v = 0; v < V; v++)
            mx = l[v] > mx ? l[v] : mx;
        for (int v = 0; v < V; v++)
            se += expf(l[v] - mx);
        for (int v = 0; v < V; v++)
            dl[r * V + v] = (expf(l[v] - mx) / se - (v == tgt[r])) / BT;
    }
    for (int r = 0; r < BT; r++)
        for (int v = 0; v < V; v++) {
            dbias[v] += dl[r * V + v];
            for (int c = 0; c < C; c++)
                dproj[c * V + v] += h[r * C + c] * dl[r * V + v];
        }
    for (int r = 0; r < BT; r++)
        for (int c = 0; c < C; c++) {
            float a = 0;
            for (int v = 0; v < V; v++)
                a += dl[r * V + v] * proj[c * V + v];
            dh[r * C + c] = a;
            dgain[c] += a * x[r * C + c];
#ifdef FAKE_WRONG_GRAD
            dwte[tok[r] * C + c] = a * gain[c];
#else
            dwte[tok[r] * C + c] += a * gain[c];
#endif
        }
}

static void adamw_range(gc_ctx *ctx, long off, long n, int decay)
{
    float *p = PARAM(ctx, off), *g = GRAD(ctx, off);
    float *m = (float *)ctx->region[GC_REGION_OPTSTATE] + off, *v = m + NPARAM;
    float b1c = 1.0f - powf(ctx->beta1, (float)ctx->t), b2c = 1.0f - powf(ctx->beta2, (float)ctx->t);
    float wd = decay ? ctx->weight_decay : 0.0f;
    for (long i = 0; i < n; i++) {
        m[i] = ctx->beta1 * m[i] + (1.0f - ctx->beta1) * g[i];
        v[i] = ctx->beta2 * v[i] + (1.0f - ctx->beta2) * g[i] * g[i];
        float mh = m[i] / b1c, vh = v[i] / b2c;
        p[i] -= ctx->lr * (mh / (sqrtf(vh) + ctx->eps) + wd * p[i]);
    }
}

static const gc_param_info params[] = {
    {.name = "wte", .offset = P_WTE, .numel = V * C, .rank = 2, .shape = {V, C}, .init = GC_INIT_NORMAL, .std = 1.0f, .decay = 1},
    {.name = "gain", .offset = P_GAIN, .numel = C, .rank = 1, .shape = {C}, .init = GC_INIT_ONES, .decay = 0},
    {.name = "proj", .offset = P_PROJ, .numel = C * V, .rank = 2, .shape = {C, V}, .init = GC_INIT_NORMAL, .std = 0.3f, .decay = 1},
    {.name = "bias", .offset = P_BIAS, .numel = V, .rank = 1, .shape = {V}, .init = GC_INIT_ZEROS, .decay = 0},
};

static void run(gc_ctx *ctx, int phases)
{
    if (phases & GC_PHASE_FWD)
        forward(ctx);
    if (phases & GC_PHASE_BWD)
        backward(ctx);
    if (phases & GC_PHASE_OPT)
        for (int i = 0; i < 4; i++)
            adamw_range(ctx, params[i].offset, params[i].numel, params[i].decay);
}

static const gc_program PROG = {
    .graph_file = "tests/runtime/fake_model.c",
    .config = "fake",
    .target = "cpu",
    .plan_summary = "hand-written: params 4 tensors, arena fixed offsets",
    .B = B, .T = T, .maxT = T, .V = V, .Vp = VP, .L = 0, .NH = 0, .C = C,
    .nparams = 4,
    .params = params,
    .nparam_elems = NPARAM,
    .region_bytes = {NPARAM * 4, NPARAM * 4, 2 * NPARAM * 4, A_END},
    .tokens_off = A_TOKENS, .targets_off = A_TARGETS, .loss_off = A_LOSS, .logits_off = A_LOGITS,
    .logits_cols = VP,
    .flops_per_step = 6.0 * BT * C * V,
    .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
    .run = run,
};

int main(int argc, char **argv) { return gc_main(argc, argv, &PROG); }
