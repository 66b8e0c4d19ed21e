/* progress.c — what a run prints: the header (program, dims, plan, memory),
 * the progress of the steps with their JSONL log records, the final summary
 * and the --profile table.
 *
 * Progress: when stdout is a terminal, one status line rewritten in place
 * (status_line.c; cut to the terminal's width); other messages clear it
 * first (gcrt_progress_break) and the next step draws it again. Otherwise plain lines, llm.c style, every --print-every steps.
 */
#define _DEFAULT_SOURCE 1   /* TIOCGWINSZ */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "gc_runtime_internal.h"

double gcrt_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

void gc_prof_mark(gc_ctx *ctx, int k)
{
    gc_device_sync();
    double t = gcrt_now_ms() * 1e-3;
    if (k >= 0)
        ctx->prof[k] += t - ctx->prof_t0;
    ctx->prof_t0 = t;
}

/* The --profile table: categories by time, largest first. */
void gcrt_print_profile(const gcrt_run *st, long nsteps, double step_ms)
{
    const gc_program *p = st->prog;
    int *order = malloc((size_t)(p->nprof + 1) * sizeof *order);
    if (!order)
        return;
    double ops_ms = 0;
    for (int k = 0; k < p->nprof; k++) {   /* insertion sort: a few dozen categories */
        int i = k;
        for (; i > 0 && st->prof[order[i - 1]] < st->prof[k]; i--)
            order[i] = order[i - 1];
        order[i] = k;
        ops_ms += 1e3 * st->prof[k] / (double)nsteps;
    }
    printf("profile: %d kernels and shapes, mean over %ld step%s: step %.1f ms = ops %.1f ms + outside ops %.1f ms\n",
           p->nprof, nsteps, nsteps == 1 ? "" : "s", step_ms, ops_ms, step_ms - ops_ms);
    printf("  %9s %6s %6s %9s  %s\n", "ms/step", "%", "calls", "GFLOP/s", "phase kernel shape");
    for (int i = 0; i < p->nprof; i++) {
        int k = order[i];
        double ms = 1e3 * st->prof[k] / (double)nsteps;
        printf("  %9.2f %6.1f %6d ", ms, step_ms > 0 ? 100.0 * ms / step_ms : 0.0, p->prof_calls[k]);
        if (p->prof_flops[k] > 0 && ms > 0)
            printf("%9.1f", p->prof_flops[k] / (ms * 1e-3) / 1e9);
        else
            printf("%9s", "-");
        printf("  %s\n", p->prof_label[k]);
    }
    free(order);
}

static int max_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

size_t gcrt_total_region_bytes(const gc_program *p)
{
    size_t s = 0;
    for (int r = 0; r < GC_NREGIONS; r++)
        if (r != GC_REGION_HOST)
            s += p->region_bytes[r];
    return s;
}

/* 1234567 -> "1,234,567" */
static const char *grouped(long long v, char *buf, size_t len)
{
    char raw[32];
    int n = snprintf(raw, sizeof raw, "%lld", v < 0 ? -v : v);
    size_t k = 0;
    if (v < 0 && k + 1 < len)
        buf[k++] = '-';
    for (int i = 0; i < n && k + 2 < len; i++) {
        buf[k++] = raw[i];
        if ((n - i - 1) % 3 == 0 && i != n - 1)
            buf[k++] = ',';
    }
    buf[k] = 0;
    return buf;
}

