/* plan_text.c — --emit plan-text: the memory plan for a human. Regions with
 * exact bytes, the arena against its lower bound and against no reuse, the
 * peak step and its op, bytes by tensor kind, the largest arena tensors with
 * their lifetimes (persistent tensors are the regions above). */
#include <stdlib.h>
#include <string.h>

#include "codegen.h"
#include "passes.h"

#define ALIGN 256

static size_t rounded(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

/* "1.23 GiB" into buf. */
static const char *human(size_t n, char *buf, size_t len)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024 && u < 4)
        v /= 1024, u++;
    snprintf(buf, len, u ? "%.2f %s" : "%.0f %s", v, units[u]);
    return buf;
}

/* Live arena bytes at each step (rounded sizes; an in-place parent hands its
 * storage to its child at the child's first step, so it counts until the
 * step before). Returns the step with the most, -1 when there are none. */
int plan_arena_peak(const Graph *g, size_t *peak_bytes)
{
    char *handed = calloc((size_t)g->nt + 1, 1);
    long long *d = calloc((size_t)g->nsched + 1, sizeof *d);
    if (!handed || !d)
        IR_BUG("out of memory");
    for (int i = 0; i < g->nt; i++)
        if (g->t[i].inplace_of >= 0)
            handed[g->t[i].inplace_of] = 1;
    for (int i = 0; i < g->nt; i++) {
        const Tensor *t = &g->t[i];
        if (t->view_of >= 0 || t->region != RG_ARENA || t->first < 0)
            continue;
        int end = t->last - handed[i];
        if (end >= t->first && end < g->nsched) {
            d[t->first] += (long long)rounded(t->bytes);
            d[end + 1] -= (long long)rounded(t->bytes);
        }
    }
    long long run = 0, best = -1;
    int at = -1;
    for (int s = 0; s < g->nsched; s++) {
        run += d[s];
        if (run > best)
            best = run, at = s;
    }
    free(d);
    free(handed);
    if (peak_bytes)
        *peak_bytes = best > 0 ? (size_t)best : 0;
    return at;
}

static int by_bytes_desc(const void *a, const void *b)
{
    const Tensor *x = *(const Tensor *const *)a, *y = *(const Tensor *const *)b;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id);
}

/* The device regions and their total (what --mem is compared with, the
 * CUDA reserve aside), then the host region when the plan has one: not
 * device memory, so not in the total. */
static void regions(FILE *f, const Graph *g, const EmitOptions *opt)
{
    char h[32];
    size_t total = graph_device_bytes(g);
    fprintf(f, "regions:\n");
    for (int r = 0; r < RG_COUNT; r++) {
        if (!region_on_device((Region)r))
            continue;
        fprintf(f, "  %-9s %12s  %15zu bytes", region_name((Region)r),
                human(g->region_bytes[r], h, sizeof h), g->region_bytes[r]);
        if (r == RG_ARENA && g->region_lower_bound[r])
            fprintf(f, "   lower bound %zu (%.4fx)", g->region_lower_bound[r],
                    (double)g->region_bytes[r] / (double)g->region_lower_bound[r]);
        fputc('\n', f);
    }
    fprintf(f, "  %-9s %12s  %15zu bytes", "total", human(total, h, sizeof h), total);
    if (opt && opt->budget_bytes) {
        char b[32];
        fprintf(f, "   budget %s: %s", human(opt->budget_bytes, b, sizeof b),
                total <= opt->budget_bytes ? "fits" : "DOES NOT FIT");
    }
    fputc('\n', f);
    if (!g->region_bytes[RG_HOST])
        return;
    fprintf(f, "  %-9s %12s  %15zu bytes   lower bound %zu; host memory (%s), not in the device total\n", "host",
            human(g->region_bytes[RG_HOST], h, sizeof h), g->region_bytes[RG_HOST], g->region_lower_bound[RG_HOST],
            opt && opt->target && !strcmp(opt->target, "cuda") ? "pinned, cudaHostAlloc" : "a separate allocation");
}

static void reuse(FILE *f, const Graph *g)
{
    char h[32];
    size_t sum = 0;
    for (int i = 0; i < g->nt; i++) {
        const Tensor *t = &g->t[i];
        if (t->view_of < 0 && t->region == RG_ARENA && t->first >= 0)
            sum += rounded(t->bytes);
    }
    int inplace = 0;
    for (int i = 0; i < g->nt; i++)
        inplace += g->t[i].inplace_of >= 0;
    fprintf(f, "arena without reuse (--no-reuse): %s (%zu bytes", human(sum, h, sizeof h), sum);
    if (g->region_bytes[RG_ARENA])
        fprintf(f, ", %.2fx this plan", (double)sum / (double)g->region_bytes[RG_ARENA]);
    fprintf(f, ")%s; %d tensor(s) in place\n", g->no_reuse ? " [this plan is --no-reuse]" : "",
            inplace);
}

