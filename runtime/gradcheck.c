/* gradcheck.c — --gradcheck: compares N elements of the compiled graph's
 * parameter gradients against central finite differences of its loss.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "gc_runtime_internal.h"

typedef struct {
    int param;
    long idx;          /* element within the parameter */
    double an, fd, err;
} check;

static int chosen(const check *c, long k, int param, long idx)
{
    for (long i = 0; i < k; i++)
        if (c[i].param == param && c[i].idx == idx)
            return 1;
    return 0;
}

/* N elements spread over the parameters (round robin, or evenly spaced
 * tensors when N < nparams); within a tensor the candidate with the largest
 * |gradient| of 32 random ones not chosen before, so checks are not wasted on
 * exact zeros (e.g. embedding rows of tokens absent from the batch). */
static int pick_elements(check *c, long n, const gc_program *p, const float *g, gcrt_rng *r)
{
    int np = 0, *nz = malloc((size_t)(p->nparams ? p->nparams : 1) * sizeof *nz);
    for (int i = 0; nz && i < p->nparams; i++)
        if (p->params[i].numel > 0)
            nz[np++] = i;
    if (!nz || np == 0) {
        free(nz);
        return -1;
    }
    for (long k = 0; k < n; k++) {
        int pi = nz[n >= np ? k % np : (int)(k * np / n)];
        const gc_param_info *q = &p->params[pi];
        long best = -1;
        for (int t = 0; t < 32; t++) {
            long cand = gcrt_rng_below(r, q->numel);
            if (best < 0 || (!chosen(c, k, pi, cand) &&
                             (chosen(c, k, pi, best) || fabsf(g[q->offset + cand]) > fabsf(g[q->offset + best]))))
                best = cand;
        }
        c[k] = (check){.param = pi, .idx = best};
    }
    free(nz);
    return 0;
}

/* Loss of a forward pass on the current batch with parameter element k set
 * to v. The batch is uploaded again: the plan may reuse the bytes of tokens
 * and targets once the step is done with them. */
static double loss_at(gcrt_run *st, long k, float v)
{
    gc_device_upload(st->ctx.region[GC_REGION_PARAMS] + (size_t)k * 4, &v, 4);
    st->prog->run(&st->ctx, GC_PHASE_PARAMS);
    return gcrt_run_step(st, GC_PHASE_FWD);
}

/* Central difference with the step the float parameter really took; the
 * parameter is restored bit-exactly afterwards. */
static double finite_diff(gcrt_run *st, long k, double h)
{
    float p0 = st->params[k];
    float hi = (float)(p0 + h * fmax(1.0, fabs(p0)));
    float lo = (float)(p0 - h * fmax(1.0, fabs(p0)));
    double fp = loss_at(st, k, hi), fm = loss_at(st, k, lo);
    gc_device_upload(st->ctx.region[GC_REGION_PARAMS] + (size_t)k * 4, &p0, 4);
    st->prog->run(&st->ctx, GC_PHASE_PARAMS);
    return (fp - fm) / ((double)hi - (double)lo);
}

/* The fp32 rounding noise of a central difference: each loss is rounded to
 * within |loss|*2^-24, so (f+ - f-)/2h is uncertain by about |loss|*2^-24/h. */
static double fd_noise(double loss, double h) { return fabs(loss) * 0x1p-24 / h; }

/* Relative error with a denominator floor tied to the noise: err < tol
 * exactly when |an - fd| < max(tol * max(|an|, |fd|), 10 * noise), i.e. a
 * difference passes when it is small relative to the gradient or when it is
 * within ten times the rounding noise of the finite difference. */
static double rel_error(double an, double fd, double noise, double tol)
{
    double den = fmax(fmax(fabs(an), fabs(fd)), 10.0 * noise / tol);
    return den > 0 ? fabs(an - fd) / den : 0.0;
}

static void print_check(const check *c, long k, const gc_program *p)
{
    printf("%4ld  %-20s %10ld  %14.6e  %14.6e  %9.2e\n", k + 1, p->params[c->param].name, c->idx,
           c->an, c->fd, c->err);
}

int gcrt_gradcheck(gcrt_run *st)
{
    const gc_program *p = st->prog;
    long n = st->o.gradcheck, N = p->nparam_elems;
    if (st->ctx.nranks > 1)
        return gcrt_errorf("--gradcheck: not available in a program split over ranks (compile without --gpus)");
    if (p->region_bytes[GC_REGION_GRADS] < (size_t)N * 4)
        return gcrt_errorf("--gradcheck: the grads region (%zu bytes) does not hold all %ld parameter gradients%s",
                      p->region_bytes[GC_REGION_GRADS], N,
                      p->region_bytes[GC_REGION_GRADS] ? "" :
                      " (this program updates each parameter inside the backward pass and keeps gradients"
                      " in the arena; compile with --schedule plain to check gradients)");
    float *g = malloc((size_t)(N ? N : 1) * sizeof *g);
    check *c = malloc((size_t)n * sizeof *c);
    gcrt_rng r;
    gcrt_rng_seed(&r, st->o.seed, GCRT_STREAM_GRADCHECK);
    int shard;
    long batch;
    if (gcrt_data_start(st) || gcrt_data_next(st, &shard, &batch)) {
        free(g), free(c);
        return 1;
    }
    double loss = gcrt_run_step(st, GC_PHASE_FWD | GC_PHASE_BWD);   /* every micro-batch's gradient */
    if (g && N)
        gc_device_download(g, st->ctx.region[GC_REGION_GRADS], (size_t)N * 4);   /* fp32 in both precisions */
    if (!g || !c || !isfinite(loss) || pick_elements(c, n, p, g, &r) != 0) {
        free(g), free(c);
        return gcrt_errorf("--gradcheck: %s", !isfinite(loss) ? "the loss is not finite" : "no parameters to check");
    }
    double noise = fd_noise(loss, st->o.gc_h);
    printf("gradcheck: %ld elements | loss %.6f | h %g*max(1,|p|) | passes when |analytic - numeric| < "
           "max(%g * |gradient|, 10 * fd noise = %.2g)\n", n, loss, st->o.gc_h, st->o.gc_tol, 10 * noise);
    printf("%4s  %-20s %10s  %14s  %14s  %9s\n", "#", "param", "index", "analytic", "numeric", "rel err");
    long worst = 0;
    for (long k = 0; k < n; k++) {
        long e = p->params[c[k].param].offset + c[k].idx;
        c[k].an = g[e];
        c[k].fd = finite_diff(st, e, st->o.gc_h);
        c[k].err = rel_error(c[k].an, c[k].fd, noise, st->o.gc_tol);
        if (!isnan(c[worst].err) && !(c[k].err <= c[worst].err))   /* NaN is the worst */
            worst = k;
        print_check(&c[k], k, p);
    }
    const check *w = &c[worst];
    printf("gradcheck: %ld elements, worst relative error %.3g (param %s[%ld])\n", n, w->err,
           p->params[w->param].name, w->idx);
    int rc = w->err < st->o.gc_tol ? 0
           : gcrt_errorf("gradcheck failed: worst relative error %.3g >= tolerance %g (param %s[%ld])",
                    w->err, st->o.gc_tol, p->params[w->param].name, w->idx);
    free(g), free(c);
    return rc;
}