void gcrt_print_header(const gc_program *p)
{
    char b1[32], b2[32];
    printf("gcompile program: %s | config %s | target %s | runtime %s\n", p->graph_file,
           p->config && *p->config ? p->config : "-", p->target, GC_RUNTIME_VERSION);
    static const char *const names[8] = {"B", "T", "maxT", "V", "Vp", "L", "NH", "C"};
    long dims[8] = {p->B, p->T, p->maxT, p->V, p->Vp, p->L, p->NH, p->C};
    printf("dims:");
    if (p->dims_text && *p->dims_text)   /* the graph's own (Llama: NKV, F, HS, THETA too) */
        printf(" %s", p->dims_text);
    for (int i = 0; i < 8 && !(p->dims_text && *p->dims_text); i++)
        if (dims[i])
            printf(" %s=%ld", names[i], dims[i]);
    if (gcrt_micro_batches(p) > 1)
        printf(" | %d micro-batches of B rows per step (batch %ld rows)", gcrt_micro_batches(p),
               p->B * gcrt_micro_batches(p));
    printf("\nparameters: %s in %d tensors\n", grouped(p->nparam_elems, b1, sizeof b1), p->nparams);
    printf("plan: %s\n", p->plan_summary ? p->plan_summary : "-");
    if (p->nranks > 1)
        printf("split: %s over %d ranks (this plan is one rank's); global batch %ld rows of T = %ld\n", p->split,
               p->nranks, p->B * gcrt_micro_batches(p) * gcrt_prog_data_ranks(p), p->T);
    printf("memory: %s bytes in regions params %zu | grads %zu | optstate %zu | arena %zu",
           grouped((long long)gcrt_total_region_bytes(p), b2, sizeof b2), p->region_bytes[0],
           p->region_bytes[1], p->region_bytes[2], p->region_bytes[3]);
    if (p->region_bytes[GC_REGION_HOST])
        printf(" | host region %s bytes (%s)", grouped((long long)p->region_bytes[GC_REGION_HOST], b1, sizeof b1),
               strcmp(p->target, "cuda") ? "host memory" : "pinned host memory, not on the device");
    printf("\n");
    printf("device: %s | threads %d\n", gc_device_name(), max_threads());
}

/* ---------------------------------------------------------------- progress of the steps */

struct gcrt_progress {
    int tty, cols;          /* stdout is a terminal, its width (0: unknown) */
    double peak;            /* FLOP/s that MFU is measured against, 0: no MFU */
    float recent[GCRT_AVG_STEPS];   /* the last losses, a ring */
    long nrecent;
    double since_ms;        /* step time since the last plain line, and its steps */
    long since_n;
    double t_first_ms;      /* when the run's first step ended, and the steps since */
    long after_first;
    double t_start_ms;      /* when training started */
    gcrt_step_info last;    /* the latest step */
};

int gcrt_progress_start(gcrt_run *st)
{
    const gc_program *p = st->prog;
    struct gcrt_progress *pr = calloc(1, sizeof *pr);
    if (!pr)
        return gcrt_errorf("out of memory");
    st->progress = pr;
    pr->t_start_ms = gcrt_now_ms();
    /* mpirun hands its ranks a pseudo-terminal as stdout and forwards it to
     * wherever its own stdout goes: under MPI, plain lines */
    int mpi = st->ctx.nranks > 1 || getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE");
    pr->tty = !mpi && isatty(STDOUT_FILENO);
    struct winsize ws;
    if (pr->tty && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0)
        pr->cols = ws.ws_col;
    double dev = gc_device_peak_flops(p->bf16);
    const char *src = "--peak-flops";
    pr->peak = st->o.peak_flops;
    if (pr->peak <= 0 && dev > 0)
        pr->peak = dev, src = gc_device_name();
    else if (pr->peak <= 0 && p->peak_flops > 0)
        pr->peak = p->peak_flops, src = p->peak_device ? p->peak_device : "compiled-in profile";
    if (p->flops_per_step > 0) {
        printf("compute: %.6g GFLOP per step (gcompile's count, model FLOPs)", p->flops_per_step / 1e9);
        if (pr->peak > 0)
            printf(" | MFU against %.4g %sFLOP/s (%s)", pr->peak / (pr->peak >= 1e12 ? 1e12 : 1e9),
                   pr->peak >= 1e12 ? "T" : "G", src);
        else
            printf(" | no MFU: peak unknown (--peak-flops X)");
        putchar('\n');
    }
    return 0;
}

void gcrt_progress_free(gcrt_run *st)
{
    free(st->progress);
    st->progress = NULL;
}