static void peak(FILE *f, const Graph *g)
{
    char h[32];
    size_t bytes;
    int s = plan_arena_peak(g, &bytes);
    if (s < 0) {
        fprintf(f, "peak arena step: none (empty schedule)\n");
        return;
    }
    const Op *op = &g->ops[g->sched[s]];
    fprintf(f, "peak arena step: %d of %d, op %s (%s, %s): %s live\n", s, g->nsched, op->name,
            op_info[op->kind].name, op_phase_label(g, op), human(bytes, h, sizeof h));
}

static void kinds(FILE *f, const Graph *g)
{
    size_t bytes[TK_COMM + 1] = {0};
    int count[TK_COMM + 1] = {0};
    char h[32];
    for (int i = 0; i < g->nt; i++)
        if (g->t[i].view_of < 0 && g->t[i].first >= 0) {   /* unused tensors own no storage */
            bytes[g->t[i].kind] += g->t[i].bytes;
            count[g->t[i].kind]++;
        }
    fprintf(f, "bytes by kind (storage tensors, before reuse):\n");
    for (int k = 0; k <= TK_COMM; k++)
        if (count[k])
            fprintf(f, "  %-10s %12s  %15zu bytes  %6d tensors\n",
                    tensor_kind_name((TensorKind)k), human(bytes[k], h, sizeof h), bytes[k],
                    count[k]);
}

/* Which fusions fired and the tensor bytes each took out of the plan (net
 * of what it added, at the activations' dtype); the arena's own saving
 * depends on lifetimes and shows in the regions above. */
static void fusions(FILE *f, const Graph *g, const EmitOptions *opt)
{
    char h[32];
    size_t act = opt && opt->precision && !strcmp(opt->precision, "bf16") ? 2 : 4;
    fprintf(f, "fusions:%s\n", g->nfused ? "" : " none");
    for (int i = 0; i < g->nfused; i++) {
        double b = g->fused[i].elems * (double)act;
        fprintf(f, "  %-10s %4d fused  %12s of tensors removed (%.0f bytes)\n", g->fused[i].kind,
                g->fused[i].count, human(b > 0 ? (size_t)b : 0, h, sizeof h), b);
    }
}

static void largest(FILE *f, const Graph *g, int top)
{
    const Tensor **v = malloc(((size_t)g->nt + 1) * sizeof *v);
    if (!v)
        IR_BUG("out of memory");
    int n = 0;
    for (int i = 0; i < g->nt; i++)
        if (g->t[i].view_of < 0 && g->t[i].region == RG_ARENA && g->t[i].first >= 0)
            v[n++] = &g->t[i];
    qsort(v, (size_t)n, sizeof *v, by_bytes_desc);
    fprintf(f, "largest arena tensors:\n");
    for (int i = 0; i < n && i < top; i++) {
        char h[32], in[48] = "";
        const Tensor *t = v[i];
        if (t->inplace_of >= 0)
            snprintf(in, sizeof in, "  in place of %s", g->t[t->inplace_of].name);
        fprintf(f, "  %-24s %-10s %12s  steps [%d, %d]  %s+%zu%s\n", t->name,
                tensor_kind_name(t->kind), human(t->bytes, h, sizeof h), t->first, t->last,
                region_name(t->region), t->offset, in);
    }
    free(v);
}

/* The memory levers and the prediction: budget, peak, micro-batches,
 * recomputation (ops, tensors, extra FLOPs), predicted time and MFU. */
