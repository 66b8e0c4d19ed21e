/* train_main.c — gc_main(): the loop around the compiled step.
 *
 * Sets up a run (the program table checked, the device regions allocated,
 * one allocation each of exactly the planned size, parameters initialised or
 * loaded, data opened), then trains, validates, saves and samples by calling
 * the rooms beside it: flags.c (command line), progress.c (what is printed),
 * ckpt.c (checkpoints), sample.c, gradcheck.c, data.c (shards and model files).
 *
 * The same file is linked into CUDA programs, so region memory is touched
 * only through gc_device_alloc/upload/download/sync; host copies live here.
 * Every user error is one line on stderr starting "error: " and exit 1.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "gc_runtime_internal.h"

/* OpenBLAS's thread count, when OpenBLAS is linked in (weak: CUDA programs
 * may not link it, and then the call is skipped). */
extern void openblas_set_num_threads(int n) __attribute__((weak));

/* ---------------------------------------------------------------- the program table */

/* [off, off+bytes) must lie inside a region of `size` bytes. */
static int in_region(size_t off, double bytes, size_t size)
{
    return (double)off + bytes <= (double)size;
}

/* Does the program keep every parameter's gradient in its grads region
 * (plain schedule), so the global norm exists before any update? */
static int has_grads(const gc_program *p)
{
    return p->nparam_elems > 0 && p->region_bytes[GC_REGION_GRADS] >= (size_t)p->nparam_elems * 4 &&
           !p->comm;   /* split programs: a rank's grads are its own rows' (the updates read reduced ones) */
}

/* Checks what gc_main relies on in the emitted table; a failure is a
 * compiler bug, reported as an internal error. */
static int check_program(const gc_program *p, const gcrt_options *o)
{
    size_t arena = p->region_bytes[GC_REGION_ARENA];
    double bt = (double)p->B * (double)p->T;
    if (!p->run || p->B <= 0 || p->T <= 0 || p->V <= 0 || p->nparam_elems < 0 || p->nparams < 0)
        return gcrt_errorf("internal: program table lacks run, B, T or V");
    for (int i = 0; i < p->nparams; i++) {
        const gc_param_info *q = &p->params[i];
        if (q->offset < 0 || q->numel < 0 || q->offset + q->numel > p->nparam_elems)
            return gcrt_errorf("internal: parameter %s [%ld, +%ld) lies outside the %ld parameter elements",
                          q->name, q->offset, q->numel, p->nparam_elems);
    }
    if (!p->tp && !p->masters_host_off &&
        !in_region(0, 4.0 * (double)p->nparam_elems / (p->nshards ? p->nranks : 1), p->region_bytes[GC_REGION_PARAMS]))
        return gcrt_errorf("internal: params region (%zu bytes) is smaller than %ld parameters",
                      p->region_bytes[GC_REGION_PARAMS], p->nparam_elems);
    if (p->masters_host_off && !in_region(p->masters_host_off, 4.0 * (double)p->nparam_elems, p->region_bytes[GC_REGION_HOST]))
        return gcrt_errorf("internal: the host region (%zu bytes) does not hold %ld master weights at %zu",
                      p->region_bytes[GC_REGION_HOST], p->nparam_elems, p->masters_host_off);
    if (!in_region(p->tokens_off, 4 * bt, arena) || !in_region(p->targets_off, 4 * bt, arena) ||
        !in_region(p->loss_off, 4, arena))
        return gcrt_errorf("internal: tokens, targets or loss lie outside the arena (%zu bytes)", arena);
    int logits = p->logits_cols >= p->V && in_region(p->logits_off, (p->bf16 ? 2 : 4) * bt * (double)p->logits_cols, arena);
    int row = p->sample_cols >= p->V && in_region(p->sample_off, 4.0 * (double)p->sample_cols, arena);
    if (o->sample > 0 && !logits && !row)
        return gcrt_errorf("--sample: this program exposes neither a [B, T, %ld] logits tensor nor a sample row "
                           "in its arena", p->V);
    return 0;
}

static void set_threads(long n)
{
    if (n <= 0)
        return;
#ifdef _OPENMP
    omp_set_num_threads((int)n);
#endif
    if (openblas_set_num_threads)
        openblas_set_num_threads((int)n);
}