static double mean_recent(const struct gcrt_progress *pr)
{
    long n = pr->nrecent < GCRT_AVG_STEPS ? pr->nrecent : GCRT_AVG_STEPS;
    double s = 0;
    for (long i = 0; i < n; i++)
        s += pr->recent[i];
    return n ? s / (double)n : NAN;
}

static double tok_per_s(const gcrt_run *st, double ms) { return (double)st->BT * gcrt_data_ranks(st) / (ms / 1e3); }

static double mfu(const gcrt_run *st, double ms)
{
    double peak = st->progress->peak;
    return peak > 0 && st->prog->flops_per_step > 0 && ms > 0 ? st->prog->flops_per_step / (ms / 1e3) / peak : NAN;
}

/* "1h02m03s", "2m03s", "3s" */
static const char *duration(double s, char *buf, size_t len)
{
    long t = s > 0 && s < 1e9 ? (long)(s + 0.5) : 0;
    if (t >= 3600)
        snprintf(buf, len, "%ldh%02ldm%02lds", t / 3600, t / 60 % 60, t % 60);
    else if (t >= 60)
        snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, len, "%lds", t);
    return buf;
}

/* The plain line of a step (llm.c style; the tests parse "step N/M | loss X"). */
static void plain_line(gcrt_run *st, const gcrt_step_info *si, double ms)
{
    printf("step %4ld/%ld | loss %.6f | lr %.3e", si->step, st->o.steps, si->loss, si->lr);
    if (!isnan(si->gnorm))
        printf(" | norm %.4f", si->gnorm);
    printf(" | %.1f ms | %.0f tok/s", ms, tok_per_s(st, ms));
    if (!isnan(mfu(st, ms)))
        printf(" | MFU %.1f%%", 100.0 * mfu(st, ms));
    if (!isnan(si->val))
        printf(" | val loss %.6f", si->val);
    if (si->skipped)
        printf(" | SKIPPED (non-finite; %lld so far)", st->skipped);
    putchar('\n');
}

/* The status line: rewritten in place, cut to the terminal's width. */
static void status_line(gcrt_run *st, const gcrt_step_info *si)
{
    const struct gcrt_progress *pr = st->progress;
    char line[512], t[32];
    size_t n = 0;
#define ADD(...) (n += (size_t)snprintf(line + n, n < sizeof line ? sizeof line - n : 0, __VA_ARGS__))
    ADD("step %ld/%ld | loss %.4f avg %.4f | lr %.2e", si->step, st->o.steps, si->loss, mean_recent(pr), si->lr);
    if (!isnan(si->gnorm))
        ADD(" | norm %.3f", si->gnorm);
    ADD(" | %.1f ms/step | %.0f tok/s", si->ms, tok_per_s(st, si->ms));
    if (!isnan(mfu(st, si->ms)))
        ADD(" | MFU %.1f%%", 100.0 * mfu(st, si->ms));
    long left = st->o.steps - si->step;
    double per = pr->after_first > 0 ? (gcrt_now_ms() - pr->t_first_ms) / (double)pr->after_first : si->ms;
    ADD(" | ETA %s", duration(left * per / 1e3, t, sizeof t));
    size_t total = gc_device_total_bytes();
    if (total > 0) {   /* CUDA: memory in use on the device (cudaMemGetInfo) vs the plan + its reserve */
        double used = (double)(total - gc_device_free_bytes()), GiB = 1024.0 * 1024.0 * 1024.0;
        ADD(" | mem %.2f GiB, plan %.2f + reserve %.2f", used / GiB,
            (double)gcrt_total_region_bytes(st->prog) / GiB, (double)st->prog->device_reserve_bytes / GiB);
    }
#undef ADD
    if (n >= sizeof line)
        n = sizeof line - 1;
    if (pr->cols > 1 && n > (size_t)pr->cols - 1)   /* a wrapped line could not be rewritten in place */
        n = (size_t)pr->cols - 1;
    gcrt_status_draw(line, n);
}