static void levers(FILE *f, const Graph *g, const EmitOptions *opt)
{
    double base = 0, extra = 0;
    int nops = 0, ntens = 0;
    for (int k = 0; k < g->nsched; k++) {
        const Op *op = &g->ops[g->sched[k]];
        double fl = op_flops(g, op);
        if (op->phase == PH_RECOMPUTE) {
            extra += fl;
            nops++;
            ntens += op->nout;
        } else {
            base += fl;
        }
    }
    size_t total = graph_device_bytes(g);
    char b1[32], b2[32];
    fprintf(f, "strategy: ");
    if (opt && opt->budget_bytes)
        fprintf(f, "budget %s, ", human(opt->budget_bytes, b1, sizeof b1));
    fprintf(f, "peak %s", human(total, b2, sizeof b2));
    if (opt && opt->target && !strcmp(opt->target, "cuda"))   /* what --mem is compared with (codegen.h) */
        fprintf(f, " + CUDA reserve %s = %s", human(GC_CUDA_RESERVE_BYTES, b1, sizeof b1),
                human(total + GC_CUDA_RESERVE_BYTES, b2, sizeof b2));
    fprintf(f, " | %d micro-batch%s | ", g->micro_batches > 1 ? g->micro_batches : 1,
            g->micro_batches > 1 ? "es" : "");
    if (g->offload)
        fprintf(f, "offload %s | ", offload_name(g->offload));
    const char *rl = opt ? opt->recompute_layers : NULL;   /* n, s, f from layer 0 */
    char one[2] = {rl ? rl[0] : 0, 0};
    if (!nops)
        fprintf(f, "no recompute");
    else
        fprintf(f, "recompute %d tensors (%d ops, +%.1f%% FLOPs)", ntens, nops, base > 0 ? 100.0 * extra / base : 0.0);
    if (nops && rl && strspn(rl, one) != strlen(rl))   /* the layers differ */
        fprintf(f, ", per layer %s", rl);
    if (opt && opt->device)
        fprintf(f, " | predicted %.1f ms/step on %s, MFU %.1f%%", opt->predicted_s * 1e3, opt->device,
                100.0 * opt->predicted_mfu);
    fputc('\n', f);
    int shown = 0;   /* the recomputed tensors, in schedule order (the first 24) */
    for (int k = 0; k < g->nsched; k++) {
        const Op *op = &g->ops[g->sched[k]];
        for (int i = 0; op->phase == PH_RECOMPUTE && i < op->nout; i++, shown++)
            if (shown < 24)
                fprintf(f, "%s %s", shown ? "" : "recomputed:", g->t[op->out[i]].name);
    }
    if (shown)
        fprintf(f, "%s\n", shown > 24 ? " ..." : "");
}

/* the parallel split: which, how many collectives, bytes sent per step */
static void split(FILE *f, const Graph *g)
{
    if (g->nranks <= 1)
        return;
    char h[32];
    int ncomm = 0;
    for (int s = 0; s < g->nsched; s++)   /* (not the bf16 copies' refresh: it runs before the steps) */
        ncomm += g->ops[g->sched[s]].phase == PH_COMM && !op_param_refresh(g, &g->ops[g->sched[s]]);
    fprintf(f, "split: %s over %d ranks; this plan is one rank's (rank 0; all ranks plan alike)\n", g->split_name,
            g->nranks);
    fprintf(f, "  collectives: %d per step, %s (%.0f bytes) sent per rank per step (ring algorithms)\n", ncomm,
            human((size_t)g->comm_bytes, h, sizeof h), g->comm_bytes);
    if (g->tp) {
        int cut = 0;
        for (int i = 0; i < g->nparams; i++)
            cut += g->t[g->params[i]].tp_ranks > 0;
        fprintf(f, "  tensor parallel: groups of %d ranks; %d of %d parameters cut (the rest whole on every rank)", g->tp,
                cut, g->nparams);
        if (graph_data_ranks(g) > 1)
            fprintf(f, "; %s over the %d groups", g->split_name + 3, graph_data_ranks(g));
        fputc('\n', f);
    }
    if (g->split_report)
        fputs(g->split_report, f);
}

/* The trainer's --grad-clip needs the global norm before the first update:
 * a plan that keeps every gradient has it after the backward; one that
 * updates inside the backward gets it from a norm pass (one more forward and
 * backward per step, priced by the cost model); say which and what it costs
 * (docs/training.md). */
static void clipping(FILE *f, const Graph *g, const EmitOptions *opt)
{
    char h[32];
    if (g->region_bytes[RG_GRADS] > 0) {
        fprintf(f, "gradient clipping (train --grad-clip): the grads region holds every gradient until the "
                   "updates: %s (%zu bytes); no extra pass\n", human(g->region_bytes[RG_GRADS], h, sizeof h),
                g->region_bytes[RG_GRADS]);
        return;
    }
    fprintf(f, "gradient clipping (train --grad-clip): a norm pass (updates inside the backward): each step runs "
               "the forward and backward twice, the first only adding up the gradients' squares");
    if (opt && opt->device && opt->predicted_s > 0)
        fprintf(f, ", predicted +%.1f ms/step on %s (+%.0f%%)", opt->predicted_norm_pass_s * 1e3, opt->device,
                100.0 * opt->predicted_norm_pass_s / opt->predicted_s);
    size_t grads = 0;   /* one fp32 gradient per parameter element */
    for (int i = 0; i < g->nparams; i++)
        grads += (size_t)g->t[g->params[i]].numel * 4;
    fprintf(f, "; --schedule plain instead keeps every gradient: a grads region of about %s (%zu bytes), the "
               "arena replanned\n", human(grads, h, sizeof h), grads);
}