/* On a device that knows its free memory the plan and the stated reserve
 * (CUDA context, kernel images, cuBLASLt: they load lazily, after the
 * regions) must fit, or nothing starts. */
static int check_fits(const gc_program *p)
{
    size_t need = gcrt_total_region_bytes(p), avail = gc_device_free_bytes();
    if (avail > 0 && need + p->device_reserve_bytes > avail)
        return gcrt_errorf("the plan needs %zu bytes of device memory plus a reserve of %zu (CUDA context, kernel "
                           "images, cuBLASLt) but %s has only %zu bytes free",
                           need, p->device_reserve_bytes, gc_device_name(), avail);
    return 0;
}

/* After the first step everything that loads lazily has loaded: the memory in
 * use beyond the regions is what the reserve must cover. */
static void report_reserve(const gcrt_run *st)
{
    size_t total = gc_device_total_bytes(), free_b = gc_device_free_bytes(), plan = gcrt_total_region_bytes(st->prog);
    if (total == 0)
        return;
    size_t used = total - free_b, other = used > plan ? used - plan : 0;
    gcrt_progress_break();
    printf("device memory after the first step: %zu bytes in use = plan %zu + %zu other (CUDA context, kernel "
           "images, cuBLASLt; gcompile reserves %zu: %s)\n",
           used, plan, other, st->prog->device_reserve_bytes, other <= st->prog->device_reserve_bytes ? "ok" : "EXCEEDED");
}

static int open_outputs(gcrt_run *st)
{
    char err[512];
    if (st->ctx.rank != 0)     /* split programs: rank 0 logs and saves */
        return 0;
    if (st->o.save && gcrt_output_probe(st->o.save, err, sizeof err) != 0)
        return gcrt_errorf("%s", err);
    if (st->o.log) {
        if (gcrt_output_kind(st->o.log, 1, err, sizeof err) < 0)   /* a FIFO would block open() */
            return gcrt_errorf("%s", err);
        st->log = fopen(st->o.log, st->first_step > 1 ? "a" : "w");   /* a resumed run appends */
        if (!st->log)
            return gcrt_errorf("%s: cannot open log: %s", st->o.log, strerror(errno));
    }
    return 0;
}

/* Seeded init in declaration order: zeros, ones or normal(0, std). */
static void init_params(float *w, const gc_program *p, unsigned long long seed)
{
    gcrt_rng r;
    gcrt_rng_seed(&r, seed, GCRT_STREAM_INIT);
    memset(w, 0, (size_t)p->nparam_elems * sizeof *w);
    for (int i = 0; i < p->nparams; i++) {
        const gc_param_info *q = &p->params[i];
        float *x = w + q->offset;
        if (q->init == GC_INIT_NORMAL)
            gcrt_rng_fill_normal(&r, x, q->numel, q->std);
        else if (q->init == GC_INIT_ONES)
            for (long k = 0; k < q->numel; k++)
                x[k] = 1.0f;
    }
}

static int prepare_params(gcrt_run *st)
{
    const gc_program *p = st->prog;
    st->params = malloc((size_t)(p->nparam_elems ? p->nparam_elems : 1) * sizeof(float));
    if (!st->params)
        return gcrt_errorf("cannot allocate %ld parameters on the host", p->nparam_elems);
    int resumed = 0;
    if (st->o.resume && gcrt_ckpt_resume(st, &resumed) != 0)
        return 1;
    if (resumed)
        return 0;
    if (!st->o.init) {
        init_params(st->params, p, st->o.seed);
        printf("init: seeded (seed %llu)\n", st->o.seed);
        return 0;
    }
    char err[1024], info[512] = "";
    if (gcrt_st_is_file(st->o.init)) {
        if (gcrt_st_load(st->params, p, st->o.init, info, sizeof info, err, sizeof err) != 0)
            return gcrt_errorf("%s", err);
        printf("init: %s (%s)\n", st->o.init, info);
        return 0;
    }
    if (gcrt_ckpt_load(st->params, p, st->o.init, err, sizeof err) != 0)
        return gcrt_errorf("%s", err);
    printf("init: %s\n", st->o.init);
    return 0;
}

