/* costs.c — the cost model (an analysis: predicts, changes nothing).
 *
 * One op's time on a device profile is a roofline plus a launch cost:
 *
 *     t = max(FLOPs / (peak * eff), bytes / bandwidth) + launch
 *
 * FLOPs and bytes come from the op table (op_flops, op_bytes in ir/ops.c),
 * so a new (fused) op is costed by its row there. peak is the matmul peak of
 * the operands' precision for matmuls and the vector peak for everything
 * else. A matmul's efficiency falls with small dimensions:
 *
 *     eff = mm_eff * M/(M+h) * N/(N+h) * K/(K+h)      (h = mm_half)
 *
 * so a micro-batch of few rows costs what it costs (M = rows of the
 * micro-batch). A step is every scheduled op once, the forward, backward and
 * recompute ops once per micro-batch.
 *
 * Clipping by the global norm in a program that updates inside its backward
 * (fused-opt: no gradient outlives its update) costs a norm pass (the
 * trainer's --grad-clip, runtime/train_main.c): the forward and backward run
 * once more, their updates replaced by a sum of squares over the gradient
 * (one read of it: bytes / bandwidth + a launch per update op):
 *
 *     norm_pass = sum over fwd, bwd, recompute, comm ops of t + sum over updates of (4n / bw + launch)
 *
 * A plain-schedule program keeps every gradient in its grads region, so
 * clipping costs it one scale of the gradients, not priced (norm_pass 0).
 *
 * Profiles: the GPUs' numbers are their data-sheet peaks (dense, no
 * sparsity; fp32 on the fp32 units and on TF32 tensor cores), memory the card's, reserve 1.5 GiB for the
 * CUDA context, cuBLAS workspaces and allocator slack. `cpu` is this machine
 * (2 AVX-512 cores of a shared host, AMD Zen 4 or Intel Xeon by the day):
 * the matmul peak 233 GFLOP/s is bench/fma_peak.c's
 * FP32 FMA peak with 2 threads; mm_eff 0.94 and mm_half 32 are the least-
 * squares fit (in log) to 20 matmul shapes timed by --profile in GPT-2 124M
 * steps at T=64 with 4-row batches (M = 256) and 1-row micro-batches
 * (M = 64), where the GEMM reached 117-201 GFLOP/s (2026-12-03; the first
 * fit, 0.84 and 6, priced a 64-row matmul 7% below a 256-row one, against 25%
 * measured); the vector numbers are fitted to --profile runs of the same
 * model. Memory is the machine's RAM (sysconf) less a 2 GiB reserve for the
 * OS.
 *
 * Host offload (passes/offload.c). A program whose plan has copies runs
 * them on copy streams beside the compute stream, and its host updates on
 * the host (runtime: gc_copy, gc_host_update), so the step is simulated: the
 * compute stream runs the kernels in schedule order (fwd, bwd and recompute
 * once per micro-batch); a copy starts when the compute stream has queued
 * it and its stream is free (a prefetch also after the offload that filled
 * its source; the weights a host update wrote after that update) and takes
 * bytes / copy_bw + copy_s; a host update starts when the update stream is
 * free and its gradient's copy is done and takes elements / update_rate +
 * copy_s; a copy_wait holds the compute stream until its copy is done. The
 * step ends when the compute stream does. The devices of one host share it:
 * with r = min(ranks, devices_per_host),
 *
 *     copy_bw = min(link_bw, host_bw / r),   update_rate = host_update_rate / r.
 *
 * GPU profiles state their host: PCIe 4.0 x16 (A100, RTX 4090: 25 GB/s in
 * practice) or 5.0 x16 (H100, H200: 50 GB/s); a two-socket server of 8 GPUs
 * (200 GB/s of host memory, 4e9 AdamW elements/s; H100/H200 hosts 300 GB/s,
 * 6e9) or a workstation of one (RTX 4090: 60 GB/s, 1.5e9). The cpu profile
 * is measured on this machine (2 threads, bench/offload_rates.c,
 * 2026-12-05): gc_host_adamw 6.3e8 elements/s, memcpy 4 GB/s (the CPU
 * target's copies are memcpy: both sides are host memory); there every copy
 * and host update runs at once, in the step's order (sync_copies): the step
 * waits for all of them.
 */
