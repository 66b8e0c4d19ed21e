/* split_step.c — one training step of a program split over ranks, with the
 * trainer's guards agreed by every rank (--grad-clip, --skip-nonfinite, the
 * global gradient norm of --log, a stop signal).
 *
 * Every decision that changes what a rank does next (skip the update, clip,
 * stop and checkpoint) is taken from values every rank holds with the same
 * bits: the loss is the mean over ranks (a sum of doubles), the norm is
 * assembled from one slot per rank summed in rank order. So no rank can go
 * on to a collective that another rank skipped.
 *
 * The global norm counts every gradient element once: a gradient reduced by
 * an all-reduce (dp) is whole and the same on every rank, so only rank 0's
 * sum enters; one reduced by a reduce-scatter (zero1-3) is this rank's 1/N,
 * so every rank's sum enters. Under tensor parallel a cut parameter's
 * gradient is the rank's own part, the others are alike in a tp group (tp
 * rank 0's enters), and dp or zero over the groups as above (the emitted
 * updates apply the same rule under fused-opt).
 */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "gc_runtime_internal.h"

/* The sum over ranks of v, added in rank order: the same bits on every rank. */
static double group_sum(gcrt_run *st, double v)
{
    int n = st->ctx.nranks;
    double slot[64], *x = n <= 64 ? slot : calloc((size_t)n, sizeof *x);
    if (!x) {
        fprintf(stderr, "error: out of host memory\n");
        st->prog->comm->abort(1);
        return NAN;
    }
    memset(x, 0, (size_t)n * sizeof *x);
    x[st->ctx.rank] = v;
    st->prog->comm->sum_doubles(x, n);
    double s = 0;
    for (int r = 0; r < n; r++)
        s += x[r];
    if (x != slot)
        free(x);
    return s;
}

int gcrt_group_any(gcrt_run *st, int v)
{
    if (st->ctx.nranks <= 1)
        return v;
    return group_sum(st, v ? 1.0 : 0.0) > 0;
}

void gcrt_group_stop(gcrt_run *st, int *stop, int *log_bad)
{
    int n = st->ctx.nranks;
    if (n <= 1)
        return;
    /* one sum: every count stays below n + 1, so base n + 1 keeps them apart */
    double base = n + 1, mine = (*stop == SIGINT) + base * (*stop && *stop != SIGINT) + base * base * (*log_bad != 0);
    long sum = (long)group_sum(st, mine);
    long ints = sum % (long)base, terms = sum / (long)base % (long)base, logs = sum / (long)(base * base);
    if (!*stop)
        *stop = terms ? SIGTERM : ints ? SIGINT : 0;
    *log_bad = logs > 0;
}

/* This rank's share of the squared global norm of the gradients the updates
 * read (UPD_GRADS), on the device after the backward: one wait. */
static double local_sumsq(gcrt_run *st)
{
    const gc_program *p = st->prog;
    gc_device_sumsq_reset();
    for (int i = 0; i < p->nupd_grads; i++) {
        const gc_grad_ref *g = &p->upd_grads[i];
        if ((g->sharded & 2 || st->ctx.tp_rank == 0) && (g->sharded & 1 || st->ctx.dp_rank == 0))
            gc_device_sumsq_add((const float *)(st->ctx.region[g->region] + g->offset), g->n);
    }
    return gc_device_sumsq_read();
}

static void scale_grads(gcrt_run *st, float s)
{
    const gc_program *p = st->prog;
    for (int i = 0; i < p->nupd_grads; i++) {
        const gc_grad_ref *g = &p->upd_grads[i];
        gc_device_scale((float *)(st->ctx.region[g->region] + g->offset), g->n, s);
    }
}

/* Updates after the backward (plain schedule): forward and backward with
 * their collectives, the global norm, then skip, clip or update. */
static void step_norm_first(gcrt_run *st, gcrt_step_info *si)
{
    si->loss = gcrt_mean_loss(st, gcrt_run_step(st, GC_PHASE_FWD | GC_PHASE_BWD));
    si->gnorm = sqrt(group_sum(st, local_sumsq(st)));
    if (st->o.skip_nonfinite && !(isfinite(si->loss) && isfinite(si->gnorm))) {
        si->skipped = 1;
        return;
    }
    float scale = gcrt_clip_scale(si->gnorm, st->o.grad_clip);
    if (scale != 1.0f)
        scale_grads(st, scale);
    st->prog->run(&st->ctx, GC_PHASE_OPT);
    gc_device_sync();
}

/* Updates inside the backward (fused-opt): a non-finite mean loss of the
 * forward, run alone, skips the rest on every rank; under --log the updates
 * add up the squares of the gradients they read (grad_norm.c): this rank's
 * 1/N of each under zero1-3, the whole under dp. */
static void step_fused(gcrt_run *st, gcrt_step_info *si)
{
    const gc_program *p = st->prog;
    if (st->o.grad_clip > 0) {   /* a norm pass first, the norm summed over ranks */
        gcrt_clipped_fused_step(st, si, group_sum);
        return;
    }
    st->ctx.gnorm_sq = st->o.log != NULL;   /* --log is given to every rank (rank 0 writes it) */
    if (st->ctx.gnorm_sq)
        gc_device_sumsq_reset();
    if (st->o.skip_nonfinite) {
        si->loss = gcrt_mean_loss(st, gcrt_run_step(st, GC_PHASE_FWD));
        if (!isfinite(si->loss)) {
            si->skipped = 1;
            st->ctx.gnorm_sq = 0;
            return;
        }
        p->run(&st->ctx, GC_PHASE_BWD | GC_PHASE_OPT);
        gc_device_sync();
    } else {
        si->loss = gcrt_mean_loss(st, gcrt_run_step(st, GC_PHASE_FWD | GC_PHASE_BWD | GC_PHASE_OPT));
    }
    if (st->ctx.gnorm_sq) {
        double sq = gc_device_sumsq_read();
        si->gnorm = sqrt(group_sum(st, p->optstate_sharded || st->ctx.rank == 0 ? sq : 0.0));
    }
    st->ctx.gnorm_sq = 0;
}

void gcrt_split_step(gcrt_run *st, gcrt_step_info *si)
{
    if (st->prog->nupd_grads > 0)
        step_norm_first(st, si);
    else
        step_fused(st, si);
}