/* One allocation per region, exactly the planned size: the plan is the allocation. */
static void alloc_regions(gcrt_run *st)
{
    const gc_program *p = st->prog;
    size_t before = gc_device_free_bytes();
    for (int r = 0; r < GC_NREGIONS; r++)   /* the host region in host memory (pinned on CUDA) */
        st->ctx.region[r] = !p->region_bytes[r] ? NULL
                          : r == GC_REGION_HOST ? gc_host_alloc(p->region_bytes[r]) : gc_device_alloc(p->region_bytes[r]);
    size_t after = gc_device_free_bytes();
    if (before > 0)     /* a device that reports free memory: planned vs measured */
        printf("device memory: planned %zu bytes, measured %zu bytes (free memory before - after allocating)\n",
               gcrt_total_region_bytes(p), before - after);
    if (p->copy_slots)
        gc_copy_init(p->copy_slots);
    if (p->nparam_elems && (p->nshards || p->tp)) {       /* zero3: this rank's shards */
        gcrt_upload_shards(st);
        p->run(&st->ctx, GC_PHASE_PARAMS);   /* the host masters, if any */
        gc_device_sync();
    } else {
        gcrt_params_put(st, st->params);     /* then the bf16 weight copies, the host masters, if any */
    }
    if (st->resume_optstate && gcrt_optstate_local_bytes(p))
        gcrt_optstate_put(st, st->resume_optstate);
    st->ctx.lr = st->o.lr, st->ctx.beta1 = st->o.beta1, st->ctx.beta2 = st->o.beta2;
    st->ctx.eps = st->o.eps, st->ctx.weight_decay = st->o.wd;
    st->ctx.t = 1;
}

static void release(gcrt_run *st)
{
    for (int r = 0; r < GC_NREGIONS; r++)
        if (st->ctx.region[r] && r == GC_REGION_HOST)
            gc_host_free(st->ctx.region[r]);
        else if (st->ctx.region[r])
            gc_device_free(st->ctx.region[r]);
    gcrt_data_close(st);
    gcrt_shard_close(&st->val);
    if (st->log)
        fclose(st->log);
    if (st->lock_fd >= 0)
        close(st->lock_fd);
    free(st->params);
    free(st->prof);
    free(st->inputs);
    free(st->targets);
    free(st->resume_buf);
    gcrt_progress_free(st);
}

/* ---------------------------------------------------------------- one step */

int gcrt_micro_batches(const gc_program *p) { return p->micro_batches > 1 ? p->micro_batches : 1; }

/* Micro-batch k's rows of the host batch into the arena, queued without a
 * wait: the host batch changes only after the step's loss is read (a wait). */
static void upload_micro(gcrt_run *st, int k)
{
    char *arena = st->ctx.region[GC_REGION_ARENA];
    size_t n = (size_t)(st->BT / gcrt_micro_batches(st->prog)), bytes = n * sizeof(int32_t);
    gc_device_upload_async(arena + st->prog->tokens_off, st->inputs + (size_t)k * n, bytes);
    gc_device_upload_async(arena + st->prog->targets_off, st->targets + (size_t)k * n, bytes);
}

void gcrt_upload_batch(gcrt_run *st) { upload_micro(st, 0); }

float gcrt_read_loss(gcrt_run *st)
{
    float loss;   /* one wait: the copy is queued after the step's kernels */
    gc_device_download_async(&loss, st->ctx.region[GC_REGION_ARENA] + st->prog->loss_off, sizeof loss);
    gc_device_sync();
    return loss;
}

float gcrt_run_step(gcrt_run *st, int phases)
{
    int K = gcrt_micro_batches(st->prog);
    if (K == 1) {
        upload_micro(st, 0);
        st->ctx.micro = 0;
        st->prog->run(&st->ctx, phases);
        return gcrt_read_loss(st);
    }
    double sum = 0;
    for (int k = 0; k < K; k++) {
        upload_micro(st, k);
        st->ctx.micro = k;
        st->prog->run(&st->ctx, k == K - 1 ? phases : phases & ~GC_PHASE_OPT);
        sum += gcrt_read_loss(st);
    }
    st->ctx.micro = 0;
    return (float)(sum / K);
}