#include <string.h>
#include <unistd.h>

#include "passes.h"

#define GiB (1024.0 * 1024.0 * 1024.0)

static const DeviceProfile profiles[] = {
    /* name, description, matmul {fp32, bf16}, tf32, vector FLOP/s, bandwidth B/s, memory, reserve,
     * launch s, matmul efficiency, matmul half-efficiency dimension;
     * host link B/s, host memory B/s, host AdamW elements/s, devices per host, seconds per copy */
    {"a100-40g", "NVIDIA A100 40GB (SXM)",          {19.5e12, 312e12}, 156e12, 19.5e12, 1.555e12, 40 * GiB, 1.5 * GiB, 4e-6, 0.80, 64,
     25e9, 200e9, 4e9, 8, 10e-6, 0},
    {"a100-80g", "NVIDIA A100 80GB (SXM)",          {19.5e12, 312e12}, 156e12, 19.5e12, 2.039e12, 80 * GiB, 1.5 * GiB, 4e-6, 0.80, 64,
     25e9, 200e9, 4e9, 8, 10e-6, 0},
    {"h100",     "NVIDIA H100 80GB (SXM)",          {67e12, 989e12}, 494.7e12, 67e12,   3.35e12,  80 * GiB, 1.5 * GiB, 4e-6, 0.75, 96,
     50e9, 300e9, 6e9, 8, 10e-6, 0},
    {"h200",     "NVIDIA H200 141GB (SXM)",         {67e12, 989e12}, 494.7e12, 67e12,   4.8e12,   141e9,    1.5 * GiB, 4e-6, 0.75, 96,
     50e9, 300e9, 6e9, 8, 10e-6, 0},
    {"rtx4090",  "NVIDIA GeForce RTX 4090 24GB",    {82.6e12, 165e12}, 82.6e12, 82.6e12, 1.008e12, 24 * GiB, 1.5 * GiB, 4e-6, 0.75, 64,
     25e9, 60e9, 1.5e9, 1, 10e-6, 0},
    {"cpu",      "this machine's CPU (2 threads)",  {233e9, 233e9}, 233e9,  40e9,    30e9,     0,        2 * GiB,   3e-6, 0.94, 32,
     4e9, 18e9, 6.3e8, 1, 2e-6, 1},
};

const DeviceProfile *device_profile(const char *name)
{
    static DeviceProfile cpu;
    for (size_t i = 0; i < sizeof profiles / sizeof profiles[0]; i++) {
        if (strcmp(profiles[i].name, name) != 0)
            continue;
        if (strcmp(name, "cpu") != 0)
            return &profiles[i];
        cpu = profiles[i];
        long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
        cpu.mem_bytes = pages > 0 && psize > 0 ? (double)pages * (double)psize : 16 * GiB;
        return &cpu;
    }
    return NULL;
}

const char *device_profile_names(void) { return "a100-40g, a100-80g, h100, h200, rtx4090, cpu"; }

double device_mem_budget(const DeviceProfile *d)
{
    return d->mem_bytes > d->reserve_bytes ? d->mem_bytes - d->reserve_bytes : 0;
}

static int is_matmul(const Op *op)
{
    return op->kind == OP_MATMUL || op->kind == OP_MATMUL_BIAS || op->kind == OP_MATMUL_BIAS_GELU ||
           op->kind == OP_MATMUL_DGELU || op->kind == OP_MATMUL_DGELU_BGRAD;
}

