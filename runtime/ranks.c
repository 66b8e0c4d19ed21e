/* ranks.c — the data side of programs split over ranks (--gpus N > 1).
 *
 * N ranks with B rows each equal one process with N·B rows: global batch i
 * is tokens [i·N·B·T, i·N·B·T + N·B·T + 1) exactly as a one-process program
 * with N·B rows reads it, and rank r takes its rows r·B … (r+1)·B−1, i.e.
 * tokens from r·B·T on. The position advances and wraps by the global batch.
 *
 * zero3 programs (and zero1-3 of bf16 programs, for their fp32 masters)
 * keep only this rank's shard of each update slice in their params region,
 * tensor-parallel ones (tp) their part of each cut parameter and the rest
 * whole (tp with bf16 zero1/zero2: this rank's shards of that part); the
 * whole parameters (llm.c's layout: init, checkpoints) are cut on the way in
 * and gathered on the way out. Under tp
 * the ranks of a tp group read the same B rows; with N/tp groups (dp or
 * zero over them) group d takes rows d·B … (d+1)·B−1 of a global batch of
 * N/tp·B rows.
 *
 * Also the process group seen from gc_main: join, leave (a failing rank
 * ends the group), the loss averaged over ranks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gc_runtime_internal.h"

void gcrt_shard_next_rank(gcrt_shard *s, int32_t *inputs, int32_t *targets, long BT, int rank, int nranks)
{
    long global = BT * nranks;
    const uint16_t *t = s->tok + s->pos + (long)rank * BT;
    for (long i = 0; i < BT; i++) {
        inputs[i] = t[i];
        targets[i] = t[i + 1];
    }
    s->pos += global;
    if (s->pos + global + 1 > s->ntok)
        s->pos = 0;
}

void gcrt_params_to_shards(const gc_program *p, const float *whole, float *shards, int rank, int nranks)
{
    for (int i = 0; i < p->nshards; i++) {
        long first = p->shards[i][0], k = p->shards[i][1] / nranks;
        memcpy(shards + first / nranks, whole + first + (long)rank * k, (size_t)k * sizeof *whole);
    }
}

void gcrt_params_from_shards(const gc_program *p, const float *shards, float *whole, int rank, int nranks,
                             int group)
{
    for (int i = 0; i < p->nshards; i++) {
        long first = p->shards[i][0], k = p->shards[i][1] / nranks;
        memcpy(whole + first + (long)rank * k, shards + first / nranks, (size_t)k * sizeof *whole);
        p->comm->allgather_floats(whole + first, k, group);
    }
}

/* A program that is not split, started as one of several ranks (mpirun -np
 * N): every copy would train alone and write the same files. The
 * launchers say so in the environment (Open MPI; MPICH and Intel MPI's Hydra). */
static int launched_as_ranks(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    for (int i = 0; i < 2; i++) {
        const char *v = getenv(vars[i]);
        long n = v ? strtol(v, NULL, 10) : 0;
        if (n > 1)
            return gcrt_errorf("this program is not split over ranks (compiled without --gpus N) but runs as one of "
                               "%ld (%s=%s): start it as one process, or compile it with --gpus %ld", n, vars[i], v, n);
    }
    return 0;
}

int gcrt_join_group(gcrt_run *st)
{
    const gc_program *p = st->prog;
    char err[512] = "";
    st->ctx.rank = 0, st->ctx.nranks = 1;
    st->ctx.tp_rank = st->ctx.dp_rank = 0;
    if (!p->comm)
        return launched_as_ranks();
    if (p->comm->init(&st->ctx.rank, &st->ctx.nranks, err, sizeof err) != 0)
        return gcrt_errorf("%s", err);
    if (st->ctx.rank != 0 && !freopen("/dev/null", "w", stdout))
        return gcrt_errorf("rank %d: cannot silence stdout", st->ctx.rank);
    if (st->ctx.nranks != p->nranks)
        return gcrt_errorf("this program was compiled for %d ranks (--gpus %d, split %s) but runs on %d: "
                           "start it with mpirun -np %d", p->nranks, p->nranks, p->split, st->ctx.nranks, p->nranks);
    st->ctx.tp_rank = p->tp ? st->ctx.rank % p->tp : 0;
    st->ctx.dp_rank = p->tp ? st->ctx.rank / p->tp : st->ctx.rank;
    if (p->tp && p->comm->make_groups(p->tp, err, sizeof err) != 0)
        return gcrt_errorf("rank %d: %s", st->ctx.rank, err);
    return 0;
}

void gcrt_leave_group(gcrt_run *st, int status)
{
    const gc_program *p = st->prog;
    if (!p->comm)
        return;
    if (status != 0)
        p->comm->abort(status);
    p->comm->finalize();
}

float gcrt_mean_loss(gcrt_run *st, float loss)
{
    if (st->ctx.nranks <= 1 || st->prog->tp == st->ctx.nranks)   /* tp alone: every rank computed the same loss */
        return loss;
    double sum = loss;
    st->prog->comm->sum_doubles(&sum, 1);
    return (float)(sum / st->ctx.nranks);
}

/* ---- tensor parallel: each parameter cut as its gc_param_info says ---- */

/* rank's part of a cut parameter q: `count` runs of `run` elements; run i
 * starts at element wfirst + i·wstride of the whole and i·run of the part */