/* Next batch of sh (this rank's rows of it), then the given phases; returns
 * the loss (the mean over ranks when split). */
float gcrt_run_batch(gcrt_run *st, gcrt_shard *sh, int phases)
{
    if (gcrt_data_ranks(st) > 1)
        gcrt_shard_next_rank(sh, st->inputs, st->targets, st->BT, gcrt_data_rank(st), gcrt_data_ranks(st));
    else
        gcrt_shard_next(sh, st->inputs, st->targets, st->BT);
    return gcrt_mean_loss(st, gcrt_run_step(st, phases));
}

/* Mean forward loss over the first --val-batches batches of the val shard. */
/* --val-batches, or by default GCRT_DEFAULT_VAL_BATCHES (all when fewer). */
static long val_batches(const gcrt_run *st)
{
    long n = st->o.val_batches;
    if (n == 0) {
        n = gcrt_shard_nbatches(&st->val, st->BT);
        n = n < GCRT_DEFAULT_VAL_BATCHES ? n : GCRT_DEFAULT_VAL_BATCHES;
    }
    return n;
}

static int validate(gcrt_run *st, double *out)
{
    long n = val_batches(st);
    st->val.pos = 0;
    double sum = 0;
    for (long i = 0; i < n; i++)
        sum += gcrt_run_batch(st, &st->val, GC_PHASE_FWD);
    *out = sum / (double)n;
    if (!isfinite(*out))
        return gcrt_errorf("validation: loss is %s", isnan(*out) ? "nan" : "inf");
    return 0;
}

static int want_val(const gcrt_run *st, long step)
{
    long every = st->o.val_every;
    return st->have_val && ((every > 0 && step % every == 0) || step == st->o.steps);
}

/* SIGINT/SIGTERM: the step in flight finishes, a checkpoint is written, exit 0. */
static volatile sig_atomic_t stop_signal;

static void on_stop(int sig) { stop_signal = sig; }

static void catch_stop_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static int ckpt_due(const gcrt_run *st, long step, int stop)
{
    const gcrt_options *o = &st->o;
    return o->ckpt_dir && ((o->save_every > 0 && step % o->save_every == 0) || step == o->steps || stop);
}

/* The step of a program that updates inside its backward (fused-opt). */
static void run_fused_step(gcrt_run *st, gcrt_step_info *si)
{
    if (st->o.grad_clip > 0) {     /* norm pass, then the clipped updates (gcrt_clipped_fused_step) */
        gcrt_clipped_fused_step(st, si, NULL);
        return;
    }
    if (st->o.skip_nonfinite) {
        si->loss = gcrt_run_step(st, GC_PHASE_FWD);   /* one micro-batch: the whole batch stays uploaded */
        if (!isfinite(si->loss)) {
            si->skipped = 1;
            return;
        }
        st->prog->run(&st->ctx, GC_PHASE_BWD | GC_PHASE_OPT);
        gc_device_sync();
        return;
    }
    si->loss = gcrt_run_step(st, GC_PHASE_FWD | GC_PHASE_BWD | GC_PHASE_OPT);
}

/* A clipped step of a program that updates inside its backward (fused-opt,
 * --grad-clip): a norm pass (forward and backward, the updates only adding
 * up their gradients' squares: ctx.norm_pass), the global norm (group_sum:
 * the sum over ranks of split programs, NULL for one process), then, unless
 * --skip-nonfinite skips the step, forward and backward again with every
 * update scaling its gradient by the clipping factor first (ctx.grad_scale).
 * One more forward and backward per step than unclipped (passes/costs.c
 * prices it); the same gradients both times (deterministic kernels). */