/* What moved to host memory (passes/offload.c) and what it costs per step:
 * the copies each way, the host update, and what the step waits for them
 * beyond its compute (the cost model's simulation of the copy streams). */
static void offload(FILE *f, const Graph *g, const EmitOptions *opt)
{
    if (!g->offload)
        return;
    char h[32], h2[32];
    size_t opt_bytes = 0, act_bytes = 0;
    long params = 0;
    int nact = 0;
    for (int t = 0; t < g->nt; t++) {
        const Tensor *x = &g->t[t];
        if (x->view_of >= 0 || x->region != RG_HOST)
            continue;
        if (tensor_persistent(x))
            opt_bytes += x->bytes;
        else if (x->first >= 0)
            act_bytes += x->bytes, nact++;
        if (x->kind == TK_PARAM && x->dtype == DT_F32)   /* the masters (not bf16 copies) */
            params += x->numel;
    }
    fprintf(f, "offload: %s to host memory (host region %s)", offload_name(g->offload),
            human(g->region_bytes[RG_HOST], h, sizeof h));
    if (g->offload & OFFLOAD_OPT)
        fprintf(f, "; optimizer: fp32 masters, AdamW moments and gradient copies of %ld parameters (%s), updated on "
                   "the host", params, human(opt_bytes, h2, sizeof h2));
    if (g->offload & OFFLOAD_ACT)
        fprintf(f, "; activations: %d kept across the backward (%s per micro-batch), prefetched a layer ahead", nact,
                human(act_bytes, h2, sizeof h2));
    fputc('\n', f);
    if (opt && opt->device)
        fprintf(f, "  per step: %s device->host, %s host->device; predicted on %s: copies %.1f ms and host update "
                   "%.1f ms on their streams, the step waits %.1f ms for them beyond its compute\n",
                human((size_t)opt->predicted_d2h_bytes, h, sizeof h), human((size_t)opt->predicted_h2d_bytes, h2, sizeof h2),
                opt->device, opt->predicted_copy_s * 1e3, opt->predicted_host_update_s * 1e3,
                opt->predicted_exposed_s * 1e3);
}

/* Kernel launches and bytes moved per step, by phase (ir/ops.c's counts). */
static void traffic(FILE *f, const Graph *g)
{
    long launches[PH_COUNT], nl = 0;
    double bytes[PH_COUNT], nb = 0;
    char h[32];
    graph_step_traffic(g, launches, bytes);
    fprintf(f, "step traffic (CUDA kernel launches, bytes read + written):\n");
    for (int p = 0; p < PH_COUNT; p++) {
        nl += launches[p];
        nb += bytes[p];
        if (launches[p] || bytes[p] > 0)
            fprintf(f, "  %-9s %6ld launches  %12s  %15.0f bytes\n", phase_name((Phase)p), launches[p],
                    human((size_t)bytes[p], h, sizeof h), bytes[p]);
    }
    fprintf(f, "  %-9s %6ld launches  %12s  %15.0f bytes\n", "step", nl, human((size_t)nb, h, sizeof h), nb);
}

void emit_plan_text(FILE *f, const Graph *g, const EmitOptions *opt)
{
    fprintf(f, "memory plan: %s%s%s, target %s, schedule %s, %d steps, %d tensors\n",
            g->file ? g->file : "-", g->config && *g->config ? " --config " : "",
            g->config ? g->config : "", opt && opt->target ? opt->target : "cpu",
            g->schedule_name && *g->schedule_name ? g->schedule_name : "-", g->nsched, g->nt);
    if (g->ndims) {
        fprintf(f, "dims:");
        for (int i = 0; i < g->ndims; i++)
            fprintf(f, " %s=%ld", g->dims[i].name, g->dims[i].value);
        if (g->micro_batches > 1)
            fprintf(f, " | %d micro-batches of B rows per optimizer step", g->micro_batches);
        fputc('\n', f);
    }
    levers(f, g, opt);
    offload(f, g, opt);
    split(f, g);
    regions(f, g, opt);
    reuse(f, g);
    peak(f, g);
    kinds(f, g);
    fusions(f, g, opt);
    largest(f, g, 10);
    traffic(f, g);
    clipping(f, g, opt);
}
