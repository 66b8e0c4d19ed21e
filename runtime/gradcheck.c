/* gradcheck.c — --gradcheck: checks the compiled graph's parameter gradients
 * against the derivative of its loss along random directions.
 *
 * A check of parameter tensor P takes a unit direction u over all of P's
 * elements (P's gradient, or a random Gaussian one) and compares the
 * analytic directional derivative g·u (the program's gradient, summed in
 * double) with central differences of the loss along u at steps s and s/2,
 * Richardson-extrapolated so that the s² term of the central difference
 * cancels. The step is chosen so that the loss moves by a fixed fraction
 * (--gradcheck-h) of max(1, |loss|): the signal is then the same large
 * multiple of the loss's float rounding noise for every tensor, however
 * small its single gradient elements are. (Element-wise differences of a
 * float loss are noise-bound: an element's gradient of 1e-4 moves the loss
 * less than its rounding.) A gradient that is 1 % off in P is 1 % off along
 * every direction in P, so each check of P sees it, five times the default
 * tolerance of 0.2 %.
 *
 * The float program is what runs: the loss keeps its float rounding, about
 * |loss|·2^-24 per evaluation and a few times that through the forward; with
 * the default step that is ~1e-5 of the loss change. The s² term the
 * extrapolation removed is printed as "spread"; where it exceeds the
 * tolerance the step shrinks (check_param).
 *
 * A bf16 program's forward rounds every activation to 8 bits of mantissa:
 * far above this tolerance; check the fp32 build of the same graph.
 *
 * Test hook: GC_GRADCHECK_SKEW=NAME[:FACTOR] in the environment multiplies
 * parameter NAME's analytic gradient by FACTOR (default 1.01) before the
 * comparison; the tests use it to show that a 1 % error fails.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gc_runtime_internal.h"

static long forwards;   /* forward passes of this check run (printed) */

typedef struct {
    int param;
    double an, fd, spread, err, step;
} check;

/* The loss of a forward pass on the current batch with the params region
 * set to q (nparam_elems floats); gcrt_run_step uploads the batch again, as
 * the plan may reuse the bytes of tokens and targets once a step is done
 * with them. */
static double loss_with(gcrt_run *st, const float *q)
{
    gcrt_params_put(st, q);
    return gcrt_run_step(st, GC_PHASE_FWD);
}

/* Central difference along u (n elements from element off) at step s:
 * returns the numeric derivative and sets *an to the analytic one along the
 * step each float element really took ((p+ - p-) / 2s, not s·u). */
static double central(gcrt_run *st, float *q, const float *g, long off, const double *u, long n, double s,
                      double *an)
{
    const float *p = st->params;
    double a = 0;
    for (long i = 0; i < n; i++)
        q[off + i] = (float)(p[off + i] + s * u[i]);
    double fp = loss_with(st, q);
    for (long i = 0; i < n; i++) {
        float hi = q[off + i];
        q[off + i] = (float)(p[off + i] - s * u[i]);
        a += (double)g[off + i] * ((double)hi - (double)q[off + i]);
    }
    double fm = loss_with(st, q);
    for (long i = 0; i < n; i++)
        q[off + i] = p[off + i];
    *an = a / (2 * s);
    return (fp - fm) / (2 * s);
}

/* One directional check of parameter pi: along its gradient (along_g) or a
 * random direction. */
static void check_param(gcrt_run *st, check *c, int pi, int along_g, float *q, const float *g, double loss,
                        gcrt_rng *r)
{
    const gc_param_info *P = &st->prog->params[pi];
    long n = P->numel, off = P->offset;
    double *u = malloc((size_t)n * sizeof *u), norm = 0, gn = 0, d0 = 0, pn = 0;
    if (!u) {
        *c = (check){.param = pi, .err = NAN};
        return;
    }
    for (long i = 0; i < n; i++)
        gn += (double)g[off + i] * g[off + i];
    along_g = along_g && gn > 0;
    for (long i = 0; i < n; i++) {
        u[i] = along_g ? g[off + i] : gcrt_rng_normal(r);
        norm += u[i] * u[i];
        pn += (double)st->params[off + i] * st->params[off + i];
    }
    norm = sqrt(norm);
    for (long i = 0; i < n; i++) {
        u[i] /= norm;
        d0 += (double)g[off + i] * u[i];
    }
    /* the step: the loss moves by h·max(1,|loss|) along u, at most a step
       of the parameter's own size (its norm; 1 per element for a tensor
       of zeros), a hundredth of that along a random direction (along which
       the loss bends sooner, and where a step of 1/10 crossed a relu's kink
       in tests/train/graphs/rules_issue22.graph). Where the s² term that the extrapolation from (s, s/2)
       removes is above the tolerance (the loss is not smooth enough at that
       scale for the s^4 rest to be negligible), the step
       shrinks by 4 (at most 3 times), toward where the rounding noise, which
       grows as the step shrinks, dominates: that check is then as strict as
       its noise floor allows. */
    double target = st->o.gc_h * fmax(1.0, fabs(loss));
    double cap = (pn > 0 ? sqrt(pn) : sqrt((double)n)) * (along_g ? 1.0 : 0.01);
    double s = fabs(d0) > 0 ? fmin(target / fabs(d0), cap) : cap;
    for (int tries = 0;; tries++, s /= 4) {
        double an[2], e[2];
        for (int k = 0; k < 2; k++)
            e[k] = central(st, q, g, off, u, n, s / (double)(1 << k), &an[k]) - an[k];   /* c·(s/2^k)² + O(s^4) */
        double rich = (4 * e[1] - e[0]) / 3;
        /* the floor: 30 times one rounding of the loss over the finer
           difference's span 2·s/2 (the forward's own rounding is a few of
           those: measured up to ~5 on the docs/grammar.md example) */
        double noise = fabs(loss) * 0x1p-24 / s;
        double den = fmax(fmax(fabs(an[1]), fabs(an[1] + rich)), 30 * noise / st->o.gc_tol);
        c->param = pi;
        c->step = s;
        c->an = an[1];
        c->fd = an[1] + rich;
        c->spread = fabs(e[1] - rich);   /* the s² term the extrapolation removed at s/2 */
        c->err = den > 0 ? fabs(rich) / den : 0.0;
        forwards += 4;
        if (c->spread <= st->o.gc_tol * den || tries == 3 || !isfinite(c->err))
            break;
    }
    free(u);
}