void gcrt_clipped_fused_step(gcrt_run *st, gcrt_step_info *si, double (*group_sum)(gcrt_run *, double))
{
    const gc_program *p = st->prog;
    st->ctx.gnorm_sq = 1;   /* the updates add up the squares on the device (grad_norm.c): one read */
    gc_device_sumsq_reset();
    st->ctx.norm_pass = 1;
    si->loss = gcrt_mean_loss(st, gcrt_run_step(st, GC_PHASE_FWD | GC_PHASE_BWD | GC_PHASE_OPT));
    st->ctx.norm_pass = 0;
    st->ctx.gnorm_sq = 0;
    double sq = gc_device_sumsq_read();
    /* split: dp ranks hold the same whole gradients (rank 0's sum counts), zero1-3 ranks their 1/N each;
     * under tp the emitted updates already count each element on one rank (norm_condition) */
    int counts = p->tp > 1 || p->optstate_sharded || st->ctx.rank == 0;
    si->gnorm = sqrt(group_sum ? group_sum(st, counts ? sq : 0.0) : sq);
    if (st->o.skip_nonfinite && !(isfinite(si->loss) && isfinite(si->gnorm))) {
        si->skipped = 1;
        return;
    }
    if (!isfinite(si->loss) || !isfinite(si->gnorm))
        return;                    /* the run stops (train: nonfinite) */
    st->ctx.grad_scale = gcrt_clip_scale(si->gnorm, st->o.grad_clip);
    gcrt_run_step(st, GC_PHASE_FWD | GC_PHASE_BWD | GC_PHASE_OPT);
    st->ctx.grad_scale = 0;
}

/* One training step on the batch in st->inputs/targets. A program that keeps
 * all gradients (plain schedule) runs forward and backward, measures the
 * global gradient norm, clips, then updates: the update is skipped (and
 * si->skipped set) when the loss or the norm is not finite and
 * --skip-nonfinite is on. A fused-opt program updates inside its backward:
 * with --grad-clip a norm pass runs first (gcrt_clipped_fused_step); else
 * with --skip-nonfinite its forward runs first, alone, so a non-finite loss
 * can still skip the backward and the update, and under --log its updates
 * add up the global gradient norm (reported, not clipped: the updates have
 * run). */
static void run_step(gcrt_run *st, gcrt_step_info *si)
{
    const gc_program *p = st->prog;
    float *grads = (float *)st->ctx.region[GC_REGION_GRADS];
    si->gnorm = NAN;
    si->skipped = 0;
    if (st->ctx.nranks > 1) {      /* split programs: every rank takes the same decisions (split_step.c) */
        gcrt_split_step(st, si);
        return;
    }
    if (has_grads(p)) {   /* also every program with micro-batches */
        si->loss = gcrt_run_step(st, GC_PHASE_FWD | GC_PHASE_BWD);
        si->gnorm = sqrt(gc_device_sumsq(grads, p->nparam_elems));
        if (st->o.skip_nonfinite && !(isfinite(si->loss) && isfinite(si->gnorm))) {
            si->skipped = 1;
            return;
        }
        float scale = gcrt_clip_scale(si->gnorm, st->o.grad_clip);
        if (scale != 1.0f)
            gc_device_scale(grads, p->nparam_elems, scale);
        p->run(&st->ctx, GC_PHASE_OPT);
        gc_device_sync();
        return;
    }
    st->ctx.gnorm_sq = st->log != NULL;   /* under --log, the updates add up the gradients' squares (grad_norm.c) */
    if (st->ctx.gnorm_sq)
        gc_device_sumsq_reset();
    run_fused_step(st, si);
    if (st->ctx.gnorm_sq && !si->skipped)
        si->gnorm = sqrt(gc_device_sumsq_read());
    st->ctx.gnorm_sq = 0;
}

/* A non-finite loss or gradient norm without --skip-nonfinite: the run stops. */
static int nonfinite(const gcrt_run *st, const gcrt_step_info *si)
{
    const char *what = !isfinite(si->loss) ? "loss" : "gradient norm";
    double v = !isfinite(si->loss) ? si->loss : si->gnorm;
    const char *dir = st->o.ckpt_dir;
    char last[1024];
    /* step S's loss and norm come from the parameters after step S-1: a
     * checkpoint of step S-1 leads straight back here; step S-2's predates it */
    long good = dir ? gcrt_ckpt_newest_before(dir, si->step - 1) : 0;
    if (good > 0 && good < st->last_ckpt)
        snprintf(last, sizeof last, "the newest checkpoint that predates the divergence is step %ld in %s (those of "
                 "steps %ld.. hold the parameters that led to it: move them away, then --resume %s)", good, dir,
                 good + 1, dir);
    else if (good > 0)
        snprintf(last, sizeof last, "the newest checkpoint that predates the divergence is step %ld in %s (--resume %s)",
                 good, dir, dir);
    else if (st->last_ckpt > 0)
        snprintf(last, sizeof last, "no checkpoint predates the divergence (that of step %ld in %s holds the parameters "
                 "that led to it)", st->last_ckpt, dir);
    else
        snprintf(last, sizeof last, "no checkpoint of this run was written%s", dir ? " yet" : " (no --ckpt-dir)");
    return gcrt_errorf("step %ld: %s is %s; stopped: %s; --skip-nonfinite skips such steps", si->step, what,
                       isnan(v) ? "nan" : "inf", last);
}