static void log_step(gcrt_run *st, const gcrt_step_info *si)
{
    fprintf(st->log, "{\"step\":%ld,\"loss\":%.9g,\"ms\":%.3f,\"tok_per_s\":%.1f,\"lr\":%.9g", si->step,
            si->loss, si->ms, tok_per_s(st, si->ms), si->lr);
    if (!isnan(si->gnorm) || si->skipped)   /* JSON has no NaN: a non-finite norm is a string */
        isfinite(si->gnorm) ? fprintf(st->log, ",\"grad_norm\":%.9g", si->gnorm)
                            : fprintf(st->log, ",\"grad_norm\":\"%s\"", isnan(si->gnorm) ? "nan" : "inf");
    else
        fputs(",\"grad_norm\":null", st->log);   /* not measured: the program keeps no gradients */
    if (!isnan(si->val))
        fprintf(st->log, ",\"val_loss\":%.9g", si->val);
    fprintf(st->log, ",\"shard\":%d,\"batch\":%ld", si->shard, si->batch);
    if (si->skipped)
        fprintf(st->log, ",\"skipped\":true,\"skipped_total\":%lld", st->skipped);
    fputs("}\n", st->log);
    gcrt_log_flush(st);
}

void gcrt_log_flush(gcrt_run *st)
{
    errno = 0;
    if ((fflush(st->log) != 0 || ferror(st->log)) && !st->log_errno)
        st->log_errno = errno ? errno : EIO;
}

int gcrt_log_close(gcrt_run *st)
{
    if (!st->log)
        return 0;
    gcrt_log_flush(st);
    errno = 0;
    if (fclose(st->log) != 0 && !st->log_errno)
        st->log_errno = errno ? errno : EIO;
    st->log = NULL;
    return st->log_errno ? gcrt_errorf("%s: cannot write the log: %s", st->o.log, strerror(st->log_errno)) : 0;
}

void gcrt_report_step(gcrt_run *st, const gcrt_step_info *si)
{
    struct gcrt_progress *pr = st->progress;
    if (isfinite(si->loss))
        pr->recent[pr->nrecent++ % GCRT_AVG_STEPS] = si->loss;
    if (si->step == st->first_step)
        pr->t_first_ms = gcrt_now_ms();
    else
        pr->after_first++;
    pr->since_ms += si->ms, pr->since_n++;
    pr->last = *si;
    long every = st->o.print_every;
    int notable = !isnan(si->val) || si->skipped;   /* never hidden between lines */
    int due = every > 0 && (si->step % every == 0 || si->step == st->o.steps);
    int last = si->step == st->o.steps;
    /* off a terminal, without --print-every: every step; on one, a kept line
     * (above the status line) with --print-every, and the last step's line
     * in place of the status line */
    if (due || notable || (!pr->tty && every == 0) || (pr->tty && last)) {
        gcrt_progress_break();
        plain_line(st, si, pr->since_ms / (double)pr->since_n);
        pr->since_ms = 0, pr->since_n = 0;
    }
    if (pr->tty && !last)
        status_line(st, si);
    fflush(stdout);
    if (st->log)
        log_step(st, si);
}

void gcrt_progress_done(gcrt_run *st, double mean_ms, long timed)
{
    struct gcrt_progress *pr = st->progress;
    char t[32];
    gcrt_progress_break();
    printf("done: %ld steps | %.1f ms/step | %.0f tok/s", st->o.steps, mean_ms, tok_per_s(st, mean_ms));
    if (timed > 1)
        printf(" (mean over steps %ld..)", st->first_step + 1);
    if (pr && !isnan(mfu(st, mean_ms)))
        printf(" | MFU %.1f%%", 100.0 * mfu(st, mean_ms));
    if (pr && pr->nrecent > 0)
        printf(" | final loss %.6f, avg of the last %ld %.6f", pr->last.loss,
               pr->nrecent < GCRT_AVG_STEPS ? pr->nrecent : (long)GCRT_AVG_STEPS, mean_recent(pr));
    if (pr)
        printf(" | %s in all", duration((gcrt_now_ms() - pr->t_start_ms) / 1e3, t, sizeof t));
    putchar('\n');
    fflush(stdout);
}