double op_cost(const Graph *g, const Op *op, const DeviceProfile *d)
{
    if (op_info[op->kind].cls == OPC_VIEW)
        return 0;
    double flops = op_flops(g, op), bytes = op_bytes(g, op), compute;
    long b = 1, M = 0, N = 0, K = 0;
    if (is_matmul(op))
        op_matmul_geom(g, op, &b, &M, &N, &K);
    else if (op->kind == OP_CLASSIFIER) {   /* chunk rows x Vp x C products, three times */
        const Tensor *w = &g->t[op->in[1]];
        M = (long)op->attr[1], N = w->shape[0], K = w->shape[1];
    } else if (op->kind == OP_ATTENTION_GQA || op->kind == OP_ATTENTION_GQA_BWD) {   /* as attention's */
        const Tensor *q = &g->t[op->in[op->kind == OP_ATTENTION_GQA ? 0 : 1]];
        M = N = q->shape[2], K = q->shape[3];
    } else if (op->kind == OP_ATTENTION || op->kind == OP_ATTENTION_BWD) {   /* T x T x hs tiles */
        long geom[12];
        op_attention_geom(g, op, geom);
        M = N = geom[2], K = geom[3];
    }
    if (M > 0) {   /* matmul-bound: efficiency falls with small dimensions */
        double h = d->mm_half;
        double eff = d->mm_eff * (M / (M + h)) * (N / (N + h)) * (K / (K + h));
        int bf16 = op->nin && g->t[op->in[0]].dtype == DT_BF16;
        compute = flops / (d->mm_flops[bf16] * eff);
    } else {
        compute = flops / d->ew_flops;
    }
    double mem = bytes / d->bandwidth;
    return (compute > mem ? compute : mem) + d->launch_s;
}

/* The norm pass's cost of op: op itself, or for an update the sum of
 * squares over its gradient. */
static double norm_pass_cost(const Graph *g, const Op *op, double t, const DeviceProfile *d)
{
    if (op->phase != PH_OPT)
        return t;
    if (op->kind != OP_ADAMW && op->kind != OP_ADAMW_BF16)
        return 0;
    return 4.0 * (double)g->t[op->in[1]].numel / d->bandwidth + d->launch_s;
}

static int runs(const Graph *g, const Op *op)
{
    if (op_param_refresh(g, op))   /* the bf16 copies' refresh: only after the host wrote the masters */
        return 0;
    return op->phase == PH_OPT || g->micro_batches <= 1 ? 1 : g->micro_batches;
}

/* The step of a program with copies and host updates, simulated (see the
 * file comment); t[op id]: each op's compute seconds. Fills c's offload
 * fields and returns the step's seconds. */
static double simulate(const Graph *g, const DeviceProfile *d, const double *t, StepCost *c)
{
    enum { D2H, H2D, UPD };
    int share = g->nranks > 1 ? g->nranks : 1;
    if (share > d->devices_per_host)
        share = d->devices_per_host > 0 ? d->devices_per_host : 1;
    double bw = d->host_bw / share < d->link_bw ? d->host_bw / share : d->link_bw;
    double rate = d->host_update_rate / share;
    double *done = xcalloc((size_t)g->copy_slots + 1, sizeof *done), clock = 0, stream[3] = {0, 0, 0};
    int K = g->micro_batches > 1 ? g->micro_batches : 1;
    for (int m = 0; m < K; m++)
        for (int k = 0; k < g->nsched; k++) {
            const Op *op = &g->ops[g->sched[k]];
            if ((m < K - 1 && runs(g, op) == 1) || op_param_refresh(g, op))
                continue;                 /* once per step: with the last micro-batch; refreshes: not per step */
            int slot = (int)op->attr[0];
            if (op->kind == OP_OFFLOAD || op->kind == OP_PREFETCH) {
                const Tensor *x = &g->t[op->in[0]];
                int s = op->kind == OP_OFFLOAD ? D2H : op->phase == PH_OPT ? UPD : H2D, w = x->producer;
                double start = clock > stream[s] ? clock : stream[s];
                if (s == H2D && w >= 0 && g->ops[w].kind == OP_OFFLOAD && done[(int)g->ops[w].attr[0]] > start)
                    start = done[(int)g->ops[w].attr[0]];
                double dt = (double)x->bytes / bw + d->copy_s;
                if (d->sync_copies)
                    start = clock, clock += dt;
                stream[s] = done[slot] = start + dt;
                c->copy_seconds += dt;
                *(s == D2H ? &c->d2h_bytes : &c->h2d_bytes) += (double)x->bytes;
            } else if (op->kind == OP_COPY_WAIT) {
                clock = clock > done[slot] ? clock : done[slot];
            } else if (op_off_device(g, op)) {   /* a host update, after its gradient's copy */
                int w = g->t[op->in[1]].producer;
                double start = stream[UPD];
                if (w >= 0 && g->ops[w].kind == OP_OFFLOAD && done[(int)g->ops[w].attr[0]] > start)
                    start = done[(int)g->ops[w].attr[0]];
                double dt = (double)g->t[op->in[0]].numel / rate + (op_update_group_len(g, k) > 0 ? d->copy_s : 0);
                if (d->sync_copies)
                    start = clock, clock += dt;
                stream[UPD] = start + dt;
                c->host_update_seconds += dt;
            } else {
                clock += t[op->id];
            }
        }
    free(done);
    return clock;
}