/* The log could not be written (its checkpoint, if any, is written): the
 * error names the log, then every rank ends. */
static int log_failed(gcrt_run *st, long step)
{
    int rc = 0;
    if (st->ctx.rank == 0)
        rc = gcrt_errorf("%s: cannot write the log: %s; stopped after step %ld%s%s", st->o.log,
                         strerror(st->log_errno ? st->log_errno : EIO), step,
                         st->o.ckpt_dir ? ", its checkpoint saved in " : " (no --ckpt-dir: nothing saved)",
                         st->o.ckpt_dir ? st->o.ckpt_dir : "");
    if (st->ctx.nranks > 1)
        gcrt_group_any(st, 1);        /* rank 0 has said why before any rank ends the group */
    return rc ? rc : 1;
}

/* Steps first_step..steps; *stopped = 1 when a signal ended the run early. */
static int train(gcrt_run *st, int *stopped)
{
    double sum_ms = 0;
    long timed = 0;
    if (st->o.profile && st->prog->nprof > 0 &&
        !(st->prof = calloc((size_t)st->prog->nprof, sizeof *st->prof)))
        return gcrt_errorf("--profile: out of memory");
    if (gcrt_data_start(st) || gcrt_progress_start(st))
        return 1;
    catch_stop_signals();
    for (long step = st->first_step; step <= st->o.steps; step++) {
        double t0 = gcrt_now_ms();
        gcrt_step_info si = {.step = step, .lr = gcrt_lr_at(&st->o, step), .val = NAN};
        st->ctx.t = (int)step;
        st->ctx.lr = (float)si.lr;
        st->ctx.prof = st->prof;
        if (gcrt_data_next(st, &si.shard, &si.batch))
            return 1;
        run_step(st, &si);
        si.ms = gcrt_now_ms() - t0;
        st->ctx.prof = NULL;
        if (st->prof && step == st->first_step && st->o.steps > step)   /* the first step pays first-touch page faults */
            memset(st->prof, 0, (size_t)st->prog->nprof * sizeof *st->prof);
        st->skipped += si.skipped;
        if (!si.skipped && (!isfinite(si.loss) || ((has_grads(st->prog) || st->prog->nupd_grads || st->o.grad_clip > 0) &&
                                                   !isfinite(si.gnorm))))
            return nonfinite(st, &si);
        if (want_val(st, step) && validate(st, &si.val))
            return 1;
        gcrt_report_step(st, &si);
        if (step == st->first_step)
            report_reserve(st);
        if (step > st->first_step || st->o.steps == step)
            sum_ms += si.ms, timed++;
        int stop = stop_signal;       /* read once: a signal arriving now counts after the next step */
        int log_bad = st->log_errno != 0;
        gcrt_group_stop(st, &stop, &log_bad);   /* a signal to one rank stops them all after the same step */
        if ((ckpt_due(st, step, stop) || (log_bad && st->o.ckpt_dir)) && gcrt_ckpt_write(st, step))
            return 1;
        if (log_bad)
            return log_failed(st, step);
        if (stop) {
            gcrt_progress_break();
            printf("stopped by %s after step %ld%s\n", stop == SIGINT ? "SIGINT" : "SIGTERM", step,
                   st->o.ckpt_dir ? "; resume with --resume" : " (no --ckpt-dir: nothing saved)");
            *stopped = 1;
            return 0;
        }
    }
    if (timed > 0) {
        double mean = sum_ms / (double)timed;
        gcrt_progress_done(st, mean, timed);
        if (st->prof) {
            gcrt_print_profile(st, timed, mean);
            long n = st->o.steps - st->first_step + 1;
            double per = (double)(n > 0 ? n : 1);
            printf("data: %.3f ms/step preparing batches, %s; %.3f ms/step of the step waiting for them\n",
                   gcrt_data_prep_ms(st) / per,
                   st->o.no_prefetch ? "on the main thread (--no-prefetch)" : "on the prefetch thread while the step runs",
                   gcrt_data_wait_ms(st) / per);
        }
    } else if (st->have_val && st->first_step == 1) {
        double val;
        if (validate(st, &val))
            return 1;
        printf("val loss %.6f\n", val);
        if (st->log) {
            fprintf(st->log, "{\"step\":0,\"val_loss\":%.9g}\n", val);
            gcrt_log_flush(st);
        }
    }
    return 0;
}