typedef struct { long count, run, wstride, wfirst; } tp_part;

static tp_part tp_part_of(const gc_param_info *q, int tp, int rank)
{
    long before = 1, after = 1;
    for (int k = 0; k < q->tp_axis; k++)
        before *= q->shape[k];
    for (int k = q->tp_axis + 1; k < q->rank; k++)
        after *= q->shape[k];
    long F = q->shape[q->tp_axis] / (q->tp_outer * q->tp_inner), inner = q->tp_inner * after;
    return (tp_part){before * q->tp_outer, F / tp * inner, F * inner, (long)rank * (F / tp) * inner};
}

/* this rank's params region from the whole parameters (rank: in its tp group) */
static void tp_cut(const gc_program *p, const float *whole, float *local, int rank)
{
    for (int i = 0; i < p->nparams; i++) {
        const gc_param_info *q = &p->params[i];
        if (!q->tp_outer) {
            memcpy(local + q->local_offset, whole + q->offset, (size_t)q->numel * sizeof *whole);
            continue;
        }
        tp_part c = tp_part_of(q, p->tp, rank);
        for (long k = 0; k < c.count; k++)
            memcpy(local + q->local_offset + k * c.run, whole + q->offset + c.wfirst + k * c.wstride,
                   (size_t)c.run * sizeof *whole);
    }
}

/* the whole parameters from the params regions of this rank's tp group
 * (collective; rank: in the group). Out of host memory ends the group (the
 * others would wait in the all-gather). */
static void tp_gather(const gc_program *p, const float *local, float *whole, int rank)
{
    for (int i = 0; i < p->nparams; i++) {
        const gc_param_info *q = &p->params[i];
        if (!q->tp_outer) {     /* alike on every rank */
            memcpy(whole + q->offset, local + q->local_offset, (size_t)q->numel * sizeof *whole);
            continue;
        }
        long part = q->numel / p->tp;
        float *all = malloc((size_t)q->numel * sizeof *all);
        if (!all) {
            fprintf(stderr, "error: rank %d: out of host memory gathering %s\n", rank, q->name);
            p->comm->abort(1);
            return;
        }
        memcpy(all + (long)rank * part, local + q->local_offset, (size_t)part * sizeof *all);
        p->comm->allgather_floats(all, part, GC_GROUP_TP);
        for (int r = 0; r < p->tp; r++) {
            tp_part c = tp_part_of(q, p->tp, r);
            for (long k = 0; k < c.count; k++)
                memcpy(whole + q->offset + c.wfirst + k * c.wstride, all + (long)r * part + k * c.run,
                       (size_t)c.run * sizeof *whole);
        }
        free(all);
    }
}

/* elements of this rank's part of the parameters (all of them; tp: its
 * parts); ZeRO's shards hold 1/data ranks of that (param_shard_ranks) */
static long local_param_elems(const gc_program *p)
{
    if (!p->tp)
        return p->nparam_elems;
    long n = 0;
    for (int i = 0; i < p->nparams; i++) {
        const gc_param_info *q = &p->params[i];
        long e = q->local_offset + (q->tp_outer ? q->numel / p->tp : q->numel);
        n = e > n ? e : n;
    }
    return n;
}

static int param_shard_ranks(const gcrt_run *st) { return st->prog->nshards ? gcrt_data_ranks(st) : 1; }

void gcrt_upload_shards(gcrt_run *st)
{
    const gc_program *p = st->prog;
    long n = local_param_elems(p), ns = n / param_shard_ranks(st);
    float *local = p->tp ? malloc((size_t)(n ? n : 1) * sizeof *local) : st->params;
    float *shards = p->nshards ? malloc((size_t)(ns ? ns : 1) * sizeof *shards) : local;
    if (!local || !shards) {
        fprintf(stderr, "error: out of host memory\n");
        exit(1);
    }
    if (p->tp)
        tp_cut(p, st->params, local, st->ctx.tp_rank);
    if (p->nshards)   /* ZeRO over the data ranks (with tp: of this part) */
        gcrt_params_to_shards(p, local, shards, st->ctx.dp_rank, param_shard_ranks(st));
    gc_device_upload(st->ctx.region[GC_REGION_PARAMS], shards, (size_t)ns * 4);
    if (shards != local)
        free(shards);
    if (local != st->params)
        free(local);
}

int gcrt_download_shards(gcrt_run *st)
{
    const gc_program *p = st->prog;
    long n = local_param_elems(p), ns = n / param_shard_ranks(st);
    float *local = p->tp ? malloc((size_t)(n ? n : 1) * sizeof *local) : st->params;
    float *shards = p->nshards ? malloc((size_t)(ns ? ns : 1) * sizeof *shards) : local;
    if (!local || !shards) {
        if (local != st->params)
            free(local);
        if (shards != local)
            free(shards);
        return gcrt_errorf("out of host memory");
    }
    gc_device_download(shards, st->ctx.region[GC_REGION_PARAMS], (size_t)ns * 4);
    if (p->nshards)
        gcrt_params_from_shards(p, shards, local, st->ctx.dp_rank, param_shard_ranks(st),
                                p->tp ? GC_GROUP_DP : GC_GROUP_ALL);
    if (p->tp)
        tp_gather(p, local, st->params, st->ctx.tp_rank);
    if (shards != local)
        free(shards);
    if (local != st->params)
        free(local);
    return 0;
}