StepCost fill_costs(const Graph *g, const DeviceProfile *d, double *per_op)
{
    StepCost c = {0};
    int bf16 = 0, off = 0;
    double *tt = NULL;
    for (int k = 0; k < g->nsched && !off; k++)
        off = op_off_device(g, &g->ops[g->sched[k]]);
    if (off)
        tt = xcalloc((size_t)g->nops, sizeof *tt);
    for (int k = 0; k < g->nsched; k++) {
        const Op *op = &g->ops[g->sched[k]];
        double t = op_off_device(g, op) ? 0 : op_cost(g, op, d), fl = op_flops(g, op) * runs(g, op);
        if (per_op)
            per_op[op->id] = t;
        if (tt)
            tt[op->id] = t;
        c.seconds += t * runs(g, op);
        c.norm_pass_seconds += norm_pass_cost(g, op, t, d) * runs(g, op);
        if (op->phase == PH_RECOMPUTE)
            c.recompute_flops += fl;
        else
            c.flops += fl;
        bf16 |= is_matmul(op) && g->t[op->in[0]].dtype == DT_BF16;
    }
    if (g->region_bytes[RG_GRADS] > 0)   /* every gradient kept: no norm pass */
        c.norm_pass_seconds = 0;
    {   /* the offloaded optimizer's floor: the compute before the first update, then all of them on the host */
        int share = g->nranks > 1 ? g->nranks : 1, K = g->micro_batches > 1 ? g->micro_batches : 1;
        if (share > d->devices_per_host)
            share = d->devices_per_host > 0 ? d->devices_per_host : 1;
        double before = 0, elems = 0, fb = 0;
        int seen = 0;
        for (int k = 0; k < g->nsched; k++) {
            const Op *op = &g->ops[g->sched[k]];
            int upd = op->kind == OP_ADAMW || op->kind == OP_ADAMW_BF16;
            if (upd)
                elems += (double)g->t[op->in[0]].numel;
            seen |= upd;
            if (!upd && !op_off_device(g, op) && runs(g, op) > 1)
                fb += op_cost(g, op, d);          /* one micro-batch's fwd and bwd */
            if (!seen && !op_off_device(g, op) && !op_param_refresh(g, op))
                before += op_cost(g, op, d);
        }
        c.update_floor = (K - 1) * fb + before + elems / (d->host_update_rate / share);
    }
    if (tt) {                            /* copies and host updates beside the compute */
        double step = simulate(g, d, tt, &c);
        c.offload_exposed = step - c.seconds;
        c.seconds = step;
        free(tt);
    }
    c.peak_flops = d->mm_flops[bf16];
    c.mfu = c.seconds > 0 ? c.flops / c.seconds / c.peak_flops : 0;
    return c;
}