/* --eval-only: the validation loss of the parameters loaded (or seeded),
 * printed and, under --log, one record {"eval_loss", "batches"}. */
static int eval_only(gcrt_run *st)
{
    double val;
    if (validate(st, &val))
        return 1;
    long n = val_batches(st);
    printf("eval loss %.6f (mean over %ld batches of %s)\n", val, n, st->val.name);
    if (st->log) {
        fprintf(st->log, "{\"eval_loss\":%.9g,\"batches\":%ld}\n", val, n);
        fflush(st->log);
    }
    return 0;
}

/* ---------------------------------------------------------------- gc_main */

/* Everything after the flags: returns the exit status. */
static int run_program(gcrt_run *st)
{
    const gc_program *p = st->prog;
    char err[512] = "";
    if (check_program(p, &st->o))
        return 1;
    if (p->comm && p->comm->watch)   /* split programs: no collective waits forever (comm_mpi.c) */
        p->comm->watch(st->o.comm_timeout);
    set_threads(st->o.threads);
    if (gc_device_init(err, sizeof err) != 0)
        return gcrt_errorf("%s", *err ? err : "device initialisation failed");
    if (p->comm && p->comm->ready)   /* NCCL's communicators, before the first step */
        p->comm->ready();
    gcrt_print_header(p);
    fflush(stdout);   /* the header shows while the parameters are prepared */
    if (check_fits(p) || gcrt_data_open(st) || (st->o.ckpt_dir && gcrt_ckpt_dir_open(st)) ||
        prepare_params(st) || open_outputs(st))
        return 1;
    st->inputs = calloc((size_t)st->BT, sizeof(int32_t));
    st->targets = calloc((size_t)st->BT, sizeof(int32_t));
    if (!st->inputs || !st->targets)
        return gcrt_errorf("cannot allocate a batch of %ld tokens", st->BT);
    alloc_regions(st);
    fflush(stdout);
    if (st->o.gradcheck)
        return gcrt_gradcheck(st);
    if (st->o.eval_only)
        return eval_only(st) || (st->o.sample && gcrt_sample(st));
    int stopped = 0;
    if (train(st, &stopped) || (st->o.save && gcrt_save_final(st)) || (!stopped && st->o.sample && gcrt_sample(st)))
        return 1;
    return gcrt_log_close(st);
}

int gc_main(int argc, char **argv, const gc_program *prog)
{
    gcrt_run st;
    memset(&st, 0, sizeof st);
    st.prog = prog;
    st.lock_fd = -1;
    int rc = gcrt_join_group(&st);    /* split programs: the process group (ranks.c) */
    if (rc == 0)
        rc = gcrt_parse_flags(&st.o, argc, argv, prog);
    if (rc == GCRT_PARSE_RUN) {
        st.BT = prog->B * prog->T * gcrt_micro_batches(prog);   /* B: the micro-batch's rows */
        st.first_step = 1;
        rc = run_program(&st);
    }
    errno = 0;
    if ((fflush(stdout) != 0 || ferror(stdout)) && rc == 0)   /* ./train >/dev/full: not exit 0 */
        rc = gcrt_errorf("standard output: cannot write: %s", strerror(errno ? errno : EIO));
    release(&st);
    gcrt_leave_group(&st, rc);
    return rc;
}
