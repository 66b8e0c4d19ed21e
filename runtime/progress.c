/* progress.c — what a run prints: the header (program, dims, plan, memory),
 * one line per step with its JSONL log record, and the --profile table.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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
    for (int i = 0; i < 8; i++)
        if (dims[i])
            printf(" %s=%ld", names[i], dims[i]);
    if (gcrt_micro_batches(p) > 1)
        printf(" | %d micro-batches of B rows per step (batch %ld rows)", gcrt_micro_batches(p),
               p->B * gcrt_micro_batches(p));
    printf("\nparameters: %s in %d tensors\n", grouped(p->nparam_elems, b1, sizeof b1), p->nparams);
    printf("plan: %s\n", p->plan_summary ? p->plan_summary : "-");
    if (p->nranks > 1)
        printf("split: %s over %d ranks (this plan is one rank's); global batch %ld rows of T = %ld\n", p->split,
               p->nranks, p->B * p->nranks, p->T);
    printf("memory: %s bytes in regions params %zu | grads %zu | optstate %zu | arena %zu\n",
           grouped((long long)gcrt_total_region_bytes(p), b2, sizeof b2), p->region_bytes[0],
           p->region_bytes[1], p->region_bytes[2], p->region_bytes[3]);
    printf("device: %s | threads %d\n", gc_device_name(), max_threads());
}

void gcrt_report_step(gcrt_run *st, const gcrt_step_info *si)
{
    const gc_program *p = st->prog;
    double ms = si->ms, tps = (double)st->BT * st->ctx.nranks / (ms / 1e3), peak = gc_device_peak_flops(p->bf16);
    printf("step %4ld/%ld | loss %.6f | lr %.3e", si->step, st->o.steps, si->loss, si->lr);
    if (!isnan(si->gnorm))
        printf(" | norm %.4f", si->gnorm);
    printf(" | %.1f ms | %.0f tok/s", ms, tps);
    if (peak > 0 && p->flops_per_step > 0)
        printf(" | MFU %.1f%%", 100.0 * p->flops_per_step / (ms / 1e3) / peak);
    if (!isnan(si->val))
        printf(" | val loss %.6f", si->val);
    if (si->skipped)
        printf(" | SKIPPED (non-finite; %lld so far)", st->skipped);
    putchar('\n');
    fflush(stdout);
    if (!st->log)
        return;
    fprintf(st->log, "{\"step\":%ld,\"loss\":%.9g,\"ms\":%.3f,\"tok_per_s\":%.1f,\"lr\":%.9g", si->step,
            si->loss, ms, tps, si->lr);
    if (!isnan(si->gnorm) || si->skipped)   /* JSON has no NaN: a non-finite norm is a string */
        isfinite(si->gnorm) ? fprintf(st->log, ",\"grad_norm\":%.9g", si->gnorm)
                            : fprintf(st->log, ",\"grad_norm\":\"%s\"", isnan(si->gnorm) ? "nan" : "inf");
    if (!isnan(si->val))
        fprintf(st->log, ",\"val_loss\":%.9g", si->val);
    fprintf(st->log, ",\"shard\":%d,\"batch\":%ld", si->shard, si->batch);
    if (si->skipped)
        fprintf(st->log, ",\"skipped\":true,\"skipped_total\":%lld", st->skipped);
    fputs("}\n", st->log);
    fflush(st->log);
}