/* GC_GRADCHECK_SKEW=NAME[:FACTOR]: the test hook of the header. 0, or -1
 * when it names no parameter. */
static int apply_skew(const gc_program *p, float *g)
{
    const char *env = getenv("GC_GRADCHECK_SKEW");
    if (!env || !*env)
        return 0;
    const char *colon = strchr(env, ':');
    size_t len = colon ? (size_t)(colon - env) : strlen(env);
    double f = colon ? atof(colon + 1) : 1.01;
    for (int i = 0; i < p->nparams; i++)
        if (strlen(p->params[i].name) == len && !strncmp(p->params[i].name, env, len)) {
            for (long k = 0; k < p->params[i].numel; k++)
                g[p->params[i].offset + k] = (float)(g[p->params[i].offset + k] * f);
            printf("gradcheck: GC_GRADCHECK_SKEW: the gradient of %s scaled by %g (a test hook)\n",
                   p->params[i].name, f);
            return 0;
        }
    return -1;
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
    int np = 0, *nz = malloc((size_t)(p->nparams ? p->nparams : 1) * sizeof *nz);
    for (int i = 0; nz && i < p->nparams; i++)
        if (p->params[i].numel > 0)
            nz[np++] = i;
    if (n < np)     /* every parameter tensor along its gradient; then random directions, alternating */
        n = np;
    float *g = malloc((size_t)(N ? N : 1) * sizeof *g), *q = malloc((size_t)(N ? N : 1) * sizeof *q);
    check *c = malloc((size_t)(n ? n : 1) * sizeof *c);
    gcrt_rng r;
    gcrt_rng_seed(&r, st->o.seed, GCRT_STREAM_GRADCHECK);
    int shard;
    long batch;
    if (!nz || !g || !q || !c || gcrt_data_start(st) || gcrt_data_next(st, &shard, &batch)) {
        free(nz), free(g), free(q), free(c);
        return !nz || !g || !q || !c ? gcrt_errorf("--gradcheck: out of host memory") : 1;
    }
    double loss = gcrt_run_step(st, GC_PHASE_FWD | GC_PHASE_BWD);   /* every micro-batch's gradient */
    if (N)
        gc_device_download(g, st->ctx.region[GC_REGION_GRADS], (size_t)N * 4);   /* fp32 in both precisions */
    if (!isfinite(loss) || np == 0) {
        free(nz), free(g), free(q), free(c);
        return gcrt_errorf("--gradcheck: %s", !isfinite(loss) ? "the loss is not finite" : "no parameters to check");
    }
    if (apply_skew(p, g)) {
        free(nz), free(g), free(q), free(c);
        return gcrt_errorf("--gradcheck: GC_GRADCHECK_SKEW=%s names no parameter", getenv("GC_GRADCHECK_SKEW"));
    }
    memcpy(q, st->params, (size_t)N * sizeof *q);
    forwards = 0;
    printf("gradcheck: %ld directions | loss %.6f | each step moves the loss by %g*max(1,|loss|) | passes when "
           "|analytic - numeric| < %g * |derivative| (or 30x the loss's rounding over the step)\n", n, loss, st->o.gc_h,
           st->o.gc_tol);
    printf("%4s  %-20s %-6s %10s  %14s  %14s  %9s  %9s\n", "#", "param", "along", "step", "analytic", "numeric",
           "spread", "rel err");
    long worst = 0;
    for (long k = 0; k < n; k++) {
        check_param(st, &c[k], nz[k % np], (k / np) % 2 == 0, q, g, loss, &r);
        if (!isnan(c[worst].err) && !(c[k].err <= c[worst].err))   /* NaN is the worst */
            worst = k;
        printf("%4ld  %-20s %-6s %10.3e  %14.6e  %14.6e  %9.2e  %9.2e\n", k + 1, p->params[c[k].param].name,
               (k / np) % 2 == 0 ? "grad" : "random", c[k].step, c[k].an, c[k].fd, c[k].spread, c[k].err);
    }
    gcrt_params_put(st, st->params);   /* restored bit-exactly */
    const check *w = &c[worst];
    printf("gradcheck: %ld forward passes\n", forwards);
    printf("gradcheck: %ld directions, worst relative error %.3g (param %s)\n", n, w->err, p->params[w->param].name);
    int rc = w->err < st->o.gc_tol ? 0
           : gcrt_errorf("gradcheck failed: worst relative error %.3g >= tolerance %g (param %s)", w->err,
                    st->o.gc_tol, p->params[w->param].name);
    free(nz), free(g), free(q), free(c);
    return rc;
}
